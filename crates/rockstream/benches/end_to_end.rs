//! End-to-end benchmarks over the PostgreSQL protocol (issue #2 figures).
//!
//! Goal: measure what a user sees — commit-to-visible latency, ingest
//! throughput with views maintained, peak memory — on a release build.
//! Method: start `rockstream start` on fresh storage, drive it with
//! tokio-postgres, report medians and percentiles; optionally run the same
//! work on PostgreSQL with `REFRESH MATERIALIZED VIEW` after each commit.
//!
//! `cargo bench -p rockstream --bench end_to_end`
//! Environment: `ROCKSTREAM_BENCH_ORDERS` (default 1000000),
//! `ROCKSTREAM_BENCH_GROUPS` (default 5000000), `ROCKSTREAM_BENCH_BACKFILL_ROWS`
//! (default 5000000), `ROCKSTREAM_BENCH_READ_ROWS` (default 10000000),
//! `ROCKSTREAM_BENCH_PG_URL` (a tokio-postgres connection string; enables the
//! PostgreSQL comparison), `ROCKSTREAM_BENCH_SECTIONS` (default
//! `latency,ingest`; `backfill` measures the backfill alone, `reads` the
//! LIMIT and key lookups alone, `roundtrip` one client's round trips,
//! `drop` a DROP under a concurrent writer, `nexmark` the Nexmark queries
//! over `ROCKSTREAM_BENCH_NEXMARK_EVENTS` events, default 200000, `windows`
//! a change's cost to top-K and window views by partition count and size),
//! `ROCKSTREAM_BENCH_SHARDS` (default 1), `ROCKSTREAM_BENCH_SERVER_LOG` (a file
//! the servers' logs are appended to), `ROCKSTREAM_BENCH_DROP_BASELINE_SECS`
//! (default 10: how long the `drop` section's writer commits before the
//! DROP, for the machine's own figures over a comparable span).
// A client of the server, not engine code: it may use tokio's clock and tasks.
#![allow(clippy::disallowed_methods)]

#[path = "end_to_end/nexmark.rs"]
mod nexmark;
#[path = "end_to_end/windows.rs"]
mod windows;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::SinkExt;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

const SMALL_ORDERS: u64 = 10_000;
const CUSTOMERS: u64 = 1_000;
const UPDATE_ITERATIONS: usize = 300;
const INSERT_ITERATIONS: usize = 1_000;
const COPY_CHUNK_ROWS: u64 = 250_000;
const SETTLE_TIMEOUT: Duration = Duration::from_secs(180);
/// Quiet seconds that count as settled: longer than the 5 s between two
/// looks of SlateDB's compactor, so a compaction of the load that has not
/// started yet is not mistaken for the end of background work.
const SETTLE_QUIET_SECONDS: u32 = 6;
/// Sessions and INSERTs per session of the concurrent-commit workload.
const CONCURRENT_CLIENTS: usize = 16;
const CONCURRENT_INSERTS: u64 = 300;
/// Round trips timed per statement kind of the round-trip section.
const ROUND_TRIPS: usize = 2_000;
const REFRESH_BOTH: &str =
    "REFRESH MATERIALIZED VIEW revenue_by_region; REFRESH MATERIALIZED VIEW big_orders";
const REGIONS: [&str; 8] = ["eu", "us", "apac", "latam", "mea", "nordics", "dach", "uk"];

const SCHEMA: &str = "
CREATE TABLE customers (id BIGINT PRIMARY KEY, name TEXT NOT NULL, tier TEXT);
CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT, amount NUMERIC(12,2), region TEXT, created_at TIMESTAMP);
CREATE MATERIALIZED VIEW revenue_by_region AS
  SELECT region, COUNT(*) AS orders, SUM(amount) AS revenue, AVG(amount) AS avg_amount,
         MIN(amount) AS smallest, MAX(amount) AS largest
  FROM orders GROUP BY region;
CREATE MATERIALIZED VIEW big_orders AS
  SELECT o.id, c.name, c.tier, o.amount FROM orders o JOIN customers c ON o.customer_id = c.id WHERE o.amount > 100;";

struct Server {
    child: Child,
    _storage: tempfile::TempDir,
    port: u16,
}

/// Shards of the server under test: `ROCKSTREAM_BENCH_SHARDS`, else 1 (the
/// embedded profile).
fn bench_shards() -> u16 {
    std::env::var("ROCKSTREAM_BENCH_SHARDS")
        .ok()
        .and_then(|shards| shards.parse().ok())
        .unwrap_or(1)
}

/// Where the server's log goes: appended to `ROCKSTREAM_BENCH_SERVER_LOG`
/// if set (to explain a figure), else nowhere.
fn server_log() -> Stdio {
    let Some(path) = std::env::var_os("ROCKSTREAM_BENCH_SERVER_LOG") else {
        return Stdio::null();
    };
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_or_else(|_| Stdio::null(), Stdio::from)
}

impl Server {
    fn start() -> Server {
        let storage = tempfile::tempdir().expect("temporary storage");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("free port")
            .local_addr()
            .expect("address")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_rockstream"))
            .args(["start", "--storage"])
            .arg(storage.path())
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--shards", &bench_shards().to_string()])
            .stdout(Stdio::null())
            .stderr(server_log())
            .spawn()
            .expect("rockstream starts");
        Server {
            child,
            _storage: storage,
            port,
        }
    }

