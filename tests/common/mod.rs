//! Shared fixtures for integration tests: the private MariaDB, a database per test, readers
//! with unique replica ids, and a guard against hangs.
#![allow(dead_code)]

pub mod durable;
pub mod http_faults;
pub mod proxy;
pub mod readers;
pub mod workload;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use arrow::array::RecordBatch;
use cdcfusion::change::position::StartPosition;
use cdcfusion::change::SourceTransaction;
use cdcfusion::devserver::DevServer;
use cdcfusion::source::binlog::{table_filter, BinlogReader, BinlogReaderOptions};
use cdcfusion::source::connect::ConnectOptions;
use mysql_async::prelude::Queryable;
use mysql_async::Conn;

/// Upper bound for any single wait on the server; reaching it means the test hangs.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

pub fn server() -> &'static DevServer {
    DevServer::shared()
}

/// A replica server id no other reader of this test binary uses.
pub fn next_server_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1000);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A replica server id for a source created by `CREATE SOURCE`: its snapshot's window reader
/// registers as the next id, so that one is reserved too.
pub fn source_server_id() -> u32 {
    let id = next_server_id();
    next_server_id();
    id
}

pub async fn root_conn(server: &DevServer) -> Conn {
    Conn::from_url(server.root_url())
        .await
        .expect("root connection")
}

