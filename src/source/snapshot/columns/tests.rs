//! The compiled operations against `SelectReader`'s general path, and their errors.

use super::*;
use crate::change::kinds::SimpleKind;
use crate::change::schema::{Charset, ColumnSpec, TableId};
use crate::source::mysql_client::row::testing::{encodings, packet, row};
use crate::source::snapshot::SelectReader;
use mysql_async::consts::{ColumnFlags, ColumnType as T};
use mysql_async::Value;

fn col(name: &str, kind: ColumnKind, nullable: bool) -> ColumnSpec {
    ColumnSpec {
        name: name.into(),
        kind,
        nullable,
    }
}

/// Reads `rows` (values per column of `types`) into batches of two rows through the
/// compiled operations and through the general path of `SelectReader`.
#[allow(clippy::type_complexity)]
fn read_both(
    schema: &TableSchema,
    types: &[(T, ColumnFlags)],
    rows: &[Vec<Value>],
) -> (
    SourceResult<Vec<RecordBatch>>,
    SourceResult<Vec<RecordBatch>>,
) {
    let encodings = encodings(types);
    let packets: Vec<Vec<u8>> = rows.iter().map(|r| packet(types, r)).collect();
    let compiled = || {
        let mut columns = BinaryColumns::compile(schema, &encodings, 2)?;
        let mut batches = Vec::new();
        for p in &packets {
            columns.push(&row(p, &encodings))?;
            if columns.len() >= 2 {
                batches.push(columns.finish()?);
            }
        }
        if !columns.is_empty() {
            batches.push(columns.finish()?);
        }
        Ok(batches)
    };
    let general = || {
        let mut reader = SelectReader::new(schema, 2);
        let mut batches = Vec::new();
        for p in &packets {
            reader.push_binary(&row(p, &encodings))?;
            if reader.len() >= 2 {
                batches.push(reader.finish()?);
            }
        }
        if !reader.is_empty() {
            batches.push(reader.finish()?);
        }
        Ok(batches)
    };
    (compiled(), general())
}

fn text(s: &str) -> Value {
    Value::Bytes(s.as_bytes().to_vec())
}

