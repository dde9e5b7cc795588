//! The PostgreSQL front end beside a private PostgreSQL serving the same rows, measured in
//! the same run with the same client (tokio-postgres): `SELECT 1` over the simple protocol, a
//! primary-key lookup whose literal changes every time over the simple protocol (so no cache
//! of statement text can flatter it), a prepared primary-key lookup (p50, p99), and rows/s of
//! a large result in binary format. The prepared lookup is measured again on a session that
//! plans every statement (`cdcfusion.point_lookups = off`), to show what the lookup from the
//! key index saves. A prepared lookup by `a`, which has a secondary index at the source (so
//! in the captured table too) and in PostgreSQL, is measured with indexes on and on a session
//! that scans instead (`cdcfusion.indexes = off`). A prepared range of 1,000 consecutive
//! keys is answered through the key's columns in order on both sides.
//!
//! cdcfusion runs as its own process (`cdcfusion serve`, as PostgreSQL does), capturing the
//! shared 7-column table from a private MariaDB. The two servers are measured alternately,
//! cdcfusion then PostgreSQL, for [`ROUNDS`] rounds; each figure is the median over the
//! rounds, and each ratio the median of the rounds' ratios (cdcfusion / PostgreSQL for
//! latencies, so lower is better; rows/s for the large result, so higher is better).
//!
//! Last, `pgbench -M prepared` runs a point-lookup script (a random key per transaction) on each
//! server with [`PGBENCH_CLIENTS`] clients, alternating for the same rounds, and compares the
//! transactions per second (higher is better). It is skipped, saying so, without `pgbench`.
//!
//! Run with `cargo bench --bench pgwire` (optionally `-- --rows N`, default 200,000, and
//! `--pgbench-seconds S`, default 10). The reference is a private PostgreSQL the bench starts
//! from the installed `postgresql` package, with the server's default settings, over TCP on
//! 127.0.0.1 as cdcfusion is (or the server `PGBENCH_REFERENCE` names, a libpq connection
//! string); it creates a uniquely named table there and drops it at the end.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cdcfusion::devserver::{DevPostgres, DevPostgresOptions, DevServer, DevServerOptions};
use futures::{pin_mut, TryStreamExt};
use mysql_async::prelude::Queryable;
use rand::{Rng, SeedableRng};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// Alternating rounds per measurement (ours, then the reference, each round).
const ROUNDS: usize = 7;
/// Round trips or lookups per side and round.
const SAMPLES: usize = 500;
/// Requests before each measurement, not counted.
const WARM_UP: usize = 100;
/// `pgbench` clients (`-c`) and threads (`-j`).
const PGBENCH_CLIENTS: usize = 4;
const PGBENCH_THREADS: usize = 2;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
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

/// A session of ours that ran `set` first.
async fn set_on(conninfo: &str, set: &str) -> Side {
    let client = connect(conninfo).await;
    client.batch_execute(set).await.unwrap();
    Side {
        client,
        table: "bench.t".into(),
    }
}

/// One server as the bench sees it: a client and the name of the table.
struct Side {
    client: Client,
    table: String,
}

/// p50 and p99 (µs) of `SAMPLES` runs of `once`.
async fn latencies<F, Fut>(mut once: F) -> (f64, f64)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for i in 0..WARM_UP {
        once(i).await;
    }
    let mut times = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let started = Instant::now();
        once(i).await;
        times.push(started.elapsed());
    }
    times.sort();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    (
        micros(common::percentile(&times, 0.5)),
        micros(common::percentile(&times, 0.99)),
    )
}

/// `SELECT 1` over the simple protocol.
async fn select_one(side: &Side) -> (f64, f64) {
    latencies(|_| async {
        side.client.simple_query("SELECT 1").await.unwrap();
    })
    .await
}

/// `SELECT * FROM t WHERE id = <random>` over the simple protocol: new text every time.
async fn literal_lookups(side: &Side, total: u64, seed: u64) -> (f64, f64) {
    let rng = std::cell::RefCell::new(rand::rngs::StdRng::seed_from_u64(seed));
    latencies(|_| {
        let id = rng.borrow_mut().random_range(1..=total);
        let sql = format!("SELECT * FROM {} WHERE id = {id}", side.table);
        async move {
            let messages = side.client.simple_query(&sql).await.unwrap();
            let rows = messages
                .iter()
                .filter(|m| matches!(m, SimpleQueryMessage::Row(_)))
                .count();
            assert_eq!(rows, 1);
        }
    })
    .await
}

