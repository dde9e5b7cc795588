//! Which pushed filters of a current-table scan an index answers, and the lookup that answers
//! them ([`IndexLookup`]).
//!
//! A filter is answered when it selects values of an index's first column (`c = v`,
//! `c IN (...)`, a disjunction of those) or a range of it (`c > v`, `v >= c`, `c BETWEEN v
//! AND w`, and `c = v` as the range `[v, v]`), the values exactly of the column's type; the
//! primary key's first column is an index for ranges (its equalities have the key lookup).
//! Never on a floating-point column: SQL has `-0 = 0` and orders NaN, Arrow's row format does
//! neither. A value is a literal or a parameter of a prepared statement typed as the column
//! ([`Operand`]): a plan kept with its parameters binds them at each run ([`RunParams`]), so
//! a prepared lookup is planned once.
//!
//! # Invariant
//! A lookup selects exactly the rows the filters it answers select: values and bounds are
//! compared as Arrow's row format of the column compares them, which is the order and
//! equality of the column's values, and NULL satisfies no comparison. A value its column
//! cannot hold exactly selects nothing (equality) or makes the filter unanswered (a bound).

use std::fmt;
use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, RecordBatch};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::{DataFusionError, ParamValues, Result, ScalarValue};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use datafusion::prelude::SessionConfig;

use crate::change::schema::{IndexSpec, TableSchema};
use crate::state::current::TableSnapshot;
use crate::state::lookup::{filter_range, filter_where, Through};
use crate::state::secondary::Bounds;

/// The parameters of the statement a plan runs for, bound into its scans when they read
/// (a session configuration extension).
#[derive(Debug)]
pub struct RunParams(pub ParamValues);

/// A value a filter compares a column with: a literal, or a parameter (`$1`) of the column's
/// type, whose value each run binds.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    Literal(ScalarValue),
    /// A parameter's id (`$1`) and the type the plan gives it.
    Param(String, DataType),
}

impl Operand {
    /// `e` as a value of a column of type `data_type`: a literal other than NULL, or a
    /// parameter typed as the column.
    fn of(e: &Expr, data_type: &DataType) -> Option<Operand> {
        match e {
            Expr::Literal(v, _) if !v.is_null() => Some(Operand::Literal(v.clone())),
            Expr::Placeholder(p)
                if p.field.as_ref().is_some_and(|f| f.data_type() == data_type) =>
            {
                Some(Operand::Param(p.id.clone(), data_type.clone()))
            }
            _ => None,
        }
    }

    /// Its value for a run under `config`; a parameter without a bound value is an error. A
    /// value bound as another type (a client that declared the parameter `text`) is cast to
    /// the plan's, failing as the plan with the value in place fails.
    pub fn value(&self, config: &SessionConfig) -> Result<ScalarValue> {
        match self {
            Operand::Literal(v) => Ok(v.clone()),
            Operand::Param(id, data_type) => {
                let params = config.get_extension::<RunParams>().ok_or_else(|| {
                    DataFusionError::Plan(format!("no value is bound to parameter {id}"))
                })?;
                let value = params.0.get_placeholders_with_values(id)?.value;
                match value.data_type() == *data_type {
                    true => Ok(value),
                    false => value.cast_to(data_type),
                }
            }
        }
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Literal(v) => write!(f, "{v}"),
            Operand::Param(id, _) => write!(f, "{id}"),
        }
    }
}

/// What a lookup wants of an index's first column.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Wanted {
    /// One of these values.
    Values(Vec<Operand>),
    /// Within all of these ranges (several filters on the column, intersected when bound).
    Ranges(Vec<Range<Operand>>),
}

/// A range of one column: each bound a value and whether it is inclusive.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Range<T = ScalarValue> {
    pub low: Option<(T, bool)>,
    pub high: Option<(T, bool)>,
}

impl Range<Operand> {
    /// The range with its values bound for a run under `config`, each cast exactly to
    /// `data_type`; `None` when it selects nothing (a NULL bound, or one the type cannot hold
    /// exactly: only a literal could be one, and those were checked at planning).
    fn bind(&self, config: &SessionConfig, data_type: &DataType) -> Result<Option<Range>> {
        let bound = |b: &Option<(Operand, bool)>| -> Result<Option<Option<(ScalarValue, bool)>>> {
            match b {
                None => Ok(Some(None)),
                Some((v, inclusive)) => {
                    let v = v.value(config)?;
                    Ok(exact_cast(&v, data_type).map(|v| Some((v, *inclusive))))
                }
            }
        };
        let (Some(low), Some(high)) = (bound(&self.low)?, bound(&self.high)?) else {
            return Ok(None);
        };
        Ok(Some(Range { low, high }))
    }
}

