//! Goal: a table's `WATERMARK FOR at AS at - delay` drops and counts exactly the rows that are
//! late (below `max(at) - delay` over the rows admitted before their commit), windowed views over
//! it keep agreeing with their definitions over the admitted rows while their closed windows'
//! state is retired, and `EMIT ON WINDOW CLOSE` views hold exactly the windows the watermark
//! closed (RFC 0013) — through small transactions, a COPY large enough to be committed in staged
//! steps (judged against the watermark it began at), a large COPY that fails and is undone, one
//! the server dies in and completes at restart, a view created after windows closed, and a
//! `kill -9`.
//!
//! PostgreSQL has no watermarks, so the harness models them: before each transaction it reads
//! `W = max(at) - delay` from the oracle's table and inserts only the rows at or above it (rows
//! with a NULL time always), counting the rest; RockStream gets every row. Each view is compared
//! with its definition over the oracle's rows, an `EMIT ON WINDOW CLOSE` view with its windows
//! whose end is at or below `W`; `rs_watermarks` with `W` and the count.

#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::harness::compare::{compare_row_multisets, fetch_text_rows};
use crate::harness::oracle::OracleDatabase;
use crate::harness::server::{Storage, TestServer};
use crate::harness::{copy_in, environment_count, sqlstate, test_seed};

const COLUMNS: &str = "id INT PRIMARY KEY, auction INT, price INT, at TIMESTAMP";
/// The watermark's delay, as an interval and in minutes.
const DELAY: &str = "INTERVAL '7 minutes'";
const DELAY_MINUTES: i64 = 7;
/// Rows from which the server stages a COPY (`--transaction-memory 16MB`): the large COPY has
/// several times as many.
const LARGE_COPY_ROWS: i64 = 30_000;
const FAILPOINT: &str = "ROCKSTREAM_FAILPOINT_AFTER_STAGED_STEP";
const FAILPOINT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The views, each with its definition as PostgreSQL computes it over the admitted rows.
fn views() -> Vec<(&'static str, String, String)> {
    let tumble = "date_bin(INTERVAL '5 minutes', at, TIMESTAMP '1970-01-01')";
    let watermark = format!("(SELECT max(at) - {DELAY} FROM bids)");
    // HOP(…, 5 minutes, 10 minutes): each row in the window of its slide and the one before.
    let hops = format!(
        "SELECT *, {tumble} - INTERVAL '5 minutes' * k AS window_start,
                {tumble} - INTERVAL '5 minutes' * k + INTERVAL '10 minutes' AS window_end
         FROM bids, generate_series(0, 1) AS k"
    );
    vec![
        (
            "tumbled",
            "SELECT auction, window_start, window_end, count(*) AS n, sum(price) AS total,
                    max(price) AS top, count(DISTINCT price) AS prices
             FROM TUMBLE(bids, at, INTERVAL '5' MINUTE) GROUP BY auction, window_start, window_end"
                .to_string(),
            format!(
                "SELECT auction, {tumble}, {tumble} + INTERVAL '5 minutes', count(*), sum(price),
                        max(price), count(DISTINCT price)
                 FROM bids GROUP BY 1, 2, 3"
            ),
        ),
        (
            "hopped",
            "SELECT window_start, count(*) AS n, min(price) AS low
             FROM HOP(bids, at, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE) GROUP BY window_start"
                .to_string(),
            format!("SELECT window_start, count(*), min(price) FROM ({hops}) h GROUP BY 1"),
        ),
        (
            "closed",
            "SELECT window_start, window_end, count(*) AS n, sum(price) AS total
             FROM TUMBLE(bids, at, INTERVAL '5' MINUTE) GROUP BY window_start, window_end
             EMIT ON WINDOW CLOSE"
                .to_string(),
            format!(
                "SELECT {tumble}, {tumble} + INTERVAL '5 minutes', count(*), sum(price)
                 FROM bids WHERE at IS NOT NULL GROUP BY 1, 2
                 HAVING {tumble} + INTERVAL '5 minutes' <= {watermark}"
            ),
        ),
        (
            "closed_minutes",
            "SELECT date_trunc('minute', at) AS minute, count(*) AS n, min(price) AS low
             FROM bids GROUP BY 1 EMIT ON WINDOW CLOSE"
                .to_string(),
            format!(
                "SELECT date_trunc('minute', at), count(*), min(price) FROM bids
                 WHERE at IS NOT NULL GROUP BY 1 HAVING date_trunc('minute', at) < {watermark}"
            ),
        ),
        (
            "closed_hops",
            "SELECT auction, window_start, window_end, max(price) AS top, count(*) AS n
             FROM HOP(bids, at, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE)
             WHERE price > 10 GROUP BY auction, window_start, window_end
             EMIT ON WINDOW CLOSE"
                .to_string(),
            format!(
                "SELECT auction, window_start, window_end, max(price), count(*)
                 FROM ({hops}) h WHERE price > 10 AND at IS NOT NULL GROUP BY 1, 2, 3
                 HAVING window_end <= {watermark}"
            ),
        ),
    ]
}

