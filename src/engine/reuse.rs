//! Plans kept for running again: a statement's logical plan, made once by SQL planning and
//! made physical again at every run, with that run's pinned versions.
//!
//! # A kept plan reads the state of its run
//! A logical plan holds the providers its names resolved to. The providers of the source
//! tables (current tables and changelogs) and of the `cdc` status tables choose what they read
//! in `scan`, which runs when the plan is made physical: at every run, after
//! `Engine::run_kept` has pinned that run's versions and the session has attached that
//! run's read policy. So a kept plan reads the versions pinned for its run (never older data,
//! never half a transaction), checks the tables' health for its run and collects its own
//! stale-read warnings. The plan is kept as SQL planning leaves it: the optimizer runs at
//! every run, so `now()` and the like are folded with that run's start time.
//!
//! # When a kept plan is not run
//! Names resolve once, at SQL planning. A kept plan runs only while every name would resolve
//! as it did: [`CatalogGeneration`] changes whenever a source is created or dropped, a
//! source's tables are set (they appear, or a restart or re-snapshot reads them again), or a
//! DataFusion statement that changes catalogs or the session (DDL, `SET`) runs through the
//! engine. A plan that reads any other provider (views, files, memory tables, `pg_catalog`,
//! `information_schema`, table functions), some of which fix their contents when they are
//! looked up, is not kept at all; neither is a plan that writes or changes anything. Tables
//! registered from Rust on `Engine::context` are not seen by the generation: call
//! `Engine::catalog_changed` after registering them.

use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{LogicalPlan, TableSource};

use super::status::StatusTable;
use crate::provider::changelog::ChangelogProvider;
use crate::provider::current::CurrentTableProvider;

/// What every name of a statement resolved to, as a value that changes whenever a name
/// could resolve differently (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogGeneration {
    /// Counts sources created and dropped and DataFusion statements run.
    engine: u64,
    /// The sum of the sources' table changes: within one `engine` value the set of sources
    /// is fixed and each count only grows, so the sum changes whenever one does.
    tables: u64,
}

/// A statement's logical plan, kept for running again while its [`CatalogGeneration`]
/// holds.
#[derive(Debug, Clone)]
pub struct KeptPlan {
    plan: LogicalPlan,
    generation: CatalogGeneration,
}

impl CatalogGeneration {
    /// The generation of `engine`'s count and the sources' table changes.
    pub(super) fn new(engine: u64, table_changes: impl IntoIterator<Item = u64>) -> Self {
        let tables = table_changes.into_iter().fold(0u64, u64::wrapping_add);
        Self { engine, tables }
    }
}

impl KeptPlan {
    /// `plan` kept with `generation` (read before it was planned), if it may run again.
    pub(super) fn new(plan: &LogicalPlan, generation: CatalogGeneration) -> Option<Self> {
        reusable(plan).then(|| Self {
            plan: plan.clone(),
            generation,
        })
    }

    /// The generation the plan was made in.
    pub(super) fn generation(&self) -> CatalogGeneration {
        self.generation
    }

    /// The plan, for one more run.
    pub(super) fn plan(&self) -> LogicalPlan {
        self.plan.clone()
    }
}

/// Whether `plan` only reads, and only providers that choose what they read when they scan.
fn reusable(plan: &LogicalPlan) -> bool {
    let mut reusable = true;
    let walked = plan.apply_with_subqueries(|node| {
        let fine = match node {
            LogicalPlan::TableScan(scan) => resolves_at_scan(&scan.source),
            LogicalPlan::Dml(_)
            | LogicalPlan::Ddl(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::Extension(_) => false,
            _ => true,
        };
        reusable &= fine;
        Ok(if fine {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    walked.is_ok() && reusable
}

/// Whether a table's provider reads what it reads in `scan` (see the module docs).
fn resolves_at_scan(source: &Arc<dyn TableSource>) -> bool {
    let Ok(provider) = source_as_provider(source) else {
        return false;
    };
    provider.is::<CurrentTableProvider>()
        || provider.is::<ChangelogProvider>()
        || provider.is::<StatusTable>()
}
