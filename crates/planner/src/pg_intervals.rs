//! PostgreSQL semantics for `timestamp - timestamp`.
//!
//! DataFusion subtracts timestamps into a `Duration` and, to compare it with
//! an interval, casts it into an interval of nanoseconds only (`0 days,
//! 1900799 s`), which then compares below `7 days` because interval fields
//! compare month, day, then nanosecond. PostgreSQL's result is `21 days
//! 23:59:59`. This analyzer rule replaces such casts with
//! [`DurationToInterval`], which splits the duration into whole days and the
//! remaining time as PostgreSQL does.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use rockstream_plan::arrow_types::duration_to_interval;

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
