//! A connection of our own for the snapshot's `SELECT`s: binary result rows read in place.
//!
//! `mysql_async` turns every result row into a `Row` of owned `Value`s, after trying the row
//! packet as an OK and as an ERR packet; on the snapshot's read path that was about 2,300 of
//! 3,840 instructions a row (`docs/benchmarks.md`). This connection speaks only what a chunk's
//! read needs: the handshake, `COM_QUERY` for session settings, `COM_PING`, and prepared
//! statements whose binary result rows are read from one buffer and handed out as borrowed
//! values ([`row`]): no allocation per row or per value. The handshake and the prepare and
//! execute requests are built and parsed with `mysql_common`, the library `mysql_async`
//! itself uses; this module only frames packets and reads rows.
//!
//! # Invariant
//! What a `SELECT` returns here equals, value for value, what `mysql_async` returns for it
//! (see [`row`]), so everything after the read is the same whichever connection read it.
//!
//! # What it does not speak
//! TLS and authentication methods other than `mysql_native_password` and
//! `caching_sha2_password`: [`WireConnection::open`] answers [`Opened::Unsupported`] with the
//! reason, and the caller reads with `mysql_async` instead. Nothing is lost but speed.
//!
//! # Errors and the read timeout
//! Server errors become the same `mysql_async::Error::Server` the driver would return, so
//! [`SourceError::from_mysql`] classifies them exactly as it classifies the driver's. Every
//! read from the socket waits at most the source's read timeout (one read takes in many rows,
//! so this is one timer per read, not per row); a connection that failed in any way is not
//! used again.

pub mod row;

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use mysql_async::consts::{CapabilityFlags, StatusFlags};
use mysql_async::{DriverError, Value};
use mysql_common::io::ParseBuf;
use mysql_common::packets::{
    AuthPlugin, AuthSwitchRequest, Column, ComStmtExecuteRequestBuilder, ErrPacket,
    HandshakePacket, HandshakeResponse, StmtPacket,
};
use mysql_common::proto::MySerialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::source::connect::{bounded, ConnectOptions};
use crate::source::error::{SourceError, SourceResult};

pub use row::{BinaryRow, Encoding, RowCursor, RowValues, ValueError, WireValue};

/// The largest payload of one packet; a longer one continues in the next packets.
const MAX_PAYLOAD: usize = 0xff_ffff;
/// Bytes asked of the socket at a time (and the read buffer's starting size).
const READ_CHUNK: usize = 256 * 1024;
/// Prepared statements a connection keeps before it closes them all and starts again.
const MAX_STATEMENTS: usize = 64;

const COM_QUIT: u8 = 0x01;
const COM_QUERY: u8 = 0x03;
const COM_PING: u8 = 0x0e;
const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_CLOSE: u8 = 0x19;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Stream for T {}

/// What [`WireConnection::open`] made.
#[derive(Debug)]
pub enum Opened {
    Ready(Box<WireConnection>),
    /// The server or the options need something this connection does not speak: the reason.
    Unsupported(String),
}

#[derive(Debug, Clone, Copy)]
struct Prepared {
    id: u32,
    params: u16,
}

/// Where a packet's payload is: in the read buffer, or (a payload of several packets)
/// assembled in `big`.
#[derive(Debug, Clone, Copy)]
enum Payload {
    Buffered { at: usize, len: usize },
    Big,
}

/// A connection that reads `SELECT` results in place; see the module docs.
pub struct WireConnection {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
    /// The unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    big: Vec<u8>,
    /// The sequence number of the next packet this side sends.
    seq: u8,
    capabilities: CapabilityFlags,
    statements: HashMap<String, Prepared>,
    /// The current result's column encodings (kept to reuse their allocation).
    columns: Vec<Encoding>,
    out: Vec<u8>,
    limit: Duration,
    address: String,
    user: String,
}

impl std::fmt::Debug for WireConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireConnection")
            .field("address", &self.address)
            .field("statements", &self.statements.len())
            .finish_non_exhaustive()
    }
}

fn protocol(what: impl Into<String>) -> mysql_async::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into()).into()
}

