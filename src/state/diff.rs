//! The changelog that turns one state of a table into another: what `ALTER SOURCE ...
//! RESNAPSHOT` appends when a fresh snapshot replaces a state the binlog can no longer bring
//! up to date (its binlog was purged).
//!
//! # Invariant
//! Replaying the entries onto the old rows gives exactly the new rows, and a row that is the
//! same in both gets no entry: the changelog's history of unchanged rows is not repeated.
//! Keyed tables get `c` (new key), `u` (same key, other row, with the old row as before image)
//! and `d` (key gone); keyless tables (multisets) get one `c` or `d` per copy gained or lost.
//! All entries carry the position of the new snapshot's end (event index 0, like snapshot
//! rows), after every entry of the old history and before every later binlog change; the
//! caller gives them their row indexes (`engine::resnapshot`), so each position is unique.

use std::collections::HashMap;

use arrow::array::RecordBatch;
use arrow::error::ArrowError;
use arrow::row::OwnedRow;

use super::merge::{snapshot_position, ChangelogEvent};
use crate::change::keys::RowCodec;
use crate::change::position::BinlogCoord;
use crate::change::Op;

/// Entries that turn `old` into `new` (both rows of `codec`'s table), positioned at `at`.
pub fn diff(
    codec: &RowCodec,
    old: &[RecordBatch],
    new: &[RecordBatch],
    at: &BinlogCoord,
) -> Result<Vec<ChangelogEvent>, ArrowError> {
    let count =
        |batches: &[RecordBatch]| -> Result<HashMap<OwnedRow, (OwnedRow, i64)>, ArrowError> {
            let mut out: HashMap<OwnedRow, (OwnedRow, i64)> = HashMap::new();
            for batch in batches {
                let (keys, rows) = codec.encode(batch)?;
                for (k, r) in keys.iter().zip(rows.iter()) {
                    out.entry(k.owned()).or_insert_with(|| (r.owned(), 0)).1 += 1;
                }
            }
            Ok(out)
        };
    let mut before = count(old)?;
    let after = count(new)?;
    let position = snapshot_position(at);
    let event =
        |op, key: &OwnedRow, before: Option<OwnedRow>, after: Option<OwnedRow>| ChangelogEvent {
            op,
            key: key.clone(),
            position: position.clone(),
            gtid: None,
            commit_ts_micros: 0,
            before,
            after,
        };
    let mut out = Vec::new();
    let keyless = codec.keyless();
    // Sorted by key, so the entries come in a stable order (their row indexes follow it).
    let mut keys: Vec<&OwnedRow> = after.keys().collect();
    keys.sort();
    for key in keys {
        let (row, n) = &after[key];
        match before.remove(key) {
            Some((old_row, old_n)) if keyless => {
                let (op, image) = if *n > old_n {
                    (Op::Insert, (None, Some(row.clone())))
                } else {
                    (Op::Delete, (Some(old_row.clone()), None))
                };
                for _ in 0..(n - old_n).abs() {
                    out.push(event(op, key, image.0.clone(), image.1.clone()));
                }
            }
            Some((old_row, _)) if old_row == *row => {}
            Some((old_row, _)) => {
                out.push(event(Op::Update, key, Some(old_row), Some(row.clone())))
            }
            None => {
                for _ in 0..*n {
                    out.push(event(Op::Insert, key, None, Some(row.clone())));
                }
            }
        }
    }
    let mut gone: Vec<(OwnedRow, (OwnedRow, i64))> = before.into_iter().collect();
    gone.sort_by(|a, b| a.0.cmp(&b.0));
    for (key, (row, n)) in gone {
        for _ in 0..n {
            out.push(event(Op::Delete, &key, Some(row.clone()), None));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::{batch, codec};

    fn ops(events: &[ChangelogEvent]) -> Vec<&'static str> {
        let mut v: Vec<&str> = events.iter().map(|e| e.op.code()).collect();
        v.sort();
        v
    }

    #[test]
    fn only_rows_that_differ_get_entries() {
        let c = codec(true);
        let old = batch(&c, &[(1, "a"), (2, "b"), (3, "c")]);
        let new = batch(&c, &[(1, "a"), (2, "B"), (4, "d")]);
        let at = BinlogCoord::new("binlog.000009", 4);
        let events = diff(&c, &[old], &[new], &at).unwrap();
        assert_eq!(ops(&events), ["c", "d", "u"]);
        let update = events.iter().find(|e| e.op == Op::Update).unwrap();
        assert!(update.before.is_some() && update.after.is_some());
        assert!(events.iter().all(|e| e.position == snapshot_position(&at)));
        let same = batch(&c, &[(1, "a")]);
        assert!(diff(
            &c,
            std::slice::from_ref(&same),
            std::slice::from_ref(&same),
            &at
        )
        .unwrap()
        .is_empty());
    }

    #[test]
    fn keyless_tables_gain_and_lose_copies() {
        let c = codec(false);
        let old = batch(&c, &[(1, "a"), (1, "a"), (2, "b")]);
        let new = batch(&c, &[(1, "a"), (3, "c"), (3, "c")]);
        let at = BinlogCoord::new("binlog.000009", 4);
        let events = diff(&c, &[old], &[new], &at).unwrap();
        assert_eq!(ops(&events), ["c", "c", "d", "d"]);
    }
}
