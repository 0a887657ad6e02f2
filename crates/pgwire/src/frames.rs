//! Every message a client sends is checked whole before `pgwire` decodes it.
//!
//! `pgwire` 0.42's decoders trust the lengths and counts inside a message:
//! a Parse announcing 30,000 parameter types and sending none, or a Bind
//! whose parameter claims 2^31−1 bytes, makes them read past the message
//! and panic (`advance out of bounds`, `split_to out of bounds`); a body
//! shorter than its fields is read into the next message; text is decoded
//! lossily, so invalid UTF-8 becomes U+FFFD instead of an error. PostgreSQL
//! answers all of these with an error and keeps the connection.
//!
//! [`FrameGuard`] sits between the socket and `pgwire`'s codec. It cuts the
//! byte stream into frames (the untyped startup packet first, then one type
//! byte and a length each), and checks each complete frame against its
//! message's layout (PostgreSQL's `pq_getmsg*` rules): every count and
//! length fits inside the frame, nothing is left over, strings are
//! NUL-terminated UTF-8. A frame that passes reaches the codec byte for byte.
//! One that fails is replaced by a Flush (which has no effect of its own)
//! and its [`Rejection`] is queued, numbered by frame, for the connection
//! loop to answer in its place. A frame whose length or type is impossible,
//! or a malformed startup packet, ends the stream instead, its rejection
//! marked fatal: framing is lost, so, as PostgreSQL, the connection closes
//! after a FATAL error.
//!
//! Invariants:
//! - frames reach the codec in order and whole; frame `n` of the codec's
//!   stream is message `n` of the loop's;
//! - a rejected frame is never decoded by `pgwire`;
//! - memory held is the current incomplete frame, bounded by the type's
//!   length limit.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use rockstream_types::{codes, RsError};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::io::poll_read_buf;

/// A Flush message: what a rejected frame is replaced by.
const FLUSH: [u8; 5] = [b'H', 0, 0, 0, 4];

/// PostgreSQL's limit for messages that carry SQL text or data.
const LARGE_MESSAGE_BYTES_MAX: usize = 0x3fff_ffff - 1;
/// PostgreSQL's limit for every other message, and for the startup packet.
const SMALL_MESSAGE_BYTES_MAX: usize = 10_000;
/// PostgreSQL's limit for an authentication token.
const AUTH_MESSAGE_BYTES_MAX: usize = 65_535;
/// The shortest startup packet: its length and a protocol version.
const STARTUP_BYTES_MIN: usize = 8;
/// Bytes read ahead when no frame is partly known.
const READ_AHEAD_BYTES: usize = 8 * 1024;

/// A frame the guard refused, answered by the connection loop.
#[derive(Debug)]
pub(crate) struct Rejection {
    /// The frame's position in the stream (the startup packet is 0).
    pub(crate) frame: u64,
    /// The frame's message type (`None` for the startup packet).
    pub(crate) message_type: Option<u8>,
    pub(crate) error: RsError,
}

/// What the guard tells the connection loop: the rejections not yet
/// answered, and whether the client sent Terminate.
#[derive(Debug, Clone, Default)]
pub(crate) struct GuardReports(Arc<Reports>);

#[derive(Debug, Default)]
struct Reports {
    rejections: Mutex<VecDeque<Rejection>>,
    terminated: AtomicBool,
}

impl GuardReports {
    fn rejections(&self) -> MutexGuard<'_, VecDeque<Rejection>> {
        self.0
            .rejections
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The rejection of frame `frame`, if the guard refused it.
    pub(crate) fn take_rejection(&self, frame: u64) -> Option<Rejection> {
        let mut queue = self.rejections();
        match queue.front() {
            Some(rejection) if rejection.frame == frame => queue.pop_front(),
            _ => None,
        }
    }

    /// Whether a Terminate has passed the guard (the client is leaving on
    /// purpose, after what it sent before).
    pub(crate) fn client_terminated(&self) -> bool {
        self.0.terminated.load(Ordering::Relaxed)
    }

    fn push(&self, rejection: Rejection) {
        self.rejections().push_back(rejection);
    }
}

