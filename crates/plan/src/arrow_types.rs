//! SQL types ↔ Arrow types, and DataFusion/Arrow errors → coded errors.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, IntervalMonthDayNanoArray,
    IntervalMonthDayNanoBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Field, Float32Type, Float64Type, IntervalMonthDayNano, IntervalUnit,
    TimeUnit,
};
use datafusion::common::DataFusionError;
use rockstream_types::datum::{NUMERIC_DEFAULT_SCALE, NUMERIC_PRECISION_MAX};
use rockstream_types::{codes, RsError, RsResult, SqlType};

/// The canonical Arrow type of a SQL type.
pub fn arrow_type(sql_type: SqlType) -> DataType {
    match sql_type {
        SqlType::Bool => DataType::Boolean,
        SqlType::Int16 => DataType::Int16,
        SqlType::Int32 => DataType::Int32,
        SqlType::Int64 => DataType::Int64,
        SqlType::Float32 => DataType::Float32,
        SqlType::Float64 => DataType::Float64,
        SqlType::Numeric { precision, scale } => DataType::Decimal128(precision, scale),
        SqlType::Text => DataType::Utf8,
        SqlType::Date => DataType::Date32,
        SqlType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
        SqlType::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
        SqlType::Interval => DataType::Interval(IntervalUnit::MonthDayNano),
        SqlType::Array(element) => {
            DataType::List(Arc::new(Field::new_list_field(arrow_type(*element), true)))
        }
    }
}

/// The SQL type an Arrow type is stored as (after a cast if not canonical).
pub fn sql_type_of(data_type: &DataType) -> RsResult<SqlType> {
    Ok(match data_type {
        DataType::Boolean => SqlType::Bool,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => SqlType::Int16,
        DataType::Int32 | DataType::UInt16 => SqlType::Int32,
        DataType::Int64 | DataType::UInt32 => SqlType::Int64,
        DataType::UInt64 => SqlType::Numeric {
            precision: 20,
            scale: 0,
        },
        DataType::Float16 | DataType::Float32 => SqlType::Float32,
        DataType::Float64 => SqlType::Float64,
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) | DataType::Decimal128(p, s) => {
            SqlType::Numeric {
                precision: (*p).min(NUMERIC_PRECISION_MAX),
                scale: *s,
            }
        }
        DataType::Decimal256(_, s) => SqlType::Numeric {
            precision: NUMERIC_PRECISION_MAX,
            scale: *s,
        },
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => SqlType::Text,
        DataType::Date32 | DataType::Date64 => SqlType::Date,
        DataType::Timestamp(_, None) => SqlType::Timestamp,
        DataType::Timestamp(_, Some(_)) => SqlType::TimestampTz,
        DataType::Interval(_) | DataType::Duration(_) => SqlType::Interval,
        DataType::Dictionary(_, value) => sql_type_of(value)?,
        DataType::List(element)
        | DataType::LargeList(element)
        | DataType::FixedSizeList(element, _) => {
            SqlType::array_of(sql_type_of(element.data_type())?).ok_or_else(|| {
                RsError::new(
                    &codes::UNSUPPORTED_TYPE,
                    format!(
                        "multidimensional arrays ({data_type}) cannot be stored in a view column"
                    ),
                )
            })?
        }
        other => {
            return Err(RsError::new(
                &codes::UNSUPPORTED_TYPE,
                format!("values of Arrow type {other} cannot be stored in a view column"),
            ))
        }
    })
}

/// Default NUMERIC type for `NUMERIC` declared without precision.
pub fn default_numeric() -> SqlType {
    SqlType::Numeric {
        precision: NUMERIC_PRECISION_MAX,
        scale: NUMERIC_DEFAULT_SCALE,
    }
}

pub fn arrow_error(error: datafusion::arrow::error::ArrowError) -> RsError {
    use datafusion::arrow::error::ArrowError;
    match &error {
        ArrowError::DivideByZero => RsError::new(&codes::DIVISION_BY_ZERO, "division by zero"),
        // Arrow's words for a number that does not fit the numeric type it
        // is cast to (a text that is no number is "Cannot cast string").
        ArrowError::CastError(message) if message.starts_with("Can't cast value") => {
            RsError::new(&codes::NUMERIC_OUT_OF_RANGE, error.to_string())
        }
        ArrowError::CastError(_) | ArrowError::ParseError(_) => {
            RsError::new(&codes::INVALID_INPUT_VALUE, error.to_string())
        }
        ArrowError::ArithmeticOverflow(_) => {
            RsError::new(&codes::NUMERIC_OUT_OF_RANGE, error.to_string())
        }
        ArrowError::InvalidArgumentError(message)
            if message.contains("too large") || message.contains("overflow") =>
        {
            RsError::new(&codes::NUMERIC_OUT_OF_RANGE, error.to_string())
        }
        ArrowError::ComputeError(_) | ArrowError::InvalidArgumentError(_) => {
            RsError::new(&codes::EXECUTION_ERROR, error.to_string())
        }
        _ => RsError::internal(error.to_string()),
    }
}

