//! The SQL statements cdcfusion adds to DataFusion's: `CREATE SOURCE`, `DROP SOURCE`,
//! `SHOW SOURCES`, `ALTER SOURCE ... RESNAPSHOT`, the sink statements (`CREATE SINK`,
//! `DROP SINK`, `SHOW SINKS`, `ALTER SINK ... PAUSE | RESUME`), `AS OF` after a table
//! name in a query (rewritten to the `as_of` table function, see `as_of`), `SUBSCRIBE`
//! (see `subscribe`), and the statements that manage users and their roles (see `users`).
//!
//! This module owns their text: grammar, option checking and rendering back to SQL. It does
//! not run them; the executor (the pgwire layer's query hook) matches on [`CdcStatement`] and
//! hands every text [`parse_cdc_statement`] returns `Ok(None)` for to DataFusion unchanged.
//!
//! # Invariant
//! A statement that starts like ours is ours: it parses completely or fails with an error that
//! names the offending token, option or URL and its line and column, with a PostgreSQL
//! SQLSTATE ([`SqlError::sqlstate`]). A parsed `CREATE SOURCE` is valid as a capture
//! ([`SourceOptions::to_capture_options`] maps it without checking again) and never shows its
//! password.
//!
//! # Parts, bottom up
//! Each file imports only files above it in this list (a test below keeps it so):
//! * `error`: [`SqlError`] and its SQLSTATEs; names options by their SQL name.
//! * `names`: quoting, and the grammar's words a source name must not be unquoted.
//! * `mysql_url`: the connection URL, validated by `mysql_async` and masked in all output.
//! * `value`: an option's value typed from sqlparser's expression (string, ranged integer).
//! * `options`: the `WITH (...)` options: one table ([`OPTIONS`]) of names, types, ranges,
//!   documentation and rendering, read into the typed [`SourceOptions`].
//! * `statement`: the statement types (also the user statements' and [`Role`]).
//! * `grammar`: sqlparser's parser over our tokens, with our error messages.
//! * `sink`: the sink statements' grammar and options.
//! * `parse`: which texts are ours, and each statement's grammar ([`parse_cdc_statement`]).
//! * `render`: statements back to SQL, password masked.
//! * `script`: splitting a script into statements (for `--init` files), and token locations
//!   as byte offsets.
//! * `as_of`: `name AS OF point` in a query, written as the `as_of` table function.
//! * `subscribe`: `SUBSCRIBE` in its plain, `COPY (...) TO STDOUT` and cursor forms.
//! * `users`: `CREATE USER`, `ALTER USER`, `DROP USER`, `GRANT` and `REVOKE` of the two
//!   roles ([`Role`]), read by sqlparser's PostgreSQL role grammar.
//!
//! The reference for users is `docs/sql-reference.md`; a test keeps its option table in step
//! with [`OPTIONS`] and its examples parsing.

mod as_of;
mod error;
mod grammar;
mod mysql_url;
mod names;
mod options;
mod parse;
mod render;
mod script;
mod sink;
mod statement;
mod subscribe;
mod users;
mod value;

pub use as_of::rewrite_as_of;
pub use error::SqlError;
pub use mysql_url::{mask_password, MySqlUrl};
pub use options::{
    ConnectionChange, MoveStart, OptionSpec, SourceChanges, SourceOptions, DEFAULT_TABLES,
    MAX_PARALLELISM, MAX_SERVER_ID, OPTIONS,
};
pub use parse::parse_cdc_statement;
pub use script::split_statements;
pub use sink::SINK_OPTIONS;
pub use statement::{
    AlterSink, AlterSource, AlterSourceAction, CdcStatement, CreateSink, CreateSource, CreateUser,
    DropSink, DropSource, Password, Role, UserStatement,
};
pub use subscribe::{
    parse_cursor_command, parse_subscribe, CursorCommand, Subscribe, SubscribeStatement,
    SUBSCRIBE_OPTIONS,
};
pub use users::parse_user_statement;

#[cfg(test)]
mod tests {
    //! `docs/sql-reference.md` against the parser, so the reference cannot go stale, and the
    //! files of this module against their order in the module docs.

    use super::*;

    const REFERENCE: &str = include_str!("../../docs/sql-reference.md");

    /// A cell without its surrounding backticks.
    fn unquote(cell: &str) -> &str {
        cell.trim().trim_matches('`')
    }

    /// The rows of the table under `### Options`: `Option | Value | Default | Example | Meaning`.
    fn option_rows() -> Vec<Vec<&'static str>> {
        let section = REFERENCE
            .split("### Options")
            .nth(1)
            .expect("docs/sql-reference.md has an ### Options section");
        section
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2) // header and separator
            .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
            .collect()
    }

    #[test]
    fn the_reference_lists_exactly_the_option_table() {
        let rows = option_rows();
        let documented: Vec<&str> = rows.iter().map(|r| unquote(r[0])).collect();
        let accepted: Vec<&str> = OPTIONS.iter().map(|o| o.name).collect();
        assert_eq!(documented, accepted, "docs/sql-reference.md option table");
        for (row, spec) in rows.iter().zip(&OPTIONS) {
            let name = spec.name;
            assert_eq!(row.len(), 5, "{row:?} has 5 columns");
            assert_eq!(row[1], spec.form(), "documented value of {name}");
            assert_eq!(
                unquote(row[2]),
                spec.default_text(),
                "documented default of {name}"
            );
            assert!(
                row[4].starts_with(spec.summary),
                "the documented meaning of {name} starts with {:?}",
                spec.summary
            );
            // The documented example is accepted (start_position only with stream_only).
            let mode = match name {
                "start_position" => "snapshot_mode = 'stream_only', ",
                _ => "",
            };
            let sql = format!(
                "CREATE SOURCE s FROM MYSQL 'mysql://u@h' WITH ({mode}{name} = {})",
                unquote(row[3])
            );
            if let Err(e) = parse_cdc_statement(&sql) {
                panic!("documented example of {name} is refused: {sql}: {e}");
            }
        }
    }

    #[test]
    fn the_reference_examples_parse() {
        let mut examples = 0;
        for block in REFERENCE.split("```sql").skip(1) {
            let block = block.split("```").next().unwrap_or_default();
            // Synopses (with `[optional]` parts) are grammar, not statements.
            if block.contains('[') {
                continue;
            }
            match parse_cdc_statement(block) {
                Ok(Some(_)) => examples += 1,
                _ if matches!(parse_subscribe(block), Ok(Some(_))) => examples += 1,
                _ if matches!(parse_user_statement(block), Ok(Some(_))) => examples += 1,
                other => panic!("example {block:?} does not parse: {other:?}"),
            }
        }
        assert!(examples >= 5, "only {examples} examples found");
    }
}
