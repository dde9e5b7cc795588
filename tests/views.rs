//! Captured tables queried through DataFusion: the current table, the changelog, status tables,
//! point lookups from the index, and transactions that are seen whole or not at all.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cdcfusion::engine::Engine;
use common::*;
use mysql_async::prelude::Queryable;

async fn setup(db: &str, source: &str) -> Engine {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, c INT, v VARCHAR(16));
         INSERT INTO {db}.t SELECT seq, seq * 10, CONCAT('v', seq) FROM {db}.seq_1_to_50;
         CREATE TABLE {db}.acct (id INT PRIMARY KEY, balance BIGINT);
         INSERT INTO {db}.acct VALUES (1, 1000), (2, 1000);"
    ))
    .await
    .unwrap();
    capture_db(db, source, 16, 4).await
}

#[tokio::test]
async fn current_table_and_changelog_follow_the_source() {
    let engine = setup("views_a", "va").await;
    assert_eq!(
        query(&engine, "SELECT count(*) AS n FROM va.views_a.t").await,
        ["n=50"]
    );
    assert_eq!(
        query(&engine, "SELECT * FROM va.views_a.t WHERE id = 7").await,
        ["id=7 c=70 v=v7"]
    );
    let mut conn = root_conn(server()).await;
    conn.query_drop(
        "UPDATE views_a.t SET v = 'x' WHERE id = 7; DELETE FROM views_a.t WHERE id = 8;
         INSERT INTO views_a.t VALUES (100, 1, 'new'); UPDATE views_a.t SET id = 101 WHERE id = 9;",
    )
    .await
    .unwrap();
    sync_source(&engine, "va").await;
    assert_eq!(
        query(
            &engine,
            "SELECT id, v FROM va.views_a.t WHERE id IN (7, 8, 9, 100, 101) ORDER BY id"
        )
        .await,
        ["id=7 v=x", "id=100 v=new", "id=101 v=v9"]
    );
    assert_eq!(
        query(&engine, "SELECT count(*) AS n FROM va.views_a.t").await,
        ["n=50"]
    );
    // Every change of row 7, in source order, with its before image.
    assert_eq!(
        query(&engine, "SELECT _op, v, _before['v'] AS before FROM va.views_a.\"t$changelog\" WHERE id = 7 ORDER BY _position").await,
        ["_op=r v=v7 before=NULL", "_op=u v=x before=v7"]
    );
    // The key change is a delete of the old key and an insert of the new one.
    assert_eq!(
        query(
            &engine,
            "SELECT _op, id FROM va.views_a.\"t$changelog\" WHERE _op <> 'r' ORDER BY _position"
        )
        .await,
        [
            "_op=u id=7",
            "_op=d id=8",
            "_op=c id=100",
            "_op=d id=9",
            "_op=c id=101"
        ]
    );
    // Binlog-derived positions are unique, and replaying the changelog gives the table.
    assert_eq!(
        query(&engine, "SELECT count(*) - count(DISTINCT _position) AS dup FROM va.views_a.\"t$changelog\" WHERE _op <> 'r'").await,
        ["dup=0"]
    );
    let replay = query(
        &engine,
        "SELECT id, c, v FROM (SELECT *, row_number() OVER (PARTITION BY id ORDER BY _position DESC) AS rn
           FROM va.views_a.\"t$changelog\") WHERE rn = 1 AND _op <> 'd' ORDER BY id",
    )
    .await;
    assert_eq!(
        replay,
        query(&engine, "SELECT id, c, v FROM va.views_a.t ORDER BY id").await
    );
    // Position pruning still returns exactly the matching rows.
    let first_change = query(
        &engine,
        "SELECT min(_position) AS p FROM va.views_a.\"t$changelog\" WHERE _op <> 'r'",
    )
    .await;
    let p = first_change[0].trim_start_matches("p=");
    assert_eq!(
        query(
            &engine,
            &format!(
                "SELECT count(*) AS n FROM va.views_a.\"t$changelog\" WHERE _position >= '{p}'"
            )
        )
        .await,
        ["n=5"]
    );
}

