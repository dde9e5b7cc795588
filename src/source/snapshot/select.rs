//! The snapshot read path: `SELECT` results decoded into the same Arrow values as the binlog.
//!
//! # Invariant
//! Rows are read with the binary protocol (prepared statements), so floats, doubles and
//! temporal values arrive in their exact binary form rather than as server-formatted text, on
//! a connection whose session time zone is UTC (see `connect`), so `TIMESTAMP` columns arrive
//! as UTC instants exactly as the binlog stores them. Every value then goes through the
//! [`ColumnBuilder`] conversions the binlog decoder uses, which makes both paths agree value for
//! value (`tests/type_parity.rs`). The connection's character set is utf8mb4, so the server
//! converts text of every column character set to UTF-8 before it reaches us.
//!
//! Rows come either from `mysql_async` ([`SelectReader::push_row`]) or, for keyed chunks and
//! consistent snapshots, from our own connection (`source::mysql_client`), whose rows are read in
//! place and decoded by operations compiled per result (`columns`), which reach the same
//! values through the same shared conversions.
//!
//! The chunked, watermarked snapshot builds on [`SelectReader`]: it only adds the range
//! predicate and the LOW/HIGH protocol around it. Its locking reads (a keyed chunk's first
//! read, the visibility barrier, keyless chunks) never wait for a lock ([`nowait_share_lock`],
//! [`LockRetry`]), so the capture can never be in a deadlock with, and get InnoDB to abort, an
//! application's transaction.

use arrow::array::RecordBatch;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value};

use crate::change::kinds::Snapshot;
use crate::change::schema::{quote_ident, ColumnKind, Flavor, TableSchema};
use crate::source::connect::{bounded, while_progressing, DEFAULT_READ_TIMEOUT};
use crate::source::error::{SourceError, SourceResult};
use crate::source::mysql_client::{ValueError, WireValue};
use crate::source::types::{
    bit_value, finish_batch, parse_decimal_fast, parse_decimal_text, time_parts_to_micros,
    ColumnBuilder,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Rows per Arrow batch produced by a `SELECT`.
pub const DEFAULT_BATCH_ROWS: usize = 8192;

/// Decodes `SELECT` rows of one table into Arrow batches of its schema.
#[derive(Debug)]
pub struct SelectReader<'a> {
    schema: &'a TableSchema,
    builders: Vec<ColumnBuilder>,
    /// Whether each column's Arrow field takes NULL.
    nullable: Vec<bool>,
    rows: usize,
}

impl<'a> SelectReader<'a> {
    pub fn new(schema: &'a TableSchema, batch_rows: usize) -> Self {
        Self {
            schema,
            builders: schema
                .columns
                .iter()
                .map(|c| ColumnBuilder::new(&c.kind, batch_rows))
                .collect(),
            nullable: schema
                .arrow
                .fields()
                .iter()
                .map(|f| f.is_nullable())
                .collect(),
            rows: 0,
        }
    }

