//! The changelog batch of changes applied after the hand-off, taken from the change batches'
//! own Arrow images (see `state::streamed`): the row columns and `_before` are the images'
//! rows the entries name, gathered column by column, and shared without a copy when the
//! entries are one image's rows in order (a run of updates of one table, say). It is the same
//! batch [`changelog_batch`](super::changelog_batch) builds from the entries as events.

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, RecordBatch, StringArray, StructArray,
    TimestampMicrosecondArray, UInt64Array,
};
use arrow::buffer::NullBuffer;
use arrow::compute::interleave;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;

use super::batch::{assemble, position_and_gtid_columns, EntryAt};
use super::format::before_fields;
use crate::change::keys::RowCodec;
use crate::change::SourceTransaction;
use crate::state::streamed::{EntryImage, StreamedBatch};

/// The changelog batch of one table's `batches` of a run of transactions `txs`, in order;
/// `tx_numbers[j]` is the `_tx` of `txs[j]`.
pub fn streamed_batch(
    codec: &RowCodec,
    schema: &SchemaRef,
    txs: &[SourceTransaction],
    tx_numbers: &[u64],
    batches: &[StreamedBatch],
) -> Result<RecordBatch, ArrowError> {
    let n: usize = batches.iter().map(|b| b.entries.len()).sum();
    let table = codec.schema();
    if n == 0 {
        return Ok(RecordBatch::new_empty(Arc::clone(schema)));
    }
    if let Some(b) = batches.iter().find(|b| b.batch.index.len() != b.tx.len()) {
        return Err(ArrowError::InvalidArgumentError(format!(
            "{} transactions for {} rows",
            b.tx.len(),
            b.batch.index.len()
        )));
    }
    let tx_of = |b: &StreamedBatch, row: u32| -> Result<usize, ArrowError> {
        let t = *b.tx.get(row as usize).ok_or_else(|| {
            ArrowError::InvalidArgumentError(format!(
                "an entry of row {row} in a batch of {} rows",
                b.tx.len()
            ))
        })? as usize;
        if t < txs.len() && t < tx_numbers.len() {
            Ok(t)
        } else {
            Err(ArrowError::InvalidArgumentError(format!(
                "a row of transaction {t} in a run of {}",
                txs.len()
            )))
        }
    };
    let entry_tx = batches
        .iter()
        .flat_map(|b| b.entries.iter().map(move |e| tx_of(b, e.row)))
        .collect::<Result<Vec<_>, _>>()?;
    // The images, numbered: batch `b`'s before image is `sources[b].0`, its after image
    // `sources[b].1`.
    let mut images: Vec<&[ArrayRef]> = Vec::with_capacity(2 * batches.len());
    let mut sources = Vec::with_capacity(batches.len());
    for b in batches {
        let before = b.batch.before.as_ref().map(|i| {
            images.push(i.columns());
            images.len() - 1
        });
        let after = b.batch.after.as_ref().map(|i| {
            images.push(i.columns());
            images.len() - 1
        });
        sources.push((before, after));
    }
    let missing = |what: &str| {
        ArrowError::InvalidArgumentError(format!("an entry shows a {what} image its batch lacks"))
    };
    // Per entry, the image row of its columns, and of its `_before` (updates in place).
    let mut shown = Vec::with_capacity(n);
    let mut before = Vec::with_capacity(n);
    for (b, (old, new)) in batches.iter().zip(&sources) {
        for e in &b.entries {
            let row = e.row as usize;
            let old = old.map(|i| (i, row));
            let new = new.map(|i| (i, row));
            match e.image {
                EntryImage::After => {
                    shown.push(new.ok_or_else(|| missing("after"))?);
                    before.push(None);
                }
                EntryImage::Before => {
                    shown.push(old.ok_or_else(|| missing("before"))?);
                    before.push(None);
                }
                EntryImage::Update => {
                    shown.push(new.ok_or_else(|| missing("after"))?);
                    before.push(Some(old.ok_or_else(|| missing("before"))?));
                }
            }
        }
    }
    let width = table.arrow.fields().len();
    let columns = gather(&images, &shown, width)?;
    let before_fields = before_fields(schema);
    let before: ArrayRef = if before.iter().all(Option::is_none) {
        Arc::new(StructArray::new_null(before_fields, n))
    } else if let Some(all) = before.iter().copied().collect::<Option<Vec<_>>>() {
        let children = gather(&images, &all, width)?;
        Arc::new(StructArray::try_new(before_fields, children, None)?)
    } else {
        // Entries without a before image take a NULL from a one-row source of NULLs, so
        // `_before['col']` is NULL where `_before` is.
        let nulls: Vec<ArrayRef> = table
            .arrow
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), 1))
            .collect();
        let mut with_nulls = images.clone();
        with_nulls.push(&nulls[..]);
        let null_row = (with_nulls.len() - 1, 0);
        let picks: Vec<(usize, usize)> = before.iter().map(|p| p.unwrap_or(null_row)).collect();
        let children = gather(&with_nulls, &picks, width)?;
        let present = NullBuffer::from(before.iter().map(Option::is_some).collect::<Vec<_>>());
        Arc::new(StructArray::try_new(
            before_fields,
            children,
            Some(present),
        )?)
    };
    // Every entry with its batch, in order.
    let entries = || {
        batches
            .iter()
            .flat_map(|b| b.entries.iter().map(move |e| (b, e)))
    };
    let entry_at = entries().zip(&entry_tx).map(|((b, e), &t)| {
        let tx = &txs[t];
        let (event_index, row_index) = b.batch.index[e.row as usize];
        EntryAt {
            tx: &tx.start,
            event_index,
            row_index,
            sub: e.sub,
            gtid: tx.gtid.as_ref(),
        }
    });
    let (positions, gtids) = position_and_gtid_columns(n, entry_at)?;
    let ops: Vec<&str> = entries().map(|(_, e)| e.op.code()).collect();
    let ts = entry_tx.iter().map(|&t| {
        let micros = txs[t].commit_ts_micros;
        (micros > 0).then_some(micros)
    });
    let meta: [ArrayRef; 5] = [
        Arc::new(StringArray::from_iter_values(ops)),
        Arc::new(positions),
        Arc::new(gtids),
        Arc::new(UInt64Array::from_iter_values(
            entry_tx.iter().map(|&t| tx_numbers[t]),
        )),
        Arc::new(TimestampMicrosecondArray::from_iter(ts).with_timezone("UTC")),
    ];
    assemble(schema, table, meta, &columns, before)
}

/// The `width` columns of `picks` (image, row) of `images` (each an image's columns): the
/// image's own columns, sliced, when the picks are consecutive rows of one image; else
/// gathered value by value.
fn gather(
    images: &[&[ArrayRef]],
    picks: &[(usize, usize)],
    width: usize,
) -> Result<Vec<ArrayRef>, ArrowError> {
    if let Some(&(image, first)) = picks.first() {
        let consecutive = picks
            .iter()
            .enumerate()
            .all(|(k, &(i, row))| i == image && row == first + k);
        if consecutive {
            return Ok(images[image]
                .iter()
                .map(|c| c.slice(first, picks.len()))
                .collect());
        }
    }
    (0..width)
        .map(|c| {
            let values: Vec<&dyn Array> = images.iter().map(|i| i[c].as_ref()).collect();
            interleave(&values, picks)
        })
        .collect()
}
