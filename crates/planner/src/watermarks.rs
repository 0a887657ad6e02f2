//! Watermarks in a view's plan (RFC 0013): which columns of each node the
//! watermarks of the tables it reads bound ([`rockstream_plan::Bound`]),
//! the aggregates that may retire closed groups, and `EMIT ON WINDOW
//! CLOSE`'s operator on top.
//!
//! Bounds start at scans of watermarked tables (their time column) and
//! pass through filters, exchanges, distinct, projections that keep the
//! column, `date_bin(constant stride, column, constant origin)` or add a
//! constant interval (TUMBLE's and HOP's `window_start`/`window_end`),
//! unions (the least of the branches' bounds) and an aggregate's group
//! columns. Every other operator drops them: a join or a window function
//! may change old rows when new ones arrive.

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{DFSchemaRef, ScalarValue};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, Operator};
use rockstream_plan::{Bound, PlanNode, Retirement};
use rockstream_types::{codes, ObjectId, RsError, RsResult};

/// Gives each aggregate grouping by a bounded column its retirement and,
/// for `EMIT ON WINDOW CLOSE`, puts the window-closing operator on top
/// (RFC 2001 when no output column is bounded). `event_time` names a
/// table's watermark column, if it has one.
pub fn bind_watermarks(
    plan: PlanNode,
    view_id: ObjectId,
    event_time: &dyn Fn(ObjectId) -> Option<usize>,
    emit_on_window_close: bool,
) -> RsResult<PlanNode> {
    let mut plan = plan;
    let bounds = retire_groups(&mut plan, event_time);
    if !emit_on_window_close {
        return Ok(plan);
    }
    let Some((column, bound)) = bounds
        .into_iter()
        .enumerate()
        .find_map(|(column, bound)| Some((column, bound?)))
    else {
        return Err(RsError::new(
            &codes::UNSUPPORTED_SQL_CONSTRUCT,
            "EMIT ON WINDOW CLOSE needs an output column the watermark of a table bounds: group by a window of a table with a WATERMARK (e.g. window_start of TUMBLE over it)",
        ));
    };
    // The last operator id of the view's range: the translator numbers
    // its operators from 0 up.
    let op_id = rockstream_plan::op_id(view_id, u32::MAX);
    Ok(PlanNode::WindowClose {
        op_id,
        input: Box::new(plan),
        column,
        bound,
    })
}

/// The bound of each output column of `plan`, after giving the aggregates
/// within it their retirements.
fn retire_groups(
    plan: &mut PlanNode,
    event_time: &dyn Fn(ObjectId) -> Option<usize>,
) -> Vec<Option<Bound>> {
    let inputs: Vec<Vec<Option<Bound>>> = plan
        .inputs_mut()
        .into_iter()
        .map(|input| retire_groups(input, event_time))
        .collect();
    let width = plan.schema().len();
    let mut bounds = match plan {
        PlanNode::Source { object_id, .. } => {
            let mut bounds = vec![None; width];
            if let Some(column) = event_time(*object_id).filter(|column| *column < width) {
                bounds[column] = Some(Bound::Watermark(*object_id));
            }
            bounds
        }
        PlanNode::Filter { .. }
        | PlanNode::Exchange { .. }
        | PlanNode::Distinct { .. }
        | PlanNode::WindowClose { .. } => inputs.into_iter().next().unwrap_or_default(),
        PlanNode::Map {
            exprs,
            input_schema,
            ..
        } => {
            let input = inputs.into_iter().next().unwrap_or_default();
            exprs
                .iter()
                .map(|expr| expr_bound(expr, input_schema, &input))
                .collect()
        }
        PlanNode::UnionAll { .. } => (0..width)
            .map(|column| {
                let branches = inputs
                    .iter()
                    .map(|input| input.get(column).cloned().flatten())
                    .collect::<Option<Vec<Bound>>>()?;
                match <[Bound; 1]>::try_from(branches) {
                    Ok([bound]) => Some(bound),
                    Err(branches) => Some(Bound::Least(branches)),
                }
            })
            .collect(),
        PlanNode::Aggregate {
            group_count,
            retire,
            ..
        } => {
            let input = inputs.into_iter().next().unwrap_or_default();
            let mut bounds: Vec<Option<Bound>> = input.into_iter().take(*group_count).collect();
            bounds.resize(width, None);
            *retire = bounds.iter().enumerate().find_map(|(column, bound)| {
                Some(Retirement {
                    column,
                    bound: bound.clone()?,
                })
            });
            bounds
        }
        _ => vec![None; width],
    };
    bounds.resize(width, None);
    bounds
}