/// Maps a DataFusion error onto a coded error.
pub fn datafusion_error(error: DataFusionError) -> RsError {
    match error {
        DataFusionError::ArrowError(arrow, _) => arrow_error(*arrow),
        DataFusionError::Context(_, inner) => datafusion_error(*inner),
        // A planning error with a source span: classified by what it wraps.
        DataFusionError::Diagnostic(_, inner) => datafusion_error(*inner),
        DataFusionError::Shared(shared) => {
            RsError::new(&codes::EXECUTION_ERROR, shared.to_string())
        }
        DataFusionError::Execution(message)
            if message.to_lowercase().contains("divide by zero") =>
        {
            RsError::new(&codes::DIVISION_BY_ZERO, "division by zero")
        }
        // An uncorrelated scalar subquery with many rows, as PostgreSQL says it.
        DataFusionError::Execution(message)
            if message.contains("Scalar subquery returned more than one row") =>
        {
            RsError::new(
                &codes::SUBQUERY_MORE_THAN_ONE_ROW,
                "more than one row returned by a subquery used as an expression",
            )
        }
        DataFusionError::Execution(message) => RsError::new(&codes::EXECUTION_ERROR, message),
        // A call of a function no session knows, as PostgreSQL says it.
        DataFusionError::Plan(message) if message.starts_with("Invalid function '") => {
            let name = message
                .trim_start_matches("Invalid function '")
                .split('\'')
                .next()
                .unwrap_or_default();
            RsError::new(
                &codes::UNDEFINED_FUNCTION,
                format!("function {name} does not exist"),
            )
        }
        DataFusionError::Plan(message) => RsError::new(&codes::PLAN_ERROR, message),
        DataFusionError::SchemaError(error, _) => {
            RsError::new(&codes::PLAN_ERROR, error.to_string())
        }
        DataFusionError::SQL(error, _) => RsError::new(&codes::SYNTAX_ERROR, error.to_string()),
        // What DataFusion leaves of a correlated subquery it could not
        // turn into a join (a correlation other than equality, a LIMIT, ...).
        DataFusionError::NotImplemented(message)
            if message.contains("Physical plan does not support logical expression")
                && ["ScalarSubquery", "Exists", "InSubquery"]
                    .iter()
                    .any(|kind| message.contains(kind)) =>
        {
            RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "this correlated subquery is not supported yet here (DataFusion could not turn it \
                 into a join: its correlation is not an equality, or it has a LIMIT)",
            )
        }
        DataFusionError::NotImplemented(message) => {
            RsError::new(&codes::UNSUPPORTED_STATEMENT, message)
        }
        // A coded error raised inside one of our functions keeps its code.
        DataFusionError::External(inner) if inner.is::<RsError>() => match inner.downcast() {
            Ok(coded) => *coded,
            Err(inner) => RsError::new(&codes::EXECUTION_ERROR, inner.to_string()),
        },
        other => {
            let text = other.to_string();
            if text.to_lowercase().contains("divide by zero") {
                RsError::new(&codes::DIVISION_BY_ZERO, "division by zero")
            } else {
                RsError::new(&codes::EXECUTION_ERROR, text)
            }
        }
    }
}

/// `interval * factor` (`divide`: `interval / factor`) for arrays of
/// intervals and numbers, row by row; NULL in either gives NULL.
pub fn scale_intervals(
    intervals: &ArrayRef,
    factors: &ArrayRef,
    divide: bool,
) -> RsResult<ArrayRef> {
    let intervals =
        cast(intervals, &DataType::Interval(IntervalUnit::MonthDayNano)).map_err(arrow_error)?;
    let intervals = intervals
        .as_any()
        .downcast_ref::<IntervalMonthDayNanoArray>()
        .ok_or_else(|| RsError::internal("interval did not cast to month-day-nano"))?;
    let factors = cast(factors, &DataType::Float64).map_err(arrow_error)?;
    let factors = factors
        .as_any()
        .downcast_ref::<Float64Array>()
        .ok_or_else(|| RsError::internal("factor did not cast to float8"))?;
    let mut builder = IntervalMonthDayNanoBuilder::with_capacity(intervals.len());
    for index in 0..intervals.len() {
        if intervals.is_null(index) || factors.is_null(index) {
            builder.append_null();
        } else {
            builder.append_value(scale_interval(
                intervals.value(index),
                factors.value(index),
                divide,
            )?);
        }
    }
    Ok(Arc::new(builder.finish()))
}

