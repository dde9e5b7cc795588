//! Rows being decoded, kept as typed column buffers until their transaction (or a run of
//! transactions) is handed out, and only then finished into Arrow batches.
//!
//! # Runs
//! While the reader gathers the transactions already received ([`RunBuilder`]), each
//! completed transaction's rows are moved onto the end of the run's last batch when they are
//! of the same table map and operation, so a run of single-row transactions finishes one set
//! of arrays per table and operation, not one per transaction. The emptied buffers go back to
//! a small pool and the next transaction decodes into them, so a run's transactions allocate
//! almost nothing.
//!
//! # Invariant
//! A run only ever takes whole transactions: rows are moved into it when their transaction
//! completes, so dropping a partial transaction (a reconnect) never touches it. Its batches,
//! read in order, hold its rows in position order.

use std::sync::Arc;

use super::rows::{ImageColumns, ImageError, TableDecoder};
use crate::change::position::BinlogCoord;
use crate::change::{ChangeBatch, Op, RunBatch, SourceTransaction, TransactionRun};
use crate::source::error::{SourceError, SourceResult};

/// Rows per change batch before a batch is cut.
pub(super) const MAX_BATCH_ROWS: usize = 65_536;
/// Emptied images kept for reuse; a run of one table's updates needs two.
const POOL: usize = 16;

/// Rows of one table and operation being accumulated. The images' buffers grow per rows event
/// by the event's row count, so a one-row transaction allocates one row.
pub(super) struct OpenBatch {
    pub(super) table_id: u64,
    pub(super) decoder: Arc<TableDecoder>,
    pub(super) op: Op,
    pub(super) before: Option<ImageColumns>,
    pub(super) after: Option<ImageColumns>,
    /// `(event index in the transaction, row index in the event)` of each row.
    pub(super) index: Vec<(u32, u32)>,
}

impl OpenBatch {
    /// The batch of the rows decoded so far; `start_of(row)` is where the transaction of a
    /// row starts (of the first row when no row is at fault), for errors.
    pub(super) fn finish(
        self,
        start_of: &dyn Fn(usize) -> BinlogCoord,
    ) -> SourceResult<ChangeBatch> {
        let decoder = &self.decoder;
        let index = &self.index;
        let finish = |image: ImageColumns| {
            decoder.finish(image).map_err(|e: ImageError| {
                // Name the row by its event in the transaction, as positions do.
                let (detail, at) = match e.row.and_then(|r| Some((r, index.get(r)?))) {
                    Some((r, (event, row))) => (
                        format!(
                            "column {}, row {row} of event {event} of the transaction: {}",
                            e.column, e.detail
                        ),
                        start_of(r),
                    ),
                    None => (e.to_string(), start_of(0)),
                };
                decode_err(
                    &format!("rows of {} in the transaction", decoder.schema.id),
                    &at,
                    &detail,
                )
            })
        };
        let before = self.before.map(finish).transpose()?;
        let after = self.after.map(finish).transpose()?;
        Ok(ChangeBatch {
            table: Arc::clone(&self.decoder.schema),
            op: self.op,
            before,
            after,
            index: self.index,
        })
    }

    /// Whether `other`'s rows can go after these in one batch.
    fn can_take(&self, other: &OpenBatch) -> bool {
        let image = |a: &Option<ImageColumns>, b: &Option<ImageColumns>| match (a, b) {
            (Some(a), Some(b)) => a.can_take(b),
            (None, None) => true,
            _ => false,
        };
        self.table_id == other.table_id
            && self.op == other.op
            && Arc::ptr_eq(&self.decoder, &other.decoder)
            && self.index.len() + other.index.len() <= MAX_BATCH_ROWS
            && image(&self.before, &other.before)
            && image(&self.after, &other.after)
    }
}

/// Emptied images of recent batches, for the next batch of the same table map to decode into.
#[derive(Default)]
pub(super) struct ImagePool {
    spare: Vec<(Arc<TableDecoder>, ImageColumns)>,
}

impl ImagePool {
    /// An empty image of `decoder`'s table: a reused one when there is one.
    pub(super) fn image(&mut self, decoder: &Arc<TableDecoder>) -> ImageColumns {
        match self
            .spare
            .iter()
            .rposition(|(d, _)| Arc::ptr_eq(d, decoder))
        {
            Some(at) => self.spare.swap_remove(at).1,
            None => decoder.image(),
        }
    }

    fn put(&mut self, decoder: &Arc<TableDecoder>, image: ImageColumns) {
        if self.spare.len() < POOL {
            self.spare.push((Arc::clone(decoder), image));
        }
    }

    /// Forgets the spare images (their table maps are no longer current).
    pub(super) fn clear(&mut self) {
        self.spare.clear();
    }
}

/// A [`TransactionRun`] being gathered; see the module docs.
#[derive(Default)]
pub(super) struct RunBuilder {
    txs: Vec<SourceTransaction>,
    batches: Vec<(OpenBatch, Vec<u32>)>,
}

/// Transactions a run reserves room for at most: a larger run grows as it fills.
const RUN_RESERVE: usize = 1024;

impl RunBuilder {
    /// A run with room for `max` transactions (up to [`RUN_RESERVE`]), so that gathering one
    /// does not copy its transactions each time it doubles.
    pub(super) fn with_capacity(max: usize) -> Self {
        Self {
            txs: Vec::with_capacity(max.min(RUN_RESERVE)),
            batches: Vec::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.txs.len()
    }

    /// Takes a completed transaction without DDL: `tx` (its `changes` empty) and its rows.
    pub(super) fn push(
        &mut self,
        tx: SourceTransaction,
        batches: Vec<OpenBatch>,
        pool: &mut ImagePool,
    ) {
        let t = self.txs.len() as u32;
        for mut batch in batches {
            let rows = batch.index.len();
            match self.batches.last_mut() {
                Some((last, txs)) if last.can_take(&batch) => {
                    for (to, from) in [
                        (&mut last.before, batch.before.take()),
                        (&mut last.after, batch.after.take()),
                    ] {
                        if let (Some(to), Some(mut from)) = (to.as_mut(), from) {
                            to.append(&mut from);
                            pool.put(&batch.decoder, from);
                        }
                    }
                    last.index.append(&mut batch.index);
                    txs.extend(std::iter::repeat_n(t, rows));
                }
                _ => self.batches.push((batch, vec![t; rows])),
            }
        }
        self.txs.push(tx);
    }

    /// The run, its batches finished into Arrow arrays.
    pub(super) fn finish(self) -> SourceResult<TransactionRun> {
        let txs = self.txs;
        let changes = self
            .batches
            .into_iter()
            .map(|(open, tx)| {
                let start_of = |row: usize| {
                    let t = tx.get(row).or(tx.first()).map_or(0, |&t| t as usize);
                    txs.get(t)
                        .or(txs.first())
                        .map_or_else(|| BinlogCoord::new("", 0), |t| t.start.clone())
                };
                let batch = open.finish(&start_of)?;
                Ok(RunBatch { batch, tx })
            })
            .collect::<Result<Vec<_>, SourceError>>()?;
        Ok(TransactionRun { txs, changes })
    }
}

/// A row image or event that does not decode, at the transaction starting at `at`.
pub(super) fn decode_err(what: &str, at: &BinlogCoord, detail: &str) -> SourceError {
    SourceError::Decode {
        what: what.to_string(),
        at: at.clone(),
        detail: detail.to_string(),
    }
}
