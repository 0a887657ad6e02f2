//! PostgreSQL's semantics for joins `USING (...)` and `NATURAL` joins.
//!
//! PostgreSQL merges each USING column of a join into one column: `*` lists
//! the merged columns first, then the other columns of the left input, then
//! those of the right; an unqualified name refers to the merged column, and
//! a qualified one (`a.v`) to that input's own. The merged value is the left
//! input's for an inner or left join, the right's for a right join, and
//! `COALESCE(left, right)` for a full join. DataFusion keeps the left
//! input's column where it stands instead: right for the values of inner and
//! left joins, wrong for the order of `*`, and wrong for the values of right
//! and full joins.
//!
//! So, before planning:
//! - `*` is spelled out in PostgreSQL's order wherever a FROM clause joins
//!   with USING or NATURAL;
//! - a right or full join (and any join on a column such a join merged)
//!   becomes a join `ON` the equalities of its columns, and every
//!   unqualified reference to its merged columns in the select list,
//!   `WHERE`, `GROUP BY`, `HAVING`, `DISTINCT ON`, windows, later join
//!   conditions and `ORDER BY` becomes the merged column's expression. A
//!   chain of full joins merges into one flat `COALESCE`: a nested one would
//!   grow exponentially once DataFusion rewrites each level into a `CASE`
//!   repeating its first argument.
//!
//! Inner and left joins keep their USING, so DataFusion resolves their
//! columns everywhere, subqueries included. Spelling out `*` needs the
//! columns of every relation joined: the rewrite plans `SELECT * FROM
//! relation` (with the common table expressions in scope, rewritten the same
//! way) and reads its schema. A right or full join the rewrite cannot handle
//! (a relation that does not plan, a name that is ambiguous on one side, a
//! LATERAL subquery) fails the statement rather than being planned with
//! DataFusion's meaning; elsewhere the query is left as written.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;

use datafusion::common::plan_datafusion_err;
use datafusion::error::Result;
use datafusion::execution::context::SessionContext;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Cte, Distinct, Expr, GroupByExpr, Ident, Join, JoinConstraint, JoinOperator,
    ObjectName, OrderByKind, Query, Select, SelectItem, SetExpr, Statement, TableFactor,
    TableWithJoins, Value, Visit, VisitMut, Visitor, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::ast_walk::{for_each_select, for_each_select_mut, for_each_unnested_expr};

type RewriteFuture<'a> = Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

/// Whether `query`, or a query nested in it, joins with USING or NATURAL:
/// a cheap test before cloning a statement to rewrite it.
pub fn uses_using_joins(query: &Query) -> bool {
    struct Finder;
    impl Visitor for Finder {
        type Break = ();

        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            let mut found = false;
            for_each_select(&query.body, &mut |select| {
                found |= using_kind(select).is_some()
            });
            if found {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }
    }
    query.visit(&mut Finder).is_break()
}

/// Rewrites the USING and NATURAL joins of `query`, and of every query
/// nested in it, in place (see the module documentation).
pub fn rewrite_using_joins<'a>(
    context: &'a SessionContext,
    query: &'a mut Query,
) -> RewriteFuture<'a> {
    Box::pin(async move {
        let mut collect = Walker::new(Mode::Collect(Vec::new()));
        let _ = query.visit(&mut collect);
        let Mode::Collect(requests) = collect.mode else {
            unreachable!("collect mode stays collect")
        };
        drop(collect.frames);
        if requests.is_empty() {
            return Ok(());
        }
        let mut columns = HashMap::new();
        for Request { text, required } in requests {
            if columns.contains_key(&text) {
                continue;
            }
            match columns_of(context, &text).await {
                Ok(names) => {
                    columns.insert(text, names);
                }
                Err(error) if required => return Err(error),
                // The SELECT stays as written.
                Err(_) => {}
            }
        }
        let mut apply = Walker::new(Mode::Apply(columns));
        let _ = query.visit(&mut apply);
        match apply.failure {
            Some(message) => Err(plan_datafusion_err!("{message}")),
            None => Ok(()),
        }
    })
}

/// The column names of `SELECT * FROM relation`, itself rewritten first.
async fn columns_of(context: &SessionContext, text: &str) -> Result<Vec<String>> {
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, text)?;
    let [Statement::Query(query)] = statements.as_slice() else {
        return Err(plan_datafusion_err!("not a query: {text}"));
    };
    let mut query = query.clone();
    rewrite_using_joins(context, &mut query).await?;
    let plan = context
        .state()
        .create_logical_plan(&query.to_string())
        .await?;
    Ok(plan
        .schema()
        .fields()
        .iter()
        .map(|field| field.name().clone())
        .collect())
}

