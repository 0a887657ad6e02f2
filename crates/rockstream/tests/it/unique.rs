//! Goal: a UNIQUE constraint holds whatever the interleaving of sessions (each value is taken by
//! exactly one committed row; every loser gets 23505, at its statement or its COMMIT), and its
//! entries are as durable as the rows: after `kill -9` and restarts, values of acknowledged rows
//! stay taken, those of unacknowledged or deleted rows are free. Per-statement behaviour against
//! PostgreSQL is `tests/slt/unique.slt`. Method: sessions racing for the same values, in and out
//! of transaction blocks, then the table's rows grouped by value; a server killed mid-transaction
//! and restarted.

use std::collections::BTreeMap;

use crate::harness::server::TestServer;
use crate::harness::sqlstate;
use crate::transactional_ddl::{execute, failure, rows};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_sessions_take_each_value_once() {
    const SESSIONS: i64 = 6;
    const VALUES: i64 = 12;
    let server = TestServer::start().await;
    execute(
        &server.client().await,
        "CREATE TABLE accounts (id INT PRIMARY KEY, email TEXT UNIQUE, n INT);
         CREATE MATERIALIZED VIEW taken AS SELECT email, count(*) AS n FROM accounts GROUP BY email",
    )
    .await;
    let sessions: Vec<_> = (0..SESSIONS)
        .map(|session| {
            let config = server.config();
            crate::harness::spawn(async move {
                let client = crate::harness::oracle::connect(&config)
                    .await
                    .expect("a session connects");
                let mut won = Vec::new();
                for value in 0..VALUES {
                    let id = session * 1000 + value;
                    let insert =
                        format!("INSERT INTO accounts VALUES ({id}, 'v{value}', {session})");
                    // Half the sessions write in transaction blocks, where the
                    // loss shows at the INSERT or at the COMMIT.
                    let outcome = if session % 2 == 0 {
                        client.batch_execute(&insert).await
                    } else {
                        match client.batch_execute(&format!("BEGIN; {insert}")).await {
                            Ok(()) => client.batch_execute("COMMIT").await,
                            Err(error) => {
                                client.batch_execute("ROLLBACK").await.expect("rollback");
                                Err(error)
                            }
                        }
                    };
                    match outcome {
                        Ok(()) => won.push(value),
                        Err(error) => assert_eq!(sqlstate(&error), "23505", "{insert}: {error}"),
                    }
                }
                won
            })
        })
        .collect();
    let mut winners: BTreeMap<i64, usize> = BTreeMap::new();
    for session in sessions {
        for value in session.await.expect("a session panicked") {
            *winners.entry(value).or_default() += 1;
        }
    }
    assert_eq!(
        winners,
        (0..VALUES).map(|value| (value, 1)).collect(),
        "each value won by exactly one session"
    );
    let client = server.client().await;
    let counts = rows(
        &client,
        "SELECT count(*), count(DISTINCT email) FROM accounts",
    )
    .await;
    assert_eq!(counts, [format!("{VALUES} {VALUES}")]);
    assert_eq!(
        rows(&client, "SELECT count(*) FROM taken WHERE n <> 1").await,
        ["0"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_stay_taken_across_crashes_as_their_rows_do() {
    let mut server = TestServer::start().await;
    let client = server.client().await;
    execute(
        &client,
        "CREATE TABLE people (id INT PRIMARY KEY, email TEXT, CONSTRAINT people_email UNIQUE (email));
         INSERT INTO people VALUES (1, 'a'), (2, 'b'), (3, 'c');
         DELETE FROM people WHERE id = 3;
         UPDATE people SET email = 'b2' WHERE id = 2",
    )
    .await;
    // An open transaction takes a value, then the server dies.
    execute(&client, "BEGIN; INSERT INTO people VALUES (4, 'd')").await;
    server.kill9();
    server.restart().await;
    let client = server.client().await;
    assert_eq!(
        failure(&client, "INSERT INTO people VALUES (5, 'a')").await,
        "23505"
    );
    assert_eq!(
        failure(&client, "INSERT INTO people VALUES (5, 'b2')").await,
        "23505"
    );
    // Freed by the DELETE and the UPDATE; never taken by the lost transaction.
    execute(
        &client,
        "INSERT INTO people VALUES (5, 'b'), (6, 'c'), (7, 'd')",
    )
    .await;
    // Added over rows there are, then the server dies right after.
    execute(&client, "ALTER TABLE people ADD UNIQUE (id, email)").await;
    server.kill9();
    server.restart().await;
    let client = server.client().await;
    assert_eq!(
        rows(
            &client,
            "SELECT conname FROM pg_constraint WHERE conrelid = 'people'::regclass"
        )
        .await,
        ["people_email", "people_id_email_key", "people_pkey"]
    );
    assert_eq!(
        failure(&client, "UPDATE people SET email = 'a' WHERE id = 7").await,
        "23505"
    );
    execute(&client, "ALTER TABLE people DROP CONSTRAINT people_email").await;
    server.restart().await;
    let client = server.client().await;
    execute(&client, "UPDATE people SET email = 'a' WHERE id = 7").await;
    assert_eq!(
        rows(&client, "SELECT id, email FROM people").await,
        ["1 a", "2 b2", "5 b", "6 c", "7 a"]
    );
}