    /// The `SELECT` list: every column by name, in schema order.
    pub fn select_list(schema: &TableSchema) -> String {
        schema
            .columns
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Appends one result row read by `mysql_async`; a value that does not convert is an
    /// error naming the table, the column and the row's primary key.
    pub fn push_row(&mut self, row: mysql_async::Row) -> SourceResult<()> {
        let values = row.unwrap_raw();
        self.push_values(values.len(), || {
            values
                .iter()
                .map(|v| v.as_ref().map(WireValue::from).ok_or(ValueError::Missing))
        })
    }

    /// Appends one row read in place by our own connection through the general conversions:
    /// the reference the compiled operations of `columns` are tested against.
    #[cfg(test)]
    pub(super) fn push_binary(
        &mut self,
        row: &crate::source::mysql_client::BinaryRow<'_>,
    ) -> SourceResult<()> {
        self.push_values(row.len(), || row.values())
    }

    /// Appends the `count` values `values()` yields (asked again only to name a bad row).
    fn push_values<'v, I>(&mut self, count: usize, values: impl Fn() -> I) -> SourceResult<()>
    where
        I: Iterator<Item = Result<WireValue<'v>, ValueError>>,
    {
        if count != self.builders.len() {
            return Err(SourceError::Raced {
                context: format!("SELECT of {}", self.schema.id),
                detail: format!(
                    "it returned {count} columns, the schema read before has {}",
                    self.builders.len()
                ),
            });
        }
        // One builder and one nullability per schema column, and as many values (checked).
        for (((value, col), builder), &nullable) in values()
            .zip(&self.schema.columns)
            .zip(&mut self.builders)
            .zip(&self.nullable)
        {
            let appended = match value {
                Err(e) => Err(e.to_string()),
                Ok(WireValue::Null) if !nullable => Err("NULL in a NOT NULL column".to_string()),
                Ok(value) => append_value(&col.kind, value, builder),
            };
            if let Err(detail) = appended {
                return Err(SourceError::BadValue {
                    table: self.schema.id.to_string(),
                    column: col.name.clone(),
                    row: describe_key(self.schema, values(), self.rows),
                    detail,
                });
            }
        }
        self.rows += 1;
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Finishes the rows appended so far into a batch; the reader can go on.
    pub fn finish(&mut self) -> SourceResult<RecordBatch> {
        self.rows = 0;
        finish_batch(&self.schema.arrow, &mut self.builders).map_err(|e| SourceError::BadValue {
            table: self.schema.id.to_string(),
            column: e.column,
            row: "a batch of rows".into(),
            detail: e.detail,
        })
    }
}

/// Names a `SELECT` row for an error: its primary key values, or its ordinal in the batch.
pub(super) fn describe_key<'v>(
    schema: &TableSchema,
    values: impl Iterator<Item = Result<WireValue<'v>, ValueError>>,
    ordinal: usize,
) -> String {
    let values: Vec<Option<WireValue<'v>>> = values.map(Result::ok).collect();
    let key: Vec<String> = schema
        .primary_key
        .iter()
        .filter_map(|&k| {
            let value = (*values.get(k)?)?;
            Some(format!(
                "{}={}",
                schema.columns.get(k)?.name,
                value.to_value().as_sql(false)
            ))
        })
        .collect();
    if key.is_empty() {
        format!("row {ordinal} of the batch")
    } else {
        format!("the row with {}", key.join(", "))
    }
}

/// How long the visibility barrier keeps trying before it goes on (see [`visibility_barrier`]).
const BARRIER_BUDGET: Duration = Duration::from_secs(1);

/// The clause of a locking read that never waits for a lock: it fails at once instead.
///
/// A locking read that waits while it holds the shared locks of the rows it already read can
/// close a cycle with an application transaction (which holds one row of the range and wants
/// another the read holds), and InnoDB then aborts the transaction with fewer locks, usually
/// the application's. A read that never waits is never in a cycle: the capture backs off and
/// reads again instead, and applications only ever wait for it briefly.
pub fn nowait_share_lock(flavor: Flavor) -> &'static str {
    match flavor {
        // MySQL 8 takes NOWAIT only with FOR SHARE; MariaDB 10 knows only LOCK IN SHARE MODE.
        Flavor::MySql => " FOR SHARE NOWAIT",
        Flavor::MariaDb => " LOCK IN SHARE MODE NOWAIT",
    }
}

/// Whether `code` says a `NOWAIT` read met a lock (MariaDB reports a lock wait timeout, MySQL
/// `ER_LOCK_NOWAIT`), or that the read was chosen as a deadlock victim.
pub(super) fn is_lock_conflict(code: u16) -> bool {
    use crate::source::error::codes;
    matches!(
        code,
        codes::LOCK_WAIT_TIMEOUT | codes::LOCK_DEADLOCK | codes::LOCK_NOWAIT
    )
}

/// Retries of a `NOWAIT` locking read that met a lock: a back-off of 2 ms, doubling to at most
/// 50 ms, within a time budget.
#[derive(Debug)]
pub struct LockRetry {
    deadline: Instant,
    pause: Duration,
}

impl LockRetry {
    pub fn within(budget: Duration) -> Self {
        Self {
            deadline: Instant::now() + budget,
            pause: Duration::from_millis(2),
        }
    }

