//! The binlog reader: a replica connection that turns the server's event stream into whole,
//! typed source transactions.
//!
//! * [`reader`]: the replica connection, its start position and reconnects;
//! * [`exec`]: one table's changes as an unbounded DataFusion execution plan;
//! * [`assemble`]: events into transactions with positions, DDL and skipped events;
//! * [`rows`]: row images straight into Arrow, checked against the table's schema;
//! * [`wire`]: each column's layout in a row image and its value decoding;
//! * [`decimal`]: MySQL's binary `DECIMAL` into an unscaled integer;
//! * [`mysql_json`]: MySQL's binary JSON into the text MySQL itself prints.
//!
//! mysql_async registers as a replica and frames events; mysql_common parses headers, table
//! maps and rows-event headers; the row bytes are ours (see `rows` for why).

pub mod assemble;
mod decimal;
pub mod exec;
pub mod mysql_json;
pub mod reader;
pub mod rows;
pub mod wire;

use std::sync::Arc;

pub use assemble::Assembler;
pub use reader::{BinlogReader, BinlogReaderOptions};

use crate::source::error::{SourceError, SourceResult};
use crate::source::schema::TableId;

/// Which tables the reader decodes; rows of other tables are skipped unread.
pub type TableFilter = Arc<dyn Fn(&TableId) -> bool + Send + Sync>;

/// The replica server id a capture's stream registers with unless told otherwise. Every dump
/// connection open at the same time needs its own id (a second one with the same id makes the
/// server drop the first).
pub const DEFAULT_SERVER_ID: u32 = 5400;
/// The default id of a snapshot's window reader: the stream's id plus one.
pub const DEFAULT_WINDOW_SERVER_ID: u32 = DEFAULT_SERVER_ID + 1;

/// Databases that are never captured.
pub const SYSTEM_DATABASES: [&str; 4] =
    ["mysql", "information_schema", "performance_schema", "sys"];

/// Builds a filter from comma-separated `db.table` patterns where `*` matches any run of
/// characters (`shop.*, crm.customers`). System databases are never captured.
pub fn table_filter(patterns: &str) -> SourceResult<TableFilter> {
    let mut parsed = Vec::new();
    for p in patterns.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (db, table) = p.split_once('.').ok_or_else(|| {
            SourceError::Config(format!(
                "table pattern {p:?} must be db.table (wildcards: *)"
            ))
        })?;
        parsed.push((db.to_string(), table.to_string()));
    }
    if parsed.is_empty() {
        return Err(SourceError::Config("no table patterns given".into()));
    }
    Ok(Arc::new(move |t: &TableId| {
        !SYSTEM_DATABASES.contains(&t.db.as_str())
            && parsed
                .iter()
                .any(|(d, n)| glob_match(d, &t.db) && glob_match(n, &t.table))
    }))
}

/// Matches `text` against `pattern` where `*` matches any run of characters.
fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] != '*' && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_patterns_match_with_wildcards() {
        let f = table_filter("shop.*, crm.cust*").unwrap();
        assert!(f(&TableId::new("shop", "orders")));
        assert!(f(&TableId::new("crm", "customers")));
        assert!(!f(&TableId::new("crm", "leads")));
        assert!(!f(&TableId::new("mysql", "user")));
        assert!(table_filter("nodot").is_err());
        assert!(glob_match("*a*b", "xxaxxb") && !glob_match("a*b", "ab_c"));
    }
}
