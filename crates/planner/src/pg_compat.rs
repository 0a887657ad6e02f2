//! PostgreSQL spellings that DataFusion does not plan, rewritten in the
//! parsed query into ones it does. Clients' catalog queries (psql's `\d
//! NAME`, drivers' metadata calls) are full of them:
//!
//! - `a OPERATOR(pg_catalog.~) b` is the operator itself, and
//!   `pg_catalog.f(...)` the function `f`;
//! - `COLLATE pg_catalog.default` (or `"C"`, `"POSIX"`) changes nothing here:
//!   RockStream compares strings by their bytes, as the C collation does;
//! - `x::regclass`, `::regtype`, `::regnamespace` become calls of the
//!   conversion functions of [`crate::system_catalog`], `::oid` a `bigint`
//!   (our oids) and `::name` text; `pg_catalog.`-qualified type names lose
//!   the qualifier;
//! - a query over a catalog table that is empty by construction (see
//!   `system_catalog::empty`) has no rows, whatever it computes: a `SELECT`
//!   that inner-joins one becomes `SELECT NULL ... WHERE false` with the
//!   same columns, and a subquery over one becomes its value on no rows
//!   (`ARRAY(SELECT ...)` the text `{}`).
//!   The select lists of such queries often use PostgreSQL-only machinery
//!   (role-oid arrays, `pg_get_expr`, lateral `generate_series`) that there
//!   is no point planning;
//! - the array-typed catalog columns RockStream always leaves NULL
//!   (`system_catalog::NULL_ARRAY_COLUMNS`, read through an alias of a
//!   catalog table): `unnest` of one has no rows, and `array_to_string` of
//!   one (or of one concatenated with an empty array) is folded to its
//!   value, NULL or the empty string;
//! - a scalar subquery that does not aggregate, which DataFusion plans only
//!   when uncorrelated, aggregates with the functions of
//!   [`crate::scalar_subquery`], keeping PostgreSQL's meaning (NULL for no
//!   row, an error for more than one);
//! - `[NOT] EXISTS (...)` in a select list, which DataFusion plans only as a
//!   filter, counts the subquery's rows instead;
//! - `generate_subscripts(a, 1)` is `unnest` of the range of `a`'s
//!   subscripts, `information_schema._pg_expandarray(a)` a struct of `a`'s
//!   elements and their subscripts unnested in step, and `(value).field`
//!   is `get_field(value, 'field')`;
//! - `current_user`, `session_user`, `current_role` and `user` are calls of
//!   the function that answers the session's role;
//! - `FROM generate_series(…) g` names the series' column `g`, as
//!   PostgreSQL names a one-column function's output after its alias
//!   (DataFusion names it `value`).
//!
//! A materialized view's definition is read the same way
//! ([`normalize_view_definition`]), except the rewrite of scalar subqueries
//! into row-checking aggregates (a view refuses a subquery that may return
//! several rows at `CREATE`), and with its `FROM generate_series(…)` over
//! constants as a set-returning select ([`series_relations_as_selects`]).

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::LazyLock;

