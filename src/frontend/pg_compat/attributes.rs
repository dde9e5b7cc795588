//! `pg_attribute` with each captured column's PostgreSQL type as the front end sends it:
//! `json` for JSON columns, and the type modifier of `numeric(p,s)`, `timestamp(p)` and
//! `timestamptz(p)`, which drivers read for precision, scale and display (pgjdbc's
//! `getColumns`, SQLAlchemy's `inspect()`, psql's `\d`).
//!
//! `datafusion-pg-catalog` derives a column's type from its Arrow type alone, without
//! modifiers, and lists JSON as `text`. This table keeps its rows and replaces `atttypid` and
//! `atttypmod` with what `encode` describes the same column as.
//!
//! # Invariant
//! A column's `atttypid` and `atttypmod` here are the type oid and modifier of its field in
//! every `RowDescription` that sends it unchanged (see `encode::pg_type` and
//! `encode::type_modifier`), so the catalog and the results never disagree.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int32Array, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{Int16Type, Int32Type, SchemaRef};
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use crate::frontend::pg_compat::keys::{all_rows, scan_rows, KeySource};
use crate::frontend::protocol::encode::{pg_type, type_modifier};

/// A database's `pg_attribute`, typed as the front end sends each column.
#[derive(Debug)]
pub struct TypedAttributes {
    pub inner: Arc<dyn TableProvider>,
    pub tables: Arc<dyn KeySource>,
}

#[async_trait]
impl TableProvider for TypedAttributes {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batches = all_rows(self.inner.as_ref(), state).await?;
        let tables = self.tables.table_schemas(state).await?;
        let typed = batches
            .into_iter()
            .map(|batch| {
                retype(batch, &|table, column| {
                    let field = tables
                        .get(&table)?
                        .fields()
                        .get(usize::try_from(column).ok()? - 1)?;
                    Some((pg_type(field).ok()?.oid() as i32, type_modifier(field)))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        scan_rows(
            self.inner.schema(),
            typed,
            state,
            projection,
            filters,
            limit,
        )
        .await
    }
}

/// `batch` with `atttypid` and `atttypmod` replaced, row by row, by what `lookup` gives for
/// the row's `attrelid` and `attnum` (rows it has no answer for keep theirs).
fn retype(
    batch: RecordBatch,
    lookup: &dyn Fn(i32, i16) -> Option<(i32, i32)>,
) -> Result<RecordBatch> {
    let column = |name: &str| -> Result<(usize, ArrayRef)> {
        let index = batch.schema().index_of(name)?;
        Ok((index, Arc::clone(batch.column(index))))
    };
    let (_, relids) = column("attrelid")?;
    let (_, nums) = column("attnum")?;
    let (type_index, types) = column("atttypid")?;
    let (mod_index, mods) = column("atttypmod")?;
    let relids = cast(&relids, &datafusion::arrow::datatypes::DataType::Int32)?;
    let (relids, nums) = (
        relids.as_primitive::<Int32Type>(),
        nums.as_primitive::<Int16Type>(),
    );
    let old_types = cast(&types, &datafusion::arrow::datatypes::DataType::Int32)?;
    let old_types = old_types.as_primitive::<Int32Type>();
    let old_mods = mods.as_primitive::<Int32Type>();
    let mut new_types = Vec::with_capacity(batch.num_rows());
    let mut new_mods = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let found = (relids.is_valid(row) && nums.is_valid(row))
            .then(|| lookup(relids.value(row), nums.value(row)))
            .flatten();
        let (ty, modifier) = found.unwrap_or((old_types.value(row), old_mods.value(row)));
        new_types.push(ty);
        new_mods.push(modifier);
    }
    let mut columns = batch.columns().to_vec();
    columns[type_index] = cast(
        &(Arc::new(Int32Array::from(new_types)) as ArrayRef),
        types.data_type(),
    )?;
    columns[mod_index] = Arc::new(Int32Array::from(new_mods));
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int16Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn known_columns_take_the_front_ends_type_and_others_keep_theirs() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("attrelid", DataType::Int32, false),
            Field::new("attnum", DataType::Int16, false),
            Field::new("atttypid", DataType::Int32, false),
            Field::new("atttypmod", DataType::Int32, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(vec![10, 10, 11])),
                Arc::new(Int16Array::from(vec![1, 2, 1])),
                Arc::new(Int32Array::from(vec![1700, 25, 23])),
                Arc::new(Int32Array::from(vec![-1, -1, -1])),
            ],
        )
        .unwrap();
        let typed = retype(batch, &|table, column| match (table, column) {
            (10, 1) => Some((1700, (12 << 16 | 2) + 4)),
            (10, 2) => Some((114, -1)),
            _ => None,
        })
        .unwrap();
        let ints = |c: usize| {
            typed
                .column(c)
                .as_primitive::<Int32Type>()
                .values()
                .to_vec()
        };
        assert_eq!(ints(2), vec![1700, 114, 23]);
        assert_eq!(ints(3), vec![(12 << 16 | 2) + 4, -1, -1]);
    }
}
