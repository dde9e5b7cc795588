//! Lookups of a current-table version by an index (`state::secondary`): the rows whose first
//! index column holds given values, or lies within a range, without a scan (ranges also
//! through the primary key's columns); the same filters by a scan, for sessions that turn
//! indexes off; and what each index holds, for `cdc.indexes`.
//!
//! # Invariant
//! [`TableSnapshot::lookup_index`] and [`TableSnapshot::scan_where`] give the same rows with
//! the same copies for the same version and values: the rows a scan filtered on equality of
//! that column gives; [`TableSnapshot::lookup_range`] and [`TableSnapshot::scan_range`] the
//! rows a scan filtered on the range gives.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::error::ArrowError;
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};

use super::current::TableSnapshot;
use super::key::KeyBytes;
use super::secondary::{Bounds, OverlayIndex, Sorted};
use crate::change::keys::IndexCodec;

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

/// The rows of `batches` whose column `column` holds one of `values` (of its type), compared
/// as an index compares them (see the module docs).
pub fn filter_where(
    batches: Vec<RecordBatch>,
    column: usize,
    values: &ArrayRef,
) -> Result<Vec<RecordBatch>, ArrowError> {
    let field = SortField::new(values.data_type().clone());
    let converter = RowConverter::new(vec![field])?;
    let wanted = converter.convert_columns(std::slice::from_ref(values))?;
    let wanted: HashSet<&[u8]> = wanted.iter().map(|r| r.data()).collect();
    keep_where(batches, column, &converter, |bytes| wanted.contains(bytes))
}

/// The rows of `batches` whose column `column` is within `bounds`, compared as an index
/// compares them.
pub fn filter_range(
    batches: Vec<RecordBatch>,
    column: usize,
    bounds: Bounds,
) -> Result<Vec<RecordBatch>, ArrowError> {
    let Some(first) = batches.first() else {
        return Ok(batches);
    };
    let field = SortField::new(first.schema().field(column).data_type().clone());
    let converter = RowConverter::new(vec![field])?;
    keep_where(batches, column, &converter, |bytes| bounds.admits(bytes))
}

/// The rows of `batches` whose column `column`, in `converter`'s row format, `keep` keeps.
fn keep_where(
    batches: Vec<RecordBatch>,
    column: usize,
    converter: &RowConverter,
    keep: impl Fn(&[u8]) -> bool,
) -> Result<Vec<RecordBatch>, ArrowError> {
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        let held = converter.convert_columns(std::slice::from_ref(batch.column(column)))?;
        let kept: BooleanArray = held.iter().map(|r| Some(keep(r.data()))).collect();
        out.push(filter_record_batch(&batch, &kept)?);
    }
    Ok(out)
}

/// The index a lookup goes through: the primary key's columns (for ranges of them), or a
/// secondary index of the table's codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Through {
    Primary,
    Secondary(usize),
}

impl TableSnapshot {
    fn index_codec(&self, through: Through) -> Result<&IndexCodec, ArrowError> {
        let found = match through {
            Through::Primary => self.codec.primary_index(),
            Through::Secondary(i) => self.codec.indexes().get(i),
        };
        found.ok_or_else(|| {
            ArrowError::InvalidArgumentError(format!(
                "{} has no index {through:?}",
                self.codec.schema().id
            ))
        })
    }

    /// The base's rows that `select` picks from each batch's order by `spec` (positions in
    /// the batch), less the dead ones and those whose key the overlay holds (the overlay
    /// decides for those, upsert or delete); as `(batch, row)`, once per copy.
    fn base_rows(
        &self,
        spec: &IndexCodec,
        select: impl Fn(&Sorted) -> Vec<usize>,
    ) -> Result<Vec<(usize, usize)>, ArrowError> {
        let base = &self.base;
        let mut out = Vec::new();
        for (b, batch) in base.batches.iter().enumerate() {
            let sorted = base.segments[b].sorted(spec, batch)?;
            let live = base.live(b);
            let start = base.keys.start(b);
            for row in select(&sorted) {
                if live.is_some_and(|l| !l.value(row)) {
                    continue;
                }
                let id = start + row as u32;
                if self.overlay.contains_key(&*base.keys.key(id)) {
                    continue;
                }
                let copies = base.index.count(id) as usize;
                out.extend(std::iter::repeat_n((b, row), copies));
            }
        }
        Ok(out)
    }

