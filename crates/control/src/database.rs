//! `Database`: storage, catalog, engine and follower of one server.

use std::sync::Arc;

use rockstream_common::{commit_log_root, object_store_for, Runtime};
use rockstream_planner::{new_context, schema_of, PlanOptions};
use rockstream_runtime::{Engine, Published};
use rockstream_storage::{storage_error, CommitLogs, ShardDb, StorageLock};
use rockstream_types::partition::BucketMap;
use rockstream_types::{codes, ObjectId, RsError, RsResult, SqlType};
use slatedb::{Db, WriteBatch};
use tokio::sync::{oneshot, Mutex, RwLock};

use crate::catalog::{
    nextval_expression, CatalogEntry, ColumnDef, Identity, ObjectKind, OwnedSequence, TableIndex,
    WatermarkDef, NEXT_ID_KEY,
};
use crate::control_db::{ControlDb, CONTROL_PATH};
use crate::follower::{self, CatalogChange, FollowerSender};
use crate::functions::{function_key, Functions};
use crate::namespaces::{namespace_key, Attachment, Namespaces};
use crate::resolver::{plan_inline_view, plan_materialized_view, CatalogResolver};
use crate::roles::{undefined_role, Role, RoleChange, Roles};
use crate::sequences::{sequence_key, Sequences};

mod alter;
mod function_ddl;
mod transaction;

pub use alter::{Alteration, Altered};
pub use rockstream_runtime::LateRows;
pub use transaction::{PendingCatalog, TableLayouts, FAILPOINT_DDL_TRANSACTION};

/// The control-database key of the storage's bucket map, which also
/// records its shard count (outside the catalog's `0x01` range).
const BUCKET_MAP_KEY: [u8; 3] = [0x02, b'B', b'M'];

/// How a storage is opened.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// Shards of a new storage (an existing one keeps its count).
    pub shards: u16,
    /// Bound on each shard's arrangement cache (0: none).
    pub arrangement_cache_bytes: usize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            shards: 1,
            arrangement_cache_bytes: rockstream_storage::ARRANGEMENT_CACHE_BYTES_DEFAULT,
        }
    }
}

pub struct Database {
    control: ControlDb,
    /// Entries in creation order (which is dependency order).
    catalog: std::sync::RwLock<Vec<CatalogEntry>>,
    engine: Engine,
    follower: FollowerSender,
    ddl: Mutex<()>,
    /// Dropped objects whose catalog marks are durable (the DROP happened)
    /// but whose removal from the engine failed with storage: retried
    /// before the next DDL statement, else finished on the next start.
    unfinished_drops: std::sync::Mutex<Vec<CatalogEntry>>,
    /// Objects of failed CREATEs whose catalog entries are written but not
    /// yet marked as dropping (storage failed that write too): marked, then
    /// dropped, before the next DDL statement runs, which fails until that
    /// is possible. A restart before that brings them back, as it does an
    /// object whose CREATE a crash interrupted.
    unfinished_creates: std::sync::Mutex<Vec<CatalogEntry>>,
    /// A catalog transaction whose commit storage failed to finish: ended
    /// before the next DDL statement runs (RFC 0002).
    unfinished_transaction: std::sync::Mutex<Option<transaction::Unfinished>>,
    /// Serializes id allocations (read, then write, the counter).
    ids: Mutex<()>,
    /// Held shared by every commit of rows, exclusively by a commit that
    /// rewrites a table for new columns (RFC 0004): rows written for a
    /// table's old layout commit before the rewrite is checked, or are
    /// checked against its new layout after it.
    layouts: RwLock<()>,
    sequences: Sequences,
    roles: Roles,
    namespaces: Arc<Namespaces>,
    /// SQL functions, which views are planned with (shared with the
    /// follower).
    functions: Arc<Functions>,
    /// The storage's lock (local storage): held while the catalog and the
    /// shards are open; declared last, so it is released last.
    _lock: Option<Arc<StorageLock>>,
}

impl Database {
    /// Opens or creates the storage at `location` and replays the catalog.
    /// A new storage gets `shards` shards; an existing one keeps the count
    /// it was created with (and says so when `shards` differs).
    pub async fn open(location: &str, runtime: Runtime, shards: u16) -> RsResult<Arc<Database>> {
        let options = OpenOptions {
            shards,
            ..OpenOptions::default()
        };
        Database::open_with(location, runtime, options).await
    }