impl WireConnection {
    /// Connects and authenticates as `options` say, over `socket` when it is given and can be
    /// reached (a local server's Unix socket, as `mysql_async` prefers too), else over TCP;
    /// then runs `init` (session settings).
    pub async fn open(
        options: &ConnectOptions,
        socket: Option<&str>,
        init: &[&str],
    ) -> SourceResult<Opened> {
        let opts = &options.opts;
        if opts.ssl_opts().is_some() {
            return Ok(Opened::Unsupported(
                "the source is configured for TLS".into(),
            ));
        }
        let limit = options.read_timeout;
        let address = options.address();
        let context = || format!("connecting to {address} for snapshot reads");
        let io_error = |e: io::Error| SourceError::from_mysql(context(), e.into());
        let socket = opts.socket().or(socket);
        let mut via_socket = false;
        let mut stream: Option<Box<dyn Stream>> = None;
        if let Some(path) = socket {
            let connect = async {
                tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(io_error)
            };
            match bounded(limit, context, connect).await {
                Ok(s) => {
                    via_socket = true;
                    stream = Some(Box::new(s));
                }
                // A socket the options name must work; one learned from the server may be on
                // another machine.
                Err(e) if opts.socket().is_some() => return Err(e),
                Err(_) => {}
            }
        }
        let stream = match stream {
            Some(s) => s,
            None => {
                let host = (opts.ip_or_hostname().to_string(), opts.tcp_port());
                let connect = async {
                    let s = tokio::net::TcpStream::connect(host)
                        .await
                        .map_err(io_error)?;
                    s.set_nodelay(true).map_err(io_error)?;
                    Ok(s)
                };
                Box::new(bounded(limit, context, connect).await?)
            }
        };
        let mut conn = WireConnection {
            stream,
            buf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
            big: Vec::new(),
            seq: 0,
            capabilities: CapabilityFlags::empty(),
            statements: HashMap::new(),
            columns: Vec::new(),
            out: Vec::new(),
            limit,
            address: address.clone(),
            user: options.user(),
        };
        if let Some(reason) = conn.handshake(options, via_socket).await? {
            return Ok(Opened::Unsupported(reason));
        }
        for statement in init {
            conn.query_drop(statement).await?;
        }
        Ok(Opened::Ready(Box::new(conn)))
    }

    fn error(&self, context: &(dyn Fn() -> String + Sync), err: mysql_async::Error) -> SourceError {
        match SourceError::from_mysql(context(), err) {
            // The driver's own connect names the user; so does this one.
            SourceError::AccessDenied { message, .. } => SourceError::AccessDenied {
                user: self.user.clone(),
                message,
            },
            other => other,
        }
    }

    /// The error an ERR packet holds.
    fn server_error(&self, payload: &[u8]) -> mysql_async::Error {
        match ParseBuf(payload).parse::<ErrPacket>(self.capabilities) {
            Ok(ErrPacket::Error(e)) => e.into(),
            Ok(ErrPacket::Progress(_)) => protocol("an unrequested progress report"),
            Err(e) => e.into(),
        }
    }

