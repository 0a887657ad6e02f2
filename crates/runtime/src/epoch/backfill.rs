//! Building a view in the background: its backfill takes turns with commits.
//!
//! A view without committed state (just created, or whose build a crash cut
//! short) goes through three phases:
//!
//! 1. **Preparing**: whatever an interrupted build left under the view's
//!    prefixes is deleted, one bounded chunk per turn; then the view waits
//!    until every view it reads is itself complete. Its sources' changes
//!    are ignored meanwhile: the build reads them later.
//! 2. **Building**: the build reads its sources' rows in key order, each
//!    shard its own rows, about [`BACKFILL_EPOCH_ROWS`] of each source per
//!    turn over all shards, each turn one epoch over the newest state, and
//!    feeds them through the dataflow. A source's key range splits at how
//!    far its build has read: a commit's change to a row at or before that
//!    point is stepped through the view at once, as for a maintained view
//!    ([`Backfill::has_read`]); a change beyond it is not, as the build
//!    reads that row later, changed.
//! 3. The turn that finds every source read writes the installed marker:
//!    from then on the view is maintained like any other. Before that
//!    marker the view's output is incomplete, and readers are told it is
//!    building.
//!
//! So after each epoch the view's state is its definition over the part of
//! every source read so far, at that epoch; once all is read, over all of
//! it. No commit waits for more than one turn of a build, and no snapshot
//! is held across turns: a pinned snapshot would keep every version of the
//! keys the build rewrites each turn (SlateDB retains all versions newer
//! than its oldest snapshot), and each turn's reads would step over all the
//! earlier turns' versions.
//! A build that fails (a row of its inputs makes the definition fail) marks
//! the view failed with that error; the database goes on without it.

use std::collections::HashMap;
use std::sync::Arc;

use rockstream_ops::keys::{self, decode_weight, RowStorage};
use rockstream_ops::StateStore;
use rockstream_storage::{EpochStore, ShardDb, Snapshot};
use rockstream_types::encoding::{decode_row, encode_datum, encode_row_into};
use rockstream_types::{codes, ObjectId, Row, RsError, RsResult, ZSet};

use super::reclaim::Reclaim;
use super::{apply_view_output, earliest_wake, split_steps, Deletion, Deltas, EpochLoop, Stores};
use crate::engine::{InstallView, TableChange, ViewStatus, BACKFILL_EPOCH_ROWS};

/// The changes of an epoch's transactions to building views' tables that
/// their builds have read: per view, per shard (by id), per table.
pub(super) type BuildInputs = HashMap<ObjectId, Deltas>;

/// Least time between two progress lines in the log for one build.
const PROGRESS_LOG_INTERVAL_MICROS: i64 = 5_000_000;

/// Where a view is in its life (see the module docs).
pub(super) enum Phase {
    /// Deleting `stale` (what an interrupted build left), then waiting for
    /// the views it reads to be complete.
    Preparing {
        stale: Deletion,
    },
    Building(Box<Backfill>),
    Maintained,
    /// Its build failed; it stays unmaintained until dropped.
    BuildFailed,
}

/// A running build: how far each source was read, per shard (by shard id).
pub(super) struct Backfill {
    readers: Vec<Vec<(ObjectId, CollectionReader)>>,
    /// True until the first turn: global aggregates emit their first row.
    initial: bool,
    rows_done: u64,
    logged_at_micros: i64,
}

/// Marks a view whose backfill committed: `0x06 'V' 'I' view_id`.
pub fn installed_marker(view_id: ObjectId) -> Vec<u8> {
    let mut key = vec![keys::SHARD_META, b'V', b'I'];
    key.extend_from_slice(&view_id.to_be_bytes());
    key
}

/// What a preparing view waits for.
enum Readiness {
    Ready,
    Waiting,
    /// A view it reads failed its build: it is named.
    SourceFailed(String),
}

impl EpochLoop {
    /// True while some view is preparing or building, or a transaction's
    /// staged rows are being deleted.
    pub(super) fn has_background_work(&self) -> bool {
        !self.reclaims.is_empty()
            || self.views.iter().any(|installed| {
                matches!(
                    installed.phase,
                    Phase::Preparing { .. } | Phase::Building(_)
                )
            })
    }

