//! The `RS-XXXX` error-code registry and the one error type every layer returns.
//!
//! Every user-visible failure carries an [`ErrorCode`]: a stable number inside
//! its owner's range (DESIGN §14.14), a dotted name, the PostgreSQL SQLSTATE the
//! wire reports, and `next_steps` telling the user what to do. [`REGISTRY`]
//! lists every code; a unit test rejects duplicates, numbers outside the owner
//! range and empty `next_steps`.

use std::fmt;

/// One entry of the registry.
#[derive(Debug, PartialEq, Eq)]
pub struct ErrorCode {
    pub number: u16,
    pub name: &'static str,
    pub sqlstate: &'static str,
    pub next_steps: &'static str,
}

impl ErrorCode {
    /// `RS-2001`-style label.
    pub fn label(&self) -> String {
        format!("RS-{:04}", self.number)
    }
}

macro_rules! registry {
    ($( $ident:ident = ($number:expr, $name:expr, $sqlstate:expr, $next:expr); )*) => {
        $( pub const $ident: ErrorCode = ErrorCode {
            number: $number, name: $name, sqlstate: $sqlstate, next_steps: $next,
        }; )*
        /// Every code the system can raise.
        pub const REGISTRY: &[&ErrorCode] = &[ $( &$ident, )* ];
    };
}

