//! DDL inside transaction blocks (RFC 0002).
//!
//! A transaction block's `CREATE`s and `DROP`s are planned and checked when
//! they run, against the catalog as the transaction sees it, and recorded
//! in its [`PendingCatalog`]; nothing is written until `COMMIT`. The commit
//! writes its *intent* (the entries, marked with the transaction) to the
//! control database, builds the new materialized views, then commits the
//! transaction's rows in one epoch together with the record that the
//! transaction committed, on shard 0: that epoch is the commit point.
//! Finally the marks are cleared. A start resolves marked entries by the
//! record, so a crash anywhere leaves all of the transaction or none.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use rockstream_ops::keys::table_prefix;
use rockstream_runtime::{EventTime, LateRows, MaintainedIndex, StagedTable, TableChange};
use rockstream_types::{codes, ObjectId, RsError, RsResult};
use slatedb::WriteBatch;

use super::alter::AlteredTable;
use super::{already_exists, entry_json, name_is_free, version_at, Database};
use crate::catalog::{CatalogEntry, REWRITTEN_BY_PENDING};
use crate::follower::CatalogChange;
use crate::sequences::sequence_key;

/// For each table a transaction wrote, the row layout
/// ([`CatalogEntry::rewritten`]) of the version its rows were written for.
pub type TableLayouts = BTreeMap<ObjectId, u64>;

/// Set to `after_intent`, `after_install` or `after_commit_point`, aborts
/// the process at that step of a catalog transaction's commit (crash
/// tests).
pub const FAILPOINT_DDL_TRANSACTION: &str = "ROCKSTREAM_FAILPOINT_DDL_TRANSACTION";

/// The DDL a transaction block did, applied when it commits.
#[derive(Debug, Clone, Default)]
pub struct PendingCatalog {
    /// Objects it created, in creation order (dependency order).
    pub(super) created: Vec<CatalogEntry>,
    /// Committed objects it dropped.
    pub(super) dropped: Vec<CatalogEntry>,
    /// Committed tables it altered (RFC 0004).
    pub(super) altered: Vec<AlteredTable>,
    /// The committed versions of the relations its new views read, as they
    /// were planned over: another transaction must not have altered them
    /// by its COMMIT.
    pub(super) planned_over: Vec<CatalogEntry>,
}

impl PendingCatalog {
    pub fn is_empty(&self) -> bool {
        self.created.is_empty() && self.dropped.is_empty() && self.altered.is_empty()
    }

    /// `committed`, namespace `namespace`'s committed entries in creation
    /// order, as the transaction sees them.
    pub fn overlay(&self, namespace: &str, committed: Vec<CatalogEntry>) -> Vec<CatalogEntry> {
        let mut entries: Vec<CatalogEntry> = committed
            .into_iter()
            .filter(|entry| !self.dropped.iter().any(|gone| gone.id == entry.id))
            .map(
                |entry| match self.altered.iter().find(|table| table.after.id == entry.id) {
                    Some(table) => table.after.clone(),
                    None => entry,
                },
            )
            .collect();
        entries.extend(
            self.created
                .iter()
                .filter(|entry| entry.namespace == namespace)
                .cloned(),
        );
        entries
    }

    /// The materialized views this transaction created: they are built
    /// when it commits, so until then its reads evaluate their definitions.
    pub fn unbuilt_views(&self) -> impl Iterator<Item = ObjectId> + '_ {
        self.created
            .iter()
            .filter(|entry| entry.kind == crate::ObjectKind::MaterializedView)
            .map(|entry| entry.id)
    }

    fn dropped_ids(&self) -> HashSet<ObjectId> {
        self.dropped.iter().map(|entry| entry.id).collect()
    }
}

/// A catalog transaction whose commit a storage failure left unfinished:
/// finished before the next DDL statement (and on the next start).
pub(super) struct Unfinished {
    transaction: u64,
    pending: PendingCatalog,
    /// Whether it committed; `None` until its commit record is read.
    committed: Option<bool>,
}

