//! `ShardDb`: a shard's state in SlateDB.
//!
//! One SlateDB per shard holds operator state, table rows, view output and
//! shard metadata under the prefixes of `rockstream_ops::keys`. Writes of an
//! epoch are buffered in an [`EpochStore`] (reads see them) and written as one
//! atomic `WriteBatch` together with the new epoch number; the commit returns
//! only once the batch is durable (DESIGN §9): on local storage in the
//! shard's commit log ([`commit_log`], RFC 0019), elsewhere in SlateDB's
//! WAL. Blind count
//! additions ([`Write::AddCount`]) become merge operands that SlateDB sums
//! with the `CountSum` operator on read, flush and compaction.
//!
//! A count reached by additions may sum to zero. Reads here hide such
//! entries ([`keys::holds_count`] says which keys hold counts), so every
//! layer above sees a zero count as absent; compaction removes them with the
//! shard's compaction filter ([`StateFilter`]), which also empties dropped
//! objects' keys ([`ShardDb::compact_away`]).
//!
//! The storage format version is stored at `0x06 'F' 'V'` and checked on open
//! (DESIGN §5.5): a shard written by an incompatible binary is refused with
//! `RS-5001`.

mod cache;
pub mod commit_log;
mod dropped;
mod epoch_store;
mod set;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use slatedb::bytes::Bytes;
use slatedb::config::{ScanOptions, Settings};
use slatedb::db_cache::moka::{MokaCache, MokaCacheOptions};
use slatedb::db_cache::{DbCache, SplitCache};
use slatedb::object_store::ObjectStore;
use slatedb::{
    BloomFilterPolicy, CompactionFilter, CompactionFilterDecision, CompactionFilterError,
    CompactionFilterSupplier, CompactionJobContext, CompactorBuilder, Db, DbIterator, DbSnapshot,
    FilterPolicy, IterationOrder, MergeOperator, MergeOperatorError, PrefixExtractor, PrefixTarget,
    RowEntry, ValueDeletable, WriteBatch, WriteBatchBuilder,
};

use rockstream_ops::keys;
use rockstream_ops::state::Entries;
use rockstream_ops::{ScanOrder, Write};
use rockstream_types::{codes, Epoch, RsError, RsResult};

pub use cache::{CacheStats, Lookup, StateCache, ARRANGEMENT_CACHE_BYTES_DEFAULT};
use commit_log::CommitLog;
use dropped::{Dropped, Removable, StateSchedulerSupplier};
pub use epoch_store::EpochStore;
pub use rockstream_common::object_store_for;
use rockstream_common::BackgroundRuntime;
pub use set::{IndexEntries, IndexRowCursor, RowCursor, SetCursor, SnapshotSet};

/// The on-disk format this binary writes.
///
/// Version 2 moved table rows from `0x03` to their own prefix `0x07`, so
/// that every `0x03` key holds a view-output count. Version 3 added keyed
/// view output (`0x08`); version-2 storage is upgraded in place on open
/// (its views keep the counted layout), so older binaries then refuse it.
/// Version 4 may split a storage into shards (`shards/<id>`, with the
/// bucket map in the control database): `shards/0` alone is no longer the
/// whole storage, so binaries that read only it must refuse it.
/// Version 5 adds plain index entries (`0x0A`, RFC 0014), whose catalog
/// records an older binary would read as UNIQUE constraints and whose
/// keys its storage's prefix filters would not cover: it must refuse them.
/// Version 6 may hold arrays (`array_agg` results, RFC 0016), a datum tag
/// older binaries cannot decode.
/// Version 7 keeps commits on local storage in a commit log (RFC 0019)
/// rather than SlateDB's WAL: an older binary would not replay it.
pub const FORMAT_VERSION: u8 = 7;
/// Oldest format this binary reads.
pub const FORMAT_VERSION_MIN: u8 = 2;

/// How often SlateDB flushes its WAL on its own, where it has one (not on
/// local storage, RFC 0019). Epoch commits flush it explicitly
/// ([`ShardDb::commit`]).
pub const WAL_FLUSH_INTERVAL: Duration = Duration::from_millis(10);

/// Bound on memtable data not yet flushed to storage, over all shards of a
/// storage; writers wait beyond it (SlateDB's default, 1 GiB per database,
/// is too much for a laptop-sized process). Each shard gets an equal part,
/// within [`UNFLUSHED_BYTES_SHARD_MIN`]..=[`UNFLUSHED_BYTES_SHARD_MAX`].
pub const UNFLUSHED_BYTES_TOTAL: usize = 256 * 1024 * 1024;
/// A shard's bound on unflushed memtable data, however few shards share
/// [`UNFLUSHED_BYTES_TOTAL`].
pub const UNFLUSHED_BYTES_SHARD_MAX: usize = 128 * 1024 * 1024;
/// A shard's bound on unflushed memtable data, however many shards share
/// [`UNFLUSHED_BYTES_TOTAL`].
pub const UNFLUSHED_BYTES_SHARD_MIN: usize = 32 * 1024 * 1024;

/// A shard's bound on unflushed memtable data when `shards` shards share
/// [`UNFLUSHED_BYTES_TOTAL`]. A memtable is frozen and flushed as an L0
/// table at half of it, so one can fill while the previous one uploads.
///
/// Measured (BENCHMARKS.md, sixteenth round): one shard loading 1M rows with
/// two views spends 27 % less CPU with 64 MiB L0 tables than with 16 MiB
/// ones (fewer L0 tables, so fewer sorted runs to compact, and no writer
/// stalls at the bound); 128 MiB tables gained nothing more and cost 270 MiB
/// more RSS.
pub fn unflushed_bytes_per_shard(shards: u16) -> usize {
    (UNFLUSHED_BYTES_TOTAL / usize::from(shards.max(1)))
        .clamp(UNFLUSHED_BYTES_SHARD_MIN, UNFLUSHED_BYTES_SHARD_MAX)
}

/// A shard's SlateDB.
pub struct ShardDb {
    db: Db,
    name: String,
    /// The hot part of the shard's operator state, kept coherent by
    /// [`ShardDb::commit`].
    cache: Arc<StateCache>,
    /// What [`ShardDb::reopen`] opens it with again.
    opened: Opened,
    /// Runs the shard's compactions (shared by the shards of a storage);
    /// declared after `db` so it outlives it.
    compaction: Arc<BackgroundRuntime>,
    /// On local storage, where commits are durable (RFC 0019); `None` where
    /// SlateDB's WAL makes them durable.
    log: Option<CommitLog>,
    /// Held from a commit's log append to its memtable write, so that the
    /// memtable takes records in LSN order.
    writing: tokio::sync::Mutex<()>,
}

/// How a shard was opened.
#[derive(Clone)]
struct Opened {
    store: Arc<dyn ObjectStore>,
    /// How many shards share the storage's memtable budget.
    shards: u16,
    /// The block cache (shared by the storage's shards) and the shard's
    /// id in it.
    block_cache: Arc<dyn DbCache>,
    cache_id: u64,
    /// The prefixes its compactions empty, kept across a reopen.
    dropped: Arc<Dropped>,
    /// The shard's commit log directory, on local storage.
    log_dir: Option<PathBuf>,
    /// The storage's lock, held while any of its shards is open: one
    /// process at a time appends to its commit logs.
    _lock: Option<Arc<StorageLock>>,
}

/// Where shard `shard` of a storage lives.
pub fn shard_path(shard: u16) -> String {
    format!("shards/{shard}")
}

impl ShardDb {
    /// Opens (creating if new) the database at `path` inside `store`.
    pub async fn open(store: Arc<dyn ObjectStore>, path: &str) -> RsResult<ShardDb> {
        ShardDb::open_alone(store, path, ARRANGEMENT_CACHE_BYTES_DEFAULT).await
    }

    /// A storage's only shard, with an arrangement cache of `cache_bytes`.
    async fn open_alone(
        store: Arc<dyn ObjectStore>,
        path: &str,
        cache_bytes: usize,
    ) -> RsResult<ShardDb> {
        let compaction = Arc::new(compaction_runtime(path)?);
        let opened = Opened {
            store,
            shards: 1,
            block_cache: block_and_meta_cache(),
            cache_id: 0,
            dropped: Arc::default(),
            log_dir: None,
            _lock: None,
        };
        let cache = Arc::new(StateCache::new(cache_bytes));
        ShardDb::open_with(path, opened, cache, compaction).await
    }

    /// Opens (creating if new) shards `0..count` of the storage in `store`,
    /// at [`shard_path`]. They share one block cache and one compaction
    /// runtime, so memory and background threads do not grow with the
    /// shard count; each has an arrangement cache of
    /// `arrangement_cache_bytes` (0: none). With `logs` (local storage),
    /// shard `n`'s commits are durable in its commit log at `logs.root/n`
    /// rather than in SlateDB's WAL (RFC 0019).
    pub async fn open_all(
        store: Arc<dyn ObjectStore>,
        count: u16,
        arrangement_cache_bytes: usize,
        logs: Option<&CommitLogs>,
    ) -> RsResult<Vec<ShardDb>> {
        let log_root = logs.map(|logs| logs.root.as_path());
        let lock = logs.map(|logs| logs.lock.clone());
        let cache = block_and_meta_cache();
        let compaction = Arc::new(compaction_runtime("shards")?);
        let mut shards = Vec::with_capacity(usize::from(count));
        for shard in 0..count {
            let path = shard_path(shard);
            let opened = Opened {
                store: store.clone(),
                shards: count,
                block_cache: cache.clone(),
                cache_id: u64::from(shard),
                dropped: Arc::default(),
                log_dir: log_root.map(|root| root.join(shard.to_string())),
                _lock: lock.clone(),
            };
            let state_cache = Arc::new(StateCache::new(arrangement_cache_bytes));
            shards.push(ShardDb::open_with(&path, opened, state_cache, compaction.clone()).await?);
        }
        Ok(shards)
    }

