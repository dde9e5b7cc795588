//! Where each result column comes from, for its `RowDescription`: the `pg_class` oid of the
//! table and the column's number in it, which drivers use to find a column's table name and
//! nullability (pgjdbc's `ResultSetMetaData.getTableName` and `isNullable`, DBeaver's
//! editable results).
//!
//! A plain column reference keeps its table as its qualifier through DataFusion's planning;
//! a computed or aliased value has none. The origin is carried in the Arrow field's metadata
//! ([`TABLE_OID_KEY`], [`COLUMN_KEY`]) from planning to every `RowDescription` of the
//! statement (`encode::pg_fields`), so a prepared statement's `Describe` and its results agree.
//!
//! # Invariant
//! A column gets an origin only when its qualifier names a table of the session's database
//! that has a column of its name: then the oid is the one `pg_class` lists for that table and
//! the number its `pg_attribute.attnum`. Anything else (computed values, subquery aliases,
//! other databases) has none, sent as 0, as PostgreSQL sends for computed columns.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::DFSchema;
use datafusion::error::Result;

use super::keys::KeySource;

/// Field metadata key of a result column's table oid.
pub const TABLE_OID_KEY: &str = "pg.table_oid";
/// Field metadata key of a result column's number in that table.
pub const COLUMN_KEY: &str = "pg.attnum";

/// `schema` as an Arrow schema whose fields carry their origin where they have one.
pub async fn described(
    schema: &DFSchema,
    keys: &dyn KeySource,
    state: &dyn Session,
) -> Result<SchemaRef> {
    let options = state.config_options();
    let (catalog, default_schema) = (
        options.catalog.default_catalog.clone(),
        options.catalog.default_schema.clone(),
    );
    let mut tables = HashMap::new();
    let mut fields = Vec::with_capacity(schema.fields().len());
    for (qualifier, field) in schema.iter() {
        let table = qualifier.and_then(|q| {
            let same_database = q.catalog().is_none_or(|c| c == catalog);
            same_database.then(|| {
                (
                    q.schema().unwrap_or(&default_schema).to_string(),
                    q.table().to_string(),
                )
            })
        });
        let origin = match table {
            Some(name) => {
                if !tables.contains_key(&name) {
                    let found = keys.table_origin(state, &name.0, &name.1).await?;
                    tables.insert(name.clone(), found);
                }
                tables[&name].as_ref().and_then(|(oid, table)| {
                    let column = table.index_of(field.name()).ok()?;
                    Some((*oid, i16::try_from(column + 1).ok()?))
                })
            }
            None => None,
        };
        fields.push(match origin {
            Some((oid, column)) => {
                let mut metadata = field.metadata().clone();
                metadata.insert(TABLE_OID_KEY.into(), oid.to_string());
                metadata.insert(COLUMN_KEY.into(), column.to_string());
                Arc::new(field.as_ref().clone().with_metadata(metadata))
            }
            None => Arc::clone(field),
        });
    }
    Ok(Arc::new(Schema::new_with_metadata(
        fields,
        schema.as_arrow().metadata().clone(),
    )))
}

/// The origin a field was described with: its table's oid and its number there.
pub fn origin(field: &Field) -> (Option<i32>, Option<i16>) {
    let get = |key: &str| field.metadata().get(key);
    (
        get(TABLE_OID_KEY).and_then(|v| v.parse().ok()),
        get(COLUMN_KEY).and_then(|v| v.parse().ok()),
    )
}
