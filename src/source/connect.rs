//! Connecting to the source server and proving it can be captured exactly.
//!
//! # Start-up checks
//! Exact capture needs the binlog on, in ROW format with FULL images (the snapshot
//! normalisation folds before/after images and the merge needs every column), uncompressed
//! events (MariaDB's compressed rows events would otherwise be invisible), and a user with
//! `REPLICATION SLAVE`, `REPLICATION CLIENT` (`BINLOG MONITOR` on MariaDB) and `SELECT` (plus
//! `LOCK TABLES` on MySQL, for the snapshot's locking visibility barrier).
//! [`preflight`] checks each and fails with an error that names the setting or privilege and
//! the statement that fixes it, before any data is read.
//!
//! # Retries
//! Connection attempts that fail for transient reasons (refused, reset, server starting or
//! shutting down, no handshake within the read timeout) are retried with exponential backoff
//! up to [`ConnectOptions::max_attempts`]; credential errors are definite and returned at once.
//!
//! # Read timeout
//! TCP keeps a silent connection open for as long as the peer's kernel answers, so a stalled
//! link or a paused server would make a read wait forever. Every read the capture makes from
//! the server (a handshake, a query, a row of a result, a binlog event) is therefore awaited
//! for at most [`ConnectOptions::read_timeout`] ([`bounded`]; the rows of a result set, read by
//! a callback, by [`while_progressing`], which notices within 1.25 × the limit that no row has
//! come); one that gets no answer in time fails with [`SourceError::ReadTimeout`], a transient
//! error: the connection is given up and the part of the capture that used it starts again
//! after its backoff.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder};

use crate::change::errant::BinlogState;
use crate::change::position::{BinlogCoord, GtidSet};
use crate::change::schema::{Charset, Flavor, TableId, TableSchema};
use crate::locks::Locked;
use crate::source::binlog::rows::CollationMap;
use crate::source::error::{SourceError, SourceResult};
use crate::source::schema::load_table_schema;

/// First delay between connection attempts.
const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Longest delay between connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long one read from the server may wait for its answer unless a source sets its own:
/// long enough for the first row of a chunk whose key has no index on a large table, short
/// enough that a stalled connection is noticed within a minute.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The session settings of every connection: utf8mb4 and UTC, so text and `TIMESTAMP` values
/// read by `SELECT` are exact.
pub const SESSION_INIT: [&str; 2] = ["SET NAMES utf8mb4", "SET time_zone = '+00:00'"];

/// How to reach the source server.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub opts: Opts,
    /// Connection attempts before giving up on a transient failure.
    pub max_attempts: u32,
    /// The longest wait for any one read from the server; see the module docs.
    pub read_timeout: Duration,
    /// The history (see `change::position`) of the positions read from this server: a source
    /// that moved to another server reads the new one's positions in a later history.
    pub history: u16,
}

/// Awaits `read`, one exchange with the server, for at most `limit`; see the module docs.
/// `context` says what was being read, for the error.
pub async fn bounded<T>(
    limit: Duration,
    context: impl FnOnce() -> String,
    read: impl Future<Output = SourceResult<T>>,
) -> SourceResult<T> {
    match tokio::time::timeout(limit, read).await {
        Ok(result) => result,
        Err(_) => Err(SourceError::ReadTimeout {
            context: context(),
            after: limit,
        }),
    }
}

/// Awaits `read`, a result set read row by row, failing with [`SourceError::ReadTimeout`] once
/// `received` (its count of rows) has not moved for `limit`: a stalled server is found within
/// 1.25 × `limit` without a timer per row.
pub async fn while_progressing<T>(
    limit: Duration,
    context: impl FnOnce() -> String,
    received: &AtomicU64,
    read: impl Future<Output = SourceResult<T>>,
) -> SourceResult<T> {
    let mut read = std::pin::pin!(read);
    let tick = (limit / 4).max(Duration::from_millis(1));
    let mut seen = received.load(Ordering::Relaxed);
    let mut since = Instant::now();
    loop {
        match tokio::time::timeout(tick, read.as_mut()).await {
            Ok(done) => return done,
            Err(_) => {
                let now = received.load(Ordering::Relaxed);
                if now != seen {
                    seen = now;
                    since = Instant::now();
                } else if since.elapsed() >= limit {
                    return Err(SourceError::ReadTimeout {
                        context: context(),
                        after: limit,
                    });
                }
            }
        }
    }
}

