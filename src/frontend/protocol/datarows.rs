//! `DataRow`s of a whole batch at a time, written into one buffer.
//!
//! The per-value path (`encode::encode_row`, through arrow-pg) finds each value's Arrow type,
//! downcasts its array and reads its field's metadata again for every value, and builds a
//! `rust_decimal` or a decimal string for every `numeric`: most of a large result's time went
//! there. Here each column is looked at once per batch and given a writer for its type and
//! format; the rows are then written one after another into one buffer, each `DataRow` a
//! zero-copy slice of it.
//!
//! The writers cover the types large results are made of: integers, floats (binary), text,
//! booleans, `Decimal128` and `UInt64` as `numeric`, and timestamps without zone (binary).
//! Every other column, and any column with arrow-pg's own markers in its field metadata,
//! takes the per-value path for its values, written into the same buffer.
//!
//! # Invariant
//! The bytes of every value are exactly those the per-value path writes (the tests compare
//! both over every writer, nulls and edge values included), so a client cannot tell which
//! path a column took.

use std::fmt::Write;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use chrono::DateTime;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, LargeStringArray, PrimitiveArray,
    RecordBatch, StringArray, StringViewArray,
};
use datafusion::arrow::datatypes::{
    ArrowPrimitiveType, DataType, Field, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, TimeUnit, TimestampMicrosecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use futures::{Stream, StreamExt};
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo};
use pgwire::error::PgWireResult;
use pgwire::messages::data::DataRow;

use crate::frontend::protocol::encode;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// Prefix of arrow-pg's field metadata markers (`pg.char`, `pg.oid_alias`, ...), whose
/// columns it encodes its own way.
const ARROW_PG_MARKER: &str = "pg.";