/// Every column type the binary protocol sends, paired with its kind (fused and general
/// operations alike), with edge values and NULLs: the same batches either way.
#[test]
fn compiled_columns_read_what_the_general_path_reads() {
    let none = ColumnFlags::empty();
    let unsigned = ColumnFlags::UNSIGNED_FLAG;
    let labels: Arc<[String]> = vec!["a".to_string(), "b".to_string()].into();
    let columns = [
        (
            T::MYSQL_TYPE_LONGLONG,
            none,
            ColumnKind::Int {
                bits: 64,
                unsigned: false,
            },
        ),
        (
            T::MYSQL_TYPE_TINY,
            none,
            ColumnKind::Int {
                bits: 8,
                unsigned: false,
            },
        ),
        (
            T::MYSQL_TYPE_TINY,
            unsigned,
            ColumnKind::Int {
                bits: 8,
                unsigned: true,
            },
        ),
        (
            T::MYSQL_TYPE_SHORT,
            none,
            ColumnKind::Int {
                bits: 16,
                unsigned: false,
            },
        ),
        (
            T::MYSQL_TYPE_SHORT,
            unsigned,
            ColumnKind::Int {
                bits: 16,
                unsigned: true,
            },
        ),
        (
            T::MYSQL_TYPE_INT24,
            none,
            ColumnKind::Int {
                bits: 24,
                unsigned: false,
            },
        ),
        (
            T::MYSQL_TYPE_INT24,
            unsigned,
            ColumnKind::Int {
                bits: 24,
                unsigned: true,
            },
        ),
        (
            T::MYSQL_TYPE_LONG,
            none,
            ColumnKind::Int {
                bits: 32,
                unsigned: false,
            },
        ),
        (
            T::MYSQL_TYPE_LONG,
            unsigned,
            ColumnKind::Int {
                bits: 32,
                unsigned: true,
            },
        ),
        (
            T::MYSQL_TYPE_LONGLONG,
            unsigned,
            ColumnKind::Int {
                bits: 64,
                unsigned: true,
            },
        ),
        (
            T::MYSQL_TYPE_YEAR,
            unsigned,
            ColumnKind::Simple(SimpleKind::Year),
        ),
        (
            T::MYSQL_TYPE_FLOAT,
            none,
            ColumnKind::Simple(SimpleKind::Float),
        ),
        (
            T::MYSQL_TYPE_DOUBLE,
            none,
            ColumnKind::Simple(SimpleKind::Double),
        ),
        (
            T::MYSQL_TYPE_NEWDECIMAL,
            none,
            ColumnKind::Decimal {
                precision: 12,
                scale: 2,
            },
        ),
        (
            T::MYSQL_TYPE_NEWDECIMAL,
            none,
            ColumnKind::Decimal {
                precision: 38,
                scale: 10,
            },
        ),
        (
            T::MYSQL_TYPE_NEWDECIMAL,
            none,
            ColumnKind::Decimal {
                precision: 65,
                scale: 30,
            },
        ),
        (
            T::MYSQL_TYPE_DATE,
            none,
            ColumnKind::Simple(SimpleKind::Date),
        ),
        (
            T::MYSQL_TYPE_DATETIME,
            none,
            ColumnKind::DateTime { fsp: 6 },
        ),
        (
            T::MYSQL_TYPE_TIMESTAMP,
            none,
            ColumnKind::Timestamp { fsp: 0 },
        ),
        (T::MYSQL_TYPE_TIME, none, ColumnKind::Time { fsp: 6 }),
        (
            T::MYSQL_TYPE_VAR_STRING,
            none,
            ColumnKind::Text {
                charset: Charset::Utf8,
                length: Some(8),
            },
        ),
        (
            T::MYSQL_TYPE_BLOB,
            none,
            ColumnKind::Binary { pad_to: None },
        ),
        (
            T::MYSQL_TYPE_STRING,
            none,
            ColumnKind::Binary { pad_to: Some(4) },
        ),
        (
            T::MYSQL_TYPE_STRING,
            none,
            ColumnKind::Enum {
                labels: Arc::clone(&labels),
            },
        ),
        (T::MYSQL_TYPE_STRING, none, ColumnKind::Set { labels }),
        (
            T::MYSQL_TYPE_BLOB,
            none,
            ColumnKind::Simple(SimpleKind::Json),
        ),
        (T::MYSQL_TYPE_BIT, unsigned, ColumnKind::Bit { bits: 10 }),
        (
            T::MYSQL_TYPE_GEOMETRY,
            none,
            ColumnKind::Simple(SimpleKind::Geometry),
        ),
        // An encoding the kind does not expect takes the general path, range checks and all.
        (
            T::MYSQL_TYPE_LONGLONG,
            none,
            ColumnKind::Int {
                bits: 32,
                unsigned: false,
            },
        ),
    ];
    let schema = TableSchema::new(
        TableId::new("db", "t"),
        columns
            .iter()
            .enumerate()
            .map(|(i, (_, _, kind))| col(&format!("c{i}"), kind.clone(), i > 0))
            .collect(),
        vec![0],
    );
    let types: Vec<(T, ColumnFlags)> = columns.iter().map(|(t, f, _)| (*t, *f)).collect();
    let row = |id: i64, values: Vec<Value>| [vec![Value::Int(id)], values].concat();
    let rows = vec![
        row(
            1,
            vec![
                Value::Int(-128),
                Value::UInt(255),
                Value::Int(-32768),
                Value::UInt(65535),
                Value::Int(-8388608),
                Value::UInt(16777215),
                Value::Int(i32::MIN as i64),
                Value::UInt(u32::MAX as u64),
                Value::UInt(u64::MAX),
                Value::UInt(2024),
                Value::Float(-1.5),
                Value::Double(f64::MAX),
                text("-9999999999.99"),
                text("1234567890123456789012345678.0123456789"),
                text("-12345678901234567890123456789012345.123456789012345678901234567890"),
                Value::Date(2024, 2, 29, 0, 0, 0, 0),
                Value::Date(9999, 12, 31, 23, 59, 59, 999_999),
                Value::Date(1970, 1, 1, 0, 0, 1, 0),
                Value::Time(true, 34, 22, 59, 59, 999_999),
                text("ünï ✓ 𝄞"),
                Value::Bytes(vec![0, 255, 1]),
                Value::Bytes(vec![7]),
                text("b"),
                text("a,b"),
                text("{\"k\": [1, 2]}"),
                Value::Bytes(vec![0x03, 0xff]),
                Value::Bytes(vec![1, 2, 3, 4, 5]),
                Value::Int(i32::MAX as i64),
            ],
        ),
        row(2, vec![Value::NULL; columns.len() - 1]),
        row(
            3,
            vec![
                Value::Int(127),
                Value::UInt(0),
                Value::Int(32767),
                Value::UInt(0),
                Value::Int(8388607),
                Value::UInt(0),
                Value::Int(i32::MAX as i64),
                Value::UInt(0),
                Value::UInt(0),
                Value::UInt(0),
                Value::Float(f32::MIN_POSITIVE),
                Value::Double(-0.0),
                text("0.5"),
                text("-0"),
                text("1"),
                Value::Date(0, 0, 0, 0, 0, 0, 0),
                Value::Date(2024, 2, 30, 1, 2, 3, 4),
                Value::Date(0, 0, 0, 0, 0, 0, 0),
                Value::Time(false, 0, 0, 0, 0, 0),
                text(""),
                Value::Bytes(vec![]),
                Value::Bytes(vec![1, 2, 3, 4]),
                text(""),
                text(""),
                text("null"),
                Value::Bytes(vec![0, 0]),
                Value::Bytes(vec![]),
                Value::Int(i32::MIN as i64),
            ],
        ),
    ];
    let (compiled, general) = read_both(&schema, &types, &rows);
    let (compiled, general) = (compiled.unwrap(), general.unwrap());
    assert_eq!(compiled.len(), 2);
    assert_eq!(compiled, general);
    // The fused operations did run: the pairings they cover are not general.
    let ops = BinaryColumns::compile(&schema, &encodings(&types), 2)
        .unwrap()
        .ops;
    let general: Vec<usize> = (0..ops.len())
        .filter(|&i| matches!(ops[i], Op::General { .. }))
        .collect();
    assert_eq!(
        general,
        vec![10, 15, 26, 28],
        "YEAR, DECIMAL(65), BIT, BIGINT as INT"
    );
}

