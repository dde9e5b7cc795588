//! A subscription: a query's rows over one current table at a start point, then every change
//! to those rows as the capture publishes it (`SUBSCRIBE TO (SELECT ... FROM src.db.t)`).
//!
//! # What a client receives
//! Rows of `_position`, `_op`, the query's columns and `_before` (the query's columns over
//! the before image of an update that stays in the result, NULL otherwise):
//! * first, unless the snapshot is turned off, the query's rows at the start point, `_op`
//!   `r`, all at the start point's `_position`;
//! * then one row per changelog entry that touches the result, in the changelog's order:
//!   `c` (a row enters: inserted, or updated into the filter), `u` (updated, in the result
//!   before and after), `d` (a row leaves: deleted, or updated out of the filter, with the
//!   values it had), each with its entry's `_position`;
//! * with progress on, a `p` row (columns NULL) when the subscription has caught up and has
//!   sent nothing for [`PROGRESS_INTERVAL`]: every change before its `_position` was sent.
//!
//! # Invariant
//! `_position` never decreases, and every `_position` a client receives is a point to start
//! again from: `AS OF` it with the snapshot off sends exactly the changes after that row, and
//! with the snapshot on the rows at it and then those changes. Rows come in whole
//! transactions, as the changelog holds them. The query is a function of one row image (the
//! engine refuses anything else), so applying the changes to the snapshot gives the query's
//! answer at every transaction boundary. An entry captured under another schema of the table
//! than the subscription's ends it with `40001` (subscribe again after its `_position`),
//! never with values read under the wrong columns.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, RecordBatch, RecordBatchOptions,
    StringArray, StructArray, UInt32Array,
};
use arrow::buffer::NullBuffer;
use arrow::compute::{and, cast, filter_record_batch, interleave, is_not_null, take};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

use super::as_of::Cut;
use super::tail::{TailReader, TailStep};
use crate::change::position::ChangePosition;
use crate::change::schema::TableSchema;
use crate::change::Op;
use crate::provider::crossing::through_datafusion;
use crate::sqlstate::{HasSqlState, SqlState};
use crate::state::changelog::{format, ChangelogRows};

/// How long a caught-up subscription with progress on stays quiet before it says how far it
/// has read.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// A subscription failed, with the SQLSTATE that says why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct SubscribeError {
    pub sqlstate: SqlState,
    pub message: String,
}

impl SubscribeError {
    pub fn new(sqlstate: SqlState, message: impl Into<String>) -> Self {
        Self {
            sqlstate,
            message: message.into(),
        }
    }

    pub fn into_df(self) -> DataFusionError {
        through_datafusion(self)
    }
}

/// One step of a subscribed query over a table's rows.
#[derive(Debug, Clone)]
pub enum Step {
    /// Keep the columns at these indexes (a scan's projection).
    Columns(Vec<usize>),
    /// Rows for which this is not true leave the result.
    Filter(Arc<dyn PhysicalExpr>),
    /// The columns of the next step, named.
    Project(Vec<(String, Arc<dyn PhysicalExpr>)>),
}

/// A subscribed query as steps over one table's rows, evaluated without dropping a row so
/// each output row stays the image it came from.
#[derive(Debug)]
pub struct RowQuery {
    steps: Vec<Step>,
    /// The table's columns, all nullable (a before image is NULL where there is none).
    input: SchemaRef,
    /// The query's columns.
    output: SchemaRef,
}

impl RowQuery {
    /// The query of `steps` (in evaluation order) over rows of `table`.
    pub fn new(steps: Vec<Step>, table: &Schema) -> Result<Self> {
        let input = nullable(table.fields());
        let mut query = Self {
            steps,
            output: Arc::clone(&input),
            input,
        };
        let (empty, _) = query.eval(&RecordBatch::new_empty(Arc::clone(&query.input)))?;
        query.output = empty.schema();
        Ok(query)
    }

    /// The query's columns.
    pub fn output(&self) -> &SchemaRef {
        &self.output
    }

