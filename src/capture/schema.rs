//! Following a DDL statement of the binlog on the captured table it changes.
//!
//! # Invariant
//! The schema a captured table has at a position is the one the DDL history up to that
//! position gives (`source::evolve`), and the rows decoded after it must agree with it: the
//! binlog decoder derives each row event's schema from the server and the table map on its own,
//! and a difference stops the table ([`mismatch`]) instead of decoding rows under a schema
//! that is not theirs. A statement whose effect is not exact stops the table with the fix;
//! it never converts the state approximately.

use std::sync::Arc;

use sqlparser::ast::{CreateTableLikeKind, Statement};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

use crate::change::position::BinlogCoord;
use crate::change::schema::{Charset, TableId, TableSchema};
use crate::change::{Ddl, SourceTransaction};
use crate::source::ddl::resolve;
use crate::source::error::{SourceError, SourceResult};
use crate::source::evolve::{ddl_effect, DdlEffect};
use crate::state::merge::{ChangelogEvent, TableState};

/// A change of a captured table's columns that the capture followed.
#[derive(Debug, Clone)]
pub struct SchemaChange {
    /// Index into the capture's tables.
    pub table: usize,
    /// Where the transaction of the statement starts.
    pub position: BinlogCoord,
    /// Commit time of the statement (µs since the epoch).
    pub commit_ts_micros: i64,
    /// The statement as the server logged it.
    pub statement: String,
    pub before: Arc<TableSchema>,
    pub after: Arc<TableSchema>,
}

/// The fix a stopped table's reason ends with.
fn resnapshot_fix(table: &TableSchema) -> String {
    format!(
        "ALTER SOURCE ... RESNAPSHOT TABLE {} reads it again under its new schema",
        table.id
    )
}

/// Why rows of `decoded`'s schema cannot be applied to a table whose DDL history gives
/// `expected`.
pub(super) fn mismatch(expected: &TableSchema, decoded: &TableSchema) -> String {
    format!(
        "its rows in the binlog have columns ({}) but its DDL history gives ({}); {}",
        describe_columns(decoded),
        describe_columns(expected),
        resnapshot_fix(expected)
    )
}