use datafusion::sql::sqlparser::ast::{
    AccessExpr, BinaryOperator, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, GroupByExpr, Ident, JoinOperator, ObjectName, Query,
    Select, SelectItem, SetExpr, SetOperator, Statement, TableAliasColumnDef, TableFactor,
    TableWithJoins, Value, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::ast_walk::{for_each_select_mut, for_each_unnested_expr};
use crate::column_names::expr_name;
use crate::scalar_subquery::{ROWS_FUNCTION, VALUE_FUNCTION};
use crate::system_catalog::{
    is_empty_table, is_pg_catalog_table, NULL_ARRAY_COLUMNS, PG_CATALOG, USER_FUNCTION,
};

/// Rewrites `query` in place (see the module documentation).
pub fn normalize_query(query: &mut Query) {
    let _ = query.visit(&mut Normalizer::default());
}

/// Rewrites a materialized view's definition in place (see the module
/// documentation).
pub fn normalize_view_definition(query: &mut Query) {
    let _ = query.visit(&mut Normalizer {
        view: true,
        ..Normalizer::default()
    });
    series_relations_as_selects(query);
}

#[derive(Default)]
struct Normalizer {
    /// For each query being visited, outermost first: the names (aliases)
    /// its FROM clause gives its relations, each with whether it is a
    /// `pg_catalog` table.
    scope: Vec<Vec<(String, bool)>>,
    /// A materialized view's definition: scalar subqueries stay as they
    /// are written.
    view: bool,
}

impl VisitorMut for Normalizer {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if replace_empty_selects(&mut query.body, &self.scope) {
            // Zero rows need no order and no limit (whose expressions may
            // name columns of the tables just removed).
            query.order_by = None;
            query.limit_clause = None;
        }
        for_each_select_mut(&mut query.body, &mut drop_outer_has_default);
        self.scope.push(relation_names(&query.body));
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, relation: &mut TableFactor) -> ControlFlow<()> {
        name_series_column(relation);
        lateral_set_returning(relation);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        self.scope.pop();
        // After the subqueries are normalized (one over an empty catalog
        // table is a constant by now).
        for_each_select_mut(&mut query.body, &mut |select| {
            exists_as_counts(&mut select.projection);
            expand_series(&mut select.projection);
        });
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        // `current_user` and its kin are functions called without
        // parentheses.
        if let Expr::Function(function) = expr {
            if matches!(function.args, FunctionArguments::None)
                && matches!(name_parts(&function.name), Some((name, _))
                    if matches!(name.as_str(), "current_user" | "session_user" | "current_role" | "user"))
            {
                // The parser reads `current_user()` as an error: the call
                // goes by another name.
                function.name = ObjectName::from(vec![Ident::new(USER_FUNCTION)]);
                function.args = FunctionArguments::List(FunctionArgumentList {
                    duplicate_treatment: None,
                    args: Vec::new(),
                    clauses: Vec::new(),
                });
            }
        }
        if let Expr::Case {
            operand: None,
            conditions,
            else_result,
            ..
        } = expr
        {
            let written = conditions.len();
            conditions.retain(|when| !never_holds(&when.condition, &self.scope));
            if written > 0 && conditions.is_empty() {
                *expr = else_result
                    .take()
                    .map_or(Expr::value(Value::Null), |result| *result);
            }
        }
        let scope = &self.scope;
        let replacement = match expr {
            Expr::Subquery(subquery) if yields_no_rows(subquery, scope) => Some(null_text()),
            Expr::Exists { subquery, negated } if yields_no_rows(subquery, scope) => {
                Some(boolean(*negated))
            }
            Expr::InSubquery {
                subquery, negated, ..
            } if yields_no_rows(subquery, scope) => Some(boolean(*negated)),
            // `ARRAY(SELECT ...)` over no rows: the empty array, as text.
            Expr::Function(Function {
                name,
                args: FunctionArguments::Subquery(subquery),
                ..
            }) if matches!(name_parts(name), Some((array, _)) if array == "array")
                && yields_no_rows(subquery, scope) =>
            {
                Some(empty_array())
            }
            _ => None,
        };
        if let Some(replacement) = replacement {
            *expr = replacement;
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(folded) = fold_array_to_string(expr, &self.scope) {
            *expr = folded;
            return ControlFlow::Continue(());
        }
        match expr {
            Expr::Subquery(subquery) if !self.view && returns_rows_as_they_are(subquery) => {
                if let SetExpr::Select(select) = subquery.body.as_mut() {
                    for item in &mut select.projection {
                        if let SelectItem::UnnamedExpr(value)
                        | SelectItem::ExprWithAlias { expr: value, .. } = item
                        {
                            let inner = std::mem::replace(value, Expr::value(Value::Null));
                            *value = function_call(ROWS_FUNCTION, inner);
                        }
                    }
                }
                let subquery = std::mem::replace(expr, Expr::value(Value::Null));
                *expr = function_call(VALUE_FUNCTION, subquery);
            }
            Expr::AnyOp { right, .. } | Expr::AllOp { right, .. } if !self.view => {
                uncount_rows(right)
            }
            // Function names resolve unqualified.
            Expr::Function(function) => {
                if let Some((_, true)) = name_parts(&function.name) {
                    if let Some(last) = function.name.0.pop() {
                        function.name.0 = vec![last];
                    }
                }
                if let Some(subscripts) = first_dimension_subscripts(function) {
                    *expr = subscripts;
                    return ControlFlow::Continue(());
                }
                if let Some(expanded) = expanded_array(function) {
                    *expr = expanded;
                    return ControlFlow::Continue(());
                }
                // `age(x)` is the age at midnight today: `age(CURRENT_DATE, x)`.
                if matches!(name_parts(&function.name), Some((name, _)) if name == "age") {
                    if let FunctionArguments::List(list) = &mut function.args {
                        if list.args.len() == 1 {
                            list.args
                                .insert(0, FunctionArg::Unnamed(FunctionArgExpr::Expr(today())));
                        }
                    }
                }
            }
            Expr::CompoundFieldAccess { root, access_chain }
                if matches!(root.as_ref(), Expr::Nested(_)) =>
            {
                if let Some(fields) = field_names(access_chain) {
                    let mut value = std::mem::replace(root.as_mut(), Expr::value(Value::Null));
                    for field in fields {
                        let field = Expr::value(Value::SingleQuotedString(field));
                        value = call("get_field", vec![value, field]);
                    }
                    *expr = value;
                }
            }
            Expr::BinaryOp { op, .. } => {
                if let BinaryOperator::PGCustomBinaryOperator(parts) = op {
                    if let Some(builtin) = builtin_operator(parts) {
                        *op = builtin;
                    }
                }
            }
            Expr::Collate {
                expr: inner,
                collation,
            } if is_byte_order_collation(collation) => {
                let inner = std::mem::replace(inner.as_mut(), Expr::value(Value::Null));
                *expr = Expr::Nested(Box::new(inner));
            }
            Expr::Cast {
                expr: inner,
                data_type,
                ..
            } => {
                if let Some(function) = custom_type_name(data_type).and_then(conversion_function) {
                    let inner = std::mem::replace(inner.as_mut(), Expr::value(Value::Null));
                    *expr = function_call(function, inner);
                } else if let Some(plain) = plain_type(data_type) {
                    *data_type = plain;
                } else if let Some(function) = named_object_as_text(inner, data_type) {
                    // `'name'::regclass::text` is the name (once it is
                    // known to exist), not the oid the inner call gives.
                    let inner = std::mem::replace(inner.as_mut(), Expr::value(Value::Null));
                    *expr = function_call(function, inner);
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// Whether a scalar subquery returns its rows as its FROM clause finds them:
/// one output column, no aggregate, grouping, window, `DISTINCT`, order or
/// limit. Such a subquery may find several rows for an outer row, which
/// DataFusion does not plan when it is correlated (see
/// [`crate::scalar_subquery`]).
fn returns_rows_as_they_are(query: &Query) -> bool {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    let grouped = !matches!(
        &select.group_by,
        datafusion::sql::sqlparser::ast::GroupByExpr::Expressions(expressions, _)
            if expressions.is_empty()
    );
    query.with.is_none()
        && query.order_by.is_none()
        && query.limit_clause.is_none()
        && query.fetch.is_none()
        && !select.from.is_empty()
        && select.distinct.is_none()
        && !grouped
        && select.having.is_none()
        && select.qualify.is_none()
        && matches!(
            select.projection.as_slice(),
            [SelectItem::UnnamedExpr(_) | SelectItem::ExprWithAlias { .. }]
        )
        && !aggregates(&select.projection)
        && !calls_window_or_set_function(&select.projection)
}

/// Whether a select list calls a window function or a set-returning one,
/// anywhere in it (subqueries included, which errs on the side of leaving
/// a query alone).
fn calls_window_or_set_function(projection: &[SelectItem]) -> bool {
    let mut found = false;
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(&projection.to_vec(), |expr| {
        if let Expr::Function(function) = expr {
            found |= function.over.is_some()
                || matches!(name_parts(&function.name), Some((name, _)) if SET_RETURNING.contains(&name.as_str()));
        }
        ControlFlow::<()>::Continue(())
    });
    found
}

/// Undoes the rewrite of a scalar subquery that turned out to be the right
/// side of `= ANY (...)` or `> ALL (...)`, which compare with every row.
fn uncount_rows(expr: &mut Expr) {
    let Expr::Function(Function {
        name,
        args: FunctionArguments::List(list),
        ..
    }) = expr
    else {
        return;
    };
    if !matches!(name_parts(name), Some((function, _)) if function == VALUE_FUNCTION) {
        return;
    }
    let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Subquery(subquery)))) =
        list.args.first_mut()
    else {
        return;
    };
    if let SetExpr::Select(select) = subquery.body.as_mut() {
        for item in &mut select.projection {
            if let SelectItem::UnnamedExpr(value) | SelectItem::ExprWithAlias { expr: value, .. } =
                item
            {
                if let Expr::Function(Function {
                    args: FunctionArguments::List(inner),
                    ..
                }) = value
                {
                    if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(argument))) =
                        inner.args.pop()
                    {
                        *value = argument;
                    }
                }
            }
        }
    }
    let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(subquery))) = list.args.pop() else {
        return;
    };
    *expr = subquery;
}

/// The names under which a query's FROM clause reads its relations (each
/// one's alias, or a table's name when it has none), with whether each is a
/// `pg_catalog` table.
type Scope = [Vec<(String, bool)>];

