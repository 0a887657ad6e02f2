//! Building a view in the background: its backfill takes turns with commits.
//!
//! A view without committed state (just created, or whose build a crash cut
//! short) goes through three phases:
//!
//! 1. **Preparing**: whatever an interrupted build left under the view's
//!    prefixes is deleted, one bounded chunk per turn; then the view waits
//!    until every view it reads is itself complete. Its sources' changes
//!    are ignored meanwhile: the snapshot its build pins later holds them.
//! 2. **Building**: the build pins one snapshot of every shard and feeds
//!    its sources' rows through the dataflow, each shard its own rows,
//!    about [`BACKFILL_EPOCH_ROWS`] of each source per turn over all
//!    shards, each turn one epoch. Changes committed after the pinned
//!    snapshot are not stepped but added to the view's pending input
//!    ([`super::EpochLoop::propagate`]).
//! 3. The last turn steps the pending input and writes the installed marker
//!    in one epoch: from then on the view is maintained like any other.
//!    Before that marker the view's output is incomplete, and readers are
//!    told it is building.
//!
//! So the view equals its definition over the pinned snapshot plus every
//! change after it, and no commit waits for more than one turn of a build.
//! A build that fails (a row of its inputs makes the definition fail) marks
//! the view failed with that error; the database goes on without it.

use std::collections::HashMap;
use std::sync::Arc;

use rockstream_ops::keys::{self, decode_weight, RowStorage};
use rockstream_ops::StateStore;
use rockstream_storage::{EpochStore, Snapshot};
use rockstream_types::encoding::decode_row;
use rockstream_types::{codes, ObjectId, RsError, RsResult, ZSet};

use super::{apply_view_output, clear_pending, load_pending, split_steps, EpochLoop, Stores};
use crate::engine::{ViewStatus, BACKFILL_EPOCH_ROWS};

/// Least time between two progress lines in the log for one build.
const PROGRESS_LOG_INTERVAL_MICROS: i64 = 5_000_000;

/// Where a view is in its life (see the module docs).
pub(super) enum Phase {
    /// Deleting `stale` (what an interrupted build left), then waiting for
    /// the views it reads to be complete.
    Preparing {
        stale: Vec<Vec<u8>>,
    },
    Building(Box<Backfill>),
    Maintained,
    /// Its build failed; it stays unmaintained until dropped.
    BuildFailed,
}

