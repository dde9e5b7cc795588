//! What one commit of a sink reads: the changelog entries its scans appended since the last
//! commit, at most about `max_commit_entries` of them, cut where a source transaction ends.
//!
//! # Invariant
//! The entries of a read are exactly those of the scanned tables whose `_position` sorts
//! before one cut (every entry when nothing was cut): a cut is the start of a source
//! transaction (the text before its coordinate, which sorts before all of its entries in every
//! table) or, between two snapshot reads, the first entry left out. So a commit never holds
//! half a source transaction, and the next read, after the largest position this one held,
//! finds no gap. A read always holds at least one entry when any is pending, so a sink always
//! makes progress.

use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch, StringArray};
use arrow::compute::filter_record_batch;
use arrow::compute::kernels::cmp::gt;
use arrow::datatypes::UInt64Type;
use futures::TryStreamExt;

use super::error::SinkError;
use crate::provider::tail::{entries_from, entries_through};
use crate::state::changelog::{Changelog, POSITION_COLUMN, TX_COLUMN};

/// One commit's entries; see the module docs.
#[derive(Debug)]
pub(super) struct Read {
    /// Per scan, its entries after the sink's committed position.
    pub entries: Vec<Vec<RecordBatch>>,
    /// The largest `_position` read, including entries at or before the committed position.
    pub newest: Option<String>,
    /// Entries past the cut remain: the next commit follows without waiting.
    pub more: bool,
}

/// The entries read from one scan before the cut between scans is known.
struct ScanRead {
    batches: Vec<RecordBatch>,
    /// Where the scan stopped short of its version's entries: the cut it asks for.
    cut: Option<String>,
}

fn input(e: impl std::fmt::Display) -> SinkError {
    SinkError::Input(format!("reading the changelog: {e}"))
}

fn positions(batch: &RecordBatch) -> &StringArray {
    batch.column(POSITION_COLUMN).as_string::<i32>()
}

/// The coordinate of the source transaction a `_position` belongs to: its text up to the
/// second `:` (`file:offset`), which sorts before every entry of that transaction.
fn coordinate(position: &str) -> &str {
    match position.match_indices(':').nth(1) {
        Some((i, _)) => &position[..i],
        None => position,
    }
}

/// The cut that leaves out entry `i` of `batch` and everything after it: the start of its
/// source transaction, or its own position for a snapshot read (`_tx` 0).
fn cut_before(batch: &RecordBatch, i: usize) -> String {
    let position = positions(batch).value(i);
    if batch
        .column(TX_COLUMN)
        .as_primitive::<UInt64Type>()
        .value(i)
        == 0
    {
        position.to_string()
    } else {
        coordinate(position).to_string()
    }
}

/// Reads `log` from entry `from`: whole batches until `budget` entries are held, then on to
/// the end of the transaction in progress; the rest is left for a later read.
async fn read_scan(log: &Changelog, from: usize, budget: usize) -> Result<ScanRead, SinkError> {
    let mut stream = entries_from(log, from, Arc::clone(&log.schema));
    let mut batches = Vec::new();
    let mut taken = 0usize;
    // The coordinate of the last entry taken.
    let mut last: Option<String> = None;
    while let Some(batch) = stream.try_next().await.map_err(input)? {
        let n = batch.num_rows();
        let p = positions(&batch);
        let tx = batch.column(TX_COLUMN).as_primitive::<UInt64Type>();
        let mut k = budget.saturating_sub(taken).min(n);
        // A binlog entry at the coordinate of the entry before it is of the same transaction
        // (or follows snapshot reads at that coordinate, which its cut would leave out).
        while k < n && tx.value(k) != 0 && {
            let previous = match k {
                0 => last.as_deref(),
                _ => Some(coordinate(p.value(k - 1))),
            };
            previous == Some(coordinate(p.value(k)))
        } {
            k += 1;
        }
        if k > 0 {
            last = Some(coordinate(p.value(k - 1)).to_string());
            batches.push(if k == n {
                batch.clone()
            } else {
                batch.slice(0, k)
            });
            taken += k;
        }
        if k < n {
            return Ok(ScanRead {
                cut: Some(cut_before(&batch, k)),
                batches,
            });
        }
    }
    Ok(ScanRead { batches, cut: None })
}

