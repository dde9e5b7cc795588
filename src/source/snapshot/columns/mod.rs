//! Snapshot rows read in place, decoded by operations compiled once per result.
//!
//! [`select_batches_wire`] (and its locking form, [`select_batches_wire_locked`]) reads a chunk
//! on our own connection (`source::mysql_client`) through [`BinaryColumns`].
//!
//! When the first row of a result arrives, every column's binary encoding and its Arrow type
//! are paired into one [`Op`] that owns the column's builder, so a value is read off the
//! packet and appended in one step: no intermediate value, no second dispatch on the type.
//! Text is appended as bytes and checked as UTF-8 once per column of a batch, when the batch
//! is finished, as the binlog decoder does.
//!
//! # Invariant
//! Every value lands in Arrow exactly as [`SelectReader`](super::SelectReader) would put it
//! there: a fused operation exists only for a pairing whose conversion is a plain copy or one
//! of the shared functions of `source::types` that `ColumnBuilder` calls (dates, times,
//! decimals' precision, `BINARY(n)` padding); every other pairing (`YEAR`, `BIT`, a decimal
//! beyond 38 digits, an encoding the schema does not expect) takes the general conversion
//! itself. `tests/type_parity.rs` and `tests/wire_reads.rs` hold this reader to the driver's
//! batches, and its unit tests (`tests.rs`) to [`SelectReader`](super::SelectReader) over
//! every pairing.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, Date32Builder, Decimal128Builder, DurationMicrosecondBuilder,
    Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder, Int8Builder,
    RecordBatch, StringArray, TimestampMicrosecondBuilder, UInt16Builder, UInt32Builder,
    UInt64Builder, UInt8Builder,
};
use arrow::datatypes::DataType;
use mysql_async::Value;

use super::select::{append_value, describe_key, nowait_share_lock, select_sql};
use crate::change::kinds::Snapshot;
use crate::change::schema::{ColumnKind, Flavor, TableSchema};
use crate::source::error::{SourceError, SourceResult};
use crate::source::mysql_client::{BinaryRow, Encoding, RowCursor, WireConnection};
use crate::source::types::{
    batch_of, date_to_days, datetime_to_micros, decimal128_fits, padded, parse_decimal_fast,
    parse_decimal_text, time_parts_to_micros, ColumnBuilder,
};

