//! The binlog window of a chunk, and folding it into the chunk's rows.
//!
//! # One reader for all windows
//! Every binlog dump connection needs its own server id and re-reads the log, so the snapshot
//! does not open one per chunk. A single [`WindowFeed`] reads the binlog from the first LOW and
//! keeps the transactions that in-flight chunks may need: those starting at or after the
//! smallest LOW of a running chunk. A chunk pins the feed's position before it asks the server
//! for LOW, because the feed may read past that LOW before the chunk holds it. A chunk's window `(LOW, HIGH]` is every transaction that
//! starts at or after LOW and before HIGH (watermarks sit on transaction boundaries), and is
//! complete once the feed has read up to HIGH.
//!
//! # Normalisation
//! [`normalize`] folds the window into the scanned rows, keyed by primary key, in binlog order:
//! for each row change, remove the before image's key, then put the after image if its chunk key
//! is inside the chunk's range. With full row images, a fresh read view and a complete, ordered
//! window, the result is the table's state at HIGH restricted to the range (seed 002:
//! `Normalize(Q_i, E_i(L_i, H_i]) = S_i(H_i)`). Range membership of a window row is decided like
//! the chunk's `SELECT` decides it: integers exactly in Rust, every other type by the server
//! under the column's own type and collation.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::DataType;
use arrow::row::OwnedRow;
use futures::FutureExt;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value};
use tokio::sync::watch;

use crate::change::keys::RowCodec;
use crate::change::kinds::ChunkKey;
use crate::change::position::BinlogCoord;
use crate::change::schema::{ColumnKind, ColumnSpec, TableId, TableSchema};
use crate::change::{ChangeBatch, SourceTransaction};
use crate::locks::Locked;
use crate::source::binlog::BinlogReader;
use crate::source::connect::bounded;
use crate::source::error::{SourceError, SourceResult};
use crate::source::snapshot::chunks::ChunkRange;
use crate::source::types::arrow_to_mysql;

/// How far the feed has read, or why it stopped.
#[derive(Debug, Clone)]
enum FeedStatus {
    Reading(Option<BinlogCoord>),
    /// Kept whole, so the chunks fail with its kind: a transient one restarts the snapshot.
    Failed(Arc<SourceError>),
    /// The reader's task panicked: a bug, not a server problem.
    Panicked(String),
}

impl FeedStatus {
    /// The error a chunk gets from a feed that stopped.
    fn error(&self) -> Option<SourceError> {
        match self {
            FeedStatus::Reading(_) => None,
            FeedStatus::Failed(e) => Some(SourceError::WindowReader(Arc::clone(e))),
            FeedStatus::Panicked(e) => Some(SourceError::Internal(format!(
                "the snapshot's window reader failed unexpectedly ({e})"
            ))),
        }
    }
}

#[derive(Debug, Default)]
struct Buffer {
    txs: VecDeque<Arc<SourceTransaction>>,
    /// LOW watermarks of running chunks (with multiplicity).
    lows: BTreeMap<BinlogCoord, usize>,
}

