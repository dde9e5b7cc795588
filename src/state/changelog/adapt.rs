//! One changelog table over entries captured under several schemas of the table.
//!
//! # Invariant
//! A table's changelog is read with one schema, the union of every schema its entries were
//! captured under ([`union_schema`]): each column that existed at some point of the history,
//! by name, with the type of its latest definition. [`adapt`] brings a batch written under any
//! of those schemas to it: a column the batch lacks (added later, or dropped earlier) is NULL,
//! a widened column is cast, and a cast that would change a value is an error, never a silently
//! different value. Entries are never rewritten in memory or in files: a schema change costs
//! nothing until the entries are read.
//!
//! A column the capture followed from one schema to the next holds values that convert (the
//! change was followed only because they do). A name that comes back after its column was
//! dropped (dropped and added again, or a table dropped and created again) is another column:
//! when its old values would not read as the new type exactly ([`reads_exactly`]), the union
//! holds it as text, which every entry's value converts to, so no entry becomes unreadable.

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, RecordBatch, StructArray, UInt32Array,
};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use arrow::error::ArrowError;

use super::format::{BEFORE, META_COLUMNS};

/// The name of the column that says which schema version an entry was captured under.
const VERSION_COLUMN: &str = "_schema_version";

/// The union of `old` (a changelog's schema so far) and `new` (the changelog schema of the
/// table's newest schema): the metadata columns, `new`'s columns in their order, then the
/// columns only `old` has (dropped ones, in their old order), then `_before` built the same way.
/// A column present in only one of them is nullable.
pub fn union_schema(old: &SchemaRef, new: &SchemaRef) -> SchemaRef {
    union_schema_after(old, old, new)
}

/// [`union_schema`] when the entries were last written under `previous` (a schema `old`
/// holds): a name of `new` that `previous` lacks but `old` has came back after its column was
/// dropped, and is text when its old values would not read as the new type (see the module
/// docs).
pub fn union_schema_after(old: &SchemaRef, previous: &SchemaRef, new: &SchemaRef) -> SchemaRef {
    if old == new {
        return Arc::clone(new);
    }
    let meta = META_COLUMNS.len();
    let row_fields = |s: &Schema| -> Vec<FieldRef> {
        s.fields()
            .iter()
            .skip(meta)
            .take(s.fields().len().saturating_sub(meta + 1))
            .cloned()
            .collect()
    };
    let mut fields: Vec<FieldRef> = new.fields().iter().take(meta).cloned().collect();
    fields.extend(union_fields(
        &row_fields(old),
        &row_fields(previous),
        &row_fields(new),
    ));
    let before = |s: &Schema| -> Vec<FieldRef> {
        match s.fields().last().map(|f| f.data_type()) {
            Some(DataType::Struct(children)) => children.iter().cloned().collect(),
            _ => Vec::new(),
        }
    };
    let children: Fields = union_fields(&before(old), &before(previous), &before(new)).into();
    fields.push(Arc::new(Field::new(
        BEFORE,
        DataType::Struct(children),
        true,
    )));
    Arc::new(Schema::new(fields))
}

/// `new`'s fields (nullable when `old` lacks them; text when they came back after `previous`
/// dropped them with values their new type cannot read), then `old`'s fields `new` lacks,
/// nullable.
fn union_fields(old: &[FieldRef], previous: &[FieldRef], new: &[FieldRef]) -> Vec<FieldRef> {
    let has = |fields: &[FieldRef], name: &str| fields.iter().any(|f| f.name() == name);
    let mut out: Vec<FieldRef> = new
        .iter()
        .map(|f| match old.iter().find(|o| o.name() == f.name()) {
            Some(o) if !has(previous, f.name()) && !reads_exactly(o.data_type(), f.data_type()) => {
                Arc::new(Field::new(f.name(), DataType::Utf8, true))
            }
            Some(o) if o.is_nullable() && !f.is_nullable() => {
                Arc::new(f.as_ref().clone().with_nullable(true))
            }
            Some(_) => Arc::clone(f),
            None => Arc::new(f.as_ref().clone().with_nullable(true)),
        })
        .collect();
    out.extend(
        old.iter()
            .filter(|f| !has(new, f.name()))
            .map(|f| Arc::new(f.as_ref().clone().with_nullable(true))),
    );
    out
}

/// Whether every value of type `from` reads as type `to` unchanged: the same type, a wider
/// integer, or a decimal with the same scale and at least the precision (text reads as text:
/// a column already held as text stays so).
pub fn reads_exactly(from: &DataType, to: &DataType) -> bool {
    use DataType as D;
    let int = |t: &DataType| -> Option<(bool, usize)> {
        t.is_integer()
            .then(|| (t.is_signed_integer(), t.primitive_width().unwrap_or(0)))
    };
    match (from, to) {
        _ if from == to => true,
        (D::Decimal128(p1, s1), D::Decimal128(p2, s2)) => s1 == s2 && p2 >= p1,
        _ => match (int(from), int(to)) {
            (Some((signed_from, w1)), Some((signed_to, w2))) => match (signed_from, signed_to) {
                (true, true) | (false, false) => w2 >= w1,
                (false, true) => w2 > w1,
                (true, false) => false,
            },
            _ => false,
        },
    }
}

