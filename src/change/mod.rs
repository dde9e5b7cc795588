//! Typed change events: what the source produces and every later stage consumes.
//!
//! # Invariant
//! A [`SourceTransaction`] is one committed transaction of the source, whole: the engine
//! receives all of its row changes together or none of them, so no later stage can expose half a
//! transaction. Inside it, each [`ChangeBatch`] holds rows of one table and one operation as
//! Arrow batches of the table's schema, and every row has a [`ChangePosition`] that is unique and
//! totally ordered within the server's history (see [`position`]).
//!
//! [`keys`] gives rows their identity (primary key, or the whole row for keyless tables);
//! [`kinds`] is the one table of the column kinds without parameters.

pub mod errant;
pub mod keys;
pub mod kinds;
pub mod position;
pub mod schema;

use std::sync::Arc;

use arrow::array::RecordBatch;

use crate::sqlstate::{HasSqlState, SqlState};
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

/// A changelog entry whose `_op` is none of the four codes: the entry was not written by
/// cdcfusion (or was damaged), so whoever reads it stops rather than guess what it meant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown changelog operation {0:?} (an entry's _op is r, c, u or d)")]
pub struct UnknownOp(pub String);

impl Op {
    /// The one-letter code of `_op`.
    pub fn code(self) -> &'static str {
        match self {
            Op::Read => "r",
            Op::Insert => "c",
            Op::Update => "u",
            Op::Delete => "d",
        }
    }

    /// The operation `code` stands for; any other text is an [`UnknownOp`].
    pub fn from_code(code: &str) -> Result<Self, UnknownOp> {
        match code {
            "r" => Ok(Op::Read),
            "c" => Ok(Op::Insert),
            "u" => Ok(Op::Update),
            "d" => Ok(Op::Delete),
            other => Err(UnknownOp(other.to_string())),
        }
    }

    /// Whether the entry leaves a row under its key (everything but a delete).
    pub fn keeps_row(self) -> bool {
        !matches!(self, Op::Delete)
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

    /// Rows `offset..offset + len` of the batch, sharing its buffers.
    pub fn slice(&self, offset: usize, len: usize) -> ChangeBatch {
        ChangeBatch {
            table: Arc::clone(&self.table),
            op: self.op,
            before: self.before.as_ref().map(|b| b.slice(offset, len)),
            after: self.after.as_ref().map(|b| b.slice(offset, len)),
            index: self.index[offset..offset + len].to_vec(),
        }
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

/// Consecutive committed transactions read together, none carrying DDL, whose rows are decoded
/// into shared batches: a run of small transactions costs one set of Arrow arrays per table
/// and operation instead of one per transaction. Applying a run is applying its transactions
/// one by one, in order; it is still whole transactions or none.
#[derive(Debug, Clone, Default)]
pub struct TransactionRun {
    /// The transactions, in binlog order. Their rows are in `changes`, so their own `changes`
    /// are empty; each says where it starts and ends, its GTID and commit time.
    pub txs: Vec<SourceTransaction>,
    /// Rows of one table and one operation, in position order: a batch may hold rows of
    /// several transactions, and the batches in order hold every row of the run in order.
    pub changes: Vec<RunBatch>,
}

/// A [`ChangeBatch`] of a [`TransactionRun`], with each row's transaction.
#[derive(Debug, Clone)]
pub struct RunBatch {
    pub batch: ChangeBatch,
    /// Per row, the index of its transaction in [`TransactionRun::txs`]; never decreasing.
    pub tx: Vec<u32>,
}

impl RunBatch {
    /// The batch's rows grouped by transaction: `(transaction, first row, row count)`.
    pub fn segments(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let &t = self.tx.get(at)?;
            let len = self.tx[at..].iter().take_while(|&&x| x == t).count();
            let segment = (t as usize, at, len);
            at += len;
            Some(segment)
        })
    }
}

impl TransactionRun {
    pub fn num_rows(&self) -> usize {
        self.changes.iter().map(|c| c.batch.num_rows()).sum()
    }

    /// Drops the first `n` transactions and their rows (a resumed capture's transactions that
    /// its checkpoint already holds).
    pub fn skip_first(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let n = n.min(self.txs.len());
        self.txs.drain(..n);
        let cut = n as u32;
        self.changes.retain_mut(|c| {
            // Transactions only grow along a batch: the rows to drop are a prefix.
            let drop = c.tx.iter().take_while(|&&t| t < cut).count();
            if drop > 0 {
                c.batch = c.batch.slice(drop, c.batch.num_rows() - drop);
                c.tx.drain(..drop);
            }
            c.tx.iter_mut().for_each(|t| *t -= cut);
            !c.tx.is_empty()
        });
    }
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

impl HasSqlState for UnknownOp {
    /// `data_corrupted`: the entry was not written by cdcfusion, or was damaged.
    fn sqlstate(&self) -> SqlState {
        SqlState::DATA_CORRUPTED
    }
}
