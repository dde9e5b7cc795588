//! The layout of one column's value in a row image, and decoding it into Arrow.
//!
//! A [`Wire`] is read from the table map (type byte plus metadata) once per table; decoding a
//! value is then a match on it and a bounded read from a [`Cursor`]. Every read is
//! bounds-checked: malformed or truncated images are errors, never panics or misreads.
//! Conversions that must agree with the snapshot path go through [`ColumnBuilder`].

use mysql_async::binlog::events::TableMapEvent;
use mysql_async::consts::ColumnType;

use super::cursor::{Cursor, RowsError};
use super::decimal::{read_decimal, Unscaled};
use super::mysql_json;
use crate::change::schema::{Charset, ColumnKind};
use crate::source::types::{bit_value, decode_text, set_labels, time_to_micros, ColumnBuilder};

/// How one column's value is laid out in a row image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Tiny,
    Short,
    Int24,
    Long,
    LongLong,
    Float,
    Double,
    NewDecimal {
        precision: u8,
        scale: u8,
    },
    Date,
    /// Pre-5.6 `TIME`: 3-byte integer HHMMSS.
    TimeOld,
    Time2 {
        fsp: u8,
    },
    /// Pre-5.6 `DATETIME`: 8-byte integer YYYYMMDDHHMMSS.
    DateTimeOld,
    DateTime2 {
        fsp: u8,
    },
    /// Pre-5.6 `TIMESTAMP`: 4 bytes little-endian seconds.
    TimestampOld,
    Timestamp2 {
        fsp: u8,
    },
    Year,
    /// `VARCHAR`, `CHAR`, `BINARY`, `VARBINARY`: a 1- or 2-byte length, then the bytes.
    VarLen {
        prefix: u8,
        max_len: u16,
    },
    Enum {
        pack: u8,
    },
    Set {
        pack: u8,
    },
    Bit {
        bits: u16,
    },
    /// `BLOB`/`TEXT` (and MariaDB `JSON`): a 1- to 4-byte length, then the bytes.
    Blob {
        prefix: u8,
    },
    /// MySQL `JSON`: a length, then MySQL's binary JSON.
    Json {
        prefix: u8,
    },
    Geometry {
        prefix: u8,
    },
    Vector {
        prefix: u8,
    },
}

