//! A client's statement, parsed once into one typed [`Parsed`] statement.
//!
//! # The chain
//! A query's text is split into statements on sqlparser's tokens (`crate::sql`), and each
//! statement, when its turn comes, is offered in this order to:
//! 1. cdcfusion's grammar (`CREATE SOURCE`, `SHOW SOURCES`, ...), which claims a statement by
//!    its first words and parses only what it claims ([`Parsed::Ours`]), including
//!    `SUBSCRIBE` in its plain, `COPY` and cursor forms, `FETCH` and `CLOSE`
//!    ([`Parsed::Subscribe`], [`Parsed::Cursor`]), which PostgreSQL's grammar does not read
//!    (or, for `FETCH`, not in every spelling PostgreSQL accepts), and the statements that
//!    manage users (`CREATE USER`, `GRANT admin TO ...`; [`Parsed::Users`]), which it reads
//!    with sqlparser's role grammar;
//! 2. our `AS OF` after a table name (`sql::as_of`), which no other grammar reads, written as
//!    the `as_of` table function, for
//! 3. PostgreSQL's grammar with `datafusion-pg-catalog`'s compatibility rewrites (its
//!    replacements of whole client queries, then its rules) and ours (`pg_compat::rules`): the one parse
//!    of every other statement. Its syntax tree is then taken, by type, as
//!    * a session statement (`SET`, `SHOW`, `BEGIN`, ...; [`Parsed::Session`]),
//!    * a `COPY ... TO STDOUT`, whose query DataFusion plans ([`Parsed::Copy`]),
//!    * a `DECLARE ... CURSOR FOR query` ([`Parsed::Declare`]),
//!    * anything else, handed to DataFusion as this syntax tree ([`Parsed::DataFusion`]).
//!
//! Statements only DataFusion's grammar has are read by DataFusion's parser: `CREATE EXTERNAL
//! TABLE` and `EXPLAIN` of one, which PostgreSQL's grammar refuses (they are tried there
//! first, as nothing tells them apart before), and `COPY ... TO 'file'`, which PostgreSQL's
//! grammar reads to tell it from `COPY ... TO STDOUT`: DataFusion plans a file copy only from
//! the statement its own parser builds, which PostgreSQL's syntax tree of `COPY` cannot be
//! turned into faithfully (its options differ). These are the only statements read twice.
//! The compatibility rewrite needs the text, not tokens or a tree: its replacements of whole
//! client queries match on its own tokenization of the text (its tree rules alone would leave
//! psql's and pgcli's replaced queries unplannable).
//!
//! # Invariant
//! Every statement is measured before anything walks its tree (`engine::limits`), and a
//! statement's type alone decides who runs it and what it answers ([`Answer`]); after the
//! split, its text is read only by the grammars of the chain (tokens, never raw words).

use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::error::DataFusionError;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use pgwire::error::{PgWireError, PgWireResult};
use sqlparser::ast::Statement;

use crate::engine::{limits, parser_error, TooComplex};
use crate::frontend::pg_compat::rules;
use crate::frontend::protocol::conn::Shared;
use crate::frontend::protocol::error::{engine_error, user_error};
use crate::frontend::session::copy::{self, CopyOut};
use crate::frontend::session::cursors::DeclareQuery;
use crate::frontend::session::planner::Kept;
use crate::frontend::session::session_statement::SessionStatement;
use crate::locks::Locked;
use crate::sql::{
    parse_cdc_statement, parse_cursor_command, parse_subscribe, parse_user_statement,
    rewrite_as_of, split_statements, CdcStatement, CursorCommand, SqlError, SubscribeStatement,
    UserStatement,
};
use crate::sqlstate::HasSqlState;
use crate::sqlstate::SqlState;

