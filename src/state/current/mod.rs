//! The current table after the hand-off: compact, keyed, and published as immutable snapshots.
//!
//! # Representation
//! A table is an immutable *base* (Arrow batches of rows, their keys in Arrow's row format and a
//! [`KeyIndex`](super::index::KeyIndex) from key to row) and a persistent *overlay* of the keys
//! changed since the base was built (upsert or delete). Applying a change touches only the
//! overlay;
//! [`CurrentTable::snapshot`] clones the overlay in O(1) (it is a persistent hash map) and
//! shares the base, so publishing a new version costs O(changed rows), readers never block
//! ingestion, and ingestion never waits for readers. When the overlay grows past a fraction of
//! the base, the two are merged into a new base ([`Base`]): mostly by appending the overlay's
//! rows as a batch, the rows they replace marked dead, and now and then by building it again
//! from the live rows. A base built at the end of a snapshot keeps the snapshot's chunk
//! batches as they were read (shared with the changelog's `r` entries), so a snapshot's rows
//! are held once.
//!
//! # Invariants
//! * A key appears at most once in a snapshot: the overlay entry for a key hides its base row.
//! * A snapshot never changes after it is taken; it carries the binlog position it reflects.
//! * Tables without a primary key are keyed by the whole row with a copy count (a multiset).
//!
//! # Memory
//! The base is plain Arrow plus an index of 4 bytes (a row id) per bucket and a control byte,
//! in a table sized to a power of two; key bytes are kept only when the key is not one integer
//! column (an integer key is written from its column when compared). The overlay holds Arrow's
//! row format of changed rows. `benches/snapshot.rs` measures the total against the Arrow size
//! of the rows: 1.14× for 1,000,000 rows of 7 columns with a `BIGINT` key, where 16-byte
//! index entries and stored key bytes made it 1.66×. A base that grew by appending holds its
//! dead rows until it is rebuilt: at most half as many as its live rows.

use std::sync::{Arc, OnceLock};

use arrow::array::{BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::{
    concat_batches, filter_record_batch, interleave_record_batch, take_record_batch,
};
use arrow::error::ArrowError;
use arrow::row::OwnedRow;

use super::base::{without_rows, Base};
use super::secondary::{refreshed, OverlayIndex};
use crate::change::keys::RowCodec;
use crate::change::position::BinlogCoord;
use crate::change::schema::TableSchema;

/// Overlay entries beyond this fraction of the base trigger a merge into a new base.
const COMPACT_FRACTION: usize = 8;
/// Overlays smaller than this are never merged (small tables would rebuild too often). Not
/// larger: the first change to an overlay node after each published version copies the node
/// with every entry in it, so a larger overlay costs every change more (4,096 cost more
/// instructions per change than the merges 1,024 adds; `docs/benchmarks.md`).
const COMPACT_MIN: usize = 1024;

use super::key::KeyBytes;

/// The row `overlay` holds under `key`: `None` when it holds no entry, `Some(None)` for a
/// delete.
fn overlay_row<'a>(overlay: &'a Overlay, key: &KeyBytes) -> Option<Option<&'a OwnedRow>> {
    overlay
        .get(key)
        .map(|v| v.as_ref().map(|(row, _)| row.as_ref()))
}

/// An overlay value: the row and its copy count, or a delete.
pub type OverlayValue = Option<(Arc<OwnedRow>, u32)>;

/// The overlay: keys changed since the base, persistent so a snapshot shares it. Hashed with
/// aHash (keyed at random per map, as SipHash was): every applied change hashes its key, and
/// SipHash was a fifth of an insert's instructions.
type Overlay = imbl::GenericHashMap<
    KeyBytes,
    OverlayValue,
    ahash::RandomState,
    imbl::shared_ptr::DefaultSharedPtr,
>;

/// The mutable current table owned by the capture; see the module docs.
#[derive(Debug)]
pub struct CurrentTable {
    codec: Arc<RowCodec>,
    base: Arc<Base>,
    overlay: Overlay,
    len: usize,
    /// The overlay's part of each secondary index, as of the last snapshot.
    indexes: Vec<OverlayIndex>,
    /// Keys put since the last snapshot (only when the table has secondary indexes).
    changed: Vec<KeyBytes>,
}