/// Creates an empty database for one test.
pub async fn fresh_db(conn: &mut Conn, name: &str) {
    conn.query_drop(format!("DROP DATABASE IF EXISTS {name}"))
        .await
        .unwrap();
    conn.query_drop(format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
}

/// A reader of `db.*` on `server` as the CDC user, starting at `start`.
pub async fn reader(server: &DevServer, db: &str, start: StartPosition) -> BinlogReader {
    let connect = ConnectOptions::from_url(&server.cdc_url()).unwrap();
    let options = BinlogReaderOptions::new(next_server_id(), start)
        .with_filter(table_filter(&format!("{db}.*")).unwrap());
    BinlogReader::open(connect, options)
        .await
        .expect("open reader")
}

/// Reads transactions until one satisfies `last`, failing the test on a hang.
pub async fn read_until(
    reader: &mut BinlogReader,
    mut last: impl FnMut(&SourceTransaction) -> bool,
) -> Vec<SourceTransaction> {
    let mut out = Vec::new();
    loop {
        let tx = tokio::time::timeout(HANG_GUARD, reader.next())
            .await
            .expect("no transaction arrived: the reader hangs")
            .expect("reader error");
        let stop = last(&tx);
        out.push(tx);
        if stop {
            return out;
        }
    }
}

/// Transactions that carry row changes (DDL-only ones filtered out).
pub fn with_rows(txs: &[SourceTransaction]) -> Vec<&SourceTransaction> {
    txs.iter().filter(|t| t.num_rows() > 0).collect()
}

/// Writes a marker row in `db.marker` and returns when `reader` has passed it: everything
/// committed before the call has then been read.
pub async fn marker_table(conn: &mut Conn, db: &str) {
    conn.query_drop(format!(
        "CREATE TABLE IF NOT EXISTS {db}.marker (id INT PRIMARY KEY AUTO_INCREMENT)"
    ))
    .await
    .unwrap();
}

/// Renders each row of `batch` as `col=value` strings (NULL as `NULL`).
pub fn row_strings(batch: &arrow::array::RecordBatch) -> Vec<String> {
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    let opts = FormatOptions::default().with_null("NULL");
    let formatters: Vec<_> = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
        .collect();
    (0..batch.num_rows())
        .map(|r| {
            batch
                .schema()
                .fields()
                .iter()
                .zip(&formatters)
                .map(|(f, fmt)| format!("{}={}", f.name(), fmt.value(r)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// A new engine capturing every table of `db` as source `source` (a snapshot of `chunk_size`
/// rows per chunk, `parallelism` at a time), once its snapshot is handed over.
pub async fn capture_db(
    db: &str,
    source: &str,
    chunk_size: usize,
    parallelism: usize,
) -> cdcfusion::engine::Engine {
    use cdcfusion::capture::{CaptureOptions, SnapshotMode};
    let engine = cdcfusion::engine::Engine::new();
    let mut options = CaptureOptions::new(format!("{db}.*"), SnapshotMode::Initial);
    options.server_id = next_server_id();
    options.snapshot.window_server_id = next_server_id();
    options.snapshot.chunk_size = chunk_size;
    options.snapshot.parallelism = parallelism;
    engine
        .create_source(source, &server().cdc_url(), options)
        .unwrap();
    tokio::time::timeout(HANG_GUARD, engine.wait_ready(source))
        .await
        .expect("the snapshot hangs")
        .unwrap();
    engine
}

/// Waits until source `source` of `engine` has applied everything the shared server wrote.
pub async fn sync_source(engine: &cdcfusion::engine::Engine, source: &str) {
    let (target, _) = cdcfusion::source::connect::current_position(
        &mut root_conn(server()).await,
        cdcfusion::change::schema::Flavor::MariaDb,
    )
    .await
    .unwrap();
    let running = engine.source(source).unwrap();
    match tokio::time::timeout(HANG_GUARD, running.wait_for(&target)).await {
        Ok(reached) => reached.unwrap(),
        Err(_) => {
            let events: Vec<mysql_async::Row> = root_conn(server())
                .await
                .query(format!("SHOW BINLOG EVENTS IN '{}'", target.file))
                .await
                .unwrap();
            let events: Vec<String> = events
                .iter()
                .rev()
                .take(8)
                .map(|r| format!("{:?}", r.clone().unwrap()))
                .collect();
            panic!(
                "source {source} does not reach {target:?} (at {:?}); the binlog ends: {events:#?}",
                query(engine, "SELECT position FROM cdc.sources").await
            )
        }
    }
}

/// The rows of `select` (one `line` column) on `engine`, in order.
pub async fn lines(engine: &cdcfusion::engine::Engine, select: &str) -> Vec<String> {
    query(engine, select)
        .await
        .into_iter()
        .map(|r| r.trim_start_matches("line=").to_string())
        .collect()
}

/// The rows a query on `engine` returns, one string per row (panics naming the query).
pub async fn query(engine: &cdcfusion::engine::Engine, sql: &str) -> Vec<String> {
    query_reading(engine, sql, false).await
}

/// The SQLSTATE and message of the error of ours `sql` fails with on `engine`, as it crossed
/// DataFusion (a `Coded` error; panics naming the query when it answers or fails otherwise).
pub async fn sqlstate_error(engine: &cdcfusion::engine::Engine, sql: &str) -> (String, String) {
    use datafusion::error::DataFusionError;
    let error = match engine.sql(sql).await {
        Ok(frame) => match frame.collect().await {
            Ok(rows) => panic!("{sql} answers {rows:?}"),
            Err(e) => e,
        },
        Err(cdcfusion::engine::EngineError::DataFusion(e)) => e,
        Err(e) => panic!("{sql}: {e}"),
    };
    match error.find_root() {
        DataFusionError::External(e) => match e.downcast_ref::<cdcfusion::sqlstate::Coded>() {
            Some(coded) => (coded.code().code().to_string(), coded.to_string()),
            None => panic!("{sql}: {e}"),
        },
        other => panic!("{sql}: {other}"),
    }
}

/// One value of the first row `sql` returns on `engine`.
pub async fn scalar(engine: &cdcfusion::engine::Engine, sql: &str) -> String {
    let rows = query(engine, sql).await;
    let row = rows.first().unwrap_or_else(|| panic!("{sql}: no row"));
    row.split_once('=')
        .map(|(_, v)| v.to_string())
        .unwrap_or_default()
}

/// [`query`] in a session that reads the last state of stopped tables when `stale` is set.
pub async fn query_reading(
    engine: &cdcfusion::engine::Engine,
    sql: &str,
    stale: bool,
) -> Vec<String> {
    let policy = std::sync::Arc::new(cdcfusion::provider::health::ReadPolicy::new(stale));
    let batches: Vec<RecordBatch> = engine
        .sql_with(sql, move |mut state| {
            state.config_mut().set_extension(policy);
            state
        })
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    batches.iter().flat_map(row_strings).collect()
}

/// Installs Python packages from PyPI into `dir` under the test build directory, once (again
/// when the pins change); returns `dir` for `PYTHONPATH`. `requirement` may name several
/// packages, separated by spaces; every version, dependencies included, is pinned by
/// `tests/clients/python-constraints.txt`. `marker`, a path inside `dir`, shows an install
/// that finished.
#[allow(dead_code)] // Not every test binary runs Python clients.
pub fn pip_install(dir: &str, marker: &str, requirement: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir);
    let constraints = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients/python-constraints.txt");
    let pins = format!(
        "{requirement}\n{}",
        std::fs::read_to_string(&constraints).expect("tests/clients/python-constraints.txt")
    );
    let stamp = dir.join(".cdcfusion-pins");
    let installed = std::fs::read_to_string(&stamp).is_ok_and(|s| s == pins);
    if !installed || !dir.join(marker).exists() {
        setup_script("python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip");
        let _ = std::fs::remove_dir_all(&dir);
        let status = std::process::Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-warn-conflicts",
            ])
            .arg("--target")
            .arg(&dir)
            .arg("--constraint")
            .arg(&constraints)
            .args(requirement.split_whitespace())
            .status()
            .unwrap_or_else(|e| panic!("python3 with pip is needed to install {requirement}: {e}"));
        assert!(status.success(), "pip install {requirement} failed");
        std::fs::write(&stamp, pins).unwrap();
    }
    dir.display().to_string()
}

/// Runs `command` in a shell that has sourced `scripts/lib.sh`, whose helpers install Debian
/// packages (through `as_root`: directly as root, else with sudo), holding a lock file so
/// that no two such commands run at once. Panics with the command when
/// it fails.
pub fn setup_script(command: &str) {
    let status = std::process::Command::new("bash")
        .arg("-c")
        // One at a time across test binaries: two package installs at once fail on apt's
        // lock.
        .arg(format!(
            "exec 9>\"${{TMPDIR:-/tmp}}/cdcfusion-test-setup.lock\" && flock 9 && \
             . scripts/lib.sh && {command}"
        ))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap_or_else(|e| panic!("bash cannot run `{command}`: {e}"));
    assert!(
        status.success(),
        "`{command}` (scripts/lib.sh) failed: {status}"
    );
}

/// The folder of real MySQL binlog files beside the checkout, read in place; a missing folder
/// fails the test (a check that cannot run must not pass).
pub fn mysql_fixtures() -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/mysql-binlogs");
    assert!(
        dir.is_dir(),
        "no MySQL binlog fixtures at {}: these tests read them in place",
        dir.display()
    );
    dir
}
