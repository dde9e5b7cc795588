//! The replica connection: opens the binlog dump, feeds its events to the
//! [`Assembler`], and survives transient failures.
//!
//! # Reconnects
//! Transient failures (connection reset, server restart, silence longer than three heartbeat
//! periods, a query or the dump's opening unanswered within the read timeout) drop the partial
//! transaction and reconnect with backoff from the end of the last complete one, so no change
//! is lost or repeated. Definite errors (purged binlog, bad settings, undecodable events) end
//! the stream with the error. The heartbeat is at most a third of the read timeout, so an idle
//! stream is never taken for a stalled one. A reconnect goes on at a file position only on the
//! server the stream was read from: another one answering at the address (same endpoint, new
//! server) ends the stream with `ServerChanged`, for the capture to go on there by GTID.
//!
//! # Threads
//! The dump connection is opened, read and checksum-verified on a thread of its own with a
//! runtime of its own, so that thread polls its own socket; the decoder takes whole framed
//! events from it through a queue bounded in bytes, and never reads the socket itself.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mysql_async::binlog::events::Event;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, GnoInterval, Sid};
use mysql_common::packets::Tag;

use super::assemble::{checksum_mismatch, Assembler};
use super::files::executed_at;
use super::filter::{TableFilter, SYSTEM_DATABASES};
use crate::change::position::{BinlogCoord, GtidSet, MySqlIntervals, StartPosition};
use crate::change::schema::{Flavor, TableId};
use crate::change::{SourceTransaction, TransactionRun};
use crate::source::connect::{collations, gtid_position_at, ConnectOptions, ServerInfo};
use crate::source::error::{SourceError, SourceResult};

/// Reconnect attempts on transient stream failures before giving up.
const MAX_RECONNECTS: u32 = 10;
/// Events framed ahead of the decoder, at most. Deep enough that a capture catching up finds
/// the longest run it gathers (1,024 single-row transactions of four events) already received:
/// with 256 a run ended when the queue ran dry about 60 transactions in, and each of those
/// short runs paid for a published version of its own.
const EVENT_QUEUE: usize = 4096;
/// Bytes of framed events ahead of the decoder, at most, so that large events (rows of
/// blobs) queue in a bounded amount of memory. A batch larger than this passes alone.
const QUEUE_BYTES: usize = 16 << 20;

/// A thread that reads the dump connection and queues framed events for the decoder; dropping
/// the feed stops the thread and closes the connection.
#[derive(Debug)]
struct EventFeed {
    /// Batches of framed events, each with the bytes it holds of [`QUEUE_BYTES`].
    events: tokio::sync::mpsc::Receiver<(Vec<Result<Event, FeedError>>, u32)>,
    /// Bytes the queue may still take: the feed takes a batch's bytes before sending it, the
    /// decoder gives them back as it receives it.
    room: Arc<tokio::sync::Semaphore>,
    /// Events received but not yet handed to the assembler.
    ready: std::collections::VecDeque<Result<Event, FeedError>>,
    /// Events the assembler is done with, going back to the feed's thread to be freed there:
    /// they were allocated on its thread, and freeing them there keeps the decoder's core out
    /// of the allocator's slower path for memory another thread owns.
    spent: Vec<Event>,
    returns: tokio::sync::mpsc::UnboundedSender<Vec<Event>>,
    /// Dropped with the feed, which ends the feed's thread and closes the dump connection.
    _close: tokio::sync::oneshot::Sender<()>,
}

/// Why the feed stopped.
#[derive(Debug)]
enum FeedError {
    Mysql(mysql_async::Error),
    /// An event's CRC32 did not match; `end` is its end offset.
    Checksum {
        end: u64,
        expected: u32,
        computed: u32,
    },
}

/// Events the feed hands over at once, when that many are ready: one wake-up of the decoder
/// per batch rather than per event.
const FEED_BATCH: usize = 64;