/// The codes. Numbers allocate from the bottom of each owner's range.
pub mod codes {
    use super::ErrorCode;
    registry! {
        // Schema / DDL validation: 1500–1999.
        OBJECT_ALREADY_EXISTS = (1501, "ddl.object_already_exists", "42P07",
            "Pick another name, or DROP the existing object first.");
        DEPENDENT_OBJECTS_EXIST = (1502, "ddl.dependent_objects_exist", "2BP01",
            "Drop the dependent views first, or repeat the DROP with CASCADE.");
        INVALID_TABLE_DEFINITION = (1503, "ddl.invalid_table_definition", "42P16",
            "Fix the column list: names must be unique and each column needs a supported type.");
        UNSUPPORTED_TYPE = (1504, "ddl.unsupported_type", "0A000",
            "Use one of BOOLEAN, SMALLINT, INT, BIGINT, REAL, DOUBLE PRECISION, NUMERIC(p,s), TEXT, VARCHAR, DATE, TIMESTAMP, TIMESTAMPTZ.");
        UNDEFINED_OBJECT = (1505, "ddl.undefined_object", "42P01",
            "List what exists with SELECT table_name, table_type FROM information_schema.tables (materialized views: SELECT matviewname FROM pg_matviews); names are case-folded to lower case unless quoted.");
        UNDEFINED_COLUMN = (1506, "ddl.undefined_column", "42703",
            "List the columns with SELECT column_name FROM information_schema.columns WHERE table_name = 'NAME'; names are case-folded to lower case unless quoted.");
        WRONG_OBJECT_KIND = (1507, "ddl.wrong_object_kind", "42809",
            "Use the statement that matches the object's kind (psql's \\d NAME shows it): DROP TABLE, DROP VIEW or DROP MATERIALIZED VIEW; writes go to tables; REFRESH names a materialized view.");
        // Gateway / SQL / session: 2000–2099.
        UNSUPPORTED_SQL_CONSTRUCT = (2001, "view.unsupported_sql_construct", "0A000",
            "Rewrite the view without the named construct; plain SELECT/JOIN/GROUP BY/UNION forms are maintained incrementally.");
        ISOLATION_SERIALIZABLE_NOT_SUPPORTED = (2003, "isolation.serializable_not_supported", "0A000",
            "Use REPEATABLE READ (BEGIN ISOLATION LEVEL REPEATABLE READ) for one consistent state, or READ COMMITTED, the default.");
        OPTIMISTIC_CONFLICT = (2008, "transaction.optimistic_conflict", "40001",
            "Another transaction changed the same rows first; retry the transaction.");
        SYNTAX_ERROR = (2020, "sql.syntax_error", "42601",
            "Fix the SQL text near the position the message names.");
        COPY_MALFORMED = (2021, "copy.malformed_stdin_statement", "22P04",
            "Check the COPY data: one row per line, fields separated by the delimiter, \\N (text) or an empty unquoted field (CSV) for NULL.");
        UNKNOWN_DATABASE = (2022, "session.unknown_database", "3D000",
            "SELECT datname FROM pg_database lists the databases; every server has 'default' (psql \"host=... dbname=default\"). CREATE DATABASE name makes another.");
        PLAN_ERROR = (2023, "sql.plan_error", "42804",
            "Check column names and types in the statement; cast explicitly where types differ.");
        UNSUPPORTED_STATEMENT = (2024, "sql.unsupported_statement", "0A000",
            "See the README's list of supported statements.");
        EXECUTION_ERROR = (2025, "sql.execution_error", "22000",
            "Check the input values the statement computes on (e.g. division by zero, overflow, invalid casts).");
        TRANSACTION_ABORTED = (2026, "transaction.aborted", "25P02",
            "Send ROLLBACK to end the failed transaction, then retry its statements.");
        VIEW_EVALUATION_ERROR = (2027, "view.evaluation_error", "22000",
            "A row in the view's inputs makes its definition fail (the message names the cause); fix or delete that row and the view heals on the next commit.");
        // 2028 (DDL refused inside a transaction block) is retired: DDL runs
        // in transaction blocks since RFC 0002.
        DIVISION_BY_ZERO = (2029, "sql.division_by_zero", "22012",
            "Guard the divisor, e.g. NULLIF(divisor, 0).");
        SUBQUERY_MORE_THAN_ONE_ROW = (2031, "sql.subquery_more_than_one_row", "21000",
            "Make the subquery single out one row (a condition on a key), aggregate it (e.g. MIN(...)), or add LIMIT 1.");
        ISOLATION_SET_TOO_LATE = (2032, "transaction.isolation_set_too_late", "25001",
            "Set the isolation level right after BEGIN, or name it in BEGIN itself: BEGIN ISOLATION LEVEL REPEATABLE READ.");
        STATEMENT_TOO_COMPLEX = (2033, "sql.statement_too_complex", "54001",
            "Shorten the chain: an IN (...) list instead of many ORs, fewer UNION branches per statement, or intermediate views.");
        VIEW_NOT_MAINTAINABLE = (2034, "view.definition_not_maintainable", "0A000",
            "This version of RockStream no longer maintains the view's definition (the message says why). DROP MATERIALIZED VIEW it (CASCADE for views built on it) and create it again in a supported form; its tables are unaffected.");
        UNDEFINED_PARAMETER = (2035, "sql.undefined_parameter", "42P02",
            "Number the statement's parameters $1, $2, ... (at most $65535) and bind one value for each.");
        PROTOCOL_VIOLATION = (2036, "wire.protocol_violation", "08P01",
            "The client sent a message that breaks the PostgreSQL protocol (the message says which and how); use a released driver, or report the bug to the client's authors. After a malformed length or message type the connection is closed; reconnect.");
        INVALID_BYTE_SEQUENCE = (2037, "wire.invalid_byte_sequence", "22021",
            "Send SQL text and text parameters as UTF-8 (client_encoding is UTF8): fix the client's encoding setting, or send the value as bytea.");
        PROGRAM_LIMIT_EXCEEDED = (2038, "sql.program_limit_exceeded", "54000",
            "The value is beyond what the function or type can hold (the message says which limit); change the argument.");
        QUERY_CANCELED = (2039, "sql.query_canceled", "57014",
            "The client canceled the statement (a driver's cancel(), psql's Ctrl-C); its changes were not made. Run it again if it was meant to finish.");
        STATEMENT_TIMEOUT = (2040, "sql.statement_timeout", "57014",
            "The statement ran longer than statement_timeout and its changes were not made: make it cheaper (a view keeps an expensive result current), or raise the limit with SET statement_timeout = '5min' (0 turns it off).");
        INVALID_PARAMETER_VALUE = (2041, "session.invalid_parameter_value", "22023",
            "Give the setting a value of its type (the message names the accepted form, e.g. statement_timeout = '30s'; units us, ms, s, min, h, d).");
        UNDEFINED_PREPARED_STATEMENT = (2042, "session.undefined_prepared_statement", "26000",
            "Prepare the statement first (the name is case-sensitive as the client sent it); DEALLOCATE ALL forgets every name.");
        UNDEFINED_CURSOR = (2043, "session.undefined_cursor", "34000",
            "Declare the cursor first (DECLARE name CURSOR FOR query); a cursor without WITH HOLD ends with its transaction.");
        NOT_IN_TRANSACTION_BLOCK = (2044, "transaction.statement_not_in_transaction_block", "25001",
            "Run the statement outside BEGIN ... COMMIT (after COMMIT or ROLLBACK).");
        UNRECOGNIZED_PARAMETER = (2045, "session.unrecognized_parameter", "42704",
            "Check the parameter's name against PostgreSQL's documentation; names with a dot are custom parameters (myapp.setting), except under rockstream., which RockStream reserves.");
        OUT_OF_MEMORY = (2046, "statement.out_of_memory", "53200",
            "Make the statement need less memory (filter or aggregate more, or return fewer rows at once with LIMIT), or start the server with a larger --statement-memory (one statement) or --total-statement-memory (all running statements).");
        IDLE_IN_TRANSACTION_TIMEOUT = (2047, "session.idle_in_transaction_timeout", "25P03",
            "The session waited longer than idle_in_transaction_session_timeout inside a transaction block, so its transaction was rolled back and the connection closed. Reconnect; finish transactions promptly, or raise or turn off the setting.");
        IDLE_SESSION_TIMEOUT = (2048, "session.idle_session_timeout", "57P05",
            "The session waited longer than idle_session_timeout for its client, so the connection was closed. Reconnect, or raise or turn off the setting.");
        NO_ACTIVE_TRANSACTION = (2049, "transaction.no_active_sql_transaction", "25P01",
            "Open a transaction block with BEGIN first: savepoints exist only inside one.");
        UNDEFINED_SAVEPOINT = (2050, "transaction.undefined_savepoint", "3B001",
            "Name a savepoint this transaction defined with SAVEPOINT and has not released or rolled back past (names are case-sensitive when quoted).");
        DUPLICATE_CURSOR = (2051, "session.duplicate_cursor", "42P03",
            "Pick another name, or CLOSE the existing cursor first.");
        SEQUENCE_NOT_YET_DEFINED = (2053, "session.sequence_not_yet_defined", "55000",
            "Call nextval() for the sequence in this session first (or read the inserted row's key with INSERT ... RETURNING).");
        UNDEFINED_FUNCTION = (2054, "sql.undefined_function", "42883",
            "Check the function's name and its number and types of arguments.");
        DUPLICATE_COLUMN = (2055, "sql.duplicate_column", "42701",
            "Name each column once in the column list.");
        INVALID_COLUMN_REFERENCE = (2056, "sql.invalid_column_reference", "42P10",
            "Name the table's primary-key columns in ON CONFLICT (...): it is the one unique constraint RockStream keeps.");
        UNDEFINED_CONSTRAINT = (2057, "sql.undefined_constraint", "42704",
            "Name one of the table's constraints: <table>_pkey, or a UNIQUE constraint (psql's \\d <table> lists them).");
        CARDINALITY_VIOLATION = (2058, "write.cardinality_violation", "21000",
            "Propose each key once per INSERT ... ON CONFLICT DO UPDATE (merge the duplicate rows first, e.g. with GROUP BY).");
        RENAME_WITH_DEPENDENTS = (2059, "ddl.rename_with_dependents", "0A000",
            "Views name the table in their definitions, which RockStream does not rewrite yet: drop the dependent views, rename, and create them again under the new names.");
        TABLE_ALTERED_CONCURRENTLY = (2060, "transaction.table_altered", "40001",
            "Another transaction added or dropped a column of the table after this one read or wrote it; run the transaction again.");
        ALTER_WITH_DEPENDENTS = (2061, "ddl.alter_with_dependents", "0A000",
            "Views read the table's columns by position, which RockStream does not re-plan yet: drop the dependent views, alter the table, and create them again.");
        DROP_KEY_COLUMN = (2062, "ddl.drop_key_column", "0A000",
            "Rows are stored by their primary key: create a new table with the key you want, copy the rows (INSERT ... SELECT), and drop the old one.");
        DUPLICATE_ROLE = (2063, "ddl.duplicate_role", "42710",
            "Pick another role name, or change the existing role with ALTER ROLE.");
        UNDEFINED_ROLE = (2064, "ddl.undefined_role", "42704",
            "Create the role first (CREATE ROLE name LOGIN PASSWORD '...'); SELECT rolname FROM pg_roles lists them.");
        PASSWORD_AUTHENTICATION_FAILED = (2065, "session.password_authentication_failed", "28P01",
            "Check the user name and password; a superuser sets one with ALTER ROLE name PASSWORD '...'.");
        DUPLICATE_DATABASE = (2066, "ddl.duplicate_database", "42P04",
            "Pick another database name; SELECT datname FROM pg_database lists the existing ones.");
        DATABASE_IN_USE = (2067, "ddl.database_in_use", "55006",
            "Close the sessions connected to the database, then drop it from a session connected to another one (dbname=default).");
        DEFAULT_DATABASE = (2068, "ddl.default_database_permanent", "55000",
            "The database 'default' cannot be dropped; drop the objects in it instead (DROP TABLE ... CASCADE).");
        INDEX_OF_CONSTRAINT = (2069, "ddl.index_of_constraint", "2BP01",
            "The index backs a constraint: drop the constraint instead (ALTER TABLE <table> DROP CONSTRAINT <name>), which drops the index with it.");
        DUPLICATE_FUNCTION = (2070, "ddl.duplicate_function", "42723",
            "Pick another name, or replace the function with CREATE OR REPLACE FUNCTION.");
        INVALID_FUNCTION_DEFINITION = (2071, "ddl.invalid_function_definition", "42P13",
            "Write the body as one scalar expression over the arguments (LANGUAGE SQL AS $$SELECT expression$$, or RETURN expression), calling no function that calls it back.");
        FUNCTION_WITH_DEPENDENTS = (2072, "ddl.function_with_dependents", "0A000",
            "Materialized views computed their state with the function's current body: drop the views that call it, replace the function, and create them again.");
        RECURSION_LIMIT_EXCEEDED = (2073, "view.recursion_limit_exceeded", "54000",
            "The recursive query did not reach its fixed point within the iteration bound (the message says which): it may not terminate (a UNION ALL over a cycle), or its chains are deeper than the bound. Bound it with a WHERE on the recursion, or use UNION to stop at rows already found.");
        INVALID_RECURSION = (2074, "sql.invalid_recursion", "42P19",
            "Read the recursive query's name once in its recursive term (WITH RECURSIVE r AS (base UNION [ALL] SELECT … FROM r JOIN …)), and give both terms the same column types.");
        CURSOR_SCANS_FORWARD = (2052, "session.cursor_scans_forward_only", "55000",
            "Cursors move forward only here (FETCH NEXT, FETCH n, FETCH FORWARD n, FETCH ALL); declare the query again to read from the start.");
        // Direct-write transactions: 2200–2299.
        UNIQUE_VIOLATION = (2201, "write.unique_violation", "23505",
            "A row with this primary key already exists: UPDATE it, or DELETE it first.");
        NOT_NULL_VIOLATION = (2202, "write.not_null_violation", "23502",
            "Provide a value for the NOT NULL (or PRIMARY KEY) column.");
        INVALID_INPUT_VALUE = (2203, "write.invalid_input_value", "22P02",
            "Give the value in the column type's text form, e.g. 2024-01-31 for DATE or 12.50 for NUMERIC.");
        NUMERIC_OUT_OF_RANGE = (2204, "write.numeric_out_of_range", "22003",
            "Use a wider column type or a smaller value.");
        WRITE_BUFFER_FULL = (2205, "write.transaction_too_large", "54000",
            "Split the transaction into smaller ones (a large load into several COPY commands), or start the server with a larger --transaction-memory.");
        STRING_TOO_LONG = (2206, "write.string_data_right_truncation", "22001",
            "Shorten the value to the column's declared length, or declare the column with a larger length (or as text).");
        SEQUENCE_LIMIT = (2207, "write.sequence_generator_limit_exceeded", "2200H",
            "The column's sequence reached the largest value of its type: declare the key BIGSERIAL (or BIGINT GENERATED ... AS IDENTITY), or reset it with setval() if the old values are gone.");
        GENERATED_ALWAYS = (2208, "write.generated_always", "428C9",
            "Leave the identity column out of the INSERT (or write DEFAULT): its values come from its sequence. Declare it GENERATED BY DEFAULT AS IDENTITY to allow explicit values.");
        UNIQUE_CONSTRAINT_VIOLATION = (2209, "write.unique_constraint_violation", "23505",
            "Another row already holds these values in the UNIQUE constraint's columns (the detail names them): change the values, or update that row instead (INSERT ... ON CONFLICT (columns) DO UPDATE).");
        // Shard / runtime: 3000–3499.
        ENGINE_STOPPED = (3003, "runtime.engine_stopped", "57P01",
            "The server's engine is not running (the server is shutting down, or a bug stopped it); check the server log and restart it.");
        VIEW_BUILDING = (3004, "runtime.view_building", "55000",
            "The materialized view is still being computed from its inputs (after a restart that interrupted its CREATE); the server log shows its progress and pg_matviews.ispopulated turns true when it is done. Retry the read then.");
        VIEW_BACKFILL_FAILED = (3005, "runtime.view_backfill_failed", "22000",
            "A row of the view's inputs made its first computation fail (the message names the cause). DROP MATERIALIZED VIEW it, fix or delete the row, and create it again.");
        COMMIT_DURABLE_UNPUBLISHED = (3007, "runtime.commit_durable_unpublished", "08007",
            "The transaction is durable, but a shard failed to store its part; it becomes visible once the server has reopened its storage, which it retries by itself (the server log says when). Check the log for the cause.");
        COMMIT_OUTCOME_UNKNOWN = (3008, "runtime.commit_outcome_unknown", "08007",
            "Storage failed while the transaction was being made durable, so it is either wholly committed or not at all; the server finds out when it reopens its storage (it retries by itself). Check after that, by reading what the transaction wrote, before retrying it.");
        SHARD_COUNT_INVALID = (3006, "runtime.invalid_shard_count", "22023",
            "Start with --shards between 1 and 256 (a new storage keeps the count it is created with).");
        // Storage format: 5000–5499.
        FORMAT_VERSION_INCOMPATIBLE = (5001, "storage.format_version_incompatible", "XX002",
            "Open this storage with a RockStream binary that supports its format version, or point --storage elsewhere.");
        STORAGE_IO = (5003, "storage.io_failure", "58030",
            "Check that the --storage location exists, is writable and has free space; then retry.");
        STORAGE_FULL = (5005, "storage.disk_full", "53100",
            "Free space on the file system holding --storage (or grow it). Nothing acknowledged is lost: writes succeed again once there is room, without a restart.");
        STORAGE_IN_USE = (5006, "storage.in_use", "55006",
            "Another RockStream process has this --storage open: stop it first, or start this one with another --storage.");
        STORAGE_SETTINGS_INVALID = (5004, "storage.invalid_settings", "22023",
            "Fix or unset the ROCKSTREAM_SLATEDB_* environment variable the message names (SlateDB's setting name in upper case, a value of its type, durations such as 500ms or 2s); a name SlateDB does not know is ignored.");
        // Internal: 9000–9999.
        INTERNAL = (9001, "internal.bug", "XX000",
            "This is a bug in RockStream; please report it with the statement that triggered it.");
    }
}

