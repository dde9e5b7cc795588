//! Sinks against the real server: `CREATE SINK` sends a source's changes to Parquet files
//! and PostgreSQL tables, read back by readers that are not ours (DuckDB, psql's server),
//! exactly once across engine crashes; queries a sink cannot maintain are refused with the
//! reason; status, pause and resume.

mod common;

use std::time::Duration;

use cdcfusion::engine::{AllowedLocations, Engine, EngineError, EngineOptions};
use common::readers::*;
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
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq FROM {db}.seq_1_to_60;
         CREATE TABLE {db}.t2 (id INT PRIMARY KEY, v VARCHAR(20), n INT);
         INSERT INTO {db}.t2 SELECT seq, CONCAT('w', seq), seq FROM {db}.seq_1_to_30;"
    ))
    .await;
    let state = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let all = out.path().join("all");
    let even = out.path().join("even");
    let bounded = out.path().join("bounded");
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
    // Starting points: what is published from now on (the snapshot is, and nothing has
    // changed since), and strictly after the 25th entry of the snapshot.
    let snapshot = changelog_lines(&engine, "pq", db, "t", "").await;
    let point = snapshot[24].split('|').next().unwrap().to_string();
    let from_now = out.path().join("from_now");
    let after_point = out.path().join("after_point");
    for (name, dir, start) in [
        ("from_now", &from_now, "now"),
        ("after_point", &after_point, point.as_str()),
    ] {
        engine
            .sql(&format!(
                "CREATE SINK {name} INTO PARQUET 'file://{}' WITH (commit_interval = '100ms', start = '{start}') AS SELECT * FROM pq.{db}.\"t$changelog\"",
                dir.display()
            ))
            .await
            .unwrap();
    }
    // Two tables in one target, in commits of about 7 entries: the snapshot's reads and
    // transactions larger than that, some writing both tables.
    let both = format!(
        "SELECT _op, _position, _tx, id, v FROM pq.{db}.\"t$changelog\" UNION ALL SELECT _op, _position, _tx, id, v FROM pq.{db}.\"t2$changelog\""
    );
    engine
        .sql(&format!(
            "CREATE SINK bounded INTO PARQUET 'file://{}' WITH (commit_interval = '100ms', max_commit_entries = 7) AS {both}",
            bounded.display()
        ))
        .await
        .unwrap();
    for round in 0..3 {
        exec(&format!(
            "UPDATE {db}.t SET v = CONCAT('u{round}-', id) WHERE id % 3 = {round};
             DELETE FROM {db}.t WHERE id = {};
             INSERT INTO {db}.t VALUES ({}, 'new', 0), ({}, NULL, 1);
             START TRANSACTION;
             UPDATE {db}.t SET n = n + 1 WHERE id BETWEEN 40 AND 49;
             UPDATE {db}.t2 SET n = n + 1 WHERE id <= 5;
             COMMIT;",
            10 + round,
            100 + round * 2,
            101 + round * 2
        ))
        .await;
    }
    sink_caught_up(&engine, "pq", "all_changes").await;
    sink_caught_up(&engine, "pq", "even").await;
    sink_caught_up(&engine, "pq", "bounded").await;
    sink_caught_up(&engine, "pq", "from_now").await;
    sink_caught_up(&engine, "pq", "after_point").await;
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
    sink_caught_up(&engine, "pq", "all_changes").await;
    sink_caught_up(&engine, "pq", "even").await;
    sink_caught_up(&engine, "pq", "bounded").await;
    sink_caught_up(&engine, "pq", "from_now").await;
    sink_caught_up(&engine, "pq", "after_point").await;

    let expected = changelog_lines(&engine, "pq", db, "t", "").await;
    let read_back = |dir: &std::path::Path| {
        duckdb(&format!(
            "SELECT _position, _op, id, v FROM read_parquet('{}/**/*.parquet', hive_partitioning = true) ORDER BY _position",
            dir.display()
        ))
    };
    let since_now: Vec<String> = expected
        .iter()
        .filter(|l| !snapshot.contains(l))
        .cloned()
        .collect();
    assert!(!since_now.is_empty());
    assert_eq!(read_back(&from_now), since_now, "start = 'now'");
    let after: Vec<String> = expected
        .iter()
        .filter(|l| l.split('|').next().unwrap() > point.as_str())
        .cloned()
        .collect();
    assert_eq!(after.len(), expected.len() - 25, "start = '{point}'");
    assert_eq!(read_back(&after_point), after, "start = '{point}'");
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

    let expected_even: Vec<String> = lines(
        &engine,
        &format!("SELECT _position || '|' || _op || '|' || CAST(id AS VARCHAR) || '|' || COALESCE(upper(v), 'NULL') AS line FROM pq.{db}.\"t$changelog\" WHERE id % 2 = 0 ORDER BY _position"),
    )
    .await;
    let written_even = duckdb(&format!(
        "SELECT _position, _op, key, shout FROM read_parquet('{}/**/*.parquet') ORDER BY _position",
        even.display()
    ));
    assert_eq!(written_even, expected_even);

    // The bounded sink: both changelogs exactly once, in many commits, none of which holds
    // part of a source transaction.
    let mut expected_both = expected.clone();
    expected_both.extend(changelog_lines(&engine, "pq", db, "t2", "").await);
    expected_both.sort();
    let files = format!("{}/**/*.parquet", bounded.display());
    let written_both = duckdb(&format!(
        "SELECT _position, _op, id, v FROM read_parquet('{files}') ORDER BY _position"
    ));
    assert_eq!(written_both, expected_both);
    let commits: usize = duckdb(&format!(
        "SELECT count(DISTINCT filename) FROM read_parquet('{files}', filename = true)"
    ))[0]
        .parse()
        .unwrap();
    assert!(
        commits > 20,
        "{} entries in {commits} commits",
        expected_both.len()
    );
    // The largest commit: 4 entries a table (the bound shared by the two), each read on to
    // the end of the transaction in progress (at most 20 entries of `t`, 5 of `t2`); without
    // the bound, the 90 snapshot reads alone would be one commit.
    let largest = duckdb(&format!(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM read_parquet('{files}', filename = true) GROUP BY filename)"
    ));
    assert!(
        largest[0].parse::<usize>().unwrap() <= 3 + 20 + 3 + 5,
        "largest commit {largest:?}"
    );
    let split = duckdb(&format!(
        "SELECT count(*) FROM (SELECT split_part(_position, ':', 1) || ':' || split_part(_position, ':', 2) AS tx, count(DISTINCT filename) AS files FROM read_parquet('{files}', filename = true) WHERE _tx > 0 GROUP BY tx) WHERE files > 1"
    ));
    assert_eq!(split, vec!["0"], "no transaction is split across commits");

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

