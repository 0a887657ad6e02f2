//! `CREATE FUNCTION … LANGUAGE SQL` and `DROP FUNCTION` (RFC 0012).
//!
//! A function's body is one scalar expression over its arguments, which
//! every call inlines (`rockstream_planner::SqlFunction`). Anything else a
//! `CREATE FUNCTION` may say that is not built (PL/pgSQL, set-returning
//! functions, argument defaults, `SECURITY DEFINER`) is refused, naming it.

use datafusion::sql::sqlparser::ast::{
    ArgMode, CreateFunction, CreateFunctionBody, DataType, DropBehavior, DropFunction, Expr,
    FunctionBehavior, FunctionCalledOnNull, FunctionReturnType, FunctionSecurity, ObjectName,
    SelectItem, SetExpr, Statement, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rockstream_control::{Database, FunctionArgument, FunctionEntry, ANY_NUMERIC};
use rockstream_planner::{
    normalize_interval_literals, normalize_number_literals, normalize_type_spellings,
};
use rockstream_types::{codes, RsError, RsResult};

use crate::ddl::column_type_name;
use rockstream_pgwire::StatementResult;

/// `CREATE [OR REPLACE] FUNCTION name(args) RETURNS type LANGUAGE SQL AS
/// $$SELECT expression$$` (or `RETURN expression`), in `namespace`.
pub(crate) async fn create_function(
    database: &Database,
    namespace: &str,
    create: &CreateFunction,
) -> RsResult<StatementResult> {
    refuse_unsupported(create)?;
    let name = function_name(&create.name)?;
    let arguments = create
        .args
        .iter()
        .flatten()
        .map(|argument| {
            if matches!(argument.mode, Some(ArgMode::Out | ArgMode::InOut)) {
                return Err(not_supported(format!(
                    "OUT and INOUT arguments (function {name})"
                )));
            }
            if argument.default_expr.is_some() {
                return Err(not_supported(format!(
                    "argument defaults (function {name})"
                )));
            }
            Ok(FunctionArgument {
                name: argument.name.as_ref().map(folded),
                type_name: function_type_name(&argument.data_type)?,
            })
        })
        .collect::<RsResult<Vec<_>>>()?;
    if let Some(repeated) = arguments.iter().enumerate().find_map(|(index, argument)| {
        let name = argument.name.as_ref()?;
        arguments[..index]
            .iter()
            .any(|earlier| earlier.name.as_ref() == Some(name))
            .then_some(name)
    }) {
        return Err(RsError::new(
            &codes::INVALID_FUNCTION_DEFINITION,
            format!("parameter name \"{repeated}\" used more than once (function {name})"),
        ));
    }
    let returns = match &create.return_type {
        Some(FunctionReturnType::DataType(data_type)) => function_type_name(data_type)?,
        Some(FunctionReturnType::SetOf(_)) => {
            return Err(not_supported(format!(
                "set-returning functions (RETURNS SETOF, function {name})"
            )))
        }
        None => {
            return Err(RsError::new(
                &codes::INVALID_FUNCTION_DEFINITION,
                format!("function {name}: function result type must be specified"),
            ))
        }
    };
    let body = body_expression(&name, create)?;
    let entry = FunctionEntry {
        id: 0,
        namespace: namespace.to_string(),
        name,
        arguments,
        returns,
        body: body.to_string(),
        strict: matches!(
            create.called_on_null,
            Some(FunctionCalledOnNull::Strict | FunctionCalledOnNull::ReturnsNullOnNullInput)
        ),
        volatility: match create.behavior {
            Some(FunctionBehavior::Immutable) => 'i',
            Some(FunctionBehavior::Stable) => 's',
            Some(FunctionBehavior::Volatile) | None => 'v',
        },
    };
    database.create_function(entry, create.or_replace).await?;
    Ok(StatementResult::command("CREATE FUNCTION"))
}

fn refuse_unsupported(create: &CreateFunction) -> RsResult<()> {
    let language = create.language.as_ref().map(folded);
    let refused = if create.temporary {
        Some("CREATE TEMPORARY FUNCTION".to_string())
    } else if create.or_alter {
        Some("CREATE OR ALTER FUNCTION".to_string())
    } else if create.if_not_exists {
        Some("CREATE FUNCTION IF NOT EXISTS".to_string())
    } else if language
        .as_deref()
        .is_some_and(|language| language != "sql")
    {
        Some(format!(
            "LANGUAGE {} functions (only LANGUAGE SQL)",
            language.unwrap_or_default()
        ))
    } else if matches!(create.security, Some(FunctionSecurity::Definer)) {
        Some("SECURITY DEFINER functions".to_string())
    } else if !create.set_params.is_empty() {
        Some("SET clauses of functions".to_string())
    } else if create.using.is_some()
        || create.options.is_some()
        || create.remote_connection.is_some()
        || create.determinism_specifier.is_some()
    {
        Some("this form of CREATE FUNCTION".to_string())
    } else {
        None
    };
    match refused {
        Some(refused) => Err(not_supported(refused)),
        None => Ok(()),
    }
}

/// A function's name: one identifier, or one in schema `public`.
fn function_name(name: &ObjectName) -> RsResult<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|part| part.as_ident().map(folded))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            RsError::new(
                &codes::SYNTAX_ERROR,
                format!("{name} is not a function name"),
            )
        })?;
    match parts.as_slice() {
        [name] => Ok(name.clone()),
        [schema, name] if schema == "public" => Ok(name.clone()),
        _ => Err(not_supported(format!(
            "functions outside schema public ({name})"
        ))),
    }
}

