//! The incremental snapshot and its hand-off to the binlog, under writes committed at exact
//! moments of a chunk's protocol (the seed experiments), with both the watermark method and
//! MariaDB's consistent snapshot. Every scenario ends by comparing, row by row, the captured
//! state with the source table and the replayed changelog with the source table.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use cdcfusion::capture::{Capture, CaptureOptions, SnapshotMode, TableChange};
use cdcfusion::change::schema::{Flavor, TableId};
use cdcfusion::change::Op;
use cdcfusion::devserver::DevServer;
use cdcfusion::source::connect::{current_position, ConnectOptions};
use cdcfusion::source::snapshot::incremental::{
    ChunkInfo, HookPoint, SnapshotHook, SnapshotMethod,
};
use cdcfusion::source::snapshot::select_batches;
use common::*;
use futures::future::BoxFuture;
use futures::FutureExt;
use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use tokio::sync::Mutex;

const METHODS: [SnapshotMethod; 2] = [
    SnapshotMethod::Watermarks,
    SnapshotMethod::ConsistentSnapshot,
];

/// A hook that runs `f` with a shared root connection at every point.
fn hook<F>(conn: Arc<Mutex<Conn>>, f: F) -> SnapshotHook
where
    F: Fn(HookPoint, ChunkInfo) -> Vec<String> + Send + Sync + 'static,
{
    Arc::new(move |point, chunk| -> BoxFuture<'static, ()> {
        let stmts = f(point, chunk);
        let conn = Arc::clone(&conn);
        async move {
            let mut c = conn.lock().await;
            for s in stmts {
                c.query_drop(&s)
                    .await
                    .unwrap_or_else(|e| panic!("{s}: {e}"));
            }
        }
        .boxed()
    })
}

struct Setup {
    server: &'static DevServer,
    db: String,
    chunk_size: usize,
    parallelism: usize,
    chunk_key: Option<&'static str>,
    method: SnapshotMethod,
    hook: Option<SnapshotHook>,
}

impl Setup {
    fn new(db: &str, method: SnapshotMethod) -> Self {
        Setup {
            server: server(),
            db: db.to_string(),
            chunk_size: 1000,
            parallelism: 1,
            chunk_key: None,
            method,
            hook: None,
        }
    }

    async fn start(&self) -> (Capture, Vec<TableChange>) {
        let mut options = CaptureOptions::new(format!("{}.t", self.db), SnapshotMode::Initial);
        options.server_id = next_server_id();
        options.snapshot.window_server_id = next_server_id();
        options.snapshot.chunk_size = self.chunk_size;
        options.snapshot.parallelism = self.parallelism;
        options.snapshot.method = self.method;
        options.snapshot.hook = self.hook.clone();
        if let Some(k) = self.chunk_key {
            options
                .snapshot
                .chunk_keys
                .insert(TableId::new(&self.db, "t"), k.to_string());
        }
        let connect = ConnectOptions::from_url(&self.server.cdc_url()).unwrap();
        tokio::time::timeout(HANG_GUARD, Capture::start(connect, options))
            .await
            .expect("snapshot hangs")
            .expect("snapshot failed")
    }
}

/// Creates `db.t (id INT PRIMARY KEY, c INT, v VARCHAR(32), KEY(c))` with rows `1..=n`,
/// `c = 10 * id`.
async fn table(conn: &mut Conn, db: &str, n: i32) {
    fresh_db(conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, c INT, v VARCHAR(32), KEY (c))"
    ))
    .await
    .unwrap();
    let rows: Vec<String> = (1..=n)
        .map(|i| format!("({i}, {}, 'v{i}')", i * 10))
        .collect();
    conn.query_drop(format!("INSERT INTO {db}.t VALUES {}", rows.join(",")))
        .await
        .unwrap();
}

/// Rows rendered as text, keyed by their first column (`id`).
type Rows = BTreeMap<String, String>;

fn keyed(batch: &arrow::array::RecordBatch) -> Rows {
    row_strings(batch)
        .into_iter()
        .map(|r| (r.split(' ').next().unwrap().to_string(), r))
        .collect()
}

