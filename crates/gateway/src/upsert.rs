//! `INSERT … ON CONFLICT [(columns) | ON CONSTRAINT name] DO NOTHING | DO
//! UPDATE SET … [WHERE …]` over the primary key or a UNIQUE constraint
//! (RFC 0006), the conflict's arbiter.
//!
//! Each proposed row (defaults filled, checked like any inserted row) is
//! looked up by its arbiter's value in the transaction's writes, then in
//! the snapshot the statement reads (a UNIQUE value through its entry,
//! naming the row that holds it). A free value inserts the row; a taken
//! one is skipped (`DO NOTHING`) or updates the row holding it: the `SET`
//! expressions and the `WHERE`, which may name the existing row (by the
//! table's name or alias) and the proposed one (`excluded.column`), are
//! evaluated by DataFusion for all conflicting rows at once. Without a
//! target, `DO NOTHING` skips a row that conflicts on any constraint. As
//! in PostgreSQL, a statement may not update one row twice (21000); `DO
//! NOTHING` skips a value the statement itself inserted. An update
//! records the row it read, so a concurrent change to it fails the commit
//! (40001) instead of being lost. A row that conflicts on a constraint
//! other than the arbiter fails (23505).

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::MemTable;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, ConflictTarget, Expr as SqlExpr, Ident, Insert, OnConflict, OnConflictAction,
    OnInsert, TableObject, Value, ValueWithSpan, VisitMut, VisitorMut,
};
use rockstream_control::{CatalogEntry, TableIndex};
use rockstream_ops::arrow_rows::{array_to_datums, rows_to_batch};
use rockstream_ops::keys::{keyless_row_key, table_row_key, unique_entry_key};
use rockstream_storage::SnapshotSet;
use rockstream_types::{codes, Datum, Row, RsError, RsResult, SqlType};

use crate::backend::{Gateway, OneTable};
use crate::ddl::ident_name;
use crate::defaults;
use crate::dml::{
    assigned_column, conform_row, duplicate_key, length_limits, new_changes, pending_table,
    query_error, reserve_changes, strict_cast, Returned,
};
use crate::providers::decode_table_row;
use crate::session::{GatewaySession, PendingTable};

/// What decides that a proposed row conflicts with a row there is.
#[derive(Debug, Clone)]
pub(crate) enum Arbiter {
    PrimaryKey,
    Unique(TableIndex),
    /// No target (`DO NOTHING` only): the primary key and every UNIQUE
    /// constraint.
    Every,
}

/// One value a proposed row may conflict on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Probe {
    /// Its primary key (its row key).
    Key(Vec<u8>),
    /// Its values of a UNIQUE constraint (the constraint's number, the
    /// entry's key).
    Unique(u16, Vec<u8>),
}

impl Arbiter {
    /// The values `row` (keyed `key`) of `entry` may conflict on.
    fn probes(&self, entry: &CatalogEntry, key: &[u8], row: &Row) -> Vec<Probe> {
        let unique = |constraint: &TableIndex| {
            unique_entry_key(entry.id, constraint.id, &constraint.columns, row)
                .map(|value| Probe::Unique(constraint.id, value))
        };
        let primary = (!entry.primary_key.is_empty()).then(|| Probe::Key(key.to_vec()));
        match self {
            Arbiter::PrimaryKey => primary.into_iter().collect(),
            Arbiter::Unique(constraint) => unique(constraint).into_iter().collect(),
            Arbiter::Every => primary
                .into_iter()
                .chain(entry.unique_indexes().filter_map(unique))
                .collect(),
        }
    }
}

