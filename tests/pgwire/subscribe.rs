//! `SUBSCRIBE` over the wire: the `COPY` stream (tokio-postgres and psql), the cursor form
//! (`DECLARE ... CURSOR FOR SUBSCRIBE`, `FETCH`), clients killed mid-stream that subscribe
//! again `AS OF` their last `_position`, and the queries a subscription refuses.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use mysql_async::prelude::Queryable;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;
use crate::fixture::*;

const SETUP: &str = "CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(8));
    INSERT INTO {db}.t VALUES (1, 2, 'a'), (2, 3, 'b'), (3, 4, NULL), (4, 6, 'd'), (5, 7, 'e');";

/// The subscribed query: a projection with an expression and a filter rows move across.
const QUERY: &str = "SELECT id, v * 10 AS v10, s FROM sub_db.t WHERE v % 2 = 0";

/// One row a subscription sent: `_position`, `_op`, then its columns as text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sent {
    position: String,
    op: String,
    columns: Vec<Option<String>>,
}

/// A `COPY` text line as its fields (`\N` is NULL; the values here need no unescaping).
fn parse_line(line: &[u8]) -> Sent {
    let text = std::str::from_utf8(line).unwrap().trim_end_matches('\n');
    let mut fields = text
        .split('\t')
        .map(|f| (f != "\\N").then(|| f.to_string()));
    let position = fields.next().flatten().unwrap();
    let op = fields.next().flatten().unwrap();
    Sent {
        position,
        op,
        columns: fields.collect(),
    }
}

/// The result a client keeps by applying what it was sent: id -> (v10, s).
fn apply(state: &mut BTreeMap<String, Vec<Option<String>>>, row: &Sent) {
    let id = row.columns[0].clone().unwrap();
    match row.op.as_str() {
        "r" | "c" | "u" => {
            state.insert(id, row.columns[1..3].to_vec());
        }
        "d" => {
            assert!(
                state.remove(&id).is_some(),
                "a d for a row not held: {row:?}"
            );
        }
        other => panic!("op {other} in {row:?}"),
    }
}

/// The query's rows on the server itself.
async fn server_rows(db: &str) -> BTreeMap<String, Vec<Option<String>>> {
    let rows: Vec<(i32, i64, Option<String>)> = root_conn(server())
        .await
        .query(format!("SELECT id, v * 10, s FROM {db}.t WHERE v % 2 = 0"))
        .await
        .unwrap();
    rows.into_iter()
        .map(|(id, v10, s)| (id.to_string(), vec![Some(v10.to_string()), s]))
        .collect()
}

/// A random transaction of 1 to 3 changes: updates that move rows in and out of the filter,
/// inserts, deletes, key changes.
async fn random_transaction(conn: &mut mysql_async::Conn, db: &str, rng: &mut StdRng) {
    let mut statements = vec!["BEGIN".to_string()];
    for _ in 0..rng.random_range(1..=3) {
        let id = rng.random_range(1..=12);
        statements.push(match rng.random_range(0..5) {
            0 | 1 => format!(
                "UPDATE {db}.t SET v = {}, s = 's{}' WHERE id = {id}",
                rng.random_range(0..10),
                rng.random_range(0..100)
            ),
            2 => format!(
                "INSERT INTO {db}.t VALUES ({id}, {}, NULL) ON DUPLICATE KEY UPDATE v = v + 1",
                rng.random_range(0..10)
            ),
            3 => format!("DELETE FROM {db}.t WHERE id = {id}"),
            _ => format!(
                "UPDATE {db}.t SET id = {} WHERE id = {id}",
                rng.random_range(13..40)
            ),
        });
    }
    statements.push("COMMIT".into());
    // A key change may collide; such a transaction is simply rolled back.
    if conn.query_drop(statements.join(";")).await.is_err() {
        let _ = conn.query_drop("ROLLBACK").await;
    }
}

/// A COPY stream of `sql` on a new connection, and the connection's task.
async fn copy_stream(
    f: &Fixture,
    sql: &str,
) -> (
    tokio_postgres::Client,
    std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
) {
    let client = f.client("sub").await;
    let stream = client.copy_out(sql).await.unwrap();
    (client, Box::pin(stream))
}