    /// Authenticates; `Some(reason)` when the server asks for what this connection does not
    /// speak.
    async fn handshake(
        &mut self,
        options: &ConnectOptions,
        via_socket: bool,
    ) -> SourceResult<Option<String>> {
        let address = self.address.clone();
        let context = move || format!("authenticating to {address} for snapshot reads");
        let greeting = self.owned_packet(&context).await?;
        if greeting.first() == Some(&0xff) {
            let err = self.server_error(&greeting);
            return Err(self.error(&context, err));
        }
        let handshake = ParseBuf(&greeting)
            .parse::<HandshakePacket>(())
            .map_err(|e| self.error(&context, e.into()))?;
        let server = handshake.capabilities();
        if !server.contains(CapabilityFlags::CLIENT_PROTOCOL_41) {
            return Ok(Some("the server predates protocol 4.1".into()));
        }
        let wanted = CapabilityFlags::CLIENT_LONG_PASSWORD
            | CapabilityFlags::CLIENT_LONG_FLAG
            | CapabilityFlags::CLIENT_PROTOCOL_41
            | CapabilityFlags::CLIENT_TRANSACTIONS
            | CapabilityFlags::CLIENT_SECURE_CONNECTION
            | CapabilityFlags::CLIENT_MULTI_RESULTS
            | CapabilityFlags::CLIENT_PS_MULTI_RESULTS
            | CapabilityFlags::CLIENT_PLUGIN_AUTH
            | CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
            | CapabilityFlags::CLIENT_DEPRECATE_EOF;
        self.capabilities = wanted & server;
        let opts = &options.opts;
        let pass = opts.pass();
        let mut nonce = handshake.nonce();
        let mut plugin = handshake
            .auth_plugin()
            .unwrap_or(AuthPlugin::MysqlNativePassword)
            .into_owned();
        let Some(data) = auth_data(&plugin, pass, &nonce) else {
            return Ok(Some(unsupported_method(&plugin)));
        };
        let response = HandshakeResponse::new(
            Some(data),
            handshake.server_version_parsed().unwrap_or((0, 0, 0)),
            opts.user().map(str::as_bytes),
            opts.db_name().map(str::as_bytes),
            Some(plugin.clone()),
            self.capabilities,
            None,
            // Our requests are short; this caps only what we may send.
            MAX_PAYLOAD as u32,
        );
        self.out.clear();
        response.serialize(&mut self.out);
        self.send_out(&context).await?;
        let mut switched = false;
        loop {
            let packet = self.owned_packet(&context).await?;
            match packet.first() {
                Some(0x00) => return Ok(None),
                Some(0xff) => {
                    let err = self.server_error(&packet);
                    return Err(self.error(&context, err));
                }
                Some(0xfe) if !switched => {
                    switched = true;
                    let request = ParseBuf(&packet)
                        .parse::<AuthSwitchRequest>(())
                        .map_err(|e| self.error(&context, e.into()))?;
                    nonce = request.plugin_data().to_vec();
                    plugin = request.auth_plugin().clone().into_owned();
                    let Some(data) = auth_data(&plugin, pass, &nonce) else {
                        return Ok(Some(unsupported_method(&plugin)));
                    };
                    self.out.clear();
                    self.out.extend_from_slice(&data);
                    self.send_out(&context).await?;
                }
                // caching_sha2_password: 3 = the server had the password cached (OK follows),
                // 4 = it needs the password itself.
                Some(0x01) if plugin == AuthPlugin::CachingSha2Password => match packet.get(1) {
                    Some(0x03) => {}
                    Some(0x04) => {
                        let mut secret = pass.unwrap_or_default().as_bytes().to_vec();
                        secret.push(0);
                        self.out.clear();
                        if via_socket {
                            // A local socket is private: the password goes as it is.
                            self.out.extend_from_slice(&secret);
                        } else {
                            self.out.push(0x02);
                            self.send_out(&context).await?;
                            let key = self.owned_packet(&context).await?;
                            let pem = key.get(1..).unwrap_or_default();
                            for (i, byte) in secret.iter_mut().enumerate() {
                                *byte ^= nonce[i % nonce.len().max(1)];
                            }
                            self.out.clear();
                            self.out
                                .extend(mysql_common::crypto::encrypt(&secret, pem).as_slice());
                        }
                        self.send_out(&context).await?;
                    }
                    _ => {
                        let err = protocol("an unknown caching_sha2_password step");
                        return Err(self.error(&context, err));
                    }
                },
                _ => {
                    let err = protocol("an unexpected packet during authentication");
                    return Err(self.error(&context, err));
                }
            }
        }
    }

    /// Runs a statement that returns no rows (a session setting).
    pub async fn query_drop(&mut self, sql: &str) -> SourceResult<()> {
        let context = || format!("running {sql:?} for snapshot reads");
        self.command(COM_QUERY, sql.as_bytes(), &context).await?;
        self.expect_ok(&context).await
    }

