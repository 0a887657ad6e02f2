//! Goal: `CREATE DATABASE` makes a namespace clients connect to with `dbname=`, whose objects
//! are its own (the same names in two databases are two objects); `DROP DATABASE` removes it
//! and everything in it, refused while sessions are connected to it, as PostgreSQL refuses; both
//! are durable (restart, `kill -9`). Method: two databases over one server, each holding a table
//! and a materialized view named alike, checked by their rows, `pg_database`, connection
//! failures and SQLSTATEs, before and after restarts.

use tokio_postgres::Client;

use crate::harness::oracle::connect;
use crate::harness::server::TestServer;
use crate::transactional_ddl::{execute, failure, rows};

async fn client_of(server: &TestServer, database: &str) -> Client {
    let mut config = server.config();
    config.dbname(database);
    connect(&config)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to {database}: {error}"))
}

/// The SQLSTATE connecting to `database` fails with.
async fn connect_failure(server: &TestServer, database: &str) -> String {
    let mut config = server.config();
    config.dbname(database);
    match connect(&config).await {
        Ok(_) => panic!("connected to {database}"),
        Err(error) => error
            .as_db_error()
            .map(|error| error.code().code().to_string())
            .unwrap_or_else(|| panic!("not a server error: {error}")),
    }
}

const SCHEMA: &str = "CREATE TABLE t (id INT PRIMARY KEY, v INT);
     CREATE MATERIALIZED VIEW total AS SELECT SUM(v) AS s FROM t";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn databases_keep_their_objects_apart_and_drop_with_them() {
    let mut server = TestServer::start().await;
    let admin = server.client().await;
    execute(&admin, SCHEMA).await;
    execute(&admin, "INSERT INTO t VALUES (1, 10)").await;
    assert_eq!(connect_failure(&server, "app").await, "3D000");

    execute(&admin, "CREATE DATABASE app").await;
    assert_eq!(failure(&admin, "CREATE DATABASE app").await, "42P04");
    execute(&admin, "CREATE DATABASE IF NOT EXISTS app").await;
    assert_eq!(
        failure(&admin, "BEGIN; CREATE DATABASE other").await,
        "25001"
    );
    execute(&admin, "ROLLBACK").await;
    assert_eq!(
        rows(&admin, "SELECT datname FROM pg_database").await,
        ["app", "default"]
    );

    let app = client_of(&server, "app").await;
    assert_eq!(rows(&app, "SELECT current_database()").await, ["app"]);
    assert_eq!(failure(&app, "SELECT * FROM t").await, "42P01");
    execute(&app, SCHEMA).await;
    execute(&app, "INSERT INTO t VALUES (1, 1), (2, 2)").await;
    assert_eq!(
        rows(
            &app,
            "SELECT DISTINCT table_catalog FROM information_schema.tables"
        )
        .await,
        ["app"]
    );
    assert_eq!(rows(&app, "SELECT s FROM total").await, ["3"]);
    // Writes see the session's database too.
    execute(
        &app,
        "UPDATE t SET v = length(current_database()) WHERE id = 2",
    )
    .await;
    assert_eq!(rows(&app, "SELECT s FROM total").await, ["4"]);
    assert_eq!(rows(&admin, "SELECT s FROM total").await, ["10"]);

    // In use: by another session, by the dropping session itself; `default` stays.
    assert_eq!(failure(&admin, "DROP DATABASE app").await, "55006");
    assert_eq!(failure(&app, "DROP DATABASE app").await, "55006");
    assert_eq!(failure(&app, "DROP DATABASE default").await, "55000");
    assert_eq!(failure(&admin, "DROP DATABASE missing").await, "3D000");
    assert_eq!(failure(&admin, "DROP DATABASE app, other").await, "42601");
    assert_eq!(failure(&admin, "DROP DATABASE app CASCADE").await, "42601");
    execute(&admin, "DROP DATABASE IF EXISTS missing").await;

    // Durable across a restart.
    drop(app);
    server.restart().await;
    let admin = server.client().await;
    let app = client_of(&server, "app").await;
    assert_eq!(rows(&app, "SELECT id, v FROM t").await, ["1 1", "2 3"]);
    assert_eq!(rows(&app, "SELECT s FROM total").await, ["4"]);
    // A session that just disconnected does not stand in the way.
    drop(app);
    execute(&admin, "DROP DATABASE app").await;
    assert_eq!(connect_failure(&server, "app").await, "3D000");
    assert_eq!(
        rows(&admin, "SELECT datname FROM pg_database").await,
        ["default"]
    );
    assert_eq!(rows(&admin, "SELECT s FROM total").await, ["10"]);

    // Acknowledged, then killed: it stays dropped, and a new one of the same name is empty.
    server.kill9();
    server.restart().await;
    let admin = server.client().await;
    assert_eq!(connect_failure(&server, "app").await, "3D000");
    execute(&admin, "CREATE DATABASE app").await;
    let app = client_of(&server, "app").await;
    assert_eq!(failure(&app, "SELECT * FROM total").await, "42P01");
    execute(&app, SCHEMA).await;
    assert_eq!(rows(&app, "SELECT s FROM total").await, ["NULL"]);
    assert_eq!(rows(&admin, "SELECT id, v FROM t").await, ["1 10"]);
}