/// Whether `condition` holds for no row: `relation.typtype = 'x'` over
/// `pg_type` (the catalog table with a `typtype` column) for a kind of
/// type other than `b`, when every type RockStream has is a base type.
/// asyncpg's type introspection computes a domain's base type and a
/// composite type's attributes under such conditions, with correlated
/// subqueries DataFusion cannot plan; dropping the branches that never run
/// leaves a query it can.
fn never_holds(condition: &Expr, scope: &Scope) -> bool {
    let Expr::BinaryOp {
        left,
        op: BinaryOperator::Eq,
        right,
    } = condition
    else {
        return false;
    };
    let (Expr::CompoundIdentifier(parts), Expr::Value(value)) = (left.as_ref(), right.as_ref())
    else {
        return false;
    };
    let [relation, column] = parts.as_slice() else {
        return false;
    };
    let other_kind = matches!(&value.value, Value::SingleQuotedString(kind) if kind != "b");
    let relation = relation.value.to_lowercase();
    let in_catalog = scope
        .iter()
        .rev()
        .find_map(|level| level.iter().find(|(name, _)| *name == relation))
        .is_some_and(|(_, catalog)| *catalog);
    other_kind && in_catalog && column.value.eq_ignore_ascii_case("typtype")
}

/// psql and SQLAlchemy read a column's default as `(SELECT pg_get_expr(...)
/// FROM pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum
/// AND a.atthasdef)`, whose last condition names only the outer query,
/// which DataFusion cannot decorrelate. `pg_attrdef` has a row exactly for
/// the columns whose `atthasdef` is true, so the condition changes nothing
/// and is dropped (only when `a` is not a relation of the subquery itself).
fn drop_outer_has_default(select: &mut Select) {
    let reads_defaults = select
        .from
        .iter()
        .flat_map(|item| {
            std::iter::once(&item.relation).chain(item.joins.iter().map(|join| &join.relation))
        })
        .any(|relation| {
            matches!(relation, TableFactor::Table { name, .. }
            if matches!(name_parts(name), Some((table, _)) if table == "pg_attrdef"))
        });
    if !reads_defaults {
        return;
    }
    let own = select_relation_names(select);
    let is_outer_flag = |expr: &Expr| match expr {
        // `a.atthasdef`, or `pg_catalog.pg_attribute.atthasdef`.
        Expr::CompoundIdentifier(parts) => match parts.as_slice() {
            [.., relation, column] => {
                column.value.eq_ignore_ascii_case("atthasdef")
                    && !own
                        .iter()
                        .any(|(name, _)| name.eq_ignore_ascii_case(&relation.value))
            }
            _ => false,
        },
        _ => false,
    };
    fn strip(expr: Expr, is_outer_flag: &dyn Fn(&Expr) -> bool) -> Option<Expr> {
        match expr {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::And,
                right,
            } => match (strip(*left, is_outer_flag), strip(*right, is_outer_flag)) {
                (Some(left), Some(right)) => Some(Expr::BinaryOp {
                    left: Box::new(left),
                    op: BinaryOperator::And,
                    right: Box::new(right),
                }),
                (kept, None) | (None, kept) => kept,
            },
            Expr::Nested(inner) if is_outer_flag(&inner) => None,
            flag if is_outer_flag(&flag) => None,
            other => Some(other),
        }
    }
    if own.is_empty()
        || !select.selection.as_ref().is_some_and(|selection| {
            let mut found = false;
            let _ = datafusion::sql::sqlparser::ast::visit_expressions(selection, |expr: &Expr| {
                found |= is_outer_flag(expr);
                ControlFlow::<()>::Continue(())
            });
            found
        })
    {
        return;
    }
    if let Some(selection) = select.selection.take() {
        select.selection = strip(selection, &is_outer_flag);
    }
}

fn relation_names(body: &SetExpr) -> Vec<(String, bool)> {
    match body {
        SetExpr::Select(select) => select_relation_names(select),
        _ => Vec::new(),
    }
}

fn select_relation_names(select: &Select) -> Vec<(String, bool)> {
    select
        .from
        .iter()
        .flat_map(|item| {
            std::iter::once(&item.relation).chain(item.joins.iter().map(|join| &join.relation))
        })
        .filter_map(|relation| match relation {
            TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } => {
                let (table, in_catalog) = name_parts(name)?;
                let catalog = in_catalog && is_pg_catalog_table(&table);
                Some(match alias {
                    Some(alias) => (alias.name.value.to_lowercase(), catalog),
                    None => (table, catalog),
                })
            }
            TableFactor::Table {
                alias: Some(alias), ..
            }
            | TableFactor::Derived {
                alias: Some(alias), ..
            }
            | TableFactor::UNNEST {
                alias: Some(alias), ..
            }
            | TableFactor::Function {
                alias: Some(alias), ..
            } => Some((alias.name.value.to_lowercase(), false)),
            _ => None,
        })
        .collect()
}

/// Whether `name` refers to a `pg_catalog` table: the innermost query that
/// names a relation so reads one.
fn names_catalog_table(scope: &Scope, name: &str) -> bool {
    scope
        .iter()
        .rev()
        .find_map(|level| {
            level
                .iter()
                .find(|(relation, _)| relation == name)
                .map(|(_, catalog)| *catalog)
        })
        .unwrap_or(false)
}

/// What an array expression is known to be without planning it: one of the
/// always-NULL catalog columns read through a catalog table's name in
/// `scope`, the empty array (`'{}'`), or a concatenation of those.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KnownArray {
    Null,
    Empty,
}

fn known_array(expr: &Expr, scope: &Scope) -> Option<KnownArray> {
    match expr {
        Expr::CompoundIdentifier(parts) => match parts.as_slice() {
            [table, column]
                if NULL_ARRAY_COLUMNS.contains(&column.value.as_str())
                    && names_catalog_table(scope, &table.value.to_lowercase()) =>
            {
                Some(KnownArray::Null)
            }
            _ => None,
        },
        Expr::Value(value) if value.value == Value::SingleQuotedString("{}".to_string()) => {
            Some(KnownArray::Empty)
        }
        Expr::Nested(inner) => known_array(inner, scope),
        // Concatenating a NULL array yields the other operand.
        Expr::BinaryOp {
            left,
            op: BinaryOperator::StringConcat,
            right,
        } => match (known_array(left, scope)?, known_array(right, scope)?) {
            (KnownArray::Null, KnownArray::Null) => Some(KnownArray::Null),
            _ => Some(KnownArray::Empty),
        },
        _ => None,
    }
}

/// `array_to_string(A, ...)` of a [`KnownArray`]: NULL, or the empty string.
fn fold_array_to_string(expr: &Expr, scope: &Scope) -> Option<Expr> {
    let Expr::Function(Function {
        name,
        args: FunctionArguments::List(list),
        ..
    }) = expr
    else {
        return None;
    };
    if !matches!(name_parts(name), Some((function, true)) if function == "array_to_string") {
        return None;
    }
    let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(array))) = list.args.first() else {
        return None;
    };
    Some(match known_array(array, scope)? {
        KnownArray::Null => null_text(),
        KnownArray::Empty => Expr::value(Value::SingleQuotedString(String::new())),
    })
}

fn empty_array() -> Expr {
    Expr::value(Value::SingleQuotedString("{}".to_string()))
}

