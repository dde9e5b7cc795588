//! Row checksums over one canonical text, computed by the server in SQL and by the engine
//! from Arrow: what reconciliation compares chunk by chunk without moving the rows.
//!
//! # Canonical text
//! Each column kind that has one is rendered two ways side by side in [`canonical_sql`] and
//! [`push_canonical`], to the same text: integers, years, bits and decimals as their digits,
//! dates and times as `YYYY-MM-DD HH:MM:SS.ffffff` (the connection's time zone is UTC, see
//! `connect`), `TIME` as microseconds, character data as the upper-case hex of its UTF-8 bytes,
//! byte strings as the hex of their bytes (`BINARY(n)` padded, as both sides hold it). A row's
//! text is its columns joined by `,`, a NULL written `~`: neither character occurs in any
//! rendering, so distinct rows have distinct texts. Its checksum is the CRC-32 (IEEE, MySQL's
//! `CRC32`) of the text; a chunk's is its row count and the XOR of its rows' checksums.
//!
//! `DOUBLE` is written as the server writes it: the shortest digits that read back as the
//! value, fixed or with an exponent by the server's rule (a `DOUBLE(m,d)` the server writes with
//! `d` decimals: its chunks differ and are read again, which costs rows but finds nothing false).
//!
//! # Value columns
//! `FLOAT` (written with six significant digits), `JSON`, spatial and vector columns have no
//! text the server renders exactly as the engine holds them; they are left out of the checksum
//! and fetched with the key instead, to be compared as values ([`value_columns`]).

use std::fmt::Write as _;
use std::time::Duration;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Decimal256Type, DurationMicrosecondType, Float64Type,
    Int16Type, Int32Type, Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value};

use crate::change::kinds::Checksum;
use crate::change::schema::{quote_ident, ColumnKind, ColumnSpec, TableSchema};
use crate::source::connect::bounded;
use crate::source::error::{SourceError, SourceResult};

/// What stands for NULL in a row's text.
const NULL_TEXT: &str = "~";
/// Between the columns of a row's text.
const SEPARATOR: char = ',';

/// Whether a column of `kind` is in the checksum (else it is a value column).
pub fn has_canonical_text(kind: &ColumnKind) -> bool {
    !matches!(kind, ColumnKind::Simple(simple) if simple.row().checksum == Checksum::Value)
}

/// The indexes of `schema`'s columns compared as values, not through the checksum.
pub fn value_columns(schema: &TableSchema) -> Vec<usize> {
    (0..schema.columns.len())
        .filter(|&i| !has_canonical_text(&schema.columns[i].kind))
        .collect()
}

/// The server's expression of `column`'s canonical text (NULL for NULL), or `None` for a value
/// column.
pub fn canonical_sql(column: &ColumnSpec) -> Option<String> {
    let c = quote_ident(&column.name);
    Some(match &column.kind {
        ColumnKind::Int { .. } => format!("CAST({c} AS CHAR)"),
        ColumnKind::Bit { .. } => format!("CAST(CAST({c} AS UNSIGNED) AS CHAR)"),
        ColumnKind::Decimal { .. } => format!("CAST({c} AS CHAR)"),
        ColumnKind::DateTime { .. } | ColumnKind::Timestamp { .. } => {
            format!("DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')")
        }
        ColumnKind::Time { .. } => {
            format!("CAST(CAST(TIME_TO_SEC({c}) * 1000000 AS SIGNED) AS CHAR)")
        }
        ColumnKind::Text { .. } | ColumnKind::Enum { .. } | ColumnKind::Set { .. } => {
            format!("HEX(CONVERT({c} USING utf8mb4))")
        }
        ColumnKind::Binary { .. } => format!("HEX({c})"),
        ColumnKind::Simple(simple) => match simple.row().checksum {
            Checksum::Sql(template) => template.replace("{c}", &c),
            Checksum::Value => return None,
        },
    })
}

