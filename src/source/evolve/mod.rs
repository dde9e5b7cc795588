//! What one DDL statement from the binlog does to one captured table's rows and columns, as
//! MySQL/MariaDB execute it, so that capture can convert its state instead of stopping.
//!
//! # Invariant
//! Never a wrong schema or a wrong value: [`ddl_effect`] answers [`DdlEffect::Evolve`] only
//! when the new columns, their kinds and nullability are exactly what `information_schema`
//! shows after the statement and every row's new values follow exactly from its old ones.
//! Whatever cannot be derived that way (an expression default, a narrowing type change, a
//! clause the parser does not know) is [`DdlEffect::Unfollowable`], naming the clause.
//!
//! Column definitions live in `types`, the clauses of an ALTER in `alter`, the syntax the
//! parser lacks in `clauses`; this file owns statements.

mod alter;
mod clauses;
mod indexes;
mod literal;
mod types;

use arrow::array::ArrayRef;
use sqlparser::ast::{
    visit_relations, AlterTableOperation, ColumnOption, CreateTable, Expr, ObjectName, ObjectType,
    RenameTable, RenameTableNameKind, SqlOption, Statement, TableConstraint,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;
use std::ops::ControlFlow;

use crate::change::schema::{Charset, ColumnSpec, IndexSpec, TableId, TableSchema};
use crate::source::ddl::{changes_no_table, mentioned_names, resolve};
use alter::{index_of, Columns, Finished, Source};
use clauses::{alter_clauses, create_index_text, is_maintenance, rewrite_attributes, Step};
use indexes::{declared, Indexes};
use types::declare;

/// What one statement does to one captured table.
#[derive(Debug, Clone)]
pub enum DdlEffect {
    /// Neither rows, columns nor indexes change (table options, comments, partition
    /// maintenance, ANALYZE/OPTIMIZE, a statement about another table).
    Unchanged,
    /// Only the secondary indexes change (`CREATE INDEX`, `DROP INDEX`, an `ALTER TABLE` that
    /// adds, drops or renames indexes): the table's indexes after the statement. Rows and
    /// columns stay as they are.
    Reindexed(Vec<IndexSpec>),
    /// Columns or the primary key change; see [`Evolution`].
    Evolve(Evolution),
    /// Every row is removed (TRUNCATE).
    Truncate,
    /// The table is dropped, or renamed to `renamed_to` (RENAME TABLE ..., ALTER TABLE ...
    /// RENAME TO).
    Gone { renamed_to: Option<TableId> },
    /// The table is (re)created under this name (CREATE TABLE of the captured name); carries
    /// the new schema when it could be derived from the statement alone (plain column list, not
    /// LIKE / AS SELECT).
    Created(Option<TableSchema>),
    /// The statement changes the table in a way that cannot be followed exactly; the text names
    /// the clause and why. The caller adds the fix.
    Unfollowable(String),
}

/// How the columns after an ALTER come from those before it.
#[derive(Debug, Clone)]
pub struct Evolution {
    /// Same `id`; the new columns in their new order; the new primary key (indexes into the
    /// new columns).
    pub after: TableSchema,
    /// One per column of `after`.
    pub origins: Vec<ColumnOrigin>,
}

#[derive(Debug, Clone)]
pub enum ColumnOrigin {
    /// Column `from` of the old schema, possibly renamed; every old value converts exactly to
    /// the new kind (same Arrow type or a widening Arrow's `cast` does exactly).
    Kept { from: usize },
    /// A new column: every existing row holds `value`, a one-element Arrow array of the new
    /// column's `kind.data_type()` (a null element for NULL).
    Added { value: ArrayRef },
}

/// `statement` was logged with default database `db`; `table` is the captured table's schema
/// before it; `table_charset` is the table's default character set (None = binary), used for
/// text columns declared without one.
pub fn ddl_effect(
    db: &str,
    statement: &str,
    table: &TableSchema,
    table_charset: Option<Charset>,
) -> DdlEffect {
    let text = rewrite_attributes(statement);
    let cx = Cx {
        db,
        table,
        table_charset,
    };
    let statements = match Parser::parse_sql(&MySqlDialect {}, &text) {
        Ok(s) => s,
        Err(e) => return cx.unparsed(&text, &e.to_string()),
    };
    let mut effects = statements
        .iter()
        .map(|s| cx.statement(s))
        .filter(|e| !matches!(e, DdlEffect::Unchanged));
    match (effects.next(), effects.next()) {
        (None, _) => DdlEffect::Unchanged,
        (Some(e), None) => e,
        (Some(_), Some(_)) => {
            DdlEffect::Unfollowable("several statements in one event change the table".into())
        }
    }
}

/// The question being answered: one table, as the statement's default database sees names.
struct Cx<'a> {
    db: &'a str,
    table: &'a TableSchema,
    table_charset: Option<Charset>,
}

