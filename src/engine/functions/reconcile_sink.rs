//! `reconcile('source', 'db.table', 'sink:name')`: whether a sink's target holds what the
//! sink's query gives over the source's state at the target's committed position `H`.
//!
//! # How
//! 1. The target is read once: the sink's newest commit marker (its `_position` is `H`) and
//!    the rows, in one consistent read (`Target::read`).
//! 2. The expected rows are the sink's query, planned as its runner plans it, over the
//!    source's state at `H`: an upsert sink's tables AS OF `H` (after `H`'s transaction, the
//!    boundary every commit ends on); a changelog sink's entries after its start and up to
//!    `H`, each once.
//! 3. Both are compared key by key (`sinks::reconcile`): an upsert sink by its key columns,
//!    a changelog sink by `_position`.
//!
//! # Invariant
//! The target's rows and `H` come from one read and the expected rows are computed at that
//! same `H`, so a sink that is behind, paused or still writing compares equal exactly when
//! its target is right. Every run leaves a report in `cdc.reconciliations` whose `against`
//! is `sink:<name>`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{AsArray, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use futures::TryStreamExt;

use super::super::sink_plan::{plan_query, target_of};
use super::super::sinks::RunningSink;
use super::super::source::RunningSource;
use crate::capture::version::SourceVersion;
use crate::change::position::ChangePosition;
use crate::provider::as_of::{AsOf, AsOfTable};
use crate::provider::crossing::through_datafusion;
use crate::provider::memory_scan;
use crate::provider::reconcile::{
    answer, log_report, reconcile_schema, ReconcileLog, ReconcileReport,
};
use crate::sinks::{compare, expected_rows, layout_of, SinkError, SinkMode, SinkQuery, StartAt};
use crate::sqlstate::{HasSqlState, SqlState};
use crate::state::changelog::format;
use crate::state::changelog::{adapt, read_segments};

/// The longest wait for the source to capture through the target's position (after a
/// restart the engine may be behind what its sinks committed).
const CATCH_UP: Duration = Duration::from_secs(120);

/// Why a sink cannot be reconciled; each variant has its SQLSTATE.
#[derive(Debug, thiserror::Error)]
pub enum SinkReconcileError {
    #[error("sink \"{0}\" does not exist")]
    NoSuchSink(String),
    #[error(
        "sink \"{sink}\" reads {reads}, not {named}; name a source and table it reads, e.g. \
         reconcile('{in_source}', '<db.table>', 'sink:{sink}')"
    )]
    OtherTable {
        sink: String,
        in_source: String,
        reads: String,
        named: String,
    },
    #[error(
        "sink \"{0}\" has not committed anything to its target yet, so there is no position to \
         compare at; reconcile it once cdc.sinks shows a committed_position"
    )]
    NeverCommitted(String),
    #[error(
        "sink \"{0}\" was created with start = 'now' before its source had a position: which \
         entries its target should hold is not known"
    )]
    UnknownStart(String),
    #[error(
        "source \"{in_source}\" has not captured through {position}, where sink \"{sink}\" has \
         committed, after {seconds} s; reconcile compares once it has: see cdc.sources"
    )]
    NotCaughtUp {
        in_source: String,
        sink: String,
        position: String,
        seconds: u64,
    },
    #[error("sink \"{sink}\"'s target records position {position:?}, which is not a _position")]
    BadPosition { sink: String, position: String },
    #[error("sink \"{sink}\": {source}")]
    Sink { sink: String, source: SinkError },
}

impl SinkReconcileError {
    /// As the error the frontend reads a SQLSTATE from.
    pub fn into_df(self) -> DataFusionError {
        through_datafusion(self)
    }
}

impl HasSqlState for SinkReconcileError {
    fn sqlstate(&self) -> SqlState {
        match self {
            Self::NoSuchSink(_) => SqlState::UNDEFINED_OBJECT,
            Self::OtherTable { .. } => SqlState::INVALID_PARAMETER_VALUE,
            Self::NeverCommitted(_) | Self::UnknownStart(_) | Self::NotCaughtUp { .. } => {
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            Self::BadPosition { .. } => SqlState::DATA_CORRUPTED,
            Self::Sink { source, .. } => source.sqlstate(),
        }
    }
}

/// `reconcile('source', 'db.table', 'sink:name')`; see the module docs.
#[derive(Debug)]
pub struct SinkReconcileTable {
    pub sink: Arc<RunningSink>,
    pub source: Arc<RunningSource>,
    /// The named table's index in the source.
    pub index: usize,
    pub log: ReconcileLog,
}

#[async_trait]
impl TableProvider for SinkReconcileTable {
    fn schema(&self) -> arrow::datatypes::SchemaRef {
        reconcile_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        session: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let state = session
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| {
                DataFusionError::Internal("reconcile against a sink needs a SessionState".into())
            })?;
        let started = Instant::now();
        let (batch, mut report) = self.run(session, state).await?;
        report.seconds = started.elapsed().as_secs_f64();
        report.finished_micros = chrono::Utc::now().timestamp_micros();
        log_report(&self.log, report);
        memory_scan(&[vec![batch]], reconcile_schema(), projection, limit)
    }
}

