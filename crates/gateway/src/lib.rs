//! The query gateway: statements from pgwire sessions, executed against the
//! catalog, the engine and pinned snapshots.
//!
//! DDL goes to the catalog (`rockstream_control::Database`); DML is evaluated
//! by DataFusion over the session's snapshot, buffered per transaction as
//! exact-key row changes and committed through the engine; `SELECT` runs in
//! DataFusion over the newest published snapshot (under REPEATABLE READ, the
//! one the transaction's first statement pinned), so after `COMMIT` returns
//! the next statement sees the commit in every view. A few simple shapes
//! (`INSERT ... VALUES` of literals, constant selects, a row by its whole
//! primary key) skip DataFusion: see `fast_path`, which answers as the
//! planned path would or leaves the statement to it.

mod alter;
mod backend;
mod complexity;
mod copy;
mod copy_options;
mod databases;
mod ddl;
mod defaults;
mod dml;
mod fast_path;
mod functions;
mod memory;
mod providers;
mod relations;
mod roles;
mod sequences;
mod session;
mod session_commands;
mod settings;
mod staging;
mod statement_limits;
mod streaming;
mod transactions;
mod unique;
mod upsert;
mod wire;
mod writes;

pub use backend::Gateway;
pub use memory::{
    MemoryLimits, STATEMENT_MEMORY_DEFAULT, TOTAL_STATEMENT_MEMORY_DEFAULT,
    TRANSACTION_MEMORY_DEFAULT,
};
pub use roles::CatalogPasswords;
