//! sqlparser's parser over one statement's tokens, with our error messages: the token-level
//! reading every statement of ours shares (keywords, names, string literals, the end).
//!
//! # Invariant
//! Every refusal is a [`SqlError::Syntax`] naming what was expected, the token found as
//! written (or "end of statement") and its line and column, which is where the client's cursor
//! should go. Names are resolved as PostgreSQL (and DataFusion) resolve them, since sources are
//! queried as catalogs: unquoted names fold to lower case, `"Double Quoted"` names keep theirs.
//! Backticks are MySQL's quoting and are refused with a hint. MySQL table names keep their case
//! either way, as MySQL compares them case-sensitively on Linux.

use sqlparser::dialect::Dialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};

use super::error::SqlError;
use super::names::GRAMMAR_WORDS;

/// An unquoted keyword (a quoted `"create"` is a name, not a keyword).
pub(super) fn is_keyword(token: &Token, keyword: Keyword) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.keyword == keyword)
}

/// An unquoted word, for the words of our grammar that sqlparser has no keyword for.
pub(super) fn is_word(token: &Token, name: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(name))
}

/// The tokens of `sql` when `claim`, shown its first words (at most four, whitespace left
/// out), says which statement of ours it is; `Ok(None)` leaves the text untouched for another
/// grammar, even a text that does not tokenize (that grammar reports its own error). A claimed
/// text that does not tokenize is a [`SqlError::Tokenize`].
pub(super) fn claim<K>(
    dialect: &dyn Dialect,
    sql: &str,
    claim: impl FnOnce(&[&Token]) -> Option<K>,
) -> Result<Option<(K, Vec<TokenWithSpan>)>, SqlError> {
    let mut tokens = Vec::new();
    // On error the buffer keeps the tokens before the bad one: enough to tell whose it is.
    let tokenized = Tokenizer::new(dialect, sql).tokenize_with_location_into_buf(&mut tokens);
    let words: Vec<&Token> = tokens
        .iter()
        .map(|t| &t.token)
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .take(4)
        .collect();
    let Some(kind) = claim(&words) else {
        return Ok(None);
    };
    match tokenized {
        Ok(()) => Ok(Some((kind, tokens))),
        Err(e) => Err(SqlError::Tokenize {
            message: e.message,
            location: Some(e.location),
        }),
    }
}

/// How a name is read; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NameKind {
    /// A source: folded like PostgreSQL, and not one of [`GRAMMAR_WORDS`] unless quoted.
    Source,
    /// An option name: folded like PostgreSQL.
    Option,
    /// A MySQL database or table: kept as written.
    MySql,
}

/// sqlparser's parser over one statement's tokens, with our error messages.
pub(super) struct Grammar<'a> {
    pub parser: Parser<'a>,
    /// Just past the last token: where "found end of statement" points.
    end: Location,
}

impl<'a> Grammar<'a> {
    /// A reader over `tokens`, which must tokenize one whole text.
    pub fn new(dialect: &'a dyn Dialect, tokens: Vec<TokenWithSpan>) -> Self {
        let end = tokens
            .iter()
            .rev()
            .find(|t| !matches!(t.token, Token::Whitespace(_)))
            .map_or(Location::new(1, 1), |t| t.span.end);
        Self {
            parser: Parser::new(dialect).with_tokens_with_locations(tokens),
            end,
        }
    }

    /// "expected `expected`, found <next token>" at the next token.
    pub fn expected(&self, expected: impl Into<String>) -> SqlError {
        let next = self.parser.peek_token_ref();
        let (found, location) = match &next.token {
            Token::EOF => ("end of statement".to_string(), self.end),
            token => (token.to_string(), next.span.start),
        };
        SqlError::Syntax {
            expected: expected.into(),
            found,
            location: Some(location),
        }
    }

    pub fn next_location(&self) -> Location {
        match self.parser.peek_token_ref() {
            TokenWithSpan {
                token: Token::EOF, ..
            } => self.end,
            next => next.span.start,
        }
    }

    pub fn expect_keyword(&mut self, keyword: Keyword) -> Result<(), SqlError> {
        if is_keyword(&self.parser.peek_token_ref().token, keyword) {
            self.parser.advance_token();
            Ok(())
        } else {
            Err(self.expected(format!("{keyword:?}")))
        }
    }

