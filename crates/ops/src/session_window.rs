//! Session windows, maintained incrementally (`SESSION(table, time, gap [,
//! key …])`; sessions as [`session_windows`] forms them).
//!
//! State: each row of each partition once per copy, by the time bucket it
//! falls in (`time div gap`) and its time:
//!
//! ```text
//! 0x01 'S' 'W' op_id partition bucket(8) time(8) row -> count
//! ```
//!
//! A bucket is `gap` long, so rows on both sides of an empty bucket are
//! more than `gap` apart: no session crosses an empty bucket. A change
//! touches the sessions around the times it changes; the operator reads
//! the changed buckets and their neighbours outward while rows there are
//! within `gap` of the range (over the rows before and after the change
//! together, so the range holds whole sessions of both), retracts every
//! row of the range with its old session, applies the change, and emits
//! every row of the range with its new one (rows whose session did not
//! change cancel out). A change costs the rows of the sessions it touches:
//! each of them changes its window, except the rows the consolidation
//! cancels. A row with a NULL time has no session: it passes with NULL
//! bounds.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use rockstream_plan::sessions::session_windows;
use rockstream_types::encoding::{decode_row, encode_row};
use rockstream_types::{Datum, ObjectId, Row, RsError, RsResult, ZSet};

use crate::exchange::partition_key;
use crate::keys::{decode_weight, encode_weight, op_prefix, SESSION_WINDOW};
use crate::state::{ScanOrder, StateStore};

#[derive(Debug)]
pub(crate) struct SessionWindowOperator {
    op_id: ObjectId,
    partition: Vec<usize>,
    time: usize,
    gap: i64,
    /// Per appended column: the session's end (`true`) or start.
    ends: Vec<bool>,
}

/// A bucket's rows: `(time, row, count)`, in time order.
type Bucket = Vec<(i64, Row, i64)>;

impl SessionWindowOperator {
    pub(crate) fn new(
        op_id: ObjectId,
        (partition, time): (Vec<usize>, usize),
        gap_micros: i64,
        ends: Vec<bool>,
    ) -> RsResult<SessionWindowOperator> {
        if gap_micros <= 0 {
            return Err(RsError::internal("a session window without a positive gap"));
        }
        Ok(SessionWindowOperator {
            op_id,
            partition,
            time,
            gap: gap_micros,
            ends,
        })
    }

    pub(crate) async fn step<S: StateStore>(&self, store: &mut S, delta: ZSet) -> RsResult<ZSet> {
        let mut out = ZSet::new();
        // Per partition (encoded), its changes with a time.
        let mut partitions: BTreeMap<Vec<u8>, Vec<(i64, Row, i64)>> = BTreeMap::new();
        for (row, weight) in delta.updates {
            match micros(&row[self.time])? {
                Some(time) => partitions
                    .entry(partition_key(&row, &self.partition))
                    .or_default()
                    .push((time, row, weight)),
                None => out.push(self.windowed(&row, None), weight),
            }
        }
        for (partition, changes) in partitions {
            self.step_partition(store, &partition, changes, &mut out)
                .await?;
        }
        Ok(out.consolidate())
    }

    async fn step_partition<S: StateStore>(
        &self,
        store: &mut S,
        partition: &[u8],
        changes: Vec<(i64, Row, i64)>,
        out: &mut ZSet,
    ) -> RsResult<()> {
        let changed: BTreeSet<i64> = changes
            .iter()
            .map(|(time, _, _)| time.div_euclid(self.gap))
            .collect();
        // Times inserted per bucket: the rows after the change are the
        // rows before it and these, less some.
        let mut inserted: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (time, _, weight) in &changes {
            if *weight > 0 {
                inserted
                    .entry(time.div_euclid(self.gap))
                    .or_default()
                    .push(*time);
            }
        }
        let mut old: BTreeMap<i64, Bucket> = BTreeMap::new();
        let mut ranges: Vec<(i64, i64)> = Vec::new();
        for &bucket in &changed {
            if ranges.last().is_some_and(|(_, last)| bucket <= *last) {
                continue;
            }
            let (mut low, mut high) = (bucket, bucket);
            while let Some(before) = low.checked_sub(1) {
                let (Some(first), Some(last)) = (
                    self.span(store, partition, low, &inserted, &mut old)
                        .await?
                        .0,
                    self.span(store, partition, before, &inserted, &mut old)
                        .await?
                        .1,
                ) else {
                    break;
                };
                if first.saturating_sub(last) >= self.gap {
                    break;
                }
                low = before;
            }
            while let Some(after) = high.checked_add(1) {
                let (Some(last), Some(first)) = (
                    self.span(store, partition, high, &inserted, &mut old)
                        .await?
                        .1,
                    self.span(store, partition, after, &inserted, &mut old)
                        .await?
                        .0,
                ) else {
                    break;
                };
                if first.saturating_sub(last) >= self.gap {
                    break;
                }
                high = after;
            }
            ranges.push((low, high));
        }
        // The old sessions of each range, retracted.
        for &(low, high) in &ranges {
            let rows: Vec<&(i64, Row, i64)> = (low..=high)
                .filter_map(|bucket| old.get(&bucket))
                .flatten()
                .collect();
            self.emit(&rows, -1, out);
        }
        // The rows after the change: those before it (every changed bucket
        // lies in a range, so its rows were read into `old`) with the change
        // applied, in key order (time, then the row's encoding), written
        // where they changed and emitted without reading them again.
        let mut after: BTreeMap<(i64, Vec<u8>), (Row, i64)> = old
            .values()
            .flatten()
            .map(|(time, row, count)| ((*time, encode_row(row)), (row.clone(), *count)))
            .collect();
        let mut changed_keys = BTreeSet::new();
        for (time, row, weight) in changes {
            let encoded = encode_row(&row);
            let (_, count) = after.entry((time, encoded.clone())).or_insert((row, 0));
            *count += weight;
            if *count < 0 {
                return Err(RsError::internal("session window rows count went negative"));
            }
            changed_keys.insert((time, encoded));
        }
        for key in changed_keys {
            let (row, count) = &after[&key];
            let stored = self.key(partition, key.0, row);
            if *count == 0 {
                store.delete(stored);
            } else {
                store.put(stored, encode_weight(*count));
            }
        }
        // The new sessions of each range, emitted.
        for &(low, high) in &ranges {
            let start = low.checked_mul(self.gap).unwrap_or(i64::MIN);
            let rows: Vec<(i64, Row, i64)> = after
                .range((start, Vec::new())..)
                .take_while(|((time, _), _)| time.div_euclid(self.gap) <= high)
                .filter(|(_, (_, count))| *count > 0)
                .map(|((time, _), (row, count))| (*time, row.clone(), *count))
                .collect();
            let rows: Vec<&(i64, Row, i64)> = rows.iter().collect();
            self.emit(&rows, 1, out);
        }
        Ok(())
    }