    async fn client(&self) -> Client {
        let url = format!(
            "host=127.0.0.1 port={} user=bench dbname=default",
            self.port
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match tokio_postgres::connect(&url, NoTls).await {
                Ok((client, connection)) => {
                    tokio::spawn(connection);
                    return client;
                }
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(error) => panic!("server did not start: {error}"),
            }
        }
    }

    /// CPU time the server has used so far, in clock ticks, from /proc.
    fn cpu_ticks(&self) -> u64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the parenthesised command name; utime and stime are
        // the 14th and 15th fields of the whole line.
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let field = |index: usize| {
            fields
                .get(index)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        field(11) + field(12)
    }

    /// Waits until the server's background work after a load (the last
    /// memtable flush, compaction) is done: `SETTLE_QUIET_SECONDS`
    /// consecutive seconds using under 5% of a core. Gives up after
    /// `SETTLE_TIMEOUT`.
    async fn settle(&self) -> Duration {
        let started = Instant::now();
        let mut quiet_seconds = 0;
        let mut before = self.cpu_ticks();
        while quiet_seconds < SETTLE_QUIET_SECONDS && started.elapsed() < SETTLE_TIMEOUT {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = self.cpu_ticks();
            // Clock ticks are 1/100 s: 5 ticks in a second is 5% of a core.
            quiet_seconds = if now - before < 5 {
                quiet_seconds + 1
            } else {
                0
            };
            before = now;
        }
        started.elapsed()
    }

    /// Peak resident set size of the server, from /proc.
    fn peak_rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|line| line.starts_with("VmHWM:"))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kilobytes| kilobytes.parse::<u64>().ok())
            .map(|kilobytes| kilobytes * 1024)
            .unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn order_line(id: u64) -> String {
    let amount = (id * 7919) % 50_000;
    format!(
        "{id}\t{}\t{}.{:02}\t{}\t2024-01-01 00:00:00\n",
        id % CUSTOMERS + 1,
        amount / 100,
        amount % 100,
        REGIONS[(id % 8) as usize]
    )
}

async fn copy(client: &Client, statement: &str, lines: impl Iterator<Item = String>) -> u64 {
    let sink = client.copy_in(statement).await.expect("COPY starts");
    futures::pin_mut!(sink);
    let mut buffer = String::with_capacity(1 << 20);
    for line in lines {
        buffer.push_str(&line);
        if buffer.len() > 1 << 20 {
            sink.send(Bytes::from(std::mem::take(&mut buffer)))
                .await
                .expect("COPY data");
        }
    }
    if !buffer.is_empty() {
        sink.send(Bytes::from(buffer)).await.expect("COPY data");
    }
    sink.finish().await.expect("COPY completes")
}

/// What a load does about the tour's two views.
#[derive(Clone, Copy, PartialEq)]
enum Views {
    /// Materialized views (RockStream keeps them fresh; PostgreSQL's go
    /// stale until refreshed).
    Materialized,
    /// Plain views: nothing is maintained during the load.
    Plain,
    /// Materialized views refreshed after every COPY batch: PostgreSQL
    /// keeping them fresh, by recomputing both.
    Refreshed,
}

/// Creates the tour schema and COPYs `orders` orders in batches of `batch`
/// rows, one transaction each; the wall time of the orders' load.
async fn load(client: &Client, orders: u64, views: Views, batch: u64) -> Duration {
    let schema = match views {
        Views::Plain => SCHEMA.replace("CREATE MATERIALIZED VIEW", "CREATE VIEW"),
        Views::Materialized | Views::Refreshed => SCHEMA.to_string(),
    };
    client.batch_execute(&schema).await.expect("schema");
    copy(
        client,
        "COPY customers FROM STDIN",
        (1..=CUSTOMERS).map(|id| {
            format!(
                "{id}\tcustomer {id}\t{}\n",
                ["gold", "silver", "\\N"][(id % 3) as usize]
            )
        }),
    )
    .await;
    let started = Instant::now();
    let mut loaded = 0;
    while loaded < orders {
        let end = (loaded + batch).min(orders);
        copy(
            client,
            "COPY orders FROM STDIN",
            (loaded + 1..=end).map(order_line),
        )
        .await;
        if views == Views::Refreshed {
            client.batch_execute(REFRESH_BOTH).await.expect("refresh");
        }
        loaded = end;
    }
    started.elapsed()
}

/// Commits per second and p99 commit latency of `clients` sessions each
/// committing `per_client` single-row INSERTs into `orders` at once (ids
/// from `first_id`, unused by the load).
async fn concurrent_inserts(
    clients: Vec<Client>,
    first_id: u64,
    per_client: u64,
) -> (f64, Duration) {
    let sessions = clients.len() as u64;
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(session, client)| {
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_client as usize);
                for n in 0..per_client {
                    let id = first_id + n * sessions + session as u64;
                    let begun = Instant::now();
                    client
                        .simple_query(&format!(
                            "INSERT INTO orders VALUES ({id}, {}, 150.00, 'eu', '2024-01-02')",
                            id % CUSTOMERS + 1
                        ))
                        .await
                        .expect("concurrent insert");
                    latencies.push(begun.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("insert session"));
    }
    let elapsed = started.elapsed();
    (
        latencies.len() as f64 / elapsed.as_secs_f64(),
        percentile(&mut latencies, 0.99),
    )
}

