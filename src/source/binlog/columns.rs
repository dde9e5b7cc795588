//! One compiled decoding operation per column, fused with the Arrow buffer it fills.
//!
//! A table map compiles once (see `rows::TableDecoder`) into one [`Column`] per column: its
//! wire layout and its Arrow type decided together, so decoding a value is a single match, a
//! bounded read and a push onto a typed buffer. Buffers grow per rows event from the row count
//! the event's first row implies (text buffers by their bytes per value so far too), and short
//! text is copied as a fixed-size window of the image; a column's validity bitmap only exists
//! once it holds a NULL; UTF-8 text is checked once per column buffer, when the batch is
//! finished, instead of once per value.
//!
//! # Invariants
//! * Every value pushes exactly one entry onto its column's values and validity, so a column's
//!   buffers always agree on its length; a value that fails to decode pushes nothing, and
//!   cutting or splitting a column (a transaction's rows leaving a run) cuts every buffer at
//!   the same row (see `buffers`).
//! * The Arrow type a column builds is `ColumnKind::data_type` of its kind: compiling refuses
//!   any pairing of wire layout and kind it has no operation for, and finishing checks the
//!   built type against the table's field.
//! * Conversions that must agree with the snapshot path (dates, times, timestamps, decimals'
//!   precision, `BIT`, `SET` labels, latin1, `BINARY(n)` padding) are the shared functions of
//!   `source::types`, which the snapshot's `ColumnBuilder` also calls.

use crate::change::kinds::SimpleKind;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BinaryArray, PrimitiveArray, StringArray};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{
    i256, ArrowPrimitiveType, Date32Type, Decimal128Type, Decimal256Type, DurationMicrosecondType,
    Field, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    TimestampMicrosecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};

use super::buffers::{Bytes, Validity};
use super::cursor::{Cursor, RowsError};
use super::decimal::DecimalLayout;
use super::layout::{
    read_date, read_datetime2, read_datetime_old, read_len, read_time2, read_time_old,
    read_timestamp2, read_u24, sign_extend, Layout,
};
use super::mysql_json;
use crate::change::kinds::{Binlog, Render};
use crate::change::schema::{Charset, ColumnKind};
use crate::source::types::{
    append_padded, bit_value, decimal128_fits, decimal256_fits, decode_text, epoch_to_micros,
    set_labels,
};

/// Runs `$vec` on the values of a fixed-width column (a `Vec` of its element type, bound to
/// `$v`) or `$bytes` on those of a byte column (its [`Bytes`], bound to `$b`): for what every
/// column does alike whatever its type.
macro_rules! on_values {
    ($values:expr, $v:ident => $vec:expr, $b:ident => $bytes:expr) => {{
        use Values as V;
        match $values {
            V::Int8($v) => $vec,
            V::UInt8($v) => $vec,
            V::Int16($v) | V::Year($v) => $vec,
            V::UInt16($v) => $vec,
            V::Int24($v) | V::Int32($v) | V::Date($v) => $vec,
            V::UInt24($v) | V::UInt32($v) => $vec,
            V::Int64($v)
            | V::TimeOld($v)
            | V::Time2 { values: $v, .. }
            | V::DateTimeOld($v)
            | V::DateTime2 { values: $v, .. }
            | V::TimestampOld($v)
            | V::Timestamp2 { values: $v, .. } => $vec,
            V::UInt64($v) | V::Bit { values: $v, .. } => $vec,
            V::Float32($v) => $vec,
            V::Float64($v) => $vec,
            V::Decimal128 { values: $v, .. } => $vec,
            V::Decimal256 { values: $v, .. } => $vec,
            V::Utf8 { text: $b, .. }
            | V::Latin1 { text: $b, .. }
            | V::Binary { bytes: $b, .. }
            | V::Enum { text: $b, .. }
            | V::Set { text: $b, .. }
            | V::Json { text: $b, .. }
            | V::Rendered { text: $b, .. } => $bytes,
        }
    }};
}

/// The longest value a [`Values::Rendered`] column carries.
const MAX_RENDERED_LEN: usize = 64;

