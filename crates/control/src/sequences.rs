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
    /// What `nextval` returns next.
    next: i64,
    /// Durable: a start continues after it.
    logged: i64,
}

impl Counter {
    const NEW: Counter = Counter { next: 1, logged: 0 };
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
                    next: logged.saturating_add(1),
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
        if counter.next > sequence.max {
            return Err(RsError::new(
                &codes::SEQUENCE_LIMIT,
                format!(
                    "nextval: reached maximum value of sequence \"{}\" ({})",
                    sequence.name, sequence.max
                ),
            ));
        }
        let value = counter.next;
        counter.next += 1;
        Ok(value)
    }

    /// `setval(sequence, value, is_called)`: the next `nextval` returns
    /// `value + 1` (`value` when not `is_called`). 22003 outside
    /// `1..=max`, as PostgreSQL bounds an ascending sequence.
    pub fn set(&self, sequence: &SequenceRef, value: i64, is_called: bool) -> RsResult<()> {
        if !(1..=sequence.max).contains(&value) {
            return Err(RsError::new(
                &codes::NUMERIC_OUT_OF_RANGE,
                format!(
                    "setval: value {value} is out of bounds for sequence \"{}\" (1..{})",
                    sequence.name, sequence.max
                ),
            ));
        }
        let mut counters = self.counters();
        let counter = counters.entry(sequence.id).or_insert(Counter::NEW);
        counter.next = if is_called { value + 1 } else { value };
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
            .filter(|(_, counter)| counter.next - 1 > counter.logged)
            .map(|(id, counter)| (*id, (counter.next - 1).saturating_add(PRELOGGED)))
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
            .any(|counter| counter.next - 1 > counter.logged)
    }

    /// `TRUNCATE … RESTART IDENTITY`, after its transaction committed: the
    /// sequences start over, durably.
    pub(crate) async fn restart(&self, control: &ControlDb, ids: &[ObjectId]) -> RsResult<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let _one_at_a_time = self.persisting.lock().await;
        let mut batch = WriteBatch::new();
        for id in ids {
            batch.put(sequence_key(*id), Counter::NEW.logged.to_be_bytes());
        }
        control.write(batch).await?;
        let mut counters = self.counters();
        for id in ids {
            counters.insert(*id, Counter::NEW);
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
        reloaded.restart(&control, &[serial.id]).await.unwrap();
        let restarted = Sequences::load(&control.db().await.unwrap()).await.unwrap();
        assert_eq!(restarted.next(&serial).unwrap(), 1);
    }
}
