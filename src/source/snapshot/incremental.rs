//! The incremental, lock-free snapshot: chunks read in parallel, each normalised to its HIGH.
//!
//! # Per chunk
//! *Watermarks* (any server): LOW = the window reader's position (at or before the server's
//! current binlog position); a visibility barrier (a locking read of the range, see
//! `select::visibility_barrier`), because a transaction is in the binlog before InnoDB shows it; a
//! fresh-statement `SELECT` of the range (autocommit, so a new read view); HIGH = current binlog
//! position; then the window `(LOW, HIGH]` from the shared [`WindowFeed`] is folded in (see
//! `window`). LOW == HIGH means nothing committed meanwhile and no window is read. The barrier
//! and the `SELECT` are one locking read of the range unless it meets a row lock
//! (`protocol`'s `scan_visible`; [`Visibility`] says which way a chunk went).
//!
//! *Consistent snapshot* (MariaDB, on request): `START TRANSACTION WITH CONSISTENT SNAPSHOT` is
//! documented to make InnoDB's read view and `binlog_snapshot_file/position` describe the same
//! instant (in a REPEATABLE READ session, which the chunk asks for: under READ COMMITTED InnoDB
//! ignores the clause), so the `SELECT` inside it would be the state at that exact position:
//! LOW = HIGH, no window. The deterministic scenarios give identical results with both methods,
//! but the randomized workload test found, about once in forty runs on MariaDB 10.11, a row
//! deleted shortly before the reported position still in the snapshot — read then as a read
//! view older than its position, which no window repairs. It has not failed since (255 runs of
//! `scenario_6`, which now runs both methods), and the promise itself, checked against the
//! binlog while writers commit, has held in every run
//! (`snapshot_modes::consistent_snapshot_positions_match_their_read_views`); the server sets
//! that position and makes commits visible under one lock (`docs/benchmarks.md`). The failure
//! came in the hour when the watermark method had no barrier yet and the binlog reader's
//! handling of heartbeats was being fixed, so it may have been ours; until that is shown,
//! `Auto` uses watermarks, whose correctness needs no such promise.
//!
//! # Resumption
//! See [`super::journal`]: a journal records the plan and each chunk done, and a resume reads
//! only the chunks not done (and those done under columns the table no longer has).
//!
//! # Reading again
//! [`SnapshotRun::execute`] lists the chunks a DDL broke instead of failing, and
//! [`SnapshotRun::reread`] reads chunks again under a table's new schema with the same ranges
//! and the same window reader; `capture::reread` decides which.
//!
//! # Test hooks
//! [`SnapshotHook`] runs at five points of every chunk (before LOW, after LOW, after the
//! `SELECT`, before HIGH, after HIGH) so tests can commit writes at exact moments from another connection.
//!
//! # Memory and tasks
//! At most `parallelism` chunks are in flight, each read on a task of its own (so their rows
//! turn into Arrow on every core); a chunk holds its scanned rows and its window.
//! [`SnapshotRun::execute_each`] hands each chunk to its caller as soon as it is read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};

pub use super::chunks::SnapshotChunk;
use super::chunks::{estimate_rows, plan_chunks, ChunkRange, DEFAULT_CHUNK_SIZE};
pub use super::journal::{PlannedChunk, SnapshotJournal, SnapshotResume};
pub use super::progress::{
    ChunkState, ChunkStatus, Phase, Progress, ProgressReport, RowReader, Visibility,
};
use super::window::{RangeCheck, WindowFeed};
use crate::change::keys::RowCodec;
use crate::change::position::BinlogCoord;
use crate::change::schema::{Flavor, TableId, TableSchema};
use crate::locks::Locked;
use crate::source::connect::{ConnectOptions, ServerInfo};
use crate::source::error::{SourceError, SourceResult};
use crate::source::mysql_client::WireConnection;

/// Where in a chunk's protocol a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPoint {
    BeforeLow,
    /// After LOW, before the `SELECT` (inside the transaction, for a consistent snapshot).
    AfterLow,
    AfterSelect,
    BeforeHigh,
    AfterHigh,
}

/// Which chunk a hook runs for.
#[derive(Debug, Clone)]
pub struct ChunkInfo {
    pub table: TableId,
    pub index: usize,
    pub range: ChunkRange,
}

