//! Goal: the statements the gateway runs without planning (a select list of constants, INSERT
//! of literal VALUES, a row by its primary key; prepared or not) answer exactly as PostgreSQL
//! does: the same column names and types, the same rows, the same stored values, the same SQLSTATE for a value PostgreSQL
//! rounds, refuses or finds out of range (those the fast path leaves to the planned path).
//! Method: each statement on RockStream and on the oracle side by side, through the simple and
//! the extended protocol, then the table's rows compared.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.

use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

use crate::harness::compare::{compare_query, fetch_text_rows};
use crate::harness::oracle::OracleDatabase;
use crate::harness::server::TestServer;
use crate::harness::sqlstate;

const CONSTANT_SELECTS: &[&str] = &[
    "SELECT 1",
    "select 1 AS one",
    "SELECT -5, 'x', true, FALSE AS f",
    "SELECT 2147483647, 2147483648, -2147483648, 9223372036854775807",
    "SELECT 'a' AS \"Quoted\", 'it''s'",
    // Not constants of the fast path: planned, and still PostgreSQL's answer.
    "SELECT 1.5, 1 + 1",
];

const SCHEMA: &str = "
CREATE TABLE t (id INT PRIMARY KEY, b BOOLEAN, s SMALLINT, i INT, l BIGINT, r REAL,
                d DOUBLE PRECISION, n NUMERIC(10,2), tx TEXT, v VARCHAR(5), dt DATE, ts TIMESTAMP);
