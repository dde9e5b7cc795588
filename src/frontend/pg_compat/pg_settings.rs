//! `pg_catalog.pg_settings`: the server's settings as clients read them from the catalog
//! (pgjdbc reads `max_index_keys` before `getImportedKeys`, tools read `server_version_num`).
//!
//! # Invariant
//! A setting here has the value a new session starts with (`session::DEFAULTS`), or, for the
//! compile-time limits PostgreSQL reports as read-only settings, PostgreSQL's own value; `SET`
//! in a session changes what `SHOW` and `current_setting` say there, not this table, as in
//! PostgreSQL only for settings a session cannot change.

use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::MemTable;
use datafusion::error::Result;

use crate::frontend::session::session_statement::DEFAULTS;

/// Read-only settings PostgreSQL 16 reports, with its values.
const LIMITS: [(&str, &str); 5] = [
    ("block_size", "8192"),
    ("max_function_args", "100"),
    ("max_index_keys", "32"),
    ("segment_size", "131072"),
    ("wal_block_size", "8192"),
];

/// The table, in the columns of `schema` (the catalog's definition of `pg_settings`).
pub fn table(schema: SchemaRef) -> Result<MemTable> {
    let mut rows: Vec<(&str, &str)> = DEFAULTS.iter().copied().chain(LIMITS).collect();
    rows.sort_unstable();
    let n = rows.len();
    let arrays = schema
        .fields()
        .iter()
        .map(|field| -> ArrayRef {
            match field.name().as_str() {
                "name" => Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                "setting" | "reset_val" | "boot_val" => {
                    Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1)))
                }
                "source" => Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|_| "default"),
                )),
                _ => new_null_array(field.data_type(), n),
            }
        })
        .collect();
    let batch = RecordBatch::try_new(Arc::clone(&schema), arrays)?;
    MemTable::try_new(schema, vec![vec![batch]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::SessionContext;

    #[test]
    fn clients_find_the_limits_and_the_session_defaults() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("setting", DataType::Utf8, true),
            Field::new("sourceline", DataType::Int32, true),
        ]));
        let ctx = SessionContext::new();
        ctx.register_table("pg_settings", Arc::new(table(schema).unwrap()))
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let rows = rt.block_on(async {
            ctx.sql("SELECT setting FROM pg_settings WHERE name IN ('max_index_keys', 'server_version_num') ORDER BY name")
                .await
                .unwrap()
                .collect()
                .await
                .unwrap()
        });
        let settings = rows[0]
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(settings.value(0), "32");
        assert_eq!(settings.value(1), "160006");
    }
}
