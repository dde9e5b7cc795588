//! The background tasks of one source: the capture task that publishes versions, and the
//! checkpoint loop of a durable source.
//!
//! # How a capture task starts
//! * *Fresh*: snapshot and hand-off ([`Capture::start_with_progress`]); the hand-off's
//!   changelog becomes the first segments. A durable source journals the snapshot's chunks and,
//!   after a crash during the snapshot, reads only the chunks not done yet.
//! * *Recovered*: a durable source with a checkpoint loads it (`durable::recover`), publishes
//!   it at once (so a source whose binlog was purged still answers queries with its last
//!   state) and resumes the binlog at the checkpoint's position ([`Capture::resume`]).
//! * *Re-snapshot* (`ALTER SOURCE ... RESNAPSHOT [TABLE db.t]`): see `engine::resnapshot`. A
//!   source that has published nothing (its checkpoint is damaged) starts over as if new.
//!
//! Then every source transaction is appended to the changelogs and published as a new version.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use arrow::array::AsArray;
use arrow::datatypes::UInt64Type;
use futures::FutureExt;
use tokio::sync::watch;

use super::partial::PartialView;
use super::resnapshot::{resnapshot, resnapshot_table};
use super::retry::{self, MemoryJournal};
use super::source::SourceStatus;
use crate::capture::{Capture, CaptureOptions, TableChange, TableStop};
use crate::durable::progress::{self, ProgressJournal};
use crate::durable::{recover, Checkpointer, DurableError};
use crate::provider::health::{Fault, Health, SharedHealth, SQLSTATE_INTERNAL};
use crate::provider::{Published, SourceVersion};
use crate::source::connect::ConnectOptions;
use crate::source::error::{SourceError, SourceResult};
use crate::source::position::BinlogCoord;
use crate::source::schema::TableId;
use crate::source::snapshot::incremental::Progress;
use crate::source::snapshot::journal::SnapshotJournal;
use crate::state::changelog::{changelog_batch, Changelog};
use crate::state::current::CurrentTable;
use crate::state::merge::TableState;

/// Why a capture task stopped.
#[derive(Debug, thiserror::Error)]
pub(super) enum Stop {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    State(#[from] DurableError),
}

/// How a capture task begins; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Resume from the newest checkpoint if there is one, else snapshot.
    Start,
    Resnapshot,
    /// Re-read the table at this index of the source's tables; see `engine::resnapshot`.
    ResnapshotTable(usize),
    /// Go on from the published version after a transient failure (`engine::retry`).
    Resume,
}

/// What a capture task shares with its source; cloned for each task the source runs.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub connect: ConnectOptions,
    pub options: CaptureOptions,
    pub published: Published,
    pub progress: Arc<Progress>,
    pub status: Arc<Mutex<SourceStatus>>,
    pub ready: Arc<watch::Sender<bool>>,
    pub versions: Arc<watch::Sender<u64>>,
    pub checkpointer: Option<Arc<Checkpointer>>,
    pub health: SharedHealth,
    /// The snapshot's progress of a source without a state store, kept across retries.
    pub journal: Arc<MemoryJournal>,
}

pub(crate) async fn run(task: Task, mode: Mode) {
    let mut mode = mode;
    let mut attempt = 0;
    let fault = loop {
        let published_before = *task.versions.borrow();
        let chunks_before = task.progress.report().chunks_done;
        // Anything that escapes the capture, a panic included, becomes the source's failed
        // state: the source stops, its tables refuse queries (see `provider::health`), the
        // others go on. A transient failure is retried instead (`engine::retry`).
        let outcome = AssertUnwindSafe(capture_loop(&task, mode))
            .catch_unwind()
            .await;
        let stop = match outcome {
            Ok(Ok(())) => break None,
            Ok(Err(stop)) => stop,
            Err(panic) => break Some(panicked("capture", panic.as_ref())),
        };
        if !retry::is_transient(&stop) {
            break Some(stop.fault());
        }
        // The backoff grows only while attempts get nowhere.
        let progressed = *task.versions.borrow() != published_before
            || task.progress.report().chunks_done > chunks_before;
        attempt = if progressed { 1 } else { attempt + 1 };
        let wait = retry::backoff(attempt);
        let fault = stop.fault();
        tracing::warn!(error = %fault.describe(), attempt, ?wait, "source interrupted; retrying");
        {
            let mut s = task
                .status
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            s.retries += 1;
            s.retrying = true;
            s.last_error = Some(fault);
        }
        tokio::time::sleep(wait).await;
        // Once this task has published, the source goes on from its published version;
        // before that, the same start runs again (keeping the snapshot chunks done).
        if *task.versions.borrow() != published_before {
            mode = Mode::Resume;
        }
    };
    task.status
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .retrying = false;
    if let Some(fault) = fault {
        let fault = Fault {
            position: fault.position.or_else(|| task.progress.report().position),
            table: fault.table.or_else(|| task.progress.working_on()),
            ..fault
        };
        fail(&task.status, &task.health, fault);
    }
    let _ = task.ready.send(true);
}

