//! Time travel: `SELECT ... FROM t AS OF '<position>' | TIMESTAMP '...'` against the server's
//! own state recorded after every transaction of a random workload (seed printed, `HIST_SEED`
//! repeats a run), and against replaying the engine's changelog up to the same point.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use cdcfusion::change::position::BinlogCoord;
use cdcfusion::change::schema::Flavor;
use cdcfusion::engine::Engine;
use cdcfusion::provider::as_of::AsOfError;
use cdcfusion::source::connect::current_position;
use common::durable::{engine_changelog, replay};
use common::*;
use datafusion::error::DataFusionError;
use mysql_async::prelude::Queryable;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TABLES: [(&str, &str); 3] = [("t", "id, v, n"), ("u", "id, w"), ("k", "a, b")];

async fn setup(db: &str, source: &str) -> Engine {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(16), n INT);
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq FROM {db}.seq_1_to_40;
         CREATE TABLE {db}.u (id INT PRIMARY KEY, w BIGINT);
         INSERT INTO {db}.u SELECT seq, seq * 100 FROM {db}.seq_1_to_10;
         CREATE TABLE {db}.k (a INT, b VARCHAR(8));
         INSERT INTO {db}.k VALUES (1, 'x'), (1, 'x'), (2, 'y');"
    ))
    .await
    .unwrap();
    capture_db(db, source, 16, 4).await
}

