//! Column definitions through `ADD COLUMN`: kinds, nullability and the values of added
//! columns.

use crate::change::kinds::SimpleKind;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, Date32Array, Decimal128Array, DurationMicrosecondArray,
    Float64Array, Int16Array, Int32Array, Int64Array, StringArray, TimestampMicrosecondArray,
    UInt64Array, UInt8Array,
};

use super::tests::{added, declared, evolve, int, kind, orders, unfollowable, utf8};
use super::*;
use crate::change::schema::ColumnKind;

#[test]
fn integer_and_boolean_types() {
    assert_eq!(kind("a TINYINT(1)"), int(8, false));
    assert_eq!(kind("a BOOL"), int(8, false));
    assert_eq!(kind("a BOOLEAN"), int(8, false));
    assert_eq!(kind("a TINYINT UNSIGNED"), int(8, true));
    assert_eq!(kind("a SMALLINT(6)"), int(16, false));
    assert_eq!(kind("a MEDIUMINT UNSIGNED"), int(24, true));
    assert_eq!(kind("a INT(11)"), int(32, false));
    assert_eq!(kind("a INTEGER UNSIGNED"), int(32, true));
    assert_eq!(kind("a BIGINT(20) UNSIGNED"), int(64, true));
    // ZEROFILL implies UNSIGNED.
    assert_eq!(kind("a INT(5) ZEROFILL"), int(32, true));
    assert_eq!(kind("a INT UNSIGNED ZEROFILL"), int(32, true));
}

#[test]
fn fractional_types() {
    let dec = |precision, scale| ColumnKind::Decimal { precision, scale };
    assert_eq!(kind("a DECIMAL"), dec(10, 0));
    assert_eq!(kind("a DECIMAL(7)"), dec(7, 0));
    assert_eq!(kind("a NUMERIC(12,4)"), dec(12, 4));
    assert_eq!(kind("a DECIMAL(65,30)"), dec(65, 30));
    assert!(declared("a DECIMAL(66,0)").is_err());
    assert_eq!(kind("a FLOAT"), ColumnKind::Simple(SimpleKind::Float));
    assert_eq!(kind("a FLOAT(24)"), ColumnKind::Simple(SimpleKind::Float));
    assert_eq!(kind("a FLOAT(25)"), ColumnKind::Simple(SimpleKind::Double));
    assert_eq!(kind("a DOUBLE"), ColumnKind::Simple(SimpleKind::Double));
    assert_eq!(kind("a REAL"), ColumnKind::Simple(SimpleKind::Double));
    assert_eq!(
        kind("a DOUBLE PRECISION"),
        ColumnKind::Simple(SimpleKind::Double)
    );
}

#[test]
fn temporal_types() {
    assert_eq!(kind("a DATE"), ColumnKind::Simple(SimpleKind::Date));
    assert_eq!(kind("a TIME(3)"), ColumnKind::Time { fsp: 3 });
    assert_eq!(kind("a DATETIME"), ColumnKind::DateTime { fsp: 0 });
    assert_eq!(kind("a DATETIME(6)"), ColumnKind::DateTime { fsp: 6 });
    assert_eq!(kind("a TIMESTAMP(2)"), ColumnKind::Timestamp { fsp: 2 });
    assert_eq!(kind("a YEAR"), ColumnKind::Simple(SimpleKind::Year));
    assert!(declared("a DATETIME(7) NULL").is_err());
}

#[test]
fn text_types_and_character_sets() {
    let latin1 = |length| ColumnKind::Text {
        charset: Charset::Latin1,
        length,
    };
    // Without a character set of their own, columns take the table's (latin1 here).
    assert_eq!(kind("a VARCHAR(10)"), latin1(Some(10)));
    assert_eq!(kind("a CHAR(3)"), latin1(Some(3)));
    assert_eq!(kind("a CHAR"), latin1(Some(1)));
    assert_eq!(kind("a TEXT"), latin1(None));
    assert_eq!(kind("a LONGTEXT"), latin1(None));
    assert_eq!(
        kind("a VARCHAR(10) CHARACTER SET utf8mb4"),
        ColumnKind::Text {
            charset: Charset::Utf8,
            length: Some(10)
        }
    );
    assert_eq!(
        kind("a NVARCHAR(7)"),
        ColumnKind::Text {
            charset: Charset::Utf8,
            length: Some(7)
        }
    );
    assert_eq!(kind("a TEXT CHARSET utf8mb4"), utf8());
    assert_eq!(kind("a MEDIUMTEXT COLLATE utf8mb4_0900_ai_ci"), utf8());
    assert_eq!(kind("a TINYTEXT CHARACTER SET ascii"), utf8());
    assert_eq!(
        kind("a CHAR(4) CHARACTER SET binary"),
        ColumnKind::Binary { pad_to: Some(4) }
    );
    assert_eq!(
        kind("a VARCHAR(4) CHARACTER SET binary"),
        ColumnKind::Binary { pad_to: None }
    );
    assert!(declared("a TEXT CHARACTER SET ucs2").is_err());
    let binary_table = ddl_effect("shop", "ALTER TABLE orders ADD a TEXT", &orders(), None);
    let DdlEffect::Evolve(e) = binary_table else {
        panic!("{binary_table:?}")
    };
    assert_eq!(e.after.columns[3].kind, ColumnKind::Binary { pad_to: None });
}

