//! [`SourceOptions`]: the options of a source as typed values, with their defaults, and how
//! they map onto a capture's [`CaptureOptions`].
//!
//! # Invariant
//! Outside `options`, a `SourceOptions` exists only as [`Default`] or as the option table read
//! it (its fields are private to `options`), so every value in it has passed the table's checks
//! once, at parse time; [`SourceOptions::to_capture_options`] therefore cannot fail and checks
//! nothing again. The one public field, `validate`, has no invalid value. Defaults are not
//! restated: they are read from [`CaptureOptions::new`] and [`SnapshotOptions`]'s `Default`,
//! so the SQL and the capture cannot drift apart.

use std::collections::BTreeMap;

use crate::capture::{CaptureOptions, SnapshotMode};
use crate::change::position::StartPosition;
use crate::change::schema::TableId;
#[cfg(doc)]
use crate::source::snapshot::incremental::SnapshotOptions;
use crate::sql::mysql_url::{join_hosts, MySqlUrl};
use crate::state::retention::RetainHistory;

/// Tables captured when `tables` is not given: every table outside the system databases
/// (which the capture's table filter always leaves out).
pub const DEFAULT_TABLES: &str = "*.*";

/// Most chunks read at once: each one holds a connection to the source and its rows in memory,
/// so this bounds both the load on the source and our memory.
pub const MAX_PARALLELISM: u64 = 64;

/// Longest `read_timeout_seconds`: a day; a read that waits longer has stalled.
pub const MAX_READ_TIMEOUT_SECONDS: u64 = 86_400;

/// Largest `server_id`: the snapshot's window reader registers as `server_id + 1`, which must
/// still be a valid (32-bit, non-zero) server id.
pub const MAX_SERVER_ID: u64 = u32::MAX as u64 - 1;

/// The options of a source, with their defaults; see the module docs and
/// `docs/sql-reference.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceOptions {
    /// `tables`: `db.table` patterns where `*` matches any run of characters.
    pub(super) tables: Vec<String>,
    /// `chunk_size`: target rows per snapshot chunk, at least 1.
    pub(super) chunk_size: usize,
    /// `parallelism`: snapshot chunks read at once, `1..=`[`MAX_PARALLELISM`].
    pub(super) parallelism: usize,
    /// `chunk_key`: the chunk key column per table, each table one `tables` selects; tables not
    /// listed use their first primary-key column. Ordered, so rendering is deterministic.
    pub(super) chunk_keys: BTreeMap<TableId, String>,
    /// `snapshot_mode` and `start_position` in one: only `StreamOnly` has a start, and without
    /// `start_position` it is [`StartPosition::Current`] (the end of the binlog at start).
    pub(super) mode: SnapshotMode,
    /// `server_id`: the replica id of the stream, `1..=`[`MAX_SERVER_ID`]; the snapshot's window
    /// reader uses `server_id + 1`.
    pub(super) server_id: u32,
    /// `validate`: whether `CREATE SOURCE` checks the server (connection, credentials,
    /// privileges, binlog settings, matching tables) before it answers. Public: `--init` files
    /// turn it off, and either value is valid.
    pub validate: bool,
    /// `visible_during_snapshot`: the initial snapshot's chunks are queryable as they finish.
    pub(super) visible_during_snapshot: bool,
    /// `read_timeout_seconds`: the longest any read from the server waits for an answer
    /// before it fails as transient and the part that read starts again.
    pub(super) read_timeout: std::time::Duration,
    /// `retain_history`: how much changelog history the source keeps (see
    /// `state::retention`).
    pub(super) retain_history: RetainHistory,
    /// `binlog_purge_warning_seconds`: warn when the binlog of the published position may be
    /// purged within this.
    pub(super) purge_warning: std::time::Duration,
}

/// Longest `binlog_purge_warning_seconds`: a year.
pub const MAX_PURGE_WARNING_SECONDS: u64 = 366 * 86_400;

impl Default for SourceOptions {
    fn default() -> Self {
        let capture = CaptureOptions::new(DEFAULT_TABLES, SnapshotMode::Initial);
        Self {
            tables: vec![DEFAULT_TABLES.to_string()],
            chunk_size: capture.snapshot.chunk_size,
            parallelism: capture.snapshot.parallelism,
            chunk_keys: BTreeMap::new(),
            mode: capture.mode,
            server_id: capture.server_id,
            validate: true,
            visible_during_snapshot: capture.visible_during_snapshot,
            read_timeout: capture.read_timeout,
            retain_history: capture.retain_history,
            purge_warning: capture.purge_warning,
        }
    }
}

impl SourceOptions {
    /// How much history the source keeps.
    pub fn retain_history(&self) -> RetainHistory {
        self.retain_history
    }

