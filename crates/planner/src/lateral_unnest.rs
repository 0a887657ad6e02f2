//! Set-returning functions over an earlier `FROM` item's columns: `FROM t,
//! unnest(string_to_array(t.tags, ',')) AS tag` (also `CROSS JOIN LATERAL
//! …`), and `FROM t, generate_series(1, t.n) AS g`, which
//! `crate::pg_compat` writes as `LATERAL (SELECT unnest(generate_series(1,
//! t.n)) AS g) AS g`.
//!
//! DataFusion plans these as a cross join with a subquery whose one-row
//! `Unnest` reads outer columns, and cannot execute it (nor can a view be
//! maintained from it). The rows it means are the `Unnest` of the list
//! computed on each row of the outer side: this rule plans them so, the
//! outer side's columns passed through and the subquery's column named as
//! the subquery's alias names it. A row whose list is empty or NULL gives no
//! row, as PostgreSQL's cross join with an empty set does; with `LEFT JOIN
//! LATERAL … ON true`, the row once, followed by NULL. Any other shape is
//! left as it was.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, JoinType, NullHandling, Result, ScalarValue, UnnestOptions};
use datafusion::logical_expr::{Expr, Join, LogicalPlan, LogicalPlanBuilder};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule (see the module docs).
#[derive(Debug)]
pub struct LateralUnnest;

impl AnalyzerRule for LateralUnnest {
    fn name(&self) -> &str {
        "lateral_unnest"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| match node {
            LogicalPlan::Join(join) => match unnested(&join)? {
                Some(rewritten) => Ok(Transformed::yes(rewritten)),
                None => Ok(Transformed::no(LogicalPlan::Join(join))),
            },
            other => Ok(Transformed::no(other)),
        })
        .map(|transformed| transformed.data)
    }
}

/// Name of the list computed on each outer row.
const LIST: &str = "__lateral_list";

/// `join` planned as an unnest over its left side, if its right side is a
/// correlated one-row unnest (`Projection… → Unnest → Projection → one
/// row`, under an alias) and it joins them without condition.
fn unnested(join: &Join) -> Result<Option<LogicalPlan>> {
    // `LEFT JOIN LATERAL … ON true` keeps a row whose list is empty, once,
    // with NULL.
    let always = match &join.filter {
        None => true,
        Some(Expr::Literal(ScalarValue::Boolean(Some(true)), _)) => true,
        Some(_) => false,
    };
    let null_handling = match join.join_type {
        JoinType::Inner => NullHandling::Drop,
        JoinType::Left => NullHandling::PreserveAndExpandEmpty,
        _ => return Ok(None),
    };
    if !join.on.is_empty() || !always {
        return Ok(None);
    }
    let LogicalPlan::SubqueryAlias(alias) = join.right.as_ref() else {
        return Ok(None);
    };
    let LogicalPlan::Subquery(subquery) = alias.input.as_ref() else {
        return Ok(None);
    };
    // Renaming projections of the unnested value, down to the unnest.
    let mut below = subquery.subquery.as_ref();
    while let LogicalPlan::Projection(renaming) = below {
        match renaming.expr.as_slice() {
            [expr] if matches!(crate::plan_rewrite::unaliased(expr), Expr::Column(_)) => {
                below = renaming.input.as_ref();
            }
            _ => return Ok(None),
        }
    }
    let LogicalPlan::Unnest(unnest) = below else {
        return Ok(None);
    };
    let LogicalPlan::Projection(lists) = unnest.input.as_ref() else {
        return Ok(None);
    };
    let one_row = matches!(
        lists.input.as_ref(),
        LogicalPlan::EmptyRelation(empty) if empty.produce_one_row
    );
    // One list, unnested once.
    let ([list], true, [(0, depth)], []) = (
        lists.expr.as_slice(),
        one_row,
        unnest.list_type_columns.as_slice(),
        unnest.struct_type_columns.as_slice(),
    ) else {
        return Ok(None);
    };
    if depth.depth != 1 || alias.schema.fields().len() != 1 {
        return Ok(None);
    }
    // The outer references, as the left side's columns.
    let list = list
        .clone()
        .unalias()
        .transform(|expr| match expr {
            Expr::OuterReferenceColumn(_, column) => Ok(Transformed::yes(Expr::Column(column))),
            other => Ok(Transformed::no(other)),
        })?
        .data;
    let left_columns: Vec<Expr> = join
        .left
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let (qualifier, field) = alias.schema.qualified_field(0);
    let value =
        Expr::Column(Column::from_name(LIST)).alias_qualified(qualifier.cloned(), field.name());
    let plan = LogicalPlanBuilder::from(Arc::clone(&join.left))
        .project(left_columns.iter().cloned().chain([list.alias(LIST)]))?
        .unnest_column_with_options(LIST, UnnestOptions::new().with_null_handling(null_handling))?
        .project(left_columns.into_iter().chain([value]))?
        .build()?;
    Ok(Some(plan))
}
