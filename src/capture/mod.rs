//! Capturing a set of tables from one server: snapshot, hand-off, stream.
//!
//! This module wires the stages together (`start_planned` reads as the list of them); the
//! argument for each lives in its own module.
//!
//! # Hand-off
//! Chunks finish at different HIGHs, so their union is no point-in-time snapshot. Every chunk
//! (of every table) is applied to the per-key state with the result of HIGH order (as its read
//! finishes where the order makes no difference, see `apply`), then the binlog is read from
//! `min(HIGH)`: no chunk misses its suffix, and the merge rule (`state::merge`) drops what a
//! chunk already reflects. Once the stream passes `max(HIGH)` the state is the source's state
//! at one binlog position, and stays so, transaction by transaction. Nothing is missed (the
//! stream starts at or before every chunk's HIGH) and nothing is doubled (versions).
//!
//! # Modes
//! * `Initial`: snapshot, hand-off, then stream forever.
//! * `SnapshotOnly`: snapshot and hand-off, then stop at `max(HIGH)`: a bounded capture that
//!   ends consistent.
//! * `StreamOnly(start)`: no snapshot; every change from `start` (current end, `file:offset` or a
//!   GTID set) is applied as it comes.
//!
//! # Resumption
//! [`Capture::resume`] starts from states recovered from a checkpoint at position `P` (the end
//! of the last transaction the checkpoint holds) and reads the binlog from `P`; a transaction
//! that starts before `P` is dropped, so none is applied twice. A purged binlog at `P` is a
//! definite error, never a resume from elsewhere.
//!
//! # Schema changes
//! A statement in the binlog that changes a captured table outside row events (`source::ddl`)
//! is followed where its effect is exact (`source::evolve`, see [`schema`]): the table's state
//! is converted to its new schema at the statement's position, or emptied by a `TRUNCATE` with
//! a `d` entry per row. A transaction carrying DDL is never part of a run of transactions
//! applied together ([`Capture::next_run`]), so no changelog batch mixes entries of two
//! schemas.
//!
//! The schemas a snapshot starts under are read again between two binlog positions with no
//! DDL on a captured table in between, and the stream follows DDL from there: a DDL after the
//! caller read them (while the snapshot was planned, say) would otherwise be in neither the
//! schemas nor the statements followed. A schema that changed since refuses the start with
//! `SchemaChangedDuringSnapshot` ([`reread`]).
//!
//! A DDL on a table whose snapshot is not handed over yet makes only the chunks it touched
//! read again under the new schema; the chunks read before it are converted by the hand-off's
//! stream like a streaming table ([`reread`]). What that cannot do (a changed chunk key, a
//! rename during the snapshot) fails the start with `SchemaChangedDuringSnapshot`, which the
//! engine retries from scratch under the new schema. Renames and tables created after the
//! start are followed too (`follow`).
//!
//! # Stopped tables
//! What cannot be followed exactly (a narrowing type change, an expression default, a rename
//! out of the source's patterns), rows that no longer match the schema the DDL history gives,
//! or a row that cannot be keyed, stops that table alone: its rows are no longer decoded (the
//! readers' filter skips it) and a [`TableStop`] says why, where, and how to resume it; the
//! other tables go on. A dropped table stops too, with nothing to repair: a table created
//! under its name is captured as a new one (see `stops`).
//!
//! # Output
//! [`Capture::start_with_progress`] returns the changelog of the snapshot and hand-off (up to
//! `max(HIGH)`) as a [`HandoffLog`]: each chunk's entries column-wise, and the changes streamed
//! meanwhile, every entry at its own position ([`handoff`]); [`Capture::start`] lists them one
//! by one. [`Capture::next`] returns the changelog of each later transaction.
//! Replaying all of it in position order gives exactly the current state.

mod apply;
mod display;
mod filter;
mod follow;
pub mod handoff;
mod reread;
mod resume;
mod schema;
mod stops;
mod stream;
pub mod version;