/// One column's decoding, fused with the builder it fills.
#[derive(Debug)]
enum Op {
    Int8(Int8Builder),
    UInt8(UInt8Builder),
    Int16(Int16Builder),
    UInt16(UInt16Builder),
    /// `INT` and `MEDIUMINT` (sent as four bytes).
    Int32(Int32Builder),
    UInt32(UInt32Builder),
    Int64(Int64Builder),
    UInt64(UInt64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    /// `DECIMAL` of at most 38 digits, sent as text.
    Decimal {
        precision: u8,
        scale: u8,
        values: Decimal128Builder,
    },
    Date(Date32Builder),
    /// `DATETIME` (a wall clock) or `TIMESTAMP` (`utc`: sent in the session's zone, UTC, see
    /// `connect`), both sent as a date and a time of day.
    DateTime {
        utc: bool,
        values: TimestampMicrosecondBuilder,
    },
    Time(DurationMicrosecondBuilder),
    /// Text of any kind (the connection's character set is utf8mb4), checked when finished.
    Text(BinaryBuilder),
    Binary {
        pad_to: Option<usize>,
        values: BinaryBuilder,
    },
    /// Every other pairing: the value as `mysql_common` decodes it, then the general
    /// conversion.
    General {
        encoding: Encoding,
        builder: ColumnBuilder,
    },
}

impl Op {
    fn compile(encoding: Encoding, kind: &ColumnKind, rows: usize) -> Self {
        use ColumnKind as K;
        use Encoding as E;
        let text = || BinaryBuilder::with_capacity(rows, rows * 16);
        // How the table of kinds says a simple kind comes in the `SELECT`.
        let form = kind.simple().map(|k| k.row().snapshot);
        match (encoding, kind.data_type(), kind) {
            (E::Int8, DataType::Int8, _) => Op::Int8(Int8Builder::with_capacity(rows)),
            (E::UInt8, DataType::UInt8, _) => Op::UInt8(UInt8Builder::with_capacity(rows)),
            (E::Int16, DataType::Int16, K::Int { .. }) => {
                Op::Int16(Int16Builder::with_capacity(rows))
            }
            (E::UInt16, DataType::UInt16, _) => Op::UInt16(UInt16Builder::with_capacity(rows)),
            (E::Int32, DataType::Int32, _) => Op::Int32(Int32Builder::with_capacity(rows)),
            (E::UInt32, DataType::UInt32, K::Int { .. }) => {
                Op::UInt32(UInt32Builder::with_capacity(rows))
            }
            (E::Int64, DataType::Int64, _) => Op::Int64(Int64Builder::with_capacity(rows)),
            (E::UInt64, DataType::UInt64, K::Int { .. }) => {
                Op::UInt64(UInt64Builder::with_capacity(rows))
            }
            (E::Float, DataType::Float32, _) => Op::Float32(Float32Builder::with_capacity(rows)),
            (E::Double, DataType::Float64, _) => Op::Float64(Float64Builder::with_capacity(rows)),
            (E::Bytes, DataType::Decimal128(..), &K::Decimal { precision, scale }) => Op::Decimal {
                precision,
                scale,
                values: Decimal128Builder::with_capacity(rows),
            },
            (E::DateTime, DataType::Date32, _) if form == Some(Snapshot::Date) => {
                Op::Date(Date32Builder::with_capacity(rows))
            }
            (E::DateTime, DataType::Timestamp(..), K::DateTime { .. } | K::Timestamp { .. }) => {
                Op::DateTime {
                    utc: matches!(kind, K::Timestamp { .. }),
                    values: TimestampMicrosecondBuilder::with_capacity(rows),
                }
            }
            (E::Time, DataType::Duration(_), K::Time { .. }) => {
                Op::Time(DurationMicrosecondBuilder::with_capacity(rows))
            }
            (E::Bytes, DataType::Utf8, K::Text { .. } | K::Enum { .. } | K::Set { .. }) => {
                Op::Text(text())
            }
            (E::Bytes, DataType::Utf8, _) if form == Some(Snapshot::Text) => Op::Text(text()),
            (E::Bytes, DataType::Binary, &K::Binary { pad_to }) => Op::Binary {
                pad_to,
                values: text(),
            },
            (E::Bytes, DataType::Binary, _) if form == Some(Snapshot::Bytes) => Op::Binary {
                pad_to: None,
                values: text(),
            },
            _ => Op::General {
                encoding,
                builder: ColumnBuilder::new(kind, rows),
            },
        }
    }

    fn push_null(&mut self) {
        match self {
            Op::Int8(b) => b.append_null(),
            Op::UInt8(b) => b.append_null(),
            Op::Int16(b) => b.append_null(),
            Op::UInt16(b) => b.append_null(),
            Op::Int32(b) => b.append_null(),
            Op::UInt32(b) => b.append_null(),
            Op::Int64(b) => b.append_null(),
            Op::UInt64(b) => b.append_null(),
            Op::Float32(b) => b.append_null(),
            Op::Float64(b) => b.append_null(),
            Op::Decimal { values, .. } => values.append_null(),
            Op::Date(b) => b.append_null(),
            Op::DateTime { values, .. } => values.append_null(),
            Op::Time(b) => b.append_null(),
            Op::Text(b) | Op::Binary { values: b, .. } => b.append_null(),
            Op::General { builder, .. } => builder.append_null(),
        }
    }

