//! Shared machinery of the integration tests: a server process per test ([`server`]), a fresh
//! database per test on the PostgreSQL oracle ([`oracle`]), multiset comparison of query results
//! with numerics compared by value ([`compare`]), and a sqllogictest driver over pgwire ([`slt`]).

pub mod compare;
pub mod oracle;
pub mod server;
pub mod slt;

/// Seed for everything random in a test: `ROCKSTREAM_TEST_SEED` when set (to replay a failure),
/// otherwise a fresh random one. Tests print it on failure.
pub fn test_seed() -> u64 {
    match std::env::var("ROCKSTREAM_TEST_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("ROCKSTREAM_TEST_SEED must be a u64, got {text:?}")),
        Err(_) => rand::random(),
    }
}

/// A numeric knob read from the environment, with a default that keeps the suite fast.
pub fn environment_count(variable: &str, default: usize) -> usize {
    match std::env::var(variable) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{variable} must be a non-negative integer, got {text:?}")),
        Err(_) => default,
    }
}

/// The harness's seam for tasks and real time. The workspace bans `tokio::spawn` and
/// `tokio::time::sleep` (clippy.toml) so that server code reaches them only through
/// `rockstream_common::Runtime`; the harness, which drives real processes and sockets on the wall
/// clock, uses them here and nowhere else.
#[allow(
    clippy::disallowed_methods,
    reason = "tests drive real processes in real time"
)]
pub fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(future)
}

/// See [`spawn`].
#[allow(
    clippy::disallowed_methods,
    reason = "tests drive real processes in real time"
)]
pub async fn sleep(duration: std::time::Duration) {
    tokio::time::sleep(duration).await
}

/// Sends `data` (COPY text format) with `statement`, a `COPY ... FROM STDIN`; returns the rows the
/// server reports.
pub async fn copy_in(
    client: &tokio_postgres::Client,
    statement: &str,
    data: String,
) -> Result<u64, tokio_postgres::Error> {
    use futures::SinkExt;
    let sink = client.copy_in(statement).await?;
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(data)).await?;
    sink.finish().await
}

/// The SQLSTATE of a server error (or the error's text, for any other failure).
pub fn sqlstate(error: &tokio_postgres::Error) -> String {
    error
        .as_db_error()
        .map(|db| db.code().code().to_string())
        .unwrap_or_else(|| error.to_string())
}
