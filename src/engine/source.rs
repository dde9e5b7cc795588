//! One running source: its capture task, and the versions it publishes for queries.
//!
//! # Publication
//! The task owns the [`Capture`]. After the hand-off, and then after every source transaction,
//! it appends the transaction's changelog entries, takes snapshots of the tables the
//! transaction touched (O(changed rows)), and swaps in a new [`SourceVersion`] holding all
//! tables at the transaction's end position. Readers load versions without locks.
//!
//! # Failure
//! A definite capture error stops the task and is kept in the source's status; the last
//! published version stays queryable. Transient errors are retried inside the capture.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::capture::{Capture, CaptureOptions, TableChange};
use crate::provider::{Published, SourceVersion};
use crate::source::connect::{current_position, ConnectOptions};
use crate::source::error::SourceResult;
use crate::source::position::BinlogCoord;
use crate::source::schema::Flavor;
use crate::source::schema::TableSchema;
use crate::source::snapshot::incremental::Progress;
use crate::state::changelog::{changelog_batch, Changelog};

/// What a source's status shows.
#[derive(Debug, Clone, Default)]
pub struct SourceStatus {
    pub tables: Vec<Arc<TableSchema>>,
    pub server_version: String,
    pub flavor: String,
    pub error: Option<String>,
    /// Transactions applied since the hand-off.
    pub transactions: u64,
    /// Commit time (µs) of the last applied transaction.
    pub last_commit_ts_micros: Option<i64>,
    /// The server's own binlog end, polled every [`SERVER_POLL`].
    pub server_position: Option<BinlogCoord>,
}

/// How often the server's binlog end is read for lag.
pub const SERVER_POLL: std::time::Duration = std::time::Duration::from_secs(1);

impl SourceStatus {
    /// Bytes of binlog between the published position and the server's end, when both are in
    /// the same file (across a rotation the sizes of the files between are not tracked).
    pub fn lag_bytes(&self, published: Option<&BinlogCoord>) -> Option<u64> {
        let (p, s) = (published?, self.server_position.as_ref()?);
        (p.file == s.file).then(|| s.offset.saturating_sub(p.offset))
    }

    /// Seconds between the last applied commit and now; 0 when nothing is pending.
    pub fn lag_seconds(&self, published: Option<&BinlogCoord>) -> Option<f64> {
        if self.lag_bytes(published) == Some(0) {
            return Some(0.0);
        }
        let last = self.last_commit_ts_micros?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_micros() as i64;
        Some((now - last).max(0) as f64 / 1e6)
    }
}

/// A source registered in the engine.
#[derive(Debug)]
pub struct RunningSource {
    pub name: String,
    /// The URL with the password masked.
    pub url: String,
    /// The `CREATE SOURCE` statement, password masked (empty when created from Rust).
    pub definition: String,
    pub published: Published,
    /// Counts publications, so tails can wait for the next one.
    pub versions: watch::Receiver<u64>,
    pub progress: Arc<Progress>,
    pub status: Arc<Mutex<SourceStatus>>,
    /// How to reach the server (with the password), for reads straight from it.
    pub(crate) connect: ConnectOptions,
    /// The options the source was created with.
    pub(crate) options: CaptureOptions,
    /// Becomes true when the first version (the end of the hand-off) is published, or the
    /// capture fails.
    ready: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
    poller: tokio::task::JoinHandle<()>,
}

impl Drop for RunningSource {
    fn drop(&mut self) {
        self.task.abort();
        self.poller.abort();
    }
}

impl RunningSource {
    /// Starts capturing in a background task.
    pub fn start(
        name: &str,
        url: &str,
        masked_url: &str,
        definition: String,
        options: CaptureOptions,
    ) -> SourceResult<Self> {
        let connect = ConnectOptions::from_url(url)?;
        let published: Published = Arc::new(ArcSwap::from_pointee(SourceVersion::default()));
        let progress = Arc::new(Progress::default());
        let status = Arc::new(Mutex::new(SourceStatus::default()));
        let (ready_tx, ready) = watch::channel(false);
        let (versions_tx, versions) = watch::channel(0u64);
        let poller = tokio::spawn(poll_server(connect.clone(), Arc::clone(&status)));
        let task = tokio::spawn(run(
            connect.clone(),
            options.clone(),
            Arc::clone(&published),
            Arc::clone(&progress),
            Arc::clone(&status),
            ready_tx,
            versions_tx,
        ));
        Ok(Self {
            name: name.to_string(),
            url: masked_url.to_string(),
            definition,
            published,
            versions,
            progress,
            status,
            connect,
            options,
            ready,
            task,
            poller,
        })
    }

