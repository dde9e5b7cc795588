//! The values of `WITH (...)` items: a sqlparser expression typed as a string literal or as an
//! integer in a range.
//!
//! # Invariant
//! A value is accepted only as the literal its option's type asks for, never coerced (no
//! `'100'` for an integer, no bare word for a string), and every refusal names the option, what
//! was found, and the value's position.

use std::ops::RangeInclusive;

use sqlparser::ast::{Expr, UnaryOperator, Value, ValueWithSpan};
use sqlparser::tokenizer::Location;

use super::error::SqlError;
use super::options::SourceOption;

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
    pub option: SourceOption,
    pub item: &'a RawOption,
}

impl Literal<'_> {
    fn invalid(&self, message: String) -> SqlError {
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

    /// A string literal, checked by `parse` (whose error is the message).
    pub fn check<T>(&self, parse: impl FnOnce(&str) -> Result<T, String>) -> Result<T, SqlError> {
        parse(self.string()?).map_err(|m| self.invalid(m))
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

pub(super) fn check_range(value: u64, range: &RangeInclusive<u64>) -> Result<(), String> {
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
