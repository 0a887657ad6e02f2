//! `ShardDb`: a shard's state in SlateDB.
//!
//! One SlateDB per shard holds operator state, table rows, view output and
//! shard metadata under the prefixes of `rockstream_ops::keys`. Writes of an
//! epoch are buffered in an [`EpochStore`] (reads see them) and written as one
//! atomic `WriteBatch` together with the new epoch number; the commit returns
//! only once SlateDB reports the batch durable (DESIGN §9). Blind count
//! additions ([`Write::AddCount`]) become merge operands that SlateDB sums
//! with the `CountSum` operator on read, flush and compaction.
//!
//! The storage format version is stored at `0x06 'F' 'V'` and checked on open
//! (DESIGN §5.5): a shard written by an incompatible binary is refused with
//! `RS-5001`.

mod epoch_store;

use std::sync::Arc;
use std::time::Duration;

use slatedb::bytes::Bytes;
use slatedb::config::{ScanOptions, Settings};
use slatedb::object_store::ObjectStore;
use slatedb::{
    Db, DbIterator, DbSnapshot, IterationOrder, MergeOperator, MergeOperatorError, WriteBatch,
};

use rockstream_ops::keys;
use rockstream_ops::{ScanOrder, Write};
use rockstream_types::{codes, Epoch, RsError, RsResult};

pub use epoch_store::EpochStore;
pub use rockstream_common::object_store_for;

/// The on-disk format this binary writes.
pub const FORMAT_VERSION: u8 = 1;
/// Oldest format this binary reads.
pub const FORMAT_VERSION_MIN: u8 = 1;

/// How often SlateDB flushes its WAL: the latency floor of a commit.
pub const WAL_FLUSH_INTERVAL: Duration = Duration::from_millis(1);

/// Bound on memtable data not yet flushed to storage; writers wait beyond
/// it (SlateDB's default, 1 GiB, is too much for a laptop-sized process).
pub const UNFLUSHED_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Size at which a memtable is frozen and flushed as an L0 table; must stay
/// below [`UNFLUSHED_BYTES_MAX`].
pub const L0_TABLE_BYTES: usize = 16 * 1024 * 1024;

/// A shard's SlateDB.
pub struct ShardDb {
    db: Db,
    name: String,
}

impl ShardDb {
    /// Opens (creating if new) the database at `path` inside `store`.
    pub async fn open(store: Arc<dyn ObjectStore>, path: &str) -> RsResult<ShardDb> {
        let settings = Settings {
            flush_interval: Some(WAL_FLUSH_INTERVAL),
            max_unflushed_bytes: UNFLUSHED_BYTES_MAX,
            l0_sst_size_bytes: L0_TABLE_BYTES,
            ..Settings::default()
        };
        let db = Db::builder(path.to_string(), store)
            .with_settings(settings)
            .with_merge_operator(Arc::new(CountSum))
            .build()
            .await
            .map_err(|error| storage_error(path, error))?;
        let shard = ShardDb {
            db,
            name: path.to_string(),
        };
        shard.check_format_version().await?;
        Ok(shard)
    }

    async fn check_format_version(&self) -> RsResult<()> {
        let key = keys::format_version_key();
        match self
            .db
            .get(&key)
            .await
            .map_err(|error| storage_error(&self.name, error))?
        {
            Some(bytes) => {
                let version = bytes.first().copied().unwrap_or(0);
                if !(FORMAT_VERSION_MIN..=FORMAT_VERSION).contains(&version) {
                    return Err(RsError::new(
                        &codes::FORMAT_VERSION_INCOMPATIBLE,
                        format!(
                            "storage '{}' has format version {version}; this binary reads versions {FORMAT_VERSION_MIN} to {FORMAT_VERSION}",
                            self.name
                        ),
                    ));
                }
            }
            None => {
                let handle = self
                    .db
                    .put(&key, [FORMAT_VERSION])
                    .await
                    .map_err(|error| storage_error(&self.name, error))?;
                handle
                    .await_durable()
                    .await
                    .map_err(|error| storage_error(&self.name, error))?;
            }
        }
        Ok(())
    }

    /// A consistent read-only view of the committed state.
    pub fn snapshot(&self) -> RsResult<Snapshot> {
        let inner = self
            .db
            .snapshot()
            .map_err(|error| storage_error(&self.name, error))?;
        Ok(Snapshot {
            inner,
            name: self.name.clone(),
        })
    }

    /// The last committed epoch (0 for a new shard).
    pub async fn committed_epoch(&self) -> RsResult<Epoch> {
        let bytes = self
            .db
            .get(keys::epoch_key())
            .await
            .map_err(|error| storage_error(&self.name, error))?;
        Ok(bytes
            .map(|bytes| keys::decode_weight(&bytes) as Epoch)
            .unwrap_or(0))
    }

