//! The clients people use, each run against cdcfusion and against a private PostgreSQL (the installed package's)
//! holding the same rows: SQLAlchemy 2 on psycopg 3 with pandas, and psycopg 2 (Python);
//! pgjdbc's `DatabaseMetaData`, result metadata, typed values, prepared statements and cursor
//! fetch (Java, the driver under DBeaver and Metabase); node-postgres with parameters of every
//! type, arrays included. Each client program (under `tests/clients/`) prints what it saw, one
//! fact per line, and the two outputs must be equal line by line: a difference is a client that
//! would behave differently against us.
//!
//! The captured MariaDB database and the reference's schema share a name, and the source and
//! the reference database share one, so names printed by the clients compare equal too.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use crate::fixture::*;
use crate::reference::Reference;

const MARIADB_SETUP: &str = "
    CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, price DECIMAL(12,2),
        qty BIGINT, ratio DOUBLE, created DATETIME(3), day DATE, doc JSON, note TEXT, data BLOB);
    INSERT INTO {db}.items SELECT seq, CONCAT('item ', seq), seq * 1.25, seq * 3, seq / 4,
        TIMESTAMP '2024-01-02 03:04:05.678' + INTERVAL seq HOUR, DATE '2024-03-01' + INTERVAL seq DAY,
        CONCAT('{\"k\": ', seq, '}'), IF(seq % 3 = 0, NULL, CONCAT('note ', seq)),
        UNHEX(CONCAT('0', seq % 10, 'ff'))
      FROM {db}.seq_1_to_12;
    CREATE TABLE {db}.lines (order_id INT, line INT, item_id INT NOT NULL,
        PRIMARY KEY (order_id, line));
    INSERT INTO {db}.lines VALUES (1, 1, 1), (1, 2, 2), (2, 1, 3);
    CREATE TABLE {db}.kinds (id INT PRIMARY KEY, code VARCHAR(64) NOT NULL, ts TIMESTAMP(3) NULL,
        dt DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), d DATE, t TIME, t3 TIME(3), f FLOAT,
        dbl DOUBLE);
    SET time_zone = '+00:00';
    INSERT INTO {db}.kinds VALUES
      (1, 'a', '2020-01-02 18:49:42.554', '2020-01-02 18:49:42', '2020-01-02 18:49:42.554',
       '2020-01-02 18:49:42.554321', '2020-01-02', '18:49:42', '18:49:42.5', 1.5, 1e300),
      (2, 'b', '2020-01-02 18:49:42.000', '1999-12-31 23:59:59', '1999-12-31 23:59:59.100',
       '1999-12-31 23:59:59.000001', '1999-12-31', '-838:59:59', '838:59:59.999', 0.1, 1.5e-5),
      (3, 'c', '1970-01-01 00:00:01.010', '2038-01-19 03:14:07', '2000-02-29 00:00:00.000',
       '2000-02-29 12:00:00.120000', '2000-02-29', '00:00:00', '-00:00:01.250', 1e10,
       123456789012345),
      (4, 'd', NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1234567, 1e15),
      (5, 'e', '2024-06-30 23:59:59.999', '2024-06-30 23:59:59', '2024-06-30 23:59:59.999',
       '2024-06-30 23:59:59.999999', '2024-06-30', '100:00:00', '-12:34:56.789', -0.000015,
       -2.5e-300);";

