//! Streaming apply and freshness, each beside what it can be judged by, measured in one run on
//! the bench's own private MariaDB.
//!
//! * Streaming apply: N single-row `UPDATE` transactions on the 7-column table are written once
//!   (default 1,000,000; autocommit, so each statement is one transaction), between binlog
//!   positions P0 and P1. The reference (A) reads the binlog from P0 to P1 and verifies every
//!   event's CRC32, without decoding rows: the floor of any reader. Ours (B) is an in-memory
//!   engine with a `stream_only` source starting at P0, timed from `CREATE SOURCE` until its
//!   published position reaches P1, so every change is decoded, applied to the current table,
//!   appended to the changelog and published. Each round runs A then B (ABAB); the figures are
//!   changes/s per round, CPU per change of this process, and the median of the per-round
//!   ratios B/A. A warm-up round before them is printed, not counted. Each round also prints
//!   the changes per published version (how many transactions the engine groups). A third
//!   contender (C) is B with a secondary index on `a`, the column every update changes (the
//!   server's index, added before C starts and dropped after, past P1): its rate and C/B show
//!   what keeping an index up to date costs the apply.
//! * Freshness: an engine streams live while writers commit single-row updates paced to a total
//!   rate (default 10,000/s for 10 s). Writer `w` owns row `w + 1` and sets its `a` to its
//!   commit's sequence number; a reader wakes on every published version and looks those rows
//!   up by key. A commit's freshness is the time from its `UPDATE` returning to the first
//!   version the reader saw it in (zero when the reader saw it before the writer's client did).
//!   It prints p50/p99/max and the write rate reached. The writers run on a runtime of their
//!   own, the engine and the reader on the bench's.
//!
//! Run with `cargo bench --bench stream` (optionally `-- --changes N --rows R --rounds K --rate
//! C --seconds S --writers W`; `--seconds 0` leaves out freshness). It starts its own private
//! MariaDB; nothing is asserted beyond sanity (every change arrived).

mod common;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::AsArray;
use arrow::datatypes::Int32Type;
use cdcfusion::change::position::BinlogCoord;
use cdcfusion::change::schema::Flavor;
use cdcfusion::devserver::{DevServer, DevServerOptions};
use cdcfusion::engine::{Engine, RunningSource};
use cdcfusion::provider::current::lookup_key;
use cdcfusion::source::connect::current_position;
use datafusion::scalar::ScalarValue;
use futures::StreamExt;
use mysql_async::binlog::events::EventData;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStreamRequest, Conn};

/// The allocator the `cdcfusion` binary uses, so the figures match it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Update statements sent in one multi-statement query when writing the apply workload; each
/// is still its own transaction (autocommit).
const STATEMENTS_PER_QUERY: u64 = 1000;
/// Server id of the reference's binlog dump; the engines take ids above [`ENGINE_SERVER_ID`].
const RAW_SERVER_ID: u32 = 7777;
/// First server id of the engines' sources (one per source, so no dump replaces another).
const ENGINE_SERVER_ID: u32 = 9500;
/// Column `a` of `bench.t` (an `INT`): what the freshness writers set to their sequence number.
const SEQ_COLUMN: usize = 1;

#[tokio::main]
async fn main() {
    cdcfusion::allocator::tune();
    common::init_logs();
    let changes: u64 = common::arg("--changes", 1_000_000);
    let rows: u64 = common::rows_arg(100_000);
    let rounds: usize = common::arg("--rounds", 5);
    let per_second: u64 = common::arg("--rate", 10_000);
    let seconds: u64 = common::arg("--seconds", 10);
    let writers: u64 = common::arg("--writers", 4).clamp(1, rows);

    let server = DevServer::start(DevServerOptions::default()).expect("private MariaDB");
    let mut conn = Conn::from_url(server.root_url()).await.unwrap();
    common::create_table(&mut conn).await;
    common::insert_rows(&mut conn, 1, rows).await;

    let from = position(&mut conn).await;
    let started = Instant::now();
    write_updates(&mut conn, rows, changes).await;
    let written = started.elapsed();
    let to = position(&mut conn).await;
    println!(
        "streaming apply: {changes} single-row UPDATE transactions (7 columns, ids cycling over \
         {rows} rows) from {from} to {to}, written in {written:.2?} ({:.0}/s)",
        rate(changes, written)
    );
    apply(&server, &from, &to, changes, rounds).await;

    if seconds == 0 {
        return;
    }
    println!(
        "freshness: {writers} writers, {} single-row UPDATE transactions paced at {per_second}/s",
        per_second * seconds
    );
    freshness(&server, &mut conn, per_second, seconds, writers).await;
}

fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

async fn position(conn: &mut Conn) -> BinlogCoord {
    current_position(conn, Flavor::MariaDb).await.unwrap().0
}

/// `changes` single-row updates (one transaction each), ids cycling over `1..=rows`.
async fn write_updates(conn: &mut Conn, rows: u64, changes: u64) {
    let mut id = 0;
    let mut done = 0;
    while done < changes {
        let n = STATEMENTS_PER_QUERY.min(changes - done);
        let mut sql = String::with_capacity(n as usize * 64);
        for _ in 0..n {
            id = id % rows + 1;
            write!(
                sql,
                "UPDATE bench.t SET a = a + 1, e = e + 1 WHERE id = {id};"
            )
            .unwrap();
        }
        conn.query_drop(sql).await.unwrap();
        done += n;
    }
}

/// The streaming-apply comparison: `rounds` of A (raw read) then B (engine).
async fn apply(
    server: &DevServer,
    from: &BinlogCoord,
    to: &BinlogCoord,
    changes: u64,
    rounds: usize,
) {
    let me = std::process::id();
    let (mut raw_rates, mut our_rates, mut ratios) = (vec![], vec![], vec![]);
    let (mut indexed_rates, mut indexed_ratios) = (vec![], vec![]);
    let mut conn = Conn::from_url(server.root_url()).await.unwrap();
    let (mut raw_cpu, mut our_cpu) = (vec![], vec![]);
    // Round 0 warms up both sides (the server's binlog cache, this process's allocator and
    // threads) and is printed but not counted: its ratio is typically half the later ones'.
    for round in 0..=rounds {
        let cpu = common::cpu_seconds(me);
        let (events, raw) = raw_read(&server.cdc_url(), from, to).await;
        let raw_cpu_per_change = (common::cpu_seconds(me) - cpu) / changes as f64;
        assert_eq!(
            events, changes,
            "the raw read saw one rows event per change"
        );

        let cpu = common::cpu_seconds(me);
        let server_id = ENGINE_SERVER_ID + round as u32;
        let (applied, ours, versions, indexes) = engine_apply(server, server_id, from, to).await;
        assert_eq!(indexes, 0, "the table has no secondary index yet");
        let our_cpu_per_change = (common::cpu_seconds(me) - cpu) / changes as f64;
        assert_eq!(applied, changes, "the engine published every change");

        // The same with a secondary index on `a`, which every update changes: the source
        // mirrors the server's index as it starts, and the DDL is past `to`, so not read.
        conn.query_drop("ALTER TABLE bench.t ADD KEY by_a (a)")
            .await
            .unwrap();
        let server_id = ENGINE_SERVER_ID + 100 + round as u32;
        let (applied, indexed, _, indexes) = engine_apply(server, server_id, from, to).await;
        assert_eq!(indexes, 1, "the source mirrors the server's index");
        assert_eq!(
            applied, changes,
            "the indexed engine published every change"
        );
        conn.query_drop("ALTER TABLE bench.t DROP KEY by_a")
            .await
            .unwrap();

        let (a, b) = (rate(changes, raw), rate(changes, ours));
        let c = rate(changes, indexed);
        let label = if round == 0 { "warm-up" } else { "round" };
        println!(
            "  {label} {round}: raw read (CRC32) {a:>10.0} changes/s, cdcfusion applied and \
             published {b:>10.0} changes/s, ratio {:.3} ({:.1} changes per version); with an \
             index on the changed column {c:>10.0} changes/s ({:.3} of without)",
            b / a,
            changes as f64 / versions.max(1) as f64,
            c / b
        );
        if round == 0 {
            continue;
        }
        indexed_rates.push(c);
        indexed_ratios.push(c / b);
        raw_cpu.push(raw_cpu_per_change);
        our_cpu.push(our_cpu_per_change);
        raw_rates.push(a);
        our_rates.push(b);
        ratios.push(b / a);
    }
    println!("  median of {rounds} rounds (ABAB):");
    println!(
        "    raw read, CRC32 verified:   {:>10.0} changes/s, {:.2} µs CPU per change",
        common::median(&mut raw_rates),
        common::median(&mut raw_cpu) * 1e6
    );
    println!(
        "    cdcfusion, published:       {:>10.0} changes/s, {:.2} µs CPU per change",
        common::median(&mut our_rates),
        common::median(&mut our_cpu) * 1e6
    );
    println!(
        "    ratio cdcfusion / raw:      {:>10.3}",
        common::median(&mut ratios)
    );
    println!(
        "    with an index on `a`:       {:>10.0} changes/s, {:.3} of without",
        common::median(&mut indexed_rates),
        common::median(&mut indexed_ratios)
    );
}

