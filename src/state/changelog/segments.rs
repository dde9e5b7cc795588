//! The segments of a changelog: runs of whole transactions, held in memory or, once written to
//! the state store and past the source's memory budget, read back from it.
//!
//! # Appending
//! The capture appends one segment per source transaction (and one per snapshot chunk). A
//! stream of small transactions would leave one segment, with its arrays and ranges, per
//! transaction: segments at the tail of one size class are merged once [`MERGE_FANOUT`] of them
//! follow each other, so an entry is copied a few times at most and a long history of
//! single-row transactions costs one segment per thousands of entries.
//!
//! # Snapshot chunks
//! A chunk's `r` entries are its rows, which the current table holds too. Its segment keeps the
//! chunk ([`ChunkSegment`]) and builds the metadata columns (positions, ops, empty before
//! images) only when read: built eagerly, they took more memory than the rows themselves.
//!
//! # Spilling
//! A segment's entries never change, but where they are held may, once: a durable source whose
//! changelogs outgrow their budget has the checkpointer move the oldest segments already in its
//! checkpoint files out of memory ([`ChangelogSegment::spill`]). Such a segment reads its entries
//! back through a [`SegmentStore`] by its position range. Every version that shares the segment
//! sees the same entries either way, so spilling needs no new version.
//!
//! # Trimming
//! Retention (`state::retention`) removes whole segments from the front. The entries removed
//! are still counted ([`Trimmed`]): offsets are absolute, entry `n` is the `n`-th entry ever
//! appended, so checkpoints, sinks and tails that count by offset are not moved by a trim.
//!
//! # Invariants
//! * The rows of a changelog, segment after segment, are its entries in append order; merging
//!   segments neither reorders nor drops one, and trimming drops only a prefix while keeping
//!   its count, so a row offset names the same entry in every later version (what
//!   checkpoints and tails count by).
//! * A segment is spilled only when every one of its entries is in the state store.
//! * A read-back segment gives exactly its own entries, or an error; never a partial history.

use std::fmt::Debug;
use std::sync::{Arc, RwLock};

use arrow::array::{AsArray, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::{Schema, SchemaRef, TimestampMicrosecondType, UInt64Type};
use arrow::error::ArrowError;
use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};

use arrow::row::OwnedRow;

use super::adapt::{adapt, union_schema_after};
use super::batch::chunk_batch;
use super::format::{changelog_schema, COMMIT_TS_COLUMN, POSITION_COLUMN, TX_COLUMN};
use crate::change::keys::RowCodec;
use crate::change::position::{BinlogCoord, ChangePosition};
use crate::locks::RwLocked;
use crate::sqlstate::{HasSqlState, SqlState};
use crate::state::handoff::ChunkEntries;

/// Segments of one size class merge once this many follow each other at the tail.
pub const MERGE_FANOUT: usize = 32;
/// Segments of at least this many entries are never merged.
const MERGE_MAX_ROWS: usize = 32 * 1024;
/// Entries read back from the store in one request, at most (beyond one segment's own).
const READ_GROUP_ROWS: usize = 256 * 1024;

/// Entries of a spilled segment could not be read back. Decided by the store that failed:
/// `transient` (the store did not answer; the same query may succeed later) or not (a file is
/// missing or damaged).
#[derive(Debug, thiserror::Error)]
#[error("reading changelog entries back from the state store: {message}")]
pub struct StoredSegmentError {
    pub message: String,
    pub sqlstate: SqlState,
    pub transient: bool,
}

impl StoredSegmentError {
    /// The store answered with other entries than the segment holds: the store is damaged.
    fn mismatch(expected: usize, found: usize, range: &(String, String)) -> Self {
        Self {
            message: format!(
                "{found} entries found between positions {} and {}, where {expected} were \
                 written; the state store is damaged",
                range.0, range.1
            ),
            sqlstate: SqlState::DATA_CORRUPTED,
            transient: false,
        }
    }
}

/// Where spilled segments of one table are read back from.
#[async_trait]
pub trait SegmentStore: Debug + Send + Sync {
    /// The entries whose positions lie in each of `ranges` (inclusive, ascending, disjoint),
    /// in position order.
    async fn read(
        &self,
        ranges: &[(String, String)],
    ) -> Result<Vec<RecordBatch>, StoredSegmentError>;
}

