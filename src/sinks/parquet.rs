//! The Parquet target: one Parquet file per commit, under a directory or an object-store
//! prefix, partitioned by the commit's day (`dt=YYYY-MM-DD/part-<commit>.parquet`, which
//! Hive-style readers such as DuckDB and Spark read as a `dt` column).
//!
//! # Invariant
//! A commit is one file, written whole (object stores put atomically; a local directory
//! renames a finished file into place), never replaced (create-if-absent), and its footer
//! carries the commit's marker (`cdcfusion.sink`, `cdcfusion.commit`, `cdcfusion.position`).
//! So any Parquet reader sees whole commits only, and the newest file tells where the sink
//! resumes. Files are append-only, so this target takes changelog sinks only. A read for
//! reconciliation takes the newest file's marker and the files up to its commit number:
//! files are never replaced, so those rows are exactly what the target held at that marker.

use arrow::array::RecordBatch;
use async_trait::async_trait;
use bytes::Bytes;
use object_store::PutMode;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{KeyValue, ParquetMetaDataReader};
use parquet::file::properties::WriterProperties;

use super::dictionary::{mostly_distinct, without_dictionary};
use super::error::SinkError;
use super::target::{Commit, Committed, SinkMode, Target, TargetLayout, TargetRows};
use crate::durable::store::{Store, StoreError};
use crate::location::Location;

const SINK_KEY: &str = "cdcfusion.sink";
const COMMIT_KEY: &str = "cdcfusion.commit";
const POSITION_KEY: &str = "cdcfusion.position";

/// Parquet files of one sink; see the module docs.
#[derive(Debug)]
pub struct ParquetTarget {
    url: String,
    location: Location,
    store: Option<Store>,
    sink: String,
}

impl ParquetTarget {
    /// A target at `url`: a directory (`file:///dir` or a path) or `s3://bucket/prefix`.
    pub fn new(url: &str) -> Result<Self, SinkError> {
        let location = Location::parse(url).map_err(|e| {
            SinkError::Invalid(format!(
                "PARQUET takes a directory ('file:///dir' or a path) or 's3://bucket/prefix': {e}"
            ))
        })?;
        Ok(Self {
            url: url.to_string(),
            location,
            store: None,
            sink: String::new(),
        })
    }

    fn store_error(&self, e: StoreError) -> SinkError {
        if e.is_transient() {
            SinkError::unavailable(format!("Parquet target {}", self.url), e)
        } else {
            SinkError::Conflict(format!("Parquet target {}: {e}", self.url))
        }
    }

    /// The commit number a file of this target is, from its name.
    fn commit_of(path: &str) -> Option<u64> {
        let name = path.rsplit('/').next()?;
        name.strip_prefix("part-")?
            .strip_suffix(".parquet")?
            .parse()
            .ok()
    }

    /// The marker in the footer of the file at `path`.
    async fn marker_of(&self, store: &Store, path: &str) -> Result<(String, Committed), SinkError> {
        let bytes = store
            .read_raw(path)
            .await
            .map_err(|e| self.store_error(e))?;
        let bad = |why: String| {
            SinkError::Conflict(format!(
                "{} is not a commit of a cdcfusion sink ({why}); point the sink at an empty directory",
                store.describe(path)
            ))
        };
        let metadata = ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .map_err(|e| bad(e.to_string()))?;
        let kv = metadata.file_metadata().key_value_metadata();
        let get = |key: &str| {
            kv.and_then(|kv| kv.iter().find(|k| k.key == key))
                .and_then(|k| k.value.clone())
                .ok_or_else(|| bad(format!("no {key} in its footer")))
        };
        let number = get(COMMIT_KEY)?
            .parse()
            .map_err(|e| bad(format!("{COMMIT_KEY}: {e}")))?;
        Ok((
            get(SINK_KEY)?,
            Committed {
                number,
                position: get(POSITION_KEY)?,
            },
        ))
    }

    /// The store at the target's URL.
    fn open_store(&self) -> Result<Store, SinkError> {
        // On S3, fail fast on an unreachable store: the runner retries with its own backoff and
        // shows the sink as `retrying` meanwhile (the store's default retries for minutes).
        let options: Vec<(String, String)> = if self.location.is_s3() {
            vec![
                ("max_retries".into(), "2".into()),
                ("retry_timeout_ms".into(), "10000".into()),
            ]
        } else {
            Vec::new()
        };
        Store::open(&self.url, &options).map_err(|e| match e {
            StoreError::Open { message, .. } => {
                SinkError::Invalid(format!("Parquet target {}: {message}", self.url))
            }
            other => self.store_error(other),
        })
    }

