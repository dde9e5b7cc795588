//! The Delta Lake target: a Delta table (local directory or `s3://`), written through the
//! `deltalake` crate, with its change data feed on.
//!
//! Changelog sinks append each commit as one Delta write; upsert sinks run one `MERGE` per
//! commit that deletes the removed keys, updates the changed ones and inserts the new ones, so
//! the change data feed records inserts, updates (pre- and post-images) and deletes. A column
//! new at the source is added, nullable, by the commit that first carries its rows (schema
//! merge of the append or of the `MERGE`), in the same atomic commit as those rows.
//!
//! # Invariant
//! Every data commit carries an application transaction (`txn`: app id `cdcfusion:<sink>`,
//! version = the sink's commit number) and, in its commit info, the sink, the commit number and
//! the last changelog position it covers (`cdcfusion.sink`, `cdcfusion.commit`,
//! `cdcfusion.position`). Delta commits are atomic, so the table's newest `txn` version and the
//! commit info of that version say exactly where the sink resumes; files written by a commit
//! that never reached the log are invisible to every reader.

mod conform;
mod read;

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, BooleanArray, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::common::Column;
use datafusion::prelude::SessionContext;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::kernel::{StructField, Transaction};
use deltalake::operations::write::SchemaMode;
use deltalake::protocol::SaveMode;
use deltalake::{DeltaTable, DeltaTableError, TableProperty};
use futures::TryStreamExt;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use super::dictionary::{mostly_distinct, without_dictionary};
use super::error::SinkError;
use super::target::{Commit, Committed, SinkMode, Target, TargetLayout, TargetRows};
use super::text::quote_identifier as quote;
use crate::location::Location;
use conform::{conform, delta_schema};

const SINK_KEY: &str = "cdcfusion.sink";
const COMMIT_KEY: &str = "cdcfusion.commit";
const POSITION_KEY: &str = "cdcfusion.position";

/// Retries of one storage request inside `deltalake`, and how long they may take.
const TARGET_RETRIES: u32 = 2;
const TARGET_RETRY_SECONDS: u32 = 10;

/// The source column of an upsert's `MERGE` that marks a key to delete.
const DELETE_FLAG: &str = "_cdcfusion_delete";

/// The application id of `sink`'s transactions.
fn app_id(sink: &str) -> String {
    format!("cdcfusion:{sink}")
}

/// A Delta table one sink writes; see the module docs.
#[derive(Debug)]
pub struct DeltaTarget {
    url: String,
    table: Option<DeltaTable>,
    sink: String,
    mode: SinkMode,
    key: Vec<String>,
}

/// Whether a `deltalake` error may pass when the commit is tried again.
fn classify(what: &str, e: DeltaTableError) -> SinkError {
    match e {
        // Storage unreachable or failing, or another writer committed the same version first:
        // opening the table again and retrying can succeed.
        DeltaTableError::ObjectStore { .. }
        | DeltaTableError::Io { .. }
        | DeltaTableError::VersionAlreadyExists(_)
        | DeltaTableError::Transaction { .. } => SinkError::unavailable(what, e),
        DeltaTableError::SchemaMismatch { .. } | DeltaTableError::InvalidData { .. } => {
            SinkError::Conflict(format!("{what}: {e}"))
        }
        DeltaTableError::InvalidTableLocation(_) => SinkError::Invalid(format!("{what}: {e}")),
        other => SinkError::Conflict(format!("{what}: {other}")),
    }
}

