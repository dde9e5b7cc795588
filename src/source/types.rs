//! One canonical Arrow value for every MySQL/MariaDB column type.
//!
//! # Invariant
//! The binlog decoder and the snapshot (`SELECT`) reader both end in the same
//! [`ColumnBuilder`] methods, and every conversion that could differ between the two paths
//! (zero dates, time zones, enum/set labels, `BIT` bytes, `DECIMAL` scale, fixed-length binary
//! padding, character sets) lives here once. A row read either way therefore produces identical
//! Arrow values; `tests/type_parity.rs` proves it on a real server.
//!
//! | MySQL | Arrow |
//! |---|---|
//! | `TINYINT`…`BIGINT` (signed / `UNSIGNED`) | `Int8`…`Int64` / `UInt8`…`UInt64` (`MEDIUMINT` → 32 bits) |
//! | `DECIMAL(p,s)` | `Decimal128(p,s)` for p ≤ 38, else `Decimal256(p,s)` |
//! | `FLOAT` / `DOUBLE` | `Float32` / `Float64` |
//! | `DATE` | `Date32`; zero or partly zero dates are NULL |
//! | `TIME(fsp)` | `Duration(µs)`: signed, may exceed 24 hours |
//! | `DATETIME(fsp)` | `Timestamp(µs)` without zone (wall clock); zero dates are NULL |
//! | `TIMESTAMP(fsp)` | `Timestamp(µs, "UTC")` (an instant); the zero timestamp is NULL |
//! | `YEAR` | `Int16` (0 for the zero year) |
//! | `CHAR`/`VARCHAR`/`TEXT`, `ENUM`, `SET`, `JSON` | `Utf8` (labels for `ENUM`/`SET`, JSON text) |
//! | `BINARY`/`VARBINARY`/`BLOB`, `GEOMETRY`, `VECTOR` | `Binary` |
//! | `BIT(n)` | `UInt64` |
//!
//! Each field carries the column's MySQL type in its metadata under [`MYSQL_TYPE_KEY`], so later
//! stages (e.g. the PostgreSQL front end) can tell JSON from text.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, Date32Builder, Decimal128Builder, Decimal256Builder,
    DurationMicrosecondBuilder, Float32Builder, Float64Builder, Int16Builder, Int32Builder,
    Int64Builder, Int8Builder, StringBuilder, TimestampMicrosecondBuilder, UInt16Builder,
    UInt32Builder, UInt64Builder, UInt8Builder,
};
use arrow::datatypes::{i256, DataType, Field, TimeUnit};

/// Field metadata key holding the column's MySQL type (`bigint unsigned`, `json`, ...).
pub const MYSQL_TYPE_KEY: &str = "mysql.type";

/// Largest DECIMAL precision that fits Arrow's `Decimal128`.
const DECIMAL128_MAX_PRECISION: u8 = 38;

/// Microseconds per second.
const MICROS: i64 = 1_000_000;

/// The character set a text column's bytes are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charset {
    /// utf8mb4, utf8mb3 and ascii: valid UTF-8 as stored.
    Utf8,
    /// MySQL's latin1, which is Windows code page 1252.
    Latin1,
}

impl Charset {
    /// Maps a MySQL character set name; `None` for `binary`; an error for sets we cannot decode.
    pub fn from_name(name: &str) -> Result<Option<Charset>, String> {
        match name.to_ascii_lowercase().as_str() {
            "binary" => Ok(None),
            "utf8mb4" | "utf8mb3" | "utf8" | "ascii" => Ok(Some(Charset::Utf8)),
            "latin1" => Ok(Some(Charset::Latin1)),
            other => Err(format!(
                "character set {other} is not supported (supported: utf8mb4, utf8mb3, ascii, latin1, binary)"
            )),
        }
    }
}