#[tokio::test]
async fn point_lookups_use_the_index() {
    let engine = setup("views_b", "vb").await;
    let plan = query(&engine, "EXPLAIN SELECT v FROM vb.views_b.t WHERE id = 42")
        .await
        .join("\n");
    assert!(
        !plan.contains("FilterExec"),
        "the key filter is answered by the scan:\n{plan}"
    );
    assert!(
        plan.contains("partition_sizes=[1]"),
        "the scan holds only the matching row:\n{plan}"
    );
    let plan = query(
        &engine,
        "EXPLAIN SELECT v FROM vb.views_b.t WHERE id IN (1, 2, 3)",
    )
    .await
    .join("\n");
    assert!(
        plan.contains("partition_sizes=[1]") && !plan.contains("FilterExec"),
        "{plan}"
    );
    // A non-key filter scans.
    let plan = query(&engine, "EXPLAIN SELECT v FROM vb.views_b.t WHERE c = 420")
        .await
        .join("\n");
    assert!(plan.contains("FilterExec"), "{plan}");
    assert_eq!(
        query(&engine, "SELECT v FROM vb.views_b.t WHERE id = 42").await,
        ["v=v42"]
    );
    assert_eq!(
        query(&engine, "SELECT v FROM vb.views_b.t WHERE id = 4200").await,
        Vec::<String>::new()
    );
    assert_eq!(
        query(
            &engine,
            "SELECT v FROM vb.views_b.t WHERE id = 42 AND c = 1"
        )
        .await,
        Vec::<String>::new()
    );
    assert_eq!(
        query(
            &engine,
            "SELECT count(*) AS n FROM vb.views_b.t WHERE id IN (1, 2, 999)"
        )
        .await,
        ["n=2"]
    );
}

/// The rows of a kept physical plan run once more, bound to the current version.
async fn run_bound(engine: &Engine, kept: &cdcfusion::engine::KeptPlan) -> Vec<String> {
    let state = engine.context().state();
    let mut config = state.config().clone();
    let plan = engine
        .bind_kept(&mut config, kept)
        .unwrap()
        .expect("the physical plan is kept");
    let task = datafusion::execution::TaskContext::from(&state).with_session_config(config);
    let batches = datafusion::physical_plan::collect(plan, Arc::new(task))
        .await
        .unwrap();
    batches.iter().flat_map(row_strings).collect()
}

#[tokio::test]
async fn kept_physical_plans_read_the_version_of_each_run() {
    let engine = setup("views_k", "vk").await;
    let sql = "SELECT t.id, t.c, a.balance, (SELECT count(*) FROM vk.views_k.t) AS n \
               FROM vk.views_k.t t JOIN vk.views_k.acct a ON a.id = t.id ORDER BY t.id";
    let state = engine.context().state();
    let dialect = state.config().options().sql_parser.dialect;
    let statement = state.sql_to_statement(sql, &dialect).unwrap();
    let (df, kept) = engine.plan_and_keep(state, statement).await.unwrap();
    let kept = kept.expect("a read of current tables is kept");
    let task = Arc::new(df.task_ctx());
    let plan = df.create_physical_plan().await.unwrap();
    kept.keep_physical(&plan).unwrap();
    let first: Vec<String> = datafusion::physical_plan::collect(plan, task)
        .await
        .unwrap()
        .iter()
        .flat_map(row_strings)
        .collect();
    let expected = ["id=1 c=10 balance=1000 n=50", "id=2 c=20 balance=1000 n=50"];
    assert_eq!(first, expected);
    // The kept plan runs again as it is; its join's build side and its subquery are read again.
    assert_eq!(run_bound(&engine, &kept).await, expected);
    let mut conn = root_conn(server()).await;
    conn.query_drop(
        "UPDATE views_k.acct SET balance = 5 WHERE id = 2; INSERT INTO views_k.acct VALUES (3, 7);
         UPDATE views_k.t SET c = 0 WHERE id = 1; INSERT INTO views_k.t VALUES (51, 1, 'x');",
    )
    .await
    .unwrap();
    sync_source(&engine, "vk").await;
    assert_eq!(
        run_bound(&engine, &kept).await,
        [
            "id=1 c=0 balance=1000 n=51",
            "id=2 c=20 balance=5 n=51",
            "id=3 c=30 balance=7 n=51"
        ]
    );
    // `now()` is folded by the optimizer: such a plan keeps only its logical form.
    let state = engine.context().state();
    let statement = state
        .sql_to_statement("SELECT count(*), now() FROM vk.views_k.t", &dialect)
        .unwrap();
    let (df, kept) = engine.plan_and_keep(state, statement).await.unwrap();
    let kept = kept.expect("kept logically");
    kept.keep_physical(&df.create_physical_plan().await.unwrap())
        .unwrap();
    let mut config = engine.context().state().config().clone();
    assert!(engine.bind_kept(&mut config, &kept).unwrap().is_none());
}