    /// The options with `changes` applied (what `ALTER SOURCE ... SET` gave).
    pub fn altered(&self, changes: &SourceChanges) -> SourceOptions {
        let mut out = self.clone();
        if let Some(r) = changes.retain_history {
            out.retain_history = r;
        }
        if let Some(w) = changes.purge_warning {
            out.purge_warning = w;
        }
        if let Some(id) = changes.server_id {
            out.server_id = id;
        }
        out
    }

    /// The capture's options: a mapping only, the values were checked when parsed.
    pub fn to_capture_options(&self) -> CaptureOptions {
        let mut capture = CaptureOptions::new(self.tables.join(", "), self.mode.clone());
        capture.server_id = self.server_id;
        capture.visible_during_snapshot = self.visible_during_snapshot;
        capture.read_timeout = self.read_timeout;
        capture.retain_history = self.retain_history;
        capture.purge_warning = self.purge_warning;
        capture.snapshot.chunk_size = self.chunk_size;
        capture.snapshot.parallelism = self.parallelism;
        capture.snapshot.chunk_keys = self.chunk_keys.clone().into_iter().collect();
        // server_id <= MAX_SERVER_ID (the table's range), so this cannot overflow.
        capture.snapshot.window_server_id = self.server_id + 1;
        capture
    }
}

/// What `ALTER SOURCE name SET (...)` changes on a running source; options left out keep
/// their value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceChanges {
    pub retain_history: Option<RetainHistory>,
    pub purge_warning: Option<std::time::Duration>,
    /// The replica id the source's binlog connection registers with from now on (its
    /// snapshot's window reader takes the next one).
    pub server_id: Option<u32>,
    /// How to reach the server from now on (`url`, `user`, `password`).
    pub connection: ConnectionChange,
    /// Where the source goes on at the server it reaches from now on, when not after its
    /// published position (`start_position`, or `RESNAPSHOT` after the `SET (...)`).
    pub start: Option<MoveStart>,
    /// `accept_errant_gtids = true`: a move by GTID goes on at a server that logged
    /// transactions below the source's position its old server never logged, leaving their
    /// changes out (see `change::errant`).
    pub accept_errant: bool,
}

/// Where a source goes on at another server when it does not go on after its GTIDs: a
/// server that logs no GTIDs has nothing else to carry a position across, and a replica
/// that lacks some of them can still be taken as it is by reading every table there again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveStart {
    /// `start_position = 'file:offset' | 'current' | '<GTID set>'`: a position of the new
    /// server, named by the user, at which the source's published state holds there.
    At(StartPosition),
    /// `ALTER SOURCE ... SET (...) RESNAPSHOT`: every table read again at the new server; the
    /// changelogs get only the differences (see `engine::resnapshot`).
    Resnapshot,
}

/// `ALTER SOURCE ... SET (url = '...', user = '...', password = '...')`: a new URL (TLS and
/// other parameters are in it), and a user or password that replace the URL's.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConnectionChange {
    pub url: Option<MySqlUrl>,
    pub user: Option<String>,
    /// Never printed: `Debug` here and `Display` of the statement mask it.
    pub password: Option<String>,
}

impl std::fmt::Debug for ConnectionChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionChange")
            .field("url", &self.url)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "****"))
            .finish()
    }
}

impl ConnectionChange {
    pub fn is_empty(&self) -> bool {
        self.url.is_none() && self.user.is_none() && self.password.is_none()
    }

    /// The URL `base` becomes: the new URL or `base`, with the user and password given put
    /// in its user information, encoded as a URL needs them.
    pub fn apply(&self, base: &MySqlUrl) -> Result<MySqlUrl, String> {
        let url = self.url.as_ref().unwrap_or(base);
        if self.user.is_none() && self.password.is_none() {
            return Ok(url.clone());
        }
        // Each server of a multi-server URL takes them, and the URL is put together again.
        let mut changed = Vec::with_capacity(url.host_urls().len());
        for host in url.host_urls() {
            changed.push(self.apply_to_one(host)?);
        }
        MySqlUrl::parse(&join_hosts(&changed))
    }

    /// [`Self::apply`]'s user and password put into a URL naming one server.
    fn apply_to_one(&self, url: &str) -> Result<String, String> {
        let mut parsed = url::Url::parse(url).map_err(|e| e.to_string())?;
        let refused = || "the URL has no host to give a user or password to".to_string();
        // The userinfo encode set leaves `%` as it is (so that encoded text passes through),
        // which a reader then decodes: a literal `%` is encoded first.
        let literal = |text: &str| text.replace('%', "%25");
        if let Some(user) = &self.user {
            parsed
                .set_username(&literal(user))
                .map_err(|()| refused())?;
        }
        if let Some(password) = &self.password {
            parsed
                .set_password(Some(&literal(password)))
                .map_err(|()| refused())?;
        }
        Ok(parsed.as_str().to_string())
    }
}
