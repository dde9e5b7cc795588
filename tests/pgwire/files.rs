//! SQL cannot read, list or write the machine's files: every statement that would is refused
//! with `42501` before it touches storage, with the same message whether the path exists or
//! not; an allowed location works.

use std::path::Path;
use std::sync::Arc;

use cdcfusion::engine::{AllowedLocations, Engine};
use datafusion::prelude::CsvReadOptions;

use crate::fixture::*;

const SETUP: &str = "CREATE TABLE {db}.t (id INT PRIMARY KEY);
     INSERT INTO {db}.t VALUES (1), (2);";

/// Every file and its contents below `dir`, to show nothing changed.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut open = vec![dir.to_path_buf()];
    while let Some(d) = open.pop() {
        for entry in std::fs::read_dir(d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                open.push(path);
            } else {
                files.push((path.display().to_string(), std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

/// The statements that reach storage at `path`.
fn statements(path: &str) -> Vec<String> {
    vec![
        format!("CREATE EXTERNAL TABLE e STORED AS CSV LOCATION '{path}'"),
        format!("CREATE EXTERNAL TABLE e (a INT) STORED AS CSV LOCATION '{path}/'"),
        // DataFusion's spelling (the PostgreSQL parser does not know `STORED AS`) ...
        format!("COPY (SELECT 1 AS a) TO '{path}' STORED AS CSV"),
        // ... and PostgreSQL's.
        format!("COPY (SELECT 1 AS a) TO '{path}'"),
        format!("COPY pg_files.t TO '{path}'"),
        format!("EXPLAIN COPY (SELECT 1 AS a) TO '{path}' STORED AS CSV"),
        // Into a table the embedder registered over a file outside the allowed locations.
        "INSERT INTO ext VALUES (3)".to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_statements_are_refused_alike_for_existing_and_missing_paths() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("data.csv");
    std::fs::write(&existing, "a\n1\n2\n").unwrap();
    let missing = dir.path().join("missing").join("nothing.csv");
    let f = Fixture::start("pg_files", "files", SETUP, settings()).await;
    f.engine
        .context()
        .register_csv("ext", existing.to_str().unwrap(), CsvReadOptions::new())
        .await
        .unwrap();
    let before = snapshot(dir.path());
    let client = f.client("postgres").await;
    let mut refusals = Vec::new();
    for path in [existing.to_str().unwrap(), missing.to_str().unwrap()] {
        let mut messages = Vec::new();
        for sql in statements(path) {
            for error in [
                client.simple_query(&sql).await.unwrap_err(),
                client.query(&sql, &[]).await.unwrap_err(),
            ] {
                assert_eq!(sqlstate(&error), "42501", "{sql}: {error}");
                let message = error.as_db_error().unwrap().message().to_string();
                assert!(!message.contains(path), "{sql}: {message}");
                messages.push(message);
            }
        }
        refusals.push(messages);
    }
    // Word for word the same for the file that exists and the one that does not.
    assert_eq!(refusals[0], refusals[1]);
    assert_eq!(
        snapshot(dir.path()),
        before,
        "the statements wrote something"
    );
    assert!(!missing.parent().unwrap().exists());
    // psql shows the same refusal; in-memory tables and views stay allowed.
    let out = f.psql(
        "postgres",
        &[
            "-v",
            "VERBOSITY=verbose",
            "-c",
            &format!("COPY (SELECT 1) TO '{}'", missing.display()),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ERROR:  42501:"), "{stderr}");
    client
        .simple_query("CREATE TABLE mem AS VALUES (1), (2)")
        .await
        .unwrap();
    client
        .simple_query("CREATE VIEW mem_view AS SELECT count(*) AS n FROM mem")
        .await
        .unwrap();
    let row = client
        .query_one("SELECT n FROM mem_view", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 2);
    // `COPY ... TO STDOUT` is untouched.
    let out = f.psql(
        "files",
        &[
            "-c",
            "COPY (SELECT id FROM pg_files.t ORDER BY id) TO STDOUT",
        ],
    );
    assert_eq!(stdout_of(&out), "1\n2\n");
}

#[tokio::test]
async fn allowed_locations_can_be_read_and_written() {
    let dir = tempfile::tempdir().unwrap();
    let exports = dir.path().join("exports");
    std::fs::create_dir(&exports).unwrap();
    std::fs::write(exports.join("in.csv"), "a,b\n1,x\n2,y\n").unwrap();
    let outside = dir.path().join("outside.csv");
    let allowed = AllowedLocations::parse(&[format!("file://{}/", exports.display())]).unwrap();
    let engine = Arc::new(Engine::new().with_allowed_locations(allowed));
    let f = Fixture::serve(engine, "none", "none", settings()).await;
    let client = f.client("postgres").await;
    client
        .simple_query(&format!(
            "CREATE EXTERNAL TABLE input STORED AS CSV LOCATION '{}/in.csv' OPTIONS ('format.has_header' 'true')",
            exports.display()
        ))
        .await
        .unwrap();
    let rows = client
        .query("SELECT a, b FROM input ORDER BY a", &[])
        .await
        .unwrap();
    let read: Vec<(i64, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(read, vec![(1, "x".to_string()), (2, "y".to_string())]);
    let out = exports.join("out.csv");
    client
        .simple_query(&format!(
            "COPY (SELECT a FROM input ORDER BY a) TO '{}' STORED AS CSV",
            out.display()
        ))
        .await
        .unwrap();
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(written.contains('1') && written.contains('2'), "{written}");
    // Next to the allowed directory, and climbing out of it, stay refused.
    for location in [
        outside.display().to_string(),
        format!("{}/../outside.csv", exports.display()),
    ] {
        let error = client
            .simple_query(&format!(
                "COPY (SELECT 1 AS a) TO '{location}' STORED AS CSV"
            ))
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&error), "42501", "{location}: {error}");
    }
    assert!(!outside.exists());
}