/// The values of one column, typed by its Arrow type, with how each is read off the wire.
#[derive(Debug, Clone)]
enum Values {
    Int8(Vec<i8>),
    UInt8(Vec<u8>),
    Int16(Vec<i16>),
    UInt16(Vec<u16>),
    /// `MEDIUMINT`: 3 bytes on the wire, 32 bits in Arrow.
    Int24(Vec<i32>),
    UInt24(Vec<u32>),
    Int32(Vec<i32>),
    UInt32(Vec<u32>),
    Int64(Vec<i64>),
    UInt64(Vec<u64>),
    /// One byte on the wire (years since 1900, 0 for the zero year).
    Year(Vec<i16>),
    /// `bytes` big-endian bytes.
    Bit {
        bytes: u8,
        values: Vec<u64>,
    },
    Float32(Vec<f32>),
    Float64(Vec<f64>),
    Decimal128 {
        layout: DecimalLayout,
        precision: u8,
        scale: i8,
        values: Vec<i128>,
    },
    Decimal256 {
        layout: DecimalLayout,
        precision: u8,
        scale: i8,
        values: Vec<i256>,
    },
    Date(Vec<i32>),
    TimeOld(Vec<i64>),
    Time2 {
        fsp: u8,
        values: Vec<i64>,
    },
    DateTimeOld(Vec<i64>),
    DateTime2 {
        fsp: u8,
        /// The last valid value's packed date and midnight (see `read_datetime2`).
        day: (i64, i64),
        values: Vec<i64>,
    },
    TimestampOld(Vec<i64>),
    Timestamp2 {
        fsp: u8,
        values: Vec<i64>,
    },
    /// UTF-8 text behind a length prefix of `prefix` bytes, checked when finished.
    Utf8 {
        prefix: u8,
        text: Bytes,
    },
    /// latin1 (code page 1252) text, converted to UTF-8 as it is read.
    Latin1 {
        prefix: u8,
        text: Bytes,
    },
    Binary {
        prefix: u8,
        pad_to: Option<usize>,
        bytes: Bytes,
    },
    Enum {
        pack: u8,
        labels: Arc<[String]>,
        text: Bytes,
    },
    Set {
        pack: u8,
        labels: Arc<[String]>,
        text: Bytes,
    },
    /// MySQL's binary JSON, printed as MySQL prints it.
    Json {
        prefix: u8,
        text: Bytes,
    },
    /// A kind of the table of kinds carried as `len` bytes (trailing zeros stripped) and
    /// written as text by its `render` (see `change::kinds::Binlog::Rendered`).
    Rendered {
        prefix: u8,
        len: usize,
        render: Render,
        text: Bytes,
    },
}

impl Values {
    /// The bytes of a text or binary column.
    fn bytes(&self) -> Option<&Bytes> {
        match self {
            Values::Utf8 { text, .. }
            | Values::Latin1 { text, .. }
            | Values::Enum { text, .. }
            | Values::Set { text, .. }
            | Values::Json { text, .. }
            | Values::Rendered { text, .. } => Some(text),
            Values::Binary { bytes, .. } => Some(bytes),
            _ => None,
        }
    }

    fn bytes_mut(&mut self) -> Option<&mut Bytes> {
        match self {
            Values::Utf8 { text, .. }
            | Values::Latin1 { text, .. }
            | Values::Enum { text, .. }
            | Values::Set { text, .. }
            | Values::Json { text, .. }
            | Values::Rendered { text, .. } => Some(text),
            Values::Binary { bytes, .. } => Some(bytes),
            _ => None,
        }
    }
}

/// One column of a row image being decoded: see the module docs.
#[derive(Debug, Clone)]
pub(super) struct Column {
    values: Values,
    nulls: Validity,
    /// Whether the column's Arrow field takes NULLs.
    nullable: bool,
}

/// Pushes `v` or, for `None`, a placeholder; returns whether the value is valid.
#[inline]
fn push_opt<T: Default>(values: &mut Vec<T>, v: Option<T>) -> bool {
    let valid = v.is_some();
    values.push(v.unwrap_or_default());
    valid
}

