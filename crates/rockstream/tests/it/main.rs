//! Goal: every end-to-end test of the `rockstream` server in one test binary (one link, one
//! process, tests run in parallel threads). Method: each test starts its own server process over a
//! private storage folder and, where it needs ground truth, its own database on the PostgreSQL
//! oracle named by `ROCKSTREAM_TEST_PG_URL` (`scripts/test.sh` provides one).
//!
//! Tests whose name contains `oracle` need only PostgreSQL, not a working server:
//! `cargo test -p rockstream --test it -- oracle` checks the harness itself.

mod harness;

mod alter_table;
mod auth;
mod backfill;
mod cache;
mod clients;
mod clock_series;
mod consistency;
mod copy;
mod corpus;
mod crash;
mod databases;
mod differential;
mod disk_full;
mod fast_path;
mod functions;
mod fuzz_sql;
mod indexes;
mod interrupts;
mod isolation;
mod large_copy;
mod limits;
mod nexmark;
mod protocol;
mod psql;
mod recursive;
mod refresh;
mod sequences;
mod session_windows;
mod slt;
mod transactional_ddl;
mod unique;
mod unsupported;
mod watermarks;
mod waves;
mod wire;
