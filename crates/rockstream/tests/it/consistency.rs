//! Goal: every read sees one committed state across all tables and views, whichever shards hold
//! them: a query over several views and tables of different shards never sees a transaction on
//! some and not on others.
//!
//! Method: `accounts` rows (spread over the shards by their key) start with a known total; writer
//! sessions commit transfers, each moving an amount between two random accounts in one
//! transaction (so the total is preserved by every transaction, and most transfers touch two
//! shards); reader sessions meanwhile read, in one statement, the total from the table and from
//! two views (one grouped by branch, one global). Every read must show the initial total three
//! times. Runs at the suite's shard count (`ROCKSTREAM_TEST_SHARDS`; CI runs 1 and 4).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::harness::server::TestServer;
use crate::harness::{sqlstate, test_seed};

const ACCOUNTS: i64 = 64;
const BRANCHES: i64 = 5;
const OPENING_BALANCE: i64 = 1_000;
const WRITERS: usize = 3;
const TRANSFERS_PER_WRITER: usize = 60;
const READERS: usize = 2;

const CHECK: &str = "SELECT (SELECT SUM(balance) FROM accounts), \
     (SELECT SUM(total) FROM branch_totals), (SELECT total FROM grand_total)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_see_every_transfer_on_all_shards_or_on_none() {
    let seed = test_seed();
    println!("consistency test seed {seed} (replay with ROCKSTREAM_TEST_SEED={seed})");
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE accounts (id BIGINT PRIMARY KEY, branch BIGINT NOT NULL, \
             balance BIGINT NOT NULL)",
        )
        .await
        .expect("create table");
    let values: Vec<String> = (0..ACCOUNTS)
        .map(|id| format!("({id}, {}, {OPENING_BALANCE})", id % BRANCHES))
        .collect();
    client
        .batch_execute(&format!(
            "INSERT INTO accounts VALUES {}",
            values.join(", ")
        ))
        .await
        .expect("open the accounts");
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW branch_totals AS \
                 SELECT branch, SUM(balance) AS total FROM accounts GROUP BY branch; \
             CREATE MATERIALIZED VIEW grand_total AS SELECT SUM(balance) AS total FROM accounts",
        )
        .await
        .expect("create the views");
    let expected = (ACCOUNTS * OPENING_BALANCE).to_string();

    let writing = Arc::new(AtomicBool::new(true));
    let reads = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let config = server.config();
            let writing = Arc::clone(&writing);
            let reads = Arc::clone(&reads);
            let expected = expected.clone();
            crate::harness::spawn(async move {
                let client = crate::harness::oracle::connect(&config)
                    .await
                    .expect("reader connects");
                let mut violations = Vec::new();
                while writing.load(Ordering::Relaxed) {
                    let rows = client.simple_query(CHECK).await.expect("reader's query");
                    let Some(row) = rows.iter().find_map(|message| match message {
                        tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
                        _ => None,
                    }) else {
                        panic!("the check returned no row");
                    };
                    let seen: Vec<&str> = (0..3).map(|i| row.get(i).unwrap_or("NULL")).collect();
                    if seen.iter().any(|total| *total != expected) {
                        violations.push(seen.join(" / "));
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                violations
            })
        })
        .collect();

    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let config = server.config();
            crate::harness::spawn(async move {
                let client = crate::harness::oracle::connect(&config)
                    .await
                    .expect("writer connects");
                let mut random = StdRng::seed_from_u64(seed ^ writer as u64);
                let mut committed = 0;
                for _ in 0..TRANSFERS_PER_WRITER {
                    let from = random.random_range(0..ACCOUNTS);
                    let to = (from + random.random_range(1..ACCOUNTS)) % ACCOUNTS;
                    let amount = random.random_range(1..50);
                    let transfer = format!(
                        "BEGIN; \
                         UPDATE accounts SET balance = balance - {amount} WHERE id = {from}; \
                         UPDATE accounts SET balance = balance + {amount} WHERE id = {to}; \
                         COMMIT"
                    );
                    match client.batch_execute(&transfer).await {
                        Ok(()) => committed += 1,
                        // Two writers changed one account at once: this one is refused whole.
                        Err(error) if sqlstate(&error) == "40001" => {
                            let _ = client.batch_execute("ROLLBACK").await;
                        }
                        Err(error) => panic!("transfer failed: {error}"),
                    }
                }
                committed
            })
        })
        .collect();
    let mut committed = 0;
    for writer in writers {
        committed += writer.await.expect("a writer panicked");
    }
    writing.store(false, Ordering::Relaxed);
    let mut violations = Vec::new();
    for reader in readers {
        violations.extend(reader.await.expect("a reader panicked"));
    }
    let reads = reads.load(Ordering::Relaxed);
    println!("{committed} transfers committed, {reads} consistent reads checked");
    assert!(committed > 0, "no transfer committed");
    assert!(reads > 0, "no read ran while transfers committed");
    assert!(
        violations.is_empty(),
        "{} of {reads} reads saw a partial transfer (table / by branch / global): {:?}",
        violations.len(),
        &violations[..violations.len().min(5)]
    );
    // The last state, once more, from a fresh session.
    let rows = crate::harness::compare::fetch_text_rows(&client, CHECK)
        .await
        .expect("final check");
    assert_eq!(
        rows,
        vec![vec![
            Some(expected.clone()),
            Some(expected.clone()),
            Some(expected)
        ]]
    );
}
