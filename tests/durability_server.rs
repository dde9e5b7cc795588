//! Durability against trouble on the server side, each test on a private server of its own
//! (they purge binlogs, restart the server, change rows behind the binlog's back): a purged
//! binlog stops a resumed source with a definite error until `ALTER SOURCE ... RESNAPSHOT`
//! repairs it, server restarts under load are retried without losing or doubling a change,
//! and `RESNAPSHOT TABLE` repairs one table under load without touching the others.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cdcfusion::change::position::BinlogCoord;
use cdcfusion::change::schema::Flavor;
use cdcfusion::devserver::{DevServer, DevServerOptions};
use cdcfusion::durable::DurableOptions;
use cdcfusion::engine::{Engine, EngineOptions};
use cdcfusion::source::connect::current_position;
use common::durable::*;
use common::*;
use mysql_async::prelude::Queryable;
use rand::{Rng, SeedableRng};

fn options() -> EngineOptions {
    EngineOptions {
        durable: DurableOptions {
            checkpoint_interval: Duration::from_millis(50),
            state_snapshot_min_changes: 50,
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn end_position(srv: &DevServer) -> BinlogCoord {
    current_position(&mut root_conn(srv).await, Flavor::MariaDb)
        .await
        .unwrap()
        .0
}

async fn own_server() -> DevServer {
    tokio::task::spawn_blocking(|| DevServer::start(DevServerOptions::default()))
        .await
        .unwrap()
        .expect("a private MariaDB")
}

async fn setup(srv: &DevServer, db: &str) {
    let mut conn = root_conn(srv).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(32), n INT);
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq FROM {db}.seq_1_to_200;"
    ))
    .await
    .unwrap();
}

fn create(srv: &DevServer, source: &str, db: &str) -> String {
    format!(
        "CREATE SOURCE {source} FROM MYSQL '{}' WITH (tables = '{db}.*', chunk_size = 50, server_id = 77)",
        srv.cdc_url()
    )
}

/// An engine at `location` with source `source` over `db` (see [`create`]), ready and caught
/// up after an update of rows 1 to 10; with the root connection that made it.
async fn streaming(
    srv: &DevServer,
    location: &str,
    source: &str,
    db: &str,
) -> (Engine, mysql_async::Conn) {
    let engine = Engine::open(location, options()).await.unwrap();
    engine.sql(&create(srv, source, db)).await.unwrap();
    engine.wait_ready(source).await.unwrap();
    let mut conn = root_conn(srv).await;
    conn.query_drop(format!("UPDATE {db}.t SET n = n + 1 WHERE id <= 10"))
        .await
        .unwrap();
    caught_up(srv, &engine, source).await;
    (engine, conn)
}

/// `engine` shut down and opened again from `location`, with `source` ready and caught up.
async fn reopened(srv: &DevServer, engine: Engine, location: &str, source: &str) -> Engine {
    engine.shutdown().await.unwrap();
    drop(engine);
    let engine = Engine::open(location, options()).await.unwrap();
    engine.wait_ready(source).await.unwrap();
    caught_up(srv, &engine, source).await;
    engine
}

async fn caught_up(srv: &DevServer, engine: &Engine, source: &str) {
    let end = end_position(srv).await;
    tokio::time::timeout(HANG_GUARD, engine.source(source).unwrap().wait_for(&end))
        .await
        .expect("catching up hangs")
        .unwrap_or_else(|e| panic!("source failed: {e}"));
}

async fn check(srv: &DevServer, engine: &Engine, source: &str, db: &str) {
    let end = end_position(srv).await;
    let from = engine
        .source(source)
        .unwrap()
        .status()
        .consistent_from
        .unwrap();
    check_table(srv, engine, source, db, "t", "id, v, n", true, &from, &end).await;
}