impl EventFeed {
    /// Starts a thread that runs `open` and reads the stream it opens; returns once the stream
    /// is open, or with the error that kept it from opening. The thread has a
    /// runtime of its own, and `open` makes the connection on it, so the thread polls its own
    /// socket: on the caller's runtime a worker thread polled it and woke the feed's thread for
    /// every read, a third thread taking turns with the framing and the decoding. It also
    /// verifies every event's checksum, beside the network read, so that the decoder's core
    /// only decodes. At most `budget` bytes of events (or one batch) wait in the queue.
    async fn spawn<S, F>(open: F, budget: usize) -> SourceResult<Self>
    where
        F: std::future::Future<Output = SourceResult<S>> + Send + 'static,
        S: futures::Stream<Item = Result<Event, mysql_async::Error>> + Send + Unpin,
    {
        let (tx, events) = tokio::sync::mpsc::channel(EVENT_QUEUE / FEED_BATCH);
        let (returns, mut spent) = tokio::sync::mpsc::unbounded_channel::<Vec<Event>>();
        let budget = budget.clamp(1, u32::MAX as usize);
        let room = Arc::new(tokio::sync::Semaphore::new(budget));
        let feed_room = Arc::clone(&room);
        let (opened_tx, opened) = tokio::sync::oneshot::channel();
        let feed = async move {
            let stream = match open.await {
                Ok(stream) => {
                    let _ = opened_tx.send(Ok(()));
                    stream
                }
                Err(e) => {
                    let _ = opened_tx.send(Err(e));
                    return;
                }
            };
            let mut chunks = stream.ready_chunks(FEED_BATCH);
            while let Some(items) = chunks.next().await {
                while let Ok(events) = spent.try_recv() {
                    drop(events);
                }
                let mut failed = false;
                let batch: Vec<_> = items
                    .into_iter()
                    .map_while(|item| {
                        if failed {
                            return None;
                        }
                        let checked = match item {
                            Ok(event) => match checksum_mismatch(&event) {
                                None => Ok(event),
                                Some((expected, computed)) => Err(FeedError::Checksum {
                                    end: event.header().log_pos() as u64,
                                    expected,
                                    computed,
                                }),
                            },
                            Err(e) => Err(FeedError::Mysql(e)),
                        };
                        failed = checked.is_err();
                        Some(checked)
                    })
                    .collect::<Vec<_>>();
                let bytes = batch
                    .iter()
                    .map(|e| e.as_ref().map_or(0, |e| e.header().event_size() as usize))
                    .sum::<usize>()
                    .min(budget) as u32;
                // The semaphore is never closed; were it, the batch would go unbounded.
                if let Ok(permit) = feed_room.acquire_many(bytes).await {
                    permit.forget();
                }
                if tx.send((batch, bytes)).await.is_err() || failed {
                    break;
                }
            }
        };
        // On a thread of its own rather than as a task: the decoder's task wakes the feed as
        // it takes batches, and a task woken from a worker thread waits in that worker's slot
        // for the next task, which no idle worker may take, until the decoder's task yields,
        // which it does only when the queue is empty. The two then took turns on one core.
        let (close, closed) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                SourceError::Internal(format!("starting the binlog feed's runtime: {e}"))
            })?;
        std::thread::Builder::new()
            .name("binlog-feed".into())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        () = feed => {}
                        // The feed was dropped: stop reading, closing the connection.
                        _ = closed => {}
                    }
                })
            })
            .map_err(|e| {
                SourceError::Internal(format!("starting the binlog feed's thread: {e}"))
            })?;
        let feed = Self {
            events,
            room,
            ready: std::collections::VecDeque::new(),
            spent: Vec::with_capacity(FEED_BATCH),
            returns,
            _close: close,
        };
        // Dropping `feed` on an error ends its thread.
        opened.await.unwrap_or_else(|_| {
            Err(SourceError::Internal(
                "the binlog feed's thread ended before opening its stream".into(),
            ))
        })?;
        Ok(feed)
    }

    /// Whether an event has been received and not yet handed over (the next one is at hand
    /// without waiting for the server).
    fn has_buffered(&self) -> bool {
        !self.ready.is_empty() || !self.events.is_empty()
    }

    /// The next event; `None` when the stream ended.
    async fn next(&mut self) -> Option<Result<Event, FeedError>> {
        if self.ready.is_empty() {
            self.give_back();
            let batch = self.events.recv().await?;
            self.receive(batch);
        }
        self.ready.pop_front()
    }

    /// Takes a batch off the queue, giving its bytes back to it.
    fn receive(&mut self, (batch, bytes): (Vec<Result<Event, FeedError>>, u32)) {
        self.room.add_permits(bytes as usize);
        self.ready.extend(batch);
    }

    /// Sends the events handled since the last batch back to the feed's thread to be freed.
    fn give_back(&mut self) {
        if !self.spent.is_empty() {
            let spent = std::mem::replace(&mut self.spent, Vec::with_capacity(FEED_BATCH));
            // A closed channel means the feed ended: the events are freed here instead.
            let _ = self.returns.send(spent);
        }
    }

    /// The next event when it has been received and framed without error, without waiting.
    fn next_ready(&mut self) -> Option<Event> {
        if self.ready.is_empty() {
            let batch = self.events.try_recv().ok()?;
            self.give_back();
            self.receive(batch);
        }
        match self.ready.front() {
            Some(Ok(_)) => self.ready.pop_front()?.ok(),
            // An error (or nothing) is for `next`, and the reader's error handling.
            _ => None,
        }
    }

    /// Takes back an event the assembler has handled (see `spent`).
    fn retire(&mut self, event: Event) {
        self.spent.push(event);
    }
}