    /// [`Database::open`] with every setting.
    pub async fn open_with(
        location: &str,
        runtime: Runtime,
        options: OpenOptions,
    ) -> RsResult<Arc<Database>> {
        let OpenOptions {
            shards,
            arrangement_cache_bytes,
        } = options;
        let store = object_store_for(location)?;
        // One process at a time: the lock is taken before anything of the
        // storage is opened (RFC 0019).
        let logs = match commit_log_root(location)? {
            Some(root) => Some(CommitLogs::open(root).await?),
            None => None,
        };
        let control = ControlDb::open(store.clone()).await?;
        let control_db = control.db().await?;
        let map = Arc::new(bucket_map(&control_db, shards).await?);
        let shards = ShardDb::open_all(
            store,
            map.shard_count(),
            arrangement_cache_bytes,
            logs.as_ref(),
        )
        .await?;
        let engine = Engine::start(&runtime, shards, map).await?;
        let functions = Arc::new(Functions::load(&control_db).await?);
        let follower = follower::start(&runtime, engine.clone(), functions.clone());
        let entries = load_entries(&control_db).await?;
        let sequences = Sequences::load(&control_db).await?;
        let roles = Roles::load(&control_db).await?;
        let namespaces = Namespaces::load(&control_db).await?;
        let database = Arc::new(Database {
            _lock: logs.map(|logs| logs.lock),
            control,
            catalog: std::sync::RwLock::new(Vec::new()),
            engine,
            follower,
            ddl: Mutex::new(()),
            unfinished_drops: std::sync::Mutex::new(Vec::new()),
            unfinished_creates: std::sync::Mutex::new(Vec::new()),
            unfinished_transaction: std::sync::Mutex::new(None),
            ids: Mutex::new(()),
            layouts: RwLock::new(()),
            sequences,
            roles,
            namespaces,
            functions,
        });
        let mut entries = transaction::resolve_in_doubt(&database, entries).await?;
        // An object of a namespace that is gone goes too: a DROP DATABASE
        // whose write storage reported failed yet kept left the namespace
        // in use, and objects created in it then were never marked.
        for entry in &mut entries {
            if !database.namespaces.contains(&entry.namespace) {
                entry.dropping = true;
            }
        }
        // Dependents first, as DROP ... CASCADE removes them.
        let dropping: Vec<CatalogEntry> = entries
            .iter()
            .rev()
            .filter(|entry| entry.dropping)
            .cloned()
            .collect();
        if !dropping.is_empty() {
            database.finish_drop(dropping).await?;
        }
        for entry in entries.into_iter().filter(|entry| !entry.dropping) {
            let catalog = database.entries(&entry.namespace);
            database.catalog_mut().push(entry.clone());
            database
                .follow(CatalogChange::Created {
                    entry,
                    catalog,
                    replay: true,
                })
                .await?;
        }
        // Every view is installed: a large transaction whose commit a
        // crash cut short is completed before anyone reads (RFC 0007).
        database.engine.finish_staged().await?;
        Ok(database)
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The counters of `SERIAL` and identity columns.
    pub fn sequences(&self) -> &Sequences {
        &self.sequences
    }

    /// Makes durable that no sequence value handed out so far is handed
    /// out again: before a statement that drew values returns, and before
    /// rows holding them commit.
    pub async fn persist_sequences(&self) -> RsResult<()> {
        self.sequences.persist(&self.control).await
    }

    /// `TRUNCATE … RESTART IDENTITY`, once its transaction committed: each
    /// sequence goes on from the value the transaction would hand out next
    /// (sequences of tables dropped meanwhile are left alone).
    pub async fn restart_sequences(
        &self,
        namespace: &str,
        restarted: &[(ObjectId, i128)],
    ) -> RsResult<()> {
        // Every commit comes here; almost none restarts a sequence, and
        // listing the catalog copies every entry of the namespace.
        if restarted.is_empty() {
            return Ok(());
        }
        let entries = self.entries(namespace);
        let standing: Vec<(ObjectId, i128)> = restarted
            .iter()
            .filter(|(id, _)| {
                entries
                    .iter()
                    .flat_map(|entry| &entry.columns)
                    .any(|column| {
                        column
                            .sequence
                            .as_ref()
                            .is_some_and(|sequence| sequence.id == *id)
                    })
            })
            .copied()
            .collect();
        self.sequences.restart(&self.control, &standing).await
    }

    /// The role named `name`, if there is one.
    pub fn role(&self, name: &str) -> Option<Role> {
        self.roles.get(name)
    }

    /// Every role, by name.
    pub fn roles(&self) -> Vec<Role> {
        self.roles.all()
    }

    /// `CREATE ROLE` (durable when it returns).
    pub async fn create_role(&self, role: Role) -> RsResult<()> {
        self.roles.create(&self.control, role).await
    }

    /// `ALTER ROLE name …`.
    pub async fn alter_role(&self, name: &str, change: RoleChange) -> RsResult<()> {
        self.roles.alter(&self.control, name, change).await
    }

    /// `DROP ROLE [IF EXISTS] name`.
    pub async fn drop_role(&self, name: &str, if_exists: bool) -> RsResult<()> {
        if self.roles.drop(&self.control, name).await? || if_exists {
            return Ok(());
        }
        Err(undefined_role(name))
    }

    /// A session connects to `namespace` (3D000 if there is none); the
    /// namespace cannot be dropped while the attachment lives.
    pub fn attach(&self, namespace: &str) -> RsResult<Attachment> {
        self.namespaces.attach(namespace)
    }

    /// Every namespace, by name.
    pub fn namespaces(&self) -> Vec<String> {
        self.namespaces.names()
    }

    /// `CREATE DATABASE` (durable when it returns): 42P04 if it exists.
    pub async fn create_namespace(&self, name: &str) -> RsResult<()> {
        let _guard = self.ddl.lock().await;
        self.namespaces.check_absent(name)?;
        self.durable_put(&namespace_key(name), name.as_bytes())
            .await?;
        self.namespaces.insert(name);
        Ok(())
    }

    /// `DROP DATABASE`: the namespace and every object in it, in one atomic
    /// write (their state is reclaimed after it, on the next start if the
    /// server stops first). Refused while a session is connected to it.
    /// Returns false if there is no such namespace.
    pub async fn drop_namespace(&self, name: &str) -> RsResult<bool> {
        let _guard = self.ddl.lock().await;
        let Some(dropping) = self.namespaces.begin_drop(name)? else {
            return Ok(false);
        };
        self.before_ddl().await?;
        let doomed = self.entries(name);
        let mut batch = dropping_marks(&doomed)?;
        batch.delete(namespace_key(name));
        for function in self.functions.entries(name) {
            batch.delete(function_key(name, &function.name));
        }
        self.control.write(batch).await?;
        self.functions.remove_namespace(name);
        dropping.done();
        self.catalog_mut().retain(|entry| entry.namespace != name);
        // Dependents first, as DROP ... CASCADE removes them.
        self.drop_in_background(doomed.into_iter().rev().collect())
            .await;
        Ok(true)
    }

    /// Every object of a namespace, in creation order, as the newest
    /// published state sees them.
    pub fn entries(&self, namespace: &str) -> Vec<CatalogEntry> {
        self.published_with_entries(namespace).1
    }

    /// The newest published state and every object of a namespace as that
    /// state's readers see them ([`entries_of`]), read as one: a
    /// catalog transaction settles its entries (clears its marks, removes
    /// what it dropped) only after its commit epoch is published, and
    /// under the catalog's lock, so a reader holding the lock either finds
    /// the marks or a published state that already holds the commit.
    /// Reading the two apart would let a settled entry join an older
    /// snapshot: a new table without the rows committed with it.
    pub fn published_with_entries(&self, namespace: &str) -> (Published, Vec<CatalogEntry>) {
        let catalog = self
            .catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let published = self.engine.published();
        let entries = entries_of(&catalog, namespace, published.ddl_transaction);
        (published, entries)
    }

    /// The object `name` of `namespace` as [`Self::entries`] gives it,
    /// without copying the others: every statement looks its tables up.
    pub fn lookup(&self, namespace: &str, name: &str) -> Option<CatalogEntry> {
        let catalog = self
            .catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        entry_of(
            &catalog,
            namespace,
            name,
            self.engine.published().ddl_transaction,
        )
    }

    fn catalog_mut(&self) -> std::sync::RwLockWriteGuard<'_, Vec<CatalogEntry>> {
        self.catalog
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `CREATE TABLE`. Returns false when it existed and `if_not_exists`.
    pub async fn create_table(&self, namespace: &str, table: NewTable<'_>) -> RsResult<bool> {
        let _guard = self.ddl.lock().await;
        self.before_ddl().await?;
        let catalog = self.entries(namespace);
        let Some(entry) = self.table_entry(&catalog, namespace, table).await? else {
            return Ok(false);
        };
        self.commit_created(entry).await?;
        Ok(true)
    }

    /// `CREATE TABLE` inside a transaction block: recorded in `pending`,
    /// created when the transaction commits (RFC 0002).
    pub async fn create_table_in(
        &self,
        pending: &mut PendingCatalog,
        namespace: &str,
        table: NewTable<'_>,
    ) -> RsResult<bool> {
        let catalog = pending.overlay(namespace, self.entries(namespace));
        let Some(entry) = self.table_entry(&catalog, namespace, table).await? else {
            return Ok(false);
        };
        pending.created.push(entry);
        Ok(true)
    }

    /// The entry of a new table in `catalog`; `None` when the name is taken
    /// and `if_not_exists`.
    async fn table_entry(
        &self,
        catalog: &[CatalogEntry],
        namespace: &str,
        table: NewTable<'_>,
    ) -> RsResult<Option<CatalogEntry>> {
        let NewTable {
            name,
            mut columns,
            primary_key,
            generated,
            unique,
            watermark,
            if_not_exists,
        } = table;
        if !name_is_free(catalog, name, if_not_exists)? {
            return Ok(None);
        }
        for column in &columns {
            column.sql_type()?;
        }
        if let Some(watermark) = &watermark {
            check_watermark(name, &columns, watermark)?;
        }
        for generated in generated {
            self.attach_sequence(catalog, name, &mut columns, generated)
                .await?;
        }
        let id = self.allocate_id().await?;
        let mut entry = CatalogEntry {
            primary_key,
            watermark,
            ..CatalogEntry::new(id, (namespace, name), ObjectKind::Table, columns)
        };
        for declared in unique {
            add_index(catalog, &mut entry, declared)?;
        }
        Ok(Some(entry))
    }

    /// Gives column `generated.column` of table `table` (columns
    /// `columns`, in `catalog`) a sequence of its own, named as PostgreSQL
    /// names it (`t_c_seq`, else `t_c_seq1`, …).
    async fn attach_sequence(
        &self,
        catalog: &[CatalogEntry],
        table: &str,
        columns: &mut [ColumnDef],
        generated: Generated,
    ) -> RsResult<()> {
        let Generated { column, identity } = generated;
        let taken = |candidate: &str| {
            !name_is_free(catalog, candidate, true).unwrap_or(false)
                || candidate == table
                || columns.iter().any(|column| {
                    column
                        .sequence
                        .as_ref()
                        .is_some_and(|sequence| sequence.name == candidate)
                })
        };
        let Some(target) = columns.get(column) else {
            return Err(RsError::internal("generated column out of range"));
        };
        let sequence_name = free_name(&format!("{table}_{}_seq", target.name), taken);
        let id = self.allocate_id().await?;
        let target = &mut columns[column];
        if identity.is_none() {
            target.default = Some(nextval_expression(&sequence_name));
        }
        target.not_null = true;
        target.sequence = Some(OwnedSequence {
            id,
            name: sequence_name,
            identity,
        });
        Ok(())
    }

    /// `CREATE [MATERIALIZED] VIEW name AS query`. Returns false when it
    /// existed and `if_not_exists`.
    pub async fn create_view(&self, namespace: &str, view: NewView<'_>) -> RsResult<bool> {
        let _guard = self.ddl.lock().await;
        self.before_ddl().await?;
        let catalog = self.entries(namespace);
        let Some(entry) = self.view_entry(catalog, namespace, view).await? else {
            return Ok(false);
        };
        self.commit_created(entry).await?;
        Ok(true)
    }

    /// `CREATE [MATERIALIZED] VIEW` inside a transaction block: planned
    /// now, created (and a materialized view built) when the transaction
    /// commits (RFC 0002).
    pub async fn create_view_in(
        &self,
        pending: &mut PendingCatalog,
        namespace: &str,
        view: NewView<'_>,
    ) -> RsResult<bool> {
        let committed = self.entries(namespace);
        let catalog = pending.overlay(namespace, committed.clone());
        let Some(entry) = self.view_entry(catalog, namespace, view).await? else {
            return Ok(false);
        };
        let reads: Vec<CatalogEntry> = committed
            .into_iter()
            .filter(|read| {
                entry.dependencies.contains(&read.id)
                    && !pending.altered(read.id)
                    && !pending.planned_over.iter().any(|seen| seen.id == read.id)
            })
            .collect();
        pending.planned_over.extend(reads);
        if let Some(table) = pending.altered.iter().find(|table| {
            table.rewritten
                && entry.kind == ObjectKind::MaterializedView
                && entry.dependencies.contains(&table.after.id)
        }) {
            // Its build at COMMIT would read the table's committed rows,
            // which have the old columns until the commit rewrites them.
            return Err(RsError::new(
                &codes::ALTER_WITH_DEPENDENTS,
                format!(
                    "cannot create materialized view \"{}\" over table \"{}\" in the transaction that added or dropped its columns; commit the ALTER TABLE first",
                    entry.name, table.after.name
                ),
            ));
        }
        pending.created.push(entry);
        Ok(true)
    }

    /// The entry of a new view planned over `catalog`; `None` when the
    /// name is taken and `if_not_exists`.
    async fn view_entry(
        &self,
        catalog: Vec<CatalogEntry>,
        namespace: &str,
        view: NewView<'_>,
    ) -> RsResult<Option<CatalogEntry>> {
        let NewView {
            name,
            query,
            column_names,
            materialized,
            emit_on_window_close,
            if_not_exists,
        } = view;
        if !name_is_free(&catalog, name, if_not_exists)? {
            return Ok(None);
        }
        if emit_on_window_close && !materialized {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                format!(
                    "EMIT ON WINDOW CLOSE applies to materialized views only; \"{name}\" is a view"
                ),
            ));
        }
        if !materialized && rockstream_planner::uses_bag_set_operation(query) {
            return Err(RsError::unsupported(
                "EXCEPT ALL / INTERSECT ALL in a (non-materialized) view",
            ));
        }
        let id = self.allocate_id().await?;
        // The ids of the functions it calls, from the same snapshot it is
        // planned with: a replacement meanwhile fails its COMMIT.
        let functions = self.functions.planned(namespace);
        let called = rockstream_planner::called_functions(query, &functions);
        let called: Vec<ObjectId> = functions
            .iter()
            .filter(|function| called.contains(&function.name))
            .map(|function| function.id)
            .collect();
        let resolver = CatalogResolver::new(catalog.clone(), functions);
        let (schema, output_key, state_layout) = if materialized {
            let context = new_context(resolver.clone());
            let planned = plan_materialized_view(
                &context,
                &catalog,
                (id, query),
                (emit_on_window_close, PlanOptions::default()),
            );
            let plan = planned.await?;
            (
                plan.schema().clone(),
                plan.unique_key(),
                Some(plan.state_layout()),
            )
        } else {
            let plan = plan_inline_view(resolver.clone(), query).await?;
            (schema_of(plan.schema())?, None, None)
        };
        let mut columns: Vec<ColumnDef> = schema
            .columns
            .iter()
            .map(|column| ColumnDef::new(column.name.clone(), column.sql_type.pg_name(), false))
            .collect();
        if let Some(names) = column_names {
            if names.len() > columns.len() {
                return Err(RsError::new(
                    &codes::INVALID_TABLE_DEFINITION,
                    "CREATE VIEW specifies more column names than columns",
                ));
            }
            for (column, name) in columns.iter_mut().zip(names) {
                column.name = name;
            }
        }
        let mut seen = std::collections::HashSet::new();
        for column in &columns {
            if !seen.insert(column.name.clone()) {
                return Err(RsError::new(
                    &codes::INVALID_TABLE_DEFINITION,
                    format!(
                        "column \"{}\" specified more than once in view \"{name}\"",
                        column.name
                    ),
                ));
            }
        }
        let kind = if materialized {
            ObjectKind::MaterializedView
        } else {
            ObjectKind::View
        };
        Ok(Some(CatalogEntry {
            definition: Some(query.to_string()),
            dependencies: resolver.resolved(),
            output_key,
            state_layout,
            functions: called,
            emit_on_window_close,
            ..CatalogEntry::new(id, (namespace, name), kind, columns)
        }))
    }

    /// `DROP TABLE/VIEW/MATERIALIZED VIEW`; returns what it dropped, the
    /// object first, then what depended on it (`None`: absent and
    /// `if_exists`).
    pub async fn drop_object(
        &self,
        namespace: &str,
        drop: DropObject<'_>,
    ) -> RsResult<Option<Vec<Dropped>>> {
        let _guard = self.ddl.lock().await;
        self.before_ddl().await?;
        let Some(doomed) = doomed_by(&self.entries(namespace), drop)? else {
            return Ok(None);
        };
        let dropped = doomed.iter().map(Dropped::of).collect();
        // Mark every doomed entry in one atomic write first: from then on
        // the DROP completes, if need be on the next start.
        self.control.write(dropping_marks(&doomed)?).await?;
        self.catalog_mut()
            .retain(|existing| !doomed.iter().any(|gone| gone.id == existing.id));
        self.drop_in_background(doomed.into_iter().rev().collect())
            .await;
        Ok(Some(dropped))
    }

    /// `DROP` inside a transaction block: recorded in `pending`, done when
    /// the transaction commits (RFC 0002). Returns every object it removes
    /// from the transaction's catalog, as [`Database::drop_object`] does.
    pub fn drop_object_in(
        &self,
        pending: &mut PendingCatalog,
        namespace: &str,
        drop: DropObject<'_>,
    ) -> RsResult<Option<Vec<Dropped>>> {
        let catalog = pending.overlay(namespace, self.entries(namespace));
        let Some(doomed) = doomed_by(&catalog, drop)? else {
            return Ok(None);
        };
        let dropped: Vec<Dropped> = doomed.iter().map(Dropped::of).collect();
        for entry in doomed {
            if let Some(position) = pending
                .created
                .iter()
                .position(|created| created.id == entry.id)
            {
                pending.created.remove(position);
            } else if let Some(position) = pending
                .altered
                .iter()
                .position(|table| table.after.id == entry.id)
            {
                // What commits is the drop of the committed version.
                pending
                    .dropped
                    .push(pending.altered.remove(position).before);
            } else {
                pending.dropped.push(entry);
            }
        }
        Ok(Some(dropped))
    }

    /// Removes dropped objects (dependents first) from the engine now, or,
    /// if storage fails, before a later DDL statement: their catalog marks
    /// are durable, so the DROP happened; only their state's removal waits.
    async fn drop_in_background(&self, doomed: Vec<CatalogEntry>) {
        if doomed.is_empty() {
            return;
        }
        if let Err(error) = self.finish_drop(doomed.clone()).await {
            tracing::warn!(%error, "a DROP's state is reclaimed later: storage failed");
            if let Ok(mut unfinished) = self.unfinished_drops.lock() {
                unfinished.extend(doomed);
            }
        }
    }

    /// What every DDL statement does first, under the DDL lock: finish what
    /// storage failures left undone (drops, a catalog transaction).
    async fn before_ddl(&self) -> RsResult<()> {
        // A failed CREATE's object must not come back: no DDL runs until
        // its undoing is durable.
        self.retry_unfinished_creates().await?;
        self.retry_unfinished_drops().await;
        self.resolve_unfinished_transaction().await
    }

    async fn commit_created(&self, entry: CatalogEntry) -> RsResult<()> {
        let catalog = self.entries(&entry.namespace);
        let json = entry_json(&entry)?;
        self.durable_put(&entry.key(), &json).await?;
        if let Err(error) = self
            .follow(CatalogChange::Created {
                entry: entry.clone(),
                catalog,
                replay: false,
            })
            .await
        {
            // Compensate: the statement failed, so it must change nothing.
            let _ = self.undo_created(vec![entry]).await;
            return Err(error);
        }
        // Other sessions see the object once it is complete (a view only
        // after its backfill), as they would see a committed CREATE.
        self.catalog_mut().push(entry);
        Ok(())
    }

    /// Undoes CREATEs that failed after their catalog entries were written.
    /// The entries are durably marked as dropping first, so a restart
    /// finishes the drop rather than bring the object back, and the engine
    /// never drops an object whose entry a restart would bring back; then
    /// the drop proceeds as a DROP's. `Err`: storage did not let the marks
    /// be written; the next DDL statement tries again
    /// ([`Database::unfinished_creates`]).
    async fn undo_created(&self, entries: Vec<CatalogEntry>) -> RsResult<()> {
        let marked = match dropping_marks(&entries) {
            Ok(marks) => self.control.write(marks).await,
            Err(error) => Err(error),
        };
        if let Err(cause) = marked {
            tracing::warn!(%cause, "a failed CREATE is undone later: storage failed");
            if let Ok(mut unfinished) = self.unfinished_creates.lock() {
                unfinished.extend(entries);
            }
            return Err(cause);
        }
        self.drop_in_background(entries).await;
        Ok(())
    }

    /// Undoes the failed CREATEs storage did not let be undone
    /// ([`Database::unfinished_creates`]).
    async fn retry_unfinished_creates(&self) -> RsResult<()> {
        let entries = match self.unfinished_creates.lock() {
            Ok(mut unfinished) => std::mem::take(&mut *unfinished),
            Err(_) => return Ok(()),
        };
        if entries.is_empty() {
            return Ok(());
        }
        self.undo_created(entries).await
    }

    /// Finishes the drops storage failed to finish ([`Database::unfinished_drops`]);
    /// any still failing wait for the next DDL statement.
    async fn retry_unfinished_drops(&self) {
        let entries = match self.unfinished_drops.lock() {
            Ok(mut unfinished) => std::mem::take(&mut *unfinished),
            Err(_) => return,
        };
        if entries.is_empty() {
            return;
        }
        if let Err(error) = self.finish_drop(entries.clone()).await {
            tracing::warn!(%error, "a DROP's state is still not reclaimed: storage failed");
            if let Ok(mut unfinished) = self.unfinished_drops.lock() {
                unfinished.extend(entries);
            }
        }
    }

    /// Removes dropped objects (dependents first) from the engine, then
    /// their (marked) catalog entries, each step in one atomic write.
    async fn finish_drop(&self, entries: Vec<CatalogEntry>) -> RsResult<()> {
        let keys: Vec<Vec<u8>> = entries.iter().map(CatalogEntry::key).collect();
        let sequences: Vec<ObjectId> = entries
            .iter()
            .flat_map(|entry| &entry.columns)
            .filter_map(|column| column.sequence.as_ref().map(|sequence| sequence.id))
            .collect();
        self.follow(CatalogChange::Dropped { entries }).await?;
        let mut deletes = WriteBatch::new();
        for key in keys {
            deletes.delete(key);
        }
        for id in &sequences {
            deletes.delete(sequence_key(*id));
        }
        self.control.write(deletes).await?;
        self.sequences.forget(&sequences);
        Ok(())
    }

    async fn follow(&self, change: CatalogChange) -> RsResult<()> {
        let (reply, receiver) = oneshot::channel();
        self.follower
            .send((change, reply))
            .await
            .map_err(|_| RsError::new(&codes::ENGINE_STOPPED, "the catalog follower stopped"))?;
        receiver
            .await
            .map_err(|_| RsError::new(&codes::ENGINE_STOPPED, "the catalog follower stopped"))?
    }

    async fn allocate_id(&self) -> RsResult<ObjectId> {
        Ok(ObjectId::from(self.next_counter().await?))
    }

    /// The next value of the catalog's counter, which numbers objects and
    /// catalog transactions alike.
    pub(super) async fn next_counter(&self) -> RsResult<u64> {
        let _guard = self.ids.lock().await;
        let current = self.control.get(&NEXT_ID_KEY).await?;
        let next = match current {
            Some(bytes) => u64::from_be_bytes(
                bytes
                    .as_slice()
                    .try_into()
                    .map_err(|_| RsError::internal("corrupt id counter"))?,
            ),
            None => 1,
        };
        self.durable_put(&NEXT_ID_KEY, &(next + 1).to_be_bytes())
            .await?;
        Ok(next)
    }

    async fn durable_put(&self, key: &[u8], value: &[u8]) -> RsResult<()> {
        self.control.put(key, value).await
    }

    pub async fn close(&self) {
        self.control.close().await;
    }
}