/// `COUNT(*)` and the XOR of the row checksums of `schema`'s rows matching `predicate`.
pub fn checksum_sql(schema: &TableSchema, predicate: Option<&str>) -> String {
    let parts: Vec<String> = schema
        .columns
        .iter()
        .filter_map(canonical_sql)
        .map(|e| format!("COALESCE({e}, '{NULL_TEXT}')"))
        .collect();
    let text = match parts.is_empty() {
        true => "''".to_string(),
        false => format!("CONCAT_WS('{SEPARATOR}', {})", parts.join(", ")),
    };
    let mut sql = format!(
        "SELECT COUNT(*), COALESCE(BIT_XOR(CRC32({text})), 0) FROM {}",
        schema.id.quoted()
    );
    if let Some(p) = predicate {
        sql.push_str(" WHERE ");
        sql.push_str(p);
    }
    sql
}

/// A chunk's checksum: its rows and the XOR of their checksums.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkSum {
    pub rows: u64,
    pub xor: u32,
}

impl ChunkSum {
    /// Adds one row's checksum.
    pub fn add(&mut self, checksum: u32) {
        self.rows += 1;
        self.xor ^= checksum;
    }
}

/// Runs [`checksum_sql`] on the server, waiting at most `limit`.
pub async fn chunk_checksum(
    conn: &mut Conn,
    schema: &TableSchema,
    predicate: Option<&str>,
    params: Vec<Value>,
    limit: Duration,
) -> SourceResult<ChunkSum> {
    let sql = checksum_sql(schema, predicate);
    let context = || format!("computing a checksum of {}", schema.id);
    let read = async {
        conn.exec_first::<(u64, u64), _, _>(sql.as_str(), mysql_async::Params::Positional(params))
            .await
            .map_err(|e| SourceError::from_mysql(context(), e))
    };
    let (rows, xor) = bounded(limit, &context, read).await?.unwrap_or((0, 0));
    Ok(ChunkSum {
        rows,
        xor: xor as u32,
    })
}

/// The checksum of row `row` of `batch`, whose columns are `schema`'s.
pub fn row_checksum(
    schema: &TableSchema,
    batch: &RecordBatch,
    row: usize,
    text: &mut String,
) -> u32 {
    text.clear();
    let mut first = true;
    for (i, column) in schema.columns.iter().enumerate() {
        if !has_canonical_text(&column.kind) {
            continue;
        }
        if !first {
            text.push(SEPARATOR);
        }
        first = false;
        push_canonical(batch.column(i), row, text);
    }
    crc32fast::hash(text.as_bytes())
}