/// The ingest workloads on one system (ours or PostgreSQL).
struct Ingest {
    /// rows/s: 10k-row batches without views, with both views fresh, and
    /// 250k-row batches with both views fresh.
    plain_10k: f64,
    fresh_10k: f64,
    fresh_250k: f64,
    /// 16 sessions of single-row INSERTs (views fresh): commits/s and p99.
    concurrent: (f64, Duration),
}

/// Runs the ingest workloads, each on a fresh database from `connect`
/// (`sessions` clients of it); PostgreSQL keeps the views fresh by
/// refreshing them (`fresh`).
async fn ingest<F, Fut>(orders: u64, fresh: Views, connect: F) -> Ingest
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = (Vec<Client>, Option<Server>)>,
{
    let rate = |elapsed: Duration| orders as f64 / elapsed.as_secs_f64();
    let (clients, _server) = connect(1).await;
    let plain_10k = rate(load(&clients[0], orders, Views::Plain, 10_000).await);
    drop((clients, _server));
    let (clients, _server) = connect(1).await;
    let fresh_250k = rate(load(&clients[0], orders, fresh, COPY_CHUNK_ROWS).await);
    drop((clients, _server));
    let (mut clients, _server) = connect(1 + CONCURRENT_CLIENTS).await;
    let fresh_10k = rate(load(&clients[0], orders, fresh, 10_000).await);
    let sessions = clients.split_off(1);
    // PostgreSQL's views go stale here: it is ingest alone on its side.
    let concurrent = concurrent_inserts(sessions, 100_000_000, CONCURRENT_INSERTS).await;
    Ingest {
        plain_10k,
        fresh_10k,
        fresh_250k,
        concurrent,
    }
}

/// A fresh RockStream server and `sessions` clients of it.
async fn rockstream_sessions(sessions: usize) -> (Vec<Client>, Option<Server>) {
    let server = Server::start();
    let mut clients = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        clients.push(server.client().await);
    }
    (clients, Some(server))
}

/// `sessions` clients of the PostgreSQL at `url`, its tour tables dropped.
async fn postgres_sessions(url: &str, sessions: usize) -> (Vec<Client>, Option<Server>) {
    let mut clients = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .expect("PostgreSQL connects");
        tokio::spawn(connection);
        clients.push(client);
    }
    clients[0]
        .batch_execute("DROP TABLE IF EXISTS orders, customers CASCADE")
        .await
        .expect("drop");
    (clients, None)
}

fn rows(messages: &[SimpleQueryMessage]) -> usize {
    messages
        .iter()
        .filter(|message| matches!(message, SimpleQueryMessage::Row(_)))
        .count()
}

/// Single-row UPDATE, then read it back through both views; `refresh`
/// runs PostgreSQL's REFRESH MATERIALIZED VIEW in between. Pass `first`
/// picks which orders are updated: passes with different `first` values
/// touch different rows (104729 is prime, so the ids do not repeat).
async fn update_latencies(
    client: &Client,
    orders: u64,
    (first, iterations): (usize, usize),
    refresh: bool,
) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(iterations);
    for iteration in first as u64..(first + iterations) as u64 {
        let id = (iteration * 104_729) % orders + 1;
        let amount = 100 + (iteration * 37) % 900;
        let started = Instant::now();
        client
            .simple_query(&format!(
                "UPDATE orders SET amount = {amount}.25 WHERE id = {id}"
            ))
            .await
            .expect("update");
        if refresh {
            client.batch_execute(REFRESH_BOTH).await.expect("refresh");
        }
        let regions = client
            .simple_query("SELECT * FROM revenue_by_region")
            .await
            .expect("read view");
        let row = client
            .simple_query(&format!("SELECT amount FROM big_orders WHERE id = {id}"))
            .await
            .expect("read view");
        latencies.push(started.elapsed());
        assert!(
            rows(&regions) > 0 && rows(&row) == 1,
            "update of order {id} not visible"
        );
    }
    latencies
}

/// The `fraction` percentile of `values`; zero for none.
fn percentile(values: &mut [Duration], fraction: f64) -> Duration {
    values.sort();
    let Some(last) = values.len().checked_sub(1) else {
        return Duration::ZERO;
    };
    values[(last as f64 * fraction).round() as usize]
}

fn milliseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// One single-row INSERT of order `id`, autocommitted.
async fn insert_order(client: &Client, id: u64) {
    client
        .simple_query(&format!(
            "INSERT INTO orders VALUES ({id}, 1, 150.00, 'eu', '2024-01-02')"
        ))
        .await
        .expect("insert");
}

async fn insert_latencies(client: &Client) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(INSERT_ITERATIONS);
    for index in 0..INSERT_ITERATIONS as u64 {
        let id = 50_000_000 + index;
        let started = Instant::now();
        insert_order(client, id).await;
        let row = client
            .simple_query(&format!("SELECT * FROM big_orders WHERE id = {id}"))
            .await
            .expect("read back");
        latencies.push(started.elapsed());
        assert_eq!(
            rows(&row),
            1,
            "inserted order {id} not visible in big_orders"
        );
    }
    latencies
}