/// The fault of a caught panic in one of a source's tasks.
pub(super) fn panicked(what: &str, payload: &(dyn std::any::Any + Send)) -> Fault {
    let message = crate::failpoint::panic_message(payload);
    Fault::new(
        SQLSTATE_INTERNAL,
        format!("the {what} task failed unexpectedly ({message}); capture stopped"),
    )
}

/// Records that the source stopped: its status and its health (which the scans check).
pub(super) fn fail(status: &Mutex<SourceStatus>, health: &Health, fault: Fault) {
    tracing::error!(error = %fault.describe(), sqlstate = fault.sqlstate, "source stopped");
    status
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .error = Some(fault.describe());
    health.fail_source(fault);
}

impl Stop {
    /// The fault a stopped capture leaves, with the SQLSTATE its tables answer with.
    fn fault(&self) -> Fault {
        let sqlstate = match self {
            Stop::Source(e) => e.sqlstate(),
            Stop::State(e) => e.sqlstate(),
        };
        Fault::new(sqlstate, self.to_string())
    }
}

/// Writes a checkpoint of the latest published version every interval (and when woken). A
/// panic while checkpointing fails the source: its state could no longer be made durable. A
/// transient store failure is tried again after the capped, jittered backoff of
/// `engine::retry`, the source showing `retrying` meanwhile; capture goes on, and the next
/// checkpoint that succeeds holds everything published since the last one (the changelog
/// segments not yet in files are kept until then). Any other failure is shown in the status
/// and tried again at the next interval.
pub(crate) async fn checkpoint_loop(
    name: String,
    checkpointer: Arc<Checkpointer>,
    published: Published,
    status: Arc<Mutex<SourceStatus>>,
    health: SharedHealth,
) {
    let mut failures = 0u32;
    loop {
        if failures == 0 {
            tokio::select! {
                _ = tokio::time::sleep(checkpointer.options.checkpoint_interval) => {}
                _ = checkpointer.wake.notified() => {}
            }
        } else {
            tokio::time::sleep(retry::backoff(failures)).await;
        }
        let version = published.load_full();
        let result = AssertUnwindSafe(async {
            crate::failpoint::hit_in("checkpoint", &name);
            checkpointer.checkpoint(&version).await
        })
        .catch_unwind()
        .await;
        let result = match result {
            Ok(result) => result,
            Err(panic) => {
                let fault =
                    panicked("checkpoint", panic.as_ref()).at_position(version.position.clone());
                fail(&status, &health, fault);
                return;
            }
        };
        let mut s = status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match result {
            Ok(done) => {
                if let Some(position) = done {
                    s.durable_position = Some(position);
                }
                s.checkpoint_error = None;
                s.checkpoint_retrying = false;
                failures = 0;
            }
            Err(e) if e.is_transient() => {
                failures += 1;
                tracing::warn!(error = %e, attempt = failures, "checkpoint failed; retrying");
                s.checkpoint_error = Some(e.to_string());
                s.checkpoint_retrying = true;
                s.retries += 1;
                s.last_error = Some(Fault::new(
                    e.sqlstate(),
                    format!("writing a checkpoint: {e}"),
                ));
            }
            Err(e) => {
                tracing::warn!(error = %e, "checkpoint failed; retrying at the next interval");
                s.checkpoint_error = Some(e.to_string());
                s.checkpoint_retrying = false;
                failures = 0;
            }
        }
    }
}

