//! Temporal filters: `WHERE ts > now() - INTERVAL '1 hour'` in a
//! materialized view.
//!
//! Each condition bounds the clock by a value of the row: `ts > now() - 1h`
//! holds while `now < ts + 1h`, `ts <= now()` once `now >= ts`. Together
//! they give every row the interval of clock times `[enter, leave)` in
//! which it belongs to the output (empty when a bound is NULL or the bounds
//! cross). A row is emitted when the clock reaches `enter` and retracted
//! when it reaches `leave`, so the output is what the filter computes at
//! the step's clock, and a step does work only for the rows whose interval
//! starts or ends since the last one: nothing is recomputed.
//!
//! State is the schedule of rows waiting for the clock: `TF op_id time row
//! -> count`, a row under the time it next enters or leaves (`time` in
//! microseconds, big-endian with the sign bit flipped so keys sort by
//! time). A step first takes every entry due at its clock (one scan from
//! the head of the schedule), then its input: a row whose interval holds
//! the clock is emitted and scheduled to leave, one still ahead is
//! scheduled to enter, one behind is dropped. A retraction computes the
//! same interval as its insertion, so it finds its entry where the
//! insertion's left it. The schedule's head is when the view next needs a
//! step without input ([`TemporalFilter::next_event`]).
//!
//! The clock is the epoch's, which the engine keeps from going back; the
//! operator also keeps the last one it stepped at (`TC op_id -> clock`),
//! so a server clock that went back across a restart does not take the
//! filter back: a row once retracted is never emitted again by the same
//! interval, nor retracted before it entered. Schedule entries whose
//! count went to zero stay (as zero counts, read as absent) until
//! compaction removes them; the head's scans pass over them meanwhile.

use rockstream_plan::{ClockBound, ClockComparison};
use rockstream_types::encoding::{decode_row, encode_row_into};
use rockstream_types::{Datum, ObjectId, Row, RsError, RsResult, SqlType, ZSet};

use crate::expr::CompiledExprs;
use crate::keys::{decode_weight, op_prefix, TEMPORAL_CLOCK, TEMPORAL_FILTER};
use crate::state::{ScanOrder, StateRead, StateStore};

/// Entries read per scan of the schedule's head.
const DUE_CHUNK: usize = 1024;

const MICROS_PER_DAY: i128 = 86_400_000_000;

/// The clock times `[enter, leave)` in which a row passes the filter
/// (`leave` `None`: it never leaves).
type Interval = (i64, Option<i64>);

#[derive(Debug)]
pub(crate) struct TemporalFilter {
    op_id: ObjectId,
    /// The bounds' values over an input row, each a timestamp or a date.
    values: CompiledExprs,
    value_types: Vec<SqlType>,
    /// Per bound, its comparison and offset.
    bounds: Vec<(ClockComparison, i64)>,
}

impl TemporalFilter {
    pub fn new(
        op_id: ObjectId,
        bounds: &[ClockBound],
        input_schema: &datafusion::common::DFSchema,
        input_types: Vec<SqlType>,
    ) -> RsResult<TemporalFilter> {
        let exprs: Vec<_> = bounds.iter().map(|bound| bound.value.clone()).collect();
        let value_types = exprs
            .iter()
            .map(|expr| {
                let data_type =
                    datafusion::logical_expr::ExprSchemable::get_type(expr, input_schema)
                        .map_err(rockstream_plan::arrow_types::datafusion_error)?;
                match rockstream_plan::arrow_types::sql_type_of(&data_type)? {
                    sql_type @ (SqlType::Timestamp | SqlType::TimestampTz | SqlType::Date) => {
                        Ok(sql_type)
                    }
                    other => Err(RsError::unsupported(format!(
                        "comparing {} with now() in a materialized view",
                        other.pg_name()
                    ))),
                }
            })
            .collect::<RsResult<Vec<_>>>()?;
        Ok(TemporalFilter {
            op_id,
            values: CompiledExprs::compile(&exprs, input_schema, input_types)?,
            value_types,
            bounds: bounds
                .iter()
                .map(|bound| (bound.comparison, bound.offset_micros))
                .collect(),
        })
    }