    /// Consumes `keyword` if it is next (unquoted).
    pub fn keyword(&mut self, keyword: Keyword) -> bool {
        let found = is_keyword(&self.parser.peek_token_ref().token, keyword);
        if found {
            self.parser.advance_token();
        }
        found
    }

    pub fn expect_word(&mut self, name: &str) -> Result<(), SqlError> {
        if is_word(&self.parser.peek_token_ref().token, name) {
            self.parser.advance_token();
            Ok(())
        } else {
            Err(self.expected(name))
        }
    }

    pub fn expect_token(&mut self, token: &Token, expected: &str) -> Result<(), SqlError> {
        if self.parser.consume_token(token) {
            Ok(())
        } else {
            Err(self.expected(expected))
        }
    }

    /// A name of `kind`; `what` says what it names, for errors.
    pub fn name(&mut self, kind: NameKind, what: &str) -> Result<(String, Location), SqlError> {
        let next = self.parser.peek_token_ref();
        let location = next.span.start;
        let name = match &next.token {
            Token::Word(w) if w.quote_style == Some('"') => {
                if w.value.is_empty() {
                    return Err(self.expected(format!("{what} (a quoted name cannot be empty)")));
                }
                w.value.clone()
            }
            Token::Word(w) if w.quote_style.is_none() => match kind {
                NameKind::MySql => w.value.clone(),
                NameKind::Option => w.value.to_lowercase(),
                NameKind::Source => {
                    let folded = w.value.to_lowercase();
                    if GRAMMAR_WORDS.contains(&folded.as_str()) {
                        return Err(self.expected(format!(
                            "{what} (to name a source {folded}, quote it: \"{folded}\")"
                        )));
                    }
                    folded
                }
            },
            Token::Char('`') => {
                return Err(self.expected(format!(
                    "{what} (backticks are MySQL quoting; use double quotes: \"name\")"
                )))
            }
            _ => return Err(self.expected(what)),
        };
        self.parser.advance_token();
        Ok((name, location))
    }

    /// A string literal: `'...'`, `E'...'` or `$$...$$`.
    pub fn string(&mut self, what: &str) -> Result<(String, Location), SqlError> {
        let next = self.parser.peek_token_ref();
        let location = next.span.start;
        let value = match &next.token {
            Token::SingleQuotedString(s) | Token::EscapedStringLiteral(s) => s.clone(),
            Token::DollarQuotedString(d) => d.value.clone(),
            _ => return Err(self.expected(what)),
        };
        self.parser.advance_token();
        Ok((value, location))
    }

    /// `[;]` then nothing: one statement per call.
    pub fn end_of_statement(&mut self) -> Result<(), SqlError> {
        let _ = self.parser.consume_token(&Token::SemiColon);
        match self.parser.peek_token_ref().token {
            Token::EOF => Ok(()),
            _ => Err(self.expected("end of statement")),
        }
    }
}

#[cfg(test)]
mod tests {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::tokenizer::Tokenizer;

    use super::*;

    /// `text` read as one name of `kind`.
    fn name(text: &str, kind: NameKind) -> Result<String, String> {
        let dialect = PostgreSqlDialect {};
        let tokens = Tokenizer::new(&dialect, text)
            .tokenize_with_location()
            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
        Grammar::new(&dialect, tokens)
            .name(kind, "a name")
            .map(|(name, _)| name)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn names_fold_by_kind_and_grammar_words_need_quotes_only_as_sources() {
        assert_eq!(name("Shop", NameKind::Source), Ok("shop".into()));
        assert_eq!(name("Shop", NameKind::Option), Ok("shop".into()));
        assert_eq!(name("Shop", NameKind::MySql), Ok("Shop".into()));
        assert_eq!(name("\"Shop\"", NameKind::Source), Ok("Shop".into()));
        assert_eq!(name("TABLE", NameKind::MySql), Ok("TABLE".into()));
        for word in GRAMMAR_WORDS {
            assert_eq!(
                name(&format!("\"{word}\""), NameKind::Source),
                Ok(word.into())
            );
            let refused = name(word, NameKind::Source).unwrap_err();
            assert!(
                refused.contains(&format!("quote it: \"{word}\"")),
                "{word}: {refused}"
            );
        }
        assert_eq!(
            name("", NameKind::Source),
            Err(
                "syntax error: expected a name, found end of statement at Line: 1, Column: 1"
                    .into()
            )
        );
    }
}
