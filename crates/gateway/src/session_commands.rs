//! Statements about the session rather than the data: `SET` and `RESET` of
//! the settings RockStream keeps (`statement_timeout`), `RESET ALL`,
//! `DISCARD`, `DEALLOCATE`, `CLOSE` and `UNLISTEN`.
//!
//! Connection pools send the last five to clean a connection before they
//! lend it again (asyncpg: `SELECT pg_advisory_unlock_all(); CLOSE ALL;
//! UNLISTEN *; RESET ALL`; psycopg 3 and pgbouncer: `DEALLOCATE ALL`,
//! `DISCARD ALL`). RockStream has no cursors, listeners, sequences,
//! temporary tables or cached plans, so those parts have nothing to undo;
//! what it has (settings, prepared statements) they reset as PostgreSQL
//! does.

use datafusion::sql::sqlparser::ast::{
    CloseCursor, ContextModifier, DiscardObject, Expr, ObjectName, Reset, ResetStatement, Set,
    Statement, Value,
};
use rockstream_pgwire::StatementResult;
use rockstream_types::{codes, RsError, RsResult};

use crate::session::{GatewaySession, Isolation};
use crate::statement_limits::parse_timeout;

/// Whether [`run`] handles `statement`.
pub(crate) fn handles(statement: &Statement) -> bool {
    match statement {
        Statement::Set(Set::SingleAssignment { variable, .. }) => is_statement_timeout(variable),
        Statement::Reset(_)
        | Statement::Discard { .. }
        | Statement::Deallocate { .. }
        | Statement::Close { .. } => true,
        Statement::UNLISTEN { .. } => true,
        _ => false,
    }
}

/// Runs a statement [`handles`] accepts.
pub(crate) fn run(
    session: &mut GatewaySession,
    statement: &Statement,
    in_explicit: bool,
) -> RsResult<StatementResult> {
    match statement {
        Statement::Set(Set::SingleAssignment { scope, values, .. }) => {
            if matches!(scope, Some(ContextModifier::Local)) {
                return Err(RsError::new(
                    &codes::UNSUPPORTED_STATEMENT,
                    "SET LOCAL statement_timeout is not supported; use SET statement_timeout (for the session)",
                ));
            }
            session.statement_timeout = timeout_value(values)?;
            command("SET")
        }
        Statement::Reset(ResetStatement { reset }) => {
            match reset {
                Reset::ALL => reset_all(session),
                Reset::ConfigurationParameter(variable) if is_statement_timeout(variable) => {
                    session.statement_timeout = None;
                }
                // As `SET` of a setting RockStream does not keep.
                Reset::ConfigurationParameter(_) => {}
            }
            command("RESET")
        }
        Statement::Discard { object_type } => {
            if in_explicit {
                return Err(RsError::new(
                    &codes::NOT_IN_TRANSACTION_BLOCK,
                    format!("DISCARD {object_type} cannot run inside a transaction block"),
                ));
            }
            // DEALLOCATE ALL, CLOSE ALL and UNLISTEN * are part of it too,
            // and leave nothing to undo (see `StatementResult::Deallocate`).
            if matches!(object_type, DiscardObject::ALL) {
                reset_all(session);
            }
            command(&format!("DISCARD {object_type}"))
        }
        Statement::Deallocate { name, .. } => {
            let name = (!name.value.eq_ignore_ascii_case("all") || name.quote_style.is_some())
                .then(|| name.value.clone());
            Ok(StatementResult::Deallocate { name })
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

/// Whether a `SET`/`RESET` names `statement_timeout`.
fn is_statement_timeout(variable: &ObjectName) -> bool {
    variable
        .to_string()
        .eq_ignore_ascii_case("statement_timeout")
}

fn command(tag: &str) -> RsResult<StatementResult> {
    Ok(StatementResult::Command {
        tag: tag.to_string(),
    })
}
