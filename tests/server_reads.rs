//! Reads straight from the server through execution plans: `mysql_snapshot` (chunks as
//! partitions, aligned to one position) and `mysql_binlog` (an unbounded stream), with what
//! `EXPLAIN` shows of each.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use cdcfusion::engine::Engine;
use common::*;
use mysql_async::prelude::Queryable;

async fn explain(engine: &Engine, sql: &str) -> String {
    let batches: Vec<RecordBatch> = engine
        .sql(&format!("EXPLAIN {sql}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

/// `db.acct`: 40 accounts of 100 each, captured with chunks of 8 rows (5 chunks).
async fn setup(db: &str, source: &str) -> Engine {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.acct (id INT PRIMARY KEY, balance BIGINT, note VARCHAR(16));
         INSERT INTO {db}.acct SELECT seq, 100, CONCAT('n', seq) FROM {db}.seq_1_to_40;"
    ))
    .await
    .unwrap();
    capture_db(db, source, 8, 2).await
}

#[tokio::test]
async fn mysql_snapshot_runs_chunks_as_partitions_and_explains_them() {
    let engine = setup("reads_a", "ra").await;
    let sql = "SELECT id, balance FROM mysql_snapshot('ra', 'reads_a.acct')";
    let plan = explain(&engine, sql).await;
    assert!(
        plan.contains("ConsistentReadExec: table=reads_a.acct"),
        "{plan}"
    );
    assert!(
        plan.contains(
            "SnapshotExec: table=reads_a.acct, chunk_key=id, method=watermarks, chunks=5"
        ),
        "{plan}"
    );
    assert!(
        plan.contains("(-inf, 9)") && plan.contains("[33, +inf)"),
        "{plan}"
    );
    // The same rows as the server, whatever the column order asked.
    let mut conn = root_conn(server()).await;
    conn.query_drop(
        "UPDATE reads_a.acct SET note = 'x' WHERE id = 3; DELETE FROM reads_a.acct WHERE id = 40",
    )
    .await
    .unwrap();
    let got = query(&engine, "SELECT note, id FROM mysql_snapshot('ra', 'reads_a.acct') WHERE id <= 3 OR id >= 39 ORDER BY id").await;
    assert_eq!(
        got,
        [
            "note=n1 id=1",
            "note=n2 id=2",
            "note=x id=3",
            "note=n39 id=39"
        ]
    );
    // Every chunk of the capture was read by our own row connection, each as one locking
    // read (nothing held a lock on the table while it was read).
    let readers = query(
        &engine,
        "SELECT DISTINCT reader, visibility FROM cdc.chunks WHERE source = 'ra'",
    )
    .await;
    assert_eq!(readers, ["reader=own visibility=locked_read"]);
    // EXPLAIN ANALYZE shows each chunk's HIGH and the one position the result is at.
    let analyzed = explain(&engine, &format!("ANALYZE {sql}")).await;
    assert!(analyzed.contains(", position="), "{analyzed}");
    assert!(analyzed.contains(" HIGH "), "{analyzed}");
    // Bad calls name the problem.
    for (sql, expected) in [
        (
            "SELECT * FROM mysql_snapshot('nope', 'reads_a.acct')",
            "source \"nope\" does not exist",
        ),
        (
            "SELECT * FROM mysql_snapshot('ra', 'reads_a.other')",
            "captures no table reads_a.other",
        ),
        (
            "SELECT * FROM mysql_snapshot('ra')",
            "a source name and 'db.table'",
        ),
        (
            "SELECT * FROM mysql_binlog('ra', 'reads_a.acct', 'nonsense')",
            "bad start position",
        ),
    ] {
        let err = match engine.sql(sql).await {
            Ok(df) => df.collect().await.unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(expected), "{sql}: {err}");
    }
}

/// Transfers between accounts in different chunks keep the total: a read whose chunks sat at
/// different positions would see money created or destroyed.
#[tokio::test]
async fn mysql_snapshot_is_one_position_under_concurrent_transfers() {
    let engine = Arc::new(setup("reads_b", "rb").await);
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut conn = root_conn(server()).await;
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                let from = 1 + (n * 7) % 40;
                let to = 1 + (n * 13 + 20) % 40;
                conn.query_drop(format!(
                    "BEGIN; UPDATE reads_b.acct SET balance = balance - 3 WHERE id = {from};
                     UPDATE reads_b.acct SET balance = balance + 3 WHERE id = {to}; COMMIT;"
                ))
                .await
                .unwrap();
                n += 1;
            }
            n
        })
    };
    for _ in 0..6 {
        let got = query(
            &engine,
            "SELECT count(*) AS n, sum(balance) AS total FROM mysql_snapshot('rb', 'reads_b.acct')",
        )
        .await;
        assert_eq!(
            got,
            ["n=40 total=4000"],
            "chunks were not aligned to one position"
        );
    }
    done.store(true, Ordering::Relaxed);
    let transfers = writer.await.unwrap();
    assert!(
        transfers > 10,
        "reads ran while transfers committed ({transfers})"
    );
    // Quiet again: the read equals the captured current table row for row.
    let source = query(
        &engine,
        "SELECT * FROM mysql_snapshot('rb', 'reads_b.acct') ORDER BY id",
    )
    .await;
    let mut conn = root_conn(server()).await;
    let direct: Vec<(i32, i64, String)> = conn
        .query("SELECT id, balance, note FROM reads_b.acct ORDER BY id")
        .await
        .unwrap();
    let direct: Vec<String> = direct
        .into_iter()
        .map(|(id, b, n)| format!("id={id} balance={b} note={n}"))
        .collect();
    assert_eq!(source, direct);
}

#[tokio::test]
async fn mysql_binlog_streams_the_tables_changes_from_a_position() {
    let engine = Arc::new(setup("reads_c", "rc").await);
    let sql = "SELECT _op, id, balance, _before['balance'] AS before, _position FROM mysql_binlog('rc', 'reads_c.acct') LIMIT 4";
    let plan = explain(&engine, sql).await;
    assert!(
        plan.contains("BinlogStreamExec: table=reads_c.acct, from="),
        "{plan}"
    );
    assert!(plan.contains("unbounded"), "{plan}");
    let query = {
        let engine = Arc::clone(&engine);
        tokio::spawn(async move { query(&engine, sql).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!query.is_finished(), "the stream waits for changes");
    let mut conn = root_conn(server()).await;
    conn.query_drop(
        "INSERT INTO reads_c.acct VALUES (100, 5, 'new');
         UPDATE reads_c.acct SET balance = 6 WHERE id = 100;
         UPDATE reads_c.acct SET id = 101 WHERE id = 100;",
    )
    .await
    .unwrap();
    let got = tokio::time::timeout(HANG_GUARD, query)
        .await
        .unwrap()
        .unwrap();
    let ops: Vec<String> = got
        .iter()
        .map(|r| r.split(" _position=").next().unwrap().to_string())
        .collect();
    assert_eq!(
        ops,
        [
            "_op=c id=100 balance=5 before=NULL",
            "_op=u id=100 balance=6 before=5",
            "_op=d id=100 balance=6 before=NULL",
            "_op=c id=101 balance=6 before=NULL",
        ]
    );
    let positions: std::collections::BTreeSet<&str> = got
        .iter()
        .map(|r| r.split(" _position=").nth(1).unwrap())
        .collect();
    assert_eq!(
        positions.len(),
        4,
        "every change has its own position: {got:?}"
    );
}
