//! Statements and ALTER clauses: what each does to the captured `shop.orders`.

use crate::change::kinds::SimpleKind;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int32Array, StringArray};

use super::*;
use crate::change::schema::{ColumnKind, ColumnSpec};

pub(super) fn int(bits: u8, unsigned: bool) -> ColumnKind {
    ColumnKind::Int { bits, unsigned }
}

pub(super) fn utf8() -> ColumnKind {
    ColumnKind::Text {
        charset: Charset::Utf8,
        length: None,
    }
}

pub(super) fn col(name: &str, kind: ColumnKind, nullable: bool) -> ColumnSpec {
    ColumnSpec {
        name: name.into(),
        kind,
        nullable,
    }
}

/// `shop.orders (id BIGINT NOT NULL PRIMARY KEY, amount INT NULL, note VARCHAR(200) NULL)`.
pub(super) fn orders() -> TableSchema {
    TableSchema::new(
        TableId::new("shop", "orders"),
        vec![
            col("id", int(64, false), false),
            col("amount", int(32, false), true),
            col(
                "note",
                ColumnKind::Text {
                    charset: Charset::Utf8,
                    length: Some(200),
                },
                true,
            ),
        ],
        vec![0],
    )
}

pub(super) fn effect(statement: &str) -> DdlEffect {
    ddl_effect("shop", statement, &orders(), Some(Charset::Utf8))
}

pub(super) fn evolve(statement: &str) -> Evolution {
    match effect(statement) {
        DdlEffect::Evolve(e) => e,
        other => panic!("{statement}: {other:?}"),
    }
}

pub(super) fn unfollowable(statement: &str) -> String {
    match effect(statement) {
        DdlEffect::Unfollowable(why) => why,
        other => panic!("{statement}: {other:?}"),
    }
}

pub(super) fn unchanged(statement: &str) {
    assert!(
        matches!(effect(statement), DdlEffect::Unchanged),
        "{statement}: {:?}",
        effect(statement)
    );
}

pub(super) fn names(e: &Evolution) -> Vec<&str> {
    e.after.columns.iter().map(|c| c.name.as_str()).collect()
}

pub(super) fn kept(e: &Evolution) -> Vec<Option<usize>> {
    e.origins
        .iter()
        .map(|o| match o {
            ColumnOrigin::Kept { from } => Some(*from),
            ColumnOrigin::Added { .. } => None,
        })
        .collect()
}

pub(super) fn added(e: &Evolution, i: usize) -> ArrayRef {
    match &e.origins[i] {
        ColumnOrigin::Added { value } => {
            assert_eq!(value.len(), 1);
            assert_eq!(value.data_type(), &e.after.columns[i].kind.data_type());
            Arc::clone(value)
        }
        other => panic!("column {i} is {other:?}"),
    }
}

/// The kind and nullability a column definition gets, through `ADD COLUMN`.
pub(super) fn declared(definition: &str) -> Result<ColumnSpec, String> {
    let statement = format!("ALTER TABLE orders ADD COLUMN {definition}");
    match ddl_effect("shop", &statement, &orders(), Some(Charset::Latin1)) {
        DdlEffect::Evolve(e) => Ok(e.after.columns[3].clone()),
        DdlEffect::Unfollowable(why) => Err(why),
        other => panic!("{statement}: {other:?}"),
    }
}

pub(super) fn kind(definition: &str) -> ColumnKind {
    declared(&format!("{definition} NULL"))
        .unwrap_or_else(|e| panic!("{definition}: {e}"))
        .kind
}

#[test]
fn add_column_goes_last_first_or_after() {
    let e = evolve("ALTER TABLE orders ADD COLUMN a INT, ADD b INT FIRST, ADD c INT AFTER id");
    assert_eq!(names(&e), ["b", "id", "c", "amount", "note", "a"]);
    assert_eq!(kept(&e), [None, Some(0), None, Some(1), Some(2), None]);
    assert_eq!(e.after.primary_key, [1]);
    assert!(added(&e, 0).is_null(0));
}

