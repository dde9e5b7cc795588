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
//! so no entry is ever written twice and none is skipped.
//!
//! # State snapshots and replay
//! Rows are written when the changelog since a table's last state snapshot outgrows a quarter
//! of the table (at least [`DurableOptions::state_snapshot_min_changes`] entries); otherwise a
//! table's state is its last snapshot plus the segments after it, replayed on recovery. Restart
//! cost is therefore bounded by a fraction of the table, not by its history.
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
use arrow::datatypes::UInt64Type;
use arrow::error::ArrowError;
use rand::Rng;

use super::ipc;
use super::manifest::{
    commit_json, load_newest_manifest, manifest_dir, numbered, numbered_path, source_dir, Manifest,
    ManifestError, SegmentRef, StateRef, StopRecord, TableManifest, MANIFEST_EXT,
};
use super::store::{FileKind, Store, StoreError, FORMAT_VERSION};
use crate::capture::version::SourceVersion;
use crate::change::position::BinlogCoord;
use crate::change::schema::TableSchema;
use crate::state::changelog::changelog_schema;

/// Covered segments merged into one beyond this many per table.
pub const COMPACT_SEGMENTS: usize = 16;
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
}

/// Default time between checkpoints.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);
/// Default least number of changes between two state snapshots of a table.
pub const DEFAULT_STATE_SNAPSHOT_MIN_CHANGES: u64 = 100_000;

impl Default for DurableOptions {
    fn default() -> Self {
        Self {
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
            state_snapshot_min_changes: DEFAULT_STATE_SNAPSHOT_MIN_CHANGES,
        }
    }
}

/// Errors writing or reading a source's checkpoints.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("encoding {what}: {source}")]
    Encode {
        what: String,
        #[source]
        source: ArrowError,
    },
    /// A file that passed its checksum but does not decode, or decodes to other columns.
    #[error("state file {path} cannot be used: {message}")]
    Decode { path: String, message: String },
    /// The manifest and the server disagree (a table gone, the binlog purged...).
    #[error("checkpoint {manifest} cannot be resumed: {message}")]
    Resume { manifest: String, message: String },
}

impl DurableError {
    /// The SQLSTATE a client is given: a damaged file is data corruption, a checkpoint that
    /// cannot continue on this server needs repair, anything else is an I/O error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            // data_corrupted
            DurableError::Store(StoreError::Corrupt { .. }) | DurableError::Decode { .. } => {
                "XX001"
            }
            // object_not_in_prerequisite_state
            DurableError::Resume { .. } => "55000",
            // io_error
            _ => "58030",
        }
    }

    /// Whether writing the checkpoint again can succeed (see [`StoreError::is_transient`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, DurableError::Store(e) if e.is_transient())
    }
}

/// What the last commit left, for the next checkpoint.
#[derive(Debug)]
struct Committed {
    manifest: Option<Manifest>,
    previous: Option<Manifest>,
    /// Per table, how many in-memory changelog segments are already in files.
    persisted: Vec<usize>,
    tables: Vec<Arc<TableSchema>>,
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
}

impl Checkpointer {
    pub fn new(store: Store, id: String, options: DurableOptions) -> Self {
        Self {
            store,
            id,
            options,
            state: tokio::sync::Mutex::new(None),
            wake: tokio::sync::Notify::new(),
        }
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

    /// Starts checkpointing a source whose first version is published: `persisted[t]`
    /// changelog segments of table `t` are already in files named by `manifest`. Does nothing
    /// when already armed (a recovered source is armed before it resumes).
    /// Forgets the committed checkpoints' layout, so the next [`Checkpointer::arm`] starts a
    /// new one (a source started over with other tables or columns); older files become
    /// garbage once the next manifest is committed.
    pub async fn reset(&self) {
        *self.state.lock().await = None;
    }

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
        *state = Some(Committed {
            next_seq,
            manifest,
            previous: None,
            persisted,
            tables,
            consistent_from,
            tx_seq,
        });
    }

    /// A re-snapshot moved the end of the hand-off.
    pub async fn set_consistent_from(&self, consistent_from: BinlogCoord) {
        if let Some(c) = self.state.lock().await.as_mut() {
            c.consistent_from = Some(consistent_from);
        }
    }

    /// Writes a checkpoint of `version` unless the last one is at its position already;
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
        if c.manifest.as_ref().is_some_and(|m| m.position == text) {
            return Ok(None);
        }
        let seq = c.next_seq;
        let token = format!("{:08x}", rand::rng().random::<u32>());
        let dir = source_dir(&self.id);
        let mut tables = Vec::with_capacity(c.tables.len());
        let mut tx_seq = c.tx_seq;
        for (t, schema) in c.tables.iter().enumerate() {
            let previous = c.manifest.as_ref().and_then(|m| m.tables.get(t));
            let mut segments = previous.map(|p| p.segments.clone()).unwrap_or_default();
            let changelog = &version.changelogs[t];
            let new: Vec<RecordBatch> = changelog
                .segments()
                .skip(c.persisted[t])
                .map(|s| s.batch.clone())
                .collect();
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
                    file,
                });
            }
            let snapshot = &version.tables[t];
            let state = match previous {
                Some(p) if !self.state_due(&p.state, &segments) => p.state.clone(),
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
            let segments = self
                .compact(schema, t, seq, &token, state.seq, segments)
                .await?;
            tables.push(TableManifest {
                db: schema.id.db.clone(),
                table: schema.id.table.clone(),
                state,
                segments,
                stopped: version.stopped.get(&t).map(|s| StopRecord {
                    reason: s.reason.clone(),
                    position: s.position.to_string(),
                }),
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
        c.next_seq = seq + 1;
        c.persisted = version
            .changelogs
            .iter()
            .map(|l| l.num_segments())
            .collect();
        c.tx_seq = tx_seq;
        c.previous = c.manifest.replace(manifest);
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
    async fn compact(
        &self,
        schema: &TableSchema,
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
        let log_schema = changelog_schema(&schema.arrow);
        let mut batches = Vec::new();
        for s in &segments[..covered] {
            let bytes = self.store.read_ref(&s.file, FileKind::Segment).await?;
            batches.extend(ipc::decode(&bytes, &log_schema).map_err(|message| {
                DurableError::Decode {
                    path: self.store.describe(&s.file.path),
                    message,
                }
            })?);
        }
        let bytes = ipc::encode(&log_schema, &batches).map_err(|source| DurableError::Encode {
            what: format!("the compacted changelog of {}", schema.id),
            source,
        })?;
        let path = format!(
            "{}/tables/{t}/changelog/{seq:020}-{token}-compacted.arrow",
            source_dir(&self.id)
        );
        let merged = SegmentRef {
            first_seq: segments[0].first_seq,
            last_seq: segments[covered - 1].last_seq,
            rows: segments[..covered].iter().map(|s| s.rows).sum(),
            file: self.store.write(&path, FileKind::Segment, &bytes).await?,
        };
        let mut out = vec![merged];
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
