//! The changelog of one table: append-only Arrow batches of whole source transactions, held
//! in segments ([`segments`]: in memory, or read back from the state store once spilled).
//!
//! # Invariants
//! * Entries are appended in the order the capture emits them: the hand-off changelog sorted by
//!   position, then each later transaction in binlog order. A plain `ORDER BY _position` sorts
//!   them in source order; no two entries share a `_position` (snapshot entries are numbered
//!   within their HIGH, see `capture::handoff`).
//! * Entries are immutable once appended; readers take a prefix (the segments published at a
//!   position) and never see a later append or half a transaction.
//!
//! [`format`] owns the entries' row format (the columns are described there) and reads it;
//! [`batch`] builds the entries' Arrow batches, [`streamed`]
//! those of changes applied after the hand-off straight from their images;
//! [`segments`] holds them; [`adapt`] reads entries written under several schemas of the table
//! as one table.

mod adapt;
mod batch;
pub mod format;
mod from_images;
mod segments;

pub use adapt::{adapt, reads_exactly, union_schema, union_schema_after};
pub use batch::{changelog_batch, chunk_batch, display_columns, transaction_batches};
pub use format::{
    changelog_schema, ChangelogRows, COMMIT_TS_COLUMN, META_COLUMNS, POSITION_COLUMN, TX_COLUMN,
};
pub use from_images::streamed_batch;
pub use segments::{
    adapted, read_segments, Changelog, ChangelogSegment, ChunkSegment, SegmentStore,
    StoredSegmentError, Trimmed, MERGE_FANOUT,
};
