//! Settings of `cdcfusion serve`: built-in defaults, then a TOML file, then environment
//! variables, then command-line flags, each overriding the one before.
//!
//! | setting | TOML key | environment | flag | default |
//! |---|---|---|---|---|
//! | address the PostgreSQL front end listens on | `listen` | `CDCFUSION_LISTEN` | `--listen` | `127.0.0.1:5433` |
//! | address of the Prometheus endpoint (`GET /metrics`) | `metrics_listen` | `CDCFUSION_METRICS_LISTEN` | `--metrics-listen` | off |
//! | directory of the engine's state | `state_dir` | `CDCFUSION_STATE_DIR` | `--state-dir` | none |
//! | SQL files run at start, in order | `init = [...]` | — | `--init` (repeatable) | none |
//! | time between checkpoints (with a state directory) | `checkpoint_interval` | `CDCFUSION_CHECKPOINT_INTERVAL` | `--checkpoint-interval` | `10s` |
//! | changes since a table's last state snapshot before its rows are written again (at least a quarter of its rows) | `state_snapshot_min_changes` | `CDCFUSION_STATE_SNAPSHOT_MIN_CHANGES` | `--state-snapshot-min-changes` | `100000` |
//! | memory for each source's changelogs (older entries are read back from the state directory; `0` = no limit) | `changelog_memory_budget` | `CDCFUSION_CHANGELOG_MEMORY_BUDGET` | `--changelog-memory-budget` | `256MiB` |
//! | default password method | `auth` | `CDCFUSION_AUTH` | — | `scram-sha-256` |
//! | users | `[[users]]` (`name`, `password`, `method`, `role`) | `CDCFUSION_USER` + `CDCFUSION_PASSWORD` (one user, role `admin`) | — | none |
//! | TLS certificate and key (PEM) | `tls_cert`, `tls_key` | `CDCFUSION_TLS_CERT`, `CDCFUSION_TLS_KEY` | — | none |
//! | refuse connections without TLS | `tls_required` | — | — | `false` |
//! | connection limit | `max_connections` | — | — | 100 |
//! | idle sessions closed after (ms, 0 = never) | `idle_session_timeout_ms` | — | — | 0 |
//! | default statement timeout (ms, 0 = none) | `statement_timeout_ms` | — | — | 0 |
//! | memory one query may hold (sorts, joins, aggregates; `0` = no limit) | `query_memory_limit` | — | — | `1GiB` |
//! | bytes of rows one statement may send (`0` = no limit) | `max_result_size` | — | — | `0` |
//! | bytes of one statement's text, refused with `54000` before it is read (`0` = no limit) | `max_statement_size` | — | — | `1MiB` |
//! | time running queries get at shutdown (ms) | `shutdown_grace_ms` | — | — | 10000 |
//! | delay before a failed login is answered (ms) | `auth_failure_delay_ms` | — | — | 1000 |
//! | storage SQL may read and write (`CREATE EXTERNAL TABLE`, `COPY ... TO`) | `allowed_locations = [...]` | — | — | none |
//!
//! `trust` (no password) is never a default: it must be set as `auth` explicitly. A user's
//! `role` is `admin` (may also create, alter and drop sources and sinks, and write files) or
//! `reader` (queries); `[[users]]` without a `role` are readers, so a forgotten setting never
//! grants more. Under `trust` with no users configured here, every login that is not a user
//! (SQL can create more, see `frontend`) is an `admin`. SQL never changes the users of the
//! settings.
//! Unknown TOML keys are errors, so a misspelt setting is never silently ignored.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::engine::{AllowedLocations, BadLocation};
/// What a user may do: the roles SQL grants (`GRANT admin TO ...`) and `role` in `[[users]]` names.
pub use crate::sql::Role;

/// The default listen address: not 5432, which a local PostgreSQL usually holds.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:5433";