#[tokio::test]
async fn a_purged_binlog_stops_the_source_until_resnapshot_repairs_it() {
    let srv = own_server().await;
    let db = "purge_db";
    setup(&srv, db).await;
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().to_str().unwrap();
    let (engine, mut conn) = streaming(&srv, location, "p", db).await;
    engine.shutdown().await.unwrap();
    let durable = engine
        .source("p")
        .unwrap()
        .status()
        .durable_position
        .unwrap();
    drop(engine);
    // While the engine is down: 3 updates, 2 deletes, 4 inserts, then the binlog is purged.
    conn.query_drop(format!(
        "UPDATE {db}.t SET v = 'changed' WHERE id IN (20, 21, 22);
         DELETE FROM {db}.t WHERE id IN (30, 31);
         INSERT INTO {db}.t VALUES (501, 'new', 1), (502, 'new', 2), (503, 'new', 3), (504, 'new', 4);
         UPDATE {db}.t SET v = 'v40' WHERE id = 40;
         FLUSH BINARY LOGS;"
    ))
    .await
    .unwrap();
    let (now, _) = current_position(&mut conn, Flavor::MariaDb).await.unwrap();
    // The server keeps a binlog that a replica still reads (end the dropped engine's dump
    // threads) or whose transactions are not yet checkpointed (try again).
    let purged = tokio::time::timeout(HANG_GUARD, async {
        loop {
            let dumps: Vec<u64> = conn
                .query("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'")
                .await
                .unwrap();
            for id in dumps {
                let _ = conn.query_drop(format!("KILL {id}")).await;
            }
            conn.query_drop(format!("PURGE BINARY LOGS TO '{}'", now.file))
                .await
                .unwrap();
            let logs: Vec<(String, u64)> = conn.query("SHOW BINARY LOGS").await.unwrap();
            if logs.iter().all(|(name, _)| *name != *durable.file) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(purged.is_ok(), "the server does not purge {}", durable.file);
    let engine = Engine::open(location, options()).await.unwrap();
    let err = engine.wait_ready("p").await.unwrap_err().to_string();
    assert!(
        err.contains(&durable.to_string()),
        "names the position needed: {err}"
    );
    assert!(err.contains(&*now.file), "names what the server has: {err}");
    assert!(err.contains("RESNAPSHOT"), "offers the repair: {err}");
    let shown = query(&engine, "SELECT error, durable_position FROM cdc.sources").await;
    assert!(shown[0].contains("no longer available"), "{shown:?}");
    // The last durable state is not served as if it were current (55000, the repair named)...
    let refused = match engine
        .sql(&format!("SELECT count(*) AS n FROM p.{db}.t"))
        .await
    {
        Ok(df) => df.collect().await.unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    assert!(refused.contains("ALTER SOURCE p RESNAPSHOT"), "{refused}");
    // ...but stays readable, at its position, to a session that asks for stale state.
    assert_eq!(
        query_reading(
            &engine,
            &format!("SELECT count(*) AS n FROM p.{db}.t"),
            true
        )
        .await,
        ["n=200"]
    );
    let count = format!("SELECT count(*) AS n FROM p.{db}.\"t$changelog\"");
    let before: usize = query_reading(&engine, &count, true).await[0][2..]
        .parse()
        .unwrap();
    // One table cannot be repaired alone: the others would need the purged binlog.
    let err = engine
        .sql(&format!("ALTER SOURCE p RESNAPSHOT TABLE {db}.t"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&durable.to_string()),
        "names the position: {err}"
    );
    assert!(
        err.contains("use ALTER SOURCE p RESNAPSHOT,"),
        "points to the whole-source repair: {err}"
    );
    assert_eq!(
        query_reading(
            &engine,
            &format!("SELECT count(*) AS n FROM p.{db}.t"),
            true
        )
        .await,
        ["n=200"]
    );
    engine.sql("ALTER SOURCE p RESNAPSHOT").await.unwrap();
    engine.wait_ready("p").await.unwrap();
    caught_up(&srv, &engine, "p").await;
    let after: usize = query(&engine, &count).await[0][2..].parse().unwrap();
    // Only the 9 rows that differ get entries (id 40 was changed back to what it was).
    assert_eq!(
        after - before,
        9,
        "the re-snapshot repeats no unchanged row"
    );
    check(&srv, &engine, "p", db).await;
    // Streaming and checkpoints go on after the repair, and a restart resumes from them.
    conn.query_drop(format!(
        "UPDATE {db}.t SET n = 0 WHERE id = 1; DELETE FROM {db}.t WHERE id = 2"
    ))
    .await
    .unwrap();
    caught_up(&srv, &engine, "p").await;
    let engine = reopened(&srv, engine, location, "p").await;
    check(&srv, &engine, "p", db).await;
}

/// A quiet server's binlog moves on with no transaction: `FLUSH BINARY LOGS` rotates it to a
/// new file, and so does a restart. The source reaches that position (a reader waiting for it
/// does not hang), checkpoints it, and a restarted engine resumes from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_with_no_transaction_after_it_is_reached_and_resumed_from() {
    let mut srv = own_server().await;
    let db = "rotate_db";
    setup(&srv, db).await;
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().to_str().unwrap();
    let (engine, mut conn) = streaming(&srv, location, "r", db).await;
    let before = end_position(&srv).await;
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let rotated = end_position(&srv).await;
    assert_ne!(
        rotated.file, before.file,
        "FLUSH BINARY LOGS starts a new file"
    );
    caught_up(&srv, &engine, "r").await;
    drop(conn);
    srv = tokio::task::spawn_blocking(move || {
        srv.restart().expect("the server restarts");
        srv
    })
    .await
    .unwrap();
    let restarted = end_position(&srv).await;
    assert_ne!(restarted.file, rotated.file, "a restart starts a new file");
    caught_up(&srv, &engine, "r").await;
    // The checkpoint holds the new file's position, with no transaction in that file.
    let durable = tokio::time::timeout(HANG_GUARD, async {
        loop {
            let status = engine.source("r").unwrap().status();
            if let Some(d) = status.durable_position.filter(|d| *d >= restarted) {
                return d;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the reached position is checkpointed");
    assert_eq!(durable.file, restarted.file);
    let engine = reopened(&srv, engine, location, "r").await;
    let mut conn = root_conn(&srv).await;
    conn.query_drop(format!(
        "UPDATE {db}.t SET v = 'after' WHERE id = 3; DELETE FROM {db}.t WHERE id = 4"
    ))
    .await
    .unwrap();
    caught_up(&srv, &engine, "r").await;
    check(&srv, &engine, "r", db).await;
}

/// Random single-row transactions until `stop`, reconnecting when the server goes away; counts
/// the commits the server acknowledged.
async fn tolerant_writer(
    url: String,
    db: String,
    seed: u64,
    stop: Arc<AtomicBool>,
    commits: Arc<AtomicU64>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut next_id = 1000;
    let mut conn: Option<mysql_async::Conn> = None;
    while !stop.load(Ordering::Relaxed) {
        if conn.is_none() {
            conn = mysql_async::Conn::from_url(url.as_str()).await.ok();
            if conn.is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        }
        let c = conn.as_mut().expect("connected above");
        next_id += 1;
        let id = rng.random_range(1..next_id);
        let sql = match rng.random_range(0..4) {
            0 => format!("INSERT INTO {db}.t VALUES ({next_id}, 'w', 0)"),
            1 => format!("UPDATE {db}.t SET n = n + 1, v = 'u' WHERE id = {id}"),
            2 => format!("UPDATE {db}.t SET id = {next_id} WHERE id = {id}"),
            _ => format!("DELETE FROM {db}.t WHERE id = {id}"),
        };
        match c.query_drop(&sql).await {
            Ok(()) => {
                commits.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => conn = None,
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restarts_under_load_lose_and_double_nothing() {
    let mut srv = own_server().await;
    let db = "restart_db";
    setup(&srv, db).await;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path().to_str().unwrap(), options())
        .await
        .unwrap();
    engine.sql(&create(&srv, "r", db)).await.unwrap();
    engine.wait_ready("r").await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let writer = tokio::spawn(tolerant_writer(
        srv.root_url(),
        db.to_string(),
        5,
        Arc::clone(&stop),
        Arc::clone(&commits),
    ));
    for round in 0..2 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        srv = tokio::task::spawn_blocking(move || {
            srv.restart().expect("the server restarts");
            srv
        })
        .await
        .unwrap();
        println!(
            "restart {round}: {} commits so far",
            commits.load(Ordering::Relaxed)
        );
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    assert!(commits.load(Ordering::Relaxed) > 50, "the workload ran");
    caught_up(&srv, &engine, "r").await;
    assert_eq!(engine.source("r").unwrap().status().error, None);
    check(&srv, &engine, "r", db).await;
}

/// Two tables of 200 rows each.
async fn setup_two(srv: &DevServer, db: &str) {
    let mut conn = root_conn(srv).await;
    fresh_db(&mut conn, db).await;
    for table in ["t", "u"] {
        conn.query_drop(format!(
            "CREATE TABLE {db}.{table} (id INT PRIMARY KEY, v VARCHAR(32), n INT);
             INSERT INTO {db}.{table} SELECT seq, CONCAT('v', seq), seq FROM {db}.seq_1_to_200;"
        ))
        .await
        .unwrap();
    }
}

/// Logged single-row writes on both tables until `stop`, away from the rows the test changes
/// behind the binlog's back (ids up to 40 and 501 to 504): updates of ids 100 to 200, inserts
/// from 2000 on, deletes of the inserted ones.
async fn writer_on_both(url: String, db: String, stop: Arc<AtomicBool>, commits: Arc<AtomicU64>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut conn = mysql_async::Conn::from_url(url.as_str()).await.unwrap();
    let mut next_id = 2000;
    while !stop.load(Ordering::Relaxed) {
        let table = if rng.random_bool(0.5) { "t" } else { "u" };
        let sql = match rng.random_range(0..3) {
            0 => {
                next_id += 1;
                format!("INSERT INTO {db}.{table} VALUES ({next_id}, 'w', 0)")
            }
            1 => format!(
                "UPDATE {db}.{table} SET n = n + 1 WHERE id = {}",
                rng.random_range(100..=200)
            ),
            _ => format!(
                "DELETE FROM {db}.{table} WHERE id = {}",
                rng.random_range(2000..=next_id)
            ),
        };
        conn.query_drop(&sql).await.unwrap();
        commits.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The changelog entries of `table` that are not binlog changes (`_tx` 0): snapshot reads and
/// re-snapshot differences.
async fn non_binlog_entries(engine: &Engine, db: &str, table: &str) -> Vec<Entry> {
    engine_changelog(engine, "s", db, table, "id, v, n")
        .await
        .into_iter()
        .filter(|e| e.tx == 0)
        .collect()
}

async fn check_both(srv: &DevServer, engine: &Engine, db: &str) {
    let end = end_position(srv).await;
    let from = engine
        .source("s")
        .unwrap()
        .status()
        .consistent_from
        .unwrap();
    for table in ["t", "u"] {
        check_table(srv, engine, "s", db, table, "id, v, n", true, &from, &end).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resnapshot_table_repairs_one_table_and_leaves_the_others_alone() {
    let srv = own_server().await;
    let db = "retable_db";
    setup_two(&srv, db).await;
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().to_str().unwrap();
    let engine = Engine::open(location, options()).await.unwrap();
    engine
        .sql(&format!(
            "CREATE SOURCE s FROM MYSQL '{}' WITH (tables = '{db}.*', chunk_size = 50, server_id = 78)",
            srv.cdc_url()
        ))
        .await
        .unwrap();
    engine.wait_ready("s").await.unwrap();
    let mut conn = root_conn(&srv).await;
    conn.query_drop(format!(
        "UPDATE {db}.t SET n = n + 1 WHERE id BETWEEN 150 AND 160; DELETE FROM {db}.u WHERE id = 199"
    ))
    .await
    .unwrap();
    caught_up(&srv, &engine, "s").await;
    engine.shutdown().await.unwrap();
    drop(engine);
    // While the engine is down, 9 rows of t change without reaching the binlog: 3 updates,
    // 2 deletes, 4 inserts (and one update that is undone again).
    conn.query_drop(format!(
        "SET sql_log_bin = 0;
         UPDATE {db}.t SET v = 'hidden' WHERE id IN (20, 21, 22);
         DELETE FROM {db}.t WHERE id IN (30, 31);
         INSERT INTO {db}.t VALUES (501, 'new', 1), (502, 'new', 2), (503, 'new', 3), (504, 'new', 4);
         UPDATE {db}.t SET v = 'x' WHERE id = 40;
         UPDATE {db}.t SET v = 'v40' WHERE id = 40;
         SET sql_log_bin = 1;"
    ))
    .await
    .unwrap();
    let engine = Engine::open(location, options()).await.unwrap();
    engine.wait_ready("s").await.unwrap();
    caught_up(&srv, &engine, "s").await;
    let mut shown = query(&engine, &format!("SELECT * FROM s.{db}.t")).await;
    shown.sort();
    assert_ne!(
        shown,
        source_rows(&srv, &engine, "s", "t").await,
        "the unlogged changes are not in the engine's t yet"
    );
    let t_before = non_binlog_entries(&engine, db, "t").await;
    let u_before = non_binlog_entries(&engine, db, "u").await;

    // Unknown tables are named; nothing is stopped.
    let err = engine
        .sql("ALTER SOURCE s RESNAPSHOT TABLE retable_db.nope")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("retable_db.nope"), "{err}");
    assert_eq!(engine.source("s").unwrap().status().error, None);

    // RESNAPSHOT TABLE while both tables are written to.
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let writer = tokio::spawn(writer_on_both(
        srv.root_url(),
        db.to_string(),
        Arc::clone(&stop),
        Arc::clone(&commits),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = commits.load(Ordering::Relaxed);
    engine
        .sql(&format!("ALTER SOURCE s RESNAPSHOT TABLE {db}.t"))
        .await
        .unwrap();
    tokio::time::timeout(HANG_GUARD, engine.wait_ready("s"))
        .await
        .expect("the re-snapshot hangs")
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    assert!(
        commits.load(Ordering::Relaxed) > during,
        "writes went on during the re-snapshot"
    );
    caught_up(&srv, &engine, "s").await;
    // Both tables equal the source; both changelogs are exactly the binlog's history (no
    // binlog change of either table lost or doubled) and replay to the source's rows.
    check_both(&srv, &engine, db).await;
    // t gained exactly the 9 rows the binlog did not carry, each at its own position; u
    // gained nothing.
    let t_after = non_binlog_entries(&engine, db, "t").await;
    let added: Vec<&Entry> = t_after.iter().filter(|e| !t_before.contains(e)).collect();
    let mut ops: Vec<&str> = added.iter().map(|e| e.op.as_str()).collect();
    ops.sort();
    assert_eq!(
        ops,
        ["c", "c", "c", "c", "d", "d", "u", "u", "u"],
        "{added:?}"
    );
    let positions: std::collections::HashSet<&str> =
        t_after.iter().map(|e| e.position.as_str()).collect();
    let previous: std::collections::HashSet<&str> =
        t_before.iter().map(|e| e.position.as_str()).collect();
    assert_eq!(
        added
            .iter()
            .filter(|e| !previous.contains(e.position.as_str()))
            .count(),
        9,
        "the new entries' positions are new"
    );
    assert!(
        positions.len() >= previous.len() + 9,
        "positions are distinct"
    );
    assert_eq!(non_binlog_entries(&engine, db, "u").await, u_before);

    // Nothing changed since: a second RESNAPSHOT TABLE appends nothing.
    engine
        .sql(&format!("ALTER SOURCE s RESNAPSHOT TABLE {db}.t"))
        .await
        .unwrap();
    engine.wait_ready("s").await.unwrap();
    caught_up(&srv, &engine, "s").await;
    assert_eq!(non_binlog_entries(&engine, db, "t").await, t_after);

    // A restart resumes from the checkpoint after the repair: same changelogs, same rows.
    let logs_before: Vec<Vec<Entry>> = {
        let mut v = Vec::new();
        for table in ["t", "u"] {
            v.push(engine_changelog(&engine, "s", db, table, "id, v, n").await);
        }
        v
    };
    let engine = reopened(&srv, engine, location, "s").await;
    for (table, before) in ["t", "u"].iter().zip(&logs_before) {
        let mut after = engine_changelog(&engine, "s", db, table, "id, v, n").await;
        let mut before = before.clone();
        after.sort();
        before.sort();
        assert_eq!(after, before, "{table}: the restart changed the changelog");
    }
    conn.query_drop(format!(
        "UPDATE {db}.t SET n = 0 WHERE id = 501; DELETE FROM {db}.u WHERE id = 1"
    ))
    .await
    .unwrap();
    caught_up(&srv, &engine, "s").await;
    check_both(&srv, &engine, db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_during_the_snapshot_is_ridden_out() {
    use cdcfusion::capture::{CaptureOptions, SnapshotMode};
    use cdcfusion::source::snapshot::incremental::{HookPoint, SnapshotHook};
    let srv = Arc::new(tokio::sync::Mutex::new(own_server().await));
    let db = "retry_db";
    let url = {
        let guard = srv.lock().await;
        setup(&guard, db).await;
        guard.cdc_url()
    };
    // The server restarts while the sixth chunk starts, once; every chunk read is counted.
    let restarted = Arc::new(AtomicBool::new(false));
    let reads: Arc<std::sync::Mutex<Vec<usize>>> = Arc::default();
    let hook: SnapshotHook = {
        let (srv, restarted, reads) =
            (Arc::clone(&srv), Arc::clone(&restarted), Arc::clone(&reads));
        Arc::new(move |point, chunk| {
            let (srv, restarted, reads) =
                (Arc::clone(&srv), Arc::clone(&restarted), Arc::clone(&reads));
            Box::pin(async move {
                if point == HookPoint::AfterHigh {
                    reads.lock().unwrap().push(chunk.index);
                }
                if point == HookPoint::AfterLow
                    && chunk.index == 5
                    && !restarted.swap(true, Ordering::SeqCst)
                {
                    tokio::task::spawn_blocking(move || srv.blocking_lock().restart().unwrap())
                        .await
                        .unwrap();
                }
            })
        })
    };
    let mut options = CaptureOptions::new(format!("{db}.*"), SnapshotMode::Initial);
    options.server_id = next_server_id();
    options.snapshot.window_server_id = next_server_id();
    options.snapshot.chunk_size = 20;
    options.snapshot.parallelism = 1;
    options.snapshot.hook = Some(hook);
    let engine = Engine::new();
    engine.create_source("r", &url, options).unwrap();
    tokio::time::timeout(HANG_GUARD * 2, engine.wait_ready("r"))
        .await
        .expect("the snapshot never finished")
        .unwrap_or_else(|e| panic!("the source stopped: {e}"));
    assert!(
        restarted.load(Ordering::SeqCst),
        "the server was not restarted"
    );
    let status = query(
        &engine,
        "SELECT state, retries >= 1 AS retried, last_error_sqlstate FROM cdc.sources",
    )
    .await;
    assert_eq!(
        status,
        ["state=running retried=true last_error_sqlstate=08006"]
    );
    // The chunks read before the restart were kept, not read again.
    let reads = reads.lock().unwrap().clone();
    for index in 0..5 {
        assert_eq!(
            reads.iter().filter(|i| **i == index).count(),
            1,
            "{reads:?}"
        );
    }
    // It streams on, equal to the server, its changelog replaying to it.
    let guard = srv.lock().await;
    let mut conn = root_conn(&guard).await;
    conn.query_drop(format!(
        "UPDATE {db}.t SET n = -n WHERE id % 7 = 0; DELETE FROM {db}.t WHERE id > 190"
    ))
    .await
    .unwrap();
    caught_up(&guard, &engine, "r").await;
    check(&guard, &engine, "r", db).await;
}