impl ConnectOptions {
    /// Parses `mysql://user:password@host:port[/db]`.
    pub fn from_url(url: &str) -> SourceResult<Self> {
        let opts =
            Opts::from_url(url).map_err(|e| SourceError::Config(format!("bad MySQL URL: {e}")))?;
        // The driver is built without TLS and would panic setting it up.
        if opts.ssl_opts().is_some() {
            return Err(SourceError::Config(
                "TLS to the source (require_ssl in the URL) is not supported: cdcfusion \
                 connects without TLS; remove require_ssl and reach the server over a private \
                 network or a tunnel"
                    .into(),
            ));
        }
        Ok(Self {
            opts,
            max_attempts: 8,
            read_timeout: DEFAULT_READ_TIMEOUT,
            history: 0,
        })
    }

    /// [`preflight`] within the read timeout. A server without full row metadata is warned
    /// about once per process, not once per connection a capture opens.
    pub async fn checked(&self, conn: &mut Conn) -> SourceResult<ServerInfo> {
        static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
        let user = self.user();
        let info = self
            .bounded(|| "checking the server".into(), preflight(conn, &user))
            .await?;
        if !info.full_row_metadata {
            let server = format!("{}:{}", self.opts.ip_or_hostname(), self.opts.tcp_port());
            let mut warned = WARNED.locked();
            if !warned.contains(&server) {
                warned.push(server.clone());
                tracing::warn!(
                    %server,
                    "binlog_row_metadata is not FULL: events written before a schema change can \
                     only be decoded while the stream keeps up; SET GLOBAL binlog_row_metadata = \
                     'FULL' to lift this"
                );
            }
        }
        Ok(info)
    }

    /// The schema of table `id`, read within the read timeout; it must exist.
    pub async fn table_schema(&self, conn: &mut Conn, id: &TableId) -> SourceResult<TableSchema> {
        let context = || format!("reading the schema of {id}");
        self.bounded(context, load_table_schema(conn, id))
            .await?
            .ok_or_else(|| SourceError::NoSuchTable(id.to_string()))
    }

    /// [`current_position`], read within the read timeout.
    pub async fn position(
        &self,
        conn: &mut Conn,
        flavor: Flavor,
    ) -> SourceResult<(BinlogCoord, GtidSet)> {
        let (at, gtids) = self
            .bounded(
                || "reading the binlog position".into(),
                current_position(conn, flavor),
            )
            .await?;
        Ok((at.in_history(self.history), gtids))
    }

    /// The server's `@@gtid_binlog_state` (MariaDB; see [`binlog_state`]), within the read
    /// timeout.
    pub async fn binlog_state(&self, conn: &mut Conn) -> SourceResult<BinlogState> {
        self.bounded(|| "reading the binlog state".into(), binlog_state(conn))
            .await
    }

    /// [`bounded`] by this server's read timeout.
    pub async fn bounded<T>(
        &self,
        context: impl FnOnce() -> String,
        read: impl Future<Output = SourceResult<T>>,
    ) -> SourceResult<T> {
        bounded(self.read_timeout, context, read).await
    }

    pub fn address(&self) -> String {
        format!("{}:{}", self.opts.ip_or_hostname(), self.opts.tcp_port())
    }

    pub fn user(&self) -> String {
        self.opts.user().unwrap_or_default().to_string()
    }

    /// Whether the server's address is this machine's loopback (`localhost`, `127.0.0.0/8`,
    /// `::1`). Read from the host itself: the driver's own test reads a URL's IP as a name.
    pub fn is_loopback(&self) -> bool {
        let host = self.opts.ip_or_hostname();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match host.parse::<std::net::IpAddr>() {
            Ok(ip) => ip.is_loopback(),
            Err(_) => host.eq_ignore_ascii_case("localhost"),
        }
    }