/// One statement of a client, typed (see the module docs).
#[derive(Debug, Clone)]
pub enum Parsed {
    /// cdcfusion's own, run by the engine.
    Ours(CdcStatement),
    Session(SessionStatement),
    Copy(CopyOut),
    /// `SUBSCRIBE` in any of its forms.
    Subscribe(SubscribeStatement),
    /// `DECLARE name CURSOR FOR query`.
    Declare(DeclareQuery),
    /// `FETCH` or `CLOSE`.
    Cursor(CursorCommand),
    /// `CREATE USER`, `GRANT`, ...: run by the front end, which holds the users.
    Users(UserStatement),
    /// Planned by DataFusion from this tree, answered as `answer` says.
    DataFusion {
        statement: DFStatement,
        answer: Answer,
    },
}

/// What a statement DataFusion runs answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Its rows.
    Rows,
    /// `INSERT 0 n`, `n` the rows DataFusion reports.
    Inserted,
    /// `COPY n` of a `COPY ... TO 'file'`.
    Copied,
    /// Its command tag alone.
    Done(String),
}

/// A statement with what planning it at `Parse` told (the extended protocol's statement),
/// or a simple-protocol statement kept by its text.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub parsed: Parsed,
    /// Result columns of a statement with rows, once planned.
    pub schema: Option<SchemaRef>,
    /// Inferred types of `$1`, `$2`, ..., once planned.
    pub params: Vec<Option<DataType>>,
    /// The logical plan of its last planning, when it may run again (see `planner`).
    pub kept: Arc<Mutex<Option<Arc<Kept>>>>,
}

impl Prepared {
    /// A statement about to run without a `Parse` (the simple protocol).
    pub fn unplanned(parsed: Parsed) -> Self {
        Self {
            parsed,
            schema: None,
            params: Vec::new(),
            kept: Arc::default(),
        }
    }

    /// The plan kept from its last planning, if any.
    pub fn kept(&self) -> Option<Arc<Kept>> {
        self.kept.locked().clone()
    }

    /// Keeps `kept` (or forgets the plan kept before) for the next run.
    pub fn keep(&self, kept: Option<Kept>) {
        *self.kept.locked() = kept.map(Arc::new);
    }
}

/// The command tag of one of our statements, and whether it answers with rows.
pub fn ours_answer(statement: &CdcStatement) -> (&'static str, bool) {
    match statement {
        CdcStatement::CreateSource(_) => ("CREATE SOURCE", false),
        CdcStatement::DropSource(_) => ("DROP SOURCE", false),
        CdcStatement::ShowSources => ("SHOW", true),
        CdcStatement::AlterSource(_) => ("ALTER SOURCE", false),
        CdcStatement::CreateSink(_) => ("CREATE SINK", false),
        CdcStatement::ExplainSink(_) => ("EXPLAIN", true),
        CdcStatement::DropSink(_) => ("DROP SINK", false),
        CdcStatement::ShowSinks => ("SHOW", true),
        CdcStatement::AlterSink(_) => ("ALTER SINK", false),
    }
}

/// The statements of a query's text, in order; a text longer than `max_size` bytes (0: no
/// limit) is refused before anything reads it, so no statement occupies a core for longer than
/// its size allows.
pub fn split(query: &str, max_size: u64) -> PgWireResult<Vec<String>> {
    if max_size > 0 && query.len() as u64 > max_size {
        return Err(user_error(
            SqlState::PROGRAM_LIMIT_EXCEEDED,
            format!(
                "the statement is {} bytes, more than max_statement_size ({max_size} bytes): \
                 send a shorter one (a table or a join instead of a long IN list or literal), \
                 or raise max_statement_size in the settings",
                query.len()
            ),
        ));
    }
    split_statements(query).map_err(|e| user_error(e.sqlstate(), e.to_string()))
}

/// The error of a query carrying several statements where one is allowed.
pub fn several_statements() -> PgWireError {
    user_error(
        SqlState::SYNTAX_ERROR,
        "cannot insert multiple commands into a prepared statement",
    )
}

/// A statement refused for its depth.
fn too_complex(error: TooComplex) -> PgWireError {
    user_error(TooComplex::SQLSTATE, error.to_string())
}

