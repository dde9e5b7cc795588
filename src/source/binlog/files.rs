//! The binlog files a server still has, and the settings that decide when it purges them.
//!
//! # Invariant
//! A purge removes files oldest first, whole files at a time, and never the file being
//! written. So how far a position is from being purged is measured in the files (and their
//! bytes) the server holds before the position's file, and a position in the newest file is
//! out of reach of any purge until the server rotates. Both settings are read as the server
//! reports them: an unknown or unset one is `None`, never a guessed default.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::change::schema::Flavor;
use crate::source::error::{SourceError, SourceResult};

/// One binlog file the server still has: its name and size in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinlogFile {
    pub name: String,
    pub size: u64,
}

/// What makes the server purge binlogs on its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeSettings {
    /// Files whose last write is older than this are purged at the next rotation
    /// (`binlog_expire_logs_seconds`, or `expire_logs_days` where that is all there is).
    pub expire_seconds: Option<u64>,
    /// The oldest files are purged while all of them together exceed this many bytes
    /// (MariaDB's `max_binlog_total_size`, 11.4 and later).
    pub total_size_limit: Option<u64>,
}

/// The server's binlog files, oldest first (`SHOW BINARY LOGS`).
pub async fn binlog_files(conn: &mut Conn) -> SourceResult<Vec<BinlogFile>> {
    let rows: Vec<mysql_async::Row> = conn
        .query("SHOW BINARY LOGS")
        .await
        .map_err(|e| SourceError::from_mysql("listing the binlogs", e))?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(BinlogFile {
                name: r.get::<String, _>(0)?,
                size: r.get::<u64, _>(1).unwrap_or(0),
            })
        })
        .collect())
}

/// The server's purge settings. A variable the server does not have is not an error: older
/// servers lack the newer names, and MySQL has no size limit at all.
pub async fn purge_settings(conn: &mut Conn, flavor: Flavor) -> SourceResult<PurgeSettings> {
    let expire = match global(conn, "binlog_expire_logs_seconds").await? {
        Some(seconds) => Some(seconds),
        // MariaDB before 10.6 counts whole days.
        None => global(conn, "expire_logs_days")
            .await?
            .map(|days| days.saturating_mul(86_400)),
    };
    let total_size_limit = match flavor {
        Flavor::MariaDb => global(conn, "max_binlog_total_size").await?,
        Flavor::MySql => None,
    };
    // 0 means "never" for every one of these settings.
    Ok(PurgeSettings {
        expire_seconds: expire.filter(|s| *s > 0),
        total_size_limit: total_size_limit.filter(|s| *s > 0),
    })
}

/// `@@GLOBAL.name` as a number; `None` when the server has no such variable.
async fn global(conn: &mut Conn, name: &str) -> SourceResult<Option<u64>> {
    match conn
        .query_first::<Option<String>, _>(format!("SELECT @@GLOBAL.{name}"))
        .await
    {
        // Text, since `expire_logs_days` is fractional on some servers and an integer on
        // others.
        Ok(value) => Ok(value
            .flatten()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v.max(0.0) as u64)),
        // ER_UNKNOWN_SYSTEM_VARIABLE
        Err(mysql_async::Error::Server(e)) if e.code == 1193 => Ok(None),
        Err(e) => Err(SourceError::from_mysql(
            format!("reading @@GLOBAL.{name}"),
            e,
        )),
    }
}
