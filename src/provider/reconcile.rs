//! `reconcile('src', 'db.table')`: whether the engine's table equals the server's at one binlog
//! position `H`, key by key, moving checksums instead of rows where they agree.
//!
//! # How
//! 1. *Chunks.* The table is cut into ranges of its first key column when that is an integer
//!    (both sides then put a row in the same range), of about the source's snapshot chunk size;
//!    any other key is one chunk.
//! 2. *Checksums, each in a window.* Per chunk: the binlog position `LOW`, a visibility barrier
//!    (every transaction in the binlog before `LOW` is visible), the server's checksum of the
//!    chunk (`source::checksum`; value columns are fetched with the key), the position `HIGH`.
//!    `H` is the last `HIGH`.
//! 3. *The engine at `H`.* Once the source has captured through `H`, the engine's rows AS OF
//!    `H` (`provider::as_of`), checksummed per chunk. A chunk no transaction from its `LOW` on
//!    touched (the changelog says which keys were) was on the server at `H` what the checksum
//!    read: it agrees iff the checksums and values do.
//! 4. *Drilling in.* A chunk that disagrees, or that was touched after its `LOW`, is read
//!    again in a new window `LOW'..HIGH'` after `H` and brought back to `H` with the
//!    changelog: the window's entries replayed forward (their after images are the server's
//!    rows, as in a snapshot chunk's normalisation), then every entry after `H` undone (their
//!    before images). Its rows are compared with the engine's at `H`, key by key.
//!
//! # Invariant
//! A row of the answer is a difference at `H` between the server's table and the engine's:
//! `missing` (the server has the key, the engine not), `extra` (the other way) or `differs`
//! (the columns that do, with both values). Writes during the run cause no false difference:
//! what a window cannot tell is either outside it or replayed. A chunk is taken as equal on
//! equal row counts and checksums (a CRC-32 of every row's canonical text, XORed). Every run
//! leaves a report in `cdc.reconciliations`: `H`, chunks compared and read again, rows and
//! bytes moved.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use mysql_async::{Conn, Value};

use super::as_of::{entries_from, AsOf, AsOfError, AsOfTable, Cut};
use super::health::SharedHealth;
use super::memory_scan;
use super::mysql::current_schema;
use crate::capture::version::{Published, SourceVersion};
use crate::change::position::BinlogCoord;
use crate::change::schema::{ColumnKind, Flavor, TableSchema};
use crate::change::Op;
use crate::locks::Locked;
use crate::provider::crossing::through_datafusion;
use crate::source::checksum::{chunk_checksum, row_checksum, value_columns, ChunkSum};
use crate::source::connect::ConnectOptions;
use crate::source::error::SourceError;
use crate::source::snapshot::chunks::{estimate_rows, plan_chunks, ChunkRange};
use crate::source::snapshot::select::{select_batches_within, visibility_barrier};
use crate::sqlstate::SqlState;
use crate::state::changelog::ChangelogRows;

/// The longest wait for the source to capture through a window's end.
const CATCH_UP: Duration = Duration::from_secs(120);
/// Reports kept in `cdc.reconciliations`.
const REPORTS_KEPT: usize = 100;

/// What one run of `reconcile` did (a row of `cdc.reconciliations`).
#[derive(Debug, Clone)]
pub struct ReconcileReport {
    pub source: String,
    pub table: String,
    /// What the server's table was compared with: `engine`, or `sink:<name>` (the sink's
    /// target against its query over the engine's state).
    pub against: String,
    /// `H`, where both sides were compared.
    pub position: String,
    pub chunks: u64,
    /// Chunks read again row by row (touched during their window, or differing).
    pub chunks_read: u64,
    /// The engine's rows compared.
    pub rows: u64,
    /// Rows brought from the server (value columns of every chunk, whole rows of the chunks
    /// read again).
    pub rows_fetched: u64,
    /// Bytes brought from the server: the values' text length, plus 16 per checksum.
    pub bytes_moved: u64,
    pub differences: u64,
    /// When the run finished (µs since the epoch) and how long it took.
    pub finished_micros: i64,
    pub seconds: f64,
}

/// The reports of the latest runs, newest last.
pub type ReconcileLog = Arc<Mutex<VecDeque<ReconcileReport>>>;

