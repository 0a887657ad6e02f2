//! Per-connection state: namespace, the open transaction, and what stops
//! a running statement (its interrupt and `statement_timeout`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::memory_pool::MemoryReservation;
use rockstream_control::{
    Attachment, CatalogEntry, ObjectKind, PendingCatalog, REWRITTEN_BY_PENDING,
};
use rockstream_pgwire::Interrupt;
use rockstream_storage::SnapshotSet;
use rockstream_types::{codes, ObjectId, Row, RsError, RsResult};

use crate::sequences::SessionSequences;

/// The isolation levels RockStream provides (SERIALIZABLE is refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Each statement reads the newest committed state (PostgreSQL's
    /// default; READ UNCOMMITTED means the same).
    #[default]
    ReadCommitted,
    /// Every statement reads the state of the transaction's first one; a
    /// write to a row that another transaction changed since fails the
    /// commit with 40001.
    RepeatableRead,
}

impl Isolation {
    /// The name `SHOW transaction_isolation` prints.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read committed",
            Isolation::RepeatableRead => "repeatable read",
        }
    }
}

/// A transaction's pending changes to one table.
#[derive(Debug, Clone, Default)]
pub struct PendingTable {
    pub name: String,
    /// The table's layout ([`CatalogEntry::rewritten`]) its rows are in.
    pub layout: u64,
    /// key → (row as first read from the snapshot, row now).
    pub rows: BTreeMap<Vec<u8>, (Option<Row>, Option<Row>)>,
}

/// A transaction's number (`txid_current()`): increasing across the
/// server's life, and across restarts once [`seed_transaction_ids`] starts
/// them from the clock.
#[derive(Debug, Clone, Copy)]
pub struct TransactionId(pub i64);

static NEXT_TRANSACTION_ID: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);

/// Transaction numbers go on from at least `at_least` (the clock's
/// microseconds when the server starts).
pub fn seed_transaction_ids(at_least: i64) {
    NEXT_TRANSACTION_ID.fetch_max(at_least, std::sync::atomic::Ordering::Relaxed);
}

