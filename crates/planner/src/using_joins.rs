//! PostgreSQL's semantics for joins `USING (...)` and `NATURAL` joins.
//!
//! PostgreSQL merges each USING column of a join into one column: `*` lists
//! the merged columns first, then the other columns of the left input, then
//! those of the right; an unqualified name refers to the merged column, and
//! a qualified one (`a.v`) to that input's own. The merged value is the left
//! input's for an inner or left join, the right's for a right join, and
//! `COALESCE(left, right)` for a full join. DataFusion keeps the left
//! input's column where it stands instead, which differs in the order of
//! `*`, in the value of a right or full join's column, and in what an
//! unqualified name means after a chain of full joins.
//!
//! So, before planning, each such join becomes a join `ON` the equalities of
//! its columns, `*` is spelled out, and every unqualified reference to a
//! merged column in the select list, `WHERE`, `GROUP BY`, `HAVING`, later
//! join conditions and `ORDER BY` becomes the merged column's expression.
//! The rewrite needs the columns of every relation joined: it asks
//! DataFusion for the schema of `SELECT * FROM relation` (with the query's
//! common table expressions), then rewrites. A query it cannot rewrite
//! (a relation that does not plan, a join kind it does not know, a column
//! name that is ambiguous) is left as written, for DataFusion to plan or to
//! refuse.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use datafusion::execution::context::SessionContext;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Cte, Expr, GroupByExpr, Ident, Join, JoinConstraint, JoinOperator, ObjectName,
    OrderByKind, Query, Select, SelectItem, SetExpr, TableFactor, TableWithJoins, Value, VisitMut,
    VisitorMut, With,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Rewrites the USING and NATURAL joins of `query`, and of every query
/// nested in it, in place (see the module documentation).
pub async fn rewrite_using_joins(context: &SessionContext, query: &mut Query) {
    let mut collect = Walker::new(Mode::Collect(Vec::new()));
    let _ = query.visit(&mut collect);
    let Mode::Collect(requests) = collect.mode else {
        unreachable!("collect mode stays collect")
    };
    if requests.is_empty() {
        return;
    }
    let mut columns = HashMap::new();
    for request in requests {
        if columns.contains_key(&request) {
            continue;
        }
        let Ok(plan) = context.state().create_logical_plan(&request).await else {
            // Left as written: planning the query reports the problem.
            return;
        };
        let names = plan
            .schema()
            .fields()
            .iter()
            .map(|field| field.name().clone())
            .collect();
        columns.insert(request, names);
    }
    let _ = query.visit(&mut Walker::new(Mode::Apply(columns)));
}

enum Mode {
    /// The `SELECT * FROM relation` texts whose columns the rewrite needs.
    Collect(Vec<String>),
    /// Their answers, by text.
    Apply(HashMap<String, Vec<String>>),
}

struct Walker {
    mode: Mode,
    /// The common table expressions in scope, outermost query first.
    ctes: Vec<Vec<Cte>>,
}

impl Walker {
    fn new(mode: Mode) -> Walker {
        Walker {
            mode,
            ctes: Vec::new(),
        }
    }

    /// The text whose schema gives the columns of `factor`.
    fn request(&self, factor: &TableFactor) -> String {
        let ctes: Vec<&Cte> = self.ctes.iter().flatten().collect();
        if ctes.is_empty() {
            return format!("SELECT * FROM {factor}");
        }
        let list: Vec<String> = ctes.iter().map(ToString::to_string).collect();
        format!("WITH {} SELECT * FROM {factor}", list.join(", "))
    }

    fn visit_set_expr(&mut self, body: &mut SetExpr, order_by: Option<&mut Vec<Expr>>) {
        match body {
            SetExpr::Select(select) if joins_using(select) => {
                let mut factors = Vec::new();
                for item in &select.from {
                    leaves(item, &mut factors);
                }
                let requests: Vec<(String, String)> = factors
                    .iter()
                    .map(|factor| (factor.to_string(), self.request(factor)))
                    .collect();
                match &mut self.mode {
                    Mode::Collect(all) => all.extend(requests.into_iter().map(|(_, text)| text)),
                    Mode::Apply(known) => {
                        let columns: HashMap<String, Vec<String>> = requests
                            .into_iter()
                            .filter_map(|(factor, text)| Some((factor, known.get(&text)?.clone())))
                            .collect();
                        // Rewritten on a copy, kept only when the whole SELECT could be.
                        let mut candidate = select.clone();
                        let mut candidate_order = order_by.as_deref().cloned();
                        if rewrite_select(&mut candidate, candidate_order.as_mut(), &columns)
                            .is_some()
                        {
                            *select = candidate;
                            if let (Some(order_by), Some(rewritten)) = (order_by, candidate_order) {
                                *order_by = rewritten;
                            }
                        }
                    }
                }
            }
            SetExpr::SetOperation { left, right, .. } => {
                self.visit_set_expr(left, None);
                self.visit_set_expr(right, None);
            }
            _ => {}
        }
    }
}

