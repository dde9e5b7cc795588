//! How deep a statement may nest.
//!
//! Planning, optimising and running a statement recurse over its expressions and queries, one
//! stack frame (or several) per level. A deep enough statement (`SELECT 0+1+2+...` with a few
//! thousand terms is a 4 KB query) would overflow the stack, which aborts the whole process,
//! not just the statement. Every statement is therefore measured on its parsed syntax tree
//! before anything plans it, and refused with [`TooComplex`] (SQLSTATE `54001`,
//! `statement_too_complex`) when it is deeper than [`MAX_DEPTH`].
//!
//! The depth counts every nested expression (an operand of an operator, an argument of a
//! function, a `CASE` branch, a cast), every nested query, the operands of a chain of
//! `UNION`/`EXCEPT`/`INTERSECT` and the relations a query joins (each becomes one more level
//! of the plan). Parentheses and `CASE` ([`PARSER_NESTING_LIMIT`]) and function calls
//! ([`CALL_NESTING_LIMIT`]) are counted earlier, on the statement's tokens, before a parser
//! builds (or, for deep `CASE`s, silently mis-builds) a tree of it, and so are runs of binary
//! operators at one level ([`FLAT_OPERATOR_LIMIT`]), whose tree would be too deep to walk
//! or even drop; the parsers' own recursion limit is refused with the same error.
//!
//! # Invariant
//! No statement deeper than [`MAX_DEPTH`] reaches DataFusion's planner. The measurement itself
//! stops as soon as it passes the limit, so it never recurses deeper than the limit either.

use std::ops::ControlFlow;

use crate::sqlstate::SqlState;
use datafusion::sql::parser::{CopyToSource, Statement as DFStatement};
use sqlparser::ast::{Expr, Query, Select, SetExpr, Statement, Visit, Visitor};
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::ParserError;
use sqlparser::tokenizer::{Token, Tokenizer};

/// The deepest statement planned (see the module docs for what counts). Measured through the
/// front end in a debug build on a 2 MB stack: a chain of additions overflowed at about 450
/// levels and a chain of joins at about 400, so 256 keeps a margin on the smallest stacks.
pub const MAX_DEPTH: usize = 256;

/// How deep parentheses and `CASE` may nest, counted on the statement's tokens before it is
/// parsed. Below the SQL parsers' recursion limit (50), which deep `CASE`s do not always
/// report (they are parsed as something else instead).
pub const PARSER_NESTING_LIMIT: usize = 40;

/// How many binary operators (and set operations) one level of a statement may chain between
/// two commas, counted on its tokens. A chain of them is a tree as deep as it is long, and a tree deep enough (a
/// 900 KB `SELECT 0+1+1+...`) overflows the stack of whatever walks or drops it before its
/// depth is measured, aborting the process; a chain of 10,000 is known to be safe. A chain
/// longer than [`MAX_DEPTH`] is refused by depth anyway, so this refuses nothing the depth
/// check would pass unless one level holds that many operators in short chains.
pub const FLAT_OPERATOR_LIMIT: usize = 4096;

/// How deep function calls may nest: PostgreSQL's catalog-query rewriting takes time that
/// doubles with every level (measured: 20 levels 1.6 s, 25 levels 45 s).
pub const CALL_NESTING_LIMIT: usize = 16;

/// A statement nests deeper than the server plans.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TooComplex {
    #[error("statement too complex: its expressions and queries nest deeper than {limit} levels (the server's limit)")]
    Depth { limit: usize },
    #[error("statement too complex: parentheses, subqueries, CASE or function calls nest deeper than {limit} levels (the server's limit)")]
    Nesting { limit: usize },
    #[error("statement too complex: function calls nest deeper than {limit} levels (the server's limit)")]
    Calls { limit: usize },
}

impl TooComplex {
    /// `statement_too_complex`.
    pub const SQLSTATE: SqlState = SqlState::STATEMENT_TOO_COMPLEX;
}

/// Whether a parser error is its recursion limit.
pub fn is_nesting_limit(error: &ParserError) -> bool {
    matches!(error, ParserError::RecursionLimitExceeded)
}

