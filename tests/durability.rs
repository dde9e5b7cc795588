//! Durability: checkpoints on a state directory, restart from the newest one, and the crash
//! test that kills `cdcfusion serve` with SIGKILL at random moments under a random workload.
//! Every test ends by comparing the current table with the source and the changelog with the
//! binlog as the server's own `mariadb-binlog` prints it (`common::durable`).

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cdcfusion::change::position::BinlogCoord;
use cdcfusion::change::schema::Flavor;
use cdcfusion::devserver::DevServer;
use cdcfusion::durable::checkpoint::COMPACT_SEGMENTS;
use cdcfusion::durable::manifest::{load_catalog, load_newest_manifest};
use cdcfusion::durable::{DurableOptions, Store};
use cdcfusion::engine::{Engine, EngineOptions};
use cdcfusion::source::connect::current_position;
use common::durable::spawn_serve;
use common::readers::*;
use common::workload::*;
use common::*;
use rand::{Rng, SeedableRng};

/// Checkpoints every `interval_ms`, state snapshots after `min_changes`, and a changelog budget
/// small enough that these tests read most of their changelogs back from the store.
fn options(interval_ms: u64, min_changes: u64) -> EngineOptions {
    EngineOptions {
        durable: DurableOptions {
            checkpoint_interval: Duration::from_millis(interval_ms),
            state_snapshot_min_changes: min_changes,
            changelog_memory_budget: SMALL_BUDGET,
        },
        ..Default::default()
    }
}

/// Bytes of changelog a source keeps in memory in these tests.
const SMALL_BUDGET: u64 = 16 * 1024;

async fn end_position(srv: &DevServer) -> BinlogCoord {
    current_position(&mut root_conn(srv).await, Flavor::MariaDb)
        .await
        .unwrap()
        .0
}

/// Opens the engine at `dir`, waits for `source` to be ready and caught up with the server.
async fn open_caught_up(srv: &DevServer, dir: &Path, source: &str, opts: EngineOptions) -> Engine {
    let engine = Engine::open(dir.to_str().unwrap(), opts).await.unwrap();
    tokio::time::timeout(HANG_GUARD, engine.wait_ready(source))
        .await
        .expect("recovery hangs")
        .unwrap_or_else(|e| panic!("recovery failed: {e}"));
    let end = end_position(srv).await;
    tokio::time::timeout(HANG_GUARD, engine.source(source).unwrap().wait_for(&end))
        .await
        .expect("catching up hangs")
        .unwrap();
    engine
}

fn status(engine: &Engine, source: &str) -> cdcfusion::engine::SourceStatus {
    engine.source(source).unwrap().status()
}

fn create_sql(srv: &DevServer, source: &str, db: &str) -> String {
    create_sql_with(srv, source, db, 64, 2)
}

fn create_sql_with(
    srv: &DevServer,
    source: &str,
    db: &str,
    chunk_size: usize,
    parallelism: usize,
) -> String {
    format!(
        "CREATE SOURCE IF NOT EXISTS {source} FROM MYSQL '{}' WITH (tables = '{db}.*', chunk_size = {chunk_size}, parallelism = {parallelism}, chunk_key = '{db}.t:k', server_id = {})",
        srv.cdc_url(),
        next_server_id() * 2
    )
}

