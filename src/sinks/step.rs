//! One commit of a sink made ready: its entries read (`sinks::read`), the sink's query run
//! over them, and the rows brought to the target's columns. The runner makes the next commit
//! ready while the one before it is written, when entries are waiting.
//!
//! # Invariant
//! A step is a pure function of a published version, the cursors and the position after
//! which it reads: making it ready changes nothing, so a step made ahead and never committed
//! (the commit before it failed) is simply dropped, and the next attempt reads again from the
//! target's marker.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StructArray};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::DataFrame;
use futures::TryStreamExt;

use super::error::SinkError;
use super::net::net_changes;
use super::query::{ScanKind, SinkQuery};
use super::read::{read_new, Read};
use super::target::SinkMode;
use crate::capture::version::SourceVersion;
use crate::state::changelog::adapt;

/// What making a step ready needs: the sink's query and the target's columns.
pub(super) struct Prepare {
    pub query: SinkQuery,
    /// The session the query runs in.
    pub state: SessionState,
    /// The target's columns.
    pub schema: SchemaRef,
    /// The changelog each scan reads, by its index in the source's versions.
    pub tables: Vec<usize>,
    pub max_entries: usize,
}

/// One commit, ready to be written.
pub(super) struct Step {
    /// Where each scan reads next.
    pub cursors: Vec<usize>,
    /// The largest position read, when it is after the position the step read after.
    pub newest: Option<String>,
    /// Entries past this step remain.
    pub more: bool,
    /// The rows and, upserting, the keys to delete (when `newest` is set).
    pub output: Option<(RecordBatch, Option<RecordBatch>)>,
}