impl SinkReconcileTable {
    fn failed(&self, source: SinkError) -> DataFusionError {
        SinkReconcileError::Sink {
            sink: self.sink.name.clone(),
            source,
        }
        .into_df()
    }

    async fn run(
        &self,
        session: &dyn Session,
        state: &SessionState,
    ) -> Result<(RecordBatch, ReconcileReport)> {
        let name = &self.sink.name;
        let status = self.source.status();
        let table = status.tables.get(self.index).cloned().ok_or_else(|| {
            DataFusionError::Internal(format!("no table {} in the source", self.index))
        })?;
        let version = self.source.published.load_full();
        let shown = table.id.to_string();
        self.source.health.check(
            session.config(),
            &self.source.name,
            &table.id,
            &shown,
            version.stopped.get(&self.index),
        )?;
        let query = plan_query(state, &self.sink.statement)
            .await
            .map_err(|e| self.failed(e))?;
        if !query.scans.iter().any(|s| s.table == self.index) {
            let reads: Vec<String> = query
                .scans
                .iter()
                .filter_map(|s| status.tables.get(s.table))
                .map(|t| format!("{}.{}", self.source.name, t.id))
                .collect();
            return Err(SinkReconcileError::OtherTable {
                sink: name.clone(),
                in_source: self.source.name.clone(),
                reads: reads.join(", "),
                named: format!("{}.{}", self.source.name, table.id),
            }
            .into_df());
        }
        let target = target_of(&self.sink.statement.target).map_err(|e| self.failed(e))?;
        let layout = layout_of(name, &query);
        let held = target.read(&layout).await.map_err(|e| self.failed(e))?;
        let Some(committed) = held.committed else {
            return Err(SinkReconcileError::NeverCommitted(name.clone()).into_df());
        };
        let h: ChangePosition = committed
            .position
            .parse()
            .map_err(|_| SinkReconcileError::BadPosition {
                sink: name.clone(),
                position: committed.position.clone(),
            })
            .map_err(SinkReconcileError::into_df)?;
        let version = self.wait_for(&h).await?;
        let (inputs, key, after) = match query.mode {
            SinkMode::Upsert => (
                self.tables_at(&query, &version, &h).await?,
                query.key.clone(),
                None,
            ),
            SinkMode::Changelog => {
                let after = self.start_after(&query, &version)?;
                let entries = self
                    .entries_up_to(&query, &version, after.as_deref(), &committed.position)
                    .await?;
                (entries, vec![format::POSITION.to_string()], after)
            }
        };
        let expected = expected_rows(state, &query, &inputs)
            .await
            .map_err(|e| self.failed(e))?;
        let expected = target.stored(&expected).map_err(|e| self.failed(e))?;
        let rows = match &after {
            Some(after) => after_position(held.rows, after)?,
            None => held.rows,
        };
        let found = compare(&key, &expected, &rows).map_err(|e| self.failed(e))?;
        let report = ReconcileReport {
            source: self.source.name.clone(),
            table: shown,
            against: format!("sink:{name}"),
            position: committed.position.clone(),
            chunks: 0,
            chunks_read: 0,
            rows: found.expected_rows,
            rows_fetched: found.target_rows,
            bytes_moved: found.target_bytes,
            differences: found.differences.len() as u64,
            finished_micros: 0,
            seconds: 0.0,
        };
        Ok((answer(&committed.position, &found.differences)?, report))
    }

