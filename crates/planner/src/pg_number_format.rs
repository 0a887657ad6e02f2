//! `to_char(number, pattern)` with PostgreSQL's number patterns.
//!
//! DataFusion's `to_char` formats dates and times only. This module's
//! `to_char` takes numbers too, and passes everything else on to
//! DataFusion's (whose PostgreSQL patterns `pg_to_char` translates).
//!
//! Supported: `9` (digit, blank when leading), `0` (digit, zero when
//! leading), `.` / `D` (decimal point), `,` / `G` (group separator, blank
//! before the first digit), `S` (sign, `+` or `-`), `MI` (minus or blank),
//! `FM` (no padding, no trailing zeros in `9` places), quoted text and
//! other characters, copied. The value is rounded to the pattern's
//! fraction digits (half away from zero; floats as `printf` rounds them),
//! and an integer part too wide for the pattern prints as `#`s. Other
//! PostgreSQL patterns (`PR`, `PL`, `SG`, `L`, `V`, `EEEE`, `RN`, `TH`)
//! are refused with a coded error.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::{i256, DataType, Decimal128Type, Float64Type, Int64Type};
use datafusion::common::{plan_err, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use rockstream_plan::arrow_types::arrow_error;
use rockstream_types::error::{codes, RsError};
use rockstream_types::RsResult;

use crate::columnar::invoke_on_arrays;

/// `to_char`, for numbers as well as dates and times.
pub fn to_char() -> ScalarUDF {
    ScalarUDF::from(ToChar {
        temporal: datafusion::functions::datetime::to_char(),
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ToChar {
    /// DataFusion's `to_char`, for dates and times.
    temporal: Arc<ScalarUDF>,
    signature: Signature,
}

impl ScalarUDFImpl for ToChar {
    fn name(&self) -> &str {
        "to_char"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arguments: &[DataType]) -> Result<Vec<DataType>> {
        let [value, pattern] = arguments else {
            return plan_err!("to_char takes a value and a pattern");
        };
        let value = match value {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => DataType::Int64,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => DataType::Float64,
            DataType::Decimal128(..)
            | DataType::Date32
            | DataType::Date64
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Timestamp(..)
            | DataType::Duration(_) => value.clone(),
            other => return plan_err!("function to_char({other}, text) does not exist"),
        };
        match pattern {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
                Ok(vec![value, DataType::Utf8])
            }
            other => plan_err!("to_char takes a text pattern, not {other}"),
        }
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let numeric = matches!(
            args.args.first().map(ColumnarValue::data_type),
            Some(DataType::Int64 | DataType::Float64 | DataType::Decimal128(..))
        );
        if !numeric {
            return self.temporal.invoke_with_args(args);
        }
        invoke_on_arrays(&args.args, |arrays| format_array(&arrays[0], &arrays[1]))
    }
}

fn format_array(values: &ArrayRef, patterns: &ArrayRef) -> RsResult<ArrayRef> {
    let patterns =
        datafusion::arrow::compute::cast(patterns, &DataType::Utf8).map_err(arrow_error)?;
    let patterns = patterns.as_string::<i32>();
    let mut out = StringBuilder::with_capacity(values.len(), values.len() * 12);
    let mut parsed: Option<(&str, Pattern)> = None;
    for row in 0..values.len() {
        if values.is_null(row) || patterns.is_null(row) {
            out.append_null();
            continue;
        }
        let text = patterns.value(row);
        if parsed
            .as_ref()
            .is_none_or(|(previous, _)| *previous != text)
        {
            parsed = Some((text, Pattern::parse(text)?));
        }
        let Some((_, pattern)) = &parsed else {
            continue;
        };
        let number = match values.data_type() {
            DataType::Int64 => Number::from_decimal(
                i128::from(values.as_primitive::<Int64Type>().value(row)),
                0,
                pattern.fraction_digits,
            ),
            DataType::Decimal128(_, scale) => Number::from_decimal(
                values.as_primitive::<Decimal128Type>().value(row),
                *scale,
                pattern.fraction_digits,
            ),
            _ => Number::from_float(
                values.as_primitive::<Float64Type>().value(row),
                pattern.fraction_digits,
            ),
        };
        out.append_value(pattern.format(&number));
    }
    Ok(Arc::new(out.finish()))
}

/// Digit places a pattern may have (a numeric has at most 38 digits).
const MAX_DIGITS: usize = 64;

/// Significant digits a float keeps (C's `DBL_DIG`), as PostgreSQL's
/// `to_char` of a float keeps them.
const FLOAT_DIGITS: usize = 15;

/// One element of a number pattern.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    /// `9` (false) or `0` (true).
    Digit {
        zero: bool,
    },
    Point,
    Group,
    /// `S`: `+` or `-`.
    Sign,
    /// `MI`: `-` or a blank.
    Minus,
    Text(String),
}

#[derive(Debug)]
struct Pattern {
    parts: Vec<Part>,
    fill_mode: bool,
    /// Digit places before and after the decimal point.
    integer_digits: usize,
    fraction_digits: usize,
}

impl Pattern {
    fn parse(text: &str) -> RsResult<Pattern> {
        let unsupported = |what: &str| {
            RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                format!("to_char number pattern \"{what}\" (in '{text}') is not supported yet"),
            )
        };
        let mut parts = Vec::new();
        let mut fill_mode = false;
        let mut seen_point = false;
        let (mut integer_digits, mut fraction_digits) = (0, 0);
        let chars: Vec<char> = text.chars().collect();
        let mut index = 0;
        while index < chars.len() {
            let c = chars[index];
            let next = chars.get(index + 1).map(char::to_ascii_uppercase);
            let upper = c.to_ascii_uppercase();
            index += 1;
            let part = match upper {
                '9' | '0' => {
                    if seen_point {
                        fraction_digits += 1;
                    } else {
                        integer_digits += 1;
                    }
                    Part::Digit { zero: c == '0' }
                }
                '.' | 'D' if !seen_point => {
                    seen_point = true;
                    Part::Point
                }
                ',' | 'G' => Part::Group,
                'S' if next == Some('G') => return Err(unsupported("SG")),
                'S' => Part::Sign,
                'F' if next == Some('M') => {
                    index += 1;
                    fill_mode = true;
                    continue;
                }
                'M' if next == Some('I') => {
                    index += 1;
                    Part::Minus
                }
                'P' if matches!(next, Some('R' | 'L')) => {
                    return Err(unsupported(&format!("P{}", chars[index])))
                }
                'L' | 'V' => return Err(unsupported(&c.to_string())),
                'E' if chars[index..]
                    .iter()
                    .take(3)
                    .collect::<String>()
                    .eq_ignore_ascii_case("EEE") =>
                {
                    return Err(unsupported("EEEE"))
                }
                'R' if next == Some('N') => return Err(unsupported("RN")),
                'T' if next == Some('H') => return Err(unsupported("TH")),
                '"' => {
                    let mut quoted = String::new();
                    while index < chars.len() && chars[index] != '"' {
                        if chars[index] == '\\' && index + 1 < chars.len() {
                            index += 1;
                        }
                        quoted.push(chars[index]);
                        index += 1;
                    }
                    index += 1;
                    Part::Text(quoted)
                }
                _ => Part::Text(c.to_string()),
            };
            parts.push(part);
        }
        if integer_digits + fraction_digits > MAX_DIGITS {
            return Err(unsupported(&format!("more than {MAX_DIGITS} digits")));
        }
        Ok(Pattern {
            parts,
            fill_mode,
            integer_digits,
            fraction_digits,
        })
    }

    fn format(&self, number: &Number) -> String {
        let overflow = number.integer.len() > self.integer_digits;
        let negative = number.negative && !overflow;
        let explicit_sign = self
            .parts
            .iter()
            .any(|part| matches!(part, Part::Sign | Part::Minus));
        // Padding: a blank, or nothing in fill mode.
        let blank = if self.fill_mode { "" } else { " " };
        // Leading places (before the integer's first digit) print as
        // blanks, or as zeros from the first `0` place on.
        let leading = self.integer_digits.saturating_sub(number.integer.len());
        let first_zero = self
            .parts
            .iter()
            .filter(|part| matches!(part, Part::Digit { .. }))
            .take(self.integer_digits)
            .position(|part| *part == Part::Digit { zero: true });
        // A zero with no integer digit to show still shows one `0` where
        // nothing else would.
        let lone_zero = number.integer.is_empty()
            && number.is_zero
            && first_zero.is_none()
            && (self.fraction_digits == 0 || self.fill_mode);
        let mut out = String::new();
        // Where the sign goes: an `S`, or (without `S` or `MI`) the start
        // of the number. It moves right, next to the number's first
        // character, past leading blanks.
        let mut sign_at = None;
        let mut digit = 0;
        let mut printed = false;
        let mut fraction = number.fraction.chars();
        let mut fraction_places = Vec::new();
        for part in &self.parts {
            if !explicit_sign
                && sign_at.is_none()
                && matches!(part, Part::Digit { .. } | Part::Point)
            {
                sign_at = Some(out.len());
            }
            match part {
                Part::Digit { .. } if digit < self.integer_digits => {
                    let place = digit;
                    digit += 1;
                    if overflow {
                        out.push('#');
                    } else if place >= leading {
                        out.push(char::from(number.integer.as_bytes()[place - leading]));
                        printed = true;
                    } else if first_zero.is_some_and(|first| place >= first)
                        || (lone_zero && place + 1 == self.integer_digits)
                    {
                        out.push('0');
                        printed = true;
                    } else {
                        out.push_str(blank);
                    }
                }
                Part::Digit { zero } => {
                    digit += 1;
                    // A float's digits beyond 15 significant ones print
                    // nothing, as in PostgreSQL.
                    let Some(shown) = (if overflow { Some('#') } else { fraction.next() }) else {
                        continue;
                    };
                    fraction_places.push((out.len(), *zero));
                    out.push(shown);
                }
                Part::Point => out.push('.'),
                Part::Group if printed || overflow => out.push(','),
                Part::Group => out.push_str(blank),
                Part::Sign => sign_at = Some(out.len()),
                Part::Minus if negative => out.push('-'),
                Part::Minus => out.push_str(blank),
                Part::Text(text) => out.push_str(text),
            }
        }
        if self.fill_mode {
            // Trailing zeros in `9` places go (and an `S` after them moves
            // back with the rest).
            for (at, zero) in fraction_places.iter().rev() {
                if *zero || out.as_bytes()[*at] != b'0' {
                    break;
                }
                out.remove(*at);
                if let Some(sign) = sign_at.as_mut().filter(|sign| **sign > *at) {
                    *sign -= 1;
                }
            }
        }
        let has_sign_place = self.parts.contains(&Part::Sign);
        let sign = match (negative, has_sign_place) {
            (true, _) => "-",
            (false, true) => "+",
            (false, false) => blank,
        };
        if let Some(at) = sign_at {
            let first = out[at..]
                .find(|c: char| c != ' ')
                .map_or(out.len(), |offset| at + offset);
            let next_to = if out[at..].starts_with(' ') {
                first
            } else {
                at
            };
            out.insert_str(next_to, sign);
        }
        out
    }
}

/// A number rounded to a pattern's fraction digits.
#[derive(Debug, PartialEq)]
struct Number {
    negative: bool,
    is_zero: bool,
    /// The integer part's digits, without leading zeros (empty for 0).
    integer: String,
    /// Exactly the pattern's number of fraction digits.
    fraction: String,
}

impl Number {
    fn from_decimal(mantissa: i128, scale: i8, fraction_digits: usize) -> Number {
        let ten = i256::from_i128(10);
        let shift = fraction_digits as i32 - i32::from(scale);
        let mut value = i256::from_i128(mantissa);
        if shift >= 0 {
            value = value.wrapping_mul(ten.wrapping_pow(shift as u32));
        } else {
            let divisor = ten.wrapping_pow(shift.unsigned_abs());
            let remainder = value.wrapping_rem(divisor);
            value = value.wrapping_div(divisor);
            if remainder.wrapping_abs().wrapping_mul(i256::from_i128(2)) >= divisor {
                value = if mantissa < 0 {
                    value.wrapping_sub(i256::ONE)
                } else {
                    value.wrapping_add(i256::ONE)
                };
            }
        }
        let negative = value < i256::ZERO;
        let digits = value.wrapping_abs().to_string();
        Number::from_digits(negative, &digits, fraction_digits)
    }

    fn from_float(value: f64, fraction_digits: usize) -> Number {
        if !value.is_finite() {
            // Wider than any pattern: prints as `#`s.
            return Number {
                negative: false,
                is_zero: false,
                integer: "#".repeat(usize::from(u8::MAX)),
                fraction: String::new(),
            };
        }
        // As PostgreSQL: no more fraction digits than leave 15 significant
        // ones; the pattern's places beyond them print nothing.
        let integer_len = format!("{:.0}", value.abs()).len();
        let kept = fraction_digits.min(FLOAT_DIGITS.saturating_sub(integer_len));
        let text = format!("{:.*}", kept, value.abs());
        let digits: String = text.chars().filter(char::is_ascii_digit).collect();
        Number::from_digits(value < 0.0, &digits, kept)
    }

    /// `digits`: the absolute value times 10^fraction_digits.
    fn from_digits(negative: bool, digits: &str, fraction_digits: usize) -> Number {
        let padded = format!("{digits:0>width$}", width = fraction_digits + 1);
        let (integer, fraction) = padded.split_at(padded.len() - fraction_digits);
        let integer = integer.trim_start_matches('0');
        let is_zero = padded.bytes().all(|digit| digit == b'0');
        Number {
            negative: negative && !is_zero,
            is_zero,
            integer: integer.to_string(),
            fraction: fraction.to_string(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    use super::*;

    fn decimal(mantissa: i128, scale: i8, pattern: &str) -> String {
        let pattern = Pattern::parse(pattern).unwrap();
        pattern.format(&Number::from_decimal(
            mantissa,
            scale,
            pattern.fraction_digits,
        ))
    }

    fn float(value: f64, pattern: &str) -> String {
        let pattern = Pattern::parse(pattern).unwrap();
        pattern.format(&Number::from_float(value, pattern.fraction_digits))
    }

    #[test]
    fn numbers_print_as_postgresql_prints_them() {
        // Each right-hand side is what PostgreSQL 15 prints.
        for (mantissa, scale, pattern, expected) in [
            (5, 0, "999", "   5"),
            (-5, 0, "999", "  -5"),
            (5, 0, "0999", " 0005"),
            (5, 0, "9099", "  005"),
            (5, 1, "9.99", "  .50"),
            (5, 1, "0.99", " 0.50"),
            (12345, 0, "999", " ###"),
            (1234, 0, "9,999,999", "     1,234"),
            (1234567, 0, "9,999,999", " 1,234,567"),
            (1, 0, "FM9.99", "1."),
            (15, 1, "FM9.99", "1.5"),
            (15, 1, "FM9.00", "1.50"),
            (-1234567, 3, "FM999,999.00", "-1,234.57"),
            (-5, 0, "S999", "  -5"),
            (5, 0, "S999", "  +5"),
            (-5, 0, "999MI", "  5-"),
            (5, 0, "999MI", "  5 "),
            (-5, 0, "999S", "  5-"),
            (0, 0, "999", "   0"),
            (0, 0, "9.99", "  .00"),
            (0, 0, "FM9.99", "0."),
            (-5, 1, "9.99", " -.50"),
            (-12, 0, "FM0000", "-0012"),
            (12, 0, "x999y", "x  12y"),
            (12345, 1, "9G999D99", " 1,234.50"),
            (5, 0, "FM999MI", "5"),
            (-5, 0, "FMS999", "-5"),
            (5, 2, "FM0.0", "0.1"),
            (-4, 1, "9", " 0"),
            (9500000, 2, "FM999,999.00", "95,000.00"),
        ] {
            assert_eq!(
                decimal(mantissa, scale, pattern),
                expected,
                "to_char({mantissa}e-{scale}, '{pattern}')"
            );
        }
        assert_eq!(float(1234.5, "9999.99"), " 1234.50");
        assert_eq!(float(2.5, "9"), " 2");
        assert_eq!(float(0.1, "0.99999999999999999999"), " 0.10000000000000");
        // An `S` after fill mode's trimmed zeros.
        assert_eq!(decimal(1, 0, "FM9.9S"), "1.+");
        assert_eq!(decimal(15, 1, "FM9.99S"), "1.5+");
        assert_eq!(decimal(-15, 1, "FM9.99S\"é\""), "1.5-é");
    }

    #[test]
    fn unknown_patterns_are_refused() {
        let long = format!("9.{}", "9".repeat(80));
        for pattern in [
            "9.99EEEE", "RN", "999PR", "L999", "99V9", "999TH", "SG999", &long,
        ] {
            let error = Pattern::parse(pattern).unwrap_err();
            assert_eq!(error.code, &codes::UNSUPPORTED_STATEMENT, "{pattern}");
        }
    }
}
