//! Order-preserving, self-describing encoding of datums and rows.
//!
//! Every datum starts with a tag byte naming its type (`NULL` has the smallest
//! tag, so NULLs sort first within a column). The payload is chosen so that
//! byte-wise comparison of two encodings of the same type equals SQL ordering:
//!
//! - integers, dates, timestamps, numeric mantissas: big-endian with the sign
//!   bit flipped;
//! - floats: IEEE-754 bits with the sign bit flipped for positives and all bits
//!   flipped for negatives (`-0.0` is encoded as `0.0`, every NaN as one NaN
//!   that sorts above `+inf`, as in PostgreSQL);
//! - text: bytes with `0x00` escaped as `0x00 0xFF`, terminated by `0x00 0x00`,
//!   so a string sorts before every longer string it prefixes;
//! - interval: PostgreSQL's normalised length first (a month is 30 days), then
//!   the parts, so equal-length intervals still round-trip;
//! - array: each element as `0x01` and its encoding, or `0x02` for a NULL
//!   element, then `0x00`: element by element, NULLs after every value and
//!   an array before its extensions, as PostgreSQL orders arrays. An
//!   element is never itself an array.
//!
//! A row is the concatenation of its datums; since each encoding is
//! self-delimiting, rows compare column by column. The same bytes serve as
//! arrangement keys and as stored values.

use std::cmp::Ordering;

use crate::datum::{Datum, Interval, Row};
use crate::error::{RsError, RsResult};

const TAG_NULL: u8 = 0x00;
const TAG_BOOL: u8 = 0x10;
const TAG_INT16: u8 = 0x11;
const TAG_INT32: u8 = 0x12;
const TAG_INT64: u8 = 0x13;
const TAG_FLOAT32: u8 = 0x14;
const TAG_FLOAT64: u8 = 0x15;
const TAG_NUMERIC: u8 = 0x16;
const TAG_TEXT: u8 = 0x17;
const TAG_DATE: u8 = 0x18;
const TAG_TIMESTAMP: u8 = 0x19;
const TAG_TIMESTAMPTZ: u8 = 0x1A;
const TAG_INTERVAL: u8 = 0x1B;
const TAG_ARRAY: u8 = 0x1C;

/// Within an array: the end, a value follows, a NULL element.
const ARRAY_END: u8 = 0x00;
const ARRAY_VALUE: u8 = 0x01;
const ARRAY_NULL: u8 = 0x02;

/// Appends the encoding of `datum` to `out`.
pub fn encode_datum(datum: &Datum, out: &mut Vec<u8>) {
    match datum {
        Datum::Null => out.push(TAG_NULL),
        Datum::Bool(value) => out.extend_from_slice(&[TAG_BOOL, *value as u8]),
        Datum::Int16(value) => {
            out.push(TAG_INT16);
            out.extend_from_slice(&((*value as u16) ^ 0x8000).to_be_bytes());
        }
        Datum::Int32(value) => push_i32(out, TAG_INT32, *value),
        Datum::Int64(value) => push_i64(out, TAG_INT64, *value),
        Datum::Float32(value) => {
            out.push(TAG_FLOAT32);
            out.extend_from_slice(&ordered_f32_bits(*value).to_be_bytes());
        }
        Datum::Float64(value) => {
            out.push(TAG_FLOAT64);
            out.extend_from_slice(&ordered_f64_bits(*value).to_be_bytes());
        }
        Datum::Numeric(value) => {
            out.push(TAG_NUMERIC);
            out.extend_from_slice(&((*value as u128) ^ (1u128 << 127)).to_be_bytes());
        }
        Datum::Text(value) => {
            out.push(TAG_TEXT);
            for byte in value.as_bytes() {
                if *byte == 0 {
                    out.extend_from_slice(&[0x00, 0xFF]);
                } else {
                    out.push(*byte);
                }
            }
            out.extend_from_slice(&[0x00, 0x00]);
        }
        Datum::Date(value) => push_i32(out, TAG_DATE, *value),
        Datum::Timestamp(value) => push_i64(out, TAG_TIMESTAMP, *value),
        Datum::TimestampTz(value) => push_i64(out, TAG_TIMESTAMPTZ, *value),
        Datum::Interval(value) => {
            out.push(TAG_INTERVAL);
            let length = value.normalized_nanoseconds();
            out.extend_from_slice(&((length as u128) ^ (1u128 << 127)).to_be_bytes());
            out.extend_from_slice(&((value.months as u32) ^ 0x8000_0000).to_be_bytes());
            out.extend_from_slice(&((value.days as u32) ^ 0x8000_0000).to_be_bytes());
            out.extend_from_slice(&((value.nanoseconds as u64) ^ (1 << 63)).to_be_bytes());
        }
        Datum::Array(elements) => {
            out.push(TAG_ARRAY);
            for element in elements {
                if element.is_null() {
                    out.push(ARRAY_NULL);
                } else {
                    out.push(ARRAY_VALUE);
                    encode_datum(element, out);
                }
            }
            out.push(ARRAY_END);
        }
    }
}

