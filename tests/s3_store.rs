//! The state store on an S3-compatible object store (the default `s3` feature), against a live one: a
//! private moto server (installed from PyPI into the test build directory) on a free port of
//! 127.0.0.1, stopped at the end. A source checkpoints to `s3://bucket/prefix`, an engine
//! opened again on the same location resumes exactly (current table and changelog), the
//! store's create-if-absent holds on S3, and a damaged object is refused by name.
#![cfg(feature = "s3")]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cdcfusion::change::schema::Flavor;
use cdcfusion::devserver::DevServer;
use cdcfusion::durable::manifest::{load_catalog, load_newest_manifest};
use cdcfusion::durable::store::{FileKind, StoreError};
use cdcfusion::durable::{DurableOptions, Store, StoreOptions};
use cdcfusion::engine::{Engine, EngineOptions};
use cdcfusion::source::connect::current_position;
use common::durable::*;
use common::http_faults::{Fault, HttpFaults};
use common::readers::{delta_table_rows, python_delta, sink_caught_up};
use common::*;
use mysql_async::prelude::Queryable;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};

const BUCKET: &str = "cdcstate";

/// Sinks take S3 settings from the process environment, as deployments give them; the tests
/// that point it at their own server run one at a time.
static AWS_ENVIRONMENT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Points the sinks of this process (and the `cdcfusion serve` it spawns) at the S3 server
/// on `port` of 127.0.0.1.
fn sinks_use_s3_at(port: u16) {
    for (key, value) in [
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
    ] {
        std::env::set_var(key, value);
    }
}

/// moto's server, installed into the test build directory once; returns its `PYTHONPATH`.
fn moto_path() -> String {
    common::pip_install("pydeps-moto", "moto/server.py", "moto[server]>=5,<6")
}

/// A moto server on a free port of 127.0.0.1, killed when dropped.
struct Moto {
    child: Child,
    port: u16,
}

