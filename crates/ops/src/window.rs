//! Window functions (`… OVER (PARTITION BY … ORDER BY … [frame])`) in a
//! view, each input row with its functions' values (DESIGN §6.7).
//!
//! State is the input as a multiset in window order, laid out as the
//! top-K's (`WF op_id partition order row len(row) -> count`, blind
//! counts). A batch reads each partition it touches whole, computes every
//! function over the partition before and after the batch — DataFusion's
//! window evaluation over one sorted batch, so frames, peers and defaults
//! are DataFusion's, which follow PostgreSQL's — and emits the difference:
//! the rows whose values changed, which for a running total are the rows
//! behind the change, for `LAG` its neighbours. The cost of a change is
//! the size of its partition (read and evaluated one partition at a time,
//! one scan each, so what is held beyond the output is one partition), and
//! other partitions cost nothing; rows the
//! `ORDER BY` leaves tied are ordered by their encoding, as the top-K
//! orders them.

use std::sync::Arc;

use datafusion::arrow::compute::cast;
use datafusion::common::DFSchema;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::window::WindowExpr;
use datafusion::physical_planner::create_window_expr;
use rockstream_plan::arrow_types::{arrow_error, datafusion_error};
use rockstream_plan::SortKey;
use rockstream_types::{ObjectId, Row, RsError, RsResult, SqlType, ZSet};

use crate::arrow_rows::{array_to_datums, arrow_type, rows_to_batch};
use crate::keys::WINDOW;
use crate::state::{Entries, ScanOrder, StateStore};
use crate::top_k::{entry_row, partitions, Change, Merged};

pub(crate) struct WindowOperator {
    op_id: ObjectId,
    partition: Vec<usize>,
    order_by: Vec<SortKey>,
    functions: Vec<Arc<dyn WindowExpr>>,
    input_types: Vec<SqlType>,
    /// The types of the functions' values, in order.
    output_types: Vec<SqlType>,
    arrow_schema: datafusion::arrow::datatypes::SchemaRef,
}

impl std::fmt::Debug for WindowOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowOperator")
            .field("op_id", &self.op_id)
            .field("partition", &self.partition)
            .field("order_by", &self.order_by)
            .field("functions", &self.functions.len())
            .finish()
    }
}

impl WindowOperator {
    pub(crate) fn new(
        op_id: ObjectId,
        (partition, order_by): (Vec<usize>, Vec<SortKey>),
        functions: &[Expr],
        input_schema: &DFSchema,
        (input_types, output_types): (Vec<SqlType>, Vec<SqlType>),
    ) -> RsResult<WindowOperator> {
        let props = ExecutionProps::new();
        let context = PhysicalPlanningContext::default();
        let functions = functions
            .iter()
            .map(|function| {
                create_window_expr(function, input_schema, &props, &context)
                    .map_err(datafusion_error)
            })
            .collect::<RsResult<Vec<_>>>()?;
        if functions.len() != output_types.len() {
            return Err(RsError::internal("a window's functions and types disagree"));
        }
        Ok(WindowOperator {
            op_id,
            partition,
            order_by,
            functions,
            input_types,
            output_types,
            arrow_schema: Arc::new(input_schema.as_arrow().clone()),
        })
    }

    pub(crate) async fn step<S: StateStore>(&self, store: &mut S, delta: ZSet) -> RsResult<ZSet> {
        let delta = delta.consolidate();
        if delta.is_empty() {
            return Ok(ZSet::new());
        }
        let changes = Change::all_sorted(
            (WINDOW, self.op_id),
            &self.partition,
            &self.order_by,
            &delta,
        );
        let mut out = ZSet::new();
        // One partition at a time, each consolidated before the next: what
        // is held beyond the output is one partition's rows.
        for range in partitions(&changes) {
            let partition = changes[range.start].partition();
            let entries = store
                .scan_prefix(partition, ScanOrder::Ascending, usize::MAX)
                .await?;
            let (before, after) = both_states(&entries, &changes[range])?;
            let mut changed = ZSet::new();
            for (rows, weight) in [(before, -1), (after, 1)] {
                for row in self.with_values(rows)? {
                    changed.push(row, weight);
                }
            }
            out.extend(changed.consolidate());
        }
        for change in changes {
            store.add_count(change.key, change.weight);
        }
        Ok(out.consolidate())
    }

    /// `rows` (one partition, in window order) each followed by its
    /// functions' values.
    fn with_values(&self, mut rows: Vec<Row>) -> RsResult<Vec<Row>> {
        if rows.is_empty() {
            return Ok(rows);
        }
        let refs: Vec<&Row> = rows.iter().collect();
        let batch = rows_to_batch(&refs, &self.input_types, &self.arrow_schema, &[])?;
        for (function, sql_type) in self.functions.iter().zip(&self.output_types) {
            let values = function.evaluate(&batch).map_err(datafusion_error)?;
            let values = cast(&values, &arrow_type(*sql_type)).map_err(arrow_error)?;
            for (row, value) in rows.iter_mut().zip(array_to_datums(&values, *sql_type)?) {
                row.push(value);
            }
        }
        Ok(rows)
    }
}

/// A partition's rows before and after `changes`, each in window order and
/// as often as it occurs: `entries` is the whole stored partition.
fn both_states(entries: &Entries, changes: &[Change]) -> RsResult<(Vec<Row>, Vec<Row>)> {
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for merged in Merged::new(entries, changes) {
        let (key, old, new) = merged?;
        let row = entry_row(key)?;
        for (rows, count) in [(&mut before, old), (&mut after, new)] {
            for _ in 0..count {
                rows.push(row.clone());
            }
        }
    }
    Ok((before, after))
}