/// Checks how deep parentheses, `CASE` and function calls nest in `sql`, on its tokens:
/// before any parser builds (or mis-builds) a tree of it. Text that does not tokenize is
/// left to the parser to report.
pub fn check_nesting(sql: &str) -> Result<(), TooComplex> {
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return Ok(());
    };
    #[derive(PartialEq)]
    enum Open {
        Paren,
        Call,
        Case,
    }
    let mut open = Vec::new();
    let mut calls = 0;
    // Binary operators at each open level, the statement's own level first.
    let mut operators = vec![0usize];
    let mut previous: Option<&Token> = None;
    for token in tokens.iter().filter(|t| !matches!(t, Token::Whitespace(_))) {
        match token {
            Token::LParen => {
                let call =
                    matches!(previous, Some(Token::Word(w)) if !STRUCTURAL.contains(&w.keyword));
                calls += usize::from(call);
                open.push(if call { Open::Call } else { Open::Paren });
                operators.push(0);
            }
            Token::RParen if open.last().is_some_and(|o| *o != Open::Case) => {
                calls -= usize::from(open.pop() == Some(Open::Call));
                operators.pop();
            }
            Token::Word(w) if w.keyword == Keyword::CASE => {
                open.push(Open::Case);
                operators.push(0);
            }
            Token::Word(w) if w.keyword == Keyword::END && open.last() == Some(&Open::Case) => {
                open.pop();
                operators.pop();
            }
            // List items (select items, arguments, values) are trees of their own.
            Token::Comma | Token::SemiColon => {
                *operators.last_mut().expect("the statement's own level") = 0;
            }
            t if is_binary_operator(t) => {
                let here = operators.last_mut().expect("the statement's own level");
                *here += 1;
                if *here > FLAT_OPERATOR_LIMIT {
                    return Err(TooComplex::Depth { limit: MAX_DEPTH });
                }
            }
            _ => {}
        }
        if open.len() > PARSER_NESTING_LIMIT {
            return Err(TooComplex::Nesting {
                limit: PARSER_NESTING_LIMIT,
            });
        }
        if calls > CALL_NESTING_LIMIT {
            return Err(TooComplex::Calls {
                limit: CALL_NESTING_LIMIT,
            });
        }
        previous = Some(token);
    }
    Ok(())
}

/// Whether `token` joins two operands (or two queries): each one of a run at one level is one
/// more level of the tree a parser builds.
fn is_binary_operator(token: &Token) -> bool {
    match token {
        Token::Plus
        | Token::Minus
        | Token::Mul
        | Token::Div
        | Token::Mod
        | Token::StringConcat
        | Token::Eq
        | Token::DoubleEq
        | Token::Neq
        | Token::Lt
        | Token::Gt
        | Token::LtEq
        | Token::GtEq
        | Token::Spaceship
        | Token::Caret
        | Token::Ampersand
        | Token::Pipe
        | Token::ShiftLeft
        | Token::ShiftRight => true,
        Token::Word(w) => matches!(
            w.keyword,
            Keyword::AND | Keyword::OR | Keyword::UNION | Keyword::EXCEPT | Keyword::INTERSECT
        ),
        _ => false,
    }
}

/// Keywords a parenthesis follows without being a call's.
const STRUCTURAL: &[Keyword] = &[
    Keyword::IN,
    Keyword::VALUES,
    Keyword::AS,
    Keyword::FROM,
    Keyword::JOIN,
    Keyword::ON,
    Keyword::USING,
    Keyword::SELECT,
    Keyword::WHERE,
    Keyword::AND,
    Keyword::OR,
    Keyword::NOT,
    Keyword::OVER,
    Keyword::FILTER,
    Keyword::WITH,
    Keyword::LATERAL,
    Keyword::UNION,
    Keyword::ALL,
    Keyword::EXCEPT,
    Keyword::INTERSECT,
    Keyword::WHEN,
    Keyword::THEN,
    Keyword::ELSE,
    Keyword::BY,
    Keyword::EXISTS,
    Keyword::TO,
];

/// Checks `statement` against `limit` (see the module docs).
pub fn check_statement(statement: &Statement, limit: usize) -> Result<(), TooComplex> {
    let mut depth = Depth::new(limit);
    match statement.visit(&mut depth) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(()) => Err(TooComplex::Depth { limit }),
    }
}

/// [`check_statement`] for DataFusion's statements (`CREATE EXTERNAL TABLE`, `COPY`, ...).
pub fn check_df_statement(statement: &DFStatement, limit: usize) -> Result<(), TooComplex> {
    let mut depth = Depth::new(limit);
    let flow = match statement {
        DFStatement::Statement(s) => s.visit(&mut depth),
        DFStatement::CopyTo(copy) => match &copy.source {
            CopyToSource::Query(query) => query.visit(&mut depth),
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
        },
        DFStatement::CreateExternalTable(create) => {
            let columns = create.columns.visit(&mut depth);
            if columns.is_break() {
                columns
            } else {
                create.order_exprs.visit(&mut depth)
            }
        }
        DFStatement::Explain(explain) => return check_df_statement(&explain.statement, limit),
        DFStatement::Reset(_) => ControlFlow::Continue(()),
    };
    match flow {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(()) => Err(TooComplex::Depth { limit }),
    }
}