/// A snapshot chunk's entries held as the chunk itself: its rows (shared with the current
/// table) and the before images of its `u` entries. The metadata columns (positions, ops,
/// null images) would take more memory than the rows; they are built when the segment is read.
#[derive(Debug)]
pub struct ChunkSegment {
    pub codec: Arc<RowCodec>,
    pub schema: SchemaRef,
    pub entries: ChunkEntries,
    pub high: BinlogCoord,
    /// The row ordinal of its first entry within `high`.
    pub first: u32,
}

impl ChunkSegment {
    fn build(&self) -> Result<RecordBatch, StoredSegmentError> {
        chunk_batch(
            &self.codec,
            &self.schema,
            &self.entries,
            &self.high,
            self.first,
        )
        .map_err(|e| StoredSegmentError {
            message: format!("building the changelog of a snapshot chunk: {e}"),
            sqlstate: SqlState::INTERNAL_ERROR,
            transient: false,
        })
    }
}

/// Where a segment's entries are held.
#[derive(Debug, Clone)]
enum Held {
    Memory(RecordBatch),
    Chunk(Arc<ChunkSegment>),
    Store(Arc<dyn SegmentStore>),
}

impl Held {
    /// The entries when held in memory (a chunk's are built now).
    fn in_memory(&self) -> Result<Option<RecordBatch>, StoredSegmentError> {
        match self {
            Held::Memory(batch) => Ok(Some(batch.clone())),
            Held::Chunk(chunk) => chunk.build().map(Some),
            Held::Store(_) => Ok(None),
        }
    }
}

/// A run of whole transactions of one table, with the ranges it covers, for pruning.
#[derive(Debug)]
pub struct ChangelogSegment {
    held: RwLock<Held>,
    pub rows: usize,
    /// Arrow memory of the entries while they are held in memory.
    pub bytes: usize,
    pub min_position: String,
    pub max_position: String,
    /// Commit times (µs), `None` for snapshot reads only.
    pub min_commit_ts: Option<i64>,
    pub max_commit_ts: Option<i64>,
    /// The largest `_tx` of its entries.
    pub max_tx: u64,
}

impl ChangelogSegment {
    /// A segment of `batch` whose position and commit-time ranges the caller knows.
    pub fn new(
        batch: RecordBatch,
        min_position: String,
        max_position: String,
        min_commit_ts: Option<i64>,
        max_commit_ts: Option<i64>,
    ) -> Self {
        let tx = batch.column(TX_COLUMN).as_primitive::<UInt64Type>();
        Self {
            rows: batch.num_rows(),
            bytes: batch.get_array_memory_size(),
            max_tx: tx.iter().flatten().max().unwrap_or(0),
            min_position,
            max_position,
            min_commit_ts,
            max_commit_ts,
            held: RwLock::new(Held::Memory(batch)),
        }
    }

    /// The segment of one applied snapshot chunk (see [`ChunkSegment`]), whose entries are at
    /// positions `(high, 0, first + i, 0)`.
    pub fn of_chunk(chunk: ChunkSegment) -> Self {
        let n = chunk.entries.len() as u32;
        let text = |row: u32| {
            let mut s = String::new();
            // Writing to a String cannot fail.
            let _ = ChangePosition::write_text(&mut s, &chunk.high, 0, row, 0);
            s
        };
        let (min_position, max_position) = match n {
            0 => (String::new(), String::new()),
            _ => (text(chunk.first), text(chunk.first + n - 1)),
        };
        // The rows are the current table's; only the before images are this segment's own.
        let bytes = std::mem::size_of::<ChunkSegment>()
            + chunk
                .entries
                .before
                .iter()
                .map(|(_, row)| row.as_ref().len() + std::mem::size_of::<(u32, OwnedRow)>())
                .sum::<usize>();
        Self {
            rows: n as usize,
            bytes,
            max_tx: 0,
            min_position,
            max_position,
            min_commit_ts: None,
            max_commit_ts: None,
            held: RwLock::new(Held::Chunk(Arc::new(chunk))),
        }
    }

    /// A segment of a changelog batch (e.g. read back from a checkpoint), its ranges computed.
    pub fn of_batch(batch: RecordBatch) -> Self {
        let positions = batch.column(POSITION_COLUMN).as_string::<i32>();
        let min_position = positions.iter().flatten().min().unwrap_or_default();
        let max_position = positions.iter().flatten().max().unwrap_or_default();
        let ts = batch
            .column(COMMIT_TS_COLUMN)
            .as_primitive::<TimestampMicrosecondType>();
        let (min_ts, max_ts) = (ts.iter().flatten().min(), ts.iter().flatten().max());
        let (min_position, max_position) = (min_position.to_string(), max_position.to_string());
        Self::new(batch, min_position, max_position, min_ts, max_ts)
    }