fn push_i32(out: &mut Vec<u8>, tag: u8, value: i32) {
    out.push(tag);
    out.extend_from_slice(&((value as u32) ^ 0x8000_0000).to_be_bytes());
}

fn push_i64(out: &mut Vec<u8>, tag: u8, value: i64) {
    out.push(tag);
    out.extend_from_slice(&((value as u64) ^ (1 << 63)).to_be_bytes());
}

fn ordered_f64_bits(value: f64) -> u64 {
    let value = if value == 0.0 {
        0.0
    } else if value.is_nan() {
        f64::NAN
    } else {
        value
    };
    let bits = value.to_bits();
    if bits >> 63 == 0 {
        bits ^ (1 << 63)
    } else {
        !bits
    }
}

fn ordered_f32_bits(value: f32) -> u32 {
    let value = if value == 0.0 {
        0.0
    } else if value.is_nan() {
        f32::NAN
    } else {
        value
    };
    let bits = value.to_bits();
    if bits >> 31 == 0 {
        bits ^ (1 << 31)
    } else {
        !bits
    }
}

/// Encodes a whole row.
pub fn encode_row(row: &[Datum]) -> Vec<u8> {
    let mut out = Vec::with_capacity(row.len() * 9);
    encode_row_into(row, &mut out);
    out
}

/// Appends the encoding of a row to `out`.
pub fn encode_row_into(row: &[Datum], out: &mut Vec<u8>) {
    for datum in row {
        encode_datum(datum, out);
    }
}

/// Compares two datums as their encodings compare, without encoding them:
/// `compare_datum(a, b) == encode(a).cmp(encode(b))`.
pub fn compare_datum(a: &Datum, b: &Datum) -> Ordering {
    match (a, b) {
        (Datum::Null, Datum::Null) => Ordering::Equal,
        (Datum::Bool(a), Datum::Bool(b)) => a.cmp(b),
        (Datum::Int16(a), Datum::Int16(b)) => a.cmp(b),
        (Datum::Int32(a), Datum::Int32(b)) => a.cmp(b),
        (Datum::Int64(a), Datum::Int64(b)) => a.cmp(b),
        (Datum::Float32(a), Datum::Float32(b)) => ordered_f32_bits(*a).cmp(&ordered_f32_bits(*b)),
        (Datum::Float64(a), Datum::Float64(b)) => ordered_f64_bits(*a).cmp(&ordered_f64_bits(*b)),
        (Datum::Numeric(a), Datum::Numeric(b)) => a.cmp(b),
        (Datum::Text(a), Datum::Text(b)) => a.as_bytes().cmp(b.as_bytes()),
        (Datum::Date(a), Datum::Date(b)) => a.cmp(b),
        (Datum::Timestamp(a), Datum::Timestamp(b)) => a.cmp(b),
        (Datum::TimestampTz(a), Datum::TimestampTz(b)) => a.cmp(b),
        (Datum::Interval(a), Datum::Interval(b)) => (
            a.normalized_nanoseconds(),
            a.months,
            a.days,
            a.nanoseconds,
        )
            .cmp(&(b.normalized_nanoseconds(), b.months, b.days, b.nanoseconds)),
        (Datum::Array(a), Datum::Array(b)) => {
            for (a, b) in a.iter().zip(b) {
                let order = match (a.is_null(), b.is_null()) {
                    (true, true) => Ordering::Equal,
                    (true, false) => Ordering::Greater,
                    (false, true) => Ordering::Less,
                    (false, false) => compare_datum(a, b),
                };
                if order != Ordering::Equal {
                    return order;
                }
            }
            a.len().cmp(&b.len())
        }
        _ => tag(a).cmp(&tag(b)),
    }
}

