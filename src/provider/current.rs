//! `db.table`: the current table of a captured table as a DataFusion [`TableProvider`].
//!
//! # Pushdown
//! * Projection and `LIMIT` go to the scan ([`CurrentScanExec`]).
//! * Equality and `IN` filters on a single-column primary key are answered from the table's
//!   index ([`TableSnapshot::lookup`](crate::state::current::TableSnapshot::lookup)) and marked
//!   exact, so a point lookup touches only the rows it returns. Without one, the first such
//!   filter on the first column of a secondary index is answered from that index
//!   ([`TableSnapshot::lookup_index`](crate::state::current::TableSnapshot::lookup_index)), or
//!   by a scan that applies it when the session turned indexes off
//!   (`cdcfusion.indexes = off`). Other filters are applied by DataFusion above the scan.
//! * The provider's statistics give the exact row count of the latest version; a scan's are
//!   inexact, since a kept plan's scan reads another version at each run (`current_scan`).
//!
//! A scan reads the schema of the version it reads; one planned against an older schema of
//! the table (a DDL followed meanwhile) fails with [`SchemaChanged`] rather than return rows
//! in the wrong columns.
//!
//! The table's constraints are its MySQL primary key (none for a keyless table), for the
//! planner and for catalogs that describe tables to clients.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{Constraint, Constraints, Result, ScalarValue, Statistics};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use super::current_scan::{deal, CurrentScanExec, IndexLookup, ScanTarget};
pub use super::current_scan::{key_bytes, lookup_key, SchemaChanged};
use super::health::{ReadPolicy, SharedHealth};
use super::version_for;
use crate::capture::version::Published;
use crate::change::schema::TableSchema;

/// The current table `index` of a source.
#[derive(Debug)]
pub struct CurrentTableProvider {
    source: String,
    published: Published,
    index: usize,
    table: Arc<TableSchema>,
    /// Refuses scans of a table whose capture stopped (see `health`).
    health: Option<SharedHealth>,
    /// The MySQL primary key, if the table has one.
    constraints: Option<Constraints>,
}

impl CurrentTableProvider {
    pub fn new(source: &str, published: Published, index: usize, table: Arc<TableSchema>) -> Self {
        let constraints = (!table.primary_key.is_empty()).then(|| {
            Constraints::new_unverified(vec![Constraint::PrimaryKey(table.primary_key.clone())])
        });
        Self {
            constraints,
            source: source.to_string(),
            published,
            index,
            table,
            health: None,
        }
    }

    /// Scans check `health` first.
    pub fn guarded(mut self, health: SharedHealth) -> Self {
        self.health = Some(health);
        self
    }

    /// The source the table belongs to.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The table's index in its source's versions.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The table's schema as the provider was made with.
    pub fn table(&self) -> &Arc<TableSchema> {
        &self.table
    }

    /// The primary-key column when it is a single column.
    fn key_column(&self) -> Option<&str> {
        match self.table.primary_key.as_slice() {
            [k] => Some(self.table.columns[*k].name.as_str()),
            _ => None,
        }
    }

    /// The literal key values a filter selects (see [`values_of`]).
    fn key_values(&self, filter: &Expr) -> Option<Vec<ScalarValue>> {
        values_of(self.key_column()?, filter)
    }

    /// The first secondary index whose first column a filter selects literal values of (see
    /// [`values_of`]), with those values. Not on a floating-point column: SQL has `-0 = 0`,
    /// their bytes differ.
    fn index_values(&self, filter: &Expr) -> Option<(usize, Vec<ScalarValue>)> {
        self.table
            .indexes
            .iter()
            .enumerate()
            .find_map(|(i, index)| {
                let first = index.columns[0];
                if self.table.arrow.field(first).data_type().is_floating() {
                    return None;
                }
                Some((i, values_of(&self.table.columns[first].name, filter)?))
            })
    }

    /// Which of `filters` the scan answers itself: every primary-key filter; with none, the
    /// first one a secondary index answers.
    fn answered(&self, filters: &[&Expr]) -> Vec<bool> {
        let keys: Vec<bool> = filters
            .iter()
            .map(|f| self.key_values(f).is_some())
            .collect();
        if keys.contains(&true) {
            return keys;
        }
        let first = filters.iter().position(|f| self.index_values(f).is_some());
        (0..filters.len()).map(|i| Some(i) == first).collect()
    }
}