    /// Whether a connection may move to the server's Unix socket: the options prefer sockets
    /// (`mysql_async`'s default) and the address is this machine's loopback, so the path the
    /// server reports may be one on this machine.
    pub fn socket_allowed(&self) -> bool {
        self.opts.prefer_socket() && self.is_loopback()
    }

    /// The server's Unix socket, when a connection may move to it: [`Self::socket_allowed`],
    /// and the server listens on the URL's port itself (`@@port`). A server reached through a
    /// forwarded port (a container's, a tunnel's) reports a path of its own filesystem, which
    /// on this machine is missing or, worse, another server's.
    pub async fn local_socket(&self, conn: &mut Conn) -> Option<String> {
        if !self.socket_allowed() {
            return None;
        }
        let ask = conn.query_first::<(Option<String>, Option<u16>), _>("SELECT @@socket, @@port");
        match tokio::time::timeout(self.read_timeout, ask).await {
            Ok(Ok(Some((Some(path), Some(port)))))
                if !path.is_empty() && port == self.opts.tcp_port() =>
            {
                Some(path)
            }
            _ => None,
        }
    }

    /// The driver's options: the session settings, over TCP. The driver would move any
    /// loopback connection to the socket path the server reports; [`Self::connect`] does it
    /// itself, only where [`Self::local_socket`] says the path is the same server's.
    fn driver_opts(&self) -> Opts {
        OptsBuilder::from_opts(self.opts.clone())
            .init(SESSION_INIT.to_vec())
            .prefer_socket(false)
            .into()
    }

    /// A TCP connection `conn` moved to the server's Unix socket where that is the same
    /// server (see [`Self::local_socket`]); `conn` itself when not, or when the socket cannot
    /// be reached.
    async fn via_local_socket(&self, opts: &Opts, mut conn: Conn) -> Conn {
        let Some(path) = self.local_socket(&mut conn).await else {
            return conn;
        };
        let local = OptsBuilder::from_opts(opts.clone()).socket(Some(path));
        match tokio::time::timeout(self.read_timeout, Conn::new(local)).await {
            Ok(Ok(local)) => {
                let _ = conn.disconnect().await;
                local
            }
            _ => conn,
        }
    }

    /// Opens a connection, retrying transient failures with backoff. Every connection uses
    /// utf8mb4 and UTC, so text and `TIMESTAMP` values read by `SELECT` are exact, and moves
    /// to the server's Unix socket only where that is the same server (see
    /// [`Self::local_socket`]).
    pub async fn connect(&self) -> SourceResult<Conn> {
        let opts = self.driver_opts();
        let mut delay = INITIAL_BACKOFF;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let context = || format!("connecting to {}", self.address());
            let err = match tokio::time::timeout(self.read_timeout, Conn::new(opts.clone())).await {
                Ok(Ok(conn)) => return Ok(self.via_local_socket(&opts, conn).await),
                Ok(Err(e)) => SourceError::from_mysql(context(), e),
                // Accepted but never answered (a stalled link, a paused server).
                Err(_) => SourceError::ReadTimeout {
                    context: context(),
                    after: self.read_timeout,
                },
            };
            match err {
                SourceError::AccessDenied { message, .. } => {
                    return Err(SourceError::AccessDenied {
                        user: self.user(),
                        message,
                    })
                }
                err if err.is_transient() && attempt < self.max_attempts => {
                    tracing::warn!(attempt, error = %err, "connection failed, retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_BACKOFF);
                }
                err if err.is_transient() => {
                    let last_error = match err {
                        SourceError::Transient { source, .. } => source.to_string(),
                        other => other.to_string(),
                    };
                    return Err(SourceError::Unreachable {
                        address: self.address(),
                        attempts: attempt,
                        last_error,
                    });
                }
                other => return Err(other),
            }
        }
    }
}

