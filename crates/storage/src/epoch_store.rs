//! The [`StateStore`](rockstream_ops::StateStore) an epoch runs against: a
//! pinned snapshot of the shard with the epoch's own writes overlaid.

use rockstream_ops::state::Entries;
use rockstream_ops::{OverlayStore, ScanOrder, StateRead};
use rockstream_types::RsResult;

use crate::Snapshot;

/// An epoch's state: reads see the snapshot plus the epoch's writes; the
/// writes become the epoch's atomic batch.
pub type EpochStore = OverlayStore<Snapshot>;

impl StateRead for Snapshot {
    async fn get(&self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        Snapshot::get(self, key).await
    }

    async fn get_many(&self, keys: &[&[u8]]) -> RsResult<Vec<Option<Vec<u8>>>> {
        Snapshot::get_many(self, keys).await
    }

    async fn scan_prefix(
        &self,
        prefix: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        Snapshot::scan_prefix(self, prefix, order, limit).await
    }

    async fn scan_prefixes(&self, prefixes: &[&[u8]], limit: usize) -> RsResult<Vec<Entries>> {
        Snapshot::scan_prefixes(self, prefixes, limit).await
    }
}
