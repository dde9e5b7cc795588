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
//! | `TINYINT`…`BIGINT` (signed / `UNSIGNED`, `ZEROFILL`) | `Int8`…`Int64` / `UInt8`…`UInt64` (`MEDIUMINT` → 32 bits) |
//! | `DECIMAL(p,s)` | `Decimal128(p,s)` for p ≤ 38, else `Decimal256(p,s)` |
//! | `FLOAT` / `DOUBLE` | `Float32` / `Float64`, bit for bit (denormals included) |
//! | `DATE` | `Date32`; dates with no calendar meaning are NULL |
//! | `TIME(fsp)` | `Duration(µs)`: signed, up to ±838:59:59.999999 |
//! | `DATETIME(fsp)` | `Timestamp(µs)` without zone (wall clock); dates with no calendar meaning are NULL |
//! | `TIMESTAMP(fsp)` | `Timestamp(µs, "UTC")` (an instant); the zero timestamp is NULL |
//! | `YEAR` | `Int16` (0 for the zero year) |
//! | `CHAR`/`VARCHAR`/`TEXT`, `ENUM`, `SET`, `JSON` | `Utf8` (labels for `ENUM`/`SET`, JSON text) |
//! | `BINARY`/`VARBINARY`/`BLOB`, `GEOMETRY`, `VECTOR` | `Binary` |
//! | `BIT(n)` | `UInt64` |
//!
//! The kinds without parameters (`FLOAT`, `DOUBLE`, `DATE`, `YEAR`, `JSON`, spatial types,
//! `VECTOR`, MariaDB's own types) are rows of the one table of kinds, `change::kinds`, which the
//! readers here and every later stage take their facts from.
//!
//! "No calendar meaning": zero dates (`0000-00-00`), partly zero dates (`2024-02-00`) and
//! days past the end of their month (`2024-02-31`, stored under `ALLOW_INVALID_DATES`). They
//! have no Arrow value, so `DATE`, `DATETIME` and `TIMESTAMP` fields are always nullable, even
//! for `NOT NULL` columns: the Arrow schema of a table never depends on the rows it holds.
//!
//! Each field carries the column's MySQL type in its metadata under [`MYSQL_TYPE_KEY`], so later
//! stages (e.g. the PostgreSQL front end) can tell JSON from text.

mod builder;
mod temporal;

use arrow::datatypes::{i256, DataType};

use crate::change::schema::Charset;
pub use crate::change::schema::MYSQL_TYPE_KEY;

pub use builder::{
    append_padded, batch_of, decimal128_fits, decimal256_fits, epoch_to_micros, finish_batch,
    padded, ColumnBuilder, FinishError,
};
pub(crate) use temporal::MICROS;
pub use temporal::{
    civil_from_days, date_to_days, datetime_to_micros, time_parts_to_micros, time_to_micros,
};

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

