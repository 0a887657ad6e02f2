//! Arrow record batches → `DataRow` messages, in text or binary format.
//!
//! Each column is downcast once per batch into a [`Column`] view; each value
//! is then written as a 4-byte big-endian length followed by its bytes
//! (length -1 for NULL). Text forms come from `text` (PostgreSQL's exact
//! output functions); binary forms are PostgreSQL's `*send` formats: fixed
//! width big-endian integers and IEEE floats, `numeric` as base-10000
//! digits, `date` as days and `timestamp` as microseconds since 2000-01-01,
//! `interval` as (microseconds, days, months). The type each column is
//! encoded as is exactly the one `types::pg_type` announced.

use bytes::{BufMut, BytesMut};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Date32Array, Decimal128Array, Float32Array,
    Float64Array, Int16Array, Int32Array, Int64Array,
};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, IntervalDayTime, IntervalDayTimeType, IntervalMonthDayNano,
    IntervalMonthDayNanoType, IntervalUnit, IntervalYearMonthType, Time32MillisecondType,
    Time32SecondType, Time64MicrosecondType, Time64NanosecondType, TimeUnit,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use pgwire::api::results::FieldFormat;
use pgwire::api::Type;
use pgwire::messages::data::DataRow;
use rockstream_types::{codes, RsError};

use crate::types::{array_type, pg_type};

use rockstream_types::pg_text as text;

/// Days from 1970-01-01 (Arrow's epoch) to 2000-01-01 (PostgreSQL's epoch).
pub(crate) const POSTGRES_EPOCH_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
pub(crate) const POSTGRES_EPOCH_MICROS: i64 = POSTGRES_EPOCH_DAYS as i64 * text::MICROS_PER_DAY;
/// `numeric` sign word for negative values.
const NUMERIC_NEGATIVE: u16 = 0x4000;

/// Encodes every row of `batches`; column `i` uses `formats[i]` (text when
/// missing).
pub(crate) fn encode_batches(
    batches: &[RecordBatch],
    formats: &[FieldFormat],
) -> Result<Vec<DataRow>, RsError> {
    let mut rows = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    for batch in batches {
        encode_batch(batch, formats, &mut rows)?;
    }
    Ok(rows)
}

/// Calls `line` with the text form of each row's values (`None`: NULL), in
/// order: what `COPY ... TO` writes.
pub(crate) fn for_each_text_row(
    batches: &[RecordBatch],
    mut line: impl FnMut(&[Option<String>]) -> Result<(), RsError>,
) -> Result<(), RsError> {
    let mut values = Vec::new();
    for batch in batches {
        let columns = batch
            .columns()
            .iter()
            .map(Column::new)
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            values.clear();
            for column in &columns {
                values.push(match column.is_null(row) {
                    true => None,
                    false => Some(column.text(row)?),
                });
            }
            line(&values)?;
        }
    }
    Ok(())
}

fn encode_batch(
    batch: &RecordBatch,
    formats: &[FieldFormat],
    rows: &mut Vec<DataRow>,
) -> Result<(), RsError> {
    let columns = batch
        .columns()
        .iter()
        .map(Column::new)
        .collect::<Result<Vec<_>, _>>()?;
    let field_count = i16::try_from(columns.len())
        .map_err(|_| RsError::internal("a result has more than 32767 columns"))?;
    for row in 0..batch.num_rows() {
        let mut buffer = BytesMut::new();
        for (index, column) in columns.iter().enumerate() {
            let format = formats.get(index).copied().unwrap_or(FieldFormat::Text);
            write_value(column, row, format, &mut buffer)?;
        }
        rows.push(DataRow::new(buffer, field_count));
    }
    Ok(())
}

/// Writes one length-prefixed value (or the NULL marker) into a DataRow body.
fn write_value(
    column: &Column<'_>,
    row: usize,
    format: FieldFormat,
    out: &mut BytesMut,
) -> Result<(), RsError> {
    if column.is_null(row) {
        out.put_i32(-1);
        return Ok(());
    }
    let start = out.len();
    out.put_i32(0);
    match format {
        FieldFormat::Text => out.put_slice(column.text(row)?.as_bytes()),
        FieldFormat::Binary => column.binary(row, out)?,
    }
    let length = i32::try_from(out.len() - start - 4)
        .map_err(|_| RsError::new(&codes::EXECUTION_ERROR, "a value is larger than 2 GiB"))?;
    out[start..start + 4].copy_from_slice(&length.to_be_bytes());
    Ok(())
}