    /// Whether a read that failed with `code` (`None`: not a server error) is tried again;
    /// after the back-off when it is.
    pub async fn again(&mut self, code: Option<u16>) -> bool {
        if !code.is_some_and(is_lock_conflict) || Instant::now() >= self.deadline {
            return false;
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(Duration::from_millis(50));
        true
    }
}

/// Waits until every transaction that wrote rows of the range and is already in the binlog is
/// visible to a new read view.
///
/// A transaction is written to the binlog (and may be sent to replicas and counted by `SHOW
/// MASTER STATUS`) before InnoDB commits it; until then it keeps its row locks. Once a locking
/// read of the range gets every lock, every such transaction has committed and the chunk's
/// fresh `SELECT` sees it. The read never waits for a lock ([`nowait_share_lock`]): it is
/// repeated with a short back-off until it passes, and its shared locks last only for the
/// statement.
///
/// A transaction that is still open (not in the binlog, so not this barrier's concern) also
/// holds locks, possibly for long. The barrier therefore tries for at most a second and then
/// goes on: a transaction already in the binlog finishes its commit within milliseconds, so
/// after that it is visible too. Returns whether the barrier passed within that time. Each
/// read waits at most `limit` for its answer (see `connect`).
pub async fn visibility_barrier(
    conn: &mut Conn,
    schema: &TableSchema,
    flavor: Flavor,
    predicate: Option<&str>,
    params: Vec<Value>,
    limit: Duration,
) -> SourceResult<bool> {
    let ctx = || {
        format!(
            "waiting for commits to {} to become visible (a locking read of the chunk)",
            schema.id
        )
    };
    let mut sql = format!("SELECT COUNT(*) FROM {}", schema.id.quoted());
    if let Some(p) = predicate {
        sql.push_str(" WHERE ");
        sql.push_str(p);
    }
    sql.push_str(nowait_share_lock(flavor));
    let mut retry = LockRetry::within(BARRIER_BUDGET);
    loop {
        let read = conn.exec_drop(
            sql.as_str(),
            mysql_async::Params::Positional(params.clone()),
        );
        let answer = match tokio::time::timeout(limit, read).await {
            Ok(answer) => answer,
            Err(_) => {
                return Err(SourceError::ReadTimeout {
                    context: ctx(),
                    after: limit,
                })
            }
        };
        match answer {
            Ok(()) => return Ok(true),
            Err(mysql_async::Error::Server(e)) if is_lock_conflict(e.code) => {
                if !retry.again(Some(e.code)).await {
                    tracing::debug!(table = %schema.id, code = e.code, "visibility barrier gave up on a long-open transaction");
                    return Ok(false);
                }
            }
            Err(e) => return Err(SourceError::from_mysql(ctx(), e)),
        }
    }
}

/// Reads `SELECT <all columns> FROM table [WHERE predicate]` into batches of `batch_rows`,
/// waiting at most [`DEFAULT_READ_TIMEOUT`] for each answer.
pub async fn select_batches(
    conn: &mut Conn,
    schema: &TableSchema,
    predicate: Option<&str>,
    params: Vec<Value>,
    batch_rows: usize,
) -> SourceResult<Vec<RecordBatch>> {
    select_batches_within(
        conn,
        schema,
        predicate,
        params,
        batch_rows,
        DEFAULT_READ_TIMEOUT,
    )
    .await
}

/// [`select_batches`] waiting at most `limit` for the result and for each of its rows.
pub async fn select_batches_within(
    conn: &mut Conn,
    schema: &TableSchema,
    predicate: Option<&str>,
    params: Vec<Value>,
    batch_rows: usize,
    limit: Duration,
) -> SourceResult<Vec<RecordBatch>> {
    select(conn, schema, predicate, params, batch_rows, None, limit).await
}

/// [`select_batches`] as a locking read (`LOCK IN SHARE MODE`): inside a transaction it reads
/// the newest committed rows and keeps them (and, under REPEATABLE READ, the gaps between
/// them) from changing until the transaction ends.
/// The read fails at once with a lock conflict ([`is_lock_conflict`]) rather than wait for a
/// row another transaction holds (see [`nowait_share_lock`]).
pub async fn select_batches_locked(
    conn: &mut Conn,
    schema: &TableSchema,
    flavor: Flavor,
    predicate: Option<&str>,
    params: Vec<Value>,
    batch_rows: usize,
    limit: Duration,
) -> SourceResult<Vec<RecordBatch>> {
    let lock = nowait_share_lock(flavor);
    select(
        conn,
        schema,
        predicate,
        params,
        batch_rows,
        Some(lock),
        limit,
    )
    .await
}

/// `SELECT <all columns> FROM table [WHERE predicate][lock]`.
pub(super) fn select_sql(
    schema: &TableSchema,
    predicate: Option<&str>,
    lock: Option<&str>,
) -> String {
    let mut sql = format!(
        "SELECT {} FROM {}",
        SelectReader::select_list(schema),
        schema.id.quoted()
    );
    if let Some(p) = predicate {
        sql.push_str(" WHERE ");
        sql.push_str(p);
    }
    if let Some(lock) = lock {
        sql.push_str(lock);
    }
    sql
}

async fn select(
    conn: &mut Conn,
    schema: &TableSchema,
    predicate: Option<&str>,
    params: Vec<Value>,
    batch_rows: usize,
    lock: Option<&str>,
    limit: Duration,
) -> SourceResult<Vec<RecordBatch>> {
    let sql = select_sql(schema, predicate, lock);
    let ctx = || format!("reading {}", schema.id);
    let mysql = |e| SourceError::from_mysql(ctx(), e);
    let run = async {
        conn.exec_iter(sql.as_str(), mysql_async::Params::Positional(params))
            .await
            .map_err(mysql)
    };
    let mut result = bounded(limit, ctx, run).await?;
    let mut reader = SelectReader::new(schema, batch_rows);
    let mut batches = Vec::new();
    let mut failed = None;
    let received = AtomicU64::new(0);
    // Rows are taken by a callback rather than a stream of rows: the stream allocates a future
    // for every row, and bounding each row's wait takes a timer per row. The limit is still per
    // row (a large chunk may take longer than it as a whole): see [`while_progressing`].
    let read = result.for_each(|row| {
        received.fetch_add(1, Ordering::Relaxed);
        if failed.is_some() {
            return;
        }
        let pushed = reader.push_row(row).and_then(|()| {
            if reader.len() >= batch_rows {
                batches.push(reader.finish()?);
            }
            Ok(())
        });
        if let Err(e) = pushed {
            failed = Some(e);
        }
    });
    while_progressing(limit, ctx, &received, async { read.await.map_err(mysql) }).await?;
    if let Some(e) = failed {
        return Err(e);
    }
    if !reader.is_empty() || batches.is_empty() {
        batches.push(reader.finish()?);
    }
    Ok(batches)
}

fn bytes_of(value: WireValue<'_>) -> Result<&[u8], String> {
    match value {
        WireValue::Bytes(b) => Ok(b),
        other => Err(format!("expected bytes, got {other:?}")),
    }
}

/// Appends one non-NULL value (NULLs are appended here too, for nullable fields).
pub(super) fn append_value(
    kind: &ColumnKind,
    value: WireValue<'_>,
    b: &mut ColumnBuilder,
) -> Result<(), String> {
    if value == WireValue::Null {
        b.append_null();
        return Ok(());
    }
    match kind {
        ColumnKind::Int { .. } => append_int(value, b),
        ColumnKind::Decimal { scale, .. } => {
            let bytes = bytes_of(value)?;
            match parse_decimal_fast(bytes, *scale) {
                Some(unscaled) => b.append_decimal128(unscaled),
                None => {
                    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
                    b.append_decimal(parse_decimal_text(text, *scale)?)
                }
            }
        }
        ColumnKind::DateTime { .. } | ColumnKind::Timestamp { .. } => match value {
            WireValue::Date(y, mo, d, h, mi, s, us) => b.append_datetime(
                y as u32, mo as u32, d as u32, h as u32, mi as u32, s as u32, us,
            ),
            other => Err(format!("datetime column got {other:?}")),
        },
        ColumnKind::Time { .. } => match value {
            WireValue::Time(neg, days, h, m, s, us) => {
                b.append_time_micros(time_parts_to_micros(neg, days, h, m, s, us)?)
            }
            other => Err(format!("time column got {other:?}")),
        },
        // The server converts every text column to the connection's utf8mb4.
        ColumnKind::Text { .. } | ColumnKind::Enum { .. } | ColumnKind::Set { .. } => {
            b.append_str(std::str::from_utf8(bytes_of(value)?).map_err(|e| e.to_string())?)
        }
        ColumnKind::Binary { pad_to } => b.append_bytes(bytes_of(value)?, *pad_to),
        ColumnKind::Bit { .. } => match value {
            WireValue::Bytes(bytes) => b.append_u64(bit_value(bytes)?),
            WireValue::UInt(v) => b.append_u64(v),
            WireValue::Int(v) => {
                b.append_u64(u64::try_from(v).map_err(|_| format!("negative BIT value {v}"))?)
            }
            other => Err(format!("bit column got {other:?}")),
        },
        ColumnKind::Simple(simple) => match simple.row().snapshot {
            Snapshot::Int => append_int(value, b),
            Snapshot::Float32 => match value {
                WireValue::Float(v) => b.append_f32(v),
                WireValue::Double(v) => b.append_f32(v as f32),
                other => Err(format!("float column got {other:?}")),
            },
            Snapshot::Float64 => match value {
                WireValue::Double(v) => b.append_f64(v),
                WireValue::Float(v) => b.append_f64(v as f64),
                other => Err(format!("double column got {other:?}")),
            },
            Snapshot::Date => match value {
                WireValue::Date(y, m, d, ..) => b.append_date(y as u32, m as u32, d as u32),
                other => Err(format!("date column got {other:?}")),
            },
            // The server converts text to the connection's utf8mb4.
            Snapshot::Text => {
                b.append_str(std::str::from_utf8(bytes_of(value)?).map_err(|e| e.to_string())?)
            }
            Snapshot::Bytes => b.append_bytes(bytes_of(value)?, None),
        },
    }
}

/// An integer value (or its text) onto an integer column.
fn append_int(value: WireValue<'_>, b: &mut ColumnBuilder) -> Result<(), String> {
    match value {
        WireValue::Int(v) => b.append_i64(v),
        WireValue::UInt(v) => b.append_u64(v),
        WireValue::Bytes(t) => {
            let t = String::from_utf8_lossy(t);
            match t.parse::<i64>() {
                Ok(v) => b.append_i64(v),
                Err(_) => b.append_u64(t.parse().map_err(|_| format!("bad integer {t:?}"))?),
            }
        }
        other => Err(format!("integer column got {other:?}")),
    }
}
