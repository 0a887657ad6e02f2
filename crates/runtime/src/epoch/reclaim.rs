//! Reclaiming storage nothing reads any more: dropped objects' keys, and
//! large transactions' staged rows.
//!
//! A dropped object's keys are left to compaction (DESIGN §5.3). `DROP`
//! commits a durable *drop marker* for the object (`0x06 'R' 'C'
//! object_id`, on every shard, so that every shard's snapshots after the
//! DROP are newer than those before it) in one epoch, registers the
//! object's prefixes with every shard's compaction filter
//! ([`ShardDb::compact_away`]) and answers: nothing is written per key, so
//! other writers do not pay for the reclaim. Every
//! [`DROPPED_CHECK_MICROS`] (twice as long after each look that finds no
//! object gone, once [`DROPPED_CHECKS_AT_FIRST_PACE`] have found none, up
//! to [`DROPPED_CHECK_MAX_MICROS`]: a small object in a
//! large run may wait long for its compaction, and a quiet database should
//! not flush every few seconds meanwhile) a task off the engine loop looks
//! whether the
//! prefixes still hold keys. While they do, it flushes each shard's
//! memtable (compactions see only flushed tables, and only the snapshots
//! open at the last flush), then the engine asks each shard to compact the
//! tables that hold them ([`ShardDb::compact_dropped`]) and writes the
//! markers again, so that a quiet database still has something to flush
//! next time and its snapshots move past the DROP. Once they read empty on
//! every shard the engine deletes the markers and the shards forget the
//! prefixes. A restart registers every marker it finds again. Object ids
//! are never reused, and the engine refuses commits into and installs of
//! dropped objects, so nothing lives under a dropped prefix.
//!
//! A transaction's staged rows ([`super::staged`]) are few prefixes read
//! again at every start, so they are deleted key by key instead: one
//! bounded chunk per turn, taking turns with commits like a view's build.
//! The chunks are written outside epochs, each shard on its own (nothing
//! reads them, and a restart repeats what a crash lost), so a turn costs
//! the shards' writes side by side rather than an epoch's commit point and
//! log record.

use rockstream_ops::keys;
use rockstream_ops::{ScanOrder, StateStore};
use rockstream_storage::{EpochStore, ShardDb, Snapshot};
use rockstream_types::{ObjectId, RsError, RsResult};

use super::{view_prefixes, Deletion, EpochLoop};

/// Least time between two looks at dropped objects' keys.
const DROPPED_CHECK_MICROS: i64 = 5_000_000;
/// Most time between two looks at dropped objects' keys.
const DROPPED_CHECK_MAX_MICROS: i64 = 600_000_000;
/// Looks in a row that find no object gone before the pace slows: a
/// compaction the first look asked for usually ends within them.
const DROPPED_CHECKS_AT_FIRST_PACE: u32 = 3;

/// A transaction's staged rows, being deleted.
pub(super) struct Reclaim {
    transaction: u64,
    keys: Deletion,
}

impl Reclaim {
    pub(super) fn keys_mut(&mut self) -> &mut Deletion {
        &mut self.keys
    }
}

/// Dropped objects whose keys compaction is removing, and the look at
/// them under way.
pub(super) struct Dropping {
    objects: Vec<ObjectId>,
    /// When the last look began (µs).
    checked_at: i64,
    /// Time from the last look to the next (µs).
    interval: i64,
    /// Looks in a row that found no object gone.
    fruitless: u32,
    /// The look under way: which objects' keys are gone on every shard.
    check: Option<tokio::task::JoinHandle<RsResult<Vec<ObjectId>>>>,
}

impl Default for Dropping {
    fn default() -> Self {
        Dropping {
            objects: Vec::new(),
            checked_at: 0,
            interval: DROPPED_CHECK_MICROS,
            fruitless: 0,
            check: None,
        }
    }
}

impl Drop for Dropping {
    fn drop(&mut self) {
        if let Some(check) = &self.check {
            check.abort();
        }
    }
}

/// The markers' common prefix: `0x06 'R' 'C'`.
fn marker_prefix() -> Vec<u8> {
    vec![keys::SHARD_META, b'R', b'C']
}

fn drop_marker(object_id: ObjectId) -> Vec<u8> {
    let mut key = marker_prefix();
    key.extend_from_slice(&object_id.to_be_bytes());
    key
}

/// Deletes the drop markers of `gone` and writes those of `dropped`, on
/// every shard.
fn mark_dropped(stores: &mut [EpochStore], gone: &[ObjectId], dropped: &[ObjectId]) {
    for store in stores {
        for &object_id in gone {
            store.delete(drop_marker(object_id));
        }
        for &object_id in dropped {
            store.put(drop_marker(object_id), Vec::new());
        }
    }
}

