//! Time travel: `SELECT ... FROM t AS OF '<position>' | TIMESTAMP '...'` against the server's
//! own state recorded after every transaction of a random workload (seed printed, `HIST_SEED`
//! repeats a run), and against replaying the engine's changelog up to the same point.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use cdcfusion::change::position::BinlogCoord;
use cdcfusion::change::schema::Flavor;
use cdcfusion::engine::Engine;
use cdcfusion::source::connect::current_position;
use cdcfusion::state::changelog::MERGE_FANOUT;
use common::durable::{engine_changelog, replay};
use common::*;
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
    let (state, message) = sqlstate_error(
        &engine,
        &format!("SELECT * FROM {source}.{db}.t AS OF '{before}'"),
    )
    .await;
    assert_eq!(state, "22023", "{message}");
    assert!(message.contains(&consistent_from.to_string()), "{message}");
    let (state, message) = sqlstate_error(
        &engine,
        &format!("SELECT * FROM {source}.{db}.t AS OF 'binlog.999999:4'"),
    )
    .await;
    assert_eq!(state, "22023", "{message}");
    assert!(message.contains("not in the captured history"), "{message}");
    let (state, _) = sqlstate_error(
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
    let (state, message) = sqlstate_error(
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
    let (state, _) = sqlstate_error(
        &engine,
        &format!("SELECT * FROM changelog_tail('{source}', '{db}.t', 'later')"),
    )
    .await;
    assert_eq!(state, "22P02");
}

/// `changelog_entries`, `changelog_trimmed_entries` and `history_from` of `db.t`.
async fn retained(engine: &Engine, db: &str) -> (u64, u64, String) {
    let rows = query(
        engine,
        &format!(
            "SELECT changelog_entries AS n, changelog_trimmed_entries AS gone, history_from AS h \
             FROM cdc.tables WHERE db = '{db}' AND \"table\" = 't'"
        ),
    )
    .await;
    let fields: Vec<&str> = rows[0]
        .split(' ')
        .map(|f| f.split_once('=').unwrap().1)
        .collect();
    (
        fields[0].parse().unwrap(),
        fields[1].parse().unwrap(),
        fields[2].to_string(),
    )
}

/// The `CREATE SOURCE` statement `SHOW SOURCES` gives for `source`.
async fn source_definition(engine: &Engine, source: &str) -> String {
    query(engine, "SHOW SOURCES")
        .await
        .into_iter()
        .find(|r| r.starts_with(&format!("name={source} ")))
        .unwrap_or_else(|| panic!("no source {source}"))
}

/// An engine keeping its state in `path`, checkpointing often, whose SQL may write under `out`.
async fn open_durable(path: &str, out: &std::path::Path) -> Engine {
    use cdcfusion::durable::DurableOptions;
    use cdcfusion::engine::{AllowedLocations, EngineOptions};
    let options = EngineOptions {
        durable: DurableOptions {
            checkpoint_interval: Duration::from_millis(50),
            state_snapshot_min_changes: 10,
            ..Default::default()
        },
        allowed_locations: AllowedLocations::parse(&[format!("file://{}/", out.display())])
            .unwrap(),
        ..Default::default()
    };
    let engine = Engine::open(path, options).await.unwrap();
    engine
}

/// [`open_durable`] with source `source` capturing `db` and keeping `retain` of history, once
/// its snapshot is handed over.
async fn durable_source(
    path: &str,
    out: &std::path::Path,
    db: &str,
    source: &str,
    retain: &str,
) -> Engine {
    let engine = open_durable(path, out).await;
    engine
        .sql(&format!(
            "CREATE SOURCE {source} FROM MYSQL '{}' WITH (tables = '{db}.*', chunk_size = 16, \
             server_id = {}, retain_history = '{retain}')",
            server().cdc_url(),
            source_server_id()
        ))
        .await
        .unwrap();
    tokio::time::timeout(HANG_GUARD, engine.wait_ready(source))
        .await
        .unwrap()
        .unwrap();
    engine
}

/// `retain_history = '<n> changes'` under a long writer: the changelog stays bounded, AS OF
/// reads exactly from the oldest retained position on and refuses older points naming it,
/// checkpoints lose the trimmed entries too (a restart continues from the trimmed history),
/// and `ALTER SOURCE ... SET` changes the policy of the running source, across a restart.
#[tokio::test]
async fn retention_bounds_the_history_and_as_of_reads_what_is_kept() {
    let (db, source) = ("hist_e", "he");
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
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").to_str().unwrap().to_string();
    let engine = durable_source(&path, dir.path(), db, source, "50 changes").await;
    let mut points: Vec<(BinlogCoord, BTreeMap<&str, Vec<String>>)> = Vec::new();
    points.push((position(&mut conn).await, server_state(&mut conn, db).await));
    let mut changes = 40u64;
    // A long writer of single-row transactions, the engine keeping up as it goes.
    for round in 0..30 {
        for i in 0..20 {
            let id = (round * 20 + i) % 40 + 1;
            conn.query_drop(format!("UPDATE {db}.t SET n = n + 1 WHERE id = {id}"))
                .await
                .unwrap();
            changes += 1;
            points.push((position(&mut conn).await, server_state(&mut conn, db).await));
        }
        sync_source(&engine, source).await;
        tokio::time::sleep(Duration::from_millis(60)).await;
        let (kept, gone, _) = retained(&engine, db).await;
        assert_eq!(kept + gone, changes, "every entry counted once");
    }
    // Retention trims whole segments (runs of transactions merge into ever larger ones), so
    // it keeps at least 50 and at most a segment size class more.
    let (kept, gone, from) = retained(&engine, db).await;
    assert!(gone > 0, "nothing trimmed: {kept} kept");
    assert!((50..=1100).contains(&kept), "{kept} kept");
    assert!(kept < changes, "{kept} of {changes} kept");
    let history_from: BinlogCoord = from.parse().unwrap();
    // From the oldest retained position on AS OF is exact; before it, an error naming it.
    // Transactions of other tests on the shared server keep the capture publishing, so a
    // checkpoint can let retention trim further meanwhile: each point is checked against the
    // history kept when it is read.
    let mut checked = 0;
    for (coord, truth) in points.iter().filter(|(c, _)| *c >= history_from) {
        let (_, _, now) = retained(&engine, db).await;
        if *coord < now.parse::<BinlogCoord>().unwrap() {
            continue;
        }
        let at = as_of(&engine, source, db, "t", &format!("'{coord}'")).await;
        assert_eq!(at, truth["t"], "t AS OF '{coord}'");
        checked += 1;
    }
    assert!(checked >= 40, "{checked} points checked");
    let history_from: BinlogCoord = retained(&engine, db).await.2.parse().unwrap();
    let (_, truth) = points
        .iter()
        .rev()
        .find(|(c, _)| *c <= history_from)
        .expect("a point before the retained history");
    assert_eq!(
        as_of(&engine, source, db, "t", &format!("'{history_from}'")).await,
        truth["t"]
    );
    let (older, _) = points.iter().find(|(c, _)| *c < history_from).unwrap();
    let (state, message) = sqlstate_error(
        &engine,
        &format!("SELECT * FROM {source}.{db}.t AS OF '{older}'"),
    )
    .await;
    assert_eq!(state, "22023", "{message}");
    assert!(message.contains(&format!("'{history_from}'")), "{message}");
    assert!(message.contains("retain_history"), "{message}");
    // A tail cannot start after entries retention removed.
    let first_kept = scalar(
        &engine,
        &format!("SELECT min(_position) AS p FROM {source}.{db}.\"t$changelog\""),
    )
    .await;
    let (state, message) = sqlstate_error(
        &engine,
        &format!(
            "SELECT * FROM changelog_tail('{source}', '{db}.t', '{}') LIMIT 1",
            points[1].0
        ),
    )
    .await;
    assert_eq!(state, "22023", "{message}");
    assert!(first_kept.as_str() > cut_text(&points[1].0).as_str());

    // The checkpoints lost the trimmed entries too: a restart holds no more than they kept.
    sync_source(&engine, source).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(engine);
    let engine = open_durable(&path, dir.path()).await;
    tokio::time::timeout(HANG_GUARD, engine.wait_ready(source))
        .await
        .unwrap()
        .unwrap();
    sync_source(&engine, source).await;
    let (kept_after, gone_after, from_after) = retained(&engine, db).await;
    assert_eq!(
        kept_after + gone_after,
        changes,
        "offsets continue after the restart"
    );
    assert!(
        gone_after > 0 && kept_after < changes,
        "{kept_after} kept after the restart"
    );
    let from_after: BinlogCoord = from_after.parse().unwrap();
    for (coord, truth) in points.iter().filter(|(c, _)| *c >= from_after).step_by(7) {
        let at = as_of(&engine, source, db, "t", &format!("'{coord}'")).await;
        assert_eq!(at, truth["t"], "t AS OF '{coord}' after the restart");
    }
    let definition = source_definition(&engine, source).await;
    assert!(
        definition.contains("retain_history = '50 changes'"),
        "{definition}"
    );

    // ALTER SOURCE ... SET: from now on everything is kept, also after a restart.
    engine
        .sql(&format!(
            "ALTER SOURCE {source} SET (retain_history = 'all')"
        ))
        .await
        .unwrap();
    for id in 1..=60 {
        conn.query_drop(format!(
            "UPDATE {db}.t SET n = n + 1 WHERE id = {}",
            id % 40 + 1
        ))
        .await
        .unwrap();
        changes += 1;
    }
    sync_source(&engine, source).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (kept, gone, _) = retained(&engine, db).await;
    assert_eq!((kept, gone), (kept_after + 60, gone_after));
    assert_eq!(kept + gone, changes);
    drop(engine);
    let engine = open_durable(&path, dir.path()).await;
    let definition = source_definition(&engine, source).await;
    assert!(!definition.contains("retain_history"), "{definition}");
    let refused = engine
        .sql(&format!("ALTER SOURCE {source} SET (chunk_size = 5)"))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("running source"), "{refused}");
}