    /// Every deletion under way: reclaims' and views' stale state.
    fn deletions(&mut self) -> impl Iterator<Item = &mut Deletion> {
        let stale = self
            .views
            .iter_mut()
            .filter_map(|installed| match &mut installed.phase {
                Phase::Preparing { stale } => Some(stale),
                _ => None,
            });
        self.reclaims.iter_mut().map(Reclaim::keys_mut).chain(stale)
    }

    /// Whether a deletion's next chunk is still being read: a background
    /// turn would wait for it, so commands go first.
    pub(super) fn deletion_reading(&mut self) -> bool {
        self.deletions().any(|deletion| deletion.is_reading())
    }

    /// Waits for the first deletion whose next chunk is being read, and
    /// keeps the chunk for its turn. Cancel-safe.
    pub(super) async fn collect_deletion_read(&mut self) {
        if let Some(deletion) = self.deletions().find(|deletion| deletion.is_reading()) {
            deletion.collect_read().await;
        }
    }

    /// Collects, without waiting, the deletions' reads that have ended.
    pub(super) async fn collect_finished_reads(&mut self) {
        for deletion in self.deletions() {
            if deletion.has_read() {
                deletion.collect_read().await;
            }
        }
    }

    /// One bounded step of background work: of a view's build if one can
    /// make progress (a statement may be waiting for it), else of a
    /// reclaim. False when there was nothing to do. `Err` only for a
    /// storage failure.
    pub(super) async fn background_turn(&mut self) -> RsResult<bool> {
        if self.build_turn().await? {
            return Ok(true);
        }
        if self.reclaims.is_empty() {
            return Ok(false);
        }
        self.reclaim_turn().await?;
        Ok(true)
    }

    /// One bounded step of the first view that can make progress; false
    /// when none can. A build's own failure fails its view.
    async fn build_turn(&mut self) -> RsResult<bool> {
        for index in 0..self.views.len() {
            match &mut self.views[index].phase {
                Phase::Preparing { stale } if !stale.is_done() => {
                    let deletion = std::mem::take(stale);
                    let deletion = self.delete_step(deletion).await?;
                    if let Phase::Preparing { stale } = &mut self.views[index].phase {
                        *stale = deletion;
                    }
                    return Ok(true);
                }
                Phase::Preparing { .. } => match self.readiness(index) {
                    Readiness::Ready => {
                        self.start_build(index)?;
                        return Ok(true);
                    }
                    Readiness::Waiting => continue,
                    Readiness::SourceFailed(source) => {
                        let name = self.views[index].view.name.clone();
                        let error = RsError::new(
                            &codes::VIEW_BACKFILL_FAILED,
                            format!(
                                "materialized view \"{name}\" could not be built: it reads \
                                 \"{source}\", whose build failed"
                            ),
                        );
                        self.fail_build(index, error);
                        return Ok(true);
                    }
                },
                Phase::Building(_) => {
                    self.backfill_turn(index).await?;
                    return Ok(true);
                }
                Phase::Maintained | Phase::BuildFailed => continue,
            }
        }
        Ok(false)
    }

    fn readiness(&self, index: usize) -> Readiness {
        for source in &self.views[index].view.sources {
            // A source the engine has no dataflow for is a table.
            let Some(view) = self.views.iter().find(|v| v.view.view_id == *source) else {
                continue;
            };
            match view.phase {
                Phase::Maintained => {}
                Phase::BuildFailed => return Readiness::SourceFailed(view.view.name.clone()),
                Phase::Preparing { .. } | Phase::Building(_) => return Readiness::Waiting,
            }
        }
        Readiness::Ready
    }

    fn start_build(&mut self, index: usize) -> RsResult<()> {
        let view = &self.views[index].view;
        let readers = self
            .shards
            .iter()
            .map(|_| {
                view.sources
                    .iter()
                    .zip(&view.source_storage)
                    .map(|(source, storage)| {
                        (*source, CollectionReader::new(*source, storage.clone()))
                    })
                    .collect()
            })
            .collect();
        tracing::info!(view = %view.name, "backfill started");
        self.views[index].phase = Phase::Building(Box::new(Backfill {
            readers,
            initial: true,
            rows_done: 0,
            logged_at_micros: self.runtime.now_micros(),
        }));
        Ok(())
    }