/// Waits until sink `name` has failed; returns its state, SQLSTATE and error.
async fn sink_failed(engine: &Engine, name: &str) -> String {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let row = query(
            engine,
            &format!("SELECT state, error_sqlstate, error FROM cdc.sinks WHERE name = '{name}'"),
        )
        .await
        .join(" ");
        if row.contains("state=failed") {
            return row;
        }
        assert!(tokio::time::Instant::now() < deadline, "{row}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The message of a refused statement.
fn refused(result: Result<datafusion::prelude::DataFrame, EngineError>) -> String {
    refused_with(result).1
}

/// The SQLSTATE a client gets for a refused statement, and its message.
fn refused_with(result: Result<datafusion::prelude::DataFrame, EngineError>) -> (String, String) {
    match result {
        Ok(_) => panic!("the statement should be refused"),
        Err(e) => (
            cdcfusion::sqlstate::HasSqlState::sqlstate(&e)
                .code()
                .to_string(),
            e.to_string(),
        ),
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
        let (sqlstate, message) = refused_with(
            engine
                .sql(&format!(
                    "CREATE SINK s{i} INTO PARQUET '{}' AS {query}",
                    dir("x")
                ))
                .await,
        );
        assert!(message.contains(reason), "{query}: {message}");
        if ["a join", "an aggregate"].contains(reason) {
            assert_eq!(sqlstate, "0A000", "{query}: {message}");
        }
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
    sink_caught_up(&engine, "rf", "shards").await;
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
    sink_caught_up(&engine, "rf", "shards").await;
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

/// Rounds 0–2 of `changes` with `sinks` caught up; then a crash (the engine dropped without a
/// clean stop), round 3 while it is away and round 4 once it is back (engine state and output
/// directories in `dirs`). Returns the engine opened again.
async fn rounds_across_a_crash(
    engine: Engine,
    dirs: (&std::path::Path, &std::path::Path),
    source: &str,
    sinks: &[&str],
    changes: impl Fn(i32) -> String,
) -> Engine {
    for round in 0..3 {
        exec(&changes(round)).await;
    }
    for sink in sinks {
        sink_caught_up(&engine, source, sink).await;
    }
    drop(engine);
    exec(&changes(3)).await;
    let engine = open(dirs.0, dirs.1).await;
    ready(&engine, source).await;
    exec(&changes(4)).await;
    engine
}

/// One source transaction of round `round` on `db.t` (`id` first, `v`, `n` next): updates
/// (moving some rows out of `n % 5 <> 0`), a key change, a delete and two inserts whose
/// columns after `id` are `rest`.
fn round_of_changes(db: &str, round: i32, rest: [&str; 2]) -> String {
    format!(
        "START TRANSACTION;
         UPDATE {db}.t SET v = CONCAT('u{round}-', id), n = n + 1 WHERE id % 7 = {round};
         UPDATE {db}.t SET id = id + 1000 WHERE id = {};
         DELETE FROM {db}.t WHERE id = {};
         INSERT INTO {db}.t VALUES ({}, {}), ({}, {});
         COMMIT;",
        20 + round,
        30 + round,
        100 + round * 2,
        rest[0],
        101 + round * 2,
        rest[1]
    )
}

#[tokio::test]
async fn postgres_sinks_upsert_and_append_exactly_once_across_crashes() {
    let db = "sink_pg";
    let pg = "cdcfusion_it_sink_pg";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    exec(&format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT, amount DECIMAL(10,2), at DATETIME(3));
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq, seq * 1.25, '2024-01-02 03:04:05.678' FROM {db}.seq_1_to_60;"
    ))
    .await;
    let url = pg_database(pg).await;
    let state = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let engine = open(state.path(), out.path()).await;
    engine.sql(&create_source("pg1", db)).await.unwrap();
    ready(&engine, "pg1").await;
    // An upsert copy of the rows with n % 5 <> 0, under other names.
    engine
        .sql(&format!(
            "CREATE SINK copy INTO POSTGRES '{url}' TABLE 'public.t_copy' WITH (commit_interval = '100ms') AS SELECT id AS key, v, n, amount, at FROM pg1.{db}.t WHERE n % 5 <> 0"
        ))
        .await
        .unwrap();
    // Every change, appended.
    engine
        .sql(&format!(
            "CREATE SINK log INTO POSTGRES '{url}' TABLE 't_log' WITH (commit_interval = '100ms') AS SELECT _op, _position, _commit_ts, id, v, _before FROM pg1.{db}.\"t$changelog\""
        ))
        .await
        .unwrap();
    let changes = |round| {
        round_of_changes(
            db,
            round,
            ["'new\\ttab', 5, NULL, NULL", "NULL, 1, -3.5, '2000-01-01'"],
        )
    };
    let engine = rounds_across_a_crash(
        engine,
        (state.path(), out.path()),
        "pg1",
        &["copy", "log"],
        changes,
    )
    .await;
    sink_caught_up(&engine, "pg1", "copy").await;
    sink_caught_up(&engine, "pg1", "log").await;

    let expected = lines(
        &engine,
        &format!(
            "SELECT CAST(id AS VARCHAR) || '|' || COALESCE(v, 'NULL') || '|' || CAST(n AS VARCHAR) || '|' || COALESCE(CAST(amount AS VARCHAR), 'NULL') AS line FROM pg1.{db}.t WHERE n % 5 <> 0 ORDER BY id"
        ),
    )
    .await;
    assert!(expected.len() > 40, "{expected:?}");
    assert_eq!(
        psql(pg, "SELECT key, v, n, amount FROM t_copy ORDER BY key"),
        expected,
        "the PostgreSQL table equals the source's filtered rows"
    );
    assert_eq!(
        psql(pg, "SELECT DISTINCT at FROM t_copy WHERE key = 1"),
        vec!["2024-01-02 03:04:05.678"]
    );
    let log = changelog_lines(&engine, "pg1", db, "t", "").await;
    assert_eq!(
        psql(
            pg,
            "SELECT _position, _op, id, COALESCE(v, 'NULL') FROM t_log ORDER BY _position COLLATE \"C\""
        ),
        log,
        "the changelog table holds every change exactly once"
    );
    // The before image of an update is a JSON object.
    let updated = psql(
        pg,
        "SELECT _before->>'v' FROM t_log WHERE _op = 'u' AND id = 7 ORDER BY _position COLLATE \"C\" LIMIT 1",
    );
    assert_eq!(updated, vec!["v7"]);
    // The progress rows name the last positions, as cdc.sinks does.
    let last = log.last().unwrap().split('|').next().unwrap().to_string();
    assert_eq!(
        psql(
            pg,
            "SELECT position FROM _cdcfusion_sinks WHERE sink = 'log'"
        ),
        vec![last.clone()]
    );
    assert_eq!(
        scalar(
            &engine,
            "SELECT committed_position FROM cdc.sinks WHERE name = 'log'"
        )
        .await,
        last
    );
    drop(engine);
}

/// Table `db.t` (`id`, `v`) with rows `1..=rows`, captured as source `source` by a new
/// engine, and PostgreSQL database `pg` reached through a fault proxy: the engine's
/// directories (first, so that bound in this order they outlive the engine), the proxy, the
/// target URL through it and the engine.
async fn proxied_target(
    db: &str,
    rows: u32,
    source: &str,
    pg: &str,
) -> (
    (tempfile::TempDir, tempfile::TempDir),
    common::proxy::FaultProxy,
    String,
    Engine,
) {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    exec(&format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20));
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq) FROM {db}.seq_1_to_{rows};"
    ))
    .await;
    let proxy = common::proxy::FaultProxy::start(common::readers::shared_pg().port()).await;
    let url = pg_database_via(pg, proxy.port()).await;
    let state = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let engine = open(state.path(), out.path()).await;
    engine.sql(&create_source(source, db)).await.unwrap();
    ready(&engine, source).await;
    ((state, out), proxy, url, engine)
}

