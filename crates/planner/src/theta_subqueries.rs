//! Scalar subqueries correlated by other than equalities: `SELECT p.id,
//! (SELECT count(*) FROM p q WHERE q.amount > p.amount) FROM p`.
//!
//! DataFusion turns a correlated scalar subquery into a join only when its
//! correlation is equalities. For an aggregating subquery (no `GROUP BY`,
//! so exactly one row per outer row) whose correlation includes another
//! comparison, the subquery is computed once per distinct value of the
//! outer columns it reads (its domain): those values are joined to the
//! subquery's rows on its correlated conditions (a theta join, DESIGN
//! §6.5), aggregated per value, and joined back to the outer rows on the
//! values (NULLs matching NULLs, as a NULL outer value is still one
//! subquery's input).
//! An outer value no row matches gets what the subquery returns over no
//! rows: its select list with `count` as 0 and every other aggregate NULL.
//!
//! In a view this is a join of the domain with the inner rows on the
//! comparison: a change of an inner row reaches every outer value whose
//! answer it changes (for `q.amount > p.amount`, every smaller amount), as
//! PostgreSQL's result changes there too.
//!
//! The same frame answers a scalar subquery that keeps its first row by an
//! order, correlated by equalities (`… ORDER BY o.created_at DESC LIMIT
//! 1`), from its rows numbered per correlation
//! ([`crate::lateral_top_k::first_row_answer`]).
//!
//! Subqueries in a select list or a `WHERE` are rewritten; any other shape
//! is left as it was.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, JoinType, NullEquality, Result, ScalarValue};
use datafusion::logical_expr::expr::BinaryExpr;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    col, lit, when, Aggregate, Expr, Filter, LogicalPlan, LogicalPlanBuilder, Operator, Projection,
    Subquery,
};
use datafusion::optimizer::AnalyzerRule;

use crate::lateral_top_k::first_row_answer;
use crate::plan_rewrite::{plan_reads_outer, reads_outer, unaliased};

/// The analyzer rule (see the module docs).
#[derive(Debug)]
pub struct ThetaSubqueries;

impl AnalyzerRule for ThetaSubqueries {
    fn name(&self) -> &str {
        "theta_subqueries"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| match node {
            LogicalPlan::Projection(projection) => rewrite_projection(projection),
            LogicalPlan::Filter(filter) => rewrite_filter(filter),
            other => Ok(Transformed::no(other)),
        })
        .map(|transformed| transformed.data)
    }
}

fn rewrite_projection(projection: Projection) -> Result<Transformed<LogicalPlan>> {
    let mut joined = Arc::clone(&projection.input);
    let mut count = 0;
    let mut changed = false;
    let mut exprs = Vec::with_capacity(projection.expr.len());
    let names = NamePreserver::new_for_projection();
    for expr in &projection.expr {
        // The column keeps the name it had.
        let name = names.save(expr);
        let rewritten = replace_subqueries(expr.clone(), &mut joined, &mut count)?;
        changed |= rewritten.transformed;
        exprs.push(name.restore(rewritten.data));
    }
    if !changed {
        return Ok(Transformed::no(LogicalPlan::Projection(projection)));
    }
    let plan = LogicalPlanBuilder::from(joined).project(exprs)?.build()?;
    Ok(Transformed::yes(plan))
}

fn rewrite_filter(filter: Filter) -> Result<Transformed<LogicalPlan>> {
    let mut joined = Arc::clone(&filter.input);
    let mut count = 0;
    let predicate = replace_subqueries(filter.predicate.clone(), &mut joined, &mut count)?;
    if !predicate.transformed {
        return Ok(Transformed::no(LogicalPlan::Filter(filter)));
    }
    // The filter's columns as before, without the subqueries' answers.
    let columns: Vec<Expr> = filter
        .input
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let plan = LogicalPlanBuilder::from(joined)
        .filter(predicate.data)?
        .project(columns)?
        .build()?;
    Ok(Transformed::yes(plan))
}

