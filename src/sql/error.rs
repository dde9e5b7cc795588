//! [`SqlError`]: everything that can go wrong with a cdcfusion statement, and the SQLSTATE each
//! maps to.
//!
//! # Invariant
//! Every variant the parser produces names what it rejected (the token, option or URL) and, where
//! the text has one, its line and column from the tokenizer's spans; no variant ever carries a
//! MySQL password (URLs are stored masked). Variants are grouped by what the client should do
//! (fix the text, fix a value, use another feature, look at the catalog), which is also what the
//! SQLSTATE class says, so the pgwire layer maps them with [`SqlError::sqlstate`] alone.
//!
//! This file is the bottom of `sql/`: it imports none of its siblings, so options are named
//! here by their SQL name, not by the option table that sits above it.

use std::fmt;

use crate::sqlstate::{HasSqlState, SqlState};
use sqlparser::parser::ParserError;
use sqlparser::tokenizer::Location;

/// An error of a cdcfusion SQL statement; see the module docs.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The text does not follow the grammar: `found` is the offending token as written.
    #[error("syntax error: expected {expected}, found {found}{}", At(.location))]
    Syntax {
        expected: String,
        found: String,
        location: Option<Location>,
    },
    /// The tokenizer could not split the text (an unterminated string or quoted name).
    #[error("syntax error: {message}{}", At(.location))]
    Tokenize {
        message: String,
        location: Option<Location>,
    },
    /// sqlparser rejected an option's value expression; its message carries the position.
    #[error("invalid value for option {option}: {source}")]
    Expression {
        option: &'static str,
        source: ParserError,
    },
    /// An option name the statement does not take; `known` lists the ones it does.
    #[error("unknown option {name:?}{}; valid options are {}", At(.location), .known.join(", "))]
    UnknownOption {
        name: String,
        known: Vec<&'static str>,
        location: Option<Location>,
    },
    /// The same option given twice (PostgreSQL: "conflicting or redundant options").
    #[error("option {option} is given more than once{}", At(.location))]
    DuplicateOption {
        option: &'static str,
        location: Option<Location>,
    },
    /// An option's value has the wrong type, is out of range, or conflicts with another option.
    #[error("invalid value for option {option}: {message}{}", At(.location))]
    InvalidValue {
        option: &'static str,
        message: String,
        location: Option<Location>,
    },
    /// The connection URL is not one `mysql_async` accepts; `url` has its password masked.
    #[error("invalid MySQL URL '{url}': {reason}{}", At(.location))]
    InvalidUrl {
        url: String,
        reason: String,
        location: Option<Location>,
    },
    /// Well-formed but not supported (another source type, `CREATE OR REPLACE`, ...).
    #[error("{feature} is not supported{}{}", At(.location), Hint(.hint))]
    Unsupported {
        feature: String,
        hint: Option<String>,
        location: Option<Location>,
    },
    /// The named source does not exist (`DROP`/`ALTER` without `IF EXISTS`); raised by the
    /// statement's executor, which owns the catalog.
    #[error("source {name:?} does not exist")]
    UndefinedSource { name: String },
    /// A source of that name exists already (`CREATE` without `IF NOT EXISTS`); raised by the
    /// statement's executor.
    #[error("source {name:?} already exists")]
    DuplicateSource { name: String },
    /// sqlparser's PostgreSQL grammar refused a statement of ours that it reads whole (the
    /// role statements); its message carries the token and the position.
    #[error("syntax error: {source}")]
    Grammar { source: ParserError },
    /// A role statement names a role other than the two there are (`admin` and `reader`).
    #[error("role {name:?} does not exist (the roles are admin and reader){}", At(.location))]
    UndefinedRole {
        name: String,
        location: Option<Location>,
    },
}

impl SqlError {
    /// Where in the statement text the error is, when the error points at one token.
    pub fn location(&self) -> Option<Location> {
        match self {
            SqlError::Syntax { location, .. }
            | SqlError::Tokenize { location, .. }
            | SqlError::UnknownOption { location, .. }
            | SqlError::DuplicateOption { location, .. }
            | SqlError::InvalidValue { location, .. }
            | SqlError::InvalidUrl { location, .. }
            | SqlError::Unsupported { location, .. }
            | SqlError::UndefinedRole { location, .. } => *location,
            // sqlparser's message has the position in its text only.
            SqlError::Expression { .. }
            | SqlError::Grammar { .. }
            | SqlError::UndefinedSource { .. }
            | SqlError::DuplicateSource { .. } => None,
        }
    }
}

impl HasSqlState for SqlError {
    /// The PostgreSQL SQLSTATE the pgwire layer reports for this error.
    fn sqlstate(&self) -> SqlState {
        match self {
            SqlError::Syntax { .. }
            | SqlError::Tokenize { .. }
            | SqlError::Expression { .. }
            | SqlError::UnknownOption { .. }
            | SqlError::DuplicateOption { .. }
            | SqlError::Grammar { .. } => SqlState::SYNTAX_ERROR,
            SqlError::InvalidValue { .. } | SqlError::InvalidUrl { .. } => {
                SqlState::INVALID_PARAMETER_VALUE
            }
            SqlError::Unsupported { .. } => SqlState::FEATURE_NOT_SUPPORTED,
            SqlError::UndefinedSource { .. } | SqlError::UndefinedRole { .. } => {
                SqlState::UNDEFINED_OBJECT
            }
            SqlError::DuplicateSource { .. } => SqlState::DUPLICATE_OBJECT,
        }
    }
}

/// Formats an optional location the way sqlparser and DataFusion do (` at Line: 1, Column: 8`),
/// so errors of our statements read like those of every other statement.
struct At<'a>(&'a Option<Location>);

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(location) => write!(f, "{location}"),
            None => Ok(()),
        }
    }
}

/// Formats an optional hint as a trailing sentence.
struct Hint<'a>(&'a Option<String>);

impl fmt::Display for Hint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(hint) => write!(f, "; {hint}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_follow_postgresql_classes() {
        let at = Some(Location::new(1, 8));
        let syntax = SqlError::Syntax {
            expected: "FROM".into(),
            found: "EOF".into(),
            location: at,
        };
        assert_eq!(syntax.sqlstate(), SqlState::SYNTAX_ERROR);
        assert_eq!(
            syntax.to_string(),
            "syntax error: expected FROM, found EOF at Line: 1, Column: 8"
        );
        let value = SqlError::InvalidValue {
            option: "parallelism",
            message: "0 is out of range 1..=64".into(),
            location: None,
        };
        assert_eq!(value.sqlstate(), SqlState::INVALID_PARAMETER_VALUE);
        assert_eq!(
            value.to_string(),
            "invalid value for option parallelism: 0 is out of range 1..=64"
        );
        let unsupported = SqlError::Unsupported {
            feature: "source type POSTGRES".into(),
            hint: Some("only MYSQL sources exist".into()),
            location: at,
        };
        assert_eq!(unsupported.sqlstate(), SqlState::FEATURE_NOT_SUPPORTED);
        assert_eq!(
            unsupported.to_string(),
            "source type POSTGRES is not supported at Line: 1, Column: 8; only MYSQL sources exist"
        );
        let missing = SqlError::UndefinedSource { name: "s".into() };
        assert_eq!(missing.sqlstate(), SqlState::UNDEFINED_OBJECT);
        assert_eq!(missing.to_string(), "source \"s\" does not exist");
        let dup = SqlError::DuplicateSource { name: "s".into() };
        assert_eq!(dup.sqlstate(), SqlState::DUPLICATE_OBJECT);
    }
}
