//! The binlog reader on a real MariaDB: whole transactions, positions, rotation, DDL,
//! resumption and reconnects.

mod common;

use cdcfusion::change::position::{Gtid, StartPosition};
use cdcfusion::change::Op;
use cdcfusion::devserver::{DevServer, DevServerOptions};
use common::*;
use mysql_async::prelude::Queryable;

#[tokio::test]
async fn transactions_arrive_whole_with_ordered_unique_positions() {
    let server = server();
    let mut conn = root_conn(server).await;
    fresh_db(&mut conn, "cap_tx").await;
    conn.query_drop("CREATE TABLE cap_tx.t (id INT PRIMARY KEY, v VARCHAR(20), n BIGINT UNSIGNED)")
        .await
        .unwrap();
    let mut r = reader(server, "cap_tx", StartPosition::Current).await;
    conn.query_drop(
        "BEGIN; INSERT INTO cap_tx.t VALUES (1,'a',1),(2,'b',18446744073709551615);
         UPDATE cap_tx.t SET v='a2' WHERE id=1; DELETE FROM cap_tx.t WHERE id=2; COMMIT;
         INSERT INTO cap_tx.t VALUES (3,NULL,NULL);",
    )
    .await
    .unwrap();
    let txs = read_until(&mut r, |t| t.num_rows() == 1).await;
    let txs = with_rows(&txs);
    assert_eq!(txs.len(), 2, "two transactions with rows");
    let first = txs[0];
    assert!(matches!(
        first.gtid,
        Some(Gtid::MariaDb {
            domain: 0,
            server: 1,
            ..
        })
    ));
    let ops: Vec<Op> = first.changes.iter().map(|c| c.op).collect();
    assert_eq!(ops, vec![Op::Insert, Op::Update, Op::Delete]);
    assert_eq!(
        row_strings(first.changes[0].after.as_ref().unwrap()),
        vec!["id=1 v=a n=1", "id=2 v=b n=18446744073709551615"]
    );
    let update = &first.changes[1];
    assert_eq!(
        row_strings(update.before.as_ref().unwrap()),
        vec!["id=1 v=a n=1"]
    );
    assert_eq!(
        row_strings(update.after.as_ref().unwrap()),
        vec!["id=1 v=a2 n=1"]
    );
    assert_eq!(
        row_strings(first.changes[2].before.as_ref().unwrap()),
        vec!["id=2 v=b n=18446744073709551615"]
    );
    assert!(first.changes[2].after.is_none());
    assert_eq!(
        row_strings(txs[1].changes[0].after.as_ref().unwrap()),
        vec!["id=3 v=NULL n=NULL"]
    );

    // Positions: strictly increasing across and within transactions, all distinct.
    let mut positions = Vec::new();
    for tx in &txs {
        for c in &tx.changes {
            for (e, row) in &c.index {
                positions.push(tx.position(*e, *row));
            }
        }
    }
    assert_eq!(positions.len(), 5);
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    assert!(first.end <= txs[1].start);
    assert!(first.commit_ts_micros > 1_600_000_000_000_000);
}