    /// Reads one value (not NULL) off `cur` and appends it; `kind` is the column's.
    #[inline]
    fn decode(&mut self, cur: &mut RowCursor<'_>, kind: &ColumnKind) -> Result<(), String> {
        let short = |e: crate::source::mysql_client::ValueError| e.to_string();
        match self {
            Op::Int8(b) => b.append_value(i8::from_le_bytes(cur.fixed().map_err(short)?)),
            Op::UInt8(b) => b.append_value(u8::from_le_bytes(cur.fixed().map_err(short)?)),
            Op::Int16(b) => b.append_value(i16::from_le_bytes(cur.fixed().map_err(short)?)),
            Op::UInt16(b) => b.append_value(u16::from_le_bytes(cur.fixed().map_err(short)?)),
            Op::Int32(b) => b.append_value(i32::from_le_bytes(cur.fixed().map_err(short)?)),
            Op::UInt32(b) => b.append_value(u32::from_le_bytes(cur.fixed().map_err(short)?)),
            Op::Int64(b) => b.append_value(i64::from_le_bytes(cur.fixed().map_err(short)?)),
            Op::UInt64(b) => b.append_value(u64::from_le_bytes(cur.fixed().map_err(short)?)),
            Op::Float32(b) => b.append_value(f32::from_le_bytes(cur.fixed().map_err(short)?)),
            Op::Float64(b) => b.append_value(f64::from_le_bytes(cur.fixed().map_err(short)?)),
            Op::Decimal {
                precision,
                scale,
                values,
            } => {
                let text = cur.bytes().map_err(short)?;
                let unscaled = match parse_decimal_fast(text, *scale) {
                    Some(v) => v,
                    None => decimal_text(text, *scale)?,
                };
                decimal128_fits(unscaled, *precision)?;
                values.append_value(unscaled)
            }
            Op::Date(b) => {
                let (y, m, d, ..) = cur.date_time().map_err(short)?;
                b.append_option(date_to_days(y as u32, m as u32, d as u32)?)
            }
            Op::DateTime { values, .. } => {
                let (y, mo, d, h, mi, s, us) = cur.date_time().map_err(short)?;
                values.append_option(datetime_to_micros(
                    y as u32, mo as u32, d as u32, h as u32, mi as u32, s as u32, us,
                )?)
            }
            Op::Time(b) => {
                let (neg, days, h, m, s, us) = cur.time().map_err(short)?;
                b.append_value(time_parts_to_micros(neg, days, h, m, s, us)?)
            }
            Op::Text(b) => b.append_value(cur.bytes().map_err(short)?),
            Op::Binary { pad_to, values } => {
                values.append_value(padded(cur.bytes().map_err(short)?, *pad_to))
            }
            Op::General { encoding, builder } => {
                let value = cur.value(*encoding).map_err(short)?;
                append_value(kind, value, builder)?
            }
        }
        Ok(())
    }