/// A `SELECT * FROM relation` whose columns a rewrite needs; `required`
/// when a right or full join depends on it.
struct Request {
    text: String,
    required: bool,
}

enum Mode {
    Collect(Vec<Request>),
    /// The columns of each request, by text.
    Apply(HashMap<String, Vec<String>>),
}

/// The common table expressions a query sees.
struct Frame {
    /// Those of the enclosing queries.
    outer: Vec<Cte>,
    /// The query's own, in order.
    own: Vec<Cte>,
    /// Where the query's own CTE bodies are in the tree, to know which of
    /// its CTEs each of them sees.
    bodies: Vec<usize>,
    recursive: bool,
}

impl Frame {
    /// The CTEs the query's body sees; an inner one hides an outer one of
    /// the same name.
    fn visible(&self, own_count: usize) -> Vec<Cte> {
        let own = &self.own[..own_count];
        let mut visible: Vec<Cte> = self
            .outer
            .iter()
            .filter(|cte| own.iter().all(|inner| inner.alias.name != cte.alias.name))
            .cloned()
            .collect();
        visible.extend(own.iter().cloned());
        visible
    }
}

struct Walker {
    mode: Mode,
    frames: Vec<Frame>,
    /// Why a right or full join could not be rewritten.
    failure: Option<String>,
}

impl Walker {
    fn new(mode: Mode) -> Walker {
        Walker {
            mode,
            frames: Vec::new(),
            failure: None,
        }
    }

    /// The text whose schema gives the columns of `factor`.
    fn request(&self, factor: &TableFactor) -> String {
        let Some(frame) = self.frames.last() else {
            return format!("SELECT * FROM {factor}");
        };
        let ctes = frame.visible(frame.own.len());
        if ctes.is_empty() {
            return format!("SELECT * FROM {factor}");
        }
        let recursive = self.frames.iter().any(|frame| frame.recursive);
        let list: Vec<String> = ctes.iter().map(ToString::to_string).collect();
        format!(
            "WITH {}{} SELECT * FROM {factor}",
            if recursive { "RECURSIVE " } else { "" },
            list.join(", ")
        )
    }

    fn visit_select(&mut self, select: &mut Select, order_by: Option<&mut Vec<Expr>>) {
        let Some(kind) = using_kind(select) else {
            return;
        };
        let wildcard = select
            .projection
            .iter()
            .any(|item| matches!(item, SelectItem::Wildcard(_)));
        if kind == UsingKind::InnerOrLeft && !wildcard {
            // DataFusion already reads these as PostgreSQL does.
            return;
        }
        let required = kind == UsingKind::RightOrFull;
        let mut factors = Vec::new();
        for item in &select.from {
            leaves(item, &mut factors);
        }
        let requests: Vec<(String, String)> = factors
            .iter()
            .map(|factor| (factor.to_string(), self.request(factor)))
            .collect();
        match &mut self.mode {
            Mode::Collect(all) => all.extend(
                requests
                    .into_iter()
                    .map(|(_, text)| Request { text, required }),
            ),
            Mode::Apply(known) => {
                let columns: HashMap<String, Vec<String>> = requests
                    .into_iter()
                    .filter_map(|(factor, text)| Some((factor, known.get(&text)?.clone())))
                    .collect();
                // Rewritten on a copy, kept only when the whole SELECT could be.
                let mut candidate = select.clone();
                let mut candidate_order = order_by.as_deref().cloned();
                match rewrite_select(&mut candidate, candidate_order.as_mut(), &columns) {
                    Ok(()) => {
                        *select = candidate;
                        if let (Some(order_by), Some(rewritten)) = (order_by, candidate_order) {
                            *order_by = rewritten;
                        }
                    }
                    Err(message) if required => {
                        self.failure.get_or_insert(message);
                    }
                    Err(_) => {}
                }
            }
        }
    }
}

