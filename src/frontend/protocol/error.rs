//! Errors of the PostgreSQL front end: [`FrontendError`] for starting the server, and the
//! translation of every error a client can see into a PostgreSQL error with a SQLSTATE.
//!
//! # Invariant
//! A client never sees an error without a SQLSTATE of the right class: every error carries its
//! code ([`HasSqlState`]; through DataFusion, in a `Coded` wrapper), and the engine's
//! [`EngineError::sqlstate`](crate::engine::EngineError) is the one mapping of a statement's
//! error; only errors that say nothing about the statement are `XX000` (internal error).
//! Session-level errors are `ERROR` severity, so the connection survives every failed
//! statement.

use datafusion::error::DataFusionError;
use pgwire::error::{ErrorInfo, PgWireError};

use crate::engine::{datafusion_message, datafusion_sqlstate, EngineError};
use crate::frontend::access::verifier::StoredUserError;
use crate::sqlstate::{HasSqlState, SqlState};

/// Errors starting or running the server.
#[derive(Debug, thiserror::Error)]
pub enum FrontendError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("cannot set up the pg_catalog schema: {0}")]
    Catalog(String),
    #[error(transparent)]
    StoredUser(#[from] StoredUserError),
}

/// An `ERROR` with `code` and `message`.
pub fn user_error(code: SqlState, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        code.code().to_owned(),
        message.into(),
    )))
}

/// A `FATAL` error: the server closes the connection after sending it.
pub fn fatal_error(code: SqlState, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_owned(),
        code.code().to_owned(),
        message.into(),
    )))
}

/// The statement was stopped by a cancel request or the statement timeout.
pub fn canceled(timeout: bool) -> PgWireError {
    user_error(
        SqlState::QUERY_CANCELED,
        if timeout {
            "canceling statement due to statement timeout"
        } else {
            "canceling statement due to user request"
        },
    )
}

/// The engine's error as the client sees it.
pub fn engine_error(error: EngineError) -> PgWireError {
    user_error(error.sqlstate(), error.message())
}

/// A DataFusion error (raised while a result streams) as the client sees it.
pub fn datafusion_error(error: DataFusionError) -> PgWireError {
    user_error(datafusion_sqlstate(&error), datafusion_message(&error))
}
