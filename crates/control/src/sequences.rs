//! The counters behind `SERIAL` and identity columns (RFC 0003).
//!
//! ```text
//! 0x03 'S' sequence_id(16) -> logged (i64): no value above it was handed out
//! ```
//!
//! `nextval` is synchronous (the functions DataFusion calls are) and
//! touches only memory. A value is never handed out twice, across crashes
//! too: before a statement that drew values returns, and before any commit
//! of rows holding them, [`Sequences::persist`] makes durable a `logged`
//! value at or above every value handed out, [`PRELOGGED`] ahead, so most
//! statements write nothing. A start continues each sequence after its
//! logged value: values handed out but never acknowledged may be skipped,
//! as PostgreSQL's sequences skip them.

use std::collections::HashMap;

use rockstream_types::{codes, ObjectId, RsError, RsResult};
use slatedb::{Db, WriteBatch};

use crate::control_db::{ControlDb, CONTROL_PATH};
use rockstream_storage::storage_error;

/// Values logged ahead of the last one handed out (PostgreSQL logs 32).
pub const PRELOGGED: i64 = 32;

const PREFIX: [u8; 2] = [0x03, b'S'];

pub(crate) fn sequence_key(id: ObjectId) -> Vec<u8> {
    let mut key = PREFIX.to_vec();
    key.extend_from_slice(&id.to_be_bytes());
    key
}

/// A sequence as `nextval` uses it: which one, its name for errors, and
/// the largest value its column holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceRef {
    pub id: ObjectId,
    pub name: String,
    pub max: i64,
}

#[derive(Debug, Clone, Copy)]
struct Counter {
    /// What `nextval` returns next (one past `i64::MAX` once a BIGINT
    /// sequence is exhausted, hence the width).
    next: i128,
    /// Durable: a start continues after it.
    logged: i64,
}

impl Counter {
    const NEW: Counter = Counter { next: 1, logged: 0 };

    /// The highest value handed out, as the logged value covers it.
    fn highest(&self) -> i64 {
        i64::try_from(self.next - 1).unwrap_or(i64::MAX)
    }
}

#[derive(Default)]
pub struct Sequences {
    counters: std::sync::Mutex<HashMap<ObjectId, Counter>>,
    /// One persist at a time, so a persist that finds nothing to log knows
    /// that what it found is durable.
    persisting: tokio::sync::Mutex<()>,
}

impl Sequences {
    /// The logged values of every sequence that drew one.
    pub(crate) async fn load(control: &Db) -> RsResult<Sequences> {
        let mut iterator = control
            .scan_prefix(PREFIX, ..)
            .await
            .map_err(|error| storage_error(CONTROL_PATH, error))?;
        let mut counters = HashMap::new();
        while let Some(entry) = iterator
            .next()
            .await
            .map_err(|error| storage_error(CONTROL_PATH, error))?
        {
            let id = entry
                .key
                .get(PREFIX.len()..)
                .and_then(|bytes| <[u8; 16]>::try_from(bytes).ok())
                .map(u128::from_be_bytes);
            let logged = <[u8; 8]>::try_from(entry.value.as_ref())
                .ok()
                .map(i64::from_be_bytes);
            let (Some(id), Some(logged)) = (id, logged) else {
                return Err(RsError::internal("corrupt sequence entry"));
            };
            counters.insert(
                ObjectId::from(id),
                Counter {
                    next: i128::from(logged) + 1,
                    logged,
                },
            );
        }
        Ok(Sequences {
            counters: std::sync::Mutex::new(counters),
            persisting: tokio::sync::Mutex::new(()),
        })
    }