/// `OPERATOR(pg_catalog.op)` (or unqualified): the built-in `op`.
fn builtin_operator(parts: &[String]) -> Option<BinaryOperator> {
    let (symbol, schema) = parts.split_last()?;
    if !(schema.is_empty() || schema == [PG_CATALOG]) {
        return None;
    }
    Some(match symbol.as_str() {
        "~" => BinaryOperator::PGRegexMatch,
        "~*" => BinaryOperator::PGRegexIMatch,
        "!~" => BinaryOperator::PGRegexNotMatch,
        "!~*" => BinaryOperator::PGRegexNotIMatch,
        "~~" => BinaryOperator::PGLikeMatch,
        "~~*" => BinaryOperator::PGILikeMatch,
        "!~~" => BinaryOperator::PGNotLikeMatch,
        "!~~*" => BinaryOperator::PGNotILikeMatch,
        "=" => BinaryOperator::Eq,
        "<>" | "!=" => BinaryOperator::NotEq,
        "<" => BinaryOperator::Lt,
        "<=" => BinaryOperator::LtEq,
        ">" => BinaryOperator::Gt,
        ">=" => BinaryOperator::GtEq,
        "+" => BinaryOperator::Plus,
        "-" => BinaryOperator::Minus,
        "*" => BinaryOperator::Multiply,
        "/" => BinaryOperator::Divide,
        "||" => BinaryOperator::StringConcat,
        _ => return None,
    })
}

/// The last part of each name, lower-cased unless quoted, with whether the
/// name was `pg_catalog.`-qualified or bare.
fn name_parts(name: &ObjectName) -> Option<(String, bool)> {
    let idents: Vec<&Ident> = name.0.iter().filter_map(|part| part.as_ident()).collect();
    let (last, qualifier) = idents.split_last()?;
    let in_catalog = match qualifier {
        [] => true,
        [schema] => schema.value.eq_ignore_ascii_case(PG_CATALOG),
        _ => false,
    };
    let value = if last.quote_style.is_some() {
        last.value.clone()
    } else {
        last.value.to_lowercase()
    };
    Some((value, in_catalog))
}

/// Collations that order strings by their bytes, as RockStream does.
fn is_byte_order_collation(collation: &ObjectName) -> bool {
    matches!(
        name_parts(collation),
        Some((name, true)) if matches!(name.as_str(), "default" | "C" | "POSIX" | "ucs_basic")
    )
}

/// The name of a type the SQL parser did not recognise (`regtype`,
/// `pg_catalog.text`, ...), when it is bare or in `pg_catalog`; and
/// `regclass`, which it does.
fn custom_type_name(data_type: &DataType) -> Option<String> {
    match data_type {
        DataType::Regclass => Some("regclass".to_string()),
        DataType::Custom(name, modifiers) if modifiers.is_empty() => match name_parts(name) {
            Some((name, true)) => Some(name),
            _ => None,
        },
        _ => None,
    }
}

/// The conversion function a cast to an object-identifier type becomes.
fn conversion_function(type_name: String) -> Option<&'static str> {
    match type_name.as_str() {
        "regclass" => Some("regclass"),
        "regtype" => Some("regtype"),
        "regnamespace" => Some("regnamespace"),
        _ => None,
    }
}

/// When `inner` is a conversion call of a name literal
/// (`regclass('t')`) and the cast is to text: the conversion function.
fn named_object_as_text(inner: &Expr, data_type: &DataType) -> Option<&'static str> {
    if !matches!(data_type, DataType::Text | DataType::Varchar(_)) {
        return None;
    }
    let Expr::Function(function) = inner else {
        return None;
    };
    let (name, _) = name_parts(&function.name)?;
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    let literal = matches!(
        list.args.as_slice(),
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(value)))]
            if matches!(value.value, Value::SingleQuotedString(_))
    );
    conversion_function(name).filter(|_| literal)
}

/// A type DataFusion plans in place of a `pg_catalog` one: `oid` is our
/// `bigint` oids, `name` and `"char"` are text, and a qualified built-in
/// (`pg_catalog.int2`) is the built-in; arrays of them likewise.
fn plain_type(data_type: &DataType) -> Option<DataType> {
    if let DataType::Array(element) = data_type {
        use datafusion::sql::sqlparser::ast::ArrayElemTypeDef;
        return match element {
            ArrayElemTypeDef::SquareBracket(inner, size) => plain_type(inner).map(|inner| {
                DataType::Array(ArrayElemTypeDef::SquareBracket(Box::new(inner), *size))
            }),
            _ => None,
        };
    }
    let name = custom_type_name(data_type)?;
    match name.as_str() {
        "oid" => Some(DataType::BigInt(None)),
        "name" | "char" => Some(DataType::Text),
        other => Parser::new(&PostgreSqlDialect {})
            .try_with_sql(other)
            .and_then(|mut parser| parser.parse_data_type())
            .ok()
            .filter(|parsed| !matches!(parsed, DataType::Custom(..))),
    }
}

/// `CURRENT_DATE`.
fn today() -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new("current_date")]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::None,
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

/// `generate_subscripts(a, 1)`, the subscripts of a one-dimensional array
/// (clients number the elements of `unnest(a)` with it, beside it in the
/// same select list): `unnest(range(1, cardinality(a) + 1))`, which
/// DataFusion unnests in step with `unnest(a)`. Other dimensions exist in
/// no array RockStream makes.
fn first_dimension_subscripts(function: &Function) -> Option<Expr> {
    let (name, _) = name_parts(&function.name)?;
    if name != "generate_subscripts" {
        return None;
    }
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(array)), FunctionArg::Unnamed(FunctionArgExpr::Expr(dimension))] =
        list.args.as_slice()
    else {
        return None;
    };
    if dimension.to_string() != "1" {
        return None;
    }
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&format!(
            "unnest(range(1, CAST(cardinality({array}) AS BIGINT) + 1))"
        ))
        .and_then(|mut parser| parser.parse_expr())
        .ok()
}

/// `information_schema._pg_expandarray(a)`, PostgreSQL's set-returning
/// function of `(x, n)` records, one per element `x` of `a` with its
/// subscript `n` (pgjdbc's `getPrimaryKeys` and other tools read index keys
/// with it): a struct of the two unnested in step, which DataFusion
/// expands like the function (and `(record).field` reads, see
/// [`field_names`]).
fn expanded_array(function: &Function) -> Option<Expr> {
    let idents: Vec<&Ident> = function
        .name
        .0
        .iter()
        .filter_map(|part| part.as_ident())
        .collect();
    let named = match idents.as_slice() {
        [name] => name,
        [schema, name] if schema.value.eq_ignore_ascii_case("information_schema") => name,
        _ => return None,
    };
    if !named.value.eq_ignore_ascii_case("_pg_expandarray") {
        return None;
    }
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(array))] = list.args.as_slice() else {
        return None;
    };
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&format!(
            "named_struct('x', unnest({array}), \
             'n', CAST(unnest(range(1, CAST(cardinality({array}) AS BIGINT) + 1)) AS INT))"
        ))
        .and_then(|mut parser| parser.parse_expr())
        .ok()
}

