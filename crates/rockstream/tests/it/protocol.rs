//! Goal: errors the wire layer raises itself behave as PostgreSQL's: a malformed message inside
//! `BEGIN` fails the transaction (its `COMMIT` answers `ROLLBACK` and nothing of it is written),
//! whether the client asked for TLS first (psql's default) or not; and `RowDescription` says of a
//! result column what PostgreSQL's does (table oid and column number of a table's column read as
//! it is, `varchar` with its length). Method: a raw protocol client against the server, then an
//! ordinary client to read what was committed; tokio-postgres's prepared statement columns.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::TestServer;
use crate::wire::raw_client::RawClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_message_fails_the_transaction_it_arrives_in() {
    let server = TestServer::start().await;
    let port = server.config().get_ports()[0];
    let setup = server.client().await;
    setup
        .batch_execute("CREATE TABLE t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    for (asks_for_tls, id) in [(false, b'1'), (true, b'2')] {
        let mut client = if asks_for_tls {
            RawClient::connect_asking_for_tls(port).await
        } else {
            RawClient::connect(port).await
        };
        client.send(b'Q', b"BEGIN\0").await;
        assert_eq!(client.read_until_ready().await, ["BEGIN"]);
        let insert = [b"INSERT INTO t VALUES (".as_slice(), &[id], b")\0"].concat();
        client.send(b'Q', &insert).await;
        assert_eq!(client.read_until_ready().await, ["INSERT 0 1"]);
        // Not UTF-8: refused by the wire layer before any SQL runs.
        client.send(b'Q', b"SELECT '\xe9'\0").await;
        assert_eq!(client.read_error().await.1, "22021");
        client.read_until_ready().await;
        client.send(b'Q', b"COMMIT\0").await;
        assert_eq!(client.read_until_ready().await, ["ROLLBACK"]);
    }
    let rows = fetch_text_rows(&setup, "SELECT count(*) FROM t")
        .await
        .unwrap();
    assert_eq!(format!("{rows:?}"), r#"[[Some("0")]]"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_descriptions_name_table_columns() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE rd (id INT PRIMARY KEY, name VARCHAR(20), note TEXT)")
        .await
        .expect("created");
    let oid: u32 = fetch_text_rows(&client, "SELECT 'rd'::regclass::oid")
        .await
        .expect("the oid")[0][0]
        .as_deref()
        .and_then(|oid| oid.parse().ok())
        .expect("a number");
    let described = |sql: &'static str| {
        let client = &client;
        async move {
            let statement = client.prepare(sql).await.expect("prepared");
            statement
                .columns()
                .iter()
                .map(|column| {
                    (
                        column.table_oid(),
                        column.column_id(),
                        column.type_().name().to_string(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let named = |column: i16, type_name: &str| (Some(oid), Some(column), type_name.to_string());
    let computed = |type_name: &str| (None, None, type_name.to_string());
    assert_eq!(
        described("SELECT id, name, note, id + 1 FROM rd").await,
        [
            named(1, "int4"),
            named(2, "varchar"),
            named(3, "text"),
            computed("int4")
        ]
    );
    assert_eq!(
        described("SELECT q.name FROM (SELECT name FROM rd) q JOIN rd ON true").await,
        [named(2, "varchar")]
    );
    assert_eq!(
        described("SELECT name FROM rd UNION SELECT note FROM rd").await,
        [(None, None, "varchar".to_string())] // as PostgreSQL resolves it
    );
}

/// The answers of an extended-protocol exchange wait for its Sync, as PostgreSQL's do, but a
/// Flush sends them: a client that sends Parse and Flush (or Bind, Execute and Flush) reads the
/// answers without a Sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_sends_the_answers_held_for_sync() {
    let server = TestServer::start().await;
    let port = server.config().get_ports()[0];
    let mut client = RawClient::connect(port).await;
    let within = std::time::Duration::from_secs(10);
    // Parse "" "SELECT 1" with no parameter types, then Flush.
    client.send(b'P', b"\0SELECT 1\0\0\0").await;
    client.send(b'H', b"").await;
    let (kind, _) = tokio::time::timeout(within, client.read())
        .await
        .expect("ParseComplete after Flush");
    assert_eq!(kind, b'1');
    // Bind "" to "" (no formats, no parameters), Execute it, Flush.
    client.send(b'B', b"\0\0\0\0\0\0\0\0").await;
    client.send(b'E', b"\0\0\0\0\0").await;
    client.send(b'H', b"").await;
    let mut kinds = Vec::new();
    for _ in 0..3 {
        let (kind, _) = tokio::time::timeout(within, client.read())
            .await
            .expect("the Execute's answers after Flush");
        kinds.push(kind);
    }
    assert_eq!(kinds, [b'2', b'D', b'C']);
    client.send(b'S', b"").await;
    let (kind, _) = tokio::time::timeout(within, client.read())
        .await
        .expect("ReadyForQuery after Sync");
    assert_eq!(kind, b'Z');
}
