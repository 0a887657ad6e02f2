//! Goal: a materialized view the engine cannot maintain is refused at `CREATE` with
//! RS-2001 / 0A000 naming the construct, and nothing of it is left behind. Method: one
//! definition per construct, then the same name with a definition that is maintained.
//! Ad hoc queries DataFusion cannot plan are refused with a code as well, and so is every
//! statement RockStream does not run (issue #16, proof 4).

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::TestServer;
use crate::harness::sqlstate;

/// (definition, words the error must contain).
const REFUSED: &[(&str, &str)] = &[
    ("SELECT id FROM t ORDER BY id OFFSET 3", "OFFSET without LIMIT"),
    ("SELECT id, (SELECT k FROM t) AS k FROM t", "may return more than one row"),
    (
        "SELECT id FROM t WHERE EXISTS (SELECT 1 FROM t u WHERE u.k = t.k LIMIT 1 OFFSET 1)",
        "OFFSET in an EXISTS subquery",
    ),
    // A recursive term whose output can shrink as the recursion grows.
    (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT count(*) FROM r) SELECT n FROM r",
        "an aggregate in the recursive term",
    ),
    (
        "WITH RECURSIVE r(id) AS (SELECT id FROM t UNION SELECT t.id FROM t LEFT JOIN r ON r.id = t.id) \
         SELECT id FROM r",
        "Left join",
    ),
    // A retraction must recompute exactly the row it retracts.
    ("SELECT id, random() AS r FROM t", "random()"),
    // Would have to change as time passes, other than as a temporal filter.
    ("SELECT id FROM t WHERE at > now() - INTERVAL '1 month'", "months or years"),
    ("SELECT id FROM t WHERE at > now() - INTERVAL '1 hour' OR k = 'a'", "now()"),
    ("SELECT id FROM t WHERE at = now()", "now()"),
    ("SELECT id FROM t WHERE date_trunc('day', now()) < at", "now()"),
    ("SELECT id FROM t WHERE k > now() - INTERVAL '1 hour'", "comparing text with now()"),
    ("SELECT id, CURRENT_TIMESTAMP AS seen FROM t", "now()"),
    ("SELECT id, current_date AS day FROM t", "current_date()"),
    ("SELECT id, LOCALTIMESTAMP AS seen FROM t", "localtimestamp()"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_outside_the_maintained_forms_are_refused_by_name() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, k TEXT, at TIMESTAMP);
             INSERT INTO t VALUES (1, 'a', '2026-01-01 10:00:00'), (2, 'b', NULL);
             CREATE VIEW recent AS SELECT id FROM t WHERE at > now() - INTERVAL '1 day';",
        )
        .await
        .expect("setup");
    for (definition, construct) in REFUSED {
        let error = client
            .simple_query(&format!("CREATE MATERIALIZED VIEW v AS {definition}"))
            .await
            .expect_err(definition);
        assert_eq!(sqlstate(&error), "0A000", "{definition}: {error}");
        let message = error.as_db_error().expect("a server error").message();
        assert!(
            message.starts_with("RS-2001 ") && message.contains(construct),
            "{definition}: {message}"
        );
    }
    // Nothing was created: the name is free, and the inline view still answers ad hoc.
    client
        .batch_execute("CREATE MATERIALIZED VIEW v AS SELECT k, count(*) AS n FROM t GROUP BY k")
        .await
        .expect("a maintained definition under the refused name");
    let rows = fetch_text_rows(&client, "SELECT k, n FROM v ORDER BY k")
        .await
        .expect("read the view");
    assert_eq!(
        format!("{rows:?}"),
        r#"[[Some("a"), Some("1")], [Some("b"), Some("1")]]"#
    );
    let rows = fetch_text_rows(&client, "SELECT count(*) FROM recent")
        .await
        .expect("the inline view, ad hoc");
    assert_eq!(format!("{rows:?}"), r#"[[Some("0")]]"#);
}

