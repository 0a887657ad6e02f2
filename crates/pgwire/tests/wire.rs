//! Goal: a real PostgreSQL client (tokio-postgres) talks to `serve` over TCP
//! and sees PostgreSQL behaviour: simple queries with text results, the
//! extended protocol with binary parameters and binary results, COPY FROM
//! STDIN in text and CSV, coded errors that leave the connection usable, a
//! FATAL for an unknown database, and `disconnect` when the client leaves.
//!
//! Method: a tiny in-memory fake `Backend` that recognises a handful of
//! fixed statements; the test only checks what crosses the wire.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int16Array,
    Int32Array, Int64Array, IntervalMonthDayNanoArray, NullArray, StringArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, IntervalMonthDayNano, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use futures::SinkExt;
use rockstream_pgwire::{serve, Backend, CopyTarget, Described, StatementResult};
use rockstream_types::{codes, RsError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};
use tokio_postgres::{NoTls, SimpleQueryMessage};

/// Rows of the one table `t (id int, name text)`, as text.
type Table = Vec<Vec<Option<String>>>;

#[derive(Default)]
struct FakeBackend {
    table: Mutex<Table>,
    disconnects: AtomicUsize,
}

struct FakeSession;

fn t_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// One row of every supported type (the values of the text expectations below).
fn types_result() -> StatementResult {
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("b", Arc::new(BooleanArray::from(vec![true]))),
        ("i2", Arc::new(Int16Array::from(vec![-2]))),
        ("i4", Arc::new(Int32Array::from(vec![40]))),
        ("i8", Arc::new(Int64Array::from(vec![8_000_000_000]))),
        ("f4", Arc::new(Float32Array::from(vec![1.5]))),
        ("f8", Arc::new(Float64Array::from(vec![1e20]))),
        (
            "n",
            Arc::new(
                Decimal128Array::from(vec![1250])
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ),
        ),
        ("s", Arc::new(StringArray::from(vec!["héllo"]))),
        ("d", Arc::new(Date32Array::from(vec![19_753]))),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(vec![1_706_702_400_500_000])),
        ),
        (
            "tz",
            Arc::new(
                TimestampMicrosecondArray::from(vec![1_706_702_400_000_000]).with_timezone("UTC"),
            ),
        ),
        (
            "iv",
            Arc::new(IntervalMonthDayNanoArray::from(vec![
                IntervalMonthDayNano::new(14, 3, 14_706_500_000_000),
            ])),
        ),
        ("nothing", Arc::new(NullArray::new(1))),
    ];
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    StatementResult::Query {
        schema: batch.schema(),
        batches: vec![batch],
    }
}

fn table_result(rows: &Table) -> StatementResult {
    let ids: Vec<Option<i32>> = rows
        .iter()
        .map(|row| row[0].as_deref().map(|id| id.parse().unwrap()))
        .collect();
    let names: Vec<Option<&str>> = rows.iter().map(|row| row[1].as_deref()).collect();
    let batch = RecordBatch::try_new(
        t_schema(),
        vec![
            Arc::new(Int32Array::from(ids)),
            Arc::new(StringArray::from(names)),
        ],
    )
    .unwrap();
    StatementResult::Query {
        schema: t_schema(),
        batches: vec![batch],
    }
}

fn echo_schema(count: usize) -> SchemaRef {
    let fields: Vec<Field> = (1..=count)
        .map(|index| Field::new(format!("p{index}"), DataType::Utf8, true))
        .collect();
    Arc::new(Schema::new(fields))
}

/// The parameter types of the `SELECT echo(...)` statement.
fn echo_types() -> Vec<DataType> {
    vec![
        DataType::Int32,
        DataType::Int64,
        DataType::Float64,
        DataType::Utf8,
        DataType::Boolean,
        DataType::Date32,
    ]
}

fn copy_target(sql: &str) -> Option<CopyTarget> {
    let columns = vec!["id".to_owned(), "name".to_owned()];
    match sql {
        "COPY t FROM STDIN" => Some(CopyTarget::text("t", columns)),
        "COPY t FROM STDIN WITH (FORMAT csv, HEADER)" => {
            let mut target = CopyTarget::csv("t", columns);
            target.header = true;
            Some(target)
        }
        _ => None,
    }
}

impl FakeBackend {
    fn run(&self, sql: &str, params: &[Option<String>]) -> Result<StatementResult, RsError> {
        let command = |tag: &str| {
            Ok(StatementResult::Command {
                tag: tag.to_owned(),
            })
        };
        if let Some(target) = copy_target(sql) {
            return Ok(StatementResult::CopyIn(target));
        }
        match sql {
            "BEGIN" | "COMMIT" => command(sql),
            "SELECT types" => Ok(types_result()),
            "SELECT * FROM t" => Ok(table_result(&self.table.lock().unwrap())),
            "SELECT empty" => Ok(StatementResult::Query {
                schema: t_schema(),
                batches: vec![],
            }),
            "INSERT INTO t VALUES ($1, $2)" => {
                self.table.lock().unwrap().push(params.to_vec());
                command("INSERT 0 1")
            }
            "SELECT echo($1, $2, $3, $4, $5, $6)" => {
                let values: Vec<Option<&str>> = params.iter().map(Option::as_deref).collect();
                let batch = RecordBatch::try_new(
                    echo_schema(values.len()),
                    values
                        .iter()
                        .map(|value| Arc::new(StringArray::from(vec![*value])) as ArrayRef)
                        .collect(),
                )
                .unwrap();
                Ok(StatementResult::Query {
                    schema: batch.schema(),
                    batches: vec![batch],
                })
            }
            "PANIC" => panic!("the fake backend panics on request"),
            "FAIL" => Err(RsError::new(&codes::SYNTAX_ERROR, "syntax error at FAIL")
                .with_detail("the fake backend always fails here")),
            _ => Err(RsError::new(&codes::UNSUPPORTED_STATEMENT, sql.to_owned())),
        }
    }
}

