//! Row identity: primary-key and full-row encodings of Arrow rows.
//!
//! # Invariant
//! Two rows have equal keys iff their primary-key columns are equal value for value (Arrow's
//! row format is a canonical, comparable byte encoding of the values). Tables without a primary
//! key are keyed by the whole row, which makes their state a multiset: two identical rows are
//! one key with a count. That is the weaker guarantee documented for keyless tables.
//!
//! # Integer keys
//! A primary key of one integer column (or of a type stored as one: dates, times, timestamps)
//! has row-format bytes that follow from the value alone: a valid marker, then the value
//! big-endian with the sign bit flipped for signed types. [`IntKey`] writes those bytes from
//! the column, so the state need not keep a second copy of every key. The codec only offers an
//! [`IntKey`] after checking, on probe values covering every byte position and both signs,
//! that it writes exactly what Arrow's row converter writes; otherwise keys are converted.

use std::sync::Arc;

use arrow::array::{make_array, Array, ArrayData, ArrayRef, RecordBatch};
use arrow::buffer::Buffer;
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};

use crate::change::schema::{IndexSpec, TableSchema};

/// Encodes rows of one table into keys and full rows, and full rows back into batches.
#[derive(Debug)]
pub struct RowCodec {
    schema: Arc<TableSchema>,
    /// Shared with the codecs [`RowCodec::with_indexes`] makes: Arrow decodes rows only with
    /// the converter that encoded them.
    key: Arc<RowConverter>,
    full: Arc<RowConverter>,
    key_columns: Vec<usize>,
    /// Set when the key is one integer column whose bytes [`IntKey`] writes exactly.
    int_key: Option<IntKey>,
    /// One per secondary index of the schema, in its order.
    indexes: Vec<IndexCodec>,
    /// The primary key's columns as an index (named `PRIMARY`, as the server names it), for
    /// ranges of the key; `None` for a table without one.
    primary: Option<IndexCodec>,
}

/// One secondary index's columns in Arrow's row format (see `state::secondary`): bytes that
/// compare as the values do, each column's encoding followed by the next's, so the rows whose
/// first column holds a value are those whose bytes start with that value's bytes alone.
#[derive(Debug)]
pub struct IndexCodec {
    spec: IndexSpec,
    all: RowConverter,
    /// The first column alone, for the values a lookup asks for.
    first: RowConverter,
}

impl IndexCodec {
    fn new(spec: &IndexSpec, fields: &[SortField]) -> Result<Self, ArrowError> {
        let all = RowConverter::new(spec.columns.iter().map(|i| fields[*i].clone()).collect())?;
        let first = RowConverter::new(vec![fields[spec.columns[0]].clone()])?;
        Ok(Self {
            spec: spec.clone(),
            all,
            first,
        })
    }

    pub fn spec(&self) -> &IndexSpec {
        &self.spec
    }

    /// Indexes of its columns in the table's schema, in index order.
    pub fn columns(&self) -> &[usize] {
        &self.spec.columns
    }

    /// The index bytes of every row of `batch` (of the table's schema).
    pub fn encode(&self, batch: &RecordBatch) -> Result<Rows, ArrowError> {
        let columns: Vec<ArrayRef> = self
            .spec
            .columns
            .iter()
            .map(|i| Arc::clone(batch.column(*i)))
            .collect();
        self.all.convert_columns(&columns)
    }

    /// The bytes that the index bytes of rows whose first index column holds each of `values`
    /// (of that column's type) start with.
    pub fn encode_first(&self, values: &ArrayRef) -> Result<Rows, ArrowError> {
        self.first.convert_columns(std::slice::from_ref(values))
    }
}

/// One row-format field per column of `schema`.
fn sort_fields(schema: &TableSchema) -> Vec<SortField> {
    schema
        .arrow
        .fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect()
}

/// The encoders of `schema`'s secondary indexes, in its order (one that does not fit its
/// columns left out).
fn index_codecs(schema: &TableSchema, fields: &[SortField]) -> Result<Vec<IndexCodec>, ArrowError> {
    schema
        .indexes
        .iter()
        .filter(|i| i.fits(fields.len()))
        .map(|i| IndexCodec::new(i, fields))
        .collect()
}

/// The primary key as an index; see [`RowCodec::primary_index`].
fn primary_codec(
    schema: &TableSchema,
    fields: &[SortField],
) -> Result<Option<IndexCodec>, ArrowError> {
    if schema.primary_key.is_empty() {
        return Ok(None);
    }
    IndexCodec::new(&IndexSpec::primary(&schema.primary_key), fields).map(Some)
}

/// The longest key an [`IntKey`] writes: the valid marker and 8 value bytes.
pub const INT_KEY_LEN: usize = 9;