impl DeltaTarget {
    /// A target at `url`: a directory (`file:///dir` or a path) or `s3://bucket/prefix`.
    pub fn new(url: &str) -> Result<Self, SinkError> {
        let refused = |why: String| {
            SinkError::Invalid(format!(
                "DELTA takes a directory ('file:///dir' or a path) or 's3://bucket/prefix': {why}"
            ))
        };
        match Location::parse(url).map_err(|e| refused(e.to_string()))? {
            Location::Memory => return Err(refused(format!("{url:?} is in memory"))),
            Location::S3 { .. } if !cfg!(feature = "s3") => {
                return Err(SinkError::Unsupported(
                    "this build has no S3 support (it was built without the `s3` feature)".into(),
                ))
            }
            Location::S3 { .. } | Location::Local(_) => {}
        }
        Ok(Self {
            url: url.to_string(),
            table: None,
            sink: String::new(),
            mode: SinkMode::Changelog,
            key: Vec::new(),
        })
    }

    fn what(&self) -> String {
        format!("Delta table {}", self.url)
    }

    fn app_id(&self) -> String {
        app_id(&self.sink)
    }

    /// Fail fast on an unreachable store: the runner retries with its own backoff and shows
    /// the sink as `retrying` meanwhile (the store's default retries for minutes).
    fn storage_options() -> HashMap<String, String> {
        [
            ("max_retries".to_string(), TARGET_RETRIES.to_string()),
            (
                "retry_timeout".to_string(),
                format!("{TARGET_RETRY_SECONDS}s"),
            ),
        ]
        .into_iter()
        .collect()
    }

    /// The table's builder: the store's handlers registered, retries failing fast.
    fn builder(&self) -> Result<deltalake::DeltaTableBuilder, SinkError> {
        #[cfg(feature = "s3")]
        {
            static REGISTERED: std::sync::Once = std::sync::Once::new();
            REGISTERED.call_once(|| deltalake::aws::register_handlers(None));
        }
        let url = deltalake::ensure_table_uri(&self.url).map_err(|e| classify(&self.what(), e))?;
        Ok(deltalake::DeltaTableBuilder::from_url(url)
            .map_err(|e| classify(&self.what(), e))?
            .with_storage_options(Self::storage_options()))
    }

