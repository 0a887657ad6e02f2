//! INSERT / UPDATE / DELETE / COPY: evaluated by DataFusion over the
//! session's snapshot, buffered as exact-key row changes in the transaction.
//!
//! Each changed row is recorded as `(row as first read, row now)` under its
//! storage key (the encoded primary key, or a hidden random row id for
//! tables without one). At commit the engine checks that every first-read
//! row is still current, so concurrent transactions never lose updates.

use std::borrow::Cow;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BinaryArray, StringArray};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{Insert, ObjectName, SetExpr, Statement};
use rockstream_control::{CatalogEntry, ColumnDef};
use rockstream_ops::arrow_rows::{array_to_datums, arrow_type};
use rockstream_ops::keys::{keyless_row_key, table_row_key};
use rockstream_plan::arrow_types::{cast_rounds, datafusion_error, round_to_whole};
use rockstream_plan::datetime_text::{arrow_datetime_texts, DatetimeInput};
use rockstream_planner::{
    alias_select_items, normalize_interval_literals, normalize_type_spellings,
};
use rockstream_types::{codes, Datum, Row, RsError, RsResult, SqlType};

use crate::backend::{as_postgres_reads_it, repeats_a_name, Gateway};
use crate::defaults;
use crate::fast_path;
use crate::memory::{change_bytes, exhausted};
use crate::providers::SnapshotResolver;
use crate::session::{GatewaySession, PendingTable};
use crate::upsert;

/// Bound on rows one transaction may change.
pub const TRANSACTION_ROWS_MAX: usize = 5_000_000;

/// What a row key takes, for counting an insert's memory before its key
/// is made (a key is its columns' encoding, a few bytes each).
const ROW_KEY_BYTES: usize = 32;

/// Runs a query (SQL text) over the session's view of the data.
pub async fn query_batches(
    gateway: &Gateway,
    session: &GatewaySession,
    sql: &str,
    with_row_keys: bool,
) -> RsResult<Vec<RecordBatch>> {
    let resolver = Arc::new(SnapshotResolver {
        context: Arc::new(gateway.read_context(session, with_row_keys)),
    });
    let context = gateway.statement_context(session, resolver);
    let frame = context.sql(sql).await.map_err(query_error)?;
    gateway.stop(session).collect(frame).await
}

pub fn query_error(error: datafusion::error::DataFusionError) -> RsError {
    if let Some(ours) = find_ours(&error) {
        return ours;
    }
    if let Some(out_of_memory) = crate::memory::out_of_memory(&error) {
        return out_of_memory;
    }
    rockstream_planner::undefined_relation(&error).unwrap_or_else(|| datafusion_error(error))
}

fn find_ours(error: &datafusion::error::DataFusionError) -> Option<RsError> {
    use datafusion::error::DataFusionError;
    match error {
        DataFusionError::External(inner) => inner.downcast_ref::<RsError>().cloned(),
        DataFusionError::Context(_, inner) => find_ours(inner),
        DataFusionError::Shared(inner) => find_ours(inner),
        _ => None,
    }
}

/// The rows a write keeps for its `RETURNING` clause (none without one).
pub type Returned = Vec<Row>;