#[test]
fn add_several_columns_in_parentheses() {
    // The parser rejects `ADD (a INT, b INT)`; the clause is split into one ADD per column.
    let e = evolve("ALTER TABLE orders ADD (a INT NOT NULL, b VARCHAR(10) DEFAULT 'x,y')");
    assert_eq!(names(&e), ["id", "amount", "note", "a", "b"]);
    let a = added(&e, 3);
    assert_eq!(a.as_any().downcast_ref::<Int32Array>().unwrap().value(0), 0);
    let b = added(&e, 4);
    assert_eq!(
        b.as_any().downcast_ref::<StringArray>().unwrap().value(0),
        "x,y"
    );
}

#[test]
fn drop_column_and_drop_of_a_key_column() {
    let e = evolve("ALTER TABLE orders DROP COLUMN amount");
    assert_eq!(names(&e), ["id", "note"]);
    assert_eq!(kept(&e), [Some(0), Some(2)]);
    assert_eq!(e.after.primary_key, [0]);
    let e = evolve("ALTER TABLE orders DROP id");
    assert_eq!(names(&e), ["amount", "note"]);
    assert!(e.after.primary_key.is_empty());
    assert!(unfollowable("ALTER TABLE orders DROP COLUMN nope").contains("no column nope"));
}

#[test]
fn rename_column_is_kept_and_case_insensitive() {
    let e = evolve("ALTER TABLE `shop`.`orders` RENAME COLUMN AMOUNT TO total");
    assert_eq!(names(&e), ["id", "total", "note"]);
    assert_eq!(kept(&e), [Some(0), Some(1), Some(2)]);
    assert_eq!(e.after.columns[1].kind, int(32, false));
}

#[test]
fn change_column_renames_widens_and_moves() {
    let e = evolve("ALTER TABLE orders CHANGE COLUMN amount total BIGINT NOT NULL FIRST");
    assert_eq!(names(&e), ["total", "id", "note"]);
    assert_eq!(kept(&e), [Some(1), Some(0), Some(2)]);
    assert_eq!(e.after.columns[0], col("total", int(64, false), false));
    assert_eq!(e.after.primary_key, [1]);
}

#[test]
fn modify_column_reorders_without_type_change() {
    let e = evolve("ALTER TABLE orders MODIFY note VARCHAR(200) AFTER id");
    assert_eq!(names(&e), ["id", "note", "amount"]);
    assert_eq!(kept(&e), [Some(0), Some(2), Some(1)]);
    // The same definition in the same place changes nothing.
    unchanged("ALTER TABLE orders MODIFY COLUMN amount INT NULL");
}

#[test]
fn narrowing_and_signedness_flips_are_unfollowable() {
    let why = unfollowable("ALTER TABLE orders MODIFY id INT NOT NULL");
    assert!(why.contains("MODIFY COLUMN id INT"), "{why}");
    assert!(
        why.contains("from bigint to int cannot keep every old value"),
        "{why}"
    );
    assert!(unfollowable("ALTER TABLE orders MODIFY amount INT UNSIGNED").contains("int unsigned"));
    assert!(unfollowable("ALTER TABLE orders MODIFY amount VARCHAR(10)").contains("to varchar(10)"));
    assert!(unfollowable("ALTER TABLE orders MODIFY note INT").contains("from varchar(200) to int"));
}

