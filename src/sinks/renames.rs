//! Column renames among a source's schema changes, which a sink does not follow.
//!
//! A changelog keeps its columns by name, so to a sink's query planned again a renamed column
//! looks like a dropped column and a new one. Followed as such, the target would write the old
//! column NULL from the rename on and start a new one empty: one column's history split in two
//! without a word. The schema history keeps each statement and the schema before it, so the
//! rename is found again from them, as the capture followed it (`source::evolve`).

use crate::capture::SchemaChange;
use crate::change::position::BinlogCoord;
use crate::change::schema::TableId;
use crate::source::evolve::{ddl_effect, ColumnOrigin, DdlEffect};

/// Column `from` of `table` renamed to `to` by the statement at `position`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    pub table: TableId,
    pub from: String,
    pub to: String,
    pub position: BinlogCoord,
}

/// The column renames of the captured tables `tables` (indexes into the source's tables) in
/// `history`, in binlog order.
pub fn renames(history: &[SchemaChange], tables: &[usize]) -> Vec<Rename> {
    let mut out = Vec::new();
    for change in history.iter().filter(|c| tables.contains(&c.table)) {
        let before = &change.before;
        // The character set only shapes text columns the statement declares, not names.
        let charset = before.table_charset().ok().flatten();
        let DdlEffect::Evolve(evolution) =
            ddl_effect(&before.id.db, &change.statement, before, charset)
        else {
            continue;
        };
        for (origin, column) in evolution.origins.iter().zip(&evolution.after.columns) {
            if let ColumnOrigin::Kept { from } = origin {
                let old = &before.columns[*from].name;
                if *old != column.name {
                    out.push(Rename {
                        table: before.id.clone(),
                        from: old.clone(),
                        to: column.name.clone(),
                        position: change.position.clone(),
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::schema::{ColumnKind, ColumnSpec, TableSchema};
    use std::sync::Arc;

    fn table(columns: &[&str]) -> Arc<TableSchema> {
        let columns = columns
            .iter()
            .map(|name| ColumnSpec {
                name: name.to_string(),
                kind: ColumnKind::Int {
                    bits: 32,
                    unsigned: false,
                },
                nullable: true,
            })
            .collect();
        Arc::new(TableSchema::new(TableId::new("d", "t"), columns, vec![0]))
    }

    fn change(table_index: usize, offset: u64, statement: &str, before: &[&str]) -> SchemaChange {
        SchemaChange {
            table: table_index,
            position: BinlogCoord::new("binlog.000001", offset),
            commit_ts_micros: 0,
            statement: statement.into(),
            before: table(before),
            after: table(before),
        }
    }

    #[test]
    fn renames_are_told_from_drops_and_adds() {
        let history = [
            change(0, 10, "ALTER TABLE t ADD COLUMN w INT", &["id", "v"]),
            change(
                0,
                20,
                "ALTER TABLE t RENAME COLUMN v TO v2",
                &["id", "v", "w"],
            ),
            change(
                0,
                30,
                "ALTER TABLE t DROP COLUMN w, ADD COLUMN x INT",
                &["id", "v2", "w"],
            ),
            change(0, 40, "ALTER TABLE d.t CHANGE x y INT", &["id", "v2", "x"]),
            change(1, 50, "ALTER TABLE t RENAME COLUMN v TO z", &["id", "v"]),
        ];
        let found: Vec<(String, String, u64)> = renames(&history, &[0])
            .into_iter()
            .map(|r| (r.from, r.to, r.position.offset))
            .collect();
        assert_eq!(
            found,
            [("v".into(), "v2".into(), 20), ("x".into(), "y".into(), 40)]
        );
    }
}