    /// Ends the session (`COM_QUIT`, which has no answer) so the server does not count and
    /// log an aborted connection; a failure to send it changes nothing.
    pub async fn quit(mut self) {
        let context = || "closing a snapshot read connection".to_string();
        if let Err(e) = self.command(COM_QUIT, &[], &context).await {
            tracing::debug!(error = %e, "closing a snapshot read connection");
        }
    }

    /// Asks whether the server still answers.
    pub async fn ping(&mut self) -> SourceResult<()> {
        let context = || "pinging the server".to_string();
        self.command(COM_PING, &[], &context).await?;
        self.expect_ok(&context).await
    }

    async fn expect_ok(&mut self, context: &(dyn Fn() -> String + Sync)) -> SourceResult<()> {
        let p = self.packet(context).await?;
        let first = self.payload(p).first().copied();
        match first {
            Some(0x00) => Ok(()),
            Some(0xff) => {
                let err = self.server_error(self.payload(p));
                Err(self.error(context, err))
            }
            _ => Err(self.error(context, protocol("an answer other than OK"))),
        }
    }

    /// Prepares `sql` once per connection.
    async fn prepare(
        &mut self,
        sql: &str,
        context: &(dyn Fn() -> String + Sync),
    ) -> SourceResult<Prepared> {
        if let Some(&prepared) = self.statements.get(sql) {
            return Ok(prepared);
        }
        if self.statements.len() >= MAX_STATEMENTS {
            // COM_STMT_CLOSE has no answer.
            let ids: Vec<u32> = self.statements.drain().map(|(_, p)| p.id).collect();
            for id in ids {
                self.command(COM_STMT_CLOSE, &id.to_le_bytes(), context)
                    .await?;
            }
        }
        self.command(COM_STMT_PREPARE, sql.as_bytes(), context)
            .await?;
        let p = self.packet(context).await?;
        let payload = self.payload(p);
        if payload.first() == Some(&0xff) {
            let err = self.server_error(payload);
            return Err(self.error(context, err));
        }
        let stmt = ParseBuf(payload)
            .parse::<StmtPacket>(())
            .map_err(|e| self.error(context, e.into()))?;
        let prepared = Prepared {
            id: stmt.statement_id(),
            params: stmt.num_params(),
        };
        // The parameter and column definitions follow (each list ended by an EOF packet
        // unless the EOF packets are deprecated); a chunk learns its columns at execution.
        for n in [stmt.num_params(), stmt.num_columns()] {
            if n > 0 {
                for _ in 0..n {
                    self.packet(context).await?;
                }
                self.skip_eof(context).await?;
            }
        }
        self.statements.insert(sql.to_string(), prepared);
        Ok(prepared)
    }

    async fn skip_eof(&mut self, context: &(dyn Fn() -> String + Sync)) -> SourceResult<()> {
        if !self
            .capabilities
            .contains(CapabilityFlags::CLIENT_DEPRECATE_EOF)
        {
            let p = self.packet(context).await?;
            if self.payload(p).first() != Some(&0xfe) {
                return Err(self.error(context, protocol("a missing EOF packet")));
            }
        }
        Ok(())
    }