    /// The query's columns for each row of `rows` (in `input`'s layout), and which rows are
    /// in its result.
    pub fn eval(&self, rows: &RecordBatch) -> Result<(RecordBatch, BooleanArray)> {
        let n = rows.num_rows();
        let mut batch = rows.clone();
        let mut keep = BooleanArray::from(vec![true; n]);
        for step in &self.steps {
            match step {
                Step::Columns(indexes) => batch = batch.project(indexes)?,
                Step::Filter(predicate) => {
                    let value = predicate.evaluate(&batch)?.into_array(n)?;
                    let value = value.as_boolean_opt().ok_or_else(|| {
                        DataFusionError::Plan(format!(
                            "a WHERE condition must be boolean, not {}",
                            value.data_type()
                        ))
                    })?;
                    // NULL is not true: the row is not in the result.
                    let truth = and(value, &is_not_null(value)?)?;
                    keep = and(&keep, &truth)?;
                }
                Step::Project(exprs) => {
                    let mut fields = Vec::with_capacity(exprs.len());
                    let mut columns = Vec::with_capacity(exprs.len());
                    for (name, expr) in exprs {
                        let column = expr.evaluate(&batch)?.into_array(n)?;
                        fields.push(Field::new(name, column.data_type().clone(), true));
                        columns.push(column);
                    }
                    batch = RecordBatch::try_new_with_options(
                        Arc::new(Schema::new(fields)),
                        columns,
                        &RecordBatchOptions::new().with_row_count(Some(n)),
                    )?;
                }
            }
        }
        Ok((batch, keep))
    }
}

/// `fields`, every one nullable.
fn nullable(fields: &Fields) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

/// The columns a subscription sends for `query` (see the module docs).
pub fn output_schema(query: &SchemaRef) -> SchemaRef {
    let mut fields = vec![
        Field::new(format::POSITION, DataType::Utf8, false),
        Field::new(format::OP, DataType::Utf8, false),
    ];
    fields.extend(query.fields().iter().map(|f| f.as_ref().clone()));
    fields.push(Field::new(
        format::BEFORE,
        DataType::Struct(query.fields().clone()),
        true,
    ));
    Arc::new(Schema::new(fields))
}

/// The `_position` to start again from right after `cut`: a binlog position's text (the
/// transactions before it), or, after a whole transaction a client named by an entry, the
/// greatest position that transaction could hold.
pub fn resume_text(cut: &Cut) -> String {
    if cut.event == u32::MAX {
        ChangePosition {
            tx: cut.coord.clone(),
            event_index: u32::MAX,
            row_index: u32::MAX,
            sub: u8::MAX,
        }
        .to_string()
    } else {
        ChangePosition::text_before(&cut.coord)
    }
}

/// Where a subscription starts.
#[derive(Debug)]
pub struct Start {
    /// The query's table at the start point, when the snapshot is on.
    pub snapshot: Option<Vec<RecordBatch>>,
    /// The start point's `_position`.
    pub position: String,
    /// The table's changes after the start point.
    pub reader: TailReader,
}

/// A running subscription's state (see the module docs).
struct Subscription {
    query: Arc<RowQuery>,
    table: Arc<TableSchema>,
    output: SchemaRef,
    snapshot: VecDeque<RecordBatch>,
    start: Option<String>,
    reader: TailReader,
    progress: bool,
    /// The `_position` of the last row sent.
    last: String,
    last_sent: Instant,
}

/// The rows of a subscription to `query` over `table` from `start` (see the module docs).
pub fn subscription(
    query: Arc<RowQuery>,
    table: Arc<TableSchema>,
    start: Start,
    progress: bool,
) -> SendableRecordBatchStream {
    let output = output_schema(query.output());
    let state = Subscription {
        output: Arc::clone(&output),
        query,
        table,
        snapshot: start.snapshot.unwrap_or_default().into(),
        start: Some(start.position.clone()),
        reader: start.reader,
        progress,
        last: start.position,
        last_sent: Instant::now(),
    };
    let stream = futures::stream::unfold(Some(state), |state| async move {
        let mut state = state?;
        match state.next().await {
            Ok(Some(batch)) => Some((Ok(batch), Some(state))),
            Ok(None) => None,
            Err(e) => Some((Err(e), None)),
        }
    });
    Box::pin(RecordBatchStreamAdapter::new(output, stream))
}