    /// Waits until the hand-off is published (the current tables are consistent) or the
    /// capture failed; returns the error in that case.
    pub async fn wait_ready(&self) -> Result<(), String> {
        let mut ready = self.ready.clone();
        let _ = ready.wait_for(|r| *r).await;
        match self.status.lock().expect("status").error.clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits until the published version has reached `target` (a transaction boundary taken
    /// from the server), or the capture failed.
    pub async fn wait_for(&self, target: &BinlogCoord) -> Result<(), String> {
        loop {
            if let Some(e) = self.status.lock().expect("status").error.clone() {
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

    pub fn status(&self) -> SourceStatus {
        self.status.lock().expect("status").clone()
    }
}

/// Reads the server's binlog end every [`SERVER_POLL`] for the lag columns; a failed read
/// leaves the last value (the capture reports connection errors itself).
async fn poll_server(connect: ConnectOptions, status: Arc<Mutex<SourceStatus>>) {
    let mut conn = None;
    loop {
        if conn.is_none() {
            conn = connect.connect().await.ok();
        }
        let flavor = if status.lock().expect("status").flavor == "MySql" {
            Flavor::MySql
        } else {
            Flavor::MariaDb
        };
        if let Some(c) = conn.as_mut() {
            match current_position(c, flavor).await {
                Ok((position, _)) => {
                    status.lock().expect("status").server_position = Some(position)
                }
                Err(_) => conn = None,
            }
        }
        tokio::time::sleep(SERVER_POLL).await;
    }
}

async fn run(
    connect: ConnectOptions,
    options: CaptureOptions,
    published: Published,
    progress: Arc<Progress>,
    status: Arc<Mutex<SourceStatus>>,
    ready: watch::Sender<bool>,
    versions: watch::Sender<u64>,
) {
    let result = capture_loop(
        connect, options, &published, progress, &status, &ready, &versions,
    )
    .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "source stopped");
        status.lock().expect("status").error = Some(e.to_string());
    }
    let _ = ready.send(true);
}

/// Per-table transaction numbering for `_tx`: snapshot reads are 0, every binlog transaction
/// gets the next number in order.
#[derive(Debug, Default)]
struct TxNumbers {
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
}

async fn capture_loop(
    connect: ConnectOptions,
    options: CaptureOptions,
    published: &Published,
    progress: Arc<Progress>,
    status: &Mutex<SourceStatus>,
    ready: &watch::Sender<bool>,
    versions: &watch::Sender<u64>,
) -> SourceResult<()> {
    let (mut capture, handoff) =
        Capture::start_with_progress(connect, options, Arc::clone(&progress)).await?;
    {
        let mut s = status.lock().expect("status");
        s.tables = capture.tables().to_vec();
        s.server_version = capture.server().version.clone();
        s.flavor = format!("{:?}", capture.server().flavor);
    }
    let mut changelogs: Vec<Changelog> = capture
        .tables()
        .iter()
        .map(|t| Changelog::new(&t.arrow))
        .collect();
    let mut numbers = TxNumbers::default();
    append(&capture, &mut changelogs, &handoff, &mut numbers)?;
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
    }));
    let _ = ready.send(true);
    versions.send_modify(|v| *v += 1);
    while let Some((tx, changes)) = capture.next().await? {
        append(&capture, &mut changelogs, &changes, &mut numbers)?;
        let touched: std::collections::BTreeSet<usize> = changes.iter().map(|c| c.table).collect();
        let previous = published.load_full();
        let mut version = SourceVersion {
            position: Some(tx.end.clone()),
            consistent: true,
            tables: previous.tables.clone(),
            changelogs: previous.changelogs.clone(),
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
            let mut s = status.lock().expect("status");
            s.transactions += 1;
            s.last_commit_ts_micros = Some(tx.commit_ts_micros);
        }
    }
    Ok(())
}

/// Appends changes to the changelogs, one segment per table.
fn append(
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
            crate::source::error::SourceError::Config(format!(
                "building the changelog of {}: {e}",
                capture.tables()[t].id
            ))
        })?;
        changelogs[t].append(segment);
    }
    Ok(())
}