    /// The marker of the newest commit among `files`; another sink's commits are a conflict.
    async fn newest(
        &self,
        store: &Store,
        files: &[String],
        layout: &TargetLayout,
    ) -> Result<Option<Committed>, SinkError> {
        let newest = files
            .iter()
            .filter_map(|p| Some((Self::commit_of(p)?, p)))
            .max_by_key(|(n, _)| *n);
        let Some((_, path)) = newest else {
            return Ok(None);
        };
        let (sink, marker) = self.marker_of(store, path).await?;
        if sink != layout.sink {
            return Err(SinkError::Conflict(format!(
                "Parquet target {} holds the commits of sink {sink}; give sink {} a directory of its own",
                self.url, layout.sink
            )));
        }
        Ok(Some(marker))
    }
}

/// Commit `commit` of sink `sink` as the bytes of one Parquet file whose footer carries its
/// marker, its columns encoded on as many threads as the machine has cores (a dictionary only
/// where the values repeat: `dictionary`).
fn encode(sink: &str, commit: &Commit) -> Result<Bytes, SinkError> {
    let marker = &commit.marker;
    let builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(vec![
            KeyValue::new(SINK_KEY.to_string(), sink.to_string()),
            KeyValue::new(COMMIT_KEY.to_string(), marker.number.to_string()),
            KeyValue::new(POSITION_KEY.to_string(), marker.position.clone()),
        ]));
    let properties = without_dictionary(builder, &mostly_distinct(&commit.rows)).build();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    write_file(&commit.rows, properties, threads).map_err(|e| {
        SinkError::Unsupported(format!("writing commit {} as Parquet: {e}", marker.number))
    })
}

/// `rows` as the bytes of one Parquet file written with `properties`: the file one
/// `ArrowWriter` would write (row groups of its size, column chunks in order), but each row
/// group's columns are encoded on up to `threads` threads.
fn write_file(
    rows: &RecordBatch,
    properties: WriterProperties,
    threads: usize,
) -> parquet::errors::Result<Bytes> {
    let group_rows = properties
        .max_row_group_row_count()
        .unwrap_or(usize::MAX)
        .max(1);
    let writer = ArrowWriter::try_new(Vec::new(), rows.schema(), Some(properties))?;
    let (mut file, factory) = writer.into_serialized_writer()?;
    let mut offset = 0;
    for index in 0.. {
        if offset >= rows.num_rows() {
            break;
        }
        let group = rows.slice(offset, group_rows.min(rows.num_rows() - offset));
        offset += group.num_rows();
        let writers = factory.create_column_writers(index)?;
        // Each leaf with a rough cost: its column's bytes in memory, shared among its leaves.
        let mut leaves = Vec::with_capacity(writers.len());
        for (field, column) in group.schema().fields().iter().zip(group.columns()) {
            let of_column = compute_leaves(field, column)?;
            let size = column.get_array_memory_size() / of_column.len().max(1);
            leaves.extend(of_column.into_iter().map(|leaf| (size, leaf)));
        }
        let work = writers
            .into_iter()
            .zip(leaves)
            .map(|(writer, (size, leaf))| (size, writer, leaf))
            .collect();
        let mut row_group = file.next_row_group()?;
        for chunk in encode_leaves(work, threads)? {
            chunk.append_to_row_group(&mut row_group)?;
        }
        row_group.close()?;
    }
    // Writes the footer and hands the bytes back.
    Ok(Bytes::from(file.into_inner()?))
}

/// A leaf column to encode: its index among the leaves, its writer and its values.
type Leaf = (usize, ArrowColumnWriter, ArrowLeafColumn);

/// Encodes each leaf column (with its cost) with its writer, spread over `threads` threads
/// (costliest first, each to the least loaded thread), and returns the chunks in the leaves'
/// order.
fn encode_leaves(
    work: Vec<(usize, ArrowColumnWriter, ArrowLeafColumn)>,
    threads: usize,
) -> parquet::errors::Result<Vec<ArrowColumnChunk>> {
    let threads = threads.clamp(1, work.len().max(1));
    let mut sized: Vec<(usize, usize, ArrowColumnWriter, ArrowLeafColumn)> = work
        .into_iter()
        .enumerate()
        .map(|(i, (size, writer, leaf))| (size, i, writer, leaf))
        .collect();
    sized.sort_by_key(|leaf| std::cmp::Reverse(leaf.0));
    // Each thread's load and its leaves, by index.
    let mut shares: Vec<(usize, Vec<Leaf>)> = (0..threads).map(|_| (0, Vec::new())).collect();
    for (size, i, writer, leaf) in sized {
        let least = shares
            .iter_mut()
            .min_by_key(|(load, _)| *load)
            .expect("at least one thread");
        least.0 += size;
        least.1.push((i, writer, leaf));
    }
    let encode = |share: Vec<Leaf>| {
        share
            .into_iter()
            .map(|(i, mut writer, leaf)| {
                writer.write(&leaf)?;
                Ok((i, writer.close()?))
            })
            .collect::<parquet::errors::Result<Vec<_>>>()
    };
    let mut shares = shares.into_iter().map(|(_, share)| share);
    let first = shares.next().unwrap_or_default();
    let mut done: Vec<(usize, ArrowColumnChunk)> = std::thread::scope(|scope| {
        let others: Vec<_> = shares
            .map(|share| scope.spawn(move || encode(share)))
            .collect();
        let mut done = encode(first)?;
        for other in others {
            done.extend(other.join().map_err(|_| {
                parquet::errors::ParquetError::General("a column encoder panicked".into())
            })??);
        }
        Ok::<_, parquet::errors::ParquetError>(done)
    })?;
    done.sort_by_key(|(i, _)| *i);
    Ok(done.into_iter().map(|(_, chunk)| chunk).collect())
}