/// Compares two rows as their encodings compare (column by column; a row
/// that is a prefix of the other sorts first).
pub fn compare_rows(a: &[Datum], b: &[Datum]) -> Ordering {
    for (a, b) in a.iter().zip(b) {
        match compare_datum(a, b) {
            Ordering::Equal => continue,
            unequal => return unequal,
        }
    }
    a.len().cmp(&b.len())
}

fn tag(datum: &Datum) -> u8 {
    match datum {
        Datum::Null => TAG_NULL,
        Datum::Bool(_) => TAG_BOOL,
        Datum::Int16(_) => TAG_INT16,
        Datum::Int32(_) => TAG_INT32,
        Datum::Int64(_) => TAG_INT64,
        Datum::Float32(_) => TAG_FLOAT32,
        Datum::Float64(_) => TAG_FLOAT64,
        Datum::Numeric(_) => TAG_NUMERIC,
        Datum::Text(_) => TAG_TEXT,
        Datum::Date(_) => TAG_DATE,
        Datum::Timestamp(_) => TAG_TIMESTAMP,
        Datum::TimestampTz(_) => TAG_TIMESTAMPTZ,
        Datum::Interval(_) => TAG_INTERVAL,
        Datum::Array(_) => TAG_ARRAY,
    }
}

/// Decodes a whole row; fails if the bytes are not exactly a row.
pub fn decode_row(bytes: &[u8]) -> RsResult<Row> {
    let mut reader = Reader { bytes, position: 0 };
    let mut row = Vec::new();
    while reader.position < bytes.len() {
        row.push(reader.datum()?);
    }
    Ok(row)
}

/// Decodes `count` datums from the front of `bytes`, returning them and the
/// number of bytes consumed.
pub fn decode_prefix(bytes: &[u8], count: usize) -> RsResult<(Row, usize)> {
    let mut reader = Reader { bytes, position: 0 };
    let mut row = Vec::with_capacity(count);
    for _ in 0..count {
        row.push(reader.datum()?);
    }
    Ok((row, reader.position))
}

/// Length of the datum encoded at the front of `bytes`, or `None` when they
/// do not start with a whole datum. Reads no byte past the datum it
/// measures.
pub fn datum_len(bytes: &[u8]) -> Option<usize> {
    let payload = match *bytes.first()? {
        TAG_NULL => 0,
        TAG_BOOL => 1,
        TAG_INT16 => 2,
        TAG_INT32 | TAG_FLOAT32 | TAG_DATE => 4,
        TAG_INT64 | TAG_FLOAT64 | TAG_TIMESTAMP | TAG_TIMESTAMPTZ => 8,
        TAG_NUMERIC => 16,
        TAG_INTERVAL => 16 + 4 + 4 + 8,
        TAG_TEXT => {
            let mut position = 1;
            loop {
                match *bytes.get(position)? {
                    0x00 => match *bytes.get(position + 1)? {
                        0x00 => return Some(position + 2),
                        0xFF => position += 2,
                        _ => return None,
                    },
                    _ => position += 1,
                }
            }
        }
        TAG_ARRAY => {
            let mut position = 1;
            loop {
                match *bytes.get(position)? {
                    ARRAY_END => return Some(position + 1),
                    ARRAY_NULL => position += 1,
                    ARRAY_VALUE => {
                        // A value: never an array, and never NULL (which
                        // has its own marker, one encoding per value).
                        let element = bytes.get(position + 1..)?;
                        if matches!(element.first(), Some(&TAG_ARRAY) | Some(&TAG_NULL)) {
                            return None;
                        }
                        position += 1 + datum_len(element)?;
                    }
                    _ => return None,
                }
            }
        }
        _ => return None,
    };
    (bytes.len() > payload).then_some(1 + payload)
}

struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> RsResult<[u8; N]> {
        let end = self.position + N;
        let slice = self.bytes.get(self.position..end).ok_or_else(corrupt)?;
        self.position = end;
        let mut array = [0u8; N];
        array.copy_from_slice(slice);
        Ok(array)
    }

    fn i32(&mut self) -> RsResult<i32> {
        Ok((u32::from_be_bytes(self.take()?) ^ 0x8000_0000) as i32)
    }

    fn i64(&mut self) -> RsResult<i64> {
        Ok((u64::from_be_bytes(self.take()?) ^ (1 << 63)) as i64)
    }

    fn i128(&mut self) -> RsResult<i128> {
        Ok((u128::from_be_bytes(self.take()?) ^ (1u128 << 127)) as i128)
    }

    fn datum(&mut self) -> RsResult<Datum> {
        let [tag] = self.take::<1>()?;
        Ok(match tag {
            TAG_NULL => Datum::Null,
            TAG_BOOL => Datum::Bool(self.take::<1>()?[0] != 0),
            TAG_INT16 => Datum::Int16((u16::from_be_bytes(self.take()?) ^ 0x8000) as i16),
            TAG_INT32 => Datum::Int32(self.i32()?),
            TAG_INT64 => Datum::Int64(self.i64()?),
            TAG_FLOAT32 => {
                let bits = u32::from_be_bytes(self.take()?);
                let bits = if bits >> 31 == 1 {
                    bits ^ (1 << 31)
                } else {
                    !bits
                };
                Datum::Float32(f32::from_bits(bits))
            }
            TAG_FLOAT64 => {
                let bits = u64::from_be_bytes(self.take()?);
                let bits = if bits >> 63 == 1 {
                    bits ^ (1 << 63)
                } else {
                    !bits
                };
                Datum::Float64(f64::from_bits(bits))
            }
            TAG_NUMERIC => Datum::Numeric(self.i128()?),
            TAG_TEXT => Datum::Text(self.text()?),
            TAG_DATE => Datum::Date(self.i32()?),
            TAG_TIMESTAMP => Datum::Timestamp(self.i64()?),
            TAG_TIMESTAMPTZ => Datum::TimestampTz(self.i64()?),
            TAG_INTERVAL => {
                let _length = self.i128()?;
                let months = self.i32()?;
                let days = self.i32()?;
                let nanoseconds = self.i64()?;
                Datum::Interval(Interval {
                    months,
                    days,
                    nanoseconds,
                })
            }
            TAG_ARRAY => {
                let mut elements = Vec::new();
                loop {
                    match self.take::<1>()? {
                        [ARRAY_END] => break,
                        [ARRAY_NULL] => elements.push(Datum::Null),
                        [ARRAY_VALUE]
                            if !matches!(
                                self.bytes.get(self.position),
                                Some(&TAG_ARRAY) | Some(&TAG_NULL)
                            ) =>
                        {
                            elements.push(self.datum()?)
                        }
                        _ => return Err(corrupt()),
                    }
                }
                Datum::Array(elements)
            }
            _ => return Err(corrupt()),
        })
    }

    fn text(&mut self) -> RsResult<String> {
        let mut bytes = Vec::new();
        loop {
            let [byte] = self.take::<1>()?;
            if byte != 0 {
                bytes.push(byte);
                continue;
            }
            match self.take::<1>()? {
                [0x00] => break,
                [0xFF] => bytes.push(0),
                _ => return Err(corrupt()),
            }
        }
        String::from_utf8(bytes).map_err(|_| corrupt())
    }
}

fn corrupt() -> RsError {
    RsError::internal("corrupt row encoding in storage")
}

