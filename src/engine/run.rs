//! The background tasks of one source: the capture task that publishes versions (retried
//! after transient failures), and the checkpoint loop of a durable source.
//!
//! # Invariant
//! A capture task ends in exactly one of three ways: its source is dropped, a definite error or
//! a panic fails the source ([`fail`]), or — for a transient error — it starts again after a
//! backoff from what is already done (the published version, or the snapshot chunks read), so
//! nothing is read twice into the changelog.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures::FutureExt;

use super::resnapshot::{resnapshot, resnapshot_table};
use super::retry;
use super::servers;
use super::source_status::{now_micros, SourceStatus};
use super::stop::{fail, panicked, Stop};
use super::task::{append, fresh, recover, resume_published, Mode, Started, StreamedRun, Task};
use crate::capture::version::{Published, SourceVersion};
use crate::capture::{Burst, RunChanges, TableStop};
use crate::change::errant::BinlogState;
use crate::change::position::BinlogCoord;
use crate::change::schema::Flavor;
use crate::durable::{Checkpointer, DurableError};
use crate::locks::Locked;
use crate::provider::health::{Fault, SharedHealth};
use crate::source::error::SourceError;
use crate::sqlstate::HasSqlState;
use crate::state::changelog::Changelog;

pub(crate) async fn run(task: Task, mode: Mode) {
    let mut task = task;
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
            Ok(Err(Stop::ReadAgain(t))) => {
                mode = Mode::ResnapshotTable(t);
                continue;
            }
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
            let mut s = task.status.locked();
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
        // A server that cannot be reached at all is left for another of the source's URL,
        // when one has every GTID the source applied (`engine::servers`).
        if let Stop::Source(SourceError::Unreachable { .. }) = &stop {
            if let Some(next) =
                servers::move_on(&task.link, &task.published.load_full(), &task.histories).await
            {
                task.connect = next;
                if task.published.load().position.is_some() {
                    mode = Mode::Resume;
                }
            }
        }
        // Chunks read under a schema a DDL has since changed cannot be kept: the snapshot
        // starts over under the new one.
        if let Stop::Source(SourceError::SchemaChangedDuringSnapshot { .. }) = &stop {
            mode = Mode::Resnapshot;
        }
    };
    task.status.locked().retrying = false;
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
        let started = std::time::Instant::now();
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
        let mut s = status.locked();
        match result {
            Ok(done) => {
                if let Some(position) = done {
                    s.durable_position = Some(position);
                }
                s.checkpoint_error = None;
                s.checkpoint_retrying = false;
                s.checkpoints += 1;
                s.last_checkpoint_micros = Some(now_micros());
                s.last_checkpoint_seconds = Some(started.elapsed().as_secs_f64());
                failures = 0;
            }
            Err(e) if e.is_transient() => {
                failures += 1;
                tracing::warn!(error = %e, attempt = failures, "checkpoint failed; retrying");
                s.checkpoint_error = Some(e.to_string());
                s.checkpoint_retrying = true;
                s.checkpoint_failures += 1;
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
                s.checkpoint_failures += 1;
                failures = 0;
            }
        }
    }
}