/// The field names of a composite value's `(value).field[.field...]`
/// access (lower-cased unless quoted), read with `get_field`; `None` for
/// other accesses (subscripts), which DataFusion plans itself.
fn field_names(access_chain: &[AccessExpr]) -> Option<Vec<String>> {
    access_chain
        .iter()
        .map(|access| match access {
            AccessExpr::Dot(Expr::Identifier(ident)) => Some(match ident.quote_style {
                Some(_) => ident.value.clone(),
                None => ident.value.to_lowercase(),
            }),
            _ => None,
        })
        .collect()
}

fn function_call(name: &str, argument: Expr) -> Expr {
    call(name, vec![argument])
}

fn call(name: &str, arguments: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: arguments
                .into_iter()
                .map(|argument| FunctionArg::Unnamed(FunctionArgExpr::Expr(argument)))
                .collect(),
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

fn null_text() -> Expr {
    Expr::Cast {
        kind: datafusion::sql::sqlparser::ast::CastKind::Cast,
        expr: Box::new(Expr::value(Value::Null)),
        data_type: DataType::Text,
        array: false,
        format: None,
    }
}

fn boolean(value: bool) -> Expr {
    Expr::value(Value::Boolean(value))
}

/// Whether a subquery's value is that of no rows: a plain `SELECT` (no
/// aggregate, which would make one row of no rows) over an empty table.
fn yields_no_rows(query: &Query, scope: &Scope) -> bool {
    matches!(query.body.as_ref(), SetExpr::Select(select) if select_is_empty(select, scope))
}

/// Replaces each `SELECT` of `body` that has no rows with a table-less one
/// of the same columns; returns whether `body` as a whole has no rows.
fn replace_empty_selects(body: &mut SetExpr, scope: &Scope) -> bool {
    match body {
        SetExpr::Select(select) => {
            if !select_is_empty(select, scope) {
                return false;
            }
            match no_rows(&select.projection) {
                Some(replacement) => {
                    *body = replacement;
                    true
                }
                None => false,
            }
        }
        SetExpr::SetOperation {
            op, left, right, ..
        } => {
            let left_empty = replace_empty_selects(left, scope);
            let right_empty = replace_empty_selects(right, scope);
            match op {
                SetOperator::Union => left_empty && right_empty,
                SetOperator::Intersect => left_empty || right_empty,
                SetOperator::Except | SetOperator::Minus => left_empty,
            }
        }
        SetExpr::Query(query) => {
            let empty = replace_empty_selects(&mut query.body, scope);
            if empty {
                query.order_by = None;
                query.limit_clause = None;
            }
            empty
        }
        _ => false,
    }
}

/// Whether a `SELECT` has no rows because it inner-joins an empty catalog
/// table; one that aggregates still has a row, and is left alone. `scope`
/// names the catalog tables of the queries around it.
fn select_is_empty(select: &Select, scope: &Scope) -> bool {
    let grouped = !matches!(
        &select.group_by,
        datafusion::sql::sqlparser::ast::GroupByExpr::Expressions(expressions, _)
            if expressions.is_empty()
    );
    // The FROM check first: it is cheap, and false for almost every query.
    (select
        .from
        .iter()
        .any(|item| joins_empty_table(item, scope))
        || requires_null_array(select, scope))
        && !grouped
        && select.having.is_none()
        && !aggregates(&select.projection)
}

/// Whether a `SELECT` keeps only rows where an always-NULL catalog array is
/// not NULL (`WHERE ... AND attacl IS NOT NULL`): none.
fn requires_null_array(select: &Select, scope: &Scope) -> bool {
    let Some(selection) = &select.selection else {
        return false;
    };
    // The `IS NOT NULL` conjuncts on a column named like an always-NULL
    // catalog array; almost every query has none, and costs nothing more.
    let mut candidates = Vec::new();
    let mut conjuncts = vec![selection];
    while let Some(condition) = conjuncts.pop() {
        match condition {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::And,
                right,
            } => conjuncts.extend([left.as_ref(), right.as_ref()]),
            Expr::Nested(nested) => conjuncts.push(nested),
            Expr::IsNotNull(column)
                if column_name(column)
                    .is_some_and(|name| NULL_ARRAY_COLUMNS.contains(&name.value.as_str())) =>
            {
                candidates.push(column.as_ref())
            }
            _ => {}
        }
    }
    if candidates.is_empty() {
        return false;
    }
    let own = select_relation_names(select);
    // An unqualified column belongs to the one relation the query reads.
    let only_catalog_table = match own.as_slice() {
        [(name, true)] => Some(name.clone()),
        _ => None,
    };
    let mut inner: Vec<Vec<(String, bool)>> = scope.to_vec();
    inner.push(own);
    candidates.into_iter().any(|column| {
        let qualified = match column {
            Expr::Identifier(name) => only_catalog_table
                .clone()
                .map(|table| Expr::CompoundIdentifier(vec![Ident::new(table), name.clone()])),
            other => Some(other.clone()),
        };
        qualified.is_some_and(|column| known_array(&column, &inner) == Some(KnownArray::Null))
    })
}

/// The last part of a column reference.
fn column_name(column: &Expr) -> Option<&Ident> {
    match column {
        Expr::Identifier(name) => Some(name),
        Expr::CompoundIdentifier(parts) => parts.last(),
        _ => None,
    }
}

/// Whether a FROM item's rows all come from an empty table: the first
/// relation unless a later join preserves the other side (RIGHT or FULL),
/// or an inner-joined one under the same condition.
fn joins_empty_table(item: &TableWithJoins, scope: &Scope) -> bool {
    let preserves_right = |operator: &JoinOperator| {
        matches!(
            operator,
            JoinOperator::Right(_) | JoinOperator::RightOuter(_) | JoinOperator::FullOuter(_)
        )
    };
    let inner = |operator: &JoinOperator| {
        matches!(
            operator,
            JoinOperator::Join(_) | JoinOperator::Inner(_) | JoinOperator::CrossJoin(_)
        )
    };
    if is_empty_relation(&item.relation, scope)
        && !item
            .joins
            .iter()
            .any(|join| preserves_right(&join.join_operator))
    {
        return true;
    }
    item.joins.iter().enumerate().any(|(index, join)| {
        inner(&join.join_operator)
            && is_empty_relation(&join.relation, scope)
            && !item.joins[index + 1..]
                .iter()
                .any(|later| preserves_right(&later.join_operator))
    })
}

/// An always-empty catalog table, or `unnest` of an always-NULL catalog
/// array.
fn is_empty_relation(relation: &TableFactor, scope: &Scope) -> bool {
    match relation {
        TableFactor::Table {
            name, args: None, ..
        } => matches!(name_parts(name), Some((table, true)) if is_empty_table(&table)),
        TableFactor::Table {
            name,
            args: Some(arguments),
            ..
        } => {
            matches!(name_parts(name), Some((function, true)) if function == "unnest")
                && matches!(
                    arguments.args.as_slice(),
                    [FunctionArg::Unnamed(FunctionArgExpr::Expr(array))]
                        if known_array(array, scope) == Some(KnownArray::Null)
                )
        }
        TableFactor::UNNEST { array_exprs, .. } => {
            matches!(array_exprs.as_slice(), [array] if known_array(array, scope) == Some(KnownArray::Null))
        }
        _ => false,
    }
}

