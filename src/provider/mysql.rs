//! Reads straight from a source's server, bypassing captured state: the tables behind
//! `mysql_snapshot('src', 'db.table')` and `mysql_binlog('src', 'db.table' [, 'start'])`.
//!
//! # Invariants
//! * `mysql_snapshot` returns the table's state at exactly one binlog position: its chunks run
//!   as the partitions of a [`SnapshotExec`] (each normalised to its own HIGH), then the same
//!   hand-off a capture does replays the binlog from `min(HIGH)` to `max(HIGH)`, so every chunk
//!   ends at `max(HIGH)`. That position is shown by `EXPLAIN ANALYZE` and is what
//!   reconciliation compares a target at.
//! * Chunk planning happens when the query is planned (boundary queries on the server), so
//!   `EXPLAIN` lists the real chunk ranges; nothing is read until the plan runs.
//! * Each read registers its binlog connections under fresh random replica server ids, so it
//!   never collides with a running capture's ids.

use std::fmt;
use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;

use super::plans::{BinlogStreamExec, SnapshotExec};
use crate::capture::{Capture, CaptureOptions, SnapshotMode};
use crate::change::position::{BinlogCoord, StartPosition};
use crate::change::schema::TableSchema;
use crate::locks::Locked;
use crate::provider::crossing::through_datafusion;
use crate::source::connect::ConnectOptions;
use crate::source::error::SourceError;
use crate::source::snapshot::incremental::{plan_snapshot, Progress, SnapshotOptions};
use crate::state::changelog::changelog_schema;

fn external(e: SourceError) -> DataFusionError {
    through_datafusion(e)
}

/// A replica server id unlikely to be used by anything else on the server.
fn one_off_server_id() -> u32 {
    rand::random_range(0x4000_0000..0x7fff_ffff)
}

/// Loads `table`'s schema from the server and checks it is still the one the source captured
/// (the provider's schema was fixed when the query was planned).
pub(super) async fn current_schema(
    connect: &ConnectOptions,
    table: &TableSchema,
) -> Result<(crate::source::connect::ServerInfo, Arc<TableSchema>)> {
    let mut conn = connect.connect().await.map_err(external)?;
    let info = connect.checked(&mut conn).await.map_err(external)?;
    let live = connect
        .table_schema(&mut conn, &table.id)
        .await
        .map_err(external)?;
    if live.columns != table.columns {
        return Err(DataFusionError::Plan(format!(
            "the schema of {} on the server differs from the one the source captured; \
             re-create the source to pick it up",
            table.id
        )));
    }
    Ok((info, Arc::new(live)))
}

/// `mysql_snapshot('src', 'db.table')`; see the module docs.
#[derive(Debug)]
pub struct MysqlSnapshotTable {
    connect: ConnectOptions,
    table: Arc<TableSchema>,
    options: SnapshotOptions,
}

impl MysqlSnapshotTable {
    /// `options` are the source's snapshot options (chunk size, parallelism, chunk keys,
    /// method).
    pub fn new(
        connect: ConnectOptions,
        table: Arc<TableSchema>,
        options: &SnapshotOptions,
    ) -> Self {
        let mut options = options.clone();
        // A one-off read: no test hook, and nothing of the source's own snapshot progress.
        options.hook = None;
        options.journal = None;
        options.resume = None;
        Self {
            connect,
            table,
            options,
        }
    }
}

#[async_trait]
impl TableProvider for MysqlSnapshotTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.table.arrow)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (info, schema) = current_schema(&self.connect, &self.table).await?;
        let mut options = self.options.clone();
        options.window_server_id = one_off_server_id();
        let progress = Arc::new(Progress::default());
        let run = plan_snapshot(
            &self.connect,
            &info,
            std::slice::from_ref(&schema),
            &options,
            Arc::clone(&progress),
        )
        .await
        .map_err(external)?;
        Ok(Arc::new(ConsistentReadExec::new(
            self.connect.clone(),
            Arc::new(SnapshotExec::of_table(run, 0)),
            progress,
            projection.cloned(),
        )?))
    }
}

/// Aligns a [`SnapshotExec`]'s chunks to `max(HIGH)` by a capture's hand-off and yields the
/// table at that one position, in one partition.
#[derive(Debug)]
pub struct ConsistentReadExec {
    connect: ConnectOptions,
    /// The chunks this node reads (through the snapshot run they share).
    snapshot: Arc<SnapshotExec>,
    /// `snapshot` as a child plan, for `EXPLAIN` (the optimizer may wrap it).
    chunks: Arc<dyn ExecutionPlan>,
    progress: Arc<Progress>,
    projection: Option<Vec<usize>>,
    /// The position the rows are the state at, once read.
    position: Arc<Mutex<Option<BinlogCoord>>>,
    properties: Arc<PlanProperties>,
}

