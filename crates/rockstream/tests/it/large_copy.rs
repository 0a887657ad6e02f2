//! Goal: a `COPY` larger than the transaction's memory lands whole, or not at all, with its
//! views (RFC 0007): its rows are staged in storage as they arrive and committed in steps that
//! readers see together; a key repeated across the load, a key already stored or a UNIQUE value
//! taken by an earlier step undoes every step before it; a crash during the commit is completed
//! at restart (or, while it was being undone, undone), and a crash before it leaves nothing.
//!
//! Method: a server with `--transaction-memory 16MB` (rows are staged every 4 MB counted, about
//! 5,500 rows here), a keyed table with a UNIQUE column, an index and two views; loads of 60,000 rows in
//! shuffled key order (so every segment spans the whole key range and the commit merges them);
//! after every load the table's count and both views are compared with their definitions.

#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
#![allow(clippy::disallowed_methods)] // The test spawns its reader on tokio directly.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use tokio_postgres::Client;

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::{Storage, TestServer};
use crate::harness::{copy_in, sqlstate};

const ROWS: i64 = 60_000;
const ARGUMENTS: &[&str] = &["--transaction-memory", "16MB"];
const FAILPOINT: &str = "ROCKSTREAM_FAILPOINT_AFTER_STAGED_STEP";
const FAILPOINT_TIMEOUT: Duration = Duration::from_secs(60);
const RECLAIM_TIMEOUT: Duration = Duration::from_secs(60);

const SCHEMA: &str = "
    CREATE TABLE orders (id bigint PRIMARY KEY, serial bigint UNIQUE, region text,
                         amount numeric(10,2), note text);
    CREATE INDEX orders_region ON orders (region);
    CREATE MATERIALIZED VIEW by_region AS
      SELECT region, count(*) AS n, sum(amount) AS total FROM orders GROUP BY region;
    CREATE MATERIALIZED VIEW big_orders AS
      SELECT id, region, amount FROM orders WHERE amount > 900";

/// The definitions the views must equal, each with its view's query; and a
/// lookup through the index, which must find what a scan finds.
const CHECKS: &[(&str, &str)] = &[
    (
        "SELECT count(*), sum(amount) FROM orders WHERE region = 'north'",
        "SELECT count(*), sum(amount) FROM orders WHERE region || '' = 'north'",
    ),
    (
        "SELECT region, n, total FROM by_region ORDER BY region",
        "SELECT region, count(*), sum(amount) FROM orders GROUP BY region ORDER BY region",
    ),
    (
        "SELECT id, region, amount FROM big_orders ORDER BY id",
        "SELECT id, region, amount FROM orders WHERE amount > 900 ORDER BY id",
    ),
];

/// COPY text rows for `ids` (in that order), `serial` = `id` + 1,000,000.
fn lines(ids: &[i64]) -> String {
    ids.iter()
        .map(|id| {
            let region = ["north", "south", "east", "west"][id.rem_euclid(4) as usize];
            format!(
                "{id}\t{}\t{region}\t{}.50\tnote {id:0>60}\n",
                id + 1_000_000,
                id.rem_euclid(1000)
            )
        })
        .collect()
}

/// `first..first + ROWS` in a shuffled order.
fn shuffled(first: i64, seed: u64) -> Vec<i64> {
    let mut ids: Vec<i64> = (first..first + ROWS).collect();
    ids.shuffle(&mut StdRng::seed_from_u64(seed));
    ids
}

async fn count(client: &Client) -> i64 {
    let rows = fetch_text_rows(client, "SELECT count(*) FROM orders")
        .await
        .expect("count");
    rows[0][0].as_deref().unwrap().parse().unwrap()
}

/// The table holds `expected` rows and both views equal their definitions.
async fn check(client: &Client, expected: i64, context: &str) {
    assert_eq!(count(client).await, expected, "{context}: rows in orders");
    for (view, definition) in CHECKS {
        let view_rows = fetch_text_rows(client, view).await.expect("view");
        let defined = fetch_text_rows(client, definition)
            .await
            .expect("definition");
        assert!(
            view_rows == defined,
            "{context}: {view} differs from its definition"
        );
    }
}

