//! One running source: its capture task, and the versions it publishes for queries.
//!
//! # Publication
//! The task owns the [`Capture`]. After the hand-off, and then after every source transaction,
//! it appends the transaction's changelog entries, takes snapshots of the tables the
//! transaction touched (O(changed rows)), and swaps in a new [`SourceVersion`] holding all
//! tables at the transaction's end position. Readers load versions without locks.
//!
//! # Durability
//! A source of a durable engine first looks for its newest checkpoint: if there is one, the
//! capture resumes from it (`durable::recover`) and publishes the recovered state at once;
//! otherwise it snapshots. From the first published version on, a checkpoint loop writes the
//! latest published version every interval (`durable::checkpoint`), and the status shows the
//! live position and the durable one.
//!
//! # Failure
//! A definite capture error, or a panic in any of the source's tasks (capture, window reader,
//! checkpoints, server poll), stops the source: the fault is kept in its status and its
//! [`Health`](crate::provider::health::Health), so its tables refuse queries (the last
//! published version stays readable to sessions that ask for stale reads), and the other
//! sources go on. A table stopped by a DDL is carried in the published versions instead.
//! Transient errors are retried inside the capture. A checkpoint that failed transiently is
//! retried with backoff (the source shows `retrying`); any other failed checkpoint is shown in
//! the status and retried at the next interval.
//!
//! # Connection
//! Every task and the server poll reach the server through the source's one [`Link`] (URL,
//! the servers it names and the one in use, and the replica id the binlog connection registers
//! with). `ALTER SOURCE ... SET (password | user | url | server_id)` checks a new link against
//! the server before anything changes, then replaces it, restarts the poll on it and resumes
//! the capture from the published version: no change is read twice or lost. A link to another
//! address is a move to another server, which goes on after the source's GTIDs once that server
//! is checked to have them all (`engine::servers`, `engine::histories`), or where the statement
//! names: a position of the new server, or a re-snapshot there.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::error::EngineError;
use super::histories::Histories;
use super::poll::PollOf;
use super::retention::Retention;
use super::run::{checkpoint_loop, run};
use super::servers::{plan_move, stand_at, GoesOn, Link, SharedLink};
use super::source_status::SourceStatus;
use super::task::{Mode, Task};
use crate::capture::version::{Published, SourceVersion};
use crate::capture::{Capture, CaptureOptions};
use crate::change::errant::BinlogState;
use crate::change::position::BinlogCoord;
use crate::change::schema::TableId;
use crate::durable::{Checkpointer, DurableError};
use crate::locks::{Locked, RwLocked};
use crate::provider::health::SharedHealth;
use crate::source::connect::ConnectOptions;
use crate::source::error::{SourceError, SourceResult};
use crate::source::snapshot::incremental::Progress;
use crate::sql::{
    parse_cdc_statement, CdcStatement, ConnectionChange, MoveStart, MySqlUrl, SourceChanges,
};

/// The engine's sources by name.
pub(crate) type Sources = RwLock<BTreeMap<String, Arc<RunningSource>>>;

/// Weak handle used by status tables.
pub(crate) type SourcesRef = Weak<Sources>;

