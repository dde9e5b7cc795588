//! Typed change events: what the source produces and every later stage consumes.
//!
//! # Invariant
//! A [`SourceTransaction`] is one committed transaction of the source, whole: the engine
//! receives all of its row changes together or none of them, so no later stage can expose half a
//! transaction. Inside it, each [`ChangeBatch`] holds rows of one table and one operation as
//! Arrow batches of the table's schema, and every row has a [`ChangePosition`] that is unique and
//! totally ordered within the server's history (see `source::position`).
//!
//! [`keys`] gives rows their identity (primary key, or the whole row for keyless tables).

pub mod keys;

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

use crate::source::position::{BinlogCoord, ChangePosition, Gtid};
use crate::source::schema::TableSchema;

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

    /// The changes of one table as a flat batch for display: `_op`, `_position`, `_gtid`,
    /// `_commit_ts`, then the table's columns (after image; the before image for deletes).
    pub fn display_batches(&self) -> Vec<(String, RecordBatch)> {
        self.changes
            .iter()
            .filter_map(|c| {
                let image = c.after.as_ref().or(c.before.as_ref())?;
                let n = c.num_rows();
                let mut fields = vec![
                    Field::new("_op", DataType::Utf8, false),
                    Field::new("_position", DataType::Utf8, false),
                    Field::new("_gtid", DataType::Utf8, true),
                    Field::new(
                        "_commit_ts",
                        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                        false,
                    ),
                ];
                fields.extend(image.schema().fields().iter().map(|f| f.as_ref().clone()));
                let positions: Vec<String> = c
                    .index
                    .iter()
                    .map(|(e, r)| self.position(*e, *r).to_string())
                    .collect();
                let gtid = self.gtid.as_ref().map(ToString::to_string);
                let mut columns: Vec<ArrayRef> = vec![
                    Arc::new(StringArray::from(vec![c.op.code(); n])),
                    Arc::new(StringArray::from(positions)),
                    Arc::new(StringArray::from(vec![gtid; n])),
                    Arc::new(
                        TimestampMicrosecondArray::from(vec![self.commit_ts_micros; n])
                            .with_timezone("UTC"),
                    ),
                ];
                columns.extend(image.columns().iter().cloned());
                let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
                    .expect("columns match the fields built alongside them");
                Some((c.table.id.to_string(), batch))
            })
            .collect()
    }
}