/// A row: id, auction, price and time (minutes after 2026-01-01 00:00).
type Bid = (i64, i64, i64, Option<i64>);

struct Workload {
    random: StdRng,
    next_id: i64,
    /// The newest minute the stream has reached; rows fall around it.
    minute: i64,
}

impl Workload {
    /// A row's values: its time near the stream's newest, some behind the watermark, a few
    /// NULL.
    fn row(&mut self) -> Bid {
        self.next_id += 1;
        let at = match self.random.random_range(0..20) {
            0 => None,
            _ => Some(self.minute + self.random.random_range(-12..=3)),
        };
        let auction = self.random.random_range(0..3);
        let price = self.random.random_range(1..30);
        (self.next_id, auction, price, at)
    }
}

fn time(minute: Option<i64>) -> String {
    match minute {
        Some(minute) => format!("TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{minute} minutes'"),
        None => "NULL".to_string(),
    }
}

fn copy_time(minute: Option<i64>) -> String {
    match minute {
        Some(minute) => format!(
            "2026-01-01 {:02}:{:02}:00",
            minute.div_euclid(60) % 24,
            minute.rem_euclid(60)
        ),
        None => "\\N".to_string(),
    }
}

/// `rows` as COPY text.
fn copy_lines(rows: &[Bid]) -> String {
    rows.iter()
        .map(|(id, auction, price, at)| format!("{id}\t{auction}\t{price}\t{}\n", copy_time(*at)))
        .collect()
}

/// The oracle's watermark, in minutes after 2026-01-01 00:00, if it has a row with a time.
async fn oracle_watermark(oracle: &Client) -> Option<i64> {
    let row = oracle
        .query_one(
            "SELECT (EXTRACT(EPOCH FROM max(at) - TIMESTAMP '2026-01-01') / 60)::bigint FROM bids",
            &[],
        )
        .await
        .unwrap();
    row.get::<_, Option<i64>>(0)
        .map(|minutes| minutes - DELAY_MINUTES)
}

/// The rows of `rows` the oracle admits at watermark `watermark`, and how many are late.
fn admitted(rows: Vec<Bid>, watermark: Option<i64>) -> (Vec<Bid>, u64) {
    let (kept, late): (Vec<_>, Vec<_>) = rows.into_iter().partition(
        |(_, _, _, at)| !matches!((at, watermark), (Some(at), Some(watermark)) if at < &watermark),
    );
    (kept, late.len() as u64)
}

