//! Goal: `COPY` keeps primary keys unique however the load arrives: a key repeated inside one
//! COPY, a key already stored, and a key the same transaction inserted earlier all fail the
//! statement with SQLSTATE 23505 and change nothing; a clean load lands whole.
//!
//! Method: COPY batches out of key order into a keyed table, then count what is visible.

use crate::harness::compare::fetch_text_rows;
use crate::harness::copy_in;
use crate::harness::server::TestServer;
use crate::wire::raw_client::RawClient;

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

/// A server with an empty keyed table `items (id, label)`, and a client.
async fn with_items() -> (TestServer, tokio_postgres::Client) {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE items (id BIGINT PRIMARY KEY, label TEXT)")
        .await
        .expect("table");
    (server, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_refuses_repeated_keys_and_changes_nothing() {
    let (_server, client) = with_items().await;

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
    // Caught by the commit, and named as PostgreSQL names it.
    assert_eq!(sqlstate(&error), "23505 Key (id)=(3) already exists.");

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

/// Rows `from..to` of a load of about 100 bytes a row.
fn wide_lines(from: i64, to: i64) -> String {
    (from..to).map(|id| format!("{id}\t{id:0>96}\n")).collect()
}

async fn view_totals(client: &tokio_postgres::Client) -> String {
    let rows = fetch_text_rows(client, "SELECT n, total FROM item_totals")
        .await
        .expect("view");
    format!("{rows:?}")
}

/// Goal: a COPY larger than one part (the server parses and loads COPY data
/// in parts of about 256 KiB as it arrives, never holding the whole stream)
/// is still one statement: all of it lands, or — whether a later part
/// holds a malformed value, a repeated key, or the client abandons the
/// COPY between parts — none of it, views included; inside BEGIN a failed
/// one aborts the transaction. Method: 12 MB loads (about fifty parts) into a
/// keyed table with a view over it, checked after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_many_parts_lands_whole_or_not_at_all() {
    use futures::SinkExt;
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE items (id BIGINT PRIMARY KEY, label TEXT);
             CREATE MATERIALIZED VIEW item_totals AS
               SELECT count(*) AS n, sum(id) AS total FROM items",
        )
        .await
        .expect("setup");
    const ROWS: i64 = 120_000;

    let loaded = copy_in(&client, "COPY items FROM STDIN", wide_lines(0, ROWS))
        .await
        .expect("a clean COPY of many parts");
    assert_eq!(loaded, ROWS as u64);
    let expected = format!(
        "{:?}",
        vec![vec![
            Some(ROWS.to_string()),
            Some((ROWS * (ROWS - 1) / 2).to_string())
        ]]
    );
    assert_eq!(view_totals(&client).await, expected);

    // A row of the wrong width in an early part, while the client goes on
    // sending: the error names the row's line in the whole stream.
    let mut narrow = wide_lines(ROWS, 2 * ROWS);
    let at = narrow.match_indices('\n').nth(4_998).expect("line 4999").0 + 1;
    narrow.insert_str(at, "1\t2\t3\n");
    let error = copy_in(&client, "COPY items FROM STDIN", narrow)
        .await
        .expect_err("a row of three fields");
    assert_eq!(crate::harness::sqlstate(&error), "22P04", "{error:?}");
    let message = error
        .as_db_error()
        .expect("a server error")
        .message()
        .to_string();
    assert!(message.contains("line 5000"), "{message}");
    // A bad value in the last part: the parts before it are undone.
    let bad_value = format!("{}oops\tlast\n", wide_lines(ROWS, 2 * ROWS));
    let error = copy_in(&client, "COPY items FROM STDIN", bad_value)
        .await
        .expect_err("a malformed value in the last part");
    assert_eq!(crate::harness::sqlstate(&error), "22P02", "{error:?}");
    // A key of the first part repeated in the last.
    let repeated = format!(
        "{}{}",
        wide_lines(ROWS, 2 * ROWS),
        wide_lines(ROWS, ROWS + 1)
    );
    let error = copy_in(&client, "COPY items FROM STDIN", repeated)
        .await
        .expect_err("a repeated key across parts");
    assert_eq!(crate::harness::sqlstate(&error), "23505", "{error:?}");
    // A key already stored, in the last part.
    let stored = format!("{}{}", wide_lines(ROWS, 2 * ROWS), wide_lines(7, 8));
    let error = copy_in(&client, "COPY items FROM STDIN", stored)
        .await
        .expect_err("a stored key in the last part");
    assert_eq!(crate::harness::sqlstate(&error), "23505", "{error:?}");
    // Abandoned after two parts' worth: the client's CopyFail.
    {
        let sink = client.copy_in("COPY items FROM STDIN").await.expect("copy");
        futures::pin_mut!(sink);
        sink.send(bytes::Bytes::from(wide_lines(ROWS, ROWS + 90_000)))
            .await
            .expect("send");
        // Dropped unfinished: tokio-postgres sends CopyFail.
    }
    // The simple protocol (psql's \copy): a bad value in an early part is
    // answered at once, the rest of the data and CopyDone are ignored, and
    // the session goes on.
    let mut raw = RawClient::connect(server.config().get_ports()[0]).await;
    raw.send(b'Q', b"COPY items FROM STDIN\0").await;
    assert_eq!(raw.read().await.0, b'G', "CopyInResponse");
    let early_error = || {
        let mut data = wide_lines(ROWS, ROWS + 3_000);
        data.push_str("oops\tearly\n");
        data.push_str(&wide_lines(ROWS + 3_000, 2 * ROWS));
        data
    };
    for chunk in early_error().as_bytes().chunks(64 << 10) {
        raw.send(b'd', chunk).await;
    }
    raw.send(b'c', b"").await;
    assert_eq!(raw.read_error().await.1, "22P02");
    assert_eq!(raw.read_until_ready().await, Vec::<String>::new());
    raw.send(b'Q', b"SELECT 1\0").await;
    assert_eq!(raw.read_until_ready().await, ["T", "D", "SELECT 1"]);
    assert_eq!(
        count(&client).await,
        format!("{:?}", vec![vec![Some(ROWS.to_string())]])
    );
    assert_eq!(
        view_totals(&client).await,
        expected,
        "failed COPYs leave the view"
    );
    // Rolled back to a savepoint before it, a failed COPY leaves the
    // transaction as it was there.
    client
        .batch_execute("BEGIN; INSERT INTO items VALUES (-2, 'kept'); SAVEPOINT s")
        .await
        .expect("savepoint");
    copy_in(&client, "COPY items FROM STDIN", early_error())
        .await
        .expect_err("a malformed value in an early part");
    client
        .batch_execute("ROLLBACK TO SAVEPOINT s; COMMIT")
        .await
        .expect("rollback to the savepoint, commit");
    let deleted = client
        .execute("DELETE FROM items WHERE id = -2", &[])
        .await
        .expect("delete");
    assert_eq!(deleted, 1, "the row from before the savepoint committed");

    // Inside BEGIN: a failing COPY aborts the transaction, the rows before
    // it included; a clean one is read back before COMMIT.
    client.batch_execute("BEGIN").await.expect("begin");
    client
        .batch_execute("INSERT INTO items VALUES (-1, 'before')")
        .await
        .expect("insert");
    let bad_value = format!("{}oops\tlast\n", wide_lines(ROWS, 2 * ROWS));
    copy_in(&client, "COPY items FROM STDIN", bad_value)
        .await
        .expect_err("a malformed value in the last part");
    let aborted = client.batch_execute("SELECT 1").await.expect_err("aborted");
    assert_eq!(crate::harness::sqlstate(&aborted), "25P02");
    client.batch_execute("ROLLBACK").await.expect("rollback");
    client.batch_execute("BEGIN").await.expect("begin");
    copy_in(&client, "COPY items FROM STDIN", wide_lines(ROWS, 2 * ROWS))
        .await
        .expect("a clean COPY in a transaction");
    assert_eq!(
        count(&client).await,
        format!("{:?}", vec![vec![Some((2 * ROWS).to_string())]])
    );
    client.batch_execute("COMMIT").await.expect("commit");
    let expected = format!(
        "{:?}",
        vec![vec![
            Some((2 * ROWS).to_string()),
            Some((2 * ROWS * (2 * ROWS - 1) / 2).to_string())
        ]]
    );
    assert_eq!(view_totals(&client).await, expected);
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

/// Goal: a cancel request stops a COPY between its parts, as PostgreSQL's
/// Ctrl-C in psql does: the COPY fails with 57014 and loads nothing.
/// Method: send part of a large COPY, cancel, send the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // The test sleeps on tokio directly.
async fn a_cancel_stops_a_copy_between_its_parts() {
    use futures::SinkExt;
    let (_server, client) = with_items().await;
    let sink = client.copy_in("COPY items FROM STDIN").await.expect("copy");
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(wide_lines(0, 10_000)))
        .await
        .expect("send");
    sink.flush().await.expect("flush");
    // The server has the first data (the COPY runs) before the cancel.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    client
        .cancel_token()
        .cancel_query(tokio_postgres::NoTls)
        .await
        .expect("cancel");
    let error = finish_copy(sink, wide_lines(10_000, 30_000))
        .await
        .expect_err("canceled");
    assert_eq!(crate::harness::sqlstate(&error), "57014", "{error:?}");
    assert_eq!(count(&client).await, r#"[[Some("0")]]"#);
}

/// Sends the rest of a COPY's data on `sink` and ends it: the COPY's
/// outcome.
async fn finish_copy(
    mut sink: std::pin::Pin<&mut tokio_postgres::CopyInSink<bytes::Bytes>>,
    data: String,
) -> Result<u64, tokio_postgres::Error> {
    use futures::SinkExt;
    sink.send(bytes::Bytes::from(data)).await?;
    sink.finish().await
}

/// Goal: a cancel request while the client has yet to send a COPY's first
/// data stops the COPY too (the COPY runs from its statement, not from its
/// first data).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // The test sleeps on tokio directly.
async fn a_cancel_before_the_first_data_stops_the_copy() {
    let (_server, client) = with_items().await;
    let sink = client.copy_in("COPY items FROM STDIN").await.expect("copy");
    futures::pin_mut!(sink);
    // The CopyInResponse has come back: the server waits for data.
    client
        .cancel_token()
        .cancel_query(tokio_postgres::NoTls)
        .await
        .expect("cancel");
    // The request is on its own connection: let the server take it first.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let error = finish_copy(sink, wide_lines(0, 1_000))
        .await
        .expect_err("canceled");
    assert_eq!(crate::harness::sqlstate(&error), "57014", "{error:?}");
    assert_eq!(count(&client).await, r#"[[Some("0")]]"#);
    // The session goes on, and its next COPY is not canceled.
    copy_in(&client, "COPY items FROM STDIN", lines(&[1, 2]))
        .await
        .expect("copy after the cancel");
    assert_eq!(count(&client).await, r#"[[Some("2")]]"#);
}

/// Goal: a COPY loads the table its statement named: one dropped and
/// created again under the same name before the first data arrives is not
/// loaded (40001), as one replaced between parts is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_into_a_table_replaced_before_its_data_fails() {
    let (server, client) = with_items().await;
    let sink = client.copy_in("COPY items FROM STDIN").await.expect("copy");
    futures::pin_mut!(sink);
    server
        .client()
        .await
        .batch_execute("DROP TABLE items; CREATE TABLE items (id BIGINT PRIMARY KEY, label TEXT)")
        .await
        .expect("replace");
    let error = finish_copy(sink, lines(&[1, 2, 3]))
        .await
        .expect_err("replaced");
    assert_eq!(crate::harness::sqlstate(&error), "40001", "{error:?}");
    assert_eq!(count(&client).await, r#"[[Some("0")]]"#);
}

/// Goal: statements after a `COPY … FROM STDIN` in one query string never
/// run before the COPY's data arrives (the parser reads what follows the
/// COPY as its inline data, as in a psql script, so they do not run at
/// all; PostgreSQL runs them after the COPY).
/// Method: the simple protocol by hand; the rows sent are all there after,
/// and only they.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_after_a_copy_in_one_string_do_not_run_first() {
    let (server, client) = with_items().await;
    copy_in(&client, "COPY items FROM STDIN", lines(&[1, 2]))
        .await
        .expect("copy");
    let mut raw = RawClient::connect(server.config().get_ports()[0]).await;
    raw.send(
        b'Q',
        b"COPY items FROM STDIN; DELETE FROM items; INSERT INTO items VALUES (9, 'v9')\0",
    )
    .await;
    assert_eq!(raw.read().await.0, b'G', "CopyInResponse");
    raw.send(b'd', lines(&[3, 4]).as_bytes()).await;
    raw.send(b'c', b"").await;
    assert_eq!(raw.read_until_ready().await, ["COPY 2"]);
    assert_eq!(count(&client).await, r#"[[Some("4")]]"#);
}
