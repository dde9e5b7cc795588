//! Errors of the PostgreSQL front end: [`FrontendError`] for starting the server, and the
//! translation of every error a client can see into a PostgreSQL error with a SQLSTATE.
//!
//! # Invariant
//! A client never sees an error without a SQLSTATE of the right class: our own statements use
//! [`SqlError::sqlstate`], engine errors are classified by what the client should do (fix the
//! text, name another object, change a value, use another feature), and only errors that say
//! nothing about the statement are `XX000` (internal error). Session-level errors are `ERROR`
//! severity, so the connection survives every failed statement.

use datafusion::arrow::error::ArrowError;
use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;
use pgwire::error::{ErrorInfo, PgWireError};

use super::verifier::StoredUserError;
use crate::engine::EngineError;
use crate::provider::as_of::AsOfError;
use crate::provider::current::SchemaChanged;
use crate::provider::health::TableUnavailable;
use crate::provider::subscribe::SubscribeError;
use crate::sql::SqlError;
use crate::state::changelog::StoredSegmentError;

/// `undefined_table`.
pub const SQLSTATE_UNDEFINED_TABLE: &str = "42P01";
/// `undefined_column`.
pub const SQLSTATE_UNDEFINED_COLUMN: &str = "42703";
/// `undefined_function`.
pub const SQLSTATE_UNDEFINED_FUNCTION: &str = "42883";
/// `invalid_catalog_name`: the connection names a database that does not exist.
pub const SQLSTATE_INVALID_CATALOG_NAME: &str = "3D000";
/// `query_canceled`: a cancel request or the statement timeout stopped the statement.
pub const SQLSTATE_QUERY_CANCELED: &str = "57014";
/// `datetime_field_overflow`: a timestamp PostgreSQL cannot represent.
pub const SQLSTATE_DATETIME_FIELD_OVERFLOW: &str = "22008";
/// `in_failed_sql_transaction`: a statement after an error inside a transaction block.
pub const SQLSTATE_IN_FAILED_TRANSACTION: &str = "25P02";
/// The server is shutting down.
pub const SQLSTATE_ADMIN_SHUTDOWN: &str = "57P01";
/// The session was idle for longer than `idle_session_timeout`.
pub const SQLSTATE_IDLE_SESSION_TIMEOUT: &str = "57P05";
/// `too_many_connections`.
pub const SQLSTATE_TOO_MANY_CONNECTIONS: &str = "53300";
/// `invalid_password`.
pub const SQLSTATE_INVALID_PASSWORD: &str = "28P01";
/// `invalid_authorization_specification`: e.g. a connection without TLS when TLS is required.
pub const SQLSTATE_INVALID_AUTHORIZATION: &str = "28000";
/// `undefined_object`: e.g. an unknown configuration parameter.
pub const SQLSTATE_UNDEFINED_OBJECT: &str = "42704";
/// `syntax_error_or_access_rule_violation`: a plan error that names no more precise class.
pub const SQLSTATE_SYNTAX_OR_ACCESS: &str = "42000";
/// `internal_error`.
pub const SQLSTATE_INTERNAL: &str = "XX000";

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
pub fn user_error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        code.to_owned(),
        message.into(),
    )))
}

/// A `FATAL` error: the server closes the connection after sending it.
pub fn fatal_error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_owned(),
        code.to_owned(),
        message.into(),
    )))
}

/// The statement was stopped by a cancel request or the statement timeout.
pub fn canceled(timeout: bool) -> PgWireError {
    user_error(
        SQLSTATE_QUERY_CANCELED,
        if timeout {
            "canceling statement due to statement timeout"
        } else {
            "canceling statement due to user request"
        },
    )
}

/// The engine's error as the client sees it.
pub fn engine_error(error: EngineError) -> PgWireError {
    let code = engine_sqlstate(&error);
    user_error(code, error.to_string())
}

/// A DataFusion error (raised while a result streams) as the client sees it.
pub fn datafusion_error(error: DataFusionError) -> PgWireError {
    let code = datafusion_sqlstate(&error);
    user_error(code, error.to_string())
}