/// Per-table transaction numbering for `_tx`: snapshot reads are 0, every binlog transaction
/// gets the next number in order.
#[derive(Debug, Default)]
pub(super) struct TxNumbers {
    next: u64,
    last: Option<BinlogCoord>,
}

impl TxNumbers {
    fn number(&mut self, start: &BinlogCoord, snapshot: bool) -> u64 {
        if snapshot {
            return 0;
        }
        if self.last.as_ref() != Some(start) {
            self.next += 1;
            self.last = Some(start.clone());
        }
        self.next
    }

    /// Numbering that continues after the `_tx` values already in `changelogs`.
    pub(super) fn after(changelogs: &[Changelog]) -> Self {
        let next = changelogs
            .iter()
            .flat_map(|l| l.segments())
            .flat_map(|s| {
                let tx = s.batch.column(3).as_primitive::<UInt64Type>();
                tx.iter().flatten().max()
            })
            .max()
            .unwrap_or(0);
        Self { next, last: None }
    }
}

/// A started capture with its changelogs and the end of its hand-off.
pub(super) struct Started {
    pub capture: Capture,
    pub changelogs: Vec<Changelog>,
    /// `None` for a stream-only source started from a GTID set (no file position yet).
    pub consistent_from: Option<BinlogCoord>,
    pub numbers: TxNumbers,
    /// Tables already stopped when the capture starts (kept from a checkpoint or from the
    /// version a re-snapshot starts from); the capture skips their rows.
    pub stopped: BTreeMap<usize, TableStop>,
}

async fn capture_loop(task: &Task, mode: Mode) -> Result<(), Stop> {
    let Task {
        published,
        progress,
        status,
        ready,
        versions,
        checkpointer,
        ..
    } = task;
    let previous = published.load_full();
    let started = match mode {
        Mode::Resnapshot if previous.position.is_some() => resnapshot(task, &previous).await?,
        // Nothing to compare with (the checkpoint could not be loaded): start over.
        Mode::Resnapshot => fresh(task, mode).await?,
        Mode::ResnapshotTable(t) => resnapshot_table(task, &previous, t).await?,
        Mode::Resume if previous.position.is_some() && previous.consistent => {
            resume_published(task, &previous).await?
        }
        Mode::Resume => fresh(task, Mode::Start).await?,
        Mode::Start => match checkpointer {
            Some(c) => match c.newest().await? {
                Some(manifest) => recover(task, c, manifest).await?,
                None => fresh(task, mode).await?,
            },
            None => fresh(task, mode).await?,
        },
    };
    let Started {
        mut capture,
        mut changelogs,
        consistent_from,
        mut numbers,
        mut stopped,
    } = started;
    for stop in stopped.values() {
        capture.stop_table(stop.table, stop.reason.clone(), stop.position.clone());
    }
    for stop in capture.take_stops() {
        stopped.entry(stop.table).or_insert(stop);
    }
    let mut published_stops = Arc::new(stopped.clone());
    {
        let mut s = status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.tables = capture.tables().to_vec();
        s.server_version = capture.server().version.clone();
        s.flavor = format!("{:?}", capture.server().flavor);
        s.consistent_from = consistent_from.clone();
    }
    let position = progress.report().position;
    let mut tables = Vec::with_capacity(capture.tables().len());
    for t in 0..capture.tables().len() {
        tables.push(capture.snapshot_table(t, position.clone())?);
    }
    published.store(Arc::new(SourceVersion {
        position,
        consistent: true,
        tables,
        changelogs: changelogs.iter().map(Changelog::snapshot).collect(),
        stopped: Arc::clone(&published_stops),
    }));
    if let Some(c) = checkpointer {
        let persisted = vec![0; changelogs.len()];
        c.arm(capture.tables().to_vec(), None, persisted, consistent_from)
            .await;
        // The hand-off is the costliest work to lose: checkpoint it now.
        c.wake.notify_one();
    }
    task.journal.clear();
    {
        let mut s = status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.retrying = false;
    }
    let _ = ready.send(true);
    versions.send_modify(|v| *v += 1);
    while let Some((tx, changes)) = capture.next().await? {
        append(&capture, &mut changelogs, &changes, &mut numbers)?;
        let stops = capture.take_stops();
        if !stops.is_empty() {
            for stop in stops {
                stopped.entry(stop.table).or_insert(stop);
            }
            published_stops = Arc::new(stopped.clone());
        }
        let touched: std::collections::BTreeSet<usize> = changes.iter().map(|c| c.table).collect();
        let previous = published.load_full();
        let mut version = SourceVersion {
            position: Some(tx.end.clone()),
            consistent: true,
            tables: previous.tables.clone(),
            changelogs: previous.changelogs.clone(),
            stopped: Arc::clone(&published_stops),
        };
        for t in touched {
            version.tables[t] = capture.snapshot_table(t, Some(tx.end.clone()))?;
            version.changelogs[t] = changelogs[t].snapshot();
        }
        for snap in &mut version.tables {
            snap.position = Some(tx.end.clone());
        }
        published.store(Arc::new(version));
        versions.send_modify(|v| *v += 1);
        {
            let mut s = status
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            s.transactions += 1;
            s.last_commit_ts_micros = Some(tx.commit_ts_micros);
        }
    }
    Ok(())
}

