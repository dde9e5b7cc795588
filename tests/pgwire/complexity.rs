//! Statements too deep to plan: refused with `54001`, over both protocols, and the server
//! keeps serving; a statement just under the limit runs. Statements longer than
//! `max_statement_size`: refused with `54000` before they are read.

use cdcfusion::engine::limits::{CALL_NESTING_LIMIT, MAX_DEPTH, PARSER_NESTING_LIMIT};

use crate::fixture::*;

const SETUP: &str = "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(10));
     INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b');";

/// `SELECT 0+1+2+...` with `terms` terms.
fn chain(terms: usize) -> String {
    let mut sql = String::from("SELECT 0");
    for i in 1..terms {
        sql.push_str(&format!("+{i}"));
    }
    sql
}

/// Asserts `sql` is refused as too complex over the simple and the extended protocol, with
/// a message that names the limit.
async fn refused(client: &tokio_postgres::Client, sql: &str, limit: usize) {
    let what = &sql[..sql.len().min(60)];
    let simple = client.simple_query(sql).await.unwrap_err();
    let extended = client.query(sql, &[]).await.unwrap_err();
    for error in [simple, extended] {
        assert_eq!(sqlstate(&error), "54001", "{what}: {error}");
        let message = error.as_db_error().unwrap().message().to_string();
        assert!(
            message.contains("too complex") && message.contains(&limit.to_string()),
            "{what}: {message}"
        );
    }
}

#[tokio::test]
async fn deep_statements_are_refused_and_the_server_lives_on() {
    let f = Fixture::start("pg_deep", "deep", SETUP, settings()).await;
    let client = f.client("deep").await;
    // 2,000 terms is a 9 KB query; 10,000 terms 49 KB. Both used to abort the process.
    refused(&client, &chain(2_000), MAX_DEPTH).await;
    refused(&client, &chain(10_000), MAX_DEPTH).await;
    let ors = (0..3_000)
        .map(|i| format!("id = {i}"))
        .collect::<Vec<_>>()
        .join(" OR ");
    refused(
        &client,
        &format!("SELECT * FROM pg_deep.t WHERE {ors}"),
        MAX_DEPTH,
    )
    .await;
    let unions = (0..3_000)
        .map(|i| format!("SELECT {i}"))
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    refused(&client, &unions, MAX_DEPTH).await;
    // Nesting, bounded before the statement is parsed.
    let n = PARSER_NESTING_LIMIT + 10;
    let calls = format!("SELECT {}1{}", "abs(".repeat(n), ")".repeat(n));
    refused(&client, &calls, CALL_NESTING_LIMIT).await;
    let nested = [
        format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n)),
        format!("SELECT {}1{}", "(SELECT ".repeat(n), ")".repeat(n)),
        format!(
            "SELECT {}1{}",
            "CASE WHEN true THEN ".repeat(n),
            " END".repeat(n)
        ),
    ];
    for sql in &nested {
        refused(&client, sql, PARSER_NESTING_LIMIT).await;
    }
    // The same connection, and another one, still work.
    let row = client
        .query_one("SELECT count(*) FROM pg_deep.t", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 2);
    let other = f.client("deep").await;
    let row = other.query_one("SELECT 1::BIGINT + 1", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_just_under_the_limit_run() {
    let f = Fixture::start("pg_shallow", "shallow", SETUP, settings()).await;
    let client = f.client("shallow").await;
    // The query, the cast and the literal at the bottom take three levels.
    let terms = MAX_DEPTH - 2;
    let sum = (terms * (terms - 1) / 2) as i64;
    let sql = chain(terms).replacen("SELECT 0", "SELECT 0::BIGINT", 1);
    let row = client.query_one(&sql, &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), sum);
    let rows = client.simple_query(&sql).await.unwrap();
    assert!(
        rows.iter().any(|m| matches!(m,
            tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some(sum.to_string().as_str()))),
        "{sql:.60}"
    );
    // One level more is refused: without the cast, `MAX_DEPTH` terms are that deep.
    refused(&client, &chain(MAX_DEPTH), MAX_DEPTH).await;
    // Nesting just under the parser's limit runs.
    let n = PARSER_NESTING_LIMIT - 5;
    let row = client
        .query_one(
            &format!("SELECT {}1::BIGINT{}", "(".repeat(n), ")".repeat(n)),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1);
    let n = CALL_NESTING_LIMIT;
    let sql = format!("SELECT {}-1::BIGINT{}", "abs(".repeat(n), ")".repeat(n));
    let row = client.query_one(&sql, &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 1);
    // psql's catalog queries (`\d+`) are far below the limits.
    let out = f.psql("shallow", &["-c", "\\d+ pg_shallow.t"]);
    let out = stdout_of(&out);
    assert!(out.contains("id") && out.contains("v"), "{out}");
}

/// Asserts `sql` is refused for its length over the simple and the extended protocol.
async fn too_long(client: &tokio_postgres::Client, sql: &str) {
    let simple = client.simple_query(sql).await.unwrap_err();
    let extended = client.query(sql, &[]).await.unwrap_err();
    for error in [simple, extended] {
        assert_eq!(sqlstate(&error), "54000", "{error}");
        let message = error.as_db_error().unwrap().message().to_string();
        assert!(
            message.contains("max_statement_size") && message.contains(&sql.len().to_string()),
            "{message}"
        );
    }
}

#[tokio::test]
async fn long_statements_are_refused_before_they_are_read() {
    let mut small = settings();
    small.max_statement_size = 64 << 10;
    let f = Fixture::start("pg_long", "long", SETUP, small).await;
    let client = f.client("long").await;
    // 100 KB of a flat sum: refused for its size, before any tokenizer or parser sees it.
    too_long(&client, &chain(20_000)).await;
    let row = client
        .query_one("SELECT count(*) FROM pg_long.t", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 2);

    // Under the default limit (1 MiB), a 900 KB one-line statement is read in linear time
    // (locating its tokens was quadratic and took minutes) and refused for its depth; one of
    // 2 MiB is refused for its size.
    let f = Fixture::start("pg_long2", "long2", SETUP, settings()).await;
    let client = f.client("long2").await;
    let sum = format!("SELECT 0{}", "+1".repeat(450_000));
    refused(&client, &sum, MAX_DEPTH).await;
    too_long(&client, &format!("SELECT 0{}", "+1".repeat(1 << 20))).await;
    let row = client.query_one("SELECT 1::BIGINT + 1", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 2);
}
