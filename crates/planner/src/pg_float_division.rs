//! Float division that fails on a zero divisor, as PostgreSQL's does.
//!
//! Arrow divides floats as IEEE 754 does: `1 / 0.0::float8` gave
//! `Infinity` and `0 / 0.0::float8` `NaN`, where PostgreSQL raises
//! "division by zero" (SQLSTATE 22012). [`FloatDivision`] checks the
//! divisor first; `crate::pg_numeric::PostgresDivision` plans float
//! division as it. Infinite or NaN operands still divide as before
//! (`'inf'::float8 / 2` is `Infinity`, `'NaN'::float8 / 0` is `NaN`, as in
//! PostgreSQL).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::{DataType, Float32Type, Float64Type};
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use rockstream_plan::arrow_types::arrow_error;
use rockstream_types::error::{codes, RsError};

use crate::columnar::invoke_on_arrays;

pub(crate) static DIVISION: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::from(FloatDivision {
        signature: Signature::any(2, Volatility::Immutable),
    }))
});

/// `pg_float_div(a, b)`: `a / b`, failing when `b` is zero.
#[derive(Debug, PartialEq, Eq, Hash)]
struct FloatDivision {
    signature: Signature,
}

impl ScalarUDFImpl for FloatDivision {
    fn name(&self) -> &str {
        "pg_float_div"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        Ok(arguments.first().cloned().unwrap_or(DataType::Float64))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_on_arrays(&args.args, |arrays| {
            let (dividend, divisor) = (&arrays[0], &arrays[1]);
            let value = |array: &ArrayRef, row: usize| match array.data_type() {
                DataType::Float32 => f64::from(array.as_primitive::<Float32Type>().value(row)),
                _ => array.as_primitive::<Float64Type>().value(row),
            };
            // NaN / 0 is NaN in PostgreSQL too.
            let divides_by_zero = (0..divisor.len()).any(|row| {
                divisor.is_valid(row)
                    && dividend.is_valid(row)
                    && value(divisor, row) == 0.0
                    && !value(dividend, row).is_nan()
            });
            if divides_by_zero {
                return Err(RsError::new(&codes::DIVISION_BY_ZERO, "division by zero"));
            }
            numeric::div(dividend, divisor).map_err(arrow_error)
        })
    }
}
