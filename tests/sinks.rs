//! Sinks against the real server: `CREATE SINK` sends a source's changes to Parquet files
//! and PostgreSQL tables, read back by readers that are not ours (DuckDB, psql's server),
//! exactly once across engine crashes; queries a sink cannot maintain are refused with the
//! reason; status, pause and resume.

mod common;

use std::time::Duration;

use cdcfusion::engine::{AllowedLocations, Engine, EngineError, EngineOptions};
use common::*;
use mysql_async::prelude::Queryable;

/// Runs `sql` on the shared server.
async fn exec(sql: &str) {
    let mut conn = root_conn(server()).await;
    conn.query_drop(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn create_source(source: &str, db: &str) -> String {
    format!(
        "CREATE SOURCE {source} FROM MYSQL '{}' WITH (tables = '{db}.*', chunk_size = 16, server_id = {})",
        server().cdc_url(),
        next_server_id() * 2
    )
}

async fn ready(engine: &Engine, source: &str) {
    tokio::time::timeout(HANG_GUARD, engine.wait_ready(source))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{source}: {e}"));
}

/// An engine whose state lives in `state` and whose SQL may write under `out`.
async fn open(state: &std::path::Path, out: &std::path::Path) -> Engine {
    let options = EngineOptions {
        allowed_locations: AllowedLocations::parse(&[format!("file://{}/", out.display())])
            .unwrap(),
        ..Default::default()
    };
    Engine::open(state.to_str().unwrap(), options)
        .await
        .unwrap()
}

/// One value of the first row of `sql`.
async fn scalar(engine: &Engine, sql: &str) -> String {
    let rows = query(engine, sql).await;
    let row = rows.first().unwrap_or_else(|| panic!("{sql}: no row"));
    row.split_once('=')
        .map(|(_, v)| v.to_string())
        .unwrap_or_default()
}

/// Waits until sink `sink` has committed everything its source published (after the
/// source caught up with the server).
async fn caught_up(engine: &Engine, source: &str, sink: &str) {
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Rows of a DuckDB query, one line each (DuckDB from PyPI, a reader that is not ours).
fn duckdb(sql: &str) -> Vec<String> {
    // Installed once per test binary: tests run in parallel.
    static DEPS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let deps = DEPS.get_or_init(|| pip_install("pydeps-duckdb", "duckdb", "duckdb>=1.1,<3"));
    let script = format!(
        "import duckdb\nfor row in duckdb.sql({sql:?}).fetchall():\n    print('|'.join('NULL' if v is None else str(v) for v in row))\n"
    );
    let out = std::process::Command::new("python3")
        .env("PYTHONPATH", deps)
        .args(["-c", &script])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "duckdb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The changelog of `table` as `position|op|id|v` lines, in position order.
async fn changelog_lines(
    engine: &Engine,
    source: &str,
    db: &str,
    table: &str,
    filter: &str,
) -> Vec<String> {
    query(
        engine,
        &format!(
            "SELECT _position || '|' || _op || '|' || CAST(id AS VARCHAR) || '|' || COALESCE(v, 'NULL') AS line FROM {source}.{db}.\"{table}$changelog\" {filter} ORDER BY _position"
        ),
    )
    .await
    .into_iter()
    .map(|r| r.trim_start_matches("line=").to_string())
    .collect()
}

#[tokio::test]
async fn a_parquet_sink_holds_every_change_once_across_crashes() {
    let db = "sink_parquet";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    exec(&format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT);
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq FROM {db}.seq_1_to_60;"
    ))
    .await;
    let state = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let all = out.path().join("all");
    let even = out.path().join("even");
    let engine = open(state.path(), out.path()).await;
    engine.sql(&create_source("pq", db)).await.unwrap();
    ready(&engine, "pq").await;
    engine
        .sql(&format!(
            "CREATE SINK all_changes INTO PARQUET 'file://{}' WITH (commit_interval = '100ms') AS SELECT * FROM pq.{db}.\"t$changelog\"",
            all.display()
        ))
        .await
        .unwrap();
    // Projection, filter and a computed column, written under other names.
    engine
        .sql(&format!(
            "CREATE SINK even INTO PARQUET 'file://{}' WITH (commit_interval = '100ms') AS SELECT _op, _position, id AS key, upper(v) AS shout FROM pq.{db}.\"t$changelog\" WHERE id % 2 = 0",
            even.display()
        ))
        .await
        .unwrap();
    for round in 0..3 {
        exec(&format!(
            "UPDATE {db}.t SET v = CONCAT('u{round}-', id) WHERE id % 3 = {round};
             DELETE FROM {db}.t WHERE id = {};
             INSERT INTO {db}.t VALUES ({}, 'new', 0), ({}, NULL, 1);",
            10 + round,
            100 + round * 2,
            101 + round * 2
        ))
        .await;
    }
    caught_up(&engine, "pq", "all_changes").await;
    caught_up(&engine, "pq", "even").await;
    // A crash: the engine goes away without a clean stop; more changes arrive meanwhile.
    drop(engine);
    exec(&format!(
        "UPDATE {db}.t SET n = n + 1 WHERE id < 20; DELETE FROM {db}.t WHERE id BETWEEN 30 AND 35;
         INSERT INTO {db}.t VALUES (200, 'after', 2);"
    ))
    .await;
    let engine = open(state.path(), out.path()).await;
    ready(&engine, "pq").await;
    exec(&format!("UPDATE {db}.t SET v = 'last' WHERE id = 200")).await;
    caught_up(&engine, "pq", "all_changes").await;
    caught_up(&engine, "pq", "even").await;

    let expected = changelog_lines(&engine, "pq", db, "t", "").await;
    assert!(expected.len() > 100, "{} entries", expected.len());
    let files = format!("{}/**/*.parquet", all.display());
    let written = duckdb(&format!(
        "SELECT _position, _op, id, v FROM read_parquet('{files}', hive_partitioning = true) ORDER BY _position"
    ));
    assert_eq!(
        written, expected,
        "the Parquet files hold the changelog exactly once"
    );
    // Every file is one commit; the Hive partition column reads back.
    let days = duckdb(&format!(
        "SELECT count(DISTINCT dt) FROM read_parquet('{files}', hive_partitioning = true)"
    ));
    assert_eq!(days.len(), 1);

    let expected_even: Vec<String> = query(
        &engine,
        &format!("SELECT _position || '|' || _op || '|' || CAST(id AS VARCHAR) || '|' || COALESCE(upper(v), 'NULL') AS line FROM pq.{db}.\"t$changelog\" WHERE id % 2 = 0 ORDER BY _position"),
    )
    .await
    .into_iter()
    .map(|r| r.trim_start_matches("line=").to_string())
    .collect();
    let written_even = duckdb(&format!(
        "SELECT _position, _op, key, shout FROM read_parquet('{}/**/*.parquet') ORDER BY _position",
        even.display()
    ));
    assert_eq!(written_even, expected_even);

    // Status: the committed position is the changelog's last one.
    let last = expected
        .last()
        .unwrap()
        .split('|')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        scalar(
            &engine,
            "SELECT committed_position FROM cdc.sinks WHERE name = 'all_changes'"
        )
        .await,
        last
    );
    assert_eq!(
        scalar(
            &engine,
            "SELECT mode FROM cdc.sinks WHERE name = 'all_changes'"
        )
        .await,
        "changelog"
    );
    drop(engine);
}

/// The SQLSTATE of an engine error as the front end maps it is tested there; here the
/// typed error and its message.
fn refused(result: Result<datafusion::prelude::DataFrame, EngineError>) -> String {
    match result {
        Ok(_) => panic!("the statement should be refused"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn queries_a_sink_cannot_maintain_are_refused_and_sinks_pause_and_resume() {
    let db = "sink_refusals";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    exec(&format!(
        "CREATE TABLE {db}.a (id INT PRIMARY KEY, v INT); CREATE TABLE {db}.b (id INT PRIMARY KEY, v INT);
         CREATE TABLE {db}.nokey (v INT);
         INSERT INTO {db}.a VALUES (1, 1), (2, 2); INSERT INTO {db}.b VALUES (1, 10);"
    ))
    .await;
    let state = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let engine = open(state.path(), out.path()).await;
    engine.sql(&create_source("rf", db)).await.unwrap();
    ready(&engine, "rf").await;
    let dir = |name: &str| format!("file://{}/{name}", out.path().display());
    let cases = [
        (
            format!("SELECT x._op, x._position, x.id FROM rf.{db}.\"a$changelog\" x JOIN rf.{db}.\"b$changelog\" y ON x.id = y.id"),
            "a join",
        ),
        (
            format!("SELECT _op, max(_position) AS _position FROM rf.{db}.\"a$changelog\" GROUP BY _op"),
            "an aggregate",
        ),
        (
            format!("SELECT _op, _position, id FROM rf.{db}.\"a$changelog\" ORDER BY id"),
            "ORDER BY",
        ),
        (
            format!("SELECT _op, _position, id FROM rf.{db}.\"a$changelog\" UNION SELECT _op, _position, id FROM rf.{db}.\"b$changelog\""),
            "UNION without ALL",
        ),
        (
            format!("SELECT id FROM rf.{db}.\"a$changelog\""),
            "must select _op",
        ),
        (format!("SELECT * FROM rf.{db}.a"), "append-only"),
        ("SELECT * FROM rf.cdc.sources".to_string(), "captured tables only"),
        (
            format!("SELECT _op, _position, id FROM rf.{db}.\"a$changelog\" WHERE id IN (SELECT id FROM rf.{db}.b)"),
            "subquery",
        ),
    ];
    for (i, (query, reason)) in cases.iter().enumerate() {
        let message = refused(
            engine
                .sql(&format!(
                    "CREATE SINK s{i} INTO PARQUET '{}' AS {query}",
                    dir("x")
                ))
                .await,
        );
        assert!(message.contains(reason), "{query}: {message}");
    }
    // Outside the allowed locations.
    let message = refused(
        engine
            .sql(&format!("CREATE SINK s INTO PARQUET 'file:///tmp/elsewhere' AS SELECT * FROM rf.{db}.\"a$changelog\""))
            .await,
    );
    assert!(message.contains("CREATE SINK"), "{message}");

    // Shards into one target with UNION ALL, keeping which table each row came from.
    engine
        .sql(&format!(
            "CREATE SINK shards INTO PARQUET '{}' WITH (commit_interval = '100ms') AS SELECT _op, _position, _table, id, v FROM rf.{db}.\"a$changelog\" UNION ALL SELECT _op, _position, _table, id, v FROM rf.{db}.\"b$changelog\"",
            dir("shards")
        ))
        .await
        .unwrap();
    let explain = query(
        &engine,
        &format!("EXPLAIN CREATE SINK e INTO PARQUET '{}' AS SELECT _op, _position, id FROM rf.{db}.\"a$changelog\" WHERE v > 1", dir("e")),
    )
    .await
    .join("\n");
    assert!(
        explain.contains("mode: changelog") && explain.contains("Filter"),
        "{explain}"
    );
    caught_up(&engine, "rf", "shards").await;
    let commits_before = scalar(
        &engine,
        "SELECT commits FROM cdc.sinks WHERE name = 'shards'",
    )
    .await;

    // Paused: nothing is committed, and it stays paused across a restart.
    engine.sql("ALTER SINK shards PAUSE").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    exec(&format!(
        "INSERT INTO {db}.a VALUES (3, 3); INSERT INTO {db}.b VALUES (2, 20);"
    ))
    .await;
    sync_source(&engine, "rf").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        scalar(&engine, "SELECT state FROM cdc.sinks WHERE name = 'shards'").await,
        "paused"
    );
    assert_eq!(
        scalar(
            &engine,
            "SELECT commits FROM cdc.sinks WHERE name = 'shards'"
        )
        .await,
        commits_before
    );
    // A source read by a sink cannot be dropped.
    let message = refused(engine.sql("DROP SOURCE rf").await);
    assert!(message.contains("shards"), "{message}");
    drop(engine);
    let engine = open(state.path(), out.path()).await;
    ready(&engine, "rf").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        scalar(&engine, "SELECT state FROM cdc.sinks WHERE name = 'shards'").await,
        "paused"
    );
    engine.sql("ALTER SINK shards RESUME").await.unwrap();
    caught_up(&engine, "rf", "shards").await;
    let written = duckdb(&format!(
        "SELECT _table, id, v FROM read_parquet('{}/shards/**/*.parquet') ORDER BY _table, id",
        out.path().display()
    ));
    assert_eq!(
        written,
        vec![
            format!("{db}.a|1|1"),
            format!("{db}.a|2|2"),
            format!("{db}.a|3|3"),
            format!("{db}.b|1|10"),
            format!("{db}.b|2|20"),
        ]
    );
    let shown = query(&engine, "SHOW SINKS").await.join("\n");
    assert!(
        shown.contains("name=shards") && shown.contains("UNION ALL"),
        "{shown}"
    );
    engine.sql("DROP SINK shards").await.unwrap();
    engine.sql("DROP SINK IF EXISTS shards").await.unwrap();
    assert!(query(&engine, "SELECT name FROM cdc.sinks")
        .await
        .is_empty());
    engine.sql("DROP SOURCE rf").await.unwrap();
}
