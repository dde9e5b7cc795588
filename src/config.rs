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
//! | users | `[[users]]` (`name`, `password`, `method`) | `CDCFUSION_USER` + `CDCFUSION_PASSWORD` (one user) | — | none |
//! | TLS certificate and key (PEM) | `tls_cert`, `tls_key` | `CDCFUSION_TLS_CERT`, `CDCFUSION_TLS_KEY` | — | none |
//! | refuse connections without TLS | `tls_required` | — | — | `false` |
//! | connection limit | `max_connections` | — | — | 100 |
//! | idle sessions closed after (ms, 0 = never) | `idle_session_timeout_ms` | — | — | 0 |
//! | default statement timeout (ms, 0 = none) | `statement_timeout_ms` | — | — | 0 |
//! | time running queries get at shutdown (ms) | `shutdown_grace_ms` | — | — | 10000 |
//! | delay before a failed login is answered (ms) | `auth_failure_delay_ms` | — | — | 1000 |
//! | storage SQL may read and write (`CREATE EXTERNAL TABLE`, `COPY ... TO`) | `allowed_locations = [...]` | — | — | none |
//!
//! `trust` (no password) is never a default: it must be set as `auth` explicitly.
//! Unknown TOML keys are errors, so a misspelt setting is never silently ignored.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::engine::{AllowedLocations, BadLocation};

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
}

impl std::fmt::Debug for UserSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserSettings")
            .field("name", &self.name)
            .field("method", &self.method)
            .finish_non_exhaustive()
    }
}

