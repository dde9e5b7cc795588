//! The index behind each primary key, where PostgreSQL clients look for it besides `pg_index`:
//! a `pg_class` row of kind `i` (pgjdbc's `getIndexInfo` and psql's `\d` join `pg_index` to
//! it for the index's name and access method) and `pg_get_indexdef` (its definition, or one
//! key column's name, which `getIndexInfo` reads as `COLUMN_NAME`).
//!
//! # Invariant
//! The rows and definitions come from the same [`PrimaryKey`]s as `pg_index` and
//! `pg_constraint` (see `keys`), read when a query scans the catalog: an index row has the
//! oid `pg_index.indexrelid` names, the key's name, the table's namespace, kind `i` and the
//! btree access method. `pg_get_indexdef` answers from the keys of the session's database
//! that its catalog last listed, so it names what the same query's `pg_index` scan saw; an
//! oid it does not know gives NULL, as PostgreSQL gives for an oid that is not an index.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, Float64Array, RecordBatch, StringBuilder,
};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Int32Type, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::ScalarValue;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::physical_plan::ExecutionPlan;

use crate::frontend::pg_compat::keys::{all_rows, scan_rows, KeySource, PrimaryKey};

/// `pg_am.oid` of btree, the access method PostgreSQL builds primary keys with.
const BTREE: i32 = 403;

/// The primary keys each database's catalog listed last, by index oid.
#[derive(Debug, Default, Clone)]
pub struct IndexDefinitions {
    by_catalog: Arc<Mutex<HashMap<String, HashMap<i32, PrimaryKey>>>>,
}

impl IndexDefinitions {
    /// Records `keys` as the primary keys of database catalog `catalog`.
    pub fn record(&self, catalog: &str, keys: &[PrimaryKey]) {
        let by_oid = keys.iter().map(|k| (k.index_oid(), k.clone())).collect();
        self.by_catalog
            .lock()
            .expect("index definitions")
            .insert(catalog.to_string(), by_oid);
    }

    /// `pg_get_indexdef(oid, column)` in `catalog`: the whole definition for column 0, else
    /// the column's name; `None` for an unknown index or column.
    fn definition(&self, catalog: &str, oid: i32, column: i64) -> Option<String> {
        let by_catalog = self.by_catalog.lock().expect("index definitions");
        let key = by_catalog.get(catalog)?.get(&oid)?;
        if column == 0 {
            let columns: Vec<String> = key.column_names.iter().map(|c| quoted(c)).collect();
            return Some(format!(
                "CREATE UNIQUE INDEX {} ON {}.{} USING btree ({})",
                quoted(&key.name()),
                quoted(&key.schema),
                quoted(&key.table),
                columns.join(", ")
            ));
        }
        let index = usize::try_from(column).ok()?.checked_sub(1)?;
        key.column_names.get(index).map(|c| quoted(c))
    }
}

/// An identifier as PostgreSQL's `quote_ident` writes it: bare when it is lower case letters,
/// digits and underscores not starting with a digit, else in double quotes.
fn quoted(name: &str) -> String {
    let bare = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if bare {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// `pg_get_indexdef(index_oid [, column, pretty])`.
#[derive(Debug)]
pub struct PgGetIndexdef {
    signature: Signature,
    definitions: IndexDefinitions,
}

impl PgGetIndexdef {
    pub fn new(definitions: IndexDefinitions) -> Self {
        Self {
            signature: Signature::variadic_any(Volatility::Stable),
            definitions,
        }
    }
}

impl PartialEq for PgGetIndexdef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.definitions.by_catalog, &other.definitions.by_catalog)
    }
}

impl Eq for PgGetIndexdef {}

impl std::hash::Hash for PgGetIndexdef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "pg_get_indexdef".hash(state);
    }
}

