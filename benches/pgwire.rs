//! The PostgreSQL front end beside the machine's PostgreSQL serving the same rows, measured in
//! the same run with the same client (tokio-postgres): simple-query round trip and primary-key
//! point lookup (p50, p99), and rows/s of a large result.
//!
//! Run with `cargo bench --bench pgwire` (optionally `-- --rows N`, default 200,000). It starts
//! its own private MariaDB, captures the shared 7-column table, serves it on a free port, and
//! needs a PostgreSQL on 127.0.0.1:5432 that trusts local connections and has a database
//! `test` (override with `PGBENCH_REFERENCE`, a libpq connection string); it creates a
//! uniquely named table there and drops it at the end.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cdcfusion::capture::{CaptureOptions, SnapshotMode};
use cdcfusion::config::{AuthMethod, FrontendSettings};
use cdcfusion::devserver::{DevServer, DevServerOptions};
use cdcfusion::engine::Engine;
use cdcfusion::frontend::Server;
use futures::{pin_mut, TryStreamExt};
use rand::{Rng, SeedableRng};
use tokio_postgres::{Client, NoTls};

/// The allocator the `cdcfusion` binary uses, so the figures match it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Round trips and point lookups per side.
const SAMPLES: usize = 2000;
/// Full reads per side (the best one counts).
const SCANS: usize = 3;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn connect(conninfo: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {conninfo}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// p50 and p99 of `SELECT 1` over the simple protocol.
async fn round_trips(client: &Client) -> (Duration, Duration) {
    let mut times = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let started = Instant::now();
        client.simple_query("SELECT 1").await.unwrap();
        times.push(started.elapsed());
    }
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

/// p50 and p99 of a prepared primary-key lookup with random keys.
async fn lookups(client: &Client, table: &str, total: u64) -> (Duration, Duration) {
    let statement = client
        .prepare(&format!("SELECT * FROM {table} WHERE id = $1"))
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut times = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let id = rng.random_range(1..=total) as i64;
        let started = Instant::now();
        let rows = client.query(&statement, &[&id]).await.unwrap();
        times.push(started.elapsed());
        assert_eq!(rows.len(), 1);
    }
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

/// Rows/s of `SELECT *` streamed in binary format (best of [`SCANS`]).
async fn scan(client: &Client, table: &str, total: u64) -> f64 {
    let statement = client
        .prepare(&format!("SELECT * FROM {table}"))
        .await
        .unwrap();
    let mut best = Duration::MAX;
    for _ in 0..SCANS {
        let started = Instant::now();
        let rows = client
            .query_raw(&statement, std::iter::empty::<i64>())
            .await
            .unwrap();
        pin_mut!(rows);
        let mut n = 0u64;
        while rows.try_next().await.unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, total);
        best = best.min(started.elapsed());
    }
    total as f64 / best.as_secs_f64()
}

fn ratio(ours: Duration, reference: Duration) -> f64 {
    ours.as_secs_f64() / reference.as_secs_f64()
}

#[tokio::main]
async fn main() {
    let total = common::rows_arg(200_000);
    let reference = std::env::var("PGBENCH_REFERENCE").unwrap_or_else(|_| {
        // Like libpq: the operating-system user name when none is given.
        let user = std::env::var("USER").unwrap_or_else(|_| "postgres".into());
        format!("host=127.0.0.1 port=5432 dbname=test user={user}")
    });

    // cdcfusion: capture the table, serve it.
    let mariadb = DevServer::start(DevServerOptions::default()).expect("private MariaDB");
    let mut conn = mysql_async::Conn::from_url(mariadb.root_url())
        .await
        .unwrap();
    common::create_table(&mut conn).await;
    common::insert_rows(&mut conn, 1, total).await;
    let engine = Arc::new(Engine::new());
    let mut options = CaptureOptions::new("bench.t", SnapshotMode::Initial);
    options.server_id = 9200;
    options.snapshot.window_server_id = 9201;
    engine
        .create_source("src", &mariadb.cdc_url(), options)
        .unwrap();
    engine.wait_ready("src").await.unwrap();
    let settings = FrontendSettings {
        auth: AuthMethod::Trust,
        ..FrontendSettings::default()
    };
    let server = Server::bind(
        Arc::clone(&engine),
        "127.0.0.1:0".parse().unwrap(),
        settings,
    )
    .await
    .unwrap();
    let port = server.local_addr().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let ours = connect(&format!("host=127.0.0.1 port={port} user=bench dbname=src")).await;

    // The reference: the same rows in the machine's PostgreSQL.
    let pg = connect(&reference).await;
    let table = format!(
        "cdcfusion_bench_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    pg.batch_execute(&format!(
        "CREATE TABLE {table} (id BIGINT PRIMARY KEY, a INT NOT NULL, b VARCHAR(32) NOT NULL,
           c NUMERIC(12,2) NOT NULL, d TIMESTAMP NOT NULL, e DOUBLE PRECISION NOT NULL, f NUMERIC(20,0));
         INSERT INTO {table} SELECT s, s % 100000, 'name-' || lpad(s::text, 8, '0'), (s % 99999) + 0.25,
           TIMESTAMP '2024-01-01' + s * INTERVAL '1 second', s / 7.0, s * 3
         FROM generate_series(1, {total}) s;
         ANALYZE {table};"
    ))
    .await
    .unwrap();

    println!("PostgreSQL front end, {total} rows × 7 columns, beside PostgreSQL on the same rows");
    let (o50, o99) = round_trips(&ours).await;
    let (r50, r99) = round_trips(&pg).await;
    println!(
        "  simple-query round trip  p50: cdcfusion {o50:?}, PostgreSQL {r50:?}, ratio {:.2}",
        ratio(o50, r50)
    );
    println!(
        "  simple-query round trip  p99: cdcfusion {o99:?}, PostgreSQL {r99:?}, ratio {:.2}",
        ratio(o99, r99)
    );
    let (o50, o99) = lookups(&ours, "bench.t", total).await;
    let (r50, r99) = lookups(&pg, &table, total).await;
    println!(
        "  PK point lookup          p50: cdcfusion {o50:?}, PostgreSQL {r50:?}, ratio {:.2}",
        ratio(o50, r50)
    );
    println!(
        "  PK point lookup          p99: cdcfusion {o99:?}, PostgreSQL {r99:?}, ratio {:.2}",
        ratio(o99, r99)
    );
    let ours_rate = scan(&ours, "bench.t", total).await;
    let pg_rate = scan(&pg, &table, total).await;
    println!(
        "  large result (binary)        : cdcfusion {ours_rate:.0} rows/s, PostgreSQL {pg_rate:.0} rows/s, ratio {:.2}",
        ours_rate / pg_rate
    );

    pg.batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
    let _ = stop.send(());
    let _ = serving.await;
}
