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

use std::sync::{Arc, RwLock};

use super::error::EngineError;
use crate::capture::version::SourceVersion;
use crate::capture::{Capture, ResumeAt};
use crate::locks::RwLocked;
use crate::source::connect::{ConnectOptions, ServerInfo};
use crate::source::error::{SourceError, SourceResult};
use crate::sql::MySqlUrl;

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
/// another address than the one it read from): `to` must have logged every GTID the source has
/// applied. Nothing published yet: nothing to lose, the source starts there.
pub(crate) async fn check_move(
    version: &SourceVersion,
    to: &ConnectOptions,
    info: &ServerInfo,
) -> Result<(), EngineError> {
    if let Some(position) = version.position.clone() {
        let from = ResumeAt {
            position,
            gtids: version.gtids.as_deref().cloned(),
            by_gtid: true,
        };
        Capture::check_gtids(to, info.flavor, &from).await?;
    }
    Ok(())
}

/// After the server in use could not be reached at all: the first other server of the
/// source's URL that answers and has logged every GTID the source applied, made the one in
/// use (for the source, its poll and the next start); `None` when there is none.
pub(crate) async fn move_on(link: &SharedLink, version: &SourceVersion) -> Option<ConnectOptions> {
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
            check_move(version, &probe, &info).await
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