impl Column {
    /// The operation for a value laid out as `wire` in a column of `kind`; an error for a
    /// pairing with no operation (the table map and the schema disagree).
    pub(super) fn compile(wire: Layout, kind: &ColumnKind, nullable: bool) -> Result<Self, String> {
        use ColumnKind as K;
        let no_op = || format!("no decoding of {wire:?} into {}", kind.mysql_type());
        let unsigned = matches!(kind, K::Int { unsigned: true, .. });
        let values = match (wire, kind) {
            (Layout::Tiny, K::Int { bits: 8, .. }) if unsigned => Values::UInt8(vec![]),
            (Layout::Tiny, K::Int { bits: 8, .. }) => Values::Int8(vec![]),
            (Layout::Short, K::Int { bits: 16, .. }) if unsigned => Values::UInt16(vec![]),
            (Layout::Short, K::Int { bits: 16, .. }) => Values::Int16(vec![]),
            (Layout::Int24, K::Int { bits: 24, .. }) if unsigned => Values::UInt24(vec![]),
            (Layout::Int24, K::Int { bits: 24, .. }) => Values::Int24(vec![]),
            (Layout::Long, K::Int { bits: 32, .. }) if unsigned => Values::UInt32(vec![]),
            (Layout::Long, K::Int { bits: 32, .. }) => Values::Int32(vec![]),
            (Layout::LongLong, K::Int { bits: 64, .. }) if unsigned => Values::UInt64(vec![]),
            (Layout::LongLong, K::Int { bits: 64, .. }) => Values::Int64(vec![]),
            (Layout::Year, K::Simple(SimpleKind::Year)) => Values::Year(vec![]),
            (Layout::Bit { bits }, K::Bit { bits: b }) if bits == *b => Values::Bit {
                bytes: u8::try_from(bits.div_ceil(8)).map_err(|_| no_op())?,
                values: vec![],
            },
            (Layout::Float, K::Simple(SimpleKind::Float)) => Values::Float32(vec![]),
            (Layout::Double, K::Simple(SimpleKind::Double)) => Values::Float64(vec![]),
            (
                Layout::NewDecimal { precision, scale },
                K::Decimal {
                    precision: p,
                    scale: s,
                },
            ) if precision == *p && scale == *s => {
                let layout = DecimalLayout::new(precision, scale)?;
                if layout.wide() {
                    Values::Decimal256 {
                        layout,
                        precision,
                        scale: scale as i8,
                        values: vec![],
                    }
                } else {
                    Values::Decimal128 {
                        layout,
                        precision,
                        scale: scale as i8,
                        values: vec![],
                    }
                }
            }
            (Layout::Date, K::Simple(SimpleKind::Date)) => Values::Date(vec![]),
            (Layout::TimeOld, K::Time { .. }) => Values::TimeOld(vec![]),
            (Layout::Time2 { fsp }, K::Time { fsp: f }) if fsp == *f => Values::Time2 {
                fsp,
                values: vec![],
            },
            (Layout::DateTimeOld, K::DateTime { .. }) => Values::DateTimeOld(vec![]),
            (Layout::DateTime2 { fsp }, K::DateTime { fsp: f }) if fsp == *f => Values::DateTime2 {
                fsp,
                day: (-1, 0),
                values: vec![],
            },
            (Layout::TimestampOld, K::Timestamp { .. }) => Values::TimestampOld(vec![]),
            (Layout::Timestamp2 { fsp }, K::Timestamp { fsp: f }) if fsp == *f => {
                Values::Timestamp2 {
                    fsp,
                    values: vec![],
                }
            }
            (
                Layout::VarLen { prefix, .. } | Layout::Blob { prefix },
                K::Text {
                    charset: Charset::Utf8,
                    ..
                },
            )
            // MariaDB's JSON is a LONGTEXT holding JSON text.
            | (Layout::Blob { prefix }, K::Simple(SimpleKind::Json)) => Values::Utf8 {
                prefix,
                text: Bytes::new(),
            },
            (
                Layout::VarLen { prefix, .. } | Layout::Blob { prefix },
                K::Text {
                    charset: Charset::Latin1,
                    ..
                },
            ) => Values::Latin1 {
                prefix,
                text: Bytes::new(),
            },
            (Layout::VarLen { prefix, .. } | Layout::Blob { prefix }, K::Binary { pad_to }) => {
                Values::Binary {
                    prefix,
                    pad_to: *pad_to,
                    bytes: Bytes::new(),
                }
            }
            (Layout::Geometry { prefix }, K::Simple(SimpleKind::Geometry)) | (Layout::Vector { prefix }, K::Simple(SimpleKind::Vector)) => {
                Values::Binary {
                    prefix,
                    pad_to: None,
                    bytes: Bytes::new(),
                }
            }
            (Layout::Enum { pack }, K::Enum { labels }) => Values::Enum {
                pack,
                labels: Arc::clone(labels),
                text: Bytes::new(),
            },
            (Layout::Set { pack }, K::Set { labels }) => Values::Set {
                pack,
                labels: Arc::clone(labels),
                text: Bytes::new(),
            },
            (Layout::Json { prefix }, K::Simple(SimpleKind::Json)) => Values::Json {
                prefix,
                text: Bytes::new(),
            },
            (Layout::VarLen { prefix, max_len }, K::Simple(simple)) => match simple.row().binlog {
                Binlog::Rendered { len, render }
                    if usize::from(max_len) == len && len <= MAX_RENDERED_LEN =>
                {
                    Values::Rendered {
                        prefix,
                        len,
                        render,
                        text: Bytes::new(),
                    }
                }
                _ => return Err(no_op()),
            },
            _ => return Err(no_op()),
        };
        Ok(Self {
            values,
            nulls: Validity::default(),
            nullable,
        })
    }

    /// Whether NULLs fit the column's field.
    pub(super) fn nullable(&self) -> bool {
        self.nullable
    }