/// Owner ranges from DESIGN §14.14: every number must fall in one of them.
pub const OWNER_RANGES: &[(u16, u16, &str)] = &[
    (1000, 1499, "connector"),
    (1500, 1999, "schema/ddl"),
    (2000, 2099, "gateway/sql/session"),
    (2100, 2199, "index/planner"),
    (2200, 2299, "direct-write transactions"),
    (2300, 2399, "history"),
    (3000, 3499, "shard/runtime"),
    (3500, 3999, "merge laws/arrangements"),
    (4000, 4099, "control plane"),
    (4100, 4499, "cold tier"),
    (5000, 5499, "storage format"),
    (5500, 5999, "resource budgets"),
    (6000, 6499, "schema evolution"),
    (9000, 9999, "internal"),
];

/// The error every RockStream layer returns.
#[derive(Debug, Clone, PartialEq)]
pub struct RsError {
    pub code: &'static ErrorCode,
    pub message: String,
    pub detail: Option<String>,
    /// The table and constraint a constraint violation names (PostgreSQL's
    /// ErrorResponse `t` and `n` fields, which drivers expose, such as
    /// asyncpg's `constraint_name`).
    pub constraint: Option<(String, String)>,
}

pub type RsResult<T> = Result<T, RsError>;

impl RsError {
    pub fn new(code: &'static ErrorCode, message: impl Into<String>) -> Self {
        RsError {
            code,
            message: message.into(),
            detail: None,
            constraint: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Names the constraint of `table` the error violates.
    pub fn with_constraint(
        mut self,
        table: impl Into<String>,
        constraint: impl Into<String>,
    ) -> Self {
        self.constraint = Some((table.into(), constraint.into()));
        self
    }

    /// PostgreSQL's error for a row whose `values` of UNIQUE constraint
    /// `constraint` of `table` (on `columns`) another row holds; `adding`
    /// the constraint, its error for building the index.
    pub fn unique_violation(
        table: &str,
        constraint: &str,
        columns: &[&str],
        values: &[String],
        adding: bool,
    ) -> Self {
        let key = format!("Key ({})=({})", columns.join(", "), values.join(", "));
        let (message, detail) = if adding {
            (
                format!("could not create unique index \"{constraint}\""),
                format!("{key} is duplicated."),
            )
        } else {
            (
                format!("duplicate key value violates unique constraint \"{constraint}\""),
                format!("{key} already exists."),
            )
        };
        RsError::new(&codes::UNIQUE_CONSTRAINT_VIOLATION, message)
            .with_detail(detail)
            .with_constraint(table, constraint)
    }

    /// The error for a new row of `table` whose primary key another row
    /// holds; `key` (each column's name and the row's value), when known,
    /// is named in PostgreSQL's detail.
    pub fn primary_key_violation(table: &str, key: &[(&str, String)]) -> Self {
        let error = RsError::new(
            &codes::UNIQUE_VIOLATION,
            format!("duplicate key value violates the primary key of \"{table}\""),
        )
        .with_constraint(table, format!("{table}_pkey"));
        if key.is_empty() {
            return error;
        }
        let (columns, values): (Vec<&str>, Vec<&str>) = key
            .iter()
            .map(|(column, value)| (*column, value.as_str()))
            .unzip();
        error.with_detail(format!(
            "Key ({})=({}) already exists.",
            columns.join(", "),
            values.join(", ")
        ))
    }

    /// An internal error: something the code believed impossible happened.
    pub fn internal(message: impl Into<String>) -> Self {
        RsError::new(&codes::INTERNAL, message)
    }

    pub fn unsupported(construct: impl Into<String>) -> Self {
        RsError::new(
            &codes::UNSUPPORTED_SQL_CONSTRUCT,
            format!(
                "{} is not supported in a materialized view yet",
                construct.into()
            ),
        )
    }

    /// Whether storage failed (an I/O error, or a full disk): nothing
    /// about the statement itself.
    pub fn is_storage_failure(&self) -> bool {
        self.code == &codes::STORAGE_IO || self.code == &codes::STORAGE_FULL
    }

    pub fn sqlstate(&self) -> &'static str {
        self.code.sqlstate
    }

    pub fn next_steps(&self) -> &'static str {
        self.code.next_steps
    }
}

