//! `cdc.tables`: one row per table of each source — the tables its capture serves, then those
//! a running snapshot has planned but not handed over yet (listed so its progress shows per
//! table).

use std::sync::Arc;

use super::columns::{count, flag, text, Declared, Scan};
use crate::capture::version::SourceVersion;
use crate::change::position::BinlogCoord;
use crate::change::schema::TableId;
use crate::engine::source::RunningSource;
use crate::provider::as_of::oldest_point;
use crate::provider::health::Fault;
use crate::source::snapshot::incremental::ChunkState;
use crate::source::snapshot::progress::{ChunkStatus, Phase};
use crate::state::changelog::Changelog;

/// What a row of `cdc.tables` is read from.
pub(super) struct Row {
    source: Arc<RunningSource>,
    id: TableId,
    /// Its index among the tables the query's version serves (`None`: planned, not served yet).
    served: Option<usize>,
    keyless: bool,
    phase: Phase,
    version: Arc<SourceVersion>,
    consistent_from: Option<BinlogCoord>,
    /// Its chunks in the running (or last) snapshot.
    chunks: Vec<ChunkStatus>,
    estimated: Option<u64>,
    fault: Option<Fault>,
    /// Whether the fault is the table's own stop rather than the source's failure.
    stopped: bool,
}

fn rows(scan: &Scan<'_>) -> Vec<Row> {
    let mut rows = Vec::new();
    for source in scan.sources() {
        let report = source.progress.report();
        let version = scan.version(&source);
        let status = source.status();
        let mut listed: Vec<(TableId, Option<usize>, bool)> = status
            .tables
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.clone(), Some(i), t.primary_key.is_empty()))
            .collect();
        for (id, _) in &report.estimated_rows {
            if !listed.iter().any(|(known, _, _)| known == id) {
                listed.push((id.clone(), None, report.keyless_tables.contains(id)));
            }
        }
        for (id, served, keyless) in listed {
            let stop = served.and_then(|i| version.stopped.get(&i));
            rows.push(Row {
                source: Arc::clone(&source),
                served,
                keyless,
                phase: report.phase,
                consistent_from: status.consistent_from.clone(),
                chunks: report
                    .chunks
                    .iter()
                    .filter(|c| c.table == id)
                    .cloned()
                    .collect(),
                estimated: report
                    .estimated_rows
                    .iter()
                    .find(|(table, _)| *table == id)
                    .map(|(_, n)| *n),
                fault: source.health.fault_of(&id, stop),
                stopped: stop.is_some(),
                version: Arc::clone(&version),
                id,
            });
        }
    }
    rows
}

impl Row {
    /// Its changelog in the query's version, when it is served.
    fn log(&self) -> Option<&Changelog> {
        self.served.and_then(|i| self.version.changelogs.get(i))
    }

    fn served<T>(&self, f: impl Fn(usize) -> Option<T>) -> Option<T> {
        self.served.and_then(f)
    }

    /// The HIGHs of its chunks read so far, as text.
    fn highs(&self) -> impl Iterator<Item = String> + '_ {
        self.chunks
            .iter()
            .filter_map(|c| c.high.as_ref().map(ToString::to_string))
    }

    fn done(&self) -> impl Iterator<Item = &ChunkStatus> {
        self.chunks.iter().filter(|c| c.state == ChunkState::Done)
    }

    fn state(&self) -> &'static str {
        match (&self.fault, self.stopped) {
            (None, _) => "capturing",
            (Some(_), true) => "stopped",
            (Some(_), false) => "failed",
        }
    }
}

pub(super) static TABLE: Declared<Row> = Declared {
    name: "tables",
    rows,
    columns: &[
        text("source", |r| Some(r.source.name.clone())),
        text("db", |r| Some(r.id.db.clone())),
        text("table", |r| Some(r.id.table.clone())),
        text("phase", |r| Some(r.phase.as_str().to_string())),
        text("state", |r| Some(r.state().to_string())),
        text("error", |r| r.fault.as_ref().map(|f| f.describe())),
        count("rows", |r| {
            r.served(|i| r.version.tables.get(i).map(|v| v.len() as u64))
        }),
        count("chunks_done", |r| Some(r.done().count() as u64)),
        count("chunks_total", |r| Some(r.chunks.len() as u64)),
        count("snapshot_rows", |r| {
            Some(r.done().map(|c| c.rows as u64).sum())
        }),
        count("snapshot_rows_estimated", |r| r.estimated),
        text("snapshot_min_high", |r| r.highs().min()),
        text("snapshot_max_high", |r| r.highs().max()),
        flag("keyless", |r| Some(r.keyless)),
        // False while the rows are the chunks done so far of a running snapshot.
        flag("complete", |r| {
            Some(r.version.consistent && r.served.is_some())
        }),
        count("changelog_entries", |r| {
            r.log().map(|l| l.retained_rows() as u64)
        }),
        count("changelog_memory_bytes", |r| {
            r.log().map(|l| l.resident_bytes() as u64)
        }),
        count("changelog_spilled_entries", |r| {
            r.log().map(|l| {
                l.segments()
                    .filter(|s| s.is_spilled())
                    .map(|s| s.rows as u64)
                    .sum()
            })
        }),
        count("changelog_trimmed_entries", |r| {
            r.log().map(|l| l.trimmed().rows as u64)
        }),
        text("history_from", |r| {
            r.log()
                .filter(|_| r.version.consistent)
                .and_then(|l| oldest_point(l, r.consistent_from.as_ref()))
                .map(|p| p.to_string())
        }),
        count("schema_version", |r| {
            r.served(|i| {
                r.version
                    .tables
                    .get(i)
                    .map(|v| u64::from(v.schema().version))
            })
        }),
    ],
};