/// Errors in the settings.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid listen address {value:?} (from {origin}): expected host:port, e.g. {DEFAULT_LISTEN}")]
    Listen { value: String, origin: &'static str },
    #[error(
        "invalid state_snapshot_min_changes {value:?} (from {origin}): expected a whole number"
    )]
    MinChanges { value: String, origin: &'static str },
    #[error("invalid changelog memory budget {value:?} (from {origin}): expected bytes with an optional unit, e.g. 512MiB or 2GiB (0: no limit)")]
    Budget { value: String, origin: &'static str },
    #[error("invalid checkpoint interval (from {origin}): {message}")]
    Interval {
        message: String,
        origin: &'static str,
    },
    #[error("invalid auth method {value:?} (from {origin}): expected scram-sha-256, md5 or trust")]
    AuthMethod { value: String, origin: &'static str },
    #[error("invalid {key} {value:?}: expected bytes with an optional unit, e.g. 512MiB or 2GiB (0: no limit)")]
    Size { key: &'static str, value: String },
    #[error("{0} is set without {1}")]
    Incomplete(&'static str, &'static str),
    #[error("invalid allowed_locations: {0}")]
    AllowedLocation(#[from] BadLocation),
}

/// Parses `500ms`, `10s` (or `10`) and `2m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("bad duration unit in {s:?} (use ms, s or m)")),
    }
}

/// Parses a size: bytes, or a number with `KiB`, `MiB`, `GiB` (or `KB`, `MB`, `GB`, also
/// powers of 1024, as memory sizes are usually meant).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().ok()?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// How a user proves who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum AuthMethod {
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    #[serde(rename = "md5")]
    Md5,
    /// No password at all; only when configured explicitly.
    #[serde(rename = "trust")]
    Trust,
}

impl std::str::FromStr for AuthMethod {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        match s.to_ascii_lowercase().as_str() {
            "scram-sha-256" => Ok(Self::ScramSha256),
            "md5" => Ok(Self::Md5),
            "trust" => Ok(Self::Trust),
            _ => Err(()),
        }
    }
}

/// A user of the PostgreSQL front end.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSettings {
    pub name: String,
    pub password: String,
    /// Overrides the default `auth` method for this user.
    pub method: Option<AuthMethod>,
    /// `reader` when not given.
    pub role: Option<Role>,
}

impl std::fmt::Debug for UserSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserSettings")
            .field("name", &self.name)
            .field("method", &self.method)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// Default connection limit.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100;
/// Default memory one query may hold.
pub const DEFAULT_QUERY_MEMORY_LIMIT: u64 = 1 << 30;

/// Default `max_statement_size`: 1 MiB, far beyond what people and tools write, and read in
/// milliseconds.
pub const DEFAULT_MAX_STATEMENT_SIZE: u64 = 1 << 20;
/// Default time running queries get to finish at shutdown before they are cancelled.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Default delay before a failed login is answered, which slows password guessing down.
pub const DEFAULT_AUTH_FAILURE_DELAY: Duration = Duration::from_secs(1);

/// Settings of the PostgreSQL front end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontendSettings {
    pub auth: AuthMethod,
    pub users: Vec<UserSettings>,
    /// PEM certificate chain and private key; TLS is offered when both are set.
    pub tls: Option<(PathBuf, PathBuf)>,
    pub tls_required: bool,
    pub max_connections: usize,
    pub idle_session_timeout: Option<Duration>,
    pub statement_timeout: Option<Duration>,
    /// Bytes; 0 = no limit.
    pub query_memory_limit: u64,
    /// Bytes of rows one statement may send; 0 = no limit.
    pub max_result_size: u64,
    /// Bytes of one statement's text (a simple query's whole message); 0 = no limit.
    pub max_statement_size: u64,
    pub shutdown_grace: Duration,
    pub auth_failure_delay: Duration,
}

impl Default for FrontendSettings {
    fn default() -> Self {
        Self {
            auth: AuthMethod::ScramSha256,
            users: Vec::new(),
            tls: None,
            tls_required: false,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_session_timeout: None,
            statement_timeout: None,
            query_memory_limit: DEFAULT_QUERY_MEMORY_LIMIT,
            max_result_size: 0,
            max_statement_size: DEFAULT_MAX_STATEMENT_SIZE,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            auth_failure_delay: DEFAULT_AUTH_FAILURE_DELAY,
        }
    }
}

/// What a TOML file may set.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    pub listen: Option<String>,
    pub metrics_listen: Option<String>,
    pub state_dir: Option<PathBuf>,
    #[serde(default)]
    pub init: Vec<PathBuf>,
    pub checkpoint_interval: Option<String>,
    pub state_snapshot_min_changes: Option<u64>,
    pub changelog_memory_budget: Option<String>,
    pub auth: Option<String>,
    #[serde(default)]
    pub users: Vec<UserSettings>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_required: Option<bool>,
    pub max_connections: Option<usize>,
    pub idle_session_timeout_ms: Option<u64>,
    pub statement_timeout_ms: Option<u64>,
    pub query_memory_limit: Option<String>,
    pub max_result_size: Option<String>,
    pub max_statement_size: Option<String>,
    pub shutdown_grace_ms: Option<u64>,
    pub auth_failure_delay_ms: Option<u64>,
    /// URL prefixes (or absolute paths) SQL may read and write.
    #[serde(default)]
    pub allowed_locations: Vec<String>,
}