impl ScalarUDFImpl for PgGetIndexdef {
    fn name(&self) -> &str {
        "pg_get_indexdef"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.len() {
            1 | 3 => Ok(DataType::Utf8),
            n => datafusion::common::plan_err!(
                "pg_get_indexdef() takes an index oid, or an oid, a column number and a pretty flag; {n} arguments given"
            ),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let catalog = args.config_options.catalog.default_catalog.clone();
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let oids = cast(&arrays[0], &DataType::Int32)?;
        let oids = oids.as_primitive::<Int32Type>();
        let columns = match arrays.get(1) {
            Some(c) => Some(cast(c, &DataType::Int64)?),
            None => None,
        };
        let columns = columns
            .as_ref()
            .map(|c| c.as_primitive::<datafusion::arrow::datatypes::Int64Type>());
        let mut out = StringBuilder::new();
        for row in 0..rows {
            let column = match columns {
                Some(c) if c.is_null(row) => None,
                Some(c) => Some(c.value(row)),
                None => Some(0),
            };
            match (oids.is_valid(row), column) {
                (true, Some(column)) => out.append_option(self.definitions.definition(
                    &catalog,
                    oids.value(row),
                    column,
                )),
                _ => out.append_null(),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// A database's `pg_class` with a row for each primary key's index.
#[derive(Debug)]
pub struct ClassWithIndexes {
    pub inner: Arc<dyn TableProvider>,
    pub keys: Arc<dyn KeySource>,
}

impl ClassWithIndexes {
    /// The index rows of `keys` in `pg_class`'s `schema`: the columns an index has values
    /// for, and NULL (or the type's zero where a column has no NULLs) in the others.
    fn index_rows(schema: &SchemaRef, keys: &[PrimaryKey]) -> Result<RecordBatch> {
        let n = keys.len();
        let column = |name: &str, dt: &DataType| -> Result<Option<ArrayRef>> {
            let int = |f: &dyn Fn(&PrimaryKey) -> i32| -> Result<ArrayRef> {
                let values: ArrayRef = Arc::new(
                    datafusion::arrow::array::Int32Array::from_iter_values(keys.iter().map(f)),
                );
                Ok(cast(&values, dt)?)
            };
            let text = |v: &dyn Fn(&PrimaryKey) -> String| -> Result<ArrayRef> {
                let values: ArrayRef = Arc::new(
                    datafusion::arrow::array::StringArray::from_iter_values(keys.iter().map(v)),
                );
                Ok(cast(&values, dt)?)
            };
            Ok(Some(match name {
                "oid" => int(&|k| k.index_oid())?,
                "relname" => text(&|k| k.name())?,
                "relnamespace" => int(&|k| k.namespace_oid)?,
                "relam" => int(&|_| BTREE)?,
                "relnatts" => int(&|k| k.columns.len() as i32)?,
                "relkind" => text(&|_| "i".into())?,
                "relpersistence" => text(&|_| "p".into())?,
                "relreplident" => text(&|_| "n".into())?,
                "relispopulated" => ScalarValue::Boolean(Some(true)).to_array_of_size(n)?,
                // The key's index holds a row for every row of the table (pgjdbc's
                // `getIndexInfo` reads it as CARDINALITY). `relpages` stays 0: the index is
                // in memory, not in pages.
                "reltuples" => {
                    let values: ArrayRef = Arc::new(Float64Array::from_iter_values(
                        keys.iter().map(|k| k.rows as f64),
                    ));
                    cast(&values, dt)?
                }
                _ => return Ok(None),
            }))
        };
        let arrays = schema
            .fields()
            .iter()
            .map(|field| {
                Ok(match column(field.name(), field.data_type())? {
                    Some(array) => array,
                    None if field.is_nullable() => new_null_array(field.data_type(), n),
                    None => ScalarValue::new_default(field.data_type())?.to_array_of_size(n)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(Arc::clone(schema), arrays)?)
    }
}

impl ClassWithIndexes {
    /// `batch` of `pg_class` rows with each keyed table's `reltuples` set to its row count
    /// (the catalog leaves it 0: no statistics).
    fn with_table_rows(batch: RecordBatch, keys: &[PrimaryKey]) -> Result<RecordBatch> {
        let schema = batch.schema();
        let (Ok(oid), Ok(tuples)) = (schema.index_of("oid"), schema.index_of("reltuples")) else {
            return Ok(batch);
        };
        let rows: HashMap<i32, f64> = keys.iter().map(|k| (k.table_oid, k.rows as f64)).collect();
        let oids = cast(batch.column(oid), &DataType::Int32)?;
        let oids = oids.as_primitive::<Int32Type>();
        let old = cast(batch.column(tuples), &DataType::Float64)?;
        let old = old.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
        let new: Float64Array = (0..batch.num_rows())
            .map(|i| {
                let known = oids.is_valid(i).then(|| rows.get(&oids.value(i))).flatten();
                known
                    .copied()
                    .or_else(|| old.is_valid(i).then(|| old.value(i)))
            })
            .collect();
        let mut columns = batch.columns().to_vec();
        columns[tuples] = cast(
            &(Arc::new(new) as ArrayRef),
            schema.field(tuples).data_type(),
        )?;
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

#[async_trait]
impl TableProvider for ClassWithIndexes {
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
        let schema = self.inner.schema();
        let keys = self.keys.primary_keys(state).await?;
        let mut batches = all_rows(self.inner.as_ref(), state)
            .await?
            .into_iter()
            .map(|batch| Self::with_table_rows(batch, &keys))
            .collect::<Result<Vec<_>>>()?;
        batches.push(Self::index_rows(&schema, &keys)?);
        let all = concat_batches(&schema, &batches)?;
        scan_rows(schema, vec![all], state, projection, filters, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> PrimaryKey {
        PrimaryKey {
            table_oid: 16390,
            namespace_oid: 16385,
            table: "Items".into(),
            schema: "shop".into(),
            columns: vec![2, 1],
            column_names: vec!["b".into(), "Order Id".into()],
            rows: 12,
        }
    }

    #[test]
    fn a_definition_names_the_whole_key_or_one_column() {
        let defs = IndexDefinitions::default();
        defs.record("src", &[key()]);
        let oid = key().index_oid();
        assert_eq!(
            defs.definition("src", oid, 0).unwrap(),
            r#"CREATE UNIQUE INDEX "Items_pkey" ON shop."Items" USING btree (b, "Order Id")"#
        );
        assert_eq!(defs.definition("src", oid, 1).unwrap(), "b");
        assert_eq!(defs.definition("src", oid, 2).unwrap(), "\"Order Id\"");
        assert_eq!(defs.definition("src", oid, 3), None);
        assert_eq!(defs.definition("src", oid, -1), None);
        assert_eq!(
            defs.definition("src", 16390, 0),
            None,
            "a table is no index"
        );
        assert_eq!(defs.definition("other", oid, 0), None, "another database");
    }

    #[test]
    fn index_rows_fill_every_column_of_pg_class() {
        use datafusion::arrow::datatypes::{Field, Schema};
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("oid", DataType::Int32, false),
            Field::new("relname", DataType::Utf8, false),
            Field::new("relkind", DataType::Utf8, false),
            Field::new("relam", DataType::Int32, false),
            Field::new("reltuples", DataType::Float64, false),
            Field::new("relacl", DataType::Utf8, true),
        ]));
        let batch = ClassWithIndexes::index_rows(&schema, &[key()]).unwrap();
        assert_eq!(batch.num_rows(), 1);
        let text = |c: &str| {
            batch
                .column_by_name(c)
                .unwrap()
                .as_string::<i32>()
                .value(0)
                .to_string()
        };
        assert_eq!(text("relname"), "Items_pkey");
        assert_eq!(text("relkind"), "i");
        assert!(batch.column_by_name("relacl").unwrap().is_null(0));
        assert_eq!(
            batch
                .column_by_name("oid")
                .unwrap()
                .as_primitive::<Int32Type>()
                .value(0),
            key().index_oid()
        );
    }
}