    /// Waits until the source has captured `h`'s whole transaction; the version that has.
    async fn wait_for(&self, h: &ChangePosition) -> Result<Arc<SourceVersion>> {
        let deadline = Instant::now() + CATCH_UP;
        loop {
            let version = self.source.published.load_full();
            // A snapshot entry (event index 0) is the state at its chunk's HIGH itself.
            let covered = version
                .position
                .as_ref()
                .is_some_and(|p| *p > h.tx || (h.event_index == 0 && *p >= h.tx));
            if version.consistent && covered {
                return Ok(version);
            }
            if Instant::now() >= deadline {
                return Err(SinkReconcileError::NotCaughtUp {
                    in_source: self.source.name.clone(),
                    sink: self.sink.name.clone(),
                    position: h.to_string(),
                    seconds: CATCH_UP.as_secs(),
                }
                .into_df());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// An upsert sink's input: each table it reads AS OF `h`, in the scan's columns.
    async fn tables_at(
        &self,
        query: &SinkQuery,
        version: &SourceVersion,
        h: &ChangePosition,
    ) -> Result<Vec<Vec<RecordBatch>>> {
        let status = self.source.status();
        let mut inputs = Vec::with_capacity(query.scans.len());
        for scan in &query.scans {
            let table = status.tables.get(scan.table).ok_or_else(|| {
                DataFusionError::Internal(format!("no table {} in the source", scan.table))
            })?;
            let at = AsOfTable::new(
                &self.source.name,
                Arc::clone(&self.source.published),
                scan.table,
                Arc::clone(table),
                AsOf::Entry(h.clone()),
                status.consistent_from.clone(),
                Arc::clone(&self.source.health),
            );
            let batches = at
                .state(version)
                .await?
                .into_iter()
                .map(|b| RecordBatch::try_new(Arc::clone(&scan.schema), b.columns().to_vec()))
                .collect::<Result<Vec<_>, _>>()?;
            inputs.push(batches);
        }
        Ok(inputs)
    }

    /// Where a changelog sink's target starts: after its `start` position, or after what
    /// retention removed (the target holds those entries, the engine no longer does).
    fn start_after(&self, query: &SinkQuery, version: &SourceVersion) -> Result<Option<String>> {
        let mut after = match &self.sink.statement.options.start {
            StartAt::Snapshot => None,
            StartAt::After(p) => Some(p.clone()),
            StartAt::Now => {
                return Err(SinkReconcileError::UnknownStart(self.sink.name.clone()).into_df())
            }
        };
        for scan in &query.scans {
            let trimmed = version
                .changelogs
                .get(scan.table)
                .and_then(|log| log.trimmed().last_position.clone());
            if let Some(t) = trimmed {
                if after.as_ref().is_none_or(|a| t > *a) {
                    after = Some(t);
                }
            }
        }
        Ok(after)
    }

    /// A changelog sink's input: each table's entries after `after` and up to `h` (text of a
    /// `_position`), in the scan's columns.
    async fn entries_up_to(
        &self,
        query: &SinkQuery,
        version: &SourceVersion,
        after: Option<&str>,
        h: &str,
    ) -> Result<Vec<Vec<RecordBatch>>> {
        let mut inputs = Vec::with_capacity(query.scans.len());
        for scan in &query.scans {
            let Some(log) = version.changelogs.get(scan.table) else {
                inputs.push(Vec::new());
                continue;
            };
            let segments: Vec<_> = log
                .segments()
                .filter(|s| s.min_position.as_str() <= h)
                .filter(|s| after.is_none_or(|a| s.max_position.as_str() > a))
                .cloned()
                .collect();
            let batches: Vec<RecordBatch> = read_segments(segments, Arc::clone(&log.schema))
                .map_err(through_datafusion)
                .try_collect()
                .await?;
            let mut kept = Vec::with_capacity(batches.len());
            for batch in batches {
                let positions = batch
                    .column_by_name(format::POSITION)
                    .ok_or_else(|| {
                        DataFusionError::Internal("a changelog without _position".into())
                    })?
                    .as_string::<i32>();
                let keep: BooleanArray = positions
                    .iter()
                    .map(|p| Some(p.is_some_and(|p| p <= h && after.is_none_or(|a| p > a))))
                    .collect();
                let batch = filter_record_batch(&batch, &keep)?;
                if batch.num_rows() > 0 {
                    kept.push(adapt(batch, &scan.schema)?);
                }
            }
            inputs.push(kept);
        }
        Ok(inputs)
    }
}

/// The rows of `rows` whose `_position` is after `after`: what a changelog target holds of
/// the entries compared.
fn after_position(rows: Vec<RecordBatch>, after: &str) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::with_capacity(rows.len());
    for batch in rows {
        let Some(positions) = batch.column_by_name(format::POSITION) else {
            out.push(batch);
            continue;
        };
        let positions = arrow::compute::cast(positions, &arrow::datatypes::DataType::Utf8)?;
        let keep: BooleanArray = positions
            .as_string::<i32>()
            .iter()
            .map(|p| Some(p.is_none_or(|p| p > after)))
            .collect();
        out.push(filter_record_batch(&batch, &keep)?);
    }
    Ok(out)
}