/// Goal: an ad hoc query DataFusion cannot plan is refused with a coded
/// error that names what is missing, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ad_hoc_queries_outside_the_supported_forms_are_refused_by_name() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, k TEXT);
             INSERT INTO t VALUES (1, 'a'), (2, 'a'), (3, 'b');",
        )
        .await
        .expect("setup");
    let error = client
        .simple_query(
            "SELECT id, (SELECT u.id AS next FROM t u WHERE u.k = t.k AND u.id > t.id ORDER BY u.id LIMIT 1) FROM t",
        )
        .await
        .expect_err("a correlation other than equality, without an aggregate");
    assert_eq!(sqlstate(&error), "0A000", "{error}");
    let message = error.as_db_error().expect("a server error").message();
    assert!(
        message.starts_with("RS-2024 ") && message.contains("correlated subquery is not supported"),
        "{message}"
    );
    let rows = fetch_text_rows(&client, "SELECT count(*) FROM t")
        .await
        .expect("the session goes on");
    assert_eq!(format!("{rows:?}"), r#"[[Some("3")]]"#);
}

/// Statements RockStream does not run, as clients and tools send them: each must be refused with
/// a coded error (an `RS-` code and its SQLSTATE, never an internal error), and leave the
/// connection and the server working.
const UNSUPPORTED_STATEMENTS: &[&str] = &[
    "CREATE INDEX i ON t USING gin (k)",
    "CREATE INDEX i ON t (k) WHERE k <> ''",
    "CREATE INDEX i ON t (upper(k))",
    "CREATE INDEX i ON t (k) WITH (fillfactor = 70)",
    "ALTER TABLE t ADD CONSTRAINT c CHECK (k <> '')",
    "ALTER TABLE t ADD CONSTRAINT u UNIQUE NULLS NOT DISTINCT (k)",
    "CREATE UNIQUE INDEX ui ON t (k) WHERE k <> ''",
    "CREATE UNIQUE INDEX ui ON t (lower(k))",
    "ALTER TABLE t ADD COLUMN y INT PRIMARY KEY",
    "ALTER TABLE t ALTER COLUMN k TYPE INT",
    "ALTER TABLE t OWNER TO postgres",
    "CREATE SEQUENCE s",
    "GRANT SELECT ON t TO PUBLIC",
    "CREATE FUNCTION f() RETURNS INT AS 'BEGIN RETURN 1; END' LANGUAGE plpgsql",
    "CREATE FUNCTION f() RETURNS SETOF INT AS 'SELECT 1' LANGUAGE sql",
    "CREATE FUNCTION f() RETURNS INT AS 'SELECT count(*) FROM t' LANGUAGE sql",
    "CREATE TRIGGER tr AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()",
    "CREATE TABLE w (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5 seconds', WATERMARK FOR ts AS ts)",
    "CREATE TABLE w (k INT, WATERMARK FOR k AS k)",
    "ALTER TABLE t ADD WATERMARK FOR ts AS ts",
    "CREATE TABLE w (ts TIMESTAMP) APPEND ONLY",
    "CREATE MATERIALIZED VIEW w AS SELECT k, COUNT(*) AS n FROM t GROUP BY k EMIT ON WINDOW CLOSE",
    "CREATE TYPE mood AS ENUM ('sad')",
    "CREATE EXTENSION hstore",
    "CREATE SCHEMA s",
    "CREATE DATABASE d LOCATION '/elsewhere'",
    "CREATE ROLE r CONNECTION LIMIT 1",
    "ALTER ROLE r RENAME TO s",
    "LISTEN channel",
    "NOTIFY channel",
    "VACUUM t",
    "ANALYZE t",
    "CLUSTER t",
    "REINDEX TABLE t",
    "CHECKPOINT",
    "LOCK TABLE t",
    "COMMENT ON TABLE t IS 'x'",
    "MERGE INTO t USING t AS s ON t.id = s.id WHEN MATCHED THEN DELETE",
    "INSERT INTO t VALUES (1, 'a', NULL) ON CONFLICT (k) DO NOTHING",
    "CREATE TABLE identity_options (a INT GENERATED ALWAYS AS IDENTITY (START WITH 5))",
    "CREATE TABLE volatile_default (a FLOAT DEFAULT random())",
    "PREPARE p AS SELECT 1",
    "EXECUTE p",
    "CALL p()",
    "DO $$ BEGIN END $$",
    "COPY t TO '/tmp/rockstream-refused'",
    "COPY t FROM '/tmp/rockstream-refused'",
    "CREATE TEMP TABLE tt (a INT)",
    "CREATE TABLE copied (LIKE t)",
    "CREATE TABLE selected AS SELECT * FROM t",
    "SELECT * INTO selected FROM t",
    "SELECT * FROM t FOR UPDATE",
    "CREATE TABLE referencing (a INT REFERENCES t (id))",
    "CREATE TABLE checked (a INT CHECK (a > 0))",
    "CREATE UNLOGGED TABLE unlogged (a INT)",
    "PREPARE TRANSACTION 'x'",
    "SELECT pg_sleep(0)",
];

