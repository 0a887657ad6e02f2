//! Statements simple enough that planning them would cost more than
//! running them: `INSERT ... VALUES` of literals, a select list of
//! constants without FROM (`SELECT 1`, a driver's liveness check), and a
//! table's row by its whole primary key (`SELECT * FROM t WHERE id = 5`).
//!
//! A fast path either gives exactly what the planned path would, or
//! declines (`None`) and the statement is planned as usual; it never
//! reports an error of its own. So a literal it is unsure of (an
//! expression, a number PostgreSQL would round or find out of range, an
//! interval) sends the whole statement down the planned path, which owns
//! every error message.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Int32Array, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, Expr as SqlExpr, GroupByExpr, Ident, Insert, ObjectName, Query,
    Select, SelectFlavor, SelectItem, SetExpr, TableFactor, TableObject, UnaryOperator, Value,
    Values, WildcardAdditionalOptions,
};
use rockstream_control::CatalogEntry;
use rockstream_ops::keys::table_row_key;
use rockstream_pgwire::StatementResult;
use rockstream_plan::arrow_types::arrow_type;
use rockstream_planner::pg_column_names;
use rockstream_types::{Row, SqlType};

use crate::dml::text_rows;
use crate::wire::sql_type_name;

/// Longest numeric literal taken as it is: shorter ones cannot overflow a
/// float, longer ones are planned.
const NUMBER_CHARS_MAX: usize = 30;
/// PostgreSQL's bound on a statement's parameters: a larger `$n` is
/// planned (and refused there), never allocated for here.
const PARAMETERS_MAX: usize = 65_535;

/// The rows of `INSERT INTO entry [(columns)] VALUES (...), ...` when every
/// value is a literal the column's input function reads as PostgreSQL
/// would read it in that position, with the positions of the columns they
/// fill (the others are NULL: their defaults are the caller's); `None` to
/// plan the statement instead.
pub(crate) fn insert_values(
    entry: &CatalogEntry,
    insert: &Insert,
) -> Option<(Vec<Row>, Vec<usize>)> {
    let values = plain_values(insert)?;
    let types = entry.sql_types().ok()?;
    let positions = target_columns(entry, &insert.columns, values)?;
    let mut texts: Vec<Vec<Option<String>>> = Vec::with_capacity(values.rows.len());
    for row in &values.rows {
        if row.content.len() != positions.len() {
            return None;
        }
        let fields = row
            .content
            .iter()
            .zip(&positions)
            .map(|(expr, position)| {
                let text = literal_input(expr, types[*position])?;
                // NOT NULL is checked by the planned path, in its words.
                if text.is_none() && entry.columns[*position].not_null {
                    return None;
                }
                Some(text)
            })
            .collect::<Option<Vec<_>>>()?;
        texts.push(fields);
    }
    let rows = text_rows(entry, &types, &positions, &texts, |error, _| error).ok()?;
    Some((rows, positions))
}

/// The parameter types of `INSERT INTO entry [(columns)] VALUES (...)`
/// whose values are literals and `$n` placeholders, each placeholder used
/// once: the type of the column it is written to. `None` to describe the
/// statement by planning it.
pub(crate) fn insert_parameter_types(
    insert: &Insert,
    table: impl Fn(&str) -> Option<CatalogEntry>,
) -> Option<Vec<DataType>> {
    let values = plain_values(insert)?;
    let TableObject::TableName(name) = &insert.table else {
        return None;
    };
    let [part] = name.0.as_slice() else {
        return None;
    };
    let entry = table(&identifier(part.as_ident()?))?;
    let types = entry.sql_types().ok()?;
    let positions = target_columns(&entry, &insert.columns, values)?;
    let mut parameters: Vec<Option<DataType>> = Vec::new();
    for row in &values.rows {
        if row.content.len() != positions.len() {
            return None;
        }
        for (expr, position) in row.content.iter().zip(&positions) {
            match placeholder_index(expr) {
                Some(index) => bind_type(&mut parameters, index, types[*position])?,
                None => {
                    literal_input(expr, types[*position])?;
                }
            }
        }
    }
    parameters.into_iter().collect()
}

