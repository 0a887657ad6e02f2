//! The pgwire backend: statement dispatch and transactions.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::StringArray;
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{
    DataType, Field, IntervalUnit, Schema as ArrowSchema, SchemaRef,
};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::ScalarValue;
use datafusion::dataframe::DataFrame;
use datafusion::datasource::MemTable;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{visit_expressions, CopyLegacyOption, CopyOption};
use datafusion::sql::sqlparser::ast::{
    CopySource, CopyTarget as SqlCopyTarget, CreateTable, Declare, DeclareType, Expr as SqlExpr,
    FetchDirection, FromTable, Ident, ObjectName, ObjectType, Query, SelectItem, Set, SetExpr,
    Statement, TableFactor, TableObject, TransactionIsolationLevel, TransactionMode,
    TruncateIdentityOption, Value, ValueWithSpan,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rockstream_common::Runtime;
use rockstream_control::{
    CatalogEntry, Database, DropObject, NewTable, NewView, ObjectKind, TableLayouts,
};
use rockstream_ops::arrow_rows::{duration_to_interval, rows_to_batch};
use rockstream_pgwire::{CopyFormat, PreparedStatements, StatementResult};
use rockstream_planner::{
    alias_select_items, new_context_in, normalize_query, pg_column_names, rewrite_using_joins,
    uses_bag_set_operation, TableResolver,
};
use rockstream_runtime::{RowChange, TableChange};
use rockstream_types::{codes, Row, RsError, RsResult};

use crate::copy_options;
use crate::ddl::{ident_name, table_columns};
use crate::defaults;
use crate::dml::{self, query_error};
use crate::fast_path;
use crate::memory::{size_text, MemoryLimits, StatementMemory};
use crate::providers::{
    decode_table_row, view_failure, ReadContext, SnapshotResolver, ROW_KEY_COLUMN,
};
use crate::sequences::{register_sequence_functions, SequenceAccess};
use crate::session::{
    restarted_map, GatewaySession, Isolation, SavepointCommand, Transaction, TransactionId,
};
use crate::session_commands;
use crate::statement_limits::{show_timeout, Stop};
use crate::wire::Command;

pub struct Gateway {
    database: Arc<Database>,
    runtime: Runtime,
    /// Running statements' working memory.
    memory: StatementMemory,
}

impl Gateway {
    pub fn new(database: Arc<Database>, runtime: Runtime, memory: MemoryLimits) -> Gateway {
        crate::session::seed_transaction_ids(runtime.now_micros());
        Gateway {
            database,
            runtime,
            memory: StatementMemory::new(memory),
        }
    }

    pub(crate) fn memory(&self) -> &StatementMemory {
        &self.memory
    }

    /// A planning and execution context for one statement over `resolver`,
    /// its working memory bounded ([`crate::memory`]).
    /// A planning context over `resolver`, with the session's sequence
    /// functions.
    pub(crate) fn statement_context(
        &self,
        session: &GatewaySession,
        resolver: Arc<dyn TableResolver>,
    ) -> SessionContext {
        let context = new_context_in(resolver, self.memory.statement_runtime());
        let pending = session
            .transaction
            .as_ref()
            .map(|transaction| &transaction.catalog)
            .filter(|catalog| !catalog.is_empty())
            .cloned();
        register_sequence_functions(
            &context,
            Arc::new(SequenceAccess::new(
                self.database.clone(),
                session.namespace.clone(),
                pending,
                session.sequence_values.clone(),
                session
                    .transaction
                    .as_ref()
                    .map(|transaction| transaction.restarted.clone()),
            )),
        );
        context
    }

    pub fn database(&self) -> &Database {
        &self.database
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// What a statement of `session` reads: the newest snapshot plus the
    /// session's uncommitted table writes.
    pub(crate) fn read_context(
        &self,
        session: &GatewaySession,
        with_row_keys: bool,
    ) -> ReadContext {
        let mut overlays = BTreeMap::new();
        let mut layouts = BTreeMap::new();
        if let Some(transaction) = &session.transaction {
            for (table_id, pending) in &transaction.tables {
                let overlay = pending
                    .rows
                    .iter()
                    .map(|(key, (_, current))| (key.clone(), current.clone()))
                    .collect();
                overlays.insert(*table_id, overlay);
                layouts.insert(*table_id, pending.layout);
            }
        }
        // The catalog as of the snapshot's epoch: a catalog transaction's
        // objects appear with its rows (RFC 0002). A REPEATABLE READ
        // transaction reads the newest catalog, as PostgreSQL's do.
        let published = self.database.engine().published();
        ReadContext {
            entries: self.entries_at(session, published.ddl_transaction),
            unbuilt_views: session
                .transaction
                .as_ref()
                .map(|transaction| transaction.catalog.unbuilt_views().collect())
                .unwrap_or_default(),
            databases: self.database.namespaces(),
            roles: self
                .database
                .roles()
                .into_iter()
                .map(|role| (role.name, role.login))
                .collect(),
            snapshot: session
                .transaction
                .as_ref()
                .and_then(|transaction| transaction.snapshot.clone())
                .unwrap_or(published.snapshot),
            snapshot_ddl_transaction: session
                .transaction
                .as_ref()
                .filter(|transaction| transaction.snapshot.is_some())
                .map(|transaction| transaction.snapshot_ddl_transaction),
            engine: self.database.engine().clone(),
            overlays,
            layouts,
            with_row_keys,
        }
    }

    /// The session's catalog: the committed one, with its transaction's
    /// DDL applied (RFC 0002).
    pub(crate) fn entries(&self, session: &GatewaySession) -> Vec<CatalogEntry> {
        let watermark = self.database.engine().published().ddl_transaction;
        self.entries_at(session, watermark)
    }

    /// [`Gateway::entries`] as of catalog transaction `watermark`
    /// ([`Database::entries_at`]).
    fn entries_at(&self, session: &GatewaySession, watermark: u64) -> Vec<CatalogEntry> {
        let committed = self.database.entries_at(&session.namespace, watermark);
        match &session.transaction {
            Some(transaction) if !transaction.catalog.is_empty() => {
                transaction.catalog.overlay(&session.namespace, committed)
            }
            _ => committed,
        }
    }

    pub(crate) fn entry(
        &self,
        session: &GatewaySession,
        name: &str,
        kind: Option<ObjectKind>,
    ) -> RsResult<CatalogEntry> {
        let entry = self
            .entries(session)
            .into_iter()
            .find(|entry| entry.name == name)
            .ok_or_else(|| {
                RsError::new(
                    &codes::UNDEFINED_OBJECT,
                    format!("relation \"{name}\" does not exist"),
                )
            })?;
        if let Some(kind) = kind {
            if entry.kind != kind {
                return Err(RsError::new(
                    &codes::WRONG_OBJECT_KIND,
                    format!(
                        "cannot change \"{name}\": it is a {}, only tables accept writes",
                        entry.kind.describe()
                    ),
                ));
            }
        }
        Ok(entry)
    }

    pub(crate) async fn execute_command(
        &self,
        session: &mut GatewaySession,
        command: &Command,
        prepared: &dyn PreparedStatements,
    ) -> RsResult<StatementResult> {
        match command {
            Command::Sql(statement) => self.execute_statement(session, statement, prepared).await,
            Command::RefreshMaterializedView { name, with_data } => {
                let result = self.refresh(session, name, *with_data);
                if result.is_err() {
                    session.statement_failed(None);
                }
                result
            }
            Command::Move { name, direction } => {
                let result = refuse_when_aborted(session)
                    .and_then(|()| fetch(session, &ident_name(name), direction));
                match result {
                    Ok(StatementResult::Query { batches, .. }) => Ok(StatementResult::Command {
                        tag: format!(
                            "MOVE {}",
                            batches.iter().map(RecordBatch::num_rows).sum::<usize>()
                        ),
                    }),
                    Ok(other) => Ok(other),
                    Err(error) => {
                        session.statement_failed(None);
                        Err(error)
                    }
                }
            }
        }
    }

    /// `REFRESH MATERIALIZED VIEW`: checks, then nothing to do.
    fn refresh(
        &self,
        session: &GatewaySession,
        name: &ObjectName,
        with_data: bool,
    ) -> RsResult<StatementResult> {
        refuse_when_aborted(session)?;
        let name = object_name(&name.to_string());
        let entry = self.entry(session, &name, None)?;
        if entry.kind != ObjectKind::MaterializedView {
            return Err(RsError::new(
                &codes::WRONG_OBJECT_KIND,
                format!("\"{name}\" is not a materialized view"),
            ));
        }
        if !with_data {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                format!(
                    "REFRESH MATERIALIZED VIEW {name} WITH NO DATA is not supported: \
                     materialized views are always kept current"
                ),
            ));
        }
        // Every acknowledged commit is already in the view: an epoch writes
        // its changes to every view it touches in the same batch as the
        // tables. As in PostgreSQL, a definition failing on the current
        // rows fails the refresh.
        if let Some(error) = view_failure(self.database.engine(), &entry) {
            return Err(error);
        }
        Ok(StatementResult::Command {
            tag: "REFRESH MATERIALIZED VIEW".to_string(),
        })
    }

    pub(crate) async fn execute_statement(
        &self,
        session: &mut GatewaySession,
        statement: &Statement,
        prepared: &dyn PreparedStatements,
    ) -> RsResult<StatementResult> {
        let aborted = session
            .transaction
            .as_ref()
            .is_some_and(|transaction| transaction.aborted);
        let ends_transaction = matches!(
            statement,
            Statement::Commit { .. }
                | Statement::Rollback {
                    savepoint: None,
                    ..
                }
        );
        let allowed_when_aborted = ends_transaction
            || matches!(
                statement,
                Statement::Rollback {
                    savepoint: Some(_),
                    ..
                }
            );
        if aborted && !allowed_when_aborted {
            return Err(RsError::new(
                &codes::TRANSACTION_ABORTED,
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        let in_explicit = session.in_explicit_transaction();
        // Copying the buffered changes is only needed when the statement writes.
        let writes = matches!(
            statement,
            Statement::Insert(_)
                | Statement::Update(_)
                | Statement::Delete(_)
                | Statement::Truncate(_)
        );
        let savepoint = writes.then(|| session.savepoint());
        // statement_timeout counts from here, whatever the statement does.
        session.statement_deadline = session.parameters.statement_timeout.map(|timeout| {
            let micros = i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX);
            self.runtime.now_micros().saturating_add(micros)
        });
        self.start_statement(session, statement);
        let mut result = self
            .dispatch(session, statement, in_explicit, prepared)
            .await;
        if result.is_ok() {
            // Sequence values the statement handed out (`nextval`, a
            // serial column) are never handed out again once it returns.
            if let Err(error) = self.database.persist_sequences().await {
                result = Err(error);
            }
        }
        if result.is_err() && !(in_explicit && ends_transaction) {
            session.statement_failed(savepoint);
        }
        result
    }

    async fn dispatch(
        &self,
        session: &mut GatewaySession,
        statement: &Statement,
        in_explicit: bool,
        prepared: &dyn PreparedStatements,
    ) -> RsResult<StatementResult> {
        let command = |tag: &str| {
            Ok(StatementResult::Command {
                tag: tag.to_string(),
            })
        };
        match statement {
            Statement::Query(query) => {
                let set_config = session_commands::set_config_calls(&session.parameters, query)?;
                let result = self.query(session, query).await?;
                session_commands::apply_set_config(session, set_config, in_explicit)?;
                Ok(result)
            }
            Statement::Explain { .. } => self.select(session, &statement.to_string()).await,
            Statement::StartTransaction { modes, .. } => {
                let isolation = requested_isolation(modes)?.unwrap_or(session.default_isolation);
                if !in_explicit {
                    session.transaction = Some(Transaction {
                        explicit: true,
                        isolation,
                        ..Default::default()
                    });
                }
                command("BEGIN")
            }
            Statement::Set(Set::SetTransaction {
                modes,
                snapshot: None,
                session: for_session,
            }) => match requested_isolation(modes)? {
                Some(isolation) => set_isolation(session, isolation, *for_session),
                None => command("SET"),
            },
            // The same, spelled as configuration parameters.
            Statement::Set(Set::SingleAssignment {
                variable, values, ..
            }) if isolation_parameter(variable).is_some() => {
                let for_session = isolation_parameter(variable) == Some(true);
                let [value] = values.as_slice() else {
                    return Err(RsError::new(
                        &codes::UNSUPPORTED_STATEMENT,
                        format!("SET {variable} takes one value"),
                    ));
                };
                set_isolation(session, isolation_named(value)?, for_session)
            }
            Statement::Commit { .. } => {
                let Some(transaction) = session.end_transaction() else {
                    return command("COMMIT");
                };
                if transaction.aborted {
                    session.close_transaction_cursors(false);
                    return command("ROLLBACK");
                }
                let committed = self.commit(&session.namespace, transaction).await;
                session.close_transaction_cursors(committed.is_ok());
                committed?;
                command("COMMIT")
            }
            Statement::Rollback {
                savepoint: Some(name),
                ..
            } => {
                session.savepoint_command(SavepointCommand::RollBackTo, &ident_name(name))?;
                command("ROLLBACK")
            }
            Statement::Rollback { .. } => {
                if session.end_transaction().is_some() {
                    session.close_transaction_cursors(false);
                }
                command("ROLLBACK")
            }
            Statement::Declare { stmts } => {
                for declare in stmts {
                    self.declare_cursor(session, declare, in_explicit).await?;
                }
                command("DECLARE CURSOR")
            }
            Statement::Fetch {
                name, direction, ..
            } => fetch(session, &ident_name(name), direction),
            Statement::Savepoint { name } => {
                session.savepoint_command(SavepointCommand::Define, &ident_name(name))?;
                command("SAVEPOINT")
            }
            Statement::ReleaseSavepoint { name } => {
                session.savepoint_command(SavepointCommand::Release, &ident_name(name))?;
                command("RELEASE")
            }
            Statement::CreateTable(create) => {
                refuse_unsupported_table(create)?;
                let mut definition = table_columns(create)?;
                defaults::check_defaults(self, session, &mut definition).await?;
                let name = object_name(&create.name.to_string());
                let table = NewTable {
                    name: &name,
                    columns: definition.columns,
                    primary_key: definition.primary_key,
                    generated: definition.generated,
                    if_not_exists: create.if_not_exists,
                };
                match session.transaction.as_mut() {
                    Some(transaction) if in_explicit => {
                        self.database
                            .create_table_in(&mut transaction.catalog, &session.namespace, table)
                            .await?
                    }
                    _ => {
                        self.database
                            .create_table(&session.namespace, table)
                            .await?
                    }
                };
                command("CREATE TABLE")
            }
            Statement::CreateView(create) => {
                if create.or_replace {
                    return Err(RsError::new(&codes::UNSUPPORTED_STATEMENT, "CREATE OR REPLACE VIEW is not supported; DROP the view and create it again"));
                }
                let name = object_name(&create.name.to_string());
                let query = create.query.to_string();
                let column_names = if create.columns.is_empty() {
                    pg_column_names(&create.query)
                } else {
                    Some(
                        create
                            .columns
                            .iter()
                            .map(|column| object_name(&column.name.to_string()))
                            .collect(),
                    )
                };
                let view = NewView {
                    name: &name,
                    query: &query,
                    column_names,
                    materialized: create.materialized,
                    if_not_exists: create.if_not_exists,
                };
                match session.transaction.as_mut() {
                    Some(transaction) if in_explicit => {
                        let created = self
                            .database
                            .create_view_in(&mut transaction.catalog, &session.namespace, view)
                            .await?;
                        if created && create.materialized {
                            self.populate(session, &name, &query).await?;
                        }
                    }
                    _ => {
                        self.database.create_view(&session.namespace, view).await?;
                    }
                };
                command(if create.materialized {
                    "CREATE MATERIALIZED VIEW"
                } else {
                    "CREATE VIEW"
                })
            }
            Statement::Drop {
                object_type: ObjectType::Role | ObjectType::User,
                if_exists,
                names,
                ..
            } => {
                crate::ddl::refuse_in_transaction_block(in_explicit, "DROP ROLE")?;
                crate::roles::drop_roles(&self.database, names, *if_exists).await
            }
            Statement::CreateDatabase { .. } => {
                crate::ddl::refuse_in_transaction_block(in_explicit, "CREATE DATABASE")?;
                crate::databases::create_database(&self.database, statement).await
            }
            Statement::Drop {
                object_type: ObjectType::Database,
                if_exists,
                names,
                ..
            } => {
                crate::ddl::refuse_in_transaction_block(in_explicit, "DROP DATABASE")?;
                crate::databases::drop_databases(
                    &self.database,
                    &self.runtime,
                    session,
                    names,
                    *if_exists,
                )
                .await
            }
            Statement::CreateRole(create) => {
                crate::ddl::refuse_in_transaction_block(in_explicit, "CREATE ROLE")?;
                crate::roles::create_role(&self.database, create).await
            }
            Statement::AlterRole { name, operation } => {
                crate::ddl::refuse_in_transaction_block(in_explicit, "ALTER ROLE")?;
                crate::roles::alter_role(&self.database, &ident_name(name), operation).await
            }
            Statement::Drop {
                object_type,
                if_exists,
                names,
                cascade,
                ..
            } => {
                let (kind, tag) = match object_type {
                    ObjectType::Table => (ObjectKind::Table, "DROP TABLE"),
                    ObjectType::View => (ObjectKind::View, "DROP VIEW"),
                    ObjectType::MaterializedView => {
                        (ObjectKind::MaterializedView, "DROP MATERIALIZED VIEW")
                    }
                    other => {
                        return Err(RsError::new(
                            &codes::UNSUPPORTED_STATEMENT,
                            format!("DROP {other} is not supported"),
                        ))
                    }
                };
                for name in names {
                    let name = object_name(&name.to_string());
                    let drop = DropObject {
                        name: &name,
                        kind,
                        cascade: *cascade,
                        if_exists: *if_exists,
                    };
                    match session.transaction.as_mut() {
                        Some(transaction) if in_explicit => {
                            let dropped = self.database.drop_object_in(
                                &mut transaction.catalog,
                                &session.namespace,
                                drop,
                            )?;
                            // Its rows go with the table.
                            for id in dropped.unwrap_or_default() {
                                transaction.tables.remove(&id);
                            }
                        }
                        _ => {
                            self.database.drop_object(&session.namespace, drop).await?;
                        }
                    }
                }
                command(tag)
            }
            Statement::Insert(insert) => {
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
                let (count, rows) =
                    dml::insert(self, session, &entry, statement, insert.returning.is_some())
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
            Statement::Update(update) => {
                if update.from.is_some() || !update.table.joins.is_empty() {
                    return Err(RsError::new(
                        &codes::UNSUPPORTED_STATEMENT,
                        "UPDATE ... FROM is not supported yet",
                    ));
                }
                let (table_sql, table_name) = table_reference(&update.table.relation)?;
                let entry = self.entry(session, &table_name, Some(ObjectKind::Table))?;
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
                let selection_sql =
                    selection_query(&entry, &table_sql, &values, update.selection.as_ref());
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
            Statement::Delete(delete) => {
                let tables = match &delete.from {
                    FromTable::WithFromKeyword(tables) | FromTable::WithoutKeyword(tables) => {
                        tables
                    }
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
                let selection_sql =
                    selection_query(&entry, &table_sql, &[], delete.selection.as_ref());
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
            Statement::Truncate(truncate) => {
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
                    entries.push(self.entry(session, &name, Some(ObjectKind::Table))?);
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
                command("TRUNCATE TABLE")
            }
            Statement::Copy {
                source,
                to,
                target,
                options,
                legacy_options,
                ..
            } => {
                if *to {
                    if !matches!(target, SqlCopyTarget::Stdout) {
                        return Err(RsError::new(
                            &codes::UNSUPPORTED_STATEMENT,
                            "only COPY ... TO STDOUT is supported (a file on the client: psql's \\copy ... TO 'file')",
                        ));
                    }
                    return self
                        .copy_out(session, source, options, legacy_options)
                        .await;
                }
                let CopySource::Table {
                    table_name,
                    columns,
                } = source
                else {
                    return Err(RsError::new(
                        &codes::UNSUPPORTED_STATEMENT,
                        "COPY (query) FROM is not valid: COPY FROM loads a table",
                    ));
                };
                if !matches!(target, SqlCopyTarget::Stdin) {
                    return Err(RsError::new(
                        &codes::UNSUPPORTED_STATEMENT,
                        "only COPY ... FROM STDIN is supported (a file on the client: psql's \\copy ... FROM 'file')",
                    ));
                }
                let entry = self.entry(
                    session,
                    &object_name(&table_name.to_string()),
                    Some(ObjectKind::Table),
                )?;
                let columns: Vec<String> = columns.iter().map(ident_name).collect();
                let mut copy = copy_options::copy_target(
                    entry.name.clone(),
                    columns,
                    options,
                    legacy_options,
                )?;
                if copy.format == CopyFormat::Binary {
                    copy.column_types = copy_column_types(&entry, &copy.columns)?;
                }
                Ok(StatementResult::CopyIn(copy))
            }
            Statement::Set(Set::SetTransaction { .. }) => Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "SET TRANSACTION SNAPSHOT is not supported",
            )),
            Statement::Set(_)
            | Statement::Reset(_)
            | Statement::Discard { .. }
            | Statement::Deallocate { .. }
            | Statement::Close { .. }
            | Statement::UNLISTEN { .. }
                if session_commands::handles(statement) =>
            {
                session_commands::run(session, statement, in_explicit, prepared)
            }
            Statement::Set(_) => command("SET"),
            Statement::AlterTable(alter) => {
                let result = crate::alter::alter_table(self, session, alter).await?;
                self.autocommit(session, in_explicit).await?;
                Ok(result)
            }
            Statement::ShowVariable { variable } => self.show(
                &variable
                    .iter()
                    .map(|i| i.value.clone())
                    .collect::<Vec<_>>()
                    .join(" "),
                session,
            ),
            other => Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                format!("statement not supported: {}", truncate(&other.to_string())),
            )),
        }
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
        let context = new_context_in(resolver, self.memory.statement_runtime());
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

    /// `COPY table [(columns)] TO STDOUT` or `COPY (query) TO STDOUT`: the
    /// rows, for the wire to write in the options' format.
    async fn copy_out(
        &self,
        session: &GatewaySession,
        source: &CopySource,
        options: &[CopyOption],
        legacy_options: &[CopyLegacyOption],
    ) -> RsResult<StatementResult> {
        let format = copy_options::copy_target(String::new(), Vec::new(), options, legacy_options)?;
        if format.format == CopyFormat::Binary {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "COPY ... TO in the binary format is not supported; use the text or CSV format",
            ));
        }
        let query = match source {
            CopySource::Query(query) => query.as_ref().clone(),
            CopySource::Table {
                table_name,
                columns,
            } => {
                // A table, as in PostgreSQL (a view's rows: `COPY (SELECT
                // ...) TO`).
                let entry = self.entry(
                    session,
                    &object_name(&table_name.to_string()),
                    Some(ObjectKind::Table),
                )?;
                let names: Vec<String> = columns.iter().map(ident_name).collect();
                // Each listed column exists (42703 naming it otherwise).
                copy_column_types(&entry, &names)?;
                let list = if columns.is_empty() {
                    "*".to_string()
                } else {
                    columns
                        .iter()
                        .map(|column| format!("\"{}\"", ident_name(column).replace('"', "\"\"")))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let sql = format!("SELECT {list} FROM \"{}\"", entry.name.replace('"', "\"\""));
                match Parser::parse_sql(&PostgreSqlDialect {}, &sql)
                    .map_err(|error| RsError::internal(format!("{sql}: {error}")))?
                    .pop()
                {
                    Some(Statement::Query(query)) => *query,
                    _ => return Err(RsError::internal(format!("{sql} is not a query"))),
                }
            }
        };
        refuse_set_config(&query, "COPY")?;
        let StatementResult::Query { schema, batches } = self.query(session, &query).await? else {
            return Err(RsError::internal("COPY's query gave no rows"));
        };
        Ok(StatementResult::CopyOut {
            format,
            schema,
            batches,
        })
    }

    /// A query's rows, under PostgreSQL's column names.
    async fn query(&self, session: &GatewaySession, query: &Query) -> RsResult<StatementResult> {
        refuse_unsupported_query(query)?;
        if let Some(result) = fast_path::constant_select(query) {
            return Ok(result);
        }
        let table = |name: &str| self.entry(session, name, Some(ObjectKind::Table)).ok();
        if let Some(lookup) = fast_path::point_lookup(query, table) {
            return self.read_point(session, lookup).await;
        }
        if uses_bag_set_operation(&query.to_string()) {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "EXCEPT ALL / INTERSECT ALL are supported in materialized views only",
            ));
        }
        let result = self.select_query(session, query).await?;
        rename_columns(result, pg_column_names(query))
    }

    /// `DECLARE name [NO SCROLL] CURSOR [WITH[OUT] HOLD] FOR query`: runs
    /// the query and keeps its result for `FETCH` (see [`Cursor`]). Without
    /// `WITH HOLD` a cursor lives inside a transaction block only.
    async fn declare_cursor(
        &self,
        session: &mut GatewaySession,
        declare: &Declare,
        in_explicit: bool,
    ) -> RsResult<()> {
        let (Some(DeclareType::Cursor), Some(query), [name]) = (
            &declare.declare_type,
            &declare.for_query,
            declare.names.as_slice(),
        ) else {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                format!("DECLARE is supported for one cursor at a time: {declare}"),
            ));
        };
        if declare.binary == Some(true) {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "BINARY cursors are not supported; declare the cursor without BINARY",
            ));
        }
        let hold = declare.hold == Some(true);
        if !hold && !in_explicit {
            return Err(RsError::new(
                &codes::NO_ACTIVE_TRANSACTION,
                "DECLARE CURSOR can only be used in transaction blocks",
            ));
        }
        let name = ident_name(name);
        if session.cursors.contains_key(&name) {
            return Err(RsError::new(
                &codes::DUPLICATE_CURSOR,
                format!("cursor \"{name}\" already exists"),
            ));
        }
        refuse_set_config(query, "DECLARE CURSOR")?;
        let StatementResult::Query { schema, batches } = self.query(session, query).await? else {
            return Err(RsError::internal("a cursor's query gave no rows"));
        };
        let rows = datafusion::arrow::compute::concat_batches(&schema, &batches)
            .map_err(rockstream_ops::arrow_rows::arrow_error)?;
        session.declare_cursor(name, rows, hold);
        Ok(())
    }

    /// Runs the definition of materialized view `name`, just created in the
    /// session's transaction, over what the transaction sees, as PostgreSQL
    /// populates a materialized view at `CREATE`: a row that makes it fail
    /// (a division by zero) fails the `CREATE`. Its rows are not kept: the
    /// view is built when the transaction commits. (A definition with
    /// `EXCEPT ALL`/`INTERSECT ALL`, which ad-hoc reads cannot evaluate, is
    /// checked by that build.)
    async fn populate(&self, session: &GatewaySession, name: &str, query: &str) -> RsResult<()> {
        if rockstream_planner::uses_bag_set_operation(query) {
            return Ok(());
        }
        let context = self.query_context(session);
        let frame = context
            .sql(&format!("SELECT * FROM {}", Ident::with_quote('"', name)))
            .await
            .map_err(query_error)?;
        self.stop(session).drain(frame).await
    }

    /// A statement other than transaction control marks the transaction
    /// started; under REPEATABLE READ the first one pins the state every
    /// later one reads.
    fn start_statement(&self, session: &mut GatewaySession, statement: &Statement) {
        if matches!(
            statement,
            Statement::StartTransaction { .. }
                | Statement::Commit { .. }
                | Statement::Rollback { .. }
                | Statement::Savepoint { .. }
                | Statement::ReleaseSavepoint { .. }
                | Statement::Set(_)
                | Statement::ShowVariable { .. }
                | Statement::Reset(_)
                | Statement::Discard { .. }
                | Statement::Deallocate { .. }
                | Statement::Close { .. }
                | Statement::UNLISTEN { .. }
        ) {
            return;
        }
        let Some(transaction) = session.transaction.as_mut() else {
            return;
        };
        transaction.started = true;
        if transaction.isolation == Isolation::RepeatableRead && transaction.snapshot.is_none() {
            let published = self.database.engine().published();
            transaction.snapshot = Some(published.snapshot);
            transaction.snapshot_ddl_transaction = published.ddl_transaction;
        }
    }

    /// `SHOW variable`; the isolation level shown is the session's
    /// transaction's (or the one its next transaction gets).
    fn show(&self, variable: &str, session: &GatewaySession) -> RsResult<StatementResult> {
        let name = show_column_name(variable);
        let value = self.setting(&name.replace(' ', "."), session)?;
        let schema = show_schema(name);
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(StringArray::from(vec![value]))],
        )
        .map_err(rockstream_ops::arrow_rows::arrow_error)?;
        Ok(StatementResult::Query {
            schema,
            batches: vec![batch],
        })
    }

    /// Registers in `context` the functions that read the session:
    /// `current_database()`, `current_user` and its kin always, the others
    /// when `query` calls them.
    pub(crate) fn register_session_functions(
        &self,
        context: &SessionContext,
        session: &GatewaySession,
        query: &Query,
    ) {
        context.register_udf(rockstream_planner::session_constant(
            "current_database",
            ScalarValue::Utf8(Some(session.namespace.clone())),
        ));
        context.register_udf(rockstream_planner::session_constant(
            rockstream_planner::USER_FUNCTION,
            ScalarValue::Utf8(Some(session.user.clone())),
        ));
        if calls_function(query, "current_setting") {
            context.register_udf(rockstream_planner::current_setting(self.settings(session)));
        }
        if calls_function(query, "set_config") {
            context.register_udf(rockstream_planner::set_config());
        }
        if calls_function(query, "pg_backend_pid") {
            let pid = session.interrupt.pid().unwrap_or_default();
            context.register_udf(rockstream_planner::session_constant(
                "pg_backend_pid",
                ScalarValue::Int32(Some(pid)),
            ));
        }
        if calls_function(query, "txid_current") {
            // Outside a transaction block the statement is its own.
            let id = session
                .transaction
                .as_ref()
                .map_or_else(TransactionId::default, |transaction| transaction.id);
            context.register_udf(rockstream_planner::session_constant(
                "txid_current",
                ScalarValue::Int64(Some(id.0)),
            ));
        }
    }

    /// The parameters `current_setting()` reads: those `SHOW` always knows
    /// and those the session set.
    fn settings(&self, session: &GatewaySession) -> BTreeMap<String, String> {
        const ALWAYS_KNOWN: [&str; 14] = [
            "server_version",
            "server_version_num",
            "server_encoding",
            "client_encoding",
            "default_table_access_method",
            "transaction_isolation",
            "default_transaction_isolation",
            "standard_conforming_strings",
            "timezone",
            "datestyle",
            "statement_timeout",
            "idle_in_transaction_session_timeout",
            "idle_session_timeout",
            "rockstream.reclaims_pending",
        ];
        let names = ALWAYS_KNOWN
            .iter()
            .copied()
            .chain(crate::settings::defaulted_names())
            .map(|name| name.to_string())
            .chain(session.parameters.settings.keys().cloned());
        names
            .filter_map(|name| {
                let value = self.setting(&name, session).ok()?;
                Some((name, value))
            })
            .collect()
    }

    /// The value of parameter `name` (lower case, the parts of a dotted or
    /// multi-word name joined by dots) as `SHOW` and `current_setting()`
    /// report it.
    fn setting(&self, name: &str, session: &GatewaySession) -> RsResult<String> {
        let default_isolation = session.default_isolation;
        let isolation = session
            .transaction
            .as_ref()
            .filter(|transaction| transaction.explicit)
            .map_or(default_isolation, |transaction| transaction.isolation);
        let cache = || {
            let stats = self.database.engine().arrangement_cache_stats();
            format!(
                "hit_ratio={:.4} hits={} misses={} evictions={} bytes={} bytes_max={}",
                stats.hit_ratio(),
                stats.hits,
                stats.misses,
                stats.evictions,
                stats.bytes,
                stats.bytes_max
            )
        };
        let memory = || {
            let limits = self.memory.limits();
            format!(
                "statement={} total={} in_use_bytes={}",
                size_text(limits.statement_bytes),
                size_text(limits.total_bytes),
                self.memory.reserved()
            )
        };
        let value = match name {
            "server_version" => rockstream_pgwire::SERVER_VERSION.to_string(),
            "server_version_num" => "150000".to_string(),
            "server_encoding" => "UTF8".to_string(),
            "default_table_access_method" => "heap".to_string(),
            "transaction_isolation" | "transaction.isolation.level" => isolation.name().to_string(),
            "default_transaction_isolation" => default_isolation.name().to_string(),
            "standard_conforming_strings" => "on".to_string(),
            "timezone" | "time.zone" => "UTC".to_string(),
            "client_encoding" => "UTF8".to_string(),
            "datestyle" => "ISO, MDY".to_string(),
            "rockstream.arrangement_cache" => cache(),
            "rockstream.statement_memory" => memory(),
            // Dropped objects whose state is still being deleted.
            "rockstream.reclaims_pending" => self.database.engine().reclaims_pending().to_string(),
            name if session.parameters.timeout(name).is_some() => {
                show_timeout(session.parameters.timeout(name).flatten())
            }
            other => match session.parameters.settings.get(other) {
                Some(value) => value.clone(),
                None => match crate::settings::default_value(other) {
                    Some(default) => default.to_string(),
                    None if crate::settings::is_settable(other) => {
                        return Err(RsError::new(
                            &codes::UNSUPPORTED_STATEMENT,
                            format!("SHOW {other} is not supported unless the session SET it"),
                        ))
                    }
                    None => return Err(session_commands::unrecognized(other)),
                },
            },
        };
        Ok(value)
    }

    /// Runs a query, written as PostgreSQL reads it (see `normalize_query`
    /// and `rewrite_using_joins`).
    async fn select_query(
        &self,
        session: &GatewaySession,
        query: &Query,
    ) -> RsResult<StatementResult> {
        let context = self.query_context(session);
        self.register_session_functions(&context, session, query);
        let mut normalized = as_postgres_reads_it(&context, query).await?;
        match self
            .run_query(session, &context, &normalized.to_string())
            .await
        {
            Err(error) if repeats_a_name(&error.message) && alias_select_items(&mut normalized) => {
                self.run_query(session, &context, &normalized.to_string())
                    .await
            }
            result => result,
        }
    }

    async fn select(&self, session: &GatewaySession, sql: &str) -> RsResult<StatementResult> {
        self.run_query(session, &self.query_context(session), sql)
            .await
    }

    /// A table's row by its primary key, as the session reads it: its own
    /// pending change if it made one, else its snapshot's.
    async fn read_point(
        &self,
        session: &GatewaySession,
        lookup: fast_path::PointLookup,
    ) -> RsResult<StatementResult> {
        session.check_layout(&lookup.entry)?;
        let transaction = session.transaction.as_ref();
        let pending = transaction
            .and_then(|transaction| transaction.tables.get(&lookup.entry.id))
            .and_then(|table| table.rows.get(&lookup.key));
        let row = match pending {
            Some((_, current)) => current.clone(),
            None => {
                let snapshot = transaction
                    .and_then(|transaction| transaction.snapshot.clone())
                    .unwrap_or_else(|| self.database.engine().published().snapshot);
                match snapshot.get(&lookup.stored_key).await? {
                    Some(bytes) => Some(decode_table_row(&lookup.entry, &bytes)?),
                    None => None,
                }
            }
        };
        let rows: Vec<Row> = row
            .map(|row| {
                lookup
                    .columns
                    .iter()
                    .map(|column| row[*column].clone())
                    .collect()
            })
            .into_iter()
            .collect();
        let references: Vec<&Row> = rows.iter().collect();
        let batch = rows_to_batch(&references, &lookup.types, &lookup.schema, &[])?;
        Ok(StatementResult::Query {
            schema: lookup.schema,
            batches: vec![batch],
        })
    }

    /// A planning context over the session's read snapshot.
    pub(crate) fn query_context(&self, session: &GatewaySession) -> SessionContext {
        self.statement_context(
            session,
            Arc::new(SnapshotResolver {
                context: Arc::new(self.read_context(session, false)),
            }),
        )
    }

    async fn run_query(
        &self,
        session: &GatewaySession,
        context: &SessionContext,
        sql: &str,
    ) -> RsResult<StatementResult> {
        let frame = context.sql(sql).await.map_err(query_error)?;
        let schema = analyzed_schema(&frame)?;
        let batches = self.stop(session).collect(frame).await?;
        as_pg_result(schema, batches)
    }

    /// What stops the session's running statement: a cancel request, or
    /// its `statement_timeout` (counted from the statement's start).
    pub(crate) fn stop(&self, session: &GatewaySession) -> Stop {
        Stop::new(
            session.interrupt.clone(),
            session.statement_deadline,
            self.runtime.clone(),
        )
    }

    pub(crate) async fn autocommit(
        &self,
        session: &mut GatewaySession,
        in_explicit: bool,
    ) -> RsResult<()> {
        if in_explicit {
            return Ok(());
        }
        if let Some(transaction) = session.transaction.take() {
            self.commit(&session.namespace, transaction).await?;
        }
        Ok(())
    }

    async fn commit(&self, namespace: &str, transaction: Transaction) -> RsResult<()> {
        // Values its rows hold are never handed out again, even if the
        // server stops right after the commit.
        self.database.persist_sequences().await?;
        let restarted: Vec<(rockstream_types::ObjectId, i128)> =
            restarted_map(&transaction.restarted)
                .iter()
                .map(|(id, next)| (*id, *next))
                .collect();
        let layouts: TableLayouts = transaction
            .tables
            .iter()
            .map(|(table_id, pending)| (*table_id, pending.layout))
            .collect();
        let catalog = &transaction.catalog;
        let changes: Vec<TableChange> = transaction
            .tables
            .into_iter()
            .map(|(table_id, pending)| {
                // A rewrite's rows all commit, changed or not: the commit
                // checks that it rewrote every row (RFC 0004).
                let rewritten = catalog.rewrites(table_id);
                TableChange {
                    table_id,
                    table_name: pending.name,
                    rows: pending
                        .rows
                        .into_iter()
                        .filter(|(_, (old, new))| old != new || (rewritten && old.is_some()))
                        .map(|(key, (old, new))| RowChange { key, old, new })
                        .collect(),
                }
            })
            .filter(|change| !change.rows.is_empty())
            .collect();
        self.database
            .commit_transaction(namespace, transaction.catalog, changes, &layouts)
            .await?;
        // Past the commit point: the transaction committed, whatever
        // happens to the restart. If its write fails the sequences go on
        // from their old, higher values, which repeats nothing.
        if let Err(error) = self.database.restart_sequences(namespace, &restarted).await {
            tracing::warn!(%error, "TRUNCATE … RESTART IDENTITY committed, but its sequences could not be restarted");
        }
        Ok(())
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

/// The one relation a `RETURNING` list reads: the rows the write kept.
pub(crate) struct OneTable {
    pub name: String,
    pub table: Arc<dyn TableProvider>,
}

impl std::fmt::Debug for OneTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OneTable({})", self.name)
    }
}

