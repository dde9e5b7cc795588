//! Splitting a table into chunks of its chunk key.
//!
//! # Invariants
//! * Chunks are half-open ranges `[start, end)` of one column, the first unbounded below (and
//!   holding the rows whose chunk key is NULL), the last unbounded above; together they cover
//!   every possible value exactly once, so every row is in exactly one chunk at any moment.
//! * Boundaries are values the server returned and are compared only by the server (they go
//!   back as parameters of `WHERE key >= ? AND key < ?`), so string collations, trailing spaces
//!   and case-insensitive equality are the server's, never Rust's.
//! * The chunk size is a target: dense integer keys are cut in even steps sized from the row
//!   estimate; anything else is cut at every `chunk_size`-th value in index order, skipping
//!   past runs of equal values so a skewed key never yields an empty or endless chunk.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value};

use arrow::array::RecordBatch;

use crate::change::kinds::ChunkKey;
use crate::change::position::BinlogCoord;
use crate::change::schema::{quote_ident, ColumnKind, TableSchema};
use crate::source::connect::bounded;
use crate::source::error::{SourceError, SourceResult};

/// Default target rows per chunk.
pub const DEFAULT_CHUNK_SIZE: usize = 8096;

/// Keys whose value span is at most this many times the row count are cut in even steps.
const DENSE_FACTOR: f64 = 2.0;

/// A half-open range of the chunk key; `None` is unbounded.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkRange {
    pub start: Option<Value>,
    pub end: Option<Value>,
}

impl ChunkRange {
    pub const ALL: ChunkRange = ChunkRange {
        start: None,
        end: None,
    };

    /// The `WHERE` predicate selecting this range of `column`, with its parameters.
    pub fn predicate(&self, column: &str) -> (Option<String>, Vec<Value>) {
        let c = quote_ident(column);
        match (&self.start, &self.end) {
            (None, None) => (None, vec![]),
            (None, Some(e)) => (Some(format!("({c} < ? OR {c} IS NULL)")), vec![e.clone()]),
            (Some(s), None) => (Some(format!("{c} >= ?")), vec![s.clone()]),
            (Some(s), Some(e)) => (
                Some(format!("{c} >= ? AND {c} < ?")),
                vec![s.clone(), e.clone()],
            ),
        }
    }

    /// `[start, end)` as text, for status and `EXPLAIN`.
    pub fn describe(&self) -> String {
        let show = |v: &Option<Value>, unbounded: &str| match v {
            None => unbounded.to_string(),
            Some(v) => v.as_sql(false),
        };
        let open = if self.start.is_some() { "[" } else { "(" };
        format!(
            "{open}{}, {})",
            show(&self.start, "-inf"),
            show(&self.end, "+inf")
        )
    }
}

/// Whether a column kind is an integer that can be cut in even arithmetic steps.
fn integer_key(kind: &ColumnKind) -> bool {
    match kind {
        ColumnKind::Int { .. } => true,
        ColumnKind::Simple(simple) => simple.row().chunk_key == ChunkKey::Integer,
        _ => false,
    }
}

