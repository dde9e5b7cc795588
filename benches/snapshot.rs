//! Incremental snapshot throughput and memory, beside the raw `SELECT *` rate of the same table
//! measured in the same run.
//!
//! Run with `cargo bench --bench snapshot` (optionally `-- --rows N`, default 1,000,000). It
//! starts its own private MariaDB, fills a 7-column table, and prints rows/s of:
//! a plain `SELECT *` through mysql_async (rows decoded, then dropped), the `mariadb` client,
//! and cdcfusion's snapshot (`snapshot_only`, both methods) at parallelism 1, 2 and 4, with the
//! peak resident memory of each snapshot run.

mod common;

use std::time::{Duration, Instant};

use cdcfusion::capture::{Capture, CaptureOptions, SnapshotMode};
use cdcfusion::devserver::{DevServer, DevServerOptions};
use cdcfusion::source::connect::ConnectOptions;
use cdcfusion::source::snapshot::incremental::SnapshotMethod;
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

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let total = common::rows_arg(1_000_000);
    let server = DevServer::start(DevServerOptions::default()).expect("private MariaDB");
    let mut conn = Conn::from_url(server.root_url()).await.unwrap();
    common::create_table(&mut conn).await;
    common::insert_rows(&mut conn, 1, total).await;
    conn.query_drop("ANALYZE TABLE bench.t").await.unwrap();
    println!("snapshot of {total} rows (7 columns)");

    // References: a raw SELECT * through mysql_async, and the mariadb client.
    let mut best_raw = Duration::MAX;
    let mut best_client = Duration::MAX;
    for _ in 0..2 {
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
        best_raw = best_raw.min(started.elapsed());
        best_client = best_client.min(common::time_mariadb_client(server.port()));
    }
    let raw = rate(total, best_raw);
    println!("  raw SELECT * via mysql_async:          {raw:>12.0} rows/s");
    println!(
        "  mariadb --quick > /dev/null:           {:>12.0} rows/s",
        rate(total, best_client)
    );

    let mut server_id = 9000;
    // One untimed run first, so that no configuration pays for the first page faults.
    {
        let mut options = CaptureOptions::new("bench.t", SnapshotMode::SnapshotOnly);
        options.server_id = 8990;
        options.snapshot.window_server_id = 8991;
        let warm = Capture::start_with_progress(
            ConnectOptions::from_url(&server.cdc_url()).unwrap(),
            options,
            Default::default(),
        )
        .await
        .unwrap();
        drop(warm);
    }
    for method in [
        SnapshotMethod::ConsistentSnapshot,
        SnapshotMethod::Watermarks,
    ] {
        for parallelism in [1, 2, 4] {
            let mut options = CaptureOptions::new("bench.t", SnapshotMode::SnapshotOnly);
            server_id += 2;
            options.server_id = server_id;
            options.snapshot.window_server_id = server_id + 1;
            options.snapshot.parallelism = parallelism;
            options.snapshot.method = method;
            reset_peak_rss();
            let base = peak_rss_mib();
            let started = Instant::now();
            let (mut capture, log) = Capture::start_with_progress(
                ConnectOptions::from_url(&server.cdc_url()).unwrap(),
                options,
                Default::default(),
            )
            .await
            .unwrap();
            // Queryable: the table published as a version.
            let published = capture.snapshot_table(0, None).unwrap();
            let elapsed = started.elapsed();
            assert_eq!(published.len() as u64, total);
            let peak = peak_rss_mib();
            assert_eq!(capture.state(0).len() as u64, total);
            assert_eq!(log.len() as u64, total);
            let chunks = capture.progress().report().chunks_total;
            drop(log);
            drop(published);
            drop(capture);
            let r = rate(total, elapsed);
            println!(
                "  cdcfusion {method:?} parallelism {parallelism} ({chunks} chunks): {r:>12.0} rows/s  ratio {:.2}  peak RSS {:.0} MiB (from {:.0})",
                r / raw,
                peak,
                base
            );
        }
    }
}