/// Adds `report` to `log`, dropping the oldest beyond the reports kept.
pub fn log_report(log: &ReconcileLog, report: ReconcileReport) {
    let mut log = log.locked();
    if log.len() >= REPORTS_KEPT {
        log.pop_front();
    }
    log.push_back(report);
}

/// The rows `reconcile` answers.
pub fn reconcile_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("position", DataType::Utf8, false),
        Field::new("chunk", DataType::UInt64, false),
        Field::new("key", DataType::Utf8, false),
        Field::new("difference", DataType::Utf8, false),
        Field::new("columns", DataType::Utf8, true),
        Field::new("source_values", DataType::Utf8, true),
        Field::new("engine_values", DataType::Utf8, true),
    ]))
}

fn external(e: SourceError) -> DataFusionError {
    through_datafusion(e)
}

fn refused(sqlstate: SqlState, message: String) -> DataFusionError {
    through_datafusion(AsOfError::new(sqlstate, message))
}

/// `reconcile('src', 'db.table')`; see the module docs.
#[derive(Debug)]
pub struct ReconcileTable {
    pub source: String,
    /// Target rows per chunk (the source's snapshot chunk size): one checksum query each.
    pub chunk_rows: usize,
    pub connect: ConnectOptions,
    pub published: Published,
    pub index: usize,
    pub table: Arc<TableSchema>,
    pub consistent_from: Option<BinlogCoord>,
    pub health: SharedHealth,
    pub log: ReconcileLog,
}

#[async_trait]
impl TableProvider for ReconcileTable {
    fn schema(&self) -> SchemaRef {
        reconcile_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let version = self.published.load_full();
        let shown = self.table.id.to_string();
        self.health.check(
            state.config(),
            &self.source,
            &self.table.id,
            &shown,
            version.stopped.get(&self.index),
        )?;
        let started = Instant::now();
        let mut run = Run::new(self).await?;
        let batch = run.reconcile().await?;
        let mut report = run.report;
        report.seconds = started.elapsed().as_secs_f64();
        report.finished_micros = chrono::Utc::now().timestamp_micros();
        log_report(&self.log, report);
        memory_scan(&[vec![batch]], reconcile_schema(), projection, limit)
    }
}

/// One chunk: its range, its window's start and the server's checksum and values.
struct Chunk {
    range: ChunkRange,
    /// The range's integer bounds (`None`: unbounded), for the engine's rows.
    bounds: (Option<i128>, Option<i128>),
    low: BinlogCoord,
    sum: ChunkSum,
    /// Rendered key → rendered value columns, from the server.
    values: BTreeMap<String, Vec<Option<String>>>,
}

/// A row rendered for comparison: its key's text, its chunk column's value and every
/// column's text (`None` for NULL).
#[derive(Debug, Clone)]
struct Rendered {
    key: String,
    chunk_value: Option<i128>,
    values: Vec<Option<String>>,
}

/// One run of `reconcile` against the server.
struct Run<'a> {
    table: &'a ReconcileTable,
    /// The server's schema of the table (checked equal to the captured one).
    schema: Arc<TableSchema>,
    conn: Conn,
    flavor: Flavor,
    /// The first key column, when the table is cut by it.
    chunk_column: Option<usize>,
    report: ReconcileReport,
}

