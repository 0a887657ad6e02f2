//! `ALTER TABLE` (RFC 0004): renames, columns added and dropped, a
//! column's default and NOT NULL, UNIQUE constraints (RFC 0006). Each action is a change of the
//! statement's transaction (the implicit one outside a transaction block):
//! the catalog plans it, and an action that changes the rows' layout
//! rewrites every row through the transaction, as an `UPDATE` of every row
//! would. `COMMIT` applies the new catalog entry and the rows together.

use datafusion::arrow::array::{Array, BinaryArray};
use datafusion::sql::sqlparser::ast::{
    AlterColumnOperation, AlterTable, AlterTableOperation, CreateIndex, DropBehavior, Ident,
    ObjectName, RenameTableNameKind, TableConstraint,
};
use rockstream_control::{Alteration, Altered, ColumnDef, DeclaredIndex, Rename};
use rockstream_pgwire::StatementResult;
use rockstream_types::{codes, Row, RsError, RsResult};

use crate::backend::{object_name, Gateway};
use crate::ddl::{
    declared_column, ident_name, index_columns, refuse_unique_options, unique_columns,
    TableDefinition,
};
use crate::defaults;
use crate::dml::{
    batch_rows, conform_row, length_limits, new_changes, pending_table, query_batches,
    reserve_changes,
};
use crate::session::GatewaySession;
use crate::writes::selection_query;

/// Runs `alter`, its actions in order.
pub(crate) async fn alter_table(
    gateway: &Gateway,
    session: &mut GatewaySession,
    alter: &AlterTable,
) -> RsResult<StatementResult> {
    let name = object_name(&alter.name.to_string());
    for operation in &alter.operations {
        alter_once(gateway, session, &name, operation, alter.if_exists).await?;
    }
    Ok(StatementResult::Command {
        tag: "ALTER TABLE".to_string(),
    })
}