#[test]
fn exact_widenings_are_kept() {
    let table = TableSchema::new(
        TableId::new("shop", "w"),
        vec![
            col("u", int(32, true), true),
            col("f", ColumnKind::Simple(SimpleKind::Float), true),
            col(
                "d",
                ColumnKind::Decimal {
                    precision: 5,
                    scale: 2,
                },
                true,
            ),
            col("t", ColumnKind::DateTime { fsp: 0 }, true),
            col(
                "e",
                ColumnKind::Enum {
                    labels: vec!["a".to_string(), "b".to_string()].into(),
                },
                true,
            ),
            col(
                "l",
                ColumnKind::Text {
                    charset: Charset::Latin1,
                    length: Some(8),
                },
                true,
            ),
            col("s", int(16, false), true),
            col("b", ColumnKind::Bit { bits: 4 }, true),
        ],
        vec![],
    );
    let run = |s: &str| ddl_effect("shop", s, &table, Some(Charset::Latin1));
    for ok in [
        "ALTER TABLE w MODIFY u BIGINT",
        "ALTER TABLE w MODIFY u BIGINT UNSIGNED",
        "ALTER TABLE w MODIFY u DECIMAL(10,0)",
        "ALTER TABLE w MODIFY f DOUBLE",
        "ALTER TABLE w MODIFY d DECIMAL(6,3)",
        "ALTER TABLE w MODIFY t DATETIME(6)",
        "ALTER TABLE w MODIFY e ENUM('a','b','c')",
        "ALTER TABLE w MODIFY l TEXT CHARACTER SET utf8mb4",
        "ALTER TABLE w MODIFY l VARCHAR(12)",
        "ALTER TABLE w MODIFY l TEXT",
        "ALTER TABLE w MODIFY s INT",
        "ALTER TABLE w MODIFY s DECIMAL(5,0)",
        "ALTER TABLE w MODIFY b BIT(8)",
    ] {
        assert!(
            matches!(run(ok), DdlEffect::Evolve(_)),
            "{ok}: {:?}",
            run(ok)
        );
    }
    for bad in [
        "ALTER TABLE w MODIFY u INT",
        "ALTER TABLE w MODIFY u BIGINT(20) UNSIGNED ZEROFILL DEFAULT 1, MODIFY u INT",
        "ALTER TABLE w MODIFY u DECIMAL(9,0)",
        "ALTER TABLE w MODIFY f FLOAT(7,2)",
        "ALTER TABLE w MODIFY d DECIMAL(5,3)",
        "ALTER TABLE w MODIFY d DECIMAL(6,1)",
        "ALTER TABLE w MODIFY t DATETIME(0), MODIFY t DATE",
        "ALTER TABLE w MODIFY e ENUM('b','a')",
        "ALTER TABLE w MODIFY e ENUM('a')",
        "ALTER TABLE w MODIFY l CHAR(10)",
        "ALTER TABLE w MODIFY l VARCHAR(7)",
        "ALTER TABLE w MODIFY s DECIMAL(4,0)",
        "ALTER TABLE w MODIFY d DECIMAL(10,2) UNSIGNED",
    ] {
        assert!(
            matches!(run(bad), DdlEffect::Unfollowable(_)),
            "{bad}: {:?}",
            run(bad)
        );
    }
    // utf8mb4 to latin1 can lose characters.
    let utf = TableSchema::new(
        TableId::new("shop", "w"),
        vec![col("x", utf8(), true)],
        vec![],
    );
    let e = ddl_effect(
        "shop",
        "ALTER TABLE w MODIFY x TEXT CHARSET latin1",
        &utf,
        None,
    );
    assert!(matches!(e, DdlEffect::Unfollowable(_)), "{e:?}");
}

#[test]
fn null_to_not_null_is_kept() {
    let e = evolve("ALTER TABLE orders MODIFY amount INT NOT NULL");
    assert_eq!(kept(&e), [Some(0), Some(1), Some(2)]);
    assert!(!e.after.columns[1].nullable);
}

#[test]
fn primary_key_changes() {
    let e = evolve("ALTER TABLE orders DROP PRIMARY KEY, ADD PRIMARY KEY (id, amount)");
    assert_eq!(e.after.primary_key, [0, 1]);
    assert!(!e.after.columns[1].nullable, "key columns become NOT NULL");
    let e = evolve("ALTER TABLE orders DROP PRIMARY KEY, ADD CONSTRAINT pk PRIMARY KEY (note)");
    assert_eq!(e.after.primary_key, [2]);
    let e = evolve("ALTER TABLE orders DROP PRIMARY KEY");
    assert!(e.after.primary_key.is_empty());
    let e = evolve("ALTER TABLE orders DROP PRIMARY KEY, ADD COLUMN k INT PRIMARY KEY FIRST");
    assert_eq!(e.after.primary_key, [0]);
    assert!(!e.after.columns[0].nullable);
    let e = evolve("ALTER TABLE orders DROP KEY `PRIMARY`, ENGINE=InnoDB");
    assert!(e.after.primary_key.is_empty());
    assert!(unfollowable("ALTER TABLE orders ADD PRIMARY KEY (amount)").contains("already"));
}

