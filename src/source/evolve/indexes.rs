//! The secondary indexes a DDL statement leaves a table with, named and ordered as the server
//! keeps them: `CREATE INDEX`, `DROP INDEX`, an `ALTER TABLE`'s `ADD`/`DROP`/`RENAME` of an index,
//! a column declared `UNIQUE`, and a dropped column leaving the indexes it was part of.
//!
//! # Invariant
//! An index is kept only when every part of it is a whole column or a prefix of one (a prefix
//! index finds the same rows for an equality as the whole column does); one with an expression
//! part is left out, as the snapshot's reading of `information_schema` leaves it out. Indexes
//! only ever speed lookups up: a statement read here changes no row and no column.

use sqlparser::ast::{Expr, FunctionArguments, IndexColumn, TableConstraint};

use crate::change::schema::{ColumnSpec, IndexSpec};

/// An index while the clauses of a statement apply: its parts as column ids that survive
/// moves and renames (the caller's numbering).
#[derive(Debug, Clone)]
pub struct Idx {
    pub name: String,
    pub parts: Vec<usize>,
    pub unique: bool,
}

/// The column `part` of an index names: a column, or a prefix of one (`name(10)`); `None` for
/// an expression.
fn part_column(columns: &[ColumnSpec], part: &IndexColumn) -> Option<usize> {
    let name = match &part.column.expr {
        Expr::Identifier(i) => &i.value,
        Expr::Function(f) if f.name.0.len() == 1 => {
            let FunctionArguments::List(list) = &f.args else {
                return None;
            };
            if list.args.len() != 1 {
                return None;
            }
            &f.name.0[0].as_ident()?.value
        }
        _ => return None,
    };
    columns
        .iter()
        .position(|c| c.name.eq_ignore_ascii_case(name))
}

/// What an index constraint declares: its name as written, its parts and whether it is
/// unique; `None` for constraints that are not secondary indexes.
pub fn declared(constraint: &TableConstraint) -> Option<(Option<&str>, &[IndexColumn], bool)> {
    Some(match constraint {
        TableConstraint::Index(i) => (i.name.as_ref().map(|n| n.value.as_str()), &i.columns, false),
        TableConstraint::Unique(u) => (
            u.index_name
                .as_ref()
                .or(u.name.as_ref())
                .map(|n| n.value.as_str()),
            &u.columns,
            true,
        ),
        TableConstraint::FulltextOrSpatial(f) => (
            f.opt_index_name.as_ref().map(|n| n.value.as_str()),
            &f.columns,
            false,
        ),
        _ => return None,
    })
}

/// The indexes of a table while a statement applies; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Indexes(pub Vec<Idx>);

impl Indexes {
    /// `table`'s indexes, numbered by column position.
    pub fn of(indexes: &[IndexSpec]) -> Self {
        Self(
            indexes
                .iter()
                .map(|i| Idx {
                    name: i.name.clone(),
                    parts: i.columns.clone(),
                    unique: i.unique,
                })
                .collect(),
        )
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.0
            .iter()
            .position(|i| i.name.eq_ignore_ascii_case(name))
    }

    /// A name the server gives an index declared without one: its first column's, then
    /// `_2`, `_3`... while taken.
    fn free_name(&self, base: &str) -> String {
        let mut name = base.to_string();
        let mut k = 2;
        while self.find(&name).is_some() {
            name = format!("{base}_{k}");
            k += 1;
        }
        name
    }

    /// Adds an index over `parts` of `columns` (whose ids are `ids`), named `name` or after its
    /// first column; one with an expression part is left out.
    pub fn add(
        &mut self,
        name: Option<&str>,
        parts: &[IndexColumn],
        unique: bool,
        columns: &[ColumnSpec],
        ids: &[usize],
    ) {
        let Some(positions) = parts
            .iter()
            .map(|p| part_column(columns, p))
            .collect::<Option<Vec<usize>>>()
            .filter(|p| !p.is_empty())
        else {
            return;
        };
        let name = match name {
            Some(n) => n.to_string(),
            None => self.free_name(&columns[positions[0]].name),
        };
        // `CREATE OR REPLACE INDEX` (MariaDB) replaces one of the same name.
        self.drop(&name);
        self.0.push(Idx {
            name,
            parts: positions.iter().map(|p| ids[*p]).collect(),
            unique,
        });
    }

    /// The unique index a column declared `UNIQUE` gets, named after it.
    pub fn add_unique_column(&mut self, column: &str, id: usize) {
        let name = self.free_name(column);
        self.0.push(Idx {
            name,
            parts: vec![id],
            unique: true,
        });
    }

    /// Drops the index `name`; nothing when there is none (one with an expression part).
    pub fn drop(&mut self, name: &str) {
        if let Some(i) = self.find(name) {
            self.0.remove(i);
        }
    }

    pub fn rename(&mut self, from: &str, to: &str) {
        if let Some(i) = self.find(from) {
            self.0[i].name = to.to_string();
        }
    }

    /// Column `id` is dropped: it leaves every index it is part of, and an index left with no
    /// part goes (as the server does).
    pub fn drop_column(&mut self, id: usize) {
        for index in &mut self.0 {
            index.parts.retain(|p| *p != id);
        }
        self.0.retain(|i| !i.parts.is_empty());
    }

    /// The indexes as specs over the columns whose ids are `ids` (in their order).
    pub fn specs(&self, ids: &[usize]) -> Vec<IndexSpec> {
        self.0
            .iter()
            .filter_map(|i| {
                let columns = i
                    .parts
                    .iter()
                    .map(|p| ids.iter().position(|id| id == p))
                    .collect::<Option<Vec<usize>>>()?;
                Some(IndexSpec {
                    name: i.name.clone(),
                    columns,
                    unique: i.unique,
                })
            })
            .collect()
    }
}