/// The checking layer over a client socket (see the module docs).
pub(crate) struct FrameGuard<S> {
    inner: S,
    /// Bytes read and not yet checked: at most one incomplete frame after
    /// each check.
    unchecked: BytesMut,
    /// Whole checked frames (or their substitutes) for the codec.
    checked: BytesMut,
    /// Whether the startup packet has passed (frames are typed after it).
    started: bool,
    /// Frames passed on so far.
    frames: u64,
    /// No more frames: the client closed, or framing was lost.
    ended: bool,
    reports: GuardReports,
}

impl<S> FrameGuard<S> {
    /// Guards `inner`; `already_read` holds bytes read from it before (they
    /// are checked like the rest).
    pub(crate) fn new(inner: S, already_read: BytesMut, reports: GuardReports) -> Self {
        let mut guard = FrameGuard {
            inner,
            unchecked: already_read,
            checked: BytesMut::new(),
            started: false,
            frames: 0,
            ended: false,
            reports,
        };
        guard.check_frames();
        guard
    }

    /// Moves every complete frame from `unchecked` to `checked`, checking it.
    fn check_frames(&mut self) {
        while !self.ended {
            let header = if self.started {
                typed_header(&self.unchecked)
            } else {
                startup_header(&self.unchecked)
            };
            let frame_bytes = match header {
                Header::Incomplete => return,
                Header::Impossible(error) => {
                    let message_type = self.started.then(|| self.unchecked[0]);
                    self.end_with(message_type, error);
                    return;
                }
                Header::Frame(frame_bytes) => frame_bytes,
            };
            if self.unchecked.len() < frame_bytes {
                self.unchecked.reserve(frame_bytes - self.unchecked.len());
                return;
            }
            let frame = self.unchecked.split_to(frame_bytes);
            let verdict = if self.started {
                check_typed(frame[0], &frame[5..])
            } else {
                check_startup(&frame[4..])
            };
            match verdict {
                Ok(()) => {
                    if self.started && frame[0] == b'X' {
                        self.reports.0.terminated.store(true, Ordering::Relaxed);
                    }
                    self.checked.extend_from_slice(&frame);
                }
                // The codec reads a startup packet in its place: there is
                // no harmless substitute, and a malformed one is FATAL in
                // PostgreSQL too.
                Err(error) if !self.started => {
                    self.end_with(None, error);
                    return;
                }
                Err(error) => {
                    self.reports.push(Rejection {
                        frame: self.frames,
                        message_type: Some(frame[0]),
                        error,
                    });
                    self.checked.extend_from_slice(&FLUSH);
                }
            }
            self.started = true;
            self.frames += 1;
        }
    }

