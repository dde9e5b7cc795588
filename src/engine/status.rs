//! The `cdc` status schema: `cdc.sources`, `cdc.tables`, `cdc.chunks`,
//! `cdc.schema_history` (every schema change the capture followed, as of the version the
//! query reads) and `cdc.sinks` (built in `sinks`).
//!
//! Each table is built from the sources' status when a query scans it, so it shows the present:
//! phase, positions, progress and errors. `cdc.sources.position` is the position of the version
//! the same query reads of the source's tables (`Engine::sql` pins one per query), so joining it
//! into a query tells the position that query read. Status says plainly when a current table is
//! still a mix of chunk boundaries (`consistent = false`, phase `Snapshot`/`CatchUp`) and from
//! which position on it is consistent.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, RecordBatch, TimestampMicrosecondArray, UInt64Array,
};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, Session};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::sinks::{SinksRef, SinksTable};
use super::source::{RunningSource, SourcesRef};
use super::source_status::{micros, now_micros};
use super::status_rows::{table, text};
use crate::capture::describe_columns;
use crate::change::position::ChangePosition;
use crate::change::schema::TableId;
use crate::provider::as_of::oldest_point;
use crate::provider::reconcile::ReconcileLog;
use crate::provider::{memory_scan, version_for};
use crate::source::snapshot::incremental::ChunkState;

/// Name of the schema holding the status tables.
pub const STATUS_SCHEMA: &str = "cdc";

/// See the module docs.
#[derive(Debug)]
pub(crate) struct CdcSchema {
    sources: SourcesRef,
    sinks: SinksRef,
    reconciliations: ReconcileLog,
}

const TABLES: [&str; 4] = ["sources", "tables", "chunks", "schema_history"];

/// `cdc.sinks` (see `sinks`).
const SINKS_TABLE: &str = "sinks";

/// `cdc.reconciliations`: the reports of the latest `reconcile` runs.
const RECONCILIATIONS_TABLE: &str = "reconciliations";

impl CdcSchema {
    pub(crate) fn new(sources: SourcesRef, sinks: SinksRef, reconciliations: ReconcileLog) -> Self {
        Self {
            sources,
            sinks,
            reconciliations,
        }
    }
}

/// `cdc.reconciliations`, one row per `reconcile` run, oldest first.
#[derive(Debug)]
struct ReconciliationsTable {
    log: ReconcileLog,
}

fn reconciliations_batch(log: &ReconcileLog) -> Result<RecordBatch> {
    let reports: Vec<_> = log
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .cloned()
        .collect();
    let texts = |f: &dyn Fn(&crate::provider::reconcile::ReconcileReport) -> String| {
        text(reports.iter().map(|r| Some(f(r))).collect())
    };
    let counts = |f: &dyn Fn(&crate::provider::reconcile::ReconcileReport) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from(reports.iter().map(f).collect::<Vec<_>>()))
    };
    table(vec![
        ("source", texts(&|r| r.source.clone())),
        ("table", texts(&|r| r.table.clone())),
        ("against", texts(&|r| r.against.clone())),
        ("position", texts(&|r| r.position.clone())),
        ("chunks", counts(&|r| r.chunks)),
        ("chunks_read", counts(&|r| r.chunks_read)),
        ("rows_compared", counts(&|r| r.rows)),
        ("rows_fetched", counts(&|r| r.rows_fetched)),
        ("bytes_moved", counts(&|r| r.bytes_moved)),
        ("differences", counts(&|r| r.differences)),
        (
            "finished_at",
            Arc::new(
                TimestampMicrosecondArray::from(
                    reports
                        .iter()
                        .map(|r| r.finished_micros)
                        .collect::<Vec<_>>(),
                )
                .with_timezone("UTC"),
            ),
        ),
        (
            "seconds",
            Arc::new(Float64Array::from(
                reports.iter().map(|r| r.seconds).collect::<Vec<_>>(),
            )),
        ),
    ])
}

#[async_trait]
impl TableProvider for ReconciliationsTable {
    fn schema(&self) -> SchemaRef {
        reconciliations_batch(&ReconcileLog::default())
            .map(|b| b.schema())
            .unwrap_or_else(|_| Arc::new(arrow::datatypes::Schema::empty()))
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batch = reconciliations_batch(&self.log)?;
        memory_scan(&[vec![batch]], self.schema(), projection, limit)
    }
}