impl Wire {
    /// Reads the layout of column `i` from the table map.
    pub(super) fn from_table_map(tme: &TableMapEvent<'_>, i: usize) -> Result<Wire, String> {
        let raw = tme
            .get_raw_column_type(i)
            .map_err(|e| {
                format!(
                    "column {i}: unknown column type {e:?} (compressed columns are not supported)"
                )
            })?
            .ok_or_else(|| format!("column {i} is missing from the table map"))?;
        let meta = tme.get_column_metadata(i).unwrap_or(&[]);
        let m = |k: usize| meta.get(k).copied().unwrap_or(0);
        use ColumnType as T;
        Ok(match raw {
            T::MYSQL_TYPE_TINY => Wire::Tiny,
            T::MYSQL_TYPE_SHORT => Wire::Short,
            T::MYSQL_TYPE_INT24 => Wire::Int24,
            T::MYSQL_TYPE_LONG => Wire::Long,
            T::MYSQL_TYPE_LONGLONG => Wire::LongLong,
            T::MYSQL_TYPE_FLOAT => Wire::Float,
            T::MYSQL_TYPE_DOUBLE => Wire::Double,
            T::MYSQL_TYPE_NEWDECIMAL => Wire::NewDecimal {
                precision: m(0),
                scale: m(1),
            },
            T::MYSQL_TYPE_DATE | T::MYSQL_TYPE_NEWDATE => Wire::Date,
            T::MYSQL_TYPE_TIME => Wire::TimeOld,
            T::MYSQL_TYPE_TIME2 => Wire::Time2 { fsp: m(0) },
            T::MYSQL_TYPE_DATETIME => Wire::DateTimeOld,
            T::MYSQL_TYPE_DATETIME2 => Wire::DateTime2 { fsp: m(0) },
            T::MYSQL_TYPE_TIMESTAMP => Wire::TimestampOld,
            T::MYSQL_TYPE_TIMESTAMP2 => Wire::Timestamp2 { fsp: m(0) },
            T::MYSQL_TYPE_YEAR => Wire::Year,
            T::MYSQL_TYPE_VARCHAR | T::MYSQL_TYPE_VAR_STRING => {
                let max_len = u16::from_le_bytes([m(0), m(1)]);
                Wire::VarLen {
                    prefix: if max_len > 255 { 2 } else { 1 },
                    max_len,
                }
            }
            T::MYSQL_TYPE_STRING | T::MYSQL_TYPE_ENUM | T::MYSQL_TYPE_SET => {
                // Real type and length share two bytes: the top bits of a long CHAR's length
                // are stored, inverted, in bits 4-5 of the type byte.
                let (b0, b1) = (m(0), m(1));
                let (real, len) = if b0 != 0 && (b0 & 0x30) != 0x30 {
                    (
                        b0 | 0x30,
                        (b1 as u16) | ((((b0 & 0x30) ^ 0x30) as u16) << 4),
                    )
                } else {
                    (if b0 == 0 { raw as u8 } else { b0 }, b1 as u16)
                };
                match real {
                    247 => Wire::Enum { pack: len as u8 },
                    248 => Wire::Set { pack: len as u8 },
                    _ => Wire::VarLen {
                        prefix: if len > 255 { 2 } else { 1 },
                        max_len: len,
                    },
                }
            }
            T::MYSQL_TYPE_BIT => Wire::Bit {
                bits: m(1) as u16 * 8 + m(0) as u16,
            },
            T::MYSQL_TYPE_TINY_BLOB
            | T::MYSQL_TYPE_MEDIUM_BLOB
            | T::MYSQL_TYPE_LONG_BLOB
            | T::MYSQL_TYPE_BLOB => Wire::Blob { prefix: m(0) },
            T::MYSQL_TYPE_JSON => Wire::Json { prefix: m(0) },
            T::MYSQL_TYPE_GEOMETRY => Wire::Geometry { prefix: m(0) },
            T::MYSQL_TYPE_VECTOR => Wire::Vector { prefix: m(0) },
            other => {
                return Err(format!(
                    "column {i}: binlog column type {other:?} is not supported"
                ))
            }
        })
    }

    /// Whether a value laid out like this can be decoded into `kind`.
    pub(super) fn fits(&self, kind: &ColumnKind) -> bool {
        use ColumnKind as K;
        match (self, kind) {
            (Wire::Tiny, K::Int { bits: 8, .. })
            | (Wire::Short, K::Int { bits: 16, .. })
            | (Wire::Int24, K::Int { bits: 24, .. })
            | (Wire::Long, K::Int { bits: 32, .. })
            | (Wire::LongLong, K::Int { bits: 64, .. })
            | (Wire::Float, K::Float)
            | (Wire::Double, K::Double)
            | (Wire::Date, K::Date)
            | (Wire::TimeOld, K::Time { .. })
            | (Wire::DateTimeOld, K::DateTime { .. })
            | (Wire::TimestampOld, K::Timestamp { .. })
            | (Wire::Year, K::Year)
            | (Wire::Enum { .. }, K::Enum { .. })
            | (Wire::Set { .. }, K::Set { .. })
            | (Wire::VarLen { .. }, K::Text { .. } | K::Binary { .. })
            | (Wire::Blob { .. }, K::Text { .. } | K::Binary { .. } | K::Json)
            | (Wire::Json { .. }, K::Json)
            | (Wire::Geometry { .. }, K::Geometry)
            | (Wire::Vector { .. }, K::Vector) => true,
            (
                Wire::NewDecimal { precision, scale },
                K::Decimal {
                    precision: p,
                    scale: s,
                },
            ) => precision == p && scale == s,
            (Wire::Time2 { fsp }, K::Time { fsp: f })
            | (Wire::DateTime2 { fsp }, K::DateTime { fsp: f })
            | (Wire::Timestamp2 { fsp }, K::Timestamp { fsp: f }) => fsp == f,
            (Wire::Bit { bits }, K::Bit { bits: b }) => bits == b,
            _ => false,
        }
    }
}

/// Sign-extends the low `bits` bits of `v`.
#[inline]
fn sign_extend(v: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((v << shift) as i64) >> shift
}