/// The UTC day of the current time, as `YYYY-MM-DD`.
fn today() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    chrono::DateTime::from_timestamp(i64::try_from(seconds).unwrap_or(0), 0)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| "1970-01-01".to_string())
}

#[async_trait]
impl Target for ParquetTarget {
    async fn open(&mut self, layout: &TargetLayout) -> Result<Option<Committed>, SinkError> {
        if layout.mode == SinkMode::Upsert {
            return Err(SinkError::Unsupported(
                "PARQUET files are append-only, so a Parquet sink writes changelogs: select FROM source.db.\"t$changelog\" (or use a POSTGRES target to upsert)".into(),
            ));
        }
        self.sink = layout.sink.clone();
        let store = self.open_store()?;
        let files = store.list("").await.map_err(|e| self.store_error(e))?;
        let committed = self.newest(&store, &files, layout).await?;
        self.store = Some(store);
        Ok(committed)
    }

    async fn read(&self, layout: &TargetLayout) -> Result<TargetRows, SinkError> {
        let store = self.open_store()?;
        let files = store.list("").await.map_err(|e| self.store_error(e))?;
        let Some(committed) = self.newest(&store, &files, layout).await? else {
            return Ok(TargetRows::default());
        };
        // Commits after the marker read (written since) are not part of this read.
        let mut parts: Vec<(u64, &String)> = files
            .iter()
            .filter_map(|p| Some((Self::commit_of(p)?, p)))
            .filter(|(n, _)| *n <= committed.number)
            .collect();
        parts.sort();
        let mut rows = Vec::new();
        for (_, path) in parts {
            let bytes = store
                .read_raw(path)
                .await
                .map_err(|e| self.store_error(e))?;
            let unreadable = |e: parquet::errors::ParquetError| {
                SinkError::Conflict(format!("reading {}: {e}", store.describe(path)))
            };
            let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
                .map_err(unreadable)?
                .build()
                .map_err(unreadable)?;
            for batch in reader {
                rows.push(batch.map_err(|e| {
                    SinkError::Conflict(format!("reading {}: {e}", store.describe(path)))
                })?);
            }
        }
        Ok(TargetRows {
            committed: Some(committed),
            rows,
        })
    }

    async fn commit(&mut self, commit: &Commit) -> Result<(), SinkError> {
        let Some(store) = self.store.clone() else {
            return Err(SinkError::unavailable(
                format!("Parquet target {}", self.url),
                "not open",
            ));
        };
        // Encoding is CPU work: it runs off the async threads, which keep serving queries and
        // making the next commit ready meanwhile.
        let (sink, owned) = (self.sink.clone(), commit.clone());
        let bytes = tokio::task::spawn_blocking(move || encode(&sink, &owned))
            .await
            .map_err(|e| SinkError::Input(format!("encoding a Parquet commit: {e}")))??;
        let path = format!("dt={}/part-{:020}.parquet", today(), commit.marker.number);
        store
            .put_plain(&path, bytes, PutMode::Create)
            .await
            .map_err(|e| match e {
                StoreError::Exists { path } => SinkError::Conflict(format!(
                    "{path} already exists: another engine writes sink {}",
                    self.sink
                )),
                other => self.store_error(other),
            })
    }

    fn describe(&self) -> String {
        format!("PARQUET '{}'", self.url)
    }
}

#[cfg(test)]
mod tests {
    use crate::sqlstate::HasSqlState;
    use crate::sqlstate::SqlState;
    use crate::state::changelog::format;
    use std::sync::Arc;

    use super::*;
    use arrow::array::{Array, ArrayRef, Int32Array, Int64Array, StringArray, StructArray};
    use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    fn layout(sink: &str, schema: &SchemaRef) -> TargetLayout {
        TargetLayout {
            sink: sink.into(),
            schema: Arc::clone(schema),
            mode: SinkMode::Changelog,
            key: vec![],
        }
    }

