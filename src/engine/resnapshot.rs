//! Re-snapshots: `ALTER SOURCE ... RESNAPSHOT` (every table) and `RESNAPSHOT TABLE db.t` (one),
//! each run as the start of a new capture task in place of the stopped one.
//!
//! # Invariant
//! The changelog keeps its history and gains only the entries that turn the old state of a
//! table into its newly read state (`state::diff`): a row that is the same in both gets no
//! entry. Every published version holds every table at one binlog position.
//!
//! # Every table
//! A fresh snapshot replaces the published state; the diff entries sit at the new hand-off's
//! end, numbered as the one-table case numbers them (below), so each has its own position. This is the repair for a purged binlog, so nothing of the old stream is needed. When
//! the source's tables or their columns changed (a table stopped by DDL), the old changelogs
//! cannot hold the new rows: the source starts over as if created now, its history included,
//! and its checkpoints start a new layout.
//!
//! # One table
//! The published version holds every table at one position `P` (the stopped task published
//! whole transactions only). Its tables become the states of a capture again (O(1) each, they
//! share the published structures). Table `T` is read on its own with the snapshot machinery
//! (a `SnapshotOnly` capture, as `mysql_snapshot` does), which gives `T`'s rows at exactly one
//! position `H >= P` (its largest HIGH). The capture then resumes the binlog at `P` for every
//! table, the old `T` included, and stops before the first transaction that starts at or after
//! `H`: every table, the old `T` too, is now at `H`, and the changelogs got the binlog's
//! changes in between as usual. Only then is the old `T` swapped for the new one, with the
//! entries between the two (exactly the rows the binlog did not bring, e.g. written with
//! `sql_log_bin=0`) appended to `T`'s changelog at `H`, and one version at `H` is published.
//! Until then queries keep the version at `P`, so no version mixes positions, and the
//! checkpoint loop (which writes published versions) never sees a half-done re-snapshot: a
//! crash before `H` is published resumes from `P` with the old `T`.
//!
//! The diff entries' positions are `(H, event 0, row i)`: after every change of a transaction
//! before `H`, before every change of the transaction at `H` (binlog rows have an event index
//! of 1 or more), and numbered past any entry of `T`'s changelog already at `(H, event 0)`
//! (snapshot rows, or an earlier re-snapshot at the same position), so each is unique.
//!
//! When the server's schema of `T` differs from the one its DDL history gave it (the usual
//! reason to re-read one table: a DDL the capture could not follow stopped it), `T` is read
//! under the server's schema, its changelog takes that schema from `H` on, the change is listed
//! in the schema history at `H`, and the old rows are compared with the new ones column by
//! name. During the catch-up `T`'s rows are then decoded but not applied (`Capture::park`):
//! the re-read brings them up to `H`, and the diff holds them.
//!
//! A table renamed into the source's patterns from outside (`TableStop::read_again`) is read
//! the same way, started by the capture itself (`Stop::ReadAgain`) right after it publishes
//! the rename: its state is empty (or a swapped-out table's), its binlog rows up to `H` are
//! parked like a changed table's, and an empty state's diff entries are `r` reads. When the
//! table is gone from the server by then, it stays stopped and the others go on.
//!
//! The other tables' binlog at `P` must still be on the server; if it was purged only the
//! whole-source re-snapshot can repair the source, and the statement says so before it stops
//! anything (`RunningSource::resnapshot_table`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::stop::Stop;
use super::task::{
    append, fresh, handoff_end, resume_at, resume_published, Mode, Started, Task, TxNumbers,
};
use crate::capture::version::SourceVersion;
use crate::capture::{Capture, CaptureOptions, SchemaChange, SnapshotMode, TableChange};
use crate::change::position::{BinlogCoord, ChangePosition};
use crate::change::schema::{TableId, TableSchema};
use crate::change::Op;
use crate::locks::Locked;
use crate::source::error::SourceError;
use crate::source::snapshot::incremental::{plan_snapshot, Progress};
use crate::state::changelog::Changelog;
use crate::state::current::CurrentTable;
use crate::state::diff::diff;
use crate::state::merge::{ChangelogEvent, TableState};

