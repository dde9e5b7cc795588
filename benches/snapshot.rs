//! Incremental snapshot throughput and memory, beside the raw `SELECT *` rate of the same table
//! measured in the same run.
//!
//! Run with `cargo bench --bench snapshot` (optionally `-- --rows N --rounds R --chunk-size C
//! --parallelism P --method watermarks|consistent --write-rate W`, default 1,000,000 rows, 5
//! rounds, the default chunk size, chunks in flight and method; `consistent` reads each chunk
//! in MariaDB's consistent snapshot, with no visibility barrier or locking read, to show what
//! they cost; `--write-rate W` has an application's writer update random rows at W commits/s
//! during both reads and prints its commit latencies beside each, which shows how long the
//! snapshot's locks make writers wait; default 0, no writer). It starts
//! its own private MariaDB, fills a 7-column table, and alternates (ABAB) a plain `SELECT *`
//! through mysql_async (rows decoded, then dropped) with cdcfusion's snapshot until the table
//! is queryable (default options but those given above, chunks applied and the table
//! published as a version). It prints each round and the medians: the rate ratio, the CPU time per row of
//! this process and of mysqld, the peak resident memory of the snapshot against the Arrow size
//! of the rows, and the published table's own memory against it.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdcfusion::capture::{Capture, CaptureOptions, SnapshotMode};
use cdcfusion::devserver::{DevServer, DevServerOptions};
use cdcfusion::source::connect::ConnectOptions;
use cdcfusion::source::snapshot::incremental::{SnapshotMethod, SnapshotOptions};
use futures::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::Conn;

fn rate(rows: u64, d: Duration) -> f64 {
    rows as f64 / d.as_secs_f64()
}

/// Resets the kernel's peak-RSS counter of this process.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident memory of this process since the last reset, in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The allocator the `cdcfusion` binary uses, so the figures match it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

extern "C" {
    /// Part of mimalloc's public C API: frees what it can and, forced, gives every unused
    /// page back to the system now.
    fn mi_collect(force: bool);
}

/// Has mimalloc give back the pages it keeps after the previous round, so that a round's peak
/// is measured from the memory in use: a later round reusing kept pages would show no growth
/// (the peak of every round but the first read near zero).
fn release_free_memory() {
    // SAFETY: `mi_collect` only walks the allocator's own state; no pointer is passed.
    unsafe { mi_collect(true) }
}

/// An application's writer: single-row `UPDATE`s of rows chosen at random, paced at a rate, on
/// a thread and runtime of its own so the reads it runs beside do not delay its clock.
struct Writer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Duration>>,
}

impl Writer {
    fn start(url: String, rows: u64, per_second: u64, seed: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut conn = Conn::from_url(url).await.unwrap();
                let interval = Duration::from_secs_f64(1.0 / per_second as f64);
                let (mut latencies, mut next, mut x) = (Vec::new(), Instant::now(), seed | 1);
                while !stopping.load(Ordering::Relaxed) {
                    // xorshift64: rows spread over the table, the same sequence every run.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let started = Instant::now();
                    conn.exec_drop("UPDATE bench.t SET a = a + 1 WHERE id = ?", (x % rows + 1,))
                        .await
                        .unwrap();
                    latencies.push(started.elapsed());
                    next += interval;
                    tokio::time::sleep_until(next.into()).await;
                }
                latencies
            })
        });
        Self { stop, thread }
    }

    /// Stops the writer and adds its commit latencies to `into`.
    fn finish(self, into: &mut Vec<Duration>) {
        self.stop.store(true, Ordering::Relaxed);
        into.extend(self.thread.join().unwrap());
    }
}

/// `p50 / p99 / max` of `latencies`, in µs.
fn latency_summary(latencies: &mut [Duration]) -> String {
    if latencies.is_empty() {
        return "no commits".into();
    }
    latencies.sort();
    let pick = |q: f64| common::percentile(latencies, q);
    format!(
        "p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs ({} commits)",
        pick(0.5).as_secs_f64() * 1e6,
        pick(0.99).as_secs_f64() * 1e6,
        pick(1.0).as_secs_f64() * 1e6,
        latencies.len()
    )
}

