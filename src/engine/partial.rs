//! `visible_during_snapshot`: the chunks of an initial snapshot are queryable as they finish.
//!
//! # Invariant
//! Until the hand-off publishes the source's first consistent version, a source created with
//! `visible_during_snapshot = true` publishes versions marked `consistent = false` and without
//! a position: each table holds the rows of its chunks done so far, every chunk being the
//! table's state at its own HIGH within its range (a transaction boundary), so no query sees
//! half a source transaction inside a chunk; across chunks the table is a mix of positions, and
//! `cdc.tables.complete` says so. Changelogs stay empty until the hand-off. All of this is
//! published from inside the snapshot, before the hand-off's version, which replaces it.

use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;

use super::source_status::SourceStatus;
use crate::capture::version::{Published, SourceVersion};
use crate::change::keys::RowCodec;
use crate::change::schema::TableSchema;
use crate::locks::Locked;
use crate::source::snapshot::incremental::SnapshotChunk;
use crate::source::snapshot::journal::{PlannedChunk, SnapshotJournal};
use crate::state::current::{CurrentTable, TableSnapshot};

/// Publishes the chunks done so far; see the module docs.
#[derive(Debug)]
pub(super) struct PartialView {
    published: Published,
    status: Arc<Mutex<SourceStatus>>,
    state: Mutex<Partial>,
}

#[derive(Debug, Default)]
struct Partial {
    tables: Vec<PartialTable>,
}

#[derive(Debug)]
struct PartialTable {
    codec: Arc<RowCodec>,
    /// The rows of the chunks done so far: each chunk is added as a change of its rows only
    /// (O(chunk)), and publishing shares the rest, as a binlog transaction's version does.
    current: CurrentTable,
    shown: TableSnapshot,
}

impl PartialView {
    pub(super) fn new(published: Published, status: Arc<Mutex<SourceStatus>>) -> Self {
        Self {
            published,
            status,
            state: Mutex::default(),
        }
    }

    fn publish(&self, partial: &Partial) {
        self.published.store(Arc::new(SourceVersion {
            position: None,
            consistent: false,
            tables: partial.tables.iter().map(|t| t.shown.clone()).collect(),
            changelogs: Vec::new(),
            stopped: Arc::default(),
            schema_history: Arc::default(),
            gtids: None,
        }));
    }
}

/// An empty table for `schema`; `None` when its rows cannot be keyed (the capture itself
/// reports that).
fn empty(schema: &Arc<TableSchema>) -> Option<PartialTable> {
    let codec = Arc::new(RowCodec::new(Arc::clone(schema)).ok()?);
    let rows = RecordBatch::new_empty(Arc::clone(&schema.arrow));
    let current = CurrentTable::new(Arc::clone(&codec), &rows).ok()?;
    Some(PartialTable {
        codec,
        shown: TableSnapshot::of(&current),
        current,
    })
}

impl PartialTable {
    /// Adds a chunk's rows. A key already shown (a row that moved into a later chunk) takes
    /// the later chunk's row; identical rows of a keyless table add up.
    fn add(&mut self, rows: &RecordBatch) -> Result<(), arrow::error::ArrowError> {
        let (keys, full) = self.codec.encode(rows)?;
        let keyless = self.codec.keyless();
        for i in 0..rows.num_rows() {
            let key = keys.row(i);
            let count = if keyless {
                self.current.count(key.as_ref()) + 1
            } else {
                1
            };
            self.current
                .put(key.as_ref(), Some((Arc::new(full.row(i).owned()), count)));
        }
        self.shown = self.current.snapshot(None)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl SnapshotJournal for PartialView {
    async fn planned(&self, tables: &[Arc<TableSchema>], _plan: &[PlannedChunk]) {
        let mut partial = self.state.locked();
        let Some(shown) = tables.iter().map(empty).collect::<Option<Vec<_>>>() else {
            return;
        };
        partial.tables = shown;
        // The tables are listed from now on (empty until their first chunk is done).
        self.status.locked().set_tables(tables.to_vec());
        self.publish(&partial);
    }

    async fn done(&self, chunk: &SnapshotChunk) {
        let mut partial = self.state.locked();
        let Some(table) = partial.tables.get_mut(chunk.table) else {
            return;
        };
        // Only the partial view is affected by a failure here; the hand-off builds the state
        // on its own.
        if let Err(e) = table.add(&chunk.rows) {
            tracing::warn!(error = %e, "showing a snapshot chunk failed");
            return;
        }
        self.publish(&partial);
    }
}