/// When a run being gathered stops taking transactions that have already arrived.
enum RunEnd<'a> {
    At(std::time::Instant),
    /// `burst` after its first transaction completes; before that, as soon as the stream is
    /// idle past `past` (see [`BinlogReader::wait_run`]).
    AfterFirst {
        burst: std::time::Duration,
        past: Option<&'a BinlogCoord>,
    },
}

/// Options of one binlog reader.
#[derive(Clone)]
pub struct BinlogReaderOptions {
    /// The replica server id this reader registers with; unique among the server's replicas.
    pub server_id: u32,
    pub start: StartPosition,
    /// How often the server sends a heartbeat when idle; silence for three periods is a
    /// broken connection.
    pub heartbeat: Duration,
    pub filter: TableFilter,
    /// What the reader takes as executed before a file-position start.
    pub start_gtids: StartGtids,
}

impl std::fmt::Debug for BinlogReaderOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BinlogReaderOptions")
            .field("server_id", &self.server_id)
            .field("start", &self.start)
            .field("heartbeat", &self.heartbeat)
            .finish_non_exhaustive()
    }
}

impl BinlogReaderOptions {
    pub fn new(server_id: u32, start: StartPosition) -> Self {
        Self {
            server_id,
            start,
            heartbeat: Duration::from_secs(5),
            filter: Arc::new(|t: &TableId| !SYSTEM_DATABASES.contains(&t.db.as_str())),
            start_gtids: StartGtids::NotNeeded,
        }
    }

    pub fn with_filter(mut self, filter: TableFilter) -> Self {
        self.filter = filter;
        self
    }

    /// What the reader takes as executed before its start (see
    /// [`BinlogReader::start_gtids`]): `known` when given, else what the server says, on
    /// MySQL by listing the start file's events.
    pub fn with_start_gtids(mut self, known: Option<GtidSet>) -> Self {
        self.start_gtids = known.map_or(StartGtids::FromServer, StartGtids::Known);
        self
    }
}

/// What a reader takes as executed before a file-position start (a GTID start is its set).
#[derive(Debug, Clone, Default)]
pub enum StartGtids {
    /// Nothing: the reader's caller does not follow GTIDs, so nothing is asked.
    #[default]
    NotNeeded,
    /// The set the caller carried with the position.
    Known(GtidSet),
    /// Asked of the server: MariaDB's `BINLOG_GTID_POS`; on MySQL, which has no such lookup,
    /// its listing of the start file ([`executed_at`], a read of the file's prefix).
    FromServer,
}

/// Everything the feed's thread needs to open the binlog dump on a connection of its own.
struct DumpPlan {
    connect: ConnectOptions,
    server_id: u32,
    /// Session settings the dump needs, run in order before it opens.
    setup: Vec<String>,
    /// The file and offset to start from, when starting from a position.
    from: Option<(Vec<u8>, u64)>,
    /// The GTIDs already executed, when starting from MySQL GTIDs.
    mysql_gtids: Option<Vec<Sid<'static>>>,
    /// Where the dump starts, for errors.
    describe: String,
}

