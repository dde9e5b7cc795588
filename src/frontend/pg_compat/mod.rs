//! PostgreSQL as clients expect to find it: databases and `pg_catalog` (`catalog`, `keys`,
//! `attributes`, `indexes`, `pg_settings`, `pg_functions`, `numeric_avg`), and the
//! rewrites of the catalog queries psql, drivers and ORMs send (`rules`: an ordered list of rule
//! objects, with `reflect`, `composite` and `subqueries`; `catalog_ast` is what they share).

pub mod attributes;
pub mod catalog;
pub mod catalog_ast;
pub mod composite;
pub mod indexes;
pub mod keys;
pub mod numeric_avg;
pub mod pg_functions;
pub mod pg_settings;
pub mod reflect;
pub mod rules;
pub mod subqueries;

/// An expression parsed as a client's PostgreSQL text, for the rewrites' tests.
#[cfg(test)]
fn pg_expr(sql: &str) -> sqlparser::ast::Expr {
    sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
        .try_with_sql(sql)
        .unwrap()
        .parse_expr()
        .unwrap()
}