    /// Makes room for `rows` more values, of at most `bytes` bytes in a byte column.
    pub(super) fn reserve(&mut self, rows: usize, bytes: usize) {
        on_values!(&mut self.values, v => v.reserve(rows), b => b.reserve(rows, bytes));
        if let Some(bits) = &mut self.nulls.bits {
            bits.reserve(rows.div_ceil(8));
        }
    }

    /// Keeps the first `len` values (those of rows decoded before a transaction that is
    /// dropped, or of a row cut short by an error).
    pub(super) fn truncate(&mut self, len: usize) {
        on_values!(&mut self.values, v => v.truncate(len), b => b.truncate(len));
        self.nulls.truncate(len);
    }

    /// The values from `at` on, which this column no longer holds.
    pub(super) fn split_off(&mut self, at: usize) -> Column {
        let mut tail = self.clone();
        on_values!(&mut tail.values, v => drop(v.drain(..at.min(v.len()))), b => b.drain_front(at));
        tail.nulls.drain_front(at);
        self.truncate(at);
        tail
    }

    /// Whether values taking up to `more` bytes fit after these (byte columns' 32-bit
    /// offsets).
    pub(super) fn has_room(&self, more: usize) -> bool {
        self.values.bytes().is_none_or(|b| b.has_room(more))
    }

    /// Whether [`Column::append`] can move `other`'s values after these: the same operation
    /// (columns of one table map) and text that still fits 32-bit offsets.
    pub(super) fn can_take(&self, other: &Column) -> bool {
        if std::mem::discriminant(&self.values) != std::mem::discriminant(&other.values) {
            return false;
        }
        match (self.values.bytes(), other.values.bytes()) {
            (Some(a), Some(b)) => a.fits(b),
            _ => true,
        }
    }

    /// Moves `other`'s values after these, leaving `other` empty with its buffers' capacity
    /// kept, to decode the next rows into. The caller checked [`Column::can_take`]; a pairing
    /// it refuses moves nothing.
    pub(super) fn append(&mut self, other: &mut Column) {
        use Values as V;
        fn take<T: Copy>(to: &mut Vec<T>, from: &mut Vec<T>) {
            to.extend_from_slice(from);
            from.clear();
        }
        if !self.can_take(other) {
            return;
        }
        if let (Some(a), Some(b)) = (self.values.bytes_mut(), other.values.bytes_mut()) {
            a.append(b);
            self.nulls.append(&mut other.nulls);
            return;
        }
        match (&mut self.values, &mut other.values) {
            (V::Int8(a), V::Int8(b)) => take(a, b),
            (V::UInt8(a), V::UInt8(b)) => take(a, b),
            (V::Int16(a), V::Int16(b)) | (V::Year(a), V::Year(b)) => take(a, b),
            (V::UInt16(a), V::UInt16(b)) => take(a, b),
            (V::Int24(a), V::Int24(b)) | (V::Int32(a), V::Int32(b)) | (V::Date(a), V::Date(b)) => {
                take(a, b)
            }
            (V::UInt24(a), V::UInt24(b)) | (V::UInt32(a), V::UInt32(b)) => take(a, b),
            (V::Int64(a), V::Int64(b))
            | (V::TimeOld(a), V::TimeOld(b))
            | (V::Time2 { values: a, .. }, V::Time2 { values: b, .. })
            | (V::DateTimeOld(a), V::DateTimeOld(b))
            | (V::DateTime2 { values: a, .. }, V::DateTime2 { values: b, .. })
            | (V::TimestampOld(a), V::TimestampOld(b))
            | (V::Timestamp2 { values: a, .. }, V::Timestamp2 { values: b, .. }) => take(a, b),
            (V::UInt64(a), V::UInt64(b)) | (V::Bit { values: a, .. }, V::Bit { values: b, .. }) => {
                take(a, b)
            }
            (V::Float32(a), V::Float32(b)) => take(a, b),
            (V::Float64(a), V::Float64(b)) => take(a, b),
            (V::Decimal128 { values: a, .. }, V::Decimal128 { values: b, .. }) => take(a, b),
            (V::Decimal256 { values: a, .. }, V::Decimal256 { values: b, .. }) => take(a, b),
            // Byte columns were moved above; any other pairing `can_take` refused.
            _ => return,
        }
        self.nulls.append(&mut other.nulls);
    }

    /// Whether the column holds MySQL's binary JSON, which a partial update may log as
    /// changes (see [`Column::decode_json_diff`]).
    pub(super) fn is_binary_json(&self) -> bool {
        matches!(self.values, Values::Json { .. })
    }

