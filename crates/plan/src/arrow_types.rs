//! SQL types ↔ Arrow types, and DataFusion/Arrow errors → coded errors.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, IntervalMonthDayNanoBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit, TimeUnit};
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
        DataFusionError::Shared(shared) => {
            RsError::new(&codes::EXECUTION_ERROR, shared.to_string())
        }
        DataFusionError::Execution(message)
            if message.to_lowercase().contains("divide by zero") =>
        {
            RsError::new(&codes::DIVISION_BY_ZERO, "division by zero")
        }
        DataFusionError::Execution(message) => RsError::new(&codes::EXECUTION_ERROR, message),
        DataFusionError::Plan(message) => RsError::new(&codes::PLAN_ERROR, message),
        DataFusionError::SchemaError(error, _) => {
            RsError::new(&codes::PLAN_ERROR, error.to_string())
        }
        DataFusionError::SQL(error, _) => RsError::new(&codes::SYNTAX_ERROR, error.to_string()),
        DataFusionError::NotImplemented(message) => {
            RsError::new(&codes::UNSUPPORTED_STATEMENT, message)
        }
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
