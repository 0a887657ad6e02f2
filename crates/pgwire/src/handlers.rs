//! The `pgwire` handler traits, implemented for one connection.
//!
//! `pgwire` drives the protocol state machine (message framing, portal and
//! statement storage, Sync handling, copy-in mode, ErrorResponse then
//! ReadyForQuery); these impls only forward to [`ConnectionCore`]:
//! - startup: with passwords on, the SCRAM-SHA-256 exchange first (a
//!   failure is FATAL 28P01, worded alike whatever failed); then
//!   `Backend::connect` decides on the database and its error is sent as
//!   FATAL;
//! - simple query: one response per statement (see `ConnectionCore`);
//! - extended query: Parse describes through the backend (the core is the
//!   `QueryParser`), Describe answers from that description (NoData for
//!   commands), Execute binds and runs;
//! - copy: CopyData is buffered, CopyDone parses and loads, CopyFail aborts.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use futures::{Sink, SinkExt};
use pgwire::api::auth::driver::AuthOutcome;
use pgwire::api::auth::mechanism::AuthMechanismFactory;
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata, AuthDriver,
    DefaultServerParameterProvider, StartupHandler,
};
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, Response, Tag};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, Type, DEFAULT_NAME, METADATA_DATABASE, METADATA_USER,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::data::{NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{
    Describe, Parse, ParseComplete, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use rockstream_types::{codes, RsError};

use crate::auth::authentication_failed;
use crate::connection::{parameter_types, ConnectionCore, PreparedStatement, StatementNames};
use crate::interrupt::Cancels;
use crate::types::{field_infos, pg_type};
use crate::wire_error::{fatal_error, user_error};
use crate::{Backend, Notice, PreparedStatements};

/// Every handler of one connection.
pub(crate) struct Connection<B: Backend> {
    core: Arc<ConnectionCore<B>>,
    cancels: Arc<Cancels>,
    /// Password authentication (`None`: every user is trusted).
    scram: Option<ScramAuth>,
    /// Runs `scram`'s exchange.
    auth: AuthDriver<DefaultServerParameterProvider>,
}

impl<B: Backend> Connection<B> {
    pub(crate) fn new(
        core: Arc<ConnectionCore<B>>,
        cancels: Arc<Cancels>,
        scram: Option<ScramAuth>,
    ) -> Self {
        Connection {
            core,
            cancels,
            scram,
            auth: AuthDriver::new(DefaultServerParameterProvider::default()),
        }
    }

    /// Opens the session of an authenticated (or trusted) client and
    /// completes its startup.
    async fn admit<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (user, database) = login(client);
        self.core
            .connect(&user, &database)
            .await
            .map_err(fatal_error)?;
        let (pid, secret_key) = self.cancels.register(client, self.core.interrupt.clone());
        let _ = self.core.pid.set(pid);
        client.set_pid_and_secret_key(pid, secret_key);
        let mut parameters = DefaultServerParameterProvider::default();
        parameters.server_version = crate::SERVER_VERSION.to_string();
        parameters.time_zone = "UTC".to_string();
        finish_authentication(client, &parameters).await
    }
}

impl<B: Backend> Connection<B> {
    /// The front end failed the current statement (see
    /// [`Backend::statement_failed`]).
    pub(crate) async fn statement_failed(&self) {
        self.core.statement_failed().await;
    }

    /// How long the session may now wait for its client.
    pub(crate) async fn idle_limit(&self) -> Option<crate::IdleLimit> {
        self.core.idle_limit().await
    }

    /// Ends a COPY in progress, dropping its buffered data.
    pub(crate) async fn abandon_copy(&self) {
        self.core.abandon_copy().await;
    }
}

/// Startup message user and database (PostgreSQL defaults the database to
/// the user name).
fn login<C: ClientInfo>(client: &C) -> (String, String) {
    let user = client
        .metadata()
        .get(METADATA_USER)
        .cloned()
        .unwrap_or_default();
    let database = client
        .metadata()
        .get(METADATA_DATABASE)
        .cloned()
        .unwrap_or_else(|| user.clone());
    (user, database)
}

#[async_trait]
impl<B: Backend> StartupHandler for Connection<B> {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let refused = |client: &C| fatal_error(authentication_failed(&login(client).0));
        match message {
            PgWireFrontendMessage::Startup(startup) => {
                protocol_negotiation(client, &startup).await?;
                save_startup_parameters_to_metadata(client, &startup);
                let Some(scram) = &self.scram else {
                    return self.admit(client).await;
                };
                // Asks for the SCRAM exchange; the client's answers come
                // back as password messages.
                match self.auth.begin_authentication(client, scram.create()).await {
                    Ok(_) => Ok(()),
                    Err(_) => Err(refused(client)),
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                match self.auth.advance_authentication(client, message).await {
                    Ok(AuthOutcome::InProgress) => Ok(()),
                    Ok(AuthOutcome::Authenticated { final_message, .. }) => {
                        if let Some(last) = final_message {
                            client
                                .feed(PgWireBackendMessage::Authentication(last))
                                .await?;
                        }
                        self.admit(client).await
                    }
                    Err(_) => Err(refused(client)),
                }
            }
            _ => Err(fatal_error(crate::frames::protocol_violation(
                "expected a password response during authentication".to_string(),
            ))),
        }
    }
}

#[async_trait]
impl<B: Backend> SimpleQueryHandler for Connection<B> {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let prepared = ParsedStatements {
            store: client.portal_store(),
            names: &self.core.statement_names,
        };
        let responses = self.core.execute_simple(query, &prepared).await;
        send_notices(client, self.core.take_notices().await).await?;
        Ok(responses)
    }
}

