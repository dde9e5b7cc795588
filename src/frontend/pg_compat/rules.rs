//! What psql's meta-commands need of a statement's syntax tree beyond `datafusion-pg-catalog`'s
//! rewrites: PostgreSQL's `ARRAY(subquery)`, its names of output columns, catalog columns this
//! catalog lacks, and catalog subqueries DataFusion cannot decorrelate as they are (see
//! [`rewrite`]; the functions psql calls are `pg_functions`').
//!
//! The expression rewrites are rule objects in one ordered list ([`RULES`]), tried in turn on
//! every expression until one applies, as datafusion-postgres chains its query hooks: a new
//! rewrite is one [`Rule`] and one entry in the list.
//!
//! # Invariant
//! A rewrite changes only what DataFusion could not plan, or would name differently than
//! PostgreSQL, into what gives PostgreSQL's answer over cdcfusion's catalog; a statement over
//! user tables alone keeps its meaning (at most its output columns are renamed).

use std::ops::ControlFlow;

use sqlparser::ast::{
    visit_expressions_mut, BinaryOperator, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArguments, Ident, OrderByExpr, OrderByKind, Query, SelectItem, SetExpr, Statement,
    TableFactor, Value,
};

use crate::frontend::pg_compat::catalog_ast::{call, ident_is, is_catalog_relation, wrap_in_max};

/// Rewrites what DataFusion cannot plan into what it can, after datafusion-pg-catalog's rules.
///
/// * `ARRAY(SELECT e FROM ... ORDER BY o)` becomes the scalar subquery
///   `(SELECT array_agg(e ORDER BY o) FROM ...)`, which DataFusion decorrelates when it refers
///   to the outer query. Unlike PostgreSQL, an empty result gives NULL rather than `{}`. One
///   shape stays out of reach: a subquery calling a function over the outer query's columns in
///   its `FROM` (psql's `unnest(tc.reloptions)`, a lateral call). Over the catalog alone it
///   becomes a NULL `text[]` (the catalog has no options to list); over user tables it is left
///   for the planner to refuse by name.
/// * Catalog columns PostgreSQL has and this catalog lacks or keeps as text (options and access
///   privileges, which cdcfusion does not have) read as a NULL `text[]`, the type psql expects.
/// * A scalar subquery over the catalog alone that is not aggregated (psql's
///   `(SELECT c.relkind = 'c' FROM pg_class c WHERE c.oid = t.typrelid)`) is wrapped in `max`:
///   DataFusion only decorrelates aggregated subqueries, and over a unique oid the two agree.
/// * `pg_get_function_result(p.oid)` over `pg_proc` reads the row's return type (`\df`).
/// * What drivers and ORMs send to reflect a database (see `reflect`), and composite values
///   (see `composite`).
pub fn rewrite(mut statement: Statement) -> Statement {
    name_output_columns(&mut statement);
    let context = Context {
        aliases: catalog_aliases(&statement),
    };
    let _ = visit_expressions_mut(&mut statement, |expr| {
        // The first rule that applies to an expression is the only one.
        if let Some(rule) = RULES.iter().find(|rule| rule.apply(expr, &context)) {
            tracing::trace!(rule = rule.name(), "rewrote a catalog expression");
        }
        ControlFlow::<()>::Continue(())
    });
    statement
}

/// What every rule may consult of the statement it rewrites.
pub(in crate::frontend) struct Context {
    /// The aliases (or names) of the catalog tables it reads, with the table each names.
    aliases: Vec<(String, String)>,
}

/// One rewrite of an expression of a statement.
pub(in crate::frontend) trait Rule: Sync {
    /// What it rewrites, for a reader of [`RULES`].
    fn name(&self) -> &'static str;
    /// Rewrites `expr` in place if the rule is for it; `true` when it was, so that no later
    /// rule is tried on the same expression.
    fn apply(&self, expr: &mut Expr, context: &Context) -> bool;
}

/// A rule that replaces an expression by a new one.
struct Replace {
    name: &'static str,
    with: fn(&Expr, &Context) -> Option<Expr>,
}

impl Rule for Replace {
    fn name(&self) -> &'static str {
        self.name
    }

    fn apply(&self, expr: &mut Expr, context: &Context) -> bool {
        match (self.with)(expr, context) {
            Some(new) => {
                *expr = new;
                true
            }
            None => false,
        }
    }
}

/// `ARRAY(subquery)`: a NULL `text[]` for a lateral call over the catalog, else an ordered
/// `array_agg` subquery (left alone when it cannot be folded).
struct ArraySubquery;