async fn next_line(
    stream: &mut std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
    waiting: &str,
) -> Bytes {
    let line = tokio::time::timeout(HANG_GUARD, stream.next())
        .await
        .unwrap_or_else(|_| panic!("no row before the hang guard: {waiting}"))
        .expect("the stream goes on")
        .unwrap();
    line
}

// The writer runs on another worker while clients read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_subscribers_resume_as_of_their_last_position_with_no_gap_or_repeat() {
    let f = Fixture::start("sub_db", "sub", SETUP, settings()).await;
    f.sync().await;
    let seed: u64 = std::env::var("SUB_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("SUB_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    // A client that is never interrupted, from the start, with progress rows.
    let (_whole_client, mut whole) = copy_stream(
        &f,
        &format!("COPY (SUBSCRIBE TO ({QUERY}) WITH (progress = true)) TO STDOUT"),
    )
    .await;
    let mut whole_state = BTreeMap::new();
    let start = loop {
        let row = parse_line(&next_line(&mut whole, "the snapshot").await);
        if row.op == "p" {
            break row.position;
        }
        assert_eq!(row.op, "r", "{row:?}");
        apply(&mut whole_state, &row);
    };
    assert_eq!(whole_state, server_rows("sub_db").await, "the snapshot");

    let (written, mut writer_done) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn({
        let mut rng = StdRng::seed_from_u64(rng.random());
        async move {
            let mut conn = root_conn(server()).await;
            for _ in 0..120 {
                random_transaction(&mut conn, "sub_db", &mut rng).await;
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..15))).await;
            }
            let _ = written.send(true);
        }
    });

    // A client killed after a few rows each time (inside transactions too), subscribing
    // again AS OF the last _position it processed, with the snapshot off.
    let mut resumed: Vec<Sent> = Vec::new();
    let mut state = whole_state.clone();
    let mut last = start.clone();
    let mut kills = 0;
    while !writer.is_finished() || kills < 3 {
        let (client, mut stream) = copy_stream(
            &f,
            &format!(
                "COPY (SUBSCRIBE TO ({QUERY}) AS OF '{last}' WITH (snapshot = false)) TO STDOUT"
            ),
        )
        .await;
        let take = rng.random_range(1..12);
        for _ in 0..take {
            // Rows may run out once the writer is done: then this client is killed early.
            let line = tokio::select! {
                biased;
                line = stream.next() => line.expect("the subscription goes on").unwrap(),
                _ = writer_done.wait_for(|done| *done) => break,
            };
            let row = parse_line(&line);
            assert!(
                row.position > last,
                "{row:?} repeats or goes back from {last}"
            );
            apply(&mut state, &row);
            last = row.position.clone();
            resumed.push(row);
        }
        // Killed: the connection goes away mid-stream.
        drop(stream);
        drop(client);
        kills += 1;
    }
    writer.await.unwrap();
    f.sync().await;
    let expected = server_rows("sub_db").await;

    // The uninterrupted client reads until a progress row says it has everything.
    let (_, end) = current_position(&mut root_conn(server()).await).await;
    let mut whole_changes: Vec<Sent> = Vec::new();
    loop {
        let row = parse_line(&next_line(&mut whole, &format!("progress past {end}")).await);
        if row.op == "p" {
            if row.position >= end {
                break;
            }
            continue;
        }
        apply(&mut whole_state, &row);
        whole_changes.push(row);
    }
    assert_eq!(
        whole_state, expected,
        "the uninterrupted subscriber, seed {seed}"
    );
    // The resumed client catches up, and what it got is what the uninterrupted one got.
    let (_client, mut stream) = copy_stream(
        &f,
        &format!("COPY (SUBSCRIBE TO ({QUERY}) AS OF '{last}' WITH (snapshot = false)) TO STDOUT"),
    )
    .await;
    while resumed.len() < whole_changes.len() {
        let row = parse_line(&next_line(&mut stream, "the resumed stream's catch-up").await);
        apply(&mut state, &row);
        resumed.push(row);
    }
    assert_eq!(
        resumed, whole_changes,
        "no gap, no repeat (seed {seed}, {kills} kills)"
    );
    assert_eq!(state, expected, "the resumed subscriber, seed {seed}");
    assert!(
        whole_changes.iter().any(|r| r.op == "d") && whole_changes.iter().any(|r| r.op == "u"),
        "the workload moved rows out of and within the result (seed {seed})"
    );
    f.shutdown().await;
}

