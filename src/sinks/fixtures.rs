//! What the targets' unit tests share: layouts, commits, and rows and keys of an `(id, v)`
//! table, so each target is tested with the same commits.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::target::{Commit, Committed, SinkMode, TargetLayout};

/// The layout of sink `s`.
pub fn layout(schema: &SchemaRef, mode: SinkMode, key: &[&str]) -> TargetLayout {
    TargetLayout {
        sink: "s".into(),
        schema: Arc::clone(schema),
        mode,
        key: key.iter().map(|k| k.to_string()).collect(),
    }
}

/// Commit `number`, covering up to position `p<number>`.
pub fn commit(number: u64, rows: RecordBatch, deletes: Option<RecordBatch>) -> Commit {
    Commit {
        marker: Committed {
            number,
            position: format!("p{number:03}"),
        },
        rows,
        deletes,
    }
}

/// `(id BIGINT NOT NULL, v TEXT)`.
pub fn id_v_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
    ]))
}

/// Rows of [`id_v_schema`].
pub fn id_v(ids: &[i64], vs: &[Option<&str>]) -> RecordBatch {
    RecordBatch::try_new(
        id_v_schema(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(vs.to_vec())),
        ],
    )
    .unwrap()
}

/// One row of `(id, v, n INT)`: the `(id, v)` table after a column was added at the source.
pub fn id_v_n(id: i64, v: &str, n: i32) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
        Field::new("n", DataType::Int32, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![id])),
            Arc::new(StringArray::from(vec![v])),
            Arc::new(Int32Array::from(vec![n])),
        ],
    )
    .unwrap()
}

/// Keys to delete from the `(id, v)` table.
pub fn keys(ids: &[i64]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef],
    )
    .unwrap()
}
