//! Scalar functions written over whole Arrow arrays.

use datafusion::arrow::array::ArrayRef;
use datafusion::common::{Result, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::ColumnarValue;
use rockstream_types::RsResult;

/// Runs `f` over `args` as arrays; a call whose arguments are all scalars
/// gives a scalar, as DataFusion expects of a constant.
pub(crate) fn invoke_on_arrays(
    args: &[ColumnarValue],
    f: impl FnOnce(&[ArrayRef]) -> RsResult<ArrayRef>,
) -> Result<ColumnarValue> {
    let scalar = args
        .iter()
        .all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
    let arrays = ColumnarValue::values_to_arrays(args)?;
    let result = f(&arrays).map_err(|error| DataFusionError::External(Box::new(error)))?;
    if scalar {
        return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
            &result, 0,
        )?));
    }
    Ok(ColumnarValue::Array(result))
}
