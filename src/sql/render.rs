//! Rendering cdcfusion's statements back to SQL, for `SHOW SOURCES` and logs.
//!
//! # Invariant
//! What a statement renders to parses back to the same statement (names are quoted exactly
//! when they would not read back as themselves), with two deliberate differences: options are
//! written out in full, defaults included, so `SHOW SOURCES` shows what a source really does;
//! and the URL's password is masked, so the text is safe to show and log.
//!
//! Sits beside the grammar, on the statement types: names are quoted by `names` (which the
//! grammar shares) and options are written by the option table, each row rendering its own.

use std::fmt;

use super::mysql_url::mask_password;
use super::names::{mysql_name_sql, quote_string, source_name_sql};
use super::options::MoveStart;
use super::statement::{
    AlterSink, AlterSource, AlterSourceAction, CdcStatement, CreateSink, CreateSource, DropSink,
    DropSource,
};
use crate::sinks::{format_duration, TargetSpec, DEFAULT_MAX_COMMIT_ENTRIES};

impl fmt::Display for CreateSource {
    /// The password is masked: see the module docs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let if_not_exists = if self.if_not_exists {
            "IF NOT EXISTS "
        } else {
            ""
        };
        write!(
            f,
            "CREATE SOURCE {if_not_exists}{} FROM MYSQL {} WITH ({})",
            source_name_sql(&self.name),
            quote_string(&self.url.masked()),
            self.options
        )
    }
}

impl CreateSource {
    /// The statement with the real password: only for the engine's own catalog, which must
    /// reconnect after a restart (see `durable::catalog`); never for display or logs.
    pub fn to_sql_with_password(&self) -> String {
        format!(
            "CREATE SOURCE {} FROM MYSQL {} WITH ({})",
            source_name_sql(&self.name),
            quote_string(self.url.expose()),
            self.options
        )
    }
}

impl fmt::Display for DropSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let if_exists = if self.if_exists { "IF EXISTS " } else { "" };
        write!(f, "DROP SOURCE {if_exists}{}", source_name_sql(&self.name))
    }
}

impl fmt::Display for AlterSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ALTER SOURCE {}", source_name_sql(&self.name))?;
        match &self.action {
            AlterSourceAction::Resnapshot { table: None } => f.write_str(" RESNAPSHOT"),
            AlterSourceAction::Resnapshot { table: Some(t) } => write!(
                f,
                " RESNAPSHOT TABLE {}.{}",
                mysql_name_sql(&t.db),
                mysql_name_sql(&t.table)
            ),
            AlterSourceAction::Set(changes) => {
                write!(f, " SET ({changes})")?;
                if changes.start == Some(MoveStart::Resnapshot) {
                    f.write_str(" RESNAPSHOT")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for CdcStatement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CdcStatement::CreateSource(s) => s.fmt(f),
            CdcStatement::DropSource(s) => s.fmt(f),
            CdcStatement::ShowSources => f.write_str("SHOW SOURCES"),
            CdcStatement::AlterSource(s) => s.fmt(f),
            CdcStatement::CreateSink(s) => s.fmt(f),
            CdcStatement::ExplainSink(s) => write!(f, "EXPLAIN {s}"),
            CdcStatement::DropSink(s) => s.fmt(f),
            CdcStatement::ShowSinks => f.write_str("SHOW SINKS"),
            CdcStatement::AlterSink(s) => s.fmt(f),
        }
    }
}

/// A sink's target as the statement writes it, each URL through `url` (masking or not).
fn target_sql(target: &TargetSpec, url: impl Fn(&str) -> String) -> String {
    match target {
        TargetSpec::Delta { url: u } => format!("DELTA {}", quote_string(&url(u))),
        TargetSpec::Parquet { url: u } => format!("PARQUET {}", quote_string(&url(u))),
        TargetSpec::Postgres { url: u, table } => format!(
            "POSTGRES {} TABLE {}",
            quote_string(&url(u)),
            quote_string(table)
        ),
    }
}

impl CreateSink {
    /// The target as status and `EXPLAIN` show it: password masked.
    pub fn target_sql(&self) -> String {
        target_sql(&self.target, mask_password)
    }

