//! The bytes of one connection before pgwire decodes them, and the connection's message loop.
//!
//! pgwire's decoders trust what a client sends: a length below four, a count larger than its
//! message or a string without its terminator make them read into the next message or panic.
//! [`Checked`] sits between the socket (after TLS) and pgwire's decoder and lets a message
//! through only once all of it has arrived and its layout matches its type exactly; [`serve`]
//! runs pgwire's message handling over it.
//!
//! Writes are combined as PostgreSQL combines them: pgwire flushes after every message, but
//! [`Checked`] holds what was written while a message is being answered or the client's next
//! message is already read and waiting (a pipelined `Bind`/`Execute`/`Sync`), and sends it
//! all in one write before it reads from the socket again, or once it holds [`OUT_CAP`]
//! bytes. A statement that streams
//! rows as they come (`SUBSCRIBE`) marks the connection live, and every flush goes out then.
//! One write per answered batch instead of one per message saves the client a wake-up and
//! both sides a system call per message.
//!
//! # Invariant
//! pgwire decodes only whole, well-formed messages. Anything else (garbage instead of a
//! start-up packet, an unknown message type, a wrong length, a malformed body, a connection
//! closed in the middle of a message) ends that connection alone with a `FATAL` `08P01`
//! error: no task panics, and the server and its other connections carry on.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use crate::sqlstate::SqlState;
use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use pgwire::api::{ClientInfo, ErrorHandler, PgWireConnectionState, PgWireServerHandlers};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::{self as m, Message, PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{negotiate_tls, process_error, process_message};
use pgwire::tokio::TlsAcceptor;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, FramedParts};

/// Time a client has to finish the start-up exchange (as pgwire's own loop).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// The code of a cancel request in place of a protocol version.
const CANCEL_REQUEST_CODE: i32 = 80_877_102;
/// The longest cancel key a client may send (protocol 3.2).
const MAX_CANCEL_KEY: usize = 256;

/// Why a connection's bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("invalid length {0} of a start-up packet")]
    StartupLength(i64),
    #[error("unsupported frontend protocol {}.{}", .0 >> 16, .0 & 0xffff)]
    Protocol(u32),
    #[error("invalid frontend message type {}", describe_type(*.0))]
    UnknownType(u8),
    #[error("invalid message length {length} of a {kind} message")]
    Length { kind: &'static str, length: i64 },
    #[error("malformed {0} message")]
    Layout(&'static str),
    #[error("unexpected data after a cancel request")]
    AfterCancel,
    #[error("the connection closed in the middle of a message")]
    Truncated,
}

fn describe_type(kind: u8) -> String {
    if kind.is_ascii_graphic() {
        format!("'{}'", kind as char)
    } else {
        format!("{kind}")
    }
}

/// Where a connection is in the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The start-up packet (or a cancel request) comes next: no type byte.
    Startup,
    /// Typed messages.
    Messages,
    /// After a cancel request nothing more may come.
    Cancelled,
}

/// The frontend message types pgwire decodes: name and longest length.
fn message_kind(kind: u8) -> Option<(&'static str, usize)> {
    use m::{copy, extendedquery as eq, simplequery, startup, terminate};
    Some(match kind {
        b'Q' => ("Query", simplequery::Query::max_message_length()),
        b'P' => ("Parse", eq::Parse::max_message_length()),
        b'B' => ("Bind", eq::Bind::max_message_length()),
        b'C' => ("Close", eq::Close::max_message_length()),
        b'D' => ("Describe", eq::Describe::max_message_length()),
        b'E' => ("Execute", eq::Execute::max_message_length()),
        b'H' => ("Flush", eq::Flush::max_message_length()),
        b'S' => ("Sync", eq::Sync::max_message_length()),
        b'X' => ("Terminate", terminate::Terminate::max_message_length()),
        b'd' => ("CopyData", copy::CopyData::max_message_length()),
        b'c' => ("CopyDone", copy::CopyDone::max_message_length()),
        b'f' => ("CopyFail", copy::CopyFail::max_message_length()),
        b'p' => (
            "password",
            startup::PasswordMessageFamily::max_message_length(),
        ),
        _ => return None,
    })
}