/// Runs `plan` and returns its rows as one batch of `schema`.
pub(super) async fn execute(
    state: &SessionState,
    plan: LogicalPlan,
    schema: &SchemaRef,
) -> Result<RecordBatch, SinkError> {
    let error = |e: datafusion::error::DataFusionError| {
        SinkError::Input(format!("running the sink's query: {e}"))
    };
    let batches: Vec<RecordBatch> = DataFrame::new(state.clone(), plan)
        .execute_stream()
        .await
        .map_err(error)?
        .try_collect()
        .await
        .map_err(error)?;
    let batches = batches
        .into_iter()
        .map(|b| RecordBatch::try_new(Arc::clone(schema), b.columns().to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SinkError::Input(e.to_string()))?;
    concat_batches(schema, &batches).map_err(|e| SinkError::Input(e.to_string()))
}

/// `array` as `data_type` (its own type merged with others by [`merge_type`]): struct fields
/// it lacks are NULL.
fn align_array(array: &ArrayRef, data_type: &DataType) -> Result<ArrayRef, SinkError> {
    if array.data_type() == data_type {
        return Ok(Arc::clone(array));
    }
    match (array.as_any().downcast_ref::<StructArray>(), data_type) {
        (Some(s), DataType::Struct(fields)) => {
            let columns = fields
                .iter()
                .map(|f| match s.column_by_name(f.name()) {
                    Some(c) => align_array(c, f.data_type()),
                    None => Ok(arrow::array::new_null_array(f.data_type(), s.len())),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(
                StructArray::try_new(fields.clone(), columns, s.nulls().cloned())
                    .map_err(|e| SinkError::Input(e.to_string()))?,
            ))
        }
        _ => Err(SinkError::Input(format!(
            "a column of {} cannot be written as {data_type}",
            array.data_type()
        ))),
    }
}

/// `rows` in the columns of `target`: columns it lacks (dropped at the source) are NULL,
/// columns `target` lacks are appended (new at the source), structs carry the fields of both.
fn align(rows: RecordBatch, target: &SchemaRef) -> Result<RecordBatch, SinkError> {
    let mut fields: Vec<Field> = target.fields().iter().map(|f| f.as_ref().clone()).collect();
    for f in rows.schema().fields() {
        if target.field_with_name(f.name()).is_err() {
            fields.push(f.as_ref().clone().with_nullable(true));
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let columns = schema
        .fields()
        .iter()
        .map(|f| match rows.column_by_name(f.name()) {
            Some(c) => align_array(c, f.data_type()),
            None => Ok(arrow::array::new_null_array(f.data_type(), rows.num_rows())),
        })
        .collect::<Result<Vec<ArrayRef>, SinkError>>()?;
    RecordBatch::try_new(schema, columns).map_err(|e| SinkError::Input(e.to_string()))
}

/// The keys of `keys` (rows of the unfiltered query over every touched row) that are not
/// keys of `rows`: what the commit deletes.
fn deletions(
    keys: &RecordBatch,
    rows: &RecordBatch,
    key: &[String],
) -> Result<RecordBatch, SinkError> {
    let err = |e: arrow::error::ArrowError| SinkError::Input(e.to_string());
    let columns = |b: &RecordBatch| -> Result<Vec<ArrayRef>, SinkError> {
        key.iter()
            .map(|k| {
                b.column_by_name(k)
                    .cloned()
                    .ok_or_else(|| SinkError::Input(format!("key column {k} missing")))
            })
            .collect()
    };
    let key_columns = columns(keys)?;
    let fields: Vec<Field> = key
        .iter()
        .zip(&key_columns)
        .map(|(k, c)| Field::new(k, c.data_type().clone(), true))
        .collect();
    let converter = RowConverter::new(
        fields
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )
    .map_err(err)?;
    let kept = converter.convert_columns(&columns(rows)?).map_err(err)?;
    let kept: std::collections::HashSet<&[u8]> = kept.iter().map(|r| r.data()).collect();
    let all = converter.convert_columns(&key_columns).map_err(err)?;
    let mut seen = std::collections::HashSet::new();
    let indices: Vec<u32> = all
        .iter()
        .enumerate()
        .filter(|(_, r)| !kept.contains(r.data()) && seen.insert(r.data()))
        .filter_map(|(i, _)| u32::try_from(i).ok())
        .collect();
    let indices = arrow::array::UInt32Array::from(indices);
    let taken = key_columns
        .iter()
        .map(|c| take(c.as_ref(), &indices, None))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    RecordBatch::try_new(Arc::new(Schema::new(fields)), taken).map_err(err)
}

impl Prepare {
    /// The step after `after` from `cursors` on, in `version`.
    pub async fn step(
        &self,
        version: &SourceVersion,
        mut cursors: Vec<usize>,
        after: Option<&str>,
    ) -> Result<Step, SinkError> {
        let Read {
            entries,
            newest,
            more,
        } = read_new(
            &version.changelogs,
            &self.tables,
            &mut cursors,
            after,
            self.max_entries,
        )
        .await?;
        let newest = newest.filter(|n| after.is_none_or(|a| n.as_str() > a));
        let output = match newest {
            None => None,
            Some(_) => {
                let (rows, deletes) = self.output(&entries).await?;
                Some((align(rows, &self.schema)?, deletes))
            }
        };
        Ok(Step {
            cursors,
            newest,
            more,
            output,
        })
    }

    /// The rows (and, upserting, the keys to delete) one commit writes for `entries`.
    async fn output(
        &self,
        entries: &[Vec<RecordBatch>],
    ) -> Result<(RecordBatch, Option<RecordBatch>), SinkError> {
        let query = &self.query;
        match query.mode {
            SinkMode::Changelog => {
                let inputs = query
                    .scans
                    .iter()
                    .zip(entries)
                    .map(|(scan, batches)| {
                        batches
                            .iter()
                            .map(|b| adapt(b.clone(), &scan.schema))
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| SinkError::Input(e.to_string()))?;
                let plan = query.bind(&query.plan, &inputs)?;
                Ok((execute(&self.state, plan, &query.schema).await?, None))
            }
            SinkMode::Upsert => {
                let mut upserts = Vec::with_capacity(entries.len());
                let mut touched = Vec::with_capacity(entries.len());
                for (scan, batches) in query.scans.iter().zip(entries) {
                    let ScanKind::Current(table) = &scan.kind else {
                        return Err(SinkError::Input("an upsert sink reads a changelog".into()));
                    };
                    let net = net_changes(table, &scan.schema, batches)?;
                    touched.push(vec![net.upserts.clone(), net.deletes]);
                    upserts.push(vec![net.upserts]);
                }
                let rows = execute(
                    &self.state,
                    query.bind(&query.plan, &upserts)?,
                    &query.schema,
                )
                .await?;
                let unfiltered = query.unfiltered.as_ref().unwrap_or(&query.plan);
                let keys = execute(
                    &self.state,
                    query.bind(unfiltered, &touched)?,
                    &query.schema,
                )
                .await?;
                let deletes = deletions(&keys, &rows, &query.key)?;
                Ok((rows, Some(deletes)))
            }
        }
    }
}