/// A running build: the pinned snapshots and how far each source was read,
/// per shard (by shard id).
pub(super) struct Backfill {
    pinned: Vec<Snapshot>,
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
    /// True while some view is preparing or building, or a dropped
    /// object's keys are being deleted.
    pub(super) fn has_background_work(&self) -> bool {
        !self.reclaims.is_empty()
            || self.views.iter().any(|installed| {
                matches!(
                    installed.phase,
                    Phase::Preparing { .. } | Phase::Building(_)
                )
            })
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
                Phase::Preparing { stale } if !stale.is_empty() => {
                    let prefix = stale[0].clone();
                    if !self.delete_chunk(&prefix).await? {
                        if let Phase::Preparing { stale } = &mut self.views[index].phase {
                            stale.remove(0);
                        }
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
                        self.fail_build(index, error.clone(), error);
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
        let pinned = self
            .shards
            .iter()
            .map(|shard| shard.snapshot())
            .collect::<RsResult<Vec<_>>>()?;
        let view = &self.views[index].view;
        let readers = pinned
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
            pinned,
            readers,
            initial: true,
            rows_done: 0,
            logged_at_micros: self.runtime.now_micros(),
        }));
        Ok(())
    }

    /// Feeds the next chunk of every source through the view's dataflow in
    /// one epoch; the sources advance together, so a small dimension table
    /// is read whole in the first turn and each chunk of a large fact table
    /// then joins against it. Once every source is read, the last turn
    /// steps the pending input and marks the view installed.
    pub(super) async fn backfill_turn(&mut self, index: usize) -> RsResult<()> {
        let Phase::Building(backfill) = &mut self.views[index].phase else {
            return Ok(());
        };
        // A turn reads about as many rows whatever the shard count.
        let shard_rows = (BACKFILL_EPOCH_ROWS / backfill.pinned.len()).max(1);
        let mut inputs: Vec<HashMap<ObjectId, ZSet>> = Vec::with_capacity(backfill.pinned.len());
        for (pinned, readers) in backfill.pinned.iter().zip(&mut backfill.readers) {
            let mut shard_inputs = HashMap::new();
            for (source, reader) in readers {
                if let Some(chunk) = reader.next_chunk(pinned, shard_rows).await? {
                    backfill.rows_done += chunk.len() as u64;
                    shard_inputs.insert(*source, chunk);
                }
            }
            inputs.push(shard_inputs);
        }
        let initial = std::mem::replace(&mut backfill.initial, false);
        let rows_done = backfill.rows_done;
        let complete = inputs.iter().all(HashMap::is_empty);
        let mut stores = self.new_stores()?;
        let view_id = self.views[index].view.view_id;
        let mut stepped = Ok(());
        if !complete || initial {
            // Without source rows the one step global aggregates need.
            (stores, stepped) = self.build_step(stores, index, inputs, initial).await?;
        }
        if complete && stepped.is_ok() {
            let mut pending = Vec::with_capacity(stores.len());
            for store in &mut stores {
                let shard_pending = load_pending(store, view_id).await?;
                if !shard_pending.is_empty() {
                    clear_pending(store, view_id).await?;
                }
                pending.push(shard_pending);
            }
            if pending
                .iter()
                .any(|shard_pending| !shard_pending.is_empty())
            {
                (stores, stepped) = self.build_step(stores, index, pending, false).await?;
            }
        }
        if let Err(error) = stepped {
            let name = self.views[index].view.name.clone();
            let status = RsError::new(
                &codes::VIEW_BACKFILL_FAILED,
                format!(
                    "materialized view \"{name}\" could not be built: {}",
                    error.message
                ),
            )
            .with_detail(error.to_string());
            self.fail_build(index, status, error);
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

    /// Steps view `index` over `inputs` (per shard) on every shard and
    /// applies its writes and output. The inner `Err`: the build's own
    /// failure (its writes are dropped); the outer one: storage failed.
    async fn build_step(
        &self,
        stores: Stores,
        index: usize,
        inputs: Vec<HashMap<ObjectId, ZSet>>,
        initial: bool,
    ) -> RsResult<(Stores, RsResult<()>)> {
        let inputs: Vec<Arc<HashMap<ObjectId, ZSet>>> = inputs.into_iter().map(Arc::new).collect();
        let bases: Vec<Arc<EpochStore>> = stores.into_iter().map(Arc::new).collect();
        let steps = self.shard_steps(index, &bases, &inputs, initial);
        let spawn = steps.len() > 1;
        let results = self.run_steps(steps, spawn).await;
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
        let view = &self.views[index].view;
        for (store, (output, writes)) in stores.iter_mut().zip(stepped) {
            store.absorb(writes);
            apply_view_output(store, view, &output);
        }
        Ok((stores, Ok(())))
    }

    /// Ends a build that cannot complete: readers get `status`, the
    /// statement waiting for the build (if any) gets `cause`. The partial
    /// state stays until the view is dropped (or the next start rebuilds
    /// it), as the view is never read meanwhile.
    fn fail_build(&mut self, index: usize, status: RsError, cause: RsError) {
        let installed = &mut self.views[index];
        tracing::warn!(view = %installed.view.name, error = %cause, "backfill failed");
        installed.phase = Phase::BuildFailed;
        let view_id = installed.view.view_id;
        if let Some(built) = installed.built.take() {
            let _ = built.send(Err(cause));
        }
        self.set_status(view_id, ViewStatus::Failed(status));
    }
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
