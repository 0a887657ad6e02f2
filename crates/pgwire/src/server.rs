//! The accept loop: one task per connection, isolated from the others.
//!
//! Each accepted socket runs `pgwire::tokio::process_socket` inside its own
//! spawned task, and a supervising task waits for it: whether the connection
//! ends cleanly, with an I/O error or with a panic, the supervisor hands the
//! backend session back through [`Backend::disconnect`]. A failing accept
//! (for example too many open files) is logged and retried after
//! [`ACCEPT_RETRY_DELAY`]; it never stops the server. All spawning and
//! sleeping goes through [`spawn_task`] and [`pause`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pgwire::api::auth::StartupHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::{PgWireServerHandlers, RandomPidSecretKeyGenerator};
use pgwire::tokio::process_socket;
use tokio::net::{TcpListener, TcpStream};

use crate::connection::ConnectionCore;
use crate::handlers::Connection;
use crate::Backend;

/// Pause before accepting again after a failed accept.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Accepts connections forever, serving each on its own task. A connection's
/// panic or error never takes the server down.
pub async fn serve<B: Backend>(backend: Arc<B>, listener: TcpListener) -> std::io::Result<()> {
    let pid_generator = Arc::new(RandomPidSecretKeyGenerator::default());
    loop {
        match listener.accept().await {
            Ok((socket, peer)) => {
                let connection =
                    run_connection(backend.clone(), pid_generator.clone(), socket, peer);
                spawn_task(connection);
            }
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed; retrying");
                pause(ACCEPT_RETRY_DELAY).await;
            }
        }
    }
}

/// Serves one socket, then returns its session to the backend.
async fn run_connection<B: Backend>(
    backend: Arc<B>,
    pid_generator: Arc<RandomPidSecretKeyGenerator>,
    socket: TcpStream,
    peer: SocketAddr,
) {
    let core = Arc::new(ConnectionCore::new(backend));
    let handlers = ConnectionHandlers {
        connection: Arc::new(Connection::new(core.clone(), pid_generator)),
    };
    let outcome = spawn_task(process_socket(socket, None, handlers)).await;
    match outcome {
        Ok(Ok(())) => tracing::debug!(%peer, "connection closed"),
        Ok(Err(error)) => tracing::debug!(%peer, %error, "connection ended with an I/O error"),
        Err(error) => tracing::error!(%peer, %error, "connection task failed"),
    }
    core.disconnect().await;
}

/// Spawns a task. The workspace routes spawning and sleeping through
/// `rockstream_common::Runtime`, but this crate may depend on
/// `rockstream-types` alone; its tasks only do socket I/O and hold no state
/// a deterministic simulator must replay. These two functions are the only
/// places the crate touches tokio's scheduler and clock, so they can be
/// swapped for the `Runtime` seam in one edit.
#[allow(clippy::disallowed_methods)]
fn spawn_task<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(future)
}

/// Sleeps (see [`spawn_task`] for why this bypasses the `Runtime` seam).
#[allow(clippy::disallowed_methods)]
async fn pause(duration: Duration) {
    tokio::time::sleep(duration).await;
}

/// `pgwire`'s handler factory for one socket: every role is the same
/// per-connection [`Connection`].
struct ConnectionHandlers<B: Backend> {
    connection: Arc<Connection<B>>,
}

impl<B: Backend> PgWireServerHandlers for ConnectionHandlers<B> {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.connection.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.connection.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.connection.clone()
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.connection.clone()
    }
}
