//! A write overlay on top of a readable store.
//!
//! [`OverlayStore`] buffers writes in a sorted map and answers reads from
//! the buffer first, then from its base. Two uses: an epoch's store is an
//! overlay over the shard's pinned snapshot (its writes become the epoch's
//! atomic batch), and one view's step runs in an overlay over the epoch
//! ([`LayeredStore`]) so a failing view (e.g. division by zero on some row)
//! leaves no trace: its writes are kept only if the step succeeds.

use std::collections::BTreeMap;

use rockstream_types::RsResult;

use crate::state::{merge_overlay, ScanOrder, StateRead, StateStore};

pub struct OverlayStore<B> {
    base: B,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

/// An overlay over a borrowed store, committed into it on success.
pub type LayeredStore<'a, S> = OverlayStore<&'a mut S>;

impl<B: StateRead> OverlayStore<B> {
    pub fn new(base: B) -> Self {
        OverlayStore {
            base,
            writes: BTreeMap::new(),
        }
    }

    /// Number of buffered writes.
    pub fn pending_writes(&self) -> usize {
        self.writes.len()
    }

    /// The buffered writes (`None` = delete), in key order.
    pub fn into_writes(self) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        self.writes
    }
}

impl<B: StateStore> OverlayStore<B> {
    /// Moves the buffered writes into the base store.
    pub fn commit(mut self) {
        for (key, value) in std::mem::take(&mut self.writes) {
            match value {
                Some(value) => self.base.put(key, value),
                None => self.base.delete(key),
            }
        }
    }
}

impl<B: StateRead> StateRead for OverlayStore<B> {
    async fn get(&mut self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        match self.writes.get(key) {
            Some(value) => Ok(value.clone()),
            None => self.base.get(key).await,
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
        // Deleted keys may hide stored ones: read that many more.
        let deleted = pending.iter().filter(|(_, value)| value.is_none()).count();
        let stored = self
            .base
            .scan_prefix(prefix, order, limit.saturating_add(deleted))
            .await?;
        Ok(match order {
            ScanOrder::Ascending => merge_overlay(stored, pending.into_iter(), order, limit),
            ScanOrder::Descending => merge_overlay(stored, pending.into_iter().rev(), order, limit),
        })
    }
}

impl<B: StateRead> StateStore for OverlayStore<B> {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert(key, Some(value));
    }

    fn delete(&mut self, key: Vec<u8>) {
        self.writes.insert(key, None);
    }
}
