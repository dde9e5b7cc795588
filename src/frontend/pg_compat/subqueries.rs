//! Catalog subqueries as SQLAlchemy's inspector writes them, which DataFusion cannot plan as
//! written: a correlated subquery in a `CASE` branch whose `WHERE` filters on the outer row
//! alone, and a lookup in `pg_sequence` keyed by a function of the outer row.
//!
//! DataFusion decorrelates a scalar subquery when it is aggregated and correlated by
//! comparisons of its own columns with the outer query's; it does not pull a filter on the
//! outer row alone (`WHERE pg_attribute.atthasdef AND ...`) out of one.
//!
//! # Invariant
//! A rewrite gives PostgreSQL's value over cdcfusion's catalog: filters on the outer row move
//! from the subquery into the `CASE` condition, which is false exactly when the subquery would
//! have had no row; a `pg_sequence` lookup is NULL because cdcfusion has no sequences.

use std::ops::ControlFlow;

use sqlparser::ast::{BinaryOperator, Expr, SetExpr, Value};

use crate::frontend::pg_compat::catalog_ast::{
    is_aggregate_call, is_catalog_relation, wrap_in_max,
};

/// Rewrites one expression, if it is one this module handles.
pub fn rewrite(expr: &Expr) -> Option<Expr> {
    sequence_subquery(expr).or_else(|| case_subquery(expr))
}

/// A scalar subquery reading `pg_sequence` alone, not aggregated, is NULL: cdcfusion has no
/// sequences, so it has no row (SQLAlchemy's identity options of a column). DataFusion could
/// not plan it as it is: it compares a sequence with a function of the outer row's columns.
fn sequence_subquery(expr: &Expr) -> Option<Expr> {
    let Expr::Subquery(query) = expr else {
        return None;
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let only_sequences = !select.from.is_empty()
        && select.from.iter().all(|t| {
            t.joins.is_empty()
                && matches!(&t.relation, sqlparser::ast::TableFactor::Table { name, .. }
                    if is_catalog_relation(name)
                        && name.0.last().and_then(|p| p.as_ident()).is_some_and(|i| i.value.eq_ignore_ascii_case("pg_sequence")))
        });
    let aggregated = select.projection.iter().any(|item| match item {
        sqlparser::ast::SelectItem::UnnamedExpr(e)
        | sqlparser::ast::SelectItem::ExprWithAlias { expr: e, .. } => is_aggregate_call(e),
        _ => false,
    });
    let grouped =
        !matches!(&select.group_by, sqlparser::ast::GroupByExpr::Expressions(e, _) if e.is_empty());
    (only_sequences && !aggregated && !grouped).then(|| Expr::value(Value::Null))
}

/// `CASE WHEN c THEN (SELECT e FROM ... WHERE o AND w) [ELSE NULL] END` over the catalog,
/// where the conjuncts `o` name only the outer query's relations, becomes
/// `CASE WHEN (c) AND o THEN (SELECT max(e) FROM ... WHERE w) END`: the same value (no row
/// when `o` is false), in a form DataFusion decorrelates. It pulls only comparisons of inner
/// with outer columns out of a subquery, not a filter on the outer row alone (SQLAlchemy's
/// `WHERE pg_attribute.atthasdef AND ...`), and runs subqueries in `CASE` branches only when
/// they are aggregated.
fn case_subquery(expr: &Expr) -> Option<Expr> {
    let Expr::Case {
        case_token,
        end_token,
        operand: None,
        conditions,
        else_result,
    } = expr
    else {
        return None;
    };
    let [when] = conditions.as_slice() else {
        return None;
    };
    let null_else = match else_result.as_deref() {
        None => true,
        Some(Expr::Value(v)) => v.value == Value::Null,
        Some(_) => false,
    };
    let Expr::Subquery(query) = &when.result else {
        return None;
    };
    if !null_else {
        return None;
    }
    let mut query = query.clone();
    if !wrap_in_max(&mut query) {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let inner = relation_names(select);
    let mut outer = Vec::new();
    let mut rest = Vec::new();
    for conjunct in select.selection.take().map(conjuncts).unwrap_or_default() {
        if names_only_outer(&conjunct, &inner) {
            outer.push(conjunct);
        } else {
            rest.push(conjunct);
        }
    }
    select.selection = and_all(rest);
    let condition = and_all(
        std::iter::once(Expr::Nested(Box::new(when.condition.clone())))
            .chain(outer)
            .collect(),
    )?;
    Some(Expr::Case {
        case_token: case_token.clone(),
        end_token: end_token.clone(),
        operand: None,
        conditions: vec![sqlparser::ast::CaseWhen {
            condition,
            result: Expr::Subquery(query),
        }],
        else_result: None,
    })
}

/// The names a subquery's `FROM` gives its relations (alias, else the table's own name), in
/// lower case.
fn relation_names(select: &sqlparser::ast::Select) -> Vec<String> {
    select
        .from
        .iter()
        .flat_map(|t| std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)))
        .filter_map(|factor| match factor {
            sqlparser::ast::TableFactor::Table { name, alias, .. } => match alias {
                Some(alias) => Some(alias.name.value.to_lowercase()),
                None => name
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .map(|i| i.value.to_lowercase()),
            },
            _ => None,
        })
        .collect()
}

