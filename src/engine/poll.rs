//! The server poll of a running source: every [`SERVER_POLL`] it reads the server's binlog end
//! (and, when due, its binlog files and purge settings) into the source's status, for the lag
//! columns and the binlog retention watch (`engine::purge_watch`), and a MariaDB server's
//! binlog state into the source's histories (`engine::histories`), for the errant check of a
//! later move.
//!
//! # Invariant
//! The poll only reads the server and writes the status and what is known of the server's
//! binlog: it never changes what the capture does. It reads through the source's link, so
//! after a move it polls the new server, and it compares only positions of the history of the
//! server it reads; it adds a binlog state only to the history of the very server it read
//! (address and identity).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use mysql_async::Conn;

use super::histories::Histories;
use super::purge_watch::{watch, PurgeWatch, WatchInput};
use super::servers::{server_name, SharedLink};
use super::source_status::{now_micros, SourceStatus, SERVER_POLL};
use super::stop::{fail, panicked};
use crate::capture::version::Published;
use crate::change::schema::Flavor;
use crate::durable::Checkpointer;
use crate::locks::{Locked, RwLocked};
use crate::provider::health::SharedHealth;
use crate::source::binlog::files::{binlog_files, purge_settings, BinlogFile, PurgeSettings};
use crate::source::connect::ConnectOptions;
use crate::source::error::SourceResult;

/// What the server poll reads besides the server itself.
#[derive(Debug, Clone)]
pub(super) struct PollOf {
    pub name: String,
    pub status: Arc<Mutex<SourceStatus>>,
    pub health: SharedHealth,
    pub published: Published,
    /// Seconds: warn when the position's binlog may be purged within this.
    pub purge_warning: Arc<AtomicU64>,
    /// The history of the server's positions (the source may have moved to it).
    pub histories: Arc<Histories>,
    /// The server in use, read again whenever the poll reconnects (the source may have moved).
    pub link: SharedLink,
    /// Where the servers' binlog states are checkpointed (a durable engine).
    pub checkpointer: Option<Arc<Checkpointer>>,
}

/// The binlog files are listed again at least this often (a `PURGE BINARY LOGS` removes old
/// ones at any time); otherwise only when the server writes a file the list does not have:
/// the sizes the watch adds up are those of closed files, which do not change.
const BINLOG_RELIST: Duration = Duration::from_secs(10);

/// A poll's connection to the server, and what it read once on opening it.
struct Opened {
    conn: Conn,
    settings: PurgeSettings,
    /// The server's name in the source's histories (MariaDB, whose binlog state the poll
    /// records).
    name: Option<String>,
}

/// The server's binlog files as a poll last listed them, and when.
struct Listing {
    at: Instant,
    files: Vec<BinlogFile>,
}

impl PollOf {
    /// A server poll through `connect`.
    pub fn spawn(&self, connect: ConnectOptions) -> tokio::task::JoinHandle<()> {
        tokio::spawn(poll_server(self.clone(), connect))
    }

    fn flavor(&self) -> Flavor {
        if self.status.locked().flavor == "MySql" {
            Flavor::MySql
        } else {
            Flavor::MariaDb
        }
    }

    /// A connection to the server, read once per connection: its purge settings (they change
    /// rarely, and a change is seen at the next reconnect) and, on MariaDB, its name as the
    /// source's histories give it.
    async fn open(&self, connect: &ConnectOptions) -> Option<Opened> {
        let mut conn = connect.connect().await.ok()?;
        let read = purge_settings(&mut conn, self.flavor());
        let settings = connect
            .bounded(|| "reading the purge settings".into(), read)
            .await
            .ok()?;
        // A server that fails the checks is still polled for its lag; its state is not kept.
        let name = match self.flavor() {
            Flavor::MariaDb => connect
                .checked(&mut conn)
                .await
                .ok()
                .map(|info| server_name(connect, &info)),
            Flavor::MySql => None,
        };
        Some(Opened {
            conn,
            settings,
            name,
        })
    }

