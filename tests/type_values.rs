//! Every value MySQL/MariaDB can store arrives, from the binlog and from `SELECT` alike, as the
//! documented Arrow value, in `NOT NULL` and nullable columns.
//!
//! Each case is one table `(id, nn <type> NOT NULL, n <type> NULL)` whose rows hold the case's
//! values in both columns, written under the `sql_mode` that allows them (permissive for zero
//! dates, `ALLOW_INVALID_DATES` for day overflows, strict otherwise), plus a row whose nullable
//! column is NULL. The insert after-images and delete before-images read from the binlog must
//! equal a `SELECT` of the table, and every value must be the one the user guide promises
//! (a zero date is NULL, `YEAR` 0 is 0, `BIT(64)` of all ones is `u64::MAX`...). Zero dates in a
//! `NOT NULL` column used to crash both paths: their Arrow field was not nullable.
//!
//! The engine-level tests take the same values through a whole capture (snapshot, binlog,
//! state, changelog, SQL), and check the definite errors: a zero date in a primary key, and a
//! type with no Arrow mapping.

mod common;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::{concat_batches, sort_to_indices, take_record_batch};
use arrow::datatypes::{DataType, DurationMicrosecondType, Float32Type, Float64Type};
use cdcfusion::capture::{CaptureOptions, SnapshotMode};
use cdcfusion::change::position::StartPosition;
use cdcfusion::change::schema::{Flavor, TableId, TableSchema};
use cdcfusion::change::{Op, SourceTransaction};
use cdcfusion::engine::Engine;
use cdcfusion::source::connect::{current_position, ConnectOptions};
use cdcfusion::source::error::SourceError;
use cdcfusion::source::schema::load_table_schema;
use cdcfusion::source::snapshot::select_batches;
use common::*;
use mysql_async::prelude::Queryable;

const DB: &str = "types_v";
const PERMISSIVE: &str = "";
const STRICT: &str = "STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO";

/// One column type, the mode its values are written under, and `(SQL literal, expected)`
/// pairs; the expected value is rendered by [`render`] (`NULL` for NULL).
struct Case {
    table: &'static str,
    decl: String,
    mode: &'static str,
    values: Vec<(String, String)>,
}

fn case(table: &'static str, decl: &str, mode: &'static str, values: &[(&str, &str)]) -> Case {
    Case {
        table,
        decl: decl.to_string(),
        mode,
        values: values
            .iter()
            .map(|(l, e)| (l.to_string(), e.to_string()))
            .collect(),
    }
}

/// `TIME` values are checked as signed microseconds.
fn time(h: i64, m: i64, s: i64, us: i64, negative: bool) -> String {
    let v = ((h * 60 + m) * 60 + s) * 1_000_000 + us;
    (if negative { -v } else { v }).to_string()
}