/// `INSERT`: DataFusion plans the insert (column list, casts); we run its
/// input. Returns the count and, with `returning`, the rows inserted.
/// `autocommit`: the statement commits as soon as it ends.
pub async fn insert(
    gateway: &Gateway,
    session: &mut GatewaySession,
    entry: &CatalogEntry,
    statement: &Statement,
    returning: bool,
    autocommit: bool,
) -> RsResult<(u64, Returned)> {
    let Statement::Insert(written) = statement else {
        return Err(RsError::internal("not an INSERT"));
    };
    check_values_shape(entry, written)?;
    let conflict = upsert::on_conflict(entry, written.on.as_ref())?;
    defaults::check_generated_always(entry, written)?;
    let rows = inserted_rows(gateway, session, entry, written).await?;
    match conflict {
        Some((conflict, arbiter)) => {
            let alias = written
                .table_alias
                .as_ref()
                .map(|alias| crate::ddl::ident_name(&alias.alias));
            upsert::insert_on_conflict(
                gateway, session, entry, rows, conflict, &arbiter, alias, returning,
            )
            .await
        }
        None => {
            let kept = if returning {
                as_stored(entry, &rows)
            } else {
                Vec::new()
            };
            // One new row committed right away, returning nothing: the
            // commit's own check of its key fails the statement just as
            // this read would, so the read is saved. (With more rows, a
            // later row's other error could come first; with RETURNING,
            // rows would be sent before the error; a table with a
            // watermark drops a late row before the commit checks keys,
            // where this read refuses it.)
            let check_storage =
                !(autocommit && !returning && rows.len() == 1 && entry.event_time().is_none());
            let count = insert_rows(gateway, session, entry, rows, check_storage).await?;
            Ok((count, kept))
        }
    }
}

/// The rows an INSERT proposes, defaults filled in.
async fn inserted_rows(
    gateway: &Gateway,
    session: &GatewaySession,
    entry: &CatalogEntry,
    written: &Insert,
) -> RsResult<Vec<Row>> {
    if let Some((mut rows, supplied)) = fast_path::insert_values(entry, written) {
        defaults::fill_defaults(gateway, session, entry, &supplied, &mut rows).await?;
        return Ok(rows);
    }
    let resolver = Arc::new(SnapshotResolver {
        context: Arc::new(gateway.read_context(session, false)),
    });
    let context = gateway.statement_context(session, resolver);
    let mut insert = Cow::Borrowed(written);
    // RETURNING, the target's alias it may use, and ON CONFLICT are the
    // caller's: DataFusion plans the rows to insert.
    if written.returning.is_some() || written.table_alias.is_some() || written.on.is_some() {
        let planned = insert.to_mut();
        planned.returning = None;
        planned.table_alias = None;
        planned.on = None;
    }
    // Planning is costlier than the copy.
    let mut rewritten = insert.clone().into_owned();
    defaults::rewrite_insert(entry, &mut rewritten)?;
    if rewritten != *insert {
        // The defaults written in read as the statement's own literals do.
        let mut statement = Statement::Insert(rewritten);
        normalize_interval_literals(&mut statement);
        normalize_type_spellings(&mut statement);
        let Statement::Insert(rewritten) = statement else {
            return Err(RsError::internal("a rewritten INSERT is an INSERT"));
        };
        insert = Cow::Owned(rewritten);
    }
    let Some(source) = insert.source.as_deref() else {
        // `INSERT INTO t DEFAULT VALUES`: one row of defaults.
        let mut rows = vec![vec![Datum::Null; entry.columns.len()]];
        defaults::fill_defaults(gateway, session, entry, &[], &mut rows).await?;
        return Ok(rows);
    };
    if matches!(source.body.as_ref(), SetExpr::Values(_)) {
        // DataFusion types a VALUES list by the columns it goes to
        // (`$1`, `'2024-01-31'` into a date column).
        planned_insert_rows(gateway, session, &context, entry, &mut insert).await
    } else {
        // A query is planned as a query: DataFusion's INSERT planning would
        // type every VALUES list inside it by the target's columns.
        query_insert_rows(gateway, session, &context, entry, &mut insert).await
    }
}

/// PostgreSQL's errors (42601) for a `VALUES` list that cannot fill its
/// target columns: lists of unequal length, or more or fewer values than
/// the columns named (without a column list, fewer fill the leading ones).
/// An unknown or repeated column in the list is reported first.
fn check_values_shape(entry: &CatalogEntry, insert: &Insert) -> RsResult<()> {
    let Some(SetExpr::Values(values)) = insert.source.as_deref().map(|source| source.body.as_ref())
    else {
        return Ok(());
    };
    let Some(width) = values.rows.first().map(|row| row.content.len()) else {
        return Ok(());
    };
    let targets = insert_positions(entry, &insert.columns)?.len();
    let syntax = |message: &str| Err(RsError::new(&codes::SYNTAX_ERROR, message.to_owned()));
    // PostgreSQL judges the first list against the columns, then the rest.
    if width > targets {
        return syntax("INSERT has more expressions than target columns");
    }
    if width < targets && !insert.columns.is_empty() {
        return syntax("INSERT has more target columns than expressions");
    }
    if values.rows.iter().any(|row| row.content.len() != width) {
        return syntax("VALUES lists must all be the same length");
    }
    Ok(())
}