#[tokio::test]
async fn a_restarted_engine_resumes_from_its_checkpoint_without_a_new_snapshot() {
    let srv = server();
    let db = "dur_restart";
    let mut conn = root_conn(srv).await;
    schema(&mut conn, db, 300).await;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path().to_str().unwrap(), options(100, 20))
        .await
        .unwrap();
    engine.sql(&create_sql(srv, "rs", db)).await.unwrap();
    assert_eq!(files(dir.path(), Some("catalog")).len(), 1);
    tokio::time::timeout(HANG_GUARD, engine.wait_ready("rs"))
        .await
        .unwrap()
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut next_id = 1000;
    for _ in 0..60 {
        random_transaction(&mut conn, db, &mut rng, &mut next_id).await;
    }
    let end = end_position(srv).await;
    engine.source("rs").unwrap().wait_for(&end).await.unwrap();
    engine.shutdown().await.unwrap();
    // Other tests move the shared server's binlog on, so the durable position may be later.
    let durable = status(&engine, "rs").durable_position.unwrap();
    assert!(durable >= end, "{durable} is durable, {end} was reached");
    let shown = query(&engine, "SELECT durable_position FROM cdc.sources").await;
    assert!(
        shown[0].starts_with("durable_position=binlog."),
        "{shown:?}"
    );
    let reads_before = query(
        &engine,
        &format!("SELECT count(*) AS n FROM rs.{db}.\"t$changelog\" WHERE _op = 'r'"),
    )
    .await;
    drop(engine);
    // Changes while the engine is down are read from the binlog on restart.
    for _ in 0..40 {
        random_transaction(&mut conn, db, &mut rng, &mut next_id).await;
    }
    let engine = open_caught_up(srv, dir.path(), "rs", options(100, 20)).await;
    let reads_after = query(
        &engine,
        &format!("SELECT count(*) AS n FROM rs.{db}.\"t$changelog\" WHERE _op = 'r'"),
    )
    .await;
    assert_eq!(
        reads_before, reads_after,
        "a restart does not snapshot again"
    );
    check(srv, &engine, "rs", db).await;
    // A dropped source is gone from the catalog and its files are removed.
    engine.sql("DROP SOURCE rs").await.unwrap();
    drop(engine);
    let engine = Engine::open(dir.path().to_str().unwrap(), options(100, 20))
        .await
        .unwrap();
    assert!(engine.source_names().is_empty());
    assert_eq!(
        files(&dir.path().join("sources"), None),
        Vec::<std::path::PathBuf>::new()
    );
}