    fn counters(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectId, Counter>> {
        self.counters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `nextval`: the next value; 2200H past the column type's maximum.
    pub fn next(&self, sequence: &SequenceRef) -> RsResult<i64> {
        let mut counters = self.counters();
        let counter = counters.entry(sequence.id).or_insert(Counter::NEW);
        take_next(&mut counter.next, sequence)
    }

    /// `setval(sequence, value, …)` checked: 22003 outside `1..=max`.
    pub fn check_set(sequence: &SequenceRef, value: i64) -> RsResult<()> {
        if (1..=sequence.max).contains(&value) {
            return Ok(());
        }
        Err(RsError::new(
            &codes::NUMERIC_OUT_OF_RANGE,
            format!(
                "setval: value {value} is out of bounds for sequence \"{}\" (1..{})",
                sequence.name, sequence.max
            ),
        ))
    }

    /// `setval(sequence, value, is_called)`: the next `nextval` returns
    /// `value + 1` (`value` when not `is_called`). 22003 outside
    /// `1..=max`, as PostgreSQL bounds an ascending sequence.
    pub fn set(&self, sequence: &SequenceRef, value: i64, is_called: bool) -> RsResult<()> {
        Sequences::check_set(sequence, value)?;
        let mut counters = self.counters();
        let counter = counters.entry(sequence.id).or_insert(Counter::NEW);
        counter.next = next_after_set(value, is_called);
        Ok(())
    }

    /// Makes durable that no value handed out so far is handed out again.
    /// Writes only when a sequence went past its logged value.
    pub(crate) async fn persist(&self, control: &ControlDb) -> RsResult<()> {
        if !self.behind() {
            return Ok(());
        }
        let _one_at_a_time = self.persisting.lock().await;
        let due: Vec<(ObjectId, i64)> = self
            .counters()
            .iter()
            .filter(|(_, counter)| counter.highest() > counter.logged)
            .map(|(id, counter)| (*id, counter.highest().saturating_add(PRELOGGED)))
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        for (id, logged) in &due {
            batch.put(sequence_key(*id), logged.to_be_bytes());
        }
        control.write(batch).await?;
        let mut counters = self.counters();
        for (id, logged) in due {
            if let Some(counter) = counters.get_mut(&id) {
                counter.logged = counter.logged.max(logged);
            }
        }
        Ok(())
    }

    fn behind(&self) -> bool {
        self.counters()
            .values()
            .any(|counter| counter.highest() > counter.logged)
    }

    /// `TRUNCATE … RESTART IDENTITY`, after its transaction committed: each
    /// sequence goes on from `next` (what the transaction, which drew from
    /// its own restarted counter, would hand out next), durably.
    pub(crate) async fn restart(
        &self,
        control: &ControlDb,
        restarted: &[(ObjectId, i128)],
    ) -> RsResult<()> {
        if restarted.is_empty() {
            return Ok(());
        }
        let _one_at_a_time = self.persisting.lock().await;
        // An exhausted BIGINT sequence (`next` past i64::MAX) stays so.
        let counter = |next: i128| Counter {
            next,
            logged: i64::try_from(next - 1).unwrap_or(i64::MAX),
        };
        let mut batch = WriteBatch::new();
        for (id, next) in restarted {
            batch.put(sequence_key(*id), counter(*next).logged.to_be_bytes());
        }
        control.write(batch).await?;
        let mut counters = self.counters();
        for (id, next) in restarted {
            counters.insert(*id, counter(*next));
        }
        Ok(())
    }

    /// Forgets dropped sequences (their keys go with their table's entry).
    pub(crate) fn forget(&self, ids: &[ObjectId]) {
        let mut counters = self.counters();
        for id in ids {
            counters.remove(id);
        }
    }
}

/// Hands out `*next` and moves it on; 2200H past the column type's
/// maximum. Shared by the global counters and a transaction's restarted
/// ones.
pub fn take_next(next: &mut i128, sequence: &SequenceRef) -> RsResult<i64> {
    let value = i64::try_from(*next)
        .ok()
        .filter(|value| *value <= sequence.max)
        .ok_or_else(|| {
            RsError::new(
                &codes::SEQUENCE_LIMIT,
                format!(
                    "nextval: reached maximum value of sequence \"{}\" ({})",
                    sequence.name, sequence.max
                ),
            )
        })?;
    *next += 1;
    Ok(value)
}

/// What `nextval` returns after `setval(value, is_called)`.
pub fn next_after_set(value: i64, is_called: bool) -> i128 {
    i128::from(value) + i128::from(is_called)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    //! Goal: values are handed out in order, bounded by the column type,
    //! and a start after persisting never hands out one again.
    use super::*;

    fn sequence(max: i64) -> SequenceRef {
        SequenceRef {
            id: ObjectId::from(7u64),
            name: "t_id_seq".into(),
            max,
        }
    }

    #[test]
    fn values_count_up_to_the_type_maximum() {
        let sequences = Sequences::default();
        let small = sequence(2);
        assert_eq!(sequences.next(&small).unwrap(), 1);
        assert_eq!(sequences.next(&small).unwrap(), 2);
        let error = sequences.next(&small).unwrap_err();
        assert_eq!(error.code, &codes::SEQUENCE_LIMIT);
        sequences.set(&small, 1, false).unwrap();
        assert_eq!(sequences.next(&small).unwrap(), 1);
        assert!(sequences.set(&small, 3, true).is_err());
        assert!(sequences.set(&small, 0, true).is_err());
    }

    #[tokio::test]
    async fn a_start_continues_after_every_persisted_value() {
        let store: std::sync::Arc<dyn slatedb::object_store::ObjectStore> =
            std::sync::Arc::new(slatedb::object_store::memory::InMemory::new());
        let control = ControlDb::open(store).await.unwrap();
        let sequences = Sequences::load(&control.db().await.unwrap()).await.unwrap();
        let serial = sequence(i64::from(i32::MAX));
        for expected in 1..=40 {
            assert_eq!(sequences.next(&serial).unwrap(), expected);
            sequences.persist(&control).await.unwrap();
        }
        // Logged twice: after 1 (up to 33) and after 34 (up to 66).
        let reloaded = Sequences::load(&control.db().await.unwrap()).await.unwrap();
        assert_eq!(reloaded.next(&serial).unwrap(), 67);
        reloaded.restart(&control, &[(serial.id, 3)]).await.unwrap();
        let exhausted = SequenceRef {
            id: ObjectId::from(8u64),
            name: "w_id_seq".into(),
            max: i64::MAX,
        };
        reloaded
            .restart(&control, &[(exhausted.id, i128::from(i64::MAX) + 1)])
            .await
            .unwrap();
        assert!(reloaded.next(&exhausted).is_err());
        let restarted = Sequences::load(&control.db().await.unwrap()).await.unwrap();
        assert_eq!(restarted.next(&serial).unwrap(), 3);
    }

    #[test]
    fn a_bigint_sequence_ends_at_its_maximum() {
        let sequences = Sequences::default();
        let wide = sequence(i64::MAX);
        sequences.set(&wide, i64::MAX - 1, true).unwrap();
        assert_eq!(sequences.next(&wide).unwrap(), i64::MAX);
        assert_eq!(
            sequences.next(&wide).unwrap_err().code,
            &codes::SEQUENCE_LIMIT
        );
        sequences.set(&wide, i64::MAX, true).unwrap();
        assert!(sequences.next(&wide).is_err());
    }
}
