//! Row identity: primary-key and full-row encodings of Arrow rows.
//!
//! # Invariant
//! Two rows have equal keys iff their primary-key columns are equal value for value (Arrow's
//! row format is a canonical, comparable byte encoding of the values). Tables without a primary
//! key are keyed by the whole row, which makes their state a multiset: two identical rows are
//! one key with a count. That is the weaker guarantee documented for keyless tables.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::error::ArrowError;
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};

use crate::source::schema::TableSchema;

/// Encodes rows of one table into keys and full rows, and full rows back into batches.
#[derive(Debug)]
pub struct RowCodec {
    schema: Arc<TableSchema>,
    key: RowConverter,
    full: RowConverter,
    key_columns: Vec<usize>,
}

impl RowCodec {
    pub fn new(schema: Arc<TableSchema>) -> Result<Self, ArrowError> {
        let fields: Vec<SortField> = schema
            .arrow
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        let key_columns: Vec<usize> = if schema.primary_key.is_empty() {
            (0..fields.len()).collect()
        } else {
            schema.primary_key.clone()
        };
        let key = RowConverter::new(key_columns.iter().map(|i| fields[*i].clone()).collect())?;
        let full = RowConverter::new(fields)?;
        Ok(Self {
            schema,
            key,
            full,
            key_columns,
        })
    }

    pub fn schema(&self) -> &Arc<TableSchema> {
        &self.schema
    }

    /// Whether keys are whole rows (the table has no primary key).
    pub fn keyless(&self) -> bool {
        self.schema.primary_key.is_empty()
    }

    /// The keys and full rows of every row of `batch`.
    pub fn encode(&self, batch: &RecordBatch) -> Result<(Rows, Rows), ArrowError> {
        let key_cols: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|i| Arc::clone(batch.column(*i)))
            .collect();
        Ok((
            self.key.convert_columns(&key_cols)?,
            self.full.convert_columns(batch.columns())?,
        ))
    }

    /// Keys of rows given only by their key columns (in key order).
    pub fn encode_keys(&self, key_columns: &[ArrayRef]) -> Result<Rows, ArrowError> {
        self.key.convert_columns(key_columns)
    }

    /// Indexes of the key columns in the table's schema.
    pub fn key_columns(&self) -> &[usize] {
        &self.key_columns
    }

    /// Turns full rows back into a batch of the table's schema.
    pub fn decode<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a OwnedRow>,
    ) -> Result<RecordBatch, ArrowError> {
        let columns = self.full.convert_rows(rows.into_iter().map(|r| r.row()))?;
        RecordBatch::try_new(Arc::clone(&self.schema.arrow), columns)
    }
}
