//! Bind parameters → the text the backend parses.
//!
//! A text-format parameter is passed through (after a UTF-8 check). A
//! binary-format parameter is decoded by its PostgreSQL type (`*recv`
//! layouts) and re-rendered with PostgreSQL's text output, so the backend
//! sees the same text whichever format the client chose. Binary decoding
//! covers bool, int2/4/8, oid, float4/8, text-like types, numeric, date,
//! timestamp, timestamptz and interval; any other binary parameter is
//! rejected with a coded error asking for text format.

use bytes::Bytes;
use pgwire::api::portal::Format;
use pgwire::api::results::FieldFormat;
use pgwire::api::Type;
use rockstream_types::{codes, RsError};

use crate::encode::{POSTGRES_EPOCH_DAYS, POSTGRES_EPOCH_MICROS};
use crate::types::{element_type, format_at};
use rockstream_types::pg_array::element_text;
use rockstream_types::pg_text as text;

/// `numeric` sign words.
const NUMERIC_POSITIVE: u16 = 0x0000;
const NUMERIC_NEGATIVE: u16 = 0x4000;
/// PostgreSQL's largest display scale.
const NUMERIC_SCALE_MAX: u16 = 0x3fff;
/// The weight (in base-10000 digits) of the largest value read: 10^40 and
/// more exceed every RockStream numeric.
const NUMERIC_WEIGHT_MAX: i32 = 9;
/// The most zeros a display scale adds after the digits sent.
const NUMERIC_PADDING_MAX: usize = 40;
const NUMERIC_NAN: u16 = 0xC000;

/// Decodes every parameter; `types[i]` is the type of `$i+1` (unknown when
/// missing, which only text format accepts).
pub(crate) fn decode_parameters(
    parameters: &[Option<Bytes>],
    format: &Format,
    types: &[Type],
) -> Result<Vec<Option<String>>, RsError> {
    parameters
        .iter()
        .enumerate()
        .map(|(index, value)| {
            let Some(bytes) = value else {
                return Ok(None);
            };
            let pg_type = types.get(index).unwrap_or(&Type::UNKNOWN);
            let decoded = match format_at(format, index) {
                FieldFormat::Text => utf8(bytes, index),
                FieldFormat::Binary => decode_binary(bytes, pg_type, index),
            };
            decoded.map(Some)
        })
        .collect()
}

fn utf8(bytes: &[u8], index: usize) -> Result<String, RsError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        RsError::new(
            &codes::INVALID_INPUT_VALUE,
            format!("parameter ${} is not valid UTF-8", index + 1),
        )
    })
}

fn malformed(pg_type: &Type, index: usize) -> RsError {
    RsError::new(
        &codes::INVALID_INPUT_VALUE,
        format!(
            "incorrect binary data format in bind parameter ${} of type {}",
            index + 1,
            pg_type.name()
        ),
    )
}

fn decode_binary(bytes: &[u8], pg_type: &Type, index: usize) -> Result<String, RsError> {
    binary_text(bytes, pg_type).map_err(|problem| match problem {
        BinaryProblem::Malformed => malformed(pg_type, index),
        BinaryProblem::NotUtf8 => RsError::new(
            &codes::INVALID_INPUT_VALUE,
            format!("parameter ${} is not valid UTF-8", index + 1),
        ),
        BinaryProblem::Unsupported => unsupported_binary(pg_type, index),
    })
}

/// Why a binary value has no text form here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinaryProblem {
    /// Not the type's `*send` layout.
    Malformed,
    /// Text that is not UTF-8.
    NotUtf8,
    /// A type whose binary form is not read here.
    Unsupported,
}

