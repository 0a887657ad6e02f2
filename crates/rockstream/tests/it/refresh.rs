//! Goal: `REFRESH MATERIALIZED VIEW`, which PostgreSQL applications send after their writes, is
//! accepted and changes nothing: every acknowledged commit is already in the view. It fails
//! where PostgreSQL's would: an object that is not a materialized view, or a view whose
//! definition fails on the current rows; `WITH NO DATA` is refused with a coded error. Method:
//! the statements over the wire, in the simple and the extended protocol.

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::TestServer;
use crate::harness::sqlstate;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_materialized_view_is_accepted_and_changes_nothing() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE t (x INT);
             CREATE MATERIALIZED VIEW totals AS SELECT count(*) AS n, sum(10 / x) AS s FROM t;
             CREATE VIEW plain AS SELECT x FROM t;
             INSERT INTO t VALUES (1), (2);",
        )
        .await
        .expect("setup");
    for refresh in [
        "REFRESH MATERIALIZED VIEW totals",
        "refresh materialized view concurrently \"totals\" with data;",
        "BEGIN; REFRESH MATERIALIZED VIEW totals; COMMIT",
    ] {
        client.batch_execute(refresh).await.expect(refresh);
    }
    // The extended protocol, as drivers send it.
    client
        .execute("REFRESH MATERIALIZED VIEW totals", &[])
        .await
        .expect("extended protocol");
    let rows = fetch_text_rows(&client, "SELECT n, s FROM totals")
        .await
        .expect("read");
    assert_eq!(format!("{rows:?}"), r#"[[Some("2"), Some("15")]]"#);

    let refused = [
        ("REFRESH MATERIALIZED VIEW t", "42809"),
        ("REFRESH MATERIALIZED VIEW plain", "42809"),
        ("REFRESH MATERIALIZED VIEW missing", "42P01"),
        ("REFRESH MATERIALIZED VIEW totals WITH NO DATA", "0A000"),
        ("REFRESH VIEW totals", "42601"),
    ];
    for (statement, code) in refused {
        let error = client.batch_execute(statement).await.expect_err(statement);
        assert_eq!(sqlstate(&error), code, "{statement}: {error}");
    }
    // A failed refresh aborts its transaction, as any failed statement does.
    client.batch_execute("BEGIN").await.expect("a transaction");
    let error = client
        .batch_execute("REFRESH MATERIALIZED VIEW missing")
        .await
        .expect_err("no such view");
    assert_eq!(sqlstate(&error), "42P01", "{error}");
    let error = client
        .batch_execute("SELECT 1")
        .await
        .expect_err("the transaction is aborted");
    assert_eq!(sqlstate(&error), "25P02", "{error}");
    client.batch_execute("ROLLBACK").await.expect("rollback");

    // A definition failing on the current rows fails the refresh, as in PostgreSQL.
    client
        .batch_execute("INSERT INTO t VALUES (0)")
        .await
        .expect("a row dividing by zero");
    let error = client
        .batch_execute("REFRESH MATERIALIZED VIEW totals")
        .await
        .expect_err("the view fails");
    assert_eq!(sqlstate(&error), "22000", "{error}");
    client
        .batch_execute("DELETE FROM t WHERE x = 0; REFRESH MATERIALIZED VIEW totals")
        .await
        .expect("healed");
}