/// The bound of a projected expression over input columns bounded as
/// `input` says.
fn expr_bound(expr: &Expr, schema: &DFSchemaRef, input: &[Option<Bound>]) -> Option<Bound> {
    match expr {
        Expr::Alias(alias) => expr_bound(&alias.expr, schema, input),
        Expr::Column(column) => input.get(schema.index_of_column(column).ok()?)?.clone(),
        // To timestamp types of microseconds or finer: the same instants
        // (a date's at its midnight, as its watermark is kept); a cast to
        // seconds or milliseconds drops the fraction, below the bound.
        Expr::Cast(cast)
            if matches!(
                cast.field.data_type(),
                DataType::Timestamp(TimeUnit::Microsecond | TimeUnit::Nanosecond, _)
            ) && matches!(
                cast.expr.get_type(schema),
                Ok(DataType::Timestamp(..) | DataType::Date32)
            ) =>
        {
            expr_bound(&cast.expr, schema, input)
        }
        Expr::ScalarFunction(call) if call.func.name() == "date_bin" => {
            let [stride, value, origin] = call.args.as_slice() else {
                return None;
            };
            Some(Bound::DateBin {
                stride_micros: interval_micros(stride).filter(|stride| *stride > 0)?,
                origin_micros: timestamp_micros(origin)?,
                of: Box::new(expr_bound(value, schema, input)?),
            })
        }
        // `date_trunc` to a unit of fixed length: a bin from the epoch
        // (weeks from a Monday).
        Expr::ScalarFunction(call) if call.func.name() == "date_trunc" => {
            let [unit, value] = call.args.as_slice() else {
                return None;
            };
            let (stride_micros, origin_micros) = match strip(unit) {
                Expr::Literal(ScalarValue::Utf8(Some(unit)), _) => {
                    match unit.to_ascii_lowercase().as_str() {
                        "microsecond" | "microseconds" => (1, 0),
                        "millisecond" | "milliseconds" => (1_000, 0),
                        "second" => (1_000_000, 0),
                        "minute" => (60_000_000, 0),
                        "hour" => (3_600_000_000, 0),
                        "day" => (86_400_000_000, 0),
                        // 1970-01-05 was a Monday.
                        "week" => (7 * 86_400_000_000, 4 * 86_400_000_000),
                        _ => return None,
                    }
                }
                _ => return None,
            };
            Some(Bound::DateBin {
                stride_micros,
                origin_micros,
                of: Box::new(expr_bound(value, schema, input)?),
            })
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let sign = match op {
                Operator::Plus => 1,
                Operator::Minus => -1,
                _ => return None,
            };
            let micros = interval_micros(right)?.checked_mul(sign)?;
            Some(Bound::Plus {
                micros,
                of: Box::new(expr_bound(left, schema, input)?),
            })
        }
        _ => None,
    }
}

/// A constant interval without months (days as 24 hours), in whole
/// microseconds; also `interval * integer`, as HOP's windows are shifted.
fn interval_micros(expr: &Expr) -> Option<i64> {
    match strip(expr) {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(interval)), _)
            if interval.months == 0 =>
        {
            let nanos =
                i128::from(interval.days) * 86_400_000_000_000 + i128::from(interval.nanoseconds);
            (nanos % 1000 == 0).then(|| i64::try_from(nanos / 1000).ok())?
        }
        Expr::Literal(ScalarValue::IntervalDayTime(Some(interval)), _) => Some(
            i64::from(interval.days) * 86_400_000_000 + i64::from(interval.milliseconds) * 1000,
        ),
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Multiply,
            right,
        }) => interval_micros(left)?.checked_mul(integer(right)?),
        _ => None,
    }
}

fn integer(expr: &Expr) -> Option<i64> {
    match strip(expr) {
        Expr::Literal(ScalarValue::Int64(Some(value)), _) => Some(*value),
        Expr::Literal(ScalarValue::Int32(Some(value)), _) => Some(i64::from(*value)),
        _ => None,
    }
}

/// A constant timestamp, in microseconds.
fn timestamp_micros(expr: &Expr) -> Option<i64> {
    match strip(expr) {
        Expr::Literal(ScalarValue::TimestampNanosecond(Some(nanos), _), _) => Some(nanos / 1000),
        Expr::Literal(ScalarValue::TimestampMicrosecond(Some(micros), _), _) => Some(*micros),
        Expr::Literal(ScalarValue::TimestampMillisecond(Some(millis), _), _) => {
            millis.checked_mul(1000)
        }
        Expr::Literal(ScalarValue::TimestampSecond(Some(seconds), _), _) => {
            seconds.checked_mul(1_000_000)
        }
        _ => None,
    }
}

/// `expr` without aliases and casts.
fn strip(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(alias) => strip(&alias.expr),
        Expr::Cast(cast) => strip(&cast.expr),
        other => other,
    }
}
