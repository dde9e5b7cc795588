//! The layout of one column's value in a row image, and decoding it into Arrow.
//!
//! A [`Layout`] is read from the table map (type byte plus metadata) once per table and compiled,
//! with the column's kind, into the column's decoding operation (see `columns`); the readers
//! here take one value's bytes off a [`Cursor`]. Every read is bounds-checked: malformed or
//! truncated images are errors, never panics or misreads. Conversions that must agree with the
//! snapshot path are the shared ones of `source::types`.

use crate::change::kinds::SimpleKind;
use mysql_async::binlog::events::TableMapEvent;
use mysql_async::consts::ColumnType;

use super::cursor::{Cursor, RowsError};
use crate::change::schema::ColumnKind;
use crate::source::types::{
    date_to_days, datetime_to_micros, epoch_to_micros, time_to_micros, MICROS,
};

/// How one column's value is laid out in a row image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
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

impl Layout {
    /// Reads the layout of column `i` from the table map.
    pub(super) fn from_table_map(tme: &TableMapEvent<'_>, i: usize) -> Result<Layout, String> {
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
            T::MYSQL_TYPE_TINY => Layout::Tiny,
            T::MYSQL_TYPE_SHORT => Layout::Short,
            T::MYSQL_TYPE_INT24 => Layout::Int24,
            T::MYSQL_TYPE_LONG => Layout::Long,
            T::MYSQL_TYPE_LONGLONG => Layout::LongLong,
            T::MYSQL_TYPE_FLOAT => Layout::Float,
            T::MYSQL_TYPE_DOUBLE => Layout::Double,
            T::MYSQL_TYPE_NEWDECIMAL => Layout::NewDecimal {
                precision: m(0),
                scale: m(1),
            },
            T::MYSQL_TYPE_DATE | T::MYSQL_TYPE_NEWDATE => Layout::Date,
            T::MYSQL_TYPE_TIME => Layout::TimeOld,
            T::MYSQL_TYPE_TIME2 => Layout::Time2 { fsp: m(0) },
            T::MYSQL_TYPE_DATETIME => Layout::DateTimeOld,
            T::MYSQL_TYPE_DATETIME2 => Layout::DateTime2 { fsp: m(0) },
            T::MYSQL_TYPE_TIMESTAMP => Layout::TimestampOld,
            T::MYSQL_TYPE_TIMESTAMP2 => Layout::Timestamp2 { fsp: m(0) },
            T::MYSQL_TYPE_YEAR => Layout::Year,
            T::MYSQL_TYPE_VARCHAR | T::MYSQL_TYPE_VAR_STRING => {
                let max_len = u16::from_le_bytes([m(0), m(1)]);
                Layout::VarLen {
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
                    247 => Layout::Enum { pack: len as u8 },
                    248 => Layout::Set { pack: len as u8 },
                    _ => Layout::VarLen {
                        prefix: if len > 255 { 2 } else { 1 },
                        max_len: len,
                    },
                }
            }
            T::MYSQL_TYPE_BIT => Layout::Bit {
                bits: m(1) as u16 * 8 + m(0) as u16,
            },
            T::MYSQL_TYPE_TINY_BLOB
            | T::MYSQL_TYPE_MEDIUM_BLOB
            | T::MYSQL_TYPE_LONG_BLOB
            | T::MYSQL_TYPE_BLOB => Layout::Blob { prefix: m(0) },
            T::MYSQL_TYPE_JSON => Layout::Json { prefix: m(0) },
            T::MYSQL_TYPE_GEOMETRY => Layout::Geometry { prefix: m(0) },
            T::MYSQL_TYPE_VECTOR => Layout::Vector { prefix: m(0) },
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
            (Layout::Tiny, K::Int { bits: 8, .. })
            | (Layout::Short, K::Int { bits: 16, .. })
            | (Layout::Int24, K::Int { bits: 24, .. })
            | (Layout::Long, K::Int { bits: 32, .. })
            | (Layout::LongLong, K::Int { bits: 64, .. })
            | (Layout::Float, K::Simple(SimpleKind::Float))
            | (Layout::Double, K::Simple(SimpleKind::Double))
            | (Layout::Date, K::Simple(SimpleKind::Date))
            | (Layout::TimeOld, K::Time { .. })
            | (Layout::DateTimeOld, K::DateTime { .. })
            | (Layout::TimestampOld, K::Timestamp { .. })
            | (Layout::Year, K::Simple(SimpleKind::Year))
            | (Layout::Enum { .. }, K::Enum { .. })
            | (Layout::Set { .. }, K::Set { .. })
            | (Layout::VarLen { .. }, K::Text { .. } | K::Binary { .. })
            | (
                Layout::Blob { .. },
                K::Text { .. } | K::Binary { .. } | K::Simple(SimpleKind::Json),
            )
            | (Layout::Json { .. }, K::Simple(SimpleKind::Json))
            | (Layout::Geometry { .. }, K::Simple(SimpleKind::Geometry))
            | (Layout::Vector { .. }, K::Simple(SimpleKind::Vector)) => true,
            (
                Layout::NewDecimal { precision, scale },
                K::Decimal {
                    precision: p,
                    scale: s,
                },
            ) => precision == p && scale == s,
            (Layout::Time2 { fsp }, K::Time { fsp: f })
            | (Layout::DateTime2 { fsp }, K::DateTime { fsp: f })
            | (Layout::Timestamp2 { fsp }, K::Timestamp { fsp: f }) => fsp == f,
            (Layout::Bit { bits }, K::Bit { bits: b }) => bits == b,
            (Layout::VarLen { max_len, .. }, K::Simple(simple)) => {
                simple.rendered_len() == Some(usize::from(*max_len))
            }
            _ => false,
        }
    }
}