impl VisitorMut for Walker {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let ctes = query
            .with
            .as_ref()
            .map(|With { cte_tables, .. }| cte_tables.clone())
            .unwrap_or_default();
        self.ctes.push(ctes);
        let mut order_by: Option<Vec<Expr>> = match &query.order_by {
            Some(order_by) => match &order_by.kind {
                OrderByKind::Expressions(exprs) => {
                    Some(exprs.iter().map(|expr| expr.expr.clone()).collect())
                }
                OrderByKind::All(_) => None,
            },
            None => None,
        };
        self.visit_set_expr(&mut query.body, order_by.as_mut());
        if let (Some(order_by), Some(rewritten)) = (&mut query.order_by, order_by) {
            if let OrderByKind::Expressions(exprs) = &mut order_by.kind {
                for (expr, new) in exprs.iter_mut().zip(rewritten) {
                    expr.expr = new;
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.ctes.pop();
        ControlFlow::Continue(())
    }
}

/// Whether a FROM item of `select` joins with USING or NATURAL.
fn joins_using(select: &Select) -> bool {
    fn item_uses(item: &TableWithJoins) -> bool {
        factor_uses(&item.relation)
            || item.joins.iter().any(|join| {
                matches!(
                    constraint(&join.join_operator),
                    Some(JoinConstraint::Using(_) | JoinConstraint::Natural)
                ) || factor_uses(&join.relation)
            })
    }
    fn factor_uses(factor: &TableFactor) -> bool {
        match factor {
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => item_uses(table_with_joins),
            _ => false,
        }
    }
    select.from.iter().any(item_uses)
}

/// The relations (not joins) of a FROM item, left to right.
fn leaves<'a>(item: &'a TableWithJoins, out: &mut Vec<&'a TableFactor>) {
    let factors =
        std::iter::once(&item.relation).chain(item.joins.iter().map(|join| &join.relation));
    for factor in factors {
        match factor {
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => leaves(table_with_joins, out),
            other => out.push(other),
        }
    }
}

fn constraint(operator: &JoinOperator) -> Option<&JoinConstraint> {
    match operator {
        JoinOperator::Join(constraint)
        | JoinOperator::Inner(constraint)
        | JoinOperator::Left(constraint)
        | JoinOperator::LeftOuter(constraint)
        | JoinOperator::Right(constraint)
        | JoinOperator::RightOuter(constraint)
        | JoinOperator::FullOuter(constraint)
        | JoinOperator::CrossJoin(constraint) => Some(constraint),
        _ => None,
    }
}

/// One column a FROM clause makes visible, in `*` order.
#[derive(Clone)]
struct Visible {
    name: String,
    expr: Expr,
}

/// A merged column: the first of `parts` that is not NULL. A chain of full
/// joins merges into one flat `COALESCE`, as a nested one would grow
/// exponentially once DataFusion rewrites each level into a `CASE` that
/// repeats its first argument.
#[derive(Clone)]
struct Merged {
    parts: Vec<Expr>,
    expr: Expr,
}

impl Merged {
    fn of(parts: Vec<Expr>) -> Option<Merged> {
        let expr = match parts.as_slice() {
            [only] => only.clone(),
            _ => {
                let list: Vec<String> = parts.iter().map(ToString::to_string).collect();
                Parser::new(&PostgreSqlDialect {})
                    .try_with_sql(&format!("COALESCE({})", list.join(", ")))
                    .ok()?
                    .parse_expr()
                    .ok()?
            }
        };
        Some(Merged { parts, expr })
    }
}

/// The columns of a FROM item, and which names are merged columns.
#[derive(Default)]
struct Scope {
    columns: Vec<Visible>,
    merged: HashMap<String, Merged>,
}

impl Scope {
    /// The unqualified names that refer to merged columns, and what they
    /// stand for.
    fn merged_exprs(&self) -> HashMap<String, Expr> {
        self.merged
            .iter()
            .map(|(name, merged)| (name.clone(), merged.expr.clone()))
            .collect()
    }
}

/// Rewrites `select` (and its query's ORDER BY expressions); `None` when it
/// cannot, in which case the caller keeps the original.
fn rewrite_select(
    select: &mut Select,
    order_by: Option<&mut Vec<Expr>>,
    columns: &HashMap<String, Vec<String>>,
) -> Option<()> {
    let mut scope = Scope::default();
    for item in &mut select.from {
        let item_scope = rewrite_item(item, columns)?;
        for (name, expr) in item_scope.merged {
            if scope.merged.insert(name, expr).is_some() {
                return None;
            }
        }
        scope.columns.extend(item_scope.columns);
    }
    let merged = scope.merged_exprs();
    let output_names: HashSet<String> = select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(normalized(alias)),
            SelectItem::UnnamedExpr(Expr::Identifier(ident)) => Some(normalized(ident)),
            _ => None,
        })
        .collect();
    let mut projection = Vec::with_capacity(select.projection.len());
    for item in select.projection.drain(..) {
        match item {
            SelectItem::Wildcard(options) => {
                let plain = options.opt_ilike.is_none()
                    && options.opt_exclude.is_none()
                    && options.opt_except.is_none()
                    && options.opt_replace.is_none()
                    && options.opt_rename.is_none()
                    && options.opt_alias.is_none();
                if !plain {
                    return None;
                }
                for column in &scope.columns {
                    projection.push(SelectItem::ExprWithAlias {
                        expr: column.expr.clone(),
                        alias: Ident::with_quote('"', &column.name),
                    });
                }
            }
            SelectItem::UnnamedExpr(Expr::Identifier(ident))
                if merged.contains_key(&normalized(&ident)) =>
            {
                projection.push(SelectItem::ExprWithAlias {
                    expr: merged[&normalized(&ident)].clone(),
                    alias: ident,
                });
            }
            SelectItem::UnnamedExpr(mut expr) => {
                replace_merged(&mut expr, &merged);
                projection.push(SelectItem::UnnamedExpr(expr));
            }
            SelectItem::ExprWithAlias { mut expr, alias } => {
                replace_merged(&mut expr, &merged);
                projection.push(SelectItem::ExprWithAlias { expr, alias });
            }
            other => projection.push(other),
        }
    }
    select.projection = projection;
    for expr in select
        .selection
        .iter_mut()
        .chain(select.having.iter_mut())
        .chain(select.qualify.iter_mut())
    {
        replace_merged(expr, &merged);
    }
    if let GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
        for expr in exprs {
            replace_merged(expr, &merged);
        }
    }
    if let Some(order_by) = order_by {
        // An ORDER BY name refers to an output column first.
        let merged: HashMap<String, Expr> = merged
            .into_iter()
            .filter(|(name, _)| !output_names.contains(name))
            .collect();
        for expr in order_by {
            replace_merged(expr, &merged);
        }
    }
    Some(())
}

