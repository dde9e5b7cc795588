//! The binlog files a server still has, the settings that decide when it purges them, and
//! what a file's listing says was executed at a position of it ([`executed_at`]).
//!
//! # Invariant
//! A purge removes files oldest first, whole files at a time, and never the file being
//! written. So how far a position is from being purged is measured in the files (and their
//! bytes) the server holds before the position's file, and a position in the newest file is
//! out of reach of any purge until the server rotates. Both settings are read as the server
//! reports them: an unknown or unset one is `None`, never a guessed default. The set executed
//! at a position is the file's starting set plus the GTID of every transaction that *starts*
//! before it (the position is a transaction boundary), as MariaDB's `BINLOG_GTID_POS` says.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::change::errant::BinlogState;
use crate::change::position::{BinlogCoord, GtidSet};
use crate::change::schema::Flavor;
use crate::source::connect::ConnectOptions;
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

/// Events `SHOW BINLOG EVENTS` lists per statement while [`executed_at`] walks a file.
const EVENTS_PER_PAGE: u32 = 10_000;

/// The GTIDs a server had executed at `at` (a transaction boundary of one of its binlogs):
/// the set its file starts with (MySQL's `Previous_gtids`, MariaDB's `Gtid_list`) and the GTID
/// of every transaction that starts in the file before `at`, as the server lists its events.
/// MySQL has no lookup for this (MariaDB's is `BINLOG_GTID_POS`); the server reads the file
/// prefix, and only the events' descriptions are sent. `GtidSet::Empty` without GTIDs.
pub async fn executed_at(
    conn: &mut Conn,
    connect: &ConnectOptions,
    flavor: Flavor,
    at: &BinlogCoord,
) -> SourceResult<GtidSet> {
    let context = || format!("listing the events of {} before {}", at.file, at.offset);
    let mut set = GtidSet::Empty;
    let mut from = 4u64;
    while from < at.offset {
        let sql = format!(
            "SHOW BINLOG EVENTS IN '{}' FROM {from} LIMIT {EVENTS_PER_PAGE}",
            at.file.replace('\'', "''")
        );
        // Each page within the read timeout: a long file takes many.
        let page = async {
            conn.query(sql)
                .await
                .map_err(|e| SourceError::from_mysql(context(), e))
        };
        let rows: Vec<(String, u64, String, u32, u64, String)> =
            connect.bounded(context, page).await?;
        let Some(last) = rows.last() else {
            break;
        };
        let next = last.4;
        for (_, pos, kind, _, _, info) in &rows {
            if *pos >= at.offset {
                return Ok(set);
            }
            event_gtids(flavor, kind, info, &mut set).map_err(|detail| SourceError::Decode {
                what: "a listed binlog event".into(),
                at: BinlogCoord::new(at.file.to_string(), *pos),
                detail,
            })?;
        }
        if next <= from {
            break;
        }
        from = next;
    }
    Ok(set)
}

/// Adds to `set` what one listed event says was executed: the file's starting set, or a
/// transaction's GTID; other events say nothing.
fn event_gtids(flavor: Flavor, kind: &str, info: &str, set: &mut GtidSet) -> Result<(), String> {
    let bad = |e: &dyn std::fmt::Display| format!("{kind} event {info:?}: {e}");
    match (flavor, kind) {
        (Flavor::MySql, "Previous_gtids") => {
            let start: GtidSet = info.parse().map_err(|e| bad(&e))?;
            set.union_with(&start);
        }
        (Flavor::MySql, "Gtid") => {
            // SET @@SESSION.GTID_NEXT= 'uuid[:tag]:n'
            let gtid = info
                .split('\'')
                .nth(1)
                .ok_or_else(|| bad(&"no quoted GTID"))?;
            let one: GtidSet = gtid.parse().map_err(|e| bad(&e))?;
            set.union_with(&one);
        }
        (Flavor::MariaDb, "Gtid_list") => {
            let state: BinlogState = info
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .map_err(|e| bad(&e))?;
            set.union_with(&state.position());
        }
        (Flavor::MariaDb, "Gtid") => {
            // BEGIN GTID d-s-n [cid=...], or GTID d-s-n (a statement of its own)
            let mut words = info.split_whitespace();
            let gtid = words
                .find(|w| *w == "GTID")
                .and_then(|_| words.next())
                .ok_or_else(|| bad(&"no GTID"))?;
            let one: GtidSet = gtid.parse().map_err(|e| bad(&e))?;
            set.union_with(&one);
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(flavor: Flavor, events: &[(&str, &str)]) -> String {
        let mut set = GtidSet::Empty;
        for (kind, info) in events {
            event_gtids(flavor, kind, info, &mut set).unwrap();
        }
        set.to_string()
    }

    #[test]
    fn listed_events_give_the_executed_set() {
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let v = "4e11fa47-71ca-11e1-9e33-c80aa9429562";
        let mysql = after(
            Flavor::MySql,
            &[
                ("Format_desc", "Server ver: 8.4.3, Binlog ver: 4"),
                ("Previous_gtids", &format!("{u}:1-5,\n{v}:1-2")),
                ("Gtid", &format!("SET @@SESSION.GTID_NEXT= '{u}:6'")),
                ("Query", "BEGIN"),
                ("Gtid", &format!("SET @@SESSION.GTID_NEXT= '{v}:audit:1'")),
                ("Anonymous_Gtid", "SET @@SESSION.GTID_NEXT= 'ANONYMOUS'"),
            ],
        );
        assert_eq!(mysql, format!("{u}:1-6,{v}:1-2,{v}:audit:1"));
        let mariadb = after(
            Flavor::MariaDb,
            &[
                ("Gtid_list", "[0-1-10,0-2-4,1-1-3]"),
                ("Gtid", "BEGIN GTID 0-1-11 cid=7"),
                ("Gtid", "GTID 1-1-4"),
                ("Query", "COMMIT"),
            ],
        );
        assert_eq!(mariadb, "0-1-11,1-1-4");
        assert_eq!(after(Flavor::MySql, &[("Previous_gtids", "")]), "");
        let mut set = GtidSet::Empty;
        assert!(event_gtids(Flavor::MariaDb, "Gtid", "BEGIN", &mut set).is_err());
    }
}
