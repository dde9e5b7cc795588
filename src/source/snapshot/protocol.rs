//! The protocol of one chunk: LOW, visibility barrier, `SELECT`, HIGH, and the fold of the
//! window `(LOW, HIGH]` (watermarks), or a read inside a consistent snapshot (MariaDB, on
//! request). Under watermarks the barrier and the `SELECT` are one locking read unless it
//! meets a lock (see `SnapshotRun::scan_visible`), so the server scans the range once.
//!
//! Chunks of tables without a primary key take a third way under watermarks, a *locked read*:
//! their rows are a multiset, and folding a window change the `SELECT` already saw would count
//! it twice (a keyed row's full image can be applied again harmlessly; a copy cannot). The
//! chunk is read with `LOCK IN SHARE MODE` inside a REPEATABLE READ transaction and HIGH is
//! taken while the locks are held: every transaction that changed those rows before the read
//! committed (and so reached the binlog, which comes first) before it, and every later one
//! waits for the read's transaction to end, after HIGH. The window is empty (LOW = HIGH).
//! Writers to that table wait for the duration of the chunk's read.
//!
//! # Connections
//! A chunk holds two connections, reused by the next chunk: the driver's, for the positions,
//! the barrier, the window fold and a keyless chunk's locked read (whose HIGH must be taken
//! inside its transaction), and our own (`source::mysql_client`) for the watermarked `SELECT` (locking
//! or not) and the whole of a consistent snapshot's transaction, whose rows it reads in place.
//! Statements on the two follow one another, never overlap, so the order of LOW, barrier,
//! `SELECT` and HIGH is the same as on one connection.
//!
//! # Invariant
//! [`SnapshotRun::read_chunk`] returns the table's state at the chunk's HIGH within its range,
//! and records that HIGH (and LOW) for the run; see `incremental` for why each step is there.

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use std::sync::atomic::Ordering;

use super::columns::{select_batches_wire, select_batches_wire_locked};
use super::incremental::{
    ChunkConnection, ChunkInfo, ChunkOutcome, ChunkState, ChunkStatus, HookPoint, RowReader,
    SnapshotRun, Visibility,
};
use super::select::{
    is_lock_conflict, select_batches_locked, select_batches_within, visibility_barrier, LockRetry,
    DEFAULT_BATCH_ROWS,
};
use super::window::{normalize, WindowFeed};
use crate::change::position::{BinlogCoord, GtidSet, StartPosition};
use crate::change::schema::{Flavor, TableId, TableSchema};
use crate::locks::Locked;
use crate::source::binlog::{BinlogReader, BinlogReaderOptions, TableFilter};
use crate::source::connect::SESSION_INIT;
use crate::source::error::{SourceError, SourceResult};
use crate::source::mysql_client::{Opened, WireConnection};
use std::sync::Arc;

/// How long a keyless table's locked read keeps trying to get its rows' locks: long-open
/// transactions must end for it to see a committed state.
const LOCKED_READ_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// The level of every chunk connection (see `chunk_connection`).
const ISOLATION: &str = "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ";

impl ChunkConnection {
    /// `SELECT`s the range's rows on our own connection when there is one, else on the
    /// driver's (each read bounded by `limit`); with `locking`, the server's flavor, as a
    /// locking read that never waits (see [`nowait_share_lock`](super::select::nowait_share_lock)).
    pub(super) async fn select(
        &mut self,
        schema: &TableSchema,
        predicate: Option<&str>,
        params: &[mysql_async::Value],
        locking: Option<Flavor>,
        limit: std::time::Duration,
    ) -> SourceResult<Vec<RecordBatch>> {
        let (n, sql) = (DEFAULT_BATCH_ROWS, &mut self.sql);
        match (self.rows.as_mut(), locking) {
            (Some(wire), None) => select_batches_wire(wire, schema, predicate, params, n).await,
            (Some(wire), Some(flavor)) => {
                select_batches_wire_locked(wire, schema, flavor, predicate, params, n).await
            }
            (None, None) => {
                select_batches_within(sql, schema, predicate, params.to_vec(), n, limit).await
            }
            (None, Some(flavor)) => {
                let params = params.to_vec();
                select_batches_locked(sql, schema, flavor, predicate, params, n, limit).await
            }
        }
    }
}

/// What one chunk's read returns: its watermarks, its rows as read (before the window fold)
/// and how it waited for commits to become visible.
pub(super) struct ChunkRead {
    pub(super) low: BinlogCoord,
    pub(super) high: BinlogCoord,
    pub(super) scanned: Vec<RecordBatch>,
    pub(super) visibility: Visibility,
}