    /// Opens this shard's database again over what is durable, after a
    /// failure closed it (a full disk, say): its epoch's unfinished write
    /// is gone, as after a crash. The shard keeps its caches (the
    /// arrangement cache emptied). The failed instance is closed first.
    pub async fn reopen(&self) -> RsResult<ShardDb> {
        if let Err(error) = self.db.close().await {
            tracing::debug!(shard = %self.name, %error, "closing a failed shard");
        }
        self.cache.forget_all();
        ShardDb::open_with(
            &self.name,
            self.opened.clone(),
            self.cache.clone(),
            self.compaction.clone(),
        )
        .await
    }

    async fn open_with(
        path: &str,
        opened: Opened,
        cache: Arc<StateCache>,
        compaction: Arc<BackgroundRuntime>,
    ) -> RsResult<ShardDb> {
        let mut settings = settings(path, opened.shards)?;
        let log = match &opened.log_dir {
            None => None,
            Some(dir) => {
                if !CommitLog::exists(dir)? {
                    ShardDb::leave_the_wal(path, &opened, settings.clone(), &compaction).await?;
                    CommitLog::create(dir)?;
                }
                settings.wal_enabled = false;
                Some(dir.clone())
            }
        };
        let db = build_db(path, &opened, settings, &compaction).await?;
        // A storage of another format is refused before its log is read:
        // its records may not be this binary's.
        let replayed = match refuse_other_formats(path, &db).await {
            Err(error) => Err(error),
            Ok(()) => match log {
                None => Ok(None),
                Some(dir) => replay_log(path, &db, &dir).await.map(Some),
            },
        };
        let log = match replayed {
            Ok(log) => log,
            Err(error) => {
                // Nothing of a refused or half-replayed open is flushed.
                close_unflushed(&db).await;
                return Err(error);
            }
        };
        let shard = ShardDb {
            db,
            name: path.to_string(),
            cache,
            opened,
            compaction,
            log,
            writing: tokio::sync::Mutex::new(()),
        };
        if let Err(error) = shard.write_format_version().await {
            // Its background tasks stop with it.
            close_unflushed(&shard.db).await;
            return Err(error);
        }
        Ok(shard)
    }

    /// Moves a shard written with SlateDB's WAL to L0 tables alone, before
    /// it gets a commit log: opened with the WAL (which replays it), its
    /// memtable flushed, closed.
    async fn leave_the_wal(
        path: &str,
        opened: &Opened,
        settings: Settings,
        compaction: &Arc<BackgroundRuntime>,
    ) -> RsResult<()> {
        let manifests = slatedb::object_store::path::Path::from(format!("{path}/manifest"));
        let is_new = futures::StreamExt::next(&mut opened.store.list(Some(&manifests)))
            .await
            .is_none();
        if is_new {
            return Ok(());
        }
        let db = build_db(path, opened, settings, compaction).await?;
        let flushed = db
            .flush_with_options(slatedb::config::FlushOptions {
                flush_type: slatedb::config::FlushType::MemTable,
            })
            .await;
        let closed = db.close().await;
        flushed
            .and(closed)
            .map_err(|error| storage_error(path, error))?;
        tracing::info!(shard = %path, "storage moved from SlateDB's WAL to a commit log");
        Ok(())
    }

    /// Records this binary's format version in the shard's tables (a new
    /// shard's, or an older format's upgraded in place), unless they hold
    /// it. With a commit log it is read as the tables hold it: a version
    /// written to the log alone would not stop an older binary.
    async fn write_format_version(&self) -> RsResult<()> {
        let key = keys::format_version_key();
        let options = slatedb::config::ReadOptions {
            durability_filter: if self.log.is_some() {
                slatedb::config::DurabilityLevel::Remote
            } else {
                slatedb::config::DurabilityLevel::Memory
            },
            ..slatedb::config::ReadOptions::default()
        };
        let stored = self
            .db
            .get_with_options(&key, &options)
            .await
            .map_err(|error| storage_error(&self.name, error))?;
        if stored.as_deref() != Some(&[FORMAT_VERSION][..]) {
            self.put_durably(&key, &[FORMAT_VERSION]).await?;
        }
        Ok(())
    }

    /// Writes `key` durably and, with a commit log, into an L0 table at
    /// once: a binary that does not know the log reads only the tables, so
    /// the format version that refuses it must be there.
    async fn put_durably(&self, key: &[u8], value: &[u8]) -> RsResult<()> {
        self.write_outside_epochs([(key.to_vec(), Write::Put(value.to_vec()))])
            .await?;
        if self.log.is_some() {
            self.flush_memtable().await?;
        }
        Ok(())
    }

    /// Waits until the write behind `handle` is in the WAL on storage.
    async fn durable(&self, handle: slatedb::WriteHandle) -> RsResult<()> {
        handle
            .await_durable()
            .await
            .map_err(|error| storage_error(&self.name, error))
    }

    /// A consistent read-only view of the committed state.
    pub fn snapshot(&self) -> RsResult<Snapshot> {
        let before = self.cache.generation();
        let inner = self
            .db
            .snapshot()
            .map_err(|error| storage_error(&self.name, error))?;
        // The cache serves the snapshot only if no commit began or ended
        // while it was taken.
        let cache = before
            .filter(|generation| self.cache.generation() == Some(*generation))
            .map(|generation| (self.cache.clone(), generation));
        Ok(Snapshot {
            inner,
            name: self.name.clone(),
            cache,
        })
    }

    /// The arrangement cache's counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// The shard's arrangement cache.
    pub fn cache(&self) -> Arc<StateCache> {
        self.cache.clone()
    }

    /// Whether the shard's database is closed: by SlateDB after a write it
    /// could not make, or by [`ShardDb::close`].
    pub fn is_closed(&self) -> bool {
        self.db.status().close_reason.is_some()
    }

