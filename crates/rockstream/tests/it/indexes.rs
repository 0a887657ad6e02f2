//! Goal: a lookup through an index (RFC 0014) finds exactly the rows PostgreSQL finds, after every
//! transaction of a random workload: inserts, updates moving rows between values and between
//! keys, deletes, NULLs, a composite index, a UNIQUE column, a table without a primary key, an
//! index created over stored rows and one dropped, and again after a restart; by one value and by
//! an `IN` list (also of primary keys); and such a lookup reads the index (its condition is pushed
//! into the scan). Catalog behaviour against PostgreSQL is
//! `tests/slt/indexes.slt`. Method: the same transactions on RockStream and on the PostgreSQL
//! oracle, then every lookup on both, compared as multisets; ids are fresh so that no statement
//! fails on either side.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::harness::compare::{compare_query, fetch_text_rows};
use crate::harness::oracle::OracleDatabase;
use crate::harness::server::TestServer;
use crate::harness::{environment_count, test_seed};

const SCHEMA: &str = "
CREATE TABLE t (id INT PRIMARY KEY, a INT, b TEXT, c INT UNIQUE);
CREATE INDEX t_a ON t (a);
CREATE INDEX t_ba ON t (b, a);
CREATE TABLE k (a INT, b TEXT);
CREATE INDEX k_a ON k USING hash (a);
";

/// Values of `a`: few, so that many rows share one.
const A_VALUES: i64 = 6;
const B_VALUES: [&str; 4] = ["'x'", "'y'", "'z'", "NULL"];

/// The workload's state: ids and `c` values are handed out once each.
struct Workload {
    random: StdRng,
    next_id: i64,
    next_c: i64,
}

impl Workload {
    fn a(&mut self) -> String {
        if self.random.random_bool(0.15) {
            "NULL".into()
        } else {
            self.random.random_range(0..A_VALUES).to_string()
        }
    }

    fn b(&mut self) -> &'static str {
        B_VALUES[self.random.random_range(0..B_VALUES.len())]
    }

    fn existing_id(&mut self) -> i64 {
        self.random.random_range(0..self.next_id.max(1))
    }

    fn statement(&mut self) -> String {
        match self.random.random_range(0..9) {
            0..=2 => {
                let rows: Vec<String> = (0..self.random.random_range(1..5))
                    .map(|_| {
                        self.next_id += 1;
                        self.next_c += 1;
                        let (id, c) = (self.next_id, self.next_c);
                        let (a, b) = (self.a(), self.b());
                        format!("({id}, {a}, {b}, {c})")
                    })
                    .collect();
                format!("INSERT INTO t VALUES {}", rows.join(", "))
            }
            3 => format!(
                "UPDATE t SET a = {} WHERE id = {}",
                self.a(),
                self.existing_id()
            ),
            4 => format!(
                "UPDATE t SET b = {}, a = {} WHERE a = {}",
                self.b(),
                self.a(),
                self.random.random_range(0..A_VALUES)
            ),
            // A key moves: fresh ids stay below 1 000 000, a moved row leaves the range.
            5 => format!(
                "UPDATE t SET id = id + 1000000 WHERE id = {}",
                self.existing_id()
            ),
            6 => {
                self.next_c += 1;
                let c = if self.random.random_bool(0.3) {
                    "NULL".to_string()
                } else {
                    self.next_c.to_string()
                };
                format!("UPDATE t SET c = {c} WHERE id = {}", self.existing_id())
            }
            7 => format!("DELETE FROM t WHERE id = {}", self.existing_id()),
            _ => {
                if self.random.random_bool(0.7) {
                    format!("INSERT INTO k VALUES ({}, {})", self.a(), self.b())
                } else {
                    format!(
                        "DELETE FROM k WHERE a = {} AND b = {}",
                        self.random.random_range(0..A_VALUES),
                        B_VALUES[self.random.random_range(0..3)]
                    )
                }
            }
        }
    }

    /// The lookups compared after each transaction: every value of every indexed leading
    /// column, and some `c` values.
    fn lookups(&mut self) -> Vec<String> {
        let mut lookups = Vec::new();
        for a in 0..A_VALUES {
            lookups.push(format!("SELECT * FROM t WHERE a = {a}"));
            lookups.push(format!("SELECT a, b FROM k WHERE a = {a}"));
        }
        for b in &B_VALUES[..3] {
            lookups.push(format!("SELECT id, c FROM t WHERE b = {b}"));
            let a = self.random.random_range(0..A_VALUES);
            lookups.push(format!("SELECT id FROM t WHERE b = {b} AND a = {a}"));
        }
        for _ in 0..3 {
            let c = self.random.random_range(0..self.next_c.max(1));
            lookups.push(format!("SELECT id, a FROM t WHERE c = {c}"));
        }
        // IN lists, through an index and through the primary key.
        let a = self.random.random_range(0..A_VALUES);
        lookups.push(format!(
            "SELECT id, b FROM t WHERE a IN ({a}, {}, NULL)",
            a + 2
        ));
        lookups.push(format!("SELECT a, b FROM k WHERE a IN ({a}, {a})"));
        lookups.push("SELECT id FROM t WHERE b IN ('z', 'x')".to_string());
        let ids: Vec<String> = (0..4).map(|_| self.existing_id().to_string()).collect();
        lookups.push(format!("SELECT * FROM t WHERE id IN ({})", ids.join(", ")));
        lookups
    }
}