/// Every object of `namespace` in `catalog`, in creation order, as a reader
/// whose state records catalog transaction `watermark` sees them
/// (`Published::ddl_transaction`): an entry a catalog transaction created
/// exists once that transaction has committed, one it dropped until then
/// (RFC 0002).
fn entries_of(catalog: &[CatalogEntry], namespace: &str, watermark: u64) -> Vec<CatalogEntry> {
    catalog
        .iter()
        .filter(|entry| entry.namespace == namespace)
        .filter_map(|entry| version_at(entry, watermark))
        .map(settled)
        .collect()
}

/// The object `name` of `namespace` as [`entries_of`] gives it. The name
/// is that of the version the reader sees: a catalog transaction that
/// renames keeps the old name in `previous` until it commits.
fn entry_of(
    catalog: &[CatalogEntry],
    namespace: &str,
    name: &str,
    watermark: u64,
) -> Option<CatalogEntry> {
    catalog
        .iter()
        .filter(|entry| entry.namespace == namespace)
        .filter_map(|entry| version_at(entry, watermark))
        .find(|entry| entry.name == name)
        .map(settled)
}

/// The version of in-memory `entry` a reader whose state records catalog
/// transaction `watermark` sees, if any: an entry a catalog transaction
/// created exists once it has committed, one it dropped until then, and
/// one it altered is its `previous` until then (RFC 0002, RFC 0004).
fn version_at(entry: &CatalogEntry, watermark: u64) -> Option<&CatalogEntry> {
    match entry.transaction {
        None => Some(entry),
        Some(transaction) if entry.dropping => (watermark < transaction).then_some(entry),
        Some(transaction) => match &entry.previous {
            Some(previous) if watermark < transaction => Some(previous),
            _ => (watermark >= transaction).then_some(entry),
        },
    }
}

