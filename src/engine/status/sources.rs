//! `cdc.sources`: one row per source — its server, phase, positions, lag, snapshot progress,
//! errors and checkpoints.

use std::sync::Arc;

use super::columns::{count, flag, number, text, time, Declared, Scan};
use crate::capture::version::SourceVersion;
use crate::engine::source::RunningSource;
use crate::engine::source_status::{micros, now_micros, SourceStatus};
use crate::provider::health::Fault;
use crate::source::snapshot::progress::ProgressReport;

/// What a row of `cdc.sources` is read from.
pub(super) struct Row {
    source: Arc<RunningSource>,
    status: SourceStatus,
    report: ProgressReport,
    /// The version the query reads.
    version: Arc<SourceVersion>,
    /// What stopped the capture, if anything did (see `health`).
    fault: Option<Fault>,
}

fn rows(scan: &Scan<'_>) -> Vec<Row> {
    scan.sources()
        .into_iter()
        .map(|source| Row {
            status: source.status(),
            report: source.progress.report(),
            version: scan.version(&source),
            fault: source.health.source_fault(),
            source,
        })
        .collect()
}

/// `failed`: capture stopped and the tables refuse queries (see `health`).
fn state(r: &Row) -> &'static str {
    if r.fault.is_some() {
        "failed"
    } else if r.status.retrying || r.status.checkpoint_retrying {
        "retrying"
    } else {
        "running"
    }
}

fn shown<T: ToString>(v: Option<&T>) -> Option<String> {
    v.map(ToString::to_string)
}

pub(super) static TABLE: Declared<Row> = Declared {
    name: "sources",
    rows,
    columns: &[
        text("name", |r| Some(r.source.name.clone())),
        text("flavor", |r| {
            Some(r.status.flavor.clone()).filter(|f| !f.is_empty())
        }),
        text("server_version", |r| {
            Some(r.status.server_version.clone()).filter(|v| !v.is_empty())
        }),
        text("phase", |r| Some(r.report.phase.as_str().to_string())),
        text("state", |r| Some(state(r).to_string())),
        text("position", |r| shown(r.version.position.as_ref())),
        text("gtid_position", |r| shown(r.version.gtids.as_deref())),
        text("live_position", |r| shown(r.report.position.as_ref())),
        text("durable_position", |r| {
            shown(r.status.durable_position.as_ref())
        }),
        text("consistent_from", |r| {
            shown(r.status.consistent_from.as_ref())
        }),
        text("server_position", |r| {
            shown(r.status.server_position.as_ref())
        }),
        number("lag_seconds", |r| {
            r.status.lag_seconds(r.version.position.as_ref())
        }),
        count("lag_bytes", |r| {
            r.status.lag_bytes(r.version.position.as_ref())
        }),
        flag("consistent", |r| Some(r.version.consistent)),
        count("transactions", |r| Some(r.status.transactions)),
        count("changes", |r| Some(r.status.changes)),
        count("snapshot_rows", |r| Some(r.report.rows_read as u64)),
        number("snapshot_eta_seconds", |r| {
            r.report.eta.map(|d| d.as_secs_f64())
        }),
        text("error", |r| r.status.error.clone()),
        text("error_sqlstate", |r| {
            r.fault.as_ref().map(|f| f.sqlstate.code().to_string())
        }),
        text("error_position", |r| {
            shown(r.fault.as_ref().and_then(|f| f.position.as_ref()))
        }),
        text("error_table", |r| {
            shown(r.fault.as_ref().and_then(|f| f.table.as_ref()))
        }),
        time("error_at", |r| r.fault.as_ref().map(|f| micros(f.at))),
        count("retries", |r| Some(r.status.retries)),
        text("last_error", |r| {
            r.status.last_error.as_ref().map(|f| f.describe())
        }),
        text("last_error_sqlstate", |r| {
            r.status
                .last_error
                .as_ref()
                .map(|f| f.sqlstate.code().to_string())
        }),
        time("last_error_at", |r| {
            r.status.last_error.as_ref().map(|f| micros(f.at))
        }),
        text("checkpoint_error", |r| r.status.checkpoint_error.clone()),
        count("checkpoints", |r| Some(r.status.checkpoints)),
        count("checkpoint_failures", |r| {
            Some(r.status.checkpoint_failures)
        }),
        time("last_checkpoint_at", |r| r.status.last_checkpoint_micros),
        number("checkpoint_age_seconds", |r| {
            r.status
                .last_checkpoint_micros
                .map(|at| (now_micros() - at).max(0) as f64 / 1e6)
        }),
        number("last_checkpoint_seconds", |r| {
            r.status.last_checkpoint_seconds
        }),
        text("url", |r| Some(r.source.url())),
        text("servers", |r| Some(r.source.servers().join(", "))),
        text("oldest_binlog", |r| r.status.purge.oldest.clone()),
        count("purge_distance_files", |r| r.status.purge.files_before),
        count("purge_distance_bytes", |r| r.status.purge.bytes_before),
        number("purge_eta_seconds", |r| r.status.purge.eta_seconds),
        flag("purge_warning", |r| {
            Some(!r.status.purge.warnings.is_empty())
        }),
        text("warnings", |r| {
            Some(r.status.purge.warnings.join("; ")).filter(|w| !w.is_empty())
        }),
    ],
};
