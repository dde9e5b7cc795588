//! Drivers and tools: the extended protocol through tokio-postgres (named and unnamed
//! statements, portals with row limits, parameters), the catalog queries DBeaver, Metabase and
//! Grafana send on connect, psycopg 3 from Python, and many clients querying while the source
//! ingests writes.

use std::process::Command;
use std::sync::Arc;

use mysql_async::prelude::Queryable;
use tokio_postgres::SimpleQueryMessage;

use crate::common::*;
use crate::fixture::*;

const SETUP: &str = "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(10), amount DECIMAL(8,2));
     INSERT INTO {db}.t SELECT seq, CONCAT('v', seq), seq * 1.25 FROM {db}.seq_1_to_20;
     CREATE TABLE {db}.acct (id INT PRIMARY KEY, balance BIGINT NOT NULL);
     INSERT INTO {db}.acct VALUES (1, 1000), (2, 1000);";

fn rows_of(messages: &[SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).map(String::from))
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn extended_protocol_statements_portals_and_parameters() {
    let f = Fixture::start("pg_ext", "ext", SETUP, settings()).await;
    let mut client = f.client("ext").await;
    // A named statement, executed with different parameters.
    let by_id = client
        .prepare("SELECT v, amount::TEXT FROM pg_ext.t WHERE id = $1")
        .await
        .unwrap();
    for id in [3i32, 7] {
        let row = client.query_one(&by_id, &[&id]).await.unwrap();
        assert_eq!(row.get::<_, &str>(0), format!("v{id}"));
    }
    // Unnamed statements with text, integer and float parameters.
    let rows = client
        .query(
            "SELECT id FROM pg_ext.t WHERE v = $1 OR id = $2 OR CAST(id AS BIGINT) > $3 ORDER BY id",
            &[&"v1", &2i32, &19i64],
        )
        .await
        .unwrap();
    let ids: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(ids, [1, 2, 20]);
    // A portal fetched three rows at a time (row limit on Execute).
    let tx = client.transaction().await.unwrap();
    let all = tx
        .prepare("SELECT id FROM pg_ext.t ORDER BY id")
        .await
        .unwrap();
    let portal = tx.bind(&all, &[]).await.unwrap();
    let mut fetched = Vec::new();
    loop {
        let chunk = tx.query_portal(&portal, 3).await.unwrap();
        assert!(chunk.len() <= 3);
        if chunk.is_empty() {
            break;
        }
        fetched.extend(chunk.iter().map(|r| r.get::<_, i32>(0)));
    }
    assert_eq!(fetched, (1..=20).collect::<Vec<_>>());
    tx.rollback().await.unwrap();
    // Our own statement and session statements through the extended protocol.
    let sources = client.query("SHOW SOURCES", &[]).await.unwrap();
    assert_eq!(sources[0].get::<_, &str>("name"), "ext");
    client
        .execute("SET application_name = 'tests'", &[])
        .await
        .unwrap();
    let row = client
        .query_one("SHOW application_name", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, &str>(0), "tests");
    // Errors at Parse keep the connection usable.
    let error = client.prepare("SELECT * FROM nowhere").await.unwrap_err();
    assert_eq!(sqlstate(&error), "42P01");
    let error = client.query("SELECT 1; SELECT 2", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&error), "42601");
    // Simple protocol: several statements at once, and empty queries.
    let messages = client
        .simple_query("SELECT 1 AS a; SELECT 'x' AS b;")
        .await
        .unwrap();
    assert_eq!(
        rows_of(&messages),
        [vec![Some("1".to_string())], vec![Some("x".to_string())]]
    );
    assert!(rows_of(&client.simple_query("").await.unwrap()).is_empty());
    assert!(rows_of(&client.simple_query(";").await.unwrap()).is_empty());
}

/// The setting `SELECT current_setting('lock_timeout')` reads: through the simple protocol,
/// an unnamed statement and a statement prepared before the changes.
async fn lock_timeout(
    client: &tokio_postgres::Client,
    prepared: &tokio_postgres::Statement,
) -> [String; 3] {
    const READ: &str = "SELECT current_setting('lock_timeout')";
    let simple = rows_of(&client.simple_query(READ).await.unwrap());
    let unnamed: String = client.query_one(READ, &[]).await.unwrap().get(0);
    let named: String = client.query_one(prepared, &[]).await.unwrap().get(0);
    [simple[0][0].clone().unwrap_or_default(), unnamed, named]
}