/// What the start-up checks learned about the server.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    pub flavor: Flavor,
    pub version: String,
    pub server_id: u32,
    /// MySQL's `@@server_uuid` (MariaDB has none).
    pub server_uuid: Option<String>,
    /// Whether events carry CRC32 checksums (`binlog_checksum`).
    pub checksums: bool,
    /// Whether table maps carry column names (`binlog_row_metadata=FULL`).
    pub full_row_metadata: bool,
}

/// Runs a single-row query of server variables.
async fn variable(conn: &mut Conn, name: &str) -> SourceResult<Option<String>> {
    let sql = format!("SELECT @@GLOBAL.{name}");
    match conn.query_first::<Option<String>, _>(sql).await {
        Ok(v) => Ok(v.flatten()),
        // The server does not have it.
        Err(mysql_async::Error::Server(e))
            if e.code == crate::source::error::codes::UNKNOWN_SYSTEM_VARIABLE =>
        {
            Ok(None)
        }
        Err(e) => Err(SourceError::from_mysql(format!("reading @@{name}"), e)),
    }
}

/// Checks that the server can be captured exactly and that the user has the privileges.
pub async fn preflight(conn: &mut Conn, user: &str) -> SourceResult<ServerInfo> {
    let version = variable(conn, "version").await?.unwrap_or_default();
    let flavor = if version.to_ascii_lowercase().contains("mariadb") {
        Flavor::MariaDb
    } else {
        Flavor::MySql
    };
    let on = |v: &Option<String>| {
        v.as_deref()
            .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("ON"))
    };
    let log_bin = variable(conn, "log_bin").await?;
    if !on(&log_bin) {
        return Err(SourceError::BadSetting {
            setting: "log_bin",
            found: log_bin.unwrap_or_else(|| "OFF".into()),
            required: "ON",
            fix: "start the server with --log-bin (and a --server-id)".into(),
        });
    }
    let format = variable(conn, "binlog_format").await?.unwrap_or_default();
    if !format.eq_ignore_ascii_case("ROW") {
        return Err(SourceError::BadSetting {
            setting: "binlog_format",
            found: format,
            required: "ROW",
            fix: "SET GLOBAL binlog_format = 'ROW' (and in the server configuration)".into(),
        });
    }
    let image = variable(conn, "binlog_row_image")
        .await?
        .unwrap_or_default();
    if !image.eq_ignore_ascii_case("FULL") {
        return Err(SourceError::BadSetting {
            setting: "binlog_row_image",
            found: image,
            required: "FULL",
            fix: "SET GLOBAL binlog_row_image = 'FULL' (and in the server configuration)".into(),
        });
    }
    if let Some(compress) = variable(conn, "log_bin_compress").await? {
        if on(&Some(compress.clone())) {
            return Err(SourceError::BadSetting {
                setting: "log_bin_compress",
                found: compress,
                required: "OFF",
                fix: "SET GLOBAL log_bin_compress = OFF: compressed rows events cannot be captured exactly".into(),
            });
        }
    }
    // `binlog_row_value_options = PARTIAL_JSON` (MySQL) is fine: its JSON changes are applied
    // to the full before image as they are decoded.
    check_privileges(conn, user, flavor).await?;
    let server_id = variable(conn, "server_id")
        .await?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let server_uuid = variable(conn, "server_uuid").await?;
    let checksums = variable(conn, "binlog_checksum")
        .await?
        .is_some_and(|v| !v.eq_ignore_ascii_case("NONE"));
    let full_row_metadata = variable(conn, "binlog_row_metadata")
        .await?
        .is_some_and(|v| v.eq_ignore_ascii_case("FULL"));
    Ok(ServerInfo {
        flavor,
        version,
        server_id,
        server_uuid,
        checksums,
        full_row_metadata,
    })
}

impl ServerInfo {
    /// What tells this server from another behind the same address (a managed database's
    /// failover keeps its endpoint): MySQL's server UUID, else the server id, which every
    /// server of a replication topology has its own of.
    pub fn identity(&self) -> String {
        match &self.server_uuid {
            Some(uuid) => format!("server_uuid {uuid}"),
            None => format!("server_id {}", self.server_id),
        }
    }
}

