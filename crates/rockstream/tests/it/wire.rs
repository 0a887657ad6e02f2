//! Goal: a real PostgreSQL client (tokio-postgres) talks to `serve` over TCP
//! and sees PostgreSQL behaviour: simple queries with text results, the
//! extended protocol with binary parameters and binary results, COPY FROM
//! STDIN in text and CSV, coded errors that leave the connection usable, a
//! FATAL for an unknown database, and `disconnect` when the client leaves.
//!
//! Method: a tiny in-memory fake `Backend` that recognises a handful of
//! fixed statements; the test only checks what crosses the wire.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
#![allow(clippy::disallowed_methods)] // The test harness spawns and sleeps on tokio directly.
mod fake_backend;
pub(crate) mod raw_client;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::SinkExt;
use rockstream_pgwire::{serve, CopyTarget};
use rockstream_types::codes;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{NoTls, SimpleQueryMessage};

use fake_backend::{BinaryDate, FakeBackend, Raw};
use raw_client::RawClient;

async fn start() -> (Arc<FakeBackend>, u16) {
    let backend = Arc::new(FakeBackend::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(serve(backend.clone(), listener, Default::default()));
    (backend, port)
}

async fn connect(
    port: u16,
    database: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let config = format!("host=127.0.0.1 port={port} user=tester dbname={database}");
    let (client, connection) = tokio_postgres::connect(&config, NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

fn rows(messages: &[SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    messages
        .iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|index| row.get(index).map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

fn completions(messages: &[SimpleQueryMessage]) -> Vec<u64> {
    messages
        .iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::CommandComplete(count) => Some(*count),
            _ => None,
        })
        .collect()
}

fn assert_db_error(error: &tokio_postgres::Error, sqlstate: &str, message_start: &str) {
    let db_error = error.as_db_error().expect("a server error");
    assert_eq!(db_error.code().code(), sqlstate);
    assert!(
        db_error.message().starts_with(message_start),
        "{}",
        db_error.message()
    );
}

#[tokio::test]
async fn simple_queries_return_postgres_text() {
    let (_backend, port) = start().await;
    let client = connect(port, "default").await.unwrap();

    let messages = client.simple_query("SELECT types").await.unwrap();
    let expected = [
        "t",
        "-2",
        "40",
        "8000000000",
        "1.5",
        "1e+20",
        "12.50",
        "héllo",
        "2024-01-31",
        "2024-01-31 12:00:00.5",
        "2024-01-31 12:00:00+00",
        "1 year 2 mons 3 days 04:05:06.5",
    ];
    let mut expected: Vec<Option<String>> = expected.iter().map(|v| Some(v.to_string())).collect();
    expected.push(None);
    assert_eq!(rows(&messages), vec![expected]);

    let messages = client
        .simple_query("BEGIN; SELECT empty; COMMIT")
        .await
        .unwrap();
    assert_eq!(completions(&messages), vec![0, 0, 0]);
    let described = messages.iter().any(|message| {
        matches!(message, SimpleQueryMessage::RowDescription(columns) if columns.len() == 2)
    });
    assert!(described, "zero-batch query still sends RowDescription");

    // tokio-postgres reports EmptyQueryResponse as CommandComplete(0), with no rows.
    let empty = client.simple_query("").await.unwrap();
    assert!(matches!(
        empty.as_slice(),
        [SimpleQueryMessage::CommandComplete(0)]
    ));
}

#[tokio::test]
async fn errors_are_coded_and_stop_the_query_string() {
    let (backend, port) = start().await;
    let client = connect(port, "default").await.unwrap();

    let error = client
        .simple_query("SELECT types; FAIL; SELECT types")
        .await
        .unwrap_err();
    assert_db_error(
        &error,
        "42601",
        "RS-2020 sql.syntax_error: syntax error at FAIL",
    );
    let db_error = error.as_db_error().unwrap();
    assert_eq!(
        db_error.detail(),
        Some("the fake backend always fails here")
    );
    assert_eq!(db_error.hint(), Some(codes::SYNTAX_ERROR.next_steps));

    let error = client.query("FAIL", &[]).await.unwrap_err();
    assert_db_error(&error, "42601", "RS-2020");

    // The connection is still usable after both errors.
    assert_eq!(
        rows(&client.simple_query("SELECT types").await.unwrap()).len(),
        1
    );
    assert!(backend.table.lock().unwrap().is_empty());
}

#[tokio::test]
async fn extended_protocol_binds_parameters_and_returns_binary() {
    let (_backend, port) = start().await;
    let client = connect(port, "default").await.unwrap();

    let inserted = client
        .execute("INSERT INTO t VALUES ($1, $2)", &[&7i32, &"seven"])
        .await
        .unwrap();
    assert_eq!(inserted, 1);
    let rows = client.query("SELECT * FROM t", &[]).await.unwrap();
    assert_eq!(rows[0].get::<_, i32>(0), 7);
    assert_eq!(rows[0].get::<_, String>(1), "seven");

    let date = BinaryDate(8_796); // 2024-01-31
    let params: [&(dyn ToSql + Sync); 6] = [&-1i32, &None::<i64>, &1.5f64, &"hé", &true, &date];
    let echoed = client
        .query("SELECT echo($1, $2, $3, $4, $5, $6)", &params)
        .await
        .unwrap();
    let echoed: Vec<Option<String>> = (0..6).map(|index| echoed[0].get(index)).collect();
    let expected = [
        Some("-1"),
        None,
        Some("1.5"),
        Some("hé"),
        Some("true"),
        Some("2024-01-31"),
    ];
    assert_eq!(echoed, expected.map(|value| value.map(str::to_owned)));

    let row = &client.query("SELECT types", &[]).await.unwrap()[0];
    assert!(row.get::<_, bool>(0));
    assert_eq!(row.get::<_, i16>(1), -2);
    assert_eq!(row.get::<_, i32>(2), 40);
    assert_eq!(row.get::<_, i64>(3), 8_000_000_000);
    assert_eq!(row.get::<_, f32>(4), 1.5);
    assert_eq!(row.get::<_, f64>(5), 1e20);
    assert_eq!(
        row.get::<_, Raw>(6).0,
        [0, 2, 0, 0, 0, 0, 0, 2, 0, 12, 19, 136]
    );
    assert_eq!(row.get::<_, String>(7), "héllo");
    assert_eq!(row.get::<_, Raw>(8).0, 8_796i32.to_be_bytes());
    assert_eq!(row.get::<_, Raw>(9).0, 760_017_600_500_000i64.to_be_bytes());
    assert_eq!(row.get::<_, Option<Raw>>(12).map(|raw| raw.0), None);
    assert_eq!(row.columns()[6].type_(), &Type::NUMERIC);
    assert_eq!(row.columns()[11].type_(), &Type::INTERVAL);
}

async fn copy(
    client: &tokio_postgres::Client,
    sql: &str,
    data: &str,
) -> Result<u64, tokio_postgres::Error> {
    let mut sink = Box::pin(client.copy_in::<_, Bytes>(sql).await?);
    sink.as_mut()
        .send(Bytes::copy_from_slice(data.as_bytes()))
        .await?;
    sink.as_mut().finish().await
}

/// Goal: the wire hands a COPY to the backend in parts of bounded size
/// however the client sends it: one message of 6 MB with a row longer than a
/// part in its middle arrives in parts of at most about twice that row, the
/// rest after it included, with every row once and in order.
#[tokio::test]
async fn one_large_copy_message_arrives_in_bounded_parts() {
    let (backend, port) = start().await;
    let client = connect(port, "default").await.unwrap();
    let short = |n: usize| format!("{n}\t{}\n", "n".repeat(50));
    let mut data: String = (0..20_000).map(short).collect();
    data.push_str(&format!("20000\t{}\n", "x".repeat(600 << 10)));
    data.extend((20_001..100_000).map(short));
    let loaded = copy(&client, "COPY t FROM STDIN", &data).await;
    assert_eq!(loaded.unwrap(), 100_000);
    let parts = backend.copy_parts.lock().unwrap().clone();
    let largest = parts.iter().copied().max().unwrap_or(0);
    assert!(
        largest <= 2 * (600 << 10) + (256 << 10),
        "a part of {largest} bytes ({} parts)",
        parts.len()
    );
    let table = backend.table.lock().unwrap();
    assert_eq!(table.len(), 100_000);
    assert!(table
        .iter()
        .enumerate()
        .all(|(n, row)| row[0].as_deref() == Some(n.to_string().as_str())));
}

#[tokio::test]
async fn copy_from_stdin_loads_text_and_csv() {
    let (backend, port) = start().await;
    let client = connect(port, "default").await.unwrap();

    let loaded = copy(
        &client,
        "COPY t FROM STDIN",
        "1\tone\n2\t\\N\n3\ttab\\there\n\\.\n",
    )
    .await;
    assert_eq!(loaded.unwrap(), 3);
    let csv = "id,name\n4,\"four, quoted\"\n5,\n";
    let loaded = copy(&client, "COPY t FROM STDIN WITH (FORMAT csv, HEADER)", csv).await;
    assert_eq!(loaded.unwrap(), 2);

    let error = copy(&client, "COPY t FROM STDIN", "6\tsix\n7\n")
        .await
        .unwrap_err();
    assert_db_error(
        &error,
        "22P04",
        "RS-2021 copy.malformed_stdin_statement: COPY t, line 2",
    );

    let table = backend.table.lock().unwrap().clone();
    let names: Vec<Option<&str>> = table.iter().map(|row| row[1].as_deref()).collect();
    assert_eq!(
        names,
        [
            Some("one"),
            None,
            Some("tab\there"),
            Some("four, quoted"),
            None
        ]
    );
    drop(table);

    // The connection is still usable after the failed COPY.
    let messages = client.simple_query("SELECT * FROM t").await.unwrap();
    assert_eq!(rows(&messages).len(), 5);
}

#[tokio::test]
async fn simple_protocol_copy_like_psql() {
    let (backend, port) = start().await;
    let mut client = RawClient::connect(port).await;

    client.send(b'Q', b"COPY t FROM STDIN\0").await;
    assert_eq!(client.read().await.0, b'G', "CopyInResponse");
    client.send(b'd', b"1\tone\n2\t").await;
    client.send(b'd', b"\\N\n\\.\n").await;
    client.send(b'c', b"").await;
    assert_eq!(client.read_until_ready().await, ["COPY 2"]);

    client.send(b'Q', b"COPY t FROM STDIN\0").await;
    assert_eq!(client.read().await.0, b'G');
    client.send(b'f', b"user abort\0").await;
    assert_eq!(client.read_until_ready().await, ["E"]);

    client.send(b'Q', b"BEGIN; SELECT * FROM t; COMMIT\0").await;
    let seen = client.read_until_ready().await;
    assert_eq!(seen, ["BEGIN", "T", "D", "D", "SELECT 2", "COMMIT"]);
    assert_eq!(
        backend.table.lock().unwrap()[1],
        vec![Some("2".to_owned()), None]
    );
}

#[tokio::test]
async fn malformed_messages_get_coded_errors_and_the_connection_goes_on() {
    let (_backend, port) = start().await;
    let mut client = RawClient::connect(port).await;

    // Parse announcing 30,000 parameter types and sending none.
    let mut parse = b"\0SELECT * FROM t\0".to_vec();
    parse.extend(30_000_i16.to_be_bytes());
    client.send(b'P', &parse).await;
    client.send(b'S', b"").await;
    assert_eq!(client.read_error().await, ("ERROR".into(), "08P01".into()));
    assert_eq!(client.read_until_ready().await, Vec::<String>::new());

    // Bind whose parameter claims 2^31-1 bytes and carries 3; the messages
    // up to Sync are skipped, as after any extended-protocol error.
    let mut bind = b"\0\0".to_vec();
    bind.extend(0_i16.to_be_bytes());
    bind.extend(1_i16.to_be_bytes());
    bind.extend(i32::MAX.to_be_bytes());
    bind.extend(b"abc");
    bind.extend(0_i16.to_be_bytes());
    client.send(b'B', &bind).await;
    client.send(b'E', b"\0\0\0\0\0").await;
    client.send(b'S', b"").await;
    assert_eq!(client.read_error().await, ("ERROR".into(), "08P01".into()));
    assert_eq!(client.read_until_ready().await, Vec::<String>::new());

    // After the first error of an extended exchange, the rest up to Sync
    // is skipped, malformed or not: one error per exchange.
    client.send(b'P', &parse).await;
    client.send(b'B', &bind).await;
    client.send(b'S', b"").await;
    assert_eq!(client.read_error().await, ("ERROR".into(), "08P01".into()));
    assert_eq!(client.read_until_ready().await, Vec::<String>::new());

    // A malformed Sync still ends the exchange.
    client.send(b'S', b"extra").await;
    assert_eq!(client.read_error().await, ("ERROR".into(), "08P01".into()));
    assert_eq!(client.read_until_ready().await, Vec::<String>::new());

    // SQL text that is not UTF-8.
    client.send(b'Q', b"SELECT '\xff'\0").await;
    assert_eq!(client.read_error().await, ("ERROR".into(), "22021".into()));
    assert_eq!(client.read_until_ready().await, Vec::<String>::new());

    // The connection still works.
    client.send(b'Q', b"SELECT * FROM t\0").await;
    assert_eq!(client.read_until_ready().await, ["T", "SELECT 0"]);

    // A Query message two bytes long: framing is lost, the server closes.
    client.send_bytes(b"Q\0\0\0\x02SELECT 1\0").await;
    assert_eq!(client.read_error().await, ("FATAL".into(), "08P01".into()));
    assert!(client.closed().await);

    // So does a startup packet three bytes long.
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(b"\0\0\0\x03\0\0\0\0").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server closes at once")
        .unwrap();
    assert_eq!(answer.first(), Some(&b'E'));
}

#[tokio::test]
async fn a_cancel_request_interrupts_the_running_statement_only() {
    let (_backend, port) = start().await;
    let client = connect(port, "default").await.unwrap();
    let other = connect(port, "default").await.unwrap();
    let token = client.cancel_token();
    let canceler = tokio::spawn(async move {
        // Cancels sent before the statement starts are dropped; keep asking.
        for _ in 0..100 {
            token.cancel_query(NoTls).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let error = tokio::time::timeout(
        Duration::from_secs(10),
        client.simple_query("WAIT FOR CANCEL"),
    )
    .await
    .expect("the cancel request stops the statement")
    .unwrap_err();
    assert_eq!(error.code().map(|code| code.code()), Some("57014"));
    canceler.abort();
    // Both connections go on; the other one was never interrupted.
    assert_eq!(
        rows(&client.simple_query("SELECT types").await.unwrap()).len(),
        1
    );
    assert_eq!(
        rows(&other.simple_query("SELECT types").await.unwrap()).len(),
        1
    );
}

#[tokio::test]
async fn a_client_leaving_stops_its_running_statement() {
    let (backend, port) = start().await;
    let mut client = RawClient::connect(port).await;
    client.send(b'Q', b"WAIT FOR CANCEL\0").await;
    drop(client);
    for _ in 0..250 {
        if backend.interrupted.load(Ordering::SeqCst) == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the statement of a client that left was not stopped");
}

#[tokio::test]
async fn deallocate_forgets_a_statement_prepared_by_parse() {
    let (_backend, port) = start().await;
    let mut client = RawClient::connect(port).await;
    client.send(b'P', b"stmt1\0SELECT types\0\0\0").await;
    client.send(b'S', b"").await;
    assert_eq!(client.read_until_ready().await, ["1"], "ParseComplete");

    client.send(b'Q', b"DEALLOCATE stmt1\0").await;
    assert_eq!(client.read_until_ready().await, ["DEALLOCATE"]);
    client.send(b'Q', b"DEALLOCATE stmt1\0").await;
    assert_eq!(client.read_error().await, ("ERROR".into(), "26000".into()));
    client.read_until_ready().await;
    // Binding the forgotten statement fails.
    client.send(b'B', b"\0stmt1\0\0\0\0\0\0\0").await;
    client.send(b'S', b"").await;
    assert_eq!(client.read_error().await.0, "ERROR");
    client.read_until_ready().await;
    // DEALLOCATE ALL forgets every named statement.
    client.send(b'P', b"stmt2\0SELECT types\0\0\0").await;
    client.send(b'S', b"").await;
    assert_eq!(client.read_until_ready().await, ["1"], "ParseComplete");
    client.send(b'Q', b"DEALLOCATE ALL\0").await;
    assert_eq!(client.read_until_ready().await, ["DEALLOCATE ALL"]);
    client.send(b'Q', b"DEALLOCATE stmt2\0").await;
    assert_eq!(client.read_error().await, ("ERROR".into(), "26000".into()));
    client.read_until_ready().await;
}

#[tokio::test]
async fn unknown_database_is_fatal_and_sessions_are_returned() {
    let (backend, port) = start().await;
    let Err(error) = connect(port, "nope").await else {
        panic!("connecting to an unknown database must fail");
    };
    let db_error = error.as_db_error().expect("a server error");
    assert_eq!(db_error.code().code(), "3D000");
    assert_eq!(db_error.severity(), "FATAL");

    let client = connect(port, "default").await.unwrap();
    drop(client);
    for _ in 0..100 {
        if backend.disconnects.load(Ordering::SeqCst) == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("disconnect was not called after the client left");
}

#[tokio::test]
async fn a_panicking_statement_fails_alone_and_its_connection_goes_on() {
    let (backend, port) = start().await;
    let panicked = connect(port, "default").await.unwrap();
    let error = panicked.simple_query("PANIC").await.unwrap_err();
    assert_eq!(
        error.as_db_error().map(|db| db.code().code()),
        Some("XX000"),
        "{error}"
    );
    // The same connection goes on, and so does any other.
    for session in [&panicked, &connect(port, "default").await.unwrap()] {
        assert_eq!(
            rows(&session.simple_query("SELECT types").await.unwrap()).len(),
            1
        );
    }
    drop(panicked);
    // Its session is handed back when it ends (as the other one's was).
    for _ in 0..100 {
        if backend.disconnects.load(Ordering::SeqCst) == 2 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("disconnect was not called for the connection that panicked");
}

#[test]
fn copy_targets_default_like_postgres() {
    let text = CopyTarget::text("t", vec![]);
    assert_eq!((text.delimiter, text.null_string.as_str()), (b'\t', "\\N"));
    let csv = CopyTarget::csv("t", vec![]);
    assert_eq!((csv.delimiter, csv.quote, csv.escape), (b',', b'"', b'"'));
}
