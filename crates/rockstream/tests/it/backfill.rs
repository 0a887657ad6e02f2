//! Goal: `CREATE MATERIALIZED VIEW` over tables that already hold more rows than one backfill
//! epoch takes builds the same view as incremental maintenance would, survives a crash in the
//! middle of its backfill, and keeps being maintained afterwards.
//!
//! Method: load [`EVENTS`] rows (a few backfill epochs' worth) into `events`, create views that
//! join, aggregate (MIN/MAX, COUNT DISTINCT, a global aggregate) and read another view, and compare
//! each view with its own definition run as an ad-hoc query, which DataFusion evaluates over the
//! tables without any view state. Then kill the server with SIGKILL once a further view's backfill
//! has committed its first epoch (the server logs each), restart it, and check that the view is
//! complete, and that every view follows later changes.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::harness::compare::check_views;
use crate::harness::server::TestServer;
use crate::harness::{copy_in, sleep, spawn};

/// More than two backfill epochs (`BACKFILL_EPOCH_ROWS` is 65,536).
const EVENTS: i64 = 140_000;
const GROUPS: i64 = 50;
/// Bound on the wait for the interrupted backfill to commit its first epoch.
const BACKFILL_PROGRESS_TIMEOUT: Duration = Duration::from_secs(120);
const LOG_POLL_INTERVAL: Duration = Duration::from_millis(20);

const VIEWS: &[(&str, &str)] = &[
    (
        "per_label",
        "SELECT g.label, COUNT(*) AS n, SUM(e.v) AS total, MIN(e.v) AS low, MAX(e.v) AS high, \
         COUNT(DISTINCT e.tag) AS tags FROM events e JOIN groups g ON e.g = g.g GROUP BY g.label",
    ),
    (
        "overall",
        "SELECT COUNT(*) AS n, SUM(v) AS total FROM events",
    ),
    (
        "busy_labels",
        "SELECT label, n FROM per_label WHERE n > 2000",
    ),
];

/// Created while the kill lands.
const INTERRUPTED: (&str, &str) = (
    "per_tag",
    "SELECT tag, COUNT(*) AS n, SUM(v) AS total FROM events WHERE v % 3 <> 0 GROUP BY tag",
);

fn event_line(id: i64) -> String {
    format!(
        "{id}\t{}\t{}\ttag{}\n",
        id % GROUPS,
        (id * 7919) % 10_007 - 5_000,
        id % 97
    )
}

async fn load(client: &Client) {
    client
        .batch_execute(
            "CREATE TABLE events (id BIGINT PRIMARY KEY, g BIGINT, v BIGINT, tag TEXT);
             CREATE TABLE groups (g BIGINT PRIMARY KEY, label TEXT)",
        )
        .await
        .expect("schema");
    let groups: Vec<String> = (0..GROUPS)
        .map(|g| format!("({g}, 'label {}')", g % 7))
        .collect();
    client
        .batch_execute(&format!("INSERT INTO groups VALUES {}", groups.join(", ")))
        .await
        .expect("groups");
    let data: String = (1..=EVENTS).map(event_line).collect();
    copy_in(client, "COPY events FROM STDIN", data)
        .await
        .expect("COPY events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_over_many_epochs_survives_a_crash() {
    let mut server = TestServer::start().await;
    let client = server.client().await;
    load(&client).await;
    for (name, definition) in VIEWS {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {definition}"))
            .await
            .unwrap_or_else(|error| panic!("CREATE {name}: {error}"));
    }
    check_views(&client, VIEWS).await;

    let creator = server.client().await;
    let (name, definition) = INTERRUPTED;
    let create = spawn(async move {
        creator
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {definition}"))
            .await
    });
    // Kill once the server logs the first committed backfill epoch, before the last.
    let progress = format!("backfill in progress view={name}");
    let deadline = Instant::now() + BACKFILL_PROGRESS_TIMEOUT;
    while !server.log_tail().contains(&progress) {
        assert!(
            Instant::now() < deadline,
            "no backfill progress for {name}\n{}",
            server.log_tail()
        );
        sleep(LOG_POLL_INTERVAL).await;
    }
    server.kill9();
    let _ = create.await;
    server.restart().await;
    let client = server.client().await;

    // Its catalog entry was durable before the backfill began: the restart backfills it again.
    let mut views = VIEWS.to_vec();
    views.push(INTERRUPTED);
    check_views(&client, &views).await;

    client
        .batch_execute(
            "DELETE FROM events WHERE id % 5 = 0;
             UPDATE events SET v = v + 1 WHERE id % 7 = 0;
             INSERT INTO events VALUES (1000000, 1, 123, 'tag-new');
             UPDATE groups SET label = 'relabelled' WHERE g = 3",
        )
        .await
        .expect("changes after the restart");
    check_views(&client, &views).await;
}