/// `expr` with each rewritable subquery replaced by its answer, read from
/// a left join that `input` gains for it.
fn replace_subqueries(
    expr: Expr,
    input: &mut Arc<LogicalPlan>,
    count: &mut usize,
) -> Result<Transformed<Expr>> {
    expr.transform_up(|expr| match expr {
        Expr::ScalarSubquery(subquery) => match answer_by_domain(&subquery, input, *count)?
            .map_or_else(
                || first_row_answer(&subquery, input, *count),
                |answer| Ok(Some(answer)),
            )? {
            Some((joined, answer)) => {
                *input = Arc::new(joined);
                *count += 1;
                Ok(Transformed::yes(answer))
            }
            None => Ok(Transformed::no(Expr::ScalarSubquery(subquery))),
        },
        other => Ok(Transformed::no(other)),
    })
}

/// A scalar subquery of the supported shape, taken apart:
/// `Projection → Aggregate (no GROUP BY) → Filter`.
struct Shape<'a> {
    projection: &'a Projection,
    aggregate: &'a Aggregate,
    filter: &'a Filter,
}

impl<'a> Shape<'a> {
    fn of(plan: &'a LogicalPlan) -> Option<Shape<'a>> {
        let LogicalPlan::Projection(projection) = plan else {
            return None;
        };
        let LogicalPlan::Aggregate(aggregate) = projection.input.as_ref() else {
            return None;
        };
        let LogicalPlan::Filter(filter) = aggregate.input.as_ref() else {
            return None;
        };
        (projection.expr.len() == 1 && aggregate.group_expr.is_empty()).then_some(Shape {
            projection,
            aggregate,
            filter,
        })
    }

    /// Whether the outer query is read anywhere but the filter's conditions.
    fn refers_outside(&self) -> bool {
        self.projection.expr.iter().any(reads_outer)
            || self.aggregate.aggr_expr.iter().any(reads_outer)
            || plan_reads_outer(&self.filter.input)
    }
}

/// `input` left-joined with the subquery's answer per domain value, and the
/// expression reading that answer; `None` if the subquery is not of the
/// supported shape or DataFusion decorrelates it itself.
fn answer_by_domain(
    subquery: &Subquery,
    input: &Arc<LogicalPlan>,
    index: usize,
) -> Result<Option<(LogicalPlan, Expr)>> {
    let Some(shape) = Shape::of(&subquery.subquery) else {
        return Ok(None);
    };
    // The outer input is read twice (its domain, and the rows joined to
    // the answers): both must be the same rows.
    if shape.refers_outside() || !deterministic(input)? {
        return Ok(None);
    }
    let (correlated, uncorrelated): (Vec<&Expr>, Vec<&Expr>) =
        split_conjunction(&shape.filter.predicate)
            .into_iter()
            .partition(|conjunct| reads_outer(conjunct));
    if correlated.iter().all(|conjunct| is_equality(conjunct)) {
        return Ok(None);
    }
    // The outer columns the subquery reads: its domain.
    let mut outer_columns: Vec<Column> = Vec::new();
    for conjunct in &correlated {
        conjunct.apply(|expr| {
            if let Expr::OuterReferenceColumn(_, column) = expr {
                if !outer_columns.contains(column) {
                    outer_columns.push(column.clone());
                }
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })?;
    }
    if !outer_columns
        .iter()
        .all(|column| input.schema().has_column(column))
    {
        // A reference to a query further out.
        return Ok(None);
    }
    let alias = format!("__theta_{index}");
    let domain_name = |position: usize| format!("__domain_{position}");
    let domain =
        LogicalPlanBuilder::from(Arc::clone(input))
            .project(outer_columns.iter().enumerate().map(|(position, column)| {
                Expr::Column(column.clone()).alias(domain_name(position))
            }))?
            .distinct()?
            .build()?;
    let to_domain = |expr: Expr| -> Result<Expr> {
        expr.transform(|expr| match expr {
            Expr::OuterReferenceColumn(_, column) => {
                let position = outer_columns
                    .iter()
                    .position(|outer| *outer == column)
                    .unwrap_or_default();
                Ok(Transformed::yes(col(domain_name(position))))
            }
            other => Ok(Transformed::no(other)),
        })
        .map(|transformed| transformed.data)
    };
    let condition = correlated
        .into_iter()
        .map(|conjunct| to_domain(conjunct.clone()))
        .collect::<Result<Vec<_>>>()?;
    let mut inner = LogicalPlanBuilder::from(Arc::clone(&shape.filter.input));
    if let Some(predicate) = conjunction(uncorrelated.into_iter().cloned()) {
        inner = inner.filter(predicate)?;
    }
    let keys: Vec<Expr> = (0..outer_columns.len())
        .map(|position| col(domain_name(position)))
        .collect();
    let answers = LogicalPlanBuilder::from(domain)
        .join_on(inner.build()?, JoinType::Inner, conjunction(condition))?
        .aggregate(keys.clone(), shape.aggregate.aggr_expr.clone())?
        .project(keys.iter().cloned().chain([
            shape.projection.expr[0].clone().alias("__answer"),
            lit(true).alias("__present"),
        ]))?
        .alias(alias.as_str())?
        .build()?;
    let joined = LogicalPlanBuilder::from(Arc::clone(input))
        .join_detailed(
            answers,
            JoinType::Left,
            (
                outer_columns.clone(),
                (0..outer_columns.len())
                    .map(|position| Column::new(Some(alias.as_str()), domain_name(position)))
                    .collect::<Vec<_>>(),
            ),
            None,
            NullEquality::NullEqualsNull,
        )?
        .build()?;
    let answer = when(
        Expr::Column(Column::new(Some(alias.as_str()), "__present")).is_null(),
        over_no_rows(shape.projection.expr[0].clone(), shape.aggregate)?,
    )
    .otherwise(Expr::Column(Column::new(Some(alias.as_str()), "__answer")))?;
    Ok(Some((joined, answer)))
}

/// `inner = outer`, with the outer side a bare outer column: the form
/// DataFusion decorrelates itself.
fn is_equality(conjunct: &Expr) -> bool {
    matches!(conjunct, Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right })
        if matches!(right.as_ref(), Expr::OuterReferenceColumn(..)) && !reads_outer(left)
            || matches!(left.as_ref(), Expr::OuterReferenceColumn(..)) && !reads_outer(right))
}