impl Rule for ArraySubquery {
    fn name(&self) -> &'static str {
        "ARRAY(subquery) as array_agg"
    }

    fn apply(&self, expr: &mut Expr, _: &Context) -> bool {
        let Some(query) = array_subquery(expr) else {
            return false;
        };
        if is_lateral_catalog_call(query) {
            *expr = null_text_array();
        } else if let Some(q) = aggregated(query) {
            *expr = Expr::Subquery(Box::new(q));
        }
        true
    }
}

/// A scalar subquery over the catalog alone, wrapped in `max` (see `wrap_in_max`).
struct CatalogScalarSubquery;

impl Rule for CatalogScalarSubquery {
    fn name(&self) -> &'static str {
        "catalog scalar subquery in max"
    }

    fn apply(&self, expr: &mut Expr, _: &Context) -> bool {
        let Expr::Subquery(query) = expr else {
            return false;
        };
        wrap_in_max(query);
        true
    }
}

/// The rules in the order they are tried: the narrowest shapes first, the catch-all of
/// scalar subqueries last. A new rewrite is one entry here.
static RULES: [&dyn Rule; 7] = [
    &ArraySubquery,
    &Replace {
        name: "pg_get_function_result over pg_proc",
        with: |expr, context| function_result(expr, &context.aliases),
    },
    &Replace {
        name: "composite values",
        with: |expr, _| crate::frontend::pg_compat::composite::rewrite(expr),
    },
    &Replace {
        name: "driver reflection",
        with: |expr, _| crate::frontend::pg_compat::reflect::rewrite(expr),
    },
    &Replace {
        name: "regproc compared by name",
        with: |expr, _| regproc_by_name(expr),
    },
    &Replace {
        name: "missing catalog column as NULL text[]",
        with: |expr, context| is_missing_column(expr, &context.aliases).then(null_text_array),
    },
    &CatalogScalarSubquery,
];

/// Names a query's unnamed output columns as PostgreSQL does, where DataFusion would name them
/// after the whole expression: a function call after the function (`count(*)` is `count`), a
/// `CASE` `case`, a cast after what it casts, anything else computed `?column?`. Clients read
/// columns by these names (`row["count"]`). Only the outermost `SELECT` list is named, and a
/// name another output column already has is left alone (DataFusion needs them unique).
fn name_output_columns(statement: &mut Statement) {
    let Statement::Query(query) = statement else {
        return;
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let taken: Vec<String> = select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
            SelectItem::UnnamedExpr(Expr::Identifier(i)) => Some(i.value.clone()),
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => {
                parts.last().map(|i| i.value.clone())
            }
            _ => None,
        })
        .collect();
    let mut named: Vec<String> = Vec::new();
    for item in &mut select.projection {
        let SelectItem::UnnamedExpr(expr) = item else {
            continue;
        };
        let Some(name) = postgres_column_name(expr) else {
            continue;
        };
        if taken.contains(&name) || named.contains(&name) {
            continue;
        }
        named.push(name.clone());
        *item = SelectItem::ExprWithAlias {
            expr: expr.clone(),
            alias: Ident::with_quote('"', name),
        };
    }
}

/// PostgreSQL's name for an unnamed output column computed by `expr`; `None` for a column
/// reference, which keeps its own name.
fn postgres_column_name(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => None,
        Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(|i| i.value.to_ascii_lowercase()),
        Expr::Nested(inner) => postgres_column_name(inner),
        Expr::Cast { expr, .. } => match expr.as_ref() {
            Expr::Identifier(i) => Some(i.value.clone()),
            Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.clone()),
            other => postgres_column_name(other),
        },
        Expr::Case { .. } => Some("case".into()),
        Expr::Exists { .. } => Some("exists".into()),
        Expr::Subquery(_) => None,
        _ => Some("?column?".into()),
    }
}

/// `pg_type`'s columns of type `regproc`, which this catalog keeps as function names.
const REGPROC_COLUMNS: [&str; 7] = [
    "typinput",
    "typoutput",
    "typreceive",
    "typsend",
    "typmodin",
    "typmodout",
    "typanalyze",
];