/// An immutable version of a current table at one position.
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    pub(super) codec: Arc<RowCodec>,
    pub(super) base: Arc<Base>,
    pub(super) overlay: Overlay,
    len: usize,
    /// The overlay's part of each secondary index; `None` if it could not be brought up to
    /// date (a lookup then filters the overlay's rows instead).
    pub(super) indexes: Option<Vec<OverlayIndex>>,
    pub position: Option<BinlogCoord>,
    /// Every row, materialised on the first full scan of this snapshot.
    all_rows: Arc<OnceLock<Vec<RecordBatch>>>,
}

impl CurrentTable {
    /// Builds the table from rows (e.g. a checkpoint's rows).
    pub fn new(codec: Arc<RowCodec>, rows: &RecordBatch) -> Result<Self, ArrowError> {
        let base = Base::build(&codec, rows)?;
        Ok(Self::from_base(codec, base, Vec::new()))
    }

    /// The table made of `base` and the upserts in `overlay` (keys the base does not hold),
    /// e.g. the end of a snapshot hand-off: its chunks and the changes streamed meanwhile.
    pub fn from_base(
        codec: Arc<RowCodec>,
        base: Base,
        overlay: Vec<(KeyBytes, OwnedRow, u32)>,
    ) -> Self {
        let len = base.len + overlay.iter().map(|(_, _, n)| *n as usize).sum::<usize>();
        let changed = if codec.indexes().is_empty() {
            Vec::new()
        } else {
            overlay.iter().map(|(k, _, _)| k.clone()).collect()
        };
        Self {
            indexes: vec![OverlayIndex::default(); codec.indexes().len()],
            changed,
            codec,
            base: Arc::new(base),
            overlay: overlay
                .into_iter()
                .map(|(k, row, n)| (k, Some((Arc::new(row), n))))
                .collect(),
            len,
        }
    }

    /// The table as `snapshot` holds it, to go on changing from there (a capture restarted
    /// from a published version). O(1): the base and the persistent overlay are shared, and
    /// neither is ever changed in place.
    pub fn from_snapshot(snapshot: &TableSnapshot) -> Self {
        let (indexes, changed) = match &snapshot.indexes {
            Some(indexes) => (indexes.clone(), Vec::new()),
            // Built again from the whole overlay at the next snapshot.
            None => (
                vec![OverlayIndex::default(); snapshot.codec.indexes().len()],
                snapshot.overlay.keys().cloned().collect(),
            ),
        };
        Self {
            codec: Arc::clone(&snapshot.codec),
            base: Arc::clone(&snapshot.base),
            overlay: snapshot.overlay.clone(),
            len: snapshot.len,
            indexes,
            changed,
        }
    }

    /// Takes `codec` (from [`RowCodec::with_indexes`] of this table's): the base's sorted
    /// orders are kept by their columns, so an index on the same columns reuses them; the
    /// overlay's indexes are built again from the whole overlay at the next snapshot.
    pub fn reindex(&mut self, codec: Arc<RowCodec>) {
        self.indexes = vec![OverlayIndex::default(); codec.indexes().len()];
        self.changed = match codec.indexes().is_empty() {
            true => Vec::new(),
            false => self.overlay.keys().cloned().collect(),
        };
        self.codec = codec;
    }

    pub fn schema(&self) -> &Arc<TableSchema> {
        self.codec.schema()
    }

