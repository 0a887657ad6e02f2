//! `generate_series(start, now() [± interval], step)` in a materialized
//! view: a series of timestamps that grows as the clock passes.
//!
//! A view's `FROM generate_series(…)` is read as `SELECT
//! unnest(generate_series(…))` (`series_relations_as_selects`), which
//! DataFusion plans as an `Unnest` of a one-row projection. Before the
//! optimizer folds `now()` into the statement's start, [`plan_clock_series`]
//! finds such an unnest whose upper bound is the clock shifted by a
//! constant, its start and step constants, and replaces it by a
//! [`ClockSeriesNode`], which the translator makes a
//! [`PlanNode::ClockSeries`](rockstream_plan::PlanNode): its values are
//! emitted as the clock reaches them (RFC 0011's clock and wake-ups).

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchemaRef, ScalarValue};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use rockstream_types::{RsError, RsResult};

use crate::temporal_filters::{
    clock_offset_micros, constant_interval_micros, constant_value, is_constant, reads_clock,
};

/// A growing series of timestamps, planned ([`plan_clock_series`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClockSeriesNode {
    pub start_micros: i64,
    pub step_micros: i64,
    pub offset_micros: i64,
    pub schema: DFSchemaRef,
}

impl PartialOrd for ClockSeriesNode {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        (self.start_micros, self.step_micros, self.offset_micros).partial_cmp(&(
            other.start_micros,
            other.step_micros,
            other.offset_micros,
        ))
    }
}

impl UserDefinedLogicalNodeCore for ClockSeriesNode {
    fn name(&self) -> &str {
        "ClockSeries"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        Vec::new()
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "ClockSeries: from {} by {} up to now() + {} (µs)",
            self.start_micros, self.step_micros, self.offset_micros
        )
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        _inputs: Vec<LogicalPlan>,
    ) -> datafusion::error::Result<Self> {
        Ok(self.clone())
    }
}

/// `plan` with each `unnest(generate_series(start, clock ± constant,
/// step))` of one row (a view's `FROM generate_series(…)`) a
/// [`ClockSeriesNode`]; other uses of the clock are left for
/// `refuse_as_written` to refuse.
pub(crate) fn plan_clock_series(state: &SessionState, plan: LogicalPlan) -> RsResult<LogicalPlan> {
    let mut failure = None;
    let planned = plan
        .transform_up_with_subqueries(|node| {
            if failure.is_some() {
                return Ok(Transformed::no(node));
            }
            match clock_series(state, &node) {
                Ok(Some(series)) => Ok(Transformed::yes(LogicalPlan::Extension(Extension {
                    node: Arc::new(series),
                }))),
                Ok(None) => Ok(Transformed::no(node)),
                Err(error) => {
                    failure = Some(error);
                    Ok(Transformed::no(node))
                }
            }
        })
        .map_err(rockstream_plan::arrow_types::datafusion_error)?;
    match failure {
        Some(error) => Err(error),
        None => Ok(planned.data),
    }
}

/// The series `node` is, if it is the unnest of a one-row projection of
/// `generate_series(start, clock ± constant, step)`.
fn clock_series(state: &SessionState, node: &LogicalPlan) -> RsResult<Option<ClockSeriesNode>> {
    let LogicalPlan::Unnest(unnest) = node else {
        return Ok(None);
    };
    let LogicalPlan::Projection(projection) = unnest.input.as_ref() else {
        return Ok(None);
    };
    let one_row = matches!(
        projection.input.as_ref(),
        LogicalPlan::EmptyRelation(empty) if empty.produce_one_row
    );
    let ([series], true, [(0, _)]) = (
        projection.expr.as_slice(),
        one_row,
        unnest.list_type_columns.as_slice(),
    ) else {
        return Ok(None);
    };
    let Expr::ScalarFunction(call) = series.clone().unalias() else {
        return Ok(None);
    };
    if call.func.name() != "generate_series" {
        return Ok(None);
    }
    let [start, stop, step] = call.args.as_slice() else {
        return Ok(None);
    };
    if !reads_clock(stop) {
        return Ok(None);
    }
    // A stable function (`current_date`) would be folded into the value it
    // has at CREATE.
    if !is_constant(start) || !is_constant(step) {
        return Err(RsError::unsupported(
            "generate_series up to now() from a start or by a step that is not constant",
        ));
    }
    let offset_micros = clock_offset_micros(state, stop)?.ok_or_else(|| {
        RsError::unsupported(
            "generate_series up to an expression of now() other than now() plus or minus a \
             constant interval",
        )
    })?;
    let step_micros = match constant_interval_micros(state, step)? {
        Some(step) if step > 0 => step,
        _ => {
            return Err(RsError::unsupported(
                "generate_series up to now() with a step that is not a positive interval of \
                 days, hours, minutes or seconds",
            ))
        }
    };
    let start_micros = constant_timestamp_micros(state, start)?;
    Ok(Some(ClockSeriesNode {
        start_micros,
        step_micros,
        offset_micros,
        schema: unnest.schema.clone(),
    }))
}

/// The constant timestamp `start` in microseconds since 1970 (UTC).
fn constant_timestamp_micros(state: &SessionState, start: &Expr) -> RsResult<i64> {
    let not_a_timestamp = || {
        RsError::unsupported(
            "generate_series up to now() from a start other than a constant timestamp",
        )
    };
    let micros = match constant_value(state, start).ok_or_else(not_a_timestamp)? {
        ScalarValue::TimestampSecond(Some(seconds), _) => seconds.checked_mul(1_000_000),
        ScalarValue::TimestampMillisecond(Some(millis), _) => millis.checked_mul(1_000),
        ScalarValue::TimestampMicrosecond(Some(micros), _) => Some(micros),
        ScalarValue::TimestampNanosecond(Some(nanos), _) => Some(nanos.div_euclid(1_000)),
        ScalarValue::Date32(Some(days)) => i64::from(days).checked_mul(86_400_000_000),
        _ => None,
    };
    micros.ok_or_else(not_a_timestamp)
}