impl Range {
    /// The range both `self` and `other` hold: the higher low bound and the lower high bound
    /// (of two equal ones, the exclusive).
    fn and(self, other: Range) -> Range {
        let pick = |a: Option<(ScalarValue, bool)>, b: Option<(ScalarValue, bool)>, low: bool| {
            match (a, b) {
                (None, x) | (x, None) => x,
                (Some(a), Some(b)) => Some(match a.0.partial_cmp(&b.0) {
                    Some(std::cmp::Ordering::Equal) => (a.0, a.1 && b.1),
                    Some(std::cmp::Ordering::Greater) if low => a,
                    Some(std::cmp::Ordering::Less) if !low => a,
                    _ => b,
                }),
            }
        };
        Range {
            low: pick(self.low, other.low, true),
            high: pick(self.high, other.high, false),
        }
    }
}

impl<T: fmt::Display> fmt::Display for Range<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.low {
            Some((v, true)) => write!(f, "[{v}, ")?,
            Some((v, false)) => write!(f, "({v}, ")?,
            None => write!(f, "(.., ")?,
        }
        match &self.high {
            Some((v, true)) => write!(f, "{v}]"),
            Some((v, false)) => write!(f, "{v})"),
            None => write!(f, "..)"),
        }
    }
}

/// Ranges as `EXPLAIN` shows them: intersected when every bound is a literal, else each.
fn shown_ranges(ranges: &[Range<Operand>]) -> String {
    let literal = |b: &Option<(Operand, bool)>| match b {
        None => Some(None),
        Some((Operand::Literal(v), inclusive)) => Some(Some((v.clone(), *inclusive))),
        Some((Operand::Param(..), _)) => None,
    };
    let literals: Option<Vec<Range>> = ranges
        .iter()
        .map(|r| {
            Some(Range {
                low: literal(&r.low)?,
                high: literal(&r.high)?,
            })
        })
        .collect();
    match literals.and_then(|r| r.into_iter().reduce(Range::and)) {
        Some(together) => together.to_string(),
        None => {
            let shown: Vec<String> = ranges.iter().map(|r| r.to_string()).collect();
            shown.join(" and ")
        }
    }
}

/// `v` as a value of `data_type`, if that type holds it exactly (a lossy cast, e.g. 1.5 to an
/// integer, would select the wrong rows); `None` for a NULL.
pub(super) fn exact_cast(v: &ScalarValue, data_type: &DataType) -> Option<ScalarValue> {
    if v.is_null() {
        return None;
    }
    let cast = v.cast_to(data_type).ok()?;
    (cast.cast_to(&v.data_type()).ok().as_ref() == Some(v)).then_some(cast)
}

fn is_column(column: &str, e: &Expr) -> bool {
    matches!(e, Expr::Column(c) if c.name == column)
}

