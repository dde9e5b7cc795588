//! The net effect of one commit's changelog entries on a table's keys, for upsert sinks.
//!
//! # Invariant
//! For every primary key the entries touch, exactly one outcome: the row as the last entry
//! left it (`upserts`), or gone (`deletes`, the row as it was before it went). Applying the
//! outcomes in any order gives the same table as applying the entries one by one, so a
//! commit can delete and upsert in two set operations.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray, StructArray, UInt32Array};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter, SortField};

use super::error::SinkError;
use crate::change::schema::TableSchema;
use crate::change::Op;
use crate::state::changelog::format;

/// One commit's outcome for one table, as rows of the current table's columns.
#[derive(Debug)]
pub struct NetChanges {
    /// The rows the keys hold after the commit.
    pub upserts: RecordBatch,
    /// The last rows of the keys the commit removes (deleted, or moved to another key).
    pub deletes: RecordBatch,
}

fn input_error(message: String) -> SinkError {
    SinkError::Input(message)
}

/// The columns of `table` picked by name from `columns` (a changelog batch, or its
/// `_before` struct).
fn pick(
    table: &SchemaRef,
    names: &[String],
    column: impl Fn(&str) -> Option<ArrayRef>,
) -> Result<Vec<ArrayRef>, SinkError> {
    table
        .fields()
        .iter()
        .zip(names)
        .map(|(field, name)| {
            let array = column(name)
                .ok_or_else(|| input_error(format!("the changelog has no column {name}")))?;
            if array.data_type() == field.data_type() {
                Ok(array)
            } else {
                arrow::compute::cast(&array, field.data_type())
                    .map_err(|e| input_error(format!("column {name}: {e}")))
            }
        })
        .collect()
}