/// Every prefix any object's keys may live under: a table's rows, UNIQUE
/// and index entries, or a view's output, operator state, held-back input
/// and installed marker.
fn object_prefixes(object_id: ObjectId) -> Vec<Vec<u8>> {
    let mut prefixes = view_prefixes(object_id);
    prefixes.push(keys::table_prefix(object_id));
    prefixes.push(keys::unique_prefix(object_id));
    prefixes.push(keys::index_prefix(object_id));
    prefixes
}

impl EpochLoop {
    /// Takes up the dropped objects whose keys a previous run left stored;
    /// `readers` (by shard): the newest sequence number a snapshot open on
    /// the shard may read at (0 when none can be open).
    pub(super) async fn resume_drops(&mut self, readers: &[u64]) -> RsResult<()> {
        // The markers are the coordinator's.
        let snapshot = self.shards[0].snapshot()?;
        let prefix = marker_prefix();
        let markers = snapshot
            .scan_prefix(&prefix, ScanOrder::Ascending, usize::MAX)
            .await?;
        let mut object_ids = Vec::with_capacity(markers.len());
        for (key, _) in markers {
            let id: [u8; 16] = key[prefix.len()..]
                .try_into()
                .map_err(|_| RsError::internal("corrupt drop marker"))?;
            object_ids.push(ObjectId::from_be_bytes(id));
        }
        if !object_ids.is_empty() {
            tracing::info!(
                objects = object_ids.len(),
                "compaction goes on removing dropped objects' keys"
            );
        }
        self.dropped.extend(&object_ids);
        self.compact_away(&object_ids, readers);
        Ok(())
    }

    /// Forgets dropped objects and leaves their keys to compaction: the
    /// markers, written in one epoch, are durable when this returns.
    pub(super) async fn drop_objects(&mut self, object_ids: &[ObjectId]) -> RsResult<()> {
        self.views
            .retain(|installed| !object_ids.contains(&installed.view.view_id));
        if let Ok(mut statuses) = self.statuses.write() {
            for object_id in object_ids {
                statuses.remove(object_id);
            }
        }
        // Readers that began before the DROP read at most these.
        let readers = self
            .shards
            .iter()
            .map(ShardDb::last_seq)
            .collect::<RsResult<Vec<_>>>()?;
        let mut stores = self.new_stores()?;
        mark_dropped(&mut stores, &[], object_ids);
        // A dropped table's watermark goes with it.
        for object_id in object_ids {
            if self.watermarks.remove(object_id).is_some() {
                stores[0].delete(keys::watermark_key(*object_id));
            }
        }
        let forgotten = self
            .forget_staged_commits_into(object_ids, &mut stores)
            .await?;
        self.commit_epoch(stores).await?;
        self.dropped.extend(object_ids);
        self.compact_away(object_ids, &readers);
        for transaction in forgotten {
            self.reclaim_staging(transaction);
        }
        Ok(())
    }

    /// Registers the objects' prefixes with every shard's compaction
    /// filter; snapshots reading at most `readers` (by shard) keep what
    /// they read.
    fn compact_away(&mut self, object_ids: &[ObjectId], readers: &[u64]) {
        for &object_id in object_ids {
            let prefixes = object_prefixes(object_id);
            for (shard, &readers_seq) in self.shards.iter().zip(readers) {
                shard.compact_away(&prefixes, readers_seq);
            }
            if !self.dropping.objects.contains(&object_id) {
                self.dropping.objects.push(object_id);
                self.dropping.interval = DROPPED_CHECK_MICROS;
                self.dropping.fruitless = 0;
            }
        }
        self.publish_reclaims();
    }

    /// Forgets the dropped objects being compacted away, to take them up
    /// again from their markers ([`super::recovery`]).
    pub(super) fn forget_drops(&mut self) {
        self.dropping = Dropping::default();
        self.publish_reclaims();
    }