/// The length of the next message if all of it is in `buf` and well formed, with the phase
/// after it; `Ok(None)` while it is incomplete.
fn next_message(phase: Phase, buf: &[u8]) -> Result<Option<(usize, Phase)>, Malformed> {
    match phase {
        Phase::Cancelled if buf.is_empty() => Ok(None),
        Phase::Cancelled => Err(Malformed::AfterCancel),
        Phase::Startup => {
            let Some(length) = Cursor::new(buf).i32() else {
                return Ok(None);
            };
            let max = m::startup::Startup::max_message_length();
            let total = usize::try_from(length)
                .ok()
                .filter(|l| (8..=max).contains(l))
                .ok_or(Malformed::StartupLength(length.into()))?;
            let Some(packet) = buf.get(4..total) else {
                return Ok(None);
            };
            let mut body = Cursor::new(packet);
            let code = body.i32().ok_or(Malformed::Layout("start-up"))?;
            if code == CANCEL_REQUEST_CODE {
                // Process id and a key of 4 to 256 bytes.
                if !(16..=12 + MAX_CANCEL_KEY).contains(&total) {
                    return Err(Malformed::Layout("cancel request"));
                }
                return Ok(Some((total, Phase::Cancelled)));
            }
            if code >> 16 != 3 {
                return Err(Malformed::Protocol(code as u32));
            }
            startup_parameters(body).ok_or(Malformed::Layout("start-up"))?;
            Ok(Some((total, Phase::Messages)))
        }
        Phase::Messages => {
            let mut header = Cursor::new(buf);
            let (Some(kind), Some(length)) = (header.u8(), header.i32()) else {
                return Ok(None);
            };
            let (name, max) = message_kind(kind).ok_or(Malformed::UnknownType(kind))?;
            let bad_length = Malformed::Length {
                kind: name,
                length: length.into(),
            };
            let length = usize::try_from(length)
                .ok()
                .filter(|l| (4..=max).contains(l))
                .ok_or(bad_length)?;
            let Some(body) = buf.get(5..1 + length) else {
                return Ok(None);
            };
            body_layout(kind, Cursor::new(body)).ok_or(Malformed::Layout(name))?;
            Ok(Some((1 + length, Phase::Messages)))
        }
    }
}

/// `key\0value\0 ... \0` up to the end of the packet.
fn startup_parameters(mut body: Cursor<'_>) -> Option<()> {
    loop {
        if body.cstring()?.is_empty() {
            return body.end();
        }
        body.cstring()?;
    }
}

/// Whether `body` is exactly what a message of type `kind` holds (as pgwire reads it).
fn body_layout(kind: u8, mut body: Cursor<'_>) -> Option<()> {
    match kind {
        b'Q' | b'f' => {
            body.cstring()?;
        }
        b'P' => {
            body.cstring()?;
            body.cstring()?;
            let types = body.u16()?;
            body.skip(4 * usize::from(types))?;
        }
        b'B' => {
            body.cstring()?;
            body.cstring()?;
            let formats = body.u16()?;
            body.skip(2 * usize::from(formats))?;
            for _ in 0..body.u16()? {
                match body.i32()? {
                    -1 => {}
                    length => body.skip(usize::try_from(length).ok()?)?,
                }
            }
            let results = body.u16()?;
            body.skip(2 * usize::from(results))?;
        }
        b'C' | b'D' => {
            if !matches!(body.u8()?, b'S' | b'P') {
                return None;
            }
            body.cstring()?;
        }
        b'E' => {
            body.cstring()?;
            body.i32()?;
        }
        // Any bytes: copy data, and password messages, whose layout depends on the
        // authentication step (checked in `auth`).
        b'd' | b'p' => return Some(()),
        // Flush, Sync, Terminate, CopyDone: no body.
        _ => {}
    }
    body.end()
}

