//! Scalar subqueries that do not aggregate, with PostgreSQL's meaning.
//!
//! PostgreSQL evaluates `(SELECT x FROM t WHERE t.k = o.k)` for each outer
//! row: NULL when it finds no row, the value when it finds one, and the
//! error "more than one row returned by a subquery used as an expression"
//! (SQLSTATE 21000) when it finds more. DataFusion decorrelates only
//! subqueries that aggregate, so [`crate::pg_compat`] rewrites such a
//! subquery into one that does:
//!
//! ```sql
//! rs_subquery_value((SELECT rs_subquery_rows(x) FROM t WHERE t.k = o.k))
//! ```
//!
//! The aggregate `rs_subquery_rows` keeps a row's value together with how
//! many rows it saw (a struct), and `rs_subquery_value` raises the error
//! only for an outer row whose subquery saw more than one. Raising it in the
//! aggregate would be wrong: a decorrelated subquery is aggregated per
//! correlation key, and a key with many rows that no outer row asks for must
//! not fail the query.

use std::mem::size_of_val;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StructArray};
use datafusion::arrow::compute::{is_null, nullif};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, UInt64Type};
use datafusion::common::scalar::ScalarStructBuilder;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DataFusionResult};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use rockstream_types::{codes, RsError};

/// The aggregate: a subquery's value and row count, as a struct.
pub(crate) const ROWS_FUNCTION: &str = "rs_subquery_rows";
/// The scalar function: the value, or the error when there were many rows.
pub(crate) const VALUE_FUNCTION: &str = "rs_subquery_value";

pub(crate) static SUBQUERY_ROWS: LazyLock<AggregateUDF> =
    LazyLock::new(|| AggregateUDF::from(SubqueryRows::default()));
pub(crate) static SUBQUERY_VALUE: LazyLock<ScalarUDF> =
    LazyLock::new(|| ScalarUDF::from(SubqueryValue::default()));

/// The struct `rs_subquery_rows` returns for values of `value_type`.
fn counted_fields(value_type: &DataType) -> Fields {
    Fields::from(vec![
        Field::new("value", value_type.clone(), true),
        Field::new("rows", DataType::UInt64, false),
    ])
}

fn more_than_one_row() -> DataFusionError {
    DataFusionError::External(Box::new(RsError::new(
        &codes::SUBQUERY_MORE_THAN_ONE_ROW,
        "more than one row returned by a subquery used as an expression",
    )))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SubqueryRows {
    signature: Signature,
}

impl Default for SubqueryRows {
    fn default() -> Self {
        SubqueryRows {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for SubqueryRows {
    fn name(&self) -> &str {
        ROWS_FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> DataFusionResult<DataType> {
        let value_type = arguments.first().cloned().unwrap_or(DataType::Null);
        Ok(DataType::Struct(counted_fields(&value_type)))
    }

    fn accumulator(&self, arguments: AccumulatorArgs) -> DataFusionResult<Box<dyn Accumulator>> {
        let value_type = match arguments.return_field.data_type() {
            DataType::Struct(fields) => fields[0].data_type().clone(),
            other => {
                return Err(DataFusionError::Internal(format!(
                    "{ROWS_FUNCTION} returns a struct, not {other}"
                )))
            }
        };
        Ok(Box::new(RowsAccumulator {
            value: ScalarValue::try_from(&value_type)?,
            value_type,
            rows: 0,
        }))
    }

    fn state_fields(&self, arguments: StateFieldsArgs) -> DataFusionResult<Vec<FieldRef>> {
        let value_type = match arguments.return_field.data_type() {
            DataType::Struct(fields) => fields[0].data_type().clone(),
            other => other.clone(),
        };
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[value]", arguments.name),
                value_type,
                true,
            )),
            Arc::new(Field::new(
                format!("{}[rows]", arguments.name),
                DataType::UInt64,
                false,
            )),
        ])
    }
}

#[derive(Debug)]
struct RowsAccumulator {
    value_type: DataType,
    /// The last row's value (the only one, while `rows` ≤ 1).
    value: ScalarValue,
    rows: u64,
}

impl RowsAccumulator {
    fn add(&mut self, values: &ArrayRef, index: usize, rows: u64) -> DataFusionResult<()> {
        self.rows += rows;
        if self.rows == 1 {
            self.value = ScalarValue::try_from_array(values, index)?;
        }
        Ok(())
    }
}

impl Accumulator for RowsAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DataFusionResult<()> {
        let Some(values) = values.first() else {
            return Ok(());
        };
        // Only the first row's value can be the answer: more rows are an
        // error (raised by `rs_subquery_value`, if the row is asked for).
        if !values.is_empty() {
            self.add(values, 0, values.len() as u64)?;
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DataFusionResult<()> {
        let [values, rows] = states else {
            return Err(DataFusionError::Internal(format!(
                "{ROWS_FUNCTION} keeps two state columns"
            )));
        };
        let rows = rows.as_primitive::<UInt64Type>();
        for index in 0..rows.len() {
            let count = rows.value(index);
            if count > 0 {
                self.add(values, index, count)?;
            }
        }
        Ok(())
    }

    fn state(&mut self) -> DataFusionResult<Vec<ScalarValue>> {
        Ok(vec![
            self.value.clone(),
            ScalarValue::UInt64(Some(self.rows)),
        ])
    }

    fn evaluate(&mut self) -> DataFusionResult<ScalarValue> {
        let fields = counted_fields(&self.value_type);
        ScalarStructBuilder::new()
            .with_scalar(fields[0].clone(), self.value.clone())
            .with_scalar(fields[1].clone(), ScalarValue::UInt64(Some(self.rows)))
            .build()
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.value.size() - size_of_val(&self.value)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SubqueryValue {
    signature: Signature,
}

impl Default for SubqueryValue {
    fn default() -> Self {
        SubqueryValue {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SubqueryValue {
    fn name(&self) -> &str {
        VALUE_FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> DataFusionResult<DataType> {
        match arguments.first() {
            Some(DataType::Struct(fields)) if fields.len() == 2 => {
                Ok(fields[0].data_type().clone())
            }
            other => Err(DataFusionError::Plan(format!(
                "{VALUE_FUNCTION} takes the result of {ROWS_FUNCTION}, not {other:?}"
            ))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DataFusionResult<ColumnarValue> {
        let Some(argument) = args.args.first() else {
            return Err(DataFusionError::Plan(format!(
                "{VALUE_FUNCTION} takes one argument"
            )));
        };
        let (counted, scalar) = match argument {
            ColumnarValue::Scalar(value) => (value.to_array_of_size(1)?, true),
            ColumnarValue::Array(array) => (array.clone(), false),
        };
        let counted: &StructArray = counted.as_struct();
        let rows = counted.column(1).as_primitive::<UInt64Type>();
        // An outer row without a match (NULL struct) has the value NULL; no
        // outer row at all asks for no value.
        let missing = is_null(counted)?;
        let asked = if scalar {
            args.number_rows.min(1)
        } else {
            counted.len()
        };
        for index in 0..asked {
            if !missing.value(index) && rows.value(index) > 1 {
                return Err(more_than_one_row());
            }
        }
        let values = nullif(counted.column(0), &missing)?;
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &values, 0,
            )?));
        }
        Ok(ColumnarValue::Array(values))
    }
}