    /// Looks at the dropped objects' keys every [`DROPPED_CHECK_MICROS`],
    /// off the engine loop, and deletes the markers of those whose keys
    /// are gone. Cheap when there is nothing to do: called after every
    /// command and idle tick.
    pub(super) async fn tend_drops(&mut self) -> RsResult<()> {
        // Not while storage is down, nor between a staged commit's steps.
        if self.failure.is_some() || self.hold_publish {
            return Ok(());
        }
        if let Some(check) = &self.dropping.check {
            if !check.is_finished() {
                return Ok(());
            }
        }
        if let Some(check) = self.dropping.check.take() {
            let looked = check
                .await
                .map_err(|error| RsError::internal(error.to_string()))
                .and_then(|looked| looked);
            match looked {
                Ok(gone) => self.after_check(&gone).await?,
                Err(error) => tracing::warn!(%error, "looking at dropped objects' keys failed"),
            }
        }
        let now = self.runtime.now_micros();
        if self.dropping.objects.is_empty()
            || now < self.dropping.checked_at + self.dropping.interval
        {
            return Ok(());
        }
        self.dropping.checked_at = now;
        let snapshots = self
            .shards
            .iter()
            .map(ShardDb::snapshot)
            .collect::<RsResult<Vec<_>>>()?;
        let flushes: Vec<_> = self.shards.iter().map(ShardDb::flush_memtable).collect();
        let objects = self.dropping.objects.clone();
        self.dropping.check = Some(self.runtime.spawn(async move {
            let gone = compacted_away(&snapshots, &objects).await?;
            if gone.len() < objects.len() {
                // Keys still in a memtable reach a compaction only once it
                // is flushed: a quiet database would not flush it soon.
                for flush in flushes {
                    if let Err(error) = flush.await {
                        tracing::warn!(%error, "flushing dropped objects' keys failed");
                    }
                }
            }
            Ok(gone)
        }));
        Ok(())
    }

    /// After a look at the dropped objects' keys: deletes the markers of
    /// those whose keys are `gone` and has the shards forget their
    /// prefixes; for the others, asks for compactions and writes their
    /// markers again (see the module documentation).
    async fn after_check(&mut self, gone: &[ObjectId]) -> RsResult<()> {
        let remaining: Vec<ObjectId> = self
            .dropping
            .objects
            .iter()
            .copied()
            .filter(|object_id| !gone.contains(object_id))
            .collect();
        if gone.is_empty() && remaining.is_empty() {
            return Ok(());
        }
        let mut stores = self.new_stores()?;
        mark_dropped(&mut stores, gone, &remaining);
        self.commit_epoch(stores).await?;
        for &object_id in gone {
            let prefixes = object_prefixes(object_id);
            for shard in &self.shards {
                shard.stop_compacting_away(&prefixes);
            }
        }
        if !remaining.is_empty() {
            for shard in &self.shards {
                shard.compact_dropped();
            }
        }
        self.dropping.objects = remaining;
        if gone.is_empty() {
            self.dropping.fruitless += 1;
            if self.dropping.fruitless > DROPPED_CHECKS_AT_FIRST_PACE {
                self.dropping.interval = (self.dropping.interval * 2).min(DROPPED_CHECK_MAX_MICROS);
            }
        } else {
            self.dropping.interval = DROPPED_CHECK_MICROS;
            self.dropping.fruitless = 0;
            tracing::debug!(objects = gone.len(), "dropped objects' keys are gone");
        }
        self.publish_reclaims();
        Ok(())
    }

    pub(super) fn enqueue_reclaim(&mut self, transaction: u64) {
        if self
            .reclaims
            .iter()
            .any(|reclaim| reclaim.transaction == transaction)
        {
            return;
        }
        self.reclaims.push(Reclaim {
            transaction,
            keys: Deletion::new(vec![keys::staged_prefix(transaction)]),
        });
        self.publish_reclaims();
    }

    /// One bounded step of the oldest reclaim: a chunk of its keys.
    pub(super) async fn reclaim_turn(&mut self) -> RsResult<()> {
        let Some(reclaim) = self.reclaims.first_mut() else {
            return Ok(());
        };
        if !reclaim.keys.is_done() {
            // On a storage failure the engine finds staged rows again
            // ([`super::recovery`]).
            let keys = std::mem::take(&mut reclaim.keys);
            self.reclaims[0].keys = self.delete_step(keys).await?;
            return Ok(());
        }
        self.reclaims.remove(0);
        self.publish_reclaims();
        Ok(())
    }

    /// How many reclaims are pending, for [`crate::Engine::reclaims_pending`].
    pub(super) fn publish_reclaims(&self) {
        self.reclaiming.store(
            self.reclaims.len() + self.dropping.objects.len(),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

/// Which of `objects` hold no key under any of their prefixes on any
/// shard. A key compaction has turned into a tombstone is not read, and
/// cannot be read again ([`ShardDb::compact_away`]).
async fn compacted_away(snapshots: &[Snapshot], objects: &[ObjectId]) -> RsResult<Vec<ObjectId>> {
    let mut gone = Vec::new();
    'objects: for &object_id in objects {
        for prefix in object_prefixes(object_id) {
            for snapshot in snapshots {
                if snapshot.stores_any(&prefix).await? {
                    continue 'objects;
                }
            }
        }
        gone.push(object_id);
    }
    Ok(gone)
}