/// The schemas of the tables the source captures now (its status).
fn previous_schemas(task: &Task) -> Vec<Arc<TableSchema>> {
    task.status.locked().tables.clone()
}

/// Snapshots every table again and appends only the differences to the published state.
pub(super) async fn resnapshot(task: &Task, previous: &SourceVersion) -> Result<Started, Stop> {
    let old = previous_schemas(task);
    let (info, now) = Capture::matching_tables(&task.connect, &task.options.tables).await?;
    let same = old.len() == now.len()
        && old
            .iter()
            .zip(&now)
            .all(|(o, n)| o.id == n.id && o.columns == n.columns);
    if !same {
        // The old changelogs cannot hold other tables or columns (schema evolution is not
        // followed yet): the source starts over, history included, as if created now.
        let ids = |t: &[Arc<TableSchema>]| t.iter().map(|t| t.id.to_string()).collect::<Vec<_>>();
        tracing::warn!(before = ?ids(&old), now = ?ids(&now), "tables or columns changed: the re-snapshot starts the source over");
        if let Some(c) = &task.checkpointer {
            c.reset().await;
        }
        return fresh(task, Mode::Resnapshot).await;
    }
    let mut options = task.options.clone();
    options.mode = SnapshotMode::Initial;
    // The schema versions of the changelogs' entries go on.
    let now = now
        .iter()
        .zip(&old)
        .map(|(n, o)| Arc::new(n.as_ref().clone().with_version(o.version)))
        .collect();
    let (capture, _) = Capture::start_resolved(
        task.connect.clone(),
        options,
        info,
        now,
        Arc::clone(&task.progress),
    )
    .await?;
    capture.check_schemas_unchanged()?;
    let old_ids: Vec<TableId> = old.iter().map(|t| t.id.clone()).collect();
    let ids: Vec<TableId> = capture.tables().iter().map(|t| t.id.clone()).collect();
    if ids != old_ids {
        return Err(SourceError::Raced {
            context: "re-snapshot".into(),
            detail: format!("its tables were {old_ids:?} before and are {ids:?} now"),
        }
        .into());
    }
    let end = handoff_end(&task.progress)
        .ok_or_else(|| SourceError::Internal("the re-snapshot ended without a position".into()))?;
    let mut changelogs = previous.changelogs.clone();
    let mut numbers = TxNumbers::after(&changelogs);
    let mut changes = Vec::new();
    for (t, table) in capture.tables().iter().enumerate() {
        let fail = |e: arrow::error::ArrowError| {
            SourceError::arrow(format!("comparing the new snapshot of {}", table.id), e)
        };
        let old = previous.tables[t].scan_all().map_err(fail)?;
        let new = capture.state(t).to_batch().map_err(fail)?;
        let mut events = diff(capture.state(t).codec(), &old, &[new], &end).map_err(fail)?;
        number_after(&mut events, &changelogs[t], &end);
        tracing::info!(table = %table.id, changes = events.len(), "re-snapshot compared");
        changes.extend(
            events
                .into_iter()
                .map(|event| TableChange { table: t, event }),
        );
    }
    append(&capture, &mut changelogs, &changes, None, &mut numbers)?;
    if let Some(c) = &task.checkpointer {
        c.set_consistent_from(end.clone()).await;
    }
    task.status.locked().error = None;
    Ok(Started {
        capture,
        changelogs,
        consistent_from: Some(end),
        numbers,
        stopped: BTreeMap::new(),
        schema_history: previous.schema_history.to_vec(),
    })
}