    /// Reads the server's binlog end, and its files when due (into `listing`, the poll's
    /// own: the status is only written), into the status; on MariaDB, its binlog state into
    /// the source's histories (checkpointed when it adds to them), for the errant check of a
    /// later move (`change::errant`).
    async fn read(
        &self,
        connect: &ConnectOptions,
        server: &mut Opened,
        listing: &mut Option<Listing>,
    ) -> SourceResult<()> {
        let conn = &mut server.conn;
        if let Some(name) = &server.name {
            let state = connect.binlog_state(conn).await?;
            if self.histories.record_current(name, &state) {
                if let Some(c) = &self.checkpointer {
                    c.set_servers(self.histories.list(), self.histories.states());
                }
            }
        }
        let (position, _) = connect.position(conn, self.flavor()).await?;
        let position = position.in_history(self.histories.current());
        let due = listing.as_ref().is_none_or(|l| {
            l.at.elapsed() >= BINLOG_RELIST || !l.files.iter().any(|f| *f.name == *position.file)
        });
        let mut listed = None;
        if due {
            let files = connect
                .bounded(|| "listing the binlogs".into(), binlog_files(conn))
                .await?;
            listed = Some(files.clone());
            *listing = Some(Listing {
                at: Instant::now(),
                files,
            });
        }
        let mut status = self.status.locked();
        status.server_position = Some(position);
        if let Some(files) = listed {
            status.binlogs = files;
        }
        Ok(())
    }

    /// Where the published position stands against the server's purges, into the status;
    /// logs a warning when one appears or changes, and when it clears (`warned` is what was
    /// logged last).
    fn watch(&self, settings: PurgeSettings, files: &[BinlogFile], warned: &mut Vec<String>) {
        let mut status = self.status.locked();
        let history = self.histories.current();
        status.purge = match self.published.load().position.as_ref() {
            // A position on the server the source moved away from is not in these files.
            Some(at) if at.history() == history => watch(WatchInput {
                files,
                settings,
                position: at,
                last_commit_micros: status.last_commit_ts_micros,
                now_micros: now_micros(),
                warn_within: Duration::from_secs(self.purge_warning.load(Ordering::Relaxed)),
            }),
            _ => PurgeWatch::default(),
        };
        if status.purge.warnings == *warned {
            return;
        }
        warned.clone_from(&status.purge.warnings);
        if warned.is_empty() {
            tracing::info!(source = %self.name, "the binlog purge warning cleared");
        }
        for warning in warned.iter() {
            tracing::warn!(source = %self.name, "{warning}");
        }
    }
}

/// Reads the server's binlog end every [`SERVER_POLL`] (and its files, see [`BINLOG_RELIST`])
/// for the lag and purge columns (`engine::purge_watch`); a failed read drops the connection
/// and leaves the last values (the capture reports connection errors itself). A panic here
/// fails the source: its lag could no longer be shown.
async fn poll_server(of: PollOf, mut connect: ConnectOptions) {
    let poll = AssertUnwindSafe(async {
        let mut server = None;
        let mut listing = None;
        let mut warned = Vec::new();
        loop {
            crate::failpoint::hit_in("poller", &of.name);
            if server.is_none() {
                // The source may have moved to another server of its URL since.
                connect = of.link.read_locked().connect.clone();
                server = of.open(&connect).await;
            }
            if let Some(opened) = server.as_mut() {
                match of.read(&connect, opened, &mut listing).await {
                    Ok(()) => {
                        let files = listing.as_ref().map_or(&[][..], |l| &l.files[..]);
                        of.watch(opened.settings, files, &mut warned);
                    }
                    Err(_) => server = None,
                }
            }
            tokio::time::sleep(SERVER_POLL).await;
        }
    });
    if let Err(panic) = poll.catch_unwind().await {
        fail(
            &of.status,
            &of.health,
            panicked("server poll", panic.as_ref()),
        );
    }
}