impl DumpPlan {
    /// Connects, prepares the session and opens the dump, each step under the read timeout.
    async fn open(self) -> SourceResult<BinlogStream> {
        let mut conn = self.connect.connect().await?;
        let context = || "preparing the binlog dump".to_string();
        for sql in &self.setup {
            let run = async {
                conn.query_drop(sql).await.map_err(|e| {
                    SourceError::from_mysql(format!("preparing the binlog dump ({sql})"), e)
                })
            };
            self.connect.bounded(context, run).await?;
        }
        let mut request = BinlogStreamRequest::new(self.server_id);
        if let Some((file, offset)) = &self.from {
            request = request.with_filename(file).with_pos(*offset);
        }
        if let Some(sids) = self.mysql_gtids {
            request = request.with_gtid().with_gtid_set(sids);
        }
        let context = format!("opening the binlog at {}", self.describe);
        let open = async {
            conn.get_binlog_stream(request)
                .await
                .map_err(|e| SourceError::from_mysql(context.clone(), e))
        };
        self.connect.bounded(|| context.clone(), open).await
    }
}

/// Reads whole transactions from one server's binlog. See the module docs.
pub struct BinlogReader {
    connect: ConnectOptions,
    info: ServerInfo,
    options: BinlogReaderOptions,
    /// The GTID position at the start (`None`: not known; see [`BinlogReader::start_gtids`]).
    start_gtids: Option<GtidSet>,
    /// Whether the stream has been opened before: opening it again checks the server first.
    reopened: bool,
    /// A second connection, for `information_schema` while the stream runs; opened again after
    /// a transient failure (it may be the connection that failed).
    meta: Option<Conn>,
    /// Events framed on a separate thread, so the network read and the decoding run on
    /// different cores.
    stream: Option<EventFeed>,
    asm: Assembler,
    /// A table map handled without waiting whose schema is still to be read (see
    /// [`BinlogReader::step_now`]); the next step reads it before anything else.
    unresolved: Option<Event>,
    /// An error of [`BinlogReader::step_now`], for [`BinlogReader::step`] to handle as if it
    /// had just happened: retried when transient, the stream ended when definite.
    deferred: Option<SourceError>,
}

impl std::fmt::Debug for BinlogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BinlogReader")
            .field("server", &self.connect.address())
            .field("resume", &self.asm.resume)
            .finish_non_exhaustive()
    }
}

impl BinlogReader {
    /// Connects, runs the start-up checks and resolves the start position; the stream itself
    /// opens on the first [`BinlogReader::next`].
    pub async fn open(
        connect: ConnectOptions,
        mut options: BinlogReaderOptions,
    ) -> SourceResult<Self> {
        options.heartbeat = options.heartbeat.min(connect.read_timeout / 3);
        let mut meta = connect.connect().await?;
        let info = connect.checked(&mut meta).await?;
        let collations = connect
            .bounded(|| "reading collations".into(), collations(&mut meta))
            .await?;
        let start = match &options.start {
            StartPosition::Current => {
                let (coord, _) = connect.position(&mut meta, info.flavor).await?;
                StartPosition::Coord(coord)
            }
            other => other.clone(),
        };
        let start_gtids = match (&start, &options.start_gtids) {
            (StartPosition::Gtid(set), _) => Some(set.clone()),
            (_, StartGtids::Known(set)) => Some(set.clone()),
            (StartPosition::Coord(at), StartGtids::FromServer) => match info.flavor {
                Flavor::MariaDb => {
                    connect
                        .bounded(
                            || format!("reading the GTID position at {at}"),
                            gtid_position_at(&mut meta, at),
                        )
                        .await?
                }
                // Without the listing the stream still runs; only a move by GTID is then
                // refused, saying why.
                Flavor::MySql => match executed_at(&mut meta, &connect, info.flavor, at).await {
                    Ok(set) => Some(set),
                    Err(e) => {
                        tracing::warn!(error = %e, position = %at, "the GTIDs executed at the start are not known");
                        None
                    }
                },
            },
            _ => None,
        };
        let mut asm = Assembler::new(
            start,
            info.checksums,
            Arc::clone(&options.filter),
            collations,
        );
        asm.set_checksums_verified_upstream();
        asm.set_read_timeout(connect.read_timeout);
        asm.set_history(connect.history);
        Ok(Self {
            connect,
            info,
            options,
            start_gtids,
            reopened: false,
            meta: Some(meta),
            stream: None,
            asm,
            unresolved: None,
            deferred: None,
        })
    }

