//! Querying the current table, beside a DataFusion `MemTable` holding the same rows, measured in
//! the same run; and the current table's memory beside the Arrow size of its rows.
//!
//! Run with `cargo bench --bench views` (optionally `-- --rows N`, default 1,000,000). It starts
//! its own private MariaDB, captures a 7-column table, and prints point-lookup latency (p50,
//! p99) and full-scan throughput for both, with their ratios.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::compute::concat_batches;
use cdcfusion::capture::{CaptureOptions, SnapshotMode};
use cdcfusion::engine::Engine;
use datafusion::catalog::MemTable;
use rand::{Rng, SeedableRng};

/// The allocator the `cdcfusion` binary uses, so the figures match it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Point lookups per side.
const LOOKUPS: usize = 2000;

async fn lookups(
    run: impl Fn(String) -> futures::future::BoxFuture<'static, usize>,
    total: u64,
) -> (Duration, Duration) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut times = Vec::with_capacity(LOOKUPS);
    for _ in 0..LOOKUPS {
        let id = rng.random_range(1..=total);
        let started = Instant::now();
        let n = run(format!("SELECT * FROM {{t}} WHERE id = {id}")).await;
        times.push(started.elapsed());
        assert_eq!(n, 1);
    }
    times.sort();
    (
        common::percentile(&times, 0.5),
        common::percentile(&times, 0.99),
    )
}

#[tokio::main]
async fn main() {
    cdcfusion::allocator::tune();
    let total = common::rows_arg(1_000_000);
    let (server, _conn) = common::server_with_rows(total).await;
    let engine = Arc::new(Engine::new());
    let mut options = CaptureOptions::new("bench.t", SnapshotMode::Initial);
    options.server_id = 9100;
    options.snapshot.window_server_id = 9101;
    engine
        .create_source("src", &server.cdc_url(), options)
        .unwrap();
    engine.wait_ready("src").await.unwrap();

    // The same rows in a MemTable.
    let batches = engine
        .sql("SELECT * FROM src.bench.t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let schema = batches[0].schema();
    let arrow_size = concat_batches(&schema, &batches)
        .unwrap()
        .get_array_memory_size();
    let mem = MemTable::try_new(Arc::clone(&schema), vec![batches]).unwrap();
    engine
        .context()
        .register_table("mem", Arc::new(mem))
        .unwrap();
    let version = engine.source("src").unwrap().published.load_full();
    let state_size = version.tables[0].memory_size();
    println!("current table of {total} rows (7 columns)");
    println!(
        "  memory: state {:.1} MiB, Arrow size of the rows {:.1} MiB, ratio {:.2}",
        state_size as f64 / 1048576.0,
        arrow_size as f64 / 1048576.0,
        state_size as f64 / arrow_size as f64
    );

    let run = |table: &'static str| {
        let engine = Arc::clone(&engine);
        move |sql: String| -> futures::future::BoxFuture<'static, usize> {
            let engine = Arc::clone(&engine);
            let sql = sql.replace("{t}", table);
            Box::pin(async move {
                let batches = engine.sql(&sql).await.unwrap().collect().await.unwrap();
                batches.iter().map(|b| b.num_rows()).sum()
            })
        }
    };
    let (ours50, ours99) = lookups(run("src.bench.t"), total).await;
    let (mem50, mem99) = lookups(run("mem"), total).await;
    println!(
        "  point lookup p50: cdcfusion {ours50:?}, MemTable {mem50:?}, ratio {:.2}",
        mem50.as_secs_f64() / ours50.as_secs_f64()
    );
    println!(
        "  point lookup p99: cdcfusion {ours99:?}, MemTable {mem99:?}, ratio {:.2}",
        mem99.as_secs_f64() / ours99.as_secs_f64()
    );

    let mut best = [Duration::MAX; 2];
    for _ in 0..3 {
        for (i, table) in ["src.bench.t", "mem"].into_iter().enumerate() {
            let started = Instant::now();
            let sql = format!("SELECT count(*), sum(a), max(b) FROM {table}");
            let out = engine.sql(&sql).await.unwrap().collect().await.unwrap();
            assert_eq!(out[0].num_rows(), 1);
            best[i] = best[i].min(started.elapsed());
        }
    }
    let rate = |d: Duration| total as f64 / d.as_secs_f64();
    println!(
        "  full scan: cdcfusion {:.0} rows/s, MemTable {:.0} rows/s, ratio {:.2}",
        rate(best[0]),
        rate(best[1]),
        rate(best[0]) / rate(best[1])
    );
}
