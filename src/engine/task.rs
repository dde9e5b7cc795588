//! How a capture task starts, and what it shares with its source.
//!
//! # Starts
//! * *Fresh*: snapshot and hand-off ([`Capture::start_with_progress`]); the hand-off's
//!   changelog becomes the first segments. A durable source journals the snapshot's chunks and,
//!   after a crash during the snapshot, reads only the chunks not done yet.
//! * *Recovered*: a durable source with a checkpoint loads it (`durable::recover`), publishes
//!   it at once (so a source whose binlog was purged still answers queries with its last
//!   state) and resumes the binlog at the checkpoint's position ([`Capture::resume`]).
//! * *Re-snapshot* (`ALTER SOURCE ... RESNAPSHOT [TABLE db.t]`): see `engine::resnapshot`. A
//!   source that has published nothing (its checkpoint is damaged) starts over as if new.
//!
//! Then every source transaction is appended to the changelogs ([`append`]) and published as a
//! new version (see `engine::run`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use tokio::sync::watch;

use super::partial::PartialView;
use super::retry::MemoryJournal;
use super::source_status::SourceStatus;
use super::stop::Stop;
use crate::capture::version::{Published, SourceVersion};
use crate::capture::{
    Capture, CaptureOptions, HandoffLog, HandoffPart, ResumeAt, SchemaChange, TableChange,
    TableStop,
};
use crate::change::keys::RowCodec;
use crate::change::position::{BinlogCoord, ChangePosition, GtidSet};
use crate::change::schema::{TableId, TableSchema};
use crate::change::SourceTransaction;
use crate::durable::progress::{self, ProgressJournal};
use crate::durable::{recover, Checkpointer, DurableError};
use crate::locks::Locked;
use crate::provider::health::SharedHealth;
use crate::source::connect::ConnectOptions;
use crate::source::error::{SourceError, SourceResult};
use crate::source::snapshot::incremental::Progress;
use crate::source::snapshot::journal::SnapshotJournal;
use crate::state::changelog::{
    changelog_batch, streamed_batch, Changelog, ChangelogSegment, ChunkSegment,
};
use crate::state::current::CurrentTable;
use crate::state::merge::{ChangelogEvent, TableState};
use crate::state::streamed::StreamedBatch;

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
    /// How much history the source keeps, and who holds it (`engine::retention`).
    pub retention: Arc<super::retention::Retention>,
    /// The server each history of the source's positions was read from.
    pub histories: Arc<super::histories::Histories>,
    /// How the source reaches its servers (`engine::servers`).
    pub link: super::servers::SharedLink,
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
        let next = changelogs.iter().map(Changelog::max_tx).max().unwrap_or(0);
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
    /// The schema changes followed before the start (kept from a checkpoint or a version).
    pub schema_history: Vec<SchemaChange>,
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
    let mut capture = capture;
    // DDL the hand-off followed (see `capture::reread`): the changelogs start under the
    // schemas before it and take each change at its position.
    let schema_changes = capture.take_schema_changes();
    let mut changelogs: Vec<Changelog> = capture
        .tables()
        .iter()
        .enumerate()
        .map(|(t, table)| {
            let first = schema_changes.iter().find(|c| c.table == t);
            Changelog::new(&first.map_or(table, |c| &c.before).arrow)
        })
        .collect();
    let mut numbers = TxNumbers::default();
    append_handoff(
        &capture,
        &mut changelogs,
        &handoff,
        &schema_changes,
        &mut numbers,
    )?;
    Ok(Started {
        consistent_from: handoff_end(&task.progress),
        capture,
        changelogs,
        numbers,
        stopped: BTreeMap::new(),
        schema_history: schema_changes,
    })
}

/// Where the hand-off ended (a stream-only source: where it started, when that is a file
/// position).
pub(super) fn handoff_end(progress: &Progress) -> Option<BinlogCoord> {
    progress.report().position
}

