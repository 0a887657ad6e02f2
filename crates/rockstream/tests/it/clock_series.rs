//! Goal: a view over `generate_series(start, now(), step)` grows as the clock passes, with no
//! commit to drive it, each value once, views over it following; across a restart it keeps its
//! values and goes on from where it was. Method: a series of seconds from a few seconds ago,
//! counted (and its distinct values counted) over time and across a restart.

use std::time::Duration;

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::TestServer;

/// `(count, distinct values)` of the series, and the count the view over it holds.
async fn counts(client: &tokio_postgres::Client) -> (i64, i64, i64) {
    let rows = fetch_text_rows(
        client,
        "SELECT (SELECT count(*) FROM seconds), (SELECT count(DISTINCT s) FROM seconds), \
         (SELECT n FROM seconds_counted)",
    )
    .await
    .expect("counts");
    let number = |index: usize| -> i64 {
        rows[0][index]
            .as_deref()
            .and_then(|text| text.parse().ok())
            .unwrap_or(-1)
    };
    (number(0), number(1), number(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_series_up_to_now_grows_with_the_clock_and_across_a_restart() {
    let mut server = TestServer::start().await;
    let client = server.client().await;
    let since = rockstream_common::Runtime::system().now_micros() / 1_000_000 - 3;
    client
        .batch_execute(&format!(
            "CREATE MATERIALIZED VIEW seconds AS SELECT * FROM generate_series(to_timestamp({since}), \
             now(), INTERVAL '1 second') AS g(s);
             CREATE MATERIALIZED VIEW seconds_counted AS SELECT count(*) AS n FROM seconds"
        ))
        .await
        .expect("the views");
    let (first, distinct, counted) = counts(&client).await;
    assert!(first >= 4, "the seconds since the start: {first}");
    assert_eq!((distinct, counted), (first, first));
    crate::harness::sleep(Duration::from_millis(2_500)).await;
    let (later, distinct, counted) = counts(&client).await;
    assert!(
        later >= first + 2,
        "grew without commits: {first} -> {later}"
    );
    assert_eq!((distinct, counted), (later, later), "each value once");

    server.restart().await;
    let client = server.client().await;
    crate::harness::sleep(Duration::from_millis(1_500)).await;
    let (after, distinct, counted) = counts(&client).await;
    assert!(after > later, "goes on after a restart: {later} -> {after}");
    assert_eq!(
        (distinct, counted),
        (after, after),
        "each value once after a restart"
    );

    // Other uses of now() in a series are refused by name.
    let error = client
        .batch_execute(
            "CREATE MATERIALIZED VIEW bad AS SELECT * FROM generate_series(now() - INTERVAL '1 hour', now(), INTERVAL '1 minute')",
        )
        .await
        .expect_err("a start reading the clock");
    assert_eq!(crate::harness::sqlstate(&error), "0A000", "{error}");
    let error = client
        .batch_execute(
            "CREATE MATERIALIZED VIEW bad AS SELECT * FROM generate_series(TIMESTAMP '2026-01-01', now(), INTERVAL '1 month')",
        )
        .await
        .expect_err("a step of months");
    assert_eq!(crate::harness::sqlstate(&error), "0A000", "{error}");
}

/// A row asking a view's series for two billion values fails the view (54000, named), in
/// bounded memory, before any list is built; the table and the server go on, and deleting the
/// row heals the view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_series_too_long_for_one_row_fails_the_view_not_the_server() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE t (id INT PRIMARY KEY, n BIGINT);
             CREATE MATERIALIZED VIEW s AS SELECT id, generate_series(1, n) AS k FROM t;
             INSERT INTO t VALUES (1, 3);
             INSERT INTO t VALUES (2, 2000000000)",
        )
        .await
        .expect("the rows commit");
    let error = client
        .batch_execute("SELECT count(*) FROM s")
        .await
        .expect_err("the view failed");
    let message = error
        .as_db_error()
        .expect("a server error")
        .message()
        .to_string();
    assert!(message.contains("at most 1000000"), "{message}");
    if let Some((_, peak)) = server.resident_memory() {
        assert!(peak < 2 << 30, "peak RSS {peak} bytes");
    }
    client
        .batch_execute("DELETE FROM t WHERE id = 2")
        .await
        .expect("delete");
    let rows = fetch_text_rows(&client, "SELECT count(*) FROM s")
        .await
        .expect("the view healed");
    assert_eq!(rows[0][0].as_deref(), Some("3"));
}
