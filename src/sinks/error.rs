//! The one error type of the sinks layer: planning a sink's query, and writing its commits.
//!
//! Each error is classified where it is raised: [`SinkError::is_transient`] says whether the
//! same commit may succeed when tried again (a target that is unreachable or busy), so the
//! runner retries it with backoff and keeps what is committed; anything else stops the sink
//! with its SQLSTATE and a message naming the fix.

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

    /// The SQLSTATE a client is given.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            // feature_not_supported
            SinkError::Unsupported(_) => "0A000",
            // invalid_parameter_value
            SinkError::Invalid(_) => "22023",
            // object_not_in_prerequisite_state
            SinkError::Conflict(_) | SinkError::SchemaChange(_) => "55000",
            // connection_failure
            SinkError::Unavailable { .. } => "08006",
            // internal_error
            SinkError::Input(_) => "XX000",
        }
    }

    /// A target failure that passes, naming what failed.
    pub fn unavailable(what: impl Into<String>, message: impl std::fmt::Display) -> Self {
        SinkError::Unavailable {
            what: what.into(),
            message: message.to_string(),
        }
    }
}