/// Sends each of `notices` as a NoticeResponse (severity NOTICE), before
/// the results they are about.
async fn send_notices<C>(client: &mut C, notices: Vec<Notice>) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for notice in notices {
        let mut info = ErrorInfo::new(
            "NOTICE".to_owned(),
            notice.sqlstate.to_owned(),
            notice.message,
        );
        info.detail = notice.detail;
        client
            .feed(PgWireBackendMessage::NoticeResponse(info.into()))
            .await?;
    }
    Ok(())
}

#[async_trait]
impl<B: Backend> QueryParser for ConnectionCore<B> {
    type Statement = PreparedStatement;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<PreparedStatement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        self.prepare(sql).await.map(Some).map_err(user_error)
    }

    fn get_parameter_types(&self, statement: &PreparedStatement) -> PgWireResult<Vec<Type>> {
        Ok(statement
            .described
            .parameter_types
            .iter()
            .map(pg_type)
            .collect())
    }

    fn get_result_schema(
        &self,
        statement: &PreparedStatement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let format = column_format.unwrap_or(&Format::UnifiedText);
        Ok(statement
            .described
            .columns
            .as_ref()
            .map(|schema| field_infos(schema, format))
            .unwrap_or_default())
    }
}

/// What a Describe answers: parameter types (statements only) and columns.
struct Description {
    parameters: Option<Vec<Type>>,
    columns: Option<SchemaRef>,
    format: Format,
}

fn describe_target<S>(store: &S, message: &Describe) -> Option<Description>
where
    S: PortalStore<Statement = PreparedStatement>,
{
    let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
    match message.target_type {
        TARGET_TYPE_BYTE_STATEMENT => match store.get_statement(name)? {
            Entry::Value(statement) => Some(Description {
                parameters: Some(parameter_types(&statement)),
                columns: statement.statement.described.columns.clone(),
                format: Format::UnifiedText,
            }),
            Entry::Empty => None,
        },
        TARGET_TYPE_BYTE_PORTAL => match store.get_portal(name)? {
            Entry::Value(portal) => Some(Description {
                parameters: None,
                columns: portal.statement.statement.described.columns.clone(),
                format: portal.result_column_format.clone(),
            }),
            Entry::Empty => None,
        },
        _ => None,
    }
}

