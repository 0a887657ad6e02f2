//! Transaction control: `BEGIN`, `COMMIT`, `ROLLBACK`, savepoints, and the
//! isolation level (`SET TRANSACTION`, `SET SESSION CHARACTERISTICS`, and
//! the same as the `transaction_isolation` parameters).

use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, Ident, ObjectName, TransactionIsolationLevel, TransactionMode, Value,
};
use rockstream_pgwire::StatementResult;
use rockstream_types::{codes, RsError, RsResult};

use crate::backend::Gateway;
use crate::ddl::ident_name;
use crate::session::{GatewaySession, Isolation, SavepointCommand, Transaction};

/// `BEGIN [ISOLATION LEVEL ...]`; inside a transaction block it changes
/// nothing (PostgreSQL warns).
pub(crate) fn begin(
    session: &mut GatewaySession,
    modes: &[TransactionMode],
    in_explicit: bool,
) -> RsResult<StatementResult> {
    let isolation = requested_isolation(modes)?.unwrap_or(session.default_isolation);
    if !in_explicit {
        let mut transaction = Transaction::default();
        transaction.explicit = true;
        transaction.isolation = isolation;
        session.transaction = Some(transaction);
    }
    Ok(StatementResult::command("BEGIN"))
}

/// `SET [SESSION CHARACTERISTICS AS] TRANSACTION modes`.
pub(crate) fn set_transaction(
    session: &mut GatewaySession,
    modes: &[TransactionMode],
    for_session: bool,
) -> RsResult<StatementResult> {
    match requested_isolation(modes)? {
        Some(isolation) => set_isolation(session, isolation, for_session),
        None => Ok(StatementResult::command("SET")),
    }
}

/// `SET [default_]transaction_isolation = value`: the same, spelled as a
/// configuration parameter.
pub(crate) fn set_isolation_parameter(
    session: &mut GatewaySession,
    variable: &ObjectName,
    values: &[SqlExpr],
) -> RsResult<StatementResult> {
    let for_session = isolation_parameter(variable) == Some(true);
    let [value] = values else {
        return Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            format!("SET {variable} takes one value"),
        ));
    };
    set_isolation(session, isolation_named(value)?, for_session)
}

/// `ROLLBACK` (of the whole transaction; outside one it changes nothing).
pub(crate) fn rollback(session: &mut GatewaySession) -> RsResult<StatementResult> {
    if session.end_transaction().is_some() {
        session.close_transaction_cursors(false);
    }
    Ok(StatementResult::command("ROLLBACK"))
}

/// `SAVEPOINT`, `RELEASE [SAVEPOINT]` and `ROLLBACK TO [SAVEPOINT]`,
/// answered with `tag`.
pub(crate) fn savepoint(
    session: &mut GatewaySession,
    command: SavepointCommand,
    name: &Ident,
    tag: &str,
) -> RsResult<StatementResult> {
    session.savepoint_command(command, &ident_name(name))?;
    Ok(StatementResult::command(tag))
}

impl Gateway {
    /// `COMMIT`: a failed transaction rolls back instead, as in PostgreSQL.
    pub(crate) async fn commit_statement(
        &self,
        session: &mut GatewaySession,
    ) -> RsResult<StatementResult> {
        let Some(transaction) = session.end_transaction() else {
            return Ok(StatementResult::command("COMMIT"));
        };
        if transaction.aborted {
            session.close_transaction_cursors(false);
            return Ok(StatementResult::command("ROLLBACK"));
        }
        let committed = self.commit(&session.namespace, transaction).await;
        session.close_transaction_cursors(committed.is_ok());
        crate::backend::tell_late_rows(session, committed?);
        Ok(StatementResult::command("COMMIT"))
    }
}

/// `SET TRANSACTION ISOLATION LEVEL` (`for_session`: `SET SESSION
/// CHARACTERISTICS AS TRANSACTION ...`). Inside a transaction block the level
/// can change only before the first query; outside one PostgreSQL warns and
/// changes nothing.
fn set_isolation(
    session: &mut GatewaySession,
    isolation: Isolation,
    for_session: bool,
) -> RsResult<StatementResult> {
    if for_session {
        session.default_isolation = isolation;
    } else if let Some(transaction) = session.transaction.as_mut().filter(|t| t.explicit) {
        if transaction.started && transaction.isolation != isolation {
            return Err(RsError::new(
                &codes::ISOLATION_SET_TOO_LATE,
                "SET TRANSACTION ISOLATION LEVEL must be called before any query",
            ));
        }
        transaction.isolation = isolation;
    }
    Ok(StatementResult::command("SET"))
}

/// For `transaction_isolation` (`Some(false)`) and
/// `default_transaction_isolation` (`Some(true)`: the session's default).
pub(crate) fn isolation_parameter(variable: &ObjectName) -> Option<bool> {
    let name = variable.0.last()?.as_ident()?.value.to_lowercase();
    match name.as_str() {
        "transaction_isolation" => Some(false),
        "default_transaction_isolation" => Some(true),
        _ => None,
    }
}

/// An isolation level named as a parameter value (`'repeatable read'`).
fn isolation_named(value: &SqlExpr) -> RsResult<Isolation> {
    let text = match value {
        SqlExpr::Value(value) => match &value.value {
            Value::SingleQuotedString(text) => text.clone(),
            other => other.to_string(),
        },
        other => other.to_string(),
    };
    let level = match text
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .as_str()
    {
        "read uncommitted" | "read committed" | "default" => {
            TransactionIsolationLevel::ReadCommitted
        }
        "repeatable read" => TransactionIsolationLevel::RepeatableRead,
        "serializable" => TransactionIsolationLevel::Serializable,
        other => {
            return Err(RsError::new(
                &codes::INVALID_INPUT_VALUE,
                format!("invalid value for parameter \"transaction_isolation\": \"{other}\""),
            ))
        }
    };
    Ok(requested_isolation(&[TransactionMode::IsolationLevel(level)])?.unwrap_or_default())
}

/// The isolation level `modes` ask for, if any. SERIALIZABLE is refused:
/// RockStream does not detect the read/write dependencies it needs.
fn requested_isolation(modes: &[TransactionMode]) -> RsResult<Option<Isolation>> {
    let mut isolation = None;
    for mode in modes {
        if let TransactionMode::IsolationLevel(level) = mode {
            isolation = Some(match level {
                TransactionIsolationLevel::ReadUncommitted
                | TransactionIsolationLevel::ReadCommitted => Isolation::ReadCommitted,
                TransactionIsolationLevel::RepeatableRead | TransactionIsolationLevel::Snapshot => {
                    Isolation::RepeatableRead
                }
                TransactionIsolationLevel::Serializable => {
                    return Err(RsError::new(
                        &codes::ISOLATION_SERIALIZABLE_NOT_SUPPORTED,
                        "SERIALIZABLE isolation is not supported",
                    ))
                }
            });
        }
    }
    Ok(isolation)
}
