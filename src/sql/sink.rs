//! The grammar of the sink statements: `CREATE SINK`, `DROP SINK`, `ALTER SINK`, and the
//! options a sink takes.
//!
//! # Invariant
//! A parsed `CREATE SINK` names a target its kind accepts (a Parquet directory or object
//! store URL; a `postgresql://` URL, whose password is masked whenever it is shown, and a
//! table) and options of the right type; its query is kept as written after `AS`, for
//! DataFusion to plan when the sink starts, so no query text is interpreted twice.

use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Location, Token};

use super::error::SqlError;
use super::grammar::{is_word, Grammar, NameKind};
use super::mysql_url::mask_password;
use super::statement::{AlterSink, CreateSink, DropSink};
use super::value::{Literal, RawOption};
use crate::sinks::{parse_duration, SchemaChanges, SinkMode, SinkOptions, StartAt, TargetSpec};

/// The options a sink takes, with what each accepts.
pub const SINK_OPTIONS: [(&str, &str); 5] = [
    ("mode", "'changelog' | 'upsert'"),
    ("start", "'snapshot' | 'now' | '<position>'"),
    ("commit_interval", "a duration such as '5s' or '500ms'"),
    ("schema_changes", "'follow' | 'stop'"),
    ("max_commit_entries", "an integer from 1 to 100000000"),
];

