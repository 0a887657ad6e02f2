//! Goal: a crash loses nothing that was acknowledged and never exposes half a transaction, and the
//! views recovered from storage equal the views PostgreSQL computes over the surviving rows.
//!
//! Method: writer tasks commit numbered transactions, each inserting [`ROWS_PER_TRANSACTION`] rows
//! into `ledger` and one receipt into `receipts`, while the server is killed with SIGKILL after a
//! random delay; then it restarts over the same storage and we check that
//! 1. every transaction whose COMMIT was acknowledged is present;
//! 2. every transaction is all-or-nothing: its receipt and all its ledger rows, or none of them;
//! 3. nothing appears that no writer attempted;
//! 4. each materialized view equals the same view computed by PostgreSQL over the rows that
//!    survived (loaded into a fresh oracle database).
//!
//! This repeats `ROCKSTREAM_TEST_CRASH_ITERATIONS` times (default [`ITERATIONS_DEFAULT`]) over the
//! same storage; the kill delays come from `ROCKSTREAM_TEST_SEED` (printed at the start). With
//! several shards, every other iteration also arms the engine's failpoint that aborts the server
//! between the coordinator's commit of an epoch and the other shards' (after a random number of
//! such epochs), the one moment a transaction over several shards is durable on some of them only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::harness::compare::{compare_query, fetch_text_rows};
use crate::harness::oracle::{connect, describe_error, OracleDatabase};
use crate::harness::server::{test_shards, TestServer};
use crate::harness::{environment_count, test_seed};

const ITERATIONS_DEFAULT: usize = 3;
const WRITERS: usize = 3;
const ROWS_PER_TRANSACTION: i64 = 3;
/// The kill lands this long after the writers start.
const KILL_DELAY_MILLISECONDS: std::ops::Range<u64> = 50..1_500;
/// Bound on any one statement of a writer, so a hung server fails the test instead of hanging it.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(20);
const WRITER_JOIN_TIMEOUT: Duration = Duration::from_secs(30);
const ORACLE_INSERT_BATCH_ROWS: usize = 500;
/// The engine's failpoint (see the module docs), and the range of its epoch count.
const FAILPOINT: &str = "ROCKSTREAM_FAILPOINT_BETWEEN_SHARD_COMMITS";
const FAILPOINT_EPOCHS: std::ops::Range<u64> = 3..40;
/// Bound on the wait for the failpoint to abort the server.
const FAILPOINT_TIMEOUT: Duration = Duration::from_secs(30);

const TABLES: &[&str] = &[
    "CREATE TABLE ledger (id BIGINT PRIMARY KEY, transaction_id BIGINT NOT NULL, \
     writer BIGINT NOT NULL, amount BIGINT NOT NULL)",
    "CREATE TABLE receipts (transaction_id BIGINT PRIMARY KEY, writer BIGINT NOT NULL, \
     rows_written BIGINT NOT NULL)",
];

const VIEWS: &[(&str, &str)] = &[
    (
        "ledger_by_writer",
        "SELECT writer, COUNT(*) AS entries, SUM(amount) AS total FROM ledger GROUP BY writer",
    ),
    (
        "receipted_totals",
        "SELECT r.writer, COUNT(*) AS entries, SUM(l.amount) AS total FROM receipts r \
         JOIN ledger l ON l.transaction_id = r.transaction_id GROUP BY r.writer",
    ),
    // Arrays in view state (RFC 0016).
    (
        "ledger_rows_by_transaction",
        "SELECT transaction_id, array_agg(id ORDER BY id) AS ids, array_agg(amount ORDER BY id) AS amounts \
         FROM ledger GROUP BY transaction_id",
    ),
];