    /// Why SlateDB closed this shard by itself, if it did: a background
    /// write it could not make (an L0 flush on a full disk, say) closes it
    /// for good, and every read and write fails from then on, until the
    /// shard is reopened.
    pub async fn failure(&self) -> Option<RsError> {
        self.db.status().close_reason?;
        // A closed database answers every call with why it closed.
        Some(match self.committed_epoch().await {
            Err(error) => error,
            Ok(_) => RsError::new(
                &codes::STORAGE_IO,
                format!("storage '{}' was closed", self.name),
            ),
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
    ) -> Result<(), CommitError> {
        self.cache.begin_commit();
        let committed = self.write_epoch(Some(epoch), writes).await;
        self.cache.finish_commit(committed.is_ok());
        committed
    }

    /// Writes `writes` durably outside any epoch: the shard's epoch number
    /// stays, and no other shard's commit is tied to this one. Only for
    /// writes no reader and no epoch depends on, which repeating after a
    /// crash makes whole (deleting a dropped object's keys).
    pub async fn write_outside_epochs(
        &self,
        writes: impl IntoIterator<Item = (Vec<u8>, Write)>,
    ) -> RsResult<()> {
        self.cache.begin_commit();
        let written = self.write_epoch(None, writes).await;
        self.cache.finish_commit(written.is_ok());
        written.map_err(|error| error.cause)
    }

    /// Writes `writes` and, with `epoch`, the new epoch number as one
    /// atomic batch, and waits until it is durable.
    async fn write_epoch(
        &self,
        epoch: Option<Epoch>,
        writes: impl IntoIterator<Item = (Vec<u8>, Write)>,
    ) -> Result<(), CommitError> {
        let writes: Vec<(Vec<u8>, Write)> = writes.into_iter().collect();
        self.cache.apply_all(&writes);
        let mut batch = WriteBatchBuilder::with_capacity(writes.len() + 1);
        let mut record = self.log.as_ref().map(|_| commit_log::Record::default());
        for (key, write) in writes {
            debug_assert!(
                key.first() != Some(&keys::SHARD_META) || key != keys::epoch_key(),
                "epoch key written by an operator"
            );
            // Only counts are added to: the cache, as storage, reads a
            // count that sums to zero as absent.
            debug_assert!(
                !matches!(write, Write::AddCount(_)) || keys::holds_count(&key),
                "a count addition to a key that holds no count"
            );
            if let Some(record) = &mut record {
                record.push(&key, &write);
            }
            add_to_batch(&mut batch, key, write);
        }
        if let Some(epoch) = epoch {
            let write = Write::Put(keys::encode_weight(epoch as i64));
            if let Some(record) = &mut record {
                record.push(&keys::epoch_key(), &write);
            }
            add_to_batch(&mut batch, keys::epoch_key(), write);
        }
        let batch = batch.build();
        match (&self.log, record) {
            (Some(log), Some(record)) => self.write_logged(log, batch, record).await,
            _ => self.write_to_wal(batch).await,
        }
    }

    /// Makes `batch` durable in the commit log, then applies it to the
    /// memtable with its LSN (RFC 0019).
    async fn write_logged(
        &self,
        log: &CommitLog,
        mut batch: WriteBatch,
        record: commit_log::Record,
    ) -> Result<(), CommitError> {
        if record.is_empty() {
            return Ok(());
        }
        let _writing = self.writing.lock().await;
        // A shard SlateDB closed (a failed flush) takes no record: the
        // engine reopens it.
        if self.is_closed() {
            let cause = match self.failure().await {
                Some(error) => error,
                None => RsError::new(
                    &codes::STORAGE_IO,
                    format!("storage '{}' was closed", self.name),
                ),
            };
            return Err(CommitError {
                cause,
                maybe_applied: false,
            });
        }
        // Reclaiming segments needs to know what the tables hold.
        let durable = if log.rolls_next() {
            Some(self.durable_lsn().await.map_err(|cause| CommitError {
                cause,
                maybe_applied: false,
            })?)
        } else {
            None
        };
        let lsn = match log.append(record, durable).await {
            Ok(lsn) => lsn,
            Err(error) => {
                if error.maybe_durable {
                    // Whether the record is on disk is unknown: closed, the
                    // shard is reopened by the engine, which reads the log
                    // again (and writes its last record again).
                    close_unflushed(&self.db).await;
                }
                return Err(CommitError {
                    cause: error.cause,
                    maybe_applied: error.maybe_durable,
                });
            }
        };
        batch.put(keys::log_lsn_key(), lsn.to_be_bytes());
        // Durable from here: a failure to apply it is repaired by the
        // replay when the shard is opened again, so the shard is closed for
        // the engine to reopen.
        match self.db.write(batch).await {
            Ok(_) => Ok(()),
            Err(error) => {
                close_unflushed(&self.db).await;
                Err(CommitError {
                    cause: storage_error(&self.name, error),
                    maybe_applied: true,
                })
            }
        }
    }

    /// The LSN of the last commit-log record in the shard's L0 tables.
    async fn durable_lsn(&self) -> RsResult<u64> {
        let options = slatedb::config::ReadOptions {
            durability_filter: slatedb::config::DurabilityLevel::Remote,
            ..slatedb::config::ReadOptions::default()
        };
        read_lsn(&self.name, &self.db, &options).await
    }

    /// Writes `batch` and waits until SlateDB's WAL holds it.
    async fn write_to_wal(&self, batch: WriteBatch) -> Result<(), CommitError> {
        let handle = self.db.write(batch).await.map_err(|error| CommitError {
            cause: storage_error(&self.name, error),
            maybe_applied: false,
        })?;
        // Write the WAL now rather than at the next flush tick: the epoch
        // loop commits one batch at a time, so waiting for a tick would only
        // add latency. The batch is in SlateDB from here: a failure may
        // come after its WAL was written.
        let written = match self.db.flush().await {
            Ok(()) => self.durable(handle).await,
            Err(error) => Err(storage_error(&self.name, error)),
        };
        written.map_err(|cause| CommitError {
            cause,
            maybe_applied: true,
        })
    }

    /// Writes the memtable out as an L0 table. Its entries are durable in
    /// the commit log or the WAL already. With a WAL, the table keeps only
    /// the newest version of each key that no open snapshot still needs, so
    /// a key overwritten many times stops costing every scan one step per
    /// version; without one (a commit log), SlateDB keeps every version
    /// written since the previous flush, and compaction drops the old ones.
    /// Either way it lets the commit log reclaim segments. The returned future
    /// owns what it needs, so it can run on a task of its own: it may wait
    /// for a compaction when too many L0 tables are pending.
    pub fn flush_memtable(&self) -> impl Future<Output = RsResult<()>> + Send + 'static {
        let db = self.db.clone();
        let name = self.name.clone();
        async move {
            let options = slatedb::config::FlushOptions {
                flush_type: slatedb::config::FlushType::MemTable,
            };
            db.flush_with_options(options)
                .await
                .map_err(|error| storage_error(&name, error))
        }
    }

    /// The sequence number of the last write: snapshots open now read at
    /// most up to it.
    pub fn last_seq(&self) -> RsResult<u64> {
        let snapshot = self
            .db
            .snapshot()
            .map_err(|error| storage_error(&self.name, error))?;
        Ok(snapshot.seq())
    }

    /// Has compaction empty `prefixes`, a dropped object's keys: entries
    /// under them that a compaction rewrites become tombstones (or go, in
    /// the oldest run) once no snapshot reading at or before `readers_seq`
    /// is open ([`dropped`]) — the [`ShardDb::last_seq`] before the write
    /// that dropped the object, or 0 if no reader can know it. Nothing may
    /// write under them any more. Registrations last until
    /// [`ShardDb::stop_compacting_away`], across a [`ShardDb::reopen`].
    pub fn compact_away(&self, prefixes: &[Vec<u8>], readers_seq: u64) {
        self.opened.dropped.add(prefixes, readers_seq);
    }

    /// Stops emptying `prefixes`, once they read empty: nothing under them
    /// can become visible again ([`dropped`]).
    pub fn stop_compacting_away(&self, prefixes: &[Vec<u8>]) {
        self.opened.dropped.remove(prefixes);
    }

    /// Asks the shard's compactor to rewrite the tables that hold keys
    /// under prefixes given to [`ShardDb::compact_away`] whose readers are
    /// gone, at its next tick with nothing else to do, so that they go soon
    /// rather than whenever the size-tiered scheduler next merges them
    /// ([`dropped::StateSchedulerSupplier`]). The compactor sees only
    /// flushed tables, and only the readers open at the last flush: flush
    /// first. Asked again until the prefixes read empty.
    pub fn compact_dropped(&self) {
        self.opened.dropped.request();
    }

    /// How many prefixes compaction is emptying.
    pub fn prefixes_compacting_away(&self) -> usize {
        self.opened.dropped.len()
    }

    /// Stops the shard as a crash would: what its memtable holds is lost
    /// (the commit log or the WAL has it).
    #[cfg(test)]
    async fn crash(&self) {
        let options = slatedb::config::CloseOptions { flush_type: None };
        self.db.close_with_options(options).await.expect("closes");
    }

    pub async fn close(&self) -> RsResult<()> {
        self.db
            .close()
            .await
            .map_err(|error| storage_error(&self.name, error))
    }
}

/// Why an epoch's commit failed.
#[derive(Debug, Clone)]
pub struct CommitError {
    pub cause: RsError,
    /// The batch may be durable (in the commit log, or SlateDB's WAL) even
    /// though the commit failed: whether it is is known only once the
    /// shard is opened again.
    pub maybe_applied: bool,
}

impl From<CommitError> for RsError {
    fn from(error: CommitError) -> RsError {
        error.cause
    }
}

/// A pinned, consistent view of a shard.
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<DbSnapshot>,
    name: String,
    /// The shard's arrangement cache and the generation it matches this
    /// snapshot at.
    cache: Option<(Arc<StateCache>, u64)>,
}

/// Batches of at most this many keys are looked up one by one.
const GET_MANY_POINT_LOOKUPS_MAX: usize = 16;

/// How many stored entries a batched lookup scans per key asked for (plus
/// [`GET_MANY_SCAN_SLACK`]) before it looks the rest up one by one. A
/// point lookup builds an iterator over every memtable and table, which
/// costs tens of scanned entries, so a batch of keys sparse among the
/// stored ones costs at most about twice its point lookups, and one dense
/// among them is read in a single pass. (With a fixed allowance of a scan
/// chunk, 17 random keys in a large table scanned 8,192 entries first.)
const GET_MANY_SCAN_ENTRIES_PER_KEY: usize = 32;
const GET_MANY_SCAN_SLACK: usize = 64;

/// Bound on the entries one call to [`Snapshot::scan_chunk`] returns.
pub const SCAN_CHUNK_ROWS_MAX: usize = 8192;

impl Snapshot {
    pub async fn get(&self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        if let Some((cache, generation)) = &self.cache {
            if let Lookup::Hit(value) = cache.get(*generation, key) {
                return Ok(value);
            }
        }
        let value = self.get_stored(key).await?;
        if let Some((cache, generation)) = &self.cache {
            cache.insert_values(*generation, [(key, &value)]);
        }
        Ok(value)
    }

    async fn get_stored(&self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        let value = self
            .inner
            .get(key)
            .await
            .map_err(|error| storage_error(&self.name, error))?;
        Ok(value.and_then(|bytes| visible(key, &bytes)))
    }

    /// Point lookups of many keys, answered in the order of `keys`.
    ///
    /// The keys are sorted and answered by one scan over the range they
    /// span, which for keys that are new or clustered (a `COPY` in key
    /// order) costs a few block reads instead of one lookup per key. When
    /// the range holds many stored keys that were not asked for, the scan
    /// stops and the rest are looked up one by one. The scan's blocks stay
    /// out of the block cache: a bulk load's lookups would only evict the
    /// working set.
    pub async fn get_many(&self, keys: &[&[u8]]) -> RsResult<Vec<Option<Vec<u8>>>> {
        let Some((cache, generation)) = &self.cache else {
            return self.get_many_stored(keys).await;
        };
        let mut values = vec![None; keys.len()];
        let mut missed = Vec::new();
        for (index, lookup) in cache.get_many(*generation, keys).into_iter().enumerate() {
            match lookup {
                Lookup::Hit(value) => values[index] = value,
                Lookup::Miss => missed.push(index),
            }
        }
        if missed.is_empty() {
            return Ok(values);
        }
        let missed_keys: Vec<&[u8]> = missed.iter().map(|index| keys[*index]).collect();
        let stored = self.get_many_stored(&missed_keys).await?;
        cache.insert_values(*generation, missed_keys.iter().copied().zip(&stored));
        for (index, value) in missed.into_iter().zip(stored) {
            values[index] = value;
        }
        Ok(values)
    }

