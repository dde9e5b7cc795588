//! Every column type decodes to the same Arrow value from the binlog and from `SELECT`.
//!
//! A table holding every MySQL type gets rows with edge values (NULLs, minimums and maximums,
//! DECIMAL(65,30), negative and >24h TIME, microseconds, zero dates, 4-byte UTF-8, latin1,
//! binary bytes, large BLOB/TEXT, ENUM/SET, BIT(64), JSON), written in a session whose time zone
//! is neither UTC nor the server's. The rows are then updated and deleted. Insert after-images
//! and update before-images must equal a `SELECT` taken after the insert; update after-images
//! and delete before-images must equal a `SELECT` taken after the update. The snapshot's own
//! row connection (`source::mysql_client`) must read every `SELECT` exactly as the driver does.
//! The kinds of the table of kinds (`change::kinds`) are held to the same, and to the server's
//! checksum, in [`KIND_COLUMNS`].

mod common;

use arrow::array::RecordBatch;
use arrow::compute::{concat_batches, sort_to_indices, take_record_batch};
use cdcfusion::change::position::StartPosition;
use cdcfusion::change::schema::{TableId, TableSchema};
use cdcfusion::change::{Op, SourceTransaction};
use std::time::Duration;

use cdcfusion::source::checksum::{chunk_checksum, row_checksum, ChunkSum};
use cdcfusion::source::connect::{ConnectOptions, SESSION_INIT};
use cdcfusion::source::mysql_client::{Opened, WireConnection};
use cdcfusion::source::schema::load_table_schema;
use cdcfusion::source::snapshot::columns::select_batches_wire;
use cdcfusion::source::snapshot::select_batches;
use common::*;
use mysql_async::prelude::Queryable;

const TABLE: &str = "CREATE TABLE types_p.all_types (
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d65 DECIMAL(65,30), d10 DECIMAL(10,2), d38 DECIMAL(38,10), d0 DECIMAL(5,0),
  f FLOAT, dbl DOUBLE,
  dt DATE, tm TIME, tm3 TIME(3), tm6 TIME(6), dtm DATETIME, dtm6 DATETIME(6),
  ts TIMESTAMP NULL DEFAULT NULL, ts6 TIMESTAMP(6) NULL DEFAULT NULL, yr YEAR,
  c CHAR(10), vc VARCHAR(300), tx TEXT, mtx MEDIUMTEXT, l1 VARCHAR(20) CHARACTER SET latin1,
  bn BINARY(4), vb VARBINARY(300), bl BLOB, lbl LONGBLOB,
  e ENUM('small','medium','large'), st SET('red','green','blue'),
  b1 BIT(1), b13 BIT(13), b64 BIT(64),
  j JSON
)";