/// Waits until no staged rows or dropped objects are left to delete.
async fn wait_for_reclaims(client: &Client) {
    let deadline = std::time::Instant::now() + RECLAIM_TIMEOUT;
    loop {
        let rows = fetch_text_rows(client, "SHOW rockstream.reclaims_pending")
            .await
            .expect("show");
        if rows[0][0].as_deref() == Some("0") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "staged rows still being deleted after {RECLAIM_TIMEOUT:?}"
        );
        crate::harness::sleep(Duration::from_millis(100)).await;
    }
}

async fn with_orders(server: &TestServer) -> Client {
    let client = server.client().await;
    client.batch_execute(SCHEMA).await.expect("schema");
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_larger_than_memory_lands_whole_or_not_at_all() {
    let server = TestServer::start_with(Storage::new(), ARGUMENTS).await;
    let client = with_orders(&server).await;

    // Inside BEGIN the rows stay in memory: beyond the bound, 54000.
    client.batch_execute("BEGIN").await.unwrap();
    let error = copy_in(&client, "COPY orders FROM STDIN", lines(&shuffled(0, 1)))
        .await
        .expect_err("beyond --transaction-memory inside BEGIN");
    assert_eq!(sqlstate(&error), "54000", "{error}");
    client.batch_execute("ROLLBACK").await.unwrap();

    // Alone, it is staged and lands whole; a reader meanwhile sees all of it or none.
    let reader = server.client().await;
    let watching = tokio::spawn(async move {
        let mut seen = Vec::new();
        loop {
            let n = count(&reader).await;
            if seen.last() != Some(&n) {
                seen.push(n);
            }
            if n == ROWS {
                return seen;
            }
            crate::harness::sleep(Duration::from_millis(20)).await;
        }
    });
    let loaded = copy_in(&client, "COPY orders FROM STDIN", lines(&shuffled(0, 1)))
        .await
        .expect("a staged COPY");
    assert_eq!(loaded, ROWS as u64);
    let seen = tokio::time::timeout(Duration::from_secs(30), watching)
        .await
        .expect("the reader sees the load")
        .unwrap();
    assert!(
        seen.iter().all(|n| *n == 0 || *n == ROWS),
        "a reader saw part of the load: {seen:?}"
    );
    check(&client, ROWS, "after a clean load").await;
    assert!(
        server.log().contains("large transaction committed"),
        "the load was staged and committed in steps\n{}",
        server.log_tail()
    );

    // A key repeated across segments, a key already stored late in the load (after steps were
    // applied: they are undone), and a UNIQUE value an earlier step took: 23505, nothing stays.
    let mut repeated = shuffled(ROWS, 2);
    repeated[ROWS as usize - 10] = repeated[10];
    // Keys below every stored one, and one stored key: last in key order.
    let mut stored = shuffled(-ROWS, 3);
    stored[ROWS as usize - 10] = 5;
    let mut serial_taken = lines(&shuffled(ROWS, 4));
    serial_taken.push_str(&format!(
        "{}\t{}\tnorth\t1.50\tclash\n",
        3 * ROWS,
        ROWS + 1_000_000
    ));
    for (case, data) in [
        ("a key repeated across segments", lines(&repeated)),
        ("a key already stored", lines(&stored)),
        ("a UNIQUE value taken by an earlier step", serial_taken),
    ] {
        let error = copy_in(&client, "COPY orders FROM STDIN", data)
            .await
            .expect_err(case);
        assert_eq!(sqlstate(&error), "23505", "{case}: {error}");
        check(&client, ROWS, case).await;
    }

    // A bad value in the last part: 22P02, nothing stays.
    let mut bad = lines(&shuffled(ROWS, 5));
    bad.push_str("999999999\t1\tnorth\tnot a number\tx\n");
    let error = copy_in(&client, "COPY orders FROM STDIN", bad)
        .await
        .expect_err("a bad value");
    assert_eq!(sqlstate(&error), "22P02", "{error}");
    check(&client, ROWS, "after a bad value").await;

    // Every load's staged rows are deleted afterwards, and the next load lands, one of its rows
    // longer than a COPY part (the whole load is one CopyData message).
    wait_for_reclaims(&client).await;
    let mut data = lines(&shuffled(ROWS, 6));
    let long_row = format!("{}\t1\tnorth\t1.50\t{}\n", 4 * ROWS, "x".repeat(300_000));
    let middle = data[..data.len() / 2].rfind('\n').expect("a line") + 1;
    data.insert_str(middle, &long_row);
    let loaded = copy_in(&client, "COPY orders FROM STDIN", data)
        .await
        .expect("a second staged COPY");
    assert_eq!(loaded, ROWS as u64 + 1);
    check(&client, 2 * ROWS + 1, "after a second load").await;
    wait_for_reclaims(&client).await;
}

/// Runs a COPY of `data` into a server armed to abort after `steps` staged steps, and restarts
/// it unarmed; the restart's log must say it completed the commit going `direction`.
async fn crash_during_copy(
    server: &mut TestServer,
    data: String,
    steps: u64,
    direction: &str,
) -> Client {
    server.set_env(FAILPOINT, Some(steps.to_string()));
    server.restart().await;
    let client = server.client().await;
    let outcome = copy_in(&client, "COPY orders FROM STDIN", data).await;
    assert!(outcome.is_err(), "the server aborts during the commit");
    assert!(
        server.wait_for_exit(FAILPOINT_TIMEOUT).await,
        "the failpoint fired"
    );
    assert!(
        server.log_tail().contains("failpoint: aborting"),
        "{}",
        server.log_tail()
    );
    server.kill9();
    server.set_env(FAILPOINT, None);
    server.restart().await;
    let log = server.log();
    assert!(
        log.contains("completing a large transaction's commit that was cut short")
            && log.contains(&format!("direction={direction}")),
        "the restart completes the commit going {direction}\n{}",
        server.log_tail()
    );
    server.client().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_a_large_commit_is_completed_at_restart() {
    let mut server = TestServer::start_with(Storage::new(), ARGUMENTS).await;
    drop(with_orders(&server).await);

    // After its first step: the restart applies the rest before anyone reads.
    let client = crash_during_copy(&mut server, lines(&shuffled(0, 7)), 1, "Forward").await;
    check(&client, ROWS, "a commit completed at restart").await;
    wait_for_reclaims(&client).await;

    // A key already stored, last in key order: the steps before it are being undone when the
    // server aborts (a step holds as many rows as a segment, about 5,500: 10 steps forward, the
    // 11th refused, then the failpoint fires at the third undo step); the restart finishes
    // undoing them.
    let mut stored = shuffled(-ROWS, 8);
    stored[ROWS as usize - 1] = 5;
    let client = crash_during_copy(&mut server, lines(&stored), 13, "Back").await;
    check(&client, ROWS, "a commit undone at restart").await;
    wait_for_reclaims(&client).await;

    // A crash before COMMIT, with segments staged: nothing of it, and its rows are deleted.
    let client = server.client().await;
    let sink = client
        .copy_in::<_, bytes::Bytes>("COPY orders FROM STDIN")
        .await
        .unwrap();
    {
        use futures::SinkExt;
        futures::pin_mut!(sink);
        let data = lines(&shuffled(ROWS, 9));
        sink.send(bytes::Bytes::from(data)).await.unwrap();
        // Several segments reach storage; the COPY is never finished.
        crate::harness::sleep(Duration::from_secs(2)).await;
        server.kill9();
    }
    server.restart().await;
    let client = server.client().await;
    assert!(
        server
            .log()
            .contains("deleting the staged rows of transactions that did not commit"),
        "{}",
        server.log_tail()
    );
    check(&client, ROWS, "a COPY cut short before COMMIT").await;
    wait_for_reclaims(&client).await;
}
