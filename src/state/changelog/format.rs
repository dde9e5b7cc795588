//! The row format of a changelog, owned here and read through here by every later stage
//! (`durable`, `provider`, `sinks`, `frontend`): the metadata columns' names, places and types,
//! the table's own columns after them, and the `_before` struct last.
//!
//! # Columns
//! The table's own columns hold the after image, or for deletes the deleted row, so
//! `WHERE id = 42` finds every change of row 42. `_before` is a struct of the table's columns
//! holding the before image of updates (NULL otherwise). Metadata: `_op` (`r`, `c`, `u`, `d`),
//! `_position` (sortable text), `_gtid`, `_tx` (transaction sequence, 0 for snapshot reads),
//! `_commit_ts`, `_table`, `_schema_version` (the table's [`TableSchema::version`] the entry was
//! captured under; see `adapt` for reading entries of several versions as one table).
//!
//! # Invariant
//! A batch of a changelog has [`META_COLUMNS`] first, in that order and with the types
//! [`changelog_schema`] gives them, then the image columns, then `_before`; [`ChangelogRows`]
//! checks that once per batch and then reads entries by place, and an `_op` that is not one of
//! the four codes is one error ([`UnknownOp`]) wherever it is read.
//!
//! [`TableSchema::version`]: crate::change::schema::TableSchema::version

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
    UInt32Array, UInt64Array,
};
use arrow::datatypes::{
    DataType, Field, Fields, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType, UInt32Type,
    UInt64Type,
};
use arrow::error::ArrowError;

use crate::change::{Op, UnknownOp};

/// `_op`: the entry's operation code ([`Op::code`]).
pub const OP: &str = "_op";
/// `_position`: the entry's position as sortable text.
pub const POSITION: &str = "_position";
/// `_gtid`: the GTID of the entry's transaction, if it has one.
pub const GTID: &str = "_gtid";
/// `_tx`: the transaction's sequence number (0 for snapshot reads).
pub const TX: &str = "_tx";
/// `_commit_ts`: the transaction's commit time (NULL for snapshot reads).
pub const COMMIT_TS: &str = "_commit_ts";
/// `_table`: `db.table`.
pub const TABLE: &str = "_table";
/// `_schema_version`: the table schema the entry was captured under.
pub const SCHEMA_VERSION: &str = "_schema_version";
/// `_before`: the before image of an update, a struct of the table's columns.
pub const BEFORE: &str = "_before";

/// Metadata columns that precede the table's columns, in order.
pub const META_COLUMNS: [&str; 7] = [OP, POSITION, GTID, TX, COMMIT_TS, TABLE, SCHEMA_VERSION];

/// Places of the metadata columns in a changelog batch.
pub const OP_COLUMN: usize = 0;
pub const POSITION_COLUMN: usize = 1;
pub const GTID_COLUMN: usize = 2;
pub const TX_COLUMN: usize = 3;
pub const COMMIT_TS_COLUMN: usize = 4;
pub const TABLE_COLUMN: usize = 5;
pub const SCHEMA_VERSION_COLUMN: usize = 6;
/// Place of the first of the table's own columns.
pub const FIRST_IMAGE_COLUMN: usize = META_COLUMNS.len();

/// The type of `_commit_ts`.
pub fn commit_ts_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The metadata fields, in order.
pub fn meta_fields() -> [Field; 7] {
    [
        Field::new(OP, DataType::Utf8, false),
        Field::new(POSITION, DataType::Utf8, false),
        Field::new(GTID, DataType::Utf8, true),
        Field::new(TX, DataType::UInt64, false),
        Field::new(COMMIT_TS, commit_ts_type(), true),
        Field::new(TABLE, DataType::Utf8, false),
        Field::new(SCHEMA_VERSION, DataType::UInt32, false),
    ]
}

/// The Arrow schema of a table's changelog.
pub fn changelog_schema(table: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = meta_fields().into();
    // The row columns may be NULL in no image; keep their nullability.
    fields.extend(table.fields().iter().map(|f| f.as_ref().clone()));
    let before: Fields = table
        .fields()
        .iter()
        .map(|f| Arc::new(f.as_ref().clone().with_nullable(true)))
        .collect();
    fields.push(Field::new(BEFORE, DataType::Struct(before), true));
    Arc::new(Schema::new(fields))
}

/// The fields of the `_before` struct, the last column of a changelog schema.
pub fn before_fields(schema: &SchemaRef) -> Fields {
    match schema.field(schema.fields().len() - 1).data_type() {
        DataType::Struct(fields) => fields.clone(),
        _ => unreachable!("the last changelog column is the _before struct"),
    }
}

/// A changelog batch read by column place, its layout checked once (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct ChangelogRows<'a> {
    batch: &'a RecordBatch,
    ops: &'a StringArray,
    positions: &'a StringArray,
    gtids: &'a StringArray,
    txs: &'a UInt64Array,
    commit_ts: &'a TimestampMicrosecondArray,
    versions: &'a UInt32Array,
    before: &'a StructArray,
}

/// `batch`'s column `i`, which must be named `name` and be of the type `get` reads.
fn column<'a, T: ?Sized>(
    batch: &'a RecordBatch,
    i: usize,
    name: &str,
    get: impl FnOnce(&'a ArrayRef) -> Option<&'a T>,
) -> Result<&'a T, ArrowError> {
    let bad = |found: &str| {
        ArrowError::SchemaError(format!(
            "not a changelog batch: column {i} is {found}, not {name}"
        ))
    };
    let field = batch
        .schema_ref()
        .fields()
        .get(i)
        .cloned()
        .ok_or_else(|| bad("missing"))?;
    if field.name() != name {
        return Err(bad(field.name()));
    }
    get(batch.column(i)).ok_or_else(|| bad(&format!("{name} of type {}", field.data_type())))
}

