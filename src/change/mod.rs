//! Typed change events: what the source produces and every later stage consumes.
//!
//! # Invariant
//! A [`SourceTransaction`] is one committed transaction of the source, whole: the engine
//! receives all of its row changes together or none of them, so no later stage can expose half a
//! transaction. Inside it, each [`ChangeBatch`] holds rows of one table and one operation as
//! Arrow batches of the table's schema, and every row has a [`ChangePosition`] that is unique and
//! totally ordered within the server's history (see [`position`]).
//!
//! [`keys`] gives rows their identity (primary key, or the whole row for keyless tables).

pub mod keys;
pub mod position;
pub mod schema;

use std::sync::Arc;

use arrow::array::RecordBatch;

use position::{BinlogCoord, ChangePosition, Gtid};
use schema::TableSchema;

/// The kind of a change, with Debezium's one-letter codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// A row read by a snapshot (`r`): state, not a business insert.
    Read,
    /// `c`
    Insert,
    /// `u`
    Update,
    /// `d`
    Delete,
}

impl Op {
    pub fn code(self) -> &'static str {
        match self {
            Op::Read => "r",
            Op::Insert => "c",
            Op::Update => "u",
            Op::Delete => "d",
        }
    }
}

/// Rows of one table and one operation, in position order.
#[derive(Debug, Clone)]
pub struct ChangeBatch {
    pub table: Arc<TableSchema>,
    pub op: Op,
    /// Before images (updates and deletes), in the table's Arrow schema.
    pub before: Option<RecordBatch>,
    /// After images (inserts, updates, snapshot reads), in the table's Arrow schema.
    pub after: Option<RecordBatch>,
    /// `(event index in the transaction, row index in the event)` of each row.
    pub index: Vec<(u32, u32)>,
}

impl ChangeBatch {
    pub fn num_rows(&self) -> usize {
        self.index.len()
    }
}

/// One committed source transaction (or one DDL statement).
#[derive(Debug, Clone)]
pub struct SourceTransaction {
    /// Where the transaction's first event starts: the `tx` part of its changes' positions.
    pub start: BinlogCoord,
    /// Where the next transaction starts: resuming here neither repeats nor skips anything.
    pub end: BinlogCoord,
    pub gtid: Option<Gtid>,
    /// Commit time, microseconds since the epoch (seconds precision on MariaDB).
    pub commit_ts_micros: i64,
    pub changes: Vec<ChangeBatch>,
    /// DDL statements the transaction carried (`ALTER TABLE ...`), as the server logged them.
    pub ddl: Vec<Ddl>,
}

/// A schema change seen in the binlog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ddl {
    /// The default database the statement ran in.
    pub db: String,
    pub statement: String,
}

impl SourceTransaction {
    pub fn position(&self, event_index: u32, row_index: u32) -> ChangePosition {
        ChangePosition {
            tx: self.start.clone(),
            event_index,
            row_index,
            sub: 0,
        }
    }

    pub fn num_rows(&self) -> usize {
        self.changes.iter().map(ChangeBatch::num_rows).sum()
    }
}