/// A test hook: called at each [`HookPoint`] of each chunk and awaited before going on.
pub type SnapshotHook = Arc<dyn Fn(HookPoint, ChunkInfo) -> BoxFuture<'static, ()> + Send + Sync>;

/// How a chunk gets its exact position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SnapshotMethod {
    /// Watermarks; the consistent snapshot is taken only on request (see the module docs).
    #[default]
    Auto,
    Watermarks,
    ConsistentSnapshot,
}

/// Options of the snapshot phase.
#[derive(Clone)]
pub struct SnapshotOptions {
    /// Target rows per chunk.
    pub chunk_size: usize,
    /// Chunks read at the same time.
    pub parallelism: usize,
    /// Chunk key column per table; default: the first primary-key column.
    pub chunk_keys: HashMap<TableId, String>,
    pub method: SnapshotMethod,
    pub hook: Option<SnapshotHook>,
    /// Replica server id of the window reader (watermark method).
    pub window_server_id: u32,
    pub journal: Option<Arc<dyn SnapshotJournal>>,
    pub resume: Option<SnapshotResume>,
    /// Told the plan and every chunk as it is done, like the journal (e.g. to show the chunks
    /// done so far to queries while the snapshot runs).
    pub observer: Option<Arc<dyn SnapshotJournal>>,
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        Self {
            chunk_size: DEFAULT_CHUNK_SIZE,
            parallelism: 4,
            chunk_keys: HashMap::new(),
            method: SnapshotMethod::Auto,
            hook: None,
            window_server_id: crate::source::binlog::DEFAULT_WINDOW_SERVER_ID,
            journal: None,
            resume: None,
            observer: None,
        }
    }
}

impl std::fmt::Debug for SnapshotOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotOptions")
            .field("chunk_size", &self.chunk_size)
            .field("parallelism", &self.parallelism)
            .field("chunk_keys", &self.chunk_keys)
            .field("method", &self.method)
            .field("hook", &self.hook.is_some())
            .field("journal", &self.journal)
            .field("observer", &self.observer)
            .field("resume", &self.resume.as_ref().map(|r| r.done.len()))
            .finish()
    }
}

/// The chunks planned for one table.
#[derive(Debug)]
pub struct PlannedTable {
    pub schema: Arc<TableSchema>,
    /// The chunk key column; `None` for a keyless table read as one chunk.
    pub key: Option<usize>,
    pub ranges: Vec<ChunkRange>,
    pub(super) check: Option<RangeCheck>,
    pub(super) codec: RowCodec,
}

/// What [`SnapshotRun::execute`] read: the chunks, and the chunks a DDL broke (table, index,
/// the error), which are to be read again under the new schema.
#[derive(Debug, Default)]
pub struct ChunkReads {
    pub chunks: Vec<SnapshotChunk>,
    pub stale: Vec<StaleChunk>,
}

/// A chunk a DDL broke: table, chunk index and the error of its read.
pub type StaleChunk = (usize, usize, SourceError);

/// What a finished chunk reports besides its rows.
#[derive(Debug, Clone)]
pub(super) struct ChunkOutcome {
    pub(super) low: BinlogCoord,
    pub(super) high: BinlogCoord,
    pub(super) window_changes: usize,
}

/// One snapshot of a set of tables: the planned chunks and what every chunk shares (server,
/// options, the window reader, progress). The capture reads its chunks with
/// [`SnapshotRun::execute_all`]; queries read them as the partitions of a DataFusion plan
/// (`provider::plans::SnapshotExec`), each running [`SnapshotRun::read_chunk`].
pub struct SnapshotRun {
    pub(super) connect: ConnectOptions,
    pub(super) info: ServerInfo,
    pub(super) options: SnapshotOptions,
    pub(super) progress: Arc<Progress>,
    pub(super) tables: Vec<Arc<PlannedTable>>,
    pub(super) consistent: bool,
    /// Started by the first chunk, so a plan that is only explained opens no binlog connection;
    /// shared with the runs that read chunks again ([`SnapshotRun::reread`]).
    pub(super) feed: Arc<tokio::sync::OnceCell<WindowFeed>>,
    /// The chunks this run reads; `None`: every planned chunk not already done.
    pub(super) only: Option<Vec<(usize, usize)>>,
    pub(super) outcomes: Mutex<HashMap<(usize, usize), ChunkOutcome>>,
    /// Chunks an interrupted snapshot had finished (resumed, not read again).
    pub(super) done: Mutex<Vec<SnapshotChunk>>,
    /// Connections of chunks that finished cleanly, for the next chunks (at most
    /// `parallelism` exist at a time): each keeps its prepared statements.
    pub(super) idle: Mutex<Vec<ChunkConnection>>,
    /// The server's Unix socket (`@@socket`), asked once; see `protocol::open_rows`.
    pub(super) socket: tokio::sync::OnceCell<Option<String>>,
    /// Set once our own row connection could not be opened for a reason that will not pass
    /// (see `source::mysql_client`): the run's chunks then read with `mysql_async` only.
    pub(super) driver_rows_only: std::sync::atomic::AtomicBool,
}