#[tokio::test]
async fn a_postgres_sink_retries_an_unreachable_server_and_follows_new_columns() {
    let db = "sink_pg_faults";
    let pg = "cdcfusion_it_sink_pg_faults";
    let (_dirs, proxy, url, engine) = proxied_target(db, 30, "pgf", pg).await;
    engine
        .sql(&format!(
            "CREATE SINK follow INTO POSTGRES '{url}' TABLE 't' WITH (commit_interval = '100ms') AS SELECT * FROM pgf.{db}.t"
        ))
        .await
        .unwrap();
    engine
        .sql(&format!(
            "CREATE SINK strict INTO POSTGRES '{url}' TABLE 't_strict' WITH (commit_interval = '100ms', schema_changes = 'stop') AS SELECT * FROM pgf.{db}.t"
        ))
        .await
        .unwrap();
    sink_caught_up(&engine, "pgf", "follow").await;
    sink_caught_up(&engine, "pgf", "strict").await;

    // PostgreSQL goes away: open connections are cut and new ones refused.
    proxy.refuse_new(true);
    proxy.reset_all();
    exec(&format!(
        "UPDATE {db}.t SET v = 'while away' WHERE id <= 10; DELETE FROM {db}.t WHERE id = 30;"
    ))
    .await;
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let state = scalar(&engine, "SELECT state FROM cdc.sinks WHERE name = 'follow'").await;
        if state == "retrying" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "state {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let error = scalar(
        &engine,
        "SELECT error_sqlstate FROM cdc.sinks WHERE name = 'follow'",
    )
    .await;
    assert_eq!(error, "08006");
    proxy.refuse_new(false);
    sink_caught_up(&engine, "pgf", "follow").await;

    // A column new at the source: followed by one sink, the other stops with the fix.
    exec(&format!(
        "ALTER TABLE {db}.t ADD COLUMN note VARCHAR(10); UPDATE {db}.t SET note = 'n' WHERE id = 2;
         INSERT INTO {db}.t VALUES (31, 'v31', 'new');"
    ))
    .await;
    sink_caught_up(&engine, "pgf", "follow").await;
    let expected = lines(
        &engine,
        &format!("SELECT CAST(id AS VARCHAR) || '|' || v || '|' || COALESCE(note, 'NULL') AS line FROM pgf.{db}.t ORDER BY id"),
    )
    .await;
    assert_eq!(psql(pg, "SELECT id, v, note FROM t ORDER BY id"), expected);
    let row = sink_failed(&engine, "strict").await;
    assert!(row.contains("error_sqlstate=55000"), "{row}");
    assert!(row.contains("schema_changes = 'stop'"), "{row}");
    // The Prometheus endpoint shows the same status.
    let metrics = cdcfusion::frontend::render_metrics(&engine, None).await;
    let commits = scalar(
        &engine,
        "SELECT commits FROM cdc.sinks WHERE name = 'follow'",
    )
    .await;
    let changes = scalar(
        &engine,
        "SELECT changes FROM cdc.sources WHERE name = 'pgf'",
    )
    .await;
    assert_ne!(changes, "0", "the writes were counted");
    for line in [
        format!("cdcfusion_sink_commits_total{{sink=\"follow\",source=\"pgf\"}} {commits}"),
        format!("cdcfusion_source_changes_total{{source=\"pgf\"}} {changes}"),
        "cdcfusion_sink_state{sink=\"strict\",source=\"pgf\",state=\"failed\"} 1".to_string(),
        "cdcfusion_sink_lag_entries{sink=\"follow\",source=\"pgf\"} 0".to_string(),
        format!("cdcfusion_table_rows{{source=\"pgf\",db=\"{db}\",table=\"t\"}} 30"),
        "cdcfusion_source_consistent{source=\"pgf\"} 1".to_string(),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} not in:\n{metrics}"
        );
    }
    let estimated = format!(
        "cdcfusion_table_snapshot_rows_estimated{{source=\"pgf\",db=\"{db}\",table=\"t\"}} "
    );
    assert!(
        metrics.lines().any(|l| l.starts_with(&estimated)),
        "{estimated} not in:\n{metrics}"
    );
    // A rename is not followed: the sink stops, naming the column, the position and the fix,
    // instead of ending the column and starting a new one.
    exec(&format!(
        "ALTER TABLE {db}.t RENAME COLUMN note TO remark; UPDATE {db}.t SET remark = 'r' WHERE id = 3;"
    ))
    .await;
    let row = sink_failed(&engine, "follow").await;
    assert!(row.contains("error_sqlstate=55000"), "{row}");
    assert!(row.contains("column note of"), "{row}");
    assert!(row.contains("renamed to remark at binlog."), "{row}");
    assert!(row.contains("drop the sink and create it again"), "{row}");
    drop(engine);
}

