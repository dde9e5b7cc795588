//! Rows in the types a Delta table can hold.
//!
//! # Invariant
//! Delta has no unsigned integers, durations or decimals wider than 38 digits: each such
//! column is widened to a type that holds every value exactly (`UInt64` as `decimal(20,0)`,
//! MySQL `TIME` as `H:MM:SS.ffffff` text, wide decimals as text), inside structs too, so a
//! sink never loses a value to the table's types.

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, RecordBatch, StringBuilder, StructArray,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use super::super::error::SinkError;
use super::super::text::{duration_micros, write_interval};

/// The type a Delta column of `data_type` has.
pub fn delta_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::UInt8 => DataType::Int16,
        DataType::UInt16 => DataType::Int32,
        DataType::UInt32 => DataType::Int64,
        DataType::UInt64 => DataType::Decimal128(20, 0),
        DataType::Float16 => DataType::Float32,
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) => DataType::Decimal128(*p, *s),
        DataType::Decimal256(p, s) if *p <= 38 => DataType::Decimal128(*p, *s),
        DataType::Decimal256(..)
        | DataType::Duration(_)
        | DataType::Time32(_)
        | DataType::Time64(_)
        | DataType::Null
        | DataType::LargeUtf8
        | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
            DataType::Binary
        }
        DataType::Date64 => DataType::Date32,
        DataType::Timestamp(_, tz) => {
            DataType::Timestamp(TimeUnit::Microsecond, tz.as_ref().map(|_| Arc::from("UTC")))
        }
        DataType::Struct(fields) => DataType::Struct(delta_fields(fields)),
        other => other.clone(),
    }
}

fn delta_fields(fields: &Fields) -> Fields {
    fields.iter().map(|f| Arc::new(delta_field(f))).collect()
}

fn delta_field(field: &Field) -> Field {
    Field::new(
        field.name(),
        delta_type(field.data_type()),
        field.is_nullable(),
    )
}

/// `schema` in Delta's types.
pub fn delta_schema(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| delta_field(f))
            .collect::<Vec<_>>(),
    ))
}

/// `array` as Delta's type for it.
fn conform_array(name: &str, array: &ArrayRef) -> Result<ArrayRef, SinkError> {
    let target = delta_type(array.data_type());
    if &target == array.data_type() {
        return Ok(Arc::clone(array));
    }
    let error = |e: arrow::error::ArrowError| {
        SinkError::Unsupported(format!("column {name} as a Delta type: {e}"))
    };
    match array.data_type() {
        DataType::Duration(unit) => {
            let mut builder = StringBuilder::with_capacity(array.len(), array.len() * 16);
            let mut text = String::new();
            for row in 0..array.len() {
                if array.is_null(row) {
                    builder.append_null();
                } else {
                    text.clear();
                    write_interval(&mut text, duration_micros(array.as_ref(), *unit, row));
                    builder.append_value(&text);
                }
            }
            Ok(Arc::new(builder.finish()))
        }
        DataType::Null => Ok(new_null_array(&DataType::Utf8, array.len())),
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let columns = fields
                .iter()
                .zip(s.columns())
                .map(|(f, c)| conform_array(&format!("{name}.{}", f.name()), c))
                .collect::<Result<Vec<_>, _>>()?;
            let fields: Fields = fields
                .iter()
                .zip(&columns)
                .map(|(f, c)| Arc::new(Field::new(f.name(), c.data_type().clone(), true)))
                .collect();
            Ok(Arc::new(
                StructArray::try_new(fields, columns, s.nulls().cloned()).map_err(error)?,
            ))
        }
        _ => cast(array, &target).map_err(error),
    }
}

/// `batch` in Delta's types (columns by the same names).
pub fn conform(batch: &RecordBatch) -> Result<RecordBatch, SinkError> {
    let schema = batch.schema();
    let columns = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(f, c)| conform_array(f.name(), c))
        .collect::<Result<Vec<_>, _>>()?;
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| Field::new(f.name(), c.data_type().clone(), f.is_nullable()))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| SinkError::Unsupported(format!("rows as Delta types: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{DurationMicrosecondArray, UInt64Array};

    #[test]
    fn unsigned_and_time_values_widen_without_loss() {
        let inner = StructArray::from(vec![(
            Arc::new(Field::new("u", DataType::UInt64, true)),
            Arc::new(UInt64Array::from(vec![u64::MAX])) as ArrayRef,
        )]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("t", DataType::Duration(TimeUnit::Microsecond), true),
            Field::new("s", inner.data_type().clone(), true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(DurationMicrosecondArray::from(vec![-1_000_000])),
                Arc::new(inner),
            ],
        )
        .unwrap();
        let out = conform(&batch).unwrap();
        assert_eq!(out.column(0).as_string::<i32>().value(0), "-0:00:01.000000");
        let s = out.column(1).as_struct();
        assert_eq!(s.column(0).data_type(), &DataType::Decimal128(20, 0));
        assert_eq!(
            arrow::util::display::array_value_to_string(s.column(0), 0).unwrap(),
            "18446744073709551615"
        );
        assert_eq!(delta_schema(&out.schema()).as_ref(), out.schema().as_ref());
    }
}
