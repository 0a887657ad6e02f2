//! The engine task: groups commands into epochs and commits each atomically.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, RwLock};

use futures::FutureExt;

use rockstream_common::Runtime;

use rockstream_ops::keys::{self, decode_weight, encode_weight, RowStorage};
use rockstream_ops::{OverlayStore, ScanOrder, StateRead, StateStore, Write};
use rockstream_storage::{EpochStore, ShardDb};
use rockstream_types::encoding::{decode_row, encode_datum, encode_row, encode_row_into};
use rockstream_types::{codes, Epoch, ObjectId, Row, RsError, RsResult, ZSet};
use tokio::sync::{mpsc, oneshot, watch};

use crate::engine::{
    Command, InstallView, Published, TableChange, ViewStatus, EPOCH_COMMITS_MAX,
    MEMTABLE_FLUSH_EPOCHS, MEMTABLE_FLUSH_INTERVAL_MICROS, PARALLEL_STEP_ROWS_MIN,
};

mod backfill;
mod reclaim;

pub use backfill::installed_marker;

use backfill::Phase;
use reclaim::Reclaim;

type Reply<T = Epoch> = oneshot::Sender<RsResult<T>>;

struct Installed {
    view: InstallView,
    /// Why its last step failed, while it holds its input back.
    failed: Option<RsError>,
    phase: Phase,
    /// Told when its build ends (taken then).
    built: Option<Reply<()>>,
}

/// A view's step over a shared epoch store: its output and its writes, not
/// yet applied.
type StepResult = RsResult<(ZSet, BTreeMap<Vec<u8>, Write>)>;

pub(crate) struct EpochLoop {
    runtime: Runtime,
    shard: ShardDb,
    epoch: Epoch,
    published: watch::Sender<Published>,
    statuses: Arc<RwLock<HashMap<ObjectId, ViewStatus>>>,
    /// Installed views in dependency order (a view after its sources).
    views: Vec<Installed>,
    /// The epoch and time (µs) of the last memtable flush the engine
    /// requested, and that flush while it runs.
    flushed_at: (Epoch, i64),
    flushing: Option<tokio::task::JoinHandle<RsResult<()>>>,
    /// Dropped objects whose keys are still being deleted, oldest first.
    reclaims: Vec<Reclaim>,
    /// How many, for [`crate::Engine::reclaims_pending`].
    reclaiming: Arc<AtomicUsize>,
}

impl EpochLoop {
    pub fn new(
        runtime: Runtime,
        shard: ShardDb,
        epoch: Epoch,
        published: watch::Sender<Published>,
        statuses: Arc<RwLock<HashMap<ObjectId, ViewStatus>>>,
        reclaiming: Arc<AtomicUsize>,
    ) -> Self {
        EpochLoop {
            runtime,
            shard,
            epoch,
            published,
            statuses,
            views: Vec::new(),
            flushed_at: (epoch, 0),
            flushing: None,
            reclaims: Vec::new(),
            reclaiming,
        }
    }

    /// Serves commands until every handle is gone. While a view is being
    /// built or a dropped object's keys deleted, commands and bounded steps
    /// of that work take turns: a commit waits for at most one step, and a
    /// busy commit stream cannot starve the background work.
    pub async fn run(mut self, mut receiver: mpsc::Receiver<Command>) {
        if let Err(error) = self.resume_reclaims().await {
            tracing::error!(%error, "engine stopped after a storage failure");
            let _ = self.shard.close().await;
            return;
        }
        let mut deferred: Option<Command> = None;
        // Set when background work is pending but none of it can move (a
        // bug: every waiting build waits on one that can): the loop then
        // waits for a command instead of spinning.
        let mut stalled = false;
        loop {
            let building = self.has_background_work() && !stalled;
            let command = match deferred.take() {
                Some(command) => Some(command),
                None if building => match receiver.try_recv() {
                    Ok(command) => Some(command),
                    Err(mpsc::error::TryRecvError::Empty) => None,
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                },
                None => match receiver.recv().await {
                    Some(command) => Some(command),
                    None => break,
                },
            };
            if command.is_some() {
                stalled = false;
            }
            let result = match command {
                Some(command) => self.serve(command, &mut receiver, &mut deferred).await,
                None => Ok(()),
            };
            let result = match result {
                Ok(()) if building => self.background_turn().await.map(|worked| {
                    if !worked && !stalled {
                        tracing::error!("background work is pending but none of it can proceed");
                    }
                    stalled = !worked;
                }),
                other => other,
            };
            if let Err(error) = result {
                tracing::error!(%error, "engine stopped after a storage failure");
                break;
            }
        }
        let _ = self.shard.close().await;
    }