/// Compares the first `created` views with their definitions and `rs_watermarks` with the
/// oracle's watermark and `late_rows`.
async fn check(
    server: &TestServer,
    rockstream: &Client,
    oracle: &Client,
    (late_rows, created): (u64, usize),
    step: &str,
) {
    for (name, _, definition) in views().into_iter().take(created) {
        let expected = fetch_text_rows(oracle, &definition).await.unwrap();
        let actual = fetch_text_rows(rockstream, &format!("SELECT * FROM {name}"))
            .await
            .unwrap();
        if let Err(diff) = compare_row_multisets("postgres", &expected, "rockstream", &actual) {
            panic!("{step}, view {name}:\n{diff}\n{}", server.log_tail());
        }
    }
    let watermark = oracle_watermark(oracle).await;
    let expected = format!(
        "bids at {} {late_rows}",
        match watermark {
            Some(minutes) => copy_time(Some(minutes)),
            None => "NULL".to_string(),
        }
    );
    let row = rockstream
        .query_one(
            "SELECT table_name, column_name, coalesce(watermark::text, 'NULL'), late_rows \
             FROM rs_watermarks",
            &[],
        )
        .await
        .unwrap();
    let actual = format!(
        "{} {} {} {}",
        row.get::<_, String>(0),
        row.get::<_, String>(1),
        row.get::<_, String>(2),
        row.get::<_, i64>(3)
    );
    assert_eq!(actual, expected, "{step}: rs_watermarks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermarks_drop_late_rows_and_close_windows_as_postgresql_computes_them() {
    let seed = test_seed();
    let transactions = environment_count("ROCKSTREAM_TEST_TRANSACTIONS", 40);
    let mut server =
        TestServer::start_with(Storage::new(), &["--transaction-memory", "16MB"]).await;
    let database = OracleDatabase::create("watermarks").await;
    let oracle = database.client().await;
    let mut rockstream = server.client().await;
    oracle
        .batch_execute(&format!("CREATE TABLE bids ({COLUMNS})"))
        .await
        .unwrap();
    rockstream
        .batch_execute(&format!(
            "CREATE TABLE bids ({COLUMNS}, WATERMARK FOR at AS at - {DELAY})"
        ))
        .await
        .unwrap();
    let all = views();
    // The last view is created half way, over windows already closed.
    for (name, query, _) in &all[..all.len() - 1] {
        rockstream
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }
    let mut workload = Workload {
        random: StdRng::seed_from_u64(seed),
        next_id: 0,
        // Far enough from midnight that no time goes to the day before.
        minute: 20,
    };
    let mut late_rows = 0;
    let mut created = all.len() - 1;
    for transaction in 0..transactions {
        let step = format!("seed {seed}, transaction {transaction}");
        if transaction == transactions / 2 {
            created += 1;
            let (name, query, _) = &all[all.len() - 1];
            rockstream
                .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
                .await
                .unwrap();
            // A crash loses no watermark, count or emitted window.
            server.kill9();
            server.restart().await;
            rockstream = server.client().await;
        }
        workload.minute += workload.random.random_range(0..4);
        let watermark = oracle_watermark(&oracle).await;
        if transaction == transactions / 3 {
            // A COPY committed in staged steps, in key order: a step's rows must not make the
            // next step's late.
            let rows: Vec<_> = (0..LARGE_COPY_ROWS).map(|_| workload.row()).collect();
            copy_in(&rockstream, "COPY bids FROM STDIN", copy_lines(&rows))
                .await
                .unwrap();
            let (kept, late) = admitted(rows, watermark);
            late_rows += late;
            copy_in(&oracle, "COPY bids FROM STDIN", copy_lines(&kept))
                .await
                .unwrap();
            // One that fails at its last step (its largest key repeated) is undone whole:
            // rows, counts and watermark.
            workload.minute += 30;
            let failing: Vec<_> = (0..LARGE_COPY_ROWS).map(|_| workload.row()).collect();
            let failing = copy_lines(&failing);
            let repeated = format!("{failing}{}\n", failing.lines().last().unwrap());
            workload.minute -= 30;
            let error = copy_in(&rockstream, "COPY bids FROM STDIN", repeated)
                .await
                .unwrap_err();
            assert_eq!(sqlstate(&error), "23505", "{step}: {error}");
            check(&server, &rockstream, &oracle, (late_rows, created), &step).await;
            continue;
        }
        if transaction == transactions * 2 / 3 {
            // A staged COPY the server dies in, after its first step: the restart completes
            // it, judged where it began, its views held there until its last step.
            let rows: Vec<_> = (0..LARGE_COPY_ROWS).map(|_| workload.row()).collect();
            server.set_env(FAILPOINT, Some("1".to_string()));
            server.restart().await;
            rockstream = server.client().await;
            let outcome = copy_in(&rockstream, "COPY bids FROM STDIN", copy_lines(&rows)).await;
            assert!(
                outcome.is_err(),
                "{step}: the server aborts during the commit"
            );
            assert!(
                server.wait_for_exit(FAILPOINT_TIMEOUT).await,
                "{step}: the failpoint fired"
            );
            server.kill9();
            server.set_env(FAILPOINT, None);
            server.restart().await;
            assert!(
                server
                    .log()
                    .contains("completing a large transaction's commit that was cut short"),
                "{step}: {}",
                server.log_tail()
            );
            rockstream = server.client().await;
            let (kept, late) = admitted(rows, watermark);
            late_rows += late;
            copy_in(&oracle, "COPY bids FROM STDIN", copy_lines(&kept))
                .await
                .unwrap();
            check(&server, &rockstream, &oracle, (late_rows, created), &step).await;
            continue;
        }
        let rows: Vec<_> = (0..workload.random.random_range(1..8))
            .map(|_| workload.row())
            .collect();
        let values = |rows: &[Bid]| {
            rows.iter()
                .map(|(id, auction, price, at)| {
                    format!("({id}, {auction}, {price}, {})", time(*at))
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        // Two statements in one transaction: judged together.
        let (first, second) = rows.split_at(rows.len() / 2);
        let mut block = String::from("BEGIN;");
        for part in [first, second] {
            if !part.is_empty() {
                block += &format!(" INSERT INTO bids VALUES {};", values(part));
            }
        }
        block += " COMMIT";
        rockstream.batch_execute(&block).await.unwrap();
        let (kept, late) = admitted(rows, watermark);
        late_rows += late;
        if !kept.is_empty() {
            oracle
                .batch_execute(&format!("INSERT INTO bids VALUES {}", values(&kept)))
                .await
                .unwrap();
        }
        check(&server, &rockstream, &oracle, (late_rows, created), &step).await;
    }
    // A commit tells the client, by table, how many of its rows were late (NOTICE, as psql
    // prints it): here one of two, against the watermark the commit began at.
    let watermark = oracle_watermark(&oracle).await.unwrap();
    let (id, late, on_time) = (workload.next_id + 1, watermark - 1, watermark);
    let printed = crate::psql::run_psql(
        &server.config(),
        &[format!(
            "INSERT INTO bids VALUES ({id}, 1, 1, {}), ({}, 1, 1, {})",
            time(Some(late)),
            id + 1,
            time(Some(on_time))
        )],
    );
    assert!(
        printed.contains(
            "NOTICE:  1 row of table \"bids\" was below its watermark and dropped as late"
        ) && printed.contains("INSERT 0 2"),
        "{printed}"
    );
    // Append-only.
    for statement in [
        "UPDATE bids SET price = 1",
        "DELETE FROM bids",
        "TRUNCATE bids",
        "INSERT INTO bids VALUES (1, 1, 1, NULL) ON CONFLICT (id) DO UPDATE SET price = 2",
    ] {
        let error = rockstream.batch_execute(statement).await.unwrap_err();
        assert_eq!(sqlstate(&error), "0A000", "{statement}: {error}");
    }
}

/// Goal: a `date` column takes a watermark too (its days at midnight): late days are dropped,
/// days (and weeks of TUMBLE over them) close as it passes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_date_column_takes_a_watermark() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE sales (id INT, d DATE, amount INT, WATERMARK FOR d AS d - INTERVAL '1 day');
             CREATE MATERIALIZED VIEW daily AS SELECT d, sum(amount) AS total FROM sales
               GROUP BY d EMIT ON WINDOW CLOSE;
             CREATE MATERIALIZED VIEW weekly AS SELECT window_start, count(*) AS n
               FROM TUMBLE(sales, d, INTERVAL '7 days') GROUP BY window_start EMIT ON WINDOW CLOSE;
             INSERT INTO sales VALUES (1, '2026-01-01', 10), (2, '2026-01-02', 20);
             INSERT INTO sales VALUES (3, '2026-01-04', 5), (4, '2025-12-31', 7);",
        )
        .await
        .unwrap();
    let rows = |sql: &'static str| {
        let client = &client;
        async move {
            fetch_text_rows(client, sql)
                .await
                .unwrap()
                .into_iter()
                .map(|row| {
                    row.into_iter()
                        .map(|value| value.unwrap_or_default())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        rows("SELECT * FROM daily ORDER BY 1").await,
        ["2026-01-01 10", "2026-01-02 20"]
    );
    assert_eq!(
        rows("SELECT delay::text, watermark::text, late_rows FROM rs_watermarks").await,
        ["1 day 2026-01-03 00:00:00 1"]
    );
    client
        .batch_execute("INSERT INTO sales VALUES (5, '2026-01-20', 1)")
        .await
        .unwrap();
    assert_eq!(
        rows("SELECT * FROM daily ORDER BY 1").await,
        ["2026-01-01 10", "2026-01-02 20", "2026-01-04 5"]
    );
    // 2026-01-01 is a Thursday, as 1970-01-01 was: its week is [01-01, 01-08).
    assert_eq!(
        rows("SELECT * FROM weekly ORDER BY 1").await,
        ["2026-01-01 00:00:00 3"]
    );
}

/// A late row whose key is stored is refused (23505) however it arrives: alone in an autocommit
/// INSERT, as inside a transaction (the commit drops late rows before it checks keys, so the
/// statement checks them first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_row_with_a_stored_key_is_refused() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE marks (id INT PRIMARY KEY, d DATE, WATERMARK FOR d AS d - INTERVAL '1 day');
             INSERT INTO marks VALUES (1, '2026-01-01');
             INSERT INTO marks VALUES (2, '2026-01-10');",
        )
        .await
        .unwrap();
    for sql in [
        "INSERT INTO marks VALUES (1, '2025-06-01')",
        "BEGIN; INSERT INTO marks VALUES (1, '2025-06-01'); COMMIT",
    ] {
        let error = client.batch_execute(sql).await.unwrap_err();
        assert_eq!(sqlstate(&error), "23505", "{sql}: {error}");
        client.batch_execute("ROLLBACK").await.unwrap();
    }
    assert_eq!(
        fetch_text_rows(&client, "SELECT id, d::text FROM marks ORDER BY id")
            .await
            .unwrap(),
        vec![
            vec![Some("1".to_owned()), Some("2026-01-01".to_owned())],
            vec![Some("2".to_owned()), Some("2026-01-10".to_owned())],
        ]
    );
}