fn rows() -> Vec<String> {
    let big_text = "ab😀cd".repeat(3000);
    let big_blob: String = (0..150_000u32)
        .map(|i| format!("{:02x}", (i * 7 + 3) % 256))
        .collect();
    vec![
        // 1: NULL everywhere.
        "(1, NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL, NULL,NULL,NULL,NULL, NULL,NULL,
          NULL,NULL,NULL,NULL,NULL,NULL, NULL,NULL,NULL, NULL,NULL,NULL,NULL,NULL, NULL,NULL,NULL,NULL,
          NULL,NULL, NULL,NULL,NULL, NULL)".to_string(),
        // 2: minimums.
        "(2, -128,0,-32768,0,-8388608,0,-2147483648,0,-9223372036854775808,0,
          '-99999999999999999999999999999999999.999999999999999999999999999999', -99999999.99,
          '-9999999999999999999999999999.9999999999', -99999,
          -3.40282e38, -1.7976931348623157e308,
          '1000-01-01', '-838:59:59', '-838:59:59.000', '-838:59:59.000000',
          '1000-01-01 00:00:00', '1000-01-01 00:00:00.000000',
          '1970-01-01 00:00:01', '1970-01-01 00:00:01.000001', 1901,
          '', '', '', '', '', x'00', x'', x'', x'', 'small', '', b'0', b'0', b'0', '[]')".to_string(),
        // 3: maximums and wide values.
        format!("(3, 127,255,32767,65535,8388607,16777215,2147483647,4294967295,
          9223372036854775807,18446744073709551615,
          '99999999999999999999999999999999999.999999999999999999999999999999', 99999999.99,
          '9999999999999999999999999999.9999999999', 99999,
          3.40282e38, 1.7976931348623157e308,
          '9999-12-31', '838:59:59', '838:59:59.999', '838:59:59.000000',
          '9999-12-31 23:59:59', '9999-12-31 23:59:59.999999',
          '2038-01-18 20:00:00', '2038-01-18 20:00:00.999999', 2155,
          'abcdefghij', '{vc}', '{tx}', '{big_text}', 'café € ÿ',
          x'01020304', x'{vb}', x'{big_blob}', x'{big_blob}{big_blob}',
          'large', 'red,green,blue', b'1', b'1111111111111', b'{ones}',
          '{{\"a\": [1, 2.5, \"x\", null, true], \"b\": {{\"c\": -3}}, \"d\": \"ü😀\"}}')",
            vc = "😀 emoji ✓ ünïcödé ".repeat(12),
            tx = "t".repeat(60_000),
            vb = (0..=255u32).map(|i| format!("{i:02x}")).collect::<String>(),
            ones = "1".repeat(64),
        ),
        // 4: zero and partly zero dates, the zero year, padding and trailing spaces.
        "(4, 0,0,0,0,0,0,0,0,0,0, 0,0,0,0, 0,0,
          '0000-00-00', '00:00:00', '00:00:00.000', '00:00:00.000000',
          '0000-00-00 00:00:00', '2020-00-15 10:00:00.000000',
          '0000-00-00 00:00:00', '0000-00-00 00:00:00', 0000,
          'pad  ', 'trail  ', ' lead', '', 'x', x'6162', x'00', x'0000', x'00ff00',
          'medium', 'green', b'0', b'1000000000000', b'1', 'null')".to_string(),
        // 5: fractions, tiny decimals, inexact floats, JSON scalars.
        "(5, -1,1,-1,1,-1,1,-1,1,-1,1,
          '-0.000000000000000000000000000001', -0.01, '0.0000000001', -1,
          1.1, 0.1,
          '2024-02-29', '-12:34:56', '-00:00:00.500', '100:00:00.000001',
          '2024-02-29 12:34:56', '2024-02-29 12:34:56.000001',
          '2024-07-01 00:00:00', '2024-07-01 00:00:00.123456', 2024,
          'x', 'y', 'z', 'w', 'v', x'ff', x'ff', x'ff', x'ff',
          'small', 'red,blue', b'1', b'101', b'1010101010101010101010101010101010101010101010101010101010101010',
          '[1, \"two\", 3.5, {\"k\": []}]')".to_string(),
    ]
}

fn sorted(batches: &[RecordBatch], schema: &TableSchema) -> RecordBatch {
    let all = concat_batches(&schema.arrow, batches).unwrap();
    let idx = sort_to_indices(all.column(0), None, None).unwrap();
    take_record_batch(&all, &idx).unwrap()
}

/// The images of `op` for the table, concatenated and sorted by id.
fn images(txs: &[SourceTransaction], op: Op, after: bool, schema: &TableSchema) -> RecordBatch {
    let batches: Vec<RecordBatch> = txs
        .iter()
        .flat_map(|t| &t.changes)
        .filter(|c| c.op == op)
        .map(|c| {
            if after {
                c.after.clone()
            } else {
                c.before.clone()
            }
            .expect("image present")
        })
        .collect();
    sorted(&batches, schema)
}

fn assert_same(binlog: &RecordBatch, select: &RecordBatch, what: &str) {
    assert_eq!(binlog.schema(), select.schema(), "{what}: schemas differ");
    let (b, s) = (row_strings(binlog), row_strings(select));
    for (i, field) in select.schema().fields().iter().enumerate() {
        if binlog.column(i).as_ref() != select.column(i).as_ref() {
            let col = binlog.project(&[i]).unwrap();
            let sel = select.project(&[i]).unwrap();
            panic!(
                "{what}: column {} differs:\n binlog {:?}\n select {:?}",
                field.name(),
                row_strings(&col)
                    .iter()
                    .map(|v| v.chars().take(80).collect::<String>())
                    .collect::<Vec<_>>(),
                row_strings(&sel)
                    .iter()
                    .map(|v| v.chars().take(80).collect::<String>())
                    .collect::<Vec<_>>()
            );
        }
    }
    assert_eq!(b, s, "{what}");
}