/// Snapshots from the start, or from the chunks a durable source's journal kept.
pub(super) async fn fresh(task: &Task, mode: Mode) -> Result<Started, Stop> {
    let mut options = task.options.clone();
    let (info, tables) = Capture::matching_tables(&task.connect, &options.tables).await?;
    if let Some(c) = &task.checkpointer {
        if mode == Mode::Resnapshot {
            progress::discard(c.store(), c.id()).await?;
        }
        let (journal, resume) = ProgressJournal::open(c.store().clone(), c.id(), &tables).await?;
        options.snapshot.journal = Some(Arc::new(journal));
        options.snapshot.resume = resume;
    } else {
        if mode == Mode::Resnapshot {
            task.journal.clear();
        }
        options.snapshot.resume = task.journal.resume(&tables);
        options.snapshot.journal = Some(Arc::clone(&task.journal) as Arc<dyn SnapshotJournal>);
    }
    if mode == Mode::Start && options.visible_during_snapshot {
        options.snapshot.observer = Some(Arc::new(PartialView::new(
            Arc::clone(&task.published),
            Arc::clone(&task.status),
        )));
    }
    let (capture, handoff) = Capture::start_resolved(
        task.connect.clone(),
        options,
        info,
        tables,
        Arc::clone(&task.progress),
    )
    .await?;
    let mut changelogs: Vec<Changelog> = capture
        .tables()
        .iter()
        .map(|t| Changelog::new(&t.arrow))
        .collect();
    let mut numbers = TxNumbers::default();
    append(&capture, &mut changelogs, &handoff, &mut numbers)?;
    Ok(Started {
        consistent_from: handoff_end(&task.progress),
        capture,
        changelogs,
        numbers,
        stopped: BTreeMap::new(),
    })
}

/// Where the hand-off ended (a stream-only source: where it started, when that is a file
/// position).
pub(super) fn handoff_end(progress: &Progress) -> Option<BinlogCoord> {
    progress.report().position
}