#[async_trait::async_trait]
impl TableResolver for OneTable {
    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, RsError> {
        Ok((name == self.name).then(|| self.table.clone()))
    }

    fn table_names(&self) -> Vec<String> {
        vec![self.name.clone()]
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

/// The schema of `frame`'s rows: its analyzed plan's (analyzer rules may
/// change result types).
fn analyzed_schema(frame: &DataFrame) -> RsResult<SchemaRef> {
    let plan = frame.clone().into_optimized_plan().map_err(query_error)?;
    Ok(result_schema(&plan))
}

/// The columns `plan` returns. A column read as it is from a table keeps
/// the table's oid and its number for `RowDescription`, except where a
/// set operation mixes rows of several sources (PostgreSQL then names no
/// table).
pub(crate) fn result_schema(plan: &datafusion::logical_expr::LogicalPlan) -> SchemaRef {
    let schema = plan.schema().as_arrow();
    let mixes_sources = plan
        .exists(|node| {
            Ok(matches!(
                node,
                datafusion::logical_expr::LogicalPlan::Union(_)
                    | datafusion::logical_expr::LogicalPlan::RecursiveQuery(_)
            ))
        })
        .unwrap_or(true);
    if !mixes_sources {
        return Arc::new(schema.clone());
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| {
            let mut metadata = field.metadata().clone();
            metadata.remove(rockstream_pgwire::FIELD_TABLE_OID);
            metadata.remove(rockstream_pgwire::FIELD_COLUMN_NUMBER);
            field.as_ref().clone().with_metadata(metadata)
        })
        .collect();
    Arc::new(ArrowSchema::new(fields))
}

/// `set_config()` takes effect where a query runs as a statement of its own
/// ([`session_commands::set_config_calls`]), not inside `statement`.
fn refuse_set_config(query: &Query, statement: &str) -> RsResult<()> {
    if calls_function(query, "set_config") {
        return Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            format!("set_config() is not supported in {statement}"),
        ));
    }
    Ok(())
}