#[tokio::test]
async fn a_transaction_is_seen_whole_or_not_at_all() {
    let engine = Arc::new(setup("views_c", "vc").await);
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut conn = root_conn(server()).await;
            let mut n = 0;
            while n < 200 {
                conn.query_drop(
                    "BEGIN; UPDATE views_c.acct SET balance = balance - 7 WHERE id = 1;
                     UPDATE views_c.acct SET balance = balance + 7 WHERE id = 2; COMMIT;",
                )
                .await
                .unwrap();
                n += 1;
            }
            done.store(true, Ordering::Relaxed);
            n
        })
    };
    let mut observed = std::collections::BTreeSet::new();
    let mut queries = 0;
    while !done.load(Ordering::Relaxed) || queries < 100 {
        let r = query(
            &engine,
            "SELECT sum(balance) AS total, min(balance) AS low FROM vc.views_c.acct",
        )
        .await;
        assert!(
            r[0].starts_with("total=2000 "),
            "a half-applied transaction was visible: {r:?}"
        );
        observed.insert(r[0].clone());
        queries += 1;
    }
    assert_eq!(writer.await.unwrap(), 200);
    sync_source(&engine, "vc").await;
    assert_eq!(
        query(&engine, "SELECT balance FROM vc.views_c.acct ORDER BY id").await,
        ["balance=-400", "balance=2400"]
    );
    assert!(
        observed.len() > 1,
        "queries ran while the transfers were applied: {observed:?}"
    );
}