/// Loads `manifest`, publishes it, then resumes the binlog where it ends.
pub(super) async fn recover(
    task: &Task,
    checkpointer: &Checkpointer,
    manifest: crate::durable::manifest::Manifest,
) -> Result<Started, Stop> {
    let ids: Vec<TableId> = manifest
        .tables
        .iter()
        .map(|t| TableId::new(t.db.as_str(), t.table.as_str()))
        .collect();
    // The schemas at the checkpoint's position: a DDL the stream has not reached yet must not
    // be applied early. Only checkpoints from before schemas were recorded use the server's.
    let (recorded, schema_history) = recover::recorded_schemas(&manifest)?;
    let (info, tables) = if recorded.iter().all(Option::is_some) {
        let mut conn = task.connect.connect().await?;
        let info = task.connect.checked(&mut conn).await?;
        (info, recorded.into_iter().flatten().map(Arc::new).collect())
    } else {
        Capture::resolve_tables(&task.connect, &ids).await?
    };
    let tables: Vec<Arc<TableSchema>> = tables;
    let stores = checkpointer.stores(&tables);
    let budget = checkpointer.options.changelog_memory_budget;
    let mut recovered = recover::load(
        checkpointer.store(),
        &manifest,
        &tables,
        &schema_history,
        &stores,
        budget,
    )
    .await?;
    // Tables whose capture had stopped stay stopped: their state ends where they stopped.
    let mut stopped = BTreeMap::new();
    for (t, entry) in manifest.tables.iter().enumerate() {
        if let Some(record) = &entry.stopped {
            let position = record.position.parse::<BinlogCoord>().map_err(|e| {
                Stop::State(DurableError::Decode {
                    path: format!("manifest {}", manifest.seq),
                    message: format!("the stop position of a table: {e}"),
                })
            })?;
            stopped.insert(
                t,
                TableStop {
                    table: t,
                    reason: record.reason.clone(),
                    position,
                    read_again: record.read_again,
                    dropped: record.dropped,
                },
            );
        }
    }
    let published_stops = Arc::new(stopped.clone());
    let gtids = match &manifest.gtids {
        Some(text) => Some(text.parse::<GtidSet>().map_err(|e| {
            Stop::State(DurableError::Decode {
                path: format!("manifest {}", manifest.seq),
                message: format!("its GTID position: {e}"),
            })
        })?),
        None => None,
    };
    tracing::info!(seq = manifest.seq, position = %recovered.position, "resuming from a checkpoint");
    let mut snapshots = Vec::with_capacity(tables.len());
    for (state, table) in recovered.states.iter_mut().zip(&tables) {
        snapshots.push(
            state
                .snapshot(Some(recovered.position.clone()))
                .map_err(|e| SourceError::arrow(format!("publishing {}", table.id), e))?,
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
        schema_history: Arc::new(schema_history.clone()),
        gtids: gtids.clone().map(Arc::new),
    }));
    {
        let mut s = task.status.locked();
        s.set_tables(tables.clone());
        s.consistent_from = Some(recovered.consistent_from.clone());
        s.durable_position = Some(recovered.position.clone());
    }
    let persisted = recovered
        .changelogs
        .iter()
        .map(Changelog::num_rows)
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
        resume_at(task, recovered.position, gtids),
        Arc::clone(&task.progress),
    )
    .await?;
    Ok(Started {
        capture,
        changelogs: recovered.changelogs,
        consistent_from: Some(recovered.consistent_from),
        numbers,
        stopped,
        schema_history,
    })
}

/// Where a capture resumed after `position` goes on: at `position` on the same server, or
/// after `gtids` when `task` reaches another server (its history is later than
/// `position`'s; see `engine::histories`).
pub(super) fn resume_at(task: &Task, position: BinlogCoord, gtids: Option<GtidSet>) -> ResumeAt {
    let by_gtid = position.history() < task.connect.history;
    ResumeAt {
        position,
        gtids,
        by_gtid,
    }
}

/// Goes on from the published version `previous` after a transient failure: its tables'
/// states and changelogs (shared, not copied) and the binlog from its position, so nothing
/// published is read again (see `engine::retry`).
pub(super) async fn resume_published(
    task: &Task,
    previous: &SourceVersion,
) -> Result<Started, Stop> {
    let position = previous.position.clone().ok_or_else(|| {
        SourceError::Internal("resuming a source that has published nothing".into())
    })?;
    let consistent_from = task.status.locked().consistent_from.clone();
    // The schemas at the version's position (a followed DDL changed them).
    let tables = previous
        .tables
        .iter()
        .map(|snap| Arc::clone(snap.schema()))
        .collect();
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
        resume_at(task, position, previous.gtids.as_deref().cloned()),
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
        schema_history: previous.schema_history.to_vec(),
    })
}