/// A source registered in the engine.
#[derive(Debug)]
pub struct RunningSource {
    pub name: String,
    /// How the source reaches its server now (`ALTER SOURCE ... SET` changes it); a capture
    /// task started later takes this one.
    link: SharedLink,
    /// The `CREATE SOURCE` statement, password masked (empty when created from Rust); `ALTER
    /// SOURCE ... SET` changes its options.
    definition: RwLock<String>,
    pub published: Published,
    /// Counts publications, so tails can wait for the next one.
    pub versions: watch::Receiver<u64>,
    pub progress: Arc<Progress>,
    pub status: Arc<Mutex<SourceStatus>>,
    /// The fault that stopped the source, checked by every scan of its tables.
    pub health: SharedHealth,
    /// Becomes true when the first version (the end of the hand-off) is published, or the
    /// capture fails.
    ready: watch::Receiver<bool>,
    /// Writes the checkpoints of a durable engine's source.
    pub checkpointer: Option<Arc<Checkpointer>>,
    /// What a new capture task needs (after `RESNAPSHOT`).
    shared: Task,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Held for the whole of a re-snapshot, so two cannot interleave.
    restarting: tokio::sync::Mutex<()>,
    poller: Mutex<tokio::task::JoinHandle<()>>,
    /// What a server poll is started with, besides the connection.
    poll: PollOf,
    checkpoints: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for RunningSource {
    fn drop(&mut self) {
        if let Some(task) = self.task.locked().take() {
            task.abort();
        }
        self.poller.locked().abort();
        if let Some(c) = &self.checkpoints {
            c.abort();
        }
    }
}

impl RunningSource {
    /// Starts capturing in a background task.
    pub fn start(
        name: &str,
        url: &str,
        definition: String,
        options: CaptureOptions,
        checkpointer: Option<Arc<Checkpointer>>,
    ) -> SourceResult<Self> {
        let url = MySqlUrl::parse(url).map_err(SourceError::Config)?;
        let link = Link::new(url, options.read_timeout, options.server_id)?;
        let connect = link.connect.clone();
        let link: SharedLink = Arc::new(RwLock::new(link));
        let published: Published = Arc::new(ArcSwap::from_pointee(SourceVersion::default()));
        let progress = Arc::new(Progress::default());
        let status = Arc::new(Mutex::new(SourceStatus::default()));
        let (ready_tx, ready) = watch::channel(false);
        let (versions_tx, versions) = watch::channel(0u64);
        let health = SharedHealth::default();
        // Filled by the capture task as it starts (`engine::histories`).
        let histories: Arc<Histories> = Arc::default();
        let poll = PollOf {
            name: name.to_string(),
            status: Arc::clone(&status),
            health: Arc::clone(&health),
            published: Arc::clone(&published),
            purge_warning: Arc::new(AtomicU64::new(options.purge_warning.as_secs())),
            histories: Arc::clone(&histories),
            link: Arc::clone(&link),
            checkpointer: checkpointer.clone(),
        };
        let poller = poll.spawn(connect.clone());
        let checkpoints = checkpointer.as_ref().map(|c| {
            tokio::spawn(checkpoint_loop(
                name.to_string(),
                Arc::clone(c),
                Arc::clone(&published),
                Arc::clone(&status),
                Arc::clone(&health),
            ))
        });
        let shared = Task {
            connect,
            options: options.clone(),
            published: Arc::clone(&published),
            progress: Arc::clone(&progress),
            status: Arc::clone(&status),
            ready: Arc::new(ready_tx),
            versions: Arc::new(versions_tx),
            checkpointer: checkpointer.clone(),
            health: Arc::clone(&health),
            journal: Arc::default(),
            retention: Arc::new(Retention::new(options.retain_history)),
            histories,
            link: Arc::clone(&link),
        };
        let task = tokio::spawn(run(shared.clone(), Mode::Start));
        Ok(Self {
            name: name.to_string(),
            link,
            definition: RwLock::new(definition),
            published,
            versions,
            progress,
            status,
            health,
            ready,
            checkpointer,
            shared,
            task: Mutex::new(Some(task)),
            restarting: tokio::sync::Mutex::new(()),
            poller: Mutex::new(poller),
            poll,
            checkpoints,
        })
    }

    /// The `CREATE SOURCE` statement, password masked (empty when created from Rust).
    pub fn definition(&self) -> String {
        self.definition.read_locked().clone()
    }

    /// How much history the source keeps, and the sinks that hold it.
    pub(crate) fn retention(&self) -> &Arc<Retention> {
        &self.shared.retention
    }

    /// `ALTER SOURCE ... SET`: the running source takes `changes` (its next trim uses them)
    /// and shows them in its definition.
    pub(crate) fn alter(&self, changes: &SourceChanges) {
        if let Some(policy) = changes.retain_history {
            self.shared.retention.set_policy(policy);
        }
        if let Some(within) = changes.purge_warning {
            self.poll
                .purge_warning
                .store(within.as_secs(), Ordering::Relaxed);
        }
        let mut definition = self.definition.write_locked();
        if let Ok(Some(CdcStatement::CreateSource(mut create))) = parse_cdc_statement(&definition) {
            create.options = create.options.altered(changes);
            if !changes.connection.is_empty() {
                create.url = self.link.read_locked().url.clone();
            }
            *definition = create.to_string();
        }
    }

