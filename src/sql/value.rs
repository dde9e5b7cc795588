//! The values of `WITH (...)` items: a sqlparser expression typed as a string literal or as an
//! integer in a range.
//!
//! # Invariant
//! A value is accepted only as the literal its option's type asks for, never coerced (no
//! `'100'` for an integer, no bare word for a string), and every refusal names the option, what
//! was found, and the value's position.
//!
//! Knows options only by name: which type an option takes is the option table's business.

use std::ops::RangeInclusive;

use sqlparser::ast::{Expr, UnaryOperator, Value, ValueWithSpan};
use sqlparser::tokenizer::Location;

use super::error::SqlError;

/// One `name = value` item of a `WITH` list as the grammar read it.
#[derive(Debug, Clone)]
pub(crate) struct RawOption {
    /// Case-folded when unquoted, as PostgreSQL resolves names.
    pub name: String,
    pub name_location: Location,
    pub value: Expr,
    pub value_location: Location,
}

/// The value of one [`RawOption`], checked as its option's type; errors name the option and
/// point at the value.
pub(super) struct Literal<'a> {
    /// The option's SQL name, for errors.
    pub option: &'static str,
    pub item: &'a RawOption,
}

impl Literal<'_> {
    /// The value is refused with `message`.
    pub fn invalid(&self, message: String) -> SqlError {
        SqlError::InvalidValue {
            option: self.option,
            message,
            location: Some(self.item.value_location),
        }
    }

    /// A string literal: `'...'`, `E'...'` or `$$...$$`.
    pub fn string(&self) -> Result<&str, SqlError> {
        match &self.item.value {
            Expr::Value(ValueWithSpan { value, .. }) => match value {
                Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s) => Ok(s),
                Value::DollarQuotedString(d) => Ok(&d.value),
                _ => Err(self.invalid(format!(
                    "expected a string literal, found {}",
                    describe(&self.item.value)
                ))),
            },
            Expr::Identifier(ident) => Err(self.invalid(format!(
                "expected a string literal, found identifier {ident} (quote it: '{}')",
                ident.value
            ))),
            other => Err(self.invalid(format!(
                "expected a string literal, found {}",
                describe(other)
            ))),
        }
    }

    /// `true`/`false` (bare or quoted), or PostgreSQL's other spellings (`on`, `off`, ...).
    pub fn boolean(&self) -> Result<bool, SqlError> {
        let text = match &self.item.value {
            Expr::Value(ValueWithSpan {
                value: Value::Boolean(b),
                ..
            }) => return Ok(*b),
            Expr::Identifier(ident) => ident.value.clone(),
            Expr::Value(ValueWithSpan {
                value: Value::SingleQuotedString(s),
                ..
            }) => s.clone(),
            other => {
                return Err(
                    self.invalid(format!("expected true or false, found {}", describe(other)))
                )
            }
        };
        match text.to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" | "1" => Ok(true),
            "false" | "off" | "no" | "0" => Ok(false),
            _ => Err(self.invalid(format!("expected true or false, found {text}"))),
        }
    }

    /// An integer number literal within `range`, returned as the target integer type.
    pub fn integer_in<T: TryFrom<u64>>(&self, range: RangeInclusive<u64>) -> Result<T, SqlError> {
        let (negative, inner) = match &self.item.value {
            Expr::UnaryOp {
                op: UnaryOperator::Minus,
                expr,
            } => (true, &**expr),
            other => (false, other),
        };
        let Expr::Value(ValueWithSpan {
            value: Value::Number(text, _),
            ..
        }) = inner
        else {
            let hint = match &self.item.value {
                Expr::Value(ValueWithSpan {
                    value: Value::SingleQuotedString(s),
                    ..
                }) => format!(" (write it without quotes: {s})"),
                _ => String::new(),
            };
            return Err(self.invalid(format!(
                "expected an integer, found {}{hint}",
                describe(&self.item.value)
            )));
        };
        // PostgreSQL 16 allows `1_000`; the tokenizer keeps the underscores.
        let digits = text.replace('_', "");
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.invalid(format!("expected an integer, found number {text}")));
        }
        let sign = if negative { "-" } else { "" };
        let out_of_range = || {
            self.invalid(format!(
                "{sign}{text} is out of range {}..={}",
                range.start(),
                range.end()
            ))
        };
        let value: u64 = digits.parse().map_err(|_| out_of_range())?;
        if negative && value != 0 {
            return Err(out_of_range());
        }
        check_range(value, &range).map_err(|m| self.invalid(m))?;
        T::try_from(value).map_err(|_| out_of_range())
    }
}

fn check_range(value: u64, range: &RangeInclusive<u64>) -> Result<(), String> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{value} is out of range {}..={}",
            range.start(),
            range.end()
        ))
    }
}

