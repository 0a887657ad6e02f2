//! UNIQUE constraints at statement time (RFC 0006).
//!
//! The engine's commit is the constraints' authority: it checks every
//! entry a transaction adds against storage, one commit at a time. Inside
//! a transaction block PostgreSQL reports a violation at the statement
//! that causes it, not at `COMMIT`, so after each write statement the rows
//! it changed are checked here against the transaction's other rows and
//! its snapshot's entries. A value another transaction commits later is
//! caught by the commit.

use std::collections::HashMap;

use rockstream_control::{CatalogEntry, TableIndex};
use rockstream_ops::keys::unique_entry_key;
use rockstream_storage::SnapshotSet;
use rockstream_types::{Row, RsError, RsResult};

use crate::backend::Gateway;
use crate::session::{GatewaySession, PendingTable, Savepoint};

/// Checks the rows the statement that ran since `before` (the tables as
/// they were) changed, in every table with UNIQUE constraints.
pub(crate) async fn check_statement(
    gateway: &Gateway,
    session: &GatewaySession,
    before: &Savepoint,
) -> RsResult<()> {
    let Some(transaction) = &session.transaction else {
        return Ok(());
    };
    let constrained: Vec<CatalogEntry> = gateway
        .entries(session)
        .into_iter()
        .filter(|entry| {
            entry.unique_indexes().next().is_some() && transaction.tables.contains_key(&entry.id)
        })
        .collect();
    if constrained.is_empty() {
        return Ok(());
    }
    // The newest state, whatever the isolation level: the commit checks
    // against it too, so a value freed since a REPEATABLE READ snapshot
    // is free.
    let snapshot = gateway.database().engine().published().snapshot;
    for entry in &constrained {
        // Rows of another layout (a concurrent ALTER) cannot commit (40001),
        // and the constraint's positions do not fit them.
        session.check_layout(entry)?;
        let table = &transaction.tables[&entry.id];
        let mark = before.as_ref().and_then(|mark| mark.table(entry.id));
        let changed: Vec<(&[u8], &Row)> = table.changed_since(mark);
        if changed.is_empty() {
            continue;
        }
        for constraint in entry.unique_indexes() {
            check_constraint(entry, constraint, table, &changed, &snapshot).await?;
        }
    }
    Ok(())
}

async fn check_constraint(
    entry: &CatalogEntry,
    constraint: &TableIndex,
    table: &PendingTable,
    changed: &[(&[u8], &Row)],
    snapshot: &SnapshotSet,
) -> RsResult<()> {
    let entry_of = |row: &Row| unique_entry_key(entry.id, constraint.id, &constraint.columns, row);
    check_held(entry, constraint, table, false)?;
    // Stored rows, unless the transaction has changed them since.
    for (key, row) in changed {
        let Some(value) = entry_of(row) else {
            continue;
        };
        let Some(owner) = snapshot.get(&value).await? else {
            continue;
        };
        if owner.as_slice() == *key {
            continue;
        }
        let still_holds = match table.get(&owner) {
            None => true,
            Some((_, current)) => current
                .as_ref()
                .is_some_and(|current| entry_of(current).as_ref() == Some(&value)),
        };
        if still_holds {
            return Err(violation(entry, constraint, row, false));
        }
    }
    Ok(())
}

/// Checks that no two of the transaction's rows of `table` hold one value
/// of `constraint`; `adding` it, fails as PostgreSQL fails to build its
/// index.
fn check_held(
    entry: &CatalogEntry,
    constraint: &TableIndex,
    table: &PendingTable,
    adding: bool,
) -> RsResult<()> {
    let mut held: HashMap<Vec<u8>, &[u8]> = HashMap::new();
    for (key, (_, current)) in table.rows() {
        let Some(row) = current else {
            continue;
        };
        let Some(value) = unique_entry_key(entry.id, constraint.id, &constraint.columns, row)
        else {
            continue;
        };
        if held.insert(value, key).is_some() {
            return Err(violation(entry, constraint, row, adding));
        }
    }
    Ok(())
}

/// After `ALTER TABLE name ADD … UNIQUE`, which rewrote every row of the
/// table into the transaction: its newest constraint holds among them.
pub(crate) fn check_added(gateway: &Gateway, session: &GatewaySession, name: &str) -> RsResult<()> {
    let entry = gateway.entry(session, name, None)?;
    let (Some(constraint), Some(table)) = (
        entry
            .indexes
            .iter()
            .max_by_key(|constraint| constraint.id)
            .filter(|index| index.unique),
        session
            .transaction
            .as_ref()
            .and_then(|transaction| transaction.tables.get(&entry.id)),
    ) else {
        return Ok(());
    };
    check_held(&entry, constraint, table, true)
}

/// PostgreSQL's error for a row whose values another row holds (the
/// engine's commit reports the same); `adding` the constraint, its error
/// for building the index.
pub(crate) fn violation(
    entry: &CatalogEntry,
    constraint: &TableIndex,
    row: &Row,
    adding: bool,
) -> RsError {
    let names: Vec<&str> = constraint
        .columns
        .iter()
        .map(|column| entry.columns[*column].name.as_str())
        .collect();
    let values: Vec<String> = constraint
        .columns
        .iter()
        .map(|column| row[*column].to_string())
        .collect();
    RsError::unique_violation(&entry.name, &constraint.name, &names, &values, adding)
}
