//! What one change costs a top-K view and a window view as the number of
//! partitions and their size grow (issue #15, proof 4): the stated bounds
//! are O(K) for a per-group top-K and the touched partition for window
//! functions (README). Each configuration loads `groups × rows` rows into
//! `scores (id, g, v)` on a fresh server with no view, with the top-K view
//! only, or with the window view only, then times single-row UPDATEs of
//! random rows (each commit durable; read-your-writes, so a commit returns
//! once the view holds the change). A view's cost per change is its median
//! UPDATE latency over the same configuration's without a view.

use std::time::{Duration, Instant};

use super::{bench_shards, copy, milliseconds, percentile, Server};

const UPDATES: usize = 300;

/// `(groups, rows per group)`: a baseline, partitions 20× larger, 20× more
/// partitions.
const CONFIGURATIONS: [(u64, u64); 3] = [(100, 100), (100, 2_000), (2_000, 100)];

const TOP_K: &str = "CREATE MATERIALIZED VIEW top3 AS SELECT id, g, v FROM (SELECT id, g, v, \
     row_number() OVER (PARTITION BY g ORDER BY v DESC, id) AS rn FROM scores) s WHERE rn <= 3";
const WINDOW: &str = "CREATE MATERIALIZED VIEW running AS SELECT id, g, \
     SUM(v) OVER (PARTITION BY g ORDER BY id) AS total FROM scores";

/// Median and p99 latency of `UPDATES` single-row UPDATEs on a fresh
/// server holding `groups × rows` rows and `view`, if any.
async fn update_latencies(groups: u64, rows: u64, view: Option<&str>) -> (Duration, Duration) {
    let server = Server::start();
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE scores (id BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
        .await
        .expect("table");
    if let Some(view) = view {
        client.batch_execute(view).await.expect("view");
    }
    let total = groups * rows;
    copy(
        &client,
        "COPY scores FROM STDIN",
        (0..total).map(|id| format!("{id}\t{}\t{}\n", id % groups, (id * 7_919) % 1_000_003)),
    )
    .await;
    let mut latencies = Vec::with_capacity(UPDATES);
    for iteration in 0..UPDATES as u64 {
        let id = (iteration * 104_729) % total;
        let started = Instant::now();
        client
            .simple_query(&format!("UPDATE scores SET v = v + 1 WHERE id = {id}"))
            .await
            .expect("update");
        latencies.push(started.elapsed());
    }
    (
        percentile(&mut latencies, 0.5),
        percentile(&mut latencies, 0.99),
    )
}

pub(super) async fn window_figures() {
    println!(
        "\n## A change's cost by partition count and size, {} shard(s)\n",
        bench_shards()
    );
    println!(
        "| partitions × rows each | UPDATE p50 / p99, no view | top-3 per group: p50 / p99, cost per change | running SUM OVER: p50 / p99, cost per change |"
    );
    println!("|---|---|---|---|");
    for (groups, rows) in CONFIGURATIONS {
        let (base, base_p99) = update_latencies(groups, rows, None).await;
        let (top, top_p99) = update_latencies(groups, rows, Some(TOP_K)).await;
        let (window, window_p99) = update_latencies(groups, rows, Some(WINDOW)).await;
        let cost = |with: Duration| milliseconds(with.saturating_sub(base));
        println!(
            "| {groups} × {rows} | {:.2} / {:.2} ms | {:.2} / {:.2} ms, {:.2} ms | {:.2} / {:.2} ms, {:.2} ms |",
            milliseconds(base),
            milliseconds(base_p99),
            milliseconds(top),
            milliseconds(top_p99),
            cost(top),
            milliseconds(window),
            milliseconds(window_p99),
            cost(window)
        );
    }
}
