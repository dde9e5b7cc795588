//! What `cdc.sinks` shows of a running sink.

use std::time::Instant;

use super::target::Committed;
use crate::sqlstate::SqlState;

/// Where a sink is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SinkState {
    /// Opening its target, or waiting for its source's first consistent version.
    #[default]
    Starting,
    Running,
    Paused,
    /// The last attempt failed transiently; the next one is scheduled.
    Retrying,
    /// Stopped by an error that needs a fix (see `error`).
    Failed,
}

impl SinkState {
    pub fn name(self) -> &'static str {
        match self {
            SinkState::Starting => "starting",
            SinkState::Running => "running",
            SinkState::Paused => "paused",
            SinkState::Retrying => "retrying",
            SinkState::Failed => "failed",
        }
    }
}

/// A sink's status, updated by its runner.
#[derive(Debug, Clone, Default)]
pub struct SinkStatus {
    pub state: SinkState,
    /// `changelog` or `upsert`, once the query is planned.
    pub mode: Option<&'static str>,
    /// The newest commit the target holds (as far as this engine knows).
    pub committed: Option<Committed>,
    /// Entries of each read table (by index) covered by the committed position: the rest of
    /// each table's changelog is the sink's lag.
    pub covered: Vec<(usize, usize)>,
    /// The sink needs every changelog entry after this `_position` (`None`: every entry):
    /// what it has neither committed nor found nothing to write for. Holds retention back.
    pub needs_after: Option<String>,
    /// Since when the sink has had entries it has not committed (`None`: caught up).
    pub behind_since: Option<Instant>,
    /// Rows and commits written by this engine since the sink started.
    pub rows: u64,
    pub commits: u64,
    /// Attempts that failed transiently since the sink started.
    pub retries: u64,
    /// The last error and its SQLSTATE.
    pub error: Option<String>,
    pub sqlstate: Option<SqlState>,
}
