//! Secondary indexes mirrored from the source: a filter on an index's first column is answered
//! from the index, and answers what the server answers and what a session that scans
//! (`cdcfusion.indexes = off`) answers, through random changes of the indexed columns, of
//! primary keys, deletes, a keyless table's duplicate rows and DDL.

use mysql_async::prelude::Queryable;
use rand::{Rng, SeedableRng};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::common::*;
use crate::fixture::*;

const DB: &str = "pg_indexes";

const SETUP: &str = "CREATE TABLE {db}.o (id BIGINT PRIMARY KEY, customer_id INT NOT NULL,
       code VARCHAR(12) NULL, region CHAR(2) NULL, amount DECIMAL(10,2) NULL, placed DATE NULL,
       price DOUBLE NULL,
       KEY by_customer (customer_id), UNIQUE KEY by_code (code),
       KEY by_region_placed (region, placed), KEY (amount), KEY (price));
     INSERT INTO {db}.o SELECT seq, seq % 37, concat('c', seq), elt(1 + seq % 3, 'eu', 'us', 'ap'),
       (seq % 50) / 4, date '2024-01-01' + interval (seq % 20) day, seq % 7
       FROM {db}.seq_1_to_1500;
     CREATE TABLE {db}.k (a INT NULL, b VARCHAR(5) NULL, KEY (a));
     INSERT INTO {db}.k SELECT seq % 9, 'x' FROM {db}.seq_1_to_300;";

/// Every row's text of a simple query, sorted; or its error.
async fn rows(client: &Client, sql: &str) -> Vec<String> {
    let messages = match client.simple_query(sql).await {
        Ok(m) => m,
        Err(e) => return vec![format!("error {e}")],
    };
    let mut out: Vec<String> = messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL"))
                    .collect::<Vec<_>>()
                    .join("|"),
            ),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// The server's own answer, as [`rows`] gives ours.
