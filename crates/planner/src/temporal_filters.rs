//! Temporal filters: a view's `WHERE` comparing a timestamp with `now()`.
//!
//! `WHERE ts > now() - INTERVAL '1 hour'` cannot be planned as DataFusion
//! plans it, which folds `now()` into the statement's start time. Before
//! the optimizer runs, [`mark_clock_bounds`] replaces each such condition
//! of a `Filter` (a top-level conjunct `value <op> now() ± constant`, with
//! `<op>` one of `<`, `<=`, `>`, `>=`, either way round, or a `BETWEEN`
//! whose ends are such) by a call of the marker function
//! `rs_clock_bound(value, comparison, offset_micros)`: a deterministic
//! function of the row as far as the optimizer knows, so it is pushed down
//! like any condition on `value`'s columns, and `now()` is gone. The
//! translator turns a `Filter`'s markers into a
//! [`PlanNode::TemporalFilter`](rockstream_plan::PlanNode) and refuses one
//! anywhere else ([`stray_clock_bound`]).
//!
//! The constant must be an interval without months or years (a month's
//! length depends on the date, so the condition would not be a fixed
//! shift of the clock); `now()` may be cast to `timestamp` (sessions run in
//! UTC, so the two spell the same instant). Any other use of `now()` in a
//! view is still refused (`refuse_as_written`).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::execution::SessionState;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::utils::{conjunction, split_conjunction, split_conjunction_owned};
use datafusion::logical_expr::{
    lit, Between, BinaryExpr, ColumnarValue, Expr, LogicalPlan, LogicalPlanBuilder, Operator,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use rockstream_plan::{ClockBound, ClockComparison};
use rockstream_types::{RsError, RsResult};

const MARKER: &str = "rs_clock_bound";

const MICROS_PER_DAY: i128 = 86_400_000_000;

static CLOCK_BOUND: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::from(ClockBoundMarker {
        signature: Signature::any(3, Volatility::Immutable),
    }))
});

#[derive(Debug, PartialEq, Eq, Hash)]
struct ClockBoundMarker {
    signature: Signature,
}

impl ScalarUDFImpl for ClockBoundMarker {
    fn name(&self) -> &str {
        MARKER
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        plan_err!("a comparison with now() is kept by a materialized view's temporal filter")
    }
}

/// `plan` with each condition of a `Filter` that bounds a value by the
/// clock replaced by its marker (see the module documentation).
pub(crate) fn mark_clock_bounds(state: &SessionState, plan: LogicalPlan) -> RsResult<LogicalPlan> {
    let mut failed: Option<RsError> = None;
    let marked = plan
        .transform_up_with_subqueries(|node| {
            let LogicalPlan::Filter(mut filter) = node else {
                return Ok(Transformed::no(node));
            };
            let conjuncts = split_conjunction_owned(filter.predicate.clone());
            let mut marked_any = false;
            let mut kept = Vec::with_capacity(conjuncts.len());
            for conjunct in conjuncts.into_iter().flat_map(split_between) {
                match mark(state, &conjunct) {
                    Ok(Some(marker)) => {
                        marked_any = true;
                        kept.push(marker);
                    }
                    Ok(None) => kept.push(conjunct),
                    Err(error) => {
                        failed.get_or_insert(error);
                        kept.push(conjunct);
                    }
                }
            }
            if !marked_any {
                return Ok(Transformed::no(LogicalPlan::Filter(filter)));
            }
            filter.predicate = conjunction(kept).unwrap_or_else(|| lit(true));
            Ok(Transformed::yes(LogicalPlan::Filter(filter)))
        })
        .map_err(rockstream_plan::arrow_types::datafusion_error)?
        .data;
    match failed {
        Some(error) => Err(error),
        None => Ok(marked),
    }
}

/// `value BETWEEN low AND high` as its two comparisons when an end reads
/// the clock; any other condition as it is.
fn split_between(conjunct: Expr) -> Vec<Expr> {
    match conjunct {
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if reads_clock(&low) || reads_clock(&high) => vec![
            Expr::BinaryExpr(BinaryExpr::new(expr.clone(), Operator::GtEq, low)),
            Expr::BinaryExpr(BinaryExpr::new(expr, Operator::LtEq, high)),
        ],
        other => vec![other],
    }
}

