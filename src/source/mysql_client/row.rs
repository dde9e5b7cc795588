//! Binary result rows read in place: each value borrowed from the packet, none copied.
//!
//! [`RowCursor`] is the one reader of the row layout (NULL bitmap, fixed-width values,
//! length-encoded bytes, dates and times); [`BinaryRow::values`] and the snapshot's compiled
//! column operations both read through it.
//!
//! # Invariant
//! [`BinaryRow::values`] yields, for every column, what `mysql_common` decodes from the same
//! bytes, variant for variant ([`WireValue`] mirrors `mysql_common::Value` with borrowed
//! bytes): an unsigned `BIGINT` that fits in an `i64` is `Int`, a smaller unsigned integer
//! `Int`, a `DECIMAL` its text. The conversions into Arrow that follow therefore see the same
//! input whichever connection read the row; the unit tests below hold the two decoders to the
//! same answer over every column type.

use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::Value;

/// One value of a result row, as `mysql_common::Value` but borrowing its bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WireValue<'a> {
    Null,
    Bytes(&'a [u8]),
    Int(i64),
    UInt(u64),
    Float(f32),
    Double(f64),
    /// Year, month, day, hour, minute, second, microsecond.
    Date(u16, u8, u8, u8, u8, u8, u32),
    /// Negative, days, hours, minutes, seconds, microseconds.
    Time(bool, u32, u8, u8, u8, u32),
}

impl<'a> From<&'a Value> for WireValue<'a> {
    fn from(value: &'a Value) -> Self {
        match *value {
            Value::NULL => WireValue::Null,
            Value::Bytes(ref b) => WireValue::Bytes(b),
            Value::Int(v) => WireValue::Int(v),
            Value::UInt(v) => WireValue::UInt(v),
            Value::Float(v) => WireValue::Float(v),
            Value::Double(v) => WireValue::Double(v),
            Value::Date(y, mo, d, h, mi, s, us) => WireValue::Date(y, mo, d, h, mi, s, us),
            Value::Time(neg, d, h, m, s, us) => WireValue::Time(neg, d, h, m, s, us),
        }
    }
}

impl WireValue<'_> {
    /// The owned value (for error messages: `Value::as_sql` spells it as SQL).
    pub fn to_value(self) -> Value {
        match self {
            WireValue::Null => Value::NULL,
            WireValue::Bytes(b) => Value::Bytes(b.to_vec()),
            WireValue::Int(v) => Value::Int(v),
            WireValue::UInt(v) => Value::UInt(v),
            WireValue::Float(v) => Value::Float(v),
            WireValue::Double(v) => Value::Double(v),
            WireValue::Date(y, mo, d, h, mi, s, us) => Value::Date(y, mo, d, h, mi, s, us),
            WireValue::Time(neg, d, h, m, s, us) => Value::Time(neg, d, h, m, s, us),
        }
    }
}

/// How a column's values are encoded in a binary row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// A length-encoded string: text, blobs, `DECIMAL`, `BIT`, `JSON`, `ENUM`, `SET`, ...
    Bytes,
    Int8,
    UInt8,
    Int16,
    UInt16,
    Int32,
    UInt32,
    Int64,
    UInt64,
    Float,
    Double,
    /// A length byte, then year..microsecond as present.
    DateTime,
    /// A length byte, then sign, days, hours..microseconds as present.
    Time,
    /// Always NULL (only the bitmap says so).
    Null,
}

