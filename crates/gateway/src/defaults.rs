//! Column defaults (RFC 0003): checked at `CREATE TABLE`, then computed
//! for what an `INSERT` or `COPY` leaves out and for `DEFAULT` written as
//! a value.
//!
//! Two routes, one meaning. A statement DataFusion plans gets the default
//! expressions written into it, as PostgreSQL's rewriter does
//! ([`rewrite_insert`]): each row evaluates its own `nextval`. Rows built
//! without planning (the literal `VALUES` fast path, `COPY`) are completed
//! by [`fill_defaults`]: a sequence's next value per row, any other default
//! evaluated once per statement (defaults are constants or stable
//! functions such as `now()`: volatile ones are refused at `CREATE TABLE`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, Ident, Insert, ObjectName, Query, SetExpr, Statement, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rockstream_control::{nextval_expression, CatalogEntry, ColumnDef, Identity, OwnedSequence};
use rockstream_ops::arrow_rows::array_to_datums;
use rockstream_planner::{
    alias_select_items, normalize_interval_literals, normalize_type_spellings, relation_oid,
};
use rockstream_types::{codes, Datum, Row, RsError, RsResult, SqlType};

use crate::backend::Gateway;
use crate::ddl::{ident_name, TableDefinition};
use crate::dml::{query_batches, query_error, strict_cast};
use crate::sequences::{draw, sequence_refs};
use crate::session::GatewaySession;

/// Whether `expr` is the keyword `DEFAULT` written as a value.
pub(crate) fn is_default_keyword(expr: &SqlExpr) -> bool {
    matches!(expr, SqlExpr::Identifier(ident)
        if ident.quote_style.is_none() && ident.value.eq_ignore_ascii_case("default"))
}

fn parse_expression(text: &str) -> RsResult<SqlExpr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(text)
        .and_then(|mut parser| parser.parse_expr())
        .map_err(|error| {
            RsError::internal(format!("a stored default does not parse: {text}: {error}"))
        })
}

/// What an omitted value of `column` is computed by: its default's
/// expression, else NULL. The column's own sequence is named by its oid
/// (`nextval(16411)`), which plans without `regclass`.
fn default_or_null(column: &ColumnDef) -> RsResult<SqlExpr> {
    if let Some(sequence) = own_sequence(column) {
        // By oid: no name to quote or fold.
        return parse_expression(&format!("nextval({})", relation_oid(sequence.id)));
    }
    match column.default_expression() {
        Some(text) => {
            // As PostgreSQL prints it (`'x'::character varying`), which
            // DataFusion plans once respelled.
            let mut expr = parse_expression(&text)?;
            normalize_type_spellings(&mut expr);
            Ok(expr)
        }
        None => Ok(SqlExpr::Value(Value::Null.into())),
    }
}

/// The sequence whose next value is `column`'s default, if it is.
fn own_sequence(column: &ColumnDef) -> Option<&OwnedSequence> {
    column.sequence.as_ref().filter(|sequence| {
        sequence.identity.is_some()
            || column.default.as_deref() == Some(nextval_expression(&sequence.name).as_str())
    })
}

fn generated_always(column: &ColumnDef) -> RsError {
    RsError::new(
        &codes::GENERATED_ALWAYS,
        format!(
            "cannot insert a non-DEFAULT value into column \"{}\"",
            column.name
        ),
    )
    .with_detail(format!(
        "Column \"{}\" is an identity column defined as GENERATED ALWAYS.",
        column.name
    ))
}

fn is_always(column: &ColumnDef) -> bool {
    column
        .sequence
        .as_ref()
        .is_some_and(|sequence| sequence.identity == Some(Identity::Always))
}

