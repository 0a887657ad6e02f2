//! Goal: every Arrow type encodes to the bytes PostgreSQL sends, in text
//! (literal psql output) and binary (`*send` layouts) format.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
use std::sync::Arc;

use datafusion::arrow::array::{
    BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int16Array, Int32Array,
    Int64Array, IntervalMonthDayNanoArray, LargeStringArray, NullArray, StringArray,
    StringViewArray, TimestampMicrosecondArray, TimestampSecondArray, UInt8Array,
};
use datafusion::arrow::datatypes::IntervalMonthDayNano;

use super::*;

/// Splits a DataRow body into its values (None = NULL).
fn values(row: &DataRow) -> Vec<Option<Vec<u8>>> {
    let mut data = &row.data[..];
    let mut values = Vec::new();
    for _ in 0..row.field_count {
        let length = i32::from_be_bytes(data[..4].try_into().unwrap());
        data = &data[4..];
        if length < 0 {
            values.push(None);
        } else {
            values.push(Some(data[..length as usize].to_vec()));
            data = &data[length as usize..];
        }
    }
    assert!(data.is_empty(), "trailing bytes in DataRow");
    values
}

/// Encodes a one-column batch and returns each row's single value.
fn encode_column(array: ArrayRef, format: FieldFormat) -> Vec<Option<Vec<u8>>> {
    let batch = RecordBatch::try_from_iter([("c", array)]).unwrap();
    encode_batches(&[batch], &[format])
        .unwrap()
        .iter()
        .map(|row| values(row).remove(0))
        .collect()
}

fn text_of(array: ArrayRef) -> Vec<Option<String>> {
    encode_column(array, FieldFormat::Text)
        .into_iter()
        .map(|value| value.map(|bytes| String::from_utf8(bytes).unwrap()))
        .collect()
}

fn some(values: &[&str]) -> Vec<Option<String>> {
    values.iter().map(|value| Some(value.to_string())).collect()
}

#[test]
fn text_format_matches_psql_output() {
    assert_eq!(
        text_of(Arc::new(BooleanArray::from(vec![
            Some(true),
            Some(false),
            None
        ]))),
        vec![Some("t".into()), Some("f".into()), None]
    );
    assert_eq!(
        text_of(Arc::new(Int16Array::from(vec![-32768]))),
        some(&["-32768"])
    );
    assert_eq!(text_of(Arc::new(Int32Array::from(vec![42]))), some(&["42"]));
    assert_eq!(
        text_of(Arc::new(Int64Array::from(vec![i64::MAX]))),
        some(&["9223372036854775807"])
    );
    assert_eq!(
        text_of(Arc::new(Float32Array::from(vec![1e6]))),
        some(&["1e+06"])
    );
    assert_eq!(
        text_of(Arc::new(Float64Array::from(vec![0.1, 1e20]))),
        some(&["0.1", "1e+20"])
    );
    let decimals = Decimal128Array::from(vec![1250, -5])
        .with_precision_and_scale(10, 2)
        .unwrap();
    assert_eq!(text_of(Arc::new(decimals)), some(&["12.50", "-0.05"]));
    assert_eq!(
        text_of(Arc::new(StringArray::from(vec!["héllo"]))),
        some(&["héllo"])
    );
    assert_eq!(
        text_of(Arc::new(LargeStringArray::from(vec!["a"]))),
        some(&["a"])
    );
    assert_eq!(
        text_of(Arc::new(StringViewArray::from(vec!["view"]))),
        some(&["view"])
    );
    assert_eq!(
        text_of(Arc::new(Date32Array::from(vec![19_753]))),
        some(&["2024-01-31"])
    );
    assert_eq!(text_of(Arc::new(NullArray::new(2))), vec![None, None]);
    assert_eq!(
        text_of(Arc::new(UInt8Array::from(vec![200]))),
        some(&["200"])
    );
}

#[test]
fn timestamps_and_intervals_in_text() {
    let micros = 1_706_702_400_500_000; // 2024-01-31 12:00:00.5 UTC
    assert_eq!(
        text_of(Arc::new(TimestampMicrosecondArray::from(vec![micros]))),
        some(&["2024-01-31 12:00:00.5"])
    );
    let zoned = TimestampMicrosecondArray::from(vec![micros]).with_timezone("UTC");
    assert_eq!(
        text_of(Arc::new(zoned)),
        some(&["2024-01-31 12:00:00.5+00"])
    );
    assert_eq!(
        text_of(Arc::new(TimestampSecondArray::from(vec![0]))),
        some(&["1970-01-01 00:00:00"])
    );
    let interval = IntervalMonthDayNano::new(14, 3, 14_706_500_000_000);
    assert_eq!(
        text_of(Arc::new(IntervalMonthDayNanoArray::from(vec![interval]))),
        some(&["1 year 2 mons 3 days 04:05:06.5"])
    );
}