    /// Runs the prepared `SELECT` `sql` with `params` and hands each row to `row`, which may
    /// stop the read with an error (the connection is then not to be used again).
    pub async fn select(
        &mut self,
        sql: &str,
        params: &[Value],
        context: &(dyn Fn() -> String + Sync),
        mut row: impl FnMut(&BinaryRow<'_>) -> SourceResult<()>,
    ) -> SourceResult<()> {
        let stmt = self.prepare(sql, context).await?;
        if params.len() != stmt.params as usize {
            let err = DriverError::StmtParamsMismatch {
                required: stmt.params,
                supplied: params.len(),
            };
            return Err(self.error(context, err.into()));
        }
        let (request, as_long_data) = ComStmtExecuteRequestBuilder::new(stmt.id).build(params);
        if as_long_data {
            let err = protocol("statement parameters longer than one packet");
            return Err(self.error(context, err));
        }
        self.out.clear();
        request.serialize(&mut self.out);
        self.seq = 0;
        self.send_out(context).await?;
        let p = self.packet(context).await?;
        let payload = self.payload(p);
        let count = match payload.first() {
            Some(0x00) => return Ok(()),
            Some(0xff) => {
                let err = self.server_error(payload);
                return Err(self.error(context, err));
            }
            _ => ParseBuf(payload)
                .checked_eat_lenenc_int()
                .ok_or_else(|| self.error(context, protocol("a bad column count")))?,
        };
        let mut columns = std::mem::take(&mut self.columns);
        columns.clear();
        for _ in 0..count {
            let p = self.packet(context).await?;
            let column = ParseBuf(self.payload(p))
                .parse::<Column>(())
                .map_err(|e| self.error(context, e.into()))?;
            let Some(encoding) = Encoding::of(column.column_type(), column.flags()) else {
                let err = protocol(format!(
                    "a result column of type {:?}",
                    column.column_type()
                ));
                return Err(self.error(context, err));
            };
            columns.push(encoding);
        }
        self.skip_eof(context).await?;
        let read = self.rows(&columns, context, &mut row).await;
        self.columns = columns;
        read
    }

    async fn rows(
        &mut self,
        columns: &[Encoding],
        context: &(dyn Fn() -> String + Sync),
        row: &mut impl FnMut(&BinaryRow<'_>) -> SourceResult<()>,
    ) -> SourceResult<()> {
        loop {
            // Every whole packet already buffered is taken without a suspension point.
            while let Some((at, len)) = self.buffered_row() {
                let payload = &self.buf[at..at + len];
                match payload.first() {
                    Some(0x00) => row(&BinaryRow::new(payload, columns))?,
                    _ => {
                        // Not a row: let the general path below read it.
                        self.start = at - 4;
                        break;
                    }
                }
            }
            let p = self.packet(context).await?;
            let payload = self.payload(p);
            match payload.first() {
                Some(0x00) => row(&BinaryRow::new(payload, columns))?,
                // A binary row always starts with 0x00, so 0xfe is the end (EOF, or OK with
                // the EOF header).
                Some(0xfe) => {
                    let status = end_status(payload, self.capabilities);
                    if status.contains(StatusFlags::SERVER_MORE_RESULTS_EXISTS) {
                        let err = protocol("a SELECT that returned more than one result");
                        return Err(self.error(context, err));
                    }
                    return Ok(());
                }
                Some(0xff) => {
                    let err = self.server_error(payload);
                    return Err(self.error(context, err));
                }
                _ => return Err(self.error(context, protocol("an unexpected result packet"))),
            }
        }
    }

    /// The next whole single packet in the buffer, consumed: its payload's place.
    fn buffered_row(&mut self) -> Option<(usize, usize)> {
        let avail = &self.buf[self.start..self.end];
        if avail.len() < 4 {
            return None;
        }
        let len = u32::from_le_bytes([avail[0], avail[1], avail[2], 0]) as usize;
        if len == MAX_PAYLOAD || avail.len() < 4 + len {
            return None;
        }
        // A row's sequence number is not needed: the next command starts again from 0.
        let at = self.start + 4;
        self.start = at + len;
        Some((at, len))
    }

    fn payload(&self, p: Payload) -> &[u8] {
        match p {
            Payload::Buffered { at, len } => &self.buf[at..at + len],
            Payload::Big => &self.big,
        }
    }

    /// The next packet's payload (several packets' for one of 16 MiB or more).
    async fn packet(&mut self, context: &(dyn Fn() -> String + Sync)) -> SourceResult<Payload> {
        let mut assembling = false;
        loop {
            let avail = self.end - self.start;
            let need = if avail < 4 {
                4
            } else {
                let b = &self.buf[self.start..];
                4 + u32::from_le_bytes([b[0], b[1], b[2], 0]) as usize
            };
            if avail < need {
                self.fill(need, context).await?;
                continue;
            }
            let at = self.start + 4;
            let len = need - 4;
            self.seq = self.buf[self.start + 3].wrapping_add(1);
            self.start = at + len;
            if len < MAX_PAYLOAD && !assembling {
                return Ok(Payload::Buffered { at, len });
            }
            if !assembling {
                self.big.clear();
                assembling = true;
            }
            self.big.extend_from_slice(&self.buf[at..at + len]);
            if len < MAX_PAYLOAD {
                return Ok(Payload::Big);
            }
        }
    }

    async fn owned_packet(
        &mut self,
        context: &(dyn Fn() -> String + Sync),
    ) -> SourceResult<Vec<u8>> {
        let p = self.packet(context).await?;
        Ok(self.payload(p).to_vec())
    }

    /// Reads until at least `need` unread bytes are buffered.
    async fn fill(
        &mut self,
        need: usize,
        context: &(dyn Fn() -> String + Sync),
    ) -> SourceResult<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < need {
            self.buf.resize(need, 0);
        }
        while self.end < need {
            let limit = self.limit;
            let read = async {
                self.stream
                    .read(&mut self.buf[self.end..])
                    .await
                    .map_err(|e| SourceError::from_mysql(context(), e.into()))
            };
            let n = bounded(limit, context, read).await?;
            if n == 0 {
                let err = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                );
                return Err(self.error(context, err.into()));
            }
            self.end += n;
        }
        Ok(())
    }

