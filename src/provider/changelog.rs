//! `db.table$changelog`: every change of a captured table as a DataFusion [`TableProvider`].
//!
//! A bounded scan returns the history up to the version's position. Filters on `_position`
//! and `_commit_ts` (comparisons with literals) prune whole segments by their ranges; they are
//! reported inexact, so DataFusion still applies them row by row. Segments spilled to the state
//! store are read back as the scan reaches them (`segments`). Every batch is brought to the
//! provider's schema, the union of the table's schemas, by column name (`state::changelog`'s
//! `adapt`): entries written before a DDL read as the table's later columns, NULL where a
//! column did not exist.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{Result, ScalarValue, Statistics};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use super::health::SharedHealth;
use super::segments::segments_scan;
use super::{memory_scan, version_for, CHANGELOG_SUFFIX};
use crate::capture::version::Published;
use crate::change::schema::TableId;
use crate::provider::crossing::through_datafusion;
use crate::state::changelog::format;
use crate::state::changelog::{adapted, ChangelogSegment};

/// The changelog of table `index` of a source.
#[derive(Debug)]
pub struct ChangelogProvider {
    source: String,
    published: Published,
    index: usize,
    schema: SchemaRef,
    /// Refuses scans of a table whose capture stopped (see `health`); not of a dropped one,
    /// whose changelog is exact (its rows deleted at the `DROP`, nothing after it).
    guard: Option<(SharedHealth, TableId)>,
}

impl ChangelogProvider {
    pub fn new(source: &str, published: Published, index: usize, schema: SchemaRef) -> Self {
        Self {
            source: source.to_string(),
            published,
            index,
            schema,
            guard: None,
        }
    }

    /// Scans check `health` for `table` first.
    pub fn guarded(mut self, health: SharedHealth, table: TableId) -> Self {
        self.guard = Some((health, table));
        self
    }

    /// The source the changelog belongs to.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The table's index in its source's versions.
    pub fn index(&self) -> usize {
        self.index
    }
}

/// A range condition on a segment-level column.
#[derive(Debug, Clone)]
enum Bound {
    Position(Operator, String),
    CommitTs(Operator, i64),
}

fn flip(op: Operator) -> Operator {
    match op {
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        other => other,
    }
}

fn bound(filter: &Expr) -> Option<Bound> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = filter else {
        return None;
    };
    if !matches!(
        op,
        Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
    ) {
        return None;
    }
    let (column, value, op) = match (left.as_ref(), right.as_ref()) {
        (Expr::Column(c), Expr::Literal(v, _)) => (c, v, *op),
        (Expr::Literal(v, _), Expr::Column(c)) => (c, v, flip(*op)),
        _ => return None,
    };
    match (column.name.as_str(), value) {
        (
            format::POSITION,
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)),
        ) => Some(Bound::Position(op, s.clone())),
        (format::COMMIT_TS, ScalarValue::TimestampMicrosecond(Some(t), _)) => {
            Some(Bound::CommitTs(op, *t))
        }
        _ => None,
    }
}

/// Whether a segment whose values lie in `[lo, hi]` can hold a row satisfying `op v`.
fn overlaps<T: PartialOrd>(lo: &T, hi: &T, op: Operator, v: &T) -> bool {
    match op {
        Operator::Eq => lo <= v && v <= hi,
        Operator::Lt => lo < v,
        Operator::LtEq => lo <= v,
        Operator::Gt => hi > v,
        Operator::GtEq => hi >= v,
        _ => true,
    }
}

fn keep(segment: &ChangelogSegment, bounds: &[Bound]) -> bool {
    bounds.iter().all(|b| match b {
        Bound::Position(op, v) => overlaps(&segment.min_position, &segment.max_position, *op, v),
        Bound::CommitTs(op, v) => match (segment.min_commit_ts, segment.max_commit_ts) {
            (Some(lo), Some(hi)) => overlaps(&lo, &hi, *op, v),
            // Snapshot reads have no commit time: no comparison holds for NULL.
            _ => false,
        },
    })
}

#[async_trait]
impl TableProvider for ChangelogProvider {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| match bound(f) {
                Some(_) => TableProviderFilterPushDown::Inexact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    fn statistics(&self) -> Option<Statistics> {
        let version = self.published.load_full();
        let log = version.changelogs.get(self.index)?;
        let mut stats = Statistics::new_unknown(&self.schema);
        stats.num_rows = Precision::Exact(log.retained_rows());
        Some(stats)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let version = version_for(state, &self.source, &self.published);
        if let Some((health, table)) = &self.guard {
            let shown = format!("{}.\"{}{CHANGELOG_SUFFIX}\"", table.db, table.table);
            let stop = version.stopped.get(&self.index).filter(|s| !s.dropped);
            health.check(state.config(), &self.source, table, &shown, stop)?;
        }
        let bounds: Vec<Bound> = filters.iter().filter_map(bound).collect();
        let segments: Vec<Arc<ChangelogSegment>> = version
            .changelogs
            .get(self.index)
            .map(|log| {
                log.segments()
                    .filter(|s| keep(s, &bounds))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        // Entries held as batches are scanned in place; a snapshot chunk's are built and
        // spilled ones read back as the scan reaches them.
        match segments
            .iter()
            .map(|s| s.as_batch())
            .collect::<Option<Vec<_>>>()
        {
            Some(batches) => {
                // Entries written under an older schema of the table read as this one.
                let batches = batches
                    .into_iter()
                    .map(|b| adapted(b, &self.schema))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(through_datafusion)?;
                memory_scan(&[batches], self.schema(), projection, limit)
            }
            None => segments_scan(segments, &self.schema, projection, limit),
        }
    }
}