/// `entry` without the marks of a catalog transaction.
fn settled(entry: &CatalogEntry) -> CatalogEntry {
    CatalogEntry {
        dropping: entry.dropping && entry.transaction.is_none(),
        transaction: None,
        previous: None,
        ..entry.clone()
    }
}

/// A new table, as `CREATE TABLE` declares it.
pub struct NewTable<'a> {
    pub name: &'a str,
    pub columns: Vec<ColumnDef>,
    /// Column positions of the primary key (empty: hidden row id).
    pub primary_key: Vec<usize>,
    /// Columns a new sequence of their own generates.
    pub generated: Vec<Generated>,
    /// Its UNIQUE constraints besides the primary key.
    pub unique: Vec<DeclaredIndex>,
    /// Its `WATERMARK FOR` clause (RFC 0013).
    pub watermark: Option<WatermarkDef>,
    pub if_not_exists: bool,
}

/// Checks table `table`'s `WATERMARK FOR` clause: a column of its own of a
/// timestamp type or a date, a delay that is not negative.
fn check_watermark(table: &str, columns: &[ColumnDef], watermark: &WatermarkDef) -> RsResult<()> {
    let Some(column) = columns
        .iter()
        .find(|column| column.name == watermark.column)
    else {
        return Err(RsError::new(
            &codes::UNDEFINED_COLUMN,
            format!(
                "column \"{}\" named in the watermark of table \"{table}\" does not exist",
                watermark.column
            ),
        ));
    };
    if !matches!(
        column.sql_type()?,
        SqlType::Timestamp | SqlType::TimestampTz | SqlType::Date
    ) {
        return Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            format!(
                "the watermark of table \"{table}\" is on column \"{}\" of type {}; only timestamp, timestamptz and date columns take one",
                column.name,
                column.sql_type()?.pg_name()
            ),
        ));
    }
    if watermark.delay_micros < 0 {
        return Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            format!("the watermark of table \"{table}\" is ahead of its column: give it as \"{0}\" or \"{0} - INTERVAL ...\"", column.name),
        ));
    }
    Ok(())
}

/// The longest identifier PostgreSQL keeps, in bytes (`NAMEDATALEN - 1`).
const IDENTIFIER_BYTES_MAX: usize = 63;

/// An index as `CREATE TABLE` or `ALTER TABLE … ADD CONSTRAINT` (a UNIQUE
/// constraint) or `CREATE [UNIQUE] INDEX` declares it.
#[derive(Debug, Clone)]
pub struct DeclaredIndex {
    /// Its name, if given; else PostgreSQL's (`t_a_b_key`, `t_a_idx`).
    pub name: Option<String>,
    /// Column positions.
    pub columns: Vec<usize>,
    /// A UNIQUE constraint or unique index.
    pub unique: bool,
    /// `CREATE [UNIQUE] INDEX`: an index, no constraint.
    pub index_only: bool,
    /// `INCLUDE (…)` column positions.
    pub include: Vec<usize>,
    /// `USING hash`.
    pub hash: bool,
}

impl DeclaredIndex {
    /// A UNIQUE constraint on `columns`.
    pub fn unique_constraint(name: Option<String>, columns: Vec<usize>) -> DeclaredIndex {
        DeclaredIndex {
            name,
            columns,
            unique: true,
            index_only: false,
            include: Vec::new(),
            hash: false,
        }
    }
}

/// Gives table `entry` (in `catalog`) the index `declared`, named as given
/// or as PostgreSQL names it (`t_a_key`, else `t_a_key1`, …; an index
/// `t_a_idx`); a given name must be free among relations and indexes
/// (42P07).
pub(crate) fn add_index(
    catalog: &[CatalogEntry],
    entry: &mut CatalogEntry,
    declared: DeclaredIndex,
) -> RsResult<()> {
    let taken = |candidate: &str| {
        !name_is_free(catalog, candidate, true).unwrap_or(false)
            || candidate == entry.name
            || entry.owned_names().any(|own| own == candidate)
            || entry.key_name().is_some_and(|key| key == candidate)
    };
    let name = match declared.name {
        Some(name) if taken(&name) => return Err(already_exists(&name)),
        Some(name) => name,
        None => {
            // As PostgreSQL: every column, `INCLUDE` ones too, a repeated
            // name numbered (`x`, `x1`).
            let mut columns: Vec<String> = Vec::new();
            for column in declared.columns.iter().chain(&declared.include) {
                let name = &entry.columns[*column].name;
                let mut candidate = name.clone();
                let mut number = 0;
                while columns.contains(&candidate) {
                    number += 1;
                    candidate = format!("{name}{number}");
                }
                columns.push(candidate);
            }
            let suffix = if declared.index_only { "idx" } else { "key" };
            // PostgreSQL's names fit an identifier (63 bytes), with room
            // for a number that makes one unique.
            let mut base = format!("{}_{}", entry.name, columns.join("_"));
            let room = IDENTIFIER_BYTES_MAX - suffix.len() - 3;
            if base.len() > room {
                let mut end = room;
                while !base.is_char_boundary(end) {
                    end -= 1;
                }
                base.truncate(end);
            }
            free_name(&format!("{base}_{suffix}"), taken)
        }
    };
    let id = entry.next_index_id;
    if id >= rockstream_planner::INDEX_IDS_PER_TABLE {
        return Err(RsError::new(
            &codes::PROGRAM_LIMIT_EXCEEDED,
            format!(
                "table \"{}\" has had {id} indexes, the most a table can have over its life",
                entry.name
            ),
        ));
    }
    entry.next_index_id = id + 1;
    entry.indexes.push(TableIndex {
        id,
        name,
        columns: declared.columns,
        unique: declared.unique,
        index_only: declared.index_only,
        include: declared.include,
        hash: declared.hash,
    });
    Ok(())
}

/// What `ALTER TABLE … RENAME` changes.
#[derive(Debug, Clone, Copy)]
pub enum Rename<'a> {
    Table { to: &'a str },
    Column { from: &'a str, to: &'a str },
}

/// A column whose values a sequence created with its table generates:
/// `SERIAL` (`identity: None`) or `GENERATED … AS IDENTITY`.
#[derive(Debug, Clone, Copy)]
pub struct Generated {
    pub column: usize,
    pub identity: Option<Identity>,
}

/// `base`, else `base1`, `base2`, … : the first `taken` does not refuse,
/// as PostgreSQL names a serial column's sequence.
fn free_name(base: &str, taken: impl Fn(&str) -> bool) -> String {
    if !taken(base) {
        return base.to_string();
    }
    (1u64..)
        .map(|suffix| format!("{base}{suffix}"))
        .find(|candidate| !taken(candidate))
        .unwrap_or_else(|| base.to_string())
}

/// A new view, as `CREATE [MATERIALIZED] VIEW` declares it.
pub struct NewView<'a> {
    pub name: &'a str,
    pub query: &'a str,
    /// Overrides the planned column names (PostgreSQL's naming, or an
    /// explicit column list), positionally.
    pub column_names: Option<Vec<String>>,
    pub materialized: bool,
    /// `EMIT ON WINDOW CLOSE` (RFC 0013).
    pub emit_on_window_close: bool,
    pub if_not_exists: bool,
}

/// An object a `DROP` removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub id: ObjectId,
    pub kind: ObjectKind,
    pub name: String,
}

impl Dropped {
    fn of(entry: &CatalogEntry) -> Dropped {
        Dropped {
            id: entry.id,
            kind: entry.kind,
            name: entry.name.clone(),
        }
    }
}

/// What `DROP` names.
#[derive(Debug, Clone, Copy)]
pub struct DropObject<'a> {
    pub name: &'a str,
    pub kind: ObjectKind,
    pub cascade: bool,
    pub if_exists: bool,
}

/// The entries a `DROP` removes from `catalog` (creation order): the named
/// one first, then everything depending on it. `None` when it is absent
/// and `if_exists`.
pub(super) fn doomed_by(
    catalog: &[CatalogEntry],
    drop: DropObject<'_>,
) -> RsResult<Option<Vec<CatalogEntry>>> {
    let DropObject {
        name,
        kind,
        cascade,
        if_exists,
    } = drop;
    let Some(entry) = catalog.iter().find(|entry| entry.name == name) else {
        if if_exists {
            return Ok(None);
        }
        return Err(RsError::new(
            &codes::UNDEFINED_OBJECT,
            format!("{} \"{name}\" does not exist", kind.describe()),
        ));
    };
    if entry.kind != kind {
        return Err(RsError::new(
            &codes::WRONG_OBJECT_KIND,
            format!(
                "\"{name}\" is a {}, not a {}",
                entry.kind.describe(),
                kind.describe()
            ),
        ));
    }
    let doomed = dependents_closure(catalog, entry.id);
    if doomed.len() > 1 && !cascade {
        return Err(dependents_exist(
            &format!("{} {name}", entry.kind.describe()),
            &doomed[1..],
        ));
    }
    Ok(Some(doomed))
}

