//! The loop of one sink: read what its source published since the committed position, run
//! the query over it, commit the result, and start again from the target after a failure.
//!
//! # Invariant
//! A commit covers every changelog entry of the versions read, up to one published version:
//! whole source transactions only. The runner keeps no position of its own: every attempt
//! starts from the marker the target returns, so a crash or a failed commit can neither skip
//! nor repeat an entry (the target holds exactly once). Transient failures are retried with
//! backoff; any other failure stops the sink with its error and SQLSTATE.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray, StructArray};
use arrow::compute::kernels::cmp::gt;
use arrow::compute::{concat_batches, filter_record_batch, take};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::DataFrame;
use futures::future::BoxFuture;
use futures::TryStreamExt;
use tokio::sync::watch;

use super::error::SinkError;
use super::net::net_changes;
use super::query::{ScanKind, SinkQuery};
use super::spec::{SchemaChanges, SinkOptions, StartAt};
use super::status::{SinkState, SinkStatus};
use super::target::{Commit, Committed, SinkMode, Target, TargetLayout};
use crate::capture::version::{Published, SourceVersion};
use crate::change::position::ChangePosition;
use crate::provider::tail::entries_from;
use crate::state::changelog::adapt;

/// Plans the sink's query again (after a schema change of a table it reads).
pub type Replan = Arc<dyn Fn() -> BoxFuture<'static, Result<SinkQuery, SinkError>> + Send + Sync>;

/// What a sink reads: its source's published versions.
#[derive(Debug, Clone)]
pub struct SinkInput {
    pub published: Published,
    /// Bumped by the capture after every publication.
    pub versions: watch::Receiver<u64>,
}

/// Everything one sink's task needs.
pub struct SinkRunner {
    pub name: String,
    pub query: SinkQuery,
    pub target: Box<dyn Target>,
    pub options: SinkOptions,
    pub input: SinkInput,
    pub status: Arc<Mutex<SinkStatus>>,
    /// True while the sink is paused (`ALTER SINK ... PAUSE`).
    pub paused: watch::Receiver<bool>,
    /// The session the query runs in.
    pub state: SessionState,
    pub replan: Replan,
}

impl std::fmt::Debug for SinkRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkRunner")
            .field("name", &self.name)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// The wait after the first failed attempt; it doubles with each failure in a row.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The layout a query's rows are written in.
pub fn layout_of(name: &str, query: &SinkQuery) -> TargetLayout {
    TargetLayout {
        sink: name.to_string(),
        schema: Arc::clone(&query.schema),
        mode: query.mode,
        key: query.key.clone(),
    }
}

