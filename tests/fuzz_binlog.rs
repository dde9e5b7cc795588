//! Mutated binlog events fed to the decoder: no input may panic it, each one either decodes or
//! fails with an error, and the decoder goes on with the next transaction.
//!
//! The corpus is a binlog the test's private MariaDB writes (every column type it has, inserts,
//! updates, deletes and DDL), plus the MySQL binlog files in `../shared/fixtures/mysql-binlogs/`
//! beside the checkout (the test fails, naming the folder, without them). Each input is one event of the corpus, mutated (bits
//! flipped, bytes set to edge values, the body cut or grown with its size fixed, the type byte
//! changed), decoded after the events before it in its file (so its table maps are known).
//! Checksums are not verified: a mutation must reach the decoder, not stop at the CRC.
//!
//! The budget is [`INPUTS`] inputs with a fixed seed, so CI runs the same inputs every time;
//! `FUZZ_SEED` and `FUZZ_INPUTS` run others.
//!
//! Unmutated, a binlog gathered into runs (as the live reader gathers the transactions it has
//! received) holds exactly the transactions decoded one by one, also when transactions are
//! dropped midway and read again from their start, as after a reconnect.

mod common;

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cdcfusion::change::position::{BinlogCoord, StartPosition};
use cdcfusion::change::schema::TableId;
use cdcfusion::change::{ChangeBatch, TransactionRun};
use cdcfusion::source::binlog::rows::builtin_collations;
use cdcfusion::source::binlog::{Assembler, TableFilter};
use common::*;
use mysql_async::prelude::Queryable;
use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::events::Event;
use mysql_common::binlog::BinlogFile;
use rand::{Rng, SeedableRng};

/// Inputs per run.
const INPUTS: usize = 10_000;
/// Events decoded before the mutated one: enough to hold its transaction's table maps.
const CONTEXT: usize = 12;
const HEADER: usize = 19;
const MAGIC: &[u8] = b"\xfebin";

/// One binlog file split into its events (the format description first).
struct Corpus {
    name: String,
    events: Vec<Vec<u8>>,
    checksums: bool,
}

fn split(name: &str, data: &[u8]) -> Option<Corpus> {
    if !data.starts_with(MAGIC) {
        return None;
    }
    let mut events = Vec::new();
    let mut at = MAGIC.len();
    while data.len() >= at + HEADER {
        let size = u32::from_le_bytes(data[at + 9..at + 13].try_into().ok()?) as usize;
        if size < HEADER || at + size > data.len() {
            break; // a tail still being written
        }
        events.push(data[at..at + size].to_vec());
        at += size;
    }
    // The format description says whether events end with a CRC32: its last byte before the
    // CRC is the algorithm (1 = CRC32). Old formats have none.
    let fde = events.first()?;
    let checksums = fde.len() >= 5 && fde[fde.len() - 5] == 1;
    Some(Corpus {
        name: name.to_string(),
        events,
        checksums,
    })
}

/// Held while a test writes its corpus between two `FLUSH BINARY LOGS`, so that another test's
/// flush does not cut it short.
static WRITING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Writes `sql` into database `db` (made afresh) and returns the binlog file it went to, alone
/// in it: between two `FLUSH BINARY LOGS`, which the tests take turns at ([`WRITING`]).
async fn written_corpus(db: &str, sql: &str) -> Corpus {
    let _writing = WRITING.lock().await;
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let (file,): (String,) = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .map(|row: mysql_async::Row| (row.get::<String, _>(0).unwrap(),))
        .unwrap();
    conn.query_drop(sql).await.unwrap();
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let base: String = conn
        .query_first("SELECT @@log_bin_basename")
        .await
        .unwrap()
        .unwrap();
    let path = Path::new(&base).parent().unwrap().join(&file);
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    split(&file, &data).expect("a binlog file")
}