/// The row-format key of one integer column, written from the column's values; see the
/// module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntKey {
    /// The key column's index in the table's schema.
    column: usize,
    /// Bytes per value: 1, 2, 4 or 8.
    width: usize,
    signed: bool,
}

/// Key bytes written by [`IntKey::write`], held inline.
#[derive(Debug, Clone, Copy)]
pub struct InlineKey {
    bytes: [u8; INT_KEY_LEN],
    len: u8,
}

impl std::ops::Deref for InlineKey {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl IntKey {
    /// The layout of `data_type` when it is stored as a signed or unsigned integer.
    fn of(column: usize, data_type: &DataType) -> Option<Self> {
        use DataType as D;
        let (width, signed) = match data_type {
            D::Int8 => (1, true),
            D::Int16 => (2, true),
            D::Int32 | D::Date32 | D::Time32(_) => (4, true),
            D::Int64 | D::Date64 | D::Time64(_) | D::Timestamp(..) | D::Duration(_) => (8, true),
            D::UInt8 => (1, false),
            D::UInt16 => (2, false),
            D::UInt32 => (4, false),
            D::UInt64 => (8, false),
            _ => return None,
        };
        Some(Self {
            column,
            width,
            signed,
        })
    }

    /// The key column's index in the table's schema.
    pub fn column(&self) -> usize {
        self.column
    }

    /// Bytes per value in the column.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The values of the key column of `batch`: one little-endian integer of
    /// [`IntKey::width`] bytes per row (shared with the column, not copied).
    pub fn values(&self, batch: &RecordBatch) -> Buffer {
        let data = batch.column(self.column).to_data();
        data.buffers()[0].slice_with_length(data.offset() * self.width, data.len() * self.width)
    }

    /// The key bytes of row `row` of `values` (from [`IntKey::values`]).
    pub fn write(&self, values: &[u8], row: usize) -> InlineKey {
        let mut bytes = [0u8; INT_KEY_LEN];
        bytes[0] = 1;
        let value = &values[row * self.width..(row + 1) * self.width];
        for (to, from) in bytes[1..=self.width].iter_mut().zip(value.iter().rev()) {
            *to = *from;
        }
        if self.signed {
            bytes[1] ^= 0x80;
        }
        InlineKey {
            bytes,
            len: (1 + self.width) as u8,
        }
    }

    /// Whether [`IntKey::write`] agrees with `converter` (the key converter) on probe values
    /// with every byte position set, both signs and the extremes.
    fn agrees_with(&self, converter: &RowConverter, data_type: &DataType) -> bool {
        let w = self.width;
        let mut probes: Vec<Vec<u8>> = vec![vec![0; w], vec![0xFF; w]];
        for at in 0..w {
            let mut one = vec![0; w];
            one[at] = 0x81;
            probes.push(one);
            let mut low = vec![0xFF; w];
            low[at] = 0x7E;
            probes.push(low);
        }
        let bytes: Vec<u8> = probes.concat();
        let n = probes.len();
        let Ok(data) = ArrayData::try_new(
            data_type.clone(),
            n,
            None,
            0,
            vec![Buffer::from_vec(bytes.clone())],
            vec![],
        ) else {
            return false;
        };
        let Ok(rows) = converter.convert_columns(&[make_array(data)]) else {
            return false;
        };
        (0..n).all(|i| rows.row(i).data() == &*self.write(&bytes, i))
    }
}

impl RowCodec {
    pub fn new(schema: Arc<TableSchema>) -> Result<Self, ArrowError> {
        let fields = sort_fields(&schema);
        let key_columns: Vec<usize> = if schema.primary_key.is_empty() {
            (0..fields.len()).collect()
        } else {
            schema.primary_key.clone()
        };
        let key = Arc::new(RowConverter::new(
            key_columns.iter().map(|i| fields[*i].clone()).collect(),
        )?);
        let full = Arc::new(RowConverter::new(fields.clone())?);
        let int_key = match schema.primary_key.as_slice() {
            [column] => {
                let data_type = schema.arrow.field(*column).data_type();
                IntKey::of(*column, data_type).filter(|k| k.agrees_with(&key, data_type))
            }
            _ => None,
        };
        let indexes = index_codecs(&schema, &fields)?;
        let primary = primary_codec(&schema, &fields)?;
        Ok(Self {
            schema,
            key,
            full,
            key_columns,
            int_key,
            indexes,
            primary,
        })
    }

    /// This codec for `schema`, which has the same columns and primary key and other secondary
    /// indexes (an index created or dropped at the source): keys and rows it encoded are read
    /// by the new codec unchanged, so a table's state is kept as it is.
    pub fn with_indexes(&self, schema: Arc<TableSchema>) -> Result<Self, ArrowError> {
        if schema.arrow != self.schema.arrow || schema.primary_key != self.schema.primary_key {
            return Err(ArrowError::InvalidArgumentError(format!(
                "{} changed its columns or primary key, not only its indexes",
                schema.id
            )));
        }
        let fields = sort_fields(&schema);
        Ok(Self {
            indexes: index_codecs(&schema, &fields)?,
            primary: primary_codec(&schema, &fields)?,
            schema,
            key: Arc::clone(&self.key),
            full: Arc::clone(&self.full),
            key_columns: self.key_columns.clone(),
            int_key: self.int_key,
        })
    }

