//! `reconcile('source', 'db.t', 'sink:name')` against the real server and real targets: a
//! caught-up or paused sink reconciles with no difference (the comparison is at the position
//! its target holds), rows changed in a PostgreSQL target behind the sink's back are reported
//! key by key with their columns, and the error cases carry their SQLSTATEs.

mod common;

use std::time::Duration;

use cdcfusion::engine::{AllowedLocations, Engine, EngineOptions};
use common::readers::*;
use common::*;
use mysql_async::prelude::Queryable;

async fn exec(sql: &str) {
    let mut conn = root_conn(server()).await;
    conn.query_drop(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// An engine (state in `state`) reading `db` as source `source`, allowed to write under `out`.
async fn engine_on(
    state: &std::path::Path,
    out: &std::path::Path,
    source: &str,
    db: &str,
) -> Engine {
    let options = EngineOptions {
        allowed_locations: AllowedLocations::parse(&[format!("file://{}/", out.display())])
            .unwrap(),
        ..Default::default()
    };
    let engine = Engine::open(state.to_str().unwrap(), options)
        .await
        .unwrap();
    engine
        .sql(&format!(
            "CREATE SOURCE {source} FROM MYSQL '{}' WITH (tables = '{db}.*', chunk_size = 16, server_id = {})",
            server().cdc_url(),
            next_server_id() * 2
        ))
        .await
        .unwrap();
    tokio::time::timeout(HANG_GUARD, engine.wait_ready(source))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{source}: {e}"));
    engine
}

/// The differences `reconcile` finds for sink `sink` of `db.t`, sorted, without the position.
async fn differences(engine: &Engine, source: &str, db: &str, sink: &str) -> Vec<String> {
    let mut rows = query(
        engine,
        &format!(
            "SELECT key, difference, columns, source_values, engine_values \
             FROM reconcile('{source}', '{db}.t', 'sink:{sink}')"
        ),
    )
    .await;
    rows.sort();
    rows
}

/// The latest `cdc.reconciliations` report's `against`, `position` and `differences`.
async fn last_report(engine: &Engine) -> String {
    query(
        engine,
        "SELECT against, position, differences FROM cdc.reconciliations \
         ORDER BY finished_at DESC LIMIT 1",
    )
    .await
    .remove(0)
}

async fn committed(engine: &Engine, sink: &str) -> String {
    scalar(
        engine,
        &format!("SELECT committed_position FROM cdc.sinks WHERE name = '{sink}'"),
    )
    .await
}

/// Waits until `sink` shows as paused.
async fn paused(engine: &Engine, sink: &str) {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while scalar(
        engine,
        &format!("SELECT state FROM cdc.sinks WHERE name = '{sink}'"),
    )
    .await
        != "paused"
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sink} never pauses"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_postgres_target_changed_behind_the_sink_shows_exactly_those_keys() {
    let (db, source, pg) = ("rec_sink_pg", "rp", "cdcfusion_it_rec_sink");
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    exec(&format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT, amount DECIMAL(10,2),
                              at DATETIME(3), big BIGINT UNSIGNED, dur TIME(6), f FLOAT);
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq, seq * 1.25,
                                   '2024-01-02 03:04:05.678' + INTERVAL seq MINUTE,
                                   18446744073709551615 - seq, '-100:00:01.5', seq / 3
                            FROM {db}.seq_1_to_40;
         CREATE TABLE {db}.u (id INT PRIMARY KEY);"
    ))
    .await;
    let url = pg_database(pg).await;
    let (state, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let engine = engine_on(state.path(), out.path(), source, db).await;
    engine
        .sql(&format!(
            "CREATE SINK pg_copy INTO POSTGRES '{url}' TABLE 't_copy' WITH (commit_interval = '50ms') \
             AS SELECT id AS key, v, n, amount, at, big, dur, f FROM {source}.{db}.t WHERE n % 5 <> 0"
        ))
        .await
        .unwrap();
    engine
        .sql(&format!(
            "CREATE SINK pg_log INTO POSTGRES '{url}' TABLE 't_log' WITH (commit_interval = '50ms') \
             AS SELECT _op, _position, id, v, amount, _before FROM {source}.{db}.\"t$changelog\""
        ))
        .await
        .unwrap();
    // A changelog sink whose filter never passes a row: it never commits.
    engine
        .sql(&format!(
            "CREATE SINK pg_never INTO POSTGRES '{url}' TABLE 't_never' \
             AS SELECT _op, _position, id FROM {source}.{db}.\"t$changelog\" WHERE id < 0"
        ))
        .await
        .unwrap();
    exec(&format!(
        "UPDATE {db}.t SET v = 'changed', amount = NULL, n = 7 WHERE id = 3;
         DELETE FROM {db}.t WHERE id = 4;
         INSERT INTO {db}.t (id, v, n) VALUES (41, 'new', 41);
         UPDATE {db}.t SET n = 5 WHERE id = 6;"
    ))
    .await;
    sink_caught_up(&engine, source, "pg_copy").await;
    sink_caught_up(&engine, source, "pg_log").await;

    for sink in ["pg_copy", "pg_log"] {
        assert_eq!(
            differences(&engine, source, db, sink).await,
            Vec::<String>::new(),
            "{sink} holds what its query gives at its position"
        );
        let position = committed(&engine, sink).await;
        assert_eq!(
            last_report(&engine).await,
            format!("against=sink:{sink} position={position} differences=0")
        );
    }

    // Behind the sink's back: one value changed, one row deleted, one row added, in each.
    let moved = psql(pg, "SELECT _position FROM t_log WHERE id = 8 AND _op = 'r'");
    let dropped = psql(pg, "SELECT _position FROM t_log WHERE id = 9 AND _op = 'r'");
    psql(
        pg,
        &format!(
            "UPDATE t_copy SET v = 'drift', amount = 1.5 WHERE key = 2;
             DELETE FROM t_copy WHERE key = 7;
             INSERT INTO t_copy (key, v) VALUES (1000, 'ghost');
             UPDATE t_log SET v = 'drift' WHERE _position = '{}';
             DELETE FROM t_log WHERE _position = '{}';
             INSERT INTO t_log (_op, _position, id) VALUES ('c', 'zz', 1);",
            moved[0], dropped[0]
        ),
    );
    let found = differences(&engine, source, db, "pg_copy").await;
    assert_eq!(found.len(), 3, "{found:#?}");
    assert_eq!(
        found[0],
        "key=key=1000 difference=extra columns=NULL source_values=NULL engine_values=key=1000, \
         v=ghost, n=NULL, amount=NULL, at=NULL, big=NULL, dur=NULL, f=NULL"
    );
    assert_eq!(
        found[1],
        "key=key=2 difference=differs columns=v, amount source_values=v=v2, amount=2.50 \
         engine_values=v=drift, amount=1.50"
    );
    assert!(
        found[2] == ("key=key=7 difference=missing columns=NULL source_values=key=7, v=v7, n=7, amount=8.75, at=2024-01-02T03:11:05.678, big=18446744073709551608, dur=-100:00:01.500000, f=2.3333333 engine_values=NULL"),
        "{found:#?}"
    );
    let found = differences(&engine, source, db, "pg_log").await;
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found[0].starts_with(&format!(
            "key=_position={} difference=differs columns=v source_values=v=v8 engine_values=v=drift",
            moved[0]
        )),
        "{found:#?}"
    );
    assert!(
        found[1].starts_with(&format!("key=_position={} difference=missing", dropped[0])),
        "{found:#?}"
    );
    assert!(
        found[2].starts_with("key=_position=zz difference=extra"),
        "{found:#?}"
    );
    assert!(last_report(&engine).await.ends_with("differences=3"));

    // What cannot be reconciled, and why (a second source reads the same tables).
    engine
        .sql(&format!(
            "CREATE SOURCE rp2 FROM MYSQL '{}' WITH (tables = '{db}.*', server_id = {})",
            server().cdc_url(),
            next_server_id() * 2
        ))
        .await
        .unwrap();
    tokio::time::timeout(HANG_GUARD, engine.wait_ready("rp2"))
        .await
        .unwrap()
        .unwrap();
    let cases = [
        (
            format!("reconcile('rp2', '{db}.t', 'sink:pg_copy')"),
            "22023",
            "reads source \"rp\"",
        ),
        (
            format!("reconcile('{source}', '{db}.t', 'sink:nope')"),
            "42704",
            "does not exist",
        ),
        (
            format!("reconcile('{source}', '{db}.u', 'sink:pg_copy')"),
            "22023",
            "reads rp.rec_sink_pg.t",
        ),
        (
            format!("reconcile('{source}', '{db}.t', 'sink:pg_never')"),
            "55000",
            "not committed",
        ),
        (
            format!("reconcile('{source}', '{db}.t', 'elsewhere')"),
            "0A000",
            "sink:name",
        ),
    ];
    for (call, sqlstate, says) in cases {
        let (state, message) = sqlstate_error(&engine, &format!("SELECT * FROM {call}")).await;
        assert_eq!(state, sqlstate, "{call}: {message}");
        assert!(message.contains(says), "{call}: {message}");
    }
    drop(engine);
}

