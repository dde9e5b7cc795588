//! Riding out transient failures: a source whose server restarts, or whose connection drops,
//! goes on where it was instead of stopping.
//!
//! # Invariant
//! A transient failure (connection lost or reset, a read unanswered within the read timeout,
//! server shutting down or unreachable, lock conflicts after their own retries) restarts the source's capture after a capped,
//! jittered exponential backoff, keeping what is done: the chunks of a snapshot already read
//! (a durable source's progress journal, or this in-memory one), and once the source has
//! published, its published version, from whose position the binlog resumes. Nothing that is
//! already in the changelog is read into it again: a resumed capture drops every transaction
//! before the published position, and a resumed snapshot reads only the chunks it had not
//! finished. Definite failures are never retried.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;

use super::stop::Stop;
use crate::change::schema::{TableId, TableSchema};
use crate::locks::Locked;
use crate::source::snapshot::incremental::SnapshotChunk;
use crate::source::snapshot::journal::{PlannedChunk, SnapshotJournal, SnapshotResume};

/// First wait before a retry.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest wait between retries.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Whether a stopped capture may be started again and get further.
pub(super) fn is_transient(stop: &Stop) -> bool {
    match stop {
        Stop::Source(e) => e.is_retryable(),
        Stop::State(e) => e.is_transient(),
        Stop::ReadAgain(_) => false,
    }
}

/// The wait before retry number `attempt` (1-based): doubling from [`FIRST_BACKOFF`] up to
/// [`MAX_BACKOFF`], with ±25% jitter so that sources of one server do not retry in step.
pub(super) fn backoff(attempt: u32) -> Duration {
    let exp = FIRST_BACKOFF.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let base = exp.min(MAX_BACKOFF);
    let jitter = rand::rng().random_range(0.75..1.25);
    base.mul_f64(jitter)
}

/// The snapshot progress of a source kept in memory (a durable source keeps it in its state
/// store): the plan and the chunks done, given back when the snapshot starts again.
#[derive(Debug, Default)]
pub(super) struct MemoryJournal {
    state: Mutex<Option<Kept>>,
}

#[derive(Debug, Clone)]
struct Kept {
    tables: Vec<TableId>,
    plan: Vec<PlannedChunk>,
    done: Vec<SnapshotChunk>,
}

impl MemoryJournal {
    /// What a snapshot of `tables` can resume from: `None` for other tables (or none kept).
    pub(super) fn resume(&self, tables: &[Arc<TableSchema>]) -> Option<SnapshotResume> {
        let kept = self.lock().clone()?;
        let same = kept.tables.len() == tables.len()
            && kept.tables.iter().zip(tables).all(|(a, b)| *a == b.id);
        same.then_some(SnapshotResume {
            tables: kept.tables,
            plan: kept.plan,
            done: kept.done,
        })
    }

    /// Forgets the progress (the snapshot handed off, or a new one starts).
    pub(super) fn clear(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Kept>> {
        self.state.locked()
    }
}

#[async_trait::async_trait]
impl SnapshotJournal for MemoryJournal {
    async fn planned(&self, tables: &[Arc<TableSchema>], plan: &[PlannedChunk]) {
        *self.lock() = Some(Kept {
            tables: tables.iter().map(|t| t.id.clone()).collect(),
            plan: plan.to_vec(),
            done: Vec::new(),
        });
    }

    async fn done(&self, chunk: &SnapshotChunk) {
        if let Some(kept) = self.lock().as_mut() {
            kept.done.push(chunk.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::error::SourceError;
    use crate::sqlstate::HasSqlState;
    use crate::sqlstate::SqlState;

    #[test]
    fn backoff_doubles_up_to_its_cap_with_jitter() {
        for attempt in 1..40 {
            let wait = backoff(attempt);
            let exp = FIRST_BACKOFF.as_secs_f64() * 2f64.powi(attempt as i32 - 1);
            let base = exp.min(MAX_BACKOFF.as_secs_f64());
            assert!(
                wait.as_secs_f64() >= base * 0.75 - 1e-9,
                "{attempt}: {wait:?}"
            );
            assert!(
                wait.as_secs_f64() <= base * 1.25 + 1e-9,
                "{attempt}: {wait:?}"
            );
        }
    }

    #[test]
    fn only_connection_failures_are_retried() {
        let unreachable = Stop::Source(SourceError::Unreachable {
            address: "h:1".into(),
            attempts: 3,
            last_error: "refused".into(),
        });
        assert!(is_transient(&unreachable));
        let denied = Stop::Source(SourceError::AccessDenied {
            user: "u".into(),
            message: "no".into(),
        });
        assert!(!is_transient(&denied));
        assert!(!is_transient(&Stop::Source(SourceError::Internal(
            "bug".into()
        ))));
    }

    #[test]
    fn a_read_timeout_is_retried_and_the_window_reader_keeps_its_error_kind() {
        let timeout = || SourceError::ReadTimeout {
            context: "reading t".into(),
            after: Duration::from_secs(1),
        };
        assert!(is_transient(&Stop::Source(timeout())));
        assert_eq!(timeout().sqlstate(), SqlState::CONNECTION_FAILURE);
        let feed = SourceError::WindowReader(Arc::new(timeout()));
        assert!(feed.is_transient());
        assert!(is_transient(&Stop::Source(feed)));
        let purged = SourceError::WindowReader(Arc::new(SourceError::BinlogUnavailable {
            needed: "f.000001:4".into(),
            message: "purged".into(),
        }));
        assert_eq!(
            purged.sqlstate(),
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
        );
        assert!(!is_transient(&Stop::Source(purged)));
    }
}