async fn alter_once(
    gateway: &Gateway,
    session: &mut GatewaySession,
    name: &str,
    operation: &AlterTableOperation,
    if_exists: bool,
) -> RsResult<()> {
    let (new_name, from, to);
    // `ADD COLUMN … UNIQUE`: the constraint, added once the column is.
    let mut column_unique = None;
    let alteration = match operation {
        AlterTableOperation::RenameTable {
            table_name: RenameTableNameKind::To(table_name) | RenameTableNameKind::As(table_name),
        } => {
            new_name = object_name(&table_name.to_string());
            Alteration::Rename(Rename::Table { to: &new_name })
        }
        AlterTableOperation::RenameColumn {
            old_column_name,
            new_column_name,
        } => {
            (from, to) = (ident_name(old_column_name), ident_name(new_column_name));
            Alteration::Rename(Rename::Column {
                from: &from,
                to: &to,
            })
        }
        AlterTableOperation::AddColumn {
            if_not_exists,
            column_def,
            column_position: None,
            ..
        } => {
            let declared = declared_column(name, column_def)?;
            if declared.primary_key {
                return Err(unsupported(
                    "ALTER TABLE ... ADD COLUMN ... PRIMARY KEY is not supported: a table's primary key is fixed when it is created",
                ));
            }
            column_unique = declared.unique;
            let mut column = declared.column;
            if let Some(expr) = declared.default {
                column.default = checked_default(gateway, session, &column, expr).await?;
            }
            Alteration::AddColumn {
                column,
                owns_sequence: declared.owns_sequence,
                identity: declared.identity,
                if_not_exists: *if_not_exists,
            }
        }
        AlterTableOperation::DropColumn {
            column_names,
            if_exists: column_if_exists,
            ..
        } => {
            let [column] = column_names.as_slice() else {
                return Err(unsupported(
                    "DROP COLUMN names one column; use one DROP COLUMN action per column",
                ));
            };
            from = ident_name(column);
            Alteration::DropColumn {
                name: &from,
                if_exists: *column_if_exists,
            }
        }
        AlterTableOperation::AlterColumn { column_name, op } => {
            from = ident_name(column_name);
            match op {
                AlterColumnOperation::SetNotNull => Alteration::SetNotNull {
                    column: &from,
                    not_null: true,
                },
                AlterColumnOperation::DropNotNull => Alteration::SetNotNull {
                    column: &from,
                    not_null: false,
                },
                AlterColumnOperation::DropDefault => Alteration::SetDefault {
                    column: &from,
                    default: None,
                },
                AlterColumnOperation::SetDefault { value } => {
                    let entry = match gateway.entry(session, name, None) {
                        Ok(entry) => entry,
                        Err(_) if if_exists => return Ok(()),
                        Err(error) => return Err(error),
                    };
                    let column = entry
                        .columns
                        .iter()
                        .find(|column| column.name == from)
                        .cloned()
                        .ok_or_else(|| {
                            RsError::new(
                                &codes::UNDEFINED_COLUMN,
                                format!("column \"{from}\" of relation \"{name}\" does not exist"),
                            )
                        })?;
                    Alteration::SetDefault {
                        column: &from,
                        default: checked_default(gateway, session, &column, value.clone()).await?,
                    }
                }
                other => {
                    return Err(unsupported(&format!(
                        "ALTER TABLE ... ALTER COLUMN ... {other} is not supported yet"
                    )))
                }
            }
        }
        AlterTableOperation::AddConstraint {
            constraint: TableConstraint::Unique(constraint),
            not_valid: false,
        } => {
            refuse_unique_options(constraint)?;
            let entry = match gateway.entry(session, name, None) {
                Ok(entry) => entry,
                Err(_) if if_exists => return Ok(()),
                Err(error) => return Err(error),
            };
            Alteration::AddIndex(DeclaredIndex::unique_constraint(
                constraint.name.as_ref().map(ident_name),
                unique_columns(&entry.columns, &constraint.columns)?,
            ))
        }
        AlterTableOperation::DropConstraint {
            if_exists: constraint_if_exists,
            name: constraint,
            drop_behavior: None | Some(DropBehavior::Restrict),
        } => {
            from = ident_name(constraint);
            Alteration::DropConstraint {
                name: &from,
                index: false,
                if_exists: *constraint_if_exists,
            }
        }
        other => {
            return Err(unsupported(&format!(
                "ALTER TABLE ... {} is not supported yet",
                action_name(other)
            )))
        }
    };
    let adds_unique = matches!(alteration, Alteration::AddIndex(_)) || column_unique.is_some();
    let Some(columns) = apply(gateway, session, name, alteration, if_exists).await? else {
        return Ok(());
    };
    if let Some(constraint) = column_unique {
        let unique = Alteration::AddIndex(DeclaredIndex::unique_constraint(
            constraint,
            vec![columns - 1],
        ));
        apply(gateway, session, name, unique, false).await?;
    }
    if adds_unique {
        crate::unique::check_added(gateway, session, name)?;
    }
    Ok(())
}

/// Plans `alteration` of table `name` in the session's transaction,
/// rewriting the rows if it needs, and records it; returns the table's
/// column count after it (`None`: nothing to do).
async fn apply(
    gateway: &Gateway,
    session: &mut GatewaySession,
    name: &str,
    alteration: Alteration<'_>,
    if_exists: bool,
) -> RsResult<Option<usize>> {
    let transaction = session.transaction.get_or_insert_with(Default::default);
    let Some(altered) = gateway
        .database()
        .alter_table_in(
            &transaction.catalog,
            &session.namespace,
            name,
            alteration,
            if_exists,
        )
        .await?
    else {
        return Ok(None);
    };
    if let Some(rewrite) = &altered.rewrite {
        rewrite_rows(gateway, session, &altered, rewrite).await?;
    }
    let columns = altered.after.columns.len();
    session
        .transaction
        .get_or_insert_with(Default::default)
        .catalog
        .record_altered(altered);
    Ok(Some(columns))
}

/// A default given in an `ALTER TABLE`, checked as `CREATE TABLE` checks
/// one: its text as the catalog keeps it.
async fn checked_default(
    gateway: &Gateway,
    session: &GatewaySession,
    column: &ColumnDef,
    expr: datafusion::sql::sqlparser::ast::Expr,
) -> RsResult<Option<String>> {
    let mut definition = TableDefinition {
        columns: vec![column.clone()],
        primary_key: Vec::new(),
        generated: Vec::new(),
        defaults: vec![(0, expr)],
        unique: Vec::new(),
    };
    defaults::check_defaults(gateway, session, &mut definition).await?;
    Ok(definition.columns.swap_remove(0).default)
}

