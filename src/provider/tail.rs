//! The unbounded changelog: every change of a table, then each new one as it is published.
//!
//! A [`ChangelogTail`] is a DataFusion [`PartitionStream`] (wrapped in an infinite
//! `StreamingTable`): it emits the changelog segments of the version current when the scan
//! starts, then waits for each newly published version and emits the segments appended since.
//! Segments are whole transactions, so a consumer never sees half of one, and each is emitted
//! exactly once per scan, in the order the capture appended them.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use tokio::sync::watch;

use crate::capture::version::Published;

/// Tails table `index` of a source; see the module docs.
#[derive(Debug)]
pub struct ChangelogTail {
    published: Published,
    /// Bumped by the capture after every publication.
    versions: watch::Receiver<u64>,
    index: usize,
    schema: SchemaRef,
}

impl ChangelogTail {
    pub fn new(
        published: Published,
        versions: watch::Receiver<u64>,
        index: usize,
        schema: SchemaRef,
    ) -> Self {
        Self {
            published,
            versions,
            index,
            schema,
        }
    }
}

impl PartitionStream for ChangelogTail {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let published = Arc::clone(&self.published);
        let versions = self.versions.clone();
        let index = self.index;
        let stream = futures::stream::unfold(
            (versions, 0usize, Vec::new()),
            move |(mut versions, mut sent, mut queue)| {
                let published = Arc::clone(&published);
                async move {
                    loop {
                        if let Some(batch) = queue.pop() {
                            return Some((Ok(batch), (versions, sent, queue)));
                        }
                        versions.borrow_and_update();
                        let version = published.load_full();
                        if let Some(log) = version.changelogs.get(index) {
                            let new: Vec<_> =
                                log.segments().skip(sent).map(|s| s.batch.clone()).collect();
                            sent += new.len();
                            // Popped from the back: keep the oldest last.
                            queue = new.into_iter().rev().collect();
                        }
                        if queue.is_empty() && versions.changed().await.is_err() {
                            // The source was dropped: the stream ends.
                            return None;
                        }
                    }
                }
            },
        );
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        ))
    }
}