/// `column = (SELECT oid FROM pg_catalog.pg_proc WHERE proname = 'schema.name')`, which
/// datafusion-pg-catalog makes of `column = 'schema.name'::regproc`, as `column = 'name'`
/// when `column` is a `regproc` column (kept as a name): comparing the name with an oid would
/// cast every name to an integer and fail.
fn regproc_by_name(expr: &Expr) -> Option<Expr> {
    let Expr::BinaryOp { left, op, right } = expr else {
        return None;
    };
    if !matches!(op, BinaryOperator::Eq | BinaryOperator::NotEq) {
        return None;
    }
    let column = match left.as_ref() {
        Expr::Identifier(i) => i,
        Expr::CompoundIdentifier(parts) => parts.last()?,
        _ => return None,
    };
    if !REGPROC_COLUMNS.contains(&column.value.to_ascii_lowercase().as_str()) {
        return None;
    }
    let name = proc_lookup_name(right)?;
    let bare = name.rsplit('.').next().unwrap_or(&name).to_string();
    Some(Expr::BinaryOp {
        left: left.clone(),
        op: op.clone(),
        right: Box::new(Expr::Value(Value::SingleQuotedString(bare).into())),
    })
}

/// The `'name'` of `(SELECT oid FROM pg_catalog.pg_proc WHERE proname = 'name')`.
fn proc_lookup_name(expr: &Expr) -> Option<String> {
    let Expr::Subquery(query) = expr else {
        return None;
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let [from] = select.from.as_slice() else {
        return None;
    };
    let TableFactor::Table { name, .. } = &from.relation else {
        return None;
    };
    let table = name.0.last()?.as_ident()?;
    if !table.value.eq_ignore_ascii_case("pg_proc") {
        return None;
    }
    let Some(Expr::BinaryOp { left, op, right }) = &select.selection else {
        return None;
    };
    if !matches!(op, BinaryOperator::Eq) || !ident_is(identifier(left), "proname") {
        return None;
    }
    match right.as_ref() {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// The last part of a plain or qualified column name.
fn identifier(expr: &Expr) -> Option<&Ident> {
    match expr {
        Expr::Identifier(i) => Some(i),
        Expr::CompoundIdentifier(parts) => parts.last(),
        _ => None,
    }
}

/// `pg_get_function_result(p.oid)` over a `pg_proc` alias `p`, as the return type's name
/// (`SETOF` before it for set-returning functions), from the row's own columns.
fn function_result(expr: &Expr, aliases: &[(String, String)]) -> Option<Expr> {
    let Expr::Function(Function {
        name,
        args: FunctionArguments::List(list),
        ..
    }) = expr
    else {
        return None;
    };
    if !ident_is(
        name.0.last().and_then(|p| p.as_ident()),
        "pg_get_function_result",
    ) {
        return None;
    }
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::CompoundIdentifier(parts)))] =
        list.args.as_slice()
    else {
        return None;
    };
    let [alias, column] = parts.as_slice() else {
        return None;
    };
    let is_proc = aliases
        .iter()
        .any(|(a, t)| a.eq_ignore_ascii_case(&alias.value) && t == "pg_proc");
    if !is_proc || !column.value.eq_ignore_ascii_case("oid") {
        return None;
    }
    let column = |c: &str| Expr::CompoundIdentifier(vec![alias.clone(), Ident::new(c)]);
    let sql = format!(
        "CASE WHEN {set} THEN 'SETOF ' || format_type({ret}, NULL) ELSE format_type({ret}, NULL) END",
        set = column("proretset"),
        ret = column("prorettype"),
    );
    sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_expr())
        .ok()
}

/// Columns of PostgreSQL's catalog that this one lacks or keeps as text, by table.
const MISSING_COLUMNS: [(&str, &str); 4] = [
    ("pg_class", "reloptions"),
    ("pg_class", "relacl"),
    ("pg_namespace", "nspacl"),
    ("pg_proc", "proacl"),
];

fn null_text_array() -> Expr {
    Expr::Cast {
        kind: sqlparser::ast::CastKind::Cast,
        expr: Box::new(Expr::Value(Value::Null.into())),
        data_type: sqlparser::ast::DataType::Array(
            sqlparser::ast::ArrayElemTypeDef::SquareBracket(
                Box::new(sqlparser::ast::DataType::Text),
                None,
            ),
        ),
        array: false,
        format: None,
    }
}

/// The aliases (or names) of the catalog tables `statement` reads, with the table each names.
fn catalog_aliases(statement: &Statement) -> Vec<(String, String)> {
    let mut aliases = Vec::new();
    let _ = sqlparser::ast::Visit::visit(statement, &mut AliasCollector(&mut aliases));
    aliases
}

struct AliasCollector<'a>(&'a mut Vec<(String, String)>);

