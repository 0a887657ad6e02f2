//! The per-connection state and the backend calls behind every handler.
//!
//! [`ConnectionCore`] owns the connection's backend session and, while a
//! `COPY ... FROM STDIN` runs, its buffered data. Both sit behind one async
//! mutex so that the handlers `pgwire` calls (startup, simple query,
//! extended query, copy; see `handlers`) see one consistent state. The core
//! also turns [`StatementResult`]s into `pgwire` responses.
//!
//! Invariants:
//! - `session` is `Some` from a successful startup until `disconnect`;
//! - `copy` is `Some` exactly while the client is in copy-in mode, and its
//!   buffer never exceeds [`COPY_BUFFER_BYTES_MAX`];
//! - a simple-query string stops at the first error or COPY; results after
//!   it are dropped (and logged), as PostgreSQL never runs them before the
//!   COPY data arrives.

use std::any::Any;
use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use futures::{stream, FutureExt};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::results::{CopyResponse, FieldFormat, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::StoredStatement;
use pgwire::api::Type;
use pgwire::error::{PgWireResult, SEVERITY_ERROR};
use pgwire::messages::copy::CopyData;
use rockstream_types::{codes, RsError};
use tokio::sync::Mutex;

use crate::copy::{CopyParser, COPY_BUFFER_BYTES_MAX, COPY_PART_BYTES};
use crate::copy_out::copy_out_lines;
use crate::encode::encode_batches;
use crate::interrupt::Running;
use crate::params::decode_parameters;
use crate::ready_status::SessionStatus;
use crate::types::{field_infos, pg_type};
use crate::wire_error::error_info;
use crate::{
    Backend, CopyFormat, CopyPart, CopyTarget, Described, IdleLimit, Interrupt, PreparedStatements,
    StatementResult,
};

/// A statement prepared by Parse: its text and what the backend said about it.
#[derive(Debug, Clone)]
pub(crate) struct PreparedStatement {
    pub(crate) sql: String,
    pub(crate) described: Described,
}

/// What parsing the first part of a COPY's data held found.
enum Part {
    /// Complete rows (perhaps none: a header, an end marker).
    Parsed,
    /// No complete row, and more data held than the part read.
    RowLonger,
    /// No complete row in all the data held.
    RowIncomplete,
}

/// A `COPY ... FROM STDIN` in progress: its data not yet parsed (at most a
/// part and an incomplete row), the parser, and what was loaded.
struct PendingCopy {
    target: CopyTarget,
    parser: CopyParser,
    data: Vec<u8>,
    /// Parse again once this much data is held: a part, or twice what the
    /// last try left (a row longer than a part is not re-read per message).
    parse_at: usize,
    /// Rows the backend loaded so far.
    loaded: u64,
    /// A part has been handed to the backend.
    started: bool,
    /// The COPY runs (a cancel request stops it) from its statement to its
    /// end, parts and the waits before and between them alike.
    _running: Running,
}

impl PendingCopy {
    /// Buffers `chunk`, refusing to grow past `limit_bytes`.
    fn append(&mut self, chunk: &[u8], limit_bytes: usize) -> Result<(), RsError> {
        if self.data.len().saturating_add(chunk.len()) > limit_bytes {
            return Err(RsError::new(
                &codes::WRITE_BUFFER_FULL,
                format!(
                    "COPY {}: a row of the data exceeds the {limit_bytes}-byte limit",
                    self.target.table
                ),
            ));
        }
        self.data.extend_from_slice(chunk);
        Ok(())
    }
}

struct ConnectionState<S> {
    session: Option<S>,
    copy: Option<PendingCopy>,
}

impl<S> ConnectionState<S> {
    fn session_mut(&mut self) -> Result<&mut S, RsError> {
        self.session
            .as_mut()
            .ok_or_else(|| RsError::internal("no backend session: startup has not completed"))
    }

    /// Enters copy-in mode and returns the CopyInResponse to send.
    /// An error (impossible options) instead when the COPY cannot begin.
    /// The COPY statement's `running` lasts until the COPY ends: a cancel
    /// request while the client has yet to send data stops it too.
    fn start_copy(&mut self, target: CopyTarget, running: Running) -> Result<Response, RsError> {
        // The client writes binary tuples only when told the format is
        // binary (psycopg 3 picks its writer by it).
        let (format, columns) = match target.format {
            CopyFormat::Binary => (1, target.column_types.len()),
            _ => (0, target.columns.len()),
        };
        let parser = CopyParser::new(&target)?;
        self.copy = Some(PendingCopy {
            target,
            parser,
            data: Vec::new(),
            parse_at: COPY_PART_BYTES,
            loaded: 0,
            started: false,
            _running: running,
        });
        Ok(Response::CopyIn(CopyResponse::new(
            format,
            columns,
            stream::empty::<PgWireResult<CopyData>>(),
        )))
    }
}

/// One connection's backend and state, shared by all its handlers.
pub(crate) struct ConnectionCore<B: Backend> {
    pub(crate) backend: Arc<B>,
    state: Mutex<ConnectionState<B::Session>>,
    /// Raised by a cancel request for this connection.
    pub(crate) interrupt: Interrupt,
    /// The process id cancel requests name, once startup assigned it.
    pub(crate) pid: OnceLock<i32>,
    /// The names of the statements Parse prepared (`pgwire`'s store cannot
    /// list them), for `DEALLOCATE ALL`; a closed one may linger.
    pub(crate) statement_names: StatementNames,
    /// The session's transaction state as of the last backend call, which
    /// the connection's ReadyForQuery messages report.
    pub(crate) status: SessionStatus,
}

/// The names Parse stored statements under on one connection.
#[derive(Debug, Default)]
pub(crate) struct StatementNames(std::sync::Mutex<BTreeSet<String>>);

impl StatementNames {
    fn names(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn remember(&self, name: String) {
        self.names().insert(name);
    }

    pub(crate) fn forget(&self, name: &str) {
        self.names().remove(name);
    }

    /// Every name remembered, forgetting them.
    pub(crate) fn take_all(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.names())
    }
}

impl<B: Backend> ConnectionCore<B> {
    pub(crate) fn new(backend: Arc<B>) -> Self {
        ConnectionCore {
            backend,
            state: Mutex::new(ConnectionState {
                session: None,
                copy: None,
            }),
            interrupt: Interrupt::default(),
            pid: OnceLock::new(),
            statement_names: Default::default(),
            status: SessionStatus::default(),
        }
    }

    /// Opens the backend session for this connection.
    pub(crate) async fn connect(&self, user: &str, database: &str) -> Result<(), RsError> {
        let session = self
            .backend
            .connect(user, database, self.interrupt.clone())
            .await?;
        let previous = self.state.lock().await.session.replace(session);
        if let Some(previous) = previous {
            tracing::warn!("a second startup replaced the connection's session");
            self.backend.disconnect(previous).await;
        }
        Ok(())
    }

    /// Hands the session back to the backend; idempotent.
    pub(crate) async fn disconnect(&self) {
        let session = {
            let mut state = self.state.lock().await;
            state.copy = None;
            state.session.take()
        };
        if let Some(session) = session {
            self.backend.disconnect(session).await;
        }
    }

    /// The NOTICE messages the backend left for the client, taken.
    pub(crate) async fn take_notices(&self) -> Vec<crate::Notice> {
        let mut state = self.state.lock().await;
        match state.session_mut() {
            Ok(session) => self.backend.take_notices(session),
            Err(_) => Vec::new(),
        }
    }

    /// Simple protocol: runs a query string, one response per statement.
    pub(crate) async fn execute_simple(
        &self,
        query: &str,
        prepared: &dyn PreparedStatements,
    ) -> Vec<Response> {
        let mut state = self.state.lock().await;
        let mut running = Some(self.interrupt.begin());
        let results = match state.session_mut() {
            Ok(session) => {
                let call = self.backend.execute(session, query, prepared);
                match AssertUnwindSafe(call).catch_unwind().await {
                    Ok(results) => results,
                    Err(panic) => vec![Err(self.panicked(session, panic).await)],
                }
            }
            Err(error) => vec![Err(error)],
        };
        let total = results.len();
        let mut responses = Vec::with_capacity(total);
        for result in results {
            let (response, is_last) = match result {
                Ok(result) => {
                    // A COPY takes the client's next messages: it ends the
                    // string's statements.
                    let copy = matches!(result, StatementResult::CopyIn(_));
                    let response = match result {
                        StatementResult::CopyIn(target) => {
                            let running = running.take().unwrap_or_else(|| self.interrupt.begin());
                            state.start_copy(target, running)
                        }
                        result => statement_response(result, &Format::UnifiedText),
                    };
                    if response.is_err() {
                        // Its rows could not be sent (or its COPY could not
                        // begin): the statement failed.
                        if let Ok(session) = state.session_mut() {
                            self.backend.statement_failed(session).await;
                        }
                    }
                    (response, copy)
                }
                Err(error) => (Err(error), true),
            };
            let stops = is_last || response.is_err();
            responses.push(response.unwrap_or_else(|error| {
                Response::Error(Box::new(error_info(&error, SEVERITY_ERROR)))
            }));
            if stops {
                break;
            }
        }
        if responses.len() < total {
            tracing::warn!(
                dropped = total - responses.len(),
                "statements after an error or COPY in one query string were dropped"
            );
        }
        if responses.is_empty() {
            responses.push(Response::EmptyQuery);
        }
        self.report_state(&state);
        responses
    }

    /// Extended protocol Parse: asks the backend to describe the statement.
    pub(crate) async fn prepare(&self, sql: &str) -> Result<PreparedStatement, RsError> {
        let mut state = self.state.lock().await;
        let session = state.session_mut()?;
        let call = self.backend.describe(session, sql);
        let described = match AssertUnwindSafe(call).catch_unwind().await {
            Ok(described) => described?,
            Err(panic) => return Err(self.panicked(session, panic).await),
        };
        Ok(PreparedStatement {
            sql: sql.to_owned(),
            described,
        })
    }

    /// Extended protocol Execute of a bound portal.
    pub(crate) async fn execute_portal(
        &self,
        portal: &Portal<PreparedStatement>,
        prepared: &dyn PreparedStatements,
    ) -> Result<Response, RsError> {
        let statement = &portal.statement;
        let types = parameter_types(statement);
        let parameters = decode_parameters(&portal.parameters, &portal.parameter_format, &types)?;
        let mut state = self.state.lock().await;
        let session = state.session_mut()?;
        let running = self.interrupt.begin();
        let call = self.backend.execute_with_params(
            session,
            &statement.statement.sql,
            &statement.statement.described,
            &parameters,
            prepared,
        );
        let result = match AssertUnwindSafe(call).catch_unwind().await {
            Ok(result) => result,
            Err(panic) => Err(self.panicked(session, panic).await),
        };
        let response = match result {
            Ok(result) => {
                let response = match result {
                    StatementResult::CopyIn(target) => state.start_copy(target, running),
                    result => statement_response(result, &portal.result_column_format),
                };
                if response.is_err() {
                    // Its rows could not be sent: the statement failed.
                    if let Ok(session) = state.session_mut() {
                        self.backend.statement_failed(session).await;
                    }
                }
                response
            }
            Err(error) => Err(error),
        };
        self.report_state(&state);
        response
    }

    /// Takes one CopyData message: buffers it, and once a part's worth is
    /// held, hands the complete rows to the backend. Any error ends the
    /// COPY (the caller fails the statement).
    pub(crate) async fn append_copy_data(&self, chunk: &[u8]) -> Result<(), RsError> {
        let mut state = self.state.lock().await;
        let appended = self.take_copy_data(&mut state, chunk).await;
        if appended.is_err() {
            state.copy = None;
        }
        appended
    }

    async fn take_copy_data(
        &self,
        state: &mut ConnectionState<B::Session>,
        chunk: &[u8],
    ) -> Result<(), RsError> {
        let copy = state
            .copy
            .as_mut()
            .ok_or_else(|| RsError::internal("CopyData outside COPY FROM STDIN"))?;
        // Complete rows leave before the limit is judged: it bounds one row.
        let full = copy.data.len().saturating_add(chunk.len()) > COPY_BUFFER_BYTES_MAX;
        if copy.data.len() + chunk.len() < copy.parse_at && !full {
            copy.data.extend_from_slice(chunk);
            return Ok(());
        }
        if full {
            self.load_copy_parts(state, true).await?;
        }
        let copy = state
            .copy
            .as_mut()
            .ok_or_else(|| RsError::internal("CopyData outside COPY FROM STDIN"))?;
        copy.append(chunk, COPY_BUFFER_BYTES_MAX)?;
        self.load_copy_parts(state, false).await
    }

    /// Hands the backend the complete rows held, a part (about
    /// [`COPY_PART_BYTES`] of data) at a time, however large the message
    /// that brought them: the backend bounds what it holds per part.
    /// `all`: take every complete row held, even less than a part (the
    /// buffer is full, or the data ended).
    async fn load_copy_parts(
        &self,
        state: &mut ConnectionState<B::Session>,
        all: bool,
    ) -> Result<(), RsError> {
        loop {
            let copy = state
                .copy
                .as_mut()
                .ok_or_else(|| RsError::internal("CopyData outside COPY FROM STDIN"))?;
            if copy.data.is_empty() || (copy.data.len() < copy.parse_at && !all) {
                return Ok(());
            }
            let (rows, part) = Self::parse_copy_part(copy)?;
            match part {
                Part::Parsed if rows.is_empty() => {}
                Part::Parsed => {
                    self.load_copy_part(state, rows, false).await?;
                }
                // A row longer than the part: read a larger one.
                Part::RowLonger => {}
                // A row longer than all that is held: wait for more.
                Part::RowIncomplete => return Ok(()),
            }
        }
    }

    /// Takes the complete rows of the first part of the data held. A row
    /// longer than a part is read again once a part twice as large is
    /// held (not once per message).
    fn parse_copy_part(
        copy: &mut PendingCopy,
    ) -> Result<(Vec<crate::copy::CopyRow>, Part), RsError> {
        let window = copy.data.len().min(copy.parse_at.max(COPY_PART_BYTES));
        let (rows, taken) = copy.parser.parse(&copy.data[..window], false)?;
        copy.data.drain(..taken);
        let part = if taken > 0 {
            copy.parse_at = COPY_PART_BYTES;
            Part::Parsed
        } else {
            copy.parse_at = window.saturating_mul(2).min(COPY_BUFFER_BYTES_MAX);
            if window < copy.data.len() {
                Part::RowLonger
            } else {
                Part::RowIncomplete
            }
        };
        Ok((rows, part))
    }

    /// CopyDone: loads the rest of the data (the backend commits the COPY
    /// outside a transaction block); returns rows loaded.
    pub(crate) async fn finish_copy(&self) -> Result<u64, RsError> {
        let mut state = self.state.lock().await;
        // Its complete rows a part at a time, then what remains (at most a
        // part, or one long row) as the last.
        let loaded = match self.load_copy_parts(&mut state, true).await {
            Ok(()) => self.finish_copy_data(&mut state).await,
            Err(error) => Err(error),
        };
        state.copy = None;
        loaded
    }

    async fn finish_copy_data(
        &self,
        state: &mut ConnectionState<B::Session>,
    ) -> Result<u64, RsError> {
        let copy = state
            .copy
            .as_mut()
            .ok_or_else(|| RsError::internal("CopyDone outside COPY FROM STDIN"))?;
        let (rows, _) = copy.parser.parse(&copy.data, true)?;
        copy.data = Vec::new();
        self.load_copy_part(state, rows, true).await
    }

    /// Hands a part's rows to the backend; returns the rows loaded so far.
    async fn load_copy_part(
        &self,
        state: &mut ConnectionState<B::Session>,
        rows: Vec<Vec<Option<String>>>,
        last: bool,
    ) -> Result<u64, RsError> {
        let ConnectionState { session, copy } = state;
        let copy = copy
            .as_mut()
            .ok_or_else(|| RsError::internal("a COPY part outside COPY FROM STDIN"))?;
        let session = session
            .as_mut()
            .ok_or_else(|| RsError::internal("no backend session: startup has not completed"))?;
        let part = CopyPart {
            first: !copy.started,
            last,
        };
        copy.started = true;
        let call = self.backend.copy_in(session, &copy.target, rows, part);
        let loaded = match AssertUnwindSafe(call).catch_unwind().await {
            Ok(loaded) => loaded,
            Err(panic) => Err(self.panicked(session, panic).await),
        };
        if last {
            self.status.set(self.backend.transaction_state(session));
        }
        copy.loaded += loaded?;
        Ok(copy.loaded)
    }

    /// Notes the session's transaction state for the ReadyForQuery that
    /// follows (see [`crate::ready_status`]).
    fn report_state(&self, state: &ConnectionState<B::Session>) {
        if let Some(session) = state.session.as_ref() {
            self.status.set(self.backend.transaction_state(session));
        }
    }

    /// A backend call panicked (a bug): its statement fails with an
    /// internal error, as if the backend had failed it, and the connection
    /// goes on instead of ending with the panic.
    async fn panicked(&self, session: &mut B::Session, panic: Box<dyn Any + Send>) -> RsError {
        let message = panic
            .downcast_ref::<&str>()
            .map(|text| text.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_string());
        tracing::error!(%message, "a statement panicked; it failed and the session goes on");
        self.backend.statement_failed(session).await;
        RsError::internal(format!(
            "the statement hit a bug and was stopped: {message}"
        ))
    }

    /// The front end failed the current statement (see
    /// [`Backend::statement_failed`]).
    pub(crate) async fn statement_failed(&self) {
        let mut state = self.state.lock().await;
        // A COPY the front end failed ends, its data with it.
        state.copy = None;
        if let Some(session) = state.session.as_mut() {
            self.backend.statement_failed(session).await;
        }
        self.report_state(&state);
    }

    /// The columns of the session's cursor `name`, if it has one open.
    pub(crate) async fn cursor_columns(&self, name: &str) -> Option<SchemaRef> {
        let state = self.state.lock().await;
        let session = state.session.as_ref()?;
        self.backend.cursor_columns(session, name)
    }

    /// How long the session may now wait for its client
    /// ([`Backend::idle_limit`]).
    pub(crate) async fn idle_limit(&self) -> Option<IdleLimit> {
        let state = self.state.lock().await;
        let session = state.session.as_ref()?;
        self.backend.idle_limit(session)
    }

    /// CopyFail (or an error elsewhere): forgets the buffered data.
    pub(crate) async fn abandon_copy(&self) {
        self.state.lock().await.copy = None;
    }
}

/// The type of each parameter: the client's (from Parse) where it gave
/// one, else the backend's.
pub(crate) fn parameter_types(statement: &StoredStatement<PreparedStatement>) -> Vec<Type> {
    let described = &statement.statement.described.parameter_types;
    let count = statement.parameter_types.len().max(described.len());
    (0..count)
        .map(|index| {
            statement
                .parameter_types
                .get(index)
                .cloned()
                .flatten()
                .or_else(|| described.get(index).map(pg_type))
                .unwrap_or(Type::UNKNOWN)
        })
        .collect()
}

/// A non-COPY result as a `pgwire` response, rows in the requested formats.
fn statement_response(result: StatementResult, format: &Format) -> Result<Response, RsError> {
    match result {
        StatementResult::Query { schema, batches } => query_response(&schema, &batches, format),
        StatementResult::Returning {
            command,
            schema,
            batches,
        } => {
            let mut response = query_response(&schema, &batches, format)?;
            if let Response::Query(rows) = &mut response {
                rows.set_command_tag(&command);
            }
            Ok(response)
        }
        StatementResult::Command { tag } => Ok(command_response(tag)),
        StatementResult::CopyIn(_) => Err(RsError::internal("COPY result reached the row encoder")),
        StatementResult::CopyOut {
            format,
            schema,
            batches,
        } => {
            let lines = copy_out_lines(&format, &schema, &batches)?;
            let data = lines.into_iter().map(|line| Ok(CopyData::new(line)));
            Ok(Response::CopyOut(CopyResponse::new(
                0,
                schema.fields().len(),
                stream::iter(data),
            )))
        }
    }
}

fn query_response(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    format: &Format,
) -> Result<Response, RsError> {
    let width = schema.fields().len();
    if let Some(batch) = batches.iter().find(|batch| batch.num_columns() != width) {
        return Err(RsError::internal(format!(
            "a result batch has {} columns but its schema has {width}",
            batch.num_columns()
        )));
    }
    let fields = Arc::new(field_infos(schema, format));
    let formats: Vec<FieldFormat> = fields.iter().map(FieldInfo::format).collect();
    let rows = encode_batches(batches, &formats)?;
    let rows = stream::iter(rows.into_iter().map(Ok));
    Ok(Response::Query(QueryResponse::new(fields, rows)))
}

/// A command tag; transaction control tags also move the transaction status
/// reported in ReadyForQuery.
fn command_response(tag: String) -> Response {
    let tag_value = Tag::new(&tag);
    match tag.as_str() {
        "BEGIN" | "START TRANSACTION" => Response::TransactionStart(tag_value),
        "COMMIT" | "ROLLBACK" => Response::TransactionEnd(tag_value),
        _ => Response::Execution(tag_value),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Goal: results become the responses PostgreSQL sends, and the parameter
    //! types prefer what the client declared.
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn transaction_tags_move_transaction_status() {
        assert!(matches!(
            command_response("BEGIN".into()),
            Response::TransactionStart(_)
        ));
        assert!(matches!(
            command_response("COMMIT".into()),
            Response::TransactionEnd(_)
        ));
        assert!(matches!(
            command_response("ROLLBACK".into()),
            Response::TransactionEnd(_)
        ));
        assert!(matches!(
            command_response("INSERT 0 3".into()),
            Response::Execution(_)
        ));
    }

    #[test]
    fn zero_batches_still_describe_rows() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, true)]));
        let response = query_response(&schema, &[], &Format::UnifiedBinary).unwrap();
        let Response::Query(query) = response else {
            panic!("expected a query response");
        };
        assert_eq!(query.row_schema().len(), 1);
        assert_eq!(query.row_schema()[0].format(), FieldFormat::Binary);
    }

    #[test]
    fn batch_schema_mismatch_is_internal_error() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, true)]));
        let batch = RecordBatch::new_empty(Arc::new(Schema::empty()));
        let error = query_response(&schema, &[batch], &Format::UnifiedText).unwrap_err();
        assert_eq!(error.code.number, codes::INTERNAL.number);
    }

    #[test]
    fn copy_buffer_refuses_to_grow_past_its_limit() {
        let target = CopyTarget::text("t", vec![]);
        let mut copy = PendingCopy {
            parser: CopyParser::new(&target).unwrap(),
            target,
            data: Vec::new(),
            parse_at: COPY_PART_BYTES,
            loaded: 0,
            started: false,
            _running: Interrupt::default().begin(),
        };
        copy.append(b"12345", 8).unwrap();
        let error = copy.append(b"6789", 8).unwrap_err();
        assert_eq!(error.code.sqlstate, "54000");
        assert!(error.message.contains("8-byte limit"), "{}", error.message);
        assert_eq!(copy.data, b"12345");
        copy.append(b"678", 8).unwrap();
    }

    #[test]
    fn client_declared_parameter_types_win() {
        let statement = StoredStatement::new(
            "s".to_owned(),
            PreparedStatement {
                sql: "SELECT $1, $2".to_owned(),
                described: Described {
                    parameter_types: vec![DataType::Int64, DataType::Utf8],
                    columns: None,
                    parsed: None,
                },
            },
            vec![Some(Type::INT4), None],
        );
        assert_eq!(parameter_types(&statement), vec![Type::INT4, Type::TEXT]);
    }
}
