//! The changelog of a snapshot and its hand-off, as the capture produced it: one part per
//! applied chunk (its own rows, column-wise) and the binlog changes streamed up to `max(HIGH)`.
//!
//! # Positions
//! Every entry has a position of its own, so a reader can resume strictly after any entry:
//! the entries of a chunk read at HIGH `h` are at `(h, 0, k, 0)` with `k` counting every
//! chunk entry at `h` (chunks that share a HIGH, of any table, continue one count), in the
//! order the chunks are applied. Binlog changes have event index ≥ 1, so the
//! snapshot entries at `h` come before the changes of the transaction that starts at `h`.
//! The order of chunks and the count are the same whenever the same chunks are applied, so
//! positions are stable across restarts.
//!
//! # Schemas
//! A DDL followed during the hand-off (see `capture::reread`) gives a table two schemas in
//! one log: each chunk carries the codec it was read under, and the binlog changes are decoded
//! with the codec of the table's schema at their position (`codecs`, in the order of
//! `Capture::take_schema_changes`).

use crate::change::keys::RowCodec;
use crate::change::position::{BinlogCoord, ChangePosition};
use crate::change::Op;
use crate::source::error::{SourceError, SourceResult};
use crate::state::handoff::ChunkEntries;
use crate::state::merge::ChangelogEvent;
use crate::state::streamed::StreamedBatch;

/// One changelog entry of one captured table (an index into the capture's tables).
#[derive(Debug, Clone)]
pub struct TableChange {
    pub table: usize,
    pub event: ChangelogEvent,
}

/// What [`Capture::next_burst`](super::Capture::next_burst) read: a run of transactions not
/// yet applied, one transaction applied by itself with its entries (one carrying DDL, or one
/// held back before), or a position the stream reached with no transaction: the state is
/// unchanged and reflects it.
#[derive(Debug)]
pub enum Burst {
    Run(crate::change::TransactionRun),
    One(crate::change::SourceTransaction, Vec<TableChange>),
    Idle(BinlogCoord),
}

/// The changelog entries of an applied run (see
/// [`Capture::apply_run`](super::Capture::apply_run)).
#[derive(Debug)]
pub enum RunChanges {
    /// As events, in position order.
    Events(Vec<TableChange>),
    /// Per table (an index into the capture's tables, each once, in table order), the
    /// entries of its batches of the run, in order; their transactions are the run's.
    Streamed(Vec<(usize, Vec<StreamedBatch>)>),
}

/// One applied snapshot chunk of table `table` (an index into the capture's tables): its
/// entries are at `(high, 0, first + i, 0)`.
#[derive(Debug, Clone)]
pub struct ChunkChange {
    pub table: usize,
    /// The codec of the schema the chunk was read under.
    pub codec: std::sync::Arc<RowCodec>,
    pub high: BinlogCoord,
    pub first: u32,
    pub entries: ChunkEntries,
}

impl ChunkChange {
    /// Where the chunk's first entry is.
    pub fn start(&self) -> ChangePosition {
        ChangePosition {
            tx: self.high.clone(),
            event_index: 0,
            row_index: self.first,
            sub: 0,
        }
    }
}

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub struct HandoffLog {
    /// In position order.
    pub chunks: Vec<ChunkChange>,
    /// In position order.
    pub changes: Vec<TableChange>,
    /// The row codecs of the DDL the hand-off followed, in binlog order.
    pub codecs: Vec<CodecChange>,
}

/// A DDL followed during the hand-off: table `table`'s changes before `position` were encoded
/// with `before`, later ones with `after`. Arrow's row format decodes only with the converter
/// that encoded, so the hand-off's changelog needs these very codecs.
#[derive(Debug, Clone)]
pub struct CodecChange {
    pub table: usize,
    pub position: BinlogCoord,
    pub before: std::sync::Arc<RowCodec>,
    pub after: std::sync::Arc<RowCodec>,
}

/// A run of the hand-off changelog in position order.
#[derive(Debug, Clone, Copy)]
pub enum HandoffPart<'a> {
    Chunk(&'a ChunkChange),
    Changes(&'a [TableChange]),
}

/// Numbers chunk entries per HIGH; see the module docs.
#[derive(Debug, Default)]
pub(super) struct Ordinals {
    next: std::collections::HashMap<BinlogCoord, u32>,
}

impl Ordinals {
    /// The first ordinal of `n` entries at `high`.
    pub(super) fn take(&mut self, high: &BinlogCoord, n: usize) -> SourceResult<u32> {
        let next = self.next.entry(high.clone()).or_default();
        let first = *next;
        *next = u32::try_from(n)
            .ok()
            .and_then(|n| first.checked_add(n))
            .ok_or_else(|| {
                SourceError::Internal(format!(
                    "more than {} snapshot entries at one position ({high})",
                    u32::MAX
                ))
            })?;
        Ok(first)
    }
}

impl HandoffLog {
    /// Entries in all.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.entries.len()).sum::<usize>() + self.changes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The chunks and the runs of changes between them, in position order.
    pub fn parts(&self) -> Vec<HandoffPart<'_>> {
        let mut parts = Vec::with_capacity(self.chunks.len() * 2 + 1);
        let mut rest = self.changes.as_slice();
        for chunk in &self.chunks {
            let start = chunk.start();
            let before = rest.partition_point(|c| c.event.position < start);
            if before > 0 {
                parts.push(HandoffPart::Changes(&rest[..before]));
            }
            rest = &rest[before..];
            parts.push(HandoffPart::Chunk(chunk));
        }
        if !rest.is_empty() {
            parts.push(HandoffPart::Changes(rest));
        }
        parts
    }

    /// Every entry as a [`TableChange`], in position order: the row-wise form, for tools and
    /// tests that inspect entries one by one.
    pub fn into_events(self) -> SourceResult<Vec<TableChange>> {
        let mut out = Vec::with_capacity(self.len());
        for part in self.parts() {
            match part {
                HandoffPart::Changes(changes) => out.extend_from_slice(changes),
                HandoffPart::Chunk(chunk) => {
                    let codec = &chunk.codec;
                    let fail = |e| SourceError::arrow("listing the snapshot's entries", e);
                    let (keys, rows) = codec.encode(&chunk.entries.rows).map_err(fail)?;
                    let mut before = chunk.entries.before.iter().peekable();
                    for i in 0..chunk.entries.len() {
                        let prior = before
                            .next_if(|(at, _)| *at as usize == i)
                            .map(|(_, row)| row.clone());
                        out.push(TableChange {
                            table: chunk.table,
                            event: ChangelogEvent {
                                op: if prior.is_some() {
                                    Op::Update
                                } else {
                                    Op::Read
                                },
                                key: keys.row(i).owned(),
                                position: ChangePosition {
                                    tx: chunk.high.clone(),
                                    event_index: 0,
                                    row_index: chunk.first + i as u32,
                                    sub: 0,
                                },
                                gtid: None,
                                commit_ts_micros: 0,
                                before: prior,
                                after: Some(rows.row(i).owned()),
                            },
                        });
                    }
                }
            }
        }
        Ok(out)
    }
}
