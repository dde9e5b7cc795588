//! Query results on the wire: Arrow types to PostgreSQL types, rows to `DataRow` and `COPY`
//! messages, in text or binary format.
//!
//! `arrow-pg` maps and encodes most types (integers, unsigned integers without overflow,
//! floats, text, bytea, dates, times, timestamps with and without zone, intervals, lists as
//! arrays, structs as composites). Two things are ours:
//! * **numeric**: `arrow-pg` goes through `rust_decimal`, which holds 28 digits; MySQL
//!   `DECIMAL(65,30)` arrives as `Decimal256`. [`Numeric`] encodes any `Decimal128`/`Decimal256`
//!   exactly from Arrow's own decimal text, keeping the column's scale (`1.50` stays `1.50`).
//! * **json**: text columns whose MySQL type is `json` (field metadata `mysql.type`) are
//!   described as `json`, whose text and binary forms are both the document's text.
//!
//! * **timestamptz** in text: shown in the session's `TimeZone` ([`in_time_zone`]) and written
//!   as PostgreSQL writes it ([`TimestampTz`]): trailing fraction zeros dropped, and the offset's
//!   minutes kept (`+05:45`), which `arrow-pg` drops.
//! * **float4, float8, timestamp, time, interval** in text: as PostgreSQL writes them (see
//!   `pg_text`): `1e+300`, `Infinity`, and no trailing zeros in the seconds' fraction.
//!
//! # Invariant
//! The fields a statement is described with ([`pg_fields`]) are the fields its rows are encoded
//! with, so a `RowDescription` always matches the `DataRow`s after it.

use std::error::Error;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use chrono::{DateTime, FixedOffset};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Decimal256Type, DecimalType, Field, Float32Type, Float64Type,
    Int8Type, Schema,
};
use futures::{Stream, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::{CopyEncoder, DataRowEncoder, FieldInfo};
use pgwire::api::Type;
use pgwire::error::PgWireResult;
use pgwire::types::format::FormatOptions;
use pgwire::types::ToSqlText;
use postgres_types::{to_sql_checked, IsNull, ToSql};

use crate::change::kinds::{Pg, SimpleKind};
use crate::change::schema::MYSQL_TYPE_KEY;
use crate::frontend::protocol::pg_text::{PgFloat, TrimFraction};
use crate::sqlstate::SqlState;

/// The PostgreSQL type a column is sent as.
pub fn pg_type(field: &Arc<Field>) -> PgWireResult<Type> {
    match field.data_type() {
        DataType::Decimal128(..) | DataType::Decimal256(..) => Ok(Type::NUMERIC),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            match field.metadata().get(MYSQL_TYPE_KEY).map(String::as_str) {
                Some(t) if SimpleKind::from_name(t).is_some_and(|k| k.row().pg == Pg::Json) => {
                    Ok(Type::JSON)
                }
                Some(t) if varchar_length(t).is_some() => Ok(Type::VARCHAR),
                _ => arrow_pg::datatypes::field_into_pg_type(field),
            }
        }
        _ => arrow_pg::datatypes::field_into_pg_type(field),
    }
}

/// The `n` of a captured `CHAR(n)`/`VARCHAR(n)` column's MySQL type (`varchar(n)`).
fn varchar_length(mysql: &str) -> Option<i32> {
    mysql
        .strip_prefix("varchar(")?
        .strip_suffix(')')?
        .parse()
        .ok()
}

/// The `atttypmod` of a captured column (one whose field names its MySQL type), as PostgreSQL
/// writes it for the type the column is sent as: `numeric(p,s)` is `(p << 16 | s) + 4`,
/// `varchar(n)` is `n + 4`, `timestamp(p)` and `timestamptz(p)` are `p`; -1 ("none") for any
/// other column, and for computed values, which PostgreSQL describes without modifiers too.
pub fn type_modifier(field: &Field) -> i32 {
    let Some(mysql) = field.metadata().get(MYSQL_TYPE_KEY) else {
        return -1;
    };
    match field.data_type() {
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => {
            ((i32::from(*p) << 16) | i32::from(*s)) + 4
        }
        DataType::Timestamp(..) => mysql
            .rsplit_once('(')
            .and_then(|(_, fsp)| fsp.strip_suffix(')'))
            .and_then(|fsp| fsp.parse().ok())
            .unwrap_or(-1),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => varchar_length(mysql)
            .and_then(|n| n.checked_add(4))
            .unwrap_or(-1),
        _ => -1,
    }
}