    /// The bytes of the last value appended, `None` when it is NULL or not text.
    pub(super) fn last_text(&self) -> Option<&[u8]> {
        let row = self.nulls.len.checked_sub(1)?;
        if !self.nulls.is_valid(row) {
            return None;
        }
        let bytes = self.values.bytes()?;
        let (start, end) = (bytes.offsets[row] as usize, bytes.offsets[row + 1] as usize);
        bytes.data.get(start..end)
    }

    /// Reads a JSON value logged as changes to `before` (the text of the row's before image,
    /// see `mysql_json::apply_json_diffs`) off `cur` and appends the changed document.
    pub(super) fn decode_json_diff(
        &mut self,
        cur: &mut Cursor<'_>,
        before: &str,
        scratch: &mut String,
    ) -> Result<(), RowsError> {
        let Values::Json { prefix, text } = &mut self.values else {
            return Err("a partial JSON update of a column that is not JSON"
                .to_string()
                .into());
        };
        let len = read_len(cur, *prefix)?;
        let diffs = cur.take(len)?;
        scratch.clear();
        mysql_json::diff::apply_json_diffs(before, diffs, scratch)
            .map_err(|e| format!("a partial JSON update: {e}"))?;
        text.push(scratch.as_bytes())?;
        self.nulls.push(true);
        Ok(())
    }

    /// Appends a NULL (the caller checked that the column takes it).
    #[inline]
    pub(super) fn push_null(&mut self) {
        // A placeholder the validity hides: zero, or an empty value.
        on_values!(&mut self.values, v => v.push(Default::default()), b => b.push_empty());
        self.nulls.push(false);
    }

    /// Reads one value off `cur` and appends it.
    #[inline]
    pub(super) fn decode(
        &mut self,
        cur: &mut Cursor<'_>,
        scratch: &mut String,
    ) -> Result<(), RowsError> {
        use Values as V;
        let valid = match &mut self.values {
            V::Int8(v) => pushed(v, i8::from_le_bytes(cur.array()?)),
            V::UInt8(v) => pushed(v, u8::from_le_bytes(cur.array()?)),
            V::Int16(v) => pushed(v, i16::from_le_bytes(cur.array()?)),
            V::UInt16(v) => pushed(v, u16::from_le_bytes(cur.array()?)),
            V::Int24(v) => pushed(v, sign_extend(read_u24(cur)? as u64, 24) as i32),
            V::UInt24(v) => pushed(v, read_u24(cur)?),
            V::Int32(v) => pushed(v, i32::from_le_bytes(cur.array()?)),
            V::UInt32(v) => pushed(v, u32::from_le_bytes(cur.array()?)),
            V::Int64(v) => pushed(v, i64::from_le_bytes(cur.array()?)),
            V::UInt64(v) => pushed(v, u64::from_le_bytes(cur.array()?)),
            V::Year(v) => {
                let [y] = cur.array::<1>()?;
                v.push(if y == 0 { 0 } else { 1900 + y as i16 });
                true
            }
            V::Bit { bytes, values } => {
                values.push(bit_value(cur.take(*bytes as usize)?)?);
                true
            }
            V::Float32(v) => pushed(v, f32::from_le_bytes(cur.array()?)),
            V::Float64(v) => pushed(v, f64::from_le_bytes(cur.array()?)),
            V::Decimal128 {
                layout,
                precision,
                values,
                ..
            } => {
                let v = layout.read_i128(cur)?;
                decimal128_fits(v, *precision)?;
                values.push(v);
                true
            }
            V::Decimal256 {
                layout,
                precision,
                values,
                ..
            } => {
                let v = layout.read_i256(cur)?;
                decimal256_fits(v, *precision)?;
                values.push(v);
                true
            }
            V::Date(v) => push_opt(v, read_date(cur)?),
            V::TimeOld(v) => pushed(v, read_time_old(cur)?),
            V::Time2 { fsp, values } => {
                values.push(read_time2(cur, *fsp)?);
                true
            }
            V::DateTimeOld(v) => push_opt(v, read_datetime_old(cur)?),
            V::DateTime2 { fsp, day, values } => push_opt(values, read_datetime2(cur, *fsp, day)?),
            V::TimestampOld(v) => {
                let secs = u32::from_le_bytes(cur.array()?);
                push_opt(v, epoch_to_micros(secs, 0)?)
            }
            V::Timestamp2 { fsp, values } => push_opt(values, read_timestamp2(cur, *fsp)?),
            V::Utf8 { prefix, text } => {
                let len = read_len(cur, *prefix)?;
                text.push_from(cur, len)?;
                true
            }
            V::Latin1 { prefix, text } => {
                let len = read_len(cur, *prefix)?;
                let bytes = cur.take(len)?;
                text.push(decode_text(Charset::Latin1, bytes, scratch)?.as_bytes())?;
                true
            }
            V::Binary {
                prefix,
                pad_to,
                bytes,
            } => {
                let len = read_len(cur, *prefix)?;
                append_padded(&mut bytes.data, cur.take(len)?, *pad_to);
                bytes.end_value()?;
                true
            }
            V::Enum { pack, labels, text } => {
                let idx = cur.uint_le(*pack as usize)? as usize;
                // Index 0 is the empty string MySQL stores for an invalid value.
                let label = match idx {
                    0 => "",
                    i => labels
                        .get(i - 1)
                        .ok_or_else(|| format!("enum index {i} beyond {} labels", labels.len()))?,
                };
                text.push(label.as_bytes())?;
                true
            }
            V::Set { pack, labels, text } => {
                let mask = cur.uint_le(*pack as usize)?;
                set_labels(labels, mask, scratch)?;
                text.push(scratch.as_bytes())?;
                true
            }
            V::Json { prefix, text } => {
                let len = read_len(cur, *prefix)?;
                let bytes = cur.take(len)?;
                scratch.clear();
                if bytes.is_empty() {
                    // An empty JSON value is how MySQL logs a JSON null literal in some paths.
                    scratch.push_str("null");
                } else {
                    mysql_json::binary_json_to_text(bytes, scratch)
                        .map_err(|e| format!("binary JSON: {e}"))?;
                }
                text.push(scratch.as_bytes())?;
                true
            }
            V::Rendered {
                prefix,
                len,
                render,
                text,
            } => {
                let stored = read_len(cur, *prefix)?;
                let bytes = cur.take(stored)?;
                if bytes.len() > *len {
                    return Err(format!("a value of {} bytes (at most {len})", bytes.len()).into());
                }
                // The trailing zero bytes the binlog strips, put back.
                let mut padded = [0u8; MAX_RENDERED_LEN];
                padded[..bytes.len()].copy_from_slice(bytes);
                scratch.clear();
                render(&padded[..*len], scratch)?;
                text.push(scratch.as_bytes())?;
                true
            }
        };
        self.nulls.push(valid);
        Ok(())
    }