#[test]
fn binary_enum_set_bit_json_geometry_types() {
    assert_eq!(
        kind("a BINARY(16)"),
        ColumnKind::Binary { pad_to: Some(16) }
    );
    assert_eq!(kind("a BINARY"), ColumnKind::Binary { pad_to: Some(1) });
    for t in [
        "VARBINARY(10)",
        "BLOB",
        "TINYBLOB",
        "MEDIUMBLOB",
        "LONGBLOB",
    ] {
        assert_eq!(
            kind(&format!("a {t}")),
            ColumnKind::Binary { pad_to: None },
            "{t}"
        );
    }
    let labels: Arc<[String]> = vec!["x".to_string(), "it's".to_string()].into();
    assert_eq!(
        kind("a ENUM('x','it''s')"),
        ColumnKind::Enum {
            labels: Arc::clone(&labels)
        }
    );
    assert_eq!(kind("a SET('x','it''s')"), ColumnKind::Set { labels });
    // Trailing spaces of members are not part of them.
    assert_eq!(
        kind("a ENUM('p ', 'q')"),
        ColumnKind::Enum {
            labels: vec!["p".to_string(), "q".to_string()].into()
        }
    );
    assert_eq!(kind("a BIT"), ColumnKind::Bit { bits: 1 });
    assert_eq!(kind("a BIT(12)"), ColumnKind::Bit { bits: 12 });
    assert!(declared("a BIT(65)").is_err());
    assert_eq!(kind("a JSON"), ColumnKind::Simple(SimpleKind::Json));
    assert_eq!(kind("a GEOMETRY"), ColumnKind::Simple(SimpleKind::Geometry));
    assert_eq!(kind("a POINT"), ColumnKind::Simple(SimpleKind::Geometry));
    let why = declared("a INTERVAL").unwrap_err();
    assert!(why.contains("INTERVAL"), "{why}");
}

#[test]
fn nullability() {
    assert!(declared("a INT").unwrap().nullable);
    assert!(declared("a INT NULL").unwrap().nullable);
    assert!(!declared("a INT NOT NULL").unwrap().nullable);
    assert!(declared("a TIMESTAMP NULL").unwrap().nullable);
    assert!(declared("a TIMESTAMP NOT NULL DEFAULT '2020-01-01 00:00:00'").is_err());
    let why = declared("a TIMESTAMP").unwrap_err();
    assert!(why.contains("explicit_defaults_for_timestamp"), "{why}");
}

#[test]
fn literal_defaults_fill_existing_rows() {
    let value = |definition: &str| -> ArrayRef {
        let e = evolve(&format!("ALTER TABLE orders ADD COLUMN {definition}"));
        added(&e, 3)
    };
    let v = value("a INT NOT NULL DEFAULT -5");
    assert_eq!(
        v.as_any().downcast_ref::<Int32Array>().unwrap().value(0),
        -5
    );
    let v = value("a TINYINT UNSIGNED DEFAULT '7'");
    assert_eq!(v.as_any().downcast_ref::<UInt8Array>().unwrap().value(0), 7);
    let v = value("a BOOLEAN NOT NULL DEFAULT TRUE");
    assert_eq!(
        v.as_any()
            .downcast_ref::<arrow::array::Int8Array>()
            .unwrap()
            .value(0),
        1
    );
    let v = value("a DECIMAL(6,2) DEFAULT 12.5");
    assert_eq!(
        v.as_any()
            .downcast_ref::<Decimal128Array>()
            .unwrap()
            .value(0),
        1250
    );
    let v = value("a DOUBLE DEFAULT 0.25");
    assert_eq!(
        v.as_any().downcast_ref::<Float64Array>().unwrap().value(0),
        0.25
    );
    let v = value("a DATE DEFAULT '1970-01-02'");
    assert_eq!(
        v.as_any().downcast_ref::<Date32Array>().unwrap().value(0),
        1
    );
    let v = value("a DATETIME(3) DEFAULT '1970-01-01 00:00:01.5'");
    let ts = v
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .unwrap();
    assert_eq!(ts.value(0), 1_500_000);
    let v = value("a TIME DEFAULT '-01:00:00'");
    let t = v
        .as_any()
        .downcast_ref::<DurationMicrosecondArray>()
        .unwrap();
    assert_eq!(t.value(0), -3_600_000_000);
    let v = value("a YEAR DEFAULT 2024");
    assert_eq!(
        v.as_any().downcast_ref::<Int16Array>().unwrap().value(0),
        2024
    );
    let v = value("a CHAR(5) DEFAULT 'ab  '");
    assert_eq!(
        v.as_any().downcast_ref::<StringArray>().unwrap().value(0),
        "ab"
    );
    let v = value("a ENUM('S','M','L') NOT NULL DEFAULT 'm'");
    assert_eq!(
        v.as_any().downcast_ref::<StringArray>().unwrap().value(0),
        "M"
    );
    let v = value("a SET('x','y','z') DEFAULT 'z,x'");
    assert_eq!(
        v.as_any().downcast_ref::<StringArray>().unwrap().value(0),
        "x,z"
    );
    let v = value("a BINARY(3) DEFAULT X'41'");
    let b = v.as_any().downcast_ref::<BinaryArray>().unwrap();
    assert_eq!(b.value(0), b"A\0\0");
    let v = value("a BIT(8) DEFAULT b'101'");
    assert_eq!(
        v.as_any().downcast_ref::<UInt64Array>().unwrap().value(0),
        5
    );
    let v = value("a INT DEFAULT 0x10");
    assert_eq!(
        v.as_any().downcast_ref::<Int32Array>().unwrap().value(0),
        16
    );
    let v = value("a BIT(8) DEFAULT 5");
    assert_eq!(
        v.as_any().downcast_ref::<UInt64Array>().unwrap().value(0),
        5
    );
    let v = value("a VARCHAR(3) DEFAULT NULL");
    assert!(v.is_null(0));
    let v = value("a TIMESTAMP NULL DEFAULT NULL");
    assert!(v.is_null(0));
}