/// `a AND b AND c` as `[a, b, c]` (parentheses around the whole kept out).
fn conjuncts(expr: Expr) -> Vec<Expr> {
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            let mut all = conjuncts(*left);
            all.extend(conjuncts(*right));
            all
        }
        Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                Expr::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                }
            ) =>
        {
            conjuncts(*inner)
        }
        other => vec![other],
    }
}

/// The conjunction of `all`; `None` when empty.
fn and_all(all: Vec<Expr>) -> Option<Expr> {
    all.into_iter().reduce(|left, right| Expr::BinaryOp {
        left: Box::new(left),
        op: BinaryOperator::And,
        right: Box::new(right),
    })
}

/// Whether every column `expr` names is qualified by a relation not in `inner` (and it names
/// at least one, and holds no subquery): a filter on the outer row alone.
fn names_only_outer(expr: &Expr, inner: &[String]) -> bool {
    let mut outer_columns = 0;
    let found_inner = sqlparser::ast::visit_expressions(expr, |e| {
        match e {
            Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                let table = parts[parts.len() - 2].value.to_lowercase();
                if inner.contains(&table) {
                    return ControlFlow::Break(());
                }
                outer_columns += 1;
            }
            Expr::Identifier(_)
            | Expr::Subquery(_)
            | Expr::Exists { .. }
            | Expr::InSubquery { .. } => {
                return ControlFlow::Break(());
            }
            _ => {}
        }
        ControlFlow::Continue(())
    });
    found_inner.is_continue() && outer_columns > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        rewrite(&crate::frontend::pg_compat::pg_expr(sql)).map_or(String::new(), |e| e.to_string())
    }

    #[test]
    fn a_catalog_subquery_in_a_case_branch_becomes_a_filtered_aggregate() {
        assert_eq!(
            rewritten("CASE WHEN a.atthasdef THEN (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_catalog.pg_attrdef d WHERE a.atthasdef AND d.adnum = a.attnum) ELSE NULL END"),
            "CASE WHEN (a.atthasdef) AND a.atthasdef THEN (SELECT max(pg_get_expr(d.adbin, d.adrelid)) FROM pg_catalog.pg_attrdef d WHERE d.adnum = a.attnum) END"
        );
        // SQLAlchemy names columns by schema, table and column.
        assert_eq!(
            rewritten("CASE WHEN (pg_catalog.pg_attribute.attidentity != '') THEN (SELECT s.seqstart FROM pg_catalog.pg_sequence AS s WHERE pg_catalog.pg_attribute.attidentity != '' AND s.seqrelid = pg_catalog.pg_attribute.attrelid) ELSE NULL END"),
            "CASE WHEN ((pg_catalog.pg_attribute.attidentity <> '')) AND pg_catalog.pg_attribute.attidentity <> '' THEN (SELECT max(s.seqstart) FROM pg_catalog.pg_sequence AS s WHERE s.seqrelid = pg_catalog.pg_attribute.attrelid) END"
        );
        let user = "CASE WHEN o.x THEN (SELECT i.v FROM shop.items i WHERE i.id = o.id) END";
        assert_eq!(rewritten(user), "");
    }

    #[test]
    fn a_sequence_lookup_is_null_as_there_are_no_sequences() {
        assert_eq!(
            rewritten("(SELECT json_build_object('start', s.seqstart) FROM pg_catalog.pg_sequence s WHERE s.seqrelid = CAST(pg_get_serial_sequence(a.attrelid::regclass::text, a.attname)::regclass AS oid))"),
            "NULL"
        );
        assert_eq!(
            rewritten("(SELECT count(*) FROM pg_catalog.pg_sequence)"),
            ""
        );
        assert_eq!(
            rewritten("(SELECT c.relname FROM pg_catalog.pg_class c)"),
            ""
        );
    }
}