/// The rows of an INSERT whose source is a `VALUES` list, planned as
/// DataFusion plans an INSERT.
async fn planned_insert_rows(
    gateway: &Gateway,
    session: &GatewaySession,
    context: &SessionContext,
    entry: &CatalogEntry,
    insert: &mut Cow<'_, Insert>,
) -> RsResult<Vec<Row>> {
    let plan = context
        .state()
        .create_logical_plan(&insert.to_string())
        .await
        .map_err(query_error)?;
    let LogicalPlan::Dml(dml) = plan else {
        return Err(RsError::internal("INSERT did not plan as DML"));
    };
    let frame = context
        .execute_logical_plan((*dml.input).clone())
        .await
        .map_err(query_error)?;
    let batches = gateway.stop(session).collect(frame).await?;
    let types = entry.sql_types()?;
    let mut rows = Vec::new();
    for batch in &batches {
        rows.extend(batch_rows(batch, &types, 0)?);
    }
    Ok(rows)
}

/// The rows of `INSERT … query`: the query planned on its own, each of its
/// columns read as the type of the column it goes to, as PostgreSQL
/// assigns them.
async fn query_insert_rows(
    gateway: &Gateway,
    session: &GatewaySession,
    context: &SessionContext,
    entry: &CatalogEntry,
    insert: &mut Cow<'_, Insert>,
) -> RsResult<Vec<Row>> {
    let positions = insert_positions(entry, &insert.columns)?;
    let plan = |sql: String| async move { context.state().create_logical_plan(&sql).await };
    let Some(source) = insert.source.as_deref() else {
        return Err(RsError::internal("INSERT without a source"));
    };
    // The query reads as it would on its own (`FROM generate_series(…) g`
    // names its column `g`, USING joins, …).
    let mut source = as_postgres_reads_it(context, source).await?;
    let plan = match plan(source.to_string()).await {
        // The names of an inserted query's columns do not matter.
        Err(error) if repeats_a_name(&error.to_string()) && alias_select_items(&mut source) => {
            plan(source.to_string()).await
        }
        planned => planned,
    }
    .map_err(query_error)?;
    let width = plan.schema().fields().len();
    // Without a column list, a query may fill the first columns only: the
    // rest take their defaults.
    let short = insert.columns.is_empty() && width < positions.len();
    let positions = if short {
        positions[..width].to_vec()
    } else {
        positions
    };
    if width != positions.len() {
        let more = if width > positions.len() {
            "expressions than target columns"
        } else {
            "target columns than expressions"
        };
        return Err(RsError::new(
            &codes::SYNTAX_ERROR,
            format!("INSERT has more {more}"),
        ));
    }
    let frame = context
        .execute_logical_plan(plan)
        .await
        .map_err(query_error)?;
    let batches = gateway.stop(session).collect(frame).await?;
    let types = entry.sql_types()?;
    let mut rows = Vec::new();
    for batch in &batches {
        let mut typed: Vec<Row> = (0..batch.num_rows())
            .map(|_| vec![Datum::Null; types.len()])
            .collect();
        for (field, position) in positions.iter().enumerate() {
            let sql_type = types[*position];
            let array = strict_cast(batch.column(field), sql_type)?;
            for (row, datum) in typed.iter_mut().zip(array_to_datums(&array, sql_type)?) {
                row[*position] = datum;
            }
        }
        rows.extend(typed);
    }
    if short {
        defaults::fill_defaults(gateway, session, entry, &positions, &mut rows).await?;
    }
    Ok(rows)
}