    /// Writes an epoch's buffered changes and the new epoch number as one
    /// atomic batch, and waits until it is durable.
    pub async fn commit(
        &self,
        epoch: Epoch,
        writes: impl IntoIterator<Item = (Vec<u8>, Write)>,
    ) -> RsResult<()> {
        let mut batch = WriteBatch::new();
        for (key, write) in writes {
            debug_assert!(
                key.first() != Some(&keys::SHARD_META) || key != keys::epoch_key(),
                "epoch key written by an operator"
            );
            match write {
                Write::Put(value) => batch.put(&key, &value),
                Write::Delete => batch.delete(&key),
                Write::AddCount(change) => batch.merge(&key, keys::encode_weight(change)),
            }
        }
        batch.put(keys::epoch_key(), keys::encode_weight(epoch as i64));
        let handle = self
            .db
            .write(batch)
            .await
            .map_err(|error| storage_error(&self.name, error))?;
        handle
            .await_durable()
            .await
            .map_err(|error| storage_error(&self.name, error))
    }

    pub async fn close(&self) -> RsResult<()> {
        self.db
            .close()
            .await
            .map_err(|error| storage_error(&self.name, error))
    }
}

/// A pinned, consistent view of a shard.
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<DbSnapshot>,
    name: String,
}

/// Batches of at most this many keys are looked up one by one.
const GET_MANY_POINT_LOOKUPS_MAX: usize = 16;

/// Bound on the entries one call to [`Snapshot::scan_chunk`] returns.
pub const SCAN_CHUNK_ROWS_MAX: usize = 8192;

impl Snapshot {
    pub async fn get(&self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        let value = self
            .inner
            .get(key)
            .await
            .map_err(|error| storage_error(&self.name, error))?;
        Ok(value.map(|bytes| bytes.to_vec()))
    }

    /// Point lookups of many keys, answered in the order of `keys`.
    ///
    /// The keys are sorted and answered by one scan over the range they
    /// span, which for keys that are new or clustered (a `COPY` in key
    /// order) costs a few block reads instead of one lookup per key. When
    /// the range holds many stored keys that were not asked for, the scan
    /// stops and the rest are looked up one by one.
    pub async fn get_many(&self, keys: &[&[u8]]) -> RsResult<Vec<Option<Vec<u8>>>> {
        let mut values = vec![None; keys.len()];
        if keys.len() <= GET_MANY_POINT_LOOKUPS_MAX {
            for (value, key) in values.iter_mut().zip(keys) {
                *value = self.get(key).await?;
            }
            return Ok(values);
        }
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_unstable_by_key(|index| keys[*index]);
        let range = keys[order[0]]..=keys[order[order.len() - 1]];
        let mut iterator = self
            .inner
            .scan(range)
            .await
            .map_err(|error| storage_error(&self.name, error))?;
        let budget = 2 * keys.len() + SCAN_CHUNK_ROWS_MAX;
        let mut next = 0;
        let mut read = 0;
        while next < order.len() {
            let Some(entry) = iterator
                .next()
                .await
                .map_err(|error| storage_error(&self.name, error))?
            else {
                break;
            };
            read += 1;
            while next < order.len() && keys[order[next]] < entry.key.as_ref() {
                next += 1;
            }
            while next < order.len() && keys[order[next]] == entry.key.as_ref() {
                values[order[next]] = Some(entry.value.to_vec());
                next += 1;
            }
            if read >= budget {
                // Dense stored data between the keys asked for.
                for index in &order[next..] {
                    values[*index] = self.get(keys[*index]).await?;
                }
                break;
            }
        }
        Ok(values)
    }

    /// Up to `limit` entries with `prefix`, in `order`.
    pub async fn scan_prefix(
        &self,
        prefix: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let options = ScanOptions {
            order: match order {
                ScanOrder::Ascending => IterationOrder::Ascending,
                ScanOrder::Descending => IterationOrder::Descending,
            },
            ..ScanOptions::default()
        };
        let iterator = self
            .inner
            .scan_prefix_with_options(prefix, .., &options)
            .await
            .map_err(|error| storage_error(&self.name, error))?;
        self.collect(iterator, limit).await
    }

    /// Entries with `prefix` strictly after `after` (or from the start), at
    /// most [`SCAN_CHUNK_ROWS_MAX`]: for streaming large scans.
    pub async fn scan_chunk(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let iterator = match after {
            Some(after) => {
                let suffix = after[prefix.len()..].to_vec();
                self.inner
                    .scan_prefix(
                        prefix,
                        (
                            std::ops::Bound::Excluded(suffix),
                            std::ops::Bound::Unbounded,
                        ),
                    )
                    .await
            }
            None => self.inner.scan_prefix(prefix, ..).await,
        }
        .map_err(|error| storage_error(&self.name, error))?;
        self.collect(iterator, SCAN_CHUNK_ROWS_MAX).await
    }

