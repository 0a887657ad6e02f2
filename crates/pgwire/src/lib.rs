//! RockStream's PostgreSQL wire front end.
//!
//! [`serve`] accepts TCP connections and speaks the PostgreSQL v3 protocol
//! (through the `pgwire` crate) on each of them: startup (trusting every
//! user, or with SCRAM-SHA-256 passwords; over TLS when the client asks and
//! a certificate is configured), the simple query protocol, the extended protocol
//! (Parse/Bind/Describe/Execute/Sync), `COPY ... FROM STDIN` in text and
//! CSV format, and cancel requests. Everything that knows SQL lives behind
//! the [`Backend`] trait; this crate only translates between wire messages
//! and that trait.
//!
//! Layout:
//! - `server`: the accept loop and one task per connection;
//! - `auth`: password verifiers, SCRAM, TLS;
//! - `frames`: checks each client message whole before `pgwire` decodes it;
//! - `connection`: one connection's backend session and COPY buffer;
//! - `handlers`: the `pgwire` handler traits, forwarding to `connection`;
//! - `interrupt`: cancel requests, by process id and secret key;
//! - `types`: Arrow type → PostgreSQL type OID;
//! - `text`: PostgreSQL's exact text output for floats, numerics, dates,
//!   timestamps and intervals;
//! - `encode`: Arrow record batches → `DataRow`s in text or binary format;
//! - `params`: Bind parameters (text or binary) → text;
//! - `copy`: the COPY text/CSV data parser;
//! - `wire_error`: [`RsError`] → PostgreSQL `ErrorResponse`.
//!
//! Invariants kept:
//! - every error the client sees carries an `RS-XXXX` code, its SQLSTATE and
//!   its `next_steps` as the hint;
//! - after an error the rest of a simple-query string is not processed, and
//!   the extended protocol discards messages until Sync (PostgreSQL rules);
//!   an error this crate raises itself fails the backend's statement too
//!   ([`Backend::statement_failed`]);
//! - `pgwire` decodes only messages whose layout was checked whole
//!   (`frames`);
//! - a connection owns exactly one backend session, created at startup and
//!   handed back to [`Backend::disconnect`] however the connection ends, even
//!   if its task panics;
//! - buffered COPY data never exceeds [`COPY_BUFFER_BYTES_MAX`].

mod auth;
mod coalesce;
mod connection;
mod copy;
mod copy_out;
mod encode;
mod frames;
mod handlers;
mod interrupt;
mod params;
mod ready_status;
mod server;
mod types;
mod wire_error;

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use rockstream_types::RsError;

pub use auth::{is_scram_verifier, scram_verifier, tls_acceptor, Passwords, Security};
pub use copy::{parse_copy_data, CopyParser, COPY_BUFFER_BYTES_MAX, COPY_PART_BYTES};
pub use interrupt::Interrupt;
pub use server::serve;
pub use types::{
    is_int2vector, pg_type, FIELD_COLUMN_NUMBER, FIELD_TABLE_OID, FIELD_VARCHAR_LENGTH,
};