/// Transactions published as one version at most, when they arrive together.
const BURST_TRANSACTIONS: usize = 1024;
/// Time a burst may take before its version is published.
const BURST_TIME: std::time::Duration = std::time::Duration::from_millis(5);

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
    let manifest = match (mode, checkpointer) {
        (Mode::Start, Some(c)) => c.newest().await?,
        _ => None,
    };
    // The positions read from here on belong to the history of the server the source now
    // reaches; a start that goes on after a position of another server's is a move (see
    // `engine::histories`), which the starts below see in `task.connect.history`.
    // A server is named by its address and identity: a managed database's failover can put
    // another server behind the same address.
    // On MariaDB its binlog state is kept with it, to tell errant transactions another
    // server may have logged below the source's position from its own (`change::errant`).
    let (address, state, info) = {
        let mut conn = task.connect.connect().await?;
        let info = task.connect.checked(&mut conn).await?;
        let state = match info.flavor {
            Flavor::MariaDb => task.connect.binlog_state(&mut conn).await?,
            Flavor::MySql => BinlogState::default(),
        };
        (servers::server_name(&task.connect, &info), state, info)
    };
    let goes_on_after = match (&manifest, mode) {
        (Some(m), _) => {
            task.histories.adopt(&m.servers, &m.server_states, &address);
            Some(m.position.parse::<BinlogCoord>().map_err(|e| {
                Stop::State(DurableError::Decode {
                    path: format!("manifest {}", m.seq),
                    message: format!("its position: {e}"),
                })
            })?)
        }
        (None, Mode::Start) => None,
        (None, _) => previous.position.clone(),
    };
    let mut placed = task.clone();
    match &goes_on_after {
        Some(at) => {
            let place = task.histories.place(at, &address)?;
            placed.connect.history = place.history;
            // Another server behind the same address (a managed database's failover): no
            // statement checked it for errant transactions, so the start does (MariaDB, whose
            // acceptance the history keeps; `change::errant`). A re-snapshot takes them all.
            let behind_address = task
                .histories
                .same_address(at.history(), &task.connect.address());
            if place.moved
                && behind_address
                && mode != Mode::Resnapshot
                && info.flavor == Flavor::MariaDb
            {
                let ours = match &manifest {
                    Some(m) => m.gtids.as_deref().and_then(|g| g.parse().ok()),
                    None => previous.gtids.as_deref().cloned(),
                };
                // The state read above: what the server behind the address has logged.
                let logged = servers::Logged::MariaDb(state.clone());
                let server = task.connect.address();
                servers::check_errant((at, ours.as_ref()), &task.histories, &logged, &server)?;
            }
        }
        None => task.histories.reset(&address),
    }
    task.histories.record_state(placed.connect.history, &state);
    if let Some(c) = checkpointer {
        c.set_servers(task.histories.list(), task.histories.states());
    }
    let task = &placed;
    let started = match mode {
        Mode::Resnapshot if previous.position.is_some() => resnapshot(task, &previous).await?,
        // Nothing to compare with (the checkpoint could not be loaded): start over.
        Mode::Resnapshot => fresh(task, mode).await?,
        Mode::ResnapshotTable(t) => resnapshot_table(task, &previous, t).await?,
        Mode::Resume if previous.position.is_some() && previous.consistent => {
            resume_published(task, &previous).await?
        }
        Mode::Resume => fresh(task, Mode::Start).await?,
        Mode::Start => match (checkpointer, manifest) {
            (Some(c), Some(manifest)) => recover(task, c, manifest).await?,
            _ => fresh(task, mode).await?,
        },
    };
    let Started {
        mut capture,
        mut changelogs,
        consistent_from,
        mut numbers,
        mut stopped,
        schema_history,
    } = started;
    let mut schema_history = Arc::new(schema_history);
    for stop in stopped.values() {
        capture.restore_stop(stop);
    }
    merge_stops(&mut stopped, capture.take_stops(), Vec::new());
    let mut published_stops = Arc::new(stopped.clone());
    {
        let mut s = status.locked();
        s.set_tables(capture.tables().to_vec());
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
        schema_history: Arc::clone(&schema_history),
        gtids: capture.executed_gtids().cloned().map(Arc::new),
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
        let mut s = status.locked();
        s.retrying = false;
    }
    let _ = ready.send(true);
    versions.send_modify(|v| *v += 1);
    read_again(&published_stops)?;
    while let Some(burst) = capture.next_burst(BURST_TRANSACTIONS, BURST_TIME).await? {
        // Transactions that arrived together are decoded into shared batches, applied
        // together (each batch encoded once), appended and published once, at the last one's
        // end: a version still ends on a transaction boundary, and a burst of small
        // transactions costs one set of arrays, one encoding, one changelog segment and one
        // version.
        let (mut tx, mut changes, mut count, run) = match burst {
            Burst::Run(run) => {
                let Some(last) = run.txs.last().cloned() else {
                    continue;
                };
                (last, Vec::new(), 0, Some(run))
            }
            Burst::Idle(at) => {
                // The stream moved on with no transaction (a rotation): the same state, now
                // known to hold at `at`, so readers and checkpoints can reach the server's
                // position.
                let mut version = (*published.load_full()).clone();
                version.set_position(&at);
                published.store(Arc::new(version));
                versions.send_modify(|v| *v += 1);
                continue;
            }
            // A transaction applied by itself (DDL): those that arrived with it follow it.
            Burst::One(tx, changes) => {
                let until = std::time::Instant::now() + BURST_TIME;
                let run = capture.next_run(BURST_TRANSACTIONS - 1, until).await?;
                (tx, changes, 1, run)
            }
        };
        let (mut streamed, mut run_txs) = (None, Vec::new());
        if let Some(run) = run {
            match capture.apply_run(&run)? {
                RunChanges::Events(events) => changes.extend(events),
                RunChanges::Streamed(tables) => streamed = Some(tables),
            }
            count += run.txs.len() as u64;
            if let Some(last) = run.txs.last() {
                tx = last.clone();
            }
            run_txs = run.txs;
        }
        // A DDL is a burst of its own (`Capture::next_run`): the changelogs take the new
        // schemas before its entries (a TRUNCATE's) and any later ones are appended.
        let schema_changes = capture.take_schema_changes();
        // Tables with other indexes are published again too; their columns did not change.
        let evolved: Vec<usize> = schema_changes
            .iter()
            .map(|c| c.table)
            .chain(capture.take_reindexed())
            .collect();
        // Tables created after the start, captured from their creation.
        for table in &capture.tables()[changelogs.len()..] {
            changelogs.push(Changelog::new(&table.arrow));
        }
        if !schema_changes.is_empty() {
            for change in &schema_changes {
                changelogs[change.table].evolve(&change.after.arrow);
            }
            let mut history = (*schema_history).clone();
            history.extend(schema_changes);
            schema_history = Arc::new(history);
        }
        let run = streamed.as_deref().map(|tables| StreamedRun {
            txs: &run_txs,
            tables,
        });
        append(&capture, &mut changelogs, &changes, run, &mut numbers)?;
        let trimmed = task
            .retention
            .trim(&mut changelogs, checkpointer.as_deref());
        if merge_stops(&mut stopped, capture.take_stops(), capture.take_recreated()) {
            published_stops = Arc::new(stopped.clone());
        }
        let streamed_tables = streamed.iter().flatten().map(|(t, _)| *t);
        let touched: std::collections::BTreeSet<usize> = changes
            .iter()
            .map(|c| c.table)
            .chain(streamed_tables)
            .chain(evolved.iter().copied())
            .collect();
        let previous = published.load_full();
        let mut version = SourceVersion {
            position: Some(tx.end.clone()),
            consistent: true,
            tables: previous.tables.clone(),
            changelogs: previous.changelogs.clone(),
            stopped: Arc::clone(&published_stops),
            schema_history: Arc::clone(&schema_history),
            gtids: capture.executed_gtids().cloned().map(Arc::new),
        };
        // Tables created after the start join the version.
        while version.tables.len() < capture.tables().len() {
            let t = version.tables.len();
            version
                .tables
                .push(capture.snapshot_table(t, Some(tx.end.clone()))?);
            version.changelogs.push(changelogs[t].snapshot());
        }
        for t in touched {
            // A dropped table's rows are deleted in its changelog, but its published state
            // stays the last one before the drop, for stale reads (see `capture::stops`).
            if !published_stops.get(&t).is_some_and(|s| s.dropped) {
                version.tables[t] = capture.snapshot_table(t, Some(tx.end.clone()))?;
            }
            version.changelogs[t] = changelogs[t].snapshot();
        }
        for t in trimmed {
            version.changelogs[t] = changelogs[t].snapshot();
        }
        version.set_position(&tx.end);
        published.store(Arc::new(version));
        versions.send_modify(|v| *v += 1);
        read_again(&published_stops)?;
        {
            let mut s = status.locked();
            if !evolved.is_empty() {
                // New names resolve to the new schemas; kept plans are made again.
                s.set_tables(capture.tables().to_vec());
            }
            s.transactions += count;
            let streamed_entries: usize = streamed
                .iter()
                .flatten()
                .flat_map(|(_, batches)| batches)
                .map(|b| b.entries.len())
                .sum();
            s.changes += (changes.len() + streamed_entries) as u64;
            s.last_commit_ts_micros = Some(tx.commit_ts_micros);
        }
    }
    Ok(())
}

/// Adds `stops` to `stopped` (a table stops once and keeps its first reason, unless it is
/// dropped since, or was dropped before: a drop leaves nothing to repair) and ends the stops
/// of the dropped tables captured again (`recreated`); whether anything changed.
fn merge_stops(
    stopped: &mut BTreeMap<usize, TableStop>,
    stops: Vec<TableStop>,
    recreated: Vec<usize>,
) -> bool {
    let changed = !stops.is_empty() || !recreated.is_empty();
    for stop in stops {
        let after_drop = stopped.get(&stop.table).is_some_and(|s| s.dropped);
        if stop.dropped || after_drop {
            stopped.insert(stop.table, stop);
        } else {
            stopped.entry(stop.table).or_insert(stop);
        }
    }
    for t in recreated {
        stopped.remove(&t);
    }
    changed
}

/// Ends the capture loop with [`Stop::ReadAgain`] when a published stop asks for its table to
/// be read again: the source goes on with that table's re-read.
fn read_again(stops: &BTreeMap<usize, TableStop>) -> Result<(), Stop> {
    match stops.values().find(|s| s.read_again) {
        Some(stop) => Err(Stop::ReadAgain(stop.table)),
        None => Ok(()),
    }
}