impl Moto {
    fn start() -> Self {
        let path = moto_path();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("python3")
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .env("PYTHONPATH", path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs moto");
        let mut moto = Self { child, port };
        // Until it listens, or fails: a moto that exits is an error, not a wait.
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = moto.child.try_wait().unwrap() {
                panic!("moto exited before listening ({status})");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates a bucket (moto takes an unsigned `PUT /bucket`). A server that has just begun
    /// to listen may reset a connection before it answers: that is tried again, a few times.
    fn create_bucket(&self, name: &str) {
        let mut attempts = 0;
        let answer = loop {
            attempts += 1;
            match self.put_bucket(name) {
                Ok(answer) => break answer,
                Err(e) if attempts < 20 => {
                    eprintln!("creating bucket {name}: {e}; trying again");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("creating bucket {name}: {e}"),
            }
        };
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// One `PUT /bucket`: the answer, or the error that came before any answer.
    fn put_bucket(&self, name: &str) -> std::io::Result<String> {
        let mut conn = TcpStream::connect(("127.0.0.1", self.port))?;
        write!(
            conn,
            "PUT /{name} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )?;
        // The server may also reset the connection right after its answer.
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match conn.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && !answer.is_empty() => {
                    break
                }
                Err(e) => return Err(e),
            }
        }
        Ok(String::from_utf8_lossy(&answer).into_owned())
    }

    /// The options that point the state store at this server.
    fn options(&self) -> StoreOptions {
        [
            ("aws_endpoint", self.endpoint()),
            ("aws_allow_http", "true".into()),
            ("aws_access_key_id", "test".into()),
            ("aws_secret_access_key", "test".into()),
            ("aws_region", "us-east-1".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn engine_options(moto: &Moto) -> EngineOptions {
    EngineOptions {
        durable: DurableOptions {
            checkpoint_interval: Duration::from_millis(50),
            state_snapshot_min_changes: 20,
            // Small: most of the changelog is read back from the bucket.
            changelog_memory_budget: 16 * 1024,
        },
        store: moto.options(),
        ..Default::default()
    }
}

async fn caught_up(engine: &Engine) {
    let end = current_position(&mut root_conn(server()).await, Flavor::MariaDb)
        .await
        .unwrap()
        .0;
    tokio::time::timeout(HANG_GUARD, engine.source("s3s").unwrap().wait_for(&end))
        .await
        .expect("catching up hangs")
        .unwrap();
}

async fn check(engine: &Engine, db: &str) {
    let srv = server();
    let end = current_position(&mut root_conn(srv).await, Flavor::MariaDb)
        .await
        .unwrap()
        .0;
    let from = engine
        .source("s3s")
        .unwrap()
        .status()
        .consistent_from
        .unwrap();
    check_table(srv, engine, "s3s", db, "t", "id, v, n", true, &from, &end).await;
}

/// Thirty transactions on `db.t`, each an update, a delete and an insert.
async fn thirty_transactions(conn: &mut mysql_async::Conn, db: &str) {
    for i in 0..30 {
        conn.query_drop(format!(
            "UPDATE {db}.t SET n = n + 1 WHERE id = {}; DELETE FROM {db}.t WHERE id = {};
             INSERT INTO {db}.t VALUES ({}, 'new', {i})",
            i + 1,
            i + 100,
            1000 + i
        ))
        .await
        .unwrap();
    }
}

/// A fresh database `db` holding table `t` with 300 rows; the connection that made it.
async fn table_of_300_rows(srv: &DevServer, db: &str) -> mysql_async::Conn {
    let mut conn = root_conn(srv).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(32), n INT);
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq FROM {db}.seq_1_to_300;"
    ))
    .await
    .unwrap();
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_on_s3_resume_exactly_and_damage_is_refused() {
    let moto = tokio::task::spawn_blocking(Moto::start).await.unwrap();
    moto.create_bucket(BUCKET);
    let location = format!("s3://{BUCKET}/engines/one");
    let srv = server();
    let db = "s3_db";
    let mut conn = table_of_300_rows(srv, db).await;
    let engine = Engine::open(&location, engine_options(&moto))
        .await
        .unwrap();
    engine
        .sql(&format!(
            "CREATE SOURCE s3s FROM MYSQL '{}' WITH (tables = '{db}.t', chunk_size = 64, server_id = {})",
            srv.cdc_url(),
            source_server_id()
        ))
        .await
        .unwrap();
    engine.wait_ready("s3s").await.unwrap();
    thirty_transactions(&mut conn, db).await;
    caught_up(&engine).await;
    engine.shutdown().await.unwrap();
    let before = engine_changelog(&engine, "s3s", db, "t", "id, v, n").await;
    drop(engine);

    // The files are on the store, under the prefix.
    let store = Store::open(&location, &moto.options()).unwrap();
    let catalog = load_catalog(&store).await.unwrap();
    let id = catalog.sources[0].id.clone();
    let manifest = load_newest_manifest(&store, &id).await.unwrap().unwrap();
    assert!(manifest.files().count() >= 2, "{manifest:?}");
    // Create-if-absent holds on S3: a manifest cannot be committed twice.
    let newest = store
        .list(&format!("sources/{id}/manifests"))
        .await
        .unwrap()
        .pop()
        .unwrap();
    let err = store
        .create(&newest, FileKind::Manifest, b"{}")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Exists { .. }), "{err}");

    // While the engine is down, more changes; the restart reads them from the binlog.
    conn.query_drop(format!(
        "UPDATE {db}.t SET v = 'later' WHERE id <= 5; DELETE FROM {db}.t WHERE id = 200"
    ))
    .await
    .unwrap();
    let engine = Engine::open(&location, engine_options(&moto))
        .await
        .unwrap();
    engine.wait_ready("s3s").await.unwrap();
    caught_up(&engine).await;
    check(&engine, db).await;
    let mut after = engine_changelog(&engine, "s3s", db, "t", "id, v, n").await;
    after.sort();
    assert!(
        before.iter().all(|e| after.binary_search(e).is_ok()),
        "the changelog before the restart is kept exactly"
    );
    assert_eq!(
        after.len(),
        before.len() + 6,
        "5 updates and 1 delete since"
    );
    engine.shutdown().await.unwrap();
    drop(engine);

    // A damaged object (one bit of the newest manifest's state file) is refused by name.
    let manifest = load_newest_manifest(&store, &id).await.unwrap().unwrap();
    let victim = manifest.tables[0].state.file.path.clone();
    let mut raw = AmazonS3Builder::new().with_bucket_name(BUCKET);
    for (k, v) in moto.options() {
        raw = raw.with_config(k.parse().unwrap(), v);
    }
    let raw = raw.build().unwrap();
    let object = ObjectPath::from(format!("engines/one/{victim}"));
    let mut bytes = raw
        .get(&object)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    raw.put(&object, PutPayload::from(bytes)).await.unwrap();
    let engine = Engine::open(&location, engine_options(&moto))
        .await
        .unwrap();
    let err = engine.wait_ready("s3s").await.unwrap_err().to_string();
    let name = victim.rsplit('/').next().unwrap();
    assert!(err.contains(name), "names the object: {err}");
    assert!(err.contains("corrupt"), "{err}");
}

/// Polls `cdc.sources` for source `s3s` until `done` holds for its row, failing on a hang.
async fn wait_status(engine: &Engine, columns: &str, what: &str, done: impl Fn(&str) -> bool) {
    let sql = format!("SELECT {columns} FROM cdc.sources WHERE name = 's3s'");
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let rows = query(engine, &sql).await;
        if rows.first().is_some_and(|r| done(r)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the source never became {what}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the newest checkpoint holds everything published.
fn checkpoint_caught_up(engine: &Engine) -> bool {
    let source = engine.source("s3s").unwrap();
    let published = source.published.load().position.clone();
    published.is_some() && source.status().durable_position == published
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_that_cannot_reach_the_store_are_retried_and_lose_nothing() {
    let moto = tokio::task::spawn_blocking(Moto::start).await.unwrap();
    moto.create_bucket(BUCKET);
    // The engine reaches the store only through a proxy that refuses and resets connections;
    // the store client does not retry on its own, so every failure reaches the checkpoints.
    let proxy = common::proxy::FaultProxy::start(moto.port).await;
    let mut options = engine_options(&moto);
    for (key, value) in &mut options.store {
        if key == "aws_endpoint" {
            *value = format!("http://127.0.0.1:{}", proxy.port());
        }
    }
    options.store.push(("max_retries".into(), "0".into()));
    let location = format!("s3://{BUCKET}/engines/faults");
    let srv = server();
    let db = "s3_faults_db";
    let mut conn = table_of_300_rows(srv, db).await;
    let engine = Engine::open(&location, options.clone()).await.unwrap();
    engine
        .sql(&format!(
            "CREATE SOURCE s3s FROM MYSQL '{}' WITH (tables = '{db}.t', chunk_size = 64, server_id = {})",
            srv.cdc_url(),
            source_server_id()
        ))
        .await
        .unwrap();
    engine.wait_ready("s3s").await.unwrap();
    caught_up(&engine).await;
    tokio::time::timeout(HANG_GUARD, async {
        while !checkpoint_caught_up(&engine) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the first checkpoint is never written");

    // The store goes away: open connections are reset, new ones dropped as they come.
    proxy.refuse_new(true);
    proxy.reset_all();
    thirty_transactions(&mut conn, db).await;
    wait_status(&engine, "state", "retrying", |r| r == "state=retrying").await;
    // Capture goes on meanwhile; only durability waits.
    caught_up(&engine).await;
    assert!(!checkpoint_caught_up(&engine), "a checkpoint got through");

    // The store is back: the next attempt writes everything published since.
    proxy.refuse_new(false);
    wait_status(&engine, "state, checkpoint_error", "running", |r| {
        r == "state=running checkpoint_error=NULL"
    })
    .await;
    tokio::time::timeout(HANG_GUARD, async {
        while !checkpoint_caught_up(&engine) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the checkpoints never caught up");
    let status = query(
        &engine,
        "SELECT retries >= 1 AS retried, last_error_sqlstate, checkpoint_failures >= 1 AS failed, \
         checkpoints >= 2 AS written, last_checkpoint_seconds >= 0 AS timed, \
         checkpoint_age_seconds < 3600 AS recent FROM cdc.sources",
    )
    .await;
    assert_eq!(
        status,
        ["retried=true last_error_sqlstate=58030 failed=true written=true timed=true recent=true"]
    );
    println!(
        "{} connections to the store through the faults, ridden out",
        proxy.accepted()
    );
    engine.shutdown().await.unwrap();
    let before = engine_changelog(&engine, "s3s", db, "t", "id, v, n").await;
    drop(engine);

    // A new engine resumes from the store exactly: nothing lost, nothing twice.
    let engine = Engine::open(&location, options).await.unwrap();
    engine.wait_ready("s3s").await.unwrap();
    caught_up(&engine).await;
    check(&engine, db).await;
    let mut after = engine_changelog(&engine, "s3s", db, "t", "id, v, n").await;
    after.sort();
    let mut before = before;
    before.sort();
    assert_eq!(after, before, "the resumed changelog differs");
}

/// The state of sink `sink` in `cdc.sinks`.
async fn sink_state(engine: &Engine, sink: &str) -> String {
    query(
        engine,
        &format!("SELECT state, error FROM cdc.sinks WHERE name = '{sink}'"),
    )
    .await
    .join(" ")
}

/// Waits until sink `sink`'s state and error contain `want`.
async fn wait_state(engine: &Engine, sink: &str, want: &str) {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let state = sink_state(engine, sink).await;
        if state.contains(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sink} does not reach {want}: {state}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The rows of Delta table `lake/<table>` on `moto`, read by Python `deltalake` straight
/// from the server (see [`delta_table_rows`]).
fn moto_delta_rows(moto: &Moto, table: &str, columns: &str, order: &str) -> Vec<String> {
    let options = format!(
        "{{'AWS_ENDPOINT_URL': {:?}, 'AWS_ALLOW_HTTP': 'true', 'AWS_ACCESS_KEY_ID': 'test', 'AWS_SECRET_ACCESS_KEY': 'test', 'AWS_REGION': 'us-east-1'}}",
        moto.endpoint()
    );
    delta_table_rows(&format!("s3://lake/{table}"), &options, columns, order)
}

/// The text of every file under `prefix` of `bucket` (a Delta log's JSON commits), read
/// straight from the server.
async fn delta_log_text(moto: &Moto, bucket: &str, prefix: &str) -> String {
    let store = AmazonS3Builder::new()
        .with_endpoint(moto.endpoint())
        .with_allow_http(true)
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_region("us-east-1")
        .with_bucket_name(bucket)
        .build()
        .unwrap();
    let listed: Vec<_> = futures::TryStreamExt::try_collect(object_store::ObjectStore::list(
        &store,
        Some(&ObjectPath::from(prefix)),
    ))
    .await
    .unwrap();
    let mut text = String::new();
    for meta in listed {
        if meta.location.as_ref().ends_with(".json") {
            let bytes = store
                .get(&meta.location)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sinks_on_s3_retry_an_unreachable_store_and_catch_up_exactly() {
    let _environment = AWS_ENVIRONMENT.lock().await;
    let moto = tokio::task::spawn_blocking(Moto::start).await.unwrap();
    moto.create_bucket("lake");
    // The sinks reach the store through a proxy that can cut it off and one that answers
    // chosen requests with HTTP errors; the readers go direct.
    let http = HttpFaults::start(moto.port).await;
    let proxy = common::proxy::FaultProxy::start(http.port()).await;
    sinks_use_s3_at(proxy.port());
    let db = "s3_sinks";
    let mut conn = table_of_300_rows(server(), db).await;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(
        dir.path().to_str().unwrap(),
        EngineOptions {
            allowed_locations: cdcfusion::engine::AllowedLocations::parse(&["s3://lake/"]).unwrap(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    engine
        .sql(&format!(
            "CREATE SOURCE s3k FROM MYSQL '{}' WITH (tables = '{db}.t', chunk_size = 64, server_id = {})",
            server().cdc_url(),
            next_server_id() * 2
        ))
        .await
        .unwrap();
    tokio::time::timeout(HANG_GUARD, engine.wait_ready("s3k"))
        .await
        .unwrap()
        .unwrap();
    engine
        .sql(&format!(
            "CREATE SINK lake_copy INTO DELTA 's3://lake/copy' WITH (commit_interval = '100ms') AS SELECT * FROM s3k.{db}.t"
        ))
        .await
        .unwrap();
    engine
        .sql(&format!(
            "CREATE SINK lake_log INTO PARQUET 's3://lake/log' WITH (commit_interval = '100ms') AS SELECT _op, _position, id, v FROM s3k.{db}.\"t$changelog\""
        ))
        .await
        .unwrap();
    thirty_transactions(&mut conn, db).await;
    sink_caught_up(&engine, "s3k", "lake_copy").await;
    sink_caught_up(&engine, "s3k", "lake_log").await;

    // The store goes away: open connections are cut and new ones dropped.
    proxy.refuse_new(true);
    proxy.reset_all();
    conn.query_drop(format!(
        "UPDATE {db}.t SET v = 'while away' WHERE id BETWEEN 40 AND 60; DELETE FROM {db}.t WHERE id = 70"
    ))
    .await
    .unwrap();
    for sink in ["lake_copy", "lake_log"] {
        wait_state(&engine, sink, "state=retrying").await;
    }
    proxy.refuse_new(false);
    conn.query_drop(format!(
        "UPDATE {db}.t SET n = n * 2 WHERE id BETWEEN 200 AND 230; INSERT INTO {db}.t VALUES (5000, 'back', 1)"
    ))
    .await
    .unwrap();
    sink_caught_up(&engine, "s3k", "lake_copy").await;
    sink_caught_up(&engine, "s3k", "lake_log").await;

    // The store answers with errors instead: first only the Delta log's writes, so every
    // try of a Delta commit writes its data files and then fails to commit them.
    let before = http.puts().len();
    http.arm(Fault::Fail, "PUT", "/lake/copy/_delta_log/");
    conn.query_drop(format!(
        "UPDATE {db}.t SET v = 'slow down' WHERE id BETWEEN 140 AND 160; DELETE FROM {db}.t WHERE id = 161"
    ))
    .await
    .unwrap();
    wait_state(&engine, "lake_copy", "state=retrying").await;
    let orphans: Vec<String> = http.puts()[before..]
        .iter()
        .filter(|p| p.starts_with("/lake/copy/") && p.ends_with(".parquet"))
        .cloned()
        .collect();
    assert!(
        !orphans.is_empty(),
        "the failed commits wrote data files first"
    );
    http.release();
    sink_caught_up(&engine, "s3k", "lake_copy").await;
    // Then every write of the Parquet sink.
    http.arm(Fault::Fail, "PUT", "/lake/log/");
    conn.query_drop(format!(
        "UPDATE {db}.t SET n = 7 WHERE id BETWEEN 162 AND 165"
    ))
    .await
    .unwrap();
    wait_state(&engine, "lake_log", "state=retrying").await;
    http.release();
    sink_caught_up(&engine, "s3k", "lake_copy").await;
    sink_caught_up(&engine, "s3k", "lake_log").await;
    assert!(http.faulted() > 0);
    let log_text = delta_log_text(&moto, "lake", "copy/_delta_log/").await;
    for orphan in &orphans {
        let file = orphan.rsplit('/').next().unwrap();
        assert!(
            !log_text.contains(file),
            "{orphan}, written by a commit that failed, is in the Delta log"
        );
    }
    println!(
        "{} HTTP errors answered; {} data files of failed Delta commits left out of the log",
        http.faulted(),
        orphans.len()
    );

    let rows: Vec<String> = lines(
        &engine,
        &format!("SELECT CAST(id AS VARCHAR) || '|' || v || '|' || CAST(n AS VARCHAR) AS line FROM s3k.{db}.t ORDER BY id"),
    )
    .await;
    let log: Vec<String> = lines(
        &engine,
        &format!("SELECT _position || '|' || _op || '|' || CAST(id AS VARCHAR) || '|' || v AS line FROM s3k.{db}.\"t$changelog\" ORDER BY _position"),
    )
    .await;
    let endpoint = moto.endpoint();
    let delta = moto_delta_rows(&moto, "copy", "id,v,n", "r['id']");
    assert_eq!(delta, rows, "the Delta table on S3 equals the source");
    let parquet = python_delta(&format!(
        "import pyarrow.parquet as pq, pyarrow.fs as fs\n\
         s3 = fs.S3FileSystem(endpoint_override={:?}, scheme='http', access_key='test', secret_key='test', region='us-east-1')\n\
         t = pq.read_table('lake/log', filesystem=s3).to_pylist()\n\
         t.sort(key=lambda r: r['_position'].encode())\n\
         for r in t:\n    print(f\"{{r['_position']}}|{{r['_op']}}|{{r['id']}}|{{r['v']}}\")\n",
        endpoint.trim_start_matches("http://")
    ));
    assert_eq!(
        parquet, log,
        "the Parquet files on S3 hold every change once"
    );
    drop(engine);
}

/// kill -9 of `cdcfusion serve` aimed between a Delta commit's data files and its log entry:
/// in each round the proxy holds the first write under `_delta_log/` that follows data files
/// and the process is killed while it waits. In half the rounds the held write never arrives;
/// in the others it arrives late, while the next process already runs (a dead writer's commit
/// racing the live one: the sink's `txn` app id makes the loser fail and start again from the
/// table). After the last round an engine opened on the same state resumes both Delta sinks
/// from their tables: the upsert table equals the source, the changelog table holds every
/// change exactly once, both read by Python `deltalake`, and no data file of a commit that
/// never arrived is in either log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_delta_data_files_and_their_commit_loses_and_doubles_nothing() {
    let seed: u64 = std::env::var("CDCFUSION_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::Rng::random(&mut rand::rng()));
    let rounds = 10;
    println!("seed {seed} (CDCFUSION_CRASH_SEED reproduces the workload and the delays)");
    let _environment = AWS_ENVIRONMENT.lock().await;
    let moto = tokio::task::spawn_blocking(Moto::start).await.unwrap();
    moto.create_bucket("lake");
    let http = HttpFaults::start(moto.port).await;
    sinks_use_s3_at(http.port());
    let srv = server();
    let db = "s3_kill_commit";
    let mut conn = root_conn(srv).await;
    common::workload::schema(&mut conn, db, 500).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let init = dir.path().join("init.sql");
    std::fs::write(
        &init,
        format!(
            "CREATE SOURCE IF NOT EXISTS s3c FROM MYSQL '{}' WITH (tables = '{db}.t, {db}.bag', chunk_size = 64, server_id = {});\n\
             CREATE SINK IF NOT EXISTS copy INTO DELTA 's3://lake/copy' WITH (commit_interval = '150ms') AS SELECT id, k, v, n FROM s3c.{db}.t;\n\
             CREATE SINK IF NOT EXISTS log INTO DELTA 's3://lake/log' WITH (commit_interval = '150ms') AS SELECT _op, _position, id FROM s3c.{db}.\"t$changelog\";\n",
            srv.cdc_url(),
            source_server_id()
        ),
    )
    .unwrap();
    let config = dir.path().join("cdcfusion.toml");
    std::fs::write(&config, "allowed_locations = [\"s3://lake/\"]\n").unwrap();
    let log = dir.path().join("serve.log");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writes = tokio::spawn(common::workload::writer(
        srv,
        db.to_string(),
        seed,
        10_000,
        std::sync::Arc::clone(&stop),
    ));
    let serve_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut killed_files = Vec::new();
    let mut late_files = Vec::new();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed ^ 0xde17a);
    let mut late = false;
    for round in 0..rounds {
        let mut child = spawn_serve(&state, &init, &config, &log, 1 << 20);
        if late {
            // The killed process's commit reaches the store late, while this one runs (and
            // while its own first log writes are held with it).
            let after = rand::Rng::random_range(&mut rng, 50..800);
            tokio::time::sleep(Duration::from_millis(after)).await;
            http.release();
            while http.held() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // Both tables exist before the first hold: a create commit has no data files.
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        while ["/lake/copy/_delta_log/", "/lake/log/_delta_log/"]
            .iter()
            .any(|prefix| !http.puts().iter().any(|p| p.starts_with(prefix)))
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the sinks create no tables; serve log:\n{}",
                serve_log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let before = http.puts().len();
        http.arm(Fault::Hold, "PUT", "/_delta_log/");
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        let written = loop {
            let written: Vec<String> = http.puts()[before..]
                .iter()
                .filter(|p| !p.contains("/_delta_log/"))
                .cloned()
                .collect();
            if http.held() > 0 && !written.is_empty() {
                break written;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no Delta commit reaches its log write; serve log:\n{}",
                serve_log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        child.kill().unwrap();
        let status = child.wait().unwrap();
        // Every other round the held write never arrives; in the others it arrives late,
        // once the next process runs: a commit of a dead writer racing the live one.
        late = round % 2 == 1;
        if !late {
            http.drop_held();
            while http.held() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        println!(
            "round {round}: SIGKILL ({status}) with a log write held after {} data file(s); it {}",
            written.len(),
            if late {
                "arrives late"
            } else {
                "never arrives"
            }
        );
        if late {
            late_files.extend(written);
        } else {
            killed_files.extend(written);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let committed = writes.await.unwrap();
    println!("writer committed {committed} transactions");

    let engine = Engine::open(
        state.to_str().unwrap(),
        EngineOptions {
            allowed_locations: cdcfusion::engine::AllowedLocations::parse(&["s3://lake/"]).unwrap(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    if late {
        http.release();
    }
    tokio::time::timeout(HANG_GUARD, engine.wait_ready("s3c"))
        .await
        .expect("recovery hangs")
        .unwrap();
    sync_source(&engine, "s3c").await;
    common::workload::check(srv, &engine, "s3c", db).await;
    sink_caught_up(&engine, "s3c", "copy").await;
    sink_caught_up(&engine, "s3c", "log").await;
    let rows: Vec<String> = lines(
        &engine,
        &format!("SELECT CAST(id AS VARCHAR) || '|' || CAST(k AS VARCHAR) || '|' || COALESCE(v, 'NULL') || '|' || COALESCE(CAST(n AS VARCHAR), 'NULL') AS line FROM s3c.{db}.t ORDER BY id"),
    )
    .await;
    let changes: Vec<String> = lines(
        &engine,
        &format!("SELECT _position || '|' || _op || '|' || CAST(id AS VARCHAR) AS line FROM s3c.{db}.\"t$changelog\" ORDER BY _position"),
    )
    .await;
    assert_eq!(
        moto_delta_rows(&moto, "copy", "id,k,v,n", "r['id']"),
        rows,
        "the Delta upsert table equals the source"
    );
    assert_eq!(
        moto_delta_rows(&moto, "log", "_position,_op,id", "r['_position'].encode()"),
        changes,
        "the Delta changelog table holds every change once"
    );
    let mut logs = delta_log_text(&moto, "lake", "copy/_delta_log/").await;
    logs.push_str(&delta_log_text(&moto, "lake", "log/_delta_log/").await);
    for file in &killed_files {
        let name = file.rsplit('/').next().unwrap();
        assert!(
            !logs.contains(name),
            "{file}, written by a killed commit, is in a Delta log"
        );
    }
    // A late commit lands when it wins its version; either way nothing is lost or doubled.
    let landed = late_files
        .iter()
        .filter(|f| logs.contains(f.rsplit('/').next().unwrap()))
        .count();
    println!(
        "{rounds} kills between data files and commit; of the late commits' {} data files {landed} landed; {} data files of commits that never arrived left out of the logs; {} rows upserted, {} changes appended exactly once",
        late_files.len(),
        killed_files.len(),
        rows.len(),
        changes.len()
    );
    drop(engine);
}
