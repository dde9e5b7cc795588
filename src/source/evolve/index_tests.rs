//! What index statements do to the captured `shop.orders`' secondary indexes, named as the
//! server names them.

use super::tests::{col, int, orders};
use super::*;

/// `orders` with `KEY by_amount (amount)` and `UNIQUE KEY note (note)`.
fn indexed() -> TableSchema {
    orders().with_indexes(vec![
        IndexSpec {
            name: "by_amount".into(),
            columns: vec![1],
            unique: false,
        },
        IndexSpec {
            name: "note".into(),
            columns: vec![2],
            unique: true,
        },
    ])
}

fn on(table: &TableSchema, statement: &str) -> DdlEffect {
    ddl_effect("shop", statement, table, Some(Charset::Utf8))
}

/// The indexes as `name(columns)` with a `!` for unique ones.
fn shown(indexes: &[IndexSpec]) -> Vec<String> {
    indexes
        .iter()
        .map(|i| {
            let cols: Vec<String> = i.columns.iter().map(usize::to_string).collect();
            let bang = if i.unique { "!" } else { "" };
            format!("{}{bang}({})", i.name, cols.join(","))
        })
        .collect()
}

/// The indexes after `statement`, which changes only indexes.
fn reindexed(table: &TableSchema, statement: &str) -> Vec<String> {
    match on(table, statement) {
        DdlEffect::Reindexed(indexes) => shown(&indexes),
        other => panic!("{statement}: {other:?}"),
    }
}

fn evolved(table: &TableSchema, statement: &str) -> TableSchema {
    match on(table, statement) {
        DdlEffect::Evolve(e) => e.after,
        other => panic!("{statement}: {other:?}"),
    }
}

#[test]
fn create_and_drop_index_statements_change_only_the_indexes() {
    let t = indexed();
    assert_eq!(
        reindexed(&t, "CREATE INDEX i ON orders (amount, note(10))"),
        ["by_amount(1)", "note!(2)", "i(1,2)"]
    );
    assert_eq!(
        reindexed(
            &t,
            "CREATE UNIQUE INDEX u USING BTREE ON shop.orders (note DESC)"
        ),
        ["by_amount(1)", "note!(2)", "u!(2)"]
    );
    // Forms the parser lacks, brought to one it reads.
    assert_eq!(
        reindexed(&t, "CREATE FULLTEXT INDEX ft ON orders (note)"),
        ["by_amount(1)", "note!(2)", "ft(2)"]
    );
    assert_eq!(
        reindexed(
            &t,
            "CREATE OR REPLACE INDEX by_amount ON orders (note, amount)"
        ),
        ["note!(2)", "by_amount(2,1)"]
    );
    assert_eq!(
        reindexed(&t, "DROP INDEX by_amount ON orders"),
        ["note!(2)"]
    );
    assert_eq!(
        reindexed(&t, "DROP INDEX `note` ON shop.orders"),
        ["by_amount(1)"]
    );
    // Nothing changes: a name taken with IF NOT EXISTS, an expression part, an index that
    // is not there, another table.
    for s in [
        "CREATE INDEX IF NOT EXISTS by_amount ON orders (note)",
        "CREATE INDEX e ON orders ((amount + 1))",
        "DROP INDEX nope ON orders",
        "CREATE INDEX i ON other (amount)",
        "DROP INDEX by_amount ON other",
    ] {
        assert!(matches!(on(&t, s), DdlEffect::Unchanged), "{s}");
    }
    // `DROP INDEX PRIMARY` drops the primary key: a change of the key, not of an index.
    let after = evolved(&t, "DROP INDEX `PRIMARY` ON orders");
    assert!(after.primary_key.is_empty());
    assert_eq!(shown(&after.indexes), ["by_amount(1)", "note!(2)"]);
}

#[test]
fn alter_table_adds_drops_and_renames_indexes_as_the_server_names_them() {
    let t = indexed();
    assert_eq!(
        reindexed(
            &t,
            "ALTER TABLE orders ADD INDEX (amount), ADD KEY (amount)"
        ),
        ["by_amount(1)", "note!(2)", "amount(1)", "amount_2(1)"]
    );
    assert_eq!(
        reindexed(
            &t,
            "ALTER TABLE orders ADD UNIQUE (note), ADD CONSTRAINT c UNIQUE (id)"
        ),
        ["by_amount(1)", "note!(2)", "note_2!(2)", "c!(0)"]
    );
    assert_eq!(
        reindexed(
            &t,
            "ALTER TABLE orders DROP KEY by_amount, ADD FULLTEXT KEY f (note)"
        ),
        ["note!(2)", "f(2)"]
    );
    assert_eq!(
        reindexed(&t, "ALTER TABLE orders RENAME INDEX by_amount TO a2"),
        ["a2(1)", "note!(2)"]
    );
    assert_eq!(
        reindexed(
            &t,
            "ALTER TABLE orders RENAME KEY note TO n, ALGORITHM=INPLACE"
        ),
        ["by_amount(1)", "n!(2)"]
    );
    assert_eq!(
        reindexed(&t, "ALTER TABLE orders DROP INDEX note"),
        ["by_amount(1)"]
    );
}

#[test]
fn indexes_follow_their_columns_through_column_changes() {
    let t = indexed().with_indexes(vec![
        IndexSpec {
            name: "pair".into(),
            columns: vec![1, 2],
            unique: false,
        },
        IndexSpec {
            name: "by_amount".into(),
            columns: vec![1],
            unique: false,
        },
    ]);
    // A dropped column leaves the indexes it was part of; one left with no part goes.
    let after = evolved(&t, "ALTER TABLE orders DROP COLUMN amount");
    assert_eq!(shown(&after.indexes), ["pair(1)"]);
    // Moved and renamed, the column keeps its indexes.
    let after = evolved(
        &t,
        "ALTER TABLE orders CHANGE amount total INT NULL AFTER note",
    );
    assert_eq!(shown(&after.indexes), ["pair(2,1)", "by_amount(2)"]);
    // A column declared UNIQUE gets a unique index of its name.
    let after = evolved(&t, "ALTER TABLE orders ADD COLUMN code INT NULL UNIQUE");
    assert_eq!(
        shown(&after.indexes),
        ["pair(1,2)", "by_amount(1)", "code!(3)"]
    );
    let after = evolved(
        &t,
        "ALTER TABLE orders ADD COLUMN k INT NULL, ADD INDEX (k, amount)",
    );
    assert_eq!(
        shown(&after.indexes),
        ["pair(1,2)", "by_amount(1)", "k(3,1)"]
    );
}

#[test]
fn create_table_declares_every_kind_of_index() {
    let placeholder = TableSchema::new(TableId::new("shop", "t"), Vec::new(), Vec::new());
    let created = match on(
        &placeholder,
        "CREATE TABLE t (id INT PRIMARY KEY, a INT UNIQUE, b TEXT, c INT, \
         KEY (c), KEY (c, a), FULLTEXT KEY ft (b), UNIQUE KEY (b(20)), KEY e ((c + 1)))",
    ) {
        DdlEffect::Created(Some(t)) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        shown(&created.indexes),
        ["a!(1)", "c(3)", "c_2(3,1)", "ft(2)", "b!(2)"]
    );
    assert_eq!(created.columns[3], col("c", int(32, false), true));
}
