//! A key index with no heap object per key: hash → (batch, row, copies).
//!
//! The rows of a table live in Arrow batches and their keys in Arrow's row format, one
//! [`Rows`] buffer per batch. The index stores only 32 bits of the key's hash and where its
//! row is, so an entry is 16 bytes in a flat table, and a key is compared by reading its bytes
//! from the batch's key buffer (as is its full hash when the table grows). The same index serves the snapshot hand-off (newest chunk row of each
//! key), the current table (its base rows) and point lookups.
//!
//! # Invariant
//! A key has at most one entry; the entry's `(batch, row)` names a row whose key bytes equal the
//! key (the caller passes the key buffers the entries point into).

use arrow::row::Rows;
use hashbrown::hash_table::HashTable;

/// Where the row of one key is, and how many identical copies it stands for (keyless tables
/// keep identical rows once, with a count; keyed tables always 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The low 32 bits of the key's hash: most mismatches end here, before the key bytes.
    tag: u32,
    pub batch: u32,
    pub row: u32,
    pub count: u32,
}

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub struct KeyIndex {
    table: HashTable<Slot>,
    hasher: ahash::RandomState,
}

/// Whether a slot holds `key` (whose hash is `hash`).
fn matches<'a>(hash: u64, key: &'a [u8], keys: &'a [Rows]) -> impl Fn(&Slot) -> bool + 'a {
    move |s| s.tag == hash as u32 && key_of(keys, s.batch, s.row) == key
}

/// The key bytes of one row of one batch, from the batches' key buffers.
fn key_of(keys: &[Rows], batch: u32, row: u32) -> &[u8] {
    keys[batch as usize].row(row as usize).data()
}

impl KeyIndex {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            table: HashTable::with_capacity(n),
            hasher: ahash::RandomState::new(),
        }
    }

    /// The hash every method of this index uses for `key`.
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The slot of `key`, if any; `keys[b]` is the key buffer of batch `b`.
    pub fn get(&self, hash: u64, key: &[u8], keys: &[Rows]) -> Option<Slot> {
        self.table.find(hash, matches(hash, key, keys)).copied()
    }

    /// The slot of `key` to change in place, if any.
    pub fn get_mut(&mut self, hash: u64, key: &[u8], keys: &[Rows]) -> Option<&mut Slot> {
        self.table.find_mut(hash, matches(hash, key, keys))
    }

    /// Stores a key that has no slot yet (the caller checked with [`KeyIndex::get`]); `keys`
    /// must hold the key bytes of every slot, its own included (a growing table rehashes them).
    pub fn insert_new(&mut self, hash: u64, batch: u32, row: u32, count: u32, keys: &[Rows]) {
        let Self { table, hasher } = self;
        table.insert_unique(
            hash,
            Slot {
                tag: hash as u32,
                batch,
                row,
                count,
            },
            |s| hasher.hash_one(key_of(keys, s.batch, s.row)),
        );
    }

    /// Removes `key`'s slot and returns it.
    pub fn remove(&mut self, hash: u64, key: &[u8], keys: &[Rows]) -> Option<Slot> {
        match self.table.find_entry(hash, matches(hash, key, keys)) {
            Ok(o) => Some(o.remove().0),
            Err(_) => None,
        }
    }

    /// Moves every slot to `to(slot)` = (batch, row), e.g. after dead rows were dropped.
    pub fn remap(&mut self, mut to: impl FnMut(&Slot) -> (u32, u32)) {
        for slot in self.table.iter_mut() {
            (slot.batch, slot.row) = to(slot);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.table.iter()
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Bytes the table allocates (its slots and control bytes).
    pub fn memory_size(&self) -> usize {
        self.table.capacity() * (std::mem::size_of::<Slot>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array};
    use arrow::datatypes::DataType;
    use arrow::row::{RowConverter, SortField};
    use std::sync::Arc;

    fn rows(values: &[i64]) -> Rows {
        let converter = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let column: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
        converter.convert_columns(&[column]).unwrap()
    }

    #[test]
    fn keys_are_found_by_their_bytes_across_batches() {
        let keys = [rows(&[1, 2, 3]), rows(&[4, 2])];
        let mut index = KeyIndex::with_capacity(4);
        for (b, batch) in keys.iter().enumerate() {
            for r in 0..batch.num_rows() {
                let key = batch.row(r).data();
                let hash = index.hash(key);
                match index.get_mut(hash, key, &keys) {
                    Some(slot) => slot.count += 1,
                    None => index.insert_new(hash, b as u32, r as u32, 1, &keys),
                }
            }
        }
        assert_eq!(index.len(), 4);
        let two = keys[1].row(1).data();
        let slot = index.get(index.hash(two), two, &keys).unwrap();
        assert_eq!((slot.batch, slot.row, slot.count), (0, 1, 2));
        let removed = index.remove(index.hash(two), two, &keys).unwrap();
        assert_eq!(removed, slot);
        assert!(index.get(index.hash(two), two, &keys).is_none());
        let absent = rows(&[9]);
        let nine = absent.row(0).data();
        assert!(index.get(index.hash(nine), nine, &keys).is_none());
    }
}