    /// The output change at clock `now` for input change `delta`.
    pub async fn step<S: StateStore>(
        &self,
        store: &mut S,
        delta: ZSet,
        now: i64,
    ) -> RsResult<ZSet> {
        let now = self.advance_clock(store, now).await?;
        let mut out = self.take_due(store, now).await?;
        if delta.is_empty() {
            return Ok(out.consolidate());
        }
        let rows: Vec<&Row> = delta.updates.iter().map(|(row, _)| row).collect();
        let intervals = self.intervals(&rows)?;
        for ((row, weight), interval) in delta.updates.into_iter().zip(intervals) {
            let Some((enter, leave)) = interval else {
                continue;
            };
            if now < enter {
                store.add_count(self.key(enter, &row), weight);
            } else if leave.is_none_or(|leave| now < leave) {
                if let Some(leave) = leave {
                    store.add_count(self.key(leave, &row), weight);
                }
                out.push(row, weight);
            }
        }
        Ok(out.consolidate())
    }

    /// The clock of this step: `now`, unless an earlier step saw a later
    /// one (the server's clock went back across a restart), which is
    /// kept, so a row is never retracted before it was emitted or emitted
    /// again once it left.
    async fn advance_clock<S: StateStore>(&self, store: &mut S, now: i64) -> RsResult<i64> {
        let key = op_prefix(TEMPORAL_CLOCK, self.op_id);
        let last = match store.get(&key).await? {
            Some(bytes) => Some(i64::from_be_bytes(bytes.as_slice().try_into().map_err(
                |_| RsError::internal("a temporal filter's clock is not 8 bytes"),
            )?)),
            None => None,
        };
        match last {
            Some(last) if last >= now => Ok(last),
            _ => {
                store.put(key, now.to_be_bytes().to_vec());
                Ok(now)
            }
        }
    }

    /// When a step without input next changes the output: the schedule's
    /// first time, if any.
    pub async fn next_event<S: StateRead>(&self, store: &S) -> RsResult<Option<i64>> {
        let prefix = op_prefix(TEMPORAL_FILTER, self.op_id);
        let head = store.scan_prefix(&prefix, ScanOrder::Ascending, 1).await?;
        head.first()
            .map(|(key, _)| decode_time(&key[prefix.len()..]).map(|(time, _)| time))
            .transpose()
    }

    /// Moves every row whose time has come: into the output (and on to its
    /// leaving time) or out of it.
    async fn take_due<S: StateStore>(&self, store: &mut S, now: i64) -> RsResult<ZSet> {
        let prefix = op_prefix(TEMPORAL_FILTER, self.op_id);
        let mut out = ZSet::new();
        // Each scan starts at the head again, where the entries taken
        // before read as gone but are still read below: doubling the
        // chunk keeps the reads linear in the rows due.
        let mut chunk = DUE_CHUNK;
        loop {
            let head = store
                .scan_prefix(&prefix, ScanOrder::Ascending, chunk)
                .await?;
            let mut due = Vec::new();
            for (key, value) in &head {
                let (time, row) = decode_time(&key[prefix.len()..])?;
                if time > now {
                    break;
                }
                due.push((time, decode_row(row)?, decode_weight(value)));
            }
            let more = due.len() == chunk;
            chunk = chunk.saturating_mul(2);
            let rows: Vec<&Row> = due.iter().map(|(_, row, _)| row).collect();
            let intervals = self.intervals(&rows)?;
            for ((time, row, count), interval) in due.into_iter().zip(intervals) {
                store.add_count(self.key(time, &row), -count);
                match interval {
                    // Entering: in until it leaves, unless that passed too.
                    Some((enter, leave)) if enter == time => {
                        if let Some(leave) = leave.filter(|&leave| leave <= now) {
                            debug_assert!(leave > enter);
                            continue;
                        }
                        if let Some(leave) = leave {
                            store.add_count(self.key(leave, &row), count);
                        }
                        out.push(row, count);
                    }
                    Some((_, Some(leave))) if leave == time => out.push(row, -count),
                    _ => {
                        return Err(RsError::internal(
                            "a temporal filter's scheduled row has no bound at its time",
                        ))
                    }
                }
            }
            if !more {
                return Ok(out);
            }
        }
    }

