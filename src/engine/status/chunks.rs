//! `cdc.chunks`: one row per chunk of each source's running (or last) snapshot — its range,
//! LOW and HIGH watermarks, rows, state and how it was read.

use super::columns::{count, text, Declared, Scan};
use crate::source::snapshot::progress::ChunkStatus;

/// A chunk and the source it belongs to.
pub(super) struct Row {
    source: String,
    chunk: ChunkStatus,
}

fn rows(scan: &Scan<'_>) -> Vec<Row> {
    scan.sources()
        .iter()
        .flat_map(|s| {
            s.progress.report().chunks.into_iter().map(|chunk| Row {
                source: s.name.clone(),
                chunk,
            })
        })
        .collect()
}

pub(super) static TABLE: Declared<Row> = Declared {
    name: "chunks",
    rows,
    columns: &[
        text("source", |r| Some(r.source.clone())),
        text("db", |r| Some(r.chunk.table.db.clone())),
        text("table", |r| Some(r.chunk.table.table.clone())),
        count("chunk", |r| Some(r.chunk.index as u64)),
        text("range", |r| Some(r.chunk.range.clone())),
        text("low", |r| r.chunk.low.as_ref().map(ToString::to_string)),
        text("high", |r| r.chunk.high.as_ref().map(ToString::to_string)),
        count("rows", |r| Some(r.chunk.rows as u64)),
        text("state", |r| {
            Some(format!("{:?}", r.chunk.state).to_lowercase())
        }),
        count("reads", |r| Some(u64::from(r.chunk.reads))),
        text("reader", |r| r.chunk.reader.map(|x| x.as_str().to_string())),
        text("visibility", |r| {
            r.chunk.visibility.map(|v| v.as_str().to_string())
        }),
    ],
};