    /// Serves one command; a commit takes every commit queued behind it
    /// into its epoch, up to [`EPOCH_COMMITS_MAX`], and leaves the first
    /// other command in `deferred`. `Err`: a storage failure, after which
    /// the engine stops.
    async fn serve(
        &mut self,
        command: Command,
        receiver: &mut mpsc::Receiver<Command>,
        deferred: &mut Option<Command>,
    ) -> RsResult<()> {
        match command {
            Command::Commit { changes, reply } => {
                let mut commits = vec![(changes, reply)];
                while commits.len() < EPOCH_COMMITS_MAX {
                    match receiver.try_recv() {
                        Ok(Command::Commit { changes, reply }) => commits.push((changes, reply)),
                        Ok(other) => {
                            *deferred = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let result = self.run_commits(commits).await;
                if result.is_ok() {
                    self.maybe_flush_memtable().await;
                }
                result
            }
            Command::Install {
                view,
                registered,
                built,
            } => {
                let result = self.install(*view, built).await;
                let fatal = matches!(&result, Err(error) if error.code == &codes::STORAGE_IO);
                let _ = registered.send(result);
                if fatal {
                    Err(RsError::new(&codes::STORAGE_IO, "install failed"))
                } else {
                    Ok(())
                }
            }
            Command::Drop { object_id, reply } => {
                let result = self.drop_object(object_id).await;
                let fatal = result.is_err();
                let _ = reply.send(result);
                if fatal {
                    Err(RsError::new(&codes::STORAGE_IO, "drop failed"))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Starts a memtable flush on a task of its own once enough epochs and
    /// time have passed and the previous one has finished; epochs go on
    /// meanwhile.
    async fn maybe_flush_memtable(&mut self) {
        let (epoch, micros) = self.flushed_at;
        let now = self.runtime.now_micros();
        if self.epoch < epoch + MEMTABLE_FLUSH_EPOCHS
            || now < micros + MEMTABLE_FLUSH_INTERVAL_MICROS
            || self
                .flushing
                .as_ref()
                .is_some_and(|flush| !flush.is_finished())
        {
            return;
        }
        if let Some(finished) = self.flushing.take() {
            match finished.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%error, "memtable flush failed"),
                Err(error) => tracing::warn!(%error, "memtable flush task failed"),
            }
        }
        self.flushed_at = (self.epoch, now);
        self.flushing = Some(self.runtime.spawn(self.shard.flush_memtable()));
    }

    async fn run_commits(&mut self, commits: Vec<(Vec<TableChange>, Reply)>) -> RsResult<()> {
        let mut store = EpochStore::new(self.shard.snapshot()?);
        let mut accepted: Vec<Reply> = Vec::new();
        let mut deltas: HashMap<ObjectId, ZSet> = HashMap::new();
        for (changes, reply) in commits {
            let keys = stored_keys(&changes);
            match validate_table_changes(&mut store, &changes, &keys).await {
                Ok(()) => {
                    for (table_id, delta) in apply_table_changes(&mut store, changes, keys) {
                        deltas.entry(table_id).or_default().extend(delta);
                    }
                    accepted.push(reply);
                }
                Err(error) => {
                    let _ = reply.send(Err(error));
                }
            }
        }
        if accepted.is_empty() {
            return Ok(());
        }
        let deltas = deltas
            .into_iter()
            .map(|(id, delta)| (id, delta.consolidate()))
            .collect();
        let store = match self.propagate(store, deltas).await {
            Ok(store) => store,
            Err(error) => {
                for reply in accepted {
                    let _ = reply.send(Err(error.clone()));
                }
                return Err(error);
            }
        };
        match self.commit_epoch(store).await {
            Ok(epoch) => {
                for reply in accepted {
                    let _ = reply.send(Ok(epoch));
                }
                Ok(())
            }
            Err(error) => {
                for reply in accepted {
                    let _ = reply.send(Err(error.clone()));
                }
                Err(error)
            }
        }
    }

    async fn commit_epoch(&mut self, store: EpochStore) -> RsResult<Epoch> {
        let epoch = self.epoch + 1;
        self.shard.commit(epoch, store.into_writes()).await?;
        self.epoch = epoch;
        let snapshot = self.shard.snapshot()?;
        self.published.send_replace(Published { epoch, snapshot });
        Ok(epoch)
    }

    /// Runs every view with input in dependency order; each view's output
    /// becomes input of the views reading it. Views are stepped in waves of
    /// views that do not read one another, concurrently when the epoch is
    /// large enough to be worth a task each.
    ///
    /// A view being built is not stepped: its sources' deltas join its
    /// pending input, which its build steps once it has read its pinned
    /// snapshot. A view whose build has not begun ignores them (the snapshot
    /// it pins later holds them), and so does one whose build failed.
    async fn propagate(
        &mut self,
        mut store: EpochStore,
        mut deltas: HashMap<ObjectId, ZSet>,
    ) -> RsResult<EpochStore> {
        let mut next = 0;
        while next < self.views.len() {
            let mut wave = Vec::new();
            let mut wave_outputs = Vec::new();
            while let Some(installed) = self.views.get(next) {
                let sources = &installed.view.sources;
                if sources.iter().any(|source| wave_outputs.contains(source)) {
                    break;
                }
                let has_input = sources
                    .iter()
                    .any(|source| deltas.get(source).is_some_and(|d| !d.is_empty()));
                match installed.phase {
                    Phase::Maintained if has_input => {
                        wave.push(next);
                        wave_outputs.push(installed.view.view_id);
                    }
                    Phase::Building(_) if has_input => {
                        add_pending(&mut store, installed.view.view_id, sources, &deltas);
                    }
                    _ => {}
                }
                next += 1;
            }
            store = self.step_wave(store, &wave, &mut deltas).await?;
        }
        Ok(store)
    }

    /// Steps views that do not read one another over the same epoch state,
    /// then applies their writes in order; each healthy view's output joins
    /// `deltas`. A view that fails keeps its input for a later retry.
    async fn step_wave(
        &mut self,
        mut store: EpochStore,
        wave: &[usize],
        deltas: &mut HashMap<ObjectId, ZSet>,
    ) -> RsResult<EpochStore> {
        // A failed view retries its held-back input along with the new.
        let mut own_inputs: Vec<Option<Arc<HashMap<ObjectId, ZSet>>>> = Vec::new();
        for &index in wave {
            own_inputs.push(match self.views[index].failed {
                Some(_) => Some(Arc::new(
                    inputs_with_pending(&store, &self.views[index].view, deltas).await?,
                )),
                None => None,
            });
        }
        let input_rows: usize = deltas.values().map(ZSet::len).sum();
        let results = if wave.len() > 1 && input_rows >= PARALLEL_STEP_ROWS_MIN {
            let shared_store = Arc::new(store);
            let shared_deltas = Arc::new(std::mem::take(deltas));
            let tasks: Vec<_> = wave
                .iter()
                .zip(&own_inputs)
                .map(|(&index, own)| {
                    let dataflow = Arc::clone(&self.views[index].view.dataflow);
                    let base = Arc::clone(&shared_store);
                    let inputs = Arc::clone(own.as_ref().unwrap_or(&shared_deltas));
                    self.runtime.spawn(async move {
                        let mut layer = OverlayStore::new(base);
                        let output = dataflow.step(&mut layer, &inputs, false).await?;
                        Ok((output, layer.into_writes()))
                    })
                })
                .collect();
            let mut results: Vec<StepResult> = Vec::with_capacity(tasks.len());
            for task in tasks {
                results.push(task.await.unwrap_or_else(|error| {
                    Err(RsError::internal(format!("a view step panicked: {error}")))
                }));
            }
            let unshared = || RsError::internal("a view step outlived its wave");
            store = Arc::try_unwrap(shared_store).map_err(|_| unshared())?;
            *deltas = Arc::try_unwrap(shared_deltas).map_err(|_| unshared())?;
            results
        } else {
            let mut results = Vec::with_capacity(wave.len());
            for (&index, own) in wave.iter().zip(&own_inputs) {
                let inputs = own.as_deref().unwrap_or(deltas);
                let mut layer = OverlayStore::new(&store);
                let step = self.views[index]
                    .view
                    .dataflow
                    .step(&mut layer, inputs, false);
                // A bug in one view fails that view, as on the parallel
                // path, rather than the epoch task and every later commit;
                // its writes stay in the discarded layer.
                let stepped = AssertUnwindSafe(step)
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|panic| {
                        Err(RsError::internal(format!(
                            "a view step panicked: {}",
                            panic_message(panic.as_ref())
                        )))
                    });
                results.push(stepped.map(|output| (output, layer.into_writes())));
            }
            results
        };
        for ((&index, own), result) in wave.iter().zip(&own_inputs).zip(results) {
            let inputs = own.as_deref().unwrap_or(deltas);
            if let Some(output) = self.finish_step(&mut store, index, result, inputs).await? {
                deltas.insert(self.views[index].view.view_id, output);
            }
        }
        Ok(store)
    }

    /// Applies a view's step: its writes and output on success; on failure
    /// (other than storage), records the error and holds `inputs` back.
    /// `Ok(None)`: the view failed.
    async fn finish_step(
        &mut self,
        store: &mut EpochStore,
        index: usize,
        result: StepResult,
        inputs: &HashMap<ObjectId, ZSet>,
    ) -> RsResult<Option<ZSet>> {
        let view_id = self.views[index].view.view_id;
        match result {
            Ok((output, writes)) => {
                store.absorb(writes);
                apply_view_output(store, &self.views[index].view, &output);
                if self.views[index].failed.is_some() {
                    clear_pending(store, view_id).await?;
                }
                self.set_failed(index, None);
                Ok(Some(output))
            }
            Err(error) if error.code == &codes::STORAGE_IO => Err(error),
            Err(error) => {
                tracing::warn!(view = %self.views[index].view.name, %error, "view failed; holding its input until it heals");
                clear_pending(store, view_id).await?;
                write_pending(store, view_id, &self.views[index].view.sources, inputs);
                self.set_failed(index, Some(error));
                Ok(None)
            }
        }
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
        let snapshot = self.shard.snapshot()?;
        let already_installed = snapshot
            .get(&backfill::installed_marker(view.view_id))
            .await?
            .is_some();
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
                    stale: view_prefixes(view_id),
                },
                built: Some(built),
            });
            return Ok(());
        }
        self.views.push(Installed {
            view,
            failed: None,
            phase: Phase::Maintained,
            built: None,
        });
        let index = self.views.len() - 1;
        let store = EpochStore::new(snapshot);
        let has_pending = !store
            .scan_prefix(&keys::pending_prefix(view_id), ScanOrder::Ascending, 1)
            .await?
            .is_empty();
        if has_pending {
            // Re-derive the failure (or heal) by retrying the pending input.
            self.views[index].failed = Some(RsError::internal("pending"));
            let store = self.step_wave(store, &[index], &mut HashMap::new()).await?;
            self.commit_epoch(store).await?;
        }
        let _ = built.send(Ok(()));
        Ok(())
    }

