//! Which tables a statement logged in the binlog changes outside row events.
//!
//! # Invariant
//! A statement the binlog carries as a query event (DDL, or DML logged as a statement) can
//! change a table's rows or columns without a single row event: `TRUNCATE`, `DROP`, `RENAME`,
//! `ALTER TABLE`, a statement-format `DELETE`. [`touched_tables`] names every table such a
//! statement may have changed; the only statements it clears are those known to change
//! neither rows nor columns (secondary indexes, table maintenance, privileges). A statement it
//! cannot parse is judged by the table names it contains, so an unknown statement can make
//! capture stop a table it did not change, but never leave a changed table unnoticed.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use sqlparser::ast::{
    visit_relations, AlterTableOperation, CreateTable, ObjectName, ObjectType, RenameTableNameKind,
    Statement, TableConstraint, TableObject,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::change::schema::TableId;
use crate::change::Ddl;

/// The tables `ddl` may have changed, among those `captured` accepts; see the module docs.
pub fn touched_tables(ddl: &Ddl, captured: impl Fn(&TableId) -> bool) -> BTreeSet<TableId> {
    let names = match Parser::parse_sql(&MySqlDialect {}, &ddl.statement) {
        Ok(statements) => statements.iter().flat_map(changed_names).collect(),
        Err(_) => mentioned_names(&ddl.statement),
    };
    names
        .into_iter()
        .filter_map(|parts| resolve(&parts, &ddl.db))
        .filter(|id| captured(id))
        .collect()
}

/// The tables, among those `captured` accepts, whose secondary indexes `ddl` may change
/// without changing their rows or columns (`CREATE INDEX`, `DROP INDEX`, an `ALTER TABLE` that
/// only adds, drops or renames indexes). A statement that does not parse names none here:
/// [`touched_tables`] names the tables it mentions.
pub fn reindexed_tables(ddl: &Ddl, captured: impl Fn(&TableId) -> bool) -> BTreeSet<TableId> {
    let Ok(statements) = Parser::parse_sql(&MySqlDialect {}, &ddl.statement) else {
        return BTreeSet::new();
    };
    statements
        .iter()
        .filter_map(|statement| match statement {
            Statement::CreateIndex(c) => Some(parts(&c.table_name)),
            Statement::Drop {
                object_type: ObjectType::Index,
                table: Some(table),
                ..
            } => Some(parts(table)),
            Statement::AlterTable(alter) if alter.operations.iter().any(changes_indexes) => {
                Some(parts(&alter.name))
            }
            _ => None,
        })
        .filter_map(|parts| resolve(&parts, &ddl.db))
        .filter(|id| captured(id))
        .collect()
}

/// Whether an `ALTER TABLE` operation adds, drops or renames a secondary index.
fn changes_indexes(op: &AlterTableOperation) -> bool {
    match op {
        AlterTableOperation::AddConstraint { constraint, .. } => matches!(
            constraint,
            TableConstraint::Index(_)
                | TableConstraint::Unique(_)
                | TableConstraint::FulltextOrSpatial(_)
        ),
        AlterTableOperation::DropIndex { .. } | AlterTableOperation::DropConstraint { .. } => true,
        _ => false,
    }
}

