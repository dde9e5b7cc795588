//! Sink throughput and freshness, each beside a reference measured in the same run.
//!
//! Run with `cargo bench --bench sinks` (optionally `-- --rows N --rounds R --rate C
//! --seconds S --commit-entries E`; defaults 1,000,000 rows, 3 rounds, 10,000 changes/s for
//! 10 s, the sinks' default `max_commit_entries`). It starts its
//! own private MariaDB, fills the 7-column table and captures it; the table's changelog (the
//! snapshot's `r` entries) is what every sink writes.
//!
//! * **Throughput**, for each target (Parquet files, a PostgreSQL table on a private
//!   PostgreSQL the bench starts with the server's durability defaults, a Delta table): alternately (ABAB) a `CREATE SINK` that
//!   writes every entry, timed from the statement until the sink's status counts every row
//!   written, and the same Arrow batches written directly to a fresh target with the same
//!   library (parquet's `ArrowWriter` and `object_store`, one `COPY` through `tokio-postgres`,
//!   `deltalake`'s append). Prints each round and the median ratio (sink rows/s ÷ direct
//!   rows/s), and beside it the ratio of the process's CPU-seconds (direct ÷ sink), which shows
//!   the sink's extra work even where it runs on more cores than the direct write.
//! * **Freshness** of a changelog sink into each target with `commit_interval = '1s'` while a
//!   writer makes `--rate` single-row changes per second (in transactions of 100 rows) that
//!   carry their commit time: the time from the source commit until a poller (every 10 ms)
//!   sees the row in the target (PostgreSQL: a query; Parquet: a new file; Delta: a new log
//!   entry's files), p50 and p99. `--seconds 0` leaves it out.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arrow::array::RecordBatch;
use cdcfusion::devserver::{DevPostgres, DevPostgresOptions, DevServer};
use cdcfusion::engine::{AllowedLocations, Engine, EngineOptions};
use cdcfusion::sinks::{copy_text, SinkState};
use futures::SinkExt;
use mysql_async::prelude::Queryable;
use object_store::ObjectStoreExt;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SELECT: &str =
    "SELECT _op, _position, _commit_ts, id, a, b, c, d, e, f FROM src.bench.\"t$changelog\"";

const PG_DB: &str = "cdcfusion_bench_sinks";

/// The private PostgreSQL every PostgreSQL figure writes to (durability as a server's defaults).
fn pg_server() -> &'static DevPostgres {
    static SERVER: std::sync::OnceLock<DevPostgres> = std::sync::OnceLock::new();
    SERVER.get_or_init(|| {
        DevPostgres::start_with(DevPostgresOptions { durable: true })
            .expect("a private PostgreSQL (apt-get install postgresql)")
    })
}

async fn pg(db: &str) -> tokio_postgres::Client {
    let conninfo = pg_server().conninfo(db);
    let (client, connection) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("the private PostgreSQL ({conninfo}): {e}"));
    tokio::spawn(connection);
    client
}

fn pg_url() -> String {
    pg_server().url(PG_DB)
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Parquet,
    Postgres,
    Delta,
}

/// The sink's target clause for round `round`.
fn target(kind: Kind, out: &std::path::Path, round: usize) -> String {
    match kind {
        Kind::Parquet => format!("PARQUET 'file://{}/sink-parquet-{round}'", out.display()),
        Kind::Postgres => format!("POSTGRES '{}' TABLE 'sink_{round}'", pg_url()),
        Kind::Delta => format!("DELTA 'file://{}/sink-delta-{round}'", out.display()),
    }
}