    fn held(&self) -> Held {
        self.held.read_locked().clone()
    }

    /// The entries, when they are held in memory (a snapshot chunk's are built now).
    pub fn in_memory(&self) -> Result<Option<RecordBatch>, StoredSegmentError> {
        self.held().in_memory()
    }

    /// The entries when held as one batch as they are (not a chunk to build, not spilled).
    pub fn as_batch(&self) -> Option<RecordBatch> {
        match self.held() {
            Held::Memory(batch) => Some(batch),
            _ => None,
        }
    }

    pub fn is_spilled(&self) -> bool {
        matches!(self.held(), Held::Store(_))
    }

    /// Drops the entries from memory; from now on they are read from `store`, which must hold
    /// every one of them.
    pub fn spill(&self, store: Arc<dyn SegmentStore>) {
        *self.held.write_locked() = Held::Store(store);
    }

    fn range(&self) -> (String, String) {
        (self.min_position.clone(), self.max_position.clone())
    }

    /// The entries in `schema` (the changelog's, see `adapt`), read back from the store when
    /// spilled.
    pub async fn batch(&self, schema: &SchemaRef) -> Result<RecordBatch, StoredSegmentError> {
        let store = match self.held() {
            Held::Store(store) => store,
            Held::Memory(batch) => return adapted(batch, schema),
            Held::Chunk(chunk) => return adapted(chunk.build()?, schema),
        };
        let range = self.range();
        let batches = store.read(std::slice::from_ref(&range)).await?;
        let found: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if found != self.rows {
            return Err(StoredSegmentError::mismatch(self.rows, found, &range));
        }
        let batches = batches
            .into_iter()
            .map(|b| adapted(b, schema))
            .collect::<Result<Vec<_>, _>>()?;
        concat_batches(schema, &batches).map_err(|e| StoredSegmentError {
            message: e.to_string(),
            sqlstate: SqlState::INTERNAL_ERROR,
            transient: false,
        })
    }
}

/// `batch` brought to the changelog's `schema`; a value that cannot be read so is a definite
/// error.
pub fn adapted(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, StoredSegmentError> {
    adapt(batch, schema).map_err(|e| StoredSegmentError {
        message: e.to_string(),
        sqlstate: SqlState::DATA_EXCEPTION,
        transient: false,
    })
}

/// What a reader of some segments fetches in one step.
enum Part {
    /// A segment held in memory (a chunk's entries are built when the reader reaches it).
    Memory(Held),
    /// Consecutive spilled segments of one store: their ranges and entry count.
    Store(Arc<dyn SegmentStore>, Vec<(String, String)>, usize),
}

/// The entries of `segments`, in order and in `schema` (the changelog's), reading spilled ones
/// back in groups of consecutive segments; entries of at most one group are held at a time.
pub fn read_segments(
    segments: Vec<Arc<ChangelogSegment>>,
    schema: SchemaRef,
) -> BoxStream<'static, Result<RecordBatch, StoredSegmentError>> {
    let mut parts: Vec<Part> = Vec::new();
    for segment in segments {
        match segment.held() {
            held @ (Held::Memory(_) | Held::Chunk(_)) => parts.push(Part::Memory(held)),
            Held::Store(store) => match parts.last_mut() {
                Some(Part::Store(s, ranges, rows))
                    if Arc::ptr_eq(s, &store) && *rows + segment.rows <= READ_GROUP_ROWS =>
                {
                    ranges.push(segment.range());
                    *rows += segment.rows;
                }
                _ => parts.push(Part::Store(store, vec![segment.range()], segment.rows)),
            },
        }
    }
    stream::iter(parts)
        .then(|part| async move {
            match part {
                Part::Memory(held) => Ok(held.in_memory()?.into_iter().collect()),
                Part::Store(store, ranges, rows) => {
                    let batches = store.read(&ranges).await?;
                    let found: usize = batches.iter().map(RecordBatch::num_rows).sum();
                    if found != rows {
                        let span = (ranges[0].0.clone(), ranges[ranges.len() - 1].1.clone());
                        return Err(StoredSegmentError::mismatch(rows, found, &span));
                    }
                    Ok(batches)
                }
            }
        })
        .map_ok(|batches| stream::iter(batches.into_iter().map(Ok)))
        .try_flatten()
        .and_then(move |batch| std::future::ready(adapted(batch, &schema)))
        .boxed()
}

