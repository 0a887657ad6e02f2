//! The engine handle and its command queue.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use rockstream_common::Runtime;
use rockstream_ops::keys::{self, RowStorage};
use rockstream_ops::{Dataflow, Write};
use rockstream_storage::{CacheStats, ShardDb, SnapshotSet, StateCache};
use rockstream_types::partition::BucketMap;
use rockstream_types::{codes, Epoch, ObjectId, Row, RsError, RsResult};
use tokio::sync::{mpsc, oneshot, watch};

use crate::epoch::{repair, EpochLoop, Start};

/// Bound on commands waiting for the engine; writers wait beyond it.
pub const COMMAND_QUEUE_MAX: usize = 1024;
/// Bound on commits grouped into one epoch.
pub const EPOCH_COMMITS_MAX: usize = 512;
/// Source rows a new view's backfill feeds through its dataflow per epoch:
/// bounds what a backfill holds in memory, however large its sources are,
/// and how long a commit arriving meanwhile waits for the engine (one such
/// step, tens of milliseconds).
pub const BACKFILL_EPOCH_ROWS: usize = 8_192;

/// Epochs between two memtable flushes requested by the engine (SlateDB
/// also flushes a memtable when it reaches its size). Many small epochs
/// overwrite the same keys (an aggregate view's row, a hot table row); the
/// memtable keeps every version, and each scan over such a key steps
/// through them all until a flush keeps only the newest.
pub const MEMTABLE_FLUSH_EPOCHS: u64 = 256;
/// Least time between two engine-requested memtable flushes. Every flush
/// adds an L0 table; SlateDB holds further flushes back once 8 wait for a
/// compaction (its compactor looks every 5 s), so flushing at the pace of a
/// busy small-commit workload would stall.
pub const MEMTABLE_FLUSH_INTERVAL_MICROS: i64 = 2_000_000;
/// Input rows from which an epoch steps independent views on concurrent
/// tasks; below it a task per view costs more than it saves.
pub const PARALLEL_STEP_ROWS_MIN: usize = 1024;

/// One row's change in a table: the row as the writer read it (`old`) and
/// as it should become (`new`). The engine refuses the commit if the stored
/// row is no longer `old`.
#[derive(Debug, Clone)]
pub struct RowChange {
    pub key: Vec<u8>,
    pub old: Option<Row>,
    pub new: Option<Row>,
}

/// A transaction's changes to one table.
#[derive(Debug, Clone)]
pub struct TableChange {
    pub table_id: ObjectId,
    pub table_name: String,
    pub rows: Vec<RowChange>,
    /// The table's indexes besides its primary key's, whose entries the
    /// commit maintains, checking the unique ones (RFC 0006, RFC 0014).
    pub indexes: Vec<MaintainedIndex>,
    /// The table's event-time watermark, if it declares one (RFC 0013):
    /// the commit drops and counts its late rows.
    pub watermark: Option<EventTime>,
    /// The primary key's columns (positions in the rows a change writes,
    /// and names), for a duplicate key's detail; empty for a table without
    /// one, and until the commit attaches it.
    pub primary_key: Vec<(usize, String)>,
}

/// A table's `WATERMARK FOR column AS column - delay` as a commit applies
/// it (RFC 0013): a row whose `column` is below the table's watermark is
/// late. The watermark is `max(column) - delay` over the rows admitted
/// before the epoch (or, for a staged commit, before the commit began).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTime {
    /// The column's position in the rows the change writes.
    pub column: usize,
    pub delay_micros: i64,
    /// For the steps of a staged commit: the watermark it began at, which
    /// judges all its rows alike (recorded in its marker), and whether the
    /// step undoes rows (dropped when their insert was, uncounted again).
    pub staged: Option<StagedJudgement>,
}

/// See [`EventTime::staged`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagedJudgement {
    pub began_at: TableWatermark,
    pub undo: bool,
}