    pub fn server(&self) -> &ServerInfo {
        &self.info
    }

    /// Where a restart would resume: the end of the last complete transaction.
    pub fn resume_position(&self) -> &StartPosition {
        &self.asm.resume
    }

    /// The GTIDs executed before the first transaction the reader hands out: the start set
    /// when started from GTIDs; at a start file position what its options say
    /// ([`StartGtids`]). `None` when not asked for, or not known.
    pub fn start_gtids(&self) -> Option<&GtidSet> {
        self.start_gtids.as_ref()
    }

    /// GTIDs of the transactions read so far (plus the start set, when started by GTID).
    pub fn executed_gtids(&self) -> &GtidSet {
        self.asm.executed_gtids()
    }

    async fn open_stream(&mut self) -> SourceResult<EventFeed> {
        if self.reopened {
            // The stream goes on at a file position of the server it was read from: never at
            // another one that took over its address.
            let mut conn = self.connect.connect().await?;
            let now = self.connect.checked(&mut conn).await?;
            if now.identity() != self.info.identity() {
                return Err(SourceError::ServerChanged {
                    address: self.connect.address(),
                    was: self.info.identity(),
                    now: now.identity(),
                });
            }
            self.meta = Some(conn);
        }
        self.reopened = true;
        let plan = self.dump_plan()?;
        EventFeed::spawn(plan.open(), QUEUE_BYTES)
            .await
            .map_err(|e| self.refused_gtids(e))
    }

    /// A server that cannot send the binlog after the GTIDs the stream starts from (its binlog
    /// lacks the GTID a domain stands at: its history diverged from the one they were read
    /// from, or it purged them) says so with the error of a missing binlog; named for what it
    /// is. Any other error, or a start at a file position, as it is.
    fn refused_gtids(&self, e: SourceError) -> SourceError {
        match (e, &self.asm.resume) {
            (SourceError::BinlogUnavailable { message, .. }, StartPosition::Gtid(set)) => {
                SourceError::GtidsDiverged {
                    server: self.connect.address(),
                    gtids: set.to_string(),
                    message,
                }
            }
            (e, _) => e,
        }
    }

    /// How to open the dump from where the reader resumes; opened on the feed's thread.
    fn dump_plan(&self) -> SourceResult<DumpPlan> {
        let heartbeat_ns = self.options.heartbeat.as_nanos().to_string();
        let mut setup = vec![format!("SET @master_heartbeat_period = {heartbeat_ns}")];
        if self.info.flavor == Flavor::MariaDb {
            // Without this capability MariaDB rewrites its GTID events into BEGIN queries.
            setup.push("SET @mariadb_slave_capability = 4".into());
        }
        let (mut from, mut mysql_gtids) = (None, None);
        match &self.asm.resume {
            StartPosition::Coord(coord) => {
                from = Some((coord.file.as_bytes().to_vec(), coord.offset));
            }
            StartPosition::Gtid(GtidSet::MariaDb(_)) => {
                let state = self.resume_gtid_string();
                setup.push(format!("SET @slave_connect_state = '{state}'"));
                setup.push("SET @slave_gtid_strict_mode = 1".into());
            }
            StartPosition::Gtid(GtidSet::MySql(map)) => mysql_gtids = Some(dump_sids(map)?),
            StartPosition::Gtid(GtidSet::Empty) => {
                return Err(SourceError::Config("empty GTID start position".into()))
            }
            StartPosition::Current => unreachable!("resolved in open()"),
        }
        Ok(DumpPlan {
            connect: self.connect.clone(),
            server_id: self.options.server_id,
            setup,
            from,
            mysql_gtids,
            describe: self.describe_resume(),
        })
    }

    fn resume_gtid_string(&self) -> String {
        match &self.asm.resume {
            StartPosition::Gtid(set) => set.to_string(),
            _ => String::new(),
        }
    }

