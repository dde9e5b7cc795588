//! A current table as it was at a past position: `as_of('db.table', '<position>')`, which
//! `SELECT ... FROM db.table AS OF '<position>'` is written as (see `sql::as_of`).
//!
//! # What a position means
//! The wanted point is a *cut* of the changelog: an entry is in the state AS OF it iff it
//! sorts before the cut. The cut is always on a transaction boundary, so no state AS OF any
//! point holds half a source transaction:
//! * a changelog `_position` (`file:offset:event:row:sub`): the state after the whole
//!   transaction that entry belongs to (a snapshot entry: after every entry of its chunk's
//!   HIGH);
//! * a binlog position (`file:offset`, what `cdc.sources.position` shows): the state of the
//!   server at that point, every transaction that starts before it, and snapshot entries read
//!   at it;
//! * a time: the state before the first transaction committed after it (in binlog order).
//!
//! # Invariant
//! The state is the pinned version's current table with the entries after the cut undone
//! (`state::history`): exactly what replaying the changelog up to the cut gives. Where that
//! would not be the table's state at the cut, the scan fails instead, naming the positions it
//! can read: before the source's snapshot was handed over (`consistent_from`: before it the
//! changelog is a mix of chunk boundaries), past the version's position (not captured yet),
//! before the retained history (retention removed entries that would have to be undone; see
//! [`oldest_point`]), and before the table's last schema change (the entries before it have
//! another schema).
//! Several tables read AS OF one position in one query are one cut of one pinned version.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use futures::TryStreamExt;

use super::current::{partition, SchemaChanged};
use super::health::SharedHealth;
use super::{memory_scan, version_for};
use crate::capture::version::{Published, SourceVersion};
use crate::change::position::{BinlogCoord, ChangePosition};
use crate::change::schema::TableSchema;
use crate::provider::crossing::through_datafusion;
use crate::sqlstate::{HasSqlState, SqlState};
use crate::state::changelog::{read_segments, Changelog, ChangelogRows};
use crate::state::history::{undo, UndoError};

/// A read AS OF a point failed; `sqlstate` says why (see the module docs).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct AsOfError {
    pub message: String,
    pub sqlstate: SqlState,
}

impl AsOfError {
    pub fn new(sqlstate: SqlState, message: String) -> Self {
        Self { message, sqlstate }
    }

    fn into_df(self) -> DataFusionError {
        through_datafusion(self)
    }
}

/// The point a read is AS OF, as the user gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsOf {
    /// A changelog entry's `_position`.
    Entry(ChangePosition),
    /// A binlog position between events.
    Binlog(BinlogCoord),
    /// A commit time, µs since the epoch (UTC).
    Time(i64),
}

impl AsOf {
    /// Reads a position's text: a changelog `_position` or a binlog `file:offset`.
    pub fn parse(text: &str) -> Result<Self, AsOfError> {
        let text = text.trim();
        if let Ok(entry) = text.parse::<ChangePosition>() {
            return Ok(Self::Entry(entry));
        }
        if let Ok(coord) = text.parse::<BinlogCoord>() {
            return Ok(Self::Binlog(coord));
        }
        Err(AsOfError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!(
                "AS OF {text:?} is not a position: give a changelog _position \
                 (file:offset:event:row:sub), a binlog position (file:offset, as \
                 cdc.sources.position shows) or TIMESTAMP '...'"
            ),
        ))
    }
}

impl std::fmt::Display for AsOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AsOf::Entry(p) => write!(f, "'{p}'"),
            AsOf::Binlog(c) => write!(f, "'{c}'"),
            AsOf::Time(t) => match chrono::DateTime::from_timestamp_micros(*t) {
                Some(t) => write!(f, "TIMESTAMP '{}'", t.naive_utc()),
                None => write!(f, "TIMESTAMP {t} µs"),
            },
        }
    }
}

/// Where the changelog is cut: entries whose `(transaction, event index)` sorts before
/// `(coord, event)` are in the state, the rest are not.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cut {
    pub coord: BinlogCoord,
    pub event: u32,
}