/// A binlog written by the private MariaDB: every column type, all three row operations and
/// DDL between them.
async fn mariadb_corpus() -> Corpus {
    written_corpus(
        "fz",
        "CREATE TABLE fz.t (id INT PRIMARY KEY, u BIGINT UNSIGNED, s SMALLINT, m MEDIUMINT,
           d DECIMAL(20,6), f FLOAT, g DOUBLE, b BIT(13), y YEAR, dt DATE, ts TIMESTAMP(3) NULL,
           tm TIME(2), dtm DATETIME(6), c CHAR(3), v VARCHAR(40), tx TEXT, bl BLOB,
           bn BINARY(4), e ENUM('a','b','c'), st SET('x','y','z'), j JSON, l1 VARCHAR(5) CHARACTER SET latin1);
         INSERT INTO fz.t SELECT seq, 18446744073709551615 - seq, -seq, seq * 1000,
           seq / 7, seq / 3, -seq / 9, seq, 1901 + seq, '2024-02-29' + INTERVAL seq DAY,
           '2030-06-19 03:14:07.123', '-838:59:58.99', '9999-12-31 23:59:59.999999', 'abc',
           REPEAT('v', seq % 40), REPEAT('t', seq * 10), UNHEX(REPEAT('ab', seq)), 'ab',
           ELT(1 + seq % 3, 'a', 'b', 'c'), 'x,z', JSON_OBJECT('k', seq, 'a', JSON_ARRAY(1, 2.5, 'q')),
           'äöü' FROM fz.seq_1_to_30;
         UPDATE fz.t SET v = NULL, d = -d, j = NULL WHERE id % 4 = 0;
         ALTER TABLE fz.t ADD COLUMN n INT DEFAULT 7 AFTER s;
         UPDATE fz.t SET n = id, tx = '' WHERE id % 3 = 0;
         DELETE FROM fz.t WHERE id % 5 = 0;
         CREATE TABLE fz.k (a INT, b VARCHAR(10));
         INSERT INTO fz.k VALUES (1, 'x'), (1, 'x'), (NULL, NULL);",
    )
    .await
}

fn fixture_corpora() -> Vec<Corpus> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/mysql-binlogs");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "no MySQL binlog fixtures at {} ({e}): the fuzz test reads them in place",
            dir.display()
        )
    });
    let mut out: Vec<Corpus> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            split(&name, &std::fs::read(e.path()).ok()?)
        })
        .filter(|c| c.events.len() > 1)
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// One event of `corpus` changed by a random mutation; its size field stays true.
fn mutate(event: &[u8], checksums: bool, rng: &mut impl Rng) -> (Vec<u8>, &'static str) {
    let mut out = event.to_vec();
    let end = out.len() - if checksums { 4 } else { 0 };
    let body = HEADER..end.max(HEADER);
    let what = match rng.random_range(0..6) {
        0 | 1 if !body.is_empty() => {
            for _ in 0..rng.random_range(1..=3) {
                let i = rng.random_range(body.clone());
                out[i] ^= 1 << rng.random_range(0..8);
            }
            "bits flipped"
        }
        2 if !body.is_empty() => {
            const EDGES: [u8; 6] = [0x00, 0xff, 0x80, 0x7f, 0x01, 0xfe];
            for _ in 0..rng.random_range(1..=4) {
                let i = rng.random_range(body.clone());
                out[i] = EDGES[rng.random_range(0..EDGES.len())];
            }
            "bytes set to edge values"
        }
        3 if !body.is_empty() => {
            let cut = rng.random_range(1..=body.len());
            out.drain(end - cut..end);
            "body cut"
        }
        4 => {
            let extra: Vec<u8> = (0..rng.random_range(1..64)).map(|_| rng.random()).collect();
            out.splice(end..end, extra);
            "body grown"
        }
        _ => {
            // Another type that carries data: rows events, table map, query, GTIDs, rotate.
            const TYPES: [u8; 12] = [2, 4, 16, 19, 23, 24, 25, 30, 31, 32, 33, 162];
            out[4] = TYPES[rng.random_range(0..TYPES.len())];
            "type changed"
        }
    };
    let size = out.len() as u32;
    out[9..13].copy_from_slice(&size.to_le_bytes());
    (out, what)
}

/// What decoding one input did.
#[derive(Debug, Default)]
struct Tally {
    inputs: usize,
    /// mysql_common could not frame the mutated event (not our decoder's input).
    unframed: usize,
    /// Errors and completed transactions, over all events decoded.
    errors: usize,
    transactions: usize,
    /// What the mutated events themselves did: refused with an error, or taken.
    refused: usize,
    taken: usize,
}

/// Decodes `events` (the format description first) as one file; the last one is the input.
/// An assembler reading binlog file `name` without a server: every table, checksums not
/// verified, unnamed columns named by position.
fn offline_assembler(name: &str) -> Assembler {
    let everything: TableFilter = Arc::new(|_: &TableId| true);
    Assembler::new(
        StartPosition::Coord(BinlogCoord::new(name, 4)),
        false,
        everything,
        builtin_collations(),
    )
    .with_unnamed_columns()
    .with_file(name)
}

