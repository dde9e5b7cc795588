//! A scan of changelog segments some of which are spilled to the state store, as a DataFusion
//! [`ExecutionPlan`]: one partition that reads the segments in order, spilled ones back from
//! the store a group at a time.
//!
//! # Invariant
//! The plan yields exactly the entries of its segments, in order, or an error: a segment that
//! cannot be read back ends the scan with the store's error, never with a shorter history. Only
//! one group of read-back entries is held at a time, so a scan of a long history does not bring
//! the history back into memory.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};

use crate::state::changelog::{read_segments, ChangelogSegment};

/// See the module docs.
#[derive(Debug)]
pub struct SegmentsExec {
    segments: Vec<Arc<ChangelogSegment>>,
    projection: Option<Vec<usize>>,
    limit: Option<usize>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl SegmentsExec {
    /// Reads `segments` of a changelog whose schema is `full`, projected and limited.
    pub fn try_new(
        segments: Vec<Arc<ChangelogSegment>>,
        full: &SchemaRef,
        projection: Option<&Vec<usize>>,
        limit: Option<usize>,
    ) -> Result<Self> {
        let schema = match projection {
            Some(p) => Arc::new(full.project(p)?),
            None => Arc::clone(full),
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(Self {
            segments,
            projection: projection.cloned(),
            limit,
            schema,
            properties: Arc::new(properties),
        })
    }
}

impl DisplayAs for SegmentsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let spilled = self.segments.iter().filter(|s| s.is_spilled()).count();
        write!(
            f,
            "SegmentsExec: segments={}, spilled={spilled}",
            self.segments.len()
        )?;
        if let Some(limit) = self.limit {
            write!(f, ", limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for SegmentsExec {
    fn name(&self) -> &str {
        "SegmentsExec"
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
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "SegmentsExec has no children".into(),
            ))
        }
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "SegmentsExec has one partition, asked for {partition}"
            )));
        }
        let projection = self.projection.clone();
        let mut left = self.limit.unwrap_or(usize::MAX);
        let batches = read_segments(self.segments.clone())
            .map_err(|e| DataFusionError::External(Box::new(e)))
            .and_then(move |batch| {
                let projected = match &projection {
                    Some(p) => batch.project(p).map_err(DataFusionError::from),
                    None => Ok(batch),
                };
                futures::future::ready(projected)
            })
            .take_while(move |batch| {
                let go = left > 0;
                if let Ok(b) = batch {
                    left = left.saturating_sub(b.num_rows());
                }
                futures::future::ready(go)
            });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            batches,
        )))
    }
}