impl ConsistentReadExec {
    fn new(
        connect: ConnectOptions,
        snapshot: Arc<SnapshotExec>,
        progress: Arc<Progress>,
        projection: Option<Vec<usize>>,
    ) -> Result<Self> {
        let full = snapshot.schema();
        let schema = match &projection {
            Some(p) => Arc::new(full.project(p)?),
            None => full,
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Ok(Self {
            connect,
            chunks: Arc::clone(&snapshot) as Arc<dyn ExecutionPlan>,
            snapshot,
            progress,
            projection,
            position: Arc::new(Mutex::new(None)),
            properties: Arc::new(properties),
        })
    }
}

impl DisplayAs for ConsistentReadExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let s = &self.snapshot;
        let table = &s.run().tables()[s.table()].schema.id;
        write!(
            f,
            "ConsistentReadExec: table={table}, aligns chunks to max(HIGH) by binlog catch-up"
        )?;
        if let Some(position) = self.position.locked().as_ref() {
            write!(f, ", position={position}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for ConsistentReadExec {
    fn name(&self) -> &str {
        "ConsistentReadExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.chunks]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match children.as_slice() {
            [child] => Ok(Arc::new(Self {
                connect: self.connect.clone(),
                snapshot: Arc::clone(&self.snapshot),
                chunks: Arc::clone(child),
                progress: Arc::clone(&self.progress),
                projection: self.projection.clone(),
                position: Arc::clone(&self.position),
                properties: Arc::clone(&self.properties),
            })),
            _ => Err(DataFusionError::Internal(
                "ConsistentReadExec has exactly one child".into(),
            )),
        }
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "ConsistentReadExec has one partition, asked for {partition}"
            )));
        }
        let snapshot = &self.snapshot;
        let run = Arc::clone(snapshot.run());
        let schema = Arc::clone(&run.tables()[snapshot.table()].schema);
        let info = run.server().clone();
        let connect = self.connect.clone();
        let progress = Arc::clone(&self.progress);
        let projection = self.projection.clone();
        let position = Arc::clone(&self.position);
        let read = async move {
            let mut options =
                CaptureOptions::new(schema.id.to_string(), SnapshotMode::SnapshotOnly);
            options.server_id = one_off_server_id();
            let (mut capture, _) =
                Capture::start_planned(connect, options, info, vec![schema], Some(run), progress)
                    .await
                    .map_err(external)?;
            capture.check_schemas_unchanged().map_err(external)?;
            let at = capture.progress().report().position;
            let table = capture.snapshot_table(0, at.clone()).map_err(external)?;
            *position.locked() = at;
            let batches = table.scan_all()?;
            let batches = batches
                .into_iter()
                .map(|b| match &projection {
                    Some(p) => b.project(p).map_err(DataFusionError::from),
                    None => Ok(b),
                })
                .collect::<Vec<_>>();
            Ok::<_, DataFusionError>(futures::stream::iter(batches))
        };
        let stream = futures::stream::once(read)
            .map(|r| match r {
                Ok(batches) => batches.boxed(),
                Err(e) => futures::stream::iter(vec![Err(e)]).boxed(),
            })
            .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            stream,
        )))
    }
}

/// `mysql_binlog('src', 'db.table' [, 'start'])`: the table's changes read straight from the
/// binlog from `start` (default: the end of the binlog when the query is planned).
#[derive(Debug)]
pub struct MysqlBinlogTable {
    connect: ConnectOptions,
    table: Arc<TableSchema>,
    start: StartPosition,
    schema: SchemaRef,
}

impl MysqlBinlogTable {
    pub fn new(connect: ConnectOptions, table: Arc<TableSchema>, start: StartPosition) -> Self {
        let schema = changelog_schema(&table.arrow);
        Self {
            connect,
            table,
            start,
            schema,
        }
    }
}

#[async_trait]
impl TableProvider for MysqlBinlogTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (info, _) = current_schema(&self.connect, &self.table).await?;
        let start = match &self.start {
            StartPosition::Current => {
                let mut conn = self.connect.connect().await.map_err(external)?;
                let (at, _) = self
                    .connect
                    .position(&mut conn, info.flavor)
                    .await
                    .map_err(external)?;
                StartPosition::Coord(at)
            }
            other => other.clone(),
        };
        Ok(Arc::new(BinlogStreamExec::from_start(
            self.connect.clone(),
            Arc::clone(&self.table),
            start,
            one_off_server_id(),
            projection.cloned(),
        )?))
    }
}
