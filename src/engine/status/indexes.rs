//! `cdc.indexes`: one row per index of each captured table, as the query's version holds it:
//! `PRIMARY` (the primary key's columns, which key lookups find through the key index and
//! ranges through their sorted order), then each secondary index, with the columns it is on
//! (mirrored from the source's own index) and how much of it is built. A base batch's sorted
//! order is built on the first lookup that needs it, so an index no query used holds nothing.

use std::sync::Arc;

use super::columns::{count, flag, text, Declared, Scan};
use crate::change::schema::{IndexSpec, TableId};
use crate::engine::source::RunningSource;
use crate::state::lookup::{IndexUse, Through};

/// What a row of `cdc.indexes` is read from.
pub(super) struct Row {
    source: Arc<RunningSource>,
    id: TableId,
    /// Its place among the table's secondary indexes; `None` for `PRIMARY`.
    index: Option<usize>,
    spec: IndexSpec,
    columns: Vec<String>,
    used: Option<IndexUse>,
}

fn rows(scan: &Scan<'_>) -> Vec<Row> {
    let mut rows = Vec::new();
    for source in scan.sources() {
        let version = scan.version(&source);
        for snap in &version.tables {
            let schema = snap.schema();
            let primary = (!schema.primary_key.is_empty())
                .then(|| (Through::Primary, IndexSpec::primary(&schema.primary_key)));
            let secondary = schema
                .indexes
                .iter()
                .enumerate()
                .map(|(i, spec)| (Through::Secondary(i), spec.clone()));
            for (through, spec) in primary.into_iter().chain(secondary) {
                rows.push(Row {
                    source: Arc::clone(&source),
                    id: schema.id.clone(),
                    index: match through {
                        Through::Primary => None,
                        Through::Secondary(i) => Some(i),
                    },
                    columns: spec
                        .columns
                        .iter()
                        .map(|&c| schema.columns[c].name.clone())
                        .collect(),
                    spec,
                    used: snap.index_use(through),
                });
            }
        }
    }
    rows
}

pub(super) static TABLE: Declared<Row> = Declared {
    name: "indexes",
    rows,
    columns: &[
        text("source", |r| Some(r.source.name.clone())),
        text("db", |r| Some(r.id.db.clone())),
        text("table", |r| Some(r.id.table.clone())),
        text("index", |r| Some(r.spec.name.clone())),
        count("position", |r| r.index.map(|i| i as u64)),
        text("columns", |r| Some(r.columns.join(", "))),
        flag("unique", |r| Some(r.spec.unique)),
        count("batches_sorted", |r| {
            r.used.map(|u| u.batches_sorted as u64)
        }),
        count("batches", |r| r.used.map(|u| u.batches as u64)),
        count("overlay_entries", |r| {
            r.used.map(|u| u.overlay_entries as u64)
        }),
        count("memory_bytes", |r| r.used.map(|u| u.bytes as u64)),
    ],
};
