//! `AS OF` through the front end: the grammar reaches the wire's parse (simple and extended
//! protocols, psql), names resolve under the connection's database, and its errors carry their
//! SQLSTATEs.

use mysql_async::prelude::Queryable;

use crate::common::*;
use crate::fixture::*;

// psql blocks its thread while the server answers on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_of_over_the_wire() {
    let f = Fixture::start(
        "pg_asof",
        "pgasof",
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(8));
         INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b');",
        settings(),
    )
    .await;
    f.sync().await;
    let client = f.client("pgasof").await;
    let position = |rows: Vec<tokio_postgres::Row>| -> String { rows[0].get(0) };
    let before = position(
        client
            .query("SELECT position FROM cdc.sources", &[])
            .await
            .unwrap(),
    );
    root_conn(server())
        .await
        .query_drop("UPDATE pg_asof.t SET v = 'x' WHERE id = 1; DELETE FROM pg_asof.t WHERE id = 2")
        .await
        .unwrap();
    f.sync().await;
    // Extended protocol, a name under the connection's database, the table's name as alias.
    let rows = client
        .query(
            &format!("SELECT t.id, t.v FROM pg_asof.t AS OF '{before}' ORDER BY t.id"),
            &[],
        )
        .await
        .unwrap();
    let rows: Vec<(i32, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(rows, [(1, "a".to_string()), (2, "b".to_string())]);
    // psql, simple protocol: then and now side by side.
    let out = f.psql(
        "pgasof",
        &[
            "-AtX",
            "-c",
            &format!(
                "SELECT o.id, o.v, n.v FROM pg_asof.t AS OF '{before}' o \
                 LEFT JOIN pg_asof.t n ON n.id = o.id ORDER BY o.id"
            ),
        ],
    );
    assert_eq!(stdout_of(&out), "1|a|x\n2|b|\n");
    // Errors keep their SQLSTATE.
    for (sql, state) in [
        ("SELECT * FROM pg_asof.t AS OF 'tomorrow'", "22P02"),
        ("SELECT * FROM pg_asof.t AS OF 'binlog.999999:4'", "22023"),
        (
            "SELECT * FROM as_of('pg_asof.nope', 'binlog.000001:4')",
            "42P01",
        ),
    ] {
        let error = client.simple_query(sql).await.unwrap_err();
        assert_eq!(sqlstate(&error), state, "{sql}: {error:?}");
    }
    // The connection goes on serving.
    let rows = client
        .query("SELECT count(*) FROM pg_asof.t", &[])
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, i64>(0), 1);
    f.shutdown().await;
}
