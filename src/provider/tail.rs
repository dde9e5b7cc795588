//! The unbounded changelog: every change of a table, then each new one as it is published.
//!
//! A [`ChangelogTail`] is a DataFusion [`PartitionStream`] (wrapped in an infinite
//! `StreamingTable`): it emits the changelog segments of the version current when the scan
//! starts, then waits for each newly published version and emits the entries appended since
//! (counted by entry, as segments merge; spilled ones are read back from the state store).
//! Segments are whole transactions, so a consumer never sees half of one, and each entry is
//! emitted exactly once per scan, in the order the capture appended them. Its columns are the
//! changelog's when the scan starts: a column a DDL adds later is not in the stream.
//!
//! A tail may start *after* a point instead of at the first entry: a changelog `_position`
//! (the entries strictly after it) or a binlog position (the transactions starting at or after
//! it). Entries are appended in position order, so the entries to skip are a prefix: a client
//! that keeps the last `_position` it processed and tails again after it gets exactly the
//! rest, with no entry missing or repeated, even if it stopped inside a transaction.
//!
//! The loop is a [`TailReader`], which a subscription (`provider::subscribe`) drives step by
//! step, since it must also know when it has caught up and at which position.
//!
//! A tail does not hold retention back: one that starts after entries retention removed, or
//! falls so far behind that it removes entries the tail has not sent, fails with an error
//! rather than skip them.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::watch;

use super::as_of::{AsOf, AsOfError, Cut};
use crate::capture::version::Published;
use crate::change::position::BinlogCoord;
use crate::provider::crossing::through_datafusion;
use crate::sqlstate::SqlState;
use crate::state::changelog::{read_segments, Changelog, ChangelogRows};

/// The entries of `log` from entry `from` on, in order and in `schema` (the tail's, fixed when
/// it started: columns a DDL adds later are not in it); segments merged since entries were
/// sent are sliced past them.
pub fn entries_from(
    log: &Changelog,
    from: usize,
    schema: SchemaRef,
) -> BoxStream<'static, Result<RecordBatch>> {
    let (segments, mut skip) = log.segments_from(from);
    read_segments(segments, schema)
        .map_err(through_datafusion)
        .try_filter_map(move |batch| {
            let n = batch.num_rows();
            let out = match skip {
                0 => Some(batch),
                s if s >= n => None,
                s => Some(batch.slice(s, n - s)),
            };
            skip = skip.saturating_sub(n);
            futures::future::ready(Ok(out))
        })
        .boxed()
}

/// Tails table `index` of a source; see the module docs.
#[derive(Debug)]
pub struct ChangelogTail {
    published: Published,
    /// Bumped by the capture after every publication.
    versions: watch::Receiver<u64>,
    index: usize,
    schema: SchemaRef,
    /// Entries whose `_position` sorts at or before this text are skipped.
    skip_through: Option<String>,
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
            skip_through: None,
        }
    }

    /// The tail starts after `point` (see the module docs).
    pub fn after(mut self, point: &AsOf) -> Result<Self> {
        self.skip_through = Some(skip_text(point)?);
        Ok(self)
    }
}

/// The text a tail starting after `point` skips through: entries whose `_position` sorts at
/// or before it are not sent.
pub fn skip_text(point: &AsOf) -> Result<String> {
    Ok(match point {
        AsOf::Entry(entry) => entry.to_string(),
        // The entries AS OF the position holds: every transaction before it and the
        // snapshot entries read at it (no entry's text equals a cut's).
        AsOf::Binlog(coord) => Cut::at(coord.clone()).text(),
        AsOf::Time(_) => {
            return Err(DataFusionError::Plan(
                "changelog_tail starts after a position, not a time".into(),
            ))
        }
    })
}

/// How many leading entries of `log` sort at or before `through` (they are a prefix), as an
/// offset; an error when retention removed entries after `through`.
pub async fn entries_through(log: &Changelog, through: &str) -> Result<usize> {
    if let Some(last) = log
        .trimmed()
        .last_position
        .as_deref()
        .filter(|last| *last > through)
    {
        return Err(through_datafusion(AsOfError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!(
                "changelog_tail after {through:?}: retention (retain_history) removed the \
                 entries after it up to {last}, so the tail cannot continue without a gap; \
                 start again from the current table"
            ),
        )));
    }
    let mut skip = log.trimmed().rows;
    for segment in log.segments() {
        if segment.max_position.as_str() <= through {
            skip += segment.rows;
            continue;
        }
        if segment.min_position.as_str() <= through {
            let batch = segment
                .batch(&log.schema)
                .await
                .map_err(through_datafusion)?;
            skip += ChangelogRows::new(&batch)?
                .positions()
                .iter()
                .take_while(|p| p.is_some_and(|p| p <= through))
                .count();
        }
        break;
    }
    Ok(skip)
}

