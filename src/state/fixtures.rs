//! Test fixtures shared by the state's unit tests: a two-column table (`id INT`, `v TEXT`),
//! keyed by `id` or keyless, with or without an index on `v`, its batches, and its rows read
//! back in order.

use std::sync::Arc;

use arrow::array::{AsArray, Int32Array, RecordBatch, StringArray};
use arrow::datatypes::Int32Type;

use crate::change::keys::RowCodec;
use crate::change::schema::{Charset, ColumnKind, ColumnSpec, IndexSpec, TableId, TableSchema};

/// The codec of `d.t (id INT NOT NULL, v TEXT)`, keyed by `id` when `keyed`.
pub fn codec(keyed: bool) -> Arc<RowCodec> {
    Arc::new(RowCodec::new(Arc::new(schema(keyed))).expect("the fixture's codec"))
}

/// [`codec`] with a secondary index `by_v` on `v`.
pub fn indexed_codec(keyed: bool) -> Arc<RowCodec> {
    let by_v = IndexSpec {
        name: "by_v".into(),
        columns: vec![1],
        unique: false,
    };
    let schema = schema(keyed).with_indexes(vec![by_v]);
    Arc::new(RowCodec::new(Arc::new(schema)).expect("the fixture's codec"))
}

fn schema(keyed: bool) -> TableSchema {
    let columns = vec![
        ColumnSpec {
            name: "id".into(),
            kind: ColumnKind::Int {
                bits: 32,
                unsigned: false,
            },
            nullable: false,
        },
        ColumnSpec {
            name: "v".into(),
            kind: ColumnKind::Text {
                charset: Charset::Utf8,
                length: None,
            },
            nullable: true,
        },
    ];
    let pk = if keyed { vec![0] } else { vec![] };
    TableSchema::new(TableId::new("d", "t"), columns, pk)
}

/// A batch of `(id, v)` rows.
pub fn batch(codec: &RowCodec, rows: &[(i32, &str)]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::clone(&codec.schema().arrow),
        vec![
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
        ],
    )
    .expect("the fixture's batch")
}

/// Every `(id, v)` row of `batches`, sorted.
pub fn ids(batches: &[RecordBatch]) -> Vec<(i32, String)> {
    let mut out: Vec<(i32, String)> = batches
        .iter()
        .flat_map(|b| {
            let id = b.column(0).as_primitive::<Int32Type>().clone();
            let v = b.column(1).as_string::<i32>().clone();
            (0..b.num_rows()).map(move |i| (id.value(i), v.value(i).to_string()))
        })
        .collect();
    out.sort();
    out
}