async fn run_everywhere(
    rockstream: &tokio_postgres::Client,
    oracle: &tokio_postgres::Client,
    sql: &str,
) {
    oracle
        .batch_execute(sql)
        .await
        .unwrap_or_else(|error| panic!("oracle: {sql}: {error}"));
    rockstream
        .batch_execute(sql)
        .await
        .unwrap_or_else(|error| panic!("RockStream: {sql}: {error}"));
}

async fn compare_lookups(
    rockstream: &tokio_postgres::Client,
    oracle: &tokio_postgres::Client,
    lookups: &[String],
    context: &str,
) {
    for lookup in lookups {
        if let Err(diff) =
            compare_query("PostgreSQL", oracle, "RockStream", rockstream, lookup).await
        {
            panic!("{context}: {diff}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_lookups_agree_with_postgresql_through_random_dml_and_a_restart() {
    let seed = test_seed();
    let transactions = environment_count("ROCKSTREAM_TEST_TRANSACTIONS", 30);
    let mut server = TestServer::start().await;
    let database = OracleDatabase::create("indexes").await;
    let oracle = database.client().await;
    let mut rockstream = server.client().await;
    run_everywhere(&rockstream, &oracle, SCHEMA).await;
    let mut workload = Workload {
        random: StdRng::seed_from_u64(seed),
        next_id: 0,
        next_c: 0,
    };
    for transaction in 0..transactions {
        let statements: Vec<String> = (0..workload.random.random_range(1..5))
            .map(|_| workload.statement())
            .collect();
        let block = format!("BEGIN; {}; COMMIT", statements.join("; "));
        run_everywhere(&rockstream, &oracle, &block).await;
        // Midway, an index over stored rows, and one dropped.
        if transaction == transactions / 2 {
            run_everywhere(
                &rockstream,
                &oracle,
                "CREATE INDEX t_c_b ON t (c, b); DROP INDEX t_ba",
            )
            .await;
        }
        let lookups = workload.lookups();
        let context = format!("seed {seed}, after transaction {transaction}: {block}");
        compare_lookups(&rockstream, &oracle, &lookups, &context).await;
    }

    for (lookup, scans) in [
        ("SELECT * FROM t WHERE a = 1", "a = Int32(1)"),
        ("SELECT * FROM t WHERE c = 1", "c = Int32(1)"),
        ("SELECT * FROM k WHERE a = 1", "a = Int32(1)"),
        (
            "SELECT * FROM t WHERE a IN (1, 2)",
            "a = Int32(1) OR t.a = Int32(2)",
        ),
        (
            "SELECT * FROM t WHERE id IN (1, 2)",
            "id = Int32(1) OR t.id = Int32(2)",
        ),
        (
            "SELECT * FROM t WHERE a IN (0, 1, 2, 3)",
            "a IN ([Int32(0), Int32(1), Int32(2), Int32(3)])",
        ),
    ] {
        let plan = fetch_text_rows(&rockstream, &format!("EXPLAIN {lookup}"))
            .await
            .expect("EXPLAIN runs");
        let plan = format!("{plan:?}");
        assert!(
            plan.contains("partial_filters") && plan.contains(scans),
            "{lookup} reads through an index: {plan}"
        );
    }

    server.restart().await;
    rockstream = server.client().await;
    let lookups = workload.lookups();
    compare_lookups(
        &rockstream,
        &oracle,
        &lookups,
        &format!("seed {seed}, after a restart"),
    )
    .await;
}