#[tokio::test]
async fn status_tables_and_drop_source() {
    let engine = setup("views_d", "vd").await;
    assert_eq!(
        query(
            &engine,
            "SELECT name, phase, consistent, error FROM cdc.sources"
        )
        .await,
        ["name=vd phase=streaming consistent=true error=NULL"]
    );
    assert_eq!(
        query(&engine, "SELECT \"table\", rows, chunks_done, chunks_total, keyless FROM cdc.tables ORDER BY \"table\"").await,
        [
            "table=acct rows=2 chunks_done=1 chunks_total=1 keyless=false",
            "table=t rows=50 chunks_done=4 chunks_total=4 keyless=false"
        ]
    );
    assert_eq!(
        query(
            &engine,
            "SELECT count(*) AS n FROM vd.cdc.chunks WHERE state = 'done'"
        )
        .await,
        ["n=5"]
    );
    assert!(query(&engine, "SELECT url FROM cdc.sources").await[0].contains(":****@"));
    // Lag: once the server's binlog end has been polled, nothing is pending.
    let lag =
        "SELECT lag_bytes, lag_seconds, server_position = position AS at_end FROM cdc.sources";
    let mut seen = Vec::new();
    for _ in 0..200 {
        seen = query(&engine, lag).await;
        if seen == ["lag_bytes=0 lag_seconds=0.0 at_end=true"] {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(seen, ["lag_bytes=0 lag_seconds=0.0 at_end=true"]);
    // The position a query reads is the published one, reported beside the data.
    let published = engine
        .source("vd")
        .unwrap()
        .published
        .load()
        .position
        .clone()
        .unwrap();
    assert_eq!(
        query(
            &engine,
            "SELECT s.position, count(*) AS n FROM cdc.sources s, vd.views_d.t GROUP BY s.position"
        )
        .await,
        [format!("position={published} n=50")]
    );
    let tables = query(&engine, "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'vd' AND table_schema = 'views_d' ORDER BY 1").await;
    assert_eq!(
        tables,
        [
            "table_name=acct",
            "table_name=acct$changelog",
            "table_name=t",
            "table_name=t$changelog"
        ]
    );
    engine.drop_source("vd").unwrap();
    assert!(engine.sql("SELECT * FROM vd.views_d.t").await.is_err());
    assert!(query(&engine, "SELECT name FROM cdc.sources")
        .await
        .is_empty());
}

#[tokio::test]
async fn sources_are_created_shown_and_dropped_in_sql() {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, "views_e").await;
    conn.query_drop("CREATE TABLE views_e.t (id INT PRIMARY KEY, v INT); INSERT INTO views_e.t VALUES (1, 1), (2, 2)")
        .await
        .unwrap();
    let engine = Engine::new();
    let id = next_server_id();
    next_server_id();
    let create = format!(
        "CREATE SOURCE shop FROM MYSQL '{}' WITH (tables = 'views_e.*', chunk_size = 1, snapshot_mode = 'initial', server_id = {id})",
        server().cdc_url()
    );
    engine.sql(&create).await.unwrap();
    tokio::time::timeout(HANG_GUARD, engine.wait_ready("shop"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        query(&engine, "SELECT id, v FROM shop.views_e.t ORDER BY id").await,
        ["id=1 v=1", "id=2 v=2"]
    );
    // Creating it again fails, unless IF NOT EXISTS.
    let err = engine.sql(&create).await.unwrap_err().to_string();
    assert!(err.contains("already exists"), "{err}");
    engine
        .sql(&create.replace("CREATE SOURCE", "CREATE SOURCE IF NOT EXISTS"))
        .await
        .unwrap();
    let shown = query(&engine, "SHOW SOURCES").await;
    assert_eq!(shown.len(), 1);
    assert!(
        shown[0].contains("name=shop") && shown[0].contains("cdc:****@"),
        "{shown:?}"
    );
    assert!(
        !shown[0].contains(cdcfusion::devserver::CDC_PASSWORD),
        "the password is masked: {shown:?}"
    );
    // Bad options name the option.
    let err = engine
        .sql("CREATE SOURCE x FROM MYSQL 'mysql://a:b@127.0.0.1:1' WITH (chunk_sise = 5)")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("chunk_sise"), "{err}");
    engine.sql("DROP SOURCE shop").await.unwrap();
    engine.sql("DROP SOURCE IF EXISTS shop").await.unwrap();
    assert!(engine
        .sql("DROP SOURCE shop")
        .await
        .unwrap_err()
        .to_string()
        .contains("does not exist"));
}

#[tokio::test]
async fn changelog_tail_streams_changes_as_they_commit() {
    let engine = Arc::new(setup("views_f", "vf").await);
    let query = {
        let engine = Arc::clone(&engine);
        tokio::spawn(async move {
            query(
                &engine,
                "SELECT _op, id, v FROM changelog_tail('vf', 'views_f.t') WHERE _op <> 'r' LIMIT 3",
            )
            .await
        })
    };
    // The tail first replays history (50 snapshot reads, filtered out), then waits.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !query.is_finished(),
        "an unbounded scan waits for new changes"
    );
    let mut conn = root_conn(server()).await;
    conn.query_drop("INSERT INTO views_f.t VALUES (500, 1, 'a'); UPDATE views_f.t SET v = 'b' WHERE id = 500; DELETE FROM views_f.t WHERE id = 1")
        .await
        .unwrap();
    let got = tokio::time::timeout(HANG_GUARD, query)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        got,
        ["_op=c id=500 v=a", "_op=u id=500 v=b", "_op=d id=1 v=v1"]
    );
    let err = engine
        .sql("SELECT * FROM changelog_tail('nope', 'views_f.t')")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}