impl Database {
    /// Commits a transaction block: its DDL (`pending`) and its rows
    /// (`changes`), all visible at once or, on failure, none of it.
    ///
    /// Readers see the catalog as of the catalog transaction their
    /// snapshot's epoch records (`Published::ddl_transaction`): the
    /// transaction's entries are in the in-memory catalog, marked, from its
    /// intent on, and appear (or its dropped ones disappear) for snapshots
    /// of its commit epoch and later, together with its rows.
    ///
    /// `layouts` gives, for each table `changes` writes, the layout its
    /// rows were written for: if another transaction has since rewritten
    /// the table for new columns, the commit fails (40001). A transaction
    /// that rewrites a table commits while no other commits rows, and only
    /// if no row committed since its snapshot escaped the rewrite.
    pub async fn commit_transaction(
        &self,
        namespace: &str,
        mut pending: PendingCatalog,
        mut changes: Vec<TableChange>,
        layouts: &TableLayouts,
    ) -> RsResult<LateRows> {
        if pending.is_empty() {
            if changes.is_empty() {
                return Ok(Vec::new());
            }
            let _layouts_stand = self.layouts.read().await;
            self.check_layouts(namespace, &pending, &changes, layouts)?;
            self.attach_indexes(namespace, &pending, &mut changes);
            return Ok(self.engine.commit(changes).await?.late_rows);
        }
        let _guard = self.ddl.lock().await;
        let rewrites = pending.altered.iter().any(|table| table.rewritten);
        let (_shared, _exclusive) = if rewrites {
            (None, Some(self.layouts.write().await))
        } else {
            (Some(self.layouts.read().await), None)
        };
        self.before_ddl().await?;
        self.still_valid(namespace, &pending, &changes)?;
        self.check_functions_stand(&pending.created)?;
        self.check_layouts(namespace, &pending, &changes, layouts)?;
        self.check_rewrites_complete(&pending, &changes).await?;
        self.attach_indexes(namespace, &pending, &mut changes);
        let transaction = self.next_counter().await?;
        for table in pending.altered.iter_mut() {
            if table.after.rewritten == REWRITTEN_BY_PENDING {
                table.after.rewritten = transaction;
            }
        }
        self.control.write(intent(transaction, &pending)?).await?;
        let dropped = pending.dropped_ids();
        // The catalog the transaction's new views were planned against.
        let mut catalog = pending.overlay(namespace, self.entries(namespace));
        catalog.retain(|entry| !pending.created.iter().any(|created| created.id == entry.id));
        self.mark_in_memory(transaction, &pending);
        failpoint("after_intent");
        let mut unfinished = Unfinished {
            transaction,
            pending,
            committed: None,
        };
        for entry in unfinished.pending.created.clone() {
            let change = CatalogChange::Created {
                entry: entry.clone(),
                catalog: catalog.clone(),
                replay: false,
            };
            if let Err(error) = self.follow(change).await {
                unfinished.committed = Some(false);
                let _ = self.finish(unfinished).await;
                return Err(error);
            }
            catalog.push(entry);
        }
        failpoint("after_install");
        changes.retain(|change| !dropped.contains(&change.table_id));
        let outcome = self
            .engine
            .commit_ddl_transaction(changes, transaction)
            .await;
        // A failure may have come after the coordinator's commit
        // (publishing, the engine stopping): then the record decides, once
        // the engine has recovered and published what is durable.
        unfinished.committed = outcome.is_ok().then_some(true);
        failpoint("after_commit_point");
        let finished = self.finish(unfinished).await;
        match (outcome, finished) {
            (Ok(committed), Err(error)) => {
                // Committed: clearing the marks is retried later.
                tracing::warn!(%error, "a committed catalog transaction is finalized later: storage failed");
                Ok(committed.late_rows)
            }
            (Ok(committed), Ok(_)) => Ok(committed.late_rows),
            // Committed, as the record says; its late rows were not told.
            (Err(_), Ok(true)) => Ok(Vec::new()),
            (Err(error), _) => Err(error),
        }
    }

