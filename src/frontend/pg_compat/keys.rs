//! `pg_index` and `pg_constraint` of a database: the primary key of each captured table, as
//! PostgreSQL describes a key and the unique index behind it.
//!
//! The rows are made when a query scans them, from the database's `pg_class` and
//! `pg_namespace` (so they name the oids those tables give) and from each table's
//! [`TableProvider::constraints`], which for a captured table is its MySQL primary key. Nothing
//! else is listed: cdcfusion keeps no secondary, unique or foreign keys, and PostgreSQL's own
//! catalog does not describe itself here (see `catalog`).
//!
//! # Invariant
//! A key's row names its table's `pg_class` oid and its columns' `pg_attribute` numbers (column
//! position + 1, in key order). Index and constraint are named `{table}_pkey`, as PostgreSQL
//! names them, and their oids are derived from the table's, in ranges the catalog's own
//! counter (from 16384, one per object) never reaches. Vector columns (`indkey`, `indclass`,
//! ...) are lists here; PostgreSQL numbers their elements from 0 (see `rules`).

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int16Array, Int32Array, ListArray, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int16Type, Int32Type, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::datasource::{MemTable, TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_pg_catalog::pg_catalog::oid_field::{kind, oid_field};

/// Index oids are this plus their table's oid.
const INDEX_OIDS: i32 = 1_000_000_000;
/// Constraint oids are this plus their table's oid.
const CONSTRAINT_OIDS: i32 = 1_500_000_000;

/// The primary key of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrimaryKey {
    pub table_oid: i32,
    pub namespace_oid: i32,
    pub table: String,
    /// The table's schema (the MySQL database).
    pub schema: String,
    /// Column numbers (position + 1), in key order.
    pub columns: Vec<i16>,
    /// Their names, in key order.
    pub column_names: Vec<String>,
    /// Rows of the table now (exact: the current table's count), which PostgreSQL's planner
    /// statistics estimate as `pg_class.reltuples` of the table and of its key's index.
    pub rows: u64,
}

impl PrimaryKey {
    /// The oid of the key's index.
    pub fn index_oid(&self) -> i32 {
        INDEX_OIDS + self.table_oid
    }

    /// The name of the key's index and constraint.
    pub fn name(&self) -> String {
        format!("{}_pkey", self.table)
    }
}

/// Where the keys of a database come from.
#[async_trait]
pub trait KeySource: Debug + Send + Sync {
    /// Every primary key of the database, read in `state`.
    async fn primary_keys(&self, state: &dyn Session) -> Result<Vec<PrimaryKey>>;

    /// The Arrow schema of each of the database's tables, by `pg_class` oid.
    async fn table_schemas(
        &self,
        state: &dyn Session,
    ) -> Result<std::collections::HashMap<i32, SchemaRef>>;

    /// The `pg_class` oid and Arrow schema of table `schema.table` of the database, if it
    /// has one.
    async fn table_origin(
        &self,
        state: &dyn Session,
        schema: &str,
        table: &str,
    ) -> Result<Option<(i32, SchemaRef)>>;

    /// The `pg_class` oid of table `schema.table` if it was found before, with no listing and
    /// no session (for answers that plan nothing); `None` when it was not.
    fn known_oid(&self, schema: &str, table: &str) -> Option<i32>;
}

/// Which catalog table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyTable {
    /// `pg_index`.
    Index,
    /// `pg_constraint`.
    Constraint,
}

