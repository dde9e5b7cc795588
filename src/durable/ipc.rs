//! Arrow IPC files for state and changelog segments: the bytes inside a framed state file.
//!
//! # Invariant
//! A file decodes only into the schema the reader expects (the table's schema as the server
//! describes it now, or its changelog schema): a table whose columns changed while the engine
//! was down is refused by name instead of being read into the wrong columns.

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
