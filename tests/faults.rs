//! Real faults between the engine and MariaDB, at random moments of the snapshot, its windows
//! and the stream, while a writer changes keys and moves rows between chunks: a proxy resets
//! connections, stalls them (some past the read timeout) and accepts then drops new ones; the
//! server itself is restarted, and frozen with `SIGSTOP` for longer than the read timeout.
//! Every round ends with the current tables equal to the server row by row, the changelogs
//! equal to what `mariadb-binlog` prints of the binlog, and no position twice.
//!
//! The seed is printed; `CDCFUSION_FAULT_SEED=<n>` replays a run.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cdcfusion::capture::{CaptureOptions, SnapshotMode};
use cdcfusion::change::schema::{Flavor, TableId};
use cdcfusion::devserver::{DevServer, DevServerOptions};
use cdcfusion::engine::Engine;
use cdcfusion::source::connect::current_position;
use cdcfusion::source::snapshot::incremental::{HookPoint, SnapshotHook};
use common::proxy::FaultProxy;
use common::workload::*;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Rounds of one run.
const ROUNDS: u64 = 20;
/// The sources' read timeout: short, so that stalls and pauses past it fit in a round.
const READ_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one round may wait for its source (a hang fails the round with its status).
const ROUND_GUARD: Duration = Duration::from_secs(120);

type Server = Arc<tokio::sync::Mutex<DevServer>>;

/// The faults one round injected.
#[derive(Debug, Default, Clone, Copy)]
struct Injected {
    resets: u64,
    refusals: u64,
    stalls: u64,
    /// Stalls longer than the read timeout (also counted in `stalls`).
    long_stalls: u64,
    restarts: u64,
    pauses: u64,
}

impl Injected {
    fn total(&self) -> u64 {
        self.resets + self.refusals + self.stalls + self.restarts + self.pauses
    }

    fn add(&mut self, o: &Injected) {
        self.resets += o.resets;
        self.refusals += o.refusals;
        self.stalls += o.stalls;
        self.long_stalls += o.long_stalls;
        self.restarts += o.restarts;
        self.pauses += o.pauses;
    }
}

/// A fault of the server itself that round `n` injects once, at a random moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerFault {
    Restart,
    Pause,
}

fn server_fault(n: u64) -> Option<ServerFault> {
    match n % 10 {
        4 => Some(ServerFault::Restart),
        8 => Some(ServerFault::Pause),
        _ => None,
    }
}

/// One network fault, chosen and timed by `rng`.
async fn network_fault(proxy: &FaultProxy, rng: &mut StdRng, injected: &mut Injected) {
    // Stalls from well under to well past the read timeout.
    let stall = Duration::from_millis(rng.random_range(50..2 * READ_TIMEOUT.as_millis() as u64));
    match rng.random_range(0..4) {
        0 => {
            proxy.reset_all();
            injected.resets += 1;
        }
        1 => {
            proxy.refuse_new(true);
            tokio::time::sleep(Duration::from_millis(rng.random_range(50..400))).await;
            proxy.refuse_new(false);
            injected.refusals += 1;
        }
        kind => {
            proxy.stall(true);
            tokio::time::sleep(stall).await;
            if kind == 3 {
                // A connection that hangs, then dies.
                proxy.reset_all();
                injected.resets += 1;
            }
            proxy.stall(false);
            injected.stalls += 1;
            if stall > READ_TIMEOUT {
                injected.long_stalls += 1;
            }
        }
    }
}

async fn inject_server_fault(srv: &Server, fault: ServerFault, rng: &mut StdRng) {
    match fault {
        ServerFault::Restart => {
            let srv = Arc::clone(srv);
            tokio::task::spawn_blocking(move || srv.blocking_lock().restart())
                .await
                .unwrap()
                .expect("the server restarts");
        }
        ServerFault::Pause => {
            let guard = srv.lock().await;
            guard.pause().expect("the server pauses");
            let frozen = READ_TIMEOUT + Duration::from_millis(rng.random_range(200..1500));
            tokio::time::sleep(frozen).await;
            guard.resume().expect("the server goes on");
        }
    }
}