/// The column an `UPDATE … SET` (or `ON CONFLICT DO UPDATE SET`)
/// assignment writes: 42703 for an unknown one.
pub(crate) fn assigned_column(
    entry: &CatalogEntry,
    assignment: &datafusion::sql::sqlparser::ast::Assignment,
) -> RsResult<usize> {
    let target = crate::backend::object_name(&assignment.target.to_string());
    let column = target.rsplit('.').next().unwrap_or(&target);
    entry.column_position(column)
}

/// The table positions an INSERT's column list names (every column, in
/// order, when it names none): 42703 for an unknown column, 42701 for one
/// named twice.
fn insert_positions(entry: &CatalogEntry, columns: &[ObjectName]) -> RsResult<Vec<usize>> {
    if columns.is_empty() {
        return Ok((0..entry.columns.len()).collect());
    }
    let mut positions = Vec::with_capacity(columns.len());
    for column in columns {
        let name = match column.0.as_slice() {
            [part] => part
                .as_ident()
                .map(crate::ddl::ident_name)
                .unwrap_or_else(|| part.to_string()),
            _ => column.to_string(),
        };
        let position = entry
            .columns
            .iter()
            .position(|existing| existing.name == name)
            .ok_or_else(|| {
                RsError::new(
                    &codes::UNDEFINED_COLUMN,
                    format!(
                        "column \"{name}\" of relation \"{}\" does not exist",
                        entry.name
                    ),
                )
            })?;
        if positions.contains(&position) {
            return Err(RsError::new(
                &codes::DUPLICATE_COLUMN,
                format!("column \"{name}\" specified more than once"),
            ));
        }
        positions.push(position);
    }
    Ok(positions)
}

/// Reads `types.len()` columns starting at `first` as typed rows; string
/// input that does not parse is an invalid-input error, as in PostgreSQL.
pub(crate) fn batch_rows(
    batch: &RecordBatch,
    types: &[SqlType],
    first: usize,
) -> RsResult<Vec<Row>> {
    let mut rows: Vec<Row> = (0..batch.num_rows())
        .map(|_| Vec::with_capacity(types.len()))
        .collect();
    for (offset, sql_type) in types.iter().enumerate() {
        let array = strict_cast(batch.column(first + offset), *sql_type)?;
        for (row, datum) in rows.iter_mut().zip(array_to_datums(&array, *sql_type)?) {
            row.push(datum);
        }
    }
    Ok(rows)
}

pub(crate) fn strict_cast(array: &ArrayRef, sql_type: SqlType) -> RsResult<ArrayRef> {
    let target = arrow_type(sql_type);
    if array.data_type() == &target {
        return Ok(array.clone());
    }
    // PostgreSQL rounds a fraction stored in an integer column.
    let rounded: ArrayRef;
    let array = if cast_rounds(array.data_type(), &target) {
        rounded = round_to_whole(array)?;
        &rounded
    } else {
        array
    };
    // PostgreSQL's date and time input forms that Arrow lacks.
    let rewritten: ArrayRef;
    let array = match (
        DatetimeInput::of(&target),
        array.as_any().downcast_ref::<StringArray>(),
    ) {
        (Some(input), Some(texts)) => match arrow_datetime_texts(texts, input) {
            Some(texts) => {
                rewritten = Arc::new(texts);
                &rewritten
            }
            None => array,
        },
        _ => array,
    };
    // PostgreSQL's interval forms with a time of day (`1 day 00:00:05`,
    // what PostgreSQL itself prints), which Arrow lacks.
    let intervals: ArrayRef;
    let array = match (&target, array.as_any().downcast_ref::<StringArray>()) {
        (DataType::Interval(_), Some(texts)) => {
            intervals = Arc::new(
                texts
                    .iter()
                    .map(|text| text.map(rockstream_planner::readable_interval))
                    .collect::<StringArray>(),
            );
            &intervals
        }
        _ => array,
    };
    let options = CastOptions {
        safe: false,
        ..CastOptions::default()
    };
    cast_with_options(array, &target, &options).map_err(|error| {
        let message = error.to_string();
        if message.contains("overflow")
            || message.contains("too large")
            || message.contains("precision")
            || only_whole_numbers_for_integers(array, &target)
        {
            RsError::new(
                &codes::NUMERIC_OUT_OF_RANGE,
                format!(
                    "value out of range for type {}: {message}",
                    sql_type.pg_name()
                ),
            )
        } else {
            RsError::new(
                &codes::INVALID_INPUT_VALUE,
                format!("invalid input for type {}: {message}", sql_type.pg_name()),
            )
        }
    })
}

