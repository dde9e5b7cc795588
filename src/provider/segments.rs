//! A scan of changelog segments some of which are spilled to the state store: one
//! [`PartitionStream`] that reads the segments in order, spilled ones back from the store a
//! group at a time, planned as DataFusion's `StreamingTableExec` (which projects and limits).
//!
//! # Invariant
//! The stream yields exactly the entries of its segments, in order, or an error: a segment that
//! cannot be read back ends the scan with the store's error, never with a shorter history. Only
//! one group of read-back entries is held at a time, so a scan of a long history does not bring
//! the history back into memory.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::ExecutionPlan;
use futures::TryStreamExt;

use crate::provider::crossing::through_datafusion;
use crate::state::changelog::{read_segments, ChangelogSegment};

/// See the module docs.
#[derive(Debug)]
struct Segments {
    segments: Vec<Arc<ChangelogSegment>>,
    schema: SchemaRef,
}

impl PartitionStream for Segments {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let batches = read_segments(self.segments.clone(), Arc::clone(&self.schema))
            .map_err(through_datafusion);
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            batches,
        ))
    }
}

/// A plan reading `segments` of a changelog whose schema is `full`, projected and limited.
pub fn segments_scan(
    segments: Vec<Arc<ChangelogSegment>>,
    full: &SchemaRef,
    projection: Option<&Vec<usize>>,
    limit: Option<usize>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let partition = Segments {
        segments,
        schema: Arc::clone(full),
    };
    Ok(Arc::new(StreamingTableExec::try_new(
        Arc::clone(full),
        vec![Arc::new(partition)],
        projection,
        [],
        false,
        limit,
    )?))
}
