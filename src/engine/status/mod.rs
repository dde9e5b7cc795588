//! The `cdc` status schema: `cdc.sources`, `cdc.tables`, `cdc.indexes` (each table's primary
//! key and secondary indexes), `cdc.chunks`, `cdc.schema_history`
//! (every schema change the capture followed, as of the version the query reads), `cdc.sinks`
//! and `cdc.reconciliations`, one file each, declared through [`columns`].
//!
//! Each table is built from the engine's status when a query scans it, so it shows the present:
//! phase, positions, progress and errors. `cdc.sources.position` is the position of the version
//! the same query reads of the source's tables (`Engine::sql` pins one per query), so joining it
//! into a query tells the position that query read. Status says plainly when a current table is
//! still a mix of chunk boundaries (`consistent = false`, phase `Snapshot`/`CatchUp`) and from
//! which position on it is consistent.

mod chunks;
mod columns;
mod indexes;
mod reconciliations;
mod schema_history;
mod sinks;
mod sources;
mod tables;

use std::sync::{Arc, Weak};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, Session};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use self::columns::{Scan, StatusTableDef};
use super::sinks::SinksRef;
use super::source::SourcesRef;
use crate::provider::memory_scan;
use crate::provider::reconcile::ReconcileLog;

/// Name of the schema holding the status tables.
pub const STATUS_SCHEMA: &str = "cdc";

/// The tables of the schema, in the order `table_names` lists them.
static TABLES: [&dyn StatusTableDef; 7] = [
    &sources::TABLE,
    &tables::TABLE,
    &indexes::TABLE,
    &chunks::TABLE,
    &schema_history::TABLE,
    &sinks::TABLE,
    &reconciliations::TABLE,
];

/// See the module docs.
#[derive(Debug)]
pub(crate) struct CdcSchema {
    sources: SourcesRef,
    sinks: SinksRef,
    reconciliations: ReconcileLog,
}

impl CdcSchema {
    pub(crate) fn new(sources: SourcesRef, sinks: SinksRef, reconciliations: ReconcileLog) -> Self {
        Self {
            sources,
            sinks,
            reconciliations,
        }
    }
}

/// The rows of `SHOW SINKS`: `cdc.sinks` outside a query.
pub(super) fn show_sinks(sources: &SourcesRef, sinks: &SinksRef) -> Result<RecordBatch> {
    sinks::TABLE.batch(&Scan {
        sources,
        sinks,
        reconciliations: &ReconcileLog::default(),
        session: None,
    })
}

/// One status table; its rows are computed when a query scans it, from the versions that
/// query reads (so `cdc.sources.position` is the position of the query's other tables).
pub(super) struct StatusTable {
    table: &'static dyn StatusTableDef,
    sources: SourcesRef,
    sinks: SinksRef,
    reconciliations: ReconcileLog,
}

impl std::fmt::Debug for StatusTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StatusTable({}.{})", STATUS_SCHEMA, self.table.name())
    }
}

#[async_trait]
impl TableProvider for StatusTable {
    fn schema(&self) -> SchemaRef {
        self.table.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batch = self.table.batch(&Scan {
            sources: &self.sources,
            sinks: &self.sinks,
            reconciliations: &self.reconciliations,
            session: Some(state),
        })?;
        let schema = batch.schema();
        memory_scan(&[vec![batch]], schema, projection, limit)
    }
}

#[async_trait]
impl SchemaProvider for CdcSchema {
    fn table_names(&self) -> Vec<String> {
        TABLES.iter().map(|t| t.name().to_string()).collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(TABLES.iter().find(|t| t.name() == name).map(|table| {
            Arc::new(StatusTable {
                table: *table,
                sources: Weak::clone(&self.sources),
                sinks: Weak::clone(&self.sinks),
                reconciliations: Arc::clone(&self.reconciliations),
            }) as Arc<dyn TableProvider>
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        TABLES.iter().any(|t| t.name() == name)
    }
}
