//! What a planned statement gives the client: its rows as a stream (stoppable, with
//! `timestamptz` in the session's zone), the stale-read warnings of its plan, the row count
//! of an `INSERT` or `COPY`, and the rows of `SHOW`.
//!
//! # Invariant
//! A result stream ends with an error as soon as its statement's [`Stop`] fires, and holds
//! the `Stop` (so the connection counts as busy) until it is dropped. Each statement runs
//! with a memory pool of its own of `query_memory_limit` bytes (a query that needs more fails
//! with `53200`, the others go on) and ends with `54000` once the rows it has sent pass
//! `max_result_size`.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::error::DataFusionError;
use datafusion::execution::memory_pool::{GreedyMemoryPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::DataFrame;
use futures::{Sink, SinkExt, Stream, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::QueryResponse;
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;

use crate::config::FrontendSettings;
use crate::engine::datafusion_sqlstate;
use crate::frontend::protocol::conn::{Stop, Stopped};
use crate::frontend::protocol::datarows;
use crate::frontend::protocol::encode;
use crate::frontend::protocol::error::{canceled, datafusion_error, user_error};
use crate::frontend::session::planner::Kept;
use crate::frontend::session::session_statement;
use crate::provider::health::ReadPolicy;
use crate::sqlstate::SqlState;

/// What one statement may use, from the front end's settings (0: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatementLimits {
    /// Bytes the statement's sorts, joins and aggregates may hold at once.
    pub memory: u64,
    /// Bytes of rows (as sent) the statement may answer with.
    pub result_size: u64,
}

impl StatementLimits {
    pub fn of(settings: &FrontendSettings) -> Self {
        Self {
            memory: settings.query_memory_limit,
            result_size: settings.max_result_size,
        }
    }
}

/// Consumers an out-of-memory error names.
const CONSUMERS_NAMED: usize = 3;

/// A statement ready to run.
pub enum Runnable {
    /// A frame, made physical when it runs; `keep` keeps the physical plan for the
    /// statement's next runs when it may be kept (`engine::reuse`).
    Frame {
        df: DataFrame,
        keep: Option<Arc<Kept>>,
    },
    /// A kept physical plan bound to this run's versions, the context it runs in, and the
    /// statement's kept plan it was made from.
    Bound {
        plan: Arc<dyn ExecutionPlan>,
        task: TaskContext,
        kept: Arc<Kept>,
    },
}

impl Runnable {
    /// The logical plan this run comes from (where its result columns come from).
    pub fn logical_plan(&self) -> &LogicalPlan {
        match self {
            Runnable::Frame { df, .. } => df.logical_plan(),
            Runnable::Bound { kept, .. } => kept.logical_plan(),
        }
    }
}

impl From<DataFrame> for Runnable {
    fn from(df: DataFrame) -> Self {
        Runnable::Frame { df, keep: None }
    }
}

/// The stream of `run` with a memory pool of its own of `limit` bytes (0: the engine's).
async fn execute_within(
    run: Runnable,
    limit: u64,
) -> Result<SendableRecordBatchStream, DataFusionError> {
    let (plan, task) = match run {
        Runnable::Frame { df, keep } => {
            let task = df.task_ctx();
            let plan = df.create_physical_plan().await?;
            if let Some(keep) = keep {
                keep.keep_physical(&plan)?;
            }
            (plan, task)
        }
        Runnable::Bound { plan, task, .. } => (plan, task),
    };
    let task = if limit == 0 {
        task
    } else {
        let pool = TrackConsumersPool::new(
            GreedyMemoryPool::new(usize::try_from(limit).unwrap_or(usize::MAX)),
            std::num::NonZeroUsize::new(CONSUMERS_NAMED).expect("non-zero"),
        );
        let runtime = RuntimeEnvBuilder::from_runtime_env(&task.runtime_env())
            .with_memory_pool(Arc::new(pool))
            .build_arc()?;
        task.with_runtime(runtime)
    };
    datafusion::physical_plan::execute_stream(plan, Arc::new(task))
}

/// A DataFusion error of a statement run with `limits`: running out of the statement's memory
/// says which setting bounds it.
fn statement_error(error: DataFusionError, limits: StatementLimits) -> PgWireError {
    if matches!(error.find_root(), DataFusionError::ResourcesExhausted(_)) {
        // `out_of_memory`, as every exhausted resource is classified.
        return user_error(
            datafusion_sqlstate(&error),
            format!(
                "the query needs more memory than query_memory_limit ({} bytes) allows: {error}. \
                 Narrow the query (filter, fewer columns, a LIMIT), or raise query_memory_limit \
                 in the settings",
                limits.memory
            ),
        );
    }
    datafusion_error(error)
}

/// `rows`, ended with `54000` once the bytes `size` counts pass `max` (0: no limit).
pub fn within_result_size<S, T>(
    rows: S,
    max: u64,
    size: impl Fn(&T) -> usize + Send + 'static,
) -> impl Stream<Item = PgWireResult<T>> + Send
where
    S: Stream<Item = PgWireResult<T>> + Send,
    T: Send,
{
    rows.scan((0u64, false), move |(sent, failed), row| {
        let item = match row {
            _ if *failed => None,
            Ok(row) if max > 0 => {
                *sent += size(&row) as u64;
                if *sent > max {
                    *failed = true;
                    Some(Err(user_error(
                        SqlState::PROGRAM_LIMIT_EXCEEDED,
                        format!(
                            "the result is larger than max_result_size ({max} bytes): narrow the \
                             query, fetch it in parts (a cursor, LIMIT/OFFSET or a key range), or \
                             raise max_result_size in the settings"
                        ),
                    )))
                } else {
                    Some(Ok(row))
                }
            }
            other => Some(other),
        };
        futures::future::ready(item)
    })
}

/// Tells the client, with a WARNING notice each, which stopped tables the statement read
/// stale (only a session with `cdcfusion.stale_reads` on reads them at all).
pub async fn warn_stale<C>(client: &mut C, policy: &ReadPolicy) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    warn(client, policy.take_warnings()).await
}