/// What retention removed from the front of a changelog: enough to keep offsets absolute and
/// to say where the retained history begins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Entries removed.
    pub rows: usize,
    /// The `_position` of the last entry removed.
    pub last_position: Option<String>,
    /// The latest commit time (µs) among the entries removed.
    pub max_commit_ts: Option<i64>,
}

/// The changelog of one table: segments appended by the capture, shared with readers.
#[derive(Debug, Clone)]
pub struct Changelog {
    /// What readers see: the union of every schema its entries were written under (see
    /// `adapt`); readers bring each batch to it.
    pub schema: SchemaRef,
    /// The schema new entries are written under: the changelog schema of the table's newest
    /// schema.
    pub written: SchemaRef,
    segments: imbl::Vector<Arc<ChangelogSegment>>,
    /// Entries ever appended, the trimmed ones included.
    rows: usize,
    trimmed: Trimmed,
    /// The largest `_tx` ever appended (numbering goes on after it even when trimmed).
    max_tx: u64,
}

/// The size class of a segment of `rows` entries: segments merge only within one class, so an
/// entry is copied once per class it climbs.
fn size_class(rows: usize) -> u32 {
    // Classes of MERGE_FANOUT× growth: 1..32, 32..1024, 1024..32768.
    (usize::BITS - rows.leading_zeros()).div_ceil(MERGE_FANOUT.trailing_zeros())
}

impl Changelog {
    pub fn new(table: &Schema) -> Self {
        let schema = changelog_schema(table);
        Self {
            written: Arc::clone(&schema),
            schema,
            segments: imbl::Vector::new(),
            rows: 0,
            trimmed: Trimmed::default(),
            max_tx: 0,
        }
    }

    /// This changelog, still empty, as one whose first `trimmed.rows` entries retention
    /// removed before (a checkpoint's changelog starts after what it trimmed); `max_tx` is
    /// the largest `_tx` given out.
    pub fn after_trimmed(self, trimmed: Trimmed, max_tx: u64) -> Self {
        debug_assert!(
            self.segments.is_empty(),
            "only an empty changelog starts later"
        );
        Self {
            rows: trimmed.rows,
            trimmed,
            max_tx,
            ..self
        }
    }

    /// From now on entries are written under `table` (a new schema of the table); the
    /// entries already held keep theirs and are read through the union.
    pub fn evolve(&mut self, table: &Schema) {
        let written = changelog_schema(table);
        self.schema = union_schema_after(&self.schema, &self.written, &written);
        self.written = written;
    }

    /// Appends `segment` (nothing when it is empty), then merges the tail if it has grown a
    /// run of small segments; see the module docs.
    pub fn append(&mut self, segment: ChangelogSegment) -> Result<(), ArrowError> {
        if segment.rows == 0 {
            return Ok(());
        }
        self.rows += segment.rows;
        self.max_tx = self.max_tx.max(segment.max_tx);
        self.segments.push_back(Arc::new(segment));
        self.merge_tail()
    }

    fn merge_tail(&mut self) -> Result<(), ArrowError> {
        let n = self.segments.len();
        if n < MERGE_FANOUT {
            return Ok(());
        }
        // Taken from the back: skipping to the tail walks every segment before it, and a
        // long history holds hundreds.
        let mut tail: Vec<&Arc<ChangelogSegment>> =
            self.segments.iter().rev().take(MERGE_FANOUT).collect();
        tail.reverse();
        let class = size_class(tail[0].rows);
        let rows: usize = tail.iter().map(|s| s.rows).sum();
        if rows >= MERGE_MAX_ROWS || tail.iter().any(|s| size_class(s.rows) != class) {
            return Ok(());
        }
        let held = tail
            .iter()
            .map(|s| s.in_memory())
            .collect::<Result<Vec<_>, _>>();
        let held = held.map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
        let Some(batches) = held.into_iter().collect::<Option<Vec<_>>>() else {
            // Spilled meanwhile: they stay as they are.
            return Ok(());
        };
        // Entries written under different schemas of the table stay in separate segments.
        let schema = batches[0].schema();
        if batches.iter().any(|b| b.schema() != schema) {
            return Ok(());
        }
        let merged = ChangelogSegment::new(
            concat_batches(&schema, &batches)?,
            tail[0].min_position.clone(),
            tail[MERGE_FANOUT - 1].max_position.clone(),
            tail.iter().filter_map(|s| s.min_commit_ts).min(),
            tail.iter().filter_map(|s| s.max_commit_ts).max(),
        );
        self.segments.truncate(n - MERGE_FANOUT);
        self.segments.push_back(Arc::new(merged));
        // The merged segment may complete a run of the next class.
        self.merge_tail()
    }