/// The server's rows of every table, rendered as the engine renders them, sorted.
async fn server_state(
    conn: &mut mysql_async::Conn,
    db: &str,
) -> BTreeMap<&'static str, Vec<String>> {
    let mut out = BTreeMap::new();
    for (table, columns) in TABLES {
        let rows: Vec<mysql_async::Row> = conn
            .query(format!("SELECT {columns} FROM {db}.{table}"))
            .await
            .unwrap();
        let names: Vec<&str> = columns.split(", ").collect();
        let mut rendered: Vec<String> = rows
            .into_iter()
            .map(|row| {
                names
                    .iter()
                    .enumerate()
                    .map(|(i, name)| {
                        let value: Option<String> = row.get(i).unwrap();
                        format!("{name}={}", value.unwrap_or_else(|| "NULL".into()))
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        rendered.sort();
        out.insert(table, rendered);
    }
    out
}

async fn position(conn: &mut mysql_async::Conn) -> BinlogCoord {
    current_position(conn, Flavor::MariaDb).await.unwrap().0
}

/// One random transaction over the three tables, with key changes and several rows.
async fn random_transaction(conn: &mut mysql_async::Conn, db: &str, rng: &mut StdRng) {
    let mut statements = vec!["BEGIN".to_string()];
    for _ in 0..rng.random_range(1..5) {
        let id = rng.random_range(1..60);
        statements.push(match rng.random_range(0..8) {
            0 => format!("INSERT IGNORE INTO {db}.t VALUES ({id}, 'new{id}', {id})"),
            1 => format!("UPDATE {db}.t SET v = CONCAT(v, '+'), n = n + 1 WHERE id = {id}"),
            2 => format!("DELETE FROM {db}.t WHERE id = {id}"),
            3 => format!(
                "UPDATE IGNORE {db}.t SET id = {} WHERE id = {id}",
                rng.random_range(60..200)
            ),
            4 => format!(
                "UPDATE {db}.t SET n = NULL WHERE id BETWEEN {id} AND {}",
                id + 3
            ),
            5 => format!(
                "INSERT INTO {db}.u VALUES ({}, {id}) ON DUPLICATE KEY UPDATE w = w + 1",
                id % 15
            ),
            6 => format!("INSERT INTO {db}.k VALUES ({}, 'x')", id % 3),
            _ => format!("DELETE FROM {db}.k WHERE a = {} LIMIT 1", id % 3),
        });
    }
    statements.push("COMMIT".into());
    conn.query_drop(statements.join("; ")).await.unwrap();
}

/// The rows of `table` AS OF `point` (an SQL literal), sorted.
async fn as_of(engine: &Engine, source: &str, db: &str, table: &str, point: &str) -> Vec<String> {
    let columns = TABLES.iter().find(|(t, _)| *t == table).unwrap().1;
    let mut rows = query(
        engine,
        &format!("SELECT {columns} FROM {source}.{db}.{table} AS OF {point}"),
    )
    .await;
    rows.sort();
    rows
}

/// The SQLSTATE of the `AS OF` error `sql` fails with.
async fn as_of_error(engine: &Engine, sql: &str) -> (String, String) {
    let error = match engine.sql(sql).await {
        Ok(frame) => match frame.collect().await {
            Ok(rows) => panic!("{sql} answers {rows:?}"),
            Err(e) => e,
        },
        Err(cdcfusion::engine::EngineError::DataFusion(e)) => e,
        Err(e) => panic!("{sql}: {e}"),
    };
    match error.find_root() {
        DataFusionError::External(e) => match e.downcast_ref::<AsOfError>() {
            Some(e) => (e.sqlstate.to_string(), e.message.clone()),
            None => panic!("{sql}: {e}"),
        },
        other => panic!("{sql}: {other}"),
    }
}

/// Text of the cut at a binlog position: what `_position` compares below.
fn cut_text(coord: &BinlogCoord) -> String {
    format!("{}:{:012}:{:010}", coord.file, coord.offset, 1)
}

#[tokio::test]
async fn as_of_a_position_is_the_server_state_there() {
    let (db, source) = ("hist_a", "ha");
    let engine = setup(db, source).await;
    let seed: u64 = std::env::var("HIST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("HIST_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut conn = root_conn(server()).await;
    // The server's state after each transaction, at the position after it.
    let mut points: Vec<(BinlogCoord, BTreeMap<&str, Vec<String>>)> = Vec::new();
    points.push((position(&mut conn).await, server_state(&mut conn, db).await));
    for _ in 0..30 {
        random_transaction(&mut conn, db, &mut rng).await;
        points.push((position(&mut conn).await, server_state(&mut conn, db).await));
    }
    sync_source(&engine, source).await;
    let consistent_from = engine
        .source(source)
        .unwrap()
        .status()
        .consistent_from
        .unwrap();
    let mut changelogs = BTreeMap::new();
    for (table, columns) in TABLES {
        changelogs.insert(
            table,
            engine_changelog(&engine, source, db, table, columns).await,
        );
    }
    let mut checked = 0;
    for (coord, truth) in points.iter().filter(|(c, _)| *c >= consistent_from) {
        for (table, _) in TABLES {
            let point = format!("'{coord}'");
            let at = as_of(&engine, source, db, table, &point).await;
            assert_eq!(at, truth[table], "{table} AS OF {point}");
            // The same as replaying the changelog up to there.
            let cut = cut_text(coord);
            let before: Vec<_> = changelogs[table]
                .iter()
                .filter(|e| e.position < cut)
                .cloned()
                .collect();
            assert_eq!(
                at,
                replay(&before, table != "k"),
                "replay of {table} to {point}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 60, "only {checked} points after the hand-off");

    // An entry's own position reads the state after its whole transaction.
    let streamed = changelogs["t"]
        .iter()
        .filter(|e| e.op != "r" && e.coord() >= consistent_from);
    for entry in streamed.step_by(3) {
        let start = entry.coord();
        let (_, truth) = points
            .iter()
            .find(|(c, _)| *c > start)
            .expect("a point after every transaction");
        let at = as_of(&engine, source, db, "t", &format!("'{}'", entry.position)).await;
        assert_eq!(at, truth["t"], "t AS OF entry {}", entry.position);
    }

    // Two tables AS OF one position are one cut.
    let (coord, truth) = &points[points.len() / 2];
    let joined = query(
        &engine,
        &format!(
            "SELECT count(*) AS n FROM {source}.{db}.t AS OF '{coord}' \
             JOIN {source}.{db}.u AS OF '{coord}' ON t.id = u.id"
        ),
    )
    .await;
    let ids = |rows: &[String]| -> Vec<String> {
        rows.iter()
            .map(|r| r.split(' ').next().unwrap().to_string())
            .collect()
    };
    let u_ids = ids(&truth["u"]);
    let expected = ids(&truth["t"])
        .iter()
        .filter(|i| u_ids.contains(i))
        .count();
    assert_eq!(joined, [format!("n={expected}")]);

    // Outside the history: a clear error naming where it can read.
    let before = BinlogCoord::new(consistent_from.file.to_string(), 4);
    let (state, message) = as_of_error(
        &engine,
        &format!("SELECT * FROM {source}.{db}.t AS OF '{before}'"),
    )
    .await;
    assert_eq!(state, "22023", "{message}");
    assert!(message.contains(&consistent_from.to_string()), "{message}");
    let (state, message) = as_of_error(
        &engine,
        &format!("SELECT * FROM {source}.{db}.t AS OF 'binlog.999999:4'"),
    )
    .await;
    assert_eq!(state, "22023", "{message}");
    assert!(message.contains("not in the captured history"), "{message}");
    let (state, _) = as_of_error(
        &engine,
        &format!("SELECT * FROM as_of('{source}.{db}.t', 'soon')"),
    )
    .await;
    assert_eq!(state, "22P02");
}

#[tokio::test]
async fn as_of_a_time_and_across_a_schema_change() {
    let (db, source) = ("hist_b", "hb");
    let engine = setup(db, source).await;
    let mut conn = root_conn(server()).await;
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..5 {
        random_transaction(&mut conn, db, &mut rng).await;
    }
    let first = server_state(&mut conn, db).await;
    let first_end = position(&mut conn).await;
    // Binlog times are whole seconds: the next transactions commit in a later one.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..5 {
        random_transaction(&mut conn, db, &mut rng).await;
    }
    sync_source(&engine, source).await;
    let last_commit = query(
        &engine,
        &format!(
            "SELECT CAST(max(_commit_ts) AS BIGINT) AS ts FROM {source}.{db}.\"t$changelog\" \
             WHERE _position < '{}'",
            cut_text(&first_end)
        ),
    )
    .await;
    let micros: i64 = last_commit[0].trim_start_matches("ts=").parse().unwrap();
    let ts = chrono::DateTime::from_timestamp_micros(micros)
        .unwrap()
        .naive_utc()
        .to_string();
    for (table, _) in TABLES {
        assert_eq!(
            as_of(&engine, source, db, table, &format!("TIMESTAMP '{ts}'")).await,
            first[table],
            "{table} AS OF TIMESTAMP '{ts}'"
        );
    }
    // A time after the last commit reads the latest state; the function form takes any
    // expression of a time.
    let now = server_state(&mut conn, db).await;
    let rows = query(
        &engine,
        &format!("SELECT id, v, n FROM as_of('{source}.{db}.t', now() + INTERVAL '1 hour')"),
    )
    .await;
    let mut rows = rows;
    rows.sort();
    assert_eq!(rows, now["t"]);

    // A schema change: AS OF after it reads the new columns, before it is refused.
    let before_ddl = position(&mut conn).await;
    conn.query_drop(format!(
        "ALTER TABLE {db}.u ADD COLUMN note VARCHAR(8) DEFAULT 'n'; UPDATE {db}.u SET note = 'm' WHERE id = 1"
    ))
    .await
    .unwrap();
    let after_ddl = position(&mut conn).await;
    conn.query_drop(format!("UPDATE {db}.u SET note = 'z', w = 0"))
        .await
        .unwrap();
    sync_source(&engine, source).await;
    let rows = query(
        &engine,
        &format!(
            "SELECT id, note FROM {source}.{db}.u AS OF '{after_ddl}' WHERE id IN (1, 2) ORDER BY id"
        ),
    )
    .await;
    assert_eq!(rows, ["id=1 note=m", "id=2 note=n"]);
    let (state, message) = as_of_error(
        &engine,
        &format!("SELECT * FROM {source}.{db}.u AS OF '{before_ddl}'"),
    )
    .await;
    assert_eq!(state, "0A000", "{message}");
    assert!(message.contains("ALTER TABLE"), "{message}");
    // Other tables are not affected by it.
    assert_eq!(
        as_of(&engine, source, db, "t", &format!("'{before_ddl}'")).await,
        now["t"]
    );
}

/// A durable engine whose history lives mostly in the state store (a tiny memory budget),
/// restarted while writes go on: points before and after the restart read back exactly.
#[tokio::test]
async fn as_of_reads_history_back_from_the_store_after_a_restart() {
    use cdcfusion::durable::DurableOptions;
    use cdcfusion::engine::EngineOptions;
    let (db, source) = ("hist_c", "hc");
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(16), n INT);
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq FROM {db}.seq_1_to_40;
         CREATE TABLE {db}.u (id INT PRIMARY KEY, w BIGINT);
         CREATE TABLE {db}.k (a INT, b VARCHAR(8));"
    ))
    .await
    .unwrap();
    let options = || EngineOptions {
        durable: DurableOptions {
            checkpoint_interval: Duration::from_millis(50),
            state_snapshot_min_changes: 10,
            changelog_memory_budget: 4 * 1024,
        },
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let engine = Engine::open(&path, options()).await.unwrap();
    engine
        .sql(&format!(
            "CREATE SOURCE {source} FROM MYSQL '{}' WITH (tables = '{db}.*', chunk_size = 16, server_id = {})",
            server().cdc_url(),
            source_server_id()
        ))
        .await
        .unwrap();
    tokio::time::timeout(HANG_GUARD, engine.wait_ready(source))
        .await
        .unwrap()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let mut points = Vec::new();
    for _ in 0..25 {
        random_transaction(&mut conn, db, &mut rng).await;
        points.push((position(&mut conn).await, server_state(&mut conn, db).await));
    }
    sync_source(&engine, source).await;
    // Let checkpoints spill the history past the budget, then stop without a clean shutdown.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(engine);
    for _ in 0..10 {
        random_transaction(&mut conn, db, &mut rng).await;
        points.push((position(&mut conn).await, server_state(&mut conn, db).await));
    }
    let engine = Engine::open(&path, options()).await.unwrap();
    tokio::time::timeout(HANG_GUARD, engine.wait_ready(source))
        .await
        .unwrap()
        .unwrap();
    sync_source(&engine, source).await;
    // Most of the history is read back from the store, not held in memory.
    let spilled = query(
        &engine,
        "SELECT sum(changelog_spilled_entries) > 0 AS spilled FROM cdc.tables",
    )
    .await;
    assert_eq!(spilled, ["spilled=true"]);
    for (coord, truth) in &points {
        for (table, _) in TABLES {
            let at = as_of(&engine, source, db, table, &format!("'{coord}'")).await;
            assert_eq!(
                at, truth[table],
                "{table} AS OF '{coord}' after the restart"
            );
        }
    }
}

/// A client that keeps the last `_position` it processed and tails again after it, killed at
/// random points (inside transactions too), sees every entry exactly once.
#[tokio::test]
async fn a_tail_resumed_after_its_last_position_misses_and_repeats_nothing() {
    let (db, source) = ("hist_d", "hd");
    let engine = setup(db, source).await;
    let mut conn = root_conn(server()).await;
    let seed: u64 = rand::random();
    println!("seed={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..15 {
        random_transaction(&mut conn, db, &mut rng).await;
    }
    sync_source(&engine, source).await;
    let tail = |after: Option<String>, n: usize| {
        let after = after.map(|p| format!(", '{p}'")).unwrap_or_default();
        format!(
            "SELECT _position, _op, id FROM changelog_tail('{source}', '{db}.t'{after}) LIMIT {n}"
        )
    };
    let mut seen: Vec<String> = Vec::new();
    let mut last: Option<String> = None;
    let mut writes = 0;
    loop {
        let all = query(
            &engine,
            &format!(
                "SELECT _position, _op, id FROM {source}.{db}.\"t$changelog\" ORDER BY _position"
            ),
        )
        .await;
        let left = all.len() - seen.len();
        if left == 0 {
            assert_eq!(seen, all, "every entry once, in order");
            break;
        }
        // The client is killed after a random number of entries.
        let n = rng.random_range(1..=left.min(40));
        let got = tokio::time::timeout(HANG_GUARD, query(&engine, &tail(last.clone(), n)))
            .await
            .expect("the tail has the entries");
        assert_eq!(got.len(), n);
        last = Some(
            got.last()
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .trim_start_matches("_position=")
                .to_string(),
        );
        seen.extend(got);
        assert_eq!(seen[..], all[..seen.len()], "after {last:?}");
        // The source goes on changing between the client's runs.
        if writes < 10 {
            random_transaction(&mut conn, db, &mut rng).await;
            sync_source(&engine, source).await;
            writes += 1;
        }
    }
    // After a binlog position: the transactions that start there or later.
    let coord = position(&mut conn).await;
    conn.query_drop(format!(
        "INSERT INTO {db}.t VALUES (900, 'w', 9), (901, 'w', 9)"
    ))
    .await
    .unwrap();
    sync_source(&engine, source).await;
    let got = tokio::time::timeout(
        HANG_GUARD,
        query(
            &engine,
            &format!("SELECT _op, id FROM changelog_tail('{source}', '{db}.t', '{coord}') LIMIT 2"),
        ),
    )
    .await
    .unwrap();
    assert_eq!(got, ["_op=c id=900", "_op=c id=901"]);
    let (state, _) = as_of_error(
        &engine,
        &format!("SELECT * FROM changelog_tail('{source}', '{db}.t', 'later')"),
    )
    .await;
    assert_eq!(state, "22P02");
}