#[test]
fn binary_format_matches_postgres_send_functions() {
    let binary = |array: ArrayRef| encode_column(array, FieldFormat::Binary).remove(0).unwrap();
    assert_eq!(binary(Arc::new(BooleanArray::from(vec![true]))), [1]);
    assert_eq!(binary(Arc::new(Int16Array::from(vec![-2]))), [0xff, 0xfe]);
    assert_eq!(binary(Arc::new(Int32Array::from(vec![258]))), [0, 0, 1, 2]);
    assert_eq!(
        binary(Arc::new(Int64Array::from(vec![1]))),
        [0, 0, 0, 0, 0, 0, 0, 1]
    );
    assert_eq!(
        binary(Arc::new(Float32Array::from(vec![1.5]))),
        1.5f32.to_be_bytes()
    );
    assert_eq!(
        binary(Arc::new(Float64Array::from(vec![-0.25]))),
        (-0.25f64).to_be_bytes()
    );
    assert_eq!(binary(Arc::new(StringArray::from(vec!["ab"]))), *b"ab");
    // 2000-01-02 is day 1 of PostgreSQL's epoch.
    assert_eq!(
        binary(Arc::new(Date32Array::from(vec![10_958]))),
        [0, 0, 0, 1]
    );
    let micros = POSTGRES_EPOCH_MICROS + 1;
    assert_eq!(
        binary(Arc::new(TimestampMicrosecondArray::from(vec![micros]))),
        1i64.to_be_bytes()
    );
    let interval = IntervalMonthDayNano::new(2, 3, 4_000);
    let mut expected = 4i64.to_be_bytes().to_vec();
    expected.extend(3i32.to_be_bytes());
    expected.extend(2i32.to_be_bytes());
    assert_eq!(
        binary(Arc::new(IntervalMonthDayNanoArray::from(vec![interval]))),
        expected
    );
    assert_eq!(binary(Arc::new(UInt8Array::from(vec![7]))), *b"7");
}

/// `numeric_send` output: ndigits, weight, sign, dscale, digits (all i16/u16).
fn numeric_words(unscaled: i128, scale: i8) -> Vec<i32> {
    let mut out = BytesMut::new();
    numeric_binary(unscaled, scale, &mut out);
    out.chunks(2)
        .map(|word| i32::from(u16::from_be_bytes([word[0], word[1]])))
        .collect()
}

#[test]
fn numeric_binary_matches_numeric_send() {
    // SELECT numeric_send(123.45::numeric(10,2)) = \x0002 0000 0000 0002 007b 1194
    assert_eq!(numeric_words(12345, 2), [2, 0, 0, 2, 123, 4500]);
    // 12345.678 → digits 1, 2345, 6780; weight 1
    assert_eq!(numeric_words(12_345_678, 3), [3, 1, 0, 3, 1, 2345, 6780]);
    // 0.0001 → one digit 1 at weight -1
    assert_eq!(numeric_words(1, 4), [1, 0xffff, 0, 4, 1]);
    // 0.00001 → digit 1000 at weight -2
    assert_eq!(numeric_words(1, 5), [1, 0xfffe, 0, 5, 1000]);
    // 10000 → one digit 1 at weight 1 (trailing zero digit stripped)
    assert_eq!(numeric_words(10_000, 0), [1, 1, 0, 0, 1]);
    // -0.50 → negative sign word
    assert_eq!(numeric_words(-50, 2), [1, 0xffff, 0x4000, 2, 5000]);
    // 0.00 → no digits, positive, dscale kept
    assert_eq!(numeric_words(0, 2), [0, 0, 0, 2]);
    // 1200 with scale -2
    assert_eq!(numeric_words(12, -2), [1, 0, 0, 0, 1200]);
}

#[test]
fn nulls_are_length_minus_one_in_both_formats() {
    let array: ArrayRef = Arc::new(Int32Array::from(vec![None, Some(1)]));
    for format in [FieldFormat::Text, FieldFormat::Binary] {
        let encoded = encode_column(array.clone(), format);
        assert_eq!(encoded[0], None);
        assert!(encoded[1].is_some());
    }
}

#[test]
fn multi_batch_multi_column_rows_keep_order() {
    let first = RecordBatch::try_from_iter([
        ("a", Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef),
        ("b", Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef),
    ])
    .unwrap();
    let second = first.slice(1, 1);
    let rows = encode_batches(&[first, second], &[FieldFormat::Binary]).unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(
        values(&rows[2]),
        vec![Some(vec![0, 0, 0, 2]), Some(b"y".to_vec())]
    );
}

#[test]
fn lists_go_out_as_postgresql_arrays() {
    use datafusion::arrow::array::{Int32Builder, ListBuilder};
    let mut lists = ListBuilder::new(Int32Builder::new());
    lists.append_value([Some(1), None, Some(3)]);
    lists.append_value([]);
    let array: ArrayRef = Arc::new(lists.finish());
    assert_eq!(
        crate::types::pg_type(array.data_type()),
        pgwire::api::Type::INT4_ARRAY
    );
    assert_eq!(text_of(array.clone()), some(&["{1,NULL,3}", "{}"]));
    let binary = encode_column(array, FieldFormat::Binary);
    // array_send: one dimension of three from subscript 1, a NULL, int4
    // elements; the empty array has no dimensions.
    let mut expected = Vec::new();
    for word in [1_i32, 1, 23, 3, 1, 4, 1, -1, 4, 3] {
        expected.extend_from_slice(&word.to_be_bytes());
    }
    assert_eq!(binary[0].as_deref(), Some(expected.as_slice()));
    let mut empty = Vec::new();
    for word in [0_i32, 0, 23] {
        empty.extend_from_slice(&word.to_be_bytes());
    }
    assert_eq!(binary[1].as_deref(), Some(empty.as_slice()));
}

#[test]
fn int2vectors_go_out_space_separated() {
    use datafusion::arrow::array::{Int16Builder, ListBuilder};
    use datafusion::arrow::datatypes::{DataType, Field};
    let element = Field::new("item", DataType::Int16, true).with_metadata(
        [(
            rockstream_types::pg_array::ELEMENT_INT2VECTOR.to_string(),
            String::new(),
        )]
        .into(),
    );
    let mut lists = ListBuilder::new(Int16Builder::new()).with_field(Arc::new(element));
    lists.append_value([Some(3), Some(1)]);
    lists.append_value([]);
    let array: ArrayRef = Arc::new(lists.finish());
    assert_eq!(
        crate::types::pg_type(array.data_type()),
        pgwire::api::Type::INT2_VECTOR
    );
    assert_eq!(text_of(array), some(&["3 1", ""]));
}
