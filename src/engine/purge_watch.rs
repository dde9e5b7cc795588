//! How far a source's position is from the server purging its binlog, and the warning given
//! before it is too late (`cdc.sources`: `oldest_binlog`, `purge_distance_files`,
//! `purge_distance_bytes`, `purge_eta_seconds`, `warnings`).
//!
//! # Invariant
//! Every figure is a bound the server cannot beat, so a warning never comes late: a file is
//! purged by age only after its last write is older than the expiry, and its last write is no
//! earlier than the commit of the last transaction the source applied from it; so the time
//! left is at least that commit plus the expiry, minus now. A file by size only once the files
//! after it alone exceed the limit. The newest file is never purged, so a source reading it has
//! no deadline. Like the rest of the status this only describes; nothing decides by it.

use std::time::Duration;

use crate::change::position::BinlogCoord;
use crate::source::binlog::files::{BinlogFile, PurgeSettings};

/// Below this share of `max_binlog_total_size` left before the position's file goes, a warning.
const SIZE_HEADROOM_WARNING: f64 = 0.2;

/// Where a source's position stands against the server's purges; see the module docs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PurgeWatch {
    /// The oldest binlog file the server still has.
    pub oldest: Option<String>,
    /// Files the server holds before the position's file: purges take these first.
    pub files_before: Option<u64>,
    /// Binlog bytes before the position (the files before its file, and its offset in it).
    pub bytes_before: Option<u64>,
    /// Seconds at least until the position's file may be purged by age; `None` while the
    /// source reads the newest file or the server does not expire binlogs.
    pub eta_seconds: Option<f64>,
    /// What an operator must act on, one sentence each.
    pub warnings: Vec<String>,
}

/// What a watch is computed from.
#[derive(Debug, Clone, Copy)]
pub struct WatchInput<'a> {
    pub files: &'a [BinlogFile],
    pub settings: PurgeSettings,
    /// The source's published position.
    pub position: &'a BinlogCoord,
    /// Commit time (µs since the epoch) of the last transaction the source applied.
    pub last_commit_micros: Option<i64>,
    pub now_micros: i64,
    /// Warn when the position's file may be purged within this.
    pub warn_within: Duration,
}

/// See the module docs.
pub fn watch(input: WatchInput<'_>) -> PurgeWatch {
    let WatchInput {
        files, position, ..
    } = input;
    let mut out = PurgeWatch {
        oldest: files.first().map(|f| f.name.clone()),
        ..PurgeWatch::default()
    };
    let Some(at) = files.iter().position(|f| *f.name == *position.file) else {
        // Listed files but not the position's: it went before the source reached its end.
        if let Some(oldest) = files.first() {
            out.warnings.push(format!(
                "the binlog {} holding the source's position {position} was purged (the \
                 server's oldest is now {}): the source cannot resume there after a \
                 reconnect or restart; re-snapshot with ALTER SOURCE ... RESNAPSHOT",
                position.file, oldest.name
            ));
        }
        return out;
    };
    let before: u64 = files[..at].iter().map(|f| f.size).sum();
    out.files_before = Some(at as u64);
    out.bytes_before = Some(before + position.offset);
    if at + 1 == files.len() {
        return out;
    }
    let behind = files.len() - 1 - at;
    if let (Some(expire), Some(commit)) = (input.settings.expire_seconds, input.last_commit_micros)
    {
        let deadline = commit.saturating_add(expire.saturating_mul(1_000_000) as i64);
        let left = (deadline.saturating_sub(input.now_micros)).max(0) as f64 / 1e6;
        out.eta_seconds = Some(left);
        if left < input.warn_within.as_secs_f64() {
            out.warnings.push(format!(
                "the binlog {} holding the source's position {position} may be purged in \
                 {left:.0} s (the server expires binlogs after {expire} s, and the source is \
                 {behind} file(s) behind the newest): the source must catch up before then, or \
                 the server keep binlogs longer",
                position.file
            ));
        }
    }
    if let Some(limit) = input.settings.total_size_limit {
        let after: u64 = files[at + 1..].iter().map(|f| f.size).sum();
        let headroom = limit.saturating_sub(after);
        if (headroom as f64) < limit as f64 * SIZE_HEADROOM_WARNING {
            out.warnings.push(format!(
                "the binlog {} holding the source's position {position} is purged once \
                 {headroom} more bytes of binlog are written (max_binlog_total_size = {limit}): \
                 the source must catch up before then, or the server keep more binlog",
                position.file
            ));
        }
    }
    out
}