/// Rewrites every row of `altered.before`, as the transaction sees it, in
/// `altered.after`'s layout: column `i` of a new row is column
/// `rewrite[i]` of the old one, or the new column's default.
async fn rewrite_rows(
    gateway: &Gateway,
    session: &mut GatewaySession,
    altered: &Altered,
    rewrite: &[Option<usize>],
) -> RsResult<()> {
    let (before, after) = (&altered.before, &altered.after);
    let table_sql = Ident::with_quote('"', &before.name).to_string();
    let sql = selection_query(before, &table_sql, &[], None);
    let batches = query_batches(gateway, session, &sql, true).await?;
    let types = before.sql_types()?;
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut old_rows: Vec<Row> = Vec::new();
    for batch in &batches {
        let key_column = batch
            .column(0)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| RsError::internal("row key column is not binary"))?;
        keys.extend((0..key_column.len()).map(|index| key_column.value(index).to_vec()));
        old_rows.extend(batch_rows(batch, &types, 1)?);
    }
    // Rows the transaction changed already count once; a rewritten row
    // takes about what the old one does.
    let (more, bytes) = new_changes(
        session,
        before,
        keys.iter()
            .zip(&old_rows)
            .map(|(key, old)| (key.as_slice(), Some(old), Some(old))),
    );
    reserve_changes(gateway, session, before, more, bytes)?;
    let mut new_rows: Vec<Row> = old_rows
        .iter()
        .map(|old| {
            rewrite
                .iter()
                .map(|from| from.map_or(rockstream_types::Datum::Null, |from| old[from].clone()))
                .collect()
        })
        .collect();
    let supplied: Vec<usize> = rewrite
        .iter()
        .enumerate()
        .filter_map(|(position, from)| from.map(|_| position))
        .collect();
    defaults::fill_defaults(gateway, session, after, &supplied, &mut new_rows).await?;
    let limits = length_limits(after);
    for row in &mut new_rows {
        if let Some(column) = after
            .columns
            .iter()
            .zip(row.iter())
            .find_map(|(column, value)| (column.not_null && value.is_null()).then_some(column))
        {
            return Err(RsError::new(
                &codes::NOT_NULL_VIOLATION,
                format!(
                    "column \"{}\" of relation \"{}\" contains null values",
                    column.name, after.name
                ),
            ));
        }
        conform_row(after, &limits, row)?;
    }
    let table = pending_table(session, before)?;
    for ((key, old), new) in keys.into_iter().zip(old_rows).zip(new_rows) {
        table.set(key, Some(new), || Some(old));
    }
    // Its rows, those it wrote before included, are in the new layout.
    table.set_layout(after.rewritten);
    Ok(())
}

fn unsupported(message: &str) -> RsError {
    RsError::new(&codes::UNSUPPORTED_STATEMENT, message)
}

