//! `db.table`: the current table of a captured table as a DataFusion [`TableProvider`].
//!
//! # Pushdown
//! * Projection and `LIMIT` go to the scan ([`CurrentScanExec`]).
//! * Filters a lookup can answer are marked exact: equality and `IN` on a single-column
//!   primary key, equality and `IN` on the first column of a secondary index, and ranges of
//!   the first column of the primary key or of a secondary index, against literals or
//!   parameters of the column's type (`index_filters`). A scan makes one lookup: the key's
//!   ([`TableSnapshot::lookup`](crate::state::current::TableSnapshot::lookup)); without key
//!   filters, the first index filter of values
//!   ([`TableSnapshot::lookup_index`](crate::state::current::TableSnapshot::lookup_index));
//!   without one, the ranges of the first index one is found for, the primary key's first
//!   ([`TableSnapshot::lookup_range`](crate::state::current::TableSnapshot::lookup_range)).
//!   The other pushed filters are applied to the rows it found ([`Condition`]), so a point
//!   lookup touches only the rows it returns. A session that turned indexes off
//!   (`cdcfusion.indexes = off`) has the lookup made by a scan. Other filters are applied by
//!   DataFusion above the scan.
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
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{Constraint, Constraints, Result, Statistics};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use super::current_scan::{deal, CurrentScanExec, ScanTarget};
pub use super::current_scan::{key_bytes, lookup_key, SchemaChanged};
use super::health::{ReadPolicy, SharedHealth};
use super::index_filters::{
    range_indexes, range_of, values_of, Condition, IndexLookup, Operand, Range, Wanted,
};
use super::version_for;
use crate::capture::version::Published;
use crate::change::schema::{IndexSpec, TableSchema};

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

    /// The primary-key column when it is a single column: its name and type.
    fn key_column(&self) -> Option<(&str, &DataType)> {
        match self.table.primary_key.as_slice() {
            [k] => Some((
                self.table.columns[*k].name.as_str(),
                self.table.arrow.field(*k).data_type(),
            )),
            _ => None,
        }
    }

    /// The key values a filter selects (see [`values_of`]).
    fn key_values(&self, filter: &Expr) -> Option<Vec<Operand>> {
        let (name, data_type) = self.key_column()?;
        values_of(name, data_type, filter)
    }

    /// The first secondary index whose first column a filter selects literal values of (see
    /// [`values_of`]), with those values; not on a floating-point column (`index_filters`).
    fn index_values(&self, filter: &Expr) -> Option<(usize, Vec<Operand>)> {
        self.table
            .indexes
            .iter()
            .enumerate()
            .find_map(|(i, index)| {
                let (name, data_type) = self.first_column(index);
                if data_type.is_floating() {
                    return None;
                }
                Some((i, values_of(name, data_type, filter)?))
            })
    }

    /// The first index (the primary key's, then the secondary ones) whose first column one of
    /// `filters` selects a range of (see [`range_of`]).
    fn range_index<'a>(
        &self,
        filters: impl Iterator<Item = &'a Expr> + Clone,
    ) -> Option<IndexSpec> {
        range_indexes(&self.table).find(|index| {
            let (name, data_type) = self.first_column(index);
            filters
                .clone()
                .any(|f| range_of(name, data_type, f).is_some())
        })
    }

    /// The range `filter` selects of the first column of an index (the first index whose first
    /// column it compares), with that column.
    fn range_on(&self, filter: &Expr) -> Option<(usize, Range<Operand>)> {
        range_indexes(&self.table).find_map(|index| {
            let (name, data_type) = self.first_column(&index);
            Some((index.columns[0], range_of(name, data_type, filter)?))
        })
    }

    /// The name and type of `index`'s first column.
    fn first_column(&self, index: &IndexSpec) -> (&str, &DataType) {
        let first = index.columns[0];
        (
            &self.table.columns[first].name,
            self.table.arrow.field(first).data_type(),
        )
    }

    /// Which of `filters` the scan answers itself: each that a lookup could answer (a key
    /// filter, an index's values, a range of an index's first column). The scan makes one
    /// lookup and applies the rest to the rows it found (see [`Self::lookups`]); the answer
    /// for a filter never depends on the others, since the optimizer may offer them in
    /// several passes.
    fn answered(&self, filters: &[&Expr]) -> Vec<bool> {
        filters
            .iter()
            .map(|f| {
                self.key_values(f).is_some()
                    || self.index_values(f).is_some()
                    || self.range_on(f).is_some()
            })
            .collect()
    }

    /// What a scan makes of the pushed `filters` (each one [`Self::answered`] marked exact in
    /// some pass of the optimizer): the key values of every key filter; without one, the
    /// lookup by the first index filter of values, or by the ranges of the first index one
    /// is found for; and the filters that lookup does not use, as conditions the scan
    /// applies to the rows it read.
    fn lookups(&self, filters: &[Expr], planned_with_index: bool) -> Result<Lookups> {
        let mut used = vec![false; filters.len()];
        let sets: Vec<Vec<Operand>> = filters
            .iter()
            .zip(&mut used)
            .filter_map(|(f, used)| {
                let values = self.key_values(f)?;
                *used = true;
                Some(values)
            })
            .collect();
        let keys = (!sets.is_empty()).then_some(sets);
        let mut by_index = None;
        if keys.is_none() {
            if let Some((at, (i, values))) = filters
                .iter()
                .enumerate()
                .find_map(|(at, f)| Some((at, self.index_values(f)?)))
            {
                used[at] = true;
                by_index = Some((self.table.indexes[i].clone(), Wanted::Values(values)));
            } else if let Some(index) = self.range_index(filters.iter()) {
                let (name, data_type) = self.first_column(&index);
                let mut ranges = Vec::new();
                for (f, used) in filters.iter().zip(&mut used) {
                    if let Some(range) = range_of(name, data_type, f) {
                        ranges.push(range);
                        *used = true;
                    }
                }
                by_index = Some((index, Wanted::Ranges(ranges)));
            }
        }
        let by_index = by_index.map(|(index, wanted)| IndexLookup {
            index,
            wanted,
            planned_with_index,
        });
        let conditions = filters
            .iter()
            .zip(&used)
            .filter(|(_, used)| !**used)
            .map(|(f, _)| self.condition(f))
            .collect::<Result<Vec<_>>>()?;
        Ok(Lookups {
            keys,
            by_index,
            conditions,
        })
    }

    /// A pushed filter as a condition on the one column it compares.
    fn condition(&self, filter: &Expr) -> Result<Condition> {
        let on = |column: usize, wanted: Wanted| Condition {
            column,
            name: self.table.columns[column].name.clone(),
            wanted,
        };
        if let Some(values) = self.key_values(filter) {
            return Ok(on(self.table.primary_key[0], Wanted::Values(values)));
        }
        if let Some((i, values)) = self.index_values(filter) {
            return Ok(on(self.table.indexes[i].columns[0], Wanted::Values(values)));
        }
        if let Some((column, range)) = self.range_on(filter) {
            return Ok(on(column, Wanted::Ranges(vec![range])));
        }
        Err(datafusion::error::DataFusionError::Internal(format!(
            "the scan of {} was given a filter it does not answer: {filter}",
            self.table.id
        )))
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
        let planned_with_index = state
            .config()
            .get_extension::<ReadPolicy>()
            .is_none_or(|p| p.indexes);
        let Lookups {
            keys,
            by_index,
            conditions,
        } = self.lookups(filters, planned_with_index)?;
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
            conditions,
            projection: projection.cloned(),
            limit,
            partitions,
            batch_size,
        };
        Ok(Arc::new(CurrentScanExec::planned(target, state.config())?))
    }
}

/// See [`CurrentTableProvider::lookups`].
struct Lookups {
    keys: Option<Vec<Vec<Operand>>>,
    by_index: Option<IndexLookup>,
    conditions: Vec<Condition>,
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