/// Reads big-endian values off a byte slice without ever reading past it.
#[derive(Debug, Clone, Copy)]
pub struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(head)
    }

    pub fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(drop)
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A string up to its `\0` (which is consumed, not returned).
    pub fn cstring(&mut self) -> Option<&'a [u8]> {
        let end = self.rest.iter().position(|&b| b == 0)?;
        let text = self.take(end)?;
        self.skip(1)?;
        Some(text)
    }

    /// The rest, all of it.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    /// `Some` when nothing is left.
    pub fn end(&self) -> Option<()> {
        self.rest.is_empty().then_some(())
    }
}

/// Bytes of written messages held back at most before they are sent anyway.
pub const OUT_CAP: usize = 64 * 1024;

/// A stream that reads only whole, well-formed frontend messages and combines writes (see
/// the module docs).
#[derive(Debug)]
pub struct Checked<S> {
    inner: S,
    phase: Phase,
    /// Bytes read but not yet a whole message.
    unchecked: BytesMut,
    /// Whole, checked messages not yet read by the decoder.
    checked: BytesMut,
    refused: Option<Malformed>,
    eof: bool,
    /// Written, not yet sent.
    out: BytesMut,
    /// A statement streams rows as they come: flushes are not held back.
    live: Arc<AtomicBool>,
    /// A message is being answered: its answer goes out once it is complete.
    answering: bool,
}

impl<S> Checked<S> {
    /// `inner` at the start-up packet; `read` holds bytes already read from it.
    fn new(inner: S, read: BytesMut, live: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            phase: Phase::Startup,
            unchecked: read,
            checked: BytesMut::new(),
            refused: None,
            eof: false,
            out: BytesMut::new(),
            live,
            answering: false,
        }
    }

    /// Whether a flush may wait: a message is being answered, or the client's next message
    /// is already here (so the server answers it before it reads again), and no statement
    /// streams rows as they come.
    fn may_hold(&self) -> bool {
        (self.answering || !self.checked.is_empty() || !self.unchecked.is_empty())
            && self.refused.is_none()
            && self.out.len() < OUT_CAP
            && !self.live.load(Ordering::Acquire)
    }
}