async fn memory_groups(groups: u64) -> (u64, Duration) {
    let server = Server::start();
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE events (id BIGINT PRIMARY KEY, g BIGINT, v BIGINT); CREATE MATERIALIZED VIEW per_group AS SELECT g, COUNT(*) AS n, SUM(v) AS total FROM events GROUP BY g;")
        .await
        .expect("schema");
    let started = Instant::now();
    let mut loaded = 0;
    while loaded < groups {
        let end = (loaded + COPY_CHUNK_ROWS).min(groups);
        copy(
            &client,
            "COPY events FROM STDIN",
            (loaded + 1..=end).map(|id| format!("{id}\t{id}\t{}\n", id % 97)),
        )
        .await;
        loaded = end;
    }
    let elapsed = started.elapsed();
    let count = client
        .simple_query("SELECT count(*) FROM per_group")
        .await
        .expect("count");
    if let Some(SimpleQueryMessage::Row(row)) = count.first() {
        assert_eq!(
            row.get(0),
            Some(groups.to_string().as_str()),
            "every group present"
        );
    }
    (server.peak_rss_bytes(), elapsed)
}

/// What single-row commits saw while a view was built over a large table.
struct BackfillFigures {
    backfill: Duration,
    commits: usize,
    commit_p99: Duration,
    commit_max: Duration,
}

/// Commits single-row INSERTs into `pings` on `writer`, one after another,
/// until the returned flag is set; the task returns each commit's latency.
fn ping(
    writer: Client,
    first_id: u64,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<Vec<Duration>>,
) {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer_done = std::sync::Arc::clone(&done);
    let pinger = tokio::spawn(async move {
        let mut latencies = Vec::new();
        let mut id = first_id;
        while !writer_done.load(std::sync::atomic::Ordering::Relaxed) {
            id += 1;
            let started = Instant::now();
            writer
                .simple_query(&format!("INSERT INTO pings VALUES ({id}, 'x')"))
                .await
                .expect("a single-row INSERT commits");
            latencies.push(started.elapsed());
        }
        latencies
    });
    (done, pinger)
}

/// `CREATE MATERIALIZED VIEW` over `rows` loaded rows while another session
/// commits single-row INSERTs into another table, one after another, until
/// the CREATE returns; then the view is checked complete.
async fn backfill_under_load(rows: u64) -> BackfillFigures {
    let server = Server::start();
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE events (id BIGINT PRIMARY KEY, g BIGINT, v BIGINT); \
             CREATE TABLE pings (id BIGINT PRIMARY KEY, at TEXT)",
        )
        .await
        .expect("schema");
    let mut loaded = 0;
    while loaded < rows {
        let end = (loaded + COPY_CHUNK_ROWS).min(rows);
        copy(
            &client,
            "COPY events FROM STDIN",
            (loaded + 1..=end).map(|id| format!("{id}\t{}\t{}\n", id % 1000, id % 97)),
        )
        .await;
        loaded = end;
    }
    server.settle().await;
    let (done, pinger) = ping(server.client().await, 0);
    let started = Instant::now();
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW per_g AS \
             SELECT g, COUNT(*) AS n, SUM(v) AS total FROM events GROUP BY g",
        )
        .await
        .expect("create view");
    let backfill = started.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut latencies = pinger.await.expect("writer");
    let count = client
        .simple_query("SELECT sum(n) FROM per_g")
        .await
        .expect("read view");
    if let Some(SimpleQueryMessage::Row(row)) = count.first() {
        assert_eq!(row.get(0), Some(rows.to_string().as_str()), "view complete");
    }
    BackfillFigures {
        backfill,
        commits: latencies.len(),
        commit_p99: percentile(&mut latencies, 0.99),
        commit_max: percentile(&mut latencies, 1.0),
    }
}

/// How long `DROP TABLE orders CASCADE` (1M rows, both tour views) takes,
/// and the single-row commits another session makes into another table
/// from just before the DROP until the dropped state is reclaimed.
struct DropFigures {
    /// How long the writer commits before the DROP, and its commits then.
    baseline_seconds: u64,
    baseline_commits: usize,
    baseline_p99: Duration,
    baseline_max: Duration,
    baseline_over_50ms: usize,
    drop: Duration,
    /// From the DROP until its state is deleted.
    reclaimed: Duration,
    commits: usize,
    commit_p99: Duration,
    commit_max: Duration,
    commits_over_50ms: usize,
}

/// Commits slower than the bound the DROP figure is held to (50 ms).
fn over_50ms(latencies: &[Duration]) -> usize {
    latencies
        .iter()
        .filter(|latency| **latency > Duration::from_millis(50))
        .count()
}