    /// Feeds the next chunk of every source, read from the newest state,
    /// through the view's dataflow in one epoch; the sources advance
    /// together, so a small dimension table is read whole in the first turn
    /// and each chunk of a large fact table then joins against it. The turn
    /// that finds every source read marks the view installed.
    pub(super) async fn backfill_turn(&mut self, index: usize) -> RsResult<()> {
        let snapshots = self
            .shards
            .iter()
            .map(ShardDb::snapshot)
            .collect::<RsResult<Vec<_>>>()?;
        let Phase::Building(backfill) = &mut self.views[index].phase else {
            return Ok(());
        };
        // A turn reads about as many rows whatever the shard count.
        let shard_rows = (BACKFILL_EPOCH_ROWS / snapshots.len()).max(1);
        let mut inputs: Vec<HashMap<ObjectId, ZSet>> = Vec::with_capacity(snapshots.len());
        for (snapshot, readers) in snapshots.iter().zip(&mut backfill.readers) {
            let mut shard_inputs = HashMap::new();
            for (source, reader) in readers {
                let chunk = reader.next_chunk(snapshot, shard_rows);
                let chunk = self
                    .runtime
                    .watched(|| format!("a backfill read of {source}"), chunk);
                if let Some(chunk) = chunk.await? {
                    backfill.rows_done += chunk.len() as u64;
                    shard_inputs.insert(*source, chunk);
                }
            }
            inputs.push(shard_inputs);
        }
        drop(snapshots);
        let initial = std::mem::replace(&mut backfill.initial, false);
        let rows_done = backfill.rows_done;
        let complete = inputs.iter().all(HashMap::is_empty);
        let mut stores = self.new_stores()?;
        let view_id = self.views[index].view.view_id;
        let mut stepped = Ok(());
        let reads_watermarks = self.views[index].view.dataflow.reads_watermarks();
        // Not while a staged commit a crash cut short waits to be completed
        // (at start, before [`EpochLoop::finish_staged`]): its remaining
        // rows are judged against the watermark it began at, below the
        // one its durable steps advanced. The view then steps once it is
        // done ([`EpochLoop::run_staged`] wakes it).
        let watermarked = complete && !self.hold_publish;
        if !complete || initial || reads_watermarks {
            // Without source rows the one step global aggregates need, and
            // the one that applies the watermarks: the build's steps keep
            // every window open, as a later chunk may still reach it.
            (stores, stepped) = self
                .build_step(stores, index, inputs, (initial, watermarked))
                .await?;
        }
        if let Err(error) = stepped {
            self.fail_build(index, error);
            return Ok(());
        }
        if complete {
            // On the coordinator, which commits the epoch first.
            stores[0].put(installed_marker(view_id), vec![1]);
        }
        self.commit_epoch(stores).await?;
        let installed = &mut self.views[index];
        if complete {
            tracing::info!(view = %installed.view.name, rows = rows_done, "backfill complete");
            installed.phase = Phase::Maintained;
            if reads_watermarks && !watermarked {
                // Its step at the watermarks, once they may be applied.
                installed.wake_at = Some(i64::MIN);
            }
            self.set_status(view_id, ViewStatus::Healthy);
            if let Some(built) = self.views[index].built.take() {
                let _ = built.send(Ok(()));
            }
            return Ok(());
        }
        let now = self.runtime.now_micros();
        if let Phase::Building(backfill) = &mut installed.phase {
            if now >= backfill.logged_at_micros + PROGRESS_LOG_INTERVAL_MICROS {
                backfill.logged_at_micros = now;
                tracing::info!(view = %installed.view.name, rows = rows_done, "backfill in progress");
            }
        }
        self.set_status(view_id, ViewStatus::Building { rows_done });
        Ok(())
    }