/// Runs `plan` and returns its rows as one batch of `schema`.
pub(super) async fn execute(
    state: &SessionState,
    plan: LogicalPlan,
    schema: &SchemaRef,
) -> Result<RecordBatch, SinkError> {
    let error = |e: datafusion::error::DataFusionError| {
        SinkError::Input(format!("running the sink's query: {e}"))
    };
    let batches: Vec<RecordBatch> = DataFrame::new(state.clone(), plan)
        .execute_stream()
        .await
        .map_err(error)?
        .try_collect()
        .await
        .map_err(error)?;
    let batches = batches
        .into_iter()
        .map(|b| RecordBatch::try_new(Arc::clone(schema), b.columns().to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SinkError::Input(e.to_string()))?;
    concat_batches(schema, &batches).map_err(|e| SinkError::Input(e.to_string()))
}

/// The entries each scanned table appended since `cursors` (advanced past them), limited to
/// positions after `after`; the largest position seen (filtered or not) comes with them.
async fn read_new(
    version: &SourceVersion,
    query: &SinkQuery,
    cursors: &mut [usize],
    after: Option<&str>,
) -> Result<(Vec<Vec<RecordBatch>>, Option<String>), SinkError> {
    let mut out = Vec::with_capacity(query.scans.len());
    let mut newest: Option<String> = None;
    for (scan, cursor) in query.scans.iter().zip(cursors.iter_mut()) {
        let Some(log) = version.changelogs.get(scan.table) else {
            out.push(Vec::new());
            continue;
        };
        let batches: Vec<RecordBatch> = entries_from(log, *cursor, Arc::clone(&log.schema))
            .try_collect()
            .await
            .map_err(|e| SinkError::Input(format!("reading the changelog: {e}")))?;
        *cursor = log.num_rows();
        let mut kept = Vec::with_capacity(batches.len());
        for batch in batches {
            let positions = batch
                .column_by_name("_position")
                .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
                .ok_or_else(|| SinkError::Input("the changelog has no _position".into()))?;
            if let Some(last) = positions.iter().flatten().next_back() {
                if newest.as_deref().is_none_or(|n| last > n) {
                    newest = Some(last.to_string());
                }
            }
            let batch = match after {
                Some(after) => {
                    let keep = gt(&positions, &StringArray::new_scalar(after))
                        .map_err(|e| SinkError::Input(e.to_string()))?;
                    filter_record_batch(&batch, &keep)
                        .map_err(|e| SinkError::Input(e.to_string()))?
                }
                None => batch,
            };
            if batch.num_rows() > 0 {
                kept.push(batch);
            }
        }
        out.push(kept);
    }
    Ok((out, newest))
}

/// The type that holds values of both `old` and `new`: the same type, or for structs (such as
/// `_before`) the union of their fields, each merged in turn; `None` for a change of type.
fn merge_type(old: &DataType, new: &DataType) -> Option<DataType> {
    match (old, new) {
        _ if old == new => Some(old.clone()),
        (DataType::Struct(old_fields), DataType::Struct(new_fields)) => {
            let mut fields: Vec<Field> = Vec::with_capacity(old_fields.len());
            for o in old_fields {
                match new_fields.find(o.name()) {
                    Some((_, n)) => fields.push(
                        o.as_ref()
                            .clone()
                            .with_data_type(merge_type(o.data_type(), n.data_type())?),
                    ),
                    None => fields.push(o.as_ref().clone().with_nullable(true)),
                }
            }
            for n in new_fields {
                if old_fields.find(n.name()).is_none() {
                    fields.push(n.as_ref().clone().with_nullable(true));
                }
            }
            Some(DataType::Struct(Fields::from(fields)))
        }
        _ => None,
    }
}

/// `array` as `data_type` (its own type merged with others by [`merge_type`]): struct fields
/// it lacks are NULL.
fn align_array(array: &ArrayRef, data_type: &DataType) -> Result<ArrayRef, SinkError> {
    if array.data_type() == data_type {
        return Ok(Arc::clone(array));
    }
    match (array.as_any().downcast_ref::<StructArray>(), data_type) {
        (Some(s), DataType::Struct(fields)) => {
            let columns = fields
                .iter()
                .map(|f| match s.column_by_name(f.name()) {
                    Some(c) => align_array(c, f.data_type()),
                    None => Ok(arrow::array::new_null_array(f.data_type(), s.len())),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(
                StructArray::try_new(fields.clone(), columns, s.nulls().cloned())
                    .map_err(|e| SinkError::Input(e.to_string()))?,
            ))
        }
        _ => Err(SinkError::Input(format!(
            "a column of {} cannot be written as {data_type}",
            array.data_type()
        ))),
    }
}

/// `rows` in the columns of `target`: columns it lacks (dropped at the source) are NULL,
/// columns `target` lacks are appended (new at the source), structs carry the fields of both.
fn align(rows: RecordBatch, target: &SchemaRef) -> Result<RecordBatch, SinkError> {
    let mut fields: Vec<Field> = target.fields().iter().map(|f| f.as_ref().clone()).collect();
    for f in rows.schema().fields() {
        if target.field_with_name(f.name()).is_err() {
            fields.push(f.as_ref().clone().with_nullable(true));
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let columns = schema
        .fields()
        .iter()
        .map(|f| match rows.column_by_name(f.name()) {
            Some(c) => align_array(c, f.data_type()),
            None => Ok(arrow::array::new_null_array(f.data_type(), rows.num_rows())),
        })
        .collect::<Result<Vec<ArrayRef>, SinkError>>()?;
    RecordBatch::try_new(schema, columns).map_err(|e| SinkError::Input(e.to_string()))
}

/// The keys of `keys` (rows of the unfiltered query over every touched row) that are not
/// keys of `rows`: what the commit deletes.
fn deletions(
    keys: &RecordBatch,
    rows: &RecordBatch,
    key: &[String],
) -> Result<RecordBatch, SinkError> {
    let err = |e: arrow::error::ArrowError| SinkError::Input(e.to_string());
    let columns = |b: &RecordBatch| -> Result<Vec<ArrayRef>, SinkError> {
        key.iter()
            .map(|k| {
                b.column_by_name(k)
                    .cloned()
                    .ok_or_else(|| SinkError::Input(format!("key column {k} missing")))
            })
            .collect()
    };
    let key_columns = columns(keys)?;
    let fields: Vec<Field> = key
        .iter()
        .zip(&key_columns)
        .map(|(k, c)| Field::new(k, c.data_type().clone(), true))
        .collect();
    let converter = RowConverter::new(
        fields
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )
    .map_err(err)?;
    let kept = converter.convert_columns(&columns(rows)?).map_err(err)?;
    let kept: std::collections::HashSet<_> = kept.iter().map(|r| r.owned()).collect();
    let all = converter.convert_columns(&key_columns).map_err(err)?;
    let mut seen = std::collections::HashSet::new();
    let indices: Vec<u32> = all
        .iter()
        .enumerate()
        .filter(|(_, r)| !kept.contains(&r.owned()) && seen.insert(r.owned()))
        .filter_map(|(i, _)| u32::try_from(i).ok())
        .collect();
    let indices = arrow::array::UInt32Array::from(indices);
    let taken = key_columns
        .iter()
        .map(|c| take(c.as_ref(), &indices, None))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    RecordBatch::try_new(Arc::new(Schema::new(fields)), taken).map_err(err)
}

impl SinkRunner {
    fn set(&self, f: impl FnOnce(&mut SinkStatus)) {
        f(&mut self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    /// Runs until the source is dropped or the sink fails; see the module docs.
    pub async fn run(mut self) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            match self.attempt(&mut backoff).await {
                Ok(()) => return,
                Err(e) if e.is_transient() => {
                    tracing::warn!(sink = %self.name, error = %e, "sink attempt failed; retrying");
                    self.set(|s| {
                        s.state = SinkState::Retrying;
                        s.retries += 1;
                        s.error = Some(e.to_string());
                        s.sqlstate = Some(e.sqlstate());
                    });
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => {
                    tracing::error!(sink = %self.name, error = %e, "sink stopped");
                    self.set(|s| {
                        s.state = SinkState::Failed;
                        s.error = Some(e.to_string());
                        s.sqlstate = Some(e.sqlstate());
                    });
                    return;
                }
            }
        }
    }

    /// Waits for the source's first consistent version; `None` when the source is gone.
    async fn consistent(&mut self) -> Option<Arc<SourceVersion>> {
        loop {
            self.input.versions.borrow_and_update();
            let version = self.input.published.load_full();
            if version.consistent {
                return Some(version);
            }
            self.input.versions.changed().await.ok()?;
        }
    }

    /// One attempt, from opening the target on; a commit that succeeds resets `backoff`.
    async fn attempt(&mut self, backoff: &mut Duration) -> Result<(), SinkError> {
        self.set(|s| s.state = SinkState::Starting);
        let Some(mut version) = self.consistent().await else {
            return Ok(());
        };
        let mut layout = layout_of(&self.name, &self.query);
        let marker = self.target.open(&layout).await?;
        let mut after: Option<String> = match (&marker, &self.options.start) {
            (Some(m), _) => Some(m.position.clone()),
            (None, StartAt::Snapshot) => None,
            (None, StartAt::After(p)) => Some(p.clone()),
            (None, StartAt::Now) => version.position.as_ref().map(ChangePosition::text_before),
        };
        let mut number = marker.as_ref().map_or(0, |m| m.number);
        let mut cursors = vec![0usize; self.query.scans.len()];
        let mut schemas = self.read_schemas(&version);
        let mode = self.query.mode.name();
        // Nothing read yet: every entry of the tables read counts as lag until the first read
        // (an empty list would show no lag at all).
        let unread: Vec<(usize, usize)> = self.query.scans.iter().map(|s| (s.table, 0)).collect();
        self.set(|s| {
            s.covered = unread;
            s.needs_after = after.clone();
            s.state = SinkState::Running;
            s.mode = Some(mode);
            s.committed = marker.clone();
            s.error = None;
            s.sqlstate = None;
        });
        let mut last_commit: Option<Instant> = None;
        loop {
            if *self.paused.borrow() {
                self.set(|s| s.state = SinkState::Paused);
                while *self.paused.borrow_and_update() {
                    if self.paused.changed().await.is_err() {
                        return Ok(());
                    }
                }
                self.set(|s| s.state = SinkState::Running);
            }
            if let Some(at) = last_commit {
                tokio::time::sleep_until((at + self.options.commit_interval).into()).await;
                // Paused meanwhile: nothing more is read or committed.
                if *self.paused.borrow() {
                    continue;
                }
            }
            self.input.versions.borrow_and_update();
            version = self.input.published.load_full();
            let pending = self.query.scans.iter().zip(&cursors).any(|(s, c)| {
                version
                    .changelogs
                    .get(s.table)
                    .is_some_and(|l| l.num_rows() > *c)
            });
            if !pending {
                self.set(|s| s.behind_since = None);
                tokio::select! {
                    changed = self.input.versions.changed() => {
                        if changed.is_err() {
                            return Ok(());
                        }
                    }
                    _ = self.paused.changed() => {}
                }
                continue;
            }
            self.set(|s| {
                s.behind_since.get_or_insert_with(Instant::now);
            });
            if self.read_schemas(&version) != schemas {
                layout = self.follow_schema(&layout, &version).await?;
                schemas = self.read_schemas(&version);
            }
            let (entries, newest) =
                read_new(&version, &self.query, &mut cursors, after.as_deref()).await?;
            let covered: Vec<(usize, usize)> = self
                .query
                .scans
                .iter()
                .map(|s| s.table)
                .zip(cursors.iter().copied())
                .collect();
            let Some(newest) = newest.filter(|n| after.as_deref().is_none_or(|a| n.as_str() > a))
            else {
                self.set(|s| s.covered = covered);
                continue;
            };
            let (rows, deletes) = self.output(&entries).await?;
            let rows = align(rows, &layout.schema)?;
            let empty = rows.num_rows() == 0 && deletes.as_ref().is_none_or(|d| d.num_rows() == 0);
            if empty {
                // Nothing to write: the entries still count as done for this run, and a
                // later run reading them again would write nothing either.
                after = Some(newest);
                self.set(|s| {
                    s.covered = covered;
                    s.needs_after = after.clone();
                });
                continue;
            }
            let commit = Commit {
                marker: Committed {
                    number: number + 1,
                    position: newest.clone(),
                },
                rows,
                deletes,
            };
            self.target.commit(&commit).await?;
            *backoff = FIRST_BACKOFF;
            number += 1;
            after = Some(newest);
            last_commit = Some(Instant::now());
            let written = commit.rows.num_rows() as u64
                + commit.deletes.as_ref().map_or(0, |d| d.num_rows() as u64);
            self.set(|s| {
                s.committed = Some(commit.marker.clone());
                s.needs_after = after.clone();
                s.covered = covered;
                s.rows += written;
                s.commits += 1;
            });
        }
    }

    /// The changelog schema of each scanned table in `version`.
    fn read_schemas(&self, version: &SourceVersion) -> Vec<Option<SchemaRef>> {
        self.query
            .scans
            .iter()
            .map(|s| {
                version
                    .changelogs
                    .get(s.table)
                    .map(|l| Arc::clone(&l.schema))
            })
            .collect()
    }

    /// A table the sink reads changed its columns: stop, or plan the query again and carry
    /// the target's columns over (new ones added, dropped ones NULL, others unchanged).
    async fn follow_schema(
        &mut self,
        layout: &TargetLayout,
        version: &SourceVersion,
    ) -> Result<TargetLayout, SinkError> {
        let at = version
            .position
            .as_ref()
            .map_or_else(String::new, |p| format!(" at {p}"));
        if self.options.schema_changes == SchemaChanges::Stop {
            return Err(SinkError::SchemaChange(format!(
                "a table sink {} reads changed its columns{at}, and the sink has schema_changes = 'stop'; drop and create the sink again (or create it with schema_changes = 'follow')",
                self.name
            )));
        }
        let query = (self.replan)().await?;
        let mut merged: Vec<Field> = Vec::with_capacity(layout.schema.fields().len());
        for old in layout.schema.fields() {
            let Ok(field) = query.schema.field_with_name(old.name()) else {
                // Dropped at the source: kept, written as NULL.
                merged.push(old.as_ref().clone().with_nullable(true));
                continue;
            };
            let Some(data_type) = merge_type(old.data_type(), field.data_type()) else {
                return Err(SinkError::SchemaChange(format!(
                    "column {} of sink {} changed type from {} to {}{at}; a sink follows added and dropped columns only: drop the sink and create it again to rewrite the target",
                    field.name(),
                    self.name,
                    old.data_type(),
                    field.data_type()
                )));
            };
            merged.push(old.as_ref().clone().with_data_type(data_type));
        }
        if query.key != layout.key {
            return Err(SinkError::SchemaChange(format!(
                "the key of sink {} changed from ({}) to ({}){at}; drop the sink and create it again",
                self.name,
                layout.key.join(", "),
                query.key.join(", ")
            )));
        }
        let mut fields = merged;
        for f in query.schema.fields() {
            if layout.schema.field_with_name(f.name()).is_err() {
                fields.push(f.as_ref().clone().with_nullable(true));
            }
        }
        // Cursors index entries per scan: a new plan reads the same tables in the same order.
        let same_tables = query.scans.iter().map(|s| s.table).eq(self
            .query
            .scans
            .iter()
            .map(|s| s.table));
        if !same_tables {
            return Err(SinkError::SchemaChange(format!(
                "the tables sink {} reads changed{at}; drop the sink and create it again",
                self.name
            )));
        }
        self.query = query;
        Ok(TargetLayout {
            schema: Arc::new(Schema::new(fields)),
            ..layout.clone()
        })
    }

    /// The rows (and, upserting, the keys to delete) one commit writes for `entries`.
    async fn output(
        &self,
        entries: &[Vec<RecordBatch>],
    ) -> Result<(RecordBatch, Option<RecordBatch>), SinkError> {
        let query = &self.query;
        match query.mode {
            SinkMode::Changelog => {
                let inputs = query
                    .scans
                    .iter()
                    .zip(entries)
                    .map(|(scan, batches)| {
                        batches
                            .iter()
                            .map(|b| adapt(b.clone(), &scan.schema))
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| SinkError::Input(e.to_string()))?;
                let plan = query.bind(&query.plan, &inputs)?;
                Ok((execute(&self.state, plan, &query.schema).await?, None))
            }
            SinkMode::Upsert => {
                let mut upserts = Vec::with_capacity(entries.len());
                let mut touched = Vec::with_capacity(entries.len());
                for (scan, batches) in query.scans.iter().zip(entries) {
                    let ScanKind::Current(table) = &scan.kind else {
                        return Err(SinkError::Input("an upsert sink reads a changelog".into()));
                    };
                    let net = net_changes(table, &scan.schema, batches)?;
                    touched.push(vec![net.upserts.clone(), net.deletes]);
                    upserts.push(vec![net.upserts]);
                }
                let rows = execute(
                    &self.state,
                    query.bind(&query.plan, &upserts)?,
                    &query.schema,
                )
                .await?;
                let unfiltered = query.unfiltered.as_ref().unwrap_or(&query.plan);
                let keys = execute(
                    &self.state,
                    query.bind(unfiltered, &touched)?,
                    &query.schema,
                )
                .await?;
                let deletes = deletions(&keys, &rows, &query.key)?;
                Ok((rows, Some(deletes)))
            }
        }
    }
}
