//! Reconciling a captured table with its server: `reconcile()` (chunk checksums on the server)
//! beside the query it replaces (a `FULL OUTER JOIN` of `mysql_snapshot()` with the current
//! table, which brings every row over), alternated in the same run.
//!
//! Run with `cargo bench --bench reconcile` (optionally `-- --rows N`, default 1,000,000, and
//! `--rounds R`, default 3). It starts its own private MariaDB, captures the 7-column table
//! with the default chunk size, and prints the median time of each, their ratio, and the bytes
//! `reconcile` moved beside the Arrow size of the table.

mod common;

use std::time::Instant;

use arrow::compute::concat_batches;
use cdcfusion::capture::{CaptureOptions, SnapshotMode};
use cdcfusion::engine::Engine;

/// The allocator the `cdcfusion` binary uses, so the figures match it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

async fn rows(engine: &Engine, sql: &str) -> Vec<arrow::array::RecordBatch> {
    engine.sql(sql).await.unwrap().collect().await.unwrap()
}

#[tokio::main]
async fn main() {
    cdcfusion::allocator::tune();
    common::init_logs();
    let total = common::rows_arg(1_000_000);
    let rounds = common::u64_arg("--rounds", 3);
    let (server, _conn) = common::server_with_rows(total).await;
    let engine = Engine::new();
    let mut options = CaptureOptions::new("bench.t", SnapshotMode::Initial);
    options.server_id = 9200;
    options.snapshot.window_server_id = 9201;
    engine
        .create_source("src", &server.cdc_url(), options)
        .unwrap();
    engine.wait_ready("src").await.unwrap();
    let table = rows(&engine, "SELECT * FROM src.bench.t").await;
    let arrow_size = concat_batches(&table[0].schema(), &table)
        .unwrap()
        .get_array_memory_size();
    drop(table);

    let joined = "SELECT count(*) FROM mysql_snapshot('src', 'bench.t') s \
                  FULL OUTER JOIN src.bench.t c ON s.id = c.id \
                  WHERE s.id IS NULL OR c.id IS NULL OR s.a <> c.a OR s.b <> c.b OR s.c <> c.c \
                     OR s.d <> c.d OR s.e <> c.e OR s.f IS DISTINCT FROM c.f";
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        let found = rows(&engine, "SELECT * FROM reconcile('src', 'bench.t')").await;
        ours.push(started.elapsed().as_secs_f64());
        assert_eq!(found.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
        let started = Instant::now();
        let found = rows(&engine, joined).await;
        theirs.push(started.elapsed().as_secs_f64());
        let differing = found[0]
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .map(|a| a.value(0));
        assert_eq!(differing, Some(0));
    }
    let report = rows(
        &engine,
        "SELECT chunks, chunks_read, rows_fetched, bytes_moved FROM cdc.reconciliations",
    )
    .await;
    println!("reconcile of {total} rows (7 columns), {rounds} rounds");
    println!(
        "{}",
        arrow::util::pretty::pretty_format_batches(&report).unwrap()
    );
    let bytes = report
        .last()
        .and_then(|b| {
            b.column(3)
                .as_any()
                .downcast_ref::<arrow::array::UInt64Array>()
                .map(|a| a.value(a.len() - 1))
        })
        .unwrap_or(0);
    let (ours, theirs) = (common::median(&mut ours), common::median(&mut theirs));
    println!(
        "  time: reconcile {ours:.2} s, FULL OUTER JOIN of mysql_snapshot {theirs:.2} s, ratio {:.2}",
        theirs / ours
    );
    println!(
        "  bytes moved: {bytes} of the table's {arrow_size} Arrow bytes ({:.4} %)",
        bytes as f64 * 100.0 / arrow_size as f64
    );
}
