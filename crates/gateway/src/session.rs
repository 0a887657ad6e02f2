//! Per-connection state: namespace and the open transaction.

use std::collections::BTreeMap;

use rockstream_types::{ObjectId, Row};

/// A transaction's pending changes to one table.
#[derive(Debug, Clone, Default)]
pub struct PendingTable {
    pub name: String,
    /// key → (row as first read from the snapshot, row now).
    pub rows: BTreeMap<Vec<u8>, (Option<Row>, Option<Row>)>,
}

#[derive(Debug, Default)]
pub struct Transaction {
    pub tables: BTreeMap<ObjectId, PendingTable>,
    /// A statement failed: everything until ROLLBACK/COMMIT is refused.
    pub aborted: bool,
    /// Opened by BEGIN (false: the implicit transaction of one statement).
    pub explicit: bool,
}

pub struct GatewaySession {
    pub namespace: String,
    pub transaction: Option<Transaction>,
}

/// What a failed statement restores: the transaction's tables before it.
pub type Savepoint = Option<BTreeMap<ObjectId, PendingTable>>;

impl GatewaySession {
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
