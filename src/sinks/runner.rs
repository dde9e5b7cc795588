//! The loop of one sink: read what its source published since the committed position, run
//! the query over it, commit the result, and start again from the target after a failure.
//! While entries wait (a sink catching up), the next commit is made ready (`sinks::step`)
//! while the one before it is written.
//!
//! # Invariant
//! A commit covers the changelog entries of one published version up to a cut
//! (`sinks::read`): whole source transactions only, at most about `max_commit_entries` of
//! them. The runner keeps no position of its own: every attempt
//! starts from the marker the target returns, so a crash or a failed commit can neither skip
//! nor repeat an entry (the target holds exactly once). Transient failures are retried with
//! backoff; any other failure stops the sink with its error and SQLSTATE. The only thing kept
//! across attempts is the tables' columns the sink was planned for, so a column change made
//! while it retries is still met (stopped at, or followed) when the target is back.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use datafusion::execution::session_state::SessionState;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::SinkError;
use super::query::SinkQuery;
use super::read::start_cursors;
use super::renames::renames;
use super::spec::{SchemaChanges, SinkOptions, StartAt};
use super::status::{SinkState, SinkStatus};
use super::step::{Prepare, Step};
use super::target::{Commit, Committed, Target, TargetLayout};
use crate::capture::version::{Published, SourceVersion};
use crate::change::position::ChangePosition;
use crate::locks::Locked;
use crate::sqlstate::HasSqlState;

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

impl SinkRunner {
    fn set(&self, f: impl FnOnce(&mut SinkStatus)) {
        f(&mut self.status.locked());
    }

    /// Runs until the source is dropped or the sink fails; see the module docs.
    pub async fn run(mut self) {
        let mut backoff = FIRST_BACKOFF;
        // The changelog schemas the query and the target's columns stand for, kept across
        // attempts: an attempt that started after a table changed its columns must still see
        // the change (and stop, or follow it), not take the new columns as where it began.
        let mut planned: Option<Vec<Option<SchemaRef>>> = None;
        loop {
            match self.attempt(&mut backoff, &mut planned).await {
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
    /// `planned` holds the schemas the query was planned for (the first attempt's, until the
    /// sink follows a change).
    async fn attempt(
        &mut self,
        backoff: &mut Duration,
        planned: &mut Option<Vec<Option<SchemaRef>>>,
    ) -> Result<(), SinkError> {
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
            (None, StartAt::Now) => version
                .position
                .as_ref()
                .map(ChangePosition::text_after_version),
        };
        let mut number = marker.as_ref().map_or(0, |m| m.number);
        // Segments before the committed position are not read again.
        let tables: Vec<usize> = self.query.scans.iter().map(|s| s.table).collect();
        let mut cursors = start_cursors(&version.changelogs, &tables, after.as_deref()).await?;
        if planned.is_none() {
            *planned = Some(self.read_schemas(&version));
        }
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
        // The last read left entries for the next commit: it follows without waiting.
        let mut more = false;
        let mut prepare = self.prepare(&layout);
        // The next step, made ready while the commit before it was written.
        let mut ahead: Option<JoinHandle<Result<Step, SinkError>>> = None;
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
            if let Some(at) = last_commit.filter(|_| !more) {
                tokio::time::sleep_until((at + self.options.commit_interval).into()).await;
                // Paused meanwhile: nothing more is read or committed.
                if *self.paused.borrow() {
                    continue;
                }
            }
            let step = match ahead.take() {
                Some(ready) => ready.await.map_err(|e| {
                    SinkError::Input(format!("making the next commit ready: {e}"))
                })??,
                None => {
                    self.input.versions.borrow_and_update();
                    version = self.input.published.load_full();
                    let pending = tables.iter().zip(&cursors).any(|(&t, c)| {
                        version.changelogs.get(t).is_some_and(|l| l.num_rows() > *c)
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
                    let now = self.read_schemas(&version);
                    if planned.as_ref() != Some(&now) {
                        layout = self.follow_schema(&layout, &version).await?;
                        *planned = Some(now);
                        prepare = self.prepare(&layout);
                    }
                    prepare
                        .step(&version, cursors.clone(), after.as_deref())
                        .await?
                }
            };
            cursors.clone_from(&step.cursors);
            more = step.more;
            let covered: Vec<(usize, usize)> = tables
                .iter()
                .copied()
                .zip(cursors.iter().copied())
                .collect();
            let (Some(newest), Some((rows, deletes))) = (step.newest, step.output) else {
                self.set(|s| s.covered = covered);
                continue;
            };
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
            if more {
                // Entries wait: the next step is made ready while this commit is written.
                let prepare = Arc::clone(&prepare);
                let version = Arc::clone(&version);
                let cursors = cursors.clone();
                let from = newest.clone();
                ahead = Some(tokio::spawn(async move {
                    prepare.step(&version, cursors, Some(&from)).await
                }));
            }
            let commit = Commit {
                marker: Committed {
                    number: number + 1,
                    position: newest.clone(),
                },
                rows,
                deletes,
            };
            if let Err(e) = self.target.commit(&commit).await {
                if let Some(ready) = ahead.take() {
                    ready.abort();
                }
                return Err(e);
            }
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

    /// What making the next commit ready needs, for the query and target columns in force.
    fn prepare(&self, layout: &TargetLayout) -> Arc<Prepare> {
        Arc::new(Prepare {
            query: self.query.clone(),
            state: self.state.clone(),
            schema: Arc::clone(&layout.schema),
            tables: self.query.scans.iter().map(|s| s.table).collect(),
            max_entries: self.options.max_commit_entries,
        })
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
        let scanned: Vec<usize> = self.query.scans.iter().map(|s| s.table).collect();
        for r in renames(&version.schema_history, &scanned) {
            let has = |name: &str| layout.schema.field_with_name(name).is_ok();
            // Not yet in the target under its new name: the rename is new to this sink.
            if has(&r.from) && !has(&r.to) {
                return Err(SinkError::SchemaChange(format!(
                    "column {} of {} was renamed to {} at {}; sink {} does not follow a rename (its target would end the column there and start a new one): drop the sink and create it again to write the target under the new name",
                    r.from, r.table, r.to, r.position, self.name
                )));
            }
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
}
