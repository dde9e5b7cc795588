//! The snapshot of one table as a DataFusion [`ExecutionPlan`]: one partition per chunk.
//!
//! # Invariant
//! Partition `i` yields exactly the rows of chunk `i` normalised to that chunk's HIGH (the
//! table's state at HIGH within the chunk's range): executing a partition runs the whole chunk
//! protocol of [`SnapshotRun::read_chunk`]. Partitions of one plan therefore describe different
//! positions; only a hand-off (the capture, or the consistent read behind `mysql_snapshot`)
//! makes their union a state at one position.
//!
//! `EXPLAIN` shows the table, chunk key, method and every chunk's range; after execution
//! (`EXPLAIN ANALYZE`) each finished chunk's HIGH as well.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use crate::source::snapshot::incremental::SnapshotRun;

/// Chunks listed by a default `EXPLAIN`; `EXPLAIN VERBOSE` lists all.
const LISTED_CHUNKS: usize = 8;

/// See the module docs.
#[derive(Debug)]
pub struct SnapshotExec {
    run: Arc<SnapshotRun>,
    /// Index of the table in the run.
    table: usize,
    properties: Arc<PlanProperties>,
}

impl SnapshotExec {
    pub fn new(run: Arc<SnapshotRun>, table: usize) -> Self {
        let planned = &run.tables()[table];
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&planned.schema.arrow)),
            Partitioning::UnknownPartitioning(planned.ranges.len()),
            // A chunk is complete only once its window is folded in.
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Self {
            run,
            table,
            properties: Arc::new(properties),
        }
    }

    pub fn run(&self) -> &Arc<SnapshotRun> {
        &self.run
    }

    pub fn table(&self) -> usize {
        self.table
    }
}

impl DisplayAs for SnapshotExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let planned = &self.run.tables()[self.table];
        let key = planned.key.map_or("none (one chunk)", |k| {
            planned.schema.columns[k].name.as_str()
        });
        write!(
            f,
            "SnapshotExec: table={}, chunk_key={key}, method={}, chunks={}",
            planned.schema.id,
            self.run.method(),
            planned.ranges.len()
        )?;
        let listed = match t {
            DisplayFormatType::Verbose => planned.ranges.len(),
            _ => LISTED_CHUNKS.min(planned.ranges.len()),
        };
        f.write_str(": ")?;
        for (i, range) in planned.ranges.iter().take(listed).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(&range.describe())?;
            if let Some(high) = self.run.chunk_high(self.table, i) {
                write!(f, " HIGH {high}")?;
            }
        }
        if listed < planned.ranges.len() {
            write!(f, ", ... {} more", planned.ranges.len() - listed)?;
        }
        Ok(())
    }
}

impl ExecutionPlan for SnapshotExec {
    fn name(&self) -> &str {
        "SnapshotExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        super::leaf::leaf(self, children)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let chunks = self.run.tables()[self.table].ranges.len();
        if partition >= chunks {
            return Err(DataFusionError::Internal(format!(
                "SnapshotExec has {chunks} partitions, asked for {partition}"
            )));
        }
        let run = Arc::clone(&self.run);
        let table = self.table;
        let rows = futures::stream::once(async move {
            run.read_chunk(table, partition)
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema(), rows)))
    }
}