    /// Ends the stream before the current frame, queueing a fatal
    /// rejection for it: the codec sees the end of the stream.
    fn end_with(&mut self, message_type: Option<u8>, error: RsError) {
        self.reports.push(Rejection {
            frame: self.frames,
            message_type,
            error,
        });
        self.ended = true;
        self.unchecked.clear();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FrameGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.checked.is_empty() {
                let n = this.checked.len().min(buf.remaining());
                buf.put_slice(&this.checked[..n]);
                this.checked.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            if this.unchecked.capacity() == this.unchecked.len() {
                this.unchecked.reserve(READ_AHEAD_BYTES);
            }
            match poll_read_buf(Pin::new(&mut this.inner), cx, &mut this.unchecked) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                // The client closed: an incomplete frame is dropped, as
                // PostgreSQL drops a message cut short by EOF.
                Poll::Ready(Ok(0)) => this.ended = true,
                Poll::Ready(Ok(_)) => this.check_frames(),
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FrameGuard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// What a frame's first bytes say about it.
#[derive(Debug)]
enum Header {
    /// Not enough bytes to know its length yet.
    Incomplete,
    /// Its length in bytes, type byte and length field included.
    Frame(usize),
    /// No such frame can exist: the stream cannot be followed further.
    Impossible(RsError),
}

/// The startup packet's header: a length that counts itself.
fn startup_header(bytes: &[u8]) -> Header {
    let Some(length) = length_at(bytes, 0) else {
        return Header::Incomplete;
    };
    if !(STARTUP_BYTES_MIN..=SMALL_MESSAGE_BYTES_MAX).contains(&length) {
        return Header::Impossible(protocol_violation(format!(
            "invalid length of startup packet: {length} bytes"
        )));
    }
    Header::Frame(length)
}

/// A typed message's header: its type byte and a length that counts itself
/// but not the type byte.
fn typed_header(bytes: &[u8]) -> Header {
    let Some(length) = length_at(bytes, 1) else {
        return Header::Incomplete;
    };
    let message_type = bytes[0];
    let Some(limit) = length_limit(message_type) else {
        return Header::Impossible(protocol_violation(format!(
            "invalid frontend message type {message_type}"
        )));
    };
    if length < 4 || length > limit {
        return Header::Impossible(protocol_violation(format!(
            "invalid message length {length} for message type '{}'",
            char::from(message_type)
        )));
    }
    Header::Frame(length + 1)
}

/// The length field at `offset`, once its four bytes are there (negative
/// lengths read as huge, so they fail the limits).
fn length_at(bytes: &[u8], offset: usize) -> Option<usize> {
    let field = bytes.get(offset..offset + 4)?;
    let length = u32::from_be_bytes([field[0], field[1], field[2], field[3]]);
    Some(length as usize)
}

/// The largest frame of each message type a client may send (`None`: not a
/// frontend message).
fn length_limit(message_type: u8) -> Option<usize> {
    match message_type {
        b'Q' | b'P' | b'B' | b'd' => Some(LARGE_MESSAGE_BYTES_MAX),
        b'p' => Some(AUTH_MESSAGE_BYTES_MAX),
        b'D' | b'E' | b'C' | b'S' | b'H' | b'X' | b'c' | b'f' => Some(SMALL_MESSAGE_BYTES_MAX),
        _ => None,
    }
}

/// The startup packet's body: a protocol version, then `name\0value\0`
/// pairs closed by an empty name (a CancelRequest or SSLRequest is a
/// version code and a fixed body, which `pgwire` checks).
fn check_startup(body: &[u8]) -> Result<(), RsError> {
    let mut body = Body::new(body, "startup packet");
    let version = body.i32()?;
    if version >> 16 != 3 {
        // A request code (cancel, SSL, GSS): fixed layouts pgwire reads.
        return Ok(());
    }
    // Only the layout: PostgreSQL takes parameter values in any encoding
    // (an application_name from a Latin-1 path, say).
    loop {
        let name = body.cstring()?;
        if name.is_empty() {
            break;
        }
        body.cstring()?;
    }
    body.end()
}

/// A typed message's body, against its layout.
fn check_typed(message_type: u8, body: &[u8]) -> Result<(), RsError> {
    let mut body = Body::new(body, message_name(message_type));
    match message_type {
        b'Q' => {
            body.text()?;
        }
        b'P' => {
            body.text()?;
            body.text()?;
            let types = body.count()?;
            body.take(types * 4)?;
        }
        b'B' => check_bind(&mut body)?,
        b'D' | b'C' => {
            let target = body.byte()?;
            if target != b'S' && target != b'P' {
                return Err(protocol_violation(format!(
                    "invalid {} target type '{}'",
                    message_name(message_type),
                    char::from(target)
                )));
            }
            body.text()?;
        }
        b'E' => {
            body.text()?;
            body.i32()?;
        }
        b'f' => {
            body.text()?;
        }
        // CopyData and the authentication family carry arbitrary bytes.
        b'd' | b'p' => return Ok(()),
        _ => {}
    }
    body.end()
}

/// Bind: portal and statement names, parameter format codes, parameter
/// values (text ones must be UTF-8), result format codes.
fn check_bind(body: &mut Body<'_>) -> Result<(), RsError> {
    body.text()?;
    body.text()?;
    let format_count = body.count()?;
    let mut formats = Vec::with_capacity(format_count.min(body.remaining() / 2));
    for _ in 0..format_count {
        formats.push(format_code(body.i16()?)?);
    }
    let parameters = body.count()?;
    if format_count > 1 && format_count != parameters {
        return Err(protocol_violation(format!(
            "bind message has {format_count} parameter formats but {parameters} parameters"
        )));
    }
    for parameter in 0..parameters {
        let length = body.i32()?;
        if length == -1 {
            continue;
        }
        let length = usize::try_from(length).map_err(|_| {
            protocol_violation(format!(
                "invalid length {length} of parameter {}",
                parameter + 1
            ))
        })?;
        let value = body.take(length)?;
        let text = match formats.as_slice() {
            [] => true,
            [only] => *only,
            all => all[parameter],
        };
        if text {
            utf8(value)?;
        }
    }
    let results = body.count()?;
    for _ in 0..results {
        format_code(body.i16()?)?;
    }
    Ok(())
}

/// A format code: `true` for text, `false` for binary.
fn format_code(code: i16) -> Result<bool, RsError> {
    match code {
        0 => Ok(true),
        1 => Ok(false),
        other => Err(protocol_violation(format!(
            "unsupported format code: {other}"
        ))),
    }
}

fn message_name(message_type: u8) -> &'static str {
    match message_type {
        b'Q' => "Query",
        b'P' => "Parse",
        b'B' => "Bind",
        b'D' => "Describe",
        b'C' => "Close",
        b'E' => "Execute",
        b'S' => "Sync",
        b'H' => "Flush",
        b'X' => "Terminate",
        b'd' => "CopyData",
        b'c' => "CopyDone",
        b'f' => "CopyFail",
        b'p' => "authentication",
        _ => "unknown",
    }
}

/// A cursor over one message body that never reads past it.
struct Body<'a> {
    bytes: &'a [u8],
    message: &'static str,
}

impl<'a> Body<'a> {
    fn new(bytes: &'a [u8], message: &'static str) -> Self {
        Body { bytes, message }
    }