/// How many leading entries of `batches` sort before `cut` (they are a prefix: a changelog
/// is in position order).
fn before_cut(batches: &[RecordBatch], cut: &str) -> usize {
    let mut kept = 0;
    for batch in batches {
        let p = positions(batch);
        let here = (0..p.len()).take_while(|&i| p.value(i) < cut).count();
        kept += here;
        if here < p.len() {
            break;
        }
    }
    kept
}

/// The first `n` entries of `batches`.
fn prefix(batches: Vec<RecordBatch>, mut n: usize) -> Vec<RecordBatch> {
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        if n == 0 {
            break;
        }
        let take = batch.num_rows().min(n);
        out.push(if take == batch.num_rows() {
            batch
        } else {
            batch.slice(0, take)
        });
        n -= take;
    }
    out
}

/// Where each scan (reading table `tables[i]` of `changelogs`) starts for a sink committed
/// through `after`: the first entry after it (segments ending before it are not read at all).
pub(super) async fn start_cursors(
    changelogs: &[Changelog],
    tables: &[usize],
    after: Option<&str>,
) -> Result<Vec<usize>, SinkError> {
    let mut cursors = Vec::with_capacity(tables.len());
    for &table in tables {
        let cursor = match (changelogs.get(table), after) {
            (Some(log), Some(after)) => entries_through(log, after).await.map_err(input)?,
            _ => 0,
        };
        cursors.push(cursor);
    }
    Ok(cursors)
}