/// The `ON CONFLICT` clause of an INSERT into `entry` and its arbiter:
/// 42P10 when the target names columns no constraint has (or a `DO
/// UPDATE` has none to name), 42704 for a constraint the table has not.
pub(crate) fn on_conflict<'a>(
    entry: &CatalogEntry,
    on: Option<&'a OnInsert>,
) -> RsResult<Option<(&'a OnConflict, Arbiter)>> {
    let conflict = match on {
        None => return Ok(None),
        Some(OnInsert::OnConflict(conflict)) => conflict,
        Some(_) => {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "ON DUPLICATE KEY UPDATE is MySQL's; use ON CONFLICT (key) DO UPDATE",
            ))
        }
    };
    let no_match = || {
        RsError::new(
            &codes::INVALID_COLUMN_REFERENCE,
            format!(
                "there is no unique or exclusion constraint matching the ON CONFLICT specification (relation \"{}\")",
                entry.name
            ),
        )
    };
    let names = |positions: &[usize]| -> HashSet<String> {
        positions
            .iter()
            .map(|position| entry.columns[*position].name.clone())
            .collect()
    };
    let arbiter = match &conflict.conflict_target {
        Some(ConflictTarget::Columns(columns)) => {
            let named: HashSet<String> = columns.iter().map(ident_name).collect();
            if !entry.primary_key.is_empty() && named == names(&entry.primary_key) {
                Arbiter::PrimaryKey
            } else {
                let constraint = entry
                    .unique_indexes()
                    .find(|constraint| named == names(&constraint.columns))
                    .ok_or_else(no_match)?;
                Arbiter::Unique(constraint.clone())
            }
        }
        Some(ConflictTarget::OnConstraint(name)) => {
            let name = crate::backend::object_name(&name.to_string());
            match entry
                .unique_indexes()
                // An index `CREATE UNIQUE INDEX` made is no constraint.
                .find(|constraint| constraint.name == name && !constraint.index_only)
            {
                Some(constraint) => Arbiter::Unique(constraint.clone()),
                None if !entry.primary_key.is_empty() && name == format!("{}_pkey", entry.name) => {
                    Arbiter::PrimaryKey
                }
                None => {
                    return Err(RsError::new(
                        &codes::UNDEFINED_CONSTRAINT,
                        format!(
                            "constraint \"{name}\" for table \"{}\" does not exist",
                            entry.name
                        ),
                    ))
                }
            }
        }
        None if matches!(conflict.action, OnConflictAction::DoUpdate(_)) => {
            return Err(RsError::new(
                &codes::SYNTAX_ERROR,
                "ON CONFLICT DO UPDATE requires inference specification or constraint name",
            )
            .with_detail("For example, ON CONFLICT (column_name)."));
        }
        None => Arbiter::Every,
    };
    if let OnConflictAction::DoUpdate(update) = &conflict.action {
        crate::writes::refuse_append_only(entry, "ON CONFLICT DO UPDATE")?;
        for assignment in &update.assignments {
            assigned_column(entry, assignment)?;
        }
    }
    Ok(Some((conflict, arbiter)))
}

/// What happens to one proposed row.
enum Outcome {
    Inserted(Vec<u8>, Row),
    /// Its key is taken: the stored row (`None`: the transaction's own
    /// insert, already in its writes) and the proposed one.
    Conflicts {
        key: Vec<u8>,
        existing: Row,
        read: Option<Row>,
        proposed: Row,
    },
    Skipped,
}

impl Outcome {
    /// The change it may make: its key, the row before and after.
    fn change(&self) -> Option<(&[u8], Option<&Row>, Option<&Row>)> {
        match self {
            Outcome::Inserted(key, row) => Some((key, None, Some(row))),
            Outcome::Conflicts {
                key,
                existing,
                proposed,
                ..
            } => Some((key, Some(existing), Some(proposed))),
            Outcome::Skipped => None,
        }
    }
}

