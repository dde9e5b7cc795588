//! The one error type of the durable layer: writing, reading and resuming checkpoints.

use arrow::error::ArrowError;

use super::manifest::ManifestError;
use super::store::StoreError;
use crate::sqlstate::{HasSqlState, SqlState};

/// Errors writing or reading a source's checkpoints.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("encoding {what}: {source}")]
    Encode {
        what: String,
        #[source]
        source: ArrowError,
    },
    /// A file that passed its checksum but does not decode, or decodes to other columns.
    #[error("state file {path} cannot be used: {message}")]
    Decode { path: String, message: String },
    /// Entries a query's version still named were removed by retention while it ran.
    #[error("{message}")]
    Trimmed { message: String },
    /// The manifest and the server disagree (a table gone, the binlog purged...).
    #[error("checkpoint {manifest} cannot be resumed: {message}")]
    Resume { manifest: String, message: String },
}

impl DurableError {
    /// Whether writing the checkpoint again can succeed (see [`StoreError::is_transient`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, DurableError::Store(e) if e.is_transient())
    }
}

impl HasSqlState for DurableError {
    /// The SQLSTATE a client is given: a damaged file is data corruption, a checkpoint that
    /// cannot continue on this server needs repair, anything else is an I/O error.
    fn sqlstate(&self) -> SqlState {
        match self {
            // data_corrupted
            DurableError::Store(StoreError::Corrupt { .. }) | DurableError::Decode { .. } => {
                SqlState::DATA_CORRUPTED
            }
            DurableError::Resume { .. } => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            DurableError::Trimmed { .. } => SqlState::SNAPSHOT_TOO_OLD,
            _ => SqlState::IO_ERROR,
        }
    }
}