/// The depth of the node being visited, and what each open query added to it.
struct Depth {
    current: usize,
    limit: usize,
    queries: Vec<usize>,
    selects: Vec<usize>,
}

impl Depth {
    fn new(limit: usize) -> Self {
        Self {
            current: 0,
            limit,
            queries: Vec::new(),
            selects: Vec::new(),
        }
    }

    fn enter(&mut self, levels: usize) -> ControlFlow<()> {
        self.current = self.current.saturating_add(levels);
        if self.current > self.limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn leave(&mut self, levels: usize) {
        self.current = self.current.saturating_sub(levels);
    }
}

impl Visitor for Depth {
    type Break = ();

    fn pre_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.enter(1)
    }

    fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.leave(1);
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        // Measured before the visit descends into the chain, which it does recursively.
        let levels = 1 + set_operation_depth(&query.body, self.limit);
        self.queries.push(levels);
        self.enter(levels)
    }

    fn post_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
        let levels = self.queries.pop().unwrap_or(0);
        self.leave(levels);
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<()> {
        // `FROM a, b JOIN c ...` plans as a chain of joins, one level each.
        let relations: usize = select.from.iter().map(|t| 1 + t.joins.len()).sum();
        let levels = relations.saturating_sub(1);
        self.selects.push(levels);
        self.enter(levels)
    }

    fn post_visit_select(&mut self, _: &Select) -> ControlFlow<()> {
        let levels = self.selects.pop().unwrap_or(0);
        self.leave(levels);
        ControlFlow::Continue(())
    }
}