/// The same tables and rows in PostgreSQL's own types.
const REFERENCE_SETUP: &str = "
    CREATE SCHEMA {db};
    CREATE TABLE {db}.items (id integer PRIMARY KEY, name varchar(20) NOT NULL,
        price numeric(12,2), qty bigint, ratio double precision, created timestamp(3), day date,
        doc json, note text, data bytea);
    INSERT INTO {db}.items SELECT s, 'item ' || s, s * 1.25, s * 3, s / 4.0,
        timestamp '2024-01-02 03:04:05.678' + s * interval '1 hour', date '2024-03-01' + s,
        ('{\"k\": ' || s || '}')::json, CASE WHEN s % 3 = 0 THEN NULL ELSE 'note ' || s END,
        decode('0' || (s % 10) || 'ff', 'hex')
      FROM generate_series(1, 12) s;
    CREATE TABLE {db}.lines (order_id integer, line integer, item_id integer NOT NULL,
        PRIMARY KEY (order_id, line));
    INSERT INTO {db}.lines VALUES (1, 1, 1), (1, 2, 2), (2, 1, 3);
    CREATE TABLE {db}.kinds (id integer PRIMARY KEY, code varchar(64) NOT NULL,
        ts timestamptz(3), dt timestamp(0), dt3 timestamp(3), dt6 timestamp(6), d date,
        t interval, t3 interval, f real, dbl double precision);
    INSERT INTO {db}.kinds VALUES
      (1, 'a', '2020-01-02 18:49:42.554+00', '2020-01-02 18:49:42', '2020-01-02 18:49:42.554',
       '2020-01-02 18:49:42.554321', '2020-01-02', '18:49:42', '18:49:42.5', 1.5, 1e300),
      (2, 'b', '2020-01-02 18:49:42.000+00', '1999-12-31 23:59:59', '1999-12-31 23:59:59.100',
       '1999-12-31 23:59:59.000001', '1999-12-31', '-838:59:59', '838:59:59.999', 0.1, 1.5e-5),
      (3, 'c', '1970-01-01 00:00:01.010+00', '2038-01-19 03:14:07', '2000-02-29 00:00:00.000',
       '2000-02-29 12:00:00.120000', '2000-02-29', '00:00:00', '-00:00:01.250', 1e10,
       123456789012345),
      (4, 'd', NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1234567, 1e15),
      (5, 'e', '2024-06-30 23:59:59.999+00', '2024-06-30 23:59:59', '2024-06-30 23:59:59.999',
       '2024-06-30 23:59:59.999999', '2024-06-30', '100:00:00', '-12:34:56.789', -0.000015,
       -2.5e-300);
    ANALYZE;";

/// Where the client programs are.
fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Captures MariaDB database `db` as source `source` and creates the reference database
/// `source` with schema `db`, both holding the rows above.
async fn both(db: &str, source: &str) -> (Fixture, Reference) {
    let fixture = Fixture::start(db, source, MARIADB_SETUP, settings()).await;
    let reference = Reference::create(source, &REFERENCE_SETUP.replace("{db}", db)).await;
    (fixture, reference)
}