#[tokio::test]
async fn reader_follows_binlog_rotation() {
    let server = server();
    let mut conn = root_conn(server).await;
    fresh_db(&mut conn, "cap_rot").await;
    conn.query_drop("CREATE TABLE cap_rot.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    let mut r = reader(server, "cap_rot", StartPosition::Current).await;
    for i in 0..3 {
        conn.query_drop(format!("INSERT INTO cap_rot.t VALUES ({i})"))
            .await
            .unwrap();
        conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    }
    let txs = read_until(&mut r, |t| {
        t.changes
            .first()
            .and_then(|c| c.after.as_ref())
            .is_some_and(|a| row_strings(a) == ["id=2"])
    })
    .await;
    let txs = with_rows(&txs);
    assert_eq!(txs.len(), 3);
    let files: Vec<_> = txs.iter().map(|t| t.start.file.to_string()).collect();
    assert!(
        files[0] < files[1] && files[1] < files[2],
        "each insert is in its own file: {files:?}"
    );
    assert!(txs.windows(2).all(|w| w[0].start < w[1].start));
}

#[tokio::test]
async fn add_and_drop_column_mid_stream_keep_columns_aligned() {
    let server = server();
    let mut conn = root_conn(server).await;
    fresh_db(&mut conn, "cap_ddl").await;
    conn.query_drop("CREATE TABLE cap_ddl.t (id INT PRIMARY KEY, a VARCHAR(10), b INT)")
        .await
        .unwrap();
    // One reader follows live, refreshing the schema at each ALTER; the other starts before
    // all of it and reads it afterwards, when information_schema already shows the final schema.
    let mut live = reader(server, "cap_ddl", StartPosition::Current).await;
    let start = live.resume_position().clone();
    let is_last = |t: &cdcfusion::change::SourceTransaction| {
        t.changes.first().is_some_and(|c| c.op == Op::Delete)
    };
    let live_task = tokio::spawn(async move { read_until(&mut live, is_last).await });
    for stmt in [
        "INSERT INTO cap_ddl.t VALUES (1, 'one', 10)",
        "ALTER TABLE cap_ddl.t ADD COLUMN c DATE AFTER a",
        "INSERT INTO cap_ddl.t VALUES (2, 'two', '2024-02-29', 20)",
        "UPDATE cap_ddl.t SET c = '2000-01-01' WHERE id = 1",
        "ALTER TABLE cap_ddl.t DROP COLUMN a",
        "INSERT INTO cap_ddl.t VALUES (3, '1999-12-31', 30)",
        "DELETE FROM cap_ddl.t WHERE id = 2",
    ] {
        conn.query_drop(stmt).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let expected = vec![
        "c id=1 a=one b=10".to_string(),
        "c id=2 a=two c=2024-02-29 b=20".into(),
        "u id=1 a=one c=2000-01-01 b=10".into(),
        "c id=3 c=1999-12-31 b=30".into(),
        "d id=2 c=2024-02-29 b=20".into(),
    ];
    let live_txs = live_task.await.unwrap();
    let mut late = reader(server, "cap_ddl", start).await;
    let late_txs = read_until(&mut late, is_last).await;
    for txs in [live_txs, late_txs] {
        let ddl: Vec<_> = txs
            .iter()
            .flat_map(|t| &t.ddl)
            .map(|d| d.statement.clone())
            // Other tests write their own databases' DDL to the same binlog meanwhile.
            .filter(|s| s.contains("cap_ddl"))
            .collect();
        assert_eq!(ddl.len(), 2, "both ALTERs are reported: {ddl:?}");
        let mut seen = Vec::new();
        for tx in with_rows(&txs) {
            for c in &tx.changes {
                let image = c.after.as_ref().or(c.before.as_ref()).unwrap();
                for row in row_strings(image) {
                    seen.push(format!("{} {row}", c.op.code()));
                }
            }
        }
        assert_eq!(seen, expected);
    }
}

/// `CREATE TABLE ... SELECT` is one transaction with the rows it writes, ending after its XID:
/// a reader resuming at its end repeats nothing, and a capture publishing at its end has read
/// everything the server logged for it.
#[tokio::test]
async fn create_table_as_select_is_one_transaction_with_its_rows() {
    let server = server();
    let mut conn = root_conn(server).await;
    fresh_db(&mut conn, "cap_ctas").await;
    conn.query_drop(
        "CREATE TABLE cap_ctas.t (id INT PRIMARY KEY, v VARCHAR(8));
         INSERT INTO cap_ctas.t VALUES (1, 'a'), (2, 'b')",
    )
    .await
    .unwrap();
    let mut r = reader(server, "cap_ctas", StartPosition::Current).await;
    conn.query_drop("CREATE TABLE cap_ctas.ctas_rows AS SELECT id, v FROM cap_ctas.t")
        .await
        .unwrap();
    let is_ctas = |t: &cdcfusion::change::SourceTransaction| {
        t.ddl.iter().any(|d| d.statement.contains("ctas_rows"))
    };
    let txs = read_until(&mut r, is_ctas).await;
    let tx = txs.last().unwrap();
    assert_eq!(tx.num_rows(), 2, "the rows come with the statement: {tx:?}");
    assert_eq!(
        row_strings(tx.changes[0].after.as_ref().unwrap()),
        ["id=1 v=a", "id=2 v=b"]
    );
    assert!(
        matches!(tx.gtid, Some(Gtid::MariaDb { .. })),
        "{:?}",
        tx.gtid
    );
    let events: Vec<(String, u64)> = conn
        .query_map(
            format!(
                "SHOW BINLOG EVENTS IN '{}' FROM {} LIMIT 12",
                tx.start.file, tx.start.offset
            ),
            |row: mysql_async::Row| {
                (
                    row.get::<String, _>("Event_type").unwrap(),
                    row.get::<u64, _>("End_log_pos").unwrap(),
                )
            },
        )
        .await
        .unwrap();
    let xid = events
        .iter()
        .find(|(kind, _)| kind == "Xid")
        .map(|(_, end)| *end)
        .unwrap_or_else(|| panic!("no XID after the statement: {events:?}"));
    assert_eq!(
        tx.end.offset, xid,
        "the transaction ends after its XID: {events:?}"
    );
}

#[tokio::test]
async fn resumes_from_file_offset_and_from_gtid_without_repeats() {
    let server = server();
    let mut conn = root_conn(server).await;
    fresh_db(&mut conn, "cap_resume").await;
    conn.query_drop("CREATE TABLE cap_resume.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    let mut r = reader(server, "cap_resume", StartPosition::Current).await;
    for i in 1..=4 {
        conn.query_drop(format!("INSERT INTO cap_resume.t VALUES ({i})"))
            .await
            .unwrap();
    }
    let is_id = |id: &'static str| {
        move |t: &cdcfusion::change::SourceTransaction| {
            t.changes
                .first()
                .and_then(|c| c.after.as_ref())
                .is_some_and(|a| row_strings(a) == [format!("id={id}")])
        }
    };
    let txs = read_until(&mut r, is_id("2")).await;
    let second = txs.last().unwrap();
    // From the end of transaction 2 (file:offset) the next change is 3, then 4.
    let mut by_coord = reader(
        server,
        "cap_resume",
        StartPosition::Coord(second.end.clone()),
    )
    .await;
    let next = read_until(&mut by_coord, |t| t.num_rows() > 0).await;
    assert_eq!(
        row_strings(next.last().unwrap().changes[0].after.as_ref().unwrap()),
        ["id=3"]
    );
    // From the GTID position after transaction 2: the same.
    let gtids = r.executed_gtids().clone();
    let mut by_gtid = reader(server, "cap_resume", StartPosition::Gtid(gtids)).await;
    let next = read_until(&mut by_gtid, |t| t.num_rows() > 0).await;
    assert_eq!(
        row_strings(next.last().unwrap().changes[0].after.as_ref().unwrap()),
        ["id=3"]
    );
    assert_eq!(next.last().unwrap().start, second.end);
}

#[tokio::test]
async fn reader_reconnects_across_a_server_restart_without_loss_or_repeats() {
    let mut server = tokio::task::spawn_blocking(|| DevServer::start(DevServerOptions::default()))
        .await
        .unwrap()
        .unwrap();
    let mut conn = root_conn(&server).await;
    fresh_db(&mut conn, "cap_restart").await;
    conn.query_drop("CREATE TABLE cap_restart.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    let mut r = reader(&server, "cap_restart", StartPosition::Current).await;
    for i in 1..=5 {
        conn.query_drop(format!("INSERT INTO cap_restart.t VALUES ({i})"))
            .await
            .unwrap();
    }
    let mut ids = Vec::new();
    let mut collect = |txs: Vec<cdcfusion::change::SourceTransaction>| {
        for tx in txs {
            for c in &tx.changes {
                ids.extend(row_strings(c.after.as_ref().unwrap()));
            }
        }
    };
    collect(read_until(&mut r, |t| t.num_rows() > 0).await);
    drop(conn);
    server = tokio::task::spawn_blocking(move || {
        server.restart().unwrap();
        server
    })
    .await
    .unwrap();
    let mut conn = root_conn(&server).await;
    for i in 6..=8 {
        conn.query_drop(format!("INSERT INTO cap_restart.t VALUES ({i})"))
            .await
            .unwrap();
    }
    collect(
        read_until(&mut r, |t| {
            t.changes
                .first()
                .and_then(|c| c.after.as_ref())
                .is_some_and(|a| row_strings(a) == ["id=8"])
        })
        .await,
    );
    let expected: Vec<String> = (1..=8).map(|i| format!("id={i}")).collect();
    assert_eq!(ids, expected);
}
