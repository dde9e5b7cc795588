//! Writing one source's checkpoints from its published versions.
//!
//! # Why from published versions
//! A published [`SourceVersion`] is immutable and sits on a source transaction boundary: its
//! current tables and its changelogs all stop at the same binlog position. The checkpointer
//! takes the latest one, writes the changelog segments appended since the last checkpoint and
//! (when due) the tables' rows, then commits a manifest naming them with that position. So a
//! manifest's position, state and changelog always agree, ingestion never waits for the store,
//! and the changelog a checkpoint adds is exactly the entries after the previous checkpoint's
//! position and up to its own: recovery resumes the binlog there and drops everything before,
//! so no entry is ever written twice and none is skipped. Manifests only move forward: a
//! version behind the last one written is not written (the checkpoint loop may hold an older
//! version than one checkpointed meanwhile, e.g. a move's named start), and one at the same
//! position is written again only when its GTIDs or its servers changed.
//!
//! # State snapshots and replay
//! Rows are written when the changelog since a table's last state snapshot outgrows a quarter
//! of the table (at least [`DurableOptions::state_snapshot_min_changes`] entries); otherwise a
//! table's state is its last snapshot plus the segments after it, replayed on recovery. Restart
//! cost is therefore bounded by a fraction of the table, not by its history.
//!
//! # Retention
//! Entries retention removed from memory (`state::retention`) leave the checkpoints too: a
//! table's leading files go once every entry in them is trimmed *and* its state snapshot
//! covers them (the state is the files after it replayed, so a file after the state is kept
//! until the next state write). The manifest counts what went ([`TrimRecord`]), so a restart
//! continues the same offsets and knows where the retained history begins. Retention never
//! trims an entry the store does not hold yet ([`Checkpointer::durable_rows`]).
//!
//! # Compaction and cleanup
//! Segments already covered by the state snapshot are merged into one once there are more than
//! [`COMPACT_SEGMENTS`] of them (same entries, same order, fewer files). After each commit, files
//! named by neither of the two newest manifests are deleted; the previous manifest stays whole so
//! an operator can fall back to it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{SchemaRef, UInt64Type};
use rand::Rng;

use super::error::DurableError;
use super::ipc;
use super::manifest::{
    commit_json, load_newest_manifest, manifest_dir, numbered, numbered_path, source_dir, Manifest,
    SegmentRef, StateRef, StopRecord, TableManifest, TrimRecord, MANIFEST_EXT,
};
use super::schemas::StoredSchemaChange;
use super::spill::{spill_over_budget, StoredChangelog};
use super::store::{FileKind, Store, StoreError, FORMAT_VERSION};
use crate::capture::version::SourceVersion;
use crate::change::position::BinlogCoord;
use crate::change::schema::TableSchema;
use crate::locks::Locked;
use crate::state::changelog::{Changelog, Trimmed, COMMIT_TS_COLUMN, POSITION_COLUMN};

/// Covered segments are merged beyond this many per table.
pub const COMPACT_SEGMENTS: usize = 16;
/// Entries of one compacted changelog file, at most (unless one checkpoint wrote more).
const COMPACT_MAX_ROWS: u64 = 256 * 1024;
/// A table's rows are written again once the changelog since the last write exceeds
/// `rows / STATE_FRACTION` entries.
const STATE_FRACTION: u64 = 4;

/// How a durable engine checkpoints.
#[derive(Debug, Clone)]
pub struct DurableOptions {
    /// Time between checkpoints of a source (one is also written at the end of its hand-off
    /// and on a clean stop).
    pub checkpoint_interval: Duration,
    /// Least number of changelog entries since a table's last state snapshot before its rows
    /// are written again.
    pub state_snapshot_min_changes: u64,
    /// Bytes of changelog entries a source keeps in memory; older entries already in its
    /// checkpoints are read back from the store when scanned. 0: no limit.
    pub changelog_memory_budget: u64,
}

/// Default time between checkpoints.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);
/// Default least number of changes between two state snapshots of a table.
pub const DEFAULT_STATE_SNAPSHOT_MIN_CHANGES: u64 = 100_000;
/// Default memory budget of a source's changelogs.
pub const DEFAULT_CHANGELOG_MEMORY_BUDGET: u64 = 256 * 1024 * 1024;

impl Default for DurableOptions {
    fn default() -> Self {
        Self {
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
            state_snapshot_min_changes: DEFAULT_STATE_SNAPSHOT_MIN_CHANGES,
            changelog_memory_budget: DEFAULT_CHANGELOG_MEMORY_BUDGET,
        }
    }
}

