//! Goal: applications reach RockStream through the PostgreSQL drivers they already use, with each
//! driver's default settings. Method: the client programs under `tests/clients/` (Python:
//! psycopg2, psycopg 3, asyncpg, SQLAlchemy 2, pandas; Node: `pg`, `pg-copy-streams`; Java:
//! pgjdbc) run every check against the PostgreSQL oracle and against a RockStream server. Every
//! check must pass on PostgreSQL (otherwise the check is wrong). On RockStream, the checks that
//! fail must be exactly the suite's `known_failures`, each listed with what it waits for: a check
//! that newly fails is a regression, and one that newly passes must leave the list, so the list
//! is always the true state of client support.
//!
//! `scripts/test.sh` installs the clients (a cached Python virtual environment, cached
//! `node_modules`, Debian's pgjdbc) and names them in `ROCKSTREAM_TEST_PYTHON`,
//! `ROCKSTREAM_TEST_NODE_PATH` and `ROCKSTREAM_TEST_JDBC_JAR`; like the oracle, a missing client
//! fails the test rather than skipping it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use tokio_postgres::config::Host;
use tokio_postgres::Config;

use crate::harness::oracle::OracleDatabase;
use crate::harness::server::TestServer;

/// One language's client programs.
struct Suite {
    name: &'static str,
    /// The environment variable naming what the suite runs with (interpreter, modules, jar).
    variable: &'static str,
    /// How to install what `variable` names, for the failure message when it is not set.
    install: &'static str,
    /// The command running every check against a URL (appended), given `variable`'s value.
    command: fn(&str) -> Command,
    /// The checks that fail on RockStream today, and what each waits for (issue #16's items).
    known_failures: &'static [(&'static str, &'static str)],
}

/// A client program under `tests/clients/`.
fn program(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(path)
}

const PYTHON: Suite = Suite {
    name: "python",
    variable: "ROCKSTREAM_TEST_PYTHON",
    install: "pip install -r crates/rockstream/tests/clients/python/requirements.txt, \
              then export ROCKSTREAM_TEST_PYTHON=python3",
    command: |python| {
        let mut command = Command::new(python);
        command.arg(program("python/checks.py"));
        command
    },
    known_failures: &[],
};

const NODE: Suite = Suite {
    name: "node",
    variable: "ROCKSTREAM_TEST_NODE_PATH",
    install: "npm ci in crates/rockstream/tests/clients/node, then export \
              ROCKSTREAM_TEST_NODE_PATH=crates/rockstream/tests/clients/node/node_modules",
    command: |node_modules| {
        let mut command = Command::new("node");
        command
            .env("NODE_PATH", node_modules)
            .arg(program("node/checks.js"));
        command
    },
    known_failures: &[],
};

const JAVA: Suite = Suite {
    name: "java",
    variable: "ROCKSTREAM_TEST_JDBC_JAR",
    install: "apt-get install libpostgresql-jdbc-java, then export \
              ROCKSTREAM_TEST_JDBC_JAR=/usr/share/java/postgresql.jar",
    command: |jar| {
        let mut command = Command::new("java");
        command.arg("-cp").arg(jar).arg(program("java/Checks.java"));
        command
    },
    known_failures: &[],
};

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

/// Runs `suite`'s checks against `url`: each check's name and, if it failed, its error.
async fn run_checks(suite: &Suite, setting: &str, url: &str) -> BTreeMap<String, Option<String>> {
    let mut command = (suite.command)(setting);
    command.arg(url);
    let described = format!("{command:?}");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the client programs' thread")
        .unwrap_or_else(|error| panic!("cannot run {described}: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{described} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| {
            let outcome: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("{} printed {line:?}: {error}", suite.name));
            let name = outcome["check"].as_str().unwrap_or_default().to_string();
            let error = match outcome["ok"].as_bool() {
                Some(true) => None,
                _ => Some(outcome["error"].as_str().unwrap_or_default().to_string()),
            };
            (name, error)
        })
        .collect()
}

/// Runs `suite` on the oracle and on RockStream and judges both (see the module docs).
async fn check_suite(suite: &Suite) {
    let setting = match std::env::var(suite.variable) {
        Ok(setting) if !setting.is_empty() => setting,
        _ => panic!(
            "this test needs the {} clients but {} is not set.\n\
             Run it through `scripts/test.sh` (it installs them), or {}.",
            suite.name, suite.variable, suite.install
        ),
    };
    let oracle = OracleDatabase::create(&format!("clients_{}", suite.name)).await;
    let on_postgresql = run_checks(suite, &setting, &url(oracle.config())).await;
    assert!(!on_postgresql.is_empty(), "{} ran no check", suite.name);
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
    let on_rockstream = run_checks(suite, &setting, &url(&server.config())).await;
    assert_eq!(
        on_rockstream.keys().collect::<Vec<_>>(),
        on_postgresql.keys().collect::<Vec<_>>(),
        "the same checks run on both"
    );
    let mut report = Vec::new();
    for (name, error) in &on_rockstream {
        let known = suite.known_failures.iter().find(|(known, _)| known == name);
        match (error, known) {
            (Some(error), None) => {
                report.push(format!("FAILS (not a known failure) {name}: {error}"))
            }
            (None, Some((_, waits_for))) => report.push(format!(
                "PASSES now (remove it from known_failures; it waited for {waits_for}): {name}"
            )),
            _ => {}
        }
    }
    for (name, _) in suite.known_failures {
        assert!(
            on_rockstream.contains_key(*name),
            "known_failures names {name}, which the {} suite does not run",
            suite.name
        );
    }
    let passed = on_rockstream
        .values()
        .filter(|error| error.is_none())
        .count();
    println!(
        "{} clients: {passed} of {} checks pass on RockStream (all pass on PostgreSQL)",
        suite.name,
        on_rockstream.len()
    );
    assert!(
        report.is_empty(),
        "{}\n{}",
        report.join("\n"),
        server.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_clients_pass_on_postgresql_and_on_rockstream() {
    check_suite(&PYTHON).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_clients_pass_on_postgresql_and_on_rockstream() {
    check_suite(&NODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_clients_pass_on_postgresql_and_on_rockstream() {
    check_suite(&JAVA).await;
}