impl Cut {
    /// The cut at binlog position `coord`: transactions starting before it, and the snapshot
    /// entries read at it (event index 0: a chunk's rows are the state at its HIGH).
    pub fn at(coord: BinlogCoord) -> Self {
        Self { coord, event: 1 }
    }

    /// The cut right after the transaction of `entry` (its chunk, for a snapshot entry).
    fn after(entry: &ChangePosition) -> Self {
        Self {
            coord: entry.tx.clone(),
            event: if entry.event_index == 0 { 1 } else { u32::MAX },
        }
    }

    /// The cut right before the transaction of `entry`.
    fn before(entry: &ChangePosition) -> Self {
        Self {
            coord: entry.tx.clone(),
            event: entry.event_index,
        }
    }

    /// Text that sorts after the `_position` of every entry in the state and at or before
    /// every other (positions compare as text within one binlog file name length).
    pub fn text(&self) -> String {
        format!(
            "{}:{:010}",
            ChangePosition::text_before(&self.coord),
            self.event
        )
    }
}

/// `db.table` of a source AS OF a point; see the module docs.
#[derive(Debug)]
pub struct AsOfTable {
    source: String,
    published: Published,
    index: usize,
    table: Arc<TableSchema>,
    at: AsOf,
    /// Where the source's tables became the server's state (the hand-off's end).
    consistent_from: Option<BinlogCoord>,
    health: SharedHealth,
}

impl AsOfTable {
    pub fn new(
        source: &str,
        published: Published,
        index: usize,
        table: Arc<TableSchema>,
        at: AsOf,
        consistent_from: Option<BinlogCoord>,
        health: SharedHealth,
    ) -> Self {
        Self {
            source: source.to_string(),
            published,
            index,
            table,
            at,
            consistent_from,
            health,
        }
    }

    /// The table's state AS OF the point, from `version`.
    pub async fn state(&self, version: &SourceVersion) -> Result<Vec<RecordBatch>> {
        Ok(self.state_and_cut(version).await?.0)
    }

    /// [`AsOfTable::state`], with the cut it is the state at.
    pub async fn state_and_cut(&self, version: &SourceVersion) -> Result<(Vec<RecordBatch>, Cut)> {
        let shown = format!("{}.{}", self.source, self.table.id);
        let (Some(snap), Some(log), Some(position)) = (
            version.tables.get(self.index),
            version.changelogs.get(self.index),
            version.position.as_ref(),
        ) else {
            return Err(AsOfError::new(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("{shown} has no published state yet; AS OF reads it once its snapshot is handed over"),
            )
            .into_df());
        };
        if snap.schema().arrow != self.table.arrow {
            return Err(through_datafusion(SchemaChanged {
                table: self.table.id.to_string(),
                version: snap.schema().version,
            }));
        }
        let Some(from) = self.consistent_from.as_ref().filter(|_| version.consistent) else {
            return Err(AsOfError::new(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "source \"{}\" has not handed its snapshot over yet: before that its \
                     tables are not the server's state at any one position, so AS OF cannot \
                     read them (cdc.sources.consistent_from shows where they become so)",
                    self.source
                ),
            )
            .into_df());
        };
        let cut = resolve(&self.at, log, position).await?;
        let oldest = Cut::at(from.clone());
        if cut < oldest {
            return Err(out_of_history(format!(
                "AS OF {} is before the oldest position {shown} can be read at, {from} (where \
                 source \"{}\" handed its snapshot over)",
                self.at, self.source
            )));
        }
        if cut > Cut::at(position.clone()) {
            return Err(out_of_history(format!(
                "AS OF {} is after {position}, where source \"{}\" has captured up to: it is \
                 not in the captured history yet (wait for cdc.sources.position to pass it)",
                self.at, self.source
            )));
        }
        self.check_retained(log, &cut, from, position)?;
        // The entries after the cut must all have the table's current schema.
        if let Some(change) = version
            .schema_history
            .iter()
            .rev()
            .find(|c| c.table == self.index && Cut::at(c.position.clone()) >= cut)
        {
            return Err(AsOfError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                format!(
                    "AS OF {} is before a schema change of {shown} at {} ({}); AS OF reads \
                     only positions after its last schema change, i.e. after the transaction \
                     starting at {}",
                    self.at,
                    change.position,
                    change.statement.chars().take(200).collect::<String>(),
                    change.position
                ),
            )
            .into_df());
        }
        let entries = entries_from(log, &cut).await?;
        let earlier = undo(snap, &entries, Some(cut.coord.clone())).map_err(|e| match e {
            UndoError::Arrow(e) => DataFusionError::ArrowError(Box::new(e), None),
            e @ UndoError::Mismatch { .. } => {
                AsOfError::new(SqlState::INTERNAL_ERROR, e.to_string()).into_df()
            }
            // data_corrupted: an entry cdcfusion did not write.
            e @ UndoError::UnknownOp(_) => {
                AsOfError::new(SqlState::DATA_CORRUPTED, e.to_string()).into_df()
            }
        })?;
        Ok((earlier.scan_all()?, cut))
    }
}