/// The SQLSTATE of an engine error (see the module docs).
pub fn engine_sqlstate(error: &EngineError) -> &'static str {
    match error {
        EngineError::Sql(e) => e.sqlstate(),
        EngineError::SourceExists(name) => {
            SqlError::DuplicateSource { name: name.clone() }.sqlstate()
        }
        EngineError::NoSuchSource(name) => {
            SqlError::UndefinedSource { name: name.clone() }.sqlstate()
        }
        // invalid_name
        EngineError::BadName(..) => "42602",
        EngineError::NotSupported(_) => crate::sql::SQLSTATE_FEATURE_NOT_SUPPORTED,
        EngineError::NoSuchTable { .. } => SQLSTATE_UNDEFINED_TABLE,
        // object_not_in_prerequisite_state: the source must be repaired another way.
        EngineError::CannotResnapshotTable { .. } => "55000",
        EngineError::DataFusion(e) => datafusion_sqlstate(e),
        EngineError::Source(e) => e.sqlstate(),
        // connection_exception: the source stopped before it was ready.
        EngineError::SourceFailed { .. } => "08000",
        EngineError::Durable(e) => e.sqlstate(),
        EngineError::TooComplex(_) => crate::engine::TooComplex::SQLSTATE,
        EngineError::FileAccess(_) => crate::engine::FileAccessDenied::SQLSTATE,
        // dependent_objects_still_exist
        EngineError::SourceInUse { .. } => "2BP01",
        EngineError::SinkExists(_) => crate::sql::SQLSTATE_DUPLICATE_OBJECT,
        EngineError::NoSuchSink(_) => crate::sql::SQLSTATE_UNDEFINED_OBJECT,
        EngineError::Sink { source, .. } => source.sqlstate(),
    }
}

/// Classifies a DataFusion error by its root cause.
pub fn datafusion_sqlstate(error: &DataFusionError) -> &'static str {
    match error.find_root() {
        DataFusionError::SQL(..) => crate::sql::SQLSTATE_SYNTAX_ERROR,
        DataFusionError::SchemaError(e, _) => match e.as_ref() {
            SchemaError::FieldNotFound { .. } => SQLSTATE_UNDEFINED_COLUMN,
            // ambiguous_column
            SchemaError::AmbiguousReference { .. } => "42702",
            // duplicate_column
            SchemaError::DuplicateQualifiedField { .. }
            | SchemaError::DuplicateUnqualifiedField { .. } => "42701",
        },
        DataFusionError::NotImplemented(_) => crate::sql::SQLSTATE_FEATURE_NOT_SUPPORTED,
        DataFusionError::Plan(message) => plan_sqlstate(message),
        // out_of_memory
        DataFusionError::ResourcesExhausted(_) => "53200",
        DataFusionError::ArrowError(e, _) => match e.as_ref() {
            // division_by_zero
            ArrowError::DivideByZero => "22012",
            // invalid_text_representation
            ArrowError::CastError(_) | ArrowError::ParseError(_) => "22P02",
            // numeric_value_out_of_range
            ArrowError::ArithmeticOverflow(_) => "22003",
            _ => SQLSTATE_INTERNAL,
        },
        DataFusionError::External(e) => {
            if let Some(e) = e.downcast_ref::<SqlError>() {
                e.sqlstate()
            } else if let Some(e) = e.downcast_ref::<TableUnavailable>() {
                e.sqlstate()
            } else if let Some(e) = e.downcast_ref::<StoredSegmentError>() {
                e.sqlstate
            } else if let Some(e) = e.downcast_ref::<SchemaChanged>() {
                e.sqlstate()
            } else if let Some(e) = e.downcast_ref::<AsOfError>() {
                e.sqlstate
            } else if let Some(e) = e.downcast_ref::<SubscribeError>() {
                e.sqlstate
            } else {
                SQLSTATE_INTERNAL
            }
        }
        _ => SQLSTATE_INTERNAL,
    }
}

/// Plan errors carry their kind in the text only.
fn plan_sqlstate(message: &str) -> &'static str {
    if message.starts_with("table '") && message.ends_with("not found") {
        SQLSTATE_UNDEFINED_TABLE
    } else if message.contains("Invalid function") || message.contains("Unknown function") {
        SQLSTATE_UNDEFINED_FUNCTION
    } else if message.contains("No field named") {
        SQLSTATE_UNDEFINED_COLUMN
    } else {
        SQLSTATE_SYNTAX_OR_ACCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn state_of(sql: &str) -> &'static str {
        let ctx = SessionContext::new();
        let error = match ctx.sql(sql).await {
            Ok(df) => df.collect().await.expect_err(sql),
            Err(e) => e,
        };
        datafusion_sqlstate(&error)
    }

    #[tokio::test]
    async fn datafusion_errors_map_to_postgresql_classes() {
        assert_eq!(state_of("SELEC 1").await, "42601");
        assert_eq!(state_of("SELECT * FROM nowhere").await, "42P01");
        assert_eq!(state_of("SELECT nope FROM (SELECT 1 AS a)").await, "42703");
        assert_eq!(state_of("SELECT no_such_function(1)").await, "42883");
    }
}
