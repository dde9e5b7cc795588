//! Settings of `cdcfusion serve`: built-in defaults, then a TOML file, then environment
//! variables, then command-line flags, each overriding the one before.
//!
//! | setting | TOML key | environment | flag | default |
//! |---|---|---|---|---|
//! | address the PostgreSQL front end listens on | `listen` | `CDCFUSION_LISTEN` | `--listen` | `127.0.0.1:5433` |
//! | directory of the engine's state | `state_dir` | `CDCFUSION_STATE_DIR` | `--state-dir` | none |
//! | SQL files run at start, in order | `init = [...]` | — | `--init` (repeatable) | none |
//! | time between checkpoints (with a state directory) | `checkpoint_interval` | `CDCFUSION_CHECKPOINT_INTERVAL` | `--checkpoint-interval` | `10s` |
//! | changes since a table's last state snapshot before its rows are written again (at least a quarter of its rows) | `state_snapshot_min_changes` | `CDCFUSION_STATE_SNAPSHOT_MIN_CHANGES` | `--state-snapshot-min-changes` | `100000` |
//!
//! Unknown TOML keys are errors, so a misspelt setting is never silently ignored.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

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
    #[error("invalid checkpoint interval (from {origin}): {message}")]
    Interval {
        message: String,
        origin: &'static str,
    },
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

/// What a TOML file may set.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    pub listen: Option<String>,
    pub state_dir: Option<PathBuf>,
    #[serde(default)]
    pub init: Vec<PathBuf>,
    pub checkpoint_interval: Option<String>,
    pub state_snapshot_min_changes: Option<u64>,
}

/// What the command line set (unset flags are `None` / empty).
#[derive(Debug, Clone, Default)]
pub struct FlagSettings {
    pub listen: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub init: Vec<PathBuf>,
    pub config: Option<PathBuf>,
    pub checkpoint_interval: Option<String>,
    pub state_snapshot_min_changes: Option<u64>,
}

/// The resolved settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub listen: SocketAddr,
    pub state_dir: Option<PathBuf>,
    /// Init files: the config file's, then the command line's.
    pub init: Vec<PathBuf>,
    pub checkpoint_interval: Duration,
    pub state_snapshot_min_changes: u64,
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
        let state_dir = flags
            .state_dir
            .or_else(|| env("CDCFUSION_STATE_DIR").map(PathBuf::from))
            .or(file.state_dir);
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
        Ok(Self {
            listen,
            state_dir,
            init,
            checkpoint_interval,
            state_snapshot_min_changes,
        })
    }
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
}