/// Privileges capture needs, each with the names servers print for it in `SHOW GRANTS`.
const REQUIRED_PRIVILEGES: [(&str, &[&str]); 3] = [
    ("REPLICATION SLAVE", &["REPLICATION SLAVE"]),
    (
        "REPLICATION CLIENT",
        &["REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"],
    ),
    ("SELECT", &["SELECT"]),
];

async fn check_privileges(conn: &mut Conn, user: &str, flavor: Flavor) -> SourceResult<()> {
    let grants: Vec<String> = conn
        .query("SHOW GRANTS FOR CURRENT_USER()")
        .await
        .map_err(|e| SourceError::from_mysql("reading the user's grants", e))?;
    let global: Vec<String> = grants
        .iter()
        .filter(|g| g.contains(" ON *.* "))
        .map(|g| g.to_ascii_uppercase())
        .collect();
    let any_select = grants
        .iter()
        .any(|g| g.to_ascii_uppercase().contains("SELECT") || g.contains("ALL PRIVILEGES"));
    let has = |names: &[&str]| {
        global.iter().any(|g| {
            g.contains("ALL PRIVILEGES")
                || names.iter().any(|n| {
                    let head = g.split(" ON ").next().unwrap_or("");
                    head.split(',')
                        .any(|p| p.trim().trim_start_matches("GRANT ").trim() == *n)
                })
        })
    };
    // MySQL 8 lets a locking read (the snapshot's visibility barrier) run only with one of
    // these besides SELECT; MariaDB needs SELECT alone.
    let can_lock = flavor == Flavor::MariaDb
        || grants.iter().any(|g| {
            let head = g.to_ascii_uppercase();
            let head = head.split(" ON ").next().unwrap_or("").to_string();
            ["ALL PRIVILEGES", "LOCK TABLES", "UPDATE", "DELETE"]
                .iter()
                .any(|p| head.contains(p))
        });
    let mut missing: Vec<&'static str> = REQUIRED_PRIVILEGES
        .iter()
        .filter(|(name, aliases)| {
            if *name == "SELECT" {
                !any_select
            } else {
                !has(aliases)
            }
        })
        .map(|(name, _)| *name)
        .collect();
    if !can_lock {
        missing.push("LOCK TABLES");
    }
    if missing.is_empty() {
        return Ok(());
    }
    let client = match flavor {
        Flavor::MariaDb => "BINLOG MONITOR",
        Flavor::MySql => "REPLICATION CLIENT, LOCK TABLES",
    };
    let grant = format!("GRANT SELECT, REPLICATION SLAVE, {client} ON *.* TO '{user}'@'%'");
    Err(SourceError::MissingPrivileges {
        user: user.to_string(),
        missing,
        grant,
    })
}

/// MariaDB's `@@gtid_binlog_state`: the last GTID each server id logged in each domain, which
/// tells transactions of other servers in the binlog apart (see `change::errant`).
pub async fn binlog_state(conn: &mut Conn) -> SourceResult<BinlogState> {
    let text = conn
        .query_first::<String, _>("SELECT @@GLOBAL.gtid_binlog_state")
        .await
        .map_err(|e| SourceError::from_mysql("reading @@gtid_binlog_state", e))?
        .unwrap_or_default();
    text.parse()
        .map_err(|e| SourceError::NotSupported(format!("the server's GTID binlog state ({e})")))
}