/// `pg_type.typlen` of `ty`: the byte width of a fixed-width type, -1 for the others.
fn type_size(ty: &Type) -> i16 {
    match *ty {
        Type::BOOL | Type::CHAR => 1,
        Type::INT2 => 2,
        Type::INT4 | Type::FLOAT4 | Type::DATE | Type::OID => 4,
        Type::INT8 | Type::FLOAT8 | Type::TIME | Type::TIMESTAMP | Type::TIMESTAMPTZ => 8,
        Type::TIMETZ => 12,
        Type::INTERVAL | Type::UUID => 16,
        _ => -1,
    }
}

/// The row description of `schema` in `format`.
pub fn pg_fields(
    schema: &Schema,
    format: &Format,
    options: &Arc<FormatOptions>,
) -> PgWireResult<Vec<FieldInfo>> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (table, column) = crate::frontend::protocol::origins::origin(f);
            let ty = pg_type(f)?;
            let size = type_size(&ty);
            Ok(
                FieldInfo::new(f.name().clone(), table, column, ty, format.format_for(i))
                    .with_type_size(size)
                    .with_type_modifier(type_modifier(f))
                    .with_format_options(Arc::clone(options)),
            )
        })
        .collect()
}

/// Something that takes encoded values one column at a time: a `DataRow` or a `COPY` line.
pub trait RowSink: arrow_pg::encoder::Encoder {}
impl RowSink for DataRowEncoder {}
impl RowSink for CopyEncoder {}

/// Encodes row `row` of `batch` into `sink`.
pub fn encode_row<S: RowSink>(
    sink: &mut S,
    batch: &RecordBatch,
    row: usize,
    fields: &[FieldInfo],
) -> PgWireResult<()> {
    let schema = batch.schema_ref();
    for (column, field) in fields.iter().enumerate() {
        encode_value(sink, batch.column(column), row, schema.field(column), field)?;
    }
    Ok(())
}

/// Encodes the value at `row` of `array` (of Arrow field `arrow`) into `sink` as `field`.
pub fn encode_value<S: RowSink>(
    sink: &mut S,
    array: &ArrayRef,
    row: usize,
    arrow: &Field,
    field: &FieldInfo,
) -> PgWireResult<()> {
    match array.data_type() {
        DataType::Decimal128(..) | DataType::Decimal256(..) => {
            sink.encode_field(&Numeric::from_array(array, row), field)
        }
        DataType::Timestamp(_, Some(_)) => {
            sink.encode_field(&TimestampTz::from_array(array, row)?, field)
        }
        DataType::Float64 => {
            let value =
                (!array.is_null(row)).then(|| array.as_primitive::<Float64Type>().value(row));
            sink.encode_field(&PgFloat::Double(value), field)
        }
        DataType::Float32 => {
            let value =
                (!array.is_null(row)).then(|| array.as_primitive::<Float32Type>().value(row));
            sink.encode_field(&PgFloat::Single(value), field)
        }
        // PostgreSQL drops the trailing zeros of the seconds' fraction; arrow-pg writes six digits.
        DataType::Timestamp(_, None)
        | DataType::Time32(_)
        | DataType::Time64(_)
        | DataType::Duration(_)
        | DataType::Interval(_) => {
            arrow_pg::encoder::encode_value(&mut TrimFraction(sink), array, row, arrow, field)
        }
        // Sent as int2 (PostgreSQL has no one-byte integer); arrow-pg would write one byte.
        DataType::Int8 => {
            let value = (!array.is_null(row))
                .then(|| i16::from(array.as_primitive::<Int8Type>().value(row)));
            sink.encode_field(&value, field)
        }
        _ => arrow_pg::encoder::encode_value(sink, array, row, arrow, field),
    }
}

/// `batch` with its `timestamptz` columns shown in `zone` (an IANA name or an offset such as
/// `+05:45`): only the columns' zone changes, not the instants.
pub fn in_time_zone(batch: RecordBatch, zone: &Arc<str>) -> PgWireResult<RecordBatch> {
    use datafusion::arrow::datatypes::{Field, Schema};
    let schema = batch.schema();
    let needs = |t: &DataType| matches!(t, DataType::Timestamp(_, Some(z)) if z != zone);
    if !schema.fields().iter().any(|f| needs(f.data_type())) {
        return Ok(batch);
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        match field.data_type() {
            DataType::Timestamp(unit, Some(_)) if needs(field.data_type()) => {
                let to = DataType::Timestamp(*unit, Some(Arc::clone(zone)));
                columns.push(datafusion::arrow::compute::cast(column, &to).map_err(|e| {
                    crate::frontend::protocol::error::user_error(
                        SqlState::INTERNAL_ERROR,
                        e.to_string(),
                    )
                })?);
                fields.push(Arc::new(Field::clone(field).with_data_type(to)));
            }
            _ => {
                columns.push(Arc::clone(column));
                fields.push(Arc::clone(field));
            }
        }
    }
    let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    RecordBatch::try_new(schema, columns).map_err(|e| {
        crate::frontend::protocol::error::user_error(SqlState::INTERNAL_ERROR, e.to_string())
    })
}