    fn describe_resume(&self) -> String {
        match &self.asm.resume {
            StartPosition::Coord(c) => c.to_string(),
            StartPosition::Gtid(g) => format!("GTID {g}"),
            StartPosition::Current => "current".into(),
        }
    }

    /// The next complete transaction; reconnects transparently on transient failures.
    pub async fn next(&mut self) -> SourceResult<SourceTransaction> {
        loop {
            if let Some(tx) = self.step().await? {
                return Ok(tx);
            }
        }
    }

    /// Processes one event: a transaction when it completed one. Between transactions,
    /// [`BinlogReader::idle_position`] then tells how far the stream has been read, which
    /// matters when events that belong to no transaction (rotation, GTID lists) end the log.
    pub async fn step(&mut self) -> SourceResult<Option<SourceTransaction>> {
        if let Some(tx) = self.step_now() {
            return Ok(tx);
        }
        let mut failures = 0u32;
        loop {
            let stepped = match self.deferred.take() {
                Some(e) => Err(e),
                None => self.step_inner().await,
            };
            match stepped {
                Ok(tx) => return Ok(tx),
                Err(e) if e.is_transient() && failures < MAX_RECONNECTS => {
                    failures += 1;
                    let delay = Duration::from_millis(100 * (1u64 << failures.min(6)));
                    tracing::warn!(error = %e, attempt = failures, resume = %self.describe_resume(), "binlog stream interrupted, reconnecting");
                    self.reset_stream();
                    // The failure may have been on the schema connection.
                    self.meta = None;
                    tokio::time::sleep(delay).await;
                }
                Err(e) => {
                    self.reset_stream();
                    return Err(e);
                }
            }
        }
    }

    /// The transactions the events already received complete, gathered as one run (see
    /// [`TransactionRun`]) of at most `max` transactions, stopping once `until` has passed;
    /// then the transaction carrying DDL that ended the run, if one did (DDL is never part of
    /// a run). A transaction begun when the received events run out is read to its end, so
    /// the run ends on a transaction boundary. Transient failures reconnect as
    /// [`BinlogReader::step`] does, keeping the transactions already gathered. On an error
    /// the gathered run is dropped with it: the capture then starts again from its last
    /// published position, so none of the run's transactions is lost.
    pub async fn step_run(
        &mut self,
        max: usize,
        until: std::time::Instant,
    ) -> SourceResult<(Option<TransactionRun>, Option<SourceTransaction>)> {
        self.gather_run(max, RunEnd::At(until)).await
    }

    /// [`BinlogReader::step_run`] that first waits for the server until a transaction
    /// completes; the run then gathers what has arrived until `burst` after that. A capture
    /// that reads every transaction this way decodes each burst into one set of arrays, the
    /// first transaction included. It returns nothing only when, before any transaction, the
    /// received events run out between transactions with the stream read past `past`
    /// ([`BinlogReader::idle_position`]): events of no transaction moved it on, such as a
    /// rotation to the new binlog file of a restarted server. Without that, a capture that
    /// moves its position only with transactions would never reach the server's position.
    pub async fn wait_run(
        &mut self,
        max: usize,
        burst: std::time::Duration,
        past: Option<&BinlogCoord>,
    ) -> SourceResult<(Option<TransactionRun>, Option<SourceTransaction>)> {
        self.gather_run(max, RunEnd::AfterFirst { burst, past })
            .await
    }

    /// Whether the stream has been read past `past` (anywhere, without it) with no
    /// transaction open and no received event left to handle.
    fn idle_past(&self, past: Option<&BinlogCoord>) -> bool {
        !self.asm.in_transaction()
            && !self.has_buffered()
            && self
                .idle_position()
                .is_some_and(|at| past.is_none_or(|past| at > *past))
    }

