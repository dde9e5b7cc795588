//! The per-key version merge of snapshot chunks and binlog changes.
//!
//! # The rule
//! Every snapshot row carries the version `HIGH` of its chunk; every binlog change carries its
//! own position. The state of a key is the record with the greatest version, and:
//! * a snapshot row reaches the state (and the changelog) iff its version is greater than the
//!   key's; for a key that already holds a row it is an update (`u`), never a second insert;
//! * a binlog change reaches the state and the changelog iff its position is greater than the
//!   key's version when it is processed; a change for a key without a version is an upsert;
//! * a delete leaves a tombstone carrying its version, so an older snapshot row cannot revive
//!   the key;
//! * an update that changes the primary key is a delete of the old key (sub-index 0) and an
//!   upsert of the new key (sub-index 1), each judged against its own key's version.
//!
//! # Why not Flink's per-chunk filter
//! Filtering binlog events by the HIGH of the chunk their *before* image falls in loses rows
//! whose chunk key moves between chunks (chunk A done, row moves B→A, chunk B scanned after:
//! neither snapshot has it and the event is filtered). Per-key versions do not depend on which
//! chunk a row was in; the model check beside the architecture notes found the per-chunk rule
//! wrong in about three quarters of random histories and this one in none.
//!
//! # Determinism
//! The state is independent of the order in which snapshot chunks and binlog changes are
//! applied. The changelog is made deterministic by applying every snapshot chunk of a table
//! (in HIGH order) before its binlog phase starts at `min(HIGH)`; replaying the changelog in
//! position order then gives exactly the current state (`tests/snapshot_scenarios.rs`). A chunk
//! read again after a DDL (`capture::reread`) is the one exception: it is applied during the
//! binlog phase, before the stream reaches its HIGH, so its entries still come after every
//! change applied before it and the replay still holds.

use std::sync::Arc;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::{cast_with_options, concat_batches, take, CastOptions};
use arrow::error::ArrowError;
use arrow::row::{OwnedRow, Rows};

use super::current::{CurrentTable, TableSnapshot};
use super::handoff::{ChunkEntries, Handoff};
use super::streamed::{self, EntryImage, StreamedBatch, StreamedEntry};
use crate::change::keys::RowCodec;
use crate::change::position::{BinlogCoord, ChangePosition, Gtid};
use crate::change::schema::TableSchema;
use crate::change::{ChangeBatch, Op, RunBatch, SourceTransaction};
use crate::source::evolve::ColumnOrigin;

/// One changelog entry of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogEvent {
    pub op: Op,
    /// The key this entry is about (primary key, or the whole row for keyless tables).
    pub key: OwnedRow,
    pub position: ChangePosition,
    pub gtid: Option<Gtid>,
    /// Commit time in microseconds; 0 for snapshot reads.
    pub commit_ts_micros: i64,
    /// The row before the change (updates) or the deleted row (deletes).
    pub before: Option<OwnedRow>,
    /// The row after the change (reads, inserts, updates).
    pub after: Option<OwnedRow>,
}

/// The current state of one table under the merge rule.
#[derive(Debug)]
pub struct TableState {
    codec: Arc<RowCodec>,
    /// Versioned chunks and changes until the hand-off is complete.
    handoff: Handoff,
    /// After the hand-off every change is newer than every version, so versions are dropped
    /// and the compact, snapshot-able representation takes over.
    current: Option<CurrentTable>,
}

/// The most rows [`TableState::apply_many`] encodes in one go; more are applied batch by batch.
const MAX_ENCODED_TOGETHER: usize = 16 * 1024;

/// The position of snapshot rows read at `high`: before every change of the transaction that
/// starts at `high` (binlog rows have event index ≥ 1).
pub fn snapshot_position(high: &BinlogCoord) -> ChangePosition {
    ChangePosition {
        tx: high.clone(),
        event_index: 0,
        row_index: 0,
        sub: 0,
    }
}

impl TableState {
    pub fn new(schema: Arc<TableSchema>) -> Result<Self, ArrowError> {
        Ok(Self {
            codec: Arc::new(RowCodec::new(schema)?),
            handoff: Handoff::default(),
            current: None,
        })
    }

    pub fn codec(&self) -> &Arc<RowCodec> {
        &self.codec
    }

    /// A table recovered after its hand-off (from a checkpoint): streaming, no versions.
    pub fn from_current(current: CurrentTable) -> Self {
        Self {
            codec: Arc::clone(current.codec()),
            handoff: Handoff::default(),
            current: Some(current),
        }
    }

    /// Ends the hand-off: the stream has passed every chunk's HIGH, so versions and tombstones
    /// are no longer needed and the state becomes a [`CurrentTable`].
    pub fn finish_handoff(&mut self) -> Result<(), ArrowError> {
        if self.current.is_none() {
            let handoff = std::mem::take(&mut self.handoff);
            self.current = Some(handoff.finish(Arc::clone(&self.codec))?);
        }
        Ok(())
    }

    /// Whether the hand-off is over (the state takes every change in binlog order).
    pub fn is_streaming(&self) -> bool {
        self.current.is_some()
    }

