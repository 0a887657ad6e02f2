//! Goal: views that read the same table and step concurrently on a large commit each see the
//! whole commit, a view reading another view steps after it, and a view failing on one row
//! (division by zero) neither disturbs its neighbours nor loses input: it heals when the row goes.
//!
//! Method: COPY commits large enough for the engine to step independent views on concurrent
//! tasks; after each, compare every healthy view with its definition run as an ad-hoc query.

use crate::harness::compare::{check_views, fetch_text_rows};
use crate::harness::copy_in;
use crate::harness::server::TestServer;

/// Rows per COPY: well above the engine's threshold for concurrent steps (1,024).
const ROWS: i64 = 5_000;

const QUOTIENTS: (&str, &str) = ("quotients", "SELECT id, a / b AS q FROM ratios");
const HEALTHY: &[(&str, &str)] = &[
    (
        "totals",
        "SELECT b % 10 AS bucket, COUNT(*) AS n, SUM(a) AS total FROM ratios GROUP BY b % 10",
    ),
    (
        "extremes",
        "SELECT MIN(a) AS low, MAX(a) AS high FROM ratios",
    ),
];
/// Reads `quotients`: steps in a later wave than the view it reads.
const POSITIVE: (&str, &str) = (
    "positive_quotients",
    "SELECT COUNT(*) AS n FROM quotients WHERE q > 0",
);

fn rows(first: i64, zero_divisor_at: Option<i64>) -> String {
    (first..first + ROWS)
        .map(|id| {
            let b = if Some(id) == zero_divisor_at {
                0
            } else {
                id % 13 + 1
            };
            format!("{id}\t{}\t{b}\n", id * 7 % 1_001 - 500)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_view_steps_see_whole_commits_and_isolate_failures() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE ratios (id BIGINT PRIMARY KEY, a BIGINT, b BIGINT)")
        .await
        .expect("table");
    for (name, definition) in [QUOTIENTS, HEALTHY[0], HEALTHY[1], POSITIVE] {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {definition}"))
            .await
            .unwrap_or_else(|error| panic!("CREATE {name}: {error}"));
    }
    let all = [QUOTIENTS, HEALTHY[0], HEALTHY[1], POSITIVE];

    copy_in(&client, "COPY ratios FROM STDIN", rows(1, None))
        .await
        .expect("first COPY");
    check_views(&client, &all).await;

    let bad_row = ROWS + 17;
    copy_in(
        &client,
        "COPY ratios FROM STDIN",
        rows(ROWS + 1, Some(bad_row)),
    )
    .await
    .expect("second COPY");
    let error = fetch_text_rows(&client, "SELECT * FROM quotients")
        .await
        .expect_err("quotients divides by zero");
    assert!(error.contains("RS-"), "a coded error: {error}");
    check_views(&client, HEALTHY).await;

    client
        .batch_execute(&format!(
            "DELETE FROM ratios WHERE id = {bad_row} OR id % 3 = 0"
        ))
        .await
        .expect("delete");
    check_views(&client, &all).await;
}
