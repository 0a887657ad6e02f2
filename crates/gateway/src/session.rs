//! Per-connection state: namespace, the open transaction, and what stops
//! a running statement (its interrupt and `statement_timeout`).

use std::collections::BTreeMap;
use std::time::Duration;

use rockstream_pgwire::Interrupt;
use rockstream_storage::SnapshotSet;
use rockstream_types::{ObjectId, Row};

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
    /// key → (row as first read from the snapshot, row now).
    pub rows: BTreeMap<Vec<u8>, (Option<Row>, Option<Row>)>,
}

#[derive(Default)]
pub struct Transaction {
    pub tables: BTreeMap<ObjectId, PendingTable>,
    pub isolation: Isolation,
    /// Under REPEATABLE READ, the state the first statement read; every
    /// statement after it reads the same.
    pub snapshot: Option<SnapshotSet>,
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

pub struct GatewaySession {
    pub namespace: String,
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
}

/// What a failed statement restores: the transaction's tables before it.
pub type Savepoint = Option<BTreeMap<ObjectId, PendingTable>>;

impl GatewaySession {
    /// Ends the transaction (COMMIT or ROLLBACK), handing it back; the
    /// parameters its `SET LOCAL`s changed return to what they were.
    pub fn end_transaction(&mut self) -> Option<Transaction> {
        let mut transaction = self.transaction.take()?;
        if let Some(before) = transaction.before_set_local.take() {
            self.parameters = before;
        }
        Some(transaction)
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