    fn commit(schema: &SchemaRef, number: u64, ids: &[i64]) -> Commit {
        let rows = RecordBatch::try_new(
            Arc::clone(schema),
            vec![
                Arc::new(StringArray::from_iter_values(ids.iter().map(|_| "c"))),
                Arc::new(Int64Array::from(ids.to_vec())),
            ],
        )
        .unwrap();
        Commit {
            marker: Committed {
                number,
                position: format!("p{number}"),
            },
            rows,
            deletes: None,
        }
    }

    fn all_rows(dir: &std::path::Path) -> Vec<i64> {
        let mut files = Vec::new();
        for day in std::fs::read_dir(dir).unwrap() {
            for f in std::fs::read_dir(day.unwrap().path()).unwrap() {
                files.push(f.unwrap().path());
            }
        }
        files.sort();
        let mut ids = Vec::new();
        for f in files {
            let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f).unwrap())
                .unwrap()
                .build()
                .unwrap();
            for batch in reader {
                let batch = batch.unwrap();
                let col = batch
                    .column(1)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                ids.extend(col.values().iter().copied());
            }
        }
        ids
    }

    #[tokio::test]
    async fn commits_are_files_whose_footer_says_where_to_resume() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new(format::OP, DataType::Utf8, false),
            Field::new("id", DataType::Int64, false),
        ]));
        let mut target = ParquetTarget::new(&url).unwrap();
        assert_eq!(target.open(&layout("s", &schema)).await.unwrap(), None);
        target.commit(&commit(&schema, 1, &[1, 2])).await.unwrap();
        target.commit(&commit(&schema, 2, &[3])).await.unwrap();
        let mut again = ParquetTarget::new(&url).unwrap();
        let marker = again.open(&layout("s", &schema)).await.unwrap().unwrap();
        assert_eq!(marker.number, 2);
        assert_eq!(marker.position, "p2");
        assert_eq!(all_rows(dir.path()), vec![1, 2, 3]);
        // A commit number already written is refused, and nothing changes.
        let err = again.commit(&commit(&schema, 2, &[9])).await.unwrap_err();
        assert!(matches!(err, SinkError::Conflict(_)), "{err}");
        assert_eq!(all_rows(dir.path()), vec![1, 2, 3]);
        // Another sink may not take the directory over.
        let err = ParquetTarget::new(&url)
            .unwrap()
            .open(&layout("other", &schema))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("holds the commits of sink s"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn upserts_and_bad_urls_are_refused() {
        assert!(ParquetTarget::new("postgresql://x/y").is_err());
        let dir = tempfile::tempdir().unwrap();
        let schema: SchemaRef =
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let mut l = layout("s", &schema);
        l.mode = SinkMode::Upsert;
        let err = ParquetTarget::new(&dir.path().display().to_string())
            .unwrap()
            .open(&l)
            .await
            .unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::FEATURE_NOT_SUPPORTED);
    }

    /// The parallel writer's file reads back as the rows, in row groups of the configured
    /// size, with nested columns' leaves in order, whatever the number of threads.
    #[test]
    fn columns_encoded_in_parallel_read_back_as_written() {
        let inner = StructArray::from(vec![
            (
                Arc::new(Field::new("a", DataType::Int32, true)),
                Arc::new(Int32Array::from(vec![
                    Some(1),
                    None,
                    Some(3),
                    Some(4),
                    None,
                ])) as ArrayRef,
            ),
            (
                Arc::new(Field::new("b", DataType::Utf8, true)),
                Arc::new(StringArray::from(vec![
                    Some("x"),
                    Some("y"),
                    None,
                    Some("z"),
                    None,
                ])) as ArrayRef,
            ),
        ]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", inner.data_type().clone(), true),
            Field::new("t", DataType::Utf8, true),
        ]));
        let rows = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(vec![10, 20, 30, 40, 50])),
                Arc::new(inner),
                Arc::new(StringArray::from(vec![
                    Some("long text"),
                    None,
                    Some(""),
                    Some("t"),
                    Some("u"),
                ])),
            ],
        )
        .unwrap();
        for threads in [1, 2, 3, 8] {
            let properties = WriterProperties::builder()
                .set_max_row_group_row_count(Some(2))
                .build();
            let bytes = write_file(&rows, properties, threads).unwrap();
            let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
            assert_eq!(reader.metadata().num_row_groups(), 3, "{threads} threads");
            let read: Vec<RecordBatch> = reader.build().unwrap().map(Result::unwrap).collect();
            let read = arrow::compute::concat_batches(&schema, &read).unwrap();
            assert_eq!(read, rows, "{threads} threads");
        }
    }
}
