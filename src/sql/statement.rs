//! The statements cdcfusion handles itself, as typed values: what the grammar (`parse`)
//! produces, the engine runs, and `render` writes back.
//!
//! ```text
//! CREATE SOURCE [IF NOT EXISTS] name FROM MYSQL 'mysql://user:password@host:port[/db]'
//!     [WITH (option = value, ...)]
//! DROP SOURCE [IF EXISTS] name
//! SHOW SOURCES
//! ALTER SOURCE name RESNAPSHOT [TABLE db.table]
//! CREATE SINK [IF NOT EXISTS] name INTO PARQUET 'url' | POSTGRES 'url' TABLE 'schema.table'
//!     [WITH (option = value, ...)] AS query
//! EXPLAIN CREATE SINK ...
//! DROP SINK [IF EXISTS] name
//! SHOW SINKS
//! ALTER SINK name PAUSE | RESUME
//! ```
//!
//! # Invariant
//! A value of these types holds only what the grammar accepts: a source name as resolved
//! (folded unless it was quoted), a URL `mysql_async` takes ([`MySqlUrl`]), and options already
//! checked by the option table ([`SourceOptions`]), so whoever runs a statement checks nothing
//! about its text again.

use super::mysql_url::MySqlUrl;
use super::options::{SourceChanges, SourceOptions};
use crate::change::schema::TableId;
use crate::sinks::{SinkOptions, TargetSpec};

/// A statement cdcfusion handles itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CdcStatement {
    CreateSource(CreateSource),
    DropSource(DropSource),
    ShowSources,
    AlterSource(AlterSource),
    CreateSink(CreateSink),
    /// `EXPLAIN CREATE SINK ...`: the sink's plan, without creating it.
    ExplainSink(CreateSink),
    DropSink(DropSink),
    ShowSinks,
    AlterSink(AlterSink),
}

/// `CREATE SOURCE [IF NOT EXISTS] name FROM MYSQL 'url' [WITH (...)]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSource {
    pub name: String,
    pub if_not_exists: bool,
    pub url: MySqlUrl,
    pub options: SourceOptions,
}

/// `DROP SOURCE [IF EXISTS] name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropSource {
    pub name: String,
    pub if_exists: bool,
}

/// `ALTER SOURCE name action`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterSource {
    pub name: String,
    pub action: AlterSourceAction,
}

/// What an `ALTER SOURCE` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterSourceAction {
    /// `RESNAPSHOT [TABLE db.t]`: snapshot one table again, or every table when `None`.
    Resnapshot { table: Option<TableId> },
    /// `SET (option = value, ...)`: change options of the running source.
    Set(SourceChanges),
}

/// `CREATE SINK [IF NOT EXISTS] name INTO target [WITH (...)] AS query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSink {
    pub name: String,
    pub if_not_exists: bool,
    pub target: TargetSpec,
    pub options: SinkOptions,
    /// The query as written after `AS` (planned by DataFusion when the sink starts).
    pub query: String,
}

/// `DROP SINK [IF EXISTS] name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropSink {
    pub name: String,
    pub if_exists: bool,
}

/// `ALTER SINK name PAUSE | RESUME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterSink {
    pub name: String,
    /// True for `PAUSE`, false for `RESUME`.
    pub pause: bool,
}
