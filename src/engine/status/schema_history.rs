//! `cdc.schema_history`: every schema change the capture followed, as of the version the
//! query reads, with the columns before and after it.

use super::columns::{count, text, time, Declared, Scan};
use crate::capture::{describe_columns, SchemaChange};
use crate::change::position::ChangePosition;

/// A schema change and the source that followed it.
pub(super) struct Row {
    source: String,
    change: SchemaChange,
}

fn rows(scan: &Scan<'_>) -> Vec<Row> {
    let mut rows = Vec::new();
    for s in scan.sources() {
        let version = scan.version(&s);
        rows.extend(version.schema_history.iter().map(|change| Row {
            source: s.name.clone(),
            change: change.clone(),
        }));
    }
    rows
}

pub(super) static TABLE: Declared<Row> = Declared {
    name: "schema_history",
    rows,
    columns: &[
        text("source", |r| Some(r.source.clone())),
        text("db", |r| Some(r.change.after.id.db.clone())),
        text("table", |r| Some(r.change.after.id.table.clone())),
        // In `_position`'s sortable form: before every entry of its transaction.
        text("position", |r| {
            let sortable = ChangePosition {
                tx: r.change.position.clone(),
                event_index: 0,
                row_index: 0,
                sub: 0,
            };
            Some(sortable.to_string())
        }),
        time("committed_at", |r| {
            (r.change.commit_ts_micros > 0).then_some(r.change.commit_ts_micros)
        }),
        count("schema_version", |r| Some(r.change.after.version as u64)),
        text("statement", |r| Some(r.change.statement.clone())),
        text("columns_before", |r| {
            Some(describe_columns(&r.change.before))
        }),
        text("columns_after", |r| Some(describe_columns(&r.change.after))),
    ],
};