/// Refuses what a query asks that RockStream does not do, rather than
/// ignore it: row locks (`FOR UPDATE`/`FOR SHARE`: transactions are
/// optimistic, a conflicting write fails the commit with 40001 instead) and
/// `SELECT ... INTO` (which creates a table).
fn refuse_unsupported_query(query: &Query) -> RsResult<()> {
    if !query.locks.is_empty() {
        return Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            "SELECT ... FOR UPDATE/SHARE is not supported: RockStream takes no row locks (a \
             transaction that writes a row another one changed since it read it fails at COMMIT \
             with 40001)",
        ));
    }
    if let SetExpr::Select(select) = query.body.as_ref() {
        if select.into.is_some() {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "SELECT ... INTO is not supported: CREATE TABLE, then INSERT INTO ... SELECT",
            ));
        }
    }
    Ok(())
}

/// Refuses the `CREATE TABLE` forms RockStream does not build, rather than
/// create something else: temporary tables (they would outlive the
/// session), `AS query` and `(LIKE other)`.
fn refuse_unsupported_table(create: &CreateTable) -> RsResult<()> {
    let refused = if create.temporary {
        Some("CREATE TEMPORARY TABLE is not supported: create a table and drop it when done")
    } else if create.query.is_some() {
        Some("CREATE TABLE ... AS is not supported yet: CREATE TABLE, then INSERT INTO ... SELECT")
    } else if create.like.is_some() {
        Some("CREATE TABLE ... (LIKE ...) is not supported: name the columns")
    } else if create.inherits.is_some() {
        Some("CREATE TABLE ... INHERITS is not supported")
    } else {
        None
    };
    refused.map_or(Ok(()), |message| {
        Err(RsError::new(&codes::UNSUPPORTED_STATEMENT, message))
    })
}

