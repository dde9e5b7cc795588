//! `AS OF` after a table name: time travel, written as the `as_of` table function.
//!
//! `FROM src.db.t AS OF '<position>'` and `FROM src.db.t AS OF TIMESTAMP '<time>'` become
//! `FROM as_of('src.db.t', '<position>') AS t` (and `TIMESTAMP '<time>'` as the second
//! argument). The alias keeps the table's own name for qualified columns unless the query
//! gives one. Every other character of the text stays as written.
//!
//! # Invariant
//! Only a text that no SQL grammar here reads otherwise is changed: in PostgreSQL's grammar a
//! name followed by `AS OF` and a string (or `TIMESTAMP` and a string) is an error, so the
//! rewrite never changes what a valid statement means. Words inside strings, quoted names and
//! comments are tokens of their own and never match.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::{Keyword, RESERVED_FOR_TABLE_ALIAS};
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use super::script::Offsets;

/// `sql` with every `name AS OF point` written as the `as_of` table function; `None` when it
/// has none (or does not tokenize: the parser then reports the text as it is).
pub fn rewrite_as_of(sql: &str) -> Option<String> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    let offsets = Offsets::new(sql);
    // Byte ranges of every token: a token ends where the next one starts.
    let starts: Vec<usize> = tokens
        .iter()
        .map(|t| offsets.of(t.span.start.line, t.span.start.column))
        .chain(std::iter::once(sql.len()))
        .collect();
    let range = |i: usize| starts[i]..starts[i + 1];
    // The tokens that are not whitespace or comments, by their index in `tokens`.
    let code: Vec<usize> = (0..tokens.len())
        .filter(|i| !matches!(tokens[*i].token, Token::Whitespace(_) | Token::EOF))
        .collect();
    let token = |k: usize| code.get(k).map(|i| &tokens[*i]);
    let mut replacements: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    for k in 0..code.len() {
        if !(is_keyword(token(k), Keyword::AS) && is_keyword(token(k + 1), Keyword::OF)) {
            continue;
        }
        // The point: a string, or TIMESTAMP and a string.
        let (point_start, last) = match (token(k + 2).map(|t| &t.token), token(k + 3)) {
            (Some(Token::SingleQuotedString(_)), _) => (k + 2, k + 2),
            (Some(_), Some(t))
                if is_keyword(token(k + 2), Keyword::TIMESTAMP)
                    && matches!(t.token, Token::SingleQuotedString(_)) =>
            {
                (k + 2, k + 3)
            }
            _ => continue,
        };
        // The name before AS: words joined by periods.
        let Some(name_end) = k.checked_sub(1).filter(|j| is_word(token(*j))) else {
            continue;
        };
        let mut name_start = name_end;
        while name_start >= 2
            && matches!(token(name_start - 1).map(|t| &t.token), Some(Token::Period))
            && is_word(token(name_start - 2))
        {
            name_start -= 2;
        }
        let name = &sql[starts[code[name_start]]..range(code[name_end]).end];
        let point = &sql[starts[code[point_start]]..range(code[last]).end];
        let has_alias = match token(last + 1) {
            Some(TokenWithSpan {
                token: Token::Word(w),
                ..
            }) => w.keyword == Keyword::AS || !RESERVED_FOR_TABLE_ALIAS.contains(&w.keyword),
            _ => false,
        };
        let mut call = format!("as_of('{}', {point})", name.replace('\'', "''"));
        if !has_alias {
            call.push_str(" AS ");
            call.push_str(&sql[range(code[name_end])]);
        }
        replacements.push((starts[code[name_start]]..range(code[last]).end, call));
    }
    if replacements.is_empty() {
        return None;
    }
    let mut out = sql.to_string();
    for (range, text) in replacements.into_iter().rev() {
        out.replace_range(range, &text);
    }
    Some(out)
}

fn is_keyword(token: Option<&TokenWithSpan>, keyword: Keyword) -> bool {
    matches!(token, Some(TokenWithSpan { token: Token::Word(w), .. }) if w.keyword == keyword && w.quote_style.is_none())
}

fn is_word(token: Option<&TokenWithSpan>) -> bool {
    matches!(
        token,
        Some(TokenWithSpan {
            token: Token::Word(_),
            ..
        })
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        rewrite_as_of(sql).unwrap_or_else(|| panic!("{sql} is not rewritten"))
    }

    #[test]
    fn a_name_as_of_a_point_becomes_the_table_function() {
        assert_eq!(
            rewritten("SELECT * FROM src.db.t AS OF 'binlog.000001:4' WHERE id = 1"),
            "SELECT * FROM as_of('src.db.t', 'binlog.000001:4') AS t WHERE id = 1"
        );
        assert_eq!(
            rewritten("select t.id from db.t as of timestamp '2026-12-01 10:00:00' as x"),
            "select t.id from as_of('db.t', timestamp '2026-12-01 10:00:00') as x"
        );
        // Quoted names stay as written; the alias is the last part.
        assert_eq!(
            rewritten("SELECT * FROM s.\"Shop\".\"Order's\" AS OF 'p' o JOIN s.d.u AS OF 'p' ON true"),
            "SELECT * FROM as_of('s.\"Shop\".\"Order''s\"', 'p') o JOIN as_of('s.d.u', 'p') AS u ON true"
        );
        // Across lines and after multi-byte characters.
        assert_eq!(
            rewritten("SELECT 'é', id\nFROM  t\n  AS\tOF 'x';"),
            "SELECT 'é', id\nFROM  as_of('t', 'x') AS t;"
        );
    }

    #[test]
    fn other_texts_are_left_alone() {
        for sql in [
            "SELECT 1 AS of FROM t",
            "SELECT * FROM t AS of",
            "SELECT 'FROM t AS OF ''x''' AS s",
            "SELECT * FROM t -- AS OF 'x'\n",
            "SELECT * FROM t AS \"of\" 'x'",
            "SELECT 'unterminated",
        ] {
            assert_eq!(rewrite_as_of(sql), None, "{sql}");
        }
    }
}
