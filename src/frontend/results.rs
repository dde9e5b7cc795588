//! What a planned statement gives the client: its rows as a stream (stoppable, with
//! `timestamptz` in the session's zone), the stale-read warnings of its plan, the row count
//! of an `INSERT` or `COPY`, and the rows of `SHOW`.
//!
//! # Invariant
//! A result stream ends with an error as soon as its statement's [`Stop`] fires, and holds
//! the `Stop` (so the connection counts as busy) until it is dropped.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::prelude::DataFrame;
use futures::{Sink, SinkExt, Stream, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::QueryResponse;
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;

use super::conn::{Stop, Stopped};
use super::error::{canceled, datafusion_error};
use super::session;
use super::{datarows, encode};
use crate::provider::health::ReadPolicy;

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
        let notice = ErrorInfo::new("WARNING".into(), SQLSTATE_STALE_READ.into(), warning);
        client
            .feed(PgWireBackendMessage::NoticeResponse(notice.into()))
            .await?;
    }
    Ok(())
}

/// `warning` class `01`: the result reflects a table whose capture has stopped.
const SQLSTATE_STALE_READ: &str = "01000";

/// Starts executing `df`; the batches stop with an error when `stop` fires.
/// `timestamptz` values come out in `zone` (see `encode::in_time_zone`).
pub async fn execute(
    df: DataFrame,
    stop: Stop,
    zone: Option<Arc<str>>,
) -> PgWireResult<impl Stream<Item = PgWireResult<RecordBatch>> + Send + 'static> {
    let stream: SendableRecordBatchStream = tokio::select! {
        biased;
        why = stop.stopped() => return Err(canceled(why == Stopped::TimedOut)),
        stream = df.execute_stream() => stream.map_err(datafusion_error)?,
    };
    let stopped = stop.stopped();
    let batches = futures::stream::unfold(Some((stream, stopped, stop)), |state| async move {
        let (mut stream, mut stopped, stop) = state?;
        tokio::select! {
            biased;
            why = &mut stopped => Some((Err(canceled(why == Stopped::TimedOut)), None)),
            item = stream.next() => match item {
                Some(Ok(batch)) => Some((Ok(batch), Some((stream, stopped, stop)))),
                Some(Err(e)) => Some((Err(datafusion_error(e)), None)),
                None => None,
            },
        }
    });
    Ok(batches.map(move |batch| match &zone {
        Some(zone) => batch.and_then(|b| encode::in_time_zone(b, zone)),
        None => batch,
    }))
}

/// The rows of `df` in `format`.
pub async fn rows(
    df: DataFrame,
    format: &Format,
    metadata: &HashMap<String, String>,
    stop: Stop,
) -> PgWireResult<QueryResponse> {
    let options = Arc::new(FormatOptions::from_client_metadata(metadata));
    let fields = Arc::new(encode::pg_fields(df.schema().as_arrow(), format, &options)?);
    let batches = execute(df, stop, session::time_zone(metadata)).await?;
    Ok(QueryResponse::new(
        Arc::clone(&fields),
        datarows::data_rows(batches, fields),
    ))
}

/// The rows of one batch in `format`, as [`rows`] sends a planned statement's.
pub fn batch_rows(
    batch: RecordBatch,
    format: &Format,
    metadata: &HashMap<String, String>,
) -> PgWireResult<QueryResponse> {
    let options = Arc::new(FormatOptions::from_client_metadata(metadata));
    let fields = Arc::new(encode::pg_fields(batch.schema_ref(), format, &options)?);
    let batch = match session::time_zone(metadata) {
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
            let value = session::get(metadata, name)
                .filter(|_| session::is_known(name))
                .ok_or_else(|| session::unknown(name))?;
            (Some(name), vec![vec![value]])
        }
        None => {
            let all = session::all(metadata);
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
