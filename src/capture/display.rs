//! Changelog entries of a capture as flat Arrow batches, for printing and tests.
//!
//! The rows are the entries' after images (the deleted row for deletes), behind `_op`,
//! `_position`, `_gtid` and `_commit_ts`: the shape the changelog tables show.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

use super::{Capture, TableChange};
use crate::source::error::{SourceError, SourceResult};
use crate::source::schema::TableId;
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
            let rows = events.iter().map(|e| {
                e.after
                    .as_ref()
                    .or(e.before.as_ref())
                    .expect("an event has an image")
            });
            let image = self.states[t]
                .codec()
                .decode(rows)
                .map_err(|e| SourceError::Config(format!("decoding changelog rows: {e}")))?;
            let ts: Vec<Option<i64>> = events
                .iter()
                .map(|e| (e.commit_ts_micros > 0).then_some(e.commit_ts_micros))
                .collect();
            let mut fields = vec![
                Field::new("_op", DataType::Utf8, false),
                Field::new("_position", DataType::Utf8, false),
                Field::new("_gtid", DataType::Utf8, true),
                Field::new(
                    "_commit_ts",
                    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                    true,
                ),
            ];
            fields.extend(image.schema().fields().iter().map(|f| f.as_ref().clone()));
            let mut columns: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from_iter_values(
                    events.iter().map(|e| e.op.code()),
                )),
                Arc::new(StringArray::from_iter_values(
                    events.iter().map(|e| e.position.to_string()),
                )),
                Arc::new(StringArray::from_iter(
                    events
                        .iter()
                        .map(|e| e.gtid.as_ref().map(ToString::to_string)),
                )),
                Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
            ];
            columns.extend(image.columns().iter().cloned());
            let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
                .map_err(|e| SourceError::Config(format!("building a changelog batch: {e}")))?;
            out.push((table.id.clone(), batch));
        }
        Ok(out)
    }
}
