//! Statements run again from the plan their connection kept (a simple-protocol statement by
//! its text, a prepared statement from its `Parse`) read what a freshly planned statement
//! reads: the version published for that run, the session's settings of that run, their own
//! stale-read warnings; and a kept plan whose names no longer resolve (`DROP SOURCE`) fails as
//! a new statement would, then resolves again once the source is back. The sessions plan
//! every statement (`cdcfusion.point_lookups = off`), so no lookup from the key index answers
//! in their place.

use mysql_async::prelude::Queryable;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::common::*;
use crate::fixture::*;

const SETUP: &str = "CREATE TABLE {db}.t (id BIGINT PRIMARY KEY, a INT NOT NULL);
     INSERT INTO {db}.t VALUES (1, 10), (2, 20);";

/// A session on `database` that plans every statement.
async fn planned(f: &Fixture, database: &str) -> Client {
    f.client_with(database, "SET cdcfusion.point_lookups = off")
        .await
}

/// The first value of the first row of a simple query, or its SQLSTATE.
async fn first(client: &Client, sql: &str) -> String {
    match client.simple_query(sql).await {
        Ok(messages) => messages
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap_or("NULL").to_string()),
                _ => None,
            })
            .unwrap_or_else(|| "no rows".into()),
        Err(e) => format!("error {}", sqlstate(&e)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_run_again_read_the_version_of_each_run() {
    let f = Fixture::start("pg_plans_fresh", "plans_fresh", SETUP, settings()).await;
    let client = planned(&f, "plans_fresh").await;
    let mut conn = root_conn(server()).await;
    let count = "SELECT count(*) FROM pg_plans_fresh.t";
    let by_key = client
        .prepare("SELECT a FROM pg_plans_fresh.t WHERE id = $1")
        .await
        .unwrap();
    let at_least = client
        .prepare("SELECT id FROM pg_plans_fresh.t WHERE a >= $1 ORDER BY id")
        .await
        .unwrap();
    let ids =
        |rows: Vec<tokio_postgres::Row>| -> Vec<i64> { rows.iter().map(|r| r.get(0)).collect() };
    assert_eq!(first(&client, count).await, "2");
    assert!(client.query(&by_key, &[&3i64]).await.unwrap().is_empty());
    assert_eq!(ids(client.query(&at_least, &[&15i32]).await.unwrap()), [2]);
    // Each statement runs twice per version: the second run is the kept plan's.
    for (round, new_id) in [(1, 3i64), (2, 4)] {
        conn.exec_drop(
            "INSERT INTO pg_plans_fresh.t VALUES (?, ?)",
            (new_id, new_id * 10),
        )
        .await
        .unwrap();
        f.sync().await;
        for _ in 0..2 {
            assert_eq!(first(&client, count).await, (2 + round).to_string());
            let found = client.query(&by_key, &[&new_id]).await.unwrap();
            assert_eq!(found.len(), 1, "round {round}");
            assert_eq!(found[0].get::<_, i32>(0), new_id as i32 * 10);
            let expected: Vec<i64> = (2..=new_id).collect();
            assert_eq!(
                ids(client.query(&at_least, &[&15i32]).await.unwrap()),
                expected
            );
        }
    }
    // A deleted row is gone from the next run of the same statements.
    conn.query_drop("DELETE FROM pg_plans_fresh.t WHERE id = 2")
        .await
        .unwrap();
    f.sync().await;
    assert_eq!(first(&client, count).await, "3");
    assert!(client.query(&by_key, &[&2i64]).await.unwrap().is_empty());
    assert_eq!(
        ids(client.query(&at_least, &[&15i32]).await.unwrap()),
        [3, 4]
    );
    // `now()` is the start of each run, not of the first planning.
    let now = "SELECT CAST(now() AS VARCHAR)";
    let before = first(&client, now).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_ne!(first(&client, now).await, before);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_run_again_follow_the_session_settings() {
    let f = Fixture::start("pg_plans_settings", "plans_settings", SETUP, settings()).await;
    let client = planned(&f, "plans_settings").await;
    let sql = "SELECT current_setting('application_name')";
    let prepared = client.prepare(sql).await.unwrap();
    for name in ["first", "second"] {
        client
            .batch_execute(&format!("SET application_name = '{name}'"))
            .await
            .unwrap();
        for _ in 0..2 {
            assert_eq!(first(&client, sql).await, name);
            let row = client.query_one(&prepared, &[]).await.unwrap();
            assert_eq!(row.get::<_, String>(0), name);
        }
    }
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_run_again_warn_of_stale_reads_every_time() {
    let f = Fixture::start("pg_plans_stale", "plans_stale", SETUP, settings()).await;
    let mut conn = root_conn(server()).await;
    let sql = "SELECT count(*) FROM pg_plans_stale.t;\n";
    // Before the table stops: no warning, however often it runs.
    let verbose = ["-A", "-t", "-v", "VERBOSITY=verbose"];
    let script = format!("SET cdcfusion.point_lookups = off;\n{}", sql.repeat(3));
    let healthy = f.psql_script("plans_stale", &verbose, &script);
    let err = String::from_utf8_lossy(&healthy.stderr);
    assert_eq!(err.matches("WARNING").count(), 0, "{err}");
    // A dropped table stops: its last state stays.
    conn.query_drop("DROP TABLE pg_plans_stale.t")
        .await
        .unwrap();
    f.sync().await;
    let stale = f.psql_script(
        "plans_stale",
        &verbose,
        &format!("SET cdcfusion.stale_reads = on;\n{script}"),
    );
    let out = String::from_utf8_lossy(&stale.stdout);
    let err = String::from_utf8_lossy(&stale.stderr);
    assert_eq!(out.matches("2\n").count(), 3, "{out}");
    assert_eq!(err.matches("WARNING:  01000:").count(), 3, "{err}");
    // Without stale reads every run is refused, the kept plan's too.
    let refused = f.psql_script("plans_stale", &verbose, &script);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(err.matches("ERROR:  55000:").count(), 3, "{err}");
    let client = planned(&f, "plans_stale").await;
    for _ in 0..2 {
        assert_eq!(first(&client, sql.trim()).await, "error 55000");
    }
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_plans_of_a_dropped_source_fail_then_resolve_again() {
    let f = Fixture::start("pg_plans_drop", "plans_drop", SETUP, settings()).await;
    let client = planned(&f, cdcfusion::frontend::DEFAULT_DATABASE).await;
    let count = "SELECT count(*) FROM plans_drop.pg_plans_drop.t";
    let prepared = client
        .prepare("SELECT a FROM plans_drop.pg_plans_drop.t WHERE id >= $1 ORDER BY id")
        .await
        .unwrap();
    assert_eq!(first(&client, count).await, "2");
    assert_eq!(client.query(&prepared, &[&1i64]).await.unwrap().len(), 2);
    let admin = f.client(cdcfusion::frontend::DEFAULT_DATABASE).await;
    admin.batch_execute("DROP SOURCE plans_drop").await.unwrap();
    for _ in 0..2 {
        assert_eq!(first(&client, count).await, "error 42P01");
        let e = client.query(&prepared, &[&1i64]).await.unwrap_err();
        assert_eq!(sqlstate(&e), "42P01", "{e}");
    }
    // The source again, with one more row: the same statements find its new tables.
    let mut conn = root_conn(server()).await;
    conn.query_drop("INSERT INTO pg_plans_drop.t VALUES (3, 30)")
        .await
        .unwrap();
    let mut options = cdcfusion::capture::CaptureOptions::new(
        "pg_plans_drop.*".to_string(),
        cdcfusion::capture::SnapshotMode::Initial,
    );
    options.server_id = next_server_id();
    options.snapshot.window_server_id = next_server_id();
    f.engine
        .create_source("plans_drop", &server().cdc_url(), options)
        .unwrap();
    tokio::time::timeout(HANG_GUARD, f.engine.wait_ready("plans_drop"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first(&client, count).await, "3");
    let rows = client.query(&prepared, &[&1i64]).await.unwrap();
    let values: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(values, [10, 20, 30]);
    f.shutdown().await;
}

/// Prepared statements whose parameters all go to a lookup (a key, a secondary index, a
/// range of the key, an `IN` list) are planned at their first run only: later runs bind the
/// new values into the kept physical plan (the front end's counter of statements planned
/// stays where it was) and answer for them. One whose parameter is elsewhere (a projection)
/// is planned at every run. A schema change makes every kept plan plan once again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_lookups_with_parameters_are_planned_once() {
    let setup = "CREATE TABLE {db}.t (id BIGINT PRIMARY KEY, a INT NOT NULL, KEY by_a (a));
         INSERT INTO {db}.t SELECT seq, seq % 10 FROM {db}.seq_1_to_200;";
    let f = Fixture::start("pg_plans_params", "plans_params", setup, settings()).await;
    let client = planned(&f, "plans_params").await;
    let prepare = async |sql: &str| {
        client
            .prepare(&sql.replace("{t}", "pg_plans_params.t"))
            .await
            .unwrap()
    };
    let by_key = prepare("SELECT a FROM {t} WHERE id = $1").await;
    let by_a = prepare("SELECT id FROM {t} WHERE a = $1").await;
    let range = prepare("SELECT id FROM {t} WHERE id >= $1 AND id < $2").await;
    let listed = prepare("SELECT id FROM {t} WHERE a IN ($1, $2)").await;
    let projected = prepare("SELECT id + $1 FROM {t} WHERE id = 7").await;
    let planned_now = || f.metrics.snapshot().1.planned;
    let sorted = |rows: Vec<tokio_postgres::Row>| -> Vec<i64> {
        let mut v: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        v.sort();
        v
    };
    let expected_a = |a: i64| -> Vec<i64> { (1..=200).filter(|id| id % 10 == a).collect() };
    let run_all = async |round: i64| {
        let id = 1 + round * 17 % 200;
        let found: Vec<i32> = client
            .query(&by_key, &[&id])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(found, [(id % 10) as i32]);
        let a = (round % 10) as i32;
        assert_eq!(
            sorted(client.query(&by_a, &[&a]).await.unwrap()),
            expected_a(a as i64)
        );
        let (low, high) = (round * 11, round * 11 + 25);
        let want: Vec<i64> = (low.max(1)..high.min(201)).collect();
        assert_eq!(
            sorted(client.query(&range, &[&low, &high]).await.unwrap()),
            want
        );
        let (b, c) = ((round % 10) as i32, ((round + 3) % 10) as i32);
        let mut want = expected_a(b as i64);
        want.extend(expected_a(c as i64));
        want.sort();
        assert_eq!(
            sorted(client.query(&listed, &[&b, &c]).await.unwrap()),
            want
        );
        let plus: Vec<i64> = sorted(client.query(&projected, &[&round]).await.unwrap());
        assert_eq!(plus, [7 + round]);
    };
    run_all(0).await;
    let before = planned_now();
    for round in 1..=10 {
        run_all(round).await;
    }
    // Only the statement whose parameter is in its projection was planned, once a run.
    assert_eq!(planned_now() - before, 10);
    // Changes are read by the kept plans.
    let mut conn = root_conn(server()).await;
    conn.query_drop("UPDATE pg_plans_params.t SET a = a + 10 WHERE id <= 100")
        .await
        .unwrap();
    f.sync().await;
    let found = sorted(client.query(&by_a, &[&13i32]).await.unwrap());
    assert_eq!(
        found,
        (1..=100).filter(|id| id % 10 == 3).collect::<Vec<i64>>()
    );
    conn.query_drop("UPDATE pg_plans_params.t SET a = a - 10 WHERE id <= 100")
        .await
        .unwrap();
    // A column added: each statement plans once again, then runs from its kept plan.
    conn.query_drop("ALTER TABLE pg_plans_params.t ADD COLUMN note TEXT NULL")
        .await
        .unwrap();
    f.sync().await;
    let before = planned_now();
    run_all(11).await;
    assert_eq!(planned_now() - before, 5);
    let before = planned_now();
    run_all(12).await;
    run_all(13).await;
    assert_eq!(planned_now() - before, 2);
    f.shutdown().await;
}