/// Appends the canonical text of `array[row]` (see the module docs) to `out`.
pub fn push_canonical(array: &ArrayRef, row: usize, out: &mut String) {
    if array.is_null(row) {
        out.push_str(NULL_TEXT);
        return;
    }
    // Writing to a String cannot fail.
    let _ = match array.data_type() {
        DataType::Int8 => write!(out, "{}", array.as_primitive::<Int8Type>().value(row)),
        DataType::Int16 => write!(out, "{}", array.as_primitive::<Int16Type>().value(row)),
        DataType::Int32 => write!(out, "{}", array.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => write!(out, "{}", array.as_primitive::<Int64Type>().value(row)),
        DataType::UInt8 => write!(out, "{}", array.as_primitive::<UInt8Type>().value(row)),
        DataType::UInt16 => write!(out, "{}", array.as_primitive::<UInt16Type>().value(row)),
        DataType::UInt32 => write!(out, "{}", array.as_primitive::<UInt32Type>().value(row)),
        DataType::UInt64 => write!(out, "{}", array.as_primitive::<UInt64Type>().value(row)),
        DataType::Decimal128(_, scale) => {
            let v = array.as_primitive::<Decimal128Type>().value(row);
            push_decimal(&v.unsigned_abs().to_string(), v < 0, *scale, out);
            Ok(())
        }
        DataType::Decimal256(_, scale) => {
            let v = array.as_primitive::<Decimal256Type>().value(row);
            let text = v.to_string();
            let (negative, digits) = match text.strip_prefix('-') {
                Some(d) => (true, d),
                None => (false, text.as_str()),
            };
            push_decimal(digits, negative, *scale, out);
            Ok(())
        }
        DataType::Float64 => {
            push_double(array.as_primitive::<Float64Type>().value(row), out);
            Ok(())
        }
        DataType::Date32 => {
            let days = array.as_primitive::<Date32Type>().value(row);
            match chrono::NaiveDate::from_num_days_from_ce_opt(days + 719_163) {
                Some(d) => write!(out, "{}", d.format("%Y-%m-%d")),
                None => write!(out, "?{days}"),
            }
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let micros = array.as_primitive::<TimestampMicrosecondType>().value(row);
            match chrono::DateTime::from_timestamp_micros(micros) {
                Some(t) => write!(out, "{}", t.naive_utc().format("%Y-%m-%d %H:%M:%S%.6f")),
                None => write!(out, "?{micros}"),
            }
        }
        DataType::Duration(TimeUnit::Microsecond) => write!(
            out,
            "{}",
            array.as_primitive::<DurationMicrosecondType>().value(row)
        ),
        DataType::Utf8 => {
            push_hex(array.as_string::<i32>().value(row).as_bytes(), out);
            Ok(())
        }
        DataType::Binary => {
            push_hex(array.as_binary::<i32>().value(row), out);
            Ok(())
        }
        // Not a column kind of ours: a text the server never renders, so the chunk differs.
        other => write!(out, "?{other}"),
    };
}

/// `digits` (an unscaled decimal's magnitude) with `scale` digits after the point, as
/// `CAST(decimal AS CHAR)` writes it.
fn push_decimal(digits: &str, negative: bool, scale: i8, out: &mut String) {
    let scale = scale.max(0) as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    if negative {
        out.push('-');
    }
    out.push_str(int);
    if scale > 0 {
        out.push('.');
        out.push_str(frac);
    }
}

/// `v` as the server writes a `DOUBLE` (no declared scale) as text: the shortest digits that
/// read back as `v`, in fixed notation when its decimal exponent is in -15..=14 and as
/// `d.ddde<exp>` otherwise (`1e15`, `0.00000015`, `1.2345678901234568e17`).
fn push_double(v: f64, out: &mut String) {
    if v == 0.0 {
        out.push('0');
        return;
    }
    // Rust's `{:e}` is the shortest round-trip digits: `-1.2345e-7`.
    let scientific = format!("{v:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-15..=14).contains(&exponent) {
        out.push_str(&scientific);
        return;
    }
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if negative {
        out.push('-');
    }
    if exponent < 0 {
        out.push_str("0.");
        for _ in 0..(-exponent - 1) {
            out.push('0');
        }
        out.push_str(&digits);
        return;
    }
    let point = exponent as usize + 1;
    if digits.len() <= point {
        out.push_str(&digits);
        for _ in digits.len()..point {
            out.push('0');
        }
    } else {
        out.push_str(&digits[..point]);
        out.push('.');
        out.push_str(&digits[point..]);
    }
}

fn push_hex(bytes: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.reserve(bytes.len() * 2);
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::kinds::SimpleKind;
    use std::sync::Arc;

    use arrow::array::{
        BinaryArray, Date32Array, Decimal128Array, DurationMicrosecondArray, Int64Array,
        StringArray, TimestampMicrosecondArray,
    };

    fn text(array: ArrayRef) -> Vec<String> {
        (0..array.len())
            .map(|i| {
                let mut s = String::new();
                push_canonical(&array, i, &mut s);
                s
            })
            .collect()
    }

    #[test]
    fn values_render_as_the_server_writes_them() {
        assert_eq!(
            text(Arc::new(Int64Array::from(vec![Some(-42), None, Some(7)]))),
            ["-42", "~", "7"]
        );
        let decimals = Decimal128Array::from(vec![1250, -50, 0, 123456])
            .with_precision_and_scale(10, 2)
            .unwrap();
        assert_eq!(
            text(Arc::new(decimals)),
            ["12.50", "-0.50", "0.00", "1234.56"]
        );
        let whole = Decimal128Array::from(vec![-7])
            .with_precision_and_scale(5, 0)
            .unwrap();
        assert_eq!(text(Arc::new(whole)), ["-7"]);
        // 2024-02-29 is day 19782 since the epoch.
        assert_eq!(
            text(Arc::new(Date32Array::from(vec![19782, 0]))),
            ["2024-02-29", "1970-01-01"]
        );
        assert_eq!(
            text(Arc::new(
                TimestampMicrosecondArray::from(vec![1_709_210_096_000_123]).with_timezone("UTC")
            )),
            ["2024-02-29 12:34:56.000123"]
        );
        assert_eq!(
            text(Arc::new(DurationMicrosecondArray::from(vec![
                -1_500_000,
                3_600_000_000
            ]))),
            ["-1500000", "3600000000"]
        );
        assert_eq!(
            text(Arc::new(StringArray::from(vec!["aé,~", ""]))),
            ["61C3A92C7E", ""]
        );
        assert_eq!(
            text(Arc::new(BinaryArray::from(vec![&[0u8, 255, 16][..]]))),
            ["00FF10"]
        );
    }

    #[test]
    fn doubles_render_as_the_server_casts_them() {
        // Each pair was read from MariaDB 10.11: SELECT CAST(<v> AS CHAR).
        for (v, server) in [
            (1.0 / 7.0, "0.14285714285714285"),
            (0.1, "0.1"),
            (1e20, "1e20"),
            (1.5e-7, "0.00000015"),
            (123456789012345678.0, "1.2345678901234568e17"),
            (-0.0, "0"),
            (1e16, "1e16"),
            (12345.678, "12345.678"),
            (1e15, "1e15"),
            (1e14, "100000000000000"),
            (1234500.0, "1234500"),
            (1e-300, "1e-300"),
            (123e-20, "1.23e-18"),
            (1.234567890123456e15, "1.234567890123456e15"),
            (-2.5e-5, "-0.000025"),
            (1e-15, "0.000000000000001"),
            (1e-16, "1e-16"),
            (1.25e-15, "0.00000000000000125"),
            (123456789012345.67, "123456789012345.67"),
            (1.2345678901234567e-5, "0.000012345678901234568"),
            (999999999999999.9, "999999999999999.9"),
            (1.7976931348623157e308, "1.7976931348623157e308"),
            (5e-324, "5e-324"),
        ] {
            let mut s = String::new();
            push_double(v, &mut s);
            assert_eq!(s, server, "{v:e}");
        }
    }

    #[test]
    fn the_checksum_query_leaves_value_columns_out() {
        use crate::change::schema::{Charset, TableId};
        let schema = TableSchema::new(
            TableId::new("db", "t"),
            vec![
                ColumnSpec {
                    name: "id".into(),
                    kind: ColumnKind::Int {
                        bits: 32,
                        unsigned: false,
                    },
                    nullable: false,
                },
                ColumnSpec {
                    name: "f".into(),
                    kind: ColumnKind::Simple(SimpleKind::Float),
                    nullable: true,
                },
                ColumnSpec {
                    name: "s".into(),
                    kind: ColumnKind::Text {
                        charset: Charset::Latin1,
                        length: None,
                    },
                    nullable: true,
                },
            ],
            vec![0],
        );
        assert_eq!(value_columns(&schema), vec![1]);
        assert_eq!(
            checksum_sql(&schema, Some("`id` >= ?")),
            "SELECT COUNT(*), COALESCE(BIT_XOR(CRC32(CONCAT_WS(',', \
             COALESCE(CAST(`id` AS CHAR), '~'), COALESCE(HEX(CONVERT(`s` USING utf8mb4)), '~')))), 0) \
             FROM `db`.`t` WHERE `id` >= ?"
        );
        let batch = RecordBatch::try_new(
            Arc::clone(&schema.arrow),
            vec![
                Arc::new(arrow::array::Int32Array::from(vec![5])),
                Arc::new(arrow::array::Float32Array::from(vec![0.1])),
                Arc::new(StringArray::from(vec![None::<&str>])),
            ],
        )
        .unwrap();
        let mut buffer = String::new();
        let crc = row_checksum(&schema, &batch, 0, &mut buffer);
        assert_eq!(buffer, "5,~");
        assert_eq!(crc, crc32fast::hash(b"5,~"));
    }
}
