//! Primary-key point lookups answered from the key index, without planning.
//!
//! A statement of exactly this shape: `SELECT *` or a list of plain columns (each with an
//! optional alias) `FROM` one current table of a source (`db.table` in the session's
//! database, or `source.db.table`, with an optional alias) `WHERE` every primary-key column
//! is equal to a literal or a parameter (`$n`), the conditions joined by `AND`, is answered
//! by one lookup in the key index of the table's current version
//! ([`lookup_key`](crate::provider::current::lookup_key)): at most one row, no DataFusion
//! planning. Integer keys take integer literals and string keys string literals; any other
//! statement, literal or parameter type, and every name that does not resolve exactly as
//! DataFusion would resolve it, goes the planned way (which reports its errors).
//!
//! # Invariant
//! A lookup answers exactly what the planned statement answers: the same columns (names,
//! Arrow types and field metadata, so the same PostgreSQL types), the same rows, and the
//! same refusal or stale-read warning for a table whose capture stopped
//! ([`Health::admit`](crate::provider::health::Health::admit)). It reads the source's
//! current published version, as the planned statement pins it. `SET
//! cdcfusion.point_lookups = off` plans every statement (the tests compare both ways).

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{ParamValues, ScalarValue};
use pgwire::error::PgWireResult;
use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, Ident, ObjectNamePart, Query, Select, SelectFlavor,
    SelectItem, SetExpr, Statement, TableFactor, TableWithJoins, UnaryOperator, Value,
    WildcardAdditionalOptions,
};

use crate::engine::{Engine, STATUS_SCHEMA};
use crate::frontend::protocol::error::datafusion_error;
use crate::locks::Locked;
use crate::provider::crossing::through_datafusion;
use crate::provider::current::lookup_key;
use crate::provider::CHANGELOG_SUFFIX;

/// Schemas that shadow a source's databases of the same name.
const SHADOWING: &[&str] = &["pg_catalog", "information_schema", STATUS_SCHEMA];

/// What a lookup found: its rows (at most one) and the stale-read warnings to send first.
#[derive(Debug)]
pub struct Found {
    pub rows: RecordBatch,
    pub warnings: Vec<String>,
    /// The table read, as `(database, table)`, when it is in the session's database (its
    /// columns' origins are then that table's; see `origins`). Each field of `rows` is the
    /// table's column `columns[i]` (0-based).
    pub table: Option<(String, String)>,
    pub columns: Vec<usize>,
}

/// A column as written: its qualifier (if any), its name, and (in a projection) its alias.
type Written<'a> = (Option<&'a Ident>, &'a Ident, Option<&'a Ident>);

/// A statement of the lookup's shape (see the module docs), its names not yet resolved.
#[derive(Debug)]
struct Shape<'a> {
    /// `[source,] db, table`.
    table: Vec<&'a Ident>,
    alias: Option<&'a Ident>,
    /// `None` is `*`; otherwise each column (its qualifier, if any) with its alias.
    columns: Option<Vec<Written<'a>>>,
    /// `column = value`, one per condition (the column with its qualifier, if any).
    conditions: Vec<(Option<&'a Ident>, &'a Ident, &'a Expr)>,
}

/// An identifier as DataFusion reads it: folded to lower case unless quoted.
fn normalized(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    }
}

