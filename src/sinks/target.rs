//! What a target is to the sink runner: somewhere rows are committed atomically, together with
//! the sink's position.
//!
//! # Invariant (exactly once, held by the target)
//! A [`Commit`] is written in one atomic step of the target, and that step also records the
//! commit's [`Committed`] marker (the sink, its commit number and the last changelog position
//! covered). [`Target::open`] reads the newest marker back, so after any crash the runner
//! resumes strictly after the last position the target holds: nothing is written twice and
//! nothing is skipped. The runner only ever cuts commits on source-transaction boundaries.
//! [`Target::read`] gives the newest marker and the rows in one consistent read, so the rows
//! are exactly what the target held at that marker (what reconciliation compares).

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;

use super::error::SinkError;

/// How a sink writes its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkMode {
    /// Every change is appended as a row (with its `_op`, `_position`, ...).
    Changelog,
    /// The target holds one row per key: inserts and updates upsert it, deletes remove it.
    Upsert,
}

impl SinkMode {
    pub fn name(self) -> &'static str {
        match self {
            SinkMode::Changelog => "changelog",
            SinkMode::Upsert => "upsert",
        }
    }
}

/// What the target is told when it opens: the rows' columns and how they are keyed.
#[derive(Debug, Clone)]
pub struct TargetLayout {
    /// The sink's name: the identity its commit markers carry.
    pub sink: String,
    /// Columns of the rows the query produces (nullability as the query says).
    pub schema: SchemaRef,
    pub mode: SinkMode,
    /// In upsert mode, the names (in `schema`) of the key columns; empty in changelog mode.
    pub key: Vec<String>,
}

/// The marker a target keeps with each commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// 1 for the sink's first commit, then one more for each.
    pub number: u64,
    /// The `_position` text of the last changelog entry the commit covers: the runner resumes
    /// strictly after it.
    pub position: String,
}

/// What a target holds for one sink, read at one moment: the newest marker and the rows as
/// of that marker.
#[derive(Debug, Clone, Default)]
pub struct TargetRows {
    /// `None`: the sink has never committed to this target.
    pub committed: Option<Committed>,
    /// The target's rows, in the types it stores them in (see [`Target::stored`]).
    pub rows: Vec<RecordBatch>,
}

/// One atomic commit.
#[derive(Debug, Clone)]
pub struct Commit {
    pub marker: Committed,
    /// Rows to append (changelog mode) or upsert by key (upsert mode). Its schema is the
    /// layout's, or a later one with more (nullable) columns after a schema change that the
    /// sink follows: the target adds them in this same commit.
    pub rows: RecordBatch,
    /// Upsert mode: keys to delete (the key columns only, named as in the layout); applied
    /// before `rows`, and no key is in both. Empty in changelog mode.
    pub deletes: Option<RecordBatch>,
}

/// A place a sink writes to.
#[async_trait]
pub trait Target: Send + Sync + std::fmt::Debug {
    /// Prepares the target for rows of `layout` (creating the table or directory when absent,
    /// checking it when present) and returns the newest commit marker of `layout.sink` held
    /// there, if any. A target holding rows of an incompatible shape is
    /// [`SinkError::Conflict`]; one that cannot be reached is [`SinkError::Unavailable`].
    async fn open(&mut self, layout: &TargetLayout) -> Result<Option<Committed>, SinkError>;

    /// Writes `commit` atomically with its marker. On error nothing of it is visible, and the
    /// runner may call `open` again and retry.
    async fn commit(&mut self, commit: &Commit) -> Result<(), SinkError>;

    /// Reads the newest marker of `layout.sink` and the target's rows in one consistent read
    /// (one transaction, one table version, the files up to one commit), creating nothing:
    /// a target that does not exist yet holds no commit.
    async fn read(&self, layout: &TargetLayout) -> Result<TargetRows, SinkError>;

    /// `rows` of the sink's query as the target stores them (the same conversion `commit`
    /// applies), so they compare with what [`Target::read`] returns value for value.
    fn stored(&self, rows: &RecordBatch) -> Result<RecordBatch, SinkError> {
        Ok(rows.clone())
    }

    /// What the target is, for status and errors (password masked).
    fn describe(&self) -> String;
}