    /// Per row, its [`Interval`]; `None` when it never passes.
    fn intervals(&self, rows: &[&Row]) -> RsResult<Vec<Option<Interval>>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let values = self.values.evaluate_rows(rows, &self.value_types)?;
        Ok(values.iter().map(|values| self.interval(values)).collect())
    }

    fn interval(&self, values: &[Datum]) -> Option<Interval> {
        let mut enter = i64::MIN as i128;
        let mut leave = i128::MAX;
        for (value, &(comparison, offset)) in values.iter().zip(&self.bounds) {
            let micros = match value {
                Datum::Timestamp(micros) | Datum::TimestampTz(micros) => *micros as i128,
                Datum::Date(days) => *days as i128 * MICROS_PER_DAY,
                _ => return None,
            };
            // `value <comparison> now + offset`, solved for now.
            let at = micros - offset as i128;
            match comparison {
                ClockComparison::Greater => leave = leave.min(at),
                ClockComparison::GreaterOrEqual => leave = leave.min(at + 1),
                ClockComparison::Less => enter = enter.max(at + 1),
                ClockComparison::LessOrEqual => enter = enter.max(at),
            }
        }
        if enter >= leave || enter > i64::MAX as i128 {
            return None;
        }
        let leave = (leave <= i64::MAX as i128).then_some(leave as i64);
        Some((enter as i64, leave))
    }

    /// `TF op_id time row`.
    fn key(&self, time: i64, row: &Row) -> Vec<u8> {
        let mut key = op_prefix(TEMPORAL_FILTER, self.op_id);
        key.extend_from_slice(&((time as u64) ^ (1 << 63)).to_be_bytes());
        encode_row_into(row, &mut key);
        key
    }
}

/// A schedule key's time and the encoded row after it.
fn decode_time(key: &[u8]) -> RsResult<(i64, &[u8])> {
    let (time, row) = key
        .split_first_chunk::<8>()
        .ok_or_else(|| RsError::internal("a temporal filter's key without its time"))?;
    Ok(((u64::from_be_bytes(*time) ^ (1 << 63)) as i64, row))
}

#[cfg(test)]
mod tests {
    //! Goal: the output at every step is the rows whose bounds hold at the
    //! step's clock, however the clock and the changes interleave.
    use std::collections::BTreeMap;

