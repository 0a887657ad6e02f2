//! Evaluation of DataFusion scalar expressions over batches of rows.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::DFSchema;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};
pub use rockstream_plan::arrow_types::datafusion_error;
use rockstream_types::{Datum, Row, RsError, RsResult, SqlType};

use crate::arrow_rows::{array_to_datums, rows_to_batch};

/// Expressions compiled against one input schema.
#[derive(Debug)]
pub struct CompiledExprs {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    input_types: Vec<SqlType>,
    arrow_schema: SchemaRef,
}

impl CompiledExprs {
    pub fn compile(
        exprs: &[Expr],
        input_schema: &DFSchema,
        input_types: Vec<SqlType>,
    ) -> RsResult<Self> {
        let props = ExecutionProps::new();
        let context = PhysicalPlanningContext::default();
        let exprs = exprs
            .iter()
            .map(|expr| {
                create_physical_expr(expr, input_schema, &props, &context).map_err(datafusion_error)
            })
            .collect::<RsResult<Vec<_>>>()?;
        Ok(CompiledExprs {
            exprs,
            input_types,
            arrow_schema: Arc::new(input_schema.as_arrow().clone()),
        })
    }

    /// Evaluates every expression over `rows`, one array per expression.
    pub fn evaluate(&self, rows: &[&Row]) -> RsResult<Vec<ArrayRef>> {
        let batch = rows_to_batch(rows, &self.input_types, &self.arrow_schema)?;
        self.exprs
            .iter()
            .map(|expr| {
                let value = expr.evaluate(&batch).map_err(datafusion_error)?;
                value.into_array(rows.len()).map_err(datafusion_error)
            })
            .collect()
    }

    /// Evaluates the expressions as output columns of the given types.
    pub fn evaluate_rows(&self, rows: &[&Row], output_types: &[SqlType]) -> RsResult<Vec<Row>> {
        let arrays = self.evaluate(rows)?;
        let mut out: Vec<Row> = (0..rows.len())
            .map(|_| Vec::with_capacity(arrays.len()))
            .collect();
        for (array, sql_type) in arrays.iter().zip(output_types) {
            for (row, datum) in out.iter_mut().zip(array_to_datums(array, *sql_type)?) {
                row.push(datum);
            }
        }
        Ok(out)
    }

    /// Evaluates the single predicate: true only where it is TRUE (not NULL).
    pub fn evaluate_predicate(&self, rows: &[&Row]) -> RsResult<Vec<bool>> {
        let arrays = self.evaluate(rows)?;
        let array = arrays
            .first()
            .ok_or_else(|| RsError::internal("predicate without expression"))?;
        let booleans = array
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| RsError::internal("predicate did not evaluate to boolean"))?;
        Ok((0..booleans.len())
            .map(|i| booleans.is_valid(i) && booleans.value(i))
            .collect())
    }
}

/// True when any of the given columns is NULL.
pub fn any_null(row: &Row, columns: &[usize]) -> bool {
    columns
        .iter()
        .any(|column| matches!(row[*column], Datum::Null))
}