#[tokio::test]
async fn paused_delta_and_parquet_sinks_reconcile_at_their_own_position() {
    let (db, source) = ("rec_sink_lake", "rl");
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    exec(&format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT, big BIGINT UNSIGNED,
                              dur TIME, d DECIMAL(30,4));
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq, 18446744073709551615 - seq,
                                   '-100:00:01', seq / 7
                            FROM {db}.seq_1_to_40;"
    ))
    .await;
    let (state, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let engine = engine_on(state.path(), out.path(), source, db).await;
    let sinks = [
        (
            "lake_copy",
            format!(
                "DELTA 'file://{}' WITH (commit_interval = '50ms') AS SELECT * FROM {source}.{db}.t WHERE n % 3 <> 0",
                out.path().join("copy").display()
            ),
        ),
        (
            "lake_log",
            format!(
                "DELTA 'file://{}' WITH (commit_interval = '50ms') AS SELECT * FROM {source}.{db}.\"t$changelog\"",
                out.path().join("log").display()
            ),
        ),
        (
            "files",
            format!(
                "PARQUET 'file://{}' WITH (commit_interval = '50ms') AS SELECT _op, _position, id, v, big, dur FROM {source}.{db}.\"t$changelog\"",
                out.path().join("files").display()
            ),
        ),
    ];
    for (name, rest) in &sinks {
        engine
            .sql(&format!("CREATE SINK {name} INTO {rest}"))
            .await
            .unwrap();
    }
    exec(&format!(
        "UPDATE {db}.t SET v = NULL, n = 1 WHERE id = 3;
         DELETE FROM {db}.t WHERE id = 5;"
    ))
    .await;
    for (name, _) in &sinks {
        sink_caught_up(&engine, source, name).await;
        assert_eq!(
            differences(&engine, source, db, name).await,
            Vec::<String>::new(),
            "{name} caught up"
        );
    }
    // Paused, while the source moves on: still compared at what each target holds.
    for (name, _) in &sinks {
        engine
            .sql(&format!("ALTER SINK {name} PAUSE"))
            .await
            .unwrap();
        paused(&engine, name).await;
    }
    let before: Vec<String> = {
        let mut v = Vec::new();
        for (name, _) in &sinks {
            v.push(committed(&engine, name).await);
        }
        v
    };
    exec(&format!(
        "UPDATE {db}.t SET v = 'later', big = 0 WHERE id BETWEEN 10 AND 20;
         DELETE FROM {db}.t WHERE id = 30;
         INSERT INTO {db}.t (id, v, n) VALUES (50, 'new', 50);"
    ))
    .await;
    sync_source(&engine, source).await;
    for ((name, _), position) in sinks.iter().zip(&before) {
        assert_eq!(
            differences(&engine, source, db, name).await,
            Vec::<String>::new(),
            "{name} paused"
        );
        assert_eq!(
            last_report(&engine).await,
            format!("against=sink:{name} position={position} differences=0")
        );
    }
    // Each target was read whole: as many rows as expected.
    let reads = query(
        &engine,
        "SELECT against, rows_compared = rows_fetched AND rows_fetched > 0 AS whole \
         FROM cdc.reconciliations ORDER BY finished_at",
    )
    .await;
    assert!(
        reads.iter().all(|r| r.ends_with("whole=true")),
        "{reads:#?}"
    );
    let changed = query(
        &engine,
        &format!("SELECT v FROM {source}.{db}.t WHERE id = 10"),
    )
    .await;
    assert_eq!(changed, vec!["v=later"], "the source's table has moved on");

    // A Parquet commit lost behind the sink's back: its entries are missing, nothing else.
    let mut parts: Vec<std::path::PathBuf> = Vec::new();
    for day in std::fs::read_dir(out.path().join("files")).unwrap() {
        for f in std::fs::read_dir(day.unwrap().path()).unwrap() {
            parts.push(f.unwrap().path());
        }
    }
    parts.sort();
    assert!(parts.len() >= 2, "{parts:?}");
    std::fs::remove_file(&parts[0]).unwrap();
    let found = differences(&engine, source, db, "files").await;
    assert!(!found.is_empty());
    assert!(
        found
            .iter()
            .all(|d| d.contains(" difference=missing ") && d.contains("_op=r")),
        "{found:#?}"
    );
    drop(engine);
}