impl Encoding {
    /// The encoding of a result column, or `None` for a type the binary protocol does not send.
    pub(super) fn of(column_type: ColumnType, flags: ColumnFlags) -> Option<Self> {
        use ColumnType::*;
        let unsigned = flags.contains(ColumnFlags::UNSIGNED_FLAG);
        Some(match column_type {
            MYSQL_TYPE_STRING
            | MYSQL_TYPE_VAR_STRING
            | MYSQL_TYPE_BLOB
            | MYSQL_TYPE_TINY_BLOB
            | MYSQL_TYPE_MEDIUM_BLOB
            | MYSQL_TYPE_LONG_BLOB
            | MYSQL_TYPE_SET
            | MYSQL_TYPE_ENUM
            | MYSQL_TYPE_DECIMAL
            | MYSQL_TYPE_VARCHAR
            | MYSQL_TYPE_BIT
            | MYSQL_TYPE_NEWDECIMAL
            | MYSQL_TYPE_GEOMETRY
            | MYSQL_TYPE_VECTOR
            | MYSQL_TYPE_JSON => Encoding::Bytes,
            MYSQL_TYPE_TINY if unsigned => Encoding::UInt8,
            MYSQL_TYPE_TINY => Encoding::Int8,
            MYSQL_TYPE_SHORT | MYSQL_TYPE_YEAR if unsigned => Encoding::UInt16,
            MYSQL_TYPE_SHORT | MYSQL_TYPE_YEAR => Encoding::Int16,
            MYSQL_TYPE_LONG | MYSQL_TYPE_INT24 if unsigned => Encoding::UInt32,
            MYSQL_TYPE_LONG | MYSQL_TYPE_INT24 => Encoding::Int32,
            MYSQL_TYPE_LONGLONG if unsigned => Encoding::UInt64,
            MYSQL_TYPE_LONGLONG => Encoding::Int64,
            MYSQL_TYPE_FLOAT => Encoding::Float,
            MYSQL_TYPE_DOUBLE => Encoding::Double,
            MYSQL_TYPE_TIMESTAMP | MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE | MYSQL_TYPE_DATETIME => {
                Encoding::DateTime
            }
            MYSQL_TYPE_TIME => Encoding::Time,
            MYSQL_TYPE_NULL => Encoding::Null,
            _ => return None,
        })
    }
}

/// One row of a binary result set (the packet, its leading 0x00 included).
#[derive(Debug, Clone, Copy)]
pub struct BinaryRow<'a> {
    payload: &'a [u8],
    columns: &'a [Encoding],
}

impl<'a> BinaryRow<'a> {
    pub(super) fn new(payload: &'a [u8], columns: &'a [Encoding]) -> Self {
        Self { payload, columns }
    }

    /// How many values the row has.
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// How each of the row's values is encoded (the same for every row of a result).
    pub fn encodings(&self) -> &'a [Encoding] {
        self.columns
    }

    /// The row's NULL bitmap and values, for a reader that decodes column by column itself;
    /// an error when the packet is too short for its bitmap.
    #[inline]
    pub fn cursor(&self) -> Result<RowCursor<'a>, ValueError> {
        // The NULL bitmap of a result row starts at bit 2.
        let bitmap_len = (self.columns.len() + 7 + 2) / 8;
        match (
            self.payload.get(1..1 + bitmap_len),
            self.payload.get(1 + bitmap_len..),
        ) {
            (Some(bitmap), Some(data)) => Ok(RowCursor { bitmap, data }),
            _ => Err(ValueError::Truncated),
        }
    }

    /// The row's values in column order; a packet too short for its columns yields an error
    /// and ends.
    pub fn values(&self) -> RowValues<'a> {
        // A packet too short for its bitmap leaves the bitmap empty, and the first value
        // then reports it.
        let cursor = self.cursor().unwrap_or(RowCursor {
            bitmap: &[],
            data: &[],
        });
        RowValues {
            cursor,
            columns: self.columns,
            next: 0,
        }
    }
}

/// The values of a [`BinaryRow`].
#[derive(Debug, Clone)]
pub struct RowValues<'a> {
    cursor: RowCursor<'a>,
    columns: &'a [Encoding],
    next: usize,
}

/// Why a value of a row could not be read (a small value, so a row's values move cheaply;
/// spelled out only when it happens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueError {
    /// The packet ended before the row's values did.
    Truncated,
    /// A length-encoded value began with a byte no length begins with.
    BadLength(u8),
    /// The driver's row had no value in this place.
    Missing,
}

impl std::fmt::Display for ValueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueError::Truncated => {
                f.write_str("the server sent a result row shorter than its columns")
            }
            ValueError::BadLength(b) => write!(f, "a length-encoded value began with {b:#x}"),
            ValueError::Missing => f.write_str("the driver returned no value"),
        }
    }
}

/// Year, month, day, hour, minute, second and microsecond of a date and time.
pub type DateTimeParts = (u16, u8, u8, u8, u8, u8, u32);

