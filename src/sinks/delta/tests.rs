//! The Delta target on a local directory, read back through the table's own log.

use std::sync::Arc;

use arrow::util::pretty::pretty_format_batches;

use super::*;
use crate::sinks::fixtures::{commit, id_v, id_v_n, id_v_schema, keys, layout};
use crate::sqlstate::{HasSqlState, SqlState};

/// The table at `dir` as a sorted text table.
async fn contents(dir: &std::path::Path, select: &str) -> String {
    let table = deltalake::open_table(url::Url::from_directory_path(dir).unwrap())
        .await
        .unwrap();
    let ctx = SessionContext::new();
    table.update_datafusion_session(&ctx.state()).unwrap();
    ctx.register_table("t", table.table_provider().await.unwrap())
        .unwrap();
    let batches = ctx.sql(select).await.unwrap().collect().await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

#[tokio::test]
async fn appends_carry_their_transaction_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().display().to_string();
    let s = id_v_schema();
    let mut target = DeltaTarget::new(&url).unwrap();
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
        .commit(&commit(2, id_v(&[3], &[Some("c")]), None))
        .await
        .unwrap();
    let mut again = DeltaTarget::new(&format!("file://{url}")).unwrap();
    let marker = again
        .open(&layout(&s, SinkMode::Changelog, &[]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((marker.number, marker.position.as_str()), (2, "p002"));
    // A column new at the source arrives with its rows.
    let rows = id_v_n(4, "d", 40);
    again.commit(&commit(3, rows, None)).await.unwrap();
    let text = contents(dir.path(), "SELECT id, v, n FROM t ORDER BY id").await;
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("| "))
            .collect::<Vec<_>>(),
        vec![
            "| id | v | n  |",
            "| 1  | a |    |",
            "| 2  |   |    |",
            "| 3  | c |    |",
            "| 4  | d | 40 |",
        ]
    );
    // Another sink's columns of another type are refused.
    let other = Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, true)]));
    let err = DeltaTarget::new(&url)
        .unwrap()
        .open(&layout(&other, SinkMode::Changelog, &[]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("column id"), "{err}");
}

#[tokio::test]
async fn upserts_merge_by_key_in_one_commit_each() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().display().to_string();
    let s = id_v_schema();
    let mut target = DeltaTarget::new(&url).unwrap();
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
        .commit(&commit(
            2,
            id_v(&[2, 5], &[Some("B"), None]),
            Some(keys(&[1, 9])),
        ))
        .await
        .unwrap();
    let text = contents(dir.path(), "SELECT id, v FROM t ORDER BY id").await;
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("| "))
            .collect::<Vec<_>>(),
        vec!["| id | v |", "| 2  | B |", "| 3  | c |", "| 5  |   |"]
    );
    let marker = DeltaTarget::new(&url)
        .unwrap()
        .open(&layout(&s, SinkMode::Upsert, &["id"]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(marker.number, 2);
}

/// The actions of the table's log entry `version`, one JSON line each.
fn log_entry(dir: &std::path::Path, version: u64) -> String {
    std::fs::read_to_string(dir.join(format!("_delta_log/{version:020}.json"))).unwrap()
}

#[tokio::test]
async fn an_upsert_adds_a_new_column_in_the_commit_of_its_first_rows() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().display().to_string();
    let s = id_v_schema();
    let mut target = DeltaTarget::new(&url).unwrap();
    target
        .open(&layout(&s, SinkMode::Upsert, &["id"]))
        .await
        .unwrap();
    target
        .commit(&commit(1, id_v(&[1, 2], &[Some("a"), Some("b")]), None))
        .await
        .unwrap();
    // Row 2 changes and row 7 arrives with the new column; row 1 is deleted.
    let rows = concat_batches(
        &id_v_n(2, "B", 20).schema(),
        &[id_v_n(2, "B", 20), id_v_n(7, "g", 70)],
    )
    .unwrap();
    target
        .commit(&commit(2, rows, Some(keys(&[1]))))
        .await
        .unwrap();
    let text = contents(dir.path(), "SELECT id, v, n FROM t ORDER BY id").await;
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("| "))
            .collect::<Vec<_>>(),
        vec!["| id | v | n  |", "| 2  | B | 20 |", "| 7  | g | 70 |"]
    );
    // Version 0 created the table, 1 and 2 are the sink's commits: the new column, the rows
    // and the sink's transaction are one atomic entry, and the delete flag is no column.
    let entry = log_entry(dir.path(), 2);
    for action in ["\"metaData\"", "\"add\"", "\"txn\""] {
        assert!(entry.contains(action), "{action} missing from {entry}");
    }
    let metadata = entry
        .lines()
        .find(|l| l.starts_with("{\"metaData\""))
        .unwrap();
    assert!(metadata.contains("\\\"name\\\":\\\"n\\\""), "{metadata}");
    assert!(!metadata.contains(DELETE_FLAG), "{metadata}");
    assert!(
        !dir.path()
            .join("_delta_log/00000000000000000003.json")
            .exists(),
        "no commit of its own for the column"
    );
}

#[tokio::test]
async fn bad_locations_are_refused() {
    assert!(DeltaTarget::new("postgresql://x/y").is_err());
    assert_eq!(
        DeltaTarget::new("http://x/y").unwrap_err().sqlstate(),
        SqlState::INVALID_PARAMETER_VALUE
    );
}
