//! Goal: DDL inside a transaction block is part of the transaction (RFC 0002): other sessions
//! see none of it before COMMIT and all of it after; a COMMIT that fails (a view's build, a
//! conflicting DDL of another session) leaves nothing; a crash before the commit point leaves
//! nothing, one after it everything, rows included. What one session sees of its own DDL is
//! `tests/slt/transactional_ddl.slt` (oracle-checked).
//! Method: two sessions over one server; `kill -9` with an open transaction, and the server's
//! failpoint that aborts it right after the commit's intent is durable, after its view is built,
//! or right after its commit point; after each restart, every object and row is checked.

use std::time::Duration;

use tokio_postgres::Client;

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::TestServer;
use crate::harness::sqlstate;

/// The server's failpoint (`rockstream_control::FAILPOINT_DDL_TRANSACTION`).
const FAILPOINT: &str = "ROCKSTREAM_FAILPOINT_DDL_TRANSACTION";
/// Bound on the wait for the failpoint to abort the server.
const FAILPOINT_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn execute(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
}

/// The rows of `sql`, each as its columns' text joined by spaces, sorted.
pub(crate) async fn rows(client: &Client, sql: &str) -> Vec<String> {
    let mut rows: Vec<String> = fetch_text_rows(client, sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
        .into_iter()
        .map(|row| {
            row.iter()
                .map(|value| value.as_deref().unwrap_or("NULL"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    rows.sort();
    rows
}

/// The relations of the `default` database (tables, views, materialized views), by name.
async fn relations(client: &Client) -> Vec<String> {
    rows(
        client,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' \
         UNION ALL SELECT matviewname FROM pg_matviews",
    )
    .await
}

/// The SQLSTATE `sql` fails with (panics if it succeeds).
pub(crate) async fn failure(client: &Client, sql: &str) -> String {
    match client.batch_execute(sql).await {
        Ok(()) => panic!("{sql} succeeded"),
        Err(error) => sqlstate(&error),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sessions_see_a_transactions_ddl_only_once_it_commits() {
    let server = TestServer::start().await;
    let writer = server.client().await;
    let reader = server.client().await;
    execute(
        &writer,
        "CREATE TABLE base (id INT PRIMARY KEY, v INT); INSERT INTO base VALUES (1, 10)",
    )
    .await;
    execute(
        &writer,
        "BEGIN; \
         CREATE TABLE added (id INT PRIMARY KEY, note TEXT); \
         INSERT INTO added VALUES (1, 'one'); \
         INSERT INTO base VALUES (2, 20); \
         CREATE MATERIALIZED VIEW joined AS \
           SELECT b.id, b.v, a.note FROM base b LEFT JOIN added a ON a.id = b.id; \
         DROP TABLE base CASCADE",
    )
    .await;
    // Before COMMIT the reader sees the catalog and rows as they were.
    assert_eq!(relations(&reader).await, ["base"]);
    assert_eq!(failure(&reader, "SELECT * FROM added").await, "42P01");
    assert_eq!(rows(&reader, "SELECT * FROM base").await, ["1 10"]);
    execute(&writer, "ROLLBACK").await;
    assert_eq!(relations(&reader).await, ["base"]);
    assert_eq!(rows(&writer, "SELECT * FROM base").await, ["1 10"]);

    execute(
        &writer,
        "BEGIN; \
         CREATE TABLE added (id INT PRIMARY KEY, note TEXT); \
         INSERT INTO added VALUES (1, 'one'); \
         INSERT INTO base VALUES (2, 20); \
         CREATE MATERIALIZED VIEW joined AS \
           SELECT b.id, b.v, a.note FROM base b LEFT JOIN added a ON a.id = b.id",
    )
    .await;
    assert_eq!(relations(&reader).await, ["base"]);
    execute(&writer, "COMMIT").await;
    assert_eq!(relations(&reader).await, ["added", "base", "joined"]);
    assert_eq!(
        rows(&reader, "SELECT * FROM joined").await,
        ["1 10 one", "2 20 NULL"]
    );
    // The view is maintained from then on.
    execute(&reader, "INSERT INTO added VALUES (2, 'two')").await;
    assert_eq!(
        rows(&reader, "SELECT * FROM joined").await,
        ["1 10 one", "2 20 two"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_fails_leaves_nothing_of_the_transaction() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let other = server.client().await;
    execute(
        &client,
        "CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 7)",
    )
    .await;

    // As PostgreSQL populates a materialized view at CREATE, a row the
    // transaction sees that makes the definition fail fails the CREATE,
    // which aborts the transaction: none of it stays.
    execute(
        &client,
        "BEGIN; INSERT INTO t VALUES (2, 8); CREATE TABLE side (x INT); INSERT INTO side VALUES (1)",
    )
    .await;
    assert_eq!(
        failure(
            &client,
            "CREATE MATERIALIZED VIEW ratio AS SELECT id, 100 / (v - 7) AS r FROM t"
        )
        .await,
        "22012"
    );
    execute(&client, "COMMIT").await;
    assert_eq!(relations(&client).await, ["t"]);
    assert_eq!(rows(&client, "SELECT * FROM t").await, ["1 7"]);

    // A row another session commits before the COMMIT: the view's build
    // fails at COMMIT, with the build's error, and leaves nothing.
    execute(&client, "DELETE FROM t").await;
    execute(
        &client,
        "BEGIN; \
         INSERT INTO t VALUES (2, 8); \
         CREATE TABLE side (x INT); \
         INSERT INTO side VALUES (1); \
         CREATE MATERIALIZED VIEW ratio AS SELECT id, 100 / (v - 7) AS r FROM t",
    )
    .await;
    execute(&other, "INSERT INTO t VALUES (1, 7)").await;
    assert_eq!(failure(&client, "COMMIT").await, "22012");
    assert_eq!(relations(&client).await, ["t"]);
    assert_eq!(rows(&client, "SELECT * FROM t").await, ["1 7"]);
    // The session is usable, and the names are free.
    execute(
        &client,
        "CREATE TABLE side (x INT); CREATE MATERIALIZED VIEW ratio AS SELECT id, v + 1 AS r FROM t",
    )
    .await;
    assert_eq!(rows(&client, "SELECT * FROM ratio").await, ["1 8"]);

    // Another session creates the name this transaction creates: the COMMIT
    // fails as PostgreSQL's would (42P07), with none of its writes.
    execute(
        &client,
        "BEGIN; INSERT INTO t VALUES (3, 9); CREATE TABLE contested (a INT)",
    )
    .await;
    execute(&other, "CREATE TABLE contested (b TEXT)").await;
    assert_eq!(failure(&client, "COMMIT").await, "42P07");
    assert_eq!(rows(&client, "SELECT id FROM t").await, ["1"]);
    assert_eq!(
        rows(
            &client,
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'contested'"
        )
        .await,
        ["b"]
    );

    // Another session drops what this transaction drops.
    execute(
        &client,
        "BEGIN; DROP TABLE contested; INSERT INTO t VALUES (4, 1)",
    )
    .await;
    execute(&other, "DROP TABLE contested").await;
    assert_eq!(failure(&client, "COMMIT").await, "42P01");
    assert_eq!(rows(&client, "SELECT id FROM t").await, ["1"]);
}

/// Objects and rows of the crash scenario's transaction, as a reader after the restart sees
/// them.
async fn crash_outcome(client: &Client) -> (Vec<String>, Vec<String>) {
    let relations = relations(client).await;
    let base = rows(client, "SELECT * FROM base").await;
    (relations, base)
}

/// The crash scenario's transaction: DDL and rows in a new and an existing table, and a view over
/// both (left open).
const CRASH_TRANSACTION: &str = "BEGIN; \
     CREATE TABLE added (id INT PRIMARY KEY, w INT); \
     INSERT INTO added VALUES (1, 100), (2, 200); \
     INSERT INTO base VALUES (2, 20); \
     CREATE MATERIALIZED VIEW sums AS \
       SELECT b.id, b.v + a.w AS total FROM base b JOIN added a ON a.id = b.id; \
     DROP MATERIALIZED VIEW doubled";

/// Runs `transaction` (left open) on a server restarted with the failpoint armed at `step`, has
/// its COMMIT abort the server there, and restarts it without the failpoint.
pub(crate) async fn commit_aborted_at(server: &mut TestServer, step: &str, transaction: &str) {
    server.set_env(FAILPOINT, Some(step.to_string()));
    server.restart().await;
    {
        let client = server.client().await;
        execute(&client, transaction).await;
        assert!(
            client.batch_execute("COMMIT").await.is_err(),
            "the failpoint {step} aborts the server during COMMIT"
        );
    }
    assert!(
        server.wait_for_exit(FAILPOINT_TIMEOUT).await,
        "the failpoint {step} did not abort the server\n{}",
        server.log_tail()
    );
    server.kill9();
    server.set_env(FAILPOINT, None);
    server.restart().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_leaves_a_ddl_transaction_whole_or_absent() {
    let mut server = TestServer::start().await;
    {
        let client = server.client().await;
        execute(
            &client,
            "CREATE TABLE base (id INT PRIMARY KEY, v INT); INSERT INTO base VALUES (1, 10); \
             CREATE MATERIALIZED VIEW doubled AS SELECT id, v * 2 AS d FROM base",
        )
        .await;
    }
    let before = (
        vec!["base".to_string(), "doubled".to_string()],
        vec!["1 10".to_string()],
    );

    // kill -9 with the transaction open: nothing of it.
    {
        let client = server.client().await;
        execute(&client, CRASH_TRANSACTION).await;
        server.kill9();
    }
    server.restart().await;
    assert_eq!(crash_outcome(&server.client().await).await, before);

    // Aborted after the intent is durable, or with its view built, before
    // the commit point: nothing of it either, and the names are free again.
    // After the commit point: all of it.
    for (step, committed) in [
        ("after_intent", false),
        ("after_install", false),
        ("after_commit_point", true),
    ] {
        commit_aborted_at(&mut server, step, CRASH_TRANSACTION).await;
        let client = server.client().await;
        if !committed {
            assert_eq!(crash_outcome(&client).await, before, "{step}");
            continue;
        }
        // After the commit point: all of it, the view maintained.
        assert_eq!(
            crash_outcome(&client).await,
            (
                vec!["added".to_string(), "base".to_string(), "sums".to_string()],
                vec!["1 10".to_string(), "2 20".to_string()],
            ),
            "{step}"
        );
        assert_eq!(
            rows(&client, "SELECT * FROM sums").await,
            ["1 110", "2 220"]
        );
        execute(
            &client,
            "INSERT INTO added VALUES (3, 300); INSERT INTO base VALUES (3, 30)",
        )
        .await;
        assert_eq!(
            rows(&client, "SELECT * FROM sums").await,
            ["1 110", "2 220", "3 330"]
        );
        // The dropped view's name is free.
        execute(
            &client,
            "CREATE MATERIALIZED VIEW doubled AS SELECT id FROM base",
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_ddl_transactions_appear_whole_to_every_reader() {
    // Goal: the catalog and the rows a reader sees are of one moment: a
    // transaction's new table and its row in an older table appear in the
    // same statement's view, never one without the other, while several
    // sessions commit DDL transactions at once.
    const WRITERS: i64 = 6;
    const TRANSACTIONS: i64 = 5;
    let server = TestServer::start().await;
    execute(
        &server.client().await,
        "CREATE TABLE ledger (id INT PRIMARY KEY)",
    )
    .await;
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let config = server.config();
            crate::harness::spawn(async move {
                let client = crate::harness::oracle::connect(&config)
                    .await
                    .expect("a writer connects");
                for round in 0..TRANSACTIONS {
                    let id = writer * TRANSACTIONS + round;
                    execute(
                        &client,
                        &format!(
                            "BEGIN; CREATE TABLE made_{id} (x INT); INSERT INTO made_{id} VALUES ({id}); \
                             INSERT INTO ledger VALUES ({id}); COMMIT"
                        ),
                    )
                    .await;
                }
            })
        })
        .collect();
    let reader = server.client().await;
    let consistent = |rows: Vec<String>| {
        let [row] = rows.as_slice() else {
            panic!("one row: {rows:?}")
        };
        let counts: Vec<&str> = row.split(' ').collect();
        assert_eq!(counts[0], counts[1], "ledger rows vs. tables made: {row}");
        counts[0].parse::<i64>().expect("a count")
    };
    let probe = "SELECT (SELECT count(*) FROM ledger), \
                 (SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'made_%')";
    while !writers.iter().all(|writer| writer.is_finished()) {
        consistent(rows(&reader, probe).await);
    }
    for writer in writers {
        writer.await.expect("a writer task panicked");
    }
    assert_eq!(
        consistent(rows(&reader, probe).await),
        WRITERS * TRANSACTIONS
    );
}