/// One status table; its rows are computed when a query scans it, from the versions that
/// query reads (so `cdc.sources.position` is the position of the query's other tables).
#[derive(Debug)]
pub(super) struct StatusTable {
    name: &'static str,
    sources: SourcesRef,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for StatusTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let sources: Vec<Arc<RunningSource>> = match self.sources.upgrade() {
            Some(s) => s
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .values()
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        let batch = build(self.name, &sources, Some(state))?;
        memory_scan(&[vec![batch]], self.schema(), projection, limit)
    }
}

#[async_trait]
impl SchemaProvider for CdcSchema {
    fn table_names(&self) -> Vec<String> {
        TABLES
            .iter()
            .chain([&SINKS_TABLE, &RECONCILIATIONS_TABLE])
            .map(|s| s.to_string())
            .collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if name == RECONCILIATIONS_TABLE {
            return Ok(Some(Arc::new(ReconciliationsTable {
                log: Arc::clone(&self.reconciliations),
            })));
        }
        if name == SINKS_TABLE {
            return Ok(Some(Arc::new(SinksTable {
                sinks: std::sync::Weak::clone(&self.sinks),
                sources: std::sync::Weak::clone(&self.sources),
            })));
        }
        let Some(name) = TABLES.iter().find(|t| **t == name) else {
            return Ok(None);
        };
        let schema = build(name, &[], None)?.schema();
        Ok(Some(Arc::new(StatusTable {
            name,
            sources: std::sync::Weak::clone(&self.sources),
            schema,
        })))
    }

    fn table_exist(&self, name: &str) -> bool {
        TABLES.contains(&name) || name == SINKS_TABLE || name == RECONCILIATIONS_TABLE
    }
}