/// A table's columns as one line: `id bigint not null, name text, ...` (key columns marked).
pub fn describe_columns(table: &TableSchema) -> String {
    table
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let null = if c.nullable { "" } else { " not null" };
            let key = if table.primary_key.contains(&i) {
                " key"
            } else {
                ""
            };
            format!("{} {}{null}{key}", c.name, c.kind.mysql_type())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// At most 200 characters of a statement, for messages.
pub(super) fn short(statement: &str) -> String {
    statement.chars().take(200).collect()
}

/// What following one DDL did to one table.
pub(super) enum Followed {
    /// Nothing changed for the table.
    Nothing,
    /// Rows were removed (a `TRUNCATE`): their `d` entries.
    Deleted(Vec<ChangelogEvent>),
    /// The table has a new schema; its state is converted.
    Evolved(Arc<TableSchema>),
    /// The table has other secondary indexes, nothing else changed (same schema version: the
    /// rows, their changelog and every reader's columns are as they were).
    Reindexed(Arc<TableSchema>),
    /// The table is renamed (the caller renames it, or stops it when the source does not
    /// select the new name).
    Renamed(TableId),
    /// The table cannot be followed: why, with the fix.
    Stop(String),
    /// The table was dropped (the caller deletes its rows and stops it as dropped).
    Dropped,
    /// The table was replaced whole: the engine reads it again (`TableStop::read_again`).
    ReadAgain(String),
}

/// Whether `ddl` drops the table of schema `before`.
pub(super) fn drops(before: &TableSchema, ddl: &Ddl) -> bool {
    let charset = before.table_charset().ok().flatten();
    matches!(
        ddl_effect(&ddl.db, &ddl.statement, before, charset),
        DdlEffect::Gone { renamed_to: None }
    )
}

/// Applies what `ddl` (in `tx`) does to a table of schema `before` and state `state`; see the
/// module docs.
pub(super) fn follow_ddl(
    before: &Arc<TableSchema>,
    state: &mut TableState,
    ddl: &Ddl,
    tx: &SourceTransaction,
) -> SourceResult<Followed> {
    let statement = short(&ddl.statement);
    let stop = |reason: String| {
        Followed::Stop(format!("the statement `{statement}` changed it: {reason}"))
    };
    let charset = match before.table_charset() {
        Ok(charset) => charset,
        Err(e) => return Ok(stop(e)),
    };
    Ok(match ddl_effect(&ddl.db, &ddl.statement, before, charset) {
        DdlEffect::Unchanged => Followed::Nothing,
        DdlEffect::Reindexed(indexes) => {
            let after = Arc::new(before.as_ref().clone().with_indexes(indexes));
            match state.reindex(Arc::clone(&after)) {
                Ok(()) => {
                    tracing::info!(table = %before.id, at = %tx.start, indexes = after.indexes.len(), %statement, "followed a change of indexes");
                    Followed::Reindexed(after)
                }
                Err(e) => stop(format!(
                    "its indexes could not be changed ({e}); {}",
                    resnapshot_fix(before)
                )),
            }
        }
        // A plain CREATE of a table that exists fails on the server and is not logged (and
        // `IF NOT EXISTS` is `Unchanged`), so this is MariaDB's `CREATE OR REPLACE TABLE`, or a
        // table dropped where the binlog did not see it: whatever its rows and columns are
        // now, reading it again finds them, and its changelog gets the difference.
        DdlEffect::Created(_) => Followed::ReadAgain(format!(
            "the statement `{statement}` replaced it; it is read again"
        )),
        DdlEffect::Truncate => {
            let mut events = Vec::new();
            state
                .truncate(tx, &mut events)
                .map_err(|e| SourceError::arrow(format!("truncating {}", before.id), e))?;
            Followed::Deleted(events)
        }
        DdlEffect::Gone {
            renamed_to: Some(to),
        } => Followed::Renamed(to),
        DdlEffect::Gone { renamed_to: None } => Followed::Dropped,
        DdlEffect::Unfollowable(why) => stop(format!("{why}; {}", resnapshot_fix(before))),
        DdlEffect::Evolve(evolution) => {
            let after = Arc::new(
                evolution
                    .after
                    .with_version(before.version + 1)
                    .with_default_charset(before.default_charset.clone()),
            );
            match state.evolve(Arc::clone(&after), &evolution.origins, &tx.start) {
                Ok(()) => {
                    tracing::info!(table = %before.id, at = %tx.start, version = after.version, %statement, "followed a schema change");
                    Followed::Evolved(after)
                }
                Err(e) => stop(format!(
                    "its state could not be converted ({e}); {}",
                    resnapshot_fix(before)
                )),
            }
        }
    })
}

/// Where the schema of a table created by a statement comes from.
pub(super) enum CreatedSchema {
    /// The statement spells its columns.
    Spelled(TableSchema),
    /// `CREATE TABLE ... LIKE` this table: its schema at the statement, when it is captured
    /// (an online migration's shadow table), else the server's.
    Like(TableId),
    /// The server's, read when the statement is read (`CREATE TABLE ... AS SELECT` that does
    /// not spell its columns).
    FromServer,
    /// The statement does not create the table (a rename onto its name brings rows the
    /// capture has not read: such a table is not captured).
    NotCreated,
}

/// How `ddl` creates table `id`, if it does.
pub(super) fn created_schema(id: &TableId, ddl: &Ddl) -> CreatedSchema {
    let creates = ddl
        .statement
        .trim_start()
        .get(..6)
        .is_some_and(|w| w.eq_ignore_ascii_case("CREATE"));
    if !creates {
        return CreatedSchema::NotCreated;
    }
    let placeholder = TableSchema::new(id.clone(), Vec::new(), Vec::new());
    // A new table without its own character set gets its database's; utf8mb4 is the servers'
    // default, and the table map check catches any other.
    match ddl_effect(&ddl.db, &ddl.statement, &placeholder, Some(Charset::Utf8)) {
        DdlEffect::Created(Some(table)) => CreatedSchema::Spelled(table),
        DdlEffect::Created(None) => match like_source(ddl) {
            Some(like) => CreatedSchema::Like(like),
            None => CreatedSchema::FromServer,
        },
        _ => CreatedSchema::NotCreated,
    }
}

/// The table a `CREATE TABLE ... LIKE` copies.
fn like_source(ddl: &Ddl) -> Option<TableId> {
    let statements = Parser::parse_sql(&MySqlDialect {}, &ddl.statement).ok()?;
    let Some(Statement::CreateTable(create)) = statements.first() else {
        return None;
    };
    let name = match create.like.as_ref()? {
        CreateTableLikeKind::Parenthesized(like) | CreateTableLikeKind::Plain(like) => &like.name,
    };
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident().map(|i| i.value.clone()))
        .collect();
    resolve(&parts, &ddl.db)
}