    /// The first and last time of `bucket`'s rows before and after the
    /// change together (the rows before it, read once into `old`).
    async fn span<S: StateStore>(
        &self,
        store: &S,
        partition: &[u8],
        bucket: i64,
        inserted: &BTreeMap<i64, Vec<i64>>,
        old: &mut BTreeMap<i64, Bucket>,
    ) -> RsResult<(Option<i64>, Option<i64>)> {
        let rows = match old.entry(bucket) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(self.read_bucket(store, partition, bucket).await?),
        };
        let times = rows
            .iter()
            .map(|(time, _, _)| *time)
            .chain(inserted.get(&bucket).into_iter().flatten().copied());
        Ok(times.fold(
            (None, None),
            |(first, last): (Option<i64>, Option<i64>), time| {
                (
                    Some(first.map_or(time, |first| first.min(time))),
                    Some(last.map_or(time, |last| last.max(time))),
                )
            },
        ))
    }

    /// Emits `rows` (in time order) with their sessions, `sign` times their
    /// counts.
    fn emit(&self, rows: &[&(i64, Row, i64)], sign: i64, out: &mut ZSet) {
        let times: Vec<Option<i64>> = rows.iter().map(|(time, _, _)| Some(*time)).collect();
        for ((_, row, count), window) in rows.iter().zip(session_windows(&times, self.gap)) {
            out.push(self.windowed(row, window), sign * count);
        }
    }

    /// `row` with its window's columns.
    fn windowed(&self, row: &Row, window: Option<(i64, i64)>) -> Row {
        let mut out = Vec::with_capacity(row.len() + self.ends.len());
        out.extend_from_slice(row);
        for end in &self.ends {
            out.push(match window {
                None => Datum::Null,
                Some((start, finish)) => {
                    let value = if *end { finish } else { start };
                    match row[self.time] {
                        Datum::TimestampTz(_) => Datum::TimestampTz(value),
                        _ => Datum::Timestamp(value),
                    }
                }
            });
        }
        out
    }

    /// One bucket's rows, in time order.
    async fn read_bucket<S: StateStore>(
        &self,
        store: &S,
        partition: &[u8],
        bucket: i64,
    ) -> RsResult<Bucket> {
        let prefix = self.bucket_prefix(partition, bucket);
        let entries = store
            .scan_prefix(&prefix, ScanOrder::Ascending, usize::MAX)
            .await?;
        let corrupt = || RsError::internal("corrupt session window entry");
        entries
            .into_iter()
            .map(|(key, count)| {
                let suffix = key.get(prefix.len()..).ok_or_else(corrupt)?;
                let (time, row) = suffix.split_at_checked(8).ok_or_else(corrupt)?;
                let time = ordered_i64(time.try_into().map_err(|_| corrupt())?);
                Ok((time, decode_row(row)?, decode_weight(&count)))
            })
            .filter(|entry| !matches!(entry, Ok((_, _, 0))))
            .collect()
    }

    fn bucket_prefix(&self, partition: &[u8], bucket: i64) -> Vec<u8> {
        let mut prefix = op_prefix(SESSION_WINDOW, self.op_id);
        prefix.extend_from_slice(partition);
        prefix.extend_from_slice(&order_bytes(bucket));
        prefix
    }

    fn key(&self, partition: &[u8], time: i64, row: &Row) -> Vec<u8> {
        let mut key = self.bucket_prefix(partition, time.div_euclid(self.gap));
        key.extend_from_slice(&order_bytes(time));
        key.extend_from_slice(&encode_row(row));
        key
    }
}

/// A time column's value in microseconds (`None` for NULL).
fn micros(datum: &Datum) -> RsResult<Option<i64>> {
    match datum {
        Datum::Null => Ok(None),
        Datum::Timestamp(value) | Datum::TimestampTz(value) => Ok(Some(*value)),
        other => Err(RsError::internal(format!(
            "a session window over the time {other:?}"
        ))),
    }
}

/// Big-endian with the sign bit flipped: byte order is numeric order.
fn order_bytes(value: i64) -> [u8; 8] {
    ((value as u64) ^ (1 << 63)).to_be_bytes()
}

fn ordered_i64(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}