    /// Reads up to `limit` entries from `iterator`.
    async fn collect(
        &self,
        mut iterator: DbIterator,
        limit: usize,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        while out.len() < limit {
            match iterator
                .next()
                .await
                .map_err(|error| storage_error(&self.name, error))?
            {
                Some(entry) => out.push((entry.key.to_vec(), entry.value.to_vec())),
                None => break,
            }
        }
        Ok(out)
    }
}

/// SlateDB's merge operator for count keys: operands and values are 8-byte
/// big-endian weights, merged by summing ([`Write::AddCount`]).
struct CountSum;

impl MergeOperator for CountSum {
    fn merge(
        &self,
        _key: &Bytes,
        existing_value: Option<Bytes>,
        value: Bytes,
    ) -> Result<Bytes, MergeOperatorError> {
        self.merge_batch(_key, existing_value, std::slice::from_ref(&value))
    }

    fn merge_batch(
        &self,
        _key: &Bytes,
        existing_value: Option<Bytes>,
        operands: &[Bytes],
    ) -> Result<Bytes, MergeOperatorError> {
        let base = existing_value.map_or(0, |value| keys::decode_weight(&value));
        let sum = operands
            .iter()
            .fold(base, |sum, operand| sum + keys::decode_weight(operand));
        Ok(Bytes::from(keys::encode_weight(sum)))
    }
}

pub fn storage_error(name: &str, error: slatedb::Error) -> RsError {
    RsError::new(&codes::STORAGE_IO, format!("storage '{name}': {error}"))
}

#[cfg(test)]
mod tests {
    //! Goal: batched lookups answer exactly like point lookups, whether the
    //! scan covers the batch or stops early on dense data; count additions
    //! are summed by the merge operator across epochs.
    use super::*;

    fn key(n: u32) -> Vec<u8> {
        let mut key = vec![keys::OUTPUT];
        key.extend_from_slice(&n.to_be_bytes());
        key
    }

    async fn shard_with(stored: impl Iterator<Item = u32>) -> ShardDb {
        let store = object_store_for("memory://").expect("memory store");
        let shard = ShardDb::open(store, "shard").await.expect("opens");
        let writes = stored.map(|n| (key(n), Write::Put(n.to_be_bytes().to_vec())));
        shard.commit(1, writes).await.expect("commits");
        shard
    }

    async fn check_against_point_lookups(shard: &ShardDb, asked: &[u32]) {
        let snapshot = shard.snapshot().expect("snapshot");
        let keys: Vec<Vec<u8>> = asked.iter().map(|n| key(*n)).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let batched = snapshot.get_many(&refs).await.expect("get_many");
        for (key, value) in refs.iter().zip(batched) {
            assert_eq!(value, snapshot.get(key).await.expect("get"), "key {key:?}");
        }
    }

    #[tokio::test]
    async fn get_many_matches_point_lookups() {
        // Sparse: every third key stored; ask for a shuffled run with repeats.
        let shard = shard_with((0..300).map(|n| n * 3)).await;
        let asked: Vec<u32> = (0..200)
            .map(|n| (n * 7919) % 500)
            .chain([5, 5, 999])
            .collect();
        check_against_point_lookups(&shard, &asked).await;
        // Few keys: point lookups.
        check_against_point_lookups(&shard, &[3, 4]).await;
    }

    #[tokio::test]
    async fn get_many_falls_back_on_dense_ranges() {
        let shard = shard_with(0..40_000).await;
        let asked: Vec<u32> = (0..40)
            .map(|n| n * 1_000 + 1)
            .chain([50_000, 39_999])
            .collect();
        check_against_point_lookups(&shard, &asked).await;
    }

    #[tokio::test]
    async fn count_additions_sum_across_epochs() {
        let shard = shard_with(std::iter::empty()).await;
        for epoch in 2..5 {
            let writes = [(key(7), Write::AddCount(epoch))];
            shard.commit(epoch as Epoch, writes).await.expect("commits");
        }
        let snapshot = shard.snapshot().expect("snapshot");
        let value = snapshot.get(&key(7)).await.expect("get").expect("present");
        assert_eq!(keys::decode_weight(&value), 2 + 3 + 4);
        let scanned = snapshot
            .scan_prefix(&[keys::OUTPUT], ScanOrder::Ascending, 10)
            .await
            .expect("scan");
        assert_eq!(scanned, vec![(key(7), keys::encode_weight(9))]);
    }
}