/// `SELECT` of integer, string and boolean literals with nothing else
/// (no FROM, WHERE, ORDER BY, ...): its one row, typed as PostgreSQL
/// types the literals.
pub(crate) fn constant_select(query: &Query) -> Option<StatementResult> {
    let select = plain_select(query)?;
    let names = pg_column_names(query)?;
    if names.len() != select.projection.len() {
        return None;
    }
    let mut fields = Vec::with_capacity(names.len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(names.len());
    for (item, name) in select.projection.iter().zip(names) {
        let expr = match item {
            SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => expr,
            _ => return None,
        };
        let column: ArrayRef = match constant(expr)? {
            Constant::Int32(value) => Arc::new(Int32Array::from(vec![value])),
            Constant::Int64(value) => Arc::new(Int64Array::from(vec![value])),
            Constant::Text(value) => Arc::new(StringArray::from(vec![value])),
            Constant::Bool(value) => Arc::new(BooleanArray::from(vec![value])),
        };
        fields.push(Field::new(name, column.data_type().clone(), false));
        columns.push(column);
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns).ok()?;
    Some(StatementResult::Query {
        schema,
        batches: vec![batch],
    })
}

/// The result columns of a [`constant_select`], for Describe.
pub(crate) fn constant_select_schema(query: &Query) -> Option<Arc<Schema>> {
    match constant_select(query)? {
        StatementResult::Query { schema, .. } => Some(schema),
        _ => None,
    }
}

/// `SELECT * | columns FROM table WHERE key = literal [AND ...]` naming
/// every primary-key column once: one row read by its storage key.
pub(crate) struct PointLookup {
    pub(crate) entry: CatalogEntry,
    /// The row's key, in the transaction's pending changes and in storage.
    pub(crate) key: Vec<u8>,
    /// The table columns returned, in order, and their types.
    pub(crate) columns: Vec<usize>,
    pub(crate) types: Vec<SqlType>,
    pub(crate) schema: Arc<Schema>,
}

/// The point lookup `query` is, given how a table name resolves; `None` to
/// plan it.
pub(crate) fn point_lookup(
    query: &Query,
    table: impl Fn(&str) -> Option<CatalogEntry>,
) -> Option<PointLookup> {
    let (entry, columns, schema, equalities) = lookup_shape(query, table)?;
    let types = entry.sql_types().ok()?;
    let mut texts = vec![None; entry.primary_key.len()];
    for (column, expr) in equalities {
        let slot = entry.primary_key.iter().position(|key| *key == column)?;
        if texts[slot].is_some() {
            return None;
        }
        // A NULL key matches no row, but that is the planned path's to say.
        texts[slot] = Some(literal_input(expr, types[column])??);
    }
    let fields: Vec<Option<String>> = texts
        .into_iter()
        .map(|text| text.map(Some))
        .collect::<Option<_>>()?;
    let typed = text_rows(&entry, &types, &entry.primary_key, &[fields], |error, _| {
        error
    })
    .ok()?;
    let key = table_row_key(&entry.primary_key, &typed[0]);
    let types = columns.iter().map(|column| types[*column]).collect();
    Some(PointLookup {
        entry,
        key,
        columns,
        types,
        schema,
    })
}

/// Describe of a [`point_lookup`] whose key values are `$n` placeholders
/// (each used once) or literals: the parameters' and the result's types.
pub(crate) fn point_lookup_types(
    query: &Query,
    table: impl Fn(&str) -> Option<CatalogEntry>,
) -> Option<(Vec<DataType>, Arc<Schema>)> {
    let (entry, _, schema, equalities) = lookup_shape(query, table)?;
    let types = entry.sql_types().ok()?;
    let mut parameters: Vec<Option<DataType>> = Vec::new();
    let mut keys_seen = Vec::new();
    for (column, expr) in equalities {
        if !entry.primary_key.contains(&column) || keys_seen.contains(&column) {
            return None;
        }
        keys_seen.push(column);
        match placeholder_index(expr) {
            Some(index) => bind_type(&mut parameters, index, types[column])?,
            None => {
                literal_input(expr, types[column])??;
            }
        }
    }
    if keys_seen.len() != entry.primary_key.len() {
        return None;
    }
    Some((parameters.into_iter().collect::<Option<_>>()?, schema))
}

/// The table, returned columns, result schema and `column = expr`
/// equalities of a query shaped as a point lookup.
type LookupShape<'q> = (
    CatalogEntry,
    Vec<usize>,
    Arc<Schema>,
    Vec<(usize, &'q SqlExpr)>,
);

fn lookup_shape(
    query: &Query,
    table: impl Fn(&str) -> Option<CatalogEntry>,
) -> Option<LookupShape<'_>> {
    let select = plain_select_from(query)?;
    let [from] = select.from.as_slice() else {
        return None;
    };
    if !from.joins.is_empty() {
        return None;
    }
    let TableFactor::Table {
        name,
        alias,
        args: None,
        with_hints,
        version: None,
        with_ordinality: false,
        partitions,
        json_path: None,
        sample: None,
        index_hints,
    } = &from.relation
    else {
        return None;
    };
    if !(with_hints.is_empty() && partitions.is_empty() && index_hints.is_empty()) {
        return None;
    }
    let [part] = name.0.as_slice() else {
        return None;
    };
    let entry = table(&identifier(part.as_ident()?))?;
    let types = entry.sql_types().ok()?;
    // PostgreSQL compares a `real` key with a numeric literal as double
    // precision (no `real` equals 0.1): float keys are planned.
    let float_key = entry
        .primary_key
        .iter()
        .any(|column| matches!(types[*column], SqlType::Float32 | SqlType::Float64));
    if entry.primary_key.is_empty() || float_key {
        return None;
    }
    let qualifier = match alias {
        None => identifier(part.as_ident()?),
        Some(alias) if alias.columns.is_empty() => identifier(&alias.name),
        Some(_) => return None,
    };
    let column = |expr: &SqlExpr| -> Option<usize> {
        let name = match expr {
            SqlExpr::Identifier(ident) => identifier(ident),
            SqlExpr::CompoundIdentifier(parts) => match parts.as_slice() {
                [table, column] if identifier(table) == qualifier => identifier(column),
                _ => return None,
            },
            _ => return None,
        };
        entry.columns.iter().position(|column| column.name == name)
    };
    let mut columns = Vec::new();
    let mut fields = Vec::new();
    let mut field = |position: usize, name: String| {
        columns.push(position);
        fields.push(Field::new(name, arrow_type(types[position]), true));
    };
    if let [SelectItem::Wildcard(options)] = select.projection.as_slice() {
        if !plain_wildcard(options) {
            return None;
        }
        for (position, column) in entry.columns.iter().enumerate() {
            field(position, column.name.clone());
        }
    } else {
        let names = pg_column_names(query)?;
        if names.len() != select.projection.len() {
            return None;
        }
        for (item, name) in select.projection.iter().zip(names) {
            let expr = match item {
                SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => expr,
                _ => return None,
            };
            field(column(expr)?, name);
        }
    }
    let mut equalities = Vec::new();
    if !conjuncts(select.selection.as_ref()?, &mut |left, right| {
        match (column(left), column(right)) {
            (Some(position), None) => equalities.push((position, right)),
            (None, Some(position)) => equalities.push((position, left)),
            _ => return false,
        }
        true
    }) {
        return None;
    }
    Some((entry, columns, Arc::new(Schema::new(fields)), equalities))
}