/// Every aggregate function's name and alias, as DataFusion knows them.
static AGGREGATE_NAMES: LazyLock<HashSet<String>> = LazyLock::new(|| {
    datafusion::functions_aggregate::all_default_aggregate_functions()
        .iter()
        .flat_map(|function| {
            std::iter::once(function.name().to_string()).chain(function.aliases().iter().cloned())
        })
        .chain(["json_agg", "jsonb_agg", "every"].map(str::to_string))
        .collect()
});

/// Functions that return a set of rows in a select list.
const SET_RETURNING: [&str; 2] = ["unnest", "generate_series"];

/// Whether a select list calls an aggregate outside any subquery: it gives
/// one row even over no rows.
fn aggregates(projection: &[SelectItem]) -> bool {
    let mut found = false;
    for mut item in projection.iter().cloned() {
        for_each_unnested_expr(&mut item, &mut |expr| {
            if let Expr::Function(function) = expr {
                if let Some((name, _)) = name_parts(&function.name) {
                    found |= AGGREGATE_NAMES.contains(name.as_str());
                }
            }
        });
    }
    found
}

/// `[NOT] EXISTS (SELECT ... FROM f WHERE w)` in a select list becomes
/// `(SELECT count(*) FROM f WHERE w) > 0` (`= 0`): DataFusion plans EXISTS
/// only as a filter, but decorrelates a scalar subquery that counts, with a
/// count of 0 where nothing matches. A subquery whose row count is not that
/// of its FROM and WHERE (grouped, aggregated, distinct, limited, or with
/// a window or set-returning function), or that joins, is left as written.
fn exists_as_counts(projection: &mut [SelectItem]) {
    for item in projection {
        for_each_unnested_expr(item, &mut |expr| {
            if let Expr::Exists { subquery, negated } = expr {
                if let Some(count) = counting(subquery) {
                    *expr = Expr::Nested(Box::new(Expr::BinaryOp {
                        left: Box::new(Expr::Subquery(count)),
                        op: if *negated {
                            BinaryOperator::Eq
                        } else {
                            BinaryOperator::Gt
                        },
                        right: Box::new(Expr::value(Value::Number("0".to_string(), false))),
                    }));
                }
            }
        });
    }
}

/// In a materialized view's definition: each `FROM generate_series(args)
/// [AS] g[(col)]` whose arguments read no column becomes `FROM (SELECT
/// unnest(generate_series(args)) AS col) g`, the set-returning form the
/// view translator expands (DataFusion's table function has no incremental
/// counterpart). PostgreSQL's column names are kept: `col`, else `g`, else
/// `generate_series`. (One reading columns is rewritten for every query,
/// by [`normalize_query`].)
pub fn series_relations_as_selects(query: &mut Query) {
    struct Rewriter;
    impl VisitorMut for Rewriter {
        type Break = ();
        fn post_visit_table_factor(&mut self, relation: &mut TableFactor) -> ControlFlow<()> {
            if let Some(rewritten) = series_as_select(relation, false) {
                *relation = rewritten;
            }
            ControlFlow::Continue(())
        }
    }
    let _ = query.visit(&mut Rewriter);
}

/// Set-returning functions in `FROM` over an earlier item's columns, as
/// DataFusion can plan them (`crate::lateral_unnest` decorrelates them):
/// `LATERAL unnest(x)` as the `UNNEST` relation, `generate_series(…)`
/// reading columns (`LATERAL` or not, as PostgreSQL allows) as `LATERAL
/// (SELECT unnest(generate_series(…)) AS g) AS g`; an `unnest(x) [AS] u`
/// without column names names its column `u` (else `unnest`).
fn lateral_set_returning(relation: &mut TableFactor) {
    if let TableFactor::Function {
        lateral: true,
        name,
        args,
        with_ordinality: false,
        alias,
    } = relation
    {
        match name_parts(name) {
            Some((function, true)) if function == "unnest" => {
                if let [FunctionArg::Unnamed(FunctionArgExpr::Expr(array))] = args.as_slice() {
                    *relation = TableFactor::UNNEST {
                        alias: alias.take(),
                        array_exprs: vec![array.clone()],
                        with_offset: false,
                        with_offset_alias: None,
                        with_ordinality: false,
                    };
                }
            }
            Some((function, true)) if function == "generate_series" => {
                *relation = TableFactor::Table {
                    name: name.clone(),
                    alias: alias.take(),
                    args: Some(datafusion::sql::sqlparser::ast::TableFunctionArgs {
                        args: std::mem::take(args),
                        settings: None,
                    }),
                    with_hints: Vec::new(),
                    version: None,
                    with_ordinality: false,
                    partitions: Vec::new(),
                    json_path: None,
                    sample: None,
                    index_hints: Vec::new(),
                };
            }
            _ => {}
        }
    }
    if let Some(rewritten) = series_as_select(relation, true) {
        *relation = rewritten;
    }
    if let TableFactor::UNNEST {
        alias,
        array_exprs,
        with_offset: false,
        with_ordinality: false,
        ..
    } = relation
    {
        if array_exprs.len() == 1 {
            name_one_column(alias, "unnest");
        }
    }
}

/// `relation` as a subquery unnesting its series, if it is a
/// `generate_series(…)` reading columns (`reading_columns`: a `LATERAL`
/// subquery) or not (a plain one, for views).
fn series_as_select(relation: &TableFactor, reading_columns: bool) -> Option<TableFactor> {
    let TableFactor::Table {
        name,
        alias,
        args: Some(args),
        with_ordinality: false,
        ..
    } = relation
    else {
        return None;
    };
    if !matches!(name_parts(name), Some((function, true)) if function == "generate_series") {
        return None;
    }
    let mut reads_columns = false;
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(&args.args, |expr| {
        reads_columns |= matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_));
        ControlFlow::<()>::Continue(())
    });
    if reads_columns != reading_columns {
        return None;
    }
    let column = alias
        .as_ref()
        .map(|alias| {
            alias
                .columns
                .first()
                .map_or_else(|| alias.name.clone(), |column| column.name.clone())
        })
        .unwrap_or_else(|| Ident::new("generate_series"));
    let arguments: Vec<String> = args.args.iter().map(ToString::to_string).collect();
    let sql = format!(
        "SELECT unnest(generate_series({})) AS {column}",
        arguments.join(", ")
    );
    let Ok(mut statements) = Parser::parse_sql(&PostgreSqlDialect {}, &sql) else {
        return None;
    };
    let Some(Statement::Query(subquery)) = statements.pop() else {
        return None;
    };
    let alias = alias.clone().map_or_else(
        || datafusion::sql::sqlparser::ast::TableAlias {
            explicit: false,
            name: Ident::new("generate_series"),
            columns: Vec::new(),
            at: None,
        },
        |mut alias| {
            alias.columns.clear();
            alias
        },
    );
    Some(TableFactor::Derived {
        lateral: reading_columns,
        subquery,
        alias: Some(alias),
        sample: None,
    })
}