/// Refuses a value given for a `GENERATED ALWAYS` identity column (428C9),
/// unless it is written `DEFAULT`.
pub(crate) fn check_generated_always(entry: &CatalogEntry, insert: &Insert) -> RsResult<()> {
    if insert.source.is_none() {
        // `DEFAULT VALUES`.
        return Ok(());
    }
    let Some(positions) = target_positions(entry, insert) else {
        return Ok(());
    };
    let values = insert
        .source
        .as_deref()
        .and_then(|source| match source.body.as_ref() {
            SetExpr::Values(values) => Some(values),
            _ => None,
        });
    for (field, position) in positions.iter().enumerate() {
        let column = &entry.columns[*position];
        if !is_always(column) {
            continue;
        }
        let all_default = values.is_some_and(|values| {
            values
                .rows
                .iter()
                .all(|row| row.content.get(field).is_none_or(is_default_keyword))
        });
        if !all_default {
            return Err(generated_always(column));
        }
    }
    Ok(())
}

/// The table positions an INSERT's values go to, in order; `None` when a
/// name does not resolve (planning reports it).
fn target_positions(entry: &CatalogEntry, insert: &Insert) -> Option<Vec<usize>> {
    if insert.columns.is_empty() {
        let width = match insert.source.as_deref().map(|source| source.body.as_ref()) {
            Some(SetExpr::Values(values)) => values
                .rows
                .first()
                .map_or(entry.columns.len(), |row| row.content.len()),
            _ => entry.columns.len(),
        };
        return Some((0..width.min(entry.columns.len())).collect());
    }
    insert
        .columns
        .iter()
        .map(|name| {
            let [part] = name.0.as_slice() else {
                return None;
            };
            let name = ident_name(part.as_ident()?);
            entry.columns.iter().position(|column| column.name == name)
        })
        .collect()
}

/// Writes defaults into an INSERT that DataFusion plans: `DEFAULT` values
/// become their columns' default expressions (NULL without one), and each
/// column left out that has a default gets it. A `VALUES` list shorter
/// than the table, without a column list, names the columns it fills.
pub(crate) fn rewrite_insert(entry: &CatalogEntry, insert: &mut Insert) -> RsResult<()> {
    let Some(positions) = target_positions(entry, insert) else {
        return Ok(());
    };
    let omitted: Vec<usize> = (0..entry.columns.len())
        .filter(|position| !positions.contains(position) && entry.columns[*position].has_default())
        .collect();
    let Some(source) = insert.source.as_deref_mut() else {
        return Ok(());
    };
    let has_default_values = matches!(source.body.as_ref(), SetExpr::Values(values)
        if values.rows.iter().any(|row| row.content.iter().any(is_default_keyword)));
    let short = insert.columns.is_empty() && positions.len() < entry.columns.len();
    if omitted.is_empty() && !has_default_values && !short {
        return Ok(());
    }
    let defaults: Vec<SqlExpr> = omitted
        .iter()
        .map(|position| default_or_null(&entry.columns[*position]))
        .collect::<RsResult<_>>()?;
    match source.body.as_mut() {
        SetExpr::Values(values) => {
            for row in &mut values.rows {
                for (field, value) in row.content.iter_mut().enumerate() {
                    if is_default_keyword(value) {
                        let Some(position) = positions.get(field) else {
                            continue;
                        };
                        *value = default_or_null(&entry.columns[*position])?;
                    }
                }
                row.content.extend(defaults.iter().cloned());
            }
        }
        _ if omitted.is_empty() => {}
        _ => {
            // `SELECT *, defaults FROM (source) AS rs_inserted(c1, ...)`; the
            // source's columns get names of their own first (the names of
            // inserted columns do not matter, and the subquery needs them
            // distinct).
            alias_select_items(source);
            let aliases: Vec<String> = (1..=positions.len())
                .map(|field| format!("rs_c{field}"))
                .collect();
            let defaults_sql: Vec<String> = defaults.iter().map(ToString::to_string).collect();
            let sql = format!(
                "SELECT *, {} FROM ({source}) AS rs_inserted({})",
                defaults_sql.join(", "),
                aliases.join(", ")
            );
            let statements = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
                .map_err(|error| RsError::internal(format!("{sql}: {error}")))?;
            let Some(Statement::Query(query)) = statements.into_iter().next() else {
                return Err(RsError::internal("rewritten INSERT source is not a query"));
            };
            *source = *query;
        }
    }
    if !omitted.is_empty() || short {
        if insert.columns.is_empty() {
            insert.columns = positions
                .iter()
                .map(|position| column_name(&entry.columns[*position]))
                .collect();
        }
        insert.columns.extend(
            omitted
                .iter()
                .map(|position| column_name(&entry.columns[*position])),
        );
    }
    Ok(())
}

