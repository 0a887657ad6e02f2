//! Statements about the session rather than the data: `SET` and `RESET` of
//! a parameter (see `settings` for which), `RESET ALL`, `DISCARD`,
//! `DEALLOCATE`, `CLOSE` and `UNLISTEN`.
//!
//! Connection pools send the last five to clean a connection before they
//! lend it again (asyncpg: `SELECT pg_advisory_unlock_all(); CLOSE ALL;
//! UNLISTEN *; RESET ALL`; psycopg 3 and pgbouncer: `DEALLOCATE ALL`,
//! `DISCARD ALL`). RockStream has no cursors, listeners, sequences,
//! temporary tables or cached plans, so those parts have nothing to undo;
//! what it has (settings, the statements the client prepared) they reset as
//! PostgreSQL does.

use datafusion::sql::sqlparser::ast::{
    CloseCursor, ContextModifier, DiscardObject, Expr, Reset, ResetStatement, Set, Statement, Value,
};
use rockstream_pgwire::{PreparedStatements, StatementResult};
use rockstream_types::{codes, RsError, RsResult};

use crate::session::{GatewaySession, Isolation};
use crate::settings::is_settable;
use crate::statement_limits::parse_timeout;

/// Whether [`run`] handles `statement`.
pub(crate) fn handles(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::Set(Set::SingleAssignment { .. })
            | Statement::Reset(_)
            | Statement::Discard { .. }
            | Statement::Deallocate { .. }
            | Statement::Close { .. }
            | Statement::UNLISTEN { .. }
    )
}

/// Runs a statement [`handles`] accepts.
pub(crate) fn run(
    session: &mut GatewaySession,
    statement: &Statement,
    in_explicit: bool,
    prepared: &dyn PreparedStatements,
) -> RsResult<StatementResult> {
    match statement {
        Statement::Set(Set::SingleAssignment {
            scope,
            variable,
            values,
            ..
        }) => {
            let name = variable.to_string().to_lowercase();
            if matches!(scope, Some(ContextModifier::Local)) {
                return Err(RsError::new(
                    &codes::UNSUPPORTED_STATEMENT,
                    format!("SET LOCAL {name} is not supported; use SET {name} (for the session)"),
                ));
            }
            if name == "statement_timeout" {
                session.statement_timeout = timeout_value(values)?;
            } else if FIXED_PARAMETERS.contains(&name.as_str()) {
                // Accepted; SHOW keeps answering RockStream's value.
            } else if is_settable(&name) {
                match values.as_slice() {
                    [Expr::Identifier(word)] if word.value.eq_ignore_ascii_case("default") => {
                        session.settings.remove(&name);
                    }
                    values => {
                        let value: Vec<String> = values.iter().map(value_text).collect();
                        session.settings.insert(name, value.join(", "));
                    }
                }
            } else {
                return Err(unrecognized(&name));
            }
            command("SET")
        }
        Statement::Reset(ResetStatement { reset }) => {
            match reset {
                Reset::ALL => reset_all(session),
                Reset::ConfigurationParameter(variable) => {
                    let name = variable.to_string().to_lowercase();
                    if name == "statement_timeout" {
                        session.statement_timeout = None;
                    } else if !FIXED_PARAMETERS.contains(&name.as_str()) && !is_settable(&name) {
                        return Err(unrecognized(&name));
                    }
                    session.settings.remove(&name);
                }
            }
            command("RESET")
        }
        Statement::Discard { object_type } => {
            if in_explicit && matches!(object_type, DiscardObject::ALL) {
                return Err(RsError::new(
                    &codes::NOT_IN_TRANSACTION_BLOCK,
                    format!("DISCARD {object_type} cannot run inside a transaction block"),
                ));
            }
            // Also CLOSE ALL and UNLISTEN *, which have nothing to undo.
            if matches!(object_type, DiscardObject::ALL) {
                reset_all(session);
                prepared.forget_all();
            }
            command(&format!("DISCARD {object_type}"))
        }
        Statement::Deallocate { name, .. } => {
            if name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all") {
                prepared.forget_all();
                return command("DEALLOCATE ALL");
            }
            // An unquoted name folds to lower case, as every identifier.
            let name = match name.quote_style {
                Some(_) => name.value.clone(),
                None => name.value.to_lowercase(),
            };
            if !prepared.forget(&name) {
                return Err(RsError::new(
                    &codes::UNDEFINED_PREPARED_STATEMENT,
                    format!("prepared statement \"{name}\" does not exist"),
                ));
            }
            command("DEALLOCATE")
        }
        Statement::Close { cursor } => match cursor {
            CloseCursor::All => command("CLOSE CURSOR ALL"),
            CloseCursor::Specific { name } => Err(RsError::new(
                &codes::UNDEFINED_CURSOR,
                format!("cursor \"{}\" does not exist", name.value),
            )),
        },
        // No channel is ever listened to, so there is none to stop.
        Statement::UNLISTEN { .. } => command("UNLISTEN"),
        other => Err(RsError::internal(format!(
            "not a session statement: {other}"
        ))),
    }
}

/// `RESET ALL`: every setting the session keeps back to its default.
fn reset_all(session: &mut GatewaySession) {
    session.statement_timeout = None;
    session.default_isolation = Isolation::default();
    session.settings.clear();
}

/// Parameters whose value RockStream fixes (`SHOW` answers it): a `SET`
/// is accepted, as drivers send them when they connect.
const FIXED_PARAMETERS: &[&str] = &[
    "client_encoding",
    "datestyle",
    "intervalstyle",
    "standard_conforming_strings",
    "timezone",
];

/// PostgreSQL's error for a parameter it does not know.
pub(crate) fn unrecognized(name: &str) -> RsError {
    RsError::new(
        &codes::UNRECOGNIZED_PARAMETER,
        format!("unrecognized configuration parameter \"{name}\""),
    )
}

/// A `SET` value as `SHOW` prints it: strings without their quotes.
fn value_text(value: &Expr) -> String {
    match value {
        Expr::Value(value) => match &value.value {
            Value::SingleQuotedString(text) | Value::Number(text, _) => text.clone(),
            other => other.to_string(),
        },
        Expr::Identifier(word) => word.value.clone(),
        other => other.to_string(),
    }
}

/// The value of `SET statement_timeout = ...` (`DEFAULT` included).
fn timeout_value(values: &[Expr]) -> RsResult<Option<std::time::Duration>> {
    match values {
        [Expr::Identifier(word)] if word.value.eq_ignore_ascii_case("default") => Ok(None),
        [Expr::Value(value)] => match &value.value {
            Value::Number(text, _) | Value::SingleQuotedString(text) => parse_timeout(text),
            other => parse_timeout(&other.to_string()),
        },
        other => {
            let text: Vec<String> = other.iter().map(ToString::to_string).collect();
            parse_timeout(&text.join(" "))
        }
    }
}

fn command(tag: &str) -> RsResult<StatementResult> {
    Ok(StatementResult::Command {
        tag: tag.to_string(),
    })
}
