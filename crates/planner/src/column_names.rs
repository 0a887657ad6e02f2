//! Output column names as PostgreSQL chooses them.
//!
//! DataFusion names an unaliased expression by its text (`sum(o.amount)`);
//! PostgreSQL uses the column name for a column reference, the function name
//! for a function call, the target type for a bare cast, a scalar
//! subquery's own column name, and `?column?` otherwise. Names are taken from the first branch of a set operation.

use datafusion::sql::sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr};

/// PostgreSQL's name for each output column of `query`, or `None` when the
/// select list has a wildcard (whose names DataFusion already gets right).
pub fn pg_column_names(query: &Query) -> Option<Vec<String>> {
    set_expr_names(&query.body)
}

/// Gives every item of `query`'s select list an alias of its own, for
/// DataFusion, which refuses two output columns of one name (`SELECT id,
/// id`, `SELECT x::int, x::float8`) where PostgreSQL allows them; the
/// result's columns are then renamed with [`pg_column_names`]. `false` when
/// there is nothing to alias (a wildcard, or not a plain SELECT).
pub fn alias_select_items(query: &mut Query) -> bool {
    let SetExpr::Select(select) = query.body.as_mut() else {
        return false;
    };
    if select.projection.iter().any(|item| {
        !matches!(
            item,
            SelectItem::UnnamedExpr(_) | SelectItem::ExprWithAlias { .. }
        )
    }) {
        return false;
    }
    // The first alias or column reference of each name keeps it, for ORDER
    // BY and GROUP BY to refer to; the others, and every other unaliased
    // expression (DataFusion names `x::int` and `x::float8` alike), get
    // names of their own.
    let mut seen: Vec<String> = Vec::new();
    for (index, item) in select.projection.iter_mut().enumerate() {
        let name = match item {
            SelectItem::ExprWithAlias { alias, .. } => {
                Some(identifier(&alias.value, alias.quote_style.is_some()))
            }
            SelectItem::UnnamedExpr(expr @ (Expr::Identifier(_) | Expr::CompoundIdentifier(_))) => {
                Some(expr_name(expr))
            }
            _ => None,
        };
        if let Some(name) = name.filter(|name| !seen.contains(name)) {
            seen.push(name);
            continue;
        }
        let (SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. }) = item else {
            unreachable!("only expressions, checked above")
        };
        *item = SelectItem::ExprWithAlias {
            expr: expr.clone(),
            alias: Ident::with_quote('"', format!("__rs_column_{index}")),
        };
    }
    true
}

fn set_expr_names(body: &SetExpr) -> Option<Vec<String>> {
    match body {
        SetExpr::Select(select) => select
            .projection
            .iter()
            .map(|item| match item {
                SelectItem::UnnamedExpr(expr) => Some(expr_name(expr)),
                SelectItem::ExprWithAlias { alias, .. } => {
                    Some(identifier(&alias.value, alias.quote_style.is_some()))
                }
                _ => None,
            })
            .collect(),
        SetExpr::SetOperation { left, .. } => set_expr_names(left),
        SetExpr::Query(query) => pg_column_names(query),
        _ => None,
    }
}

fn identifier(value: &str, quoted: bool) -> String {
    if quoted {
        value.to_string()
    } else {
        value.to_lowercase()
    }
}

