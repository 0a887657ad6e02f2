//! Integer literals typed as PostgreSQL types them.
//!
//! PostgreSQL gives an integer literal the type `integer` when it fits in
//! 32 bits (`bigint` otherwise), so `int_col + 1` and `SELECT 1` are
//! `integer`, and `int_col + 1` fails past 2^31 - 1. DataFusion makes every
//! integer literal a `bigint`. This analyzer rule, run before type
//! coercion, narrows the literals that fit. The rows of a `VALUES` list
//! (typed when it was planned), `LIMIT`/`OFFSET` and statements with a
//! recursive query keep their type.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

use crate::plan_rewrite::rewrite_exprs_of;

#[derive(Debug, Default)]
pub struct PostgresIntegerLiterals;

impl AnalyzerRule for PostgresIntegerLiterals {
    fn name(&self) -> &str {
        "postgres_integer_literals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if has_recursive_query(&plan)? {
            // A recursive query's work table was typed when it was planned,
            // by its non-recursive term's bigint literals: narrowing them
            // there but not where the recursive term reads the table
            // would give the two terms different types. Its integer
            // literals stay bigint.
            return Ok(plan);
        }
        rewrite_exprs_of(
            plan,
            &|node| !matches!(node, LogicalPlan::Values(_) | LogicalPlan::Limit(_)),
            &narrow,
        )
    }
}

fn has_recursive_query(plan: &LogicalPlan) -> Result<bool> {
    let mut found = false;
    plan.apply_with_subqueries(|node| {
        found = matches!(node, LogicalPlan::RecursiveQuery(_));
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    Ok(found)
}

fn narrow(expr: Expr, _schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr {
        Expr::Literal(ScalarValue::Int64(Some(value)), metadata) => match i32::try_from(value) {
            Ok(narrow) => Ok(Transformed::yes(Expr::Literal(
                ScalarValue::Int32(Some(narrow)),
                metadata,
            ))),
            Err(_) => Ok(Transformed::no(Expr::Literal(
                ScalarValue::Int64(Some(value)),
                metadata,
            ))),
        },
        other => Ok(Transformed::no(other)),
    }
}
