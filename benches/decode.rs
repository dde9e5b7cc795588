//! The binlog row decoder in memory: rows-event bodies of the 7-column bench table decoded into
//! Arrow, beside a plain copy of the same bytes measured in the same run.
//!
//! No server and no network: the table map and the row images are built here the way MariaDB
//! writes them for `bench.t` (`BIGINT`, `INT`, `VARCHAR(32)`, `DECIMAL(12,2)`, `DATETIME(6)`,
//! `DOUBLE`, `BIGINT UNSIGNED`), in events of at most 8 KiB (`binlog_row_event_max_size`), and
//! transactions of 1,000 rows finished into one Arrow batch each, as the live reader does.
//!
//! Run with `cargo bench --bench decode` (optionally `-- --rows N`, default 1,000,000). Rounds
//! alternate decode and copy (ABAB); it prints ns per row and per value of both and the median
//! of the per-round ratios. Nothing is asserted beyond the decoded values being the encoded
//! ones.

mod common;

use cdcfusion::change::kinds::SimpleKind;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Decimal128Type, Int64Type, TimestampMicrosecondType};
use cdcfusion::change::schema::{Charset, ColumnKind, ColumnSpec, TableId, TableSchema};
use cdcfusion::source::binlog::rows::TableDecoder;
use cdcfusion::source::types::date_to_days;
use mysql_async::binlog::events::{Event, FormatDescriptionEvent, TableMapEvent};
use mysql_async::binlog::BinlogVersion;

/// Alternating rounds of decode and copy.
const ROUNDS: usize = 7;
/// Rows per transaction (one Arrow batch each), as the capture bench inserts them.
const ROWS_PER_TX: u64 = 1000;
/// MariaDB's default `binlog_row_event_max_size`.
const EVENT_MAX: usize = 8192;
const COLUMNS: u64 = 7;

/// The allocator the `cdcfusion` binary uses, so the figures match it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The schema of `bench.t` as the server describes it.
fn schema() -> TableSchema {
    let col = |name: &str, kind, nullable| ColumnSpec {
        name: name.into(),
        kind,
        nullable,
    };
    let int = |bits, unsigned| ColumnKind::Int { bits, unsigned };
    TableSchema::new(
        TableId::new("bench", "t"),
        vec![
            col("id", int(64, false), false),
            col("a", int(32, false), false),
            col(
                "b",
                ColumnKind::Text {
                    charset: Charset::Utf8,
                    length: Some(32),
                },
                false,
            ),
            col(
                "c",
                ColumnKind::Decimal {
                    precision: 12,
                    scale: 2,
                },
                false,
            ),
            col("d", ColumnKind::DateTime { fsp: 6 }, false),
            col("e", ColumnKind::Simple(SimpleKind::Double), false),
            col("f", int(64, true), true),
        ],
        vec![0],
    )
}

/// The table map event of `bench.t`: table id 1, column types and their metadata.
fn table_map() -> Event {
    let mut body = vec![1, 0, 0, 0, 0, 0, 0, 0];
    body.extend([5, b'b', b'e', b'n', b'c', b'h', 0, 1, b't', 0]);
    // LONGLONG, LONG, VARCHAR, NEWDECIMAL, DATETIME2, DOUBLE, LONGLONG.
    body.extend([7, 8, 3, 15, 246, 18, 5, 8]);
    // Metadata: VARCHAR's byte length (32 × 4, LE), DECIMAL's precision and scale, DATETIME2's
    // fsp, DOUBLE's size; then the nullability bitmap (only `f`).
    body.extend([6, 128, 0, 12, 2, 6, 8, 0b0100_0000]);
    let mut event = vec![0, 0, 0, 0, 19, 1, 0, 0, 0];
    event.extend((19 + body.len() as u32).to_le_bytes());
    event.extend([0, 0, 0, 0, 0, 0]);
    event.extend(body);
    let fde = FormatDescriptionEvent::new(BinlogVersion::Version4);
    Event::read(&fde, &event[..]).expect("a well-formed table map")
}

/// Seconds from the epoch to 2024-01-01, the bench rows' first `d`.
fn base_seconds() -> i64 {
    date_to_days(2024, 1, 1).unwrap().unwrap() as i64 * 86_400
}

/// Row `seq`'s after image, as `common::insert_rows` writes it (with a non-zero fraction).
fn row_image(seq: u64, out: &mut Vec<u8>) {
    out.push(0); // no NULLs
    out.extend(seq.to_le_bytes());
    out.extend(((seq % 100_000) as i32).to_le_bytes());
    let name = format!("name-{seq:08}");
    out.push(name.len() as u8);
    out.extend(name.as_bytes());
    // DECIMAL(12,2): a 1-digit group (1 byte), a 9-digit group (4 bytes), 2 fraction digits
    // (1 byte); the sign bit set for a positive value.
    let int = seq % 99_999;
    let mut dec = [0u8; 6];
    dec[0] = (int / 1_000_000_000) as u8;
    dec[1..5].copy_from_slice(&((int % 1_000_000_000) as u32).to_be_bytes());
    dec[5] = 25;
    dec[0] ^= 0x80;
    out.extend(dec);
    // DATETIME2(6): 5 bytes of packed fields plus 0x80_0000_0000, 3 bytes of microseconds.
    let secs = base_seconds() + seq as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = cdcfusion::source::types::civil_from_days(days);
    let ym = y as u64 * 13 + m as u64;
    let hms = ((rem / 3600) << 12) | ((rem / 60 % 60) << 6) | (rem % 60);
    let packed = ((ym << 22) | ((d as u64) << 17) | hms as u64) + 0x80_0000_0000;
    out.extend(&packed.to_be_bytes()[3..]);
    out.extend(&((seq % 1_000_000) as u32).to_be_bytes()[1..]);
    out.extend((seq as f64 / 7.0).to_le_bytes());
    out.extend((seq * 3).to_le_bytes());
}

