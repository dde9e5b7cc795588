//! Arrow builders for our canonical column types.
//!
//! Every value either read path produces enters Arrow through one of these methods, which own the
//! conversions that must not differ between the binlog and `SELECT` (see the parent module).

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, Date32Builder, Decimal128Builder, Decimal256Builder,
    DurationMicrosecondBuilder, Float32Builder, Float64Builder, Int16Builder, Int32Builder,
    Int64Builder, Int8Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
    UInt16Builder, UInt32Builder, UInt64Builder, UInt8Builder,
};
use arrow::datatypes::{i256, DataType, Decimal128Type, Decimal256Type, DecimalType, SchemaRef};

use super::temporal::{date_to_days, datetime_to_micros, MICROS};
use crate::change::schema::ColumnKind;

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

    /// Appends an unscaled decimal that fits 128 bits.
    #[inline]
    pub fn append_decimal128(&mut self, unscaled: i128) -> Result<(), String> {
        match self {
            ColumnBuilder::Decimal128(b, p, _) => {
                decimal128_fits(unscaled, *p)?;
                b.append_value(unscaled)
            }
            ColumnBuilder::Decimal256(..) => return self.append_decimal(i256::from_i128(unscaled)),
            other => return Err(format!("decimal value for a {other:?} column")),
        }
        Ok(())
    }

    /// Appends an unscaled decimal whose scale is the column's.
    #[inline]
    pub fn append_decimal(&mut self, unscaled: i256) -> Result<(), String> {
        match self {
            ColumnBuilder::Decimal128(..) => {
                return self.append_decimal128(
                    unscaled
                        .to_i128()
                        .ok_or_else(|| format!("decimal {unscaled} exceeds 128 bits"))?,
                )
            }
            ColumnBuilder::Decimal256(b, p, _) => {
                decimal256_fits(unscaled, *p)?;
                b.append_value(unscaled)
            }
            other => return Err(format!("decimal value for a {other:?} column")),
        }
        Ok(())
    }

    /// Appends a date; zero dates become NULL.
    #[inline]
    pub fn append_date(&mut self, y: u32, m: u32, d: u32) -> Result<(), String> {
        match self {
            ColumnBuilder::Date32(b) => b.append_option(date_to_days(y, m, d)?),
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
                b.append_option(datetime_to_micros(y, mo, d, h, mi, s, us)?)
            }
            other => return Err(format!("datetime value for a {other:?} column")),
        }
        Ok(())
    }

    /// Appends a `TIMESTAMP` given as seconds since the epoch; 0 is MySQL's zero timestamp.
    #[inline]
    pub fn append_epoch(&mut self, seconds: u32, micros: u32) -> Result<(), String> {
        let value = epoch_to_micros(seconds, micros)?;
        match self {
            ColumnBuilder::TimestampUtc(b) => b.append_option(value),
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
            ColumnBuilder::Binary(b) => b.append_value(padded(v, pad_to)),
            other => return Err(format!("binary value for a {other:?} column")),
        }
        Ok(())
    }

    /// Finishes the column into an array (the builder is reset and reusable); an error when the
    /// column's DECIMAL precision and scale have no Arrow form.
    pub fn finish(&mut self) -> Result<ArrayRef, String> {
        use ColumnBuilder as B;
        let bad_decimal = |e: arrow::error::ArrowError| e.to_string();
        Ok(match self {
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
                    .map_err(bad_decimal)?,
            ),
            B::Decimal256(b, p, s) => Arc::new(
                b.finish()
                    .with_precision_and_scale(*p, *s)
                    .map_err(bad_decimal)?,
            ),
            B::Date32(b) => Arc::new(b.finish()),
            B::Duration(b) => Arc::new(b.finish()),
            B::Timestamp(b) => Arc::new(b.finish()),
            B::TimestampUtc(b) => Arc::new(b.finish().with_timezone("UTC")),
            B::Utf8(b) => Arc::new(b.finish()),
            B::Binary(b) => Arc::new(b.finish()),
        })
    }
}

/// An error unless an unscaled decimal fits the column's precision (a value read from a
/// corrupt image or text could otherwise make an invalid Arrow array).
#[inline]
pub fn decimal128_fits(unscaled: i128, precision: u8) -> Result<(), String> {
    if Decimal128Type::is_valid_decimal_precision(unscaled, precision) {
        Ok(())
    } else {
        Err(too_many_digits(unscaled, precision))
    }
}

/// [`decimal128_fits`] for values of more than 38 digits.
#[inline]
pub fn decimal256_fits(unscaled: i256, precision: u8) -> Result<(), String> {
    if Decimal256Type::is_valid_decimal_precision(unscaled, precision) {
        Ok(())
    } else {
        Err(too_many_digits(unscaled, precision))
    }
}

#[cold]
fn too_many_digits(unscaled: impl std::fmt::Display, precision: u8) -> String {
    format!("decimal {unscaled} (unscaled) has more than {precision} digits")
}

/// A `TIMESTAMP` given as seconds since the epoch in microseconds; `None` for 0, MySQL's zero
/// timestamp; an error for a fraction of a second or more.
#[inline]
pub fn epoch_to_micros(seconds: u32, micros: u32) -> Result<Option<i64>, String> {
    if micros as i64 >= MICROS {
        return Err(format!(
            "timestamp fraction {micros} exceeds a second of microseconds"
        ));
    }
    Ok((seconds != 0 || micros != 0).then_some(seconds as i64 * MICROS + micros as i64))
}