    /// The column's values so far as an array (the builder is reset); an error names the
    /// value at fault, by its index among the column's values, when one is.
    fn finish(&mut self) -> Result<ArrayRef, (Option<usize>, String)> {
        let whole = |detail: String| (None, detail);
        Ok(match self {
            Op::Int8(b) => Arc::new(b.finish()),
            Op::UInt8(b) => Arc::new(b.finish()),
            Op::Int16(b) => Arc::new(b.finish()),
            Op::UInt16(b) => Arc::new(b.finish()),
            Op::Int32(b) => Arc::new(b.finish()),
            Op::UInt32(b) => Arc::new(b.finish()),
            Op::Int64(b) => Arc::new(b.finish()),
            Op::UInt64(b) => Arc::new(b.finish()),
            Op::Float32(b) => Arc::new(b.finish()),
            Op::Float64(b) => Arc::new(b.finish()),
            Op::Decimal {
                precision,
                scale,
                values,
            } => Arc::new(
                values
                    .finish()
                    .with_precision_and_scale(*precision, *scale as i8)
                    .map_err(|e| whole(e.to_string()))?,
            ),
            Op::Date(b) => Arc::new(b.finish()),
            Op::DateTime { utc: true, values } => Arc::new(values.finish().with_timezone("UTC")),
            Op::DateTime { values, .. } => Arc::new(values.finish()),
            Op::Time(b) => Arc::new(b.finish()),
            Op::Text(b) => {
                // The one UTF-8 check of the column's values; only a failure looks at them one
                // by one, to name the first bad one.
                let (offsets, data, nulls) = b.finish().into_parts();
                match StringArray::try_new(offsets.clone(), data.clone(), nulls) {
                    Ok(array) => Arc::new(array),
                    Err(e) => {
                        let bad = offsets.windows(2).enumerate().find_map(|(i, w)| {
                            let value = data.get(w[0] as usize..w[1] as usize)?;
                            let e = std::str::from_utf8(value).err()?;
                            Some((Some(i), format!("invalid UTF-8 in text value: {e}")))
                        });
                        return Err(bad.unwrap_or_else(|| whole(e.to_string())));
                    }
                }
            }
            Op::Binary { values, .. } => Arc::new(values.finish()),
            Op::General { builder, .. } => builder.finish().map_err(whole)?,
        })
    }
}

/// `DECIMAL` text that [`parse_decimal_fast`] did not take: the general parser, as
/// `ColumnBuilder::append_decimal` would go on with it.
#[cold]
fn decimal_text(text: &[u8], scale: u8) -> Result<i128, String> {
    let text = std::str::from_utf8(text).map_err(|e| e.to_string())?;
    let unscaled = parse_decimal_text(text, scale)?;
    unscaled
        .to_i128()
        .ok_or_else(|| format!("decimal {unscaled} exceeds 128 bits"))
}

/// Decodes the binary rows of one table's `SELECT` into Arrow batches of its schema, with one
/// compiled [`Op`] per column.
#[derive(Debug)]
pub struct BinaryColumns<'a> {
    schema: &'a TableSchema,
    ops: Vec<Op>,
    /// Whether each column's Arrow field takes NULL.
    nullable: Vec<bool>,
    rows: usize,
}

impl<'a> BinaryColumns<'a> {
    /// The operations for a result whose columns are encoded as `encodings`; an error when the
    /// result does not have the schema's columns.
    pub fn compile(
        schema: &'a TableSchema,
        encodings: &[Encoding],
        batch_rows: usize,
    ) -> SourceResult<Self> {
        if encodings.len() != schema.columns.len() {
            return Err(SourceError::Raced {
                context: format!("SELECT of {}", schema.id),
                detail: format!(
                    "it returned {} columns, the schema read before has {}",
                    encodings.len(),
                    schema.columns.len()
                ),
            });
        }
        Ok(Self {
            schema,
            ops: encodings
                .iter()
                .zip(&schema.columns)
                .map(|(&encoding, c)| Op::compile(encoding, &c.kind, batch_rows))
                .collect(),
            nullable: schema
                .arrow
                .fields()
                .iter()
                .map(|f| f.is_nullable())
                .collect(),
            rows: 0,
        })
    }

