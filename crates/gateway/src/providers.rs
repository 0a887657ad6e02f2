//! DataFusion table providers over a pinned snapshot, for ad-hoc reads and
//! for evaluating DML.
//!
//! A table's rows are read from the snapshot and overlaid with the session's
//! uncommitted writes, so statements inside a transaction see their own
//! changes. Scans stream: each poll of a scan reads one bounded storage
//! chunk, so a scan's memory does not grow with the relation, a `LIMIT`
//! stops the reads, and an equality on the leading key column reads only
//! the rows under that key; one on an index's leading column, only the
//! rows its entries name (RFC 0014). A materialized view's rows are its stored output (a row with
//! weight `n` appears `n` times); reading a failed view returns its error.
//! For UPDATE/DELETE the table also exposes its storage key as a hidden
//! trailing column, [`ROW_KEY_COLUMN`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, BinaryBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::datasource::ViewTable;
use datafusion::error::{DataFusionError, Result as DataFusionResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::ExecutionPlan;
use rockstream_control::{inline_view, CatalogEntry, ObjectKind, REWRITTEN_BY_PENDING};
use rockstream_ops::arrow_rows::{array_to_datums, rows_to_batch};
use rockstream_ops::keys::{
    decode_weight, index_value_prefix, leading_value_prefix, unique_prefix, RowStorage,
};
use rockstream_planner::{
    ColumnInfo, RelationInfo, RelationKind, SequenceInfo, TableIndexInfo, TableResolver,
    WatermarkInfo,
};
use rockstream_runtime::{Engine, TableWatermark, ViewStatus};
use rockstream_storage::{IndexEntries, IndexRowCursor, RowCursor, SnapshotSet};
use rockstream_types::encoding::decode_row;
use rockstream_types::{Datum, ObjectId, Row, RsError, RsResult, SqlType};

use crate::session::{layout_conflict, PendingRow};
use rockstream_pgwire::{FIELD_COLUMN_NUMBER, FIELD_TABLE_OID, FIELD_VARCHAR_LENGTH};
use rockstream_planner::{relation_oid, SqlFunction};

/// Hidden column carrying a table row's storage key (DML only).
pub const ROW_KEY_COLUMN: &str = "__rs_row_key";
/// Rows per record batch handed to DataFusion.
const BATCH_ROWS_MAX: usize = 8192;

/// Uncommitted writes of a transaction to one table: key → (the row as the
/// transaction first read it, the row now), shared with the transaction.
pub type TableOverlay = Arc<BTreeMap<Vec<u8>, PendingRow>>;

#[derive(Clone)]
pub struct ReadContext {
    pub entries: Vec<CatalogEntry>,
    /// Materialized views the reading transaction created: not built until
    /// it commits, they are read by evaluating their definitions.
    pub unbuilt_views: BTreeSet<ObjectId>,
    /// Every namespace, which clients see as databases.
    pub databases: Vec<String>,
    /// The one the session reads.
    pub database: String,
    /// Its SQL functions (`CREATE FUNCTION`).
    pub functions: Vec<Arc<SqlFunction>>,
    /// The roles `CREATE ROLE` made, each with whether it may log in.
    pub roles: Vec<(String, bool)>,
    pub snapshot: SnapshotSet,
    /// The catalog transaction a REPEATABLE READ transaction's snapshot
    /// records (`None`: the snapshot is as new as `entries`).
    pub snapshot_ddl_transaction: Option<u64>,
    pub engine: Engine,
    /// The watermarks of the published state read (`rs_watermarks`).
    pub watermarks: Arc<BTreeMap<ObjectId, TableWatermark>>,
    pub overlays: BTreeMap<ObjectId, TableOverlay>,
    /// The layout each table's overlay rows are in.
    pub layouts: BTreeMap<ObjectId, u64>,
    /// Expose [`ROW_KEY_COLUMN`] on tables.
    pub with_row_keys: bool,
}

impl std::fmt::Debug for ReadContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReadContext({} objects)", self.entries.len())
    }
}