/// 2BP01: `what` (e.g. `table t`) cannot be dropped without `CASCADE`,
/// since `dependents` depend on it (named in the detail).
pub(super) fn dependents_exist<'a>(
    what: &str,
    dependents: impl IntoIterator<Item = &'a CatalogEntry>,
) -> RsError {
    let names: Vec<String> = dependents
        .into_iter()
        .map(|entry| format!("{} {}", entry.kind.describe(), entry.name))
        .collect();
    RsError::new(
        &codes::DEPENDENT_OBJECTS_EXIST,
        format!("cannot drop {what} because other objects depend on it"),
    )
    .with_detail(names.join(", "))
}

/// The entry `id` of `catalog` (in creation order, which is dependency
/// order) followed by everything depending on it, in creation order.
fn dependents_closure(catalog: &[CatalogEntry], id: ObjectId) -> Vec<CatalogEntry> {
    let mut doomed: Vec<ObjectId> = vec![id];
    for entry in catalog {
        if entry
            .dependencies
            .iter()
            .any(|dependency| doomed.contains(dependency))
            && !doomed.contains(&entry.id)
        {
            doomed.push(entry.id);
        }
    }
    let mut ordered: Vec<CatalogEntry> = catalog
        .iter()
        .filter(|entry| doomed.contains(&entry.id))
        .cloned()
        .collect();
    ordered.sort_by_key(|entry| if entry.id == id { 0 } else { 1 });
    ordered
}

/// A write marking `entries` as being dropped (`CatalogEntry::dropping`):
/// once it is durable the drop completes, on the next start if need be.
pub(super) fn dropping_marks(entries: &[CatalogEntry]) -> RsResult<WriteBatch> {
    let mut marks = WriteBatch::new();
    for entry in entries {
        let marked = CatalogEntry {
            dropping: true,
            ..entry.clone()
        };
        marks.put(marked.key(), entry_json(&marked)?);
    }
    Ok(marks)
}

fn entry_json(entry: &CatalogEntry) -> RsResult<Vec<u8>> {
    serde_json::to_vec(entry).map_err(|error| RsError::internal(error.to_string()))
}

/// Waits until a control-database write is durable.
async fn durable(written: Result<slatedb::WriteHandle, slatedb::Error>) -> RsResult<()> {
    let handle = written.map_err(|error| storage_error(CONTROL_PATH, error))?;
    handle
        .await_durable()
        .await
        .map_err(|error| storage_error(CONTROL_PATH, error))
}

/// Whether `name` is free in `catalog` for a new object; when it is taken,
/// `false` with `IF NOT EXISTS`, else 42P07.
pub(super) fn name_is_free(
    catalog: &[CatalogEntry],
    name: &str,
    if_not_exists: bool,
) -> RsResult<bool> {
    let names_it = |entry: &CatalogEntry| {
        entry.name == name
            || entry.owned_names().any(|own| own == name)
            || entry.key_name().is_some_and(|key| key == name)
    };
    if !catalog.iter().any(names_it) {
        return Ok(true);
    }
    if if_not_exists {
        return Ok(false);
    }
    Err(already_exists(name))
}

fn already_exists(name: &str) -> RsError {
    RsError::new(
        &codes::OBJECT_ALREADY_EXISTS,
        format!("relation \"{name}\" already exists"),
    )
}

/// The storage's bucket map: the stored one, else (a new storage) the
/// rendezvous map over `requested` shards, stored durably first. Storage
/// from before shards existed has one shard.
async fn bucket_map(control: &Db, requested: u16) -> RsResult<BucketMap> {
    let invalid = |error: rockstream_types::partition::InvalidBucketMap| {
        RsError::new(&codes::SHARD_COUNT_INVALID, error.to_string())
    };
    let read = |key: &[u8]| {
        let key = key.to_vec();
        async move {
            control
                .get(&key)
                .await
                .map_err(|error| storage_error(CONTROL_PATH, error))
        }
    };
    if let Some(bytes) = read(&BUCKET_MAP_KEY).await? {
        let map = BucketMap::from_bytes(&bytes)
            .map_err(|error| RsError::internal(format!("corrupt bucket map: {error}")))?;
        if map.shard_count() != requested {
            tracing::info!(
                stored = map.shard_count(),
                requested,
                "the storage keeps the shard count it was created with; --shards is ignored"
            );
        }
        return Ok(map);
    }
    let existing = read(&NEXT_ID_KEY).await?.is_some();
    let shards = if existing { 1 } else { requested };
    if existing && requested != 1 {
        tracing::info!(
            requested,
            "this storage was created before shards and keeps its one shard"
        );
    }
    let map = BucketMap::rendezvous(shards).map_err(invalid)?;
    durable(control.put(BUCKET_MAP_KEY, map.to_bytes()).await).await?;
    Ok(map)
}

