//! Conversions between rows of [`Datum`]s and Arrow arrays.
//!
//! Rows are the currency between operators and in state; Arrow batches are
//! what DataFusion's physical expressions evaluate. Each SQL type has one
//! canonical Arrow type ([`arrow_type`]); an array of any other Arrow type is
//! cast to the canonical one before its values are read, so expressions may
//! return e.g. nanosecond timestamps or `Utf8View` strings.

use std::sync::Arc;

use datafusion::arrow::array::new_null_array;
use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, BooleanBuilder, Date32Array, Date32Builder, Decimal128Array,
    Decimal128Builder, Float32Array, Float32Builder, Float64Array, Float64Builder, Int16Array,
    Int16Builder, Int32Array, Int32Builder, Int64Array, Int64Builder, IntervalMonthDayNanoArray,
    IntervalMonthDayNanoBuilder, ListArray, StringArray, StringBuilder, TimestampMicrosecondArray,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, IntervalMonthDayNano};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
pub use rockstream_plan::arrow_types::{
    arrow_error, arrow_type, default_numeric, duration_to_interval, sql_type_of,
};
use rockstream_types::{Datum, Interval, Row, RsError, RsResult, SqlType};

/// Builds one Arrow array of canonical type from column `column` of `rows`.
pub fn column_to_array(rows: &[&Row], column: usize, sql_type: SqlType) -> RsResult<ArrayRef> {
    macro_rules! build {
        ($builder:expr, $variant:ident) => {{
            let mut builder = $builder;
            for row in rows {
                match &row[column] {
                    Datum::$variant(value) => builder.append_value(value.clone()),
                    Datum::Null => builder.append_null(),
                    other => return Err(type_mismatch(other, sql_type)),
                }
            }
            Arc::new(builder.finish()) as ArrayRef
        }};
    }
    let array = match sql_type {
        SqlType::Bool => build!(BooleanBuilder::with_capacity(rows.len()), Bool),
        SqlType::Int16 => build!(Int16Builder::with_capacity(rows.len()), Int16),
        SqlType::Int32 => build!(Int32Builder::with_capacity(rows.len()), Int32),
        SqlType::Int64 => build!(Int64Builder::with_capacity(rows.len()), Int64),
        SqlType::Float32 => build!(Float32Builder::with_capacity(rows.len()), Float32),
        SqlType::Float64 => build!(Float64Builder::with_capacity(rows.len()), Float64),
        SqlType::Numeric { precision, scale } => build!(
            Decimal128Builder::with_capacity(rows.len())
                .with_data_type(DataType::Decimal128(precision, scale)),
            Numeric
        ),
        SqlType::Text => {
            let mut builder = StringBuilder::with_capacity(rows.len(), rows.len() * 8);
            for row in rows {
                match &row[column] {
                    Datum::Text(value) => builder.append_value(value),
                    Datum::Null => builder.append_null(),
                    other => return Err(type_mismatch(other, sql_type)),
                }
            }
            Arc::new(builder.finish())
        }
        SqlType::Date => build!(Date32Builder::with_capacity(rows.len()), Date),
        SqlType::Timestamp => build!(
            TimestampMicrosecondBuilder::with_capacity(rows.len()),
            Timestamp
        ),
        SqlType::TimestampTz => build!(
            TimestampMicrosecondBuilder::with_capacity(rows.len()).with_timezone("+00:00"),
            TimestampTz
        ),
        SqlType::Interval => {
            let mut builder = IntervalMonthDayNanoBuilder::with_capacity(rows.len());
            for row in rows {
                match &row[column] {
                    Datum::Interval(value) => builder.append_value(IntervalMonthDayNano::new(
                        value.months,
                        value.days,
                        value.nanoseconds,
                    )),
                    Datum::Null => builder.append_null(),
                    other => return Err(type_mismatch(other, sql_type)),
                }
            }
            Arc::new(builder.finish())
        }
        SqlType::Array(element) => {
            // The elements of every row, one after the other, as one column
            // of the element type; each row's list is a range of them.
            let mut offsets = Vec::with_capacity(rows.len() + 1);
            offsets.push(0i32);
            let mut valid = Vec::with_capacity(rows.len());
            let mut elements: Vec<Row> = Vec::new();
            for row in rows {
                match &row[column] {
                    Datum::Array(values) => {
                        elements.extend(values.iter().map(|value| vec![value.clone()]));
                        valid.push(true);
                    }
                    Datum::Null => valid.push(false),
                    other => return Err(type_mismatch(other, sql_type)),
                }
                let end = i32::try_from(elements.len())
                    .map_err(|_| RsError::internal("more than 2^31 array elements in one batch"))?;
                offsets.push(end);
            }
            let element_rows: Vec<&Row> = elements.iter().collect();
            let values = column_to_array(&element_rows, 0, *element)?;
            let field = Arc::new(Field::new_list_field(arrow_type(*element), true));
            Arc::new(
                ListArray::try_new(
                    field,
                    OffsetBuffer::new(offsets.into()),
                    values,
                    Some(NullBuffer::from(valid)),
                )
                .map_err(arrow_error)?,
            )
        }
    };
    Ok(array)
}