/// Stores `rows` under `conflict`, decided by `arbiter`. Returns the rows
/// inserted or updated and, with `returning`, each of them as stored, in
/// input order.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn insert_on_conflict(
    gateway: &Gateway,
    session: &mut GatewaySession,
    entry: &CatalogEntry,
    rows: Vec<Row>,
    conflict: &OnConflict,
    arbiter: &Arbiter,
    alias: Option<String>,
    returning: bool,
) -> RsResult<(u64, Returned)> {
    session.check_layout(entry)?;
    let limits = length_limits(entry);
    let snapshot = session
        .transaction
        .as_ref()
        .and_then(|transaction| transaction.snapshot.clone())
        .unwrap_or_else(|| gateway.database().engine().published().snapshot);
    let update = match &conflict.action {
        OnConflictAction::DoUpdate(update) => Some(update),
        OnConflictAction::DoNothing => None,
    };
    let pending = session
        .transaction
        .as_ref()
        .and_then(|transaction| transaction.tables.get(&entry.id));
    let holders = Holders::of(entry, pending);
    // The values the statement's inserted rows hold (keys and every
    // UNIQUE value), and the rows its updates affect.
    let mut taken: HashSet<Probe> = HashSet::new();
    let mut affected: HashSet<Vec<u8>> = HashSet::new();
    let second_time = || {
        RsError::new(
            &codes::CARDINALITY_VIOLATION,
            format!(
                "ON CONFLICT DO UPDATE command cannot affect row a second time (relation \"{}\")",
                entry.name
            ),
        )
        .with_detail(
            "Ensure that no rows proposed for insertion within the same command have duplicate constrained values.",
        )
    };
    let mut outcomes = Vec::with_capacity(rows.len());
    for mut row in rows {
        conform_row(entry, &limits, &mut row)?;
        let key = if entry.primary_key.is_empty() {
            keyless_row_key(gateway.runtime().random_u128())
        } else {
            table_row_key(&entry.primary_key, &row)
        };
        let probes = arbiter.probes(entry, &key, &row);
        if probes.iter().any(|probe| taken.contains(probe)) {
            // A row this statement inserted holds the value.
            if update.is_some() {
                return Err(second_time());
            }
            outcomes.push(Outcome::Skipped);
            continue;
        }
        let mut found = None;
        for probe in &probes {
            found = holders.existing(entry, pending, &snapshot, probe).await?;
            if found.is_some() {
                break;
            }
        }
        outcomes.push(match (found, update) {
            (None, _) => {
                // Under another arbiter the key may still be taken, by a
                // row there is or one this statement inserted.
                let key_probe = Probe::Key(key.clone());
                if !matches!(arbiter, Arbiter::PrimaryKey | Arbiter::Every)
                    && !entry.primary_key.is_empty()
                    && (taken.contains(&key_probe)
                        || holders
                            .existing(entry, pending, &snapshot, &key_probe)
                            .await?
                            .is_some())
                {
                    return Err(duplicate_key(entry, &row));
                }
                taken.extend(Arbiter::Every.probes(entry, &key, &row));
                Outcome::Inserted(key, row)
            }
            (Some(_), None) => Outcome::Skipped,
            (Some((key, existing, read)), Some(_)) => {
                if !affected.insert(key.clone()) {
                    return Err(second_time());
                }
                Outcome::Conflicts {
                    key,
                    existing,
                    read,
                    proposed: row,
                }
            }
        });
    }
    let updated = match update {
        Some(update) => {
            updated_rows(
                gateway,
                session,
                entry,
                &outcomes,
                &update.assignments,
                update.selection.as_ref(),
                alias,
            )
            .await?
        }
        None => Vec::new(),
    };
    let (more, bytes) = new_changes(session, entry, outcomes.iter().filter_map(Outcome::change));
    reserve_changes(gateway, session, entry, more, bytes)?;
    let table = pending_table(session, entry)?;
    let mut kept = Vec::new();
    let mut count = 0u64;
    let mut updates = updated.into_iter();
    for outcome in outcomes {
        let (key, stored) = match outcome {
            Outcome::Skipped => continue,
            Outcome::Inserted(key, row) => {
                table.set(key.clone(), Some(row.clone()), || None);
                (key, row)
            }
            Outcome::Conflicts { key, read, .. } => {
                let Some(new) = updates.next().flatten() else {
                    continue;
                };
                table.set(key.clone(), Some(new.clone()), || read);
                (key, new)
            }
        };
        let _ = key;
        count += 1;
        if returning {
            kept.push(stored);
        }
    }
    Ok((count, kept))
}

/// Which of the transaction's rows of a table hold each UNIQUE value, for
/// the lookups of one statement (its own inserts are not among them: they
/// are found by the statement's `seen` values).
struct Holders {
    rows: HashMap<Probe, Vec<u8>>,
}

/// A row a proposed one conflicts with: its key, the row as the
/// transaction sees it, and, when read from the snapshot, as read.
type Existing = (Vec<u8>, Row, Option<Row>);

impl Holders {
    fn of(entry: &CatalogEntry, pending: Option<&PendingTable>) -> Holders {
        let mut rows = HashMap::new();
        for (key, (_, current)) in pending.into_iter().flat_map(PendingTable::rows) {
            let Some(row) = current else {
                continue;
            };
            for constraint in entry.unique_indexes() {
                if let Some(value) =
                    unique_entry_key(entry.id, constraint.id, &constraint.columns, row)
                {
                    rows.insert(Probe::Unique(constraint.id, value), key.clone());
                }
            }
        }
        Holders { rows }
    }

    /// The row holding `probe`'s value, if any.
    async fn existing(
        &self,
        entry: &CatalogEntry,
        pending: Option<&PendingTable>,
        snapshot: &SnapshotSet,
        probe: &Probe,
    ) -> RsResult<Option<Existing>> {
        let buffered = |key: &[u8]| {
            pending
                .and_then(|table| table.get(key))
                .map(|(_, current)| current.clone())
        };
        let key = match probe {
            Probe::Key(key) => key.clone(),
            Probe::Unique(_, value) => {
                if let Some(key) = self.rows.get(probe) {
                    let current = buffered(key).flatten();
                    return Ok(current.map(|row| (key.clone(), row, None)));
                }
                match snapshot.get(value).await? {
                    // Its holder, unless the transaction changed it since
                    // (then it holds the value only if `rows` says so).
                    Some(owner) if buffered(&owner).is_none() => owner,
                    _ => return Ok(None),
                }
            }
        };
        Ok(match buffered(&key) {
            Some(current) => current.map(|row| (key, row, None)),
            None => match snapshot.table_row(entry.id, &key).await? {
                Some(bytes) => {
                    let stored = decode_table_row(entry, &bytes)?;
                    Some((key, stored.clone(), Some(stored)))
                }
                None => None,
            },
        })
    }
}

