//! How a source reaches its server: the [`Link`] (its URL, the servers the URL names, the one
//! in use, the replica id), and the move to another server of the URL when the one in use is
//! gone.
//!
//! # Invariant
//! A source moves to another server only once that server is known to have logged every GTID
//! the source has applied (`Capture::check_gtids`), and only through a resume that goes on
//! after those GTIDs (see `engine::histories`): never at a file and offset of another
//! server. A URL naming several servers (`mysql://cdc:pw@a:3306,b:3306`) is tried in order; the
//! source stays with the one it reads until that one cannot be reached at all (every connection
//! attempt failed), then takes the first other one that passes the check.
//!
//! The user may name the start instead ([`GoesOn`]): a position of the new server
//! (`start_position`, checked to be in its binlog; needed where no GTIDs carry a position
//! across), or a re-snapshot there. A named position is made the source's position, in the new
//! server's history, and checkpointed before the capture starts there, so a restart goes on
//! at it too.

use std::sync::{Arc, RwLock};

use super::error::EngineError;
use super::histories::Histories;
use crate::capture::version::{Published, SourceVersion};
use crate::capture::{Capture, ResumeAt};
use crate::change::errant::{errant_mariadb, errant_mysql, BinlogState};
use crate::change::position::{BinlogCoord, GtidSet, StartPosition};
use crate::change::schema::Flavor;
use crate::durable::Checkpointer;
use crate::locks::RwLocked;
use crate::source::connect::{ConnectOptions, ServerInfo};
use crate::source::error::{SourceError, SourceResult};
use crate::sql::{MoveStart, MySqlUrl};

/// How a source reaches its server; shared by the source, its tasks and its server poll.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    /// The URL (with its password), as given.
    pub url: MySqlUrl,
    /// The options of each server the URL names, in order.
    pub servers: Vec<ConnectOptions>,
    /// The server in use.
    pub connect: ConnectOptions,
    /// The replica id of the binlog connection.
    pub server_id: u32,
}

/// The link everything of one source reads through.
pub(crate) type SharedLink = Arc<RwLock<Link>>;

impl Link {
    /// A link to the first server `url` names; reads wait at most `read_timeout`.
    pub fn new(
        url: MySqlUrl,
        read_timeout: std::time::Duration,
        server_id: u32,
    ) -> SourceResult<Self> {
        let mut servers = Vec::with_capacity(url.host_urls().len());
        for host in url.host_urls() {
            let mut connect = ConnectOptions::from_url(host)?;
            connect.read_timeout = read_timeout;
            servers.push(connect);
        }
        let connect = servers
            .first()
            .cloned()
            .ok_or_else(|| SourceError::Config("the URL names no server".into()))?;
        Ok(Self {
            url,
            servers,
            connect,
            server_id,
        })
    }