fn type_mismatch(datum: &Datum, sql_type: SqlType) -> RsError {
    RsError::internal(format!(
        "value {datum:?} in a column of type {}",
        sql_type.pg_name()
    ))
}

/// Builds a record batch whose columns have exactly the Arrow types of
/// `target` (casting from canonical types where they differ). Columns that
/// `wanted_columns` marks false are left all NULL, unread; columns past its
/// end are wanted (`&[]` converts every column).
pub fn rows_to_batch(
    rows: &[&Row],
    types: &[SqlType],
    target: &datafusion::arrow::datatypes::SchemaRef,
    wanted_columns: &[bool],
) -> RsResult<RecordBatch> {
    let mut columns = Vec::with_capacity(types.len());
    for (index, sql_type) in types.iter().enumerate() {
        let wanted = target.field(index).data_type();
        if !wanted_columns.get(index).copied().unwrap_or(true) {
            columns.push(new_null_array(wanted, rows.len()));
            continue;
        }
        let array = column_to_array(rows, index, *sql_type)?;
        let array = if array.data_type() == wanted {
            array
        } else {
            cast(&array, wanted).map_err(arrow_error)?
        };
        columns.push(array);
    }
    let options = RecordBatchOptions::new().with_row_count(Some(rows.len()));
    let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(
        target
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), f.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    RecordBatch::try_new_with_options(schema, columns, &options).map_err(arrow_error)
}

/// Reads every value of `array` (cast to the canonical type of `sql_type`).
pub fn array_to_datums(array: &ArrayRef, sql_type: SqlType) -> RsResult<Vec<Datum>> {
    let canonical = arrow_type(sql_type);
    let array = match array.data_type() {
        DataType::Duration(_) => duration_to_interval(array)?,
        // A list of durations: its values as intervals, as above (a cast
        // would keep every part in nanoseconds, not PostgreSQL's days).
        DataType::List(element) if matches!(element.data_type(), DataType::Duration(_)) => {
            let list = array
                .as_any()
                .downcast_ref::<ListArray>()
                .ok_or_else(|| downcast_error(array.data_type()))?;
            let values = duration_to_interval(list.values())?;
            let field = Arc::new(Field::new_list_field(values.data_type().clone(), true));
            Arc::new(
                ListArray::try_new(field, list.offsets().clone(), values, list.nulls().cloned())
                    .map_err(arrow_error)?,
            )
        }
        _ => array.clone(),
    };
    let array = &array;
    let array = if array.data_type() == &canonical {
        array.clone()
    } else {
        cast(array, &canonical).map_err(arrow_error)?
    };
    let length = array.len();
    let mut out = Vec::with_capacity(length);
    macro_rules! read {
        ($array_type:ty, $variant:ident) => {{
            let typed = array
                .as_any()
                .downcast_ref::<$array_type>()
                .ok_or_else(|| downcast_error(&canonical))?;
            for index in 0..length {
                out.push(if typed.is_null(index) {
                    Datum::Null
                } else {
                    Datum::$variant(typed.value(index).into())
                });
            }
        }};
    }
    match sql_type {
        SqlType::Bool => read!(BooleanArray, Bool),
        SqlType::Int16 => read!(Int16Array, Int16),
        SqlType::Int32 => read!(Int32Array, Int32),
        SqlType::Int64 => read!(Int64Array, Int64),
        SqlType::Float32 => read!(Float32Array, Float32),
        SqlType::Float64 => read!(Float64Array, Float64),
        SqlType::Numeric { .. } => read!(Decimal128Array, Numeric),
        SqlType::Text => read!(StringArray, Text),
        SqlType::Date => read!(Date32Array, Date),
        SqlType::Timestamp => read!(TimestampMicrosecondArray, Timestamp),
        SqlType::TimestampTz => read!(TimestampMicrosecondArray, TimestampTz),
        SqlType::Interval => {
            let typed = array
                .as_any()
                .downcast_ref::<IntervalMonthDayNanoArray>()
                .ok_or_else(|| downcast_error(&canonical))?;
            for index in 0..length {
                out.push(if typed.is_null(index) {
                    Datum::Null
                } else {
                    let value = typed.value(index);
                    Datum::Interval(Interval {
                        months: value.months,
                        days: value.days,
                        nanoseconds: value.nanoseconds,
                    })
                });
            }
        }
        SqlType::Array(element) => {
            let typed = array
                .as_any()
                .downcast_ref::<ListArray>()
                .ok_or_else(|| downcast_error(&canonical))?;
            let offsets = typed.value_offsets();
            let first = offsets.first().copied().unwrap_or(0) as usize;
            let last = offsets.last().copied().unwrap_or(0) as usize;
            let values = typed.values().slice(first, last - first);
            let mut elements = array_to_datums(&values, *element)?.into_iter();
            for index in 0..length {
                let count = (offsets[index + 1] - offsets[index]) as usize;
                let list: Vec<Datum> = elements.by_ref().take(count).collect();
                out.push(if typed.is_null(index) {
                    Datum::Null
                } else {
                    Datum::Array(list)
                });
            }
        }
    }
    Ok(out)
}