impl<S: AsyncWrite + Unpin> Checked<S> {
    /// Sends everything written so far.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            let _ = self.out.split_to(n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Checked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.checked.is_empty() {
                let n = this.checked.len().min(out.remaining());
                out.put_slice(&this.checked.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if let Some(why) = &this.refused {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why.clone())));
            }
            match next_message(this.phase, &this.unchecked) {
                Ok(Some((length, phase))) => {
                    this.phase = phase;
                    this.checked = this.unchecked.split_to(length);
                    continue;
                }
                Ok(None) => {}
                Err(why) => {
                    this.refused = Some(why);
                    continue;
                }
            }
            if this.eof {
                if this.unchecked.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.refused = Some(Malformed::Truncated);
                continue;
            }
            // About to wait for the client: what it is owed goes out first.
            if !this.out.is_empty() {
                ready!(this.poll_send(cx))?;
                ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.eof = true;
            } else {
                this.unchecked.extend_from_slice(read.filled());
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Checked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.out.len() >= OUT_CAP {
            ready!(this.poll_send(cx))?;
        }
        this.out.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.may_hold() {
            return Poll::Ready(Ok(()));
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// Serves one connection as pgwire's `process_socket` does, reading through [`Checked`]:
/// TLS negotiation, the start-up exchange under a timeout, then messages until the client
/// leaves. A refused message is answered with a `FATAL` `08P01` error and ends the connection.
pub async fn serve<H: PgWireServerHandlers>(
    socket: TcpStream,
    tls: Option<TlsAcceptor>,
    handlers: H,
    live: Arc<AtomicBool>,
) -> io::Result<()> {
    let startup_timeout = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_timeout);
    let negotiated = tokio::select! {
        _ = &mut startup_timeout => return Ok(()),
        negotiated = negotiate_tls(socket, tls) => negotiated?,
    };
    // A direct TLS connection without a certificate configured.
    let Some(negotiated) = negotiated else {
        return Ok(());
    };
    let old = negotiated.into_parts();
    let mut parts = FramedParts::new::<PgWireBackendMessage>(
        Checked::new(old.io, old.read_buf, live),
        old.codec,
    );
    parts.write_buf = old.write_buf;
    let mut socket = Framed::from_parts(parts);

    let startup = handlers.startup_handler();
    let simple = handlers.simple_query_handler();
    let extended = handlers.extended_query_handler();
    let copy = handlers.copy_handler();
    let cancel = handlers.cancel_handler();
    let errors = handlers.error_handler();
    loop {
        let starting = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let next = if starting {
            tokio::select! {
                _ = &mut startup_timeout => None,
                next = socket.next() => next,
            }
        } else {
            socket.next().await
        };
        let message = match next {
            None | Some(Ok(PgWireFrontendMessage::Terminate(_))) => break,
            Some(Ok(message)) => message,
            Some(Err(e)) => {
                refuse(&mut socket, e).await;
                break;
            }
        };
        let extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => message.is_extended_query(),
        };
        socket.get_mut().answering = true;
        let handled = process_message(
            message,
            &mut socket,
            Arc::clone(&startup),
            Arc::clone(&simple),
            Arc::clone(&extended),
            Arc::clone(&copy),
            Arc::clone(&cancel),
        )
        .await;
        if let Err(mut e) = handled {
            errors.on_error(&socket, &mut e);
            let info = ErrorInfo::from(e);
            if info.is_fatal() {
                // The connection ends here: no `ReadyForQuery` after a `FATAL`.
                socket
                    .send(PgWireBackendMessage::ErrorResponse(info.into()))
                    .await?;
                return socket.close().await;
            }
            process_error(
                &mut socket,
                PgWireError::UserError(Box::new(info)),
                extended_query,
            )
            .await?;
        }
        socket.get_mut().answering = false;
    }
    // What is still held back goes out before the connection ends; a client that already
    // left cannot be told anything more.
    let _ = socket.close().await;
    Ok(())
}

