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

const SETUP: &str =
    "CREATE TABLE {db}.m (tenant INT, seq INT, v INT NULL, PRIMARY KEY (tenant, seq));
     INSERT INTO {db}.m SELECT seq % 6, seq, seq % 4 FROM {db}.seq_1_to_240;
     CREATE TABLE {db}.o (id BIGINT PRIMARY KEY, customer_id INT NOT NULL,
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

/// Two sessions on `database`: one that uses indexes, one that scans instead.
async fn sessions(f: &Fixture, database: &str) -> (Client, Client) {
    let scanned = f.client_with(database, "SET cdcfusion.indexes = off").await;
    (f.client(database).await, scanned)
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
async fn change(db: &str, rng: &mut impl Rng, next_id: &mut u64) {
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
        conn.query_drop(sql.replace(DB, db)).await.unwrap();
    }
    if together {
        conn.query_drop("COMMIT").await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_lookups_answer_what_the_server_and_a_scan_answer() {
    let f = Fixture::start(DB, "idx", SETUP, settings()).await;
    let (indexed, scanned) = sessions(&f, "idx").await;
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
            change(DB, &mut rng, &mut next_id).await;
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
    // `cdc.indexes` lists the source's indexes, the primary key's too; the ones looked up
    // hold sorted batches.
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
            "m|PRIMARY|tenant, seq|t|f",
            "o|PRIMARY|id|t|f",
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

/// Range filters (`<`, `<=`, `>`, `>=`, `BETWEEN`, several on one column) of the primary key
/// and of indexes' first columns are answered from the index, and answer what the server and
/// a scan answer, NULLs left out, through random changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_answer_what_the_server_and_a_scan_answer() {
    let db = "pg_index_ranges";
    let f = Fixture::start(db, "rng", SETUP, settings()).await;
    let (indexed, scanned) = sessions(&f, "rng").await;
    for (sql, used) in [
        (
            "SELECT id FROM {db}.o WHERE id BETWEEN 10 AND 20",
            "index=PRIMARY range=[10, 20]",
        ),
        (
            "SELECT id FROM {db}.o WHERE id > 10 AND 20 >= id AND id > 12",
            "index=PRIMARY range=(12, 20]",
        ),
        (
            "SELECT id FROM {db}.o WHERE customer_id > 30",
            "index=by_customer range=(30, ..)",
        ),
        (
            "SELECT seq FROM {db}.m WHERE tenant = 3",
            "index=PRIMARY range=[3, 3]",
        ),
        // An equality on an index beats a range of the key.
        (
            "SELECT id FROM {db}.o WHERE id < 100 AND code = 'c5'",
            "index=by_code values=1",
        ),
    ] {
        let sql = sql.replace("{db}", db);
        let shown = plan(&indexed, &sql).await;
        assert!(shown.contains(used), "{sql}: {shown}");
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut next_id = 1500;
    let mut compared = 0;
    for round in 0..10 {
        if round > 0 {
            change(db, &mut rng, &mut next_id).await;
            f.sync().await;
        }
        let a = rng.random_range(0..1600);
        let b = a + rng.random_range(0..400);
        let c = rng.random_range(0..40);
        let d = rng.random_range(0..10);
        let filters = [
            format!("id BETWEEN {a} AND {b}"),
            format!("id > {a} AND id <= {b}"),
            format!("id < {a}"),
            format!("{a} <= id AND id < 100400"),
            format!("id >= {a} AND id >= {b} AND id < {b} + 50"),
            format!("customer_id > {c}"),
            format!("customer_id BETWEEN {c} AND {} AND id > {a}", c + 3),
            format!("code < 'c{d}'"),
            format!("code >= 'c{d}' AND code < 'c{}'", d + 1),
            "region >= 'eu'".to_string(),
            "region < 'us' AND placed > date '2024-01-04'".to_string(),
            // Not by an index: a decimal compared through a cast, a float, a second column.
            format!("amount > {}", c % 12),
            format!("price >= {}", d % 7),
            format!("placed <= date '2024-01-0{}'", 1 + d % 9),
        ];
        for filter in filters {
            let sql =
                format!("SELECT id, customer_id, code, region, placed FROM {db}.o WHERE {filter}");
            let ours = rows(&indexed, &sql).await;
            assert_eq!(ours, rows(&scanned, &sql).await, "{sql}");
            let theirs = server_rows(&format!("SELECT id FROM {db}.o WHERE {filter}")).await;
            assert_eq!(ids(&ours), theirs, "{sql}");
            compared += ours.len();
        }
        for filter in [
            format!("tenant = {}", d % 6),
            format!("tenant BETWEEN 2 AND 4 AND seq < {a}"),
            format!("tenant > {}", d % 6),
        ] {
            let sql = format!("SELECT seq, tenant, v FROM {db}.m WHERE {filter}");
            let ours = rows(&indexed, &sql).await;
            assert_eq!(ours, rows(&scanned, &sql).await, "{sql}");
            assert_eq!(ours, server_rows(&sql).await, "{sql}");
        }
    }
    assert!(compared > 10_000, "only {compared} rows compared");
    f.shutdown().await;
}

/// The server's own list of `db.t`'s indexes (its primary key's too), as `cdc.indexes` shows
/// ours: `name|columns|unique`.
async fn server_indexes(db: &str, table: &str) -> Vec<String> {
    server_rows(&format!(
        "SELECT INDEX_NAME, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX SEPARATOR ', '), \
         IF(MIN(NON_UNIQUE) = 0, 't', 'f') FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME = '{table}' \
         GROUP BY INDEX_NAME"
    ))
    .await
}

/// Index statements at the source (`CREATE INDEX`, `DROP INDEX`, an `ALTER TABLE` adding,
/// dropping or renaming indexes, a dropped column leaving a two-column index) are followed as
/// they stream: after each, the engine lists the indexes the server's `information_schema`
/// lists, uses a new one, answers as the server does, and the table's schema version (which
/// readers of its columns and changelog go by) stays the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_statements_at_the_source_are_followed() {
    let db = "pg_index_ddl";
    let setup = "CREATE TABLE {db}.t (id INT PRIMARY KEY, a INT NULL, b VARCHAR(20) NULL,
           c INT NULL, KEY by_a (a));
         INSERT INTO {db}.t SELECT seq, seq % 11, concat('b', seq % 29), seq % 5
           FROM {db}.seq_1_to_800;";
    let f = Fixture::start(db, "ixd", setup, settings()).await;
    let client = f.client("ixd").await;
    let ours = async |client: &Client| {
        rows(
            client,
            &format!(
                "SELECT index, columns, \"unique\" FROM cdc.indexes \
                 WHERE db = '{db}' AND \"table\" = 't'"
            ),
        )
        .await
    };
    let version =
        format!("SELECT schema_version FROM cdc.tables WHERE db = '{db}' AND \"table\" = 't'");
    let version_before = rows(&client, &version).await;
    assert_eq!(ours(&client).await, server_indexes(db, "t").await);
    let steps: [(&str, Option<(&str, &str)>); 7] = [
        (
            "CREATE INDEX by_b ON {db}.t (b)",
            Some(("b = 'b7'", "index=by_b")),
        ),
        (
            "ALTER TABLE {db}.t ADD INDEX (c), ADD UNIQUE KEY u (c, id)",
            Some(("c = 3", "index=c")),
        ),
        (
            "ALTER TABLE {db}.t RENAME INDEX by_a TO a2",
            Some(("a = 4", "index=a2")),
        ),
        ("DROP INDEX by_b ON {db}.t", None),
        (
            "CREATE INDEX by_b_prefix ON {db}.t (b(3), a)",
            Some(("b = 'b12'", "index=by_b_prefix")),
        ),
        ("ALTER TABLE {db}.t DROP KEY c", None),
        (
            "UPDATE {db}.t SET b = 'moved', c = 9 WHERE id % 7 = 0",
            Some(("b = 'moved'", "index=by_b_prefix")),
        ),
    ];
    for (statement, lookup) in steps {
        at_server(&f, &statement.replace("{db}", db)).await;
        assert_eq!(
            ours(&client).await,
            server_indexes(db, "t").await,
            "after {statement}"
        );
        if let Some((filter, used)) = lookup {
            let sql = format!("SELECT id, a, b, c FROM {db}.t WHERE {filter}");
            let shown = plan(&client, &sql).await;
            assert!(shown.contains(used), "{statement}: {shown}");
            let got = rows(&client, &sql).await;
            assert!(!got.is_empty(), "{sql}");
            assert_eq!(
                got,
                server_rows(&format!("SELECT id, a, b, c FROM {db}.t WHERE {filter}")).await,
                "{sql}"
            );
        }
    }
    // Indexes alone changed: the columns' schema version is the one the table started with.
    assert_eq!(rows(&client, &version).await, version_before);
    // A dropped column leaves the two-column index it was part of, as at the server.
    at_server(&f, &format!("ALTER TABLE {db}.t DROP COLUMN a")).await;
    assert_eq!(ours(&client).await, server_indexes(db, "t").await);
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
    assert_eq!(listed, ["index=PRIMARY columns=id", "index=by_g columns=g"]);
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
