//! Goal: a statement too deeply nested to plan is refused with a coded error, and the server
//! goes on serving: it does not overflow a thread's stack and abort; a select list beyond
//! PostgreSQL's 1664 items is refused likewise. A statement's working memory is bounded by
//! `--statement-memory`: a result beyond it fails with 53200 and changes nothing, a sort beyond
//! it spills and answers. Method: long chains of `OR`, `+` and `UNION ALL`, a very wide select
//! list, queries over a large `generate_series`, then ordinary queries on the same connection.

#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::{Storage, TestServer};
use crate::harness::sqlstate;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_deep_statements_are_refused_and_the_server_goes_on() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let chains = [
        format!("SELECT 1 WHERE {}", vec!["1 = 1"; 20_000].join(" OR ")),
        format!("SELECT {}", vec!["1"; 20_000].join(" + ")),
        vec!["SELECT 1"; 20_000].join(" UNION ALL "),
    ];
    for sql in &chains {
        let error = client.simple_query(sql).await.expect_err("refused");
        assert_eq!(sqlstate(&error), "54001", "{error}");
    }
    // PostgreSQL's cap on a select list (planning is superlinear in its length).
    let wide = format!("SELECT {}", vec!["1"; 100_000].join(", "));
    let error = client.simple_query(&wide).await.expect_err("refused");
    assert_eq!(sqlstate(&error), "54000", "{error}");
    let widest = format!(
        "SELECT {} FROM (SELECT 1 AS x) t",
        vec!["x + 1"; 1664].join(", ")
    );
    let rows = fetch_text_rows(&client, &widest).await.expect("1664 items");
    assert_eq!(rows[0].len(), 1664);
    // A long but acceptable chain still plans.
    let sum = format!("SELECT {}", vec!["1"; 500].join(" + "));
    let rows = fetch_text_rows(&client, &sum).await.expect("500 terms");
    assert_eq!(format!("{rows:?}"), r#"[[Some("500")]]"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_beyond_its_memory_fails_with_53200_and_the_session_goes_on() {
    let server = TestServer::start_with(Storage::new(), &["--statement-memory", "16MB"]).await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, pad text)")
        .await
        .unwrap();
    // About 230 MB of rows: far beyond the statement's 16 MB.
    let wide = "SELECT a, repeat('x', 100) FROM generate_series(1, 2000000) g(a)";
    let error = client.simple_query(wide).await.expect_err("refused");
    assert_eq!(sqlstate(&error), "53200", "{error}");
    let message = error.as_db_error().unwrap().message();
    assert!(message.starts_with("RS-2046"), "{message}");
    assert!(message.contains("16MB"), "{message}");
    // A DML statement computing as many rows fails the same way, writing nothing.
    let error = client
        .simple_query(&format!("INSERT INTO t {wide}"))
        .await
        .expect_err("refused");
    assert_eq!(sqlstate(&error), "53200", "{error}");
    let rows = fetch_text_rows(&client, "SELECT count(*) FROM t")
        .await
        .unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("0"));
    // A sort of more than the bound spills to disk and answers.
    let sorted = "SELECT a FROM generate_series(1, 3000000) g(a) ORDER BY a DESC OFFSET 2999998";
    let rows = fetch_text_rows(&client, sorted).await.expect("sorted");
    assert_eq!(format!("{rows:?}"), r#"[[Some("2")], [Some("1")]]"#);
    // Nothing stays reserved once statements end: only the SHOW's own text is.
    let rows = fetch_text_rows(&client, "SHOW rockstream.statement_memory")
        .await
        .unwrap();
    let shown = rows[0][0].as_deref().unwrap();
    let in_use: usize = shown
        .strip_prefix("statement=16MB total=4GB in_use_bytes=")
        .unwrap_or_else(|| panic!("{shown}"))
        .parse()
        .unwrap();
    assert!(in_use < 4096, "{shown}");
    // SQL text that would parse into more than the bound is refused unparsed.
    let huge = format!("SELECT {}", vec!["1"; 40_000].join(", "));
    let error = client.simple_query(&huge).await.expect_err("refused");
    assert_eq!(sqlstate(&error), "53200", "{error}");
    let message = error.as_db_error().unwrap().message();
    assert!(message.contains("of SQL text"), "{message}");
}