    /// Starts a command: `cmd` and `body` as packet 0.
    async fn command(
        &mut self,
        cmd: u8,
        body: &[u8],
        context: &(dyn Fn() -> String + Sync),
    ) -> SourceResult<()> {
        self.out.clear();
        self.out.push(cmd);
        self.out.extend_from_slice(body);
        self.seq = 0;
        self.send_out(context).await
    }

    /// Sends `out` as one payload (split into packets of at most [`MAX_PAYLOAD`]).
    async fn send_out(&mut self, context: &(dyn Fn() -> String + Sync)) -> SourceResult<()> {
        let mut frames = Vec::with_capacity(self.out.len() + 8);
        let mut rest = &self.out[..];
        loop {
            let n = rest.len().min(MAX_PAYLOAD);
            frames.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
            frames.push(self.seq);
            self.seq = self.seq.wrapping_add(1);
            frames.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            // A payload of a multiple of MAX_PAYLOAD ends with an empty packet.
            if n < MAX_PAYLOAD {
                break;
            }
        }
        let limit = self.limit;
        let write = async {
            self.stream
                .write_all(&frames)
                .await
                .map_err(|e| SourceError::from_mysql(context(), e.into()))
        };
        bounded(limit, context, write).await
    }
}

/// The response to the authentication challenge, for the methods this connection speaks
/// (`None` for any other). An empty password answers with nothing.
fn auth_data(plugin: &AuthPlugin<'_>, pass: Option<&str>, nonce: &[u8]) -> Option<Vec<u8>> {
    match plugin {
        AuthPlugin::MysqlNativePassword | AuthPlugin::CachingSha2Password => Some(
            plugin
                .gen_data(pass, nonce)
                .map(|d| d.to_vec())
                .unwrap_or_default(),
        ),
        _ => None,
    }
}

fn unsupported_method(plugin: &AuthPlugin<'_>) -> String {
    format!(
        "the account authenticates with {}",
        String::from_utf8_lossy(plugin.as_bytes())
    )
}

/// The status flags of a result's last packet: an EOF packet (header, warnings, status) or,
/// with deprecated EOF, an OK packet under the EOF header (header, affected rows, last insert
/// id, status).
fn end_status(payload: &[u8], capabilities: CapabilityFlags) -> StatusFlags {
    let mut buf = ParseBuf(payload.get(1..).unwrap_or_default());
    let status = if capabilities.contains(CapabilityFlags::CLIENT_DEPRECATE_EOF) {
        buf.checked_eat_lenenc_int()
            .and_then(|_| buf.checked_eat_lenenc_int())
            .and_then(|_| buf.checked_eat_u16_le())
    } else {
        buf.checked_eat_u16_le()
            .and_then(|_| buf.checked_eat_u16_le())
    };
    StatusFlags::from_bits_truncate(status.unwrap_or(0))
}
