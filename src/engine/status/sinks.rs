//! `cdc.sinks` (and `SHOW SINKS`): what each sink reads and writes, its state, its committed
//! position and its lag.
//!
//! # Invariant
//! A sink's row shows what its target holds as far as this engine knows (the marker of its
//! last commit, or the one read back when it started), never a position it has only read: lag
//! is what the source has published beyond it.

use std::sync::Arc;

use super::columns::{count, number, text, Declared, Scan};
use crate::capture::version::SourceVersion;
use crate::change::position::ChangePosition;
use crate::engine::sinks::RunningSink;
use crate::sinks::SinkStatus;

/// What a row of `cdc.sinks` is read from.
pub(super) struct Row {
    sink: Arc<RunningSink>,
    status: SinkStatus,
    /// The latest version its source published (`None`: the source is gone).
    published: Option<Arc<SourceVersion>>,
}

fn rows(scan: &Scan<'_>) -> Vec<Row> {
    scan.sinks()
        .into_iter()
        .map(|sink| Row {
            status: sink.status(),
            published: scan.source(&sink.source).map(|s| s.published.load_full()),
            sink,
        })
        .collect()
}

impl Row {
    /// Changelog entries its source has published beyond what the sink covered.
    fn lag_entries(&self) -> Option<u64> {
        self.published.as_ref().map(|v| {
            self.status
                .covered
                .iter()
                .map(|&(table, done)| {
                    v.changelogs
                        .get(table)
                        .map_or(0, |l| l.num_rows().saturating_sub(done) as u64)
                })
                .sum()
        })
    }

    /// Binlog bytes between its commit and its source's published position (same file only).
    fn lag_bytes(&self) -> Option<u64> {
        let committed = self
            .status
            .committed
            .as_ref()
            .and_then(|c| ChangePosition::coord_of_text(&c.position))?;
        let published = self.published.as_ref()?.position.clone()?;
        (committed.file == published.file && committed.history() == published.history())
            .then(|| published.offset.saturating_sub(committed.offset))
    }
}

pub(super) static TABLE: Declared<Row> = Declared {
    name: "sinks",
    rows,
    columns: &[
        text("name", |r| Some(r.sink.name.clone())),
        text("source", |r| Some(r.sink.source.clone())),
        text("target", |r| Some(r.sink.target.clone())),
        text("mode", |r| r.status.mode.map(str::to_string)),
        text("state", |r| Some(r.status.state.name().to_string())),
        text("committed_position", |r| {
            r.status.committed.as_ref().map(|c| c.position.clone())
        }),
        count("committed_commit", |r| {
            r.status.committed.as_ref().map(|c| c.number)
        }),
        count("lag_entries", Row::lag_entries),
        count("lag_bytes", Row::lag_bytes),
        number("lag_seconds", |r| {
            Some(
                r.status
                    .behind_since
                    .map_or(0.0, |t| t.elapsed().as_secs_f64()),
            )
        }),
        count("rows_written", |r| Some(r.status.rows)),
        count("commits", |r| Some(r.status.commits)),
        count("retries", |r| Some(r.status.retries)),
        text("error", |r| r.status.error.clone()),
        text("error_sqlstate", |r| {
            r.status.sqlstate.as_ref().map(|s| s.code().to_string())
        }),
        text("definition", |r| Some(r.sink.statement.to_string())),
    ],
};
