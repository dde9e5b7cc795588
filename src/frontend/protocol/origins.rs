//! Where each result column comes from, for its `RowDescription`: the `pg_class` oid of the
//! table and the column's number in it, which drivers use to find a column's table name and
//! nullability (pgjdbc's `ResultSetMetaData.getTableName` and `isNullable`, DBeaver's
//! editable results).
//!
//! A result column's origin is found by following it down the logical plan to the table scan
//! it is read from: through projections (a column renamed with `AS` keeps its origin, as in
//! PostgreSQL), table aliases, filters, sorts, limits, `DISTINCT`, window functions' inputs,
//! joins and grouping keys. A
//! computed value (an expression, an aggregate) has none. The origin is carried in the Arrow
//! field's metadata
//! ([`TABLE_OID_KEY`], [`COLUMN_KEY`]) from planning to every `RowDescription` of the
//! statement (`encode::pg_fields`), so a prepared statement's `Describe` and its results agree.
//!
//! # Invariant
//! A column gets an origin only when it is a scanned column, unchanged, of a table of the
//! session's database: then the oid is the one `pg_class` lists for that table and the number
//! its `pg_attribute.attnum`. Anything else (computed values, other databases, unions) has
//! none, sent as 0, as PostgreSQL sends for computed columns.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, TableReference};
use datafusion::error::Result;
use datafusion::logical_expr::{Distinct, Expr, JoinType, LogicalPlan};

use crate::frontend::pg_compat::keys::KeySource;

/// Field metadata key of a result column's table oid.
pub const TABLE_OID_KEY: &str = "pg.table_oid";
/// Field metadata key of a result column's number in that table.
pub const COLUMN_KEY: &str = "pg.attnum";

/// For each result column of `plan`, the table and column it is read from unchanged, if any.
pub fn sources(plan: &LogicalPlan) -> Vec<Option<(TableReference, String)>> {
    (0..plan.schema().fields().len())
        .map(|i| scanned(plan, i))
        .collect()
}

/// The table and column name that result column `index` of `plan` is read from unchanged; see
/// the module docs.
fn scanned(plan: &LogicalPlan, index: usize) -> Option<(TableReference, String)> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let field = scan.projected_schema.fields().get(index)?;
            Some((scan.table_name.clone(), field.name().clone()))
        }
        LogicalPlan::Projection(p) => {
            let Expr::Column(column) = p.expr.get(index)?.clone().unalias_nested().data else {
                return None;
            };
            let inner = p.input.schema().index_of_column(&column).ok()?;
            scanned(&p.input, inner)
        }
        LogicalPlan::Aggregate(a) => {
            let Expr::Column(column) = a.group_expr.get(index)?.clone().unalias_nested().data
            else {
                return None;
            };
            let inner = a.input.schema().index_of_column(&column).ok()?;
            scanned(&a.input, inner)
        }
        // A window's input columns come first, its window functions after them.
        LogicalPlan::Window(w) => {
            let inputs = w.input.schema().fields().len();
            (index < inputs).then(|| scanned(&w.input, index)).flatten()
        }
        LogicalPlan::Join(j) => {
            let left = j.left.schema().fields().len();
            match j.join_type {
                JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full => {
                    if index < left {
                        scanned(&j.left, index)
                    } else {
                        scanned(&j.right, index - left)
                    }
                }
                JoinType::LeftSemi | JoinType::LeftAnti => scanned(&j.left, index),
                JoinType::RightSemi | JoinType::RightAnti => scanned(&j.right, index),
                JoinType::LeftMark | JoinType::RightMark => None,
            }
        }
        LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::Repartition(_)
        | LogicalPlan::Distinct(Distinct::All(_)) => {
            let inputs = plan.inputs();
            scanned(inputs.first()?, index)
        }
        _ => None,
    }
}

/// `schema`, a plan's result columns whose [`sources`] are `sources`, as an Arrow schema whose
/// fields carry their origin where they have one.
pub async fn described(
    schema: &DFSchema,
    sources: &[Option<(TableReference, String)>],
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
    for (field, source) in schema.fields().iter().zip(sources) {
        let table = source.as_ref().and_then(|(q, _)| {
            let same_database = q.catalog().is_none_or(|c| c == catalog);
            same_database.then(|| {
                (
                    q.schema().unwrap_or(&default_schema).to_string(),
                    q.table().to_string(),
                )
            })
        });
        let origin = match (table, source) {
            (Some(name), Some((_, column))) => {
                if !tables.contains_key(&name) {
                    let found = keys.table_origin(state, &name.0, &name.1).await?;
                    tables.insert(name.clone(), found);
                }
                tables[&name].as_ref().and_then(|(oid, table)| {
                    let column = table.index_of(column).ok()?;
                    Some((*oid, i16::try_from(column + 1).ok()?))
                })
            }
            _ => None,
        };
        fields.push(match origin {
            Some((oid, column)) => Arc::new(with_origin(field, oid, column)),
            None => Arc::clone(field),
        });
    }
    Ok(Arc::new(Schema::new_with_metadata(
        fields,
        schema.as_arrow().metadata().clone(),
    )))
}

/// `field` carrying the origin `(oid, column)`.
fn with_origin(field: &Field, oid: i32, column: i16) -> Field {
    let mut metadata = field.metadata().clone();
    metadata.insert(TABLE_OID_KEY.into(), oid.to_string());
    metadata.insert(COLUMN_KEY.into(), column.to_string());
    field.clone().with_metadata(metadata)
}

/// `rows` of table `oid` whose field `i` is the table's column `columns[i]` (0-based), with
/// each field carrying that origin: what a planned statement's description would say.
pub fn read_from(rows: RecordBatch, oid: i32, columns: &[usize]) -> Result<RecordBatch> {
    let schema = rows.schema();
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(columns)
        .map(|(field, column)| match i16::try_from(column + 1) {
            Ok(column) => with_origin(field, oid, column),
            Err(_) => field.as_ref().clone(),
        })
        .collect();
    let schema = Schema::new_with_metadata(fields, schema.metadata().clone());
    Ok(rows.with_schema(Arc::new(schema))?)
}

/// The origin a field was described with: its table's oid and its number there.
pub fn origin(field: &Field) -> (Option<i32>, Option<i16>) {
    let get = |key: &str| field.metadata().get(key);
    (
        get(TABLE_OID_KEY).and_then(|v| v.parse().ok()),
        get(COLUMN_KEY).and_then(|v| v.parse().ok()),
    )
}