    /// Deletes one bounded chunk of the keys under `prefix` in an epoch of
    /// its own; false once none is left.
    async fn delete_chunk(&mut self, prefix: &[u8]) -> RsResult<bool> {
        let snapshot = self.shard.snapshot()?;
        let chunk = snapshot.scan_chunk(prefix, None).await?;
        if chunk.is_empty() {
            return Ok(false);
        }
        let mut store = EpochStore::new(snapshot);
        for (key, _) in chunk {
            store.delete(key);
        }
        self.commit_epoch(store).await?;
        Ok(true)
    }
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
                RsError::new(
                    &codes::UNIQUE_VIOLATION,
                    format!(
                        "duplicate key value violates the primary key of table \"{}\"",
                        change.table_name
                    ),
                )
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

/// The storage key of every changed row, per table change.
fn stored_keys(changes: &[TableChange]) -> Vec<Vec<Vec<u8>>> {
    changes
        .iter()
        .map(|change| {
            let prefix = keys::table_prefix(change.table_id);
            change
                .rows
                .iter()
                .map(|row| [prefix.as_slice(), row.key.as_slice()].concat())
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

/// Adds the deltas of a view's sources to its pending input, blindly.
fn add_pending<S: StateStore>(
    store: &mut S,
    view_id: ObjectId,
    sources: &[ObjectId],
    deltas: &HashMap<ObjectId, ZSet>,
) {
    for source in sources {
        let Some(delta) = deltas.get(source) else {
            continue;
        };
        for (row, weight) in &delta.updates {
            store.add_count(pending_key(view_id, *source, row), *weight);
        }
    }
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