    async fn get_many_stored(&self, keys: &[&[u8]]) -> RsResult<Vec<Option<Vec<u8>>>> {
        let mut values = vec![None; keys.len()];
        if keys.len() <= GET_MANY_POINT_LOOKUPS_MAX {
            for (value, key) in values.iter_mut().zip(keys) {
                *value = self.get_stored(key).await?;
            }
            return Ok(values);
        }
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_unstable_by_key(|index| keys[*index]);
        let range = keys[order[0]]..=keys[order[order.len() - 1]];
        let mut iterator = self
            .inner
            .scan_with_options(range, &scan_options(ScanOrder::Ascending, false))
            .await
            .map_err(|error| storage_error(&self.name, error))?;
        let budget = GET_MANY_SCAN_ENTRIES_PER_KEY * keys.len() + GET_MANY_SCAN_SLACK;
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
                values[order[next]] = visible(&entry.key, &entry.value);
                next += 1;
            }
            if read >= budget {
                // Dense stored data between the keys asked for.
                for index in &order[next..] {
                    values[*index] = self.get_stored(keys[*index]).await?;
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
        let Some((cache, generation)) = &self.cache else {
            return self.scan_prefix_stored(prefix, order, limit).await;
        };
        if let Some(entries) = cache.scan(*generation, prefix, order, limit) {
            return Ok(entries);
        }
        let entries = self.scan_prefix_stored(prefix, order, limit).await?;
        if entries.len() < limit {
            cache.insert_complete(*generation, prefix, &entries);
        }
        Ok(entries)
    }

    /// Whether storage holds a key under `prefix`, asked of storage itself
    /// (the arrangement cache may still hold a dropped object's keys that
    /// compaction has removed).
    pub async fn stores_any(&self, prefix: &[u8]) -> RsResult<bool> {
        let found = self
            .scan_prefix_stored(prefix, ScanOrder::Ascending, 1)
            .await?;
        Ok(!found.is_empty())
    }

    async fn scan_prefix_stored(
        &self,
        prefix: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let iterator = self
            .inner
            .scan_prefix_with_options(prefix, .., &scan_options(order, true))
            .await
            .map_err(|error| storage_error(&self.name, error))?;
        self.collect(iterator, limit).await
    }

    /// Up to `limit` entries under each of `prefixes` (ascending, none
    /// starting with another), answered in their order.
    ///
    /// A few prefixes are scanned one by one, each with its prefix bloom
    /// filter. Many are answered by one ascending iterator over the range
    /// they span: the entries between two prefixes are stepped over while
    /// they are few, and past a long gap a new iterator starts at the next
    /// prefix, so keys that are dense in storage (a dimension table a batch
    /// joins) cost a few block reads instead of a new scan each.
    pub async fn scan_prefixes(&self, prefixes: &[&[u8]], limit: usize) -> RsResult<Vec<Entries>> {
        let Some((cache, generation)) = &self.cache else {
            return self.scan_prefixes_stored(prefixes, limit).await;
        };
        let mut answers = vec![Vec::new(); prefixes.len()];
        let mut missed = Vec::new();
        let cached = cache.scan_many(*generation, prefixes, limit);
        for (index, cached) in cached.into_iter().enumerate() {
            match cached {
                Some(entries) => answers[index] = entries,
                None => missed.push(index),
            }
        }
        if missed.is_empty() {
            return Ok(answers);
        }
        let missed_prefixes: Vec<&[u8]> = missed.iter().map(|index| prefixes[*index]).collect();
        let stored = self.scan_prefixes_stored(&missed_prefixes, limit).await?;
        let complete = missed_prefixes
            .iter()
            .zip(&stored)
            .filter(|(_, entries)| entries.len() < limit)
            .map(|(prefix, entries)| (*prefix, entries));
        cache.insert_complete_many(*generation, complete);
        for (index, entries) in missed.into_iter().zip(stored) {
            answers[index] = entries;
        }
        Ok(answers)
    }

    async fn scan_prefixes_stored(
        &self,
        prefixes: &[&[u8]],
        limit: usize,
    ) -> RsResult<Vec<Entries>> {
        debug_assert!(rockstream_ops::state::prefixes_are_ordered(prefixes));
        let (Some(first), Some(last)) = (prefixes.first(), prefixes.last()) else {
            return Ok(Vec::new());
        };
        if prefixes.len() <= SCAN_PREFIXES_ONE_BY_ONE_MAX {
            let mut answers = Vec::with_capacity(prefixes.len());
            for prefix in prefixes {
                answers.push(
                    self.scan_prefix_stored(prefix, ScanOrder::Ascending, limit)
                        .await?,
                );
            }
            return Ok(answers);
        }
        let end = prefix_successor(last);
        let mut cursor = PrefixCursor {
            iterator: self.scan_from(first, end.as_deref()).await?,
            ahead: None,
            snapshot: self,
            end,
        };
        let mut answers = Vec::with_capacity(prefixes.len());
        for prefix in prefixes {
            answers.push(cursor.entries_under(prefix, limit).await?);
        }
        Ok(answers)
    }

    /// An ascending iterator over `start..end` (`end` `None`: to the end)
    /// that keeps the blocks it reads cached.
    async fn scan_from(&self, start: &[u8], end: Option<&[u8]>) -> RsResult<DbIterator> {
        let options = scan_options(ScanOrder::Ascending, true);
        match end {
            Some(end) => self.inner.scan_with_options(start..end, &options).await,
            None => self.inner.scan_with_options(start.., &options).await,
        }
        .map_err(|error| storage_error(&self.name, error))
    }

    /// Entries with `prefix` strictly after `after` (or from the start), at
    /// most [`SCAN_CHUNK_ROWS_MAX`]: for streaming large scans.
    pub async fn scan_chunk(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        self.scan_chunk_of(prefix, after, SCAN_CHUNK_ROWS_MAX).await
    }

    /// [`Snapshot::scan_chunk`] of at most `limit` entries.
    pub async fn scan_chunk_of(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        // A scan for one leading value (a row by key, a view's rows for one
        // value) keeps its blocks cached; a scan of a whole table or view
        // streams past the cache instead of evicting the working set.
        let cache_blocks = keys::leading_prefix_len(prefix).is_some();
        self.scan_chunk_with(prefix, after, limit, cache_blocks)
            .await
    }

    /// [`Snapshot::scan_chunk_of`] that keeps the blocks it reads cached:
    /// for a scan that goes on in small chunks over the same blocks (keys
    /// deleted a turn at a time), each of which
    /// would otherwise read them again from storage.
    pub async fn scan_chunk_caching(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        self.scan_chunk_with(prefix, after, limit, true).await
    }

    async fn scan_chunk_with(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
        cache_blocks: bool,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let options = scan_options(ScanOrder::Ascending, cache_blocks);
        let lower = match after {
            Some(after) => std::ops::Bound::Excluded(after[prefix.len()..].to_vec()),
            None => std::ops::Bound::Unbounded,
        };
        let iterator = self
            .inner
            .scan_prefix_with_options(prefix, (lower, std::ops::Bound::Unbounded), &options)
            .await
            .map_err(|error| storage_error(&self.name, error))?;
        self.collect(iterator, limit).await
    }

    /// Reads up to `limit` visible entries from `iterator`.
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
                Some(entry) => {
                    if let Some(value) = visible(&entry.key, &entry.value) {
                        out.push((entry.key.to_vec(), value));
                    }
                }
                None => break,
            }
        }
        Ok(out)
    }
}

/// [`Snapshot::scan_prefixes`] of at most this many prefixes scans each
/// on its own.
const SCAN_PREFIXES_ONE_BY_ONE_MAX: usize = 4;

/// Entries between two prefixes of [`Snapshot::scan_prefixes`] that are
/// stepped over before a new iterator is opened at the next prefix instead.
///
/// A new iterator rather than `DbIterator::seek`: SlateDB 0.18's merge
/// operator iterator drops the entry it read ahead while resolving a count
/// (a merge operand) when it seeks, even when that entry is at or past the
/// key sought, so a seek could skip the first key of a prefix.
const SCAN_PREFIXES_STEPS_BEFORE_REOPEN: usize = 16;

/// One forward pass of [`Snapshot::scan_prefixes`].
struct PrefixCursor<'a> {
    iterator: DbIterator,
    /// An entry read but not yet consumed: the next key in the range.
    ahead: Option<slatedb::KeyValue>,
    snapshot: &'a Snapshot,
    /// Where the pass ends (exclusive; `None`: the end of the keys).
    end: Option<Vec<u8>>,
}

impl PrefixCursor<'_> {
    /// The next entry of the range, without consuming it.
    async fn peek(&mut self) -> RsResult<Option<&slatedb::KeyValue>> {
        if self.ahead.is_none() {
            self.ahead = self
                .iterator
                .next()
                .await
                .map_err(|error| storage_error(&self.snapshot.name, error))?;
        }
        Ok(self.ahead.as_ref())
    }

    /// Up to `limit` visible entries under `prefix`. Every prefix asked
    /// before was smaller and none was a prefix of this one, so what the
    /// pass skips to reach `prefix` lies below it.
    async fn entries_under(&mut self, prefix: &[u8], limit: usize) -> RsResult<Entries> {
        let mut entries = Vec::new();
        let mut stepped = 0;
        loop {
            let Some(entry) = self.peek().await? else {
                break;
            };
            let (before, under) = (entry.key.as_ref() < prefix, entry.key.starts_with(prefix));
            if before {
                stepped += 1;
                if stepped > SCAN_PREFIXES_STEPS_BEFORE_REOPEN {
                    self.ahead = None;
                    self.iterator = self.snapshot.scan_from(prefix, self.end.as_deref()).await?;
                    stepped = 0;
                } else {
                    self.ahead = None;
                }
                continue;
            }
            if entries.len() >= limit || !under {
                break;
            }
            let entry = self.ahead.take().expect("peeked");
            if let Some(value) = visible(&entry.key, &entry.value) {
                entries.push((entry.key.to_vec(), value));
            }
        }
        Ok(entries)
    }
}

/// The smallest key above every key that starts with `prefix`; `None` when
/// there is none (the prefix is all `0xFF`).
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|byte| *byte != 0xFF)?;
    let mut successor = prefix[..=last].to_vec();
    successor[last] += 1;
    Some(successor)
}

/// Bound on cached data blocks (SlateDB's default is 512 MiB). Together with
/// [`UNFLUSHED_BYTES_TOTAL`] and the metadata cache it bounds the memory a
/// storage's shards hold beyond the transactions in flight.
pub const BLOCK_CACHE_BYTES: u64 = 256 * 1024 * 1024;

/// Bound on cached SST indexes and bloom filters.
pub const META_CACHE_BYTES: u64 = 128 * 1024 * 1024;

fn block_and_meta_cache() -> Arc<dyn DbCache> {
    let moka = |max_capacity| -> Arc<dyn DbCache> {
        Arc::new(MokaCache::new_with_opts(MokaCacheOptions {
            max_capacity,
            time_to_live: None,
            time_to_idle: None,
        }))
    };
    Arc::new(
        SplitCache::new()
            .with_block_cache(Some(moka(BLOCK_CACHE_BYTES)))
            .with_meta_cache(Some(moka(META_CACHE_BYTES)))
            .build(),
    )
}