/// Reads the binlog from `from` to `to` and verifies every event's CRC32; returns the rows
/// events seen (one per single-row transaction) and the time from connecting to `to`.
async fn raw_read(url: &str, from: &BinlogCoord, to: &BinlogCoord) -> (u64, Duration) {
    let started = Instant::now();
    let mut conn = Conn::from_url(url).await.unwrap();
    conn.query_drop("SET @mariadb_slave_capability = 4")
        .await
        .unwrap();
    let file = from.file.as_bytes().to_vec();
    let mut stream = conn
        .get_binlog_stream(
            BinlogStreamRequest::new(RAW_SERVER_ID)
                .with_filename(&file)
                .with_pos(from.offset),
        )
        .await
        .unwrap();
    let mut rows_events = 0u64;
    let mut current_file = from.file.to_string();
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        let log_pos = event.header().log_pos() as u64;
        if event.footer().get_checksum_enabled() {
            if let (Some(expected), Ok(Some(alg))) =
                (event.checksum(), event.footer().get_checksum_alg())
            {
                assert_eq!(u32::from_le_bytes(expected), event.calc_checksum(alg));
            }
        }
        match event.read_data() {
            Ok(Some(EventData::RotateEvent(r))) => {
                let name = r.name().to_string();
                // The first artificial rotate carries the checksum after the name.
                current_file = name.get(..file.len()).unwrap_or(&name).to_string();
            }
            Ok(Some(EventData::RowsEvent(_))) => rows_events += 1,
            _ => {}
        }
        if current_file == *to.file && log_pos >= to.offset {
            break;
        }
    }
    (rows_events, started.elapsed())
}

fn create_source(server: &DevServer, name: &str, server_id: u32, from: &BinlogCoord) -> String {
    format!(
        "CREATE SOURCE {name} FROM MYSQL '{}' WITH (tables = 'bench.t', server_id = {server_id}, \
         snapshot_mode = 'stream_only', start_position = '{from}')",
        server.cdc_url()
    )
}

/// An in-memory engine streaming from `from`, timed from `CREATE SOURCE` until its published
/// position reaches `to`; returns the changelog rows published, the time and the versions
/// published (transactions arrive faster than one version each, so they are grouped).
async fn engine_apply(
    server: &DevServer,
    server_id: u32,
    from: &BinlogCoord,
    to: &BinlogCoord,
) -> (u64, Duration, u64, usize) {
    let engine = Engine::new();
    let started = Instant::now();
    engine
        .sql(&create_source(server, "apply", server_id, from))
        .await
        .unwrap();
    let source = engine.source("apply").unwrap();
    source.wait_for(to).await.unwrap();
    let elapsed = started.elapsed();
    let published = source.published.load_full();
    let rows = published
        .changelogs
        .iter()
        .map(|c| c.num_rows() as u64)
        .sum();
    let versions = *source.versions.borrow();
    let indexes = published
        .tables
        .iter()
        .map(|t| t.schema().indexes.len())
        .sum();
    drop(source);
    engine.drop_source("apply").unwrap();
    (rows, elapsed, versions, indexes)
}