#[tokio::test]
async fn statements_plan_with_the_settings_of_their_moment() {
    let f = Fixture::start("pg_settings", "settings", SETUP, settings()).await;
    let client = f.client("settings").await;
    let prepared = client
        .prepare("SELECT current_setting('lock_timeout')")
        .await
        .unwrap();
    assert_eq!(lock_timeout(&client, &prepared).await, ["0", "0", "0"]);
    client
        .batch_execute("SET lock_timeout = '5s'")
        .await
        .unwrap();
    assert_eq!(lock_timeout(&client, &prepared).await, ["5s", "5s", "5s"]);
    // The statement after a `SET` in the same simple query sees it too.
    let rows = rows_of(
        &client
            .simple_query("SET lock_timeout = '7s'; SELECT current_setting('lock_timeout')")
            .await
            .unwrap(),
    );
    assert_eq!(rows, [[Some("7s".to_string())]]);
    client.batch_execute("RESET lock_timeout").await.unwrap();
    assert_eq!(lock_timeout(&client, &prepared).await, ["0", "0", "0"]);
    client
        .batch_execute("SET lock_timeout = '9s'")
        .await
        .unwrap();
    client.batch_execute("DISCARD ALL").await.unwrap();
    assert_eq!(lock_timeout(&client, &prepared).await, ["0", "0", "0"]);
    f.shutdown().await;
}

/// Catalog queries tools send on connect (as recorded from DBeaver 25, Metabase 0.55 and
/// Grafana's PostgreSQL data source).
const TOOL_QUERIES: &[&str] = &[
    // DBeaver (pgjdbc)
    "SET extra_float_digits = 3",
    "SET application_name = 'DBeaver 25.1.5 - Main <postgres>'",
    "SELECT current_schema(),session_user",
    "SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0 AND d.classoid='pg_namespace'::regclass ORDER BY nspname",
    "SHOW search_path",
    "SELECT db.oid,db.* FROM pg_catalog.pg_database db WHERE datname='postgres'",
    "SELECT * FROM pg_catalog.pg_settings where name='standard_conforming_strings'",
    "SELECT version()",
    "SELECT * FROM pg_catalog.pg_enum WHERE 1<>1 LIMIT 1",
    "SELECT reltype FROM pg_catalog.pg_class WHERE 1<>1 LIMIT 1",
    "SELECT t.oid,t.*,c.relkind,format_type(nullif(t.typbasetype, 0), t.typtypmod) as base_type_name, d.description FROM pg_catalog.pg_type t LEFT OUTER JOIN pg_catalog.pg_type et ON et.oid=t.typelem LEFT OUTER JOIN pg_catalog.pg_class c ON c.oid=t.typrelid LEFT OUTER JOIN pg_catalog.pg_description d ON t.oid=d.objoid WHERE t.typname IS NOT NULL AND (c.relkind IS NULL OR c.relkind = 'c') AND (et.typcategory IS NULL OR et.typcategory <> 'C')",
    // Metabase
    "SET extra_float_digits = 2",
    "SHOW TRANSACTION ISOLATION LEVEL",
    "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ UNCOMMITTED",
    r#"SELECT nspname AS "TABLE_SCHEM", current_database() AS "TABLE_CATALOG" FROM pg_catalog.pg_namespace  WHERE nspname <> 'pg_toast' AND (nspname !~ '^pg_temp_'  OR nspname = (pg_catalog.current_schemas(true))[1]) AND (nspname !~ '^pg_toast_temp_'  OR nspname = replace((pg_catalog.current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_'))  ORDER BY "TABLE_SCHEM""#,
    "show timezone",
    // Grafana
    r#"SELECT quote_ident(table_name) AS "table" FROM information_schema.tables WHERE quote_ident(table_schema) NOT IN ('information_schema', 'pg_catalog') ORDER BY 1"#,
    r#"SELECT quote_ident(column_name) AS "column", data_type AS "type" FROM information_schema.columns WHERE quote_ident(table_name) = 't'"#,
];

#[tokio::test]
async fn catalog_queries_of_bi_tools_succeed() {
    let f = Fixture::start("pg_tools", "tools", SETUP, settings()).await;
    let client = f.client("tools").await;
    for query in TOOL_QUERIES {
        // Tools speak the extended protocol (JDBC, pgx); psql-like ones the simple one.
        if let Err(e) = client.query(*query, &[]).await {
            panic!("extended protocol: {query}\n{e:?}");
        }
        if let Err(e) = client.simple_query(query).await {
            panic!("simple protocol: {query}\n{e:?}");
        }
    }
    // The namespaces of the current database are the captured one and `cdc`.
    let rows = client
        .query(
            "SELECT nspname FROM pg_catalog.pg_namespace ORDER BY nspname",
            &[],
        )
        .await
        .unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.get(0)).collect();
    assert!(
        names.contains(&"pg_tools") && names.contains(&"cdc"),
        "{names:?}"
    );
}