/// PostgreSQL's `interval * float8` and `interval / float8`: months and
/// days are scaled separately and truncated; the fraction of a month flows
/// into days (30 per month) and the fraction of a day into the time, both
/// rounded to microseconds, as PostgreSQL's `interval_mul`/`interval_div`
/// compute it (so `'1 mon' / 2` is `15 days`, `'1 day' * 1.5` is `1 day
/// 12:00:00`).
pub fn scale_interval(
    interval: IntervalMonthDayNano,
    factor: f64,
    divide: bool,
) -> RsResult<IntervalMonthDayNano> {
    const DAYS_PER_MONTH: f64 = 30.0;
    const SECONDS_PER_DAY: f64 = 86_400.0;
    if divide && factor == 0.0 {
        return Err(RsError::new(&codes::DIVISION_BY_ZERO, "division by zero"));
    }
    let scale = |value: f64| {
        if divide {
            value / factor
        } else {
            value * factor
        }
    };
    let to_microseconds = |value: f64| (value * 1e6).round_ties_even() / 1e6;
    let out_of_range = || RsError::new(&codes::EXECUTION_ERROR, "interval out of range");
    let fits_i32 = |value: f64| value.is_finite() && value.trunc().abs() <= i32::MAX as f64;
    let months = scale(interval.months as f64);
    let days = scale(interval.days as f64);
    if !fits_i32(months) || !fits_i32(days) {
        return Err(out_of_range());
    }
    let whole_months = months.trunc();
    let mut whole_days = days.trunc();
    let month_remainder_days = to_microseconds((months - whole_months) * DAYS_PER_MONTH);
    let mut remainder_seconds = to_microseconds(
        (days - whole_days + month_remainder_days - month_remainder_days.trunc()) * SECONDS_PER_DAY,
    );
    if remainder_seconds.abs() >= SECONDS_PER_DAY {
        let carried = (remainder_seconds / SECONDS_PER_DAY).trunc();
        whole_days += carried;
        remainder_seconds -= carried * SECONDS_PER_DAY;
    }
    whole_days += month_remainder_days.trunc();
    let microseconds =
        (scale((interval.nanoseconds / 1000) as f64) + remainder_seconds * 1e6).round_ties_even();
    let nanoseconds = microseconds * 1000.0;
    if !fits_i32(whole_days) || !nanoseconds.is_finite() || nanoseconds.abs() >= i64::MAX as f64 {
        return Err(out_of_range());
    }
    Ok(IntervalMonthDayNano::new(
        whole_months as i32,
        whole_days as i32,
        nanoseconds as i64,
    ))
}

/// A duration (e.g. `timestamp - timestamp`) as PostgreSQL shows it: whole
/// days and the remaining time, as an interval.
pub fn duration_to_interval(array: &ArrayRef) -> RsResult<ArrayRef> {
    let nanoseconds =
        cast(array, &DataType::Duration(TimeUnit::Nanosecond)).map_err(arrow_error)?;
    let nanoseconds = cast(&nanoseconds, &DataType::Int64).map_err(arrow_error)?;
    let values = nanoseconds
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| RsError::internal("duration did not cast to integers"))?;
    const DAY: i64 = 86_400_000_000_000;
    let mut builder = IntervalMonthDayNanoBuilder::with_capacity(values.len());
    for index in 0..values.len() {
        if values.is_null(index) {
            builder.append_null();
        } else {
            let total = values.value(index);
            builder.append_value(IntervalMonthDayNano::new(
                0,
                (total / DAY) as i32,
                total % DAY,
            ));
        }
    }
    Ok(Arc::new(builder.finish()))
}