    pub fn codec(&self) -> &Arc<RowCodec> {
        &self.codec
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies currently stored under `key`.
    pub fn count(&self, key: &[u8]) -> u32 {
        match self.overlay.get(key) {
            Some(v) => v.as_ref().map_or(0, |(_, n)| *n),
            None => self.base.find(key).map_or(0, |(_, _, n)| n),
        }
    }

    /// Stores `row` under `key` with `count` copies (keyed tables: 1), or deletes the key;
    /// returns the copies stored before. One overlay lookup: the value it replaces says it.
    pub fn put(&mut self, key: &[u8], value: OverlayValue) -> u32 {
        let new = value.as_ref().map_or(0, |(_, n)| *n);
        let old = match self.overlay.insert(key.into(), value) {
            Some(previous) => previous.map_or(0, |(_, n)| n),
            None => self.base.find(key).map_or(0, |(_, _, n)| n),
        };
        if !self.indexes.is_empty() {
            self.changed.push(key.into());
        }
        self.len = self.len + new as usize - old as usize;
        old
    }

    /// An immutable version at `position`; merges the overlay into a new base first when it has
    /// grown large.
    pub fn snapshot(&mut self, position: Option<BinlogCoord>) -> Result<TableSnapshot, ArrowError> {
        if self.overlay.len() > COMPACT_MIN.max(self.base.len / COMPACT_FRACTION) {
            self.compact()?;
        }
        if !self.changed.is_empty() {
            self.indexes = self.indexes_now()?;
            self.changed.clear();
        }
        Ok(TableSnapshot {
            codec: Arc::clone(&self.codec),
            base: Arc::clone(&self.base),
            overlay: self.overlay.clone(),
            len: self.len,
            indexes: Some(self.indexes.clone()),
            position,
            all_rows: Arc::new(OnceLock::new()),
        })
    }

    /// Merges the overlay into a new base (see [`Base`] for when it appends and when it
    /// rebuilds) and empties it.
    fn compact(&mut self) -> Result<(), ArrowError> {
        let base = if self.base.can_append(self.overlay.len()) {
            let entries: Vec<_> = self
                .overlay
                .iter()
                .map(|(key, value)| {
                    let row = value.as_ref().map(|(row, n)| (row.as_ref(), *n));
                    (key.as_slice(), row)
                })
                .collect();
            self.base.append(&self.codec, &entries, self.len)?
        } else {
            let rows = self.snapshot_without_compaction().scan_all()?;
            let merged = concat_batches(&self.codec.schema().arrow, &rows)?;
            Base::build(&self.codec, &merged)?
        };
        self.base = Arc::new(base);
        self.overlay = Overlay::new();
        // The base holds every row now: its batches are indexed when looked up.
        self.indexes = vec![OverlayIndex::default(); self.indexes.len()];
        self.changed.clear();
        Ok(())
    }

    /// The overlay's indexes brought up to date with the keys put since the last snapshot.
    fn indexes_now(&self) -> Result<Vec<OverlayIndex>, ArrowError> {
        refreshed(&self.codec, &self.indexes, &self.changed, |key| {
            overlay_row(&self.overlay, key)
        })
    }

    fn snapshot_without_compaction(&self) -> TableSnapshot {
        TableSnapshot {
            codec: Arc::clone(&self.codec),
            base: Arc::clone(&self.base),
            overlay: self.overlay.clone(),
            len: self.len,
            indexes: self.indexes_now().ok(),
            position: None,
            all_rows: Arc::new(OnceLock::new()),
        }
    }
}

impl TableSnapshot {
    /// A snapshot of `current` as it is, without position or compaction.
    pub fn of(current: &CurrentTable) -> Self {
        current.snapshot_without_compaction()
    }

    pub fn schema(&self) -> &Arc<TableSchema> {
        self.codec.schema()
    }

    /// Live rows, counting copies.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every row: the base rows no overlay entry hides, then the overlay's rows.
    pub fn scan_all(&self) -> Result<Vec<RecordBatch>, ArrowError> {
        if let Some(rows) = self.all_rows.get() {
            return Ok(rows.clone());
        }
        let base = &self.base;
        let mut hidden: Vec<Vec<usize>> = vec![Vec::new(); base.batches.len()];
        for key in self.overlay.keys() {
            if let Some((batch, row, _)) = base.find(key) {
                hidden[batch].push(row);
            }
        }
        let copies = self.copies();
        let mut out = Vec::with_capacity(base.batches.len() + 1);
        for (b, batch) in base.batches.iter().enumerate() {
            let rows = match &copies {
                // Keyless tables: each row as often as it occurs, hidden ones not at all.
                Some(copies) => {
                    let mut counts = copies[b].clone();
                    for r in &hidden[b] {
                        counts[*r] = 0;
                    }
                    let idx: Vec<u32> = counts
                        .iter()
                        .enumerate()
                        .flat_map(|(i, n)| std::iter::repeat_n(i as u32, *n as usize))
                        .collect();
                    if idx.len() == batch.num_rows() && hidden[b].is_empty() {
                        batch.clone()
                    } else {
                        take_record_batch(batch, &UInt32Array::from(idx))?
                    }
                }
                None => match (base.live(b), hidden[b].is_empty()) {
                    (None, true) => batch.clone(),
                    (Some(live), true) => {
                        filter_record_batch(batch, &BooleanArray::new(live.clone(), None))?
                    }
                    (live, false) => {
                        let mask = without_rows(live, batch.num_rows(), &hidden[b]);
                        filter_record_batch(batch, &BooleanArray::new(mask, None))?
                    }
                },
            };
            if rows.num_rows() > 0 || out.is_empty() {
                out.push(rows);
            }
        }
        let upserts: Vec<(&Arc<OwnedRow>, u32)> = self
            .overlay
            .values()
            .filter_map(|v| v.as_ref().map(|(r, n)| (r, *n)))
            .collect();
        if !upserts.is_empty() {
            let rows = upserts
                .iter()
                .flat_map(|(r, n)| std::iter::repeat_n(r.as_ref(), *n as usize));
            out.push(self.codec.decode(rows)?);
        }
        let _ = self.all_rows.set(out.clone());
        Ok(out)
    }