async fn drop_under_load(orders: u64) -> DropFigures {
    let server = Server::start();
    let client = server.client().await;
    load(&client, orders, Views::Materialized, COPY_CHUNK_ROWS).await;
    client
        .batch_execute("CREATE TABLE pings (id BIGINT PRIMARY KEY, at TEXT)")
        .await
        .expect("schema");
    server.settle().await;
    // The same writer first without a DROP, for the machine's own figures.
    let baseline_seconds = environment("ROCKSTREAM_BENCH_DROP_BASELINE_SECS", 10);
    let (done, pinger) = ping(server.client().await, 0);
    tokio::time::sleep(Duration::from_secs(baseline_seconds)).await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut baseline = pinger.await.expect("writer");
    let (done, pinger) = ping(server.client().await, 1 << 40);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    client
        .batch_execute("DROP TABLE orders CASCADE")
        .await
        .expect("drop");
    let drop = started.elapsed();
    // The reclaim runs in the background, between commits; the writer
    // keeps committing until it is done.
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let pending = client
            .simple_query("SHOW rockstream.reclaims_pending")
            .await
            .expect("show");
        let done = pending.iter().any(
            |message| matches!(message, SimpleQueryMessage::Row(row) if row.get(0) == Some("0")),
        );
        if done || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reclaimed = started.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut latencies = pinger.await.expect("writer");
    DropFigures {
        baseline_seconds,
        baseline_commits: baseline.len(),
        baseline_over_50ms: over_50ms(&baseline),
        baseline_p99: percentile(&mut baseline, 0.99),
        baseline_max: percentile(&mut baseline, 1.0),
        drop,
        reclaimed,
        commits: latencies.len(),
        commits_over_50ms: over_50ms(&latencies),
        commit_p99: percentile(&mut latencies, 0.99),
        commit_max: percentile(&mut latencies, 1.0),
    }
}

/// The rows of [`reads`]'s figures in the bench's table.
fn print_reads(table_rows: u64, limit: Duration, lookup: Duration, growth: i64) {
    println!(
        "| SELECT * LIMIT 10 / primary-key lookup median, {table_rows} rows | {:.2} ms / {:.2} ms | < 10 ms |",
        milliseconds(limit),
        milliseconds(lookup)
    );
    println!(
        "| server RSS growth over 100 such reads | {:.1} MiB | < 50 MiB |",
        growth as f64 / 1048576.0
    );
}

/// Resident set size of the server now, from /proc.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kilobytes| kilobytes.parse::<u64>().ok())
        .map(|kilobytes| kilobytes * 1024)
        .unwrap_or(0)
}

/// Median `SELECT * FROM t LIMIT 10` and primary-key lookup over
/// `table_rows` rows, and how much the server's RSS grew across them.
async fn reads(table_rows: u64) -> (Duration, Duration, i64) {
    let server = Server::start();
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE wide (id BIGINT PRIMARY KEY, g BIGINT, note TEXT)")
        .await
        .expect("schema");
    let mut loaded = 0;
    while loaded < table_rows {
        let end = (loaded + COPY_CHUNK_ROWS).min(table_rows);
        copy(
            &client,
            "COPY wide FROM STDIN",
            (loaded + 1..=end).map(|id| format!("{id}\t{}\tnote {id}\n", id % 1000)),
        )
        .await;
        loaded = end;
    }
    server.settle().await;
    let before = rss_bytes(server.child.id());
    let mut limits = Vec::new();
    let mut lookups = Vec::new();
    for iteration in 0..50u64 {
        let started = Instant::now();
        let limited = client
            .simple_query("SELECT * FROM wide LIMIT 10")
            .await
            .expect("limit");
        limits.push(started.elapsed());
        assert_eq!(rows(&limited), 10);
        let id = (iteration * 104_729) % table_rows + 1;
        let started = Instant::now();
        let found = client
            .simple_query(&format!("SELECT * FROM wide WHERE id = {id}"))
            .await
            .expect("lookup");
        lookups.push(started.elapsed());
        assert_eq!(rows(&found), 1);
    }
    let growth = rss_bytes(server.child.id()) as i64 - before as i64;
    (
        percentile(&mut limits, 0.5),
        percentile(&mut lookups, 0.5),
        growth,
    )
}

async fn postgres_comparison(url: &str, orders: u64) -> Option<(f64, f64)> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.ok()?;
    tokio::spawn(connection);
    client
        .batch_execute("DROP TABLE IF EXISTS orders, customers CASCADE")
        .await
        .ok()?;
    load(&client, orders, Views::Materialized, COPY_CHUNK_ROWS).await;
    client.batch_execute("ANALYZE").await.ok()?;
    let iterations = if orders > 100_000 { 10 } else { 50 };
    let mut latencies = update_latencies(&client, orders, (0, iterations), true).await;
    let median = milliseconds(percentile(&mut latencies, 0.5));
    client
        .batch_execute("DROP TABLE IF EXISTS orders, customers CASCADE")
        .await
        .ok()?;
    Some((orders as f64, median))
}