/// Reads table `t` again and repairs its state in place; see the module docs.
pub(super) async fn resnapshot_table(
    task: &Task,
    previous: &SourceVersion,
    t: usize,
) -> Result<Started, Stop> {
    let precondition = |m: String| Stop::from(SourceError::Precondition(m));
    let from = previous.position.clone().ok_or_else(|| {
        precondition("the source has published no state yet; RESNAPSHOT TABLE needs one".into())
    })?;
    let consistent_from = task.status.locked().consistent_from.clone();
    // Every table resumes at `from` with its schema there (a followed DDL changed them);
    // table `t` is read under the schema the server gives it now, which may be newer.
    let old_schemas: Vec<Arc<TableSchema>> = previous
        .tables
        .iter()
        .map(|snap| Arc::clone(snap.schema()))
        .collect();
    let old = Arc::clone(
        old_schemas
            .get(t)
            .ok_or_else(|| precondition(format!("the source has no table number {t}")))?,
    );
    // A table renamed in from outside the patterns (`TableStop::read_again`): its rows were
    // never read, so all of them are `r` entries, and its binlog rows wait for the read.
    let read_again = previous.stopped.get(&t).is_some_and(|s| s.read_again);
    let resolved = Capture::resolve_tables(&task.connect, std::slice::from_ref(&old.id)).await;
    let (info, now) = match resolved {
        Err(SourceError::NoSuchTable(_)) if read_again => {
            // Gone again before it could be read: it stays stopped, and the others go on.
            let mut started = resume_published(task, previous).await?;
            if let Some(stop) = started.stopped.get_mut(&t) {
                stop.read_again = false;
                stop.reason
                    .push_str("; it was gone from the server before it could be read");
            }
            tracing::warn!(table = %old.id, "a table to read again is gone from the server");
            return Ok(started);
        }
        other => other?,
    };
    let now = now.into_iter().next().ok_or_else(|| {
        Stop::from(SourceError::Internal(format!(
            "{} was not resolved",
            old.id
        )))
    })?;
    let changed = now.columns != old.columns || now.primary_key != old.primary_key;
    let version = old.version + u32::from(changed);
    let table = Arc::new(now.as_ref().clone().with_version(version));
    // Fail before reading anything when the other tables cannot go on from `from` (on
    // another server they go on by GTID, checked when the capture resumes).
    if from.history() == task.connect.history {
        Capture::check_binlog(&task.connect, &from).await?;
    }
    tracing::info!(table = %table.id, from = %from, "re-snapshot of one table started");
    // Its own progress: the source's keeps describing the source, which is still streaming.
    let read_progress = Arc::new(Progress::default());
    let run = plan_snapshot(
        &task.connect,
        &info,
        std::slice::from_ref(&table),
        &task.options.snapshot,
        Arc::clone(&read_progress),
    )
    .await?;
    let mut read_options = CaptureOptions::new(table.id.to_string(), SnapshotMode::SnapshotOnly);
    read_options.server_id = task.options.server_id;
    read_options.snapshot = task.options.snapshot.clone();
    let (read, _) = Capture::start_planned(
        task.connect.clone(),
        read_options,
        info.clone(),
        vec![Arc::clone(&table)],
        Some(run),
        Arc::clone(&read_progress),
    )
    .await?;
    read.check_schemas_unchanged()?;
    let at = read_progress.report().position.ok_or_else(|| {
        Stop::from(SourceError::Internal(format!(
            "the re-read of {} ended without a position",
            table.id
        )))
    })?;
    let new_state = read.into_states().pop().ok_or_else(|| {
        Stop::from(SourceError::Internal(format!(
            "the re-read of {} returned no table",
            table.id
        )))
    })?;
    let states = previous
        .tables
        .iter()
        .map(|snap| TableState::from_current(CurrentTable::from_snapshot(snap)))
        .collect();
    let mut capture = Capture::resume(
        task.connect.clone(),
        &task.options,
        info,
        old_schemas,
        states,
        resume_at(task, from, previous.gtids.as_deref().cloned()),
        Arc::clone(&task.progress),
    )
    .await?;
    // The other stopped tables stay stopped: the stream must not apply their rows. `t` gets
    // every binlog change up to `at` as usual; under a new schema it cannot (its old state
    // has the old columns), so until the swap its rows are decoded but not applied (the
    // transaction read past `at` keeps them) and the new read brings them up to `at`.
    let mut stopped = (*previous.stopped).clone();
    stopped.remove(&t);
    for stop in stopped.values() {
        capture.restore_stop(stop);
    }
    if changed || read_again {
        capture.park(t);
    }
    let _ = capture.take_stops();
    let mut changelogs = previous.changelogs.clone();
    let mut numbers = TxNumbers::after(&changelogs);
    let caught_up = capture.catch_up_to(&at).await?;
    append(&capture, &mut changelogs, &caught_up, None, &mut numbers)?;
    let mut schema_history = previous.schema_history.to_vec();
    if changed {
        // The diff deletes rows of the old schema, which lack the columns added since: its
        // entries are written with every column nullable.
        let nullable: Vec<arrow::datatypes::Field> = table
            .arrow
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        changelogs[t].evolve(&arrow::datatypes::Schema::new(nullable));
        tracing::info!(table = %table.id, at = %at, version, "re-read under a new schema");
        schema_history.push(SchemaChange {
            table: t,
            position: at.clone(),
            commit_ts_micros: 0,
            statement: format!("ALTER SOURCE ... RESNAPSHOT TABLE {}", table.id),
            before: Arc::clone(&old),
            after: Arc::clone(&table),
        });
    }
    let old_state = capture.replace_table(t, Arc::clone(&table), new_state);
    let fail = |e: arrow::error::ArrowError| {
        Stop::from(SourceError::arrow(
            format!("comparing the new snapshot of {}", table.id),
            e,
        ))
    };
    let old_rows = as_schema(&old_state.to_batch().map_err(fail)?, &table.arrow).map_err(fail)?;
    let new = capture.state(t).to_batch().map_err(fail)?;
    let mut events = diff(capture.state(t).codec(), &[old_rows], &[new], &at).map_err(fail)?;
    if read_again && old_state.is_empty() {
        // Rows read for the first time, as a snapshot reads them.
        for event in &mut events {
            event.op = Op::Read;
        }
    }
    number_after(&mut events, &changelogs[t], &at);
    tracing::info!(table = %table.id, at = %at, changes = events.len(), "re-snapshot of one table compared");
    let changes: Vec<TableChange> = events
        .into_iter()
        .map(|event| TableChange { table: t, event })
        .collect();
    append(&capture, &mut changelogs, &changes, None, &mut numbers)?;
    // Every table now reflects exactly the transactions before `at`.
    task.progress.set_position(at);
    task.status.locked().error = None;
    Ok(Started {
        capture,
        changelogs,
        consistent_from,
        numbers,
        stopped,
        schema_history,
    })
}

