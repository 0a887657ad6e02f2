//! Goal: psql's describe commands show RockStream's relations as they show PostgreSQL's. Method:
//! the same schema on a server and on the oracle, then the real `psql` client (installed with
//! the oracle) runs `\d NAME`, `\dp NAME`, for tables `\d+ NAME`, and `\df` against both (nine catalog queries
//! each, with `OPERATOR(...)`, `COLLATE`, `regclass` casts, array functions over catalog columns
//! and catalog tables RockStream leaves empty); the printed text must be the same. (`\d+` of a
//! view prints its definition, which PostgreSQL reformats; the oracle's own databases differ from
//! ours, so `\l` is checked against the one line RockStream must print.)

use std::path::PathBuf;
use std::process::Command;

use tokio_postgres::config::Host;
use tokio_postgres::Config;

use crate::harness::oracle::OracleDatabase;
use crate::harness::server::TestServer;

const SCHEMA: &str = "
CREATE TABLE customers (id BIGINT PRIMARY KEY, name TEXT NOT NULL, tier TEXT);
CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT, amount NUMERIC(12,2), region TEXT, created_at TIMESTAMP);
CREATE TABLE events (kind VARCHAR(20) NOT NULL, at TIMESTAMPTZ, weight DOUBLE PRECISION, ok BOOLEAN, n INT, s SMALLINT, r REAL, d DATE, note VARCHAR);
CREATE TABLE pairs (a INT, b TEXT, PRIMARY KEY (b, a));
CREATE INDEX orders_customer ON orders (customer_id);
CREATE INDEX ON orders USING hash (region);
CREATE INDEX ON events (kind, at) INCLUDE (note);
CREATE VIEW eu_orders AS SELECT id, region FROM orders WHERE region = 'eu';
CREATE MATERIALIZED VIEW revenue_by_region AS
  SELECT region, COUNT(*) AS orders, SUM(amount) AS revenue, AVG(amount) AS avg_amount
  FROM orders GROUP BY region;
CREATE FUNCTION count_char(s varchar, c varchar) RETURNS int LANGUAGE SQL
  AS $$SELECT LENGTH(s) - LENGTH(REPLACE(s, c, ''))$$;
CREATE FUNCTION add_one(int) RETURNS numeric LANGUAGE SQL STRICT IMMUTABLE RETURN $1 + 1;
";

const DESCRIBED: [&str; 7] = [
    "customers",
    "orders",
    "events",
    "pairs",
    "eu_orders",
    "revenue_by_region",
    "no_such_relation",
];

/// The psql that came with the oracle: on the PATH, or beside a Debian server.
pub(crate) fn psql() -> PathBuf {
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|path| {
        std::env::split_paths(&path)
            .map(|directory| directory.join("psql"))
            .collect::<Vec<_>>()
    });
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin/psql"));
    on_path
        .chain(debian)
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("this test needs psql, which `scripts/test.sh` installs with PostgreSQL")
        })
}

