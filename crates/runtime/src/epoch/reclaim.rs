//! Reclaiming a dropped object's state in the background.
//!
//! SlateDB has no range delete, so a dropped table's rows or a dropped
//! view's output and operator state are deleted key by key. `DROP` does not
//! wait for that: the engine commits a durable *reclaim marker* for the
//! object (`0x06 'R' 'C' object_id`, on the coordinator) in one epoch and
//! answers; the keys are then deleted on every shard, one bounded chunk per
//! turn, taking turns with commits like a view's build, and the last turn
//! deletes the marker. The chunks are written outside epochs, each shard
//! on its own (nothing reads them, and a restart repeats what a crash
//! lost), so a turn costs the shards' writes side by side rather than an
//! epoch's commit point and log record. A restart resumes every marker it
//! finds. Object ids are never reused, so nothing created later can live
//! under a prefix being reclaimed.

use rockstream_ops::keys;
use rockstream_ops::{ScanOrder, StateStore};
use rockstream_types::{ObjectId, RsError, RsResult};

use super::{view_prefixes, Deletion, EpochLoop};

/// Keys still being deleted: a dropped object's, or a large
/// transaction's staged rows ([`super::staged`]).
pub(super) struct Reclaim {
    what: Reclaimed,
    /// Their prefixes, being deleted.
    keys: Deletion,
}

impl Reclaim {
    pub(super) fn keys_mut(&mut self) -> &mut Deletion {
        &mut self.keys
    }
}

/// Whose keys a [`Reclaim`] deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reclaimed {
    /// A dropped table's or view's, resumed after a restart from its
    /// durable marker.
    Object(ObjectId),
    /// A transaction's staged rows: after a restart, rows without a
    /// staged-commit marker are found and deleted again, so they need no
    /// marker of their own.
    Staging(u64),
}

impl Reclaimed {
    fn prefixes(self) -> Vec<Vec<u8>> {
        match self {
            Reclaimed::Object(object_id) => object_prefixes(object_id),
            Reclaimed::Staging(transaction) => vec![keys::staged_prefix(transaction)],
        }
    }
}

/// The markers' common prefix: `0x06 'R' 'C'`.
fn marker_prefix() -> Vec<u8> {
    vec![keys::SHARD_META, b'R', b'C']
}

fn reclaim_marker(object_id: ObjectId) -> Vec<u8> {
    let mut key = marker_prefix();
    key.extend_from_slice(&object_id.to_be_bytes());
    key
}

/// Every prefix any object's keys may live under: a table's rows and
/// UNIQUE entries, or a view's output, operator state, held-back input and
/// installed marker.
fn object_prefixes(object_id: ObjectId) -> Vec<Vec<u8>> {
    let mut prefixes = view_prefixes(object_id);
    prefixes.push(keys::table_prefix(object_id));
    prefixes.push(keys::unique_prefix(object_id));
    prefixes
}

impl EpochLoop {
    /// Takes up the reclaims a previous run left unfinished.
    pub(super) async fn resume_reclaims(&mut self) -> RsResult<()> {
        // The markers are the coordinator's.
        let snapshot = self.shards[0].snapshot()?;
        let prefix = marker_prefix();
        let markers = snapshot
            .scan_prefix(&prefix, ScanOrder::Ascending, usize::MAX)
            .await?;
        for (key, _) in markers {
            let id: [u8; 16] = key[prefix.len()..]
                .try_into()
                .map_err(|_| RsError::internal("corrupt reclaim marker"))?;
            self.enqueue_reclaim(Reclaimed::Object(ObjectId::from_be_bytes(id)));
        }
        if !self.reclaims.is_empty() {
            tracing::info!(
                objects = self.reclaims.len(),
                "resuming the reclaim of dropped objects"
            );
        }
        Ok(())
    }

    /// Forgets dropped objects and schedules their keys for deletion: the
    /// markers, written in one epoch, are durable when this returns.
    pub(super) async fn drop_objects(&mut self, object_ids: &[ObjectId]) -> RsResult<()> {
        self.views
            .retain(|installed| !object_ids.contains(&installed.view.view_id));
        if let Ok(mut statuses) = self.statuses.write() {
            for object_id in object_ids {
                statuses.remove(object_id);
            }
        }
        let mut stores = self.new_stores()?;
        for &object_id in object_ids {
            stores[0].put(reclaim_marker(object_id), Vec::new());
        }
        let forgotten = self
            .forget_staged_commits_into(object_ids, &mut stores)
            .await?;
        self.commit_epoch(stores).await?;
        for &object_id in object_ids {
            self.enqueue_reclaim(Reclaimed::Object(object_id));
            self.dropped.insert(object_id);
        }
        for transaction in forgotten {
            self.reclaim_staging(transaction);
        }
        Ok(())
    }

    pub(super) fn enqueue_reclaim(&mut self, what: Reclaimed) {
        if self.reclaims.iter().any(|reclaim| reclaim.what == what) {
            return;
        }
        self.reclaims.push(Reclaim {
            what,
            keys: Deletion::new(what.prefixes()),
        });
        self.publish_reclaims();
    }

    /// One bounded step of the oldest reclaim: a chunk of its keys, or,
    /// once none is left, its marker.
    pub(super) async fn reclaim_turn(&mut self) -> RsResult<()> {
        let Some(reclaim) = self.reclaims.first_mut() else {
            return Ok(());
        };
        if !reclaim.keys.is_done() {
            // On a storage failure the engine takes its reclaims on again
            // from their markers ([`super::recovery`]).
            let keys = std::mem::take(&mut reclaim.keys);
            self.reclaims[0].keys = self.delete_step(keys).await?;
            return Ok(());
        }
        if let Reclaimed::Object(object_id) = reclaim.what {
            let mut stores = self.new_stores()?;
            stores[0].delete(reclaim_marker(object_id));
            self.commit_epoch(stores).await?;
        }
        self.reclaims.remove(0);
        self.publish_reclaims();
        Ok(())
    }

    pub(super) fn publish_reclaims(&self) {
        self.reclaiming
            .store(self.reclaims.len(), std::sync::atomic::Ordering::Relaxed);
    }
}