use std::collections::HashMap;
use std::sync::Arc;

use crate::change::position::{BinlogCoord, GtidSet, StartPosition};
use crate::change::schema::{TableId, TableSchema};
use crate::change::SourceTransaction;
use crate::source::binlog::{table_filter, BinlogReader, BinlogReaderOptions, DEFAULT_SERVER_ID};
use crate::source::connect::{ConnectOptions, ServerInfo};
use crate::source::error::{SourceError, SourceResult};
use crate::source::schema::list_tables;
use crate::source::snapshot::incremental::{
    plan_snapshot, Phase, Progress, SnapshotOptions, SnapshotRun,
};
use crate::state::current::TableSnapshot;
use crate::state::merge::TableState;

use crate::locks::RwLocked;
use apply::{empty_states, EagerChunks};
use filter::{live_tables, Patterns, Stopped};
use handoff::Ordinals;
pub use handoff::{
    Burst, ChunkChange, CodecChange, HandoffLog, HandoffPart, RunChanges, TableChange,
};
pub use schema::{describe_columns, SchemaChange};

/// How a capture begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotMode {
    Initial,
    SnapshotOnly,
    StreamOnly(StartPosition),
}

/// What to capture and how.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// `db.table` patterns (`shop.*, crm.customers`).
    pub tables: String,
    pub mode: SnapshotMode,
    pub snapshot: SnapshotOptions,
    /// Replica server id of the stream (the snapshot's window reader uses its own).
    pub server_id: u32,
    /// Publish the chunks of the initial snapshot as they finish (`engine::partial`).
    pub visible_during_snapshot: bool,
    /// The longest wait for any one read from the server (see `source::connect`); an engine
    /// gives it to every connection of the source.
    pub read_timeout: std::time::Duration,
    /// How much changelog history the engine keeps of the captured tables (it trims what the
    /// capture appended, see `state::retention`).
    pub retain_history: crate::state::retention::RetainHistory,
    /// Warn (status, log, metric) when the binlog of the published position may be purged
    /// within this (`engine::purge_watch`).
    pub purge_warning: std::time::Duration,
}

/// Default of [`CaptureOptions::purge_warning`]: six hours, time for someone to act.
pub const DEFAULT_PURGE_WARNING: std::time::Duration = std::time::Duration::from_secs(6 * 3600);

impl CaptureOptions {
    pub fn new(tables: impl Into<String>, mode: SnapshotMode) -> Self {
        Self {
            tables: tables.into(),
            mode,
            snapshot: SnapshotOptions::default(),
            server_id: DEFAULT_SERVER_ID,
            visible_during_snapshot: false,
            read_timeout: crate::source::connect::DEFAULT_READ_TIMEOUT,
            retain_history: crate::state::retention::RetainHistory::All,
            purge_warning: DEFAULT_PURGE_WARNING,
        }
    }
}

/// A table whose capture stopped: a statement changed it outside row events (a DDL the
/// engine does not follow yet, or a `DROP`), or its rows stopped matching its schema. Its
/// state and changelog end at `position`; later changes of it are not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableStop {
    /// Index into [`Capture::tables`].
    pub table: usize,
    pub reason: String,
    /// Where the transaction that stopped it starts.
    pub position: BinlogCoord,
    /// A `RENAME` gave its name to a table from outside the source's patterns, whose rows the
    /// capture never read: the engine reads the table under that name again at once
    /// (`RESNAPSHOT TABLE`), and it goes on from there.
    pub read_again: bool,
    /// The table was dropped at the source (its rows deleted at the `DROP`): there is nothing
    /// to repair, and a table created under its name is captured from its creation.
    pub dropped: bool,
}

