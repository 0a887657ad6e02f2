//! `EMIT ON WINDOW CLOSE` (RFC 0013), and the schedule of state that a
//! watermark makes final, which it shares with the aggregate's retirement
//! of closed groups.
//!
//! The operator keeps the rows of windows still open in its own state,
//! under their `column`'s value (`0x01 'W' 'C' op_id value(8) row -> count`),
//! updating them as its input (an aggregate's output) changes them, and
//! emits nothing for them. Once the bound passes a value, the rows under it
//! are emitted and deleted: nothing below the bound changes any more, so
//! each window is emitted once and never retracted. Rows whose value is
//! already below the bound when they arrive pass straight through.

use rockstream_plan::{Bound, Watermarks};
use rockstream_types::encoding::{decode_row, encode_row_into};
use rockstream_types::{Datum, ObjectId, RsError, RsResult, ZSet};

use crate::keys::{decode_weight, op_prefix, WINDOW_CLOSE};
use crate::state::{ScanOrder, StateStore};

/// Entries read from a schedule's head at first; the chunk doubles while
/// every entry read is due.
const DUE_CHUNK: usize = 256;

#[derive(Debug)]
pub struct WindowCloseOperator {
    op_id: ObjectId,
    column: usize,
    bound: Bound,
}

impl WindowCloseOperator {
    pub fn new(op_id: ObjectId, column: usize, bound: Bound) -> Self {
        WindowCloseOperator {
            op_id,
            column,
            bound,
        }
    }

    pub async fn step<S: StateStore>(
        &self,
        store: &mut S,
        input: ZSet,
        watermarks: &Watermarks,
    ) -> RsResult<ZSet> {
        let below = self.bound.at(watermarks);
        let prefix = op_prefix(WINDOW_CLOSE, self.op_id);
        let mut out = ZSet::new();
        for (row, weight) in input.updates {
            let value = schedule_time(&row[self.column])?;
            if below.is_some_and(|below| value < below) {
                out.push(row, weight);
                continue;
            }
            let mut key = time_key(&prefix, value);
            encode_row_into(&row, &mut key);
            store.add_count(key, weight);
        }
        if let Some(below) = below {
            for (time, row, value) in due(store, &prefix, below).await? {
                let count = decode_weight(&value);
                let mut key = time_key(&prefix, time);
                key.extend_from_slice(&row);
                store.add_count(key, -count);
                out.push(decode_row(&row)?, count);
            }
        }
        Ok(out.consolidate())
    }
}

/// Where a value goes in a schedule: its microseconds (a date's at its
/// midnight); a NULL last, where no bound reaches it.
pub(crate) fn schedule_time(value: &Datum) -> RsResult<i64> {
    match value {
        Datum::Timestamp(micros) | Datum::TimestampTz(micros) => Ok(*micros),
        // A date's midnight, as watermarks of date columns are kept.
        Datum::Date(days) => Ok(i64::from(*days) * 86_400_000_000),
        Datum::Null => Ok(i64::MAX),
        other => Err(RsError::internal(format!(
            "a watermark-bounded column holds {other:?}, not a timestamp"
        ))),
    }
}

/// `prefix time(8)`, ordered as the times are.
pub(crate) fn time_key(prefix: &[u8], time: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 8 + 32);
    key.extend_from_slice(prefix);
    key.extend_from_slice(&((time as u64) ^ (1 << 63)).to_be_bytes());
    key
}

