//! The versioned state of one table during the snapshot hand-off, held column-wise.
//!
//! Snapshot chunks stay the Arrow batches they were read as. Each chunk carries one version
//! (the position of its HIGH) and a [`KeyIndex`] names the newest chunk row of every key, so a
//! chunk costs its Arrow size, its key bytes (none for a one-column integer key) and a few
//! bytes of index per row: no heap object per row. Binlog changes applied before the hand-off ends, and the deletes among them
//! (tombstones), go to a small *delta* keyed by key, each with its own position.
//!
//! # Invariants
//! * A key is held by at most one of the two: a chunk row that wins over a delta entry removes
//!   the entry, and a change that wins over a chunk row removes the key from the index and
//!   marks the row dead. So the version of a key is the delta entry's or its chunk's, whichever
//!   holds it, and the merge rule ([`super::merge`]) compares against exactly one version.
//! * A chunk's batch never changes; dead rows are only marked, and dropped when the hand-off
//!   ends ([`Handoff::finish`]), so a chunk whose rows all survive becomes part of the current
//!   table without a copy (and is shared with its changelog entries).

use std::collections::HashMap;

use arrow::array::{BooleanArray, BooleanBufferBuilder, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, filter_record_batch, take_record_batch};
use arrow::error::ArrowError;
use arrow::row::OwnedRow;

use super::base::Base;
use super::current::CurrentTable;
use super::index::{BatchKeys, KeyIndex, Keys};
use super::key::KeyBytes;
use crate::change::keys::RowCodec;
use crate::change::position::ChangePosition;

/// A delta entry: a key's record from the binlog, with its version.
#[derive(Debug)]
struct Versioned {
    version: ChangePosition,
    /// `None` is a tombstone.
    row: Option<OwnedRow>,
    /// Copies of the row: always 1 for keyed tables, the multiplicity for keyless ones.
    count: u32,
}

#[derive(Debug)]
struct Chunk {
    rows: RecordBatch,
    version: ChangePosition,
    /// Rows still holding their key (cleared when a newer record took the key over, and for
    /// later copies of an identical row of a keyless table, which the first copy counts).
    live: BooleanBufferBuilder,
    dead: usize,
}

/// The changelog entries of one applied chunk: its rows that changed the state, in chunk
/// order (`r` entries, or `u` where the key held an older row), and the before image of each
/// `u` by its index among `rows`.
#[derive(Debug, Clone)]
pub struct ChunkEntries {
    pub rows: RecordBatch,
    pub before: Vec<(u32, OwnedRow)>,
}

