//! DataFusion tables over captured state: the current table and the changelog of every table.
//!
//! # Consistency
//! A capture publishes a [`SourceVersion`] after each source transaction: the snapshots of all
//! its tables and changelogs at one binlog position, swapped in atomically. A query reads one
//! version for all tables of a source: [`pin`] captures the versions once per query (the engine
//! does this before planning); a scan outside a pinned query reads the latest version. Either
//! way a query never sees half a source transaction.
//!
//! * [`current`]: `db.table`, the state at the version's position, with projection, primary-key
//!   lookup, limit and row-count statistics;
//! * [`changelog`]: `db.table$changelog`, every change up to that position, with pruning by
//!   position and commit time;
//! * [`health`]: the faults that stopped a source or table; scans of a stopped table fail
//!   unless the session reads stale state;
//! * [`tail`]: the unbounded changelog, `changelog_tail('source', 'db.table')`, for pipelines
//!   and subscriptions;
//! * [`mysql`]: reads straight from the source's server, `mysql_snapshot` (a consistent chunked
//!   read) and `mysql_binlog` (the raw change stream), for reconciliation and debugging.

pub mod changelog;
pub mod current;
pub mod health;
pub mod mysql;
pub mod tail;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arc_swap::ArcSwap;
use datafusion::catalog::Session;

use crate::capture::TableStop;
use crate::source::position::BinlogCoord;
use crate::state::changelog::Changelog;
use crate::state::current::TableSnapshot;

/// An in-memory scan of `partitions` with the pushed-down projection and limit: the plan every
/// provider here ends in once it has chosen its batches.
pub fn memory_scan(
    partitions: &[Vec<arrow::array::RecordBatch>],
    schema: arrow::datatypes::SchemaRef,
    projection: Option<&Vec<usize>>,
    limit: Option<usize>,
) -> datafusion::error::Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
    let config = datafusion_datasource::memory::MemorySourceConfig::try_new(
        partitions,
        schema,
        projection.cloned(),
    )?
    .with_limit(limit);
    Ok(datafusion_datasource::source::DataSourceExec::from_data_source(config))
}

/// Suffix of a table's changelog name.
pub const CHANGELOG_SUFFIX: &str = "$changelog";

/// Every table of one source at one position.
#[derive(Debug, Clone, Default)]
pub struct SourceVersion {
    /// The binlog position the version reflects; `None` before the first publication.
    pub position: Option<BinlogCoord>,
    /// Whether the current tables are the source's state at `position` (false while the
    /// snapshot is a mix of chunk boundaries).
    pub consistent: bool,
    pub tables: Vec<TableSnapshot>,
    pub changelogs: Vec<Changelog>,
    /// Tables whose capture stopped at or before `position` (by index): their snapshot and
    /// changelog end where it stopped, and scans refuse them (see [`health`]).
    pub stopped: Arc<BTreeMap<usize, TableStop>>,
}

/// The latest published version of a source.
pub type Published = Arc<ArcSwap<SourceVersion>>;

/// Versions pinned for one query, by source name (a session config extension).
#[derive(Debug, Default)]
pub struct PinnedVersions(pub HashMap<String, Arc<SourceVersion>>);

/// The version a scan of `source` reads: the query's pinned one, else the latest.
pub fn version_for(
    session: &dyn Session,
    source: &str,
    published: &Published,
) -> Arc<SourceVersion> {
    session
        .config()
        .get_extension::<PinnedVersions>()
        .and_then(|p| p.0.get(source).cloned())
        .unwrap_or_else(|| published.load_full())
}

/// Pins the current version of every source for one query.
pub fn pin<'a>(sources: impl IntoIterator<Item = (&'a str, &'a Published)>) -> PinnedVersions {
    PinnedVersions(
        sources
            .into_iter()
            .map(|(name, p)| (name.to_string(), p.load_full()))
            .collect(),
    )
}