/// What the writers know: transactions acknowledged, and those whose fate the crash decides.
#[derive(Default)]
struct WriterJournal {
    acknowledged: BTreeSet<i64>,
    in_doubt: BTreeSet<i64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_recovery_keeps_acknowledged_transactions_whole() {
    let seed = test_seed();
    println!("crash test seed {seed} (replay with ROCKSTREAM_TEST_SEED={seed})");
    let iterations = environment_count("ROCKSTREAM_TEST_CRASH_ITERATIONS", ITERATIONS_DEFAULT);
    let mut random = StdRng::seed_from_u64(seed);

    let mut server = TestServer::start().await;
    {
        let client = server.client().await;
        for ddl in TABLES {
            execute(&client, ddl).await;
        }
        for (name, query) in VIEWS {
            execute(
                &client,
                &format!("CREATE MATERIALIZED VIEW {name} AS {query}"),
            )
            .await;
        }
    }

    let next_transaction = Arc::new(AtomicI64::new(1));
    let journal = Arc::new(Mutex::new(WriterJournal::default()));
    let mut failpoints_fired = 0;
    for iteration in 1..=iterations {
        let failpoint = (test_shards() > 1 && iteration % 2 == 1)
            .then(|| random.random_range(FAILPOINT_EPOCHS));
        if let Some(epochs) = failpoint {
            server.set_env(FAILPOINT, Some(epochs.to_string()));
            server.restart().await;
        }
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let config = server.config();
                let next_transaction = Arc::clone(&next_transaction);
                let journal = Arc::clone(&journal);
                crate::harness::spawn(async move {
                    let Ok(client) = connect(&config).await else {
                        return;
                    };
                    write_until_failure(&client, writer as i64, &next_transaction, &journal).await;
                })
            })
            .collect();
        let delay = random.random_range(KILL_DELAY_MILLISECONDS);
        if failpoint.is_some() {
            // The failpoint is the crash.
            server.wait_for_exit(FAILPOINT_TIMEOUT).await;
        } else {
            crate::harness::sleep(Duration::from_millis(delay)).await;
        }
        let fired = failpoint.is_some() && server.log_tail().contains("failpoint: aborting");
        failpoints_fired += usize::from(fired);
        server.kill9();
        for writer in writers {
            tokio::time::timeout(WRITER_JOIN_TIMEOUT, writer)
                .await
                .expect("writers stop once the server is gone")
                .expect("a writer task panicked");
        }
        server.set_env(FAILPOINT, None);
        server.restart().await;
        let client = server.client().await;
        let failure_context = match failpoint {
            Some(epochs) if fired => format!(
                "iteration {iteration}, seed {seed}, aborted between shard commits of the \
                 {epochs}th epoch over several shards"
            ),
            _ => format!("iteration {iteration}, seed {seed}, killed after {delay} ms"),
        };
        check_transactions(&client, &journal, &failure_context).await;
        check_views_against_oracle(&client, &failure_context).await;
    }
    let journal = journal
        .lock()
        .expect("no writer panicked while holding the journal");
    println!(
        "{} transactions acknowledged, {} in doubt at a crash, over {iterations} crashes \
         ({failpoints_fired} between shard commits)",
        journal.acknowledged.len(),
        journal.in_doubt.len()
    );
    let armed = (1..=iterations)
        .filter(|iteration| test_shards() > 1 && iteration % 2 == 1)
        .count();
    assert_eq!(
        failpoints_fired, armed,
        "an armed failpoint never fired: no crash landed between shard commits"
    );
}

/// Commits numbered transactions until a statement fails (the server was killed).
async fn write_until_failure(
    client: &Client,
    writer: i64,
    next_transaction: &AtomicI64,
    journal: &Mutex<WriterJournal>,
) {
    loop {
        let transaction = next_transaction.fetch_add(1, Ordering::Relaxed);
        let ledger_rows: Vec<String> = (0..ROWS_PER_TRANSACTION)
            .map(|index| {
                let id = transaction * ROWS_PER_TRANSACTION + index;
                format!(
                    "({id}, {transaction}, {writer}, {})",
                    transaction % 97 + index
                )
            })
            .collect();
        let statements = [
            "BEGIN".to_owned(),
            format!("INSERT INTO ledger VALUES {}", ledger_rows.join(", ")),
            format!(
                "INSERT INTO receipts VALUES ({transaction}, {writer}, {ROWS_PER_TRANSACTION})"
            ),
            "COMMIT".to_owned(),
        ];
        journal
            .lock()
            .expect("the journal is never poisoned")
            .in_doubt
            .insert(transaction);
        for statement in &statements {
            let outcome =
                tokio::time::timeout(STATEMENT_TIMEOUT, client.simple_query(statement)).await;
            if !matches!(outcome, Ok(Ok(_))) {
                return; // stays in doubt: the commit may or may not have landed
            }
        }
        let mut journal = journal.lock().expect("the journal is never poisoned");
        journal.in_doubt.remove(&transaction);
        journal.acknowledged.insert(transaction);
    }
}

async fn check_transactions(client: &Client, journal: &Mutex<WriterJournal>, context: &str) {
    let ledger = fetch("SELECT transaction_id, id FROM ledger", client).await;
    let receipts = fetch("SELECT transaction_id, rows_written FROM receipts", client).await;
    let mut ledger_rows_by_transaction: BTreeMap<i64, i64> = BTreeMap::new();
    for row in &ledger {
        *ledger_rows_by_transaction.entry(row[0]).or_default() += 1;
    }
    let receipted: BTreeMap<i64, i64> = receipts.iter().map(|row| (row[0], row[1])).collect();

    let journal = journal.lock().expect("the journal is never poisoned");
    for transaction in &journal.acknowledged {
        assert!(
            receipted.contains_key(transaction),
            "{context}: acknowledged transaction {transaction} has no receipt after restart"
        );
    }
    let all_transactions: BTreeSet<i64> = ledger_rows_by_transaction
        .keys()
        .chain(receipted.keys())
        .copied()
        .collect();
    for transaction in all_transactions {
        assert!(
            journal.acknowledged.contains(&transaction) || journal.in_doubt.contains(&transaction),
            "{context}: transaction {transaction} is present but no writer attempted it"
        );
        let ledger_rows = ledger_rows_by_transaction
            .get(&transaction)
            .copied()
            .unwrap_or(0);
        let receipt = receipted.get(&transaction).copied();
        assert!(
            receipt == Some(ROWS_PER_TRANSACTION) && ledger_rows == ROWS_PER_TRANSACTION,
            "{context}: transaction {transaction} is half applied: receipt {receipt:?}, \
             {ledger_rows} of {ROWS_PER_TRANSACTION} ledger rows"
        );
    }
}