impl AsOfTable {
    /// Refuses a cut whose later entries retention has removed in part: they cannot be undone.
    fn check_retained(
        &self,
        log: &Changelog,
        cut: &Cut,
        from: &BinlogCoord,
        position: &BinlogCoord,
    ) -> Result<()> {
        let trimmed = log.trimmed();
        let Some(last) = &trimmed.last_position else {
            return Ok(());
        };
        let last_entry: ChangePosition = last.parse().map_err(|e| {
            DataFusionError::Internal(format!("a trimmed changelog position {last:?}: {e}"))
        })?;
        let before_time = match self.at {
            AsOf::Time(t) => trimmed.max_commit_ts.is_some_and(|max| t < max),
            _ => false,
        };
        if *cut >= Cut::after(&last_entry) && !before_time {
            return Ok(());
        }
        let oldest = oldest_point(log, Some(from)).unwrap_or_else(|| position.clone());
        Err(out_of_history(format!(
            "AS OF {} is before the retained history of {}.{}: retention (retain_history) \
             removed its changelog up to {last}; the oldest position it can be read at is \
             '{oldest}' (cdc.tables.history_from)",
            self.at, self.source, self.table.id
        )))
    }
}

/// The oldest binlog position a table whose changelog is `log` can be read AS OF: where its
/// source handed over (`consistent_from`), or, once retention removed entries, the start of
/// the first transaction it kept. `None` when retention removed every entry (only the latest
/// state can be read).
pub fn oldest_point(log: &Changelog, consistent_from: Option<&BinlogCoord>) -> Option<BinlogCoord> {
    if log.trimmed().last_position.is_none() {
        return consistent_from.cloned();
    }
    let first = log.segments().next()?;
    let retained = first.min_position.parse::<ChangePosition>().ok()?.tx;
    Some(match consistent_from {
        Some(from) if *from > retained => from.clone(),
        _ => retained,
    })
}

fn out_of_history(message: String) -> DataFusionError {
    AsOfError::new(SqlState::INVALID_PARAMETER_VALUE, message).into_df()
}

/// The cut `at` stands for in `log`, whose version is at `position`.
pub(crate) async fn resolve(at: &AsOf, log: &Changelog, position: &BinlogCoord) -> Result<Cut> {
    Ok(match at {
        AsOf::Entry(entry) => Cut::after(entry),
        AsOf::Binlog(coord) => Cut::at(coord.clone()),
        AsOf::Time(t) => match first_committed_after(log, *t).await? {
            Some(entry) => Cut::before(&entry),
            // Nothing captured was committed after it: the latest state.
            None => Cut::at(position.clone()),
        },
    })
}

/// The position of the first entry, in append order, committed after `t` (µs).
async fn first_committed_after(log: &Changelog, t: i64) -> Result<Option<ChangePosition>> {
    let later: Vec<_> = log
        .segments()
        .skip_while(|s| s.max_commit_ts.is_none_or(|max| max <= t))
        .take(1)
        .cloned()
        .collect();
    let batches: Vec<RecordBatch> = read_segments(later, Arc::clone(&log.schema))
        .map_err(through_datafusion)
        .try_collect()
        .await?;
    for batch in batches {
        let rows = ChangelogRows::new(&batch)?;
        if let Some(i) = (0..rows.len()).find(|i| rows.commit_ts(*i).is_some_and(|ts| ts > t)) {
            let text = rows.position(i);
            return text.parse().map(Some).map_err(|e| {
                DataFusionError::Internal(format!("a changelog position {text:?}: {e}"))
            });
        }
    }
    Ok(None)
}