    /// An immutable version of the table at `position`, for queries.
    pub fn snapshot(&mut self, position: Option<BinlogCoord>) -> Result<TableSnapshot, ArrowError> {
        match &mut self.current {
            Some(current) => current.snapshot(position),
            None => {
                CurrentTable::new(Arc::clone(&self.codec), &self.to_batch()?)?.snapshot(position)
            }
        }
    }

    /// Makes room for `rows` more snapshot rows before chunks are applied (a no-op after the
    /// hand-off).
    pub fn reserve_snapshot(&mut self, rows: usize) {
        if self.current.is_none() {
            self.handoff.reserve(rows);
        }
    }

    /// Applies a chunk normalised to `high` (its rows are the table's state at `high` within
    /// the chunk's range); returns its changelog entries, all at `high`: `r` for a key that held
    /// no row, `u` (with the row it held) for one that held an older row.
    pub fn apply_snapshot(
        &mut self,
        high: &BinlogCoord,
        rows: RecordBatch,
    ) -> Result<ChunkEntries, ArrowError> {
        if self.current.is_some() {
            return Err(ArrowError::InvalidArgumentError(
                "a snapshot chunk arrived after the hand-off ended".into(),
            ));
        }
        self.handoff
            .add_chunk(&self.codec, snapshot_position(high), rows)
    }

    /// Applies change batches of several transactions, in the order given: the same state and
    /// entries as [`Self::apply_changes`] on each in turn. After the hand-off the images of all
    /// of them are encoded together, so a burst of small transactions pays the row encoding
    /// once instead of once per transaction.
    pub fn apply_many(
        &mut self,
        items: &[(&SourceTransaction, &ChangeBatch)],
        out: &mut Vec<ChangelogEvent>,
    ) -> Result<(), ArrowError> {
        let rows: usize = items.iter().map(|(_, b)| b.num_rows()).sum();
        let befores: Vec<&RecordBatch> = items
            .iter()
            .filter_map(|(_, b)| b.before.as_ref())
            .collect();
        let afters: Vec<&RecordBatch> =
            items.iter().filter_map(|(_, b)| b.after.as_ref()).collect();
        let same_schema = |batches: &[&RecordBatch]| {
            batches
                .windows(2)
                .all(|w| w[0].schema_ref() == w[1].schema_ref())
        };
        // One transaction gains nothing; many large ones would only copy their rows.
        if self.current.is_none()
            || items.len() < 2
            || rows > MAX_ENCODED_TOGETHER
            || !same_schema(&befores)
            || !same_schema(&afters)
        {
            for (tx, batch) in items {
                self.apply_changes(tx, batch, out)?;
            }
            return Ok(());
        }
        let encode = |batches: &[&RecordBatch]| -> Result<Option<(Rows, Rows)>, ArrowError> {
            match batches.first() {
                None => Ok(None),
                Some(first) => {
                    let all = concat_batches(first.schema_ref(), batches.iter().copied())?;
                    self.codec.encode(&all).map(Some)
                }
            }
        };
        let before = encode(&befores)?;
        let after = encode(&afters)?;
        let keyless = self.codec.keyless();
        let current = self.current.as_mut().expect("checked above");
        apply_streaming(
            current,
            keyless,
            items,
            before.as_ref(),
            after.as_ref(),
            out,
        )
    }

    /// Applies the batches of one table of a run of transactions `txs`, in order: the same
    /// state and entries as [`Self::apply_changes`] on each transaction's rows in turn. After
    /// the hand-off each batch, which may hold rows of many transactions, is encoded once.
    pub fn apply_run(
        &mut self,
        txs: &[SourceTransaction],
        batches: &[&RunBatch],
        out: &mut Vec<ChangelogEvent>,
    ) -> Result<(), ArrowError> {
        let tx_of = |t: u32| {
            txs.get(t as usize).ok_or_else(|| {
                ArrowError::InvalidArgumentError(format!(
                    "a row of transaction {t} in a run of {}",
                    txs.len()
                ))
            })
        };
        for run in batches {
            each_row_has_a_tx(run)?;
            if self.current.is_none() {
                // Rows compare versions one transaction at a time.
                for (t, first, len) in run.segments() {
                    let tx = tx_of(t as u32)?;
                    self.apply_changes(tx, &run.batch.slice(first, len), out)?;
                }
                continue;
            }
            let row_txs = run
                .tx
                .iter()
                .map(|&t| tx_of(t))
                .collect::<Result<Vec<_>, _>>()?;
            let batch = &run.batch;
            let (before, after) = self.encode_images(batch)?;
            let keyless = self.codec.keyless();
            let current = self.current.as_mut().expect("checked above");
            let images = (before.as_ref(), after.as_ref());
            apply_as_events(
                current,
                keyless,
                batch,
                images,
                (0, 0),
                &|i| row_txs[i],
                out,
            )?;
        }
        Ok(())
    }