/// What the command line set (unset flags are `None` / empty).
#[derive(Debug, Clone, Default)]
pub struct FlagSettings {
    pub listen: Option<String>,
    pub metrics_listen: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub init: Vec<PathBuf>,
    pub config: Option<PathBuf>,
    pub checkpoint_interval: Option<String>,
    pub state_snapshot_min_changes: Option<u64>,
    pub changelog_memory_budget: Option<String>,
}

/// The resolved settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub listen: SocketAddr,
    /// Where the Prometheus endpoint listens; off when `None`.
    pub metrics_listen: Option<SocketAddr>,
    pub state_dir: Option<PathBuf>,
    /// Init files: the config file's, then the command line's.
    pub init: Vec<PathBuf>,
    pub checkpoint_interval: Duration,
    pub state_snapshot_min_changes: u64,
    /// Bytes; 0 = no limit.
    pub changelog_memory_budget: u64,
    pub frontend: FrontendSettings,
    /// Where SQL may read and write files; nowhere by default.
    pub allowed_locations: AllowedLocations,
}

impl Settings {
    /// Resolves flags over environment over file over defaults; `env` looks a variable up.
    pub fn resolve(
        flags: FlagSettings,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let file = match &flags.config {
            Some(path) => read_file(path)?,
            None => FileSettings::default(),
        };
        let frontend = frontend_settings(file.clone(), &env)?;
        let (listen, origin) = if let Some(l) = flags.listen {
            (l, "--listen")
        } else if let Some(l) = env("CDCFUSION_LISTEN") {
            (l, "CDCFUSION_LISTEN")
        } else if let Some(l) = file.listen {
            (l, "the config file")
        } else {
            (DEFAULT_LISTEN.to_string(), "the default")
        };
        let listen = listen.parse().map_err(|_| ConfigError::Listen {
            value: listen.clone(),
            origin,
        })?;
        let metrics = if let Some(l) = flags.metrics_listen {
            Some((l, "--metrics-listen"))
        } else if let Some(l) = env("CDCFUSION_METRICS_LISTEN") {
            Some((l, "CDCFUSION_METRICS_LISTEN"))
        } else {
            file.metrics_listen.map(|l| (l, "the config file"))
        };
        let metrics_listen = match metrics {
            Some((value, origin)) => Some(
                value
                    .parse()
                    .map_err(|_| ConfigError::Listen { value, origin })?,
            ),
            None => None,
        };
        let state_dir = flags
            .state_dir
            .or_else(|| env("CDCFUSION_STATE_DIR").map(PathBuf::from))
            .or(file.state_dir);
        let allowed_locations = AllowedLocations::parse(&file.allowed_locations)?;
        let mut init = file.init;
        init.extend(flags.init);
        let (interval, origin) = if let Some(i) = flags.checkpoint_interval {
            (Some(i), "--checkpoint-interval")
        } else if let Some(i) = env("CDCFUSION_CHECKPOINT_INTERVAL") {
            (Some(i), "CDCFUSION_CHECKPOINT_INTERVAL")
        } else {
            (file.checkpoint_interval, "the config file")
        };
        let checkpoint_interval = match interval {
            Some(i) => {
                parse_duration(&i).map_err(|message| ConfigError::Interval { message, origin })?
            }
            None => crate::durable::checkpoint::DEFAULT_CHECKPOINT_INTERVAL,
        };
        let state_snapshot_min_changes = match (
            flags.state_snapshot_min_changes,
            env("CDCFUSION_STATE_SNAPSHOT_MIN_CHANGES"),
        ) {
            (Some(n), _) => n,
            (None, Some(v)) => v.trim().parse().map_err(|_| ConfigError::MinChanges {
                value: v.clone(),
                origin: "CDCFUSION_STATE_SNAPSHOT_MIN_CHANGES",
            })?,
            (None, None) => file
                .state_snapshot_min_changes
                .unwrap_or(crate::durable::checkpoint::DEFAULT_STATE_SNAPSHOT_MIN_CHANGES),
        };
        let (budget, origin) = if let Some(b) = flags.changelog_memory_budget {
            (Some(b), "--changelog-memory-budget")
        } else if let Some(b) = env("CDCFUSION_CHANGELOG_MEMORY_BUDGET") {
            (Some(b), "CDCFUSION_CHANGELOG_MEMORY_BUDGET")
        } else {
            (file.changelog_memory_budget, "the config file")
        };
        let changelog_memory_budget = match budget {
            Some(value) => parse_size(&value).ok_or(ConfigError::Budget { value, origin })?,
            None => crate::durable::checkpoint::DEFAULT_CHANGELOG_MEMORY_BUDGET,
        };
        Ok(Self {
            listen,
            metrics_listen,
            state_dir,
            init,
            checkpoint_interval,
            state_snapshot_min_changes,
            changelog_memory_budget,
            frontend,
            allowed_locations,
        })
    }
}