/// What a column holds, independent of how it is encoded on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnKind {
    /// Integers of 8, 16, 24, 32 or 64 bits.
    Int {
        bits: u8,
        unsigned: bool,
    },
    Float,
    Double,
    Decimal {
        precision: u8,
        scale: u8,
    },
    Date,
    Time {
        fsp: u8,
    },
    DateTime {
        fsp: u8,
    },
    Timestamp {
        fsp: u8,
    },
    Year,
    /// Character data; `fixed_len` is set for `CHAR(n)`.
    Text {
        charset: Charset,
    },
    /// Byte strings; `pad_to` is the byte length of `BINARY(n)`, whose values MySQL pads with
    /// zero bytes on `SELECT` but strips in the binlog.
    Binary {
        pad_to: Option<usize>,
    },
    Enum {
        labels: Arc<[String]>,
    },
    Set {
        labels: Arc<[String]>,
    },
    Bit {
        bits: u16,
    },
    Json,
    Geometry,
    Vector,
}

impl ColumnKind {
    /// The Arrow type of this kind.
    pub fn data_type(&self) -> DataType {
        match self {
            ColumnKind::Int { bits, unsigned } => match (bits, unsigned) {
                (8, false) => DataType::Int8,
                (8, true) => DataType::UInt8,
                (16, false) => DataType::Int16,
                (16, true) => DataType::UInt16,
                (24 | 32, false) => DataType::Int32,
                (24 | 32, true) => DataType::UInt32,
                (_, false) => DataType::Int64,
                (_, true) => DataType::UInt64,
            },
            ColumnKind::Float => DataType::Float32,
            ColumnKind::Double => DataType::Float64,
            ColumnKind::Decimal { precision, scale } => {
                if *precision <= DECIMAL128_MAX_PRECISION {
                    DataType::Decimal128(*precision, *scale as i8)
                } else {
                    DataType::Decimal256(*precision, *scale as i8)
                }
            }
            ColumnKind::Date => DataType::Date32,
            ColumnKind::Time { .. } => DataType::Duration(TimeUnit::Microsecond),
            ColumnKind::DateTime { .. } => DataType::Timestamp(TimeUnit::Microsecond, None),
            ColumnKind::Timestamp { .. } => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
            }
            ColumnKind::Year => DataType::Int16,
            ColumnKind::Text { .. }
            | ColumnKind::Enum { .. }
            | ColumnKind::Set { .. }
            | ColumnKind::Json => DataType::Utf8,
            ColumnKind::Binary { .. } | ColumnKind::Geometry | ColumnKind::Vector => {
                DataType::Binary
            }
            ColumnKind::Bit { .. } => DataType::UInt64,
        }
    }

    /// The MySQL type name recorded in field metadata.
    pub fn mysql_type(&self) -> String {
        match self {
            ColumnKind::Int { bits, unsigned } => {
                let base = match bits {
                    8 => "tinyint",
                    16 => "smallint",
                    24 => "mediumint",
                    32 => "int",
                    _ => "bigint",
                };
                if *unsigned {
                    format!("{base} unsigned")
                } else {
                    base.to_string()
                }
            }
            ColumnKind::Float => "float".into(),
            ColumnKind::Double => "double".into(),
            ColumnKind::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            ColumnKind::Date => "date".into(),
            ColumnKind::Time { fsp } => format!("time({fsp})"),
            ColumnKind::DateTime { fsp } => format!("datetime({fsp})"),
            ColumnKind::Timestamp { fsp } => format!("timestamp({fsp})"),
            ColumnKind::Year => "year".into(),
            ColumnKind::Text { .. } => "text".into(),
            ColumnKind::Binary { .. } => "binary".into(),
            ColumnKind::Enum { .. } => "enum".into(),
            ColumnKind::Set { .. } => "set".into(),
            ColumnKind::Bit { bits } => format!("bit({bits})"),
            ColumnKind::Json => "json".into(),
            ColumnKind::Geometry => "geometry".into(),
            ColumnKind::Vector => "vector".into(),
        }
    }

    /// The Arrow field for a column of this kind.
    pub fn field(&self, name: &str, nullable: bool) -> Field {
        Field::new(name, self.data_type(), nullable).with_metadata(
            [(MYSQL_TYPE_KEY.to_string(), self.mysql_type())]
                .into_iter()
                .collect(),
        )
    }
}

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A MySQL date as days since the epoch; `None` for zero or partly zero dates, which have no
/// calendar meaning (both read paths turn them into NULL).
pub fn date_to_days(year: u32, month: u32, day: u32) -> Option<i32> {
    if month == 0 || day == 0 || month > 12 || day > 31 {
        return None;
    }
    Some(days_from_civil(year as i64, month, day) as i32)
}