CREATE TABLE u (k INT PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE f (r REAL PRIMARY KEY, n INT);
";

const INSERTS: &[&str] = &[
    "INSERT INTO t VALUES (1, true, 1, 2, 3, 1.5, 2.25, 150.00, 'a', 'abc', '2024-01-02', '2024-01-02 10:00:00')",
    "INSERT INTO t (id, n) VALUES (2, 1.005)",
    "INSERT INTO t (id, i) VALUES (3, 1.5)",
    "INSERT INTO t (id, i) VALUES (4, 99999999999)",
    "INSERT INTO t (id, s) VALUES (5, 40000)",
    "INSERT INTO t (id, i) VALUES (6, '12')",
    "INSERT INTO t (id, i) VALUES (7, 'x')",
    "INSERT INTO t (id, v) VALUES (8, 'abcdef')",
    "INSERT INTO t (id, v) VALUES (9, 'abc   ')",
    "INSERT INTO t (id, tx) VALUES (10, NULL), (11, 'b')",
    "INSERT INTO t (id) VALUES (1)",
    "INSERT INTO t (id, n) VALUES (13, -0.5), (14, 12345678.99)",
    "INSERT INTO t (id, n) VALUES (15, 123456789)",
    "INSERT INTO t (id, r, d) VALUES (16, -1, 0.1)",
    "INSERT INTO t (ID, \"tx\") VALUES (17, 'q')",
    "INSERT INTO t (id, b) VALUES (18, 'yes'), (19, 't')",
    "INSERT INTO t (id, l, tx) VALUES (20, -9223372036854775808, '-')",
    "INSERT INTO t (id, tx) VALUES (21, 'one'), (21, 'two')",
    "INSERT INTO t (tx, id) VALUES ('swapped', 22)",
    "INSERT INTO t (id, ts) VALUES (23, '2024-02-29T23:59:59.5')",
    "INSERT INTO u VALUES (1, NULL)",
    "INSERT INTO u VALUES (2, 'x')",
    // Qualified names are resolved by the planned path: no such schema.
    "INSERT INTO nosuch.u VALUES (3, 'y')",
    "INSERT INTO f VALUES (0.1, 1), (16777217, 2)",
    // Without a column list, fewer values fill the leading columns and the
    // rest take their defaults. PostgreSQL's syntax errors for lists that
    // cannot fill their columns.
    "INSERT INTO t VALUES (24, false, 7)",
    "INSERT INTO t VALUES (25), (26)",
    "INSERT INTO t VALUES (27, true), (28)",
    "INSERT INTO t (id, b) VALUES (29)",
    "INSERT INTO t (id) VALUES (30, true)",
    "INSERT INTO u VALUES (3, 'y', 'extra')",
    "INSERT INTO u VALUES (4)",
];

/// Point lookups (and near misses, which are planned) over the rows INSERTS leave.
const LOOKUPS: &[&str] = &[
    "SELECT * FROM t WHERE id = 1",
    "SELECT * FROM t WHERE id = 12345",
    "SELECT tx, id AS \"Key\", n FROM t WHERE 17 = id",
    "SELECT t.v FROM t WHERE t.id = '9'",
    "SELECT x.b FROM t x WHERE (x.id = 18)",
    "SELECT * FROM t WHERE id = 1.5",
    "SELECT * FROM t WHERE id = 99999999999",
    "SELECT * FROM t WHERE id = NULL",
    "SELECT * FROM t WHERE id = 1 AND id = 2",
    "SELECT name FROM u WHERE k = 2",
    // Float keys are planned (a numeric literal compares as double precision).
    "SELECT * FROM f WHERE r = '0.1'",
    "SELECT n FROM f WHERE r = '16777216'",
];

/// The parameters of the prepared INSERT: id, b, i, l, d, tx.
type PreparedRow = (i32, bool, i32, i64, f64, Option<&'static str>);

async fn outcome(client: &Client, sql: &str) -> Result<u64, String> {
    client
        .execute(sql, &[])
        .await
        .map_err(|error| sqlstate(&error))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constant_selects_answer_as_postgres() {
    let server = TestServer::start().await;
    let oracle = OracleDatabase::create("fast_constant").await;
    let (ours, theirs) = (server.client().await, oracle.client().await);
    for sql in CONSTANT_SELECTS {
        compare_query("postgres", &theirs, "rockstream", &ours, sql)
            .await
            .unwrap();
        let (mine, expected) = (
            ours.prepare(sql).await.unwrap(),
            theirs.prepare(sql).await.unwrap(),
        );
        let shape = |statement: &tokio_postgres::Statement| -> Vec<(String, u32)> {
            statement
                .columns()
                .iter()
                .map(|column| (column.name().to_owned(), column.type_().oid()))
                .collect()
        };
        assert_eq!(shape(&mine), shape(&expected), "{sql}");
        let text = |rows: Vec<tokio_postgres::SimpleQueryMessage>| -> Vec<Vec<Option<String>>> {
            rows.into_iter()
                .filter_map(|message| match message {
                    tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                        (0..row.len())
                            .map(|i| row.get(i).map(str::to_owned))
                            .collect(),
                    ),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            text(ours.simple_query(sql).await.unwrap()),
            text(theirs.simple_query(sql).await.unwrap()),
            "{sql}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn literal_inserts_store_what_postgres_stores() {
    let server = TestServer::start().await;
    let oracle = OracleDatabase::create("fast_insert").await;
    let (ours, theirs) = (server.client().await, oracle.client().await);
    ours.batch_execute(SCHEMA).await.unwrap();
    theirs.batch_execute(SCHEMA).await.unwrap();
    for sql in INSERTS {
        assert_eq!(
            outcome(&ours, sql).await,
            outcome(&theirs, sql).await,
            "{sql}"
        );
    }
    // VALUES lists that cannot fill their columns: PostgreSQL's error, in its words, and a
    // column list's own errors first.
    let message = |error: tokio_postgres::Error| {
        let db = error.as_db_error().unwrap();
        // Ours leads with its RS code: "RS-2020 sql.syntax_error: ...".
        let text = match db.message().split_once(": ") {
            Some((code, text)) if code.starts_with("RS-") => text,
            _ => db.message(),
        };
        (db.code().code().to_owned(), text.to_owned())
    };
    for sql in [
        "INSERT INTO t (id) VALUES (31, 2), (32)",
        "INSERT INTO t (id, b) VALUES (31), (32, true)",
        "INSERT INTO t (id) VALUES (31), (32, 4)",
        "INSERT INTO t VALUES (31), (32, true)",
        "INSERT INTO t (nosuch) VALUES (31, 2)",
        "INSERT INTO t (id, id) VALUES (31)",
    ] {
        assert_eq!(
            message(ours.execute(sql, &[]).await.unwrap_err()),
            message(theirs.execute(sql, &[]).await.unwrap_err()),
            "{sql}"
        );
    }
    // A key already stored, one row on its own: the commit refuses it, naming the key as
    // PostgreSQL does.
    let detail = |error: tokio_postgres::Error| {
        let db = error.as_db_error().unwrap();
        (db.code().code().to_owned(), db.detail().map(str::to_owned))
    };
    for sql in [
        "INSERT INTO t VALUES (1, false)",
        "INSERT INTO t (tx, id) VALUES ('again', 22)",
    ] {
        let refused = detail(ours.execute(sql, &[]).await.unwrap_err());
        assert_eq!(refused, detail(theirs.execute(sql, &[]).await.unwrap_err()));
        assert!(refused.1.is_some(), "{sql}: {refused:?}");
    }
    // The extended protocol: the parameters' types come from Parse, bound values arrive as
    // casts to the column's own type.
    let prepared = "INSERT INTO t (id, b, i, l, d, tx) VALUES ($1, $2, $3, $4, $5, $6)";
    let rows: [PreparedRow; 3] = [
        (100, true, -7, 1 << 40, 0.25, Some("it's")),
        (101, false, 0, -1, -1.5e10, None),
        (102, true, i32::MAX, i64::MIN, 1.0 / 3.0, Some("")),
    ];
    // Parsed once and executed for every row, as a driver's prepared statement is.
    let statement = ours.prepare(prepared).await.unwrap();
    for (id, b, i, l, d, tx) in &rows {
        let params: [&(dyn ToSql + Sync); 6] = [id, b, i, l, d, tx];
        assert_eq!(ours.execute(&statement, &params).await.unwrap(), 1);
        assert_eq!(theirs.execute(prepared, &params).await.unwrap(), 1);
    }
    let repeated = ours.execute(&statement, &[&100i32, &true, &1i32, &1i64, &1.0f64, &"x"]);
    assert_eq!(
        detail(repeated.await.unwrap_err()),
        (
            "23505".to_owned(),
            Some("Key (id)=(100) already exists.".to_owned())
        )
    );
    // Fewer placeholders than columns and no column list: the leading columns.
    let short = "INSERT INTO t VALUES ($1, $2)";
    let statement = ours.prepare(short).await.unwrap();
    for id in [103i32, 104] {
        let params: [&(dyn ToSql + Sync); 2] = [&id, &(id % 2 == 0)];
        assert_eq!(ours.execute(&statement, &params).await.unwrap(), 1);
        assert_eq!(theirs.execute(short, &params).await.unwrap(), 1);
    }
    for sql in LOOKUPS {
        compare_query("postgres", &theirs, "rockstream", &ours, sql)
            .await
            .unwrap();
    }
    // A transaction reads its own pending rows by key, and a prepared lookup its bound key.
    let lookup = "SELECT id, tx FROM t WHERE id = $1";
    for client in [&ours, &theirs] {
        client
            .batch_execute(
                "BEGIN; UPDATE t SET tx = 'pending' WHERE id = 1; DELETE FROM t WHERE id = 2",
            )
            .await
            .unwrap();
    }
    let statement = ours.prepare(lookup).await.unwrap();
    for id in [1i32, 2, 3] {
        let read = |rows: Vec<tokio_postgres::Row>| -> Vec<(i32, Option<String>)> {
            rows.iter().map(|row| (row.get(0), row.get(1))).collect()
        };
        assert_eq!(
            read(ours.query(&statement, &[&id]).await.unwrap()),
            read(theirs.query(lookup, &[&id]).await.unwrap()),
            "id {id}"
        );
    }
    for client in [&ours, &theirs] {
        client.batch_execute("ROLLBACK").await.unwrap();
    }
    // A placeholder number past PostgreSQL's 65 535 parameters is refused (42P02), not allocated for.
    for sql in [
        "INSERT INTO u (k) VALUES ($1000000000000)",
        "SELECT * FROM u WHERE k = $1000000000000",
    ] {
        let refused = ours.prepare(sql).await.unwrap_err();
        assert_eq!(sqlstate(&refused), "42P02", "{sql}: {refused}");
        assert!(theirs.prepare(sql).await.is_err(), "{sql}");
    }
    for table in ["t", "u"] {
        compare_query(
            "postgres",
            &theirs,
            "rockstream",
            &ours,
            &format!("SELECT * FROM {table}"),
        )
        .await
        .unwrap();
    }
    // A varchar(5) keeps five of 'abc   ': the spaces past the limit are cut, not refused.
    assert_eq!(
        fetch_text_rows(&ours, "SELECT v FROM t WHERE id = 9")
            .await
            .unwrap(),
        vec![vec![Some("abc  ".to_owned())]]
    );
}
