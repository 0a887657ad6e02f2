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

/// Whether `expr` refers to an enclosing query: directly, or from a
/// subquery within it (whose outer references `Expr::contains_outer` does
/// not see). A subquery referring to the query `expr` belongs to counts
/// too, so a rule asking this before moving `expr` declines rather than
/// separating a subquery from the relation it reads.
pub(crate) fn reads_outer(expr: &Expr) -> bool {
    expr.contains_outer()
        || expr
            .exists(|expr| {
                Ok(match expr {
                    Expr::ScalarSubquery(subquery) => !subquery.outer_ref_columns.is_empty(),
                    Expr::Exists(exists) => !exists.subquery.outer_ref_columns.is_empty(),
                    Expr::InSubquery(in_subquery) => {
                        !in_subquery.subquery.outer_ref_columns.is_empty()
                    }
                    _ => false,
                })
            })
            .unwrap_or(true)
}

/// Whether any node of `plan` has an expression that [`reads_outer`].
pub(crate) fn plan_reads_outer(plan: &LogicalPlan) -> bool {
    plan.exists(|node| Ok(node.expressions().iter().any(reads_outer)))
        .unwrap_or(true)
}

/// Whether `expr` holds a subquery.
pub(crate) fn has_subquery(expr: &Expr) -> bool {
    expr.exists(|expr| {
        Ok(matches!(
            expr,
            Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
        ))
    })
    .unwrap_or(true)
}

/// `expr` without the aliases around it.
pub(crate) fn unaliased(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(alias) => unaliased(&alias.expr),
        other => other,
    }
}