/// The next commit's entries of the scans (reading table `tables[i]` of `changelogs`) from
/// `cursors` on (advanced past them), at most about
/// `max_entries` of them (see the module docs), without those at or before `after`.
pub(super) async fn read_new(
    changelogs: &[Changelog],
    tables: &[usize],
    cursors: &mut [usize],
    after: Option<&str>,
    max_entries: usize,
) -> Result<Read, SinkError> {
    // Each scan may fill its share: the scan whose cut comes first keeps all it read, so a
    // read with pending entries always holds some.
    let budget = max_entries.div_ceil(tables.len().max(1)).max(1);
    let mut reads = Vec::with_capacity(tables.len());
    for (&table, cursor) in tables.iter().zip(cursors.iter()) {
        reads.push(match changelogs.get(table) {
            Some(log) => Some(read_scan(log, *cursor, budget).await?),
            None => None,
        });
    }
    let cut = reads.iter().flatten().filter_map(|r| r.cut.clone()).min();
    let counts: Vec<usize> = reads
        .iter()
        .map(|r| {
            r.as_ref().map_or(0, |r| match &cut {
                Some(c) => before_cut(&r.batches, c),
                None => r.batches.iter().map(RecordBatch::num_rows).sum(),
            })
        })
        .collect();
    let mut entries = Vec::with_capacity(reads.len());
    let mut newest: Option<String> = None;
    for ((read, cursor), count) in reads.into_iter().zip(cursors.iter_mut()).zip(counts) {
        let Some(read) = read else {
            entries.push(Vec::new());
            continue;
        };
        *cursor += count;
        let batches = prefix(read.batches, count);
        if let Some(last) = batches.last() {
            let p = positions(last).value(last.num_rows() - 1);
            if newest.as_deref().is_none_or(|n| p > n) {
                newest = Some(p.to_string());
            }
        }
        let mut kept = Vec::with_capacity(batches.len());
        for batch in batches {
            let batch = match after {
                Some(after) => {
                    let keep =
                        gt(positions(&batch), &StringArray::new_scalar(after)).map_err(input)?;
                    filter_record_batch(&batch, &keep).map_err(input)?
                }
                None => batch,
            };
            if batch.num_rows() > 0 {
                kept.push(batch);
            }
        }
        entries.push(kept);
    }
    Ok(Read {
        entries,
        newest,
        more: cut.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::changelog::{changelog_schema, ChangelogSegment};
    use arrow::array::{ArrayRef, Int32Array, StructArray, TimestampMicrosecondArray, UInt64Array};
    use arrow::datatypes::{DataType, Field, Int32Type, Schema};

    /// An entry: its transaction's offset (`_tx` 0 for a snapshot read at that offset), its
    /// event within the transaction and its row.
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct Entry {
        offset: u64,
        tx: u64,
        event: u32,
        row: u32,
        id: i32,
    }

    fn position(e: &Entry) -> String {
        format!(
            "bin.000001:{:012}:{:010}:{:010}:0",
            e.offset, e.event, e.row
        )
    }

    /// A changelog with one segment per run of `entries` that `split` separates.
    fn changelog(entries: &[Entry], split: &[usize]) -> Changelog {
        let table = Schema::new(vec![Field::new("id", DataType::Int32, false)]);
        let mut log = Changelog::new(&table);
        let schema = changelog_schema(&table);
        let mut bounds = vec![0];
        bounds.extend_from_slice(split);
        bounds.push(entries.len());
        for w in bounds.windows(2) {
            let part = &entries[w[0]..w[1]];
            let n = part.len();
            let before = match schema.field(schema.fields().len() - 1).data_type() {
                DataType::Struct(fields) => StructArray::new_null(fields.clone(), n),
                _ => unreachable!(),
            };
            let columns: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(vec!["c"; n])),
                Arc::new(StringArray::from_iter_values(part.iter().map(position))),
                Arc::new(StringArray::new_null(n)),
                Arc::new(UInt64Array::from_iter_values(part.iter().map(|e| e.tx))),
                Arc::new(TimestampMicrosecondArray::new_null(n).with_timezone("UTC")),
                Arc::new(StringArray::from(vec!["db.t"; n])),
                Arc::new(arrow::array::UInt32Array::from(vec![0; n])),
                Arc::new(Int32Array::from_iter_values(part.iter().map(|e| e.id))),
                Arc::new(before),
            ];
            let batch = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
            log.append(ChangelogSegment::of_batch(batch)).unwrap();
        }
        log
    }

    fn snapshot(offset: u64, rows: std::ops::Range<u32>, id: i32) -> Vec<Entry> {
        rows.enumerate()
            .map(|(i, row)| Entry {
                offset,
                tx: 0,
                event: 0,
                row,
                id: id + i as i32,
            })
            .collect()
    }

    fn tx(offset: u64, tx: u64, rows: u32, id: i32) -> Vec<Entry> {
        (0..rows)
            .map(|row| Entry {
                offset,
                tx,
                event: 1,
                row,
                id: id + row as i32,
            })
            .collect()
    }

    fn ids(batches: &[RecordBatch]) -> Vec<i32> {
        batches
            .iter()
            .flat_map(|b| b.column(7).as_primitive::<Int32Type>().values().to_vec())
            .collect()
    }

    /// Two tables: `a` has snapshot reads (one at the very coordinate of the transaction
    /// after it), then transactions 1-3; `b` has parts of transactions 1 and 3.
    fn tables() -> (Vec<Changelog>, Vec<Vec<Entry>>) {
        let a: Vec<Entry> = [
            snapshot(50, 0..4, 0),
            snapshot(100, 0..2, 4),
            tx(100, 1, 2, 6),
            tx(200, 2, 3, 8),
            tx(300, 3, 1, 11),
        ]
        .concat();
        let b: Vec<Entry> = [tx(100, 1, 1, 100), tx(300, 3, 2, 101)].concat();
        // Segments that do not follow transactions (as a store's read groups may not).
        let logs = vec![changelog(&a, &[3, 7, 9]), changelog(&b, &[2])];
        (logs, vec![a, b])
    }

    /// Reads every commit of `tables` after `after` with `max` entries a commit; returns the
    /// ids of each commit per table.
    async fn commits(
        logs: &[Changelog],
        max: usize,
        after: Option<String>,
    ) -> Vec<(Vec<Vec<i32>>, Option<String>)> {
        let tables = [0, 1];
        let mut after = after;
        let mut cursors = start_cursors(logs, &tables, after.as_deref())
            .await
            .unwrap();
        let mut out = Vec::new();
        loop {
            let read = read_new(logs, &tables, &mut cursors, after.as_deref(), max)
                .await
                .unwrap();
            let got: Vec<Vec<i32>> = read.entries.iter().map(|b| ids(b)).collect();
            if read.newest.is_none() {
                assert!(!read.more);
                return out;
            }
            assert!(
                got.iter().any(|g| !g.is_empty()),
                "a read with pending entries holds some"
            );
            after.clone_from(&read.newest);
            out.push((got, read.newest));
            if !read.more {
                let again = read_new(logs, &tables, &mut cursors, after.as_deref(), max)
                    .await
                    .unwrap();
                assert!(again.newest.is_none());
                return out;
            }
        }
    }

    #[tokio::test]
    async fn commits_are_bounded_whole_transactions_with_no_gap_or_overlap() {
        let (logs, entries) = tables();
        for max in 1..=20 {
            let commits = commits(&logs, max, None).await;
            for (t, table) in entries.iter().enumerate() {
                let all: Vec<i32> = commits.iter().flat_map(|(c, _)| c[t].clone()).collect();
                let expected: Vec<i32> = table.iter().map(|e| e.id).collect();
                assert_eq!(
                    all, expected,
                    "max {max}, table {t}: every entry once, in order"
                );
            }
            for (c, _) in &commits {
                // A binlog transaction is in one commit with all its entries of both tables.
                for (t, table) in entries.iter().enumerate() {
                    for e in table.iter().filter(|e| e.tx != 0) {
                        let whole: Vec<(usize, i32)> = entries
                            .iter()
                            .enumerate()
                            .flat_map(|(u, es)| es.iter().map(move |x| (u, *x)))
                            .filter(|(_, x)| x.tx == e.tx)
                            .map(|(u, x)| (u, x.id))
                            .collect();
                        if c[t].contains(&e.id) {
                            for (u, id) in whole {
                                assert!(c[u].contains(&id), "max {max}: tx {} split", e.tx);
                            }
                        }
                    }
                }
                let size: usize = c.iter().map(Vec::len).sum();
                // A commit goes past its bound only to finish a transaction (at most 3
                // entries of one here) or the snapshot reads at its coordinate.
                assert!(size <= max.max(2) + 5, "max {max}: a commit of {size}");
            }
            let positions: Vec<&String> = commits.iter().filter_map(|(_, p)| p.as_ref()).collect();
            assert!(positions.windows(2).all(|w| w[0] < w[1]), "max {max}");
        }
        // One commit when the bound is not reached.
        assert_eq!(commits(&logs, 100, None).await.len(), 1);
        // Small bounds make many commits.
        assert!(commits(&logs, 1, None).await.len() >= 5);
    }

    #[tokio::test]
    async fn a_sink_resumes_after_its_position_without_reading_what_it_committed() {
        let (logs, entries) = tables();
        // Committed through the end of transaction 1.
        let through = position(&entries[0][7]);
        let cursors = start_cursors(&logs, &[0, 1], Some(&through)).await.unwrap();
        assert_eq!(
            cursors,
            vec![8, 1],
            "the entries through transaction 1 are skipped"
        );
        let commits = commits(&logs, 2, Some(through)).await;
        let a: Vec<i32> = commits.iter().flat_map(|(c, _)| c[0].clone()).collect();
        let b: Vec<i32> = commits.iter().flat_map(|(c, _)| c[1].clone()).collect();
        assert_eq!(a, vec![8, 9, 10, 11]);
        assert_eq!(b, vec![101, 102]);
    }
}
