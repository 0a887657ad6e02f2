//! The frame of the analyzer rules that rewrite expressions.

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, LogicalPlan};

/// Rewrites every expression of `plan` and of its subqueries bottom-up with
/// `rewrite`, which sees the schema of the node's inputs. An output column
/// keeps the name it was written with, and a node whose expressions changed
/// gets its schema recomputed.
pub(crate) fn rewrite_exprs(
    plan: LogicalPlan,
    rewrite: &dyn Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    rewrite_exprs_of(plan, &|_| true, rewrite)
}

/// [`rewrite_exprs`], for the nodes `applies` accepts only.
pub(crate) fn rewrite_exprs_of(
    plan: LogicalPlan,
    applies: &dyn Fn(&LogicalPlan) -> bool,
    rewrite: &dyn Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    let transformed = plan.transform_up_with_subqueries(|node| {
        if !applies(&node) {
            return Ok(Transformed::no(node));
        }
        let mut schema = DFSchema::empty();
        for input in node.inputs() {
            schema.merge(input.schema());
        }
        let names = NamePreserver::new(&node);
        let rewritten = node.map_expressions(|expr| {
            let name = names.save(&expr);
            Ok(expr
                .transform_up(|expr| rewrite(expr, &schema))?
                .update_data(|expr| name.restore(expr)))
        })?;
        if rewritten.transformed {
            Ok(Transformed::yes(rewritten.data.recompute_schema()?))
        } else {
            Ok(rewritten)
        }
    })?;
    Ok(transformed.data)
}