/// What the last commit left, for the next checkpoint.
#[derive(Debug)]
struct Committed {
    manifest: Option<Manifest>,
    previous: Option<Manifest>,
    /// Per table, how many changelog entries are already in files.
    persisted: Vec<usize>,
    tables: Vec<Arc<TableSchema>>,
    /// Per table, where its spilled changelog segments are read back from.
    stores: Vec<Arc<StoredChangelog>>,
    /// `None` until known (a stream-only source started from a GTID set): then the first
    /// checkpoint's position, since its changelog holds only binlog changes from there.
    consistent_from: Option<BinlogCoord>,
    tx_seq: u64,
    /// Number of the next manifest: past every manifest in the store, even unreadable ones.
    next_seq: u64,
}

/// The checkpointer of one source; see the module docs.
#[derive(Debug)]
pub struct Checkpointer {
    store: Store,
    id: String,
    pub options: DurableOptions,
    /// `None` until the source has published its first consistent version.
    state: tokio::sync::Mutex<Option<Committed>>,
    /// Asks the checkpoint loop for a checkpoint now (end of the hand-off).
    pub wake: tokio::sync::Notify,
    /// Changelog entries of each table the committed checkpoints hold (`persisted`), readable
    /// without waiting for a checkpoint in flight: retention trims no further.
    durable: std::sync::Mutex<Vec<usize>>,
    /// The server of each history of positions and what is known of its binlog, written
    /// into every manifest.
    servers: std::sync::Mutex<(Vec<String>, Vec<String>)>,
}

impl Checkpointer {
    pub fn new(store: Store, id: String, options: DurableOptions) -> Self {
        Self {
            store,
            id,
            options,
            state: tokio::sync::Mutex::new(None),
            wake: tokio::sync::Notify::new(),
            durable: std::sync::Mutex::new(Vec::new()),
            servers: std::sync::Mutex::new((Vec::new(), Vec::new())),
        }
    }

    /// The server of each history of positions and what is known of its binlog (see
    /// `Manifest::server_states`), for the manifests from now on.
    pub fn set_servers(&self, servers: Vec<String>, states: Vec<String>) {
        *self.servers.locked() = (servers, states);
    }

    /// How many changelog entries of each table (offsets count trimmed ones) the committed
    /// checkpoints hold; a table not listed has none yet.
    pub fn durable_rows(&self) -> Vec<usize> {
        self.durable.locked().clone()
    }