/// Where a resumed capture goes on (see [`Capture::resume`]).
#[derive(Debug, Clone)]
pub struct ResumeAt {
    /// The end of the last transaction the states reflect.
    pub position: BinlogCoord,
    /// The GTIDs executed up to `position`, when known.
    pub gtids: Option<GtidSet>,
    /// Whether the server is another one than `position` was read from (a failover): its file
    /// positions mean nothing there, so the stream goes on after `gtids`, in the history of
    /// the connection's options, which must be later than `position`'s.
    pub by_gtid: bool,
}

/// A running capture; see the module docs.
#[derive(Debug)]
pub struct Capture {
    info: ServerInfo,
    tables: Vec<Arc<TableSchema>>,
    index: HashMap<TableId, usize>,
    states: Vec<TableState>,
    reader: Option<BinlogReader>,
    /// A transaction read during the hand-off that belongs after `max(HIGH)`.
    pending: Option<SourceTransaction>,
    progress: Arc<Progress>,
    /// A resumed capture drops every transaction that starts before this position: the
    /// checkpoint it resumed from already holds them.
    resume_from: Option<BinlogCoord>,
    /// The GTIDs executed up to the last transaction taken from the reader (see
    /// [`Capture::executed_gtids`]); `None` when the start set is not known.
    executed: Option<GtidSet>,
    /// Tables whose capture stopped; the readers' filter skips their rows.
    stopped: Stopped,
    /// Stops not yet taken by [`Capture::take_stops`].
    new_stops: Vec<TableStop>,
    /// Dropped tables captured again under their name since the last
    /// [`Capture::take_recreated`].
    recreated: Vec<usize>,
    /// Schema changes followed and not yet taken by [`Capture::take_schema_changes`].
    schema_changes: Vec<SchemaChange>,
    /// Tables whose secondary indexes changed (and nothing else) since the last
    /// [`Capture::take_reindexed`].
    reindexed: Vec<usize>,
    /// Tables whose rows and DDL are read but not applied (see [`Capture::park`]).
    parked: std::collections::BTreeSet<usize>,
    /// The source's `tables` patterns: a table created later that they select is captured
    /// from its creation.
    pattern: Patterns,
    /// Schemas of tables about to be created, read from the server (see `apply_read`).
    created: HashMap<TableId, Arc<TableSchema>>,
    /// Reads the schema of a table created by a statement that does not spell its columns
    /// (`CREATE TABLE ... LIKE`).
    connect: ConnectOptions,
    /// While the snapshot's hand-off runs: the row codecs each DDL it followed switched
    /// between, handed to the [`HandoffLog`] at its end; `None` otherwise.
    handoff_codecs: Option<Vec<CodecChange>>,
}

impl Capture {
    /// Checks the server, resolves the tables, runs the snapshot (per mode) and the hand-off.
    pub async fn start(
        connect: ConnectOptions,
        options: CaptureOptions,
    ) -> SourceResult<(Self, Vec<TableChange>)> {
        let (capture, log) =
            Self::start_with_progress(connect, options, Arc::new(Progress::default())).await?;
        let events = log.into_events()?;
        Ok((capture, events))
    }

    /// [`Capture::start`], reporting into `progress` while the snapshot runs.
    pub async fn start_with_progress(
        connect: ConnectOptions,
        options: CaptureOptions,
        progress: Arc<Progress>,
    ) -> SourceResult<(Self, HandoffLog)> {
        let (info, tables) = Self::matching_tables(&connect, &options.tables).await?;
        Self::start_resolved(connect, options, info, tables, progress).await
    }

    /// [`Capture::start_with_progress`] for tables already resolved by
    /// [`Capture::matching_tables`] (a caller that needed them first does not read them twice).
    pub async fn start_resolved(
        connect: ConnectOptions,
        options: CaptureOptions,
        info: ServerInfo,
        tables: Vec<Arc<TableSchema>>,
        progress: Arc<Progress>,
    ) -> SourceResult<(Self, HandoffLog)> {
        let run = match options.mode {
            SnapshotMode::StreamOnly(_) => None,
            _ => Some(
                plan_snapshot(
                    &connect,
                    &info,
                    &tables,
                    &options.snapshot,
                    Arc::clone(&progress),
                )
                .await?,
            ),
        };
        Self::start_planned(connect, options, info, tables, run, progress).await
    }

