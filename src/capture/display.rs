//! Changelog entries of a capture as flat Arrow batches, for printing and tests: the
//! changelog's own rendering (`state::changelog::changelog_batch`) without `_tx`, `_table`
//! and `_before`.

use arrow::array::RecordBatch;

use super::{Capture, TableChange};
use crate::change::schema::TableId;
use crate::source::error::{SourceError, SourceResult};
use crate::state::changelog::{changelog_batch, changelog_schema, display_columns};
use crate::state::merge::ChangelogEvent;

impl Capture {
    /// Changelog entries as one batch per table, for display: `_op`, `_position`, `_gtid`,
    /// `_commit_ts`, then the row (the after image; the deleted row for deletes).
    pub fn changelog_batches(
        &self,
        changes: &[TableChange],
    ) -> SourceResult<Vec<(TableId, RecordBatch)>> {
        let mut out = Vec::new();
        for (t, table) in self.tables.iter().enumerate() {
            let events: Vec<&ChangelogEvent> = changes
                .iter()
                .filter(|c| c.table == t)
                .map(|c| &c.event)
                .collect();
            if events.is_empty() {
                continue;
            }
            let codec = self.states[t].codec();
            let rendered = changelog_batch(
                codec,
                &changelog_schema(&table.arrow),
                &events,
                &vec![0; events.len()],
            )
            .and_then(|segment| display_columns(&segment))
            .map_err(|e| {
                SourceError::Internal(format!("rendering the changelog of {}: {e}", table.id))
            })?;
            out.push((table.id.clone(), rendered));
        }
        Ok(out)
    }
}