/// Parses one statement's text (see the module docs); `Ok(None)` for an empty statement.
pub fn parse(shared: &Shared, text: &str) -> PgWireResult<Option<Parsed>> {
    if let Some(statement) =
        parse_cdc_statement(text).map_err(|e| user_error(e.sqlstate(), e.to_string()))?
    {
        return Ok(Some(Parsed::Ours(statement)));
    }
    let ours = |e: SqlError| user_error(e.sqlstate(), e.to_string());
    if let Some(subscribe) = parse_subscribe(text).map_err(ours)? {
        return Ok(Some(Parsed::Subscribe(subscribe)));
    }
    if let Some(command) = parse_cursor_command(text).map_err(ours)? {
        return Ok(Some(Parsed::Cursor(command)));
    }
    if let Some(statement) = parse_user_statement(text).map_err(ours)? {
        return Ok(Some(Parsed::Users(statement)));
    }
    let rewritten = rewrite_as_of(text);
    let text = rewritten.as_deref().unwrap_or(text);
    limits::check_nesting(text).map_err(too_complex)?;
    let mut statements = match shared.compat.parse(text) {
        Ok(statements) => statements,
        Err(e) if limits::is_nesting_limit(&e) => {
            return Err(too_complex(TooComplex::Nesting {
                limit: limits::PARSER_NESTING_LIMIT,
            }))
        }
        Err(e) => {
            return match datafusion_only(text) {
                Some(parsed) => Ok(Some(parsed)),
                None => Err(user_error(SqlState::SYNTAX_ERROR, e.to_string())),
            }
        }
    };
    if statements.len() > 1 {
        return Err(several_statements());
    }
    let Some(statement) = statements.pop() else {
        return Ok(None);
    };
    // Measured before anything walks the tree (the engine measures what it plans again).
    limits::check_statement(&statement, limits::MAX_DEPTH).map_err(too_complex)?;
    let statement = rules::rewrite(statement);
    if let Some(file) = copy::file_target(&statement) {
        shared
            .engine
            .check_location("COPY ... TO", file)
            .map_err(|e| engine_error(e.into()))?;
        return Ok(Some(Parsed::DataFusion {
            statement: in_datafusion_grammar(text)?,
            answer: Answer::Copied,
        }));
    }
    if let Some(session) = SessionStatement::of(&statement) {
        return Ok(Some(Parsed::Session(session)));
    }
    if let Some(copy) = CopyOut::of(&statement)? {
        return Ok(Some(Parsed::Copy(copy)));
    }
    if let Some(declare) = DeclareQuery::of(&statement) {
        return Ok(Some(Parsed::Declare(declare)));
    }
    let answer = answer_of(&statement);
    Ok(Some(Parsed::DataFusion {
        statement: DFStatement::Statement(Box::new(statement)),
        answer,
    }))
}

/// `text` read by DataFusion's parser, as the engine would read it.
fn in_datafusion_grammar(text: &str) -> PgWireResult<DFStatement> {
    let parse_error = |e: DataFusionError| engine_error(parser_error(e));
    let mut statements = DFParser::parse_sql(text).map_err(parse_error)?;
    if statements.len() > 1 {
        return Err(engine_error(
            DataFusionError::NotImplemented(
                "The context currently only supports a single SQL statement".into(),
            )
            .into(),
        ));
    }
    statements.pop_front().ok_or_else(|| {
        engine_error(
            DataFusionError::Plan("No SQL statements were provided in the query string".into())
                .into(),
        )
    })
}

/// A statement only DataFusion's grammar knows (its spellings of `COPY ... TO` and `CREATE
/// EXTERNAL TABLE`, or an `EXPLAIN` of one), read by its parser.
fn datafusion_only(text: &str) -> Option<Parsed> {
    let statement = DFParser::parse_sql(text).ok()?.pop_front()?;
    let answer = match &statement {
        DFStatement::CopyTo(_) => Answer::Copied,
        DFStatement::CreateExternalTable(_) => Answer::Done("CREATE EXTERNAL TABLE".into()),
        DFStatement::Explain(explain) => match *explain.statement {
            DFStatement::CopyTo(_) | DFStatement::CreateExternalTable(_) => Answer::Rows,
            _ => return None,
        },
        _ => return None,
    };
    Some(Parsed::DataFusion { statement, answer })
}