    /// Appends one row; a value that does not convert is an error naming the table, the
    /// column and the row's primary key. The row must be of the result compiled for.
    pub fn push(&mut self, row: &BinaryRow<'_>) -> SourceResult<()> {
        let (schema, ordinal) = (self.schema, self.rows);
        let fail = |column: usize, detail: String| SourceError::BadValue {
            table: schema.id.to_string(),
            column: schema.columns[column].name.clone(),
            row: describe_key(schema, row.values(), ordinal),
            detail,
        };
        if row.len() != self.ops.len() {
            let detail = format!(
                "a row of {} values for {} columns",
                row.len(),
                self.ops.len()
            );
            return Err(fail(0, detail));
        }
        let mut cur = row.cursor().map_err(|e| fail(0, e.to_string()))?;
        for (i, ((op, column), &nullable)) in self
            .ops
            .iter_mut()
            .zip(&schema.columns)
            .zip(&self.nullable)
            .enumerate()
        {
            let pushed = if !cur.is_null(i) {
                op.decode(&mut cur, &column.kind)
            } else if nullable {
                op.push_null();
                Ok(())
            } else {
                Err("NULL in a NOT NULL column".to_string())
            };
            if let Err(detail) = pushed {
                return Err(fail(i, detail));
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
        let rows = std::mem::take(&mut self.rows);
        let schema = self.schema;
        let finished: Vec<_> = self.ops.iter_mut().map(Op::finish).collect();
        let bad = |column: String, row: Option<usize>, detail: String| SourceError::BadValue {
            table: schema.id.to_string(),
            column,
            row: match row {
                Some(row) => describe_built_key(schema, &finished, row),
                None => format!("a batch of {rows} rows"),
            },
            detail,
        };
        let mut columns = Vec::with_capacity(finished.len());
        for (array, field) in finished.iter().zip(schema.arrow.fields()) {
            match array {
                Ok(array) => columns.push(Arc::clone(array)),
                Err((row, detail)) => return Err(bad(field.name().clone(), *row, detail.clone())),
            }
        }
        batch_of(&schema.arrow, columns).map_err(|e| bad(e.column, None, e.detail))
    }
}

/// Names row `row` of a batch by its primary key, read from the columns that did finish.
#[cold]
fn describe_built_key(
    schema: &TableSchema,
    finished: &[Result<ArrayRef, (Option<usize>, String)>],
    row: usize,
) -> String {
    let key: Option<Vec<String>> = schema
        .primary_key
        .iter()
        .map(|&k| {
            let array = finished.get(k)?.as_ref().ok()?;
            let value = arrow::util::display::array_value_to_string(array, row).ok()?;
            Some(format!("{}={value}", schema.columns.get(k)?.name))
        })
        .collect();
    match key {
        Some(key) if !key.is_empty() => format!("the row with {}", key.join(", ")),
        _ => format!("row {row} of the batch"),
    }
}

/// Reads `SELECT <all columns> FROM table [WHERE predicate]` on our own connection into
/// batches of `batch_rows`, each row decoded in place by the compiled operations; the
/// connection's own read timeout bounds every read.
pub async fn select_batches_wire(
    conn: &mut WireConnection,
    schema: &TableSchema,
    predicate: Option<&str>,
    params: &[Value],
    batch_rows: usize,
) -> SourceResult<Vec<RecordBatch>> {
    let sql = select_sql(schema, predicate, None);
    read_wire(conn, schema, &sql, params, batch_rows).await
}

/// [`select_batches_wire`] as a locking read that never waits for a lock, as
/// [`select_batches_locked`](super::select::select_batches_locked) on the driver's connection:
/// a row another transaction holds fails the read at once with a lock conflict (after the
/// rows before it were sent; they are dropped with the error). Outside a transaction its
/// shared locks last until the statement ends.
pub async fn select_batches_wire_locked(
    conn: &mut WireConnection,
    schema: &TableSchema,
    flavor: Flavor,
    predicate: Option<&str>,
    params: &[Value],
    batch_rows: usize,
) -> SourceResult<Vec<RecordBatch>> {
    let sql = select_sql(schema, predicate, Some(nowait_share_lock(flavor)));
    read_wire(conn, schema, &sql, params, batch_rows).await
}

async fn read_wire(
    conn: &mut WireConnection,
    schema: &TableSchema,
    sql: &str,
    params: &[Value],
    batch_rows: usize,
) -> SourceResult<Vec<RecordBatch>> {
    let ctx = || format!("reading {}", schema.id);
    // Compiled at the first row, whose encodings every row of the result shares.
    let mut reader: Option<BinaryColumns<'_>> = None;
    let mut batches = Vec::new();
    conn.select(sql, params, &ctx, |row| {
        let columns = match &mut reader {
            Some(columns) => columns,
            None => reader.insert(BinaryColumns::compile(schema, row.encodings(), batch_rows)?),
        };
        columns.push(row)?;
        if columns.len() >= batch_rows {
            batches.push(columns.finish()?);
        }
        Ok(())
    })
    .await?;
    match &mut reader {
        Some(columns) if !columns.is_empty() => batches.push(columns.finish()?),
        None if batches.is_empty() => {
            batches.push(RecordBatch::new_empty(Arc::clone(&schema.arrow)))
        }
        _ => {}
    }
    Ok(batches)
}

#[cfg(test)]
mod tests;