/// The literal values a filter selects of `column`, if it is `column = lit`, `lit = column`,
/// `column IN (lits)`, or a disjunction of those (DataFusion rewrites short IN lists so).
fn values_of(column: &str, filter: &Expr) -> Option<Vec<ScalarValue>> {
    let is_column = |e: &Expr| matches!(e, Expr::Column(c) if c.name == column);
    match filter {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => {
            let mut values = values_of(column, left)?;
            values.extend(values_of(column, right)?);
            Some(values)
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => match (left.as_ref(), right.as_ref()) {
            (c, Expr::Literal(v, _)) | (Expr::Literal(v, _), c) if is_column(c) && !v.is_null() => {
                Some(vec![v.clone()])
            }
            _ => None,
        },
        Expr::InList(list) if !list.negated && is_column(&list.expr) => list
            .list
            .iter()
            .map(|e| match e {
                Expr::Literal(v, _) if !v.is_null() => Some(v.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

#[async_trait]
impl TableProvider for CurrentTableProvider {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.table.arrow)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn constraints(&self) -> Option<&Constraints> {
        self.constraints.as_ref()
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(self
            .answered(filters)
            .into_iter()
            .map(|answered| match answered {
                true => TableProviderFilterPushDown::Exact,
                false => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    fn statistics(&self) -> Option<Statistics> {
        let version = self.published.load_full();
        let snap = version.tables.get(self.index)?;
        let mut stats = Statistics::new_unknown(&self.table.arrow);
        stats.num_rows = Precision::Exact(snap.len());
        Some(stats)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let keys = self.pushed_keys(filters);
        // Without key filters, the one filter a secondary index answers (see `answered`).
        let by_index = match keys {
            Some(_) => None,
            None => filters.iter().find_map(|f| self.index_values(f)),
        };
        let by_index = by_index.map(|(i, values)| IndexLookup {
            index: self.table.indexes[i].clone(),
            values,
            planned_with_index: state
                .config()
                .get_extension::<ReadPolicy>()
                .is_none_or(|p| p.indexes),
        });
        // One partition for a lookup or a table that fits in one batch, as many as the
        // session runs in parallel otherwise; kept for every run of the plan.
        let batch_size = state.config().batch_size();
        let partitions = match (&keys, &by_index) {
            (Some(_), _) | (_, Some(_)) => 1,
            (None, None) => {
                let rows = version_for(state, &self.source, &self.published)
                    .tables
                    .get(self.index)
                    .map_or(0, |t| t.len());
                if rows <= batch_size {
                    1
                } else {
                    state.config().target_partitions().max(1)
                }
            }
        };
        let target = ScanTarget {
            source: self.source.clone(),
            published: Arc::clone(&self.published),
            index: self.index,
            table: Arc::clone(&self.table),
            health: self.health.clone(),
            keys,
            by_index,
            projection: projection.cloned(),
            limit,
            partitions,
            batch_size,
        };
        Ok(Arc::new(CurrentScanExec::planned(target, state.config())?))
    }
}

impl CurrentTableProvider {
    /// The key values every pushed filter selects (each pushed filter is a key filter, the
    /// others were refused; they all hold, so the keys are the intersection of their value
    /// sets); `None` when no filter was pushed.
    fn pushed_keys(&self, filters: &[Expr]) -> Option<Vec<ScalarValue>> {
        let mut keys: Option<Vec<ScalarValue>> = None;
        for f in filters {
            if let Some(values) = self.key_values(f) {
                keys = Some(match keys {
                    None => values,
                    Some(prev) => prev.into_iter().filter(|v| values.contains(v)).collect(),
                });
            }
        }
        keys
    }
}

/// [`deal`]t over at most `n` partitions, the empty ones left out.
pub(super) fn partition(
    batches: Vec<RecordBatch>,
    n: usize,
    batch_size: usize,
) -> Vec<Vec<RecordBatch>> {
    let mut out = deal(batches, n, batch_size);
    out.retain(|p| !p.is_empty());
    if out.is_empty() {
        out.push(Vec::new());
    }
    out
}