    /// A copy sharing every segment (O(1)): what a query reads.
    pub fn snapshot(&self) -> Changelog {
        self.clone()
    }

    pub fn segments(&self) -> impl Iterator<Item = &Arc<ChangelogSegment>> {
        self.segments.iter()
    }

    /// The segments holding entries `from..` (offsets count trimmed entries too; a `from`
    /// before the first retained entry starts at it: callers that must not miss entries check
    /// [`Self::trimmed`] first), with how many leading entries of the first one precede `from`.
    pub fn segments_from(&self, from: usize) -> (Vec<Arc<ChangelogSegment>>, usize) {
        let mut before = self.trimmed.rows;
        let mut out = Vec::new();
        for segment in &self.segments {
            if before + segment.rows <= from && out.is_empty() {
                before += segment.rows;
                continue;
            }
            out.push(Arc::clone(segment));
        }
        (out, from.saturating_sub(before))
    }

    /// Entries ever appended, trimmed ones included: the offset the next entry gets.
    pub fn num_rows(&self) -> usize {
        self.rows
    }

    /// Entries still held (in memory or spilled).
    pub fn retained_rows(&self) -> usize {
        self.rows - self.trimmed.rows
    }

    /// What retention removed from the front.
    pub fn trimmed(&self) -> &Trimmed {
        &self.trimmed
    }

    /// The largest `_tx` ever appended.
    pub fn max_tx(&self) -> u64 {
        self.max_tx
    }

    /// The `_position` of the last entry ever appended, trimmed or not.
    pub fn last_position(&self) -> Option<&str> {
        match self.segments.last() {
            Some(s) => Some(s.max_position.as_str()),
            None => self.trimmed.last_position.as_deref(),
        }
    }

    /// Removes the leading segments that end at or before entry `upto` (whole segments only,
    /// so whole transactions); returns the entries removed. Versions taken before keep
    /// reading them.
    pub fn trim(&mut self, upto: usize) -> usize {
        let mut removed = 0;
        while let Some(first) = self.segments.front() {
            if self.trimmed.rows + first.rows > upto {
                break;
            }
            let first = self.segments.pop_front().expect("a front segment");
            self.trimmed.rows += first.rows;
            self.trimmed.last_position = Some(first.max_position.clone());
            self.trimmed.max_commit_ts = self.trimmed.max_commit_ts.max(first.max_commit_ts);
            removed += first.rows;
        }
        removed
    }

    pub fn num_segments(&self) -> usize {
        self.segments.len()
    }

    /// Arrow memory of the segments held in memory.
    pub fn resident_bytes(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| !s.is_spilled())
            .map(|s| s.bytes)
            .sum()
    }

    /// The segments held in memory whose entries all lie before entry `persisted`, oldest
    /// first: what may be spilled once those entries are in the store.
    pub fn spillable(&self, persisted: usize) -> Vec<Arc<ChangelogSegment>> {
        let mut end = self.trimmed.rows;
        let mut out = Vec::new();
        for segment in &self.segments {
            end += segment.rows;
            if end > persisted {
                break;
            }
            if !segment.is_spilled() {
                out.push(Arc::clone(segment));
            }
        }
        out
    }
}

impl HasSqlState for StoredSegmentError {
    fn sqlstate(&self) -> SqlState {
        self.sqlstate.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        ArrayRef, Int32Array, StringArray, StructArray, TimestampMicrosecondArray, UInt64Array,
    };
    use arrow::datatypes::{DataType, Field};
    use std::sync::Mutex;

    fn table() -> Schema {
        Schema::new(vec![Field::new("id", DataType::Int32, false)])
    }

