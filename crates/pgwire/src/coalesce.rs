//! The answers to one extended-protocol exchange leave in one write.
//!
//! `pgwire` flushes after each of ParseComplete, BindComplete, a
//! Describe's answer and an Execute's CommandComplete, so a prepared
//! statement's round trip (Bind, Execute, Sync) cost four `sendto` calls
//! and as many TCP segments where a simple query costs one. PostgreSQL
//! holds its output until Sync (or Flush, or a full buffer). So does this
//! layer: while the connection processes Parse, Bind, Describe, Execute or
//! Close it is told to [`Coalescing::hold`], and its flushes keep the
//! bytes; the next flush outside such a message (ReadyForQuery after Sync,
//! Flush, an error, a COPY starting) sends them with what follows, in
//! order. Held bytes are bounded by [`HELD_MAX`]: a write that would pass it
//! goes out at once, after them, so a large result streams as before.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most bytes held: a write that would pass it sends what is held, then
/// itself.
pub(crate) const HELD_MAX: usize = 64 * 1024;

pub(crate) struct Coalescing<S> {
    inner: S,
    held: Vec<u8>,
    holding: bool,
}

impl<S> Coalescing<S> {
    pub(crate) fn new(inner: S) -> Self {
        Coalescing {
            inner,
            held: Vec::new(),
            holding: false,
        }
    }

    /// Whether flushes keep the output (until a flush without holding).
    pub(crate) fn hold(&mut self, holding: bool) {
        self.holding = holding;
    }
}

impl<S: AsyncWrite + Unpin> Coalescing<S> {
    /// Sends the held bytes.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let written = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.held))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held.drain(..written);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Coalescing<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Coalescing<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let fits = this.held.len() + buf.len() <= HELD_MAX;
        if fits && (this.holding || !this.held.is_empty()) {
            this.held.extend_from_slice(buf);
            if !this.holding {
                // Behind held bytes: they leave together, in one write if
                // the socket takes it; the flush that follows sends the rest.
                if let Poll::Ready(Err(error)) = this.poll_drain(cx) {
                    return Poll::Ready(Err(error));
                }
            }
            return Poll::Ready(Ok(buf.len()));
        }
        // Nothing held, or more than may be: what is held first, then
        // these bytes straight through.
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.holding {
            return Poll::Ready(Ok(()));
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    //! Goal: held output leaves only when a flush outside holding asks (or
    //! the bound is passed), whole and in order.
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What the peer has received so far, without waiting.
    async fn received(client: &mut tokio::io::DuplexStream) -> Vec<u8> {
        let mut bytes = vec![0; 256 * 1024];
        let mut total = Vec::new();
        loop {
            let read = tokio::time::timeout(
                std::time::Duration::from_millis(20),
                client.read(&mut bytes),
            )
            .await;
            match read {
                Ok(Ok(count)) if count > 0 => total.extend_from_slice(&bytes[..count]),
                _ => return total,
            }
        }
    }

    #[tokio::test]
    async fn held_output_leaves_at_the_first_flush_outside_holding() {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut writer = Coalescing::new(server);
        writer.hold(true);
        writer.write_all(b"1").await.unwrap();
        writer.flush().await.unwrap();
        writer.write_all(b"2").await.unwrap();
        writer.flush().await.unwrap();
        assert_eq!(received(&mut client).await, b"");
        writer.hold(false);
        writer.write_all(b"Z").await.unwrap();
        writer.flush().await.unwrap();
        assert_eq!(received(&mut client).await, b"12Z");
        // Not holding: straight through.
        writer.write_all(b"3").await.unwrap();
        writer.flush().await.unwrap();
        assert_eq!(received(&mut client).await, b"3");
    }

    #[tokio::test]
    async fn past_the_bound_held_output_leaves_while_holding() {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut writer = Coalescing::new(server);
        writer.hold(true);
        let big = vec![7_u8; HELD_MAX + 10];
        writer.write_all(&big).await.unwrap();
        writer.flush().await.unwrap();
        assert_eq!(received(&mut client).await, big);
        writer.hold(false);
        writer.shutdown().await.unwrap();
    }
}