/// The text form of a value in its type's binary (`*send`) form.
pub(crate) fn binary_text(bytes: &[u8], pg_type: &Type) -> Result<String, BinaryProblem> {
    let malformed = || BinaryProblem::Malformed;
    Ok(match *pg_type {
        Type::BOOL => match fixed_width::<1>(bytes)? {
            [0] => "false".to_owned(),
            _ => "true".to_owned(),
        },
        Type::INT2 => i16::from_be_bytes(fixed_width(bytes)?).to_string(),
        Type::INT4 => i32::from_be_bytes(fixed_width(bytes)?).to_string(),
        Type::INT8 => i64::from_be_bytes(fixed_width(bytes)?).to_string(),
        Type::OID => u32::from_be_bytes(fixed_width(bytes)?).to_string(),
        Type::FLOAT4 => text::float4(f32::from_be_bytes(fixed_width(bytes)?)),
        Type::FLOAT8 => text::float8(f64::from_be_bytes(fixed_width(bytes)?)),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON => {
            String::from_utf8(bytes.to_vec()).map_err(|_| BinaryProblem::NotUtf8)?
        }
        Type::NUMERIC => numeric_text(bytes).ok_or_else(malformed)?,
        Type::DATE => {
            let days = i32::from_be_bytes(fixed_width(bytes)?);
            days.checked_add(POSTGRES_EPOCH_DAYS)
                .and_then(text::date)
                .ok_or_else(malformed)?
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let micros = i64::from_be_bytes(fixed_width(bytes)?);
            let since_unix_epoch = micros
                .checked_add(POSTGRES_EPOCH_MICROS)
                .ok_or_else(malformed)?;
            let rendered = if *pg_type == Type::TIMESTAMP {
                text::timestamp(since_unix_epoch)
            } else {
                text::timestamptz(since_unix_epoch)
            };
            rendered.ok_or_else(malformed)?
        }
        Type::INTERVAL => interval_text(&fixed_width::<16>(bytes)?),
        _ => match element_type(pg_type) {
            Some(element) => array_text(bytes, &element)?,
            None => return Err(BinaryProblem::Unsupported),
        },
    })
}

/// A one-dimensional array's binary form (`array_send`: dimensions, flags,
/// element type, then per dimension its length and lower bound, then each
/// element as a length, -1 for NULL, and its binary form) as its text
/// form (`{1,2,NULL}`).
fn array_text(bytes: &[u8], element: &Type) -> Result<String, BinaryProblem> {
    let word = |at: usize| -> Result<i32, BinaryProblem> {
        let four = bytes.get(at..at + 4).ok_or(BinaryProblem::Malformed)?;
        Ok(i32::from_be_bytes(fixed_width(four)?))
    };
    match word(0)? {
        0 => return Ok("{}".to_owned()),
        1 => {}
        _ => return Err(BinaryProblem::Unsupported),
    }
    let count = word(12)?;
    if count < 0 || word(16)? != 1 {
        return Err(BinaryProblem::Malformed);
    }
    let mut at = 20;
    let mut elements = Vec::new();
    for _ in 0..count {
        let length = word(at)?;
        at += 4;
        if length == -1 {
            elements.push(element_text(None));
            continue;
        }
        let length = usize::try_from(length).map_err(|_| BinaryProblem::Malformed)?;
        let item = bytes.get(at..at + length).ok_or(BinaryProblem::Malformed)?;
        at += length;
        elements.push(element_text(Some(&binary_text(item, element)?)));
    }
    if at != bytes.len() {
        return Err(BinaryProblem::Malformed);
    }
    Ok(format!("{{{}}}", elements.join(",")))
}

/// Exactly `N` bytes.
fn fixed_width<const N: usize>(bytes: &[u8]) -> Result<[u8; N], BinaryProblem> {
    bytes.try_into().map_err(|_| BinaryProblem::Malformed)
}

fn unsupported_binary(pg_type: &Type, index: usize) -> RsError {
    RsError::new(
        &codes::UNSUPPORTED_STATEMENT,
        format!(
            "binary format for bind parameter ${} of type {} is not supported; send it in text format",
            index + 1,
            pg_type.name()
        ),
    )
}

fn interval_text(bytes: &[u8; 16]) -> String {
    let [m0, m1, m2, m3, m4, m5, m6, m7, d0, d1, d2, d3, n0, n1, n2, n3] = *bytes;
    let micros = i64::from_be_bytes([m0, m1, m2, m3, m4, m5, m6, m7]);
    let days = i32::from_be_bytes([d0, d1, d2, d3]);
    let months = i32::from_be_bytes([n0, n1, n2, n3]);
    text::interval(months, days, micros)
}