/// Gives a query result PostgreSQL's column names.
fn rename_columns(
    result: StatementResult,
    names: Option<Vec<String>>,
) -> RsResult<StatementResult> {
    let (StatementResult::Query { schema, batches }, Some(names)) = (&result, names) else {
        return Ok(result);
    };
    if names.len() != schema.fields().len() {
        return Ok(result);
    }
    let renamed = renamed_schema(schema.clone(), Some(names));
    let batches = batches
        .iter()
        .map(|batch| RecordBatch::try_new(renamed.clone(), batch.columns().to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(rockstream_ops::arrow_rows::arrow_error)?;
    Ok(StatementResult::Query {
        schema: renamed,
        batches,
    })
}

/// `query` rewritten into what DataFusion plans with PostgreSQL's meaning
/// (`normalize_query`, `rewrite_using_joins`).
pub(crate) async fn as_postgres_reads_it(
    context: &SessionContext,
    query: &Query,
) -> RsResult<Query> {
    let mut normalized = query.clone();
    normalize_query(&mut normalized);
    rewrite_using_joins(context, &mut normalized)
        .await
        .map_err(query_error)?;
    Ok(normalized)
}

/// Whether DataFusion refused a select list for naming two columns alike.
pub(crate) fn repeats_a_name(message: &str) -> bool {
    message.contains("require unique expression names")
}

/// The type a result column is sent as, when it is not its Arrow type:
/// PostgreSQL has no durations (`timestamp - timestamp` is an interval) and
/// no unsigned integers (DataFusion's `row_number()` is one; PostgreSQL's is
/// a bigint).
fn pg_result_type(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::Duration(_) => Some(DataType::Interval(IntervalUnit::MonthDayNano)),
        DataType::UInt8 => Some(DataType::Int16),
        DataType::UInt16 => Some(DataType::Int32),
        DataType::UInt32 | DataType::UInt64 => Some(DataType::Int64),
        _ => None,
    }
}

/// `schema` with each column as [`pg_result_type`] sends it.
pub(crate) fn pg_result_schema(schema: &ArrowSchema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| match pg_result_type(field.data_type()) {
            Some(data_type) => field.as_ref().clone().with_data_type(data_type),
            None => field.as_ref().clone(),
        })
        .collect();
    Arc::new(ArrowSchema::new(fields))
}