/// The aggregates that are 0, not NULL, over no rows.
const COUNTING: [&str; 3] = ["count", "regr_count", "approx_distinct"];

/// Whether `plan` yields the same rows each time it is read: no volatile
/// function (`random()`) and no `LIMIT`, which may keep other rows of a
/// partial order each time.
fn deterministic(plan: &LogicalPlan) -> Result<bool> {
    plan.exists(|node| {
        Ok(matches!(node, LogicalPlan::Limit(_))
            || node.expressions().iter().any(Expr::is_volatile))
    })
    .map(|found| !found)
}

/// The subquery's answer over no rows: `select` (over the aggregate's
/// columns) with each count 0 and every other aggregate NULL.
fn over_no_rows(select: Expr, aggregate: &Aggregate) -> Result<Expr> {
    let schema = aggregate.schema.as_ref();
    select
        .transform(|expr| {
            let Expr::Column(column) = &expr else {
                return Ok(Transformed::no(expr));
            };
            let Some(position) = schema.index_of_column(column).ok() else {
                return Ok(Transformed::no(expr));
            };
            let field = schema.field(position);
            let counts = matches!(
                aggregate.aggr_expr.get(position).map(unaliased),
                Some(Expr::AggregateFunction(function))
                    if COUNTING.contains(&function.func.name())
            );
            let value = match counts {
                true => ScalarValue::new_zero(field.data_type())?,
                false => ScalarValue::try_from(field.data_type())?,
            };
            Ok(Transformed::yes(Expr::Literal(value, None)))
        })
        .map(|transformed| transformed.data)
}
