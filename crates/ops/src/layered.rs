//! A write overlay on top of another [`StateStore`].
//!
//! Used to run one view's step tentatively: its writes land in the overlay,
//! and only if the step succeeds are they moved into the epoch's store. A
//! failing view (e.g. division by zero on some row) thus leaves no trace.

use std::collections::BTreeMap;

use rockstream_types::RsResult;

use crate::state::{merge_overlay, ScanOrder, StateStore};

pub struct LayeredStore<'a, S: StateStore> {
    base: &'a mut S,
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl<'a, S: StateStore> LayeredStore<'a, S> {
    pub fn new(base: &'a mut S) -> Self {
        LayeredStore {
            base,
            overlay: BTreeMap::new(),
        }
    }

    /// Moves the buffered writes into the base store.
    pub fn commit(self) {
        for (key, value) in self.overlay {
            match value {
                Some(value) => self.base.put(key, value),
                None => self.base.delete(key),
            }
        }
    }
}

impl<S: StateStore> StateStore for LayeredStore<'_, S> {
    async fn get(&mut self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        match self.overlay.get(key) {
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
            .overlay
            .range(prefix.to_vec()..)
            .take_while(|(key, _)| key.starts_with(prefix))
            .collect();
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

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.overlay.insert(key, Some(value));
    }

    fn delete(&mut self, key: Vec<u8>) {
        self.overlay.insert(key, None);
    }
}