/// A query's result, its columns converted as [`pg_result_type`] says.
fn as_pg_result(schema: SchemaRef, batches: Vec<RecordBatch>) -> RsResult<StatementResult> {
    if !schema
        .fields()
        .iter()
        .any(|field| pg_result_type(field.data_type()).is_some())
    {
        return Ok(StatementResult::Query { schema, batches });
    }
    let converted = pg_result_schema(&schema);
    let batches = batches
        .into_iter()
        .map(|batch| {
            let columns = batch
                .columns()
                .iter()
                .map(|column| match pg_result_type(column.data_type()) {
                    None => Ok(column.clone()),
                    Some(_) if matches!(column.data_type(), DataType::Duration(_)) => {
                        duration_to_interval(column)
                    }
                    Some(data_type) => cast_with_options(
                        column,
                        &data_type,
                        &CastOptions {
                            safe: false,
                            ..CastOptions::default()
                        },
                    )
                    .map_err(rockstream_ops::arrow_rows::arrow_error),
                })
                .collect::<RsResult<Vec<_>>>()?;
            RecordBatch::try_new(converted.clone(), columns)
                .map_err(rockstream_ops::arrow_rows::arrow_error)
        })
        .collect::<RsResult<Vec<_>>>()?;
    Ok(StatementResult::Query {
        schema: converted,
        batches,
    })
}

