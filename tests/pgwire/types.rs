//! Every Arrow type we produce, in text and binary format, NULLs included, through
//! tokio-postgres (simple protocol for text, extended protocol for binary).

use tokio_postgres::types::Type;

use crate::fixture::*;

const SETUP: &str = "SET time_zone = '+00:00';
     CREATE TABLE {db}.t (
       id INT PRIMARY KEY, flag BOOL, ti TINYINT, si SMALLINT, mi MEDIUMINT, i INT, bi BIGINT,
       tu TINYINT UNSIGNED, su SMALLINT UNSIGNED, iu INT UNSIGNED, bu BIGINT UNSIGNED,
       f FLOAT, d DOUBLE, dec2 DECIMAL(12,2), dec65 DECIMAL(65,30),
       s VARCHAR(20), txt TEXT, bin VARBINARY(8), dt DATE, tm TIME(6), dtm DATETIME(6),
       ts TIMESTAMP(6) NULL, j JSON, e ENUM('a','b'), y YEAR, bits BIT(8));
     INSERT INTO {db}.t VALUES (1, TRUE, -128, -32768, -8388608, -2147483648, -9223372036854775808,
       255, 65535, 4294967295, 18446744073709551615, 1.5, -2.25, -1234567890.12,
       '12345678901234567890123456789012345.123456789012345678901234567890',
       'héllo', 'a\\tb', 0x00FF10, '2024-02-29', '-838:59:59.000001', '2024-02-29 23:59:59.123456',
       '2024-02-29 12:00:00.5', '{\"k\": [1, 2]}', 'b', 2024, 0xA5);
     INSERT INTO {db}.t (id) VALUES (2);";

/// Decodes a binary `numeric` into its text (test-side, independent of the server's code).
fn numeric_text(raw: &[u8]) -> String {
    let word = |i: usize| i16::from_be_bytes([raw[2 * i], raw[2 * i + 1]]);
    let (count, weight, sign, dscale) = (
        word(0) as usize,
        i32::from(word(1)),
        word(2) as u16,
        word(3) as usize,
    );
    // The base-10000 digit at position `pos` (0 = units, -1 = first fraction group).
    let digit = |pos: i32| -> i16 {
        let index = weight - pos;
        if index >= 0 && (index as usize) < count {
            word(4 + index as usize)
        } else {
            0
        }
    };
    let mut int = String::new();
    for pos in (0..=weight.max(0)).rev() {
        let d = digit(pos);
        if int.is_empty() {
            if d != 0 || pos == 0 {
                int = d.to_string();
            }
        } else {
            int.push_str(&format!("{d:04}"));
        }
    }
    let mut frac = String::new();
    for pos in 1..=dscale.div_ceil(4) as i32 {
        frac.push_str(&format!("{:04}", digit(-pos)));
    }
    frac.truncate(dscale);
    let sign = if sign == 0x4000 { "-" } else { "" };
    if dscale > 0 {
        format!("{sign}{int}.{frac}")
    } else {
        format!("{sign}{int}")
    }
}

#[tokio::test]
async fn every_type_in_text_format() {
    let f = Fixture::start("pg_types_text", "tt", SETUP, settings()).await;
    let client = f.client("tt").await;
    let rows = client
        .simple_query("SELECT * FROM pg_types_text.t ORDER BY id")
        .await
        .unwrap();
    let rows: Vec<&tokio_postgres::SimpleQueryRow> = rows
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(rows.len(), 2);
    let expected = [
        ("id", "1"),
        ("flag", "1"),
        ("ti", "-128"),
        ("si", "-32768"),
        ("mi", "-8388608"),
        ("i", "-2147483648"),
        ("bi", "-9223372036854775808"),
        ("tu", "255"),
        ("su", "65535"),
        ("iu", "4294967295"),
        ("bu", "18446744073709551615"),
        ("f", "1.5"),
        ("d", "-2.25"),
        ("dec2", "-1234567890.12"),
        (
            "dec65",
            "12345678901234567890123456789012345.123456789012345678901234567890",
        ),
        ("s", "héllo"),
        ("txt", "a\tb"),
        ("bin", "\\x00ff10"),
        ("dt", "2024-02-29"),
        ("dtm", "2024-02-29 23:59:59.123456"),
        ("j", "{\"k\": [1, 2]}"),
        ("e", "b"),
        ("y", "2024"),
        ("bits", "165"),
    ];
    for (column, value) in expected {
        assert_eq!(rows[0].get(column), Some(value), "column {column}");
    }
    // TIME beyond a day and TIMESTAMP as an instant: check the parts that do not depend on
    // the interval and zone styles.
    let tm = rows[0].get("tm").unwrap();
    assert!(
        tm.contains("838:59:59.000001") && tm.starts_with('-'),
        "{tm}"
    );
    let ts = rows[0].get("ts").unwrap();
    assert_eq!(ts, "2024-02-29 12:00:00.5+00");
    // In the session's time zone, offset minutes included, as PostgreSQL shows it.
    client
        .simple_query("SET TimeZone = 'Asia/Kathmandu'")
        .await
        .unwrap();
    let shown = client
        .simple_query("SELECT ts FROM pg_types_text.t WHERE id = 1")
        .await
        .unwrap();
    let shown = shown.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(shown.as_deref(), Some("2024-02-29 17:45:00.5+05:45"));
    let error = client
        .simple_query("SET TimeZone = 'Mars/Olympus'")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&error), "22023", "{error}");
    // The NULL row: every column but the key is NULL.
    for (column, _) in expected.iter().skip(1) {
        assert_eq!(
            rows[1].get(*column),
            None,
            "column {column} of the NULL row"
        );
    }
}