    /// The column's values as an array of `field`'s type. An error names the value (its index
    /// among the column's values) when one is at fault.
    pub(super) fn finish(mut self, field: &Field) -> Result<ArrayRef, ColumnError> {
        use Values as V;
        let nulls = self.nulls.finish();
        fn prim<T: ArrowPrimitiveType>(
            values: Vec<T::Native>,
            nulls: Option<NullBuffer>,
        ) -> Result<PrimitiveArray<T>, ColumnError> {
            PrimitiveArray::try_new(ScalarBuffer::from(values), nulls).map_err(ColumnError::arrow)
        }
        let array: ArrayRef = match self.values {
            V::Int8(v) => Arc::new(prim::<Int8Type>(v, nulls)?),
            V::UInt8(v) => Arc::new(prim::<UInt8Type>(v, nulls)?),
            V::Int16(v) | V::Year(v) => Arc::new(prim::<Int16Type>(v, nulls)?),
            V::UInt16(v) => Arc::new(prim::<UInt16Type>(v, nulls)?),
            V::Int24(v) | V::Int32(v) => Arc::new(prim::<Int32Type>(v, nulls)?),
            V::UInt24(v) | V::UInt32(v) => Arc::new(prim::<UInt32Type>(v, nulls)?),
            V::Int64(v) => Arc::new(prim::<Int64Type>(v, nulls)?),
            V::UInt64(v) | V::Bit { values: v, .. } => Arc::new(prim::<UInt64Type>(v, nulls)?),
            V::Float32(v) => Arc::new(prim::<Float32Type>(v, nulls)?),
            V::Float64(v) => Arc::new(prim::<Float64Type>(v, nulls)?),
            V::Decimal128 {
                precision,
                scale,
                values,
                ..
            } => Arc::new(
                prim::<Decimal128Type>(values, nulls)?
                    .with_precision_and_scale(precision, scale)
                    .map_err(ColumnError::arrow)?,
            ),
            V::Decimal256 {
                precision,
                scale,
                values,
                ..
            } => Arc::new(
                prim::<Decimal256Type>(values, nulls)?
                    .with_precision_and_scale(precision, scale)
                    .map_err(ColumnError::arrow)?,
            ),
            V::Date(v) => Arc::new(prim::<Date32Type>(v, nulls)?),
            V::TimeOld(v) | V::Time2 { values: v, .. } => {
                Arc::new(prim::<DurationMicrosecondType>(v, nulls)?)
            }
            V::DateTimeOld(v) | V::DateTime2 { values: v, .. } => {
                Arc::new(prim::<TimestampMicrosecondType>(v, nulls)?)
            }
            V::TimestampOld(v) | V::Timestamp2 { values: v, .. } => {
                Arc::new(prim::<TimestampMicrosecondType>(v, nulls)?.with_timezone("UTC"))
            }
            V::Utf8 { text: mut b, .. }
            | V::Latin1 { text: mut b, .. }
            | V::Enum { text: mut b, .. }
            | V::Set { text: mut b, .. }
            | V::Json { text: mut b, .. }
            | V::Rendered { text: mut b, .. } => {
                let offsets = b.offsets();
                // The one UTF-8 check of the column's values; only a failure looks at them one
                // by one, to name the first bad one.
                let data = Buffer::from_vec(b.data);
                match StringArray::try_new(offsets.clone(), data.clone(), nulls) {
                    Ok(array) => Arc::new(array),
                    Err(e) => {
                        return Err(ColumnError::utf8(&offsets, &data)
                            .unwrap_or_else(|| ColumnError::arrow(e)))
                    }
                }
            }
            V::Binary { mut bytes, .. } => {
                let offsets = bytes.offsets();
                Arc::new(
                    BinaryArray::try_new(offsets, Buffer::from_vec(bytes.data), nulls)
                        .map_err(ColumnError::arrow)?,
                )
            }
        };
        if array.data_type() != field.data_type() {
            return Err(ColumnError {
                value: None,
                detail: format!(
                    "built as {}, the field is {}",
                    array.data_type(),
                    field.data_type()
                ),
            });
        }
        if !field.is_nullable() && array.null_count() > 0 {
            return Err(ColumnError {
                value: None,
                detail: "NULL in a non-nullable field".into(),
            });
        }
        Ok(array)
    }
}