/// Sign-extends the low `bits` bits of `v`.
#[inline]
pub(super) fn sign_extend(v: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((v << shift) as i64) >> shift
}

/// Microseconds of a fractional-seconds field of `fsp` digits, stored big-endian in
/// `(fsp + 1) / 2` bytes.
#[inline(always)]
fn read_frac(cur: &mut Cursor<'_>, fsp: u8) -> Result<u32, RowsError> {
    Ok(match fsp {
        0 => 0,
        1 | 2 => cur.array::<1>()?[0] as u32 * 10_000,
        3 | 4 => u16::from_be_bytes(cur.array()?) as u32 * 100,
        _ => {
            // Shifts rather than a 4-byte array of the 3 bytes: the array was stored byte by
            // byte and loaded whole, and profiles showed that load stalling (most likely on
            // store forwarding). The other short fields here are read the same way.
            let [a, b, c] = cur.array::<3>()?;
            (a as u32) << 16 | (b as u32) << 8 | c as u32
        }
    })
}

/// A length prefix of `bytes` bytes (1-4 for strings and blobs), little-endian.
#[inline(always)]
pub(super) fn read_len(cur: &mut Cursor<'_>, bytes: u8) -> Result<usize, RowsError> {
    Ok(match bytes {
        1 => cur.array::<1>()?[0] as usize,
        2 => u16::from_le_bytes(cur.array()?) as usize,
        _ => cur.uint_le(bytes as usize)? as usize,
    })
}

/// A 3-byte little-endian integer.
#[inline]
pub(super) fn read_u24(cur: &mut Cursor<'_>) -> Result<u32, RowsError> {
    let [a, b, c] = cur.array::<3>()?;
    Ok((c as u32) << 16 | (b as u32) << 8 | a as u32)
}

/// `DATE`: `day | month << 5 | year << 9` in 3 bytes; `None` for dates with no calendar meaning.
#[inline]
pub(super) fn read_date(cur: &mut Cursor<'_>) -> Result<Option<i32>, RowsError> {
    let v = read_u24(cur)?;
    Ok(date_to_days(v >> 9, (v >> 5) & 15, v & 31)?)
}

/// Pre-5.6 `TIME`: a 3-byte signed integer HHMMSS.
pub(super) fn read_time_old(cur: &mut Cursor<'_>) -> Result<i64, RowsError> {
    let v = sign_extend(read_u24(cur)? as u64, 24);
    let (neg, a) = (v < 0, v.unsigned_abs());
    Ok(time_to_micros(
        neg,
        (a / 10_000) as u32,
        (a / 100 % 100) as u32,
        (a % 100) as u32,
        0,
    )?)
}

/// Pre-5.6 `DATETIME`: an 8-byte integer YYYYMMDDHHMMSS.
pub(super) fn read_datetime_old(cur: &mut Cursor<'_>) -> Result<Option<i64>, RowsError> {
    let v = u64::from_le_bytes(cur.array()?);
    let (date, time) = (v / 1_000_000, v % 1_000_000);
    Ok(datetime_to_micros(
        (date / 10_000) as u32,
        (date / 100 % 100) as u32,
        (date % 100) as u32,
        (time / 10_000) as u32,
        (time / 100 % 100) as u32,
        (time % 100) as u32,
        0,
    )?)
}