/// Answers `statement` by a key lookup if it has the lookup's shape and its table is a
/// current table of a source; `Ok(None)` sends it the planned way. `catalog` is the
/// session's database, `params` the bound parameters of an extended-protocol statement.
pub fn answer(
    engine: &Engine,
    catalog: &str,
    statement: &Statement,
    params: Option<&ParamValues>,
    stale_reads: bool,
) -> PgWireResult<Option<Found>> {
    let Some(shape) = shape(statement) else {
        return Ok(None);
    };
    let (source_name, db, table) = match shape.table.as_slice() {
        [db, table] => (catalog.to_string(), normalized(db), normalized(table)),
        [source, db, table] => (normalized(source), normalized(db), normalized(table)),
        _ => return Ok(None),
    };
    if table.ends_with(CHANGELOG_SUFFIX)
        || (source_name == catalog && SHADOWING.contains(&db.as_str()))
        || db == STATUS_SCHEMA
    {
        return Ok(None);
    }
    let Ok(source) = engine.source(&source_name) else {
        return Ok(None);
    };
    // The version the planned statement would pin, and the table as the catalog finds it.
    let version = source.published.load_full();
    let Some(index) = source
        .status
        .locked()
        .tables
        .iter()
        .position(|t| t.id.db == db && t.id.table == table)
    else {
        return Ok(None);
    };
    let Some(snap) = version.tables.get(index) else {
        return Ok(None);
    };
    let schema = Arc::clone(snap.schema());
    if schema.id.db != db || schema.id.table != table || schema.primary_key.is_empty() {
        return Ok(None);
    }
    // Qualified columns name the table by its alias, or by its name when it has none.
    let qualifier = shape.alias.map_or_else(|| table.clone(), normalized);
    let column = |qualified: Option<&Ident>, name: &Ident| -> Option<usize> {
        if qualified.is_some_and(|q| normalized(q) != qualifier) {
            return None;
        }
        let name = normalized(name);
        schema.columns.iter().position(|c| c.name == name)
    };
    // One value per key column, each column bound exactly once.
    let mut key: Vec<Option<ScalarValue>> = vec![None; schema.primary_key.len()];
    for (qualified, name, value) in &shape.conditions {
        let Some(i) = column(*qualified, name) else {
            return Ok(None);
        };
        let Some(slot) = schema.primary_key.iter().position(|k| *k == i) else {
            return Ok(None);
        };
        let data_type = schema.arrow.field(i).data_type();
        let Some(value) = key_value(value, data_type, params) else {
            return Ok(None);
        };
        if key[slot].replace(value).is_some() {
            return Ok(None);
        }
    }
    let Some(key) = key.into_iter().collect::<Option<Vec<_>>>() else {
        return Ok(None);
    };
    let projection: Vec<(usize, Option<String>)> = match &shape.columns {
        None => (0..schema.columns.len()).map(|i| (i, None)).collect(),
        Some(columns) => {
            let mut out = Vec::with_capacity(columns.len());
            for (qualified, name, alias) in columns {
                let Some(i) = column(*qualified, name) else {
                    return Ok(None);
                };
                out.push((i, alias.map(normalized)));
            }
            out
        }
    };
    // DataFusion refuses two result columns of one name; let it say so.
    let names: Vec<&str> = projection
        .iter()
        .map(|(i, alias)| alias.as_deref().unwrap_or(schema.arrow.field(*i).name()))
        .collect();
    if (1..names.len()).any(|i| names[..i].contains(&names[i])) {
        return Ok(None);
    }
    let shown = schema.id.to_string();
    let stop = version.stopped.get(&index);
    let warnings = match source
        .health
        .admit(stale_reads, &source.name, &schema.id, &shown, stop)
    {
        Ok(warning) => warning.into_iter().collect(),
        Err(refused) => return Err(datafusion_error(through_datafusion(*refused))),
    };
    let found = lookup_key(snap, &key).map_err(datafusion_error)?;
    let fields: Vec<Field> = projection
        .iter()
        .map(|(i, alias)| {
            let field = schema.arrow.field(*i).clone();
            match alias {
                Some(alias) => field.with_name(alias),
                None => field,
            }
        })
        .collect();
    let columns = projection
        .iter()
        .map(|(i, _)| Arc::clone(found.column(*i)))
        .collect();
    let rows = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| datafusion_error(e.into()))?;
    Ok(Some(Found {
        rows,
        warnings,
        table: (source_name == catalog).then_some((db, table)),
        columns: projection.iter().map(|(i, _)| *i).collect(),
    }))
}

/// The value a condition binds its key column of type `data_type` to: an integer literal
/// for an integer key, a string literal for a string key, or a bound parameter of the
/// column's own type. `None` for anything else (planned instead).
fn key_value(
    value: &Expr,
    data_type: &DataType,
    params: Option<&ParamValues>,
) -> Option<ScalarValue> {
    let integer = data_type.is_integer();
    let string = matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    );
    match value {
        Expr::Value(v) => match &v.value {
            // DataFusion reads an integer literal as Int64.
            Value::Number(n, false) if integer => n.parse().ok().map(int64),
            Value::SingleQuotedString(s) if string => Some(ScalarValue::Utf8(Some(s.clone()))),
            Value::Placeholder(id) => {
                let ParamValues::List(list) = params? else {
                    return None;
                };
                let index: usize = id.strip_prefix('$')?.parse().ok()?;
                let bound = list.get(index.checked_sub(1)?)?;
                (bound.value.data_type() == *data_type).then(|| bound.value.clone())
            }
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } if integer => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::Number(n, false) => {
                    n.parse::<i64>().ok().and_then(i64::checked_neg).map(int64)
                }
                _ => None,
            },
            _ => None,
        },
        Expr::Nested(inner) => key_value(inner, data_type, params),
        _ => None,
    }
}

