//! Reading a PostgreSQL target back, for reconciliation: the sink's progress row and the
//! table's rows, each column in an Arrow type that holds its values exactly.
//!
//! # Invariant
//! The progress row and the rows are read in one `REPEATABLE READ` transaction, so the rows
//! are what the table held at that marker (a commit writes both in one transaction). Every
//! column is read through an exact form: integers, floats, booleans, text and bytes as
//! themselves; `numeric` as its text; dates as days and times, timestamps and intervals as
//! microseconds since their epoch; `json`/`jsonb` as canonical JSON text (keys sorted), which
//! [`stored`] also gives the sink's nested values, since `jsonb` does not keep key order.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, DurationMicrosecondBuilder,
    Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder, RecordBatch,
    StringBuilder, Time64MicrosecondBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema};
use tokio_postgres::error::SqlState;
use tokio_postgres::{IsolationLevel, Row};

use super::super::error::SinkError;
use super::super::target::{Committed, TargetLayout, TargetRows};
use super::super::text::quote_identifier as quote;
use super::copy::write_json;
use super::{classify, PostgresTarget, PROGRESS_TABLE};

/// How a column of a PostgreSQL type is read: the select expression's form and its Arrow type.
#[derive(Debug, Clone, Copy)]
enum Form {
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    Bool,
    Text,
    Json,
    Bytes,
    /// Days since 1970-01-01.
    Date,
    /// Microseconds since the epoch (of the day, for `time`; a length, for `interval`).
    Timestamp,
    TimestampUtc,
    Time,
    Interval,
}

impl Form {
    fn of(typname: &str) -> Self {
        match typname {
            "int2" => Form::Int16,
            "int4" => Form::Int32,
            "int8" => Form::Int64,
            "float4" => Form::Float32,
            "float8" => Form::Float64,
            "bool" => Form::Bool,
            "json" | "jsonb" => Form::Json,
            "bytea" => Form::Bytes,
            "date" => Form::Date,
            "timestamp" => Form::Timestamp,
            "timestamptz" => Form::TimestampUtc,
            "time" => Form::Time,
            "interval" => Form::Interval,
            // numeric, text, varchar, bpchar, and anything else: PostgreSQL's own text.
            _ => Form::Text,
        }
    }

    /// The select expression reading column `c` (quoted) in this form.
    fn select(self, c: &str) -> String {
        match self {
            Form::Text | Form::Json => format!("{c}::text"),
            Form::Date => format!("({c} - DATE '1970-01-01')"),
            Form::Timestamp | Form::TimestampUtc | Form::Time | Form::Interval => {
                format!("(extract(epoch FROM {c}) * 1000000)::int8")
            }
            _ => c.to_string(),
        }
    }

    fn data_type(self) -> DataType {
        use arrow::datatypes::TimeUnit::Microsecond;
        match self {
            Form::Int16 => DataType::Int16,
            Form::Int32 => DataType::Int32,
            Form::Int64 => DataType::Int64,
            Form::Float32 => DataType::Float32,
            Form::Float64 => DataType::Float64,
            Form::Bool => DataType::Boolean,
            Form::Text | Form::Json => DataType::Utf8,
            Form::Bytes => DataType::Binary,
            Form::Date => DataType::Date32,
            Form::Timestamp => DataType::Timestamp(Microsecond, None),
            Form::TimestampUtc => DataType::Timestamp(Microsecond, Some("UTC".into())),
            Form::Time => DataType::Time64(Microsecond),
            Form::Interval => DataType::Duration(Microsecond),
        }
    }

    /// Column `i` of `rows` as an array of this form's type.
    fn array(self, rows: &[Row], i: usize) -> Result<ArrayRef, tokio_postgres::Error> {
        macro_rules! build {
            ($builder:ty, $t:ty) => {{
                let mut b = <$builder>::with_capacity(rows.len());
                for r in rows {
                    b.append_option(r.try_get::<_, Option<$t>>(i)?);
                }
                Arc::new(b.finish()) as ArrayRef
            }};
        }
        Ok(match self {
            Form::Int16 => build!(Int16Builder, i16),
            Form::Int32 => build!(Int32Builder, i32),
            Form::Date => build!(Date32Builder, i32),
            Form::Int64 => build!(Int64Builder, i64),
            Form::Float32 => build!(Float32Builder, f32),
            Form::Float64 => build!(Float64Builder, f64),
            Form::Bool => build!(BooleanBuilder, bool),
            Form::Bytes => {
                let mut b = BinaryBuilder::with_capacity(rows.len(), rows.len() * 16);
                for r in rows {
                    b.append_option(r.try_get::<_, Option<Vec<u8>>>(i)?);
                }
                Arc::new(b.finish())
            }
            Form::Text => {
                let mut b = StringBuilder::with_capacity(rows.len(), rows.len() * 16);
                for r in rows {
                    b.append_option(r.try_get::<_, Option<String>>(i)?);
                }
                Arc::new(b.finish())
            }
            Form::Json => {
                let mut b = StringBuilder::with_capacity(rows.len(), rows.len() * 16);
                for r in rows {
                    let text = r.try_get::<_, Option<String>>(i)?;
                    b.append_option(text.map(|t| canonical_json(&t)));
                }
                Arc::new(b.finish())
            }
            Form::Timestamp => build!(TimestampMicrosecondBuilder, i64),
            Form::TimestampUtc => {
                let mut b =
                    TimestampMicrosecondBuilder::with_capacity(rows.len()).with_timezone("UTC");
                for r in rows {
                    b.append_option(r.try_get::<_, Option<i64>>(i)?);
                }
                Arc::new(b.finish())
            }
            Form::Time => build!(Time64MicrosecondBuilder, i64),
            Form::Interval => build!(DurationMicrosecondBuilder, i64),
        })
    }
}

