//! Statements about the session rather than the data: `SET` and `RESET` of
//! a parameter (see `settings` for which), `RESET ALL`, `DISCARD`,
//! `DEALLOCATE`, `CLOSE` and `UNLISTEN`.
//!
//! Connection pools send the last five to clean a connection before they
//! lend it again (asyncpg: `SELECT pg_advisory_unlock_all(); CLOSE ALL;
//! UNLISTEN *; RESET ALL`; psycopg 3 and pgbouncer: `DEALLOCATE ALL`,
//! `DISCARD ALL`). RockStream has no listeners, sequences, temporary tables
//! or cached plans, so those parts have nothing to undo; what it has
//! (settings, cursors, the statements the client prepared) they reset as
//! PostgreSQL does.

use datafusion::sql::sqlparser::ast::{
    CloseCursor, ContextModifier, DiscardObject, Expr, ObjectName, Reset, ResetStatement, Set,
    Statement, Value,
};
use rockstream_pgwire::{PreparedStatements, StatementResult};
use rockstream_types::{codes, RsError, RsResult};

use crate::session::{GatewaySession, Isolation, Parameters};
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
            let name = parameter_name(variable);
            let local = matches!(scope, Some(ContextModifier::Local));
            // SET LOCAL outside BEGIN has no effect (PostgreSQL warns).
            if local && !in_explicit {
                return command("SET");
            }
            if local {
                if let Some(transaction) = session.transaction.as_mut() {
                    transaction
                        .before_set_local
                        .get_or_insert_with(|| session.parameters.clone());
                }
            }
            set(&mut session.parameters, &name, values)?;
            command("SET")
        }
        Statement::Reset(ResetStatement { reset }) => {
            match reset {
                Reset::ALL => reset_all(session),
                Reset::ConfigurationParameter(variable) => {
                    let name = parameter_name(variable);
                    if let Some(timeout) = session.parameters.timeout_mut(&name) {
                        *timeout = None;
                    }
                    match name.as_str() {
                        "default_transaction_isolation" => {
                            session.default_isolation = Isolation::default();
                        }
                        name if !FIXED_PARAMETERS.contains(&name) && !is_settable(name) => {
                            return Err(unrecognized(name));
                        }
                        _ => {}
                    }
                    session.parameters.settings.remove(&name);
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
                session.cursors.clear();
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
            CloseCursor::All => {
                session.cursors.clear();
                command("CLOSE CURSOR ALL")
            }
            CloseCursor::Specific { name } => {
                let name = match name.quote_style {
                    Some(_) => name.value.clone(),
                    None => name.value.to_lowercase(),
                };
                match session.cursors.remove(&name) {
                    Some(_) => command("CLOSE CURSOR"),
                    None => Err(RsError::new(
                        &codes::UNDEFINED_CURSOR,
                        format!("cursor \"{name}\" does not exist"),
                    )),
                }
            }
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
    session.parameters = Parameters::default();
    session.default_isolation = Isolation::default();
}

/// `SET name = values` (or `TO`), for the session or, once the caller has
/// saved what to restore, `LOCAL`.
fn set(parameters: &mut Parameters, name: &str, values: &[Expr]) -> RsResult<()> {
    let default =
        matches!(values, [Expr::Identifier(word)] if word.value.eq_ignore_ascii_case("default"));
    let text = || {
        let value: Vec<String> = values.iter().map(value_text).collect();
        value.join(", ")
    };
    if let Some(timeout) = parameters.timeout_mut(name) {
        *timeout = if default {
            None
        } else {
            parse_timeout(name, &text())?
        };
        return Ok(());
    }
    match name {
        // Accepted; SHOW keeps answering RockStream's value.
        name if FIXED_PARAMETERS.contains(&name) => {}
        "default_transaction_read_only" | "transaction_read_only" if !default => {
            if !matches!(text().to_lowercase().as_str(), "off" | "false" | "0" | "no") {
                return Err(RsError::new(
                    &codes::UNSUPPORTED_STATEMENT,
                    format!(
                        "{name} = {} is not supported: transactions are read-write",
                        text()
                    ),
                ));
            }
        }
        name if is_settable(name) => {
            if default {
                parameters.settings.remove(name);
            } else {
                parameters.settings.insert(name.to_string(), text());
            }
        }
        name => return Err(unrecognized(name)),
    }
    Ok(())
}

/// A parameter's name as PostgreSQL looks it up: its parts' values (quotes
/// removed), lower case, joined by dots.
fn parameter_name(variable: &ObjectName) -> String {
    variable
        .0
        .iter()
        .map(|part| match part.as_ident() {
            Some(ident) => ident.value.to_lowercase(),
            None => part.to_string().to_lowercase(),
        })
        .collect::<Vec<_>>()
        .join(".")
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

fn command(tag: &str) -> RsResult<StatementResult> {
    Ok(StatementResult::Command {
        tag: tag.to_string(),
    })
}