/// `DATETIME2`: 5 bytes big-endian of packed fields plus `0x80_0000_0000`, then the fraction.
///
/// `day` is the packed date of the last valid value read from the column and its midnight in
/// microseconds (`(-1, 0)` before any): the values of a column mostly share their date with
/// the one before, and then only the time of day is converted. The midnight comes from the
/// shared conversion and depends on the date alone, so it holds for any later value of that
/// date, whichever values came between.
#[inline]
pub(super) fn read_datetime2(
    cur: &mut Cursor<'_>,
    fsp: u8,
    day: &mut (i64, i64),
) -> Result<Option<i64>, RowsError> {
    let [a, b, c, d, e] = cur.array::<5>()?;
    // DATETIME2 is never negative: its sign bit is always set on the wire.
    let high = (a as u64) << 32 | (b as u64) << 24 | (c as u64) << 16 | (d as u64) << 8;
    let packed = ((high | e as u64) as i64)
        .checked_sub(0x80_0000_0000)
        .filter(|p| *p >= 0)
        .ok_or_else(|| RowsError::Value("negative DATETIME2 value".into()))?;
    let frac = read_frac(cur, fsp)?;
    let ymd = packed >> 17;
    let hms = packed % (1 << 17);
    let (hour, minute, second) = (hms >> 12, (hms >> 6) % 64, hms % 64);
    let of_day = ((hour * 60 + minute) * 60 + second) * MICROS + frac as i64;
    if ymd == day.0 && hour <= 23 && minute <= 59 && second <= 59 && (frac as i64) < MICROS {
        return Ok(Some(day.1 + of_day));
    }
    let ym = ymd >> 5;
    let micros = datetime_to_micros(
        (ym / 13) as u32,
        (ym % 13) as u32,
        (ymd % 32) as u32,
        hour as u32,
        minute as u32,
        second as u32,
        frac,
    )?;
    if let Some(micros) = micros {
        *day = (ymd, micros - of_day);
    }
    Ok(micros)
}

/// `TIMESTAMP2`: 4 bytes big-endian of seconds since the epoch, then the fraction; `None` for
/// the zero timestamp.
#[inline]
pub(super) fn read_timestamp2(cur: &mut Cursor<'_>, fsp: u8) -> Result<Option<i64>, RowsError> {
    let secs = u32::from_be_bytes(cur.array()?);
    let frac = read_frac(cur, fsp)?;
    Ok(epoch_to_micros(secs, frac)?)
}

