//! Declaring a `cdc` table: one ordered list of columns, each a name, a type and the value it
//! takes from a row, from which the table's schema and its batches are both made (as
//! DataFusion's `information_schema` pairs each table's declared schema with typed builders).
//!
//! # Invariant
//! A table's schema and its rows come from the same list, so they cannot disagree, and adding
//! a column is one line in its table's file. Every column is nullable, so the schema is the
//! same whether the table has rows or not.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
    UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::error::Result;

use datafusion::catalog::Session;

use crate::capture::version::SourceVersion;
use crate::engine::sinks::{RunningSink, SinksRef};
use crate::engine::source::{RunningSource, SourcesRef};
use crate::locks::{Locked, RwLocked};
use crate::provider::reconcile::{ReconcileLog, ReconcileReport};
use crate::provider::version_for;

/// What a column holds, and how to read it off a row.
pub(super) enum Value<R> {
    Text(fn(&R) -> Option<String>),
    Count(fn(&R) -> Option<u64>),
    Number(fn(&R) -> Option<f64>),
    Flag(fn(&R) -> Option<bool>),
    /// Microseconds since the epoch, shown in UTC.
    Time(fn(&R) -> Option<i64>),
}

/// One column of a status table.
pub(super) struct Column<R> {
    name: &'static str,
    value: Value<R>,
}

/// A text column.
pub(super) const fn text<R>(name: &'static str, f: fn(&R) -> Option<String>) -> Column<R> {
    Column {
        name,
        value: Value::Text(f),
    }
}

/// An unsigned count.
pub(super) const fn count<R>(name: &'static str, f: fn(&R) -> Option<u64>) -> Column<R> {
    Column {
        name,
        value: Value::Count(f),
    }
}

/// A float (seconds, ratios).
pub(super) const fn number<R>(name: &'static str, f: fn(&R) -> Option<f64>) -> Column<R> {
    Column {
        name,
        value: Value::Number(f),
    }
}

/// A boolean.
pub(super) const fn flag<R>(name: &'static str, f: fn(&R) -> Option<bool>) -> Column<R> {
    Column {
        name,
        value: Value::Flag(f),
    }
}

/// A UTC timestamp from microseconds since the epoch.
pub(super) const fn time<R>(name: &'static str, f: fn(&R) -> Option<i64>) -> Column<R> {
    Column {
        name,
        value: Value::Time(f),
    }
}

impl<R> Column<R> {
    fn field(&self) -> Field {
        let data_type = match self.value {
            Value::Text(_) => DataType::Utf8,
            Value::Count(_) => DataType::UInt64,
            Value::Number(_) => DataType::Float64,
            Value::Flag(_) => DataType::Boolean,
            Value::Time(_) => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        };
        Field::new(self.name, data_type, true)
    }

    fn array(&self, rows: &[R]) -> ArrayRef {
        match self.value {
            Value::Text(f) => Arc::new(rows.iter().map(f).collect::<StringArray>()),
            Value::Count(f) => Arc::new(rows.iter().map(f).collect::<UInt64Array>()),
            Value::Number(f) => Arc::new(rows.iter().map(f).collect::<Float64Array>()),
            Value::Flag(f) => Arc::new(rows.iter().map(f).collect::<BooleanArray>()),
            Value::Time(f) => Arc::new(
                rows.iter()
                    .map(f)
                    .collect::<TimestampMicrosecondArray>()
                    .with_timezone("UTC"),
            ),
        }
    }
}

/// A status table: its name, its columns, and the rows a scan sees.
pub(super) struct Declared<R: 'static> {
    pub name: &'static str,
    pub columns: &'static [Column<R>],
    pub rows: fn(&Scan<'_>) -> Vec<R>,
}

/// A [`Declared`] table whatever its row type, so the schema can list them together.
pub(super) trait StatusTableDef: Sync {
    fn name(&self) -> &'static str;
    fn schema(&self) -> SchemaRef;
    fn batch(&self, scan: &Scan<'_>) -> Result<RecordBatch>;
}

impl<R> StatusTableDef for Declared<R> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns.iter().map(Column::field).collect::<Vec<_>>(),
        ))
    }

    fn batch(&self, scan: &Scan<'_>) -> Result<RecordBatch> {
        let rows = (self.rows)(scan);
        let columns = self.columns.iter().map(|c| c.array(&rows)).collect();
        Ok(RecordBatch::try_new(self.schema(), columns)?)
    }
}

/// What a scan of a status table reads: the engine's sources, sinks and reconcile reports, and
/// the query's session (whose pinned versions the source tables report).
pub(super) struct Scan<'a> {
    pub sources: &'a SourcesRef,
    pub sinks: &'a SinksRef,
    pub reconciliations: &'a ReconcileLog,
    pub session: Option<&'a dyn Session>,
}

impl Scan<'_> {
    pub(super) fn sources(&self) -> Vec<Arc<RunningSource>> {
        self.sources
            .upgrade()
            .map(|s| s.read_locked().values().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn source(&self, name: &str) -> Option<Arc<RunningSource>> {
        self.sources
            .upgrade()
            .and_then(|s| s.read_locked().get(name).cloned())
    }

    pub(super) fn sinks(&self) -> Vec<Arc<RunningSink>> {
        self.sinks
            .upgrade()
            .map(|s| s.read_locked().values().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn reconciliations(&self) -> Vec<ReconcileReport> {
        self.reconciliations.locked().iter().cloned().collect()
    }

    /// The version of `source` this query reads: its pinned one, else the latest.
    pub(super) fn version(&self, source: &RunningSource) -> Arc<SourceVersion> {
        match self.session {
            Some(session) => version_for(session, &source.name, &source.published),
            None => source.published.load_full(),
        }
    }
}