    /// [`Capture::start_with_progress`] for tables already resolved and a snapshot already
    /// planned (`run` is `None` only for `StreamOnly`).
    pub async fn start_planned(
        connect: ConnectOptions,
        options: CaptureOptions,
        info: ServerInfo,
        tables: Vec<Arc<TableSchema>>,
        run: Option<Arc<SnapshotRun>>,
        progress: Arc<Progress>,
    ) -> SourceResult<(Self, HandoffLog)> {
        let states = empty_states(&tables)?;
        let mut capture = Capture::new(connect, &options, info, tables, states, progress)?;
        if let SnapshotMode::StreamOnly(start) = &options.mode {
            capture.stream_from(&options, start.clone()).await?;
            return Ok((capture, HandoffLog::default()));
        }
        let run = run.ok_or_else(|| {
            SourceError::Internal("a snapshot mode needs a planned snapshot".into())
        })?;
        let (log, reader, max_high) = capture.snapshot_and_handoff(&options, &run).await?;
        capture.progress.set_position(max_high);
        if options.mode == SnapshotMode::SnapshotOnly {
            capture.progress.set_phase(Phase::Done);
            capture.pending = None;
        } else {
            capture.progress.set_phase(Phase::Streaming);
            capture.reader = Some(reader);
        }
        Ok((capture, log))
    }

