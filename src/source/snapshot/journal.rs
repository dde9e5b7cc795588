//! Journaling a snapshot's progress, so an interrupted snapshot reads only the chunks it had
//! not finished.
//!
//! # Argument
//! A [`SnapshotJournal`] is told the chunk plan and every chunk as it is done (normalised to its
//! HIGH); a [`SnapshotResume`] gives back that plan and the chunks done, and only the others are
//! read. This is exact because a done chunk is the table's state at its own HIGH within its
//! range whenever it was read, the plan's ranges still cover every key, and the hand-off reads
//! the binlog from the smallest HIGH of all chunks, old and new: the per-key version merge sees
//! the same chunks it would have seen without the interruption.

use std::sync::Arc;

use super::chunks::{ChunkRange, SnapshotChunk};
use crate::change::schema::{TableId, TableSchema};

/// Records the snapshot's progress (a durable source keeps it in its state store).
#[async_trait::async_trait]
pub trait SnapshotJournal: Send + Sync + std::fmt::Debug {
    /// The chunks the snapshot will read, before any is read.
    async fn planned(&self, tables: &[Arc<TableSchema>], plan: &[PlannedChunk]);
    /// A chunk is done.
    async fn done(&self, chunk: &SnapshotChunk);
}

/// The progress of an interrupted snapshot: its plan and the chunks it finished.
#[derive(Debug, Clone)]
pub struct SnapshotResume {
    /// The tables the plan is for, in order; a resume for other tables is ignored.
    pub tables: Vec<TableId>,
    pub plan: Vec<PlannedChunk>,
    pub done: Vec<SnapshotChunk>,
}

/// A chunk to read: table (index into the snapshot's tables), chunk index, chunk key column
/// and range.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedChunk {
    pub table: usize,
    pub index: usize,
    pub key: usize,
    pub range: ChunkRange,
}
