//! The grammar of `SUBSCRIBE`, in the three forms a client can read an endless result with:
//!
//! ```text
//! SUBSCRIBE [TO] (query) | [TO] name [AS OF point] [WITH (snapshot = bool, progress = bool)]
//! COPY (SUBSCRIBE ...) TO STDOUT [copy options]
//! DECLARE cursor [NO SCROLL] CURSOR [WITHOUT HOLD] FOR SUBSCRIBE ...
//! ```
//!
//! # Invariant
//! [`parse_subscribe`] claims a text exactly when it is one of these forms by its leading
//! tokens (`SUBSCRIBE`, `COPY ( SUBSCRIBE`, `DECLARE name ... CURSOR ... FOR SUBSCRIBE`); any
//! other text is `Ok(None)`, untouched. The query and the `AS OF` point are kept as written,
//! for DataFusion to plan and evaluate, so no text is interpreted twice; the options are
//! typed here.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};

use super::error::SqlError;
use super::grammar::{is_keyword, is_word};
use super::script::Offsets;

/// A subscription: a query's rows at a start point, then every change to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// The query as written (`SELECT * FROM name` for the name form).
    pub query: String,
    /// The `AS OF` point as written: an expression (a position's text, a time).
    pub as_of: Option<String>,
    /// Whether the rows at the start point come first (default true).
    pub snapshot: bool,
    /// Whether progress rows tell how far the subscription has read (default false).
    pub progress: bool,
}

/// A statement that reads a subscription, by how its rows reach the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscribeStatement {
    /// `SUBSCRIBE ...`: rows as a `COPY` stream in text format.
    Subscribe(Subscribe),
    /// `COPY (SUBSCRIBE ...) TO STDOUT ...`; `copy` is the statement with `SELECT 1` in place
    /// of the subscription, which carries the `COPY` options for the `COPY` grammar.
    Copy { subscribe: Subscribe, copy: String },
    /// `DECLARE cursor CURSOR FOR SUBSCRIBE ...`: rows fetched with `FETCH`.
    Declare {
        cursor: String,
        hold: bool,
        subscribe: Subscribe,
    },
}

/// The options `SUBSCRIBE ... WITH (...)` takes.
pub const SUBSCRIBE_OPTIONS: [&str; 2] = ["snapshot", "progress"];

/// Reads `sql` if it is a subscription (see the module docs); `Ok(None)` for any other text.
pub fn parse_subscribe(sql: &str) -> Result<Option<SubscribeStatement>, SqlError> {
    // A text that does not tokenize is not claimed: its own grammar reports the error.
    let Some(tokens) = significant_tokens(sql) else {
        return Ok(None);
    };
    let mut reader = Reader::new(&tokens, sql, 0);
    let first = |kw| tokens.first().is_some_and(|t| is_keyword(&t.token, kw));
    let statement = if tokens
        .first()
        .is_some_and(|t| is_word(&t.token, "SUBSCRIBE"))
    {
        let subscribe = reader.subscribe(false)?;
        SubscribeStatement::Subscribe(subscribe)
    } else if first(Keyword::COPY)
        && tokens.get(1).is_some_and(|t| t.token == Token::LParen)
        && tokens
            .get(2)
            .is_some_and(|t| is_word(&t.token, "SUBSCRIBE"))
    {
        reader.at = 2;
        let subscribe = reader.subscribe(true)?;
        let close = reader.location();
        reader.expect(&Token::RParen, "the ) that closes COPY (SUBSCRIBE ...)")?;
        let rest = reader.offsets.of(close.line, close.column);
        let copy = format!("COPY (SELECT 1{}", &sql[rest..]);
        // The rest is the COPY grammar's to read.
        reader.at = tokens.len();
        SubscribeStatement::Copy { subscribe, copy }
    } else if first(Keyword::DECLARE) {
        let Some(cursor_at) = declares_subscription(&tokens) else {
            return Ok(None);
        };
        reader.at = 1;
        let cursor = reader.name("a cursor name")?;
        let mut hold = false;
        // PostgreSQL's cursor options (NO SCROLL, INSENSITIVE, ...) change nothing for a
        // cursor that only moves forward; then CURSOR [WITH | WITHOUT HOLD] FOR.
        reader.at = cursor_at + 1;
        if reader.keyword(Keyword::WITH) {
            reader.expect_keyword(Keyword::HOLD)?;
            hold = true;
        } else if reader.keyword(Keyword::WITHOUT) {
            reader.expect_keyword(Keyword::HOLD)?;
        }
        reader.expect_keyword(Keyword::FOR)?;
        let subscribe = reader.subscribe(false)?;
        SubscribeStatement::Declare {
            cursor,
            hold,
            subscribe,
        }
    } else {
        return Ok(None);
    };
    reader.end()?;
    Ok(Some(statement))
}