/// Bloom filter bits per hashed item (SlateDB's default).
const BLOOM_BITS_PER_KEY: u32 = 10;

/// One bloom filter per SST over whole keys (point lookups) and over
/// leading-column prefixes (prefix scans: a table row by its first key
/// column, a view's rows by their first column, a join probe, a MIN/MAX
/// rescan), so a lookup skips the SSTs that cannot hold what it seeks.
fn filter_policies() -> Vec<Arc<dyn FilterPolicy>> {
    vec![Arc::new(
        BloomFilterPolicy::new(BLOOM_BITS_PER_KEY).with_prefix_extractor(Arc::new(LeadingColumn)),
    )]
}

/// [`keys::leading_prefix_len`] as SlateDB's prefix extractor.
struct LeadingColumn;

impl PrefixExtractor for LeadingColumn {
    fn name(&self) -> &str {
        "rockstream.leading_column.v1"
    }

    fn prefix_len(&self, target: &PrefixTarget) -> Option<usize> {
        match target {
            PrefixTarget::Point(key) | PrefixTarget::Prefix(key) => keys::leading_prefix_len(key),
        }
    }
}

/// Scan options; `cache_blocks` keeps the data blocks read in the block
/// cache (SlateDB's default for scans is not to).
fn scan_options(order: ScanOrder, cache_blocks: bool) -> ScanOptions {
    ScanOptions {
        order: match order {
            ScanOrder::Ascending => IterationOrder::Ascending,
            ScanOrder::Descending => IterationOrder::Descending,
        },
        cache_blocks,
        ..ScanOptions::default()
    }
}

/// A stored value as readers see it: a count that sums to zero is absent.
fn visible(key: &[u8], value: &[u8]) -> Option<Vec<u8>> {
    (!is_zero_count(key, value)).then(|| value.to_vec())
}

fn is_zero_count(key: &[u8], value: &[u8]) -> bool {
    keys::holds_count(key) && keys::decode_weight(value) == 0
}

/// The shard's compaction filter: it removes counts that sum to zero and
/// empties dropped objects' prefixes ([`dropped`]).
///
/// A zero merge operand adds nothing and is dropped; a zero value becomes
/// a tombstone, which still hides older versions of the key and which
/// SlateDB drops once nothing older remains. Both changes read the same as
/// before, so snapshots pinned by readers are unaffected.
struct StateFilter {
    dropped: Arc<Dropped>,
}

#[async_trait::async_trait]
impl CompactionFilterSupplier for StateFilter {
    async fn create_compaction_filter(
        &self,
        context: &CompactionJobContext,
    ) -> Result<Box<dyn CompactionFilter>, CompactionFilterError> {
        Ok(Box::new(StateFilterJob {
            removable: self.dropped.removable(context),
        }))
    }
}

/// [`StateFilter`] in one compaction: the dropped prefixes it may empty
/// are fixed when it starts.
struct StateFilterJob {
    removable: Removable,
}

#[async_trait::async_trait]
impl CompactionFilter for StateFilterJob {
    async fn filter(
        &mut self,
        entry: &RowEntry,
    ) -> Result<CompactionFilterDecision, CompactionFilterError> {
        Ok(self
            .removable
            .decision(entry)
            .unwrap_or_else(|| zero_count_decision(entry)))
    }

    async fn on_compaction_end(&mut self) -> Result<(), CompactionFilterError> {
        Ok(())
    }
}

fn zero_count_decision(entry: &RowEntry) -> CompactionFilterDecision {
    match &entry.value {
        ValueDeletable::Merge(operand) if is_zero_count(&entry.key, operand) => {
            CompactionFilterDecision::Drop
        }
        ValueDeletable::Value(value) if is_zero_count(&entry.key, value) => {
            CompactionFilterDecision::Modify(ValueDeletable::Tombstone)
        }
        _ => CompactionFilterDecision::Keep,
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

/// Prefix of the environment variables that override a shard's SlateDB
/// settings, one field each, named as SlateDB's `Settings` names them, upper
/// case, nested fields after a dot: `ROCKSTREAM_SLATEDB_L0_SST_SIZE_BYTES`,
/// `ROCKSTREAM_SLATEDB_COMPACTOR_OPTIONS.POLL_INTERVAL=1s`. For measuring and
/// tuning; the defaults below are what the project measures and tests.
pub const SETTINGS_ENV_PREFIX: &str = "ROCKSTREAM_SLATEDB_";

/// The SlateDB settings of one of `shards` shards: ours, then any
/// [`SETTINGS_ENV_PREFIX`] overrides from the environment.
fn settings(path: &str, shards: u16) -> RsResult<Settings> {
    let unflushed = unflushed_bytes_per_shard(shards);
    let ours = Settings {
        flush_interval: Some(WAL_FLUSH_INTERVAL),
        max_unflushed_bytes: unflushed,
        l0_sst_size_bytes: unflushed / 2,
        ..Settings::default()
    };
    Settings::from_env_with_default(SETTINGS_ENV_PREFIX, ours).map_err(|error| {
        RsError::new(
            &codes::STORAGE_SETTINGS_INVALID,
            format!("storage '{path}': {error}"),
        )
    })
}

/// The low-priority runtime compactions run on.
fn compaction_runtime(name: &str) -> RsResult<BackgroundRuntime> {
    BackgroundRuntime::start("rs-compaction")
        .map_err(|error| RsError::new(&codes::STORAGE_IO, format!("storage '{name}': {error}")))
}

/// A SlateDB error of the database `name` as a coded error: 53100 if the
/// disk is full, else an I/O failure.
/// Where a local storage's commit logs live, and its lock (RFC 0019).
pub struct CommitLogs {
    /// Shard `n`'s log is in `root/n`.
    pub root: PathBuf,
    pub lock: Arc<StorageLock>,
}

impl CommitLogs {
    /// The commit logs under `root`, the storage's lock taken
    /// ([`StorageLock::take`]).
    pub async fn open(root: PathBuf) -> RsResult<CommitLogs> {
        let lock = StorageLock::take(&root).await?;
        Ok(CommitLogs { root, lock })
    }
}

/// A local storage's lock: one process at a time opens a storage, since
/// its commit logs take one writer. Taken before anything of the storage
/// is opened (SlateDB's own fencing of a second writer would already
/// disturb the first), held until the last shard and the catalog close.
/// The operating system releases it when the process ends, however it
/// ends.
pub struct StorageLock {
    _file: std::fs::File,
}

impl StorageLock {
    /// Takes the lock at `log_root/LOCK` (creating `log_root`), waiting up
    /// to [`STORAGE_LOCK_WAIT`] for another holder to let go, or says that
    /// another process holds it (RS-5006).
    pub async fn take(log_root: &Path) -> RsResult<Arc<StorageLock>> {
        let root = log_root.to_path_buf();
        let locked = tokio::task::spawn_blocking(move || lock_storage(&root))
            .await
            .map_err(|error| {
                RsError::new(
                    &codes::STORAGE_IO,
                    format!("locking the storage did not finish: {error}"),
                )
            })?;
        Ok(Arc::new(StorageLock { _file: locked? }))
    }
}

/// How long opening a storage waits for another holder of its lock to let
/// go (a server still stopping as the next one starts).
const STORAGE_LOCK_WAIT: Duration = Duration::from_secs(10);

/// [`StorageLock::take`], blocking its thread.
fn lock_storage(log_root: &Path) -> RsResult<std::fs::File> {
    let failed = |error: std::io::Error| {
        RsError::new(
            &codes::STORAGE_IO,
            format!("cannot lock storage '{}': {error}", log_root.display()),
        )
    };
    // Durably: a commit log whose directory entry a power loss took would
    // look like a storage from before commit logs.
    commit_log::create_dirs(log_root).map_err(failed)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(log_root.join("LOCK"))
        .map_err(failed)?;
    let began = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) if began.elapsed() < STORAGE_LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            locked => break locked,
        }
    }
    .map(|()| file)
    .map_err(|error| match error {
        std::fs::TryLockError::WouldBlock => RsError::new(
            &codes::STORAGE_IN_USE,
            format!(
                "storage '{}' is in use by another process",
                log_root.parent().unwrap_or(log_root).display()
            ),
        ),
        std::fs::TryLockError::Error(error) => failed(error),
    })
}

/// Refuses a shard whose format this binary does not read (RS-5001).
async fn refuse_other_formats(path: &str, db: &Db) -> RsResult<()> {
    let stored = db
        .get(keys::format_version_key())
        .await
        .map_err(|error| storage_error(path, error))?;
    let Some(bytes) = stored else {
        return Ok(());
    };
    let version = bytes.first().copied().unwrap_or(0);
    if (FORMAT_VERSION_MIN..=FORMAT_VERSION).contains(&version) {
        return Ok(());
    }
    Err(RsError::new(
        &codes::FORMAT_VERSION_INCOMPATIBLE,
        format!(
            "storage '{path}' has format version {version}; this binary reads versions {FORMAT_VERSION_MIN} to {FORMAT_VERSION}"
        ),
    ))
}

/// Closes `db` without flushing its memtable, as after a crash.
async fn close_unflushed(db: &Db) {
    let options = slatedb::config::CloseOptions { flush_type: None };
    if let Err(error) = db.close_with_options(options).await {
        tracing::debug!(%error, "closing a shard without a flush");
    }
}

/// Adds `write` to `batch`. Epochs' writes come in key order, so the
/// builder sorts them in one pass where a `WriteBatch` would search its map
/// for each key.
fn add_to_batch(batch: &mut WriteBatchBuilder, key: Vec<u8>, write: Write) {
    match write {
        Write::Put(value) => batch.put_bytes(key.into(), value.into()),
        Write::Delete => batch.delete_bytes(key.into()),
        Write::AddCount(change) => {
            batch.merge_bytes(key.into(), keys::encode_weight(change).into())
        }
    }
}