/// The marker standing for `conjunct`, if it is `value <op> clock` or
/// `clock <op> value` with `clock` the clock shifted by a constant and
/// `value` over columns; a NULL constant makes the condition NULL.
fn mark(state: &SessionState, conjunct: &Expr) -> RsResult<Option<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = conjunct else {
        return Ok(None);
    };
    let comparison = |op: Operator| match op {
        Operator::Gt => Some(ClockComparison::Greater),
        Operator::GtEq => Some(ClockComparison::GreaterOrEqual),
        Operator::Lt => Some(ClockComparison::Less),
        Operator::LtEq => Some(ClockComparison::LessOrEqual),
        _ => None,
    };
    let (value, comparison, clock) = match (reads_clock(left), reads_clock(right)) {
        (false, true) => (left, comparison(*op), right),
        (true, false) => (right, op.swap().and_then(comparison), left),
        _ => return Ok(None),
    };
    let Some(comparison) = comparison else {
        return Ok(None);
    };
    if !reads_columns(value) {
        return Ok(None);
    }
    let mut terms = Vec::new();
    if !clock_terms(clock, 1, &mut terms) {
        return Ok(None);
    }
    let mut offset: i128 = 0;
    for (sign, term) in terms {
        match interval_micros(state, term)? {
            Some(micros) => offset += sign * micros,
            None => return Ok(Some(Expr::Literal(ScalarValue::Boolean(None), None))),
        }
    }
    let offset = i64::try_from(offset).map_err(|_| {
        RsError::unsupported("an interval added to now() beyond the timestamp range")
    })?;
    Ok(Some(Expr::ScalarFunction(ScalarFunction::new_udf(
        Arc::clone(&CLOCK_BOUND),
        vec![
            value.as_ref().clone(),
            lit(comparison_name(comparison)),
            // As text: integer literals are narrowed to their least type.
            lit(offset.to_string()),
        ],
    ))))
}

/// Whether `expr` is `now()` (or `localtimestamp`, the same instant in a
/// UTC session), cast to a timestamp, plus or minus constants: then each
/// constant with its sign goes to `terms`.
fn clock_terms<'a>(expr: &'a Expr, sign: i128, terms: &mut Vec<(i128, &'a Expr)>) -> bool {
    match expr {
        Expr::ScalarFunction(call) => is_clock(call) && call.args.is_empty(),
        // To a timestamp of whole microseconds (a cast to fewer digits,
        // `now()::timestamp(0)`, rounds the clock).
        Expr::Cast(cast) => {
            matches!(
                cast.field.data_type(),
                DataType::Timestamp(TimeUnit::Microsecond | TimeUnit::Nanosecond, _)
            ) && clock_terms(&cast.expr, sign, terms)
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let constant = |expr: &Expr| !reads_clock(expr) && is_constant(expr);
            match op {
                Operator::Plus if constant(right) => {
                    terms.push((sign, right));
                    clock_terms(left, sign, terms)
                }
                Operator::Plus if constant(left) => {
                    terms.push((sign, left));
                    clock_terms(right, sign, terms)
                }
                Operator::Minus if constant(right) => {
                    terms.push((-sign, right));
                    clock_terms(left, sign, terms)
                }
                _ => false,
            }
        }
        _ => false,
    }
}

fn is_clock(call: &ScalarFunction) -> bool {
    matches!(call.func.name(), "now" | "localtimestamp")
}

pub(crate) fn reads_clock(expr: &Expr) -> bool {
    expr.exists(|expr| Ok(matches!(expr, Expr::ScalarFunction(call) if is_clock(call))))
        .unwrap_or(false)
}

fn reads_columns(expr: &Expr) -> bool {
    expr.exists(|expr| Ok(matches!(expr, Expr::Column(_))))
        .unwrap_or(false)
}

/// No column, subquery, parameter or function whose value may change.
pub(crate) fn is_constant(expr: &Expr) -> bool {
    !expr
        .exists(|expr| {
            Ok(match expr {
                Expr::Column(_)
                | Expr::OuterReferenceColumn(..)
                | Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::Placeholder(_) => true,
                Expr::ScalarFunction(call) => {
                    call.func.signature().volatility != Volatility::Immutable
                }
                _ => false,
            })
        })
        .unwrap_or(true)
}

/// The value of the constant `expr`, evaluated by planning `SELECT expr`
/// over no rows; `None` when it does not plan to a literal.
pub(crate) fn constant_value(state: &SessionState, expr: &Expr) -> Option<ScalarValue> {
    let plan = LogicalPlanBuilder::empty(true)
        .project(vec![expr.clone().alias("constant")])
        .and_then(LogicalPlanBuilder::build)
        .and_then(|plan| state.optimize(&plan))
        .ok()?;
    let LogicalPlan::Projection(projection) = &plan else {
        return None;
    };
    match projection.expr.first().map(|expr| expr.clone().unalias()) {
        Some(Expr::Literal(value, _)) => Some(value),
        _ => None,
    }
}

/// When `expr` is the clock plus or minus constant intervals: their sum in
/// microseconds; `None` for another expression of the clock.
pub(crate) fn clock_offset_micros(state: &SessionState, expr: &Expr) -> RsResult<Option<i64>> {
    let mut terms = Vec::new();
    if !clock_terms(expr, 1, &mut terms) {
        return Ok(None);
    }
    let mut offset: i128 = 0;
    for (sign, term) in terms {
        let micros = interval_micros(state, term)?
            .ok_or_else(|| RsError::unsupported("a NULL interval added to now()"))?;
        offset += sign * micros;
    }
    i64::try_from(offset)
        .map(Some)
        .map_err(|_| RsError::unsupported("an interval added to now() beyond the timestamp range"))
}