/// The values a filter selects of `column` (of type `data_type`), if it is `column = v`,
/// `v = column`, `column IN (vs)`, or a disjunction of those (DataFusion rewrites short IN
/// lists so), each `v` an [`Operand`].
pub(super) fn values_of(column: &str, data_type: &DataType, filter: &Expr) -> Option<Vec<Operand>> {
    match filter {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => {
            let mut values = values_of(column, data_type, left)?;
            values.extend(values_of(column, data_type, right)?);
            Some(values)
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => match (left.as_ref(), right.as_ref()) {
            (c, v) | (v, c) if is_column(column, c) => Some(vec![Operand::of(v, data_type)?]),
            _ => None,
        },
        Expr::InList(list) if !list.negated && is_column(column, &list.expr) => list
            .list
            .iter()
            .map(|e| Operand::of(e, data_type))
            .collect(),
        _ => None,
    }
}

/// The range a filter selects of `column` (of type `data_type`), if it compares the column
/// with literals its type holds exactly or with parameters of its type; see the module docs.
pub(super) fn range_of(
    column: &str,
    data_type: &DataType,
    filter: &Expr,
) -> Option<Range<Operand>> {
    // A literal is cast exactly now; a parameter has the column's type.
    let bound = |e: &Expr| match Operand::of(e, data_type)? {
        Operand::Literal(v) => exact_cast(&v, data_type).map(Operand::Literal),
        param => Some(param),
    };
    match filter {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            // `v op column` is `column op' v`.
            let (op, v) = if is_column(column, left) {
                (*op, right.as_ref())
            } else if is_column(column, right) {
                (op.swap()?, left.as_ref())
            } else {
                return None;
            };
            let v = bound(v)?;
            Some(match op {
                Operator::Eq => Range {
                    low: Some((v.clone(), true)),
                    high: Some((v, true)),
                },
                Operator::Gt => Range {
                    low: Some((v, false)),
                    high: None,
                },
                Operator::GtEq => Range {
                    low: Some((v, true)),
                    high: None,
                },
                Operator::Lt => Range {
                    low: None,
                    high: Some((v, false)),
                },
                Operator::LtEq => Range {
                    low: None,
                    high: Some((v, true)),
                },
                _ => return None,
            })
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if is_column(column, expr) => Some(Range {
            low: Some((bound(low)?, true)),
            high: Some((bound(high)?, true)),
        }),
        _ => None,
    }
}

/// The indexes whose first column a range may be looked up by, in the order they are tried:
/// the primary key's, then each secondary index's; not on floating-point columns.
pub(super) fn range_indexes(table: &TableSchema) -> impl Iterator<Item = IndexSpec> + '_ {
    let primary = (!table.primary_key.is_empty()).then(|| IndexSpec::primary(&table.primary_key));
    primary
        .into_iter()
        .chain(table.indexes.iter().cloned())
        .filter(|i| !table.arrow.field(i.columns[0]).data_type().is_floating())
}

/// The rows whose first column of an index holds wanted values.
#[derive(Debug)]
pub(super) struct IndexLookup {
    /// The index as the table's schema had it when the scan was planned (the primary key as
    /// [`IndexSpec::primary`]).
    pub index: IndexSpec,
    pub wanted: Wanted,
    /// Whether the session planning the scan used indexes (for `EXPLAIN`; each run reads
    /// its own session's setting).
    pub planned_with_index: bool,
}

impl fmt::Display for IndexLookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "index={}", self.index.name)?;
        match &self.wanted {
            Wanted::Values(values) => write!(f, " values={}", values.len())?,
            Wanted::Ranges(ranges) => write!(f, " range={}", shown_ranges(ranges))?,
        }
        if !self.planned_with_index {
            write!(f, " (scanned: cdcfusion.indexes = off)")?;
        }
        Ok(())
    }
}

impl IndexLookup {
    /// The index of `snap`'s codec this lookup goes through, if the version still has it.
    fn through(&self, snap: &TableSnapshot) -> Option<Through> {
        let codec = snap.codec();
        if codec
            .primary_index()
            .is_some_and(|p| *p.spec() == self.index)
        {
            return Some(Through::Primary);
        }
        let i = codec
            .indexes()
            .iter()
            .position(|i| *i.spec() == self.index)?;
        Some(Through::Secondary(i))
    }

    /// The rows of `snap` this lookup selects, its parameters bound under `config`: from the
    /// index, or when `use_index` is off or the version's schema no longer has the index, by
    /// a scan that compares the same bytes. The same rows either way.
    pub fn rows(
        &self,
        snap: &TableSnapshot,
        config: &SessionConfig,
        use_index: bool,
    ) -> Result<Vec<RecordBatch>> {
        let through = self.through(snap).filter(|_| use_index);
        let first = self.index.columns[0];
        let data_type = snap.schema().arrow.field(first).data_type().clone();
        Ok(match self.wanted.bind(config, &data_type)? {
            BoundWanted::Nothing => {
                vec![RecordBatch::new_empty(Arc::clone(&snap.schema().arrow))]
            }
            BoundWanted::Values(values) => match through {
                Some(Through::Secondary(i)) => {
                    let firsts = snap.codec().indexes()[i].encode_first(&values)?;
                    vec![snap.lookup_index(i, &firsts)?]
                }
                _ => snap.scan_where(first, &values)?,
            },
            BoundWanted::Range(range) => match through {
                Some(through) => vec![snap.lookup_range(through, range.bounds())?],
                None => snap.scan_range(first, range.bounds())?,
            },
        })
    }
}