impl SnapshotRun {
    async fn feed(&self) -> SourceResult<&WindowFeed> {
        self.feed
            .get_or_try_init(|| async {
                let mut conn = self.connect.connect().await?;
                let (start, _) = self.position(&mut conn).await?;
                drop(conn);
                let ids: Vec<TableId> = self.tables.iter().map(|t| t.schema.id.clone()).collect();
                let filter: TableFilter = Arc::new(move |t: &TableId| ids.contains(t));
                let reader_options = BinlogReaderOptions::new(
                    self.options.window_server_id,
                    StartPosition::Coord(start),
                )
                .with_filter(filter);
                Ok(WindowFeed::start(
                    BinlogReader::open(self.connect.clone(), reader_options).await?,
                ))
            })
            .await
    }

    /// The connections for a chunk: idle ones that still answer (within the read timeout),
    /// or new ones, set to REPEATABLE READ once. The reads that keep a transaction need that
    /// level: a keyless chunk's locked read, and a consistent snapshot, which InnoDB ignores
    /// (with a warning) under READ COMMITTED, a server default some sites choose; its
    /// `SELECT` would then read a newer state than the reported position and count a keyless
    /// row written in between twice. Autocommit reads take a new view either way.
    async fn chunk_connection(&self) -> SourceResult<ChunkConnection> {
        loop {
            let idle = self.idle.locked().pop();
            let Some(mut conn) = idle else {
                let mut sql = self.connect.connect().await?;
                self.run(&mut sql, ISOLATION, || {
                    "setting a chunk connection's isolation level".into()
                })
                .await?;
                let rows = self.open_rows(&mut sql).await?;
                return Ok(ChunkConnection { sql, rows });
            };
            // A server restarted since the connections were last used would fail the chunk's
            // first statement; one round trip each tells.
            let limit = self.connect.read_timeout;
            if let Ok(Ok(())) = tokio::time::timeout(limit, conn.sql.ping()).await {
                let rows_answer = match conn.rows.as_mut() {
                    Some(rows) => rows.ping().await.is_ok(),
                    None => true,
                };
                if rows_answer {
                    return Ok(conn);
                }
            }
        }
    }