fn cases() -> Vec<Case> {
    let ones = "1".repeat(64);
    let set_labels: Vec<String> = (0..64).map(|i| format!("m{i}")).collect();
    let enum_labels: Vec<String> = (0..300).map(|i| format!("v{i}")).collect();
    let quoted = |labels: &[String]| {
        labels
            .iter()
            .map(|l| format!("'{l}'"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let max_time = time(838, 59, 59, 0, false);
    let min_time = time(838, 59, 59, 0, true);
    let nines = format!("{}.{}", "9".repeat(35), "9".repeat(30));
    // SRID 0, little-endian WKB: byte order 1, type (1 point, 2 line string), coordinates.
    let (srid0, le) = ("00000000", "01");
    let (zero, one, two) = ("0000000000000000", "000000000000f03f", "0000000000000040");
    let point = format!("{srid0}{le}01000000{one}{two}");
    let line = format!(
        "{srid0}{le}02000000{n}{zero}{zero}{one}{one}",
        n = "02000000"
    );
    let mut cases = vec![
        // Dates: zero and partly zero dates have no calendar meaning and are NULL.
        case(
            "date_zero",
            "DATE",
            PERMISSIVE,
            &[
                ("'0000-00-00'", "NULL"),
                ("'2024-00-00'", "NULL"),
                ("'2024-02-00'", "NULL"),
                ("'2024-00-15'", "NULL"),
                ("'0000-01-01'", "0000-01-01"),
                ("'1000-01-01'", "1000-01-01"),
                ("'9999-12-31'", "9999-12-31"),
                ("'2024-02-29'", "2024-02-29"),
            ],
        ),
        case(
            "date_invalid",
            "DATE",
            "ALLOW_INVALID_DATES",
            &[
                ("'2024-02-31'", "NULL"),
                ("'2023-02-29'", "NULL"),
                ("'2024-04-31'", "NULL"),
                ("'2024-02-29'", "2024-02-29"),
            ],
        ),
        case(
            "date_strict",
            "DATE",
            STRICT,
            &[
                ("'2024-02-29'", "2024-02-29"),
                ("'1000-01-01'", "1000-01-01"),
            ],
        ),
        case(
            "datetime_zero",
            "DATETIME",
            PERMISSIVE,
            &[
                ("'0000-00-00 00:00:00'", "NULL"),
                ("'2024-00-00 10:11:12'", "NULL"),
                ("'2024-02-00 00:00:00'", "NULL"),
                ("'1000-01-01 00:00:00'", "1000-01-01T00:00:00"),
                ("'9999-12-31 23:59:59'", "9999-12-31T23:59:59"),
            ],
        ),
        case(
            "datetime6_zero",
            "DATETIME(6)",
            PERMISSIVE,
            &[
                ("'0000-00-00 00:00:00.000000'", "NULL"),
                ("'2024-02-00 10:11:12.5'", "NULL"),
                ("'1000-01-01 00:00:00.000001'", "1000-01-01T00:00:00.000001"),
                ("'9999-12-31 23:59:59.999999'", "9999-12-31T23:59:59.999999"),
            ],
        ),
        case(
            "datetime_invalid",
            "DATETIME(3)",
            "ALLOW_INVALID_DATES",
            &[
                ("'2023-02-29 23:59:59.999'", "NULL"),
                ("'2023-02-28 23:59:59.999'", "2023-02-28T23:59:59.999"),
            ],
        ),
        case(
            "datetime_strict",
            "DATETIME(6)",
            STRICT,
            &[("'2024-02-29 12:34:56.000001'", "2024-02-29T12:34:56.000001")],
        ),
        // The writer's session is UTC, so TIMESTAMP literals are the instants themselves.
        case(
            "timestamp_zero",
            "TIMESTAMP",
            PERMISSIVE,
            &[
                ("'0000-00-00 00:00:00'", "NULL"),
                // Out of TIMESTAMP's range: stored as the zero timestamp.
                ("'2024-00-00 00:00:00'", "NULL"),
                ("'1970-01-01 00:00:01'", "1970-01-01T00:00:01Z"),
                ("'2038-01-19 03:14:07'", "2038-01-19T03:14:07Z"),
            ],
        ),
        case(
            "timestamp6_zero",
            "TIMESTAMP(6)",
            PERMISSIVE,
            &[
                ("'0000-00-00 00:00:00.000000'", "NULL"),
                (
                    "'1970-01-01 00:00:01.000001'",
                    "1970-01-01T00:00:01.000001Z",
                ),
                (
                    "'2038-01-19 03:14:07.999999'",
                    "2038-01-19T03:14:07.999999Z",
                ),
            ],
        ),
        case(
            "timestamp3_strict",
            "TIMESTAMP(3)",
            STRICT,
            &[("'2024-07-01 00:00:00.123'", "2024-07-01T00:00:00.123Z")],
        ),
        // TIME: signed, beyond 24 hours, fractions borrowing from negative values.
        case(
            "time0",
            "TIME",
            STRICT,
            &[
                ("'-838:59:59'", &min_time),
                ("'838:59:59'", &max_time),
                ("'00:00:00'", "0"),
                ("'-00:00:01'", "-1000000"),
            ],
        ),
        case(
            "time3",
            "TIME(3)",
            STRICT,
            &[
                ("'-00:00:00.500'", "-500000"),
                ("'838:59:59.999'", &time(838, 59, 59, 999_000, false)),
                ("'-838:59:59.999'", &time(838, 59, 59, 999_000, true)),
            ],
        ),
        case(
            "time6",
            "TIME(6)",
            STRICT,
            &[
                ("'-838:59:59.000000'", &min_time),
                ("'838:59:59.000000'", &max_time),
                ("'838:59:59.999999'", &time(838, 59, 59, 999_999, false)),
                ("'-838:59:59.999999'", &time(838, 59, 59, 999_999, true)),
                ("'-00:00:00.000001'", "-1"),
                ("'100:00:00.000001'", &time(100, 0, 0, 1, false)),
            ],
        ),
        case(
            "year4",
            "YEAR",
            STRICT,
            &[
                ("0", "0"),
                ("1901", "1901"),
                ("2155", "2155"),
                ("2024", "2024"),
            ],
        ),
        // Integers at their limits, signed, unsigned and zero-filled.
        case(
            "tinyint",
            "TINYINT",
            STRICT,
            &[("-128", "-128"), ("127", "127"), ("0", "0")],
        ),
        case(
            "tinyint_u",
            "TINYINT UNSIGNED",
            STRICT,
            &[("0", "0"), ("255", "255")],
        ),
        case(
            "smallint",
            "SMALLINT",
            STRICT,
            &[("-32768", "-32768"), ("32767", "32767")],
        ),
        case(
            "smallint_u",
            "SMALLINT UNSIGNED",
            STRICT,
            &[("65535", "65535")],
        ),
        case(
            "mediumint",
            "MEDIUMINT",
            STRICT,
            &[("-8388608", "-8388608"), ("8388607", "8388607")],
        ),
        case(
            "mediumint_u",
            "MEDIUMINT UNSIGNED",
            STRICT,
            &[("16777215", "16777215")],
        ),
        case(
            "int",
            "INT",
            STRICT,
            &[("-2147483648", "-2147483648"), ("2147483647", "2147483647")],
        ),
        case(
            "int_u",
            "INT UNSIGNED",
            STRICT,
            &[("4294967295", "4294967295")],
        ),
        case(
            "bigint",
            "BIGINT",
            STRICT,
            &[
                ("-9223372036854775808", "-9223372036854775808"),
                ("9223372036854775807", "9223372036854775807"),
            ],
        ),
        case(
            "bigint_u",
            "BIGINT UNSIGNED",
            STRICT,
            &[
                ("18446744073709551615", "18446744073709551615"),
                ("9223372036854775808", "9223372036854775808"),
            ],
        ),
        case(
            "int_zerofill",
            "INT(5) ZEROFILL",
            STRICT,
            &[("42", "42"), ("4294967295", "4294967295")],
        ),
        case(
            "bigint_zerofill",
            "BIGINT ZEROFILL",
            STRICT,
            &[("18446744073709551615", "18446744073709551615"), ("7", "7")],
        ),
        // BIT as an unsigned integer.
        case("bit1", "BIT(1)", STRICT, &[("b'0'", "0"), ("b'1'", "1")]),
        case(
            "bit64",
            "BIT(64)",
            STRICT,
            &[
                (&format!("b'{ones}'"), "18446744073709551615"),
                ("b'0'", "0"),
                (&format!("b'1{}'", "0".repeat(63)), "9223372036854775808"),
            ],
        ),
        // ENUM: an invalid value is stored as '' (index 0); large ENUMs take two bytes.
        case(
            "enum_small",
            "ENUM('a','b','c')",
            PERMISSIVE,
            &[("''", ""), ("'zzz'", ""), ("'c'", "c")],
        ),
        case(
            "enum_big",
            &format!("ENUM({})", quoted(&enum_labels)),
            STRICT,
            &[("'v299'", "v299"), ("'v0'", "v0")],
        ),
        case(
            "set64",
            &format!("SET({})", quoted(&set_labels)),
            STRICT,
            &[
                (
                    &format!("'{}'", set_labels.join(",")),
                    &set_labels.join(","),
                ),
                ("''", ""),
                ("'m63'", "m63"),
                ("'m63,m0'", "m0,m63"),
            ],
        ),
        // Text in every supported character set, and binary strings.
        case(
            "latin1",
            "VARCHAR(40) CHARACTER SET latin1",
            STRICT,
            &[
                (
                    "x'808182838485868788898A8B8C8D8E8F909192939495969798999A9B9C9D9E9F'",
                    "€\u{81}‚ƒ„…†‡ˆ‰Š‹Œ\u{8d}Ž\u{8f}\u{90}‘’“”•–—˜™š›œ\u{9d}žŸ",
                ),
                ("x'A0E9FF'", "\u{a0}éÿ"),
                ("''", ""),
            ],
        ),
        case(
            "latin1_bin",
            "VARCHAR(10) CHARACTER SET latin1 COLLATE latin1_bin",
            STRICT,
            &[("x'80E9'", "€é")],
        ),
        case(
            "utf8mb4",
            "VARCHAR(20) CHARACTER SET utf8mb4",
            STRICT,
            &[("'😀𝄞 a'", "😀𝄞 a"), ("''", "")],
        ),
        case(
            "utf8mb4_bin",
            "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            STRICT,
            &[("'Aa😀'", "Aa😀")],
        ),
        case(
            "utf8mb3",
            "VARCHAR(20) CHARACTER SET utf8mb3",
            STRICT,
            &[("'ü€✓'", "ü€✓")],
        ),
        case(
            "ascii",
            "VARCHAR(10) CHARACTER SET ascii",
            STRICT,
            &[("'a~ '", "a~ ")],
        ),
        case(
            "text_utf8",
            "TEXT CHARACTER SET utf8mb4",
            STRICT,
            &[("'𝄞'", "𝄞")],
        ),
        case(
            "varbinary",
            "VARBINARY(10)",
            STRICT,
            &[("x'00FF80'", "00ff80"), ("x''", "")],
        ),
        case(
            "binary4",
            "BINARY(4)",
            STRICT,
            &[("x'01'", "01000000"), ("x'FFFFFFFF'", "ffffffff")],
        ),
        // Floats at their limits (denormals too); MariaDB stores -0 as 0.
        case(
            "float",
            "FLOAT",
            STRICT,
            &[
                ("3.40282e38", "3.40282e38"),
                ("-3.40282e38", "-3.40282e38"),
                ("1.401298464324817e-45", "1e-45"),
                ("1.1754943508222875e-38", "1.1754944e-38"),
                ("-0e0", "0.0"),
            ],
        ),
        case(
            "double",
            "DOUBLE",
            STRICT,
            &[
                ("1.7976931348623157e308", "1.7976931348623157e308"),
                ("-1.7976931348623157e308", "-1.7976931348623157e308"),
                ("2.2250738585072014e-308", "2.2250738585072014e-308"),
                ("4.9406564584124654e-324", "5e-324"),
                ("-0e0", "0.0"),
            ],
        ),
        case(
            "decimal65",
            "DECIMAL(65,30)",
            STRICT,
            &[
                (&nines, &nines),
                (&format!("-{nines}"), &format!("-{nines}")),
                (
                    "'0.000000000000000000000000000001'",
                    "0.000000000000000000000000000001",
                ),
                ("0", &format!("0.{}", "0".repeat(30))),
            ],
        ),
        case(
            "decimal38",
            "DECIMAL(38,0)",
            STRICT,
            &[(&"9".repeat(38), &"9".repeat(38))],
        ),
        // Spatial values: MySQL's internal form, a 4-byte SRID and then WKB.
        case(
            "point",
            "POINT",
            STRICT,
            &[("ST_GeomFromText('POINT(1 2)')", &point)],
        ),
        case(
            "geometry",
            "GEOMETRY",
            STRICT,
            &[
                ("ST_GeomFromText('LINESTRING(0 0,1 1)')", &line),
                ("ST_GeomFromText('POINT(1 2)')", &point),
            ],
        ),
    ];
    cases.sort_by_key(|c| c.table);
    cases
}

/// One value as the expectations above spell it.
fn render(array: &dyn Array, row: usize) -> String {
    if array.is_null(row) {
        return "NULL".into();
    }
    match array.data_type() {
        DataType::Float32 => format!("{:?}", array.as_primitive::<Float32Type>().value(row)),
        DataType::Float64 => format!("{:?}", array.as_primitive::<Float64Type>().value(row)),
        DataType::Duration(_) => array
            .as_primitive::<DurationMicrosecondType>()
            .value(row)
            .to_string(),
        DataType::Binary => array
            .as_binary::<i32>()
            .value(row)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        _ => arrow::util::display::array_value_to_string(array, row).unwrap(),
    }
}

fn sorted(batches: &[RecordBatch], schema: &TableSchema) -> RecordBatch {
    let all = concat_batches(&schema.arrow, batches).unwrap();
    let idx = sort_to_indices(all.column(0), None, None).unwrap();
    take_record_batch(&all, &idx).unwrap()
}

/// The `op` images of `id` in `txs` (after images when `after`), sorted by `id`.
fn images(txs: &[SourceTransaction], id: &TableId, op: Op, after: bool) -> Vec<RecordBatch> {
    txs.iter()
        .flat_map(|t| &t.changes)
        .filter(|c| c.op == op && c.table.id == *id)
        .filter_map(|c| {
            if after {
                c.after.clone()
            } else {
                c.before.clone()
            }
        })
        .collect()
}

/// Compares `got` with `want` value by value (bit for bit: floats too), and with each case's
/// expectations; every difference is added to `failures`.
fn check(
    case: &Case,
    what: &str,
    got: &RecordBatch,
    want: &RecordBatch,
    failures: &mut Vec<String>,
) {
    let t = case.table;
    if got.num_rows() != want.num_rows() {
        failures.push(format!(
            "{t} {what}: {} rows, SELECT has {}",
            got.num_rows(),
            want.num_rows()
        ));
        return;
    }
    for col in 1..=2 {
        if got.column(col).to_data() != want.column(col).to_data() {
            let show = |b: &RecordBatch| {
                (0..b.num_rows())
                    .map(|r| render(b.column(col), r))
                    .collect::<Vec<_>>()
            };
            failures.push(format!(
                "{t} {what}: binlog {:?} but SELECT {:?}",
                show(got),
                show(want)
            ));
        }
    }
}

fn check_expected(case: &Case, batch: &RecordBatch, failures: &mut Vec<String>) {
    let t = case.table;
    let n = case.values.len();
    if batch.num_rows() != n + 1 {
        failures.push(format!(
            "{t}: {} rows, expected {}",
            batch.num_rows(),
            n + 1
        ));
        return;
    }
    for (row, (literal, expected)) in case.values.iter().enumerate() {
        for (col, name) in [(1, "nn"), (2, "n")] {
            let got = render(batch.column(col), row);
            if got != *expected {
                failures.push(format!(
                    "{t}.{name} = {literal}: got {got:?}, expected {expected:?}"
                ));
            }
        }
    }
    let (first, null) = (render(batch.column(1), n), render(batch.column(2), n));
    if first != case.values[0].1 || null != "NULL" {
        failures.push(format!(
            "{t}: last row is ({first}, {null}), expected ({}, NULL)",
            case.values[0].1
        ));
    }
}

#[tokio::test]
async fn every_stored_value_arrives_alike_from_binlog_and_select() {
    let server = server();
    let mut conn = root_conn(server).await;
    fresh_db(&mut conn, DB).await;
    conn.query_drop("SET time_zone = '+00:00', sql_mode = ''")
        .await
        .unwrap();
    let cases = cases();
    for c in &cases {
        conn.query_drop(format!(
            "CREATE TABLE {DB}.{t} (id INT PRIMARY KEY, nn {d} NOT NULL, n {d} NULL DEFAULT NULL)",
            t = c.table,
            d = c.decl
        ))
        .await
        .unwrap_or_else(|e| panic!("creating {}: {e}", c.table));
    }
    conn.query_drop(format!("CREATE TABLE {DB}.zz_done (id INT PRIMARY KEY)"))
        .await
        .unwrap();
    let mut reader = reader(server, DB, StartPosition::Current).await;
    for c in &cases {
        let mut rows: Vec<String> = c
            .values
            .iter()
            .enumerate()
            .map(|(i, (v, _))| format!("({}, {v}, {v})", i + 1))
            .collect();
        rows.push(format!("({}, {}, NULL)", c.values.len() + 1, c.values[0].0));
        conn.query_drop(format!("SET SESSION sql_mode = '{}'", c.mode))
            .await
            .unwrap();
        conn.query_drop(format!(
            "INSERT INTO {DB}.{} VALUES {}",
            c.table,
            rows.join(", ")
        ))
        .await
        .unwrap_or_else(|e| panic!("inserting into {} under '{}': {e}", c.table, c.mode));
    }

    let mut snap = ConnectOptions::from_url(&server.cdc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut selected = Vec::new();
    for c in &cases {
        let id = TableId::new(DB, c.table);
        let schema = load_table_schema(&mut snap, &id).await.unwrap().unwrap();
        let batches = select_batches(&mut snap, &schema, Some("1 = 1 ORDER BY id"), vec![], 3)
            .await
            .unwrap_or_else(|e| panic!("SELECT of {}: {e}", c.table));
        selected.push((id, sorted(&batches, &schema), schema));
    }
    for c in &cases {
        conn.query_drop(format!("DELETE FROM {DB}.{}", c.table))
            .await
            .unwrap();
    }
    conn.query_drop(format!("INSERT INTO {DB}.zz_done VALUES (1)"))
        .await
        .unwrap();
    let done = TableId::new(DB, "zz_done");
    let txs = read_until(&mut reader, |t| {
        t.changes.iter().any(|c| c.table.id == done)
    })
    .await;

    let mut failures = Vec::new();
    for (c, (id, select, schema)) in cases.iter().zip(&selected) {
        // Temporal fields are nullable whatever the column says; the others follow the column.
        let nn = schema.arrow.field(1);
        let always = schema.columns[1].kind.has_unrepresentable_values();
        let temporal = matches!(nn.data_type(), DataType::Date32 | DataType::Timestamp(..));
        if nn.is_nullable() != temporal || always != temporal {
            failures.push(format!(
                "{}: NOT NULL column's field nullable = {}",
                c.table,
                nn.is_nullable()
            ));
        }
        check_expected(c, select, &mut failures);
        let inserted = sorted(&images(&txs, id, Op::Insert, true), schema);
        check(c, "insert after-images", &inserted, select, &mut failures);
        let deleted = sorted(&images(&txs, id, Op::Delete, false), schema);
        check(c, "delete before-images", &deleted, select, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

async fn engine_with(db: &str, source: &str) -> (Engine, Result<(), String>) {
    let engine = Engine::new();
    let mut options = CaptureOptions::new(format!("{db}.*"), SnapshotMode::Initial);
    options.server_id = next_server_id();
    options.snapshot.window_server_id = next_server_id();
    engine
        .create_source(source, &server().cdc_url(), options)
        .unwrap();
    let ready = tokio::time::timeout(HANG_GUARD, engine.wait_ready(source))
        .await
        .unwrap();
    (engine, ready.map_err(|e| e.to_string()))
}

#[tokio::test]
async fn zero_dates_in_not_null_columns_flow_through_a_whole_capture() {
    let db = "types_e";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "SET sql_mode = '', time_zone = '+00:00';
         CREATE TABLE {db}.t (id INT PRIMARY KEY, d DATE NOT NULL, dt DATETIME(6) NOT NULL,
           ts TIMESTAMP NOT NULL DEFAULT '0000-00-00 00:00:00');
         INSERT INTO {db}.t VALUES (1, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00'),
           (2, '2024-02-29', '2024-02-00 01:02:03', '2024-07-01 00:00:00');"
    ))
    .await
    .unwrap();
    let (engine, ready) = engine_with(db, "te").await;
    ready.expect("the snapshot of zero dates in NOT NULL columns succeeds");
    conn.query_drop(format!(
        "INSERT INTO {db}.t VALUES (3, '2024-00-00', '0000-00-00 00:00:00', 0);
         UPDATE {db}.t SET d = '0000-00-00' WHERE id = 2;"
    ))
    .await
    .unwrap();
    let (target, _) = current_position(&mut conn, Flavor::MariaDb).await.unwrap();
    tokio::time::timeout(HANG_GUARD, engine.source("te").unwrap().wait_for(&target))
        .await
        .unwrap()
        .expect("the binlog of zero dates in NOT NULL columns is captured");
    assert_eq!(
        query(&engine, &format!("SELECT * FROM te.{db}.t ORDER BY id")).await,
        [
            "id=1 d=NULL dt=NULL ts=NULL",
            "id=2 d=NULL dt=NULL ts=2024-07-01T00:00:00Z",
            "id=3 d=NULL dt=NULL ts=NULL",
        ]
    );
    assert_eq!(
        query(&engine, &format!("SELECT _op, id, d, _before['d'] AS before FROM te.{db}.\"t$changelog\" WHERE id >= 2 ORDER BY _position")).await,
        [
            "_op=r id=2 d=2024-02-29 before=NULL",
            "_op=c id=3 d=NULL before=NULL",
            "_op=u id=2 d=NULL before=2024-02-29",
        ]
    );
}

#[tokio::test]
async fn a_zero_date_in_a_primary_key_stops_its_table_naming_the_column() {
    let db = "types_k";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "SET sql_mode = '';
         CREATE TABLE {db}.t (d DATE NOT NULL PRIMARY KEY, v INT);
         INSERT INTO {db}.t VALUES ('0000-00-00', 1), ('2024-00-00', 2), ('2024-01-01', 3);
         CREATE TABLE {db}.other (id INT PRIMARY KEY);
         INSERT INTO {db}.other VALUES (1);"
    ))
    .await
    .unwrap();
    let (engine, ready) = engine_with(db, "tk").await;
    ready.expect("distinct zero dates cannot share one key, but only their table stops");
    assert_eq!(
        query(
            &engine,
            "SELECT \"table\", state FROM cdc.tables ORDER BY \"table\""
        )
        .await,
        ["table=other state=capturing", "table=t state=stopped"]
    );
    let error = query(
        &engine,
        "SELECT error FROM cdc.tables WHERE \"table\" = 't'",
    )
    .await;
    assert!(
        error[0].contains("primary key column d of types_k.t"),
        "{error:?}"
    );
    assert_eq!(
        query(&engine, &format!("SELECT id FROM tk.{db}.other")).await,
        ["id=1"]
    );
}

#[tokio::test]
async fn types_without_an_arrow_mapping_are_refused_naming_the_column() {
    let db = "types_u";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, addr VARCHAR(10) CHARACTER SET sjis, n INT)"
    ))
    .await
    .unwrap();
    let mut snap = ConnectOptions::from_url(&server().cdc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let err = load_table_schema(&mut snap, &TableId::new(db, "t"))
        .await
        .unwrap_err();
    match &err {
        SourceError::UnsupportedType {
            table,
            column,
            detail,
        } => {
            assert_eq!((table.as_str(), column.as_str()), ("types_u.t", "addr"));
            assert!(detail.contains("sjis"), "{detail}");
        }
        other => panic!("expected an unsupported type, got {other}"),
    }
    let (_engine, ready) = engine_with(db, "tu").await;
    let err = ready.expect_err("capture refuses the table at start-up");
    assert!(err.contains("addr") && err.contains("types_u.t"), "{err}");
}

/// A MariaDB `UUID` primary key is a chunk key (the server compares the boundaries as UUIDs,
/// whose order is not their text's), and its rows stream after the hand-off: the current table
/// equals the server's table, key by key.
#[tokio::test]
async fn a_uuid_primary_key_is_snapshot_in_chunks_and_streamed() {
    let db = "types_uuid";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (u UUID PRIMARY KEY, n INT NOT NULL);
         INSERT INTO {db}.t SELECT UUID(), seq FROM {db}.seq_1_to_3000;
         INSERT INTO {db}.t VALUES ('ffffffff-ffff-4fff-bfff-ffffffffff00', 0);"
    ))
    .await
    .unwrap();
    let engine = Engine::new();
    let mut options = CaptureOptions::new(format!("{db}.*"), SnapshotMode::Initial);
    options.server_id = next_server_id();
    options.snapshot.window_server_id = next_server_id();
    options.snapshot.chunk_size = 250;
    engine
        .create_source("tuuid", &server().cdc_url(), options)
        .unwrap();
    tokio::time::timeout(HANG_GUARD, engine.wait_ready("tuuid"))
        .await
        .unwrap()
        .expect("a UUID chunk key is snapshot");
    let chunks = query(
        &engine,
        &format!("SELECT count(*) AS n FROM cdc.chunks WHERE source = 'tuuid' AND db = '{db}'"),
    )
    .await;
    assert_ne!(chunks, ["n=1"], "the snapshot read one chunk: {chunks:?}");
    conn.query_drop(format!(
        "UPDATE {db}.t SET n = n + 1 WHERE n % 7 = 0;
         DELETE FROM {db}.t WHERE n % 11 = 0;
         INSERT INTO {db}.t VALUES (UUID(), -1);"
    ))
    .await
    .unwrap();
    let (target, _) = current_position(&mut conn, Flavor::MariaDb).await.unwrap();
    tokio::time::timeout(
        HANG_GUARD,
        engine.source("tuuid").unwrap().wait_for(&target),
    )
    .await
    .unwrap()
    .expect("the changes are captured");
    let server_rows: Vec<(String, i32)> = conn
        .query(format!("SELECT CAST(u AS CHAR), n FROM {db}.t ORDER BY 1"))
        .await
        .unwrap();
    let expected: Vec<String> = server_rows
        .iter()
        .map(|(u, n)| format!("u={u} n={n}"))
        .collect();
    assert!(expected.len() > 2500, "{} rows", expected.len());
    assert_eq!(
        query(
            &engine,
            &format!("SELECT u, n FROM tuuid.{db}.t ORDER BY u")
        )
        .await,
        expected
    );
}