/// `generate_series(…) g` without column names: its one column is `g`;
/// without an alias, `generate_series`.
fn name_series_column(relation: &mut TableFactor) {
    let TableFactor::Table {
        name,
        args: Some(_),
        alias,
        ..
    } = relation
    else {
        return;
    };
    if !matches!(name_parts(name), Some((function, _)) if function == "generate_series") {
        return;
    }
    name_one_column(alias, "generate_series");
}

/// A one-column function's relation names its column as PostgreSQL does:
/// after its alias (`f(…) AS g` → `g`), else after the function.
fn name_one_column(
    alias: &mut Option<datafusion::sql::sqlparser::ast::TableAlias>,
    function: &str,
) {
    let alias = alias.get_or_insert_with(|| datafusion::sql::sqlparser::ast::TableAlias {
        explicit: false,
        name: Ident::new(function),
        columns: Vec::new(),
        at: None,
    });
    if alias.columns.is_empty() {
        alias.columns = vec![TableAliasColumnDef {
            name: alias.name.clone(),
            data_type: None,
        }];
    }
}

/// `generate_series(...)` as a select-list item returns rows in PostgreSQL,
/// one per value; DataFusion's returns one array. `unnest` expands it.
fn expand_series(projection: &mut [SelectItem]) {
    for item in projection {
        let (SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. }) = item else {
            continue;
        };
        let Expr::Function(function) = expr else {
            continue;
        };
        if matches!(name_parts(&function.name), Some((name, _)) if name == "generate_series")
            && function.over.is_none()
        {
            let series = std::mem::replace(expr, Expr::value(Value::Null));
            *expr = function_call("unnest", series);
        }
    }
}

/// `query` counting its rows, when they are those of its FROM and WHERE.
fn counting(query: &Query) -> Option<Box<Query>> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let ungrouped =
        matches!(&select.group_by, GroupByExpr::Expressions(exprs, _) if exprs.is_empty());
    // DataFusion miscounts when an outer column is referred to in a join
    // condition, so only relations without joins (where outer references
    // can only be in WHERE).
    let plain_from = select.from.iter().all(|item| {
        item.joins.is_empty()
            && matches!(
                item.relation,
                TableFactor::Table { .. } | TableFactor::Derived { lateral: false, .. }
            )
    });
    if query.limit_clause.is_some()
        || query.fetch.is_some()
        || select.distinct.is_some()
        || !ungrouped
        || !plain_from
        || select.having.is_some()
        || aggregates(&select.projection)
        || calls_window_or_set_function(&select.projection)
    {
        return None;
    }
    let count = Parser::new(&PostgreSqlDialect {})
        .try_with_sql("count(*)")
        .and_then(|mut parser| parser.parse_expr())
        .ok()?;
    let mut counting = query.clone();
    counting.order_by = None;
    if let SetExpr::Select(select) = counting.body.as_mut() {
        select.projection = vec![SelectItem::UnnamedExpr(count)];
    }
    Some(Box::new(counting))
}