pub(crate) fn renamed_schema(schema: SchemaRef, names: Option<Vec<String>>) -> SchemaRef {
    match names {
        Some(names) if names.len() == schema.fields().len() => {
            let fields: Vec<Field> = schema
                .fields()
                .iter()
                .zip(names)
                .map(|(field, name)| field.as_ref().clone().with_name(name))
                .collect();
            Arc::new(ArrowSchema::new(fields))
        }
        _ => schema,
    }
}

/// `SELECT key, c1..cn, new values FROM table WHERE selection`.
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

/// Normalizes an object name as PostgreSQL does: unquoted → lower case.
pub(crate) fn object_name(text: &str) -> String {
    let last = text.rsplit('.').next().unwrap_or(text);
    if last.starts_with('"') && last.ends_with('"') && last.len() >= 2 {
        last[1..last.len() - 1].to_string()
    } else {
        last.to_lowercase()
    }
}

fn truncate(text: &str) -> String {
    text.chars().take(80).collect()
}

/// `SET TRANSACTION ISOLATION LEVEL` (`for_session`: `SET SESSION
/// CHARACTERISTICS AS TRANSACTION ...`). Inside a transaction block the level
/// can change only before the first query; outside one PostgreSQL warns and
/// changes nothing.
fn set_isolation(
    session: &mut GatewaySession,
    isolation: Isolation,
    for_session: bool,
) -> RsResult<StatementResult> {
    if for_session {
        session.default_isolation = isolation;
    } else if let Some(transaction) = session.transaction.as_mut().filter(|t| t.explicit) {
        if transaction.started && transaction.isolation != isolation {
            return Err(RsError::new(
                &codes::ISOLATION_SET_TOO_LATE,
                "SET TRANSACTION ISOLATION LEVEL must be called before any query",
            ));
        }
        transaction.isolation = isolation;
    }
    Ok(StatementResult::Command {
        tag: "SET".to_string(),
    })
}