/// Whether a failed cast to `target` can only have been a value out of
/// range: an integer target, and numbers (or texts of whole numbers) in.
fn only_whole_numbers_for_integers(array: &ArrayRef, target: &DataType) -> bool {
    if !target.is_integer() {
        return false;
    }
    if array.data_type().is_numeric() {
        return true;
    }
    let Some(texts) = array.as_any().downcast_ref::<StringArray>() else {
        return false;
    };
    texts.iter().flatten().all(|text| {
        let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
        !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit())
    })
}

/// Each column's declared length limit (`varchar(n)`), looked up once per
/// statement.
pub(crate) fn length_limits(entry: &CatalogEntry) -> Vec<Option<usize>> {
    entry.columns.iter().map(ColumnDef::max_chars).collect()
}

/// Checks a row about to be stored against its columns' constraints, as
/// PostgreSQL does on assignment: NOT NULL, and a `varchar(n)` length. A
/// value too long only by trailing spaces is cut to `n`; any other is an
/// error.
pub(crate) fn conform_row(
    entry: &CatalogEntry,
    limits: &[Option<usize>],
    row: &mut Row,
) -> RsResult<()> {
    for ((column, limit), datum) in entry.columns.iter().zip(limits).zip(row.iter_mut()) {
        if column.not_null && datum.is_null() {
            return Err(RsError::new(
                &codes::NOT_NULL_VIOLATION,
                format!(
                    "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                    column.name, entry.name
                ),
            ));
        }
        if let (Some(limit), Datum::Text(text)) = (limit, &mut *datum) {
            if let Some((cut, _)) = text.char_indices().nth(*limit) {
                if !text[cut..].chars().all(|c| c == ' ') {
                    return Err(RsError::new(
                        &codes::STRING_TOO_LONG,
                        format!(
                            "value too long for type character varying({limit}) in column \"{}\" of relation \"{}\"",
                            column.name, entry.name
                        ),
                    ));
                }
                text.truncate(cut);
            }
        }
    }
    Ok(())
}

/// `rows` as [`insert_rows`] stores them (a `varchar(n)` value cut to its
/// length), for `RETURNING`; a row that breaks a column's rules is left as
/// it is, since storing it fails the statement.
fn as_stored(entry: &CatalogEntry, rows: &[Row]) -> Vec<Row> {
    let limits = length_limits(entry);
    rows.iter()
        .map(|row| {
            let mut stored = row.clone();
            let _ = conform_row(entry, &limits, &mut stored);
            stored
        })
        .collect()
}

