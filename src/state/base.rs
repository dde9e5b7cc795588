//! A current table's immutable base: Arrow batches of distinct rows, their keys and one
//! [`KeyIndex`] from key to row; and how an overlay of changed keys is merged into a new base.
//!
//! # Merging an overlay
//! A merge either *appends*: the overlay's rows become one new batch, the old batches are
//! shared, and the rows the overlay replaced or deleted stay where they are, marked dead; or
//! it *rebuilds*: one batch of the live rows, with a new index. Appending costs the overlay's
//! rows plus a copy of the index (a few bytes a key); rebuilding costs every row. A merge
//! appends while the dead rows stay within a third of the rows held and fewer than
//! [`MAX_APPENDED`] batches were appended since the last rebuild. So a base holds at most
//! 1.5× its live rows, and the rows rebuilt are at most three per key merged: a table of a
//! million rows no longer rebuilds all of them for every eighth of them changed.
//!
//! # Invariants
//! * Every key has exactly one live row, the one its index entry names; a dead row has no
//!   entry. Scans skip dead rows (see [`Base::live`]).
//! * A base never changes once built: a merge makes a new one, so versions that hold the old
//!   one read it unchanged.

use std::sync::Arc;

use arrow::array::{BooleanBufferBuilder, RecordBatch, UInt32Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::take_record_batch;
use arrow::error::ArrowError;
use arrow::row::OwnedRow;

use super::index::{BatchKeys, KeyIndex, Keys};
use super::secondary::Segment;
use crate::change::keys::RowCodec;

/// Batches a base may gain by appending before the next merge rebuilds it.
pub const MAX_APPENDED: usize = 8;
/// A merge rebuilds once the dead rows would exceed this fraction (1 / n) of the rows held.
const DEAD_FRACTION: usize = 3;

/// One entry of an overlay being merged: a key, and its row with its copy count or `None` for
/// a delete.
pub type MergeEntry<'a> = (&'a [u8], Option<(&'a OwnedRow, u32)>);

/// See the module docs.
#[derive(Debug)]
pub struct Base {
    pub(super) batches: Vec<RecordBatch>,
    /// Per batch, which rows are live; `None` when all of them are.
    live: Vec<Option<BooleanBuffer>>,
    /// Dead rows across the batches.
    dead: usize,
    /// Batches appended since the base was last built whole.
    appended: usize,
    /// Key bytes of every row of `batches`, numbered across them in order.
    pub(super) keys: BatchKeys,
    pub(super) index: KeyIndex,
    /// Sum of copy counts of the live rows.
    pub(super) len: usize,
    /// Per batch, its rows sorted by each secondary index looked up so far; shared with
    /// the bases that keep the batch.
    pub(super) segments: Vec<Arc<Segment>>,
}

impl Base {
    /// A base over `batches` whose rows are distinct keys, with `keys` the keys of their rows
    /// (batch by batch) and `index` naming every row exactly once.
    pub fn from_parts(batches: Vec<RecordBatch>, keys: BatchKeys, index: KeyIndex) -> Self {
        let len = index.rows();
        Self {
            segments: batches.iter().map(|_| Arc::default()).collect(),
            live: vec![None; batches.len()],
            batches,
            dead: 0,
            appended: 0,
            keys,
            index,
            len,
        }
    }

    /// A one-batch base of `rows`; identical keys (keyless tables) become one row with a count.
    pub fn build(codec: &RowCodec, rows: &RecordBatch) -> Result<Self, ArrowError> {
        let mut keys = BatchKeys::default();
        keys.push(Keys::of(codec, rows)?)?;
        let mut index = KeyIndex::with_capacity(rows.num_rows());
        let mut keep = Vec::new();
        for id in 0..keys.len() {
            let key = keys.key(id);
            let hash = index.hash(&key);
            match index.get(hash, &key, &keys) {
                Some(held) => index.set_count(held, index.count(held) + 1),
                None => {
                    index.insert_new(hash, id, &keys);
                    keep.push(id);
                }
            }
        }
        if keep.len() == rows.num_rows() {
            return Ok(Self::from_parts(vec![rows.clone()], keys, index));
        }
        // Keep the first row of each key; its entry is rebuilt at its new place.
        let counts: Vec<u32> = keep.iter().map(|id| index.count(*id)).collect();
        let rows = take_record_batch(rows, &UInt32Array::from(keep))?;
        let mut kept_keys = BatchKeys::default();
        kept_keys.push(Keys::of(codec, &rows)?)?;
        let mut kept = KeyIndex::with_capacity(rows.num_rows());
        for (id, count) in (0..kept_keys.len()).zip(counts) {
            let key = kept_keys.key(id);
            kept.insert_new(kept.hash(&key), id, &kept_keys);
            kept.set_count(id, count);
        }
        Ok(Self::from_parts(vec![rows], kept_keys, kept))
    }

    /// Whether merging an overlay of `entries` keys may append (see the module docs); else
    /// the caller rebuilds from the live rows.
    pub fn can_append(&self, entries: usize) -> bool {
        let held = self.held() + entries;
        self.appended < MAX_APPENDED && (self.dead + entries) * DEAD_FRACTION <= held
    }

    /// This base with `overlay` merged by appending (the caller checked
    /// [`Base::can_append`]). The upserts become one new batch; the rows they replace and
    /// those the deletes name become dead. `len` is the table's row count after the merge.
    pub fn append(
        &self,
        codec: &RowCodec,
        overlay: &[MergeEntry<'_>],
        len: usize,
    ) -> Result<Self, ArrowError> {
        let upserts = overlay.iter().filter_map(|(_, v)| v.as_ref());
        let rows = codec.decode(upserts.map(|(row, _)| *row))?;
        let mut keys = self.keys.clone();
        let mut batches = self.batches.clone();
        let mut live = self.live.clone();
        let mut segments = self.segments.clone();
        let mut next = keys.len();
        if rows.num_rows() > 0 {
            keys.push(Keys::of(codec, &rows)?)?;
            batches.push(rows);
            live.push(None);
            segments.push(Arc::default());
        }
        let mut index = self.index.clone();
        let mut killed: Vec<Vec<usize>> = vec![Vec::new(); self.batches.len()];
        for (key, value) in overlay {
            let hash = index.hash(key);
            let old = index.get(hash, key, &keys);
            if let Some(old) = old {
                let (batch, row) = keys.locate(old);
                killed[batch].push(row);
            }
            match (old, value) {
                (Some(old), Some((_, count))) => {
                    index.replace(hash, old, next);
                    index.set_count(next, *count);
                }
                (Some(_), None) => {
                    index.remove(hash, key, &keys);
                }
                (None, Some((_, count))) => {
                    index.insert_new(hash, next, &keys);
                    index.set_count(next, *count);
                }
                (None, None) => {}
            }
            if value.is_some() {
                next += 1;
            }
        }
        let mut dead = self.dead;
        for (b, rows) in killed.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            let n = self.batches[b].num_rows();
            live[b] = Some(without_rows(live[b].as_ref(), n, rows));
            dead += rows.len();
        }
        Ok(Self {
            batches,
            live,
            dead,
            appended: self.appended + 1,
            keys,
            index,
            len,
            segments,
        })
    }

    /// The batch, row and copy count of `key`, if the base holds it.
    pub fn find(&self, key: &[u8]) -> Option<(usize, usize, u32)> {
        let id = self.index.get(self.index.hash(key), key, &self.keys)?;
        let (batch, row) = self.keys.locate(id);
        Some((batch, row, self.index.count(id)))
    }

    /// Which rows of batch `batch` are live; `None` when all of them are.
    pub fn live(&self, batch: usize) -> Option<&BooleanBuffer> {
        self.live[batch].as_ref()
    }

    /// Rows held in the batches, dead ones included.
    fn held(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    /// Live rows held, distinct keys once.
    pub fn rows(&self) -> usize {
        self.held() - self.dead
    }
}

/// The rows `live` marks (all `n` when `None`) less `rows`.
pub(super) fn without_rows(
    live: Option<&BooleanBuffer>,
    n: usize,
    rows: &[usize],
) -> BooleanBuffer {
    let mut mask = BooleanBufferBuilder::new(n);
    match live {
        Some(live) => mask.append_buffer(live),
        None => mask.append_n(n, true),
    }
    for &row in rows {
        mask.set_bit(row, false);
    }
    mask.finish()
}