/// The server's current binlog end and executed GTIDs: a watermark on a transaction boundary.
pub async fn current_position(
    conn: &mut Conn,
    flavor: Flavor,
) -> SourceResult<(BinlogCoord, GtidSet)> {
    let mut status: Option<mysql_async::Row> = None;
    // MySQL 8.4 removed SHOW MASTER STATUS; MariaDB and older MySQL have it.
    for sql in ["SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"] {
        match conn.query_first::<mysql_async::Row, _>(sql).await {
            Ok(row) => {
                status = row;
                break;
            }
            Err(mysql_async::Error::Server(e)) if e.code == 1064 => continue,
            Err(e) => return Err(SourceError::from_mysql("reading the binlog position", e)),
        }
    }
    let row = status.ok_or_else(|| SourceError::BadSetting {
        setting: "log_bin",
        found: "no binary log status".into(),
        required: "ON",
        fix: "start the server with --log-bin".into(),
    })?;
    let file: String = row.get(0).unwrap_or_default();
    let offset: u64 = row.get(1).unwrap_or_default();
    let gtids = match flavor {
        Flavor::MariaDb => conn
            .query_first::<String, _>("SELECT @@GLOBAL.gtid_binlog_pos")
            .await
            .map_err(|e| SourceError::from_mysql("reading @@gtid_binlog_pos", e))?
            .unwrap_or_default(),
        Flavor::MySql => row
            .get::<Option<String>, _>(4)
            .flatten()
            .unwrap_or_default(),
    };
    let gtids = gtids
        .parse()
        .map_err(|e| SourceError::NotSupported(format!("the server's GTID position ({e})")))?;
    Ok((BinlogCoord::new(file, offset), gtids))
}

/// MariaDB's GTID position at `at` of its binlog (`BINLOG_GTID_POS`): what a replica that
/// had applied everything before `at` would resume from. `None` when the server cannot tell
/// (the file is gone, or `at` is not on an event boundary).
pub async fn gtid_position_at(conn: &mut Conn, at: &BinlogCoord) -> SourceResult<Option<GtidSet>> {
    let text: Option<Option<String>> = conn
        .exec_first(
            "SELECT BINLOG_GTID_POS(?, ?)",
            (at.file.as_ref(), at.offset),
        )
        .await
        .map_err(|e| SourceError::from_mysql(format!("reading the GTID position at {at}"), e))?;
    match text.flatten() {
        None => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|e| {
            SourceError::NotSupported(format!("the server's GTID position at {at} ({e})"))
        }),
    }
}

