//! Float arithmetic that fails as PostgreSQL's does.
//!
//! Arrow computes floats as IEEE 754 does: `1e308::float8 * 10` gave
//! `Infinity`, `1e-300::float8 * 1e-300` gave `0`, `1 / 0.0::float8`
//! `Infinity` and `0 / 0.0::float8` `NaN`. PostgreSQL raises "value out of
//! range: overflow" when a result of finite operands is infinite, "value
//! out of range: underflow" when a product or quotient of non-zero finite
//! operands is zero (both SQLSTATE 22003), and "division by zero" (22012)
//! for a zero divisor. [`FloatArithmetic`] computes with Arrow's kernels and
//! then checks for those; `crate::pg_numeric::PostgresArithmetic` plans float
//! `+`, `-`, `*` and `/` as its functions. Infinite or NaN operands compute
//! as before (`'inf'::float8 / 2` is `Infinity`, `'NaN'::float8 / 0` is
//! `NaN`, as in PostgreSQL).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::{DataType, Float32Type, Float64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use rockstream_plan::arrow_types::arrow_error;
use rockstream_types::error::{codes, RsError};
use rockstream_types::RsResult;

use crate::columnar::invoke_on_arrays;

/// The function computing float `operator` (`+`, `-`, `*` or `/`), if any.
pub(crate) fn function_of(operator: Operator) -> Option<&'static Arc<ScalarUDF>> {
    match operator {
        Operator::Plus => Some(&ADDITION),
        Operator::Minus => Some(&SUBTRACTION),
        Operator::Multiply => Some(&MULTIPLICATION),
        Operator::Divide => Some(&DIVISION),
        _ => None,
    }
}

static ADDITION: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| udf(Operator::Plus));
static SUBTRACTION: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| udf(Operator::Minus));
static MULTIPLICATION: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| udf(Operator::Multiply));
static DIVISION: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| udf(Operator::Divide));

fn udf(operator: Operator) -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::from(FloatArithmetic {
        operator,
        signature: Signature::any(2, Volatility::Immutable),
    }))
}

/// `pg_float_add(a, b)` … `pg_float_div(a, b)`: `a op b` over two floats
/// of one type, failing where PostgreSQL's fails. (The names are stored in
/// views' state layouts: `rockstream_plan` shows the first three as their
/// operators there, as views created before them computed them.)
#[derive(Debug, PartialEq, Eq, Hash)]
struct FloatArithmetic {
    operator: Operator,
    signature: Signature,
}

impl ScalarUDFImpl for FloatArithmetic {
    fn name(&self) -> &str {
        match self.operator {
            Operator::Plus => "pg_float_add",
            Operator::Minus => "pg_float_sub",
            Operator::Multiply => "pg_float_mul",
            _ => "pg_float_div",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        Ok(arguments.first().cloned().unwrap_or(DataType::Float64))
    }

    /// `x * 1` and `1 * x` are `x`, as DataFusion simplified the operator:
    /// views planned before keep their state layout, and the column its
    /// fast path.
    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        let is_one = |expr: &Expr| {
            matches!(
                expr,
                Expr::Literal(ScalarValue::Float64(Some(value)), _) if *value == 1.0
            ) || matches!(
                expr,
                Expr::Literal(ScalarValue::Float32(Some(value)), _) if *value == 1.0
            )
        };
        if self.operator == Operator::Multiply {
            if let [left, right] = args.as_slice() {
                if is_one(right) {
                    return Ok(ExprSimplifyResult::Simplified(left.clone()));
                }
                if is_one(left) {
                    return Ok(ExprSimplifyResult::Simplified(right.clone()));
                }
            }
        }
        Ok(ExprSimplifyResult::Original(args))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_on_arrays(&args.args, |arrays| {
            compute(self.operator, &arrays[0], &arrays[1])
        })
    }
}

/// `left operator right`, checked as PostgreSQL's `float8pl`, `float8mi`,
/// `float8mul` and `float8div` check.
fn compute(operator: Operator, left: &ArrayRef, right: &ArrayRef) -> RsResult<ArrayRef> {
    let value = |array: &ArrayRef, row: usize| match array.data_type() {
        DataType::Float32 => f64::from(array.as_primitive::<Float32Type>().value(row)),
        _ => array.as_primitive::<Float64Type>().value(row),
    };
    let valid = |row: usize| left.is_valid(row) && right.is_valid(row);
    if operator == Operator::Divide {
        // NaN / 0 is NaN in PostgreSQL too.
        let divides_by_zero = (0..right.len())
            .any(|row| valid(row) && value(right, row) == 0.0 && !value(left, row).is_nan());
        if divides_by_zero {
            return Err(RsError::new(&codes::DIVISION_BY_ZERO, "division by zero"));
        }
    }
    let result = match operator {
        Operator::Plus => numeric::add(left, right),
        Operator::Minus => numeric::sub(left, right),
        Operator::Multiply => numeric::mul(left, right),
        _ => numeric::div(left, right),
    }
    .map_err(arrow_error)?;
    // Most results are finite and non-zero: those need no look at their
    // operands.
    let suspect = match result.data_type() {
        DataType::Float32 => result
            .as_primitive::<Float32Type>()
            .values()
            .iter()
            .any(|value| value.is_infinite() || *value == 0.0),
        _ => result
            .as_primitive::<Float64Type>()
            .values()
            .iter()
            .any(|value| value.is_infinite() || *value == 0.0),
    };
    if !suspect {
        return Ok(result);
    }
    for row in (0..result.len()).filter(|row| valid(*row)) {
        let (a, b, c) = (value(left, row), value(right, row), value(&result, row));
        if c.is_infinite() && a.is_finite() && b.is_finite() {
            return Err(out_of_range("overflow"));
        }
        let underflow = match operator {
            Operator::Multiply => c == 0.0 && a != 0.0 && b != 0.0,
            Operator::Divide => c == 0.0 && a != 0.0 && !b.is_infinite(),
            _ => false,
        };
        if underflow {
            return Err(out_of_range("underflow"));
        }
    }
    Ok(result)
}