#[cfg(test)]
mod tests {
    //! Goal: encodings round-trip and byte order equals SQL order.
    //! Method: proptest over random datums of each type.
    use super::*;
    use proptest::prelude::*;

    fn encode_one(datum: &Datum) -> Vec<u8> {
        let mut out = Vec::new();
        encode_datum(datum, &mut out);
        out
    }

    proptest! {
        #[test]
        fn int64_order_preserved(a: i64, b: i64) {
            prop_assert_eq!(a.cmp(&b), encode_one(&Datum::Int64(a)).cmp(&encode_one(&Datum::Int64(b))));
        }

        #[test]
        fn int16_order_preserved(a: i16, b: i16) {
            prop_assert_eq!(a.cmp(&b), encode_one(&Datum::Int16(a)).cmp(&encode_one(&Datum::Int16(b))));
        }

        #[test]
        fn numeric_order_preserved(a: i128, b: i128) {
            prop_assert_eq!(a.cmp(&b), encode_one(&Datum::Numeric(a)).cmp(&encode_one(&Datum::Numeric(b))));
        }

        #[test]
        fn float_order_preserved(a in proptest::num::f64::ANY, b in proptest::num::f64::ANY) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            let expected = a.partial_cmp(&b).expect("not NaN");
            prop_assert_eq!(expected, encode_one(&Datum::Float64(a)).cmp(&encode_one(&Datum::Float64(b))));
        }

        #[test]
        fn text_order_preserved(a: String, b: String) {
            prop_assert_eq!(a.as_bytes().cmp(b.as_bytes()),
                encode_one(&Datum::Text(a.clone())).cmp(&encode_one(&Datum::Text(b.clone()))));
        }

        #[test]
        fn datum_len_measures_one_datum(
            datum in arbitrary_datum(),
            tail in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let encoded = encode_one(&datum);
            let mut bytes = encoded.clone();
            bytes.extend_from_slice(&tail);
            prop_assert_eq!(datum_len(&bytes), Some(encoded.len()));
            for cut in 0..encoded.len() {
                prop_assert_eq!(datum_len(&encoded[..cut]), None);
            }
        }

        #[test]
        fn rows_round_trip(row in proptest::collection::vec(arbitrary_datum(), 0..6)) {
            let bytes = encode_row(&row);
            let decoded = decode_row(&bytes).expect("decodes");
            prop_assert_eq!(encode_row(&decoded), bytes);
            let normalized: Vec<Datum> = row.iter().map(normalize).collect();
            let decoded: Vec<Datum> = decoded.iter().map(normalize).collect();
            prop_assert_eq!(format!("{normalized:?}"), format!("{decoded:?}"));
        }

        #[test]
        fn compare_rows_agrees_with_encodings(
            a in proptest::collection::vec(arbitrary_datum(), 0..4),
            b in proptest::collection::vec(arbitrary_datum(), 0..4),
            shared in 0usize..4,
        ) {
            // Share a prefix so that ties on leading columns are common.
            let mut b = b;
            for (index, datum) in a.iter().take(shared).enumerate() {
                if index < b.len() { b[index] = datum.clone(); } else { b.push(datum.clone()); }
            }
            prop_assert_eq!(compare_rows(&a, &b), encode_row(&a).cmp(&encode_row(&b)));
            prop_assert_eq!(compare_rows(&a, &a), std::cmp::Ordering::Equal);
        }