    /// The loop of [`BinlogReader::step_run`] and [`BinlogReader::wait_run`]: between
    /// transactions, the run ends once it has `max`, the received events run out or its time
    /// is up; before its first transaction a run that ends `AfterFirst` has no end yet.
    async fn gather_run(
        &mut self,
        max: usize,
        end: RunEnd<'_>,
    ) -> SourceResult<(Option<TransactionRun>, Option<SourceTransaction>)> {
        self.asm.begin_run(max);
        let mut until = match end {
            RunEnd::At(until) => Some(until),
            RunEnd::AfterFirst { .. } => None,
        };
        let ended = loop {
            if !self.asm.in_transaction() {
                if let (RunEnd::AfterFirst { burst, past }, None) = (&end, until) {
                    if self.asm.run_len() > 0 {
                        until = Some(std::time::Instant::now() + *burst);
                    } else if self.idle_past(*past) {
                        break Ok(None);
                    }
                }
                let done = |until| {
                    self.asm.run_len() >= max
                        || !self.has_buffered()
                        || std::time::Instant::now() >= until
                };
                if until.is_some_and(done) {
                    break Ok(None);
                }
            }
            // Events at hand are handled here, without a future per event.
            let stepped = match self.step_now() {
                Some(tx) => Ok(tx),
                None => self.step().await,
            };
            match stepped {
                Ok(Some(tx)) => break Ok(Some(tx)),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
        };
        let run = self.asm.end_run();
        Ok((run?, ended?))
    }

    /// Whether events have been received that the reader has not processed yet: a
    /// [`BinlogReader::step`] then does not wait for the server (unless it must look a table
    /// up).
    pub fn has_buffered(&self) -> bool {
        self.stream.as_ref().is_some_and(EventFeed::has_buffered)
    }

    /// See [`Assembler::idle_position`].
    pub fn idle_position(&self) -> Option<BinlogCoord> {
        self.asm.idle_position()
    }

    /// Hands a handled event back to the feed (see `EventFeed::spent`); without a feed (it
    /// was reset meanwhile) the event is freed here.
    fn retire(&mut self, event: Event) {
        if let Some(stream) = self.stream.as_mut() {
            stream.retire(event);
        }
    }

    fn reset_stream(&mut self) {
        self.stream = None;
        self.unresolved = None;
        self.asm.reset();
    }

    /// Handles the next event if it has already been received and needs nothing from the
    /// server, with no future made for it: what [`BinlogReader::step`] does per event, at a
    /// fraction of its cost while events arrive faster than they are decoded. `None` when
    /// [`BinlogReader::step`] is needed: no event at hand, an error to handle, a schema to
    /// read. An error is kept for the next [`BinlogReader::step`] (`deferred`).
    fn step_now(&mut self) -> Option<Option<SourceTransaction>> {
        if self.unresolved.is_some() || self.deferred.is_some() || self.meta.is_none() {
            return None;
        }
        let stream = self.stream.as_mut()?;
        let event = stream.next_ready()?;
        let handled = self.asm.handle_now(&event);
        if self.asm.needs_table_map() {
            self.unresolved = Some(event);
        } else {
            stream.retire(event);
        }
        match handled {
            Ok(tx) => Some(tx),
            Err(e) => {
                self.deferred = Some(e);
                None
            }
        }
    }

    async fn step_inner(&mut self) -> SourceResult<Option<SourceTransaction>> {
        if let Some(event) = self.unresolved.take() {
            if self.meta.is_none() {
                self.meta = Some(self.connect.connect().await?);
            }
            self.asm
                .resolve_table_map(&event, self.meta.as_mut())
                .await?;
            self.retire(event);
            return Ok(None);
        }
        {
            let stream = match self.stream.take() {
                Some(stream) => stream,
                None => self.open_stream().await?,
            };
            let stream = self.stream.insert(stream);
            let silence = self.options.heartbeat * 3;
            let item = match tokio::time::timeout(silence, stream.next()).await {
                Ok(item) => item,
                Err(_) => {
                    return Err(SourceError::ReadTimeout {
                        context: "waiting for a binlog event or heartbeat".into(),
                        after: silence,
                    })
                }
            };
            let event = match item {
                Some(Ok(event)) => event,
                Some(Err(FeedError::Mysql(e))) => {
                    return Err(self.refused_gtids(SourceError::from_mysql(
                        format!("reading the binlog from {}", self.describe_resume()),
                        e,
                    )))
                }
                Some(Err(FeedError::Checksum {
                    end,
                    expected,
                    computed,
                })) => {
                    return Err(SourceError::Checksum {
                        at: BinlogCoord::new(self.asm.current_file(), end)
                            .in_history(self.connect.history),
                        expected,
                        computed,
                    })
                }
                None => {
                    return Err(SourceError::Transient {
                        context: "the server ended the binlog stream".into(),
                        source: mysql_async::Error::Io(mysql_async::IoError::Io(
                            std::io::Error::new(
                                std::io::ErrorKind::UnexpectedEof,
                                "binlog stream ended",
                            ),
                        )),
                    })
                }
            };
            if self.meta.is_none() {
                self.meta = Some(self.connect.connect().await?);
            }
            let handled = self.asm.handle_event(&event, self.meta.as_mut()).await;
            self.retire(event);
            handled
        }
    }
}

/// The SID block of a MySQL GTID dump request for `set`: one entry per server UUID and tag,
/// with intervals end-exclusive as the protocol has them. A set with a tagged GTID is sent in
/// the tagged format (MySQL 8.3 and later), which older servers refuse: they have no tagged GTIDs.
pub fn dump_sids(set: &MySqlIntervals) -> SourceResult<Vec<Sid<'static>>> {
    let mut sids = Vec::with_capacity(set.len());
    for ((uuid, tag), intervals) in set {
        let ivs = intervals
            .iter()
            .map(|(a, b)| GnoInterval::new(*a, b + 1))
            .collect();
        let mut sid = Sid::new(*uuid).with_intervals(ivs);
        if let Some(tag) = tag {
            let tag = Tag::new(tag.clone())
                .map_err(|e| SourceError::Config(format!("GTID tag {tag:?}: {e}")))?;
            sid = sid.with_tag(tag);
        }
        sids.push(sid);
    }
    Ok(sids)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use mysql_async::binlog::events::FormatDescriptionEvent;
    use mysql_async::binlog::BinlogVersion;