impl VisitorMut for Walker {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let address = query as *const Query as usize;
        // A CTE body sees the CTEs before it (all of them if recursive).
        let outer = match self.frames.last() {
            Some(frame) => match frame.bodies.iter().position(|body| *body == address) {
                Some(index) if !frame.recursive => frame.visible(index),
                _ => frame.visible(frame.own.len()),
            },
            None => Vec::new(),
        };
        let (own, bodies, recursive) = match &query.with {
            Some(with) => (
                with.cte_tables.clone(),
                with.cte_tables
                    .iter()
                    .map(|cte| cte.query.as_ref() as *const Query as usize)
                    .collect(),
                with.recursive,
            ),
            None => (Vec::new(), Vec::new(), false),
        };
        self.frames.push(Frame {
            outer,
            own,
            bodies,
            recursive,
        });
        let mut order_by: Option<Vec<Expr>> = match &query.order_by {
            Some(order_by) => match &order_by.kind {
                OrderByKind::Expressions(exprs) => {
                    Some(exprs.iter().map(|expr| expr.expr.clone()).collect())
                }
                OrderByKind::All(_) => None,
            },
            None => None,
        };
        match query.body.as_mut() {
            SetExpr::Select(select) => self.visit_select(select, order_by.as_mut()),
            body => for_each_select_mut(body, &mut |select| self.visit_select(select, None)),
        }
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
        self.frames.pop();
        ControlFlow::Continue(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UsingKind {
    InnerOrLeft,
    RightOrFull,
}

/// The strongest kind of join with USING or NATURAL in `select`'s FROM.
fn using_kind(select: &Select) -> Option<UsingKind> {
    fn item_kind(item: &TableWithJoins, kind: &mut Option<UsingKind>) {
        factor_kind(&item.relation, kind);
        for join in &item.joins {
            factor_kind(&join.relation, kind);
            if matches!(
                constraint(&join.join_operator),
                Some(JoinConstraint::Using(_) | JoinConstraint::Natural)
            ) {
                let this = match merge_side(&join.join_operator) {
                    Some(Side::Left) => UsingKind::InnerOrLeft,
                    _ => UsingKind::RightOrFull,
                };
                *kind = Some(kind.map_or(this, |kind| kind.max_with(this)));
            }
        }
    }
    fn factor_kind(factor: &TableFactor, kind: &mut Option<UsingKind>) {
        if let TableFactor::NestedJoin {
            table_with_joins, ..
        } = factor
        {
            item_kind(table_with_joins, kind);
        }
    }
    let mut kind = None;
    for item in &select.from {
        item_kind(item, &mut kind);
    }
    kind
}

impl UsingKind {
    fn max_with(self, other: UsingKind) -> UsingKind {
        if self == UsingKind::RightOrFull || other == UsingKind::RightOrFull {
            UsingKind::RightOrFull
        } else {
            UsingKind::InnerOrLeft
        }
    }
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

/// Which input a join's merged columns take their value from.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    Left,
    Right,
    /// The first of the two that is not NULL.
    Both,
}

fn merge_side(operator: &JoinOperator) -> Option<Side> {
    match operator {
        JoinOperator::Join(_)
        | JoinOperator::Inner(_)
        | JoinOperator::Left(_)
        | JoinOperator::LeftOuter(_) => Some(Side::Left),
        JoinOperator::Right(_) | JoinOperator::RightOuter(_) => Some(Side::Right),
        JoinOperator::FullOuter(_) => Some(Side::Both),
        _ => None,
    }
}

/// One column a FROM clause makes visible, in `*` order.
#[derive(Clone)]
struct Visible {
    name: String,
    expr: Expr,
}

/// A merged column: the first of `parts` that is not NULL.
#[derive(Clone)]
struct Merged {
    parts: Vec<Expr>,
    expr: Expr,
    /// Whether its join became a join ON, so that DataFusion no longer
    /// knows the name and references to it must be replaced.
    rewritten: bool,
}

impl Merged {
    fn of(parts: Vec<Expr>, rewritten: bool) -> std::result::Result<Merged, String> {
        let expr = match parts.as_slice() {
            [only] => only.clone(),
            _ => {
                let list: Vec<String> = parts.iter().map(ToString::to_string).collect();
                Parser::new(&PostgreSqlDialect {})
                    .try_with_sql(&format!("COALESCE({})", list.join(", ")))
                    .and_then(|mut parser| parser.parse_expr())
                    .map_err(|error| error.to_string())?
            }
        };
        Ok(Merged {
            parts,
            expr,
            rewritten,
        })
    }
}

/// The columns of a FROM item, and which names are merged columns.
#[derive(Default)]
struct Scope {
    columns: Vec<Visible>,
    merged: HashMap<String, Merged>,
}

impl Scope {
    /// The unqualified names that must be replaced, and by what.
    fn replacements(&self) -> HashMap<String, Expr> {
        self.merged
            .iter()
            .filter(|(_, merged)| merged.rewritten)
            .map(|(name, merged)| (name.clone(), merged.expr.clone()))
            .collect()
    }

    fn extend(&mut self, other: Scope) {
        self.columns.extend(other.columns);
        self.merged.extend(other.merged);
    }
}

type Rewrite<T> = std::result::Result<T, String>;

/// What makes a join unfit for the rewrite, for the statement's error.
const UNFIT: &str = "this RIGHT or FULL join with USING or NATURAL cannot be planned with \
                     PostgreSQL's meaning yet; write its condition with ON";

/// Rewrites `select` (and its query's ORDER BY expressions).
fn rewrite_select(
    select: &mut Select,
    order_by: Option<&mut Vec<Expr>>,
    columns: &HashMap<String, Vec<String>>,
) -> Rewrite<()> {
    let mut scope = Scope::default();
    for item in &mut select.from {
        let item_scope = rewrite_item(item, columns)?;
        for (name, merged) in item_scope.merged {
            if scope.merged.insert(name.clone(), merged).is_some() {
                return Err(format!("column reference \"{name}\" is ambiguous"));
            }
        }
        scope.columns.extend(item_scope.columns);
    }
    let replacements = scope.replacements();
    let mut output_names: HashSet<String> = HashSet::new();
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
                    return Err(UNFIT.to_string());
                }
                for column in &scope.columns {
                    output_names.insert(column.name.clone());
                    projection.push(SelectItem::ExprWithAlias {
                        expr: column.expr.clone(),
                        alias: Ident::with_quote('"', &column.name),
                    });
                }
            }
            SelectItem::UnnamedExpr(Expr::Identifier(ident))
                if replacements.contains_key(&normalized(&ident)) =>
            {
                output_names.insert(normalized(&ident));
                projection.push(SelectItem::ExprWithAlias {
                    expr: replacements[&normalized(&ident)].clone(),
                    alias: ident,
                });
            }
            SelectItem::UnnamedExpr(mut expr) => {
                match &expr {
                    Expr::Identifier(ident) => {
                        output_names.insert(normalized(ident));
                    }
                    Expr::CompoundIdentifier(parts) => {
                        output_names.extend(parts.last().map(normalized));
                    }
                    _ => {}
                }
                replace_merged(&mut expr, &replacements);
                projection.push(SelectItem::UnnamedExpr(expr));
            }
            SelectItem::ExprWithAlias { mut expr, alias } => {
                output_names.insert(normalized(&alias));
                replace_merged(&mut expr, &replacements);
                projection.push(SelectItem::ExprWithAlias { expr, alias });
            }
            mut other => {
                replace_merged(&mut other, &replacements);
                projection.push(other);
            }
        }
    }
    select.projection = projection;
    for expr in select
        .selection
        .iter_mut()
        .chain(select.having.iter_mut())
        .chain(select.qualify.iter_mut())
    {
        replace_merged(expr, &replacements);
    }
    if let GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
        for expr in exprs {
            replace_merged(expr, &replacements);
        }
    }
    if let Some(Distinct::On(exprs)) = &mut select.distinct {
        for expr in exprs {
            replace_merged(expr, &replacements);
        }
    }
    for window in &mut select.named_window {
        replace_merged(window, &replacements);
    }
    if let Some(order_by) = order_by {
        for expr in order_by {
            // A bare ORDER BY name refers to an output column first.
            let output = matches!(expr, Expr::Identifier(ident) if output_names.contains(&normalized(ident)));
            if !output {
                replace_merged(expr, &replacements);
            }
        }
    }
    Ok(())
}

