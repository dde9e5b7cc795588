//! `db.table`: the current table of a captured table as a DataFusion [`TableProvider`].
//!
//! # Pushdown
//! * Projection and `LIMIT` go to the in-memory scan.
//! * Equality and `IN` filters on a single-column primary key are answered from the table's
//!   index ([`TableSnapshot::lookup`]) and marked exact, so a point lookup touches only the rows
//!   it returns; other filters are applied by DataFusion above the scan.
//! * Statistics report the exact row count of the version the scan reads.
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
use datafusion::common::{
    Constraint, Constraints, DataFusionError, Result, ScalarValue, Statistics,
};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use super::health::SharedHealth;
use super::{memory_scan, version_for};
use crate::capture::version::Published;
use crate::change::schema::TableSchema;
use crate::state::current::{KeyBytes, TableSnapshot};

/// A scan planned against one schema of a table that finds another in the version it reads: a
/// DDL was followed between planning and reading. Running the statement again plans it
/// against the new schema.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the columns of {table} changed (schema version {version}) after this statement was planned; run it again")]
pub struct SchemaChanged {
    pub table: String,
    pub version: u32,
}

impl SchemaChanged {
    /// `serialization_failure`: the statement may simply be run again.
    pub fn sqlstate(&self) -> &'static str {
        "40001"
    }
}

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

    /// The literal key values a filter selects, if it is `key = lit`, `lit = key`,
    /// `key IN (lits)`, or a disjunction of those (DataFusion rewrites short IN lists so).
    fn key_values(&self, filter: &Expr) -> Option<Vec<ScalarValue>> {
        let key = self.key_column()?;
        let is_key = |e: &Expr| matches!(e, Expr::Column(c) if c.name == key);
        match filter {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Or,
                right,
            }) => {
                let mut values = self.key_values(left)?;
                values.extend(self.key_values(right)?);
                Some(values)
            }
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) => match (left.as_ref(), right.as_ref()) {
                (c, Expr::Literal(v, _)) | (Expr::Literal(v, _), c)
                    if is_key(c) && !v.is_null() =>
                {
                    Some(vec![v.clone()])
                }
                _ => None,
            },
            Expr::InList(list) if !list.negated && is_key(&list.expr) => list
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
        Ok(filters
            .iter()
            .map(|f| match self.key_values(f) {
                Some(_) => TableProviderFilterPushDown::Exact,
                None => TableProviderFilterPushDown::Unsupported,
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
        let version = version_for(state, &self.source, &self.published);
        if let Some(health) = &self.health {
            let stop = version.stopped.get(&self.index);
            let shown = self.table.id.to_string();
            health.check(state, &self.source, &self.table.id, &shown, stop)?;
        }
        let Some(snap) = version.tables.get(self.index) else {
            return memory_scan(&[vec![]], self.schema(), projection, limit);
        };
        if snap.schema().arrow != self.table.arrow {
            return Err(DataFusionError::External(Box::new(SchemaChanged {
                table: self.table.id.to_string(),
                version: snap.schema().version,
            })));
        }
        // Every pushed filter is a key filter (the others were refused); they all hold, so the
        // keys are the intersection of their value sets.
        let mut keys: Option<Vec<ScalarValue>> = None;
        for f in filters {
            if let Some(values) = self.key_values(f) {
                keys = Some(match keys {
                    None => values,
                    Some(prev) => prev.into_iter().filter(|v| values.contains(v)).collect(),
                });
            }
        }
        let batches = match keys {
            Some(values) => vec![snap.lookup(&self.encode_keys(snap, &values)?)?],
            None => snap.scan_all()?,
        };
        let partitions = partition(
            batches,
            state.config().target_partitions(),
            state.config().batch_size(),
        );
        memory_scan(&partitions, self.schema(), projection, limit)
    }
}

/// Cuts batches into slices of `batch_size` rows dealt over `n` partitions, so that scans of a
/// large table run in parallel (slicing shares the buffers; nothing is copied).
pub(super) fn partition(
    batches: Vec<RecordBatch>,
    n: usize,
    batch_size: usize,
) -> Vec<Vec<RecordBatch>> {
    let n = n.max(1);
    let mut out = vec![Vec::new(); n];
    let mut i = 0;
    for batch in batches {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let len = batch_size.max(1).min(batch.num_rows() - offset);
            out[i % n].push(batch.slice(offset, len));
            offset += len;
            i += 1;
        }
    }
    out.retain(|p| !p.is_empty());
    if out.is_empty() {
        out.push(Vec::new());
    }
    out
}

impl CurrentTableProvider {
    /// Key bytes of literal key values (single-column key) in the version the scan reads;
    /// values that do not fit the key column's type select nothing.
    fn encode_keys(&self, snap: &TableSnapshot, values: &[ScalarValue]) -> Result<Vec<KeyBytes>> {
        let mut out = Vec::with_capacity(values.len());
        for v in values {
            if let Some(key) = key_bytes(snap, std::slice::from_ref(v))? {
                out.push(key);
            }
        }
        Ok(out)
    }
}

/// The key bytes of one value per primary-key column (in key order), each cast to its
/// column's type. `None` when the key selects nothing: a NULL, a value that does not fit its
/// column's type (a lossy cast, e.g. 1.5 to an integer, would find the wrong row), or a
/// number of values other than the key's.
pub fn key_bytes(snap: &TableSnapshot, values: &[ScalarValue]) -> Result<Option<KeyBytes>> {
    let schema = snap.schema();
    if values.len() != schema.primary_key.len() {
        return Ok(None);
    }
    let mut columns = Vec::with_capacity(values.len());
    for (v, &k) in values.iter().zip(&schema.primary_key) {
        if v.is_null() {
            return Ok(None);
        }
        let Ok(cast) = v.cast_to(schema.arrow.field(k).data_type()) else {
            return Ok(None);
        };
        if cast.cast_to(&v.data_type()).ok().as_ref() != Some(v) {
            return Ok(None);
        }
        columns.push(cast.to_array()?);
    }
    let rows = snap.codec().encode_keys(&columns)?;
    Ok(Some(rows.row(0).as_ref().into()))
}

/// The row under one primary key (one value per key column, see [`key_bytes`]) in `snap`,
/// as a batch of the table's schema with at most one row.
pub fn lookup_key(snap: &TableSnapshot, values: &[ScalarValue]) -> Result<RecordBatch> {
    match key_bytes(snap, values)? {
        Some(key) => Ok(snap.lookup(&[key])?),
        None => Ok(RecordBatch::new_empty(Arc::clone(&snap.schema().arrow))),
    }
}