/// Microseconds of a fractional-seconds field of `fsp` digits, stored big-endian in
/// `(fsp + 1) / 2` bytes.
#[inline]
fn read_frac(cur: &mut Cursor<'_>, fsp: u8) -> Result<u32, RowsError> {
    Ok(match fsp {
        0 => 0,
        1 | 2 => cur.uint_be(1)? as u32 * 10_000,
        3 | 4 => cur.uint_be(2)? as u32 * 100,
        _ => cur.uint_be(3)? as u32,
    })
}

#[inline]
pub(super) fn decode_value(
    wire: Wire,
    kind: &ColumnKind,
    cur: &mut Cursor<'_>,
    b: &mut ColumnBuilder,
    scratch: &mut String,
) -> Result<(), RowsError> {
    let unsigned = matches!(kind, ColumnKind::Int { unsigned: true, .. });
    let int = |b: &mut ColumnBuilder, raw: u64, bits: u32| {
        if unsigned {
            b.append_u64(raw)
        } else {
            b.append_i64(sign_extend(raw, bits))
        }
    };
    match wire {
        Wire::Tiny => int(b, cur.uint_le(1)?, 8)?,
        Wire::Short => int(b, cur.uint_le(2)?, 16)?,
        Wire::Int24 => int(b, cur.uint_le(3)?, 24)?,
        Wire::Long => int(b, cur.uint_le(4)?, 32)?,
        Wire::LongLong => int(b, cur.uint_le(8)?, 64)?,
        Wire::Float => b.append_f32(f32::from_bits(cur.uint_le(4)? as u32))?,
        Wire::Double => b.append_f64(f64::from_bits(cur.uint_le(8)?))?,
        Wire::NewDecimal { precision, scale } => match read_decimal(cur, precision, scale)? {
            Unscaled::Narrow(v) => b.append_decimal128(v)?,
            Unscaled::Wide(v) => b.append_decimal(v)?,
        },
        Wire::Date => {
            let v = cur.uint_le(3)? as u32;
            b.append_date(v >> 9, (v >> 5) & 15, v & 31)?
        }
        Wire::TimeOld => {
            let v = sign_extend(cur.uint_le(3)?, 24);
            let (neg, a) = (v < 0, v.unsigned_abs());
            b.append_time_micros(time_to_micros(
                neg,
                (a / 10_000) as u32,
                (a / 100 % 100) as u32,
                (a % 100) as u32,
                0,
            )?)?
        }
        Wire::Time2 { fsp } => b.append_time_micros(read_time2(cur, fsp)?)?,
        Wire::DateTimeOld => {
            let v = cur.uint_le(8)?;
            let (date, time) = (v / 1_000_000, v % 1_000_000);
            b.append_datetime(
                (date / 10_000) as u32,
                (date / 100 % 100) as u32,
                (date % 100) as u32,
                (time / 10_000) as u32,
                (time / 100 % 100) as u32,
                (time % 100) as u32,
                0,
            )?
        }
        Wire::DateTime2 { fsp } => {
            // DATETIME2 is never negative: its sign bit is always set on the wire.
            let packed = (cur.uint_be(5)? as i64)
                .checked_sub(0x80_0000_0000)
                .filter(|p| *p >= 0)
                .ok_or_else(|| RowsError::Value("negative DATETIME2 value".into()))?;
            let frac = read_frac(cur, fsp)?;
            let ymd = packed >> 17;
            let ym = ymd >> 5;
            let hms = packed % (1 << 17);
            b.append_datetime(
                (ym / 13) as u32,
                (ym % 13) as u32,
                (ymd % 32) as u32,
                (hms >> 12) as u32,
                ((hms >> 6) % 64) as u32,
                (hms % 64) as u32,
                frac,
            )?
        }
        Wire::TimestampOld => b.append_epoch(cur.uint_le(4)? as u32, 0)?,
        Wire::Timestamp2 { fsp } => {
            let secs = cur.uint_be(4)? as u32;
            let frac = read_frac(cur, fsp)?;
            b.append_epoch(secs, frac)?
        }
        Wire::Year => {
            let y = cur.uint_le(1)?;
            b.append_i64(if y == 0 { 0 } else { 1900 + y as i64 })?
        }
        Wire::VarLen { prefix, .. } => {
            let len = cur.uint_le(prefix as usize)? as usize;
            let bytes = cur.take(len)?;
            append_string(kind, bytes, b, scratch)?
        }
        Wire::Enum { pack } => {
            let idx = cur.uint_le(pack as usize)? as usize;
            let ColumnKind::Enum { labels } = kind else {
                return Err(RowsError::Value("enum value for a non-enum column".into()));
            };
            // Index 0 is the empty string MySQL stores for an invalid value.
            let label = match idx {
                0 => "",
                i => labels
                    .get(i - 1)
                    .ok_or_else(|| format!("enum index {i} beyond {} labels", labels.len()))?,
            };
            b.append_str(label)?
        }
        Wire::Set { pack } => {
            let mask = cur.uint_le(pack as usize)?;
            let ColumnKind::Set { labels } = kind else {
                return Err(RowsError::Value("set value for a non-set column".into()));
            };
            set_labels(labels, mask, scratch)?;
            b.append_str(scratch)?
        }
        Wire::Bit { bits } => {
            let bytes = cur.take((bits as usize).div_ceil(8))?;
            b.append_u64(bit_value(bytes)?)?
        }
        Wire::Blob { prefix } | Wire::Geometry { prefix } | Wire::Vector { prefix } => {
            let len = cur.uint_le(prefix as usize)? as usize;
            let bytes = cur.take(len)?;
            append_string(kind, bytes, b, scratch)?
        }
        Wire::Json { prefix } => {
            let len = cur.uint_le(prefix as usize)? as usize;
            let bytes = cur.take(len)?;
            scratch.clear();
            if bytes.is_empty() {
                // An empty JSON value is how MySQL logs a JSON null literal in some paths.
                scratch.push_str("null");
            } else {
                mysql_json::binary_json_to_text(bytes, scratch)
                    .map_err(|e| format!("binary JSON: {e}"))?;
            }
            b.append_str(scratch)?
        }
    }
    Ok(())
}

