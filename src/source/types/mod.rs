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

mod builder;

use std::sync::Arc;

use arrow::datatypes::{i256, DataType, Field, TimeUnit};

pub use builder::ColumnBuilder;

/// Field metadata key holding the column's MySQL type (`bigint unsigned`, `json`, ...).
pub const MYSQL_TYPE_KEY: &str = "mysql.type";

/// Largest DECIMAL precision that fits Arrow's `Decimal128`.
const DECIMAL128_MAX_PRECISION: u8 = 38;

/// Microseconds per second.
pub(crate) const MICROS: i64 = 1_000_000;

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

/// The civil date of a day count since 1970-01-01 (inverse of [`date_to_days`]).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    (y, m, d)
}

/// The value at `row` of a column of our canonical types as a MySQL parameter, for sending a
/// captured value back to the server (e.g. to compare it under the column's collation).
pub fn arrow_to_mysql(array: &dyn arrow::array::Array, row: usize) -> mysql_async::Value {
    use arrow::array::AsArray;
    use arrow::datatypes as t;
    use mysql_async::Value;
    if array.is_null(row) {
        return Value::NULL;
    }
    let datetime = |micros: i64| {
        let (days, rem) = (
            micros.div_euclid(86_400 * MICROS),
            micros.rem_euclid(86_400 * MICROS),
        );
        let (y, m, d) = civil_from_days(days);
        let secs = rem / MICROS;
        Value::Date(
            y as u16,
            m as u8,
            d as u8,
            (secs / 3600) as u8,
            (secs / 60 % 60) as u8,
            (secs % 60) as u8,
            (rem % MICROS) as u32,
        )
    };
    match array.data_type() {
        DataType::Int8 => Value::Int(array.as_primitive::<t::Int8Type>().value(row) as i64),
        DataType::Int16 => Value::Int(array.as_primitive::<t::Int16Type>().value(row) as i64),
        DataType::Int32 => Value::Int(array.as_primitive::<t::Int32Type>().value(row) as i64),
        DataType::Int64 => Value::Int(array.as_primitive::<t::Int64Type>().value(row)),
        DataType::UInt8 => Value::UInt(array.as_primitive::<t::UInt8Type>().value(row) as u64),
        DataType::UInt16 => Value::UInt(array.as_primitive::<t::UInt16Type>().value(row) as u64),
        DataType::UInt32 => Value::UInt(array.as_primitive::<t::UInt32Type>().value(row) as u64),
        DataType::UInt64 => Value::UInt(array.as_primitive::<t::UInt64Type>().value(row)),
        DataType::Float32 => Value::Float(array.as_primitive::<t::Float32Type>().value(row)),
        DataType::Float64 => Value::Double(array.as_primitive::<t::Float64Type>().value(row)),
        DataType::Decimal128(_, _) | DataType::Decimal256(_, _) => Value::Bytes(
            arrow::util::display::array_value_to_string(array, row)
                .unwrap_or_default()
                .into_bytes(),
        ),
        DataType::Date32 => {
            let (y, m, d) =
                civil_from_days(array.as_primitive::<t::Date32Type>().value(row) as i64);
            Value::Date(y as u16, m as u8, d as u8, 0, 0, 0, 0)
        }
        DataType::Timestamp(_, _) => datetime(
            array
                .as_primitive::<t::TimestampMicrosecondType>()
                .value(row),
        ),
        DataType::Duration(_) => {
            let v = array
                .as_primitive::<t::DurationMicrosecondType>()
                .value(row);
            let a = v.unsigned_abs();
            let secs = a / MICROS as u64;
            Value::Time(
                v < 0,
                (secs / 86_400) as u32,
                (secs / 3600 % 24) as u8,
                (secs / 60 % 60) as u8,
                (secs % 60) as u8,
                (a % MICROS as u64) as u32,
            )
        }
        DataType::Utf8 => Value::Bytes(array.as_string::<i32>().value(row).as_bytes().to_vec()),
        DataType::Binary => Value::Bytes(array.as_binary::<i32>().value(row).to_vec()),
        _ => Value::Bytes(
            arrow::util::display::array_value_to_string(array, row)
                .unwrap_or_default()
                .into_bytes(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_from_days_inverts_days_from_civil() {
        for (y, m, d) in [
            (1970, 1, 1),
            (2000, 2, 29),
            (1, 1, 1),
            (9999, 12, 31),
            (1969, 12, 31),
        ] {
            let days = date_to_days(y as u32, m, d).unwrap() as i64;
            assert_eq!(civil_from_days(days), (y, m, d));
        }
    }

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