/// Converts a whole batch to rows with the given canonical types.
pub fn batch_to_rows(batch: &RecordBatch, types: &[SqlType]) -> RsResult<Vec<Row>> {
    let mut rows: Vec<Row> = (0..batch.num_rows())
        .map(|_| Vec::with_capacity(types.len()))
        .collect();
    for (index, sql_type) in types.iter().enumerate() {
        let datums = array_to_datums(batch.column(index), *sql_type)?;
        for (row, datum) in rows.iter_mut().zip(datums) {
            row.push(datum);
        }
    }
    Ok(rows)
}

fn downcast_error(data_type: &DataType) -> RsError {
    RsError::internal(format!("array did not downcast to {data_type}"))
}

#[cfg(test)]
mod tests {
    //! Goal: rows survive a trip through Arrow for every SQL type.
    use super::*;

    #[test]
    fn every_type_round_trips_through_arrow() {
        let types = vec![
            SqlType::Bool,
            SqlType::Int16,
            SqlType::Int32,
            SqlType::Int64,
            SqlType::Float32,
            SqlType::Float64,
            SqlType::Numeric {
                precision: 12,
                scale: 2,
            },
            SqlType::Text,
            SqlType::Date,
            SqlType::Timestamp,
            SqlType::TimestampTz,
            SqlType::Interval,
            SqlType::array_of(SqlType::Text).expect("an element type"),
            SqlType::array_of(SqlType::Int32).expect("an element type"),
        ];
        let row: Row = vec![
            Datum::Bool(true),
            Datum::Int16(-3),
            Datum::Int32(7),
            Datum::Int64(1 << 40),
            Datum::Float32(1.5),
            Datum::Float64(-2.25),
            Datum::Numeric(12345),
            Datum::Text("héllo".into()),
            Datum::Date(19000),
            Datum::Timestamp(1_700_000_000_000_000),
            Datum::TimestampTz(5),
            Datum::Interval(Interval {
                months: 1,
                days: 2,
                nanoseconds: 3,
            }),
            Datum::Array(vec![Datum::Text("a".into()), Datum::Null]),
            Datum::Array(Vec::new()),
        ];
        let nulls: Row = vec![Datum::Null; types.len()];
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(
            types
                .iter()
                .enumerate()
                .map(|(i, t)| Field::new(format!("c{i}"), arrow_type(*t), true))
                .collect::<Vec<_>>(),
        ));
        let batch = rows_to_batch(&[&row, &nulls], &types, &schema, &[]).expect("builds");
        assert_eq!(
            batch_to_rows(&batch, &types).expect("reads"),
            vec![row, nulls]
        );
    }

    #[test]
    fn durations_in_lists_become_intervals_of_days_and_time() {
        // Goal: `ARRAY[b - a]` keeps PostgreSQL's parts (1 day 02:00:00),
        // as the scalar `b - a` does, not 26 hours.
        use datafusion::arrow::array::{DurationMicrosecondArray, ListArray};
        use datafusion::arrow::buffer::OffsetBuffer;
        let hours = 3_600_000_000i64;
        let values = Arc::new(DurationMicrosecondArray::from(vec![Some(26 * hours), None]));
        let field = Arc::new(Field::new_list_field(values.data_type().clone(), true));
        let list: ArrayRef = Arc::new(
            ListArray::try_new(field, OffsetBuffer::from_lengths([2]), values, None)
                .expect("a list"),
        );
        let interval = SqlType::array_of(SqlType::Interval).expect("an element type");
        assert_eq!(
            array_to_datums(&list, interval).expect("reads"),
            vec![Datum::Array(vec![
                Datum::Interval(Interval {
                    months: 0,
                    days: 1,
                    nanoseconds: 2 * hours * 1000,
                }),
                Datum::Null,
            ])]
        );
    }
}
