//! The DataFusion execution plans that read the source server itself rather than captured
//! state: a snapshot's chunks as the partitions of one plan ([`SnapshotExec`]), and one
//! table's binlog changes as an unbounded stream ([`BinlogStreamExec`]).
//!
//! # Invariant
//! These plans only adapt: the chunk protocol and the binlog decoding live in `source`, which
//! knows nothing of DataFusion, so the capture and a query read a chunk or a change the same way.

mod binlog;
mod snapshot;

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::ExecutionPlan;

pub use binlog::BinlogStreamExec;
pub use snapshot::SnapshotExec;

/// `with_new_children` of a plan that reads no other plan: itself, given no children.
pub(crate) fn leaf(
    plan: Arc<dyn ExecutionPlan>,
    children: Vec<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if children.is_empty() {
        Ok(plan)
    } else {
        Err(DataFusionError::Internal(format!(
            "{} has no children",
            plan.name()
        )))
    }
}