/// What one executed statement produced.
#[derive(Debug, Clone)]
pub enum StatementResult {
    /// Rows: the schema gives column names and Arrow types (mapped to PG type OIDs).
    Query {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    /// Rows a writing command returns (`INSERT … RETURNING`): like
    /// [`StatementResult::Query`], completed with `command` and the row
    /// count as its tag (`INSERT 0` → `INSERT 0 3`).
    Returning {
        command: String,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    /// A command tag such as "INSERT 0 3", "CREATE TABLE", "BEGIN", "SET".
    /// The tags "BEGIN" and "START TRANSACTION" (enter) and "COMMIT" and
    /// "ROLLBACK" (leave) also set the transaction status that ReadyForQuery
    /// reports; an error inside a transaction marks it failed.
    Command { tag: String },
    /// COPY ... FROM STDIN: the front end switches to copy-in mode, collects
    /// and parses the data, then calls [`Backend::copy_in`].
    CopyIn(CopyTarget),
    /// COPY ... TO STDOUT: these rows, written in the target's format
    /// (its `table` and `columns` are not used).
    CopyOut {
        format: CopyTarget,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
}

impl StatementResult {
    /// A command's completion, `tag` as in [`StatementResult::Command`].
    pub fn command(tag: &str) -> StatementResult {
        StatementResult::Command {
            tag: tag.to_string(),
        }
    }
}

/// The statements a client prepared with Parse on its connection, which
/// `DEALLOCATE` forgets.
pub trait PreparedStatements: Send + Sync {
    /// Forgets the statement prepared as `name`; whether there was one.
    fn forget(&self, name: &str) -> bool;
    /// Forgets every named statement (`DEALLOCATE ALL`).
    fn forget_all(&self);
}

/// The data format of a `COPY ... FROM STDIN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    /// PostgreSQL's text format: tab-separated, `\N` for NULL, backslash escapes.
    Text,
    /// CSV: quoted fields, an empty unquoted field for NULL.
    Csv,
    /// PostgreSQL's binary format (`FORMAT binary`, asyncpg's
    /// `copy_records_to_table`): each field in its type's `*send` form,
    /// read by the types of [`CopyTarget::column_types`]. `COPY ... FROM`
    /// only.
    Binary,
}

/// Which part of a COPY's rows a [`Backend::copy_in`] call hands over (one
/// part may be both the first and the last).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyPart {
    pub first: bool,
    pub last: bool,
}

/// Where and how COPY data is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyTarget {
    pub table: String,
    /// Target column names, in the order the data lists them.
    pub columns: Vec<String>,
    pub format: CopyFormat,
    pub delimiter: u8,
    /// The raw field text that means NULL (`\N` for text, empty for CSV).
    pub null_string: String,
    /// Skip the first line (column names).
    pub header: bool,
    /// CSV only.
    pub quote: u8,
    /// CSV only.
    pub escape: u8,
    /// The types of the columns the data lists, in order: how binary
    /// fields are read (unused by the text formats).
    pub column_types: Vec<DataType>,
    /// The backend's identity of the table as the statement found it,
    /// which every part of the data checks: a table dropped and created
    /// again under the same name while the data streams is not loaded.
    pub table_id: Option<u128>,
}

impl CopyTarget {
    /// PostgreSQL's defaults for `FORMAT text`.
    pub fn text(table: impl Into<String>, columns: Vec<String>) -> Self {
        CopyTarget {
            table: table.into(),
            columns,
            format: CopyFormat::Text,
            delimiter: b'\t',
            null_string: "\\N".to_owned(),
            header: false,
            quote: b'"',
            escape: b'"',
            column_types: Vec::new(),
            table_id: None,
        }
    }

    /// PostgreSQL's defaults for `FORMAT csv`.
    pub fn csv(table: impl Into<String>, columns: Vec<String>) -> Self {
        CopyTarget {
            format: CopyFormat::Csv,
            delimiter: b',',
            null_string: String::new(),
            ..CopyTarget::text(table, columns)
        }
    }
}

/// A statement's parameter and result types, for the extended protocol.
#[derive(Debug, Clone, Default)]
pub struct Described {
    /// The Arrow type of each `$n` placeholder, in order.
    pub parameter_types: Vec<DataType>,
    /// The result columns; `None` for commands.
    pub columns: Option<SchemaRef>,
    /// The backend's own parsed form of the statement, kept with the
    /// prepared statement and handed back at each Execute, so that a
    /// statement is parsed once (as PostgreSQL keeps a prepared
    /// statement's parse tree). Opaque here.
    pub parsed: Option<Arc<dyn Any + Send + Sync>>,
}

/// A NOTICE for the client: PostgreSQL's SQLSTATE for it (`00000`, or the
/// condition's own, as `42P07` for a relation that exists) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub sqlstate: &'static str,
    pub message: String,
    pub detail: Option<String>,
}