/// What a commit did: the epoch that holds it, and per table it wrote to
/// (by name) the rows it dropped as late (RFC 0013), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub epoch: Epoch,
    pub late_rows: LateRows,
}

/// Per table (by name), the rows a commit dropped as late (RFC 0013).
pub type LateRows = Vec<(String, u64)>;

/// A watermarked table's event-time state (RFC 0013), durable on the
/// coordinator with each epoch that changes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableWatermark {
    /// `max(column) - delay` over its admitted rows; `None` before any
    /// row with a non-NULL time.
    pub watermark: Option<i64>,
    /// Rows dropped as late since the table was created.
    pub late_rows: u64,
}

/// An index as a commit maintains it: a UNIQUE constraint or unique index
/// (RFC 0006), which it also checks, or a plain index (RFC 0014).
#[derive(Debug, Clone, PartialEq)]
pub struct MaintainedIndex {
    /// Its number within the table, part of its entries' keys.
    pub id: u16,
    pub name: String,
    /// No two rows may hold equal non-NULL values in its columns.
    pub unique: bool,
    /// Its columns' positions in the rows a change writes (`new`).
    pub columns: Vec<usize>,
    /// Its columns' positions in the rows a change replaces (`old`): they
    /// differ from `columns` when the transaction rewrote the table for
    /// new columns; `None` when the transaction added the constraint, so
    /// that no stored row has an entry yet.
    pub old_columns: Option<Vec<usize>>,
    /// Its columns' names, for a violation's detail.
    pub column_names: Vec<String>,
}

/// A dataflow to install for a materialized view.
#[derive(Clone)]
pub struct InstallView {
    pub view_id: ObjectId,
    pub name: String,
    pub dataflow: Arc<Dataflow>,
    pub sources: Vec<ObjectId>,
    /// How each source's rows are stored (read when backfilling).
    pub source_storage: Vec<RowStorage>,
    /// How this view's output is stored: counted, or keyed by its unique key.
    pub output: RowStorage,
}

/// What a reader needs to know about a view.
#[derive(Debug, Clone, PartialEq)]
pub enum ViewStatus {
    Healthy,
    /// Its backfill is running: its output is incomplete. `rows_done` of its
    /// sources' rows have gone through its dataflow so far.
    Building {
        rows_done: u64,
    },
    Failed(RsError),
}

impl ViewStatus {
    /// Whether the view's stored output is complete (PostgreSQL's
    /// `pg_matviews.ispopulated`): not while it is built, nor after its
    /// build failed. A view failing on a later change keeps its output.
    pub fn is_populated(&self) -> bool {
        match self {
            ViewStatus::Healthy => true,
            ViewStatus::Building { .. } => false,
            ViewStatus::Failed(error) => error.code != &codes::VIEW_BACKFILL_FAILED,
        }
    }
}

/// The last catalog transaction shard 0 (the coordinator) records as
/// committed, 0 if none ([`Engine::commit_ddl_transaction`]).
pub(crate) async fn read_ddl_transaction(coordinator: &ShardDb) -> RsResult<u64> {
    let stored = coordinator
        .snapshot()?
        .get(&keys::ddl_transaction_key())
        .await?;
    match stored {
        None => Ok(0),
        Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
            .map(u64::from_be_bytes)
            .map_err(|_| RsError::internal("corrupt catalog transaction record")),
    }
}

/// What one commit asks of an epoch.
pub(crate) struct CommitRequest {
    pub changes: Vec<TableChange>,
    /// Writes to the coordinator's own keys in the same epoch (a staged
    /// commit's progress marker, RFC 0007).
    pub coordinator_writes: Vec<(Vec<u8>, Write)>,
    /// A transaction that also changed the catalog: its id is recorded on
    /// the coordinator in the same epoch ([`keys::ddl_transaction_key`]),
    /// which makes the epoch its commit point (RFC 0002).
    pub ddl_transaction: Option<u64>,
}

