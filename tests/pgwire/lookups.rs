//! Primary-key point lookups, which the front end answers from the key index without
//! planning, answer exactly what the planned statement answers: each statement runs on a
//! session with lookups on (the default) and on one with `cdcfusion.point_lookups = off`, over
//! the simple protocol (text) and the extended one (binary), and the two must agree on
//! columns, types, rows, NULLs, command tags, errors and stale-read warnings.

use mysql_async::prelude::Queryable;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::common::*;
use crate::fixture::*;

const SETUP: &str = "SET time_zone = '+00:00';
     CREATE TABLE {db}.t (id BIGINT PRIMARY KEY, a INT NULL, s VARCHAR(20) NULL,
       dec2 DECIMAL(12,2) NULL, ts TIMESTAMP(6) NULL, dtm DATETIME(6) NULL, j JSON NULL,
       ti TINYINT NULL, bu BIGINT UNSIGNED NULL);
     INSERT INTO {db}.t VALUES
       (1, 10, 'ada', 10.50, '2024-02-29 12:00:00.5', '2024-02-29 23:59:59.123456', '{\"k\": [1, 2]}', -5, 18446744073709551615),
       (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
       (-3, 30, 'linus', 7.25, '1999-12-31 23:59:59', '1999-12-31 23:59:59', '[]', 7, 3);
     CREATE TABLE {db}.c (k1 INT NOT NULL, k2 VARCHAR(10) NOT NULL, v TEXT NULL, PRIMARY KEY (k1, k2));
     INSERT INTO {db}.c VALUES (1, 'a', 'one-a'), (1, 'b', NULL), (2, 'a', 'two-a');
     CREATE TABLE {db}.u (id INT UNSIGNED PRIMARY KEY, v VARCHAR(5));
     INSERT INTO {db}.u VALUES (1, 'x'), (4294967295, 'max');
     CREATE TABLE {db}.s (code VARCHAR(8) PRIMARY KEY, n INT);
     INSERT INTO {db}.s VALUES ('abc', 1), ('x y', 2);";

/// A session with lookups on and one that plans every statement.
async fn sessions(f: &Fixture, database: &str) -> (Client, Client) {
    let planned = f
        .client_with(database, "SET cdcfusion.point_lookups = off")
        .await;
    (f.client(database).await, planned)
}

fn error_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("error {} {}", db.code().code(), db.message()),
        None => format!("client error {e}"),
    }
}

/// What a simple query answers, as text (rows sorted: only their set is defined).
async fn simple(client: &Client, sql: &str) -> String {
    let messages = match client.simple_query(sql).await {
        Ok(messages) => messages,
        Err(e) => return error_text(&e),
    };
    let mut head = Vec::new();
    let mut rows = Vec::new();
    for message in messages {
        match message {
            SimpleQueryMessage::RowDescription(columns) => head.push(format!(
                "columns {:?}",
                columns.iter().map(|c| c.name()).collect::<Vec<_>>()
            )),
            SimpleQueryMessage::Row(row) => rows.push(format!(
                "row {:?}",
                (0..row.len()).map(|i| row.get(i)).collect::<Vec<_>>()
            )),
            SimpleQueryMessage::CommandComplete(n) => head.push(format!("done {n}")),
            other => head.push(format!("{other:?}")),
        }
    }
    rows.sort();
    head.extend(rows);
    head.join("\n")
}