impl Subscription {
    /// The next rows to send; `None` once the source is gone.
    async fn next(&mut self) -> Result<Option<RecordBatch>> {
        while let Some(rows) = self.snapshot.pop_front() {
            let out = self.snapshot_rows(&rows)?;
            if out.num_rows() > 0 {
                return Ok(Some(self.sent(out)));
            }
        }
        if let Some(start) = self.start.take() {
            if self.progress {
                return Ok(Some(self.sent(self.progress_row(&start)?)));
            }
        }
        loop {
            match self.reader.step().await? {
                TailStep::Entries(entries) => {
                    if let Some(out) = self.changes(&entries)? {
                        return Ok(Some(self.sent(out)));
                    }
                    continue;
                }
                TailStep::CaughtUp(position) => {
                    let reached = position
                        .map(|p| ChangePosition::text_before(&p))
                        .filter(|text| self.progress && *text > self.last);
                    if let Some(text) = reached {
                        let quiet = PROGRESS_INTERVAL.saturating_sub(self.last_sent.elapsed());
                        if quiet.is_zero() {
                            return Ok(Some(self.sent(self.progress_row(&text)?)));
                        }
                        let changed = tokio::select! {
                            changed = self.reader.changed() => Some(changed),
                            () = tokio::time::sleep(quiet) => None,
                        };
                        match changed {
                            Some(true) => continue,
                            Some(false) => return Ok(None),
                            None => return Ok(Some(self.sent(self.progress_row(&text)?))),
                        }
                    }
                }
            }
            if !self.reader.changed().await {
                return Ok(None);
            }
        }
    }

    /// Notes that `rows` are sent (their last `_position` and when).
    fn sent(&mut self, rows: RecordBatch) -> RecordBatch {
        let positions = rows.column(0).as_string::<i32>();
        if let Some(last) = positions.iter().flatten().next_back() {
            self.last = last.to_string();
        }
        self.last_sent = Instant::now();
        rows
    }

    /// The query's rows among `rows` of the table at the start point.
    fn snapshot_rows(&self, rows: &RecordBatch) -> Result<RecordBatch> {
        let rows = conform(rows, &self.query.input)?;
        let (values, keep) = self.query.eval(&rows)?;
        let values = filter_record_batch(&values, &keep)?;
        let n = values.num_rows();
        let start = self.start.as_deref().unwrap_or(&self.last);
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![start; n])),
            Arc::new(StringArray::from(vec!["r"; n])),
        ];
        columns.extend(values.columns().iter().cloned());
        columns.push(new_null_array(&self.before_type(), n));
        Ok(RecordBatch::try_new(Arc::clone(&self.output), columns)?)
    }

    /// A progress row at `position`.
    fn progress_row(&self, position: &str) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![position])),
            Arc::new(StringArray::from(vec!["p"])),
        ];
        for field in self.query.output().fields() {
            columns.push(new_null_array(field.data_type(), 1));
        }
        columns.push(new_null_array(&self.before_type(), 1));
        Ok(RecordBatch::try_new(Arc::clone(&self.output), columns)?)
    }

    /// `_before`'s type: a struct of the query's columns (see [`output_schema`]).
    fn before_type(&self) -> DataType {
        DataType::Struct(self.query.output().fields().clone())
    }

    /// The rows changelog `entries` send (see the module docs); `None` when they touch
    /// nothing in the result.
    fn changes(&self, entries: &RecordBatch) -> Result<Option<RecordBatch>> {
        let rows = ChangelogRows::new(entries)?;
        self.check_schema(&rows)?;
        let ops = (0..rows.len())
            .map(|i| rows.op(i))
            .collect::<std::result::Result<Vec<Op>, _>>()
            .map_err(through_datafusion)?;
        let after = conform(entries, &self.query.input)?;
        let (after_values, after_kept) = self.query.eval(&after)?;
        // Before images of updates only: the other entries have none.
        let updates: Vec<u32> = (0..entries.num_rows())
            .filter(|&i| ops[i] == Op::Update)
            .map(|i| i as u32)
            .collect();
        let before_rows = before_images(&rows, &self.query.input)?;
        let before_rows = take_rows(&before_rows, &UInt32Array::from(updates.clone()))?;
        let (before_values, before_kept) = self.query.eval(&before_rows)?;
        // (op, which image, its row, the entry, the before image's row of a `u`)
        let mut out: Vec<(Op, usize, usize, usize, Option<usize>)> = Vec::new();
        let mut update = 0;
        for (i, op) in ops.iter().enumerate() {
            let in_after = after_kept.value(i);
            match op {
                Op::Update => {
                    let in_before = before_kept.value(update);
                    match (in_before, in_after) {
                        (true, true) => out.push((Op::Update, 0, i, i, Some(update))),
                        (true, false) => out.push((Op::Delete, 1, update, i, None)),
                        (false, true) => out.push((Op::Insert, 0, i, i, None)),
                        (false, false) => {}
                    }
                    update += 1;
                }
                op if in_after => out.push((*op, 0, i, i, None)),
                _ => {}
            }
        }
        if out.is_empty() {
            return Ok(None);
        }
        let entry_rows = UInt32Array::from(out.iter().map(|o| o.3 as u32).collect::<Vec<_>>());
        let positions = take(rows.positions(), &entry_rows, None)?;
        let mut columns: Vec<ArrayRef> = vec![
            positions,
            Arc::new(StringArray::from(
                out.iter().map(|o| o.0.code()).collect::<Vec<_>>(),
            )),
        ];
        let picks: Vec<(usize, usize)> = out.iter().map(|o| (o.1, o.2)).collect();
        let before_picks: Vec<(usize, usize)> = out
            .iter()
            .map(|o| o.4.map_or((0, 0), |row| (1, row)))
            .collect();
        let mut before_columns = Vec::new();
        for (a, b) in after_values.columns().iter().zip(before_values.columns()) {
            columns.push(interleave(&[a.as_ref(), b.as_ref()], &picks)?);
            let none = new_null_array(b.data_type(), 1);
            before_columns.push(interleave(&[none.as_ref(), b.as_ref()], &before_picks)?);
        }
        let valid = NullBuffer::from(out.iter().map(|o| o.4.is_some()).collect::<Vec<_>>());
        columns.push(Arc::new(StructArray::try_new(
            self.query.output().fields().clone(),
            before_columns,
            Some(valid),
        )?));
        Ok(Some(RecordBatch::try_new(
            Arc::clone(&self.output),
            columns,
        )?))
    }

    /// Refuses entries captured under another schema of the table than the subscription's.
    fn check_schema(&self, entries: &ChangelogRows<'_>) -> Result<()> {
        let Some(i) = (0..entries.len()).find(|&i| entries.schema_version(i) != self.table.version)
        else {
            return Ok(());
        };
        let position = entries.position(i).to_string();
        Err(SubscribeError::new(
            // serialization_failure: run it again.
            SqlState::T_R_SERIALIZATION_FAILURE,
            format!(
                "{} changed its columns: the change at _position {position} was captured under \
                 schema version {} and this subscription reads version {} (cdc.schema_history \
                 shows the change); subscribe again AS OF '{}' WITH (snapshot = false) to go on \
                 under the new columns",
                self.table.id,
                entries.schema_version(i),
                self.table.version,
                self.last
            ),
        )
        .into_df())
    }
}