/// Gives `events` (all at `(at, event 0)`) distinct row indexes, after any entry `log` already
/// holds at `(at, event 0)`.
fn number_after(events: &mut [ChangelogEvent], log: &Changelog, at: &BinlogCoord) {
    let first = last_position(log)
        .filter(|p| p.tx == *at && p.event_index == 0)
        .map_or(0, |p| p.row_index + 1);
    for (i, event) in events.iter_mut().enumerate() {
        event.position.row_index = first + i as u32;
    }
}

/// The position of the last entry of `log`: entries are appended in position order.
fn last_position(log: &Changelog) -> Option<ChangePosition> {
    log.last_position()?.parse().ok()
}

/// `rows` (of a table's old schema) in `schema`, its new one, column by name: a column the old
/// rows lack is NULL, and a value the new type cannot hold is NULL too. Only the diff between
/// the old and the new state reads it: such a row differs and gets its entry.
fn as_schema(
    rows: &arrow::array::RecordBatch,
    schema: &arrow::datatypes::SchemaRef,
) -> Result<arrow::array::RecordBatch, arrow::error::ArrowError> {
    let n = rows.num_rows();
    let columns = schema
        .fields()
        .iter()
        .map(|field| match rows.schema().index_of(field.name()) {
            Ok(i) => arrow::compute::cast(rows.column(i), field.data_type()),
            Err(_) => Ok(arrow::array::new_null_array(field.data_type(), n)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The new schema may make a column NOT NULL that the old rows leave empty.
    let nullable: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    arrow::array::RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(nullable)), columns)
}
