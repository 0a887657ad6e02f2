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

/// Where a value goes in a schedule: its microseconds; a NULL last, where
/// no bound reaches it.
pub(crate) fn schedule_time(value: &Datum) -> RsResult<i64> {
    match value {
        Datum::Timestamp(micros) | Datum::TimestampTz(micros) => Ok(*micros),
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