/// The constant interval `term` (without months) in microseconds; `None`
/// when it is NULL.
pub(crate) fn constant_interval_micros(state: &SessionState, term: &Expr) -> RsResult<Option<i64>> {
    interval_micros(state, term)?
        .map(|micros| {
            i64::try_from(micros)
                .map_err(|_| RsError::unsupported("an interval beyond the timestamp range"))
        })
        .transpose()
}

/// The constant interval `term` in microseconds; `None` when it is NULL.
fn interval_micros(state: &SessionState, term: &Expr) -> RsResult<Option<i128>> {
    let not_an_interval = || {
        RsError::unsupported(
            "a value other than a constant interval added to now() in a materialized view",
        )
    };
    let value = constant_value(state, term).ok_or_else(not_an_interval)?;
    let months = || {
        RsError::unsupported(
            "an interval of months or years added to now() in a materialized view (a month's \
             length depends on the date; write it in days)",
        )
    };
    Ok(Some(match value {
        value if value.is_null() => return Ok(None),
        ScalarValue::IntervalMonthDayNano(Some(interval)) => {
            if interval.months != 0 {
                return Err(months());
            }
            interval.days as i128 * MICROS_PER_DAY + interval.nanoseconds as i128 / 1_000
        }
        ScalarValue::IntervalDayTime(Some(interval)) => {
            interval.days as i128 * MICROS_PER_DAY + interval.milliseconds as i128 * 1_000
        }
        ScalarValue::IntervalYearMonth(Some(0)) => 0,
        ScalarValue::IntervalYearMonth(Some(_)) => return Err(months()),
        ScalarValue::DurationSecond(Some(seconds)) => seconds as i128 * 1_000_000,
        ScalarValue::DurationMillisecond(Some(millis)) => millis as i128 * 1_000,
        ScalarValue::DurationMicrosecond(Some(micros)) => micros as i128,
        ScalarValue::DurationNanosecond(Some(nanos)) => nanos as i128 / 1_000,
        _ => return Err(not_an_interval()),
    }))
}

fn comparison_name(comparison: ClockComparison) -> &'static str {
    match comparison {
        ClockComparison::Greater => ">",
        ClockComparison::GreaterOrEqual => ">=",
        ClockComparison::Less => "<",
        ClockComparison::LessOrEqual => "<=",
    }
}

/// The bound a marker stands for; `None` when `expr` is not a marker.
pub(crate) fn clock_bound(expr: &Expr) -> Option<ClockBound> {
    let Expr::ScalarFunction(call) = expr else {
        return None;
    };
    if call.func.name() != MARKER {
        return None;
    }
    let [value, Expr::Literal(comparison, _), Expr::Literal(offset, _)] = call.args.as_slice()
    else {
        return None;
    };
    let offset_micros = offset.try_as_str()??.parse().ok()?;
    let comparison = match comparison.try_as_str()?? {
        ">" => ClockComparison::Greater,
        ">=" => ClockComparison::GreaterOrEqual,
        "<" => ClockComparison::Less,
        "<=" => ClockComparison::LessOrEqual,
        _ => return None,
    };
    Some(ClockBound {
        value: value.clone(),
        comparison,
        offset_micros,
    })
}

/// Whether `expr` holds a marker anywhere.
pub(crate) fn has_clock_bound(expr: &Expr) -> bool {
    expr.exists(|expr| Ok(matches!(expr, Expr::ScalarFunction(call) if call.func.name() == MARKER)))
        .unwrap_or(false)
}

/// An error when a marker is anywhere but a top-level condition of a
/// `Filter` (where the optimizer might have moved it: into a join's
/// condition, say), which only a temporal filter can keep.
pub(crate) fn stray_clock_bound(plan: &LogicalPlan) -> RsResult<()> {
    let mut stray = false;
    plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::Filter(filter) => {
                stray = split_conjunction(&filter.predicate)
                    .into_iter()
                    .any(|conjunct| clock_bound(conjunct).is_none() && has_clock_bound(conjunct));
            }
            other => {
                other.apply_expressions(|expr| {
                    stray = has_clock_bound(expr);
                    Ok(if stray {
                        TreeNodeRecursion::Stop
                    } else {
                        TreeNodeRecursion::Continue
                    })
                })?;
            }
        }
        Ok(if stray {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })
    .map_err(rockstream_plan::arrow_types::datafusion_error)?;
    if stray {
        return Err(RsError::unsupported(
            "now() in a materialized view except in a WHERE condition that compares a \
             timestamp with now() plus or minus a constant interval",
        ));
    }
    Ok(())
}
