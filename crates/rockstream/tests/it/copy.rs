//! Goal: `COPY` keeps primary keys unique however the load arrives: a key repeated inside one
//! COPY, a key already stored, and a key the same transaction inserted earlier all fail the
//! statement with SQLSTATE 23505 and change nothing; a clean load lands whole.
//!
//! Method: COPY batches out of key order into a keyed table, then count what is visible.

use crate::harness::compare::fetch_text_rows;
use crate::harness::copy_in;
use crate::harness::server::TestServer;

fn lines(ids: &[i64]) -> String {
    ids.iter().map(|id| format!("{id}\tv{id}\n")).collect()
}

async fn count(client: &tokio_postgres::Client) -> String {
    let rows = fetch_text_rows(client, "SELECT COUNT(*) FROM items")
        .await
        .expect("count");
    format!("{rows:?}")
}

fn sqlstate(error: &tokio_postgres::Error) -> String {
    error
        .as_db_error()
        .map(|db| format!("{} {}", db.code().code(), db.detail().unwrap_or_default()))
        .unwrap_or_else(|| error.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_refuses_repeated_keys_and_changes_nothing() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE items (id BIGINT PRIMARY KEY, label TEXT)")
        .await
        .expect("table");

    let loaded = copy_in(&client, "COPY items FROM STDIN", lines(&[5, 3, 9, 1, 7]))
        .await
        .expect("a clean COPY");
    assert_eq!(loaded, 5);
    let five = count(&client).await;
    assert!(five.contains('5'), "five rows: {five}");

    // Repeated inside the load: the first repeat in input order is named.
    let error = copy_in(
        &client,
        "COPY items FROM STDIN",
        lines(&[20, 12, 11, 12, 11]),
    )
    .await
    .expect_err("repeated key");
    assert_eq!(sqlstate(&error), "23505 Key (id)=(12) already exists.");

    // A repeated key before a NULL key: the repeat is reported, as
    // PostgreSQL reports the first failing row.
    let error = copy_in(
        &client,
        "COPY items FROM STDIN",
        format!("{}\\N\tnull key\n", lines(&[50, 50])),
    )
    .await
    .expect_err("repeated key, then a NULL key");
    assert_eq!(sqlstate(&error), "23505 Key (id)=(50) already exists.");
    let error = copy_in(
        &client,
        "COPY items FROM STDIN",
        format!("\\N\tnull key\n{}", lines(&[60, 60])),
    )
    .await
    .expect_err("a NULL key, then a repeated key");
    assert!(sqlstate(&error).starts_with("23502"), "{error:?}");

    // Already stored.
    let error = copy_in(&client, "COPY items FROM STDIN", lines(&[30, 3]))
        .await
        .expect_err("stored key");
    assert!(sqlstate(&error).starts_with("23505"), "{error:?}");

    // Inserted earlier in the same transaction.
    client.batch_execute("BEGIN").await.expect("begin");
    client
        .batch_execute("INSERT INTO items VALUES (40, 'x')")
        .await
        .expect("insert");
    let error = copy_in(&client, "COPY items FROM STDIN", lines(&[41, 40]))
        .await
        .expect_err("key from the same transaction");
    assert!(sqlstate(&error).starts_with("23505"), "{error:?}");
    client.batch_execute("ROLLBACK").await.expect("rollback");

    assert_eq!(count(&client).await, five, "failed loads change nothing");
}

/// Everything `COPY ... TO STDOUT` writes for `statement`.
async fn copy_out(client: &tokio_postgres::Client, statement: &str) -> Result<String, String> {
    use futures::TryStreamExt;
    let stream = client
        .copy_out(statement)
        .await
        .map_err(|error| sqlstate(&error))?;
    let chunks: Vec<bytes::Bytes> = stream
        .try_collect()
        .await
        .map_err(|error| sqlstate(&error))?;
    Ok(chunks
        .iter()
        .map(|chunk| String::from_utf8_lossy(chunk).into_owned())
        .collect())
}

/// Goal: `COPY ... TO STDOUT` writes what PostgreSQL writes, byte for byte, in the text and CSV
/// formats, for a table, some of its columns and a query, values that need escaping or quoting
/// included. Method: the same rows on a server and on the oracle, each COPY on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oracle_copy_to_stdout_writes_what_postgresql_writes() {
    let oracle = crate::harness::oracle::OracleDatabase::create("copy_out").await;
    let server = TestServer::start().await;
    let setup = "CREATE TABLE notes (id INT PRIMARY KEY, note TEXT, amount NUMERIC(8,2), day DATE);
        INSERT INTO notes VALUES
          (1, E'tab\there, back\\\\slash', 1.50, '2024-02-29'),
          (2, NULL, NULL, NULL),
          (3, '', -2, '2000-01-01'),
          (4, E'say \"hi\", ok\nnext', 0, '1999-12-31'),
          (5, '\\.', 7.25, '2024-01-01')";
    let postgres = oracle.client().await;
    let ours = server.client().await;
    postgres.batch_execute(setup).await.expect("oracle setup");
    ours.batch_execute(setup).await.expect("setup");
    for statement in [
        "COPY notes TO STDOUT",
        "COPY notes (note, id) TO STDOUT WITH (FORMAT csv, HEADER)",
        "COPY (SELECT id, note FROM notes WHERE id > 1 ORDER BY id DESC) TO STDOUT WITH CSV",
        "COPY (SELECT id, day FROM notes ORDER BY id) TO STDOUT WITH (DELIMITER '|', NULL 'none')",
        "COPY (SELECT note FROM notes ORDER BY id) TO STDOUT WITH (FORMAT csv, QUOTE '''', NULL 'NULL')",
        "COPY (SELECT id, note FROM notes WHERE id < 0) TO STDOUT WITH (FORMAT csv, HEADER)",
        "COPY (SELECT id, amount FROM notes ORDER BY id) TO STDOUT WITH (HEADER)",
    ] {
        let expected = copy_out(&postgres, statement).await;
        assert!(expected.is_ok(), "{statement} on PostgreSQL: {expected:?}");
        let actual = copy_out(&ours, statement).await;
        // A table's rows come in no promised order: compare them sorted.
        let sorted = |text: Result<String, String>| {
            text.map(|text| {
                let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
                if !statement.contains("ORDER BY") {
                    lines.sort();
                }
                lines
            })
        };
        assert_eq!(sorted(actual), sorted(expected), "{statement}");
    }
}
