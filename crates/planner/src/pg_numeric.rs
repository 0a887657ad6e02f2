//! `numeric / numeric` with PostgreSQL's result digits.
//!
//! Arrow divides decimals at the dividend's scale plus 4 and truncates:
//! `1 / 3::numeric` gave `0.3333`. PostgreSQL picks the quotient's scale
//! from the operands' values, so that it keeps at least 16 significant
//! digits (and never fewer fraction digits than either operand shows), and
//! rounds half away from zero: `0.33333333333333333333`, `2.5000000000000000`.
//!
//! An Arrow column has one scale for all its rows, so this rule plans the
//! division as [`NumericDivision`], whose result has
//! `max(16, dividend scale, divisor scale)` fraction digits. Each quotient is
//! rounded at PostgreSQL's scale for its operands, or at the column's scale
//! where that is smaller. A quotient of 1 or more therefore has exactly
//! PostgreSQL's value; a smaller one is rounded at the 16th fraction digit
//! where PostgreSQL keeps 16 significant digits. The trailing zeros a
//! quotient of 10 000 or more shows beyond PostgreSQL's 12 digits do not
//! change its value.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Decimal128Builder};
use datafusion::arrow::datatypes::{i256, DataType, Decimal128Type, DECIMAL128_MAX_PRECISION};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{exec_err, DFSchema, Result};
use datafusion::logical_expr::expr::BinaryExpr;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use rockstream_types::error::{codes, RsError};
use rockstream_types::RsResult;

use crate::columnar::invoke_on_arrays;
use crate::plan_rewrite::rewrite_exprs;

/// PostgreSQL's `NUMERIC_MIN_SIG_DIGITS`: a quotient keeps at least this
/// many significant digits, and a quotient column at least this many
/// fraction digits.
const MIN_SIGNIFICANT_DIGITS: i32 = 16;

static DIVISION: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::from(NumericDivision {
        signature: Signature::any(2, Volatility::Immutable),
    }))
});

/// Plans `numeric / numeric` as [`NumericDivision`], and float `+`, `-`,
/// `*` and `/` as [`crate::pg_float_arithmetic`]'s functions. Runs after
/// type coercion, which has given both operands one type.
#[derive(Debug, Default)]
pub struct PostgresArithmetic;

impl AnalyzerRule for PostgresArithmetic {
    fn name(&self) -> &str {
        "postgres_arithmetic"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_exprs(plan, &rewrite)
    }
}

fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &expr else {
        return Ok(Transformed::no(expr));
    };
    let function = match (op, left.get_type(schema), right.get_type(schema)) {
        (Operator::Divide, Ok(DataType::Decimal128(..)), Ok(DataType::Decimal128(..))) => &DIVISION,
        (op, Ok(left @ (DataType::Float32 | DataType::Float64)), Ok(right)) if left == right => {
            match crate::pg_float_arithmetic::function_of(*op) {
                Some(function) => function,
                None => return Ok(Transformed::no(expr)),
            }
        }
        _ => return Ok(Transformed::no(expr)),
    };
    Ok(Transformed::yes(
        function.call(vec![left.as_ref().clone(), right.as_ref().clone()]),
    ))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct NumericDivision {
    signature: Signature,
}