/// `text` (JSON) with every object's keys sorted and no spaces; text that is not JSON stays
/// as it is (it then differs from any value).
fn canonical_json(text: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => {
            let mut out = String::with_capacity(text.len());
            canonical(&v, &mut out);
            out
        }
        Err(_) => text.to_string(),
    }
}

/// `v` written with object keys sorted, recursively, and no spaces.
fn canonical(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::Object(map) => {
            let ordered: BTreeMap<&String, &serde_json::Value> = map.iter().collect();
            out.push('{');
            for (i, (k, v)) in ordered.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::String(k.clone()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

impl PostgresTarget {
    /// The sink's progress row and the table's rows, read in one `REPEATABLE READ`
    /// transaction: both are written by one transaction per commit, so the rows are what the
    /// table held at that marker.
    pub(super) async fn read_rows(&self, layout: &TargetLayout) -> Result<TargetRows, SinkError> {
        let what = self.what();
        let mut client = self.connect().await?;
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(|e| classify(&what, e))?;
        let progress = self.qualified(PROGRESS_TABLE);
        let marker = tx
            .query_opt(
                &format!("SELECT commit, position FROM {progress} WHERE sink = $1 AND target = $2"),
                &[&layout.sink, &self.table],
            )
            .await;
        let marker = match marker {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(TargetRows::default()),
            // No progress table: nothing was ever committed here.
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                return Ok(TargetRows::default())
            }
            Err(e) => return Err(classify(&what, e)),
        };
        let committed = Committed {
            number: u64::try_from(marker.get::<_, i64>(0)).unwrap_or(0),
            position: marker.get(1),
        };
        let Some(columns) = self.existing_columns(&tx).await? else {
            return Err(SinkError::Conflict(format!(
                "{what} is gone, though {progress} records commit {} of sink {}",
                committed.number, layout.sink
            )));
        };
        let rows = tx
            .query(
                &format!(
                    "SELECT {} FROM {}",
                    select_list(&columns),
                    self.qualified(&self.table)
                ),
                &[],
            )
            .await
            .map_err(|e| classify(&what, e))?;
        tx.commit().await.map_err(|e| classify(&what, e))?;
        Ok(TargetRows {
            committed: Some(committed),
            rows: vec![batch_of(&columns, &rows)?],
        })
    }

    /// The sink's rows as the table stores them for comparison: nested values (written as
    /// `jsonb`) as canonical JSON text; every other column as it is (the comparison casts
    /// the table's column to its type).
    pub(super) fn stored_rows(&self, rows: &RecordBatch) -> Result<RecordBatch, SinkError> {
        let schema = rows.schema();
        let mut fields = Vec::with_capacity(schema.fields().len());
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(fields.capacity());
        for (field, column) in schema.fields().iter().zip(rows.columns()) {
            let nested = matches!(
                field.data_type(),
                DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_)
            );
            if !nested {
                fields.push(field.as_ref().clone());
                columns.push(Arc::clone(column));
                continue;
            }
            let mut b = StringBuilder::with_capacity(column.len(), column.len() * 32);
            let mut text = String::new();
            for row in 0..column.len() {
                if column.is_null(row) {
                    b.append_null();
                    continue;
                }
                text.clear();
                write_json(&mut text, column.as_ref(), row).map_err(|e| {
                    SinkError::Input(format!("column {} as JSON: {e}", field.name()))
                })?;
                b.append_value(canonical_json(&text));
            }
            fields.push(Field::new(field.name(), DataType::Utf8, true));
            columns.push(Arc::new(b.finish()));
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
            .map_err(|e| SinkError::Input(e.to_string()))
    }
}

/// The select list reading `columns` (name, `typname`, full type) in their exact forms.
fn select_list(columns: &[(String, String, String)]) -> String {
    columns
        .iter()
        .map(|(name, typname, _)| Form::of(typname).select(&quote(name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `rows` (read with [`select_list`] of `columns`) as one batch, named as the table's columns.
fn batch_of(columns: &[(String, String, String)], rows: &[Row]) -> Result<RecordBatch, SinkError> {
    let error = |e: &dyn std::fmt::Display| SinkError::Input(format!("reading the table: {e}"));
    let mut fields = Vec::with_capacity(columns.len());
    let mut arrays = Vec::with_capacity(columns.len());
    for (i, (name, typname, _)) in columns.iter().enumerate() {
        let form = Form::of(typname);
        fields.push(Field::new(name, form.data_type(), true));
        arrays.push(form.array(rows, i).map_err(|e| error(&e))?);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(|e| error(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_compares_whatever_the_key_order_and_spacing() {
        let held = canonical_json(r#"{"b": [1, {"d": null, "c": "x"}], "a": 1.5}"#);
        let written = canonical_json(r#"{"a":1.5,"b":[1,{"c":"x","d":null}]}"#);
        assert_eq!(held, written);
        assert_eq!(held, r#"{"a":1.5,"b":[1,{"c":"x","d":null}]}"#);
        assert_ne!(canonical_json(r#"{"a": 1}"#), canonical_json(r#"{"a": 2}"#));
        assert_eq!(canonical_json("not json"), "not json");
    }
}