/// Every entry under `prefix` whose time is below `below`, in time order:
/// its time, the rest of its key and its value. Reads the schedule's head
/// only, in chunks doubling while all they hold is due (linear in the
/// entries due).
pub(crate) async fn due<S: StateStore>(
    store: &S,
    prefix: &[u8],
    below: i64,
) -> RsResult<Vec<(i64, Vec<u8>, Vec<u8>)>> {
    let mut chunk = DUE_CHUNK;
    loop {
        let head = store
            .scan_prefix(prefix, ScanOrder::Ascending, chunk)
            .await?;
        let full = head.len() == chunk;
        let mut due = Vec::new();
        for (key, value) in head {
            let rest = &key[prefix.len()..];
            let (time, rest) = rest
                .split_first_chunk::<8>()
                .ok_or_else(|| RsError::internal("a schedule key without its time"))?;
            let time = (u64::from_be_bytes(*time) ^ (1 << 63)) as i64;
            if time >= below {
                return Ok(due);
            }
            due.push((time, rest.to_vec(), value));
        }
        if !full {
            return Ok(due);
        }
        chunk = chunk.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    //! Goal: with a watermark, a grouped aggregate's output over all epochs
    //! equals recomputation while it deletes the state of every group the
    //! watermark closed, and `EMIT ON WINDOW CLOSE` emits exactly the
    //! closed groups, each once, holding nothing of them. Method: random
    //! insert-only epochs whose times are at or above the watermark the
    //! epoch began at (the rows a commit admits), the watermark advancing
    //! to the newest time less a delay after each, as the engine does.
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;
    use rockstream_plan::{AggregateCall, AggregateFunction, Column, PlanNode, Retirement, Schema};
    use rockstream_types::{Datum, Row, SqlType, ZSet};

    use std::sync::Arc;

    use super::*;
    use crate::dataflow::{Dataflow, Step};
    use crate::keys::{op_prefix, AGGREGATE, AGGREGATE_DISTINCT, MIN_MAX, RETIRE_SCHEDULE};
    use crate::MemoryStore;

    const TABLE: ObjectId = 1;
    const AGGREGATE_OP: ObjectId = 20;
    const CLOSE_OP: ObjectId = 21;

    fn call(function: AggregateFunction, argument: Option<usize>, distinct: bool) -> AggregateCall {
        AggregateCall {
            function,
            argument,
            distinct,
            input_type: argument.map(|_| SqlType::Int64),
            output_type: SqlType::Int64,
            delimiter: None,
            order_by: Vec::new(),
            fraction: None,
            filter: None,
        }
    }

    /// `SELECT t, k, count(*), sum(v), min(v), count(DISTINCT v) FROM s
    /// GROUP BY t, k`, retiring groups below the watermark of `s`, maybe
    /// `EMIT ON WINDOW CLOSE`.
    fn plan(close: bool) -> PlanNode {
        let column = |name: &str, sql_type| Column {
            name: name.to_string(),
            sql_type,
        };
        let source = PlanNode::Source {
            object_id: TABLE,
            name: "s".into(),
            schema: Schema {
                columns: vec![
                    column("t", SqlType::Timestamp),
                    column("k", SqlType::Int64),
                    column("v", SqlType::Int64),
                ],
            },
            unique_key: None,
        };
        let mut columns = vec![column("t", SqlType::Timestamp), column("k", SqlType::Int64)];
        columns.extend(["n", "total", "low", "values"].map(|name| column(name, SqlType::Int64)));
        let aggregate = PlanNode::Aggregate {
            op_id: AGGREGATE_OP,
            input: Box::new(source),
            group_count: 2,
            aggregates: vec![
                call(AggregateFunction::CountStar, None, false),
                call(AggregateFunction::Sum, Some(2), false),
                call(AggregateFunction::Min, Some(2), false),
                call(AggregateFunction::Count, Some(2), true),
            ],
            retire: Some(Retirement {
                column: 0,
                bound: Bound::Watermark(TABLE),
            }),
            schema: Schema { columns },
        };
        if !close {
            return aggregate;
        }
        PlanNode::WindowClose {
            op_id: CLOSE_OP,
            input: Box::new(aggregate),
            column: 0,
            bound: Bound::Watermark(TABLE),
        }
    }

    /// Per epoch: rows `(time offset from the watermark, k, v)`.
    fn epochs() -> impl Strategy<Value = Vec<Vec<(i64, i64, i64)>>> {
        prop::collection::vec(
            prop::collection::vec((0i64..12, 0i64..3, 0i64..4), 0..8),
            1..25,
        )
    }

    fn keys_under(store: &MemoryStore, kind: [u8; 2], op_id: ObjectId) -> usize {
        let prefix = op_prefix(kind, op_id);
        store
            .entries
            .keys()
            .filter(|key| key.starts_with(&prefix))
            .count()
    }

    /// Runs `epochs` through the plan; its summed output, the final
    /// watermark, every row and the store.
    fn run(
        close: bool,
        epochs: &[Vec<(i64, i64, i64)>],
        delay: i64,
    ) -> (ZSet, i64, Vec<Row>, MemoryStore) {
        let dataflow = Dataflow::compile(&plan(close)).expect("compiles");
        let mut store = MemoryStore::default();
        let mut watermark: Option<i64> = None;
        let mut output = ZSet::new();
        let mut all = Vec::new();
        for (index, epoch) in epochs.iter().enumerate() {
            let base = watermark.unwrap_or(0);
            let mut delta = ZSet::new();
            for &(offset, k, v) in epoch {
                let row = vec![
                    Datum::Timestamp(base + offset),
                    Datum::Int64(k),
                    Datum::Int64(v),
                ];
                all.push(row.clone());
                delta.push(row, 1);
            }
            if let Some(newest) = epoch.iter().map(|(offset, _, _)| base + offset).max() {
                let advanced = newest - delay;
                watermark = Some(watermark.map_or(advanced, |w| w.max(advanced)));
            }
            let step = Step {
                initial: index == 0,
                watermarks: Arc::new(watermark.map(|w| (TABLE, w)).into_iter().collect()),
                ..Step::at(0)
            };
            let inputs = std::collections::HashMap::from([(TABLE, delta.consolidate())]);
            let out = futures::executor::block_on(dataflow.step(&mut store, &inputs, &step))
                .expect("steps");
            output.extend(out);
        }
        (
            output.consolidate(),
            watermark.unwrap_or(i64::MIN),
            all,
            store,
        )
    }

    fn ints(row: &Row) -> (i64, i64, i64) {
        match (&row[0], &row[1], &row[2]) {
            (Datum::Timestamp(t), Datum::Int64(k), Datum::Int64(v)) => (*t, *k, *v),
            _ => unreachable!("rows are built as (timestamp, int, int)"),
        }
    }

    /// The groups of `rows` as the plan computes them, those with `t`
    /// below `below` only.
    fn recomputed(rows: &[Row], below: Option<i64>) -> ZSet {
        let mut groups: BTreeMap<(i64, i64), Vec<i64>> = BTreeMap::new();
        for row in rows {
            let (t, k, v) = ints(row);
            groups.entry((t, k)).or_default().push(v);
        }
        let mut out = ZSet::new();
        for ((t, k), values) in groups {
            if below.is_some_and(|below| t >= below) {
                continue;
            }
            let distinct: BTreeSet<i64> = values.iter().copied().collect();
            out.push(
                vec![
                    Datum::Timestamp(t),
                    Datum::Int64(k),
                    Datum::Int64(values.len() as i64),
                    Datum::Int64(values.iter().sum()),
                    Datum::Int64(values.iter().copied().min().unwrap_or_default()),
                    Datum::Int64(distinct.len() as i64),
                ],
                1,
            );
        }
        out.consolidate()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn retiring_groups_keeps_the_output_and_only_open_groups_state(
            epochs in epochs(),
            delay in 0i64..6,
        ) {
            let (output, watermark, rows, store) = run(false, &epochs, delay);
            prop_assert_eq!(output, recomputed(&rows, None));
            let open_rows: Vec<(i64, i64, i64)> =
                rows.iter().map(ints).filter(|(t, _, _)| *t >= watermark).collect();
            let open = open_rows.iter().map(|(t, k, _)| (t, k)).collect::<BTreeSet<_>>().len();
            prop_assert_eq!(keys_under(&store, AGGREGATE, AGGREGATE_OP), open);
            prop_assert_eq!(keys_under(&store, RETIRE_SCHEDULE, AGGREGATE_OP), open);
            // The MIN and DISTINCT multisets of closed groups are gone too.
            let open_values = open_rows.iter().collect::<BTreeSet<_>>().len();
            prop_assert_eq!(keys_under(&store, MIN_MAX, AGGREGATE_OP), open_values);
            prop_assert_eq!(keys_under(&store, AGGREGATE_DISTINCT, AGGREGATE_OP), open_values);
        }

        #[test]
        fn emit_on_window_close_emits_each_closed_group_once(
            epochs in epochs(),
            delay in 0i64..6,
        ) {
            let (output, watermark, rows, store) = run(true, &epochs, delay);
            prop_assert!(output.updates.iter().all(|(_, weight)| *weight == 1));
            prop_assert_eq!(output, recomputed(&rows, Some(watermark)));
            // What it holds is the open groups' rows, no closed one.
            let prefix = op_prefix(WINDOW_CLOSE, CLOSE_OP);
            for key in store.entries.keys().filter(|key| key.starts_with(&prefix)) {
                let time = (u64::from_be_bytes(key[prefix.len()..prefix.len() + 8].try_into().expect("a time")) ^ (1 << 63)) as i64;
                prop_assert!(time >= watermark);
            }
        }
    }

    #[test]
    fn a_group_below_the_watermark_when_it_arrives_passes_straight_through() {
        // One epoch whose rows at 0 and 10 (delay 0) close the group at 0
        // in the step that creates it.
        let (output, watermark, rows, store) = run(true, &[vec![(0, 1, 5), (10, 1, 6)]], 0);
        assert_eq!(watermark, 10);
        assert_eq!(output, recomputed(&rows, Some(10)));
        assert_eq!(keys_under(&store, AGGREGATE, AGGREGATE_OP), 1);
    }
}
