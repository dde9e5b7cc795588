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

use crate::change::schema::TableSchema;

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
    ///
    /// A NULL in a primary-key column is an error: MySQL keys are never NULL, so it is a value
    /// with no Arrow form (a zero or invalid date), and distinct such values (`0000-00-00`,
    /// `2024-00-00`) would share one key and overwrite each other.
    pub fn encode(&self, batch: &RecordBatch) -> Result<(Rows, Rows), ArrowError> {
        Ok((
            self.keys(batch)?,
            self.full.convert_columns(batch.columns())?,
        ))
    }

    /// The keys of every row of `batch`, with the check of [`RowCodec::encode`].
    pub fn keys(&self, batch: &RecordBatch) -> Result<Rows, ArrowError> {
        let key_cols: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|i| Arc::clone(batch.column(*i)))
            .collect();
        if !self.keyless() {
            if let Some((i, _)) = self
                .key_columns
                .iter()
                .zip(&key_cols)
                .find(|(_, c)| c.null_count() > 0)
            {
                let column = self.schema.columns.get(*i).map_or("?", |c| c.name.as_str());
                return Err(ArrowError::InvalidArgumentError(format!(
                    "primary key column {column} of {} holds a value with no Arrow form \
                     (a zero or invalid date, read as NULL), so its row cannot be keyed",
                    self.schema.id
                )));
            }
        }
        self.key.convert_columns(&key_cols)
    }

    /// Row `row` of `batch` in Arrow's row format (full row).
    pub fn row_of(&self, batch: &RecordBatch, row: usize) -> Result<OwnedRow, ArrowError> {
        let one = batch.slice(row, 1);
        Ok(self.full.convert_columns(one.columns())?.row(0).owned())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::schema::{ColumnKind, ColumnSpec, TableId};
    use arrow::array::{Date32Array, Int32Array};

    fn codec(primary_key: Vec<usize>) -> RowCodec {
        let columns = vec![
            ColumnSpec {
                name: "d".into(),
                kind: ColumnKind::Date,
                nullable: false,
            },
            ColumnSpec {
                name: "v".into(),
                kind: ColumnKind::Int {
                    bits: 32,
                    unsigned: false,
                },
                nullable: false,
            },
        ];
        let schema = TableSchema::new(TableId::new("db", "t"), columns, primary_key);
        RowCodec::new(Arc::new(schema)).unwrap()
    }

    fn batch(codec: &RowCodec, dates: Vec<Option<i32>>) -> RecordBatch {
        let n = dates.len() as i32;
        RecordBatch::try_new(
            Arc::clone(&codec.schema().arrow),
            vec![
                Arc::new(Date32Array::from(dates)),
                Arc::new(Int32Array::from_iter_values(0..n)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_zero_date_in_a_primary_key_is_an_error_naming_the_column() {
        let keyed = codec(vec![0]);
        assert!(keyed.encode(&batch(&keyed, vec![Some(1), Some(2)])).is_ok());
        let err = keyed
            .encode(&batch(&keyed, vec![Some(1), None]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("primary key column d of db.t"), "{err}");
    }

    #[test]
    fn zero_dates_outside_the_key_are_plain_nulls() {
        for pk in [vec![1], vec![]] {
            let codec = codec(pk);
            let (keys, rows) = codec.encode(&batch(&codec, vec![None, None])).unwrap();
            assert_eq!(keys.num_rows(), 2);
            let back = codec.decode([&rows.row(0).owned()]).unwrap();
            assert_eq!(back.column(0).null_count(), 1);
        }
    }
}
