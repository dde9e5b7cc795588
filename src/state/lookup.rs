//! Lookups of a current-table version by a secondary index (`state::secondary`): the rows whose
//! first index column holds given values, without a scan; the same filter by a scan, for
//! sessions that turn indexes off; and what each index holds, for `cdc.indexes`.
//!
//! # Invariant
//! [`TableSnapshot::lookup_index`] and [`TableSnapshot::scan_where`] give the same rows with
//! the same copies for the same version and values: the rows a scan filtered on equality of
//! that column gives.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::error::ArrowError;
use arrow::row::{RowConverter, Rows, SortField};

use super::current::TableSnapshot;

/// What one secondary index of a table version holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexUse {
    /// Base batches whose sorted order is built, of all of them.
    pub batches_sorted: usize,
    pub batches: usize,
    /// Overlay entries (rows changed since the base was built).
    pub overlay_entries: usize,
    /// Bytes of the sorted orders built and of the overlay's entries (an estimate).
    pub bytes: usize,
}

impl TableSnapshot {
    /// The rows whose first column of secondary index `index` (of the table's codec) holds
    /// one of the values `firsts` encodes ([`IndexCodec::encode_first`]), with their copies;
    /// see the module docs. Each row once, whatever `firsts` repeats.
    pub fn lookup_index(&self, index: usize, firsts: &Rows) -> Result<RecordBatch, ArrowError> {
        let Some(spec) = self.codec.indexes().get(index) else {
            return Err(ArrowError::InvalidArgumentError(format!(
                "{} has no secondary index {index}",
                self.codec.schema().id
            )));
        };
        let mut prefixes: Vec<&[u8]> = firsts.iter().map(|r| r.data()).collect();
        prefixes.sort_unstable();
        prefixes.dedup();
        let base = &self.base;
        let mut base_rows = Vec::new();
        for (b, batch) in base.batches.iter().enumerate() {
            let sorted = base.segments[b].sorted(spec, batch)?;
            let live = base.live(b);
            let start = base.keys.start(b);
            for prefix in &prefixes {
                for row in sorted.matching(prefix) {
                    if live.is_some_and(|l| !l.value(row)) {
                        continue;
                    }
                    let id = start + row as u32;
                    // The overlay decides for a key it holds, upsert or delete.
                    if self.overlay.contains_key(&*base.keys.key(id)) {
                        continue;
                    }
                    let copies = base.index.count(id) as usize;
                    base_rows.extend(std::iter::repeat_n((b, row), copies));
                }
            }
        }
        let built;
        let indexes = match &self.indexes {
            Some(indexes) => indexes,
            None => {
                built = self.overlay_indexes()?;
                &built
            }
        };
        let mut overlay_rows = Vec::new();
        for prefix in &prefixes {
            for key in indexes[index].matching(prefix) {
                if let Some(Some((row, n))) = self.overlay.get(key) {
                    overlay_rows.extend(std::iter::repeat_n(Arc::clone(row), *n as usize));
                }
            }
        }
        self.gather(&base_rows, &overlay_rows)
    }

    /// The rows whose column `column` holds one of `values` (of its type), by scanning every
    /// row and comparing the column's bytes in Arrow's row format, as an index compares them:
    /// what a lookup by an index on that column gives, without the index.
    pub fn scan_where(
        &self,
        column: usize,
        values: &ArrayRef,
    ) -> Result<Vec<RecordBatch>, ArrowError> {
        let field = SortField::new(values.data_type().clone());
        let converter = RowConverter::new(vec![field])?;
        let wanted = converter.convert_columns(std::slice::from_ref(values))?;
        let wanted: HashSet<&[u8]> = wanted.iter().map(|r| r.data()).collect();
        let mut out = Vec::new();
        for batch in self.scan_all()? {
            let held = converter.convert_columns(std::slice::from_ref(batch.column(column)))?;
            let keep: BooleanArray = held
                .iter()
                .map(|r| Some(wanted.contains(r.data())))
                .collect();
            out.push(filter_record_batch(&batch, &keep)?);
        }
        Ok(out)
    }