fn out_of_range(problem: &str) -> RsError {
    RsError::new(
        &codes::NUMERIC_OUT_OF_RANGE,
        format!("value out of range: {problem}"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    //! Goal: float arithmetic answers as IEEE 754 where PostgreSQL does and
    //! fails where PostgreSQL's fails. Method: each operator over edge values.
    use super::*;
    use datafusion::arrow::array::{Float32Array, Float64Array};

    fn run(operator: Operator, a: f64, b: f64) -> RsResult<f64> {
        let left: ArrayRef = Arc::new(Float64Array::from(vec![a]));
        let right: ArrayRef = Arc::new(Float64Array::from(vec![b]));
        let result = compute(operator, &left, &right)?;
        Ok(result.as_primitive::<Float64Type>().value(0))
    }

    fn code(result: RsResult<f64>) -> &'static str {
        result.unwrap_err().code.sqlstate
    }

    #[test]
    fn results_beyond_the_float_range_fail_as_in_postgresql() {
        assert_eq!(code(run(Operator::Multiply, 1e308, 10.0)), "22003");
        assert_eq!(code(run(Operator::Plus, 1e308, 1e308)), "22003");
        assert_eq!(code(run(Operator::Minus, -1e308, 1e308)), "22003");
        assert_eq!(code(run(Operator::Divide, 1e308, 1e-10)), "22003");
        assert_eq!(code(run(Operator::Multiply, 1e-300, 1e-300)), "22003");
        assert_eq!(code(run(Operator::Divide, 1e-300, 1e300)), "22003");
        assert_eq!(code(run(Operator::Divide, 1.0, 0.0)), "22012");
    }

    #[test]
    fn infinities_nans_and_zeros_compute_as_ieee_754() {
        assert_eq!(
            run(Operator::Plus, f64::INFINITY, 1.0).unwrap(),
            f64::INFINITY
        );
        assert!(run(Operator::Minus, f64::INFINITY, f64::INFINITY)
            .unwrap()
            .is_nan());
        assert_eq!(run(Operator::Multiply, 0.0, 1e300).unwrap(), 0.0);
        assert_eq!(run(Operator::Divide, 0.0, 5.0).unwrap(), 0.0);
        assert_eq!(run(Operator::Divide, 1.0, f64::INFINITY).unwrap(), 0.0);
        assert!(run(Operator::Divide, f64::NAN, 0.0).unwrap().is_nan());
        assert_eq!(run(Operator::Plus, 1.5, 2.25).unwrap(), 3.75);
    }

    /// A table `t (id bigint, a float8, b float8, r real)`.
    fn floats() -> crate::resolver::OneTable {
        use datafusion::arrow::datatypes::{Field, Schema};
        crate::resolver::OneTable(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("a", DataType::Float64, true),
            Field::new("b", DataType::Float64, true),
            Field::new("r", DataType::Float32, true),
        ]))
    }

    #[tokio::test]
    async fn views_keep_the_state_layouts_they_had_with_plain_float_operators() {
        // Goal: a view created before float arithmetic was range-checked
        // is maintained after (its stored layout equals the new plan's).
        // Method: each view planned with the rule and without it.
        let checked = crate::new_context(Arc::new(floats()));
        let state = checked.state();
        let rules = state
            .analyzer()
            .rules
            .iter()
            .filter(|rule| rule.name() != "postgres_arithmetic")
            .cloned()
            .collect();
        let plain = datafusion::prelude::SessionContext::new_with_state(
            datafusion::execution::SessionStateBuilder::new_from_existing(state)
                .with_analyzer_rules(rules)
                .build(),
        );
        let views = [
            "SELECT id, a * b FROM t",
            "SELECT id, a + b AS s, a - b AS d, -a * 2 FROM t",
            "SELECT id, (a + b) * (a - b), a * b + r * r FROM t",
            "SELECT id, a * 1.0, 1 * a AS one, a * 1.5 FROM t",
            "SELECT a + b, count(*) FROM t GROUP BY a + b",
            "SELECT id FROM t WHERE a * 2 > b + 1",
            "SELECT sum(a * b), max(a - 1) FROM t",
            "SELECT x.id, x.a * y.b FROM t AS x JOIN t AS y ON x.a + 1 = y.b",
            "SELECT r * r, r + 1 FROM t",
        ];
        for view in views {
            let planned = crate::plan_view(&checked, 7, view).await.unwrap();
            let before = crate::plan_view(&plain, 7, view).await.unwrap();
            assert_eq!(planned.state_layout(), before.state_layout(), "{view}");
            assert!(
                format!("{planned:?}").contains("FloatArithmetic"),
                "{view} is not range-checked"
            );
        }
    }

    #[test]
    fn reals_overflow_at_their_own_range() {
        let left: ArrayRef = Arc::new(Float32Array::from(vec![1e38_f32, 2.0]));
        let right: ArrayRef = Arc::new(Float32Array::from(vec![10.0_f32, 3.0]));
        let error = compute(Operator::Multiply, &left, &right).unwrap_err();
        assert_eq!(error.code.sqlstate, "22003");
        let result = compute(Operator::Multiply, &right, &right).unwrap();
        assert_eq!(result.as_primitive::<Float32Type>().value(1), 9.0);
    }
}