/// A duration in milliseconds where 0 means "none".
fn millis(ms: Option<u64>) -> Option<Duration> {
    ms.filter(|&ms| ms > 0).map(Duration::from_millis)
}

fn frontend_settings(
    file: FileSettings,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<FrontendSettings, ConfigError> {
    let defaults = FrontendSettings::default();
    let (auth, origin) = match (env("CDCFUSION_AUTH"), file.auth) {
        (Some(a), _) => (Some(a), "CDCFUSION_AUTH"),
        (None, a) => (a, "the config file"),
    };
    let auth = match auth {
        Some(value) => value
            .parse()
            .map_err(|()| ConfigError::AuthMethod { value, origin })?,
        None => defaults.auth,
    };
    let mut users = file.users;
    match (env("CDCFUSION_USER"), env("CDCFUSION_PASSWORD")) {
        (Some(name), Some(password)) => {
            users.retain(|u| u.name != name);
            users.push(UserSettings {
                name,
                password,
                method: None,
                // The one user of a deployment configured by its environment runs it.
                role: Some(Role::Admin),
            });
        }
        (Some(_), None) => {
            return Err(ConfigError::Incomplete(
                "CDCFUSION_USER",
                "CDCFUSION_PASSWORD",
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::Incomplete(
                "CDCFUSION_PASSWORD",
                "CDCFUSION_USER",
            ))
        }
        (None, None) => {}
    }
    let cert = env("CDCFUSION_TLS_CERT")
        .map(PathBuf::from)
        .or(file.tls_cert);
    let key = env("CDCFUSION_TLS_KEY").map(PathBuf::from).or(file.tls_key);
    let tls = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (Some(_), None) => return Err(ConfigError::Incomplete("tls_cert", "tls_key")),
        (None, Some(_)) => return Err(ConfigError::Incomplete("tls_key", "tls_cert")),
        (None, None) => None,
    };
    let tls_required = file.tls_required.unwrap_or(false);
    if tls_required && tls.is_none() {
        return Err(ConfigError::Incomplete(
            "tls_required",
            "tls_cert and tls_key",
        ));
    }
    let size = |key: &'static str, value: Option<String>, default: u64| match value {
        Some(value) => parse_size(&value).ok_or(ConfigError::Size { key, value }),
        None => Ok(default),
    };
    let query_memory_limit = size(
        "query_memory_limit",
        file.query_memory_limit,
        defaults.query_memory_limit,
    )?;
    let max_result_size = size(
        "max_result_size",
        file.max_result_size,
        defaults.max_result_size,
    )?;
    let max_statement_size = size(
        "max_statement_size",
        file.max_statement_size,
        defaults.max_statement_size,
    )?;
    Ok(FrontendSettings {
        auth,
        users,
        tls,
        tls_required,
        max_connections: file.max_connections.unwrap_or(defaults.max_connections),
        idle_session_timeout: millis(file.idle_session_timeout_ms),
        statement_timeout: millis(file.statement_timeout_ms),
        query_memory_limit,
        max_result_size,
        max_statement_size,
        shutdown_grace: file
            .shutdown_grace_ms
            .map_or(defaults.shutdown_grace, Duration::from_millis),
        auth_failure_delay: file
            .auth_failure_delay_ms
            .map_or(defaults.auth_failure_delay, Duration::from_millis),
    })
}

fn read_file(path: &Path) -> Result<FileSettings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests;