/// The conflicting rows as `SET` makes them, in the order of their
/// outcomes; `None` where the `WHERE` is not true.
async fn updated_rows(
    gateway: &Gateway,
    session: &GatewaySession,
    entry: &CatalogEntry,
    outcomes: &[Outcome],
    assignments: &[datafusion::sql::sqlparser::ast::Assignment],
    selection: Option<&SqlExpr>,
    alias: Option<String>,
) -> RsResult<Vec<Option<Row>>> {
    let conflicts: Vec<(&Row, &Row)> = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Outcome::Conflicts {
                existing, proposed, ..
            } => Some((existing, proposed)),
            _ => None,
        })
        .collect();
    if conflicts.is_empty() {
        return Ok(Vec::new());
    }
    let types = entry.sql_types()?;
    let mut assigned = Vec::with_capacity(assignments.len());
    let mut values = Vec::with_capacity(assignments.len());
    for assignment in assignments {
        let position = assigned_column(entry, assignment)?;
        let mut value = assignment.value.clone();
        name_excluded(&mut value, entry);
        let text = defaults::assigned_value(&entry.columns[position], &value)?;
        assigned.push(position);
        values.push(text);
    }
    let condition = selection.map(|selection| {
        let mut selection = selection.clone();
        name_excluded(&mut selection, entry);
        selection.to_string()
    });
    // One relation: the existing row's columns under their names, the
    // proposed row's as `__rs_excluded_<n>`, and each conflict's number.
    let base = rockstream_control::arrow_schema(entry)?;
    let mut fields: Vec<Field> = base
        .fields()
        .iter()
        .map(|field| field.as_ref().clone())
        .collect();
    fields.extend(
        base.fields()
            .iter()
            .enumerate()
            .map(|(position, field)| field.as_ref().clone().with_name(excluded_name(position))),
    );
    fields.push(Field::new(ORDINAL, DataType::Int64, false));
    let schema = Arc::new(Schema::new(fields));
    let combined: Vec<Row> = conflicts
        .iter()
        .enumerate()
        .map(|(ordinal, (existing, proposed))| {
            let mut row = (*existing).clone();
            row.extend((*proposed).iter().cloned());
            row.push(Datum::Int64(ordinal as i64));
            row
        })
        .collect();
    let mut combined_types = types.clone();
    combined_types.extend(types.iter().copied());
    combined_types.push(SqlType::Int64);
    let references: Vec<&Row> = combined.iter().collect();
    let batch = rows_to_batch(&references, &combined_types, &schema, &[])?;
    let name = alias.unwrap_or_else(|| entry.name.clone());
    let table = MemTable::try_new(batch.schema(), vec![vec![batch]]).map_err(query_error)?;
    let context = gateway.statement_context(
        session,
        Arc::new(OneTable {
            name: name.clone(),
            table: Arc::new(table),
        }),
    );
    let mut items = vec![format!("\"{ORDINAL}\"")];
    items.extend(
        values
            .iter()
            .enumerate()
            .map(|(index, value)| format!("({value}) AS \"__rs_new_{index}\"")),
    );
    if let Some(condition) = &condition {
        items.push(format!("({condition}) AS \"__rs_where\""));
    }
    let sql = format!(
        "SELECT {} FROM {}",
        items.join(", "),
        Ident::with_quote('"', &name)
    );
    let frame = context.sql(&sql).await.map_err(query_error)?;
    let batches = gateway.stop(session).collect(frame).await?;
    let limits = length_limits(entry);
    let mut updated: Vec<Option<Row>> = vec![None; conflicts.len()];
    for batch in &batches {
        let ordinals = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| RsError::internal("conflict ordinals are not numbers"))?;
        let applies: Option<BooleanArray> = match &condition {
            Some(_) => Some(
                strict_cast(batch.column(1 + values.len()), SqlType::Bool)?
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .cloned()
                    .ok_or_else(|| RsError::internal("ON CONFLICT WHERE is not boolean"))?,
            ),
            None => None,
        };
        let mut new_values: Vec<Vec<Datum>> = Vec::with_capacity(values.len());
        for (index, position) in assigned.iter().enumerate() {
            let sql_type = types[*position];
            let array = strict_cast(batch.column(1 + index), sql_type)?;
            new_values.push(array_to_datums(&array, sql_type)?);
        }
        for (row, ordinal) in ordinals.iter().enumerate() {
            let applies = applies
                .as_ref()
                .is_none_or(|flags| flags.is_valid(row) && flags.value(row));
            if !applies {
                continue;
            }
            let ordinal = ordinal
                .and_then(|ordinal| usize::try_from(ordinal).ok())
                .ok_or_else(|| RsError::internal("invalid conflict ordinal"))?;
            let Some((existing, _)) = conflicts.get(ordinal) else {
                return Err(RsError::internal("conflict ordinal out of range"));
            };
            let mut new = (*existing).clone();
            for (index, position) in assigned.iter().enumerate() {
                new[*position] = new_values[index][row].clone();
            }
            conform_row(entry, &limits, &mut new)?;
            // Setting the key to what it is (`SET id = excluded.id`) is
            // fine; moving the row under another key is not built.
            if table_row_key(&entry.primary_key, &new)
                != table_row_key(&entry.primary_key, existing)
            {
                return Err(RsError::new(
                    &codes::UNSUPPORTED_STATEMENT,
                    format!(
                        "ON CONFLICT DO UPDATE cannot change the primary key of a row of \"{}\" here; UPDATE the row instead",
                        entry.name
                    ),
                ));
            }
            updated[ordinal] = Some(new);
        }
    }
    Ok(updated)
}

