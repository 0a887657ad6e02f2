//! Per-connection state: namespace, the open transaction, and what stops
//! a running statement (its interrupt and `statement_timeout`).

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::memory_pool::MemoryReservation;
use rockstream_control::{
    Attachment, CatalogEntry, ObjectKind, PendingCatalog, REWRITTEN_BY_PENDING,
};
use rockstream_pgwire::{Interrupt, Notice};
use rockstream_runtime::TableWatermark;
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

/// A pending row: (the row as first read from the snapshot, the row now).
pub type PendingRow = (Option<Row>, Option<Row>);

/// A transaction's pending changes to one table.
///
/// Every change also records what it replaced in an undo log, so that a
/// failed statement, a failed COPY or `ROLLBACK TO SAVEPOINT` returns to a
/// [`Mark`] by undoing only what was done since — rather than every
/// statement copying the whole transaction beforehand (which made a
/// transaction of n single-row INSERTs cost n² row copies). The log is
/// emptied whenever no mark is held ([`Transaction::forget_undo`]), so it
/// holds at most what was changed since the oldest savepoint (counted
/// against the transaction's memory, [`crate::dml::new_changes`]).
#[derive(Debug, Default)]
pub struct PendingTable {
    pub name: String,
    /// The table's layout ([`CatalogEntry::rewritten`]) its rows are in.
    layout: u64,
    /// key → its pending row. Entries are only ever added or changed;
    /// only undoing removes them. Shared with the reads of the statements
    /// that see them ([`PendingTable::shared_rows`]): a change copies the
    /// map only while such a read still holds it.
    rows: Arc<BTreeMap<Vec<u8>, PendingRow>>,
    /// What each change since the oldest mark replaced, oldest first.
    undo: Vec<Undo>,
}

/// What one change to a [`PendingTable`] replaced.
#[derive(Debug)]
enum Undo {
    /// The key's row now (`None`: the key had no entry; an entry's
    /// first-read row never changes once it is made).
    Row(Vec<u8>, Option<Option<Row>>),
    /// The table held no entries (a bulk load filled it at once).
    Empty,
    /// The layout, before an `ALTER TABLE` rewrote the rows.
    Layout(u64),
}

impl PendingTable {
    pub fn new(name: String, layout: u64) -> PendingTable {
        PendingTable {
            name,
            layout,
            rows: Arc::default(),
            undo: Vec::new(),
        }
    }

    pub fn layout(&self) -> u64 {
        self.layout
    }

    pub fn rows(&self) -> &BTreeMap<Vec<u8>, PendingRow> {
        &self.rows
    }

    /// The pending rows, for a read that sees them while the transaction
    /// goes on: shared, not copied.
    pub fn shared_rows(&self) -> Arc<BTreeMap<Vec<u8>, PendingRow>> {
        Arc::clone(&self.rows)
    }

    pub fn get(&self, key: &[u8]) -> Option<&PendingRow> {
        self.rows.get(key)
    }

    /// Sets `key`'s row now to `current`; a key without an entry gets one
    /// whose first-read row is `first_read()`.
    pub fn set(
        &mut self,
        key: Vec<u8>,
        current: Option<Row>,
        first_read: impl FnOnce() -> Option<Row>,
    ) {
        match Arc::make_mut(&mut self.rows).entry(key) {
            Entry::Occupied(mut entry) => {
                let previous = std::mem::replace(&mut entry.get_mut().1, current);
                self.undo
                    .push(Undo::Row(entry.key().clone(), Some(previous)));
            }
            Entry::Vacant(entry) => {
                self.undo.push(Undo::Row(entry.key().clone(), None));
                entry.insert((first_read(), current));
            }
        }
    }

