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
//!
//! # Kept physical plans
//! A kept plan that reads only current tables and calls no *stable* function (`now()` and the
//! functions that read the session or the catalogs, which the optimizer folds into constants)
//! also keeps its physical plan, made at its first run: the next runs skip the optimizer and
//! physical planning too. A plan with parameters keeps it only when, once optimized, every
//! parameter is in a filter a current-table scan answers itself (a key, index or range lookup,
//! `provider::index_filters`): the scans then bind each run's values (`provider::index_filters::RunParams`) as they
//! bind its versions, and nothing else in the plan depends on them. Any other place a
//! parameter is in (a projection, a filter left above the scan, a `LIMIT`) makes the plan
//! refuse its physical form, and such a statement is made physical at every run with its
//! values in place. Each run binds every current-table
//! scan of it to that run's pinned version, checking health again
//! (`provider::current_scan`), and gives every other node fresh state
//! (`ExecutionPlan::reset_state`, e.g. a hash join's build side). The kept copy holds its
//! scans unbound, so it keeps no version's rows alive. The scans' statistics are inexact, so
//! the physical optimizer never folded a row count into the plan. The same generation and
//! settings rules apply.

use std::sync::{Arc, Mutex};

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::{Expr, LogicalPlan, TableSource, Volatility};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;

use super::status::StatusTable;
use crate::locks::Locked;
use crate::provider::changelog::ChangelogProvider;
use crate::provider::current::CurrentTableProvider;
use crate::provider::current_scan::CurrentScanExec;

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
    /// Where its physical plan is kept, when it may be (see the module docs).
    physical: Option<PhysicalSlot>,
    /// Whether it has parameters.
    takes_params: bool,
}

/// A kept plan's physical plan, once made; shared by the copies of the kept plan.
type PhysicalSlot = Arc<Mutex<Physical>>;

/// What a kept plan's physical slot holds.
#[derive(Debug, Default)]
enum Physical {
    /// Not made yet.
    #[default]
    Unmade,
    /// Made at a run, its scans unbound.
    Kept(Arc<dyn ExecutionPlan>),
    /// Its parameters do not all go to scans: made at every run (see the module docs).
    Refused,
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
            physical: physically_reusable(plan).then(Arc::default),
            takes_params: has_params(plan),
        })
    }

    /// Keeps `physical`, this plan made physical for a run, when it may run again (see the
    /// module docs); call it before that run executes it.
    pub fn keep_physical(&self, physical: &Arc<dyn ExecutionPlan>) -> DFResult<()> {
        let Some(slot) = &self.physical else {
            return Ok(());
        };
        let unbound = fresh_copy(Arc::clone(physical), |scan| Ok(scan.unbound()))?;
        *slot.locked() = Physical::Kept(unbound);
        Ok(())
    }

    /// The kept physical plan bound to what `config` pins, ready for one run; `None` when none
    /// is kept.
    pub(super) fn bind_physical(
        &self,
        config: &SessionConfig,
    ) -> DFResult<Option<Arc<dyn ExecutionPlan>>> {
        let kept = match self.physical.as_ref().map(|slot| slot.locked()).as_deref() {
            Some(Physical::Kept(plan)) => Arc::clone(plan),
            _ => return Ok(None),
        };
        Ok(Some(fresh_copy(kept, |scan| scan.bind(config))?))
    }

    /// Whether it takes parameters and may still keep a physical plan with them.
    pub(super) fn may_keep_with_params(&self) -> bool {
        self.takes_params
            && self
                .physical
                .as_ref()
                .is_some_and(|slot| !matches!(*slot.locked(), Physical::Refused))
    }

    /// `optimized` (this plan, optimized with its parameters in place) may be kept physical:
    /// every parameter is in a scan's filters. Otherwise the plan refuses its physical form
    /// from now on.
    pub(super) fn params_only_in_scans(&self, optimized: &LogicalPlan) -> bool {
        let fine = params_only_in_scans(optimized);
        if !fine {
            if let Some(slot) = &self.physical {
                *slot.locked() = Physical::Refused;
            }
        }
        fine
    }

    /// The plan's result columns.
    pub fn schema(&self) -> &datafusion::common::DFSchemaRef {
        self.plan.schema()
    }

    /// The logical plan itself.
    pub fn logical_plan(&self) -> &LogicalPlan {
        &self.plan
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

/// A copy of `plan` to run afresh: each current-table scan as `scan` makes it, every other
/// node with fresh state (see the module docs).
fn fresh_copy(
    plan: Arc<dyn ExecutionPlan>,
    scan: impl Fn(&CurrentScanExec) -> DFResult<Arc<dyn ExecutionPlan>>,
) -> DFResult<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .transform_up(|node| {
            let fresh = match node.downcast_ref::<CurrentScanExec>() {
                Some(s) => scan(s)?,
                None => node.reset_state()?,
            };
            Ok(Transformed::yes(fresh))
        })?
        .data)
}

/// Whether `plan` has parameters.
fn has_params(plan: &LogicalPlan) -> bool {
    placeholders_where(plan, |_| true)
}

/// Whether every parameter of `plan` (optimized) is in the filters of a table scan: those
/// were pushed to a current table's scan as answered exactly (a filter that is not stays
/// above the scan, where it would be found).
fn params_only_in_scans(plan: &LogicalPlan) -> bool {
    !placeholders_where(plan, |node| !matches!(node, LogicalPlan::TableScan(_)))
}

/// Whether an expression of a node of `plan` (its subqueries' too) that `looked_at` accepts
/// holds a parameter.
fn placeholders_where(plan: &LogicalPlan, looked_at: impl Fn(&LogicalPlan) -> bool) -> bool {
    let mut found = false;
    let stop = |found: bool| match found {
        true => TreeNodeRecursion::Stop,
        false => TreeNodeRecursion::Continue,
    };
    let _ = plan.apply_with_subqueries(|node| {
        if looked_at(node) {
            node.apply_expressions(|e| {
                e.apply(|e| {
                    found |= matches!(e, Expr::Placeholder(_));
                    Ok(stop(found))
                })
            })?;
        }
        Ok(stop(found))
    });
    found
}

/// Whether `plan`'s physical plan may be kept too: it reads only current tables and calls no
/// stable function; one with parameters is checked again once optimized (see the module
/// docs).
fn physically_reusable(plan: &LogicalPlan) -> bool {
    let mut fine = true;
    let walked = plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::TableScan(scan) => {
                fine &=
                    source_as_provider(&scan.source).is_ok_and(|p| p.is::<CurrentTableProvider>());
            }
            // Their text is made at planning: it shows each run's plan as that run binds it.
            LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) => fine = false,
            _ => {}
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                let folded = match e {
                    Expr::ScalarFunction(f) => f.func.signature().volatility == Volatility::Stable,
                    _ => false,
                };
                fine &= !folded;
                Ok(if fine {
                    TreeNodeRecursion::Continue
                } else {
                    TreeNodeRecursion::Stop
                })
            })
        })?;
        Ok(if fine {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    walked.is_ok() && fine
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
