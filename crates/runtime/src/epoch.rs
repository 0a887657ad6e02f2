//! The engine task: groups commands into epochs and commits each atomically
//! on every shard.
//!
//! The engine owns every shard of the storage (shard 0 is the coordinator,
//! [`log`]). An epoch's state is one [`EpochStore`] per shard. A commit's
//! table rows go to the shard that owns their key; every view with input
//! is stepped on every shard at once, each shard over its own state and
//! its part of the deltas, the view's exchanges connecting the shards'
//! steps (`rockstream_ops::exchange`); each shard's output stays on it.
//! Then the shards commit, the coordinator first, and readers get one
//! snapshot per shard, all at the new epoch. At one shard this is a single
//! SlateDB batch per epoch, as before shards.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};

use futures::future::BoxFuture;
use futures::FutureExt;

use rockstream_common::Runtime;

use rockstream_ops::exchange::first_cause;
use rockstream_ops::keys::{self, decode_weight, encode_weight, RowStorage};
use rockstream_ops::{
    ChannelExchange, OverlayStore, ScanOrder, StateRead, StateStore, Step, StepProgress, Write,
};
use rockstream_storage::{EpochStore, ShardDb, SnapshotSet};
use rockstream_types::encoding::{decode_row, encode_datum, encode_row, encode_row_into};
use rockstream_types::partition::BucketMap;
use rockstream_types::{codes, Epoch, ObjectId, Row, RsError, RsResult, ZSet};
use tokio::sync::{mpsc, oneshot, watch};

use crate::engine::{
    Command, CommitRequest, Committed, InstallView, LateRows, Published, TableChange, ViewStatus,
    EPOCH_COMMITS_MAX, MEMTABLE_FLUSH_EPOCHS, MEMTABLE_FLUSH_INTERVAL_MICROS,
    PARALLEL_STEP_ROWS_MIN,
};

mod backfill;
mod indexes;
mod log;
mod reclaim;
mod recovery;
mod staged;
mod watermarks;

pub use backfill::installed_marker;
pub(crate) use log::repair;
pub(crate) use watermarks::read_watermarks;

use backfill::{BuildInputs, Phase};
use reclaim::{Dropping, Reclaim};
use recovery::{refuse, Failure};

type Reply<T = Epoch> = oneshot::Sender<RsResult<T>>;

struct Installed {
    view: InstallView,
    /// Why its last step failed, while it holds its input back.
    failed: Option<RsError>,
    phase: Phase,
    /// Told when its build ends (taken then).
    built: Option<Reply<()>>,
    /// When the view next needs a step without input (a temporal filter's
    /// next row to enter or leave the output), on the engine's clock.
    wake_at: Option<i64>,
}

/// One shard's step of a view: its output, its writes (not yet applied)
/// and when the view next changes there without input.
type Stepped = (ZSet, BTreeMap<Vec<u8>, Write>, Option<i64>);
type StepResult = RsResult<Stepped>;

/// An epoch's state: one store per shard, by shard id.
type Stores = Vec<EpochStore>;

/// Changes of an epoch per shard (by shard id), per object.
type Deltas = Vec<HashMap<ObjectId, ZSet>>;

/// One shard's input of a view step, shared with the step's task.
type SharedInput = Arc<HashMap<ObjectId, ZSet>>;

/// A transaction's changes on one shard, with each row's storage key.
type ShardChanges = (Vec<TableChange>, Vec<Vec<Vec<u8>>>);

pub(crate) struct EpochLoop {
    runtime: Runtime,
    /// Every shard, by id; shard 0 is the coordinator.
    shards: Vec<ShardDb>,
    map: Arc<BucketMap>,
    epoch: Epoch,
    published: watch::Sender<Published>,
    statuses: Arc<RwLock<HashMap<ObjectId, ViewStatus>>>,
    /// Installed views in dependency order (a view after its sources).
    views: Vec<Installed>,
    /// The epoch and time (µs) of the last memtable flush the engine
    /// requested, and those flushes while they run.
    flushed_at: (Epoch, i64),
    flushing: Vec<tokio::task::JoinHandle<RsResult<()>>>,
    /// Transactions' staged rows still being deleted, oldest first.
    reclaims: Vec<Reclaim>,
    /// Dropped objects whose keys compaction is removing.
    dropping: Dropping,
    /// Keys the next deletion turn removes per shard ([`next_delete_chunk`]).
    delete_chunk_keys: usize,
    /// How many, for [`crate::Engine::reclaims_pending`].
    reclaiming: Arc<AtomicUsize>,
    /// The coordinator's log record of the last epoch, deleted by the next.
    logged: Vec<Vec<u8>>,
    /// Set while storage has failed and its shards are not reopened.
    failure: Option<Failure>,
    /// The last catalog transaction the coordinator records as committed.
    ddl_transaction: u64,
    /// The catalog transaction the epoch being committed records, adopted
    /// once the coordinator's commit succeeds.
    ddl_transaction_pending: Option<u64>,
    /// Set while a staged commit runs its steps: epochs are committed but
    /// not published until its last ([`staged`]).
    hold_publish: bool,
    /// Transactions whose rows are staged and not yet committed or
    /// discarded ([`staged`]).
    staging: HashSet<u64>,
    /// Transactions that ended without committing their staged rows, told
    /// by sessions without waiting ([`crate::Engine::discard_staged`]).
    discarded: Arc<Mutex<Vec<u64>>>,
    /// Those told before their first segment was staged (the staging still
    /// queued): their segments are refused when they come.
    discarded_early: HashSet<u64>,
    /// Tables dropped since the engine started: a staged commit into one
    /// is refused, even once its keys are reclaimed.
    dropped: HashSet<ObjectId>,
    /// The clock of the epoch under way (µs since 1970 UTC): the runtime's,
    /// read as each epoch begins, kept from going back (and, by each
    /// temporal filter, across restarts).
    clock: i64,
    /// Set once the start has installed every view and finished staged
    /// commits ([`EpochLoop::finish_staged`]): only then do views step
    /// without input, so every view reading one is there to follow it.
    started: bool,
    /// When the engine last looked at its shards ([`EpochLoop::check_shards`]).
    shards_checked_at: i64,
    /// Each watermarked table's watermark and late rows ([`watermarks`]),
    /// as of the epoch under way.
    watermarks: watermarks::Watermarks,
    /// While a staged commit into a watermarked table runs its steps, the
    /// table and the watermark it began at: views step at that one until
    /// its last step, as its later steps still admit rows below the
    /// watermark its earlier ones advanced ([`staged`]).
    held_watermark: Option<(ObjectId, Option<i64>)>,
}

/// What an engine starts from.
pub(crate) struct Start {
    pub shards: Vec<ShardDb>,
    pub map: Arc<BucketMap>,
    pub epoch: Epoch,
    /// The coordinator's last log record, already applied.
    pub logged: Vec<Vec<u8>>,
    /// The last catalog transaction the coordinator records.
    pub ddl_transaction: u64,
    /// The watermarks the coordinator records.
    pub watermarks: watermarks::Watermarks,
    /// Shared with the engine's handles ([`EpochLoop::discarded`]).
    pub discarded: Arc<Mutex<Vec<u64>>>,
}

impl EpochLoop {
    pub fn new(
        runtime: Runtime,
        start: Start,
        published: watch::Sender<Published>,
        statuses: Arc<RwLock<HashMap<ObjectId, ViewStatus>>>,
        reclaiming: Arc<AtomicUsize>,
    ) -> Self {
        EpochLoop {
            runtime,
            shards: start.shards,
            map: start.map,
            epoch: start.epoch,
            published,
            statuses,
            views: Vec::new(),
            flushed_at: (start.epoch, 0),
            flushing: Vec::new(),
            reclaims: Vec::new(),
            dropping: Dropping::default(),
            delete_chunk_keys: DELETE_CHUNK_KEYS,
            reclaiming,
            logged: start.logged,
            failure: None,
            ddl_transaction: start.ddl_transaction,
            ddl_transaction_pending: None,
            hold_publish: false,
            staging: HashSet::new(),
            discarded: start.discarded,
            discarded_early: HashSet::new(),
            dropped: HashSet::new(),
            clock: i64::MIN,
            started: false,
            shards_checked_at: 0,
            watermarks: start.watermarks,
            held_watermark: None,
        }
    }

    fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Serves commands until every handle is gone. While a view is being
    /// built or staged rows deleted, commands and bounded steps
    /// of that work take turns: a commit waits for at most one step, and a
    /// busy commit stream cannot starve the background work. A deletion's
    /// step waits for no read: its keys are read meanwhile, and commands
    /// go on until they are there.
    pub async fn run(mut self, mut receiver: mpsc::Receiver<Command>) {
        // No snapshot from before the start is open.
        let readers = vec![0; self.shards.len()];
        if let Err(error) = self.resume_drops(&readers).await {
            self.storage_failed(error);
        }
        // Part of a large transaction's commit a crash cut short is not
        // shown until [`EpochLoop::finish_staged`] completes it.
        match self.staged_commit_pending().await {
            Ok(pending) => self.hold_publish = pending,
            Err(error) => self.storage_failed(error),
        }
        let mut deferred: Option<Command> = None;
        // Set when background work is pending but none of it can move (a
        // bug: every waiting build waits on one that can): the loop then
        // waits for a command instead of spinning.
        let mut stalled = false;
        loop {
            if let Some(wait) = self.reopen_wait() {
                // Storage failed ([`recovery`]): wait for a command or the
                // next attempt to reopen it.
                let command = match deferred.take() {
                    Some(command) => Some(command),
                    None => tokio::select! {
                        command = receiver.recv() => match command {
                            Some(command) => Some(command),
                            None => break,
                        },
                        () = self.runtime.sleep(wait) => None,
                    },
                };
                if let Err(error) = self.recover().await {
                    if let Some(command) = command {
                        refuse(command, error);
                    }
                    continue;
                }
                deferred = command;
                stalled = false;
            }
            self.take_discarded();
            let building = self.has_background_work() && !stalled;
            // A deletion's next chunk is still being read: rather than a
            // turn waiting for it, a queued command goes first, else the
            // first of a command and the read.
            let reading = building && self.deletion_reading();
            let command = match deferred.take() {
                Some(command) => Some(command),
                None if reading => match receiver.try_recv() {
                    Ok(command) => Some(command),
                    Err(mpsc::error::TryRecvError::Empty) => {
                        let wait = self.wake_wait(SHARD_CHECK_INTERVAL);
                        let runtime = self.runtime.clone();
                        tokio::select! {
                            command = receiver.recv() => match command {
                                Some(command) => Some(command),
                                None => break,
                            },
                            () = self.collect_deletion_read() => None,
                            // A view's next row to enter or leave: stepped below.
                            () = runtime.sleep(wait) => None,
                        }
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                },
                None if building => match receiver.try_recv() {
                    Ok(command) => Some(command),
                    Err(mpsc::error::TryRecvError::Empty) => None,
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                },
                None => {
                    // Idle until a command, a view's next row to enter or
                    // leave (stepped below), or the next look at the shards.
                    let since_check = self.runtime.now_micros() - self.shards_checked_at;
                    let check_in = SHARD_CHECK_INTERVAL.saturating_sub(
                        std::time::Duration::from_micros(since_check.max(0) as u64),
                    );
                    let wait = self.wake_wait(check_in);
                    tokio::select! {
                        command = receiver.recv() => match command {
                            Some(command) => Some(command),
                            None => break,
                        },
                        () = self.runtime.sleep(wait) => {
                            // Also when the clock went back past the last look.
                            let since = self.runtime.now_micros() - self.shards_checked_at;
                            if !(0..SHARD_CHECK_INTERVAL.as_micros() as i64).contains(&since) {
                                self.shards_checked_at = self.runtime.now_micros();
                                self.check_shards().await;
                            }
                            None
                        }
                    }
                }
            };
            if command.is_some() {
                stalled = false;
            }
            let result = match command {
                Some(command) => self.serve(command, &mut receiver, &mut deferred).await,
                None => Ok(()),
            };
            let result = match result {
                Ok(()) => self.tick().await,
                failed => failed,
            };
            let result = match result {
                Ok(()) => self.tend_drops().await,
                failed => failed,
            };
            // A read done by now is collected: the turn goes before the next
            // command.
            if building {
                self.collect_finished_reads().await;
            }
            let result = match result {
                Ok(()) if building && !self.deletion_reading() => {
                    self.background_turn().await.map(|worked| {
                        if !worked && !stalled {
                            tracing::error!(
                                "background work is pending but none of it can proceed"
                            );
                        }
                        stalled = !worked;
                    })
                }
                other => other,
            };
            if let Err(error) = result {
                self.storage_failed(error);
            }
        }
        self.close().await;
    }

    /// The earliest clock time at which a maintained view needs a step
    /// without input, when the engine can take one ([`EpochLoop::tick`]).
    fn next_wake(&self) -> Option<i64> {
        if !self.started || self.hold_publish || self.failure.is_some() {
            return None;
        }
        self.views
            .iter()
            .filter(|installed| matches!(installed.phase, Phase::Maintained))
            .filter_map(|installed| installed.wake_at)
            .min()
    }

    /// How long to wait, at most `longest`, for the next tick: until the
    /// next view's wake time rounded up to [`TICK_GRANULARITY_MICROS`], so
    /// rows coming due close together share one epoch (each is stepped at
    /// the epoch's exact clock, so none is early).
    fn wake_wait(&self, longest: std::time::Duration) -> std::time::Duration {
        let Some(at) = self.next_tick() else {
            return longest;
        };
        let micros = at.saturating_sub(self.runtime.now_micros()).max(0);
        longest.min(std::time::Duration::from_micros(micros as u64))
    }

    /// When the next tick is due: the next wake time rounded up to
    /// [`TICK_GRANULARITY_MICROS`].
    fn next_tick(&self) -> Option<i64> {
        self.next_wake().map(|at| {
            let rest = at.rem_euclid(TICK_GRANULARITY_MICROS);
            match rest {
                0 => at,
                _ => at.saturating_add(TICK_GRANULARITY_MICROS - rest),
            }
        })
    }

    /// Steps, in an epoch of their own, the views whose rows come due by
    /// the clock (temporal filters) when no commit has stepped them.
    /// Not while a staged commit holds back what readers see.
    async fn tick(&mut self) -> RsResult<()> {
        let now = self.runtime.now_micros();
        if self.next_tick().is_none_or(|at| at > now) {
            return Ok(());
        }
        let stores = self.new_stores()?;
        let deltas: Deltas = vec![HashMap::new(); self.shard_count()];
        let stores = self.propagate(stores, deltas, BuildInputs::new()).await?;
        self.commit_epoch(stores).await?;
        self.maybe_flush_memtables().await;
        Ok(())
    }

    /// Takes a shard SlateDB closed by itself as a storage failure: reads
    /// of it fail (a statement reading before it writes gets the error and
    /// never reaches the engine), so nothing else would make the engine
    /// reopen it ([`recovery`]).
    async fn check_shards(&mut self) {
        if self.failure.is_some() {
            return;
        }
        for shard in &self.shards {
            if let Some(error) = shard.failure().await {
                self.storage_failed(error);
                return;
            }
        }
    }

    async fn close(&self) {
        for shard in &self.shards {
            let _ = shard.close().await;
        }
    }

    /// Serves one command; a commit takes every commit queued behind it
    /// into its epoch, up to [`EPOCH_COMMITS_MAX`], and leaves the first
    /// other command in `deferred`. `Err`: a storage failure, after which
    /// the engine reopens its storage ([`recovery`]).
    async fn serve(
        &mut self,
        command: Command,
        receiver: &mut mpsc::Receiver<Command>,
        deferred: &mut Option<Command>,
    ) -> RsResult<()> {
        match command {
            Command::Commit { request, reply } => {
                let mut commits = vec![(request, reply)];
                while commits.len() < EPOCH_COMMITS_MAX {
                    match receiver.try_recv() {
                        Ok(Command::Commit { request, reply }) => commits.push((request, reply)),
                        Ok(other) => {
                            *deferred = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let result = self.run_commits(commits).await;
                if result.is_ok() {
                    self.maybe_flush_memtables().await;
                }
                result
            }
            Command::Install {
                view,
                registered,
                built,
            } => {
                let result = self.install(*view, built).await;
                let failed = result
                    .as_ref()
                    .err()
                    .filter(|error| stops_the_engine(error));
                let failed = failed.cloned();
                let _ = registered.send(result);
                failed.map_or(Ok(()), Err)
            }
            Command::Drop { object_ids, reply } => {
                answer(reply, self.drop_objects(&object_ids).await)
            }
            Command::Stage {
                transaction,
                segment,
                rows,
                reply,
            } => answer(reply, self.stage(transaction, segment, rows).await),
            Command::CommitStaged {
                transaction,
                table,
                reply,
            } => self.commit_staged(transaction, table, reply).await,
            Command::FinishStaged { reply } => answer(reply, self.finish_staged().await),
        }
    }

    /// Starts a memtable flush of every shard on tasks of their own once
    /// enough epochs and time have passed and the previous ones have
    /// finished; epochs go on meanwhile.
    async fn maybe_flush_memtables(&mut self) {
        let (epoch, micros) = self.flushed_at;
        let now = self.runtime.now_micros();
        if self.epoch < epoch + MEMTABLE_FLUSH_EPOCHS
            || now < micros + MEMTABLE_FLUSH_INTERVAL_MICROS
            || self.flushing.iter().any(|flush| !flush.is_finished())
        {
            return;
        }
        for finished in std::mem::take(&mut self.flushing) {
            match finished.await {
                Ok(Ok(())) => {}
                // SlateDB closes a shard whose flush failed: reopen it.
                Ok(Err(error)) if error.is_storage_failure() => self.storage_failed(error),
                Ok(Err(error)) => tracing::warn!(%error, "memtable flush failed"),
                Err(error) => tracing::warn!(%error, "memtable flush task failed"),
            }
        }
        self.flushed_at = (self.epoch, now);
        self.flushing = self
            .shards
            .iter()
            .map(|shard| self.runtime.spawn(shard.flush_memtable()))
            .collect();
    }

    /// An epoch's state over every shard's newest snapshot; the epoch's
    /// clock starts.
    fn new_stores(&mut self) -> RsResult<Stores> {
        self.clock = self.clock.max(self.runtime.now_micros());
        self.shards
            .iter()
            .map(|shard| Ok(EpochStore::new(shard.snapshot()?)))
            .collect()
    }

    async fn run_commits(
        &mut self,
        commits: Vec<(CommitRequest, Reply<Committed>)>,
    ) -> RsResult<()> {
        let began = self.runtime.now_micros();
        let mut stores = match self.new_stores() {
            Ok(stores) => stores,
            Err(error) => {
                for (_, reply) in commits {
                    let _ = reply.send(Err(error.clone()));
                }
                return Err(error);
            }
        };
        // Each accepted commit's reply, with the rows it dropped as late.
        let mut accepted: Vec<(Reply<Committed>, LateRows)> = Vec::new();
        let mut ddl_transaction = None;
        let mut deltas: Deltas = vec![HashMap::new(); self.shard_count()];
        let mut build_inputs = BuildInputs::new();
        // Every row of the epoch is judged against the watermarks as it
        // began; those it advances are recorded with it.
        let began_at = self.watermarks.clone();
        let mut watermarks_changed = Vec::new();
        let mut commits = commits.into_iter();
        while let Some((mut request, reply)) = commits.next() {
            // A table dropped since the session planned its change: its
            // keys are being compacted away.
            if let Some(change) = request
                .changes
                .iter()
                .find(|change| self.dropped.contains(&change.table_id))
            {
                let _ = reply.send(Err(dropped_meanwhile(&change.table_name)));
                continue;
            }
            // Late rows go before anything is checked: they claim no key or
            // UNIQUE value.
            let judged = watermarks::drop_late(&mut request.changes, &began_at);
            // Checked on the whole change (a row and its entries may live
            // on different shards); its outcome counts only for rows that
            // are as the transaction read them.
            let entry_writes = indexes::check(&stores, &self.map, &request.changes).await;
            let parts = split_by_shard(request.changes, &self.map);
            let mut valid = Ok(());
            for (store, (changes, keys)) in stores.iter_mut().zip(&parts) {
                valid = validate_table_changes(store, changes, keys).await;
                if valid.is_err() {
                    break;
                }
            }
            let entry_writes = match valid.and(entry_writes) {
                Ok(writes) => writes,
                Err(error) if error.is_storage_failure() => {
                    // The storage under the reads failed (SlateDB closes a
                    // shard whose background flush failed, and its reads
                    // fail from then on): no commit of this epoch can go
                    // on, and the engine reopens its storage.
                    let remaining = commits.map(|(_, reply)| reply);
                    let accepted = accepted.into_iter().map(|(reply, _)| reply);
                    for reply in accepted.chain([reply]).chain(remaining) {
                        let _ = reply.send(Err(error.clone()));
                    }
                    return Err(error);
                }
                Err(error) => {
                    let _ = reply.send(Err(error));
                    continue;
                }
            };
            indexes::apply(&mut stores, entry_writes);
            let late_rows = judged.late_rows();
            watermarks::advance(&mut self.watermarks, judged, &mut watermarks_changed);
            for (key, write) in request.coordinator_writes {
                match write {
                    Write::Put(value) => stores[0].put(key, value),
                    Write::Delete => stores[0].delete(key),
                    Write::AddCount(change) => stores[0].add_count(key, change),
                }
            }
            for (shard, ((store, (changes, keys)), shard_deltas)) in
                stores.iter_mut().zip(parts).zip(&mut deltas).enumerate()
            {
                self.read_changes(&mut build_inputs, shard, &changes, &keys);
                for (table_id, delta) in apply_table_changes(store, changes, keys) {
                    shard_deltas.entry(table_id).or_default().extend(delta);
                }
            }
            if let Some(transaction) = request.ddl_transaction {
                stores[0].put(
                    keys::ddl_transaction_key(),
                    transaction.to_be_bytes().to_vec(),
                );
                ddl_transaction = Some(transaction);
            }
            accepted.push((reply, late_rows));
        }
        if accepted.is_empty() {
            return Ok(());
        }
        for table_id in watermarks_changed {
            if let Some(state) = self.watermarks.get(&table_id) {
                stores[0].put(keys::watermark_key(table_id), watermarks::encode(state));
            }
        }
        let deltas = deltas
            .into_iter()
            .map(|shard_deltas| {
                shard_deltas
                    .into_iter()
                    .map(|(id, delta)| (id, delta.consolidate()))
                    .collect()
            })
            .collect();
        let validated = self.runtime.now_micros();
        let stores = match self.propagate(stores, deltas, build_inputs).await {
            Ok(stores) => stores,
            Err(error) => {
                for (reply, _) in accepted {
                    let _ = reply.send(Err(error.clone()));
                }
                return Err(error);
            }
        };
        self.ddl_transaction_pending = ddl_transaction;
        let propagated = self.runtime.now_micros();
        let committed = self.commit_epoch(stores).await;
        let ended = self.runtime.now_micros();
        if ended - began > SLOW_EPOCH_MICROS {
            // Where a slow commit's time went (RUST_LOG=rockstream_runtime=debug).
            tracing::debug!(
                commits = accepted.len(),
                validate_ms = (validated - began) / 1000,
                propagate_ms = (propagated - validated) / 1000,
                durable_ms = (ended - propagated) / 1000,
                "slow epoch"
            );
        }
        match committed {
            Ok(epoch) => {
                for (reply, late_rows) in accepted {
                    let _ = reply.send(Ok(Committed { epoch, late_rows }));
                }
                Ok(())
            }
            Err(error) => {
                for (reply, _) in accepted {
                    let _ = reply.send(Err(error.clone()));
                }
                Err(error)
            }
        }
    }

    /// Commits an epoch on every shard: the coordinator first, with the
    /// log record of the others' writes (when they have any), then the
    /// others at once; publishes the new snapshots once all are durable.
    async fn commit_epoch(&mut self, stores: Stores) -> RsResult<Epoch> {
        let epoch = self.epoch + 1;
        let mut writes: Vec<BTreeMap<Vec<u8>, Write>> =
            stores.into_iter().map(EpochStore::into_writes).collect();
        let mut coordinator = std::mem::take(&mut writes[0]);
        for key in std::mem::take(&mut self.logged) {
            coordinator.entry(key).or_insert(Write::Delete);
        }
        for (shard, shard_writes) in writes.iter().enumerate().skip(1) {
            for (key, part) in log::record(epoch, shard as u16, shard_writes) {
                self.logged.push(key.clone());
                coordinator.insert(key, Write::Put(part));
            }
        }
        let ddl_transaction = self.ddl_transaction_pending.take();
        let committed = self.runtime.watched(
            || format!("epoch {epoch}'s commit on the coordinator shard"),
            self.shards[0].commit(epoch, coordinator),
        );
        if let Err(failed) = committed.await {
            if !failed.maybe_applied {
                return Err(failed.cause);
            }
            // Its writers cannot be told it failed: reopening the storage
            // finds whether it is durable ([`recovery`]).
            self.storage_failed(failed.cause.clone());
            return Err(RsError::new(
                &codes::COMMIT_OUTCOME_UNKNOWN,
                format!(
                    "could not confirm that epoch {epoch} is durable: {}",
                    failed.cause
                ),
            ));
        }
        if let Some(transaction) = ddl_transaction {
            self.ddl_transaction = transaction;
        }
        if !self.logged.is_empty() {
            failpoint_between_shard_commits();
        }
        let mut others = Vec::new();
        for (shard, writes) in self.shards.iter().zip(writes).skip(1) {
            if !writes.is_empty() {
                others.push(shard.commit(epoch, writes));
            }
        }
        let committed = self.runtime.watched(
            || format!("epoch {epoch}'s commit on the other shards"),
            futures::future::join_all(others),
        );
        for committed in committed.await {
            // The epoch is durable in the coordinator's log: reopening the
            // storage completes it. Its writers are told so, not that it
            // failed; the shard's error is why storage is unusable.
            if let Err(error) = committed {
                let error = error.cause;
                self.storage_failed(error.clone());
                return Err(RsError::new(
                    &codes::COMMIT_DURABLE_UNPUBLISHED,
                    format!("epoch {epoch} is durable but not yet on every shard: {error}"),
                ));
            }
        }
        self.epoch = epoch;
        self.publish()?;
        Ok(epoch)
    }

    /// Gives readers every shard's newest snapshot, at [`EpochLoop::epoch`]
    /// — unless a staged commit is under way, whose steps readers see
    /// together once it is done ([`staged`]).
    fn publish(&self) -> RsResult<()> {
        if self.hold_publish {
            return Ok(());
        }
        let snapshots = self
            .shards
            .iter()
            .map(ShardDb::snapshot)
            .collect::<RsResult<Vec<_>>>()?;
        let snapshot = SnapshotSet::new(snapshots, self.map.clone())?;
        self.published.send_replace(Published {
            epoch: self.epoch,
            snapshot,
            ddl_transaction: self.ddl_transaction,
            watermarks: Arc::new(self.watermarks.clone()),
        });
        Ok(())
    }

    /// Runs every view with input in dependency order; each view's output
    /// becomes input of the views reading it. Views are stepped in waves of
    /// views that do not read one another, concurrently when the epoch is
    /// large enough to be worth a task each.
    ///
    /// A view being built steps the changes to rows its build has read
    /// (`build_inputs` holds those of its tables; [`backfill`]); it reads
    /// the others later. A view whose build has not begun ignores them (its
    /// build reads them), and so does one whose build failed.
    async fn propagate(
        &mut self,
        mut stores: Stores,
        mut deltas: Deltas,
        mut build_inputs: BuildInputs,
    ) -> RsResult<Stores> {
        let mut next = 0;
        while next < self.views.len() {
            let mut wave = Vec::new();
            let mut wave_outputs = Vec::new();
            while let Some(installed) = self.views.get(next) {
                let sources = &installed.view.sources;
                if sources.iter().any(|source| wave_outputs.contains(source)) {
                    break;
                }
                let has_input = deltas.iter().any(|shard_deltas| {
                    sources
                        .iter()
                        .any(|source| shard_deltas.get(source).is_some_and(|d| !d.is_empty()))
                });
                let view_id = installed.view.view_id;
                let due = installed.wake_at.is_some_and(|at| at <= self.clock);
                match &installed.phase {
                    Phase::Maintained if has_input || due => {
                        wave.push((next, None));
                        wave_outputs.push(view_id);
                    }
                    Phase::Building(backfill) if has_input => {
                        let tables = build_inputs.remove(&view_id);
                        let read = backfill.changes_read(&installed.view, &deltas, tables);
                        if read.iter().any(|inputs| !inputs.is_empty()) {
                            wave.push((next, Some(read)));
                            wave_outputs.push(view_id);
                        }
                    }
                    _ => {}
                }
                next += 1;
            }
            stores = self.step_wave(stores, wave, &mut deltas).await?;
        }
        Ok(stores)
    }

    /// Steps views that do not read one another over the same epoch state,
    /// each on every shard, then applies their writes in order; each
    /// healthy view's output joins `deltas`. A view that fails keeps its
    /// input for a later retry. Each view of `wave` comes with its own
    /// input, if it steps only part of `deltas` (a view being built).
    async fn step_wave(
        &mut self,
        mut stores: Stores,
        wave: Vec<(usize, Option<Deltas>)>,
        deltas: &mut Deltas,
    ) -> RsResult<Stores> {
        if wave.is_empty() {
            return Ok(stores);
        }
        // A failed view retries its held-back input along with the new.
        let shared_deltas: Vec<SharedInput> =
            std::mem::take(deltas).into_iter().map(Arc::new).collect();
        let mut own_inputs: Vec<Option<Vec<SharedInput>>> = Vec::new();
        let mut indexes = Vec::with_capacity(wave.len());
        for (index, own) in wave {
            indexes.push(index);
            if let Some(own) = own {
                own_inputs.push(Some(own.into_iter().map(Arc::new).collect()));
                continue;
            }
            own_inputs.push(match self.views[index].failed {
                Some(_) => {
                    let mut own = Vec::with_capacity(stores.len());
                    for (store, shard_deltas) in stores.iter().zip(&shared_deltas) {
                        let view = &self.views[index].view;
                        own.push(Arc::new(
                            inputs_with_pending(store, view, shard_deltas).await?,
                        ));
                    }
                    Some(own)
                }
                None => None,
            });
        }
        let input_rows: usize = shared_deltas
            .iter()
            .flat_map(|shard_deltas| shard_deltas.values())
            .map(ZSet::len)
            .sum();
        let wave = indexes;
        let tasks = wave.len() * stores.len();
        let spawn = tasks > 1 && input_rows >= PARALLEL_STEP_ROWS_MIN;
        let shared_stores: Vec<Arc<EpochStore>> = stores.into_iter().map(Arc::new).collect();
        let mut steps = Vec::new();
        let mut progress = Vec::new();
        for (&index, own) in wave.iter().zip(&own_inputs) {
            let inputs = own.as_deref().unwrap_or(&shared_deltas);
            // A view being built keeps every window open: its build may
            // still reach any of them ([`backfill`]).
            let watermarked = matches!(self.views[index].phase, Phase::Maintained);
            let (view_steps, view_progress) =
                self.shard_steps(index, &shared_stores, inputs, (false, watermarked));
            steps.extend(view_steps);
            progress.push(view_progress);
        }
        let names = || {
            let names: Vec<String> = wave
                .iter()
                .zip(&progress)
                .map(|(&index, progress)| {
                    let name = &self.views[index].view.name;
                    match progress {
                        Some(progress) => format!("{name} ({progress})"),
                        None => name.clone(),
                    }
                })
                .collect();
            format!("the step of views {}", names.join(", "))
        };
        let stepped = self.run_steps(steps, spawn);
        let stepped = self.runtime.watched(names, stepped);
        let mut results = stepped.await.into_iter();
        let unshared = || RsError::internal("a view step outlived its wave");
        stores = shared_stores
            .into_iter()
            .map(|store| Arc::try_unwrap(store).map_err(|_| unshared()))
            .collect::<RsResult<Stores>>()?;
        *deltas = shared_deltas
            .into_iter()
            .map(|shard_deltas| Arc::try_unwrap(shard_deltas).map_err(|_| unshared()))
            .collect::<RsResult<Deltas>>()?;
        for (&index, own) in wave.iter().zip(&own_inputs) {
            let view_results: Vec<StepResult> = results.by_ref().take(stores.len()).collect();
            let inputs: Vec<&HashMap<ObjectId, ZSet>> = match own {
                Some(own) => own.iter().map(Arc::as_ref).collect(),
                None => deltas.iter().collect(),
            };
            let outputs = self
                .finish_step(&mut stores, index, view_results, &inputs)
                .await?;
            if let Some(outputs) = outputs {
                let view_id = self.views[index].view.view_id;
                for (shard_deltas, output) in deltas.iter_mut().zip(outputs) {
                    shard_deltas.insert(view_id, output);
                }
            }
        }
        Ok(stores)
    }

    /// The steps of view `index` on every shard, each over its shard's
    /// state (`bases`) and input, the view's exchanges connecting them, and
    /// where each is (for the warning a step that stops logs). Every one
    /// must run for any to finish.
    fn shard_steps(
        &self,
        index: usize,
        bases: &[Arc<EpochStore>],
        inputs: &[SharedInput],
        (initial, watermarked): (bool, bool),
    ) -> (
        Vec<BoxFuture<'static, StepResult>>,
        Option<Arc<StepProgress>>,
    ) {
        let dataflow = &self.views[index].view.dataflow;
        let step = Step {
            initial,
            now_micros: self.clock,
            watermarks: match watermarked && dataflow.reads_watermarks() {
                true => Arc::new(watermarks::known(&self.watermarks, self.held_watermark)),
                false => Arc::default(),
            },
        };
        let mesh = ChannelExchange::mesh(self.map.clone());
        let progress = mesh.first().map(ChannelExchange::progress);
        let steps = mesh
            .into_iter()
            .zip(bases)
            .zip(inputs)
            .map(|((mut exchange, base), inputs)| {
                let dataflow = Arc::clone(dataflow);
                let base = Arc::clone(base);
                let inputs = Arc::clone(inputs);
                let step = step.clone();
                async move {
                    let mut layer = OverlayStore::new(base);
                    let output = dataflow
                        .step_on(&mut layer, &inputs, &step, &mut exchange)
                        .await?;
                    let wake_at = match dataflow.reads_clock() {
                        true => dataflow.next_event(&layer).await?,
                        false => None,
                    };
                    Ok((output, layer.into_writes(), wake_at))
                }
                .boxed()
            })
            .collect();
        (steps, progress)
    }

    /// Runs steps to completion, on tasks of their own when `spawn` (for
    /// the cores), else together on this one; their results in order. A
    /// step that panics fails (a bug in one view fails that view, not the
    /// engine and every later commit), and its peers' exchanges with it.
    async fn run_steps(
        &self,
        steps: Vec<BoxFuture<'static, StepResult>>,
        spawn: bool,
    ) -> Vec<StepResult> {
        if spawn {
            let tasks: Vec<_> = steps
                .into_iter()
                .map(|step| self.runtime.spawn(step))
                .collect();
            let mut results = Vec::with_capacity(tasks.len());
            for task in tasks {
                results.push(task.await.unwrap_or_else(|error| {
                    Err(RsError::internal(format!("a view step panicked: {error}")))
                }));
            }
            return results;
        }
        let steps = steps.into_iter().map(|step| async move {
            match AssertUnwindSafe(step).catch_unwind().await {
                Ok(stepped) => stepped,
                Err(panic) => Err(RsError::internal(format!(
                    "a view step panicked: {}",
                    panic_message(panic.as_ref())
                ))),
            }
        });
        futures::future::join_all(steps).await
    }

    /// Applies a view's steps, one per shard: their writes and outputs when
    /// all succeeded; else (unless storage failed) records the error and
    /// holds each shard's `inputs` back. `Ok(None)`: the view failed.
    async fn finish_step(
        &mut self,
        stores: &mut Stores,
        index: usize,
        results: Vec<StepResult>,
        inputs: &[&HashMap<ObjectId, ZSet>],
    ) -> RsResult<Option<Vec<ZSet>>> {
        let view_id = self.views[index].view.view_id;
        let building = matches!(self.views[index].phase, Phase::Building(_));
        let stepped = match split_steps(results)? {
            Ok(stepped) => stepped,
            // A change the build had to step fails the build.
            Err(error) if building => {
                self.fail_build(index, error);
                return Ok(None);
            }
            Err(error) => {
                tracing::warn!(view = %self.views[index].view.name, %error, "view failed; holding its input until it heals");
                // It retries with its next input, not at every tick.
                self.views[index].wake_at = None;
                for (store, inputs) in stores.iter_mut().zip(inputs) {
                    clear_pending(store, view_id).await?;
                    write_pending(store, view_id, &self.views[index].view.sources, inputs);
                }
                self.set_failed(index, Some(error));
                return Ok(None);
            }
        };
        let was_failed = self.views[index].failed.is_some();
        self.views[index].wake_at = earliest_wake(&stepped);
        let mut outputs = Vec::with_capacity(stepped.len());
        for (store, (output, writes, _)) in stores.iter_mut().zip(stepped) {
            store.absorb(writes);
            apply_view_output(store, &self.views[index].view, &output);
            if was_failed {
                clear_pending(store, view_id).await?;
            }
            outputs.push(output);
        }
        if !building {
            self.set_failed(index, None);
        }
        Ok(Some(outputs))
    }

    fn set_failed(&mut self, index: usize, error: Option<RsError>) {
        let view_id = self.views[index].view.view_id;
        let status = match &error {
            Some(error) => ViewStatus::Failed(error.clone()),
            None => ViewStatus::Healthy,
        };
        self.views[index].failed = error;
        self.set_status(view_id, status);
    }

    fn set_status(&self, view_id: ObjectId, status: ViewStatus) {
        if let Ok(mut statuses) = self.statuses.write() {
            statuses.insert(view_id, status);
        }
    }

    /// Takes a view on. One whose backfill committed resumes at once
    /// (retrying the input it held back, if any); any other is built in
    /// the background ([`backfill`]), and `built` is told when that ends.
    async fn install(&mut self, view: InstallView, built: Reply<()>) -> RsResult<()> {
        if self.dropped.contains(&view.view_id) {
            // Its keys are being compacted away.
            return Err(RsError::internal(format!(
                "view {} was dropped and cannot be installed again",
                view.view_id
            )));
        }
        // The coordinator holds the marker: it commits every epoch first.
        let marker = backfill::installed_marker(view.view_id);
        let already_installed = self.shards[0].snapshot()?.get(&marker).await?.is_some();
        let view_id = view.view_id;
        self.views
            .retain(|installed| installed.view.view_id != view_id);
        if !already_installed {
            // A backfill cut short by a crash left part of the view's state
            // behind: it is deleted first, and the build starts over.
            self.set_status(view_id, ViewStatus::Building { rows_done: 0 });
            self.views.push(Installed {
                view,
                failed: None,
                phase: Phase::Preparing {
                    stale: Deletion::new(view_prefixes(view_id)),
                },
                built: Some(built),
                wake_at: None,
            });
            return Ok(());
        }
        // Rows may have come due while it was not installed.
        let wake_at = view.dataflow.reads_clock().then_some(i64::MIN);
        self.views.push(Installed {
            view,
            failed: None,
            phase: Phase::Maintained,
            built: None,
            wake_at,
        });
        let index = self.views.len() - 1;
        let stores = self.new_stores()?;
        let mut has_pending = false;
        for store in &stores {
            has_pending |= !store
                .scan_prefix(&keys::pending_prefix(view_id), ScanOrder::Ascending, 1)
                .await?
                .is_empty();
        }
        if has_pending {
            // Re-derive the failure (or heal) by retrying the pending input:
            // due at once, it is retried by the first tick once start has
            // installed every view, so its output reaches the views reading
            // it.
            self.views[index].failed = Some(RsError::internal("pending"));
            self.views[index].wake_at = Some(i64::MIN);
        }
        let _ = built.send(Ok(()));
        Ok(())
    }

    /// Deletes one bounded chunk of `deletion`'s first prefix on every
    /// shard, durably but outside any epoch, or moves on to its next prefix
    /// once the first holds nothing more.
    async fn delete_step(&mut self, mut deletion: Deletion) -> RsResult<Deletion> {
        if deletion.prefixes.is_empty() {
            return Ok(deletion);
        }
        deletion.after.resize(self.shards.len(), None);
        // Its chunk is read on a task of its own while the engine serves
        // commands, which it collects before the next turn
        // ([`EpochLoop::collect_deletion_read`]); this turn only starts
        // the read if none is under way.
        let chunks = match (deletion.read.take(), deletion.ahead.take()) {
            (Some(read), _) => read?,
            (None, Some(ahead)) => joined(
                self.runtime
                    .watched(|| "a deletion's read of its next keys", ahead)
                    .await,
            )?,
            (None, None) => {
                deletion.ahead = Some(self.read_ahead(&deletion)?);
                return Ok(deletion);
            }
        };
        let started = self.runtime.now_micros();
        let mut deletes = Vec::with_capacity(chunks.len());
        for (chunk, after) in chunks.into_iter().zip(&mut deletion.after) {
            if let Some((last, _)) = chunk.last() {
                *after = Some(last.clone());
            }
            let shard_deletes: Vec<(Vec<u8>, Write)> = chunk
                .into_iter()
                .map(|(key, _)| (key, Write::Delete))
                .collect();
            deletes.push(shard_deletes);
        }
        if deletes.iter().all(Vec::is_empty) {
            deletion.prefixes.remove(0);
            deletion.after.clear();
            return Ok(deletion);
        }
        // No epoch: nothing reads these keys, and a deletion a crash
        // loses in part is repeated (staged rows without a commit marker
        // are found again at start, and a view's missing installed marker
        // stays until every shard's deletes are durable). So each shard writes its own, side by side, without
        // the coordinator's log record an epoch needs.
        let writes = self
            .shards
            .iter()
            .zip(deletes)
            .filter(|(_, shard_deletes)| !shard_deletes.is_empty())
            .map(|(shard, shard_deletes)| shard.write_outside_epochs(shard_deletes));
        // Every write runs to its end (each shard's cache marks its write
        // in flight until then), and the first error is the turn's.
        let written = futures::future::join_all(writes);
        let written = self
            .runtime
            .watched(|| "a deletion's writes outside epochs", written);
        for written in written.await {
            written?;
        }
        let took = self.runtime.now_micros() - started;
        if took > SLOW_EPOCH_MICROS {
            tracing::debug!(
                keys = self.delete_chunk_keys,
                durable_ms = took / 1000,
                "slow deletion turn"
            );
        }
        self.delete_chunk_keys = next_delete_chunk(self.delete_chunk_keys, took);
        // The next chunk is read while the engine serves commands.
        deletion.ahead = Some(self.read_ahead(&deletion)?);
        Ok(deletion)
    }

    /// Starts reading, on a task of its own, the next chunk of every
    /// shard's keys under `deletion`'s first prefix (which it must have),
    /// from the newest state.
    fn read_ahead(&self, deletion: &Deletion) -> RsResult<DeletionRead> {
        let prefix = deletion.prefixes[0].clone();
        let limit = self.delete_chunk_keys;
        let reads = self
            .shards
            .iter()
            .zip(&deletion.after)
            .map(|(shard, after)| Ok((shard.snapshot()?, after.clone())))
            .collect::<RsResult<Vec<_>>>()?;
        Ok(self.runtime.spawn(async move {
            let mut chunks = Vec::with_capacity(reads.len());
            for (snapshot, after) in reads {
                chunks.push(
                    snapshot
                        .scan_chunk_caching(&prefix, after.as_deref(), limit)
                        .await?,
                );
            }
            Ok(chunks)
        }))
    }
}

/// How often the engine, while it waits for commands, checks that SlateDB
/// has not closed a shard by itself ([`EpochLoop::check_shards`]).
const SHARD_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Ticks ([`EpochLoop::tick`]) wait for multiples of this many
/// microseconds of the clock: a row enters or leaves a temporal filter's
/// view at most this much after its time, and rows due at distinct times
/// cost at most one epoch per this interval.
const TICK_GRANULARITY_MICROS: i64 = 10_000;

/// Keys the first deletion turn removes on each shard; later turns remove
/// as many as take about [`DELETE_TURN_MICROS`] to write: a commit arriving
/// during a turn waits for it, so the turn's length bounds that wait,
/// whatever the keys' sizes, the shard count or the machine. A turn's keys
/// are read beforehand while commands are served; at most 2,048, so that
/// a read of cold blocks stays short (54 ms at 8,192 keys) and what a turn
/// holds small. (Measured, bench `drop`, 1M rows, release, BENCHMARKS
/// rounds 18–26.)
const DELETE_CHUNK_KEYS: usize = 2048;
const DELETE_CHUNK_KEYS_MIN: usize = 128;
const DELETE_CHUNK_KEYS_MAX: usize = 2048;
/// The length a deletion turn aims for: its durable writes.
const DELETE_TURN_MICROS: i64 = 3_000;

/// An epoch slower than this logs where its time went (at debug level).
const SLOW_EPOCH_MICROS: i64 = 50_000;

/// The next deletion turn's chunk after a turn of `chunk` keys took `took`
/// µs: halved when it was too long, doubled when it was under half the
/// aim, within [`DELETE_CHUNK_KEYS_MIN`]..=[`DELETE_CHUNK_KEYS_MAX`].
fn next_delete_chunk(chunk: usize, took: i64) -> usize {
    let next = if took > DELETE_TURN_MICROS {
        chunk / 2
    } else if took < DELETE_TURN_MICROS / 2 {
        chunk * 2
    } else {
        chunk
    };
    next.clamp(DELETE_CHUNK_KEYS_MIN, DELETE_CHUNK_KEYS_MAX)
}

/// Key prefixes being deleted a chunk per turn (SlateDB has no range
/// delete), and where each shard is in the first: a turn scans from the
/// last key the previous one deleted, never over its own tombstones (which
/// made every turn slower than the last: 4 s commit stalls while a
/// 1M-row table was reclaimed). Keys written under a prefix behind the
/// cursor are not seen (nothing writes under staged rows' prefixes or a
/// view's stale state while they are deleted).
#[derive(Default)]
pub(super) struct Deletion {
    /// Prefixes still holding keys; the first is next.
    prefixes: Vec<Vec<u8>>,
    /// Per shard (by id): the last key deleted under the first prefix.
    after: Vec<Option<Vec<u8>>>,
    /// The next chunk under the first prefix, from `after`, being read
    /// while the engine serves commands: a commit then waits for a turn's
    /// writes, not for its reads too.
    ahead: Option<DeletionRead>,
    /// That chunk, once read and collected ([`Deletion::collect_read`]).
    read: Option<RsResult<Vec<Chunk>>>,
}

/// One shard's keys (and values) of a deletion's turn.
type Chunk = Vec<(Vec<u8>, Vec<u8>)>;

/// A deletion's read as its task ended.
fn joined(ended: Result<RsResult<Vec<Chunk>>, tokio::task::JoinError>) -> RsResult<Vec<Chunk>> {
    ended.map_err(|error| RsError::internal(format!("a deletion's read failed: {error}")))?
}

/// Each shard's next chunk of keys (and values) under a deletion's prefix,
/// read on a task of its own.
type DeletionRead = tokio::task::JoinHandle<RsResult<Vec<Chunk>>>;

impl Drop for Deletion {
    fn drop(&mut self) {
        if let Some(ahead) = &self.ahead {
            ahead.abort();
        }
    }
}

impl Deletion {
    pub(super) fn new(prefixes: Vec<Vec<u8>>) -> Deletion {
        Deletion {
            prefixes,
            after: Vec::new(),
            ahead: None,
            read: None,
        }
    }

    pub(super) fn is_done(&self) -> bool {
        self.prefixes.is_empty()
    }

    /// Its next chunk is being read ahead and not yet collected.
    pub(super) fn is_reading(&self) -> bool {
        self.ahead.is_some()
    }

    /// Its read ahead has ended and is not yet collected.
    pub(super) fn has_read(&self) -> bool {
        self.ahead.as_ref().is_some_and(|ahead| ahead.is_finished())
    }

    /// Waits for the chunk being read ahead, and keeps it for the next
    /// turn. Cancel-safe: dropped while waiting, the read goes on.
    pub(super) async fn collect_read(&mut self) {
        if let Some(ahead) = &mut self.ahead {
            let read = joined(ahead.await);
            self.ahead = None;
            self.read = Some(read);
        }
    }
}

/// Tells a command's sender its result, and returns its error for the
/// engine: these commands fail only when storage does.
fn answer<T>(reply: Reply<T>, result: RsResult<T>) -> RsResult<()> {
    let failed = result.as_ref().err().cloned();
    let _ = reply.send(result);
    failed.map_or(Ok(()), Err)
}

/// A crash test's failpoint: the process aborts the n-th time (counting
/// from 1) it is passed, n read from the environment variable `variable`.
struct Failpoint {
    variable: &'static str,
    what: &'static str,
    at: std::sync::OnceLock<Option<u64>>,
    passed: std::sync::atomic::AtomicU64,
}

impl Failpoint {
    const fn new(variable: &'static str, what: &'static str) -> Failpoint {
        Failpoint {
            variable,
            what,
            at: std::sync::OnceLock::new(),
            passed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn pass(&self) {
        use std::sync::atomic::Ordering;
        let at = self.at.get_or_init(|| {
            std::env::var(self.variable)
                .ok()
                .and_then(|n| n.parse().ok())
        });
        if let Some(at) = at {
            if self.passed.fetch_add(1, Ordering::Relaxed) + 1 == *at {
                tracing::error!("failpoint: aborting {}", self.what);
                std::process::abort();
            }
        }
    }
}

/// Aborts right after the coordinator's commit of the n-th epoch that also
/// writes on another shard, before any other shard commits it.
static BETWEEN_SHARD_COMMITS: Failpoint = Failpoint::new(
    "ROCKSTREAM_FAILPOINT_BETWEEN_SHARD_COMMITS",
    "between the coordinator's commit and the others'",
);

/// A commit into a table dropped after the session planned it (40001, as
/// any write that lost a race with another transaction).
fn dropped_meanwhile(table_name: &str) -> RsError {
    RsError::new(
        &codes::OPTIMISTIC_CONFLICT,
        format!("table \"{table_name}\" was dropped while the transaction wrote to it"),
    )
}

fn failpoint_between_shard_commits() {
    BETWEEN_SHARD_COMMITS.pass();
}

/// Whether `error` leaves the engine unable to go on without reopening its
/// storage ([`recovery`]): storage failed, or an epoch is committed on some
/// shards only (reopening completes it).
fn stops_the_engine(error: &RsError) -> bool {
    error.is_storage_failure()
        || error.code == &codes::COMMIT_DURABLE_UNPUBLISHED
        || error.code == &codes::COMMIT_OUTCOME_UNKNOWN
}

/// When a view stepped on every shard next needs a step without input.
pub(super) fn earliest_wake(stepped: &[Stepped]) -> Option<i64> {
    stepped.iter().filter_map(|(_, _, wake_at)| *wake_at).min()
}

/// The steps of one view on every shard: all their outputs and writes, or
/// the first cause of their failure (its peers then fail too); `Err` when
/// storage failed.
pub(super) fn split_steps(results: Vec<StepResult>) -> RsResult<Result<Vec<Stepped>, RsError>> {
    let mut stepped = Vec::with_capacity(results.len());
    let mut errors = Vec::new();
    for result in results {
        match result {
            Ok(step) => stepped.push(step),
            Err(error) if error.is_storage_failure() => return Err(error),
            Err(error) => errors.push(error),
        }
    }
    Ok(match first_cause(errors) {
        Some(error) => Err(error),
        None => Ok(stepped),
    })
}

/// A transaction's changes split by the shard that holds each row (by
/// shard id), with each row's storage key.
fn split_by_shard(changes: Vec<TableChange>, map: &BucketMap) -> Vec<ShardChanges> {
    let shards = usize::from(map.shard_count());
    let mut parts: Vec<Vec<TableChange>> = (0..shards).map(|_| Vec::new()).collect();
    if shards == 1 {
        parts[0] = changes;
    } else {
        for change in changes {
            let mut rows: Vec<Vec<_>> = (0..shards).map(|_| Vec::new()).collect();
            for row in change.rows {
                rows[usize::from(map.shard_of(&row.key))].push(row);
            }
            for (part, rows) in parts.iter_mut().zip(rows) {
                if !rows.is_empty() {
                    part.push(TableChange {
                        table_id: change.table_id,
                        table_name: change.table_name.clone(),
                        rows,
                        indexes: Vec::new(),
                        watermark: None,
                        primary_key: change.primary_key.clone(),
                    });
                }
            }
        }
    }
    parts
        .into_iter()
        .map(|changes| {
            let keys = stored_keys(&changes);
            (changes, keys)
        })
        .collect()
}

/// Every key prefix a materialized view's state lives under: its held-back
/// input, installed marker, output and operator state.
fn view_prefixes(view_id: ObjectId) -> Vec<Vec<u8>> {
    let mut prefixes = vec![
        keys::pending_prefix(view_id),
        backfill::installed_marker(view_id),
    ];
    prefixes.extend(keys::view_output_prefixes(view_id));
    prefixes.extend(keys::view_op_prefixes(view_id));
    prefixes
}

/// Checks that every row a transaction changes is still as the transaction
/// read it (absent for an insert). Reads only: a refused transaction leaves
/// no trace.
async fn validate_table_changes<S: StateStore>(
    store: &mut S,
    changes: &[TableChange],
    keys: &[Vec<Vec<u8>>],
) -> RsResult<()> {
    for (change, keys) in changes.iter().zip(keys) {
        let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let current = store.get_many(&key_refs).await?;
        for (row, current) in change.rows.iter().zip(current) {
            let unchanged = match (&row.old, &current) {
                (None, None) => true,
                (Some(old), Some(stored)) => encode_row(old) == *stored,
                _ => false,
            };
            if unchanged {
                continue;
            }
            return Err(if row.old.is_none() {
                duplicate_key(change, row.new.as_ref())
            } else {
                RsError::new(
                    &codes::OPTIMISTIC_CONFLICT,
                    format!(
                        "a row of table \"{}\" was changed by a concurrent transaction",
                        change.table_name
                    ),
                )
            });
        }
    }
    Ok(())
}

/// The error for a row `change` inserts whose key is stored: its key's
/// values named when the commit attached the table's primary key.
fn duplicate_key(change: &TableChange, row: Option<&Row>) -> RsError {
    let key: Vec<(&str, String)> = match row {
        Some(row) => change
            .primary_key
            .iter()
            .filter_map(|(position, name)| Some((name.as_str(), row.get(*position)?.to_string())))
            .collect(),
        None => Vec::new(),
    };
    // A key partly named would mislead: all of it or none.
    let complete = key.len() == change.primary_key.len();
    RsError::primary_key_violation(&change.table_name, if complete { &key } else { &[] })
}

/// The storage key of every changed row, per table change.
fn stored_keys(changes: &[TableChange]) -> Vec<Vec<Vec<u8>>> {
    changes
        .iter()
        .map(|change| {
            change
                .rows
                .iter()
                .map(|row| keys::table_row_storage_key(change.table_id, &row.key))
                .collect()
        })
        .collect()
}

/// Writes a validated transaction's rows under `keys` (from
/// [`stored_keys`]); returns the table deltas.
fn apply_table_changes<S: StateStore>(
    store: &mut S,
    changes: Vec<TableChange>,
    keys: Vec<Vec<Vec<u8>>>,
) -> Vec<(ObjectId, ZSet)> {
    let mut deltas = Vec::with_capacity(changes.len());
    for (change, keys) in changes.into_iter().zip(keys) {
        let mut delta = ZSet::new();
        for (row, key) in change.rows.into_iter().zip(keys) {
            match &row.new {
                Some(new) => store.put(key, encode_row(new)),
                None => store.delete(key),
            }
            if let Some(old) = row.old {
                delta.push(old, -1);
            }
            if let Some(new) = row.new {
                delta.push(new, 1);
            }
        }
        deltas.push((change.table_id, delta));
    }
    deltas
}

/// Writes a view's output delta in the view's layout.
fn apply_view_output<S: StateStore>(store: &mut S, view: &InstallView, output: &ZSet) {
    let prefix = view.output.prefix(view.view_id);
    let RowStorage::Keyed(key_columns) = &view.output else {
        for (row, weight) in &output.updates {
            let mut key = prefix.clone();
            encode_row_into(row, &mut key);
            store.add_count(key, *weight);
        }
        return;
    };
    // A changed row arrives as the old row retracted and the new one added,
    // both under one key: retractions first, so the new row wins.
    let key_of = |row: &Row| {
        let mut key = prefix.clone();
        for column in key_columns {
            encode_datum(&row[*column], &mut key);
        }
        key
    };
    for (row, weight) in &output.updates {
        debug_assert!(weight.abs() == 1, "a keyed view row with weight {weight}");
        if *weight < 0 {
            store.delete(key_of(row));
        }
    }
    for (row, weight) in &output.updates {
        if *weight > 0 {
            store.put(key_of(row), encode_row(row));
        }
    }
}

/// A failed view's input for a retry: the epoch's deltas of its sources
/// plus the input it holds back.
async fn inputs_with_pending(
    store: &EpochStore,
    view: &InstallView,
    deltas: &HashMap<ObjectId, ZSet>,
) -> RsResult<HashMap<ObjectId, ZSet>> {
    let mut merged: HashMap<ObjectId, ZSet> = view
        .sources
        .iter()
        .filter_map(|source| deltas.get(source).map(|delta| (*source, delta.clone())))
        .collect();
    for (source, pending) in load_pending(store, view.view_id).await? {
        merged.entry(source).or_default().extend(pending);
    }
    for delta in merged.values_mut() {
        *delta = std::mem::take(delta).consolidate();
    }
    Ok(merged)
}

async fn load_pending<S: StateRead>(
    store: &S,
    view_id: ObjectId,
) -> RsResult<HashMap<ObjectId, ZSet>> {
    let prefix = keys::pending_prefix(view_id);
    let mut pending: HashMap<ObjectId, ZSet> = HashMap::new();
    for (key, value) in store
        .scan_prefix(&prefix, ScanOrder::Ascending, usize::MAX)
        .await?
    {
        let rest = &key[prefix.len()..];
        let source_bytes: [u8; 16] = rest
            .get(..16)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| RsError::internal("corrupt pending key"))?;
        let source = ObjectId::from_be_bytes(source_bytes);
        pending
            .entry(source)
            .or_default()
            .push(decode_row(&rest[16..])?, decode_weight(&value));
    }
    Ok(pending)
}

async fn clear_pending<S: StateStore>(store: &mut S, view_id: ObjectId) -> RsResult<()> {
    let prefix = keys::pending_prefix(view_id);
    for (key, _) in store
        .scan_prefix(&prefix, ScanOrder::Ascending, usize::MAX)
        .await?
    {
        store.delete(key);
    }
    Ok(())
}

fn pending_key(view_id: ObjectId, source: ObjectId, row: &Row) -> Vec<u8> {
    let mut key = keys::pending_prefix(view_id);
    key.extend_from_slice(&source.to_be_bytes());
    encode_row_into(row, &mut key);
    key
}

fn write_pending<S: StateStore>(
    store: &mut S,
    view_id: ObjectId,
    sources: &[ObjectId],
    inputs: &HashMap<ObjectId, ZSet>,
) {
    for (source, delta) in inputs.iter().filter(|(id, _)| sources.contains(id)) {
        for (row, weight) in &delta.clone().consolidate().updates {
            store.put(pending_key(view_id, *source, row), encode_weight(*weight));
        }
    }
}

/// The message a panic was raised with, when it is text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

#[cfg(test)]
mod tests {
    //! Goal: deletion turns settle at the length they aim for, within
    //! bounds. Method: the chunk rule over turns of given lengths.
    use super::*;

    #[test]
    fn deletion_turns_shrink_when_long_and_grow_when_short_within_bounds() {
        assert_eq!(next_delete_chunk(1024, DELETE_TURN_MICROS * 3), 512);
        assert_eq!(next_delete_chunk(1024, DELETE_TURN_MICROS / 4), 2048);
        assert_eq!(next_delete_chunk(1024, DELETE_TURN_MICROS * 3 / 4), 1024);
        assert_eq!(
            next_delete_chunk(DELETE_CHUNK_KEYS_MIN, i64::MAX),
            DELETE_CHUNK_KEYS_MIN
        );
        assert_eq!(
            next_delete_chunk(DELETE_CHUNK_KEYS_MAX, 0),
            DELETE_CHUNK_KEYS_MAX
        );
    }
}