    /// Connects to the servers in order and takes the first that accepts the credentials
    /// and passes the start-up checks; the last error when none does.
    pub async fn checked_server(&mut self) -> SourceResult<ServerInfo> {
        let mut last = None;
        for server in &self.servers {
            let checked = async {
                let mut conn = server.connect().await?;
                server.checked(&mut conn).await
            };
            match checked.await {
                Ok(info) => {
                    self.connect = server.clone();
                    return Ok(info);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| SourceError::Config("the URL names no server".into())))
    }
}

/// Checks that a source whose published version is `version` can go on at `to` (a server of
/// another address than the one it read from) after its GTIDs: `to` must have logged every GTID
/// the source has applied, and (unless `accept_errant`) no transaction below the source's
/// position that the server it read from never logged ([`check_errant`]). Nothing published
/// yet: nothing to lose, the source starts there.
pub(crate) async fn check_move(
    version: &SourceVersion,
    histories: &Histories,
    (to, info): (&ConnectOptions, &ServerInfo),
    accept_errant: bool,
) -> Result<(), EngineError> {
    if let Some(position) = version.position.clone() {
        let from = ResumeAt {
            position,
            gtids: version.gtids.as_deref().cloned(),
            by_gtid: true,
        };
        Capture::check_gtids(to, info.flavor, &from).await?;
        if !accept_errant {
            let logged = Logged::read(to, info).await?;
            let ours = version.gtids.as_deref();
            check_errant((&from.position, ours), histories, &logged, &to.address())?;
        }
    }
    Ok(())
}

/// What a server has logged, as the errant check compares it (`change::errant`).
pub(crate) enum Logged {
    /// Its `@@gtid_binlog_state`.
    MariaDb(BinlogState),
    /// Its executed GTID set.
    MySql(GtidSet),
}

impl Logged {
    /// What `to` has logged now.
    pub async fn read(to: &ConnectOptions, info: &ServerInfo) -> Result<Self, SourceError> {
        let mut conn = to.connect().await?;
        Ok(match info.flavor {
            Flavor::MariaDb => Logged::MariaDb(to.binlog_state(&mut conn).await?),
            Flavor::MySql => Logged::MySql(to.position(&mut conn, info.flavor).await?.1),
        })
    }
}

/// Fails with [`SourceError::ErrantGtids`] when `logged` (by the server at `server`) holds
/// transactions below the source's GTID position (`ours`, at `position`) that the server of
/// the position's history never logged (as far as the source knows that server's binlog, and
/// what a move accepted: `engine::histories`); see `change::errant`.
pub(crate) fn check_errant(
    (position, ours): (&BinlogCoord, Option<&GtidSet>),
    histories: &Histories,
    logged: &Logged,
    server: &str,
) -> Result<(), SourceError> {
    let Some(ours) = ours else {
        return Ok(());
    };
    let errant = match logged {
        Logged::MariaDb(theirs) => {
            errant_mariadb(ours, theirs, &histories.state(position.history()))
        }
        Logged::MySql(theirs) => errant_mysql(ours, theirs),
    };
    if errant.is_empty() {
        return Ok(());
    }
    Err(SourceError::ErrantGtids {
        server: server.to_string(),
        errant,
    })
}

/// What a move that accepts errant transactions takes as logged by the source's history: the
/// binlog state of `to` (MariaDB), so later checks, also after a restart, pass (see
/// `change::errant`). MySQL's check needs nothing kept.
pub(crate) async fn accepted_state(
    to: &ConnectOptions,
    info: &ServerInfo,
) -> Result<BinlogState, SourceError> {
    match Logged::read(to, info).await? {
        Logged::MariaDb(state) => Ok(state),
        Logged::MySql(_) => Ok(BinlogState::default()),
    }
}

/// After the server in use could not be reached at all: the first other server of the
/// source's URL that answers and has logged every GTID the source applied, made the one in
/// use (for the source, its poll and the next start); `None` when there is none.
pub(crate) async fn move_on(
    link: &SharedLink,
    version: &SourceVersion,
    histories: &Histories,
) -> Option<ConnectOptions> {
    let (servers, current) = {
        let link = link.read_locked();
        (link.servers.clone(), link.connect.address())
    };
    if servers.len() < 2 {
        return None;
    }
    for server in servers.iter().filter(|s| s.address() != current) {
        // One attempt each: the one in use just used up its retries; this is a probe.
        let mut probe = server.clone();
        probe.max_attempts = 1;
        let checked = async {
            let mut conn = probe.connect().await?;
            let info = probe.checked(&mut conn).await?;
            check_move(version, histories, (&probe, &info), false).await
        };
        match checked.await {
            Ok(()) => {
                tracing::warn!(from = %current, to = %server.address(), "the source's server cannot be reached; moving to the next server of its URL");
                link.write_locked().connect = server.clone();
                return Some(server.clone());
            }
            Err(e) => {
                tracing::info!(server = %server.address(), error = %e, "another server of the source's URL cannot take it over");
            }
        }
    }
    None
}

/// A server as the source's histories name it: its address and its identity.
pub(crate) fn server_name(connect: &ConnectOptions, info: &ServerInfo) -> String {
    format!("{} ({})", connect.address(), info.identity())
}

/// Where a source goes on at the server a new link leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GoesOn {
    /// After its published position: on the same server at its file and offset, on another
    /// after its GTIDs; `accepted` is what `accept_errant_gtids` takes as logged by the
    /// history it goes on from (see [`accepted_state`]).
    Published { accepted: BinlogState },
    /// Every table read again there (`SET (...) RESNAPSHOT`).
    Resnapshot,
    /// At this position of `server` (`start_position = 'file:offset' | 'current'`).
    At {
        position: BinlogCoord,
        server: String,
    },
    /// After these GTIDs (`start_position = '<GTID set>'`), which `server` has all logged.
    AfterGtids(GtidSet),
}