impl ScalarUDFImpl for NumericDivision {
    fn name(&self) -> &str {
        "pg_numeric_div"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        match arguments {
            [DataType::Decimal128(_, dividend), DataType::Decimal128(_, divisor)] => {
                Ok(DataType::Decimal128(
                    DECIMAL128_MAX_PRECISION,
                    quotient_scale(*dividend, *divisor),
                ))
            }
            other => exec_err!("pg_numeric_div takes two decimals, not {other:?}"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_on_arrays(&args.args, |arrays| {
            let (dividend, divisor) = (&arrays[0], &arrays[1]);
            let (DataType::Decimal128(_, dividend_scale), DataType::Decimal128(_, divisor_scale)) =
                (dividend.data_type(), divisor.data_type())
            else {
                return Err(RsError::internal("pg_numeric_div takes two decimals"));
            };
            divide_arrays(dividend, *dividend_scale, divisor, *divisor_scale)
        })
    }
}

/// The scale of a quotient column.
fn quotient_scale(dividend_scale: i8, divisor_scale: i8) -> i8 {
    (MIN_SIGNIFICANT_DIGITS as i8)
        .max(dividend_scale)
        .max(divisor_scale)
        .min(DECIMAL128_MAX_PRECISION as i8)
}

fn divide_arrays(
    dividend: &ArrayRef,
    dividend_scale: i8,
    divisor: &ArrayRef,
    divisor_scale: i8,
) -> RsResult<ArrayRef> {
    let scale = quotient_scale(dividend_scale, divisor_scale);
    let dividends = dividend.as_primitive::<Decimal128Type>();
    let divisors = divisor.as_primitive::<Decimal128Type>();
    let mut out = Decimal128Builder::with_capacity(dividends.len());
    for row in 0..dividends.len() {
        if dividends.is_null(row) || divisors.is_null(row) {
            out.append_null();
            continue;
        }
        out.append_value(divide(
            Decimal {
                mantissa: dividends.value(row),
                scale: dividend_scale,
            },
            Decimal {
                mantissa: divisors.value(row),
                scale: divisor_scale,
            },
            scale,
        )?);
    }
    let array = out
        .finish()
        .with_precision_and_scale(DECIMAL128_MAX_PRECISION, scale)
        .map_err(|error| RsError::internal(error.to_string()))?;
    Ok(Arc::new(array))
}

/// A decimal value: `mantissa / 10^scale`.
#[derive(Debug, Clone, Copy)]
struct Decimal {
    mantissa: i128,
    scale: i8,
}

impl Decimal {
    /// The weight and value of the leading base-10 000 digit, as PostgreSQL
    /// stores numerics: 12.5 is (0, 12), 12 345 is (1, 1), 0.5 is (-1, 5000).
    /// Zero is (0, 0).
    fn leading_digit(self) -> (i32, u128) {
        if self.mantissa == 0 {
            return (0, 0);
        }
        let magnitude = self.mantissa.unsigned_abs();
        let exponent = magnitude.ilog10() as i32 - i32::from(self.scale);
        let weight = exponent.div_euclid(4);
        let shift = i32::from(self.scale) + 4 * weight;
        // |shift| < 40 here: the mantissa has at most 39 digits.
        let digit = if shift >= 0 {
            magnitude / 10u128.pow(shift as u32)
        } else {
            magnitude * 10u128.pow(shift.unsigned_abs())
        };
        (weight, digit)
    }
}

/// The fraction digits PostgreSQL gives `dividend / divisor`
/// (`select_div_scale`): at least 16 significant digits, and at least as
/// many fraction digits as either operand.
fn postgres_scale(dividend: Decimal, divisor: Decimal) -> i32 {
    let (dividend_weight, dividend_digit) = dividend.leading_digit();
    let (divisor_weight, divisor_digit) = divisor.leading_digit();
    let mut quotient_weight = dividend_weight - divisor_weight;
    if dividend_digit <= divisor_digit {
        quotient_weight -= 1;
    }
    (MIN_SIGNIFICANT_DIGITS - 4 * quotient_weight)
        .max(i32::from(dividend.scale))
        .max(i32::from(divisor.scale))
        .max(0)
}

/// `dividend / divisor` as a mantissa at `scale`, rounded half away from
/// zero at PostgreSQL's scale for these operands (or at `scale`, if that is
/// smaller).
fn divide(dividend: Decimal, divisor: Decimal, scale: i8) -> RsResult<i128> {
    if divisor.mantissa == 0 {
        return Err(RsError::new(&codes::DIVISION_BY_ZERO, "division by zero"));
    }
    let overflow = || {
        RsError::new(
            &codes::NUMERIC_OUT_OF_RANGE,
            "numeric quotient out of range",
        )
    };
    let power = |exponent: i32| -> RsResult<i256> {
        i256::from_i128(10)
            .checked_pow(exponent.unsigned_abs())
            .ok_or_else(overflow)
    };
    let rounding_scale = postgres_scale(dividend, divisor).min(i32::from(scale));
    // dividend / divisor * 10^rounding_scale
    //   = dividend.mantissa * 10^(divisor.scale + rounding_scale - dividend.scale)
    //     / divisor.mantissa
    let exponent = i32::from(divisor.scale) + rounding_scale - i32::from(dividend.scale);
    let mut numerator = i256::from_i128(dividend.mantissa);
    let mut denominator = i256::from_i128(divisor.mantissa);
    if exponent >= 0 {
        numerator = numerator
            .checked_mul(power(exponent)?)
            .ok_or_else(overflow)?;
    } else {
        denominator = denominator
            .checked_mul(power(exponent)?)
            .ok_or_else(overflow)?;
    }
    let mut quotient = numerator.wrapping_div(denominator);
    let remainder = numerator.wrapping_rem(denominator);
    let twice = remainder.wrapping_abs().checked_mul(i256::from_i128(2));
    if twice.is_none_or(|twice| twice >= denominator.wrapping_abs()) {
        let negative = (numerator < i256::ZERO) != (denominator < i256::ZERO);
        quotient = if negative {
            quotient.wrapping_sub(i256::ONE)
        } else {
            quotient.wrapping_add(i256::ONE)
        };
    }
    let scaled = quotient
        .checked_mul(power(i32::from(scale) - rounding_scale)?)
        .ok_or_else(overflow)?;
    let limit = i256::from_i128(10).wrapping_pow(u32::from(DECIMAL128_MAX_PRECISION));
    if scaled.wrapping_abs() >= limit {
        return Err(overflow());
    }
    scaled.to_i128().ok_or_else(overflow)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    use super::*;

    fn decimal(text: &str) -> Decimal {
        let scale = text
            .split_once('.')
            .map_or(0, |(_, fraction)| fraction.len());
        Decimal {
            mantissa: text.replace('.', "").parse().unwrap(),
            scale: scale as i8,
        }
    }

    /// The quotient as PostgreSQL prints it, from our mantissa at `scale`
    /// and PostgreSQL's own number of fraction digits.
    fn quotient(dividend: &str, divisor: &str) -> String {
        let (dividend, divisor) = (decimal(dividend), decimal(divisor));
        let scale = quotient_scale(dividend.scale, divisor.scale);
        let mantissa = divide(dividend, divisor, scale).unwrap();
        let shown = postgres_scale(dividend, divisor).min(i32::from(scale));
        let trimmed = mantissa / 10i128.pow((i32::from(scale) - shown) as u32);
        let digits = format!(
            "{:0>width$}",
            trimmed.unsigned_abs(),
            width = shown as usize + 1
        );
        let (whole, fraction) = digits.split_at(digits.len() - shown as usize);
        let sign = if mantissa < 0 { "-" } else { "" };
        if shown == 0 {
            format!("{sign}{whole}")
        } else {
            format!("{sign}{whole}.{fraction}")
        }
    }

    #[test]
    fn quotients_match_postgres() {
        // Each right-hand side is what PostgreSQL 15 prints.
        assert_eq!(quotient("10", "4"), "2.5000000000000000");
        assert_eq!(quotient("100", "3"), "33.3333333333333333");
        assert_eq!(quotient("123456789", "7"), "17636684.142857142857");
        assert_eq!(quotient("2.5", "0.5"), "5.0000000000000000");
        assert_eq!(quotient("5", "3"), "1.6666666666666667");
        assert_eq!(quotient("-5", "3"), "-1.6666666666666667");
        assert_eq!(quotient("5", "-3"), "-1.6666666666666667");
        assert_eq!(quotient("120000.50", "1"), "120000.500000000000");
        assert_eq!(quotient("70000.25", "3"), "23333.416666666667");
        assert_eq!(quotient("2.50", "0.000005"), "500000.000000000000");
        // Below 1 PostgreSQL keeps 16 significant digits, the column 16
        // fraction digits.
        assert_eq!(quotient("1", "3"), "0.3333333333333333");
        assert_eq!(quotient("0", "7"), "0.0000000000000000");
    }

    #[test]
    fn division_by_zero_and_overflow_are_errors() {
        let one = decimal("1");
        assert_eq!(
            divide(one, decimal("0"), 16).unwrap_err().code.sqlstate,
            "22012"
        );
        let huge = Decimal {
            mantissa: 10i128.pow(37),
            scale: 0,
        };
        assert_eq!(
            divide(huge, decimal("0.001"), 16)
                .unwrap_err()
                .code
                .sqlstate,
            "22003"
        );
    }

    #[test]
    fn leading_digits_are_base_ten_thousand() {
        assert_eq!(decimal("12.5").leading_digit(), (0, 12));
        assert_eq!(decimal("12345").leading_digit(), (1, 1));
        assert_eq!(decimal("0.5").leading_digit(), (-1, 5000));
        assert_eq!(decimal("0.00012").leading_digit(), (-1, 1));
        assert_eq!(decimal("0.000012").leading_digit(), (-2, 1200));
        assert_eq!(decimal("0").leading_digit(), (0, 0));
    }
}
