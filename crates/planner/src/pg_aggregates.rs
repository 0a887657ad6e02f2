//! PostgreSQL result types for `SUM` and `AVG`.
//!
//! PostgreSQL returns `numeric` for `SUM(bigint)` and for `AVG` of any
//! integer or numeric, where DataFusion returns `bigint` and `double`. This
//! analyzer rule (run before type coercion, so that the expressions around
//! such an aggregate are coerced to its PostgreSQL type) casts such arguments to a
//! decimal, so DataFusion's own typing yields `numeric`: `SUM(bigint)` sums
//! `numeric(38,0)`, and `AVG` averages `numeric(38,s)` with `s >= 12`, which
//! DataFusion reports at scale `s + 4` — the 16 fraction digits PostgreSQL
//! shows for averages of ordinary magnitude. The rewritten aggregate keeps
//! its original name, so the operators above it still resolve it.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{cast, Aggregate, Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::analyzer::type_coercion::TypeCoercionRewriter;
use datafusion::optimizer::AnalyzerRule;

/// Minimum scale an AVG argument is given (result scale is this + 4).
const AVERAGE_ARGUMENT_SCALE_MIN: i8 = 12;

#[derive(Debug, Default)]
pub struct PostgresAggregateTypes;

impl AnalyzerRule for PostgresAggregateTypes {
    fn name(&self) -> &str {
        "postgres_aggregate_types"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let transformed = plan.transform_up_with_subqueries(|node| match node {
            LogicalPlan::Aggregate(aggregate) => rewrite_aggregate(aggregate),
            other => {
                let recomputed = other.recompute_schema()?;
                Ok(Transformed::yes(recomputed))
            }
        })?;
        Ok(transformed.data)
    }
}

fn rewrite_aggregate(aggregate: Aggregate) -> Result<Transformed<LogicalPlan>> {
    let schema = aggregate.input.schema().clone();
    let mut changed = false;
    let mut exprs = Vec::with_capacity(aggregate.aggr_expr.len());
    for expr in &aggregate.aggr_expr {
        match rewrite_expr(expr, &schema)? {
            Some(rewritten) => {
                changed = true;
                exprs.push(rewritten);
            }
            None => exprs.push(expr.clone()),
        }
    }
    if !changed {
        let plan = LogicalPlan::Aggregate(aggregate).recompute_schema()?;
        return Ok(Transformed::yes(plan));
    }
    let rebuilt = Aggregate::try_new(aggregate.input.clone(), aggregate.group_expr.clone(), exprs)?;
    Ok(Transformed::yes(LogicalPlan::Aggregate(rebuilt)))
}

fn rewrite_expr(expr: &Expr, schema: &Arc<DFSchema>) -> Result<Option<Expr>> {
    let (inner, name) = match expr {
        Expr::Alias(alias) => (alias.expr.as_ref(), alias.name.clone()),
        other => (other, other.schema_name().to_string()),
    };
    let Expr::AggregateFunction(AggregateFunction { func, params }) = inner else {
        return Ok(None);
    };
    let [argument] = params.args.as_slice() else {
        return Ok(None);
    };
    // The argument's type as coercion will make it (a CASE's branches
    // coerced to their common type, ...): this rule runs before coercion.
    let argument = argument
        .clone()
        .rewrite(&mut TypeCoercionRewriter::new(schema))?
        .data;
    let argument_type = argument.get_type(schema)?;
    let target = match (func.name().to_lowercase().as_str(), &argument_type) {
        ("sum", DataType::Int64 | DataType::UInt32 | DataType::UInt64) => {
            DataType::Decimal128(38, 0)
        }
        ("avg", data_type) if data_type.is_integer() => {
            DataType::Decimal128(38, AVERAGE_ARGUMENT_SCALE_MIN)
        }
        ("avg", DataType::Decimal128(_, scale)) if *scale < AVERAGE_ARGUMENT_SCALE_MIN => {
            DataType::Decimal128(38, AVERAGE_ARGUMENT_SCALE_MIN)
        }
        _ => return Ok(None),
    };
    let mut params = params.clone();
    params.args = vec![cast(argument, target)];
    let rewritten = Expr::AggregateFunction(AggregateFunction {
        func: func.clone(),
        params,
    });
    Ok(Some(rewritten.alias(name)))
}