/// The entries of `log` after `cut`, in append order, in the schema new entries are written
/// under.
pub(crate) async fn entries_from(log: &Changelog, cut: &Cut) -> Result<RecordBatch> {
    let text = cut.text();
    let segments: Vec<_> = log
        .segments()
        .filter(|s| s.max_position >= text)
        .cloned()
        .collect();
    let schema = Arc::clone(&log.written);
    let batches: Vec<RecordBatch> = read_segments(segments, Arc::clone(&schema))
        .map_err(through_datafusion)
        .try_collect()
        .await?;
    let mut after = Vec::with_capacity(batches.len());
    for batch in batches {
        let keep: arrow::array::BooleanArray = ChangelogRows::new(&batch)?
            .positions()
            .iter()
            .map(|p| Some(p.is_some_and(|p| p >= text.as_str())))
            .collect();
        after.push(filter_record_batch(&batch, &keep)?);
    }
    Ok(concat_batches(&schema, &after)?)
}

#[async_trait]
impl TableProvider for AsOfTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.table.arrow)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let version = version_for(state, &self.source, &self.published);
        let stop = version.stopped.get(&self.index);
        let shown = self.table.id.to_string();
        self.health
            .check(state.config(), &self.source, &self.table.id, &shown, stop)?;
        let batches = self.state(&version).await?;
        let partitions = partition(
            batches,
            state.config().target_partitions(),
            state.config().batch_size(),
        );
        memory_scan(&partitions, self.schema(), projection, limit)
    }
}

impl HasSqlState for AsOfError {
    fn sqlstate(&self) -> SqlState {
        self.sqlstate.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse_and_cut_on_transaction_boundaries() {
        let entry = "binlog.000002:000000001234:0000000003:0000000007:0";
        let AsOf::Entry(p) = AsOf::parse(entry).unwrap() else {
            panic!("an entry position")
        };
        let cut = Cut::after(&p);
        // Every entry of the transaction is in; the next transaction is not.
        assert!("binlog.000002:000000001234:0000000009:0000000000:1" < cut.text().as_str());
        assert!("binlog.000002:000000001300:0000000001:0000000000:0" > cut.text().as_str());
        // A snapshot entry: its chunk's entries are in, a transaction starting at HIGH is not.
        let AsOf::Entry(s) =
            AsOf::parse("binlog.000002:000000001234:0000000000:0000000005:0").unwrap()
        else {
            panic!("an entry position")
        };
        let cut = Cut::after(&s);
        assert!("binlog.000002:000000001234:0000000000:0000009999:0" < cut.text().as_str());
        assert!("binlog.000002:000000001234:0000000001:0000000000:0" >= cut.text().as_str());
        assert_eq!(cut, Cut::at(BinlogCoord::new("binlog.000002", 1234)));
        assert_eq!(
            AsOf::parse(" binlog.000002:1234 ").unwrap(),
            AsOf::Binlog(BinlogCoord::new("binlog.000002", 1234))
        );
        let error = AsOf::parse("yesterday").unwrap_err();
        assert_eq!(error.sqlstate, SqlState::INVALID_TEXT_REPRESENTATION);
        assert!(error.message.contains("file:offset"), "{}", error.message);
        // Cuts order by transaction, then event.
        assert!(Cut::at(BinlogCoord::new("binlog.000002", 1234)) < Cut::after(&p));
        assert!(Cut::after(&p) < Cut::at(BinlogCoord::new("binlog.000002", 1235)));
        assert!(
            Cut::at(BinlogCoord::new("binlog.000009", 9))
                < Cut::at(BinlogCoord::new("binlog.000010", 4))
        );
    }
}