/// Values that do not convert fail either way, naming the column and the row's key.
#[test]
fn bad_values_fail_with_the_row_named() {
    let types = [
        (T::MYSQL_TYPE_LONGLONG, ColumnFlags::empty()),
        (T::MYSQL_TYPE_NEWDECIMAL, ColumnFlags::empty()),
        (T::MYSQL_TYPE_VAR_STRING, ColumnFlags::empty()),
        (T::MYSQL_TYPE_LONG, ColumnFlags::empty()),
    ];
    let schema = TableSchema::new(
        TableId::new("db", "t"),
        vec![
            col(
                "id",
                ColumnKind::Int {
                    bits: 64,
                    unsigned: false,
                },
                false,
            ),
            col(
                "d",
                ColumnKind::Decimal {
                    precision: 4,
                    scale: 2,
                },
                true,
            ),
            col(
                "s",
                ColumnKind::Text {
                    charset: Charset::Utf8,
                    length: None,
                },
                true,
            ),
            col(
                "n",
                ColumnKind::Int {
                    bits: 32,
                    unsigned: false,
                },
                false,
            ),
        ],
        vec![0],
    );
    let good = |id: i64| vec![Value::Int(id), text("1.5"), text("x"), Value::Int(1)];
    let cases: [(Vec<Value>, &str, &str); 4] = [
        (
            vec![Value::Int(7), text("123.45"), text("x"), Value::Int(1)],
            "d",
            "digits",
        ),
        (
            vec![Value::Int(7), text("1.234"), text("x"), Value::Int(1)],
            "d",
            "fraction",
        ),
        (
            vec![Value::Int(7), text("1"), text("x"), Value::NULL],
            "n",
            "NULL",
        ),
        (
            vec![
                Value::Int(7),
                text("1"),
                Value::Bytes(vec![0xff, 0xfe]),
                Value::Int(1),
            ],
            "s",
            "UTF-8",
        ),
    ];
    for (bad, column, detail) in cases {
        let rows = vec![good(5), bad, good(9)];
        let (compiled, general) = read_both(&schema, &types, &rows);
        for (path, result) in [("compiled", compiled), ("general", general)] {
            match result {
                Err(SourceError::BadValue {
                    table,
                    column: c,
                    row,
                    detail: d,
                }) => {
                    assert_eq!(table, "db.t");
                    assert_eq!(c, column, "{path}");
                    assert_eq!(row, "the row with id=7", "{path}");
                    assert!(
                        d.to_lowercase().contains(&detail.to_lowercase()),
                        "{path}: {d}"
                    );
                }
                other => panic!("{path}: {other:?}"),
            }
        }
    }
    // A row shorter than its columns is an error too, not a panic.
    let encodings = encodings(&types);
    let mut short = packet(&types, &good(3));
    short.truncate(short.len() - 2);
    let mut columns = BinaryColumns::compile(&schema, &encodings, 2).unwrap();
    let err = columns.push(&row(&short, &encodings)).unwrap_err();
    assert!(
        matches!(err, SourceError::BadValue { ref column, .. } if column == "n"),
        "{err:?}"
    );
    // A result with other columns than the schema's is a race with a DDL.
    let fewer = &encodings[..3];
    assert!(matches!(
        BinaryColumns::compile(&schema, fewer, 2),
        Err(SourceError::Raced { .. })
    ));
}
