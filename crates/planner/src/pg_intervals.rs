//! PostgreSQL semantics for `timestamp - timestamp`, `date ± interval`, and
//! `interval * number`, `number * interval` and `interval / number`.
//!
//! DataFusion subtracts timestamps into a `Duration` and, to compare it with
//! an interval, casts it into an interval of nanoseconds only (`0 days,
//! 1900799 s`), which then compares below `7 days` because interval fields
//! compare month, day, then nanosecond. PostgreSQL's result is `21 days
//! 23:59:59`. This analyzer rule replaces such casts with
//! [`IntervalOperation::FromDuration`], which splits the duration into whole days and the
//! remaining time as PostgreSQL does.
//!
//! DataFusion has no arithmetic between intervals and numbers and fails
//! while planning such an expression; [`PostgresIntervalArithmetic`] plans
//! it as a call of [`IntervalOperation::Multiply`] or `Divide` instead.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::BinaryOperator;
use rockstream_plan::arrow_types::{duration_to_interval, scale_intervals};

use crate::columnar::invoke_on_arrays;
use crate::plan_rewrite::rewrite_exprs;

/// What an [`IntervalFunction`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntervalOperation {
    /// A duration as PostgreSQL's `timestamp - timestamp` interval.
    FromDuration,
    /// `interval * number`.
    Multiply,
    /// `interval / number`.
    Divide,
}

/// The functions these rules plan: each returns an interval.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IntervalFunction {
    operation: IntervalOperation,
    signature: Signature,
}

impl IntervalFunction {
    pub fn udf(operation: IntervalOperation) -> ScalarUDF {
        let arity = match operation {
            IntervalOperation::FromDuration => 1,
            IntervalOperation::Multiply | IntervalOperation::Divide => 2,
        };
        ScalarUDF::from(IntervalFunction {
            operation,
            signature: Signature::any(arity, Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for IntervalFunction {
    fn name(&self) -> &str {
        match self.operation {
            IntervalOperation::FromDuration => "pg_duration_to_interval",
            IntervalOperation::Multiply => "pg_interval_mul",
            IntervalOperation::Divide => "pg_interval_div",
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
        invoke_on_arrays(&args.args, |arrays| match self.operation {
            IntervalOperation::FromDuration => duration_to_interval(&arrays[0]),
            IntervalOperation::Multiply => scale_intervals(&arrays[0], &arrays[1], false),
            IntervalOperation::Divide => scale_intervals(&arrays[0], &arrays[1], true),
        })
    }
}

#[derive(Debug, Default)]
pub struct PostgresIntervals;

impl AnalyzerRule for PostgresIntervals {
    fn name(&self) -> &str {
        "postgres_intervals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let function = Arc::new(IntervalFunction::udf(IntervalOperation::FromDuration));
        rewrite_exprs(plan, &|expr, schema| match &expr {
            Expr::Cast(cast)
                if matches!(cast.field.data_type(), DataType::Interval(_))
                    && matches!(cast.expr.get_type(schema), Ok(DataType::Duration(_))) =>
            {
                Ok(Transformed::yes(
                    function.call(vec![cast.expr.as_ref().clone()]),
                ))
            }
            _ => Ok(Transformed::no(expr)),
        })
    }
}

/// Plans `interval * number`, `number * interval` and `interval / number`
/// as [`IntervalFunction`] calls.
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
        let scale = |operation, interval: Expr, factor: Expr| {
            Ok(PlannerResult::Planned(
                IntervalFunction::udf(operation).call(vec![interval, factor]),
            ))
        };
        let is_date = |expr: &Expr| matches!(expr.get_type(schema), Ok(DataType::Date32));
        let as_timestamp = |expr: Expr| {
            cast(
                expr,
                DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Microsecond, None),
            )
        };
        let is_text_literal = |expr: &Expr| {
            matches!(
                expr,
                Expr::Literal(
                    ScalarValue::Utf8(Some(_))
                        | ScalarValue::LargeUtf8(Some(_))
                        | ScalarValue::Utf8View(Some(_)),
                    _
                )
            )
        };
        let is_timestamp =
            |expr: &Expr| matches!(expr.get_type(schema), Ok(DataType::Timestamp(..)));
        let as_interval = |expr: Expr| {
            // In PostgreSQL's forms too (`'01:30:00'`).
            let expr = match expr {
                Expr::Literal(ScalarValue::Utf8(Some(text)), metadata) => Expr::Literal(
                    ScalarValue::Utf8(Some(crate::interval_literals::readable_interval(&text))),
                    metadata,
                ),
                other => other,
            };
            cast(
                expr,
                DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano),
            )
        };
        match expr.op {
            // A quoted literal added to an interval or a timestamp, or
            // subtracted from an interval, is an interval, as PostgreSQL
            // resolves its unknown-typed literals (`ts + '1 day'`).
            BinaryOperator::Plus | BinaryOperator::Minus
                if is_text_literal(&expr.right)
                    && (is_interval(&expr.left)
                        || (expr.op == BinaryOperator::Plus && is_timestamp(&expr.left))) =>
            {
                Ok(PlannerResult::Original(RawBinaryExpr {
                    right: as_interval(expr.right),
                    ..expr
                }))
            }
            // `ts - '2024-01-01'`, `date - '2024-01-01'`: the literal has
            // the other side's type.
            BinaryOperator::Minus
                if is_text_literal(&expr.right)
                    && (is_timestamp(&expr.left) || is_date(&expr.left)) =>
            {
                let data_type = expr.left.get_type(schema)?;
                Ok(PlannerResult::Original(RawBinaryExpr {
                    right: cast(expr.right, data_type),
                    ..expr
                }))
            }
            BinaryOperator::Plus
                if is_text_literal(&expr.left)
                    && (is_interval(&expr.right) || is_timestamp(&expr.right)) =>
            {
                Ok(PlannerResult::Original(RawBinaryExpr {
                    left: as_interval(expr.left),
                    ..expr
                }))
            }
            // PostgreSQL adds an interval to a date as to midnight of that
            // day, giving a timestamp; DataFusion gives a date and drops the
            // interval's time of day.
            BinaryOperator::Plus | BinaryOperator::Minus
                if is_date(&expr.left) && is_interval(&expr.right) =>
            {
                Ok(PlannerResult::Original(RawBinaryExpr {
                    left: as_timestamp(expr.left),
                    ..expr
                }))
            }
            BinaryOperator::Plus if is_interval(&expr.left) && is_date(&expr.right) => {
                Ok(PlannerResult::Original(RawBinaryExpr {
                    right: as_timestamp(expr.right),
                    ..expr
                }))
            }
            BinaryOperator::Multiply if is_interval(&expr.left) && is_number(&expr.right) => {
                scale(IntervalOperation::Multiply, expr.left, expr.right)
            }
            BinaryOperator::Multiply if is_number(&expr.left) && is_interval(&expr.right) => {
                scale(IntervalOperation::Multiply, expr.right, expr.left)
            }
            BinaryOperator::Divide if is_interval(&expr.left) && is_number(&expr.right) => {
                scale(IntervalOperation::Divide, expr.left, expr.right)
            }
            _ => Ok(PlannerResult::Original(expr)),
        }
    }
}
