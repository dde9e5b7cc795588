//! Guards on what a client may ask of a statement through the protocol, checked before pgwire
//! or DataFusion act on it: how many rows one `Execute` may ask for, and parameters in a
//! statement that has no values for them.
//!
//! # Invariant
//! No request a client can put in a well-formed message makes the server reserve memory in
//! proportion to a number the client chose, and no statement runs with a parameter unbound.

use datafusion::prelude::DataFrame;
use pgwire::error::PgWireResult;

use crate::frontend::protocol::error::{datafusion_error, user_error};
use crate::sqlstate::SqlState;

/// Rows one `Execute` sends at most before `PortalSuspended`: pgwire reserves room for the
/// rows a client asks for before it has any, so a request for two billion rows (or a negative
/// count, read as even more) would take the server down.
const MAX_ROWS_PER_EXECUTE: i32 = 1 << 16;

/// The rows an `Execute` asking for `asked` sends before suspending: all of them for 0 (as
/// for any count that is not positive), else at most [`MAX_ROWS_PER_EXECUTE`]; a client that
/// asked for more executes the portal again, as after any `PortalSuspended`.
pub fn rows_per_execute(asked: i32) -> i32 {
    if asked <= 0 {
        0
    } else {
        asked.min(MAX_ROWS_PER_EXECUTE)
    }
}

/// Refuses a statement of the simple protocol (which has no parameter values) that uses a
/// parameter, as PostgreSQL does, before anything runs it.
pub fn no_parameters(df: &DataFrame) -> PgWireResult<()> {
    let used = df
        .logical_plan()
        .get_parameter_types()
        .map_err(datafusion_error)?;
    match used.keys().min() {
        None => Ok(()),
        Some(first) => Err(user_error(
            SqlState::UNDEFINED_PARAMETER,
            format!("there is no parameter {first}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_execute_never_asks_for_more_rows_than_the_server_reserves() {
        assert_eq!(rows_per_execute(0), 0);
        assert_eq!(rows_per_execute(-1), 0);
        assert_eq!(rows_per_execute(i32::MIN), 0);
        assert_eq!(rows_per_execute(50), 50);
        assert_eq!(rows_per_execute(i32::MAX), MAX_ROWS_PER_EXECUTE);
    }
}