/// `v` zero-padded to `pad_to` bytes (for `BINARY(n)`), copied only when it is shorter.
#[inline]
pub fn padded(v: &[u8], pad_to: Option<usize>) -> std::borrow::Cow<'_, [u8]> {
    match pad_to {
        Some(n) if v.len() < n => {
            let mut out = Vec::with_capacity(n);
            append_padded(&mut out, v, pad_to);
            std::borrow::Cow::Owned(out)
        }
        _ => std::borrow::Cow::Borrowed(v),
    }
}

/// Appends `v` to `out`, zero-padded to `pad_to` bytes (for `BINARY(n)`, which the binlog
/// stores stripped of its padding).
#[inline]
pub fn append_padded(out: &mut Vec<u8>, v: &[u8], pad_to: Option<usize>) {
    let start = out.len();
    out.extend_from_slice(v);
    if let Some(n) = pad_to {
        if v.len() < n {
            out.resize(start + n, 0);
        }
    }
}

/// Why builders did not make a batch: the column, and what is wrong with its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishError {
    pub column: String,
    pub detail: String,
}

impl std::fmt::Display for FinishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "column {}: {}", self.column, self.detail)
    }
}

/// Finishes one builder per field of `schema` into a batch; an error names the column whose
/// values do not fit its field (a NULL in a non-nullable field, a type or precision mismatch).
pub fn finish_batch(
    schema: &SchemaRef,
    builders: &mut [ColumnBuilder],
) -> Result<RecordBatch, FinishError> {
    if builders.len() != schema.fields().len() {
        return Err(FinishError {
            column: "*".into(),
            detail: format!(
                "{} builders for {} fields",
                builders.len(),
                schema.fields().len()
            ),
        });
    }
    let columns = builders
        .iter_mut()
        .zip(schema.fields())
        .map(|(b, f)| {
            b.finish().map_err(|detail| FinishError {
                column: f.name().clone(),
                detail,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    batch_of(schema, columns)
}

/// A batch of `schema` from finished columns; an error names the column that does not fit
/// its field (a NULL in a non-nullable field, another type).
pub fn batch_of(schema: &SchemaRef, columns: Vec<ArrayRef>) -> Result<RecordBatch, FinishError> {
    for (array, f) in columns.iter().zip(schema.fields()) {
        let fail = |detail: String| FinishError {
            column: f.name().clone(),
            detail,
        };
        if array.data_type() != f.data_type() {
            let built = array.data_type();
            return Err(fail(format!(
                "built as {built}, the field is {}",
                f.data_type()
            )));
        }
        if !f.is_nullable() && array.null_count() > 0 {
            return Err(fail("NULL in a non-nullable field".into()));
        }
    }
    RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| FinishError {
        column: "*".into(),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::kinds::SimpleKind;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Date32Type, Schema};

    #[test]
    fn zero_dates_are_null_and_impossible_ones_errors() {
        let mut b = ColumnBuilder::new(&ColumnKind::Simple(SimpleKind::Date), 4);
        b.append_date(0, 0, 0).unwrap();
        b.append_date(2024, 2, 0).unwrap();
        b.append_date(2024, 2, 29).unwrap();
        assert!(b.append_date(2024, 13, 1).is_err());
        let a = b.finish().unwrap();
        let a = a.as_primitive::<Date32Type>();
        assert_eq!((a.len(), a.null_count()), (3, 2));
        assert_eq!(a.value(2), 19782);
        let mut ts = ColumnBuilder::new(&ColumnKind::Timestamp { fsp: 6 }, 2);
        ts.append_epoch(0, 0).unwrap();
        ts.append_epoch(0, 1).unwrap();
        assert!(ts.append_epoch(1, 1_000_000).is_err());
        assert_eq!(ts.finish().unwrap().null_count(), 1);
    }

    #[test]
    fn decimals_beyond_their_precision_are_errors() {
        let mut b = ColumnBuilder::new(
            &ColumnKind::Decimal {
                precision: 5,
                scale: 2,
            },
            2,
        );
        b.append_decimal128(99_999).unwrap();
        b.append_decimal128(-99_999).unwrap();
        assert!(b.append_decimal128(100_000).is_err());
        assert!(b.append_decimal(i256::from_i128(100_000)).is_err());
        let mut wide = ColumnBuilder::new(
            &ColumnKind::Decimal {
                precision: 65,
                scale: 30,
            },
            1,
        );
        let max = i256::from_string(&"9".repeat(65)).unwrap();
        wide.append_decimal(max).unwrap();
        assert!(wide.append_decimal(max.wrapping_add(i256::ONE)).is_err());
        assert_eq!(wide.finish().unwrap().len(), 1);
    }

    #[test]
    fn finishing_a_null_into_a_non_nullable_field_names_the_column() {
        let kind = ColumnKind::Int {
            bits: 8,
            unsigned: true,
        };
        let schema = Arc::new(Schema::new(vec![kind.field("tiny", false)]));
        let mut builders = vec![ColumnBuilder::new(&kind, 1)];
        builders[0].append_u64(255).unwrap();
        assert!(builders[0].append_u64(256).is_err());
        assert_eq!(finish_batch(&schema, &mut builders).unwrap().num_rows(), 1);
        builders[0].append_null();
        let err = finish_batch(&schema, &mut builders).unwrap_err();
        assert_eq!(err.column, "tiny");
        // A NOT NULL DATE column's field is nullable: its zero dates fit.
        let schema = Arc::new(Schema::new(vec![
            ColumnKind::Simple(SimpleKind::Date).field("d", false)
        ]));
        let mut builders = vec![ColumnBuilder::new(&ColumnKind::Simple(SimpleKind::Date), 1)];
        builders[0].append_date(0, 0, 0).unwrap();
        assert_eq!(finish_batch(&schema, &mut builders).unwrap().num_rows(), 1);
    }
}