/// How many set operations deep `body` is, counted without recursion (the parser builds a
/// chain of `UNION`s as a left-deep tree); stops counting past `limit`.
fn set_operation_depth(body: &SetExpr, limit: usize) -> usize {
    let mut deepest = 0;
    let mut open = vec![(body, 0usize)];
    while let Some((node, depth)) = open.pop() {
        deepest = deepest.max(depth);
        if deepest > limit {
            break;
        }
        if let SetExpr::SetOperation { left, right, .. } = node {
            open.push((left, depth + 1));
            open.push((right, depth + 1));
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    #[test]
    fn long_operator_runs_are_refused_on_the_tokens_level_by_level() {
        let run = |n: usize| format!("SELECT 0{}", " + 1".repeat(n));
        assert_eq!(check_nesting(&run(FLAT_OPERATOR_LIMIT)), Ok(()));
        assert_eq!(
            check_nesting(&run(FLAT_OPERATOR_LIMIT + 1)),
            Err(TooComplex::Depth { limit: MAX_DEPTH })
        );
        // Counted per level: the same operators split between parentheses pass.
        let half = "1 + ".repeat(FLAT_OPERATOR_LIMIT / 2);
        assert_eq!(
            check_nesting(&format!("SELECT ({half}1) * ({half}1)")),
            Ok(())
        );
        let ors = vec!["x = 1"; FLAT_OPERATOR_LIMIT].join(" OR ");
        assert!(check_nesting(&format!("SELECT * FROM t WHERE {ors}")).is_err());
        // List items are trees of their own.
        let items = vec!["a + 1"; 2 * FLAT_OPERATOR_LIMIT].join(", ");
        assert_eq!(check_nesting(&format!("SELECT {items} FROM t")), Ok(()));
    }

    fn depth_ok(sql: &str, limit: usize) -> Result<(), TooComplex> {
        let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        check_statement(&statements[0], limit)
    }

    fn chain(terms: usize) -> String {
        let mut sql = String::from("SELECT 0");
        for i in 1..terms {
            sql.push_str(&format!(" + {i}"));
        }
        sql
    }

    #[test]
    fn long_chains_are_measured_by_their_length() {
        // `SELECT 0 + 1 + ... ` with n terms: n - 1 operators nested left-deep, plus the
        // literal at the bottom, inside one query.
        assert_eq!(depth_ok(&chain(50), 51), Ok(()));
        assert_eq!(
            depth_ok(&chain(50), 50),
            Err(TooComplex::Depth { limit: 50 })
        );
        let ors = (0..200)
            .map(|i| format!("x = {i}"))
            .collect::<Vec<_>>()
            .join(" OR ");
        let sql = format!("SELECT 1 FROM t WHERE {ors}");
        assert!(depth_ok(&sql, 150).is_err());
        assert!(depth_ok(&sql, 300).is_ok());
        assert!(depth_ok(&format!("SELECT 1{}", "::int".repeat(40)), 30).is_err());
    }

    #[test]
    fn set_operations_and_joins_count() {
        let unions = (0..100)
            .map(|i| format!("SELECT {i}"))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        assert!(depth_ok(&unions, 90).is_err());
        assert!(depth_ok(&unions, 110).is_ok());
        let mut joins = String::from("SELECT 1 FROM t0");
        for i in 1..100 {
            joins.push_str(&format!(" JOIN t{i} ON true"));
        }
        assert!(depth_ok(&joins, 90).is_err());
        assert!(depth_ok(&joins, 110).is_ok());
    }

    #[test]
    fn nesting_counts_every_level() {
        let subqueries = format!("SELECT {}1{}", "(SELECT ".repeat(10), ")".repeat(10));
        assert!(depth_ok(&subqueries, 20).is_err());
        assert!(depth_ok(&subqueries, 40).is_ok());
        let functions = format!("SELECT {}1{}", "abs(".repeat(20), ")".repeat(20));
        assert!(depth_ok(&functions, 15).is_err());
        assert!(depth_ok(&functions, 25).is_ok());
        let cases = format!(
            "SELECT {}1{}",
            "CASE WHEN true THEN ".repeat(20),
            " END".repeat(20)
        );
        assert!(depth_ok(&cases, 15).is_err());
        assert!(depth_ok(&cases, 30).is_ok());
    }

    #[test]
    fn nesting_is_counted_on_tokens() {
        let parens = |n: usize| format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(check_nesting(&parens(PARSER_NESTING_LIMIT)), Ok(()));
        assert!(matches!(
            check_nesting(&parens(PARSER_NESTING_LIMIT + 1)),
            Err(TooComplex::Nesting { .. })
        ));
        let cases = |n: usize| {
            format!(
                "SELECT {}1{}",
                "CASE WHEN (true) THEN ".repeat(n),
                " END".repeat(n)
            )
        };
        assert_eq!(check_nesting(&cases(PARSER_NESTING_LIMIT - 1)), Ok(()));
        assert!(check_nesting(&cases(PARSER_NESTING_LIMIT + 1)).is_err());
        let calls = |n: usize| format!("SELECT {}1{}", "abs(".repeat(n), ")".repeat(n));
        assert_eq!(check_nesting(&calls(CALL_NESTING_LIMIT)), Ok(()));
        assert!(matches!(
            check_nesting(&calls(CALL_NESTING_LIMIT + 1)),
            Err(TooComplex::Calls { .. })
        ));
        // Parentheses after keywords are no calls; sibling calls do not add up.
        let siblings = vec!["abs(1)"; 100].join(" + ");
        assert_eq!(check_nesting(&format!("SELECT {siblings}")), Ok(()));
        let subqueries = format!(
            "SELECT 1 WHERE x IN {}1{}",
            "(SELECT ".repeat(20),
            ")".repeat(20)
        );
        assert_eq!(check_nesting(&subqueries), Ok(()));
    }

    #[test]
    fn ordinary_queries_are_shallow() {
        // psql's `\d+ table` column query, the deepest of its catalog queries.
        let describe = "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod),
              (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid, true)
                 FROM pg_catalog.pg_attrdef d
                WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef),
              a.attnotnull,
              (SELECT c.collname FROM pg_catalog.pg_collation c, pg_catalog.pg_type t
                WHERE c.oid = a.attcollation AND t.oid = a.atttypid
                  AND a.attcollation <> t.typcollation) AS attcollation,
              a.attidentity, a.attgenerated, a.attstorage,
              CASE WHEN a.attstattarget=-1 THEN NULL ELSE a.attstattarget END AS attstattarget,
              pg_catalog.col_description(a.attrelid, a.attnum)
            FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = '16384' AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum";
        assert_eq!(depth_ok(describe, 20), Ok(()));
    }

    #[test]
    fn datafusion_statements_are_measured_too() {
        let state = datafusion::prelude::SessionContext::new().state();
        let dialect = state.config().options().sql_parser.dialect;
        let copy = format!("COPY ({}) TO 'out.csv'", chain(100));
        let statement = state.sql_to_statement(&copy, &dialect).unwrap();
        assert!(check_df_statement(&statement, 50).is_err());
        assert!(check_df_statement(&statement, 200).is_ok());
        let explain = format!("EXPLAIN {}", chain(100));
        let statement = state.sql_to_statement(&explain, &dialect).unwrap();
        assert!(check_df_statement(&statement, 50).is_err());
    }
}
