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

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions, CloseCursor, ContextModifier, DiscardObject, Expr, FunctionArg,
    FunctionArgExpr, FunctionArguments, ObjectName, Query, Reset, ResetStatement, SelectItem, Set,
    SetExpr, Statement, Value,
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

/// The `set_config(name, value, is_local)` calls of a query, each with
/// constant arguments (the name lower-cased), checked as `SET` checks them;
/// the caller applies them with [`apply_set_config`] once the query has
/// succeeded. They must stand in the select list of a query without
/// `FROM` (as clients write them), where each runs exactly once; elsewhere
/// whether a call runs depends on rows, so it is refused.
pub(crate) fn set_config_calls(
    parameters: &Parameters,
    query: &Query,
) -> RsResult<Vec<(String, String, bool)>> {
    let refused = |why: &str| {
        Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            format!("set_config() {why}"),
        ))
    };
    let mut all = 0;
    let _ = visit_expressions(query, |expr: &Expr| {
        if is_set_config(expr) {
            all += 1;
        }
        ControlFlow::<()>::Continue(())
    });
    if all == 0 {
        return Ok(Vec::new());
    }
    let select = match query.body.as_ref() {
        SetExpr::Select(select) if select.from.is_empty() && select.selection.is_none() => select,
        _ => return refused("is supported in the select list of a query without FROM only"),
    };
    let mut calls = Vec::new();
    for item in &select.projection {
        let (SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. }) = item else {
            continue;
        };
        if !is_set_config(expr) {
            continue;
        }
        let Expr::Function(function) = expr else {
            continue;
        };
        let arguments: Vec<Option<String>> = match &function.args {
            FunctionArguments::List(list) => list.args.iter().map(constant_argument).collect(),
            _ => Vec::new(),
        };
        let [Some(name), Some(value), Some(local)] = arguments.as_slice() else {
            return refused("is supported with constant arguments only");
        };
        let local = match local.to_lowercase().as_str() {
            "true" | "t" | "on" | "yes" | "y" | "1" => true,
            "false" | "f" | "off" | "no" | "n" | "0" => false,
            _ => {
                return Err(RsError::new(
                    &codes::INVALID_PARAMETER_VALUE,
                    format!("invalid input syntax for type boolean: \"{local}\""),
                ))
            }
        };
        let name = name.to_lowercase();
        if matches!(
            name.as_str(),
            "transaction_isolation" | "default_transaction_isolation"
        ) {
            return refused("cannot set the isolation level: use SET TRANSACTION ISOLATION LEVEL");
        }
        calls.push((name, value.clone(), local));
    }
    if calls.len() != all {
        return refused("is supported in the select list of a query without FROM only");
    }
    let mut checked = parameters.clone();
    for (name, value, _) in &calls {
        set(
            &mut checked,
            name,
            &[Expr::value(Value::SingleQuotedString(value.clone()))],
        )?;
    }
    Ok(calls)
}

fn is_set_config(expr: &Expr) -> bool {
    matches!(expr, Expr::Function(function) if function
        .name
        .0
        .last()
        .and_then(|part| part.as_ident())
        .is_some_and(|ident| ident.value.eq_ignore_ascii_case("set_config")))
}

/// A constant argument's text: a string or boolean literal, also as bound
/// parameters arrive (`CAST('value' AS TEXT)`).
fn constant_argument(argument: &FunctionArg) -> Option<String> {
    let FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) = argument else {
        return None;
    };
    let expr = match expr {
        Expr::Cast { expr, .. } => expr.as_ref(),
        expr => expr,
    };
    match expr {
        Expr::Value(value) => match &value.value {
            Value::SingleQuotedString(text) => Some(text.clone()),
            Value::Boolean(flag) => Some(flag.to_string()),
            _ => None,
        },
        _ => None,
    }
}

/// Applies a succeeded query's `set_config` calls ([`set_config_calls`]):
/// as `SET`, or `SET LOCAL` when `is_local`.
pub(crate) fn apply_set_config(
    session: &mut GatewaySession,
    calls: Vec<(String, String, bool)>,
    in_explicit: bool,
) -> RsResult<()> {
    for (name, value, local) in calls {
        if local && !in_explicit {
            continue;
        }
        if local {
            if let Some(transaction) = session.transaction.as_mut() {
                transaction
                    .before_set_local
                    .get_or_insert_with(|| session.parameters.clone());
            }
        }
        set(
            &mut session.parameters,
            &name,
            &[Expr::value(Value::SingleQuotedString(value))],
        )?;
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
    Ok(StatementResult::command(tag))
}
