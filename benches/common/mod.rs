//! Shared by the benchmarks: the command-line row count, the 7-column table every benchmark
//! fills the same way, and the `mariadb` client reference.
#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

/// `--rows N` from the command line, else `default`.
pub fn rows_arg(default: u64) -> u64 {
    u64_arg("--rows", default)
}

/// `name N` from the command line, else `default`.
pub fn u64_arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Creates the empty table `bench.t` (7 columns: integers, text, DECIMAL, DATETIME(6), DOUBLE).
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
        "INSERT INTO bench.t SELECT seq, seq % 100000, CONCAT('name-', LPAD(seq, 8, '0')),
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
