//! Goal: `ALTER TABLE … ADD/DROP COLUMN` rewrites a table's rows in its transaction's commit
//! (RFC 0004) without ever mixing layouts: a transaction holding rows written for the old
//! columns cannot commit them (40001), nor can an ALTER that missed rows another transaction
//! committed meanwhile, nor can a REPEATABLE READ snapshot older than the rewrite read the
//! table; a crash at any step of the ALTER's commit leaves the table whole in one version or
//! the other. What one session sees of its own ALTERs is `tests/slt/alter.slt`
//! (oracle-checked).
//! Method: two sessions over one server, each interleaving checked; `kill -9` with the ALTER's
//! transaction open, and the server's failpoint at each step of its commit.

use crate::harness::server::TestServer;
use crate::transactional_ddl::{commit_aborted_at, execute, failure, rows};

/// What a reader sees of table `t`: its columns in order, then its rows.
async fn table_t(client: &tokio_postgres::Client) -> (Vec<String>, Vec<String>) {
    let columns = rows(
        client,
        "SELECT ordinal_position || ' ' || column_name FROM information_schema.columns \
         WHERE table_name = 't'",
    )
    .await;
    (columns, rows(client, "SELECT * FROM t").await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_another_layout_never_commit() {
    let server = TestServer::start().await;
    let alterer = server.client().await;
    let writer = server.client().await;
    execute(
        &alterer,
        "CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 10)",
    )
    .await;

    // A transaction wrote rows for the old columns; an ALTER commits: the
    // writer can neither go on with the table nor commit.
    execute(&writer, "BEGIN; INSERT INTO t VALUES (2, 20)").await;
    execute(&alterer, "ALTER TABLE t ADD COLUMN w INT DEFAULT 5").await;
    assert_eq!(failure(&writer, "SELECT * FROM t").await, "40001");
    execute(&writer, "ROLLBACK").await;
    execute(&writer, "BEGIN; INSERT INTO t VALUES (2, 20)").await;
    execute(&alterer, "ALTER TABLE t DROP COLUMN w").await;
    assert_eq!(failure(&writer, "COMMIT").await, "40001");
    assert_eq!(rows(&writer, "SELECT * FROM t").await, ["1 10"]);

    // Another transaction commits a row while an ALTER is open: the ALTER
    // did not rewrite it, so the ALTER's COMMIT fails, and so it does when
    // another transaction changed a row the ALTER rewrote.
    execute(&alterer, "BEGIN; ALTER TABLE t ADD COLUMN w INT DEFAULT 5").await;
    execute(&writer, "INSERT INTO t VALUES (3, 30)").await;
    assert_eq!(failure(&alterer, "COMMIT").await, "40001");
    execute(&alterer, "BEGIN; ALTER TABLE t ADD COLUMN w INT DEFAULT 5").await;
    execute(&writer, "UPDATE t SET v = 11 WHERE id = 1").await;
    assert_eq!(failure(&alterer, "COMMIT").await, "40001");
    assert_eq!(table_t(&writer).await.1, ["1 11", "3 30"]);

    // A REPEATABLE READ snapshot older than a rewrite cannot read the table.
    execute(
        &writer,
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM t",
    )
    .await;
    execute(&alterer, "ALTER TABLE t ADD COLUMN w INT DEFAULT 5").await;
    assert_eq!(failure(&writer, "SELECT * FROM t").await, "40001");
    execute(&writer, "ROLLBACK").await;

    // Renames do not change the rows: a writer's transaction goes on.
    execute(&writer, "BEGIN; INSERT INTO t VALUES (4, 40, 6)").await;
    execute(&alterer, "ALTER TABLE t RENAME COLUMN w TO weight").await;
    execute(&writer, "COMMIT").await;
    assert_eq!(
        table_t(&alterer).await,
        (
            vec!["1 id".into(), "2 v".into(), "3 weight".into()],
            vec!["1 11 5".into(), "3 30 5".into(), "4 40 6".into()]
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_layout_of_the_same_width_is_told_apart() {
    // `DROP COLUMN b, ADD COLUMN c` of b's type keeps the rows' width:
    // only the table's layout tells old rows from new ones.
    let server = TestServer::start().await;
    let alterer = server.client().await;
    let other = server.client().await;
    execute(
        &alterer,
        "CREATE TABLE t (id INT PRIMARY KEY, b INT); INSERT INTO t VALUES (1, 10)",
    )
    .await;
    let relayout = |from: &str, to: &str| {
        format!("ALTER TABLE t DROP COLUMN {from}, ADD COLUMN {to} INT DEFAULT 0")
    };

    execute(&other, "BEGIN; INSERT INTO t VALUES (2, 20)").await;
    execute(&alterer, &relayout("b", "b2")).await;
    assert_eq!(
        failure(&other, "INSERT INTO t VALUES (3, 30)").await,
        "40001"
    );
    execute(&other, "ROLLBACK").await;
    execute(&other, "BEGIN; INSERT INTO t VALUES (2, 20)").await;
    execute(&alterer, &relayout("b2", "b3")).await;
    assert_eq!(failure(&other, "COMMIT").await, "40001");

    execute(
        &other,
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM t",
    )
    .await;
    execute(&alterer, &relayout("b3", "b4")).await;
    assert_eq!(failure(&other, "SELECT * FROM t").await, "40001");
    execute(&other, "ROLLBACK").await;

    // A row another transaction commits while an ALTER is open is never
    // read in the ALTER's new layout (its `b4` would be taken for `b5`).
    execute(
        &alterer,
        "BEGIN; ALTER TABLE t ADD COLUMN b5 INT; ALTER TABLE t DROP COLUMN b4",
    )
    .await;
    execute(&other, "INSERT INTO t VALUES (2, 42)").await;
    assert_eq!(
        failure(&alterer, "UPDATE t SET b5 = coalesce(b5, 0)").await,
        "40001"
    );
    execute(&alterer, "ROLLBACK").await;
    assert_eq!(rows(&alterer, "SELECT * FROM t").await, ["1 0", "2 42"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alterations_and_views_in_transactions() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let other = server.client().await;
    execute(
        &client,
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT); INSERT INTO t VALUES (1, 10, 20)",
    )
    .await;

    // A view created after a rename in its transaction reads the renamed
    // table; the old name is free for a new table in the same transaction.
    execute(
        &client,
        "BEGIN; ALTER TABLE t RENAME TO u;          ALTER TABLE u RENAME COLUMN a TO tmp; ALTER TABLE u RENAME COLUMN b TO a;          ALTER TABLE u RENAME COLUMN tmp TO b;          CREATE MATERIALIZED VIEW mv AS SELECT id, a FROM u;          CREATE TABLE t (k INT); COMMIT",
    )
    .await;
    assert_eq!(rows(&other, "SELECT * FROM mv").await, ["1 20"]);
    execute(&other, "INSERT INTO u VALUES (2, 30, 40)").await;
    assert_eq!(rows(&other, "SELECT * FROM mv").await, ["1 20", "2 40"]);

    // Columns of a table a view reads stay as they are (RS-2061); its
    // default may change.
    assert_eq!(
        failure(&client, "ALTER TABLE u ADD COLUMN c INT").await,
        "0A000"
    );
    execute(&client, "ALTER TABLE u ALTER COLUMN b SET DEFAULT 7").await;
    execute(&client, "INSERT INTO u (id, a) VALUES (3, 50)").await;
    assert_eq!(
        rows(&other, "SELECT * FROM mv").await,
        ["1 20", "2 40", "3 50"]
    );

    // A materialized view over a table its transaction rewrote would be
    // built from the old rows: refused.
    execute(&client, "BEGIN; ALTER TABLE t ADD COLUMN v INT DEFAULT 1").await;
    assert_eq!(
        failure(&client, "CREATE MATERIALIZED VIEW tv AS SELECT * FROM t").await,
        "0A000"
    );
    execute(&client, "ROLLBACK").await;

    // A view planned before another transaction altered what it reads
    // does not commit.
    execute(
        &client,
        "BEGIN; CREATE MATERIALIZED VIEW tk AS SELECT k FROM t",
    )
    .await;
    execute(&other, "ALTER TABLE t RENAME COLUMN k TO kk").await;
    assert_eq!(failure(&client, "COMMIT").await, "40001");
    assert_eq!(failure(&other, "SELECT * FROM tk").await, "42P01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_leaves_an_altered_table_whole_in_one_version() {
    let mut server = TestServer::start().await;
    execute(
        &server.client().await,
        "CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 10), (2, 20)",
    )
    .await;
    let before = (
        vec!["1 id".to_string(), "2 v".to_string()],
        vec!["1 10".to_string(), "2 20".to_string()],
    );
    let after = (
        vec!["1 id".to_string(), "2 w".to_string()],
        vec!["1 7".to_string(), "2 7".to_string(), "3 8".to_string()],
    );
    let alter = "BEGIN; ALTER TABLE t ADD COLUMN w INT DEFAULT 7; ALTER TABLE t DROP COLUMN v; \
                 INSERT INTO t VALUES (3, 8)";

    {
        let client = server.client().await;
        execute(&client, alter).await;
        server.kill9();
    }
    server.restart().await;
    assert_eq!(table_t(&server.client().await).await, before);

    for (step, committed) in [
        ("after_intent", false),
        ("after_install", false),
        ("after_commit_point", true),
    ] {
        commit_aborted_at(&mut server, step, alter).await;
        let client = server.client().await;
        let expected = if committed { &after } else { &before };
        assert_eq!(&table_t(&client).await, expected, "{step}");
        // Writes go on in the version that stands (two columns either way).
        execute(
            &client,
            "INSERT INTO t VALUES (9, 9); DELETE FROM t WHERE id = 9",
        )
        .await;
        if committed {
            break;
        }
    }
}