/// Numbers rounded to whole values as PostgreSQL rounds them when it casts
/// to an integer type: a numeric half away from zero (`2.5` → 3, `-2.5` →
/// -3), a float half to even (`2.5` → 2, `3.5` → 4), which is also its
/// `round(double precision)`. Arrow's casts truncate instead. Other arrays
/// are returned as they are.
pub fn round_to_whole(array: &ArrayRef) -> RsResult<ArrayRef> {
    Ok(match array.data_type() {
        DataType::Float64 => Arc::new(
            array
                .as_primitive::<Float64Type>()
                .unary::<_, Float64Type>(f64::round_ties_even),
        ),
        DataType::Float32 => Arc::new(
            array
                .as_primitive::<Float32Type>()
                .unary::<_, Float32Type>(f32::round_ties_even),
        ),
        DataType::Decimal128(precision, scale) if *scale > 0 => {
            let unit = 10_i128.pow(u32::from(scale.unsigned_abs()));
            let rounded = array
                .as_primitive::<Decimal128Type>()
                .unary::<_, Decimal128Type>(|value| {
                    let whole = value / unit;
                    let rest = value % unit;
                    // `2 * |rest| >= unit` without overflowing at scale 38.
                    if rest.abs() >= unit - rest.abs() {
                        whole + value.signum()
                    } else {
                        whole
                    }
                });
            let digits = (*precision as i8 - *scale + 1).clamp(1, 38) as u8;
            Arc::new(
                rounded
                    .with_precision_and_scale(digits, 0)
                    .map_err(arrow_error)?,
            )
        }
        _ => array.clone(),
    })
}

/// Whether a cast from `from` to `to` rounds in PostgreSQL where Arrow
/// truncates (see [`round_to_whole`]).
pub fn cast_rounds(from: &DataType, to: &DataType) -> bool {
    let integer = matches!(to, DataType::Int16 | DataType::Int32 | DataType::Int64);
    let fractional = match from {
        DataType::Float32 | DataType::Float64 => true,
        DataType::Decimal128(_, scale) => *scale > 0,
        _ => false,
    };
    integer && fractional
}

#[cfg(test)]
mod tests {
    //! Goal: interval scaling gives PostgreSQL 15's results (taken from
    //! `SELECT interval '…' * …` there), fractions cascading down.
    use super::*;

    fn scaled(months: i32, days: i32, seconds: f64, factor: f64, divide: bool) -> (i32, i32, f64) {
        let interval = IntervalMonthDayNano::new(months, days, (seconds * 1e9).round() as i64);
        let result = scale_interval(interval, factor, divide).expect("in range");
        (result.months, result.days, result.nanoseconds as f64 / 1e9)
    }

    #[test]
    fn scaling_matches_postgres() {
        let hour = 3600.0;
        assert_eq!(scaled(0, 1, 0.0, 1.5, false), (0, 1, 12.0 * hour));
        assert_eq!(scaled(1, 0, 0.0, 2.0, true), (0, 15, 0.0));
        assert_eq!(scaled(1, 1, hour, 0.5, false), (0, 15, 12.5 * hour));
        assert_eq!(scaled(1, 0, 0.0, 0.3, false), (0, 9, 0.0));
        assert_eq!(scaled(-1, 3, 0.0, 2.5, false), (-2, -8, 12.0 * hour));
        assert_eq!(scaled(14, 0, 0.0, 3.0, true), (4, 20, 0.0));
        assert_eq!(scaled(0, 10, 5.0 * hour, 7.0, true), (0, 1, 11.0 * hour));
        assert_eq!(scaled(0, 1, 0.0, 730_000.0, false), (0, 730_000, 0.0));
        let (months, days, seconds) = scaled(0, 29, 86_399.0, 1.0000001, false);
        assert_eq!((months, days), (0, 29));
        assert!((seconds - 86_399.259_2).abs() < 1e-6, "{seconds}");
    }

    #[test]
    fn division_by_zero_and_overflow_are_errors() {
        let day = IntervalMonthDayNano::new(0, 1, 0);
        let error = scale_interval(day, 0.0, true).expect_err("a zero divisor");
        assert_eq!(error.code, &codes::DIVISION_BY_ZERO);
        assert!(scale_interval(day, 1e12, false).is_err());
        assert!(scale_interval(day, f64::NAN, false).is_err());
    }

    #[test]
    fn planning_errors_keep_their_class_under_a_diagnostic() {
        let diagnosed = |message: &str| {
            DataFusionError::Diagnostic(
                Box::new(datafusion::common::Diagnostic::new_error(message, None)),
                Box::new(DataFusionError::Plan(message.into())),
            )
        };
        let unknown = datafusion_error(diagnosed("Invalid function 'nope'.\nDid you mean 'now'?"));
        assert_eq!(unknown.code, &codes::UNDEFINED_FUNCTION);
        assert_eq!(unknown.message, "function nope does not exist");
        let other = datafusion_error(diagnosed("No field named x"));
        assert_eq!(other.code, &codes::PLAN_ERROR);
    }
}