/// p50 and p99 of a prepared `SELECT * FROM t WHERE <column> = $1`, bound to random values of
/// `pick`; `rows` says how many rows each value must find.
async fn prepared_by<T>(
    side: &Side,
    column: &str,
    seed: u64,
    pick: impl Fn(&mut rand::rngs::StdRng) -> T,
    rows: impl Fn(&T) -> u64,
) -> (f64, f64)
where
    T: tokio_postgres::types::ToSql + Sync + std::fmt::Debug,
{
    let statement = side
        .client
        .prepare(&format!("SELECT * FROM {} WHERE {column} = $1", side.table))
        .await
        .unwrap();
    let rng = std::cell::RefCell::new(rand::rngs::StdRng::seed_from_u64(seed));
    latencies(|_| {
        let value = pick(&mut rng.borrow_mut());
        let want = rows(&value);
        let statement = &statement;
        async move {
            let found = side.client.query(statement, &[&value]).await.unwrap();
            assert_eq!(found.len() as u64, want, "{column} = {value:?}");
        }
    })
    .await
}

/// A prepared `SELECT * FROM t WHERE id = $1` with random keys.
async fn prepared_lookups(side: &Side, total: u64, seed: u64) -> (f64, f64) {
    let pick = |rng: &mut rand::rngs::StdRng| rng.random_range(1..=total) as i64;
    prepared_by(side, "id", seed, pick, |_| 1).await
}

/// A prepared `SELECT * FROM t WHERE a = $1` (`a` has a secondary index on both sides) with
/// random values; the rows found are checked against the table's definition of `a`.
async fn prepared_index_lookups(side: &Side, total: u64, seed: u64) -> (f64, f64) {
    let m = common::A_MODULUS;
    let pick = |rng: &mut rand::rngs::StdRng| rng.random_range(0..total.min(m)) as i32;
    // Ids 1..=total whose remainder is `a`.
    let rows = |a: &i32| match *a as u64 {
        0 => total / m,
        a if a <= total => (total - a) / m + 1,
        _ => 0,
    };
    prepared_by(side, "a", seed, pick, rows).await
}

/// A prepared `SELECT * FROM t WHERE id >= $1 AND id < $2`: 1,000 consecutive keys from a
/// random start (the key's own index on both sides).
async fn prepared_ranges(side: &Side, total: u64, seed: u64) -> (f64, f64) {
    const RANGE: i64 = 1000;
    let statement = side
        .client
        .prepare(&format!(
            "SELECT * FROM {} WHERE id >= $1 AND id < $2",
            side.table
        ))
        .await
        .unwrap();
    let rng = std::cell::RefCell::new(rand::rngs::StdRng::seed_from_u64(seed));
    latencies(|_| {
        let low = rng.borrow_mut().random_range(1..=total as i64 - RANGE + 1);
        let statement = &statement;
        async move {
            let high = low + RANGE;
            let found = side.client.query(statement, &[&low, &high]).await.unwrap();
            assert_eq!(found.len() as i64, RANGE, "id in [{low}, {high})");
        }
    })
    .await
}

/// Rows/s of `SELECT *` streamed in binary format.
async fn scan(side: &Side, total: u64) -> f64 {
    let statement = side
        .client
        .prepare(&format!("SELECT * FROM {}", side.table))
        .await
        .unwrap();
    let started = Instant::now();
    let rows = side
        .client
        .query_raw(&statement, std::iter::empty::<i64>())
        .await
        .unwrap();
    pin_mut!(rows);
    let mut n = 0u64;
    while rows.try_next().await.unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, total);
    total as f64 / started.elapsed().as_secs_f64()
}