async fn source_rows(srv: &DevServer, capture: &Capture) -> Rows {
    let mut conn = ConnectOptions::from_url(&srv.cdc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let batches = select_batches(&mut conn, &capture.tables()[0], None, vec![], 4096)
        .await
        .unwrap();
    batches.iter().flat_map(keyed).collect()
}

/// Follows the stream until it has applied everything committed so far.
async fn settle(srv: &DevServer, capture: &mut Capture, events: &mut Vec<TableChange>) {
    let mut conn = root_conn(srv).await;
    let (target, _) = current_position(&mut conn, Flavor::MariaDb).await.unwrap();
    let more = tokio::time::timeout(HANG_GUARD, capture.catch_up_to(&target))
        .await
        .expect("stream hangs")
        .unwrap();
    events.extend(more);
}

fn render(capture: &Capture, row: &arrow::row::OwnedRow) -> (String, String) {
    let batch = capture.state(0).codec().decode([row]).unwrap();
    keyed(&batch).into_iter().next().unwrap()
}

/// Checks the state and the replayed changelog against the source; returns the changelog as
/// `(op, id)` pairs for scenario-specific checks.
async fn verify(
    srv: &DevServer,
    capture: &Capture,
    events: &[TableChange],
) -> Vec<(Op, String, String)> {
    let source = source_rows(srv, capture).await;
    let state = keyed(&capture.state(0).to_batch().unwrap());
    if state != source {
        // Show the history of every differing key before failing.
        let differing: Vec<&String> = state
            .keys()
            .chain(source.keys())
            .filter(|k| state.get(*k) != source.get(*k))
            .collect();
        for e in events {
            let row = e.event.after.as_ref().or(e.event.before.as_ref()).unwrap();
            let (k, r) = render(capture, row);
            if differing.contains(&&k) {
                println!("{:?} {} {r}", e.event.op, e.event.position);
            }
        }
        println!(
            "chunks: {:?}",
            capture
                .progress()
                .report()
                .chunks
                .iter()
                .map(|c| (
                    c.range.clone(),
                    c.low.as_ref().map(ToString::to_string),
                    c.high.as_ref().map(ToString::to_string)
                ))
                .collect::<Vec<_>>()
        );
        panic!("captured state differs from the source table at {differing:?}");
    }
    let mut sorted: Vec<&TableChange> = events.iter().collect();
    sorted.sort_by(|a, b| a.event.position.cmp(&b.event.position));
    let mut replay = Rows::new();
    let mut log = Vec::new();
    let mut positions = HashSet::new();
    for e in sorted {
        let ev = &e.event;
        // Snapshot-derived entries (event index 0) share their chunk's HIGH; binlog-derived
        // ones are unique.
        if ev.position.event_index > 0 {
            assert!(
                positions.insert(ev.position.clone()),
                "duplicate changelog position {}",
                ev.position
            );
        }
        match ev.op {
            Op::Delete => {
                let (k, row) = render(capture, ev.before.as_ref().unwrap());
                replay.remove(&k);
                log.push((ev.op, k, row));
            }
            _ => {
                let (k, row) = render(capture, ev.after.as_ref().unwrap());
                replay.insert(k.clone(), row.clone());
                log.push((ev.op, k, row));
            }
        }
    }
    assert_eq!(
        replay, source,
        "the changelog does not replay to the source table"
    );
    // History folded into a snapshot row is not pretended to exist: no binlog change of a key
    // sits before that key's last snapshot-derived entry (event index 0).
    let mut last_snapshot: BTreeMap<String, cdcfusion::change::position::ChangePosition> =
        BTreeMap::new();
    for e in events.iter().filter(|e| e.event.position.event_index == 0) {
        let (k, _) = render(capture, e.event.after.as_ref().unwrap());
        let p = last_snapshot
            .entry(k)
            .or_insert_with(|| e.event.position.clone());
        if e.event.position > *p {
            *p = e.event.position.clone();
        }
    }
    for e in events.iter().filter(|e| e.event.position.event_index > 0) {
        let row = e.event.after.as_ref().or(e.event.before.as_ref()).unwrap();
        let (k, _) = render(capture, row);
        if let Some(snap) = last_snapshot.get(&k) {
            assert!(
                e.event.position > *snap,
                "{k}: change at {} precedes its snapshot at {snap}",
                e.event.position
            );
        }
    }
    log
}

fn count(log: &[(Op, String, String)], op: Op, key: &str) -> usize {
    log.iter().filter(|(o, k, _)| *o == op && k == key).count()
}

async fn run_both<F, Fut>(f: F)
where
    F: Fn(SnapshotMethod) -> Fut,
    Fut: Future<Output = ()>,
{
    for method in METHODS {
        f(method).await;
    }
}

#[tokio::test]
async fn scenario_1_one_chunk_normalised_to_high() {
    run_both(|method| async move {
        let db = format!("snap1_{}", method_tag(method));
        let mut conn = root_conn(server()).await;
        table(&mut conn, &db, 10).await;
        let writer = Arc::new(Mutex::new(root_conn(server()).await));
        let d = db.clone();
        let mut setup = Setup::new(&db, method);
        setup.hook = Some(hook(writer, move |point, _| match point {
            HookPoint::AfterLow => {
                vec![format!("INSERT INTO {d}.t VALUES (100, 1000, 'after-low')")]
            }
            HookPoint::AfterSelect => vec![
                format!("UPDATE {d}.t SET v = 'u1' WHERE id = 1"),
                format!("UPDATE {d}.t SET v = 'u2' WHERE id = 1"),
                format!("DELETE FROM {d}.t WHERE id = 2"),
                format!("INSERT INTO {d}.t VALUES (101, 1010, 'new'), (102, 1020, 'gone')"),
                format!("DELETE FROM {d}.t WHERE id = 102"),
            ],
            HookPoint::AfterHigh => vec![format!("UPDATE {d}.t SET v = 'post-high' WHERE id = 3")],
            _ => vec![],
        }));
        let (mut capture, mut events) = setup.start().await;
        let report = capture.progress().report();
        assert_eq!(report.chunks_total, 1);
        settle(server(), &mut capture, &mut events).await;
        let log = verify(server(), &capture, &events).await;
        // The post-HIGH update arrives once, as a change.
        assert_eq!(count(&log, Op::Update, "id=3"), 1, "{method:?}");
        if method == SnapshotMethod::Watermarks {
            // Snapshot rows show the state at HIGH: the window is folded, not replayed.
            let reads: Vec<&String> = log
                .iter()
                .filter(|(o, _, _)| *o == Op::Read)
                .map(|(_, _, r)| r)
                .collect();
            assert!(reads.contains(&&"id=1 c=10 v=u2".to_string()), "{reads:?}");
            assert!(reads.contains(&&"id=100 c=1000 v=after-low".to_string()));
            assert!(reads.contains(&&"id=101 c=1010 v=new".to_string()));
            assert!(!reads
                .iter()
                .any(|r| r.starts_with("id=2 ") || r.starts_with("id=102 ")));
            assert_eq!(
                log.iter().filter(|(o, _, _)| *o != Op::Read).count(),
                1,
                "only the post-HIGH change: {log:?}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn scenario_2_two_chunks_with_different_highs_and_the_boundary_key() {
    run_both(|method| async move {
        let db = format!("snap2_{}", method_tag(method));
        let mut conn = root_conn(server()).await;
        table(&mut conn, &db, 20).await;
        let writer = Arc::new(Mutex::new(root_conn(server()).await));
        let d = db.clone();
        let mut setup = Setup::new(&db, method);
        setup.chunk_size = 10;
        setup.hook = Some(hook(writer, move |point, chunk| {
            match (chunk.index, point) {
                (0, HookPoint::AfterSelect) => {
                    vec![format!("UPDATE {d}.t SET v = 'a1' WHERE id IN (5, 15, 11)")]
                }
                (0, HookPoint::AfterHigh) => vec![format!(
                    "UPDATE {d}.t SET v = 'between' WHERE id IN (11, 3, 18)"
                )],
                (1, HookPoint::AfterSelect) => vec![
                    format!("UPDATE {d}.t SET v = 'b1' WHERE id IN (5, 15, 11)"),
                    format!("DELETE FROM {d}.t WHERE id = 10"),
                ],
                _ => vec![],
            }
        }));
        let (mut capture, mut events) = setup.start().await;
        let report = capture.progress().report();
        assert_eq!(report.chunks_total, 2, "{:?}", report.chunks);
        assert_eq!(report.chunks[1].range, "[11, +inf)");
        if method == SnapshotMethod::Watermarks {
            assert_ne!(report.chunks[0].high, report.chunks[1].high);
        }
        settle(server(), &mut capture, &mut events).await;
        let log = verify(server(), &capture, &events).await;
        // The boundary key belongs to exactly one chunk.
        assert_eq!(count(&log, Op::Read, "id=11"), 1);
    })
    .await;
}

#[tokio::test]
async fn scenario_3_transaction_open_before_low_commits_inside_the_window() {
    run_both(|method| async move {
        let db = format!("snap3_{}", method_tag(method));
        let mut conn = root_conn(server()).await;
        table(&mut conn, &db, 10).await;
        let writer = Arc::new(Mutex::new(root_conn(server()).await));
        let d = db.clone();
        let mut setup = Setup::new(&db, method);
        setup.hook = Some(hook(writer, move |point, _| match point {
            HookPoint::BeforeLow => vec![
                "BEGIN".to_string(),
                format!("UPDATE {d}.t SET v = 'tx' WHERE id = 4"),
                format!("INSERT INTO {d}.t VALUES (200, 2000, 'tx')"),
                format!("DELETE FROM {d}.t WHERE id = 5"),
            ],
            HookPoint::AfterSelect => vec!["COMMIT".to_string()],
            _ => vec![],
        }));
        let (mut capture, mut events) = setup.start().await;
        settle(server(), &mut capture, &mut events).await;
        let log = verify(server(), &capture, &events).await;
        assert!(log
            .iter()
            .any(|(_, k, r)| k == "id=200" && r.ends_with("v=tx")));
        assert!(!capture_has(&capture, "id=5"));
    })
    .await;
}

fn capture_has(capture: &Capture, key: &str) -> bool {
    keyed(&capture.state(0).to_batch().unwrap()).contains_key(key)
}

#[tokio::test]
async fn scenario_4_quiet_window_reads_no_backfill() {
    run_both(|method| async move {
        let db = format!("snap4_{}", method_tag(method));
        // LOW and HIGH are server-wide positions: this scenario needs a server nobody else
        // writes to while it runs.
        let quiet = quiet_server();
        let mut conn = root_conn(quiet).await;
        table(&mut conn, &db, 30).await;
        let mut setup = Setup::new(&db, method);
        setup.server = quiet;
        setup.chunk_size = 10;
        let (mut capture, mut events) = setup.start().await;
        let report = capture.progress().report();
        assert_eq!(report.chunks_total, 3);
        for chunk in &report.chunks {
            assert_eq!(
                chunk.low, chunk.high,
                "no writes: LOW == HIGH for {chunk:?}"
            );
        }
        settle(quiet, &mut capture, &mut events).await;
        let log = verify(quiet, &capture, &events).await;
        assert_eq!(log.len(), 30);
        assert!(log.iter().all(|(op, _, _)| *op == Op::Read));
    })
    .await;
}

#[tokio::test]
async fn scenario_5_rows_moving_between_chunks_are_neither_lost_nor_doubled() {
    run_both(|method| async move {
        let db = format!("snap5_{}", method_tag(method));
        let mut conn = root_conn(server()).await;
        table(&mut conn, &db, 20).await;
        let writer = Arc::new(Mutex::new(root_conn(server()).await));
        let d = db.clone();
        let mut setup = Setup::new(&db, method);
        setup.chunk_key = Some("c");
        setup.chunk_size = 10;
        setup.hook = Some(hook(writer, move |point, chunk| {
            match (chunk.index, point) {
                // Chunk A ([-inf, 110)) is done, chunk B not read yet.
                (0, HookPoint::AfterHigh) => vec![
                    // B → A: Flink CDC's lost row.
                    format!("UPDATE {d}.t SET c = 5, v = 'moved-to-a' WHERE id = 15"),
                    // A → B.
                    format!("UPDATE {d}.t SET c = 150, v = 'moved-to-b' WHERE id = 3"),
                ],
                // Inside B's window: B → A again.
                (1, HookPoint::AfterSelect) => vec![format!(
                    "UPDATE {d}.t SET c = 7, v = 'moved-in-window' WHERE id = 16"
                )],
                _ => vec![],
            }
        }));
        let (mut capture, mut events) = setup.start().await;
        let report = capture.progress().report();
        assert_eq!(report.chunks_total, 2, "{:?}", report.chunks);
        settle(server(), &mut capture, &mut events).await;
        verify(server(), &capture, &events).await;
        let state = keyed(&capture.state(0).to_batch().unwrap());
        assert_eq!(state["id=15"], "id=15 c=5 v=moved-to-a");
        assert_eq!(state["id=3"], "id=3 c=150 v=moved-to-b");
        assert_eq!(state["id=16"], "id=16 c=7 v=moved-in-window");
    })
    .await;
}

/// A second private server, used by one scenario at a time.
fn quiet_server() -> &'static DevServer {
    static QUIET: std::sync::OnceLock<DevServer> = std::sync::OnceLock::new();
    QUIET.get_or_init(|| DevServer::start(Default::default()).expect("a second private MariaDB"))
}

fn method_tag(m: SnapshotMethod) -> &'static str {
    match m {
        SnapshotMethod::Watermarks => "wm",
        SnapshotMethod::ConsistentSnapshot => "cs",
        SnapshotMethod::Auto => "auto",
    }
}

/// A random workload: inserts, deletes, updates of the chunk key, of other columns and of the
/// primary key, in transactions of one to four statements.
async fn random_workload(db: String, seed: u64, stop: Arc<std::sync::atomic::AtomicBool>) -> u64 {
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::Ordering;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut conn = root_conn(server()).await;
    let mut next_id = 100_000 + seed as i64 * 10_000;
    let mut txs = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut tx = conn.start_transaction(Default::default()).await.unwrap();
        for _ in 0..rng.random_range(1..=4) {
            let id = rng.random_range(1..=3000i64);
            let sql = match rng.random_range(0..10) {
                0 | 1 => {
                    next_id += 1;
                    format!(
                        "INSERT INTO {db}.t VALUES ({next_id}, {}, 'ins')",
                        rng.random_range(0..30_000)
                    )
                }
                2 => format!("DELETE FROM {db}.t WHERE id = {id}"),
                3..=5 => format!(
                    "UPDATE {db}.t SET c = {}, v = 'moved' WHERE id = {id}",
                    rng.random_range(0..30_000)
                ),
                6 => format!(
                    "UPDATE {db}.t SET v = CONCAT(LEFT(v, 20), '+') WHERE id BETWEEN {id} AND {}",
                    id + 4
                ),
                7 => {
                    next_id += 1;
                    format!("UPDATE {db}.t SET id = {next_id} WHERE id = {id}")
                }
                _ => format!(
                    "UPDATE {db}.t SET c = c + 1 WHERE c BETWEEN {} AND {}",
                    id * 10,
                    id * 10 + 50
                ),
            };
            tx.query_drop(sql).await.unwrap();
        }
        tx.commit().await.unwrap();
        txs += 1;
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    txs
}

#[tokio::test]
async fn scenario_6_random_workload_during_a_parallel_snapshot() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for (run, seed) in [11u64, 22, 33].into_iter().enumerate() {
        for method in METHODS {
            let chunk_key = if run % 2 == 0 { Some("c") } else { None };
            println!("scenario 6: seed {seed}, {method:?}, chunk key {chunk_key:?}");
            let db = format!("snap6_{seed}_{}", method_tag(method));
            let mut conn = root_conn(server()).await;
            fresh_db(&mut conn, &db).await;
            conn.query_drop(format!(
                "CREATE TABLE {db}.t (id INT PRIMARY KEY, c INT, v VARCHAR(32), KEY (c))"
            ))
            .await
            .unwrap();
            let rows: Vec<String> = (1..=3000)
                .map(|i| format!("({i}, {}, 'v{i}')", (i * 7919) % 30_000))
                .collect();
            conn.query_drop(format!("INSERT INTO {db}.t VALUES {}", rows.join(",")))
                .await
                .unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let writer = tokio::spawn(random_workload(db.clone(), seed, Arc::clone(&stop)));
            let mut setup = Setup::new(&db, method);
            setup.chunk_size = 200;
            setup.parallelism = 3;
            setup.chunk_key = chunk_key;
            // Stretch each chunk so that the workload interleaves with every phase.
            setup.hook = Some(Arc::new(|point, _| {
                async move {
                    if matches!(point, HookPoint::AfterLow | HookPoint::AfterSelect) {
                        tokio::time::sleep(std::time::Duration::from_millis(15)).await;
                    }
                }
                .boxed()
            }));
            let (mut capture, mut events) = setup.start().await;
            let report = capture.progress().report();
            assert!(
                report.chunks_total >= 10,
                "{seed}: {} chunks",
                report.chunks_total
            );
            // Keep writing while streaming, then stop and settle.
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            stop.store(true, Ordering::Relaxed);
            let txs = writer.await.unwrap();
            assert!(
                txs > 20,
                "seed {seed}: the workload ran only {txs} transactions"
            );
            settle(server(), &mut capture, &mut events).await;
            verify(server(), &capture, &events).await;
        }
    }
}
