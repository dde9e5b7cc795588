//! Secondary indexes of a current table, as the base and the overlay keep them; lookups
//! through them are `state::lookup`'s.
//!
//! # Representation
//! An index's entries are the table's index columns in Arrow's row format ([`IndexCodec`]),
//! which compares as the values do and is the concatenation of each column's encoding, no
//! column's encoding a prefix of another value's: the rows whose leading columns equal given
//! values are exactly those whose bytes start with those values' bytes. The base's part is one
//! sorted order per batch ([`Sorted`]), built the first time a lookup needs it and shared by
//! every base that keeps the batch (an appending merge keeps them all, so a merge never sorts
//! the rows it did not add); the overlay's part ([`OverlayIndex`]) is a persistent ordered set
//! of (index bytes, key), brought up to date once per published version from the keys changed
//! since the last one, so a version's copy costs O(1) and a change costs O(log n).
//!
//! # Invariant
//! A batch's [`Sorted`] order holds every row of the batch, dead ones too (a lookup skips them
//! by the base's liveness, and the rows whose key the overlay holds); a version's
//! [`OverlayIndex`] holds exactly one entry per upsert of its overlay, with that row's index
//! bytes, and none for a delete. `state::lookup` answers exactly from these.
//!
//! # Memory
//! Per base row and index: the row-format bytes of its index columns, an 8-byte offset and a
//! 4-byte position in its batch's sorted order, made only for indexes that were looked up. Per
//! overlay upsert and index: its index bytes twice and its key twice (the set and the map from
//! key to entry, which a later change of the key removes).

use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::error::ArrowError;
use arrow::row::Rows;

use super::key::KeyBytes;
use crate::change::keys::{IndexCodec, RowCodec};
use crate::locks::Locked;

/// A range of an index's first column, as bytes of that column alone in Arrow's row format
/// ([`IndexCodec::encode_first`]): each bound with whether it is inclusive. Because a column's
/// encoding preserves order and is never a prefix of another value's, the rows whose first
/// column is at least `v` are those whose bytes are at least `v`'s; greater than `v`, those
/// not starting with `v`'s bytes besides; at most `v`, those below `v`'s bytes or starting
/// with them; less than `v`, those below. A range without a lower bound starts above NULL
/// (`null`: the bytes of a NULL first column, which sort before every value), as SQL's
/// comparisons never hold for NULL.
#[derive(Debug, Clone, Copy)]
pub struct Bounds<'a> {
    pub low: Option<(&'a [u8], bool)>,
    pub high: Option<(&'a [u8], bool)>,
    pub null: &'a [u8],
}

impl Bounds<'_> {
    /// The lower bound in effect: the given one, or "above NULL".
    fn lower(&self) -> (&[u8], bool) {
        self.low.unwrap_or((self.null, false))
    }

    /// Whether index bytes `bytes` are below the range.
    pub fn below(&self, bytes: &[u8]) -> bool {
        let (low, inclusive) = self.lower();
        bytes < low || (!inclusive && bytes.starts_with(low))
    }

    /// Whether index bytes `bytes` are above the range.
    pub fn above(&self, bytes: &[u8]) -> bool {
        match self.high {
            None => false,
            Some((high, true)) => bytes > high && !bytes.starts_with(high),
            Some((high, false)) => bytes >= high,
        }
    }

    pub fn admits(&self, bytes: &[u8]) -> bool {
        !self.below(bytes) && !self.above(bytes)
    }
}

/// One batch's rows ordered by one index's bytes.
#[derive(Debug)]
pub struct Sorted {
    rows: Rows,
    /// Row numbers of the batch, by their index bytes.
    order: Vec<u32>,
}

impl Sorted {
    fn build(index: &IndexCodec, batch: &RecordBatch) -> Result<Self, ArrowError> {
        let rows = index.encode(batch)?;
        let n = u32::try_from(rows.num_rows()).map_err(|_| {
            ArrowError::ComputeError("a batch of more than 2^32 rows cannot be indexed".into())
        })?;
        let mut order: Vec<u32> = (0..n).collect();
        order.sort_unstable_by(|a, b| rows.row(*a as usize).cmp(&rows.row(*b as usize)));
        Ok(Self { rows, order })
    }

    /// The batch's rows whose index bytes start with `prefix`.
    pub fn matching<'a>(&'a self, prefix: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
        let bytes = |i: u32| self.rows.row(i as usize);
        let start = self.order.partition_point(|&i| bytes(i).as_ref() < prefix);
        self.order[start..]
            .iter()
            .take_while(move |&&i| bytes(i).as_ref().starts_with(prefix))
            .map(|&i| i as usize)
    }

    /// The batch's rows whose index bytes are within `bounds`, in index order.
    pub fn within<'a>(&'a self, bounds: Bounds<'a>) -> impl Iterator<Item = usize> + 'a {
        let bytes = |i: u32| self.rows.row(i as usize);
        let start = self
            .order
            .partition_point(|&i| bounds.below(bytes(i).as_ref()));
        self.order[start..]
            .iter()
            .take_while(move |&&i| !bounds.above(bytes(i).as_ref()))
            .map(|&i| i as usize)
    }

    fn memory_size(&self) -> usize {
        self.rows.size() + self.order.capacity() * 4
    }
}