    /// `ALTER SOURCE ... RESNAPSHOT`: stops the capture, snapshots every table again and
    /// appends to the changelog only what differs from the published state (see
    /// `engine::resnapshot`); returns once the new capture task runs (see [`Self::wait_ready`]).
    pub async fn resnapshot(&self) {
        let _restarting = self.restarting.lock().await;
        self.restart(Mode::Resnapshot).await;
    }

    /// `ALTER SOURCE ... RESNAPSHOT TABLE db.t`: reads one table again and repairs its state
    /// without touching the others' (see `engine::resnapshot`); returns once the new capture
    /// task runs (see [`Self::wait_ready`]). Refused, with the capture left as it is, for a
    /// table the source does not capture, a source with nothing published yet, and a source
    /// whose binlog at its published position was purged (only `RESNAPSHOT` repairs that).
    pub async fn resnapshot_table(&self, table: &TableId) -> Result<(), EngineError> {
        let _restarting = self.restarting.lock().await;
        let tables = self.status().tables;
        let index =
            tables
                .iter()
                .position(|t| t.id == *table)
                .ok_or_else(|| EngineError::NoSuchTable {
                    name: self.name.clone(),
                    table: table.to_string(),
                })?;
        let refuse = |reason: String| EngineError::CannotResnapshotTable {
            name: self.name.clone(),
            reason,
        };
        let position = self
            .published
            .load()
            .position
            .clone()
            .ok_or_else(|| refuse("it has published no state yet".into()))?;
        // A table whose columns changed is read under its new ones (`engine::resnapshot`);
        // one the server no longer has cannot be read at all.
        let connect = self.connect();
        Capture::resolve_tables(&connect, std::slice::from_ref(table)).await?;
        // On another server than the position's the others go on by GTID (checked then).
        let here = position.history() == connect.history;
        match Capture::check_binlog(&connect, &position).await {
            _ if !here => {}
            Ok(()) => {}
            Err(SourceError::BinlogUnavailable { needed, .. }) => {
                let reason = format!("the other tables need the binlog from {needed} on");
                return Err(refuse(reason + ", which the server no longer has"));
            }
            Err(e) => return Err(e.into()),
        }
        self.restart(Mode::ResnapshotTable(index)).await;
        Ok(())
    }

    /// Stops the capture task, clears its status and faults, and starts a new task in `mode`
    /// (the caller holds `restarting`).
    async fn restart(&self, mode: Mode) {
        self.stop_task().await;
        self.start_task(mode);
    }

    /// Stops the capture task, and waits until it is gone: it must not publish after the
    /// next task read the state.
    async fn stop_task(&self) {
        let old = self.task.locked().take();
        if let Some(old) = old {
            old.abort();
            let _ = old.await;
        }
    }

    /// Starts a capture task in `mode`; none runs.
    fn start_task(&self, mode: Mode) {
        let _ = self.shared.ready.send(false);
        self.status.locked().error = None;
        self.health.clear_source();
        let mut shared = self.shared.clone();
        shared.connect = self.connect();
        let server_id = self.link.read_locked().server_id;
        if server_id != shared.options.server_id {
            // `ALTER SOURCE ... SET (server_id = ...)`; its window reader takes the next id,
            // as `CREATE SOURCE` gives it.
            shared.options.server_id = server_id;
            shared.options.snapshot.window_server_id = server_id.saturating_add(1);
        }
        let task = tokio::spawn(run(shared, mode));
        *self.task.locked() = Some(task);
    }

    /// Writes a checkpoint of the published version now (a clean stop); `Ok(None)` when the
    /// source is not durable or has nothing new.
    pub async fn checkpoint_now(&self) -> Result<Option<BinlogCoord>, DurableError> {
        let Some(c) = &self.checkpointer else {
            return Ok(None);
        };
        let position = c.checkpoint(&self.published.load_full()).await?;
        if let Some(p) = &position {
            self.status.locked().durable_position = Some(p.clone());
        }
        Ok(position)
    }

