//! What a `CREATE SINK` asks for, as typed values: the target and the options. The SQL layer
//! reads them from the statement's text and writes them back; the runner and the targets take
//! them as they are.
//!
//! # Invariant
//! A value of these types is valid as written: a URL has a scheme its target takes, a start
//! position parses, an interval is positive. Whether the target can be reached, and whether
//! the query suits the mode, is checked when the sink starts.

use std::fmt;
use std::time::Duration;

use super::target::SinkMode;

/// Where a sink writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// A Delta table at a directory (`file:///dir`, a plain path, or `s3://bucket/prefix`).
    Delta { url: String },
    /// Parquet files under a directory (`file:///dir`, a plain path, or `s3://bucket/prefix`).
    Parquet { url: String },
    /// A PostgreSQL table (`postgresql://user@host/db`, table `schema.table`).
    Postgres { url: String, table: String },
}

impl TargetSpec {
    /// The target's kind as the statement spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            TargetSpec::Delta { .. } => "DELTA",
            TargetSpec::Parquet { .. } => "PARQUET",
            TargetSpec::Postgres { .. } => "POSTGRES",
        }
    }
}

/// Where a new sink starts reading the changelog (a sink whose target already holds its
/// commits resumes after them instead).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StartAt {
    /// Every retained entry: the snapshot's `r` entries, then every change.
    #[default]
    Snapshot,
    /// Only entries published after the sink starts.
    Now,
    /// Entries strictly after this `_position`.
    After(String),
}

impl fmt::Display for StartAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartAt::Snapshot => f.write_str("snapshot"),
            StartAt::Now => f.write_str("now"),
            StartAt::After(p) => f.write_str(p),
        }
    }
}

/// What a sink does when a table it reads changes its columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchemaChanges {
    /// New columns are added to the target (nullable) in the commit that first carries them;
    /// dropped ones are written as NULL. A rename or a type change stops the sink.
    #[default]
    Follow,
    /// Any change of the query's columns stops the sink.
    Stop,
}

impl SchemaChanges {
    pub fn name(self) -> &'static str {
        match self {
            SchemaChanges::Follow => "follow",
            SchemaChanges::Stop => "stop",
        }
    }
}

/// The `WITH (...)` options of a sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkOptions {
    /// `None`: from the query (a changelog is appended, a current table is upserted).
    pub mode: Option<SinkMode>,
    pub start: StartAt,
    pub commit_interval: Duration,
    pub schema_changes: SchemaChanges,
    /// About how many changelog entries one commit reads at most (more only to end the
    /// source transaction in progress): what bounds a commit's size and memory.
    pub max_commit_entries: usize,
}

/// The default time between two commits.
pub const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_secs(5);

/// The default bound on the entries one commit reads.
pub const DEFAULT_MAX_COMMIT_ENTRIES: usize = 100_000;

impl Default for SinkOptions {
    fn default() -> Self {
        Self {
            mode: None,
            start: StartAt::default(),
            commit_interval: DEFAULT_COMMIT_INTERVAL,
            schema_changes: SchemaChanges::default(),
            max_commit_entries: DEFAULT_MAX_COMMIT_ENTRIES,
        }
    }
}

/// Durations as the options write them: `500ms`, `5s`, `2m`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Reads what [`format_duration`] writes (a whole number and `ms`, `s` or `m`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("expected a duration such as '5s' or '500ms', found {text:?}"))?;
    let d = match unit.trim() {
        "ms" => Duration::from_millis(n),
        "s" | "" => Duration::from_secs(n),
        "m" | "min" => Duration::from_secs(n * 60),
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ms, s or m)"
            ))
        }
    };
    if d.is_zero() {
        return Err(format!("{text:?} is not a positive duration"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_back_what_they_write() {
        for text in ["5s", "250ms", "2m", "1500ms"] {
            let d = parse_duration(text).unwrap();
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d, "{text}");
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5 hours").is_err());
        assert!(parse_duration("fast").is_err());
    }
}
