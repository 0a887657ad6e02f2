//! The pgwire backend: statement dispatch, reads, and the commit of a
//! session's transaction. Each kind of statement has its handler module:
//! `transactions` (BEGIN, COMMIT, savepoints), `relations` (CREATE TABLE /
//! VIEW, DROP), `alter` (ALTER TABLE), `writes` (INSERT, UPDATE, DELETE,
//! TRUNCATE), `copy`, `roles`, `databases` and `session_commands` (SET,
//! RESET, DISCARD, ...).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{
    DataType, Field, IntervalUnit, Schema as ArrowSchema, SchemaRef,
};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::ScalarValue;
use datafusion::dataframe::DataFrame;
use datafusion::execution::context::SessionContext;
use datafusion::sql::sqlparser::ast::visit_expressions;
use datafusion::sql::sqlparser::ast::{
    Declare, DeclareType, Expr as SqlExpr, FetchDirection, Ident, ObjectName, ObjectType, Query,
    Set, SetExpr, Statement, Value, ValueWithSpan,
};
use rockstream_common::Runtime;
use rockstream_control::{CatalogEntry, Database, LateRows, ObjectKind, TableLayouts};
use rockstream_ops::arrow_rows::{duration_to_interval, rows_to_batch};
use rockstream_pgwire::{Notice, PreparedStatements, StatementResult};
use rockstream_planner::{
    alias_select_items, new_context_in, normalize_query, pg_column_names, rewrite_using_joins,
    uses_bag_set_operation, TableResolver,
};
use rockstream_runtime::{RowChange, TableChange};
use rockstream_types::{codes, Row, RsError, RsResult};