    /// Adds to `inputs` the changes in `changes` (one shard's part of a
    /// transaction, each row under its storage key in `keys`) that a
    /// building view must step now: those to its tables' rows its build
    /// has read.
    pub(super) fn read_changes(
        &self,
        inputs: &mut BuildInputs,
        shard: usize,
        changes: &[TableChange],
        keys: &[Vec<Vec<u8>>],
    ) {
        for installed in &self.views {
            let Phase::Building(backfill) = &installed.phase else {
                continue;
            };
            for (change, keys) in changes.iter().zip(keys) {
                if !installed.view.sources.contains(&change.table_id) {
                    continue;
                }
                let mut delta = ZSet::new();
                for (row, key) in change.rows.iter().zip(keys) {
                    if backfill.has_read(shard, change.table_id, key) {
                        if let Some(old) = &row.old {
                            delta.push(old.clone(), -1);
                        }
                        if let Some(new) = &row.new {
                            delta.push(new.clone(), 1);
                        }
                    }
                }
                if delta.is_empty() {
                    continue;
                }
                let shards = backfill.readers.len();
                inputs
                    .entry(installed.view.view_id)
                    .or_insert_with(|| vec![HashMap::new(); shards])[shard]
                    .entry(change.table_id)
                    .or_default()
                    .extend(delta);
            }
        }
    }

    /// Steps view `index` over `inputs` (per shard) on every shard and
    /// applies its writes and output. The inner `Err`: the build's own
    /// failure (its writes are dropped); the outer one: storage failed.
    async fn build_step(
        &mut self,
        stores: Stores,
        index: usize,
        inputs: Vec<HashMap<ObjectId, ZSet>>,
        (initial, watermarked): (bool, bool),
    ) -> RsResult<(Stores, RsResult<()>)> {
        let inputs: Vec<Arc<HashMap<ObjectId, ZSet>>> = inputs.into_iter().map(Arc::new).collect();
        let bases: Vec<Arc<EpochStore>> = stores.into_iter().map(Arc::new).collect();
        let (steps, progress) = self.shard_steps(index, &bases, &inputs, (initial, watermarked));
        let spawn = steps.len() > 1;
        let stepped = self.run_steps(steps, spawn);
        let name = &self.views[index].view.name;
        let where_ = || match &progress {
            Some(progress) => format!("a backfill step of view {name} ({progress})"),
            None => format!("a backfill step of view {name}"),
        };
        let results = self.runtime.watched(where_, stepped).await;
        let mut stores = bases
            .into_iter()
            .map(|base| {
                Arc::try_unwrap(base)
                    .map_err(|_| RsError::internal("a backfill step outlived its turn"))
            })
            .collect::<RsResult<Stores>>()?;
        let stepped = match split_steps(results)? {
            Ok(stepped) => stepped,
            Err(error) => return Ok((stores, Err(error))),
        };
        self.views[index].wake_at = earliest_wake(&stepped);
        let view = &self.views[index].view;
        for (store, (output, writes, _)) in stores.iter_mut().zip(stepped) {
            store.absorb(writes);
            apply_view_output(store, view, &output);
        }
        Ok((stores, Ok(())))
    }

    /// Ends a build that cannot complete because `cause` failed it (a row
    /// of its inputs, read by the build or changed during it): readers see
    /// the view failed, and the statement waiting for the build (if any)
    /// gets `cause`. The partial state stays until the view is dropped (or
    /// the next start rebuilds it), as the view is never read meanwhile.
    pub(super) fn fail_build(&mut self, index: usize, cause: RsError) {
        let installed = &mut self.views[index];
        let name = &installed.view.name;
        let status = if cause.code == &codes::VIEW_BACKFILL_FAILED {
            cause.clone()
        } else {
            RsError::new(
                &codes::VIEW_BACKFILL_FAILED,
                format!(
                    "materialized view \"{name}\" could not be built: {}",
                    cause.message
                ),
            )
            .with_detail(cause.to_string())
        };
        tracing::warn!(view = %name, error = %cause, "backfill failed");
        installed.phase = Phase::BuildFailed;
        let view_id = installed.view.view_id;
        if let Some(built) = installed.built.take() {
            let _ = built.send(Err(cause));
        }
        self.set_status(view_id, ViewStatus::Failed(status));
    }
}