fn column_name(column: &ColumnDef) -> ObjectName {
    ObjectName::from(vec![Ident::with_quote('"', column.name.clone())])
}

/// `UPDATE … SET column = value`: `DEFAULT` becomes the column's default
/// (NULL without one); an identity column defined `GENERATED ALWAYS` takes
/// only `DEFAULT` (428C9).
pub(crate) fn assigned_value(column: &ColumnDef, value: &SqlExpr) -> RsResult<String> {
    if is_default_keyword(value) {
        return Ok(default_or_null(column)?.to_string());
    }
    if is_always(column) {
        return Err(RsError::new(
            &codes::GENERATED_ALWAYS,
            format!("column \"{}\" can only be updated to DEFAULT", column.name),
        )
        .with_detail(format!(
            "Column \"{}\" is an identity column defined as GENERATED ALWAYS.",
            column.name
        )));
    }
    Ok(value.to_string())
}

/// Fills the columns `supplied` leaves out of rows built without planning
/// (the literal `VALUES` fast path, `COPY`): a sequence's next value per
/// row, another default evaluated once.
pub(crate) async fn fill_defaults(
    gateway: &Gateway,
    session: &GatewaySession,
    entry: &CatalogEntry,
    supplied: &[usize],
    rows: &mut [Row],
) -> RsResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let sequences = sequence_refs(entry);
    for (position, column) in entry.columns.iter().enumerate() {
        if supplied.contains(&position) || !column.has_default() {
            continue;
        }
        let sql_type = column.sql_type()?;
        if let Some(sequence) = own_sequence(column) {
            let reference = sequences
                .iter()
                .find(|reference| reference.id == sequence.id)
                .ok_or_else(|| RsError::internal("a column's sequence has no bounds"))?;
            let mut last = None;
            let restarted = session
                .transaction
                .as_ref()
                .map(|transaction| &transaction.restarted);
            for row in rows.iter_mut() {
                let value = draw(gateway.database(), restarted, reference)?;
                row[position] = integer(sql_type, value);
                last = Some(value);
            }
            if let Some(last) = last {
                session.sequences().drawn(sequence.id, last);
            }
            continue;
        }
        let value = evaluate(gateway, session, column).await?;
        for row in rows.iter_mut() {
            row[position] = value.clone();
        }
    }
    Ok(())
}

fn integer(sql_type: SqlType, value: i64) -> Datum {
    match sql_type {
        // The sequence is bounded by the column's type.
        SqlType::Int16 => Datum::Int16(value as i16),
        SqlType::Int32 => Datum::Int32(value as i32),
        _ => Datum::Int64(value),
    }
}

/// A column's default, evaluated once: a literal read by the column type's
/// input function, anything else planned (`SELECT (default)`).
async fn evaluate(
    gateway: &Gateway,
    session: &GatewaySession,
    column: &ColumnDef,
) -> RsResult<Datum> {
    let sql_type = column.sql_type()?;
    let Some(text) = &column.default else {
        return Ok(Datum::Null);
    };
    let expr = parse_expression(text)?;
    if let Some(literal) = crate::fast_path::literal_input(&expr, sql_type) {
        let array: ArrayRef = Arc::new(StringArray::from(vec![literal]));
        let typed = strict_cast(&array, sql_type)?;
        return array_to_datums(&typed, sql_type)?
            .into_iter()
            .next()
            .ok_or_else(|| RsError::internal("a default evaluated to no value"));
    }
    let batches = query_batches(gateway, session, &default_select(text)?, false).await?;
    first_value(&batches, sql_type)
}

/// `SELECT (default)`, its literals read as a statement's own are
/// (PostgreSQL's interval forms).
fn default_select(text: &str) -> RsResult<String> {
    let sql = format!("SELECT ({text})");
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
        .map_err(|error| RsError::new(&codes::SYNTAX_ERROR, error.to_string()))?;
    let Some(statement) = statements.first_mut() else {
        return Err(RsError::internal("a default is not an expression"));
    };
    normalize_interval_literals(statement);
    normalize_type_spellings(statement);
    Ok(statement.to_string())
}