/// A paused sink holds back the history it has not committed: retention trims only what it
/// has, and the sink resumes with every change exactly once (read back by DuckDB).
#[tokio::test]
async fn retention_never_drops_what_a_paused_sink_needs() {
    use common::readers::{duckdb, sink_caught_up};
    let (db, source) = ("hist_f", "hf");
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(16), n INT);
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq FROM {db}.seq_1_to_40;"
    ))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").to_str().unwrap().to_string();
    let engine = durable_source(&path, dir.path(), db, source, "5 changes").await;
    let out = dir.path().join("changes");
    engine
        .sql(&format!(
            "CREATE SINK all_changes INTO PARQUET 'file://{}' WITH (commit_interval = '50ms') \
             AS SELECT * FROM {source}.{db}.\"t$changelog\"",
            out.display()
        ))
        .await
        .unwrap();
    let write = |from: i32, to: i32| {
        let db = db.to_string();
        async move {
            let mut conn = root_conn(server()).await;
            for i in from..to {
                conn.query_drop(format!(
                    "UPDATE {db}.t SET n = {i} WHERE id = {}",
                    i % 40 + 1
                ))
                .await
                .unwrap();
            }
        }
    };
    write(0, 100).await;
    sink_caught_up(&engine, source, "all_changes").await;
    engine.sql("ALTER SINK all_changes PAUSE").await.unwrap();
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while scalar(
        &engine,
        "SELECT state FROM cdc.sinks WHERE name = 'all_changes'",
    )
    .await
        != "paused"
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sink does not pause"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let committed = scalar(
        &engine,
        "SELECT committed_position FROM cdc.sinks WHERE name = 'all_changes'",
    )
    .await;
    // While paused, 300 more changes arrive; retention may trim only up to the sink's commit.
    write(100, 400).await;
    sync_source(&engine, source).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_commit = scalar(
        &engine,
        &format!(
            "SELECT count(*) AS n FROM {source}.{db}.\"t$changelog\" WHERE _position > '{committed}'"
        ),
    )
    .await;
    assert_eq!(
        after_commit, "300",
        "the paused sink's entries are all kept"
    );
    let (_, gone, _) = retained(&engine, db).await;
    assert!(gone > 0, "what the sink had committed is trimmed");
    engine.sql("ALTER SINK all_changes RESUME").await.unwrap();
    sink_caught_up(&engine, source, "all_changes").await;
    let files = format!("{}/**/*.parquet", out.display());
    let written = duckdb(&format!(
        "SELECT count(*), count(DISTINCT _position), count(*) FILTER (WHERE _op = 'r') \
         FROM read_parquet('{files}', hive_partitioning = true)"
    ));
    assert_eq!(written, ["440|440|40"], "every change once");
    // Once the sink has them, retention goes on.
    write(400, 440).await;
    sink_caught_up(&engine, source, "all_changes").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (kept, _, _) = retained(&engine, db).await;
    assert!(kept < 340, "{kept} entries kept after the sink caught up");
}

