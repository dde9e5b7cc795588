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
//! A transaction whose first rows are of the run's last batch's table map and operation
//! decodes them straight into that batch instead ([`RunBuilder::tail_for`]), so the commonest
//! run, one table's single-row changes, moves nothing at all; the transaction remembers how
//! many rows the batch held before its own.
//!
//! # Invariant
//! A run only ever takes whole transactions: rows are moved into it when their transaction
//! completes, and rows a transaction decoded straight into it are cut off again when the
//! transaction is dropped unfinished (a reconnect) or leaves the run (it turns out to carry
//! DDL, or the run ends before it does). Its batches, read in order, hold its rows in
//! position order.

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

    /// Whether the rows of a rows event of `decoder`'s table map, `op` and at most `bytes`
    /// bytes can be decoded straight after these.
    fn takes_event(&self, decoder: &Arc<TableDecoder>, op: Op, bytes: usize) -> bool {
        let room = |image: &Option<ImageColumns>| image.as_ref().is_none_or(|i| i.has_room(bytes));
        Arc::ptr_eq(&self.decoder, decoder)
            && self.op == op
            && self.index.len() < MAX_BATCH_ROWS
            && room(&self.before)
            && room(&self.after)
    }

    /// Keeps the first `rows` rows.
    pub(super) fn truncate(&mut self, rows: usize) {
        for image in [&mut self.before, &mut self.after].into_iter().flatten() {
            image.truncate(rows);
        }
        self.index.truncate(rows);
    }

    /// A batch of the rows from `at` on, which this one no longer holds.
    fn split_off(&mut self, at: usize) -> OpenBatch {
        OpenBatch {
            table_id: self.table_id,
            decoder: Arc::clone(&self.decoder),
            op: self.op,
            before: self.before.as_mut().map(|i| i.split_off(at)),
            after: self.after.as_mut().map(|i| i.split_off(at)),
            index: self.index.split_off(at.min(self.index.len())),
        }
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
    /// Transactions the run may take.
    max: usize,
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
            max,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.txs.len()
    }

    /// The last batch, when the rows of a rows event of `decoder`'s table map, `op` and at
    /// most `bytes` bytes can be decoded straight into it.
    pub(super) fn tail_for(
        &mut self,
        decoder: &Arc<TableDecoder>,
        op: Op,
        bytes: usize,
    ) -> Option<&mut OpenBatch> {
        let (tail, _) = self.batches.last_mut()?;
        tail.takes_event(decoder, op, bytes).then_some(tail)
    }

    /// Drops the rows of the last batch from `rows` on: those a transaction that did not
    /// complete decoded into it.
    pub(super) fn truncate_tail(&mut self, rows: usize) {
        if let Some((tail, _)) = self.batches.last_mut() {
            tail.truncate(rows);
        }
    }

    /// Moves the rows of the last batch from `at` on out of the run, as a batch of their own
    /// put first in `batches`: those of a transaction that is not to be part of it after all.
    pub(super) fn take_back(&mut self, at: usize, batches: &mut Vec<OpenBatch>) {
        if let Some((tail, _)) = self.batches.last_mut() {
            batches.insert(0, tail.split_off(at));
        }
    }

    /// Takes a completed transaction without DDL: `tx` (its `changes` empty) and its rows, which
    /// are the last batch's rows from `direct` on when it decoded them straight into it, then
    /// `batches`.
    pub(super) fn push(
        &mut self,
        tx: SourceTransaction,
        direct: Option<usize>,
        batches: Vec<OpenBatch>,
        pool: &mut ImagePool,
    ) {
        let t = self.txs.len() as u32;
        if let (Some(from), Some((tail, txs))) = (direct, self.batches.last_mut()) {
            txs.extend(std::iter::repeat_n(
                t,
                tail.index.len().saturating_sub(from),
            ));
        }
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
                _ => {
                    // The run's later transactions decode straight into its last batch: room
                    // for as many as it may still take, like this one, so its columns do not
                    // grow a row at a time from empty (a run of one-row transactions
                    // otherwise regrew every column of every run).
                    let later = self.max.saturating_sub(self.txs.len() + 1);
                    let room = later.saturating_mul(rows).min(RUN_RESERVE);
                    for image in [batch.before.as_mut(), batch.after.as_mut()]
                        .into_iter()
                        .flatten()
                    {
                        // Text bytes are left to each event's own reservation: the rows to
                        // come are not known here, and a large first value would reserve
                        // room for a thousand like it.
                        image.reserve(room, 0);
                    }
                    batch.index.reserve(room);
                    let mut txs = Vec::with_capacity(rows + room);
                    txs.resize(rows, t);
                    self.batches.push((batch, txs));
                }
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
