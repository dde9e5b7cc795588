//! The execution plan of a current-table scan, which can read another version when its plan
//! runs again.
//!
//! A scan is planned once and *bound* to what it reads: the version its statement pinned, the
//! table's health for that statement, the rows of its key filter, of its secondary-index
//! filter ([`IndexLookup`]: from the index, or by a scan when the run's session turned indexes
//! off) or the whole table. A plan kept by the front end runs again by binding each scan to the new run's pinned version
//! ([`CurrentScanExec::bind`]) instead of planning again; everything the plan decided from
//! the first version stays as it was (partition count, schema), so the plan above the scan
//! remains valid.
//!
//! # Invariant
//! A scan reads exactly one version, the one pinned in the configuration it was bound with,
//! and only after its health check for that binding passed. Its statistics are never exact:
//! a plan kept for another run must not have folded a row count (`count(*)`) into a
//! constant. A scan that was not bound (kept plans hold scans unbound, so they pin no
//! version's rows) refuses to run.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::{DataFusionError, Result, ScalarValue, Statistics};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use datafusion::prelude::SessionConfig;

use super::health::{ReadPolicy, SharedHealth};
use super::index_filters::{exact_cast, Condition, IndexLookup, Operand};
use super::plans::leaf::{LeafExec, LeafScan};
use super::version_in;
use crate::capture::version::Published;
use crate::change::schema::TableSchema;
use crate::provider::crossing::through_datafusion;
use crate::sqlstate::{HasSqlState, SqlState};
use crate::state::current::TableSnapshot;
use crate::state::key::KeyBytes;

/// A scan planned against one schema of a table that finds another in the version it reads: a
/// DDL was followed between planning and reading. Running the statement again plans it
/// against the new schema.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the columns of {table} changed (schema version {version}) after this statement was planned; run it again")]
pub struct SchemaChanged {
    pub table: String,
    pub version: u32,
}

impl HasSqlState for SchemaChanged {
    /// `serialization_failure`: the statement may simply be run again.
    fn sqlstate(&self) -> SqlState {
        SqlState::T_R_SERIALIZATION_FAILURE
    }
}

/// What a scan reads, fixed when it is planned.
#[derive(Debug)]
pub(super) struct ScanTarget {
    pub source: String,
    pub published: Published,
    pub index: usize,
    pub table: Arc<TableSchema>,
    pub health: Option<SharedHealth>,
    /// The key values of each pushed key filter, whose intersection the scan reads (`None`:
    /// no key filter).
    pub keys: Option<Vec<Vec<Operand>>>,
    /// Without key filters, the pushed filters an index answers.
    pub by_index: Option<IndexLookup>,
    /// The pushed filters neither lookup uses, applied to the rows read.
    pub conditions: Vec<Condition>,
    pub projection: Option<Vec<usize>>,
    pub limit: Option<usize>,
    /// Output partitions, chosen at planning and kept for every run.
    pub partitions: usize,
    pub batch_size: usize,
}

impl ScanTarget {
    /// The rows this scan reads under `config` (its pinned versions and read policy), dealt
    /// over [`ScanTarget::partitions`] partitions.
    fn read(&self, config: &SessionConfig) -> Result<Vec<Vec<RecordBatch>>> {
        let version = version_in(config, &self.source, &self.published);
        if let Some(health) = &self.health {
            let stop = version.stopped.get(&self.index);
            let shown = self.table.id.to_string();
            health.check(config, &self.source, &self.table.id, &shown, stop)?;
        }
        let Some(snap) = version.tables.get(self.index) else {
            return Ok(vec![Vec::new(); self.partitions]);
        };
        if snap.schema().arrow != self.table.arrow {
            return Err(through_datafusion(SchemaChanged {
                table: self.table.id.to_string(),
                version: snap.schema().version,
            }));
        }
        let batches = match (&self.keys, &self.by_index) {
            (Some(sets), _) => {
                let mut values: Option<Vec<ScalarValue>> = None;
                for set in sets {
                    let set = set
                        .iter()
                        .map(|v| v.value(config))
                        .collect::<Result<Vec<_>>>()?;
                    values = Some(match values {
                        None => set,
                        Some(prev) => prev.into_iter().filter(|v| set.contains(v)).collect(),
                    });
                }
                let mut keys = Vec::new();
                for v in values.unwrap_or_default() {
                    if let Some(key) = key_bytes(snap, std::slice::from_ref(&v))? {
                        keys.push(key);
                    }
                }
                vec![snap.lookup(&keys)?]
            }
            (None, Some(lookup)) => {
                let use_index = config
                    .get_extension::<ReadPolicy>()
                    .is_none_or(|p| p.indexes);
                lookup.rows(snap, config, use_index)?
            }
            (None, None) => snap.scan_all()?,
        };
        let mut batches = batches;
        for condition in &self.conditions {
            batches = condition.apply(batches, config)?;
        }
        Ok(deal(batches, self.partitions, self.batch_size))
    }
}

/// Cuts batches into slices of `batch_size` rows dealt over exactly `n` partitions (some may
/// stay empty), so that scans of a large table run in parallel; slicing shares the buffers.
pub(super) fn deal(
    batches: Vec<RecordBatch>,
    n: usize,
    batch_size: usize,
) -> Vec<Vec<RecordBatch>> {
    let n = n.max(1);
    let mut out = vec![Vec::new(); n];
    let mut i = 0;
    for batch in batches {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let len = batch_size.max(1).min(batch.num_rows() - offset);
            out[i % n].push(batch.slice(offset, len));
            offset += len;
            i += 1;
        }
    }
    out
}

