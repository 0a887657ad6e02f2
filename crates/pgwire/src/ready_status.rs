//! The transaction status every ReadyForQuery reports is the session's, as
//! the backend knows it.
//!
//! `pgwire` infers the status from command tags: `BEGIN` enters a
//! transaction, `COMMIT`/`ROLLBACK` leave it, an error fails it. One
//! statement moves it in a way no tag tells: `ROLLBACK TO SAVEPOINT` in a
//! failed transaction returns it to "in a transaction" (PostgreSQL's tag is
//! `ROLLBACK`, which would say "idle"). Drivers read the status to decide
//! what to send next (psycopg 3 and SQLAlchemy roll back to a savepoint
//! after a failed statement in a nested block, then go on), so it must be
//! right.
//!
//! [`StatusWriter`] sits between the codec and the socket on the way out.
//! It follows the outgoing messages (a type byte and a length each) and,
//! where a ReadyForQuery's status byte differs from the session's
//! [`SessionStatus`], writes the session's instead. The connection sets
//! that status after every backend call, before `pgwire` writes the
//! ReadyForQuery that follows it.
//!
//! Invariants: every byte but a ReadyForQuery's status byte goes out as the
//! codec wrote it; the writer holds no data of its own (it writes a prefix
//! of what it is given, or the one substituted byte), so flushing and
//! backpressure are the socket's.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::TransactionState;

/// ReadyForQuery's message type.
const READY_FOR_QUERY: u8 = b'Z';
/// Its length field: the length itself and the status byte.
const READY_FOR_QUERY_LENGTH: u32 = 5;
/// A message's type byte and length field.
const HEADER_BYTES: usize = 5;
/// [`SessionStatus`] before the backend has reported one.
const UNKNOWN: u8 = 0;

/// The session's transaction status, shared by the connection (which sets
/// it) and its [`StatusWriter`] (which reports it).
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionStatus(Arc<AtomicU8>);

impl SessionStatus {
    pub(crate) fn set(&self, state: TransactionState) {
        let byte = match state {
            TransactionState::Idle => b'I',
            TransactionState::InTransaction => b'T',
            TransactionState::Failed => b'E',
        };
        self.0.store(byte, Ordering::Relaxed);
    }

    /// The status byte to report; `None` until the backend reported one.
    fn byte(&self) -> Option<u8> {
        match self.0.load(Ordering::Relaxed) {
            UNKNOWN => None,
            byte => Some(byte),
        }
    }
}

/// Where the outgoing stream stands: inside a message's header or body.
#[derive(Debug, Clone, Copy, Default)]
struct Position {
    /// The current header's bytes, once complete the message's type and
    /// length.
    header: [u8; HEADER_BYTES],
    /// How many header bytes have gone out (`HEADER_BYTES`: in the body).
    header_bytes: usize,
    /// Body bytes still to go out.
    body_left: usize,
}

impl Position {
    /// Whether the next byte is a ReadyForQuery's status byte.
    fn at_status_byte(&self) -> bool {
        self.header_bytes == HEADER_BYTES
            && self.header[0] == READY_FOR_QUERY
            && self.length() == READY_FOR_QUERY_LENGTH
            && self.body_left == 1
    }

    fn length(&self) -> u32 {
        let [_, a, b, c, d] = self.header;
        u32::from_be_bytes([a, b, c, d])
    }

    /// Moves past `bytes`, a whole body's worth at a time.
    fn advance(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.header_bytes == HEADER_BYTES && self.body_left == 0 {
                self.header_bytes = 0;
            }
            if self.header_bytes < HEADER_BYTES {
                self.header[self.header_bytes] = bytes[0];
                self.header_bytes += 1;
                bytes = &bytes[1..];
                if self.header_bytes == HEADER_BYTES {
                    let length = usize::try_from(self.length()).unwrap_or(usize::MAX);
                    self.body_left = length.saturating_sub(HEADER_BYTES - 1);
                }
                continue;
            }
            let skipped = self.body_left.min(bytes.len());
            self.body_left -= skipped;
            bytes = &bytes[skipped..];
        }
    }

    /// The offset in `bytes` (the next to go out) of the first
    /// ReadyForQuery status byte that is not `status`, if they hold one.
    fn differing_status_offset(&self, bytes: &[u8], status: u8) -> Option<usize> {
        let mut position = *self;
        let mut offset = 0;
        while offset < bytes.len() {
            if position.header_bytes == HEADER_BYTES && position.body_left == 0 {
                position.header_bytes = 0;
            }
            if position.at_status_byte() {
                if bytes[offset] != status {
                    return Some(offset);
                }
                position.advance(&bytes[offset..=offset]);
                offset += 1;
                continue;
            }
            // One header byte, or the rest of a body (all but a status
            // byte, which the check above stops at).
            let step = if position.header_bytes < HEADER_BYTES {
                1
            } else {
                position.body_left.min(bytes.len() - offset)
            };
            position.advance(&bytes[offset..offset + step]);
            offset += step;
        }
        None
    }
}

