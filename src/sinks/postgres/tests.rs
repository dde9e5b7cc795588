//! The PostgreSQL target against a private PostgreSQL (`devserver::DevPostgres`, trust
//! authentication), each test in a database of its own.

use std::sync::Arc;

use arrow::array::{
    BinaryArray, Date32Array, Decimal128Array, DurationMicrosecondArray, TimestampMicrosecondArray,
    UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::*;
use crate::sinks::fixtures::{commit, id_v, id_v_n, id_v_schema, keys, layout};
use crate::sqlstate::{HasSqlState, SqlState};

/// A fresh database `name` on the private PostgreSQL this test binary shares; returns its URL.
async fn database(name: &str) -> String {
    crate::devserver::DevPostgres::shared()
        .create_database(name)
        .unwrap_or_else(|e| panic!("creating database {name}: {e}"))
}

async fn client(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// Every row of `sql`, its values as text joined by `|`.
async fn lines(url: &str, sql: &str) -> Vec<String> {
    let rows = client(url).await.simple_query(sql).await.unwrap();
    rows.iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            ),
            _ => None,
        })
        .collect()
}

fn schema(fields: Vec<Field>) -> SchemaRef {
    Arc::new(Schema::new(fields))
}

#[tokio::test]
async fn changelog_commits_append_with_their_progress_row() {
    let url = database("cdcfusion_unit_pg_changelog").await;
    let s = id_v_schema();
    let mut target = PostgresTarget::new(&url, "public.events").unwrap();
    assert_eq!(
        target
            .open(&layout(&s, SinkMode::Changelog, &[]))
            .await
            .unwrap(),
        None
    );
    target
        .commit(&commit(1, id_v(&[1, 2], &[Some("a"), None]), None))
        .await
        .unwrap();
    target
        .commit(&commit(2, id_v(&[1], &[Some("tab\there")]), None))
        .await
        .unwrap();
    assert_eq!(
        lines(&url, "SELECT id, v FROM events ORDER BY id, v NULLS FIRST").await,
        vec!["1|a", "1|tab\there", "2|NULL"]
    );
    // Opened again, the target says where the sink resumes.
    let mut again = PostgresTarget::new(&url, "events").unwrap();
    let marker = again
        .open(&layout(&s, SinkMode::Changelog, &[]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((marker.number, marker.position.as_str()), (2, "p002"));
    // A commit the table already holds is refused, and nothing of it is written.
    let err = again
        .commit(&commit(2, id_v(&[9], &[Some("x")]), None))
        .await
        .unwrap_err();
    assert!(matches!(err, SinkError::Conflict(_)), "{err}");
    assert!(err.to_string().contains("another engine"), "{err}");
    assert_eq!(lines(&url, "SELECT count(*) FROM events").await, vec!["3"]);
}

#[tokio::test]
async fn upserts_delete_and_replace_by_key_and_new_columns_come_with_their_rows() {
    let url = database("cdcfusion_unit_pg_upsert").await;
    let s = id_v_schema();
    let mut target = PostgresTarget::new(&url, "public.t").unwrap();
    target
        .open(&layout(&s, SinkMode::Upsert, &["id"]))
        .await
        .unwrap();
    target
        .commit(&commit(
            1,
            id_v(&[1, 2, 3], &[Some("a"), Some("b"), Some("c")]),
            Some(keys(&[])),
        ))
        .await
        .unwrap();
    target
        .commit(&commit(2, id_v(&[2], &[Some("B")]), Some(keys(&[1, 7]))))
        .await
        .unwrap();
    assert_eq!(
        lines(&url, "SELECT id, v FROM t ORDER BY id").await,
        vec!["2|B", "3|c"]
    );
    // A column new at the source arrives in the commit of its first rows.
    let rows = id_v_n(4, "d", 40);
    target
        .commit(&commit(3, rows, Some(keys(&[]))))
        .await
        .unwrap();
    assert_eq!(
        lines(&url, "SELECT id, v, n FROM t ORDER BY id").await,
        vec!["2|B|NULL", "3|c|NULL", "4|d|40"]
    );
    assert_eq!(
        lines(&url, "SELECT commit, position FROM _cdcfusion_sinks").await,
        vec!["3|p003"]
    );
}

#[tokio::test]
async fn tables_that_cannot_take_the_rows_are_refused_with_the_fix() {
    let url = database("cdcfusion_unit_pg_refusals").await;
    client(&url)
        .await
        .batch_execute(
            "CREATE TABLE nokey (id bigint, v text); CREATE TABLE narrow (id integer PRIMARY KEY, v text)",
        )
        .await
        .unwrap();
    let s = id_v_schema();
    let err = PostgresTarget::new(&url, "nokey")
        .unwrap()
        .open(&layout(&s, SinkMode::Upsert, &["id"]))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("ADD PRIMARY KEY (\"id\")"),
        "{err}"
    );
    let err = PostgresTarget::new(&url, "narrow")
        .unwrap()
        .open(&layout(&s, SinkMode::Upsert, &["id"]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("column id"), "{err}");
    assert_eq!(err.sqlstate(), SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE);
    // A changelog into the key-less table is fine.
    PostgresTarget::new(&url, "nokey")
        .unwrap()
        .open(&layout(&s, SinkMode::Changelog, &[]))
        .await
        .unwrap();
    assert!(PostgresTarget::new("mysql://x/y", "t").is_err());
    assert!(PostgresTarget::new(&url, "a.b.c").is_err());
}

#[tokio::test]
async fn an_unreachable_server_is_a_failure_that_passes() {
    // Nothing listens on port 1.
    let s = schema(vec![Field::new("id", DataType::Int64, false)]);
    let mut target =
        PostgresTarget::new("postgresql://postgres:secret@127.0.0.1:1/db", "t").unwrap();
    let err = target
        .open(&layout(&s, SinkMode::Changelog, &[]))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(!err.to_string().contains("secret"), "{err}");
    assert!(!target.describe().contains("secret"));
}

#[tokio::test]
async fn source_types_arrive_as_the_same_values() {
    let url = database("cdcfusion_unit_pg_types").await;
    let s = schema(vec![
        Field::new("u", DataType::UInt64, true),
        Field::new("d", DataType::Decimal128(12, 3), true),
        Field::new("day", DataType::Date32, true),
        Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("t", DataType::Duration(TimeUnit::Microsecond), true),
        Field::new("b", DataType::Binary, true),
    ]);
    let rows = RecordBatch::try_new(
        Arc::clone(&s),
        vec![
            Arc::new(UInt64Array::from(vec![Some(u64::MAX), None])),
            Arc::new(
                Decimal128Array::from(vec![Some(-123_456_789), None])
                    .with_precision_and_scale(12, 3)
                    .unwrap(),
            ),
            Arc::new(Date32Array::from(vec![Some(19_000), None])),
            Arc::new(TimestampMicrosecondArray::from(vec![
                Some(1_700_000_000_123_456),
                None,
            ])),
            Arc::new(
                TimestampMicrosecondArray::from(vec![Some(1_700_000_000_000_001), None])
                    .with_timezone("UTC"),
            ),
            Arc::new(DurationMicrosecondArray::from(vec![
                Some(-(838 * 3600 + 59 * 60 + 59) * 1_000_000),
                None,
            ])),
            Arc::new(BinaryArray::from(vec![Some(&[0u8, 9, 255][..]), None])),
        ],
    )
    .unwrap();
    let mut target = PostgresTarget::new(&url, "typed").unwrap();
    target
        .open(&layout(&s, SinkMode::Changelog, &[]))
        .await
        .unwrap();
    target.commit(&commit(1, rows, None)).await.unwrap();
    assert_eq!(
        lines(
            &url,
            "SET TIME ZONE 'UTC'; SELECT u, d, day, at, ts, t, b FROM typed ORDER BY u NULLS LAST"
        )
        .await,
        vec![
            "18446744073709551615|-123456.789|2022-01-08|2023-11-14 22:13:20.123456|2023-11-14 22:13:20.000001+00|-838:59:59|\\x0009ff",
            "NULL|NULL|NULL|NULL|NULL|NULL|NULL",
        ]
    );
}