    /// Fills a table without entries with `rows` (new rows, keys distinct)
    /// in one pass.
    pub fn fill(&mut self, rows: impl IntoIterator<Item = (Vec<u8>, Row)>) {
        debug_assert!(self.rows.is_empty(), "filling a table with entries");
        self.rows = Arc::new(
            rows.into_iter()
                .map(|(key, row)| (key, (None, Some(row))))
                .collect(),
        );
        self.undo.push(Undo::Empty);
    }

    pub fn set_layout(&mut self, layout: u64) {
        let previous = std::mem::replace(&mut self.layout, layout);
        self.undo.push(Undo::Layout(previous));
    }

    /// Takes every entry out, leaving the table without any; only where a
    /// failure drops the whole transaction (a COPY outside a transaction
    /// block staging its rows), as it cannot be undone.
    pub fn take_rows(&mut self) -> BTreeMap<Vec<u8>, PendingRow> {
        self.undo.clear();
        Arc::unwrap_or_clone(std::mem::take(&mut self.rows))
    }

    pub fn into_rows(self) -> BTreeMap<Vec<u8>, PendingRow> {
        Arc::unwrap_or_clone(self.rows)
    }

    /// The rows (key, row now) changed since the undo log was `mark` long
    /// (`None`: the table had no entry then, so every row was), leaving out
    /// those changed back to what they were and deleted ones.
    pub fn changed_since(&self, mark: Option<usize>) -> Vec<(&[u8], &Row)> {
        let Some(mark) = mark else {
            return self
                .rows
                .iter()
                .filter_map(|(key, (_, current))| Some((key.as_slice(), current.as_ref()?)))
                .collect();
        };
        // Each key's row at the mark: what its first change since replaced.
        let Some(since) = self.undo.get(mark..) else {
            return self.changed_since(None);
        };
        let mut at_mark: BTreeMap<&[u8], Option<&Row>> = BTreeMap::new();
        for undo in since {
            match undo {
                Undo::Row(key, previous) => {
                    at_mark
                        .entry(key.as_slice())
                        .or_insert_with(|| previous.as_ref().and_then(Option::as_ref));
                }
                Undo::Empty => return self.changed_since(None),
                Undo::Layout(_) => {}
            }
        }
        at_mark
            .into_iter()
            .filter_map(|(key, was)| {
                let current = self.rows.get(key)?.1.as_ref()?;
                (was != Some(current)).then_some((key, current))
            })
            .collect()
    }

    /// Undoes the changes made since the undo log was `mark` long.
    fn undo_to(&mut self, mark: usize) {
        while self.undo.len() > mark {
            match self.undo.pop() {
                Some(Undo::Row(key, Some(previous))) => {
                    // Made before this change, so not undone yet.
                    if let Some(entry) = Arc::make_mut(&mut self.rows).get_mut(&key) {
                        entry.1 = previous;
                    }
                }
                Some(Undo::Row(key, None)) => {
                    Arc::make_mut(&mut self.rows).remove(&key);
                }
                Some(Undo::Empty) => self.rows = Arc::default(),
                Some(Undo::Layout(layout)) => self.layout = layout,
                None => break,
            }
        }
    }
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
    /// Tables whose entries a `DROP` inside the transaction discarded since
    /// the oldest mark, oldest first: undoing the DROP brings them back.
    removed: Vec<(ObjectId, PendingTable)>,
    /// Its DDL, applied when it commits (RFC 0002).
    pub catalog: PendingCatalog,
    pub isolation: Isolation,
    /// Under REPEATABLE READ, the state the first statement read; every
    /// statement after it reads the same.
    pub snapshot: Option<SnapshotSet>,
    /// The catalog transaction `snapshot`'s state records
    /// (`Published::ddl_transaction`).
    pub snapshot_ddl_transaction: u64,
    /// The watermarks of `snapshot`'s state (`rs_watermarks`).
    pub snapshot_watermarks: Arc<BTreeMap<ObjectId, TableWatermark>>,
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

/// Where a transaction's pending rows were, to return to: each table's
/// undo log length then (tables absent had no entries), and how many
/// dropped tables were put aside.
#[derive(Debug, Clone, Default)]
pub struct Mark {
    tables: BTreeMap<ObjectId, usize>,
    removed: usize,
}

impl Mark {
    /// `table_id`'s undo log length at the mark; `None` when the
    /// transaction had no entry for it then.
    pub fn table(&self, table_id: ObjectId) -> Option<usize> {
        self.tables.get(&table_id).copied()
    }
}

impl Transaction {
    /// Where the pending rows are now.
    pub fn mark(&self) -> Mark {
        Mark {
            tables: self
                .tables
                .iter()
                .map(|(id, table)| (*id, table.undo.len()))
                .collect(),
            removed: self.removed.len(),
        }
    }