    /// The statement, with the target's password masked unless `password`.
    fn render(&self, f: &mut impl fmt::Write, password: bool) -> fmt::Result {
        // The catalog's copy creates the sink it names, whatever the original said.
        let if_not_exists = if self.if_not_exists && !password {
            "IF NOT EXISTS "
        } else {
            ""
        };
        let url = |u: &str| {
            if password {
                u.to_string()
            } else {
                mask_password(u)
            }
        };
        write!(
            f,
            "CREATE SINK {if_not_exists}{} INTO {}",
            source_name_sql(&self.name),
            target_sql(&self.target, url)
        )?;
        let o = &self.options;
        f.write_str(" WITH (")?;
        if let Some(mode) = o.mode {
            write!(f, "mode = '{}', ", mode.name())?;
        }
        write!(
            f,
            "start = {}, commit_interval = '{}', schema_changes = '{}'",
            quote_string(&o.start.to_string()),
            format_duration(o.commit_interval),
            o.schema_changes.name(),
        )?;
        if o.max_commit_entries != DEFAULT_MAX_COMMIT_ENTRIES {
            write!(f, ", max_commit_entries = {}", o.max_commit_entries)?;
        }
        write!(f, ") AS {}", self.query)
    }

    /// The statement with the target's real password: only for the engine's own catalog.
    pub fn to_sql_with_password(&self) -> String {
        let mut out = String::new();
        let _ = self.render(&mut out, true);
        out
    }
}

impl fmt::Display for CreateSink {
    /// The target's password is masked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.render(f, false)
    }
}

impl fmt::Display for DropSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let if_exists = if self.if_exists { "IF EXISTS " } else { "" };
        write!(f, "DROP SINK {if_exists}{}", source_name_sql(&self.name))
    }
}

impl fmt::Display for AlterSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let action = if self.pause { "PAUSE" } else { "RESUME" };
        write!(f, "ALTER SINK {} {action}", source_name_sql(&self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::schema::TableId;
    use crate::sql::parse_cdc_statement;

    fn parse(sql: &str) -> CdcStatement {
        match parse_cdc_statement(sql) {
            Ok(Some(statement)) => statement,
            other => panic!("{sql:?} should parse, got {other:?}"),
        }
    }

    #[test]
    fn create_source_renders_in_full_with_the_password_masked() {
        let sql = "create source if not exists \"Shop Replica\" from mysql \
                   'mysql://cdc:hunter2@db.example:3306/shop' with (parallelism = 8)";
        let rendered = parse(sql).to_string();
        assert_eq!(
            rendered,
            "CREATE SOURCE IF NOT EXISTS \"Shop Replica\" FROM MYSQL \
             'mysql://cdc:****@db.example:3306/shop' WITH (tables = '*.*', chunk_size = 8096, \
             parallelism = 8, snapshot_mode = 'initial', server_id = 5400)"
        );
        assert!(!format!("{:?}", parse(sql)).contains("hunter2"));
    }

    #[test]
    fn statements_parse_back_to_themselves() {
        for sql in [
            "CREATE SOURCE s FROM MYSQL 'mysql://cdc@h:3306' WITH (tables = 'shop.*', \
             chunk_key = 'shop.items:c', snapshot_mode = 'stream_only', \
             start_position = 'binlog.000007:120', server_id = 77)",
            "CREATE SOURCE IF NOT EXISTS \"from\" FROM MYSQL 'mysql://h'",
            "CREATE SOURCE \"say \"\"hi\"\"\" FROM MYSQL 'mysql://u@h/db?prefer_socket=false'",
            "DROP SOURCE \"My Source\"",
            "DROP SOURCE IF EXISTS \"1st\"",
            "DROP SOURCE \"with\"",
            "SHOW SOURCES",
            "ALTER SOURCE s RESNAPSHOT",
            "ALTER SOURCE \"S\" RESNAPSHOT TABLE Shop.\"order items\"",
            "ALTER SOURCE s RESNAPSHOT TABLE \"my-db\".t$1",
        ] {
            let statement = parse(sql);
            let rendered = statement.to_string();
            assert_eq!(
                parse(&rendered),
                statement,
                "{sql:?} rendered as {rendered:?}"
            );
        }
    }

    #[test]
    fn alter_and_drop_render_names_as_written() {
        let alter = AlterSource {
            name: "s".into(),
            action: AlterSourceAction::Resnapshot {
                table: Some(TableId::new("shop", "Orders")),
            },
        };
        assert_eq!(
            alter.to_string(),
            "ALTER SOURCE s RESNAPSHOT TABLE shop.Orders"
        );
        assert_eq!(
            DropSource {
                name: "s".into(),
                if_exists: true
            }
            .to_string(),
            "DROP SOURCE IF EXISTS s"
        );
    }
}