/// `numeric_recv` → `numeric_out`; `None` when the bytes are malformed.
pub(crate) fn numeric_text(bytes: &[u8]) -> Option<String> {
    let words: Vec<u16> = bytes
        .chunks(2)
        .map(|pair| <[u8; 2]>::try_from(pair).ok().map(u16::from_be_bytes))
        .collect::<Option<_>>()?;
    let [count, weight, sign, scale, digits @ ..] = words.as_slice() else {
        return None;
    };
    if digits.len() != usize::from(*count) || digits.iter().any(|digit| *digit >= 10_000) {
        return None;
    }
    if *sign == NUMERIC_NAN {
        return Some("NaN".to_owned());
    }
    // PostgreSQL's other signs (its infinities among them) and display
    // scales are refused, as are values beyond 10^40, more than any numeric
    // RockStream holds (38 digits): so the text is never much longer than
    // the bytes it comes from.
    if !matches!(*sign, NUMERIC_POSITIVE | NUMERIC_NEGATIVE) || *scale > NUMERIC_SCALE_MAX {
        return None;
    }
    let weight = i32::from(*weight as i16);
    if weight > NUMERIC_WEIGHT_MAX {
        return None;
    }
    // Fraction digits past the last one sent are zeros: the display scale
    // pads with them, up to 40 (past every RockStream scale), where the
    // value is the same without more.
    let sent_fraction_digits = (i32::from(*count) - 1 - weight).max(0) as usize * 4;
    let scale = usize::from(*scale).min(sent_fraction_digits.max(NUMERIC_PADDING_MAX));
    let digit_at = |position: i32| {
        usize::try_from(weight - position)
            .ok()
            .and_then(|offset| digits.get(offset))
            .copied()
            .unwrap_or(0)
    };
    let integer = integer_part(weight, &digit_at);
    let fraction = fraction_part(scale, &digit_at);
    let negative = *sign == NUMERIC_NEGATIVE && digits.iter().any(|digit| *digit != 0);
    let minus = if negative { "-" } else { "" };
    let point = if scale > 0 { "." } else { "" };
    Some(format!("{minus}{integer}{point}{fraction}"))
}

/// Decimal digits of the integer part; `digit_at(p)` is the base-10000 digit
/// worth `10000^p`.
fn integer_part(weight: i32, digit_at: &dyn Fn(i32) -> u16) -> String {
    let mut integer = String::new();
    for position in (0..=weight).rev() {
        let digit = digit_at(position);
        if integer.is_empty() {
            if digit != 0 {
                integer.push_str(&digit.to_string());
            }
        } else {
            integer.push_str(&format!("{digit:04}"));
        }
    }
    if integer.is_empty() {
        integer.push('0');
    }
    integer
}