/// The action's leading words (`ADD CONSTRAINT`, `OWNER TO`, ...).
fn action_name(operation: &AlterTableOperation) -> String {
    operation
        .to_string()
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `CREATE [UNIQUE] INDEX [CONCURRENTLY] [IF NOT EXISTS] [name] ON t
/// [USING btree|hash] (columns) [INCLUDE (columns)]`: an index of table
/// `t`'s columns, kept by every commit (RFC 0014); a unique one is a
/// UNIQUE constraint that is only an index, as PostgreSQL keeps one (RFC
/// 0006). Expression and partial indexes are refused.
pub(crate) async fn create_index(
    gateway: &Gateway,
    session: &mut GatewaySession,
    create: &CreateIndex,
) -> RsResult<StatementResult> {
    let method = create
        .using
        .as_ref()
        .map(|using| using.to_string().to_ascii_lowercase());
    let refused = if create.predicate.is_some() {
        Some("partial indexes (CREATE INDEX ... WHERE) are not supported".to_string())
    } else if !create.with.is_empty()
        || !create.index_options.is_empty()
        || !create.alter_options.is_empty()
    {
        Some("CREATE INDEX ... WITH (...) and index options are not supported".to_string())
    } else if create.nulls_distinct == Some(false) {
        Some(
            "UNIQUE NULLS NOT DISTINCT is not supported: NULLs are distinct, as by default"
                .to_string(),
        )
    } else if let Some(method) = method
        .as_deref()
        .filter(|method| !matches!(*method, "btree" | "hash"))
    {
        Some(format!(
            "index access method \"{method}\" is not supported: RockStream keeps btree (and hash) indexes"
        ))
    } else if method.as_deref() == Some("hash") && create.unique {
        Some("access method \"hash\" does not support unique indexes".to_string())
    } else if method.as_deref() == Some("hash") && create.columns.len() > 1 {
        Some("access method \"hash\" does not support multicolumn indexes".to_string())
    } else if method.as_deref() == Some("hash") && !create.include.is_empty() {
        Some("access method \"hash\" does not support included columns".to_string())
    } else {
        None
    };
    if let Some(message) = refused {
        return Err(unsupported(&message));
    }
    let table = object_name(&create.table_name.to_string());
    let entry = gateway.entry(session, &table, None)?;
    if entry.kind != rockstream_control::ObjectKind::Table {
        return Err(unsupported(&format!(
            "cannot create index on {} \"{table}\": indexes on tables only are supported (a materialized view's rows are read by its key)",
            entry.kind.describe()
        )));
    }
    let name = create
        .name
        .as_ref()
        .map(|name| object_name(&name.to_string()));
    if create.if_not_exists
        && name.as_ref().is_some_and(|name| {
            gateway
                .entries(session)
                .iter()
                .any(|other| other.name == *name || other.owned_names().any(|own| own == name))
        })
    {
        return Ok(StatementResult::command("CREATE INDEX"));
    }
    let include = create
        .include
        .iter()
        .map(|column| {
            let column = ident_name(column);
            entry
                .columns
                .iter()
                .position(|existing| existing.name == column)
                .ok_or_else(|| {
                    RsError::new(
                        &codes::UNDEFINED_COLUMN,
                        format!("column \"{column}\" does not exist"),
                    )
                })
        })
        .collect::<RsResult<Vec<usize>>>()?;
    let declared = DeclaredIndex {
        name,
        columns: index_columns(&entry.columns, &create.columns, create.unique, false)?,
        unique: create.unique,
        index_only: true,
        include,
        hash: method.as_deref() == Some("hash"),
    };
    apply(
        gateway,
        session,
        &table,
        Alteration::AddIndex(declared),
        false,
    )
    .await?;
    if create.unique {
        crate::unique::check_added(gateway, session, &table)?;
    }
    Ok(StatementResult::command("CREATE INDEX"))
}

/// `DROP INDEX [IF EXISTS] name, …` of indexes `CREATE [UNIQUE] INDEX`
/// made.
pub(crate) async fn drop_indexes(
    gateway: &Gateway,
    session: &mut GatewaySession,
    names: &[ObjectName],
    if_exists: bool,
) -> RsResult<StatementResult> {
    for name in names {
        let name = object_name(&name.to_string());
        let entries = gateway.entries(session);
        let table = entries.iter().find(|entry| {
            entry.indexes.iter().any(|index| index.name == name)
                || (!entry.primary_key.is_empty() && format!("{}_pkey", entry.name) == name)
        });
        let Some(table) = table else {
            if if_exists {
                continue;
            }
            return Err(RsError::new(
                &codes::UNDEFINED_CONSTRAINT,
                format!("index \"{name}\" does not exist"),
            ));
        };
        if !table.indexes.iter().any(|index| index.name == name) {
            return Err(RsError::new(
                &codes::INDEX_OF_CONSTRAINT,
                format!(
                    "cannot drop index {name} because constraint {name} on table {} requires it",
                    table.name
                ),
            ));
        }
        let table = table.name.clone();
        let drop = Alteration::DropConstraint {
            name: &name,
            index: true,
            if_exists: false,
        };
        apply(gateway, session, &table, drop, false).await?;
    }
    Ok(StatementResult::command("DROP INDEX"))
}