/// Loads the surviving rows into a fresh oracle database and compares every view.
async fn check_views_against_oracle(client: &Client, context: &str) {
    let database = OracleDatabase::create("crash").await;
    let oracle = database.client().await;
    for ddl in TABLES {
        execute(&oracle, ddl).await;
    }
    for table in ["ledger", "receipts"] {
        let rows = fetch_text_rows(client, &format!("SELECT * FROM {table}"))
            .await
            .unwrap_or_else(|error| panic!("{context}: {error}"));
        for batch in rows.chunks(ORACLE_INSERT_BATCH_ROWS) {
            let values: Vec<String> = batch
                .iter()
                .map(|row| {
                    let values: Vec<&str> = row
                        .iter()
                        .map(|value| value.as_deref().expect("these tables have no NULLs"))
                        .collect();
                    format!("({})", values.join(", "))
                })
                .collect();
            execute(
                &oracle,
                &format!("INSERT INTO {table} VALUES {}", values.join(", ")),
            )
            .await;
        }
    }
    for (name, query) in VIEWS {
        execute(&oracle, &format!("CREATE VIEW {name} AS {query}")).await;
        compare_query(
            "postgres",
            &oracle,
            "rockstream",
            client,
            &format!("SELECT * FROM {name}"),
        )
        .await
        .unwrap_or_else(|diff| panic!("{context}: view {name} differs after recovery:\n{diff}"));
    }
}

async fn execute(client: &Client, sql: &str) {
    if let Err(error) = client.simple_query(sql).await {
        panic!("{sql}\nfailed: {}", describe_error(&error));
    }
}

/// Integer rows of `sql`.
async fn fetch(sql: &str, client: &Client) -> Vec<Vec<i64>> {
    let rows = fetch_text_rows(client, sql)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    rows.iter()
        .map(|row| {
            row.iter()
                .map(|value| {
                    let text = value.as_deref().expect("these columns are NOT NULL");
                    text.parse()
                        .unwrap_or_else(|_| panic!("{sql}: {text:?} is not an integer"))
                })
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn restart_keeps_tables_views_and_rows() {
    let storage = {
        let server = TestServer::start().await;
        let client = server.client().await;
        execute(
            &client,
            "CREATE TABLE kept (id BIGINT PRIMARY KEY, label TEXT)",
        )
        .await;
        execute(
            &client,
            "CREATE MATERIALIZED VIEW kept_count AS SELECT COUNT(*) AS rows FROM kept",
        )
        .await;
        execute(&client, "INSERT INTO kept VALUES (1, 'one'), (2, NULL)").await;
        server.storage()
        // The server is killed here, when its handle drops; the storage lives on.
    };
    let server = TestServer::start_on(storage).await;
    let client = server.client().await;
    let rows = fetch("SELECT id FROM kept", &client).await;
    assert_eq!(rows.len(), 2, "rows after restart: {rows:?}");
    let count = fetch("SELECT rows FROM kept_count", &client).await;
    assert_eq!(count, vec![vec![2]], "the view after restart");
    execute(&client, "INSERT INTO kept VALUES (3, 'three')").await;
    let count = fetch("SELECT rows FROM kept_count", &client).await;
    assert_eq!(
        count,
        vec![vec![3]],
        "the view keeps being maintained after restart"
    );
}

/// Goal: one process at a time opens a storage (its commit logs take one
/// writer): a second server on the same storage is refused with RS-5006,
/// and the first goes on serving what it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_storage_is_refused() {
    let server = TestServer::start().await;
    let client = server.client().await;
    execute(&client, "CREATE TABLE owned (id BIGINT PRIMARY KEY)").await;
    execute(&client, "INSERT INTO owned VALUES (1)").await;
    let path = server.storage().storage_path();
    let shards = test_shards().to_string();
    // It waits a while for the first one to let go, then gives up.
    let second = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_rockstream"))
            .arg("start")
            .arg("--storage")
            .arg(path)
            .args(["--listen", "127.0.0.1:0", "--shards", &shards])
            .env("NO_COLOR", "1")
            .output()
            .expect("the binary runs")
    })
    .await
    .expect("the second server ends");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success(),
        "a second server started: {stderr}"
    );
    assert!(
        stderr.contains("RS-5006") && stderr.contains("in use by another process"),
        "{stderr}"
    );
    execute(&client, "INSERT INTO owned VALUES (2)").await;
    assert_eq!(
        fetch("SELECT id FROM owned ORDER BY id", &client).await,
        vec![vec![1], vec![2]]
    );
}
