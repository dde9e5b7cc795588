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

use arrow::error::ArrowError;
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
/// and `after` are the batch's images encoded as (keys, rows), their rows from `offsets`
/// (before, after) on (several batches may be encoded together). The before image's full rows
/// are read only for keyless tables (the copies a delete leaves), so a keyed table's caller
/// may encode its keys alone; a keyless table's before image without them is an error.
pub fn apply(
    current: &mut CurrentTable,
    keyless: bool,
    batch: &ChangeBatch,
    before: Option<(&Rows, Option<&Rows>)>,
    after: Option<&(Rows, Rows)>,
    offsets: (usize, usize),
    entries: &mut Vec<StreamedEntry>,
) -> Result<(), ArrowError> {
    if keyless && batch.before.is_some() && before.is_some_and(|(_, rows)| rows.is_none()) {
        return Err(ArrowError::InvalidArgumentError(
            "the before image of a table without a primary key was encoded without its rows".into(),
        ));
    }
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
        let old = before.map(|(k, r)| (k.row(offsets.0 + i), r.map(|r| r.row(offsets.0 + i))));
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
                    // Checked above: a keyless table's before rows are encoded.
                    let value = orow
                        .filter(|_| left > 0)
                        .map(|orow| (Arc::new(orow.owned()), left));
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::current::TableSnapshot;
    use crate::state::fixtures::{batch, codec, ids};

    /// A keyed table's deletes need only the before image's keys; a keyless table's before
    /// image without its rows is refused, the table unchanged.
    #[test]
    fn before_rows_are_needed_only_without_a_primary_key() {
        for keyed in [true, false] {
            let c = codec(keyed);
            let rows = batch(&c, &[(1, "a"), (2, "b")]);
            let mut current = CurrentTable::new(Arc::clone(&c), &rows).unwrap();
            let deleted = batch(&c, &[(1, "a")]);
            let change = ChangeBatch {
                table: Arc::clone(c.schema()),
                op: Op::Delete,
                before: Some(deleted.clone()),
                after: None,
                index: vec![(1, 0)],
            };
            let keys = c.keys(&deleted).unwrap();
            let mut entries = Vec::new();
            let result = apply(
                &mut current,
                !keyed,
                &change,
                Some((&keys, None)),
                None,
                (0, 0),
                &mut entries,
            );
            let left = ids(&TableSnapshot::of(&current).scan_all().unwrap());
            if keyed {
                result.unwrap();
                assert_eq!(left, vec![(2, "b".into())]);
                assert_eq!(entries.len(), 1);
            } else {
                let error = result.unwrap_err().to_string();
                assert!(error.contains("without a primary key"), "{error}");
                assert_eq!(left, vec![(1, "a".into()), (2, "b".into())]);
                assert!(entries.is_empty());
            }
        }
    }
}
