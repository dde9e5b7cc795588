//! What a user's role lets it run.
//!
//! An `admin` runs everything. A `reader` runs what only reads: queries, `EXPLAIN` of them,
//! `SHOW`, cursors over queries, `SUBSCRIBE`, `COPY ... TO STDOUT` and session statements. Anything that
//! changes the catalog, a source, a sink, a user or a file (`CREATE`/`ALTER`/`DROP SOURCE`,
//! `SINK` and `USER`, `GRANT`, `CREATE EXTERNAL TABLE`, `COPY ... TO 'file'`, `INSERT`,
//! `CREATE TABLE`/`VIEW`, ...) needs `admin`. The role is the user's when the statement runs
//! (`users`), so a `REVOKE admin` holds from a session's next statement on.
//!
//! # Invariant
//! The decision is made on the parsed statement's type, before it is planned or run, and a
//! statement type not known to only read needs `admin`: a new kind of statement is refused to
//! readers until it is listed here.

use datafusion::sql::parser::Statement as DFStatement;
use pgwire::error::PgWireResult;
use sqlparser::ast::{SetExpr, Statement};

use crate::config::Role;
use crate::frontend::protocol::error::user_error;
use crate::frontend::session::statement::{ours_answer, Answer, Parsed};
use crate::sqlstate::SqlState;

/// Refuses `parsed` with `42501` when `role` may not run it; `user` names who asked.
pub fn authorize(role: Role, user: &str, parsed: &Parsed) -> PgWireResult<()> {
    if role == Role::Admin {
        return Ok(());
    }
    let refused = match parsed {
        // Subscribing and reading a cursor only read.
        Parsed::Session(_) | Parsed::Copy(_) | Parsed::Subscribe(_) | Parsed::Cursor(_) => None,
        Parsed::Users(statement) => Some(statement.tag().to_string()),
        Parsed::Declare(declare) => {
            (!query_reads_only(&declare.query.body)).then(|| "DECLARE of this cursor".into())
        }
        Parsed::Ours(statement) => match ours_answer(statement) {
            (_, true) => None,
            (tag, false) => Some(tag.to_string()),
        },
        Parsed::DataFusion { statement, answer } => {
            (!reads_only(statement)).then(|| match answer {
                Answer::Done(tag) => tag.clone(),
                Answer::Inserted => "INSERT".into(),
                Answer::Copied => "COPY to a file".into(),
                Answer::Rows => "this statement".into(),
            })
        }
    };
    match refused {
        None => Ok(()),
        Some(what) => Err(user_error(
            SqlState::INSUFFICIENT_PRIVILEGE,
            format!(
                "permission denied: {what} needs the admin role, and user {user:?} has the {} role \
                 (an admin gives it with GRANT admin TO {user:?}, or with role = \"admin\" in the \
                 settings' [[users]] to a user defined there)",
                role.name()
            ),
        )),
    }
}

/// Whether `statement` only reads (see the module docs).
fn reads_only(statement: &DFStatement) -> bool {
    match statement {
        DFStatement::Statement(s) => sql_reads_only(s),
        DFStatement::Explain(explain) => reads_only(&explain.statement),
        DFStatement::Reset(_) => true,
        DFStatement::CreateExternalTable(_) | DFStatement::CopyTo(_) => false,
    }
}

fn sql_reads_only(statement: &Statement) -> bool {
    match statement {
        Statement::Query(query) => query_reads_only(&query.body),
        // `EXPLAIN ANALYZE` runs its statement.
        Statement::Explain { statement, .. } => sql_reads_only(statement),
        Statement::Prepare { statement, .. } => sql_reads_only(statement),
        Statement::Declare { stmts } => stmts.iter().all(|d| {
            d.for_query
                .as_ref()
                .is_none_or(|q| query_reads_only(&q.body))
        }),
        Statement::Set(_)
        | Statement::Reset(_)
        | Statement::Use(_)
        | Statement::Fetch { .. }
        | Statement::Close { .. }
        | Statement::Execute { .. }
        | Statement::Deallocate { .. }
        | Statement::Discard { .. }
        | Statement::StartTransaction { .. }
        | Statement::Commit { .. }
        | Statement::Rollback { .. }
        | Statement::Savepoint { .. }
        | Statement::ReleaseSavepoint { .. }
        | Statement::ExplainTable { .. }
        | Statement::ShowFunctions { .. }
        | Statement::ShowVariable { .. }
        | Statement::ShowStatus { .. }
        | Statement::ShowVariables { .. }
        | Statement::ShowCreate { .. }
        | Statement::ShowColumns { .. }
        | Statement::ShowCatalogs { .. }
        | Statement::ShowDatabases { .. }
        | Statement::ShowSchemas { .. }
        | Statement::ShowCharset(_)
        | Statement::ShowObjects(_)
        | Statement::ShowTables { .. }
        | Statement::ShowViews { .. }
        | Statement::ShowCollation { .. } => true,
        _ => false,
    }
}

fn query_reads_only(body: &SetExpr) -> bool {
    match body {
        // `SELECT ... INTO t` creates a table.
        SetExpr::Select(select) => select.into.is_none(),
        SetExpr::Query(query) => query_reads_only(&query.body),
        SetExpr::SetOperation { left, right, .. } => {
            query_reads_only(left) && query_reads_only(right)
        }
        SetExpr::Values(_) | SetExpr::Table(_) => true,
        SetExpr::Insert(_) | SetExpr::Update(_) | SetExpr::Delete(_) | SetExpr::Merge(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::DFParser;
    use sqlparser::dialect::PostgreSqlDialect;

    fn reads(sql: &str) -> bool {
        let mut statements = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {}).unwrap();
        reads_only(&statements.pop_front().unwrap())
    }

    #[test]
    fn readers_read() {
        for sql in [
            "SELECT 1",
            "WITH a AS (SELECT 1) SELECT * FROM a UNION ALL SELECT 2",
            "EXPLAIN SELECT 1",
            "EXPLAIN ANALYZE SELECT 1",
            "SHOW TABLES",
            "SHOW search_path",
            "VALUES (1)",
            "SET timezone = 'UTC'",
            "DECLARE c CURSOR FOR SELECT 1",
            "FETCH 5 FROM c",
            "PREPARE p AS SELECT 1",
        ] {
            assert!(reads(sql), "{sql}");
        }
    }

    #[test]
    fn everything_else_needs_an_admin() {
        for sql in [
            "INSERT INTO t VALUES (1)",
            "CREATE TABLE t (a INT)",
            "CREATE VIEW v AS SELECT 1",
            "DROP TABLE t",
            "SELECT 1 INTO t",
            "EXPLAIN ANALYZE INSERT INTO t VALUES (1)",
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/tmp/x.csv'",
            "COPY (SELECT 1) TO '/tmp/x.csv'",
            "PREPARE p AS INSERT INTO t VALUES (1)",
            "DELETE FROM t",
        ] {
            assert!(!reads(sql), "{sql}");
        }
    }
}
