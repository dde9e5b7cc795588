//! The columns of one table while the clauses of an `ALTER TABLE` apply in order: where each
//! column comes from, its place, and which columns form the primary key.
//!
//! # Invariant
//! A clause either applies exactly as MySQL applies it or is an error naming why it cannot;
//! a column keeps its source only when [`Declared::keeps_values_of`] proves every old value
//! survives the change unchanged.

use arrow::array::ArrayRef;
use sqlparser::ast::{
    AlterColumnOperation, AlterTableOperation, ColumnOption, Expr, MySQLColumnPosition,
    TableConstraint,
};

use crate::change::schema::{Charset, ColumnSpec, IndexSpec, TableSchema};
use crate::source::evolve::indexes::{declared, Indexes};
use crate::source::evolve::types::{declare, Declared};

/// Where a column's values come from.
pub enum Source {
    /// Column `i` of the table before the statement.
    Old(usize),
    /// A new column; every existing row holds this one-element value.
    New(ArrayRef),
}

pub fn index_of(columns: &[ColumnSpec], expr: &Expr) -> Result<usize, String> {
    match expr {
        Expr::Identifier(i) => columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(&i.value))
            .ok_or_else(|| format!("no column {}", i.value)),
        other => Err(format!("a key part {other} that is not a column")),
    }
}

/// One column while the clauses of an ALTER apply; `uid` survives moves so the key can follow.
struct Col {
    spec: ColumnSpec,
    source: Source,
    uid: usize,
}

pub struct Columns {
    cols: Vec<Col>,
    /// `uid`s of the primary key columns, in key order.
    pk: Vec<usize>,
    /// The secondary indexes, over `uid`s.
    indexes: Indexes,
    next_uid: usize,
}

impl Columns {
    pub fn new(table: &TableSchema) -> Self {
        let cols = table
            .columns
            .iter()
            .enumerate()
            .map(|(i, spec)| Col {
                spec: spec.clone(),
                source: Source::Old(i),
                uid: i,
            })
            .collect();
        Columns {
            cols,
            pk: table.primary_key.clone(),
            indexes: Indexes::of(&table.indexes),
            next_uid: table.columns.len(),
        }
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.cols
            .iter()
            .position(|c| c.spec.name.eq_ignore_ascii_case(name))
    }

    fn need(&self, name: &str) -> Result<usize, String> {
        self.find(name).ok_or_else(|| format!("no column {name}"))
    }

    fn place(&mut self, col: Col, pos: Option<&MySQLColumnPosition>) -> Result<(), String> {
        let at = match pos {
            None => self.cols.len(),
            Some(MySQLColumnPosition::First) => 0,
            Some(MySQLColumnPosition::After(name)) => self.need(&name.value)? + 1,
        };
        self.cols.insert(at, col);
        Ok(())
    }

    fn set_primary_key(&mut self, uids: Vec<usize>) -> Result<(), String> {
        if !self.pk.is_empty() {
            return Err("the table already has a primary key".into());
        }
        for c in self.cols.iter_mut().filter(|c| uids.contains(&c.uid)) {
            c.spec.nullable = false;
        }
        self.pk = uids;
        Ok(())
    }

    fn drop_primary_key(&mut self) -> Result<(), String> {
        if self.pk.is_empty() {
            return Err("the table has no primary key".into());
        }
        self.pk.clear();
        Ok(())
    }