use crate::ddl::ident_name;
use crate::dml::query_error;
use crate::fast_path;
use crate::memory::{size_text, MemoryLimits, StatementMemory};
use crate::providers::{decode_table_row, view_failure, ReadContext, SnapshotResolver};
use crate::sequences::{register_sequence_functions, SequenceAccess};
use crate::session::{
    restarted_map, GatewaySession, Isolation, SavepointCommand, Transaction, TransactionId,
};
use crate::session_commands;
use crate::statement_limits::{show_timeout, Stop};
use crate::streaming::Streaming;
use crate::transactions;
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
        context.register_udf(rockstream_planner::session_constant(
            "current_database",
            ScalarValue::Utf8(Some(session.namespace.clone())),
        ));
        context.register_udf(rockstream_planner::session_constant(
            rockstream_planner::USER_FUNCTION,
            ScalarValue::Utf8(Some(session.user.clone())),
        ));
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
                overlays.insert(*table_id, pending.shared_rows());
                layouts.insert(*table_id, pending.layout());
            }
        }
        // The catalog as of the snapshot's epoch: a catalog transaction's
        // objects appear with its rows (RFC 0002). A REPEATABLE READ
        // transaction reads the newest catalog, as PostgreSQL's do.
        let (published, committed) = self.database.published_with_entries(&session.namespace);
        ReadContext {
            entries: with_transaction_catalog(session, committed),
            unbuilt_views: session
                .transaction
                .as_ref()
                .map(|transaction| transaction.catalog.unbuilt_views().collect())
                .unwrap_or_default(),
            databases: self.database.namespaces(),
            database: session.namespace.clone(),
            functions: self.database.functions(&session.namespace),
            roles: self.roles_seen_by(session),
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
            watermarks: session
                .transaction
                .as_ref()
                .filter(|transaction| transaction.snapshot.is_some())
                .map_or(published.watermarks, |transaction| {
                    transaction.snapshot_watermarks.clone()
                }),
            overlays,
            layouts,
            with_row_keys,
        }
    }

    /// The roles `pg_roles` lists to `session`: the catalog's, and the
    /// user it connected as, which, with authentication off, need not be
    /// one of them (PostgreSQL's `current_user` is always a role).
    fn roles_seen_by(&self, session: &GatewaySession) -> Vec<(String, bool)> {
        let mut roles: Vec<(String, bool)> = self
            .database
            .roles()
            .into_iter()
            .map(|role| (role.name, role.login))
            .collect();
        if !roles.iter().any(|(name, _)| *name == session.user) {
            roles.push((session.user.clone(), true));
        }
        roles
    }

    /// The session's catalog: the committed one, with its transaction's
    /// DDL applied (RFC 0002).
    pub(crate) fn entries(&self, session: &GatewaySession) -> Vec<CatalogEntry> {
        with_transaction_catalog(session, self.database.entries(&session.namespace))
    }

    pub(crate) fn entry(
        &self,
        session: &GatewaySession,
        name: &str,
        kind: Option<ObjectKind>,
    ) -> RsResult<CatalogEntry> {
        let in_transaction_catalog = session
            .transaction
            .as_ref()
            .is_some_and(|transaction| !transaction.catalog.is_empty());
        let entry = if in_transaction_catalog {
            self.entries(session)
                .into_iter()
                .find(|entry| entry.name == name)
        } else {
            self.database.lookup(&session.namespace, name)
        };
        let entry = entry.ok_or_else(|| {
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
            Command::Sql(statement) => {
                self.execute_statement(session, statement, &Streaming::default(), prepared)
                    .await
            }
            Command::Streaming { statement, clauses } => {
                self.execute_statement(session, statement, clauses, prepared)
                    .await
            }
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
        clauses: &Streaming,
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
            .dispatch(session, statement, clauses, in_explicit, prepared)
            .await;
        if let (Ok(_), true, Some(before)) = (&result, in_explicit, &savepoint) {
            // Outside a block the commit checks, as the statement ends.
            if let Err(error) = crate::unique::check_statement(self, session, before).await {
                result = Err(error);
            }
        }
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
        session.statement_ended();
        result
    }

    async fn dispatch(
        &self,
        session: &mut GatewaySession,
        statement: &Statement,
        clauses: &Streaming,
        in_explicit: bool,
        prepared: &dyn PreparedStatements,
    ) -> RsResult<StatementResult> {
        let command = |tag: &str| Ok(StatementResult::command(tag));
        match statement {
            Statement::Query(query) => {
                let set_config = session_commands::set_config_calls(&session.parameters, query)?;
                let result = self.query(session, query).await?;
                session_commands::apply_set_config(session, set_config, in_explicit)?;
                Ok(result)
            }
            Statement::Explain { .. } => self.select(session, &statement.to_string()).await,
            Statement::StartTransaction { modes, .. } => {
                transactions::begin(session, modes, in_explicit)
            }
            Statement::Set(Set::SetTransaction {
                modes,
                snapshot: None,
                session: for_session,
            }) => transactions::set_transaction(session, modes, *for_session),
            Statement::Set(Set::SingleAssignment {
                variable, values, ..
            }) if transactions::isolation_parameter(variable).is_some() => {
                transactions::set_isolation_parameter(session, variable, values)
            }
            Statement::Commit { .. } => self.commit_statement(session).await,
            Statement::Rollback {
                savepoint: Some(name),
                ..
            } => transactions::savepoint(session, SavepointCommand::RollBackTo, name, "ROLLBACK"),
            Statement::Rollback { .. } => transactions::rollback(session),
            Statement::Savepoint { name } => {
                transactions::savepoint(session, SavepointCommand::Define, name, "SAVEPOINT")
            }
            Statement::ReleaseSavepoint { name } => {
                transactions::savepoint(session, SavepointCommand::Release, name, "RELEASE")
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
            Statement::CreateTable(create) => {
                self.create_table(session, create, clauses, in_explicit)
                    .await
            }
            Statement::CreateView(create) => {
                self.create_view(session, create, clauses, in_explicit)
                    .await
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
                ..
            } => {
                crate::ddl::refuse_in_transaction_block(in_explicit, "DROP DATABASE")?;
                crate::databases::drop_database(&self.database, &self.runtime, session, statement)
                    .await
            }
            Statement::CreateFunction(create) => {
                crate::ddl::refuse_in_transaction_block(in_explicit, "CREATE FUNCTION")?;
                crate::functions::create_function(&self.database, &session.namespace, create).await
            }
            Statement::DropFunction(drop) => {
                crate::ddl::refuse_in_transaction_block(in_explicit, "DROP FUNCTION")?;
                crate::functions::drop_functions(&self.database, &session.namespace, drop).await
            }
            Statement::CreateRole(create) => {
                crate::ddl::refuse_in_transaction_block(in_explicit, "CREATE ROLE")?;
                crate::roles::create_role(&self.database, create).await
            }
            Statement::AlterRole { name, operation } => {
                crate::ddl::refuse_in_transaction_block(in_explicit, "ALTER ROLE")?;
                crate::roles::alter_role(&self.database, &ident_name(name), operation).await
            }
            // No object depends on an index: CASCADE drops what RESTRICT
            // does.
            Statement::Drop {
                object_type: ObjectType::Index,
                if_exists,
                names,
                ..
            } => {
                let result = crate::alter::drop_indexes(self, session, names, *if_exists).await?;
                self.autocommit(session, in_explicit).await?;
                Ok(result)
            }
            Statement::Drop {
                object_type,
                if_exists,
                names,
                cascade,
                ..
            } => {
                self.drop_relations(
                    session,
                    object_type,
                    names,
                    *cascade,
                    *if_exists,
                    in_explicit,
                )
                .await
            }
            Statement::Insert(insert) => {
                self.insert_statement(session, statement, insert, in_explicit)
                    .await
            }
            Statement::Update(update) => self.update_statement(session, update, in_explicit).await,
            Statement::Delete(delete) => self.delete_statement(session, delete, in_explicit).await,
            Statement::Truncate(truncate) => {
                self.truncate_statement(session, truncate, in_explicit)
                    .await
            }
            Statement::Copy {
                source,
                to,
                target,
                options,
                legacy_options,
                ..
            } => {
                self.copy_statement(session, source, *to, target, options, legacy_options)
                    .await
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
            Statement::CreateIndex(create) => {
                if create.concurrently {
                    crate::ddl::refuse_in_transaction_block(
                        in_explicit,
                        "CREATE INDEX CONCURRENTLY",
                    )?;
                }
                let result = crate::alter::create_index(self, session, create).await?;
                self.autocommit(session, in_explicit).await?;
                Ok(result)
            }
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

    /// A query's rows, under PostgreSQL's column names.
    pub(crate) async fn query(
        &self,
        session: &GatewaySession,
        query: &Query,
    ) -> RsResult<StatementResult> {
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
    pub(crate) async fn populate(
        &self,
        session: &GatewaySession,
        name: &str,
        query: &str,
    ) -> RsResult<()> {
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
            transaction.snapshot_watermarks = published.watermarks;
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

    /// Registers in `context` the functions that read the session's
    /// parameters and numbers, when `query` calls them (those naming it,
    /// `current_database()` and `current_user`, every statement context
    /// has).
    pub(crate) fn register_session_functions(
        &self,
        context: &SessionContext,
        session: &GatewaySession,
        query: &Query,
    ) {
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
                "statement={} transaction={} total={} in_use_bytes={}",
                size_text(limits.statement_bytes),
                size_text(limits.transaction_bytes),
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
            // Dropped objects whose state is not yet compacted away, and
            // staged rows still being deleted.
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
            .and_then(|table| table.get(&lookup.key));
        let row = match pending {
            Some((_, current)) => current.clone(),
            None => {
                let snapshot = transaction
                    .and_then(|transaction| transaction.snapshot.clone())
                    .unwrap_or_else(|| self.database.engine().published().snapshot);
                match snapshot.table_row(lookup.entry.id, &lookup.key).await? {
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
            let late_rows = self.commit(&session.namespace, transaction).await?;
            tell_late_rows(session, late_rows);
        }
        Ok(())
    }

    /// Commits `transaction`; returns the rows it dropped as late, per
    /// table (RFC 0013).
    pub(crate) async fn commit(
        &self,
        namespace: &str,
        transaction: Transaction,
    ) -> RsResult<LateRows> {
        // Values its rows hold are never handed out again, even if the
        // server stops right after the commit.
        self.database.persist_sequences().await?;
        if transaction.staged.is_some() {
            // (Its late rows are counted in `rs_watermarks`, not told.)
            crate::staging::commit(self, namespace, transaction).await?;
            return Ok(Vec::new());
        }
        let restarted: Vec<(rockstream_types::ObjectId, i128)> =
            restarted_map(&transaction.restarted)
                .iter()
                .map(|(id, next)| (*id, *next))
                .collect();
        let layouts: TableLayouts = transaction
            .tables
            .iter()
            .map(|(table_id, pending)| (*table_id, pending.layout()))
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
                    table_name: pending.name.clone(),
                    // The catalog's, attached under its lock at commit.
                    indexes: Vec::new(),
                    watermark: None,
                    primary_key: Vec::new(),
                    rows: pending
                        .into_rows()
                        .into_iter()
                        .filter(|(_, (old, new))| old != new || (rewritten && old.is_some()))
                        .map(|(key, (old, new))| RowChange { key, old, new })
                        .collect(),
                }
            })
            .filter(|change| !change.rows.is_empty())
            .collect();
        let late_rows = self
            .database
            .commit_transaction(namespace, transaction.catalog, changes, &layouts)
            .await?;
        // Past the commit point: the transaction committed, whatever
        // happens to the restart. If its write fails the sequences go on
        // from their old, higher values, which repeats nothing.
        if let Err(error) = self.database.restart_sequences(namespace, &restarted).await {
            tracing::warn!(%error, "TRUNCATE … RESTART IDENTITY committed, but its sequences could not be restarted");
        }
        Ok(late_rows)
    }
}

/// A NOTICE per table whose rows a commit dropped as late (RFC 0013).
pub(crate) fn tell_late_rows(session: &mut GatewaySession, late_rows: LateRows) {
    for (table, rows) in late_rows {
        let (count, were) = match rows {
            1 => ("1 row".to_string(), "was"),
            rows => (format!("{rows} rows"), "were"),
        };
        session.notices.push(Notice {
            sqlstate: "00000",
            message: format!(
                "{count} of table \"{table}\" {were} below its watermark and dropped as late"
            ),
            detail: None,
        });
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

/// The schema of `frame`'s rows: its analyzed plan's (analyzer rules may
/// change result types).
pub(crate) fn analyzed_schema(frame: &DataFrame) -> RsResult<SchemaRef> {
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
pub(crate) fn refuse_set_config(query: &Query, statement: &str) -> RsResult<()> {
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

/// Gives a query result PostgreSQL's column names.
pub(crate) fn rename_columns(
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
        .map(|batch| rebatch(&renamed, batch.columns().to_vec(), batch.num_rows()))
        .collect::<RsResult<Vec<_>>>()?;
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
    rockstream_planner::rewrite_time_windows(&mut normalized)?;
    rewrite_using_joins(context, &mut normalized)
        .await
        .map_err(query_error)?;
    Ok(normalized)
}

/// Whether DataFusion refused a select list for naming two columns alike
/// (also a column `t.id` beside an expression named `id`, as PostgreSQL
/// names `(SELECT u.id …)`).
pub(crate) fn repeats_a_name(message: &str) -> bool {
    message.contains("require unique expression names")
        || message.contains("and unqualified field name") && message.contains("would be ambiguous")
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
pub(crate) fn as_pg_result(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> RsResult<StatementResult> {
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
            rebatch(&converted, columns, batch.num_rows())
        })
        .collect::<RsResult<Vec<_>>>()?;
    Ok(StatementResult::Query {
        schema: converted,
        batches,
    })
}

/// `columns` of `rows` rows as a batch of `schema`, also without any column
/// (`SELECT FROM t` answers rows of no columns, as PostgreSQL does).
fn rebatch(schema: &SchemaRef, columns: Vec<ArrayRef>, rows: usize) -> RsResult<RecordBatch> {
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options)
        .map_err(rockstream_ops::arrow_rows::arrow_error)
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

/// `committed` (a namespace's catalog) with the DDL of `session`'s
/// transaction applied (RFC 0002).
fn with_transaction_catalog(
    session: &GatewaySession,
    committed: Vec<CatalogEntry>,
) -> Vec<CatalogEntry> {
    match &session.transaction {
        Some(transaction) if !transaction.catalog.is_empty() => {
            transaction.catalog.overlay(&session.namespace, committed)
        }
        _ => committed,
    }
}
