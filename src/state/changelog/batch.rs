//! Building changelog batches, in the row format `format` owns: the batches of a table's
//! entries, from binlog changes or from an applied snapshot chunk.

use std::sync::Arc;

use arrow::array::builder::NullBufferBuilder;
use arrow::array::BooleanArray;
use arrow::array::{
    ArrayRef, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray, UInt32Array,
    UInt64Array,
};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::{nullif, take};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;

use crate::change::keys::RowCodec;
use crate::change::position::{push_decimal, BinlogCoord, ChangePosition, Gtid};
use crate::change::schema::{TableId, TableSchema};
use crate::change::{Op, SourceTransaction};
use crate::state::handoff::ChunkEntries;
use crate::state::merge::{ChangelogEvent, TableState};

use super::format::{
    before_fields, changelog_schema, COMMIT_TS_COLUMN, GTID_COLUMN, META_COLUMNS, OP_COLUMN,
    POSITION_COLUMN,
};

/// Builds the changelog batch of `events` (all of one table); `tx[i]` is the transaction
/// sequence number of event `i` (0 for snapshot reads).
pub fn changelog_batch(
    codec: &RowCodec,
    schema: &SchemaRef,
    events: &[&ChangelogEvent],
    tx: &[u64],
) -> Result<RecordBatch, ArrowError> {
    let table = codec.schema();
    let rows = events.iter().map(|e| {
        e.after
            .as_ref()
            .or(e.before.as_ref())
            .expect("an event has an image")
    });
    let image = codec.decode_columns(rows)?;
    let (positions, gtids) =
        position_and_gtid_columns(events.len(), events.iter().map(|e| EntryAt::of(e)))?;
    let ts: Vec<Option<i64>> = events
        .iter()
        .map(|e| (e.commit_ts_micros > 0).then_some(e.commit_ts_micros))
        .collect();
    let has_before: Vec<bool> = events
        .iter()
        .map(|e| e.after.is_some() && e.before.is_some())
        .collect();
    // Before images: decoded for updates, a placeholder row (masked NULL) elsewhere.
    let before_rows = events.iter().map(|e| match (&e.before, &e.after) {
        (Some(b), Some(_)) => b,
        (_, Some(a)) => a,
        (Some(b), None) => b,
        (None, None) => unreachable!("an event has an image"),
    });
    let before_image = codec.decode_columns(before_rows)?;
    let before_fields = before_fields(schema);
    // Children are NULL where the struct is, so `_before['col']` is NULL for non-updates.
    let children = if has_before.iter().all(|b| *b) {
        before_image
    } else {
        let absent = BooleanArray::from(has_before.iter().map(|b| !b).collect::<Vec<_>>());
        before_image
            .iter()
            .map(|c| nullif(c, &absent))
            .collect::<Result<Vec<_>, _>>()?
    };
    let before = StructArray::try_new(before_fields, children, Some(NullBuffer::from(has_before)))?;
    let meta: [ArrayRef; 5] = [
        Arc::new(StringArray::from_iter_values(
            events.iter().map(|e| e.op.code()),
        )),
        Arc::new(positions),
        Arc::new(gtids),
        Arc::new(UInt64Array::from(tx.to_vec())),
        Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
    ];
    assemble(schema, table, meta, &image, Arc::new(before))
}

/// What `_position` and `_gtid` are made of: an entry's position, its parts borrowed.
pub(super) struct EntryAt<'a> {
    pub tx: &'a BinlogCoord,
    pub event_index: u32,
    pub row_index: u32,
    pub sub: u8,
    pub gtid: Option<&'a Gtid>,
}

impl<'a> EntryAt<'a> {
    fn of(e: &'a ChangelogEvent) -> Self {
        Self {
            tx: &e.position.tx,
            event_index: e.position.event_index,
            row_index: e.position.row_index,
            sub: e.position.sub,
            gtid: e.gtid.as_ref(),
        }
    }
}

