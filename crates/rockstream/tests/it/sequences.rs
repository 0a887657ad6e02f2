//! Goal: a sequence never hands out a value twice (RFC 0003): not to concurrent sessions, not
//! across `kill -9`, not between rows `COPY` and `INSERT` fill in; what an `INSERT` or `COPY`
//! leaves out gets its column's default. What one session sees is `tests/slt/defaults.slt`
//! (oracle-checked).
//! Method: eight sessions insert into one SERIAL table at once, each through the literal fast path,
//! the planned path and COPY; then `kill -9` right after acknowledged inserts, a restart, and
//! more inserts; every key is checked distinct, and every acknowledged one present.

use std::collections::BTreeSet;

use tokio_postgres::Client;

use crate::harness::server::TestServer;
use crate::harness::{copy_in, spawn};

const SESSIONS: usize = 8;
const ROUNDS: usize = 15;

async fn execute(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
}

/// The ids `sql` (an `INSERT … RETURNING id`) returns.
async fn returned_ids(client: &Client, sql: &str) -> Vec<i64> {
    client
        .query(sql, &[])
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
        .iter()
        .map(|row| i64::from(row.get::<_, i32>(0)))
        .collect()
}

async fn stored_ids(client: &Client) -> Vec<i64> {
    client
        .query("SELECT id FROM items ORDER BY id", &[])
        .await
        .expect("reads the ids")
        .iter()
        .map(|row| i64::from(row.get::<_, i32>(0)))
        .collect()
}

/// One session's inserts: single rows (the fast path), several rows planned (`INSERT … SELECT`),
/// and COPY. Returns the ids it was told of.
async fn insert_rounds(client: Client, session: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    for round in 0..ROUNDS {
        ids.extend(
            returned_ids(
                &client,
                &format!("INSERT INTO items (owner) VALUES ('s{session}') RETURNING id"),
            )
            .await,
        );
        ids.extend(
            returned_ids(
                &client,
                &format!(
                    "INSERT INTO items (owner) SELECT 's{session}-' || n FROM generate_series(1, 3) AS g(n) RETURNING id"
                ),
            )
            .await,
        );
        let copied = copy_in(
            &client,
            "COPY items (owner) FROM STDIN",
            format!("c{session}-{round}\nc{session}-{round}b\n"),
        )
        .await
        .expect("COPY");
        assert_eq!(copied, 2);
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_and_restarts_never_get_the_same_value() {
    let mut server = TestServer::start().await;
    let setup = server.client().await;
    execute(
        &setup,
        "CREATE TABLE items (id SERIAL PRIMARY KEY, owner TEXT NOT NULL, state TEXT DEFAULT 'new', \
         at TIMESTAMPTZ DEFAULT now())",
    )
    .await;
    let mut sessions = Vec::new();
    for session in 0..SESSIONS {
        let client = server.client().await;
        sessions.push(spawn(insert_rounds(client, session)));
    }
    let mut acknowledged = BTreeSet::new();
    for session in sessions {
        for id in session.await.expect("session task") {
            assert!(acknowledged.insert(id), "id {id} was returned twice");
        }
    }
    let stored = stored_ids(&setup).await;
    assert_eq!(stored.len(), SESSIONS * ROUNDS * 6);
    assert!(acknowledged
        .iter()
        .all(|id| stored.binary_search(id).is_ok()));
    // COPY filled the defaults too.
    let filled = setup
        .query(
            "SELECT count(*) FROM items WHERE state = 'new' AND at IS NOT NULL",
            &[],
        )
        .await
        .expect("counts");
    assert_eq!(filled[0].get::<_, i64>(0) as usize, stored.len());

    // kill -9 right after acknowledged inserts: nothing acknowledged is lost, and no value is
    // handed out again after the restart.
    let before_crash = returned_ids(
        &setup,
        "INSERT INTO items (owner) VALUES ('last'), ('last') RETURNING id",
    )
    .await;
    drop(setup);
    server.kill9();
    server.restart().await;
    let client = server.client().await;
    let after_restart = returned_ids(
        &client,
        "INSERT INTO items (owner) VALUES ('next') RETURNING id",
    )
    .await;
    let highest_before = before_crash.iter().max().copied().unwrap_or_default();
    assert!(
        after_restart[0] > highest_before,
        "after the restart the sequence gave {} though {highest_before} was handed out",
        after_restart[0]
    );
    let stored = stored_ids(&client).await;
    assert!(before_crash
        .iter()
        .all(|id| stored.binary_search(id).is_ok()));
    let distinct: BTreeSet<i64> = stored.iter().copied().collect();
    assert_eq!(distinct.len(), stored.len());
}
