//! Which tables a capture decodes: `db.table` patterns with `*` wildcards, never the
//! server's own databases.

use std::sync::Arc;

use crate::change::schema::TableId;
use crate::source::error::{SourceError, SourceResult};

/// Which tables the reader decodes; rows of other tables are skipped unread.
pub type TableFilter = Arc<dyn Fn(&TableId) -> bool + Send + Sync>;

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