/// Calls `equality` with both sides of every `a = b` of a conjunction;
/// false if some conjunct is not an equality or `equality` refuses one.
fn conjuncts<'q>(
    expr: &'q SqlExpr,
    equality: &mut impl FnMut(&'q SqlExpr, &'q SqlExpr) -> bool,
) -> bool {
    match expr {
        SqlExpr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => conjuncts(left, equality) && conjuncts(right, equality),
        SqlExpr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } => equality(left, right),
        SqlExpr::Nested(inner) => conjuncts(inner, equality),
        _ => false,
    }
}

fn plain_wildcard(options: &WildcardAdditionalOptions) -> bool {
    options.opt_ilike.is_none()
        && options.opt_exclude.is_none()
        && options.opt_except.is_none()
        && options.opt_replace.is_none()
        && options.opt_rename.is_none()
        && options.opt_alias.is_none()
}

/// An identifier as PostgreSQL folds it: unquoted → lower case.
fn identifier(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

enum Constant {
    Int32(i32),
    Int64(i64),
    Text(String),
    Bool(bool),
}

fn constant(expr: &SqlExpr) -> Option<Constant> {
    match expr {
        SqlExpr::Value(value) => match &value.value {
            Value::Number(number, false) => integer_constant(&number.to_string(), false),
            Value::SingleQuotedString(text) => Some(Constant::Text(text.clone())),
            Value::Boolean(value) => Some(Constant::Bool(*value)),
            _ => None,
        },
        SqlExpr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            SqlExpr::Value(value) => match &value.value {
                Value::Number(number, false) => integer_constant(&number.to_string(), true),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// An integer literal's value and type: PostgreSQL's grammar folds a
/// leading minus into the literal, then types it `integer` if it fits,
/// else `bigint` (so `-2147483648` is an integer).
fn integer_constant(digits: &str, negative: bool) -> Option<Constant> {
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let value: i64 = if negative {
        format!("-{digits}").parse().ok()?
    } else {
        digits.parse().ok()?
    };
    Some(match i32::try_from(value) {
        Ok(value) => Constant::Int32(value),
        Err(_) => Constant::Int64(value),
    })
}

/// The VALUES list of a plain `INSERT INTO table [(columns)] VALUES ...`.
fn plain_values(insert: &Insert) -> Option<&Values> {
    // A qualified name is the planned path's to resolve (or refuse).
    let plain = matches!(&insert.table, TableObject::TableName(name) if name.0.len() == 1)
        && insert.optimizer_hints.is_empty()
        && insert.or.is_none()
        && !insert.ignore
        && insert.table_alias.is_none()
        && !insert.overwrite
        && insert.assignments.is_empty()
        && insert.partitioned.is_none()
        && insert.after_columns.is_empty()
        && insert.on.is_none()
        && insert.returning.is_none()
        && insert.output.is_none()
        && !insert.replace_into
        && insert.priority.is_none()
        && insert.insert_alias.is_none()
        && insert.settings.is_none()
        && insert.format_clause.is_none()
        && insert.multi_table_insert_type.is_none()
        && insert.multi_table_into_clauses.is_empty();
    if !plain {
        return None;
    }
    let source = insert.source.as_deref()?;
    if !bare_query(source) {
        return None;
    }
    match source.body.as_ref() {
        SetExpr::Values(values) if !values.explicit_row && !values.value_keyword => Some(values),
        _ => None,
    }
}

/// The body of a query with no WITH, ORDER BY, LIMIT, locking or other
/// clause around it.
fn bare_query(query: &Query) -> bool {
    query.with.is_none()
        && query.order_by.is_none()
        && query.limit_clause.is_none()
        && query.fetch.is_none()
        && query.locks.is_empty()
        && query.for_clause.is_none()
        && query.settings.is_none()
        && query.format_clause.is_none()
        && query.pipe_operators.is_empty()
}

/// A SELECT with a select list and no other clause.
fn plain_select(query: &Query) -> Option<&Select> {
    plain_select_from(query).filter(|select| select.from.is_empty() && select.selection.is_none())
}

/// A SELECT with a select list, FROM and WHERE, and no other clause.
fn plain_select_from(query: &Query) -> Option<&Select> {
    if !bare_query(query) {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let no_grouping = matches!(
        &select.group_by,
        GroupByExpr::Expressions(expressions, modifiers)
            if expressions.is_empty() && modifiers.is_empty()
    );
    let plain = no_grouping
        && select.optimizer_hints.is_empty()
        && select.distinct.is_none()
        && select.select_modifiers.is_none()
        && select.top.is_none()
        && select.exclude.is_none()
        && select.into.is_none()
        && select.lateral_views.is_empty()
        && select.prewhere.is_none()
        && select.connect_by.is_empty()
        && select.cluster_by.is_empty()
        && select.distribute_by.is_empty()
        && select.sort_by.is_empty()
        && select.having.is_none()
        && select.named_window.is_empty()
        && select.qualify.is_none()
        && select.value_table_mode.is_none()
        && matches!(select.flavor, SelectFlavor::Standard);
    plain.then_some(select)
}

/// The table column each VALUES field goes to: all columns in order, or
/// the named ones, each once.
fn target_columns(
    entry: &CatalogEntry,
    columns: &[ObjectName],
    values: &Values,
) -> Option<Vec<usize>> {
    if columns.is_empty() {
        // Without a column list the values fill the leading columns, the
        // rest taking their defaults, as in PostgreSQL. Lists of unequal
        // length, or longer than the table, are the planned path's errors.
        let width = values.rows.first()?.content.len();
        let even = values.rows.iter().all(|row| row.content.len() == width);
        return (even && (1..=entry.columns.len()).contains(&width)).then(|| (0..width).collect());
    }
    let mut positions = Vec::with_capacity(columns.len());
    for column in columns {
        let [part] = column.0.as_slice() else {
            return None;
        };
        let name = identifier(part.as_ident()?);
        let position = entry
            .columns
            .iter()
            .position(|column| column.name == name)?;
        if positions.contains(&position) {
            return None;
        }
        positions.push(position);
    }
    Some(positions)
}

/// Gives parameter `$index` the type of the column it is compared with or
/// written to; `None` if an earlier use gave it one already.
fn bind_type(
    parameters: &mut Vec<Option<DataType>>,
    index: usize,
    sql_type: SqlType,
) -> Option<()> {
    if parameters.len() < index {
        parameters.resize(index, None);
    }
    let slot = &mut parameters[index - 1];
    if slot.is_some() {
        return None;
    }
    *slot = Some(arrow_type(sql_type));
    Some(())
}

/// `$n`'s `n`.
fn placeholder_index(expr: &SqlExpr) -> Option<usize> {
    let SqlExpr::Value(value) = expr else {
        return None;
    };
    let Value::Placeholder(name) = &value.value else {
        return None;
    };
    name.strip_prefix('$')?
        .parse()
        .ok()
        .filter(|index| (1..=PARAMETERS_MAX).contains(index))
}

/// The text a literal gives the input function of a column of `sql_type`
/// (`Some(None)`: NULL), when that is how PostgreSQL assigns it: a string
/// literal (untyped), a string cast to the column's own type (how bound
/// parameters arrive), a number a numeric column holds exactly, a boolean
/// for a boolean column.
pub(crate) fn literal_input(expr: &SqlExpr, sql_type: SqlType) -> Option<Option<String>> {
    let text = match expr {
        SqlExpr::Value(value) => match &value.value {
            Value::Null => return Some(None),
            Value::SingleQuotedString(text) => text_literal(text, sql_type)?,
            Value::Number(number, false) => number_literal(&number.to_string(), sql_type)?,
            Value::Boolean(value) if sql_type == SqlType::Bool => value.to_string(),
            _ => return None,
        },
        SqlExpr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            SqlExpr::Value(value) => match &value.value {
                Value::Number(number, false) => number_literal(&format!("-{number}"), sql_type)?,
                _ => return None,
            },
            _ => return None,
        },
        SqlExpr::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr,
            data_type,
            array: false,
            format: None,
        } if data_type.to_string() == sql_type_name(&arrow_type(sql_type)) => match expr.as_ref() {
            SqlExpr::Value(value) => match &value.value {
                Value::SingleQuotedString(text) => text_literal(text, sql_type)?,
                _ => return None,
            },
            _ => return None,
        },
        _ => return None,
    };
    Some(Some(text))
}

/// A string for a column of `sql_type`, if its input function reads it as
/// PostgreSQL's does. A numeric's input is taken only when it needs no
/// rounding; an interval's forms are many and are planned.
fn text_literal(text: &str, sql_type: SqlType) -> Option<String> {
    match sql_type {
        SqlType::Interval => None,
        SqlType::Numeric { precision, scale } => {
            exact_decimal(text, precision, scale).then(|| text.to_owned())
        }
        _ => Some(text.to_owned()),
    }
}

/// A numeric literal (digits, at most one point, optionally a leading
/// minus) for a column of `sql_type`, if the column holds it as written:
/// integers for integer columns, decimals within precision and scale, and
/// short literals for floats.
fn number_literal(text: &str, sql_type: SqlType) -> Option<String> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let plain = !digits.is_empty()
        && digits.len() <= NUMBER_CHARS_MAX
        && digits.bytes().filter(|byte| *byte == b'.').count() <= 1
        && digits
            .bytes()
            .all(|byte| byte.is_ascii_digit() || byte == b'.')
        && digits.bytes().any(|byte| byte.is_ascii_digit());
    if !plain {
        return None;
    }
    let fits = match sql_type {
        SqlType::Int16 | SqlType::Int32 | SqlType::Int64 => !digits.contains('.'),
        SqlType::Float32 | SqlType::Float64 => true,
        SqlType::Numeric { precision, scale } => exact_decimal(text, precision, scale),
        _ => false,
    };
    fits.then(|| text.to_owned())
}

/// Whether `text` is a plain decimal that `numeric(precision, scale)`
/// holds without rounding or overflow.
fn exact_decimal(text: &str, precision: u8, scale: i8) -> bool {
    let Ok(scale) = usize::try_from(scale) else {
        return false;
    };
    let digits = text.strip_prefix('-').unwrap_or(text);
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let has_digits = !(whole.is_empty() && fraction.is_empty());
    let whole = whole.trim_start_matches('0');
    has_digits
        && whole.bytes().all(|byte| byte.is_ascii_digit())
        && fraction.bytes().all(|byte| byte.is_ascii_digit())
        && fraction.len() <= scale
        && whole.len() + scale <= usize::from(precision)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn decimals_held_exactly() {
        assert!(exact_decimal("150.00", 10, 2));
        assert!(exact_decimal("-0.5", 3, 1));
        assert!(exact_decimal("0", 3, 1));
        assert!(exact_decimal("12345678.9", 10, 2));
        assert!(!exact_decimal("123456789.0", 10, 2), "overflows");
        assert!(!exact_decimal("1.005", 10, 2), "PostgreSQL rounds");
        assert!(!exact_decimal("1e5", 10, 2));
        assert!(!exact_decimal(".", 10, 2));
        assert!(!exact_decimal("", 10, 2));
        assert!(!exact_decimal(" 1", 10, 2));
    }

    #[test]
    fn numbers_only_where_held_as_written() {
        assert_eq!(number_literal("42", SqlType::Int32).as_deref(), Some("42"));
        assert_eq!(number_literal("-7", SqlType::Int64).as_deref(), Some("-7"));
        assert_eq!(number_literal("1.5", SqlType::Int32), None, "rounded");
        assert_eq!(
            number_literal("1.5", SqlType::Float64).as_deref(),
            Some("1.5")
        );
        assert_eq!(number_literal("5", SqlType::Text), None, "a cast");
        assert_eq!(number_literal("1e400", SqlType::Float64), None);
        assert_eq!(number_literal("1.2.3", SqlType::Float64), None);
        assert_eq!(number_literal(".", SqlType::Float64), None);
    }

    #[test]
    fn integer_constants_typed_as_the_lexer_does() {
        assert!(matches!(
            integer_constant("2147483647", false),
            Some(Constant::Int32(i32::MAX))
        ));
        assert!(matches!(
            integer_constant("2147483648", true),
            Some(Constant::Int32(i32::MIN))
        ));
        assert!(matches!(
            integer_constant("2147483649", true),
            Some(Constant::Int64(-2_147_483_649))
        ));
        assert!(matches!(
            integer_constant("5", true),
            Some(Constant::Int32(-5))
        ));
        assert!(integer_constant("99999999999999999999", false).is_none());
        assert!(integer_constant("1.5", false).is_none());
    }
}