/// What `statement` answers with, by its type.
fn answer_of(statement: &Statement) -> Answer {
    match statement {
        Statement::Query(_)
        | Statement::Explain { .. }
        | Statement::ExplainTable { .. }
        | Statement::ShowTables { .. }
        | Statement::ShowColumns { .. }
        | Statement::ShowFunctions { .. }
        | Statement::ShowCreate { .. } => Answer::Rows,
        Statement::Insert(_) => Answer::Inserted,
        other => Answer::Done(command_tag(other)),
    }
}

/// PostgreSQL's command tag of a statement without rows, for those DataFusion runs.
fn command_tag(statement: &Statement) -> String {
    let tag = match statement {
        Statement::Update(_) => "UPDATE",
        Statement::Delete(_) => "DELETE",
        Statement::Merge(_) => "MERGE",
        Statement::Truncate(_) => "TRUNCATE",
        Statement::CreateTable(_) => "CREATE TABLE",
        Statement::CreateView(_) => "CREATE VIEW",
        Statement::CreateSchema { .. } => "CREATE SCHEMA",
        Statement::CreateDatabase { .. } => "CREATE DATABASE",
        Statement::CreateFunction(_) => "CREATE FUNCTION",
        Statement::CreateIndex(_) => "CREATE INDEX",
        Statement::DropFunction(_) => "DROP FUNCTION",
        Statement::Drop { object_type, .. } => return format!("DROP {object_type}"),
        Statement::Prepare { .. } => "PREPARE",
        Statement::Execute { .. } => "EXECUTE",
        // DataFusion refuses every other statement when it plans it, so no client sees this
        // tag; it is the statement's first keyword all the same.
        other => return leading_keyword(other),
    };
    tag.to_string()
}

/// The first word of `statement` as sqlparser writes it.
fn leading_keyword(statement: &Statement) -> String {
    statement
        .to_string()
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_uppercase()
}

/// The statement `COPY ... TO STDOUT` copies the rows of.
pub fn copied_query(copy: &CopyOut) -> DFStatement {
    DFStatement::Statement(Box::new(Statement::Query(copy.query.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn answer(sql: &str) -> Answer {
        answer_of(&Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap()[0])
    }

    #[test]
    fn statements_answer_by_their_type() {
        assert_eq!(answer("SELECT 1"), Answer::Rows);
        assert_eq!(answer("EXPLAIN SELECT 1"), Answer::Rows);
        assert_eq!(answer("INSERT INTO t VALUES (1)"), Answer::Inserted);
        for (sql, tag) in [
            ("CREATE TABLE t (a int)", "CREATE TABLE"),
            ("CREATE OR REPLACE VIEW v AS SELECT 1", "CREATE VIEW"),
            ("CREATE SCHEMA s", "CREATE SCHEMA"),
            ("DROP TABLE t", "DROP TABLE"),
            ("DROP VIEW IF EXISTS v", "DROP VIEW"),
            ("UPDATE t SET a = 1", "UPDATE"),
            ("DELETE FROM t", "DELETE"),
            ("TRUNCATE t", "TRUNCATE"),
        ] {
            assert_eq!(answer(sql), Answer::Done(tag.into()), "{sql}");
        }
    }

    #[test]
    fn datafusion_only_statements_are_read_by_its_parser() {
        let Some(Parsed::DataFusion { statement, answer }) =
            datafusion_only("CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'x.csv'")
        else {
            panic!("CREATE EXTERNAL TABLE is DataFusion's");
        };
        assert!(matches!(statement, DFStatement::CreateExternalTable(_)));
        assert_eq!(answer, Answer::Done("CREATE EXTERNAL TABLE".into()));
        assert!(datafusion_only("SELECT 1").is_none());
    }
}