/// Runs `command` (blocking, off the runtime) and returns its standard output.
async fn run(mut command: Command) -> String {
    let shown = format!("{command:?}");
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed ({})\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Asserts that `ours` equals `reference` line by line, listing every line that differs.
/// `known` are the differences that remain (see docs/user-guide.md, *PostgreSQL clients*):
/// pairs of what PostgreSQL prints and what cdcfusion prints instead, replaced in the
/// reference before comparing. Each must occur, so a fixed difference fails here until its
/// pair is removed.
fn assert_same(client: &str, ours: &str, reference: &str, known: &[(&str, &str)]) {
    let mut reference = reference.to_string();
    for (theirs, instead) in known {
        assert!(
            reference.contains(theirs),
            "{client}: the known difference {theirs:?} no longer occurs in PostgreSQL's output"
        );
        reference = reference.replace(theirs, instead);
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (ours.lines().collect(), reference.lines().collect());
    let mut differences = Vec::new();
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i).copied(), b.get(i).copied());
        if x != y {
            differences.push(format!(
                "  cdcfusion:  {}\n  PostgreSQL: {}",
                x.unwrap_or("(none)"),
                y.unwrap_or("(none)")
            ));
        }
    }
    assert!(
        !a.is_empty() && differences.is_empty(),
        "{client} sees {} difference(s) from PostgreSQL:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

#[tokio::test]
async fn sqlalchemy_pandas_and_psycopg2_see_what_they_see_on_postgresql() {
    let (f, reference) = both("eco_py", "cdc_eco_py").await;
    ensure_psql(); // libpq, which psycopg loads
    let path = pip_install(
        "pyclients",
        "sqlalchemy",
        "sqlalchemy>=2,<3 pandas psycopg>=3.1,<4 psycopg2-binary",
    );
    let script = clients_dir().join("python_clients.py");
    let client = |host: &str, port: u16, user: &str, password: &str| {
        let mut command = Command::new("python3");
        command
            .arg(&script)
            .args([
                host,
                &port.to_string(),
                user,
                password,
                "cdc_eco_py",
                "eco_py",
            ])
            .env("PYTHONPATH", &path)
            .env("PGSSLMODE", "disable");
        command
    };
    let ours = run(client("127.0.0.1", f.addr.port(), USER, PASSWORD)).await;
    let theirs = run(client(
        "127.0.0.1",
        crate::reference::server().port(),
        "postgres",
        "unused",
    ))
    .await;
    assert_same("SQLAlchemy/pandas/psycopg2", &ours, &theirs, &[]);
    reference.drop_database().await;
}

/// pgjdbc and a Java runtime from Debian's packages, installed when missing.
fn pgjdbc_jar() -> PathBuf {
    setup_script("ensure_test_clients");
    PathBuf::from("/usr/share/java/postgresql.jar")
}

#[tokio::test]
async fn pgjdbc_metadata_values_and_cursors_match_postgresql() {
    let (f, reference) = both("eco_jdbc", "cdc_eco_jdbc").await;
    let jar = pgjdbc_jar();
    let script = clients_dir().join("JdbcClients.java");
    let client = |url: String, user: &str, password: &str| {
        let mut command = Command::new("java");
        command
            .arg("-cp")
            .arg(&jar)
            .arg(&script)
            .args([url.as_str(), user, password, "eco_jdbc"]);
        command
    };
    let ours = run(client(
        format!(
            "jdbc:postgresql://127.0.0.1:{}/cdc_eco_jdbc?sslmode=disable",
            f.addr.port()
        ),
        USER,
        PASSWORD,
    ))
    .await;
    let theirs = run(client(
        format!(
            "jdbc:postgresql://127.0.0.1:{}/cdc_eco_jdbc?sslmode=disable",
            crate::reference::server().port()
        ),
        "postgres",
        "unused",
    ))
    .await;
    // What tools read of every table, and the text of every temporal and float type, is there.
    for line in [
        "columns | TABLE_NAME=kinds COLUMN_NAME=dt6 DATA_TYPE=93 TYPE_NAME=timestamp",
        "indexInfo | TABLE_NAME=kinds NON_UNIQUE=f INDEX_QUALIFIER=null INDEX_NAME=kinds_pkey",
        "text | id=1, code=a, ts=2020-01-02 18:49:42.554",
        "f=1.234567e+06, dbl=1e+15",
    ] {
        assert!(ours.contains(line), "{line} not in:\n{ours}");
    }
    assert_same("pgjdbc", &ours, &theirs, &[]);
    reference.drop_database().await;
}

/// node-postgres, installed from npm into the test build directory (again when the pins
/// change): the versions `tests/clients/node/package-lock.json` records, by `npm ci`.
fn node_modules() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nodeclients");
    let pins = clients_dir().join("node");
    let lock = std::fs::read(pins.join("package-lock.json")).unwrap();
    let installed = std::fs::read(dir.join("package-lock.json")).is_ok_and(|l| l == lock);
    if !installed || !dir.join("node_modules/pg").exists() {
        setup_script("ensure_test_clients");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(pins.join(file), dir.join(file)).unwrap();
        }
        let status = Command::new("npm")
            .args(["ci", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .status()
            .expect("running npm");
        assert!(status.success(), "npm ci of tests/clients/node failed");
    }
    dir.join("node_modules")
}

#[tokio::test]
async fn node_postgres_parameters_of_every_type_match_postgresql() {
    let (f, reference) = both("eco_node", "cdc_eco_node").await;
    let modules = node_modules();
    let script = clients_dir().join("node_clients.js");
    let client = |url: String| {
        let mut command = Command::new("node");
        command
            .arg(&script)
            .args([url.as_str(), "eco_node"])
            .env("NODE_PATH", &modules);
        command
    };
    let ours = run(client(format!(
        "postgresql://{USER}:{}@127.0.0.1:{}/cdc_eco_node?sslmode=disable",
        PASSWORD.replace('\'', "%27").replace(' ', "%20"),
        f.addr.port()
    )))
    .await;
    let theirs = run(client(format!(
        "postgresql://postgres@127.0.0.1:{}/cdc_eco_node?sslmode=disable",
        crate::reference::server().port()
    )))
    .await;
    assert_same("node-postgres", &ours, &theirs, &[]);
    reference.drop_database().await;
}