    /// Waits until the hand-off is published (the current tables are consistent) or the
    /// capture failed; returns the error in that case.
    pub async fn wait_ready(&self) -> Result<(), String> {
        let mut ready = self.ready.clone();
        let _ = ready.wait_for(|r| *r).await;
        match self.status.locked().error.clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits until the published version has reached `target` (a transaction boundary taken
    /// from the server), or the capture failed.
    pub async fn wait_for(&self, target: &BinlogCoord) -> Result<(), String> {
        loop {
            if let Some(e) = self.status.locked().error.clone() {
                return Err(e);
            }
            if self
                .published
                .load()
                .position
                .as_ref()
                .is_some_and(|p| p >= target)
            {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// How to reach the server (with the password), for reads straight from it.
    pub(crate) fn connect(&self) -> ConnectOptions {
        let mut connect = self.link.read_locked().connect.clone();
        connect.history = self.shared.histories.current();
        connect
    }

    /// The server (`host:port`) each history of the source's positions was read from.
    pub fn servers(&self) -> Vec<String> {
        self.shared.histories.list()
    }

    /// The URL with the password masked.
    pub fn url(&self) -> String {
        self.link.read_locked().url.masked()
    }

    /// Checks that the source can go on at the server `connection` leads to, as `start`
    /// asks (see [`plan_move`]): credentials the server takes, privileges and binlog settings
    /// that pass the start-up checks, and at another server the GTIDs or the position to go
    /// on at. Changes nothing; the link it returns is for [`Self::reconnect`].
    pub(crate) async fn check_connection(
        &self,
        connection: &ConnectionChange,
        start: Option<&MoveStart>,
        accept_errant: bool,
    ) -> Result<(Link, GoesOn), EngineError> {
        let now = self.link.read_locked().clone();
        let url = connection
            .apply(&now.url)
            .map_err(|reason| EngineError::Source(SourceError::Config(reason)))?;
        let mut next = Link::new(url, now.connect.read_timeout, now.server_id)?;
        let info = next.checked_server().await?;
        let goes_on = plan_move(
            &self.published.load_full(),
            &self.shared.histories,
            &now.connect,
            (&next.connect, &info),
            start,
            accept_errant,
        )
        .await?;
        Ok((next, goes_on))
    }

    /// The way to the server `changes` give (a checked connection, a new replica id) and
    /// where the source goes on there, or `None` when they change neither.
    pub(crate) async fn next_link(
        &self,
        changes: &SourceChanges,
    ) -> Result<Option<(Link, GoesOn)>, EngineError> {
        if changes.connection.is_empty() && changes.server_id.is_none() {
            return Ok(None);
        }
        let (mut link, goes_on) = if changes.connection.is_empty() {
            let goes_on = match changes.start {
                Some(MoveStart::Resnapshot) => GoesOn::Resnapshot,
                _ => GoesOn::Published {
                    accepted: BinlogState::default(),
                },
            };
            (self.link.read_locked().clone(), goes_on)
        } else {
            self.check_connection(
                &changes.connection,
                changes.start.as_ref(),
                changes.accept_errant,
            )
            .await?
        };
        if let Some(id) = changes.server_id {
            link.server_id = id;
        }
        Ok(Some((link, goes_on)))
    }

    /// Goes on at the server through `link` (checked by [`Self::check_connection`]) where
    /// `goes_on` says: from the published version (nothing read twice or skipped), after a
    /// re-snapshot, or at a named start; the lag poll reads through it.
    pub(crate) async fn reconnect(&self, link: Link, goes_on: GoesOn) -> Result<(), EngineError> {
        let _restarting = self.restarting.lock().await;
        let poller = self.poll.spawn(link.connect.clone());
        *self.link.write_locked() = link;
        std::mem::replace(&mut *self.poller.locked(), poller).abort();
        if goes_on == GoesOn::Resnapshot {
            self.restart(Mode::Resnapshot).await;
            return Ok(());
        }
        self.stop_task().await;
        let placed = stand_at(
            &goes_on,
            &self.published,
            &self.shared.histories,
            self.checkpointer.as_deref(),
        )
        .await;
        // The capture goes on either way: a checkpoint that failed leaves the named start
        // published, and the checkpoint loop writes it later.
        self.start_task(Mode::Resume);
        placed
    }

    /// The options the source was created with.
    pub(crate) fn capture_options(&self) -> &CaptureOptions {
        &self.shared.options
    }

    pub fn status(&self) -> SourceStatus {
        self.status.locked().clone()
    }
}