impl std::fmt::Debug for SnapshotResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SnapshotResolver")
    }
}

/// Resolves names to scannable providers over one snapshot.
pub struct SnapshotResolver {
    pub context: Arc<ReadContext>,
}

#[async_trait]
impl TableResolver for SnapshotResolver {
    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, RsError> {
        let Some(entry) = self.context.entries.iter().find(|entry| entry.name == name) else {
            return Ok(None);
        };
        let unbuilt = self.context.unbuilt_views.contains(&entry.id);
        if unbuilt
            && rockstream_planner::uses_bag_set_operation(
                entry.definition.as_deref().unwrap_or_default(),
            )
        {
            // Ad-hoc reads plan these as semi and anti joins, losing the
            // multiplicities the view keeps.
            return Err(RsError::unsupported(format!(
                "reading materialized view \"{}\" (EXCEPT ALL / INTERSECT ALL) in the transaction that creates it; it can be read once the transaction commits",
                entry.name
            )));
        }
        if entry.kind == ObjectKind::View || unbuilt {
            let nested = Arc::new(SnapshotResolver {
                context: Arc::new(ReadContext {
                    with_row_keys: false,
                    ..(*self.context).clone()
                }),
            });
            let plan = inline_view(nested, entry).await?;
            return Ok(Some(Arc::new(ViewTable::new(
                plan,
                entry.definition.clone(),
            ))));
        }
        layout_conflict(
            entry,
            self.context.layouts.get(&entry.id).copied(),
            self.context.snapshot_ddl_transaction,
        )?;
        Ok(Some(Arc::new(SnapshotTable::new(
            entry.clone(),
            self.context.clone(),
        )?)))
    }

    fn table_names(&self) -> Vec<String> {
        self.context
            .entries
            .iter()
            .map(|entry| entry.name.clone())
            .collect()
    }

    fn relations(&self) -> Option<Vec<RelationInfo>> {
        let watermarks = &self.context.watermarks;
        let relation = |entry: &CatalogEntry| RelationInfo {
            object_id: entry.id,
            name: entry.name.clone(),
            kind: match entry.kind {
                ObjectKind::Table => RelationKind::Table,
                ObjectKind::View => RelationKind::View,
                ObjectKind::MaterializedView => RelationKind::MaterializedView,
            },
            columns: entry
                .columns
                .iter()
                .map(|column| ColumnInfo {
                    name: column.name.clone(),
                    type_name: column.type_name.clone(),
                    not_null: column.not_null,
                    default: column.default.clone(),
                    identity: column
                        .sequence
                        .as_ref()
                        .and_then(|sequence| sequence.identity)
                        .map(|identity| identity.code()),
                    sequence: column.sequence.as_ref().map(|sequence| SequenceInfo {
                        object_id: sequence.id,
                        name: sequence.name.clone(),
                    }),
                })
                .collect(),
            definition: entry.definition.clone(),
            primary_key: entry.primary_key.clone(),
            indexes: entry
                .indexes
                .iter()
                .map(|index| TableIndexInfo {
                    id: index.id,
                    name: index.name.clone(),
                    columns: index.columns.clone(),
                    unique: index.unique,
                    index_only: index.index_only,
                    include: index.include.clone(),
                    hash: index.hash,
                })
                .collect(),
            populated: self.context.engine.view_status(entry.id).is_populated(),
            watermark: entry.watermark.as_ref().map(|declared| {
                let state = watermarks.get(&entry.id).copied().unwrap_or_default();
                WatermarkInfo {
                    column: declared.column.clone(),
                    delay_micros: declared.delay_micros,
                    watermark: state.watermark,
                    late_rows: state.late_rows,
                }
            }),
        };
        Some(self.context.entries.iter().map(relation).collect())
    }

    fn roles(&self) -> Vec<(String, bool)> {
        self.context.roles.clone()
    }