/// Interval values of any Arrow interval unit.
enum Intervals<'a> {
    YearMonth(&'a [i32]),
    DayTime(&'a [IntervalDayTime]),
    MonthDayNano(&'a [IntervalMonthDayNano]),
}

impl Intervals<'_> {
    /// (months, days, microseconds), nanoseconds truncated toward zero.
    fn parts(&self, row: usize) -> (i32, i32, i64) {
        match self {
            Intervals::YearMonth(values) => (values[row], 0, 0),
            Intervals::DayTime(values) => {
                let value = values[row];
                (0, value.days, i64::from(value.milliseconds) * 1_000)
            }
            Intervals::MonthDayNano(values) => {
                let value = values[row];
                (value.months, value.days, value.nanoseconds / 1_000)
            }
        }
    }
}

/// A column downcast to the view its PostgreSQL type needs.
enum Column<'a> {
    Null,
    Boolean(&'a BooleanArray),
    Int16(&'a Int16Array),
    Int32(&'a Int32Array),
    Int64(&'a Int64Array),
    Float32(&'a Float32Array),
    Float64(&'a Float64Array),
    Decimal(&'a Decimal128Array, i8),
    Text(&'a dyn Array, TextKind),
    Date(&'a Date32Array),
    Timestamp {
        array: &'a dyn Array,
        values: &'a [i64],
        unit: TimeUnit,
        with_zone: bool,
    },
    Interval(&'a dyn Array, Intervals<'a>),
    /// Microseconds since midnight.
    Time(&'a dyn Array, Vec<i64>),
    /// An array (Arrow list), as PostgreSQL's array text: `{1,2,NULL}`;
    /// with the column of all lists' elements.
    List(&'a dyn Array, Box<Column<'a>>),
    Display(&'a dyn Array, ArrayFormatter<'a>),
}

/// The three Arrow string layouts.
#[derive(Clone, Copy)]
enum TextKind {
    Utf8,
    LargeUtf8,
    Utf8View,
}

fn mismatch(data_type: &DataType) -> RsError {
    RsError::internal(format!("array does not match its data type {data_type}"))
}

impl<'a> Column<'a> {
    fn new(array: &'a ArrayRef) -> Result<Self, RsError> {
        let array = array.as_ref();
        let data_type = array.data_type();
        let column = match data_type {
            DataType::Null => Some(Column::Null),
            DataType::Boolean => array.as_boolean_opt().map(Column::Boolean),
            DataType::Int16 => array.as_primitive_opt::<Int16Type>().map(Column::Int16),
            DataType::Int32 => array.as_primitive_opt::<Int32Type>().map(Column::Int32),
            DataType::Int64 => array.as_primitive_opt::<Int64Type>().map(Column::Int64),
            DataType::Float32 => array.as_primitive_opt::<Float32Type>().map(Column::Float32),
            DataType::Float64 => array.as_primitive_opt::<Float64Type>().map(Column::Float64),
            DataType::Decimal128(_, scale) => array
                .as_primitive_opt::<Decimal128Type>()
                .map(|values| Column::Decimal(values, *scale)),
            DataType::Utf8 => Some(Column::Text(array, TextKind::Utf8)),
            DataType::LargeUtf8 => Some(Column::Text(array, TextKind::LargeUtf8)),
            DataType::Utf8View => Some(Column::Text(array, TextKind::Utf8View)),
            DataType::Date32 => array.as_primitive_opt::<Date32Type>().map(Column::Date),
            DataType::Timestamp(unit, zone) => {
                timestamp_values(array, *unit).map(|values| Column::Timestamp {
                    array,
                    values,
                    unit: *unit,
                    with_zone: zone.is_some(),
                })
            }
            DataType::Interval(unit) => {
                interval_values(array, *unit).map(|values| Column::Interval(array, values))
            }
            DataType::Time32(unit) | DataType::Time64(unit) => {
                time_micros(array, *unit).map(|micros| Column::Time(array, micros))
            }
            DataType::List(_) => {
                let values = array.as_list::<i32>().values();
                Some(Column::List(array, Box::new(Column::new(values)?)))
            }
            DataType::LargeList(_) => {
                let values = array.as_list::<i64>().values();
                Some(Column::List(array, Box::new(Column::new(values)?)))
            }
            _ => return display_column(array),
        };
        column.ok_or_else(|| mismatch(data_type))
    }

    fn array(&self) -> Option<&dyn Array> {
        match self {
            Column::Null => None,
            Column::Boolean(array) => Some(*array),
            Column::Int16(array) => Some(*array),
            Column::Int32(array) => Some(*array),
            Column::Int64(array) => Some(*array),
            Column::Float32(array) => Some(*array),
            Column::Float64(array) => Some(*array),
            Column::Decimal(array, _) => Some(*array),
            Column::Date(array) => Some(*array),
            Column::Text(array, _)
            | Column::Timestamp { array, .. }
            | Column::Interval(array, _)
            | Column::Time(array, _)
            | Column::List(array, _)
            | Column::Display(array, _) => Some(*array),
        }
    }

    fn is_null(&self, row: usize) -> bool {
        self.array().is_none_or(|array| array.is_null(row))
    }

    /// PostgreSQL's text output of a non-NULL value.
    fn text(&self, row: usize) -> Result<String, RsError> {
        Ok(match self {
            Column::Null => String::new(),
            Column::Boolean(array) => (if array.value(row) { "t" } else { "f" }).to_owned(),
            Column::Int16(array) => array.value(row).to_string(),
            Column::Int32(array) => array.value(row).to_string(),
            Column::Int64(array) => array.value(row).to_string(),
            Column::Float32(array) => text::float4(array.value(row)),
            Column::Float64(array) => text::float8(array.value(row)),
            Column::Decimal(array, scale) => text::decimal(array.value(row), *scale),
            Column::Text(array, kind) => string_value(*array, *kind, row).to_owned(),
            Column::Date(array) => {
                let days = array.value(row);
                text::date(days).ok_or_else(|| out_of_range("date", days))?
            }
            Column::Timestamp { .. } => self.timestamp_text(row)?,
            Column::Interval(_, values) => {
                let (months, days, micros) = values.parts(row);
                text::interval(months, days, micros)
            }
            Column::Time(_, micros) => text::time(micros[row]),
            Column::List(array, elements) => array_text(*array, elements, row)?,
            Column::Display(_, formatter) => {
                formatter.value(row).try_to_string().map_err(|error| {
                    RsError::new(
                        &codes::EXECUTION_ERROR,
                        format!("cannot display value: {error}"),
                    )
                })?
            }
        })
    }

    fn timestamp_text(&self, row: usize) -> Result<String, RsError> {
        let micros = self.timestamp_micros(row)?;
        let rendered = match self {
            Column::Timestamp {
                with_zone: true, ..
            } => text::timestamptz(micros),
            _ => text::timestamp(micros),
        };
        rendered.ok_or_else(|| out_of_range("timestamp", micros))
    }

    fn timestamp_micros(&self, row: usize) -> Result<i64, RsError> {
        let Column::Timestamp { values, unit, .. } = self else {
            return Err(RsError::internal(
                "timestamp_micros on a non-timestamp column",
            ));
        };
        let value = values[row];
        let micros = match unit {
            TimeUnit::Second => value.checked_mul(1_000_000),
            TimeUnit::Millisecond => value.checked_mul(1_000),
            TimeUnit::Microsecond => Some(value),
            TimeUnit::Nanosecond => Some(value.div_euclid(1_000)),
        };
        micros.ok_or_else(|| out_of_range("timestamp", value))
    }

    /// PostgreSQL's binary (`*send`) form of a non-NULL value.
    fn binary(&self, row: usize, out: &mut BytesMut) -> Result<(), RsError> {
        match self {
            Column::Null => {}
            Column::Boolean(array) => out.put_u8(u8::from(array.value(row))),
            Column::Int16(array) => out.put_i16(array.value(row)),
            Column::Int32(array) => out.put_i32(array.value(row)),
            Column::Int64(array) => out.put_i64(array.value(row)),
            Column::Float32(array) => out.put_f32(array.value(row)),
            Column::Float64(array) => out.put_f64(array.value(row)),
            Column::Decimal(array, scale) => numeric_binary(array.value(row), *scale, out),
            Column::Text(array, kind) => out.put_slice(string_value(*array, *kind, row).as_bytes()),
            Column::Date(array) => {
                let days = array.value(row);
                let shifted = days
                    .checked_sub(POSTGRES_EPOCH_DAYS)
                    .ok_or_else(|| out_of_range("date", days))?;
                out.put_i32(shifted);
            }
            Column::Timestamp { .. } => {
                let micros = self.timestamp_micros(row)?;
                let shifted = micros
                    .checked_sub(POSTGRES_EPOCH_MICROS)
                    .ok_or_else(|| out_of_range("timestamp", micros))?;
                out.put_i64(shifted);
            }
            Column::Interval(_, values) => {
                let (months, days, micros) = values.parts(row);
                out.put_i64(micros);
                out.put_i32(days);
                out.put_i32(months);
            }
            Column::Time(_, micros) => out.put_i64(micros[row]),
            Column::List(array, elements) => match element_type(*array) {
                Some(element) => array_binary(*array, elements, &element, row, out)?,
                // An array of arrays is announced as text (types.rs).
                None => out.put_slice(self.text(row)?.as_bytes()),
            },
            // Announced as text (types.rs): text's binary form is its bytes.
            Column::Display(..) => out.put_slice(self.text(row)?.as_bytes()),
        }
        Ok(())
    }
}

fn display_column(array: &dyn Array) -> Result<Column<'_>, RsError> {
    let options = FormatOptions::new();
    let formatter = ArrayFormatter::try_new(array, &options).map_err(|error| {
        RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            format!("cannot send values of type {}: {error}", array.data_type()),
        )
    })?;
    Ok(Column::Display(array, formatter))
}

fn timestamp_values(array: &dyn Array, unit: TimeUnit) -> Option<&[i64]> {
    let values = match unit {
        TimeUnit::Second => array.as_primitive_opt::<TimestampSecondType>()?.values(),
        TimeUnit::Millisecond => array
            .as_primitive_opt::<TimestampMillisecondType>()?
            .values(),
        TimeUnit::Microsecond => array
            .as_primitive_opt::<TimestampMicrosecondType>()?
            .values(),
        TimeUnit::Nanosecond => array
            .as_primitive_opt::<TimestampNanosecondType>()?
            .values(),
    };
    Some(&values[..])
}

/// The rows of the elements of list value `row`.
fn list_elements(array: &dyn Array, row: usize) -> Result<std::ops::Range<usize>, RsError> {
    Ok(match array.data_type() {
        DataType::List(_) => {
            let offsets = array.as_list::<i32>().value_offsets();
            offsets[row] as usize..offsets[row + 1] as usize
        }
        DataType::LargeList(_) => {
            let offsets = array.as_list::<i64>().value_offsets();
            offsets[row] as usize..offsets[row + 1] as usize
        }
        other => return Err(mismatch(other)),
    })
}

/// The PostgreSQL type of a list's elements, when the list goes out as a
/// one-dimensional array of them (see [`crate::types::pg_type`]).
fn element_type(array: &dyn Array) -> Option<Type> {
    let (DataType::List(element) | DataType::LargeList(element)) = array.data_type() else {
        return None;
    };
    let element = pg_type(element.data_type());
    array_type(&element).map(|_| element)
}

/// PostgreSQL's `array_send` of one list value: dimensions (none when
/// empty, else one, from subscript 1), whether any element is NULL, the
/// element type, then each element's length (-1: NULL) and binary form.
fn array_binary(
    array: &dyn Array,
    column: &Column<'_>,
    element: &Type,
    row: usize,
    out: &mut BytesMut,
) -> Result<(), RsError> {
    let elements = list_elements(array, row)?;
    let count = i32::try_from(elements.len())
        .map_err(|_| RsError::internal("an array of more than 2^31 elements"))?;
    let has_null = elements.clone().any(|element| column.is_null(element));
    out.put_i32(i32::from(count > 0));
    out.put_i32(i32::from(has_null));
    out.put_u32(element.oid());
    if count > 0 {
        out.put_i32(count);
        out.put_i32(1);
    }
    for element in elements {
        if column.is_null(element) {
            out.put_i32(-1);
            continue;
        }
        let start = out.len();
        out.put_i32(0);
        column.binary(element, out)?;
        let length = i32::try_from(out.len() - start - 4)
            .map_err(|_| RsError::internal("an array element over 2 GiB"))?;
        out[start..start + 4].copy_from_slice(&length.to_be_bytes());
    }
    Ok(())
}

/// PostgreSQL's `array_out` of one list value: elements separated by
/// commas, NULL as `NULL`, an element quoted (with `"` and `\` escaped)
/// when it is empty, is `NULL`, or holds a brace, comma, quote, backslash
/// or white space; nested lists nest braces.
fn array_text(array: &dyn Array, column: &Column<'_>, row: usize) -> Result<String, RsError> {
    let elements = list_elements(array, row)?;
    if crate::types::is_int2vector(array.data_type()) {
        // `int2vectorout`: the numbers, space-separated (never NULL).
        let mut numbers = Vec::with_capacity(elements.len());
        for element in elements {
            numbers.push(column.text(element)?);
        }
        return Ok(numbers.join(" "));
    }
    let mut out = String::from("{");
    for (position, element) in elements.enumerate() {
        if position > 0 {
            out.push(',');
        }
        if column.is_null(element) {
            out.push_str("NULL");
            continue;
        }
        let text = column.text(element)?;
        let quote = !matches!(column, Column::List(..))
            && (text.is_empty()
                || text.eq_ignore_ascii_case("NULL")
                || text
                    .chars()
                    .any(|c| matches!(c, '{' | '}' | ',' | '"' | '\\') || c.is_ascii_whitespace()));
        if quote {
            out.push('"');
            for c in text.chars() {
                if matches!(c, '"' | '\\') {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
        } else {
            out.push_str(&text);
        }
    }
    out.push('}');
    Ok(out)
}

fn time_micros(array: &dyn Array, unit: TimeUnit) -> Option<Vec<i64>> {
    Some(match unit {
        TimeUnit::Second => (array
            .as_primitive_opt::<Time32SecondType>()?
            .values()
            .iter())
        .map(|seconds| i64::from(*seconds) * 1_000_000)
        .collect(),
        TimeUnit::Millisecond => (array.as_primitive_opt::<Time32MillisecondType>()?.values())
            .iter()
            .map(|millis| i64::from(*millis) * 1_000)
            .collect(),
        TimeUnit::Microsecond => array
            .as_primitive_opt::<Time64MicrosecondType>()?
            .values()
            .to_vec(),
        TimeUnit::Nanosecond => (array.as_primitive_opt::<Time64NanosecondType>()?.values())
            .iter()
            .map(|nanos| nanos.div_euclid(1_000))
            .collect(),
    })
}

fn interval_values(array: &dyn Array, unit: IntervalUnit) -> Option<Intervals<'_>> {
    Some(match unit {
        IntervalUnit::YearMonth => {
            Intervals::YearMonth(&array.as_primitive_opt::<IntervalYearMonthType>()?.values()[..])
        }
        IntervalUnit::DayTime => {
            Intervals::DayTime(&array.as_primitive_opt::<IntervalDayTimeType>()?.values()[..])
        }
        IntervalUnit::MonthDayNano => Intervals::MonthDayNano(
            &array
                .as_primitive_opt::<IntervalMonthDayNanoType>()?
                .values()[..],
        ),
    })
}

fn string_value(array: &dyn Array, kind: TextKind, row: usize) -> &str {
    let value = match kind {
        TextKind::Utf8 => array
            .as_string_opt::<i32>()
            .map(|strings| strings.value(row)),
        TextKind::LargeUtf8 => array
            .as_string_opt::<i64>()
            .map(|strings| strings.value(row)),
        TextKind::Utf8View => array.as_string_view_opt().map(|strings| strings.value(row)),
    };
    value.expect("TextKind was chosen from this array's data type")
}

fn out_of_range(kind: &str, value: impl std::fmt::Display) -> RsError {
    RsError::new(
        &codes::EXECUTION_ERROR,
        format!("{kind} value {value} is out of the range PostgreSQL can represent"),
    )
}

/// `numeric_send`: digit count, weight (base-10000 exponent of the first
/// digit), sign, display scale, then the base-10000 digits without leading or
/// trailing zero digits.
pub(crate) fn numeric_binary(unscaled: i128, scale: i8, out: &mut BytesMut) {
    let rendered = text::decimal(unscaled, scale);
    let negative = rendered.starts_with('-');
    let unsigned = rendered.trim_start_matches('-');
    let (integer, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let integer = integer.trim_start_matches('0');
    let integer_padding = "0".repeat((4 - integer.len() % 4) % 4);
    let fraction_padding = "0".repeat((4 - fraction.len() % 4) % 4);
    let integer_digits = base_10000_digits(&format!("{integer_padding}{integer}"));
    let mut weight = integer_digits.len() as i16 - 1;
    let mut digits = integer_digits;
    digits.extend(base_10000_digits(&format!("{fraction}{fraction_padding}")));
    let leading_zeros = digits.iter().take_while(|digit| **digit == 0).count();
    digits.drain(..leading_zeros);
    weight -= leading_zeros as i16;
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        weight = 0;
    }
    let sign = if negative && !digits.is_empty() {
        NUMERIC_NEGATIVE
    } else {
        0
    };
    out.put_i16(digits.len() as i16);
    out.put_i16(weight);
    out.put_u16(sign);
    out.put_u16(scale.max(0) as u16);
    for digit in digits {
        out.put_i16(digit);
    }
}

/// Groups of four ASCII decimal digits → their values.
fn base_10000_digits(decimal_digits: &str) -> Vec<i16> {
    decimal_digits
        .as_bytes()
        .chunks(4)
        .map(|group| {
            group
                .iter()
                .fold(0i16, |value, digit| value * 10 + i16::from(digit - b'0'))
        })
        .collect()
}

#[cfg(test)]
#[path = "encode_tests.rs"]
mod tests;