/// Appends the changelog of a snapshot and its hand-off in position order: each chunk as a
/// segment of its own rows, the changes between chunks as [`append`] does. A table's
/// changelog takes each of `schema_changes` (followed during the hand-off, in binlog order)
/// before the entries at its position, and the entries before it are read with the schema
/// they were made under.
pub(super) fn append_handoff(
    capture: &Capture,
    changelogs: &mut [Changelog],
    log: &HandoffLog,
    schema_changes: &[SchemaChange],
    numbers: &mut TxNumbers,
) -> SourceResult<()> {
    let missing = |c: &SchemaChange| {
        SourceError::Internal(format!(
            "no row codec for the schema change of {} at {}",
            c.after.id, c.position
        ))
    };
    let codec_of = |c: &SchemaChange| {
        log.codecs
            .iter()
            .find(|k| k.table == c.table && k.position == c.position)
            .ok_or_else(|| missing(c))
    };
    let mut codecs: Vec<Arc<RowCodec>> = Vec::with_capacity(capture.tables().len());
    for t in 0..capture.tables().len() {
        codecs.push(match schema_changes.iter().find(|c| c.table == t) {
            Some(first) => Arc::clone(&codec_of(first)?.before),
            None => Arc::clone(capture.state(t).codec()),
        });
    }
    let mut pending = schema_changes.iter().peekable();
    let evolve = |change: &SchemaChange,
                  changelogs: &mut [Changelog],
                  codecs: &mut [Arc<RowCodec>]|
     -> SourceResult<()> {
        changelogs[change.table].evolve(&change.after.arrow);
        codecs[change.table] = Arc::clone(&codec_of(change)?.after);
        Ok(())
    };
    // After the snapshot entries at the statement's own position (a chunk whose HIGH is
    // there read the table before it), before the statement's own entries (a `TRUNCATE`'s).
    let at = |change: &SchemaChange| ChangePosition {
        tx: change.position.clone(),
        event_index: 1,
        row_index: 0,
        sub: 0,
    };
    for part in log.parts() {
        match part {
            HandoffPart::Changes(mut changes) => loop {
                let current = |t: usize| Arc::clone(&codecs[t]);
                let Some(change) = pending.peek() else {
                    append_with(capture, &current, changelogs, changes, numbers)?;
                    break;
                };
                let before = changes.partition_point(|c| c.event.position < at(change));
                append_with(capture, &current, changelogs, &changes[..before], numbers)?;
                changes = &changes[before..];
                if changes.is_empty() {
                    break;
                }
                evolve(change, changelogs, &mut codecs)?;
                pending.next();
            },
            HandoffPart::Chunk(chunk) => {
                while let Some(change) = pending.next_if(|c| at(c) < chunk.start()) {
                    evolve(change, changelogs, &mut codecs)?;
                }
                let t = chunk.table;
                let segment = ChangelogSegment::of_chunk(ChunkSegment {
                    codec: Arc::clone(&chunk.codec),
                    schema: Arc::clone(&changelogs[t].written),
                    entries: chunk.entries.clone(),
                    high: chunk.high.clone(),
                    first: chunk.first,
                });
                changelogs[t]
                    .append(segment)
                    .map_err(changelog_error(capture, t))?;
            }
        }
    }
    for change in pending {
        evolve(change, changelogs, &mut codecs)?;
    }
    Ok(())
}

/// The streamed entries of a run (`RunChanges::Streamed`), with the run's transactions.
pub(super) struct StreamedRun<'a> {
    pub txs: &'a [SourceTransaction],
    pub tables: &'a [(usize, Vec<StreamedBatch>)],
}