async fn send_description<C>(client: &mut C, description: Description) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    if let Some(parameters) = description.parameters {
        let oids = parameters.iter().map(Type::oid).collect();
        client
            .feed(PgWireBackendMessage::ParameterDescription(
                ParameterDescription::new(oids),
            ))
            .await?;
    }
    let message = match description.columns {
        None => PgWireBackendMessage::NoData(NoData::new()),
        Some(schema) => {
            let fields = field_infos(&schema, &description.format);
            let fields = fields.iter().map(Into::into).collect();
            PgWireBackendMessage::RowDescription(RowDescription::new(fields))
        }
    };
    client.send(message).await?;
    Ok(())
}

#[async_trait]
impl<B: Backend> ExtendedQueryHandler for Connection<B> {
    type Statement = PreparedStatement;
    type QueryParser = ConnectionCore<B>;

    fn query_parser(&self) -> Arc<ConnectionCore<B>> {
        self.core.clone()
    }

    /// `pgwire`'s Parse, also noting the statement's name for `DEALLOCATE
    /// ALL` (the unnamed statement is replaced by every Parse anyway).
    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message
            .name
            .clone()
            .unwrap_or_else(|| DEFAULT_NAME.to_owned());
        match StoredStatement::parse(client, &message, self.core.clone()).await? {
            Some(statement) => client.portal_store().put_statement(Arc::new(statement)),
            None => client.portal_store().put_empty_statement(&name),
        }
        if message.name.is_some() {
            self.core.statement_names.remember(name);
        }
        client
            .send(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }

    /// Unlike `pgwire`'s default, a command with parameters answers NoData
    /// (not an empty RowDescription), as PostgreSQL does.
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some(description) = describe_target(client.portal_store(), &message) {
            return send_description(client, description).await;
        }
        // A cursor the session declared is a portal too.
        if message.target_type == TARGET_TYPE_BYTE_PORTAL {
            if let Some(name) = message.name.as_deref() {
                if let Some(columns) = self.core.cursor_columns(name).await {
                    let description = Description {
                        parameters: None,
                        columns: Some(columns),
                        format: Format::UnifiedText,
                    };
                    return send_description(client, description).await;
                }
            }
        }
        self._on_describe(client, message).await
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<PreparedStatement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let prepared = ParsedStatements {
            store: client.portal_store(),
            names: &self.core.statement_names,
        };
        let response = self.core.execute_portal(portal, &prepared).await;
        send_notices(client, self.core.take_notices().await).await?;
        response.map_err(user_error)
    }
}

#[async_trait]
impl<B: Backend> CopyHandler for Connection<B> {
    async fn on_copy_data<C>(&self, _client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.core
            .append_copy_data(&copy_data.data)
            .await
            .map_err(user_error)
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let rows = self.core.finish_copy().await;
        send_notices(client, self.core.take_notices().await).await?;
        let rows = rows.map_err(user_error)?;
        let tag = Tag::new(&format!("COPY {rows}"));
        client
            .send(PgWireBackendMessage::CommandComplete(tag.into()))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, _client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.core.abandon_copy().await;
        user_error(RsError::new(
            &codes::COPY_MALFORMED,
            format!("COPY from stdin failed: {}", fail.message),
        ))
    }
}

/// A connection's statement store, as [`PreparedStatements`].
struct ParsedStatements<'a, S> {
    store: &'a S,
    names: &'a StatementNames,
}

impl<S: PortalStore> PreparedStatements for ParsedStatements<'_, S> {
    fn forget(&self, name: &str) -> bool {
        self.names.forget(name);
        let existed = self.store.get_statement(name).is_some();
        self.store.rm_statement(name);
        existed
    }

    fn forget_all(&self) {
        for name in self.names.take_all() {
            self.store.rm_statement(&name);
        }
    }
}