/// `FETCH` and `CLOSE`, which read and end a cursor (of a subscription or of a query).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CursorCommand {
    /// `FETCH [NEXT | FORWARD] [count | ALL] [FROM | IN] name`; `count` is `None` for `ALL`.
    Fetch { cursor: String, count: Option<u64> },
    /// `CLOSE name`, or `CLOSE ALL` (`None`).
    Close { cursor: Option<String> },
}

/// Reads `sql` if it is a `FETCH` or `CLOSE` (see [`CursorCommand`]); `Ok(None)` otherwise.
/// Directions other than forward are refused: these cursors only move forward.
pub fn parse_cursor_command(sql: &str) -> Result<Option<CursorCommand>, SqlError> {
    // A text that does not tokenize is not claimed: its own grammar reports the error.
    let Some(tokens) = significant_tokens(sql) else {
        return Ok(None);
    };
    let mut reader = Reader::new(&tokens, sql, 1);
    let first = |kw| tokens.first().is_some_and(|t| is_keyword(&t.token, kw));
    let command = if first(Keyword::FETCH) {
        let mut count = Some(1);
        if reader.keyword(Keyword::NEXT) {
        } else {
            let forward = reader.keyword(Keyword::FORWARD);
            match reader.peek() {
                Some(Token::Number(n, _)) => {
                    count = Some(n.parse().map_err(|_| SqlError::InvalidValue {
                        option: "FETCH",
                        message: format!("expected a row count, found {n}"),
                        location: Some(reader.location()),
                    })?);
                    reader.at += 1;
                }
                Some(t) if is_keyword(t, Keyword::ALL) => {
                    count = None;
                    reader.at += 1;
                }
                Some(t)
                    if !forward
                        && [
                            Keyword::PRIOR,
                            Keyword::FIRST,
                            Keyword::LAST,
                            Keyword::ABSOLUTE,
                            Keyword::RELATIVE,
                            Keyword::BACKWARD,
                        ]
                        .iter()
                        .any(|kw| is_keyword(t, *kw)) =>
                {
                    return Err(SqlError::Unsupported {
                        feature: format!("FETCH {t}"),
                        hint: Some("cursors move forward only: FETCH [FORWARD] count | ALL".into()),
                        location: Some(reader.location()),
                    });
                }
                _ => {}
            }
        }
        if !reader.keyword(Keyword::FROM) {
            reader.keyword(Keyword::IN);
        }
        let cursor = reader.name("a cursor name")?;
        CursorCommand::Fetch { cursor, count }
    } else if first(Keyword::CLOSE) {
        let cursor = if reader.keyword(Keyword::ALL) {
            None
        } else {
            Some(reader.name("a cursor name or ALL")?)
        };
        CursorCommand::Close { cursor }
    } else {
        return Ok(None);
    };
    reader.end()?;
    Ok(Some(command))
}

/// The tokens of `sql` but whitespace and comments, or `None` when it does not tokenize.
fn significant_tokens(sql: &str) -> Option<Vec<TokenWithSpan>> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    Some(
        tokens
            .into_iter()
            .filter(|t| !matches!(t.token, Token::Whitespace(_)))
            .collect(),
    )
}

/// Where `CURSOR` is in a `DECLARE name ... CURSOR [WITH[OUT] HOLD] FOR SUBSCRIBE`, if the
/// tokens are one (the words between the name and `CURSOR` are PostgreSQL's cursor options).
fn declares_subscription(tokens: &[TokenWithSpan]) -> Option<usize> {
    let cursor = tokens
        .iter()
        .take(8)
        .position(|t| is_keyword(&t.token, Keyword::CURSOR))?;
    let mut at = cursor + 1;
    if tokens.get(at).is_some_and(|t| {
        is_keyword(&t.token, Keyword::WITH) || is_keyword(&t.token, Keyword::WITHOUT)
    }) {
        at += 2;
    }
    let is_for = tokens
        .get(at)
        .is_some_and(|t| is_keyword(&t.token, Keyword::FOR));
    let subscribes = tokens
        .get(at + 1)
        .is_some_and(|t| is_word(&t.token, "SUBSCRIBE"));
    (is_for && subscribes).then_some(cursor)
}

