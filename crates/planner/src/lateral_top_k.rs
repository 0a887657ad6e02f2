//! `LATERAL` subqueries that keep the first rows of each outer row: `FROM
//! outer [LEFT] JOIN LATERAL (SELECT … FROM inner WHERE inner.k = outer.k
//! AND … ORDER BY … LIMIT n [OFFSET m]) AS x ON …` (also written with a
//! comma or `CROSS JOIN`).
//!
//! DataFusion cannot decorrelate a subquery with a `LIMIT` (its outer
//! reference reaches execution and fails). When the subquery's only
//! correlation is equalities between inner expressions and outer columns
//! in its `WHERE`, the rows it yields for an outer row are the rows of its
//! uncorrelated part whose inner expressions equal that row's columns,
//! numbered in its order: so it is the uncorrelated part numbered by
//! `ROW_NUMBER() OVER (PARTITION BY the inner expressions ORDER BY …)`,
//! the numbers `m < rn <= m + n` kept, joined to the outer side on the
//! equalities (a left join stays a left join, so an outer row without
//! inner rows keeps its NULLs). A view plans that as a numbered top-K per
//! partition ([`crate::translate`]); an ad hoc query evaluates the window.
//!
//! A scalar subquery of the same shape keeping one row (`… ORDER BY …
//! LIMIT 1`) is numbered alike and left-joined in its place
//! ([`first_row_answer`], through [`crate::theta_subqueries`]).
//!
//! The subquery's `ORDER BY` is computed for every inner row, and its select
//! list for the rows kept of every correlation value, also values no outer
//! row has, which PostgreSQL never evaluates: an error there (a division by
//! zero) fails the query where PostgreSQL's would not.
//!
//! Rows the `ORDER BY` leaves tied may be chosen differently than
//! PostgreSQL chooses them, as for any `LIMIT` over ties. Any other shape
//! (a correlation that is not such an equality, an outer reference outside
//! the `WHERE`, a `LIMIT` without `ORDER BY`, grouping or `DISTINCT` below
//! the `LIMIT`) is left as it was, and refused as before.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, JoinType, Result, TableReference};
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::expr::BinaryExpr;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    col, lit, Expr, ExprFunctionExt, FetchType, Filter, Join, Limit, LogicalPlan,
    LogicalPlanBuilder, Operator, Projection, SkipType, Sort, Subquery,
};
use datafusion::optimizer::AnalyzerRule;

use crate::plan_rewrite::{has_subquery, plan_reads_outer, reads_outer, unaliased};

/// The analyzer rule (see the module docs).
#[derive(Debug)]
pub struct LateralTopK;

impl AnalyzerRule for LateralTopK {
    fn name(&self) -> &str {
        "lateral_top_k"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| match node {
            LogicalPlan::Join(join) => match numbered_lateral_join(&join)? {
                Some(rewritten) => Ok(Transformed::yes(rewritten)),
                None => Ok(Transformed::no(LogicalPlan::Join(join))),
            },
            other => Ok(Transformed::no(other)),
        })
        .map(|transformed| transformed.data)
    }
}

/// Name of the row number within a partition of the lateral rows.
const NUMBER: &str = "__lateral_number";

/// Name of the `index`-th correlated inner expression's column.
fn key_name(index: usize) -> String {
    format!("__lateral_key_{index}")
}

/// A lateral subquery of the supported shape, taken apart:
/// `[Limit] → [Projection] → Sort → [Projection] → Filter`.
struct TopShape<'a> {
    skip: usize,
    fetch: usize,
    /// What the subquery outputs, over the sort's input (a projection
    /// dropping columns only sorted by).
    output: Option<&'a Projection>,
    sort: &'a Sort,
    /// The sort's input, over the filter.
    projection: Option<&'a Projection>,
    filter: &'a Filter,
}