/// Exactly `scale` fraction digits (truncated or zero-padded, as `numeric_out`).
fn fraction_part(scale: usize, digit_at: &dyn Fn(i32) -> u16) -> String {
    let groups = scale.div_ceil(4) as i32;
    let mut fraction: String = (1..=groups)
        .map(|position| format!("{:04}", digit_at(-position)))
        .collect();
    fraction.truncate(scale);
    fraction
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Goal: binary parameters decode to the text PostgreSQL would print for
    //! them, text parameters pass through, and malformed input is a coded
    //! error, never a panic.
    use super::*;
    use crate::encode::numeric_binary;
    use bytes::BytesMut;

    fn binary(bytes: &[u8], pg_type: Type) -> Result<Option<String>, RsError> {
        let parameters = [Some(Bytes::copy_from_slice(bytes))];
        decode_parameters(&parameters, &Format::UnifiedBinary, &[pg_type])
            .map(|mut decoded| decoded.remove(0))
    }

    #[test]
    fn binary_scalars_decode_to_postgres_text() {
        let cases: Vec<(Vec<u8>, Type, &str)> = vec![
            (vec![1], Type::BOOL, "true"),
            (vec![0], Type::BOOL, "false"),
            ((-7i16).to_be_bytes().to_vec(), Type::INT2, "-7"),
            (42i32.to_be_bytes().to_vec(), Type::INT4, "42"),
            (
                i64::MIN.to_be_bytes().to_vec(),
                Type::INT8,
                "-9223372036854775808",
            ),
            (1.5f32.to_be_bytes().to_vec(), Type::FLOAT4, "1.5"),
            (1e20f64.to_be_bytes().to_vec(), Type::FLOAT8, "1e+20"),
            (f64::NAN.to_be_bytes().to_vec(), Type::FLOAT8, "NaN"),
            (b"caf\xc3\xa9".to_vec(), Type::VARCHAR, "café"),
            (1i32.to_be_bytes().to_vec(), Type::DATE, "2000-01-02"),
            (
                500_000i64.to_be_bytes().to_vec(),
                Type::TIMESTAMP,
                "2000-01-01 00:00:00.5",
            ),
            (
                0i64.to_be_bytes().to_vec(),
                Type::TIMESTAMPTZ,
                "2000-01-01 00:00:00+00",
            ),
        ];
        for (bytes, pg_type, expected) in cases {
            let decoded = binary(&bytes, pg_type.clone()).unwrap();
            assert_eq!(decoded.as_deref(), Some(expected), "{pg_type}");
        }
        let mut interval = 3_600_000_000i64.to_be_bytes().to_vec();
        interval.extend(2i32.to_be_bytes());
        interval.extend(13i32.to_be_bytes());
        assert_eq!(
            binary(&interval, Type::INTERVAL).unwrap().as_deref(),
            Some("1 year 1 mon 2 days 01:00:00")
        );
    }

    #[test]
    fn numeric_round_trips_through_binary() {
        let cases: &[(i128, i8, &str)] = &[
            (12345, 2, "123.45"),
            (-50, 2, "-0.50"),
            (0, 3, "0.000"),
            (1, 5, "0.00001"),
            (10_000, 0, "10000"),
            (12_345_678, 3, "12345.678"),
            (123_456_789_012_345_678, 9, "123456789.012345678"),
        ];
        for (unscaled, scale, expected) in cases {
            let mut bytes = BytesMut::new();
            numeric_binary(*unscaled, *scale, &mut bytes);
            assert_eq!(numeric_text(&bytes).as_deref(), Some(*expected));
        }
    }

    /// Hostile numerics: unknown signs (PostgreSQL 14's infinities among
    /// them) and scales are refused, and a huge weight or display scale
    /// cannot make a text far longer than its bytes.
    #[test]
    fn hostile_binary_numerics_are_refused_or_stay_small() {
        let numeric = |words: &[u16]| -> Vec<u8> {
            words.iter().flat_map(|word| word.to_be_bytes()).collect()
        };
        // ndigits, weight, sign, dscale, digits
        assert_eq!(numeric_text(&numeric(&[1, 0, 0xD000, 0, 1])), None);
        assert_eq!(numeric_text(&numeric(&[1, 0, 0x1234, 0, 1])), None);
        assert_eq!(numeric_text(&numeric(&[1, 0, 0, 0x4000, 1])), None);
        assert_eq!(numeric_text(&numeric(&[1, 32767, 0, 0, 1])), None);
        let padded = numeric_text(&numeric(&[1, 0, 0, 0x3fff, 1])).unwrap();
        assert_eq!(padded, format!("1.{}", "0".repeat(40)));
        assert_eq!(
            numeric_text(&numeric(&[0, 0, 0xC000, 0])).as_deref(),
            Some("NaN")
        );
    }

    #[test]
    fn text_parameters_pass_through_and_nulls_stay_null() {
        let parameters = [Some(Bytes::from_static(b"12.50")), None];
        let decoded = decode_parameters(&parameters, &Format::UnifiedText, &[]).unwrap();
        assert_eq!(decoded, vec![Some("12.50".to_owned()), None]);
    }

    #[test]
    fn per_parameter_format_codes_are_honoured() {
        let parameters = [
            Some(Bytes::from_static(b"7")),
            Some(Bytes::copy_from_slice(&7i32.to_be_bytes())),
            Some(Bytes::from_static(b"x")),
        ];
        let format = Format::Individual(vec![0, 1]);
        let types = [Type::INT4, Type::INT4, Type::TEXT];
        let decoded = decode_parameters(&parameters, &format, &types).unwrap();
        assert_eq!(
            decoded,
            vec![Some("7".into()), Some("7".into()), Some("x".into())]
        );
    }

    #[test]
    fn malformed_and_unsupported_binary_is_a_coded_error() {
        let short = binary(&[0, 1], Type::INT4).unwrap_err();
        assert_eq!(short.code.sqlstate, "22P02");
        assert!(short.message.contains("$1"));
        let unsupported = binary(&[1, 2], Type::BYTEA).unwrap_err();
        assert_eq!(unsupported.code.sqlstate, "0A000");
        assert!(binary(&[0, 1, 0], Type::NUMERIC).is_err());
        assert!(binary(&[0xff], Type::TEXT).is_err());
    }
}