fn build(
    name: &str,
    sources: &[Arc<RunningSource>],
    session: Option<&dyn Session>,
) -> Result<RecordBatch> {
    let version = |s: &RunningSource| match session {
        Some(session) => version_for(session, &s.name, &s.published),
        None => s.published.load_full(),
    };
    match name {
        "sources" => {
            let mut cols: [Vec<Option<String>>; 15] = Default::default();
            let mut error_at = Vec::new();
            let (mut retries, mut last_error, mut last_sqlstate, mut last_at) =
                (vec![], vec![], vec![], vec![]);
            let mut consistent = Vec::new();
            let (mut txs, mut changes) = (Vec::new(), Vec::new());
            let (mut lag_s, mut lag_b, mut server_pos) = (vec![], vec![], vec![]);
            let (mut snapshot_rows, mut eta) = (vec![], vec![]);
            let (mut checkpoints, mut checkpoint_failures) = (vec![], vec![]);
            let (mut checkpoint_at, mut checkpoint_age, mut checkpoint_took) =
                (vec![], vec![], vec![]);
            for s in sources {
                let status = s.status();
                let report = s.progress.report();
                let version = version(s);
                cols[0].push(Some(s.name.clone()));
                cols[1].push(Some(status.flavor.clone()).filter(|f| !f.is_empty()));
                cols[2].push(Some(status.server_version.clone()).filter(|v| !v.is_empty()));
                cols[3].push(Some(report.phase.as_str().to_string()));
                cols[4].push(version.position.as_ref().map(ToString::to_string));
                cols[5].push(report.position.as_ref().map(ToString::to_string));
                cols[6].push(status.error.clone());
                cols[7].push(Some(s.url.clone()));
                cols[8].push(status.durable_position.as_ref().map(ToString::to_string));
                cols[9].push(status.consistent_from.as_ref().map(ToString::to_string));
                cols[10].push(status.checkpoint_error.clone());
                let fault = s.health.source_fault();
                // `failed`: capture stopped and the tables refuse queries (see `health`).
                let state = if fault.is_some() {
                    "failed"
                } else if status.retrying || status.checkpoint_retrying {
                    "retrying"
                } else {
                    "running"
                };
                cols[11].push(Some(state.to_string()));
                cols[12].push(fault.as_ref().map(|f| f.sqlstate.to_string()));
                cols[13].push(
                    fault
                        .as_ref()
                        .and_then(|f| f.position.as_ref())
                        .map(ToString::to_string),
                );
                cols[14].push(
                    fault
                        .as_ref()
                        .and_then(|f| f.table.as_ref())
                        .map(ToString::to_string),
                );
                error_at.push(fault.as_ref().map(|f| micros(f.at)));
                retries.push(status.retries);
                last_error.push(status.last_error.as_ref().map(|f| f.describe()));
                last_sqlstate.push(status.last_error.as_ref().map(|f| f.sqlstate.to_string()));
                last_at.push(status.last_error.as_ref().map(|f| micros(f.at)));
                consistent.push(Some(version.consistent));
                lag_s.push(status.lag_seconds(version.position.as_ref()));
                lag_b.push(status.lag_bytes(version.position.as_ref()));
                server_pos.push(status.server_position.as_ref().map(ToString::to_string));
                txs.push(status.transactions);
                changes.push(status.changes);
                snapshot_rows.push(report.rows_read as u64);
                eta.push(report.eta.map(|d| d.as_secs_f64()));
                checkpoints.push(status.checkpoints);
                checkpoint_failures.push(status.checkpoint_failures);
                checkpoint_at.push(status.last_checkpoint_micros);
                checkpoint_age.push(
                    status
                        .last_checkpoint_micros
                        .map(|at| (now_micros() - at).max(0) as f64 / 1e6),
                );
                checkpoint_took.push(status.last_checkpoint_seconds);
            }
            let [name, flavor, version, phase, published, live, error, url, durable, consistent_from, checkpoint_error, state, error_sqlstate, error_position, error_table] =
                cols;
            table(vec![
                ("name", text(name)),
                ("flavor", text(flavor)),
                ("server_version", text(version)),
                ("phase", text(phase)),
                ("state", text(state)),
                ("position", text(published)),
                ("live_position", text(live)),
                ("durable_position", text(durable)),
                ("consistent_from", text(consistent_from)),
                ("server_position", text(server_pos)),
                ("lag_seconds", Arc::new(Float64Array::from(lag_s))),
                ("lag_bytes", Arc::new(UInt64Array::from(lag_b))),
                ("consistent", Arc::new(BooleanArray::from(consistent))),
                ("transactions", Arc::new(UInt64Array::from(txs))),
                ("changes", Arc::new(UInt64Array::from(changes))),
                ("snapshot_rows", Arc::new(UInt64Array::from(snapshot_rows))),
                ("snapshot_eta_seconds", Arc::new(Float64Array::from(eta))),
                ("error", text(error)),
                ("error_sqlstate", text(error_sqlstate)),
                ("error_position", text(error_position)),
                ("error_table", text(error_table)),
                (
                    "error_at",
                    Arc::new(TimestampMicrosecondArray::from(error_at).with_timezone("UTC")),
                ),
                ("retries", Arc::new(UInt64Array::from(retries))),
                ("last_error", text(last_error)),
                ("last_error_sqlstate", text(last_sqlstate)),
                (
                    "last_error_at",
                    Arc::new(TimestampMicrosecondArray::from(last_at).with_timezone("UTC")),
                ),
                ("checkpoint_error", text(checkpoint_error)),
                ("checkpoints", Arc::new(UInt64Array::from(checkpoints))),
                (
                    "checkpoint_failures",
                    Arc::new(UInt64Array::from(checkpoint_failures)),
                ),
                (
                    "last_checkpoint_at",
                    Arc::new(TimestampMicrosecondArray::from(checkpoint_at).with_timezone("UTC")),
                ),
                (
                    "checkpoint_age_seconds",
                    Arc::new(Float64Array::from(checkpoint_age)),
                ),
                (
                    "last_checkpoint_seconds",
                    Arc::new(Float64Array::from(checkpoint_took)),
                ),
                ("url", text(url)),
            ])
        }
        "tables" => {
            let mut cols: [Vec<Option<String>>; 8] = Default::default();
            let (mut rows, mut done, mut total, mut keyless) = (vec![], vec![], vec![], vec![]);
            let (mut rows_read, mut estimated) = (Vec::new(), Vec::new());
            let mut complete = Vec::new();
            let (mut log_rows, mut log_memory, mut log_spilled) = (vec![], vec![], vec![]);
            let (mut log_trimmed, mut history_from) = (vec![], vec![]);
            let mut schema_versions = Vec::new();
            for s in sources {
                let report = s.progress.report();
                let version = version(s);
                let status = s.status();
                let consistent_from = status.consistent_from.clone();
                // The tables the capture serves, then those its running snapshot has planned
                // but not handed over yet (listed so its progress shows per table).
                let mut listed: Vec<(TableId, Option<usize>, bool)> = status
                    .tables
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (t.id.clone(), Some(i), t.primary_key.is_empty()))
                    .collect();
                for (id, _) in &report.estimated_rows {
                    if !listed.iter().any(|(known, _, _)| known == id) {
                        let keyless = report.keyless_tables.contains(id);
                        listed.push((id.clone(), None, keyless));
                    }
                }
                for (id, index, is_keyless) in &listed {
                    let served = |f: &dyn Fn(usize) -> Option<u64>| index.and_then(f);
                    let chunks: Vec<_> = report.chunks.iter().filter(|c| c.table == *id).collect();
                    let highs: Vec<String> = chunks
                        .iter()
                        .filter_map(|c| c.high.as_ref().map(ToString::to_string))
                        .collect();
                    cols[0].push(Some(s.name.clone()));
                    cols[1].push(Some(id.db.clone()));
                    cols[2].push(Some(id.table.clone()));
                    cols[3].push(Some(report.phase.as_str().to_string()));
                    cols[4].push(highs.iter().min().cloned());
                    cols[5].push(highs.iter().max().cloned());
                    rows.push(served(&|i| version.tables.get(i).map(|v| v.len() as u64)));
                    schema_versions.push(served(&|i| {
                        version.tables.get(i).map(|v| u64::from(v.schema().version))
                    }));
                    let log = index.and_then(|i| version.changelogs.get(i));
                    log_rows.push(log.map(|l| l.retained_rows() as u64));
                    log_trimmed.push(log.map(|l| l.trimmed().rows as u64));
                    history_from.push(
                        log.filter(|_| version.consistent)
                            .and_then(|l| oldest_point(l, consistent_from.as_ref()))
                            .map(|p| p.to_string()),
                    );
                    log_memory.push(log.map(|l| l.resident_bytes() as u64));
                    log_spilled.push(log.map(|l| {
                        l.segments()
                            .filter(|s| s.is_spilled())
                            .map(|s| s.rows as u64)
                            .sum::<u64>()
                    }));
                    let finished = chunks.iter().filter(|c| c.state == ChunkState::Done);
                    let (n, rows) =
                        finished.fold((0u64, 0u64), |(n, r), c| (n + 1, r + c.rows as u64));
                    done.push(n);
                    total.push(chunks.len() as u64);
                    rows_read.push(rows);
                    estimated.push(
                        report
                            .estimated_rows
                            .iter()
                            .find(|(table, _)| table == id)
                            .map(|(_, n)| *n),
                    );
                    keyless.push(*is_keyless);
                    // False while the rows are the chunks done so far of a running snapshot.
                    complete.push(version.consistent && index.is_some());
                    let stop = index.and_then(|i| version.stopped.get(&i));
                    let fault = s.health.fault_of(id, stop);
                    let state = match (&fault, stop) {
                        (None, _) => "capturing",
                        (Some(_), Some(_)) => "stopped",
                        (Some(_), None) => "failed",
                    };
                    cols[6].push(Some(state.to_string()));
                    cols[7].push(fault.map(|f| f.describe()));
                }
            }
            let [source, db, name, phase, low, high, state, error] = cols;
            table(vec![
                ("source", text(source)),
                ("db", text(db)),
                ("table", text(name)),
                ("phase", text(phase)),
                ("state", text(state)),
                ("error", text(error)),
                ("rows", Arc::new(UInt64Array::from(rows))),
                ("chunks_done", Arc::new(UInt64Array::from(done))),
                ("chunks_total", Arc::new(UInt64Array::from(total))),
                ("snapshot_rows", Arc::new(UInt64Array::from(rows_read))),
                (
                    "snapshot_rows_estimated",
                    Arc::new(UInt64Array::from(estimated)),
                ),
                ("snapshot_min_high", text(low)),
                ("snapshot_max_high", text(high)),
                ("keyless", Arc::new(BooleanArray::from(keyless))),
                ("complete", Arc::new(BooleanArray::from(complete))),
                ("changelog_entries", Arc::new(UInt64Array::from(log_rows))),
                (
                    "changelog_memory_bytes",
                    Arc::new(UInt64Array::from(log_memory)),
                ),
                (
                    "changelog_spilled_entries",
                    Arc::new(UInt64Array::from(log_spilled)),
                ),
                (
                    "changelog_trimmed_entries",
                    Arc::new(UInt64Array::from(log_trimmed)),
                ),
                ("history_from", text(history_from)),
                (
                    "schema_version",
                    Arc::new(UInt64Array::from(schema_versions)),
                ),
            ])
        }
        "chunks" => {
            let mut cols: [Vec<Option<String>>; 9] = Default::default();
            let (mut index, mut rows, mut reads) = (vec![], vec![], vec![]);
            for s in sources {
                for c in s.progress.report().chunks {
                    cols[0].push(Some(s.name.clone()));
                    cols[1].push(Some(c.table.db.clone()));
                    cols[2].push(Some(c.table.table.clone()));
                    cols[3].push(Some(c.range.clone()));
                    cols[4].push(c.low.as_ref().map(ToString::to_string));
                    cols[5].push(c.high.as_ref().map(ToString::to_string));
                    cols[6].push(Some(format!("{:?}", c.state).to_lowercase()));
                    index.push(c.index as u64);
                    rows.push(c.rows as u64);
                    cols[7].push(c.reader.map(|r| r.as_str().to_string()));
                    cols[8].push(c.visibility.map(|v| v.as_str().to_string()));
                    reads.push(u64::from(c.reads));
                }
            }
            let [source, db, name, range, low, high, state, reader, visibility] = cols;
            table(vec![
                ("source", text(source)),
                ("db", text(db)),
                ("table", text(name)),
                ("chunk", Arc::new(UInt64Array::from(index))),
                ("range", text(range)),
                ("low", text(low)),
                ("high", text(high)),
                ("rows", Arc::new(UInt64Array::from(rows))),
                ("state", text(state)),
                ("reads", Arc::new(UInt64Array::from(reads))),
                ("reader", text(reader)),
                ("visibility", text(visibility)),
            ])
        }
        "schema_history" => {
            let mut cols: [Vec<Option<String>>; 7] = Default::default();
            let (mut at, mut versions) = (vec![], vec![]);
            for s in sources {
                let version = version(s);
                for change in version.schema_history.iter() {
                    let id = &change.after.id;
                    cols[0].push(Some(s.name.clone()));
                    cols[1].push(Some(id.db.clone()));
                    cols[2].push(Some(id.table.clone()));
                    // In `_position`'s sortable form: before every entry of its transaction.
                    let sortable = ChangePosition {
                        tx: change.position.clone(),
                        event_index: 0,
                        row_index: 0,
                        sub: 0,
                    };
                    cols[3].push(Some(sortable.to_string()));
                    cols[4].push(Some(change.statement.clone()));
                    cols[5].push(Some(describe_columns(&change.before)));
                    cols[6].push(Some(describe_columns(&change.after)));
                    at.push((change.commit_ts_micros > 0).then_some(change.commit_ts_micros));
                    versions.push(change.after.version as u64);
                }
            }
            let [source, db, name, position, statement, before, after] = cols;
            table(vec![
                ("source", text(source)),
                ("db", text(db)),
                ("table", text(name)),
                ("position", text(position)),
                (
                    "committed_at",
                    Arc::new(TimestampMicrosecondArray::from(at).with_timezone("UTC")),
                ),
                ("schema_version", Arc::new(UInt64Array::from(versions))),
                ("statement", text(statement)),
                ("columns_before", text(before)),
                ("columns_after", text(after)),
            ])
        }
        other => Err(datafusion::error::DataFusionError::Plan(format!(
            "no status table {other}"
        ))),
    }
}