fn as_i128(v: &Value) -> Option<i128> {
    match v {
        Value::Int(i) => Some(*i as i128),
        Value::UInt(u) => Some(*u as i128),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn int_value(v: i128) -> Value {
    if v < 0 {
        Value::Int(v as i64)
    } else {
        Value::UInt(v as u64)
    }
}

/// The server's estimate of the rows of `schema` (`information_schema.TABLES.TABLE_ROWS`:
/// for InnoDB a sample, which can be off either way); `None` when it has none.
pub async fn estimate_rows(
    conn: &mut Conn,
    schema: &TableSchema,
    limit: Duration,
) -> SourceResult<Option<u64>> {
    let estimate: Option<Option<u64>> = first(
        conn,
        "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?".into(),
        (&schema.id.db, &schema.id.table),
        limit,
        || format!("estimating the rows of {}", schema.id),
    )
    .await?;
    Ok(estimate.flatten())
}

/// Plans the chunks of `schema` on column `key` with about `chunk_size` rows each, the table
/// holding about `estimate` rows ([`estimate_rows`]).
/// Each boundary query waits at most `limit` for its answer (see `connect`).
pub async fn plan_chunks(
    conn: &mut Conn,
    schema: &TableSchema,
    key: usize,
    chunk_size: usize,
    estimate: Option<u64>,
    limit: Duration,
) -> SourceResult<Vec<ChunkRange>> {
    let chunk_size = chunk_size.max(1);
    let col = quote_ident(&schema.columns[key].name);
    let table = schema.id.quoted();
    let ctx = || format!("planning chunks of {}", schema.id);
    let bounds: Option<(Value, Value)> = first(
        conn,
        format!("SELECT MIN({col}), MAX({col}) FROM {table}"),
        (),
        limit,
        ctx,
    )
    .await?;
    let Some((min, max)) = bounds else {
        return Ok(vec![ChunkRange::ALL]);
    };
    if min == Value::NULL {
        return Ok(vec![ChunkRange::ALL]);
    }
    let rows = estimate.unwrap_or(0).max(1) as f64;
    let mut boundaries = Vec::new();
    match (
        integer_key(&schema.columns[key].kind),
        as_i128(&min),
        as_i128(&max),
    ) {
        (true, Some(lo), Some(hi)) if ((hi - lo + 1) as f64) / rows <= DENSE_FACTOR => {
            let factor = ((hi - lo + 1) as f64 / rows).max(f64::MIN_POSITIVE);
            let step = ((chunk_size as f64 * factor).round() as i128).max(1);
            let mut b = lo + step;
            while b <= hi {
                boundaries.push(int_value(b));
                b += step;
            }
        }
        _ => {
            let mut cur = min;
            loop {
                let next: Option<Value> = first(
                    conn,
                    format!("SELECT {col} FROM {table} WHERE {col} >= ? ORDER BY {col} LIMIT 1 OFFSET ?"),
                    (cur.clone(), chunk_size as u64),
                    limit,
                    ctx,
                )
                .await?;
                let Some(mut next) = next else { break };
                let same = first::<u8, _>(
                    conn,
                    format!("SELECT 1 FROM {table} WHERE {col} = ? AND {col} = ? LIMIT 1"),
                    (cur.clone(), next.clone()),
                    limit,
                    || "comparing chunk boundaries".into(),
                )
                .await?
                .is_some();
                // Whether the server considers both equal under the column's type and
                // collation: `cur` is in the table, so a row matches both iff they are equal.
                if same {
                    // A run of more than chunk_size equal keys: end this chunk after the run.
                    let after: Option<Value> = first(
                        conn,
                        format!("SELECT MIN({col}) FROM {table} WHERE {col} > ?"),
                        (cur.clone(),),
                        limit,
                        ctx,
                    )
                    .await?;
                    match after {
                        Some(v) if v != Value::NULL => next = v,
                        _ => break,
                    }
                }
                boundaries.push(next.clone());
                cur = next;
            }
        }
    }
    let mut chunks = Vec::with_capacity(boundaries.len() + 1);
    let mut start = None;
    for b in boundaries {
        chunks.push(ChunkRange {
            start: start.take(),
            end: Some(b.clone()),
        });
        start = Some(b);
    }
    chunks.push(ChunkRange { start, end: None });
    Ok(chunks)
}

/// The first row of a query, waiting at most `limit` for it.
async fn first<T, P>(
    conn: &mut Conn,
    sql: String,
    params: P,
    limit: Duration,
    context: impl Fn() -> String,
) -> SourceResult<Option<T>>
where
    T: mysql_async::prelude::FromRow + Send + 'static,
    P: Into<mysql_async::Params> + Send,
{
    let read = async {
        conn.exec_first(sql, params)
            .await
            .map_err(|e| SourceError::from_mysql(context(), e))
    };
    bounded(limit, &context, read).await
}

/// One chunk, read and normalised: its rows are the table's state at `high` within `range`.
#[derive(Debug, Clone)]
pub struct SnapshotChunk {
    /// Index of the table in the list given to [`run_snapshot`](super::incremental::run_snapshot).
    pub table: usize,
    pub index: usize,
    pub range: ChunkRange,
    pub low: BinlogCoord,
    pub high: BinlogCoord,
    pub rows: RecordBatch,
    /// Row changes folded in from the window.
    pub window_changes: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_cover_nulls_and_open_ends() {
        let r = ChunkRange {
            start: None,
            end: Some(Value::Int(10)),
        };
        let (p, params) = r.predicate("k");
        assert_eq!(p.unwrap(), "(`k` < ? OR `k` IS NULL)");
        assert_eq!(params, vec![Value::Int(10)]);
        let r = ChunkRange {
            start: Some(Value::Int(10)),
            end: None,
        };
        assert_eq!(r.predicate("k").0.unwrap(), "`k` >= ?");
        assert_eq!(ChunkRange::ALL.predicate("k").0, None);
        assert_eq!(r.describe(), "[10, +inf)");
    }
}