fn environment(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let sections =
        std::env::var("ROCKSTREAM_BENCH_SECTIONS").unwrap_or_else(|_| "latency,ingest".into());
    let large = environment("ROCKSTREAM_BENCH_ORDERS", 1_000_000);
    if sections.contains("latency") {
        latency_and_memory(large).await;
    }
    if sections.contains("ingest") {
        ingest_figures(large).await;
    }
    if sections.contains("roundtrip") {
        round_trip_figures().await;
    }
    if sections.contains("reads") {
        let rows = environment("ROCKSTREAM_BENCH_READ_ROWS", 10_000_000);
        let (limit, lookup, growth) = reads(rows).await;
        println!("\n## Reads, {} shard(s)\n", bench_shards());
        println!("| figure | value | target |");
        println!("|---|---|---|");
        print_reads(rows, limit, lookup, growth);
    }
    if sections.contains("drop") {
        let dropped = drop_under_load(large).await;
        println!(
            "\n## DROP under a concurrent writer, {} shard(s)\n",
            bench_shards()
        );
        println!(
            "| DROP TABLE orders CASCADE ({large} rows, both tour views) | {:.1} ms | < 100 ms |",
            milliseconds(dropped.drop)
        );
        println!(
            "| single-row INSERTs into another table meanwhile, until reclaimed ({:.1} s): count, over 50 ms, p99, slowest | {}, {}, {:.1} ms, {:.1} ms | < 50 ms |",
            dropped.reclaimed.as_secs_f64(),
            dropped.commits,
            dropped.commits_over_50ms,
            milliseconds(dropped.commit_p99),
            milliseconds(dropped.commit_max)
        );
        println!(
            "| the same INSERTs over {} s before the DROP: count, over 50 ms, p99, slowest | {}, {}, {:.1} ms, {:.1} ms | |",
            dropped.baseline_seconds,
            dropped.baseline_commits,
            dropped.baseline_over_50ms,
            milliseconds(dropped.baseline_p99),
            milliseconds(dropped.baseline_max)
        );
    }
    if sections.contains("windows") {
        windows::window_figures().await;
    }
    if sections.contains("nexmark") {
        let events = environment("ROCKSTREAM_BENCH_NEXMARK_EVENTS", 200_000);
        nexmark::nexmark_figures(events as usize).await;
    }
    if sections.contains("backfill") {
        let rows = environment("ROCKSTREAM_BENCH_BACKFILL_ROWS", 5_000_000);
        let backfill = backfill_under_load(rows).await;
        println!("\n## Backfill, {} shard(s)\n", bench_shards());
        print_backfill(rows, &backfill);
    }
}

fn print_backfill(rows: u64, backfill: &BackfillFigures) {
    println!(
        "| CREATE MATERIALIZED VIEW over {rows} rows, while single-row INSERTs commit | {:.1} s | |",
        backfill.backfill.as_secs_f64()
    );
    println!(
        "| single-row INSERTs during that backfill: count, p99, slowest | {}, {:.1} ms, {:.1} ms | slowest < 200 ms |",
        backfill.commits,
        milliseconds(backfill.commit_p99),
        milliseconds(backfill.commit_max)
    );
}

/// The ingest workloads (issue "Shards and exchange", point 6) on
/// RockStream and, with `ROCKSTREAM_BENCH_PG_URL`, on PostgreSQL.
async fn ingest_figures(orders: u64) {
    let ours = ingest(orders, Views::Materialized, rockstream_sessions).await;
    let theirs = match std::env::var("ROCKSTREAM_BENCH_PG_URL") {
        Ok(url) => {
            let connect = |sessions| {
                let url = url.clone();
                async move { postgres_sessions(&url, sessions).await }
            };
            Some(ingest(orders, Views::Refreshed, connect).await)
        }
        Err(_) => None,
    };
    println!(
        "\n## Ingest, {orders} orders, {} shard(s)\n",
        bench_shards()
    );
    println!("PostgreSQL keeps the views fresh with REFRESH MATERIALIZED VIEW (both) after each batch; its 16-session INSERTs leave them stale.\n");
    println!("| workload | RockStream | PostgreSQL | RockStream / PostgreSQL |");
    println!("|---|---|---|---|");
    let row = |name: &str, ours: f64, theirs: Option<f64>, unit: &str| match theirs {
        Some(theirs) => println!(
            "| {name} | {ours:.0} {unit} | {theirs:.0} {unit} | {:.2} |",
            ours / theirs
        ),
        None => println!("| {name} | {ours:.0} {unit} | | |"),
    };
    let other = theirs.as_ref();
    row(
        "COPY 10k-row batches, no views",
        ours.plain_10k,
        other.map(|t| t.plain_10k),
        "rows/s",
    );
    row(
        "COPY 10k-row batches, both views fresh",
        ours.fresh_10k,
        other.map(|t| t.fresh_10k),
        "rows/s",
    );
    row(
        "COPY 250k-row batches, both views fresh",
        ours.fresh_250k,
        other.map(|t| t.fresh_250k),
        "rows/s",
    );
    row(
        "16 sessions, single-row INSERTs",
        ours.concurrent.0,
        other.map(|t| t.concurrent.0),
        "commits/s",
    );
    match other {
        Some(theirs) => println!(
            "| 16 sessions, commit p99 | {:.1} ms | {:.1} ms | |",
            milliseconds(ours.concurrent.1),
            milliseconds(theirs.concurrent.1)
        ),
        None => println!(
            "| 16 sessions, commit p99 | {:.1} ms | | |",
            milliseconds(ours.concurrent.1)
        ),
    }
}

