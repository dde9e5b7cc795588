//! The current table after the hand-off: compact, keyed, and published as immutable snapshots.
//!
//! # Representation
//! A table is an immutable *base* (one Arrow batch of rows plus an index from key bytes to row)
//! and a persistent *overlay* of the keys changed since the base was built (upsert or delete).
//! Applying a change touches only the overlay; [`CurrentTable::snapshot`] clones the overlay in
//! O(1) (it is a persistent hash map) and shares the base, so publishing a new version costs
//! O(changed rows), readers never block ingestion, and ingestion never waits for readers. When
//! the overlay grows past a fraction of the base, the two are merged into a new base: O(table),
//! amortised over at least that many changes.
//!
//! # Invariants
//! * A key appears at most once in a snapshot: the overlay entry for a key hides its base row.
//! * A snapshot never changes after it is taken; it carries the binlog position it reflects.
//! * Tables without a primary key are keyed by the whole row with a copy count (a multiset).
//!
//! # Memory
//! The base is plain Arrow; the index holds the key bytes and a row number per row, and the
//! overlay holds Arrow's row format of changed rows. `benches` measures the total against the
//! Arrow size of the rows.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow::array::{BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, filter_record_batch, take_record_batch};
use arrow::error::ArrowError;
use arrow::row::OwnedRow;

use crate::change::keys::RowCodec;
use crate::change::position::BinlogCoord;
use crate::change::schema::TableSchema;

/// Overlay entries beyond this fraction of the base trigger a merge into a new base.
const COMPACT_FRACTION: usize = 8;
/// Overlays smaller than this are never merged (small tables would rebuild too often).
const COMPACT_MIN: usize = 4096;

/// Key bytes in Arrow's row format.
pub type KeyBytes = Box<[u8]>;

/// One row of the base: its index in the base batch and its copy count.
#[derive(Debug, Clone, Copy)]
struct Slot {
    row: u32,
    count: u32,
}

#[derive(Debug)]
struct Base {
    rows: RecordBatch,
    index: HashMap<KeyBytes, Slot, ahash::RandomState>,
    /// Sum of copy counts.
    len: usize,
}

/// An overlay value: the row and its copy count, or a delete.
pub type OverlayValue = Option<(Arc<OwnedRow>, u32)>;

/// The mutable current table owned by the capture; see the module docs.
#[derive(Debug)]
pub struct CurrentTable {
    codec: Arc<RowCodec>,
    base: Arc<Base>,
    overlay: imbl::HashMap<KeyBytes, OverlayValue>,
    len: usize,
}

/// An immutable version of a current table at one position.
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    codec: Arc<RowCodec>,
    base: Arc<Base>,
    overlay: imbl::HashMap<KeyBytes, OverlayValue>,
    len: usize,
    pub position: Option<BinlogCoord>,
    /// Every row, materialised on the first full scan of this snapshot.
    all_rows: Arc<OnceLock<Vec<RecordBatch>>>,
}

impl CurrentTable {
    /// Builds the table from rows (e.g. the state at the end of the hand-off).
    pub fn new(codec: Arc<RowCodec>, rows: &RecordBatch) -> Result<Self, ArrowError> {
        let base = build_base(&codec, rows)?;
        Ok(Self {
            len: base.len,
            codec,
            base: Arc::new(base),
            overlay: imbl::HashMap::new(),
        })
    }

    /// Builds the table from distinct keys with their rows and copy counts (the merge's state
    /// at the end of the hand-off), without encoding the keys again.
    pub fn from_rows(
        codec: Arc<RowCodec>,
        rows: impl Iterator<Item = (OwnedRow, OwnedRow, u32)>,
    ) -> Result<Self, ArrowError> {
        let (lower, _) = rows.size_hint();
        let mut index: HashMap<KeyBytes, Slot, ahash::RandomState> =
            HashMap::with_capacity_and_hasher(lower, ahash::RandomState::new());
        let mut full = Vec::with_capacity(lower);
        let mut len = 0;
        for (key, row, count) in rows {
            index.insert(
                key.as_ref().into(),
                Slot {
                    row: full.len() as u32,
                    count,
                },
            );
            len += count as usize;
            full.push(row);
        }
        let rows = codec.decode(full.iter())?;
        Ok(Self {
            len,
            codec,
            base: Arc::new(Base { rows, index, len }),
            overlay: imbl::HashMap::new(),
        })
    }