/// Waits until sink `name` has written `entries` rows, reading its status directly (a status
/// query every few milliseconds would take CPU from the sink it measures).
async fn caught_up(engine: &Engine, name: &str, entries: u64) {
    let sink = engine.sink(name).unwrap();
    loop {
        let status = sink.status();
        assert!(
            status.state != SinkState::Failed,
            "sink {name}: {:?}",
            status.error
        );
        if status.rows >= entries {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Writes `batches` directly into a fresh target of `kind`.
async fn direct(kind: Kind, batches: &[RecordBatch], out: &std::path::Path, round: usize) {
    match kind {
        Kind::Parquet => {
            let dir = out.join(format!("direct-parquet-{round}"));
            std::fs::create_dir_all(&dir).unwrap();
            let store = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
            let properties = parquet::file::properties::WriterProperties::builder()
                .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
                .build();
            let mut buffer = Vec::new();
            let mut writer = parquet::arrow::ArrowWriter::try_new(
                &mut buffer,
                batches[0].schema(),
                Some(properties),
            )
            .unwrap();
            for b in batches {
                writer.write(b).unwrap();
            }
            writer.close().unwrap();
            store
                .put(
                    &object_store::path::Path::from("part.parquet"),
                    bytes::Bytes::from(buffer).into(),
                )
                .await
                .unwrap();
        }
        Kind::Postgres => {
            let mut client = pg(PG_DB).await;
            let tx = client.transaction().await.unwrap();
            tx.batch_execute(&format!(
                "CREATE TABLE direct_{round} (_op text, _position text, _commit_ts timestamptz, id bigint, a integer, b text, c numeric(12,2), d timestamp, e double precision, f numeric(20,0))"
            ))
            .await
            .unwrap();
            let sink = tx
                .copy_in::<_, bytes::Bytes>(&format!(
                    "COPY direct_{round} (_op, _position, _commit_ts, id, a, b, c, d, e, f) FROM STDIN"
                ))
                .await
                .unwrap();
            futures::pin_mut!(sink);
            for b in batches {
                sink.send(bytes::Bytes::from(copy_text(b).unwrap()))
                    .await
                    .unwrap();
            }
            sink.finish().await.unwrap();
            tx.commit().await.unwrap();
        }
        Kind::Delta => {
            let dir = out.join(format!("direct-delta-{round}"));
            let url = deltalake::ensure_table_uri(dir.to_str().unwrap()).unwrap();
            let table = deltalake::DeltaTable::try_from_url(url).await.unwrap();
            table
                .write(batches.to_vec())
                .with_save_mode(deltalake::protocol::SaveMode::Append)
                .await
                .unwrap();
        }
    }
}

fn micros_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(0))
}

/// Reads what has become visible in a freshness sink's target since the last poll.
enum Poller {
    Postgres {
        client: tokio_postgres::Client,
        last: String,
    },
    /// A Parquet sink's directory: files appear whole, once per commit.
    Parquet {
        dir: std::path::PathBuf,
        seen: std::collections::HashSet<std::path::PathBuf>,
    },
    /// A Delta table: a commit is visible once its log entry exists; its data files are
    /// the log entry's `add` actions.
    Delta {
        dir: std::path::PathBuf,
        seen: std::collections::HashSet<std::path::PathBuf>,
    },
}

/// The `b` values of every row of the Parquet file at `path`.
fn parquet_b_values(path: &std::path::Path) -> Vec<Option<String>> {
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let b = batch.column_by_name("b").unwrap();
        let b = arrow::compute::cast(b, &arrow::datatypes::DataType::Utf8).unwrap();
        let b = b
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .unwrap();
        out.extend(b.iter().map(|v| v.map(str::to_string)));
    }
    out
}

/// Every file under `dir` whose name ends with `suffix`.
fn files_under(dir: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path, suffix));
        } else if path.to_string_lossy().ends_with(suffix) {
            out.push(path);
        }
    }
    out.sort();
    out
}

impl Poller {
    /// The `b` values of the rows visible since the last poll.
    async fn poll(&mut self) -> Vec<Option<String>> {
        match self {
            Poller::Postgres { client, last } => {
                let rows = client
                    .query(
                        "SELECT _position, b FROM fresh WHERE _position COLLATE \"C\" > $1 ORDER BY _position COLLATE \"C\"",
                        &[&*last],
                    )
                    .await
                    .unwrap_or_default();
                let mut out = Vec::with_capacity(rows.len());
                for r in &rows {
                    *last = r.get(0);
                    out.push(r.get(1));
                }
                out
            }
            Poller::Parquet { dir, seen } => {
                let mut out = Vec::new();
                for path in files_under(dir, ".parquet") {
                    if seen.insert(path.clone()) {
                        out.extend(parquet_b_values(&path));
                    }
                }
                out
            }
            Poller::Delta { dir, seen } => {
                let mut out = Vec::new();
                for log in files_under(&dir.join("_delta_log"), ".json") {
                    if !seen.insert(log.clone()) {
                        continue;
                    }
                    let text = std::fs::read_to_string(&log).unwrap();
                    for line in text.lines() {
                        let action: serde_json::Value = serde_json::from_str(line).unwrap();
                        if let Some(path) = action["add"]["path"].as_str() {
                            out.extend(parquet_b_values(&dir.join(path)));
                        }
                    }
                }
                out
            }
        }
    }
}

