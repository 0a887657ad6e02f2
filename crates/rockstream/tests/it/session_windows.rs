//! Goal: `SESSION(table, time, gap [, key …])` views give every row the window of its session
//! as PostgreSQL computes sessions with window functions (a row starts a session when it is
//! `gap` or more after the one before it in its partition; the window is `[first time, last
//! time + gap)`), through random inserts, updates and deletes that merge and split sessions, and
//! an aggregate over the windows agrees too; ad-hoc `SESSION` queries agree with the views.
//! PostgreSQL has no `SESSION`: the oracle runs the equivalent query below (`lag` and a running
//! `sum` numbering sessions) over the same rows. Method: one random transaction at a time on both,
//! then every view against its oracle query.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::harness::compare::{compare_row_multisets, fetch_text_rows};
use crate::harness::oracle::OracleDatabase;
use crate::harness::server::TestServer;
use crate::harness::{environment_count, test_seed};

const SCHEMA: &str = "CREATE TABLE clicks (id INT PRIMARY KEY, user_id INT, at TIMESTAMP)";

/// The rows with their sessions, as PostgreSQL computes them with window functions.
const ORACLE_SESSIONS: &str = "WITH ordered AS (
      SELECT *, CASE WHEN at - lag(at) OVER (PARTITION BY user_id ORDER BY at, id)
                     < INTERVAL '10 minutes' THEN 0 ELSE 1 END AS starts
      FROM clicks WHERE at IS NOT NULL),
    numbered AS (
      SELECT *, sum(starts) OVER (PARTITION BY user_id ORDER BY at, id ROWS UNBOUNDED PRECEDING)
        AS session FROM ordered)
    SELECT id, user_id, at, min(at) OVER (PARTITION BY user_id, session) AS window_start,
      max(at) OVER (PARTITION BY user_id, session) + INTERVAL '10 minutes' AS window_end
    FROM numbered
    UNION ALL SELECT id, user_id, at, NULL, NULL FROM clicks WHERE at IS NULL";

const SESSIONS: &str = "SELECT id, user_id, at, window_start, window_end \
     FROM SESSION(clicks, at, INTERVAL '10 minutes', user_id)";

fn counts(sessions: &str) -> String {
    format!(
        "SELECT user_id, window_start, window_end, count(*) AS clicks, max(at) AS last \
         FROM ({sessions}) s GROUP BY user_id, window_start, window_end"
    )
}

/// Without the key: stored as counted rows, so a retraction of a row the view does not hold
/// fails the step where it happens, where a keyed view would overwrite it silently.
const UNKEYED_SESSIONS: &str = "SELECT user_id, at, window_start, window_end \
     FROM SESSION(clicks, at, INTERVAL '10 minutes', user_id)";

/// Over the whole table (no partition), every row one chain of times.
const GLOBAL_SESSIONS: &str = "SELECT id, window_start, window_end \
     FROM SESSION(clicks, at, INTERVAL '10 minutes')";

const ORACLE_GLOBAL_SESSIONS: &str = "WITH ordered AS (
      SELECT *, CASE WHEN at - lag(at) OVER (ORDER BY at, id) < INTERVAL '10 minutes'
                     THEN 0 ELSE 1 END AS starts FROM clicks WHERE at IS NOT NULL),
    numbered AS (SELECT *, sum(starts) OVER (ORDER BY at, id ROWS UNBOUNDED PRECEDING) AS session
      FROM ordered)
    SELECT id, min(at) OVER (PARTITION BY session) AS window_start,
      max(at) OVER (PARTITION BY session) + INTERVAL '10 minutes' AS window_end FROM numbered
    UNION ALL SELECT id, NULL, NULL FROM clicks WHERE at IS NULL";

struct Workload {
    random: StdRng,
    next_id: i64,
}

