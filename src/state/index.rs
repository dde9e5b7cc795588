//! A key index with no heap object per key: hash → row id, 4 bytes a key.
//!
//! The rows of a table live in Arrow batches, numbered across the batches in order (a *row
//! id*, see [`BatchKeys`]). The index stores only the row id of each key in a flat hash
//! table; the hash's top bits already sit in the table's control bytes, so a key is compared
//! (and rehashed when the table grows) by reading its bytes from [`BatchKeys`]. Those are
//! written from the key column when the key is one integer column ([`IntKey`]: no key bytes
//! are kept), and kept in Arrow's row format otherwise. The same index serves the snapshot
//! hand-off (newest chunk row of each key), the current table (its base rows) and point
//! lookups.
//!
//! # Invariant
//! A key has at most one entry; the entry's row id names a row whose key bytes equal the key
//! (the caller passes the [`BatchKeys`] the ids point into). A row that stands for several
//! identical rows (keyless tables) has its count in a side map; every other row counts once.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::buffer::Buffer;
use arrow::error::ArrowError;
use arrow::row::Rows;
use hashbrown::hash_table::{Entry, HashTable};

use crate::change::keys::{InlineKey, IntKey, RowCodec};

/// The key bytes of one batch's rows.
#[derive(Debug)]
pub enum Keys {
    /// Arrow's row format of every key.
    Rows(Rows),
    /// The values of a one-column integer key, shared with the batch; keys are written on
    /// demand.
    Int(IntKey, Buffer),
}

impl Keys {
    /// The keys of `batch` (refusing rows that cannot be keyed, see [`RowCodec::keys`]).
    pub fn of(codec: &RowCodec, batch: &RecordBatch) -> Result<Self, ArrowError> {
        match codec.int_key() {
            Some(int_key) => {
                codec.check_keys(batch)?;
                Ok(Keys::Int(*int_key, int_key.values(batch)))
            }
            None => Ok(Keys::Rows(codec.keys(batch)?)),
        }
    }

    fn num_rows(&self) -> usize {
        match self {
            Keys::Rows(rows) => rows.num_rows(),
            Keys::Int(key, values) => values.len() / key.width(),
        }
    }
}

/// The key bytes of one row: borrowed from a [`Rows`] buffer or written inline.
#[derive(Debug)]
pub enum Key<'a> {
    Borrowed(&'a [u8]),
    Inline(InlineKey),
}

impl std::ops::Deref for Key<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Key::Borrowed(bytes) => bytes,
            Key::Inline(key) => key,
        }
    }
}

/// The keys of a sequence of batches, with rows numbered across them in order. A clone
/// shares each batch's keys.
#[derive(Debug, Default, Clone)]
pub struct BatchKeys {
    /// The row id of the first row of each batch (ids are below `u32::MAX`).
    starts: Vec<u32>,
    batches: Vec<Arc<Keys>>,
    rows: u32,
}

impl BatchKeys {
    /// Appends the keys of the next batch; returns the row id of its first row.
    pub fn push(&mut self, keys: impl Into<Arc<Keys>>) -> Result<u32, ArrowError> {
        let keys = keys.into();
        let first = self.rows;
        self.rows = u32::try_from(keys.num_rows())
            .ok()
            .and_then(|n| first.checked_add(n))
            .filter(|end| *end < u32::MAX)
            .ok_or_else(|| {
                ArrowError::InvalidArgumentError(format!(
                    "a table state holds at most {} rows",
                    u32::MAX - 1
                ))
            })?;
        self.starts.push(first);
        self.batches.push(keys);
        Ok(first)
    }

    /// The batch and the row within it of row id `id`.
    pub fn locate(&self, id: u32) -> (usize, usize) {
        let batch = self.starts.partition_point(|s| *s <= id) - 1;
        (batch, (id - self.starts[batch]) as usize)
    }

    /// The row id of the first row of batch `batch`.
    pub fn start(&self, batch: usize) -> u32 {
        self.starts[batch]
    }