/// How to type the placeholders of `insert`'s `ON CONFLICT DO UPDATE`,
/// which the INSERT's own plan never sees, as PostgreSQL types them.
#[derive(Debug, Default)]
pub(crate) struct ConflictPlaceholders {
    /// `SET column = $n`: `$n` and the column, whose type it takes.
    pub assigned: Vec<(String, String)>,
    /// The other `SET` values and the `WHERE`, selected over the table
    /// (under its alias) joined with `excluded`, a copy of it: planning it
    /// types their placeholders from what they meet.
    pub select: Option<String>,
}

pub(crate) fn conflict_placeholders(insert: &Insert) -> Option<ConflictPlaceholders> {
    let Some(OnInsert::OnConflict(OnConflict {
        action: OnConflictAction::DoUpdate(update),
        ..
    })) = &insert.on
    else {
        return None;
    };
    let TableObject::TableName(name) = &insert.table else {
        return None;
    };
    let mut placeholders = ConflictPlaceholders::default();
    let mut selected: Vec<String> = Vec::new();
    for assignment in &update.assignments {
        let column = match &assignment.target {
            AssignmentTarget::ColumnName(column) => {
                column.0.last().and_then(|part| part.as_ident())
            }
            AssignmentTarget::Tuple(_) => None,
        };
        match (&assignment.value, column) {
            (
                SqlExpr::Value(ValueWithSpan {
                    value: Value::Placeholder(placeholder),
                    ..
                }),
                Some(column),
            ) => placeholders
                .assigned
                .push((placeholder.clone(), ident_name(column))),
            (value, _) => selected.push(value.to_string()),
        }
    }
    selected.extend(update.selection.as_ref().map(ToString::to_string));
    if !selected.is_empty() {
        let target = match &insert.table_alias {
            Some(alias) => format!("{name} AS {}", alias.alias),
            None => name.to_string(),
        };
        placeholders.select = Some(format!(
            "SELECT {} FROM {target} CROSS JOIN {name} AS excluded",
            selected.join(", ")
        ));
    }
    Some(placeholders)
}

const ORDINAL: &str = "__rs_conflict";

fn excluded_name(position: usize) -> String {
    format!("__rs_excluded_{position}")
}

/// `excluded.column` → the relation's `__rs_excluded_<n>` column.
fn name_excluded(expr: &mut SqlExpr, entry: &CatalogEntry) {
    struct Excluded<'a>(&'a CatalogEntry);
    impl VisitorMut for Excluded<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &mut SqlExpr) -> ControlFlow<()> {
            if let SqlExpr::CompoundIdentifier(parts) = expr {
                if let [relation, column] = parts.as_slice() {
                    if ident_name(relation) == "excluded" {
                        let name = ident_name(column);
                        if let Some(position) = self.0.columns.iter().position(|c| c.name == name) {
                            *expr = SqlExpr::Identifier(Ident::with_quote(
                                '"',
                                excluded_name(position),
                            ));
                        }
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = expr.visit(&mut Excluded(entry));
}