/// The latency, memory, backfill and read figures.
async fn latency_and_memory(large: u64) {
    let groups = environment("ROCKSTREAM_BENCH_GROUPS", 5_000_000);

    // Each size is measured twice: right after the load, while the server
    // still flushes and compacts it, and once that background work is done.
    let after_load = (0, UPDATE_ITERATIONS);
    let settled_pass = (UPDATE_ITERATIONS, UPDATE_ITERATIONS);
    let small_server = Server::start();
    let small_client = small_server.client().await;
    load(
        &small_client,
        SMALL_ORDERS,
        Views::Materialized,
        COPY_CHUNK_ROWS,
    )
    .await;
    let mut small = update_latencies(&small_client, SMALL_ORDERS, after_load, false).await;
    let small_settle = small_server.settle().await;
    let mut small_settled =
        update_latencies(&small_client, SMALL_ORDERS, settled_pass, false).await;
    let mut inserts = insert_latencies(&small_client).await;
    drop(small_client);
    drop(small_server);

    let large_server = Server::start();
    let large_client = large_server.client().await;
    let load_time = load(&large_client, large, Views::Materialized, COPY_CHUNK_ROWS).await;
    let mut large_latencies = update_latencies(&large_client, large, after_load, false).await;
    let large_settle = large_server.settle().await;
    let mut large_settled = update_latencies(&large_client, large, settled_pass, false).await;
    let large_rss = large_server.peak_rss_bytes();
    drop(large_client);
    drop(large_server);

    let (group_rss, group_time) = memory_groups(groups).await;
    let backfill_rows = environment("ROCKSTREAM_BENCH_BACKFILL_ROWS", 5_000_000);
    let backfill = backfill_under_load(backfill_rows).await;
    let read_rows = environment("ROCKSTREAM_BENCH_READ_ROWS", 10_000_000);
    let (limit_median, lookup_median, read_growth) = reads(read_rows).await;
    let small_median = percentile(&mut small, 0.5);
    let large_median = percentile(&mut large_latencies, 0.5);
    let small_settled_median = percentile(&mut small_settled, 0.5);
    let large_settled_median = percentile(&mut large_settled, 0.5);
    println!("## RockStream end-to-end (release build)\n");
    println!("| figure | value | target |");
    println!("|---|---|---|");
    println!(
        "| UPDATE→visible median, {SMALL_ORDERS} orders, settled | {:.2} ms | |",
        milliseconds(small_settled_median)
    );
    println!(
        "| UPDATE→visible median, {large} orders, settled | {:.2} ms | |",
        milliseconds(large_settled_median)
    );
    println!(
        "| ratio large / small, settled | {:.2} | ≤ 1.5 |",
        large_settled_median.as_secs_f64() / small_settled_median.as_secs_f64()
    );
    println!(
        "| UPDATE→visible p99, {large} orders, settled | {:.2} ms | |",
        milliseconds(percentile(&mut large_settled, 0.99))
    );
    println!(
        "| time to settle after the load, {SMALL_ORDERS} / {large} orders | {:.0} s / {:.0} s | |",
        small_settle.as_secs_f64(),
        large_settle.as_secs_f64()
    );
    println!(
        "| UPDATE→visible median right after the load, {SMALL_ORDERS} / {large} orders | {:.2} ms / {:.2} ms (ratio {:.2}) | |",
        milliseconds(small_median),
        milliseconds(large_median),
        large_median.as_secs_f64() / small_median.as_secs_f64()
    );
    println!(
        "| UPDATE→visible p99 right after the load, {large} orders | {:.2} ms | |",
        milliseconds(percentile(&mut large_latencies, 0.99))
    );
    println!(
        "| INSERT + read-back p50 | {:.2} ms | ≤ 5 ms |",
        milliseconds(percentile(&mut inserts, 0.5))
    );
    println!(
        "| INSERT + read-back p99 | {:.2} ms | ≤ 25 ms |",
        milliseconds(percentile(&mut inserts, 0.99))
    );
    println!(
        "| COPY {large} orders, both views maintained | {:.0} rows/s ({:.1} s) | ≥ 200000 rows/s |",
        large as f64 / load_time.as_secs_f64(),
        load_time.as_secs_f64()
    );
    println!(
        "| peak RSS during the {large}-order run | {:.0} MiB | |",
        large_rss as f64 / 1048576.0
    );
    println!(
        "| peak RSS, GROUP BY with {groups} groups | {:.0} MiB (load {:.1} s) | < 2048 MiB |",
        group_rss as f64 / 1048576.0,
        group_time.as_secs_f64()
    );

    print_backfill(backfill_rows, &backfill);
    print_reads(read_rows, limit_median, lookup_median, read_growth);

    if let Ok(url) = std::env::var("ROCKSTREAM_BENCH_PG_URL") {
        println!("\n## PostgreSQL, UPDATE + REFRESH MATERIALIZED VIEW + read (median)\n");
        println!("| orders | PostgreSQL | RockStream | PostgreSQL / RockStream |");
        println!("|---|---|---|---|");
        for (orders, ours) in [
            (SMALL_ORDERS, small_settled_median),
            (large, large_settled_median),
        ] {
            match postgres_comparison(&url, orders).await {
                Some((_, theirs)) => println!(
                    "| {orders} | {theirs:.2} ms | {:.2} ms | {:.1}× |",
                    milliseconds(ours),
                    theirs / milliseconds(ours)
                ),
                None => println!("| {orders} | failed to run | | |"),
            }
        }
    }
}

