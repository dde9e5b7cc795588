//! What a source's status shows (`cdc.sources`): the server it reads, how far it is, and the
//! faults it met, written by the source's tasks and read by the status tables.
//!
//! # Invariant
//! The status only describes; no decision reads it back. A source stops through its health
//! (`provider::health`), never by a status field, so a stale status can mislead no scan.

use std::sync::Arc;

use super::purge_watch::{bytes_between, PurgeWatch};
use crate::change::position::BinlogCoord;
use crate::change::schema::TableSchema;
use crate::source::binlog::files::BinlogFile;

/// What a source's status shows.
#[derive(Debug, Clone, Default)]
pub struct SourceStatus {
    /// The captured tables, as the catalog resolves them; set through
    /// [`SourceStatus::set_tables`].
    pub tables: Vec<Arc<TableSchema>>,
    /// Counts the times `tables` was set: plans kept for running again were made against
    /// one value of it (see `engine::reuse`).
    pub tables_changes: u64,
    pub server_version: String,
    pub flavor: String,
    pub error: Option<String>,
    /// Transactions applied since the hand-off.
    pub transactions: u64,
    /// Changelog entries (row changes) appended since the hand-off.
    pub changes: u64,
    /// Commit time (µs) of the last applied transaction.
    pub last_commit_ts_micros: Option<i64>,
    /// The server's own binlog end, polled every [`SERVER_POLL`].
    pub server_position: Option<BinlogCoord>,
    /// The server's binlog files, oldest first, polled with its end.
    pub binlogs: Vec<BinlogFile>,
    /// Where the published position stands against the server's purges, as of the last poll.
    pub purge: PurgeWatch,
    /// Position of the newest checkpoint (durable engines): what a restart returns to.
    pub durable_position: Option<BinlogCoord>,
    /// The end of the hand-off: from here on the state is the source's at one position.
    pub consistent_from: Option<BinlogCoord>,
    /// Why the last checkpoint failed, until one succeeds.
    pub checkpoint_error: Option<String>,
    /// Checkpoints that succeeded (written, or with nothing new to write) since the start.
    pub checkpoints: u64,
    /// Checkpoints that failed since the start.
    pub checkpoint_failures: u64,
    /// When the last checkpoint succeeded (µs since the epoch) and how long it took.
    pub last_checkpoint_micros: Option<i64>,
    pub last_checkpoint_seconds: Option<f64>,
    /// Restarts after transient failures (`engine::retry`).
    pub retries: u64,
    /// Waiting to restart after a transient failure.
    pub retrying: bool,
    /// Waiting to write a checkpoint again after a transient store failure.
    pub checkpoint_retrying: bool,
    /// The last transient failure, kept after the source recovered from it.
    pub last_error: Option<crate::provider::health::Fault>,
}

/// How often the server's binlog end is read for lag.
pub const SERVER_POLL: std::time::Duration = std::time::Duration::from_secs(1);

impl SourceStatus {
    /// Sets the captured tables; plans made against the previous ones are no longer reused.
    pub fn set_tables(&mut self, tables: Vec<Arc<TableSchema>>) {
        self.tables = tables;
        self.tables_changes += 1;
    }

    /// Bytes of binlog between the published position and the server's end, through the
    /// sizes of the files between them; `None` when one of those files is not listed.
    pub fn lag_bytes(&self, published: Option<&BinlogCoord>) -> Option<u64> {
        let (p, s) = (published?, self.server_position.as_ref()?);
        bytes_between(&self.binlogs, p, s)
    }

    /// Seconds between the last applied commit and now; 0 when nothing is pending.
    pub fn lag_seconds(&self, published: Option<&BinlogCoord>) -> Option<f64> {
        if self.lag_bytes(published) == Some(0) {
            return Some(0.0);
        }
        let last = self.last_commit_ts_micros?;
        Some((now_micros() - last).max(0) as f64 / 1e6)
    }
}

/// `at` in microseconds since the epoch (0 before it).
pub fn micros(at: std::time::SystemTime) -> i64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Now, in microseconds since the epoch.
pub fn now_micros() -> i64 {
    micros(std::time::SystemTime::now())
}