    /// Commits the rows a transaction staged in the engine ([`TableChange`]s
    /// too large for memory, RFC 0007): inserts into one table (its id,
    /// name and the layout its rows are in), in `segments` segments of at
    /// most `segment_rows` rows, checked as any commit is (the table's
    /// layout and UNIQUE constraints as they are now). 40001 if the table
    /// was dropped meanwhile.
    pub async fn commit_staged(
        &self,
        namespace: &str,
        transaction: u64,
        (table_id, table_name, layout): (ObjectId, &str, u64),
        segments: u32,
        segment_rows: u32,
    ) -> RsResult<()> {
        let pending = PendingCatalog::default();
        let mut change = TableChange {
            table_id,
            table_name: table_name.to_owned(),
            rows: Vec::new(),
            indexes: Vec::new(),
            watermark: None,
            primary_key: Vec::new(),
        };
        let layouts: TableLayouts = [(table_id, layout)].into();
        let _layouts_stand = self.layouts.read().await;
        if !self.table_exists(namespace, table_id) {
            // (A DROP the engine serves before the commit makes it refuse
            // the commit the same way.)
            return Err(altered_concurrently(format!(
                "table \"{table_name}\" was dropped while COPY loaded it"
            )));
        }
        self.check_layouts(namespace, &pending, std::slice::from_ref(&change), &layouts)?;
        self.attach_indexes(namespace, &pending, std::slice::from_mut(&mut change));
        self.engine
            .commit_staged(
                transaction,
                StagedTable {
                    change,
                    segments,
                    step_rows: segment_rows,
                },
            )
            .await?;
        Ok(())
    }

    /// Whether table `table_id` is in the committed catalog.
    fn table_exists(&self, namespace: &str, table_id: ObjectId) -> bool {
        let catalog = self
            .catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let watermark = self.engine.published().ddl_transaction;
        catalog
            .iter()
            .filter(|entry| entry.id == table_id && entry.namespace == namespace)
            .any(|entry| version_at(entry, watermark).is_some())
    }

    /// Gives each of `changes` the indexes (RFC 0006, RFC 0014) and the
    /// watermark (RFC 0013) its table has as the transaction commits: the
    /// committed catalog's, or the transaction's own version of a table it
    /// created or altered.
    /// Called under the layouts lock, which adding an index takes alone.
    fn attach_indexes(
        &self,
        namespace: &str,
        pending: &PendingCatalog,
        changes: &mut [TableChange],
    ) {
        // Looked up by id under the catalog's lock, not copied whole: this
        // runs for every commit.
        let catalog = self
            .catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let watermark = self.engine.published().ddl_transaction;
        for change in changes {
            let own = pending
                .created
                .iter()
                .chain(pending.altered.iter().map(|table| &table.after))
                .find(|entry| entry.id == change.table_id);
            let committed = || {
                catalog
                    .iter()
                    .filter(|entry| entry.id == change.table_id && entry.namespace == namespace)
                    .find_map(|entry| super::version_at(entry, watermark))
            };
            let Some(entry) = own.or_else(committed) else {
                continue;
            };
            change.watermark = entry.event_time().map(|(column, delay_micros)| EventTime {
                column,
                delay_micros,
                staged: None,
            });
            change.primary_key = entry
                .primary_key
                .iter()
                .map(|position| (*position, entry.columns[*position].name.clone()))
                .collect();
            if entry.indexes.is_empty() {
                change.indexes.clear();
                continue;
            }
            let before = pending
                .altered
                .iter()
                .find(|table| table.after.id == change.table_id)
                .map(|table| &table.before);
            change.indexes = entry
                .indexes
                .iter()
                .map(|index| MaintainedIndex {
                    id: index.id,
                    name: index.name.clone(),
                    unique: index.unique,
                    columns: index.columns.clone(),
                    // Where the stored rows hold its columns; none when
                    // this transaction added it.
                    old_columns: match before {
                        Some(before) => before
                            .indexes
                            .iter()
                            .find(|old| old.id == index.id)
                            .map(|old| old.columns.clone()),
                        None => Some(index.columns.clone()),
                    },
                    column_names: index
                        .columns
                        .iter()
                        .map(|column| entry.columns[*column].name.clone())
                        .collect(),
                })
                .collect();
        }
    }