async fn server_rows(sql: &str) -> Vec<String> {
    let got: Vec<mysql_async::Row> = root_conn(server()).await.query(sql).await.unwrap();
    let mut out: Vec<String> = got
        .into_iter()
        .map(|row| {
            (0..row.len())
                .map(|i| match row.get_opt::<Option<String>, _>(i) {
                    Some(Ok(Some(v))) => v,
                    _ => "NULL".into(),
                })
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    out.sort();
    out
}

/// The first column of each of `rows` (as [`rows`] gives them), sorted as text.
fn ids(rows: &[String]) -> Vec<String> {
    let mut ids: Vec<String> = rows
        .iter()
        .map(|r| r.split('|').next().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

/// `sql` run at the server, then the source caught up with it.
async fn at_server(f: &Fixture, sql: &str) {
    root_conn(server()).await.query_drop(sql).await.unwrap();
    f.sync().await;
}

/// The plan `EXPLAIN` shows for `sql`.
async fn plan(client: &Client, sql: &str) -> String {
    rows(client, &format!("EXPLAIN {sql}")).await.join("\n")
}

/// Filters that an index answers and the server answers alike (lower-case codes: the server
/// compares text without case, as the engine does not).
fn filters(rng: &mut impl Rng) -> Vec<String> {
    let c = rng.random_range(0..40);
    let d = rng.random_range(0..40);
    let code = rng.random_range(0..1700);
    vec![
        format!("customer_id = {c}"),
        format!("{c} = customer_id"),
        format!("customer_id IN ({c}, {d}, {c})"),
        format!("customer_id = {c} OR customer_id = {d}"),
        format!("customer_id = {c} AND id > 700"),
        format!("code = 'c{code}'"),
        format!("code IN ('c{code}', 'c{}', 'nope')", code + 1),
        format!("region = 'eu'"),
        format!("region = 'ap' AND placed = date '2024-01-0{}'", 1 + c % 9),
        format!("amount = {}.{}", c % 12, [0, 25, 5, 75][d % 4]),
        // Not by an index: the first column of none, a float, NULL, a value no row can hold.
        format!("placed = date '2024-01-0{}'", 1 + d % 9),
        format!("price = {}", d % 7),
        "code = NULL".into(),
    ]
}

/// One round of random changes: inserts, updates of indexed columns and of primary keys,
/// deletes, in one transaction or each alone.
async fn change(rng: &mut impl Rng, next_id: &mut u64) {
    let mut conn = root_conn(server()).await;
    let together = rng.random_bool(0.5);
    if together {
        conn.query_drop("BEGIN").await.unwrap();
    }
    for _ in 0..40 {
        let id = rng.random_range(1..*next_id);
        let c = rng.random_range(0..40);
        let sql = match rng.random_range(0..7) {
            0 | 1 => {
                *next_id += 1;
                format!(
                    "INSERT INTO {DB}.o VALUES ({}, {c}, 'c{}', 'us', {c}.25, '2024-01-05', 1)",
                    *next_id, *next_id
                )
            }
            2 => format!("UPDATE {DB}.o SET customer_id = {c} WHERE id = {id}"),
            3 => format!("UPDATE {DB}.o SET code = NULL, region = 'eu' WHERE id = {id}"),
            4 => format!("UPDATE IGNORE {DB}.o SET id = id + 100000 WHERE id = {id}"),
            5 => format!("DELETE FROM {DB}.o WHERE id = {id}"),
            _ => format!(
                "INSERT INTO {DB}.k VALUES ({}, 'x'); DELETE FROM {DB}.k WHERE a = {} LIMIT 1",
                c % 9,
                (c + 1) % 9
            ),
        };
        conn.query_drop(sql).await.unwrap();
    }
    if together {
        conn.query_drop("COMMIT").await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_lookups_answer_what_the_server_and_a_scan_answer() {
    let f = Fixture::start(DB, "idx", SETUP, settings()).await;
    let indexed = f.client("idx").await;
    let scanned = f.client("idx").await;
    scanned
        .batch_execute("SET cdcfusion.indexes = off")
        .await
        .unwrap();
    let columns = "id, customer_id, code, region, placed";
    let by_customer = format!("SELECT {columns} FROM {DB}.o WHERE customer_id = 3");
    assert!(
        plan(&indexed, &by_customer)
            .await
            .contains("index=by_customer values=1"),
        "{}",
        plan(&indexed, &by_customer).await
    );
    assert!(plan(&scanned, &by_customer).await.contains("(scanned"));
    // Not answered by an index: a float column, and a column that leads none.
    for other in ["price = 3", "placed = date '2024-01-02'"] {
        let shown = plan(&indexed, &format!("SELECT id FROM {DB}.o WHERE {other}")).await;
        assert!(!shown.contains("index="), "{other}: {shown}");
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut next_id = 1500;
    let mut compared = 0;
    for round in 0..12 {
        if round > 0 {
            change(&mut rng, &mut next_id).await;
            f.sync().await;
        }
        for filter in filters(&mut rng) {
            let sql = format!("SELECT {columns} FROM {DB}.o WHERE {filter}");
            let ours = rows(&indexed, &sql).await;
            assert_eq!(ours, rows(&scanned, &sql).await, "{sql}");
            let theirs = server_rows(&format!("SELECT id FROM {DB}.o WHERE {filter}")).await;
            assert_eq!(ids(&ours), theirs, "{sql}");
            compared += ours.len();
        }
        // A value the column cannot hold selects nothing (MariaDB's own answer through its
        // index rounds 1.5 to 2, so ours is compared with the scan only).
        let sql = format!("SELECT {columns} FROM {DB}.o WHERE customer_id = 1.5");
        assert_eq!(rows(&indexed, &sql).await, Vec::<String>::new(), "{sql}");
        assert_eq!(rows(&scanned, &sql).await, Vec::<String>::new(), "{sql}");
        for a in [0, 4, 8, 11] {
            let sql = format!("SELECT a, b FROM {DB}.k WHERE a = {a}");
            let ours = rows(&indexed, &sql).await;
            assert_eq!(ours, rows(&scanned, &sql).await, "{sql}");
            assert_eq!(ours, server_rows(&sql).await, "{sql}");
        }
    }
    assert!(compared > 1000, "only {compared} rows compared");
    // `cdc.indexes` lists the source's indexes; the ones looked up hold sorted batches.
    let listed = rows(
        &indexed,
        &format!(
            "SELECT \"table\", index, columns, \"unique\", batches_sorted > 0 FROM cdc.indexes \
             WHERE db = '{DB}'"
        ),
    )
    .await;
    assert_eq!(
        listed,
        [
            "k|a|a|f|t",
            "o|amount|amount|f|t",
            "o|by_code|code|t|t",
            "o|by_customer|customer_id|f|t",
            "o|by_region_placed|region, placed|f|t",
            "o|price|price|f|f",
        ]
    );

    // DDL: a column added keeps the indexes; the indexed column dropped takes its index.
    at_server(&f, &format!("ALTER TABLE {DB}.o ADD COLUMN note TEXT NULL")).await;
    let shown = plan(&indexed, &by_customer).await;
    assert!(shown.contains("index=by_customer"), "{shown}");
    assert_eq!(
        rows(&indexed, &by_customer).await,
        rows(&scanned, &by_customer).await,
        "{by_customer}"
    );
    at_server(&f, &format!("ALTER TABLE {DB}.o DROP COLUMN customer_id")).await;
    let by_code = format!("SELECT id FROM {DB}.o WHERE code = 'c17'");
    assert!(plan(&indexed, &by_code).await.contains("index=by_code"));
    assert_eq!(rows(&indexed, &by_code).await, server_rows(&by_code).await);
    // A table created after the start has the indexes its CREATE TABLE declares.
    let later = format!(
        "CREATE TABLE {DB}.later (id INT PRIMARY KEY, g INT, KEY (g));
         INSERT INTO {DB}.later SELECT seq, seq % 5 FROM {DB}.seq_1_to_50"
    );
    at_server(&f, &later).await;
    let later = format!("SELECT id FROM {DB}.later WHERE g = 2");
    assert!(plan(&indexed, &later).await.contains("index=g"));
    assert_eq!(rows(&indexed, &later).await, server_rows(&later).await);
    f.shutdown().await;
}

/// A durable engine keeps each table's indexes in its checkpoints: after a restart (no clean
/// stop) they are listed and used as before, and answer as the server does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_are_kept_across_a_restart() {
    let db = "pg_indexes_restart";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, g INT, KEY by_g (g));
         INSERT INTO {db}.t SELECT seq, seq % 7 FROM {db}.seq_1_to_700"
    ))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let mut options = cdcfusion::engine::EngineOptions::default();
    options.durable.checkpoint_interval = std::time::Duration::from_millis(100);
    let engine = cdcfusion::engine::Engine::open(path, options.clone())
        .await
        .unwrap();
    engine
        .sql(&format!(
            "CREATE SOURCE s FROM MYSQL '{}' WITH (tables = '{db}.*', server_id = {})",
            server().cdc_url(),
            source_server_id()
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    engine.wait_ready("s").await.unwrap();
    conn.query_drop(format!("UPDATE {db}.t SET g = 3 WHERE id < 50"))
        .await
        .unwrap();
    sync_source(&engine, "s").await;
    // A checkpoint at the position reached (a few intervals).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    drop(engine);
    let engine = cdcfusion::engine::Engine::open(path, options)
        .await
        .unwrap();
    engine.wait_ready("s").await.unwrap();
    sync_source(&engine, "s").await;
    let listed = query(
        &engine,
        &format!("SELECT index, columns FROM cdc.indexes WHERE db = '{db}'"),
    )
    .await;
    assert_eq!(listed, ["index=by_g columns=g"]);
    let sql = format!("SELECT id FROM s.{db}.t WHERE g = 3");
    let plan = query(&engine, &format!("EXPLAIN {sql}")).await.join("\n");
    assert!(plan.contains("index=by_g"), "{plan}");
    let mut ours: Vec<String> = query(&engine, &sql)
        .await
        .into_iter()
        .map(|r| r.trim_start_matches("id=").to_string())
        .collect();
    ours.sort();
    let theirs = server_rows(&format!("SELECT id FROM {db}.t WHERE g = 3")).await;
    assert_eq!(ours, theirs);
}