/// A sink with `schema_changes = 'stop'` that is waiting out an unreachable target while a
/// table it reads gains a column still stops when the target is back: the attempt that
/// reconnects compares with the columns the sink was planned for, not with those it finds.
#[tokio::test]
async fn a_strict_sink_retrying_through_a_column_change_still_stops() {
    let db = "sink_pg_strict_retry";
    let pg = "cdcfusion_it_sink_pg_strict_retry";
    let (_dirs, proxy, url, engine) = proxied_target(db, 5, "psr", pg).await;
    engine
        .sql(&format!(
            "CREATE SINK strict INTO POSTGRES '{url}' TABLE 't' WITH (commit_interval = '100ms', schema_changes = 'stop') AS SELECT * FROM psr.{db}.t"
        ))
        .await
        .unwrap();
    sink_caught_up(&engine, "psr", "strict").await;

    // The target goes away and a change makes the sink try it: it retries.
    proxy.refuse_new(true);
    proxy.reset_all();
    exec(&format!("UPDATE {db}.t SET v = 'away' WHERE id = 1")).await;
    all_retrying(&engine, &["strict"]).await;
    // Meanwhile the table gains a column, and the source publishes it.
    exec(&format!(
        "ALTER TABLE {db}.t ADD COLUMN note VARCHAR(10); INSERT INTO {db}.t VALUES (6, 'v6', 'new');"
    ))
    .await;
    sync_source(&engine, "psr").await;
    proxy.refuse_new(false);
    let row = sink_failed(&engine, "strict").await;
    assert!(row.contains("error_sqlstate=55000"), "{row}");
    assert!(row.contains("schema_changes = 'stop'"), "{row}");
}

