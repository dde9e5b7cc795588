//! What the rewrites of catalog queries (`rules`, `reflect`) share about the syntax tree:
//! which relations are the catalog's, and folding a catalog subquery into an aggregate, the
//! one shape of scalar subquery DataFusion decorrelates.
//!
//! # Invariant
//! [`wrap_in_max`] only touches a subquery that reads the catalog alone, has one output
//! column and neither order, limit nor grouping: over the unique oids such subqueries look up,
//! `max` of the column is the column's one value.

use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident,
    ObjectName, OrderByExpr, Query, SelectItem, SetExpr,
};

/// Whether `name` is a catalog relation (`pg_catalog.x`, `information_schema.x`, `pg_x`).
pub fn is_catalog_relation(name: &ObjectName) -> bool {
    let parts: Vec<Option<&Ident>> = name.0.iter().map(|p| p.as_ident()).collect();
    match parts.as_slice() {
        [schema, _] => ident_is(*schema, "pg_catalog") || ident_is(*schema, "information_schema"),
        [table] => table.is_some_and(|t| t.value.to_ascii_lowercase().starts_with("pg_")),
        _ => false,
    }
}

/// Aggregate functions, to tell an aggregated subquery from one that is not.
const AGGREGATES: [&str; 9] = [
    "count",
    "max",
    "min",
    "sum",
    "avg",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
];

/// Wraps the output of a catalog-only, unaggregated, unordered scalar subquery in `max`;
/// whether the query is (now) an aggregate of the catalog.
pub fn wrap_in_max(query: &mut Query) -> bool {
    if query.order_by.is_some() || query.limit_clause.is_some() || query.fetch.is_some() {
        return false;
    }
    let SetExpr::Select(select) = query.body.as_mut() else {
        return false;
    };
    let grouped =
        !matches!(&select.group_by, sqlparser::ast::GroupByExpr::Expressions(e, _) if e.is_empty());
    let catalog_only = !select.from.is_empty()
        && select.from.iter().all(|t| {
            std::iter::once(&t.relation)
                .chain(t.joins.iter().map(|j| &j.relation))
                .all(|f| matches!(f, sqlparser::ast::TableFactor::Table { name, args: None, .. } if is_catalog_relation(name)))
        });
    if grouped || !catalog_only || select.having.is_some() {
        return false;
    }
    let [item] = select.projection.as_mut_slice() else {
        return false;
    };
    let value = match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
        _ => return false,
    };
    if is_aggregate_call(value) {
        return true;
    }
    *value = call("max", value.clone(), Vec::new());
    true
}

/// Whether `expr` is a call of an aggregate function.
pub fn is_aggregate_call(expr: &Expr) -> bool {
    let Expr::Function(f) = expr else {
        return false;
    };
    let name = f.name.to_string().to_ascii_lowercase();
    AGGREGATES.iter().any(|a| name.ends_with(a))
}

/// `name(arg [ORDER BY ...])`.
pub fn call(name: &str, arg: Expr, order_by: Vec<OrderByExpr>) -> Expr {
    let clauses = if order_by.is_empty() {
        vec![]
    } else {
        vec![sqlparser::ast::FunctionArgumentClause::OrderBy(order_by)]
    };
    function(name, vec![arg], clauses)
}

/// `name(args...)`.
pub fn call_with(name: &str, args: Vec<Expr>) -> Expr {
    function(name, args, Vec::new())
}

fn function(
    name: &str,
    args: Vec<Expr>,
    clauses: Vec<sqlparser::ast::FunctionArgumentClause>,
) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses,
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// Whether `ident` is `word`, in any case.
pub fn ident_is(ident: Option<&Ident>, word: &str) -> bool {
    ident.is_some_and(|i| i.value.eq_ignore_ascii_case(word))
}
