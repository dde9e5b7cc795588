//! A DDL during the snapshot: only the chunks it touched are read again.
//!
//! # The rule
//! Every chunk is read under a schema known to hold from a position `S` on: for the first
//! reads, a position the planned schemas are checked at (read again between two positions
//! with no DDL between them, [`Capture::schemas_hold_at`]), for a re-read the position read
//! just before the server's schema. A chunk of table `T` is *stale* when a statement changing
//! `T` sits at a position `P` with `S <= P < HIGH`: its `SELECT` may have named the old
//! columns after the change (a dropped column fails the read, an added one is missing from
//! it) or its window mixes rows of two schemas. A chunk whose HIGH is at or before `P` is `T`
//! as it was before the statement: it is applied before the hand-off like any chunk, and the
//! stream converts it at `P` with the rest of the state (`TableState::evolve`), exactly as it
//! converts a streaming table.
//!
//! Once the chunks are read, a statement-only scan of the binlog from that first `S`
//! to the server's current position finds every DDL on a captured table. The stale chunks,
//! and the chunks whose read a DDL broke, are read again under the server's schema, and the
//! scan goes on to the new current position, until no chunk is stale. A table whose chunk key
//! column changed, a table gone from the server, a DDL older than the plan (a snapshot resumed
//! after a restart) or a DDL storm that outlasts [`MAX_ROUNDS`] re-reads still start the
//! snapshot over (`SchemaChangedDuringSnapshot`).
//!
//! # Applying a re-read chunk
//! A re-read chunk has the schema that the last DDL on its table before its `S` gave. The
//! hand-off applies it right after the stream applies that DDL, when the state has that
//! schema, and before the stream reaches the chunk's HIGH (which is after `S`). The merge rule
//! decides per key whatever the order, and the chunk's entries, at its HIGH, come after every
//! change applied before it, so the changelog still replays to the state. The stream starts at
//! the first DDL when that is before every HIGH, so it sees every DDL a chunk waits for.
//!
//! A key in a stale chunk's range has no version until the re-read chunk is applied, so a
//! change of it between the stream's start and that DDL is applied as a change of a key the
//! snapshot did not read (an upsert or a delete); the re-read chunk then supersedes it.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::RecordBatch;

use super::handoff::{ChunkChange, HandoffLog, Ordinals};
use super::{Capture, CaptureOptions};
use crate::change::position::BinlogCoord;
use crate::change::schema::TableSchema;
use crate::source::binlog::BinlogReader;
use crate::source::connect::ConnectOptions;
use crate::source::error::{SourceError, SourceResult};
use crate::source::snapshot::incremental::{SnapshotChunk, SnapshotRun};

/// Re-read rounds before the snapshot starts over instead: DDL faster than a chunk can be
/// read would otherwise keep the snapshot from ever ending.
pub const MAX_ROUNDS: usize = 8;

/// A chunk read, with where its schema is known to hold from.
struct Read {
    chunk: SnapshotChunk,
    schema: Arc<TableSchema>,
    since: BinlogCoord,
    /// Read again after a DDL (else: under the planned schema).
    again: bool,
}

/// A re-read chunk waiting for the stream to apply the DDL its schema follows.
pub(super) struct Deferred {
    chunk: SnapshotChunk,
    schema: Arc<TableSchema>,
    /// Where the transaction of that DDL starts.
    after: BinlogCoord,
}

/// The chunks of a snapshot once none is stale.
pub(super) struct Settled {
    /// Read under the planned schemas: applied before the stream starts, in HIGH order.
    pub ready: Vec<SnapshotChunk>,
    /// Read again: applied during the hand-off, in the order of their DDL.
    pub deferred: Vec<Deferred>,
    /// Where the hand-off's stream starts: `min(HIGH)`, or the first DDL before it.
    pub stream_from: BinlogCoord,
    pub max_high: BinlogCoord,
}