pub(crate) enum Command {
    Commit {
        request: CommitRequest,
        reply: oneshot::Sender<RsResult<Committed>>,
    },
    Install {
        view: Box<InstallView>,
        /// Told once the engine has taken the view on (it then steps or
        /// builds it in every later epoch).
        registered: oneshot::Sender<RsResult<()>>,
        /// Told once the view is complete, or its build failed.
        built: oneshot::Sender<RsResult<()>>,
    },
    Drop {
        object_ids: Vec<ObjectId>,
        reply: oneshot::Sender<RsResult<()>>,
    },
    /// Stages one segment of a large transaction's rows (RFC 0007).
    Stage {
        transaction: u64,
        segment: u32,
        rows: Vec<(Vec<u8>, Row)>,
        reply: oneshot::Sender<RsResult<()>>,
    },
    /// Commits a transaction's staged rows in steps, published together.
    CommitStaged {
        transaction: u64,
        table: StagedTable,
        reply: oneshot::Sender<RsResult<Epoch>>,
    },
    /// Completes the staged commits a crash interrupted, once every view
    /// is installed.
    FinishStaged {
        reply: oneshot::Sender<RsResult<()>>,
    },
}

/// The table a staged transaction inserts into and how many segments of
/// rows it staged: its rows are in the staging keys, not here.
#[derive(Debug, Clone)]
pub struct StagedTable {
    /// The table's change, with no rows: its id, name and UNIQUE
    /// constraints.
    pub change: TableChange,
    pub segments: u32,
    /// Rows per step of its commit: as many as its largest segment held
    /// (what the session was allowed to hold), within the engine's bounds.
    pub step_rows: u32,
}

/// The state readers see: every shard at the last durable epoch.
#[derive(Clone)]
pub struct Published {
    pub epoch: Epoch,
    pub snapshot: SnapshotSet,
    /// The newest catalog transaction committed at this epoch (0: none):
    /// readers see the catalog as of it, so a transaction's objects appear
    /// together with its rows (RFC 0002).
    pub ddl_transaction: u64,
    /// Each watermarked table's watermark and late rows at this epoch.
    pub watermarks: Arc<BTreeMap<ObjectId, TableWatermark>>,
}

/// Handle to the engine task, which owns every shard.
#[derive(Clone)]
pub struct Engine {
    shards: u16,
    commands: mpsc::Sender<Command>,
    published: watch::Receiver<Published>,
    statuses: Arc<RwLock<HashMap<ObjectId, ViewStatus>>>,
    reclaiming: Arc<AtomicUsize>,
    /// Transactions whose staged rows are to be deleted
    /// ([`Engine::discard_staged`]).
    discarded: Arc<std::sync::Mutex<Vec<u64>>>,
    /// Every shard's arrangement cache, for its counters.
    caches: Vec<Arc<StateCache>>,
}