/// A chunk's connections: `sql` for everything but the watermarked `SELECT`, which `rows`
/// reads when the run has it (see `source::mysql_client`). Both are kept between chunks, with their
/// prepared statements.
#[derive(Debug)]
pub(super) struct ChunkConnection {
    pub(super) sql: mysql_async::Conn,
    pub(super) rows: Option<WireConnection>,
}

impl std::fmt::Debug for SnapshotRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotRun")
            .field("tables", &self.tables)
            .field("consistent", &self.consistent)
            .finish_non_exhaustive()
    }
}

/// Plans the chunks of every table (boundary queries on the server) and checks the method.
pub async fn plan_snapshot(
    connect: &ConnectOptions,
    info: &ServerInfo,
    tables: &[Arc<TableSchema>],
    options: &SnapshotOptions,
    progress: Arc<Progress>,
) -> SourceResult<Arc<SnapshotRun>> {
    progress.set_phase(Phase::Planning);
    let consistent = match options.method {
        // Watermarks unless asked: see the module docs on the consistent-snapshot method.
        SnapshotMethod::Auto | SnapshotMethod::Watermarks => false,
        SnapshotMethod::ConsistentSnapshot => {
            if info.flavor != Flavor::MariaDb {
                return Err(SourceError::NotSupported(
                    "the consistent-snapshot method on MySQL (it needs MariaDB's \
                     binlog_snapshot_position); use snapshot_method = 'watermarks'"
                        .into(),
                ));
            }
            true
        }
    };
    let mut conn = connect.connect().await?;
    let ids: Vec<TableId> = tables.iter().map(|t| t.id.clone()).collect();
    let resume = options.resume.as_ref().filter(|r| r.tables == ids);
    let mut planned = Vec::new();
    let mut estimates = Vec::with_capacity(tables.len());
    for (t, schema) in tables.iter().enumerate() {
        let estimate = estimate_rows(&mut conn, schema, connect.read_timeout).await?;
        estimates.push((schema.id.clone(), estimate.unwrap_or(0)));
        // Shown at once, so a long plan of many tables says which it has reached.
        progress.update(|r| r.estimated_rows = estimates.clone());
        let key = chunk_key(schema, options.chunk_keys.get(&schema.id))?;
        let ranges = match (resume, key) {
            // The interrupted snapshot's plan, bounds exactly as the server returned them.
            (Some(r), _) => r
                .plan
                .iter()
                .filter(|c| c.table == t)
                .map(|c| c.range.clone())
                .collect(),
            (None, Some(key)) => {
                let limit = connect.read_timeout;
                plan_chunks(&mut conn, schema, key, options.chunk_size, estimate, limit).await?
            }
            (None, None) => vec![ChunkRange::ALL],
        };
        let check = match key {
            Some(key) => Some(RangeCheck::new(&mut conn, schema, key, connect.read_timeout).await?),
            None => None,
        };
        let codec = RowCodec::new(Arc::clone(schema))
            .map_err(|e| SourceError::arrow(format!("row encoding of {}", schema.id), e))?;
        planned.push(Arc::new(PlannedTable {
            schema: Arc::clone(schema),
            key,
            ranges,
            check,
            codec,
        }));
    }
    drop(conn);
    let plan: Vec<PlannedChunk> = planned
        .iter()
        .enumerate()
        .flat_map(|(t, p): (usize, &Arc<PlannedTable>)| {
            p.ranges
                .iter()
                .enumerate()
                .map(move |(index, range)| PlannedChunk {
                    table: t,
                    index,
                    key: p.key.unwrap_or(0),
                    range: range.clone(),
                })
        })
        .collect();
    let done: Vec<SnapshotChunk> = match resume {
        // A chunk read under other columns than the table has now (a DDL since) is read again.
        Some(r) => r
            .done
            .iter()
            .filter(|c| {
                tables
                    .get(c.table)
                    .is_some_and(|t| c.rows.schema().fields() == t.arrow.fields())
            })
            .cloned()
            .collect(),
        None => {
            if let Some(journal) = &options.journal {
                journal.planned(tables, &plan).await;
            }
            Vec::new()
        }
    };
    if let Some(observer) = &options.observer {
        observer.planned(tables, &plan).await;
        for chunk in &done {
            observer.done(chunk).await;
        }
    }
    if !done.is_empty() {
        tracing::info!(done = done.len(), "resuming an interrupted snapshot");
    }
    progress.update(|p| {
        p.keyless_tables = tables
            .iter()
            .filter(|t| t.primary_key.is_empty())
            .map(|t| t.id.clone())
            .collect();
        p.chunks = planned
            .iter()
            .flat_map(|t| {
                t.ranges
                    .iter()
                    .enumerate()
                    .map(|(index, range)| ChunkStatus {
                        table: t.schema.id.clone(),
                        index,
                        range: range.describe(),
                        low: None,
                        high: None,
                        rows: 0,
                        state: ChunkState::Pending,
                        reads: 0,
                        reader: None,
                        visibility: None,
                    })
            })
            .collect();
        for d in &done {
            if let Some(c) = p
                .chunks
                .iter_mut()
                .find(|c| c.index == d.index && c.table == tables[d.table].id)
            {
                c.state = ChunkState::Done;
                c.reads = 1;
                c.rows = d.rows.num_rows();
                c.low = Some(d.low.clone());
                c.high = Some(d.high.clone());
            }
        }
    });
    Ok(Arc::new(SnapshotRun {
        connect: connect.clone(),
        info: info.clone(),
        options: options.clone(),
        progress,
        tables: planned,
        consistent,
        feed: Arc::new(tokio::sync::OnceCell::new()),
        only: None,
        outcomes: Mutex::new(HashMap::new()),
        done: Mutex::new(done),
        idle: Mutex::new(Vec::new()),
        socket: tokio::sync::OnceCell::new(),
        driver_rows_only: Default::default(),
    }))
}