fn first_value(
    batches: &[datafusion::arrow::record_batch::RecordBatch],
    sql_type: SqlType,
) -> RsResult<Datum> {
    let batch = batches
        .iter()
        .find(|batch| batch.num_rows() > 0)
        .ok_or_else(|| RsError::internal("a default evaluated to no row"))?;
    let typed = strict_cast(batch.column(0), sql_type)?;
    array_to_datums(&typed, sql_type)?
        .into_iter()
        .next()
        .ok_or_else(|| RsError::internal("a default evaluated to no value"))
}

/// `CREATE TABLE`: checks each `DEFAULT` as PostgreSQL does (no column
/// references, no subqueries, a value of the column's type) and keeps its
/// text in its column. A volatile default (`random()`) is refused: it
/// would be evaluated once for all the rows of a statement.
pub(crate) async fn check_defaults(
    gateway: &Gateway,
    session: &GatewaySession,
    definition: &mut TableDefinition,
) -> RsResult<()> {
    for (position, expr) in std::mem::take(&mut definition.defaults) {
        let column = &definition.columns[position];
        if let Some(sequence) = column
            .sequence
            .as_ref()
            .filter(|sequence| calls_nextval_of(&expr, &sequence.name))
        {
            // A serial column's default set back to its own sequence.
            let text = nextval_expression(&sequence.name);
            definition.columns[position].default = Some(text);
            continue;
        }
        refuse_references(expr_query(&expr)?.as_ref(), &column.name)?;
        // Not tracked as a dependency, so a DROP FUNCTION would break it.
        let functions = gateway.database().functions(&session.namespace);
        if let Some(function) =
            rockstream_planner::called_functions(&format!("SELECT {expr}"), &functions)
                .into_iter()
                .next()
        {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                format!(
                    "the default of column \"{}\" calls SQL function {function}: SQL functions in column defaults are not supported",
                    column.name
                ),
            ));
        }
        let sql_type = column.sql_type()?;
        // What is checked is what INSERTs will evaluate: the stored text.
        let text = as_postgres_prints(&expr, column);
        let context = gateway.query_context(session);
        let frame = context
            .sql(&default_select(&text)?)
            .await
            .map_err(query_error)?;
        let volatile = frame
            .logical_plan()
            .expressions()
            .iter()
            .any(|expr| expr.is_volatile());
        if volatile {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                format!(
                    "the default of column \"{}\" calls a volatile function ({text}): only constants and stable functions such as now() are supported",
                    column.name
                ),
            ));
        }
        let batches = gateway.stop(session).collect(frame).await?;
        first_value(&batches, sql_type).map_err(|error| {
            RsError::new(
                error.code,
                format!(
                    "the default of column \"{}\" is not of type {}: {}",
                    column.name,
                    sql_type.pg_name(),
                    error.message
                ),
            )
        })?;
        definition.columns[position].default = Some(text);
    }
    Ok(())
}

/// Whether `expr` is `nextval('sequence')` (with or without
/// `::regclass`), the default of a serial column owning `sequence`.
fn calls_nextval_of(expr: &SqlExpr, sequence: &str) -> bool {
    let own = nextval_expression(sequence);
    let written = expr.to_string();
    written.eq_ignore_ascii_case(&own)
        || written.eq_ignore_ascii_case(&own.replace("::regclass", ""))
}

/// A default's text as `pg_get_expr` prints it: a string constant (and a
/// negative number) with a cast to the column's type, the rest as written.
fn as_postgres_prints(expr: &SqlExpr, column: &ColumnDef) -> String {
    use datafusion::sql::sqlparser::ast::UnaryOperator;
    let base_type = column
        .type_name
        .split('(')
        .next()
        .unwrap_or(&column.type_name)
        .trim()
        .to_string();
    match expr {
        SqlExpr::Value(value) => match &value.value {
            Value::SingleQuotedString(text) => {
                format!("'{}'::{base_type}", text.replace('\'', "''"))
            }
            _ => expr.to_string(),
        },
        SqlExpr::UnaryOp {
            op: UnaryOperator::Minus,
            expr: inner,
        } if matches!(inner.as_ref(), SqlExpr::Value(value) if matches!(value.value, Value::Number(..))) =>
        {
            format!("'-{inner}'::{base_type}")
        }
        _ => expr.to_string(),
    }
}

