//! The engine's error: what a statement or a source operation answers when it fails.
//!
//! # Invariant
//! Each variant keeps the typed error it wraps (source, durable, SQL, DataFusion), so the
//! front end maps it to an SQLSTATE by type, never by its text.

use datafusion::error::DataFusionError;

use super::files::FileAccessDenied;
use super::limits::{self, TooComplex};
use crate::durable::DurableError;
use crate::sinks::SinkError;
use crate::source::error::SourceError;
use crate::sql::SqlError;

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