    /// Copy counts of every base row per batch, when some row stands for several (keyless
    /// tables with identical rows); `None` when every row is one.
    fn copies(&self) -> Option<Vec<Vec<u32>>> {
        if self.base.len == self.base.rows() {
            return None;
        }
        let mut copies: Vec<Vec<u32>> = self
            .base
            .batches
            .iter()
            .map(|b| vec![0; b.num_rows()])
            .collect();
        for (id, count) in self.base.index.iter() {
            let (batch, row) = self.base.keys.locate(id);
            copies[batch][row] = count;
        }
        Some(copies)
    }

    /// The rows under each of `keys` (key bytes), in the order given, without scanning.
    pub fn lookup(&self, keys: &[KeyBytes]) -> Result<RecordBatch, ArrowError> {
        let mut base_rows = Vec::new();
        let mut overlay_rows: Vec<Arc<OwnedRow>> = Vec::new();
        for key in keys {
            match self.overlay.get(key) {
                Some(Some((row, n))) => {
                    overlay_rows.extend(std::iter::repeat_n(Arc::clone(row), *n as usize))
                }
                Some(None) => {}
                None => {
                    if let Some((batch, row, count)) = self.base.find(key) {
                        base_rows.extend(std::iter::repeat_n((batch, row), count as usize));
                    }
                }
            }
        }
        self.gather(&base_rows, &overlay_rows)
    }

    /// One batch of the base rows `base_rows` (batch, row) followed by `overlay_rows`.
    pub(super) fn gather(
        &self,
        base_rows: &[(usize, usize)],
        overlay_rows: &[Arc<OwnedRow>],
    ) -> Result<RecordBatch, ArrowError> {
        let batches: Vec<&RecordBatch> = self.base.batches.iter().collect();
        let from_base = if base_rows.is_empty() {
            RecordBatch::new_empty(Arc::clone(&self.codec.schema().arrow))
        } else {
            interleave_record_batch(&batches, base_rows)?
        };
        if overlay_rows.is_empty() {
            return Ok(from_base);
        }
        let from_overlay = self.codec.decode(overlay_rows.iter().map(Arc::as_ref))?;
        concat_batches(&self.codec.schema().arrow, [&from_base, &from_overlay])
    }

    /// The overlay's part of each secondary index, built from the whole overlay: for a version
    /// whose own could not be brought up to date.
    pub(super) fn overlay_indexes(&self) -> Result<Vec<OverlayIndex>, ArrowError> {
        let keys: Vec<KeyBytes> = self.overlay.keys().cloned().collect();
        let empty = vec![OverlayIndex::default(); self.codec.indexes().len()];
        refreshed(&self.codec, &empty, &keys, |key| {
            overlay_row(&self.overlay, key)
        })
    }

    pub fn codec(&self) -> &Arc<RowCodec> {
        &self.codec
    }

    /// Bytes held by this version: the base rows, their keys and index, and the overlay's
    /// rows. An estimate of allocations, for status and benchmarks.
    pub fn memory_size(&self) -> usize {
        let base_rows: usize = self
            .base
            .batches
            .iter()
            .map(RecordBatch::get_array_memory_size)
            .sum();
        let keys = self.base.keys.memory_size();
        let overlay = self
            .overlay
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, |(r, _)| r.as_ref().as_ref().len()) + 64)
            .sum::<usize>();
        base_rows + keys + self.base.index.memory_size() + overlay
    }
}

#[cfg(test)]
mod tests;