impl<'a> Run<'a> {
    async fn new(table: &'a ReconcileTable) -> Result<Run<'a>> {
        if table.table.primary_key.is_empty() {
            return Err(refused(
                SqlState::FEATURE_NOT_SUPPORTED,
                format!(
                    "reconcile compares rows by primary key, and {} has none",
                    table.table.id
                ),
            ));
        }
        let (info, schema) = current_schema(&table.connect, &table.table).await?;
        let conn = table.connect.connect().await.map_err(external)?;
        let first = schema.primary_key[0];
        let chunk_column =
            matches!(schema.columns[first].kind, ColumnKind::Int { .. }).then_some(first);
        Ok(Run {
            report: ReconcileReport {
                source: table.source.clone(),
                table: table.table.id.to_string(),
                against: "engine".to_string(),
                position: String::new(),
                chunks: 0,
                chunks_read: 0,
                rows: 0,
                rows_fetched: 0,
                bytes_moved: 0,
                differences: 0,
                finished_micros: 0,
                seconds: 0.0,
            },
            table,
            schema,
            conn,
            flavor: info.flavor,
            chunk_column,
        })
    }

    async fn position(&mut self) -> Result<BinlogCoord> {
        Ok(self
            .table
            .connect
            .position(&mut self.conn, self.flavor)
            .await
            .map_err(external)?
            .0)
    }

    /// Opens a window on the rows `predicate` selects: its `LOW`, after which every
    /// transaction already in the binlog is visible to the next read.
    async fn window_start(
        &mut self,
        predicate: Option<&str>,
        params: &[Value],
    ) -> Result<BinlogCoord> {
        let low = self.position().await?;
        visibility_barrier(
            &mut self.conn,
            &self.schema,
            self.flavor,
            predicate,
            params.to_vec(),
            self.table.connect.read_timeout,
        )
        .await
        .map_err(external)?;
        Ok(low)
    }

    /// The predicate and parameters selecting `range`.
    fn predicate(&self, range: &ChunkRange) -> (Option<String>, Vec<Value>) {
        match self.chunk_column {
            Some(c) => range.predicate(&self.schema.columns[c].name),
            None => (None, vec![]),
        }
    }

    async fn reconcile(&mut self) -> Result<RecordBatch> {
        let limit = self.table.connect.read_timeout;
        let ranges = match self.chunk_column {
            Some(c) => {
                let estimate = estimate_rows(&mut self.conn, &self.schema, limit)
                    .await
                    .map_err(external)?;
                let rows = self.table.chunk_rows;
                plan_chunks(&mut self.conn, &self.schema, c, rows, estimate, limit)
                    .await
                    .map_err(external)?
            }
            None => vec![ChunkRange::ALL],
        };
        // Value columns outside the key: fetched after the key columns, in this order.
        let values: Vec<usize> = value_columns(&self.schema)
            .into_iter()
            .filter(|v| !self.schema.primary_key.contains(v))
            .collect();
        let value_schema = projected(&self.schema, &values);
        let key_width = self.schema.primary_key.len();
        let mut chunks = Vec::with_capacity(ranges.len());
        let mut high = None;
        for range in ranges {
            let (predicate, params) = self.predicate(&range);
            let low = self.window_start(predicate.as_deref(), &params).await?;
            let sum = chunk_checksum(
                &mut self.conn,
                &self.schema,
                predicate.as_deref(),
                params.clone(),
                limit,
            )
            .await
            .map_err(external)?;
            self.report.bytes_moved += 16;
            let mut fetched = BTreeMap::new();
            if let Some(value_schema) = &value_schema {
                let batches = select_batches_within(
                    &mut self.conn,
                    value_schema,
                    predicate.as_deref(),
                    params,
                    4096,
                    limit,
                )
                .await
                .map_err(external)?;
                for row in render_all(value_schema, None, &batches)? {
                    self.count_fetched(&row);
                    fetched.insert(row.key, row.values[key_width..].to_vec());
                }
            }
            high = Some(self.position().await?);
            let bounds = (bound(&range.start), bound(&range.end));
            chunks.push(Chunk {
                range,
                bounds,
                low,
                sum,
                values: fetched,
            });
        }
        // Planning gives at least one chunk, so there is a last HIGH.
        let high = match high {
            Some(h) => h,
            None => self.position().await?,
        };
        self.report.chunks = chunks.len() as u64;
        self.report.position = high.to_string();
        let version = self.wait_for(&high).await?;
        let at = AsOfTable::new(
            &self.table.source,
            Arc::clone(&self.table.published),
            self.table.index,
            Arc::clone(&self.table.table),
            AsOf::Binlog(high.clone()),
            self.table.consistent_from.clone(),
            Arc::clone(&self.table.health),
        );
        let engine_batches = at.state(&version).await?;
        let chunk_of = |v: Option<i128>| chunk_index(&chunks, v);
        // The engine's rows at H: per chunk, checksums, rendered rows and value columns.
        let mut sums = vec![ChunkSum::default(); chunks.len()];
        let mut text = String::new();
        let mut engine_rows: Vec<BTreeMap<String, Vec<Option<String>>>> =
            vec![BTreeMap::new(); chunks.len()];
        for batch in &engine_batches {
            let rendered = render_batch(&self.schema, self.chunk_column, batch.columns())?;
            for (row, r) in rendered.into_iter().enumerate() {
                let c = chunk_of(r.chunk_value);
                sums[c].add(row_checksum(&self.schema, batch, row, &mut text));
                engine_rows[c].insert(r.key, r.values);
                self.report.rows += 1;
            }
        }
        // Chunks a transaction touched from their LOW on: the changelog's entries up to H.
        let earliest = chunks
            .iter()
            .map(|c| c.low.clone())
            .min()
            .unwrap_or_else(|| high.clone());
        let window = self
            .entries_between(&version, &Cut::at(earliest), &Cut::at(high.clone()))
            .await?;
        let mut touched = vec![false; chunks.len()];
        for entry in &window {
            for image in [Some(&entry.after), entry.before.as_ref()]
                .into_iter()
                .flatten()
            {
                let c = chunk_of(image.chunk_value);
                if entry.position.as_str() >= Cut::at(chunks[c].low.clone()).text().as_str() {
                    touched[c] = true;
                }
            }
        }
        let mut differences: Vec<Difference> = Vec::new();
        for (c, chunk) in chunks.iter().enumerate() {
            let values_agree = value_schema.is_none()
                || engine_rows[c].len() == chunk.values.len()
                    && engine_rows[c].iter().all(|(k, v)| {
                        chunk.values.get(k).is_some_and(|server| {
                            values.iter().zip(server).all(|(&i, s)| v[i] == *s)
                        })
                    });
            let agrees = chunk.sum == sums[c] && values_agree;
            if agrees && !touched[c] {
                continue;
            }
            self.report.chunks_read += 1;
            let server = self.read_at(&chunk.range, &high, &chunks, c).await?;
            differences.extend(compare(&self.schema, c, &server, &engine_rows[c]));
        }
        self.report.differences = differences.len() as u64;
        answer(&high.to_string(), &differences)
    }

    fn count_fetched(&mut self, row: &Rendered) {
        self.report.rows_fetched += 1;
        self.report.bytes_moved += (row.key.len()
            + row
                .values
                .iter()
                .map(|v| v.as_ref().map_or(1, String::len))
                .sum::<usize>()) as u64;
    }

    /// Waits until the source has captured through `position`; the version that has.
    async fn wait_for(&self, position: &BinlogCoord) -> Result<Arc<SourceVersion>> {
        let deadline = Instant::now() + CATCH_UP;
        loop {
            let version = self.table.published.load_full();
            if version.consistent && version.position.as_ref().is_some_and(|p| p >= position) {
                return Ok(version);
            }
            if Instant::now() >= deadline {
                return Err(refused(
                    SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!(
                        "source \"{}\" has not captured through {position} after {} s (it is \
                         at {}); reconcile compares once it has: see cdc.sources",
                        self.table.source,
                        CATCH_UP.as_secs(),
                        version
                            .position
                            .as_ref()
                            .map_or_else(|| "no position".to_string(), ToString::to_string)
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The entries of the table in `version` from cut `from` up to cut `to`, rendered.
    async fn entries_between(
        &self,
        version: &SourceVersion,
        from: &Cut,
        to: &Cut,
    ) -> Result<Vec<Entry>> {
        let Some(log) = version.changelogs.get(self.table.index) else {
            return Ok(Vec::new());
        };
        let batch = entries_from(log, from).await?;
        let to = to.text();
        let rows = ChangelogRows::new(&batch)?;
        let after = render_batch(&self.schema, self.chunk_column, rows.image())?;
        let before = render_batch(&self.schema, self.chunk_column, rows.before().columns())?;
        let mut out = Vec::new();
        for (i, after) in after.into_iter().enumerate() {
            if rows.position(i) >= to.as_str() {
                break;
            }
            let op = rows.op(i).map_err(through_datafusion)?;
            out.push(Entry {
                position: rows.position(i).to_string(),
                before: before.get(i).filter(|_| op == Op::Update).cloned(),
                op,
                after,
            });
        }
        Ok(out)
    }

    /// The server's rows of chunk `c` at `h`: read in a new window after `h`, then brought
    /// back to `h` with the changelog (see the module docs).
    async fn read_at(
        &mut self,
        range: &ChunkRange,
        h: &BinlogCoord,
        chunks: &[Chunk],
        c: usize,
    ) -> Result<BTreeMap<String, Vec<Option<String>>>> {
        let limit = self.table.connect.read_timeout;
        let (predicate, params) = self.predicate(range);
        let low = self.window_start(predicate.as_deref(), &params).await?;
        let batches = select_batches_within(
            &mut self.conn,
            &self.schema,
            predicate.as_deref(),
            params,
            4096,
            limit,
        )
        .await
        .map_err(external)?;
        let high = self.position().await?;
        let mut rows = BTreeMap::new();
        for row in render_all(&self.schema, self.chunk_column, &batches)? {
            self.count_fetched(&row);
            rows.insert(row.key, row.values);
        }
        let version = self.wait_for(&high).await?;
        let entries = self
            .entries_between(&version, &Cut::at(h.clone()), &Cut::at(high))
            .await?;
        let inside = |r: &Rendered| chunk_index(chunks, r.chunk_value) == c;
        let put = |rows: &mut BTreeMap<String, Vec<Option<String>>>, r: &Rendered| {
            if inside(r) {
                rows.insert(r.key.clone(), r.values.clone());
            }
        };
        let low = Cut::at(low).text();
        // Forward through the window: the server's rows at HIGH'.
        for e in entries.iter().filter(|e| e.position >= low) {
            match e.op {
                Op::Delete => {
                    rows.remove(&e.after.key);
                }
                Op::Update => {
                    if let Some(b) = &e.before {
                        rows.remove(&b.key);
                    }
                    put(&mut rows, &e.after);
                }
                Op::Insert | Op::Read => put(&mut rows, &e.after),
            }
        }
        // Back to H: every entry after it undone, newest first.
        for e in entries.iter().rev() {
            match e.op {
                Op::Delete => put(&mut rows, &e.after),
                Op::Update => {
                    rows.remove(&e.after.key);
                    if let Some(b) = &e.before {
                        put(&mut rows, b);
                    }
                }
                Op::Insert | Op::Read => {
                    rows.remove(&e.after.key);
                }
            }
        }
        Ok(rows)
    }
}

/// A changelog entry rendered: its op, position and images.
struct Entry {
    op: Op,
    position: String,
    /// The after image (for `d`, the deleted row).
    after: Rendered,
    /// The before image of a `u`.
    before: Option<Rendered>,
}

/// `schema` with only the key columns, then `values` (none of them a key column); `None` when
/// there are no value columns.
fn projected(schema: &TableSchema, values: &[usize]) -> Option<TableSchema> {
    if values.is_empty() {
        return None;
    }
    let mut keep: Vec<usize> = schema.primary_key.clone();
    keep.extend(values);
    let columns = keep.iter().map(|&i| schema.columns[i].clone()).collect();
    let primary_key = (0..schema.primary_key.len()).collect();
    Some(TableSchema::new(schema.id.clone(), columns, primary_key))
}

/// A chunk bound as an integer (`None`: unbounded, or not an integer).
fn bound(value: &Option<Value>) -> Option<i128> {
    match value.as_ref()? {
        Value::Int(i) => Some(i128::from(*i)),
        Value::UInt(u) => Some(i128::from(*u)),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// The chunk a row whose chunk column is `value` is in (chunks are consecutive ranges).
fn chunk_index(chunks: &[Chunk], value: Option<i128>) -> usize {
    let Some(v) = value else { return 0 };
    chunks
        .iter()
        .position(|c| c.bounds.1.is_none_or(|end| v < end))
        .unwrap_or(chunks.len().saturating_sub(1))
}

/// The integer value of `array[row]`, for chunk membership.
fn integer(array: &ArrayRef, row: usize) -> Option<i128> {
    use arrow::datatypes::*;
    if array.is_null(row) {
        return None;
    }
    Some(match array.data_type() {
        DataType::Int8 => array.as_primitive::<Int8Type>().value(row).into(),
        DataType::Int16 => array.as_primitive::<Int16Type>().value(row).into(),
        DataType::Int32 => array.as_primitive::<Int32Type>().value(row).into(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).into(),
        DataType::UInt8 => array.as_primitive::<UInt8Type>().value(row).into(),
        DataType::UInt16 => array.as_primitive::<UInt16Type>().value(row).into(),
        DataType::UInt32 => array.as_primitive::<UInt32Type>().value(row).into(),
        DataType::UInt64 => array.as_primitive::<UInt64Type>().value(row).into(),
        _ => return None,
    })
}

/// Every row of `batches` (of `schema`) rendered.
fn render_all(
    schema: &TableSchema,
    chunk_column: Option<usize>,
    batches: &[RecordBatch],
) -> Result<Vec<Rendered>> {
    let mut out = Vec::new();
    for batch in batches {
        out.extend(render_batch(schema, chunk_column, batch.columns())?);
    }
    Ok(out)
}

/// The rows of `columns` (one array per column of `schema`) rendered for comparison.
fn render_batch(
    schema: &TableSchema,
    chunk_column: Option<usize>,
    columns: &[ArrayRef],
) -> Result<Vec<Rendered>> {
    let options = FormatOptions::default();
    let formatters = columns
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let n = columns.first().map_or(0, |c| c.len());
    let mut out = Vec::with_capacity(n);
    for row in 0..n {
        let values: Vec<Option<String>> = columns
            .iter()
            .zip(&formatters)
            .map(|(c, f)| (!c.is_null(row)).then(|| f.value(row).to_string()))
            .collect();
        out.push(Rendered {
            key: shown(schema, &values, &schema.primary_key),
            chunk_value: chunk_column.and_then(|c| integer(&columns[c], row)),
            values,
        });
    }
    Ok(out)
}

/// One differing key: a row of the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub chunk: usize,
    pub key: String,
    /// `missing`, `extra` or `differs`.
    pub kind: &'static str,
    /// The differing columns (`differs` only).
    pub columns: Option<String>,
    /// The reference side's values (the server's; a sink's expected rows).
    pub source: Option<String>,
    /// The compared side's values (the engine's; a sink's target).
    pub engine: Option<String>,
}

/// `name=value, ...` of the columns `which` of `values`.
fn shown(schema: &TableSchema, values: &[Option<String>], which: &[usize]) -> String {
    which
        .iter()
        .map(|&i| {
            format!(
                "{}={}",
                schema.columns[i].name,
                values[i].as_deref().unwrap_or("NULL")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The differences between the server's rows and the engine's of chunk `c`, by key.
fn compare(
    schema: &TableSchema,
    c: usize,
    server: &BTreeMap<String, Vec<Option<String>>>,
    engine: &BTreeMap<String, Vec<Option<String>>>,
) -> Vec<Difference> {
    let all: Vec<usize> = (0..schema.columns.len()).collect();
    let mut out = Vec::new();
    for (key, s) in server {
        match engine.get(key) {
            None => out.push(Difference {
                chunk: c,
                key: key.clone(),
                kind: "missing",
                columns: None,
                source: Some(shown(schema, s, &all)),
                engine: None,
            }),
            Some(e) if e != s => {
                let differing: Vec<usize> = all.iter().copied().filter(|&i| e[i] != s[i]).collect();
                out.push(Difference {
                    chunk: c,
                    key: key.clone(),
                    kind: "differs",
                    columns: Some(
                        differing
                            .iter()
                            .map(|&i| schema.columns[i].name.clone())
                            .collect::<Vec<_>>()
                            .join(", "),
                    ),
                    source: Some(shown(schema, s, &differing)),
                    engine: Some(shown(schema, e, &differing)),
                });
            }
            Some(_) => {}
        }
    }
    for (key, e) in engine {
        if !server.contains_key(key) {
            out.push(Difference {
                chunk: c,
                key: key.clone(),
                kind: "extra",
                columns: None,
                source: None,
                engine: Some(shown(schema, e, &all)),
            });
        }
    }
    out
}

/// The answer's rows: `differences` found at position `h`.
pub fn answer(h: &str, differences: &[Difference]) -> Result<RecordBatch> {
    let text = |f: &dyn Fn(&Difference) -> Option<String>| -> ArrayRef {
        Arc::new(StringArray::from(
            differences.iter().map(f).collect::<Vec<_>>(),
        ))
    };
    let position = h.to_string();
    Ok(RecordBatch::try_new(
        reconcile_schema(),
        vec![
            text(&|_| Some(position.clone())),
            Arc::new(UInt64Array::from(
                differences
                    .iter()
                    .map(|d| d.chunk as u64)
                    .collect::<Vec<_>>(),
            )),
            text(&|d| Some(d.key.clone())),
            text(&|d| Some(d.kind.to_string())),
            text(&|d| d.columns.clone()),
            text(&|d| d.source.clone()),
            text(&|d| d.engine.clone()),
        ],
    )?)
}