/// Writes the codec's messages to `inner`, each ReadyForQuery with the
/// session's status (see the module documentation); reads pass through.
pub(crate) struct StatusWriter<S> {
    inner: S,
    position: Position,
    status: SessionStatus,
}

impl<S> StatusWriter<S> {
    pub(crate) fn new(inner: S, status: SessionStatus) -> Self {
        StatusWriter {
            inner,
            position: Position::default(),
            status,
        }
    }

    pub(crate) fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StatusWriter<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StatusWriter<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let substitute = this.status.byte().and_then(|status| {
            let offset = this.position.differing_status_offset(buf, status)?;
            Some((offset, status))
        });
        let written = match substitute {
            None => ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?,
            // What comes before the status byte first, then the byte.
            Some((offset, _)) if offset > 0 => {
                ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..offset]))?
            }
            Some((_, status)) => ready!(Pin::new(&mut this.inner).poll_write(cx, &[status]))?,
        };
        this.position.advance(&buf[..written.min(buf.len())]);
        Poll::Ready(Ok(written))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Goal: ReadyForQuery reports the session's status, whatever the codec
    //! wrote, and nothing else changes, however the stream is cut.
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn message(message_type: u8, body: &[u8]) -> Vec<u8> {
        let mut bytes = vec![message_type];
        bytes.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    /// A stream of messages, some of whose bodies hold `Z` bytes and
    /// lengths that look like a ReadyForQuery's.
    fn stream(status: u8) -> Vec<u8> {
        let mut bytes = message(b'C', b"ROLLBACK\0");
        bytes.extend(message(b'D', &[0, 1, 0, 0, 0, 5, b'Z', 0, 0, 0, 5]));
        bytes.extend(message(READY_FOR_QUERY, &[status]));
        bytes.extend(message(b'T', &[]));
        bytes.extend(message(READY_FOR_QUERY, &[status]));
        bytes
    }

    /// Writes `bytes` in pieces of `piece` bytes through a writer whose
    /// socket accepts at most `accepts` bytes a call.
    async fn write(bytes: &[u8], piece: usize, accepts: usize, state: TransactionState) -> Vec<u8> {
        let (mut client, server) = tokio::io::duplex(accepts);
        let status = SessionStatus::default();
        status.set(state);
        let mut writer = StatusWriter::new(server, status);
        let writing = async move {
            for chunk in bytes.chunks(piece) {
                writer.write_all(chunk).await.unwrap();
            }
            writer.shutdown().await.unwrap();
        };
        let reading = async move {
            let mut received = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut client, &mut received)
                .await
                .unwrap();
            received
        };
        let ((), received) = tokio::join!(writing, reading);
        received
    }

    #[tokio::test]
    async fn ready_for_query_carries_the_sessions_status_and_nothing_else_changes() {
        for piece in [1, 2, 3, 5, 7, 64] {
            for accepts in [1, 4, 1024] {
                let written = write(
                    &stream(b'E'),
                    piece,
                    accepts,
                    TransactionState::InTransaction,
                )
                .await;
                assert_eq!(
                    written,
                    stream(b'T'),
                    "pieces of {piece}, socket takes {accepts}"
                );
                let unchanged = write(&stream(b'I'), piece, accepts, TransactionState::Idle).await;
                assert_eq!(unchanged, stream(b'I'));
            }
        }
    }

    /// Statuses that already agree are passed over, not mistaken for the
    /// end of the work: a later one that differs is still corrected.
    #[tokio::test]
    async fn a_differing_status_after_an_agreeing_one_is_corrected() {
        let mut mixed = message(READY_FOR_QUERY, b"T");
        mixed.extend(message(b'C', b"ROLLBACK\0"));
        mixed.extend(message(READY_FOR_QUERY, b"E"));
        let mut expected = message(READY_FOR_QUERY, b"T");
        expected.extend(message(b'C', b"ROLLBACK\0"));
        expected.extend(message(READY_FOR_QUERY, b"T"));
        for piece in [1, 4, 64] {
            let written = write(&mixed, piece, 1024, TransactionState::InTransaction).await;
            assert_eq!(written, expected, "pieces of {piece}");
        }
    }

    #[tokio::test]
    async fn before_the_backend_reports_a_status_the_stream_is_left_as_it_is() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut writer = StatusWriter::new(server, SessionStatus::default());
        writer.write_all(&stream(b'E')).await.unwrap();
        writer.shutdown().await.unwrap();
        drop(writer);
        let mut received = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut client, &mut received)
            .await
            .unwrap();
        assert_eq!(received, stream(b'E'));
    }
}
