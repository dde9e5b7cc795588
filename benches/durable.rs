//! Durability costs, measured in one run on one private MariaDB:
//!
//! * restart to caught up with a large state (default 1,000,000 rows): open the state
//!   directory, load the newest checkpoint, read the binlog written while the engine was down,
//!   beside the reference of snapshotting the table from scratch (what a restart without state
//!   costs);
//! * the checkpoint written on a clean stop with that state;
//! * ingest throughput (row changes/s streamed from the binlog) of an in-memory engine and of a
//!   durable one checkpointing every [`CHECKPOINT_INTERVAL`], over the same binlog.
//!
//! Run with `cargo bench --bench durable` (optionally `-- --rows N --changes M`).

mod common;

use std::time::{Duration, Instant};

use cdcfusion::change::position::BinlogCoord;
use cdcfusion::change::schema::Flavor;
use cdcfusion::devserver::DevServer;
use cdcfusion::durable::DurableOptions;
use cdcfusion::engine::{Engine, EngineOptions};
use cdcfusion::source::connect::current_position;
use mysql_async::prelude::Queryable;

/// The allocator the `cdcfusion` binary uses, so the figures match it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Checkpoint interval of the durable side of the ingest comparison.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(200);
/// Rows each update transaction of the ingest workload changes.
const ROWS_PER_TX: u64 = 10;

/// `--changes N` from the command line, else `default`.
fn changes_arg(default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--changes")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn end(conn: &mut mysql_async::Conn) -> BinlogCoord {
    current_position(conn, Flavor::MariaDb).await.unwrap().0
}

async fn caught_up(engine: &Engine, source: &str, target: &BinlogCoord) {
    engine
        .source(source)
        .unwrap()
        .wait_for(target)
        .await
        .unwrap();
}

/// `changes` row updates in transactions of [`ROWS_PER_TX`] rows, ids cycling over `rows`.
async fn updates(conn: &mut mysql_async::Conn, rows: u64, changes: u64, round: u64) {
    let mut first = 1;
    for _ in 0..changes / ROWS_PER_TX {
        let last = first + ROWS_PER_TX - 1;
        conn.query_drop(format!(
            "UPDATE bench.t SET a = a + {round}, e = e + 1 WHERE id BETWEEN {first} AND {last}"
        ))
        .await
        .unwrap();
        first = if last + ROWS_PER_TX > rows {
            1
        } else {
            last + 1
        };
    }
}

fn durable(interval: Duration) -> EngineOptions {
    EngineOptions {
        durable: DurableOptions {
            checkpoint_interval: interval,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn create(server: &DevServer, name: &str, server_id: u32, with: &str) -> String {
    format!(
        "CREATE SOURCE {name} FROM MYSQL '{}' WITH (tables = 'bench.t', server_id = {server_id}{with})",
        server.cdc_url()
    )
}

#[tokio::main]
async fn main() {
    cdcfusion::allocator::tune();
    let total = common::rows_arg(1_000_000);
    let changes = changes_arg(200_000);
    let (server, mut conn) = common::server_with_rows(total).await;
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("state");
    let location = location.to_str().unwrap();

    // Reference: the initial snapshot (what a restart without state would cost).
    let started = Instant::now();
    let engine = Engine::open(location, durable(Duration::from_secs(3600)))
        .await
        .unwrap();
    engine.sql(&create(&server, "src", 9300, "")).await.unwrap();
    engine.wait_ready("src").await.unwrap();
    let snapshot = started.elapsed();
    let started = Instant::now();
    engine.shutdown().await.unwrap();
    let checkpoint = started.elapsed();
    drop(engine);
    let bytes: u64 = walk(dir.path());
    // Changes made while the engine is down, read from the binlog on restart.
    let down = changes / 10;
    updates(&mut conn, total, down, 1).await;
    let target = end(&mut conn).await;
    let started = Instant::now();
    let engine = Engine::open(location, durable(Duration::from_secs(3600)))
        .await
        .unwrap();
    engine.wait_ready("src").await.unwrap();
    let loaded = started.elapsed();
    caught_up(&engine, "src", &target).await;
    let restart = started.elapsed();
    drop(engine);
    println!(
        "state of {total} rows (7 columns), {:.1} MiB on disk",
        bytes as f64 / 1048576.0
    );
    println!("  initial snapshot to ready (reference): {snapshot:.2?}");
    println!("  checkpoint on a clean stop: {checkpoint:.2?}");
    println!(
        "  restart to caught up: {restart:.2?} (checkpoint loaded in {loaded:.2?}, then {down} row changes from the binlog); {:.1}x faster than the snapshot",
        snapshot.as_secs_f64() / restart.as_secs_f64()
    );

    // Ingest over the same binlog, in memory and durable.
    let from = end(&mut conn).await;
    updates(&mut conn, total, changes, 2).await;
    let to = end(&mut conn).await;
    let stream = format!(", snapshot_mode = 'stream_only', start_position = '{from}'");
    let memory = Engine::new();
    let started = Instant::now();
    memory
        .sql(&create(&server, "mem", 9310, &stream))
        .await
        .unwrap();
    caught_up(&memory, "mem", &to).await;
    let in_memory = started.elapsed();
    drop(memory);
    let dir2 = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir2.path().to_str().unwrap(), durable(CHECKPOINT_INTERVAL))
        .await
        .unwrap();
    let started = Instant::now();
    engine
        .sql(&create(&server, "dur", 9320, &stream))
        .await
        .unwrap();
    caught_up(&engine, "dur", &to).await;
    let with_checkpoints = started.elapsed();
    let checkpoints = engine.source("dur").unwrap().status().durable_position;
    let rate = |d: Duration| changes as f64 / d.as_secs_f64();
    println!("ingest of {changes} row changes ({ROWS_PER_TX} rows per transaction)");
    println!(
        "  in memory: {:.0} changes/s; durable, checkpoint every {CHECKPOINT_INTERVAL:?}: {:.0} changes/s; ratio {:.2} (durable position reached: {})",
        rate(in_memory),
        rate(with_checkpoints),
        rate(with_checkpoints) / rate(in_memory),
        checkpoints.map_or("none".into(), |p| p.to_string())
    );
}

/// Bytes of every file below `dir`.
fn walk(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| {
                    let p = e.path();
                    if p.is_dir() {
                        walk(&p)
                    } else {
                        e.metadata().map_or(0, |m| m.len())
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}