fn decode(name: &str, events: &[&[u8]], tally: &mut Tally) -> Result<(), String> {
    let mut data = MAGIC.to_vec();
    for event in events {
        data.extend_from_slice(event);
    }
    let mut asm = offline_assembler(name);
    let Ok(mut file) = BinlogFile::new(BinlogVersion::Version4, &data[..]) else {
        tally.unframed += 1;
        return Ok(());
    };
    let mut index = 0;
    loop {
        index += 1;
        let input = index == events.len();
        // mysql_common frames events before our decoder sees them; a frame it cannot read
        // (or panics on) is no input of ours.
        let next = match std::panic::catch_unwind(AssertUnwindSafe(|| file.next())) {
            Ok(Some(Ok(event))) => event,
            Ok(None) => return Ok(()),
            Ok(Some(Err(_))) | Err(_) => {
                tally.unframed += 1;
                return Ok(());
            }
        };
        let step = std::panic::catch_unwind(AssertUnwindSafe(|| {
            futures::executor::block_on(asm.handle_event(&next, None))
        }));
        match &step {
            Ok(Ok(_)) if input => tally.taken += 1,
            Ok(Err(_)) if input => tally.refused += 1,
            _ => {}
        }
        match step {
            Ok(Ok(Some(_))) => tally.transactions += 1,
            Ok(Ok(None)) => {}
            Ok(Err(e)) => {
                // A clean error names the problem; the decoder starts over at the next
                // transaction, as the live reader does.
                if e.to_string().trim().is_empty() {
                    return Err("an error without a message".into());
                }
                tally.errors += 1;
                asm.reset();
                asm = asm.with_file(name);
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                return Err(format!("the decoder panicked: {message}"));
            }
        }
    }
}

