//! Goal: views whose operator state is many times the arrangement cache stay
//! correct, and the cache stays within its bound while it serves reads.
//!
//! Method: a server whose arrangement cache is 64 kB per shard; 20,000
//! orders and 2,000 customers feed an inner join, an outer join with a
//! residual and a grouped aggregate with MIN/MAX (several MB of operator
//! state, over 20 times the cache). Rounds of updates, key moves, deletes
//! and inserts spread over the whole state follow, each checked view by view
//! against the view's definition run as a query. Halfway, the server
//! restarts (a cold cache) with SlateDB settings overridden through the
//! environment to 64 kB L0 tables and a 100 ms compactor poll, so the rest
//! runs over many flushed and compacted tables, with the merge operator and
//! the zero-count filter at work. The cache's counters
//! (`SHOW rockstream.arrangement_cache`) must show hits, evictions, and no
//! more bytes than its bound. A malformed override is refused at start with
//! its code.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, SimpleQueryMessage};

use crate::harness::compare::check_views;
use crate::harness::copy_in;
use crate::harness::server::{Storage, TestServer};

const ORDERS: i64 = 20_000;
const CUSTOMERS: i64 = 2_000;

const VIEWS: &[(&str, &str)] = &[
    (
        "big_orders",
        "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON o.customer_id = c.id \
         WHERE o.amount > 100",
    ),
    (
        "customer_orders",
        "SELECT c.id, c.name, o.id AS order_id FROM customers c \
         LEFT JOIN orders o ON o.customer_id = c.id AND o.amount > c.id % 500",
    ),
    (
        "per_customer",
        "SELECT customer_id, COUNT(*) AS n, SUM(amount) AS total, MIN(amount) AS smallest, \
         MAX(amount) AS largest FROM orders GROUP BY customer_id",
    ),
];

fn order_line(id: i64) -> String {
    let amount = (id * 7919) % 50_000;
    format!(
        "{id}\t{}\t{}.{:02}\n",
        id % CUSTOMERS + 1,
        amount / 100,
        amount % 100
    )
}

/// The cache's counters, from `SHOW rockstream.arrangement_cache`.
async fn cache_counters(client: &Client) -> Vec<(String, f64)> {
    let messages = client
        .simple_query("SHOW rockstream.arrangement_cache")
        .await
        .expect("SHOW");
    let text = messages
        .iter()
        .find_map(|message| match message {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .expect("a row");
    text.split_whitespace()
        .map(|pair| {
            let (name, value) = pair.split_once('=').expect("name=value");
            (name.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

fn counter(counters: &[(String, f64)], name: &str) -> f64 {
    counters
        .iter()
        .find(|(counter, _)| counter == name)
        .map(|(_, value)| *value)
        .unwrap_or_else(|| panic!("no counter {name} in {counters:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_twenty_times_the_arrangement_cache_stay_correct() {
    let mut server = TestServer::start_with(Storage::new(), &["--arrangement-cache", "64kB"]).await;
    let mut client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE customers (id BIGINT PRIMARY KEY, name TEXT NOT NULL); \
             CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT, amount NUMERIC(12,2))",
        )
        .await
        .expect("schema");
    for (name, definition) in VIEWS {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {definition}"))
            .await
            .expect("view");
    }
    let customers: String = (1..=CUSTOMERS)
        .map(|id| format!("{id}\tcustomer {id}\n"))
        .collect();
    copy_in(&client, "COPY customers FROM STDIN", customers)
        .await
        .expect("COPY customers");
    for chunk in 0..4 {
        let lines: String = (chunk * ORDERS / 4 + 1..=(chunk + 1) * ORDERS / 4)
            .map(order_line)
            .collect();
        copy_in(&client, "COPY orders FROM STDIN", lines)
            .await
            .expect("COPY orders");
    }
    check_views(&client, VIEWS).await;
    for round in 0..4 {
        if round == 2 {
            server.set_env("ROCKSTREAM_SLATEDB_L0_SST_SIZE_BYTES", Some("65536".into()));
            server.set_env(
                "ROCKSTREAM_SLATEDB_COMPACTOR_OPTIONS.POLL_INTERVAL",
                Some("100ms".into()),
            );
            server.restart().await;
            client = server.client().await;
            check_views(&client, VIEWS).await;
        }
        let statements = [
            format!("UPDATE orders SET amount = amount + 37 WHERE id % 11 = {round}"),
            format!(
                "UPDATE orders SET customer_id = (customer_id * 7) % {CUSTOMERS} + 1 \
                 WHERE id % 13 = {round}"
            ),
            format!("DELETE FROM orders WHERE id % 17 = {round}"),
            format!("UPDATE customers SET name = name || 'x' WHERE id % 5 = {round}"),
            format!("DELETE FROM customers WHERE id % 97 = {round}"),
        ];
        for statement in &statements {
            client.batch_execute(statement).await.expect(statement);
        }
        let first = ORDERS + round * 1_000 + 1;
        let lines: String = (first..first + 1_000).map(order_line).collect();
        copy_in(&client, "COPY orders FROM STDIN", lines)
            .await
            .expect("COPY more orders");
        check_views(&client, VIEWS).await;
    }
    let counters = cache_counters(&client).await;
    assert!(counter(&counters, "hits") > 0.0, "{counters:?}");
    assert!(counter(&counters, "evictions") > 0.0, "{counters:?}");
    assert!(
        counter(&counters, "bytes") <= counter(&counters, "bytes_max"),
        "{counters:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_storage_setting_is_refused_at_start() {
    let storage = Storage::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rockstream"))
        .args(["start", "--listen", "127.0.0.1:0", "--storage"])
        .arg(storage.storage_path())
        .env("ROCKSTREAM_SLATEDB_L0_SST_SIZE_BYTES", "sixty-four")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rockstream");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rockstream started despite a malformed ROCKSTREAM_SLATEDB_ setting");
        }
        crate::harness::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("RS-5004") && stderr.contains("L0_SST_SIZE_BYTES"),
        "{stderr}"
    );
}