/// `TIME2`: 3 bytes big-endian `(hour << 12 | minute << 6 | second) + 0x800000`, then the
/// fraction; negative values borrow from the integer part when they have a fraction.
pub(super) fn read_time2(cur: &mut Cursor<'_>, fsp: u8) -> Result<i64, RowsError> {
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
    use super::super::columns::Column;
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

    /// A DATETIME2(6) image: `0x80_0000_0000` plus the packed fields, then 3 fraction bytes.
    fn datetime2(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: u32) -> Vec<u8> {
        let packed = 0x80_0000_0000 + ((((y * 13 + mo) << 5 | d) << 17) | h << 12 | mi << 6 | s);
        let mut bytes = packed.to_be_bytes()[3..].to_vec();
        bytes.extend(&us.to_be_bytes()[1..]);
        bytes
    }

    #[test]
    fn datetime2_values_after_one_of_the_same_date_convert_alike() {
        let full = |b: &[u8]| read_datetime2(&mut Cursor::new(b), 6, &mut (-1, 0));
        let mut day = (-1, 0);
        let mut next = |b: &[u8]| read_datetime2(&mut Cursor::new(b), 6, &mut day);
        for image in [
            datetime2(2024, 2, 29, 0, 0, 0, 0),
            datetime2(2024, 2, 29, 23, 59, 59, 999_999),
            datetime2(2024, 2, 29, 12, 30, 1, 5),
            datetime2(2024, 3, 1, 0, 0, 1, 0),
            datetime2(1970, 1, 1, 0, 0, 0, 1),
        ] {
            assert_eq!(next(&image).unwrap(), full(&image).unwrap());
        }
        assert_eq!(
            next(&datetime2(1970, 1, 1, 0, 0, 2, 0)).unwrap(),
            Some(2_000_000)
        );
        // A time of day MySQL cannot store is refused on a date just read, as on any other.
        assert!(next(&datetime2(1970, 1, 1, 24, 0, 0, 0)).is_err());
        assert!(next(&datetime2(1970, 1, 1, 0, 60, 0, 0)).is_err());
        assert!(next(&datetime2(1970, 1, 1, 0, 0, 0, 1_000_000)).is_err());
        // A date with no calendar meaning stays NULL, and the date before it is still known.
        assert_eq!(next(&datetime2(2024, 2, 31, 1, 0, 0, 0)).unwrap(), None);
        assert_eq!(
            next(&datetime2(1970, 1, 1, 0, 0, 3, 0)).unwrap(),
            Some(3_000_000)
        );
    }

    #[test]
    fn truncated_images_are_errors_not_panics() {
        let mut c = Cursor::new(&[1, 2]);
        assert!(c.uint_le(4).is_err());
    }

    /// Decodes one value of `wire` into a fresh column of `kind`.
    fn decode_one(wire: Layout, kind: &ColumnKind, bytes: &[u8]) -> Result<ArrayRef, RowsError> {
        let mut column = Column::compile(wire, kind, true)?;
        let mut c = Cursor::new(bytes);
        column.decode(&mut c, &mut String::new())?;
        Ok(column
            .finish(&kind.field("c", true))
            .map_err(|e| e.detail)?)
    }

    #[test]
    fn zero_and_impossible_temporal_images() {
        // DATE: day | month << 5 | year << 9, 3 bytes little-endian.
        let date = |y: u32, m: u32, d: u32| {
            let v = d | m << 5 | y << 9;
            decode_one(
                Layout::Date,
                &ColumnKind::Simple(SimpleKind::Date),
                &v.to_le_bytes()[..3],
            )
        };
        assert_eq!(date(0, 0, 0).unwrap().null_count(), 1);
        assert_eq!(date(2024, 2, 0).unwrap().null_count(), 1);
        assert_eq!(date(2024, 2, 31).unwrap().null_count(), 1);
        assert_eq!(date(2024, 2, 29).unwrap().null_count(), 0);
        assert!(date(2024, 13, 1).is_err());
        assert!(date(12_000, 1, 1).is_err());
        // DATETIME2 of all zero bits but the sign: the zero datetime.
        let kind = ColumnKind::DateTime { fsp: 0 };
        let zero = decode_one(Layout::DateTime2 { fsp: 0 }, &kind, &[0x80, 0, 0, 0, 0]).unwrap();
        assert_eq!(zero.null_count(), 1);
        assert!(decode_one(Layout::DateTime2 { fsp: 0 }, &kind, &[0x7f, 0, 0, 0, 0]).is_err());
        // TIMESTAMP2 of 0 seconds is the zero timestamp; a fraction of 10^6 µs is corrupt.
        let kind = ColumnKind::Timestamp { fsp: 6 };
        let wire = Layout::Timestamp2 { fsp: 6 };
        let zero = decode_one(wire, &kind, &[0, 0, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(zero.null_count(), 1);
        assert!(decode_one(wire, &kind, &[0, 0, 0, 1, 0x0f, 0x42, 0x40]).is_err());
        // TIME2 hours beyond 838 are corrupt.
        let v = 0x80_0000u32 + (900 << 12);
        let bytes = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
        let kind = ColumnKind::Time { fsp: 0 };
        assert!(decode_one(Layout::Time2 { fsp: 0 }, &kind, &bytes).is_err());
    }

    #[test]
    fn enum_and_set_extremes() {
        let labels: Arc<[String]> = (0..300).map(|i| format!("v{i}")).collect();
        let kind = ColumnKind::Enum { labels };
        let wire = Layout::Enum { pack: 2 };
        let text = |a: ArrayRef| a.as_string::<i32>().value(0).to_string();
        // Index 0 is the '' MySQL stores for an invalid value; 300 is the last label.
        assert_eq!(text(decode_one(wire, &kind, &[0, 0]).unwrap()), "");
        assert_eq!(text(decode_one(wire, &kind, &[44, 1]).unwrap()), "v299");
        assert!(decode_one(wire, &kind, &[45, 1]).is_err());
        let labels: Arc<[String]> = (0..64).map(|i| format!("s{i}")).collect();
        let all = labels.join(",");
        let kind = ColumnKind::Set { labels };
        let got = decode_one(Layout::Set { pack: 8 }, &kind, &[0xff; 8]).unwrap();
        assert_eq!(text(got), all);
        // BIT(64) all ones.
        let got = decode_one(
            Layout::Bit { bits: 64 },
            &ColumnKind::Bit { bits: 64 },
            &[0xff; 8],
        );
        assert_eq!(got.unwrap().as_primitive::<UInt64Type>().value(0), u64::MAX);
    }
}
