//! How names and strings are written in our statements: the grammar's own words, and quoting.
//!
//! # Invariant
//! A name or string written by these functions reads back, through the grammar, as exactly
//! the text it was given: a source name is left bare only when PostgreSQL's folding keeps it
//! as it is and it is not one of [`GRAMMAR_WORDS`]; anything else is double-quoted. The grammar
//! (which refuses the words unquoted) and rendering (which quotes them) share this one list, so
//! they cannot disagree. Imports no other part of `sql/`.

/// Words of this grammar that can stand where a source name does; an unquoted name spelled
/// like one would make a forgotten name parse as something else, so it must be quoted.
pub(super) const GRAMMAR_WORDS: [&str; 5] = ["from", "with", "if", "resnapshot", "table"];

/// A source name as SQL: bare when it reads back as itself, else double-quoted.
pub(super) fn source_name_sql(name: &str) -> String {
    if is_plain(name, |c| c.is_ascii_lowercase()) && !GRAMMAR_WORDS.contains(&name) {
        name.to_string()
    } else {
        quote_ident(name)
    }
}

/// A MySQL name as SQL: bare when it is a plain word (case is kept either way).
pub(super) fn mysql_name_sql(name: &str) -> String {
    if is_plain(name, |c| c.is_ascii_alphabetic()) {
        name.to_string()
    } else {
        quote_ident(name)
    }
}

/// `letter_or_underscore (letter | digit | _ | $)*` with `letter` as given.
fn is_plain(name: &str, letter: impl Fn(char) -> bool) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| letter(c) || c == '_')
        && chars.all(|c| letter(c) || c.is_ascii_digit() || c == '_' || c == '$')
}

/// A double-quoted name: `"..."` with `"` doubled.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A SQL string literal: `'...'` with `'` doubled.
pub(super) fn quote_string(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_only_when_needed() {
        assert_eq!(source_name_sql("shop_1"), "shop_1");
        assert_eq!(source_name_sql("Shop"), "\"Shop\"");
        assert_eq!(source_name_sql("my source"), "\"my source\"");
        assert_eq!(source_name_sql("1st"), "\"1st\"");
        assert_eq!(source_name_sql("table"), "\"table\"");
        assert_eq!(source_name_sql("a\"b"), "\"a\"\"b\"");
        assert_eq!(mysql_name_sql("Orders"), "Orders");
        assert_eq!(mysql_name_sql("order items"), "\"order items\"");
        assert_eq!(quote_string("it's"), "'it''s'");
    }
}
