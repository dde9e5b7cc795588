//! The progress of a source's first snapshot in the state store, so a restart during the
//! snapshot reads only the chunks not done yet.
//!
//! # Invariant
//! A progress file (`sources/<id>/snapshot/<n>.progress`, committed with create-if-absent like
//! a manifest) names the chunk plan and every chunk done, each with its LOW, HIGH and a file of
//! its rows normalised to HIGH; the chunk files are written before the progress file that names
//! them. So the newest progress file only names complete chunks, and a chunk cut short by a
//! crash is simply read again. Once the source's first checkpoint commits, these files are
//! garbage and the checkpoint's cleanup removes them (they are under the source's directory
//! and no manifest names them).

use std::sync::Arc;

use arrow::compute::concat_batches;
use mysql_async::Value;
use serde::{Deserialize, Serialize};

use super::error::DurableError;
use super::ipc;
use super::manifest::{commit_json, numbered, numbered_path, read_json, source_dir};
use super::store::{FileKind, FileRef, Store};
use crate::change::position::BinlogCoord;
use crate::change::schema::{TableId, TableSchema};
use crate::locks::Locked;
use crate::source::snapshot::chunks::ChunkRange;
use crate::source::snapshot::incremental::{
    PlannedChunk, SnapshotChunk, SnapshotJournal, SnapshotResume,
};

const EXT: &str = "progress";

fn dir(id: &str) -> String {
    format!("{}/snapshot", source_dir(id))
}

/// A chunk bound as the server returned it, kept exactly (it goes back as a parameter).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Bound {
    Null,
    Bytes(Vec<u8>),
    Int(i64),
    UInt(u64),
    Float(f32),
    Double(f64),
    Date(u16, u8, u8, u8, u8, u8, u32),
    Time(bool, u32, u8, u8, u8, u32),
}

impl From<&Value> for Bound {
    fn from(v: &Value) -> Self {
        match v {
            Value::NULL => Bound::Null,
            Value::Bytes(b) => Bound::Bytes(b.clone()),
            Value::Int(i) => Bound::Int(*i),
            Value::UInt(u) => Bound::UInt(*u),
            Value::Float(f) => Bound::Float(*f),
            Value::Double(d) => Bound::Double(*d),
            Value::Date(y, m, d, h, i, s, u) => Bound::Date(*y, *m, *d, *h, *i, *s, *u),
            Value::Time(n, d, h, m, s, u) => Bound::Time(*n, *d, *h, *m, *s, *u),
        }
    }
}