/// A current-table scan as a plan (see the module docs).
pub type CurrentScanExec = LeafExec<CurrentScan>;

/// What a [`CurrentScanExec`] reads: a current table's rows at the version it is bound to.
#[derive(Debug)]
pub struct CurrentScan {
    target: Arc<ScanTarget>,
    /// The rows of the version this scan is bound to, by partition.
    bound: Option<Arc<Vec<Vec<RecordBatch>>>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl CurrentScanExec {
    /// A scan of `target`, bound to what it reads under `config`.
    pub(super) fn planned(target: ScanTarget, config: &SessionConfig) -> Result<Self> {
        let schema = match &target.projection {
            Some(p) => Arc::new(target.table.arrow.project(p)?),
            None => Arc::clone(&target.table.arrow),
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(target.partitions.max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        let bound = Some(Arc::new(target.read(config)?));
        Ok(LeafExec::new(CurrentScan {
            target: Arc::new(target),
            bound,
            schema,
            properties,
        }))
    }

    /// This scan bound to what it reads under `config`: the version pinned there, checked
    /// for health there. The plan's shape is unchanged.
    pub fn bind(&self, config: &SessionConfig) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(LeafExec::new(CurrentScan {
            target: Arc::clone(&self.target),
            bound: Some(Arc::new(self.target.read(config)?)),
            schema: Arc::clone(&self.schema),
            properties: Arc::clone(&self.properties),
        })))
    }

    /// This scan holding no rows, to be bound before it runs again.
    pub fn unbound(&self) -> Arc<dyn ExecutionPlan> {
        Arc::new(LeafExec::new(CurrentScan {
            target: Arc::clone(&self.target),
            bound: None,
            schema: Arc::clone(&self.schema),
            properties: Arc::clone(&self.properties),
        }))
    }
}

impl DisplayAs for CurrentScan {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "CurrentTableExec: table={}", self.target.table.id)?;
        if let Some(sets) = &self.target.keys {
            // The fewest any filter allows (all of them, for the one filter usual).
            let keys = sets.iter().map(Vec::len).min().unwrap_or(0);
            write!(f, ", keys={keys}")?;
        }
        if let Some(lookup) = &self.target.by_index {
            write!(f, ", {lookup}")?;
        }
        if !self.target.conditions.is_empty() {
            let shown: Vec<String> = self
                .target
                .conditions
                .iter()
                .map(|c| c.to_string())
                .collect();
            write!(f, ", where {}", shown.join(" and "))?;
        }
        if let Some(limit) = self.target.limit {
            write!(f, ", limit={limit}")?;
        }
        match &self.bound {
            Some(parts) => {
                let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
                write!(f, ", partition_sizes={sizes:?}")
            }
            None => write!(f, ", unbound"),
        }
    }
}

impl LeafScan for CurrentScan {
    fn name(&self) -> &'static str {
        "CurrentTableExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let Some(bound) = &self.bound else {
            return Err(DataFusionError::Internal(format!(
                "the scan of {} runs without being bound to a version",
                self.target.table.id
            )));
        };
        let batches = bound.get(partition).cloned().ok_or_else(|| {
            DataFusionError::Internal(format!(
                "CurrentTableExec has {} partitions, asked for {partition}",
                bound.len()
            ))
        })?;
        let stream = MemoryStream::try_new(
            batches,
            Arc::clone(&self.schema),
            self.target.projection.clone(),
        )?
        .with_fetch(self.target.limit);
        Ok(Box::pin(stream))
    }

    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        let mut stats = Statistics::new_unknown(&self.schema);
        if let Some(bound) = &self.bound {
            let rows: usize = match partition {
                Some(p) => bound
                    .get(p)
                    .map_or(0, |b| b.iter().map(RecordBatch::num_rows).sum()),
                None => bound.iter().flatten().map(RecordBatch::num_rows).sum(),
            };
            let rows = self.target.limit.map_or(rows, |l| rows.min(l));
            // Inexact on purpose: see the module docs.
            stats.num_rows = Precision::Inexact(rows);
        }
        Ok(Arc::new(stats))
    }
}

/// The key bytes of one value per primary-key column (in key order), each cast to its
/// column's type. `None` when the key selects nothing: a NULL, a value that does not fit its
/// column's type (a lossy cast, e.g. 1.5 to an integer, would find the wrong row), or a
/// number of values other than the key's.
pub fn key_bytes(snap: &TableSnapshot, values: &[ScalarValue]) -> Result<Option<KeyBytes>> {
    let schema = snap.schema();
    if values.len() != schema.primary_key.len() {
        return Ok(None);
    }
    let mut columns = Vec::with_capacity(values.len());
    for (v, &k) in values.iter().zip(&schema.primary_key) {
        let Some(cast) = exact_cast(v, schema.arrow.field(k).data_type()) else {
            return Ok(None);
        };
        columns.push(cast.to_array()?);
    }
    let rows = snap.codec().encode_keys(&columns)?;
    Ok(Some(rows.row(0).as_ref().into()))
}

/// The row under one primary key (one value per key column, see [`key_bytes`]) in `snap`,
/// as a batch of the table's schema with at most one row.
pub fn lookup_key(snap: &TableSnapshot, values: &[ScalarValue]) -> Result<RecordBatch> {
    match key_bytes(snap, values)? {
        Some(key) => Ok(snap.lookup(&[key])?),
        None => Ok(RecordBatch::new_empty(Arc::clone(&snap.schema().arrow))),
    }
}
