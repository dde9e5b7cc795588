//! The Delta target on a local directory, read back through the table's own log.

use std::sync::Arc;

use arrow::array::{Int32Array, Int64Array, StringArray};
use arrow::util::pretty::pretty_format_batches;

use super::*;

fn layout(schema: &SchemaRef, mode: SinkMode, key: &[&str]) -> TargetLayout {
    TargetLayout {
        sink: "s".into(),
        schema: Arc::clone(schema),
        mode,
        key: key.iter().map(|k| k.to_string()).collect(),
    }
}

fn commit(number: u64, rows: RecordBatch, deletes: Option<RecordBatch>) -> Commit {
    Commit {
        marker: Committed {
            number,
            position: format!("p{number:03}"),
        },
        rows,
        deletes,
    }
}

fn id_v(schema: &SchemaRef, ids: &[i64], vs: &[Option<&str>]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::clone(schema),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(vs.to_vec())),
        ],
    )
    .unwrap()
}

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

fn schema2() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
    ]))
}

#[tokio::test]
async fn appends_carry_their_transaction_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().display().to_string();
    let s = schema2();
    let mut target = DeltaTarget::new(&url).unwrap();
    assert_eq!(
        target
            .open(&layout(&s, SinkMode::Changelog, &[]))
            .await
            .unwrap(),
        None
    );
    target
        .commit(&commit(1, id_v(&s, &[1, 2], &[Some("a"), None]), None))
        .await
        .unwrap();
    target
        .commit(&commit(2, id_v(&s, &[3], &[Some("c")]), None))
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
    let wider = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
        Field::new("n", DataType::Int32, true),
    ]));
    let rows = RecordBatch::try_new(
        Arc::clone(&wider),
        vec![
            Arc::new(Int64Array::from(vec![4])),
            Arc::new(StringArray::from(vec!["d"])),
            Arc::new(Int32Array::from(vec![40])),
        ],
    )
    .unwrap();
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
    let s = schema2();
    let keys = |ids: &[i64]| {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef],
        )
        .unwrap()
    };
    let mut target = DeltaTarget::new(&url).unwrap();
    target
        .open(&layout(&s, SinkMode::Upsert, &["id"]))
        .await
        .unwrap();
    target
        .commit(&commit(
            1,
            id_v(&s, &[1, 2, 3], &[Some("a"), Some("b"), Some("c")]),
            Some(keys(&[])),
        ))
        .await
        .unwrap();
    target
        .commit(&commit(
            2,
            id_v(&s, &[2, 5], &[Some("B"), None]),
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

#[tokio::test]
async fn bad_locations_are_refused() {
    assert!(DeltaTarget::new("postgresql://x/y").is_err());
    assert_eq!(
        DeltaTarget::new("http://x/y").unwrap_err().sqlstate(),
        "22023"
    );
}
