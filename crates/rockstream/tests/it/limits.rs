//! Goal: a statement too deeply nested to plan is refused with a coded error, and the server
//! goes on serving: it does not overflow a thread's stack and abort; a select list beyond
//! PostgreSQL's 1664 items is refused likewise. Method: long chains of `OR`, `+` and
//! `UNION ALL`, a very wide select list, then ordinary queries on the same connection.

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::TestServer;
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