impl ChunkEntries {
    pub fn len(&self) -> usize {
        self.rows.num_rows()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.num_rows() == 0
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Handoff {
    chunks: Vec<Chunk>,
    /// Keys of every chunk's rows, numbered across the chunks (what the index compares).
    keys: BatchKeys,
    index: KeyIndex,
    delta: HashMap<KeyBytes, Versioned, ahash::RandomState>,
}

impl Handoff {
    /// The version of the record holding `key`, if any (tombstones included).
    pub fn version(&self, key: &[u8]) -> Option<&ChangePosition> {
        if let Some(d) = self.delta.get(key) {
            return Some(&d.version);
        }
        let id = self.index.get(self.index.hash(key), key, &self.keys)?;
        Some(&self.chunks[self.keys.locate(id).0].version)
    }

    /// The live row under `key` and its copies, if any.
    pub fn row(&self, codec: &RowCodec, key: &[u8]) -> Result<Option<(OwnedRow, u32)>, ArrowError> {
        if let Some(d) = self.delta.get(key) {
            return Ok(d.row.clone().map(|r| (r, d.count)));
        }
        match self.index.get(self.index.hash(key), key, &self.keys) {
            Some(id) => {
                let (chunk, row) = self.keys.locate(id);
                let rows = &self.chunks[chunk].rows;
                Ok(Some((codec.row_of(rows, row)?, self.index.count(id))))
            }
            None => Ok(None),
        }
    }

    /// Stores a binlog change of `key` (the merge rule found `version` newer than the key's).
    pub fn put(&mut self, key: &[u8], version: ChangePosition, row: Option<OwnedRow>, count: u32) {
        let hash = self.index.hash(key);
        if let Some(id) = self.index.remove(hash, key, &self.keys) {
            let (chunk, row) = self.keys.locate(id);
            let chunk = &mut self.chunks[chunk];
            chunk.live.set_bit(row, false);
            chunk.dead += 1;
        }
        self.delta.insert(
            key.into(),
            Versioned {
                version,
                row,
                count,
            },
        );
    }

    /// Makes room in the key index for `rows` more chunk rows, e.g. the rows of every chunk
    /// planned, so the index does not grow step by step.
    pub fn reserve(&mut self, rows: usize) {
        self.index.reserve(rows, &self.keys);
    }

    /// Applies a chunk read at `version` under the merge rule: each row whose key holds no
    /// record of a greater version takes the key over. Returns the rows that did.
    pub fn add_chunk(
        &mut self,
        codec: &RowCodec,
        version: ChangePosition,
        rows: RecordBatch,
    ) -> Result<ChunkEntries, ArrowError> {
        let n = rows.num_rows();
        let c = self.chunks.len();
        let first = self.keys.push(Keys::of(codec, &rows)?)?;
        let mut live = BooleanBufferBuilder::new(n);
        live.append_n(n, true);
        let mut dead = 0;
        let mut passing: Vec<u32> = Vec::with_capacity(n);
        let mut before: Vec<(u32, OwnedRow)> = Vec::new();
        // Before images by chunk row, for later copies of a keyless row that replaced one.
        let mut replaced: HashMap<usize, OwnedRow> = HashMap::new();
        for i in 0..n {
            let id = first + i as u32;
            let key = self.keys.key(id);
            let hash = self.index.hash(&key);
            // A key is in the delta or in the index, never both (`put` takes it out of the
            // index), so the delta is asked first and the index then in one probe.
            if let Some(d) = self.delta.get(&*key) {
                if d.version >= version {
                    live.set_bit(i, false);
                    dead += 1;
                    continue;
                }
                let prior = self.delta.remove(&*key).and_then(|d| d.row);
                if let Some(prior) = prior {
                    before.push((passing.len() as u32, prior.clone()));
                    replaced.insert(i, prior);
                }
                self.index.insert_new(hash, id, &self.keys);
                passing.push(i as u32);
                continue;
            }
            let Some(held) = self.index.get_or_insert(hash, &key, id, &self.keys) else {
                passing.push(i as u32);
                continue;
            };
            let (batch, row) = self.keys.locate(held);
            if batch == c {
                // Another copy of an identical row of this chunk (keyless tables): the
                // first copy's entry counts it, and it is entered like the first copy.
                self.index.set_count(held, self.index.count(held) + 1);
                live.set_bit(i, false);
                dead += 1;
                passing.push(i as u32);
                if let Some(b) = replaced.get(&row) {
                    before.push((passing.len() as u32 - 1, b.clone()));
                }
                continue;
            }
            let older = &mut self.chunks[batch];
            if older.version >= version {
                live.set_bit(i, false);
                dead += 1;
                continue;
            }
            let prior = codec.row_of(&older.rows, row)?;
            older.live.set_bit(row, false);
            older.dead += 1;
            self.index.replace(hash, held, id);
            passing.push(i as u32);
            before.push((passing.len() as u32 - 1, prior.clone()));
            replaced.insert(i, prior);
        }
        let entries = if passing.len() == n {
            rows.clone()
        } else {
            take_record_batch(&rows, &UInt32Array::from(passing))?
        };
        self.chunks.push(Chunk {
            rows,
            version,
            live,
            dead,
        });
        Ok(ChunkEntries {
            rows: entries,
            before,
        })
    }

    /// Forgets tombstones; safe once the stream has passed every chunk's HIGH.
    pub fn drop_tombstones(&mut self) {
        self.delta.retain(|_, d| d.row.is_some());
    }

    /// Live rows, counting copies.
    pub fn len(&self) -> usize {
        let chunks = self.index.rows();
        let delta: usize = self
            .delta
            .values()
            .filter(|d| d.row.is_some())
            .map(|d| d.count as usize)
            .sum();
        chunks + delta
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The live rows as one batch (copies repeated), in no particular order.
    pub fn to_batch(&self, codec: &RowCodec) -> Result<RecordBatch, ArrowError> {
        let mut copies: Vec<Vec<u32>> = self
            .chunks
            .iter()
            .map(|c| vec![0; c.rows.num_rows()])
            .collect();
        for (id, count) in self.index.iter() {
            let (chunk, row) = self.keys.locate(id);
            copies[chunk][row] = count;
        }
        let mut batches = Vec::with_capacity(self.chunks.len() + 1);
        for (chunk, copies) in self.chunks.iter().zip(copies) {
            let idx: Vec<u32> = copies
                .iter()
                .enumerate()
                .flat_map(|(i, n)| std::iter::repeat_n(i as u32, *n as usize))
                .collect();
            batches.push(take_record_batch(&chunk.rows, &UInt32Array::from(idx))?);
        }
        let delta = self
            .delta
            .values()
            .filter_map(|d| {
                d.row
                    .as_ref()
                    .map(|r| std::iter::repeat_n(r, d.count as usize))
            })
            .flatten();
        batches.push(codec.decode(delta)?);
        concat_batches(&codec.schema().arrow, &batches)
    }

    /// Ends the hand-off: the live chunk rows become the current table's base (chunks without
    /// dead rows as they are), and the delta's rows its overlay.
    pub fn finish(self, codec: std::sync::Arc<RowCodec>) -> Result<CurrentTable, ArrowError> {
        let Handoff {
            chunks,
            keys,
            mut index,
            delta,
        } = self;
        // Where each chunk's rows go: the row id of its first kept row, and the new place of
        // each row among the kept ones when some died; `None` for chunks that keep no row.
        let mut moves: Vec<Option<(u32, Vec<u32>)>> = Vec::with_capacity(chunks.len());
        let mut batches = Vec::new();
        let mut base_keys = BatchKeys::default();
        let starts: Vec<u32> = (0..chunks.len()).map(|c| keys.start(c)).collect();
        for (chunk, chunk_keys) in chunks.into_iter().zip(keys.into_batches()) {
            let n = chunk.rows.num_rows();
            if chunk.dead == n {
                moves.push(None);
                continue;
            }
            if chunk.dead == 0 {
                moves.push(Some((base_keys.push(chunk_keys)?, Vec::new())));
                batches.push(chunk.rows);
                continue;
            }
            let mut live = chunk.live;
            let mask = BooleanArray::new(live.finish(), None);
            let mut next = 0u32;
            let renumber: Vec<u32> = mask
                .values()
                .iter()
                .map(|keep| {
                    let at = next;
                    next += u32::from(keep);
                    at
                })
                .collect();
            let kept = filter_record_batch(&chunk.rows, &mask)?;
            let first = base_keys.push(Keys::of(&codec, &kept)?)?;
            batches.push(kept);
            moves.push(Some((first, renumber)));
        }
        index.remap(
            |id| {
                let chunk = starts.partition_point(|s| *s <= id) - 1;
                let row = id - starts[chunk];
                let (first, renumber) = moves[chunk]
                    .as_ref()
                    .expect("a live key's chunk keeps its row");
                first
                    + if renumber.is_empty() {
                        row
                    } else {
                        renumber[row as usize]
                    }
            },
            &base_keys,
        );
        let overlay = delta
            .into_iter()
            .filter_map(|(k, d)| d.row.map(|r| (k, r, d.count)))
            .collect();
        let base = Base::from_parts(batches, base_keys, index);
        Ok(CurrentTable::from_base(codec, base, overlay))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::position::BinlogCoord;
    use crate::state::fixtures::{batch, codec, ids as rows};
    use std::sync::Arc;

    fn at(offset: u64, event_index: u32) -> ChangePosition {
        ChangePosition {
            tx: BinlogCoord::new("binlog.000001", offset),
            event_index,
            row_index: 0,
            sub: 0,
        }
    }

    fn key(codec: &RowCodec, id: i32, v: &str) -> (Vec<u8>, OwnedRow) {
        let (k, r) = codec.encode(&batch(codec, &[(id, v)])).unwrap();
        (k.row(0).data().to_vec(), r.row(0).owned())
    }

    #[test]
    fn a_key_moved_into_a_later_chunk_is_an_update_and_older_chunks_lose_it() {
        let c = codec(true);
        let mut h = Handoff::default();
        let first = h
            .add_chunk(&c, at(100, 0), batch(&c, &[(1, "a"), (2, "b")]))
            .unwrap();
        assert_eq!((first.len(), first.before.len()), (2, 0));
        // Row 2 moved into the range of a chunk read later (HIGH 200).
        let second = h
            .add_chunk(&c, at(200, 0), batch(&c, &[(2, "b2"), (3, "c")]))
            .unwrap();
        assert_eq!(
            rows(std::slice::from_ref(&second.rows)),
            vec![(2, "b2".into()), (3, "c".into())]
        );
        assert_eq!(second.before.len(), 1);
        assert_eq!(second.before[0].0, 0);
        // A chunk read earlier than what a key holds does not take it back.
        let stale = h
            .add_chunk(&c, at(150, 0), batch(&c, &[(3, "old")]))
            .unwrap();
        assert!(stale.is_empty());
        assert_eq!(h.len(), 3);
        let current = h.finish(Arc::clone(&c)).unwrap();
        let snapshot = crate::state::current::TableSnapshot::of(&current);
        assert_eq!(
            rows(&snapshot.scan_all().unwrap()),
            vec![(1, "a".into()), (2, "b2".into()), (3, "c".into())]
        );
    }

    #[test]
    fn changes_and_chunks_each_win_by_version() {
        let c = codec(true);
        let mut h = Handoff::default();
        h.add_chunk(&c, at(100, 0), batch(&c, &[(1, "a"), (2, "b"), (3, "c")]))
            .unwrap();
        let (k1, r1) = key(&c, 1, "a2");
        h.put(&k1, at(150, 1), Some(r1), 1);
        let (k2, _) = key(&c, 2, "b");
        h.put(&k2, at(160, 1), None, 0);
        assert_eq!(h.version(&k1), Some(&at(150, 1)));
        assert_eq!(h.version(&k2), Some(&at(160, 1)));
        // A later chunk overrides the delete of key 2 but not the change of key 1 at 300.
        let (k1b, r1b) = key(&c, 1, "a3");
        h.put(&k1b, at(300, 1), Some(r1b), 1);
        let later = h
            .add_chunk(&c, at(200, 0), batch(&c, &[(1, "x"), (2, "back")]))
            .unwrap();
        assert_eq!(
            rows(std::slice::from_ref(&later.rows)),
            vec![(2, "back".into())]
        );
        assert!(
            later.before.is_empty(),
            "key 2 held a tombstone, so this is a read"
        );
        assert_eq!(h.len(), 3);
        let all = h.to_batch(&c).unwrap();
        assert_eq!(
            rows(&[all]),
            vec![(1, "a3".into()), (2, "back".into()), (3, "c".into())]
        );
        let current = h.finish(Arc::clone(&c)).unwrap();
        assert_eq!(current.len(), 3);
        let snapshot = crate::state::current::TableSnapshot::of(&current);
        assert_eq!(
            rows(&snapshot.scan_all().unwrap()),
            vec![(1, "a3".into()), (2, "back".into()), (3, "c".into())]
        );
        let found = snapshot
            .lookup(&[k1.as_slice().into(), k2.as_slice().into()])
            .unwrap();
        assert_eq!(rows(&[found]), vec![(1, "a3".into()), (2, "back".into())]);
    }

    #[test]
    fn keyless_copies_are_counted_and_every_copy_is_an_entry() {
        let c = codec(false);
        let mut h = Handoff::default();
        let entries = h
            .add_chunk(&c, at(100, 0), batch(&c, &[(1, "a"), (1, "a"), (2, "b")]))
            .unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(h.len(), 3);
        let (k, _) = key(&c, 1, "a");
        assert_eq!(h.row(&c, &k).unwrap().map(|(_, n)| n), Some(2));
        let current = h.finish(Arc::clone(&c)).unwrap();
        assert_eq!(current.len(), 3);
        let snapshot = crate::state::current::TableSnapshot::of(&current);
        assert_eq!(
            rows(&snapshot.scan_all().unwrap()),
            vec![(1, "a".into()), (1, "a".into()), (2, "b".into())]
        );
    }
}
