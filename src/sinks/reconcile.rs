//! Reconciling a sink's target: the rows its query gives over the source's state at the
//! target's committed position `H`, compared key by key with the rows the target holds there.
//!
//! # Invariant
//! A difference is a key (an upsert sink's key columns; a changelog sink's `_position`) where
//! the target, read in one consistent read with its marker, is not what the sink's query gives
//! at `H`: `missing` (expected, not in the target), `extra` (in the target, not expected, or
//! held more than once) or `differs` (the columns that do, with both values). Values compare
//! exactly: the expected rows are first converted as the target converts what it writes
//! ([`Target::stored`]), the target's column is cast to that type, and both are compared by
//! their text in that one type. Columns the target has beyond the query's are not compared.
//!
//! [`Target::stored`]: super::target::Target::stored

use std::collections::BTreeMap;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::execution::session_state::SessionState;

use super::error::SinkError;
use super::query::SinkQuery;
use super::step::execute;
use super::text::{duration_micros, write_interval};
use crate::provider::reconcile::Difference;

/// What a comparison found, and how much it read.
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    pub differences: Vec<Difference>,
    /// Expected rows compared.
    pub expected_rows: u64,
    /// Rows read from the target, and the text length of their compared values.
    pub target_rows: u64,
    pub target_bytes: u64,
}

/// The rows `query` gives over `inputs` (one list of batches per scan, in the scan's columns).
pub async fn expected_rows(
    state: &SessionState,
    query: &SinkQuery,
    inputs: &[Vec<RecordBatch>],
) -> Result<RecordBatch, SinkError> {
    execute(state, query.bind(&query.plan, inputs)?, &query.schema).await
}

/// One row's values as text, one per compared column (`None` for NULL).
type Values = Vec<Option<String>>;

/// One side's rows by key text.
type Keyed = BTreeMap<String, Vec<Values>>;

/// Compares `expected` (already in the target's stored types) with the target's `rows`, by
/// the columns `key`; see the module docs.
pub fn compare(
    key: &[String],
    expected: &RecordBatch,
    rows: &[RecordBatch],
) -> Result<Comparison, SinkError> {
    let schema = expected.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let key_at: Vec<usize> = key
        .iter()
        .map(|k| {
            names.iter().position(|n| n == k).ok_or_else(|| {
                SinkError::Input(format!("the sink's key column {k} is not in its rows"))
            })
        })
        .collect::<Result<_, _>>()?;
    let mut out = Comparison::default();
    let mut want: Keyed = BTreeMap::new();
    for (k, values) in render(&names, &key_at, expected.columns())? {
        want.entry(k).or_default().push(values);
        out.expected_rows += 1;
    }
    let mut have: Keyed = BTreeMap::new();
    for batch in rows {
        let columns = names
            .iter()
            .zip(expected.columns())
            .map(|(name, e)| as_type(batch, name, e.data_type()))
            .collect::<Result<Vec<_>, _>>()?;
        for (k, values) in render(&names, &key_at, &columns)? {
            out.target_rows += 1;
            out.target_bytes += values
                .iter()
                .map(|v| v.as_ref().map_or(1, String::len) as u64)
                .sum::<u64>();
            have.entry(k).or_default().push(values);
        }
    }
    let all: Vec<usize> = (0..names.len()).collect();
    let difference =
        |key: &str,
         kind,
         columns: &[usize],
         e: Option<&[Option<String>]>,
         t: Option<&[Option<String>]>| { difference(&names, key, kind, columns, e, t) };
    for (key, mut expected) in want {
        let mut held = have.remove(&key).unwrap_or_default();
        // Rows held exactly as expected first; the rest pair up in order.
        expected.retain(|e| match held.iter().position(|t| t == e) {
            Some(i) => {
                held.remove(i);
                false
            }
            None => true,
        });
        let mut held = held.into_iter();
        for e in expected {
            match held.next() {
                Some(t) => {
                    let differing: Vec<usize> =
                        all.iter().copied().filter(|&i| e[i] != t[i]).collect();
                    out.differences.push(difference(
                        &key,
                        "differs",
                        &differing,
                        Some(&e),
                        Some(&t),
                    ));
                }
                None => out
                    .differences
                    .push(difference(&key, "missing", &all, Some(&e), None)),
            }
        }
        for t in held {
            out.differences
                .push(difference(&key, "extra", &all, None, Some(&t)));
        }
    }
    for (key, held) in have {
        for t in held {
            out.differences
                .push(difference(&key, "extra", &all, None, Some(&t)));
        }
    }
    Ok(out)
}

/// The difference of `kind` at `key`: `columns` of the expected row `e` and the held row `t`.
fn difference(
    names: &[&str],
    key: &str,
    kind: &'static str,
    columns: &[usize],
    e: Option<&[Option<String>]>,
    t: Option<&[Option<String>]>,
) -> Difference {
    let values = |v: Option<&[Option<String>]>| v.map(|v| shown(names, v, columns));
    Difference {
        chunk: 0,
        key: key.to_string(),
        kind,
        columns: (kind == "differs").then(|| {
            columns
                .iter()
                .map(|&i| names[i])
                .collect::<Vec<_>>()
                .join(", ")
        }),
        source: values(e),
        engine: values(t),
    }
}