/// A position in a binary row: its NULL bitmap, and the bytes of the values not yet read.
/// Values are read in column order, NULLs taking no bytes.
#[derive(Debug, Clone)]
pub struct RowCursor<'a> {
    bitmap: &'a [u8],
    data: &'a [u8],
}

impl<'a> RowCursor<'a> {
    /// Whether value `i` is NULL (a column past the bitmap reads as NULL; the bitmap of a
    /// cursor made by [`BinaryRow::cursor`] covers every column).
    #[inline]
    pub fn is_null(&self, i: usize) -> bool {
        let bit = i + 2;
        self.bitmap
            .get(bit / 8)
            .is_none_or(|bits| bits & (1 << (bit % 8)) != 0)
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], ValueError> {
        let Some((head, rest)) = self.data.split_at_checked(n) else {
            return Err(ValueError::Truncated);
        };
        self.data = rest;
        Ok(head)
    }

    /// The next `N` bytes: a fixed-width value.
    #[inline]
    pub fn fixed<const N: usize>(&mut self) -> Result<[u8; N], ValueError> {
        let Some((head, rest)) = self.data.split_first_chunk::<N>() else {
            return Err(ValueError::Truncated);
        };
        self.data = rest;
        Ok(*head)
    }

    #[inline]
    fn length(&mut self) -> Result<usize, ValueError> {
        let [first] = self.fixed::<1>()?;
        let n = match first {
            0..=0xfa => return Ok(first as usize),
            0xfc => 2,
            0xfd => 3,
            0xfe => 8,
            _ => return Err(ValueError::BadLength(first)),
        };
        let mut le = [0u8; 8];
        le[..n].copy_from_slice(self.take(n)?);
        usize::try_from(u64::from_le_bytes(le)).map_err(|_| ValueError::Truncated)
    }

    /// A length-encoded string ([`Encoding::Bytes`]).
    #[inline]
    pub fn bytes(&mut self) -> Result<&'a [u8], ValueError> {
        let n = self.length()?;
        self.take(n)
    }

    /// A date and time ([`Encoding::DateTime`]), the parts the server left out zero.
    #[inline]
    pub fn date_time(&mut self) -> Result<DateTimeParts, ValueError> {
        let [n] = self.fixed::<1>()?;
        let n = n as usize;
        let b = self.take(n)?;
        let (mut y, mut mo, mut d, mut h, mut mi, mut s, mut us) = (0, 0, 0, 0, 0, 0, 0);
        if n >= 4 {
            (y, mo, d) = (u16::from_le_bytes([b[0], b[1]]), b[2], b[3]);
        }
        if n >= 7 {
            (h, mi, s) = (b[4], b[5], b[6]);
        }
        if n == 11 {
            us = u32::from_le_bytes([b[7], b[8], b[9], b[10]]);
        }
        Ok((y, mo, d, h, mi, s, us))
    }

    /// A time ([`Encoding::Time`]): negative, days, hours, minutes, seconds, microseconds.
    #[inline]
    pub fn time(&mut self) -> Result<(bool, u32, u8, u8, u8, u32), ValueError> {
        let [n] = self.fixed::<1>()?;
        let n = n as usize;
        let b = self.take(n)?;
        let (mut neg, mut days, mut h, mut m, mut s, mut us) = (false, 0, 0, 0, 0, 0);
        if n >= 8 {
            neg = b[0] == 1;
            days = u32::from_le_bytes([b[1], b[2], b[3], b[4]]);
            (h, m, s) = (b[5], b[6], b[7]);
        }
        if n == 12 {
            us = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        }
        Ok((neg, days, h, m, s, us))
    }

    /// The next value, not NULL, of a column of `encoding`, as `mysql_common` decodes it.
    pub fn value(&mut self, encoding: Encoding) -> Result<WireValue<'a>, ValueError> {
        Ok(match encoding {
            Encoding::Null => WireValue::Null,
            Encoding::Bytes => WireValue::Bytes(self.bytes()?),
            Encoding::Int8 => WireValue::Int(self.fixed::<1>()?[0] as i8 as i64),
            Encoding::UInt8 => WireValue::Int(self.fixed::<1>()?[0] as i64),
            Encoding::Int16 => WireValue::Int(i16::from_le_bytes(self.fixed()?) as i64),
            Encoding::UInt16 => WireValue::Int(u16::from_le_bytes(self.fixed()?) as i64),
            Encoding::Int32 => WireValue::Int(i32::from_le_bytes(self.fixed()?) as i64),
            Encoding::UInt32 => WireValue::Int(u32::from_le_bytes(self.fixed()?) as i64),
            Encoding::Int64 => WireValue::Int(i64::from_le_bytes(self.fixed()?)),
            Encoding::UInt64 => {
                let v = u64::from_le_bytes(self.fixed()?);
                i64::try_from(v).map_or(WireValue::UInt(v), WireValue::Int)
            }
            Encoding::Float => WireValue::Float(f32::from_le_bytes(self.fixed()?)),
            Encoding::Double => WireValue::Double(f64::from_le_bytes(self.fixed()?)),
            Encoding::DateTime => {
                let (y, mo, d, h, mi, s, us) = self.date_time()?;
                WireValue::Date(y, mo, d, h, mi, s, us)
            }
            Encoding::Time => {
                let (neg, days, h, m, s, us) = self.time()?;
                WireValue::Time(neg, days, h, m, s, us)
            }
        })
    }
}