    /// [`Self::apply_run`] after the hand-off, the entries kept as rows of the batches' own
    /// images (see [`streamed`]), one [`StreamedBatch`] per batch, in order.
    pub fn apply_run_streamed(
        &mut self,
        batches: &[&RunBatch],
    ) -> Result<Vec<StreamedBatch>, ArrowError> {
        let mut out = Vec::with_capacity(batches.len());
        for run in batches {
            each_row_has_a_tx(run)?;
            // A keyed table's before image is read for its keys alone (`streamed::apply`).
            let keyless = self.codec.keyless();
            let before = match &run.batch.before {
                Some(image) if !keyless => Some((self.codec.keys(image)?, None)),
                Some(image) => Some(self.codec.encode(image).map(|(k, r)| (k, Some(r)))?),
                None => None,
            };
            let after = run
                .batch
                .after
                .as_ref()
                .map(|image| self.codec.encode(image))
                .transpose()?;
            let current = self.current.as_mut().ok_or_else(|| {
                ArrowError::InvalidArgumentError(
                    "streamed entries of a table still in its hand-off".into(),
                )
            })?;
            let mut entries = Vec::with_capacity(run.batch.num_rows());
            streamed::apply(
                current,
                keyless,
                &run.batch,
                before.as_ref().map(|(k, r)| (k, r.as_ref())),
                after.as_ref(),
                (0, 0),
                &mut entries,
            )?;
            out.push(StreamedBatch {
                batch: run.batch.clone(),
                tx: run.tx.clone(),
                entries,
            });
        }
        Ok(out)
    }

    /// `batch`'s before and after images encoded as (key, row) rows.
    #[allow(clippy::type_complexity)]
    fn encode_images(
        &self,
        batch: &ChangeBatch,
    ) -> Result<(Option<(Rows, Rows)>, Option<(Rows, Rows)>), ArrowError> {
        let encode = |image: &Option<RecordBatch>| image.as_ref().map(|b| self.codec.encode(b));
        Ok((
            encode(&batch.before).transpose()?,
            encode(&batch.after).transpose()?,
        ))
    }

