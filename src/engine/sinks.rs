//! The engine's running sinks, and `cdc.sinks` / `SHOW SINKS`: what each sink reads and
//! writes, its state, its committed position and its lag.
//!
//! # Invariant
//! A sink's status shows what its target holds as far as this engine knows (the marker of
//! its last commit, or the one read back when it started), never a position it has only
//! read: lag is what the source has published beyond it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, Weak};

use arrow::array::{Float64Array, RecordBatch, UInt64Array};
use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use tokio::sync::watch;

use super::source::{RunningSource, SourcesRef};
use super::status_rows::{table, text};
use crate::change::position::ChangePosition;
use crate::provider::memory_scan;
use crate::sinks::SinkStatus;
use crate::sql::CreateSink;

/// One sink of the engine.
#[derive(Debug)]
pub struct RunningSink {
    pub name: String,
    /// The statement as created (password masked when displayed).
    pub statement: CreateSink,
    /// The source its query reads.
    pub source: String,
    /// What it writes to (password masked).
    pub target: String,
    pub status: Arc<Mutex<SinkStatus>>,
    pub(super) paused: watch::Sender<bool>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl Drop for RunningSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RunningSink {
    pub fn status(&self) -> SinkStatus {
        self.status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The engine's sinks by name.
pub(crate) type Sinks = RwLock<BTreeMap<String, Arc<RunningSink>>>;

/// Weak handle used by the status table.
pub(crate) type SinksRef = Weak<Sinks>;

/// One row per sink: see the module docs.
pub(super) fn sinks_batch(sinks: &[Arc<RunningSink>], sources: &SourcesRef) -> Result<RecordBatch> {
    let source_of = |name: &str| -> Option<Arc<RunningSource>> {
        sources.upgrade().and_then(|s| {
            s.read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(name)
                .cloned()
        })
    };
    let mut cols: [Vec<Option<String>>; 9] = Default::default();
    let (mut commit, mut rows, mut commits, mut retries) = (vec![], vec![], vec![], vec![]);
    let (mut lag_entries, mut lag_bytes, mut lag_seconds) = (vec![], vec![], vec![]);
    for sink in sinks {
        let status = sink.status();
        cols[0].push(Some(sink.name.clone()));
        cols[1].push(Some(sink.source.clone()));
        cols[2].push(Some(sink.target.clone()));
        cols[3].push(status.mode.map(str::to_string));
        cols[4].push(Some(status.state.name().to_string()));
        cols[5].push(status.committed.as_ref().map(|c| c.position.clone()));
        cols[6].push(status.error.clone());
        cols[7].push(status.sqlstate.map(str::to_string));
        cols[8].push(Some(sink.statement.to_string()));
        commit.push(status.committed.as_ref().map(|c| c.number));
        rows.push(status.rows);
        commits.push(status.commits);
        retries.push(status.retries);
        let version = source_of(&sink.source).map(|s| s.published.load_full());
        let pending = version.as_ref().map(|v| {
            status
                .covered
                .iter()
                .map(|&(table, done)| {
                    v.changelogs
                        .get(table)
                        .map_or(0, |l| l.num_rows().saturating_sub(done) as u64)
                })
                .sum::<u64>()
        });
        lag_entries.push(pending);
        let committed = status
            .committed
            .as_ref()
            .and_then(|c| ChangePosition::coord_of_text(&c.position));
        let published = version.as_ref().and_then(|v| v.position.clone());
        lag_bytes.push(match (committed, published) {
            (Some(c), Some(p)) if c.file == p.file => Some(p.offset.saturating_sub(c.offset)),
            _ => None,
        });
        lag_seconds.push(Some(
            status
                .behind_since
                .map_or(0.0, |t| t.elapsed().as_secs_f64()),
        ));
    }
    let [name, source, target, mode, state, position, error, sqlstate, definition] = cols;
    table(vec![
        ("name", text(name)),
        ("source", text(source)),
        ("target", text(target)),
        ("mode", text(mode)),
        ("state", text(state)),
        ("committed_position", text(position)),
        ("committed_commit", Arc::new(UInt64Array::from(commit))),
        ("lag_entries", Arc::new(UInt64Array::from(lag_entries))),
        ("lag_bytes", Arc::new(UInt64Array::from(lag_bytes))),
        ("lag_seconds", Arc::new(Float64Array::from(lag_seconds))),
        ("rows_written", Arc::new(UInt64Array::from(rows))),
        ("commits", Arc::new(UInt64Array::from(commits))),
        ("retries", Arc::new(UInt64Array::from(retries))),
        ("error", text(error)),
        ("error_sqlstate", text(sqlstate)),
        ("definition", text(definition)),
    ])
}

/// `cdc.sinks`, computed when a query scans it.
#[derive(Debug)]
pub(super) struct SinksTable {
    pub sinks: SinksRef,
    pub sources: SourcesRef,
}

impl SinksTable {
    fn current(&self) -> Vec<Arc<RunningSink>> {
        match self.sinks.upgrade() {
            Some(s) => s
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .values()
                .cloned()
                .collect(),
            None => Vec::new(),
        }
    }
}

#[async_trait]
impl TableProvider for SinksTable {
    fn schema(&self) -> SchemaRef {
        sinks_batch(&[], &self.sources)
            .map(|b| b.schema())
            .unwrap_or_else(|_| Arc::new(Schema::empty()))
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
        let batch = sinks_batch(&self.current(), &self.sources)?;
        memory_scan(&[vec![batch]], self.schema(), projection, limit)
    }
}
