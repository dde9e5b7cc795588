//! Arrow IPC files for state and changelog segments: the bytes inside a framed state file.
//!
//! # Invariant
//! A state file decodes only into the schema the reader expects (the table's schema the
//! checkpoint records): one whose columns differ is refused by name instead of being read into
//! the wrong columns. Changelog files hold entries of whichever schema versions of the table
//! they were written under; they decode as written ([`decode_as_written`]) and readers bring
//! them to the changelog's union schema by column name (`state::changelog::adapt`).

use std::io::Cursor;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::ipc::reader::FileReader;
use arrow::ipc::writer::FileWriter;

/// The IPC file of `batches`, all of schema `schema`.
pub fn encode(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>, ArrowError> {
    let mut writer = FileWriter::try_new(Vec::new(), schema)?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    writer.into_inner()
}

/// Whether the IPC file `bytes` holds columns of the names and types of `schema`.
pub fn same_columns(bytes: &[u8], schema: &SchemaRef) -> Result<bool, String> {
    let reader = FileReader::try_new(Cursor::new(bytes), None).map_err(|e| e.to_string())?;
    let stored = reader.schema();
    Ok(stored.fields().len() == schema.fields().len()
        && stored
            .fields()
            .iter()
            .zip(schema.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type()))
}

/// The batches of an IPC file, rebuilt on `schema`; `Err` says how the stored schema differs.
pub fn decode(bytes: &[u8], schema: &SchemaRef) -> Result<Vec<RecordBatch>, String> {
    let reader = FileReader::try_new(Cursor::new(bytes), None).map_err(|e| e.to_string())?;
    let stored = reader.schema();
    let shape = |s: &SchemaRef| -> Vec<String> {
        s.fields()
            .iter()
            .map(|f| format!("{} {}", f.name(), f.data_type()))
            .collect()
    };
    if shape(&stored) != shape(schema) {
        return Err(format!(
            "its columns are ({}) but the table now has ({}): the table changed while the engine was down",
            shape(&stored).join(", "),
            shape(schema).join(", ")
        ));
    }
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| e.to_string())?;
        out.push(
            RecordBatch::try_new(Arc::clone(schema), batch.columns().to_vec())
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(out)
}

/// The batches of an IPC file in the schema they were written with.
pub fn decode_as_written(bytes: &[u8]) -> Result<Vec<RecordBatch>, String> {
    let reader = FileReader::try_new(Cursor::new(bytes), None).map_err(|e| e.to_string())?;
    reader
        .map(|batch| batch.map_err(|e| e.to_string()))
        .collect()
}

/// The batches of a changelog file brought to `schema`, a union of the schemas its entries
/// were written under.
pub fn decode_changelog(bytes: &[u8], schema: &SchemaRef) -> Result<Vec<RecordBatch>, String> {
    decode_as_written(bytes)?
        .into_iter()
        .map(|b| crate::state::changelog::adapt(b, schema).map_err(|e| e.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn batches_round_trip_and_other_columns_are_refused() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
            ],
        )
        .unwrap();
        let bytes = encode(&schema, &[batch.clone(), batch.slice(1, 1)]).unwrap();
        let back = decode(&bytes, &schema).unwrap();
        assert_eq!(back, vec![batch.clone(), batch.slice(1, 1)]);
        let other: SchemaRef =
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let err = decode(&bytes, &other).unwrap_err();
        assert!(err.contains("id Int32, v Utf8"), "{err}");
        assert!(decode(&bytes[..bytes.len() / 2], &schema).is_err());
    }
}