/// The rows `reconcile` answers for `db.t`, without the position column, sorted.
async fn differences(engine: &Engine, source: &str, db: &str) -> Vec<String> {
    let mut rows = query(
        engine,
        &format!(
            "SELECT key, difference, columns, source_values, engine_values \
             FROM reconcile('{source}', '{db}.t')"
        ),
    )
    .await;
    rows.sort();
    rows
}

/// `reconcile` under continuous writes reports nothing (the two sides at one position), and
/// after rows are changed on the server behind the binlog's back it reports exactly those
/// keys and columns, floating-point ones included.
#[tokio::test]
async fn reconcile_reports_exactly_the_rows_changed_behind_the_binlog() {
    let (db, source) = ("hist_g", "hg");
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(16), n INT, f DOUBLE,
                              d DECIMAL(8,2), at DATETIME(3), b VARBINARY(8), g FLOAT);
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq, seq / 7, seq / 3,
                                   '2026-01-02 03:04:05.678' + INTERVAL seq MINUTE,
                                   UNHEX(HEX(seq)), seq / 9
                            FROM {db}.seq_1_to_2000;
         CREATE TABLE {db}.nokey (a INT);"
    ))
    .await
    .unwrap();
    let engine = capture_db(db, source, 128, 4).await;
    // A writer that keeps changing the table while reconcile runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = std::sync::Arc::clone(&stop);
        let db = db.to_string();
        tokio::spawn(async move {
            let mut conn = root_conn(server()).await;
            let mut rng = StdRng::seed_from_u64(5);
            let mut writes = 0u64;
            // Keys up to 420 only: the ones changed behind the binlog below stay as they are.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = rng.random_range(1..400);
                let sql = match rng.random_range(0..4) {
                    0 => format!("UPDATE {db}.t SET n = n + 1, f = f * 2 WHERE id = {id}"),
                    1 => format!("DELETE FROM {db}.t WHERE id = {id}"),
                    2 => format!(
                        "INSERT IGNORE INTO {db}.t (id, v, n) VALUES ({id}, 'new', {id})"
                    ),
                    _ => format!(
                        "UPDATE {db}.t SET v = CONCAT('w', {id}), at = NOW(3) WHERE id BETWEEN {id} AND {}",
                        id + 20
                    ),
                };
                conn.query_drop(sql).await.unwrap();
                writes += 1;
            }
            writes
        })
    };
    for _ in 0..3 {
        assert_eq!(
            differences(&engine, source, db).await,
            Vec::<String>::new(),
            "no difference under writes"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.await.unwrap();
    assert!(writes > 0);
    let reports = query(
        &engine,
        "SELECT chunks, chunks_read, rows_compared, differences FROM cdc.reconciliations",
    )
    .await;
    assert_eq!(reports.len(), 3, "{reports:?}");
    assert!(
        reports.iter().all(|r| r.ends_with("differences=0")),
        "{reports:?}"
    );
    let chunks: u64 = scalar(&engine, "SELECT max(chunks) AS c FROM cdc.reconciliations")
        .await
        .parse()
        .unwrap();
    assert!(chunks >= 10, "{chunks} chunks");
    // Chunks the writer touched were read again and brought back to H: still no difference.
    let read_again: u64 = scalar(
        &engine,
        "SELECT sum(chunks_read) AS n FROM cdc.reconciliations",
    )
    .await
    .parse()
    .unwrap();
    assert!(read_again > 0, "no chunk was read again under writes");

    // Quiet: nothing is read again; only checksums and the FLOAT column (compared as values,
    // one per row) move.
    sync_source(&engine, source).await;
    assert!(differences(&engine, source, db).await.is_empty());
    let rows = scalar(
        &engine,
        &format!("SELECT count(*) AS n FROM {source}.{db}.t"),
    )
    .await;
    let quiet = query(
        &engine,
        "SELECT chunks_read, rows_fetched, bytes_moved FROM cdc.reconciliations \
         ORDER BY finished_at DESC LIMIT 1",
    )
    .await;
    println!("quiet reconcile: {quiet:?}");
    assert!(
        quiet[0].starts_with(&format!("chunks_read=0 rows_fetched={rows} bytes_moved=")),
        "{quiet:?}"
    );

    // Changes the binlog never sees.
    conn.query_drop(format!(
        "SET SESSION sql_log_bin = 0;
         UPDATE {db}.t SET v = 'drift' WHERE id = 500;
         UPDATE {db}.t SET f = 0.5 WHERE id = 900;
         UPDATE {db}.t SET g = 2.5 WHERE id = 1500;
         DELETE FROM {db}.t WHERE id = 1200;
         INSERT INTO {db}.t (id, v, n) VALUES (5000, 'ghost', 1);
         SET SESSION sql_log_bin = 1;"
    ))
    .await
    .unwrap();
    let engine_v: Vec<String> = query(
        &engine,
        &format!("SELECT v FROM {source}.{db}.t WHERE id = 500"),
    )
    .await;
    let found = differences(&engine, source, db).await;
    assert_eq!(found.len(), 5, "{found:#?}");
    assert!(
        found[0].starts_with("key=id=1200 difference=extra columns=NULL source_values=NULL"),
        "{found:#?}"
    );
    assert!(
        found[1].starts_with("key=id=1500 difference=differs columns=g source_values=g=2.5"),
        "{found:#?}"
    );
    assert_eq!(
        found[2],
        format!(
            "key=id=500 difference=differs columns=v source_values=v=drift engine_values={}",
            engine_v[0]
        )
    );
    assert!(
        found[3].starts_with("key=id=5000 difference=missing"),
        "{found:#?}"
    );
    assert!(
        found[4].starts_with("key=id=900 difference=differs columns=f source_values=f=0.5"),
        "{found:#?}"
    );
    // A keyless table cannot be reconciled by key.
    let (state, message) = sqlstate_error(
        &engine,
        &format!("SELECT * FROM reconcile('{source}', '{db}.nokey')"),
    )
    .await;
    assert_eq!(state, "0A000", "{message}");
    assert!(message.contains("primary key"), "{message}");
}

/// `retain_history` under a writer that goes on: however many changes pass, once a checkpoint
/// holds them the history held is the policy plus at most the last round's segments (the
/// memory a source's history takes is bounded), and every change is counted once, held or
/// removed. Each round waits for the checkpoint and then writes once more, so what is
/// measured does not depend on how fast the machine checkpoints.
#[tokio::test]
async fn retention_keeps_the_history_bounded_under_a_long_writer() {
    let (db, source) = ("hist_m", "hm");
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, n INT);
         INSERT INTO {db}.t SELECT seq, 0 FROM {db}.seq_1_to_50;"
    ))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").to_str().unwrap().to_string();
    let engine = durable_source(&path, dir.path(), db, source, "100 changes").await;
    let rounds = 40u64;
    let mut held = Vec::new();
    for round in 1..=rounds {
        // 100 single-row transactions per round.
        let updates: Vec<String> = (0..100)
            .map(|i| format!("UPDATE {db}.t SET n = n + 1 WHERE id = {}", i % 50 + 1))
            .collect();
        conn.query_drop(updates.join(";")).await.unwrap();
        sync_source(&engine, source).await;
        wait_checkpointed(&engine, source).await;
        // One more transaction: the capture trims as it applies it, now that the checkpoint
        // holds the round.
        conn.query_drop(format!("UPDATE {db}.t SET n = n + 1 WHERE id = 1"))
            .await
            .unwrap();
        sync_source(&engine, source).await;
        let (kept, gone, _) = retained(&engine, db).await;
        assert_eq!(kept + gone, 50 + round * 101, "every entry counted once");
        held.push(kept);
    }
    let (_, gone, _) = retained(&engine, db).await;
    let total = 50 + rounds * 101;
    println!("{total} changes, held after each round: {held:?}");
    // Whole segments go: what is held is the newest 100 entries and the rest of the segment
    // the oldest of them is in. A segment is the transactions applied together (at most a
    // round here) or a merged run of MERGE_FANOUT small ones (each under 32 entries), and the
    // next round's 101 entries may join such a run before it is trimmed again.
    let bound = 100 + MERGE_FANOUT as u64 * 31 + 101;
    let most = held.iter().copied().max().unwrap_or(0);
    assert!(most <= bound, "{most} of {total} held at once: {held:?}");
    assert!(gone >= total - bound, "only {gone} of {total} removed");
}

/// Waits until the newest checkpoint of `source` holds everything it has published.
async fn wait_checkpointed(engine: &Engine, source: &str) {
    let caught_up = async {
        loop {
            let running = engine.source(source).unwrap();
            let published = running.published.load().position.clone();
            if published.is_some() && running.status().durable_position == published {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(HANG_GUARD, caught_up)
        .await
        .unwrap_or_else(|_| panic!("no checkpoint of {source} caught up"));
}