    fn set_durable(&self, persisted: &[usize]) {
        *self.durable.locked() = persisted.to_vec();
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The newest committed manifest of this source.
    pub async fn newest(&self) -> Result<Option<Manifest>, DurableError> {
        Ok(load_newest_manifest(&self.store, &self.id).await?)
    }

    /// Forgets the committed checkpoints' layout, so the next [`Checkpointer::arm`] starts a
    /// new one (a source started over with other tables or columns); older files become
    /// garbage once the next manifest is committed.
    pub async fn reset(&self) {
        *self.state.lock().await = None;
        self.set_durable(&[]);
    }

    /// Starts checkpointing a source whose first version is published: `persisted[t]`
    /// changelog entries of table `t` are already in files named by `manifest`. Does nothing
    /// when already armed (a recovered source is armed before it resumes).
    pub async fn arm(
        &self,
        tables: Vec<Arc<TableSchema>>,
        manifest: Option<Manifest>,
        persisted: Vec<usize>,
        consistent_from: Option<BinlogCoord>,
    ) {
        let tx_seq = manifest.as_ref().map_or(0, |m| m.tx_seq);
        let mut state = self.state.lock().await;
        if state.is_some() {
            return;
        }
        // Without a manifest to continue (a new source, or one snapshotted again because its
        // checkpoint could not be read), number after whatever manifests are there.
        let next_seq = match &manifest {
            Some(m) => m.seq + 1,
            None => numbered(&self.store, &manifest_dir(&self.id), MANIFEST_EXT)
                .await
                .ok()
                .and_then(|m| m.last().map(|(seq, _)| seq + 1))
                .unwrap_or(1),
        };
        let stores = self.stores(&tables);
        self.set_durable(&persisted);
        *state = Some(Committed {
            next_seq,
            manifest,
            previous: None,
            persisted,
            stores,
            tables,
            consistent_from,
            tx_seq,
        });
    }

    /// Where the spilled changelog segments of each of `tables` are read back from.
    pub fn stores(&self, tables: &[Arc<TableSchema>]) -> Vec<Arc<StoredChangelog>> {
        tables
            .iter()
            .enumerate()
            .map(|(t, schema)| {
                Arc::new(StoredChangelog::new(
                    self.store.clone(),
                    &self.id,
                    t,
                    schema.id.clone(),
                ))
            })
            .collect()
    }

    /// A re-snapshot moved the end of the hand-off.
    pub async fn set_consistent_from(&self, consistent_from: BinlogCoord) {
        if let Some(c) = self.state.lock().await.as_mut() {
            c.consistent_from = Some(consistent_from);
        }
    }

    /// Writes a checkpoint of `version` unless the last one is at its position already (with
    /// the same GTIDs and servers), or past it (a version loaded before a newer one was checkpointed);
    /// returns the new durable position.
    pub async fn checkpoint(
        &self,
        version: &SourceVersion,
    ) -> Result<Option<BinlogCoord>, DurableError> {
        let mut guard = self.state.lock().await;
        let Some(c) = guard.as_mut() else {
            return Ok(None);
        };
        let Some(position) = version.position.clone() else {
            return Ok(None);
        };
        let text = position.to_string();
        let gtids = version.gtids.as_ref().map(|g| g.to_string());
        let (servers, server_states) = self.servers.locked().clone();
        let done = c.manifest.as_ref().is_some_and(|m| {
            let same = m.gtids == gtids && m.servers == servers && m.server_states == server_states;
            match m.position.parse::<BinlogCoord>() {
                Ok(had) if had > position => true,
                Ok(had) if had == position => same,
                _ => m.position == text && same,
            }
        });
        if done {
            return Ok(None);
        }
        let seq = c.next_seq;
        let token = format!("{:08x}", rand::rng().random::<u32>());
        let dir = source_dir(&self.id);
        let mut tables = Vec::with_capacity(c.tables.len());
        let mut tx_seq = c.tx_seq;
        // The tables' schemas at this version: a followed DDL changes them, and a table
        // created after the start joins.
        let mut renamed = Vec::new();
        for (t, snapshot) in version.tables.iter().enumerate() {
            let schema = Arc::clone(snapshot.schema());
            match c.tables.get_mut(t) {
                Some(known) => {
                    if known.id != schema.id {
                        renamed.push((t, schema.id.clone()));
                    }
                    *known = schema;
                }
                None => {
                    c.stores.push(Arc::new(StoredChangelog::new(
                        self.store.clone(),
                        &self.id,
                        t,
                        schema.id.clone(),
                    )));
                    c.persisted.push(0);
                    c.tables.push(schema);
                }
            }
        }
        for (t, schema) in c.tables.iter().enumerate() {
            let previous = c.manifest.as_ref().and_then(|m| m.tables.get(t));
            let mut segments = previous.map(|p| p.segments.clone()).unwrap_or_default();
            let changelog = &version.changelogs[t];
            let new = entries_from(changelog, c.persisted[t]).await?;
            let rows: usize = new.iter().map(RecordBatch::num_rows).sum();
            if rows > 0 {
                for batch in &new {
                    let tx = batch.column(3).as_primitive::<UInt64Type>();
                    tx_seq = tx.iter().flatten().fold(tx_seq, u64::max);
                }
                let bytes = ipc::encode(&changelog.schema, &new).map_err(|source| {
                    DurableError::Encode {
                        what: format!("the changelog of {}", schema.id),
                        source,
                    }
                })?;
                let path = format!("{dir}/tables/{t}/changelog/{seq:020}-{token}.arrow");
                let file = self.store.write(&path, FileKind::Segment, &bytes).await?;
                segments.push(SegmentRef {
                    first_seq: seq,
                    last_seq: seq,
                    rows: rows as u64,
                    positions: position_range(&new),
                    max_commit_ts: max_commit_ts(&new),
                    file,
                });
            }
            let snapshot = &version.tables[t];
            // Entries replayed onto a stored state are all of its schema: after a schema
            // change the state is written again.
            let same_schema =
                |p: &TableManifest| p.schema.as_ref().map_or(0, |s| s.version) == schema.version;
            let state = match previous {
                Some(p) if same_schema(p) && !self.state_due(&p.state, &segments) => {
                    p.state.clone()
                }
                _ => {
                    let batches = snapshot.scan_all().map_err(|source| DurableError::Encode {
                        what: format!("the rows of {}", schema.id),
                        source,
                    })?;
                    let bytes = ipc::encode(&schema.arrow, &batches).map_err(|source| {
                        DurableError::Encode {
                            what: format!("the rows of {}", schema.id),
                            source,
                        }
                    })?;
                    let path = format!("{dir}/tables/{t}/state/{seq:020}-{token}.arrow");
                    StateRef {
                        seq,
                        rows: snapshot.len() as u64,
                        file: self.store.write(&path, FileKind::State, &bytes).await?,
                    }
                }
            };
            // What earlier manifests trimmed; a table new to the manifests starts where its
            // changelog's retained history does (the entries written above).
            let trimmed = match previous {
                Some(p) => p.trimmed.clone(),
                None => record_of(changelog.trimmed()),
            };
            let (trimmed, segments) = trim_files(trimmed, segments, changelog.trimmed(), state.seq);
            let segments = self
                .compact(
                    schema,
                    &changelog.schema,
                    t,
                    seq,
                    &token,
                    state.seq,
                    segments,
                )
                .await?;
            tables.push(TableManifest {
                db: schema.id.db.clone(),
                table: schema.id.table.clone(),
                schema: Some(schema.as_ref().into()),
                state,
                segments,
                stopped: version.stopped.get(&t).map(|s| StopRecord {
                    reason: s.reason.clone(),
                    position: s.position.to_string(),
                    read_again: s.read_again,
                    dropped: s.dropped,
                }),
                trimmed,
            });
        }
        let manifest = Manifest {
            format: FORMAT_VERSION,
            source_id: self.id.clone(),
            seq,
            position: text,
            consistent_from: c
                .consistent_from
                .get_or_insert_with(|| position.clone())
                .to_string(),
            tx_seq,
            tables,
            schema_history: version
                .schema_history
                .iter()
                .map(StoredSchemaChange::from)
                .collect(),
            gtids,
            servers,
            server_states,
        };
        let path = numbered_path(&manifest_dir(&self.id), seq, MANIFEST_EXT);
        if let Err(e) = commit_json(&self.store, &path, FileKind::Manifest, &manifest).await {
            // The store may have written it and only the answer was lost: the next attempt
            // takes the next number rather than find this one taken. (A number taken by
            // another writer is not skipped: that is the fence.)
            if e.is_transient() {
                c.next_seq = seq + 1;
            }
            return Err(e.into());
        }
        tracing::debug!(source = %self.id, seq, position = %position, "checkpoint committed");
        // Spilled entries of a renamed table are found under its new name from now on.
        for (t, to) in renamed {
            c.stores[t].rename(to);
        }
        c.next_seq = seq + 1;
        c.persisted = version.changelogs.iter().map(Changelog::num_rows).collect();
        self.set_durable(&c.persisted);
        c.tx_seq = tx_seq;
        c.previous = c.manifest.replace(manifest);
        let budget = self.options.changelog_memory_budget;
        let spilled = spill_over_budget(&version.changelogs, &c.persisted, &c.stores, budget);
        if spilled > 0 {
            tracing::debug!(source = %self.id, bytes = spilled, "changelog entries spilled to the store");
        }
        if let Err(e) = self.clean(c).await {
            // Garbage only costs space; the next checkpoint tries again.
            tracing::warn!(error = %e, "removing old checkpoint files failed");
        }
        Ok(Some(position))
    }

    fn state_due(&self, state: &StateRef, segments: &[SegmentRef]) -> bool {
        let since: u64 = segments
            .iter()
            .filter(|s| s.first_seq > state.seq)
            .map(|s| s.rows)
            .sum();
        since
            >= self
                .options
                .state_snapshot_min_changes
                .max(state.rows / STATE_FRACTION)
    }

    /// Merges the segments the state covers once there are too many; see the module docs.
    /// Runs of neighbours are merged up to [`COMPACT_MAX_ROWS`] entries per file, so a scan
    /// reading spilled entries back never holds more than one such file.
    #[allow(clippy::too_many_arguments)]
    async fn compact(
        &self,
        schema: &TableSchema,
        log_schema: &SchemaRef,
        t: usize,
        seq: u64,
        token: &str,
        state_seq: u64,
        segments: Vec<SegmentRef>,
    ) -> Result<Vec<SegmentRef>, DurableError> {
        let covered = segments
            .iter()
            .take_while(|s| s.last_seq <= state_seq)
            .count();
        if covered <= COMPACT_SEGMENTS {
            return Ok(segments);
        }
        // Runs of covered neighbours that fit in one file together.
        let mut runs: Vec<Vec<SegmentRef>> = Vec::new();
        for s in segments.iter().take(covered) {
            match runs.last_mut() {
                Some(run)
                    if run.iter().map(|r| r.rows).sum::<u64>() + s.rows <= COMPACT_MAX_ROWS =>
                {
                    run.push(s.clone())
                }
                _ => runs.push(vec![s.clone()]),
            }
        }
        let mut out = Vec::with_capacity(runs.len() + segments.len() - covered);
        for (i, run) in runs.into_iter().enumerate() {
            if run.len() == 1 {
                out.extend(run);
                continue;
            }
            let mut batches = Vec::new();
            for s in &run {
                let bytes = self.store.read_ref(&s.file, FileKind::Segment).await?;
                batches.extend(
                    ipc::decode_changelog(&bytes, log_schema).map_err(|message| {
                        DurableError::Decode {
                            path: self.store.describe(&s.file.path),
                            message,
                        }
                    })?,
                );
            }
            let bytes =
                ipc::encode(log_schema, &batches).map_err(|source| DurableError::Encode {
                    what: format!("the compacted changelog of {}", schema.id),
                    source,
                })?;
            let path = format!(
                "{}/tables/{t}/changelog/{seq:020}-{token}-compacted-{i}.arrow",
                source_dir(&self.id)
            );
            let positions = match (&run[0].positions, &run[run.len() - 1].positions) {
                (Some((lo, _)), Some((_, hi))) if run.iter().all(|s| s.positions.is_some()) => {
                    Some((lo.clone(), hi.clone()))
                }
                _ => None,
            };
            out.push(SegmentRef {
                first_seq: run[0].first_seq,
                last_seq: run[run.len() - 1].last_seq,
                rows: run.iter().map(|s| s.rows).sum(),
                positions,
                max_commit_ts: run.iter().filter_map(|s| s.max_commit_ts).max(),
                file: self.store.write(&path, FileKind::Segment, &bytes).await?,
            });
        }
        out.extend(segments.into_iter().skip(covered));
        Ok(out)
    }

    /// Deletes what neither of the two newest manifests names.
    async fn clean(&self, c: &Committed) -> Result<(), StoreError> {
        let Some(newest) = &c.manifest else {
            return Ok(());
        };
        let oldest_kept = c.previous.as_ref().map_or(newest.seq, |p| p.seq);
        let keep: HashSet<&str> = newest
            .files()
            .chain(c.previous.iter().flat_map(Manifest::files))
            .map(|f| f.path.as_str())
            .collect();
        let manifests = manifest_dir(&self.id);
        for (seq, path) in numbered(&self.store, &manifests, MANIFEST_EXT).await? {
            if seq < oldest_kept {
                self.store.delete(&path).await?;
            }
        }
        for path in self.store.list(&source_dir(&self.id)).await? {
            if !path.starts_with(&manifests) && !keep.contains(path.as_str()) {
                self.store.delete(&path).await?;
            }
        }
        Ok(())
    }

    /// Deletes every file of this source (after `DROP SOURCE`).
    pub async fn remove_all(&self) -> Result<(), StoreError> {
        // Waits for a checkpoint in flight and keeps any later one from writing (it finds no
        // committed state), so no file appears after the listing below.
        *self.state.lock().await = None;
        for path in self.store.list(&source_dir(&self.id)).await? {
            self.store.delete(&path).await?;
        }
        Ok(())
    }
}

/// Entries `from..` of `changelog`, read back from the store where spilled.
async fn entries_from(
    changelog: &Changelog,
    from: usize,
) -> Result<Vec<RecordBatch>, DurableError> {
    let (segments, mut skip) = changelog.segments_from(from);
    let mut out = Vec::with_capacity(segments.len());
    for segment in segments {
        let batch = segment
            .batch(&changelog.schema)
            .await
            .map_err(|e| DurableError::Decode {
                path: "a spilled changelog segment".into(),
                message: e.to_string(),
            })?;
        let n = batch.num_rows();
        if skip < n {
            out.push(batch.slice(skip, n - skip));
        }
        skip = skip.saturating_sub(n);
    }
    Ok(out)
}

/// The record of what `trimmed` removed, if anything.
fn record_of(trimmed: &Trimmed) -> Option<TrimRecord> {
    Some(TrimRecord {
        rows: trimmed.rows as u64,
        last_position: trimmed.last_position.clone()?,
        max_commit_ts: trimmed.max_commit_ts,
    })
}

/// Drops the leading `segments` whose entries are all trimmed from memory (`memory`) and
/// covered by the state snapshot of checkpoint `state_seq`, adding them to `trimmed`; see
/// the module docs. A file whose positions were not recorded stays (and so do those after it).
fn trim_files(
    mut trimmed: Option<TrimRecord>,
    segments: Vec<SegmentRef>,
    memory: &Trimmed,
    state_seq: u64,
) -> (Option<TrimRecord>, Vec<SegmentRef>) {
    let mut gone = 0;
    for segment in &segments {
        let before = trimmed.as_ref().map_or(0, |t| t.rows);
        let (Some((_, last)), true, true) = (
            &segment.positions,
            segment.last_seq <= state_seq,
            before + segment.rows <= memory.rows as u64,
        ) else {
            break;
        };
        let max_commit_ts = segment
            .max_commit_ts
            .max(trimmed.as_ref().and_then(|t| t.max_commit_ts));
        trimmed = Some(TrimRecord {
            rows: before + segment.rows,
            last_position: last.clone(),
            max_commit_ts,
        });
        gone += 1;
    }
    (trimmed, segments.into_iter().skip(gone).collect())
}

/// The latest commit time (µs) of `batches`' entries.
fn max_commit_ts(batches: &[RecordBatch]) -> Option<i64> {
    batches
        .iter()
        .filter_map(|b| {
            b.column(COMMIT_TS_COLUMN)
                .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                .iter()
                .flatten()
                .max()
        })
        .max()
}

/// The first and last `_position` of entries in position order.
fn position_range(batches: &[RecordBatch]) -> Option<(String, String)> {
    let first = batches.iter().find(|b| b.num_rows() > 0)?;
    let last = batches.iter().rev().find(|b| b.num_rows() > 0)?;
    let position = |b: &RecordBatch, i: usize| {
        b.column(POSITION_COLUMN)
            .as_string::<i32>()
            .value(i)
            .to_string()
    };
    Some((position(first, 0), position(last, last.num_rows() - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::store::FileRef;

    fn segment(first: u64, last: u64, rows: u64, positions: Option<(&str, &str)>) -> SegmentRef {
        SegmentRef {
            first_seq: first,
            last_seq: last,
            rows,
            positions: positions.map(|(a, b)| (a.to_string(), b.to_string())),
            max_commit_ts: Some(last as i64),
            file: FileRef {
                path: format!("{first}-{last}"),
                size: 0,
                crc32: 0,
            },
        }
    }

    #[test]
    fn files_go_once_trimmed_in_memory_and_covered_by_the_state() {
        let files = vec![
            segment(1, 1, 10, Some(("a", "b"))),
            segment(2, 3, 10, Some(("c", "d"))),
            segment(4, 4, 10, Some(("e", "f"))),
            segment(5, 5, 10, Some(("g", "h"))),
        ];
        let memory = |rows| Trimmed {
            rows,
            last_position: Some("x".into()),
            max_commit_ts: None,
        };
        // 25 entries trimmed in memory: two whole files; the state of checkpoint 4 covers them.
        let (trimmed, kept) = trim_files(None, files.clone(), &memory(25), 4);
        let trimmed = trimmed.unwrap();
        assert_eq!((trimmed.rows, trimmed.last_position.as_str()), (20, "d"));
        assert_eq!(trimmed.max_commit_ts, Some(3));
        assert_eq!(kept.len(), 2);
        // The state of checkpoint 2 covers only the first: a file after the state stays.
        let (trimmed, kept) = trim_files(None, files.clone(), &memory(40), 2);
        assert_eq!(trimmed.unwrap().rows, 10);
        assert_eq!(kept.len(), 3);
        // What earlier manifests trimmed counts: 30 in memory, 20 already gone before.
        let before = TrimRecord {
            rows: 20,
            last_position: "0".into(),
            max_commit_ts: Some(9),
        };
        let (trimmed, kept) = trim_files(Some(before), files[2..].to_vec(), &memory(30), 9);
        let trimmed = trimmed.unwrap();
        assert_eq!((trimmed.rows, trimmed.max_commit_ts), (30, Some(9)));
        assert_eq!(kept.len(), 1);
        // A file whose positions were not recorded stays, and the ones after it.
        let mut old = files.clone();
        old[0].positions = None;
        let (trimmed, kept) = trim_files(None, old, &memory(40), 9);
        assert_eq!((trimmed, kept.len()), (None, 4));
    }
}