/// Starts a snapshot of `db`, drops the engine after 30 chunks (like a crash, chunks in
/// flight), runs `while_down` on the server, and opens the engine again until it catches up;
/// returns the chunks done before and after, and the engine.
async fn interrupt_snapshot(
    db: &str,
    source: &str,
    while_down: Option<String>,
) -> (Vec<String>, Vec<String>, Engine, tempfile::TempDir) {
    let srv = server();
    let mut conn = root_conn(srv).await;
    schema(&mut conn, db, 3000).await;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path().to_str().unwrap(), options(50, 100))
        .await
        .unwrap();
    engine
        .sql(&create_sql_with(srv, source, db, 20, 1))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = tokio::spawn(writer(srv, db.to_string(), 11, 10_000, Arc::clone(&stop)));
    let done_sql = "SELECT \"table\", chunk, high FROM cdc.chunks WHERE state = 'done' ORDER BY \"table\", chunk";
    let before = tokio::time::timeout(HANG_GUARD, async {
        loop {
            let done = query(&engine, done_sql).await;
            if done.len() >= 30 {
                return done;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the snapshot makes progress");
    assert!(
        engine
            .source(source)
            .unwrap()
            .status()
            .consistent_from
            .is_none(),
        "interrupted before its hand-off"
    );
    // Gone in the middle of the snapshot, like a crash (with chunks in flight).
    drop(engine);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    writes.await.unwrap();
    if let Some(sql) = while_down {
        mysql_async::prelude::Queryable::query_drop(&mut conn, sql)
            .await
            .unwrap();
    }
    let engine = open_caught_up(srv, dir.path(), source, options(50, 100)).await;
    let after = query(&engine, done_sql).await;
    (before, after, engine, dir)
}

#[tokio::test]
async fn a_snapshot_interrupted_midway_reads_only_the_chunks_not_done() {
    let db = "dur_resume";
    let (before, after, engine, _dir) = interrupt_snapshot(db, "sr", None).await;
    let kept = before.iter().filter(|c| after.contains(c)).count();
    println!(
        "{} chunks done before the interruption, {kept} of them not read again",
        before.len()
    );
    assert!(
        kept >= 10,
        "chunks done before are kept with their HIGH: {kept}"
    );
    check(server(), &engine, "sr", db).await;
}

/// The table's columns changed while the engine was down in the middle of its snapshot: the
/// chunks read under the old columns are dropped and the snapshot starts over (nothing was
/// published from them), instead of the source failing.
#[tokio::test]
async fn a_snapshot_interrupted_then_altered_starts_over_under_the_new_columns() {
    let db = "dur_resume_ddl";
    let ddl = format!("ALTER TABLE {db}.t ADD COLUMN extra INT NOT NULL DEFAULT 7");
    let (before, after, engine, _dir) = interrupt_snapshot(db, "sd", Some(ddl)).await;
    let kept = before.iter().filter(|c| after.contains(c)).count();
    assert_eq!(kept, 0, "no chunk read under the old columns is kept");
    check_columns(server(), &engine, "sd", db, "id, k, v, n, extra").await;
}

/// Every file below `dir` (with extension `ext`), sorted.
fn files(dir: &Path, ext: Option<&str>) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if ext.is_none_or(|ext| p.extension().is_some_and(|x| x == ext)) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn damaged_state_files_are_refused_by_name() {
    let srv = server();
    let db = "dur_corrupt";
    let mut conn = root_conn(srv).await;
    schema(&mut conn, db, 100).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = Engine::open(state.to_str().unwrap(), options(50, 10))
        .await
        .unwrap();
    engine.sql(&create_sql(srv, "cs", db)).await.unwrap();
    engine.wait_ready("cs").await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut next_id = 1000;
    for _ in 0..20 {
        random_transaction(&mut conn, db, &mut rng, &mut next_id).await;
    }
    let end = end_position(srv).await;
    engine.source("cs").unwrap().wait_for(&end).await.unwrap();
    engine.shutdown().await.unwrap();
    drop(engine);
    let pristine = dir.path().join("pristine");
    copy_dir(&state, &pristine);
    let open_error = |root: std::path::PathBuf| async move {
        match Engine::open(root.to_str().unwrap(), options(50, 10)).await {
            Err(e) => e.to_string(),
            Ok(engine) => engine
                .wait_ready("cs")
                .await
                .expect_err("a damaged state must not load")
                .to_string(),
        }
    };
    let damage: [(&str, Damage); 3] = [
        ("flip", |b| {
            let i = b.len() / 2;
            b[i] ^= 0x01
        }),
        ("truncate", |b| b.truncate(b.len() - 3)),
        ("empty", |b| b.clear()),
    ];
    for ext in ["arrow", "manifest", "catalog"] {
        for (how, f) in damage {
            let root = dir.path().join(format!("{ext}-{how}"));
            copy_dir(&pristine, &root);
            // The newest file of the kind (a manifest names the newest data files).
            let victim = files(&root, Some(ext)).pop().unwrap();
            let mut bytes = std::fs::read(&victim).unwrap();
            f(&mut bytes);
            std::fs::write(&victim, &bytes).unwrap();
            let err = open_error(root.clone()).await;
            let name = victim.file_name().unwrap().to_str().unwrap();
            assert!(
                err.contains(name),
                "{ext} {how}: the error names the file: {err}"
            );
            assert!(err.contains("corrupt"), "{ext} {how}: {err}");
        }
    }
    // RESNAPSHOT repairs a source whose checkpoint is damaged: it starts over.
    let damaged = dir.path().join("arrow-flip");
    let engine = Engine::open(damaged.to_str().unwrap(), options(50, 10))
        .await
        .unwrap();
    assert!(engine.wait_ready("cs").await.is_err());
    engine.sql("ALTER SOURCE cs RESNAPSHOT").await.unwrap();
    engine.wait_ready("cs").await.unwrap();
    let end = end_position(srv).await;
    engine.source("cs").unwrap().wait_for(&end).await.unwrap();
    check(srv, &engine, "cs", db).await;
    engine.shutdown().await.unwrap();
    drop(engine);
    let engine = open_caught_up(srv, &damaged, "cs", options(50, 10)).await;
    check(srv, &engine, "cs", db).await;
    drop(engine);
    // The untouched copy still loads.
    let engine = open_caught_up(srv, &pristine, "cs", options(50, 10)).await;
    check(srv, &engine, "cs", db).await;
}

/// A way to damage a file's bytes.
type Damage = fn(&mut Vec<u8>);

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// The number of the newest snapshot progress file in `dir` (1 once the snapshot is planned,
/// one more per chunk recorded done), 0 when there is none.
fn progress_seq(dir: &Path) -> u64 {
    files(dir, Some("progress"))
        .iter()
        .filter_map(|p| p.file_stem()?.to_str()?.parse().ok())
        .max()
        .unwrap_or(0)
}

fn newest_manifest(dir: &Path) -> String {
    files(dir, Some("manifest"))
        .pop()
        .map(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .trim_start_matches('0')
                .to_string()
        })
        .unwrap_or_else(|| "none".into())
}

/// Each sink of the crash test holds what the recovered engine holds, read by readers that
/// are not ours: the upsert targets equal the current table, the changelog targets hold
/// every entry exactly once.
async fn check_sinks(
    engine: &Engine,
    db: &str,
    pg: &str,
    lake: &Path,
    lake_log: &Path,
    files: &Path,
) {
    for sink in ["pg_copy", "pg_log", "lake", "lake_log", "files"] {
        sink_caught_up(engine, "crash", sink).await;
    }
    let rows: Vec<String> = lines(
        engine,
        &format!("SELECT CAST(id AS VARCHAR) || '|' || CAST(k AS VARCHAR) || '|' || COALESCE(v, 'NULL') || '|' || COALESCE(CAST(n AS VARCHAR), 'NULL') AS line FROM crash.{db}.t ORDER BY id"),
    )
    .await;
    let log: Vec<String> = lines(
        engine,
        &format!("SELECT _position || '|' || _op || '|' || CAST(id AS VARCHAR) AS line FROM crash.{db}.\"t$changelog\" ORDER BY _position"),
    )
    .await;
    assert_eq!(
        psql(pg, "SELECT id, k, v, n FROM t_copy ORDER BY id"),
        rows,
        "PostgreSQL upsert target"
    );
    assert_eq!(
        delta_rows(lake, "id,k,v,n", "r['id']"),
        rows,
        "Delta upsert target (Python deltalake)"
    );
    assert_eq!(
        duckdb_delta(&format!(
            "SELECT id, k, v, n FROM delta_scan('{}') ORDER BY id",
            lake.display()
        )),
        rows,
        "Delta upsert target (DuckDB)"
    );
    assert_eq!(
        delta_rows(lake_log, "_position,_op,id", "r['_position'].encode()"),
        log,
        "Delta changelog target (Python deltalake)"
    );
    assert_eq!(
        duckdb_delta(&format!(
            "SELECT _position, _op, id FROM delta_scan('{}') ORDER BY _position",
            lake_log.display()
        )),
        log,
        "Delta changelog target (DuckDB)"
    );
    assert_eq!(
        psql(
            pg,
            "SELECT _position, _op, id FROM t_log ORDER BY _position COLLATE \"C\""
        ),
        log,
        "PostgreSQL changelog target"
    );
    assert_eq!(
        duckdb(&format!(
            "SELECT _position, _op, id FROM read_parquet('{}/**/*.parquet') ORDER BY _position",
            files.display()
        )),
        log,
        "Parquet changelog target"
    );
    println!(
        "sinks: {} rows upserted into PostgreSQL and Delta, {} changelog entries in PostgreSQL, Delta and Parquet, each exactly once",
        rows.len(),
        log.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_and_doubles_nothing() {
    let seed: u64 = std::env::var("CDCFUSION_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    let rounds: usize = std::env::var("CDCFUSION_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    println!("crash test: seed {seed}, {rounds} rounds (CDCFUSION_CRASH_SEED / CDCFUSION_CRASH_ROUNDS reproduce)");
    let srv = server();
    let db = "dur_crash";
    let mut conn = root_conn(srv).await;
    schema(&mut conn, db, 4000).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let init = dir.path().join("init.sql");
    let lake = dir.path().join("lake");
    let lake_log = dir.path().join("lake_log");
    let files = dir.path().join("files");
    let pg = "cdcfusion_it_crash_sinks";
    let pg_url = pg_database(pg).await;
    // Five sinks, one per kind of target and mode, written while the engine is killed.
    let sinks = [
        format!("CREATE SINK IF NOT EXISTS pg_copy INTO POSTGRES '{pg_url}' TABLE 't_copy' WITH (commit_interval = '200ms') AS SELECT id, k, v, n FROM crash.{db}.t"),
        format!("CREATE SINK IF NOT EXISTS pg_log INTO POSTGRES '{pg_url}' TABLE 't_log' WITH (commit_interval = '200ms') AS SELECT _op, _position, id FROM crash.{db}.\"t$changelog\""),
        format!("CREATE SINK IF NOT EXISTS lake INTO DELTA 'file://{}' WITH (commit_interval = '300ms') AS SELECT id, k, v, n FROM crash.{db}.t", lake.display()),
        format!("CREATE SINK IF NOT EXISTS lake_log INTO DELTA 'file://{}' WITH (commit_interval = '250ms') AS SELECT _op, _position, id FROM crash.{db}.\"t$changelog\"", lake_log.display()),
        format!("CREATE SINK IF NOT EXISTS files INTO PARQUET 'file://{}' WITH (commit_interval = '300ms') AS SELECT _op, _position, id FROM crash.{db}.\"t$changelog\"", files.display()),
    ];
    std::fs::write(
        &init,
        format!(
            "{};\n{};\n",
            create_sql(srv, "crash", db),
            sinks.join(";\n")
        ),
    )
    .unwrap();
    let config = dir.path().join("cdcfusion.toml");
    std::fs::write(
        &config,
        format!(
            "allowed_locations = [\"file://{}/\"]\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let log = dir.path().join("serve.log");
    let stop = Arc::new(AtomicBool::new(false));
    let writes = tokio::spawn(writer(srv, db.to_string(), seed, 10_000, Arc::clone(&stop)));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed);
    // Where the kills landed, read off the state directory of the dead process.
    let (mut mid_snapshot, mut after_checkpoint) = (false, false);
    for round in 0..rounds {
        let started = std::time::Instant::now();
        let mut child = spawn_serve(&state, &init, &config, &log, SMALL_BUDGET);
        if round == 0 {
            // The first dies mid-snapshot: once a chunk is recorded done.
            while progress_seq(&state) < 2 && started.elapsed() < HANG_GUARD {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        } else {
            // Early rounds die young (during the first checkpoints).
            let max = if round < 2 { 700 } else { 2500 };
            let after = rng.random_range(100..max);
            tokio::time::sleep(Duration::from_millis(after)).await;
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        let newest = newest_manifest(&state);
        mid_snapshot |= newest == "none" && progress_seq(&state) >= 2;
        after_checkpoint |= newest != "none";
        println!(
            "round {round}: SIGKILL after {} ms ({status}); newest checkpoint: {newest}",
            started.elapsed().as_millis()
        );
    }
    assert!(
        mid_snapshot,
        "no SIGKILL landed during the snapshot with chunks done (seed {seed})"
    );
    assert!(
        after_checkpoint,
        "no SIGKILL landed after a checkpoint (seed {seed})"
    );
    stop.store(true, Ordering::Relaxed);
    let committed = writes.await.unwrap();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    println!(
        "writer committed {committed} transactions; the engine resumed {} snapshot(s) from their progress and {} time(s) from a checkpoint",
        text.matches("resuming an interrupted snapshot").count(),
        text.matches("resuming from a checkpoint").count()
    );
    let engine = match tokio::time::timeout(HANG_GUARD, async {
        open_caught_up(srv, &state, "crash", options(40, 150)).await
    })
    .await
    {
        Ok(engine) => engine,
        Err(_) => panic!(
            "recovery hangs; serve log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        ),
    };
    check(srv, &engine, "crash", db).await;
    check_sinks(&engine, db, pg, &lake, &lake_log, &files).await;
    // Hundreds of checkpoints later the changelog is still a few files: covered segments were
    // merged.
    let store = Store::open(state.to_str().unwrap(), &Vec::new()).unwrap();
    let catalog = load_catalog(&store).await.unwrap();
    let manifest = load_newest_manifest(&store, &catalog.sources[0].id)
        .await
        .unwrap()
        .unwrap();
    let t = &manifest.tables[0];
    let covered = t
        .segments
        .iter()
        .filter(|s| s.last_seq <= t.state.seq)
        .count();
    println!(
        "checkpoint {}: table t has {} segment files ({covered} covered by its state)",
        manifest.seq,
        t.segments.len()
    );
    assert!(
        covered <= COMPACT_SEGMENTS + 1,
        "{covered} covered segments"
    );
    if manifest.seq > 4 * COMPACT_SEGMENTS as u64 {
        assert!(
            t.segments.iter().any(|s| s.first_seq < s.last_seq),
            "segments were compacted"
        );
    }
}
