//! Readers of sink targets that are not ours: DuckDB and Python `deltalake` from PyPI, and
//! `psql` against a private PostgreSQL the test binary starts (`devserver::DevPostgres`).
#![allow(dead_code)] // Each test binary uses part of it.

use std::process::Command;

use cdcfusion::devserver::DevPostgres;

use super::{pip_install, query, sync_source, HANG_GUARD};

/// The lines `command` prints; a failure panics with what it wrote to stderr.
fn output_lines(what: &str, mut command: Command) -> Vec<String> {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what} cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `script` run by `python3` with `deps` on its path.
fn python(what: &str, deps: &str, script: &str) -> Vec<String> {
    // Leave without tearing down native threads (pyarrow's and deltalake's pools can abort
    // the interpreter's exit after the script has finished); an exception still fails.
    let script = format!("{script}\nimport os, sys\nsys.stdout.flush()\nos._exit(0)\n");
    let mut command = Command::new("python3");
    command.env("PYTHONPATH", deps).args(["-c", &script]);
    output_lines(what, command)
}

/// Rows of a DuckDB query, one line each (DuckDB from PyPI, a reader that is not ours).
pub fn duckdb(sql: &str) -> Vec<String> {
    // Installed once per test binary: tests run in parallel.
    static DEPS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let deps = DEPS.get_or_init(|| pip_install("pydeps-duckdb", "duckdb", "duckdb>=1.1,<3"));
    let script = format!(
        "import duckdb\nfor row in duckdb.sql({sql:?}).fetchall():\n    print('|'.join('NULL' if v is None else str(v) for v in row))\n"
    );
    python("duckdb", deps, &script)
}

/// The private PostgreSQL this test binary shares (started on first use; never the
/// machine's own server).
pub fn shared_pg() -> &'static DevPostgres {
    DevPostgres::shared()
}

/// A fresh database `name` on the shared private PostgreSQL; returns its URL.
pub async fn pg_database(name: &str) -> String {
    shared_pg()
        .create_database(name)
        .unwrap_or_else(|e| panic!("creating database {name}: {e}"))
}

/// [`pg_database`], with the URL pointing at `port` of 127.0.0.1 (a proxy in front of the
/// server) instead of the server itself.
pub async fn pg_database_via(name: &str, port: u16) -> String {
    pg_database(name).await;
    format!("postgresql://postgres@127.0.0.1:{port}/{name}")
}

/// Rows of `sql` in database `db` of the shared private PostgreSQL, read by psql (a reader
/// that is not ours), `|`-separated, NULL as `NULL`.
pub fn psql(db: &str, sql: &str) -> Vec<String> {
    shared_pg().psql(db, sql).unwrap_or_else(|e| panic!("{e}"))
}

/// Rows of a DuckDB query over Delta tables (`delta_scan('<dir>')`), one line each: DuckDB
/// with its `delta` extension, both from PyPI (a Delta reader built on `delta-kernel-rs`,
/// not on the `deltalake` crate the engine writes with).
pub fn duckdb_delta(sql: &str) -> Vec<String> {
    static DEPS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let deps = DEPS.get_or_init(|| {
        pip_install(
            "pydeps-duckdb-delta",
            "duckdb_extension_delta",
            "duckdb-extension-delta>=1.4,<2",
        )
    });
    // The package ships the extension built for the DuckDB it pins; load it from there
    // instead of downloading it.
    let script = format!(
        "import duckdb, duckdb_extension_delta, glob, os\n\
         ext = glob.glob(os.path.join(os.path.dirname(duckdb_extension_delta.__file__), 'extensions', '*', 'delta.duckdb_extension'))\n\
         assert len(ext) == 1, ext\n\
         con = duckdb.connect()\n\
         con.sql(f\"LOAD '{{ext[0]}}'\")\n\
         for row in con.sql({sql:?}).fetchall():\n    print('|'.join('NULL' if v is None else str(v) for v in row))\n"
    );
    python("duckdb delta", deps, &script)
}

/// Lines printed by `script`, run with Python `deltalake` and `pyarrow` from PyPI (readers
/// that are not ours).
pub fn python_delta(script: &str) -> Vec<String> {
    static DEPS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let deps = DEPS.get_or_init(|| {
        pip_install(
            "pydeps-deltalake",
            "deltalake",
            "deltalake>=1.1,<2 pyarrow>=15",
        )
    });
    python("python deltalake", deps, script)
}

/// The rows of the Delta table at `path`, columns `columns`, sorted by `order` (a Python
/// expression of row `r`), as `|`-separated lines (NULL as `NULL`).
pub fn delta_rows(path: &std::path::Path, columns: &str, order: &str) -> Vec<String> {
    delta_table_rows(&path.display().to_string(), "{}", columns, order)
}

/// [`delta_rows`] of the table at `uri` (e.g. `s3://bucket/table`), opened with
/// `storage_options` (a Python dict literal).
pub fn delta_table_rows(
    uri: &str,
    storage_options: &str,
    columns: &str,
    order: &str,
) -> Vec<String> {
    python_delta(&format!(
        "from deltalake import DeltaTable\n\
         t = DeltaTable({uri:?}, storage_options={storage_options}).to_pyarrow_table().to_pylist()\n\
         t.sort(key=lambda r: {order})\n\
         for r in t:\n    print('|'.join('NULL' if r[c] is None else str(r[c]) for c in {columns:?}.split(',')))\n",
    ))
}

/// Waits until sink `sink` has committed everything its source published (after the
/// source caught up with the server).
pub async fn sink_caught_up(engine: &cdcfusion::engine::Engine, source: &str, sink: &str) {
    sync_source(engine, source).await;
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let rows = query(
            engine,
            &format!("SELECT state, lag_entries, error FROM cdc.sinks WHERE name = '{sink}'"),
        )
        .await;
        let row = rows.first().cloned().unwrap_or_default();
        if row.contains("lag_entries=0 ") && row.contains("state=running") {
            return;
        }
        assert!(!row.contains("state=failed"), "sink {sink} failed: {row}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "sink {sink} does not catch up: {row}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
