//! Goal: transaction isolation as PostgreSQL provides it. READ COMMITTED (the default) reads each
//! statement's newest committed state; REPEATABLE READ reads the state of the transaction's first
//! statement throughout, tables and views alike, and its write to a row that another transaction
//! changed since fails with 40001 and changes nothing; the level is set by BEGIN, by SET
//! TRANSACTION before the first query (25001 after it), or for the session; SERIALIZABLE is
//! refused.
//!
//! Method: two sessions on one server interleave their statements.

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::TestServer;
use crate::harness::sqlstate;

async fn text(client: &tokio_postgres::Client, sql: &str) -> String {
    let rows = fetch_text_rows(client, sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
    format!("{rows:?}")
}

const TOTAL: &str = "SELECT SUM(amount) FROM accounts";
const VIEW: &str = "SELECT total FROM balance";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeatable_read_reads_one_state_and_refuses_lost_updates() {
    let server = TestServer::start().await;
    let reader = server.client().await;
    let writer = server.client().await;
    reader
        .batch_execute(
            "CREATE TABLE accounts (id BIGINT PRIMARY KEY, amount BIGINT);
             CREATE MATERIALIZED VIEW balance AS SELECT SUM(amount) AS total FROM accounts;
             INSERT INTO accounts VALUES (1, 100), (2, 200);",
        )
        .await
        .expect("schema");

    // READ COMMITTED: the second read sees the other session's commit.
    reader.batch_execute("BEGIN").await.expect("begin");
    assert_eq!(text(&reader, TOTAL).await, r#"[[Some("300")]]"#);
    writer
        .batch_execute("UPDATE accounts SET amount = amount + 1 WHERE id = 1")
        .await
        .expect("update");
    assert_eq!(text(&reader, TOTAL).await, r#"[[Some("301")]]"#);
    reader.batch_execute("COMMIT").await.expect("commit");

    // REPEATABLE READ: tables and views stay at the first statement's state.
    reader
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .expect("begin");
    assert_eq!(
        text(&reader, "SHOW transaction_isolation").await,
        r#"[[Some("repeatable read")]]"#
    );
    assert_eq!(text(&reader, TOTAL).await, r#"[[Some("301")]]"#);
    writer
        .batch_execute("UPDATE accounts SET amount = amount + 10 WHERE id = 2")
        .await
        .expect("update");
    assert_eq!(text(&reader, TOTAL).await, r#"[[Some("301")]]"#);
    assert_eq!(text(&reader, VIEW).await, r#"[[Some("301")]]"#);
    // Its own writes are visible to it, on top of that state.
    reader
        .batch_execute("UPDATE accounts SET amount = amount - 1 WHERE id = 1")
        .await
        .expect("own update");
    assert_eq!(text(&reader, TOTAL).await, r#"[[Some("300")]]"#);
    reader.batch_execute("COMMIT").await.expect("commit");
    assert_eq!(text(&reader, TOTAL).await, r#"[[Some("310")]]"#);
    assert_eq!(text(&reader, VIEW).await, r#"[[Some("310")]]"#);

    // A lost update is refused: the row changed after the transaction's first read.
    reader
        .batch_execute("BEGIN; SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await
        .expect("begin");
    assert_eq!(text(&reader, TOTAL).await, r#"[[Some("310")]]"#);
    writer
        .batch_execute("UPDATE accounts SET amount = 0 WHERE id = 1")
        .await
        .expect("update");
    let refused = match reader
        .batch_execute("UPDATE accounts SET amount = amount * 2 WHERE id = 1")
        .await
    {
        Err(error) => error,
        Ok(()) => reader
            .batch_execute("COMMIT")
            .await
            .expect_err("a lost update must not commit"),
    };
    assert_eq!(sqlstate(&refused), "40001", "{refused}");
    let _ = reader.batch_execute("ROLLBACK").await;
    assert_eq!(
        text(&reader, "SELECT amount FROM accounts WHERE id = 1").await,
        r#"[[Some("0")]]"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_levels_are_set_where_postgresql_allows() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (id BIGINT PRIMARY KEY)")
        .await
        .expect("table");

    // Too late once the transaction has run a query.
    client.batch_execute("BEGIN").await.expect("begin");
    text(&client, "SELECT COUNT(*) FROM t").await;
    let late = client
        .batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await
        .expect_err("too late");
    assert_eq!(sqlstate(&late), "25001", "{late}");
    client.batch_execute("ROLLBACK").await.expect("rollback");
    // Repeating the level in force is no change, and allowed.
    client.batch_execute("BEGIN").await.expect("begin");
    text(&client, "SELECT COUNT(*) FROM t").await;
    client
        .batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await
        .expect("same level");
    client.batch_execute("COMMIT").await.expect("commit");

    // SERIALIZABLE is refused in every spelling.
    for statement in [
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "SET default_transaction_isolation = 'serializable'",
    ] {
        let refused = client.batch_execute(statement).await.expect_err(statement);
        assert_eq!(sqlstate(&refused), "0A000", "{statement}: {refused}");
    }

    // A session default applies to the next BEGIN; READ UNCOMMITTED means READ COMMITTED.
    client
        .batch_execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await
        .expect("session default");
    client.batch_execute("BEGIN").await.expect("begin");
    assert_eq!(
        text(&client, "SHOW transaction_isolation").await,
        r#"[[Some("repeatable read")]]"#
    );
    client.batch_execute("COMMIT").await.expect("commit");
    // The same as a configuration parameter.
    client
        .batch_execute("SET default_transaction_isolation TO 'read committed'")
        .await
        .expect("parameter");
    assert_eq!(
        text(&client, "SHOW default_transaction_isolation").await,
        r#"[[Some("read committed")]]"#
    );
    client
        .batch_execute("BEGIN ISOLATION LEVEL READ UNCOMMITTED")
        .await
        .expect("begin");
    assert_eq!(
        text(&client, "SHOW transaction_isolation").await,
        r#"[[Some("read committed")]]"#
    );
    client.batch_execute("COMMIT").await.expect("commit");
}
