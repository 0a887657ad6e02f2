//! PostgreSQL semantics for `timestamp - timestamp`, and `interval *
//! number`, `number * interval` and `interval / number`.
//!
//! DataFusion subtracts timestamps into a `Duration` and, to compare it with
//! an interval, casts it into an interval of nanoseconds only (`0 days,
//! 1900799 s`), which then compares below `7 days` because interval fields
//! compare month, day, then nanosecond. PostgreSQL's result is `21 days
//! 23:59:59`. This analyzer rule replaces such casts with
//! [`DurationToInterval`], which splits the duration into whole days and the
//! remaining time as PostgreSQL does.
//!
//! DataFusion has no arithmetic between intervals and numbers and fails
//! while planning such an expression; [`PostgresIntervalArithmetic`] plans
//! it as a call of [`IntervalScale`] instead.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::BinaryOperator;
use rockstream_plan::arrow_types::{duration_to_interval, scale_intervals};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DurationToInterval {
    signature: Signature,
}

impl Default for DurationToInterval {
    fn default() -> Self {
        DurationToInterval {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for DurationToInterval {
    fn name(&self) -> &str {
        "pg_duration_to_interval"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(DataType::Interval(
            datafusion::arrow::datatypes::IntervalUnit::MonthDayNano,
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let converted = duration_to_interval(&arrays[0])
            .map_err(|error| datafusion::error::DataFusionError::Execution(error.to_string()))?;
        if arrays[0].len() == 1 && matches!(args.args[0], ColumnarValue::Scalar(_)) {
            return Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(&converted, 0)?,
            ));
        }
        Ok(ColumnarValue::Array(converted))
    }
}

#[derive(Debug, Default)]
pub struct PostgresIntervals;

impl AnalyzerRule for PostgresIntervals {
    fn name(&self) -> &str {
        "postgres_intervals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let function = Arc::new(ScalarUDF::from(DurationToInterval::default()));
        let transformed = plan.transform_up_with_subqueries(|node| {
            let mut schema = DFSchema::empty();
            for input in node.inputs() {
                schema.merge(input.schema());
            }
            let rewritten = node.map_expressions(|expr| {
                expr.transform_up(|expr| match &expr {
                    Expr::Cast(cast)
                        if matches!(cast.field.data_type(), DataType::Interval(_))
                            && matches!(cast.expr.get_type(&schema), Ok(DataType::Duration(_))) =>
                    {
                        Ok(Transformed::yes(
                            function.call(vec![cast.expr.as_ref().clone()]),
                        ))
                    }
                    _ => Ok(Transformed::no(expr)),
                })
            })?;
            if rewritten.transformed {
                Ok(Transformed::yes(rewritten.data.recompute_schema()?))
            } else {
                Ok(rewritten)
            }
        })?;
        Ok(transformed.data)
    }
}

/// `interval * number` (or `interval / number` when `divide`), with
/// PostgreSQL's cascading of fractional months and days.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IntervalScale {
    divide: bool,
    signature: Signature,
}

impl IntervalScale {
    fn new(divide: bool) -> Self {
        IntervalScale {
            divide,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for IntervalScale {
    fn name(&self) -> &str {
        if self.divide {
            "pg_interval_div"
        } else {
            "pg_interval_mul"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(DataType::Interval(
            datafusion::arrow::datatypes::IntervalUnit::MonthDayNano,
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let scaled = scale_intervals(&arrays[0], &arrays[1], self.divide)
            .map_err(|error| datafusion::error::DataFusionError::External(Box::new(error)))?;
        if scalar {
            return Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(&scaled, 0)?,
            ));
        }
        Ok(ColumnarValue::Array(scaled))
    }
}

/// Plans `interval * number`, `number * interval` and `interval / number`
/// as [`IntervalScale`] calls.
#[derive(Debug, Default)]
pub struct PostgresIntervalArithmetic;

impl ExprPlanner for PostgresIntervalArithmetic {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        let is_interval = |expr: &Expr| matches!(expr.get_type(schema), Ok(DataType::Interval(_)));
        let is_number = |expr: &Expr| expr.get_type(schema).is_ok_and(|t| t.is_numeric());
        let scale = |divide: bool, interval: Expr, factor: Expr| {
            Ok(PlannerResult::Planned(
                ScalarUDF::from(IntervalScale::new(divide)).call(vec![interval, factor]),
            ))
        };
        match expr.op {
            BinaryOperator::Multiply if is_interval(&expr.left) && is_number(&expr.right) => {
                scale(false, expr.left, expr.right)
            }
            BinaryOperator::Multiply if is_number(&expr.left) && is_interval(&expr.right) => {
                scale(false, expr.right, expr.left)
            }
            BinaryOperator::Divide if is_interval(&expr.left) && is_number(&expr.right) => {
                scale(true, expr.left, expr.right)
            }
            _ => Ok(PlannerResult::Original(expr)),
        }
    }
}