/// Checks where a source whose published version is `version` goes on at `to` (reached
/// through the source's link `from` until now; `info` from `to`'s start-up checks), as
/// `start` asks, and says so; refused with the reason when it cannot go on there.
pub(crate) async fn plan_move(
    version: &SourceVersion,
    histories: &Histories,
    from: &ConnectOptions,
    (to, info): (&ConnectOptions, &ServerInfo),
    start: Option<&MoveStart>,
    accept_errant: bool,
) -> Result<GoesOn, EngineError> {
    let server = server_name(to, info);
    let refuse = |reason: String| EngineError::MoveRefused {
        server: server.clone(),
        reason,
    };
    let Some(position) = &version.position else {
        // Nothing published yet: the snapshot starts again wherever the source reaches.
        return match start {
            Some(MoveStart::At(_)) => Err(refuse(
                "the source has published nothing yet (its snapshot is not done), so there is \
                 no state to go on from at a position; leave start_position out and the \
                 snapshot starts again there"
                    .into(),
            )),
            Some(MoveStart::Resnapshot) => Ok(GoesOn::Resnapshot),
            None => Ok(GoesOn::Published {
                accepted: BinlogState::default(),
            }),
        };
    };
    let reads_it = histories.list().get(usize::from(position.history())) == Some(&server);
    match start {
        None => {
            if to.address() != from.address() {
                check_move(version, histories, (to, info), accept_errant).await?;
            }
            let accepted = if accept_errant {
                accepted_state(to, info).await?
            } else {
                BinlogState::default()
            };
            Ok(GoesOn::Published { accepted })
        }
        Some(MoveStart::Resnapshot) => Ok(GoesOn::Resnapshot),
        Some(MoveStart::At(_)) if reads_it => Err(refuse(format!(
            "the source reads that server already (its position {position} is of it); \
             start_position names where it goes on at another server"
        ))),
        Some(MoveStart::At(StartPosition::Coord(at))) => {
            Capture::check_binlog(to, at).await?;
            Ok(GoesOn::At {
                position: at.clone(),
                server,
            })
        }
        Some(MoveStart::At(StartPosition::Current)) => {
            let mut conn = to.connect().await?;
            let (at, _) = to.position(&mut conn, info.flavor).await?;
            Ok(GoesOn::At {
                position: at.in_history(0),
                server,
            })
        }
        Some(MoveStart::At(StartPosition::Gtid(gtids))) => {
            let from = ResumeAt {
                position: position.clone(),
                gtids: Some(gtids.clone()),
                by_gtid: true,
            };
            Capture::check_gtids(to, info.flavor, &from).await?;
            Ok(GoesOn::AfterGtids(gtids.clone()))
        }
    }
}

/// Makes the source stand where `goes_on` names, while no capture task runs: its published
/// state at the named position of the new server (a new history) or with the named GTIDs,
/// or its history taking the errant transactions a move accepted, checkpointed at once on a
/// durable source, so a capture started now or after a restart goes on there. Nothing to do
/// for the other starts, nor before anything is published.
pub(crate) async fn stand_at(
    goes_on: &GoesOn,
    published: &Published,
    histories: &Histories,
    checkpointer: Option<&Checkpointer>,
) -> Result<(), EngineError> {
    let mut version = (*published.load_full()).clone();
    let Some(at) = version.position.clone() else {
        return Ok(());
    };
    match goes_on {
        GoesOn::At { position, server } => {
            let placed = histories.place(&at, server)?;
            version.set_position(&position.clone().in_history(placed.history));
            // Read again from the server at the start (MariaDB), unknown otherwise.
            version.gtids = None;
        }
        GoesOn::AfterGtids(gtids) => version.gtids = Some(Arc::new(gtids.clone())),
        GoesOn::Published { accepted } if !accepted.is_empty() => {
            histories.record_state(at.history(), accepted);
        }
        GoesOn::Published { .. } | GoesOn::Resnapshot => return Ok(()),
    }
    let version = Arc::new(version);
    published.store(Arc::clone(&version));
    tracing::info!(position = ?version.position, gtids = ?version.gtids.as_deref().map(ToString::to_string), "the source goes on at another server where it was told to");
    if let Some(c) = checkpointer {
        c.set_servers(histories.list(), histories.states());
        c.checkpoint(&version).await?;
    }
    Ok(())
}
