//! The engine's error: what a statement or a source operation answers when it fails.
//!
//! # Invariant
//! Each variant keeps the typed error it wraps (source, durable, SQL, DataFusion), and
//! [`EngineError::sqlstate`] is the one place an error of a statement becomes an SQLSTATE: by
//! its type, or for an error that crossed DataFusion, by the [`Coded`] wrapper it crossed in.
//! DataFusion's own errors are classified by their kind; only plan errors, which carry their
//! kind in their text alone, are read by text.

use datafusion::arrow::error::ArrowError;
use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;

use super::files::FileAccessDenied;
use super::limits::{self, TooComplex};
use crate::durable::DurableError;
use crate::sinks::SinkError;
use crate::source::error::SourceError;
use crate::sql::SqlError;
use crate::sqlstate::{Coded, HasSqlState, SqlState};

/// Errors at the engine boundary.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("source \"{0}\" already exists")]
    SourceExists(String),
    #[error("source \"{0}\" does not exist")]
    NoSuchSource(String),
    #[error("source name \"{0}\" is invalid: {1}")]
    BadName(String, &'static str),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    #[error("source \"{name}\" failed: {message}")]
    SourceFailed { name: String, message: String },
    #[error(transparent)]
    Sql(#[from] SqlError),
    #[error("{0} is not supported yet")]
    NotSupported(&'static str),
    #[error("source \"{name}\" does not capture table {table}")]
    NoSuchTable { name: String, table: String },
    #[error("cannot move the source to {server}: {reason}")]
    MoveRefused { server: String, reason: String },
    #[error("RESNAPSHOT TABLE cannot repair source \"{name}\": {reason}; use ALTER SOURCE {name} RESNAPSHOT, which reads every table again")]
    CannotResnapshotTable { name: String, reason: String },
    #[error(transparent)]
    Durable(#[from] DurableError),
    #[error(transparent)]
    TooComplex(#[from] TooComplex),
    #[error(transparent)]
    FileAccess(#[from] FileAccessDenied),
    #[error("cannot drop source \"{name}\": sinks {} read it; drop them first (DROP SINK ...)", .sinks.join(", "))]
    SourceInUse { name: String, sinks: Vec<String> },
    #[error("sink \"{0}\" already exists")]
    SinkExists(String),
    #[error("sink \"{0}\" does not exist")]
    NoSuchSink(String),
    #[error("sink \"{name}\": {source}")]
    Sink {
        name: String,
        #[source]
        source: SinkError,
    },
}

/// A parse error as the engine reports it: the parser's recursion limit is [`TooComplex`].
pub fn parser_error(error: DataFusionError) -> EngineError {
    match &error {
        DataFusionError::SQL(e, _) if limits::is_nesting_limit(e) => TooComplex::Nesting {
            limit: limits::PARSER_NESTING_LIMIT,
        }
        .into(),
        _ => error.into(),
    }
}

impl HasSqlState for EngineError {
    /// The class of what the client should do: fix the text, name another object, change a
    /// value, use another feature; `XX000` only for errors that say nothing about the
    /// statement.
    fn sqlstate(&self) -> SqlState {
        match self {
            EngineError::Sql(e) => e.sqlstate(),
            EngineError::SourceExists(_) | EngineError::SinkExists(_) => SqlState::DUPLICATE_OBJECT,
            EngineError::NoSuchSource(_) | EngineError::NoSuchSink(_) => SqlState::UNDEFINED_OBJECT,
            EngineError::BadName(..) => SqlState::INVALID_NAME,
            EngineError::NotSupported(_) => SqlState::FEATURE_NOT_SUPPORTED,
            EngineError::NoSuchTable { .. } => SqlState::UNDEFINED_TABLE,
            // The source must be repaired another way.
            EngineError::CannotResnapshotTable { .. } | EngineError::MoveRefused { .. } => {
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            EngineError::DataFusion(e) => datafusion_sqlstate(e),
            EngineError::Source(e) => e.sqlstate(),
            // The source stopped before it was ready.
            EngineError::SourceFailed { .. } => SqlState::CONNECTION_EXCEPTION,
            EngineError::Durable(e) => e.sqlstate(),
            EngineError::TooComplex(_) => TooComplex::SQLSTATE,
            EngineError::FileAccess(_) => FileAccessDenied::SQLSTATE,
            EngineError::SourceInUse { .. } => SqlState::DEPENDENT_OBJECTS_STILL_EXIST,
            EngineError::Sink { source, .. } => source.sqlstate(),
        }
    }
}

impl EngineError {
    /// What a client is told: the error's text, without DataFusion's `External error: ` in
    /// front of an error of ours that crossed it.
    pub fn message(&self) -> String {
        match self {
            EngineError::DataFusion(e) => datafusion_message(e),
            other => other.to_string(),
        }
    }
}

/// The text of a DataFusion error as a client reads it: an error of ours that crossed
/// DataFusion reads as itself.
pub fn datafusion_message(error: &DataFusionError) -> String {
    match error.find_root() {
        DataFusionError::External(e) if e.downcast_ref::<Coded>().is_some() => e.to_string(),
        _ => error.to_string(),
    }
}

/// Classifies a DataFusion error by its root cause: an error of ours by the code it crossed
/// DataFusion with ([`Coded`]), DataFusion's and Arrow's by their kind.
pub fn datafusion_sqlstate(error: &DataFusionError) -> SqlState {
    match error.find_root() {
        DataFusionError::External(e) => match e.downcast_ref::<Coded>() {
            Some(coded) => coded.code().clone(),
            None => SqlState::INTERNAL_ERROR,
        },
        DataFusionError::SQL(..) => SqlState::SYNTAX_ERROR,
        DataFusionError::SchemaError(e, _) => match e.as_ref() {
            SchemaError::FieldNotFound { .. } => SqlState::UNDEFINED_COLUMN,
            SchemaError::AmbiguousReference { .. } => SqlState::AMBIGUOUS_COLUMN,
            SchemaError::DuplicateQualifiedField { .. }
            | SchemaError::DuplicateUnqualifiedField { .. } => SqlState::DUPLICATE_COLUMN,
        },
        DataFusionError::NotImplemented(_) => SqlState::FEATURE_NOT_SUPPORTED,
        DataFusionError::Plan(message) => plan_sqlstate(message),
        DataFusionError::ResourcesExhausted(_) => SqlState::OUT_OF_MEMORY,
        DataFusionError::ArrowError(e, _) => match e.as_ref() {
            ArrowError::DivideByZero => SqlState::DIVISION_BY_ZERO,
            ArrowError::CastError(_) | ArrowError::ParseError(_) => {
                SqlState::INVALID_TEXT_REPRESENTATION
            }
            ArrowError::ArithmeticOverflow(_) => SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
            _ => SqlState::INTERNAL_ERROR,
        },
        _ => SqlState::INTERNAL_ERROR,
    }
}

/// Plan errors carry their kind in the text only.
fn plan_sqlstate(message: &str) -> SqlState {
    if message.starts_with("table '") && message.ends_with("not found") {
        SqlState::UNDEFINED_TABLE
    } else if message.contains("Invalid function") || message.contains("Unknown function") {
        SqlState::UNDEFINED_FUNCTION
    } else if message.contains("No field named") {
        SqlState::UNDEFINED_COLUMN
    } else {
        SqlState::SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn state_of(sql: &str) -> SqlState {
        let ctx = SessionContext::new();
        let error = match ctx.sql(sql).await {
            Ok(df) => df.collect().await.expect_err(sql),
            Err(e) => e,
        };
        datafusion_sqlstate(&error)
    }

    #[tokio::test]
    async fn datafusion_errors_map_to_postgresql_classes() {
        assert_eq!(state_of("SELEC 1").await, SqlState::SYNTAX_ERROR);
        assert_eq!(
            state_of("SELECT * FROM nowhere").await,
            SqlState::UNDEFINED_TABLE
        );
        assert_eq!(
            state_of("SELECT nope FROM (SELECT 1 AS a)").await,
            SqlState::UNDEFINED_COLUMN
        );
        assert_eq!(
            state_of("SELECT no_such_function(1)").await,
            SqlState::UNDEFINED_FUNCTION
        );
    }
}
