//! Index entries at commit: UNIQUE constraints checked (RFC 0006), plain
//! indexes kept in step (RFC 0014).
//!
//! Each UNIQUE constraint keeps one entry per row whose constrained
//! columns are all non-NULL, `0x09 table constraint values -> row key`, on
//! the shard of its values. Commits run one at a time, each over the state
//! its predecessors in the epoch left, so a commit that finds every entry
//! it adds free, or held by a row it removes the entry of, cannot race
//! another: this check is the constraint's authority. The gateway's
//! statement-time probes only report a violation earlier.
//!
//! A plain index keeps one entry per row, `0x0A table index values row_key
//! -> ()`, on the shard of its leading value. Its entries hold their row's
//! key, so two rows never share one: keeping them needs no read.

use std::collections::HashMap;

use rockstream_ops::keys::{self, INDEX_ENTRIES, UNIQUE_ENTRIES};
use rockstream_ops::{StateRead, StateStore};
use rockstream_storage::EpochStore;
use rockstream_types::partition::BucketMap;
use rockstream_types::{Datum, RsError, RsResult};

use crate::engine::{MaintainedIndex, TableChange};

/// The entry writes a transaction's changes make, per shard: `Some(row
/// key)` to put, `None` to delete.
pub(super) type EntryWrites = Vec<(usize, Vec<u8>, Option<Vec<u8>>)>;

/// Checks that `changes` leave every UNIQUE constraint of their tables
/// holding, against `stores` (the epoch's state so far); returns the entry
/// writes that keep their indexes' entries in step. Reads only.
pub(super) async fn check(
    stores: &[EpochStore],
    map: &BucketMap,
    changes: &[TableChange],
) -> RsResult<EntryWrites> {
    let mut writes = EntryWrites::new();
    for change in changes {
        for index in &change.indexes {
            if index.unique {
                check_index(stores, map, change, index, &mut writes).await?;
            } else {
                plain_entries(map, change, index, &mut writes);
            }
        }
    }
    Ok(writes)
}

/// The entry writes of one table's rows for plain index `index`: a row's
/// old entry goes and its new one comes, unless they are the same.
fn plain_entries(
    map: &BucketMap,
    change: &TableChange,
    index: &MaintainedIndex,
    writes: &mut EntryWrites,
) {
    let entry = |columns: &[usize], row: &[Datum], row_key: &[u8]| {
        keys::index_entry_key(change.table_id, index.id, columns, row, row_key)
    };
    for row in &change.rows {
        let old = match (&row.old, &index.old_columns) {
            (Some(old), Some(columns)) => Some(entry(columns, old, &row.key)),
            _ => None,
        };
        let new = row
            .new
            .as_ref()
            .map(|new| entry(&index.columns, new, &row.key));
        if old == new {
            continue;
        }
        if let Some(old) = old {
            writes.push((shard_of(map, &old), old, None));
        }
        if let Some(new) = new {
            writes.push((shard_of(map, &new), new, Some(Vec::new())));
        }
    }
}

/// An entry a row takes: its key, the row's key, and the row.
type Added<'a> = (Vec<u8>, &'a [u8], &'a [Datum]);

/// The entry changes of one table's rows for one constraint.
struct EntryChanges<'a> {
    /// Entries the rows give up, with the row each belonged to.
    removed: HashMap<Vec<u8>, &'a [u8]>,
    added: Vec<Added<'a>>,
}

fn entry_changes<'a>(change: &'a TableChange, index: &MaintainedIndex) -> EntryChanges<'a> {
    let mut entries = EntryChanges {
        removed: HashMap::new(),
        added: Vec::new(),
    };
    for row in &change.rows {
        let old = match (&row.old, &index.old_columns) {
            (Some(old), Some(columns)) => {
                keys::unique_entry_key(change.table_id, index.id, columns, old)
            }
            _ => None,
        };
        let new = row.new.as_ref().and_then(|new| {
            keys::unique_entry_key(change.table_id, index.id, &index.columns, new)
                .map(|key| (key, new.as_slice()))
        });
        if old.is_some() && old.as_ref() == new.as_ref().map(|(key, _)| key) {
            continue;
        }
        if let Some(old) = old {
            entries.removed.insert(old, &row.key);
        }
        if let Some((key, values)) = new {
            entries.added.push((key, &row.key, values));
        }
    }
    entries
}

async fn check_index(
    stores: &[EpochStore],
    map: &BucketMap,
    change: &TableChange,
    index: &MaintainedIndex,
    writes: &mut EntryWrites,
) -> RsResult<()> {
    let EntryChanges { removed, added } = entry_changes(change, index);
    let mut taken: HashMap<&[u8], &[u8]> = HashMap::with_capacity(added.len());
    for (key, row_key, values) in &added {
        if taken.insert(key, row_key).is_some() {
            return Err(violation(&change.table_name, index, values));
        }
    }
    // Entries held in storage by a row this change does not take them from.
    let unclaimed: Vec<&Added> = added
        .iter()
        .filter(|(key, _, _)| !removed.contains_key(key))
        .collect();
    let mut by_shard: HashMap<usize, Vec<&Added>> = HashMap::new();
    for entry in unclaimed {
        by_shard
            .entry(shard_of(map, &entry.0))
            .or_default()
            .push(entry);
    }
    for (shard, entries) in by_shard {
        let keys: Vec<&[u8]> = entries.iter().map(|(key, _, _)| key.as_slice()).collect();
        let owners = stores[shard].get_many(&keys).await?;
        for ((_, row_key, values), owner) in entries.into_iter().zip(owners) {
            if owner.is_some_and(|owner| owner != *row_key) {
                return Err(violation(&change.table_name, index, values));
            }
        }
    }
    for key in removed.into_keys() {
        if !taken.contains_key(key.as_slice()) {
            writes.push((shard_of(map, &key), key, None));
        }
    }
    for (key, row_key, _) in added {
        writes.push((shard_of(map, &key), key, Some(row_key.to_vec())));
    }
    Ok(())
}

/// Applies checked entry writes ([`check`]).
pub(super) fn apply(stores: &mut [EpochStore], writes: EntryWrites) {
    for (shard, key, row_key) in writes {
        match row_key {
            Some(row_key) => stores[shard].put(key, row_key),
            None => stores[shard].delete(key),
        }
    }
}

fn shard_of(map: &BucketMap, key: &[u8]) -> usize {
    debug_assert!(matches!(
        key.first(),
        Some(&(UNIQUE_ENTRIES | INDEX_ENTRIES))
    ));
    keys::partition_key(key).map_or(0, |partition| usize::from(map.shard_of(partition)))
}

/// PostgreSQL's error for a row whose values another row holds; for a
/// constraint being added, its error for building the index.
pub(crate) fn violation(table: &str, index: &MaintainedIndex, row: &[Datum]) -> RsError {
    let values: Vec<String> = index
        .columns
        .iter()
        .map(|column| row[*column].to_string())
        .collect();
    let columns: Vec<&str> = index.column_names.iter().map(String::as_str).collect();
    RsError::unique_violation(
        table,
        &index.name,
        &columns,
        &values,
        index.old_columns.is_none(),
    )
}