    /// The table as `snapshot` holds it, to go on changing from there (a capture restarted
    /// from a published version). O(1): the base and the persistent overlay are shared, and
    /// neither is ever changed in place.
    pub fn from_snapshot(snapshot: &TableSnapshot) -> Self {
        Self {
            codec: Arc::clone(&snapshot.codec),
            base: Arc::clone(&snapshot.base),
            overlay: snapshot.overlay.clone(),
            len: snapshot.len,
        }
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

    /// The row and count under `key` now, if any.
    fn lookup(&self, key: &[u8]) -> OverlayValue {
        match self.overlay.get(key) {
            Some(v) => v.clone(),
            None => self.base.index.get(key).map(|slot| {
                let batch = self.base.rows.slice(slot.row as usize, 1);
                let row = self
                    .codec
                    .encode(&batch)
                    .map(|(_, full)| full.row(0).owned())
                    .expect("a base row encodes like it did when the base was built");
                (Arc::new(row), slot.count)
            }),
        }
    }

    /// Copies currently stored under `key`.
    pub fn count(&self, key: &[u8]) -> u32 {
        self.lookup(key).map_or(0, |(_, n)| n)
    }

    /// Stores `row` under `key` with `count` copies (keyed tables: 1), or deletes the key.
    pub fn put(&mut self, key: &[u8], value: OverlayValue) {
        let old = self.count(key) as usize;
        let new = value.as_ref().map_or(0, |(_, n)| *n as usize);
        self.len = self.len + new - old;
        self.overlay.insert(key.into(), value);
    }

    /// An immutable version at `position`; merges the overlay into a new base first when it has
    /// grown large.
    pub fn snapshot(&mut self, position: Option<BinlogCoord>) -> Result<TableSnapshot, ArrowError> {
        if self.overlay.len() > COMPACT_MIN.max(self.base.len / COMPACT_FRACTION) {
            self.compact()?;
        }
        Ok(TableSnapshot {
            codec: Arc::clone(&self.codec),
            base: Arc::clone(&self.base),
            overlay: self.overlay.clone(),
            len: self.len,
            position,
            all_rows: Arc::new(OnceLock::new()),
        })
    }

    fn compact(&mut self) -> Result<(), ArrowError> {
        let snap = self.snapshot_without_compaction();
        let rows = snap.scan_all()?;
        let merged = concat_batches(&self.codec.schema().arrow, &rows)?;
        self.base = Arc::new(build_base(&self.codec, &merged)?);
        self.overlay = imbl::HashMap::new();
        Ok(())
    }

    fn snapshot_without_compaction(&self) -> TableSnapshot {
        TableSnapshot {
            codec: Arc::clone(&self.codec),
            base: Arc::clone(&self.base),
            overlay: self.overlay.clone(),
            len: self.len,
            position: None,
            all_rows: Arc::new(OnceLock::new()),
        }
    }
}

fn build_base(codec: &RowCodec, rows: &RecordBatch) -> Result<Base, ArrowError> {
    let (keys, _) = codec.encode(rows)?;
    let mut index: HashMap<KeyBytes, Slot, ahash::RandomState> =
        HashMap::with_capacity_and_hasher(rows.num_rows(), ahash::RandomState::new());
    let mut keep = Vec::with_capacity(rows.num_rows());
    for (i, key) in keys.iter().enumerate() {
        match index.get_mut(key.as_ref()) {
            // Identical rows of a keyless table: one base row with a count.
            Some(slot) => slot.count += 1,
            None => {
                index.insert(
                    key.as_ref().into(),
                    Slot {
                        row: keep.len() as u32,
                        count: 1,
                    },
                );
                keep.push(i as u32);
            }
        }
    }
    let unique = if keep.len() == rows.num_rows() {
        rows.clone()
    } else {
        take_record_batch(rows, &UInt32Array::from(keep))?
    };
    Ok(Base {
        len: rows.num_rows(),
        rows: unique,
        index,
    })
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
        let mut out = Vec::new();
        let hidden: Vec<u32> = self
            .overlay
            .keys()
            .filter_map(|k| base.index.get(k).map(|s| s.row))
            .collect();
        let visible = if hidden.is_empty() {
            base.rows.clone()
        } else {
            let mut mask = vec![true; base.rows.num_rows()];
            for r in hidden {
                mask[r as usize] = false;
            }
            filter_record_batch(&base.rows, &BooleanArray::from(mask))?
        };
        out.push(self.repeat_counts(visible)?);
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

    /// Repeats base rows of keyless tables by their copy count.
    fn repeat_counts(&self, visible: RecordBatch) -> Result<RecordBatch, ArrowError> {
        if !self.codec.keyless() || self.base.len == self.base.rows.num_rows() {
            return Ok(visible);
        }
        let (keys, _) = self.codec.encode(&visible)?;
        let mut idx = Vec::with_capacity(visible.num_rows());
        for (i, k) in keys.iter().enumerate() {
            let n = self.base.index.get(k.as_ref()).map_or(1, |s| s.count);
            idx.extend(std::iter::repeat_n(i as u32, n as usize));
        }
        take_record_batch(&visible, &UInt32Array::from(idx))
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
                    if let Some(slot) = self.base.index.get(key) {
                        base_rows.extend(std::iter::repeat_n(slot.row, slot.count as usize));
                    }
                }
            }
        }
        let from_base = take_record_batch(&self.base.rows, &UInt32Array::from(base_rows))?;
        let from_overlay = self.codec.decode(overlay_rows.iter().map(Arc::as_ref))?;
        concat_batches(&self.codec.schema().arrow, [&from_base, &from_overlay])
    }

    pub fn codec(&self) -> &Arc<RowCodec> {
        &self.codec
    }

    /// Bytes held by this version: the base rows, its index (entries, table slots and key
    /// bytes) and the overlay's rows. An estimate of allocations, for status and benchmarks.
    pub fn memory_size(&self) -> usize {
        let base_rows = self.base.rows.get_array_memory_size();
        let slot = std::mem::size_of::<(KeyBytes, Slot)>() + 1;
        let index = self.base.index.capacity() * slot
            + self.base.index.keys().map(|k| k.len()).sum::<usize>();
        let overlay = self
            .overlay
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, |(r, _)| r.as_ref().as_ref().len()) + 64)
            .sum::<usize>();
        base_rows + index + overlay
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::schema::{ColumnKind, ColumnSpec, TableId};
    use arrow::array::{Array, AsArray, Int32Array, StringArray};
    use arrow::datatypes::Int32Type;

    fn codec(keyed: bool) -> Arc<RowCodec> {
        let columns = vec![
            ColumnSpec {
                name: "id".into(),
                kind: ColumnKind::Int {
                    bits: 32,
                    unsigned: false,
                },
                nullable: false,
            },
            ColumnSpec {
                name: "v".into(),
                kind: ColumnKind::Text {
                    charset: crate::change::schema::Charset::Utf8,
                },
                nullable: true,
            },
        ];
        let pk = if keyed { vec![0] } else { vec![] };
        Arc::new(
            RowCodec::new(Arc::new(TableSchema::new(
                TableId::new("d", "t"),
                columns,
                pk,
            )))
            .unwrap(),
        )
    }

    fn batch(codec: &RowCodec, rows: &[(i32, &str)]) -> RecordBatch {
        RecordBatch::try_new(
            Arc::clone(&codec.schema().arrow),
            vec![
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap()
    }

    fn encode(codec: &RowCodec, id: i32, v: &str) -> (KeyBytes, Arc<OwnedRow>) {
        let (k, r) = codec.encode(&batch(codec, &[(id, v)])).unwrap();
        (k.row(0).as_ref().into(), Arc::new(r.row(0).owned()))
    }

    fn ids(batches: &[RecordBatch]) -> Vec<(i32, String)> {
        let mut out: Vec<(i32, String)> = batches
            .iter()
            .flat_map(|b| {
                let id = b.column(0).as_primitive::<Int32Type>().clone();
                let v = b.column(1).as_string::<i32>().clone();
                (0..b.num_rows()).map(move |i| (id.value(i), v.value(i).to_string()))
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn snapshots_are_immutable_and_lookups_see_the_overlay() {
        let c = codec(true);
        let mut t =
            CurrentTable::new(Arc::clone(&c), &batch(&c, &[(1, "a"), (2, "b"), (3, "c")])).unwrap();
        let before = t.snapshot(None).unwrap();
        let (k2, r2) = encode(&c, 2, "b2");
        t.put(&k2, Some((r2, 1)));
        let (k3, _) = encode(&c, 3, "c");
        t.put(&k3, None);
        let (k4, r4) = encode(&c, 4, "d");
        t.put(&k4, Some((r4, 1)));
        let after = t.snapshot(None).unwrap();
        assert_eq!(
            ids(&before.scan_all().unwrap()),
            vec![(1, "a".into()), (2, "b".into()), (3, "c".into())]
        );
        assert_eq!(
            ids(&after.scan_all().unwrap()),
            vec![(1, "a".into()), (2, "b2".into()), (4, "d".into())]
        );
        assert_eq!((before.len(), after.len()), (3, 3));
        let (k1, _) = encode(&c, 1, "a");
        let (k9, _) = encode(&c, 9, "");
        let found = after.lookup(&[k2.clone(), k3.clone(), k1, k9]).unwrap();
        assert_eq!(ids(&[found]), vec![(1, "a".into()), (2, "b2".into())]);
    }

    #[test]
    fn compaction_keeps_the_rows_and_old_snapshots() {
        let c = codec(true);
        let mut t = CurrentTable::new(Arc::clone(&c), &batch(&c, &[(0, "base")])).unwrap();
        let old = t.snapshot(None).unwrap();
        for i in 1..=(COMPACT_MIN as i32 + 10) {
            let (k, r) = encode(&c, i, "x");
            t.put(&k, Some((r, 1)));
        }
        let snap = t.snapshot(None).unwrap();
        assert!(
            t.overlay.is_empty(),
            "the overlay was merged into a new base"
        );
        assert_eq!(snap.len(), COMPACT_MIN + 11);
        assert_eq!(
            snap.scan_all()
                .unwrap()
                .iter()
                .map(|b| b.num_rows())
                .sum::<usize>(),
            COMPACT_MIN + 11
        );
        assert_eq!(old.len(), 1);
        assert_eq!(ids(&old.scan_all().unwrap()), vec![(0, "base".into())]);
    }

    #[test]
    fn keyless_tables_count_identical_rows() {
        let c = codec(false);
        let mut t =
            CurrentTable::new(Arc::clone(&c), &batch(&c, &[(1, "a"), (1, "a"), (2, "b")])).unwrap();
        assert_eq!(t.len(), 3);
        let (k, r) = encode(&c, 1, "a");
        assert_eq!(t.count(&k), 2);
        t.put(&k, Some((r, 1)));
        let snap = t.snapshot(None).unwrap();
        assert_eq!(
            ids(&snap.scan_all().unwrap()),
            vec![(1, "a".into()), (2, "b".into())]
        );
        let all = snap.scan_all().unwrap();
        assert!(all.iter().all(|b| b.column(0).null_count() == 0));
    }
}
