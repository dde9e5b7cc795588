//! Durability against trouble on the server side, each test on a private server of its own
//! (they purge binlogs and restart the server): a purged binlog stops a resumed source with a
//! definite error until `ALTER SOURCE ... RESNAPSHOT` repairs it, and server restarts under
//! load are retried without losing or doubling a change.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cdcfusion::devserver::{DevServer, DevServerOptions};
use cdcfusion::durable::DurableOptions;
use cdcfusion::engine::{Engine, EngineOptions};
use cdcfusion::source::connect::current_position;
use cdcfusion::source::position::BinlogCoord;
use cdcfusion::source::schema::Flavor;
use common::durable::*;
use common::*;
use mysql_async::prelude::Queryable;
use rand::{Rng, SeedableRng};

fn options() -> EngineOptions {
    EngineOptions {
        durable: DurableOptions {
            checkpoint_interval: Duration::from_millis(50),
            state_snapshot_min_changes: 50,
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
    let engine = Engine::open(location, options()).await.unwrap();
    engine.sql(&create(&srv, "p", db)).await.unwrap();
    engine.wait_ready("p").await.unwrap();
    let mut conn = root_conn(&srv).await;
    conn.query_drop(format!("UPDATE {db}.t SET n = n + 1 WHERE id <= 10"))
        .await
        .unwrap();
    caught_up(&srv, &engine, "p").await;
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
    // The last durable state stays queryable, at its position.
    assert_eq!(
        query(&engine, &format!("SELECT count(*) AS n FROM p.{db}.t")).await,
        ["n=200"]
    );
    let count = format!("SELECT count(*) AS n FROM p.{db}.\"t$changelog\"");
    let before: usize = query(&engine, &count).await[0][2..].parse().unwrap();
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
    engine.shutdown().await.unwrap();
    drop(engine);
    let engine = Engine::open(location, options()).await.unwrap();
    engine.wait_ready("p").await.unwrap();
    caught_up(&srv, &engine, "p").await;
    check(&srv, &engine, "p", db).await;
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
