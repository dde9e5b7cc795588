//! The one error type of the sinks layer: planning a sink's query, and writing its commits.
//!
//! Each error is classified where it is raised: [`SinkError::is_transient`] says whether the
//! same commit may succeed when tried again (a target that is unreachable or busy), so the
//! runner retries it with backoff and keeps what is committed; anything else stops the sink
//! with its SQLSTATE and a message naming the fix.

use crate::sqlstate::{HasSqlState, SqlState};

/// Errors of a sink: its query, its target, or its input.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The query is of a shape a sink cannot maintain (join, aggregate, ...), or a target
    /// cannot hold what it produces (a column type, a mode).
    #[error("{0}")]
    Unsupported(String),
    /// The query, its options or the target are wrong as written (fix the statement).
    #[error("{0}")]
    Invalid(String),
    /// The target holds something the sink cannot continue from: another sink's commits, a
    /// table whose columns differ from the query's.
    #[error("{0}")]
    Conflict(String),
    /// A schema change the sink was told not to follow, or cannot follow.
    #[error("{0}")]
    SchemaChange(String),
    /// The target could not be reached or refused the commit for a reason that passes
    /// (connection lost, serialization failure, I/O): the commit may be tried again.
    #[error("{what}: {message}")]
    Unavailable { what: String, message: String },
    /// Reading the source's changelog or running the query failed.
    #[error("{0}")]
    Input(String),
}

impl SinkError {
    /// Whether trying the same commit again can succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, SinkError::Unavailable { .. })
    }

    /// A target failure that passes, naming what failed.
    pub fn unavailable(what: impl Into<String>, message: impl std::fmt::Display) -> Self {
        SinkError::Unavailable {
            what: what.into(),
            message: message.to_string(),
        }
    }
}

impl HasSqlState for SinkError {
    /// The SQLSTATE a client is given.
    fn sqlstate(&self) -> SqlState {
        match self {
            SinkError::Unsupported(_) => SqlState::FEATURE_NOT_SUPPORTED,
            SinkError::Invalid(_) => SqlState::INVALID_PARAMETER_VALUE,
            SinkError::Conflict(_) | SinkError::SchemaChange(_) => {
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            SinkError::Unavailable { .. } => SqlState::CONNECTION_FAILURE,
            SinkError::Input(_) => SqlState::INTERNAL_ERROR,
        }
    }
}