impl fmt::Display for RsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.code.label(),
            self.code.name,
            self.message
        )
    }
}

impl std::error::Error for RsError {}

#[cfg(test)]
mod tests {
    //! Goal: the registry is internally consistent (DESIGN §14.14 rules).
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn registry_codes_are_unique_in_range_and_actionable() {
        let mut numbers = HashSet::new();
        let mut names = HashSet::new();
        for code in codes::REGISTRY {
            assert!(
                numbers.insert(code.number),
                "duplicate number {}",
                code.label()
            );
            assert!(names.insert(code.name), "duplicate name {}", code.name);
            assert!(
                OWNER_RANGES
                    .iter()
                    .any(|(lo, hi, _)| (*lo..=*hi).contains(&code.number)),
                "{} is outside every owner range",
                code.label()
            );
            assert!(
                !code.next_steps.trim().is_empty(),
                "{} has no next_steps",
                code.label()
            );
            assert_eq!(
                code.sqlstate.len(),
                5,
                "{} has a malformed SQLSTATE",
                code.label()
            );
            assert!(code
                .sqlstate
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()));
        }
    }

    #[test]
    fn display_names_code_and_message() {
        let error = RsError::unsupported("window function ROW_NUMBER");
        assert_eq!(error.sqlstate(), "0A000");
        assert!(error
            .to_string()
            .starts_with("RS-2001 view.unsupported_sql_construct: window function"));
    }
}
