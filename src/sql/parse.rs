//! Reading cdcfusion's statements: which texts are ours, and the grammar of each.
//!
//! # Invariant
//! [`parse_cdc_statement`] claims a text exactly when its first words are one of `CREATE
//! SOURCE`, `CREATE OR REPLACE SOURCE`, `DROP SOURCE`, `SHOW SOURCES`, `ALTER SOURCE`, `CREATE
//! SINK`, `EXPLAIN CREATE SINK`, `DROP SINK`, `SHOW SINKS` or `ALTER SINK`; any
//! other text is `Ok(None)`, untouched, for DataFusion, even text that does not tokenize (so
//! DataFusion reports its own error). A claimed text is either a whole statement or an error
//! naming the offending token and its line and column. This way no DataFusion statement changes
//! meaning, and no statement of ours reaches DataFusion to fail with a confusing message.
//! Keywords are case-insensitive and a trailing `;` is allowed; the forms are in `statement`.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::Token;

use super::error::SqlError;
use super::grammar::{claim, is_keyword, is_word, Grammar, NameKind};
use super::mysql_url::{mask_password, MySqlUrl};
use super::options::{MoveStart, OptionSpec, SourceChanges, SourceOptions};
use super::statement::{AlterSource, AlterSourceAction, CdcStatement, CreateSource, DropSource};
use super::value::RawOption;
use crate::change::schema::TableId;

/// What to do instead of TLS to a source, which the capture's connections do not speak.
pub const TLS_SOURCE_HINT: &str = "cdcfusion connects to MySQL and MariaDB without TLS: remove \
     require_ssl and reach the server over a private network or a tunnel";

/// Parses `sql` if it is one of cdcfusion's statements; `Ok(None)` hands it to DataFusion.
pub fn parse_cdc_statement(sql: &str) -> Result<Option<CdcStatement>, SqlError> {
    let dialect = PostgreSqlDialect {};
    let Some((kind, tokens)) = claim(&dialect, sql, Kind::of)? else {
        return Ok(None);
    };
    let mut grammar = Grammar::new(&dialect, tokens);
    let statement = match kind {
        Kind::Create => CdcStatement::CreateSource(grammar.create_source()?),
        Kind::CreateOrReplace => return Err(grammar.create_or_replace()),
        Kind::Drop => CdcStatement::DropSource(grammar.drop_source()?),
        Kind::Show => {
            grammar.expect_keyword(Keyword::SHOW)?;
            grammar.expect_word("SOURCES")?;
            CdcStatement::ShowSources
        }
        Kind::Alter => CdcStatement::AlterSource(grammar.alter_source()?),
        Kind::CreateSink => CdcStatement::CreateSink(grammar.create_sink(sql)?),
        Kind::ExplainSink => {
            grammar.expect_keyword(Keyword::EXPLAIN)?;
            CdcStatement::ExplainSink(grammar.create_sink(sql)?)
        }
        Kind::DropSink => CdcStatement::DropSink(grammar.drop_sink()?),
        Kind::ShowSinks => {
            grammar.expect_keyword(Keyword::SHOW)?;
            grammar.expect_word("SINKS")?;
            CdcStatement::ShowSinks
        }
        Kind::AlterSink => CdcStatement::AlterSink(grammar.alter_sink()?),
    };
    grammar.end_of_statement()?;
    Ok(Some(statement))
}

/// Which of our statements a text starts like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Create,
    CreateOrReplace,
    Drop,
    Show,
    Alter,
    CreateSink,
    ExplainSink,
    DropSink,
    ShowSinks,
    AlterSink,
}

impl Kind {
    fn of(words: &[&Token]) -> Option<Self> {
        let first = |kw| words.first().is_some_and(|t| is_keyword(t, kw));
        let word = |i: usize, name| words.get(i).is_some_and(|t| is_word(t, name));
        if first(Keyword::CREATE) && word(1, "SOURCE") {
            Some(Kind::Create)
        } else if first(Keyword::CREATE) && word(1, "OR") && word(2, "REPLACE") && word(3, "SOURCE")
        {
            Some(Kind::CreateOrReplace)
        } else if first(Keyword::DROP) && word(1, "SOURCE") {
            Some(Kind::Drop)
        } else if first(Keyword::SHOW) && word(1, "SOURCES") {
            Some(Kind::Show)
        } else if first(Keyword::ALTER) && word(1, "SOURCE") {
            Some(Kind::Alter)
        } else if first(Keyword::CREATE) && word(1, "SINK") {
            Some(Kind::CreateSink)
        } else if first(Keyword::EXPLAIN) && word(1, "CREATE") && word(2, "SINK") {
            Some(Kind::ExplainSink)
        } else if first(Keyword::DROP) && word(1, "SINK") {
            Some(Kind::DropSink)
        } else if first(Keyword::SHOW) && word(1, "SINKS") {
            Some(Kind::ShowSinks)
        } else if first(Keyword::ALTER) && word(1, "SINK") {
            Some(Kind::AlterSink)
        } else {
            None
        }
    }
}

