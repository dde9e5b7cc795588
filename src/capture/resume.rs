//! Where a capture goes on after a restart, a reconnect or a move to another server.
//!
//! # Invariant
//! A resumed capture reads every transaction after the position its states reflect, once:
//! on the same server from that position's file and offset (which must still exist), on
//! another server (a failover) after the GTIDs executed at that position, and only once the
//! server is known to have logged all of them. Never from a file and offset of another server.

use std::sync::Arc;

use super::{Capture, CaptureOptions, ResumeAt};
use crate::change::position::{BinlogCoord, GtidSet, StartPosition};
use crate::change::schema::{Flavor, TableSchema};
use crate::source::binlog::files::binlog_files;
use crate::source::connect::{ConnectOptions, ServerInfo};
use crate::source::error::{SourceError, SourceResult};
use crate::source::snapshot::incremental::{Phase, Progress};
use crate::state::merge::TableState;

impl Capture {
    /// Resumes streaming after `from.position`, the end of the last transaction `states`
    /// reflect (recovered from a checkpoint, or a published version). On the same server the
    /// binlog there must still exist: a purged one is a definite error naming the position
    /// needed and the oldest one left, never a silent resume from somewhere else. On another
    /// server (`from.by_gtid`) the stream goes on after the GTIDs the source has executed,
    /// once the server is checked to have logged every one of them (see `ResumeAt`).
    pub async fn resume(
        connect: ConnectOptions,
        options: &CaptureOptions,
        info: ServerInfo,
        tables: Vec<Arc<TableSchema>>,
        states: Vec<TableState>,
        from: ResumeAt,
        progress: Arc<Progress>,
    ) -> SourceResult<Self> {
        let start = if from.by_gtid {
            StartPosition::Gtid(Self::check_gtids(&connect, info.flavor, &from).await?)
        } else {
            Self::check_binlog(&connect, &from.position).await?;
            StartPosition::Coord(from.position.clone())
        };
        let mut capture = Capture::new(connect, options, info, tables, states, progress)?;
        // The set carried with the position holds there; the server is asked only without one.
        let known = if from.by_gtid { None } else { from.gtids };
        let reader = capture.open_reader(options, start, known).await?;
        capture.reader = Some(reader);
        capture.progress.set_phase(Phase::Streaming);
        capture.progress.set_position(from.position.clone());
        capture.resume_from = Some(from.position);
        capture.handoff_codecs = None;
        Ok(capture)
    }

    /// The GTIDs a move to another server resumes after: `from.gtids`, once the server
    /// (reached through `connect`) is checked to have logged every one of them. A server
    /// without GTIDs, or a source whose GTID position is not known, is refused with what to
    /// do instead.
    pub async fn check_gtids(
        connect: &ConnectOptions,
        flavor: Flavor,
        from: &ResumeAt,
    ) -> SourceResult<GtidSet> {
        let server = connect.address();
        let refuse = |reason: &str| SourceError::NoGtidPosition {
            server: server.clone(),
            reason: format!(
                "{reason}; name where the source goes on there (ALTER SOURCE ... SET (url = \
                 '...', start_position = 'file:offset')), or read every table there again, \
                 adding only the differences (ALTER SOURCE ... SET (url = '...') RESNAPSHOT, \
                 or ALTER SOURCE ... RESNAPSHOT once the url is set)"
            ),
        };
        let ours = match &from.gtids {
            Some(set) if !set.is_empty() => set.clone(),
            Some(_) => return Err(refuse("the old server logged no GTIDs (gtid_mode off)")),
            None => {
                return Err(refuse(
                    "the GTID position of the source's last published change is not known",
                ))
            }
        };
        let mut conn = connect.connect().await?;
        let (_, logged) = connect.position(&mut conn, flavor).await?;
        if logged.is_empty() {
            return Err(refuse("the new server has logged no GTIDs (gtid_mode off)"));
        }
        let missing = ours.missing_in(&logged);
        if !missing.is_empty() {
            return Err(SourceError::GtidsMissing { server, missing });
        }
        tracing::info!(%server, gtids = %ours, history = connect.history, "moving the source to another server: going on after its GTIDs");
        Ok(ours)
    }

    /// Fails with [`SourceError::BinlogUnavailable`] unless the server still has the binlog
    /// file of `position`.
    pub async fn check_binlog(
        connect: &ConnectOptions,
        position: &BinlogCoord,
    ) -> SourceResult<()> {
        let mut conn = connect.connect().await?;
        let listed = connect
            .bounded(|| "listing the binlogs".into(), binlog_files(&mut conn))
            .await?;
        if let Some(file) = listed.iter().find(|f| *f.name == *position.file) {
            if position.offset <= file.size {
                return Ok(());
            }
            return Err(SourceError::BinlogUnavailable {
                needed: position.to_string(),
                message: format!(
                    "{} holds {} bytes, so the offset is past its end; name a transaction \
                     boundary of it",
                    file.name, file.size
                ),
            });
        }
        let files: Vec<&str> = listed.iter().map(|f| f.name.as_str()).collect();
        Err(SourceError::BinlogUnavailable {
            needed: position.to_string(),
            message: format!(
                "the server has only binlogs {} to {} (the one needed was purged); \
                 re-snapshot with ALTER SOURCE ... RESNAPSHOT",
                files.first().copied().unwrap_or("(none)"),
                files.last().copied().unwrap_or("(none)"),
            ),
        })
    }
}