/// Source-commit-to-visible latencies (ms) of a changelog sink into `kind` with
/// `commit_interval = '1s'` at `rate` changes/s for `seconds`.
async fn freshness(
    engine: &Engine,
    server: &DevServer,
    kind: Kind,
    out: &std::path::Path,
    rows: u64,
    rate: u64,
    seconds: u64,
) -> Vec<f64> {
    let (target, mut poller) = match kind {
        Kind::Postgres => (
            format!("POSTGRES '{}' TABLE 'fresh'", pg_url()),
            Poller::Postgres {
                client: pg(PG_DB).await,
                last: String::new(),
            },
        ),
        Kind::Parquet => {
            let dir = out.join("fresh-parquet");
            (
                format!("PARQUET 'file://{}'", dir.display()),
                Poller::Parquet {
                    dir,
                    seen: Default::default(),
                },
            )
        }
        Kind::Delta => {
            let dir = out.join("fresh-delta");
            (
                format!("DELTA 'file://{}'", dir.display()),
                Poller::Delta {
                    dir,
                    seen: Default::default(),
                },
            )
        }
    };
    engine
        .sql(&format!(
            "CREATE SINK fresh INTO {target} WITH (commit_interval = '1s', start = 'now') AS SELECT _op, _position, id, b FROM src.bench.\"t$changelog\""
        ))
        .await
        .unwrap();
    let url = server.root_url();
    let writer = tokio::spawn(async move {
        let mut conn = mysql_async::Conn::from_url(url).await.unwrap();
        let per_tx = 100u64;
        let txs = rate * seconds / per_tx;
        let started = Instant::now();
        for i in 0..txs {
            let due = started + Duration::from_secs_f64(i as f64 * per_tx as f64 / rate as f64);
            tokio::time::sleep_until(due.into()).await;
            let first = (i * per_tx) % rows + 1;
            conn.query_drop("START TRANSACTION").await.unwrap();
            conn.query_drop(format!(
                "UPDATE bench.t SET b = 'pending' WHERE id BETWEEN {first} AND {}",
                first + per_tx - 1
            ))
            .await
            .unwrap();
            // The commit time goes into the rows just before the commit.
            conn.query_drop(format!(
                "UPDATE bench.t SET b = '{}' WHERE id BETWEEN {first} AND {}",
                micros_now(),
                first + per_tx - 1
            ))
            .await
            .unwrap();
            conn.query_drop("COMMIT").await.unwrap();
        }
        txs * per_tx
    });
    let mut latencies = Vec::new();
    let mut idle_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let values = poller.poll().await;
        let now = micros_now();
        for b in &values {
            if let Some(at) = b.as_deref().and_then(|b| b.parse::<i64>().ok()) {
                latencies.push((now - at) as f64 / 1000.0);
            }
        }
        if writer.is_finished() {
            if values.is_empty() {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(3) {
                    break;
                }
            } else {
                idle_since = None;
            }
        }
    }
    let written = writer.await.unwrap();
    println!(
        "freshness ({kind:?}): {written} changes written, {} seen in the target",
        latencies.len()
    );
    engine.sql("DROP SINK fresh").await.unwrap();
    latencies
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        return f64::NAN;
    }
    let i = ((values.len() - 1) as f64 * p).round() as usize;
    values[i]
}

