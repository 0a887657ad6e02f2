//! PostgreSQL functions DataFusion lacks: `mod(a, b)`, `pg_typeof(x)`,
//! `sign(x)` (DataFusion's `signum`) and the aggregate `variance(x)`
//! (DataFusion's `var_samp`).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::type_coercion::binary::BinaryTypeCoercer;
use datafusion::logical_expr::{
    binary_expr, AggregateUDF, ColumnarValue, Expr, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use rockstream_plan::arrow_types::{arrow_error, sql_type_of};

use crate::columnar::invoke_on_arrays;

/// The scalar functions of this module.
pub static FUNCTIONS: LazyLock<[Arc<ScalarUDF>; 2]> = LazyLock::new(|| {
    [
        Arc::new(ScalarUDF::from(Modulo {
            signature: Signature::user_defined(Volatility::Immutable),
        })),
        Arc::new(ScalarUDF::from(TypeOf {
            signature: Signature::any(1, Volatility::Immutable),
        })),
    ]
});

/// `sign(x)`: PostgreSQL's name for DataFusion's `signum`.
pub fn sign() -> ScalarUDF {
    datafusion::functions::math::signum()
        .as_ref()
        .clone()
        .with_aliases(["sign"])
}

/// `variance(x)`: PostgreSQL's name for the sample variance.
pub fn variance() -> AggregateUDF {
    datafusion::functions_aggregate::variance::var_samp_udaf()
        .as_ref()
        .clone()
        .with_aliases(["variance"])
}

/// `mod(a, b)`: `a % b`, with the operator's types and errors.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Modulo {
    signature: Signature,
}

impl ScalarUDFImpl for Modulo {
    fn name(&self) -> &str {
        "mod"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arguments: &[DataType]) -> Result<Vec<DataType>> {
        let [dividend, divisor] = arguments else {
            return plan_err!("mod takes two arguments");
        };
        if !(dividend.is_numeric() || dividend.is_null())
            || !(divisor.is_numeric() || divisor.is_null())
        {
            return plan_err!("function mod({dividend}, {divisor}) does not exist");
        }
        let (dividend, divisor) =
            BinaryTypeCoercer::new(dividend, &Operator::Modulo, divisor).get_input_types()?;
        Ok(vec![dividend, divisor])
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        let [dividend, divisor] = arguments else {
            return plan_err!("mod takes two arguments");
        };
        BinaryTypeCoercer::new(dividend, &Operator::Modulo, divisor).get_result_type()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_on_arrays(&args.args, |arrays| {
            numeric::rem(&arrays[0], &arrays[1]).map_err(arrow_error)
        })
    }

    /// Plans as the `%` operator once the arguments are coerced.
    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        match <[Expr; 2]>::try_from(args) {
            Ok([dividend, divisor]) => Ok(ExprSimplifyResult::Simplified(binary_expr(
                dividend,
                Operator::Modulo,
                divisor,
            ))),
            Err(args) => Ok(ExprSimplifyResult::Original(args)),
        }
    }
}

/// `pg_typeof(x)`: the name of `x`'s PostgreSQL type, as `format_type`
/// spells it without modifiers (`numeric`, `timestamp without time zone`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct TypeOf {
    signature: Signature,
}

impl ScalarUDFImpl for TypeOf {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(argument) = args.args.first() else {
            return exec_err!("pg_typeof takes one argument");
        };
        let name = match argument.data_type() {
            DataType::Null => "unknown".to_string(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".to_string(),
            other => match sql_type_of(&other) {
                Ok(sql_type) => {
                    let spelled = sql_type.pg_name();
                    match spelled.split_once('(') {
                        Some((base, _)) => base.to_string(),
                        None => spelled,
                    }
                }
                Err(_) => return exec_err!("pg_typeof: no PostgreSQL type for {other}"),
            },
        };
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}
