//! Left joins an `EXISTS` subquery does not need: in `EXISTS (SELECT …
//! FROM a LEFT JOIN b ON … WHERE …)` whose `WHERE` reads no column of `b`,
//! the left join keeps every row of `a` at least once, so whether any row
//! qualifies depends on `a` alone, and the join (with any outer reference
//! in its `ON`, which DataFusion cannot decorrelate there) is dropped. The
//! subquery's select list does not matter to `EXISTS` and goes with it.
//! Any other subquery is left as it was.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{JoinType, Result};
use datafusion::logical_expr::expr::Exists;
use datafusion::logical_expr::{Expr, Filter, LogicalPlan, Subquery};
use datafusion::optimizer::AnalyzerRule;

use crate::plan_rewrite::has_subquery;

/// The analyzer rule (see the module docs).
#[derive(Debug)]
pub struct ExistsLeftJoins;

impl AnalyzerRule for ExistsLeftJoins {
    fn name(&self) -> &str {
        "exists_left_joins"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            node.map_expressions(|expr| {
                expr.transform_up(|expr| match expr {
                    Expr::Exists(exists) => without_unread_left_join(exists),
                    other => Ok(Transformed::no(other)),
                })
            })
        })
        .map(|transformed| transformed.data)
    }
}

fn without_unread_left_join(exists: Exists) -> Result<Transformed<Expr>> {
    let Some(plan) = drop_left_join(&exists.subquery.subquery)? else {
        return Ok(Transformed::no(Expr::Exists(exists)));
    };
    let subquery = Subquery {
        outer_ref_columns: plan.all_out_ref_exprs(),
        subquery: Arc::new(plan),
        spans: exists.subquery.spans.clone(),
    };
    Ok(Transformed::yes(Expr::Exists(Exists {
        subquery,
        negated: exists.negated,
    })))
}

/// The subquery's plan without its select list and its left join, if it is
/// `[Projection] → Filter* → Left Join` and the filters read only the join's
/// left side (with none, whether the left side has a row).
fn drop_left_join(plan: &LogicalPlan) -> Result<Option<LogicalPlan>> {
    let mut below = match plan {
        LogicalPlan::Projection(projection) => projection.input.as_ref(),
        other => other,
    };
    let mut filters: Vec<&Filter> = Vec::new();
    while let LogicalPlan::Filter(filter) = below {
        filters.push(filter);
        below = filter.input.as_ref();
    }
    let LogicalPlan::Join(join) = below else {
        return Ok(None);
    };
    if join.join_type != JoinType::Left {
        return Ok(None);
    }
    // A subquery in a filter may read the right side through its own
    // outer references, which `column_refs` does not see.
    if filters.iter().any(|filter| has_subquery(&filter.predicate)) {
        return Ok(None);
    }
    let right = join.right.schema();
    let reads_right = filters.iter().any(|filter| {
        filter
            .predicate
            .column_refs()
            .iter()
            .any(|column| right.has_column(column) && !join.left.schema().has_column(column))
    });
    if reads_right {
        return Ok(None);
    }
    let mut rebuilt = join.left.as_ref().clone();
    for filter in filters.into_iter().rev() {
        rebuilt = LogicalPlan::Filter(Filter::try_new(
            filter.predicate.clone(),
            Arc::new(rebuilt),
        )?);
    }
    Ok(Some(rebuilt))
}