/// Loads `manifest`, publishes it, then resumes the binlog where it ends.
async fn recover(
    task: &Task,
    checkpointer: &Checkpointer,
    manifest: crate::durable::manifest::Manifest,
) -> Result<Started, Stop> {
    let ids: Vec<TableId> = manifest
        .tables
        .iter()
        .map(|t| TableId::new(t.db.as_str(), t.table.as_str()))
        .collect();
    let (info, tables) = Capture::resolve_tables(&task.connect, &ids).await?;
    let mut recovered = recover::load(checkpointer.store(), &manifest, &tables).await?;
    // Tables whose capture had stopped stay stopped: their state ends where they stopped.
    let mut stopped = BTreeMap::new();
    for (t, entry) in manifest.tables.iter().enumerate() {
        if let Some(record) = &entry.stopped {
            let position = record.position.parse::<BinlogCoord>().map_err(|e| {
                SourceError::Config(format!("checkpoint {}: stop position: {e}", manifest.seq))
            })?;
            stopped.insert(
                t,
                TableStop {
                    table: t,
                    reason: record.reason.clone(),
                    position,
                },
            );
        }
    }
    let published_stops = Arc::new(stopped.clone());
    tracing::info!(seq = manifest.seq, position = %recovered.position, "resuming from a checkpoint");
    let mut snapshots = Vec::with_capacity(tables.len());
    for (state, table) in recovered.states.iter_mut().zip(&tables) {
        snapshots.push(
            state
                .snapshot(Some(recovered.position.clone()))
                .map_err(|e| SourceError::Config(format!("publishing {}: {e}", table.id)))?,
        );
    }
    task.published.store(Arc::new(SourceVersion {
        position: Some(recovered.position.clone()),
        consistent: true,
        tables: snapshots,
        changelogs: recovered
            .changelogs
            .iter()
            .map(Changelog::snapshot)
            .collect(),
        stopped: published_stops,
    }));
    {
        let mut s = task
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.tables = tables.clone();
        s.consistent_from = Some(recovered.consistent_from.clone());
        s.durable_position = Some(recovered.position.clone());
    }
    let persisted = recovered
        .changelogs
        .iter()
        .map(Changelog::num_segments)
        .collect();
    checkpointer
        .arm(
            tables.clone(),
            Some(manifest.clone()),
            persisted,
            Some(recovered.consistent_from.clone()),
        )
        .await;
    let numbers = TxNumbers {
        next: manifest.tx_seq,
        last: None,
    };
    task.progress.set_position(recovered.position.clone());
    let capture = Capture::resume(
        task.connect.clone(),
        &task.options,
        info,
        tables,
        recovered.states,
        recovered.position,
        Arc::clone(&task.progress),
    )
    .await?;
    Ok(Started {
        capture,
        changelogs: recovered.changelogs,
        consistent_from: Some(recovered.consistent_from),
        numbers,
        stopped,
    })
}

/// Goes on from the published version `previous` after a transient failure: its tables'
/// states and changelogs (shared, not copied) and the binlog from its position, so nothing
/// published is read again (see `engine::retry`).
async fn resume_published(task: &Task, previous: &SourceVersion) -> Result<Started, Stop> {
    let position = previous.position.clone().ok_or_else(|| {
        SourceError::Internal("resuming a source that has published nothing".into())
    })?;
    let (tables, consistent_from) = {
        let s = task
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (s.tables.clone(), s.consistent_from.clone())
    };
    let mut conn = task.connect.connect().await?;
    let info = task.connect.checked(&mut conn).await?;
    drop(conn);
    let states = previous
        .tables
        .iter()
        .map(|snap| TableState::from_current(CurrentTable::from_snapshot(snap)))
        .collect();
    tracing::info!(position = %position, "resuming from the published version");
    let capture = Capture::resume(
        task.connect.clone(),
        &task.options,
        info,
        tables,
        states,
        position,
        Arc::clone(&task.progress),
    )
    .await?;
    let changelogs = previous.changelogs.clone();
    Ok(Started {
        numbers: TxNumbers::after(&changelogs),
        capture,
        changelogs,
        consistent_from,
        stopped: (*previous.stopped).clone(),
    })
}

/// Appends changes to the changelogs, one segment per table.
pub(super) fn append(
    capture: &Capture,
    changelogs: &mut [Changelog],
    changes: &[TableChange],
    numbers: &mut TxNumbers,
) -> SourceResult<()> {
    let mut per_table: BTreeMap<usize, (Vec<&crate::state::merge::ChangelogEvent>, Vec<u64>)> =
        BTreeMap::new();
    for c in changes {
        let n = numbers.number(&c.event.position.tx, c.event.position.event_index == 0);
        let entry = per_table.entry(c.table).or_default();
        entry.0.push(&c.event);
        entry.1.push(n);
    }
    for (t, (events, tx)) in per_table {
        let segment = changelog_batch(
            capture.state(t).codec(),
            &changelogs[t].schema,
            &events,
            &tx,
        )
        .map_err(|e| {
            SourceError::Config(format!(
                "building the changelog of {}: {e}",
                capture.tables()[t].id
            ))
        })?;
        changelogs[t].append(segment);
    }
    Ok(())
}