/// `SELECT CAST(NULL AS text) AS <name>, ... WHERE false`, named as
/// PostgreSQL names the columns of `projection` (a repeated name numbered,
/// as DataFusion wants distinct names; callers name the result's columns
/// from the query as written); `None` for a wildcard.
fn no_rows(projection: &[SelectItem]) -> Option<SetExpr> {
    let mut columns = Vec::with_capacity(projection.len());
    let mut names: Vec<String> = Vec::with_capacity(projection.len());
    for item in projection {
        let name = match item {
            SelectItem::UnnamedExpr(expr) => expr_name(expr),
            SelectItem::ExprWithAlias { alias, .. } if alias.quote_style.is_some() => {
                alias.value.clone()
            }
            SelectItem::ExprWithAlias { alias, .. } => alias.value.to_lowercase(),
            _ => return None,
        };
        let name = if names.contains(&name) {
            format!("{name}_{}", names.len() + 1)
        } else {
            name
        };
        columns.push(format!(
            "CAST(NULL AS text) AS \"{}\"",
            name.replace('"', "\"\"")
        ));
        names.push(name);
    }
    let sql = format!("SELECT {} WHERE false", columns.join(", "));
    match Parser::parse_sql(&PostgreSqlDialect {}, &sql).ok()?.pop()? {
        Statement::Query(query) => Some(*query.body),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    use super::*;

    fn normalized(sql: &str) -> String {
        let Statement::Query(mut query) = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0)
        else {
            panic!("not a query: {sql}")
        };
        normalize_query(&mut query);
        query.to_string()
    }

    #[test]
    fn catalog_spellings_become_plain_sql() {
        assert_eq!(
            normalized(
                "SELECT c.oid FROM pg_catalog.pg_class c \
                 WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$' COLLATE pg_catalog.default"
            ),
            "SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname ~ ('^(t)$')"
        );
        assert_eq!(
            normalized("SELECT c.oid::pg_catalog.regclass::pg_catalog.text, 't'::regclass, '16'::pg_catalog.oid, x::pg_catalog.int2[] FROM pg_class c"),
            "SELECT regclass(c.oid)::TEXT, regclass('t'), '16'::BIGINT, x::INT2[] FROM pg_class c"
        );
        assert_eq!(
            normalized("SELECT 't'::regclass::text, x::regclass::text FROM u"),
            "SELECT regclass(regclass('t')), regclass(x)::TEXT FROM u"
        );
        assert_eq!(
            normalized("SELECT pg_catalog.format_type(1, 2), public.f(3)"),
            "SELECT format_type(1, 2), public.f(3)"
        );
        // A collation that orders otherwise is left for the planner to refuse.
        assert_eq!(
            normalized("SELECT a COLLATE \"de_DE\" FROM t"),
            "SELECT a COLLATE \"de_DE\" FROM t"
        );
    }

    #[test]
    fn branches_for_kinds_of_types_that_do_not_exist_are_dropped() {
        // asyncpg's introspection: every type is a base type ('b').
        assert_eq!(
            normalized(
                "SELECT CASE WHEN t.typtype = 'd' THEN (SELECT 1 FROM x LIMIT 1) ELSE NULL END,                  CASE WHEN t.typtype = 'c' THEN 1 WHEN t.typtype = 'b' THEN 2 END                  FROM pg_catalog.pg_type AS t"
            ),
            "SELECT NULL, CASE WHEN t.typtype = 'b' THEN 2 END FROM pg_catalog.pg_type AS t"
        );
        // Over a user's table the column means what its rows hold.
        assert_eq!(
            normalized("SELECT CASE WHEN t.typtype = 'd' THEN 1 END FROM t"),
            "SELECT CASE WHEN t.typtype = 'd' THEN 1 END FROM t"
        );
    }

    #[test]
    fn queries_over_empty_catalog_tables_have_no_rows() {
        // Inner-joined: the select list is not planned at all.
        assert_eq!(
            normalized(
                "SELECT pol.polname, array(select 1), NULL, NULL FROM pg_catalog.pg_policy pol \
                 WHERE pol.polrelid = '1' ORDER BY 1"
            ),
            "SELECT CAST(NULL AS TEXT) AS \"polname\", CAST(NULL AS TEXT) AS \"array\", \
             CAST(NULL AS TEXT) AS \"?column?\", CAST(NULL AS TEXT) AS \"?column?_4\" WHERE false"
        );
        // Every branch of a union.
        assert!(normalized(
            "SELECT pubname FROM pg_publication p JOIN pg_class c ON true \
             UNION SELECT pubname FROM pg_publication ORDER BY 1"
        )
        .ends_with("WHERE false"));
        // Subqueries: their value on no rows.
        assert_eq!(
            normalized(
                "SELECT (SELECT d.polname FROM pg_policy d WHERE d.polrelid = a.attrelid), \
                 EXISTS (SELECT 1 FROM pg_inherits), 1 NOT IN (SELECT 1 FROM pg_trigger), \
                 ARRAY(SELECT 1 FROM pg_auth_members) FROM pg_attribute a"
            ),
            "SELECT CAST(NULL AS TEXT), false, true, '{}' FROM pg_attribute a"
        );
    }

    #[test]
    fn an_outer_has_default_flag_is_dropped_from_a_default_subquery() {
        assert_eq!(
            normalized(
                "SELECT (SELECT pg_get_expr(d.adbin, d.adrelid, true) FROM pg_attrdef d \
                 WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef) \
                 FROM pg_attribute a WHERE a.atthasdef"
            ),
            "SELECT rs_subquery_value((SELECT rs_subquery_rows(pg_get_expr(d.adbin, d.adrelid, true)) \
             FROM pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum)) \
             FROM pg_attribute a WHERE a.atthasdef"
        );
        // SQLAlchemy's spelling, fully qualified.
        assert_eq!(
            normalized(
                "SELECT (SELECT pg_get_expr(pg_catalog.pg_attrdef.adbin, pg_catalog.pg_attrdef.adrelid) \
                 FROM pg_catalog.pg_attrdef WHERE pg_catalog.pg_attribute.atthasdef \
                 AND pg_catalog.pg_attrdef.adrelid = pg_catalog.pg_attribute.attrelid) \
                 FROM pg_catalog.pg_attribute"
            ),
            "SELECT rs_subquery_value((SELECT rs_subquery_rows(pg_get_expr(pg_catalog.pg_attrdef.adbin, \
             pg_catalog.pg_attrdef.adrelid)) FROM pg_catalog.pg_attrdef \
             WHERE pg_catalog.pg_attrdef.adrelid = pg_catalog.pg_attribute.attrelid)) \
             FROM pg_catalog.pg_attribute"
        );
    }

    #[test]
    fn always_null_catalog_arrays_fold() {
        // psql's `\d+ NAME`: the options of a relation and of its TOAST table.
        assert_eq!(
            normalized(
                "SELECT pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x \
                 from pg_catalog.unnest(tc.reloptions) x), ', ') FROM pg_catalog.pg_class c \
                 LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)"
            ),
            "SELECT '' FROM pg_catalog.pg_class c \
             LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)"
        );
        // psql's `\l`.
        assert_eq!(
            normalized("SELECT array_to_string(d.datacl, E'\\n') FROM pg_database d"),
            "SELECT CAST(NULL AS TEXT) FROM pg_database d"
        );
        // psql's `\dp`: no column has an access-control list.
        assert_eq!(
            normalized(
                "SELECT array_to_string(ARRAY(SELECT attname FROM pg_catalog.pg_attribute a \
                 WHERE attrelid = c.oid AND attacl IS NOT NULL), E'\\n') FROM pg_class c"
            ),
            "SELECT '' FROM pg_class c"
        );
        // The same column names of a user's table are planned as written.
        for sql in [
            "SELECT array_to_string(t.reloptions, ',') FROM t",
            "SELECT array_to_string(reloptions, ',') FROM pg_class",
            "SELECT x FROM pg_class c, UNNEST(t.datacl) x (x)",
            "SELECT ARRAY(SELECT x FROM pg_catalog.unnest(t.relacl) x) FROM t",
            // An inner alias hides an outer catalog table of the same name.
            "SELECT 1 FROM pg_class c WHERE EXISTS (SELECT 1 FROM mine c WHERE array_to_string(c.relacl, ',') = '')",
            "SELECT ARRAY(SELECT x FROM mine WHERE attacl IS NOT NULL) FROM pg_class c",
        ] {
            assert_eq!(normalized(sql), sql);
        }
    }

    #[test]
    fn scalar_subqueries_that_do_not_aggregate_count_their_rows() {
        assert_eq!(
            normalized("SELECT (SELECT c.name AS who FROM c WHERE c.id = o.cid) FROM o"),
            "SELECT rs_subquery_value((SELECT rs_subquery_rows(c.name) AS who FROM c WHERE c.id = o.cid)) FROM o"
        );
        for sql in [
            "SELECT (SELECT max(c.name) FROM c WHERE c.id = o.cid) FROM o",
            "SELECT (SELECT c.name FROM c WHERE c.id = o.cid ORDER BY 1 LIMIT 1) FROM o",
            "SELECT (SELECT DISTINCT c.name FROM c WHERE c.id = o.cid) FROM o",
            "SELECT (SELECT c.name FROM c GROUP BY c.name) FROM o",
            "SELECT (SELECT row_number() OVER () FROM c) FROM o",
            "SELECT (SELECT 1) FROM o",
            "SELECT x FROM o WHERE EXISTS (SELECT c.name FROM c WHERE c.id = o.cid)",
            "SELECT (SELECT stddev(c.x) FROM c WHERE c.id = o.cid) FROM o",
            "SELECT (SELECT unnest(c.tags) FROM c WHERE c.id = 1) FROM o",
            "SELECT x FROM o WHERE o.x = ANY(SELECT c.x FROM c)",
            "SELECT x FROM o WHERE o.x > ALL(SELECT c.x FROM c WHERE c.id = o.cid)",
        ] {
            assert_eq!(normalized(sql), sql);
        }
    }

    #[test]
    fn rows_that_can_exist_are_left_alone() {
        for sql in [
            // An aggregate has a row over no rows.
            "SELECT count(*) FROM pg_policy",
            // The empty table is on the nullable side of an outer join.
            "SELECT c.relname FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid",
            "SELECT c.relname FROM pg_inherits i RIGHT JOIN pg_class c ON i.inhrelid = c.oid",
            // A user's table, or one in another schema, of the same name.
            "SELECT * FROM public.pg_policy",
            // A wildcard: the columns are not known here.
            "SELECT * FROM pg_policy",
        ] {
            assert_eq!(normalized(sql), sql);
        }
        // An aggregate inside a subquery does not make one row of the outer query.
        assert!(
            normalized("SELECT (SELECT string_agg(a, ',') FROM t) FROM pg_publication_rel")
                .ends_with("WHERE false")
        );
    }
}