#[tokio::test]
async fn binlog_and_select_decode_every_type_identically() {
    let server = server();
    let mut conn = root_conn(server).await;
    fresh_db(&mut conn, "types_p").await;
    conn.query_drop(TABLE).await.unwrap();
    // A writer session in yet another zone, permissive about zero dates.
    conn.query_drop("SET time_zone = '+05:45', sql_mode = ''")
        .await
        .unwrap();
    let mut reader = reader(server, "types_p", StartPosition::Current).await;

    let options = ConnectOptions::from_url(&server.cdc_url()).unwrap();
    let mut snap = options.connect().await.unwrap();
    // The snapshot's own row connection must read the same values as the driver.
    let mut wire = match WireConnection::open(&options, None, &SESSION_INIT).await {
        Ok(Opened::Ready(wire)) => *wire,
        other => panic!("expected a row connection, got {other:?}"),
    };
    let id = TableId::new("types_p", "all_types");
    let schema = load_table_schema(&mut snap, &id).await.unwrap().unwrap();
    let order = Some("1 = 1 ORDER BY id");

    conn.query_drop(format!(
        "INSERT INTO types_p.all_types VALUES {}",
        rows().join(",")
    ))
    .await
    .unwrap();
    let after_insert = sorted(
        &select_batches(&mut snap, &schema, order, vec![], 2)
            .await
            .unwrap(),
        &schema,
    );
    let after_insert_wire = sorted(
        &select_batches_wire(&mut wire, &schema, order, &[], 2)
            .await
            .unwrap(),
        &schema,
    );
    assert_eq!(
        after_insert_wire, after_insert,
        "the row connection read other values"
    );
    conn.query_drop(
        "UPDATE types_p.all_types SET ti = -ti, vc = CONCAT(COALESCE(vc, ''), '!'),
         dtm6 = dtm6 + INTERVAL 1 SECOND, ts6 = ts6 - INTERVAL 1 MICROSECOND,
         e = 'medium', j = JSON_ARRAY(id, 'u')",
    )
    .await
    .unwrap();
    let after_update = sorted(
        &select_batches(&mut snap, &schema, order, vec![], 2)
            .await
            .unwrap(),
        &schema,
    );
    let after_update_wire = sorted(
        &select_batches_wire(&mut wire, &schema, order, &[], 2)
            .await
            .unwrap(),
        &schema,
    );
    assert_eq!(
        after_update_wire, after_update,
        "the row connection read other values"
    );
    conn.query_drop("DELETE FROM types_p.all_types")
        .await
        .unwrap();

    let txs = read_until(&mut reader, |t| {
        t.changes.iter().any(|c| c.op == Op::Delete)
    })
    .await;
    assert_eq!(after_insert.num_rows(), 5);
    assert_same(
        &images(&txs, Op::Insert, true, &schema),
        &after_insert,
        "insert after-images",
    );
    assert_same(
        &images(&txs, Op::Update, false, &schema),
        &after_insert,
        "update before-images",
    );
    assert_same(
        &images(&txs, Op::Update, true, &schema),
        &after_update,
        "update after-images",
    );
    assert_same(
        &images(&txs, Op::Delete, false, &schema),
        &after_update,
        "delete before-images",
    );

    // Equal is not enough: both paths could be wrong the same way. Spot-check exact values.
    let rows = row_strings(&after_insert);
    let row = |id: usize| rows[id - 1].clone();
    let has = |id: usize, needle: &str| {
        assert!(
            row(id).contains(needle),
            "row {id} lacks {needle:?}: {}",
            row(id)
        )
    };
    has(3, "biu=18446744073709551615");
    has(2, "bi=-9223372036854775808");
    has(
        3,
        "d65=99999999999999999999999999999999999.999999999999999999999999999999",
    );
    has(5, "d65=-0.000000000000000000000000000001");
    has(3, "b64=18446744073709551615");
    has(3, "st=red,green,blue");
    has(5, "st=red,blue");
    has(4, "dt=NULL");
    has(4, "dtm=NULL");
    has(4, "dtm6=NULL");
    has(4, "ts=NULL");
    has(4, "yr=0");
    has(4, "c=pad ");
    has(3, "l1=café € ÿ");
    // TIMESTAMP is an instant: '2024-07-01 00:00:00.123456' at +05:45 is 18:15 UTC the day before.
    has(5, "ts6=2024-06-30T18:15:00.123456Z");
    // DATETIME is wall-clock time and is not shifted.
    has(5, "dtm6=2024-02-29T12:34:56.000001");
    // BINARY(4) is zero-padded as SELECT returns it.
    has(4, "bn=61620000");
    has(1, "j=NULL");
    let tm = after_insert.column(schema.column_index("tm").unwrap());
    let tm = tm
        .as_any()
        .downcast_ref::<arrow::array::DurationMicrosecondArray>()
        .unwrap();
    assert_eq!(tm.value(1), -((838 * 3600 + 59 * 60 + 59) * 1_000_000));
    let tm6 = after_insert.column(schema.column_index("tm6").unwrap());
    let tm6 = tm6
        .as_any()
        .downcast_ref::<arrow::array::DurationMicrosecondArray>()
        .unwrap();
    assert_eq!(tm6.value(4), 100 * 3_600_000_000 + 1);
    let tm3 = after_insert.column(schema.column_index("tm3").unwrap());
    let tm3 = tm3
        .as_any()
        .downcast_ref::<arrow::array::DurationMicrosecondArray>()
        .unwrap();
    assert_eq!(tm3.value(4), -500_000);
    let f = after_insert.column(schema.column_index("f").unwrap());
    let f = f
        .as_any()
        .downcast_ref::<arrow::array::Float32Array>()
        .unwrap();
    assert_eq!(f.value(4), 1.1f32);
}

