//! The accept loop: one task per connection, isolated from the others.
//!
//! Each accepted socket runs [`process_socket`] (`pgwire`'s message loop
//! behind a [`FrameGuard`]) inside its own spawned task, and a supervising task waits for it: whether the connection
//! ends cleanly, with an I/O error or with a panic, the supervisor hands the
//! backend session back through [`Backend::disconnect`]. A failing accept
//! (for example too many open files) is logged and retried after
//! [`ACCEPT_RETRY_DELAY`]; it never stops the server. All spawning and
//! sleeping goes through [`spawn_task`] and [`pause`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{
    negotiate_tls, process_error, process_message, MaybeTls, PgWireMessageServerCodec,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::coop::unconstrained;
use tokio_util::codec::{Framed, FramedParts};

use crate::auth::Security;
use crate::coalesce::Coalescing;
use crate::connection::ConnectionCore;
use crate::frames::{protocol_violation, FrameGuard, GuardReports, Rejection};
use crate::handlers::Connection;
use crate::interrupt::Cancels;
use crate::ready_status::{SessionStatus, StatusWriter};
use crate::wire_error::{fatal_error, user_error};
use crate::Backend;
use crate::Interrupt;

/// Pause before accepting again after a failed accept.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// How long a client may take to start up (PostgreSQL's
/// `authentication_timeout` default).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Accepts connections forever, serving each on its own task. A connection's
/// panic or error never takes the server down.
pub async fn serve<B: Backend>(
    backend: Arc<B>,
    listener: TcpListener,
    security: Security,
) -> std::io::Result<()> {
    let cancels = Arc::new(Cancels::default());
    loop {
        match listener.accept().await {
            Ok((socket, peer)) => {
                let connection = run_connection(
                    backend.clone(),
                    cancels.clone(),
                    security.clone(),
                    socket,
                    peer,
                );
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
    cancels: Arc<Cancels>,
    security: Security,
    socket: TcpStream,
    peer: SocketAddr,
) {
    let core = Arc::new(ConnectionCore::new(backend));
    let connection = Arc::new(Connection::new(
        core.clone(),
        cancels.clone(),
        security.scram(),
    ));
    let interrupt = core.interrupt.clone();
    let outcome = spawn_task(process_socket(
        socket,
        security.tls,
        connection,
        cancels.clone(),
        interrupt,
        core.status.clone(),
    ))
    .await;
    match outcome {
        Ok(Ok(())) => tracing::debug!(%peer, "connection closed"),
        Ok(Err(error)) => tracing::debug!(%peer, %error, "connection ended with an I/O error"),
        Err(error) => tracing::error!(%peer, %error, "connection task failed"),
    }
    if let Some(pid) = core.pid.get() {
        cancels.unregister(*pid);
    }
    core.disconnect().await;
}

/// A connection's socket as `pgwire` reads and writes it: its codec over
/// the [`FrameGuard`] (what comes in) and the [`StatusWriter`] (what goes
/// out).
type Socket<B> = Framed<
    StatusWriter<Coalescing<FrameGuard<MaybeTls>>>,
    PgWireMessageServerCodec<<Connection<B> as ExtendedQueryHandler>::Statement>,
>;

/// One connection's protocol loop: `pgwire`'s own (`process_socket`), with
/// every frame checked by a [`FrameGuard`] before `pgwire` decodes it, the
/// guard's rejections answered in place of the frames they replace, and a
/// watch for the client leaving while a statement runs.
async fn process_socket<B: Backend>(
    socket: TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    connection: Arc<Connection<B>>,
    cancels: Arc<Cancels>,
    interrupt: Interrupt,
    status: SessionStatus,
) -> std::io::Result<()> {
    // A second handle on the socket, to notice the client leaving while a
    // statement runs (nothing reads the socket then).
    let socket = socket.into_std()?;
    let watcher = TcpStream::from_std(socket.try_clone()?)?;
    let socket = TcpStream::from_std(socket)?;
    // A client that does not finish starting up in time is dropped (as
    // PostgreSQL's authentication_timeout).
    let startup_deadline = pause(STARTUP_TIMEOUT);
    tokio::pin!(startup_deadline);
    let negotiated = tokio::select! {
        _ = &mut startup_deadline => return Ok(()),
        negotiated = negotiate_tls(socket, tls) => negotiated?,
    };
    // `None`: a direct TLS handshake, which needs a certificate (none is
    // configured).
    let Some(negotiated) = negotiated else {
        return Ok(());
    };
    // Bytes the client sent in the clear after asking for TLS would be read
    // as if they came over it (PostgreSQL's CVE-2021-23214): refused.
    if matches!(negotiated.get_ref(), MaybeTls::Tls(_)) && !negotiated.read_buffer().is_empty() {
        tracing::warn!("a client sent data in the clear after asking for TLS; closing");
        return Ok(());
    }
    let reports = GuardReports::default();
    let mut socket = guarded(negotiated, reports.clone(), status);
    let mut frame = 0_u64;
    // Whether the last message answered with ReadyForQuery (a Query, a
    // Sync): the client is then the one to act, and the session's idle
    // limit runs (not in the middle of an extended-protocol exchange or a
    // COPY, as PostgreSQL).
    let mut ready_for_query = false;
    loop {
        let starting = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let copying = matches!(socket.state(), PgWireConnectionState::CopyInProgress(_));
        let idle_limit = if ready_for_query && !copying {
            connection.idle_limit().await
        } else {
            None
        };
        let message = if starting {
            tokio::select! {
                _ = &mut startup_deadline => None,
                message = socket.next() => message,
            }
        } else if let Some(limit) = idle_limit {
            tokio::select! {
                message = socket.next() => message,
                () = pause(limit.after) => {
                    process_error(&mut socket, fatal_error(limit.error), true).await?;
                    break;
                }
            }
        } else {
            socket.next().await
        };
        let message = match message {
            Some(Ok(message)) => message,
            // The stream ended: the client left, or the guard lost the
            // framing (its rejection says why). What the guard passes
            // decodes; a decode error left (an unsupported protocol
            // version, say) ends the connection too.
            ended => {
                let error = match (reports.take_rejection(frame), ended) {
                    (Some(rejection), _) => Some(rejection.error),
                    (None, Some(Err(error))) => Some(protocol_violation(error.to_string())),
                    (None, _) => None,
                };
                if let Some(error) = error {
                    // FATAL: no ReadyForQuery follows (as waiting for Sync).
                    process_error(&mut socket, fatal_error(error), true).await?;
                }
                break;
            }
        };
        frame += 1;
        if let Some(rejection) = reports.take_rejection(frame - 1) {
            if starting {
                // Before authentication completes, a bad message ends the
                // connection (an error would let the client out of startup).
                process_error(&mut socket, fatal_error(rejection.error), true).await?;
                break;
            }
            answer_rejection(&mut socket, &connection, rejection).await?;
            continue;
        }
        // A Terminate ends the connection: the client waits for the close.
        if matches!(message, PgWireFrontendMessage::Terminate(_)) {
            break;
        }
        let wait_for_sync = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => message.is_extended_query(),
        };
        let cancel_request = matches!(message, PgWireFrontendMessage::CancelRequest(_));
        ready_for_query = matches!(
            message,
            PgWireFrontendMessage::Query(_)
                | PgWireFrontendMessage::Sync(_)
                | PgWireFrontendMessage::CopyDone(_)
                | PgWireFrontendMessage::CopyFail(_)
        );
        // An extended-protocol exchange's answers wait for its Sync (or a
        // Flush), as PostgreSQL's do: one write instead of one per message.
        let holds = matches!(
            message,
            PgWireFrontendMessage::Parse(_)
                | PgWireFrontendMessage::Bind(_)
                | PgWireFrontendMessage::Describe(_)
                | PgWireFrontendMessage::Execute(_)
                | PgWireFrontendMessage::Close(_)
        );
        socket.get_mut().inner_mut().hold(holds);
        let processed = {
            let processing = process_message(
                message,
                &mut socket,
                connection.clone(),
                connection.clone(),
                connection.clone(),
                connection.clone(),
                cancels.clone(),
            );
            watched(processing, &watcher, &reports, &interrupt).await
        };
        socket.get_mut().inner_mut().hold(false);
        // A COPY that began waits for the client, which waits for its
        // CopyInResponse.
        if holds && matches!(socket.state(), PgWireConnectionState::CopyInProgress(_)) {
            SinkExt::<PgWireBackendMessage>::flush(&mut socket)
                .await
                .map_err(std::io::Error::other)?;
        }
        if let Err(error) = processed {
            let fatal = error.is_fatal();
            // Errors `pgwire` raises itself (an unknown portal, say) fail
            // the transaction as the backend's own errors do.
            connection.statement_failed().await;
            process_error(&mut socket, error, wait_for_sync).await?;
            if fatal {
                break;
            }
        }
        // `process_message` closed a CancelRequest's own connection.
        if cancel_request {
            break;
        }
    }
    Ok(())
}

/// Answers a frame the guard refused, as PostgreSQL answers a malformed
/// message: an error that fails the transaction; then ReadyForQuery, or,
/// within an extended-protocol exchange, skipping to Sync. Once an error
/// already skips to Sync, a malformed frame is skipped silently like any
/// other, except Sync itself, which ends the skipping.
async fn answer_rejection<B: Backend>(
    socket: &mut Socket<B>,
    connection: &Connection<B>,
    rejection: Rejection,
) -> std::io::Result<()> {
    let sync = rejection.message_type == Some(b'S');
    let wait_for_sync = match socket.state() {
        PgWireConnectionState::AwaitingSync if !sync => return Ok(()),
        PgWireConnectionState::CopyInProgress(extended) => {
            // The COPY ends with its error: its buffered data goes.
            connection.abandon_copy().await;
            extended
        }
        _ => !sync && rejection.message_type.is_some_and(is_extended_query_type),
    };
    connection.statement_failed().await;
    process_error(socket, user_error(rejection.error), wait_for_sync).await
}

/// Runs `processing` (one message) while watching for the client leaving:
/// a client that leaves while its statement runs stops it, as a cancel
/// request would (at the statement's next interruption point; a commit
/// under way completes). A client that sent Terminate before leaving
/// wants its last statement finished, and is not watched.
///
/// The watcher is polled first and outside tokio's cooperative budget: a
/// statement spends the budget on every poll, and would starve a watcher
/// polled after it.
async fn watched<F: std::future::Future>(
    processing: F,
    watcher: &TcpStream,
    reports: &GuardReports,
    interrupt: &Interrupt,
) -> F::Output {
    tokio::pin!(processing);
    tokio::select! {
        biased;
        () = unconstrained(peer_gone(watcher)) => {
            if !reports.client_terminated() {
                tracing::debug!("the client left during a statement; interrupting it");
                interrupt.abandon();
            }
            processing.await
        }
        processed = &mut processing => processed,
    }
}

/// Resolves when the client has closed the connection (or it failed). Data
/// it sent meanwhile (a pipelined next message) hides a close behind it:
/// then it waits for ever, and the statement runs to its end.
async fn peer_gone(watcher: &TcpStream) {
    let mut byte = [0_u8; 1];
    // Waits until the socket has something to read: the end, or data.
    match watcher.peek(&mut byte).await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}

/// Puts a [`FrameGuard`] and a [`StatusWriter`] between the negotiated
/// socket and its codec.
fn guarded<S>(
    socket: Framed<MaybeTls, PgWireMessageServerCodec<S>>,
    reports: GuardReports,
    status: SessionStatus,
) -> Framed<StatusWriter<Coalescing<FrameGuard<MaybeTls>>>, PgWireMessageServerCodec<S>> {
    let parts = socket.into_parts();
    let io = StatusWriter::new(
        Coalescing::new(FrameGuard::new(parts.io, parts.read_buf, reports)),
        status,
    );
    let mut guarded = FramedParts::new(io, parts.codec);
    guarded.write_buf = parts.write_buf;
    Framed::from_parts(guarded)
}

/// Whether an error after this message type waits for Sync (the extended
/// protocol's messages but Sync) rather than ending with ReadyForQuery.
fn is_extended_query_type(message_type: u8) -> bool {
    matches!(message_type, b'P' | b'B' | b'D' | b'E' | b'C' | b'H')
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
