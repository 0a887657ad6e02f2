//! Goal: errors the wire layer raises itself behave as PostgreSQL's: a malformed message inside
//! `BEGIN` fails the transaction (its `COMMIT` answers `ROLLBACK` and nothing of it is written),
//! whether the client asked for TLS first (psql's default) or not. Method: a raw protocol client
//! against the server, then an ordinary client to read what was committed.
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