    use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema, TimeUnit};
    use datafusion::common::DFSchema;
    use datafusion::logical_expr::col;
    use proptest::prelude::*;

    use rockstream_types::encoding::encode_row;

    use super::*;
    use crate::state::MemoryStore;

    fn filter(bounds: &[(ClockComparison, i64)]) -> TemporalFilter {
        let arrow = ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]);
        let schema = DFSchema::try_from(arrow).expect("a schema");
        let bounds: Vec<ClockBound> = bounds
            .iter()
            .map(|&(comparison, offset_micros)| ClockBound {
                value: col("ts"),
                comparison,
                offset_micros,
            })
            .collect();
        TemporalFilter::new(
            7,
            &bounds,
            &schema,
            vec![SqlType::Int64, SqlType::Timestamp],
        )
        .expect("compiles")
    }

    fn row(id: i64, ts: Option<i64>) -> Row {
        vec![Datum::Int64(id), ts.map_or(Datum::Null, Datum::Timestamp)]
    }

    fn holds(bounds: &[(ClockComparison, i64)], ts: Option<i64>, now: i64) -> bool {
        let Some(ts) = ts else { return false };
        bounds.iter().all(|&(comparison, offset)| {
            let bound = now + offset;
            match comparison {
                ClockComparison::Greater => ts > bound,
                ClockComparison::GreaterOrEqual => ts >= bound,
                ClockComparison::Less => ts < bound,
                ClockComparison::LessOrEqual => ts <= bound,
            }
        })
    }

    fn comparison() -> impl Strategy<Value = ClockComparison> {
        prop_oneof![
            Just(ClockComparison::Greater),
            Just(ClockComparison::GreaterOrEqual),
            Just(ClockComparison::Less),
            Just(ClockComparison::LessOrEqual),
        ]
    }

    #[test]
    fn a_row_enters_at_its_lower_bound_and_leaves_at_its_upper() {
        futures::executor::block_on(enters_and_leaves());
    }

    async fn enters_and_leaves() {
        // ts > now() - 10 AND ts <= now(): in from ts until ts + 10.
        let filter = filter(&[
            (ClockComparison::Greater, -10),
            (ClockComparison::LessOrEqual, 0),
        ]);
        let mut store = MemoryStore::default();
        let mut delta = ZSet::new();
        delta.push(row(1, Some(100)), 1);
        delta.push(row(2, Some(50)), 1);
        delta.push(row(3, None), 1);
        let out = filter.step(&mut store, delta, 55).await.expect("steps");
        assert_eq!(out.updates, vec![(row(2, Some(50)), 1)]);
        assert_eq!(
            filter.next_event(&store).await.expect("reads the schedule"),
            Some(60)
        );
        let out = filter
            .step(&mut store, ZSet::new(), 59)
            .await
            .expect("steps");
        assert!(out.is_empty());
        let out = filter
            .step(&mut store, ZSet::new(), 60)
            .await
            .expect("steps");
        assert_eq!(out.updates, vec![(row(2, Some(50)), -1)]);
        let out = filter
            .step(&mut store, ZSet::new(), 100)
            .await
            .expect("steps");
        assert_eq!(out.updates, vec![(row(1, Some(100)), 1)]);
        assert_eq!(
            filter.next_event(&store).await.expect("reads the schedule"),
            Some(110)
        );
        // Both edges passed between two steps: nothing to emit.
        let mut delta = ZSet::new();
        delta.push(row(4, Some(120)), 1);
        filter.step(&mut store, delta, 100).await.expect("steps");
        let out = filter
            .step(&mut store, ZSet::new(), 200)
            .await
            .expect("steps");
        assert_eq!(out.updates, vec![(row(1, Some(100)), -1)]);
        assert_eq!(
            filter.next_event(&store).await.expect("reads the schedule"),
            None
        );
    }

    #[test]
    fn a_clock_that_goes_back_does_not_take_the_filter_back() {
        futures::executor::block_on(async {
            // ts > now() - 10: in until ts + 10.
            let filter = filter(&[(ClockComparison::Greater, -10)]);
            let mut store = MemoryStore::default();
            let mut delta = ZSet::new();
            delta.push(row(1, Some(100)), 1);
            let out = filter.step(&mut store, delta, 105).await.expect("steps");
            assert_eq!(out.updates, vec![(row(1, Some(100)), 1)]);
            let out = filter
                .step(&mut store, ZSet::new(), 111)
                .await
                .expect("steps");
            assert_eq!(out.updates, vec![(row(1, Some(100)), -1)]);
            // The server restarts with its clock behind: the row, gone,
            // stays gone, and its deletion retracts nothing.
            let out = filter
                .step(&mut store, ZSet::new(), 95)
                .await
                .expect("steps");
            assert!(out.is_empty());
            let mut delta = ZSet::new();
            delta.push(row(1, Some(100)), -1);
            let out = filter.step(&mut store, delta, 96).await.expect("steps");
            assert!(out.is_empty());
            assert_eq!(
                filter.next_event(&store).await.expect("reads the schedule"),
                None
            );
        });
    }

    proptest! {
        /// Incremental output summed over the steps equals the filter
        /// recomputed at the last step's clock, and the schedule ends
        /// empty once every row is retracted.
        #[test]
        fn the_output_is_the_filter_at_the_clock(
            bounds in prop::collection::vec((comparison(), -20i64..20), 1..3),
            steps in prop::collection::vec(
                (0i64..15, prop::collection::vec((0i64..6, prop::option::of(0i64..120), prop::bool::ANY), 0..5)),
                1..12,
            ),
        ) {
            futures::executor::block_on(async {
                let filter = filter(&bounds);
                let mut store = MemoryStore::default();
                let mut now = 0;
                let mut input: Vec<Row> = Vec::new();
                let mut output: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
                for (advance, changes) in &steps {
                    now += advance;
                    let mut delta = ZSet::new();
                    for (id, ts, insert) in changes {
                        let row = row(*id, *ts);
                        if *insert {
                            input.push(row.clone());
                            delta.push(row, 1);
                        } else if let Some(at) = input.iter().position(|r| *r == row) {
                            input.remove(at);
                            delta.push(row, -1);
                        }
                    }
                    for (row, weight) in filter.step(&mut store, delta, now).await.expect("steps").updates {
                        *output.entry(encode_row(&row)).or_default() += weight;
                    }
                    output.retain(|_, weight| *weight != 0);
                    let mut expected: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
                    for row in &input {
                        let ts = match row[1] { Datum::Timestamp(ts) => Some(ts), _ => None };
                        if holds(&bounds, ts, now) {
                            *expected.entry(encode_row(row)).or_default() += 1;
                        }
                    }
                    prop_assert_eq!(&output, &expected);
                }
                let mut delta = ZSet::new();
                for row in input.drain(..) {
                    delta.push(row, -1);
                }
                filter.step(&mut store, delta, now).await.expect("steps");
                prop_assert_eq!(filter.next_event(&store).await.expect("reads the schedule"), None);
                Ok(())
            })?;
        }
    }
}