/// The rules of our statements, on the shared token reader.
impl Grammar<'_> {
    fn create_source(&mut self) -> Result<CreateSource, SqlError> {
        self.expect_keyword(Keyword::CREATE)?;
        self.expect_keyword(Keyword::SOURCE)?;
        let if_not_exists = self.keyword(Keyword::IF);
        if if_not_exists {
            self.expect_keyword(Keyword::NOT)?;
            self.expect_keyword(Keyword::EXISTS)?;
        }
        let (name, _) = self.name(NameKind::Source, "source name")?;
        self.expect_keyword(Keyword::FROM)?;
        self.source_type()?;
        let (text, location) = self.string("the connection URL as a string literal")?;
        let url = MySqlUrl::parse(&text).map_err(|reason| SqlError::InvalidUrl {
            url: mask_password(&text),
            reason,
            location: Some(location),
        })?;
        if url.opts().ssl_opts().is_some() {
            return Err(SqlError::Unsupported {
                feature: "TLS to the source (require_ssl in the URL)".into(),
                hint: Some(TLS_SOURCE_HINT.into()),
                location: Some(location),
            });
        }
        let options = if self.keyword(Keyword::WITH) {
            SourceOptions::from_raw(&self.options("WITH")?)?
        } else {
            SourceOptions::default()
        };
        Ok(CreateSource {
            name,
            if_not_exists,
            url,
            options,
        })
    }

    /// `MYSQL`; another word is a source type we do not have (MariaDB is read as MySQL).
    fn source_type(&mut self) -> Result<(), SqlError> {
        let next = self.parser.peek_token_ref();
        match &next.token {
            Token::Word(w) if w.quote_style.is_none() && !w.value.eq_ignore_ascii_case("MYSQL") => {
                Err(SqlError::Unsupported {
                    feature: format!("source type {}", w.value.to_uppercase()),
                    hint: Some("MYSQL is the only source type (it also reads MariaDB)".to_string()),
                    location: Some(next.span.start),
                })
            }
            _ => self.expect_word("MYSQL"),
        }
    }

    /// `( name = value [, ...] )`, each value read by sqlparser's expression parser.
    fn options(&mut self, after: &str) -> Result<Vec<RawOption>, SqlError> {
        self.expect_token(&Token::LParen, &format!("( after {after}"))?;
        let mut raw = Vec::new();
        loop {
            let (name, name_location) = self.name(NameKind::Option, "option name")?;
            self.expect_token(&Token::Eq, &format!("= after option name {name}"))?;
            let value_location = self.next_location();
            let value =
                self.parser
                    .parse_expr()
                    .map_err(|source| match OptionSpec::named(&name) {
                        Some(spec) => SqlError::Expression {
                            option: spec.name,
                            source,
                        },
                        None => OptionSpec::unknown(&name, name_location),
                    })?;
            raw.push(RawOption {
                name,
                name_location,
                value,
                value_location,
            });
            if self.parser.consume_token(&Token::RParen) {
                break;
            }
            let after = raw.last().map_or("", |o| o.name.as_str());
            self.expect_token(
                &Token::Comma,
                &format!(", or ) after the value of option {after}"),
            )?;
        }
        Ok(raw)
    }

    /// `CREATE OR REPLACE SOURCE` would silently restart a capture; say how to do it instead.
    fn create_or_replace(&mut self) -> SqlError {
        self.parser.advance_token();
        SqlError::Unsupported {
            feature: "CREATE OR REPLACE SOURCE".to_string(),
            hint: Some("DROP SOURCE, then CREATE SOURCE".to_string()),
            location: Some(self.next_location()),
        }
    }

    fn drop_source(&mut self) -> Result<DropSource, SqlError> {
        self.expect_keyword(Keyword::DROP)?;
        self.expect_keyword(Keyword::SOURCE)?;
        let if_exists = self.keyword(Keyword::IF);
        if if_exists {
            self.expect_keyword(Keyword::EXISTS)?;
        }
        let (name, _) = self.name(NameKind::Source, "source name")?;
        Ok(DropSource { name, if_exists })
    }

    fn alter_source(&mut self) -> Result<AlterSource, SqlError> {
        self.expect_keyword(Keyword::ALTER)?;
        self.expect_keyword(Keyword::SOURCE)?;
        let (name, _) = self.name(NameKind::Source, "source name")?;
        if self.keyword(Keyword::SET) {
            let mut changes = SourceChanges::from_raw(&self.options("SET")?)?;
            // `SET (...) RESNAPSHOT`: the changes, then every table read again through them.
            if is_word(&self.parser.peek_token_ref().token, "RESNAPSHOT") {
                let location = self.next_location();
                self.parser.advance_token();
                if changes.start.is_some() {
                    return Err(SqlError::Unsupported {
                        feature: "start_position together with RESNAPSHOT".into(),
                        hint: Some(
                            "a re-snapshot reads every table at the server's current position: \
                             leave start_position out"
                                .into(),
                        ),
                        location: Some(location),
                    });
                }
                changes.start = Some(MoveStart::Resnapshot);
            }
            return Ok(AlterSource {
                name,
                action: AlterSourceAction::Set(changes),
            });
        }
        if !is_word(&self.parser.peek_token_ref().token, "RESNAPSHOT") {
            return Err(self.expected("RESNAPSHOT or SET"));
        }
        self.parser.advance_token();
        let table = if self.keyword(Keyword::TABLE) {
            let (db, _) = self.name(NameKind::MySql, "database name")?;
            self.expect_token(&Token::Period, ". between database and table name")?;
            let (table, _) = self.name(NameKind::MySql, "table name")?;
            Some(TableId::new(db, table))
        } else {
            None
        };
        Ok(AlterSource {
            name,
            action: AlterSourceAction::Resnapshot { table },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlstate::HasSqlState;
    use crate::sqlstate::SqlState;

    const URL: &str = "mysql://cdc:secret@127.0.0.1:3306";

    fn parse(sql: &str) -> CdcStatement {
        match parse_cdc_statement(sql) {
            Ok(Some(statement)) => statement,
            other => panic!("{sql:?} should parse, got {other:?}"),
        }
    }

    fn create(sql: &str) -> CreateSource {
        match parse(sql) {
            CdcStatement::CreateSource(c) => c,
            other => panic!("{sql:?} is not CREATE SOURCE: {other:?}"),
        }
    }

    /// Asserts `sql` is refused with `sqlstate` and a message containing `fragment`.
    fn assert_error(sql: &str, sqlstate: &str, fragment: &str) {
        match parse_cdc_statement(sql) {
            Err(e) => {
                let message = e.to_string();
                assert!(
                    message.contains(fragment),
                    "{sql:?}: {message:?} lacks {fragment:?}"
                );
                assert_eq!(e.sqlstate().code(), sqlstate, "{sql:?}: {message}");
            }
            Ok(other) => panic!("{sql:?} should fail, got {other:?}"),
        }
    }

    #[test]
    fn create_source_without_options_takes_the_defaults() {
        let c = create(&format!("CREATE SOURCE shop FROM MYSQL '{URL}'"));
        assert_eq!(c.name, "shop");
        assert!(!c.if_not_exists);
        assert_eq!(c.url.expose(), URL);
        assert_eq!(c.options, SourceOptions::default());
    }

    #[test]
    fn keywords_are_case_insensitive_and_the_semicolon_optional() {
        let upper = create(&format!(
            "CREATE SOURCE s FROM MYSQL '{URL}' WITH (parallelism = 2)"
        ));
        for sql in [
            format!("create source s from mysql '{URL}' with (parallelism = 2);"),
            format!("Create Source s From MySql '{URL}' With (PARALLELISM = 2) ;"),
            format!("-- a comment\n  CREATE\n\tSOURCE s /* here */ FROM MYSQL\n'{URL}'\nWITH (parallelism = 2)"),
        ] {
            assert_eq!(create(&sql), upper, "{sql}");
        }
        assert_eq!(parse("show sources"), CdcStatement::ShowSources);
        assert_eq!(parse("SHOW SOURCES;"), CdcStatement::ShowSources);
    }

    #[test]
    fn unquoted_names_fold_to_lower_case_and_quoted_names_keep_theirs() {
        let name = |sql: &str| create(&format!("CREATE SOURCE {sql} FROM MYSQL '{URL}'")).name;
        assert_eq!(name("Shop"), "shop");
        assert_eq!(name("\"My Source\""), "My Source");
        assert_eq!(name("\"say \"\"hi\"\"\""), "say \"hi\"");
        assert_eq!(name("\"from\""), "from");
        assert_eq!(name("s_1$x"), "s_1$x");
        let DropSource { name, .. } = match parse("DROP SOURCE \"Mixed.Case\"") {
            CdcStatement::DropSource(d) => d,
            other => panic!("{other:?}"),
        };
        assert_eq!(name, "Mixed.Case");
    }

    #[test]
    fn if_not_exists_and_if_exists_are_recorded() {
        let c = create(&format!("CREATE SOURCE IF NOT EXISTS s FROM MYSQL '{URL}'"));
        assert!(c.if_not_exists);
        assert_eq!(c.name, "s");
        assert_eq!(
            parse("DROP SOURCE IF EXISTS s"),
            CdcStatement::DropSource(DropSource {
                name: "s".into(),
                if_exists: true
            })
        );
        assert_eq!(
            parse("drop source S;"),
            CdcStatement::DropSource(DropSource {
                name: "s".into(),
                if_exists: false
            })
        );
    }

    #[test]
    fn alter_source_resnapshot_keeps_mysql_names_as_written() {
        let alter = |sql| match parse(sql) {
            CdcStatement::AlterSource(a) => a,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            alter("ALTER SOURCE Shop RESNAPSHOT"),
            AlterSource {
                name: "shop".into(),
                action: AlterSourceAction::Resnapshot { table: None }
            }
        );
        let table = |sql| match alter(sql).action {
            AlterSourceAction::Resnapshot { table } => table,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            table("alter source s resnapshot table Shop.Orders;"),
            Some(TableId::new("Shop", "Orders"))
        );
        assert_eq!(
            table("ALTER SOURCE s RESNAPSHOT TABLE \"my db\".\"order\""),
            Some(TableId::new("my db", "order"))
        );
        // MySQL names may be SQL keywords.
        assert_eq!(
            table("ALTER SOURCE s RESNAPSHOT TABLE shop.order"),
            Some(TableId::new("shop", "order"))
        );
    }

    #[test]
    fn alter_source_set_changes_only_what_a_running_source_can() {
        use crate::state::retention::RetainHistory;
        let set = |sql| match parse(sql) {
            CdcStatement::AlterSource(AlterSource {
                action: AlterSourceAction::Set(changes),
                ..
            }) => changes,
            other => panic!("{sql}: {other:?}"),
        };
        let changes = set("alter source s set (RETAIN_HISTORY = '24h');");
        assert_eq!(
            changes.retain_history,
            Some(RetainHistory::Duration(std::time::Duration::from_secs(
                86_400
            )))
        );
        let statement = parse("ALTER SOURCE s SET (retain_history = '1000 changes')");
        assert_eq!(
            statement.to_string(),
            "ALTER SOURCE s SET (retain_history = '1000 changes')"
        );
        assert_eq!(parse(&statement.to_string()), statement);
        let statement = parse("ALTER SOURCE s SET (server_id = 4242)");
        assert_eq!(
            statement.to_string(),
            "ALTER SOURCE s SET (server_id = 4242)"
        );
        assert_eq!(
            set("ALTER SOURCE s SET (server_id = 4242)").server_id,
            Some(4242)
        );
        assert_error(
            "ALTER SOURCE s SET (server_id = 0)",
            SqlState::INVALID_PARAMETER_VALUE.code(),
            "out of range",
        );
        assert_error(
            "ALTER SOURCE s SET (chunk_size = 10)",
            SqlState::FEATURE_NOT_SUPPORTED.code(),
            "changing chunk_size of a running source is not supported",
        );
        assert_error(
            "ALTER SOURCE s SET (retain_history = 'forever')",
            SqlState::INVALID_PARAMETER_VALUE.code(),
            "'<n> changes'",
        );
        assert_error(
            "ALTER SOURCE s SET (retain = '1h')",
            SqlState::SYNTAX_ERROR.code(),
            "retain_history",
        );
        // The option is a CREATE SOURCE option too, written back only when set.
        let c = create(&format!(
            "CREATE SOURCE s FROM MYSQL '{URL}' WITH (retain_history = '7 days')"
        ));
        assert_eq!(
            c.options.retain_history(),
            RetainHistory::Duration(std::time::Duration::from_secs(7 * 86_400))
        );
        assert!(c.to_string().contains("retain_history = '7d'"), "{c}");
        let plain = create(&format!("CREATE SOURCE s FROM MYSQL '{URL}'"));
        assert!(!plain.to_string().contains("retain_history"), "{plain}");
    }

    #[test]
    fn alter_source_takes_a_new_url_user_and_password_and_never_shows_the_password() {
        let statement = parse(
            "ALTER SOURCE s SET (password = 'p@ss:/w%rd', user = 'cdc2', retain_history = 'all')",
        );
        let CdcStatement::AlterSource(AlterSource {
            action: AlterSourceAction::Set(changes),
            ..
        }) = &statement
        else {
            panic!("{statement:?}")
        };
        let text = statement.to_string();
        assert!(!text.contains("p@ss"), "{text}");
        assert!(
            text.contains("password = '****'") && text.contains("user = 'cdc2'"),
            "{text}"
        );
        // Put into the URL percent-encoded, replacing the old user and password (the old
        // password may hold an unencoded `@`).
        let old = MySqlUrl::parse("mysql://cdc:old@pw@db.example:3306/shop?require_ssl=true");
        let url = changes.connection.apply(&old.unwrap()).unwrap();
        let url = url.expose();
        assert_eq!(
            url,
            "mysql://cdc2:p%40ss%3A%2Fw%25rd@db.example:3306/shop?require_ssl=true"
        );
        let opts = mysql_async::Opts::from_url(url).unwrap();
        assert_eq!(opts.pass(), Some("p@ss:/w%rd"));
        assert_eq!(opts.user(), Some("cdc2"));
        // Every server of a URL naming several takes them.
        let both = MySqlUrl::parse("mysql://cdc:old@a:3306,b:3307/shop").unwrap();
        let url = changes.connection.apply(&both).unwrap();
        assert_eq!(
            url.host_urls(),
            [
                "mysql://cdc2:p%40ss%3A%2Fw%25rd@a:3306/shop",
                "mysql://cdc2:p%40ss%3A%2Fw%25rd@b:3307/shop"
            ]
        );
        let moved = parse("ALTER SOURCE s SET (url = 'mysql://u:secret@other:3307')");
        assert!(!moved.to_string().contains("secret"), "{moved}");
        assert_error(
            "ALTER SOURCE s SET (url = 'postgres://x')",
            SqlState::INVALID_PARAMETER_VALUE.code(),
            "",
        );
        assert_error(
            "ALTER SOURCE s SET (password = 'a', password = 'b')",
            SqlState::SYNTAX_ERROR.code(),
            "password",
        );
    }

    #[test]
    fn alter_source_names_where_a_move_goes_on() {
        use crate::change::position::StartPosition;
        let start = |sql: &str| match parse(sql) {
            CdcStatement::AlterSource(AlterSource {
                action: AlterSourceAction::Set(changes),
                ..
            }) => changes.start,
            other => panic!("{sql}: {other:?}"),
        };
        // No password in the URL: the statement's text masks it.
        let at = "ALTER SOURCE s SET (url = 'mysql://u@b:3306', \
                  start_position = 'mysql-bin.000004:1234')";
        match start(at) {
            Some(MoveStart::At(StartPosition::Coord(c))) => {
                assert_eq!(c.to_string(), "mysql-bin.000004:1234");
            }
            other => panic!("{other:?}"),
        }
        let statement = parse(at);
        assert_eq!(parse(&statement.to_string()), statement);
        assert!(
            statement
                .to_string()
                .ends_with("start_position = 'mysql-bin.000004:1234')"),
            "{statement}"
        );
        assert!(matches!(
            start("ALTER SOURCE s SET (url = 'mysql://b', start_position = 'current')"),
            Some(MoveStart::At(StartPosition::Current))
        ));
        assert!(matches!(
            start("ALTER SOURCE s SET (url = 'mysql://b', start_position = '0-2-17')"),
            Some(MoveStart::At(StartPosition::Gtid(_)))
        ));
        let again = "ALTER SOURCE s SET (url = 'mysql://u:pw@b:3306') RESNAPSHOT";
        assert_eq!(start(again), Some(MoveStart::Resnapshot));
        let statement = parse(again);
        assert_eq!(
            statement.to_string(),
            "ALTER SOURCE s SET (url = 'mysql://u:****@b:3306') RESNAPSHOT"
        );
        assert_eq!(start("ALTER SOURCE s SET (url = 'mysql://b')"), None);
        let accept = parse("ALTER SOURCE s SET (url = 'mysql://b', accept_errant_gtids = true)");
        match &accept {
            CdcStatement::AlterSource(AlterSource {
                action: AlterSourceAction::Set(changes),
                ..
            }) => assert!(changes.accept_errant),
            other => panic!("{other:?}"),
        }
        assert_eq!(parse(&accept.to_string()), accept);
        assert_error(
            "ALTER SOURCE s SET (accept_errant_gtids = true)",
            SqlState::INVALID_PARAMETER_VALUE.code(),
            "comes with that server's url",
        );
        assert_error(
            "ALTER SOURCE s SET (start_position = 'mysql-bin.000004:4')",
            SqlState::INVALID_PARAMETER_VALUE.code(),
            "comes with that server's url",
        );
        assert_error(
            "ALTER SOURCE s SET (url = 'mysql://b', start_position = '~0001~bin.000001:4')",
            SqlState::INVALID_PARAMETER_VALUE.code(),
            "SHOW MASTER STATUS",
        );
        assert_error(
            "ALTER SOURCE s SET (url = 'mysql://b', start_position = 'current') RESNAPSHOT",
            SqlState::FEATURE_NOT_SUPPORTED.code(),
            "leave start_position out",
        );
        assert_error(
            "ALTER SOURCE s SET (url = 'mysql://b', start_position = 'current', \
             start_position = 'current')",
            SqlState::SYNTAX_ERROR.code(),
            "start_position",
        );
    }

    #[test]
    fn statements_that_are_not_ours_go_to_datafusion() {
        for sql in [
            "SELECT * FROM \"src\".shop.\"orders$changelog\"",
            "select * from src.shop.orders where id = 1",
            "CREATE TABLE t (a INT)",
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'x'",
            "CREATE VIEW source AS SELECT 1",
            "CREATE \"SOURCE\" s FROM MYSQL 'x'",
            "DROP TABLE source",
            "DROP VIEW IF EXISTS s",
            "SHOW TABLES",
            "SHOW source",
            "SHOW \"SOURCES\"",
            "ALTER TABLE t ADD COLUMN b INT",
            "SET datafusion.execution.batch_size = 1024",
            "EXPLAIN CREATE SOURCE s FROM MYSQL 'x'",
            "SELECT 'CREATE SOURCE'",
            "",
            "   ",
            ";",
            "-- CREATE SOURCE s\nSELECT 1",
            // Does not tokenize: still DataFusion's to report.
            "SELECT 'unterminated",
            "CREATE 'unterminated",
        ] {
            match parse_cdc_statement(sql) {
                Ok(None) => {}
                other => panic!("{sql:?} should be left to DataFusion, got {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_statements_name_the_token_and_its_position() {
        let with = |options: &str| format!("CREATE SOURCE s FROM MYSQL '{URL}' WITH {options}");
        let cases: Vec<(String, &str)> = vec![
            (
                "CREATE SOURCE".into(),
                "syntax error: expected source name, found end of statement at Line: 1, Column: 14",
            ),
            (
                "CREATE SOURCE s".into(),
                "expected FROM, found end of statement at Line: 1, Column: 16",
            ),
            (
                "CREATE SOURCE s FROM MYSQL".into(),
                "expected the connection URL as a string literal, found end of statement",
            ),
            (
                "CREATE SOURCE s FROM MYSQL mysql://u@h".into(),
                "expected the connection URL as a string literal, found mysql at Line: 1, Column: 28",
            ),
            (
                "CREATE SOURCE s FROM 'mysql://u@h'".into(),
                "expected MYSQL, found 'mysql://u@h' at Line: 1, Column: 22",
            ),
            (
                format!("CREATE SOURCE `s` FROM MYSQL '{URL}'"),
                "expected source name (backticks are MySQL quoting; use double quotes: \"name\"), \
                 found ` at Line: 1, Column: 15",
            ),
            (
                format!("CREATE SOURCE 's' FROM MYSQL '{URL}'"),
                "expected source name, found 's' at Line: 1, Column: 15",
            ),
            (
                format!("CREATE SOURCE FROM MYSQL '{URL}'"),
                "expected source name (to name a source from, quote it: \"from\"), found FROM \
                 at Line: 1, Column: 15",
            ),
            (
                format!("CREATE SOURCE \"\" FROM MYSQL '{URL}'"),
                "expected source name (a quoted name cannot be empty), found \"\"",
            ),
            (
                format!("CREATE SOURCE IF EXISTS s FROM MYSQL '{URL}'"),
                "expected NOT, found EXISTS at Line: 1, Column: 18",
            ),
            (
                format!("CREATE SOURCE IF NOT s FROM MYSQL '{URL}'"),
                "expected EXISTS, found s at Line: 1, Column: 22",
            ),
            (
                format!("CREATE SOURCE a.b FROM MYSQL '{URL}'"),
                "expected FROM, found . at Line: 1, Column: 16",
            ),
            (
                format!("CREATE SOURCE s FROM MYSQL '{URL}' tables = 'a.b'"),
                "expected end of statement, found tables at Line: 1, Column: 64",
            ),
            (
                with("tables = 'a.b'"),
                "expected ( after WITH, found tables at Line: 1, Column: 69",
            ),
            (
                with("(chunk_size 5)"),
                "expected = after option name chunk_size, found 5 at Line: 1, Column: 81",
            ),
            (
                with("(chunk_size = 5 parallelism = 2)"),
                "expected , or ) after the value of option chunk_size, found parallelism \
                 at Line: 1, Column: 85",
            ),
            (
                with("(chunk_size = 5"),
                "expected , or ) after the value of option chunk_size, found end of statement \
                 at Line: 1, Column: 84",
            ),
            (with("()"), "expected option name, found ) at Line: 1, Column: 70"),
            (
                with("(chunk_size = 5,)"),
                "expected option name, found ) at Line: 1, Column: 85",
            ),
            (
                with("('tables' = 'a.b')"),
                "expected option name, found 'tables' at Line: 1, Column: 70",
            ),
            (
                with("(parallelism = 2);;"),
                "expected end of statement, found ; at Line: 1, Column: 87",
            ),
            (
                format!("CREATE SOURCE s FROM MYSQL '{URL}'; SELECT 1"),
                "expected end of statement, found SELECT",
            ),
            (
                "SHOW SOURCES LIKE 's%'".into(),
                "expected end of statement, found LIKE at Line: 1, Column: 14",
            ),
            (
                "DROP SOURCE".into(),
                "expected source name, found end of statement at Line: 1, Column: 12",
            ),
            (
                "DROP SOURCE IF s".into(),
                "expected EXISTS, found s at Line: 1, Column: 16",
            ),
            (
                "DROP SOURCE a, b".into(),
                "expected end of statement, found , at Line: 1, Column: 14",
            ),
            (
                "DROP SOURCE s CASCADE".into(),
                "expected end of statement, found CASCADE",
            ),
            (
                "ALTER SOURCE s".into(),
                "expected RESNAPSHOT or SET, found end of statement at Line: 1, Column: 15",
            ),
            (
                "ALTER SOURCE s RENAME TO t".into(),
                "expected RESNAPSHOT or SET, found RENAME at Line: 1, Column: 16",
            ),
            (
                "ALTER SOURCE RESNAPSHOT".into(),
                "expected source name (to name a source resnapshot, quote it",
            ),
            (
                "ALTER SOURCE s RESNAPSHOT TABLE orders".into(),
                "expected . between database and table name, found end of statement",
            ),
            (
                "ALTER SOURCE s RESNAPSHOT TABLE shop.".into(),
                "expected table name, found end of statement at Line: 1, Column: 38",
            ),
            (
                "ALTER SOURCE s RESNAPSHOT TABLE shop.orders.x".into(),
                "expected end of statement, found . at Line: 1, Column: 44",
            ),
            (
                "ALTER SOURCE s RESNAPSHOT TABLE `shop`.orders".into(),
                "expected database name (backticks are MySQL quoting",
            ),
        ];
        for (sql, fragment) in &cases {
            assert_error(sql, SqlState::SYNTAX_ERROR.code(), fragment);
        }
    }

    #[test]
    fn positions_count_lines_and_columns() {
        assert_error(
            "CREATE SOURCE s\n  FROM MYSQL 'mysql://u@h'\n  WITH (chunk_size = 5\n    parallelism = 2)",
            SqlState::SYNTAX_ERROR.code(),
            "found parallelism at Line: 4, Column: 5",
        );
    }

    #[test]
    fn an_unterminated_string_in_our_statement_is_a_syntax_error() {
        assert_error(
            "CREATE SOURCE s FROM MYSQL 'mysql://u:p@h",
            SqlState::SYNTAX_ERROR.code(),
            "syntax error: Unterminated string literal at Line: 1, Column: 28",
        );
        assert_error(
            "DROP SOURCE \"s",
            SqlState::SYNTAX_ERROR.code(),
            "syntax error: Expected close delimiter '\"' before EOF. at Line: 1, Column: 13",
        );
    }

    #[test]
    fn unsupported_forms_are_feature_not_supported() {
        assert_error(
            &format!("CREATE OR REPLACE SOURCE s FROM MYSQL '{URL}'"),
            SqlState::FEATURE_NOT_SUPPORTED.code(),
            "CREATE OR REPLACE SOURCE is not supported at Line: 1, Column: 8; \
             DROP SOURCE, then CREATE SOURCE",
        );
        assert_error(
            "CREATE SOURCE s FROM postgres 'postgres://u@h'",
            SqlState::FEATURE_NOT_SUPPORTED.code(),
            "source type POSTGRES is not supported at Line: 1, Column: 22; \
             MYSQL is the only source type (it also reads MariaDB)",
        );
        assert_error(
            "CREATE SOURCE s FROM MARIADB 'mysql://u@h'",
            SqlState::FEATURE_NOT_SUPPORTED.code(),
            "source type MARIADB is not supported",
        );
        // The driver would panic setting TLS up; the statement says what to do instead.
        assert_error(
            "CREATE SOURCE s FROM MYSQL 'mysql://u:secret@h:3306?require_ssl=true'",
            SqlState::FEATURE_NOT_SUPPORTED.code(),
            "TLS to the source (require_ssl in the URL) is not supported at Line: 1, \
             Column: 28; cdcfusion connects to MySQL and MariaDB without TLS",
        );
    }

    #[test]
    fn a_bad_url_is_named_with_its_password_masked() {
        let cases = [
            (
                "postgres://cdc:hunter2@h:5432",
                "invalid MySQL URL 'postgres://cdc:****@h:5432': Unsupported connection URL \
                 scheme `postgres' at Line: 1, Column: 28",
            ),
            (
                "mysql://cdc:hunter2@h:99999",
                "invalid MySQL URL 'mysql://cdc:****@h:99999': URL parse error: invalid port number",
            ),
            (
                "cdc:hunter2@h",
                "invalid MySQL URL 'cdc:****@h': ",
            ),
            (
                "mysql://cdc:hunter2@h/db?frobnicate=1",
                "Unknown connection URL parameter `frobnicate'",
            ),
        ];
        for (url, fragment) in cases {
            let sql = format!("CREATE SOURCE s FROM MYSQL '{url}'");
            assert_error(&sql, SqlState::INVALID_PARAMETER_VALUE.code(), fragment);
            let Err(e) = parse_cdc_statement(&sql) else {
                panic!("{sql} should fail");
            };
            assert!(!e.to_string().contains("hunter2"), "{e}");
            assert!(!format!("{e:?}").contains("hunter2"), "{e:?}");
        }
    }

    #[test]
    fn urls_are_taken_from_any_string_literal_form() {
        let url = |literal: &str| {
            create(&format!("CREATE SOURCE s FROM MYSQL {literal}"))
                .url
                .expose()
                .to_string()
        };
        assert_eq!(url("'mysql://u:it''s@h:3306'"), "mysql://u:it's@h:3306");
        assert_eq!(url("$$mysql://u:p@h$$"), "mysql://u:p@h");
        assert_eq!(url("E'mysql://u:p\\x40@h'"), "mysql://u:p@@h");
    }
}