/// Medians of one client's round trips: `SELECT 1`, a primary-key lookup
/// and a durable single-row INSERT (both views maintained), each as a
/// simple query and as a prepared statement (the extended protocol).
struct RoundTrips {
    select_simple: Duration,
    select_prepared: Duration,
    lookup_simple: Duration,
    lookup_prepared: Duration,
    insert_simple: Duration,
    insert_prepared: Duration,
}

/// One figure of [`RoundTrips`].
type RoundTripFigure = fn(&RoundTrips) -> Duration;

async fn round_trips(client: &Client) -> RoundTrips {
    load(client, SMALL_ORDERS, Views::Materialized, SMALL_ORDERS).await;
    let median = |mut samples: Vec<Duration>| percentile(&mut samples, 0.5);
    let mut samples = Vec::with_capacity(ROUND_TRIPS);
    for _ in 0..ROUND_TRIPS {
        let started = Instant::now();
        client.simple_query("SELECT 1").await.expect("SELECT 1");
        samples.push(started.elapsed());
    }
    let select_simple = median(std::mem::take(&mut samples));
    let select = client.prepare("SELECT 1").await.expect("prepare");
    for _ in 0..ROUND_TRIPS {
        let started = Instant::now();
        client.query(&select, &[]).await.expect("SELECT 1");
        samples.push(started.elapsed());
    }
    let select_prepared = median(std::mem::take(&mut samples));
    for index in 0..ROUND_TRIPS as i64 {
        let id = index * 7 % SMALL_ORDERS as i64 + 1;
        let started = Instant::now();
        let messages = client
            .simple_query(&format!("SELECT * FROM orders WHERE id = {id}"))
            .await
            .expect("lookup");
        samples.push(started.elapsed());
        let rows = messages
            .iter()
            .filter(|message| matches!(message, SimpleQueryMessage::Row(_)))
            .count();
        assert_eq!(rows, 1, "order {id}");
    }
    let lookup_simple = median(std::mem::take(&mut samples));
    let lookup = client
        .prepare("SELECT * FROM orders WHERE id = $1")
        .await
        .expect("prepare");
    for index in 0..ROUND_TRIPS as i64 {
        let id = index * 7 % SMALL_ORDERS as i64 + 1;
        let started = Instant::now();
        let rows = client.query(&lookup, &[&id]).await.expect("lookup");
        samples.push(started.elapsed());
        assert_eq!(rows.len(), 1, "order {id}");
    }
    let lookup_prepared = median(std::mem::take(&mut samples));
    for index in 0..ROUND_TRIPS as u64 {
        let id = 60_000_000 + index;
        let started = Instant::now();
        insert_order(client, id).await;
        samples.push(started.elapsed());
    }
    let insert_simple = median(std::mem::take(&mut samples));
    let insert = client
        .prepare("INSERT INTO orders (id, customer_id, region) VALUES ($1, $2, 'eu')")
        .await
        .expect("prepare");
    for index in 0..ROUND_TRIPS as i64 {
        let id = 70_000_000 + index;
        let started = Instant::now();
        client
            .execute(&insert, &[&id, &1i64])
            .await
            .expect("insert");
        samples.push(started.elapsed());
    }
    let insert_prepared = median(samples);
    RoundTrips {
        select_simple,
        select_prepared,
        lookup_simple,
        lookup_prepared,
        insert_simple,
        insert_prepared,
    }
}

async fn round_trip_figures() {
    let (clients, _server) = rockstream_sessions(1).await;
    let ours = round_trips(&clients[0]).await;
    drop((clients, _server));
    let theirs = match std::env::var("ROCKSTREAM_BENCH_PG_URL") {
        Ok(url) => {
            let (clients, _) = postgres_sessions(&url, 1).await;
            Some(round_trips(&clients[0]).await)
        }
        Err(_) => None,
    };
    println!("\n## Round trips, one client, medians of {ROUND_TRIPS}\n");
    println!("| statement | RockStream | PostgreSQL | target |");
    println!("|---|---|---|---|");
    let figures: [(&str, RoundTripFigure, &str); 6] = [
        ("SELECT 1 (simple)", |r| r.select_simple, "≤ 0.1 ms"),
        (
            "SELECT 1 (prepared)",
            |r| r.select_prepared,
            "≤ 0.1 ms, ≤ simple",
        ),
        ("primary-key lookup (simple)", |r| r.lookup_simple, ""),
        (
            "primary-key lookup (prepared)",
            |r| r.lookup_prepared,
            "≤ simple",
        ),
        (
            "single-row INSERT, durable (simple)",
            |r| r.insert_simple,
            "≤ 0.5 ms",
        ),
        (
            "single-row INSERT, durable (prepared)",
            |r| r.insert_prepared,
            "≤ 0.5 ms, ≤ simple",
        ),
    ];
    for (name, figure, target) in figures {
        let theirs = theirs
            .as_ref()
            .map(|theirs| format!("{:.3} ms", milliseconds(figure(theirs))))
            .unwrap_or_default();
        println!(
            "| {name} | {:.3} ms | {theirs} | {target} |",
            milliseconds(figure(&ours))
        );
    }
}