/// The rows among `changes` (key, row before, row after) that the
/// transaction has not changed yet, and the memory `changes` add
/// ([`change_bytes`]): what [`reserve_changes`] counts. A row changed again
/// counts once, and adds only what its new contents take beyond the ones
/// the transaction holds — and, while a savepoint is held, the contents it
/// replaces, which the undo log keeps for `ROLLBACK TO`.
pub(crate) fn new_changes<'a>(
    session: &GatewaySession,
    entry: &CatalogEntry,
    changes: impl IntoIterator<Item = (&'a [u8], Option<&'a Row>, Option<&'a Row>)>,
) -> (usize, usize) {
    let buffered = session
        .transaction
        .as_ref()
        .and_then(|transaction| transaction.tables.get(&entry.id));
    let savepoint_held = session
        .transaction
        .as_ref()
        .is_some_and(|transaction| !transaction.savepoints.is_empty());
    changes
        .into_iter()
        .fold((0, 0), |(rows, bytes), (key, old, new)| {
            match buffered.and_then(|table| table.get(key)) {
                Some((read, held)) => {
                    let grown = change_bytes(key.len(), read.as_ref(), new)
                        .saturating_sub(change_bytes(key.len(), read.as_ref(), held.as_ref()));
                    let kept = if savepoint_held {
                        change_bytes(key.len(), None, held.as_ref())
                    } else {
                        0
                    };
                    (rows, bytes + grown + kept)
                }
                None => (rows + 1, bytes + change_bytes(key.len(), old, new)),
            }
        })
}

/// Counts `more` changed rows of `entry`, taking `bytes` of memory until
/// the transaction ends ([`change_bytes`]), against the transaction's
/// bounds: 54000 past [`TRANSACTION_ROWS_MAX`] changed rows of the table
/// or past the transaction's memory limit; 53200 when the server's total
/// for statements and transactions is taken. (Rows a later failure of the
/// statement discards stay counted until the transaction ends.)
pub(crate) fn reserve_changes(
    gateway: &Gateway,
    session: &mut GatewaySession,
    entry: &CatalogEntry,
    more: usize,
    bytes: usize,
) -> RsResult<()> {
    let transaction = session.transaction.get_or_insert_with(Default::default);
    let buffered = transaction
        .tables
        .get(&entry.id)
        .map_or(0, |table| table.rows().len());
    if buffered + more > TRANSACTION_ROWS_MAX {
        return Err(RsError::new(
            &codes::WRITE_BUFFER_FULL,
            format!("a transaction may change at most {TRANSACTION_ROWS_MAX} rows"),
        ));
    }
    let memory = gateway.memory();
    let reservation = transaction
        .memory
        .get_or_insert_with(|| memory.transaction_reservation());
    let Err(error) = reservation.try_grow(bytes) else {
        return Ok(());
    };
    let held = reservation.size();
    let limit = memory.limits().transaction_bytes;
    let reason = exhausted(&error).map_or_else(|| error.to_string(), str::to_owned);
    let code = if held.saturating_add(bytes) > limit {
        &codes::WRITE_BUFFER_FULL
    } else {
        &codes::OUT_OF_MEMORY
    };
    Err(RsError::new(
        code,
        format!(
            "{reason}: {} MB held for its changes, and {more} more rows of \"{}\" take about {} MB; load large data in several transactions",
            held >> 20,
            entry.name,
            bytes.div_ceil(1 << 20)
        ),
    ))
}

/// The transaction's pending changes to `entry` (opening the implicit
/// transaction of a statement if none is open); 40001 when they were
/// written for a layout of the table that another transaction's
/// `ALTER TABLE` has since replaced (RFC 0004).
pub(crate) fn pending_table<'a>(
    session: &'a mut GatewaySession,
    entry: &CatalogEntry,
) -> RsResult<&'a mut PendingTable> {
    session.check_layout(entry)?;
    let transaction = session.transaction.get_or_insert_with(Default::default);
    Ok(transaction
        .tables
        .entry(entry.id)
        .or_insert_with(|| PendingTable::new(entry.name.clone(), entry.rewritten)))
}