/// Runs psql with one `-c` per command; stdout and stderr together.
pub(crate) fn run_psql(config: &Config, commands: &[String]) -> String {
    let mut command = Command::new(psql());
    command.arg("-X");
    for host in config.get_hosts() {
        match host {
            Host::Tcp(name) => command.args(["-h", name]),
            Host::Unix(path) => command.arg("-h").arg(path),
        };
    }
    if let Some(port) = config.get_ports().first() {
        command.args(["-p", &port.to_string()]);
    }
    if let Some(user) = config.get_user() {
        command.args(["-U", user]);
    }
    if let Some(database) = config.get_dbname() {
        command.args(["-d", database]);
    }
    if let Some(password) = config.get_password() {
        command.env("PGPASSWORD", String::from_utf8_lossy(password).to_string());
    }
    for text in commands {
        command.args(["-c", text]);
    }
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("psql does not run: {error}"));
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_describes_relations_as_postgresql_does() {
    let server = TestServer::start().await;
    let oracle = OracleDatabase::create("psql_describe").await;
    for config in [&server.config(), oracle.config()] {
        let setup = run_psql(
            config,
            &["\\set ON_ERROR_STOP on".to_string(), SCHEMA.to_string()],
        );
        assert!(!setup.contains("ERROR"), "schema failed: {setup}");
    }
    let tables = &DESCRIBED[..4];
    let commands: Vec<String> = DESCRIBED
        .iter()
        .map(|name| format!("\\d {name}"))
        .chain(tables.iter().map(|name| format!("\\d+ {name}")))
        .chain(DESCRIBED.iter().map(|name| format!("\\dp {name}")))
        .chain(["\\df".to_string()])
        .collect();
    let ours = run_psql(&server.config(), &commands);
    let theirs = run_psql(oracle.config(), &commands);
    assert!(
        theirs.contains("Table \"public.pairs\"")
            && theirs.contains("no_such_relation")
            && theirs.contains("Access method: heap"),
        "the oracle's output is not what this test expects:\n{theirs}"
    );
    assert_eq!(
        ours, theirs,
        "psql prints RockStream (left) differently from PostgreSQL (right)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_lists_the_default_database() {
    let server = TestServer::start().await;
    let listed = run_psql(&server.config(), &["\\l".to_string()]);
    let row = listed
        .lines()
        .find(|line| line.trim_start().starts_with("default "))
        .unwrap_or_else(|| panic!("no row for database default in:\n{listed}"));
    let fields: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(
        fields,
        ["default", "rockstream", "UTF8", "C", "C", "", "libc", ""],
        "\\l printed:\n{listed}"
    );
    assert!(listed.contains("(1 row)"), "\\l printed:\n{listed}");
    // `\\l+` adds the size (none kept), the tablespace and a description.
    let verbose = run_psql(&server.config(), &["\\l+".to_string()]);
    assert!(
        verbose
            .lines()
            .any(|line| line.starts_with(" default ") && line.contains("| pg_default |")),
        "\\l+ printed:\n{verbose}"
    );
}

/// Goal: the NOTICEs PostgreSQL sends for `IF [NOT] EXISTS` that skips, for what `CASCADE` drops
/// and for a truncated identifier are sent, worded alike, before the command's tag (psql prints
/// both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_prints_the_notices_postgresql_sends() {
    let server = TestServer::start().await;
    let oracle = OracleDatabase::create("psql_notices").await;
    let commands: Vec<String> = [
        "CREATE TABLE kept (a INT)",
        "CREATE TABLE IF NOT EXISTS kept (a INT)",
        "CREATE MATERIALIZED VIEW IF NOT EXISTS kept AS SELECT 1 AS one",
        "DROP TABLE IF EXISTS absent",
        "DROP MATERIALIZED VIEW IF EXISTS absent, gone",
        "BEGIN; DROP VIEW IF EXISTS absent; COMMIT",
        "DROP TABLE kept",
        "CREATE TABLE base (a INT)",
        "CREATE VIEW over_base AS SELECT a FROM base",
        "CREATE VIEW over_view AS SELECT a FROM over_base",
        "DROP TABLE base CASCADE",
        "CREATE TABLE base (a INT)",
        "CREATE VIEW over_base AS SELECT a FROM base",
        "CREATE VIEW over_view AS SELECT a FROM over_base",
        "CREATE VIEW beside AS SELECT a FROM base",
        // Names the statement drops itself are not told as cascaded.
        "BEGIN; DROP VIEW IF EXISTS over_base, over_view, absent CASCADE; COMMIT",
        "DROP TABLE base CASCADE",
        &format!("SELECT 1 AS {}", "long_".repeat(15)),
    ]
    .map(str::to_string)
    .to_vec();
    let printed = run_psql(&server.config(), &commands);
    assert!(printed.contains("already exists, skipping"), "{printed}");
    assert_eq!(printed, run_psql(oracle.config(), &commands));
    // Every name is looked up before any is dropped: a missing one drops none.
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE first (a INT)")
        .await
        .expect("created");
    let error = client
        .batch_execute("DROP TABLE first, missing")
        .await
        .expect_err("refused");
    assert_eq!(crate::harness::sqlstate(&error), "42P01", "{error}");
    client
        .batch_execute("SELECT * FROM first")
        .await
        .expect("first was not dropped");
}
