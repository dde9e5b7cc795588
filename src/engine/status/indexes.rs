//! `cdc.indexes`: one row per secondary index of each captured table, as the query's version
//! holds it: the columns it is on (mirrored from the source's own index), and how much of it
//! is built. A base batch's sorted order is built on the first lookup that needs it, so an
//! index no query used holds nothing.

use std::sync::Arc;

use super::columns::{count, flag, text, Declared, Scan};
use crate::change::schema::{IndexSpec, TableId};
use crate::engine::source::RunningSource;
use crate::state::lookup::IndexUse;

/// What a row of `cdc.indexes` is read from.
pub(super) struct Row {
    source: Arc<RunningSource>,
    id: TableId,
    index: usize,
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
            for (i, spec) in schema.indexes.iter().enumerate() {
                rows.push(Row {
                    source: Arc::clone(&source),
                    id: schema.id.clone(),
                    index: i,
                    columns: spec
                        .columns
                        .iter()
                        .map(|&c| schema.columns[c].name.clone())
                        .collect(),
                    spec: spec.clone(),
                    used: snap.index_use(i),
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
        count("position", |r| Some(r.index as u64)),
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
