//! Numeric literals beyond what a decimal holds.
//!
//! PostgreSQL types `1e308` as `numeric` (it holds 131,072 digits before
//! the point). DataFusion reads a literal with a fraction or exponent as a
//! decimal of at most 76 digits and a scale of at least -128, and refused
//! `1e308` ("Decimal scale -308 exceeds the minimum supported scale").
//! Written in exponent form a number is approximate by intent, so such a
//! literal that no decimal holds is rewritten, in the parsed statement, to
//! `CAST('1e308' AS DOUBLE PRECISION)`: it compares and computes as
//! PostgreSQL's does (to float precision) and prints as a float. A literal
//! written out in more than 76 digits is left for DataFusion to refuse, as
//! a float would silently drop its digits.
//!
//! A literal whose exponent passes its fraction (`1e5`, `1.5e3`) is a
//! whole number: DataFusion reads it as a decimal of negative scale, which
//! Arrow casts to a float by dividing by a power of ten below one
//! (`1e5::float8` gave 99999.99999999999, and `f = 1e5` missed 100000).
//! Such a literal of at most [`WHOLE_DIGITS_MAX`] digits is written out,
//! `CAST('100000' AS DECIMAL(6, 0))`: the same numeric value, PostgreSQL's,
//! and a float exactly. Longer ones keep DataFusion's form: written out
//! they would take precision a product of them overflows (Arrow wraps a
//! decimal product past 38 digits; `1e20 * 1e20` held 1 × 10⁴⁰ exactly in
//! negative scale), or need a 256-bit decimal.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    CastKind, DataType, ExactNumberInfo, Expr, Value, ValueWithSpan, VisitMut, VisitorMut,
};

/// The most digits a decimal literal may have (Arrow's `Decimal256`).
const DECIMAL_DIGITS_MAX: u64 = 76;
/// The lowest scale a decimal literal may have (Arrow's `i8` scale).
const DECIMAL_SCALE_MIN: i64 = i8::MIN as i64;
/// The most digits a whole number in exponent form is written out in: a
/// float holds every such number exactly, and a product of two fits a
/// 128-bit decimal.
const WHOLE_DIGITS_MAX: usize = 15;

/// Rewrites, in place, the exponent-form numeric literals no decimal holds
/// into float casts (see the module documentation).
pub fn normalize_number_literals<T: VisitMut>(node: &mut T) {
    let _ = node.visit(&mut NumberLiterals);
}

struct NumberLiterals;

impl VisitorMut for NumberLiterals {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Value(ValueWithSpan {
            value: Value::Number(text, _),
            ..
        }) = expr
        {
            // PostgreSQL's digit separators (`1_000e200`) mean nothing.
            if !has_exponent(text) {
                return ControlFlow::Continue(());
            }
            let text = text.replace('_', "");
            if !fits_a_decimal(&text) {
                *expr = cast(text, DataType::DoublePrecision);
            } else if let Some(digits) = whole_number_digits(&text) {
                let precision = digits.len() as u64;
                *expr = cast(
                    digits,
                    DataType::Decimal(ExactNumberInfo::PrecisionAndScale(precision, 0)),
                );
            }
        }
        ControlFlow::Continue(())
    }
}

fn cast(text: String, data_type: DataType) -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(Expr::value(Value::SingleQuotedString(text))),
        data_type,
        array: false,
        format: None,
    }
}

/// The digits of `text` (an unsigned number in exponent form that
/// [`fits_a_decimal`]) written out, when its exponent passes its fraction
/// so that it is a whole number of at most [`WHOLE_DIGITS_MAX`] digits;
/// `None` otherwise (a scale of 0 or more reads as PostgreSQL's already).
fn whole_number_digits(text: &str) -> Option<String> {
    let (whole, fraction, exponent) = number_parts(text)?;
    let zeros = exponent.checked_sub(i64::try_from(fraction.len()).ok()?)?;
    if zeros <= 0 {
        return None;
    }
    let significant = format!("{whole}{fraction}");
    let significant = significant.trim_start_matches('0');
    if significant.is_empty() {
        return Some("0".to_string());
    }
    let zeros = usize::try_from(zeros).ok()?;
    if significant.len().checked_add(zeros)? > WHOLE_DIGITS_MAX {
        return None;
    }
    Some(format!("{significant}{}", "0".repeat(zeros)))
}

/// An unsigned number's text as its whole digits, its fraction's digits
/// and its exponent (0 without one); `None` for an unreadable exponent.
fn number_parts(text: &str) -> Option<(&str, &str, i64)> {
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i64>().ok()?),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    Some((whole, fraction, exponent))
}

fn has_exponent(text: &str) -> bool {
    text.contains(['e', 'E'])
}

/// Whether DataFusion reads `text` (an unsigned number) as a decimal: its
/// significant digits and scale (digits after the point less the exponent)
/// within Arrow's bounds. Unreadable text is left for DataFusion to refuse.
fn fits_a_decimal(text: &str) -> bool {
    let Some((whole, fraction, exponent)) = number_parts(text) else {
        return true;
    };
    let digits = whole.trim_start_matches('0').len() + fraction.len();
    let digits = if whole.trim_start_matches('0').is_empty() {
        fraction.trim_start_matches('0').len()
    } else {
        digits
    };
    let scale = i64::try_from(fraction.len())
        .unwrap_or(i64::MAX)
        .saturating_sub(exponent);
    let digits = u64::try_from(digits.max(1)).unwrap_or(u64::MAX);
    let precision = if scale > 0 {
        digits.max(scale.unsigned_abs())
    } else {
        digits
    };
    scale >= DECIMAL_SCALE_MIN && precision <= DECIMAL_DIGITS_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_in_range_stay_and_others_in_exponent_form_become_floats() {
        for text in ["1e30", "1.5e-5", "12.25", "1e76", "1e-76", "1e128", "0.0e0"] {
            assert!(fits_a_decimal(text), "{text}");
        }
        for text in ["1e308", "1e-308", "1e129", "1.5e-80"] {
            assert!(!fits_a_decimal(text), "{text}");
        }
    }

    #[test]
    fn whole_numbers_in_exponent_form_are_written_out() {
        for (text, digits) in [
            ("1e5", Some("100000")),
            ("1.5e3", Some("1500")),
            ("0012.50e4", Some("125000")),
            ("0.0e3", Some("0")),
            ("1.25e2", None),
            ("1.5e1", None),
            ("1e-5", None),
            ("1e0", None),
            ("1e14", Some("100000000000000")),
            ("9.99e14", Some("999000000000000")),
            ("1e15", None),
            ("1e75", None),
        ] {
            assert_eq!(whole_number_digits(text).as_deref(), digits, "{text}");
        }
    }
}
