//! A table's state at a past position, rebuilt from a later state and the changelog entries
//! between the two: every entry undone, newest first.
//!
//! # Invariant
//! Undoing is replay run backwards. A changelog that replays to the current table gives, for
//! any position inside its history, exactly the state that replaying its entries up to that
//! position gives. Each entry is undone on its own: a `c` or `r` added a row that was absent
//! (or, for a keyless table, one more copy of it), a `d` removed the row its image holds, a
//! `u` replaced its `_before` image with its row. An entry whose row the later state does not
//! hold means the two do not belong together; that is an error, never a guess.
//!
//! The cost is that of the entries undone plus one overlay on the later state: the table
//! itself is shared, not copied, so reading a recent position of a large table is cheap.

use std::sync::Arc;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::error::ArrowError;
use arrow::row::Rows;

use super::changelog::ChangelogRows;
use super::current::{CurrentTable, TableSnapshot};
use crate::change::position::BinlogCoord;
use crate::change::{Op, UnknownOp};

/// Undoing entries failed.
#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    #[error(transparent)]
    Arrow(#[from] ArrowError),
    #[error(transparent)]
    UnknownOp(#[from] UnknownOp),
    /// The later state does not hold what an entry produced.
    #[error(
        "the {op:?} entry at position {position} of {table} does not match the table's later \
         state: its changelog does not replay to its current table"
    )]
    Mismatch {
        table: String,
        op: String,
        position: String,
    },
}

/// The state `later` had before `entries` (changelog entries of its table, in the table's
/// changelog schema and in append order, all after the wanted position and up to `later`'s),
/// marked as reflecting `position`.
pub fn undo(
    later: &TableSnapshot,
    entries: &RecordBatch,
    position: Option<BinlogCoord>,
) -> Result<TableSnapshot, UndoError> {
    let codec = Arc::clone(later.codec());
    let table = codec.schema();
    let width = table.arrow.fields().len();
    let rows = ChangelogRows::new(entries)?;
    if rows.image().len() != width {
        return Err(ArrowError::SchemaError(format!(
            "changelog entries of {} have {} columns of the table, where {width} were expected",
            table.id,
            rows.image().len(),
        ))
        .into());
    }
    let ops = (0..rows.len())
        .map(|i| rows.op(i))
        .collect::<Result<Vec<Op>, UnknownOp>>()?;
    let images = RecordBatch::try_new(Arc::clone(&table.arrow), rows.image().to_vec())?;
    let (image_keys, image_rows) = codec.encode(&images)?;
    // Before images exist for updates only; the others are NULL and cannot be keyed.
    let updates: Vec<u32> = (0..entries.num_rows() as u32)
        .filter(|i| ops[*i as usize] == Op::Update)
        .collect();
    let befores = before_images(&rows, &table.arrow, &updates)?;
    let (before_keys, before_rows) = codec.encode(&befores)?;
    let mut update_of = vec![None; entries.num_rows()];
    for (j, i) in updates.iter().enumerate() {
        update_of[*i as usize] = Some(j);
    }

    let mut state = CurrentTable::from_snapshot(later);
    for i in (0..entries.num_rows()).rev() {
        let mismatch = || UndoError::Mismatch {
            table: table.id.to_string(),
            op: ops[i].code().to_string(),
            position: rows.position(i).to_string(),
        };
        match ops[i] {
            Op::Insert | Op::Read => {
                remove_copy(&mut state, &image_keys, &image_rows, i).ok_or_else(mismatch)?
            }
            Op::Delete => add_copy(&mut state, &image_keys, &image_rows, i),
            Op::Update => {
                let j = update_of[i].ok_or_else(mismatch)?;
                remove_copy(&mut state, &image_keys, &image_rows, i).ok_or_else(mismatch)?;
                add_copy(&mut state, &before_keys, &before_rows, j);
            }
        }
    }
    Ok(state.snapshot(position)?)
}

/// The `_before` images of entries `rows` as a batch of the table's schema.
fn before_images(
    entries: &ChangelogRows<'_>,
    table: &arrow::datatypes::SchemaRef,
    rows: &[u32],
) -> Result<RecordBatch, ArrowError> {
    let rows = UInt32Array::from(rows.to_vec());
    let columns = entries
        .before()
        .columns()
        .iter()
        .map(|c| take(c, &rows, None))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(Arc::clone(table), columns)
}

/// Takes away one copy of row `i` under its key; `None` when the state holds none.
fn remove_copy(state: &mut CurrentTable, keys: &Rows, rows: &Rows, i: usize) -> Option<()> {
    let key = keys.row(i);
    let held = state.count(key.as_ref());
    if held == 0 {
        return None;
    }
    let value = (held > 1).then(|| (Arc::new(rows.row(i).owned()), held - 1));
    state.put(key.as_ref(), value);
    Some(())
}