/// The sorted orders built for one base batch, by index columns; shared by the bases that keep
/// the batch.
#[derive(Debug, Default)]
pub struct Segment(Mutex<Vec<(Vec<usize>, Arc<Sorted>)>>);

impl Segment {
    /// `batch` (this segment's) ordered by `index`, sorted on first use.
    pub fn sorted(
        &self,
        index: &IndexCodec,
        batch: &RecordBatch,
    ) -> Result<Arc<Sorted>, ArrowError> {
        if let Some((_, s)) = self.0.locked().iter().find(|(c, _)| c == index.columns()) {
            return Ok(Arc::clone(s));
        }
        // Sorted outside the lock: a concurrent lookup may sort too, and one result is kept.
        let sorted = Arc::new(Sorted::build(index, batch)?);
        let mut held = self.0.locked();
        match held.iter().find(|(c, _)| c == index.columns()) {
            Some((_, s)) => Ok(Arc::clone(s)),
            None => {
                held.push((index.columns().to_vec(), Arc::clone(&sorted)));
                Ok(sorted)
            }
        }
    }

    /// Bytes of the order by `index`, if built.
    pub fn built(&self, index: &IndexCodec) -> Option<usize> {
        self.0
            .locked()
            .iter()
            .find(|(c, _)| c == index.columns())
            .map(|(_, s)| s.memory_size())
    }
}

/// The overlay's entries of one index; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct OverlayIndex {
    entries: imbl::OrdSet<(Box<[u8]>, KeyBytes)>,
    of_key: imbl::HashMap<KeyBytes, Box<[u8]>>,
}

impl OverlayIndex {
    /// The keys of the upserts whose index bytes start with `prefix`.
    pub fn matching<'a>(&'a self, prefix: &'a [u8]) -> impl Iterator<Item = &'a KeyBytes> + 'a {
        let from = (Box::<[u8]>::from(prefix), KeyBytes::from(&[][..]));
        self.entries
            .range(from..)
            .take_while(move |(bytes, _)| bytes.starts_with(prefix))
            .map(|(_, key)| key)
    }

    /// The keys of the upserts whose index bytes are within `bounds`.
    pub fn within<'a>(&'a self, bounds: Bounds<'a>) -> impl Iterator<Item = &'a KeyBytes> + 'a {
        let from = (Box::<[u8]>::from(bounds.lower().0), KeyBytes::from(&[][..]));
        self.entries
            .range(from..)
            .skip_while(move |(bytes, _)| bounds.below(bytes))
            .take_while(move |(bytes, _)| !bounds.above(bytes))
            .map(|(_, key)| key)
    }

    fn remove(&mut self, key: &KeyBytes) {
        if let Some(bytes) = self.of_key.remove(key) {
            self.entries.remove(&(bytes, key.clone()));
        }
    }

    fn insert(&mut self, key: &KeyBytes, bytes: Box<[u8]>) {
        self.entries.insert((bytes.clone(), key.clone()));
        self.of_key.insert(key.clone(), bytes);
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.of_key.len()
    }

    /// Bytes of its entries: index bytes and key twice each, and a node's share per entry.
    pub fn memory_size(&self) -> usize {
        self.of_key
            .iter()
            .map(|(key, bytes)| 2 * (key.len() + bytes.len()) + 64)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.of_key.is_empty()
    }
}

/// The overlay indexes of a table, one per index of its codec, brought up to date with the
/// keys in `changed` (changed since they were last brought up to date), whose values `now`
/// gives (`None`: the overlay does not hold the key; `Some(None)`: a delete).
pub fn refreshed<'a>(
    codec: &RowCodec,
    indexes: &[OverlayIndex],
    changed: &[KeyBytes],
    now: impl Fn(&KeyBytes) -> Option<Option<&'a arrow::row::OwnedRow>>,
) -> Result<Vec<OverlayIndex>, ArrowError> {
    let mut out = indexes.to_vec();
    if codec.indexes().is_empty() || changed.is_empty() {
        return Ok(out);
    }
    // A key put several times since is brought up to date once.
    let mut keys: Vec<&KeyBytes> = changed.iter().collect();
    keys.sort_unstable();
    keys.dedup();
    let mut upserts = Vec::new();
    for key in keys {
        for index in &mut out {
            index.remove(key);
        }
        if let Some(Some(row)) = now(key) {
            upserts.push((key, row));
        }
    }
    if !upserts.is_empty() {
        let rows = codec.decode(upserts.iter().map(|(_, row)| *row))?;
        for (spec, index) in codec.indexes().iter().zip(&mut out) {
            let encoded = spec.encode(&rows)?;
            for (i, (key, _)) in upserts.iter().enumerate() {
                index.insert(key, encoded.row(i).as_ref().into());
            }
        }
    }
    Ok(out)
}