    /// Returns the pending rows to `mark`, undoing what was done since.
    pub fn roll_back_to(&mut self, mark: &Mark) {
        while self.removed.len() > mark.removed {
            if let Some((id, table)) = self.removed.pop() {
                self.tables.insert(id, table);
            }
        }
        self.tables.retain(|id, table| match mark.tables.get(id) {
            Some(&length) => {
                table.undo_to(length);
                true
            }
            None => false,
        });
    }

    /// Discards table `table_id`'s entries (its DROP), recoverably.
    pub fn remove_table(&mut self, table_id: ObjectId) {
        if let Some(table) = self.tables.remove(&table_id) {
            self.removed.push((table_id, table));
        }
    }

    /// Empties the undo logs once no mark is held: no savepoint, no COPY
    /// between its parts, no statement running.
    pub fn forget_undo(&mut self) {
        self.removed.clear();
        for table in self.tables.values_mut() {
            table.undo.clear();
        }
    }
}

/// A point inside a transaction block that `ROLLBACK TO SAVEPOINT` returns
/// to: the pending changes (rows and DDL) and the session's parameters as they were when
/// `SAVEPOINT` ran.
pub struct NamedSavepoint {
    pub name: String,
    tables: Mark,
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
    /// NOTICE messages for the client, sent before the statement's result.
    pub notices: Vec<Notice>,
}

/// A `COPY ... FROM STDIN` between its parts.
pub struct CopyInProgress {
    /// The transaction as it was before the COPY, restored if it fails.
    pub savepoint: Savepoint,
    /// The table its first part loaded: every part loads the same one.
    pub table_id: ObjectId,
}

/// What a failed statement returns to: where the transaction's pending
/// rows were before it (`None`: there was no transaction).
pub type Savepoint = Option<Mark>;

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
            transaction.tables.get(&entry.id).map(PendingTable::layout),
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
        self.transaction.as_ref().map(Transaction::mark)
    }

    /// A statement (or a COPY) ended: the undo logs are emptied unless a
    /// savepoint or a COPY between its parts still needs them.
    pub fn statement_ended(&mut self) {
        if self.copy.is_some() {
            return;
        }
        if let Some(transaction) = self.transaction.as_mut() {
            if transaction.savepoints.is_empty() {
                transaction.forget_undo();
            }
        }
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
                    transaction.roll_back_to(&savepoint.unwrap_or_default());
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
                tables: transaction.mark(),
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
        let mark = transaction.savepoints[position].tables.clone();
        transaction.roll_back_to(&mark);
        let savepoint = &transaction.savepoints[position];
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

#[cfg(test)]
mod tests {
    //! Goal: returning to a mark through the undo logs gives exactly the
    //! pending rows a full copy taken at the mark held, and the rows
    //! changed since a mark are exactly those that differ from the copy;
    //! a read sharing the rows keeps seeing them as they were when it
    //! began, whatever changes after.
    //! Method: random changes, marks, rollbacks, drops, forgets and reads,
    //! checked against copies of the rows at every mark and read.
    use super::*;
    use crate::providers::TableOverlay;
    use rockstream_types::Datum;

    /// The rows of every table, as a full copy would hold them.
    type Copy = BTreeMap<ObjectId, (u64, BTreeMap<Vec<u8>, PendingRow>)>;

    fn copy(transaction: &Transaction) -> Copy {
        transaction
            .tables
            .iter()
            .map(|(id, table)| (*id, (table.layout, (*table.rows).clone())))
            .collect()
    }

    fn row(value: u64) -> Row {
        vec![Datum::Int64(value as i64)]
    }

    #[test]
    fn undo_logs_return_to_every_mark_as_a_copy_would() {
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        for _ in 0..200 {
            let mut transaction = Transaction::default();
            // Marks held, each with the copy taken with it.
            let mut marks: Vec<(Mark, Copy)> = Vec::new();
            // Object ids are never reused: a dropped table is not written
            // again.
            let mut dropped = std::collections::HashSet::new();
            // Reads under way: the rows they share, and a copy of them.
            let mut reads: Vec<(TableOverlay, BTreeMap<Vec<u8>, PendingRow>)> = Vec::new();
            for _ in 0..60 {
                let table_id = ObjectId::from(next(3));
                match (next(4), transaction.tables.get(&table_id)) {
                    (0, Some(table)) => reads.push((table.shared_rows(), (*table.rows).clone())),
                    (1, _) if !reads.is_empty() => {
                        reads.swap_remove(next(reads.len() as u64) as usize);
                    }
                    _ => {}
                }
                let operation = match next(10) {
                    0..=5 if dropped.contains(&table_id) => 9,
                    operation => operation,
                };
                match operation {
                    0..=4 => {
                        let table = transaction
                            .tables
                            .entry(table_id)
                            .or_insert_with(|| PendingTable::new("t".into(), 0));
                        let key = vec![next(8) as u8];
                        let current = (next(4) != 0).then(|| row(next(100)));
                        let first = next(100);
                        table.set(key, current, || Some(row(first)));
                    }
                    5 => {
                        let table = transaction
                            .tables
                            .entry(table_id)
                            .or_insert_with(|| PendingTable::new("t".into(), 0));
                        if table.rows.is_empty() {
                            table.fill((0..next(5)).map(|n| (vec![n as u8 + 100], row(n))));
                        } else {
                            table.set_layout(next(5));
                        }
                    }
                    6 => {
                        transaction.remove_table(table_id);
                        dropped.insert(table_id);
                    }
                    7 => marks.push((transaction.mark(), copy(&transaction))),
                    8 if !marks.is_empty() => {
                        // Back to a random mark; later marks are gone
                        // (ROLLBACK TO keeps its own savepoint).
                        let index = next(marks.len() as u64) as usize;
                        marks.truncate(index + 1);
                        let (mark, expected) = &marks[index];
                        let now = copy(&transaction);
                        for (id, (_, rows)) in &now {
                            let at_mark = expected.get(id);
                            let changed: BTreeMap<Vec<u8>, Row> = transaction.tables[id]
                                .changed_since(mark.table(*id))
                                .into_iter()
                                .map(|(key, row)| (key.to_vec(), row.clone()))
                                .collect();
                            let differ: BTreeMap<Vec<u8>, Row> = rows
                                .iter()
                                .filter_map(|(key, (_, current))| {
                                    let current = current.as_ref()?;
                                    let was = at_mark
                                        .filter(|_| mark.table(*id).is_some())
                                        .and_then(|(_, rows)| rows.get(key))
                                        .and_then(|(_, was)| was.as_ref());
                                    (was != Some(current)).then(|| (key.clone(), current.clone()))
                                })
                                .collect();
                            assert_eq!(changed, differ, "changed rows of table {id}");
                        }
                        transaction.roll_back_to(mark);
                        assert_eq!(&copy(&transaction), expected);
                    }
                    _ if marks.is_empty() => transaction.forget_undo(),
                    _ => {}
                }
                for (shared, seen) in &reads {
                    assert_eq!(**shared, *seen, "a read's rows changed under it");
                }
            }
        }
    }
}
