//! The binlog changes of one table as an unbounded DataFusion `ExecutionPlan`.
//!
//! # Invariant
//! The single partition yields, in binlog order and with nothing skipped, every row change of
//! the table committed from the start position on, one batch per source transaction, in the
//! changelog's columns (`_op`, `_position`, ..., the row, `_before`). The rows come straight
//! from the server, not from captured state: this is the independent read reconciliation and
//! ad hoc debugging compare against. It never ends; `LIMIT` or cancelling the query stops it.
//!
//! The start position is resolved when the plan is built (the current end of the binlog unless
//! one is given), so `EXPLAIN` shows the exact position the stream begins at.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, Partitioning, PlanProperties};
use futures::StreamExt;

use super::leaf::{LeafExec, LeafScan};
use crate::change::keys::RowCodec;
use crate::change::position::StartPosition;
use crate::change::schema::{TableId, TableSchema};
use crate::provider::crossing::through_datafusion;
use crate::source::binlog::{BinlogReader, BinlogReaderOptions, TableFilter};
use crate::source::connect::ConnectOptions;
use crate::source::error::SourceError;
use crate::state::changelog::{changelog_batch, changelog_schema};
use crate::state::merge::{ChangelogEvent, TableState};

/// One table's binlog changes as a plan; see the module docs.
pub type BinlogStreamExec = LeafExec<BinlogStream>;

/// What a [`BinlogStreamExec`] reads: one table's changes from a start position.
#[derive(Debug)]
pub struct BinlogStream {
    connect: ConnectOptions,
    table: Arc<TableSchema>,
    start: StartPosition,
    server_id: u32,
    /// Columns of the changelog schema to output.
    projection: Option<Vec<usize>>,
    properties: Arc<PlanProperties>,
}

impl BinlogStreamExec {
    /// A stream of `table`'s changes from `start` (not [`StartPosition::Current`]: resolve it
    /// first so the plan names a real position), read as replica `server_id`.
    pub fn from_start(
        connect: ConnectOptions,
        table: Arc<TableSchema>,
        start: StartPosition,
        server_id: u32,
        projection: Option<Vec<usize>>,
    ) -> Result<Self> {
        let full = changelog_schema(&table.arrow);
        let schema = match &projection {
            Some(p) => Arc::new(full.project(p)?),
            None => full,
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Unbounded {
                requires_infinite_memory: false,
            },
        );
        Ok(LeafExec::new(BinlogStream {
            connect,
            table,
            start,
            server_id,
            projection,
            properties: Arc::new(properties),
        }))
    }
}

impl DisplayAs for BinlogStream {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let start = match &self.start {
            StartPosition::Current => "current end of the binlog".to_string(),
            StartPosition::Coord(c) => c.to_string(),
            StartPosition::Gtid(g) => format!("after GTID set {g}"),
        };
        write!(
            f,
            "BinlogStreamExec: table={}, from={start}, server_id={}, unbounded",
            self.table.id, self.server_id
        )
    }
}

/// State of the stream between batches.
struct Tail {
    reader: BinlogReader,
    codec: RowCodec,
    full: SchemaRef,
    projection: Option<Vec<usize>>,
    table: Arc<TableSchema>,
    tx_seq: u64,
}

impl Tail {
    /// The next transaction that changed the table, as one batch.
    async fn next_batch(&mut self) -> Result<RecordBatch> {
        let external = |e: SourceError| through_datafusion(e);
        loop {
            let tx = self.reader.next().await.map_err(external)?;
            let mut events: Vec<ChangelogEvent> = Vec::new();
            for batch in tx.changes.iter().filter(|b| b.table.id == self.table.id) {
                if batch.table.columns != self.table.columns {
                    return Err(external(SourceError::SchemaMismatch {
                        table: self.table.id.to_string(),
                        at: tx.start.clone(),
                        detail: "the table's schema changed while the stream was read; \
                                 start a new query to read the new schema"
                            .into(),
                    }));
                }
                TableState::binlog_events(&self.codec, &tx, batch, &mut events)?;
            }
            if events.is_empty() {
                continue;
            }
            self.tx_seq += 1;
            let refs: Vec<&ChangelogEvent> = events.iter().collect();
            let seq = vec![self.tx_seq; refs.len()];
            let batch = changelog_batch(&self.codec, &self.full, &refs, &seq)?;
            return Ok(match &self.projection {
                Some(p) => batch.project(p)?,
                None => batch,
            });
        }
    }
}

impl LeafScan for BinlogStream {
    fn name(&self) -> &'static str {
        "BinlogStreamExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let connect = self.connect.clone();
        let table = Arc::clone(&self.table);
        let id = table.id.clone();
        let filter: TableFilter = Arc::new(move |t: &TableId| *t == id);
        let options =
            BinlogReaderOptions::new(self.server_id, self.start.clone()).with_filter(filter);
        let projection = self.projection.clone();
        let open = async move {
            let reader = BinlogReader::open(connect, options)
                .await
                .map_err(through_datafusion)?;
            Ok::<_, DataFusionError>(Tail {
                reader,
                codec: RowCodec::new(Arc::clone(&table))?,
                full: changelog_schema(&table.arrow),
                projection,
                table,
                tx_seq: 0,
            })
        };
        // Open once, then one batch per transaction that touched the table; an error ends it.
        let batches = futures::stream::once(open)
            .map(|tail| {
                futures::stream::unfold(Some(tail), |tail| async move {
                    let mut tail = match tail? {
                        Ok(t) => t,
                        Err(e) => return Some((Err(e), None)),
                    };
                    match tail.next_batch().await {
                        Ok(batch) => Some((Ok(batch), Some(Ok(tail)))),
                        Err(e) => Some((Err(e), None)),
                    }
                })
            })
            .flatten();
        let schema = self.properties.eq_properties.schema();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(schema),
            batches,
        )))
    }
}
