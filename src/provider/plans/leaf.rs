//! What every execution plan without inputs answers alike.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::ExecutionPlan;

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