#[tokio::main]
async fn main() {
    // Not `allocator::tune()`: peak memory is read from `VmHWM`, which counts pages given back
    // with `MADV_FREE` as resident and their reuse as no growth, so the bench keeps mimalloc's
    // default (pages handed back at once) to measure the snapshot's own peak.
    common::init_logs();
    let total = common::rows_arg(1_000_000);
    let server = DevServer::start(DevServerOptions::default()).expect("private MariaDB");
    let mut conn = Conn::from_url(server.root_url()).await.unwrap();
    common::create_table(&mut conn).await;
    common::insert_rows(&mut conn, 1, total).await;
    conn.query_drop("ANALYZE TABLE bench.t").await.unwrap();
    let chunk_size = common::arg("--chunk-size", SnapshotOptions::default().chunk_size);
    let parallelism = common::arg("--parallelism", SnapshotOptions::default().parallelism);
    let method = match common::arg("--method", String::from("watermarks")).as_str() {
        "watermarks" => SnapshotMethod::Watermarks,
        "consistent" => SnapshotMethod::ConsistentSnapshot,
        other => panic!("--method {other}: expected watermarks or consistent"),
    };
    let write_rate = common::u64_arg("--write-rate", 0);
    println!(
        "snapshot of {total} rows (7 columns), chunks of {chunk_size} rows, {parallelism} in flight, {method:?}, writer at {write_rate} commits/s"
    );
    let writer = |round: u64| {
        (write_rate > 0).then(|| Writer::start(server.root_url(), total, write_rate, round))
    };
    let (mut wrote_raw, mut wrote_ours) = (Vec::new(), Vec::new());
    // How the chunks of every round waited for commits to show (`cdc.chunks.visibility`).
    let mut visibility = std::collections::BTreeMap::new();

    let rounds = common::arg("--rounds", 5);
    let mysqld = server.pid().expect("the server runs");
    let mut ratios = Vec::new();
    let mut rss = Vec::new();
    let mut held = Vec::new();
    let mut cpu_ours = Vec::new();
    let mut cpu_server = Vec::new();
    let mut cpu_server_raw = Vec::new();
    let mut server_id = 9000;
    println!(
        "  mariadb --quick > /dev/null: {:>12.0} rows/s",
        rate(total, common::time_mariadb_client(server.port()))
    );
    for round in 1..=rounds {
        // A: the reference.
        let writing = writer(round);
        let server_before = common::cpu_seconds(mysqld);
        let started = Instant::now();
        let mut result = conn.exec_iter("SELECT * FROM bench.t", ()).await.unwrap();
        let mut stream = result.stream::<mysql_async::Row>().await.unwrap().unwrap();
        let mut n = 0u64;
        while let Some(row) = stream.next().await {
            std::hint::black_box(row.unwrap());
            n += 1;
        }
        drop(stream);
        drop(result);
        assert_eq!(n, total);
        let raw = started.elapsed();
        if let Some(w) = writing {
            w.finish(&mut wrote_raw);
        }
        cpu_server_raw.push((common::cpu_seconds(mysqld) - server_before) / total as f64);

        // B: cdcfusion's snapshot, until the table is queryable.
        let mut options = CaptureOptions::new("bench.t", SnapshotMode::SnapshotOnly);
        server_id += 2;
        options.server_id = server_id;
        options.snapshot.window_server_id = server_id + 1;
        options.snapshot.chunk_size = chunk_size;
        options.snapshot.parallelism = parallelism;
        options.snapshot.method = method;
        release_free_memory();
        reset_peak_rss();
        let base = peak_rss_mib();
        let writing = writer(round);
        let ours_before = common::cpu_seconds(std::process::id());
        let server_before = common::cpu_seconds(mysqld);
        let started = Instant::now();
        let (mut capture, log) = Capture::start_with_progress(
            ConnectOptions::from_url(&server.cdc_url()).unwrap(),
            options,
            Default::default(),
        )
        .await
        .unwrap();
        let published = capture.snapshot_table(0, None).unwrap();
        let ours = started.elapsed();
        for c in capture.progress().report().chunks {
            let how = c.visibility.map_or("not read", |v| v.as_str());
            *visibility.entry(how).or_insert(0u64) += 1;
        }
        if let Some(w) = writing {
            w.finish(&mut wrote_ours);
        }
        let peak = peak_rss_mib() - base;
        cpu_ours.push((common::cpu_seconds(std::process::id()) - ours_before) / total as f64);
        cpu_server.push((common::cpu_seconds(mysqld) - server_before) / total as f64);
        assert_eq!(published.len() as u64, total);
        // Every row's snapshot entry, and the writer's changes caught up to max(HIGH).
        assert!(log.len() as u64 >= total);
        let arrow_mib = published
            .scan_all()
            .unwrap()
            .iter()
            .map(|b| b.get_array_memory_size())
            .sum::<usize>() as f64
            / MIB;
        let table_mib = published.memory_size() as f64 / MIB;
        drop(log);
        drop(published);
        drop(capture);
        let ratio = raw.as_secs_f64() / ours.as_secs_f64();
        println!(
            "  round {round}: raw {:>10.0} rows/s, cdcfusion {:>10.0} rows/s, ratio {ratio:.2}; \
             peak RSS +{peak:.0} MiB, table {table_mib:.0} MiB, Arrow size {arrow_mib:.0} MiB",
            rate(total, raw),
            rate(total, ours),
        );
        ratios.push(ratio);
        rss.push(peak / arrow_mib);
        held.push(table_mib / arrow_mib);
    }
    println!("median of {rounds} rounds (ABAB):");
    println!(
        "  snapshot rate / raw SELECT *:          {:.2}",
        common::median(&mut ratios)
    );
    println!(
        "  peak RSS / Arrow size of the rows:     {:.2}",
        common::median(&mut rss)
    );
    println!(
        "  current-table memory / Arrow size:     {:.2}",
        common::median(&mut held)
    );
    println!(
        "  CPU per row: cdcfusion {:.0} ns, mysqld {:.0} ns (raw SELECT *: mysqld {:.0} ns)",
        common::median(&mut cpu_ours) * 1e9,
        common::median(&mut cpu_server) * 1e9,
        common::median(&mut cpu_server_raw) * 1e9
    );
    let chunks: Vec<String> = visibility.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!("  chunks, all rounds: {}", chunks.join(", "));
    if write_rate > 0 {
        println!(
            "  writer's commits during the raw SELECT *: {}",
            latency_summary(&mut wrote_raw)
        );
        println!(
            "  writer's commits during the snapshot:     {}",
            latency_summary(&mut wrote_ours)
        );
    }
}

const MIB: f64 = 1024.0 * 1024.0;