impl Default for TransactionId {
    fn default() -> Self {
        TransactionId(NEXT_TRANSACTION_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

#[derive(Default)]
pub struct Transaction {
    /// Its number, for `txid_current()`.
    pub id: TransactionId,
    pub tables: BTreeMap<ObjectId, PendingTable>,
    /// Its DDL, applied when it commits (RFC 0002).
    pub catalog: PendingCatalog,
    pub isolation: Isolation,
    /// Under REPEATABLE READ, the state the first statement read; every
    /// statement after it reads the same.
    pub snapshot: Option<SnapshotSet>,
    /// The catalog transaction `snapshot`'s state records
    /// (`Published::ddl_transaction`).
    pub snapshot_ddl_transaction: u64,
    /// A statement has run in the transaction (the isolation level can no
    /// longer change).
    pub started: bool,
    /// A statement failed: everything until ROLLBACK/COMMIT is refused.
    pub aborted: bool,
    /// Opened by BEGIN (false: the implicit transaction of one statement).
    pub explicit: bool,
    /// The session's parameters before its first `SET LOCAL`, restored
    /// when the transaction ends.
    pub before_set_local: Option<Parameters>,
    /// The savepoints defined and not yet released, oldest first.
    pub savepoints: Vec<NamedSavepoint>,
    /// Sequences `TRUNCATE … RESTART IDENTITY` restarted, each with the
    /// value it hands out next in this transaction; they go on from there
    /// once it commits.
    pub restarted: RestartedSequences,
    /// The memory its changes hold, counted as they are made and freed
    /// when it ends ([`crate::dml::reserve_changes`]).
    pub memory: Option<MemoryReservation>,
    /// The rows a large `COPY` handed to the engine ([`crate::staging`]).
    pub staged: Option<crate::staging::Staged>,
}

/// A transaction's restarted sequences (shared with the sequence functions
/// of its statements).
pub type RestartedSequences = Arc<std::sync::Mutex<BTreeMap<ObjectId, i128>>>;

/// The map behind `restarted`, poisoned or not.
pub fn restarted_map(
    restarted: &RestartedSequences,
) -> std::sync::MutexGuard<'_, BTreeMap<ObjectId, i128>> {
    restarted
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A point inside a transaction block that `ROLLBACK TO SAVEPOINT` returns
/// to: the pending changes (rows and DDL) and the session's parameters as they were when
/// `SAVEPOINT` ran.
pub struct NamedSavepoint {
    pub name: String,
    tables: BTreeMap<ObjectId, PendingTable>,
    catalog: PendingCatalog,
    restarted: BTreeMap<ObjectId, i128>,
    parameters: Parameters,
    before_set_local: Option<Parameters>,
    /// Cursors declared from here on have higher serials: `ROLLBACK TO`
    /// closes them.
    cursor_serial: u64,
    /// The memory the transaction's changes held: `ROLLBACK TO` gives back
    /// what it reserved since.
    memory_bytes: usize,
}

/// The parameters a session keeps.
#[derive(Debug, Clone, Default)]
pub struct Parameters {
    /// `statement_timeout` (`None`: no limit, PostgreSQL's default).
    pub statement_timeout: Option<Duration>,
    /// `idle_in_transaction_session_timeout`: how long the session may wait
    /// for its client inside a transaction block before it is closed.
    pub idle_in_transaction_timeout: Option<Duration>,
    /// `idle_session_timeout`: likewise, outside a transaction block.
    pub idle_session_timeout: Option<Duration>,
    /// Other parameters the session `SET`, lower-case name → value, which
    /// `SHOW` reports (RockStream does not act on them).
    pub settings: BTreeMap<String, String>,
}

/// An open cursor (`DECLARE name CURSOR FOR query`): the query's result,
/// computed when it was declared (the state it reads is that moment's, as
/// in PostgreSQL), and how far `FETCH` has read it.
pub struct Cursor {
    pub rows: RecordBatch,
    pub position: usize,
    /// The order cursors were declared in (see [`NamedSavepoint`]).
    serial: u64,
    /// `WITH HOLD`: it outlives the transaction that declared it.
    pub hold: bool,
    /// Declared in the open transaction: its ROLLBACK closes it even `WITH
    /// HOLD`.
    pub in_open_transaction: bool,
}

impl Cursor {
    /// The next `count` rows (all that are left when `None`), moving past
    /// them.
    pub fn fetch(&mut self, count: Option<usize>) -> RecordBatch {
        let left = self.rows.num_rows() - self.position;
        let taken = count.map_or(left, |count| count.min(left));
        let rows = self.rows.slice(self.position, taken);
        self.position += taken;
        rows
    }
}

pub struct GatewaySession {
    pub namespace: String,
    /// Keeps the namespace from being dropped while the session lives.
    pub attachment: Attachment,
    /// The role the client connected as (`current_user`).
    pub user: String,
    /// Open cursors by name.
    pub cursors: BTreeMap<String, Cursor>,
    /// Cursors declared so far, the serial of the next one.
    pub cursors_declared: u64,
    pub transaction: Option<Transaction>,
    /// The level `BEGIN` uses when it names none (`SET SESSION
    /// CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL ...`).
    pub default_isolation: Isolation,
    /// Raised when the client cancels the running statement.
    pub interrupt: Interrupt,
    /// `SET` parameters (`SET LOCAL` ones until the transaction ends).
    pub parameters: Parameters,
    /// When the running statement times out (the runtime's microseconds),
    /// set as it starts.
    pub statement_deadline: Option<i64>,
    /// What `currval` and `lastval` read.
    pub sequence_values: Arc<std::sync::Mutex<SessionSequences>>,
    /// While a `COPY ... FROM STDIN` loads its parts.
    pub copy: Option<CopyInProgress>,
}

/// A `COPY ... FROM STDIN` between its parts.
pub struct CopyInProgress {
    /// The transaction as it was before the COPY, restored if it fails.
    pub savepoint: Savepoint,
    /// The table its first part loaded: every part loads the same one.
    pub table_id: ObjectId,
}

/// What a failed statement restores: the transaction's tables before it.
pub type Savepoint = Option<BTreeMap<ObjectId, PendingTable>>;

impl GatewaySession {
    /// 40001 when the session's transaction cannot read or write table
    /// `entry` consistently: it wrote rows of another layout of it, or its
    /// snapshot is older than the table's layout (RFC 0004).
    pub fn check_layout(&self, entry: &CatalogEntry) -> RsResult<()> {
        let Some(transaction) = &self.transaction else {
            return Ok(());
        };
        layout_conflict(
            entry,
            transaction.tables.get(&entry.id).map(|table| table.layout),
            transaction
                .snapshot
                .is_some()
                .then_some(transaction.snapshot_ddl_transaction),
        )
    }

    /// What `currval` and `lastval` read.
    pub fn sequences(&self) -> std::sync::MutexGuard<'_, SessionSequences> {
        self.sequence_values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Ends the transaction (COMMIT or ROLLBACK), handing it back; the
    /// parameters its `SET LOCAL`s changed return to what they were.
    pub fn end_transaction(&mut self) -> Option<Transaction> {
        let mut transaction = self.transaction.take()?;
        if let Some(before) = transaction.before_set_local.take() {
            self.parameters = before;
        }
        Some(transaction)
    }

    /// Opens cursor `name` over `rows` (the caller checked the name is
    /// free).
    pub fn declare_cursor(&mut self, name: String, rows: RecordBatch, hold: bool) {
        let in_open_transaction = self.in_explicit_transaction();
        self.cursors.insert(
            name,
            Cursor {
                rows,
                position: 0,
                serial: self.cursors_declared,
                hold,
                in_open_transaction,
            },
        );
        self.cursors_declared += 1;
    }

    /// The transaction block ended: its cursors close, except, when it
    /// committed, those declared `WITH HOLD`.
    pub fn close_transaction_cursors(&mut self, committed: bool) {
        self.cursors
            .retain(|_, cursor| cursor.hold && (committed || !cursor.in_open_transaction));
        for cursor in self.cursors.values_mut() {
            cursor.in_open_transaction = false;
        }
    }

    /// Inside `BEGIN ... COMMIT`.
    pub fn in_explicit_transaction(&self) -> bool {
        self.transaction
            .as_ref()
            .is_some_and(|transaction| transaction.explicit)
    }

    /// Taken before a statement runs, for statement-level atomicity.
    pub fn savepoint(&self) -> Savepoint {
        self.transaction
            .as_ref()
            .map(|transaction| transaction.tables.clone())
    }

    /// A statement failed: it changes nothing. Inside `BEGIN` the
    /// transaction becomes aborted (PostgreSQL's behaviour); outside, the
    /// statement's implicit transaction is dropped.
    /// `savepoint` is `None` for statements that never write, whose failure
    /// leaves the buffered changes as they were.
    pub fn statement_failed(&mut self, savepoint: Option<Savepoint>) {
        let savepoint = savepoint.or(self.copy.take().map(|copy| copy.savepoint));
        match self.transaction.as_mut() {
            Some(transaction) if transaction.explicit => {
                if let Some(savepoint) = savepoint {
                    transaction.tables = savepoint.unwrap_or_default();
                }
                transaction.aborted = true;
            }
            _ => self.transaction = None,
        }
    }
}

/// What a savepoint statement asks of the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavepointCommand {
    Define,
    Release,
    RollBackTo,
}

impl SavepointCommand {
    /// The statement as PostgreSQL names it in its errors.
    fn statement(self) -> &'static str {
        match self {
            SavepointCommand::Define => "SAVEPOINT",
            SavepointCommand::Release => "RELEASE SAVEPOINT",
            SavepointCommand::RollBackTo => "ROLLBACK TO SAVEPOINT",
        }
    }
}

impl GatewaySession {
    /// `SAVEPOINT name`, `RELEASE [SAVEPOINT] name` or `ROLLBACK TO
    /// [SAVEPOINT] name`, with PostgreSQL's rules: a savepoint exists only
    /// inside a transaction block; a name may be reused (the newest one
    /// answers to it); releasing one releases every later one; rolling back
    /// to one undoes what the transaction did since (its writes, DDL, `SET`s and
    /// cursors),
    /// ends an aborted state and keeps the savepoint, so that it can be
    /// rolled back to again. Only `ROLLBACK TO` may run in an aborted
    /// transaction (the caller refuses the others first).
    pub fn savepoint_command(&mut self, command: SavepointCommand, name: &str) -> RsResult<()> {
        let parameters = self.parameters.clone();
        let cursor_serial = self.cursors_declared;
        let transaction = match self.transaction.as_mut() {
            Some(transaction) if transaction.explicit => transaction,
            _ => {
                return Err(RsError::new(
                    &codes::NO_ACTIVE_TRANSACTION,
                    format!(
                        "{} can only be used in transaction blocks",
                        command.statement()
                    ),
                ))
            }
        };
        if command == SavepointCommand::Define {
            transaction.savepoints.push(NamedSavepoint {
                name: name.to_string(),
                tables: transaction.tables.clone(),
                catalog: transaction.catalog.clone(),
                restarted: restarted_map(&transaction.restarted).clone(),
                parameters,
                before_set_local: transaction.before_set_local.clone(),
                cursor_serial,
                memory_bytes: transaction
                    .memory
                    .as_ref()
                    .map_or(0, MemoryReservation::size),
            });
            return Ok(());
        }
        let Some(position) = transaction
            .savepoints
            .iter()
            .rposition(|savepoint| savepoint.name == name)
        else {
            return Err(RsError::new(
                &codes::UNDEFINED_SAVEPOINT,
                format!("savepoint \"{name}\" does not exist"),
            ));
        };
        if command == SavepointCommand::Release {
            transaction.savepoints.truncate(position);
            return Ok(());
        }
        transaction.savepoints.truncate(position + 1);
        let savepoint = &transaction.savepoints[position];
        transaction.tables = savepoint.tables.clone();
        transaction.catalog = savepoint.catalog.clone();
        // Sequences are not transactional: a counter restarted before the
        // savepoint keeps what it handed out since; one restarted after it
        // (its TRUNCATE rolled back) is the server's again.
        restarted_map(&transaction.restarted).retain(|id, _| savepoint.restarted.contains_key(id));
        transaction.before_set_local = savepoint.before_set_local.clone();
        transaction.aborted = false;
        if let Some(memory) = &transaction.memory {
            memory.shrink(memory.size().saturating_sub(savepoint.memory_bytes));
        }
        self.parameters = savepoint.parameters.clone();
        let cursor_serial = savepoint.cursor_serial;
        self.cursors
            .retain(|_, cursor| cursor.serial < cursor_serial);
        Ok(())
    }
}

impl Parameters {
    /// The timeout parameter `name` (lower case), if it is one RockStream
    /// acts on.
    pub fn timeout_mut(&mut self, name: &str) -> Option<&mut Option<Duration>> {
        match name {
            "statement_timeout" => Some(&mut self.statement_timeout),
            "idle_in_transaction_session_timeout" => Some(&mut self.idle_in_transaction_timeout),
            "idle_session_timeout" => Some(&mut self.idle_session_timeout),
            _ => None,
        }
    }