impl Engine {
    /// Starts the engine over the opened shards of a storage (by shard id)
    /// and its bucket map; first completes the last epoch on any shard a
    /// crash left behind the coordinator.
    pub async fn start(
        runtime: &Runtime,
        shards: Vec<ShardDb>,
        map: Arc<BucketMap>,
    ) -> RsResult<Engine> {
        if shards.len() != usize::from(map.shard_count()) {
            return Err(RsError::internal(format!(
                "{} shards opened for a bucket map of {}",
                shards.len(),
                map.shard_count()
            )));
        }
        let logged = repair(&shards).await?;
        let caches = shards.iter().map(ShardDb::cache).collect();
        let shard_count = map.shard_count();
        let epoch = shards[0].committed_epoch().await?;
        let snapshots = shards
            .iter()
            .map(ShardDb::snapshot)
            .collect::<RsResult<Vec<_>>>()?;
        let snapshot = SnapshotSet::new(snapshots, map.clone())?;
        let ddl_transaction = read_ddl_transaction(&shards[0]).await?;
        let watermarks = crate::epoch::read_watermarks(&shards[0]).await?;
        let (published_sender, published) = watch::channel(Published {
            epoch,
            snapshot,
            ddl_transaction,
            watermarks: Arc::new(watermarks.clone()),
        });
        let (commands, receiver) = mpsc::channel(COMMAND_QUEUE_MAX);
        let statuses = Arc::new(RwLock::new(HashMap::new()));
        let reclaiming = Arc::new(AtomicUsize::new(0));
        let discarded = Arc::new(std::sync::Mutex::new(Vec::new()));
        let epoch_loop = EpochLoop::new(
            runtime.clone(),
            Start {
                shards,
                map,
                epoch,
                logged,
                ddl_transaction,
                watermarks,
                discarded: discarded.clone(),
            },
            published_sender,
            statuses.clone(),
            reclaiming.clone(),
        );
        runtime.spawn(epoch_loop.run(receiver));
        Ok(Engine {
            shards: shard_count,
            commands,
            published,
            statuses,
            reclaiming,
            discarded,
            caches,
        })
    }

    /// The arrangement caches' counters, summed over the shards.
    pub fn arrangement_cache_stats(&self) -> CacheStats {
        self.caches
            .iter()
            .map(|cache| cache.stats())
            .fold(CacheStats::default(), |total, shard| CacheStats {
                hits: total.hits + shard.hits,
                misses: total.misses + shard.misses,
                evictions: total.evictions + shard.evictions,
                bytes: total.bytes + shard.bytes,
                bytes_max: total.bytes_max + shard.bytes_max,
            })
    }

    /// How many shards the storage has (fixed when it was created).
    pub fn shard_count(&self) -> u16 {
        self.shards
    }

    /// The newest published (durable) state.
    pub fn published(&self) -> Published {
        self.published.borrow().clone()
    }

    /// Commits a transaction's changes; returns the epoch that holds them
    /// (and the rows it dropped as late) once they are durable and visible
    /// in every view.
    pub async fn commit(&self, changes: Vec<TableChange>) -> RsResult<Committed> {
        self.request_commit(CommitRequest {
            changes,
            coordinator_writes: Vec::new(),
            ddl_transaction: None,
        })
        .await
    }

    /// Commits the changes of catalog transaction `transaction` together
    /// with the record that it committed: the epoch is that transaction's
    /// commit point (RFC 0002). A commit that validates records nothing.
    pub async fn commit_ddl_transaction(
        &self,
        changes: Vec<TableChange>,
        transaction: u64,
    ) -> RsResult<Committed> {
        self.request_commit(CommitRequest {
            changes,
            coordinator_writes: Vec::new(),
            ddl_transaction: Some(transaction),
        })
        .await
    }

    async fn request_commit(&self, request: CommitRequest) -> RsResult<Committed> {
        let (reply, receiver) = oneshot::channel();
        self.send(Command::Commit { request, reply }).await?;
        receiver.await.map_err(|_| stopped())?
    }

    /// Installs a view's dataflow. A view without state yet (new, or whose
    /// backfill a crash cut short) is built in the background, between
    /// epochs, while commits go on; the returned [`ViewBuild`] tells when it
    /// is complete. Until then [`Engine::view_status`] says it is building.
    pub async fn install(&self, view: InstallView) -> RsResult<ViewBuild> {
        let (registered, registered_receiver) = oneshot::channel();
        let (built, built_receiver) = oneshot::channel();
        self.send(Command::Install {
            view: Box::new(view),
            registered,
            built,
        })
        .await?;
        registered_receiver.await.map_err(|_| stopped())??;
        Ok(ViewBuild {
            built: built_receiver,
        })
    }