/// Adds new rows to the transaction, refusing duplicate primary keys.
/// With `check_storage` false (bulk COPY, a lone autocommit row) a key
/// that already exists in storage is caught by the engine at commit instead
/// of here, saving a read per row; the statement fails the same way, with
/// the same detail.
pub async fn insert_rows(
    gateway: &Gateway,
    session: &mut GatewaySession,
    entry: &CatalogEntry,
    rows: Vec<Row>,
    check_storage: bool,
) -> RsResult<u64> {
    let snapshot = gateway.database().engine().published().snapshot;
    let count = rows.len() as u64;
    let bytes = rows
        .iter()
        .map(|row| change_bytes(ROW_KEY_BYTES, None, Some(row)))
        .sum();
    reserve_changes(gateway, session, entry, rows.len(), bytes)?;
    let table = pending_table(session, entry)?;
    let limits = length_limits(entry);
    let mut keyed: Vec<(Vec<u8>, Row)> = Vec::with_capacity(rows.len());
    // A row that breaks a column's rules fails the statement, but only
    // after the rows before it: a repeated key among them is reported
    // first, as PostgreSQL, inserting row by row, would.
    let mut failure = None;
    for mut row in rows {
        if let Err(error) = conform_row(entry, &limits, &mut row) {
            failure = Some(error);
            break;
        }
        let key = if entry.primary_key.is_empty() {
            keyless_row_key(gateway.runtime().random_u128())
        } else {
            table_row_key(&entry.primary_key, &row)
        };
        keyed.push((key, row));
    }
    let duplicate = |row: &Row| duplicate_key(entry, row);
    if failure.is_none() && table.rows().is_empty() && !check_storage {
        // A bulk load into a table this transaction has not touched (a
        // COPY): sort once and build the buffer in one pass, rather than
        // searching it once per row. Input in key order sorts in linear
        // time. Keys repeated in the input take the row-by-row path below,
        // which reports the first repeat in input order.
        let mut sorted: Vec<&(Vec<u8>, Row)> = keyed.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        if sorted.windows(2).all(|pair| pair[0].0 != pair[1].0) {
            // Collecting a map sorts its input and builds the tree in bulk.
            table.fill(keyed);
            return Ok(count);
        }
    }
    // One search of the buffer per row (a COPY's later parts come here).
    for (key, row) in keyed {
        match table.get(&key) {
            Some((_, Some(_))) => return Err(duplicate(&row)),
            // Deleted by this transaction: inserted again.
            Some((_, None)) => {}
            None => {
                let stored = if check_storage {
                    snapshot.table_row(entry.id, &key).await?
                } else {
                    None
                };
                if stored.is_some() && !entry.primary_key.is_empty() {
                    return Err(duplicate(&row));
                }
            }
        }
        table.set(key, Some(row), || None);
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(count),
    }
}

/// The error for a new row whose primary key another row has.
pub(crate) fn duplicate_key(entry: &CatalogEntry, row: &Row) -> RsError {
    let key: Vec<(&str, String)> = entry
        .primary_key
        .iter()
        .map(|index| (entry.columns[*index].name.as_str(), row[*index].to_string()))
        .collect();
    RsError::primary_key_violation(&entry.name, &key)
}

/// `UPDATE`/`DELETE`: `selection_sql` yields the row key, the current row
/// and (for UPDATE) the new values of `assigned` columns. Returns the count
/// and, with `returning`, the rows as updated (or as deleted).
pub async fn modify(
    gateway: &Gateway,
    session: &mut GatewaySession,
    entry: &CatalogEntry,
    selection_sql: &str,
    assigned: &[usize],
    delete: bool,
    returning: bool,
) -> RsResult<(u64, Returned)> {
    let batches = query_batches(gateway, session, selection_sql, true).await?;
    let types = entry.sql_types()?;
    let assigned_types: Vec<SqlType> = assigned.iter().map(|index| types[*index]).collect();
    let limits = length_limits(entry);
    let mut changes: Vec<(Vec<u8>, Row, Option<Row>)> = Vec::new();
    for batch in &batches {
        let keys = batch
            .column(0)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| RsError::internal("row key column is not binary"))?;
        let old_rows = batch_rows(batch, &types, 1)?;
        let new_values = batch_rows(batch, &assigned_types, 1 + types.len())?;
        for (index, (old, values)) in old_rows.into_iter().zip(new_values).enumerate() {
            let new = if delete {
                None
            } else {
                let mut new = old.clone();
                for (position, value) in assigned.iter().zip(values) {
                    new[*position] = value;
                }
                conform_row(entry, &limits, &mut new)?;
                Some(new)
            };
            changes.push((keys.value(index).to_vec(), old, new));
        }
    }
    let (more, bytes) = new_changes(
        session,
        entry,
        changes
            .iter()
            .map(|(key, old, new)| (key.as_slice(), Some(old), new.as_ref())),
    );
    reserve_changes(gateway, session, entry, more, bytes)?;
    let count = changes.len() as u64;
    let kept: Returned = if returning {
        changes
            .iter()
            .map(|(_, old, new)| new.clone().unwrap_or_else(|| old.clone()))
            .collect()
    } else {
        Vec::new()
    };
    let table = pending_table(session, entry)?;
    let primary_key_changes = !delete
        && assigned
            .iter()
            .any(|index| entry.primary_key.contains(index));
    let mut inserted = Vec::new();
    for (key, old, new) in changes {
        let current = if primary_key_changes {
            None
        } else {
            new.clone()
        };
        table.set(key, current, || Some(old));
        if primary_key_changes {
            inserted.extend(new);
        }
    }
    if !inserted.is_empty() {
        insert_rows(gateway, session, entry, inserted, true).await?;
    }
    Ok((count, kept))
}

