//! Rows as PostgreSQL's `COPY ... FROM STDIN` text format, the fastest way a client loads rows.
//!
//! # Invariant
//! Each value is written as text PostgreSQL's input function for the column's type (from
//! `types::pg_type`) reads back to the same value: NULL as `\N`, tabs, newlines and
//! backslashes escaped, bytes as `\x` hex, MySQL `TIME` as a signed `H:MM:SS.ffffff`
//! interval, nested values as JSON.

use std::fmt::Write;

use arrow::array::{
    Array, AsArray, BinaryArray, BinaryViewArray, FixedSizeBinaryArray, LargeBinaryArray,
    RecordBatch,
};
use arrow::datatypes::{DataType, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};

use super::super::error::SinkError;
use super::super::text::{duration_micros, write_interval};

fn encode_error(column: &str, e: impl std::fmt::Display) -> SinkError {
    SinkError::Unsupported(format!("writing column {column} for PostgreSQL: {e}"))
}

/// The bytes of `array[row]`, when the array holds bytes.
fn bytes_of(array: &dyn Array, row: usize) -> Option<&[u8]> {
    let any = array.as_any();
    if let Some(a) = any.downcast_ref::<BinaryArray>() {
        return Some(a.value(row));
    }
    if let Some(a) = any.downcast_ref::<LargeBinaryArray>() {
        return Some(a.value(row));
    }
    if let Some(a) = any.downcast_ref::<BinaryViewArray>() {
        return Some(a.value(row));
    }
    any.downcast_ref::<FixedSizeBinaryArray>()
        .map(|a| a.value(row))
}

fn write_hex(out: &mut String, bytes: &[u8]) {
    out.push_str("\\x");
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
}

fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `array[row]` as a JSON value.
pub(super) fn write_json(out: &mut String, array: &dyn Array, row: usize) -> Result<(), String> {
    if array.is_null(row) {
        out.push_str("null");
        return Ok(());
    }
    match array.data_type() {
        DataType::Struct(fields) => {
            let s = array.as_struct();
            out.push('{');
            for (i, field) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(out, field.name());
                out.push(':');
                write_json(out, s.column(i).as_ref(), row)?;
            }
            out.push('}');
        }
        DataType::List(_) | DataType::LargeList(_) => {
            let values = match array.data_type() {
                DataType::List(_) => array.as_list::<i32>().value(row),
                _ => array.as_list::<i64>().value(row),
            };
            out.push('[');
            for i in 0..values.len() {
                if i > 0 {
                    out.push(',');
                }
                write_json(out, values.as_ref(), i)?;
            }
            out.push(']');
        }
        DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => {
            let f = ArrayFormatter::try_new(array, &FormatOptions::default())
                .map_err(|e| e.to_string())?;
            let _ = write!(out, "{}", f.value(row));
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            let f = ArrayFormatter::try_new(array, &FormatOptions::default())
                .map_err(|e| e.to_string())?;
            let text = f.value(row).to_string();
            // JSON has no NaN or infinities: those go as strings.
            if text.parse::<f64>().is_ok_and(f64::is_finite) {
                out.push_str(&text);
            } else {
                write_json_string(out, &text);
            }
        }
        DataType::Duration(unit) => {
            let mut text = String::new();
            write_interval(&mut text, duration_micros(array, *unit, row));
            write_json_string(out, &text);
        }
        _ => {
            if let Some(bytes) = bytes_of(array, row) {
                let mut text = String::new();
                write_hex(&mut text, bytes);
                write_json_string(out, &text);
            } else {
                let f = ArrayFormatter::try_new(array, &FormatOptions::default())
                    .map_err(|e| e.to_string())?;
                write_json_string(out, &f.value(row).to_string());
            }
        }
    }
    Ok(())
}

/// Appends `text` to `out` with COPY's escapes.
fn push_escaped(out: &mut Vec<u8>, text: &str) {
    if !text
        .bytes()
        .any(|b| matches!(b, b'\\' | b'\n' | b'\r' | b'\t'))
    {
        out.extend_from_slice(text.as_bytes());
        return;
    }
    for b in text.bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b => out.push(b),
        }
    }
}