/// Why a column's values did not make an array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnError {
    /// The index of the value at fault among the column's values, when one is.
    pub value: Option<usize>,
    pub detail: String,
}

impl ColumnError {
    fn arrow(e: arrow::error::ArrowError) -> Self {
        Self {
            value: None,
            detail: e.to_string(),
        }
    }

    /// The first value of `offsets` into `data` that is not valid UTF-8.
    #[cold]
    fn utf8(offsets: &OffsetBuffer<i32>, data: &[u8]) -> Option<Self> {
        offsets.windows(2).enumerate().find_map(|(i, w)| {
            let bytes = data.get(w[0] as usize..w[1] as usize)?;
            std::str::from_utf8(bytes).err().map(|e| Self {
                value: Some(i),
                detail: format!("invalid UTF-8 in text value: {e}"),
            })
        })
    }
}

/// Appends a decoded value; the value is valid (not NULL).
#[inline(always)]
fn pushed<T>(values: &mut Vec<T>, value: T) -> bool {
    values.push(value);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;

    fn text_column() -> (Column, Field) {
        let kind = ColumnKind::Text {
            charset: Charset::Utf8,
            length: Some(10),
        };
        let column = Column::compile(
            Layout::VarLen {
                prefix: 1,
                max_len: 40,
            },
            &kind,
            true,
        )
        .unwrap();
        (column, kind.field("s", true))
    }

    /// Decodes length-prefixed `values` (`None` for NULL) into a text column.
    fn texts(values: &[Option<&[u8]>]) -> Result<ArrayRef, ColumnError> {
        let (mut column, field) = text_column();
        push_texts(&mut column, values);
        column.finish(&field)
    }

    fn push_texts(column: &mut Column, values: &[Option<&[u8]>]) {
        let mut scratch = String::new();
        for v in values {
            match v {
                None => column.push_null(),
                Some(bytes) => {
                    let mut image = vec![bytes.len() as u8];
                    image.extend_from_slice(bytes);
                    column
                        .decode(&mut Cursor::new(&image), &mut scratch)
                        .unwrap();
                }
            }
        }
    }

    /// Cutting a column at any row and splitting it there give the columns of the rows before
    /// and after, decoded apart; decoding goes on after a cut as after those rows alone.
    #[test]
    fn truncated_and_split_columns_equal_their_parts_decoded_apart() {
        let x: &[u8] = b"x";
        let mut values: Vec<Option<&[u8]>> = vec![Some(b"a"), None, Some(b"bc"), Some(b"")];
        values.extend([Some(x); 9]);
        values.extend([None, Some(&b"d"[..])]);
        let decoded = |values: &[Option<&[u8]>]| {
            let (mut column, field) = text_column();
            push_texts(&mut column, values);
            column.finish(&field).unwrap().to_data()
        };
        let more: &[Option<&[u8]>] = &[Some(b"e"), None];
        for at in 0..=values.len() {
            let (mut head, field) = text_column();
            push_texts(&mut head, &values);
            let tail = head.split_off(at);
            assert_eq!(
                head.clone().finish(&field).unwrap().to_data(),
                decoded(&values[..at])
            );
            assert_eq!(
                tail.finish(&field).unwrap().to_data(),
                decoded(&values[at..])
            );
            let (mut cut, _) = text_column();
            push_texts(&mut cut, &values);
            cut.truncate(at);
            push_texts(&mut cut, more);
            let expect = [&values[..at], more].concat();
            assert_eq!(
                cut.finish(&field).unwrap().to_data(),
                decoded(&expect),
                "at {at}"
            );
        }
        let int = ColumnKind::Int {
            bits: 8,
            unsigned: false,
        };
        let field = int.field("i", false);
        let mut tiny = Column::compile(Layout::Tiny, &int, false).unwrap();
        let mut scratch = String::new();
        for v in [1u8, 2, 3] {
            tiny.decode(&mut Cursor::new(&[v]), &mut scratch).unwrap();
        }
        let tail = tiny.split_off(1).finish(&field).unwrap();
        assert_eq!(
            tail.as_primitive::<arrow::datatypes::Int8Type>().values(),
            &[2, 3]
        );
        let head = tiny.finish(&field).unwrap();
        assert_eq!(
            head.as_primitive::<arrow::datatypes::Int8Type>().values(),
            &[1]
        );
    }

    /// Appending columns decoded apart gives the column of all their values decoded together,
    /// whichever part holds the NULLs, and leaves the appended one empty for reuse.
    #[test]
    fn appended_columns_equal_one_decoded_whole() {
        let x: &[u8] = b"x";
        let parts: [&[Option<&[u8]>]; 4] = [
            &[Some(b"a"), Some(b"bc")],
            &[Some(b""), None, Some(b"d")],
            &[Some(x); 9],
            &[None],
        ];
        for order in [[0, 1, 2, 3], [2, 0, 3, 1], [0, 2, 1, 3]] {
            let (mut whole, field) = text_column();
            let (mut run, _) = text_column();
            let (mut part, _) = text_column();
            for &p in &order {
                push_texts(&mut whole, parts[p]);
                push_texts(&mut part, parts[p]);
                assert!(run.can_take(&part));
                run.append(&mut part);
                assert_eq!(part.clone().finish(&field).unwrap().len(), 0);
            }
            let whole = whole.finish(&field).unwrap();
            let run = run.finish(&field).unwrap();
            assert_eq!(whole.to_data(), run.to_data(), "order {order:?}");
        }
        let int = ColumnKind::Int {
            bits: 8,
            unsigned: false,
        };
        let tiny = Column::compile(Layout::Tiny, &int, false).unwrap();
        assert!(!text_column().0.can_take(&tiny));
    }

    #[test]
    fn validity_appears_only_with_the_first_null() {
        let all = texts(&[Some(b"a"), Some(b""), Some(b"c")]).unwrap();
        assert!(all.nulls().is_none());
        // The NULL comes after more than a byte's worth of valid values.
        let mut values: Vec<Option<&[u8]>> = vec![Some(b"x"); 11];
        values.push(None);
        values.push(Some(b"y"));
        let some = texts(&values).unwrap();
        assert_eq!(some.null_count(), 1);
        assert!(some.is_null(11));
        assert!((0..11).chain([12]).all(|i| some.is_valid(i)));
        assert_eq!(some.as_string::<i32>().value(12), "y");
    }

    #[test]
    fn bad_utf8_names_its_value_even_when_the_buffer_is_valid() {
        let err = texts(&[Some(b"ok"), Some(b"\xff")]).unwrap_err();
        assert_eq!(err.value, Some(1));
        assert!(err.detail.contains("invalid UTF-8"), "{}", err.detail);
        // "é" split across two values: the buffer is valid UTF-8, each value is not.
        let err = texts(&[Some(b"\xc3"), Some(b"\xa9")]).unwrap_err();
        assert_eq!(err.value, Some(0));
    }

    #[test]
    fn truncated_values_push_nothing() {
        let (mut column, field) = text_column();
        let mut scratch = String::new();
        assert!(column
            .decode(&mut Cursor::new(&[5, b'a']), &mut scratch)
            .is_err());
        column
            .decode(&mut Cursor::new(&[1, b'a']), &mut scratch)
            .unwrap();
        assert_eq!(column.finish(&field).unwrap().len(), 1);
    }

    #[test]
    fn pairings_without_an_operation_are_refused() {
        let int = ColumnKind::Int {
            bits: 8,
            unsigned: false,
        };
        assert!(Column::compile(Layout::Long, &int, false).is_err());
        assert!(
            Column::compile(Layout::Tiny, &ColumnKind::Simple(SimpleKind::Double), false).is_err()
        );
        assert!(Column::compile(Layout::Tiny, &int, false).is_ok());
    }
}