impl KeyTable {
    /// The table a catalog name means, if it is one of these.
    pub fn named(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "pg_index" => Some(Self::Index),
            "pg_constraint" => Some(Self::Constraint),
            _ => None,
        }
    }

    /// PostgreSQL's columns of the table.
    pub fn schema(self) -> SchemaRef {
        let bool = |name: &str| Field::new(name, DataType::Boolean, false);
        let int16 = |name: &str| Field::new(name, DataType::Int16, false);
        let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
        let list = |name: &str, item: DataType, nullable| {
            Field::new(
                name,
                DataType::List(Arc::new(Field::new("item", item, true))),
                nullable,
            )
        };
        let fields = match self {
            Self::Index => {
                let mut fields = vec![
                    oid_field("indexrelid", kind::OID, false),
                    oid_field("indrelid", kind::OID, false),
                    int16("indnatts"),
                    int16("indnkeyatts"),
                ];
                fields.extend(INDEX_FLAGS.iter().map(|(name, _)| bool(name)));
                fields.extend([
                    list("indkey", DataType::Int16, false),
                    list("indcollation", DataType::Int32, false),
                    list("indclass", DataType::Int32, false),
                    list("indoption", DataType::Int16, false),
                    text("indexprs", true),
                    text("indpred", true),
                ]);
                fields
            }
            Self::Constraint => vec![
                oid_field("oid", kind::OID, false),
                text("conname", false),
                oid_field("connamespace", kind::OID, false),
                text("contype", false),
                bool("condeferrable"),
                bool("condeferred"),
                bool("convalidated"),
                oid_field("conrelid", kind::OID, false),
                oid_field("contypid", kind::OID, false),
                oid_field("conindid", kind::OID, false),
                oid_field("conparentid", kind::OID, false),
                oid_field("confrelid", kind::OID, false),
                text("confupdtype", false),
                text("confdeltype", false),
                text("confmatchtype", false),
                bool("conislocal"),
                int16("coninhcount"),
                bool("connoinherit"),
                list("conkey", DataType::Int16, true),
                list("confkey", DataType::Int16, true),
                list("conpfeqop", DataType::Int32, true),
                list("conppeqop", DataType::Int32, true),
                list("conffeqop", DataType::Int32, true),
                list("confdelsetcols", DataType::Int16, true),
                list("conexclop", DataType::Int32, true),
                text("conbin", true),
            ],
        };
        Arc::new(Schema::new(fields))
    }

    /// The rows of `keys`.
    pub fn batch(self, keys: &[PrimaryKey]) -> Result<RecordBatch> {
        let n = keys.len();
        let oids = |offset: i32| -> ArrayRef {
            Arc::new(Int32Array::from_iter_values(
                keys.iter().map(|k| offset + k.table_oid),
            ))
        };
        let tables: ArrayRef = Arc::new(Int32Array::from_iter_values(
            keys.iter().map(|k| k.table_oid),
        ));
        let same_i32 = |v: i32| -> ArrayRef { Arc::new(Int32Array::from(vec![v; n])) };
        let same_i16 = |v: i16| -> ArrayRef { Arc::new(Int16Array::from(vec![v; n])) };
        let same_bool = |v: bool| -> ArrayRef { Arc::new(BooleanArray::from(vec![v; n])) };
        let same_text = |v: &str| -> ArrayRef { Arc::new(StringArray::from(vec![v; n])) };
        let null_text = || -> ArrayRef { Arc::new(StringArray::from(vec![None::<&str>; n])) };
        let columns = || {
            keys.iter()
                .map(|k| Some(k.columns.iter().map(|&c| Some(c)).collect::<Vec<_>>()))
        };
        let key_columns = || -> ArrayRef {
            Arc::new(ListArray::from_iter_primitive::<Int16Type, _, _>(columns()))
        };
        // One 0 per key column: no collation, operator class or option is recorded.
        let zeros16 = || -> ArrayRef {
            Arc::new(ListArray::from_iter_primitive::<Int16Type, _, _>(
                keys.iter().map(|k| Some(vec![Some(0); k.columns.len()])),
            ))
        };
        let zeros32 = || -> ArrayRef {
            Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(
                keys.iter().map(|k| Some(vec![Some(0); k.columns.len()])),
            ))
        };
        let no_list16 = || -> ArrayRef {
            Arc::new(ListArray::from_iter_primitive::<Int16Type, _, _>(
                (0..n).map(|_| None::<Vec<Option<i16>>>),
            ))
        };
        let no_list32 = || -> ArrayRef {
            Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(
                (0..n).map(|_| None::<Vec<Option<i32>>>),
            ))
        };
        let arrays: Vec<ArrayRef> = match self {
            Self::Index => {
                let widths: ArrayRef = Arc::new(Int16Array::from_iter_values(
                    keys.iter().map(|k| k.columns.len() as i16),
                ));
                let mut arrays = vec![oids(INDEX_OIDS), tables, Arc::clone(&widths), widths];
                arrays.extend(INDEX_FLAGS.iter().map(|(_, v)| same_bool(*v)));
                arrays.extend([key_columns(), zeros32(), zeros32(), zeros16()]);
                arrays.extend([null_text(), null_text()]);
                arrays
            }
            Self::Constraint => vec![
                oids(CONSTRAINT_OIDS),
                Arc::new(StringArray::from_iter_values(keys.iter().map(|k| k.name()))),
                Arc::new(Int32Array::from_iter_values(
                    keys.iter().map(|k| k.namespace_oid),
                )),
                same_text("p"),
                same_bool(false),
                same_bool(false),
                same_bool(true),
                tables,
                same_i32(0),
                oids(INDEX_OIDS),
                same_i32(0),
                same_i32(0),
                same_text(" "),
                same_text(" "),
                same_text(" "),
                same_bool(true),
                same_i16(0),
                same_bool(true),
                key_columns(),
                no_list16(),
                no_list32(),
                no_list32(),
                no_list32(),
                no_list16(),
                no_list32(),
                null_text(),
            ],
        };
        Ok(RecordBatch::try_new(self.schema(), arrays)?)
    }
}