#[tokio::main]
async fn main() {
    cdcfusion::allocator::tune();
    common::init_logs();
    let total = common::rows_arg(1_000_000);
    let rounds = common::arg("--rounds", 3usize);
    let rate = common::u64_arg("--rate", 10_000);
    let seconds = common::u64_arg("--seconds", 10);
    // The sinks' `max_commit_entries` (0: the default).
    let bound = match common::u64_arg("--commit-entries", 0) {
        0 => String::new(),
        n => format!(", max_commit_entries = {n}"),
    };
    let (server, _conn) = common::server_with_rows(total).await;

    pg_server().create_database(PG_DB).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let options = EngineOptions {
        allowed_locations: AllowedLocations::parse(&[format!("file://{}/", out.display())])
            .unwrap(),
        ..Default::default()
    };
    let engine = Engine::open(dir.path().join("state").to_str().unwrap(), options)
        .await
        .unwrap();
    engine
        .sql(&format!(
            "CREATE SOURCE src FROM MYSQL '{}' WITH (tables = 'bench.t', server_id = 9400)",
            server.cdc_url()
        ))
        .await
        .unwrap();
    engine.wait_ready("src").await.unwrap();
    // The snapshot's checkpoint is written before any round, not during the first ones.
    engine
        .source("src")
        .unwrap()
        .checkpoint_now()
        .await
        .unwrap();
    // The sink's own work beyond writing: reading the changelog and running its query over it.
    let mut reads = Vec::new();
    let mut batches: Vec<RecordBatch> = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        batches = engine.sql(SELECT).await.unwrap().collect().await.unwrap();
        reads.push(started.elapsed().as_secs_f64());
    }
    let entries: usize = batches.iter().map(RecordBatch::num_rows).sum();
    println!(
        "{entries} changelog entries (10 columns) into each target, {rounds} rounds; reading them with the sink's query takes {:.2} s (median of 3)",
        common::median(&mut reads)
    );

    for kind in [Kind::Parquet, Kind::Postgres, Kind::Delta] {
        let (mut ratios, mut cpu_ratios) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let name = format!("bench_{}_{round}", format!("{kind:?}").to_lowercase());
            let cpu = common::cpu_seconds(std::process::id());
            let started = Instant::now();
            engine
                .sql(&format!(
                    "CREATE SINK {name} INTO {} WITH (commit_interval = '1s'{bound}) AS {SELECT}",
                    target(kind, &out, round)
                ))
                .await
                .unwrap();
            caught_up(&engine, &name, entries as u64).await;
            let sink = started.elapsed();
            let sink_cpu = common::cpu_seconds(std::process::id()) - cpu;
            engine.sql(&format!("DROP SINK {name}")).await.unwrap();
            let cpu = common::cpu_seconds(std::process::id());
            let started = Instant::now();
            direct(kind, &batches, &out, round).await;
            let reference = started.elapsed();
            let direct_cpu = common::cpu_seconds(std::process::id()) - cpu;
            let rate = |d: Duration| entries as f64 / d.as_secs_f64() / 1e6;
            println!(
                "{kind:?} round {round}: sink {:.3} M rows/s ({:.2} s, {sink_cpu:.2} CPU-s), direct {:.3} M rows/s ({:.2} s, {direct_cpu:.2} CPU-s)",
                rate(sink),
                sink.as_secs_f64(),
                rate(reference),
                reference.as_secs_f64()
            );
            ratios.push(reference.as_secs_f64() / sink.as_secs_f64());
            cpu_ratios.push(direct_cpu / sink_cpu.max(0.01));
        }
        println!(
            "{kind:?}: median ratio sink/direct {:.2} (CPU-seconds direct/sink {:.2})",
            common::median(&mut ratios),
            common::median(&mut cpu_ratios)
        );
    }

    if seconds > 0 {
        for kind in [Kind::Parquet, Kind::Postgres, Kind::Delta] {
            let mut latencies = freshness(&engine, &server, kind, &out, total, rate, seconds).await;
            let p50 = percentile(&mut latencies, 0.5);
            let p99 = percentile(&mut latencies, 0.99);
            println!(
                "freshness ({kind:?}) at {rate} changes/s, commit_interval 1s: source commit to visible in the target p50 {p50:.0} ms, p99 {p99:.0} ms"
            );
        }
    }
    drop(engine);
}