/// The rows-event bodies of one transaction of rows `from..from + ROWS_PER_TX`.
fn transaction(from: u64) -> Vec<Vec<u8>> {
    let mut events = vec![Vec::new()];
    let mut row = Vec::new();
    for seq in from..from + ROWS_PER_TX {
        row.clear();
        row_image(seq, &mut row);
        if events.last().unwrap().len() + row.len() > EVENT_MAX {
            events.push(Vec::new());
        }
        events.last_mut().unwrap().extend(&row);
    }
    events
}

/// Decodes every transaction into one batch each; returns the rows decoded.
fn decode(decoder: &TableDecoder, txs: &[Vec<Vec<u8>>], check: bool) -> u64 {
    let present = [0x7fu8];
    let mut rows = 0u64;
    for (t, events) in txs.iter().enumerate() {
        let mut image = decoder.image();
        for body in events {
            rows += decoder
                .decode_rows(body, None, Some(&present), None, Some(&mut image))
                .expect("the encoded rows decode") as u64;
        }
        let batch = decoder.finish(image).expect("a batch");
        if check && t == 0 {
            check_batch(&batch);
        }
        black_box(batch);
    }
    rows
}

/// The first transaction decodes to the values `row_image` encoded.
fn check_batch(batch: &arrow::array::RecordBatch) {
    assert_eq!(batch.num_rows() as u64, ROWS_PER_TX);
    let last = ROWS_PER_TX as usize - 1;
    let id = batch.column(0).as_primitive::<Int64Type>();
    assert_eq!(id.value(last), last as i64);
    let name = batch.column(2).as_string::<i32>();
    assert_eq!(name.value(last), format!("name-{last:08}"));
    let dec = batch.column(3).as_primitive::<Decimal128Type>();
    assert_eq!(dec.value(last), (last as i128 % 99_999) * 100 + 25);
    let ts = batch.column(4).as_primitive::<TimestampMicrosecondType>();
    let micros = (base_seconds() + last as i64) * 1_000_000 + last as i64;
    assert_eq!(ts.value(last), micros);
    assert_eq!(batch.column(6).null_count(), 0);
}

/// Copies every event body into one reused buffer; returns the bytes copied.
fn copy(txs: &[Vec<Vec<u8>>], into: &mut Vec<u8>) -> u64 {
    let mut bytes = 0u64;
    for events in txs {
        for body in events {
            into.clear();
            into.extend_from_slice(black_box(body));
            bytes += black_box(&*into).len() as u64;
        }
    }
    bytes
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    cdcfusion::allocator::tune();
    let total = common::rows_arg(1_000_000).div_ceil(ROWS_PER_TX) * ROWS_PER_TX;
    let event = table_map();
    let tme = event
        .read_event::<TableMapEvent<'_>>()
        .expect("a table map");
    let decoder = TableDecoder::new(&tme, Arc::new(schema())).expect("the map fits the schema");
    let txs: Vec<_> = (0..total / ROWS_PER_TX)
        .map(|t| transaction(t * ROWS_PER_TX))
        .collect();
    let events: usize = txs.iter().map(Vec::len).sum();
    let bytes: usize = txs.iter().flatten().map(Vec::len).sum();
    println!(
        "decode in memory: {total} rows × {COLUMNS} columns, {events} rows events, {bytes} bytes"
    );
    assert_eq!(decode(&decoder, &txs, true), total);
    let mut buffer = Vec::with_capacity(EVENT_MAX);
    let (mut ours, mut reference, mut ratios) = (vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        assert_eq!(decode(&decoder, &txs, false), total);
        let d = started.elapsed();
        let started = Instant::now();
        assert_eq!(copy(&txs, &mut buffer), bytes as u64);
        let c = started.elapsed();
        let per_row = |t: Duration| t.as_nanos() as f64 / total as f64;
        ours.push(per_row(d));
        reference.push(per_row(c));
        ratios.push(per_row(d) / per_row(c));
    }
    let (ours, reference) = (median(ours), median(reference));
    println!(
        "  decode into Arrow:  {ours:>8.2} ns/row  {:>6.2} ns/value",
        ours / COLUMNS as f64
    );
    println!(
        "  copy of the bytes:  {reference:>8.2} ns/row  {:>6.2} ns/value",
        reference / COLUMNS as f64
    );
    println!(
        "  median ratio decode / copy over {ROUNDS} rounds: {:.1}",
        median(ratios)
    );
}