/// The server's binlog position as a subscription's progress `_position` writes it.
async fn current_position(conn: &mut mysql_async::Conn) -> ((), String) {
    let (at, _) = cdcfusion::source::connect::current_position(
        conn,
        cdcfusion::change::schema::Flavor::MariaDb,
    )
    .await
    .unwrap();
    (
        (),
        cdcfusion::change::position::ChangePosition::text_before(&at),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_fetch_a_subscription_and_a_query() {
    let f = Fixture::start("sub_cur", "subcur", SETUP, settings()).await;
    f.sync().await;
    let client = f.client("subcur").await;
    // Outside a transaction block a cursor needs WITH HOLD, as in PostgreSQL.
    let error = client
        .simple_query("DECLARE c CURSOR FOR SUBSCRIBE sub_cur.t")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&error), "25P01", "{error}");
    client.batch_execute("BEGIN").await.unwrap();
    client
        .batch_execute(
            "DECLARE c CURSOR FOR SUBSCRIBE TO (SELECT id, s FROM sub_cur.t WHERE id <= 3)",
        )
        .await
        .unwrap();
    // The snapshot, fetched in two parts (extended protocol: described from the cursor).
    let first = client.query("FETCH 2 FROM c", &[]).await.unwrap();
    let rest = client.query("FETCH 10 c", &[]).await.unwrap();
    assert_eq!(first.len(), 2);
    assert_eq!(rest.len(), 1, "FETCH returns what is ready, not 10 rows");
    let mut ids: Vec<i32> = first.iter().chain(&rest).map(|r| r.get("id")).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3]);
    assert!(first.iter().all(|r| r.get::<_, String>("_op") == "r"));
    // A FETCH waits for the next change, and gets it.
    let fetch = {
        let client = &client;
        async move { client.query("FETCH ALL c", &[]).await.unwrap() }
    };
    let write = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        root_conn(server())
            .await
            .query_drop("UPDATE sub_cur.t SET s = 'x' WHERE id = 2")
            .await
            .unwrap();
    };
    let (rows, ()) = tokio::join!(fetch, write);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, String>("_op"), "u");
    assert_eq!(rows[0].get::<_, Option<String>>("s").as_deref(), Some("x"));
    // A FETCH that times out loses nothing, and the block goes on after ROLLBACK TO.
    client.batch_execute("SAVEPOINT w").await.unwrap();
    client
        .batch_execute("SET statement_timeout = 300")
        .await
        .unwrap();
    let error = client.query("FETCH 1 c", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&error), "57014", "{error}");
    client.batch_execute("ROLLBACK TO w").await.unwrap();
    client
        .batch_execute("SET statement_timeout = 0")
        .await
        .unwrap();
    // COMMIT closes it.
    client.batch_execute("COMMIT").await.unwrap();
    let error = client.query("FETCH 1 c", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&error), "34000", "{error}");

    // A cursor over a query: parts, then the rest, then nothing.
    client.batch_execute("BEGIN").await.unwrap();
    client
        .batch_execute("DECLARE q CURSOR FOR SELECT id FROM sub_cur.t ORDER BY id")
        .await
        .unwrap();
    let error = client
        .batch_execute("DECLARE q CURSOR FOR SELECT 1")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&error), "42P03", "{error}");
    client.batch_execute("ROLLBACK").await.unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    client
        .batch_execute("DECLARE q CURSOR FOR SELECT id FROM sub_cur.t ORDER BY id")
        .await
        .unwrap();
    let ids =
        |rows: Vec<tokio_postgres::Row>| -> Vec<i32> { rows.iter().map(|r| r.get(0)).collect() };
    assert_eq!(ids(client.query("FETCH 2 q", &[]).await.unwrap()), [1, 2]);
    assert_eq!(
        ids(client.query("FETCH ALL q", &[]).await.unwrap()),
        [3, 4, 5]
    );
    assert!(client.query("FETCH 1 q", &[]).await.unwrap().is_empty());
    client.batch_execute("CLOSE q").await.unwrap();
    client.batch_execute("COMMIT").await.unwrap();

    // psql: a cursor in a block, one -c per statement.
    let out = f.psql(
        "subcur",
        &[
            "-AtX",
            "-c",
            "BEGIN",
            "-c",
            "DECLARE c CURSOR FOR SUBSCRIBE TO (SELECT id, s FROM sub_cur.t WHERE id = 1)",
            "-c",
            "FETCH 5 c",
        ],
    );
    let text = stdout_of(&out);
    assert!(text.contains("|r|1|a|"), "{text}");
    f.shutdown().await;
}