    pub fn apply(
        &mut self,
        op: &AlterTableOperation,
        charset: Option<Charset>,
    ) -> Result<(), String> {
        use AlterTableOperation as A;
        match op {
            A::AddColumn {
                if_not_exists,
                column_def,
                column_position,
                ..
            } => {
                if self.find(&column_def.name.value).is_some() {
                    return match if_not_exists {
                        true => Ok(()),
                        false => Err("the column exists".into()),
                    };
                }
                let options: Vec<&ColumnOption> =
                    column_def.options.iter().map(|o| &o.option).collect();
                let declared = declare(
                    &column_def.name.value,
                    &column_def.data_type,
                    &options,
                    charset,
                )?;
                let value = declared.fill_value()?;
                let uid = self.next_uid;
                self.next_uid += 1;
                if declared.primary_key {
                    self.set_primary_key(vec![uid])?;
                }
                if declared.unique {
                    self.indexes.add_unique_column(&declared.spec.name, uid);
                }
                let col = Col {
                    spec: declared.spec,
                    source: Source::New(value),
                    uid,
                };
                self.place(col, column_position.as_ref())
            }
            A::DropColumn {
                column_names,
                if_exists,
                ..
            } => {
                for name in column_names {
                    match self.find(&name.value) {
                        Some(i) => {
                            let uid = self.cols.remove(i).uid;
                            // MySQL drops the column from the key, keeping the rest of it.
                            self.pk.retain(|u| *u != uid);
                            self.indexes.drop_column(uid);
                        }
                        None if *if_exists => {}
                        None => return Err(format!("no column {}", name.value)),
                    }
                }
                match self.cols.is_empty() {
                    true => Err("no column would be left".into()),
                    false => Ok(()),
                }
            }
            A::RenameColumn {
                old_column_name,
                new_column_name,
            } => {
                let i = self.need(&old_column_name.value)?;
                self.rename(i, &new_column_name.value)
            }
            A::ChangeColumn {
                old_name,
                new_name,
                data_type,
                options,
                column_position,
            } => {
                let options: Vec<&ColumnOption> = options.iter().collect();
                let declared = declare(&new_name.value, data_type, &options, charset)?;
                self.change(&old_name.value, declared, column_position.as_ref())
            }
            A::ModifyColumn {
                col_name,
                data_type,
                options,
                column_position,
            } => {
                let options: Vec<&ColumnOption> = options.iter().collect();
                let declared = declare(&col_name.value, data_type, &options, charset)?;
                self.change(&col_name.value, declared, column_position.as_ref())
            }
            A::AddConstraint {
                constraint: TableConstraint::PrimaryKey(pk),
                ..
            } => {
                let specs: Vec<ColumnSpec> = self.cols.iter().map(|c| c.spec.clone()).collect();
                let uids = pk
                    .columns
                    .iter()
                    .map(|c| index_of(&specs, &c.column.expr).map(|i| self.cols[i].uid))
                    .collect::<Result<Vec<_>, _>>()?;
                self.set_primary_key(uids)
            }
            A::DropPrimaryKey { .. } => self.drop_primary_key(),
            // `DROP INDEX `PRIMARY`` and `DROP CONSTRAINT PRIMARY` name the primary key.
            A::DropIndex { name } | A::DropConstraint { name, .. }
                if name.value.eq_ignore_ascii_case("PRIMARY") =>
            {
                self.drop_primary_key()
            }
            A::AddConstraint { constraint, .. } if declared(constraint).is_some() => {
                let (name, parts, unique) = declared(constraint).expect("checked above");
                let specs: Vec<ColumnSpec> = self.cols.iter().map(|c| c.spec.clone()).collect();
                let uids: Vec<usize> = self.cols.iter().map(|c| c.uid).collect();
                self.indexes.add(name, parts, unique, &specs, &uids);
                Ok(())
            }
            A::DropIndex { name } | A::DropConstraint { name, .. } => {
                self.indexes.drop(&name.value);
                Ok(())
            }
            A::AlterColumn {
                column_name,
                op: AlterColumnOperation::SetDefault { .. } | AlterColumnOperation::DropDefault,
            } => self.need(&column_name.value).map(|_| ()),
            A::DropPartitions { .. } => Err("dropping partitions removes their rows".into()),
            A::AddConstraint { .. }
            | A::DropForeignKey { .. }
            | A::AddPartitions { .. }
            | A::RenamePartitions { .. }
            | A::Algorithm { .. }
            | A::Lock { .. }
            | A::AutoIncrement { .. } => Ok(()),
            _ => Err("a clause whose effect on the columns is not known".into()),
        }
    }

    fn rename(&mut self, i: usize, new_name: &str) -> Result<(), String> {
        if self.find(new_name).is_some_and(|j| j != i) {
            return Err(format!("column {new_name} exists"));
        }
        self.cols[i].spec.name = new_name.to_string();
        Ok(())
    }

    fn change(
        &mut self,
        old_name: &str,
        declared: Declared,
        pos: Option<&MySQLColumnPosition>,
    ) -> Result<(), String> {
        let i = self.need(old_name)?;
        self.rename(i, &declared.spec.name)?;
        let col = &self.cols[i];
        match &col.source {
            Source::Old(_) => declared.keeps_values_of(&col.spec)?,
            Source::New(_) if col.spec.kind == declared.spec.kind => {}
            Source::New(_) => {
                return Err("a column added by this statement changes its type".into())
            }
        }
        let uid = col.uid;
        if declared.primary_key {
            self.set_primary_key(vec![uid])?;
        }
        if declared.unique {
            self.indexes.add_unique_column(&declared.spec.name, uid);
        }
        let in_key = self.pk.contains(&uid);
        let col = &mut self.cols[i];
        col.spec = declared.spec;
        // Key columns are NOT NULL whatever the clause says.
        col.spec.nullable &= !in_key;
        if pos.is_some() {
            let col = self.cols.remove(i);
            self.place(col, pos)?;
        }
        Ok(())
    }

    /// `RENAME {INDEX|KEY} from TO to`.
    pub fn rename_index(&mut self, from: &str, to: &str) {
        self.indexes.rename(from, to);
    }

    /// The columns in their new order, where each comes from, the primary key and the
    /// secondary indexes.
    pub fn finish(self) -> Finished {
        let primary_key = self
            .pk
            .iter()
            .filter_map(|uid| self.cols.iter().position(|c| c.uid == *uid))
            .collect();
        let uids: Vec<usize> = self.cols.iter().map(|c| c.uid).collect();
        let indexes = self.indexes.specs(&uids);
        let (columns, sources) = self.cols.into_iter().map(|c| (c.spec, c.source)).unzip();
        Finished {
            columns,
            sources,
            primary_key,
            indexes,
        }
    }
}

/// What [`Columns::finish`] gives.
pub struct Finished {
    pub columns: Vec<ColumnSpec>,
    pub sources: Vec<Source>,
    pub primary_key: Vec<usize>,
    pub indexes: Vec<IndexSpec>,
}
