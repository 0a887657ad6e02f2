//! Goal: `--auth password` admits exactly the login roles that prove their password
//! (SCRAM-SHA-256), as roles are created, altered and dropped, across restarts; `--tls-cert`
//! lets clients connect over TLS; without `--auth`, the server refuses to listen beyond
//! loopback. Failures are FATAL 28P01, worded alike whatever failed.
//! Method: tokio-postgres for SCRAM (it speaks it natively), psql for TLS (`sslmode=require`
//! fails unless the server switches to TLS), and the binary run with a wildcard address.

use std::process::Command;

use tokio_postgres::{Config, NoTls};

use crate::harness::oracle::connect;
use crate::harness::server::{Storage, TestServer};
use crate::psql::psql;
use crate::transactional_ddl::{execute, failure, rows};

/// The SQLSTATE a login with `config` fails with (panics if it succeeds).
async fn login_failure(config: &Config) -> String {
    match config.connect(NoTls).await {
        Ok(_) => panic!("the login succeeded"),
        Err(error) => error
            .as_db_error()
            .map(|error| error.code().code().to_string())
            .unwrap_or_else(|| panic!("not a server error: {error}")),
    }
}

/// Logs in with `config` (the handshake, SCRAM included, completes in `connect`).
async fn logs_in(config: &Config) {
    if let Err(error) = config.connect(NoTls).await {
        panic!("the login failed: {error}");
    }
}

fn as_role(server: &TestServer, user: &str, password: &str) -> Config {
    let mut config = server.config();
    config.user(user).password(password);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_roles_that_prove_their_password_get_in() {
    let mut server = TestServer::start_with_password(&[], "first secret").await;
    let admin = server.client().await;
    assert_eq!(rows(&admin, "SELECT 1").await, ["1"]);
    assert_eq!(
        login_failure(&as_role(&server, "rockstream", "wrong")).await,
        "28P01"
    );
    assert_eq!(
        login_failure(&as_role(&server, "nobody", "x")).await,
        "28P01"
    );

    execute(
        &admin,
        "CREATE ROLE app LOGIN PASSWORD 'app pw'; CREATE USER reporter PASSWORD 'r'",
    )
    .await;
    execute(&admin, "CREATE ROLE batch PASSWORD 'b'").await; // NOLOGIN by default
    let app = as_role(&server, "app", "app pw");
    logs_in(&app).await;
    logs_in(&as_role(&server, "reporter", "r")).await;
    assert_eq!(
        login_failure(&as_role(&server, "batch", "b")).await,
        "28P01"
    );
    assert_eq!(failure(&admin, "CREATE ROLE app").await, "42710");
    assert_eq!(failure(&admin, "BEGIN; CREATE ROLE x").await, "25001");
    execute(&admin, "ROLLBACK").await;
    assert_eq!(failure(&admin, "CREATE ROLE y NOSUPERUSER").await, "0A000");

    // An empty password is no password: nobody logs in with it.
    execute(&admin, "CREATE ROLE empty LOGIN PASSWORD ''").await;
    assert_eq!(login_failure(&as_role(&server, "empty", "")).await, "28P01");

    execute(&admin, "ALTER USER app WITH PASSWORD 'new pw'").await;
    assert_eq!(login_failure(&app).await, "28P01");
    logs_in(&as_role(&server, "app", "new pw")).await;
    let as_app = connect(&as_role(&server, "app", "new pw"))
        .await
        .expect("app logs in");
    assert_eq!(
        rows(&as_app, "SELECT current_user, session_user, user").await,
        ["app app app"]
    );
    execute(&admin, "ALTER ROLE app NOLOGIN").await;
    assert_eq!(
        login_failure(&as_role(&server, "app", "new pw")).await,
        "28P01"
    );

    // Roles are durable; a restart without ROCKSTREAM_PASSWORD keeps the password.
    server.set_env("ROCKSTREAM_PASSWORD", None);
    server.restart().await;
    let admin = server.client().await;
    logs_in(&as_role(&server, "reporter", "r")).await;
    execute(&admin, "DROP ROLE reporter; DROP USER IF EXISTS reporter").await;
    assert_eq!(failure(&admin, "DROP ROLE reporter").await, "42704");
    assert_eq!(
        login_failure(&as_role(&server, "reporter", "r")).await,
        "28P01"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_may_connect_over_tls() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/tls");
    let certificate = format!("{fixtures}/server.crt");
    let key = format!("{fixtures}/server.key");
    let server = TestServer::start_with_password(
        &["--tls-cert", &certificate, "--tls-key", &key],
        "tls secret",
    )
    .await;
    let port = server.config().get_ports()[0];
    assert_eq!(psql_select_one(port, "require"), Ok("1".to_string()));
    assert_eq!(psql_select_one(port, "disable"), Ok("1".to_string()));

    // Without a certificate, a client that requires TLS is turned away.
    let plain = TestServer::start_with_password(&[], "tls secret").await;
    let plain_port = plain.config().get_ports()[0];
    assert!(psql_select_one(plain_port, "require").is_err());
}

/// `SELECT 1` through psql as role `rockstream` (password `tls secret`) with `sslmode`: its output,
/// or what psql printed when it failed.
fn psql_select_one(port: u16, sslmode: &str) -> Result<String, String> {
    let output = Command::new(psql())
        .args(["-X", "-At", "-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", "rockstream", "-d", "default", "-c", "SELECT 1"])
        .env("PGPASSWORD", "tls secret")
        .env("PGSSLMODE", sslmode)
        .output()
        .expect("psql runs");
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_admits_any_role() {
    let server = TestServer::start_with(Storage::new(), &["--auth", "trust"]).await;
    let mut config = server.config();
    config.user("whoever");
    logs_in(&config).await;
}

#[test]
fn a_wildcard_address_needs_auth_chosen() {
    let storage = Storage::new();
    let output = Command::new(env!("CARGO_BIN_EXE_rockstream"))
        .arg("start")
        .arg("--storage")
        .arg(storage.storage_path())
        .args(["--listen", "0.0.0.0:0", "--shards", "1"])
        .env("NO_COLOR", "1")
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "it started: {stderr}");
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0 without authentication"),
        "{stderr}"
    );
}
