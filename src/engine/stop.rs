//! Why a source's capture stopped, and how a stop becomes the source's fault.
//!
//! # Invariant
//! Every way out of a capture task is a [`Stop`] (or a caught panic), and each carries its
//! SQLSTATE from where it was raised: [`fail`] records it in the status and in the health the
//! scans check, so a stopped source is never silent.

use std::sync::Mutex;

use super::source_status::SourceStatus;
use crate::durable::DurableError;
use crate::locks::Locked;
use crate::provider::health::{Fault, Health};
use crate::source::error::SourceError;
use crate::sqlstate::HasSqlState;
use crate::sqlstate::SqlState;

/// Why a capture task stopped.
#[derive(Debug, thiserror::Error)]
pub(super) enum Stop {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    State(#[from] DurableError),
    /// Not a failure: table `0` (an index into the source's tables) took rows the capture
    /// never read (a `RENAME` brought it in from outside the patterns). The published version
    /// holds it stopped; the source goes on by reading it again (`engine::resnapshot`).
    #[error("table {0} is read again")]
    ReadAgain(usize),
}

/// The fault of a caught panic in one of a source's tasks.
pub(super) fn panicked(what: &str, payload: &(dyn std::any::Any + Send)) -> Fault {
    let message = crate::failpoint::panic_message(payload);
    Fault::new(
        SqlState::INTERNAL_ERROR,
        format!("the {what} task failed unexpectedly ({message}); capture stopped"),
    )
}

/// Records that the source stopped: its status and its health (which the scans check).
pub(super) fn fail(status: &Mutex<SourceStatus>, health: &Health, fault: Fault) {
    tracing::error!(error = %fault.describe(), sqlstate = fault.sqlstate.code(), "source stopped");
    status.locked().error = Some(fault.describe());
    health.fail_source(fault);
}

impl Stop {
    /// The fault a stopped capture leaves, with the SQLSTATE its tables answer with.
    pub(super) fn fault(&self) -> Fault {
        let sqlstate = match self {
            Stop::Source(e) => e.sqlstate(),
            Stop::State(e) => e.sqlstate(),
            Stop::ReadAgain(_) => SqlState::INTERNAL_ERROR,
        };
        Fault::new(sqlstate, self.to_string())
    }
}