impl From<&Bound> for Value {
    fn from(b: &Bound) -> Self {
        match b {
            Bound::Null => Value::NULL,
            Bound::Bytes(b) => Value::Bytes(b.clone()),
            Bound::Int(i) => Value::Int(*i),
            Bound::UInt(u) => Value::UInt(*u),
            Bound::Float(f) => Value::Float(*f),
            Bound::Double(d) => Value::Double(*d),
            Bound::Date(y, m, d, h, i, s, u) => Value::Date(*y, *m, *d, *h, *i, *s, *u),
            Bound::Time(n, d, h, m, s, u) => Value::Time(*n, *d, *h, *m, *s, *u),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PlanEntry {
    table: usize,
    index: usize,
    key: usize,
    start: Option<Bound>,
    end: Option<Bound>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DoneEntry {
    table: usize,
    index: usize,
    low: String,
    high: String,
    window_changes: usize,
    rows: u64,
    file: FileRef,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct ProgressFile {
    format: u8,
    seq: u64,
    /// `db.table` of each table the plan's indexes refer to.
    tables: Vec<(String, String)>,
    plan: Vec<PlanEntry>,
    done: Vec<DoneEntry>,
}

/// Writes a source's snapshot progress; see the module docs.
#[derive(Debug)]
pub struct ProgressJournal {
    store: Store,
    id: String,
    tables: std::sync::Mutex<Vec<Arc<TableSchema>>>,
    /// The last committed progress; its lock orders the commits.
    last: tokio::sync::Mutex<ProgressFile>,
}

impl ProgressJournal {
    /// A journal continuing the newest progress of source `id` (if any), with what it says.
    pub async fn open(
        store: Store,
        id: &str,
        tables: &[Arc<TableSchema>],
    ) -> Result<(Self, Option<SnapshotResume>), DurableError> {
        let newest = numbered(&store, &dir(id), EXT).await?.pop();
        let last: ProgressFile = match &newest {
            Some((_, path)) => read_json(&store, path, FileKind::Progress).await?,
            None => ProgressFile {
                format: super::store::FORMAT_VERSION,
                ..Default::default()
            },
        };
        let ids: Vec<TableId> = last
            .tables
            .iter()
            .map(|(d, t)| TableId::new(d.as_str(), t.as_str()))
            .collect();
        let same_tables =
            ids.len() == tables.len() && ids.iter().zip(tables).all(|(a, b)| *a == b.id);
        let resume = match newest {
            Some((_, path)) if same_tables && !last.plan.is_empty() => {
                load(&store, &path, &last, tables, ids).await?
            }
            _ => None,
        };
        let journal = Self {
            store,
            id: id.to_string(),
            tables: std::sync::Mutex::new(tables.to_vec()),
            last: tokio::sync::Mutex::new(last),
        };
        Ok((journal, resume))
    }

    async fn commit(&self, next: &ProgressFile) -> Result<(), DurableError> {
        let path = numbered_path(&dir(&self.id), next.seq, EXT);
        commit_json(&self.store, &path, FileKind::Progress, next).await?;
        for (seq, old) in numbered(&self.store, &dir(&self.id), EXT).await? {
            if seq < next.seq {
                self.store.delete(&old).await?;
            }
        }
        Ok(())
    }

    async fn record_plan(
        &self,
        tables: &[Arc<TableSchema>],
        plan: &[PlannedChunk],
    ) -> Result<(), DurableError> {
        *self.tables.locked() = tables.to_vec();
        let mut last = self.last.lock().await;
        let next = ProgressFile {
            format: super::store::FORMAT_VERSION,
            seq: last.seq + 1,
            tables: tables
                .iter()
                .map(|t| (t.id.db.clone(), t.id.table.clone()))
                .collect(),
            plan: plan
                .iter()
                .map(|p| PlanEntry {
                    table: p.table,
                    index: p.index,
                    key: p.key,
                    start: p.range.start.as_ref().map(Bound::from),
                    end: p.range.end.as_ref().map(Bound::from),
                })
                .collect(),
            done: Vec::new(),
        };
        self.commit(&next).await?;
        *last = next;
        Ok(())
    }

    async fn record_done(&self, chunk: &SnapshotChunk) -> Result<(), DurableError> {
        let schema = Arc::clone(&self.tables.locked()[chunk.table]);
        let bytes =
            ipc::encode(&schema.arrow, std::slice::from_ref(&chunk.rows)).map_err(|source| {
                DurableError::Encode {
                    what: format!("a snapshot chunk of {}", schema.id),
                    source,
                }
            })?;
        let token = format!("{:08x}", rand::random::<u32>());
        let path = format!(
            "{}/chunks/{}-{}-{token}.arrow",
            dir(&self.id),
            chunk.table,
            chunk.index
        );
        let file = self.store.write(&path, FileKind::State, &bytes).await?;
        let mut last = self.last.lock().await;
        let mut next = last.clone();
        next.seq += 1;
        next.done.push(DoneEntry {
            table: chunk.table,
            index: chunk.index,
            low: chunk.low.to_string(),
            high: chunk.high.to_string(),
            window_changes: chunk.window_changes,
            rows: chunk.rows.num_rows() as u64,
            file,
        });
        self.commit(&next).await?;
        *last = next;
        Ok(())
    }
}

#[async_trait::async_trait]
impl SnapshotJournal for ProgressJournal {
    async fn planned(&self, tables: &[Arc<TableSchema>], plan: &[PlannedChunk]) {
        if let Err(e) = self.record_plan(tables, plan).await {
            // Progress is an optimisation: without it a restart reads every chunk again.
            tracing::warn!(error = %e, "recording the snapshot plan failed");
        }
    }

    async fn done(&self, chunk: &SnapshotChunk) {
        if let Err(e) = self.record_done(chunk).await {
            tracing::warn!(error = %e, "recording a snapshot chunk failed");
        }
    }
}

/// The snapshot to resume from `progress`; `None` when a table's columns changed since its
/// chunks were read (a DDL while the engine was down or before it stopped): nothing was
/// published from them, so the snapshot starts over under the new columns.
async fn load(
    store: &Store,
    path: &str,
    progress: &ProgressFile,
    tables: &[Arc<TableSchema>],
    ids: Vec<TableId>,
) -> Result<Option<SnapshotResume>, DurableError> {
    let bad = |message: String| DurableError::Decode {
        path: store.describe(path),
        message,
    };
    let coord = |s: &str| s.parse::<BinlogCoord>().map_err(|e| bad(e.to_string()));
    let mut plan = Vec::with_capacity(progress.plan.len());
    for p in &progress.plan {
        if p.table >= tables.len() {
            return Err(bad(format!("chunk {} names table {}", p.index, p.table)));
        }
        plan.push(PlannedChunk {
            table: p.table,
            index: p.index,
            key: p.key,
            range: ChunkRange {
                start: p.start.as_ref().map(Value::from),
                end: p.end.as_ref().map(Value::from),
            },
        });
    }
    let mut done = Vec::with_capacity(progress.done.len());
    for d in &progress.done {
        let planned = plan
            .iter()
            .find(|p| p.table == d.table && p.index == d.index)
            .ok_or_else(|| {
                bad(format!(
                    "chunk {} of table {} is not in the plan",
                    d.index, d.table
                ))
            })?;
        let schema = &tables[d.table];
        let bytes = store.read_ref(&d.file, FileKind::State).await?;
        let same =
            ipc::same_columns(&bytes, &schema.arrow).map_err(|message| DurableError::Decode {
                path: store.describe(&d.file.path),
                message,
            })?;
        if !same {
            tracing::info!(table = %schema.id, "the snapshot's chunks were read under other columns; the snapshot starts over");
            return Ok(None);
        }
        let batches =
            ipc::decode(&bytes, &schema.arrow).map_err(|message| DurableError::Decode {
                path: store.describe(&d.file.path),
                message,
            })?;
        let rows = concat_batches(&schema.arrow, &batches).map_err(|e| bad(e.to_string()))?;
        if rows.num_rows() as u64 != d.rows {
            return Err(DurableError::Decode {
                path: store.describe(&d.file.path),
                message: format!(
                    "{} rows, but the progress recorded {}",
                    rows.num_rows(),
                    d.rows
                ),
            });
        }
        done.push(SnapshotChunk {
            table: d.table,
            index: d.index,
            range: planned.range.clone(),
            low: coord(&d.low)?,
            high: coord(&d.high)?,
            rows,
            window_changes: d.window_changes,
        });
    }
    Ok(Some(SnapshotResume {
        tables: ids,
        plan,
        done,
    }))
}

/// Deletes a source's snapshot progress (a re-snapshot starts from nothing).
pub async fn discard(store: &Store, id: &str) -> Result<(), DurableError> {
    for path in store.list(&dir(id)).await? {
        store.delete(&path).await?;
    }
    Ok(())
}