impl<'a> ChangelogRows<'a> {
    /// `batch`, which must have a changelog's layout.
    pub fn new(batch: &'a RecordBatch) -> Result<Self, ArrowError> {
        let last = batch.num_columns().saturating_sub(1);
        if last < FIRST_IMAGE_COLUMN {
            return Err(ArrowError::SchemaError(format!(
                "not a changelog batch: {} columns",
                batch.num_columns()
            )));
        }
        Ok(Self {
            batch,
            ops: column(batch, OP_COLUMN, OP, |c| c.as_string_opt::<i32>())?,
            positions: column(batch, POSITION_COLUMN, POSITION, |c| {
                c.as_string_opt::<i32>()
            })?,
            gtids: column(batch, GTID_COLUMN, GTID, |c| c.as_string_opt::<i32>())?,
            txs: column(batch, TX_COLUMN, TX, |c| c.as_primitive_opt::<UInt64Type>())?,
            commit_ts: column(batch, COMMIT_TS_COLUMN, COMMIT_TS, |c| {
                c.as_primitive_opt::<TimestampMicrosecondType>()
            })?,
            versions: column(batch, SCHEMA_VERSION_COLUMN, SCHEMA_VERSION, |c| {
                c.as_primitive_opt::<UInt32Type>()
            })?,
            before: column(batch, last, BEFORE, |c| c.as_struct_opt())?,
        })
    }

    /// The batch itself.
    pub fn batch(&self) -> &'a RecordBatch {
        self.batch
    }

    /// Entries in the batch.
    pub fn len(&self) -> usize {
        self.batch.num_rows()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The operation of entry `i`.
    pub fn op(&self, i: usize) -> Result<Op, UnknownOp> {
        Op::from_code(self.ops.value(i))
    }

    /// The `_op` column.
    pub fn ops(&self) -> &'a StringArray {
        self.ops
    }

    /// The position of entry `i`, as `_position` writes it.
    pub fn position(&self, i: usize) -> &'a str {
        self.positions.value(i)
    }

    /// The `_position` column.
    pub fn positions(&self) -> &'a StringArray {
        self.positions
    }

    /// The `_gtid` column.
    pub fn gtids(&self) -> &'a StringArray {
        self.gtids
    }

    /// The transaction sequence number of entry `i` (0 for snapshot reads).
    pub fn tx(&self, i: usize) -> u64 {
        self.txs.value(i)
    }

    /// The `_tx` column.
    pub fn txs(&self) -> &'a UInt64Array {
        self.txs
    }

    /// The commit time of entry `i` in microseconds, NULL for snapshot reads.
    pub fn commit_ts(&self, i: usize) -> Option<i64> {
        self.commit_ts.is_valid(i).then(|| self.commit_ts.value(i))
    }

    /// The `_commit_ts` column.
    pub fn commit_ts_column(&self) -> &'a TimestampMicrosecondArray {
        self.commit_ts
    }

    /// The table schema version entry `i` was captured under.
    pub fn schema_version(&self, i: usize) -> u32 {
        self.versions.value(i)
    }

    /// The table's own columns: the after image, or the deleted row for deletes.
    pub fn image(&self) -> &'a [ArrayRef] {
        let last = self.batch.num_columns() - 1;
        &self.batch.columns()[FIRST_IMAGE_COLUMN..last]
    }

    /// The `_before` struct: the before image of updates, NULL for the other entries.
    pub fn before(&self) -> &'a StructArray {
        self.before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_read_by_place_once_its_layout_is_checked() {
        let table = Schema::new(vec![Field::new("id", DataType::Int32, false)]);
        let schema = changelog_schema(&table);
        let before = StructArray::new_null(before_fields(&schema), 2);
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from(vec!["r", "x"])),
                Arc::new(StringArray::from(vec!["a:1", "a:2"])),
                Arc::new(StringArray::new_null(2)),
                Arc::new(UInt64Array::from(vec![0, 3])),
                Arc::new(TimestampMicrosecondArray::from(vec![None, Some(5)]).with_timezone("UTC")),
                Arc::new(StringArray::from(vec!["db.t", "db.t"])),
                Arc::new(UInt32Array::from(vec![1, 1])),
                Arc::new(arrow::array::Int32Array::from(vec![7, 8])),
                Arc::new(before),
            ],
        )
        .unwrap();
        let rows = ChangelogRows::new(&batch).unwrap();
        assert_eq!(rows.op(0), Ok(Op::Read));
        assert_eq!(rows.op(1), Err(UnknownOp("x".into())));
        assert_eq!(rows.position(1), "a:2");
        assert_eq!(
            (rows.tx(1), rows.commit_ts(0), rows.commit_ts(1)),
            (3, None, Some(5))
        );
        assert_eq!(rows.image().len(), 1);
        // A batch of another layout is refused by name, not read as this one.
        let other = batch.project(&[1, 0, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let error = ChangelogRows::new(&other).unwrap_err().to_string();
        assert!(error.contains("column 0 is _position, not _op"), "{error}");
    }
}
