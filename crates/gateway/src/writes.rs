//! `INSERT`, `UPDATE`, `DELETE` and `TRUNCATE`: which rows each changes
//! (`dml` changes them), its `RETURNING` rows, and the implicit commit of a
//! statement outside a transaction block.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNode;
use datafusion::dataframe::DataFrame;
use datafusion::datasource::MemTable;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{
    Delete, Expr as SqlExpr, FromTable, Ident, Insert, Query, SelectItem, Statement, TableFactor,
    TableObject, Truncate, TruncateIdentityOption, Update,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rockstream_control::{CatalogEntry, ObjectKind};
use rockstream_ops::arrow_rows::rows_to_batch;
use rockstream_pgwire::StatementResult;
use rockstream_planner::{new_context_in, pg_column_names};
use rockstream_types::{codes, Row, RsError, RsResult};

use crate::backend::{
    analyzed_schema, as_pg_result, object_name, pg_result_schema, rename_columns, renamed_schema,
    Gateway, OneTable,
};
use crate::ddl::ident_name;
use crate::defaults;
use crate::dml::{self, query_error};
use crate::providers::ROW_KEY_COLUMN;
use crate::session::{restarted_map, GatewaySession};

impl Gateway {
    /// `INSERT INTO table ... [ON CONFLICT ...] [RETURNING ...]`.
    pub(crate) async fn insert_statement(
        &self,
        session: &mut GatewaySession,
        statement: &Statement,
        insert: &Insert,
        in_explicit: bool,
    ) -> RsResult<StatementResult> {
        let TableObject::TableName(name) = &insert.table else {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "INSERT INTO a table function is not supported",
            ));
        };
        let entry = self.entry(
            session,
            &object_name(&name.to_string()),
            Some(ObjectKind::Table),
        )?;
        let (count, rows) = dml::insert(
            self,
            session,
            &entry,
            statement,
            insert.returning.is_some(),
            !in_explicit,
        )
        .await?;
        let alias = insert
            .table_alias
            .as_ref()
            .map(|alias| ident_name(&alias.alias));
        self.finish_write(
            session,
            in_explicit,
            "INSERT 0",
            count,
            Returning::of(&entry, alias, insert.returning.as_deref(), rows),
        )
        .await
    }

    /// `UPDATE table SET ... [WHERE ...] [RETURNING ...]`.
    pub(crate) async fn update_statement(
        &self,
        session: &mut GatewaySession,
        update: &Update,
        in_explicit: bool,
    ) -> RsResult<StatementResult> {
        if update.from.is_some() || !update.table.joins.is_empty() {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "UPDATE ... FROM is not supported yet",
            ));
        }
        let (table_sql, table_name) = table_reference(&update.table.relation)?;
        let entry = self.entry(session, &table_name, Some(ObjectKind::Table))?;
        refuse_append_only(&entry, "UPDATE")?;
        let mut assigned = Vec::new();
        let mut values = Vec::new();
        for assignment in &update.assignments {
            let position = dml::assigned_column(&entry, assignment)?;
            assigned.push(position);
            values.push(format!(
                "({}) AS \"__rs_new_{}\"",
                defaults::assigned_value(&entry.columns[position], &assignment.value)?,
                values.len()
            ));
        }
        let selection_sql = selection_query(&entry, &table_sql, &values, update.selection.as_ref());
        let (count, rows) = dml::modify(
            self,
            session,
            &entry,
            &selection_sql,
            &assigned,
            false,
            update.returning.is_some(),
        )
        .await?;
        let alias = relation_alias(&update.table.relation);
        self.finish_write(
            session,
            in_explicit,
            "UPDATE",
            count,
            Returning::of(&entry, alias, update.returning.as_deref(), rows),
        )
        .await
    }

    /// `DELETE FROM table [WHERE ...] [RETURNING ...]`.
    pub(crate) async fn delete_statement(
        &self,
        session: &mut GatewaySession,
        delete: &Delete,
        in_explicit: bool,
    ) -> RsResult<StatementResult> {
        let tables = match &delete.from {
            FromTable::WithFromKeyword(tables) | FromTable::WithoutKeyword(tables) => tables,
        };
        let [table] = tables.as_slice() else {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "DELETE from several tables is not supported",
            ));
        };
        if delete.using.is_some() || !table.joins.is_empty() {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "DELETE ... USING is not supported yet",
            ));
        }
        let (table_sql, table_name) = table_reference(&table.relation)?;
        let entry = self.entry(session, &table_name, Some(ObjectKind::Table))?;
        refuse_append_only(&entry, "DELETE")?;
        let selection_sql = selection_query(&entry, &table_sql, &[], delete.selection.as_ref());
        let (count, rows) = dml::modify(
            self,
            session,
            &entry,
            &selection_sql,
            &[],
            true,
            delete.returning.is_some(),
        )
        .await?;
        let alias = relation_alias(&table.relation);
        self.finish_write(
            session,
            in_explicit,
            "DELETE",
            count,
            Returning::of(&entry, alias, delete.returning.as_deref(), rows),
        )
        .await
    }

    /// `TRUNCATE [TABLE] t, ... [RESTART IDENTITY]`: every row deleted, in
    /// the transaction.
    pub(crate) async fn truncate_statement(
        &self,
        session: &mut GatewaySession,
        truncate: &Truncate,
        in_explicit: bool,
    ) -> RsResult<StatementResult> {
        if truncate.partitions.is_some() {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "TRUNCATE ... PARTITION is not supported",
            ));
        }
        // Every table first: one that does not exist changes nothing.
        // (CASCADE has no foreign key to follow: RockStream has none.)
        let mut entries = Vec::new();
        for target in &truncate.table_names {
            let name = object_name(&target.name.to_string());
            let entry = self.entry(session, &name, Some(ObjectKind::Table))?;
            refuse_append_only(&entry, "TRUNCATE")?;
            entries.push(entry);
        }
        for entry in &entries {
            let table_sql = Ident::with_quote('"', &entry.name).to_string();
            let selection_sql = selection_query(entry, &table_sql, &[], None);
            dml::modify(self, session, entry, &selection_sql, &[], true, false).await?;
        }
        if truncate.identity == Some(TruncateIdentityOption::Restart) {
            // The transaction draws from restarted counters; the
            // sequences go on from them once it commits (a rolled-back
            // TRUNCATE leaves its rows, and their keys, behind).
            let owned = entries
                .iter()
                .flat_map(|entry| &entry.columns)
                .filter_map(|column| column.sequence.as_ref().map(|sequence| sequence.id));
            let transaction = session.transaction.get_or_insert_with(Default::default);
            restarted_map(&transaction.restarted).extend(owned.map(|id| (id, 1)));
        }
        self.autocommit(session, in_explicit).await?;
        Ok(StatementResult::command("TRUNCATE TABLE"))
    }

    /// Ends a write statement: its `RETURNING` rows computed (before the
    /// commit, so that a failing expression changes nothing), the implicit
    /// transaction committed, and the command's tag, with the rows if any.
    async fn finish_write(
        &self,
        session: &mut GatewaySession,
        in_explicit: bool,
        command: &str,
        count: u64,
        returning: Option<Returning<'_>>,
    ) -> RsResult<StatementResult> {
        let returned = match returning {
            Some(returning) => Some(self.returned_rows(session, returning).await?),
            None => None,
        };
        self.autocommit(session, in_explicit).await?;
        Ok(match returned {
            Some((schema, batches)) => StatementResult::Returning {
                command: command.to_string(),
                schema,
                batches,
            },
            None => StatementResult::Command {
                tag: format!("{command} {count}"),
            },
        })
    }

    /// A `RETURNING` list evaluated over the rows a write kept, as a query
    /// over them named as the target (or its alias) is.
    async fn returned_rows(
        &self,
        session: &GatewaySession,
        returning: Returning<'_>,
    ) -> RsResult<(SchemaRef, Vec<RecordBatch>)> {
        let (frame, query) = self.returning_frame(returning).await?;
        let schema = analyzed_schema(&frame)?;
        let batches = self.stop(session).collect(frame).await?;
        match rename_columns(as_pg_result(schema, batches)?, pg_column_names(&query))? {
            StatementResult::Query { schema, batches } => Ok((schema, batches)),
            _ => Err(RsError::internal("RETURNING gave no rows")),
        }
    }

    /// The planned query of a `RETURNING` list over the rows a write kept
    /// (planned only: Describe asks for its columns before any row exists).
    /// As in PostgreSQL, the list is per row: aggregates and window
    /// functions are refused.
    async fn returning_frame(&self, returning: Returning<'_>) -> RsResult<(DataFrame, Query)> {
        let Returning {
            entry,
            alias,
            items,
            rows,
        } = returning;
        let schema = rockstream_control::arrow_schema(entry)?;
        let types = entry.sql_types()?;
        let references: Vec<&Row> = rows.iter().collect();
        let batch = rows_to_batch(&references, &types, &schema, &vec![true; types.len()])?;
        let name = alias.unwrap_or_else(|| entry.name.clone());
        let table = MemTable::try_new(schema, vec![vec![batch]]).map_err(query_error)?;
        let resolver = Arc::new(OneTable {
            name: name.clone(),
            table: Arc::new(table),
        });
        let context = new_context_in(resolver, self.memory().statement_runtime());
        let list: Vec<String> = items.iter().map(ToString::to_string).collect();
        let sql = format!(
            "SELECT {} FROM {}",
            list.join(", "),
            Ident::with_quote('"', &name)
        );
        let query = match Parser::parse_sql(&PostgreSqlDialect {}, &sql)
            .map_err(|error| RsError::new(&codes::SYNTAX_ERROR, error.to_string()))?
            .pop()
        {
            Some(Statement::Query(query)) => query,
            _ => return Err(RsError::internal("RETURNING did not parse as a query")),
        };
        let frame = context.sql(&query.to_string()).await.map_err(query_error)?;
        let per_row = frame
            .logical_plan()
            .exists(|node| {
                Ok(matches!(
                    node,
                    LogicalPlan::Aggregate(_) | LogicalPlan::Window(_) | LogicalPlan::Unnest(_)
                ))
            })
            .map_err(query_error)?;
        if per_row {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "aggregate, window and set-returning functions are not allowed in RETURNING",
            ));
        }
        Ok((frame, *query))
    }

    /// The columns a write's `RETURNING` list answers (`None` for other
    /// statements), for Describe.
    pub(crate) async fn returning_columns(
        &self,
        session: &GatewaySession,
        statement: &Statement,
    ) -> RsResult<Option<SchemaRef>> {
        let (name, alias, items) = match statement {
            Statement::Insert(insert) => match (&insert.table, &insert.returning) {
                (TableObject::TableName(name), Some(items)) => (
                    object_name(&name.to_string()),
                    insert
                        .table_alias
                        .as_ref()
                        .map(|alias| ident_name(&alias.alias)),
                    items,
                ),
                _ => return Ok(None),
            },
            Statement::Update(update) => match &update.returning {
                Some(items) => (
                    table_reference(&update.table.relation)?.1,
                    relation_alias(&update.table.relation),
                    items,
                ),
                None => return Ok(None),
            },
            Statement::Delete(delete) => {
                let tables = match &delete.from {
                    FromTable::WithFromKeyword(tables) | FromTable::WithoutKeyword(tables) => {
                        tables
                    }
                };
                match (tables.as_slice(), &delete.returning) {
                    ([table], Some(items)) => (
                        table_reference(&table.relation)?.1,
                        relation_alias(&table.relation),
                        items,
                    ),
                    _ => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        let entry = self.entry(session, &name, Some(ObjectKind::Table))?;
        let returning = Returning {
            entry: &entry,
            alias,
            items,
            rows: Vec::new(),
        };
        let (frame, query) = self.returning_frame(returning).await?;
        Ok(Some(renamed_schema(
            pg_result_schema(&*analyzed_schema(&frame)?),
            pg_column_names(&query),
        )))
    }
}

/// A write's `RETURNING` list and the rows it kept for it.
struct Returning<'a> {
    entry: &'a CatalogEntry,
    /// The target's alias (`INSERT INTO t AS x`, `UPDATE t x`), by which
    /// the list may name it.
    alias: Option<String>,
    items: &'a [SelectItem],
    rows: Vec<Row>,
}

impl<'a> Returning<'a> {
    fn of(
        entry: &'a CatalogEntry,
        alias: Option<String>,
        items: Option<&'a [SelectItem]>,
        rows: Vec<Row>,
    ) -> Option<Returning<'a>> {
        Some(Returning {
            entry,
            alias,
            items: items?,
            rows,
        })
    }
}