/// The SQL engine behind the wire. One `Session` per connection.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    type Session: Send + 'static;

    /// Startup: user and database from the startup message. Unknown database
    /// -> Err (sent as FATAL error). `interrupt` is raised when a client
    /// cancels the statement the session runs; the backend stops at its
    /// next interruption point with 57014.
    async fn connect(
        &self,
        user: &str,
        database: &str,
        interrupt: Interrupt,
    ) -> Result<Self::Session, RsError>;

    /// Simple protocol: a query string that may hold several statements
    /// separated by ';'. Returns one result per statement executed; stops at
    /// (and includes) the first error.
    async fn execute(
        &self,
        session: &mut Self::Session,
        sql: &str,
        prepared: &dyn PreparedStatements,
    ) -> Vec<Result<StatementResult, RsError>>;

    /// Extended protocol: one statement with $1..$n placeholders. `columns`
    /// must be the schema `execute_with_params` later returns rows in
    /// (clients decode rows by the description they got here); COPY and
    /// other commands answer `None`.
    async fn describe(&self, session: &mut Self::Session, sql: &str) -> Result<Described, RsError>;

    /// Extended protocol execute of a statement `describe` answered
    /// `described` for at Parse (a prepared statement keeps its parameter
    /// types, as in PostgreSQL); params are the text form of each parameter
    /// (None = NULL), already decoded from binary if the client sent binary.
    async fn execute_with_params(
        &self,
        session: &mut Self::Session,
        sql: &str,
        described: &Described,
        params: &[Option<String>],
        prepared: &dyn PreparedStatements,
    ) -> Result<StatementResult, RsError>;

    /// Rows of `COPY ... FROM STDIN` data, each field None (NULL) or its
    /// text, handed over in parts as the data arrives (`part` says which);
    /// returns the part's rows loaded. The COPY is all-or-nothing: the last
    /// part ends it (committing it outside a transaction block), an error
    /// in any part fails it, and a COPY abandoned between parts (CopyFail,
    /// a malformed message, a lost client) is failed with
    /// [`Backend::statement_failed`].
    async fn copy_in(
        &self,
        session: &mut Self::Session,
        target: &CopyTarget,
        rows: Vec<Vec<Option<String>>>,
        part: CopyPart,
    ) -> Result<u64, RsError>;

    /// An error the front end raised itself (a malformed message, an
    /// unknown portal) was sent for the session's current statement: the
    /// statement failed, as if the backend had failed it (inside `BEGIN`
    /// the transaction is aborted).
    async fn statement_failed(&self, session: &mut Self::Session);

    /// The NOTICE messages the session's last statements left for the
    /// client (sent before their results), taken.
    fn take_notices(&self, _session: &mut Self::Session) -> Vec<Notice> {
        Vec::new()
    }

    /// How long the session may wait for its client's next message, and
    /// the error that closes the connection when it waits longer
    /// (`idle_in_transaction_session_timeout`, `idle_session_timeout`);
    /// `None`: no limit.
    fn idle_limit(&self, session: &Self::Session) -> Option<IdleLimit>;

    /// The columns of the session's open cursor `name` (`DECLARE name
    /// CURSOR FOR ...`), which a client may Describe as a portal.
    fn cursor_columns(&self, session: &Self::Session, name: &str) -> Option<SchemaRef>;

    /// The session's transaction state, which the ReadyForQuery after each
    /// backend call reports.
    fn transaction_state(&self, session: &Self::Session) -> TransactionState;

    /// Called when the connection ends (to drop any open transaction).
    async fn disconnect(&self, session: Self::Session);
}

/// The `server_version` every session reports (at startup and in `SHOW`):
/// the PostgreSQL release whose behaviour RockStream follows. Drivers read
/// features off it (psycopg2's `server_version` is 150000).
pub const SERVER_VERSION: &str = "15.0 (RockStream)";

/// Where a session stands with respect to transactions: what every
/// ReadyForQuery reports (see [`Backend::transaction_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionState {
    /// No transaction block is open.
    Idle,
    /// Inside `BEGIN ... COMMIT`.
    InTransaction,
    /// Inside a transaction block a failed statement aborted: everything
    /// but `ROLLBACK` (or `ROLLBACK TO SAVEPOINT`) is refused.
    Failed,
}

/// How long a session may wait for its client (see [`Backend::idle_limit`]).
#[derive(Debug, Clone)]
pub struct IdleLimit {
    pub after: std::time::Duration,
    /// Sent as FATAL when the limit passes.
    pub error: RsError,
}