#[inline]
fn append_string(
    kind: &ColumnKind,
    bytes: &[u8],
    b: &mut ColumnBuilder,
    scratch: &mut String,
) -> Result<(), String> {
    match kind {
        ColumnKind::Text { charset } => b.append_str(decode_text(*charset, bytes, scratch)?),
        ColumnKind::Json => b.append_str(decode_text(Charset::Utf8, bytes, scratch)?),
        ColumnKind::Binary { pad_to } => b.append_bytes(bytes, *pad_to),
        _ => b.append_bytes(bytes, None),
    }
}

/// `TIME2`: 3 bytes big-endian `(hour << 12 | minute << 6 | second) + 0x800000`, then the
/// fraction; negative values borrow from the integer part when they have a fraction.
fn read_time2(cur: &mut Cursor<'_>, fsp: u8) -> Result<i64, RowsError> {
    let packed: i64 = match fsp {
        0 => (cur.uint_be(3)? as i64 - 0x80_0000) << 24,
        1 | 2 => {
            let mut int = cur.uint_be(3)? as i64 - 0x80_0000;
            let mut frac = cur.uint_be(1)? as i64;
            if int < 0 && frac != 0 {
                int += 1;
                frac -= 0x100;
            }
            (int << 24) + frac * 10_000
        }
        3 | 4 => {
            let mut int = cur.uint_be(3)? as i64 - 0x80_0000;
            let mut frac = cur.uint_be(2)? as i64;
            if int < 0 && frac != 0 {
                int += 1;
                frac -= 0x10000;
            }
            (int << 24) + frac * 100
        }
        _ => cur.uint_be(6)? as i64 - 0x8000_0000_0000,
    };
    let (neg, a) = (packed < 0, packed.unsigned_abs());
    let hms = a >> 24;
    Ok(time_to_micros(
        neg,
        ((hms >> 12) % (1 << 10)) as u32,
        ((hms >> 6) % (1 << 6)) as u32,
        (hms % (1 << 6)) as u32,
        (a % (1 << 24)) as u32,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, ArrayRef, AsArray};
    use arrow::datatypes::UInt64Type;
    use std::sync::Arc;

    #[test]
    fn time2_handles_negative_fractions() {
        // -00:00:00.5 with fsp 1: int part -1 + frac 0x100-50 → borrow.
        let int = (0x80_0000i64 - 1) as u32;
        let bytes = [
            (int >> 16) as u8,
            (int >> 8) as u8,
            int as u8,
            (0x100 - 50) as u8,
        ];
        let mut c = Cursor::new(&bytes);
        assert_eq!(read_time2(&mut c, 1).unwrap(), -500_000);
        // 838:59:59 with fsp 0
        let v = 0x80_0000u32 + ((838 << 12) | (59 << 6) | 59);
        let bytes = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
        let mut c = Cursor::new(&bytes);
        assert_eq!(
            read_time2(&mut c, 0).unwrap(),
            ((838 * 60 + 59) * 60 + 59) * 1_000_000
        );
    }

    #[test]
    fn truncated_images_are_errors_not_panics() {
        let mut c = Cursor::new(&[1, 2]);
        assert!(c.uint_le(4).is_err());
    }

    /// Decodes one value of `wire` into a fresh builder of `kind`.
    fn decode_one(wire: Wire, kind: &ColumnKind, bytes: &[u8]) -> Result<ArrayRef, RowsError> {
        let mut b = ColumnBuilder::new(kind, 1);
        let mut c = Cursor::new(bytes);
        decode_value(wire, kind, &mut c, &mut b, &mut String::new())?;
        Ok(b.finish()?)
    }

    #[test]
    fn zero_and_impossible_temporal_images() {
        // DATE: day | month << 5 | year << 9, 3 bytes little-endian.
        let date = |y: u32, m: u32, d: u32| {
            let v = d | m << 5 | y << 9;
            decode_one(Wire::Date, &ColumnKind::Date, &v.to_le_bytes()[..3])
        };
        assert_eq!(date(0, 0, 0).unwrap().null_count(), 1);
        assert_eq!(date(2024, 2, 0).unwrap().null_count(), 1);
        assert_eq!(date(2024, 2, 31).unwrap().null_count(), 1);
        assert_eq!(date(2024, 2, 29).unwrap().null_count(), 0);
        assert!(date(2024, 13, 1).is_err());
        assert!(date(12_000, 1, 1).is_err());
        // DATETIME2 of all zero bits but the sign: the zero datetime.
        let kind = ColumnKind::DateTime { fsp: 0 };
        let zero = decode_one(Wire::DateTime2 { fsp: 0 }, &kind, &[0x80, 0, 0, 0, 0]).unwrap();
        assert_eq!(zero.null_count(), 1);
        assert!(decode_one(Wire::DateTime2 { fsp: 0 }, &kind, &[0x7f, 0, 0, 0, 0]).is_err());
        // TIMESTAMP2 of 0 seconds is the zero timestamp; a fraction of 10^6 µs is corrupt.
        let kind = ColumnKind::Timestamp { fsp: 6 };
        let wire = Wire::Timestamp2 { fsp: 6 };
        let zero = decode_one(wire, &kind, &[0, 0, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(zero.null_count(), 1);
        assert!(decode_one(wire, &kind, &[0, 0, 0, 1, 0x0f, 0x42, 0x40]).is_err());
        // TIME2 hours beyond 838 are corrupt.
        let v = 0x80_0000u32 + (900 << 12);
        let bytes = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
        let kind = ColumnKind::Time { fsp: 0 };
        assert!(decode_one(Wire::Time2 { fsp: 0 }, &kind, &bytes).is_err());
    }

    #[test]
    fn enum_and_set_extremes() {
        let labels: Arc<[String]> = (0..300).map(|i| format!("v{i}")).collect();
        let kind = ColumnKind::Enum { labels };
        let wire = Wire::Enum { pack: 2 };
        let text = |a: ArrayRef| a.as_string::<i32>().value(0).to_string();
        // Index 0 is the '' MySQL stores for an invalid value; 300 is the last label.
        assert_eq!(text(decode_one(wire, &kind, &[0, 0]).unwrap()), "");
        assert_eq!(text(decode_one(wire, &kind, &[44, 1]).unwrap()), "v299");
        assert!(decode_one(wire, &kind, &[45, 1]).is_err());
        let labels: Arc<[String]> = (0..64).map(|i| format!("s{i}")).collect();
        let all = labels.join(",");
        let kind = ColumnKind::Set { labels };
        let got = decode_one(Wire::Set { pack: 8 }, &kind, &[0xff; 8]).unwrap();
        assert_eq!(text(got), all);
        // BIT(64) all ones.
        let got = decode_one(
            Wire::Bit { bits: 64 },
            &ColumnKind::Bit { bits: 64 },
            &[0xff; 8],
        );
        assert_eq!(got.unwrap().as_primitive::<UInt64Type>().value(0), u64::MAX);
    }
}