/// A server with one table, `t`, and a client of it.
async fn server_with_table() -> (TestServer, tokio_postgres::Client) {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (id BIGINT PRIMARY KEY, k TEXT, at TIMESTAMP)")
        .await
        .expect("the table");
    (server, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_statements_get_a_coded_error_and_the_connection_goes_on() {
    let (server, client) = server_with_table().await;
    let mut wrong = Vec::new();
    for statement in UNSUPPORTED_STATEMENTS {
        match client.batch_execute(statement).await {
            Ok(()) => wrong.push(format!("{statement}: accepted")),
            Err(error) => {
                let code = sqlstate(&error);
                let message = error
                    .as_db_error()
                    .map(|db| db.message().to_string())
                    .unwrap_or_else(|| error.to_string());
                if code == "XX000" || !message.starts_with("RS-") || code.len() != 5 {
                    wrong.push(format!("{statement}: {code} {message}"));
                }
            }
        }
        // The connection still works, outside any transaction.
        let rows = fetch_text_rows(&client, "SELECT 1")
            .await
            .unwrap_or_else(|error| panic!("after {statement}: {error}\n{}", server.log_tail()));
        assert_eq!(rows.len(), 1, "after {statement}");
    }
    assert!(
        wrong.is_empty(),
        "not refused with a code:\n{}",
        wrong.join("\n")
    );
    // Nothing was created on the way.
    let relations = fetch_text_rows(
        &client,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .await
    .expect("the catalog");
    assert_eq!(relations.len(), 1, "{relations:?}");
    let rows = fetch_text_rows(&client, "SELECT count(*) FROM t")
        .await
        .expect("the table's rows");
    assert_eq!(rows[0][0].as_deref(), Some("0"), "a refused write wrote");
}

/// Streaming engines' clauses PostgreSQL's grammar lacks are refused by name (0A000), not as
/// syntax errors, wherever they stand in a statement that does not take them (`WATERMARK FOR`
/// in `CREATE TABLE` and `EMIT ON WINDOW CLOSE` after a materialized view's query are built:
/// `it::watermarks`); a statement only mentioning the words keeps its own error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_clauses_are_refused_by_name() {
    let (_server, client) = server_with_table().await;
    for (statement, clause) in [
        ("ALTER TABLE t ADD WATERMARK FOR ts AS ts", "WATERMARK FOR"),
        ("SELECT k FROM t EMIT ON WINDOW CLOSE", "EMIT ON WINDOW CLOSE"),
        ("CREATE TABLE w (ts TIMESTAMP)\n  APPEND ONLY", "APPEND ONLY"),
        (
            "CREATE MATERIALIZED VIEW w AS SELECT k, COUNT(*) AS n FROM t GROUP BY k EMIT ON WINDOW CLOSE",
            "EMIT ON WINDOW CLOSE",
        ),
    ] {
        let error = client
            .batch_execute(statement)
            .await
            .expect_err("refused");
        let message = error.as_db_error().map(|db| db.message().to_string());
        assert_eq!(sqlstate(&error), "0A000", "{statement}: {message:?}");
        assert!(
            message.as_deref().is_some_and(|message| message.contains(clause)),
            "{statement}: {message:?}"
        );
    }
    let error = client
        .batch_execute("SELECT 'APPEND ONLY' FROM t WHERE")
        .await
        .expect_err("a syntax error");
    assert_eq!(sqlstate(&error), "42601");
}