/// Default connection limit.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100;
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
    Ok(FrontendSettings {
        auth,
        users,
        tls,
        tls_required,
        max_connections: file.max_connections.unwrap_or(defaults.max_connections),
        idle_session_timeout: millis(file.idle_session_timeout_ms),
        statement_timeout: millis(file.statement_timeout_ms),
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
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_changelog_budget_takes_sizes_and_names_a_bad_one() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("2 GB"), Some(2 << 30));
        assert_eq!(parse_size("1.5G"), None);
        assert_eq!(parse_size("12 parsecs"), None);
        let defaults = Settings::resolve(FlagSettings::default(), no_env).unwrap();
        assert_eq!(
            defaults.changelog_memory_budget,
            crate::durable::checkpoint::DEFAULT_CHANGELOG_MEMORY_BUDGET
        );
        let env = |k: &str| (k == "CDCFUSION_CHANGELOG_MEMORY_BUDGET").then(|| "64MiB".into());
        let set = Settings::resolve(FlagSettings::default(), env).unwrap();
        assert_eq!(set.changelog_memory_budget, 64 << 20);
        let bad = Settings::resolve(
            FlagSettings {
                changelog_memory_budget: Some("lots".into()),
                ..Default::default()
            },
            env,
        )
        .unwrap_err()
        .to_string();
        assert!(
            bad.contains("\"lots\"") && bad.contains("--changelog-memory-budget"),
            "{bad}"
        );
    }

    #[test]
    fn flags_beat_environment_beat_file_beat_defaults() {
        let dir = std::env::temp_dir().join(format!("cdcfusion-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(
            &file,
            "listen = '127.0.0.1:7000'\nstate_dir = '/var/lib/x'\ninit = ['a.sql']\n",
        )
        .unwrap();
        let defaults = Settings::resolve(FlagSettings::default(), no_env).unwrap();
        assert_eq!(defaults.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(defaults.state_dir, None);
        let from_file = Settings::resolve(
            FlagSettings {
                config: Some(file.clone()),
                init: vec!["b.sql".into()],
                ..Default::default()
            },
            no_env,
        )
        .unwrap();
        assert_eq!(from_file.listen.to_string(), "127.0.0.1:7000");
        assert_eq!(from_file.state_dir, Some(PathBuf::from("/var/lib/x")));
        assert_eq!(
            from_file.init,
            vec![PathBuf::from("a.sql"), PathBuf::from("b.sql")]
        );
        let env = |k: &str| (k == "CDCFUSION_LISTEN").then(|| "127.0.0.1:7001".to_string());
        let with_env = Settings::resolve(
            FlagSettings {
                config: Some(file.clone()),
                ..Default::default()
            },
            env,
        )
        .unwrap();
        assert_eq!(with_env.listen.to_string(), "127.0.0.1:7001");
        let with_flag = Settings::resolve(
            FlagSettings {
                config: Some(file.clone()),
                listen: Some("127.0.0.1:7002".into()),
                ..Default::default()
            },
            env,
        )
        .unwrap();
        assert_eq!(with_flag.listen.to_string(), "127.0.0.1:7002");
        std::fs::write(&file, "lisen = '127.0.0.1:1'\n").unwrap();
        let err = Settings::resolve(
            FlagSettings {
                config: Some(file.clone()),
                ..Default::default()
            },
            no_env,
        )
        .unwrap_err();
        assert!(err.to_string().contains("lisen"), "{err}");
        let err = Settings::resolve(
            FlagSettings {
                listen: Some("nowhere".into()),
                ..Default::default()
            },
            no_env,
        )
        .unwrap_err();
        assert!(err.to_string().contains("--listen"), "{err}");
        let interval =
            |k: &str| (k == "CDCFUSION_CHECKPOINT_INTERVAL").then(|| "250ms".to_string());
        assert_eq!(
            Settings::resolve(FlagSettings::default(), interval)
                .unwrap()
                .checkpoint_interval,
            Duration::from_millis(250)
        );
        let err = Settings::resolve(
            FlagSettings {
                checkpoint_interval: Some("soon".into()),
                ..Default::default()
            },
            no_env,
        )
        .unwrap_err();
        assert!(err.to_string().contains("--checkpoint-interval"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn frontend_settings_from_file_and_environment() {
        let dir = tempfile_dir("frontend");
        let file = dir.join("c.toml");
        std::fs::write(
            &file,
            "auth = 'md5'\nmax_connections = 3\nidle_session_timeout_ms = 500\n\
             [[users]]\nname = 'ann'\npassword = 'x'\n\
             [[users]]\nname = 'bob'\npassword = 'y'\nmethod = 'scram-sha-256'\n",
        )
        .unwrap();
        let flags = || FlagSettings {
            config: Some(file.clone()),
            ..Default::default()
        };
        let s = Settings::resolve(flags(), no_env).unwrap().frontend;
        assert_eq!(s.auth, AuthMethod::Md5);
        assert_eq!(s.max_connections, 3);
        assert_eq!(s.idle_session_timeout, Some(Duration::from_millis(500)));
        assert_eq!(s.statement_timeout, None);
        assert_eq!(s.users.len(), 2);
        assert_eq!(s.users[1].method, Some(AuthMethod::ScramSha256));
        // The environment's user joins them; the environment's method wins.
        let env = |k: &str| match k {
            "CDCFUSION_USER" => Some("ci".to_string()),
            "CDCFUSION_PASSWORD" => Some("secret".to_string()),
            "CDCFUSION_AUTH" => Some("trust".to_string()),
            _ => None,
        };
        let s = Settings::resolve(flags(), env).unwrap().frontend;
        assert_eq!(s.auth, AuthMethod::Trust);
        assert_eq!(s.users.last().unwrap().name, "ci");
        assert!(
            !format!("{:?}", s.users).contains("secret"),
            "passwords stay out of logs"
        );
        // A user without a password, or a bad method, is refused.
        let env = |k: &str| (k == "CDCFUSION_USER").then(|| "ci".to_string());
        assert!(Settings::resolve(flags(), env).is_err());
        let env = |k: &str| (k == "CDCFUSION_AUTH").then(|| "plain".to_string());
        let err = Settings::resolve(flags(), env).unwrap_err();
        assert!(err.to_string().contains("plain"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_metrics_endpoint_is_off_unless_an_address_is_given() {
        assert_eq!(
            Settings::resolve(FlagSettings::default(), no_env)
                .unwrap()
                .metrics_listen,
            None
        );
        let env = |k: &str| (k == "CDCFUSION_METRICS_LISTEN").then(|| "127.0.0.1:9464".to_string());
        let on = Settings::resolve(FlagSettings::default(), env).unwrap();
        assert_eq!(on.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
        let err = Settings::resolve(
            FlagSettings {
                metrics_listen: Some("9464".into()),
                ..Default::default()
            },
            no_env,
        )
        .unwrap_err();
        assert!(err.to_string().contains("--metrics-listen"), "{err}");
    }

    #[test]
    fn allowed_locations_from_file() {
        let dir = tempfile_dir("locations");
        let file = dir.join("c.toml");
        let flags = || FlagSettings {
            config: Some(file.clone()),
            ..Default::default()
        };
        std::fs::write(&file, "").unwrap();
        let none = Settings::resolve(flags(), no_env)
            .unwrap()
            .allowed_locations;
        assert!(none.is_empty() && !none.allows("/tmp/x.csv"));
        std::fs::write(
            &file,
            "allowed_locations = ['s3://bucket/prefix/', 'file:///data/exports/']\n",
        )
        .unwrap();
        let some = Settings::resolve(flags(), no_env)
            .unwrap()
            .allowed_locations;
        assert!(some.allows("/data/exports/x.csv") && some.allows("s3://bucket/prefix/y"));
        assert!(!some.allows("/data/x.csv"));
        std::fs::write(&file, "allowed_locations = ['exports/']\n").unwrap();
        let err = Settings::resolve(flags(), no_env).unwrap_err();
        assert!(err.to_string().contains("allowed_locations"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("cdcfusion-config-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