/// The byte offset of `location` (line and column, 1-based, in characters) in `text`.
fn offset_of(text: &str, location: Location) -> usize {
    let mut line = 1;
    let mut column = 1;
    for (i, c) in text.char_indices() {
        if line == location.line && column == location.column {
            return i;
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    text.len()
}

/// Sets the option `option` (one of [`SINK_OPTIONS`]) from `literal`.
fn set_sink_option(
    option: &str,
    literal: &Literal<'_>,
    options: &mut SinkOptions,
) -> Result<(), SqlError> {
    if option == "max_commit_entries" {
        options.max_commit_entries = literal.integer_in(1..=100_000_000)?;
        return Ok(());
    }
    let text = literal.string()?.to_string();
    let invalid = |message: String| literal.invalid(message);
    match option {
        "mode" => {
            options.mode = Some(match text.to_ascii_lowercase().as_str() {
                "changelog" => SinkMode::Changelog,
                "upsert" => SinkMode::Upsert,
                _ => {
                    return Err(invalid(format!(
                        "expected 'changelog' or 'upsert', found '{text}'"
                    )))
                }
            });
        }
        "start" => {
            options.start = match text.to_ascii_lowercase().as_str() {
                "snapshot" => StartAt::Snapshot,
                "now" => StartAt::Now,
                _ if text.contains(':') => StartAt::After(text),
                _ => {
                    return Err(invalid(format!(
                        "expected 'snapshot', 'now' or a _position such as 'mariadb-bin.000002:000000000342:0000000001:0000000000:0', found '{text}'"
                    )))
                }
            };
        }
        "commit_interval" => {
            options.commit_interval = parse_duration(&text).map_err(invalid)?;
        }
        "schema_changes" => {
            options.schema_changes = match text.to_ascii_lowercase().as_str() {
                "follow" => SchemaChanges::Follow,
                "stop" => SchemaChanges::Stop,
                _ => {
                    return Err(invalid(format!(
                        "expected 'follow' or 'stop', found '{text}'"
                    )))
                }
            };
        }
        other => return Err(invalid(format!("{other} is not an option of CREATE SINK"))),
    }
    Ok(())
}

impl Grammar<'_> {
    /// `CREATE SINK ...`; `text` is the whole statement, to take the query from.
    pub(super) fn create_sink(&mut self, text: &str) -> Result<CreateSink, SqlError> {
        self.expect_keyword(Keyword::CREATE)?;
        self.expect_word("SINK")?;
        let if_not_exists = self.keyword(Keyword::IF);
        if if_not_exists {
            self.expect_keyword(Keyword::NOT)?;
            self.expect_keyword(Keyword::EXISTS)?;
        }
        let (name, _) = self.name(NameKind::Source, "sink name")?;
        self.expect_keyword(Keyword::INTO)?;
        let target = self.sink_target()?;
        let options = if self.keyword(Keyword::WITH) {
            self.sink_options()?
        } else {
            SinkOptions::default()
        };
        self.expect_keyword(Keyword::AS)?;
        let start = self.next_location();
        if matches!(self.parser.peek_token_ref().token, Token::EOF) {
            return Err(self.expected("the sink's query after AS"));
        }
        let query = text[offset_of(text, start)..]
            .trim_end()
            .trim_end_matches(';')
            .trim_end()
            .to_string();
        // The query is DataFusion's: skip its tokens.
        while !matches!(self.parser.peek_token_ref().token, Token::EOF) {
            self.parser.advance_token();
        }
        Ok(CreateSink {
            name,
            if_not_exists,
            target,
            options,
            query,
        })
    }

    /// `DELTA 'url'`, `PARQUET 'url'` or `POSTGRES 'url' TABLE 'schema.table'`.
    fn sink_target(&mut self) -> Result<TargetSpec, SqlError> {
        let next = self.parser.peek_token_ref();
        let kind = match &next.token {
            Token::Word(w) if w.quote_style.is_none() => w.value.to_uppercase(),
            _ => return Err(self.expected("DELTA, PARQUET or POSTGRES")),
        };
        match kind.as_str() {
            "PARQUET" => {
                self.parser.advance_token();
                let (url, _) =
                    self.string("the target directory or object store URL as a string literal")?;
                Ok(TargetSpec::Parquet { url })
            }
            "POSTGRES" | "POSTGRESQL" => {
                self.parser.advance_token();
                let (url, url_location) = self.string("the PostgreSQL URL as a string literal")?;
                if !(url.starts_with("postgresql://") || url.starts_with("postgres://")) {
                    return Err(SqlError::InvalidValue {
                        option: "POSTGRES",
                        message: format!(
                            "expected a URL such as 'postgresql://user@host:5432/db', found '{}'",
                            mask_password(&url)
                        ),
                        location: Some(url_location),
                    });
                }
                self.expect_keyword(Keyword::TABLE)?;
                let (table, _) =
                    self.string("the target table as a string literal ('schema.table')")?;
                Ok(TargetSpec::Postgres { url, table })
            }
            "DELTA" => {
                self.parser.advance_token();
                let (url, _) = self.string(
                    "the Delta table's directory or object store URL as a string literal",
                )?;
                Ok(TargetSpec::Delta { url })
            }
            _ => Err(self.expected("DELTA, PARQUET or POSTGRES")),
        }
    }

    /// `( name = 'value' [, ...] )`.
    fn sink_options(&mut self) -> Result<SinkOptions, SqlError> {
        self.expect_token(&Token::LParen, "( after WITH")?;
        let mut options = SinkOptions::default();
        let mut seen: Vec<&'static str> = Vec::new();
        loop {
            let (name, name_location) = self.name(NameKind::Option, "option name")?;
            let Some(&(option, _)) = SINK_OPTIONS.iter().find(|(n, _)| *n == name) else {
                return Err(SqlError::UnknownOption {
                    name,
                    known: SINK_OPTIONS.iter().map(|(n, _)| *n).collect(),
                    location: Some(name_location),
                });
            };
            if seen.contains(&option) {
                return Err(SqlError::DuplicateOption {
                    option,
                    location: Some(name_location),
                });
            }
            seen.push(option);
            self.expect_token(&Token::Eq, &format!("= after option name {option}"))?;
            let value_location = self.next_location();
            let value = self
                .parser
                .parse_expr()
                .map_err(|source| SqlError::Expression { option, source })?;
            let item = RawOption {
                name: name.clone(),
                name_location,
                value,
                value_location,
            };
            let literal = Literal {
                option,
                item: &item,
            };
            set_sink_option(option, &literal, &mut options)?;
            if self.parser.consume_token(&Token::RParen) {
                break;
            }
            self.expect_token(
                &Token::Comma,
                &format!(", or ) after the value of option {option}"),
            )?;
        }
        Ok(options)
    }

    pub(super) fn drop_sink(&mut self) -> Result<DropSink, SqlError> {
        self.expect_keyword(Keyword::DROP)?;
        self.expect_word("SINK")?;
        let if_exists = self.keyword(Keyword::IF);
        if if_exists {
            self.expect_keyword(Keyword::EXISTS)?;
        }
        let (name, _) = self.name(NameKind::Source, "sink name")?;
        Ok(DropSink { name, if_exists })
    }

    pub(super) fn alter_sink(&mut self) -> Result<AlterSink, SqlError> {
        self.expect_keyword(Keyword::ALTER)?;
        self.expect_word("SINK")?;
        let (name, _) = self.name(NameKind::Source, "sink name")?;
        let pause = match &self.parser.peek_token_ref().token {
            t if is_word(t, "PAUSE") => true,
            t if is_word(t, "RESUME") => false,
            _ => return Err(self.expected("PAUSE or RESUME")),
        };
        self.parser.advance_token();
        Ok(AlterSink { name, pause })
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse_cdc_statement;
    use super::super::statement::CdcStatement;
    use super::*;
    use crate::sqlstate::HasSqlState;
    use crate::sqlstate::SqlState;
    use std::time::Duration;

    fn create(sql: &str) -> CreateSink {
        match parse_cdc_statement(sql) {
            Ok(Some(CdcStatement::CreateSink(c))) => c,
            other => panic!("{sql:?}: {other:?}"),
        }
    }

    fn error(sql: &str) -> SqlError {
        match parse_cdc_statement(sql) {
            Err(e) => e,
            other => panic!("{sql:?} should fail: {other:?}"),
        }
    }

    #[test]
    fn create_sink_keeps_its_query_as_written_and_renders_back() {
        let sql = "CREATE SINK IF NOT EXISTS Orders INTO POSTGRES 'postgresql://app:pw@db/x' TABLE 'public.orders'\n  WITH (commit_interval = '500ms', start = 'now', schema_changes = 'stop')\n  AS SELECT id, total * 2 AS t FROM shop.app.\"orders$changelog\" WHERE total > 0;";
        let c = create(sql);
        assert_eq!(c.name, "orders");
        assert!(c.if_not_exists);
        assert_eq!(
            c.target,
            TargetSpec::Postgres {
                url: "postgresql://app:pw@db/x".into(),
                table: "public.orders".into()
            }
        );
        assert_eq!(c.options.commit_interval, Duration::from_millis(500));
        assert_eq!(c.options.start, StartAt::Now);
        assert_eq!(c.options.schema_changes, SchemaChanges::Stop);
        assert_eq!(
            c.query,
            "SELECT id, total * 2 AS t FROM shop.app.\"orders$changelog\" WHERE total > 0"
        );
        let shown = c.to_string();
        assert!(shown.contains("postgresql://app:****@db/x"), "{shown}");
        // What the catalog keeps reads back as the same statement.
        let again = create(&c.to_sql_with_password());
        assert_eq!(
            again,
            CreateSink {
                if_not_exists: false,
                ..c
            }
        );
        let d = create("create sink d into delta 's3://lake/t' as select * from s.d.t");
        assert_eq!(
            d.target,
            TargetSpec::Delta {
                url: "s3://lake/t".into()
            }
        );
        assert_eq!(create(&d.to_string()), d);
        let p = create(
            "create sink p into parquet 'file:///tmp/x' as select * from s.d.\"t$changelog\"",
        );
        assert_eq!(p.options, SinkOptions::default());
        assert_eq!(create(&p.to_string()), p);
        let bounded = create(
            "create sink b into parquet '/tmp/x' with (max_commit_entries = 500) as select * from s.d.\"t$changelog\"",
        );
        assert_eq!(bounded.options.max_commit_entries, 500);
        assert!(bounded.to_string().contains("max_commit_entries = 500"));
        assert_eq!(create(&bounded.to_sql_with_password()), bounded);
    }

    #[test]
    fn sink_statements_refuse_what_they_cannot_do_with_a_clear_error() {
        let e = error("CREATE SINK s INTO ICEBERG 's3://b/p' AS SELECT 1");
        assert!(e.to_string().contains("DELTA, PARQUET or POSTGRES"), "{e}");
        let e = error("CREATE SINK s INTO PARQUET '/tmp/x' WITH (mode = 'merge') AS SELECT 1");
        assert!(e.to_string().contains("'changelog' or 'upsert'"), "{e}");
        let e = error("CREATE SINK s INTO PARQUET '/tmp/x' WITH (interval = '5s') AS SELECT 1");
        assert!(e.to_string().contains("commit_interval"), "{e}");
        let e =
            error("CREATE SINK s INTO PARQUET '/tmp/x' WITH (commit_interval = '0s') AS SELECT 1");
        assert_eq!(e.sqlstate(), SqlState::INVALID_PARAMETER_VALUE, "{e}");
        for bad in ["0", "'10'", "-3", "100000001"] {
            let e = error(&format!(
                "CREATE SINK s INTO PARQUET '/tmp/x' WITH (max_commit_entries = {bad}) AS SELECT 1"
            ));
            assert!(e.to_string().contains("max_commit_entries"), "{bad}: {e}");
            assert_eq!(
                e.sqlstate(),
                SqlState::INVALID_PARAMETER_VALUE,
                "{bad}: {e}"
            );
        }
        let e = error("CREATE SINK s INTO POSTGRES 'mysql://x' TABLE 't' AS SELECT 1");
        assert!(e.to_string().contains("postgresql://"), "{e}");
        let e = error("CREATE SINK s INTO PARQUET '/tmp/x'");
        assert!(e.to_string().contains("AS"), "{e}");
        let e = error("CREATE SINK s INTO PARQUET '/tmp/x' AS");
        assert!(e.to_string().contains("query"), "{e}");
        let e = error("ALTER SINK s STOP");
        assert!(e.to_string().contains("PAUSE or RESUME"), "{e}");
    }

    #[test]
    fn drop_show_alter_and_explain_parse() {
        assert!(matches!(
            parse_cdc_statement("DROP SINK IF EXISTS s"),
            Ok(Some(CdcStatement::DropSink(DropSink {
                if_exists: true,
                ..
            })))
        ));
        assert!(matches!(
            parse_cdc_statement("show sinks;"),
            Ok(Some(CdcStatement::ShowSinks))
        ));
        assert!(matches!(
            parse_cdc_statement("ALTER SINK s PAUSE"),
            Ok(Some(CdcStatement::AlterSink(AlterSink { pause: true, .. })))
        ));
        assert!(matches!(
            parse_cdc_statement("ALTER SINK s resume"),
            Ok(Some(CdcStatement::AlterSink(AlterSink {
                pause: false,
                ..
            })))
        ));
        assert!(matches!(
            parse_cdc_statement(
                "EXPLAIN CREATE SINK s INTO PARQUET '/x' AS SELECT * FROM a.b.\"c$changelog\""
            ),
            Ok(Some(CdcStatement::ExplainSink(_)))
        ));
        // Other EXPLAINs stay DataFusion's.
        assert!(matches!(parse_cdc_statement("EXPLAIN SELECT 1"), Ok(None)));
    }
}