/// The positions in the table of the columns a `COPY` lists (every column
/// when it lists none); 42703 naming one that does not exist.
pub(crate) fn copy_column_positions(
    entry: &CatalogEntry,
    columns: &[String],
) -> RsResult<Vec<usize>> {
    if columns.is_empty() {
        return Ok((0..entry.columns.len()).collect());
    }
    columns
        .iter()
        .map(|name| {
            entry
                .columns
                .iter()
                .position(|column| &column.name == name)
                .ok_or_else(|| {
                    RsError::new(
                        &codes::UNDEFINED_COLUMN,
                        format!(
                            "column \"{name}\" of relation \"{}\" does not exist",
                            entry.name
                        ),
                    )
                })
        })
        .collect()
}

/// `COPY ... FROM STDIN` rows (text fields) → typed rows of the table.
pub fn copy_rows(
    entry: &CatalogEntry,
    columns: &[String],
    rows: Vec<Vec<Option<String>>>,
) -> RsResult<Vec<Row>> {
    let types = entry.sql_types()?;
    let positions = copy_column_positions(entry, columns)?;
    for (line, row) in rows.iter().enumerate() {
        if row.len() != positions.len() {
            return Err(RsError::new(
                &codes::COPY_MALFORMED,
                format!(
                    "COPY {}, line {}: expected {} fields, found {}",
                    entry.name,
                    line + 1,
                    positions.len(),
                    row.len()
                ),
            ));
        }
    }
    text_rows(entry, &types, &positions, &rows, |error, position| {
        error.with_detail(format!("column {}", entry.columns[position].name))
    })
}

/// Rows of text fields (field `i` of a row for column `positions[i]`)
/// read by each column type's input function, as PostgreSQL reads COPY
/// text or an untyped literal; columns not named are NULL. `explain`
/// annotates a field's error with the column it was for.
pub(crate) fn text_rows(
    entry: &CatalogEntry,
    types: &[SqlType],
    positions: &[usize],
    rows: &[Vec<Option<String>>],
    explain: impl Fn(RsError, usize) -> RsError,
) -> RsResult<Vec<Row>> {
    let mut typed: Vec<Row> = (0..rows.len())
        .map(|_| vec![Datum::Null; entry.columns.len()])
        .collect();
    for (field, position) in positions.iter().enumerate() {
        let texts: StringArray = rows.iter().map(|row| row[field].as_deref()).collect();
        let array: ArrayRef = Arc::new(texts);
        let parsed =
            strict_cast(&array, types[*position]).map_err(|error| explain(error, *position))?;
        for (row, datum) in typed
            .iter_mut()
            .zip(array_to_datums(&parsed, types[*position])?)
        {
            row[*position] = datum;
        }
    }
    Ok(typed)
}
