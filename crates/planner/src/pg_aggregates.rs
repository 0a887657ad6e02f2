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
//! its original name, so the operators above it still resolve it. The same
//! holds for `SUM` and `AVG` used as window functions (`… OVER (…)`).

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{
    cast, Aggregate, Expr, ExprSchemable, LogicalPlan, Projection, Window, WindowFunctionDefinition,
};
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
            LogicalPlan::Window(window) => rewrite_window(window),
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

/// `SUM` and `AVG` as window functions (`… OVER (…)`) get PostgreSQL's
/// types as the aggregates do.
fn rewrite_window(window: Window) -> Result<Transformed<LogicalPlan>> {
    let schema = window.input.schema().clone();
    let mut changed = false;
    let mut exprs = Vec::with_capacity(window.window_expr.len());
    for expr in &window.window_expr {
        let (inner, name) = match expr {
            Expr::Alias(alias) => (alias.expr.as_ref(), alias.name.clone()),
            other => (other, other.schema_name().to_string()),
        };
        let rewritten = match inner {
            Expr::WindowFunction(function) => match &function.fun {
                WindowFunctionDefinition::AggregateUDF(func) => {
                    cast_argument(func.name(), &function.params.args, &schema)?.map(|argument| {
                        let mut function = function.as_ref().clone();
                        function.params.args = vec![argument];
                        Expr::WindowFunction(Box::new(function)).alias(name)
                    })
                }
                _ => None,
            },
            _ => None,
        };
        changed |= rewritten.is_some();
        exprs.push(rewritten.unwrap_or_else(|| expr.clone()));
    }
    let window = if changed {
        LogicalPlan::Window(Window::try_new(exprs, window.input)?)
    } else {
        LogicalPlan::Window(window).recompute_schema()?
    };
    Ok(Transformed::yes(with_postgres_numbers(window)?))
}

/// `window` with its numbering functions' values as PostgreSQL types them:
/// DataFusion's `ROW_NUMBER()`, `RANK()` and `DENSE_RANK()` are unsigned
/// (`bigint` in PostgreSQL), `NTILE()` too (`integer`). A projection above
/// casts them, keeping their names.
fn with_postgres_numbers(window: LogicalPlan) -> Result<LogicalPlan> {
    let LogicalPlan::Window(node) = &window else {
        return Ok(window);
    };
    let width = node.input.schema().fields().len();
    let mut casts = false;
    let mut exprs = Vec::with_capacity(node.schema.fields().len());
    for (index, (qualifier, field)) in node.schema.iter().enumerate() {
        let column = Expr::Column(datafusion::common::Column::from((qualifier, field)));
        let target = match index
            .checked_sub(width)
            .and_then(|at| node.window_expr.get(at))
        {
            Some(expr) if field.data_type() == &DataType::UInt64 => numbering_type(expr),
            _ => None,
        };
        match target {
            Some(target) => {
                casts = true;
                exprs.push(cast(column, target).alias(field.name()));
            }
            None => exprs.push(column),
        }
    }
    if !casts {
        return Ok(window);
    }
    Ok(LogicalPlan::Projection(Projection::try_new(
        exprs,
        Arc::new(window),
    )?))
}

/// PostgreSQL's type for a numbering window function's value.
fn numbering_type(expr: &Expr) -> Option<DataType> {
    let inner = match expr {
        Expr::Alias(alias) => alias.expr.as_ref(),
        other => other,
    };
    let Expr::WindowFunction(function) = inner else {
        return None;
    };
    match function.fun.name() {
        "row_number" | "rank" | "dense_rank" => Some(DataType::Int64),
        "ntile" => Some(DataType::Int32),
        _ => None,
    }
}

fn rewrite_expr(expr: &Expr, schema: &Arc<DFSchema>) -> Result<Option<Expr>> {
    let (inner, name) = match expr {
        Expr::Alias(alias) => (alias.expr.as_ref(), alias.name.clone()),
        other => (other, other.schema_name().to_string()),
    };
    let Expr::AggregateFunction(AggregateFunction { func, params }) = inner else {
        return Ok(None);
    };
    let Some(argument) = cast_argument(func.name(), &params.args, schema)? else {
        return Ok(None);
    };
    let mut params = params.clone();
    params.args = vec![argument];
    let rewritten = Expr::AggregateFunction(AggregateFunction {
        func: func.clone(),
        params,
    });
    Ok(Some(rewritten.alias(name)))
}

/// The argument of `SUM`/`AVG` (`function`, one of `args`) cast to what
/// gives PostgreSQL's result type, if it needs a cast.
fn cast_argument(function: &str, args: &[Expr], schema: &Arc<DFSchema>) -> Result<Option<Expr>> {
    let [argument] = args else {
        return Ok(None);
    };
    // The argument's type as coercion will make it (a CASE's branches
    // coerced to their common type, ...): this rule runs before coercion.
    let argument = argument
        .clone()
        .rewrite(&mut TypeCoercionRewriter::new(schema))?
        .data;
    let argument_type = argument.get_type(schema)?;
    let target = match (function.to_lowercase().as_str(), &argument_type) {
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
    Ok(Some(cast(argument, target)))
}