/// What a lookup or condition wants, its values bound for one run.
enum BoundWanted {
    /// It selects nothing (only NULLs, or values the column cannot hold).
    Nothing,
    /// One of these values, of the column's type.
    Values(ArrayRef),
    Range(BoundRange),
}

/// A range bound for one run: NULL and the bounds in the column's row format.
struct BoundRange {
    /// NULL, then the low bound if any, then the high bound if any.
    bytes: Rows,
    /// Whether each bound is inclusive.
    low: Option<bool>,
    high: Option<bool>,
}

impl BoundRange {
    fn new(range: &Range, data_type: &DataType) -> Result<Self> {
        let converter = RowConverter::new(vec![SortField::new(data_type.clone())])?;
        let mut values = vec![new_null_array(data_type, 1)];
        for (v, _) in range.low.iter().chain(&range.high) {
            values.push(v.to_array()?);
        }
        let values = arrow::compute::concat(&values.iter().map(AsRef::as_ref).collect::<Vec<_>>())?;
        Ok(Self {
            bytes: converter.convert_columns(&[values])?,
            low: range.low.as_ref().map(|(_, inclusive)| *inclusive),
            high: range.high.as_ref().map(|(_, inclusive)| *inclusive),
        })
    }

    fn bounds(&self) -> Bounds<'_> {
        let high_at = 1 + usize::from(self.low.is_some());
        Bounds {
            low: self
                .low
                .map(|inclusive| (self.bytes.row(1).data(), inclusive)),
            high: self
                .high
                .map(|inclusive| (self.bytes.row(high_at).data(), inclusive)),
            null: self.bytes.row(0).data(),
        }
    }
}

impl Wanted {
    /// Its values for a run under `config`, as values of `data_type`.
    fn bind(&self, config: &SessionConfig, data_type: &DataType) -> Result<BoundWanted> {
        match self {
            Wanted::Values(wanted) => {
                // A value its column's type cannot hold exactly selects nothing.
                let mut values = Vec::with_capacity(wanted.len());
                for v in wanted {
                    values.extend(exact_cast(&v.value(config)?, data_type));
                }
                if values.is_empty() {
                    return Ok(BoundWanted::Nothing);
                }
                Ok(BoundWanted::Values(ScalarValue::iter_to_array(values)?))
            }
            Wanted::Ranges(ranges) => {
                let mut together: Option<Range> = None;
                for range in ranges {
                    let Some(range) = range.bind(config, data_type)? else {
                        return Ok(BoundWanted::Nothing);
                    };
                    together = Some(match together {
                        None => range,
                        Some(t) => t.and(range),
                    });
                }
                match together {
                    Some(range) => Ok(BoundWanted::Range(BoundRange::new(&range, data_type)?)),
                    None => Ok(BoundWanted::Nothing),
                }
            }
        }
    }
}

/// A pushed filter on one column that the scan applies to the rows its lookup read: each
/// pushed filter is one a lookup could answer, but a scan makes only one lookup (by the key,
/// an index's values or a range), and the optimizer may push filters in several passes, each
/// marked exact when it was offered alone.
#[derive(Debug)]
pub(super) struct Condition {
    pub column: usize,
    pub name: String,
    pub wanted: Wanted,
}

impl Condition {
    /// The rows of `batches` (of the table's schema) that hold, its parameters bound under
    /// `config`.
    pub fn apply(
        &self,
        batches: Vec<RecordBatch>,
        config: &SessionConfig,
    ) -> Result<Vec<RecordBatch>> {
        let Some(first) = batches.first() else {
            return Ok(batches);
        };
        let data_type = first.schema().field(self.column).data_type().clone();
        Ok(match self.wanted.bind(config, &data_type)? {
            BoundWanted::Nothing => Vec::new(),
            BoundWanted::Values(values) => filter_where(batches, self.column, &values)?,
            BoundWanted::Range(range) => filter_range(batches, self.column, range.bounds())?,
        })
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.wanted {
            Wanted::Values(values) => {
                let shown: Vec<String> = values.iter().map(|v| v.to_string()).collect();
                write!(f, "{} in ({})", self.name, shown.join(", "))
            }
            Wanted::Ranges(ranges) => write!(f, "{} in {}", self.name, shown_ranges(ranges)),
        }
    }
}
