//! Goal: SQL functions (`CREATE FUNCTION … LANGUAGE SQL`, RFC 0012) are durable, and a view
//! calling one stays correct and maintained across restarts; what RockStream keeps stricter than
//! PostgreSQL (a function a view calls, directly or through another function, is neither dropped
//! nor replaced; function DDL outside transaction blocks) is refused with a code. What PostgreSQL
//! does alike is checked against it in `slt/sql_functions.slt` and the differential test.
//! Method: one server, restarted over its storage; SQLSTATEs of each refusal.

use crate::harness::server::TestServer;
use crate::transactional_ddl::{execute, failure, rows};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_and_the_views_calling_them_survive_a_restart() {
    let mut server = TestServer::start().await;
    let client = server.client().await;
    execute(
        &client,
        "CREATE TABLE bids (id INT PRIMARY KEY, extra TEXT, price INT);
         CREATE FUNCTION count_char(s varchar, c varchar) RETURNS int LANGUAGE SQL AS
           $$SELECT LENGTH(s) - LENGTH(REPLACE(s, c, ''))$$;
         CREATE FUNCTION doubled(int) RETURNS int LANGUAGE SQL STRICT RETURN $1 * 2;
         CREATE MATERIALIZED VIEW counted AS
           SELECT id, count_char(extra, 'c') AS cs, doubled(price) AS p FROM bids;
         INSERT INTO bids VALUES (1, 'cccx', 5), (2, NULL, NULL)",
    )
    .await;
    assert_eq!(
        rows(&client, "SELECT * FROM counted").await,
        ["1 3 10", "2 NULL NULL"]
    );
    drop(client);
    server.restart().await;
    let client = server.client().await;
    execute(
        &client,
        "INSERT INTO bids VALUES (3, 'c', 7); DELETE FROM bids WHERE id = 2",
    )
    .await;
    assert_eq!(
        rows(&client, "SELECT * FROM counted").await,
        ["1 3 10", "3 1 14"]
    );
    assert_eq!(
        rows(&client, "SELECT count_char('acca', 'c'), doubled(21)").await,
        ["2 42"]
    );
    // The view still holds them after the restart.
    assert_eq!(failure(&client, "DROP FUNCTION doubled").await, "2BP01");
    execute(
        &client,
        "DROP MATERIALIZED VIEW counted; DROP FUNCTION doubled(int)",
    )
    .await;
    drop(client);
    server.restart().await;
    let client = server.client().await;
    assert_eq!(failure(&client, "SELECT doubled(1)").await, "42883");
    assert_eq!(rows(&client, "SELECT count_char('cc', 'c')").await, ["2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_ddl_rockstream_keeps_stricter_is_refused_with_a_code() {
    let server = TestServer::start().await;
    let client = server.client().await;
    execute(
        &client,
        "CREATE TABLE t (id INT PRIMARY KEY, v INT);
         CREATE FUNCTION inner_f(x int) RETURNS int LANGUAGE SQL AS 'SELECT x + 1';
         CREATE FUNCTION outer_f(x int) RETURNS int LANGUAGE SQL AS 'SELECT inner_f(x) * 2';
         CREATE MATERIALIZED VIEW v AS SELECT id, outer_f(v) AS w FROM t;
         INSERT INTO t VALUES (1, 1)",
    )
    .await;
    assert_eq!(rows(&client, "SELECT * FROM v").await, ["1 4"]);
    // The view's state was computed with both bodies: neither goes nor changes while it exists
    // (PostgreSQL tracks the direct call only).
    assert_eq!(failure(&client, "DROP FUNCTION inner_f").await, "2BP01");
    assert_eq!(
        failure(
            &client,
            "CREATE OR REPLACE FUNCTION inner_f(x int) RETURNS int LANGUAGE SQL AS 'SELECT x'"
        )
        .await,
        "0A000"
    );
    // A function reaching itself is refused when it is defined, not when it is called.
    execute(
        &client,
        "CREATE FUNCTION ping(x int) RETURNS int LANGUAGE SQL AS 'SELECT x'",
    )
    .await;
    execute(
        &client,
        "CREATE FUNCTION pong(x int) RETURNS int LANGUAGE SQL AS 'SELECT ping(x)'",
    )
    .await;
    assert_eq!(
        failure(
            &client,
            "CREATE OR REPLACE FUNCTION ping(x int) RETURNS int LANGUAGE SQL AS 'SELECT pong(x)'"
        )
        .await,
        "42P13"
    );
    assert_eq!(rows(&client, "SELECT pong(5)").await, ["5"]);
    // Durable at once, so not inside a transaction block (ROLLBACK could not undo it).
    assert_eq!(
        failure(
            &client,
            "BEGIN; CREATE FUNCTION f() RETURNS int LANGUAGE SQL AS 'SELECT 1'"
        )
        .await,
        "25001"
    );
    execute(&client, "ROLLBACK").await;
    assert_eq!(failure(&client, "BEGIN; DROP FUNCTION ping").await, "25001");
    execute(&client, "ROLLBACK").await;
    // A view a transaction block plans over a function another session drops before the COMMIT.
    let other = server.client().await;
    execute(
        &client,
        "BEGIN; CREATE MATERIALIZED VIEW late AS SELECT pong(v) AS p FROM t",
    )
    .await;
    execute(&other, "DROP FUNCTION pong").await;
    assert_eq!(failure(&client, "COMMIT").await, "42883");
    assert_eq!(failure(&client, "SELECT * FROM late").await, "42P01");
    // CASCADE takes the view, and what reads it, in the same write.
    execute(&client, "CREATE VIEW over_v AS SELECT w FROM v").await;
    execute(&client, "DROP FUNCTION inner_f CASCADE").await;
    assert_eq!(failure(&client, "SELECT * FROM over_v").await, "42P01");
    assert_eq!(failure(&client, "SELECT * FROM v").await, "42P01");
    // outer_f still calls inner_f, which is gone: as in PostgreSQL, a call fails.
    assert_eq!(failure(&client, "SELECT outer_f(1)").await, "42883");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inlining_stays_bounded_and_evaluates_volatile_arguments_once() {
    let server = TestServer::start().await;
    let client = server.client().await;
    // A volatile argument read twice would draw two values where PostgreSQL draws one.
    execute(
        &client,
        "CREATE FUNCTION square(x float8) RETURNS float8 LANGUAGE SQL AS 'SELECT x * x';
         CREATE FUNCTION twice(x float8) RETURNS float8 LANGUAGE SQL AS 'SELECT x * 2'",
    )
    .await;
    assert_eq!(failure(&client, "SELECT square(random())").await, "0A000");
    assert_eq!(
        rows(&client, "SELECT twice(random()) < 2, square(3)").await,
        ["t 9"]
    );
    // Each level doubles its body: the definition that would inline past the bound is refused
    // when it is created, before any statement pays for it.
    execute(
        &client,
        "CREATE FUNCTION level0(x int) RETURNS int LANGUAGE SQL AS 'SELECT x'",
    )
    .await;
    let mut refused = None;
    for level in 1..=20 {
        let sql = format!(
            "CREATE FUNCTION level{level}(x int) RETURNS int LANGUAGE SQL \
             AS 'SELECT level{below}(x) + level{below}(x)'",
            below = level - 1
        );
        if let Err(error) = client.batch_execute(&sql).await {
            refused = Some((level, crate::harness::sqlstate(&error)));
            break;
        }
    }
    let (level, code) = refused.expect("a level past the bound is refused");
    assert_eq!(code, "54001", "level {level}");
    assert!(level > 8, "refused already at level {level}");
    assert_eq!(rows(&client, "SELECT level8(1)").await, ["256"]);
}