#[test]
fn implicit_defaults_of_not_null_columns() {
    let value = |definition: &str| -> ArrayRef {
        let e = evolve(&format!("ALTER TABLE orders ADD COLUMN {definition}"));
        added(&e, 3)
    };
    let v = value("a BIGINT NOT NULL");
    assert_eq!(v.as_any().downcast_ref::<Int64Array>().unwrap().value(0), 0);
    let v = value("a VARCHAR(5) NOT NULL");
    assert_eq!(
        v.as_any().downcast_ref::<StringArray>().unwrap().value(0),
        ""
    );
    let v = value("a ENUM('p','q') NOT NULL");
    assert_eq!(
        v.as_any().downcast_ref::<StringArray>().unwrap().value(0),
        "p"
    );
    let v = value("a SET('p','q') NOT NULL");
    assert_eq!(
        v.as_any().downcast_ref::<StringArray>().unwrap().value(0),
        ""
    );
    let v = value("a DECIMAL(4,1) NOT NULL");
    assert_eq!(
        v.as_any()
            .downcast_ref::<Decimal128Array>()
            .unwrap()
            .value(0),
        0
    );
    // The zero date, which our DATE values read as NULL.
    assert!(value("a DATE NOT NULL").is_null(0));
    assert!(value("a DATETIME NOT NULL").is_null(0));
    let v = value("a BINARY(2) NOT NULL");
    assert_eq!(
        v.as_any().downcast_ref::<BinaryArray>().unwrap().value(0),
        b"\0\0"
    );
    assert!(value("a INT").is_null(0));
    for bad in [
        "a JSON NOT NULL",
        "a TIMESTAMP NOT NULL",
        "a GEOMETRY NOT NULL",
    ] {
        let why = unfollowable(&format!("ALTER TABLE orders ADD {bad}"));
        assert!(why.contains("server-dependent"), "{bad}: {why}");
    }
}

#[test]
fn computed_and_rounded_defaults_are_unfollowable() {
    for bad in [
        "a DATETIME DEFAULT CURRENT_TIMESTAMP",
        "a DATETIME NOT NULL DEFAULT NOW()",
        "a VARCHAR(36) DEFAULT (UUID())",
        "a INT DEFAULT (1 + 1)",
        "a TIMESTAMP NULL DEFAULT '2020-01-01 00:00:00'",
        "a INT NOT NULL AUTO_INCREMENT UNIQUE",
        "a INT AS (amount * 2)",
        "a INT GENERATED ALWAYS AS (amount + 1) STORED",
        "a INT DEFAULT 1.5",
        "a DECIMAL(5,1) DEFAULT 1.25",
        "a ENUM('x') DEFAULT 'y'",
        "a TINYINT DEFAULT 300",
        "a DATETIME DEFAULT '2020-01-01 00:00:00.5'",
        "a INT NOT NULL DEFAULT NULL",
        "a BIT(2) DEFAULT 4",
    ] {
        unfollowable(&format!("ALTER TABLE orders ADD COLUMN {bad}"));
    }
}