/// Sends each of `warnings` as a stale-read WARNING notice.
pub async fn warn<C>(client: &mut C, warnings: Vec<String>) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for warning in warnings {
        let notice = ErrorInfo::new("WARNING".into(), SqlState::WARNING.code().into(), warning);
        client
            .feed(PgWireBackendMessage::NoticeResponse(notice.into()))
            .await?;
    }
    Ok(())
}

/// Starts executing `df` within `limits`; the batches stop with an error when `stop` fires.
/// `timestamptz` values come out in `zone` (see `encode::in_time_zone`).
pub async fn execute(
    run: impl Into<Runnable>,
    stop: Stop,
    zone: Option<Arc<str>>,
    limits: StatementLimits,
) -> PgWireResult<impl Stream<Item = PgWireResult<RecordBatch>> + Send + 'static> {
    let stream: SendableRecordBatchStream = tokio::select! {
        biased;
        why = stop.stopped() => return Err(canceled(why == Stopped::TimedOut)),
        stream = execute_within(run.into(), limits.memory) => stream.map_err(|e| statement_error(e, limits))?,
    };
    let stopped = stop.stopped();
    let batches = futures::stream::unfold(Some((stream, stopped, stop)), move |state| async move {
        let (mut stream, mut stopped, stop) = state?;
        tokio::select! {
            biased;
            why = &mut stopped => Some((Err(canceled(why == Stopped::TimedOut)), None)),
            item = stream.next() => match item {
                Some(Ok(batch)) => Some((Ok(batch), Some((stream, stopped, stop)))),
                Some(Err(e)) => Some((Err(statement_error(e, limits)), None)),
                None => None,
            },
        }
    });
    Ok(batches.map(move |batch| match &zone {
        Some(zone) => batch.and_then(|b| encode::in_time_zone(b, zone)),
        None => batch,
    }))
}

