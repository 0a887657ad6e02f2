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
