//! Progress of a capture's snapshot, shared with status tables while chunks run.
//!
//! # Invariant
//! The counters (`chunks_done`, `rows_read`, the HIGH range, the ETA) are recomputed from the
//! per-chunk list on every update, under one lock, so a reader never sees them disagree.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::change::position::BinlogCoord;
use crate::change::schema::TableId;
use crate::locks::Locked;

/// The phase a capture is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Planning,
    Snapshot,
    /// Snapshot done; the binlog is replayed from min(HIGH) to max(HIGH). The current table is
    /// still a mix of chunk boundaries.
    CatchUp,
    /// Consistent: the current table is the source's state at one position.
    Streaming,
    /// `snapshot_only` finished.
    Done,
}

impl Phase {
    /// The phase as status tables, `SHOW SOURCES` and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Planning => "planning",
            Phase::Snapshot => "snapshot",
            Phase::CatchUp => "catch-up",
            Phase::Streaming => "streaming",
            Phase::Done => "done",
        }
    }
}

/// State of one chunk, for status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkState {
    Pending,
    Running,
    Done,
}

/// Which connection read a chunk's rows (see `source::mysql_client`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowReader {
    /// Our own connection, rows read in place.
    Own,
    /// `mysql_async`: the consistent snapshot, a keyless table's locked read, or a run whose
    /// server or options our connection does not speak.
    Driver,
}

impl RowReader {
    pub fn as_str(self) -> &'static str {
        match self {
            RowReader::Own => "own",
            RowReader::Driver => "driver",
        }
    }
}

/// How a chunk's read made sure it saw every transaction its LOW counts (see `protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// One locking read of the range that never waits: its rows are the chunk, and getting
    /// every lock showed that no transaction touching the range was still committing.
    LockedRead,
    /// The locking read met a lock: a locking read without rows (the visibility barrier)
    /// passed on a later try, then a plain `SELECT` read the rows.
    Barrier,
    /// The barrier met locks for its whole budget (a transaction left open on the range) and
    /// the `SELECT` read anyway; see `select::visibility_barrier` for why that is safe.
    BarrierGaveUp,
    /// Inside a consistent snapshot, at the position the server reported for it.
    ConsistentSnapshot,
}

impl Visibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::LockedRead => "locked_read",
            Visibility::Barrier => "barrier",
            Visibility::BarrierGaveUp => "barrier_gave_up",
            Visibility::ConsistentSnapshot => "consistent_snapshot",
        }
    }
}

/// Status of one chunk.
#[derive(Debug, Clone)]
pub struct ChunkStatus {
    pub table: TableId,
    pub index: usize,
    pub range: String,
    pub low: Option<BinlogCoord>,
    pub high: Option<BinlogCoord>,
    pub rows: usize,
    pub state: ChunkState,
    /// Times the chunk was read: more than one when a DDL on its table made it read again.
    pub reads: u32,
    /// The connection that last read it (`None`: not read by this process).
    pub reader: Option<RowReader>,
    /// How its last read waited for commits to become visible (`None`: not read yet).
    pub visibility: Option<Visibility>,
}

/// Progress of a capture, shared with the rest of the engine.
#[derive(Debug, Clone)]
pub struct ProgressReport {
    pub phase: Phase,
    pub chunks_total: usize,
    pub chunks_done: usize,
    pub rows_read: usize,
    /// Time left for the snapshot, from the rate of chunks done so far.
    pub eta: Option<Duration>,
    /// Lowest and highest HIGH of the chunks done.
    pub high_range: Option<(BinlogCoord, BinlogCoord)>,
    /// The position the current table is consistent at (streaming phase).
    pub position: Option<BinlogCoord>,
    /// Tables without a primary key: keyed by the whole row (a multiset), so two identical
    /// rows cannot be told apart; their guarantee is weaker.
    pub keyless_tables: Vec<TableId>,
    pub chunks: Vec<ChunkStatus>,
    /// The server's estimate of each table's rows when the snapshot was planned (0: none).
    pub estimated_rows: Vec<(TableId, u64)>,
}

/// Shared, updated progress; see [`ProgressReport`].
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    state: Mutex<ProgressReport>,
    /// The table whose changes are being applied, so a failure can name it.
    working_on: Mutex<Option<TableId>>,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            state: Mutex::new(ProgressReport {
                phase: Phase::Planning,
                chunks_total: 0,
                chunks_done: 0,
                rows_read: 0,
                eta: None,
                high_range: None,
                position: None,
                keyless_tables: Vec::new(),
                chunks: Vec::new(),
                estimated_rows: Vec::new(),
            }),
            working_on: Mutex::new(None),
        }
    }
}

impl Progress {
    pub fn report(&self) -> ProgressReport {
        self.state.locked().clone()
    }

    pub fn set_phase(&self, phase: Phase) {
        self.state.locked().phase = phase;
    }

    /// The position the state reflects (see [`ProgressReport::position`]), without copying
    /// the rest of the report.
    pub fn position(&self) -> Option<BinlogCoord> {
        self.state.locked().position.clone()
    }

    pub fn set_position(&self, position: BinlogCoord) {
        self.state.locked().position = Some(position);
    }

    /// Notes the table being worked on (`None` between tables).
    pub fn set_working_on(&self, table: Option<&TableId>) {
        let mut w = self.working_on.locked();
        if w.as_ref() != table {
            *w = table.cloned();
        }
    }

    /// The table a failure happened in: the one being applied, else a chunk being read.
    pub fn working_on(&self) -> Option<TableId> {
        let w = self.working_on.locked().clone();
        w.or_else(|| {
            let s = self.state.locked();
            s.chunks
                .iter()
                .find(|c| c.state == ChunkState::Running)
                .map(|c| c.table.clone())
        })
    }

    pub(super) fn update(&self, f: impl FnOnce(&mut ProgressReport)) {
        let mut s = self.state.locked();
        f(&mut s);
        s.chunks_total = s.chunks.len();
        s.chunks_done = s
            .chunks
            .iter()
            .filter(|c| c.state == ChunkState::Done)
            .count();
        s.rows_read = s.chunks.iter().map(|c| c.rows).sum();
        let highs = s.chunks.iter().filter_map(|c| c.high.clone());
        s.high_range = highs.fold(None, |acc, h| match acc {
            None => Some((h.clone(), h)),
            Some((lo, hi)) => Some((lo.min(h.clone()), hi.max(h))),
        });
        s.eta = (s.chunks_done > 0).then(|| {
            let per_chunk = self.started.elapsed() / s.chunks_done as u32;
            per_chunk * (s.chunks_total - s.chunks_done) as u32
        });
    }
}