        #[test]
        fn rows_compare_column_by_column(a in proptest::collection::vec(any::<(i32, String)>(), 1..4),
                                         b in proptest::collection::vec(any::<(i32, String)>(), 1..4)) {
            let flatten = |pairs: &Vec<(i32, String)>| -> Vec<Datum> {
                pairs.iter().flat_map(|(n, s)| [Datum::Int32(*n), Datum::Text(s.clone())]).collect()
            };
            let expected = a.iter().map(|(n, s)| (*n, s.as_bytes().to_vec()))
                .cmp(b.iter().map(|(n, s)| (*n, s.as_bytes().to_vec())));
            prop_assert_eq!(expected, encode_row(&flatten(&a)).cmp(&encode_row(&flatten(&b))));
        }
    }

    fn normalize(datum: &Datum) -> Datum {
        match datum {
            Datum::Array(elements) => Datum::Array(elements.iter().map(normalize).collect()),
            Datum::Float64(value) if *value == 0.0 => Datum::Float64(0.0),
            Datum::Float32(value) if *value == 0.0 => Datum::Float32(0.0),
            other => other.clone(),
        }
    }

    /// A scalar, or an array of one type's values and NULLs.
    fn arbitrary_datum() -> impl Strategy<Value = Datum> {
        prop_oneof![
            4 => arbitrary_scalar(),
            1 => arbitrary_scalar().prop_flat_map(|sample| {
                let element = scalar_of_kind(sample);
                proptest::collection::vec(
                    prop_oneof![1 => Just(Datum::Null), 4 => element],
                    0..4,
                )
                .prop_map(Datum::Array)
            }),
        ]
    }

    /// Values of the same type as `sample` (text or integers: two orders
    /// that differ from their encodings' lengths).
    fn scalar_of_kind(sample: Datum) -> BoxedStrategy<Datum> {
        match sample {
            Datum::Text(_) => "[ab]{0,3}".prop_map(Datum::Text).boxed(),
            _ => (-3i64..3).prop_map(Datum::Int64).boxed(),
        }
    }

    fn arbitrary_scalar() -> impl Strategy<Value = Datum> {
        prop_oneof![
            Just(Datum::Null),
            any::<bool>().prop_map(Datum::Bool),
            any::<i16>().prop_map(Datum::Int16),
            any::<i32>().prop_map(Datum::Int32),
            any::<i64>().prop_map(Datum::Int64),
            proptest::num::f64::NORMAL.prop_map(Datum::Float64),
            proptest::num::f32::NORMAL.prop_map(Datum::Float32),
            any::<i128>().prop_map(Datum::Numeric),
            any::<String>().prop_map(Datum::Text),
            any::<i32>().prop_map(Datum::Date),
            any::<i64>().prop_map(Datum::Timestamp),
            any::<i64>().prop_map(Datum::TimestampTz),
            any::<(i32, i32, i64)>().prop_map(|(months, days, nanoseconds)| Datum::Interval(
                Interval {
                    months,
                    days,
                    nanoseconds
                }
            )),
        ]
    }

    #[test]
    fn arrays_order_as_postgresql_orders_them() {
        // Element by element, a NULL element after every value, an array
        // before its extensions: {} < {1} < {1,2} < {1,NULL} < {2}.
        let array = |elements: &[Option<i64>]| {
            Datum::Array(
                elements
                    .iter()
                    .map(|element| element.map_or(Datum::Null, Datum::Int64))
                    .collect(),
            )
        };
        let ordered = [
            array(&[]),
            array(&[Some(1)]),
            array(&[Some(1), Some(2)]),
            array(&[Some(1), None]),
            array(&[Some(2)]),
        ];
        for pair in ordered.windows(2) {
            assert!(encode_one(&pair[0]) < encode_one(&pair[1]), "{pair:?}");
            assert_eq!(compare_datum(&pair[0], &pair[1]), Ordering::Less);
        }
        // An array of arrays is never read back.
        let nested = [TAG_ARRAY, ARRAY_VALUE, TAG_ARRAY, ARRAY_END, ARRAY_END];
        assert!(decode_row(&nested).is_err());
        assert_eq!(datum_len(&nested), None);
        // Nor a NULL spelled as a value.
        let null_value = [TAG_ARRAY, ARRAY_VALUE, TAG_NULL, ARRAY_END];
        assert!(decode_row(&null_value).is_err());
        assert_eq!(datum_len(&null_value), None);
    }

    #[test]
    fn null_sorts_before_values_and_corruption_is_an_error() {
        assert!(encode_one(&Datum::Null) < encode_one(&Datum::Int64(i64::MIN)));
        assert!(decode_row(&[0x13, 0x01]).is_err());
        assert!(decode_row(&[0xEE]).is_err());
    }
}