async fn load_entries(control: &Db) -> RsResult<Vec<CatalogEntry>> {
    let mut iterator = control
        .scan_prefix([0x01u8], ..)
        .await
        .map_err(|error| storage_error(CONTROL_PATH, error))?;
    let mut entries = Vec::new();
    while let Some(entry) = iterator
        .next()
        .await
        .map_err(|error| storage_error(CONTROL_PATH, error))?
    {
        if entry.key.as_ref() == NEXT_ID_KEY {
            continue;
        }
        let parsed: CatalogEntry = serde_json::from_slice(&entry.value)
            .map_err(|error| RsError::internal(format!("corrupt catalog entry: {error}")))?;
        entries.push(parsed);
    }
    entries.sort_by_key(|entry| entry.id);
    Ok(entries)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    //! Goals: a DROP whose catalog mark is durable completes on the next
    //! start, leaving neither the objects nor any of their state; a view
    //! with a unique key stores each row under it, for good.
    use rockstream_ops::keys;
    use rockstream_runtime::{RowChange, TableChange, ViewStatus};
    use rockstream_types::Datum;

    use super::*;

    /// The shard count these tests create storage with:
    /// `ROCKSTREAM_TEST_SHARDS`, else 1.
    fn test_shards() -> u16 {
        std::env::var("ROCKSTREAM_TEST_SHARDS")
            .ok()
            .and_then(|shards| shards.parse().ok())
            .unwrap_or(1)
    }

    /// Every entry under `prefix` on every shard, in key order.
    async fn entries_under(database: &Database, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let snapshot = database.engine().published().snapshot;
        let mut cursor = snapshot.scan(prefix.to_vec(), None);
        let mut entries = Vec::new();
        loop {
            let chunk = cursor.next_chunk().await.unwrap();
            if chunk.is_empty() {
                return entries;
            }
            entries.extend(chunk);
        }
    }

    async fn keys_under(database: &Database, prefix: &[u8]) -> usize {
        entries_under(database, prefix).await.len()
    }

    fn bigint(name: &str) -> ColumnDef {
        ColumnDef::new(name, "bigint", false)
    }

    #[tokio::test]
    async fn one_entry_is_looked_up_as_the_namespace_lists_it() {
        // Goal: looking one object up by name agrees with listing them all,
        // while a catalog transaction that renames one is in doubt and
        // after it commits, and for a drop in doubt.
        let (_directory, _location, database) = database_with_rows(std::iter::empty()).await;
        let table = database.lookup("default", "t").unwrap();
        let renamed = CatalogEntry {
            name: "u".to_string(),
            transaction: Some(5),
            previous: Some(Box::new(table.clone())),
            ..table.clone()
        };
        let dropped = CatalogEntry {
            name: "d".to_string(),
            dropping: true,
            transaction: Some(5),
            ..table.clone()
        };
        let catalog = [renamed, dropped];
        for watermark in [4, 5] {
            let listed = entries_of(&catalog, "default", watermark);
            for name in ["t", "u", "d", "x"] {
                let looked_up = entry_of(&catalog, "default", name, watermark);
                let in_list = listed.iter().find(|entry| entry.name == name);
                assert_eq!(
                    looked_up.as_ref().map(|entry| &entry.name),
                    in_list.map(|entry| &entry.name),
                    "{name} at catalog transaction {watermark}"
                );
            }
        }
        assert!(entry_of(&catalog, "default", "t", 4).is_some());
        assert!(entry_of(&catalog, "default", "u", 4).is_none());
        assert!(entry_of(&catalog, "default", "u", 5).is_some());
        assert!(entry_of(&catalog, "default", "d", 5).is_none());
        assert!(entry_of(&catalog, "other", "t", 4).is_none());
    }

    /// Upserts `(k, g, v)` rows into table `t (k PRIMARY KEY, g, v)`, one
    /// commit each, reading the stored row first.
    async fn upsert(database: &Database, rows: &[(i64, i64, i64)]) {
        let table = database.lookup("default", "t").unwrap();
        for (k, g, v) in rows {
            let key = rockstream_types::encoding::encode_row(&[Datum::Int64(*k)]);
            let stored = table_prefix_key(table.id, &key);
            let old = database
                .engine()
                .published()
                .snapshot
                .get(&stored)
                .await
                .unwrap()
                .map(|bytes| rockstream_types::encoding::decode_row(&bytes).unwrap());
            let new = vec![Datum::Int64(*k), Datum::Int64(*g), Datum::Int64(*v)];
            commit_row(database, &table, key, old, new).await.unwrap();
        }
    }

    /// Commits one row change to `table` straight to the engine.
    async fn commit_row(
        database: &Database,
        table: &CatalogEntry,
        key: Vec<u8>,
        old: Option<rockstream_types::Row>,
        new: rockstream_types::Row,
    ) -> RsResult<()> {
        let row = RowChange {
            key,
            old,
            new: Some(new),
        };
        commit_changes(database, table, vec![row]).await
    }

    /// Commits `rows`, changes of `table`, in one epoch straight to the
    /// engine.
    async fn commit_changes(
        database: &Database,
        table: &CatalogEntry,
        rows: Vec<RowChange>,
    ) -> RsResult<()> {
        let change = TableChange {
            table_id: table.id,
            table_name: table.name.clone(),
            indexes: Vec::new(),
            rows,
            watermark: None,
            primary_key: Vec::new(),
        };
        database.engine().commit(vec![change]).await.map(|_| ())
    }

    /// Inserts `(k, k % 10, v)` for each `(k, v)` into table `t` in one
    /// commit.
    async fn insert_rows(database: &Database, rows: impl Iterator<Item = (i64, i64)>) {
        let table = database.lookup("default", "t").unwrap();
        let rows = rows
            .map(|(k, v)| RowChange {
                key: rockstream_types::encoding::encode_row(&[Datum::Int64(k)]),
                old: None,
                new: Some(vec![Datum::Int64(k), Datum::Int64(k % 10), Datum::Int64(v)]),
            })
            .collect();
        commit_changes(database, &table, rows).await.unwrap();
    }

    /// Every row stored for object `name`, in storage order.
    async fn stored_rows(database: &Database, name: &str) -> Vec<Vec<Datum>> {
        let entry = database.lookup("default", name).unwrap();
        let storage = entry.row_storage();
        let prefix = storage.prefix(entry.id);
        let mut rows = Vec::new();
        for (key, value) in entries_under(database, &prefix).await {
            let row = match storage {
                keys::RowStorage::Counted => {
                    assert_eq!(keys::decode_weight(&value), 1, "a repeated row");
                    rockstream_types::encoding::decode_row(&key[prefix.len()..]).unwrap()
                }
                _ => rockstream_types::encoding::decode_row(&value).unwrap(),
            };
            rows.push(row);
        }
        rows
    }

    /// Stands for a CREATE MATERIALIZED VIEW cut short by a crash: a
    /// durable catalog entry named `name` like `template`'s, whose build
    /// never committed.
    async fn interrupted_create(database: &Database, template: &str, name: &str) {
        let template = database.lookup("default", template).unwrap();
        let entry = CatalogEntry {
            id: database.allocate_id().await.unwrap(),
            name: name.to_string(),
            ..template
        };
        database
            .durable_put(&entry.key(), &entry_json(&entry).unwrap())
            .await
            .unwrap();
    }

    /// Waits (bounded) until view `name` is no longer building.
    async fn built_status(database: &Database, name: &str) -> ViewStatus {
        let entry = database.lookup("default", name).unwrap();
        for _ in 0..2_000 {
            let status = database.engine().view_status(entry.id);
            if !matches!(status, ViewStatus::Building { .. }) {
                return status;
            }
            Runtime::system()
                .sleep(std::time::Duration::from_millis(10))
                .await;
        }
        panic!("view {name} is still building after 20 s");
    }

    /// Waits (bounded) until every dropped object's keys are gone: a few
    /// rounds of the engine's look at them and of compactions.
    async fn reclaimed(database: &Database) {
        for _ in 0..6_000 {
            if database.engine().reclaims_pending() == 0 {
                return;
            }
            Runtime::system()
                .sleep(std::time::Duration::from_millis(10))
                .await;
        }
        panic!("dropped objects still hold keys after 60 s");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_drop_returns_at_once_and_its_state_goes_in_the_background() {
        // Goal: DROP does not wait for its state to be deleted, and the
        // state goes even when the server stops before it has.
        // Method: drop a 40 000-row table and its view, stop the engine
        // right after the DROP returns, reopen, and wait until compaction
        // has left no key of either; a commit meanwhile works.
        let (_directory, location, database) =
            database_with_rows((0..40_000).map(|k| (k, k))).await;
        database
            .create_view(
                "default",
                NewView {
                    name: "by_g",
                    query: "SELECT g, COUNT(*) AS n FROM t GROUP BY g",
                    column_names: None,
                    materialized: true,
                    if_not_exists: false,
                    emit_on_window_close: false,
                },
            )
            .await
            .unwrap();
        let table = database.lookup("default", "t").unwrap();
        let view = database.lookup("default", "by_g").unwrap();
        let mut prefixes = vec![keys::table_prefix(table.id)];
        prefixes.extend(keys::view_output_prefixes(view.id));
        prefixes.extend(keys::view_op_prefixes(view.id));
        database
            .drop_object(
                "default",
                DropObject {
                    name: "t",
                    kind: ObjectKind::Table,
                    cascade: true,
                    if_exists: false,
                },
            )
            .await
            .unwrap();
        assert!(database.lookup("default", "t").is_none());
        assert!(database.lookup("default", "by_g").is_none());
        assert!(
            keys_under(&database, &keys::table_prefix(table.id)).await > 0,
            "the rows are still stored when the DROP returns"
        );
        // A write planned before the DROP cannot put keys back under the
        // prefixes compaction is emptying.
        let key = rockstream_types::encoding::encode_row(&[Datum::Int64(50_000)]);
        let row = vec![Datum::Int64(50_000), Datum::Int64(0), Datum::Int64(0)];
        let late = commit_row(&database, &table, key, None, row)
            .await
            .expect_err("a commit into a dropped table");
        assert_eq!(late.code.sqlstate, "40001", "{late:?}");
        drop(database);

        let reopened = Database::open(&location, Runtime::system(), test_shards())
            .await
            .unwrap();
        table_t(&reopened).await;
        insert_rows(&reopened, (0..10).map(|k| (k, k))).await;
        reclaimed(&reopened).await;
        for prefix in &prefixes {
            assert_eq!(keys_under(&reopened, prefix).await, 0, "{prefix:?}");
        }
        assert_eq!(stored_rows(&reopened, "t").await.len(), 10);
    }

    /// A new database in a temporary directory whose table `t` holds
    /// `rows` (see [`insert_rows`]); the directory lives as long as the
    /// returned guard.
    async fn database_with_rows(
        rows: impl Iterator<Item = (i64, i64)>,
    ) -> (tempfile::TempDir, String, Arc<Database>) {
        let directory = tempfile::tempdir().unwrap();
        let location = directory.path().to_str().unwrap().to_string();
        let database = Database::open(&location, Runtime::system(), test_shards())
            .await
            .unwrap();
        table_t(&database).await;
        insert_rows(&database, rows).await;
        (directory, location, database)
    }

    async fn table_t(database: &Database) {
        database
            .create_table(
                "default",
                NewTable {
                    name: "t",
                    columns: vec![bigint("k"), bigint("g"), bigint("v")],
                    primary_key: vec![0],
                    generated: Vec::new(),
                    unique: Vec::new(),
                    if_not_exists: false,
                    watermark: None,
                },
            )
            .await
            .unwrap();
    }

    /// A clock the test sets.
    struct ManualClock(std::sync::atomic::AtomicI64);

    impl rockstream_common::Clock for ManualClock {
        fn now_micros(&self) -> i64 {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    impl ManualClock {
        fn set(&self, micros: i64) {
            self.0.store(micros, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Waits (bounded) until view `name` holds exactly the `k` values
    /// `expected` (its first column), and says what it held otherwise.
    async fn view_holds(database: &Database, name: &str, expected: &[i64]) {
        let mut held = Vec::new();
        for _ in 0..500 {
            held = stored_rows(database, name)
                .await
                .into_iter()
                .map(|row| match row[0] {
                    Datum::Int64(k) => k,
                    ref other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>();
            held.sort_unstable();
            if held == expected {
                return;
            }
            Runtime::system()
                .sleep(std::time::Duration::from_millis(10))
                .await;
        }
        panic!("view {name} holds {held:?}, not {expected:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_temporal_filter_follows_the_clock_without_commits_and_across_a_restart() {
        // Goal: rows enter and leave a view filtering on now() when the
        // engine's clock passes their bounds, with no commit to step it,
        // and rows that came due while the server was down are moved on
        // start.
        // Method: a clock the test sets; rows whose windows of
        // `at > now() - 10 s AND at <= now()` lie before, around and after
        // the start; the clock moved past each edge (the engine's timer
        // steps the view within a second); the engine reopened with the
        // clock past every edge; a deletion empties the schedule.
        const SECOND: i64 = 1_000_000;
        let start = 1_700_000_000 * SECOND;
        let clock = Arc::new(ManualClock(std::sync::atomic::AtomicI64::new(start)));
        let runtime = || Runtime::with_clock(clock.clone(), 7);
        let directory = tempfile::tempdir().unwrap();
        let location = directory.path().to_str().unwrap().to_string();
        let database = Database::open(&location, runtime(), test_shards())
            .await
            .unwrap();
        database
            .create_table(
                "default",
                NewTable {
                    name: "e",
                    columns: vec![
                        bigint("k"),
                        ColumnDef::new("at", "timestamp without time zone", false),
                    ],
                    primary_key: vec![0],
                    generated: Vec::new(),
                    unique: Vec::new(),
                    if_not_exists: false,
                    watermark: None,
                },
            )
            .await
            .unwrap();
        let table = database.lookup("default", "e").unwrap();
        let rows = [(1, -20), (2, -5), (3, 3), (4, 30)]
            .into_iter()
            .map(|(k, seconds)| RowChange {
                key: rockstream_types::encoding::encode_row(&[Datum::Int64(k)]),
                old: None,
                new: Some(vec![
                    Datum::Int64(k),
                    Datum::Timestamp(start + seconds * SECOND),
                ]),
            })
            .collect();
        commit_changes(&database, &table, rows).await.unwrap();
        database
            .create_view(
                "default",
                NewView {
                    name: "recent",
                    query:
                        "SELECT k FROM e WHERE at > now() - INTERVAL '10 seconds' AND at <= now()",
                    column_names: None,
                    materialized: true,
                    if_not_exists: false,
                    emit_on_window_close: false,
                },
            )
            .await
            .unwrap();
        // A view reading it follows it, also across the restart.
        database
            .create_view(
                "default",
                NewView {
                    name: "recent_count",
                    query: "SELECT count(*) AS n, max(k) AS top FROM recent",
                    column_names: None,
                    materialized: true,
                    if_not_exists: false,
                    emit_on_window_close: false,
                },
            )
            .await
            .unwrap();
        view_holds(&database, "recent", &[2]).await;
        view_holds(&database, "recent_count", &[1]).await;
        clock.set(start + 4 * SECOND);
        view_holds(&database, "recent", &[2, 3]).await;
        clock.set(start + 5 * SECOND);
        view_holds(&database, "recent", &[3]).await;
        drop(database);

        clock.set(start + 31 * SECOND);
        let reopened = Database::open(&location, runtime(), test_shards())
            .await
            .unwrap();
        view_holds(&reopened, "recent", &[4]).await;
        view_holds(&reopened, "recent_count", &[1]).await;
        let counted = stored_rows(&reopened, "recent_count").await;
        assert_eq!(counted, vec![vec![Datum::Int64(1), Datum::Int64(4)]]);
        let key = rockstream_types::encoding::encode_row(&[Datum::Int64(4)]);
        let old = vec![Datum::Int64(4), Datum::Timestamp(start + 30 * SECOND)];
        let deletion = RowChange {
            key,
            old: Some(old),
            new: None,
        };
        commit_changes(&reopened, &table, vec![deletion])
            .await
            .unwrap();
        view_holds(&reopened, "recent", &[]).await;
        view_holds(&reopened, "recent_count", &[0]).await;
        // The schedule is empty (the filter's last clock stays).
        let view = reopened.lookup("default", "recent").unwrap();
        let schedule: Vec<u8> = [keys::OP_STATE]
            .into_iter()
            .chain(keys::TEMPORAL_FILTER)
            .chain(
                rockstream_plan::op_id(view.id, 0).to_be_bytes()[..12]
                    .iter()
                    .copied(),
            )
            .collect();
        assert_eq!(keys_under(&reopened, &schedule).await, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_interrupted_build_runs_again_in_the_background_on_start() {
        // Goal: a view whose CREATE a crash cut short does not hold up the
        // start; it is built again from one snapshot while commits go on,
        // and ends up equal to its definition over every committed row.
        // Method: a catalog entry without committed state over 40 000 rows
        // (several build turns); commits right after the start, while it
        // builds; then every stored row of the view is compared.
        let (_directory, location, database) =
            database_with_rows((0..40_000).map(|k| (k, k))).await;
        database
            .create_view(
                "default",
                NewView {
                    name: "doubled",
                    query: "SELECT k, v * 2 AS w FROM t",
                    column_names: None,
                    materialized: true,
                    if_not_exists: false,
                    emit_on_window_close: false,
                },
            )
            .await
            .unwrap();
        interrupted_create(&database, "doubled", "rebuilt").await;
        drop(database);

        let reopened = Database::open(&location, Runtime::system(), test_shards())
            .await
            .unwrap();
        // Commits go on while it builds: new rows, and a changed one.
        insert_rows(&reopened, (40_000..40_100).map(|k| (k, k))).await;
        upsert(&reopened, &[(5, 5, 1_000)]).await;
        assert_eq!(
            built_status(&reopened, "rebuilt").await,
            ViewStatus::Healthy
        );
        insert_rows(&reopened, (40_100..40_110).map(|k| (k, k))).await;
        let mut rows = stored_rows(&reopened, "rebuilt").await;
        rows.sort_by_key(|row| match row[0] {
            Datum::Int64(k) => k,
            _ => unreachable!("k is a bigint"),
        });
        let expected: Vec<Vec<Datum>> = (0..40_110)
            .map(|k| {
                let w = if k == 5 { 2_000 } else { 2 * k };
                vec![Datum::Int64(k), Datum::Int64(w)]
            })
            .collect();
        assert_eq!(rows.len(), expected.len());
        assert!(
            rows == expected,
            "the rebuilt view differs from its definition"
        );
        assert_eq!(
            stored_rows(&reopened, "doubled").await,
            stored_rows(&reopened, "rebuilt").await
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_build_that_fails_on_start_fails_only_its_view() {
        // Goal: a restarted build that a row makes fail (as a division by
        // zero) marks that view failed with a coded error naming it, while
        // the database opens and its tables take commits (it used to never
        // answer). Method: an interrupted CREATE over a row with v = 7 of
        // `100 / (v - 7)`; reopen, commit, wait for the build to end.
        let (_directory, location, database) =
            database_with_rows((0..20_000).map(|k| (k, k % 5))).await;
        database
            .create_view(
                "default",
                NewView {
                    name: "ratio",
                    query: "SELECT k, 100 / (v - 7) AS r FROM t",
                    column_names: None,
                    materialized: true,
                    if_not_exists: false,
                    emit_on_window_close: false,
                },
            )
            .await
            .unwrap();
        interrupted_create(&database, "ratio", "rebuilt").await;
        insert_rows(&database, std::iter::once((20_000, 7))).await;
        drop(database);

        let reopened = Database::open(&location, Runtime::system(), test_shards())
            .await
            .unwrap();
        insert_rows(&reopened, std::iter::once((20_001, 1))).await;
        let ViewStatus::Failed(error) = built_status(&reopened, "rebuilt").await else {
            panic!("the build over a row dividing by zero succeeded");
        };
        assert_eq!(error.code, &codes::VIEW_BACKFILL_FAILED, "{error}");
        assert!(error.message.contains("\"rebuilt\""), "{error}");
        assert!(error.message.contains("division by zero"), "{error}");
        // The tables and the other view go on.
        assert_eq!(stored_rows(&reopened, "t").await.len(), 20_002);
        upsert(&reopened, &[(20_000, 0, 8)]).await;
        assert_eq!(
            reopened
                .engine()
                .view_status(reopened.lookup("default", "ratio").unwrap().id),
            ViewStatus::Healthy
        );
        reopened
            .drop_object(
                "default",
                DropObject {
                    name: "rebuilt",
                    kind: ObjectKind::MaterializedView,
                    cascade: false,
                    if_exists: false,
                },
            )
            .await
            .unwrap();
        assert!(reopened.lookup("default", "rebuilt").is_none());
    }

    fn table_prefix_key(table_id: ObjectId, row_key: &[u8]) -> Vec<u8> {
        let mut key = keys::table_prefix(table_id);
        key.extend_from_slice(row_key);
        key
    }

    /// The rows stored under a view's keyed output prefix, in key order.
    async fn keyed_rows(database: &Database, view: &str) -> Vec<Vec<Datum>> {
        let view = database.lookup("default", view).unwrap();
        entries_under(database, &keys::keyed_output_prefix(view.id))
            .await
            .into_iter()
            .map(|(_, value)| rockstream_types::encoding::decode_row(&value).unwrap())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn views_with_a_unique_key_store_rows_under_it() {
        let directory = tempfile::tempdir().unwrap();
        let location = directory.path().to_str().unwrap().to_string();
        let database = Database::open(&location, Runtime::system(), test_shards())
            .await
            .unwrap();
        database
            .create_table(
                "default",
                NewTable {
                    name: "t",
                    columns: vec![bigint("k"), bigint("g"), bigint("v")],
                    primary_key: vec![0],
                    generated: Vec::new(),
                    unique: Vec::new(),
                    if_not_exists: false,
                    watermark: None,
                },
            )
            .await
            .unwrap();
        database
            .create_table(
                "default",
                NewTable {
                    name: "dim",
                    columns: vec![bigint("id"), bigint("w")],
                    primary_key: vec![0],
                    generated: Vec::new(),
                    unique: Vec::new(),
                    if_not_exists: false,
                    watermark: None,
                },
            )
            .await
            .unwrap();
        let views = [
            (
                "by_group",
                "SELECT g, SUM(v) AS total FROM t GROUP BY g",
                Some(vec![0]),
            ),
            (
                "reordered",
                "SELECT SUM(v) AS total, g AS grp FROM t GROUP BY g",
                Some(vec![1]),
            ),
            (
                "having",
                "SELECT g, COUNT(*) AS n FROM t GROUP BY g HAVING COUNT(*) > 1",
                Some(vec![0]),
            ),
            (
                "global",
                "SELECT COUNT(*) AS n, MAX(v) AS top FROM t",
                Some(vec![]),
            ),
            (
                "group_not_selected",
                "SELECT SUM(v) AS total FROM t GROUP BY g",
                None,
            ),
            (
                "group_transformed",
                "SELECT g + 1 AS h, SUM(v) AS total FROM t GROUP BY g",
                None,
            ),
            ("table_key", "SELECT v, k FROM t WHERE v > 3", Some(vec![1])),
            ("no_key", "SELECT g, v FROM t", None),
            (
                "joined",
                "SELECT t.k, d.w FROM t JOIN dim d ON t.g = d.id",
                Some(vec![0]),
            ),
            (
                "dim_side",
                "SELECT d.w, t.k FROM dim d JOIN t ON t.g = d.id",
                Some(vec![1]),
            ),
            (
                "outer",
                "SELECT t.k, d.w FROM t LEFT JOIN dim d ON t.g = d.id",
                Some(vec![0]),
            ),
            (
                "many_to_many",
                "SELECT a.k, b.k AS k2 FROM t a JOIN t b ON a.g = b.g",
                None,
            ),
            (
                "semi",
                "SELECT k FROM t WHERE g IN (SELECT id FROM dim)",
                Some(vec![0]),
            ),
            (
                "over_view",
                "SELECT b.g, b.total, d.w FROM by_group b JOIN dim d ON d.id = b.g",
                Some(vec![0]),
            ),
        ];
        for (name, query, _) in &views {
            database
                .create_view(
                    "default",
                    NewView {
                        name,
                        query,
                        column_names: None,
                        materialized: true,
                        if_not_exists: false,
                        emit_on_window_close: false,
                    },
                )
                .await
                .unwrap();
        }
        for (name, _, key) in &views {
            let entry = database.lookup("default", name).unwrap();
            assert_eq!(&entry.output_key, key, "{name}");
        }

        // Group 1 changes forty times; group 2 appears, then moves away.
        let changes: Vec<(i64, i64, i64)> = (1..=40).map(|v| (1, 1, v)).collect();
        upsert(&database, &changes).await;
        upsert(&database, &[(2, 1, 5), (3, 2, 7), (3, 1, 8)]).await;
        // SUM(bigint) is numeric, with scale 0.
        let expected_by_group = vec![vec![Datum::Int64(1), Datum::Numeric(53)]];
        assert_eq!(keyed_rows(&database, "by_group").await, expected_by_group);
        assert_eq!(
            keyed_rows(&database, "having").await,
            vec![vec![Datum::Int64(1), Datum::Int64(3)]]
        );
        assert_eq!(
            keyed_rows(&database, "global").await,
            vec![vec![Datum::Int64(3), Datum::Int64(40)]]
        );
        let counted = database.lookup("default", "group_not_selected").unwrap();
        assert_eq!(
            keys_under(&database, &keys::output_prefix(counted.id)).await,
            1
        );
        assert!(keyed_rows(&database, "group_not_selected").await.is_empty());

        // The layout is the catalog's: it survives a restart unchanged.
        drop(database);
        let reopened = Database::open(&location, Runtime::system(), test_shards())
            .await
            .unwrap();
        assert_eq!(
            reopened.lookup("default", "by_group").unwrap().output_key,
            Some(vec![0])
        );
        upsert(&reopened, &[(2, 2, 1)]).await;
        assert_eq!(
            keyed_rows(&reopened, "by_group").await,
            vec![
                vec![Datum::Int64(1), Datum::Numeric(48)],
                vec![Datum::Int64(2), Datum::Numeric(1)]
            ]
        );
    }

    /// A database in a fresh directory holding table `t (k bigint primary
    /// key, v bigint)`.
    async fn database_with_table() -> (tempfile::TempDir, Arc<Database>) {
        let directory = tempfile::tempdir().unwrap();
        let location = directory.path().to_str().unwrap().to_string();
        let database = Database::open(&location, Runtime::system(), test_shards())
            .await
            .unwrap();
        database
            .create_table(
                "default",
                NewTable {
                    name: "t",
                    columns: vec![bigint("k"), bigint("v")],
                    primary_key: vec![0],
                    generated: Vec::new(),
                    unique: Vec::new(),
                    if_not_exists: false,
                    watermark: None,
                },
            )
            .await
            .unwrap();
        (directory, database)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_marked_drop_finishes_on_restart() {
        let (directory, database) = database_with_table().await;
        let location = directory.path().to_str().unwrap().to_string();
        database
            .create_view("default", NewView { name: "totals", query: "SELECT k % 2 AS parity, SUM(v) AS total, MIN(v) AS low FROM t GROUP BY k % 2", column_names: None, materialized: true, if_not_exists: false, emit_on_window_close: false })
            .await
            .unwrap();
        let table = database.lookup("default", "t").unwrap();
        let view = database.lookup("default", "totals").unwrap();
        let rows = (1..=100)
            .map(|k| RowChange {
                key: rockstream_types::encoding::encode_row(&[Datum::Int64(k)]),
                old: None,
                new: Some(vec![Datum::Int64(k), Datum::Int64(k * 3)]),
            })
            .collect();
        database
            .engine()
            .commit(vec![TableChange {
                table_id: table.id,
                table_name: table.name.clone(),
                indexes: Vec::new(),
                rows,
                watermark: None,
                primary_key: Vec::new(),
            }])
            .await
            .unwrap();
        let mut state_prefixes = vec![keys::table_prefix(table.id)];
        state_prefixes.extend(keys::view_output_prefixes(view.id));
        state_prefixes.extend(keys::view_op_prefixes(view.id));
        let mut stored = 0;
        for prefix in &state_prefixes {
            stored += keys_under(&database, prefix).await;
        }
        assert!(stored > 200, "rows, output and operator state: {stored}");

        // DROP TABLE t CASCADE as far as its atomic mark, then a crash.
        let mut marks = WriteBatch::new();
        for entry in [&table, &view] {
            let marked = CatalogEntry {
                dropping: true,
                ..entry.clone()
            };
            marks.put(marked.key(), entry_json(&marked).unwrap());
        }
        database.control.write(marks).await.unwrap();
        drop(database);

        let reopened = Database::open(&location, Runtime::system(), test_shards())
            .await
            .unwrap();
        assert!(reopened.lookup("default", "t").is_none());
        assert!(reopened.lookup("default", "totals").is_none());
        reclaimed(&reopened).await;
        for prefix in &state_prefixes {
            assert_eq!(keys_under(&reopened, prefix).await, 0, "{prefix:?}");
        }
        let control = reopened.control.db().await.unwrap();
        let entries = load_entries(&control).await.unwrap();
        assert!(entries.is_empty(), "the marked entries are deleted too");
    }

    /// A stored view this version cannot plan (here: one calling random(),
    /// which an older version accepted) must not keep the database from
    /// opening; it and the views reading it report why, and can be dropped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stored_view_that_no_longer_plans_does_not_stop_the_start() {
        let (directory, database) = database_with_table().await;
        let location = directory.path().to_str().unwrap().to_string();
        for (name, query) in [
            ("old", "SELECT k, v FROM t"),
            ("above", "SELECT k FROM old"),
            ("fine", "SELECT SUM(v) AS total FROM t"),
            ("retyped", "SELECT k, v / 3.0 AS third FROM t"),
            (
                "relaid",
                "SELECT k, count(DISTINCT v + 1) AS n FROM t GROUP BY k",
            ),
            (
                "unrecorded",
                "SELECT v + 1 AS next, count(*) AS n FROM t GROUP BY v + 1",
            ),
        ] {
            database
                .create_view(
                    "default",
                    NewView {
                        name,
                        query,
                        column_names: None,
                        materialized: true,
                        if_not_exists: false,
                        emit_on_window_close: false,
                    },
                )
                .await
                .unwrap();
        }
        let old = database.lookup("default", "old").unwrap();
        let rewritten = CatalogEntry {
            definition: Some("SELECT k, random() AS v FROM t".to_string()),
            ..old.clone()
        };
        database
            .durable_put(&rewritten.key(), &entry_json(&rewritten).unwrap())
            .await
            .unwrap();
        // A view whose column an older version typed otherwise: its stored
        // numerics have the old scale.
        let retyped = database.lookup("default", "retyped").unwrap();
        let mut columns = retyped.columns.clone();
        columns[1].type_name = "numeric(38,5)".to_string();
        let retyped = CatalogEntry { columns, ..retyped };
        database
            .durable_put(&retyped.key(), &entry_json(&retyped).unwrap())
            .await
            .unwrap();
        // A view whose state an older version laid out otherwise (here: its
        // DISTINCT multiset kept `v + 1` as an integer).
        let relaid = database.lookup("default", "relaid").unwrap();
        let layout = relaid.state_layout.clone().expect("kept at CREATE");
        assert!(layout.contains("Some(\"bigint\")"), "{layout}");
        let relaid = CatalogEntry {
            state_layout: Some(layout.replace("Some(\"bigint\")", "Some(\"integer\")")),
            ..relaid
        };
        database
            .durable_put(&relaid.key(), &entry_json(&relaid).unwrap())
            .await
            .unwrap();
        // A view an earlier version created, without a recorded layout.
        let unrecorded = CatalogEntry {
            state_layout: None,
            ..database.lookup("default", "unrecorded").unwrap()
        };
        database
            .durable_put(&unrecorded.key(), &entry_json(&unrecorded).unwrap())
            .await
            .unwrap();
        drop(database);

        let reopened = Database::open(&location, Runtime::system(), test_shards())
            .await
            .unwrap();
        for (name, reason) in [
            ("old", "random()"),
            ("above", "it reads \"old\""),
            (
                "retyped",
                "column \"third\" as numeric(38,16), where it was created as numeric(38,5)",
            ),
            ("relaid", "computes it or keeps its state otherwise"),
            ("unrecorded", "created by an earlier version"),
        ] {
            let entry = reopened.lookup("default", name).unwrap();
            let ViewStatus::Failed(error) = reopened.engine().view_status(entry.id) else {
                panic!("{name} is reported healthy");
            };
            assert_eq!(error.code, &codes::VIEW_NOT_MAINTAINABLE, "{error}");
            assert!(error.message.contains(reason), "{error}");
        }
        // A new view over it is refused rather than created dead.
        let error = reopened
            .create_view(
                "default",
                NewView {
                    name: "newer",
                    query: "SELECT k FROM old",
                    column_names: None,
                    materialized: true,
                    if_not_exists: false,
                    emit_on_window_close: false,
                },
            )
            .await
            .expect_err("reads a view that cannot be maintained");
        assert_eq!(error.code, &codes::VIEW_NOT_MAINTAINABLE, "{error}");
        assert!(reopened.lookup("default", "newer").is_none());
        let fine = reopened.lookup("default", "fine").unwrap();
        assert!(matches!(
            reopened.engine().view_status(fine.id),
            ViewStatus::Healthy
        ));
        reopened
            .drop_object(
                "default",
                DropObject {
                    name: "old",
                    kind: ObjectKind::MaterializedView,
                    cascade: true,
                    if_exists: false,
                },
            )
            .await
            .unwrap();
        assert!(reopened.lookup("default", "above").is_none());
        assert!(matches!(
            reopened.engine().view_status(old.id),
            ViewStatus::Healthy
        ));
    }
}