/// One round: returns the faults injected and the capture restarts the source made.
async fn round(srv: &Server, n: u64, seed: u64) -> (Injected, u64) {
    let (port, cdc_url, root_url) = {
        let guard = srv.lock().await;
        (guard.port(), guard.cdc_url(), guard.root_url())
    };
    let db = format!("faults_{n}");
    schema(&mut root_conn(&*srv.lock().await).await, &db, 1000).await;
    let proxy = FaultProxy::start(port).await;
    let direct = format!("127.0.0.1:{port}");
    // Over TCP only: the driver would otherwise switch to the Unix socket, around the proxy.
    let url = cdc_url.replacen(&direct, &format!("127.0.0.1:{}", proxy.port()), 1)
        + "?prefer_socket=false";
    assert_ne!(url, cdc_url, "the URL does not go through the proxy");
    let engine = Engine::new();
    let name = format!("f{n}");
    let mut options = CaptureOptions::new(format!("{db}.*"), SnapshotMode::Initial);
    options.server_id = next_server_id();
    options.snapshot.window_server_id = next_server_id();
    options.snapshot.chunk_size = 32;
    options.snapshot.parallelism = 2;
    options.snapshot.chunk_keys = [(TableId::new(db.as_str(), "t"), "k".to_string())].into();
    options.read_timeout = READ_TIMEOUT;
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
    let writes = tokio::spawn(tolerant_writer(
        root_url,
        db.clone(),
        seed,
        10_000,
        Arc::clone(&stop),
    ));
    let mut rng = StdRng::seed_from_u64(seed);
    let mut injected = Injected::default();
    let window = Duration::from_millis(rng.random_range(800..2500));
    // The server fault comes at a random fault of the round: early ones hit the snapshot,
    // late ones the stream.
    let mut server = server_fault(n).map(|f| (f, rng.random_range(0..4u32)));
    let until = tokio::time::Instant::now() + window;
    let mut i = 0;
    while tokio::time::Instant::now() < until || server.is_some() {
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..300))).await;
        match server {
            Some((fault, at)) if at <= i => {
                inject_server_fault(srv, fault, &mut rng).await;
                match fault {
                    ServerFault::Restart => injected.restarts += 1,
                    ServerFault::Pause => injected.pauses += 1,
                }
                server = None;
            }
            _ => network_fault(&proxy, &mut rng, &mut injected).await,
        }
        i += 1;
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
    let guard = srv.lock().await;
    let (end, _) = current_position(&mut root_conn(&guard).await, Flavor::MariaDb)
        .await
        .unwrap();
    let caught_up =
        tokio::time::timeout(ROUND_GUARD, engine.source(&name).unwrap().wait_for(&end)).await;
    let Ok(caught_up) = caught_up else {
        let sources = query(&engine, "SELECT * FROM cdc.sources").await;
        panic!("round {n}: the source never caught up to {end}: {sources:?}");
    };
    caught_up.unwrap_or_else(|e| panic!("round {n}: the source stopped: {e}"));
    check(&guard, &engine, &name, &db).await;
    let retries = engine.source(&name).unwrap().status().retries;
    (injected, retries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_of_the_network_and_the_server_lose_and_double_nothing() {
    let seed: u64 = std::env::var("CDCFUSION_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("seed {seed} (replay with CDCFUSION_FAULT_SEED={seed})");
    // A server of its own: this test restarts and freezes it.
    let srv: Server = Arc::new(tokio::sync::Mutex::new(
        tokio::task::spawn_blocking(|| DevServer::start(DevServerOptions::default()))
            .await
            .unwrap()
            .expect("a private MariaDB"),
    ));
    let mut total = Injected::default();
    let mut retries = 0;
    for n in 0..ROUNDS {
        let (injected, r) = round(&srv, n, seed.wrapping_add(n)).await;
        println!(
            "round {n}: {} faults injected and survived ({injected:?}), {r} capture restarts",
            injected.total()
        );
        total.add(&injected);
        retries += r;
    }
    println!(
        "{ROUNDS} rounds: {} faults injected and survived ({total:?}), {retries} capture restarts",
        total.total()
    );
    assert!(total.total() >= ROUNDS, "too few faults to prove anything");
    assert!(
        total.restarts >= 1 && total.pauses >= 1,
        "the server was not both restarted and paused"
    );
    assert!(
        total.long_stalls >= 1,
        "no stall outlasted the read timeout"
    );
    // Some faults must have hit a snapshot (the stream's reader reconnects on its own).
    assert!(retries > 0, "no fault restarted a capture");
}