#[test]
fn defaults_absent_indexes_and_table_options_keep_rows_and_columns() {
    for s in [
        "ALTER TABLE orders ALTER COLUMN amount SET DEFAULT 5",
        "ALTER TABLE orders ALTER COLUMN amount DROP DEFAULT",
        "ALTER TABLE orders DROP INDEX i",
        "ALTER TABLE orders DROP KEY k",
        "ALTER TABLE orders RENAME INDEX i TO j",
        "ALTER TABLE orders ADD CONSTRAINT fk FOREIGN KEY (amount) REFERENCES x (id)",
        "ALTER TABLE orders DROP FOREIGN KEY fk",
        "ALTER TABLE orders ENGINE=InnoDB",
        "ALTER TABLE orders COMMENT='orders'",
        "ALTER TABLE orders ENGINE=InnoDB ROW_FORMAT=DYNAMIC, ALGORITHM=INPLACE, LOCK=NONE",
        "ALTER TABLE orders ADD PARTITION (PARTITION p3 VALUES LESS THAN (300))",
        "ALTER TABLE orders REORGANIZE PARTITION p0 INTO (PARTITION p0 VALUES LESS THAN (10))",
        "ALTER TABLE orders PARTITION BY HASH(id) PARTITIONS 4",
        "ALTER TABLE orders DEFAULT CHARSET=latin1",
        "ALTER TABLE orders FORCE",
        "ALTER TABLE other ADD COLUMN x INT",
        "ALTER TABLE other.orders DROP COLUMN amount",
    ] {
        unchanged(s);
    }
    assert!(unfollowable("ALTER TABLE orders ALTER COLUMN nope SET DEFAULT 1").contains("nope"));
}

#[test]
fn partition_removal_is_unfollowable() {
    assert!(unfollowable("ALTER TABLE orders DROP PARTITION p0").contains("partition"));
    assert!(unfollowable("ALTER TABLE orders TRUNCATE PARTITION p0").contains("partition"));
}

#[test]
fn rename_to_is_gone_with_the_new_name() {
    match effect("ALTER TABLE orders RENAME TO archive.orders_old") {
        DdlEffect::Gone { renamed_to } => {
            assert_eq!(renamed_to, Some(TableId::new("archive", "orders_old")))
        }
        other => panic!("{other:?}"),
    }
    assert!(unfollowable("ALTER TABLE orders ADD x INT, RENAME TO o2").contains("RENAME"));
    assert!(matches!(
        effect("ALTER TABLE x RENAME TO orders"),
        DdlEffect::Created(None)
    ));
}

#[test]
fn truncate_and_drop() {
    assert!(matches!(
        effect("TRUNCATE TABLE orders"),
        DdlEffect::Truncate
    ));
    assert!(matches!(
        effect("TRUNCATE shop.orders"),
        DdlEffect::Truncate
    ));
    unchanged("TRUNCATE TABLE other");
    assert!(matches!(
        effect("DROP TABLE IF EXISTS a, orders"),
        DdlEffect::Gone { renamed_to: None }
    ));
    unchanged("DROP TABLE other.orders");
    unchanged("DROP TEMPORARY TABLE orders");
}

#[test]
fn rename_table_lists() {
    let gone_to = |s: &str| match effect(s) {
        DdlEffect::Gone { renamed_to } => renamed_to.map(|t| t.to_string()),
        other => panic!("{s}: {other:?}"),
    };
    assert_eq!(
        gone_to("RENAME TABLE orders TO orders_old").as_deref(),
        Some("shop.orders_old")
    );
    assert_eq!(
        gone_to("RENAME TABLE orders TO orders_old, orders_new TO orders").as_deref(),
        Some("shop.orders_old")
    );
    assert_eq!(
        gone_to("RENAME TABLE orders TO tmp, tmp TO archive.o").as_deref(),
        Some("archive.o")
    );
    assert!(matches!(
        effect("RENAME TABLE orders_new TO orders"),
        DdlEffect::Created(None)
    ));
    unchanged("RENAME TABLE a TO b");
}