fn parts(n: &ObjectName) -> Vec<String> {
    n.0.iter()
        .filter_map(|p| p.as_ident().map(|i| i.value.clone()))
        .collect()
}

/// At most `n` characters of `s`, for messages.
fn short(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

impl Cx<'_> {
    fn id_of(&self, n: &ObjectName) -> Option<TableId> {
        resolve(&parts(n), self.db)
    }

    fn is_ours(&self, n: &ObjectName) -> bool {
        self.id_of(n).as_ref() == Some(&self.table.id)
    }

    fn statement(&self, s: &Statement) -> DdlEffect {
        match s {
            Statement::AlterTable(alter) if self.is_ours(&alter.name) => {
                let steps: Vec<Step> = alter
                    .operations
                    .iter()
                    .map(|op| Step::Op(Box::new(op.clone())))
                    .collect();
                self.alter(&steps)
            }
            // Another table taking the captured name: the name now holds other rows.
            Statement::AlterTable(alter) => {
                let takes_name = alter.operations.iter().any(|op| {
                    matches!(op, AlterTableOperation::RenameTable {
                        table_name: RenameTableNameKind::To(n) | RenameTableNameKind::As(n),
                    } if self.is_ours(n))
                });
                if takes_name {
                    DdlEffect::Created(None)
                } else {
                    DdlEffect::Unchanged
                }
            }
            Statement::Drop {
                object_type: ObjectType::Table,
                names,
                temporary: false,
                ..
            } if names.iter().any(|n| self.is_ours(n)) => DdlEffect::Gone { renamed_to: None },
            Statement::Truncate(t) if t.table_names.iter().any(|t| self.is_ours(&t.name)) => {
                match t.partitions {
                    Some(_) => {
                        DdlEffect::Unfollowable("TRUNCATE PARTITION removes only some rows".into())
                    }
                    None => DdlEffect::Truncate,
                }
            }
            Statement::RenameTable(renames) => self.rename(renames),
            Statement::CreateIndex(c) if self.is_ours(&c.table_name) => {
                let name = c.name.as_ref().and_then(|n| n.0.last()?.as_ident());
                let mut indexes = Indexes::of(&self.table.indexes);
                if c.if_not_exists
                    && name.is_some_and(|n| {
                        self.table
                            .indexes
                            .iter()
                            .any(|i| i.name.eq_ignore_ascii_case(&n.value))
                    })
                {
                    return DdlEffect::Unchanged;
                }
                let ids: Vec<usize> = (0..self.table.columns.len()).collect();
                let name = name.map(|n| n.value.as_str());
                indexes.add(name, &c.columns, c.unique, &self.table.columns, &ids);
                self.reindexed(indexes.specs(&ids))
            }
            Statement::Drop {
                object_type: ObjectType::Index,
                names,
                table: Some(table),
                ..
            } if self.is_ours(table) => {
                let named = |n: &ObjectName| n.0.last().and_then(|p| p.as_ident()).cloned();
                let names: Vec<_> = names.iter().filter_map(named).collect();
                if names
                    .iter()
                    .any(|n| n.value.eq_ignore_ascii_case("PRIMARY"))
                {
                    let op = AlterTableOperation::DropPrimaryKey {
                        drop_behavior: None,
                    };
                    return self.alter(&[Step::Op(Box::new(op))]);
                }
                let mut indexes = Indexes::of(&self.table.indexes);
                for n in &names {
                    indexes.drop(&n.value);
                }
                let ids: Vec<usize> = (0..self.table.columns.len()).collect();
                self.reindexed(indexes.specs(&ids))
            }
            Statement::CreateTable(c) if !c.temporary && self.is_ours(&c.name) => self.create(c),
            // Drops, truncations and creations of other tables.
            Statement::Drop { .. } | Statement::Truncate(_) | Statement::CreateTable(_) => {
                DdlEffect::Unchanged
            }
            s if changes_no_table(s) => DdlEffect::Unchanged,
            // Statement-logged DML, LOAD DATA, vendor statements: rows may change unseen.
            other => {
                let names_ours = visit_relations(other, |n| {
                    if self.is_ours(n) {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
                .is_break();
                if names_ours {
                    DdlEffect::Unfollowable(format!(
                        "{}: a statement whose effect on the table is not known",
                        short(&other.to_string(), 60)
                    ))
                } else {
                    DdlEffect::Unchanged
                }
            }
        }
    }

    /// `indexes` as the effect of a statement on the table's indexes alone.
    fn reindexed(&self, indexes: Vec<IndexSpec>) -> DdlEffect {
        match indexes == self.table.indexes {
            true => DdlEffect::Unchanged,
            false => DdlEffect::Reindexed(indexes),
        }
    }

    /// A statement the parser rejects: an `ALTER TABLE` of ours is read clause by clause, a
    /// `CREATE INDEX` in a form the parser lacks is brought to one it reads; anything else is
    /// judged by whether it names the table.
    fn unparsed(&self, text: &str, error: &str) -> DdlEffect {
        if let Some(plain) = create_index_text(text) {
            return match Parser::parse_sql(&MySqlDialect {}, &plain) {
                Ok(statements) if statements.len() == 1 => self.statement(&statements[0]),
                // An index statement changes no row or column; one not read leaves the
                // indexes as they were (lookups by it scan).
                _ => DdlEffect::Unchanged,
            };
        }
        if let Some(alter) = alter_clauses(text) {
            if resolve(&alter.name, self.db).as_ref() == Some(&self.table.id) {
                return match alter.steps {
                    Ok(steps) => self.alter(&steps),
                    Err(why) => DdlEffect::Unfollowable(why),
                };
            }
        }
        if is_maintenance(text) {
            return DdlEffect::Unchanged;
        }
        let mentioned = mentioned_names(text)
            .iter()
            .any(|p| resolve(p, self.db).as_ref() == Some(&self.table.id));
        if mentioned {
            DdlEffect::Unfollowable(format!("could not parse {}: {error}", short(text, 80)))
        } else {
            DdlEffect::Unchanged
        }
    }

    /// `RENAME TABLE a TO b, ...`, applied in order, following the captured table's name.
    fn rename(&self, renames: &[RenameTable]) -> DdlEffect {
        let mut current = Some(self.table.id.clone());
        let mut taken = false;
        for r in renames {
            let (old, new) = (self.id_of(&r.old_name), self.id_of(&r.new_name));
            if current.is_some() && old == current {
                current = new;
            } else if new.as_ref() == Some(&self.table.id) {
                taken = true;
            }
        }
        match current {
            Some(c) if c == self.table.id && taken => DdlEffect::Created(None),
            Some(c) if c == self.table.id => DdlEffect::Unchanged,
            Some(c) => DdlEffect::Gone {
                renamed_to: Some(c),
            },
            None => DdlEffect::Unfollowable("RENAME TABLE to a name without a database".into()),
        }
    }

    fn create(&self, c: &CreateTable) -> DdlEffect {
        // The captured table exists, so `IF NOT EXISTS` leaves it (and its rows) as they are.
        if c.if_not_exists && !c.or_replace {
            return DdlEffect::Unchanged;
        }
        if c.like.is_some() || c.query.is_some() || c.clone.is_some() || c.columns.is_empty() {
            return DdlEffect::Created(None);
        }
        DdlEffect::Created(self.created_schema(c).ok())
    }

    fn created_schema(&self, c: &CreateTable) -> Result<TableSchema, String> {
        let charset = match table_charset_option(c)? {
            Some(charset) => charset,
            None => self.table_charset,
        };
        let mut columns = Vec::with_capacity(c.columns.len());
        let mut primary_key = Vec::new();
        let mut unique_columns = Vec::new();
        for (i, def) in c.columns.iter().enumerate() {
            let options: Vec<&ColumnOption> = def.options.iter().map(|o| &o.option).collect();
            let declared = declare(&def.name.value, &def.data_type, &options, charset)?;
            if declared.primary_key {
                primary_key.push(i);
            }
            if declared.unique {
                unique_columns.push(i);
            }
            columns.push(declared.spec);
        }
        if primary_key.len() > 1 {
            return Err("PRIMARY KEY on several columns".into());
        }
        for constraint in &c.constraints {
            if let TableConstraint::PrimaryKey(pk) = constraint {
                if !primary_key.is_empty() {
                    return Err("two primary keys".into());
                }
                for col in &pk.columns {
                    primary_key.push(index_of(&columns, &col.column.expr)?);
                }
            }
        }
        for &i in &primary_key {
            columns[i].nullable = false;
        }
        let indexes = created_indexes(&c.constraints, &columns, &unique_columns);
        Ok(TableSchema::new(self.table.id.clone(), columns, primary_key).with_indexes(indexes))
    }

    fn alter(&self, steps: &[Step]) -> DdlEffect {
        let sets_charset = steps.iter().any(|s| matches!(s, Step::TableCharset));
        let defines_columns = steps.iter().any(|s| {
            matches!(s, Step::Op(op) if matches!(
                **op,
                AlterTableOperation::AddColumn { .. }
                    | AlterTableOperation::ChangeColumn { .. }
                    | AlterTableOperation::ModifyColumn { .. }
            ))
        });
        if sets_charset && defines_columns {
            return DdlEffect::Unfollowable(
                "the table's default character set changes in the statement that defines \
                 columns"
                    .into(),
            );
        }
        let mut work = Columns::new(self.table);
        let mut renamed_to = None;
        for step in steps {
            let op = match step {
                Step::Op(op) => op,
                Step::RenameIndex { from, to } => {
                    work.rename_index(from, to);
                    continue;
                }
                Step::Keep | Step::TableCharset => continue,
            };
            if let AlterTableOperation::RenameTable {
                table_name: RenameTableNameKind::To(n) | RenameTableNameKind::As(n),
            } = &**op
            {
                match self.id_of(n) {
                    Some(id) => renamed_to = Some(id),
                    None => {
                        return DdlEffect::Unfollowable(
                            "RENAME TO a name without a database".into(),
                        )
                    }
                }
                continue;
            }
            if let Err(why) = work.apply(op, self.table_charset) {
                return DdlEffect::Unfollowable(format!("{}: {why}", short(&op.to_string(), 80)));
            }
        }
        let Finished {
            columns,
            sources,
            primary_key,
            indexes,
        } = work.finish();
        let origins: Vec<ColumnOrigin> = sources
            .into_iter()
            .map(|s| match s {
                Source::Old(from) => ColumnOrigin::Kept { from },
                Source::New(value) => ColumnOrigin::Added { value },
            })
            .collect();
        let after =
            TableSchema::new(self.table.id.clone(), columns, primary_key).with_indexes(indexes);
        let evolution = Evolution { after, origins };
        let unchanged = evolution.after.columns == self.table.columns
            && evolution.after.primary_key == self.table.primary_key
            && evolution
                .origins
                .iter()
                .enumerate()
                .all(|(i, o)| matches!(o, ColumnOrigin::Kept { from } if *from == i));
        match (unchanged, renamed_to) {
            (true, None) => self.reindexed(evolution.after.indexes),
            (true, Some(id)) if id == self.table.id => self.reindexed(evolution.after.indexes),
            // A rename that also changes indexes keeps the old ones (only lookups by a new
            // one scan; RESNAPSHOT TABLE reads them again).
            (true, Some(id)) => DdlEffect::Gone {
                renamed_to: Some(id),
            },
            (false, None) => DdlEffect::Evolve(evolution),
            (false, Some(_)) => DdlEffect::Unfollowable(
                "RENAME TO in the statement that changes the columns".into(),
            ),
        }
    }
}

/// The `[DEFAULT] CHARSET` / `COLLATE` table option of a `CREATE TABLE`, if any.
fn table_charset_option(c: &CreateTable) -> Result<Option<Option<Charset>>, String> {
    use sqlparser::ast::CreateTableOptions as O;
    let options = match &c.table_options {
        O::Plain(o) | O::Options(o) | O::With(o) | O::TableProperties(o) => o.as_slice(),
        O::None => &[],
    };
    let mut out = None;
    for option in options {
        let SqlOption::KeyValue { key, value } = option else {
            continue;
        };
        let name = match value {
            Expr::Identifier(i) => i.value.clone(),
            Expr::Value(v) => v.value.to_string().trim_matches('\'').to_string(),
            other => other.to_string(),
        };
        let key = key.value.to_ascii_uppercase();
        if key.ends_with("CHARSET") || key.ends_with("CHARACTER SET") {
            out = Some(Charset::from_name(&name)?);
        } else if key.ends_with("COLLATE") && out.is_none() {
            out = Some(Charset::from_name(
                name.split('_').next().unwrap_or_default(),
            )?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod column_tests;
#[cfg(test)]
mod index_tests;
#[cfg(test)]
mod tests;

/// The secondary indexes a `CREATE TABLE` declares (`KEY`, `INDEX`, `UNIQUE`, `FULLTEXT`,
/// `SPATIAL`, columns declared `UNIQUE` first), named as the server names them; see
/// `indexes`.
fn created_indexes(
    constraints: &[TableConstraint],
    table: &[ColumnSpec],
    unique_columns: &[usize],
) -> Vec<IndexSpec> {
    let ids: Vec<usize> = (0..table.len()).collect();
    let mut indexes = Indexes::default();
    for &c in unique_columns {
        indexes.add_unique_column(&table[c].name, c);
    }
    for constraint in constraints {
        if let Some((name, parts, unique)) = declared(constraint) {
            indexes.add(name, parts, unique, table, &ids);
        }
    }
    indexes.specs(&ids)
}