impl Capture {
    /// Reads the chunks of `run` and reads again those a DDL made stale; see the module docs.
    /// `each` is told every chunk of the first read as it is read.
    /// `planned_at` is where the planned schemas are known to hold.
    pub(super) async fn read_chunks(
        &self,
        connect: &ConnectOptions,
        options: &CaptureOptions,
        run: &Arc<SnapshotRun>,
        planned_at: &BinlogCoord,
        each: &mut (dyn FnMut(&SnapshotChunk) -> SourceResult<()> + Send),
    ) -> SourceResult<Settled> {
        let first = run.execute_each(each).await?;
        let mut reads: Vec<Read> = first
            .chunks
            .into_iter()
            .map(|chunk| Read {
                schema: Arc::clone(&self.tables[chunk.table]),
                since: planned_at.clone(),
                again: false,
                chunk,
            })
            .collect();
        let mut broken = first.stale;
        // Chunks an interrupted snapshot finished may be older than the plan.
        let mut scanned = reads
            .iter()
            .map(|r| &r.chunk.high)
            .chain([planned_at])
            .min()
            .cloned()
            .unwrap_or_else(|| planned_at.clone());
        let mut ddl: Vec<(usize, BinlogCoord)> = Vec::new();
        let mut rounds = 0;
        loop {
            let now = self.position_now(connect).await?;
            if now > scanned {
                ddl.extend(self.ddl_between(connect, options, &scanned, &now).await?);
                scanned = now;
            }
            // Only a resumed chunk reaches back before the plan, and its schema at that
            // point is not known: start over.
            if let Some((t, at)) = ddl.iter().find(|(_, at)| at < planned_at) {
                return Err(self.changed(*t, at));
            }
            let mut again: BTreeSet<(usize, usize)> =
                broken.iter().map(|(t, i, _)| (*t, *i)).collect();
            reads.retain(|r| {
                let stale = ddl.iter().any(|(t, at)| {
                    // A DDL at the very position the schema was read after may or may
                    // not be in it.
                    *t == r.chunk.table && r.since <= *at && *at < r.chunk.high
                });
                if stale {
                    again.insert((r.chunk.table, r.chunk.index));
                }
                !stale
            });
            if again.is_empty() {
                break;
            }
            rounds += 1;
            if rounds > MAX_ROUNDS {
                let t = again.iter().next().map_or(0, |(t, _)| *t);
                return Err(self.changed(t, &scanned));
            }
            // The position first: the schema read after it holds from there on.
            let mut conn = connect.connect().await?;
            let since = connect.position(&mut conn, self.info.flavor).await?.0;
            let tables: BTreeSet<usize> = again.iter().map(|(t, _)| *t).collect();
            let mut schemas = Vec::with_capacity(tables.len());
            for t in tables {
                match connect.table_schema(&mut conn, &self.tables[t].id).await {
                    Ok(schema) => schemas.push((t, Arc::new(schema))),
                    // Dropped or renamed: the stream cannot give it its chunks' schema.
                    Err(SourceError::NoSuchTable(_)) => return Err(self.changed(t, &since)),
                    Err(e) => return Err(e),
                }
            }
            drop(conn);
            tracing::info!(chunks = again.len(), round = rounds, %since, "a DDL made chunks stale; reading them again under the new schema");
            let rerun = run
                .reread(&schemas, again.into_iter().collect(), &since)
                .await?;
            let result = rerun.execute().await?;
            for chunk in result.chunks {
                let schema = schemas
                    .iter()
                    .find(|(t, _)| *t == chunk.table)
                    .map(|(_, s)| Arc::clone(s))
                    .ok_or_else(|| {
                        SourceError::Internal("a re-read chunk of a table not read again".into())
                    })?;
                reads.push(Read {
                    chunk,
                    schema,
                    since: since.clone(),
                    again: true,
                });
            }
            broken = result.stale;
        }
        self.settle(reads, &ddl)
    }

    /// Splits the chunks into those applied before the stream and those waiting for a DDL.
    fn settle(&self, reads: Vec<Read>, ddl: &[(usize, BinlogCoord)]) -> SourceResult<Settled> {
        let (Some(min_high), Some(max_high)) = (
            reads.iter().map(|r| &r.chunk.high).min().cloned(),
            reads.iter().map(|r| &r.chunk.high).max().cloned(),
        ) else {
            return Err(SourceError::Internal(
                "the snapshot read no chunk (every table has at least one)".into(),
            ));
        };
        let stream_from = match ddl.iter().map(|(_, at)| at).min() {
            Some(first) if *first < min_high => first.clone(),
            _ => min_high,
        };
        let mut ready = Vec::new();
        let mut deferred = Vec::new();
        for r in reads {
            let t = r.chunk.table;
            let follows = ddl
                .iter()
                .filter(|(d, at)| *d == t && *at < r.since)
                .map(|(_, at)| at)
                .max();
            match follows {
                Some(after) if r.again => deferred.push(Deferred {
                    after: after.clone(),
                    schema: r.schema,
                    chunk: r.chunk,
                }),
                // No DDL between the plan and the re-read: the planned schema, unless the
                // table changed before the plan was made (then nothing tells its history).
                _ if !r.again || r.schema.columns == self.tables[t].columns => ready.push(r.chunk),
                _ => return Err(self.changed(t, &r.since)),
            }
        }
        ready.sort_by(|a, b| (&a.high, a.table, a.index).cmp(&(&b.high, b.table, b.index)));
        deferred.sort_by(|a, b| (&a.after, &a.chunk.high).cmp(&(&b.after, &b.chunk.high)));
        Ok(Settled {
            ready,
            deferred,
            stream_from,
            max_high,
        })
    }