pub(crate) fn expr_name(expr: &Expr) -> String {
    match expr {
        Expr::Identifier(ident) => identifier(&ident.value, ident.quote_style.is_some()),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .map(|ident| identifier(&ident.value, ident.quote_style.is_some()))
            .unwrap_or_default(),
        Expr::Function(function) => function
            .name
            .0
            .last()
            .and_then(|part| part.as_ident())
            .map(|ident| identifier(&ident.value, ident.quote_style.is_some()))
            .unwrap_or_else(|| "?column?".to_string()),
        Expr::Cast {
            expr, data_type, ..
        } => strong_name(expr).unwrap_or_else(|| pg_type_name(&data_type.to_string())),
        Expr::Nested(inner) => expr_name(inner),
        Expr::Subquery(query) => pg_column_names(query)
            .and_then(|names| names.into_iter().next())
            .unwrap_or_else(|| "?column?".to_string()),
        Expr::Exists { negated: false, .. } => "exists".to_string(),
        Expr::Case { .. } => "case".to_string(),
        Expr::Array(_) => "array".to_string(),
        Expr::Extract { .. } => "extract".to_string(),
        Expr::Substring {
            shorthand: true, ..
        } => "substr".to_string(),
        Expr::Substring { .. } => "substring".to_string(),
        Expr::Trim { .. } => "btrim".to_string(),
        Expr::Position { .. } => "position".to_string(),
        Expr::Ceil { .. } => "ceil".to_string(),
        Expr::Floor { .. } => "floor".to_string(),
        _ => "?column?".to_string(),
    }
}

/// The name a cast keeps from what it casts: a column's, a function's, a
/// nested cast's kept name; not `case`, and nothing for an operator.
/// (PostgreSQL's `FigureColnameInternal` ranks those names weaker than the
/// cast's type name.)
fn strong_name(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Case { .. } => None,
        Expr::Cast { expr, .. } | Expr::Nested(expr) => strong_name(expr),
        other => Some(expr_name(other)).filter(|name| name != "?column?"),
    }
}

/// The internal type name PostgreSQL gives a cast's column (`1::int` → `int4`).
fn pg_type_name(declared: &str) -> String {
    let lower = declared.to_lowercase();
    let base = lower.split('(').next().unwrap_or("").trim();
    match base {
        "int" | "integer" | "int4" => "int4",
        "bigint" | "int8" => "int8",
        "smallint" | "int2" => "int2",
        "text" => "text",
        "varchar" | "character varying" => "varchar",
        "boolean" | "bool" => "bool",
        "real" | "float4" => "float4",
        "double precision" | "float8" | "double" => "float8",
        "numeric" | "decimal" => "numeric",
        "date" => "date",
        "timestamp" => "timestamp",
        "timestamptz" | "timestamp with time zone" => "timestamptz",
        "interval" => "interval",
        other => return other.to_string(),
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    //! Goal: names match what PostgreSQL 15 prints for the same select list.
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn names(sql: &str) -> Option<Vec<String>> {
        let statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .remove(0);
        let datafusion::sql::sqlparser::ast::Statement::Query(query) = statement else {
            panic!("not a query")
        };
        pg_column_names(&query)
    }

    #[test]
    fn names_follow_postgresql() {
        assert_eq!(
            names("SELECT region, COUNT(*), SUM(o.amount) AS Revenue, a + 1, 1::int, x::text, \"Mixed\" FROM t o"),
            Some(vec!["region", "count", "revenue", "?column?", "int4", "x", "Mixed"].into_iter().map(String::from).collect())
        );
        assert_eq!(names("SELECT * FROM t"), None);
        assert_eq!(
            names(
                "SELECT (SELECT c.name FROM c), (SELECT max(x) AS top FROM c), EXISTS (SELECT 1)"
            ),
            Some(vec![
                "name".to_string(),
                "top".to_string(),
                "exists".to_string()
            ])
        );
        // Each name is what PostgreSQL 15 reports.
        assert_eq!(
            names(
                "SELECT ts::time::text, 1::int::text, (a + 1)::int, CASE WHEN a THEN 1 END::text, \
                 upper(x)::text, substr(x, 2), substring(x from 2)"
            ),
            Some(
                ["ts", "text", "int4", "text", "upper", "substr", "substring"]
                    .map(String::from)
                    .to_vec()
            )
        );
        assert_eq!(
            names("SELECT a FROM t UNION SELECT b FROM u"),
            Some(vec!["a".to_string()])
        );
    }
}
