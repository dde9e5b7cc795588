//! `cdc.reconciliations`: the reports of the latest `reconcile` runs, oldest first.

use super::columns::{count, number, text, time, Declared, Scan};
use crate::provider::reconcile::ReconcileReport;

fn rows(scan: &Scan<'_>) -> Vec<ReconcileReport> {
    scan.reconciliations()
}

pub(super) static TABLE: Declared<ReconcileReport> = Declared {
    name: "reconciliations",
    rows,
    columns: &[
        text("source", |r| Some(r.source.clone())),
        text("table", |r| Some(r.table.clone())),
        text("against", |r| Some(r.against.clone())),
        text("position", |r| Some(r.position.clone())),
        count("chunks", |r| Some(r.chunks)),
        count("chunks_read", |r| Some(r.chunks_read)),
        count("rows_compared", |r| Some(r.rows)),
        count("rows_fetched", |r| Some(r.rows_fetched)),
        count("bytes_moved", |r| Some(r.bytes_moved)),
        count("differences", |r| Some(r.differences)),
        time("finished_at", |r| Some(r.finished_micros)),
        number("seconds", |r| Some(r.seconds)),
    ],
};