/// Binlog bytes between `from` and `to` (`to` later), counted through the sizes of the files
/// between them when they are in different files; `None` when a file between is not listed,
/// or the two are of different servers' histories.
pub fn bytes_between(files: &[BinlogFile], from: &BinlogCoord, to: &BinlogCoord) -> Option<u64> {
    if from.history() != to.history() {
        return None;
    }
    if from.file == to.file {
        return Some(to.offset.saturating_sub(from.offset));
    }
    let a = files.iter().position(|f| *f.name == *from.file)?;
    let b = files.iter().position(|f| *f.name == *to.file)?;
    if b < a {
        return Some(0);
    }
    let whole: u64 = files[a..b].iter().map(|f| f.size).sum();
    Some((whole + to.offset).saturating_sub(from.offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(sizes: &[u64]) -> Vec<BinlogFile> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| BinlogFile {
                name: format!("bin.{:06}", i + 1),
                size,
            })
            .collect()
    }

    const HOUR: i64 = 3_600_000_000;

    fn input<'a>(
        files: &'a [BinlogFile],
        position: &'a BinlogCoord,
        settings: PurgeSettings,
    ) -> WatchInput<'a> {
        WatchInput {
            files,
            settings,
            position,
            last_commit_micros: Some(10 * HOUR),
            now_micros: 12 * HOUR,
            warn_within: Duration::from_secs(6 * 3600),
        }
    }

    #[test]
    fn a_source_in_the_newest_file_has_no_deadline() {
        let f = files(&[1000, 2000, 500]);
        let at = BinlogCoord::new("bin.000003", 300);
        let expiring = PurgeSettings {
            expire_seconds: Some(3600),
            total_size_limit: Some(100),
        };
        let w = watch(input(&f, &at, expiring));
        assert_eq!(w.oldest.as_deref(), Some("bin.000001"));
        assert_eq!(w.files_before, Some(2));
        assert_eq!(w.bytes_before, Some(3300));
        assert_eq!(w.eta_seconds, None);
        assert!(w.warnings.is_empty(), "{:?}", w.warnings);
    }

    #[test]
    fn expiry_counts_from_the_last_applied_commit() {
        let f = files(&[1000, 2000, 500]);
        let at = BinlogCoord::new("bin.000002", 700);
        // Expires 8 h after a commit 2 h ago: 6 h left at least, not within 6 h.
        let eight_hours = PurgeSettings {
            expire_seconds: Some(8 * 3600),
            total_size_limit: None,
        };
        let w = watch(input(&f, &at, eight_hours));
        assert_eq!(w.eta_seconds, Some(6.0 * 3600.0));
        assert!(w.warnings.is_empty());
        // Expires 3 h after it: 1 h left, within the 6 h warning.
        let three_hours = PurgeSettings {
            expire_seconds: Some(3 * 3600),
            total_size_limit: None,
        };
        let w = watch(input(&f, &at, three_hours));
        assert_eq!(w.eta_seconds, Some(3600.0));
        assert_eq!(w.warnings.len(), 1);
        assert!(
            w.warnings[0].contains("bin.000002") && w.warnings[0].contains("1 file(s) behind"),
            "{}",
            w.warnings[0]
        );
        // Long past the expiry: no time left, never negative.
        let one_hour = PurgeSettings {
            expire_seconds: Some(3600),
            total_size_limit: None,
        };
        assert_eq!(watch(input(&f, &at, one_hour)).eta_seconds, Some(0.0));
    }

    #[test]
    fn a_size_limit_warns_when_the_files_after_the_position_near_it() {
        let f = files(&[1000, 2000, 500, 400]);
        let at = BinlogCoord::new("bin.000002", 10);
        let roomy = PurgeSettings {
            expire_seconds: None,
            total_size_limit: Some(10_000),
        };
        assert!(watch(input(&f, &at, roomy)).warnings.is_empty());
        let tight = PurgeSettings {
            expire_seconds: None,
            total_size_limit: Some(1_000),
        };
        let w = watch(input(&f, &at, tight));
        assert_eq!(w.warnings.len(), 1);
        assert!(
            w.warnings[0].contains("100 more bytes"),
            "{}",
            w.warnings[0]
        );
    }

    #[test]
    fn a_purged_position_is_named() {
        let f = files(&[1000, 2000]);
        let gone = BinlogCoord::new("bin.000000", 10);
        let w = watch(input(&f, &gone, PurgeSettings::default()));
        assert_eq!(w.files_before, None);
        assert_eq!(w.warnings.len(), 1);
        assert!(w.warnings[0].contains("was purged"), "{}", w.warnings[0]);
        assert!(w.warnings[0].contains("RESNAPSHOT"), "{}", w.warnings[0]);
    }

    #[test]
    fn bytes_between_positions_count_the_files_between() {
        let f = files(&[1000, 2000, 500]);
        let a = BinlogCoord::new("bin.000001", 900);
        let b = BinlogCoord::new("bin.000003", 40);
        assert_eq!(bytes_between(&f, &a, &b), Some(100 + 2000 + 40));
        assert_eq!(bytes_between(&f, &a, &a.at(950)), Some(50));
        assert_eq!(
            bytes_between(&f, &BinlogCoord::new("bin.000009", 4), &b),
            None
        );
    }
}