/// A tail that has sent `sent` entries may go on with `log` only if retention has not removed
/// any it has not sent; the first version read sets where it starts (the retained history).
fn keeps_up(log: &Changelog, sent: &mut usize, started: &mut bool) -> Result<()> {
    let trimmed = log.trimmed().rows;
    if !*started {
        *started = true;
        *sent = (*sent).max(trimmed);
        return Ok(());
    }
    if trimmed > *sent {
        return Err(through_datafusion(AsOfError::new(
            SqlState::SNAPSHOT_TOO_OLD,
            format!(
                "changelog_tail fell behind retention (retain_history): {} entries it had not \
                 sent yet were removed; tail again after the last _position received",
                trimmed - *sent
            ),
        )));
    }
    Ok(())
}

/// Reads a table's changelog as it grows, one step at a time: the tail's loop, which a
/// subscription also drives (it needs to know when the tail has caught up, and where).
pub struct TailReader {
    published: Published,
    versions: watch::Receiver<u64>,
    index: usize,
    schema: SchemaRef,
    /// Entries sent (or skipped) so far, as an absolute offset.
    sent: usize,
    /// Entries of the version read last still to send.
    pending: Option<BoxStream<'static, Result<RecordBatch>>>,
    /// The point to start after, until the first version is read.
    skip_through: Option<String>,
    started: bool,
}

impl std::fmt::Debug for TailReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TailReader")
            .field("index", &self.index)
            .field("sent", &self.sent)
            .field("skip_through", &self.skip_through)
            .finish_non_exhaustive()
    }
}

/// What one step of a [`TailReader`] found.
#[derive(Debug)]
pub enum TailStep {
    /// Entries, in append order (whole transactions, unless the start cut one).
    Entries(RecordBatch),
    /// Every entry of the version at this position has been sent.
    CaughtUp(Option<BinlogCoord>),
}

impl TailReader {
    /// A reader from the first entry.
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
            sent: 0,
            pending: None,
            skip_through: None,
            started: false,
        }
    }

    /// A reader after `text` (a `_position` or a cut's text): entries sorting at or before it
    /// are skipped.
    pub fn skipping_through(mut self, text: String) -> Self {
        self.skip_through = Some(text);
        self
    }

    /// A reader from entry `offset` (absolute) of a version already read.
    pub fn from_offset(mut self, offset: usize) -> Self {
        self.sent = offset;
        self.skip_through = None;
        self.started = true;
        self
    }

    /// The next entries of the latest version, or that there are none; does not wait.
    pub async fn step(&mut self) -> Result<TailStep> {
        loop {
            if let Some(through) = self.skip_through.clone() {
                let version = self.published.load_full();
                if let Some(log) = version.changelogs.get(self.index) {
                    self.sent = entries_through(log, &through).await?;
                    self.skip_through = None;
                    self.started = true;
                }
            }
            if let Some(batches) = self.pending.as_mut() {
                match batches.next().await {
                    Some(Ok(batch)) => {
                        self.sent += batch.num_rows();
                        return Ok(TailStep::Entries(batch));
                    }
                    Some(Err(e)) => {
                        self.pending = None;
                        return Err(e);
                    }
                    None => self.pending = None,
                }
            }
            self.versions.borrow_and_update();
            let version = self.published.load_full();
            if let Some(log) = version.changelogs.get(self.index) {
                keeps_up(log, &mut self.sent, &mut self.started)?;
                if log.num_rows() > self.sent {
                    self.pending = Some(entries_from(log, self.sent, Arc::clone(&self.schema)));
                    continue;
                }
            }
            return Ok(TailStep::CaughtUp(version.position.clone()));
        }
    }

    /// Waits for the next published version; false once the source is gone.
    pub async fn changed(&mut self) -> bool {
        self.versions.changed().await.is_ok()
    }
}

impl PartitionStream for ChangelogTail {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut reader = TailReader::new(
            Arc::clone(&self.published),
            self.versions.clone(),
            self.index,
            Arc::clone(&self.schema),
        );
        if let Some(through) = &self.skip_through {
            reader = reader.skipping_through(through.clone());
        }
        let stream = futures::stream::unfold(Some(reader), |reader| async move {
            let mut reader = reader?;
            loop {
                match reader.step().await {
                    Ok(TailStep::Entries(batch)) => return Some((Ok(batch), Some(reader))),
                    Ok(TailStep::CaughtUp(_)) => {}
                    Err(e) => return Some((Err(e), None)),
                }
                if !reader.changed().await {
                    // The source was dropped: the stream ends.
                    return None;
                }
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        ))
    }
}