/// The rows of `df` in `format`, within `limits`.
/// `described` is the schema the rows are described with (see `origins`).
pub async fn rows(
    run: impl Into<Runnable>,
    described: &Schema,
    format: &Format,
    metadata: &HashMap<String, String>,
    stop: Stop,
    limits: StatementLimits,
) -> PgWireResult<QueryResponse> {
    let options = Arc::new(FormatOptions::from_client_metadata(metadata));
    let fields = Arc::new(encode::pg_fields(described, format, &options)?);
    let batches = execute(run, stop, session_statement::time_zone(metadata), limits).await?;
    let rows = datarows::data_rows(batches, Arc::clone(&fields));
    let rows = within_result_size(rows, limits.result_size, |row: &DataRow| row.data.len());
    Ok(QueryResponse::new(fields, rows))
}

/// The rows of one batch in `format`, as [`rows`] sends a planned statement's.
pub fn batch_rows(
    batch: RecordBatch,
    format: &Format,
    metadata: &HashMap<String, String>,
) -> PgWireResult<QueryResponse> {
    let options = Arc::new(FormatOptions::from_client_metadata(metadata));
    let fields = Arc::new(encode::pg_fields(batch.schema_ref(), format, &options)?);
    let batch = match session_statement::time_zone(metadata) {
        Some(zone) => encode::in_time_zone(batch, &zone)?,
        None => batch,
    };
    let rows = datarows::data_rows(futures::stream::iter([Ok(batch)]), Arc::clone(&fields));
    Ok(QueryResponse::new(fields, rows))
}

/// Rows an `INSERT` reports (DataFusion answers with a `count` column).
pub fn inserted_rows(batches: &[RecordBatch]) -> usize {
    batches
        .first()
        .and_then(|b| b.column_by_name("count"))
        .and_then(|c| {
            c.as_any()
                .downcast_ref::<datafusion::arrow::array::UInt64Array>()
        })
        .map_or(0, |a| a.value(0) as usize)
}

/// `SHOW name` (one row) or `SHOW ALL` (name, setting).
pub fn show(
    metadata: &HashMap<String, String>,
    name: Option<&str>,
    format: &Format,
) -> PgWireResult<QueryResponse> {
    let (name, columns): (Option<&str>, Vec<Vec<String>>) = match name {
        Some(name) => {
            let value = session_statement::get(metadata, name)
                .filter(|_| session_statement::is_known(name))
                .ok_or_else(|| session_statement::unknown(name))?;
            (Some(name), vec![vec![value]])
        }
        None => {
            let all = session_statement::all(metadata);
            let names = all.iter().map(|(n, _)| n.clone()).collect();
            (None, vec![names, all.into_iter().map(|(_, v)| v).collect()])
        }
    };
    let schema = show_schema(name);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        columns
            .into_iter()
            .map(|c| Arc::new(datafusion::arrow::array::StringArray::from(c)) as _)
            .collect(),
    )
    .map_err(|e| datafusion_error(e.into()))?;
    let options = Arc::new(FormatOptions::from_client_metadata(metadata));
    let fields = Arc::new(encode::pg_fields(batch.schema_ref(), format, &options)?);
    let rows = datarows::data_rows(futures::stream::iter([Ok(batch)]), Arc::clone(&fields));
    Ok(QueryResponse::new(fields, rows))
}

/// The columns of `SHOW name` (`name`) or `SHOW ALL` (`name`, `setting`).
pub fn show_schema(name: Option<&str>) -> Schema {
    let columns = match name {
        Some(name) => vec![name],
        None => vec!["name", "setting"],
    };
    Schema::new(
        columns
            .into_iter()
            .map(|c| Field::new(c, DataType::Utf8, false))
            .collect::<Vec<_>>(),
    )
}