/// Rewrites the joins of one FROM item; its columns in `*` order.
fn rewrite_item(
    item: &mut TableWithJoins,
    columns: &HashMap<String, Vec<String>>,
) -> Option<Scope> {
    let mut scope = factor_scope(&mut item.relation, columns)?;
    for join in &mut item.joins {
        let right = factor_scope(&mut join.relation, columns)?;
        scope = join_scopes(join, scope, right)?;
    }
    Some(scope)
}

fn factor_scope(factor: &mut TableFactor, columns: &HashMap<String, Vec<String>>) -> Option<Scope> {
    if let TableFactor::NestedJoin {
        table_with_joins,
        alias: None,
    } = factor
    {
        return rewrite_item(table_with_joins, columns);
    }
    let names = columns.get(&factor.to_string())?;
    let qualifier: Vec<Ident> = match factor {
        TableFactor::Table {
            alias: Some(alias), ..
        }
        | TableFactor::Derived {
            alias: Some(alias), ..
        }
        | TableFactor::Function {
            alias: Some(alias), ..
        } => vec![alias.name.clone()],
        TableFactor::Table {
            name: ObjectName(parts),
            alias: None,
            ..
        } => parts
            .iter()
            .map(|part| part.as_ident().cloned())
            .collect::<Option<_>>()?,
        _ => return None,
    };
    let columns = names
        .iter()
        .map(|name| {
            let mut parts = qualifier.clone();
            parts.push(Ident::with_quote('"', name));
            Visible {
                name: name.clone(),
                expr: Expr::CompoundIdentifier(parts),
            }
        })
        .collect();
    Some(Scope {
        columns,
        merged: HashMap::new(),
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Left,
    Right,
    Both,
}

/// The scope of `left JOIN right`, rewriting a USING or NATURAL constraint
/// into ON.
fn join_scopes(join: &mut Join, mut left: Scope, right: Scope) -> Option<Scope> {
    let merge = match &join.join_operator {
        JoinOperator::Join(_)
        | JoinOperator::Inner(_)
        | JoinOperator::Left(_)
        | JoinOperator::LeftOuter(_) => Side::Left,
        JoinOperator::Right(_) | JoinOperator::RightOuter(_) => Side::Right,
        JoinOperator::FullOuter(_) => Side::Both,
        JoinOperator::CrossJoin(_) => {
            left.columns.extend(right.columns);
            left.merged.extend(right.merged);
            return Some(left);
        }
        _ => return None,
    };
    let names: Vec<String> = match constraint(&join.join_operator)? {
        JoinConstraint::Using(names) => names
            .iter()
            .map(|name| match name.0.as_slice() {
                [part] => part.as_ident().map(normalized),
                _ => None,
            })
            .collect::<Option<_>>()?,
        JoinConstraint::Natural => left
            .columns
            .iter()
            .filter(|column| right.columns.iter().any(|other| other.name == column.name))
            .map(|column| column.name.clone())
            .collect(),
        JoinConstraint::On(condition) => {
            // Earlier joins' merged columns are visible in the condition.
            let mut visible = left.merged_exprs();
            visible.extend(right.merged_exprs());
            let mut condition = condition.clone();
            replace_merged(&mut condition, &visible);
            set_constraint(&mut join.join_operator, JoinConstraint::On(condition));
            left.columns.extend(right.columns);
            left.merged.extend(right.merged);
            return Some(left);
        }
        JoinConstraint::None => {
            left.columns.extend(right.columns);
            left.merged.extend(right.merged);
            return Some(left);
        }
    };
    // A column of one side: its merged parts if it was merged.
    let unique = |scope: &Scope, name: &str| {
        let mut found = scope.columns.iter().filter(|column| column.name == name);
        match (found.next(), found.next()) {
            (Some(column), None) => Some(match scope.merged.get(name) {
                Some(merged) => merged.clone(),
                None => Merged::of(vec![column.expr.clone()])?,
            }),
            _ => None,
        }
    };
    let mut equalities = Vec::new();
    let mut merged_columns = Vec::new();
    let mut merged = HashMap::new();
    for name in &names {
        let left_value = unique(&left, name)?;
        let right_value = unique(&right, name)?;
        equalities.push(Expr::BinaryOp {
            left: Box::new(left_value.expr.clone()),
            op: BinaryOperator::Eq,
            right: Box::new(right_value.expr.clone()),
        });
        let value = match merge {
            Side::Left => left_value,
            Side::Right => right_value,
            Side::Both => Merged::of([left_value.parts, right_value.parts].concat())?,
        };
        merged_columns.push(Visible {
            name: name.clone(),
            expr: value.expr.clone(),
        });
        merged.insert(name.clone(), value);
    }
    let condition = equalities
        .into_iter()
        .reduce(|a, b| Expr::BinaryOp {
            left: Box::new(a),
            op: BinaryOperator::And,
            right: Box::new(b),
        })
        .unwrap_or(Expr::Value(Value::Boolean(true).into()));
    set_constraint(&mut join.join_operator, JoinConstraint::On(condition));
    let mut columns = merged_columns;
    let used: HashSet<&String> = names.iter().collect();
    columns.extend(
        left.columns
            .into_iter()
            .chain(right.columns)
            .filter(|column| !used.contains(&column.name)),
    );
    // A name merged earlier and joined again is now this join's column.
    let mut all_merged = left.merged;
    all_merged.extend(right.merged);
    all_merged.extend(merged);
    Some(Scope {
        columns,
        merged: all_merged,
    })
}

fn set_constraint(operator: &mut JoinOperator, new: JoinConstraint) {
    match operator {
        JoinOperator::Join(constraint)
        | JoinOperator::Inner(constraint)
        | JoinOperator::Left(constraint)
        | JoinOperator::LeftOuter(constraint)
        | JoinOperator::Right(constraint)
        | JoinOperator::RightOuter(constraint)
        | JoinOperator::FullOuter(constraint)
        | JoinOperator::CrossJoin(constraint) => *constraint = new,
        _ => {}
    }
}

/// An identifier as the catalog spells it: folded to lower case unless
/// quoted.
fn normalized(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// Replaces unqualified references to merged columns in `expr`, but not
/// inside its subqueries, which have scopes of their own.
fn replace_merged(expr: &mut Expr, merged: &HashMap<String, Expr>) {
    struct Replace<'a> {
        merged: &'a HashMap<String, Expr>,
        depth: usize,
    }
    impl VisitorMut for Replace<'_> {
        type Break = ();

        fn pre_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
            self.depth += 1;
            ControlFlow::Continue(())
        }

        fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }

        fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if self.depth == 0 {
                if let Expr::Identifier(ident) = expr {
                    if let Some(replacement) = self.merged.get(&normalized(ident)) {
                        *expr = Expr::Nested(Box::new(replacement.clone()));
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    if merged.is_empty() {
        return;
    }
    let _ = expr.visit(&mut Replace { merged, depth: 0 });
}
