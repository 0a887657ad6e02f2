//! `ShardDb`: a shard's state in SlateDB.
//!
//! One SlateDB per shard holds operator state, table rows, view output and
//! shard metadata under the prefixes of `rockstream_ops::keys`. Writes of an
//! epoch are buffered in an [`EpochStore`] (reads see them) and written as one
//! atomic `WriteBatch` together with the new epoch number; the commit returns
//! only once SlateDB reports the batch durable (DESIGN §9).
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
pub const UNFLUSHED_BYTES_MAX: usize = 256 * 1024 * 1024;

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