/// The `_position` and `_gtid` columns of `n` entries. Consecutive entries mostly share their
/// transaction, so its coordinate and GTID are written once per transaction and each entry
/// only adds its indexes (the same text [`ChangePosition`]'s `Display` writes).
pub(super) fn position_and_gtid_columns<'a>(
    n: usize,
    entries: impl IntoIterator<Item = EntryAt<'a>>,
) -> Result<(StringArray, StringArray), ArrowError> {
    let mut positions = TextColumn::with_capacity(n, n * 56);
    let mut gtids = TextColumn::with_capacity(n, n * 16);
    let (mut tx_text, mut last_tx) = (Vec::new(), None);
    let (mut gtid_text, mut last_gtid) = (Vec::new(), None);
    for e in entries {
        if last_tx != Some(e.tx) {
            tx_text.clear();
            ChangePosition::push_tx_text(&mut tx_text, e.tx);
            last_tx = Some(e.tx);
        }
        positions.bytes.extend_from_slice(&tx_text);
        ChangePosition::push_indexes_text(&mut positions.bytes, e.event_index, e.row_index, e.sub);
        positions.end_value()?;
        match e.gtid {
            None => gtids.push_null()?,
            Some(gtid) => {
                if last_gtid != Some(gtid) {
                    gtid_text.clear();
                    gtid.push_text(&mut gtid_text);
                    last_gtid = Some(gtid);
                }
                gtids.bytes.extend_from_slice(&gtid_text);
                gtids.end_value()?;
            }
        }
    }
    Ok((positions.finish()?, gtids.finish()?))
}

/// A text column written as bytes and checked as UTF-8 once, when finished: the metadata
/// text of every entry (positions, GTIDs) is pushed in parts, where a `StringBuilder` would
/// take each part through a `str` and a check of its own.
struct TextColumn {
    bytes: Vec<u8>,
    offsets: Vec<i32>,
    nulls: NullBufferBuilder,
}

impl TextColumn {
    fn with_capacity(values: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(values + 1);
        offsets.push(0);
        Self {
            bytes: Vec::with_capacity(bytes),
            offsets,
            nulls: NullBufferBuilder::new(values),
        }
    }

    /// Ends the value whose bytes were pushed since the last one ended.
    fn end_value(&mut self) -> Result<(), ArrowError> {
        self.push_offset()?;
        self.nulls.append_non_null();
        Ok(())
    }

    fn push_null(&mut self) -> Result<(), ArrowError> {
        self.push_offset()?;
        self.nulls.append_null();
        Ok(())
    }

    fn push_offset(&mut self) -> Result<(), ArrowError> {
        let end = i32::try_from(self.bytes.len()).map_err(|_| {
            ArrowError::ComputeError("changelog text column past 2 GiB".to_string())
        })?;
        self.offsets.push(end);
        Ok(())
    }

    fn finish(mut self) -> Result<StringArray, ArrowError> {
        StringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(self.offsets)),
            Buffer::from_vec(self.bytes),
            self.nulls.finish(),
        )
    }
}