    /// Checks `pending` and the tables `changes` write against the
    /// committed catalog, which other sessions may have changed since the
    /// transaction planned its DDL and buffered its rows.
    fn still_valid(
        &self,
        namespace: &str,
        pending: &PendingCatalog,
        changes: &[TableChange],
    ) -> RsResult<()> {
        let committed = self.entries(namespace);
        let dropped = pending.dropped_ids();
        let exists = |id: &ObjectId| {
            (committed.iter().any(|entry| entry.id == *id) && !dropped.contains(id))
                || pending.created.iter().any(|entry| entry.id == *id)
        };
        for entry in &pending.dropped {
            if !committed.iter().any(|other| other.id == entry.id) {
                return Err(RsError::new(
                    &codes::UNDEFINED_OBJECT,
                    format!(
                        "{} \"{}\" was dropped by another transaction",
                        entry.kind.describe(),
                        entry.name
                    ),
                ));
            }
        }
        if let Some(dependent) = committed.iter().find(|entry| {
            !dropped.contains(&entry.id) && entry.dependencies.iter().any(|id| dropped.contains(id))
        }) {
            return Err(RsError::new(
                &codes::DEPENDENT_OBJECTS_EXIST,
                format!(
                    "cannot drop what this transaction dropped: {} \"{}\", created since by another transaction, depends on it",
                    dependent.kind.describe(),
                    dependent.name
                ),
            ));
        }
        // What stands once the transaction commits, but for what it creates.
        let standing: Vec<CatalogEntry> = committed
            .iter()
            .filter(|other| !dropped.contains(&other.id))
            .map(|other| {
                match pending
                    .altered
                    .iter()
                    .find(|table| table.after.id == other.id)
                {
                    Some(table) => table.after.clone(),
                    None => other.clone(),
                }
            })
            .collect();
        for entry in &pending.created {
            // Its name and its sequences' names, against what committed
            // meanwhile (a relation and a sequence share one namespace).
            if let Some(taken) = std::iter::once(entry.name.as_str())
                .chain(entry.owned_names())
                .find(|name| !name_is_free(&standing, name, true).unwrap_or(false))
            {
                return Err(already_exists(taken));
            }
            if !entry.dependencies.iter().all(exists) {
                return Err(RsError::new(
                    &codes::UNDEFINED_OBJECT,
                    format!(
                        "{} \"{}\" reads a relation another transaction dropped",
                        entry.kind.describe(),
                        entry.name
                    ),
                ));
            }
        }
        for planned in &pending.planned_over {
            if committed
                .iter()
                .any(|entry| entry.id == planned.id && !reads_alike(planned, entry))
            {
                return Err(altered_concurrently(format!(
                    "{} \"{}\" was altered by another transaction after this transaction planned a view over it",
                    planned.kind.describe(),
                    planned.name
                )));
            }
        }
        for table in &pending.altered {
            let name = &table.before.name;
            match committed.iter().find(|entry| entry.id == table.before.id) {
                None => {
                    return Err(RsError::new(
                        &codes::UNDEFINED_OBJECT,
                        format!("table \"{name}\" was dropped by another transaction"),
                    ))
                }
                Some(current) if *current != table.before => {
                    return Err(altered_concurrently(format!(
                        "table \"{name}\" was altered by another transaction"
                    )))
                }
                Some(_) => {}
            }
            if let Some(dependent) = standing
                .iter()
                .filter(|_| !reads_alike(&table.before, &table.after))
                .find(|entry| entry.dependencies.contains(&table.before.id))
            {
                return Err(RsError::new(
                    &codes::ALTER_WITH_DEPENDENTS,
                    format!(
                        "cannot alter table \"{name}\": {} \"{}\", created since by another transaction, depends on it",
                        dependent.kind.describe(),
                        dependent.name
                    ),
                ));
            }
            let others: Vec<CatalogEntry> = standing
                .iter()
                .filter(|entry| entry.id != table.before.id)
                .cloned()
                .collect();
            if let Some(taken) = std::iter::once(table.after.name.as_str())
                .chain(table.after.owned_names())
                .find(|name| !name_is_free(&others, name, true).unwrap_or(false))
            {
                return Err(already_exists(taken));
            }
        }
        if let Some(change) = changes
            .iter()
            .find(|change| !dropped.contains(&change.table_id) && !exists(&change.table_id))
        {
            return Err(RsError::new(
                &codes::UNDEFINED_OBJECT,
                format!(
                    "table \"{}\" was dropped by another transaction",
                    change.table_name
                ),
            ));
        }
        Ok(())
    }