/// The shared window reader; see the module docs. Dropping it stops the reader.
#[derive(Debug)]
pub struct WindowFeed {
    buffer: Arc<Mutex<Buffer>>,
    status: watch::Receiver<FeedStatus>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WindowFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WindowFeed {
    /// Starts reading with `reader`, which must start at or before the first chunk's LOW.
    pub fn start(mut reader: BinlogReader) -> Self {
        let buffer = Arc::new(Mutex::new(Buffer::default()));
        let (tx, status) = watch::channel(FeedStatus::Reading(None));
        let shared = Arc::clone(&buffer);
        let tx = Arc::new(tx);
        let feed = Arc::clone(&tx);
        let read = async move {
            loop {
                crate::failpoint::hit("window.feed");
                match reader.step().await {
                    Ok(Some(t)) => shared.locked().txs.push_back(Arc::new(t)),
                    Ok(None) => {}
                    Err(e) => {
                        let _ = tx.send(FeedStatus::Failed(Arc::new(e)));
                        return;
                    }
                }
                if let Some(reached) = reader.idle_position() {
                    let mut buf = shared.locked();
                    // Nothing before the smallest running LOW (or, with none running, before
                    // what has been read: a later LOW is at or after it) is needed any more.
                    let keep_from = buf
                        .lows
                        .keys()
                        .next()
                        .cloned()
                        .unwrap_or_else(|| reached.clone());
                    while buf.txs.front().is_some_and(|t| t.start < keep_from) {
                        buf.txs.pop_front();
                    }
                    drop(buf);
                    tx.send_if_modified(|s| match s {
                        FeedStatus::Reading(r) if r.as_ref() != Some(&reached) => {
                            *r = Some(reached);
                            true
                        }
                        _ => false,
                    });
                }
            }
        };
        // A panic in the reader fails the feed (and so the chunks waiting on it) instead of
        // leaving them waiting on a window that will never come.
        let task = tokio::spawn(async move {
            if let Err(panic) = std::panic::AssertUnwindSafe(read).catch_unwind().await {
                let message = crate::failpoint::panic_message(panic.as_ref());
                tracing::error!(%message, "the snapshot's window reader panicked");
                let _ = feed.send(FeedStatus::Panicked(message));
            }
        });
        Self {
            buffer,
            status,
            task,
        }
    }

    /// Pins what the feed has read so far, before a chunk asks the server for its LOW: the
    /// reader may pass that LOW before the chunk can [`WindowFeed::hold`] it, and nothing from
    /// here on may be trimmed meanwhile. The server's LOW is at or after this point. Release
    /// the returned coordinate once LOW is held.
    pub fn pin(&self) -> BinlogCoord {
        let at = match &*self.status.borrow() {
            FeedStatus::Reading(Some(reached)) => reached.clone(),
            // Nothing read yet: keep everything.
            _ => BinlogCoord::new("", 0),
        };
        self.hold(&at);
        at
    }

    /// Marks a chunk with this LOW as running, so its window is kept.
    pub fn hold(&self, low: &BinlogCoord) {
        *self.buffer.locked().lows.entry(low.clone()).or_default() += 1;
    }

    /// Releases a LOW taken with [`WindowFeed::hold`].
    pub fn release(&self, low: &BinlogCoord) {
        let mut buf = self.buffer.locked();
        if let Some(n) = buf.lows.get_mut(low) {
            *n -= 1;
            if *n == 0 {
                buf.lows.remove(low);
            }
        }
    }

    /// Fails once the feed has failed, even when no chunk needs a window from it any more: a
    /// reader that stopped is a snapshot that cannot be trusted to go on.
    pub fn check(&self) -> SourceResult<()> {
        match self.status.borrow().error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The transactions of the window `(low, high]`, once the feed has read up to `high`.
    pub async fn window(
        &self,
        low: &BinlogCoord,
        high: &BinlogCoord,
    ) -> SourceResult<Vec<Arc<SourceTransaction>>> {
        let mut status = self.status.clone();
        let reached = status
            .wait_for(|s| match s {
                FeedStatus::Reading(Some(r)) => r >= high,
                FeedStatus::Reading(None) => false,
                FeedStatus::Failed(_) | FeedStatus::Panicked(_) => true,
            })
            .await
            .map_err(|_| SourceError::Internal("the snapshot's binlog reader stopped".into()))?
            .clone();
        if let Some(e) = reached.error() {
            return Err(e);
        }
        let buf = self.buffer.locked();
        Ok(buf
            .txs
            .iter()
            .filter(|t| t.start >= *low && t.start < *high)
            .cloned()
            .collect())
    }
}

/// Decides whether chunk-key values are inside a chunk's range, as the server would.
#[derive(Debug)]
pub struct RangeCheck {
    column: usize,
    /// The longest wait for the server's answer to one comparison.
    limit: std::time::Duration,
    /// The SQL expression that turns a parameter into a value of the column's type and
    /// collation; `None` for integers, compared in Rust.
    cast: Option<String>,
}

/// A definite error: `col`'s order on the server is not the order of its values.
fn not_a_chunk_key(schema: &TableSchema, col: &ColumnSpec) -> SourceError {
    SourceError::Config(format!(
        "column {} of {} ({}) cannot be a chunk key: its order is not a value order",
        col.name,
        schema.id,
        col.kind.mysql_type()
    ))
}

impl RangeCheck {
    pub async fn new(
        conn: &mut Conn,
        schema: &TableSchema,
        column: usize,
        limit: std::time::Duration,
    ) -> SourceResult<Self> {
        let col = &schema.columns[column];
        let cast = match &col.kind {
            ColumnKind::Int { .. } => None,
            ColumnKind::Decimal { precision, scale } => {
                Some(format!("CAST(? AS DECIMAL({precision},{scale}))"))
            }
            ColumnKind::DateTime { .. } | ColumnKind::Timestamp { .. } => {
                Some("CAST(? AS DATETIME(6))".to_string())
            }
            ColumnKind::Time { .. } => Some("CAST(? AS TIME(6))".to_string()),
            ColumnKind::Binary { .. } => Some("CAST(? AS BINARY)".to_string()),
            ColumnKind::Text { .. } => {
                let ctx = || "reading the chunk key's collation".to_string();
                let read = async {
                    conn.exec_first(
                        "SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS \
                         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?",
                        (&schema.id.db, &schema.id.table, &col.name),
                    )
                    .await
                    .map_err(|e| SourceError::from_mysql(ctx(), e))
                };
                let row: Option<(String, String)> = bounded(limit, ctx, read).await?;
                let (charset, collation) =
                    row.ok_or_else(|| SourceError::NoSuchTable(schema.id.to_string()))?;
                Some(format!("CONVERT(? USING {charset}) COLLATE {collation}"))
            }
            ColumnKind::Simple(simple) => match simple.row().chunk_key {
                ChunkKey::Integer => None,
                ChunkKey::Cast(cast) => Some(cast.to_string()),
                ChunkKey::Refused => return Err(not_a_chunk_key(schema, col)),
            },
            ColumnKind::Enum { .. } | ColumnKind::Set { .. } | ColumnKind::Bit { .. } => {
                return Err(not_a_chunk_key(schema, col))
            }
        };
        Ok(Self {
            column,
            limit,
            cast,
        })
    }

    /// Whether the chunk key of `row` in `batch` is in `range` (NULL keys are in the first chunk).
    async fn contains(
        &self,
        conn: &mut Conn,
        range: &ChunkRange,
        batch: &RecordBatch,
        row: usize,
    ) -> SourceResult<bool> {
        let array = batch.column(self.column);
        if array.is_null(row) {
            return Ok(range.start.is_none());
        }
        match &self.cast {
            None => {
                let v = int_at(array.as_ref(), row);
                let bound = |b: &Option<Value>| b.as_ref().map(value_i128);
                let above = bound(&range.start).is_none_or(|s| s.is_some_and(|s| v >= s));
                let below = bound(&range.end).is_none_or(|e| e.is_some_and(|e| v < e));
                Ok(above && below)
            }
            Some(cast) => {
                let value = arrow_to_mysql(array.as_ref(), row);
                let mut conds = Vec::new();
                let mut params = Vec::new();
                if let Some(s) = &range.start {
                    conds.push(format!("{cast} >= {cast}"));
                    params.extend([value.clone(), s.clone()]);
                }
                if let Some(e) = &range.end {
                    conds.push(format!("{cast} < {cast}"));
                    params.extend([value.clone(), e.clone()]);
                }
                if conds.is_empty() {
                    return Ok(true);
                }
                let ctx = || "checking a window row's chunk".to_string();
                let read = async {
                    conn.exec_first(format!("SELECT {}", conds.join(" AND ")), params)
                        .await
                        .map_err(|e| SourceError::from_mysql(ctx(), e))
                };
                let inside: Option<Option<i64>> = bounded(self.limit, ctx, read).await?;
                Ok(inside.flatten() == Some(1))
            }
        }
    }
}

fn int_at(array: &dyn Array, row: usize) -> i128 {
    use arrow::datatypes as t;
    match array.data_type() {
        DataType::Int8 => array.as_primitive::<t::Int8Type>().value(row) as i128,
        DataType::Int16 => array.as_primitive::<t::Int16Type>().value(row) as i128,
        DataType::Int32 => array.as_primitive::<t::Int32Type>().value(row) as i128,
        DataType::Int64 => array.as_primitive::<t::Int64Type>().value(row) as i128,
        DataType::UInt8 => array.as_primitive::<t::UInt8Type>().value(row) as i128,
        DataType::UInt16 => array.as_primitive::<t::UInt16Type>().value(row) as i128,
        DataType::UInt32 => array.as_primitive::<t::UInt32Type>().value(row) as i128,
        DataType::UInt64 => array.as_primitive::<t::UInt64Type>().value(row) as i128,
        other => unreachable!("RangeCheck compares only integer columns in Rust, got {other}"),
    }
}

fn value_i128(v: &Value) -> Option<i128> {
    match v {
        Value::Int(i) => Some(*i as i128),
        Value::UInt(u) => Some(*u as i128),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// Folds `window` into the rows a chunk's `SELECT` returned; see the module docs. `check` is
/// `None` when the chunk covers every value (a table read in one chunk). Returns the
/// chunk's rows at HIGH (in primary-key order) and the number of window row changes applied.
pub async fn normalize(
    conn: &mut Conn,
    codec: &RowCodec,
    check: Option<&RangeCheck>,
    range: &ChunkRange,
    scanned: &[RecordBatch],
    window: &[Arc<SourceTransaction>],
) -> SourceResult<(RecordBatch, usize)> {
    let table: &TableId = &codec.schema().id;
    let arrow_err = |e: arrow::error::ArrowError| {
        SourceError::arrow(format!("normalising a chunk of {table}"), e)
    };
    // Collected first: an iterator of closures held across the range checks' awaits would
    // make this future borrow in a way `tokio::spawn` cannot take.
    let mut changes: Vec<(&SourceTransaction, &ChangeBatch)> = Vec::new();
    for tx in window {
        for change in &tx.changes {
            if change.table.id == *table {
                changes.push((tx, change));
            }
        }
    }
    if let Some((tx, _)) = changes
        .iter()
        .find(|(_, c)| c.table.columns != codec.schema().columns)
    {
        return Err(SourceError::SchemaChangedDuringSnapshot {
            table: table.to_string(),
            at: tx.start.clone(),
        });
    }
    // A row that cannot be keyed (a zero date in the key) has no place in the fold. The chunk
    // is handed on unfolded with that row in it: whoever applies it finds the row by the same
    // check and stops this table alone, instead of the whole snapshot failing here.
    let images = changes
        .iter()
        .flat_map(|(_, c)| c.before.iter().chain(c.after.iter()));
    if let Some(unkeyable) = scanned
        .iter()
        .chain(images)
        .find(|b| codec.check_keys(b).is_err())
    {
        let from_window = !scanned.iter().any(|b| std::ptr::eq(b, unkeyable));
        let held = scanned.iter().chain(from_window.then_some(unkeyable));
        let rows =
            arrow::compute::concat_batches(&codec.schema().arrow, held).map_err(arrow_err)?;
        return Ok((rows, 0));
    }
    // key → (full row, copies): copies only exceed 1 for keyless tables.
    let mut rows: BTreeMap<OwnedRow, (OwnedRow, u32)> = BTreeMap::new();
    for batch in scanned {
        let (keys, full) = codec.encode(batch).map_err(arrow_err)?;
        for (k, r) in keys.iter().zip(full.iter()) {
            rows.entry(k.owned()).or_insert_with(|| (r.owned(), 0)).1 += 1;
        }
    }
    let encode = |image: &Option<RecordBatch>| {
        image
            .as_ref()
            .map(|b| codec.encode(b))
            .transpose()
            .map_err(arrow_err)
    };
    let mut applied = 0;
    for (_, change) in changes {
        let before = encode(&change.before)?;
        let after = encode(&change.after)?;
        for i in 0..change.num_rows() {
            if let Some((keys, _)) = &before {
                let key = keys.row(i).owned();
                if let Some(entry) = rows.get_mut(&key) {
                    entry.1 -= 1;
                    if entry.1 == 0 {
                        rows.remove(&key);
                    }
                }
            }
            if let (Some((keys, full)), Some(batch)) = (&after, &change.after) {
                let inside = match check {
                    Some(check) => check.contains(conn, range, batch, i).await?,
                    None => true,
                };
                if inside {
                    let entry = rows
                        .entry(keys.row(i).owned())
                        .or_insert_with(|| (full.row(i).owned(), 0));
                    entry.0 = full.row(i).owned();
                    entry.1 = if codec.keyless() { entry.1 + 1 } else { 1 };
                }
            }
            applied += 1;
        }
    }
    let out: Vec<&OwnedRow> = rows
        .values()
        .flat_map(|(r, n)| std::iter::repeat_n(r, *n as usize))
        .collect();
    Ok((codec.decode(out).map_err(arrow_err)?, applied))
}