/// Rewrites the joins of one FROM item; its columns in `*` order.
fn rewrite_item(
    item: &mut TableWithJoins,
    columns: &HashMap<String, Vec<String>>,
) -> Rewrite<Scope> {
    let mut scope = factor_scope(&mut item.relation, columns)?;
    for join in &mut item.joins {
        let right = factor_scope(&mut join.relation, columns)?;
        scope = join_scopes(join, scope, right)?;
    }
    Ok(scope)
}

fn factor_scope(
    factor: &mut TableFactor,
    columns: &HashMap<String, Vec<String>>,
) -> Rewrite<Scope> {
    if let TableFactor::NestedJoin {
        table_with_joins,
        alias: None,
    } = factor
    {
        return rewrite_item(table_with_joins, columns);
    }
    let names = columns
        .get(&factor.to_string())
        .ok_or_else(|| UNFIT.to_string())?;
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
            .collect::<Option<_>>()
            .ok_or_else(|| UNFIT.to_string())?,
        _ => return Err(UNFIT.to_string()),
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
    Ok(Scope {
        columns,
        merged: HashMap::new(),
    })
}

/// The scope of `left JOIN right`; a USING or NATURAL constraint that
/// DataFusion would read differently from PostgreSQL becomes ON.
fn join_scopes(join: &mut Join, mut left: Scope, right: Scope) -> Rewrite<Scope> {
    let Some(merge) = merge_side(&join.join_operator) else {
        if matches!(join.join_operator, JoinOperator::CrossJoin(_)) {
            left.extend(right);
            return Ok(left);
        }
        return Err(UNFIT.to_string());
    };
    let names: Vec<String> = match constraint(&join.join_operator) {
        Some(JoinConstraint::Using(names)) => names
            .iter()
            .map(|name| match name.0.as_slice() {
                [part] => part.as_ident().map(normalized),
                _ => None,
            })
            .collect::<Option<_>>()
            .ok_or_else(|| UNFIT.to_string())?,
        Some(JoinConstraint::Natural) => left
            .columns
            .iter()
            .filter(|column| right.columns.iter().any(|other| other.name == column.name))
            .map(|column| column.name.clone())
            .collect(),
        Some(JoinConstraint::On(condition)) => {
            // Earlier joins' merged columns are visible in the condition.
            let mut visible = left.replacements();
            visible.extend(right.replacements());
            let mut condition = condition.clone();
            replace_merged(&mut condition, &visible);
            set_constraint(&mut join.join_operator, JoinConstraint::On(condition));
            left.extend(right);
            return Ok(left);
        }
        _ => {
            left.extend(right);
            return Ok(left);
        }
    };
    // A column of one side, as its merged parts if it was merged.
    let side_value = |scope: &Scope, name: &str, side: &str| -> Rewrite<Merged> {
        let mut found = scope.columns.iter().filter(|column| column.name == name);
        match (found.next(), found.next()) {
            (Some(column), None) => match scope.merged.get(name) {
                Some(merged) => Ok(merged.clone()),
                None => Merged::of(vec![column.expr.clone()], false),
            },
            (Some(_), Some(_)) => Err(format!(
                "common column name \"{name}\" appears more than once in {side} table"
            )),
            (None, _) => Err(format!(
                "column \"{name}\" specified in USING clause does not exist in {side} table"
            )),
        }
    };
    let values: Vec<(Merged, Merged)> = names
        .iter()
        .map(|name| {
            Ok((
                side_value(&left, name, "left")?,
                side_value(&right, name, "right")?,
            ))
        })
        .collect::<Rewrite<_>>()?;
    let rewrite = merge != Side::Left
        || values
            .iter()
            .any(|(left, right)| left.rewritten || right.rewritten);
    if rewrite {
        let condition = values
            .iter()
            .map(|(left, right)| Expr::BinaryOp {
                left: Box::new(left.expr.clone()),
                op: BinaryOperator::Eq,
                right: Box::new(right.expr.clone()),
            })
            .reduce(|a, b| Expr::BinaryOp {
                left: Box::new(a),
                op: BinaryOperator::And,
                right: Box::new(b),
            })
            .unwrap_or(Expr::Value(Value::Boolean(true).into()));
        set_constraint(&mut join.join_operator, JoinConstraint::On(condition));
    }
    let mut columns = Vec::with_capacity(left.columns.len() + right.columns.len());
    let mut merged = left.merged;
    merged.extend(right.merged);
    for (name, (left_value, right_value)) in names.iter().zip(values) {
        let value = match merge {
            Side::Left => Merged {
                rewritten: rewrite,
                ..left_value
            },
            Side::Right => Merged {
                rewritten: rewrite,
                ..right_value
            },
            Side::Both => Merged::of([left_value.parts, right_value.parts].concat(), true)?,
        };
        columns.push(Visible {
            name: name.clone(),
            expr: value.expr.clone(),
        });
        merged.insert(name.clone(), value);
    }
    let used: HashSet<&String> = names.iter().collect();
    columns.extend(
        left.columns
            .into_iter()
            .chain(right.columns)
            .filter(|column| !used.contains(&column.name)),
    );
    Ok(Scope { columns, merged })
}

/// An identifier as the catalog spells it: folded to lower case unless
/// quoted.
fn normalized(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// Replaces unqualified references to merged columns in `node`, but not
/// inside its subqueries, which have scopes of their own.
fn replace_merged<T: VisitMut>(node: &mut T, replacements: &HashMap<String, Expr>) {
    if replacements.is_empty() {
        return;
    }
    for_each_unnested_expr(node, &mut |expr| {
        if let Expr::Identifier(ident) = expr {
            if let Some(replacement) = replacements.get(&normalized(ident)) {
                *expr = Expr::Nested(Box::new(replacement.clone()));
            }
        }
    });
}