impl Workload {
    /// A time within two hours, on a minute: gaps of 10 minutes or more are common.
    fn time(&mut self) -> String {
        if self.random.random_range(0..10) == 0 {
            return "NULL".to_string();
        }
        let minute = self.random.random_range(0..120);
        format!("TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{minute} minutes'")
    }

    fn user(&mut self) -> String {
        match self.random.random_range(0..4) {
            0 => "NULL".to_string(),
            user => user.to_string(),
        }
    }

    fn statement(&mut self) -> String {
        let id = self.random.random_range(0..self.next_id.max(1));
        match self.random.random_range(0..6) {
            0..=2 => {
                self.next_id += 1;
                let (user, time) = (self.user(), self.time());
                format!(
                    "INSERT INTO clicks VALUES ({}, {user}, {time})",
                    self.next_id
                )
            }
            3 => format!("UPDATE clicks SET at = {} WHERE id = {id}", self.time()),
            4 => format!(
                "UPDATE clicks SET user_id = {} WHERE id = {id}",
                self.user()
            ),
            _ => format!("DELETE FROM clicks WHERE id = {id}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_windows_agree_with_postgresql_window_functions() {
    let seed = test_seed();
    let transactions = environment_count("ROCKSTREAM_TEST_TRANSACTIONS", 30);
    let server = TestServer::start().await;
    let database = OracleDatabase::create("session_windows").await;
    let oracle = database.client().await;
    let rockstream = server.client().await;
    for client in [&rockstream, &oracle] {
        client.batch_execute(SCHEMA).await.expect("schema");
    }
    rockstream
        .batch_execute(&format!(
            "CREATE MATERIALIZED VIEW sessions AS {SESSIONS};
             CREATE MATERIALIZED VIEW session_counts AS {};
             CREATE MATERIALIZED VIEW global_sessions AS {GLOBAL_SESSIONS};
             CREATE MATERIALIZED VIEW unkeyed_sessions AS {UNKEYED_SESSIONS};",
            counts(SESSIONS)
        ))
        .await
        .expect("views");
    let checks = [
        (
            "SELECT * FROM sessions".to_string(),
            ORACLE_SESSIONS.to_string(),
        ),
        (
            "SELECT * FROM session_counts".to_string(),
            counts(ORACLE_SESSIONS),
        ),
        (
            "SELECT * FROM global_sessions".to_string(),
            ORACLE_GLOBAL_SESSIONS.to_string(),
        ),
        (
            "SELECT * FROM unkeyed_sessions".to_string(),
            format!("SELECT user_id, at, window_start, window_end FROM ({ORACLE_SESSIONS}) s"),
        ),
        // Ad hoc, through the window functions the views do not use.
        (SESSIONS.to_string(), ORACLE_SESSIONS.to_string()),
    ];
    let mut workload = Workload {
        random: StdRng::seed_from_u64(seed),
        next_id: 0,
    };
    for transaction in 0..transactions {
        let statements: Vec<String> = (0..workload.random.random_range(1..6))
            .map(|_| workload.statement())
            .collect();
        let block = format!("BEGIN; {}; COMMIT", statements.join("; "));
        for client in [&rockstream, &oracle] {
            client.batch_execute(&block).await.expect("the transaction");
        }
        for (query, oracle_query) in &checks {
            let expected = fetch_text_rows(&oracle, oracle_query)
                .await
                .expect("the oracle's sessions");
            let actual = fetch_text_rows(&rockstream, query).await.expect(query);
            if let Err(diff) = compare_row_multisets("postgres", &expected, "rockstream", &actual) {
                let table = "SELECT * FROM clicks ORDER BY user_id, at, id";
                let rows = fetch_text_rows(&oracle, table).await.expect("the rows");
                let own = fetch_text_rows(&rockstream, table).await;
                panic!(
                    "seed {seed}, after transaction {transaction} ({block}), {query}:\n{diff}\n\
                     clicks (user_id, at, id order) in PostgreSQL: {rows:?}\n\
                     in RockStream: {own:?}\n{}",
                    server.log_tail()
                );
            }
        }
    }
}