/// The shard's [`keys::log_lsn_key`] as `options` read it (0 if absent).
async fn read_lsn(path: &str, db: &Db, options: &slatedb::config::ReadOptions) -> RsResult<u64> {
    let bytes = db
        .get_with_options(keys::log_lsn_key(), options)
        .await
        .map_err(|error| storage_error(path, error))?;
    let Some(bytes) = bytes else {
        return Ok(0);
    };
    <[u8; 8]>::try_from(bytes.as_ref())
        .map(u64::from_be_bytes)
        .map_err(|_| {
            RsError::new(
                &codes::STORAGE_IO,
                format!("storage '{path}' holds a malformed commit-log position"),
            )
        })
}

/// Opens the commit log in `dir` and applies to `db` (opened without its
/// WAL, so holding what its L0 tables hold) every record above the LSN they
/// hold, in order (RFC 0019).
async fn replay_log(path: &str, db: &Db, dir: &Path) -> RsResult<CommitLog> {
    let applied = read_lsn(path, db, &slatedb::config::ReadOptions::default()).await?;
    let dir_owned = dir.to_path_buf();
    let opened = tokio::task::spawn_blocking(move || CommitLog::open(&dir_owned, applied))
        .await
        .map_err(|error| {
            RsError::new(
                &codes::STORAGE_IO,
                format!("reading the commit log of '{path}' did not finish: {error}"),
            )
        })??;
    let replayed = opened.replay.len();
    for (lsn, payload) in opened.replay {
        let writes = commit_log::decode_writes(&payload).ok_or_else(|| {
            RsError::new(
                &codes::STORAGE_IO,
                format!(
                    "record {lsn} of commit log '{}' does not parse",
                    dir.display()
                ),
            )
        })?;
        let mut batch = WriteBatchBuilder::with_capacity(writes.len() + 1);
        for (key, write) in writes {
            add_to_batch(&mut batch, key, write);
        }
        let mut batch = batch.build();
        batch.put(keys::log_lsn_key(), lsn.to_be_bytes());
        db.write(batch)
            .await
            .map_err(|error| storage_error(path, error))?;
    }
    if replayed > 0 {
        tracing::info!(shard = %path, records = replayed, "replayed the commit log");
    }
    Ok(opened.log)
}

/// A shard's SlateDB, with its compactor: run in-process with SlateDB's
/// default options, on low-priority threads of its own, with the filter
/// removing zero counts and dropped objects' keys and a scheduler that can
/// be asked to compact the latter; the SSTs it writes carry the same bloom
/// filters as flushed ones.
async fn build_db(
    path: &str,
    opened: &Opened,
    mut settings: Settings,
    compaction: &Arc<BackgroundRuntime>,
) -> RsResult<Db> {
    let compactor = CompactorBuilder::new(path.to_string(), opened.store.clone())
        .with_runtime(compaction.handle())
        .with_options(settings.compactor_options.take().unwrap_or_default())
        .with_filter_policies(filter_policies())
        .with_scheduler_supplier(Arc::new(StateSchedulerSupplier {
            dropped: opened.dropped.clone(),
        }))
        .with_compaction_filter_supplier(Arc::new(StateFilter {
            dropped: opened.dropped.clone(),
        }));
    Db::builder(path.to_string(), opened.store.clone())
        .with_settings(settings)
        // A block cache shared by several databases keeps each one's
        // entries apart by its id.
        .with_db_cache(opened.block_cache.clone(), opened.cache_id)
        .with_merge_operator(Arc::new(CountSum))
        .with_filter_policies(filter_policies())
        .with_compactor_builder(compactor)
        .build()
        .await
        .map_err(|error| storage_error(path, error))
}

pub fn storage_error(name: &str, error: slatedb::Error) -> RsError {
    match rockstream_common::disk_full_root(&error) {
        Some(root) => {
            let location = if root.is_empty() {
                String::new()
            } else {
                format!(" in '{root}'")
            };
            RsError::new(
                &codes::STORAGE_FULL,
                format!("could not write storage '{name}'{location}: the disk is full"),
            )
        }
        None => RsError::new(&codes::STORAGE_IO, format!("storage '{name}': {error}")),
    }
}

#[cfg(test)]
mod tests {
    //! Goal: batched lookups answer exactly like point lookups, whether the
    //! scan covers the batch or stops early on dense data; count additions
    //! are summed by the merge operator across epochs, and a count summing
    //! to zero reads as absent everywhere and is removed by compaction. The
    //! storage's memtable budget is shared by its shards within bounds.
    use super::*;

    #[test]
    fn shards_share_the_memtable_budget_within_bounds() {
        for shards in [0, 1, 2, 3, 4, 7, 8, 16, 256, u16::MAX] {
            let per_shard = unflushed_bytes_per_shard(shards);
            assert!(
                (UNFLUSHED_BYTES_SHARD_MIN..=UNFLUSHED_BYTES_SHARD_MAX).contains(&per_shard),
                "{shards} shards: {per_shard}"
            );
            let total = per_shard * usize::from(shards.max(1));
            let floor = UNFLUSHED_BYTES_SHARD_MIN * usize::from(shards.max(1));
            assert!(
                total <= UNFLUSHED_BYTES_TOTAL.max(floor),
                "{shards} shards: {total}"
            );
        }
        assert_eq!(unflushed_bytes_per_shard(1), UNFLUSHED_BYTES_SHARD_MAX);
        assert_eq!(unflushed_bytes_per_shard(4), UNFLUSHED_BYTES_TOTAL / 4);
    }

    /// One shard at `path` with an arrangement cache of `cache_bytes`.
    pub(super) async fn open_shard(
        store: Arc<dyn ObjectStore>,
        path: &str,
        cache_bytes: usize,
    ) -> ShardDb {
        ShardDb::open_alone(store, path, cache_bytes)
            .await
            .expect("opens")
    }

    /// A key of plain values (table rows).
    fn key(n: u32) -> Vec<u8> {
        let mut key = vec![keys::TABLE_ROWS];
        key.extend_from_slice(&n.to_be_bytes());
        key
    }

