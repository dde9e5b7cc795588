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
//! CREATE USER | ROLE ..., ALTER USER | ROLE ..., DROP USER | ROLE ..., GRANT ..., REVOKE ...
//! ```
//!
//! The user statements ([`UserStatement`], grammar in `users`) are run by the front end, which
//! holds the users, not by the engine.
//!
//! # Invariant
//! A value of these types holds only what the grammar accepts: a source name as resolved
//! (folded unless it was quoted), a URL `mysql_async` takes ([`MySqlUrl`]), and options already
//! checked by the option table ([`SourceOptions`]), a role among the two there are, and a
//! password that is not a hash, so whoever runs a statement checks nothing about its text
//! again.

use std::fmt;

use serde::Deserialize;

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

/// What a user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Queries, `SHOW`, `EXPLAIN`, `COPY ... TO STDOUT` and session settings.
    Reader,
    /// Everything: also create, alter and drop sources, sinks and users, and write files.
    Admin,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Reader => "reader",
        }
    }

    /// The role called `name` (as resolved from SQL: folded unless quoted).
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "admin" => Some(Self::Admin),
            "reader" => Some(Self::Reader),
            _ => None,
        }
    }
}

/// A password as a statement gives it: read by whoever derives its verifiers, never shown
/// (its `Debug` is masked and it has no `Display`).
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// A password the grammar has checked (not empty, not already hashed).
    pub(super) fn new(text: String) -> Self {
        Self(text)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(****)")
    }
}

/// A statement that manages users (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserStatement {
    Create(CreateUser),
    /// `ALTER USER | ROLE name ...`: a new password, or (options that change nothing) none.
    Alter {
        name: String,
        password: Option<Password>,
    },
    Drop {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `GRANT role TO users`; granting `reader` changes nothing.
    Grant {
        role: Role,
        users: Vec<String>,
    },
    /// `REVOKE admin FROM users`: they are readers again.
    RevokeAdmin {
        users: Vec<String>,
    },
}

/// `CREATE USER` or `CREATE ROLE ... LOGIN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateUser {
    pub name: String,
    pub if_not_exists: bool,
    pub password: Password,
    /// `reader` unless `IN ROLE admin`.
    pub role: Role,
}

impl UserStatement {
    /// PostgreSQL's command tag (`CREATE USER` answers `CREATE ROLE` there too).
    pub fn tag(&self) -> &'static str {
        match self {
            Self::Create(_) => "CREATE ROLE",
            Self::Alter { .. } => "ALTER ROLE",
            Self::Drop { .. } => "DROP ROLE",
            Self::Grant { .. } => "GRANT ROLE",
            Self::RevokeAdmin { .. } => "REVOKE ROLE",
        }
    }
}