    /// What secondary index `index` of this version holds; `None` when there is no such index.
    pub fn index_use(&self, index: usize) -> Option<IndexUse> {
        let spec = self.codec.indexes().get(index)?;
        let mut out = IndexUse {
            batches_sorted: 0,
            batches: self.base.batches.len(),
            overlay_entries: 0,
            bytes: 0,
        };
        for segment in &self.base.segments {
            if let Some(bytes) = segment.built(spec) {
                out.batches_sorted += 1;
                out.bytes += bytes;
            }
        }
        if let Some(overlay) = self.indexes.as_ref().and_then(|i| i.get(index)) {
            out.overlay_entries = overlay.len();
            out.bytes += overlay.memory_size();
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{ArrayRef, StringArray};
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::state::current::CurrentTable;
    use crate::state::fixtures::{batch, ids, indexed_codec};

    const VALUES: [&str; 6] = ["a", "b", "c", "dd", "", "a\u{e9}"];

    /// The rows of `snap` with `v` one of `values`, by a scan.
    fn scanned(snap: &TableSnapshot, values: &[&str]) -> Vec<(i32, String)> {
        let mut rows = ids(&snap.scan_all().unwrap());
        rows.retain(|(_, v)| values.contains(&v.as_str()));
        rows
    }

    /// The rows of `snap` with `v` one of `values`, by the index.
    fn looked_up(snap: &TableSnapshot, values: &[&str]) -> Vec<(i32, String)> {
        let index = &snap.codec().indexes()[0];
        let values: ArrayRef = Arc::new(StringArray::from_iter_values(values));
        let firsts = index.encode_first(&values).unwrap();
        ids(&[snap.lookup_index(0, &firsts).unwrap()])
    }

    fn check(snap: &TableSnapshot) {
        for v in VALUES {
            assert_eq!(looked_up(snap, &[v]), scanned(snap, &[v]), "v = {v:?}");
        }
        let some = ["b", "zz", "dd", "b"];
        assert_eq!(looked_up(snap, &some), scanned(snap, &some));
    }

    /// Random upserts and deletes, snapshots between them (merges of the overlay included):
    /// every lookup by the index equals the scan of the same version, and an old version's
    /// answer never changes.
    fn random_workload(keyed: bool, seed: u64) {
        let codec = indexed_codec(keyed);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let start: Vec<(i32, &str)> = (0..1500).map(|i| (i, VALUES[i as usize % 4])).collect();
        let mut table = CurrentTable::new(Arc::clone(&codec), &batch(&codec, &start)).unwrap();
        let mut kept = Vec::new();
        for step in 0..6000 {
            let id = rng.random_range(0..2600);
            let v = VALUES[rng.random_range(0..VALUES.len())];
            let encoded = codec.encode(&batch(&codec, &[(id, v)])).unwrap();
            let (key, row) = (encoded.0.row(0), encoded.1.row(0).owned());
            if keyed {
                if rng.random_bool(0.2) {
                    table.put(key.as_ref(), None);
                } else {
                    table.put(key.as_ref(), Some((Arc::new(row), 1)));
                }
            } else {
                // A multiset: one copy more or one fewer of the row.
                let now = table.count(key.as_ref());
                let copies = if rng.random_bool(0.4) {
                    now.saturating_sub(1)
                } else {
                    now + 1
                };
                let value = (copies > 0).then(|| (Arc::new(row), copies));
                table.put(key.as_ref(), value);
            }
            if step % 7 == 0 {
                let snap = table.snapshot(None).unwrap();
                if step % 350 == 0 {
                    check(&snap);
                    let answer = looked_up(&snap, &["a", "dd"]);
                    kept.push((snap, answer));
                }
            }
        }
        check(&table.snapshot(None).unwrap());
        // A version made without a snapshot's refresh (`TableSnapshot::of`) answers alike.
        check(&TableSnapshot::of(&table));
        for (snap, answer) in &kept {
            assert_eq!(&looked_up(snap, &["a", "dd"]), answer);
        }
    }

    #[test]
    fn lookups_by_a_secondary_index_equal_a_filtered_scan() {
        for seed in 0..3 {
            random_workload(true, seed);
        }
    }

    #[test]
    fn lookups_of_a_keyless_table_give_every_copy() {
        for seed in 0..3 {
            random_workload(false, seed);
        }
    }

    #[test]
    fn a_table_restarted_from_a_version_keeps_its_indexes_current() {
        let codec = indexed_codec(true);
        let mut table =
            CurrentTable::new(Arc::clone(&codec), &batch(&codec, &[(1, "a"), (2, "b")])).unwrap();
        let encoded = codec.encode(&batch(&codec, &[(3, "a")])).unwrap();
        table.put(
            encoded.0.row(0).as_ref(),
            Some((Arc::new(encoded.1.row(0).owned()), 1)),
        );
        let snap = table.snapshot(None).unwrap();
        let mut again = CurrentTable::from_snapshot(&snap);
        let encoded = codec.encode(&batch(&codec, &[(1, "c")])).unwrap();
        again.put(
            encoded.0.row(0).as_ref(),
            Some((Arc::new(encoded.1.row(0).owned()), 1)),
        );
        let now = again.snapshot(None).unwrap();
        assert_eq!(looked_up(&now, &["a"]), [(3, "a".to_string())]);
        assert_eq!(looked_up(&now, &["c"]), [(1, "c".to_string())]);
        assert_eq!(looked_up(&snap, &["a"]), [(1, "a".into()), (3, "a".into())]);
    }
}