/// `batch`'s columns named as `schema`'s, in its order and types: a column the batch lacks
/// (added after the entries were captured) is NULL.
fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let n = batch.num_rows();
    conform_columns(n, schema, |name| batch.column_by_name(name).cloned())
}

/// The before images of changelog `entries`, as rows of `schema`.
fn before_images(entries: &ChangelogRows<'_>, schema: &SchemaRef) -> Result<RecordBatch> {
    let before = entries.before();
    conform_columns(entries.len(), schema, |name| {
        before.column_by_name(name).cloned()
    })
}

fn conform_columns(
    n: usize,
    schema: &SchemaRef,
    column: impl Fn(&str) -> Option<ArrayRef>,
) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        columns.push(match column(field.name()) {
            Some(c) if c.data_type() == field.data_type() => c,
            Some(c) => cast(&c, field.data_type())?,
            None => new_null_array(field.data_type(), n),
        });
    }
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(n)),
    )?)
}

fn take_rows(batch: &RecordBatch, rows: &UInt32Array) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), rows, None))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new_with_options(
        batch.schema(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )?)
}

impl HasSqlState for SubscribeError {
    fn sqlstate(&self) -> SqlState {
        self.sqlstate.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::position::BinlogCoord;

    #[test]
    fn resume_points_sort_between_the_entries_they_separate() {
        let tx = BinlogCoord::new("binlog.000002", 900);
        let entry = |event, row| {
            ChangePosition {
                tx: tx.clone(),
                event_index: event,
                row_index: row,
                sub: 1,
            }
            .to_string()
        };
        let at = resume_text(&Cut::at(tx.clone()));
        assert!(at < entry(1, 0), "{at}");
        let after = resume_text(&Cut {
            coord: tx.clone(),
            event: u32::MAX,
        });
        assert!(after > entry(7, 9999), "{after}");
        assert!(after < ChangePosition::text_before(&BinlogCoord::new("binlog.000002", 901)));
        // Both read back as points AS OF takes.
        assert!(super::super::as_of::AsOf::parse(&at).is_ok());
        assert!(matches!(
            super::super::as_of::AsOf::parse(&after),
            Ok(super::super::as_of::AsOf::Entry(_))
        ));
    }
}
