//! Snapshot chunks applied to the tables' states while the other chunks are still being read.
//!
//! Reading a chunk keeps the server and this process busy; applying one (its keys into the
//! index, its rows as entries) used to wait until every chunk was read, leaving a core idle for
//! that long. [`EagerChunks`] applies each chunk as its read finishes, in the order reads
//! finish, and keeps its entries aside.
//!
//! # Invariant
//! The state and the changelog are exactly those of applying the settled chunks one by one in
//! HIGH order (`Capture::read_chunks`), positions included:
//! * The eager result is kept only when every chunk found none of its keys already held. Then
//!   the chunks' key sets are disjoint, each chunk's entries are its own rows, and the order
//!   they were applied in made no difference.
//! * It is kept only when the chunks applied are exactly the settled ones (table, chunk, HIGH):
//!   a chunk a DDL made stale, a chunk read again, or one an interrupted snapshot had finished
//!   makes the states start over from empty and take the settled chunks in HIGH order.
//! * Entry positions are given only once every chunk is read, in HIGH order, so they do not
//!   depend on which read finished first.
//! * A table with a row that cannot be keyed (a zero date in its primary key, see
//!   `RowCodec::check_keys`) takes no chunk at all: it is handed back as [`Unkeyable`], to stop
//!   alone, and the others go on.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow::array::RecordBatch;

use super::handoff::{ChunkChange, HandoffLog, Ordinals};
use crate::change::position::BinlogCoord;
use crate::change::schema::TableSchema;
use crate::source::error::{SourceError, SourceResult};
use crate::source::snapshot::incremental::SnapshotChunk;
use crate::state::handoff::ChunkEntries;
use crate::state::merge::TableState;

/// One chunk applied early: table, chunk index, HIGH and its entries.
type Applied = (usize, usize, BinlogCoord, ChunkEntries);

/// Tables whose snapshot read a row that cannot be keyed: why, and the HIGH of the chunk.
pub(super) type Unkeyable = BTreeMap<usize, (String, BinlogCoord)>;

/// See the module docs.
pub(super) struct EagerChunks {
    states: Vec<TableState>,
    /// Chunks planned per table: the first chunk read sizes the table's key index for all.
    planned: Vec<usize>,
    sized: Vec<bool>,
    applied: Vec<Applied>,
    /// Whether every chunk so far found none of its keys held.
    disjoint: bool,
    unkeyable: Unkeyable,
}

impl EagerChunks {
    /// Takes the (empty) states of the tables; `planned` chunks per table.
    pub(super) fn new(states: Vec<TableState>, planned: Vec<usize>) -> Self {
        Self {
            sized: vec![false; states.len()],
            states,
            planned,
            applied: Vec::new(),
            disjoint: true,
            unkeyable: Unkeyable::new(),
        }
    }

    /// Applies a chunk just read.
    pub(super) fn apply(&mut self, chunk: &SnapshotChunk) -> SourceResult<()> {
        let t = chunk.table;
        let (Some(state), Some(sized)) = (self.states.get_mut(t), self.sized.get_mut(t)) else {
            return Err(SourceError::Internal(format!(
                "a snapshot chunk of table {t} of {}",
                self.states.len()
            )));
        };
        if self.unkeyable.contains_key(&t) {
            return Ok(());
        }
        if let Err(e) = state.codec().check_keys(&chunk.rows) {
            self.unkeyable
                .insert(t, (e.to_string(), chunk.high.clone()));
            return Ok(());
        }
        let rows = chunk.rows.num_rows();
        if !*sized {
            // Chunks are planned to hold about the same number of rows.
            state.reserve_snapshot(rows.saturating_mul(self.planned.get(t).copied().unwrap_or(1)));
            *sized = true;
        }
        let entries = apply_chunk(state, &chunk.high, chunk.rows.clone())?;
        self.disjoint &= entries.before.is_empty() && entries.len() == rows;
        self.applied
            .push((t, chunk.index, chunk.high.clone(), entries));
        Ok(())
    }

    /// The states holding exactly the `ready` chunks (in HIGH order) of the tables that
    /// could be keyed, and their changelog parts appended to `log`, with the tables that could
    /// not (their states empty); see the module docs.
    pub(super) fn settle(
        self,
        tables: &[Arc<TableSchema>],
        mut ready: Vec<SnapshotChunk>,
        log: &mut HandoffLog,
        ordinals: &mut Ordinals,
    ) -> SourceResult<(Vec<TableState>, Unkeyable)> {
        let EagerChunks {
            mut states,
            mut applied,
            disjoint,
            unkeyable,
            ..
        } = self;
        ready.retain(|c| !unkeyable.contains_key(&c.table));
        let same = disjoint && unkeyable.is_empty() && applied.len() == ready.len() && {
            let read: HashSet<(usize, usize, &BinlogCoord)> =
                applied.iter().map(|(t, i, h, _)| (*t, *i, h)).collect();
            ready
                .iter()
                .all(|c| read.contains(&(c.table, c.index, &c.high)))
        };
        if same {
            applied.sort_by(|a, b| (&a.2, a.0, a.1).cmp(&(&b.2, b.0, b.1)));
            for (table, _, high, entries) in applied {
                push(log, ordinals, &states, table, high, entries)?;
            }
            return Ok((states, unkeyable));
        }
        tracing::info!(
            "snapshot chunks are applied again in HIGH order (keys shared between chunks, or \
             chunks read again)"
        );
        drop(applied);
        states = empty_states(tables)?;
        let mut rows = vec![0usize; states.len()];
        for chunk in &ready {
            rows[chunk.table] += chunk.rows.num_rows();
        }
        for (state, rows) in states.iter_mut().zip(rows) {
            state.reserve_snapshot(rows);
        }
        // Consumed one by one: a chunk's batch becomes its table's state and its changelog.
        for chunk in ready {
            let entries = apply_chunk(&mut states[chunk.table], &chunk.high, chunk.rows)?;
            push(log, ordinals, &states, chunk.table, chunk.high, entries)?;
        }
        Ok((states, unkeyable))
    }
}