impl<'a> Iterator for RowValues<'a> {
    type Item = Result<WireValue<'a>, ValueError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let i = self.next;
        let &encoding = self.columns.get(i)?;
        self.next += 1;
        if (i + 2) / 8 >= self.cursor.bitmap.len() {
            self.next = self.columns.len();
            return Some(Err(ValueError::Truncated));
        }
        if self.cursor.is_null(i) {
            return Some(Ok(WireValue::Null));
        }
        let value = self.cursor.value(encoding);
        if value.is_err() {
            self.next = self.columns.len();
        }
        Some(value)
    }
}

/// Result rows made as the server sends them, for tests of the readers of rows.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// The bytes of an integer encoding (0: not an integer).
    fn width(e: Encoding) -> usize {
        match e {
            Encoding::Int8 | Encoding::UInt8 => 1,
            Encoding::Int16 | Encoding::UInt16 => 2,
            Encoding::Int32 | Encoding::UInt32 => 4,
            Encoding::Int64 | Encoding::UInt64 => 8,
            _ => 0,
        }
    }

    /// Encodes `value` as the server sends it in a binary row of a column of `encoding`.
    fn encode(encoding: Encoding, value: &Value, out: &mut Vec<u8>) {
        match (encoding, value) {
            (Encoding::Bytes, Value::Bytes(b)) => {
                match b.len() {
                    n @ 0..=0xfa => out.push(n as u8),
                    n @ 0xfb..=0xffff => {
                        out.push(0xfc);
                        out.extend_from_slice(&(n as u16).to_le_bytes());
                    }
                    n => {
                        out.push(0xfd);
                        out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
                    }
                }
                out.extend_from_slice(b);
            }
            (e, Value::Int(v)) if width(e) > 0 => {
                out.extend_from_slice(&v.to_le_bytes()[..width(e)])
            }
            (e, Value::UInt(v)) if width(e) > 0 => {
                out.extend_from_slice(&v.to_le_bytes()[..width(e)])
            }
            (Encoding::Float, Value::Float(v)) => out.extend_from_slice(&v.to_le_bytes()),
            (Encoding::Double, Value::Double(v)) => out.extend_from_slice(&v.to_le_bytes()),
            (Encoding::DateTime, &Value::Date(y, mo, d, h, mi, s, us)) => {
                let n: u8 = if us != 0 {
                    11
                } else if (h, mi, s) != (0, 0, 0) {
                    7
                } else if (y, mo, d) != (0, 0, 0) {
                    4
                } else {
                    0
                };
                out.push(n);
                let mut all = y.to_le_bytes().to_vec();
                all.extend([mo, d, h, mi, s]);
                all.extend(us.to_le_bytes());
                out.extend_from_slice(&all[..n as usize]);
            }
            (Encoding::Time, &Value::Time(neg, days, h, m, s, us)) => {
                let n: u8 = if us != 0 {
                    12
                } else if (days, h, m, s) != (0, 0, 0, 0) {
                    8
                } else {
                    0
                };
                out.push(n);
                let mut all = vec![neg as u8];
                all.extend(days.to_le_bytes());
                all.extend([h, m, s]);
                all.extend(us.to_le_bytes());
                out.extend_from_slice(&all[..n as usize]);
            }
            other => panic!("test value does not fit: {other:?}"),
        }
    }

    /// A row packet of `values` (NULL where `None`) for columns of `types`.
    pub(crate) fn packet(types: &[(ColumnType, ColumnFlags)], values: &[Value]) -> Vec<u8> {
        let bitmap_len = (types.len() + 9) / 8;
        let mut out = vec![0u8; 1 + bitmap_len];
        for (i, ((t, f), v)) in types.iter().zip(values).enumerate() {
            if *v == Value::NULL {
                out[1 + (i + 2) / 8] |= 1 << ((i + 2) % 8);
            } else {
                encode(Encoding::of(*t, *f).unwrap(), v, &mut out);
            }
        }
        out
    }

    /// The encodings of columns of `types`.
    pub(crate) fn encodings(types: &[(ColumnType, ColumnFlags)]) -> Vec<Encoding> {
        types
            .iter()
            .map(|(t, f)| Encoding::of(*t, *f).unwrap())
            .collect()
    }

    /// A row of `payload` (made by [`packet`]) read as columns of `encodings`.
    pub(crate) fn row<'a>(payload: &'a [u8], encodings: &'a [Encoding]) -> BinaryRow<'a> {
        BinaryRow::new(payload, encodings)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::packet;
    use super::*;
    use mysql_common::io::ParseBuf;
    use mysql_common::packets::Column;
    use mysql_common::row::RowDeserializer;
    use mysql_common::value::ServerSide;
    use std::sync::Arc;

    fn both(types: &[(ColumnType, ColumnFlags)], values: &[Value]) {
        let payload = packet(types, values);
        let columns: Arc<[Column]> = types
            .iter()
            .map(|(t, f)| Column::new(*t).with_flags(*f))
            .collect();
        let theirs = ParseBuf(&payload)
            .parse::<RowDeserializer<ServerSide, mysql_common::proto::Binary>>(columns)
            .unwrap()
            .into_inner()
            .unwrap_raw();
        let encodings: Vec<Encoding> = types
            .iter()
            .map(|(t, f)| Encoding::of(*t, *f).unwrap())
            .collect();
        let row = BinaryRow::new(&payload, &encodings);
        let ours: Vec<Value> = row.values().map(|v| v.unwrap().to_value()).collect();
        let theirs: Vec<Value> = theirs.into_iter().map(Option::unwrap).collect();
        assert_eq!(ours, theirs, "types {types:?}");
    }

    #[test]
    fn rows_decode_as_mysql_common_decodes_them() {
        use ColumnType::*;
        let u = ColumnFlags::UNSIGNED_FLAG;
        let s = ColumnFlags::empty();
        let long_text = Value::Bytes(vec![b'x'; 300]);
        let longer_text = Value::Bytes(vec![b'y'; 70_000]);
        let cases: Vec<(ColumnType, ColumnFlags, Vec<Value>)> = vec![
            (
                MYSQL_TYPE_TINY,
                s,
                vec![Value::Int(-128), Value::Int(127), Value::Int(0)],
            ),
            (MYSQL_TYPE_TINY, u, vec![Value::Int(255), Value::Int(1)]),
            (
                MYSQL_TYPE_SHORT,
                s,
                vec![Value::Int(-32768), Value::Int(32767)],
            ),
            (MYSQL_TYPE_SHORT, u, vec![Value::Int(65535)]),
            (MYSQL_TYPE_YEAR, u, vec![Value::Int(2155), Value::Int(1901)]),
            (
                MYSQL_TYPE_INT24,
                s,
                vec![Value::Int(-8_388_608), Value::Int(8_388_607)],
            ),
            (
                MYSQL_TYPE_LONG,
                s,
                vec![Value::Int(i32::MIN as i64), Value::Int(7)],
            ),
            (MYSQL_TYPE_LONG, u, vec![Value::Int(u32::MAX as i64)]),
            (
                MYSQL_TYPE_LONGLONG,
                s,
                vec![Value::Int(i64::MIN), Value::Int(i64::MAX)],
            ),
            (
                MYSQL_TYPE_LONGLONG,
                u,
                vec![
                    Value::Int(i64::MAX),
                    Value::UInt(u64::MAX),
                    Value::UInt(1 << 63),
                ],
            ),
            (
                MYSQL_TYPE_FLOAT,
                s,
                vec![Value::Float(-1.5), Value::Float(f32::MAX)],
            ),
            (
                MYSQL_TYPE_DOUBLE,
                s,
                vec![Value::Double(1e-300), Value::Double(-0.0)],
            ),
            (
                MYSQL_TYPE_NEWDECIMAL,
                s,
                vec![
                    Value::Bytes(b"-12345.67".to_vec()),
                    Value::Bytes(b"0".to_vec()),
                ],
            ),
            (
                MYSQL_TYPE_VAR_STRING,
                s,
                vec![Value::Bytes(vec![]), long_text, longer_text],
            ),
            (
                MYSQL_TYPE_BLOB,
                ColumnFlags::BINARY_FLAG,
                vec![Value::Bytes(vec![0, 255, 10])],
            ),
            (MYSQL_TYPE_BIT, u, vec![Value::Bytes(vec![1, 2])]),
            (
                MYSQL_TYPE_JSON,
                s,
                vec![Value::Bytes(b"{\"a\":1}".to_vec())],
            ),
            (
                MYSQL_TYPE_DATETIME,
                s,
                vec![
                    Value::Date(0, 0, 0, 0, 0, 0, 0),
                    Value::Date(2024, 2, 29, 0, 0, 0, 0),
                    Value::Date(2024, 2, 29, 23, 59, 58, 0),
                    Value::Date(9999, 12, 31, 23, 59, 59, 999_999),
                ],
            ),
            (
                MYSQL_TYPE_DATE,
                s,
                vec![Value::Date(1000, 1, 1, 0, 0, 0, 0)],
            ),
            (
                MYSQL_TYPE_TIMESTAMP,
                s,
                vec![Value::Date(1970, 1, 1, 0, 0, 1, 5)],
            ),
            (
                MYSQL_TYPE_TIME,
                s,
                vec![
                    Value::Time(false, 0, 0, 0, 0, 0),
                    Value::Time(true, 34, 22, 59, 59, 0),
                    Value::Time(true, 0, 0, 0, 0, 1),
                ],
            ),
        ];
        // Each type alone, and every type in one row with every other one NULL in turn, so
        // the NULL bitmap's bits past the first byte are read too.
        for (t, f, values) in &cases {
            for v in values {
                both(&[(*t, *f)], std::slice::from_ref(v));
            }
        }
        let types: Vec<(ColumnType, ColumnFlags)> =
            cases.iter().map(|(t, f, _)| (*t, *f)).collect();
        let row: Vec<Value> = cases.iter().map(|(_, _, v)| v[0].clone()).collect();
        both(&types, &row);
        for skip in 0..types.len() {
            let mut with_nulls = row.clone();
            for (i, v) in with_nulls.iter_mut().enumerate() {
                if i % 2 == skip % 2 || i == skip {
                    *v = Value::NULL;
                }
            }
            both(&types, &with_nulls);
        }
    }

    #[test]
    fn a_short_row_is_an_error_not_a_panic() {
        let types = [(ColumnType::MYSQL_TYPE_LONGLONG, ColumnFlags::empty()); 3];
        let encodings = [Encoding::Int64; 3];
        let full = packet(&types, &[Value::Int(1), Value::Int(2), Value::Int(3)]);
        for cut in 0..full.len() {
            let row = BinaryRow::new(&full[..cut], &encodings);
            let values: Vec<_> = row.values().collect();
            assert!(
                values.iter().any(Result::is_err),
                "cut at {cut}: {values:?}"
            );
            assert!(values.len() <= 3);
        }
        let row = BinaryRow::new(&full, &encodings);
        assert!(row.values().all(|v| v.is_ok()));
    }
}
