//! The snapshot of one table as a DataFusion `ExecutionPlan`: one partition per chunk.
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

use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, Partitioning, PlanProperties};

use super::leaf::{LeafExec, LeafScan};

use crate::provider::crossing::through_datafusion;
use crate::source::snapshot::incremental::SnapshotRun;

/// Chunks listed by a default `EXPLAIN`; `EXPLAIN VERBOSE` lists all.
const LISTED_CHUNKS: usize = 8;

/// The snapshot of one table as a plan; see the module docs.
pub type SnapshotExec = LeafExec<SnapshotChunks>;

/// What a [`SnapshotExec`] reads: the chunks of one table of a snapshot run.
#[derive(Debug)]
pub struct SnapshotChunks {
    run: Arc<SnapshotRun>,
    /// Index of the table in the run.
    table: usize,
    properties: Arc<PlanProperties>,
}

impl SnapshotExec {
    pub fn of_table(run: Arc<SnapshotRun>, table: usize) -> Self {
        let planned = &run.tables()[table];
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&planned.schema.arrow)),
            Partitioning::UnknownPartitioning(planned.ranges.len()),
            // A chunk is complete only once its window is folded in.
            EmissionType::Final,
            Boundedness::Bounded,
        );
        LeafExec::new(SnapshotChunks {
            run,
            table,
            properties: Arc::new(properties),
        })
    }
}

impl SnapshotChunks {
    pub fn run(&self) -> &Arc<SnapshotRun> {
        &self.run
    }

    pub fn table(&self) -> usize {
        self.table
    }
}

impl DisplayAs for SnapshotChunks {
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

impl LeafScan for SnapshotChunks {
    fn name(&self) -> &'static str {
        "SnapshotExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let run = Arc::clone(&self.run);
        let table = self.table;
        let rows = futures::stream::once(async move {
            run.read_chunk(table, partition)
                .await
                .map_err(through_datafusion)
        });
        let schema = self.properties.eq_properties.schema();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(schema),
            rows,
        )))
    }
}