/// `SELECT (expr)`, to walk `expr` with the query visitors.
fn expr_query(expr: &SqlExpr) -> RsResult<Box<Query>> {
    let sql = format!("SELECT ({expr})");
    match Parser::parse_sql(&PostgreSqlDialect {}, &sql)
        .map_err(|error| RsError::internal(format!("{sql}: {error}")))?
        .into_iter()
        .next()
    {
        Some(Statement::Query(query)) => Ok(query),
        _ => Err(RsError::internal("a default is not an expression")),
    }
}

/// 0A000 for a column reference or a subquery in a default, in
/// PostgreSQL's words.
fn refuse_references(query: &Query, column: &str) -> RsResult<()> {
    use datafusion::sql::sqlparser::ast::visit_expressions;
    let mut refused = None;
    let _ = visit_expressions(query, |expr: &SqlExpr| {
        let what = match expr {
            SqlExpr::Identifier(_) | SqlExpr::CompoundIdentifier(_) => "column reference",
            SqlExpr::Subquery(_) | SqlExpr::Exists { .. } | SqlExpr::InSubquery { .. } => {
                "subquery"
            }
            _ => return std::ops::ControlFlow::Continue(()),
        };
        refused = Some(what);
        std::ops::ControlFlow::Break(())
    });
    match refused {
        Some(what) => Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            format!("cannot use {what} in DEFAULT expression (column \"{column}\")"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    //! Goal: INSERTs planned by DataFusion get the defaults PostgreSQL's
    //! rewriter would give them.
    use super::*;

    fn table() -> CatalogEntry {
        let mut id = ColumnDef::new("id", "integer", true);
        id.default = Some(nextval_expression("t_id_seq"));
        id.sequence = Some(rockstream_control::OwnedSequence {
            id: 9u64.into(),
            name: "t_id_seq".into(),
            identity: None,
        });
        let mut state = ColumnDef::new("state", "text", false);
        state.default = Some("'new'".into());
        let columns = vec![id, state, ColumnDef::new("note", "text", false)];
        CatalogEntry {
            primary_key: vec![0],
            ..CatalogEntry::new(
                8,
                ("default", "t"),
                rockstream_control::ObjectKind::Table,
                columns,
            )
        }
    }

    fn rewritten(sql: &str) -> String {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        let Statement::Insert(insert) = &mut statements[0] else {
            panic!("not an INSERT");
        };
        rewrite_insert(&table(), insert).unwrap();
        statements[0].to_string()
    }

    #[test]
    fn omitted_columns_and_default_values_get_the_defaults() {
        assert_eq!(
            rewritten("INSERT INTO t (note) VALUES ('a'), ('b')"),
            "INSERT INTO t (note, \"id\", \"state\") VALUES ('a', nextval(16411), 'new'), ('b', nextval(16411), 'new')"
        );
        assert_eq!(
            rewritten("INSERT INTO t VALUES (DEFAULT, DEFAULT, 'x')"),
            "INSERT INTO t VALUES (nextval(16411), 'new', 'x')"
        );
        // Fewer values than columns: the rest are left out.
        assert_eq!(
            rewritten("INSERT INTO t VALUES (1, 'x')"),
            "INSERT INTO t (\"id\", \"state\") VALUES (1, 'x')"
        );
        assert_eq!(
            rewritten("INSERT INTO t (note) SELECT 'a'"),
            "INSERT INTO t (note, \"id\", \"state\") SELECT *, nextval(16411), 'new' FROM (SELECT 'a' AS \"__rs_column_0\") AS rs_inserted (rs_c1)"
        );
        // Nothing to do.
        assert_eq!(
            rewritten("INSERT INTO t VALUES (1, 'x', 'y')"),
            "INSERT INTO t VALUES (1, 'x', 'y')"
        );
    }
}