    fn remaining(&self) -> usize {
        self.bytes.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], RsError> {
        if n > self.bytes.len() {
            return Err(protocol_violation(format!(
                "invalid {} message: insufficient data left in message",
                self.message
            )));
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, RsError> {
        Ok(self.take(1)?[0])
    }

    fn i16(&mut self) -> Result<i16, RsError> {
        let bytes = self.take(2)?;
        Ok(i16::from_be_bytes([bytes[0], bytes[1]]))
    }

    fn i32(&mut self) -> Result<i32, RsError> {
        let bytes = self.take(4)?;
        Ok(i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// A count field: `pgwire` reads it signed, so counts beyond `i16::MAX`
    /// (which PostgreSQL allows, up to 65,535) are refused here.
    fn count(&mut self) -> Result<usize, RsError> {
        let count = self.i16()?;
        usize::try_from(count).map_err(|_| {
            protocol_violation(format!(
                "invalid {} message: {} items exceed the 32,767 this server accepts",
                self.message,
                u16::from_be_bytes(count.to_be_bytes())
            ))
        })
    }

    /// A NUL-terminated string's bytes (without the NUL).
    fn cstring(&mut self) -> Result<&'a [u8], RsError> {
        let Some(end) = self.bytes.iter().position(|&byte| byte == 0) else {
            return Err(protocol_violation(format!(
                "invalid {} message: invalid string in message",
                self.message
            )));
        };
        Ok(&self.take(end + 1)?[..end])
    }

    /// A NUL-terminated UTF-8 string.
    fn text(&mut self) -> Result<&'a str, RsError> {
        utf8(self.cstring()?)
    }

    /// Nothing may follow the last field.
    fn end(self) -> Result<(), RsError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(protocol_violation(format!(
                "invalid {} message: {} bytes after the last field",
                self.message,
                self.bytes.len()
            )))
        }
    }
}

/// `bytes` as UTF-8, or PostgreSQL's error naming the first bad sequence.
fn utf8(bytes: &[u8]) -> Result<&str, RsError> {
    std::str::from_utf8(bytes).map_err(|error| {
        let start = error.valid_up_to();
        let bad = error.error_len().unwrap_or(bytes.len() - start);
        let shown: Vec<String> = bytes[start..start + bad]
            .iter()
            .map(|byte| format!("0x{byte:02x}"))
            .collect();
        RsError::new(
            &codes::INVALID_BYTE_SEQUENCE,
            format!(
                "invalid byte sequence for encoding \"UTF8\": {}",
                shown.join(" ")
            ),
        )
    })
}

pub(crate) fn protocol_violation(message: String) -> RsError {
    RsError::new(&codes::PROTOCOL_VIOLATION, message)
}

#[cfg(test)]
#[path = "frames_tests.rs"]
mod tests;