/// How a value that is not the expected literal reads in an error.
fn describe(expr: &Expr) -> String {
    match expr {
        Expr::Value(ValueWithSpan { value, .. }) => match value {
            Value::Number(n, _) => format!("number {n}"),
            Value::SingleQuotedString(_)
            | Value::EscapedStringLiteral(_)
            | Value::DollarQuotedString(_) => format!("string {value}"),
            Value::Boolean(b) => format!("boolean {b}"),
            Value::Null => "NULL".to_string(),
            other => format!("value {other}"),
        },
        Expr::Identifier(ident) => format!("identifier {ident}"),
        other => format!("expression {other}"),
    }
}

#[cfg(test)]
mod tests {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    use super::*;

    /// `text` read by sqlparser as the value of `chunk_size` (the option only names errors).
    fn raw(text: &str) -> RawOption {
        let dialect = PostgreSqlDialect {};
        let value = Parser::new(&dialect)
            .try_with_sql(text)
            .and_then(|mut p| p.parse_expr())
            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
        RawOption {
            name: "chunk_size".into(),
            name_location: Location::new(1, 1),
            value,
            value_location: Location::new(1, 14),
        }
    }

    fn integer(text: &str, range: RangeInclusive<u64>) -> Result<u64, String> {
        let item = raw(text);
        let literal = Literal {
            option: "chunk_size",
            item: &item,
        };
        literal.integer_in(range).map_err(|e| e.to_string())
    }

    fn string(text: &str) -> Result<String, String> {
        let item = raw(text);
        let literal = Literal {
            option: "chunk_size",
            item: &item,
        };
        literal
            .string()
            .map(str::to_string)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn integers_are_number_literals_in_range() {
        assert_eq!(integer("5", 1..=10), Ok(5));
        assert_eq!(integer("10", 1..=10), Ok(10));
        assert_eq!(integer("1_000", 1..=2000), Ok(1000));
        let refused = [
            (
                "'100'",
                "invalid value for option chunk_size: expected an integer, found string '100' \
                 (write it without quotes: 100) at Line: 1, Column: 14",
            ),
            ("0", "0 is out of range 1..=10"),
            ("11", "11 is out of range 1..=10"),
            ("-5", "-5 is out of range 1..=10"),
            ("-0", "0 is out of range 1..=10"),
            ("1.5", "expected an integer, found number 1.5"),
            ("1e3", "expected an integer, found number 1e3"),
            (
                "99999999999999999999999",
                "99999999999999999999999 is out of range 1..=10",
            ),
            ("1 + 2", "expected an integer, found expression 1 + 2"),
            ("-x", "expected an integer, found expression -x"),
            ("NULL", "expected an integer, found NULL"),
            ("true", "expected an integer, found boolean true"),
            ("five", "expected an integer, found identifier five"),
        ];
        for (text, fragment) in refused {
            match integer(text, 1..=10) {
                Err(e) => assert!(e.contains(fragment), "{text:?}: {e:?} lacks {fragment:?}"),
                Ok(v) => panic!("{text:?} should be refused, got {v}"),
            }
        }
    }

    #[test]
    fn integers_that_do_not_fit_the_target_type_are_out_of_range() {
        let item = raw("4294967296");
        let literal = Literal {
            option: "server_id",
            item: &item,
        };
        let e = literal.integer_in::<u32>(0..=u64::MAX).unwrap_err();
        assert!(e.to_string().contains("4294967296 is out of range"), "{e}");
    }

    #[test]
    fn strings_are_string_literals_of_any_form() {
        assert_eq!(string("'a.b'"), Ok("a.b".into()));
        assert_eq!(string("'it''s'"), Ok("it's".into()));
        assert_eq!(string("E'a\\tb'"), Ok("a\tb".into()));
        assert_eq!(string("$$a'b$$"), Ok("a'b".into()));
        assert_eq!(string("$tag$x$tag$"), Ok("x".into()));
        let refused = [
            (
                "5",
                "expected a string literal, found number 5 at Line: 1, Column: 14",
            ),
            (
                "initial",
                "expected a string literal, found identifier initial (quote it: 'initial')",
            ),
            (
                "\"initial\"",
                "expected a string literal, found identifier \"initial\" (quote it: 'initial')",
            ),
            ("NULL", "expected a string literal, found NULL"),
            (
                "'a' || 'b'",
                "expected a string literal, found expression 'a' || 'b'",
            ),
        ];
        for (text, fragment) in refused {
            match string(text) {
                Err(e) => assert!(e.contains(fragment), "{text:?}: {e:?} lacks {fragment:?}"),
                Ok(v) => panic!("{text:?} should be refused, got {v:?}"),
            }
        }
    }
}