    /// Applies the rows of one change batch of `tx`.
    pub fn apply_changes(
        &mut self,
        tx: &SourceTransaction,
        batch: &ChangeBatch,
        out: &mut Vec<ChangelogEvent>,
    ) -> Result<(), ArrowError> {
        let (before, after) = self.encode_images(batch)?;
        let keyless = self.codec.keyless();
        if let Some(current) = self.current.as_mut() {
            let items = [(tx, batch)];
            return apply_streaming(
                current,
                keyless,
                &items,
                before.as_ref(),
                after.as_ref(),
                out,
            );
        }
        for (i, (event_index, row_index)) in batch.index.iter().enumerate() {
            let pos = |sub| ChangePosition {
                tx: tx.start.clone(),
                event_index: *event_index,
                row_index: *row_index,
                sub,
            };
            let old = owned_pair(before.as_ref(), i);
            let new = owned_pair(after.as_ref(), i);
            let meta = |op, key: &OwnedRow, position, before, after| ChangelogEvent {
                op,
                key: key.clone(),
                position,
                gtid: tx.gtid.clone(),
                commit_ts_micros: tx.commit_ts_micros,
                before,
                after,
            };
            match (old, new) {
                // Same key: an update in place.
                (Some((ok, orow)), Some((nk, nrow))) if ok == nk && !keyless => {
                    if self.newer(&nk, &pos(0)) {
                        out.push(meta(
                            Op::Update,
                            &nk,
                            pos(0),
                            Some(orow),
                            Some(nrow.clone()),
                        ));
                        self.put(nk, pos(0), Some(nrow), 1);
                    }
                }
                (old, new) => {
                    if let Some((ok, orow)) = old {
                        if self.newer(&ok, &pos(0)) {
                            let left = if keyless {
                                self.handoff
                                    .row(&self.codec, ok.row().data())?
                                    .map_or(0, |(_, n)| n.saturating_sub(1))
                            } else {
                                0
                            };
                            out.push(meta(Op::Delete, &ok, pos(0), Some(orow.clone()), None));
                            let row = (left > 0).then_some(orow);
                            self.put(ok, pos(0), row, left);
                        }
                    }
                    if let Some((nk, nrow)) = new {
                        let sub = if batch.op == Op::Update { 1 } else { 0 };
                        if self.newer(&nk, &pos(sub)) {
                            let held = self.handoff.row(&self.codec, nk.row().data())?;
                            let count = if keyless {
                                held.as_ref().map_or(0, |(_, n)| *n) + 1
                            } else {
                                1
                            };
                            let existing = held.map(|(row, _)| row);
                            let op = match (batch.op, &existing) {
                                (Op::Insert, None) | (Op::Update, None) => Op::Insert,
                                _ if keyless => Op::Insert,
                                _ => Op::Update,
                            };
                            let before = if keyless { None } else { existing };
                            out.push(meta(op, &nk, pos(sub), before, Some(nrow.clone())));
                            self.put(nk, pos(sub), Some(nrow), count);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The changelog entries of one change batch read straight from the binlog, without
    /// state: inserts `c`, deletes `d`, updates `u` — or, when the key changes (and always for
    /// keyless tables), a `d` of the old row and a `c` of the new one at sub-index 1, the same
    /// rule [`TableState::apply_changes`] follows, so both spell a change the same way.
    pub fn binlog_events(
        codec: &RowCodec,
        tx: &SourceTransaction,
        batch: &ChangeBatch,
        out: &mut Vec<ChangelogEvent>,
    ) -> Result<(), ArrowError> {
        let before = batch.before.as_ref().map(|b| codec.encode(b)).transpose()?;
        let after = batch.after.as_ref().map(|b| codec.encode(b)).transpose()?;
        let keyless = codec.keyless();
        for (i, (event_index, row_index)) in batch.index.iter().enumerate() {
            let position = |sub| ChangePosition {
                tx: tx.start.clone(),
                event_index: *event_index,
                row_index: *row_index,
                sub,
            };
            let event = |op, key: OwnedRow, position, before, after| ChangelogEvent {
                op,
                key,
                position,
                gtid: tx.gtid.clone(),
                commit_ts_micros: tx.commit_ts_micros,
                before,
                after,
            };
            let old = owned_pair(before.as_ref(), i);
            let new = owned_pair(after.as_ref(), i);
            match (old, new) {
                (Some((ok, orow)), Some((nk, nrow))) if ok == nk && !keyless => {
                    out.push(event(Op::Update, nk, position(0), Some(orow), Some(nrow)));
                }
                (old, new) => {
                    let split = old.is_some() && new.is_some();
                    if let Some((ok, orow)) = old {
                        out.push(event(Op::Delete, ok, position(0), Some(orow), None));
                    }
                    if let Some((nk, nrow)) = new {
                        let sub = u8::from(split);
                        out.push(event(Op::Insert, nk, position(sub), None, Some(nrow)));
                    }
                }
            }
        }
        Ok(())
    }

    fn newer(&self, key: &OwnedRow, pos: &ChangePosition) -> bool {
        self.handoff
            .version(key.row().data())
            .is_none_or(|version| pos > version)
    }

    fn put(&mut self, key: OwnedRow, version: ChangePosition, row: Option<OwnedRow>, count: u32) {
        self.handoff.put(key.row().data(), version, row, count);
    }

    /// Converts the table to `after`, the schema a followed DDL at `at` gave it (see
    /// `source::evolve`): each new column is an old one (cast exactly where its type widened)
    /// or a new one holding the value every existing row got. The rows are re-keyed under
    /// `after`'s primary key.
    ///
    /// During the hand-off the capture only follows a DDL once every chunk of the table read
    /// before it is applied and every chunk still to come was read after it (`capture`'s
    /// re-reads): the state is then the table at `at`, every version and tombstone in it is
    /// older than anything still to come, so the converted rows become one chunk at `at`.
    pub fn evolve(
        &mut self,
        after: Arc<TableSchema>,
        origins: &[ColumnOrigin],
        at: &BinlogCoord,
    ) -> Result<(), ArrowError> {
        let rows = self.to_batch()?;
        let n = rows.num_rows();
        let options = CastOptions {
            safe: false,
            ..CastOptions::default()
        };
        let columns = origins
            .iter()
            .zip(after.arrow.fields())
            .map(|(origin, field)| match origin {
                ColumnOrigin::Kept { from } => {
                    let old = rows.column(*from);
                    if old.data_type() == field.data_type() {
                        Ok(Arc::clone(old))
                    } else {
                        cast_with_options(old, field.data_type(), &options)
                    }
                }
                ColumnOrigin::Added { value } => {
                    take(value.as_ref(), &UInt32Array::from(vec![0u32; n]), None)
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rows = RecordBatch::try_new(Arc::clone(&after.arrow), columns)?;
        let codec = Arc::new(RowCodec::new(after)?);
        if self.current.is_some() {
            self.current = Some(CurrentTable::new(Arc::clone(&codec), &rows)?);
        } else {
            let mut handoff = Handoff::default();
            handoff.add_chunk(&codec, snapshot_position(at), rows)?;
            self.handoff = handoff;
        }
        self.codec = codec;
        Ok(())
    }

    /// Takes `after`, the table's schema with other secondary indexes and the same columns and
    /// key (an index created or dropped at the source): the rows are kept as they are, and the
    /// new indexes are built from them when first looked up.
    pub fn reindex(&mut self, after: Arc<TableSchema>) -> Result<(), ArrowError> {
        let codec = Arc::new(self.codec.with_indexes(after)?);
        if let Some(current) = &mut self.current {
            current.reindex(Arc::clone(&codec));
        }
        self.codec = codec;
        Ok(())
    }

    /// Removes every row (a `TRUNCATE`), returning a `d` entry for each, at positions
    /// `(tx, 1, i)`: replaying the changelog still gives the state.
    pub fn truncate(
        &mut self,
        tx: &SourceTransaction,
        out: &mut Vec<ChangelogEvent>,
    ) -> Result<(), ArrowError> {
        let rows = self.to_batch()?;
        let batch = ChangeBatch {
            table: Arc::clone(self.codec.schema()),
            op: Op::Delete,
            index: (0..rows.num_rows() as u32).map(|i| (1, i)).collect(),
            before: Some(rows),
            after: None,
        };
        self.apply_changes(tx, &batch, out)
    }

    /// Forgets tombstones; safe once the stream has passed every chunk's HIGH.
    pub fn drop_tombstones(&mut self) {
        self.handoff.drop_tombstones();
    }

    /// Live rows (counting copies of keyless rows).
    pub fn len(&self) -> usize {
        match &self.current {
            Some(current) => current.len(),
            None => self.handoff.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The current rows as a batch (in no particular order).
    pub fn to_batch(&self) -> Result<RecordBatch, ArrowError> {
        match &self.current {
            Some(current) => {
                let snapshot = TableSnapshot::of(current);
                concat_batches(&self.codec.schema().arrow, &snapshot.scan_all()?)
            }
            None => self.handoff.to_batch(&self.codec),
        }
    }
}

/// An error unless `run` names a transaction for each of its rows.
fn each_row_has_a_tx(run: &RunBatch) -> Result<(), ArrowError> {
    if run.tx.len() == run.batch.num_rows() {
        return Ok(());
    }
    Err(ArrowError::InvalidArgumentError(format!(
        "{} transactions for {} rows",
        run.tx.len(),
        run.batch.num_rows()
    )))
}

/// [`streamed::apply`] on `batch`, its entries spelt as events: `images` are its (before,
/// after) images encoded as (keys, rows), from `offsets` on, and `tx_of(i)` the transaction
/// of its row `i`.
#[allow(clippy::type_complexity)]
fn apply_as_events<'t>(
    current: &mut CurrentTable,
    keyless: bool,
    batch: &ChangeBatch,
    images: (Option<&(Rows, Rows)>, Option<&(Rows, Rows)>),
    offsets: (usize, usize),
    tx_of: &dyn Fn(usize) -> &'t SourceTransaction,
    out: &mut Vec<ChangelogEvent>,
) -> Result<(), ArrowError> {
    let (before, after) = images;
    let mut entries = Vec::with_capacity(batch.num_rows());
    let full_before = before.map(|(k, r)| (k, Some(r)));
    streamed::apply(
        current,
        keyless,
        batch,
        full_before,
        after,
        offsets,
        &mut entries,
    )?;
    push_events(&entries, tx_of, batch, before, after, offsets, out);
    Ok(())
}

/// Applies changes after the hand-off (see [`streamed`]): `before` and `after` hold the
/// encoded images of every batch of `items`, in order.
fn apply_streaming(
    current: &mut CurrentTable,
    keyless: bool,
    items: &[(&SourceTransaction, &ChangeBatch)],
    before: Option<&(Rows, Rows)>,
    after: Option<&(Rows, Rows)>,
    out: &mut Vec<ChangelogEvent>,
) -> Result<(), ArrowError> {
    let mut offsets = (0, 0);
    for (tx, batch) in items {
        apply_as_events(
            current,
            keyless,
            batch,
            (before, after),
            offsets,
            &|_| tx,
            out,
        )?;
        offsets.0 += batch.before.as_ref().map_or(0, RecordBatch::num_rows);
        offsets.1 += batch.after.as_ref().map_or(0, RecordBatch::num_rows);
    }
    Ok(())
}

/// The entries [`streamed::apply`] recorded for `batch`, as events; `tx_of(i)` is the
/// transaction of the batch's row `i`, and `before`, `after` and `offsets` are what
/// [`streamed::apply`] was given.
fn push_events<'t>(
    entries: &[StreamedEntry],
    tx_of: &dyn Fn(usize) -> &'t SourceTransaction,
    batch: &ChangeBatch,
    before: Option<&(Rows, Rows)>,
    after: Option<&(Rows, Rows)>,
    offsets: (usize, usize),
    out: &mut Vec<ChangelogEvent>,
) {
    let image = |encoded: Option<&(Rows, Rows)>, at: usize| {
        let (k, r) = encoded.expect("an entry's image was encoded");
        (k.row(at).owned(), r.row(at).owned())
    };
    for e in entries {
        let i = e.row as usize;
        let tx = tx_of(i);
        let (event_index, row_index) = batch.index[i];
        let (key, before, after) = match e.image {
            EntryImage::Update => {
                let (_, old) = image(before, offsets.0 + i);
                let (key, new) = image(after, offsets.1 + i);
                (key, Some(old), Some(new))
            }
            EntryImage::Before => {
                let (key, old) = image(before, offsets.0 + i);
                (key, Some(old), None)
            }
            EntryImage::After => {
                let (key, new) = image(after, offsets.1 + i);
                (key, None, Some(new))
            }
        };
        out.push(ChangelogEvent {
            op: e.op,
            key,
            position: ChangePosition {
                tx: tx.start.clone(),
                event_index,
                row_index,
                sub: e.sub,
            },
            gtid: tx.gtid.clone(),
            commit_ts_micros: tx.commit_ts_micros,
            before,
            after,
        });
    }
}

/// Row `i` of an encoded image as owned `(key, row)`, when the batch has that image.
fn owned_pair(encoded: Option<&(Rows, Rows)>, i: usize) -> Option<(OwnedRow, OwnedRow)> {
    encoded.map(|(k, r)| (k.row(i).owned(), r.row(i).owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::schema::{ColumnKind, ColumnSpec};
    use crate::change::TransactionRun;
    use crate::state::fixtures::{batch, codec, ids};
    use arrow::array::{AsArray, Int32Array};
    use arrow::datatypes::Int32Type;

    fn at(offset: u64) -> BinlogCoord {
        BinlogCoord::new("binlog.000001", offset)
    }

    /// `w INT NOT NULL DEFAULT 5` added last to the fixture's table.
    fn with_w(before: &TableSchema) -> (Arc<TableSchema>, Vec<ColumnOrigin>) {
        let mut columns = before.columns.clone();
        columns.push(ColumnSpec {
            name: "w".into(),
            kind: ColumnKind::Int {
                bits: 32,
                unsigned: false,
            },
            nullable: false,
        });
        let after = TableSchema::new(before.id.clone(), columns, before.primary_key.clone());
        let origins = vec![
            ColumnOrigin::Kept { from: 0 },
            ColumnOrigin::Kept { from: 1 },
            ColumnOrigin::Added {
                value: Arc::new(Int32Array::from(vec![5])),
            },
        ];
        (Arc::new(after), origins)
    }

    /// A DDL the hand-off follows converts the chunks applied before it; a chunk read after
    /// it (under the new schema, at a later HIGH) then wins for its keys, as an update of the
    /// converted row.
    #[test]
    fn a_ddl_during_the_hand_off_converts_the_chunks_before_it() {
        let old = codec(true);
        let mut state = TableState::new(Arc::clone(old.schema())).unwrap();
        state
            .apply_snapshot(&at(100), batch(&old, &[(1, "a"), (2, "b")]))
            .unwrap();
        let (after, origins) = with_w(old.schema());
        state
            .evolve(Arc::clone(&after), &origins, &at(200))
            .unwrap();
        assert!(!state.is_streaming(), "still handing off");
        let rows = |state: &TableState| {
            let b = state.to_batch().unwrap();
            let w: Vec<i32> = b.column(2).as_primitive::<Int32Type>().values().to_vec();
            let mut out: Vec<_> = ids(&[b.project(&[0, 1]).unwrap()])
                .into_iter()
                .zip(w)
                .collect();
            out.sort();
            out
        };
        assert_eq!(
            rows(&state),
            [((1, "a".to_string()), 5), ((2, "b".to_string()), 5)]
        );
        // Read again after the DDL: key 2 changed, key 3 is new.
        let reread = RecordBatch::try_new(
            Arc::clone(&after.arrow),
            vec![
                Arc::new(Int32Array::from(vec![2, 3])),
                Arc::new(arrow::array::StringArray::from(vec!["b2", "c"])),
                Arc::new(Int32Array::from(vec![7, 8])),
            ],
        )
        .unwrap();
        let entries = state.apply_snapshot(&at(300), reread).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries.before.len(),
            1,
            "key 2 is an update of its converted row"
        );
        let before = state.codec().decode([&entries.before[0].1]).unwrap();
        assert_eq!(before.column(2).as_primitive::<Int32Type>().value(0), 5);
        // An older chunk of the old table could not be applied any more; a change after the
        // DDL's position but before the re-read chunk's HIGH loses to it.
        assert!(!state.newer(
            &state
                .codec()
                .keys(&batch_w(&after, 2))
                .unwrap()
                .row(0)
                .owned(),
            &snapshot_position(&at(250))
        ));
        state.finish_handoff().unwrap();
        assert_eq!(
            rows(&state),
            [
                ((1, "a".to_string()), 5),
                ((2, "b2".to_string()), 7),
                ((3, "c".to_string()), 8)
            ]
        );
    }

    /// A random transaction of one to three batches over the rows `model` holds (keyed by
    /// `id`, or keyless with `v` telling copies apart); `model` follows it.
    fn random_transaction(
        codec: &RowCodec,
        model: &mut Vec<(i32, String)>,
        rng: &mut rand::rngs::StdRng,
        offset: u64,
        next_id: &mut i32,
    ) -> SourceTransaction {
        use rand::Rng;
        let keyed = !codec.keyless();
        let table = Arc::clone(codec.schema());
        let mut changes = Vec::new();
        for event in 0..rng.random_range(1..=3u32) {
            let pick = |rng: &mut rand::rngs::StdRng, model: &Vec<(i32, String)>| {
                (!model.is_empty()).then(|| rng.random_range(0..model.len()))
            };
            let value = format!("v{}", rng.random_range(0..4));
            let (op, before, after) = match (rng.random_range(0..5), pick(rng, model)) {
                (0, _) | (_, None) => {
                    // One or two new rows (keyless: possibly a copy of an existing one).
                    let n = rng.random_range(1..=2);
                    let rows: Vec<(i32, String)> = (0..n)
                        .map(|_| {
                            *next_id += 1;
                            let id = if keyed { *next_id } else { *next_id % 3 };
                            (id, value.clone())
                        })
                        .collect();
                    model.extend(rows.iter().cloned());
                    (Op::Insert, vec![], rows)
                }
                (1, Some(i)) => {
                    let old = model.remove(i);
                    (Op::Delete, vec![old], vec![])
                }
                (2, Some(i)) if keyed => {
                    // The key changes.
                    *next_id += 1;
                    let old = model[i].clone();
                    model[i] = (*next_id, old.1.clone());
                    (Op::Update, vec![old], vec![model[i].clone()])
                }
                (_, Some(i)) => {
                    let old = model[i].clone();
                    model[i].1 = value;
                    (Op::Update, vec![old], vec![model[i].clone()])
                }
            };
            let image = |rows: &[(i32, String)]| {
                let refs: Vec<(i32, &str)> = rows.iter().map(|(i, v)| (*i, v.as_str())).collect();
                (!rows.is_empty()).then(|| batch(codec, &refs))
            };
            let n = before.len().max(after.len()) as u32;
            changes.push(ChangeBatch {
                table: Arc::clone(&table),
                op,
                before: image(&before),
                after: image(&after),
                index: (0..n).map(|r| (event + 1, r)).collect(),
            });
        }
        SourceTransaction {
            start: at(offset),
            end: at(offset + 1),
            gtid: None,
            commit_ts_micros: offset as i64,
            changes,
            ddl: Vec::new(),
        }
    }

    /// A state past its hand-off whose snapshot read `rows`.
    fn handed_off(c: &RowCodec, rows: &[(i32, String)]) -> TableState {
        let mut state = TableState::new(Arc::clone(c.schema())).unwrap();
        let refs: Vec<(i32, &str)> = rows.iter().map(|(i, v)| (*i, v.as_str())).collect();
        state.apply_snapshot(&at(10), batch(c, &refs)).unwrap();
        state.finish_handoff().unwrap();
        state
    }

    /// `txs` as one run: each batch appended to the run's last one when of the same operation.
    fn as_run(txs: &[SourceTransaction]) -> TransactionRun {
        let mut run = TransactionRun::default();
        for (t, tx) in txs.iter().enumerate() {
            for b in &tx.changes {
                let tx_of = vec![t as u32; b.num_rows()];
                match run.changes.last_mut() {
                    Some(last) if last.batch.op == b.op => {
                        let join = |a: &Option<RecordBatch>, b: &Option<RecordBatch>| {
                            a.as_ref()
                                .zip(b.as_ref())
                                .map(|(a, b)| concat_batches(a.schema_ref(), [a, b]).unwrap())
                        };
                        last.batch.before = join(&last.batch.before, &b.before);
                        last.batch.after = join(&last.batch.after, &b.after);
                        last.batch.index.extend(&b.index);
                        last.tx.extend(tx_of);
                    }
                    _ => run.changes.push(RunBatch {
                        batch: b.clone(),
                        tx: tx_of,
                    }),
                }
            }
            run.txs.push(SourceTransaction {
                changes: Vec::new(),
                ..tx.clone()
            });
        }
        run
    }

    /// A run's first transactions dropped leave the rest of the run as it was.
    #[test]
    fn skipping_the_first_transactions_of_a_run_keeps_the_others_rows() {
        use rand::SeedableRng;
        let c = codec(true);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut model: Vec<(i32, String)> = (1..=5).map(|i| (i, "s".to_string())).collect();
        let mut next_id = 100;
        let txs: Vec<SourceTransaction> = (0..30)
            .map(|i| random_transaction(&c, &mut model, &mut rng, 1000 + 10 * i, &mut next_id))
            .collect();
        for skip in [0, 1, 7, 29, 30] {
            let mut run = as_run(&txs);
            run.skip_first(skip);
            let expected = as_run(&txs[skip..]);
            assert_eq!(run.txs.len(), expected.txs.len());
            assert_eq!(run.changes.len(), expected.changes.len(), "skip {skip}");
            for (a, b) in run.changes.iter().zip(&expected.changes) {
                assert_eq!(a.tx, b.tx);
                assert_eq!(a.batch.index, b.batch.index);
                assert_eq!(a.batch.before, b.batch.before);
                assert_eq!(a.batch.after, b.batch.after);
            }
        }
    }

    /// Bursts applied with `apply_many` give the state and entries of each transaction
    /// applied by itself: repeated changes of a key, key changes, deletes and inserts of one
    /// key within a burst, keyless copies.
    #[test]
    fn a_burst_applied_together_equals_its_transactions_one_by_one() {
        use rand::{Rng, SeedableRng};
        for keyed in [true, false] {
            let c = codec(keyed);
            let mut rng = rand::rngs::StdRng::seed_from_u64(7 + u64::from(keyed));
            let start: Vec<(i32, String)> = (1..=5).map(|i| (i, "s".to_string())).collect();
            let mut model = start.clone();
            let mut next_id = 100;
            let txs: Vec<SourceTransaction> = (0..400)
                .map(|i| random_transaction(&c, &mut model, &mut rng, 1000 + 10 * i, &mut next_id))
                .collect();
            let streaming = || handed_off(&c, &start);
            let mut one_by_one = streaming();
            let mut expected = Vec::new();
            for tx in &txs {
                for b in &tx.changes {
                    one_by_one.apply_changes(tx, b, &mut expected).unwrap();
                }
            }
            // Runs, as the reader gathers them: a batch takes the next transaction's rows of
            // the same operation.
            for handed_off in [true, false] {
                let fresh = || {
                    if handed_off {
                        return streaming();
                    }
                    let mut state = TableState::new(Arc::clone(c.schema())).unwrap();
                    let refs: Vec<(i32, &str)> =
                        start.iter().map(|(i, v)| (*i, v.as_str())).collect();
                    state.apply_snapshot(&at(10), batch(&c, &refs)).unwrap();
                    state
                };
                let mut one = fresh();
                let mut expected = Vec::new();
                for tx in &txs {
                    for b in &tx.changes {
                        one.apply_changes(tx, b, &mut expected).unwrap();
                    }
                }
                let mut runs = fresh();
                let mut events = Vec::new();
                let mut rest = &txs[..];
                while !rest.is_empty() {
                    let n = rng.random_range(1..=rest.len().min(40));
                    let run = as_run(&rest[..n]);
                    let batches: Vec<&RunBatch> = run.changes.iter().collect();
                    runs.apply_run(&run.txs, &batches, &mut events).unwrap();
                    rest = &rest[n..];
                }
                assert_eq!(events, expected, "keyed: {keyed}, handed off: {handed_off}");
                if !handed_off {
                    one.finish_handoff().unwrap();
                    runs.finish_handoff().unwrap();
                }
                assert_eq!(
                    ids(&[runs.to_batch().unwrap()]),
                    ids(&[one.to_batch().unwrap()])
                );
            }
            let mut together = streaming();
            let mut events = Vec::new();
            let mut rest = &txs[..];
            while !rest.is_empty() {
                let n = rng.random_range(1..=rest.len().min(40));
                let items: Vec<(&SourceTransaction, &ChangeBatch)> = rest[..n]
                    .iter()
                    .flat_map(|tx| tx.changes.iter().map(move |b| (tx, b)))
                    .collect();
                together.apply_many(&items, &mut events).unwrap();
                rest = &rest[n..];
            }
            assert_eq!(events, expected, "keyed: {keyed}");
            assert_eq!(
                ids(&[together.to_batch().unwrap()]),
                ids(&[one_by_one.to_batch().unwrap()])
            );
            model.sort();
            assert_eq!(
                ids(&[together.to_batch().unwrap()]),
                model,
                "keyed: {keyed}"
            );
        }
    }

    /// A run's entries kept as rows of its images build the same changelog batch as the same
    /// run's entries as events, and leave the same state: updates in place, key changes,
    /// deletes, keyless copies, GTIDs on some transactions and not others, transactions
    /// without entries for the table skipped in `_tx`.
    #[test]
    fn streamed_entries_build_the_changelog_the_events_build() {
        use crate::state::changelog::{changelog_batch, changelog_schema, streamed_batch};
        use rand::{Rng, SeedableRng};
        for keyed in [true, false] {
            let c = codec(keyed);
            let schema = changelog_schema(&c.schema().arrow);
            let mut rng = rand::rngs::StdRng::seed_from_u64(11 + u64::from(keyed));
            let start: Vec<(i32, String)> = (1..=5).map(|i| (i, "s".to_string())).collect();
            let mut model = start.clone();
            let mut next_id = 100;
            let txs: Vec<SourceTransaction> = (0..300)
                .map(|i| {
                    let mut tx =
                        random_transaction(&c, &mut model, &mut rng, 1000 + 10 * i, &mut next_id);
                    if rng.random_range(0..3) > 0 {
                        tx.gtid = Some(Gtid::MariaDb {
                            domain: 0,
                            server: 1,
                            seq: i,
                        });
                    }
                    if rng.random_range(0..5) == 0 {
                        // A transaction of other tables only: no rows here.
                        tx.changes.clear();
                    }
                    tx
                })
                .collect();
            let (mut as_events, mut as_rows) = (handed_off(&c, &start), handed_off(&c, &start));
            let mut rest = &txs[..];
            let mut number = 0;
            while !rest.is_empty() {
                let n = rng.random_range(1..=rest.len().min(40));
                let run = as_run(&rest[..n]);
                rest = &rest[n..];
                let batches: Vec<&RunBatch> = run.changes.iter().collect();
                let mut events = Vec::new();
                as_events
                    .apply_run(&run.txs, &batches, &mut events)
                    .unwrap();
                let streamed = as_rows.apply_run_streamed(&batches).unwrap();
                // `_tx` as the engine numbers it: the run's transactions with entries, in order.
                let mut tx_numbers = vec![0; run.txs.len()];
                for (j, tx) in run.txs.iter().enumerate() {
                    if events.iter().any(|e| e.position.tx == tx.start) {
                        number += 1;
                        tx_numbers[j] = number;
                    }
                }
                let event_tx: Vec<u64> = events
                    .iter()
                    .map(|e| {
                        let j = run.txs.iter().position(|t| t.start == e.position.tx);
                        tx_numbers[j.unwrap()]
                    })
                    .collect();
                let refs: Vec<&ChangelogEvent> = events.iter().collect();
                // Events hold rows of the state's own codec.
                let codec = as_events.codec();
                let expected = changelog_batch(codec, &schema, &refs, &event_tx).unwrap();
                let built =
                    streamed_batch(codec, &schema, &run.txs, &tx_numbers, &streamed).unwrap();
                assert_eq!(built, expected, "keyed: {keyed}");
            }
            assert_eq!(
                ids(&[as_rows.to_batch().unwrap()]),
                ids(&[as_events.to_batch().unwrap()])
            );
        }
    }

    fn batch_w(schema: &Arc<TableSchema>, id: i32) -> RecordBatch {
        RecordBatch::try_new(
            Arc::clone(&schema.arrow),
            vec![
                Arc::new(Int32Array::from(vec![id])),
                Arc::new(arrow::array::StringArray::from(vec!["x"])),
                Arc::new(Int32Array::from(vec![0])),
            ],
        )
        .unwrap()
    }
}
