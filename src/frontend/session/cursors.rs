//! A connection's cursors: `DECLARE name CURSOR FOR query | SUBSCRIBE ...`, `FETCH` and
//! `CLOSE`, as psql and drivers (psycopg's named cursors) use them.
//!
//! # Rules (PostgreSQL's, for forward-only cursors)
//! * `DECLARE` needs a transaction block unless the cursor is `WITH HOLD` (`25P01`); a name
//!   already declared is `42P03`, an unknown one `34000`.
//! * `COMMIT` and `ROLLBACK` close the block's cursors; `WITH HOLD` ones stay until `CLOSE`.
//! * `FETCH n` of a query's cursor returns its next `n` rows (fewer at its end); of a
//!   subscription's, it waits until at least one row is there and returns the rows ready then,
//!   up to `n`, so a client polls with `FETCH` and never waits for rows that are not coming.
//!
//! # Invariant
//! A cursor's rows are read from one stream, each row once, in order: what one `FETCH`
//! returns the next does not. A `FETCH` that is cancelled or times out while it waits loses
//! no row (the batch it waited for stays in the stream).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::SendableRecordBatchStream;
use futures::{FutureExt, StreamExt};
use pgwire::error::PgWireResult;
use sqlparser::ast::Statement;

use crate::frontend::protocol::conn::{Stop, Stopped};
use crate::frontend::protocol::error::{canceled, datafusion_error, user_error};
use crate::locks::Locked;
use crate::sqlstate::SqlState;

/// A `DECLARE ... CURSOR FOR query` (PostgreSQL's grammar), as a statement to run.
#[derive(Debug, Clone)]
pub struct DeclareQuery {
    pub cursor: String,
    pub hold: bool,
    pub query: Box<sqlparser::ast::Query>,
}

impl DeclareQuery {
    /// The `DECLARE` that `statement` is, if it declares one cursor over a query.
    pub fn of(statement: &Statement) -> Option<Self> {
        let Statement::Declare { stmts } = statement else {
            return None;
        };
        let [declare] = stmts.as_slice() else {
            return None;
        };
        let [name] = declare.names.as_slice() else {
            return None;
        };
        let query = declare.for_query.clone()?;
        let cursor = match name.quote_style {
            Some(_) => name.value.clone(),
            None => name.value.to_lowercase(),
        };
        Some(Self {
            cursor,
            hold: declare.hold == Some(true),
            query,
        })
    }
}

/// One declared cursor.
pub struct Cursor {
    pub schema: SchemaRef,
    /// Survives the end of the transaction block.
    hold: bool,
    /// A subscription's: `FETCH` returns what is ready instead of waiting for `n` rows.
    endless: bool,
    /// Its rows: the batch begun, then the stream (one `FETCH` at a time).
    rows: tokio::sync::Mutex<Rows>,
}

struct Rows {
    begun: Option<RecordBatch>,
    stream: SendableRecordBatchStream,
    ended: bool,
}

impl Cursor {
    pub fn new(stream: SendableRecordBatchStream, hold: bool, endless: bool) -> Self {
        Self {
            schema: stream.schema(),
            hold,
            endless,
            rows: tokio::sync::Mutex::new(Rows {
                begun: None,
                stream,
                ended: false,
            }),
        }
    }

    /// The next `count` rows (all, for `None`; see the module docs), stoppable by `stop`.
    pub async fn fetch(&self, count: Option<u64>, stop: &Stop) -> PgWireResult<RecordBatch> {
        let want = count.map_or(usize::MAX, |c| usize::try_from(c).unwrap_or(usize::MAX));
        let mut rows = self.rows.lock().await;
        let mut out: Vec<RecordBatch> = Vec::new();
        let mut have = 0;
        while have < want && !rows.ended {
            let batch = match rows.begun.take() {
                Some(batch) => batch,
                None if self.endless && have > 0 => {
                    // Only what is ready now: a subscription's next row may be far off.
                    match rows.stream.next().now_or_never() {
                        Some(Some(batch)) => batch.map_err(datafusion_error)?,
                        Some(None) => {
                            rows.ended = true;
                            break;
                        }
                        None => break,
                    }
                }
                None => {
                    let stopped = stop.stopped();
                    tokio::select! {
                        biased;
                        why = stopped => return Err(canceled(why == Stopped::TimedOut)),
                        next = rows.stream.next() => match next {
                            Some(batch) => batch.map_err(datafusion_error)?,
                            None => {
                                rows.ended = true;
                                break;
                            }
                        },
                    }
                }
            };
            let take = (want - have).min(batch.num_rows());
            if take < batch.num_rows() {
                rows.begun = Some(batch.slice(take, batch.num_rows() - take));
            }
            have += take;
            out.push(batch.slice(0, take));
        }
        concat_batches(&self.schema, &out).map_err(|e| datafusion_error(e.into()))
    }
}

/// The cursors of one connection.
#[derive(Default)]
pub struct Cursors {
    open: Mutex<HashMap<String, Arc<Cursor>>>,
}

impl std::fmt::Debug for Cursors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.lock().keys().cloned().collect();
        f.debug_struct("Cursors").field("open", &names).finish()
    }
}

impl Cursors {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Cursor>>> {
        self.open.locked()
    }

    /// Declares `name`; refused when it exists (see the module docs).
    pub fn declare(&self, name: &str, cursor: Cursor) -> PgWireResult<()> {
        let mut open = self.lock();
        if open.contains_key(name) {
            return Err(user_error(
                SqlState::DUPLICATE_CURSOR,
                format!("cursor \"{name}\" already exists"),
            ));
        }
        open.insert(name.to_string(), Arc::new(cursor));
        Ok(())
    }

    /// The cursor `name`.
    pub fn get(&self, name: &str) -> PgWireResult<Arc<Cursor>> {
        self.lock().get(name).cloned().ok_or_else(|| unknown(name))
    }

    /// Closes `name`, or every cursor (`None`).
    pub fn close(&self, name: Option<&str>) -> PgWireResult<()> {
        let mut open = self.lock();
        match name {
            Some(name) => open.remove(name).map(drop).ok_or_else(|| unknown(name)),
            None => {
                open.clear();
                Ok(())
            }
        }
    }

    /// The transaction block ended: its cursors close, `WITH HOLD` ones stay.
    pub fn block_ended(&self) {
        self.lock().retain(|_, cursor| cursor.hold);
    }
}

fn unknown(name: &str) -> pgwire::error::PgWireError {
    user_error(
        SqlState::INVALID_CURSOR_NAME,
        format!("cursor \"{name}\" does not exist"),
    )
}