    fn functions(&self) -> Vec<Arc<SqlFunction>> {
        self.context.functions.clone()
    }

    fn databases(&self) -> Vec<String> {
        self.context.databases.clone()
    }

    fn current_database(&self) -> Option<String> {
        Some(self.context.database.clone())
    }
}

/// The error a materialized view reports while a row of its inputs makes its
/// definition fail (`None` for a healthy view or another kind of object).
pub(crate) fn view_failure(engine: &Engine, entry: &CatalogEntry) -> Option<RsError> {
    if entry.kind != ObjectKind::MaterializedView {
        return None;
    }
    let error = match engine.view_status(entry.id) {
        ViewStatus::Healthy => return None,
        ViewStatus::Building { rows_done } => {
            return Some(RsError::new(
                &rockstream_types::codes::VIEW_BUILDING,
                format!(
                    "materialized view \"{}\" is being built: {rows_done} input rows done",
                    entry.name
                ),
            ))
        }
        ViewStatus::Failed(error) => error,
    };
    if error.code == &rockstream_types::codes::VIEW_NOT_MAINTAINABLE
        || error.code == &rockstream_types::codes::VIEW_BACKFILL_FAILED
    {
        return Some(error);
    }
    Some(
        RsError::new(
            &rockstream_types::codes::VIEW_EVALUATION_ERROR,
            format!(
                "materialized view \"{}\" cannot be maintained: {}",
                entry.name, error.message
            ),
        )
        .with_detail(error.to_string()),
    )
}

#[derive(Debug, Clone)]
pub struct SnapshotTable {
    entry: CatalogEntry,
    types: Vec<SqlType>,
    schema: SchemaRef,
    context: Arc<ReadContext>,
    with_row_key: bool,
    storage: RowStorage,
}

impl SnapshotTable {
    fn new(entry: CatalogEntry, context: Arc<ReadContext>) -> RsResult<Self> {
        let types = entry.sql_types()?;
        let with_row_key = context.with_row_keys && entry.kind == ObjectKind::Table;
        let table_oid = relation_oid(entry.id).to_string();
        let mut fields: Vec<Field> = entry
            .columns
            .iter()
            .zip(&types)
            .enumerate()
            .map(|(position, (column, sql_type))| {
                // What RowDescription says of a column read as it is.
                let mut metadata = std::collections::HashMap::from([
                    (FIELD_TABLE_OID.to_string(), table_oid.clone()),
                    (FIELD_COLUMN_NUMBER.to_string(), (position + 1).to_string()),
                ]);
                if column.type_name.starts_with("character varying") {
                    let length = column.max_chars().map(|length| length.to_string());
                    metadata.insert(FIELD_VARCHAR_LENGTH.to_string(), length.unwrap_or_default());
                }
                Field::new(
                    &column.name,
                    rockstream_ops::arrow_rows::arrow_type(*sql_type),
                    true,
                )
                .with_metadata(metadata)
            })
            .collect();
        if with_row_key {
            fields.push(Field::new(ROW_KEY_COLUMN, DataType::Binary, false));
        }
        Ok(SnapshotTable {
            storage: entry.row_storage(),
            entry,
            types,
            schema: Arc::new(ArrowSchema::new(fields)),
            context,
            with_row_key,
        })
    }

    /// The column whose value starts every storage key.
    fn leading_key_column(&self) -> Option<usize> {
        self.storage.leading_column(&self.entry.primary_key)
    }

    /// Whether the leading key column is the whole partition key (a
    /// one-column primary key or view key): its value then names the one
    /// shard holding its rows.
    fn leading_column_partitions(&self) -> bool {
        match &self.storage {
            RowStorage::Table => self.entry.primary_key.len() == 1,
            RowStorage::Keyed(columns) => columns.len() == 1,
            RowStorage::Counted => self.entry.columns.len() == 1,
        }
    }