/// How one column's values are written.
enum Writer<'a> {
    /// Integers as `int2`/`int4`/`int8` (the unsigned ones widened as arrow-pg widens them).
    Int(Ints<'a>),
    F32(&'a PrimitiveArray<Float32Type>),
    F64(&'a PrimitiveArray<Float64Type>),
    Bool(&'a BooleanArray),
    Utf8(&'a StringArray),
    LargeUtf8(&'a LargeStringArray),
    Utf8View(&'a StringViewArray),
    /// `numeric` from its unscaled value and scale.
    Decimal(&'a Decimal128Array, u8, u8),
    /// `numeric` from an unsigned 64-bit integer.
    U64(&'a PrimitiveArray<UInt64Type>),
    /// `timestamp` (binary) from microseconds since the Unix epoch.
    TimestampMicros(&'a PrimitiveArray<TimestampMicrosecondType>),
    /// The per-value path, into an encoder of this one field.
    PerValue(&'a ArrayRef, &'a Field, Box<(FieldInfo, DataRowEncoder)>),
}

/// An integer column with the width it is sent at.
enum Ints<'a> {
    I8(&'a PrimitiveArray<Int8Type>),
    I16(&'a PrimitiveArray<Int16Type>),
    I32(&'a PrimitiveArray<Int32Type>),
    I64(&'a PrimitiveArray<Int64Type>),
    U8(&'a PrimitiveArray<UInt8Type>),
    U16(&'a PrimitiveArray<UInt16Type>),
    U32(&'a PrimitiveArray<UInt32Type>),
}

impl Ints<'_> {
    /// The value widened to i64, with the byte width it is sent at in binary.
    fn get(&self, row: usize) -> (i64, usize) {
        match self {
            Ints::I8(a) => (i64::from(a.value(row)), 2),
            Ints::I16(a) => (i64::from(a.value(row)), 2),
            Ints::I32(a) => (i64::from(a.value(row)), 4),
            Ints::I64(a) => (a.value(row), 8),
            Ints::U8(a) => (i64::from(a.value(row)), 2),
            Ints::U16(a) => (i64::from(a.value(row)), 4),
            Ints::U32(a) => (i64::from(a.value(row)), 8),
        }
    }
}

fn primitive<T: ArrowPrimitiveType>(array: &ArrayRef) -> &PrimitiveArray<T> {
    array.as_primitive::<T>()
}

impl<'a> Writer<'a> {
    /// The writer of `array` sent as `field`.
    fn of(array: &'a ArrayRef, arrow: &'a Field, field: &FieldInfo) -> Self {
        let binary = field.format() == FieldFormat::Binary;
        let marked = arrow
            .metadata()
            .keys()
            .any(|k| k.starts_with(ARROW_PG_MARKER));
        let per_value = || {
            let encoder = DataRowEncoder::new(Arc::new(vec![field.clone()]));
            Writer::PerValue(array, arrow, Box::new((field.clone(), encoder)))
        };
        if marked || matches!(field.datatype().kind(), postgres_types::Kind::Array(_)) {
            return per_value();
        }
        let int = |ints| Writer::Int(ints);
        match array.data_type() {
            DataType::Int8 => int(Ints::I8(primitive(array))),
            DataType::Int16 => int(Ints::I16(primitive(array))),
            DataType::Int32 => int(Ints::I32(primitive(array))),
            DataType::Int64 => int(Ints::I64(primitive(array))),
            DataType::UInt8 => int(Ints::U8(primitive(array))),
            DataType::UInt16 => int(Ints::U16(primitive(array))),
            DataType::UInt32 => int(Ints::U32(primitive(array))),
            DataType::UInt64 => Writer::U64(primitive(array)),
            // Text floats follow `extra_float_digits`: the per-value path has the rules.
            DataType::Float32 if binary => Writer::F32(primitive(array)),
            DataType::Float64 if binary => Writer::F64(primitive(array)),
            DataType::Boolean => Writer::Bool(array.as_boolean()),
            DataType::Utf8 => Writer::Utf8(array.as_string()),
            DataType::LargeUtf8 => Writer::LargeUtf8(array.as_string()),
            DataType::Utf8View => Writer::Utf8View(array.as_string_view()),
            DataType::Decimal128(p, s) if *s >= 0 => {
                Writer::Decimal(array.as_primitive(), *p, *s as u8)
            }
            DataType::Timestamp(TimeUnit::Microsecond, None) if binary => {
                Writer::TimestampMicros(primitive(array))
            }
            _ => per_value(),
        }
    }

    /// Writes the value of `row` (length word and bytes) into `out`.
    fn write(&mut self, row: usize, binary: bool, out: &mut BytesMut) -> PgWireResult<()> {
        if let Writer::PerValue(array, arrow, encoder) = self {
            let (field, encoder) = encoder.as_mut();
            encode::encode_value(encoder, array, row, arrow, field)?;
            out.put_slice(&encoder.take_row().data);
            return Ok(());
        }
        if self.array().is_null(row) {
            out.put_i32(-1);
            return Ok(());
        }
        let start = out.len();
        out.put_i32(0);
        match self {
            Writer::Int(ints) => {
                let (v, width) = ints.get(row);
                match (binary, width) {
                    (false, _) => write_display(out, v),
                    // The widths are those of the values' own types: no truncation.
                    (true, 2) => out.put_i16(v as i16),
                    (true, 4) => out.put_i32(v as i32),
                    (true, _) => out.put_i64(v),
                }
            }
            Writer::F32(a) => out.put_f32(a.value(row)),
            Writer::F64(a) => out.put_f64(a.value(row)),
            Writer::Bool(a) => match binary {
                true => out.put_u8(u8::from(a.value(row))),
                false => out.put_slice(if a.value(row) { b"t" } else { b"f" }),
            },
            Writer::Utf8(a) => out.put_slice(a.value(row).as_bytes()),
            Writer::LargeUtf8(a) => out.put_slice(a.value(row).as_bytes()),
            Writer::Utf8View(a) => out.put_slice(a.value(row).as_bytes()),
            Writer::Decimal(a, p, s) => {
                let v = a.value(row);
                match binary {
                    true => numeric_binary(v < 0, v.unsigned_abs(), *s, out),
                    false => {
                        use datafusion::arrow::datatypes::{Decimal128Type, DecimalType};
                        out.put_slice(Decimal128Type::format_decimal(v, *p, *s as i8).as_bytes())
                    }
                }
            }
            Writer::U64(a) => match binary {
                true => numeric_binary_u64(a.value(row), out),
                false => write_display(out, a.value(row)),
            },
            Writer::TimestampMicros(a) => {
                let micros = a.value(row);
                // Outside chrono's range the per-value path sends NULL; so does this one.
                let since_pg_epoch = DateTime::from_timestamp_micros(micros)
                    .and(micros.checked_sub(PG_EPOCH_MICROS));
                match since_pg_epoch {
                    Some(v) => out.put_i64(v),
                    None => {
                        out.truncate(start);
                        out.put_i32(-1);
                        return Ok(());
                    }
                }
            }
            Writer::PerValue(..) => unreachable!("written above"),
        }
        let length = (out.len() - start - 4) as i32;
        out[start..start + 4].copy_from_slice(&length.to_be_bytes());
        Ok(())
    }

    fn array(&self) -> &dyn Array {
        match self {
            Writer::Int(Ints::I8(a)) => *a,
            Writer::Int(Ints::I16(a)) => *a,
            Writer::Int(Ints::I32(a)) => *a,
            Writer::Int(Ints::I64(a)) => *a,
            Writer::Int(Ints::U8(a)) => *a,
            Writer::Int(Ints::U16(a)) => *a,
            Writer::Int(Ints::U32(a)) => *a,
            Writer::F32(a) => *a,
            Writer::F64(a) => *a,
            Writer::Bool(a) => *a,
            Writer::Utf8(a) => *a,
            Writer::LargeUtf8(a) => *a,
            Writer::Utf8View(a) => *a,
            Writer::Decimal(a, ..) => *a,
            Writer::U64(a) => *a,
            Writer::TimestampMicros(a) => *a,
            Writer::PerValue(a, ..) => a.as_ref(),
        }
    }
}

fn write_display(out: &mut BytesMut, value: impl std::fmt::Display) {
    // Writing into a `BytesMut` cannot fail.
    let _ = write!(out, "{value}");
}

/// Bytes of a batch's rows reserved up front per value (length word and a short value).
const BYTES_PER_VALUE: usize = 12;

/// The rows of `batch` as `DataRow`s in the formats of `fields`.
pub fn batch(batch: &RecordBatch, fields: &[FieldInfo]) -> PgWireResult<Vec<DataRow>> {
    let schema = batch.schema_ref();
    let mut writers: Vec<(Writer<'_>, bool)> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let writer = Writer::of(batch.column(i), schema.field(i), f);
            (writer, f.format() == FieldFormat::Binary)
        })
        .collect();
    let rows = batch.num_rows();
    let mut out = BytesMut::with_capacity(rows * fields.len() * BYTES_PER_VALUE);
    let mut data = Vec::with_capacity(rows);
    for row in 0..rows {
        for (writer, binary) in &mut writers {
            writer.write(row, *binary, &mut out)?;
        }
        data.push(DataRow::new(out.split(), fields.len() as i16));
    }
    Ok(data)
}

/// Sign word of a negative `numeric` in the binary format.
const NUMERIC_NEGATIVE: u16 = 0x4000;

/// Writes `magnitude / 10^scale` (negated if `negative`) as PostgreSQL's binary `numeric`:
/// base-10000 digits without leading or trailing zero digits, the weight of the first, the
/// sign, and the display scale, as `encode::numeric_binary` writes it from decimal text.
fn numeric_binary(negative: bool, magnitude: u128, scale: u8, out: &mut BytesMut) {
    let ten = |n: u32| 10u128.pow(n);
    let scale_u32 = u32::from(scale);
    let (mut int, frac) = (magnitude / ten(scale_u32), magnitude % ten(scale_u32));
    // Integer groups, least significant first.
    let mut int_groups: Vec<i16> = Vec::new();
    while int > 0 {
        int_groups.push((int % 10_000) as i16);
        int /= 10_000;
    }
    let mut digits: Vec<i16> = int_groups.iter().rev().copied().collect();
    let mut weight = int_groups.len() as i16 - 1;
    // Fraction groups, most significant first; the last one padded with zeros on the right.
    let mut remaining = scale_u32;
    while remaining > 0 {
        let take = remaining.min(4);
        remaining -= take;
        let group = (frac / ten(remaining)) % ten(take) * ten(4 - take);
        digits.push(group as i16);
    }
    let leading = digits.iter().take_while(|&&d| d == 0).count();
    digits.drain(..leading);
    weight -= leading as i16;
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        weight = 0;
    }
    let negative = negative && !digits.is_empty();
    out.put_i16(digits.len() as i16);
    out.put_i16(weight);
    out.put_u16(if negative { NUMERIC_NEGATIVE } else { 0 });
    out.put_u16(u16::from(scale));
    for d in digits {
        out.put_i16(d);
    }
}

/// Writes an unsigned integer as binary `numeric` as arrow-pg does (through `rust_decimal`):
/// every base-10000 digit of the integer, trailing zero digits included (`10000` is `1, 0`
/// with weight 1, where PostgreSQL would write `1`; both read back as the same value).
fn numeric_binary_u64(value: u64, out: &mut BytesMut) {
    let mut groups: Vec<i16> = Vec::new();
    let mut rest = value;
    while rest > 0 {
        groups.push((rest % 10_000) as i16);
        rest /= 10_000;
    }
    out.put_i16(groups.len() as i16);
    out.put_i16((groups.len() as i16 - 1).max(0));
    out.put_u16(0);
    out.put_u16(0);
    for d in groups.iter().rev() {
        out.put_i16(*d);
    }
}

/// The rows of a stream of batches as `DataRow`s, a batch at a time (see `datarows`).
pub fn data_rows<S>(
    batches: S,
    fields: Arc<Vec<FieldInfo>>,
) -> impl Stream<Item = PgWireResult<DataRow>> + Send
where
    S: Stream<Item = PgWireResult<RecordBatch>> + Send,
{
    batches.flat_map(move |batch| {
        let rows: Vec<PgWireResult<_>> = match batch.and_then(|b| self::batch(&b, &fields)) {
            Ok(rows) => rows.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(rows)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{
        BooleanArray, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array, Int8Array,
        TimestampMicrosecondArray, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
    };
    use datafusion::arrow::datatypes::Schema;
    use pgwire::api::portal::Format;
    use pgwire::types::format::FormatOptions;

    /// A batch with a column for every writer (and one for the per-value path), with nulls
    /// and edge values.
    fn every_writer() -> RecordBatch {
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "i8",
                Arc::new(Int8Array::from(vec![Some(-128), None, Some(127)])),
            ),
            (
                "i16",
                Arc::new(Int16Array::from(vec![Some(i16::MIN), Some(0), None])),
            ),
            (
                "i32",
                Arc::new(Int32Array::from(vec![None, Some(i32::MAX), Some(-7)])),
            ),
            (
                "i64",
                Arc::new(Int64Array::from(vec![Some(i64::MIN), Some(i64::MAX), None])),
            ),
            (
                "u8",
                Arc::new(UInt8Array::from(vec![Some(255), None, Some(0)])),
            ),
            (
                "u16",
                Arc::new(UInt16Array::from(vec![Some(65535), Some(1), None])),
            ),
            (
                "u32",
                Arc::new(UInt32Array::from(vec![Some(u32::MAX), None, Some(3)])),
            ),
            (
                "u64",
                Arc::new(UInt64Array::from(vec![Some(u64::MAX), Some(10_000), None])),
            ),
            (
                "u64b",
                Arc::new(UInt64Array::from(vec![Some(0), Some(100_000_000), Some(7)])),
            ),
            (
                "f32",
                Arc::new(Float32Array::from(vec![Some(1.5), None, Some(-0.1)])),
            ),
            (
                "f64",
                Arc::new(Float64Array::from(vec![Some(f64::MAX), Some(0.1), None])),
            ),
            (
                "b",
                Arc::new(BooleanArray::from(vec![Some(true), Some(false), None])),
            ),
            (
                "s",
                Arc::new(StringArray::from(vec![Some("ada"), None, Some("")])),
            ),
            (
                "ls",
                Arc::new(LargeStringArray::from(vec![None, Some("x y"), Some("é")])),
            ),
            (
                "vs",
                Arc::new(StringViewArray::from(vec![
                    Some("a much longer string value"),
                    None,
                    Some("z"),
                ])),
            ),
            (
                "d",
                Arc::new(
                    Decimal128Array::from(vec![Some(-150), Some(0), None])
                        .with_precision_and_scale(12, 2)
                        .unwrap(),
                ),
            ),
            (
                "d0",
                Arc::new(
                    Decimal128Array::from(vec![Some(100_000_000), None, Some(-1)])
                        .with_precision_and_scale(20, 0)
                        .unwrap(),
                ),
            ),
            (
                "dmax",
                Arc::new(
                    Decimal128Array::from(vec![
                        Some(i128::MAX / 10),
                        Some(5),
                        Some(-10_i128.pow(37)),
                    ])
                    .with_precision_and_scale(38, 38)
                    .unwrap(),
                ),
            ),
            (
                "ts",
                Arc::new(TimestampMicrosecondArray::from(vec![
                    Some(1_709_208_000_500_000),
                    None,
                    Some(-62_135_596_800_000_000),
                ])),
            ),
            // Not covered by a writer: the per-value path.
            (
                "date",
                Arc::new(datafusion::arrow::array::Date32Array::from(vec![
                    Some(19_782),
                    None,
                    Some(-1),
                ])),
            ),
        ];
        let schema = Schema::new(
            columns
                .iter()
                .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
                .collect::<Vec<_>>(),
        );
        RecordBatch::try_new(
            Arc::new(schema),
            columns.into_iter().map(|(_, a)| a).collect(),
        )
        .unwrap()
    }

    /// The rows as the per-value path writes them.
    fn per_value(batch: &RecordBatch, fields: &Arc<Vec<FieldInfo>>) -> Vec<DataRow> {
        let mut encoder = DataRowEncoder::new(Arc::clone(fields));
        (0..batch.num_rows())
            .map(|row| {
                encode::encode_row(&mut encoder, batch, row, fields).unwrap();
                encoder.take_row()
            })
            .collect()
    }

    #[test]
    fn batch_rows_are_the_bytes_of_the_per_value_path() {
        let batch = every_writer();
        for format in [Format::UnifiedText, Format::UnifiedBinary] {
            let options = Arc::new(FormatOptions::default());
            let fields =
                Arc::new(encode::pg_fields(batch.schema_ref(), &format, &options).unwrap());
            let fast = super::batch(&batch, &fields).unwrap();
            let slow = per_value(&batch, &fields);
            assert_eq!(fast.len(), slow.len());
            for (row, (f, s)) in fast.iter().zip(&slow).enumerate() {
                assert_eq!(f.field_count, s.field_count);
                assert_eq!(f.data, s.data, "{format:?}, row {row}");
            }
        }
    }

    #[test]
    fn numeric_from_integers_matches_numeric_from_text() {
        use datafusion::arrow::datatypes::{Decimal128Type, DecimalType};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        use rand::{Rng, SeedableRng};
        for _ in 0..20_000 {
            let scale: u8 = rng.random_range(0..=38);
            let digits = rng.random_range(1..=38u32);
            let v = rng.random_range(0..10i128.pow(digits)) * if rng.random() { 1 } else { -1 };
            let text = Decimal128Type::format_decimal(v, 38, scale as i8);
            let mut from_text = BytesMut::new();
            encode::numeric_binary(&text, &mut from_text).unwrap();
            let mut from_int = BytesMut::new();
            numeric_binary(v < 0, v.unsigned_abs(), scale, &mut from_int);
            assert_eq!(from_int, from_text, "{text}");
        }
    }
}
