//! Reading a Delta target back, for reconciliation.
//!
//! # Invariant
//! The marker and the rows come from one loaded version of the table: the sink's `txn`
//! version and commit info as of that version, and the files that version lists. Delta
//! versions are atomic, so the rows are exactly what the table held at that marker, whatever
//! is committed meanwhile.

use datafusion::prelude::SessionContext;

use super::super::error::SinkError;
use super::super::target::{TargetLayout, TargetRows};
use super::{classify, DeltaTarget};

impl DeltaTarget {
    /// See [`super::super::target::Target::read`] and the module docs.
    pub(super) async fn read_rows(&self, layout: &TargetLayout) -> Result<TargetRows, SinkError> {
        if !self.has_log().await? {
            return Ok(TargetRows::default());
        }
        let what = self.what();
        let mut table = self.builder()?.build().map_err(|e| classify(&what, e))?;
        table.load().await.map_err(|e| classify(&what, e))?;
        let Some(committed) = self.marker(&table, &layout.sink).await? else {
            return Ok(TargetRows::default());
        };
        let ctx = SessionContext::new();
        table
            .update_datafusion_session(&ctx.state())
            .map_err(|e| classify(&what, e))?;
        let provider = table
            .table_provider()
            .await
            .map_err(|e| SinkError::Input(format!("reading {what}: {e}")))?;
        let rows = ctx
            .read_table(provider)
            .map_err(|e| SinkError::Input(format!("reading {what}: {e}")))?
            .collect()
            .await
            .map_err(|e| SinkError::Input(format!("reading {what}: {e}")))?;
        Ok(TargetRows {
            committed: Some(committed),
            rows,
        })
    }
}