    pub fn timeout(&self, name: &str) -> Option<Option<Duration>> {
        match name {
            "statement_timeout" => Some(self.statement_timeout),
            "idle_in_transaction_session_timeout" => Some(self.idle_in_transaction_timeout),
            "idle_session_timeout" => Some(self.idle_session_timeout),
            _ => None,
        }
    }
}

/// 40001 when rows of table `entry`, in the layout its catalog version
/// has, cannot be mixed with rows the transaction wrote for layout
/// `written_for`, or read from a snapshot recording catalog transaction
/// `snapshot_ddl_transaction` (older than the layout: its rows have the
/// old columns).
pub fn layout_conflict(
    entry: &CatalogEntry,
    written_for: Option<u64>,
    snapshot_ddl_transaction: Option<u64>,
) -> RsResult<()> {
    if entry.kind != ObjectKind::Table {
        return Ok(());
    }
    if written_for.is_some_and(|layout| layout != entry.rewritten) {
        return Err(RsError::new(
            &codes::TABLE_ALTERED_CONCURRENTLY,
            format!(
                "table \"{}\" was altered by another transaction after this one wrote to it",
                entry.name
            ),
        ));
    }
    let committed_rewrite = entry.rewritten != REWRITTEN_BY_PENDING;
    if committed_rewrite && snapshot_ddl_transaction.is_some_and(|seen| seen < entry.rewritten) {
        return Err(RsError::new(
            &codes::TABLE_ALTERED_CONCURRENTLY,
            format!(
                "table \"{}\" was altered by another transaction after this transaction's snapshot",
                entry.name
            ),
        ));
    }
    Ok(())
}