/// The rows of a stream of batches as `COPY` data lines, from `encoder` (text or CSV).
pub fn copy_rows<S>(
    batches: S,
    fields: Arc<Vec<FieldInfo>>,
    mut encoder: CopyEncoder,
) -> impl Stream<Item = PgWireResult<pgwire::messages::copy::CopyData>> + Send
where
    S: Stream<Item = PgWireResult<RecordBatch>> + Send,
{
    batches.flat_map(move |batch| {
        let rows: Vec<PgWireResult<_>> = match batch {
            Ok(batch) => (0..batch.num_rows())
                .map(|row| {
                    encode_row(&mut encoder, &batch, row, &fields)?;
                    Ok(encoder.take_copy())
                })
                .collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(rows)
    })
}

/// An exact decimal value in Arrow's text form (`-12.50`), or NULL.
#[derive(Debug)]
pub struct Numeric(Option<String>);

impl Numeric {
    fn from_array(array: &ArrayRef, row: usize) -> Self {
        if array.is_null(row) {
            return Self(None);
        }
        Self(Some(match array.data_type() {
            DataType::Decimal128(p, s) => {
                let v = array.as_primitive::<Decimal128Type>().value(row);
                Decimal128Type::format_decimal(v, *p, *s)
            }
            DataType::Decimal256(p, s) => {
                let v = array.as_primitive::<Decimal256Type>().value(row);
                Decimal256Type::format_decimal(v, *p, *s)
            }
            other => unreachable!("Numeric::from_array called on {other}"),
        }))
    }
}

impl ToSqlText for Numeric {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
        _format_options: &FormatOptions,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        Ok(put_text(self.0.as_deref(), out))
    }
}

/// Writes a value's text form, or says it is NULL.
fn put_text(text: Option<&str>, out: &mut BytesMut) -> IsNull {
    match text {
        Some(text) => {
            out.put_slice(text.as_bytes());
            IsNull::No
        }
        None => IsNull::Yes,
    }
}

impl ToSql for Numeric {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match &self.0 {
            Some(text) => {
                numeric_binary(text, out)?;
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        }
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }

    to_sql_checked!();
}

/// A `timestamptz` value in its column's zone, or NULL.
#[derive(Debug)]
pub struct TimestampTz(Option<DateTime<FixedOffset>>);

impl TimestampTz {
    fn from_array(array: &ArrayRef, row: usize) -> PgWireResult<Self> {
        use datafusion::arrow::array::timezone::Tz;
        use datafusion::arrow::datatypes::{
            TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
            TimestampSecondType,
        };
        let DataType::Timestamp(unit, Some(zone)) = array.data_type() else {
            unreachable!("TimestampTz::from_array called on {}", array.data_type());
        };
        if array.is_null(row) {
            return Ok(Self(None));
        }
        let micros = match unit {
            TimeUnit::Second => array
                .as_primitive::<TimestampSecondType>()
                .value(row)
                .checked_mul(1_000_000),
            TimeUnit::Millisecond => array
                .as_primitive::<TimestampMillisecondType>()
                .value(row)
                .checked_mul(1_000),
            TimeUnit::Microsecond => {
                Some(array.as_primitive::<TimestampMicrosecondType>().value(row))
            }
            TimeUnit::Nanosecond => Some(
                array
                    .as_primitive::<TimestampNanosecondType>()
                    .value(row)
                    .div_euclid(1_000),
            ),
        };
        let out_of_range = || {
            crate::frontend::protocol::error::user_error(
                SqlState::DATETIME_FIELD_OVERFLOW,
                "timestamp out of range",
            )
        };
        let instant = micros
            .and_then(DateTime::from_timestamp_micros)
            .ok_or_else(out_of_range)?;
        let zone: Tz = zone
            .parse()
            .map_err(|e: datafusion::arrow::error::ArrowError| {
                crate::frontend::protocol::error::user_error(
                    SqlState::INTERNAL_ERROR,
                    e.to_string(),
                )
            })?;
        Ok(Self(Some(instant.with_timezone(&zone).fixed_offset())))
    }
}

/// `2024-02-29 12:00:00.5+05:45`: PostgreSQL's ISO output of a `timestamptz`.
fn timestamptz_text(value: &DateTime<FixedOffset>) -> String {
    use std::fmt::Write;
    let mut text = value.format("%Y-%m-%d %H:%M:%S").to_string();
    let micros = value.timestamp_subsec_micros();
    if micros > 0 {
        let fraction = format!("{micros:06}");
        text.push('.');
        text.push_str(fraction.trim_end_matches('0'));
    }
    let offset = value.offset().local_minus_utc();
    let sign = if offset < 0 { '-' } else { '+' };
    let offset = offset.unsigned_abs();
    let _ = write!(text, "{sign}{:02}", offset / 3600);
    if !offset.is_multiple_of(3600) {
        let _ = write!(text, ":{:02}", offset % 3600 / 60);
        if !offset.is_multiple_of(60) {
            let _ = write!(text, ":{:02}", offset % 60);
        }
    }
    text
}