// psql blocks its thread while the server answers on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_streams_a_subscription_and_refusals_name_why() {
    let f = Fixture::start("sub_err", "suberr", SETUP, settings()).await;
    f.sync().await;
    // psql prints the rows as they come; the statement timeout ends the stream.
    let out = f.psql(
        "suberr",
        &[
            "-AtX",
            "-c",
            "SET statement_timeout = 1500",
            "-c",
            "SUBSCRIBE TO (SELECT id, s FROM sub_err.t WHERE id < 3) WITH (progress)",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    // psql prints the SET's tag, then the COPY data.
    let lines: Vec<Sent> = text
        .lines()
        .filter(|l| l.contains('\t'))
        .map(|l| parse_line(l.as_bytes()))
        .collect();
    let snapshot: Vec<&Sent> = lines.iter().filter(|r| r.op == "r").collect();
    assert_eq!(snapshot.len(), 2, "{text}");
    assert!(lines.iter().any(|r| r.op == "p"), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("statement timeout"),
        "{out:?}"
    );

    let client = f.client("suberr").await;
    for (sql, state, needle) in [
        (
            "SUBSCRIBE TO (SELECT a.id FROM sub_err.t a JOIN sub_err.t b ON a.id = b.id)",
            "0A000",
            "a join",
        ),
        (
            "SUBSCRIBE TO (SELECT count(*) FROM sub_err.t)",
            "0A000",
            "aggregate",
        ),
        (
            "SUBSCRIBE TO (SELECT * FROM sub_err.t ORDER BY id)",
            "0A000",
            "ORDER BY",
        ),
        (
            "SUBSCRIBE sub_err.\"t$changelog\"",
            "0A000",
            "changelog_tail",
        ),
        ("SUBSCRIBE TO (SELECT 1)", "0A000", "captured table"),
        (
            "SUBSCRIBE TO (SELECT id AS _op FROM sub_err.t)",
            "42701",
            "_op",
        ),
        (
            "SUBSCRIBE sub_err.t AS OF 'soon'",
            "22P02",
            "not a position",
        ),
        (
            "SUBSCRIBE sub_err.t AS OF 'binlog.000001:4'",
            "22023",
            "before",
        ),
        ("SUBSCRIBE TO (SHOW ALL)", "42601", "takes a query"),
        (
            "SUBSCRIBE sub_err.t WITH (snapshots = true)",
            "42601",
            "unknown option",
        ),
        ("SUBSCRIBE sub_err.nope", "42P01", "nope"),
    ] {
        let error = client.simple_query(sql).await.unwrap_err();
        assert_eq!(sqlstate(&error), state, "{sql}: {error:?}");
        assert!(format!("{error:?}").contains(needle), "{sql}: {error:?}");
    }
    // The connection goes on serving.
    let rows = client
        .query("SELECT count(*) FROM sub_err.t", &[])
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, i64>(0), 5);
    f.shutdown().await;
}