    /// Removes tables and views' dataflows, in one epoch. Returns once that
    /// is durable; their rows, output and state are removed afterwards by
    /// compaction (resumed after a restart; RFC 0008).
    pub async fn drop_objects(&self, object_ids: Vec<ObjectId>) -> RsResult<()> {
        let (reply, receiver) = oneshot::channel();
        self.send(Command::Drop { object_ids, reply }).await?;
        receiver.await.map_err(|_| stopped())?
    }

    /// Stages `rows` (sorted by key, no key repeated), inserts of
    /// transaction `transaction` into one table, as its segment `segment`
    /// (numbered from 0): durable when this returns, read back by
    /// [`Engine::commit_staged`] (RFC 0007).
    pub async fn stage(
        &self,
        transaction: u64,
        segment: u32,
        rows: Vec<(Vec<u8>, Row)>,
    ) -> RsResult<()> {
        let (reply, receiver) = oneshot::channel();
        self.send(Command::Stage {
            transaction,
            segment,
            rows,
            reply,
        })
        .await?;
        receiver.await.map_err(|_| stopped())?
    }

    /// Commits transaction `transaction`'s staged rows into `table`: in
    /// steps of bounded size, each an epoch, published together after the
    /// last; a step that fails (a key repeated across segments, or one
    /// already stored: 23505) undoes the steps before it. Other commits
    /// wait meanwhile. A crash part way through is completed when the
    /// storage is opened again ([`Engine::finish_staged`]).
    pub async fn commit_staged(&self, transaction: u64, table: StagedTable) -> RsResult<Epoch> {
        let (reply, receiver) = oneshot::channel();
        self.send(Command::CommitStaged {
            transaction,
            table,
            reply,
        })
        .await?;
        receiver.await.map_err(|_| stopped())?
    }

    /// Deletes transaction `transaction`'s staged rows in the background:
    /// it ended without committing them. Never waits: the engine takes
    /// such transactions up between its commands (within a second).
    pub fn discard_staged(&self, transaction: u64) {
        self.discarded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(transaction);
    }

    /// Completes the staged commits a crash interrupted (RFC 0007). Called
    /// once every view stored in the catalog is installed, before anyone
    /// reads: until then, readers could see part of such a transaction.
    pub async fn finish_staged(&self) -> RsResult<()> {
        let (reply, receiver) = oneshot::channel();
        self.send(Command::FinishStaged { reply }).await?;
        receiver.await.map_err(|_| stopped())?
    }

    /// Records that a view stored in the catalog cannot be maintained any
    /// more (its definition no longer plans): it stays uninstalled, and
    /// reads of it report `error` until it is dropped.
    pub fn mark_not_maintainable(&self, view_id: ObjectId, error: RsError) {
        if let Ok(mut statuses) = self.statuses.write() {
            statuses.insert(view_id, ViewStatus::Failed(error));
        }
    }

    /// Dropped objects whose stored keys compaction has not removed yet,
    /// and transactions' staged rows not all deleted yet.
    pub fn reclaims_pending(&self) -> usize {
        self.reclaiming.load(Ordering::Relaxed)
    }

    pub fn view_status(&self, view_id: ObjectId) -> ViewStatus {
        self.statuses
            .read()
            .map(|statuses| {
                statuses
                    .get(&view_id)
                    .cloned()
                    .unwrap_or(ViewStatus::Healthy)
            })
            .unwrap_or(ViewStatus::Healthy)
    }

    async fn send(&self, command: Command) -> RsResult<()> {
        self.commands.send(command).await.map_err(|_| stopped())
    }
}

/// A view's build in the background (see [`Engine::install`]).
pub struct ViewBuild {
    built: oneshot::Receiver<RsResult<()>>,
}

impl ViewBuild {
    /// Waits until the view is complete, or returns why its build failed.
    pub async fn finished(self) -> RsResult<()> {
        self.built.await.map_err(|_| stopped())?
    }
}

fn stopped() -> RsError {
    RsError::new(&codes::ENGINE_STOPPED, "the engine is not running")
}
