//! Goal: a running statement can be stopped, and stopping it changes nothing: a client's cancel
//! request (`cancel()` in drivers, Ctrl-C in psql) and `statement_timeout` end a long query or a
//! long `INSERT ... SELECT` with 57014, the session goes on, nothing of the stopped statement is
//! written, and other sessions are not touched; a client that leaves mid-statement stops it too.
//! A session idle inside a transaction block longer than `idle_in_transaction_session_timeout`
//! (or idle outside one longer than `idle_session_timeout`) is closed with FATAL 25P03 (57P05),
//! its transaction rolled back.
//! Method: queries over a large `generate_series` that would run for minutes, stopped after a
//! fraction of a second.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
#![allow(clippy::disallowed_methods)] // The test harness sleeps on tokio directly.

use std::time::{Duration, Instant};

use tokio_postgres::NoTls;

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::TestServer;
use crate::harness::sqlstate;
use crate::wire::raw_client::RawClient;

/// Minutes of work if nothing stops it.
const ENDLESS: &str = "SELECT count(*) FROM generate_series(1, 10000000000) g(a) WHERE a % 7 = 3";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_stops_a_running_query() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let bystander = server.client().await;
    let token = client.cancel_token();
    let started = Instant::now();
    let (outcome, ()) = tokio::join!(client.simple_query(ENDLESS), async {
        // Until the query runs, a cancel finds the session idle and is dropped.
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            token
                .cancel_query(NoTls)
                .await
                .expect("the cancel is delivered");
        }
    });
    let error = outcome.expect_err("canceled");
    assert_eq!(sqlstate(&error), "57014", "{error}");
    assert!(started.elapsed() < Duration::from_secs(30));
    for session in [&client, &bystander] {
        let rows = fetch_text_rows(session, "SELECT 1")
            .await
            .expect("the session goes on");
        assert_eq!(format!("{rows:?}"), r#"[[Some("1")]]"#);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_stops_its_running_query() {
    let server = TestServer::start().await;
    let mut client = RawClient::connect(server.config().get_ports()[0]).await;
    client.send(b'Q', format!("{ENDLESS}\0").as_bytes()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(client);
    // A running query keeps a core busy; a stopped one leaves the server idle.
    let mut idle = false;
    for _ in 0..20 {
        let Some(before) = server.cpu_time() else {
            return; // No /proc: nothing to measure.
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = server.cpu_time().unwrap_or(before);
        if after - before < Duration::from_millis(300) {
            idle = true;
            break;
        }
    }
    assert!(idle, "the query of a client that left kept running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeout_stops_queries_and_writes_that_run_too_long() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT)")
        .await
        .unwrap();
    client
        .batch_execute("SET statement_timeout = '300ms'")
        .await
        .unwrap();
    let shown = fetch_text_rows(&client, "SHOW statement_timeout")
        .await
        .unwrap();
    assert_eq!(format!("{shown:?}"), r#"[[Some("300ms")]]"#);

    let started = Instant::now();
    let error = client.simple_query(ENDLESS).await.expect_err("timed out");
    assert_eq!(sqlstate(&error), "57014", "{error}");
    assert!(started.elapsed() < Duration::from_secs(30));

    let endless_insert =
        "INSERT INTO t SELECT a, a FROM generate_series(1, 10000000000) g(a) WHERE a % 1000 = 0";
    let error = client
        .simple_query(endless_insert)
        .await
        .expect_err("timed out");
    assert_eq!(sqlstate(&error), "57014", "{error}");

    // Inside a transaction the timed-out statement aborts it, as in PostgreSQL.
    client.batch_execute("BEGIN").await.unwrap();
    client
        .batch_execute("INSERT INTO t VALUES (1, 1)")
        .await
        .unwrap();
    let error = client
        .simple_query(endless_insert)
        .await
        .expect_err("timed out");
    assert_eq!(sqlstate(&error), "57014", "{error}");
    let error = client.simple_query("SELECT 1").await.expect_err("aborted");
    assert_eq!(sqlstate(&error), "25P02", "{error}");
    client.batch_execute("ROLLBACK").await.unwrap();

    // Nothing of the stopped writes is there; cheap statements still run.
    client
        .batch_execute("INSERT INTO t VALUES (2, 2)")
        .await
        .unwrap();
    let rows = fetch_text_rows(&client, "SELECT id FROM t").await.unwrap();
    assert_eq!(format!("{rows:?}"), r#"[[Some("2")]]"#);

    // Off again: 0, as in PostgreSQL; malformed values are refused.
    client
        .batch_execute("SET statement_timeout = 0")
        .await
        .unwrap();
    let shown = fetch_text_rows(&client, "SHOW statement_timeout")
        .await
        .unwrap();
    assert_eq!(format!("{shown:?}"), r#"[[Some("0")]]"#);
    let error = client
        .simple_query("SET statement_timeout = '2 fortnights'")
        .await
        .expect_err("refused");
    assert_eq!(sqlstate(&error), "22023", "{error}");
    // RockStream reserves its own prefix: an unknown name under it is refused
    // (PostgreSQL would take it as a custom parameter).
    let error = client
        .simple_query("SET rockstream.anything = 1")
        .await
        .expect_err("refused");
    assert_eq!(sqlstate(&error), "42704", "{error}");
}

/// Sends one simple-protocol statement and reads its reply up to ReadyForQuery.
async fn run(client: &mut RawClient, sql: &str) -> Vec<String> {
    client.send(b'Q', format!("{sql}\0").as_bytes()).await;
    client.read_until_ready().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_closed_after_its_idle_timeout() {
    let server = TestServer::start().await;
    let port = server.config().get_ports()[0];
    let observer = server.client().await;
    observer
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();

    let mut idle_in_block = RawClient::connect(port).await;
    run(
        &mut idle_in_block,
        "SET idle_in_transaction_session_timeout = '300ms'",
    )
    .await;
    // Outside a transaction block the limit does not apply.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let seen = run(&mut idle_in_block, "SELECT 1").await;
    assert_eq!(seen, ["T", "D", "SELECT 1"], "still open outside a block");
    let seen = run(&mut idle_in_block, "BEGIN; INSERT INTO t VALUES (1)").await;
    assert_eq!(seen, ["BEGIN", "INSERT 0 1"]);
    let started = Instant::now();
    let (severity, code) = idle_in_block.read_error().await;
    assert_eq!((severity.as_str(), code.as_str()), ("FATAL", "25P03"));
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(idle_in_block.closed().await, "the connection is closed");
    let rows = fetch_text_rows(&observer, "SELECT count(*) FROM t")
        .await
        .unwrap();
    assert_eq!(
        rows[0][0].as_deref(),
        Some("0"),
        "the transaction is rolled back"
    );

    let mut idle = RawClient::connect(port).await;
    run(&mut idle, "SET idle_session_timeout = 300").await;
    let (severity, code) = idle.read_error().await;
    assert_eq!((severity.as_str(), code.as_str()), ("FATAL", "57P05"));
    assert!(idle.closed().await, "the connection is closed");
    // A session that keeps talking is not closed.
    let mut busy = RawClient::connect(port).await;
    run(&mut busy, "SET idle_session_timeout = '1s'").await;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(run(&mut busy, "SELECT 1").await, ["T", "D", "SELECT 1"]);
    }
}