/// For `transaction_isolation` (`Some(false)`) and
/// `default_transaction_isolation` (`Some(true)`: the session's default).
fn isolation_parameter(variable: &ObjectName) -> Option<bool> {
    let name = variable.0.last()?.as_ident()?.value.to_lowercase();
    match name.as_str() {
        "transaction_isolation" => Some(false),
        "default_transaction_isolation" => Some(true),
        _ => None,
    }
}

/// An isolation level named as a parameter value (`'repeatable read'`).
fn isolation_named(value: &SqlExpr) -> RsResult<Isolation> {
    let text = match value {
        SqlExpr::Value(value) => match &value.value {
            datafusion::sql::sqlparser::ast::Value::SingleQuotedString(text) => text.clone(),
            other => other.to_string(),
        },
        other => other.to_string(),
    };
    let level = match text
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .as_str()
    {
        "read uncommitted" | "read committed" | "default" => {
            TransactionIsolationLevel::ReadCommitted
        }
        "repeatable read" => TransactionIsolationLevel::RepeatableRead,
        "serializable" => TransactionIsolationLevel::Serializable,
        other => {
            return Err(RsError::new(
                &codes::INVALID_INPUT_VALUE,
                format!("invalid value for parameter \"transaction_isolation\": \"{other}\""),
            ))
        }
    };
    Ok(requested_isolation(&[TransactionMode::IsolationLevel(level)])?.unwrap_or_default())
}

