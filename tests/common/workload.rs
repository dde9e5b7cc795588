//! The random workload of the durability and fault tests: a keyed table with a non-key chunk
//! column and a keyless one, transactions that change keys and move rows between chunks, and
//! the check that ends every round (current tables equal to the server, changelogs equal to
//! what the server's `mariadb-binlog` prints of the binlog).
#![allow(dead_code)] // Each test binary uses part of it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cdcfusion::change::schema::Flavor;
use cdcfusion::devserver::DevServer;
use cdcfusion::engine::Engine;
use cdcfusion::source::connect::current_position;
use mysql_async::prelude::Queryable;
use rand::{Rng, SeedableRng};

use super::durable::check_table;
use super::{fresh_db, root_conn};

/// A table with a non-key chunk column and a keyless one, filled with `rows` rows.
pub async fn schema(conn: &mut mysql_async::Conn, db: &str, rows: u32) {
    fresh_db(conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, k INT NOT NULL, v VARCHAR(32), n INT, KEY (k));
         INSERT INTO {db}.t SELECT seq, seq % 97, CONCAT('v', seq), seq FROM {db}.seq_1_to_{rows};
         CREATE TABLE {db}.bag (a INT, b VARCHAR(8));
         INSERT INTO {db}.bag SELECT seq % 5, 'x' FROM {db}.seq_1_to_50;"
    ))
    .await
    .unwrap();
}

/// Checks both tables of [`schema`] after recovery.
pub async fn check(srv: &DevServer, engine: &Engine, source: &str, db: &str) {
    check_columns(srv, engine, source, db, "id, k, v, n").await;
}

/// [`check`] with `t` holding `columns` (in the server's order).
pub async fn check_columns(
    srv: &DevServer,
    engine: &Engine,
    source: &str,
    db: &str,
    columns: &str,
) {
    let end = current_position(&mut root_conn(srv).await, Flavor::MariaDb)
        .await
        .unwrap()
        .0;
    let from = engine
        .source(source)
        .unwrap()
        .status()
        .consistent_from
        .expect("a recovered source knows where its hand-off ended");
    check_table(srv, engine, source, db, "t", columns, true, &from, &end).await;
    check_table(srv, engine, source, db, "bag", "a, b", false, &from, &end).await;
}

/// One random transaction of 1–4 statements: inserts, updates of the key, of the chunk column
/// and of other columns, deletes, and rows of the keyless table (during its snapshot too).
pub async fn random_transaction(
    conn: &mut mysql_async::Conn,
    db: &str,
    rng: &mut rand::rngs::StdRng,
    next_id: &mut i64,
) {
    try_random_transaction(conn, db, rng, next_id)
        .await
        .unwrap();
}

/// [`random_transaction`], returning the server's error instead of failing the test (the
/// server may be restarting); whether a failed commit took effect is the server's to say.
pub async fn try_random_transaction(
    conn: &mut mysql_async::Conn,
    db: &str,
    rng: &mut rand::rngs::StdRng,
    next_id: &mut i64,
) -> Result<(), mysql_async::Error> {
    let mut tx = conn.start_transaction(Default::default()).await?;
    for _ in 0..rng.random_range(1..=4) {
        let id = rng.random_range(1..*next_id);
        let sql = match rng.random_range(0..8) {
            0 | 1 => {
                *next_id += 1;
                format!(
                    "INSERT INTO {db}.t (id, k, v, n) VALUES ({}, {}, 'i{}', {})",
                    *next_id,
                    rng.random_range(0..97),
                    rng.random::<u16>(),
                    rng.random::<u16>()
                )
            }
            2 => format!(
                "UPDATE {db}.t SET v = 'u{}', n = n + 1 WHERE id = {id}",
                rng.random::<u16>()
            ),
            3 => format!(
                "UPDATE {db}.t SET k = {} WHERE id = {id}",
                rng.random_range(0..97)
            ),
            4 => {
                *next_id += 1;
                format!("UPDATE {db}.t SET id = {} WHERE id = {id}", *next_id)
            }
            5 => format!("DELETE FROM {db}.t WHERE id = {id}"),
            6 => format!(
                "INSERT INTO {db}.bag VALUES ({}, 'x')",
                rng.random_range(0..5)
            ),
            _ => format!(
                "DELETE FROM {db}.bag WHERE a = {} LIMIT 1",
                rng.random_range(0..5)
            ),
        };
        tx.query_drop(&sql).await?;
    }
    tx.commit().await
}

/// Runs random transactions until `stop`; returns how many committed.
pub async fn writer(
    srv: &'static DevServer,
    db: String,
    seed: u64,
    first_id: i64,
    stop: Arc<AtomicBool>,
) -> u64 {
    let mut conn = root_conn(srv).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut next_id = first_id;
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        random_transaction(&mut conn, &db, &mut rng, &mut next_id).await;
        n += 1;
        tokio::time::sleep(Duration::from_millis(rng.random_range(1..8))).await;
    }
    n
}

/// [`writer`] on a server that restarts, pauses or drops connections: reconnects to `url` and
/// goes on; returns how many transactions the server acknowledged.
pub async fn tolerant_writer(
    url: String,
    db: String,
    seed: u64,
    first_id: i64,
    stop: Arc<AtomicBool>,
) -> u64 {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut next_id = first_id;
    let mut conn: Option<mysql_async::Conn> = None;
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = conn.as_mut() else {
            conn = mysql_async::Conn::from_url(url.as_str()).await.ok();
            if conn.is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            continue;
        };
        match try_random_transaction(c, &db, &mut rng, &mut next_id).await {
            Ok(()) => n += 1,
            Err(_) => conn = None,
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(1..8))).await;
    }
    n
}