/// A MySQL date and time of day as microseconds since the epoch (no zone applied).
pub fn datetime_to_micros(
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    micros: u32,
) -> Option<i64> {
    let days = date_to_days(year, month, day)? as i64;
    Some(
        ((days * 24 + hour as i64) * 60 + minute as i64) * 60 * MICROS
            + second as i64 * MICROS
            + micros as i64,
    )
}

/// A MySQL `TIME` as signed microseconds.
pub fn time_to_micros(negative: bool, hours: u32, minutes: u32, seconds: u32, micros: u32) -> i64 {
    let v = ((hours as i64 * 60 + minutes as i64) * 60 + seconds as i64) * MICROS + micros as i64;
    if negative {
        -v
    } else {
        v
    }
}

/// Decodes text bytes of `charset` into `out`; invalid UTF-8 is an error naming the bytes.
pub fn decode_text<'a>(
    charset: Charset,
    bytes: &'a [u8],
    scratch: &'a mut String,
) -> Result<&'a str, String> {
    match charset {
        Charset::Utf8 => {
            std::str::from_utf8(bytes).map_err(|e| format!("invalid UTF-8 in text value: {e}"))
        }
        Charset::Latin1 => {
            scratch.clear();
            scratch.extend(bytes.iter().map(|&b| cp1252_char(b)));
            Ok(scratch.as_str())
        }
    }
}

/// Windows-1252, which MySQL calls latin1; the five undefined bytes map to C1 controls as MySQL
/// does.
fn cp1252_char(b: u8) -> char {
    const HIGH: [u16; 32] = [
        0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
        0x2039, 0x0152, 0x008D, 0x017D, 0x008F, 0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
        0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178,
    ];
    match b {
        0x80..=0x9F => char::from_u32(HIGH[(b - 0x80) as usize] as u32).unwrap_or('\u{FFFD}'),
        _ => b as char,
    }
}

/// Parses decimal text (`-123.4500`) into an unscaled integer with exactly `scale` fraction
/// digits, accumulating in i256 so that DECIMAL(65,30) fits.
pub fn parse_decimal_text(text: &str, scale: u8) -> Result<i256, String> {
    let t = text.trim();
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    if int_part.is_empty() && frac_part.is_empty()
        || !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!("invalid decimal {text:?}"));
    }
    if frac_part.len() > scale as usize && frac_part[scale as usize..].bytes().any(|b| b != b'0') {
        return Err(format!(
            "decimal {text:?} has more than {scale} fraction digits"
        ));
    }
    let ten = i256::from_i128(10);
    let mut v = i256::ZERO;
    let frac_digits = frac_part.bytes().chain(std::iter::repeat(b'0'));
    for b in int_part.bytes().chain(frac_digits.take(scale as usize)) {
        v = v
            .checked_mul(ten)
            .and_then(|x| x.checked_add(i256::from_i128((b - b'0') as i128)))
            .ok_or_else(|| format!("decimal {text:?} overflows"))?;
    }
    Ok(if neg { v.wrapping_neg() } else { v })
}

/// Big-endian bytes of a `BIT(n)` value as an unsigned integer.
pub fn bit_value(bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() > 8 {
        return Err(format!(
            "BIT value of {} bytes exceeds 64 bits",
            bytes.len()
        ));
    }
    Ok(bytes.iter().fold(0u64, |acc, b| (acc << 8) | *b as u64))
}

/// Appends the labels of the bits set in `mask`, comma-separated, as MySQL prints a `SET`.
pub fn set_labels(labels: &[String], mask: u64, out: &mut String) -> Result<(), String> {
    out.clear();
    for (i, label) in labels.iter().enumerate() {
        if mask & (1u64 << i) != 0 {
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(label);
        }
    }
    let known = if labels.len() >= 64 {
        u64::MAX
    } else {
        (1u64 << labels.len()) - 1
    };
    if mask & !known != 0 {
        return Err(format!(
            "SET value {mask:#x} has bits beyond its {} labels",
            labels.len()
        ));
    }
    Ok(())
}