    /// A key holding a count (view output).
    fn count_key(n: u32) -> Vec<u8> {
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
    async fn writes_outside_epochs_keep_the_epoch_number() {
        // Goal: a deletion written outside epochs is read at once and
        // leaves the shard's committed epoch as it was (the coordinator's
        // repair compares epochs).
        let shard = shard_with(0..10).await;
        let deletes = (0..5).map(|n| (key(n), Write::Delete));
        shard.write_outside_epochs(deletes).await.expect("writes");
        assert_eq!(shard.committed_epoch().await.expect("epoch"), 1);
        let snapshot = shard.snapshot().expect("snapshot");
        for n in 0..10 {
            let stored = snapshot.get(&key(n)).await.expect("get");
            assert_eq!(stored.is_some(), n >= 5, "key {n}");
        }
    }

    #[tokio::test]
    async fn count_additions_sum_across_epochs() {
        let shard = shard_with(std::iter::empty()).await;
        for epoch in 2..5 {
            let writes = [(count_key(7), Write::AddCount(epoch))];
            shard.commit(epoch as Epoch, writes).await.expect("commits");
        }
        let snapshot = shard.snapshot().expect("snapshot");
        let value = snapshot
            .get(&count_key(7))
            .await
            .expect("get")
            .expect("present");
        assert_eq!(keys::decode_weight(&value), 2 + 3 + 4);
        let scanned = snapshot
            .scan_prefix(&[keys::OUTPUT], ScanOrder::Ascending, 10)
            .await
            .expect("scan");
        assert_eq!(scanned, vec![(count_key(7), keys::encode_weight(9))]);
    }

    #[tokio::test]
    async fn zero_counts_read_as_absent() {
        let shard = shard_with(std::iter::empty()).await;
        // Counts 0..40 reach 1 in epoch 2; the even ones drop back to 0.
        let up = (0..40).map(|n| (count_key(n), Write::AddCount(1)));
        shard.commit(2, up).await.expect("commits");
        let down = (0..40)
            .step_by(2)
            .map(|n| (count_key(n), Write::AddCount(-1)));
        shard.commit(3, down).await.expect("commits");
        let snapshot = shard.snapshot().expect("snapshot");
        assert_eq!(snapshot.get(&count_key(4)).await.expect("get"), None);
        let all: Vec<Vec<u8>> = (0..40).map(count_key).collect();
        let refs: Vec<&[u8]> = all.iter().map(Vec::as_slice).collect();
        let values = snapshot.get_many(&refs).await.expect("get_many");
        for (n, value) in values.iter().enumerate() {
            assert_eq!(value.is_some(), n % 2 == 1, "count {n}");
        }
        let first = snapshot
            .scan_prefix(&[keys::OUTPUT], ScanOrder::Ascending, 1)
            .await
            .expect("scan");
        assert_eq!(first, vec![(count_key(1), keys::encode_weight(1))]);
        let last = snapshot
            .scan_prefix(&[keys::OUTPUT], ScanOrder::Descending, 2)
            .await
            .expect("scan");
        let last_keys: Vec<Vec<u8>> = last.into_iter().map(|(key, _)| key).collect();
        assert_eq!(last_keys, vec![count_key(39), count_key(37)]);
        let chunk = snapshot
            .scan_chunk(&[keys::OUTPUT], Some(&count_key(30)))
            .await
            .expect("chunk");
        let chunk_keys: Vec<Vec<u8>> = chunk.into_iter().map(|(key, _)| key).collect();
        let odd_after_30: Vec<Vec<u8>> = (31..40).step_by(2).map(count_key).collect();
        assert_eq!(chunk_keys, odd_after_30);
    }

    #[tokio::test]
    async fn prefix_scans_read_through_flushed_tables() {
        use rockstream_types::encoding::encode_row_into;
        use rockstream_types::Datum;
        let shard = shard_with(std::iter::empty()).await;
        let row_key = |lead: i64, second: &str| {
            let mut key = keys::table_prefix(9);
            encode_row_into(&[Datum::Int64(lead), Datum::Text(second.into())], &mut key);
            key
        };
        let lead_prefix = |lead: i64| {
            let mut key = keys::table_prefix(9);
            encode_row_into(&[Datum::Int64(lead)], &mut key);
            key
        };
        // Each epoch lands in its own SST: leading values 0..30 in epoch
        // 2, even ones again in epoch 3, multiples of 3 deleted in epoch 4.
        let epochs: [Vec<(Vec<u8>, Write)>; 3] = [
            (0..30)
                .map(|n| (row_key(n, "a"), Write::Put(vec![1])))
                .collect(),
            (0..30)
                .step_by(2)
                .map(|n| (row_key(n, "b"), Write::Put(vec![2])))
                .collect(),
            (0..30)
                .step_by(3)
                .map(|n| (row_key(n, "a"), Write::Delete))
                .collect(),
        ];
        for (epoch, writes) in (2..).zip(epochs) {
            shard.commit(epoch, writes).await.expect("commits");
            shard.flush_memtable().await.expect("memtable flush");
        }
        let snapshot = shard.snapshot().expect("snapshot");
        for lead in 0..32 {
            let found = snapshot
                .scan_prefix(&lead_prefix(lead), ScanOrder::Ascending, usize::MAX)
                .await
                .expect("scan");
            let mut expected = Vec::new();
            if lead < 30 && lead % 3 != 0 {
                expected.push((row_key(lead, "a"), vec![1]));
            }
            if lead < 30 && lead % 2 == 0 {
                expected.push((row_key(lead, "b"), vec![2]));
            }
            assert_eq!(found, expected, "leading value {lead}");
        }
    }

    #[test]
    fn compaction_removes_only_zero_counts() {
        let entry = |key: Vec<u8>, value: ValueDeletable| RowEntry {
            key: Bytes::from(key),
            value,
            seq: 1,
            create_ts: None,
            expire_ts: None,
        };
        let zero = || Bytes::from(keys::encode_weight(0));
        let decide = |key, value| zero_count_decision(&entry(key, value));
        assert_eq!(
            decide(count_key(1), ValueDeletable::Merge(zero())),
            CompactionFilterDecision::Drop
        );
        assert_eq!(
            decide(count_key(1), ValueDeletable::Value(zero())),
            CompactionFilterDecision::Modify(ValueDeletable::Tombstone)
        );
        let three = Bytes::from(keys::encode_weight(3));
        for (key, value) in [
            (count_key(1), ValueDeletable::Value(three.clone())),
            (count_key(1), ValueDeletable::Merge(three)),
            (key(1), ValueDeletable::Value(zero())),
            (count_key(1), ValueDeletable::Tombstone),
        ] {
            assert_eq!(decide(key, value), CompactionFilterDecision::Keep);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[allow(
        clippy::disallowed_methods,
        reason = "the test paces its writes on tokio"
    )]
    async fn compaction_empties_a_dropped_prefix_once_its_readers_are_gone() {
        // Goal: keys under a prefix given to `compact_away` disappear by
        // compaction alone, never while a snapshot from before is open, and
        // nothing else goes with them.
        // Method: real SlateDB compactions, provoked by commits and memtable
        // flushes; the manifest says when L0 tables were compacted.
        let shard = shard_with(std::iter::empty()).await;
        let row = |table: u128, n: u32| {
            let mut key = keys::table_prefix(table);
            key.extend_from_slice(&n.to_be_bytes());
            key
        };
        let (dropped, kept) = (keys::table_prefix(7), keys::table_prefix(8));
        let writes = (0..500).flat_map(|n| {
            [
                (row(7, n), Write::Put(vec![1; 64])),
                (row(8, n), Write::Put(vec![2; 64])),
            ]
        });
        shard.commit(2, writes).await.expect("commits");
        shard.flush_memtable().await.expect("flush");
        let stored = |snapshot: Snapshot, prefix: Vec<u8>| async move {
            snapshot
                .scan_prefix(&prefix, ScanOrder::Ascending, usize::MAX)
                .await
                .expect("scan")
                .len()
        };
        // A compaction of L0 tables leaves fewer of them.
        let l0_tables = || shard.db.status().current_manifest.l0().len();
        let mut epoch = 3;
        let mut churn = || {
            epoch += 1;
            let shard = &shard;
            async move {
                let writes = [(row(9, epoch), Write::Put(vec![3; 64]))];
                shard.commit(epoch.into(), writes).await.expect("commits");
                shard.flush_memtable().await.expect("flush");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(90);

        let before = shard.snapshot().expect("snapshot");
        let readers_seq = shard.last_seq().expect("sequence number");
        shard.compact_away(std::slice::from_ref(&dropped), readers_seq);
        let mut compactions = 0;
        while compactions < 2 {
            let before = l0_tables();
            churn().await;
            if l0_tables() < before {
                compactions += 1;
            }
            assert!(std::time::Instant::now() < deadline, "no compaction ran");
        }
        assert_eq!(stored(before.clone(), dropped.clone()).await, 500);
        let now = shard.snapshot().expect("snapshot");
        assert_eq!(stored(now, dropped.clone()).await, 500, "nothing went yet");

        drop(before);
        loop {
            churn().await;
            shard.compact_dropped();
            let now = shard.snapshot().expect("snapshot");
            if stored(now, dropped.clone()).await == 0 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "still stored");
        }
        let now = shard.snapshot().expect("snapshot");
        assert_eq!(stored(now, kept).await, 500);
        assert_eq!(shard.prefixes_compacting_away(), 1);
        shard.stop_compacting_away(&[dropped]);
        assert_eq!(shard.prefixes_compacting_away(), 0);
    }
}

#[cfg(test)]
mod cache_tests {
    //! Goal: a shard reads the same with an arrangement cache as without
    //! one, whatever the reads, the writes between them and the evictions.
    //! Method: seeded random epochs of puts, deletes and count additions on
    //! join-arrangement keys, each followed by random point reads, batched
    //! reads, prefix scans (both orders, with limits) and batched prefix
    //! scans on a shard whose cache holds a few dozen keys, compared with a
    //! `MemoryStore` that applied the same writes.
    use std::collections::BTreeMap;

    use rockstream_ops::{MemoryStore, StateRead, StateStore};

    use super::tests::open_shard;
    use super::*;

    /// A small deterministic generator (splitmix64).
    struct Random(u64);

    impl Random {
        fn below(&mut self, bound: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % bound
        }
    }

    fn prefix(group: u8) -> Vec<u8> {
        let mut prefix = keys::op_prefix(keys::JOIN_LEFT, 1);
        prefix.push(group);
        prefix
    }

    fn key(group: u8, item: u8) -> Vec<u8> {
        let mut key = prefix(group);
        key.push(item);
        key
    }

    fn random_key(random: &mut Random) -> Vec<u8> {
        key(random.below(6) as u8, random.below(10) as u8)
    }

    fn random_write(random: &mut Random) -> Write {
        match random.below(4) {
            0 => Write::Delete,
            1 => Write::Put(keys::encode_weight(1 + random.below(3) as i64)),
            _ => Write::AddCount(random.below(5) as i64 - 2),
        }
    }

    async fn compare_reads(snapshot: &Snapshot, model: &MemoryStore, random: &mut Random) {
        for _ in 0..12 {
            match random.below(4) {
                0 => {
                    let key = random_key(random);
                    let ours = snapshot.get(&key).await.expect("get");
                    assert_eq!(ours, model.get(&key).await.expect("get"), "get {key:?}");
                }
                1 => {
                    let asked: Vec<Vec<u8>> =
                        (0..random.below(30)).map(|_| random_key(random)).collect();
                    let refs: Vec<&[u8]> = asked.iter().map(Vec::as_slice).collect();
                    let ours = snapshot.get_many(&refs).await.expect("get_many");
                    assert_eq!(ours, model.get_many(&refs).await.expect("get_many"));
                }
                2 => {
                    // A group, or every group at once (a covering prefix).
                    let scanned = match random.below(7) {
                        6 => keys::op_prefix(keys::JOIN_LEFT, 1),
                        group => prefix(group as u8),
                    };
                    let order = if random.below(2) == 0 {
                        ScanOrder::Ascending
                    } else {
                        ScanOrder::Descending
                    };
                    let limit = [1, 3, usize::MAX][random.below(3) as usize];
                    let ours = snapshot
                        .scan_prefix(&scanned, order, limit)
                        .await
                        .expect("scan");
                    let model = model
                        .scan_prefix(&scanned, order, limit)
                        .await
                        .expect("scan");
                    assert_eq!(ours, model, "scan {scanned:?} {order:?} {limit}");
                }
                _ => {
                    let mut groups: Vec<u8> = (0..random.below(7))
                        .map(|_| random.below(6) as u8)
                        .collect();
                    groups.sort_unstable();
                    groups.dedup();
                    let prefixes: Vec<Vec<u8>> = groups.into_iter().map(prefix).collect();
                    let refs: Vec<&[u8]> = prefixes.iter().map(Vec::as_slice).collect();
                    let limit = [1, 2, usize::MAX][random.below(3) as usize];
                    let ours = snapshot.scan_prefixes(&refs, limit).await.expect("scans");
                    let model = model.scan_prefixes(&refs, limit).await.expect("scans");
                    assert_eq!(ours, model, "scans {refs:?} {limit}");
                }
            }
        }
    }

    #[tokio::test]
    async fn a_cached_shard_reads_like_storage() {
        let mut evictions = 0;
        for seed in 0..8 {
            let mut random = Random(seed);
            let store = object_store_for("memory://").expect("memory store");
            // A few dozen keys' worth: evictions happen all the time.
            let shard = open_shard(store, "cache", 3072).await;
            let mut model = MemoryStore::default();
            for epoch in 1..40 {
                // Counts may not go negative: only add what keeps them >= 0.
                let mut writes = BTreeMap::new();
                for _ in 0..random.below(12) {
                    let key = random_key(&mut random);
                    let write = random_write(&mut random);
                    let below = model.get(&key).await.expect("get");
                    if write
                        .apply(below.clone())
                        .is_some_and(|v| keys::decode_weight(&v) < 0)
                        || writes.contains_key(&key)
                    {
                        continue;
                    }
                    writes.insert(key, write);
                }
                for (key, write) in &writes {
                    match write {
                        Write::Put(value) => model.put(key.clone(), value.clone()),
                        Write::Delete => model.delete(key.clone()),
                        Write::AddCount(change) => model.add_count(key.clone(), *change),
                    }
                }
                shard.commit(epoch, writes).await.expect("commits");
                let snapshot = shard.snapshot().expect("snapshot");
                compare_reads(&snapshot, &model, &mut random).await;
            }
            let stats = shard.cache_stats();
            assert!(stats.hits > 0, "seed {seed}: {stats:?}");
            assert!(stats.bytes <= stats.bytes_max, "seed {seed}: {stats:?}");
            evictions += stats.evictions;
        }
        assert!(evictions > 0, "the cache never filled up");
    }

    #[tokio::test]
    async fn batched_prefix_scans_match_scans_one_by_one() {
        // Groups 0..250 with 0..6 entries each (some none), no cache: the
        // forward pass steps over short gaps and seeks over long ones.
        let store = object_store_for("memory://").expect("memory store");
        let shard = open_shard(store, "scans", 0).await;
        let mut random = Random(7);
        let mut writes = Vec::new();
        for group in 0..250u8 {
            for item in 0..random.below(7) as u8 {
                writes.push((key(group, item), Write::AddCount(1 + item as i64)));
            }
        }
        shard.commit(1, writes).await.expect("commits");
        let snapshot = shard.snapshot().expect("snapshot");
        for round in 0..40 {
            let density = 1 + random.below(40);
            let mut groups: Vec<u8> = (0..250u8).filter(|_| random.below(density) == 0).collect();
            groups.dedup();
            let prefixes: Vec<Vec<u8>> = groups.into_iter().map(prefix).collect();
            let refs: Vec<&[u8]> = prefixes.iter().map(Vec::as_slice).collect();
            let limit = [1, 2, 4, usize::MAX][round % 4];
            let batched = snapshot.scan_prefixes(&refs, limit).await.expect("scans");
            assert_eq!(batched.len(), refs.len());
            for (prefix, batched) in refs.iter().zip(batched) {
                let one = snapshot
                    .scan_prefix(prefix, ScanOrder::Ascending, limit)
                    .await
                    .expect("scan");
                assert_eq!(batched, one, "round {round}: {prefix:?}, limit {limit}");
            }
        }
    }

    #[tokio::test]
    async fn a_snapshot_taken_before_a_commit_does_not_read_its_writes() {
        let store = object_store_for("memory://").expect("memory store");
        let shard = ShardDb::open(store, "cache").await.expect("opens");
        shard
            .commit(1, [(key(1, 1), Write::AddCount(2))])
            .await
            .expect("commits");
        let before = shard.snapshot().expect("snapshot");
        // Cache the prefix, then commit a change under it.
        let scanned = before
            .scan_prefix(&prefix(1), ScanOrder::Ascending, usize::MAX)
            .await
            .expect("scan");
        assert_eq!(scanned.len(), 1);
        shard
            .commit(2, [(key(1, 2), Write::AddCount(1))])
            .await
            .expect("commits");
        let old = before
            .scan_prefix(&prefix(1), ScanOrder::Ascending, usize::MAX)
            .await
            .expect("scan");
        assert_eq!(old, scanned, "an older snapshot reads its own state");
        let new = shard
            .snapshot()
            .expect("snapshot")
            .scan_prefix(&prefix(1), ScanOrder::Ascending, usize::MAX)
            .await
            .expect("scan");
        assert_eq!(new.len(), 2, "the write reached the cached prefix");
        assert!(shard.cache_stats().hits >= 1);
    }
}

#[cfg(test)]
mod commit_log_tests {
    //! Goal: with a commit log (RFC 0019), every acknowledged commit is
    //! there after a crash that lost the memtable, applied once (count
    //! additions summed once, also after the tables caught up); segments
    //! are reclaimed once the tables hold their records; and a shard
    //! written with SlateDB's WAL keeps its writes when it moves to a log.
    use super::*;
    use std::path::Path;

    async fn open(dir: &Path, logged: bool) -> Vec<ShardDb> {
        let location = dir.to_str().expect("utf-8 path");
        let store = object_store_for(location).expect("store");
        let logs = match logged {
            true => Some(
                CommitLogs::open(dir.join("commit_log"))
                    .await
                    .expect("locks"),
            ),
            false => None,
        };
        ShardDb::open_all(store, 2, ARRANGEMENT_CACHE_BYTES_DEFAULT, logs.as_ref())
            .await
            .expect("opens")
    }

    fn row(n: u64) -> Vec<u8> {
        [&[keys::TABLE_ROWS][..], &n.to_be_bytes()].concat()
    }

    fn total() -> Vec<u8> {
        vec![keys::OUTPUT, b't']
    }

    /// Stops every shard as a crash would, and lets go of the storage.
    async fn crash(shards: Vec<ShardDb>) {
        for shard in &shards {
            shard.crash().await;
        }
    }

    /// Commits epochs `range` on every shard: a row each, and one to the
    /// shard's total count.
    async fn commit(shards: &[ShardDb], range: std::ops::RangeInclusive<u64>, size: usize) {
        for n in range {
            for shard in shards {
                let writes = [
                    (row(n), Write::Put(vec![n as u8; size])),
                    (total(), Write::AddCount(1)),
                ];
                shard.commit(n as Epoch, writes).await.expect("commits");
            }
        }
    }

    async fn check(shards: &[ShardDb], last: u64, size: usize) {
        for shard in shards {
            assert_eq!(shard.committed_epoch().await.expect("epoch"), last as Epoch);
            let snapshot = shard.snapshot().expect("snapshot");
            for n in 1..=last {
                let value = snapshot.get(&row(n)).await.expect("reads");
                assert_eq!(value, Some(vec![n as u8; size]), "row {n}");
            }
            let count = snapshot.get(&total()).await.expect("reads").expect("count");
            assert_eq!(keys::decode_weight(&count), last as i64);
        }
    }

    #[tokio::test]
    async fn acknowledged_commits_survive_a_crash_and_apply_once() {
        let dir = tempfile::tempdir().expect("dir");
        let shards = open(dir.path(), true).await;
        commit(&shards, 1..=30, 10).await;
        crash(shards).await;
        let shards = open(dir.path(), true).await;
        check(&shards, 30, 10).await;
        // Part in the tables, part only in the log.
        commit(&shards, 31..=40, 10).await;
        for shard in &shards {
            shard.flush_memtable().await.expect("flush");
        }
        commit(&shards, 41..=45, 10).await;
        crash(shards).await;
        let shards = open(dir.path(), true).await;
        check(&shards, 45, 10).await;
        // A clean close, then a crash right after the reopen.
        for shard in &shards {
            shard.close().await.expect("closes");
        }
        drop(shards);
        let shards = open(dir.path(), true).await;
        crash(shards).await;
        let shards = open(dir.path(), true).await;
        check(&shards, 45, 10).await;
    }

    #[tokio::test]
    async fn segments_are_reclaimed_once_the_tables_hold_them() {
        let dir = tempfile::tempdir().expect("dir");
        let shards = open(dir.path(), true).await;
        // Records of about a fifth of a segment; the tables catch up every
        // ten commits.
        let size = commit_log::SEGMENT_BYTES as usize / 5;
        for chunk in 0..6u64 {
            commit(&shards, chunk * 10 + 1..=chunk * 10 + 10, size).await;
            for shard in &shards {
                shard.flush_memtable().await.expect("flush");
            }
        }
        let segments = std::fs::read_dir(dir.path().join("commit_log/0"))
            .expect("log")
            .count();
        // Sixty records of a fifth of a segment: twelve segments' worth.
        assert!(segments <= 6, "{segments} files in the log");
        crash(shards).await;
        check(&open(dir.path(), true).await, 60, size).await;
    }

    /// `key` as the shard's L0 tables hold it.
    async fn in_tables(shard: &ShardDb, key: &[u8]) -> Option<Vec<u8>> {
        let options = slatedb::config::ReadOptions {
            durability_filter: slatedb::config::DurabilityLevel::Remote,
            ..slatedb::config::ReadOptions::default()
        };
        let value = shard
            .db
            .get_with_options(key, &options)
            .await
            .expect("reads");
        value.map(|value| value.to_vec())
    }

    #[tokio::test]
    async fn a_shard_written_with_the_wal_moves_to_a_log() {
        let dir = tempfile::tempdir().expect("dir");
        let shards = open(dir.path(), false).await;
        commit(&shards, 1..=5, 10).await;
        // As the previous format left it; the WAL holds what the memtable
        // loses.
        for shard in &shards {
            let version = [(keys::format_version_key(), Write::Put(vec![6]))];
            shard.write_outside_epochs(version).await.expect("writes");
        }
        crash(shards).await;
        let shards = open(dir.path(), true).await;
        check(&shards, 5, 10).await;
        for shard in &shards {
            // In the tables, where an older binary reads them.
            let version = in_tables(shard, &keys::format_version_key()).await;
            assert_eq!(version, Some(vec![FORMAT_VERSION]));
            assert_eq!(in_tables(shard, &row(5)).await, Some(vec![5; 10]));
        }
        // One process at a time.
        let again = StorageLock::take(&dir.path().join("commit_log")).await;
        let error = again.err().expect("refused");
        assert_eq!(error.code, &codes::STORAGE_IN_USE, "{error}");
        commit(&shards, 6..=8, 10).await;
        crash(shards).await;
        check(&open(dir.path(), true).await, 8, 10).await;
    }
}