    /// Whether the location holds a Delta log yet (anything under `_delta_log/`).
    async fn has_log(&self) -> Result<bool, SinkError> {
        let store = self
            .builder()?
            .build_storage()
            .map_err(|e| classify(&self.what(), e))?;
        let log = object_store::path::Path::from("_delta_log");
        match store
            .object_store(None)
            .list_with_delimiter(Some(&log))
            .await
        {
            Ok(listing) => Ok(!listing.objects.is_empty()),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(
                e @ (object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }),
            ) => Err(SinkError::Invalid(format!(
                "{}: {e}; check the credentials the engine runs with",
                self.what()
            ))),
            Err(e) => Err(SinkError::unavailable(self.what(), e)),
        }
    }

    /// Whether the table's store answers a listing of its log right now.
    async fn reachable(&self) -> bool {
        self.has_log().await.is_ok()
    }

    /// The table, loaded; or, where there is no log yet, a table to create (loading it would
    /// only have `deltalake` log an error about the missing log).
    async fn load(&self) -> Result<DeltaTable, SinkError> {
        let exists = self.has_log().await?;
        let mut table = self
            .builder()?
            .build()
            .map_err(|e| classify(&self.what(), e))?;
        if exists {
            table.load().await.map_err(|e| classify(&self.what(), e))?;
        }
        Ok(table)
    }

    /// Creates the table for `layout`, its change data feed on.
    async fn create(
        &self,
        table: &DeltaTable,
        layout: &TargetLayout,
    ) -> Result<DeltaTable, SinkError> {
        let schema = delta_schema(&layout.schema);
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                // Every column may be NULL: a column dropped at the source is written as NULL,
                // and `deltalake`'s MERGE checks NOT NULL on the rows of unmatched delete keys
                // too, though it writes none of them.
                let field = f.as_ref().clone().with_nullable(true);
                (&field).try_into_kernel().map_err(|e| {
                    SinkError::Unsupported(format!(
                        "column {} ({}) has no Delta type: {e}",
                        f.name(),
                        f.data_type()
                    ))
                })
            })
            .collect::<Result<Vec<StructField>, SinkError>>()?;
        table
            .create()
            .with_columns(columns)
            .with_configuration_property(TableProperty::EnableChangeDataFeed, Some("true"))
            .with_save_mode(SaveMode::Ignore)
            .await
            .map_err(|e| classify(&self.what(), e))
    }

    /// Checks the columns of an existing table against `layout`.
    fn check(&self, table: &DeltaTable, layout: &TargetLayout) -> Result<(), SinkError> {
        let existing = self.arrow_schema(table)?;
        for field in delta_schema(&layout.schema).fields() {
            if let Ok(old) = existing.field_with_name(field.name()) {
                // Structs (`_before`) gain the fields of new columns: a schema merge.
                let both_structs = matches!(
                    (old.data_type(), field.data_type()),
                    (DataType::Struct(_), DataType::Struct(_))
                );
                if old.data_type() != field.data_type() && !both_structs {
                    return Err(SinkError::Conflict(format!(
                        "column {} of {} is {}, not the sink's {}; write to a new table (or drop this one)",
                        field.name(),
                        self.what(),
                        old.data_type(),
                        field.data_type()
                    )));
                }
            }
        }
        Ok(())
    }

    fn arrow_schema(&self, table: &DeltaTable) -> Result<SchemaRef, SinkError> {
        let snapshot = table.snapshot().map_err(|e| classify(&self.what(), e))?;
        Ok(snapshot.snapshot().arrow_schema())
    }

    /// The newest commit of `sink` in `table` (at the version loaded): its `txn` version, and
    /// the position its commit info carries.
    async fn marker(&self, table: &DeltaTable, sink: &str) -> Result<Option<Committed>, SinkError> {
        let log_store = table.log_store();
        let snapshot = table.snapshot().map_err(|e| classify(&self.what(), e))?;
        let Some(version) = snapshot
            .transaction_version(log_store.as_ref(), app_id(sink))
            .await
            .map_err(|e| classify(&self.what(), e))?
        else {
            return Ok(None);
        };
        let mut history = table.history(None);
        while let Some(info) = history
            .try_next()
            .await
            .map_err(|e| classify(&self.what(), e))?
        {
            let field = |key: &str| info.info.get(key);
            let ours = field(SINK_KEY).and_then(|v| v.as_str()) == Some(sink)
                && field(COMMIT_KEY).and_then(serde_json::Value::as_i64) == Some(version);
            if let (true, Some(position)) = (ours, field(POSITION_KEY).and_then(|v| v.as_str())) {
                return Ok(Some(Committed {
                    number: u64::try_from(version).unwrap_or(0),
                    position: position.to_string(),
                }));
            }
        }
        Err(SinkError::Conflict(format!(
            "{} records commit {version} of sink {sink} but no commit info with its position (the table's history was cleaned up past it?); drop the sink and create it with start = '<position>'",
            self.what(),
        )))
    }

    fn properties(&self, marker: &Committed) -> Result<CommitProperties, SinkError> {
        let number = i64::try_from(marker.number)
            .map_err(|_| SinkError::Input(format!("commit number {} too large", marker.number)))?;
        Ok(CommitProperties::default()
            .with_application_transaction(Transaction::new(self.app_id(), number))
            .with_metadata([
                (SINK_KEY.to_string(), serde_json::json!(self.sink)),
                (COMMIT_KEY.to_string(), serde_json::json!(number)),
                (POSITION_KEY.to_string(), serde_json::json!(marker.position)),
            ]))
    }

    /// Whether `rows` has a column the table lacks.
    fn adds_columns(&self, table: &DeltaTable, rows: &SchemaRef) -> Result<bool, SinkError> {
        let existing = self.arrow_schema(table)?;
        Ok(rows
            .fields()
            .iter()
            .any(|f| existing.field_with_name(f.name()).is_err()))
    }

    /// Whether writing `rows` changes the table's schema: a new column, or a struct with new
    /// fields.
    fn evolves(&self, table: &DeltaTable, rows: &SchemaRef) -> Result<bool, SinkError> {
        let existing = self.arrow_schema(table)?;
        Ok(rows.fields().iter().any(|f| {
            existing
                .field_with_name(f.name())
                .map_or(true, |old| old.data_type() != f.data_type())
        }))
    }

    async fn append(&self, table: DeltaTable, commit: &Commit) -> Result<DeltaTable, SinkError> {
        let rows = conform(&commit.rows)?;
        let evolve = self.evolves(&table, &rows.schema())?;
        let parquet = writer_properties(&rows);
        let mut write = table
            .write(vec![rows])
            .with_save_mode(SaveMode::Append)
            .with_writer_properties(parquet)
            .with_commit_properties(self.properties(&commit.marker)?);
        if evolve {
            write = write.with_schema_mode(SchemaMode::Merge);
        }
        write.await.map_err(|e| classify(&self.what(), e))
    }

    /// The `MERGE` source: `rows` (the commit's, in Delta's types) to upsert, then the keys
    /// to delete, flagged.
    fn merge_source(&self, rows: &RecordBatch, commit: &Commit) -> Result<RecordBatch, SinkError> {
        let error = |e: arrow::error::ArrowError| SinkError::Input(format!("merge source: {e}"));
        let mut fields: Vec<Field> = rows
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.push(Field::new(DELETE_FLAG, DataType::Boolean, false));
        let schema = Arc::new(Schema::new(fields));
        let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
        columns.push(Arc::new(BooleanArray::from(vec![false; rows.num_rows()])));
        let upserts = RecordBatch::try_new(Arc::clone(&schema), columns).map_err(error)?;
        let Some(deletes) = commit.deletes.as_ref().filter(|d| d.num_rows() > 0) else {
            return Ok(upserts);
        };
        let deletes = conform(deletes)?;
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                if f.name() == DELETE_FLAG {
                    return Ok(
                        Arc::new(BooleanArray::from(vec![true; deletes.num_rows()])) as ArrayRef
                    );
                }
                match deletes.column_by_name(f.name()) {
                    Some(c) if c.data_type() == f.data_type() => Ok(Arc::clone(c)),
                    Some(c) => arrow::compute::cast(c, f.data_type()).map_err(error),
                    None => Ok(new_null_array(f.data_type(), deletes.num_rows())),
                }
            })
            .collect::<Result<Vec<_>, SinkError>>()?;
        let deletes = RecordBatch::try_new(Arc::clone(&schema), columns).map_err(error)?;
        concat_batches(&schema, &[upserts, deletes]).map_err(error)
    }

    async fn upsert(&self, table: DeltaTable, commit: &Commit) -> Result<DeltaTable, SinkError> {
        let rows = conform(&commit.rows)?;
        let source = self.merge_source(&rows, commit)?;
        // A new column joins the table in the `MERGE`'s own commit: schema merge adds the
        // columns the update and insert clauses set (never the delete flag, which no clause
        // sets), nullable.
        let evolve = self.adds_columns(&table, &rows.schema())?;
        let columns: Vec<String> = commit
            .rows
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let predicate = self
            .key
            .iter()
            .map(|k| format!("t.{q} = s.{q}", q = quote(k)))
            .collect::<Vec<_>>()
            .join(" AND ");
        let ctx = SessionContext::new();
        let source = ctx
            .read_batch(source)
            .map_err(|e| SinkError::Input(format!("merge source: {e}")))?;
        let flag = format!("s.{}", quote(DELETE_FLAG));
        let not_deleted = format!("NOT {flag}");
        let mut merge = table
            .merge(source, predicate)
            .with_source_alias("s")
            .with_target_alias("t")
            .with_commit_properties(self.properties(&commit.marker)?)
            .with_merge_schema(evolve)
            .when_matched_delete(|d| d.predicate(flag.clone()))
            .map_err(|e| classify(&self.what(), e))?;
        let updated: Vec<&String> = columns.iter().filter(|c| !self.key.contains(c)).collect();
        if !updated.is_empty() {
            merge = merge
                .when_matched_update(|mut u| {
                    u = u.predicate(not_deleted.clone());
                    for c in &updated {
                        u = u.update(
                            Column::new_unqualified(c.as_str()),
                            format!("s.{}", quote(c)),
                        );
                    }
                    u
                })
                .map_err(|e| classify(&self.what(), e))?;
        }
        let merge = merge
            .when_not_matched_insert(|mut i| {
                i = i.predicate(not_deleted.clone());
                for c in &columns {
                    i = i.set(
                        Column::new_unqualified(c.as_str()),
                        format!("s.{}", quote(c)),
                    );
                }
                i
            })
            .map_err(|e| classify(&self.what(), e))?;
        let (table, _) = merge.await.map_err(|e| classify(&self.what(), e))?;
        Ok(table)
    }

    /// Loads (or creates) the table and reads the sink's marker; see [`Target::open`].
    async fn open_table(&mut self, layout: &TargetLayout) -> Result<Option<Committed>, SinkError> {
        self.table = None;
        self.sink = layout.sink.clone();
        self.mode = layout.mode;
        self.key = layout.key.clone();
        let mut table = self.load().await?;
        let marker = if table.version().is_none() {
            table = self.create(&table, layout).await?;
            None
        } else {
            self.check(&table, layout)?;
            self.marker(&table, &layout.sink).await?
        };
        self.table = Some(table);
        Ok(marker)
    }

    /// `e`, or a failure that passes when the store cannot be reached right now: `deltalake`
    /// reports storage failures deep inside a write or `MERGE` as untyped errors, so whether
    /// one passes is decided by trying the store again, not by the error's text.
    async fn settle(&self, e: SinkError) -> SinkError {
        if e.is_transient() {
            return e;
        }
        if self.reachable().await {
            e
        } else {
            SinkError::unavailable(self.what(), e)
        }
    }
}