/// Column `name` of `batch` as `data_type` (NULL where the target has no such column). A
/// value the cast cannot carry keeps the target's own type, so it shows as it is held and
/// differs.
fn as_type(batch: &RecordBatch, name: &str, data_type: &DataType) -> Result<ArrayRef, SinkError> {
    let Some(column) = batch.column_by_name(name) else {
        return Ok(arrow::array::new_null_array(data_type, batch.num_rows()));
    };
    if column.data_type() == data_type {
        return Ok(std::sync::Arc::clone(column));
    }
    let safe = CastOptions {
        safe: true,
        ..Default::default()
    };
    match cast_with_options(column, data_type, &safe) {
        Ok(cast) if cast.logical_null_count() == column.logical_null_count() => Ok(cast),
        // Some value has no exact form in the expected type (or none does): compare the
        // target's text as it is.
        _ => cast_with_options(column, &DataType::Utf8, &safe)
            .map_err(|e| SinkError::Input(format!("column {name} of the target as text: {e}"))),
    }
}

/// Every row of `columns` (named `names`) as its key's text and its values' texts.
fn render(
    names: &[&str],
    key_at: &[usize],
    columns: &[ArrayRef],
) -> Result<Vec<(String, Values)>, SinkError> {
    let options = FormatOptions::default();
    let formatters = columns
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SinkError::Input(format!("rendering values to compare: {e}")))?;
    let n = columns.first().map_or(0, |c| c.len());
    let mut out = Vec::with_capacity(n);
    for row in 0..n {
        let values: Values = columns
            .iter()
            .zip(&formatters)
            .map(|(c, f)| {
                (!c.is_null(row)).then(|| match c.data_type() {
                    // MySQL's TIME, shown as it reads rather than as an ISO 8601 duration.
                    DataType::Duration(unit) => {
                        let mut text = String::new();
                        write_interval(&mut text, duration_micros(c.as_ref(), *unit, row));
                        text
                    }
                    _ => f.value(row).to_string(),
                })
            })
            .collect();
        out.push((shown(names, &values, key_at), values));
    }
    Ok(out)
}

/// `name=value, ...` of the columns `which` of `values`.
fn shown(names: &[&str], values: &[Option<String>], which: &[usize]) -> String {
    which
        .iter()
        .map(|&i| format!("{}={}", names[i], values[i].as_deref().unwrap_or("NULL")))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use crate::state::changelog::format;
    use std::sync::Arc;

    use arrow::array::{Decimal128Array, Int64Array, StringArray, UInt64Array};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    #[test]
    fn keys_missing_extra_and_differing_columns_are_named() {
        let expected = batch(vec![
            ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
            (
                "big",
                Arc::new(UInt64Array::from(vec![u64::MAX, 5, 6])) as ArrayRef,
            ),
            (
                "v",
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])) as ArrayRef,
            ),
        ]);
        // The target widened `big` to decimal(20,0) and lacks key 2, has key 4, and a
        // different `v` for key 3.
        let held = batch(vec![
            ("id", Arc::new(Int64Array::from(vec![3, 1, 4])) as ArrayRef),
            (
                "big",
                Arc::new(
                    Decimal128Array::from(vec![6, u64::MAX as i128, 7])
                        .with_precision_and_scale(20, 0)
                        .unwrap(),
                ) as ArrayRef,
            ),
            (
                "v",
                Arc::new(StringArray::from(vec![Some("x"), Some("a"), None])) as ArrayRef,
            ),
            (
                "extra_column",
                Arc::new(Int64Array::from(vec![9, 9, 9])) as ArrayRef,
            ),
        ]);
        let found = compare(&["id".to_string()], &expected, &[held]).unwrap();
        let rows: Vec<_> = found
            .differences
            .iter()
            .map(|d| {
                format!(
                    "{} {} {:?} {:?} {:?}",
                    d.key, d.kind, d.columns, d.source, d.engine
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                "id=2 missing None Some(\"id=2, big=5, v=NULL\") None",
                "id=3 differs Some(\"v\") Some(\"v=c\") Some(\"v=x\")",
                "id=4 extra None None Some(\"id=4, big=7, v=NULL\")",
            ]
        );
        assert_eq!((found.expected_rows, found.target_rows), (3, 3));
    }

    #[test]
    fn a_row_held_twice_is_extra_and_a_value_that_does_not_cast_differs() {
        let schema = Arc::new(Schema::new(vec![
            Field::new(format::POSITION, DataType::Utf8, false),
            Field::new("n", DataType::Int32, true),
        ]));
        let expected = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["p1", "p2"])),
                Arc::new(arrow::array::Int32Array::from(vec![1, 2])),
            ],
        )
        .unwrap();
        let held = batch(vec![
            (
                "_position",
                Arc::new(StringArray::from(vec!["p1", "p1", "p2"])) as ArrayRef,
            ),
            (
                "n",
                Arc::new(StringArray::from(vec!["1", "1", "two"])) as ArrayRef,
            ),
        ]);
        let found = compare(&[format::POSITION.to_string()], &expected, &[held]).unwrap();
        let kinds: Vec<_> = found
            .differences
            .iter()
            .map(|d| (d.key.as_str(), d.kind, d.engine.clone()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (
                    "_position=p1",
                    "extra",
                    Some("_position=p1, n=1".to_string())
                ),
                ("_position=p2", "differs", Some("n=two".to_string())),
            ]
        );
    }
}