    /// A capture of `tables` in `states`, before anything is read.
    fn new(
        connect: ConnectOptions,
        options: &CaptureOptions,
        info: ServerInfo,
        tables: Vec<Arc<TableSchema>>,
        states: Vec<TableState>,
        progress: Arc<Progress>,
    ) -> SourceResult<Self> {
        let index = tables
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.clone(), i))
            .collect();
        Ok(Capture {
            info,
            tables,
            index,
            states,
            reader: None,
            pending: None,
            progress,
            resume_from: None,
            executed: None,
            stopped: Stopped::default(),
            new_stops: Vec::new(),
            recreated: Vec::new(),
            schema_changes: Vec::new(),
            reindexed: Vec::new(),
            parked: Default::default(),
            pattern: Patterns::new(&options.tables)?,
            created: HashMap::new(),
            connect,
            handoff_codecs: Some(Vec::new()),
        })
    }

    /// A binlog reader from `start` that decodes only the rows of captured, unstopped tables.
    /// The GTIDs executed start over from the reader's start set: `known` (carried with the
    /// position), else what the server says was executed there.
    async fn open_reader(
        &mut self,
        options: &CaptureOptions,
        start: StartPosition,
        known: Option<GtidSet>,
    ) -> SourceResult<BinlogReader> {
        let only_captured = live_tables(Arc::clone(&self.pattern.filter), &self.stopped);
        let reader = BinlogReader::open(
            self.connect.clone(),
            BinlogReaderOptions::new(options.server_id, start)
                .with_filter(only_captured)
                .with_start_gtids(known),
        )
        .await?;
        self.executed = reader.start_gtids().cloned();
        Ok(reader)
    }

    /// The GTIDs executed up to the position the state reflects: the reader's start set and
    /// the GTID of every transaction taken from the stream since (applied, or dropped as held
    /// by a checkpoint). MariaDB: the position a replica would resume from; MySQL: the executed
    /// set. `None` when the start set is not known (a server without GTIDs answers an empty
    /// set instead, so this is a reader that could not tell).
    pub fn executed_gtids(&self) -> Option<&GtidSet> {
        self.executed.as_ref()
    }

    /// Takes note that `tx` has been taken from the stream (applied or dropped as held).
    pub(super) fn passed(&mut self, tx: &SourceTransaction) {
        if let (Some(set), Some(gtid)) = (self.executed.as_mut(), &tx.gtid) {
            set.add(gtid);
        }
    }

    /// `StreamOnly`: no snapshot, the (empty) states consistent from `start` on.
    async fn stream_from(
        &mut self,
        options: &CaptureOptions,
        start: StartPosition,
    ) -> SourceResult<()> {
        let reader = self.open_reader(options, start, None).await?;
        // The state is (empty and) consistent at the start, when it is a file position.
        if let StartPosition::Coord(at) = reader.resume_position() {
            self.progress.set_position(at.clone());
        }
        self.reader = Some(reader);
        self.finish_handoff("starting the stream")?;
        self.progress.set_phase(Phase::Streaming);
        self.handoff_codecs = None;
        Ok(())
    }

    /// The snapshot's chunks read and applied, then the binlog followed from `min(HIGH)` to
    /// `max(HIGH)` (see the module docs): the hand-off's changelog, the reader positioned just
    /// past it, and `max(HIGH)`.
    async fn snapshot_and_handoff(
        &mut self,
        options: &CaptureOptions,
        run: &Arc<SnapshotRun>,
    ) -> SourceResult<(HandoffLog, BinlogReader, BinlogCoord)> {
        let started = std::time::Instant::now();
        let connect = self.connect.clone();
        // Where the schemas the chunks are read under are known to hold: a DDL between there
        // and the first chunk's window would otherwise go unseen.
        let planned_at = self.schemas_hold_at(&connect, options).await?;
        // Each chunk is applied as soon as it is read (see `apply`).
        let planned = run.tables().iter().map(|t| t.ranges.len()).collect();
        let mut eager = EagerChunks::new(std::mem::take(&mut self.states), planned);
        let settled = self
            .read_chunks(&connect, options, run, &planned_at, &mut |chunk| {
                eager.apply(chunk)
            })
            .await?;
        let max_high = settled.max_high;
        tracing::info!(chunks = settled.ready.len() + settled.deferred.len(), read_again = settled.deferred.len(), elapsed = ?started.elapsed(), "snapshot chunks read");
        let mut log = HandoffLog::default();
        let mut ordinals = Ordinals::default();
        let (states, unkeyable) =
            eager.settle(&self.tables, settled.ready, &mut log, &mut ordinals)?;
        self.states = states;
        // Before the stream: its rows of these tables are not applied either.
        for (t, (why, high)) in unkeyable {
            self.stop_unkeyable(t, &why, high);
        }
        tracing::info!(rows = log.len(), elapsed = ?started.elapsed(), "snapshot chunks applied");
        self.progress.set_phase(Phase::CatchUp);
        let mut reader = self
            .open_reader(options, StartPosition::Coord(settled.stream_from), None)
            .await?;
        self.follow_handoff(
            &mut reader,
            &max_high,
            settled.deferred,
            &mut log,
            &mut ordinals,
        )
        .await?;
        tracing::info!(elapsed = ?started.elapsed(), "caught up to the last HIGH");
        // Stable: already in binlog order, which is position order.
        log.changes
            .sort_by(|a, b| a.event.position.cmp(&b.event.position));
        // Chunks read again after a DDL were applied in the order of their DDL.
        log.chunks.sort_by_key(ChunkChange::start);
        log.codecs = self.handoff_codecs.take().unwrap_or_default();
        self.finish_handoff("ending the hand-off")?;
        tracing::info!(elapsed = ?started.elapsed(), "hand-off complete");
        Ok((log, reader, max_high))
    }

    /// Every table's state past its hand-off: from here on it takes streamed changes only.
    fn finish_handoff(&mut self, doing: &'static str) -> SourceResult<()> {
        for state in &mut self.states {
            state
                .finish_handoff()
                .map_err(|e| SourceError::arrow(doing, e))?;
        }
        Ok(())
    }

    /// Checks the server and loads the schemas of the tables `patterns` selects, in the order
    /// a capture of them uses.
    pub async fn matching_tables(
        connect: &ConnectOptions,
        patterns: &str,
    ) -> SourceResult<(ServerInfo, Vec<Arc<TableSchema>>)> {
        let mut conn = connect.connect().await?;
        let info = connect.checked(&mut conn).await?;
        let filter = table_filter(patterns)?;
        let mut tables = Vec::new();
        let listed = connect
            .bounded(|| "listing tables".into(), list_tables(&mut conn, &filter))
            .await?;
        for id in listed {
            let schema = connect.table_schema(&mut conn, &id).await?;
            tables.push(Arc::new(schema));
        }
        if tables.is_empty() {
            return Err(SourceError::Config(format!(
                "no table matches {patterns:?}"
            )));
        }
        Ok((info, tables))
    }

    /// Checks the server and loads the schemas of `ids`, the tables a resumed capture had.
    pub async fn resolve_tables(
        connect: &ConnectOptions,
        ids: &[TableId],
    ) -> SourceResult<(ServerInfo, Vec<Arc<TableSchema>>)> {
        let mut conn = connect.connect().await?;
        let info = connect.checked(&mut conn).await?;
        let mut tables = Vec::with_capacity(ids.len());
        for id in ids {
            tables.push(Arc::new(connect.table_schema(&mut conn, id).await?));
        }
        Ok((info, tables))
    }

    /// Reads table `table`'s rows and DDL from the stream but applies none of them, until
    /// [`Capture::replace_table`]: a table being read again, whose new state will hold them.
    /// Unlike a stop, its rows are still decoded, so a transaction read ahead keeps them.
    pub fn park(&mut self, table: usize) {
        self.parked.insert(table);
    }

    /// Puts `schema` and `state` in place of table `table`'s and returns the state it
    /// replaces; a stopped or parked table is captured again from here on.
    pub fn replace_table(
        &mut self,
        table: usize,
        schema: Arc<TableSchema>,
        state: TableState,
    ) -> TableState {
        self.parked.remove(&table);
        self.stopped.write_locked().remove(&self.tables[table].id);
        self.tables[table] = schema;
        std::mem::replace(&mut self.states[table], state)
    }

    /// Takes the states out of a capture (one that has finished, e.g. `SnapshotOnly`).
    pub fn into_states(self) -> Vec<TableState> {
        self.states
    }

    /// Fails with `SchemaChangedDuringSnapshot` if the snapshot or its hand-off followed a DDL:
    /// for a caller that needs its tables under the schemas it started with (a re-snapshot
    /// comparing with the old rows, a one-off read of a planned table).
    pub fn check_schemas_unchanged(&self) -> SourceResult<()> {
        match self.schema_changes.first() {
            Some(change) => Err(SourceError::SchemaChangedDuringSnapshot {
                table: change.after.id.to_string(),
                at: change.position.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The schema changes followed since the last call, in binlog order.
    pub fn take_schema_changes(&mut self) -> Vec<SchemaChange> {
        std::mem::take(&mut self.schema_changes)
    }

    /// The tables whose secondary indexes alone changed since the last call: their schemas
    /// (same version) name other indexes.
    pub fn take_reindexed(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.reindexed)
    }

    pub fn server(&self) -> &ServerInfo {
        &self.info
    }

    pub fn tables(&self) -> &[Arc<TableSchema>] {
        &self.tables
    }

    pub fn state(&self, table: usize) -> &TableState {
        &self.states[table]
    }

    /// An immutable version of table `table` for queries, tagged with `position`.
    pub fn snapshot_table(
        &mut self,
        table: usize,
        position: Option<BinlogCoord>,
    ) -> SourceResult<TableSnapshot> {
        self.states[table]
            .snapshot(position)
            .map_err(|e| SourceError::arrow(format!("publishing {}", self.tables[table].id), e))
    }

    pub fn progress(&self) -> Arc<Progress> {
        Arc::clone(&self.progress)
    }
}
