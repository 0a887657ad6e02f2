//! Goal: RockStream passes our own sqllogictest files, `crates/rockstream/tests/slt/*.slt`.
//! Method: each file runs on a fresh server over pgwire. Their expected results are what
//! PostgreSQL 15 prints for the same script with plain views; `oracle_passes_slt_files` keeps them
//! honest, and `oracle_complete_slt_files` (ignored) regenerates them from the oracle instead of
//! anyone guessing: `scripts/test.sh -p rockstream --test it -- --ignored oracle_complete_slt_files`
//! (a whole-suite wrapper only to provide the oracle), then review the diff.

use std::path::{Path, PathBuf};

use crate::harness::oracle::OracleDatabase;
use crate::harness::server::TestServer;
use crate::harness::slt::{complete_slt_file, run_slt_file, Dialect};

fn slt_files() -> Vec<PathBuf> {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&directory)
        .unwrap_or_else(|error| panic!("cannot list {}: {error}", directory.display()))
        .map(|entry| entry.expect("a readable folder entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt file in {}", directory.display());
    files
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn slt_files_pass_on_rockstream() {
    let mut failures = Vec::new();
    for path in slt_files() {
        let server = TestServer::start().await;
        if let Err(report) = run_slt_file(&server.config(), &path, Dialect::RockStream).await {
            failures.push(format!(
                "{}:\n{report}\n{}",
                file_name(&path),
                server.log_tail()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} .slt files fail on RockStream:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[tokio::test]
async fn oracle_passes_slt_files() {
    let mut failures = Vec::new();
    for path in slt_files() {
        let database = OracleDatabase::create(&format!("slt_{}", file_name(&path))).await;
        if let Err(report) = run_slt_file(database.config(), &path, Dialect::PostgresOracle).await {
            failures.push(format!("{}:\n{report}", file_name(&path)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} .slt files disagree with PostgreSQL (regenerate with oracle_complete_slt_files?):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Not a gate but a tool: rewrites the expected results of our .slt files from PostgreSQL's
/// output, so a human reviews the diff. `cargo test -p rockstream --test it -- --ignored
/// oracle_complete_slt_files`
#[tokio::test]
#[ignore = "rewrites tests/slt/*.slt in place; run by hand and review the diff"]
async fn oracle_complete_slt_files() {
    for path in slt_files() {
        let database = OracleDatabase::create(&format!("complete_{}", file_name(&path))).await;
        complete_slt_file(database.config(), &path, Dialect::PostgresOracle)
            .await
            .unwrap_or_else(|report| panic!("{report}"));
    }
}

/// The runner renders values as PostgreSQL prints them and rejects a wrong expectation.
#[tokio::test]
async fn oracle_slt_runner_renders_values_and_rejects_wrong_results() {
    use crate::harness::slt::run_slt_script;

    let database = OracleDatabase::create("slt_runner").await;
    let setup = "statement ok\n\
                 CREATE TABLE t (v INT, label TEXT);\n\n\
                 statement ok\n\
                 INSERT INTO t VALUES (1, ''), (2, NULL), (2, 'two words');\n\n\
                 statement ok\n\
                 CREATE MATERIALIZED VIEW mv AS SELECT v, label FROM t;\n\n";
    let right = format!(
        "{setup}query ITTR rowsort\n\
         SELECT v, label, v > 1, v * 1.50 FROM mv;\n\
         ----\n\
         1 (empty) f 1.50\n\
         2 NULL t 3.00\n\
         2 two words t 3.00\n"
    );
    run_slt_script(
        database.config(),
        "right.slt",
        &right,
        Dialect::PostgresOracle,
    )
    .await
    .unwrap_or_else(|report| panic!("{report}"));

    let database = OracleDatabase::create("slt_runner_wrong").await;
    let wrong = format!(
        "{setup}query I\n\
         SELECT COUNT(*) FROM mv;\n\
         ----\n\
         4\n"
    );
    let report = run_slt_script(
        database.config(),
        "wrong.slt",
        &wrong,
        Dialect::PostgresOracle,
    )
    .await
    .expect_err("a wrong expected count must fail");
    assert!(report.contains("query result mismatch"), "{report}");
}
