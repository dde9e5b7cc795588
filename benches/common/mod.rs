//! Shared by the benchmarks: the command-line row count, the 7-column table every benchmark
//! fills the same way, and the `mariadb` client reference.
#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

/// Logs at `warn` unless `RUST_LOG` says otherwise, so the figures are not drowned.
pub fn init_logs() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
}

/// `--rows N` from the command line, else `default`.
pub fn rows_arg(default: u64) -> u64 {
    u64_arg("--rows", default)
}

/// `name N` from the command line, else `default`.
pub fn u64_arg(name: &str, default: u64) -> u64 {
    arg(name, default)
}

/// A private MariaDB holding `bench.t` with rows `1..=total`, and a root connection to it.
pub async fn server_with_rows(total: u64) -> (cdcfusion::devserver::DevServer, Conn) {
    let server =
        cdcfusion::devserver::DevServer::start(Default::default()).expect("private MariaDB");
    let mut conn = Conn::from_url(server.root_url()).await.unwrap();
    create_table(&mut conn).await;
    insert_rows(&mut conn, 1, total).await;
    (server, conn)
}

/// Creates the empty table `bench.t` (7 columns: integers, text, DECIMAL, DATETIME(6), DOUBLE).
/// Column `a` of the bench table is its id modulo this.
pub const A_MODULUS: u64 = 100_000;

pub async fn create_table(conn: &mut Conn) {
    conn.query_drop(
        "CREATE DATABASE bench;
         CREATE TABLE bench.t (id BIGINT PRIMARY KEY, a INT NOT NULL, b VARCHAR(32) NOT NULL,
           c DECIMAL(12,2) NOT NULL, d DATETIME(6) NOT NULL, e DOUBLE NOT NULL, f BIGINT UNSIGNED)",
    )
    .await
    .unwrap();
}

/// Inserts rows `from..=to` of `bench.t` in one statement (MariaDB's sequence engine).
pub async fn insert_rows(conn: &mut Conn, from: u64, to: u64) {
    conn.query_drop(format!(
        "INSERT INTO bench.t SELECT seq, seq % {A_MODULUS}, CONCAT('name-', LPAD(seq, 8, '0')),
           (seq % 99999) + 0.25, '2024-01-01' + INTERVAL seq SECOND, seq / 7, seq * 3
         FROM bench.seq_{from}_to_{to}"
    ))
    .await
    .unwrap();
}

/// Time of `mariadb --quick -e 'SELECT * FROM bench.t' > /dev/null` against `port`.
pub fn time_mariadb_client(port: u16) -> Duration {
    let started = Instant::now();
    let status = Command::new("mariadb")
        .args(["--no-defaults", "--quick", "-h127.0.0.1", "-uroot"])
        .arg(format!("-P{port}"))
        .args(["-e", "SELECT * FROM bench.t"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    started.elapsed()
}

/// `name VALUE` from the command line (e.g. `--changes 1000`), else `default`.
pub fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The value at quantile `q` (0.5: the median, 1.0: the largest) of `sorted`, which is sorted
/// and not empty.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// The median of `values` (the upper one of an even count).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// User plus system CPU seconds of process `pid` so far.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}
