//! Retention of one source's history: its policy (`retain_history`, changed by `ALTER SOURCE
//! ... SET`), the sinks that hold it back, and the trim the capture task runs with them.
//!
//! # Invariant
//! Only the capture task trims, on its own changelogs, before it publishes the next version
//! (the one writer of a source's versions): a published version is never changed, and a
//! reader that pinned one keeps every entry it had. A trim removes no entry a sink reading the
//! table still needs ([`SinkStatus::needs_after`]; a sink that has not said yet needs all),
//! none the policy keeps, and none not yet in a committed checkpoint of a durable source
//! (`state::retention::trimmable`).

use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use super::source_status::now_micros;
use crate::durable::Checkpointer;
use crate::locks::{Locked, RwLocked};
use crate::sinks::SinkStatus;
use crate::state::changelog::Changelog;
use crate::state::retention::{trimmable, Floor, RetainHistory};

/// The shortest time between two trims of a source: checking costs little, but not nothing
/// per transaction. A checkpoint that made more entries durable lets the next trim run at
/// once: what a durable source may let go is bounded by its checkpoints, and waiting for the
/// clock as well would hold a checkpoint's worth more history for nothing.
const TRIM_EVERY: Duration = Duration::from_millis(200);

/// A source's retention; see the module docs.
#[derive(Debug)]
pub(crate) struct Retention {
    policy: RwLock<RetainHistory>,
    /// The sinks reading the source, by name (dropped sinks go when their status does).
    holders: Mutex<Vec<(String, Weak<Mutex<SinkStatus>>)>>,
    last_trim: Mutex<LastTrim>,
}

/// When the last trim ran, and the durable entries it was allowed to go up to.
#[derive(Debug, Default)]
struct LastTrim {
    at: Option<Instant>,
    durable: Option<Vec<usize>>,
}

impl Retention {
    pub fn new(policy: RetainHistory) -> Self {
        Self {
            policy: RwLock::new(policy),
            holders: Mutex::new(Vec::new()),
            last_trim: Mutex::new(LastTrim::default()),
        }
    }

    pub fn policy(&self) -> RetainHistory {
        *self.policy.read_locked()
    }

    pub fn set_policy(&self, policy: RetainHistory) {
        *self.policy.write_locked() = policy;
    }

    /// Sink `name` reads the source from now on: what it needs is held (replacing a sink of
    /// the same name that was dropped).
    pub fn hold(&self, name: &str, status: &Arc<Mutex<SinkStatus>>) {
        let mut holders = self.holders.locked();
        holders.retain(|(n, s)| n != name && s.strong_count() > 0);
        holders.push((name.to_string(), Arc::downgrade(status)));
    }

    /// What the sinks reading table `t` still need of its changelog.
    fn floor(&self, t: usize) -> Floor {
        let mut holders = self.holders.locked();
        holders.retain(|(_, s)| s.strong_count() > 0);
        holders
            .iter()
            .filter_map(|(_, s)| s.upgrade())
            .fold(Floor::Free, |floor, status| {
                let s = status.locked();
                // Before its first attempt a sink has not said which tables it reads: it
                // holds them all.
                let reads = s.covered.is_empty() || s.covered.iter().any(|(table, _)| *table == t);
                if !reads {
                    return floor;
                }
                floor.and(match &s.needs_after {
                    Some(p) => Floor::After(p.clone()),
                    None => Floor::Everything,
                })
            })
    }

    /// Trims `changelogs` as far as the policy, the sinks and the store allow (at most every
    /// [`TRIM_EVERY`], or at once when a checkpoint has made more entries durable); returns
    /// the tables trimmed.
    pub fn trim(
        &self,
        changelogs: &mut [Changelog],
        checkpointer: Option<&Checkpointer>,
    ) -> Vec<usize> {
        let policy = self.policy();
        if policy == RetainHistory::All {
            return Vec::new();
        }
        let durable = checkpointer.map(Checkpointer::durable_rows);
        {
            let mut last = self.last_trim.locked();
            let checkpointed = durable.is_some() && last.durable != durable;
            if !checkpointed && last.at.is_some_and(|at| at.elapsed() < TRIM_EVERY) {
                return Vec::new();
            }
            last.at = Some(Instant::now());
            last.durable.clone_from(&durable);
        }
        let now = now_micros();
        let mut trimmed = Vec::new();
        for (t, log) in changelogs.iter_mut().enumerate() {
            if log.num_segments() == 0 {
                continue;
            }
            // A table the checkpoints do not know yet has nothing durable.
            let durable = durable.as_ref().map(|d| d.get(t).copied().unwrap_or(0));
            let upto = trimmable(log, &policy, now, &self.floor(t), durable);
            if log.trim(upto) > 0 {
                trimmed.push(t);
            }
        }
        trimmed
    }
}