/// The changelog batch of one applied snapshot chunk: the chunk's own rows (shared, not
/// copied) with the metadata columns, entry `i` at its own position `(high, 0, first + i, 0)`:
/// `r`, or `u` with `_before` where the key held an older row. A chunk's segment keeps only
/// the chunk and builds this when read ([`ChangelogSegment::of_chunk`](super::ChangelogSegment::of_chunk)).
pub fn chunk_batch(
    codec: &RowCodec,
    schema: &SchemaRef,
    entries: &ChunkEntries,
    high: &BinlogCoord,
    first: u32,
) -> Result<RecordBatch, ArrowError> {
    let n = entries.len();
    let table = codec.schema();
    let mut ops = vec![Op::Read.code(); n];
    for (i, _) in &entries.before {
        ops[*i as usize] = Op::Update.code();
    }
    let positions = chunk_positions(high, first, n)?;
    let before_fields = before_fields(schema);
    let before: ArrayRef = if entries.before.is_empty() {
        Arc::new(StructArray::new_null(before_fields, n))
    } else {
        // Row j of the decoded before images goes to entry `entries.before[j].0`.
        let images = codec.decode(entries.before.iter().map(|(_, row)| row))?;
        let mut take_from: Vec<Option<u32>> = vec![None; n];
        for (j, (i, _)) in entries.before.iter().enumerate() {
            take_from[*i as usize] = Some(j as u32);
        }
        let take_from = UInt32Array::from(take_from);
        let children = images
            .columns()
            .iter()
            .map(|c| take(c, &take_from, None))
            .collect::<Result<Vec<_>, _>>()?;
        let present = NullBuffer::from(take_from.iter().map(|t| t.is_some()).collect::<Vec<_>>());
        Arc::new(StructArray::try_new(
            before_fields,
            children,
            Some(present),
        )?)
    };
    let meta: [ArrayRef; 5] = [
        Arc::new(StringArray::from(ops)),
        Arc::new(positions),
        Arc::new(StringArray::new_null(n)),
        Arc::new(UInt64Array::from(vec![0; n])),
        Arc::new(TimestampMicrosecondArray::new_null(n).with_timezone("UTC")),
    ];
    assemble(schema, table, meta, entries.rows.columns(), before)
}

/// The `_position` column of a chunk's `n` entries: entry `i` at `(high, 0, first + i, 0)`.
fn chunk_positions(high: &BinlogCoord, first: u32, n: usize) -> Result<StringArray, ArrowError> {
    // The text up to the row index (`file:offset:event:`) is the same for every entry.
    let mut prefix = Vec::new();
    ChangePosition::push_tx_text(&mut prefix, high);
    push_decimal(&mut prefix, 0, 10);
    prefix.push(b':');
    let mut positions = TextColumn::with_capacity(n, n * (prefix.len() + 12));
    for i in 0..n {
        let row = u32::try_from(i)
            .ok()
            .and_then(|i| first.checked_add(i))
            .ok_or_else(|| ArrowError::ComputeError(format!("chunk row {first} + {i} past u32")))?;
        positions.bytes.extend_from_slice(&prefix);
        push_decimal(&mut positions.bytes, row.into(), 10);
        positions.bytes.extend_from_slice(b":0");
        positions.end_value()?;
    }
    positions.finish()
}

/// A changelog batch from its metadata columns before `_table` (`_op`, `_position`, `_gtid`,
/// `_tx`, `_commit_ts`), the image columns and `_before`; `_table` and `_schema_version` come
/// from `table`.
pub(super) fn assemble(
    schema: &SchemaRef,
    table: &TableSchema,
    meta: [ArrayRef; 5],
    image: &[ArrayRef],
    before: ArrayRef,
) -> Result<RecordBatch, ArrowError> {
    let n = before.len();
    let table_name = table.id.to_string();
    let name: ArrayRef = Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
        table_name.as_str(),
        n,
    )));
    let version: ArrayRef = Arc::new(UInt32Array::from(vec![table.version; n]));
    let columns: Vec<ArrayRef> = meta
        .into_iter()
        .chain([name, version])
        .chain(image.iter().cloned())
        .chain([before])
        .collect();
    RecordBatch::try_new(Arc::clone(schema), columns)
}

/// A changelog batch as it is printed: every column but `_tx`, `_table` and `_before`.
pub fn display_columns(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let keep: Vec<usize> = [OP_COLUMN, POSITION_COLUMN, GTID_COLUMN, COMMIT_TS_COLUMN]
        .into_iter()
        .chain(META_COLUMNS.len()..batch.num_columns().saturating_sub(1))
        .collect();
    batch.project(&keep)
}

