//! DataFusion tables over captured state: the current table and the changelog of every table.
//!
//! # Consistency
//! A capture publishes a `SourceVersion` (see `capture::version`) after each source transaction: the snapshots of all
//! its tables and changelogs at one binlog position, swapped in atomically. A query reads one
//! version for all tables of a source: [`pin`] captures the versions once per query (the engine
//! does this before planning); a scan outside a pinned query reads the latest version. Either
//! way a query never sees half a source transaction.
//!
//! * [`current`]: `db.table`, the state at the version's position, with projection, primary-key
//!   lookup, limit and row-count statistics; its scans ([`current_scan`]) are bound to the
//!   version they read and can be bound again, so a kept physical plan reads each run's;
//!   `index_filters` decides which filters an index (secondary, or the primary key's columns
//!   for ranges) answers;
//! * [`as_of`]: `db.table` as it was at a past position or time, rebuilt from the current
//!   table and the changelog's entries after that point;
//! * [`changelog`]: `db.table$changelog`, every change up to that position, with pruning by
//!   position and commit time; [`segments`] reads segments spilled to the state store back;
//! * [`health`]: the faults that stopped a source or table; scans of a stopped table fail
//!   unless the session reads stale state;
//! * [`tail`]: the unbounded changelog, `changelog_tail('source', 'db.table' [, 'after'])`,
//!   for pipelines and subscriptions, resumable strictly after any entry;
//! * [`subscribe`]: `SUBSCRIBE`, a query's rows over one current table at a point, then every
//!   change to them, each row with a `_position` to start again from;
//! * [`mysql`]: reads straight from the source's server, `mysql_snapshot` (a consistent chunked
//!   read) and `mysql_binlog` (the raw change stream), for reconciliation and debugging;
//! * [`reconcile`]: `reconcile('source', 'db.table')`, the differences between the server's
//!   table and the engine's at one position, from chunk checksums and the changelog;
//! * [`crossing`]: how an error of ours crosses DataFusion, with its SQLSTATE;
//! * [`plans`]: the execution plans that read the server: a snapshot's chunks as partitions,
//!   and a table's binlog changes as an unbounded stream.

pub mod as_of;
pub mod changelog;
pub mod crossing;
pub mod current;
pub mod current_scan;
pub mod health;
pub mod index_filters;
pub mod mysql;
pub mod plans;
pub mod reconcile;
pub mod segments;
pub mod subscribe;
pub mod tail;

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::catalog::Session;

use crate::capture::version::{Published, SourceVersion};

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

/// Versions pinned for one query, by source name (a session config extension).
#[derive(Debug, Default)]
pub struct PinnedVersions(pub HashMap<String, Arc<SourceVersion>>);

/// The version a scan of `source` reads: the query's pinned one, else the latest.
pub fn version_for(
    session: &dyn Session,
    source: &str,
    published: &Published,
) -> Arc<SourceVersion> {
    version_in(session.config(), source, published)
}

/// [`version_for`] a session's configuration (what a plan's execution sees too).
pub fn version_in(
    config: &datafusion::prelude::SessionConfig,
    source: &str,
    published: &Published,
) -> Arc<SourceVersion> {
    config
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
