//! A sink's query planned and its target named, as its runner starts them and as
//! reconciliation against the sink does again.
//!
//! # Invariant
//! The query is planned as planned (not optimised) and checked by `SinkQuery::analyze`, so a
//! sink is maintained, and reconciled, over exactly the plan the checks accepted.

use datafusion::error::DataFusionError;
use datafusion::execution::session_state::SessionState;

use super::limits;
use crate::sinks::{
    DeltaTarget, ParquetTarget, PostgresTarget, SinkError, SinkQuery, Target, TargetSpec,
};
use crate::sql::CreateSink;

/// Plans `create`'s query in `state` (as planned, not optimised) and checks it.
pub(super) async fn plan_query(
    state: &SessionState,
    create: &CreateSink,
) -> Result<SinkQuery, SinkError> {
    limits::check_nesting(&create.query).map_err(|e| SinkError::Invalid(e.to_string()))?;
    let plan = state
        .create_logical_plan(&create.query)
        .await
        .map_err(|e| match e {
            DataFusionError::Plan(_)
            | DataFusionError::SQL(..)
            | DataFusionError::SchemaError(..) => {
                SinkError::Invalid(format!("the sink's query: {e}"))
            }
            other => SinkError::Input(format!("planning the sink's query: {other}")),
        })?;
    SinkQuery::analyze(plan, create.options.mode)
}

/// The target a statement names, not yet opened.
pub(super) fn target_of(spec: &TargetSpec) -> Result<Box<dyn Target>, SinkError> {
    match spec {
        TargetSpec::Delta { url } => Ok(Box::new(DeltaTarget::new(url)?)),
        TargetSpec::Parquet { url } => Ok(Box::new(ParquetTarget::new(url)?)),
        TargetSpec::Postgres { url, table } => Ok(Box::new(PostgresTarget::new(url, table)?)),
    }
}