/// What a prepared statement answers with `params`, in binary: columns with their types,
/// then each row's raw values (sorted).
async fn extended(client: &Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> String {
    let statement = match client.prepare(sql).await {
        Ok(s) => s,
        Err(e) => return error_text(&e),
    };
    let columns: Vec<String> = statement
        .columns()
        .iter()
        .map(|c| format!("{} {}", c.name(), c.type_()))
        .collect();
    let rows = match client.query(&statement, params).await {
        Ok(rows) => rows,
        Err(e) => return error_text(&e),
    };
    let mut lines: Vec<String> = rows
        .iter()
        .map(|row| {
            format!(
                "{:?}",
                (0..row.len())
                    .map(|i| row.get::<_, Option<Raw>>(i))
                    .collect::<Vec<_>>()
            )
        })
        .collect();
    lines.sort();
    format!("{columns:?}\n{}", lines.join("\n"))
}

/// `sql` with `$1` bound to the text `abc`, declared `text` whatever the key's type.
async fn typed(client: &Client, sql: &str) -> String {
    match client.query_typed(sql, &[(&"abc", Type::TEXT)]).await {
        Ok(rows) => format!("{} rows", rows.len()),
        Err(e) => error_text(&e),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_lookups_answer_what_the_planned_statement_answers() {
    let f = Fixture::start("pg_lookups", "lookups", SETUP, settings()).await;
    let (fast, planned) = sessions(&f, "lookups").await;
    let db = "pg_lookups";
    let queries = [
        // Found, with every type; NULLs; a negative key; a missing key.
        format!("SELECT * FROM {db}.t WHERE id = 1"),
        format!("SELECT * FROM {db}.t WHERE id = 2"),
        format!("SELECT * FROM {db}.t WHERE id = -3"),
        format!("SELECT * FROM {db}.t WHERE id = 99"),
        format!("SELECT * FROM {db}.t WHERE 1 = id"),
        format!("SELECT * FROM {db}.t WHERE (id = 1)"),
        // Projections, aliases, qualified names, the source named.
        format!("SELECT s, a AS x, ts, j FROM {db}.t WHERE t.id = 1"),
        format!("SELECT q.s, q.dec2 FROM {db}.t q WHERE q.id = -3"),
        format!("SELECT \"s\" AS \"Big\" FROM lookups.{db}.t WHERE id = 1"),
        format!("SELECT ti, bu FROM {db}.t WHERE id = 1"),
        // Literals of another type than the key's, or out of its range: planned either way.
        format!("SELECT * FROM {db}.t WHERE id = '1'"),
        format!("SELECT * FROM {db}.t WHERE id = 1.0"),
        format!("SELECT * FROM {db}.t WHERE id = 1.5"),
        format!("SELECT * FROM {db}.t WHERE id = NULL"),
        format!("SELECT * FROM {db}.t WHERE id = 99999999999999999999"),
        format!("SELECT * FROM {db}.u WHERE id = 4294967295"),
        format!("SELECT * FROM {db}.u WHERE id = 4294967296"),
        format!("SELECT * FROM {db}.u WHERE id = -1"),
        format!("SELECT * FROM {db}.s WHERE code = 'abc'"),
        format!("SELECT * FROM {db}.s WHERE code = 'ABC'"),
        format!("SELECT n FROM {db}.s WHERE code = 'x y'"),
        format!("SELECT * FROM {db}.s WHERE code = 5"),
        // Composite keys: whole, in any order, missing, partial (planned).
        format!("SELECT * FROM {db}.c WHERE k1 = 1 AND k2 = 'b'"),
        format!("SELECT v, k1 FROM {db}.c WHERE k2 = 'a' AND k1 = 2"),
        format!("SELECT * FROM {db}.c WHERE k1 = 3 AND k2 = 'a'"),
        format!("SELECT * FROM {db}.c WHERE k1 = 1"),
        format!("SELECT * FROM {db}.c WHERE k1 = 1 AND k1 = 1 AND k2 = 'a'"),
        // Errors: unknown column, table, duplicate output names.
        format!("SELECT nope FROM {db}.t WHERE id = 1"),
        format!("SELECT * FROM {db}.missing WHERE id = 1"),
        format!("SELECT * FROM {db}.t WHERE nope = 1"),
        format!("SELECT id, id FROM {db}.t WHERE id = 1"),
        format!("SELECT a AS s, s FROM {db}.t WHERE id = 1"),
        format!("SELECT * FROM {db}.\"t$changelog\" WHERE id = 1 AND _op = 'r'"),
    ];
    for sql in &queries {
        assert_eq!(
            simple(&fast, sql).await,
            simple(&planned, sql).await,
            "simple: {sql}"
        );
        assert_eq!(
            extended(&fast, sql, &[]).await,
            extended(&planned, sql, &[]).await,
            "extended: {sql}"
        );
    }
    // The session's time zone shows `timestamptz` the same way.
    for client in [&fast, &planned] {
        client
            .batch_execute("SET TimeZone = 'Asia/Kathmandu'")
            .await
            .unwrap();
    }
    let sql = format!("SELECT ts FROM {db}.t WHERE id = 1");
    let shown = simple(&fast, &sql).await;
    assert!(shown.contains("+05:45"), "{shown}");
    assert_eq!(shown, simple(&planned, &sql).await);

    // Parameters, NULL among them.
    let by_id = format!("SELECT * FROM {db}.t WHERE id = $1");
    for id in [Some(1i64), Some(2), Some(-3), Some(99), None] {
        assert_eq!(
            extended(&fast, &by_id, &[&id]).await,
            extended(&planned, &by_id, &[&id]).await,
            "{by_id} with {id:?}"
        );
    }
    let composite = format!("SELECT v, k2 FROM {db}.c WHERE k2 = $2 AND k1 = $1");
    for (k1, k2) in [(1i32, "b"), (2, "a"), (3, "z")] {
        assert_eq!(
            extended(&fast, &composite, &[&k1, &k2]).await,
            extended(&planned, &composite, &[&k1, &k2]).await,
            "{composite} with {k1}, {k2}"
        );
    }
    let unsigned = format!("SELECT * FROM {db}.u WHERE id = $1");
    for id in [1i64, 4294967295, 4294967296, -1] {
        assert_eq!(
            extended(&fast, &unsigned, &[&id]).await,
            extended(&planned, &unsigned, &[&id]).await,
            "{unsigned} with {id}"
        );
    }
    // A parameter whose bytes do not match the key's type.
    let mismatch = typed(&fast, &by_id).await;
    assert!(mismatch.starts_with("error"), "{mismatch}");
    assert_eq!(mismatch, typed(&planned, &by_id).await);

    // A row changed at the source is seen by both.
    let mut conn = root_conn(server()).await;
    conn.query_drop(format!(
        "UPDATE {db}.t SET s = 'changed', a = NULL WHERE id = 1; DELETE FROM {db}.c WHERE k1 = 2;
         INSERT INTO {db}.c VALUES (3, 'a', 'new')"
    ))
    .await
    .unwrap();
    f.sync().await;
    for sql in [
        format!("SELECT s, a FROM {db}.t WHERE id = 1"),
        format!("SELECT * FROM {db}.c WHERE k1 = 2 AND k2 = 'a'"),
        format!("SELECT * FROM {db}.c WHERE k1 = 3 AND k2 = 'a'"),
    ] {
        let answer = simple(&fast, &sql).await;
        assert_eq!(answer, simple(&planned, &sql).await, "{sql}");
        assert!(
            !answer.contains("one-a") && !answer.contains("two-a"),
            "{answer}"
        );
    }
    assert!(simple(&fast, &format!("SELECT s FROM {db}.t WHERE id = 1"))
        .await
        .contains("changed"));
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_lookups_of_a_stopped_table_are_refused_or_warned_as_planned() {
    let f = Fixture::start("pg_lookup_stop", "lookup_stop", SETUP, settings()).await;
    let mut conn = root_conn(server()).await;
    conn.query_drop("DROP TABLE pg_lookup_stop.t")
        .await
        .unwrap();
    f.sync().await;
    let (fast, planned) = sessions(&f, "lookup_stop").await;
    let sql = "SELECT s FROM pg_lookup_stop.t WHERE id = 1";
    let refused = simple(&fast, sql).await;
    assert!(refused.starts_with("error 55000"), "{refused}");
    assert_eq!(refused, simple(&planned, sql).await);
    let by_id = "SELECT * FROM pg_lookup_stop.t WHERE id = $1";
    assert_eq!(
        extended(&fast, by_id, &[&1i64]).await,
        extended(&planned, by_id, &[&1i64]).await
    );
    // Opted in to stale reads: the last state, with the same warning.
    let verbose = ["-A", "-t", "-v", "VERBOSITY=verbose"];
    let script = "SET cdcfusion.stale_reads = on;\nSELECT s FROM pg_lookup_stop.t WHERE id = 1;\n";
    let fast = f.psql_script(
        "lookup_stop",
        &verbose,
        &format!("SET cdcfusion.point_lookups = on;\n{script}"),
    );
    let planned = f.psql_script(
        "lookup_stop",
        &verbose,
        &format!("SET cdcfusion.point_lookups = off;\n{script}"),
    );
    let out = String::from_utf8_lossy(&fast.stdout);
    let err = String::from_utf8_lossy(&fast.stderr);
    assert!(out.contains("ada"), "{out}");
    assert_eq!(err.matches("WARNING:  01000:").count(), 1, "{err}");
    assert_eq!(out, String::from_utf8_lossy(&planned.stdout));
    assert_eq!(err, String::from_utf8_lossy(&planned.stderr));
    let bad = f.psql_script(
        "lookup_stop",
        &verbose,
        "SET cdcfusion.point_lookups = maybe;\n",
    );
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("ERROR:  22023:"), "{err}");
    f.shutdown().await;
}
