//! One execution plan for every plan that reads no other plan: [`LeafExec`] over a small
//! [`LeafScan`] (what DataFusion's `DataSourceExec` is over its `DataSource`), so each scan
//! says only what it reads and how it shows, and the `ExecutionPlan` answers every leaf has
//! alike (no children, no expressions, a partition that exists) are written once.
//!
//! # Invariant
//! A scan is executed only for a partition its properties declare: `LeafExec` refuses any
//! other with an error naming the plan, before the scan runs.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Statistics;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

/// What a leaf plan reads; see the module docs.
pub trait LeafScan: DisplayAs + fmt::Debug + Send + Sync + 'static {
    /// The plan's name, as `EXPLAIN` and errors show it.
    fn name(&self) -> &'static str;

    fn properties(&self) -> &Arc<PlanProperties>;

    /// The rows of `partition`, which the properties declare.
    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream>;

    /// Statistics of `partition` (of all of them for `None`); unknown unless the scan knows.
    fn partition_statistics(&self, _partition: Option<usize>) -> Result<Arc<Statistics>> {
        Ok(Arc::new(Statistics::new_unknown(
            self.properties().eq_properties.schema(),
        )))
    }
}

/// A plan without inputs over scan `S`; see the module docs. It reads as its scan (`Deref`).
#[derive(Debug)]
pub struct LeafExec<S>(S);

impl<S: LeafScan> LeafExec<S> {
    pub fn new(scan: S) -> Self {
        Self(scan)
    }
}

impl<S> Deref for LeafExec<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.0
    }
}

impl<S: LeafScan> DisplayAs for LeafExec<S> {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.fmt_as(t, f)
    }
}

impl<S: LeafScan> ExecutionPlan for LeafExec<S> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.0.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
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
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(format!(
                "{} has no children",
                self.0.name()
            )))
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let partitions = self.0.properties().partitioning.partition_count();
        if partition >= partitions {
            return Err(DataFusionError::Internal(format!(
                "{} has {partitions} partitions, asked for {partition}",
                self.0.name()
            )));
        }
        self.0.execute(partition, context)
    }

    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        self.0.partition_statistics(partition)
    }
}