/// The alias a `FROM`-like relation gives its table, if any.
fn relation_alias(relation: &TableFactor) -> Option<String> {
    match relation {
        TableFactor::Table {
            alias: Some(alias), ..
        } => Some(ident_name(&alias.name)),
        _ => None,
    }
}

/// `SELECT key, c1..cn, new values FROM table WHERE selection`.
/// Refuses `action` (a change of rows already stored) on a table with a
/// watermark, which is append-only (RFC 0013): a window the watermark
/// closed stays final.
pub(crate) fn refuse_append_only(entry: &CatalogEntry, action: &str) -> RsResult<()> {
    let Some(watermark) = &entry.watermark else {
        return Ok(());
    };
    Err(RsError::new(
        &codes::UNSUPPORTED_STATEMENT,
        format!(
            "{action} is not supported on table \"{}\": it has a watermark (on column \"{}\"), so it only takes new rows",
            entry.name, watermark.column
        ),
    )
    .with_detail("Only INSERT and COPY add rows to it: windows the watermark closed stay final."))
}

pub(crate) fn selection_query(
    entry: &CatalogEntry,
    table_sql: &str,
    values: &[String],
    selection: Option<&SqlExpr>,
) -> String {
    let mut columns = vec![format!("\"{ROW_KEY_COLUMN}\"")];
    columns.extend(
        entry
            .columns
            .iter()
            .map(|column| format!("\"{}\"", column.name)),
    );
    columns.extend(values.iter().cloned());
    let mut sql = format!("SELECT {} FROM {table_sql}", columns.join(", "));
    if let Some(selection) = selection {
        sql.push_str(&format!(" WHERE {selection}"));
    }
    sql
}

/// The SQL text and object name of a DML target.
fn table_reference(relation: &TableFactor) -> RsResult<(String, String)> {
    match relation {
        TableFactor::Table { name, .. } => {
            Ok((relation.to_string(), object_name(&name.to_string())))
        }
        other => Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            format!("cannot modify {other}"),
        )),
    }
}