/// The freshness measurement: see the module docs.
async fn freshness(
    server: &DevServer,
    conn: &mut Conn,
    per_second: u64,
    seconds: u64,
    writers: u64,
) {
    // Row `w + 1` holds writer `w`'s sequence number, 0 before its first commit.
    conn.query_drop(format!("UPDATE bench.t SET a = 0 WHERE id <= {writers}"))
        .await
        .unwrap();
    let from = position(conn).await;
    let engine = Engine::new();
    engine
        .sql(&create_source(server, "live", ENGINE_SERVER_ID, &from))
        .await
        .unwrap();
    engine.wait_ready("live").await.unwrap();
    let source = engine.source("live").unwrap();
    let per_writer = per_second * seconds / writers;
    let reader = tokio::spawn(read_versions(Arc::clone(&source), writers, per_writer));

    let url = server.root_url();
    let interval = Duration::from_secs_f64(writers as f64 / per_second as f64);
    // The writers on a runtime of their own, as they would be in their own process.
    let commits = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(write_paced(url, writers, per_writer, interval))
    })
    .join()
    .unwrap();
    let (started, commits) = commits;
    let last = commits.iter().filter_map(|c| c.last()).max().copied();
    let wrote = last.map_or(Duration::ZERO, |l| l - started);
    let end = position(conn).await;
    source.wait_for(&end).await.unwrap();
    let seen = reader.await.unwrap();
    let transactions = source.status().transactions;
    drop(source);
    engine.drop_source("live").unwrap();

    let mut latencies = Vec::with_capacity((per_writer * writers) as usize);
    let mut early = 0u64;
    for (w, commits) in commits.iter().enumerate() {
        // Observations are in time order and each writer's sequence numbers only grow.
        let mut at = 0;
        for (i, committed) in commits.iter().enumerate() {
            let seq = i as u32 + 1;
            while seen[at].1[w] < seq {
                at += 1;
                assert!(at < seen.len(), "the reader saw every commit");
            }
            let visible = seen[at].0;
            early += (visible < *committed) as u64;
            latencies.push(visible.saturating_duration_since(*committed));
        }
    }
    latencies.sort();
    let pick = |q: f64| common::percentile(&latencies, q);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "  write rate reached: {:.0} commits/s ({} commits in {wrote:.2?})",
        rate(latencies.len() as u64, wrote),
        latencies.len()
    );
    println!(
        "  commit returned -> visible in a published version: p50 {:.2} ms, p99 {:.2} ms, max \
         {:.2} ms",
        ms(pick(0.5)),
        ms(pick(0.99)),
        ms(pick(1.0))
    );
    println!(
        "  {transactions} versions published, {} seen by the reader; {early} commits visible \
         before their client saw them return",
        seen.len()
    );
}

/// `writers` connections each committing `per_writer` updates of its own row, writer `w`'s
/// `k`-th due at `k * interval + w * interval / writers` after the start (so the total is
/// paced evenly); a writer behind schedule sends at once. Returns the start and each
/// writer's commit-return times, in sequence order.
async fn write_paced(
    url: String,
    writers: u64,
    per_writer: u64,
    interval: Duration,
) -> (Instant, Vec<Vec<Instant>>) {
    let mut conns = Vec::new();
    for _ in 0..writers {
        conns.push(Conn::from_url(url.as_str()).await.unwrap());
    }
    let started = Instant::now();
    let tasks = conns
        .into_iter()
        .enumerate()
        .map(|(w, mut conn)| async move {
            let offset = interval.mul_f64(w as f64 / writers as f64);
            let mut done = Vec::with_capacity(per_writer as usize);
            for seq in 1..=per_writer {
                let due = started + offset + interval * (seq - 1) as u32;
                tokio::time::sleep_until(due.into()).await;
                conn.query_drop(format!("UPDATE bench.t SET a = {seq} WHERE id = {}", w + 1))
                    .await
                    .unwrap();
                done.push(Instant::now());
            }
            done
        });
    (started, futures::future::join_all(tasks).await)
}

/// Wakes on every published version of `source` and reads each writer's row by key; returns
/// when every writer's last commit is visible, with the observations (time, sequence number
/// of each writer) in time order.
async fn read_versions(
    source: Arc<RunningSource>,
    writers: u64,
    last: u64,
) -> Vec<(Instant, Vec<u32>)> {
    let mut versions = source.versions.clone();
    let keys: Vec<ScalarValue> = (1..=writers as i64)
        .map(|id| ScalarValue::Int64(Some(id)))
        .collect();
    let mut seen = Vec::new();
    loop {
        let version = source.published.load_full();
        let table = &version.tables[0];
        let mut seqs = Vec::with_capacity(writers as usize);
        for key in &keys {
            let row = lookup_key(table, std::slice::from_ref(key)).unwrap();
            let a = row.column(SEQ_COLUMN).as_primitive::<Int32Type>();
            seqs.push(if a.is_empty() { 0 } else { a.value(0) as u32 });
        }
        let done = seqs.iter().all(|s| u64::from(*s) >= last);
        seen.push((Instant::now(), seqs));
        if done || versions.changed().await.is_err() {
            return seen;
        }
    }
}
