//! Which columns of a commit are written with a Parquet dictionary.
//!
//! # Invariant
//! A dictionary pays when a column chunk repeats its values. For a column whose values are
//! nearly all distinct (`_position`, a key, a timestamp) the writer still builds one, value by
//! value, until it passes its size limit, and in a commit-sized file that is often the whole
//! file. A sample of the commit's rows decides instead: a column whose sample is more than half
//! distinct values is written without a dictionary. Only the encoding changes; every Parquet
//! reader reads the file the same.

use std::collections::HashSet;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::row::{RowConverter, SortField};
use parquet::file::properties::WriterPropertiesBuilder;
use parquet::schema::types::ColumnPath;

/// Rows sampled per column, evenly spaced over the commit.
const SAMPLE: usize = 1024;

/// Names of `rows`' top-level columns (nested ones aside) whose sample is more than half
/// distinct values.
pub(super) fn mostly_distinct(rows: &RecordBatch) -> Vec<String> {
    let n = rows.num_rows();
    if n == 0 {
        return Vec::new();
    }
    let sampled = n.min(SAMPLE);
    let indices = UInt32Array::from_iter_values(
        (0..sampled).map(|i| u32::try_from(i * n / sampled).unwrap_or(0)),
    );
    let schema = rows.schema();
    schema
        .fields()
        .iter()
        .zip(rows.columns())
        .filter(|(field, _)| !field.data_type().is_nested())
        .filter_map(|(field, column)| {
            // A type the row format cannot hold keeps its dictionary.
            let sample = take(column, &indices, None).ok()?;
            let converter =
                RowConverter::new(vec![SortField::new(field.data_type().clone())]).ok()?;
            let converted = converter.convert_columns(&[sample]).ok()?;
            let distinct: HashSet<&[u8]> = converted.iter().map(|row| row.data()).collect();
            (distinct.len() * 2 > sampled).then(|| field.name().clone())
        })
        .collect()
}

/// `builder` with the dictionary turned off for each of `columns`.
pub(super) fn without_dictionary(
    builder: WriterPropertiesBuilder,
    columns: &[String],
) -> WriterPropertiesBuilder {
    columns.iter().fold(builder, |builder, column| {
        builder.set_column_dictionary_enabled(ColumnPath::from(column.as_str()), false)
    })
}

#[cfg(test)]
mod tests {
    use crate::state::changelog::format;
    use std::sync::Arc;

    use arrow::array::{Array, ArrayRef, Int64Array, StringArray, StructArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::file::properties::WriterProperties;

    use super::*;

    #[test]
    fn only_mostly_distinct_flat_columns_lose_their_dictionary() {
        let n = 5000;
        let nested = StructArray::from(vec![(
            Arc::new(Field::new("k", DataType::Int64, false)),
            Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef,
        )]);
        let schema = Arc::new(Schema::new(vec![
            Field::new(format::POSITION, DataType::Utf8, false),
            Field::new(format::OP, DataType::Utf8, false),
            Field::new("half", DataType::Int64, false),
            Field::new("s", nested.data_type().clone(), false),
        ]));
        let rows = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("binlog.000001:{i:012}")),
                )),
                Arc::new(StringArray::from_iter_values((0..n).map(|_| "u"))),
                // 400 distinct values in every 1,024 sampled: not more than half.
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 400))),
                Arc::new(nested),
            ],
        )
        .unwrap();
        let columns = mostly_distinct(&rows);
        assert_eq!(columns, [format::POSITION]);
        let properties = without_dictionary(WriterProperties::builder(), &columns).build();
        assert!(!properties.dictionary_enabled(&ColumnPath::from(format::POSITION)));
        assert!(properties.dictionary_enabled(&ColumnPath::from(format::OP)));
        assert!(mostly_distinct(&rows.slice(0, 0)).is_empty());
    }
}
