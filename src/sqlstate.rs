//! SQLSTATEs: the one type every error of the engine names its class with, and the one
//! wrapper that carries a code through DataFusion.
//!
//! # Invariant
//! A code is decided where an error is raised, as a [`SqlState`] constant (tokio-postgres'
//! table of PostgreSQL's codes, so a code is spelt by its name and never as a literal), and
//! travels with the error: an error that crosses DataFusion (a scan, a table function, a
//! stream) is wrapped in a [`Coded`], so the front end reads its code from the wrapper and
//! never guesses it from the error's type or text. This module imports nothing of the crate,
//! so every stage may use it.

use std::error::Error;
use std::fmt;

pub use tokio_postgres::error::SqlState;

/// An error that knows the SQLSTATE a client should see for it.
pub trait HasSqlState {
    fn sqlstate(&self) -> SqlState;
}

/// An error with the SQLSTATE it was raised with, as it crosses DataFusion
/// (`DataFusionError::External`). It reads as the error it carries.
#[derive(Debug)]
pub struct Coded {
    code: SqlState,
    error: Box<dyn Error + Send + Sync>,
}

impl Coded {
    /// `error` with its own code.
    pub fn new<E: HasSqlState + Error + Send + Sync + 'static>(error: E) -> Self {
        Self {
            code: error.sqlstate(),
            error: Box::new(error),
        }
    }

    /// `error` with the code `code`.
    pub fn with_code(code: SqlState, error: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        Self {
            code,
            error: error.into(),
        }
    }

    /// The code the error was raised with.
    pub fn code(&self) -> &SqlState {
        &self.code
    }

    /// The error carried, to be downcast to its type.
    pub fn error(&self) -> &(dyn Error + Send + Sync + 'static) {
        self.error.as_ref()
    }

    /// The error carried, if it is a `T`.
    pub fn downcast_ref<T: Error + 'static>(&self) -> Option<&T> {
        self.error.downcast_ref::<T>()
    }
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl Error for Coded {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.error.source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("table t is stopped")]
    struct Stopped;

    impl HasSqlState for Stopped {
        fn sqlstate(&self) -> SqlState {
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
        }
    }

    #[test]
    fn a_coded_error_reads_as_its_error_and_keeps_its_code() {
        let coded = Coded::new(Stopped);
        assert_eq!(coded.to_string(), "table t is stopped");
        assert_eq!(coded.code().code(), "55000");
        assert!(coded.error().downcast_ref::<Stopped>().is_some());
        let other = Coded::with_code(SqlState::DATA_CORRUPTED, "damaged");
        assert_eq!(other.code(), &SqlState::DATA_CORRUPTED);
        assert_eq!(other.to_string(), "damaged");
    }
}