/// How one column's values become text.
enum Encoder<'a> {
    Text(&'a dyn Array),
    Bytes(&'a dyn Array),
    Interval(&'a dyn Array, TimeUnit),
    Json(&'a dyn Array),
    Formatted(ArrayFormatter<'a>),
}

/// `batch` (its columns in order) as COPY text, one line per row.
pub fn copy_text(batch: &RecordBatch) -> Result<Vec<u8>, SinkError> {
    let schema = batch.schema();
    let options = FormatOptions::default();
    let encoders = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(array, field)| {
            let array = array.as_ref();
            Ok(match array.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Encoder::Text(array),
                DataType::Binary
                | DataType::LargeBinary
                | DataType::BinaryView
                | DataType::FixedSizeBinary(_) => Encoder::Bytes(array),
                DataType::Duration(unit) => Encoder::Interval(array, *unit),
                DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_) => {
                    Encoder::Json(array)
                }
                _ => Encoder::Formatted(
                    ArrayFormatter::try_new(array, &options)
                        .map_err(|e| encode_error(field.name(), e))?,
                ),
            })
        })
        .collect::<Result<Vec<_>, SinkError>>()?;
    let mut out = Vec::with_capacity(batch.num_rows() * 16 * encoders.len().max(1));
    let mut scratch = String::new();
    for row in 0..batch.num_rows() {
        for (i, (encoder, field)) in encoders.iter().zip(schema.fields()).enumerate() {
            if i > 0 {
                out.push(b'\t');
            }
            if batch.column(i).is_null(row) {
                out.extend_from_slice(b"\\N");
                continue;
            }
            scratch.clear();
            match encoder {
                Encoder::Text(array) => {
                    let text = match array.data_type() {
                        DataType::Utf8 => array.as_string::<i32>().value(row),
                        DataType::LargeUtf8 => array.as_string::<i64>().value(row),
                        _ => array.as_string_view().value(row),
                    };
                    push_escaped(&mut out, text);
                    continue;
                }
                Encoder::Bytes(array) => {
                    write_hex(&mut scratch, bytes_of(*array, row).unwrap_or_default());
                }
                Encoder::Interval(array, unit) => {
                    write_interval(&mut scratch, duration_micros(*array, *unit, row));
                }
                Encoder::Json(array) => {
                    write_json(&mut scratch, *array, row)
                        .map_err(|e| encode_error(field.name(), e))?;
                }
                Encoder::Formatted(f) => {
                    let _ = write!(scratch, "{}", f.value(row));
                }
            }
            push_escaped(&mut out, &scratch);
        }
        out.push(b'\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow::array::{
        DurationMicrosecondArray, Float64Array, Int32Array, StringArray, StructArray,
    };
    use arrow::datatypes::{Field, Schema};

    #[test]
    fn values_are_escaped_and_typed_as_postgresql_reads_them() {
        let inner = StructArray::from(vec![(
            Arc::new(Field::new("s", DataType::Utf8, true)),
            Arc::new(StringArray::from(vec![Some("q\"\n"), None])) as _,
        )]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("t", DataType::Utf8, true),
            Field::new("b", DataType::Binary, true),
            Field::new("d", DataType::Duration(TimeUnit::Microsecond), true),
            Field::new("f", DataType::Float64, true),
            Field::new("j", inner.data_type().clone(), true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("a\tb\\c"), Some("")])),
                Arc::new(BinaryArray::from(vec![Some(&[0xde, 0xad][..]), None])),
                Arc::new(DurationMicrosecondArray::from(vec![
                    Some(-(838 * 3600 + 59 * 60 + 59) * 1_000_000),
                    Some(1_500_000),
                ])),
                Arc::new(Float64Array::from(vec![Some(1.5), Some(f64::NAN)])),
                Arc::new(inner),
            ],
        )
        .unwrap();
        let text = String::from_utf8(copy_text(&batch).unwrap()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "1\ta\\tb\\\\c\t\\\\xdead\t-838:59:59.000000\t1.5\t{\"s\":\"q\\\\\"\\\\n\"}"
        );
        assert_eq!(lines[1], "\\N\t\t\\N\t0:00:01.500000\tNaN\t{\"s\":null}");
    }
}