    /// Checks that the rows of each table in `changes` were written for the
    /// table's current layout (see [`Database::commit_transaction`]);
    /// tables `pending` created or altered are the transaction's own.
    fn check_layouts(
        &self,
        namespace: &str,
        pending: &PendingCatalog,
        changes: &[TableChange],
        layouts: &TableLayouts,
    ) -> RsResult<()> {
        let catalog = self
            .catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Under the lock, as in `Database::published_with_entries`.
        let watermark = self.engine.published().ddl_transaction;
        for change in changes {
            let id = change.table_id;
            let Some(written_for) = layouts.get(&id) else {
                continue;
            };
            if pending.altered(id) || pending.created.iter().any(|entry| entry.id == id) {
                continue;
            }
            let current = catalog
                .iter()
                .filter(|entry| entry.id == id && entry.namespace == namespace)
                .find_map(|entry| version_at(entry, watermark));
            if current.is_some_and(|entry| entry.rewritten != *written_for) {
                return Err(altered_concurrently(format!(
                    "table \"{}\" was altered by another transaction after this one wrote to it",
                    change.table_name
                )));
            }
        }
        Ok(())
    }

    /// Checks that every row of each table `pending` rewrote for a new
    /// layout is in `changes`: a row another transaction committed after
    /// the rewrite read the table would keep the old layout. Runs while no
    /// other transaction commits rows.
    async fn check_rewrites_complete(
        &self,
        pending: &PendingCatalog,
        changes: &[TableChange],
    ) -> RsResult<()> {
        let snapshot = self.engine.published().snapshot;
        for table in pending.altered.iter().filter(|table| table.rewritten) {
            let id = table.after.id;
            let rewritten: BTreeSet<&[u8]> = changes
                .iter()
                .filter(|change| change.table_id == id)
                .flat_map(|change| &change.rows)
                .map(|row| row.key.as_slice())
                .collect();
            let prefix = table_prefix(id);
            let mut stored = snapshot.scan(prefix.clone(), None);
            loop {
                let chunk = stored.next_chunk().await?;
                if chunk.is_empty() {
                    break;
                }
                if chunk
                    .iter()
                    .any(|(key, _)| !rewritten.contains(&key[prefix.len()..]))
                {
                    return Err(altered_concurrently(format!(
                        "table \"{}\" gained rows from another transaction while this one altered its columns",
                        table.before.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// Puts the intent of `transaction` in the in-memory catalog: its new
    /// entries, and its dropped ones, marked with it (see
    /// [`Database::published_with_entries`] for what readers see of them).
    fn mark_in_memory(&self, transaction: u64, pending: &PendingCatalog) {
        let dropped = pending.dropped_ids();
        let mut catalog = self.catalog_mut();
        for entry in catalog.iter_mut() {
            if dropped.contains(&entry.id) {
                entry.dropping = true;
                entry.transaction = Some(transaction);
            }
        }
        catalog.extend(pending.created.iter().map(|entry| CatalogEntry {
            transaction: Some(transaction),
            ..entry.clone()
        }));
        for table in &pending.altered {
            if let Some(entry) = catalog.iter_mut().find(|entry| entry.id == table.after.id) {
                *entry = altered_intent(transaction, table);
            }
        }
    }

    /// Settles the in-memory catalog on a transaction's outcome: its marks
    /// cleared, and what it dropped (committed) or created (not) removed.
    fn settle_in_memory(&self, pending: &PendingCatalog, committed: bool) {
        let dropped = pending.dropped_ids();
        let created: HashSet<ObjectId> = pending.created.iter().map(|entry| entry.id).collect();
        let mut catalog = self.catalog_mut();
        let (gone, kept) = if committed {
            (dropped, created)
        } else {
            (created, dropped)
        };
        catalog.retain(|entry| !gone.contains(&entry.id));
        for entry in catalog.iter_mut() {
            if kept.contains(&entry.id) {
                entry.dropping = false;
                entry.transaction = None;
            }
            if let Some(table) = pending
                .altered
                .iter()
                .find(|table| table.after.id == entry.id)
            {
                *entry = if committed {
                    table.after.clone()
                } else {
                    table.before.clone()
                };
            }
        }
    }

    /// Finishes a catalog transaction whose commit a storage failure left
    /// unfinished, if there is one; until that succeeds, DDL is refused.
    pub(super) async fn resolve_unfinished_transaction(&self) -> RsResult<()> {
        let unfinished = self
            .unfinished_transaction
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        match unfinished {
            Some(unfinished) => self.finish(unfinished).await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// Ends `unfinished` as its outcome says (reading its commit record if
    /// need be): committed, its marks are cleared and what it dropped is
    /// reclaimed; not, its intent is undone. Returns whether it committed.
    /// On failure it is kept for [`Database::resolve_unfinished_transaction`].
    async fn finish(&self, mut unfinished: Unfinished) -> RsResult<bool> {
        let result = self.try_finish(&mut unfinished).await;
        if result.is_err() {
            *self
                .unfinished_transaction
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(unfinished);
        }
        result
    }

    async fn try_finish(&self, unfinished: &mut Unfinished) -> RsResult<bool> {
        let committed = match unfinished.committed {
            Some(committed) => committed,
            None => {
                // An epoch commits only once the engine has recovered its
                // storage: then it has read the record of the last
                // transaction that committed (transactions commit one at a
                // time, in the order of their ids).
                self.engine.commit(Vec::new()).await?;
                let committed = self.engine.published().ddl_transaction >= unfinished.transaction;
                unfinished.committed = Some(committed);
                committed
            }
        };
        let pending = &unfinished.pending;
        self.settle_in_memory(pending, committed);
        if !committed {
            self.roll_back(pending).await?;
            return Ok(false);
        }
        let mut marks = WriteBatch::new();
        for entry in &pending.created {
            marks.put(entry.key(), entry_json(entry)?);
        }
        for entry in &pending.dropped {
            let dropping = CatalogEntry {
                dropping: true,
                ..entry.clone()
            };
            marks.put(entry.key(), entry_json(&dropping)?);
        }
        let mut dropped_sequences = Vec::new();
        for table in &pending.altered {
            marks.put(table.after.key(), entry_json(&table.after)?);
            dropped_sequences.extend(sequences_gone(&table.before, &table.after));
        }
        for id in &dropped_sequences {
            marks.delete(sequence_key(*id));
        }
        self.control.write(marks).await?;
        self.sequences.forget(&dropped_sequences);
        self.drop_in_background(pending.dropped.iter().rev().cloned().collect())
            .await;
        Ok(true)
    }

    /// Undoes a transaction's intent in one durable write: the objects it
    /// created become dropped ones (their state, a view's build included,
    /// reclaimed as any DROP's), the ones it dropped are restored.
    async fn roll_back(&self, pending: &PendingCatalog) -> RsResult<()> {
        let mut undo = WriteBatch::new();
        for entry in &pending.created {
            let dropping = CatalogEntry {
                dropping: true,
                ..entry.clone()
            };
            undo.put(entry.key(), entry_json(&dropping)?);
        }
        for entry in &pending.dropped {
            undo.put(entry.key(), entry_json(entry)?);
        }
        let mut added_sequences = Vec::new();
        for table in &pending.altered {
            undo.put(table.before.key(), entry_json(&table.before)?);
            added_sequences.extend(sequences_gone(&table.after, &table.before));
        }
        for id in &added_sequences {
            undo.delete(sequence_key(*id));
        }
        self.control.write(undo).await?;
        self.sequences.forget(&added_sequences);
        self.drop_in_background(pending.created.iter().rev().cloned().collect())
            .await;
        Ok(())
    }
}

/// The control-database batch stating that `transaction` creates and drops
/// `pending`'s entries, to be resolved by its commit record.
fn intent(transaction: u64, pending: &PendingCatalog) -> RsResult<WriteBatch> {
    let mut batch = WriteBatch::new();
    for entry in &pending.created {
        let marked = CatalogEntry {
            transaction: Some(transaction),
            ..entry.clone()
        };
        batch.put(entry.key(), entry_json(&marked)?);
    }
    for entry in &pending.dropped {
        let marked = CatalogEntry {
            dropping: true,
            transaction: Some(transaction),
            ..entry.clone()
        };
        batch.put(entry.key(), entry_json(&marked)?);
    }
    for table in &pending.altered {
        batch.put(
            table.after.key(),
            entry_json(&altered_intent(transaction, table))?,
        );
    }
    Ok(batch)
}

/// The entry of a table `transaction` alters while it is in doubt: the
/// new version, which keeps the one it replaces.
fn altered_intent(transaction: u64, table: &AlteredTable) -> CatalogEntry {
    CatalogEntry {
        transaction: Some(transaction),
        previous: Some(Box::new(table.before.clone())),
        ..table.after.clone()
    }
}

/// The sequences `from`'s columns own that `to`'s do not (a dropped
/// column's, or, undoing an ADD COLUMN, an added one's).
fn sequences_gone(from: &CatalogEntry, to: &CatalogEntry) -> Vec<ObjectId> {
    let kept: HashSet<ObjectId> = to
        .columns
        .iter()
        .filter_map(|column| column.sequence.as_ref().map(|sequence| sequence.id))
        .collect();
    from.columns
        .iter()
        .filter_map(|column| column.sequence.as_ref().map(|sequence| sequence.id))
        .filter(|id| !kept.contains(id))
        .collect()
}

/// Whether a view reads `after` as it read `before`: they differ at most in
/// their columns' defaults and their UNIQUE constraints (with the rewrite
/// adding one takes), which only writes use.
fn reads_alike(before: &CatalogEntry, after: &CatalogEntry) -> bool {
    let without_defaults = |entry: &CatalogEntry| CatalogEntry {
        columns: entry
            .columns
            .iter()
            .map(|column| crate::catalog::ColumnDef {
                default: None,
                ..column.clone()
            })
            .collect(),
        indexes: Vec::new(),
        next_index_id: 0,
        functions: Vec::new(),
        rewritten: 0,
        ..entry.clone()
    };
    without_defaults(before) == without_defaults(after)
}

fn altered_concurrently(message: String) -> RsError {
    RsError::new(&codes::TABLE_ALTERED_CONCURRENTLY, message)
}

/// Resolves the entries a crash left marked with their catalog transaction
/// (at most one transaction, RFC 0002 §3): committed if the coordinator's
/// record names it, else undone; durably, before the catalog is replayed.
/// Returns the entries as they now stand.
pub(super) async fn resolve_in_doubt(
    database: &Database,
    entries: Vec<CatalogEntry>,
) -> RsResult<Vec<CatalogEntry>> {
    if entries.iter().all(|entry| entry.transaction.is_none()) {
        return Ok(entries);
    }
    let record = database.engine.published().ddl_transaction;
    let mut batch = WriteBatch::new();
    let mut resolved = Vec::with_capacity(entries.len());
    for entry in entries {
        let Some(transaction) = entry.transaction else {
            resolved.push(entry);
            continue;
        };
        let committed = record >= transaction;
        let entry = match entry.previous {
            // Altered: the new version or the one it replaced.
            Some(previous) if !committed => CatalogEntry {
                transaction: None,
                ..*previous
            },
            Some(_) => CatalogEntry {
                transaction: None,
                previous: None,
                ..entry
            },
            None => CatalogEntry {
                transaction: None,
                // Undone: what it created goes, what it dropped stays.
                dropping: if committed {
                    entry.dropping
                } else {
                    !entry.dropping
                },
                ..entry
            },
        };
        tracing::info!(
            object = %entry.name,
            transaction,
            committed,
            "resolved a catalog transaction a crash interrupted"
        );
        batch.put(entry.key(), entry_json(&entry)?);
        resolved.push(entry);
    }
    database.control.write(batch).await?;
    Ok(resolved)
}

/// Aborts the process at `step` when [`FAILPOINT_DDL_TRANSACTION`] names it.
fn failpoint(step: &str) {
    if std::env::var(FAILPOINT_DDL_TRANSACTION).is_ok_and(|armed| armed == step) {
        tracing::error!(
            step,
            "failpoint: aborting in a catalog transaction's commit"
        );
        std::process::abort();
    }
}
