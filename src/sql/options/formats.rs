//! The text forms of the string-valued options: `tables` patterns, `chunk_key` lists,
//! `snapshot_mode` names and `start_position`s, each parsed from the string literal's content.
//!
//! # Invariant
//! Each parser accepts exactly the form the option table documents for its option and returns
//! the typed value the capture takes, or a message (without the option's name, which the
//! caller adds with the value's position) saying what is wrong and how to write it. MySQL names
//! keep their case: MySQL compares table names case-sensitively on Linux.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::capture::SnapshotMode;
use crate::change::position::StartPosition;
use crate::change::schema::TableId;

/// `snapshot_mode` as written, before `start_position` is folded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ModeName {
    Initial,
    SnapshotOnly,
    StreamOnly,
}

impl ModeName {
    const ALL: [ModeName; 3] = [
        ModeName::Initial,
        ModeName::SnapshotOnly,
        ModeName::StreamOnly,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ModeName::Initial => "initial",
            ModeName::SnapshotOnly => "snapshot_only",
            ModeName::StreamOnly => "stream_only",
        }
    }

    pub fn of(mode: &SnapshotMode) -> Self {
        match mode {
            SnapshotMode::Initial => ModeName::Initial,
            SnapshotMode::SnapshotOnly => ModeName::SnapshotOnly,
            SnapshotMode::StreamOnly(_) => ModeName::StreamOnly,
        }
    }

    /// Case-insensitive, like PostgreSQL's enum-valued settings.
    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!("expected 'initial', 'snapshot_only' or 'stream_only', found '{s}'")
            })
    }
}

/// `'shop.*, crm.customers'`: comma-separated patterns with exactly one dot each.
pub(super) fn parse_tables(s: &str) -> Result<Vec<String>, String> {
    if s.trim().is_empty() {
        return Err("no table pattern given; use '*.*' for every table".to_string());
    }
    s.split(',')
        .map(|item| {
            let pattern = item.trim();
            split_table(pattern, "pattern").map(|_| pattern.to_string())
        })
        .collect()
}

/// Splits `db.table` (one dot, both parts non-empty); `what` names the item in errors.
fn split_table<'a>(item: &'a str, what: &str) -> Result<(&'a str, &'a str), String> {
    if item.is_empty() {
        return Err(format!("empty {what} in the list"));
    }
    match item.split_once('.') {
        Some((db, table)) if !table.contains('.') && !db.is_empty() && !table.is_empty() => {
            Ok((db, table))
        }
        _ => Err(format!(
            "{what} '{item}' must be db.table, with exactly one dot"
        )),
    }
}

/// `'shop.items:c, shop.orders:cust'`: one concrete table and its column per item.
pub(super) fn parse_chunk_keys(s: &str) -> Result<BTreeMap<TableId, String>, String> {
    if s.trim().is_empty() {
        return Err(
            "no db.table:column given; leave the option out to chunk by the first \
                    primary-key column"
                .to_string(),
        );
    }
    let mut keys = BTreeMap::new();
    for item in s.split(',').map(str::trim) {
        let Some((table, column)) = item.split_once(':') else {
            return Err(format!("'{item}' must be db.table:column"));
        };
        let (db, name) = split_table(table.trim(), "table")?;
        if table.contains('*') {
            return Err(format!(
                "'{item}' names a pattern; a chunk key belongs to one table"
            ));
        }
        let column = column.trim();
        if column.is_empty() {
            return Err(format!("'{item}' has an empty column name"));
        }
        let id = TableId::new(db, name);
        if keys.contains_key(&id) {
            return Err(format!("table {id} is given two chunk keys"));
        }
        keys.insert(id, column.to_string());
    }
    Ok(keys)
}

/// `start_position`: `file:offset` or a GTID set, as the binlog reader takes it.
pub(super) fn parse_start(s: &str) -> Result<StartPosition, String> {
    if s.trim().is_empty() {
        // An empty GTID set would mean "from the first transaction ever": too easy to do by
        // accident, so it must be spelled out as a position.
        return Err(
            "empty; leave the option out to start at the current end of the binlog".to_string(),
        );
    }
    StartPosition::from_str(s).map_err(|e| e.to_string())
}