/// psycopg 3, installed into the test build directory once; returns its `PYTHONPATH`.
fn psycopg_path() -> String {
    crate::common::pip_install("pydeps", "psycopg", "psycopg>=3.1,<4")
}

const PSYCOPG_SCRIPT: &str = r#"
import decimal, sys
import psycopg
from psycopg import errors

with psycopg.connect(sys.argv[1]) as conn:
    rows = conn.execute("SELECT id, v, amount FROM pg_py.t WHERE id <= %s ORDER BY id", (2,)).fetchall()
    assert rows == [(1, "v1", decimal.Decimal("1.25")), (2, "v2", decimal.Decimal("2.50"))], rows
    for i in (3, 4):
        (v,) = conn.execute("SELECT v FROM pg_py.t WHERE id = %s", (i,), prepare=True).fetchone()
        assert v == "v%d" % i, v
    with conn.cursor(binary=True) as cur:
        cur.execute("SELECT id, amount, v FROM pg_py.t WHERE id = %s", (5,))
        assert cur.fetchone() == (5, decimal.Decimal("6.25"), "v5")
    try:
        conn.execute("SELECT * FROM pg_py.nowhere")
        raise SystemExit("no error")
    except errors.UndefinedTable:
        conn.rollback()
    (n,) = conn.execute("SELECT count(*) FROM pg_py.t").fetchone()
    assert n == 20, n
print("psycopg ok")
"#;

#[tokio::test]
async fn psycopg_from_python() {
    let f = Fixture::start("pg_py", "py", SETUP, settings()).await;
    ensure_psql(); // libpq, which psycopg loads
    let path = psycopg_path();
    let conninfo = f.conninfo(USER, PASSWORD, "py");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args(["-c", PSYCOPG_SCRIPT, &conninfo])
            .env("PYTHONPATH", path)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("psycopg ok"));
}

/// Clients and queries per client of the concurrency test.
const CLIENTS: usize = 8;
const QUERIES: usize = 30;

#[tokio::test]
async fn concurrent_clients_while_the_source_ingests() {
    let f = Arc::new(Fixture::start("pg_conc", "conc", SETUP, settings()).await);
    // A writer moves money between two accounts (the sum stays 2000) and inserts rows.
    let writer = tokio::spawn(async {
        let mut conn = root_conn(server()).await;
        for i in 0..100 {
            conn.query_drop(format!(
                "START TRANSACTION;
                 UPDATE pg_conc.acct SET balance = balance - {i} WHERE id = 1;
                 UPDATE pg_conc.acct SET balance = balance + {i} WHERE id = 2;
                 INSERT INTO pg_conc.t VALUES ({}, 'w', 1.00);
                 COMMIT;",
                1000 + i
            ))
            .await
            .unwrap();
        }
    });
    let mut readers = Vec::new();
    for c in 0..CLIENTS {
        let f = Arc::clone(&f);
        readers.push(tokio::spawn(async move {
            let client = f.client("conc").await;
            let lookup = client
                .prepare("SELECT v FROM pg_conc.t WHERE id = $1")
                .await
                .unwrap();
            for q in 0..QUERIES {
                match (c + q) % 3 {
                    0 => {
                        let row = client
                            .query_one("SELECT sum(balance) FROM pg_conc.acct", &[])
                            .await
                            .unwrap();
                        // Every statement reads whole source transactions.
                        assert_eq!(row.get::<_, i64>(0), 2000);
                    }
                    1 => {
                        let id = (q % 20 + 1) as i32;
                        let row = client.query_one(&lookup, &[&id]).await.unwrap();
                        assert_eq!(row.get::<_, &str>(0), format!("v{id}"));
                    }
                    _ => {
                        let messages = client
                            .simple_query(
                                "SELECT count(*) FROM pg_conc.\"t$changelog\" WHERE _op = 'r'",
                            )
                            .await
                            .unwrap();
                        assert_eq!(rows_of(&messages), [vec![Some("20".to_string())]]);
                    }
                }
            }
        }));
    }
    for reader in readers {
        tokio::time::timeout(HANG_GUARD, reader)
            .await
            .expect("a reader hangs")
            .unwrap();
    }
    writer.await.unwrap();
    f.sync().await;
    let client = f.client("conc").await;
    let row = client
        .query_one("SELECT count(*) FROM pg_conc.t", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 120);
}
