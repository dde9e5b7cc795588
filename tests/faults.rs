//! Real faults between the engine and MariaDB: a proxy resets connections, stalls them and
//! drops new ones at random moments of the snapshot, its windows and the stream, while a
//! writer changes keys and moves rows between chunks. Every round ends with the current tables
//! equal to the server and the changelogs equal to an independent binlog reader.
//!
//! The seed is printed; `CDCFUSION_FAULT_SEED=<n>` replays a run.
//!
//! Not run by default yet: it found a hang that is not fixed. With
//! `CDCFUSION_FAULT_SEED=18409789330211290667`, round 2 leaves the first two snapshot chunks
//! running for over two minutes with no error and no retry (run it with `--ignored`).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cdcfusion::capture::{CaptureOptions, SnapshotMode};
use cdcfusion::engine::Engine;
use cdcfusion::source::connect::current_position;
use cdcfusion::source::schema::{Flavor, TableId};
use cdcfusion::source::snapshot::incremental::{HookPoint, SnapshotHook};
use common::proxy::FaultProxy;
use common::workload::*;
use common::*;
use rand::{Rng, SeedableRng};

/// Rounds of one run.
const ROUNDS: u64 = 20;
/// How long one round may wait for its source (a hang fails the round with its status).
const ROUND_GUARD: Duration = Duration::from_secs(120);

/// One round: returns the faults injected and the retries the source made.
async fn round(n: u64, seed: u64) -> (u64, u64) {
    let srv = server();
    let db = format!("faults_{n}");
    schema(&mut root_conn(srv).await, &db, 1000).await;
    let proxy = FaultProxy::start(srv.port()).await;
    let direct = format!("127.0.0.1:{}", srv.port());
    // Over TCP only: the driver would otherwise switch to the Unix socket, around the proxy.
    let url = srv
        .cdc_url()
        .replacen(&direct, &format!("127.0.0.1:{}", proxy.port()), 1)
        + "?prefer_socket=false";
    assert_ne!(url, srv.cdc_url(), "the URL does not go through the proxy");
    let engine = Engine::new();
    let name = format!("f{n}");
    let mut options = CaptureOptions::new(format!("{db}.*"), SnapshotMode::Initial);
    options.server_id = next_server_id();
    options.snapshot.window_server_id = next_server_id();
    options.snapshot.chunk_size = 32;
    options.snapshot.parallelism = 2;
    options.snapshot.chunk_keys = [(TableId::new(db.as_str(), "t"), "k".to_string())].into();
    // Each chunk takes a little while after its LOW, so faults land inside chunks, windows
    // and the snapshot's connections, not only in the stream.
    let pause: SnapshotHook = Arc::new(|point, _| {
        Box::pin(async move {
            if point == HookPoint::AfterLow {
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
        })
    });
    options.snapshot.hook = Some(pause);
    engine.create_source(&name, &url, options).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = tokio::spawn(writer(srv, db.clone(), seed, 10_000, Arc::clone(&stop)));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut faults = 0;
    let until = tokio::time::Instant::now() + Duration::from_millis(rng.random_range(800..2500));
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..300))).await;
        match rng.random_range(0..4) {
            0 => proxy.reset_all(),
            1 => {
                proxy.refuse_new(true);
                tokio::time::sleep(Duration::from_millis(rng.random_range(50..400))).await;
                proxy.refuse_new(false);
            }
            2 => {
                proxy.stall(true);
                tokio::time::sleep(Duration::from_millis(rng.random_range(50..400))).await;
                proxy.stall(false);
            }
            _ => {
                // A connection that hangs, then dies.
                proxy.stall(true);
                tokio::time::sleep(Duration::from_millis(rng.random_range(50..400))).await;
                proxy.reset_all();
                proxy.stall(false);
            }
        }
        faults += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writes.await.unwrap();
    if tokio::time::timeout(ROUND_GUARD, engine.wait_ready(&name))
        .await
        .is_err()
    {
        let sources = query(
            &engine,
            "SELECT phase, state, retries, last_error FROM cdc.sources",
        )
        .await;
        let chunks = query(
            &engine,
            "SELECT \"table\", chunk, state FROM cdc.chunks WHERE state <> 'done'",
        )
        .await;
        panic!("round {n}: the source never became ready: {sources:?} {chunks:?}");
    }
    engine
        .wait_ready(&name)
        .await
        .unwrap_or_else(|e| panic!("round {n}: the source stopped: {e}"));
    let (end, _) = current_position(&mut root_conn(srv).await, Flavor::MariaDb)
        .await
        .unwrap();
    tokio::time::timeout(HANG_GUARD * 2, engine.source(&name).unwrap().wait_for(&end))
        .await
        .unwrap_or_else(|_| panic!("round {n}: the source never caught up"))
        .unwrap_or_else(|e| panic!("round {n}: the source stopped: {e}"));
    check(srv, &engine, &name, &db).await;
    let retries = engine.source(&name).unwrap().status().retries;
    (faults, retries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "finds a snapshot hang under network faults that is not fixed yet (see the module docs)"]
async fn network_faults_at_random_moments_lose_and_double_nothing() {
    let seed: u64 = std::env::var("CDCFUSION_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("seed {seed} (replay with CDCFUSION_FAULT_SEED={seed})");
    let (mut faults, mut retries) = (0, 0);
    for n in 0..ROUNDS {
        let (f, r) = round(n, seed.wrapping_add(n)).await;
        println!("round {n}: {f} faults injected, {r} capture restarts");
        faults += f;
        retries += r;
    }
    println!("{ROUNDS} rounds: {faults} faults injected and survived, {retries} capture restarts");
    assert!(faults >= ROUNDS, "too few faults to prove anything");
    // Some faults must have hit the snapshot (the stream's reader reconnects on its own).
    assert!(retries > 0, "no fault hit a snapshot");
}