/// The Parquet settings `deltalake`'s writer uses by default (Snappy), with the dictionary off
/// where the rows' values do not repeat (`sinks::dictionary`).
fn writer_properties(rows: &RecordBatch) -> WriterProperties {
    let builder = WriterProperties::builder().set_compression(Compression::SNAPPY);
    without_dictionary(builder, &mostly_distinct(rows)).build()
}

#[async_trait]
impl Target for DeltaTarget {
    async fn open(&mut self, layout: &TargetLayout) -> Result<Option<Committed>, SinkError> {
        match self.open_table(layout).await {
            Ok(marker) => Ok(marker),
            Err(e) => Err(self.settle(e).await),
        }
    }

    async fn commit(&mut self, commit: &Commit) -> Result<(), SinkError> {
        // A failed commit leaves no table behind: `open` loads it again.
        let table = self
            .table
            .take()
            .ok_or_else(|| SinkError::unavailable(self.what(), "the table is not open"))?;
        let written = match self.mode {
            SinkMode::Changelog => self.append(table, commit).await,
            SinkMode::Upsert => self.upsert(table, commit).await,
        };
        match written {
            Ok(table) => {
                self.table = Some(table);
                Ok(())
            }
            Err(e) => Err(self.settle(e).await),
        }
    }

    async fn read(&self, layout: &TargetLayout) -> Result<TargetRows, SinkError> {
        match self.read_rows(layout).await {
            Ok(rows) => Ok(rows),
            Err(e) => Err(self.settle(e).await),
        }
    }

    fn stored(&self, rows: &RecordBatch) -> Result<RecordBatch, SinkError> {
        conform(rows)
    }

    fn describe(&self) -> String {
        format!("DELTA '{}'", self.url)
    }
}

#[cfg(test)]
mod tests;
