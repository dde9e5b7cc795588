//! What a user may run and use: a reader's change is refused with 42501, a query over its
//! memory fails with 53200 and a result over its size with 54000, and in each case the
//! connection and the server go on.

use futures::StreamExt;

use crate::fixture::*;

const SMALL: &str = "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(10));
     INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b');";

/// 100,000 rows: their hash table is a few MiB, their text well over 64 KiB.
const LARGE: &str = "CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT NOT NULL);
     INSERT INTO {db}.t SELECT seq, seq % 1000 FROM {db}.seq_1_to_100000;";

fn message(error: &tokio_postgres::Error) -> String {
    error
        .as_db_error()
        .map(|e| e.message().to_string())
        .unwrap_or_else(|| format!("{error:?}"))
}

#[tokio::test]
async fn readers_query_and_only_admins_change_things() {
    let f = Fixture::start("pg_roles", "roles", SMALL, settings()).await;
    // `bob` is configured as a reader, `ann` as an admin.
    let reader = f.client_as(MD5_USER, MD5_PASSWORD, "roles").await.unwrap();
    let row = reader
        .query_one("SELECT count(*) FROM pg_roles.t", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 2);
    for sql in [
        "SHOW SOURCES",
        "EXPLAIN SELECT * FROM pg_roles.t",
        "SET application_name = 'reports'",
        "BEGIN; SELECT id FROM pg_roles.t; COMMIT",
        "COPY (SELECT * FROM pg_roles.t) TO STDOUT",
    ] {
        if sql.starts_with("COPY") {
            let rows = reader.copy_out(sql).await.unwrap();
            assert_eq!(rows.collect::<Vec<_>>().await.len(), 2, "{sql}");
        } else {
            reader
                .simple_query(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        }
    }
    let admin = f.client("roles").await;
    for sql in [
        "DROP SOURCE IF EXISTS nowhere",
        "DROP SINK IF EXISTS nothing",
        "CREATE SINK s INTO PARQUET 'file:///nonexistent/s' AS SELECT * FROM roles.pg_roles.t",
        "ALTER SOURCE roles RESNAPSHOT TABLE pg_roles.t",
        "CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '/nonexistent/x.csv'",
        "COPY (SELECT 1) TO '/nonexistent/x.csv'",
        "CREATE VIEW v AS SELECT 1 AS one",
        "INSERT INTO pg_roles.t VALUES (3, 'c')",
        "EXPLAIN ANALYZE INSERT INTO pg_roles.t VALUES (3, 'c')",
    ] {
        let error = reader.simple_query(sql).await.unwrap_err();
        assert_eq!(sqlstate(&error), "42501", "{sql}: {error:?}");
        let text = message(&error);
        // A file outside `allowed_locations` is refused to everyone, before roles are asked.
        let nowhere = text.contains("allowed_locations");
        assert!(
            nowhere && sql.starts_with("COPY")
                || text.contains("admin") && text.contains("\"bob\" has the reader role"),
            "{sql}: {text}"
        );
    }
    // The refusals change nothing, and the connection goes on; an admin may.
    let row = reader
        .query_one("SELECT count(*) FROM cdc.sources", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1);
    admin
        .simple_query("DROP SOURCE IF EXISTS nowhere")
        .await
        .unwrap();
    // Extended protocol: refused at execution as well.
    let error = reader
        .execute("DROP SINK IF EXISTS nothing", &[])
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&error), "42501", "{error:?}");
}

#[tokio::test]
async fn a_query_over_its_memory_or_result_size_fails_alone() {
    let mut limited = settings();
    limited.query_memory_limit = 1 << 20;
    limited.max_result_size = 64 << 10;
    let f = Fixture::start("pg_mem", "mem", LARGE, limited).await;
    let client = f.client("mem").await;
    let other = f.client("mem").await;
    // A hash join holds its build side: 100,000 rows do not fit in 1 MiB.
    let join = "SELECT count(*) FROM pg_mem.t a JOIN pg_mem.t b ON a.id = b.id";
    let error = client.query_one(join, &[]).await.unwrap_err();
    assert_eq!(sqlstate(&error), "53200", "{error:?}");
    assert!(message(&error).contains("query_memory_limit"), "{error:?}");
    // What fits runs, on the same connection and on another one.
    let row = client
        .query_one("SELECT count(*), sum(v) FROM pg_mem.t", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 100_000);
    let row = other
        .query_one("SELECT max(id) FROM pg_mem.t WHERE v = 7", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 99_007);
    // Rows past 64 KiB end the statement with 54000, in the simple, extended and COPY paths.
    let all = "SELECT * FROM pg_mem.t";
    let error = client.simple_query(all).await.unwrap_err();
    assert_eq!(sqlstate(&error), "54000", "{error:?}");
    assert!(message(&error).contains("max_result_size"), "{error:?}");
    let error = client.query(all, &[]).await.unwrap_err();
    assert_eq!(sqlstate(&error), "54000", "{error:?}");
    let stream = client
        .copy_out("COPY (SELECT * FROM pg_mem.t) TO STDOUT")
        .await
        .unwrap();
    // After its error a tokio-postgres copy stream yields errors forever: stop at the first.
    futures::pin_mut!(stream);
    let mut lines = 0;
    let error = loop {
        match stream.next().await {
            Some(Ok(_)) => lines += 1,
            Some(Err(error)) => break error,
            None => panic!("the copy ended after {lines} lines without an error"),
        }
    };
    assert_eq!(sqlstate(&error), "54000", "{error:?}");
    let rows = client
        .query("SELECT * FROM pg_mem.t WHERE id <= 100", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 100);
}