/// The renames `ddl` makes, `(from, to)` in the order written (`RENAME TABLE a TO b, c TO
/// d` or `ALTER TABLE a RENAME TO b`); none when it does not parse.
pub fn renamed_tables(ddl: &Ddl) -> Vec<(TableId, TableId)> {
    let Ok(statements) = Parser::parse_sql(&MySqlDialect {}, &ddl.statement) else {
        return Vec::new();
    };
    let id = |n: &ObjectName| resolve(&parts(n), &ddl.db);
    let mut out = Vec::new();
    for statement in &statements {
        match statement {
            Statement::RenameTable(renames) => {
                out.extend(
                    renames
                        .iter()
                        .filter_map(|r| Some((id(&r.old_name)?, id(&r.new_name)?))),
                );
            }
            Statement::AlterTable(alter) => {
                for op in &alter.operations {
                    if let AlterTableOperation::RenameTable {
                        table_name: RenameTableNameKind::To(n) | RenameTableNameKind::As(n),
                    } = op
                    {
                        if let (Some(from), Some(to)) = (id(&alter.name), id(n)) {
                            out.push((from, to));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The parts of a table name as written (`db`, `t`).
fn parts(n: &ObjectName) -> Vec<String> {
    n.0.iter()
        .filter_map(|p| p.as_ident().map(|i| i.value.clone()))
        .collect()
}

/// The names of the tables a parsed statement may change (unqualified parts as written).
fn changed_names(statement: &Statement) -> Vec<Vec<String>> {
    match statement {
        Statement::AlterTable(alter) => {
            if alter.operations.iter().all(keeps_rows_and_columns) {
                return Vec::new();
            }
            let mut out = vec![parts(&alter.name)];
            for op in &alter.operations {
                if let AlterTableOperation::RenameTable {
                    table_name: RenameTableNameKind::To(n) | RenameTableNameKind::As(n),
                } = op
                {
                    out.push(parts(n));
                }
            }
            out
        }
        Statement::Drop {
            object_type: ObjectType::Table,
            names,
            temporary: false,
            ..
        } => names.iter().map(parts).collect(),
        Statement::Truncate(t) => t.table_names.iter().map(|t| parts(&t.name)).collect(),
        // `DROP INDEX `PRIMARY` ON t` drops the primary key.
        Statement::Drop {
            object_type: ObjectType::Index,
            names,
            table: Some(table),
            ..
        } if names.iter().any(names_primary) => vec![parts(table)],
        Statement::RenameTable(renames) => renames
            .iter()
            .flat_map(|r| [parts(&r.old_name), parts(&r.new_name)])
            .collect(),
        // Statement-logged DML changes its target, not the tables it reads.
        Statement::Insert(insert) => match &insert.table {
            TableObject::TableName(n) => vec![parts(n)],
            _ => Vec::new(),
        },
        // A table created under a captured name is another table than the one captured.
        Statement::CreateTable(c) if !c.temporary => vec![parts(&c.name)],
        s if changes_no_table(s) => Vec::new(),
        // Anything else that names a table (statement-format DML, `LOAD DATA`, vendor DDL)
        // may have changed it.
        other => {
            let mut out = Vec::new();
            let _ = visit_relations(other, |n| {
                out.push(parts(n));
                ControlFlow::<()>::Continue(())
            });
            out
        }
    }
}

/// Statements that change no table's rows or columns: secondary indexes, temporary tables,
/// table maintenance, privileges, session settings, views.
pub fn changes_no_table(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::CreateIndex(_)
            | Statement::Drop {
                object_type: ObjectType::Index,
                ..
            }
            | Statement::Drop {
                temporary: true,
                ..
            }
            | Statement::CreateTable(CreateTable {
                temporary: true,
                ..
            })
            | Statement::Analyze(_)
            | Statement::OptimizeTable { .. }
            | Statement::Grant(_)
            | Statement::Revoke(_)
            | Statement::Flush { .. }
            | Statement::Set(_)
            | Statement::Use(_)
            | Statement::CreateUser(_)
            | Statement::Drop {
                object_type: ObjectType::User | ObjectType::Role | ObjectType::View,
                ..
            }
            | Statement::CreateView(_)
    )
}

/// Whether an index name as written is the primary key's.
fn names_primary(name: &ObjectName) -> bool {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .is_some_and(|i| i.value.eq_ignore_ascii_case("PRIMARY"))
}

/// `ALTER TABLE` operations that leave every row and column as it is.
fn keeps_rows_and_columns(op: &AlterTableOperation) -> bool {
    match op {
        AlterTableOperation::AddConstraint { constraint, .. } => {
            !matches!(constraint, TableConstraint::PrimaryKey(_))
        }
        AlterTableOperation::DropIndex { name } => !name.value.eq_ignore_ascii_case("PRIMARY"),
        AlterTableOperation::DropForeignKey { .. }
        | AlterTableOperation::Algorithm { .. }
        | AlterTableOperation::Lock { .. }
        | AlterTableOperation::AutoIncrement { .. } => true,
        _ => false,
    }
}

/// Every identifier and `a.b` pair in a statement that does not parse.
pub fn mentioned_names(statement: &str) -> Vec<Vec<String>> {
    let Ok(tokens) = Tokenizer::new(&MySqlDialect {}, statement).tokenize() else {
        // Not even tokens: judge by the words between non-identifier characters.
        return statement
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$' || c == '.'))
            .filter(|w| !w.is_empty())
            .map(|w| w.split('.').map(str::to_string).collect())
            .collect();
    };
    let words: Vec<Option<String>> = tokens
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .map(|t| match t {
            Token::Word(w) => Some(w.value.clone()),
            Token::Period => Some(".".into()),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let Some(w) = w.as_deref().filter(|w| *w != ".") else {
            continue;
        };
        out.push(vec![w.to_string()]);
        if let (Some(Some(dot)), Some(Some(next))) = (words.get(i + 1), words.get(i + 2)) {
            if dot == "." && next != "." {
                out.push(vec![w.to_string(), next.clone()]);
            }
        }
    }
    out
}

/// `db.table` of a name as written, unqualified names in the statement's default database.
pub fn resolve(parts: &[String], default_db: &str) -> Option<TableId> {
    match parts {
        [table] if !default_db.is_empty() => Some(TableId::new(default_db, table.as_str())),
        [.., db, table] => Some(TableId::new(db.as_str(), table.as_str())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_are_listed_in_the_order_written() {
        let ddl = |statement: &str| Ddl {
            db: "shop".into(),
            statement: statement.into(),
        };
        let names = |statement: &str| -> Vec<String> {
            renamed_tables(&ddl(statement))
                .into_iter()
                .map(|(a, b)| format!("{a}>{b}"))
                .collect()
        };
        assert_eq!(
            names("RENAME TABLE t TO t_old, staging.t_new TO t"),
            ["shop.t>shop.t_old", "staging.t_new>shop.t"]
        );
        assert_eq!(names("ALTER TABLE other.x RENAME TO y"), ["other.x>shop.y"]);
        assert!(names("ALTER TABLE t ADD COLUMN c INT").is_empty());
        assert!(names("DROP TABLE t").is_empty());
    }

    fn touched(statement: &str) -> Vec<String> {
        let ddl = Ddl {
            db: "shop".into(),
            statement: statement.into(),
        };
        let captured = |t: &TableId| {
            t.db == "shop"
                && ["orders", "items", "orders_old", "orders_new", "orders2"]
                    .contains(&t.table.as_str())
        };
        touched_tables(&ddl, captured)
            .into_iter()
            .map(|t| t.to_string())
            .collect()
    }

    #[test]
    fn statements_that_change_rows_or_columns_name_their_tables() {
        assert_eq!(touched("TRUNCATE TABLE orders"), ["shop.orders"]);
        assert_eq!(touched("TRUNCATE orders"), ["shop.orders"]);
        assert_eq!(
            touched("DROP TABLE IF EXISTS `orders`, shop.items"),
            ["shop.items", "shop.orders"]
        );
        assert_eq!(
            touched("RENAME TABLE orders TO orders_old, orders_new TO orders"),
            ["shop.orders", "shop.orders_new", "shop.orders_old"]
        );
        assert_eq!(
            touched("ALTER TABLE orders ADD COLUMN note TEXT"),
            ["shop.orders"]
        );
        assert_eq!(
            touched("ALTER TABLE orders DROP COLUMN note"),
            ["shop.orders"]
        );
        assert_eq!(
            touched("ALTER TABLE orders RENAME COLUMN a TO b"),
            ["shop.orders"]
        );
        assert_eq!(
            touched("ALTER TABLE orders MODIFY amount BIGINT"),
            ["shop.orders"]
        );
        assert_eq!(
            touched("ALTER TABLE orders DROP PRIMARY KEY, ADD PRIMARY KEY (id, x)"),
            ["shop.orders"]
        );
        assert_eq!(
            touched("ALTER TABLE orders RENAME TO orders2"),
            ["shop.orders", "shop.orders2"]
        );
        assert_eq!(
            touched("ALTER TABLE orders TRUNCATE PARTITION p0"),
            ["shop.orders"]
        );
        assert_eq!(
            touched("CREATE TABLE orders (id INT PRIMARY KEY)"),
            ["shop.orders"]
        );
        assert_eq!(touched("DELETE FROM orders WHERE id < 10"), ["shop.orders"]);
        assert_eq!(
            touched("INSERT INTO other.t SELECT * FROM orders"),
            Vec::<String>::new()
        );
        assert_eq!(touched("UPDATE shop.orders SET x = 1"), ["shop.orders"]);
    }

    #[test]
    fn statements_that_keep_rows_and_columns_name_nothing() {
        for s in [
            "CREATE INDEX i ON orders (amount)",
            "DROP INDEX i ON orders",
            "ALTER TABLE orders ADD INDEX i (amount)",
            "ALTER TABLE orders DROP INDEX i",
            "ANALYZE TABLE orders",
            "GRANT SELECT ON shop.orders TO 'x'@'%'",
            "DROP TEMPORARY TABLE orders",
            "CREATE TEMPORARY TABLE orders (id INT)",
            "TRUNCATE TABLE ignored",
            "DROP TABLE other.orders",
        ] {
            assert_eq!(touched(s), Vec::<String>::new(), "{s}");
        }
    }

    #[test]
    fn index_statements_name_the_tables_whose_indexes_change() {
        let reindexed = |statement: &str| -> Vec<String> {
            let ddl = Ddl {
                db: "shop".into(),
                statement: statement.into(),
            };
            reindexed_tables(&ddl, |t| t.db == "shop")
                .iter()
                .map(|t| t.to_string())
                .collect()
        };
        for s in [
            "CREATE INDEX i ON orders (amount)",
            "CREATE UNIQUE INDEX i ON shop.orders (amount)",
            "DROP INDEX i ON orders",
            "ALTER TABLE orders ADD INDEX i (amount), ALGORITHM=INPLACE",
            "ALTER TABLE orders DROP INDEX i",
            "ALTER TABLE orders ADD UNIQUE KEY u (note)",
        ] {
            assert_eq!(reindexed(s), ["shop.orders"], "{s}");
        }
        for s in [
            "CREATE INDEX i ON other.t (a)",
            "ALTER TABLE orders AUTO_INCREMENT = 5",
            "ANALYZE TABLE orders",
            "TRUNCATE TABLE orders",
        ] {
            assert_eq!(reindexed(s), Vec::<String>::new(), "{s}");
        }
        // Dropping the index `PRIMARY` drops the primary key: the table's columns change.
        assert_eq!(touched("DROP INDEX `PRIMARY` ON orders"), ["shop.orders"]);
        assert_eq!(
            touched("ALTER TABLE orders DROP INDEX `PRIMARY`"),
            ["shop.orders"]
        );
    }

    #[test]
    fn an_unparsed_statement_is_judged_by_the_names_it_contains() {
        assert_eq!(
            touched("ALTER ONLINE TABLE orders FROBNICATE"),
            ["shop.orders"]
        );
        assert_eq!(
            touched("OPTIMIZE NO_WRITE_TO_BINLOG WEIRD `shop`.`items` x"),
            ["shop.items"]
        );
        let no_db = Ddl {
            db: String::new(),
            statement: "TRUNCATE orders".into(),
        };
        assert!(touched_tables(&no_db, |_| true).is_empty());
        let other_db = Ddl {
            db: "other".into(),
            statement: "ALTER ONLINE TABLE orders FROBNICATE".into(),
        };
        assert!(touched_tables(&other_db, |t| t.db == "shop").is_empty());
    }
}