/// Waits until every sink in `sinks` shows `retrying`; returns the SQLSTATE each shows.
async fn all_retrying(engine: &Engine, sinks: &[&str]) -> Vec<String> {
    let mut states = Vec::new();
    for sink in sinks {
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        loop {
            let row = query(
                engine,
                &format!("SELECT state, error_sqlstate FROM cdc.sinks WHERE name = '{sink}'"),
            )
            .await
            .join(" ");
            if row.contains("state=retrying") {
                states.push(
                    row.split("error_sqlstate=")
                        .nth(1)
                        .unwrap_or("")
                        .to_string(),
                );
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{sink}: {row}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    states
}

/// PostgreSQL itself goes down (a private server stopped the way a crash stops it, not a
/// connection cut on the way) while changes keep coming: both kinds of sink show `retrying`
/// with a connection SQLSTATE, lose nothing while it is down, and once it is started again
/// catch up to exactly the source, read back by psql.
#[tokio::test]
async fn postgres_sinks_wait_out_a_stopped_server_and_catch_up_exactly() {
    let db = "sink_pg_stopped";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    exec(&format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT);
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq FROM {db}.seq_1_to_40;"
    ))
    .await;
    let pg = cdcfusion::devserver::DevPostgres::start().unwrap();
    let url = pg.create_database("stopped").unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let engine = open(state.path(), out.path()).await;
    engine.sql(&create_source("pgs", db)).await.unwrap();
    ready(&engine, "pgs").await;
    for sql in [
        format!("CREATE SINK copy INTO POSTGRES '{url}' TABLE 't' WITH (commit_interval = '100ms') AS SELECT * FROM pgs.{db}.t"),
        format!("CREATE SINK log INTO POSTGRES '{url}' TABLE 't_log' WITH (commit_interval = '100ms') AS SELECT _op, _position, id, v FROM pgs.{db}.\"t$changelog\""),
    ] {
        engine.sql(&sql).await.unwrap();
    }
    sink_caught_up(&engine, "pgs", "copy").await;
    sink_caught_up(&engine, "pgs", "log").await;

    pg.stop().unwrap();
    exec(&format!(
        "UPDATE {db}.t SET v = 'while down', n = n + 100 WHERE id <= 12; DELETE FROM {db}.t WHERE id = 40;"
    ))
    .await;
    for sqlstate in all_retrying(&engine, &["copy", "log"]).await {
        assert!(sqlstate.starts_with("08"), "a connection error: {sqlstate}");
    }
    // More transactions while it stays down, a key change among them.
    exec(&format!(
        "START TRANSACTION; UPDATE {db}.t SET id = 140 WHERE id = 13; INSERT INTO {db}.t VALUES (41, 'new', 41); COMMIT;
         DELETE FROM {db}.t WHERE id BETWEEN 20 AND 24;"
    ))
    .await;
    sync_source(&engine, "pgs").await;
    pg.start_again().unwrap();
    sink_caught_up(&engine, "pgs", "copy").await;
    sink_caught_up(&engine, "pgs", "log").await;

    let rows = lines(
        &engine,
        &format!("SELECT CAST(id AS VARCHAR) || '|' || v || '|' || CAST(n AS VARCHAR) AS line FROM pgs.{db}.t ORDER BY id"),
    )
    .await;
    assert_eq!(
        pg.psql("stopped", "SELECT id, v, n FROM t ORDER BY id")
            .unwrap(),
        rows
    );
    let log = changelog_lines(&engine, "pgs", db, "t", "").await;
    assert_eq!(
        pg.psql(
            "stopped",
            "SELECT _position, _op, id, v FROM t_log ORDER BY _position COLLATE \"C\""
        )
        .unwrap(),
        log
    );
    assert!(log.len() > 40 + 12, "the changes while down are there");
    drop(engine);
}

#[tokio::test]
async fn delta_sinks_upsert_and_append_exactly_once_across_crashes() {
    let db = "sink_delta";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    exec(&format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT, big BIGINT UNSIGNED, dur TIME);
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq, 18446744073709551615 - seq, '-100:00:01' FROM {db}.seq_1_to_60;"
    ))
    .await;
    let state = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let log_dir = out.path().join("log");
    let copy_dir = out.path().join("copy");
    let engine = open(state.path(), out.path()).await;
    engine.sql(&create_source("dl", db)).await.unwrap();
    ready(&engine, "dl").await;
    engine
        .sql(&format!(
            "CREATE SINK lake_log INTO DELTA 'file://{}' WITH (commit_interval = '100ms') AS SELECT * FROM dl.{db}.\"t$changelog\"",
            log_dir.display()
        ))
        .await
        .unwrap();
    engine
        .sql(&format!(
            "CREATE SINK lake_copy INTO DELTA 'file://{}' WITH (commit_interval = '100ms') AS SELECT * FROM dl.{db}.t WHERE n % 5 <> 0",
            copy_dir.display()
        ))
        .await
        .unwrap();
    let changes = |round| {
        round_of_changes(
            db,
            round,
            ["'new', 5, 0, '838:59:59'", "NULL, 1, NULL, NULL"],
        )
    };
    let engine = rounds_across_a_crash(
        engine,
        (state.path(), out.path()),
        "dl",
        &["lake_log", "lake_copy"],
        changes,
    )
    .await;
    exec(&format!("ALTER TABLE {db}.t ADD COLUMN note VARCHAR(8)")).await;
    exec(&format!("UPDATE {db}.t SET note = 'x', n = 2 WHERE id = 1")).await;
    sink_caught_up(&engine, "dl", "lake_log").await;
    sink_caught_up(&engine, "dl", "lake_copy").await;

    let expected = lines(
        &engine,
        &format!(
            "SELECT CAST(id AS VARCHAR) || '|' || COALESCE(v, 'NULL') || '|' || CAST(n AS VARCHAR) || '|' || COALESCE(CAST(big AS VARCHAR), 'NULL') || '|' || COALESCE(note, 'NULL') AS line FROM dl.{db}.t WHERE n % 5 <> 0 ORDER BY id"
        ),
    )
    .await;
    assert!(expected.len() > 40, "{expected:?}");
    assert_eq!(
        delta_rows(&copy_dir, "id,v,n,big,note", "r['id']"),
        expected,
        "the Delta table equals the source's filtered rows (the new column followed)"
    );
    assert_eq!(
        delta_rows(&copy_dir, "dur", "r['id']")
            .first()
            .map(String::as_str),
        Some("-100:00:01.000000")
    );
    let log = changelog_lines(&engine, "dl", db, "t", "").await;
    assert_eq!(
        delta_rows(&log_dir, "_position,_op,id,v", "r['_position'].encode()"),
        log,
        "the changelog table holds every change exactly once"
    );
    // The change data feed records the upserts' deletes and updates; the sink's transaction
    // version is the number of commits it made.
    let script = format!(
        "from deltalake import DeltaTable\n\
         import pyarrow\n\
         t = DeltaTable({path:?})\n\
         cdf = pyarrow.table(t.load_cdf(starting_version=0))\n\
         print(sorted(set(cdf.column('_change_type').to_pylist())))\n\
         print(t.transaction_version('cdcfusion:lake_copy'))\n",
        path = copy_dir.display().to_string()
    );
    let printed = python_delta(&script);
    assert_eq!(
        printed[0],
        "['delete', 'insert', 'update_postimage', 'update_preimage']"
    );
    let commits = scalar(
        &engine,
        "SELECT commits FROM cdc.sinks WHERE name = 'lake_copy'",
    )
    .await;
    assert!(printed[1].parse::<u64>().unwrap() >= commits.parse::<u64>().unwrap());
    drop(engine);
}