    /// The key bytes of row id `id`.
    pub fn key(&self, id: u32) -> Key<'_> {
        let (batch, row) = self.locate(id);
        match &*self.batches[batch] {
            Keys::Rows(rows) => Key::Borrowed(rows.row(row).data()),
            Keys::Int(key, values) => Key::Inline(key.write(values, row)),
        }
    }

    /// Rows numbered so far.
    pub fn len(&self) -> u32 {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The per-batch keys, in batch order.
    pub fn into_batches(self) -> Vec<Arc<Keys>> {
        self.batches
    }

    /// Bytes held for the keys themselves (integer keys share the batches' columns).
    pub fn memory_size(&self) -> usize {
        let stored: usize = self
            .batches
            .iter()
            .map(|k| match &**k {
                Keys::Rows(rows) => rows.size(),
                Keys::Int(..) => 0,
            })
            .sum();
        stored + self.starts.capacity() * std::mem::size_of::<u32>()
    }
}

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub struct KeyIndex {
    table: HashTable<u32>,
    /// Copies of rows that stand for more than one identical row (keyless tables only).
    copies: HashMap<u32, u32, ahash::RandomState>,
    hasher: ahash::RandomState,
}

/// Whether an entry holds `key`.
fn matches<'a>(key: &'a [u8], keys: &'a BatchKeys) -> impl Fn(&u32) -> bool + 'a {
    move |id| *keys.key(*id) == *key
}

impl KeyIndex {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            table: HashTable::with_capacity(n),
            ..Self::default()
        }
    }

    /// The hash every method of this index uses for `key`.
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The row id of `key`, if any.
    pub fn get(&self, hash: u64, key: &[u8], keys: &BatchKeys) -> Option<u32> {
        self.table.find(hash, matches(key, keys)).copied()
    }

    /// How many identical rows row id `id` stands for.
    pub fn count(&self, id: u32) -> u32 {
        self.copies.get(&id).copied().unwrap_or(1)
    }

    /// Lets row id `id` (an entry) stand for `count` identical rows.
    pub fn set_count(&mut self, id: u32, count: u32) {
        if count == 1 {
            self.copies.remove(&id);
        } else {
            self.copies.insert(id, count);
        }
    }

    /// Stores a key that has no entry yet (the caller checked with [`KeyIndex::get`]) at row id
    /// `id`; `keys` must hold every entry's row, this one's included (a growing table rehashes).
    pub fn insert_new(&mut self, hash: u64, id: u32, keys: &BatchKeys) {
        let Self { table, hasher, .. } = self;
        table.insert_unique(hash, id, |id| hasher.hash_one(&*keys.key(*id)));
    }

    /// The row id of `key` if it has an entry; else stores `id` (a row of `key` that `keys`
    /// holds) for it and returns `None`. One probe where [`KeyIndex::get`] and
    /// [`KeyIndex::insert_new`] take two.
    pub fn get_or_insert(
        &mut self,
        hash: u64,
        key: &[u8],
        id: u32,
        keys: &BatchKeys,
    ) -> Option<u32> {
        let Self { table, hasher, .. } = self;
        match table.entry(hash, matches(key, keys), |id| {
            hasher.hash_one(&*keys.key(*id))
        }) {
            Entry::Occupied(held) => Some(*held.get()),
            Entry::Vacant(slot) => {
                slot.insert(id);
                None
            }
        }
    }

    /// Makes room for `more` keys at once, so that adding them does not grow (and rehash, reading
    /// every key's bytes again) the table step by step.
    pub fn reserve(&mut self, more: usize, keys: &BatchKeys) {
        let Self { table, hasher, .. } = self;
        table.reserve(more, |id| hasher.hash_one(&*keys.key(*id)));
    }

    /// Points the entry at row id `old` (whose key hashes to `hash`) to row id `new`, a row of
    /// the same key, counting once.
    pub fn replace(&mut self, hash: u64, old: u32, new: u32) {
        if let Some(id) = self.table.find_mut(hash, |id| *id == old) {
            *id = new;
            self.copies.remove(&old);
        }
    }

    /// Removes `key`'s entry and returns its row id.
    pub fn remove(&mut self, hash: u64, key: &[u8], keys: &BatchKeys) -> Option<u32> {
        let id = match self.table.find_entry(hash, matches(key, keys)) {
            Ok(o) => o.remove().0,
            Err(_) => return None,
        };
        self.copies.remove(&id);
        Some(id)
    }

    /// Moves every entry to row id `to(id)`, e.g. after dead rows were dropped; `keys` then
    /// holds the new ids' rows, and the table gives back what it no longer needs.
    pub fn remap(&mut self, mut to: impl FnMut(u32) -> u32, keys: &BatchKeys) {
        for id in self.table.iter_mut() {
            *id = to(*id);
        }
        self.copies = self.copies.drain().map(|(id, n)| (to(id), n)).collect();
        let Self { table, hasher, .. } = self;
        table.shrink_to_fit(|id| hasher.hash_one(&*keys.key(*id)));
    }

    /// Every entry as (row id, count).
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.table.iter().map(|id| (*id, self.count(*id)))
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Rows the entries stand for, counting copies.
    pub fn rows(&self) -> usize {
        self.table.len() + self.copies.values().map(|n| *n as usize - 1).sum::<usize>()
    }

    /// Bytes the table allocates: a row id and a control byte per bucket, and the side map.
    pub fn memory_size(&self) -> usize {
        let table = buckets(self.table.capacity()) * (std::mem::size_of::<u32>() + 1);
        table + buckets(self.copies.capacity()) * (2 * std::mem::size_of::<u32>() + 1)
    }
}

