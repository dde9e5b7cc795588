//! Building the rows of the `cdc` status tables: every column nullable, named as it is given,
//! so a table's schema is the same whether it has rows or not.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{Field, Schema};
use datafusion::error::Result;

/// A text column.
pub(super) fn text(v: Vec<Option<String>>) -> ArrayRef {
    Arc::new(StringArray::from(v))
}

/// One batch of `columns`, in order.
pub(super) fn table(columns: Vec<(&str, ArrayRef)>) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    Ok(RecordBatch::try_new(
        schema,
        columns.into_iter().map(|(_, a)| a).collect(),
    )?)
}