#[tokio::test]
async fn every_type_in_binary_format() {
    let f = Fixture::start("pg_types_bin", "tb", SETUP, settings()).await;
    let client = f.client("tb").await;
    // Extended protocol with a parameter: tokio-postgres asks for binary results.
    let statement = client
        .prepare("SELECT * FROM pg_types_bin.t WHERE id = $1")
        .await
        .unwrap();
    let row = client.query_one(&statement, &[&1i32]).await.unwrap();
    let ty = |name: &str| {
        row.columns()
            .iter()
            .find(|c| c.name() == name)
            .unwrap()
            .type_()
            .clone()
    };
    assert_eq!(ty("flag"), Type::INT2);
    assert_eq!(ty("bu"), Type::NUMERIC);
    assert_eq!(ty("dec65"), Type::NUMERIC);
    assert_eq!(ty("j"), Type::JSON);
    assert_eq!(ty("s"), Type::VARCHAR);
    assert_eq!(ty("txt"), Type::TEXT);
    assert_eq!(ty("ts"), Type::TIMESTAMPTZ);
    assert_eq!(ty("dtm"), Type::TIMESTAMP);
    assert_eq!(ty("tm"), Type::INTERVAL);
    assert_eq!(row.get::<_, i16>("ti"), -128);
    assert_eq!(row.get::<_, i16>("si"), -32768);
    assert_eq!(row.get::<_, i32>("mi"), -8388608);
    assert_eq!(row.get::<_, i32>("i"), i32::MIN);
    assert_eq!(row.get::<_, i64>("bi"), i64::MIN);
    assert_eq!(row.get::<_, i16>("tu"), 255);
    assert_eq!(row.get::<_, i32>("su"), 65535);
    assert_eq!(row.get::<_, i64>("iu"), 4294967295);
    assert_eq!(row.get::<_, f32>("f"), 1.5);
    assert_eq!(row.get::<_, f64>("d"), -2.25);
    assert_eq!(row.get::<_, &str>("s"), "héllo");
    assert_eq!(row.get::<_, Vec<u8>>("bin"), vec![0x00, 0xff, 0x10]);
    assert_eq!(
        numeric_text(&row.get::<_, Raw>("bu").0),
        "18446744073709551615"
    );
    assert_eq!(numeric_text(&row.get::<_, Raw>("dec2").0), "-1234567890.12");
    assert_eq!(
        numeric_text(&row.get::<_, Raw>("dec65").0),
        "12345678901234567890123456789012345.123456789012345678901234567890"
    );
    // DATE: days since 2000-01-01; TIMESTAMP: microseconds since 2000-01-01 00:00.
    let days = i32::from_be_bytes(row.get::<_, Raw>("dt").0.try_into().unwrap());
    assert_eq!(days, 8825);
    let micros = i64::from_be_bytes(row.get::<_, Raw>("dtm").0.try_into().unwrap());
    assert_eq!(micros, (8825 * 86_400 + 86_399) * 1_000_000 + 123_456);
    let instant = i64::from_be_bytes(row.get::<_, Raw>("ts").0.try_into().unwrap());
    assert_eq!(instant, (8825 * 86_400 + 12 * 3600) * 1_000_000 + 500_000);
    // INTERVAL: microseconds, days, months; -838:59:59.000001 as time.
    let interval = row.get::<_, Raw>("tm").0;
    let total = i64::from_be_bytes(interval[..8].try_into().unwrap())
        + i64::from(i32::from_be_bytes(interval[8..12].try_into().unwrap())) * 86_400_000_000;
    assert_eq!(total, -(838 * 3600 + 59 * 60 + 59) * 1_000_000 - 1);
    // JSON binary is its text.
    assert_eq!(
        String::from_utf8(row.get::<_, Raw>("j").0).unwrap(),
        "{\"k\": [1, 2]}"
    );
    // NULLs in binary.
    let nulls = client.query_one(&statement, &[&2i32]).await.unwrap();
    for i in 1..nulls.len() {
        assert!(
            nulls.get::<_, Option<Raw>>(i).is_none(),
            "column {} is not NULL",
            nulls.columns()[i].name()
        );
    }
    // Booleans, lists as arrays, structs as composites, and the changelog's before image.
    let row = client
        .query_one(
            "SELECT true AS yes, CAST(NULL AS BOOLEAN) AS unknown, make_array(1, 2, 3) AS list, \
             make_array(CAST(NULL AS BIGINT), 5) AS with_null",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>("yes"));
    assert_eq!(row.get::<_, Option<bool>>("unknown"), None);
    assert_eq!(row.get::<_, Vec<i64>>("list"), vec![1, 2, 3]);
    assert_eq!(
        row.get::<_, Vec<Option<i64>>>("with_null"),
        vec![None, Some(5)]
    );
    let text = client
        .simple_query("SELECT make_array(1, 2) AS l, named_struct('a', 1, 'b', 'x') AS s")
        .await
        .unwrap();
    let tokio_postgres::SimpleQueryMessage::Row(row) = &text[1] else {
        panic!("{text:?}")
    };
    assert_eq!(row.get("l"), Some("{1,2}"));
    assert_eq!(row.get("s"), Some("(1,x)"));
}
