//! Goal: applications reach RockStream through the PostgreSQL drivers they already use, with each
//! driver's default settings. Method: the client programs under `tests/clients/` (Python: psycopg2,
//! psycopg 3, asyncpg, SQLAlchemy 2, pandas) run every check against the PostgreSQL oracle and
//! against a RockStream server. Every check must pass on PostgreSQL (otherwise the check is wrong).
//! On RockStream, the checks that fail must be exactly those of [`KNOWN_FAILURES`], each listed
//! with what it waits for: a check that newly fails is a regression, and one that newly passes
//! must leave the list, so the list is always the true state of client support.
//!
//! `scripts/test.sh` installs the clients in a cached virtual environment and names its
//! interpreter in `ROCKSTREAM_TEST_PYTHON`; like the oracle, a missing client fails the test
//! rather than skipping it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tokio_postgres::config::Host;
use tokio_postgres::Config;

use crate::harness::oracle::OracleDatabase;
use crate::harness::server::TestServer;

const PYTHON_VARIABLE: &str = "ROCKSTREAM_TEST_PYTHON";

/// The checks that fail on RockStream today, and what each waits for (issue #16's items).
const KNOWN_FAILURES: &[(&str, &str)] = &[];

/// The interpreter of the environment the clients are installed in.
fn python() -> PathBuf {
    match std::env::var_os(PYTHON_VARIABLE) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => panic!(
            "this test needs the Python clients but {PYTHON_VARIABLE} is not set.\n\
             Run it through `scripts/test.sh` (it installs them in a cached virtual environment), \
             or `pip install -r crates/rockstream/tests/clients/python/requirements.txt` and \
             export {PYTHON_VARIABLE}=python3."
        ),
    }
}

/// A `postgresql://` URL for `config` (the form every client takes).
fn url(config: &Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("postgres");
    let password = config
        .get_password()
        .map(|password| format!(":{}", String::from_utf8_lossy(password)))
        .unwrap_or_default();
    let database = config.get_dbname().unwrap_or("postgres");
    format!("postgresql://{user}{password}@{host}:{port}/{database}")
}

/// Runs `checks.py` against `url`: each check's name and, if it failed, its error.
async fn run_checks(python: &PathBuf, url: &str) -> BTreeMap<String, Option<String>> {
    let program = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/python/checks.py");
    let mut command = std::process::Command::new(python);
    command.arg(&program).arg(url);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the client programs' thread")
        .unwrap_or_else(|error| panic!("cannot run {}: {error}", python.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{} {} failed ({}):\n{stdout}\n{}",
        python.display(),
        program.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| {
            let outcome: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("checks.py printed {line:?}: {error}"));
            let name = outcome["check"].as_str().unwrap_or_default().to_string();
            let error = match outcome["ok"].as_bool() {
                Some(true) => None,
                _ => Some(outcome["error"].as_str().unwrap_or_default().to_string()),
            };
            (name, error)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_clients_pass_on_postgresql_and_on_rockstream() {
    let python = python();
    let oracle = OracleDatabase::create("clients").await;
    let on_postgresql = run_checks(&python, &url(oracle.config())).await;
    assert!(!on_postgresql.is_empty(), "checks.py ran no check");
    let wrong: Vec<String> = on_postgresql
        .iter()
        .filter_map(|(name, error)| Some(format!("{name}: {}", error.as_ref()?)))
        .collect();
    assert!(
        wrong.is_empty(),
        "checks that fail on PostgreSQL are wrong:\n{}",
        wrong.join("\n")
    );

    let server = TestServer::start().await;
    let on_rockstream = run_checks(&python, &url(&server.config())).await;
    assert_eq!(
        on_rockstream.keys().collect::<Vec<_>>(),
        on_postgresql.keys().collect::<Vec<_>>(),
        "the same checks run on both"
    );
    let mut report = Vec::new();
    for (name, error) in &on_rockstream {
        let known = KNOWN_FAILURES.iter().find(|(known, _)| known == name);
        match (error, known) {
            (Some(error), None) => {
                report.push(format!("FAILS (not a known failure) {name}: {error}"))
            }
            (None, Some((_, waits_for))) => report.push(format!(
                "PASSES now (remove it from KNOWN_FAILURES; it waited for {waits_for}): {name}"
            )),
            _ => {}
        }
    }
    for (name, _) in KNOWN_FAILURES {
        assert!(
            on_rockstream.contains_key(*name),
            "KNOWN_FAILURES names {name}, which checks.py does not run"
        );
    }
    let passed = on_rockstream
        .values()
        .filter(|error| error.is_none())
        .count();
    println!(
        "python clients: {passed} of {} checks pass on RockStream (all pass on PostgreSQL)",
        on_rockstream.len()
    );
    assert!(report.is_empty(), "{}", report.join("\n"));
}
