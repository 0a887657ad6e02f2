//! Evaluation of DataFusion scalar expressions over batches of rows.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::DFSchema;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};
pub use rockstream_plan::arrow_types::datafusion_error;
use rockstream_types::{Datum, Row, RsError, RsResult, SqlType};

use crate::arrow_rows::{array_to_datums, column_to_array, rows_to_batch};

/// Expressions compiled against one input schema.
///
/// Only the input columns some expression reads are converted to Arrow,
/// and an expression that is a bare column reference is answered from the
/// rows directly: a projection (`SELECT a, b FROM ...`) never touches
/// Arrow at all.
#[derive(Debug)]
pub struct CompiledExprs {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    /// Per expression: the input column it is, when it is just a column.
    bare_columns: Vec<Option<usize>>,
    /// Per input column: whether an expression that is not a bare column
    /// reads it (only those go to Arrow).
    computed_reads: Vec<bool>,
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
        let bare_columns: Vec<Option<usize>> = exprs
            .iter()
            .map(|expr| {
                let column = expr.downcast_ref::<Column>()?;
                (column.index() < input_types.len()).then_some(column.index())
            })
            .collect();
        let mut computed_reads = vec![false; input_types.len()];
        for (expr, bare) in exprs.iter().zip(&bare_columns) {
            if bare.is_none() {
                for column in collect_columns(expr) {
                    if let Some(read) = computed_reads.get_mut(column.index()) {
                        *read = true;
                    }
                }
            }
        }
        Ok(CompiledExprs {
            exprs,
            bare_columns,
            computed_reads,
            input_types,
            arrow_schema: Arc::new(input_schema.as_arrow().clone()),
        })
    }

    /// Evaluates the expressions that are not bare columns (`None` in
    /// their place), each as one array over `rows`.
    fn evaluate_computed(&self, rows: &[&Row]) -> RsResult<Vec<Option<ArrayRef>>> {
        let batch = rows_to_batch(
            rows,
            &self.input_types,
            &self.arrow_schema,
            &self.computed_reads,
        )?;
        self.exprs
            .iter()
            .zip(&self.bare_columns)
            .map(|(expr, bare)| {
                if bare.is_some() {
                    return Ok(None);
                }
                let value = expr.evaluate(&batch).map_err(datafusion_error)?;
                Ok(Some(
                    value.into_array(rows.len()).map_err(datafusion_error)?,
                ))
            })
            .collect()
    }

    /// Evaluates the expressions as output columns of the given types.
    pub fn evaluate_rows(&self, rows: &[&Row], output_types: &[SqlType]) -> RsResult<Vec<Row>> {
        // A bare column keeps its value only where its type is unchanged.
        let copies: Vec<Option<usize>> = self
            .bare_columns
            .iter()
            .zip(output_types)
            .map(|(bare, output_type)| {
                bare.filter(|column| self.input_types[*column] == *output_type)
            })
            .collect();
        if copies.iter().all(Option::is_some) {
            return Ok(rows
                .iter()
                .map(|row| copies.iter().flatten().map(|c| row[*c].clone()).collect())
                .collect());
        }
        let arrays = self.evaluate_computed(rows)?;
        let mut out: Vec<Row> = (0..rows.len())
            .map(|_| Vec::with_capacity(arrays.len()))
            .collect();
        for (index, (array, sql_type)) in arrays.iter().zip(output_types).enumerate() {
            match (array, copies[index], self.bare_columns[index]) {
                (Some(array), _, _) => {
                    for (row, datum) in out.iter_mut().zip(array_to_datums(array, *sql_type)?) {
                        row.push(datum);
                    }
                }
                (None, Some(column), _) => {
                    for (row, input) in out.iter_mut().zip(rows) {
                        row.push(input[column].clone());
                    }
                }
                (None, None, Some(column)) => {
                    // A bare column whose type changes: convert through Arrow.
                    let array = column_to_array(rows, column, self.input_types[column])?;
                    for (row, datum) in out.iter_mut().zip(array_to_datums(&array, *sql_type)?) {
                        row.push(datum);
                    }
                }
                (None, None, None) => {
                    return Err(RsError::internal(
                        "expression neither computed nor a column",
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Evaluates the single expression as one array over `rows`, whatever
    /// its type (a list, for a series).
    pub fn evaluate_array(&self, rows: &[&Row]) -> RsResult<ArrayRef> {
        match self.bare_columns.first() {
            Some(Some(column)) => column_to_array(rows, *column, self.input_types[*column]),
            _ => self
                .evaluate_computed(rows)?
                .into_iter()
                .next()
                .flatten()
                .ok_or_else(|| RsError::internal("no expression to evaluate")),
        }
    }

    /// Evaluates the single predicate: true only where it is TRUE (not NULL).
    pub fn evaluate_predicate(&self, rows: &[&Row]) -> RsResult<Vec<bool>> {
        let arrays = match self.bare_columns.first() {
            // A boolean column used as the predicate.
            Some(Some(column)) => vec![Some(column_to_array(
                rows,
                *column,
                self.input_types[*column],
            )?)],
            _ => self.evaluate_computed(rows)?,
        };
        let array = arrays
            .first()
            .and_then(Option::as_ref)
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

#[cfg(test)]
mod tests {
    //! Goal: bare columns, computed expressions and mixtures of both
    //! evaluate to the same values, whichever path (direct copy or Arrow)
    //! each expression takes.
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::logical_expr::{col, lit};

    use super::*;

    fn compiled(exprs: &[Expr]) -> CompiledExprs {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Utf8, true),
            Field::new("c", DataType::Boolean, true),
        ]);
        let schema = DFSchema::try_from(schema).expect("schema");
        let types = vec![SqlType::Int32, SqlType::Text, SqlType::Bool];
        CompiledExprs::compile(exprs, &schema, types).expect("compiles")
    }

    fn rows() -> Vec<Row> {
        vec![
            vec![Datum::Int32(1), Datum::Text("x".into()), Datum::Bool(true)],
            vec![Datum::Null, Datum::Text("y".into()), Datum::Null],
            vec![Datum::Int32(3), Datum::Null, Datum::Bool(false)],
        ]
    }

    fn evaluate(exprs: &[Expr], output_types: &[SqlType]) -> Vec<Row> {
        let rows = rows();
        let refs: Vec<&Row> = rows.iter().collect();
        compiled(exprs)
            .evaluate_rows(&refs, output_types)
            .expect("evaluates")
    }

    #[test]
    fn projections_copy_columns() {
        let out = evaluate(&[col("b"), col("a")], &[SqlType::Text, SqlType::Int32]);
        let expected: Vec<Row> = rows()
            .into_iter()
            .map(|row| vec![row[1].clone(), row[0].clone()])
            .collect();
        assert_eq!(out, expected);
    }

    #[test]
    fn computed_and_copied_columns_mix() {
        let out = evaluate(
            &[col("b"), col("a") + lit(10i32), col("a")],
            &[SqlType::Text, SqlType::Int32, SqlType::Int64],
        );
        // `a` as bigint takes the Arrow path (its type changes).
        let expected: Vec<Row> = vec![
            vec![Datum::Text("x".into()), Datum::Int32(11), Datum::Int64(1)],
            vec![Datum::Text("y".into()), Datum::Null, Datum::Null],
            vec![Datum::Null, Datum::Int32(13), Datum::Int64(3)],
        ];
        assert_eq!(out, expected);
    }

    #[test]
    fn predicates_on_columns_and_expressions() {
        let rows = rows();
        let refs: Vec<&Row> = rows.iter().collect();
        let on_column = compiled(&[col("c")]).evaluate_predicate(&refs);
        assert_eq!(on_column.expect("evaluates"), vec![true, false, false]);
        let computed = compiled(&[col("a").gt(lit(2i32))]).evaluate_predicate(&refs);
        assert_eq!(computed.expect("evaluates"), vec![false, false, true]);
    }
}
