//! A chunk read inside MariaDB's consistent snapshot (on request, `snapshot_method =
//! 'consistent'`): `START TRANSACTION WITH CONSISTENT SNAPSHOT`, the position the server
//! reports for its read view, the `SELECT`, `COMMIT`. LOW = HIGH = that position; no window,
//! no barrier.
//!
//! # Invariant
//! The chunk is the table's state at the reported position within its range, as far as the
//! server keeps its promise that the read view and the position describe one instant (see
//! `incremental` for what is known about it).

use mysql_async::prelude::Queryable;

use super::incremental::{ChunkConnection, HookPoint, SnapshotRun, Visibility};
use super::protocol::ChunkRead;
use crate::change::position::BinlogCoord;
use crate::source::error::{SourceError, SourceResult};
use crate::source::mysql_client::WireValue;

impl SnapshotRun {
    pub(super) async fn read_consistent(
        &self,
        conn: &mut ChunkConnection,
        t: usize,
        index: usize,
        predicate: Option<&str>,
        params: Vec<mysql_async::Value>,
    ) -> SourceResult<ChunkRead> {
        let schema = &self.tables[t].schema;
        let ctx = |what: &str| format!("{what} for a chunk of {}", schema.id);
        self.hook(HookPoint::BeforeLow, t, index).await;
        // Under REPEATABLE READ, as every chunk connection is (see `chunk_connection`).
        let start = "START TRANSACTION WITH CONSISTENT SNAPSHOT";
        let show = "SHOW STATUS LIKE 'binlog_snapshot_%'";
        let reported = match conn.rows.as_mut() {
            Some(rows) => {
                rows.query_drop(start).await?;
                let mut found = Vec::new();
                let position = || ctx("reading the snapshot position");
                rows.select(show, &[], &position, |row| {
                    let mut values = row.values().map(|v| match v {
                        Ok(WireValue::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
                        _ => String::new(),
                    });
                    if let (Some(name), Some(value)) = (values.next(), values.next()) {
                        found.push((name, value));
                    }
                    Ok(())
                })
                .await?;
                found
            }
            None => {
                self.run(&mut conn.sql, start, || {
                    ctx("starting a consistent snapshot")
                })
                .await?;
                let read = async {
                    conn.sql.query(show).await.map_err(|e| {
                        SourceError::from_mysql(ctx("reading the snapshot position"), e)
                    })
                };
                self.connect
                    .bounded(|| ctx("reading the snapshot position"), read)
                    .await?
            }
        };
        let at = snapshot_position(&reported)?.in_history(self.connect.history);
        self.hook(HookPoint::AfterLow, t, index).await;
        let limit = self.connect.read_timeout;
        let scanned = conn.select(schema, predicate, &params, None, limit).await?;
        self.hook(HookPoint::AfterSelect, t, index).await;
        match conn.rows.as_mut() {
            Some(rows) => rows.query_drop("COMMIT").await?,
            None => {
                self.run(&mut conn.sql, "COMMIT", || {
                    ctx("ending the consistent snapshot")
                })
                .await?
            }
        }
        self.hook(HookPoint::BeforeHigh, t, index).await;
        self.hook(HookPoint::AfterHigh, t, index).await;
        Ok(ChunkRead {
            low: at.clone(),
            high: at,
            scanned,
            visibility: Visibility::ConsistentSnapshot,
        })
    }
}

/// The binlog position a consistent snapshot reads at, from `SHOW STATUS LIKE
/// 'binlog_snapshot_%'` inside its transaction.
fn snapshot_position(status: &[(String, String)]) -> SourceResult<BinlogCoord> {
    let get = |name: &str| {
        status
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let (Some(file), Some(offset)) = (get("Binlog_snapshot_file"), get("Binlog_snapshot_position"))
    else {
        return Err(SourceError::NotSupported(
            "the consistent-snapshot method on a server that reports no \
             binlog_snapshot_file/position (use snapshot_method = 'watermarks')"
                .into(),
        ));
    };
    let offset: u64 = offset.parse().map_err(|_| {
        SourceError::NotSupported(format!("the server's binlog_snapshot_position {offset:?}"))
    })?;
    Ok(BinlogCoord::new(file, offset))
}