impl ToSqlText for TimestampTz {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
        _format_options: &FormatOptions,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        Ok(put_text(
            self.0.as_ref().map(timestamptz_text).as_deref(),
            out,
        ))
    }
}

impl ToSql for TimestampTz {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        // The binary form is the instant alone.
        self.0.to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ
    }

    to_sql_checked!();
}

/// Sign word of a negative `numeric` in the binary format.
const NUMERIC_NEGATIVE: u16 = 0x4000;

/// Writes decimal text (`-123.4500`) as PostgreSQL's binary `numeric`: base-10000 digits, the
/// weight of the first one, the sign, and the display scale (the number of fraction digits).
pub(in crate::frontend) fn numeric_binary(
    text: &str,
    out: &mut BytesMut,
) -> Result<(), Box<dyn Error + Sync + Send>> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(format!("not a decimal: {text:?}").into());
    }
    let int = int.trim_start_matches('0');
    // Align the integer part on the left and the fraction on the right to groups of four.
    let int_padded = format!("{}{int}", "0".repeat((4 - int.len() % 4) % 4));
    let frac_padded = format!("{frac}{}", "0".repeat((4 - frac.len() % 4) % 4));
    let group = |s: &str| -> Vec<i16> {
        s.as_bytes()
            .chunks(4)
            .map(|c| c.iter().fold(0i16, |acc, d| acc * 10 + i16::from(d - b'0')))
            .collect()
    };
    let mut digits = group(&int_padded);
    let mut weight = digits.len() as i16 - 1;
    digits.extend(group(&frac_padded));
    let leading = digits.iter().take_while(|&&d| d == 0).count();
    digits.drain(..leading);
    weight -= leading as i16;
    while digits.last() == Some(&0) {
        digits.pop();
    }
    let negative = negative && !digits.is_empty();
    if digits.is_empty() {
        weight = 0;
    }
    out.put_i16(digits.len() as i16);
    out.put_i16(weight);
    out.put_u16(if negative { NUMERIC_NEGATIVE } else { 0 });
    out.put_u16(frac.len() as u16);
    for d in digits {
        out.put_i16(d);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamptz_text_keeps_offset_minutes_and_drops_fraction_zeros() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap();
        assert_eq!(
            timestamptz_text(&at("2024-02-29T12:00:00.5+05:45")),
            "2024-02-29 12:00:00.5+05:45"
        );
        assert_eq!(
            timestamptz_text(&at("2024-02-29T12:00:00+00:00")),
            "2024-02-29 12:00:00+00"
        );
        assert_eq!(
            timestamptz_text(&at("1999-12-31T23:59:59.000001-03:30")),
            "1999-12-31 23:59:59.000001-03:30"
        );
    }

    fn binary(text: &str) -> Vec<i16> {
        let mut out = BytesMut::new();
        numeric_binary(text, &mut out).unwrap();
        out.chunks(2)
            .map(|c| i16::from_be_bytes([c[0], c[1]]))
            .collect()
    }

    #[test]
    fn numeric_binary_matches_postgresql() {
        // ndigits, weight, sign, dscale, digits...
        assert_eq!(binary("0"), [0, 0, 0, 0]);
        assert_eq!(binary("0.00"), [0, 0, 0, 2]);
        assert_eq!(binary("-0.00"), [0, 0, 0, 2]);
        assert_eq!(binary("12345.678"), [3, 1, 0, 3, 1, 2345, 6780]);
        assert_eq!(binary("-1.50"), [2, 0, 0x4000, 2, 1, 5000]);
        assert_eq!(binary("0.0005"), [1, -1, 0, 4, 5]);
        assert_eq!(binary("0.00000005"), [1, -2, 0, 8, 5]);
        assert_eq!(binary("100000000"), [1, 2, 0, 0, 1]);
        // 65 digits, 30 of them after the point: beyond rust_decimal, exact here.
        let big = format!("{}.{}", "9".repeat(35), "9".repeat(30));
        let encoded = binary(&big);
        assert_eq!(&encoded[..4], [17, 8, 0, 30]);
        assert_eq!(encoded[4], 999);
        assert_eq!(encoded[encoded.len() - 1], 9900);
        assert!(numeric_binary("1e5", &mut BytesMut::new()).is_err());
    }
}