    /// How keys are written from their column, when the key is one integer column.
    pub fn int_key(&self) -> Option<&IntKey> {
        self.int_key.as_ref()
    }

    pub fn schema(&self) -> &Arc<TableSchema> {
        &self.schema
    }

    /// The secondary indexes' encoders, in the schema's order.
    pub fn indexes(&self) -> &[IndexCodec] {
        &self.indexes
    }

    /// The primary key as an index over its columns: its bytes for a row are that row's key
    /// (both are the key columns in Arrow's row format).
    pub fn primary_index(&self) -> Option<&IndexCodec> {
        self.primary.as_ref()
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
        self.check_keys(batch)?;
        let key_cols: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|i| Arc::clone(batch.column(*i)))
            .collect();
        self.key.convert_columns(&key_cols)
    }

    /// The check of [`RowCodec::encode`] alone: every row of `batch` can be keyed.
    pub fn check_keys(&self, batch: &RecordBatch) -> Result<(), ArrowError> {
        if self.keyless() {
            return Ok(());
        }
        match self
            .key_columns
            .iter()
            .find(|i| batch.column(**i).null_count() > 0)
        {
            Some(i) => {
                let column = self.schema.columns.get(*i).map_or("?", |c| c.name.as_str());
                Err(ArrowError::InvalidArgumentError(format!(
                    "primary key column {column} of {} holds a value with no Arrow form \
                     (a zero or invalid date, read as NULL), so its row cannot be keyed",
                    self.schema.id
                )))
            }
            None => Ok(()),
        }
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
        let columns = self.decode_columns(rows)?;
        RecordBatch::try_new(Arc::clone(&self.schema.arrow), columns)
    }

    /// The columns of `rows`, unchecked against the table's nullability: for a changelog,
    /// whose deletes after a re-read may be rows of an older schema lacking a new column.
    pub fn decode_columns<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a OwnedRow>,
    ) -> Result<Vec<ArrayRef>, ArrowError> {
        self.full.convert_rows(rows.into_iter().map(|r| r.row()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::kinds::SimpleKind;
    use crate::change::schema::{ColumnKind, ColumnSpec, TableId};
    use arrow::array::{Date32Array, Int32Array};

    fn codec(primary_key: Vec<usize>) -> RowCodec {
        let columns = vec![
            ColumnSpec {
                name: "d".into(),
                kind: ColumnKind::Simple(SimpleKind::Date),
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
    fn integer_keys_are_written_as_the_row_converter_writes_them() {
        use arrow::array::{Int64Array, UInt16Array};
        for (pk, column) in [(vec![0], 0), (vec![1], 1)] {
            let codec = codec(pk);
            let int_key = *codec.int_key().expect("a one-column integer key");
            assert_eq!(int_key.column(), column);
            let dates = vec![Some(i32::MIN), Some(-1), Some(0), Some(1), Some(i32::MAX)];
            let rows = batch(&codec, dates);
            let keys = codec.keys(&rows).unwrap();
            let values = int_key.values(&rows);
            for i in 0..rows.num_rows() {
                assert_eq!(keys.row(i).data(), &*int_key.write(&values, i));
            }
            // A slice of the batch keeps its rows' keys.
            let sliced = rows.slice(2, 3);
            let values = int_key.values(&sliced);
            for i in 0..3 {
                assert_eq!(keys.row(i + 2).data(), &*int_key.write(&values, i));
            }
        }
        // The widths and signs the probe check covers.
        for array in [
            Arc::new(Int64Array::from(vec![i64::MIN, -2, 0, 7, i64::MAX])) as ArrayRef,
            Arc::new(UInt16Array::from(vec![0, 1, 256, u16::MAX, 40000])),
        ] {
            let converter =
                RowConverter::new(vec![SortField::new(array.data_type().clone())]).unwrap();
            let key = IntKey::of(0, array.data_type()).unwrap();
            assert!(key.agrees_with(&converter, array.data_type()));
            let keys = converter.convert_columns(&[Arc::clone(&array)]).unwrap();
            let batch = RecordBatch::try_from_iter([("k", array)]).unwrap();
            let values = key.values(&batch);
            for i in 0..batch.num_rows() {
                assert_eq!(keys.row(i).data(), &*key.write(&values, i));
            }
        }
        assert!(codec(vec![]).int_key().is_none(), "keyless: the whole row");
        assert!(codec(vec![0, 1]).int_key().is_none(), "two key columns");
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