    /// Applies the stream of the hand-off up to `target`, and each re-read chunk right after
    /// the DDL it waits for.
    pub(super) async fn follow_handoff(
        &mut self,
        reader: &mut BinlogReader,
        target: &BinlogCoord,
        deferred: Vec<Deferred>,
        log: &mut HandoffLog,
        ordinals: &mut Ordinals,
    ) -> SourceResult<()> {
        let mut deferred = deferred.into_iter().peekable();
        loop {
            if reader.idle_position().is_some_and(|p| p >= *target) {
                break;
            }
            let Some(tx) = reader.step().await? else {
                continue;
            };
            if tx.start >= *target {
                self.pending = Some(tx);
                break;
            }
            while let Some(d) = deferred.next_if(|d| d.after < tx.start) {
                self.apply_deferred(d, log, ordinals)?;
            }
            self.passed(&tx);
            log.changes.extend(self.apply_read(&tx).await?);
            self.progress.set_position(tx.end.clone());
        }
        for d in deferred {
            self.apply_deferred(d, log, ordinals)?;
        }
        Ok(())
    }

    fn apply_deferred(
        &mut self,
        d: Deferred,
        log: &mut HandoffLog,
        ordinals: &mut Ordinals,
    ) -> SourceResult<()> {
        let t = d.chunk.table;
        // Dropped, or changed in a way that cannot be followed: its state ended there.
        if self.is_stopped(t) {
            return Ok(());
        }
        if d.schema.columns != self.tables[t].columns {
            return Err(self.changed(t, &d.after));
        }
        let id = &self.tables[t].id;
        let fail = |e| SourceError::arrow(format!("applying a chunk of {id} read again"), e);
        // The same columns; the state's schema carries the version the history gave it.
        let rows = RecordBatch::try_new(
            Arc::clone(&self.tables[t].arrow),
            d.chunk.rows.columns().to_vec(),
        )
        .map_err(fail)?;
        if let Err(e) = self.states[t].codec().check_keys(&rows) {
            self.stop_unkeyable(t, &e.to_string(), d.chunk.high);
            return Ok(());
        }
        let entries = self.states[t]
            .apply_snapshot(&d.chunk.high, rows)
            .map_err(fail)?;
        let first = ordinals.take(&d.chunk.high, entries.len())?;
        log.chunks.push(ChunkChange {
            table: t,
            codec: Arc::clone(self.states[t].codec()),
            high: d.chunk.high,
            first,
            entries,
        });
        Ok(())
    }

    /// The error that starts the snapshot over for table `t`.
    fn changed(&self, t: usize, at: &BinlogCoord) -> SourceError {
        SourceError::SchemaChangedDuringSnapshot {
            table: self.tables[t].id.to_string(),
            at: at.clone(),
        }
    }

    /// A binlog position at which the captured tables' schemas are those the capture was
    /// given. The caller read them some time before (and planned the snapshot with them), at
    /// no known position, and the stream follows DDL from the position returned: a DDL in
    /// between would be missing from the schemas and never followed. So they are read again
    /// between two positions with no DDL on a captured table in between (tried again when
    /// there was one), which gives a position they hold at; a table whose schema differs from
    /// the one given has changed since, and the snapshot starts over under the new one.
    pub(super) async fn schemas_hold_at(
        &self,
        connect: &ConnectOptions,
        options: &CaptureOptions,
    ) -> SourceResult<BinlogCoord> {
        let mut conn = connect.connect().await?;
        let flavor = self.info.flavor;
        let mut from = connect.position(&mut conn, flavor).await?.0;
        let mut storm = None;
        for _ in 0..MAX_ROUNDS {
            let mut now = Vec::with_capacity(self.tables.len());
            for (t, table) in self.tables.iter().enumerate() {
                match connect.table_schema(&mut conn, &table.id).await {
                    Ok(schema) => now.push(schema),
                    Err(SourceError::NoSuchTable(_)) => return Err(self.changed(t, &from)),
                    Err(e) => return Err(e),
                }
            }
            let to = connect.position(&mut conn, flavor).await?.0;
            // A DDL at `from` may or may not be in what was read; one at `to` is not.
            if to != from {
                if let Some(ddl) = self.ddl_between(connect, options, &from, &to).await?.pop() {
                    storm = Some(ddl);
                    from = to;
                    continue;
                }
            }
            let changed = self.tables.iter().zip(&now).position(|(given, read)| {
                given.columns != read.columns || given.primary_key != read.primary_key
            });
            return match changed {
                Some(t) => Err(self.changed(t, &to)),
                None => Ok(to),
            };
        }
        // DDL faster than the schemas can be read: start over, as a storm of re-reads does.
        let (t, at) = storm.unwrap_or((0, from));
        Err(self.changed(t, &at))
    }

    /// The server's current binlog position, on a connection of its own.
    pub(super) async fn position_now(&self, connect: &ConnectOptions) -> SourceResult<BinlogCoord> {
        let mut conn = connect.connect().await?;
        Ok(connect.position(&mut conn, self.info.flavor).await?.0)
    }
}
