//! `generate_series(start, now() [± interval], step)` in a materialized
//! view: a series that grows as the clock passes its next value.
//!
//! The values are `start`, `start + step`, … (a fixed step of microseconds,
//! greater than zero), each emitted once the step's clock plus `offset`
//! reaches it, and never retracted: the clock does not go back. State is
//! the next value to emit, `CS op_id -> next(8)`; its time (`next -
//! offset`) is when the view next needs a step without input
//! ([`ClockSeries::next_event`]). One shard (the owner of the empty key)
//! emits the series, as constants are emitted.

use rockstream_types::{Datum, ObjectId, RsError, RsResult, SqlType, ZSet};

use crate::keys::{op_prefix, CLOCK_SERIES};
use crate::state::{StateRead, StateStore};

/// Values one step emits at most: a series starting long before the clock
/// (a second's step from 1970, a restart after weeks down) catches up over
/// several steps rather than holding them all in memory at once.
pub const CLOCK_SERIES_VALUES_MAX: usize = 1_000_000;

#[derive(Debug)]
pub(crate) struct ClockSeries {
    op_id: ObjectId,
    start: i64,
    step: i64,
    offset: i64,
    /// `timestamp` or `timestamptz`.
    value_type: SqlType,
}

impl ClockSeries {
    pub fn new(
        op_id: ObjectId,
        (start, step, offset): (i64, i64, i64),
        value_type: SqlType,
    ) -> RsResult<ClockSeries> {
        if step <= 0 {
            return Err(RsError::internal("a clock series steps forward"));
        }
        if !matches!(value_type, SqlType::Timestamp | SqlType::TimestampTz) {
            return Err(RsError::internal("a clock series of timestamps"));
        }
        Ok(ClockSeries {
            op_id,
            start,
            step,
            offset,
            value_type,
        })
    }

    fn key(&self) -> Vec<u8> {
        op_prefix(CLOCK_SERIES, self.op_id)
    }

    /// The next value to emit, if the series has been stepped.
    async fn stored_next<S: StateRead>(&self, store: &S) -> RsResult<Option<i64>> {
        store
            .get(&self.key())
            .await?
            .map(|bytes| {
                <[u8; 8]>::try_from(bytes.as_slice())
                    .map(i64::from_be_bytes)
                    .map_err(|_| RsError::internal("a clock series' state is corrupt"))
            })
            .transpose()
    }

    /// The values the clock `now` has reached since the last step, on the
    /// shard that emits the series (`emits`).
    pub async fn step<S: StateStore>(
        &self,
        store: &mut S,
        now: i64,
        emits: bool,
    ) -> RsResult<ZSet> {
        if !emits {
            return Ok(ZSet::new());
        }
        let stored = self.stored_next(store).await?;
        let mut next = stored.unwrap_or(self.start);
        let until = now.saturating_add(self.offset);
        let mut updates = Vec::new();
        let first = next;
        // At most so many at once: the rest are due at once, at the next
        // step (the next event is already past).
        while next <= until && updates.len() < CLOCK_SERIES_VALUES_MAX {
            let value = match self.value_type {
                SqlType::TimestampTz => Datum::TimestampTz(next),
                _ => Datum::Timestamp(next),
            };
            updates.push((vec![value], 1));
            match next.checked_add(self.step) {
                Some(after) => next = after,
                // Past the last timestamp: nothing more to emit, ever.
                None => {
                    next = i64::MAX;
                    break;
                }
            }
        }
        if next != first || stored.is_none() {
            store.put(self.key(), next.to_be_bytes().to_vec());
        }
        Ok(ZSet::from_updates(updates))
    }

    /// When the clock next reaches a value, on a shard that has stepped
    /// the series (`None` elsewhere, and once the values ran out).
    pub async fn next_event<S: StateRead>(&self, store: &S) -> RsResult<Option<i64>> {
        Ok(self
            .stored_next(store)
            .await?
            .filter(|next| *next != i64::MAX)
            .map(|next| next.saturating_sub(self.offset)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Goal: the series emits each value once, when the clock (plus the
    //! offset) reaches it, whatever the steps' spacing, and says when it
    //! next needs a step. Method: steps over an in-memory store.
    use super::*;
    use crate::state::MemoryStore;

    fn values(delta: &ZSet) -> Vec<i64> {
        let mut values: Vec<i64> = delta
            .updates
            .iter()
            .map(|(row, weight)| {
                assert_eq!(*weight, 1);
                match row[0] {
                    Datum::Timestamp(value) => value,
                    _ => panic!("a timestamp"),
                }
            })
            .collect();
        values.sort_unstable();
        values
    }

    #[test]
    fn each_value_is_emitted_once_when_the_clock_reaches_it() {
        futures::executor::block_on(emitted_once());
    }

    async fn emitted_once() {
        let series = ClockSeries::new(1, (100, 10, 5), SqlType::Timestamp).unwrap();
        let mut store = MemoryStore::default();
        assert_eq!(series.next_event(&store).await.unwrap(), None);
        let first = series.step(&mut store, 120, true).await.unwrap();
        assert_eq!(values(&first), [100, 110, 120]);
        assert_eq!(series.next_event(&store).await.unwrap(), Some(125));
        assert!(series.step(&mut store, 124, true).await.unwrap().is_empty());
        let later = series.step(&mut store, 150, true).await.unwrap();
        assert_eq!(values(&later), [130, 140, 150]);
        // Another shard emits nothing and keeps no state.
        let mut other = MemoryStore::default();
        assert!(series
            .step(&mut other, 150, false)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(series.next_event(&other).await.unwrap(), None);
    }

    #[test]
    fn a_clock_before_the_start_emits_nothing_yet() {
        futures::executor::block_on(nothing_yet());
    }

    async fn nothing_yet() {
        let capped = ClockSeries::new(3, (0, 1, 0), SqlType::Timestamp).unwrap();
        let mut store = MemoryStore::default();
        let first = capped.step(&mut store, i64::MAX / 2, true).await.unwrap();
        assert_eq!(first.len(), CLOCK_SERIES_VALUES_MAX);
        assert_eq!(
            capped.next_event(&store).await.unwrap(),
            Some(CLOCK_SERIES_VALUES_MAX as i64),
            "the rest is due at once"
        );

        let series = ClockSeries::new(2, (1_000, 1, 0), SqlType::Timestamp).unwrap();
        let mut store = MemoryStore::default();
        assert!(series.step(&mut store, 10, true).await.unwrap().is_empty());
        assert_eq!(series.next_event(&store).await.unwrap(), Some(1_000));
    }
}