/// The row changes of one source transaction as changelog batches (one per table, in order of
/// first appearance), read without state as [`TableState::binlog_events`] spells them, with
/// `tx_seq` as `_tx`. What a raw binlog reader prints and compares.
pub fn transaction_batches(
    tx: &SourceTransaction,
    tx_seq: u64,
) -> Result<Vec<(TableId, RecordBatch)>, ArrowError> {
    // One codec per table, made at its first change and kept for its rendering.
    let mut tables: Vec<(RowCodec, Vec<ChangelogEvent>)> = Vec::new();
    for change in &tx.changes {
        let at = match tables
            .iter()
            .position(|(c, _)| c.schema().id == change.table.id)
        {
            Some(at) => at,
            None => {
                tables.push((RowCodec::new(Arc::clone(&change.table))?, Vec::new()));
                tables.len() - 1
            }
        };
        let (codec, events) = &mut tables[at];
        TableState::binlog_events(codec, tx, change, events)?;
    }
    tables
        .into_iter()
        .filter(|(_, events)| !events.is_empty())
        .map(|(codec, events)| {
            let refs: Vec<&ChangelogEvent> = events.iter().collect();
            let seq = vec![tx_seq; refs.len()];
            let schema = changelog_schema(&codec.schema().arrow);
            let batch = changelog_batch(&codec, &schema, &refs, &seq)?;
            Ok((codec.schema().id.clone(), batch))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::DataType;

    #[test]
    fn chunk_positions_are_written_as_positions_write_them() {
        let high = BinlogCoord::new("binlog.000007", 1234);
        for first in [0, 7, 42, 1_000_000, u32::MAX - 2] {
            let positions = chunk_positions(&high, first, 3).unwrap();
            for i in 0..3u32 {
                let expected = ChangePosition {
                    tx: high.clone(),
                    event_index: 0,
                    row_index: first + i,
                    sub: 0,
                };
                assert_eq!(positions.value(i as usize), expected.to_string());
            }
        }
        assert!(chunk_positions(&high, u32::MAX, 2).is_err());
    }

    #[test]
    fn positions_and_gtids_are_written_as_their_display_writes_them() {
        use crate::change::position::Gtid;
        use arrow::array::{Array, Int64Array};
        use arrow::row::{RowConverter, SortField};
        let converter = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let keys = converter
            .convert_columns(&[Arc::new(Int64Array::from(vec![1])) as ArrayRef])
            .unwrap();
        let gtid = |seq| Gtid::MariaDb {
            domain: 0,
            server: 1,
            seq,
        };
        let event = |file: &str, offset, event_index, row_index, sub, gtid| ChangelogEvent {
            op: crate::change::Op::Insert,
            key: keys.row(0).owned(),
            position: ChangePosition {
                tx: BinlogCoord::new(file, offset),
                event_index,
                row_index,
                sub,
            },
            gtid,
            commit_ts_micros: 0,
            before: None,
            after: Some(keys.row(0).owned()),
        };
        // Entries of one transaction, then others, with and without GTIDs and a split update.
        let events = [
            event("binlog.000001", 4, 1, 0, 0, Some(gtid(7))),
            event("binlog.000001", 4, 1, 1, 0, Some(gtid(7))),
            event("binlog.000001", 4, 2, 4_000_000_000, 1, Some(gtid(7))),
            event("binlog.000001", 900, 1, 0, 0, None),
            event("binlog.000002", 900, u32::MAX, 3, 0, Some(gtid(8))),
            event("binlog.000002", 900, u32::MAX, 4, 0, Some(gtid(8))),
            event("binlog.000002", 1200, 1, 0, 0, Some(gtid(9))),
        ];
        let (positions, gtids) =
            position_and_gtid_columns(events.len(), events.iter().map(EntryAt::of)).unwrap();
        for (i, e) in events.iter().enumerate() {
            assert_eq!(positions.value(i), e.position.to_string(), "entry {i}");
            match &e.gtid {
                Some(g) => assert_eq!(gtids.value(i), g.to_string(), "entry {i}"),
                None => assert!(gtids.is_null(i), "entry {i}"),
            }
        }
    }
}