    /// A segment of one transaction `tx` with entries at positions `p{first}`...
    fn segment(schema: &SchemaRef, tx: u64, first: usize, rows: usize) -> ChangelogSegment {
        let positions: Vec<String> = (first..first + rows).map(|i| format!("p{i:08}")).collect();
        let before = match schema.field(schema.fields().len() - 1).data_type() {
            DataType::Struct(fields) => StructArray::new_null(fields.clone(), rows),
            _ => unreachable!(),
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["c"; rows])),
            Arc::new(StringArray::from(positions.clone())),
            Arc::new(StringArray::new_null(rows)),
            Arc::new(UInt64Array::from(vec![tx; rows])),
            Arc::new(
                TimestampMicrosecondArray::from(vec![Some(tx as i64); rows]).with_timezone("UTC"),
            ),
            Arc::new(StringArray::from(vec!["db.t"; rows])),
            Arc::new(arrow::array::UInt32Array::from(vec![0; rows])),
            Arc::new(Int32Array::from_iter_values(
                (first..first + rows).map(|i| i as i32),
            )),
            Arc::new(before),
        ];
        ChangelogSegment::of_batch(RecordBatch::try_new(Arc::clone(schema), columns).unwrap())
    }

    fn ids(batches: &[RecordBatch]) -> Vec<i32> {
        batches
            .iter()
            .flat_map(|b| {
                b.column(7)
                    .as_primitive::<arrow::datatypes::Int32Type>()
                    .values()
                    .to_vec()
            })
            .collect()
    }

    /// A store that holds every entry written to it and counts reads.
    #[derive(Debug, Default)]
    struct Memory {
        batches: Mutex<Vec<RecordBatch>>,
        reads: Mutex<usize>,
    }

    #[async_trait]
    impl SegmentStore for Memory {
        async fn read(
            &self,
            ranges: &[(String, String)],
        ) -> Result<Vec<RecordBatch>, StoredSegmentError> {
            *self.reads.lock().unwrap() += 1;
            let mut out = Vec::new();
            for batch in self.batches.lock().unwrap().iter() {
                let positions = batch.column(POSITION_COLUMN).as_string::<i32>();
                for i in 0..batch.num_rows() {
                    let p = positions.value(i);
                    if ranges
                        .iter()
                        .any(|(lo, hi)| lo.as_str() <= p && p <= hi.as_str())
                    {
                        out.push(batch.slice(i, 1));
                    }
                }
            }
            Ok(out)
        }
    }

    #[test]
    fn small_transactions_merge_without_reordering_entries() {
        let mut log = Changelog::new(&table());
        let schema = Arc::clone(&log.schema);
        for i in 0..2000 {
            log.append(segment(&schema, i as u64 + 1, i, 1)).unwrap();
        }
        assert_eq!(log.num_rows(), 2000);
        // 2000 single entries: merged into classes, far fewer segments than transactions.
        assert!(
            log.num_segments() < 2 * MERGE_FANOUT,
            "{}",
            log.num_segments()
        );
        let batches: Vec<RecordBatch> = log
            .segments()
            .map(|s| s.in_memory().unwrap().unwrap())
            .collect();
        assert_eq!(ids(&batches), (0..2000).collect::<Vec<_>>());
        assert_eq!(log.segments().map(|s| s.max_tx).max(), Some(2000));
        let last = log.segments().last().unwrap();
        assert_eq!(last.max_position, "p00001999");
        // Large segments stay as they are.
        let mut big = Changelog::new(&table());
        for i in 0..MERGE_FANOUT {
            big.append(segment(&schema, 1, i * 4096, 4096)).unwrap();
        }
        assert_eq!(big.num_segments(), MERGE_FANOUT);
        // An empty segment is not kept.
        big.append(segment(&schema, 2, 0, 0)).unwrap();
        assert_eq!(big.num_segments(), MERGE_FANOUT);
    }

    #[test]
    fn offsets_name_the_same_entries_after_merging() {
        let mut log = Changelog::new(&table());
        let schema = Arc::clone(&log.schema);
        for i in 0..100 {
            log.append(segment(&schema, 1, i * 3, 3)).unwrap();
        }
        let (segments, skip) = log.segments_from(151);
        let batches: Vec<RecordBatch> = segments
            .iter()
            .map(|s| s.in_memory().unwrap().unwrap())
            .collect();
        let all = concat_batches(&schema, &batches).unwrap();
        assert_eq!(
            ids(&[all.slice(skip, all.num_rows() - skip)]),
            (151..300).collect::<Vec<_>>()
        );
        assert_eq!(log.segments_from(300).0.len(), 0);
    }

    #[test]
    fn trimming_drops_whole_leading_segments_and_keeps_offsets() {
        let mut log = Changelog::new(&table());
        let schema = Arc::clone(&log.schema);
        for i in 0..10 {
            log.append(segment(&schema, i + 1, i as usize * 100, 100))
                .unwrap();
        }
        let before = log.snapshot();
        // Entry 250 is inside the third segment: only the first two go.
        assert_eq!(log.trim(250), 200);
        assert_eq!(log.num_rows(), 1000);
        assert_eq!(log.retained_rows(), 800);
        assert_eq!(log.trimmed().rows, 200);
        assert_eq!(log.trimmed().last_position.as_deref(), Some("p00000199"));
        assert_eq!(log.trimmed().max_commit_ts, Some(2));
        assert_eq!(log.trim(250), 0);
        // Offsets still name the same entries.
        let (segments, skip) = log.segments_from(450);
        let first = segments[0].in_memory().unwrap().unwrap();
        assert_eq!(ids(&[first.slice(skip, 1)]), vec![450]);
        // An offset before the retained history starts at its first entry.
        let (segments, skip) = log.segments_from(0);
        assert_eq!((segments.len(), skip), (8, 0));
        assert_eq!(log.spillable(450).len(), 2);
        // A version taken before the trim still has every entry.
        assert_eq!(before.retained_rows(), 1000);
        // Trimming everything keeps the count, the last position and the numbering.
        assert_eq!(log.trim(usize::MAX), 800);
        assert_eq!(log.num_segments(), 0);
        assert_eq!(log.last_position(), Some("p00000999"));
        assert_eq!(log.max_tx(), 10);
        let mut restored =
            Changelog::new(&table()).after_trimmed(log.trimmed().clone(), log.max_tx());
        assert_eq!(restored.num_rows(), 1000);
        restored.append(segment(&schema, 11, 1000, 5)).unwrap();
        let (segments, skip) = restored.segments_from(1002);
        assert_eq!((segments.len(), skip), (1, 2));
    }

    #[tokio::test]
    async fn spilled_segments_read_back_the_same_entries() {
        let mut log = Changelog::new(&table());
        let schema = Arc::clone(&log.schema);
        for i in 0..10 {
            log.append(segment(&schema, i, i as usize * 100, 100))
                .unwrap();
        }
        let store = Arc::new(Memory::default());
        // Entries 0..650 reached the store: segments 0..6 may be spilled, not the seventh.
        let written: Vec<RecordBatch> = log
            .segments()
            .take(7)
            .map(|s| s.in_memory().unwrap().unwrap())
            .collect();
        *store.batches.lock().unwrap() = written;
        let resident = log.resident_bytes();
        let spillable = log.spillable(650);
        assert_eq!(spillable.len(), 6);
        let reader = log.snapshot();
        for s in &spillable {
            s.spill(Arc::clone(&store) as Arc<dyn SegmentStore>);
        }
        assert!(log.resident_bytes() < resident / 2);
        assert_eq!(log.spillable(650).len(), 0);
        // A version taken before the spill reads the same entries, six segments in one read.
        let segments: Vec<_> = reader.segments().cloned().collect();
        let batches: Vec<RecordBatch> = read_segments(segments, Arc::clone(&log.schema))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(ids(&batches), (0..1000).collect::<Vec<_>>());
        assert_eq!(*store.reads.lock().unwrap(), 1);
        let one = log.segments().nth(2).unwrap().batch(&schema).await.unwrap();
        assert_eq!(ids(&[one]), (200..300).collect::<Vec<_>>());
        // A store that lost entries is an error, never a shorter history.
        store.batches.lock().unwrap().truncate(3);
        let segments: Vec<_> = log.segments().cloned().collect();
        let error = read_segments(segments, Arc::clone(&log.schema))
            .try_collect::<Vec<_>>()
            .await
            .unwrap_err();
        assert_eq!(error.sqlstate, SqlState::DATA_CORRUPTED);
        assert!(log.segments().next().unwrap().batch(&schema).await.is_ok());
        assert!(log.segments().nth(4).unwrap().batch(&schema).await.is_err());
    }
}