#[async_trait]
impl Backend for FakeBackend {
    type Session = FakeSession;

    async fn connect(&self, _user: &str, database: &str) -> Result<FakeSession, RsError> {
        if database == "default" {
            Ok(FakeSession)
        } else {
            Err(RsError::new(
                &codes::UNKNOWN_DATABASE,
                format!("database \"{database}\" does not exist"),
            ))
        }
    }

    async fn execute(
        &self,
        _session: &mut FakeSession,
        sql: &str,
    ) -> Vec<Result<StatementResult, RsError>> {
        let mut results = Vec::new();
        for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let result = self.run(statement, &[]);
            let failed = result.is_err();
            results.push(result);
            if failed {
                break;
            }
        }
        results
    }

    async fn describe(&self, _session: &mut FakeSession, sql: &str) -> Result<Described, RsError> {
        let (parameter_types, columns) = match sql {
            "INSERT INTO t VALUES ($1, $2)" => (vec![DataType::Int32, DataType::Utf8], None),
            "SELECT echo($1, $2, $3, $4, $5, $6)" => (echo_types(), Some(echo_schema(6))),
            "SELECT * FROM t" | "SELECT empty" => (vec![], Some(t_schema())),
            "SELECT types" => match types_result() {
                StatementResult::Query { schema, .. } => (vec![], Some(schema)),
                _ => unreachable!(),
            },
            _ if copy_target(sql).is_some() => (vec![], None),
            _ => {
                self.run(sql, &[])?;
                (vec![], None)
            }
        };
        Ok(Described {
            parameter_types,
            columns,
        })
    }

    async fn execute_with_params(
        &self,
        _session: &mut FakeSession,
        sql: &str,
        params: &[Option<String>],
    ) -> Result<StatementResult, RsError> {
        self.run(sql, params)
    }

    async fn copy_in(
        &self,
        _session: &mut FakeSession,
        target: &CopyTarget,
        rows: Vec<Vec<Option<String>>>,
    ) -> Result<u64, RsError> {
        assert_eq!(target.table, "t");
        let count = rows.len() as u64;
        self.table.lock().unwrap().extend(rows);
        Ok(count)
    }

    async fn disconnect(&self, _session: FakeSession) {
        self.disconnects.fetch_add(1, Ordering::SeqCst);
    }
}

/// The raw binary bytes of a value, whatever its type.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// A DATE parameter sent in binary: days since 2000-01-01.
#[derive(Debug)]
struct BinaryDate(i32);

impl ToSql for BinaryDate {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0.to_be_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::DATE
    }

    tokio_postgres::types::to_sql_checked!();
}

async fn start() -> (Arc<FakeBackend>, u16) {
    let backend = Arc::new(FakeBackend::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(serve(backend.clone(), listener));
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

/// A minimal raw frontend, to drive the simple-protocol COPY psql's `\copy` uses.
struct RawClient {
    stream: tokio::net::TcpStream,
}

impl RawClient {
    async fn connect(port: u16) -> RawClient {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let mut client = RawClient { stream };
        let mut body = 196_608i32.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0tester\0database\0default\0\0");
        let mut startup = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        startup.extend(body);
        client.stream.write_all(&startup).await.unwrap();
        client.read_until_ready().await;
        client
    }

    async fn send(&mut self, kind: u8, body: &[u8]) {
        let mut message = vec![kind];
        message.extend(((body.len() + 4) as i32).to_be_bytes());
        message.extend_from_slice(body);
        self.stream.write_all(&message).await.unwrap();
    }

    async fn read(&mut self) -> (u8, Vec<u8>) {
        let kind = self.stream.read_u8().await.unwrap();
        let length = self.stream.read_i32().await.unwrap() as usize;
        let mut body = vec![0; length - 4];
        self.stream.read_exact(&mut body).await.unwrap();
        (kind, body)
    }

    /// Message kinds (and CommandComplete tags) up to ReadyForQuery.
    async fn read_until_ready(&mut self) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let (kind, body) = self.read().await;
            match kind {
                b'C' => seen.push(String::from_utf8_lossy(&body[..body.len() - 1]).into_owned()),
                b'Z' => return seen,
                other => seen.push(char::from(other).to_string()),
            }
        }
    }
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
async fn unknown_database_is_fatal_and_sessions_are_returned() {
    let (backend, port) = start().await;
    let error = connect(port, "nope")
        .await
        .err()
        .expect("connect must fail");
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
async fn a_panicking_connection_does_not_stop_the_server() {
    let (backend, port) = start().await;
    let doomed = connect(port, "default").await.unwrap();
    assert!(doomed.simple_query("PANIC").await.is_err());

    let survivor = connect(port, "default").await.unwrap();
    assert_eq!(
        rows(&survivor.simple_query("SELECT types").await.unwrap()).len(),
        1
    );
    // The panicked connection's session was still handed back.
    for _ in 0..100 {
        if backend.disconnects.load(Ordering::SeqCst) == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("disconnect was not called for the panicked connection");
}

#[test]
fn copy_targets_default_like_postgres() {
    let text = CopyTarget::text("t", vec![]);
    assert_eq!((text.delimiter, text.null_string.as_str()), (b'\t', "\\N"));
    let csv = CopyTarget::csv("t", vec![]);
    assert_eq!((csv.delimiter, csv.quote, csv.escape), (b',', b'"', b'"'));
}