/// `batch` (a changelog batch of any schema version of the table) in `target`, a union of its
/// schema and others (see the module docs). Free when the schemas are already equal.
pub fn adapt(batch: RecordBatch, target: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    if batch.schema() == *target {
        return Ok(batch);
    }
    let n = batch.num_rows();
    let schema = batch.schema();
    let columns = target
        .fields()
        .iter()
        .map(|field| match schema.index_of(field.name()) {
            Ok(i) => column_as(batch.column(i), field),
            // Entries written before the column existed.
            Err(_) if field.name() == VERSION_COLUMN => {
                Ok(Arc::new(UInt32Array::from(vec![0; n])) as ArrayRef)
            }
            Err(_) => Ok(new_null_array(field.data_type(), n)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(Arc::clone(target), columns)
}

/// `array` as a column of `field`: itself, cast exactly, or (a struct) child by child by name.
fn column_as(array: &ArrayRef, field: &Field) -> Result<ArrayRef, ArrowError> {
    if array.data_type() == field.data_type() {
        return Ok(Arc::clone(array));
    }
    match (array.data_type(), field.data_type()) {
        (DataType::Struct(from), DataType::Struct(to)) => {
            let structs = array.as_struct();
            let children = to
                .iter()
                .map(
                    |child| match from.iter().position(|f| f.name() == child.name()) {
                        Some(i) => column_as(structs.column(i), child),
                        None => Ok(new_null_array(child.data_type(), structs.len())),
                    },
                )
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(StructArray::try_new(
                to.clone(),
                children,
                structs.nulls().cloned(),
            )?))
        }
        (_, to) => {
            // `safe: false`: a value that does not fit is an error, not a NULL.
            let options = CastOptions {
                safe: false,
                ..CastOptions::default()
            };
            cast_with_options(array, to, &options).map_err(|e| {
                ArrowError::CastError(format!(
                    "changelog column {} written as {} cannot be read as {to}: {e}",
                    field.name(),
                    array.data_type()
                ))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::changelog::format::changelog_schema;
    use arrow::array::{Int32Array, Int64Array, StringArray};

    fn table(fields: Vec<Field>) -> SchemaRef {
        changelog_schema(&Schema::new(fields))
    }

    #[test]
    fn union_keeps_dropped_columns_and_widens_kept_ones() {
        let old = table(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("gone", DataType::Utf8, true),
        ]);
        let new = table(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("added", DataType::Utf8, false),
        ]);
        let union = union_schema(&old, &new);
        let names: Vec<&str> = union
            .fields()
            .iter()
            .skip(META_COLUMNS.len())
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["id", "added", "gone", "_before"]);
        assert_eq!(
            union.field_with_name("id").unwrap().data_type(),
            &DataType::Int64
        );
        assert!(union.field_with_name("added").unwrap().is_nullable());
        let DataType::Struct(before) = union.field_with_name("_before").unwrap().data_type() else {
            panic!("_before is a struct");
        };
        assert_eq!(before.len(), 3);
    }

    #[test]
    fn adapting_fills_missing_columns_and_casts_widened_ones() {
        let old = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("gone", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&old),
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec!["a", "b"])),
            ],
        )
        .unwrap();
        let target = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("added", DataType::Utf8, true),
            Field::new("gone", DataType::Utf8, true),
            Field::new(VERSION_COLUMN, DataType::UInt32, false),
        ]));
        let out = adapt(batch, &target).unwrap();
        assert_eq!(
            out.column(0).as_primitive::<arrow::datatypes::Int64Type>(),
            &Int64Array::from(vec![1, 2])
        );
        assert_eq!(out.column(1).null_count(), 2);
        assert_eq!(out.column(2).as_string::<i32>().value(1), "b");
        assert_eq!(
            out.column(3)
                .as_primitive::<arrow::datatypes::UInt32Type>()
                .value(0),
            0
        );
    }

    #[test]
    fn a_name_back_after_its_column_was_dropped_is_text_when_its_old_values_would_not_fit() {
        let (id, id64) = (
            Field::new("id", DataType::Int32, false),
            Field::new("id", DataType::Int64, false),
        );
        let v0 = table(vec![id.clone(), Field::new("b", DataType::Utf8, true)]);
        let v1 = table(vec![id.clone()]);
        let v2 = table(vec![id.clone(), Field::new("b", DataType::Int32, true)]);
        let u1 = union_schema_after(&v0, &v0, &v1);
        let u2 = union_schema_after(&u1, &v1, &v2);
        assert_eq!(
            u2.field_with_name("b").unwrap().data_type(),
            &DataType::Utf8
        );
        // A followed change (the name kept from one schema to the next) takes the new type,
        // and so does a name back whose old values fit it.
        let widened = table(vec![id64.clone(), Field::new("b", DataType::Utf8, true)]);
        let u3 = union_schema_after(&v0, &v0, &widened);
        assert_eq!(
            u3.field_with_name("id").unwrap().data_type(),
            &DataType::Int64
        );
        let v1_64 = table(vec![id64.clone()]);
        let back = table(vec![id64, Field::new("b", DataType::Utf8, true)]);
        let u4 = union_schema_after(&union_schema_after(&v0, &v0, &v1_64), &v1_64, &back);
        assert_eq!(
            u4.field_with_name("b").unwrap().data_type(),
            &DataType::Utf8
        );
        assert!(reads_exactly(&DataType::Int32, &DataType::Int64));
        assert!(reads_exactly(&DataType::UInt32, &DataType::Int64));
        assert!(!reads_exactly(&DataType::Int64, &DataType::Int32));
        assert!(!reads_exactly(&DataType::Utf8, &DataType::Int32));
    }

    #[test]
    fn a_cast_that_changes_values_is_an_error() {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![1 << 40]))],
        )
        .unwrap();
        let target = Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, false)]));
        assert!(adapt(batch, &target).is_err());
    }
}