/// The common case of [`parse_decimal_text`], as a server sends it: `-?digits[.digits]` with
/// at most `scale` fraction digits and at most 38 digits once scaled, read in one pass into an
/// i128. `None` for anything else (a sign `+`, spaces, more digits, bad text), which the
/// general parser then takes or rejects with its error.
#[inline]
pub fn parse_decimal_fast(text: &[u8], scale: u8) -> Option<i128> {
    let (neg, rest) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (mut v, mut digits, mut point) = (0i128, 0usize, None);
    for (i, &b) in rest.iter().enumerate() {
        match b {
            // 38 digits fit an i128; more go to the general parser.
            b'0'..=b'9' if digits < 38 => {
                v = v * 10 + (b - b'0') as i128;
                digits += 1;
            }
            b'.' if point.is_none() => point = Some(i),
            _ => return None,
        }
    }
    let fraction = point.map_or(0, |p| rest.len() - p - 1);
    let scale = scale as usize;
    if digits == 0 || fraction > scale || digits + (scale - fraction) > 38 {
        return None;
    }
    let v = v * 10i128.pow((scale - fraction) as u32);
    Some(if neg { -v } else { v })
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
    let frac_digits = frac_part.bytes().chain(std::iter::repeat(b'0'));
    let digits = int_part.bytes().chain(frac_digits.take(scale as usize));
    // Up to 38 digits fit an i128 with no check per digit; i256 arithmetic is several times
    // slower and only DECIMAL(39..65) needs it.
    if int_part.len() + scale as usize <= 38 {
        let v = digits.fold(0i128, |v, b| v * 10 + (b - b'0') as i128);
        return Ok(i256::from_i128(if neg { -v } else { v }));
    }
    let ten = i256::from_i128(10);
    let mut v = i256::ZERO;
    for b in digits {
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
    // A SET has at most 64 members; more labels (a corrupt definition) take no bit.
    for (i, label) in labels.iter().take(64).enumerate() {
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
        DataType::Timestamp(t::TimeUnit::Microsecond, _) => datetime(
            array
                .as_primitive::<t::TimestampMicrosecondType>()
                .value(row),
        ),
        DataType::Duration(t::TimeUnit::Microsecond) => {
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
    use crate::change::kinds::SimpleKind;
    use crate::change::schema::ColumnKind;
    use std::sync::Arc;

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
        // The fast path agrees with the general parser wherever it answers, and leaves it
        // every case it does not take.
        let cases = [
            "0",
            "-0",
            "12345.25",
            "-12345.25",
            "7.5",
            ".5",
            "5.",
            "-.5",
            "1.2",
            "1.200",
            "1.2345",
            "+1.5",
            " 1.5",
            "1..5",
            "1.5.",
            "-",
            ".",
            "",
            "abc",
            "1e5",
            "--1",
            "99999999999999999999999999999999999999",
            "999999999999999999999999999999999999.99",
            "9999999999999999999999999999999999999.99",
            "999999999999999999999999999999999999999",
        ];
        for text in cases {
            for scale in [0u8, 2, 3, 10] {
                let general = parse_decimal_text(text, scale);
                match parse_decimal_fast(text.as_bytes(), scale) {
                    Some(v) => assert_eq!(general, Ok(i256::from_i128(v)), "{text} scale {scale}"),
                    None => {
                        let fraction = text.split_once('.').map_or(0, |(_, f)| f.len());
                        let digits = text.bytes().filter(u8::is_ascii_digit).count();
                        let scaled = digits + (scale as usize).saturating_sub(fraction);
                        assert!(
                            general.is_err()
                                || text.starts_with(['+', ' '])
                                || fraction > scale as usize
                                || scaled > 38,
                            "{text} scale {scale}: the fast path declined a plain decimal"
                        )
                    }
                }
            }
        }
        assert_eq!(parse_decimal_fast(b"12345.25", 2), Some(1234525));
        assert_eq!(parse_decimal_fast(b"-7.5", 3), Some(-7500));
        // The last width of the i128 path and the first of the i256 path.
        let widest = format!("-{}.{}", "9".repeat(28), "9".repeat(10));
        assert_eq!(
            parse_decimal_text(&widest, 10).unwrap().to_string(),
            format!("-{}", "9".repeat(38))
        );
        let wider = format!("{}.{}", "9".repeat(29), "9".repeat(10));
        assert_eq!(
            parse_decimal_text(&wider, 10).unwrap().to_string(),
            "9".repeat(39)
        );
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
    fn a_set_of_64_members_and_bit_64_all_ones() {
        let labels: Vec<String> = (0..64).map(|i| format!("m{i}")).collect();
        let mut out = String::new();
        set_labels(&labels, u64::MAX, &mut out).unwrap();
        assert_eq!(out, labels.join(","));
        set_labels(&labels, 0, &mut out).unwrap();
        assert_eq!(out, "");
        // More labels than a SET can have never shift past bit 63.
        let too_many: Vec<String> = (0..70).map(|i| format!("m{i}")).collect();
        set_labels(&too_many, 1 << 63, &mut out).unwrap();
        assert_eq!(out, "m63");
        assert!(bit_value(&[0xff; 9]).is_err());
        assert_eq!(bit_value(&[]).unwrap(), 0);
    }

    #[test]
    fn kinds_outside_mysql_limits_are_refused() {
        let dec = |precision, scale| ColumnKind::Decimal { precision, scale };
        assert!(dec(65, 30).check().is_ok());
        assert!(dec(1, 0).check().is_ok());
        assert!(dec(0, 0).check().is_err());
        assert!(dec(66, 0).check().is_err());
        assert!(dec(10, 11).check().is_err());
        assert!(ColumnKind::Bit { bits: 65 }.check().is_err());
        assert!(ColumnKind::Time { fsp: 7 }.check().is_err());
        let labels: Arc<[String]> = (0..65).map(|i| i.to_string()).collect();
        assert!(ColumnKind::Set { labels }.check().is_err());
    }

    #[test]
    fn temporal_fields_are_always_nullable() {
        for kind in [
            ColumnKind::Simple(SimpleKind::Date),
            ColumnKind::DateTime { fsp: 6 },
            ColumnKind::Timestamp { fsp: 0 },
        ] {
            assert!(kind.field("c", false).is_nullable(), "{kind:?}");
        }
        for kind in [
            ColumnKind::Time { fsp: 6 },
            ColumnKind::Simple(SimpleKind::Year),
            ColumnKind::Bit { bits: 1 },
        ] {
            assert!(!kind.field("c", false).is_nullable(), "{kind:?}");
            assert!(kind.field("c", true).is_nullable(), "{kind:?}");
        }
    }

    #[test]
    fn latin1_is_cp1252() {
        let mut s = String::new();
        assert_eq!(
            decode_text(Charset::Latin1, b"caf\xe9 \x80", &mut s).unwrap(),
            "café €"
        );
        // 0x80-0x9F: Windows-1252 letters, and C1 controls for its five undefined bytes.
        let high: Vec<u8> = (0x80..=0x9f).collect();
        let text = decode_text(Charset::Latin1, &high, &mut s)
            .unwrap()
            .to_string();
        assert_eq!(text.chars().count(), 32);
        assert!(text.starts_with("€\u{81}‚ƒ"));
        assert!(text.ends_with("œ\u{9d}žŸ"));
        assert!(decode_text(Charset::Utf8, b"\xff", &mut s).is_err());
    }
}