/// Transactions per second of `pgbench -M prepared` running `script` for `seconds` against
/// `conninfo` (a libpq connection string, passed as the database name).
fn pgbench(conninfo: &str, script: &std::path::Path, seconds: u64) -> f64 {
    let out = Command::new("pgbench")
        .args(["-n", "-M", "prepared", "-f"])
        .arg(script)
        .args(["-c", &PGBENCH_CLIENTS.to_string()])
        .args(["-j", &PGBENCH_THREADS.to_string()])
        .args(["-T", &seconds.to_string()])
        .arg(conninfo)
        .output()
        .expect("running pgbench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pgbench against {conninfo} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `tps = 1234.567890 (without initial connection time)`
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|tps| tps.parse().ok())
        .unwrap_or_else(|| panic!("no tps in pgbench's output: {stdout}"))
}

/// The point-lookup script of `pgbench` for `table` of `total` rows.
fn pgbench_script(
    dir: &std::path::Path,
    name: &str,
    table: &str,
    total: u64,
) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.pgbench"));
    std::fs::write(
        &path,
        format!("\\set id random(1, {total})\nSELECT * FROM {table} WHERE id = :id;\n"),
    )
    .unwrap();
    path
}

/// The `cdcfusion serve` process, killed when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cdcfusion serve` capturing `bench.t` from `url` on a free port, and returns it
/// with a client once the table holds all `total` rows.
async fn serve(url: &str, total: u64, dir: &std::path::Path) -> (Served, Client, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let init = dir.join("init.sql");
    std::fs::write(
        &init,
        format!(
            "CREATE SOURCE src FROM MYSQL '{url}' WITH (tables = 'bench.t', server_id = 9200);\n"
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_cdcfusion"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--init"])
        .arg(&init)
        .env("CDCFUSION_AUTH", "trust")
        .env("RUST_LOG", "cdcfusion=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("starting cdcfusion serve");
    let served = Served(child);
    let conninfo = format!("host=127.0.0.1 port={port} user=bench dbname=src");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        assert!(
            Instant::now() < deadline,
            "cdcfusion did not capture the table"
        );
        if let Ok((client, connection)) = tokio_postgres::connect(&conninfo, NoTls).await {
            tokio::spawn(async move {
                let _ = connection.await;
            });
            let count = client
                .query_one("SELECT count(*) FROM bench.t", &[])
                .await
                .ok()
                .map(|row| row.get::<_, i64>(0));
            if count == Some(total as i64) {
                return (served, client, conninfo);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Medians over the rounds of one latency measurement, printed.
fn report_latency(name: &str, ours: &[(f64, f64)], theirs: &[(f64, f64)]) {
    for (label, pick) in [("p50", 0usize), ("p99", 1)] {
        let get = |v: &(f64, f64)| if pick == 0 { v.0 } else { v.1 };
        let ratios = ours
            .iter()
            .zip(theirs)
            .map(|(o, t)| get(o) / get(t))
            .collect();
        println!(
            "  {name:<30} {label}: cdcfusion {:>7.0} µs, PostgreSQL {:>7.0} µs, ratio {:.2}",
            median(ours.iter().map(get).collect()),
            median(theirs.iter().map(get).collect()),
            median(ratios)
        );
    }
}

/// Medians over the rounds of one rate (higher is better), printed.
fn report_rate(name: &str, unit: &str, ours: &[f64], theirs: &[f64]) {
    let ratios = ours.iter().zip(theirs).map(|(o, t)| o / t).collect();
    println!(
        "  {name:<30}    : cdcfusion {:.0} {unit}, PostgreSQL {:.0} {unit}, ratio {:.2}",
        median(ours.to_vec()),
        median(theirs.to_vec()),
        median(ratios)
    );
}

#[tokio::main]
async fn main() {
    let total = common::rows_arg(200_000);
    let mut _private_pg = None;
    let reference = std::env::var("PGBENCH_REFERENCE").unwrap_or_else(|_| {
        let pg = DevPostgres::start_with(DevPostgresOptions { durable: true })
            .expect("a private PostgreSQL (apt-get install postgresql)");
        let conninfo = pg.conninfo("postgres");
        _private_pg = Some(pg);
        conninfo
    });

    // cdcfusion: its own process capturing the table from a private MariaDB.
    let mariadb = DevServer::start(DevServerOptions::default()).expect("private MariaDB");
    let mut conn = mysql_async::Conn::from_url(mariadb.root_url())
        .await
        .unwrap();
    common::create_table(&mut conn).await;
    common::insert_rows(&mut conn, 1, total).await;
    // A secondary index, mirrored by the capture (PostgreSQL's below).
    conn.query_drop("ALTER TABLE bench.t ADD KEY by_a (a)")
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("cdcfusion-pgwire-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_served, ours, conninfo) = serve(&mariadb.cdc_url(), total, &dir).await;
    let ours = Side {
        client: ours,
        table: "bench.t".into(),
    };
    // The same server with every statement planned (no point lookups from the key index).
    let planned = set_on(&conninfo, "SET cdcfusion.point_lookups = off").await;

    // The reference: the same rows in PostgreSQL.
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
         INSERT INTO {table} SELECT s, s % {modulus}, 'name-' || lpad(s::text, 8, '0'), (s % 99999) + 0.25,
           TIMESTAMP '2024-01-01' + s * INTERVAL '1 second', s / 7.0, s * 3
         FROM generate_series(1, {total}) s;
         CREATE INDEX ON {table} (a);
         ANALYZE {table};",
        modulus = common::A_MODULUS
    ))
    .await
    .unwrap();
    let theirs = Side { client: pg, table };

    println!(
        "PostgreSQL front end, {total} rows × 7 columns, beside PostgreSQL on the same rows \
         ({ROUNDS} alternating rounds, medians)"
    );
    let (mut o, mut t) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        o.push(select_one(&ours).await);
        t.push(select_one(&theirs).await);
    }
    report_latency("SELECT 1 (simple)", &o, &t);
    let (mut o, mut t) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS as u64 {
        o.push(literal_lookups(&ours, total, round).await);
        t.push(literal_lookups(&theirs, total, round).await);
    }
    report_latency("PK lookup, literal (simple)", &o, &t);
    let (mut o, mut t) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS as u64 {
        o.push(prepared_lookups(&ours, total, round).await);
        t.push(prepared_lookups(&theirs, total, round).await);
    }
    report_latency("PK lookup, prepared", &o, &t);
    let (mut o, mut t) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS as u64 {
        o.push(prepared_lookups(&planned, total, round).await);
        t.push(prepared_lookups(&theirs, total, round).await);
    }
    report_latency("PK lookup, prepared, planned", &o, &t);
    let (mut o, mut t) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS as u64 {
        o.push(prepared_index_lookups(&ours, total, round).await);
        t.push(prepared_index_lookups(&theirs, total, round).await);
    }
    report_latency("secondary-index lookup, prepared", &o, &t);
    let (mut o, mut t) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS as u64 {
        o.push(prepared_ranges(&ours, total, round).await);
        t.push(prepared_ranges(&theirs, total, round).await);
    }
    report_latency("PK range of 1,000 rows, prepared", &o, &t);
    let scanning = set_on(&conninfo, "SET cdcfusion.indexes = off").await;
    let (mut o, mut t) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS as u64 {
        o.push(prepared_index_lookups(&scanning, total, round).await);
        t.push(prepared_index_lookups(&theirs, total, round).await);
    }
    report_latency("same, indexes off (scan)", &o, &t);
    let (mut o, mut t) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        o.push(scan(&ours, total).await);
        t.push(scan(&theirs, total).await);
    }
    report_rate("large result (binary)", "rows/s", &o, &t);

    let has_pgbench = Command::new("pgbench")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if has_pgbench {
        let seconds = common::u64_arg("--pgbench-seconds", 10);
        let ours_script = pgbench_script(&dir, "ours", &ours.table, total);
        let theirs_script = pgbench_script(&dir, "theirs", &theirs.table, total);
        let (mut o, mut t) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            o.push(pgbench(&conninfo, &ours_script, seconds));
            t.push(pgbench(&reference, &theirs_script, seconds));
        }
        report_rate(
            &format!("pgbench -M prepared, -c {PGBENCH_CLIENTS}"),
            "tps",
            &o,
            &t,
        );
    } else {
        println!("  pgbench -M prepared: skipped, no `pgbench` on the PATH");
    }

    theirs
        .client
        .batch_execute(&format!("DROP TABLE {}", theirs.table))
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