/// `pg_index`'s flags, in column order, with their value for a primary key's index.
const INDEX_FLAGS: [(&str, bool); 11] = [
    ("indisunique", true),
    ("indnullsnotdistinct", false),
    ("indisprimary", true),
    ("indisexclusion", false),
    ("indimmediate", true),
    ("indisclustered", false),
    ("indisvalid", true),
    ("indcheckxmin", false),
    ("indisready", true),
    ("indislive", true),
    ("indisreplident", false),
];

/// `pg_index` or `pg_constraint`, made from `source` at each scan.
#[derive(Debug)]
pub struct KeyTableProvider {
    table: KeyTable,
    schema: SchemaRef,
    source: Arc<dyn KeySource>,
}

impl KeyTableProvider {
    pub fn new(table: KeyTable, source: Arc<dyn KeySource>) -> Self {
        Self {
            table,
            schema: table.schema(),
            source,
        }
    }
}

#[async_trait]
impl TableProvider for KeyTableProvider {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
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
        let keys = self.source.primary_keys(state).await?;
        let batch = self.table.batch(&keys)?;
        scan_rows(
            Arc::clone(&self.schema),
            vec![batch],
            state,
            projection,
            filters,
            limit,
        )
        .await
    }
}

/// Every row of `table`, read in `state`.
pub async fn all_rows(table: &dyn TableProvider, state: &dyn Session) -> Result<Vec<RecordBatch>> {
    let plan = table.scan(state, None, &[], None).await?;
    datafusion::physical_plan::collect(plan, state.task_ctx()).await
}

/// A scan of `batches` as a table of `schema`, with the scan's projection, filters and limit:
/// how the catalog tables made at each scan answer one.
pub async fn scan_rows(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    state: &dyn Session,
    projection: Option<&Vec<usize>>,
    filters: &[Expr],
    limit: Option<usize>,
) -> Result<Arc<dyn ExecutionPlan>> {
    MemTable::try_new(schema, vec![batches])?
        .scan(state, projection, filters, limit)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;

    #[test]
    fn a_key_is_one_index_and_one_constraint_with_its_columns_in_key_order() {
        let keys = [PrimaryKey {
            table_oid: 16390,
            namespace_oid: 16385,
            table: "items".into(),
            schema: "shop".into(),
            columns: vec![2, 1],
            column_names: vec!["b".into(), "a".into()],
            rows: 12,
        }];
        let index = KeyTable::Index.batch(&keys).unwrap();
        let constraint = KeyTable::Constraint.batch(&keys).unwrap();
        let int32 = |b: &RecordBatch, c: &str| {
            b.column_by_name(c)
                .unwrap()
                .as_primitive::<Int32Type>()
                .value(0)
        };
        assert_eq!(int32(&index, "indrelid"), 16390);
        assert_eq!(int32(&index, "indexrelid"), int32(&constraint, "conindid"));
        assert_eq!(int32(&constraint, "conrelid"), 16390);
        assert_eq!(
            constraint
                .column_by_name("conname")
                .unwrap()
                .as_string::<i32>()
                .value(0),
            "items_pkey"
        );
        for (batch, column) in [(&index, "indkey"), (&constraint, "conkey")] {
            let list = batch
                .column_by_name(column)
                .unwrap()
                .as_list::<i32>()
                .value(0);
            assert_eq!(list.as_primitive::<Int16Type>().values(), &[2, 1]);
        }
        assert_eq!(KeyTable::named("PG_INDEX"), Some(KeyTable::Index));
    }
}