impl<'a> TopShape<'a> {
    fn of(plan: &'a LogicalPlan) -> Result<Option<TopShape<'a>>> {
        let (mut skip, mut fetch, mut below) = match plan {
            LogicalPlan::Limit(limit) => match limit_bounds(limit)? {
                Some((skip, fetch)) => (skip, fetch, limit.input.as_ref()),
                None => return Ok(None),
            },
            LogicalPlan::Sort(_) => (0, None, plan),
            _ => return Ok(None),
        };
        let output = match below {
            LogicalPlan::Projection(projection) => {
                below = projection.input.as_ref();
                Some(projection)
            }
            _ => None,
        };
        let LogicalPlan::Sort(sort) = below else {
            return Ok(None);
        };
        if let Some(sort_fetch) = sort.fetch {
            // A sort's own fetch counts from the rows before the skip.
            let limit = sort_fetch.saturating_sub(skip);
            fetch = Some(fetch.map_or(limit, |fetch| fetch.min(limit)));
            if sort_fetch <= skip {
                skip = 0;
            }
        }
        let Some(fetch) = fetch else {
            return Ok(None);
        };
        let (projection, below) = match sort.input.as_ref() {
            LogicalPlan::Projection(projection) => (Some(projection), projection.input.as_ref()),
            other => (None, other),
        };
        let LogicalPlan::Filter(filter) = below else {
            return Ok(None);
        };
        Ok(Some(TopShape {
            skip,
            fetch,
            output,
            sort,
            projection,
            filter,
        }))
    }
}

/// A limit's literal skip and fetch (`None` if either is not a literal).
fn limit_bounds(limit: &Limit) -> Result<Option<(usize, Option<usize>)>> {
    let skip = match limit.get_skip_type()? {
        SkipType::Literal(skip) => skip,
        SkipType::UnsupportedExpr => return Ok(None),
    };
    match limit.get_fetch_type()? {
        FetchType::Literal(fetch) => Ok(Some((skip, fetch))),
        FetchType::UnsupportedExpr => Ok(None),
    }
}

/// A correlated subquery numbered per correlation: its rows kept as its
/// `LIMIT`/`OFFSET` keeps them for each outer row, with the correlated
/// inner expressions as key columns, under `alias`; and the outer
/// expressions equal to those keys, in order.
struct Numbered {
    plan: LogicalPlan,
    outer: Vec<Expr>,
}

impl Numbered {
    /// The equalities joining the outer side to the numbered rows.
    fn join_keys(self, alias: &TableReference) -> (LogicalPlan, Vec<(Expr, Expr)>) {
        let on = self
            .outer
            .into_iter()
            .enumerate()
            .map(|(index, outer)| {
                let key = Column::new(Some(alias.clone()), key_name(index));
                (outer, Expr::Column(key))
            })
            .collect();
        (self.plan, on)
    }
}

/// `subquery` numbered (see [`Numbered`]), if it is of the supported shape,
/// correlated by equalities with columns of `outer_schema` only, and (with
/// `single_row`) keeps at most one row per outer row.
fn numbered(
    subquery: &LogicalPlan,
    outer_schema: &DFSchema,
    alias: &TableReference,
    single_row: bool,
) -> Result<Option<Numbered>> {
    let Some(shape) = TopShape::of(subquery)? else {
        return Ok(None);
    };
    if shape.sort.expr.is_empty() || refers_outside(&shape) || (single_row && shape.fetch > 1) {
        return Ok(None);
    }
    // The correlation: inner expression = outer column, each an equality.
    let mut correlations: Vec<(Expr, Expr)> = Vec::new();
    let mut uncorrelated: Vec<Expr> = Vec::new();
    for conjunct in split_conjunction(&shape.filter.predicate) {
        if !reads_outer(conjunct) {
            uncorrelated.push(conjunct.clone());
            continue;
        }
        let Some((inner, outer)) = correlation(conjunct)? else {
            return Ok(None);
        };
        if !outer
            .column_refs()
            .iter()
            .all(|column| outer_schema.has_column(column))
        {
            // A reference to a query further out.
            return Ok(None);
        }
        correlations.push((inner, outer));
    }
    if correlations.is_empty() {
        return Ok(None);
    }

    let mut builder = LogicalPlanBuilder::from(Arc::clone(&shape.filter.input));
    if let Some(predicate) = conjunction(uncorrelated) {
        builder = builder.filter(predicate)?;
    }
    // The rows are numbered over the subquery's FROM and WHERE, by its
    // ORDER BY written over them; its select list is computed after the
    // numbering, for the rows kept only.
    let order_by = match shape.projection {
        Some(projection) => shape
            .sort
            .expr
            .iter()
            .map(|sort| {
                let expr = inlined(sort.expr.clone(), projection)?;
                Ok(sort.with_expr(expr))
            })
            .collect::<Result<Vec<_>>>()?,
        None => shape.sort.expr.clone(),
    };
    let columns: Vec<Expr> = builder
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let keys: Vec<Expr> = (0..correlations.len())
        .map(|index| col(key_name(index)))
        .collect();
    let keyed = correlations
        .iter()
        .enumerate()
        .map(|(index, (inner, _))| inner.clone().alias(key_name(index)));
    builder = builder.project(columns.into_iter().chain(keyed))?;
    let number = row_number()
        .partition_by(keys.clone())
        .order_by(order_by)
        .build()?
        .alias(NUMBER);
    builder = builder.window(vec![number])?;
    // Beyond every row number (a LIMIT near 2^63 with an OFFSET).
    let last = i64::try_from(shape.skip.saturating_add(shape.fetch)).unwrap_or(i64::MAX);
    let last = lit(last);
    let mut kept = col(NUMBER).lt_eq(last);
    if shape.skip > 0 {
        let skip = i64::try_from(shape.skip).unwrap_or(i64::MAX);
        kept = col(NUMBER).gt(lit(skip)).and(kept);
    }
    builder = builder.filter(kept)?;
    if let Some(projection) = shape.projection {
        builder = builder.project(projection.expr.iter().cloned().chain(keys.clone()))?;
    }
    let output: Vec<Expr> = match shape.output {
        Some(output) => output.expr.clone(),
        None => shape
            .sort
            .input
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect(),
    };
    let plan = builder
        .project(output.into_iter().chain(keys))?
        .alias(alias.clone())?
        .build()?;
    Ok(Some(Numbered {
        plan,
        outer: correlations.into_iter().map(|(_, outer)| outer).collect(),
    }))
}

/// The join with its lateral subquery numbered, if it is one of the
/// supported shape; else `None`.
fn numbered_lateral_join(join: &Join) -> Result<Option<LogicalPlan>> {
    if !matches!(join.join_type, JoinType::Inner | JoinType::Left) {
        return Ok(None);
    }
    let LogicalPlan::SubqueryAlias(alias) = join.right.as_ref() else {
        return Ok(None);
    };
    let LogicalPlan::Subquery(subquery) = alias.input.as_ref() else {
        return Ok(None);
    };
    let Some(numbered) = numbered(&subquery.subquery, join.left.schema(), &alias.alias, false)?
    else {
        return Ok(None);
    };
    let (right, keys) = numbered.join_keys(&alias.alias);
    let mut on = join.on.clone();
    on.extend(keys);
    let numbered = Join::try_new(
        Arc::clone(&join.left),
        Arc::new(right),
        on,
        join.filter.clone(),
        join.join_type,
        join.join_constraint,
        join.null_equality,
        join.null_aware,
    )?;
    // The join's columns as before, without the keys.
    let columns: Vec<Expr> = join
        .schema
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    LogicalPlanBuilder::from(LogicalPlan::Join(numbered))
        .project(columns)?
        .build()
        .map(Some)
}

/// A scalar subquery keeping its first row by an order, correlated by
/// equalities: `(SELECT o.amount FROM orders o WHERE o.customer_id = c.id
/// ORDER BY o.created_at DESC LIMIT 1)`. Its rows numbered per correlation
/// hold at most one per outer row, so `input` left-joined with them on the
/// equalities keeps its rows, each with its answer or NULL. The joined
/// plan and the expression reading the answer; `None` for another shape.
pub(crate) fn first_row_answer(
    subquery: &Subquery,
    input: &Arc<LogicalPlan>,
    index: usize,
) -> Result<Option<(LogicalPlan, Expr)>> {
    let [answer] = subquery.subquery.schema().fields().as_ref() else {
        return Ok(None);
    };
    let answer = answer.name().clone();
    let alias = TableReference::bare(format!("__first_{index}"));
    let Some(numbered) = numbered(&subquery.subquery, input.schema(), &alias, true)? else {
        return Ok(None);
    };
    let (right, keys) = numbered.join_keys(&alias);
    let (outer, inner): (Vec<Expr>, Vec<Expr>) = keys.into_iter().unzip();
    let joined = LogicalPlanBuilder::from(Arc::clone(input))
        .join_with_expr_keys(right, JoinType::Left, (outer, inner), None)?
        .build()?;
    Ok(Some((
        joined,
        Expr::Column(Column::new(Some(alias), answer)),
    )))
}

/// `expr`, over `projection`'s output, written over its input instead.
fn inlined(expr: Expr, projection: &Projection) -> Result<Expr> {
    let schema = projection.schema.as_ref();
    expr.transform(|expr| {
        let Expr::Column(column) = &expr else {
            return Ok(Transformed::no(expr));
        };
        match schema.index_of_column(column) {
            Ok(index) => Ok(Transformed::yes(unaliased(&projection.expr[index]).clone())),
            Err(_) => Ok(Transformed::no(expr)),
        }
    })
    .map(|transformed| transformed.data)
}

/// `inner = outer` (either way round): `inner` free of outer references,
/// `outer` over outer references alone, returned as an expression over the
/// outer query's columns.
fn correlation(conjunct: &Expr) -> Result<Option<(Expr, Expr)>> {
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Eq,
        right,
    }) = conjunct
    else {
        return Ok(None);
    };
    for (inner, outer) in [(left, right), (right, left)] {
        if reads_outer(inner)
            || !outer.contains_outer()
            || !outer.column_refs().is_empty()
            || has_subquery(outer)
        {
            continue;
        }
        let outer = outer
            .as_ref()
            .clone()
            .transform(|expr| match expr {
                Expr::OuterReferenceColumn(_, column) => Ok(Transformed::yes(Expr::Column(column))),
                other => Ok(Transformed::no(other)),
            })?
            .data;
        return Ok(Some((inner.as_ref().clone(), outer)));
    }
    Ok(None)
}

/// Whether the subquery refers to the outer query anywhere but its
/// filter's conditions.
fn refers_outside(shape: &TopShape<'_>) -> bool {
    let in_expressions = |expressions: &[Expr]| expressions.iter().any(reads_outer);
    shape
        .output
        .is_some_and(|output| in_expressions(&output.expr))
        || shape
            .projection
            .is_some_and(|projection| in_expressions(&projection.expr))
        || shape.sort.expr.iter().any(|sort| reads_outer(&sort.expr))
        || plan_reads_outer(&shape.filter.input)
}