/// An Arrow builder for one column, typed by [`ColumnKind`].
#[derive(Debug)]
pub enum ColumnBuilder {
    Int8(Int8Builder),
    Int16(Int16Builder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    UInt8(UInt8Builder),
    UInt16(UInt16Builder),
    UInt32(UInt32Builder),
    UInt64(UInt64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Decimal128(Decimal128Builder, u8, i8),
    Decimal256(Decimal256Builder, u8, i8),
    Date32(Date32Builder),
    Duration(DurationMicrosecondBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    TimestampUtc(TimestampMicrosecondBuilder),
    Utf8(StringBuilder),
    Binary(BinaryBuilder),
}

impl ColumnBuilder {
    pub fn new(kind: &ColumnKind, capacity: usize) -> Self {
        use ColumnBuilder as B;
        match kind.data_type() {
            DataType::Int8 => B::Int8(Int8Builder::with_capacity(capacity)),
            DataType::Int16 => B::Int16(Int16Builder::with_capacity(capacity)),
            DataType::Int32 => B::Int32(Int32Builder::with_capacity(capacity)),
            DataType::Int64 => B::Int64(Int64Builder::with_capacity(capacity)),
            DataType::UInt8 => B::UInt8(UInt8Builder::with_capacity(capacity)),
            DataType::UInt16 => B::UInt16(UInt16Builder::with_capacity(capacity)),
            DataType::UInt32 => B::UInt32(UInt32Builder::with_capacity(capacity)),
            DataType::UInt64 => B::UInt64(UInt64Builder::with_capacity(capacity)),
            DataType::Float32 => B::Float32(Float32Builder::with_capacity(capacity)),
            DataType::Float64 => B::Float64(Float64Builder::with_capacity(capacity)),
            DataType::Decimal128(p, s) => {
                B::Decimal128(Decimal128Builder::with_capacity(capacity), p, s)
            }
            DataType::Decimal256(p, s) => {
                B::Decimal256(Decimal256Builder::with_capacity(capacity), p, s)
            }
            DataType::Date32 => B::Date32(Date32Builder::with_capacity(capacity)),
            DataType::Duration(_) => {
                B::Duration(DurationMicrosecondBuilder::with_capacity(capacity))
            }
            DataType::Timestamp(_, None) => {
                B::Timestamp(TimestampMicrosecondBuilder::with_capacity(capacity))
            }
            DataType::Timestamp(_, Some(_)) => {
                B::TimestampUtc(TimestampMicrosecondBuilder::with_capacity(capacity))
            }
            DataType::Binary => B::Binary(BinaryBuilder::with_capacity(capacity, capacity * 16)),
            _ => B::Utf8(StringBuilder::with_capacity(capacity, capacity * 16)),
        }
    }

    pub fn append_null(&mut self) {
        use ColumnBuilder as B;
        match self {
            B::Int8(b) => b.append_null(),
            B::Int16(b) => b.append_null(),
            B::Int32(b) => b.append_null(),
            B::Int64(b) => b.append_null(),
            B::UInt8(b) => b.append_null(),
            B::UInt16(b) => b.append_null(),
            B::UInt32(b) => b.append_null(),
            B::UInt64(b) => b.append_null(),
            B::Float32(b) => b.append_null(),
            B::Float64(b) => b.append_null(),
            B::Decimal128(b, ..) => b.append_null(),
            B::Decimal256(b, ..) => b.append_null(),
            B::Date32(b) => b.append_null(),
            B::Duration(b) => b.append_null(),
            B::Timestamp(b) | B::TimestampUtc(b) => b.append_null(),
            B::Utf8(b) => b.append_null(),
            B::Binary(b) => b.append_null(),
        }
    }

    /// Appends a signed integer to any integer column (the caller checked the kind).
    #[inline]
    pub fn append_i64(&mut self, v: i64) -> Result<(), String> {
        use ColumnBuilder as B;
        let out = |t: &str| format!("value {v} out of range for {t}");
        match self {
            B::Int8(b) => b.append_value(i8::try_from(v).map_err(|_| out("tinyint"))?),
            B::Int16(b) => b.append_value(i16::try_from(v).map_err(|_| out("smallint"))?),
            B::Int32(b) => b.append_value(i32::try_from(v).map_err(|_| out("int"))?),
            B::Int64(b) => b.append_value(v),
            B::UInt8(b) => b.append_value(u8::try_from(v).map_err(|_| out("tinyint unsigned"))?),
            B::UInt16(b) => b.append_value(u16::try_from(v).map_err(|_| out("smallint unsigned"))?),
            B::UInt32(b) => b.append_value(u32::try_from(v).map_err(|_| out("int unsigned"))?),
            B::UInt64(b) => b.append_value(u64::try_from(v).map_err(|_| out("bigint unsigned"))?),
            other => return Err(format!("integer value for a {other:?} column")),
        }
        Ok(())
    }

    /// Appends an unsigned integer (also used for `BIT`).
    #[inline]
    pub fn append_u64(&mut self, v: u64) -> Result<(), String> {
        match self {
            ColumnBuilder::UInt64(b) => {
                b.append_value(v);
                Ok(())
            }
            _ => self.append_i64(
                i64::try_from(v)
                    .map_err(|_| format!("value {v} out of range for a signed column"))?,
            ),
        }
    }

    #[inline]
    pub fn append_f32(&mut self, v: f32) -> Result<(), String> {
        match self {
            ColumnBuilder::Float32(b) => b.append_value(v),
            ColumnBuilder::Float64(b) => b.append_value(v as f64),
            other => return Err(format!("float value for a {other:?} column")),
        }
        Ok(())
    }

    #[inline]
    pub fn append_f64(&mut self, v: f64) -> Result<(), String> {
        match self {
            ColumnBuilder::Float64(b) => b.append_value(v),
            ColumnBuilder::Float32(b) => b.append_value(v as f32),
            other => return Err(format!("double value for a {other:?} column")),
        }
        Ok(())
    }

    /// Appends an unscaled decimal whose scale is the column's.
    #[inline]
    pub fn append_decimal(&mut self, unscaled: i256) -> Result<(), String> {
        match self {
            ColumnBuilder::Decimal128(b, ..) => b.append_value(
                unscaled
                    .to_i128()
                    .ok_or_else(|| format!("decimal {unscaled} exceeds 128 bits"))?,
            ),
            ColumnBuilder::Decimal256(b, ..) => b.append_value(unscaled),
            other => return Err(format!("decimal value for a {other:?} column")),
        }
        Ok(())
    }

    /// Appends a date; zero dates become NULL.
    #[inline]
    pub fn append_date(&mut self, y: u32, m: u32, d: u32) -> Result<(), String> {
        match self {
            ColumnBuilder::Date32(b) => b.append_option(date_to_days(y, m, d)),
            other => return Err(format!("date value for a {other:?} column")),
        }
        Ok(())
    }

    /// Appends a `DATETIME` (wall clock) or a `TIMESTAMP` given in UTC; zero dates become NULL.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn append_datetime(
        &mut self,
        y: u32,
        mo: u32,
        d: u32,
        h: u32,
        mi: u32,
        s: u32,
        us: u32,
    ) -> Result<(), String> {
        match self {
            ColumnBuilder::Timestamp(b) | ColumnBuilder::TimestampUtc(b) => {
                b.append_option(datetime_to_micros(y, mo, d, h, mi, s, us))
            }
            other => return Err(format!("datetime value for a {other:?} column")),
        }
        Ok(())
    }

    /// Appends a `TIMESTAMP` given as seconds since the epoch; 0 is MySQL's zero timestamp.
    #[inline]
    pub fn append_epoch(&mut self, seconds: u32, micros: u32) -> Result<(), String> {
        match self {
            ColumnBuilder::TimestampUtc(b) => {
                if seconds == 0 && micros == 0 {
                    b.append_null()
                } else {
                    b.append_value(seconds as i64 * MICROS + micros as i64)
                }
            }
            other => return Err(format!("timestamp value for a {other:?} column")),
        }
        Ok(())
    }

    /// Appends a `TIME` as signed microseconds.
    #[inline]
    pub fn append_time_micros(&mut self, micros: i64) -> Result<(), String> {
        match self {
            ColumnBuilder::Duration(b) => b.append_value(micros),
            other => return Err(format!("time value for a {other:?} column")),
        }
        Ok(())
    }

    #[inline]
    pub fn append_str(&mut self, v: &str) -> Result<(), String> {
        match self {
            ColumnBuilder::Utf8(b) => b.append_value(v),
            other => return Err(format!("text value for a {other:?} column")),
        }
        Ok(())
    }

    /// Appends bytes, zero-padded to `pad_to` (for `BINARY(n)`).
    #[inline]
    pub fn append_bytes(&mut self, v: &[u8], pad_to: Option<usize>) -> Result<(), String> {
        match self {
            ColumnBuilder::Binary(b) => match pad_to {
                Some(n) if v.len() < n => {
                    let mut padded = Vec::with_capacity(n);
                    padded.extend_from_slice(v);
                    padded.resize(n, 0);
                    b.append_value(&padded)
                }
                _ => b.append_value(v),
            },
            other => return Err(format!("binary value for a {other:?} column")),
        }
        Ok(())
    }

    /// Finishes the column into an array (the builder is reset and reusable).
    pub fn finish(&mut self) -> ArrayRef {
        use ColumnBuilder as B;
        match self {
            B::Int8(b) => Arc::new(b.finish()),
            B::Int16(b) => Arc::new(b.finish()),
            B::Int32(b) => Arc::new(b.finish()),
            B::Int64(b) => Arc::new(b.finish()),
            B::UInt8(b) => Arc::new(b.finish()),
            B::UInt16(b) => Arc::new(b.finish()),
            B::UInt32(b) => Arc::new(b.finish()),
            B::UInt64(b) => Arc::new(b.finish()),
            B::Float32(b) => Arc::new(b.finish()),
            B::Float64(b) => Arc::new(b.finish()),
            B::Decimal128(b, p, s) => Arc::new(
                b.finish()
                    .with_precision_and_scale(*p, *s)
                    .expect("precision and scale were validated when the kind was built"),
            ),
            B::Decimal256(b, p, s) => Arc::new(
                b.finish()
                    .with_precision_and_scale(*p, *s)
                    .expect("precision and scale were validated when the kind was built"),
            ),
            B::Date32(b) => Arc::new(b.finish()),
            B::Duration(b) => Arc::new(b.finish()),
            B::Timestamp(b) => Arc::new(b.finish()),
            B::TimestampUtc(b) => Arc::new(b.finish().with_timezone("UTC")),
            B::Utf8(b) => Arc::new(b.finish()),
            B::Binary(b) => Arc::new(b.finish()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_match_known_epoch_days() {
        assert_eq!(date_to_days(1970, 1, 1), Some(0));
        assert_eq!(date_to_days(2000, 3, 1), Some(11017));
        assert_eq!(date_to_days(1, 1, 1), Some(-719162));
        assert_eq!(date_to_days(9999, 12, 31), Some(2932896));
        assert_eq!(date_to_days(0, 0, 0), None);
        assert_eq!(date_to_days(2020, 0, 5), None);
    }

    #[test]
    fn decimal_text_scales_exactly() {
        assert_eq!(
            parse_decimal_text("-12.5", 3).unwrap(),
            i256::from_i128(-12500)
        );
        assert_eq!(parse_decimal_text("0.000", 3).unwrap(), i256::ZERO);
        assert_eq!(parse_decimal_text("7", 0).unwrap(), i256::from_i128(7));
        assert!(parse_decimal_text("1.2345", 2).is_err());
        assert!(parse_decimal_text("abc", 2).is_err());
        let big = format!("{}.{}", "9".repeat(35), "9".repeat(30));
        let v = parse_decimal_text(&big, 30).unwrap();
        assert_eq!(v.to_string(), "9".repeat(65));
    }

    #[test]
    fn set_and_bit_helpers() {
        let labels: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let mut out = String::new();
        set_labels(&labels, 0b101, &mut out).unwrap();
        assert_eq!(out, "a,c");
        assert!(set_labels(&labels, 0b1000, &mut out).is_err());
        assert_eq!(bit_value(&[0xff; 8]).unwrap(), u64::MAX);
        assert_eq!(bit_value(&[1, 0]).unwrap(), 256);
    }

    #[test]
    fn latin1_is_cp1252() {
        let mut s = String::new();
        assert_eq!(
            decode_text(Charset::Latin1, b"caf\xe9 \x80", &mut s).unwrap(),
            "café €"
        );
    }
}