impl Backfill {
    /// Whether the build has read `key` (a storage key of `source`'s rows)
    /// on `shard`: a change to that row must go through the view now. One
    /// it has not read it reads later, with the change.
    pub(super) fn has_read(&self, shard: usize, source: ObjectId, key: &[u8]) -> bool {
        self.readers[shard]
            .iter()
            .find(|(id, _)| *id == source)
            .is_some_and(|(_, reader)| reader.has_read(key))
    }

    /// The part of an epoch's changes (`deltas`, per shard) view `view`
    /// must step now: of its tables, what [`EpochLoop::read_changes`] kept
    /// (`tables`); of the views it reads, the rows the build has read.
    pub(super) fn changes_read(
        &self,
        view: &InstallView,
        deltas: &Deltas,
        tables: Option<Deltas>,
    ) -> Deltas {
        let mut inputs = tables.unwrap_or_else(|| vec![HashMap::new(); deltas.len()]);
        // The transactions of one epoch, summed: a row inserted and changed
        // again in the same epoch goes through the view once, as it would
        // through a maintained view.
        for shard_inputs in &mut inputs {
            for delta in shard_inputs.values_mut() {
                *delta = std::mem::take(delta).consolidate();
            }
        }
        for (shard, (shard_deltas, shard_inputs)) in deltas.iter().zip(&mut inputs).enumerate() {
            for (source, storage) in view.sources.iter().zip(&view.source_storage) {
                let Some(delta) = shard_deltas.get(source) else {
                    continue;
                };
                let prefix = storage.prefix(*source);
                let mut read = ZSet::new();
                for (row, weight) in &delta.updates {
                    if view_row_key(storage, &prefix, row)
                        .is_some_and(|key| self.has_read(shard, *source, &key))
                    {
                        read.push(row.clone(), *weight);
                    }
                }
                if !read.is_empty() {
                    shard_inputs.insert(*source, read);
                }
            }
        }
        inputs
    }
}

/// Where a view stores `row` (under `prefix`, in `storage`); `None` for a
/// table's row, whose key the row may not hold (a hidden row id).
fn view_row_key(storage: &RowStorage, prefix: &[u8], row: &Row) -> Option<Vec<u8>> {
    let mut key = prefix.to_vec();
    match storage {
        RowStorage::Table => return None,
        RowStorage::Counted => encode_row_into(row, &mut key),
        RowStorage::Keyed(columns) => {
            for column in columns {
                encode_datum(&row[*column], &mut key);
            }
        }
    }
    Some(key)
}

/// Reads the rows of a table or view from a snapshot as a sequence of
/// bounded Z-sets.
pub(super) struct CollectionReader {
    storage: RowStorage,
    prefix: Vec<u8>,
    after: Option<Vec<u8>>,
    exhausted: bool,
}

impl CollectionReader {
    fn new(object_id: ObjectId, storage: RowStorage) -> Self {
        CollectionReader {
            prefix: storage.prefix(object_id),
            storage,
            after: None,
            exhausted: false,
        }
    }

    /// Whether the row stored under `key` was read.
    fn has_read(&self, key: &[u8]) -> bool {
        self.exhausted || self.after.as_deref().is_some_and(|after| key <= after)
    }

    /// The next rows in key order, about `rows_max` of them (whole storage
    /// chunks); `None` once every row was read.
    async fn next_chunk(&mut self, snapshot: &Snapshot, rows_max: usize) -> RsResult<Option<ZSet>> {
        let mut rows = ZSet::new();
        while !self.exhausted && rows.len() < rows_max {
            let chunk = snapshot
                .scan_chunk(&self.prefix, self.after.as_deref())
                .await?;
            let Some((last, _)) = chunk.last() else {
                self.exhausted = true;
                break;
            };
            self.after = Some(last.clone());
            for (key, value) in chunk {
                match self.storage {
                    RowStorage::Counted => rows.push(
                        decode_row(&key[self.prefix.len()..])?,
                        decode_weight(&value),
                    ),
                    RowStorage::Table | RowStorage::Keyed(_) => rows.push(decode_row(&value)?, 1),
                }
            }
        }
        Ok((!rows.is_empty()).then_some(rows))
    }
}
