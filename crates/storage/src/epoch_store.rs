//! The [`StateStore`] an epoch runs against: a pinned snapshot of the shard
//! plus the epoch's own buffered writes.

use std::collections::BTreeMap;

use rockstream_ops::state::merge_overlay;
use rockstream_ops::{ScanOrder, StateStore};
use rockstream_types::RsResult;

use crate::Snapshot;

pub struct EpochStore {
    snapshot: Snapshot,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl EpochStore {
    pub fn new(snapshot: Snapshot) -> Self {
        EpochStore {
            snapshot,
            writes: BTreeMap::new(),
        }
    }

    /// Number of buffered writes.
    pub fn pending_writes(&self) -> usize {
        self.writes.len()
    }

    /// The buffered writes, to be committed as one batch.
    pub fn into_writes(self) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        self.writes
    }
}

impl StateStore for EpochStore {
    async fn get(&mut self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        match self.writes.get(key) {
            Some(value) => Ok(value.clone()),
            None => self.snapshot.get(key).await,
        }
    }

    async fn scan_prefix(
        &mut self,
        prefix: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let pending: Vec<(&Vec<u8>, &Option<Vec<u8>>)> = self
            .writes
            .range(prefix.to_vec()..)
            .take_while(|(key, _)| key.starts_with(prefix))
            .collect();
        let deleted = pending.iter().filter(|(_, value)| value.is_none()).count();
        let stored = self
            .snapshot
            .scan_prefix(prefix, order, limit.saturating_add(deleted))
            .await?;
        Ok(match order {
            ScanOrder::Ascending => merge_overlay(stored, pending.into_iter(), order, limit),
            ScanOrder::Descending => merge_overlay(stored, pending.into_iter().rev(), order, limit),
        })
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert(key, Some(value));
    }

    fn delete(&mut self, key: Vec<u8>) {
        self.writes.insert(key, None);
    }
}