#[tokio::test]
async fn mutated_binlog_events_never_panic_the_decoder() {
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let budget: usize = std::env::var("FUZZ_INPUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(INPUTS);
    let mut corpora = vec![mariadb_corpus().await];
    corpora.extend(fixture_corpora());
    println!(
        "seed {seed}, {budget} inputs over {} files ({} events)",
        corpora.len(),
        corpora.iter().map(|c| c.events.len()).sum::<usize>()
    );
    // The corpus itself decodes without a panic.
    let mut clean = Tally::default();
    for c in &corpora {
        let events: Vec<&[u8]> = c.events.iter().map(Vec::as_slice).collect();
        decode(&c.name, &events, &mut clean).unwrap_or_else(|e| panic!("{}: {e}", c.name));
    }
    assert!(clean.transactions > 0, "{clean:?}");
    println!("unmutated: {clean:?}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut tally = Tally::default();
    while tally.inputs < budget {
        let c = &corpora[rng.random_range(0..corpora.len())];
        let i = rng.random_range(1..c.events.len());
        let (input, what) = mutate(&c.events[i], c.checksums, &mut rng);
        let from = i.saturating_sub(CONTEXT).max(1);
        let mut events: Vec<&[u8]> = vec![&c.events[0]];
        events.extend(c.events[from..i].iter().map(Vec::as_slice));
        events.push(&input);
        tally.inputs += 1;
        if let Err(e) = decode(&c.name, &events, &mut tally) {
            panic!(
                "input {} ({what} in event {i} of {}, seed {seed}): {e}\nevent: {input:02x?}",
                tally.inputs, c.name
            );
        }
    }
    println!("{tally:?}");
    // The mutations reached the decoder: some were refused, some taken.
    assert!(tally.refused > 0 && tally.taken > 0, "{tally:?}");
}

/// A binlog of runs the reader gathers: one table's single-row changes in transactions of
/// their own, a transaction over two tables, NULLs, text, and a DDL between them.
async fn runs_corpus() -> Corpus {
    let mut sql = String::from(
        "CREATE TABLE fr.a (id INT PRIMARY KEY, v VARCHAR(20), n INT NULL);
         CREATE TABLE fr.b (id INT PRIMARY KEY, w TEXT);
         INSERT INTO fr.a SELECT seq, CONCAT('v', seq), NULLIF(seq % 3, 0) FROM fr.seq_1_to_20;
         INSERT INTO fr.b VALUES (1, 'x'), (2, 'y');",
    );
    for id in 1..=8 {
        sql.push_str(&format!(
            "UPDATE fr.a SET v = 'u{id}', n = IF(n IS NULL, {id}, NULL) WHERE id = {id};"
        ));
    }
    sql.push_str(
        "BEGIN; UPDATE fr.a SET v = 'm' WHERE id = 9; UPDATE fr.b SET w = 'z' WHERE id = 1;
         UPDATE fr.a SET n = 5 WHERE id = 10; COMMIT;
         INSERT INTO fr.a VALUES (21, NULL, NULL); INSERT INTO fr.a VALUES (22, 'w', 1);
         ALTER TABLE fr.a ADD COLUMN z INT;
         UPDATE fr.a SET z = id WHERE id = 1; UPDATE fr.a SET z = id WHERE id < 6;
         DELETE FROM fr.a WHERE id = 7; DELETE FROM fr.a WHERE id = 8;",
    );
    written_corpus("fr", &sql).await
}

/// Each transaction's start and its rows as text, in order.
type TxRows = Vec<(String, Vec<String>)>;

fn batch_rows(batch: &ChangeBatch) -> Vec<String> {
    let image = |b: &Option<arrow::array::RecordBatch>| {
        b.as_ref()
            .map_or_else(|| vec![String::new(); batch.index.len()], row_strings)
    };
    let (before, after) = (image(&batch.before), image(&batch.after));
    assert_eq!(
        (before.len(), after.len()),
        (batch.index.len(), batch.index.len())
    );
    before
        .into_iter()
        .zip(after)
        .zip(&batch.index)
        .map(|((b, a), (e, r))| format!("{} {:?} {e}:{r} {b} | {a}", batch.table.id, batch.op))
        .collect()
}

fn run_rows(run: TransactionRun, out: &mut TxRows) {
    let first = out.len();
    out.extend(run.txs.iter().map(|tx| (tx.start.to_string(), Vec::new())));
    for change in &run.changes {
        let rows = batch_rows(&change.batch);
        assert_eq!(rows.len(), change.tx.len());
        for (row, &t) in rows.into_iter().zip(&change.tx) {
            out[first + t as usize].1.push(row);
        }
    }
}

/// Decodes `events` (the format description first) one transaction at a time, or gathered
/// into runs as the live reader does; then with probability `drop` per event inside a
/// transaction, at most once per transaction, the transaction is dropped and read again from
/// its start, as after a reconnect. Returns the transactions and how many were dropped.
fn transactions(name: &str, events: &[Event], runs: bool, drop: f64, seed: u64) -> (TxRows, usize) {
    let mut asm = offline_assembler(name);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = TxRows::new();
    let (mut i, mut start, mut drops, mut dropped) = (0, 0, 0, None);
    if runs {
        asm.begin_run(usize::MAX);
    }
    while i < events.len() {
        let done = futures::executor::block_on(asm.handle_event(&events[i], None)).unwrap();
        i += 1;
        if let Some(tx) = done {
            if let Some(run) = asm.end_run().unwrap() {
                run_rows(run, &mut out);
            }
            out.push((
                tx.start.to_string(),
                tx.changes.iter().flat_map(batch_rows).collect(),
            ));
            if runs {
                asm.begin_run(usize::MAX);
            }
        }
        if !asm.in_transaction() {
            start = i;
        } else if dropped != Some(start) && rng.random_bool(drop) {
            asm.reset();
            asm = asm.with_file(name);
            (i, dropped) = (start, Some(start));
            drops += 1;
        }
    }
    if let Some(run) = asm.end_run().unwrap() {
        run_rows(run, &mut out);
    }
    (out, drops)
}

#[tokio::test]
async fn runs_hold_the_transactions_one_by_one_through_dropped_transactions() {
    let corpus = runs_corpus().await;
    let mut data = MAGIC.to_vec();
    corpus.events.iter().for_each(|e| data.extend_from_slice(e));
    let events: Vec<Event> = BinlogFile::new(BinlogVersion::Version4, &data[..])
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let (alone, _) = transactions(&corpus.name, &events, false, 0.0, 0);
    let rows: usize = alone.iter().map(|(_, rows)| rows.len()).sum();
    assert!(alone.len() >= 20 && rows >= 40, "{alone:?}");
    let (gathered, _) = transactions(&corpus.name, &events, true, 0.0, 0);
    assert_eq!(gathered, alone, "runs without drops");
    for seed in 0..20 {
        let (again, drops) = transactions(&corpus.name, &events, true, 0.3, seed);
        assert!(drops > 0, "seed {seed}");
        assert_eq!(
            again, alone,
            "runs with {drops} transactions dropped, seed {seed}"
        );
    }
}