/// Plans and reads every table in chunks; see the module docs. Chunks come back in HIGH order.
pub async fn run_snapshot(
    connect: &ConnectOptions,
    info: &ServerInfo,
    tables: &[Arc<TableSchema>],
    options: &SnapshotOptions,
    progress: Arc<Progress>,
) -> SourceResult<Vec<SnapshotChunk>> {
    let run = plan_snapshot(connect, info, tables, options, progress).await?;
    run.execute_all().await
}

impl SnapshotRun {
    pub fn tables(&self) -> &[Arc<PlannedTable>] {
        &self.tables
    }

    pub fn server(&self) -> &ServerInfo {
        &self.info
    }

    /// `watermarks` or `consistent snapshot`, for `EXPLAIN`.
    pub fn method(&self) -> &'static str {
        if self.consistent {
            "consistent snapshot"
        } else {
            "watermarks"
        }
    }

    /// Reads every chunk of every table not already done, at most
    /// `parallelism` at a time; chunks come back in HIGH order. A chunk that a DDL made
    /// unreadable under its schema fails the whole read ([`SnapshotRun::execute`] keeps the
    /// others).
    pub async fn execute_all(self: &Arc<Self>) -> SourceResult<Vec<SnapshotChunk>> {
        let reads = self.execute().await?;
        match reads.stale.into_iter().next() {
            Some((_, _, e)) => Err(e),
            None => Ok(reads.chunks),
        }
    }

    /// Reads the chunks of this run, at most `parallelism` at a time. Chunks come back in
    /// HIGH order (with those an interrupted snapshot had finished); a chunk whose read a DDL
    /// on its table broke (its window holds rows of other columns, or its `SELECT` names a
    /// column that is gone) is listed as stale instead, with the error, to be read again under
    /// the new schema.
    pub async fn execute(self: &Arc<Self>) -> SourceResult<ChunkReads> {
        self.execute_each(&mut |_| Ok(())).await
    }

    /// [`Self::execute`], telling `each` every chunk read by this run as soon as it is read
    /// (in the order reads finish, not HIGH order; not the chunks an interrupted snapshot had
    /// finished), while the other chunks are still being read. An error from `each` ends the
    /// run with that error.
    pub async fn execute_each(
        self: &Arc<Self>,
        each: &mut (dyn FnMut(&SnapshotChunk) -> SourceResult<()> + Send),
    ) -> SourceResult<ChunkReads> {
        self.progress.set_phase(Phase::Snapshot);
        let done = std::mem::take(&mut *self.done.locked());
        let parts: Vec<(usize, usize)> = match &self.only {
            Some(only) => only.clone(),
            None => self
                .tables
                .iter()
                .enumerate()
                .flat_map(|(t, p)| (0..p.ranges.len()).map(move |i| (t, i)))
                .filter(|(t, i)| !done.iter().any(|d| d.table == *t && d.index == *i))
                .collect(),
        };
        let mut reading = futures::stream::iter(parts)
            .map(|(t, index)| {
                // Each chunk on a task of its own: turning its rows into Arrow is most of the
                // snapshot's work in this process, and one task would do it for every chunk in
                // flight on one core. Spawned only as a slot frees (the stream is lazy), and
                // aborted if the read is dropped.
                let run = Arc::clone(self);
                let read = ChunkTask(tokio::spawn(async move { run.read_chunk(t, index).await }));
                async move { self.chunk_read(t, index, read.await).await }
            })
            .buffer_unordered(self.options.parallelism.max(1));
        let mut reads = ChunkReads::default();
        let read: SourceResult<()> = async {
            while let Some(read) = reading.try_next().await? {
                match read {
                    Ok(chunk) => {
                        each(&chunk)?;
                        self.progress.set_working_on(None);
                        reads.chunks.push(chunk);
                    }
                    Err(stale) => reads.stale.push(stale),
                }
            }
            Ok(())
        }
        .await;
        drop(reading);
        // The chunk connections are not needed past the run's chunks. Our own say goodbye, so
        // the server does not log and count each as an aborted connection.
        let idle = std::mem::take(&mut *self.idle.locked());
        for conn in idle {
            if let Some(rows) = conn.rows {
                rows.quit().await;
            }
        }
        read?;
        if let Some(feed) = self.feed.get() {
            feed.check()?;
        }
        reads.chunks.extend(done);
        reads
            .chunks
            .sort_by(|a, b| (&a.high, a.table, a.index).cmp(&(&b.high, b.table, b.index)));
        Ok(reads)
    }

    /// What the read of chunk `index` of table `t` came to: the chunk (told to the journal and
    /// the observer), or, when a DDL broke the read, the chunk to read again under the new
    /// schema.
    async fn chunk_read(
        &self,
        t: usize,
        index: usize,
        read: SourceResult<RecordBatch>,
    ) -> SourceResult<Result<SnapshotChunk, StaleChunk>> {
        let rows = match read {
            Ok(rows) => rows,
            Err(e) if e.is_schema_change() => {
                tracing::info!(table = %self.tables[t].schema.id, chunk = index, error = %e, "a DDL broke a chunk's read; it is read again");
                self.status(t, index, |c| c.state = ChunkState::Pending);
                return Ok(Err((t, index, e)));
            }
            Err(e) => return Err(e),
        };
        // A failure from here on (its read is done) is this chunk's table's.
        self.progress
            .set_working_on(Some(&self.tables[t].schema.id));
        let chunk = self.finished(t, index, &[rows])?;
        if let Some(journal) = &self.options.journal {
            journal.done(&chunk).await;
        }
        if let Some(observer) = &self.options.observer {
            observer.done(&chunk).await;
        }
        Ok(Ok(chunk))
    }

    /// A run that reads `parts` again, each table in `schemas` under its new schema (the same
    /// ranges, the same chunk key column by name). It shares this run's window reader and
    /// progress, and tells no journal or observer: the capture keeps re-read chunks in memory
    /// until the hand-off, and a snapshot resumed after a restart reads them again (a done
    /// chunk whose columns differ from its table's is never resumed).
    ///
    /// Fails with [`SourceError::SchemaChangedDuringSnapshot`] when a table's chunk key column
    /// is gone or changed type: its planned ranges no longer describe it.
    pub async fn reread(
        self: &Arc<Self>,
        schemas: &[(usize, Arc<TableSchema>)],
        parts: Vec<(usize, usize)>,
        at: &BinlogCoord,
    ) -> SourceResult<Arc<SnapshotRun>> {
        let mut tables = self.tables.clone();
        let mut conn = self.connect.connect().await?;
        for (t, schema) in schemas {
            let old = &self.tables[*t];
            let changed = || SourceError::SchemaChangedDuringSnapshot {
                table: schema.id.to_string(),
                at: at.clone(),
            };
            let key = match old.key {
                Some(was) => {
                    let name = &old.schema.columns[was].name;
                    let now = schema.column_index(name).ok_or_else(changed)?;
                    let type_of = |s: &TableSchema, i: usize| s.arrow.field(i).data_type().clone();
                    if type_of(schema, now) != type_of(&old.schema, was) {
                        return Err(changed());
                    }
                    Some(now)
                }
                None => None,
            };
            let check = match key {
                Some(key) => {
                    Some(RangeCheck::new(&mut conn, schema, key, self.connect.read_timeout).await?)
                }
                None => None,
            };
            let codec = RowCodec::new(Arc::clone(schema))
                .map_err(|e| SourceError::arrow(format!("row encoding of {}", schema.id), e))?;
            tables[*t] = Arc::new(PlannedTable {
                schema: Arc::clone(schema),
                key,
                ranges: old.ranges.clone(),
                check,
                codec,
            });
        }
        drop(conn);
        let mut options = self.options.clone();
        options.journal = None;
        options.observer = None;
        options.resume = None;
        Ok(Arc::new(SnapshotRun {
            connect: self.connect.clone(),
            info: self.info.clone(),
            options,
            progress: Arc::clone(&self.progress),
            tables,
            consistent: self.consistent,
            feed: Arc::clone(&self.feed),
            only: Some(parts),
            outcomes: Mutex::new(HashMap::new()),
            done: Mutex::new(Vec::new()),
            idle: Mutex::new(Vec::new()),
            socket: tokio::sync::OnceCell::new(),
            driver_rows_only: Default::default(),
        }))
    }

    /// The chunk `index` of table `t` as read by its partition.
    fn finished(
        &self,
        t: usize,
        index: usize,
        batches: &[RecordBatch],
    ) -> SourceResult<SnapshotChunk> {
        crate::failpoint::hit("snapshot.chunk");
        let outcome = self.outcomes.locked().remove(&(t, index)).ok_or_else(|| {
            SourceError::Internal(format!(
                "chunk {index} of {} reported no HIGH",
                self.tables[t].schema.id
            ))
        })?;
        let schema = &self.tables[t].schema;
        // A partition yields its chunk as one batch: take it rather than copy it.
        let rows = match batches {
            [one] => one.clone(),
            _ => concat_batches(&schema.arrow, batches)
                .map_err(|e| SourceError::arrow(format!("chunk of {}", schema.id), e))?,
        };
        Ok(SnapshotChunk {
            table: t,
            index,
            range: self.tables[t].ranges[index].clone(),
            low: outcome.low,
            high: outcome.high,
            rows,
            window_changes: outcome.window_changes,
        })
    }
}

/// A chunk read running on a task of its own: awaited like the read itself (a panic in it goes
/// on in the awaiting task), aborted when dropped, so a snapshot dropped midway leaves no reads
/// behind.
struct ChunkTask(tokio::task::JoinHandle<SourceResult<RecordBatch>>);

impl std::future::Future for ChunkTask {
    type Output = SourceResult<RecordBatch>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|joined| match joined {
                Ok(read) => read,
                // Carried on in the snapshot's own task, as if the read had run there.
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => Err(SourceError::Internal(format!(
                    "a snapshot chunk's read ended early: {e}"
                ))),
            })
    }
}

impl Drop for ChunkTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The chunk key column: the configured one, else the first primary-key column; `None` for a
/// keyless table without a configured key (read as one chunk).
fn chunk_key(schema: &TableSchema, configured: Option<&String>) -> SourceResult<Option<usize>> {
    match configured {
        Some(name) => schema.column_index(name).map(Some).ok_or_else(|| {
            SourceError::Config(format!(
                "chunk key column {name} does not exist in {}",
                schema.id
            ))
        }),
        None => Ok(schema.primary_key.first().copied()),
    }
}
