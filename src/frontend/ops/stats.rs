//! What the front end counts for the metrics endpoint: connections, statements, their time to
//! the first response, and errors by SQLSTATE.
//!
//! # Invariant
//! Counting costs a few relaxed atomic additions per statement and never blocks a statement
//! (errors, the rare case, take a short lock); figures only grow, as Prometheus counters must.

use crate::locks::Locked;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the statement-time histogram's buckets.
pub const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0,
];

/// The front end's counters; see the module docs.
#[derive(Debug, Default)]
pub struct FrontendStats {
    connections: AtomicU64,
    statements: AtomicU64,
    /// Statements made physical by DataFusion's optimizer and physical planner when they ran
    /// (a kept physical plan bound for a run is not).
    planned: AtomicU64,
    /// Statements per bucket of [`BUCKETS`] (not cumulative), then those over the last.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    micros: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsSnapshot {
    pub connections: u64,
    pub statements: u64,
    pub planned: u64,
    /// Cumulative counts per bucket of [`BUCKETS`], as Prometheus's `le` buckets.
    pub cumulative: Vec<u64>,
    pub seconds: f64,
    pub errors: BTreeMap<String, u64>,
}

impl FrontendStats {
    pub fn connection(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// One statement made physical by planning as it ran.
    pub fn planned(&self) {
        self.planned.fetch_add(1, Ordering::Relaxed);
    }

    /// One statement that took `took` to its first response, and its SQLSTATE if it failed.
    pub fn statement(&self, took: Duration, error: Option<&str>) {
        self.statements.fetch_add(1, Ordering::Relaxed);
        let seconds = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.micros.fetch_add(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if let Some(code) = error {
            *self.errors.locked().entry(code.to_string()).or_default() += 1;
        }
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let mut total = 0;
        let cumulative = self.buckets[..BUCKETS.len()]
            .iter()
            .map(|b| {
                total += b.load(Ordering::Relaxed);
                total
            })
            .collect();
        StatsSnapshot {
            connections: self.connections.load(Ordering::Relaxed),
            statements: self.statements.load(Ordering::Relaxed),
            planned: self.planned.load(Ordering::Relaxed),
            cumulative,
            seconds: self.micros.load(Ordering::Relaxed) as f64 / 1e6,
            errors: self.errors.locked().clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlstate::SqlState;

    #[test]
    fn statements_fall_into_cumulative_buckets() {
        let stats = FrontendStats::default();
        stats.statement(Duration::from_micros(300), None);
        stats.statement(
            Duration::from_millis(3),
            Some(SqlState::UNDEFINED_TABLE.code()),
        );
        stats.statement(
            Duration::from_secs(60),
            Some(SqlState::UNDEFINED_TABLE.code()),
        );
        let s = stats.snapshot();
        assert_eq!(s.statements, 3);
        assert_eq!(s.cumulative[0], 1);
        assert_eq!(s.cumulative[3], 2);
        assert_eq!(*s.cumulative.last().unwrap(), 2);
        assert_eq!(s.errors.get(SqlState::UNDEFINED_TABLE.code()), Some(&2));
    }
}