    /// The overlay's part of secondary index `index`.
    fn overlay_index<'a>(
        &'a self,
        index: usize,
        built: &'a mut Vec<OverlayIndex>,
    ) -> Result<&'a OverlayIndex, ArrowError> {
        let indexes = match &self.indexes {
            Some(indexes) => indexes,
            None => {
                *built = self.overlay_indexes()?;
                built
            }
        };
        Ok(&indexes[index])
    }

    /// The overlay's rows of `keys`, once per copy (none for a delete).
    fn overlay_rows<'a>(&self, keys: impl Iterator<Item = &'a KeyBytes>) -> Vec<Arc<OwnedRow>> {
        let mut out = Vec::new();
        for key in keys {
            if let Some(Some((row, n))) = self.overlay.get(key) {
                out.extend(std::iter::repeat_n(Arc::clone(row), *n as usize));
            }
        }
        out
    }

    /// The rows whose first column of secondary index `index` (of the table's codec) holds
    /// one of the values `firsts` encodes ([`IndexCodec::encode_first`]), with their copies;
    /// see the module docs. Each row once, whatever `firsts` repeats.
    pub fn lookup_index(&self, index: usize, firsts: &Rows) -> Result<RecordBatch, ArrowError> {
        let spec = self.index_codec(Through::Secondary(index))?;
        let mut prefixes: Vec<&[u8]> = firsts.iter().map(|r| r.data()).collect();
        prefixes.sort_unstable();
        prefixes.dedup();
        let base_rows = self.base_rows(spec, |sorted| {
            prefixes.iter().flat_map(|p| sorted.matching(p)).collect()
        })?;
        let mut built = Vec::new();
        let overlay = self.overlay_index(index, &mut built)?;
        let keys = prefixes.iter().flat_map(|p| overlay.matching(p));
        let overlay_rows = self.overlay_rows(keys);
        self.gather(&base_rows, &overlay_rows)
    }

    /// The rows whose first column of the index `through` is within `bounds`, with their
    /// copies. The overlay's part of the primary key is read whole (it has no order of its
    /// own; it holds at most an eighth of the base, see `current`).
    pub fn lookup_range(
        &self,
        through: Through,
        bounds: Bounds,
    ) -> Result<RecordBatch, ArrowError> {
        let spec = self.index_codec(through)?;
        let base_rows = self.base_rows(spec, |sorted| sorted.within(bounds).collect())?;
        let overlay_rows = match through {
            Through::Primary => {
                let keys = self
                    .overlay
                    .keys()
                    .filter(|key| bounds.admits(key.as_slice()));
                self.overlay_rows(keys)
            }
            Through::Secondary(index) => {
                let mut built = Vec::new();
                let overlay = self.overlay_index(index, &mut built)?;
                self.overlay_rows(overlay.within(bounds))
            }
        };
        self.gather(&base_rows, &overlay_rows)
    }

    /// The rows whose column `column` is within `bounds` (bytes of that column alone), by a
    /// scan that compares each row's bytes as an index does: what [`Self::lookup_range`] gives
    /// through an index that starts with the column, without the index.
    pub fn scan_range(
        &self,
        column: usize,
        bounds: Bounds,
    ) -> Result<Vec<RecordBatch>, ArrowError> {
        filter_range(self.scan_all()?, column, bounds)
    }

    /// The rows whose column `column` holds one of `values` (of its type), by scanning every
    /// row and comparing the column's bytes in Arrow's row format, as an index compares them:
    /// what a lookup by an index on that column gives, without the index.
    pub fn scan_where(
        &self,
        column: usize,
        values: &ArrayRef,
    ) -> Result<Vec<RecordBatch>, ArrowError> {
        filter_where(self.scan_all()?, column, values)
    }

    /// What index `through` of this version holds; `None` when there is no such index. The
    /// primary key's sorted orders are built by its first range lookup; its overlay part is
    /// the overlay itself (no entries of its own).
    pub fn index_use(&self, through: Through) -> Option<IndexUse> {
        let spec = self.index_codec(through).ok()?;
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
        let index = match through {
            Through::Primary => return Some(out),
            Through::Secondary(index) => index,
        };
        if let Some(overlay) = self.indexes.as_ref().and_then(|i| i.get(index)) {
            out.overlay_entries = overlay.len();
            out.bytes += overlay.memory_size();
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{ArrayRef, Int32Array, StringArray};
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

    /// A bound: a value and whether it is inclusive.
    type Bound<T> = Option<(T, bool)>;

    /// The rows of `snap` whose column `column` is within `low` and `high` (the values of
    /// `values`: NULL, then the bounds given), through `through` or by a scan.
    fn ranged(
        snap: &TableSnapshot,
        values: ArrayRef,
        low: Option<bool>,
        high: Option<bool>,
        via: Option<Through>,
        column: usize,
    ) -> Vec<(i32, String)> {
        let converter =
            RowConverter::new(vec![SortField::new(values.data_type().clone())]).unwrap();
        let bytes = converter.convert_columns(&[values]).unwrap();
        let low = low.map(|inclusive| (bytes.row(1).data(), inclusive));
        let high = high.map(|inclusive| (bytes.row(2).data(), inclusive));
        let bounds = Bounds {
            low,
            high,
            null: bytes.row(0).data(),
        };
        match via {
            Some(through) => ids(&[snap.lookup_range(through, bounds).unwrap()]),
            None => ids(&snap.scan_range(column, bounds).unwrap()),
        }
    }

    /// Whether `x` is within the bounds, as SQL compares.
    fn within<T: PartialOrd>(x: &T, low: &Bound<T>, high: &Bound<T>) -> bool {
        let above_low = match low {
            None => true,
            Some((l, true)) => x >= l,
            Some((l, false)) => x > l,
        };
        let below_high = match high {
            None => true,
            Some((h, true)) => x <= h,
            Some((h, false)) => x < h,
        };
        above_low && below_high
    }

    /// Ranges of `v` through the index and of `id` through the primary key (keyed tables),
    /// against a scan and against the rows filtered here.
    fn check_ranges(snap: &TableSnapshot, rng: &mut impl Rng) {
        let keyed = snap.codec().primary_index().is_some();
        for _ in 0..6 {
            let bound = |rng: &mut rand::rngs::StdRng, from: &[&'static str]| {
                rng.random_bool(0.8)
                    .then(|| (from[rng.random_range(0..from.len())], rng.random_bool(0.5)))
            };
            let mut r = rand::rngs::StdRng::seed_from_u64(rng.random());
            let (low, high) = (bound(&mut r, &VALUES), bound(&mut r, &VALUES));
            let values: ArrayRef = Arc::new(StringArray::from(vec![
                None,
                low.map(|l| l.0),
                high.map(|h| h.0),
            ]));
            let (l, h) = (low.map(|l| l.1), high.map(|h| h.1));
            let by_index = ranged(
                snap,
                Arc::clone(&values),
                l,
                h,
                Some(Through::Secondary(0)),
                1,
            );
            let mut expected = ids(&snap.scan_all().unwrap());
            expected.retain(|(_, v)| within(&v.as_str(), &low, &high));
            assert_eq!(by_index, expected, "v in {low:?} .. {high:?}");
            assert_eq!(ranged(snap, values, l, h, None, 1), expected);
            if keyed {
                let ends = [r.random_range(0..2600), r.random_range(0..2600)];
                let low = r.random_bool(0.8).then(|| (ends[0], r.random_bool(0.5)));
                let high = r.random_bool(0.8).then(|| (ends[1], r.random_bool(0.5)));
                let values: ArrayRef = Arc::new(Int32Array::from(vec![
                    None,
                    low.map(|l| l.0),
                    high.map(|h| h.0),
                ]));
                let (l, h) = (low.map(|l| l.1), high.map(|h| h.1));
                let by_key = ranged(snap, Arc::clone(&values), l, h, Some(Through::Primary), 0);
                let mut expected = ids(&snap.scan_all().unwrap());
                expected.retain(|(id, _)| within(id, &low, &high));
                assert_eq!(by_key, expected, "id in {low:?} .. {high:?}");
                assert_eq!(ranged(snap, values, l, h, None, 0), expected);
            }
        }
    }

    fn check(snap: &TableSnapshot) {
        for v in VALUES {
            assert_eq!(looked_up(snap, &[v]), scanned(snap, &[v]), "v = {v:?}");
        }
        let some = ["b", "zz", "dd", "b"];
        assert_eq!(looked_up(snap, &some), scanned(snap, &some));
        let mut rng = rand::rngs::StdRng::seed_from_u64(snap.len() as u64);
        check_ranges(snap, &mut rng);
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