/// A state per table, empty and before its hand-off, as a capture starts.
pub(super) fn empty_states(tables: &[Arc<TableSchema>]) -> SourceResult<Vec<TableState>> {
    tables
        .iter()
        .map(|t| TableState::new(Arc::clone(t)))
        .collect::<Result<_, _>>()
        .map_err(|e| SourceError::arrow("row encoding", e))
}

/// Applies one chunk's rows, read at `high`, to its table's state.
fn apply_chunk(
    state: &mut TableState,
    high: &BinlogCoord,
    rows: RecordBatch,
) -> SourceResult<ChunkEntries> {
    state
        .apply_snapshot(high, rows)
        .map_err(|e| SourceError::arrow("applying a chunk", e))
}

/// Appends one applied chunk's entries to the log at the next ordinals of its HIGH.
fn push(
    log: &mut HandoffLog,
    ordinals: &mut Ordinals,
    states: &[TableState],
    table: usize,
    high: BinlogCoord,
    entries: ChunkEntries,
) -> SourceResult<()> {
    let first = ordinals.take(&high, entries.len())?;
    log.chunks.push(ChunkChange {
        table,
        codec: Arc::clone(states[table].codec()),
        high,
        first,
        entries,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::snapshot::chunks::ChunkRange;
    use crate::state::fixtures::{batch, codec, ids};

    fn chunk(index: usize, high: u64, rows: &[(i32, &str)]) -> SnapshotChunk {
        let codec = codec(true);
        SnapshotChunk {
            table: 0,
            index,
            range: ChunkRange::ALL,
            low: BinlogCoord::new("b.000001", high - 1),
            high: BinlogCoord::new("b.000001", high),
            rows: batch(&codec, rows),
            window_changes: 0,
        }
    }

    /// The chunks applied as they arrive (`arrival`), then settled with the ready chunks in
    /// HIGH order: the log (table, HIGH, first ordinal, entries, before images) and the rows.
    fn settled(
        arrival: &[&SnapshotChunk],
        ready: &[&SnapshotChunk],
    ) -> (Vec<String>, Vec<(i32, String)>) {
        let schema = Arc::clone(codec(true).schema());
        let states = vec![TableState::new(Arc::clone(&schema)).unwrap()];
        let mut eager = EagerChunks::new(states, vec![ready.len()]);
        for c in arrival {
            eager.apply(c).unwrap();
        }
        let (mut log, mut ordinals) = (HandoffLog::default(), Ordinals::default());
        let ready = ready.iter().map(|c| (*c).clone()).collect();
        let (mut states, unkeyable) = eager
            .settle(&[schema], ready, &mut log, &mut ordinals)
            .unwrap();
        assert!(unkeyable.is_empty());
        let parts = log
            .chunks
            .iter()
            .map(|c| {
                let before: Vec<_> = c.entries.before.iter().map(|(i, _)| *i).collect();
                format!(
                    "{} {} {} {:?} {before:?}",
                    c.table,
                    c.high,
                    c.first,
                    ids(std::slice::from_ref(&c.entries.rows))
                )
            })
            .collect();
        states[0].finish_handoff().unwrap();
        let rows = ids(&states[0].snapshot(None).unwrap().scan_all().unwrap());
        (parts, rows)
    }

    #[test]
    fn chunks_applied_as_they_arrive_log_as_in_high_order() {
        let a = chunk(0, 10, &[(1, "a"), (2, "b")]);
        let b = chunk(1, 10, &[(3, "c")]);
        let c = chunk(2, 5, &[(4, "d")]);
        let in_order = settled(&[&c, &a, &b], &[&c, &a, &b]);
        assert_eq!(settled(&[&b, &c, &a], &[&c, &a, &b]), in_order);
        // Chunks sharing HIGH 10 continue one count of ordinals, in chunk order.
        assert_eq!(
            in_order.0,
            vec![
                "0 b.000001:5 0 [(4, \"d\")] []",
                "0 b.000001:10 0 [(1, \"a\"), (2, \"b\")] []",
                "0 b.000001:10 2 [(3, \"c\")] []",
            ]
        );
    }

    #[test]
    fn chunks_that_share_keys_or_were_read_again_are_applied_again_in_high_order() {
        let older = chunk(0, 5, &[(1, "old"), (2, "b")]);
        let newer = chunk(1, 10, &[(1, "new")]);
        // In HIGH order the newer chunk's row replaces the older one's: a `u` with the row
        // it replaced. Applied the other way round, the older row would just be dropped.
        let in_order = settled(&[&older, &newer], &[&older, &newer]);
        assert_eq!(
            in_order.0,
            vec![
                "0 b.000001:5 0 [(1, \"old\"), (2, \"b\")] []",
                "0 b.000001:10 0 [(1, \"new\")] [0]",
            ]
        );
        assert_eq!(settled(&[&newer, &older], &[&older, &newer]), in_order);
        // A chunk read again (a later HIGH) in place of the one applied early.
        let first = chunk(0, 5, &[(1, "a")]);
        let again = chunk(0, 20, &[(1, "a2")]);
        let (log, rows) = settled(&[&first], &[&again]);
        assert_eq!(log, vec!["0 b.000001:20 0 [(1, \"a2\")] []"]);
        assert_eq!(rows, vec![(1, "a2".to_string())]);
    }
}