impl sqlparser::ast::Visitor for AliasCollector<'_> {
    type Break = ();
    fn pre_visit_table_factor(
        &mut self,
        factor: &sqlparser::ast::TableFactor,
    ) -> ControlFlow<Self::Break> {
        if let sqlparser::ast::TableFactor::Table { name, alias, .. } = factor {
            if let Some(table) = name.0.last().and_then(|p| p.as_ident()) {
                if is_catalog_relation(name) {
                    let table = table.value.to_ascii_lowercase();
                    let alias = alias
                        .as_ref()
                        .map_or(table.clone(), |a| a.name.value.to_ascii_lowercase());
                    self.0.push((alias, table));
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// Whether `expr` is `alias.column` for a catalog column this catalog lacks.
fn is_missing_column(expr: &Expr, aliases: &[(String, String)]) -> bool {
    let Expr::CompoundIdentifier(parts) = expr else {
        return false;
    };
    // `alias.column`, or `pg_catalog.table.column`.
    let ([alias, column] | [_, alias, column]) = parts.as_slice() else {
        return false;
    };
    let (alias, column) = (
        alias.value.to_ascii_lowercase(),
        column.value.to_ascii_lowercase(),
    );
    aliases.iter().any(|(a, table)| {
        *a == alias && MISSING_COLUMNS.contains(&(table.as_str(), column.as_str()))
    })
}

/// The query of an `ARRAY(subquery)` expression.
fn array_subquery(expr: &Expr) -> Option<&Query> {
    match expr {
        Expr::Function(Function {
            name,
            args: FunctionArguments::Subquery(query),
            ..
        }) if name.0.len() == 1 && ident_is(name.0[0].as_ident(), "array") => Some(query),
        _ => None,
    }
}

/// `query` with its single output column folded into `array_agg`, keeping its order.
fn aggregated(query: &Query) -> Option<Query> {
    let mut query = query.clone();
    let order_by = query.order_by.take();
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let [item] = select.projection.as_mut_slice() else {
        return None;
    };
    let value = match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e.clone(),
        _ => return None,
    };
    let mut clauses = Vec::new();
    if let Some(order_by) = order_by {
        let OrderByKind::Expressions(exprs) = order_by.kind else {
            return None;
        };
        for e in exprs {
            // `ORDER BY 1` names the output column, which is the aggregated value here.
            let positional =
                matches!(&e.expr, Expr::Value(v) if matches!(v.value, Value::Number(..)));
            clauses.push(OrderByExpr {
                expr: if positional { value.clone() } else { e.expr },
                ..e
            });
        }
    }
    *item = SelectItem::UnnamedExpr(call("array_agg", value, clauses));
    Some(query)
}

/// Whether `query` calls a table function in its `FROM` (a lateral call, as psql's
/// `unnest(tc.reloptions) x`) and otherwise reads only the catalog.
fn is_lateral_catalog_call(query: &Query) -> bool {
    use sqlparser::ast::TableFactor;
    let SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    let mut calls_function = false;
    let mut catalog_only = true;
    for table in &select.from {
        let factors =
            std::iter::once(&table.relation).chain(table.joins.iter().map(|j| &j.relation));
        for factor in factors {
            match factor {
                TableFactor::Table { name, args, .. } => {
                    let function = args.is_some();
                    calls_function |= function;
                    let unnest = name.0.len() == 1 && ident_is(name.0[0].as_ident(), "unnest");
                    catalog_only &= is_catalog_relation(name) || (function && unnest);
                }
                TableFactor::Function { .. } | TableFactor::UNNEST { .. } => calls_function = true,
                _ => catalog_only = false,
            }
        }
    }
    calls_function && catalog_only
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> String {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        rewrite(statements.remove(0)).to_string()
    }

    #[test]
    fn a_regproc_column_compares_by_function_name() {
        // What datafusion-pg-catalog makes of pgjdbc's `typinput='pg_catalog.array_in'::regproc`.
        assert_eq!(
            rewritten("SELECT typinput = (SELECT oid FROM pg_catalog.pg_proc WHERE proname = 'pg_catalog.array_in') AS is_array FROM pg_catalog.pg_type"),
            "SELECT typinput = 'array_in' AS is_array FROM pg_catalog.pg_type"
        );
        // Another column, or another lookup, is left alone.
        let other = "SELECT typrelid = (SELECT oid FROM pg_catalog.pg_proc WHERE proname = 'x') FROM pg_catalog.pg_type";
        assert!(rewritten(other).contains("pg_proc"), "{}", rewritten(other));
    }

    #[test]
    fn array_subquery_becomes_an_ordered_aggregate() {
        assert_eq!(
            rewritten("SELECT array(SELECT b.rolname FROM pg_roles b WHERE b.oid = r.oid ORDER BY 1) FROM pg_roles r"),
            "SELECT (SELECT array_agg(b.rolname ORDER BY b.rolname) FROM pg_roles b WHERE b.oid = r.oid) AS \"array\" FROM pg_roles r"
        );
        assert_eq!(
            rewritten("SELECT ARRAY(SELECT id FROM shop.orders) AS ids"),
            "SELECT (SELECT array_agg(id) FROM shop.orders) AS ids"
        );
    }

    #[test]
    fn a_lateral_call_over_the_catalog_is_null_and_one_over_user_tables_is_kept() {
        assert_eq!(
            rewritten("SELECT array_to_string(c.reloptions || array(select 'toast.' || x from pg_catalog.unnest(tc.reloptions) x), ', ') FROM pg_catalog.pg_class c"),
            "SELECT array_to_string(CAST(NULL AS TEXT[]) || CAST(NULL AS TEXT[]), ', ') AS \"array_to_string\" FROM pg_catalog.pg_class c"
        );
        let kept = rewritten("SELECT array(SELECT x FROM unnest(o.tags) x JOIN shop.items i ON true) FROM shop.orders o");
        assert!(kept.contains("array_agg"), "{kept}");
    }

    #[test]
    fn catalog_scalar_subqueries_are_aggregated_and_user_ones_are_not() {
        assert_eq!(
            rewritten("SELECT 1 AS one FROM pg_catalog.pg_type t WHERE (t.typrelid = 0 OR (SELECT c.relkind = 'c' FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid))"),
            "SELECT 1 AS one FROM pg_catalog.pg_type t WHERE (t.typrelid = 0 OR (SELECT max(c.relkind = 'c') FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid))"
        );
        let user =
            "SELECT (SELECT i.qty FROM shop.items AS i WHERE i.id = o.id) FROM shop.orders AS o";
        assert_eq!(rewritten(user), user);
        let ordered = "SELECT (SELECT c.relname FROM pg_catalog.pg_class AS c ORDER BY 1 LIMIT 1)";
        assert_eq!(rewritten(ordered), ordered);
    }

    #[test]
    fn missing_catalog_columns_read_as_null_arrays_only_on_catalog_tables() {
        assert_eq!(
            rewritten("SELECT n.nspname, array_to_string(n.nspacl, E'\\n') FROM pg_catalog.pg_namespace n"),
            "SELECT n.nspname, array_to_string(CAST(NULL AS TEXT[]), E'\\n') AS \"array_to_string\" FROM pg_catalog.pg_namespace n"
        );
        let user = "SELECT n.nspacl FROM shop.acls AS n";
        assert_eq!(rewritten(user), user);
    }

    #[test]
    fn a_function_result_is_read_from_its_pg_proc_row() {
        assert_eq!(
            rewritten("SELECT pg_get_function_result(p.oid) FROM pg_catalog.pg_proc p"),
            "SELECT CASE WHEN p.proretset THEN 'SETOF ' || format_type(p.prorettype, NULL) ELSE format_type(p.prorettype, NULL) END AS \"pg_get_function_result\" FROM pg_catalog.pg_proc p"
        );
        let other = "SELECT pg_get_function_result(x.oid) AS r FROM shop.orders x";
        assert_eq!(rewritten(other), other);
    }

    #[test]
    fn output_columns_are_named_as_postgresql_names_them() {
        assert_eq!(
            rewritten("SELECT count(*), 1 + 1, id, o.status, max(x) AS m, pg_catalog.version(), CASE WHEN true THEN 1 END, amount::TEXT FROM shop.orders o"),
            "SELECT count(*) AS \"count\", 1 + 1 AS \"?column?\", id, o.status, max(x) AS m, pg_catalog.version() AS \"version\", CASE WHEN true THEN 1 END AS \"case\", amount::TEXT AS \"amount\" FROM shop.orders o"
        );
        // A name that would repeat stays DataFusion's (output names must be unique there).
        assert_eq!(
            rewritten("SELECT count(*), count(id), 1, 2 FROM t"),
            "SELECT count(*) AS \"count\", count(id), 1 AS \"?column?\", 2 FROM t"
        );
        assert_eq!(
            rewritten("SELECT sum(x) AS count, count(*) FROM t"),
            "SELECT sum(x) AS count, count(*) FROM t"
        );
    }

    #[test]
    fn other_functions_are_untouched() {
        assert_eq!(
            rewritten("SELECT array_length(a, 1) AS n FROM t"),
            "SELECT array_length(a, 1) AS n FROM t"
        );
    }
}