/// Maps every collation id the server knows to its character set.
pub async fn collations(conn: &mut Conn) -> SourceResult<CollationMap> {
    let mut map = CollationMap::new();
    // MariaDB 10.10+ lists its UCA 14.0 collations (with their ids) only in the second table.
    for (table, required) in [
        ("COLLATIONS", true),
        ("COLLATION_CHARACTER_SET_APPLICABILITY", false),
    ] {
        let sql = format!("SELECT ID, CHARACTER_SET_NAME FROM information_schema.{table}");
        let rows: Vec<mysql_async::Row> = match conn.query(sql).await {
            Ok(rows) => rows,
            Err(_) if !required => continue,
            Err(e) => return Err(SourceError::from_mysql("reading collations", e)),
        };
        for row in rows {
            let id = row
                .get_opt::<Option<u64>, _>(0)
                .and_then(Result::ok)
                .flatten();
            let charset = row
                .get_opt::<Option<String>, _>(1)
                .and_then(Result::ok)
                .flatten();
            // Character sets we cannot decode are left out, so that a column using one fails
            // with a clear error instead of being decoded wrongly.
            if let (Some(id), Some(Ok(cs))) = (id, charset.map(|c| Charset::with_width(&c))) {
                map.entry(id as u16).or_insert(cs);
            }
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlstate::HasSqlState;
    use crate::sqlstate::SqlState;

    #[tokio::test]
    async fn a_read_without_an_answer_fails_transiently_after_the_limit() {
        let limit = Duration::from_millis(20);
        let pending = std::future::pending::<SourceResult<()>>();
        let e = bounded(limit, || "reading x".into(), pending)
            .await
            .unwrap_err();
        assert!(matches!(e, SourceError::ReadTimeout { after, .. } if after == limit));
        assert!(e.is_transient(), "{e}");
        assert_eq!(e.sqlstate(), SqlState::CONNECTION_FAILURE);
        assert!(e.to_string().contains("reading x"), "{e}");
        let answered = bounded(limit, || unreachable!(), async { Ok(7) }).await;
        assert_eq!(answered.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_server_that_never_greets_is_unreachable_after_the_attempts() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // Accepts and holds every connection, saying nothing.
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let url = format!("mysql://u:p@127.0.0.1:{port}?prefer_socket=false");
        let mut connect = ConnectOptions::from_url(&url).unwrap();
        connect.max_attempts = 2;
        connect.read_timeout = Duration::from_millis(100);
        let e = connect.connect().await.unwrap_err();
        silent.abort();
        assert!(
            matches!(e, SourceError::Unreachable { attempts: 2, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("no answer"), "{e}");
    }

    /// Where `conn` came from as the server sees it: `localhost` over the Unix socket,
    /// `127.0.0.1:<port>` over TCP.
    async fn client_host(conn: &mut Conn) -> String {
        conn.query_first::<String, _>(
            "SELECT host FROM information_schema.processlist WHERE id = CONNECTION_ID()",
        )
        .await
        .unwrap()
        .unwrap()
    }

    /// Through a forwarded port, as a container's published port is, the socket path the
    /// server reports is not taken for its own (its `@@port` is not the URL's): the connection
    /// stays on TCP. On the server's own port it moves to the socket.
    #[tokio::test]
    async fn a_forwarded_port_keeps_the_connection_on_tcp() {
        use crate::devserver::{DevServer, CDC_PASSWORD, CDC_USER};
        let server = DevServer::shared();
        let direct = ConnectOptions::from_url(&server.cdc_url()).unwrap();
        let mut conn = direct.connect().await.unwrap();
        assert_eq!(
            client_host(&mut conn).await,
            "localhost",
            "the server's own port"
        );

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = server.port();
        let forward = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut upstream = tokio::net::TcpStream::connect(("127.0.0.1", target))
                        .await
                        .unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        });
        let url = format!("mysql://{CDC_USER}:{CDC_PASSWORD}@127.0.0.1:{port}");
        let forwarded = ConnectOptions::from_url(&url).unwrap();
        let mut conn = forwarded.connect().await.unwrap();
        assert!(forwarded.local_socket(&mut conn).await.is_none());
        assert!(
            client_host(&mut conn).await.starts_with("127.0.0.1:"),
            "over the forwarded TCP port"
        );
        forward.abort();
    }

    /// A connection moves to the server's socket only for a loopback address, and never by
    /// the driver's own move (which would not check the port).
    #[test]
    fn a_connection_moves_to_a_socket_only_for_a_loopback_address() {
        let prefers = |url: &str| {
            let options = ConnectOptions::from_url(url).unwrap();
            assert!(!options.driver_opts().prefer_socket(), "{url}");
            options.socket_allowed()
        };
        assert!(prefers("mysql://u:p@127.0.0.1:3306"));
        assert!(prefers("mysql://u:p@localhost:3306"));
        assert!(!prefers("mysql://u:p@127.0.0.1:3306?prefer_socket=false"));
        assert!(!prefers("mysql://u:p@10.20.30.40:3306"));
        assert!(!prefers("mysql://u:p@db.example.com:3306"));
        assert!(prefers("mysql://u:p@[::1]:3306"));
    }

    /// A read whose rows keep coming runs past the limit; one that stops is cut off after it.
    #[tokio::test]
    async fn a_read_fails_only_when_its_rows_stop_coming() {
        // Rows every 20 ms for 0.6 s, well inside a limit of 0.4 s each, even on a loaded machine.
        let limit = Duration::from_millis(400);
        let received = AtomicU64::new(0);
        let steady = async {
            for _ in 0..30 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                received.fetch_add(1, Ordering::Relaxed);
            }
            Ok(30)
        };
        let started = Instant::now();
        let rows = while_progressing(limit, || "steady".into(), &received, steady).await;
        assert_eq!(rows.unwrap(), 30);
        assert!(started.elapsed() > limit);

        let received = AtomicU64::new(0);
        let stalls = async {
            received.fetch_add(1, Ordering::Relaxed);
            std::future::pending::<()>().await;
            Ok(0)
        };
        let started = Instant::now();
        let e = while_progressing(limit, || "stalled".into(), &received, stalls)
            .await
            .unwrap_err();
        assert!(
            matches!(e, SourceError::ReadTimeout { after, ref context } if after == limit && context == "stalled")
        );
        assert!(started.elapsed() >= limit);
    }
}