    /// `column = literal`, `column IN (literals)`, or such conditions on
    /// one column joined by `OR` (DataFusion writes a short `IN` list so):
    /// the column's position and its non-NULL values (each once), if
    /// `filter` is that shape.
    fn column_values(&self, filter: &Expr) -> Option<(usize, Vec<Datum>)> {
        if let Expr::BinaryExpr(binary) = filter {
            if binary.op == Operator::Or {
                let (left, mut values) = self.column_values(&binary.left)?;
                let (right, more) = self.column_values(&binary.right)?;
                if left != right {
                    return None;
                }
                for value in more {
                    if !values.contains(&value) {
                        values.push(value);
                    }
                }
                return (values.len() <= LOOKUP_VALUES_MAX).then_some((left, values));
            }
        }
        let (name, literals): (
            &datafusion::common::Column,
            Vec<&datafusion::common::ScalarValue>,
        ) = match filter {
            Expr::BinaryExpr(binary) if binary.op == Operator::Eq => {
                match (binary.left.as_ref(), binary.right.as_ref()) {
                    (Expr::Column(name), Expr::Literal(value, _))
                    | (Expr::Literal(value, _), Expr::Column(name)) => (name, vec![value]),
                    _ => return None,
                }
            }
            Expr::InList(in_list)
                if !in_list.negated && in_list.list.len() <= LOOKUP_VALUES_MAX =>
            {
                let Expr::Column(name) = in_list.expr.as_ref() else {
                    return None;
                };
                let literals = in_list
                    .list
                    .iter()
                    .map(|item| match item {
                        Expr::Literal(value, _) => Some(value),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
                (name, literals)
            }
            _ => return None,
        };
        let column = self
            .entry
            .columns
            .iter()
            .position(|column| column.name == name.name)?;
        // Only literals of the column's own type: a conversion could
        // change the value looked up (DataFusion's coercion leaves such
        // a filter's literals in the column's type).
        let column_type = self.schema.fields().get(column)?.data_type();
        let mut values = Vec::with_capacity(literals.len());
        for literal in literals {
            if literal.is_null() {
                continue;
            }
            if &literal.data_type() != column_type {
                return None;
            }
            let array = literal.to_array().ok()?;
            let datum = array_to_datums(&array, self.types[column]).ok()?.pop()?;
            if !datum.is_null() && !values.contains(&datum) {
                values.push(datum);
            }
        }
        (!values.is_empty()).then_some((column, values))
    }

    /// How a scan under `filters` reads the stored rows: the rows under
    /// some values of the leading key column, else those an index names
    /// for some values of its leading column, else all.
    fn access(&self, filters: &[&Expr]) -> Access {
        let restricted: Vec<(usize, Vec<Datum>)> = filters
            .iter()
            .filter_map(|filter| self.column_values(filter))
            .collect();
        // Each value's encoding, in order: rows come in key order.
        let prefixes = |values: &[Datum]| -> Vec<Vec<u8>> {
            let mut prefixes: Vec<Vec<u8>> = values.iter().map(leading_value_prefix).collect();
            prefixes.sort();
            prefixes.dedup();
            prefixes
        };
        let leading_key = self.leading_key_column();
        if let Some((_, values)) = restricted
            .iter()
            .find(|(column, _)| Some(*column) == leading_key)
        {
            return Access::KeyPrefixes(prefixes(values));
        }
        // A table this transaction is rewriting (adding an index among
        // others) has every row it can read in the overlay, and its new
        // indexes no entries yet: a scan finds what another transaction
        // committed meanwhile (and fails, 40001), a lookup would not.
        if self.entry.kind != ObjectKind::Table || self.entry.rewritten == REWRITTEN_BY_PENDING {
            return Access::All;
        }
        // A UNIQUE constraint of several columns has no entry for a row
        // with a NULL in any of them: a lookup by its first column would
        // miss such rows.
        let usable = self
            .entry
            .indexes
            .iter()
            .filter(|index| !index.unique || index.columns.len() == 1);
        for index in usable {
            let Some((_, values)) = restricted
                .iter()
                .find(|(column, _)| index.columns.first() == Some(column))
            else {
                continue;
            };
            let entries = if index.unique {
                IndexEntries::Unique
            } else {
                IndexEntries::Plain {
                    columns: index.columns.len(),
                }
            };
            // Either kind of entry is placed by its leading value.
            let lookups = prefixes(values)
                .into_iter()
                .map(|leading| {
                    let prefix = if index.unique {
                        let mut prefix = unique_prefix(self.entry.id);
                        prefix.extend_from_slice(&index.id.to_be_bytes());
                        prefix.extend_from_slice(&leading);
                        prefix
                    } else {
                        index_value_prefix(self.entry.id, index.id, &leading)
                    };
                    (prefix, leading)
                })
                .collect();
            return Access::Index { lookups, entries };
        }
        Access::All
    }

    /// The visible rows of one storage chunk of the scan (row keys and
    /// values), with their row keys (tables) and multiplicities; a table's
    /// rows that the session overwrote are left out (its overlay supplies
    /// them).
    fn decode_chunk(&self, chunk: Vec<(Vec<u8>, Vec<u8>)>) -> RsResult<Vec<(Vec<u8>, Row)>> {
        let overlay = self.context.overlays.get(&self.entry.id);
        let mut rows = Vec::with_capacity(chunk.len());
        for (key, value) in chunk {
            match self.storage {
                RowStorage::Table => {
                    if overlay.is_some_and(|overlay| overlay.contains_key(&key)) {
                        continue;
                    }
                    rows.push((key, decode_table_row(&self.entry, &value)?));
                }
                RowStorage::Counted => {
                    // A counted row is its key.
                    let row = decode_row(&key)?;
                    for _ in 0..decode_weight(&value) {
                        rows.push((Vec::new(), row.clone()));
                    }
                }
                RowStorage::Keyed(_) => rows.push((Vec::new(), decode_row(&value)?)),
            }
        }
        Ok(rows)
    }

    /// The session's uncommitted rows of this table whose storage key
    /// starts with `key_prefix`.
    fn overlay_rows(&self, key_prefix: &[u8]) -> Vec<(Vec<u8>, Row)> {
        let Some(overlay) = self.context.overlays.get(&self.entry.id) else {
            return Vec::new();
        };
        overlay
            .range(key_prefix.to_vec()..)
            .take_while(|(key, _)| key.starts_with(key_prefix))
            .filter_map(|(key, (_, row))| row.as_ref().map(|row| (key.clone(), row.clone())))
            .collect()
    }

    fn batches(&self, rows: &[(Vec<u8>, Row)]) -> RsResult<Vec<RecordBatch>> {
        let mut batches = Vec::new();
        let data_schema = Arc::new(ArrowSchema::new(
            self.schema.fields()[..self.types.len()].to_vec(),
        ));
        for chunk in rows.chunks(BATCH_ROWS_MAX) {
            let row_refs: Vec<&Row> = chunk.iter().map(|(_, row)| row).collect();
            let batch = rows_to_batch(&row_refs, &self.types, &data_schema, &[])?;
            let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
            if self.with_row_key {
                let mut keys = BinaryBuilder::new();
                for (key, _) in chunk {
                    keys.append_value(key);
                }
                columns.push(Arc::new(keys.finish()));
            }
            // A view may have no columns (`SELECT FROM t`): its rows are
            // counted all the same.
            let options = RecordBatchOptions::new().with_row_count(Some(chunk.len()));
            batches.push(
                RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)
                    .map_err(rockstream_ops::arrow_rows::arrow_error)?,
            );
        }
        Ok(batches)
    }
}

/// A stored row of table `entry` that the reading transaction did not
/// write; 40001 if it cannot be in `entry`'s layout: the transaction
/// rewrote the table for new columns, covering every row it could see, so
/// the row is another transaction's since; or it has another number of
/// columns (an `ALTER TABLE` committed after the reader took its catalog).
pub(crate) fn decode_table_row(entry: &CatalogEntry, bytes: &[u8]) -> RsResult<Row> {
    if entry.rewritten == REWRITTEN_BY_PENDING {
        return Err(RsError::new(
            &rockstream_types::codes::TABLE_ALTERED_CONCURRENTLY,
            format!(
                "table \"{}\" gained rows from another transaction while this one altered its columns",
                entry.name
            ),
        ));
    }
    let row = decode_row(bytes)?;
    if row.len() != entry.columns.len() {
        return Err(RsError::new(
            &rockstream_types::codes::TABLE_ALTERED_CONCURRENTLY,
            format!(
                "table \"{}\" was altered by another transaction while this statement read it",
                entry.name
            ),
        ));
    }
    Ok(row)
}

fn external(error: RsError) -> DataFusionError {
    DataFusionError::External(Box::new(error))
}

#[async_trait]
impl TableProvider for SnapshotTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DataFusionResult<Vec<TableProviderFilterPushDown>> {
        // Inexact: the scan narrows to a key range or an index's rows,
        // DataFusion still filters.
        Ok(filters
            .iter()
            .map(|filter| {
                if self.access(&[filter]) == Access::All {
                    TableProviderFilterPushDown::Unsupported
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DataFusionResult<Arc<dyn ExecutionPlan>> {
        if let Some(error) = view_failure(&self.context.engine, &self.entry) {
            return Err(external(error));
        }
        // The view may have been complete for the engine but not yet in the
        // snapshot this read pinned earlier (a REPEATABLE READ transaction,
        // or a build whose last turn committed since): its output there is
        // partial.
        if self.entry.kind == ObjectKind::MaterializedView {
            let marker = rockstream_runtime::installed_marker(self.entry.id);
            if self
                .context
                .snapshot
                .get(&marker)
                .await
                .map_err(external)?
                .is_none()
            {
                return Err(external(RsError::new(
                    &rockstream_types::codes::VIEW_BUILDING,
                    format!(
                        "materialized view \"{}\" was still being built in the state this \
                         transaction reads",
                        self.entry.name
                    ),
                )));
            }
        }
        let filters: Vec<&Expr> = filters.iter().collect();
        let scan = SnapshotScan {
            table: self.clone(),
            access: self.access(&filters),
        };
        let exec = StreamingTableExec::try_new(
            self.schema.clone(),
            vec![Arc::new(scan)],
            projection,
            Vec::new(),
            false,
            limit,
        )?;
        Ok(Arc::new(exec))
    }
}

/// Values of an `IN` list a scan looks up one by one; a longer list reads
/// every row.
const LOOKUP_VALUES_MAX: usize = 1024;

/// Which stored rows a scan reads.
#[derive(Debug, Clone, PartialEq)]
enum Access {
    All,
    /// The rows whose leading key column holds one of the values encoded
    /// so (ascending).
    KeyPrefixes(Vec<Vec<u8>>),
    /// The rows an index's entries name (RFC 0014), per value: the entries
    /// under the prefix, read from the shard of the value (the second).
    Index {
        lookups: Vec<(Vec<u8>, Vec<u8>)>,
        entries: IndexEntries,
    },
}

/// One scan of a table's or view's rows at the pinned snapshot, streamed:
/// each poll reads one bounded storage chunk, so a scan holds at most a
/// chunk's rows whatever the relation's size, and a consumer that stops
/// early (`LIMIT`) stops the reads. With key prefixes (encoded values of
/// the leading key column), only the rows under them are read; through an
/// index, only the rows its entries for those values name.
#[derive(Debug)]
struct SnapshotScan {
    table: SnapshotTable,
    access: Access,
}

/// One lookup of the stored rows a [`SnapshotScan`] reads, over the shards
/// that may hold them.
enum StoredRows {
    Scan(RowCursor),
    Index(IndexRowCursor),
}

impl StoredRows {
    async fn next_chunk(&mut self) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        match self {
            StoredRows::Scan(cursor) => cursor.next_chunk().await,
            StoredRows::Index(cursor) => cursor.next_chunk().await,
        }
    }
}

/// A scan's lookups, read one after the other.
struct Lookups(std::collections::VecDeque<StoredRows>);

impl Lookups {
    /// The next chunk of rows; empty once every lookup is done.
    async fn next_chunk(&mut self) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        while let Some(lookup) = self.0.front_mut() {
            let chunk = lookup.next_chunk().await?;
            if !chunk.is_empty() {
                return Ok(chunk);
            }
            self.0.pop_front();
        }
        Ok(Vec::new())
    }
}

/// Where a [`SnapshotScan`]'s stream is.
struct ScanCursor {
    table: SnapshotTable,
    /// The session's own rows to add: those under these key prefixes.
    overlay_prefixes: Vec<Vec<u8>>,
    stored: Lookups,
    stored_done: bool,
    overlay_done: bool,
    /// Batches decoded and not yet handed on.
    ready: std::collections::VecDeque<RecordBatch>,
}

impl ScanCursor {
    /// The next batch of rows, reading storage chunks until one has a
    /// visible row; then the session's own uncommitted rows; `None` at the
    /// end.
    async fn next_batch(&mut self) -> RsResult<Option<RecordBatch>> {
        loop {
            if let Some(batch) = self.ready.pop_front() {
                return Ok(Some(batch));
            }
            let rows = if !self.stored_done {
                let chunk = self.stored.next_chunk().await?;
                self.stored_done = chunk.is_empty();
                self.table.decode_chunk(chunk)?
            } else if !self.overlay_done {
                self.overlay_done = true;
                self.overlay_prefixes
                    .iter()
                    .flat_map(|prefix| self.table.overlay_rows(prefix))
                    .collect()
            } else {
                return Ok(None);
            };
            self.ready.extend(self.table.batches(&rows)?);
        }
    }
}

impl PartitionStream for SnapshotScan {
    fn schema(&self) -> &SchemaRef {
        &self.table.schema
    }

    fn execute(&self, _context: Arc<TaskContext>) -> SendableRecordBatchStream {
        let snapshot = &self.table.context.snapshot;
        let (overlay_prefixes, lookups): (Vec<Vec<u8>>, Vec<StoredRows>) = match &self.access {
            Access::All => (
                vec![Vec::new()],
                vec![StoredRows::Scan(snapshot.scan_rows(
                    &self.table.storage,
                    self.table.entry.id,
                    &[],
                    false,
                ))],
            ),
            Access::KeyPrefixes(prefixes) => (
                prefixes.clone(),
                prefixes
                    .iter()
                    .map(|prefix| {
                        StoredRows::Scan(snapshot.scan_rows(
                            &self.table.storage,
                            self.table.entry.id,
                            prefix,
                            self.table.leading_column_partitions(),
                        ))
                    })
                    .collect(),
            ),
            // The session's rows are all added: DataFusion filters them.
            Access::Index { lookups, entries } => (
                vec![Vec::new()],
                lookups
                    .iter()
                    .map(|(prefix, partition)| {
                        StoredRows::Index(snapshot.index_rows(
                            self.table.entry.id,
                            prefix.clone(),
                            partition,
                            *entries,
                        ))
                    })
                    .collect(),
            ),
        };
        let cursor = ScanCursor {
            table: self.table.clone(),
            overlay_prefixes,
            stored: Lookups(lookups.into()),
            stored_done: false,
            overlay_done: false,
            ready: std::collections::VecDeque::new(),
        };
        let batches = futures::stream::try_unfold(cursor, |mut cursor| async move {
            let batch = cursor.next_batch().await.map_err(external)?;
            Ok(batch.map(|batch| (batch, cursor)))
        });
        Box::pin(RecordBatchStreamAdapter::new(
            self.table.schema.clone(),
            batches,
        ))
    }
}