#[test]
fn create_table_derives_the_schema() {
    let created = |s: &str| match effect(s) {
        DdlEffect::Created(schema) => schema,
        other => panic!("{s}: {other:?}"),
    };
    let s = created(
        "CREATE TABLE orders (id INT UNSIGNED NOT NULL AUTO_INCREMENT, \
         name VARCHAR(20) CHARACTER SET latin1, ts TIMESTAMP(3) NULL, \
         PRIMARY KEY (id), KEY i (name)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    )
    .expect("schema");
    assert_eq!(s.id, TableId::new("shop", "orders"));
    assert_eq!(s.columns[0], col("id", int(32, true), false));
    assert_eq!(
        s.columns[1].kind,
        ColumnKind::Text {
            charset: Charset::Latin1,
            length: Some(20)
        }
    );
    assert_eq!(s.columns[2].kind, ColumnKind::Timestamp { fsp: 3 });
    assert_eq!(s.primary_key, [0]);
    let s = created(
        "CREATE TABLE shop.orders (k VARCHAR(4) PRIMARY KEY, v TEXT) DEFAULT CHARSET=latin1",
    )
    .expect("schema");
    assert_eq!(s.primary_key, [0]);
    assert!(!s.columns[0].nullable);
    assert_eq!(
        s.columns[1].kind,
        ColumnKind::Text {
            charset: Charset::Latin1,
            length: None
        }
    );
    assert!(created("CREATE TABLE orders LIKE template").is_none());
    assert!(created("CREATE TABLE orders AS SELECT * FROM other").is_none());
    assert!(created("CREATE TABLE orders (a TIMESTAMP)").is_none());
    // The captured table exists, so IF NOT EXISTS does nothing to it.
    unchanged("CREATE TABLE IF NOT EXISTS orders (id INT PRIMARY KEY)");
    unchanged("CREATE TABLE other (id INT)");
    unchanged("CREATE TEMPORARY TABLE orders (id INT)");
}

#[test]
fn unparsed_statements_are_judged_by_the_names_they_contain() {
    let why = unfollowable("ALTER TABLE orders FROBNICATE everything");
    assert!(why.contains("could not parse"), "{why}");
    let why = unfollowable("FROBNICATE TABLE shop.orders");
    assert!(why.contains("could not parse"), "{why}");
    unchanged("FROBNICATE TABLE other");
    unchanged("ALTER TABLE other FROBNICATE");
    assert!(
        unfollowable("ALTER TABLE orders CONVERT TO CHARACTER SET utf8mb4").contains("CONVERT")
    );
}

#[test]
fn other_statements() {
    unchanged("CREATE INDEX i ON other (amount)");
    unchanged("DROP INDEX i ON orders");
    unchanged("ANALYZE TABLE orders");
    // The parser does not read OPTIMIZE or CHECK TABLE; they are recognised by their words.
    unchanged("OPTIMIZE TABLE orders");
    unchanged("OPTIMIZE NO_WRITE_TO_BINLOG TABLE orders");
    unchanged("CHECK TABLE orders");
    unchanged("GRANT SELECT ON shop.orders TO 'x'@'%'");
    assert!(unfollowable("DELETE FROM orders WHERE id < 10").contains("not known"));
    unchanged("DELETE FROM other WHERE id < 10");
}

#[test]
fn no_panic_on_odd_input() {
    for s in [
        "",
        ";",
        "ALTER",
        "ALTER TABLE",
        "ALTER TABLE orders",
        "ALTER TABLE orders ,,",
        "ALTER TABLE orders ADD (",
        "'unterminated",
        "ALTER TABLE orders ADD COLUMN é INT DEFAULT 'é'",
    ] {
        let _ = effect(s);
    }
}

#[test]
fn a_renamed_text_column_widens_like_any_other() {
    let text = |length| ColumnKind::Text {
        charset: Charset::Utf8,
        length: Some(length),
    };
    let mut table = orders();
    for statement in [
        "ALTER TABLE shop.orders ADD COLUMN x2 VARCHAR(8) DEFAULT 'd' FIRST",
        "ALTER TABLE shop.orders RENAME COLUMN x2 TO x3",
        "ALTER TABLE shop.orders MODIFY x3 VARCHAR(16) DEFAULT 'd'",
    ] {
        match ddl_effect("shop", statement, &table, Some(Charset::Utf8)) {
            DdlEffect::Evolve(e) => table = e.after,
            other => panic!("{statement}: {other:?}"),
        }
    }
    assert_eq!(table.columns[0].name, "x3");
    assert_eq!(table.columns[0].kind, text(16));
}