/// Folds `entries` (changelog batches of `table`, in order) into their net outcome per key,
/// as rows of `schema` (the current table's columns the sink's query was planned with).
pub fn net_changes(
    table: &TableSchema,
    schema: &SchemaRef,
    entries: &[RecordBatch],
) -> Result<NetChanges, SinkError> {
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let key: Vec<usize> = table
        .primary_key
        .iter()
        .map(|&k| {
            let name = &table.columns[k].name;
            names.iter().position(|n| n == name).ok_or_else(|| {
                input_error(format!(
                    "primary-key column {name} is not in the query's table"
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    let converter = RowConverter::new(
        key.iter()
            .map(|&k| SortField::new(schema.field(k).data_type().clone()))
            .collect(),
    )
    .map_err(|e| input_error(e.to_string()))?;
    // Per key: (which image, the batch, the row), last entry wins.
    #[derive(Clone, Copy)]
    enum Image {
        After,
        Before,
    }
    // Before images are NULL outside updates: the images are held under a schema that allows
    // it, and only the rows taken at the end must fit the table's.
    let loose: SchemaRef = Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let mut outcome: HashMap<OwnedRow, (bool, Image, usize, usize)> = HashMap::new();
    let mut afters = Vec::with_capacity(entries.len());
    let mut befores = Vec::with_capacity(entries.len());
    for (b, batch) in entries.iter().enumerate() {
        let after = pick(schema, &names, |n| batch.column_by_name(n).cloned())?;
        let before_struct = batch
            .column_by_name(format::BEFORE)
            .and_then(|c| c.as_any().downcast_ref::<StructArray>().cloned())
            .ok_or_else(|| input_error("the changelog has no _before column".into()))?;
        let before = pick(schema, &names, |n| before_struct.column_by_name(n).cloned())?;
        let ops = batch
            .column_by_name(format::OP)
            .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
            .ok_or_else(|| input_error("the changelog has no _op column".into()))?;
        let keys_of = |columns: &[ArrayRef]| {
            let key_columns: Vec<ArrayRef> = key.iter().map(|&k| Arc::clone(&columns[k])).collect();
            converter
                .convert_columns(&key_columns)
                .map_err(|e| input_error(e.to_string()))
        };
        let after_keys = keys_of(&after)?;
        let before_keys = keys_of(&before)?;
        for row in 0..batch.num_rows() {
            let op = Op::from_code(ops.value(row)).map_err(|e| input_error(e.to_string()))?;
            match op {
                Op::Delete => {
                    outcome.insert(after_keys.row(row).owned(), (false, Image::After, b, row));
                }
                Op::Update if before_struct.is_valid(row) => {
                    let old = before_keys.row(row);
                    let new = after_keys.row(row);
                    if old != new {
                        outcome.insert(old.owned(), (false, Image::Before, b, row));
                    }
                    outcome.insert(new.owned(), (true, Image::After, b, row));
                }
                Op::Update | Op::Insert | Op::Read => {
                    outcome.insert(after_keys.row(row).owned(), (true, Image::After, b, row));
                }
            }
        }
        afters.push(
            RecordBatch::try_new(Arc::clone(&loose), after)
                .map_err(|e| input_error(e.to_string()))?,
        );
        befores.push(
            RecordBatch::try_new(Arc::clone(&loose), before)
                .map_err(|e| input_error(e.to_string()))?,
        );
    }
    // One batch of every image, then take the rows each outcome names.
    let all = concat_batches(&loose, afters.iter().chain(befores.iter()))
        .map_err(|e| input_error(e.to_string()))?;
    let mut offsets = Vec::with_capacity(entries.len());
    let mut total = 0usize;
    for batch in entries {
        offsets.push(total);
        total += batch.num_rows();
    }
    let mut upserts = Vec::new();
    let mut deletes = Vec::new();
    let mut sorted: Vec<_> = outcome.into_values().collect();
    // Source order, so the target sees rows in the order they last changed.
    sorted.sort_by_key(|&(_, _, b, row)| (b, row));
    for (present, image, b, row) in sorted {
        let index = offsets[b]
            + row
            + if matches!(image, Image::Before) {
                total
            } else {
                0
            };
        let index =
            u32::try_from(index).map_err(|_| input_error("a commit is too large".into()))?;
        if present {
            upserts.push(index);
        } else {
            deletes.push(index);
        }
    }
    let rows = |indices: Vec<u32>| -> Result<RecordBatch, SinkError> {
        let indices = UInt32Array::from(indices);
        let columns = all
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), &indices, None))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| input_error(e.to_string()))?;
        RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| input_error(e.to_string()))
    };
    Ok(NetChanges {
        upserts: rows(upserts)?,
        deletes: rows(deletes)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int32Array};
    use arrow::buffer::NullBuffer;
    use arrow::datatypes::{DataType, Field, Fields, Int32Type, Schema};

    /// The shared fixture table `d.t (id INT NOT NULL, v TEXT)`, keyed by `id`.
    fn table() -> TableSchema {
        crate::state::fixtures::codec(true)
            .schema()
            .as_ref()
            .clone()
    }

    /// One changelog entry: `(op, id, v, before)`.
    type Entry<'a> = (&'a str, i32, &'a str, Option<(i32, &'a str)>);

    fn entries(rows: &[Entry]) -> RecordBatch {
        let fields: Fields = vec![
            Field::new("id", DataType::Int32, true),
            Field::new("v", DataType::Utf8, true),
        ]
        .into();
        let before = StructArray::try_new(
            fields.clone(),
            vec![
                Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.3.map(|b| b.0)))),
                Arc::new(StringArray::from_iter(
                    rows.iter().map(|r| r.3.map(|b| b.1)),
                )),
            ],
            Some(NullBuffer::from_iter(rows.iter().map(|r| r.3.is_some()))),
        )
        .unwrap();
        RecordBatch::try_from_iter(vec![
            (
                format::OP,
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef,
            ),
            (
                "id",
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.1))) as _,
            ),
            (
                "v",
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))) as _,
            ),
            (format::BEFORE, Arc::new(before) as _),
        ])
        .unwrap()
    }

    fn rows(batch: &RecordBatch) -> Vec<(i32, String)> {
        let id = batch.column(0).as_primitive::<Int32Type>();
        let v = batch.column(1).as_string::<i32>();
        let mut out: Vec<_> = (0..batch.num_rows())
            .map(|i| (id.value(i), v.value(i).to_string()))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn the_last_change_of_each_key_decides_across_batches() {
        let t = table();
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        let first = entries(&[
            ("r", 1, "a", None),
            ("c", 2, "b", None),
            ("u", 1, "a2", Some((1, "a"))),
            ("d", 2, "b", None),
        ]);
        let second = entries(&[
            ("c", 2, "b2", None),
            // The key changes: the old key goes, the new one holds the row.
            ("u", 4, "y", Some((3, "x"))),
            ("d", 5, "z", None),
            ("c", 6, "gone", None),
            ("d", 6, "gone", None),
        ]);
        let net = net_changes(&t, &schema, &[first, second]).unwrap();
        assert_eq!(
            rows(&net.upserts),
            vec![(1, "a2".into()), (2, "b2".into()), (4, "y".into())]
        );
        assert_eq!(
            rows(&net.deletes),
            vec![(3, "x".into()), (5, "z".into()), (6, "gone".into())]
        );
    }
}