    /// Our own connection for the `SELECT`s of keyed chunks and consistent snapshots (see
    /// `source::mysql_client`), over the server's Unix socket when it is the same server's (a loopback
    /// address, the URL's port; see `ConnectOptions::local_socket`); `None` when it
    /// cannot be had. The driver's connection `sql` has just been made with the same options,
    /// so a failure here is ours, not the server's: the chunk reads through the driver instead
    /// of failing, and after a failure that will not pass (a method this connection does not
    /// speak, a refused handshake) so does the rest of the run, logged once.
    async fn open_rows(&self, sql: &mut Conn) -> SourceResult<Option<WireConnection>> {
        if self.driver_rows_only.load(Ordering::Relaxed) {
            return Ok(None);
        }
        // Only the same server's socket (a loopback address and the URL's port, see
        // `ConnectOptions::local_socket`).
        let socket = self
            .socket
            .get_or_init(|| self.connect.local_socket(sql))
            .await;
        let init: Vec<&str> = SESSION_INIT.iter().copied().chain([ISOLATION]).collect();
        let reason = match WireConnection::open(&self.connect, socket.as_deref(), &init).await {
            Ok(Opened::Ready(conn)) => return Ok(Some(*conn)),
            Ok(Opened::Unsupported(reason)) => reason,
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, "a chunk reads its rows through mysql_async");
                return Ok(None);
            }
            Err(e) => e.to_string(),
        };
        if !self.driver_rows_only.swap(true, Ordering::Relaxed) {
            tracing::info!(%reason, "snapshot rows are read through mysql_async");
        }
        Ok(None)
    }

    /// The server's binlog end, within the read timeout.
    async fn position(&self, conn: &mut Conn) -> SourceResult<(BinlogCoord, GtidSet)> {
        self.connect.position(conn, self.info.flavor).await
    }

    /// Runs a statement that returns no rows, within the read timeout.
    pub(super) async fn run(
        &self,
        conn: &mut Conn,
        sql: &str,
        context: impl Fn() -> String,
    ) -> SourceResult<()> {
        let run = async {
            conn.query_drop(sql)
                .await
                .map_err(|e| SourceError::from_mysql(context(), e))
        };
        self.connect.bounded(&context, run).await
    }

    pub(super) async fn hook(&self, point: HookPoint, t: usize, index: usize) {
        if let Some(hook) = &self.options.hook {
            hook(
                point,
                ChunkInfo {
                    table: self.tables[t].schema.id.clone(),
                    index,
                    range: self.tables[t].ranges[index].clone(),
                },
            )
            .await;
        }
    }

    pub(super) fn status(&self, t: usize, index: usize, f: impl FnOnce(&mut ChunkStatus)) {
        let id = &self.tables[t].schema.id;
        self.progress.update(|r| {
            if let Some(c) = r
                .chunks
                .iter_mut()
                .find(|c| c.index == index && c.table == *id)
            {
                f(c)
            }
        });
    }

    /// Runs the chunk protocol for chunk `index` of table `t`: its rows, normalised to its
    /// HIGH (the table's state at HIGH within the chunk's range).
    pub async fn read_chunk(&self, t: usize, index: usize) -> SourceResult<RecordBatch> {
        self.status(t, index, |c| {
            c.state = ChunkState::Running;
            c.reads += 1;
        });
        let table = &self.tables[t];
        let schema = &table.schema;
        let range = &table.ranges[index];
        let mut conn = self.chunk_connection().await?;
        let (predicate, params) = match table.key {
            Some(key) => range.predicate(&schema.columns[key].name),
            None => (None, vec![]),
        };
        let reader = match conn.rows {
            // A keyless table's locked read stays on the driver's connection (with HIGH).
            Some(_) if self.consistent || !table.codec.keyless() => RowReader::Own,
            _ => RowReader::Driver,
        };
        let ChunkRead {
            low,
            high,
            scanned,
            visibility,
        } = if self.consistent {
            self.read_consistent(&mut conn, t, index, predicate.as_deref(), params)
                .await?
        } else if table.codec.keyless() {
            self.read_locked(&mut conn.sql, t, index, predicate.as_deref(), params)
                .await?
        } else {
            let feed = self.feed().await?;
            self.read_watermarked(&mut conn, feed, t, index, predicate.as_deref(), params)
                .await?
        };
        let (rows, window_changes) = if low == high {
            let rows = concat_batches(&schema.arrow, &scanned)
                .map_err(|e| SourceError::arrow(format!("chunk of {}", schema.id), e))?;
            (rows, 0)
        } else {
            let feed = self.feed().await?;
            let window = feed.window(&low, &high).await;
            feed.release(&low);
            // A table without a chunk key is read as one chunk covering every value.
            normalize(
                &mut conn.sql,
                &table.codec,
                table.check.as_ref(),
                range,
                &scanned,
                &window?,
            )
            .await?
        };
        let n = rows.num_rows();
        self.status(t, index, |c| {
            c.state = ChunkState::Done;
            c.rows = n;
            c.reader = Some(reader);
            c.visibility = Some(visibility);
            c.low = Some(low.clone());
            c.high = Some(high.clone());
        });
        tracing::debug!(table = %schema.id, chunk = index, range = %range.describe(), %low, %high, rows = n, window_changes, "chunk done");
        // Only a chunk that ended cleanly gives its connection back: after an error its state
        // (an open transaction, a half-read result) is unknown, and it is dropped.
        self.idle.locked().push(conn);
        self.outcomes.locked().insert(
            (t, index),
            ChunkOutcome {
                low,
                high,
                window_changes,
            },
        );
        Ok(rows)
    }

    /// The HIGH of a finished chunk (for `EXPLAIN ANALYZE`); `None` while it runs.
    pub fn chunk_high(&self, t: usize, index: usize) -> Option<BinlogCoord> {
        let id = &self.tables[t].schema.id;
        self.progress
            .report()
            .chunks
            .iter()
            .find(|c| c.index == index && c.table == *id)
            .and_then(|c| c.high.clone())
    }

    async fn read_watermarked(
        &self,
        conn: &mut ChunkConnection,
        feed: &WindowFeed,
        t: usize,
        index: usize,
        predicate: Option<&str>,
        params: Vec<mysql_async::Value>,
    ) -> SourceResult<ChunkRead> {
        self.hook(HookPoint::BeforeLow, t, index).await;
        // A transaction is written to the binlog before InnoDB makes it visible, so the
        // server's position may already count a transaction this SELECT will not see. The
        // window therefore starts where the feed had read to before asking the server (at or
        // before its LOW): folding changes the SELECT already saw again is harmless (full images,
        // in order), missing one is not.
        let pin = feed.pin();
        let server_low = self.position(&mut conn.sql).await;
        let low = match server_low {
            Ok((server_low, _)) if pin.file.is_empty() => server_low,
            Ok(_) => pin.clone(),
            Err(e) => {
                feed.release(&pin);
                return Err(e);
            }
        };
        if low != pin {
            feed.hold(&low);
            feed.release(&pin);
        }
        self.hook(HookPoint::AfterLow, t, index).await;
        let (scanned, visibility) = match self.scan_visible(conn, t, predicate, params).await {
            Ok(read) => read,
            Err(e) => {
                feed.release(&low);
                return Err(e);
            }
        };
        self.hook(HookPoint::AfterSelect, t, index).await;
        self.hook(HookPoint::BeforeHigh, t, index).await;
        let high = match self.position(&mut conn.sql).await {
            Ok((high, _)) => high,
            Err(e) => {
                feed.release(&low);
                return Err(e);
            }
        };
        self.hook(HookPoint::AfterHigh, t, index).await;
        if low == high {
            feed.release(&low);
        }
        Ok(ChunkRead {
            low,
            high,
            scanned,
            visibility,
        })
    }

    /// The rows of a watermarked chunk, read once every transaction the server's binlog
    /// already holds that touched the range is visible.
    ///
    /// First as one locking read that never waits
    /// ([`nowait_share_lock`](super::select::nowait_share_lock)): when it gets every
    /// lock, no such transaction was still committing (each keeps its row locks until InnoDB
    /// shows it), so its rows, the newest committed ones, are the chunk, and the range was
    /// scanned once. Its shared locks end with the statement, before HIGH is asked for; a
    /// transaction that commits in between is in the window, which is folded in anyway. When
    /// it meets a lock (an application's transaction is writing the range), its rows are
    /// dropped, and the [`visibility_barrier`] (a locking read without rows, retried with a
    /// back-off) and a plain `SELECT` take over, so a busy range is not read again and again.
    async fn scan_visible(
        &self,
        conn: &mut ChunkConnection,
        t: usize,
        predicate: Option<&str>,
        params: Vec<mysql_async::Value>,
    ) -> SourceResult<(Vec<RecordBatch>, Visibility)> {
        let schema = &self.tables[t].schema;
        let limit = self.connect.read_timeout;
        let flavor = self.info.flavor;
        match conn
            .select(schema, predicate, &params, Some(flavor), limit)
            .await
        {
            Ok(scanned) => return Ok((scanned, Visibility::LockedRead)),
            Err(e) if e.server_code().is_some_and(is_lock_conflict) => {
                tracing::debug!(table = %schema.id, "the chunk's locking read met a lock; waiting with the barrier");
            }
            Err(e) => return Err(e),
        }
        let passed = visibility_barrier(
            &mut conn.sql,
            schema,
            flavor,
            predicate,
            params.clone(),
            limit,
        )
        .await?;
        let scanned = conn.select(schema, predicate, &params, None, limit).await?;
        let visibility = if passed {
            Visibility::Barrier
        } else {
            Visibility::BarrierGaveUp
        };
        Ok((scanned, visibility))
    }

    /// The locked read of a keyless table's chunk (see the module docs). The hooks after LOW
    /// run once the locks are gone, so a test's writes at those points cannot wait on them.
    async fn read_locked(
        &self,
        conn: &mut Conn,
        t: usize,
        index: usize,
        predicate: Option<&str>,
        params: Vec<mysql_async::Value>,
    ) -> SourceResult<ChunkRead> {
        let schema = &self.tables[t].schema;
        let ctx = |what: &str| {
            format!(
                "{what} (a locked read of {}, which has no primary key)",
                schema.id
            )
        };
        self.hook(HookPoint::BeforeLow, t, index).await;
        // The read never waits for a lock (so it cannot take part in a deadlock with the
        // application's transactions): on a conflict it lets go of everything and tries again.
        let mut retry = LockRetry::within(LOCKED_READ_BUDGET);
        let (high, scanned) = loop {
            self.run(conn, "START TRANSACTION", || {
                ctx("starting the transaction")
            })
            .await?;
            let read = async {
                let scanned = select_batches_locked(
                    conn,
                    schema,
                    self.info.flavor,
                    predicate,
                    params.clone(),
                    DEFAULT_BATCH_ROWS,
                    self.connect.read_timeout,
                )
                .await?;
                let (high, _) = self.position(conn).await?;
                Ok::<_, SourceError>((high, scanned))
            }
            .await;
            // Ends the transaction (and frees the locks) whatever happened.
            let ended = self
                .run(conn, "COMMIT", || ctx("ending the transaction"))
                .await;
            match read {
                Ok(done) => {
                    ended?;
                    break done;
                }
                Err(e) => {
                    if !retry.again(e.server_code()).await {
                        return Err(e);
                    }
                }
            }
        };
        for point in [
            HookPoint::AfterLow,
            HookPoint::AfterSelect,
            HookPoint::BeforeHigh,
            HookPoint::AfterHigh,
        ] {
            self.hook(point, t, index).await;
        }
        Ok(ChunkRead {
            low: high.clone(),
            high,
            scanned,
            visibility: Visibility::LockedRead,
        })
    }
}
