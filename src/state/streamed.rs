//! Changes applied after the hand-off, and their changelog entries kept as rows of the change
//! batches' own Arrow images.
//!
//! After the hand-off every change is newer than anything the state holds, so no version is
//! compared and the binlog's own images say everything: an entry is fully described by the
//! batch row it came from, which image shows the row (the after image, or the before image of
//! a delete), whether the before image is its `_before` (an update in place), its operation and
//! its sub-index. [`apply`] updates the current table and records such entries;
//! `changelog::streamed_batch` then takes the rows the entries name from the images, column
//! by column, so a change is never turned into row format and back on its way to the
//! changelog. `merge` spells the same entries as events for the callers that want them.
//!
//! # Invariant
//! The entries of one batch are in position order, and a table's batches of a run, in order,
//! hold its entries in position order: the entries, and their order, are exactly those of
//! applying the batch's transactions one by one (`merge`'s tests compare the two).

use std::sync::Arc;

use arrow::row::Rows;

use super::current::CurrentTable;
use crate::change::{ChangeBatch, Op};

/// Which image of its batch row an entry shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryImage {
    /// The after image (an insert, or the new row of a split update).
    After,
    /// The before image (a delete, or the old row of a split update).
    Before,
    /// The after image, with the before image as `_before` (an update in place).
    Update,
}

/// One changelog entry, as a row of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamedEntry {
    /// The row of the batch the entry comes from.
    pub row: u32,
    pub op: Op,
    /// The position's sub-index: 1 for the new row of an update that changed the key.
    pub sub: u8,
    pub image: EntryImage,
}

/// The entries of one change batch of a run, with the batch (its images shared, not copied)
/// and each row's transaction (an index into the run's transactions).
#[derive(Debug, Clone)]
pub struct StreamedBatch {
    pub batch: ChangeBatch,
    pub tx: Vec<u32>,
    pub entries: Vec<StreamedEntry>,
}

/// Applies the rows of `batch` to `current`, pushing their entries onto `entries`. `before`
/// and `after` are the batch's images encoded as (key, row), its rows from `offsets`
/// (before, after) on (several batches may be encoded together).
pub fn apply(
    current: &mut CurrentTable,
    keyless: bool,
    batch: &ChangeBatch,
    before: Option<&(Rows, Rows)>,
    after: Option<&(Rows, Rows)>,
    offsets: (usize, usize),
    entries: &mut Vec<StreamedEntry>,
) {
    let before = batch.before.as_ref().and(before);
    let after = batch.after.as_ref().and(after);
    let sub_of_new = u8::from(batch.op == Op::Update);
    for i in 0..batch.num_rows() {
        let row = i as u32;
        let entry = |op, sub, image| StreamedEntry {
            row,
            op,
            sub,
            image,
        };
        let old = before.map(|(k, r)| (k.row(offsets.0 + i), r.row(offsets.0 + i)));
        let new = after.map(|(k, r)| (k.row(offsets.1 + i), r.row(offsets.1 + i)));
        match (old, new) {
            (Some((ok, _)), Some((nk, nrow))) if ok == nk && !keyless => {
                current.put(nk.data(), Some((Arc::new(nrow.owned()), 1)));
                entries.push(entry(Op::Update, 0, EntryImage::Update));
            }
            (old, new) => {
                if let Some((ok, orow)) = old {
                    let left = if keyless {
                        current.count(ok.data()).saturating_sub(1)
                    } else {
                        0
                    };
                    let value = (left > 0).then(|| (Arc::new(orow.owned()), left));
                    current.put(ok.data(), value);
                    entries.push(entry(Op::Delete, 0, EntryImage::Before));
                }
                if let Some((nk, nrow)) = new {
                    let row = Arc::new(nrow.owned());
                    let op = if keyless {
                        let copies = current.count(nk.data()) + 1;
                        current.put(nk.data(), Some((row, copies)));
                        Op::Insert
                    } else if current.put(nk.data(), Some((row, 1))) > 0 {
                        // A key that holds a row: an upsert over it.
                        Op::Update
                    } else {
                        Op::Insert
                    };
                    entries.push(entry(op, sub_of_new, EntryImage::After));
                }
            }
        }
    }
}