/// A reader over a statement's tokens (whitespace dropped) and its text.
struct Reader<'a> {
    tokens: &'a [TokenWithSpan],
    at: usize,
    offsets: Offsets<'a>,
    text: &'a str,
}

impl<'a> Reader<'a> {
    /// A reader of `text`'s `tokens`, at token `at`.
    fn new(tokens: &'a [TokenWithSpan], text: &'a str, at: usize) -> Self {
        Self {
            tokens,
            at,
            offsets: Offsets::new(text),
            text,
        }
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at).map(|t| &t.token)
    }

    /// Where the next token starts (just past the text at its end).
    fn location(&self) -> Location {
        match self.tokens.get(self.at) {
            Some(t) => t.span.start,
            None => self
                .tokens
                .last()
                .map_or(Location::new(1, 1), |t| t.span.end),
        }
    }

    fn offset(&self, location: Location) -> usize {
        self.offsets.of(location.line, location.column)
    }

    fn expected(&self, what: impl Into<String>) -> SqlError {
        SqlError::Syntax {
            expected: what.into(),
            found: self
                .peek()
                .map_or_else(|| "end of statement".to_string(), ToString::to_string),
            location: Some(self.location()),
        }
    }

    fn keyword(&mut self, keyword: Keyword) -> bool {
        let found = self.peek().is_some_and(|t| is_keyword(t, keyword));
        if found {
            self.at += 1;
        }
        found
    }

    fn expect_keyword(&mut self, keyword: Keyword) -> Result<(), SqlError> {
        if self.keyword(keyword) {
            Ok(())
        } else {
            Err(self.expected(format!("{keyword:?}")))
        }
    }

    fn expect(&mut self, token: &Token, what: &str) -> Result<(), SqlError> {
        if self.peek() == Some(token) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    /// An identifier: folded to lower case unless quoted.
    fn name(&mut self, what: &str) -> Result<String, SqlError> {
        let name = match self.peek() {
            Some(Token::Word(w)) if w.quote_style == Some('"') => w.value.clone(),
            Some(Token::Word(w)) if w.quote_style.is_none() => w.value.to_lowercase(),
            _ => return Err(self.expected(what)),
        };
        self.at += 1;
        Ok(name)
    }

    /// `[;]` and nothing after it.
    fn end(&mut self) -> Result<(), SqlError> {
        if self.peek() == Some(&Token::SemiColon) {
            self.at += 1;
        }
        match self.peek() {
            None | Some(Token::EOF) => Ok(()),
            _ => Err(self.expected("end of statement")),
        }
    }

    /// The text from token `from` to the token at `self.at` (exclusive), trimmed.
    fn text_between(&self, from: usize) -> String {
        let start = self.offset(self.tokens[from].span.start);
        let end = self.offset(self.location());
        self.text[start..end].trim().to_string()
    }

    /// Moves past the tokens of one balanced stretch, stopping before a token at depth 0 for
    /// which `stop` holds (or an unmatched `)`, `;` or the end).
    fn skip_until(&mut self, stop: impl Fn(&Token) -> bool) {
        let mut depth = 0usize;
        while let Some(token) = self.peek() {
            match token {
                Token::EOF | Token::SemiColon if depth == 0 => return,
                Token::LParen => depth += 1,
                Token::RParen if depth == 0 => return,
                Token::RParen => depth -= 1,
                t if depth == 0 && stop(t) => return,
                _ => {}
            }
            self.at += 1;
        }
    }

    /// `SUBSCRIBE [TO] (query) | name [AS OF point] [WITH (...)]`; inside `COPY (...)` when
    /// `nested` (the closing parenthesis ends it).
    fn subscribe(&mut self, nested: bool) -> Result<Subscribe, SqlError> {
        // SUBSCRIBE
        self.at += 1;
        self.keyword(Keyword::TO);
        let query = if self.peek() == Some(&Token::LParen) {
            self.at += 1;
            let from = self.at;
            self.skip_until(|_| false);
            if self.at == from {
                return Err(self.expected("a query inside SUBSCRIBE (...)"));
            }
            let query = self.text_between(from);
            self.expect(&Token::RParen, "the ) that closes the subscribed query")?;
            query
        } else {
            let from = self.at;
            self.name("a query in parentheses or a table's name after SUBSCRIBE")?;
            while self.peek() == Some(&Token::Period) {
                self.at += 1;
                self.name("a table's name")?;
            }
            format!("SELECT * FROM {}", self.text_between(from))
        };
        let as_of = if self.keyword(Keyword::AS) {
            self.expect_keyword(Keyword::OF)?;
            let from = self.at;
            self.skip_until(|t| is_keyword(t, Keyword::WITH));
            if self.at == from {
                return Err(self.expected("a position or a time after AS OF"));
            }
            Some(self.text_between(from))
        } else {
            None
        };
        let mut subscribe = Subscribe {
            query,
            as_of,
            snapshot: true,
            progress: false,
        };
        if self.keyword(Keyword::WITH) {
            self.options(&mut subscribe)?;
        }
        if nested && self.peek() != Some(&Token::RParen) {
            return Err(self.expected("the ) that closes COPY (SUBSCRIBE ...)"));
        }
        Ok(subscribe)
    }

    /// `(name [=] bool [, ...])`.
    fn options(&mut self, subscribe: &mut Subscribe) -> Result<(), SqlError> {
        self.expect(&Token::LParen, "( after WITH")?;
        let mut seen: Vec<&'static str> = Vec::new();
        loop {
            let location = self.location();
            let name = self.name("an option name (snapshot, progress)")?;
            let Some(&option) = SUBSCRIBE_OPTIONS.iter().find(|o| **o == name) else {
                return Err(SqlError::UnknownOption {
                    name,
                    known: SUBSCRIBE_OPTIONS.to_vec(),
                    location: Some(location),
                });
            };
            if seen.contains(&option) {
                return Err(SqlError::DuplicateOption {
                    option,
                    location: Some(location),
                });
            }
            seen.push(option);
            let _ = self.expect(&Token::Eq, "=");
            // A bare option name turns it on, as in PostgreSQL's option lists.
            let value = match self.peek() {
                Some(Token::Comma | Token::RParen) => true,
                _ => self.boolean(option)?,
            };
            match option {
                "snapshot" => subscribe.snapshot = value,
                _ => subscribe.progress = value,
            }
            if self.peek() == Some(&Token::Comma) {
                self.at += 1;
                continue;
            }
            return self.expect(&Token::RParen, ", or ) after an option");
        }
    }

    /// `true`/`false` (or `on`/`off`, quoted or not), as PostgreSQL reads a boolean option.
    fn boolean(&mut self, option: &'static str) -> Result<bool, SqlError> {
        let location = self.location();
        let text = match self.peek() {
            Some(Token::Word(w)) => w.value.to_lowercase(),
            Some(Token::SingleQuotedString(s)) => s.to_lowercase(),
            Some(Token::Number(n, _)) => n.clone(),
            _ => return Err(self.expected(format!("true or false for {option}"))),
        };
        let value = match text.as_str() {
            "true" | "on" | "1" => true,
            "false" | "off" | "0" => false,
            _ => {
                return Err(SqlError::InvalidValue {
                    option,
                    message: format!("expected true or false, found {text}"),
                    location: Some(location),
                })
            }
        };
        self.at += 1;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlstate::HasSqlState;
    use crate::sqlstate::SqlState;

    fn subscribe(sql: &str) -> Subscribe {
        match parse_subscribe(sql) {
            Ok(Some(SubscribeStatement::Subscribe(s))) => s,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn the_plain_form_keeps_query_and_point_as_written() {
        let s = subscribe(
            "SUBSCRIBE TO (SELECT id, \"a)b\" FROM s.db.t WHERE f(x) > (1)) AS OF 'b.000001:4' \
             WITH (snapshot = false, progress = 'on');",
        );
        assert_eq!(s.query, "SELECT id, \"a)b\" FROM s.db.t WHERE f(x) > (1)");
        assert_eq!(s.as_of.as_deref(), Some("'b.000001:4'"));
        assert!(!s.snapshot);
        assert!(s.progress);
        let s = subscribe("subscribe s.db.\"T\" as of timestamp '2026-01-01 00:00:00'");
        assert_eq!(s.query, "SELECT * FROM s.db.\"T\"");
        assert_eq!(s.as_of.as_deref(), Some("timestamp '2026-01-01 00:00:00'"));
        assert!(s.snapshot && !s.progress);
        let s = subscribe("SUBSCRIBE (SELECT 1) AS OF now() - INTERVAL '1 hour' WITH (progress)");
        assert_eq!(s.as_of.as_deref(), Some("now() - INTERVAL '1 hour'"));
        assert!(s.progress);
    }

    #[test]
    fn copy_and_cursor_forms() {
        match parse_subscribe("COPY (SUBSCRIBE TO (SELECT * FROM t)) TO STDOUT WITH (FORMAT csv)") {
            Ok(Some(SubscribeStatement::Copy { subscribe, copy })) => {
                assert_eq!(subscribe.query, "SELECT * FROM t");
                assert_eq!(copy, "COPY (SELECT 1) TO STDOUT WITH (FORMAT csv)");
            }
            other => panic!("{other:?}"),
        }
        match parse_subscribe("DECLARE c NO SCROLL CURSOR WITHOUT HOLD FOR SUBSCRIBE t") {
            Ok(Some(SubscribeStatement::Declare {
                cursor,
                hold,
                subscribe,
            })) => {
                assert_eq!(cursor, "c");
                assert!(!hold);
                assert_eq!(subscribe.query, "SELECT * FROM t");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_subscribe("DECLARE \"C\" CURSOR WITH HOLD FOR SUBSCRIBE (SELECT 1)"),
            Ok(Some(SubscribeStatement::Declare { hold: true, .. }))
        ));
    }

    #[test]
    fn fetch_and_close() {
        let fetch = |sql| parse_cursor_command(sql).unwrap().unwrap();
        let of = |cursor: &str, count| CursorCommand::Fetch {
            cursor: cursor.into(),
            count,
        };
        assert_eq!(fetch("FETCH 10 c"), of("c", Some(10)));
        assert_eq!(fetch("fetch forward 5 from \"C\";"), of("C", Some(5)));
        assert_eq!(fetch("FETCH ALL IN c"), of("c", None));
        assert_eq!(fetch("FETCH FORWARD ALL c"), of("c", None));
        assert_eq!(fetch("FETCH NEXT FROM c"), of("c", Some(1)));
        assert_eq!(fetch("FETCH c"), of("c", Some(1)));
        assert_eq!(fetch("CLOSE ALL"), CursorCommand::Close { cursor: None });
        assert_eq!(
            fetch("CLOSE c"),
            CursorCommand::Close {
                cursor: Some("c".into())
            }
        );
        let error = parse_cursor_command("FETCH PRIOR FROM c").unwrap_err();
        assert_eq!(error.sqlstate(), SqlState::FEATURE_NOT_SUPPORTED, "{error}");
        assert!(parse_cursor_command("FETCH 1 FROM").is_err());
        assert!(parse_cursor_command("SELECT 1").unwrap().is_none());
    }

    #[test]
    fn other_texts_are_not_claimed_and_bad_ones_are_named() {
        for sql in [
            "SELECT 1",
            "DECLARE c CURSOR FOR SELECT 1",
            "COPY (SELECT 1) TO STDOUT",
            "COPY t TO STDOUT",
        ] {
            assert!(parse_subscribe(sql).unwrap().is_none(), "{sql}");
        }
        for (sql, needle) in [
            ("SUBSCRIBE", "a query in parentheses"),
            ("SUBSCRIBE ()", "a query inside"),
            ("SUBSCRIBE (SELECT 1", "closes the subscribed query"),
            ("SUBSCRIBE t AS OF", "a position or a time"),
            ("SUBSCRIBE t WITH (snap = true)", "unknown option"),
            (
                "SUBSCRIBE t WITH (snapshot = maybe)",
                "expected true or false",
            ),
            ("SUBSCRIBE t WITH (progress, progress)", "more than once"),
            ("SUBSCRIBE t extra", "end of statement"),
            ("COPY (SUBSCRIBE t TO STDOUT", "closes COPY"),
        ] {
            let error = parse_subscribe(sql).unwrap_err().to_string();
            assert!(error.contains(needle), "{sql}: {error}");
        }
    }
}