/// Buckets of a hashbrown table that holds `capacity` entries (7/8 full at most, a power of
/// two, with fewer than 8 buckets one entry short of full).
fn buckets(capacity: usize) -> usize {
    match capacity {
        0 => 0,
        c if c < 8 => (c + 1).next_power_of_two(),
        c => (c * 8 / 7).next_power_of_two(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::{batch, codec};

    #[test]
    fn keys_are_found_by_their_bytes_across_batches() {
        // Keyless rows keep their key bytes; keyed ones write them from the id column.
        for keyed in [false, true] {
            let c = codec(keyed);
            let mut keys = BatchKeys::default();
            let mut index = KeyIndex::with_capacity(2);
            let batches = [
                batch(&c, &[(1, "a"), (2, "b"), (3, "c")]),
                batch(&c, &[(4, "d"), (2, "b")]),
            ];
            for b in &batches {
                let first = keys.push(Keys::of(&c, b).unwrap()).unwrap();
                for id in first..first + b.num_rows() as u32 {
                    let key = keys.key(id);
                    let hash = index.hash(&key);
                    match index.get(hash, &key, &keys) {
                        Some(held) => index.set_count(held, index.count(held) + 1),
                        None => index.insert_new(hash, id, &keys),
                    }
                }
            }
            assert_eq!((index.len(), index.rows()), (4, 5));
            assert_eq!(keys.locate(4), (1, 1));
            let two = keys.key(4).to_vec();
            let held = index.get(index.hash(&two), &two, &keys).unwrap();
            assert_eq!((keys.locate(held), index.count(held)), ((0, 1), 2));
            assert_eq!(index.remove(index.hash(&two), &two, &keys), Some(held));
            assert!(index.get(index.hash(&two), &two, &keys).is_none());
            assert_eq!(index.rows(), 3, "the count went with the key");
            let absent = Keys::of(&c, &batch(&c, &[(9, "z")])).unwrap();
            let mut other = BatchKeys::default();
            other.push(absent).unwrap();
            let nine = other.key(0).to_vec();
            assert!(index.get(index.hash(&nine), &nine, &keys).is_none());
        }
    }

    #[test]
    fn a_replaced_entry_names_the_new_row_and_counts_once() {
        let c = codec(false);
        let mut keys = BatchKeys::default();
        keys.push(Keys::of(&c, &batch(&c, &[(1, "a"), (1, "a")])).unwrap())
            .unwrap();
        let mut index = KeyIndex::default();
        let key = keys.key(0).to_vec();
        let hash = index.hash(&key);
        index.insert_new(hash, 0, &keys);
        index.set_count(0, 2);
        index.replace(hash, 0, 1);
        assert_eq!(index.get(hash, &key, &keys), Some(1));
        assert_eq!(index.rows(), 1);
    }
}
