//! Nexmark throughput (issue #15, proof 4): events from the `nexmark`
//! crate (deterministic: a fixed `base_time`), COPYed at full speed into
//! RisingWave's Nexmark tables in batches of `BATCH_EVENTS` events, with
//! the corpus's Nexmark queries (`shared/corpus/nexmark/views`) as
//! materialized views: none (the ingest alone), each query alone, and all
//! together, each on a fresh server. Reports events/s of wall time and
//! events per CPU-second of the server.

use std::path::{Path, PathBuf};
use std::time::Instant;

use nexmark::event::Event;
use nexmark::EventGenerator;
use tokio_postgres::Client;

use super::{bench_shards, copy, Server};

/// Events per batch: the three tables' rows of these events are COPYed
/// one table after the other, each COPY its own transaction.
const BATCH_EVENTS: usize = 10_000;

/// 2023-11-14 22:13:20 UTC: every run generates the same events.
const BASE_TIME_MILLIS: u64 = 1_700_000_000_000;

const MILLIS_PER_DAY: u64 = 86_400_000;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/nexmark")
}

/// The statements of a sqllogictest part (each after `statement ok`).
fn statements(path: &Path) -> Vec<String> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let mut statements = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "statement ok" {
            continue;
        }
        let statement: Vec<&str> = lines
            .by_ref()
            .take_while(|line| !line.trim().is_empty())
            .collect();
        statements.push(statement.join("\n"));
    }
    statements
}

/// The queries' view definitions, by query name, in numeric order.
fn queries() -> Vec<(String, Vec<String>)> {
    let mut queries: Vec<(String, Vec<String>)> = std::fs::read_dir(corpus().join("views"))
        .expect("the Nexmark corpus beside the repository")
        .map(|entry| entry.expect("a directory entry").path())
        .filter_map(|path| {
            let name = path
                .file_name()?
                .to_str()?
                .strip_suffix(".slt.part")?
                .to_string();
            Some((name, statements(&path)))
        })
        .collect();
    let number = |name: &str| -> u32 {
        name.trim_start_matches('q')
            .split('_')
            .next()
            .and_then(|digits| digits.parse().ok())
            .unwrap_or(u32::MAX)
    };
    queries.sort_by_key(|(name, _)| number(name));
    queries
}

/// `YYYY-MM-DD HH:MM:SS.mmm` of a millisecond timestamp (UTC, after 1970).
fn timestamp_text(millis: u64) -> String {
    let days = (millis / MILLIS_PER_DAY) as i64;
    let of_day = millis % MILLIS_PER_DAY;
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}",
        of_day / 3_600_000,
        of_day / 60_000 % 60,
        of_day / 1_000 % 60,
        of_day % 1_000
    )
}

/// COPY's text form of a value: tabs, newlines and backslashes escaped.
fn field(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
}

/// One batch's rows, as COPY text per table.
#[derive(Default)]
struct Batch {
    persons: Vec<String>,
    auctions: Vec<String>,
    bids: Vec<String>,
}

fn batches(events: usize) -> Vec<Batch> {
    let config = nexmark::config::NexmarkConfig {
        base_time: BASE_TIME_MILLIS,
        ..Default::default()
    };
    let mut batches = Vec::new();
    let mut batch = Batch::default();
    for (index, event) in EventGenerator::new(config).take(events).enumerate() {
        match event {
            Event::Person(person) => batch.persons.push(format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                person.id,
                field(&person.name),
                field(&person.email_address),
                field(&person.credit_card),
                field(&person.city),
                field(&person.state),
                timestamp_text(person.date_time),
                field(&person.extra)
            )),
            Event::Auction(auction) => batch.auctions.push(format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                auction.id,
                field(&auction.item_name),
                field(&auction.description),
                auction.initial_bid,
                auction.reserve,
                timestamp_text(auction.date_time),
                timestamp_text(auction.expires),
                auction.seller,
                auction.category,
                field(&auction.extra)
            )),
            Event::Bid(bid) => batch.bids.push(format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                bid.auction,
                bid.bidder,
                bid.price,
                field(&bid.channel),
                field(&bid.url),
                timestamp_text(bid.date_time),
                field(&bid.extra)
            )),
        }
        if (index + 1) % BATCH_EVENTS == 0 {
            batches.push(std::mem::take(&mut batch));
        }
    }
    if !batch.persons.is_empty() || !batch.auctions.is_empty() || !batch.bids.is_empty() {
        batches.push(batch);
    }
    batches
}

/// One run's figures: events/s of wall time, events per server
/// CPU-second; or why its views were refused.
enum Run {
    Measured {
        per_second: f64,
        per_cpu_second: f64,
    },
    Refused(String),
}

/// A fresh server with the Nexmark tables and `views`, loaded with
/// `batches`.
async fn run(views: &[String], batches: &[Batch], events: usize) -> Run {
    let server = Server::start();
    let client = server.client().await;
    for statement in statements(&corpus().join("create_tables.slt.part")) {
        client
            .batch_execute(&statement)
            .await
            .expect("Nexmark table");
    }
    for statement in views {
        if let Err(error) = client.batch_execute(statement).await {
            let message = error
                .as_db_error()
                .map_or_else(|| error.to_string(), |db| db.message().to_string());
            return Run::Refused(message);
        }
    }
    let ticks = server.cpu_ticks();
    let started = Instant::now();
    for batch in batches {
        load(&client, "person", &batch.persons).await;
        load(&client, "auction", &batch.auctions).await;
        load(&client, "bid", &batch.bids).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    // Clock ticks are 1/100 s.
    let cpu_seconds = (server.cpu_ticks() - ticks) as f64 / 100.0;
    Run::Measured {
        per_second: events as f64 / seconds,
        per_cpu_second: events as f64 / cpu_seconds.max(0.01),
    }
}

async fn load(client: &Client, table: &str, rows: &[String]) {
    if rows.is_empty() {
        return;
    }
    copy(
        client,
        &format!("COPY {table} FROM STDIN"),
        rows.iter().cloned(),
    )
    .await;
}

pub(super) async fn nexmark_figures(events: usize) {
    // The rows' timestamps are what the queries window by.
    assert_eq!(timestamp_text(0), "1970-01-01 00:00:00.000");
    assert_eq!(timestamp_text(951_782_400_000), "2000-02-29 00:00:00.000");
    assert_eq!(timestamp_text(1_700_000_000_123), "2023-11-14 22:13:20.123");
    let batches = batches(events);
    let queries = queries();
    println!(
        "\n## Nexmark, {events} events in batches of {BATCH_EVENTS}, {} shard(s)\n",
        bench_shards()
    );
    println!("| views | events/s | events per server CPU-second |");
    println!("|---|---|---|");
    let print = |name: &str, run: &Run| match run {
        Run::Measured {
            per_second,
            per_cpu_second,
        } => println!("| {name} | {per_second:.0} | {per_cpu_second:.0} |"),
        Run::Refused(message) => println!("| {name} | refused: {message} | |"),
    };
    print("none (the ingest alone)", &run(&[], &batches, events).await);
    let mut maintainable = Vec::new();
    let mut count = 0;
    for (name, views) in queries {
        let outcome = run(&views, &batches, events).await;
        print(&name, &outcome);
        if let Run::Measured { .. } = outcome {
            maintainable.extend(views);
            count += 1;
        }
    }
    let outcome = run(&maintainable, &batches, events).await;
    print(&format!("the {count} above together"), &outcome);
}