/// A column of each kind of the table of kinds (`change::kinds`) that is not in `TABLE`, with
/// five values each (row `i` takes the `i`-th): a new kind is one entry here.
const KIND_COLUMNS: &[(&str, &str, [&str; 5])] = &[
    (
        "u",
        "UUID",
        [
            "NULL",
            "'00000000-0000-0000-0000-000000000000'",
            // A time-based UUID, which MariaDB stores with its groups swapped.
            "UUID()",
            "'6ccd780c-baba-1026-9564-5b8c656024db'",
            // Trailing zero bytes, which the binlog strips.
            "'ffffffff-ffff-4fff-bfff-ffffffffff00'",
        ],
    ),
    (
        "ip",
        "INET6",
        [
            "NULL",
            "'::'",
            "'::ffff:192.0.2.1'",
            "'2001:db8::1:0:0:1'",
            // Trailing zero bytes, which the binlog strips.
            "'fe80:1::'",
        ],
    ),
];

/// The kinds of the table of kinds read the same through the binlog, the driver's `SELECT` and
/// the row connection's, and the server's checksum of them is the engine's.
#[tokio::test]
async fn every_kind_of_the_table_reads_alike_on_both_paths_and_in_checksums() {
    let server = server();
    let mut conn = root_conn(server).await;
    fresh_db(&mut conn, "types_kt").await;
    let columns: Vec<String> = KIND_COLUMNS
        .iter()
        .map(|(name, ty, _)| format!("{name} {ty}"))
        .collect();
    conn.query_drop(format!(
        "CREATE TABLE types_kt.t (id INT PRIMARY KEY, {})",
        columns.join(", ")
    ))
    .await
    .unwrap();
    let mut reader = reader(server, "types_kt", StartPosition::Current).await;
    let rows: Vec<String> = (0..5)
        .map(|i| {
            let values: Vec<&str> = KIND_COLUMNS.iter().map(|(_, _, v)| v[i]).collect();
            format!("({}, {})", i + 1, values.join(", "))
        })
        .collect();
    conn.query_drop(format!("INSERT INTO types_kt.t VALUES {}", rows.join(",")))
        .await
        .unwrap();

    let options = ConnectOptions::from_url(&server.cdc_url()).unwrap();
    let mut snap = options.connect().await.unwrap();
    let mut wire = match WireConnection::open(&options, None, &SESSION_INIT).await {
        Ok(Opened::Ready(wire)) => *wire,
        other => panic!("expected a row connection, got {other:?}"),
    };
    let id = TableId::new("types_kt", "t");
    let schema = load_table_schema(&mut snap, &id).await.unwrap().unwrap();
    let order = Some("1 = 1 ORDER BY id");
    let selected = sorted(
        &select_batches(&mut snap, &schema, order, vec![], 2)
            .await
            .unwrap(),
        &schema,
    );
    let selected_wire = sorted(
        &select_batches_wire(&mut wire, &schema, order, &[], 2)
            .await
            .unwrap(),
        &schema,
    );
    assert_eq!(
        selected_wire, selected,
        "the row connection read other values"
    );
    // The text the server shows is the value.
    let texts = row_strings(&selected);
    for (name, _, _) in KIND_COLUMNS {
        let shown: Vec<(i32, Option<String>)> = conn
            .query(format!(
                "SELECT id, CAST({name} AS CHAR) FROM types_kt.t ORDER BY id"
            ))
            .await
            .unwrap();
        for (id, text) in shown {
            let expected = format!("{name}={}", text.as_deref().unwrap_or("NULL"));
            assert!(
                texts[id as usize - 1].contains(&expected),
                "{expected} in {texts:?}"
            );
        }
    }

    // Reconciliation's two sides: the server's checksum of its rows, the engine's of the
    // rows it read.
    let server_sum = chunk_checksum(&mut snap, &schema, None, vec![], Duration::from_secs(60))
        .await
        .unwrap();
    let mut engine_sum = ChunkSum::default();
    let mut text = String::new();
    for row in 0..selected.num_rows() {
        engine_sum.add(row_checksum(&schema, &selected, row, &mut text));
    }
    assert_eq!(engine_sum, server_sum, "checksums differ");

    conn.query_drop("DELETE FROM types_kt.t").await.unwrap();
    let txs = read_until(&mut reader, |t| {
        t.changes.iter().any(|c| c.op == Op::Delete)
    })
    .await;
    assert_same(
        &images(&txs, Op::Insert, true, &schema),
        &selected,
        "inserts",
    );
    assert_same(
        &images(&txs, Op::Delete, false, &schema),
        &selected,
        "deletes",
    );
}
