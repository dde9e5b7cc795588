//! How an error of ours crosses DataFusion: as a [`Coded`] error carrying its SQLSTATE, so
//! whoever receives the `DataFusionError` (the engine's statement, the front end) reads the
//! code from the wrapper, never from the error's type or text.

use datafusion::error::DataFusionError;

use crate::sqlstate::{Coded, HasSqlState, SqlState};

/// `error`, with its own SQLSTATE, as a `DataFusionError`.
pub fn through_datafusion<E>(error: E) -> DataFusionError
where
    E: HasSqlState + std::error::Error + Send + Sync + 'static,
{
    DataFusionError::External(Box::new(Coded::new(error)))
}

/// `error` with SQLSTATE `code`, as a `DataFusionError`: for errors of other crates, whose
/// class the caller knows.
pub fn coded(
    code: SqlState,
    error: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> DataFusionError {
    DataFusionError::External(Box::new(Coded::with_code(code, error)))
}