/// Puts back one copy of row `i` under its key.
fn add_copy(state: &mut CurrentTable, keys: &Rows, rows: &Rows, i: usize) {
    let key = keys.row(i);
    // A keyed table holds one row per key: the row put back replaces nothing (the entry
    // after it removed it), or, for a keyless table, is one more copy of the same row.
    let held = if state.codec().keyless() {
        state.count(key.as_ref())
    } else {
        0
    };
    state.put(
        key.as_ref(),
        Some((Arc::new(rows.row(i).owned()), held + 1)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::keys::RowCodec;
    use crate::change::position::{BinlogCoord, ChangePosition};
    use crate::change::Op;
    use crate::state::changelog::{changelog_batch, changelog_schema};
    use crate::state::fixtures::{batch, codec, ids};
    use crate::state::merge::ChangelogEvent;
    use arrow::compute::concat_batches;

    /// One changelog entry of `op` with the given images, at the `n`th position.
    fn entry(
        codec: &RowCodec,
        n: u32,
        op: Op,
        before: Option<(i32, &str)>,
        after: Option<(i32, &str)>,
    ) -> RecordBatch {
        let row = |r: (i32, &str)| codec.row_of(&batch(codec, &[r]), 0).unwrap();
        let image = after.or(before).unwrap();
        let key = codec.keys(&batch(codec, &[image])).unwrap().row(0).owned();
        let event = ChangelogEvent {
            op,
            key,
            position: ChangePosition {
                tx: BinlogCoord::new("binlog.000001", 100 + u64::from(n)),
                event_index: 1,
                row_index: 0,
                sub: 0,
            },
            gtid: None,
            commit_ts_micros: 1,
            before: before.map(row),
            after: after.map(row),
        };
        let schema = changelog_schema(&codec.schema().arrow);
        changelog_batch(codec, &schema, &[&event], &[u64::from(n)]).unwrap()
    }

    fn snapshot(codec: &Arc<RowCodec>, rows: &[(i32, &str)]) -> TableSnapshot {
        let mut table = CurrentTable::new(Arc::clone(codec), &batch(codec, rows)).unwrap();
        table.snapshot(None).unwrap()
    }

    fn rows(snap: &TableSnapshot) -> Vec<(i32, String)> {
        ids(&snap.scan_all().unwrap())
    }

    fn entries(codec: &RowCodec, list: Vec<RecordBatch>) -> RecordBatch {
        let schema = changelog_schema(&codec.schema().arrow);
        concat_batches(&schema, &list).unwrap()
    }

    #[test]
    fn undoing_every_kind_of_entry_gives_the_earlier_state() {
        let codec = codec(true);
        // Earlier: 1=a, 2=b, 3=c. Then: insert 4=d, update 2 b→x, delete 3, update 2 x→y.
        let later = snapshot(&codec, &[(1, "a"), (2, "y"), (4, "d")]);
        let log = entries(
            &codec,
            vec![
                entry(&codec, 1, Op::Insert, None, Some((4, "d"))),
                entry(&codec, 2, Op::Update, Some((2, "b")), Some((2, "x"))),
                entry(&codec, 3, Op::Delete, Some((3, "c")), None),
                entry(&codec, 4, Op::Update, Some((2, "x")), Some((2, "y"))),
            ],
        );
        let earlier = undo(&later, &log, None).unwrap();
        assert_eq!(
            rows(&earlier),
            [(1, "a".into()), (2, "b".into()), (3, "c".into())]
        );
        // Undoing a suffix only gives the state in between.
        let mid = undo(&later, &log.slice(2, 2), None).unwrap();
        assert_eq!(
            rows(&mid),
            [
                (1, "a".into()),
                (2, "x".into()),
                (3, "c".into()),
                (4, "d".into())
            ]
        );
        // The later state is shared, never changed.
        assert_eq!(
            rows(&later),
            [(1, "a".into()), (2, "y".into()), (4, "d".into())]
        );
    }

    #[test]
    fn keyless_tables_undo_copies() {
        let codec = codec(false);
        // Earlier: two copies of 1=a. Then one deleted, 2=b inserted twice, one 2=b → 3=c.
        let later = snapshot(&codec, &[(1, "a"), (2, "b"), (3, "c")]);
        let log = entries(
            &codec,
            vec![
                entry(&codec, 1, Op::Delete, Some((1, "a")), None),
                entry(&codec, 2, Op::Insert, None, Some((2, "b"))),
                entry(&codec, 3, Op::Insert, None, Some((2, "b"))),
                entry(&codec, 4, Op::Update, Some((2, "b")), Some((3, "c"))),
            ],
        );
        let earlier = undo(&later, &log, None).unwrap();
        assert_eq!(rows(&earlier), [(1, "a".into()), (1, "a".into())]);
        assert_eq!(earlier.len(), 2);
    }

    #[test]
    fn an_entry_the_later_state_does_not_hold_is_an_error() {
        let codec = codec(true);
        let later = snapshot(&codec, &[(1, "a")]);
        let log = entries(
            &codec,
            vec![entry(&codec, 1, Op::Insert, None, Some((9, "z")))],
        );
        let error = undo(&later, &log, None).unwrap_err();
        assert!(
            matches!(&error, UndoError::Mismatch { op, .. } if op == "c"),
            "{error}"
        );
        assert!(error.to_string().contains("does not replay"), "{error}");
    }
}