fn int64(value: i64) -> ScalarValue {
    ScalarValue::Int64(Some(value))
}

/// The statement as a lookup's [`Shape`], if it has that shape: nothing in it beyond a
/// projection of columns, one table and equality conditions joined by `AND`.
fn shape(statement: &Statement) -> Option<Shape<'_>> {
    let Statement::Query(query) = statement else {
        return None;
    };
    let Query {
        with: None,
        body,
        order_by: None,
        limit_clause: None,
        fetch: None,
        locks,
        for_clause: None,
        settings: None,
        format_clause: None,
        pipe_operators,
    } = query.as_ref()
    else {
        return None;
    };
    if !locks.is_empty() || !pipe_operators.is_empty() {
        return None;
    }
    let SetExpr::Select(select) = body.as_ref() else {
        return None;
    };
    let Select {
        select_token: _,
        optimizer_hints,
        distinct: None,
        select_modifiers: None,
        top: None,
        top_before_distinct: _,
        projection,
        exclude: None,
        into: None,
        from,
        lateral_views,
        prewhere: None,
        selection: Some(selection),
        connect_by,
        group_by: GroupByExpr::Expressions(group_by, group_modifiers),
        cluster_by,
        distribute_by,
        sort_by,
        having: None,
        named_window,
        qualify: None,
        window_before_qualify: _,
        value_table_mode: None,
        flavor: SelectFlavor::Standard,
    } = select.as_ref()
    else {
        return None;
    };
    let nothing_else = optimizer_hints.is_empty()
        && lateral_views.is_empty()
        && connect_by.is_empty()
        && group_by.is_empty()
        && group_modifiers.is_empty()
        && cluster_by.is_empty()
        && distribute_by.is_empty()
        && sort_by.is_empty()
        && named_window.is_empty();
    if !nothing_else {
        return None;
    }
    let [TableWithJoins { relation, joins }] = from.as_slice() else {
        return None;
    };
    if !joins.is_empty() {
        return None;
    }
    let TableFactor::Table {
        name,
        alias,
        args: None,
        with_hints,
        version: None,
        with_ordinality: false,
        partitions,
        json_path: None,
        sample: None,
        index_hints,
    } = relation
    else {
        return None;
    };
    if !with_hints.is_empty() || !partitions.is_empty() || !index_hints.is_empty() {
        return None;
    }
    let alias = match alias {
        None => None,
        Some(alias) if alias.columns.is_empty() && alias.at.is_none() => Some(&alias.name),
        Some(_) => return None,
    };
    let table = name
        .0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(ident) => Some(ident),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    let columns = match projection.as_slice() {
        [SelectItem::Wildcard(options)] if plain_wildcard(options) => None,
        items => Some(
            items
                .iter()
                .map(|item| match item {
                    SelectItem::UnnamedExpr(expr) => column_of(expr).map(|(q, c)| (q, c, None)),
                    SelectItem::ExprWithAlias { expr, alias } => {
                        column_of(expr).map(|(q, c)| (q, c, Some(alias)))
                    }
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?,
        ),
    };
    let mut conditions = Vec::new();
    equalities(selection, &mut conditions)?;
    Some(Shape {
        table,
        alias,
        columns,
        conditions,
    })
}

/// `*` without `EXCLUDE`, `EXCEPT`, `REPLACE`, `RENAME`, `ILIKE` or an alias.
fn plain_wildcard(options: &WildcardAdditionalOptions) -> bool {
    options.opt_ilike.is_none()
        && options.opt_exclude.is_none()
        && options.opt_except.is_none()
        && options.opt_replace.is_none()
        && options.opt_rename.is_none()
        && options.opt_alias.is_none()
}

/// A plain column reference: `column` or `qualifier.column`.
fn column_of(expr: &Expr) -> Option<(Option<&Ident>, &Ident)> {
    match expr {
        Expr::Identifier(column) => Some((None, column)),
        Expr::CompoundIdentifier(parts) => match parts.as_slice() {
            [qualifier, column] => Some((Some(qualifier), column)),
            _ => None,
        },
        _ => None,
    }
}

/// The conditions of `column = value` terms joined by `AND` (either side may be the column).
fn equalities<'a>(
    expr: &'a Expr,
    out: &mut Vec<(Option<&'a Ident>, &'a Ident, &'a Expr)>,
) -> Option<()> {
    match expr {
        Expr::Nested(inner) => equalities(inner, out),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            equalities(left, out)?;
            equalities(right, out)
        }
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } => {
            let (qualifier, column, value) = match (column_of(left), column_of(right)) {
                (Some((q, c)), None) => (q, c, right.as_ref()),
                (None, Some((q, c))) => (q, c, left.as_ref()),
                _ => return None,
            };
            out.push((qualifier, column, value));
            Some(())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn parsed(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .pop()
            .unwrap()
    }

    #[test]
    fn only_plain_key_selections_have_the_lookup_shape() {
        for sql in [
            "SELECT * FROM db.t WHERE id = 1",
            "SELECT a, t.b AS x FROM db.t WHERE t.id = $1",
            "SELECT * FROM src.db.t AS u WHERE (u.a = 'x') AND 2 = b",
        ] {
            assert!(shape(&parsed(sql)).is_some(), "{sql}");
        }
        for sql in [
            "SELECT 1",
            "SELECT * FROM db.t",
            "SELECT * FROM db.t WHERE id = 1 ORDER BY a",
            "SELECT * FROM db.t WHERE id = 1 LIMIT 1",
            "SELECT DISTINCT * FROM db.t WHERE id = 1",
            "SELECT a + 1 FROM db.t WHERE id = 1",
            "SELECT count(*) FROM db.t WHERE id = 1",
            "SELECT * FROM db.t WHERE id = 1 OR id = 2",
            "SELECT * FROM db.t WHERE id > 1",
            "SELECT * FROM db.t WHERE id IN (1, 2)",
            "SELECT * FROM db.t, db.u WHERE id = 1",
            "SELECT * FROM db.t JOIN db.u ON true WHERE id = 1",
            "SELECT * FROM db.t WHERE id = 1 GROUP BY a",
            "WITH x AS (SELECT 1) SELECT * FROM db.t WHERE id = 1",
            "SELECT * FROM db.t WHERE id = 1 UNION SELECT * FROM db.t WHERE id = 2",
            "SELECT * FROM db.t WHERE id = 1 FOR UPDATE",
            "SELECT *, a FROM db.t WHERE id = 1",
            "SELECT * FROM db.t AS x (p, q) WHERE id = 1",
        ] {
            assert!(shape(&parsed(sql)).is_none(), "{sql}");
        }
    }

    #[test]
    fn key_values_follow_the_key_type() {
        let value = |sql: &str, t: DataType| {
            let Statement::Query(q) = parsed(&format!("SELECT {sql}")) else {
                unreachable!()
            };
            let SetExpr::Select(s) = *q.body else {
                unreachable!()
            };
            let SelectItem::UnnamedExpr(e) = &s.projection[0] else {
                unreachable!()
            };
            key_value(e, &t, None)
        };
        assert_eq!(
            value("42", DataType::Int32),
            Some(ScalarValue::Int64(Some(42)))
        );
        assert_eq!(
            value("-42", DataType::UInt64),
            Some(ScalarValue::Int64(Some(-42)))
        );
        assert_eq!(
            value("(7)", DataType::Int64),
            Some(ScalarValue::Int64(Some(7)))
        );
        assert_eq!(
            value("'a'", DataType::Utf8),
            Some(ScalarValue::Utf8(Some("a".into())))
        );
        // Other pairs are planned: DataFusion's coercions decide them.
        assert_eq!(value("'42'", DataType::Int64), None);
        assert_eq!(value("42", DataType::Utf8), None);
        assert_eq!(value("4.2", DataType::Int64), None);
        assert_eq!(value("18446744073709551615", DataType::UInt64), None);
        assert_eq!(value("NULL", DataType::Int64), None);
        assert_eq!(value("$1", DataType::Int64), None);
        let params = ParamValues::List(vec![ScalarValue::Int64(Some(5)).into()]);
        let Statement::Query(q) = parsed("SELECT $1") else {
            unreachable!()
        };
        let SetExpr::Select(s) = *q.body else {
            unreachable!()
        };
        let SelectItem::UnnamedExpr(e) = &s.projection[0] else {
            unreachable!()
        };
        assert_eq!(
            key_value(e, &DataType::Int64, Some(&params)),
            Some(ScalarValue::Int64(Some(5)))
        );
        // A parameter of another type than the key's is planned.
        assert_eq!(key_value(e, &DataType::Int32, Some(&params)), None);
    }
}