/// Appends changes to the changelogs, one segment per table: `changes` (events), then the
/// streamed entries of a run of transactions after them, if any.
pub(super) fn append(
    capture: &Capture,
    changelogs: &mut [Changelog],
    changes: &[TableChange],
    run: Option<StreamedRun<'_>>,
    numbers: &mut TxNumbers,
) -> SourceResult<()> {
    let codec = |t: usize| Arc::clone(capture.state(t).codec());
    let mut batches = event_batches(capture, &codec, changelogs, changes, numbers)?;
    if let Some(StreamedRun { txs, tables }) = run {
        let tx_numbers = number_run(txs, tables, numbers);
        for (t, streamed) in tables {
            let batch = streamed_batch(
                &codec(*t),
                &changelogs[*t].written,
                txs,
                &tx_numbers,
                streamed,
            )
            .map_err(changelog_error(capture, *t))?;
            batches.entry(*t).or_default().push(batch);
        }
    }
    for (t, parts) in batches {
        // Events come only with a transaction applied by itself (DDL) and those after it.
        let batch = match parts.as_slice() {
            [one] => one.clone(),
            _ => concat_batches(&changelogs[t].written, &parts)
                .map_err(changelog_error(capture, t))?,
        };
        append_segment(capture, changelogs, t, batch)?;
    }
    Ok(())
}

/// The `_tx` of each of a run's transactions `txs`: the next numbers, in order, for those
/// with entries in `tables` (after every number handed out before, so after the events of a
/// transaction applied before the run); 0 for the others, which have no entry to carry it.
fn number_run(
    txs: &[SourceTransaction],
    tables: &[(usize, Vec<StreamedBatch>)],
    numbers: &mut TxNumbers,
) -> Vec<u64> {
    let mut used = vec![false; txs.len()];
    for b in tables.iter().flat_map(|(_, batches)| batches) {
        for e in &b.entries {
            if let Some(u) =
                b.tx.get(e.row as usize)
                    .and_then(|&j| used.get_mut(j as usize))
            {
                *u = true;
            }
        }
    }
    txs.iter()
        .zip(used)
        .map(|(tx, used)| {
            if used {
                numbers.number(&tx.start, false)
            } else {
                0
            }
        })
        .collect()
}

/// Appends `batch` to table `t`'s changelog as a segment.
fn append_segment(
    capture: &Capture,
    changelogs: &mut [Changelog],
    t: usize,
    batch: RecordBatch,
) -> SourceResult<()> {
    changelogs[t]
        .append(ChangelogSegment::of_batch(batch))
        .map_err(changelog_error(capture, t))
}

/// [`append`] of events only, reading table `t`'s rows with `codec(t)`.
fn append_with(
    capture: &Capture,
    codec: &dyn Fn(usize) -> Arc<RowCodec>,
    changelogs: &mut [Changelog],
    changes: &[TableChange],
    numbers: &mut TxNumbers,
) -> SourceResult<()> {
    for (t, parts) in event_batches(capture, codec, changelogs, changes, numbers)? {
        for batch in parts {
            append_segment(capture, changelogs, t, batch)?;
        }
    }
    Ok(())
}

/// The changelog batch of each table's events among `changes`, numbering their transactions.
fn event_batches(
    capture: &Capture,
    codec: &dyn Fn(usize) -> Arc<RowCodec>,
    changelogs: &[Changelog],
    changes: &[TableChange],
    numbers: &mut TxNumbers,
) -> SourceResult<BTreeMap<usize, Vec<RecordBatch>>> {
    let mut per_table: BTreeMap<usize, (Vec<&ChangelogEvent>, Vec<u64>)> = BTreeMap::new();
    for c in changes {
        let n = numbers.number(&c.event.position.tx, c.event.position.event_index == 0);
        let entry = per_table.entry(c.table).or_default();
        entry.0.push(&c.event);
        entry.1.push(n);
    }
    let mut out = BTreeMap::new();
    for (t, (events, tx)) in per_table {
        let batch = changelog_batch(&codec(t), &changelogs[t].written, &events, &tx)
            .map_err(changelog_error(capture, t))?;
        out.insert(t, vec![batch]);
    }
    Ok(out)
}

/// The error of a changelog batch of table `t` that could not be built.
fn changelog_error(
    capture: &Capture,
    t: usize,
) -> impl FnOnce(arrow::error::ArrowError) -> SourceError + '_ {
    move |e| {
        SourceError::arrow(
            format!("building the changelog of {}", capture.tables()[t].id),
            e,
        )
    }
}