/// Ends a connection whose bytes could not be decoded: a `FATAL` `08P01` error naming why,
/// unless the socket itself failed.
async fn refuse<S>(socket: &mut S, error: PgWireError)
where
    S: futures::Sink<PgWireBackendMessage> + Unpin + ClientInfo,
{
    let message = match &error {
        PgWireError::IoError(e) => match e.get_ref().and_then(|e| e.downcast_ref::<Malformed>()) {
            Some(why) => why.to_string(),
            None => {
                tracing::debug!(error = %e, "connection failed");
                return;
            }
        },
        other => other.to_string(),
    };
    tracing::info!(peer = %socket.socket_addr(), %message, "closing a connection: malformed message");
    let info = ErrorInfo::new(
        "FATAL".to_owned(),
        SqlState::PROTOCOL_VIOLATION.code().to_owned(),
        message,
    );
    let _ = socket
        .send(PgWireBackendMessage::ErrorResponse(info.into()))
        .await;
    let _ = socket.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![kind];
        out.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn startup(parameters: &[u8]) -> Vec<u8> {
        let mut out = ((parameters.len() + 8) as i32).to_be_bytes().to_vec();
        out.extend_from_slice(&196_608i32.to_be_bytes());
        out.extend_from_slice(parameters);
        out
    }

    fn check(phase: Phase, bytes: &[u8]) -> Result<Option<(usize, Phase)>, Malformed> {
        next_message(phase, bytes)
    }

    #[test]
    fn whole_messages_pass_and_partial_ones_wait() {
        let packet = startup(b"user\0ann\0\0");
        assert_eq!(
            check(Phase::Startup, &packet),
            Ok(Some((packet.len(), Phase::Messages)))
        );
        assert_eq!(check(Phase::Startup, &packet[..6]), Ok(None));
        let query = typed(b'Q', b"SELECT 1\0");
        assert_eq!(
            check(Phase::Messages, &query),
            Ok(Some((query.len(), Phase::Messages)))
        );
        assert_eq!(check(Phase::Messages, &query[..7]), Ok(None));
        let mut parse = b"s\0SELECT $1\0".to_vec();
        parse.extend_from_slice(&1u16.to_be_bytes());
        parse.extend_from_slice(&23u32.to_be_bytes());
        assert!(check(Phase::Messages, &typed(b'P', &parse))
            .unwrap()
            .is_some());
        let mut bind = b"\0s\0".to_vec();
        bind.extend_from_slice(&0u16.to_be_bytes());
        bind.extend_from_slice(&2u16.to_be_bytes());
        bind.extend_from_slice(&(-1i32).to_be_bytes());
        bind.extend_from_slice(&2i32.to_be_bytes());
        bind.extend_from_slice(b"42");
        bind.extend_from_slice(&0u16.to_be_bytes());
        assert!(check(Phase::Messages, &typed(b'B', &bind))
            .unwrap()
            .is_some());
        // An empty password message is whole: its meaning is `auth`'s to judge.
        assert!(check(Phase::Messages, &typed(b'p', b"")).unwrap().is_some());
    }

    #[test]
    fn malformed_messages_are_refused() {
        // Garbage instead of a start-up packet.
        assert!(matches!(
            check(Phase::Startup, b"GET / HTTP/1.1\r\n"),
            Err(Malformed::StartupLength(_))
        ));
        assert!(matches!(
            check(Phase::Startup, &[0, 0, 0, 2, 1, 2, 3, 4]),
            Err(Malformed::StartupLength(2))
        ));
        let mut old = 8i32.to_be_bytes().to_vec();
        old.extend_from_slice(&(2i32 << 16).to_be_bytes());
        assert_eq!(
            check(Phase::Startup, &old),
            Err(Malformed::Protocol(2 << 16))
        );
        // Parameters without their final terminator.
        assert_eq!(
            check(Phase::Startup, &startup(b"user\0ann\0")),
            Err(Malformed::Layout("start-up"))
        );
        assert_eq!(
            check(Phase::Messages, b"Z\0\0\0\x04"),
            Err(Malformed::UnknownType(b'Z'))
        );
        // Lengths below four, negative, or beyond the type's limit.
        for length in [0i32, 3, -1, i32::MAX] {
            let mut bytes = vec![b'p'];
            bytes.extend_from_slice(&length.to_be_bytes());
            assert!(
                matches!(
                    check(Phase::Messages, &bytes),
                    Err(Malformed::Length { .. })
                ),
                "{length}"
            );
        }
        // Bodies that do not fill their length exactly.
        assert_eq!(
            check(Phase::Messages, &typed(b'Q', b"SELECT 1")),
            Err(Malformed::Layout("Query"))
        );
        assert_eq!(
            check(Phase::Messages, &typed(b'Q', b"SELECT 1\0x")),
            Err(Malformed::Layout("Query"))
        );
        assert_eq!(
            check(Phase::Messages, &typed(b'P', b"\0SELECT 1\0")),
            Err(Malformed::Layout("Parse"))
        );
        assert_eq!(
            check(Phase::Messages, &typed(b'S', b"x")),
            Err(Malformed::Layout("Sync"))
        );
        assert_eq!(
            check(Phase::Messages, &typed(b'D', b"X\0")),
            Err(Malformed::Layout("Describe"))
        );
        let mut bind = b"\0\0".to_vec();
        bind.extend_from_slice(&0u16.to_be_bytes());
        bind.extend_from_slice(&1u16.to_be_bytes());
        bind.extend_from_slice(&100i32.to_be_bytes());
        bind.extend_from_slice(&0u16.to_be_bytes());
        assert_eq!(
            check(Phase::Messages, &typed(b'B', &bind)),
            Err(Malformed::Layout("Bind"))
        );
        assert_eq!(check(Phase::Cancelled, b"x"), Err(Malformed::AfterCancel));
    }
}