    use super::*;

    /// An event of `size` bytes in all; its body is zeros, as the feed reads only its header.
    fn event_of(size: usize) -> Event {
        let mut bytes = vec![0, 0, 0, 0, 19, 1, 0, 0, 0];
        bytes.extend((size as u32).to_le_bytes());
        bytes.extend([0; 6]);
        bytes.resize(size, 0);
        let fde = FormatDescriptionEvent::new(BinlogVersion::Version4);
        Event::read(&fde, &bytes[..]).expect("a well-formed event")
    }

    /// Waits until the feed's thread has read `count` events, then a while longer, for it to
    /// read more if it would; returns how many it read.
    async fn read_by_feed(pulled: &AtomicUsize, count: usize) -> usize {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while pulled.load(Ordering::SeqCst) < count && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        pulled.load(Ordering::SeqCst)
    }

    /// The feed reads ahead of the decoder only as far as its byte budget: a batch larger
    /// than the whole budget still passes (alone), the next waits until the decoder takes
    /// it, and every event arrives once, in order.
    #[tokio::test]
    async fn the_feed_reads_ahead_only_as_far_as_its_byte_budget() {
        const SIZE: usize = 4096;
        const EVENTS: usize = 1000;
        let pulled = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&pulled);
        let events =
            futures::stream::iter((0..EVENTS).map(|i| Ok(event_of(SIZE + i)))).inspect(move |_| {
                counter.fetch_add(1, Ordering::SeqCst);
            });
        // A budget of a quarter of one batch's bytes.
        let mut feed = EventFeed::spawn(async { Ok(events) }, FEED_BATCH / 4 * SIZE)
            .await
            .unwrap();
        // The first batch is queued; the second was read and waits for room.
        assert_eq!(read_by_feed(&pulled, 2 * FEED_BATCH).await, 2 * FEED_BATCH);
        let first = feed.next().await.expect("an event").expect("no error");
        assert_eq!(first.header().event_size() as usize, SIZE);
        assert_eq!(read_by_feed(&pulled, 3 * FEED_BATCH).await, 3 * FEED_BATCH);
        let mut sizes = vec![SIZE];
        while let Some(event) = feed.next().await {
            sizes.push(event.expect("no error").header().event_size() as usize);
        }
        assert_eq!(sizes, (0..EVENTS).map(|i| SIZE + i).collect::<Vec<_>>());
    }
}