/// The types of the columns a `COPY` lists (every column when it lists
/// none), by which binary data is read.
fn copy_column_types(entry: &CatalogEntry, columns: &[String]) -> RsResult<Vec<DataType>> {
    dml::copy_column_positions(entry, columns)?
        .into_iter()
        .map(|position| {
            let column = &entry.columns[position];
            Ok(rockstream_ops::arrow_rows::arrow_type(column.sql_type()?))
        })
        .collect()
}

/// 25P02 in a failed transaction, for the commands `execute_statement`
/// does not run.
fn refuse_when_aborted(session: &GatewaySession) -> RsResult<()> {
    if session
        .transaction
        .as_ref()
        .is_some_and(|transaction| transaction.aborted)
    {
        return Err(RsError::new(
            &codes::TRANSACTION_ABORTED,
            "current transaction is aborted, commands ignored until end of transaction block",
        ));
    }
    Ok(())
}

/// The column `SHOW variable` answers in: the name in lower case (the
/// parts of a dotted name arrive joined by spaces).
pub(crate) fn show_column_name(variable: &str) -> String {
    let name = variable.to_lowercase();
    match name.strip_prefix("rockstream ") {
        Some(ours) => format!("rockstream.{ours}"),
        None => name,
    }
}

/// `SHOW`'s result: one text column.
pub(crate) fn show_schema(name: String) -> SchemaRef {
    Arc::new(ArrowSchema::new(vec![Field::new(
        name,
        DataType::Utf8,
        true,
    )]))
}

/// Whether `query` calls the function `name` (unqualified or qualified)
/// anywhere.
fn calls_function(query: &Query, name: &str) -> bool {
    let found = visit_expressions(query, |expr: &SqlExpr| match expr {
        SqlExpr::Function(function)
            if function
                .name
                .0
                .last()
                .and_then(|part| part.as_ident())
                .is_some_and(|ident| ident.value.eq_ignore_ascii_case(name)) =>
        {
            std::ops::ControlFlow::Break(())
        }
        _ => std::ops::ControlFlow::Continue(()),
    });
    found.is_break()
}

/// `FETCH [FORWARD] [n | ALL | NEXT] [FROM | IN] name`: the cursor's next
/// rows. Cursors move forward only.
fn fetch(
    session: &mut GatewaySession,
    name: &str,
    direction: &FetchDirection,
) -> RsResult<StatementResult> {
    let count = |limit: &ValueWithSpan| -> RsResult<usize> {
        match &limit.value {
            Value::Number(number, _) => number.parse::<usize>().ok(),
            _ => None,
        }
        .ok_or_else(|| {
            RsError::new(
                &codes::CURSOR_SCANS_FORWARD,
                format!("cursor \"{name}\" can only scan forward"),
            )
        })
    };
    let count = match direction {
        FetchDirection::Next => Some(1),
        FetchDirection::Forward { limit: None } => Some(1),
        FetchDirection::Count { limit } | FetchDirection::Forward { limit: Some(limit) } => {
            Some(count(limit)?)
        }
        FetchDirection::All | FetchDirection::ForwardAll => None,
        _ => {
            return Err(RsError::new(
                &codes::CURSOR_SCANS_FORWARD,
                format!("cursor \"{name}\" can only scan forward"),
            ))
        }
    };
    let cursor = session.cursors.get_mut(name).ok_or_else(|| {
        RsError::new(
            &codes::UNDEFINED_CURSOR,
            format!("cursor \"{name}\" does not exist"),
        )
    })?;
    let rows = cursor.fetch(count);
    Ok(StatementResult::Query {
        schema: rows.schema(),
        batches: vec![rows],
    })
}

/// The isolation level `modes` ask for, if any. SERIALIZABLE is refused:
/// RockStream does not detect the read/write dependencies it needs.
fn requested_isolation(modes: &[TransactionMode]) -> RsResult<Option<Isolation>> {
    let mut isolation = None;
    for mode in modes {
        if let TransactionMode::IsolationLevel(level) = mode {
            isolation = Some(match level {
                TransactionIsolationLevel::ReadUncommitted
                | TransactionIsolationLevel::ReadCommitted => Isolation::ReadCommitted,
                TransactionIsolationLevel::RepeatableRead | TransactionIsolationLevel::Snapshot => {
                    Isolation::RepeatableRead
                }
                TransactionIsolationLevel::Serializable => {
                    return Err(RsError::new(
                        &codes::ISOLATION_SERIALIZABLE_NOT_SUPPORTED,
                        "SERIALIZABLE isolation is not supported",
                    ))
                }
            });
        }
    }
    Ok(isolation)
}