/// The one scalar expression a function's body computes.
fn body_expression(name: &str, create: &CreateFunction) -> RsResult<Expr> {
    let text = match &create.function_body {
        // Part of the statement, normalized with it.
        Some(CreateFunctionBody::Return(expr)) => return Ok(expr.clone()),
        Some(
            CreateFunctionBody::AsBeforeOptions {
                body,
                link_symbol: None,
            }
            | CreateFunctionBody::AsAfterOptions(body),
        ) => match body {
            Expr::Value(value) => match &value.value {
                Value::SingleQuotedString(text) => text.clone(),
                Value::DollarQuotedString(quoted) => quoted.value.clone(),
                _ => return Err(invalid_body(name, "its body is not a string")),
            },
            _ => return Err(invalid_body(name, "its body is not a string")),
        },
        None => {
            return Err(RsError::new(
                &codes::INVALID_FUNCTION_DEFINITION,
                format!("function {name}: no function body specified"),
            ))
        }
        Some(_) => {
            return Err(not_supported(format!(
                "this form of body (function {name})"
            )))
        }
    };
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, &text).map_err(|error| {
        RsError::new(
            &codes::SYNTAX_ERROR,
            format!("{error} (in the body of function {name})"),
        )
    })?;
    let [statement] = statements.as_mut_slice() else {
        return Err(not_supported(format!(
            "function bodies of {} statements (function {name}): write one SELECT expression",
            statements.len()
        )));
    };
    normalize_interval_literals(statement);
    normalize_type_spellings(statement);
    normalize_number_literals(statement);
    let Statement::Query(query) = statement else {
        return Err(invalid_body(name, "its body is not a SELECT"));
    };
    let plain = query.with.is_none()
        && query.order_by.is_none()
        && query.limit_clause.is_none()
        && query.fetch.is_none();
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Err(invalid_body(name, "its body is not one SELECT"));
    };
    let [item] = select.projection.as_slice() else {
        return Err(invalid_body(name, "its SELECT must compute one value"));
    };
    let expr = match item {
        SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => expr,
        _ => return Err(invalid_body(name, "its SELECT must compute one value")),
    };
    let scalar = plain
        && select.from.is_empty()
        && select.selection.is_none()
        && select.having.is_none()
        && select.distinct.is_none()
        && select.group_by
            == datafusion::sql::sqlparser::ast::GroupByExpr::Expressions(Vec::new(), Vec::new());
    if !scalar {
        return Err(not_supported(format!(
            "function bodies that read tables or use FROM, WHERE, GROUP BY, ORDER BY or LIMIT (function {name}): write one SELECT expression"
        )));
    }
    Ok(expr.clone())
}

fn invalid_body(name: &str, why: &str) -> RsError {
    RsError::new(
        &codes::INVALID_FUNCTION_DEFINITION,
        format!("function {name}: {why}; write LANGUAGE SQL AS $$SELECT expression$$"),
    )
}

/// `DROP FUNCTION [IF EXISTS] name [(types)], … [CASCADE | RESTRICT]`.
pub(crate) async fn drop_functions(
    database: &Database,
    namespace: &str,
    drop: &DropFunction,
) -> RsResult<StatementResult> {
    let cascade = matches!(drop.drop_behavior, Some(DropBehavior::Cascade));
    let named = drop
        .func_desc
        .iter()
        .map(|function| {
            let name = function_name(&function.name)?;
            let types = function
                .args
                .as_ref()
                .map(|arguments| {
                    arguments
                        .iter()
                        .filter(|argument| !matches!(argument.mode, Some(ArgMode::Out)))
                        .map(|argument| function_type_name(&argument.data_type))
                        .collect::<RsResult<Vec<_>>>()
                })
                .transpose()?;
            Ok((name, types))
        })
        .collect::<RsResult<Vec<_>>>()?;
    database
        .drop_functions(namespace, &named, drop.if_exists, cascade)
        .await?;
    Ok(StatementResult::command("DROP FUNCTION"))
}

/// 0A000: `what` is a form of `CREATE FUNCTION` that is not built.
fn not_supported(what: impl std::fmt::Display) -> RsError {
    RsError::new(
        &codes::UNSUPPORTED_STATEMENT,
        format!("{what} is not supported"),
    )
}

/// An argument's or result's type as the catalog spells it: `numeric`
/// (whatever precision and scale it declares) is any numeric, as
/// PostgreSQL's is.
fn function_type_name(data_type: &DataType) -> RsResult<String> {
    // PostgreSQL ignores a function's precision, scale and lengths
    // (typmods).
    let text = data_type.to_string().to_lowercase();
    let base = text.split('(').next().unwrap_or_default().trim();
    if matches!(base, "numeric" | "decimal") {
        return Ok(ANY_NUMERIC.to_string());
    }
    let name = column_type_name(data_type)?;
    Ok(match name.split_once('(') {
        Some((varchar, _)) if varchar == "character varying" => varchar.to_string(),
        _ => name,
    })
}

/// A name as PostgreSQL (in UTF-8) and DataFusion fold it: ASCII letters
/// to lower case unless quoted; the planner looks calls and parameters up
/// so.
fn folded(ident: &datafusion::sql::sqlparser::ast::Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    }
}
