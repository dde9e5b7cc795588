//! The error boundary of the MySQL/MariaDB source.
//!
//! Variants are grouped by what the caller should do: [`SourceError::is_transient`] errors
//! (connection lost, server restarting, a read that got no answer within the read timeout) are
//! retried with backoff and resume from the last complete transaction; every other error is
//! *definite*: the source stops and says why, naming the setting, privilege, table, column or
//! binlog position at fault. The kind is decided where the error is raised, from the driver's
//! error type or the server's error code, never from a message.

use std::sync::Arc;
use std::time::Duration;

use crate::change::position::BinlogCoord;
use crate::sqlstate::{HasSqlState, SqlState};

/// The MySQL/MariaDB server error codes the capture acts on, by their server names.
pub mod codes {
    /// `ER_DBACCESS_DENIED_ERROR`
    pub const DB_ACCESS_DENIED: u16 = 1044;
    /// `ER_ACCESS_DENIED_ERROR`
    pub const ACCESS_DENIED: u16 = 1045;
    /// `ER_SERVER_SHUTDOWN`
    pub const SERVER_SHUTDOWN: u16 = 1053;
    /// `ER_CON_COUNT_ERROR`
    pub const TOO_MANY_CONNECTIONS: u16 = 1040;
    /// `ER_BAD_FIELD_ERROR`: a statement names a column the table no longer has.
    pub const BAD_FIELD: u16 = 1054;
    /// `ER_UNKNOWN_SYSTEM_VARIABLE`
    pub const UNKNOWN_SYSTEM_VARIABLE: u16 = 1193;
    /// `ER_TOO_MANY_USER_CONNECTIONS`
    pub const TOO_MANY_USER_CONNECTIONS: u16 = 1203;
    /// `ER_LOCK_WAIT_TIMEOUT` (also what MariaDB's `NOWAIT` answers on a lock)
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// `ER_LOCK_DEADLOCK`
    pub const LOCK_DEADLOCK: u16 = 1213;
    /// `ER_MASTER_FATAL_ERROR_READING_BINLOG`: a purged or unknown file or GTID.
    pub const FATAL_ERROR_READING_BINLOG: u16 = 1236;
    /// `ER_QUERY_INTERRUPTED`
    pub const QUERY_INTERRUPTED: u16 = 1317;
    /// `ER_LOCK_NOWAIT` (MySQL)
    pub const LOCK_NOWAIT: u16 = 3572;
    /// MariaDB's `ER_SLAVE_SAME_ID`: another replica connection with the same server id, e.g.
    /// our own earlier dump that the server has not noticed is gone yet.
    pub const SLAVE_SAME_ID: u16 = 4052;
}

/// Anything that stops or interrupts capture from one server.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The network or the server failed in a way that a retry can fix.
    #[error("transient MySQL error while {context}: {source}")]
    Transient {
        context: String,
        #[source]
        source: mysql_async::Error,
    },
    /// The server sent nothing for a whole read timeout (a stalled connection, a paused or
    /// overloaded server): the connection is given up and the work retried on a new one.
    #[error("no answer from the MySQL server within {} ms while {context}; retrying on a new connection", after.as_millis())]
    ReadTimeout { context: String, after: Duration },
    /// The snapshot's shared window reader stopped; every chunk waiting on it fails with its
    /// error, transient or definite as the reader's own.
    #[error("the snapshot's binlog reader failed: {0}")]
    WindowReader(Arc<SourceError>),
    /// The server could not be reached after all retries.
    #[error("cannot reach MySQL server at {address} after {attempts} attempts: {last_error}")]
    Unreachable {
        address: String,
        attempts: u32,
        last_error: String,
    },
    /// Another server answers at the address the stream was read from (a failover behind the
    /// same endpoint): its file positions are not the old one's, so the stream is not reopened
    /// there; the capture starts again and goes on at that server by GTID.
    #[error("another server answers at {address} ({now}, was {was}); the source goes on there after its GTIDs")]
    ServerChanged {
        address: String,
        was: String,
        now: String,
    },
    /// Wrong user name or password.
    #[error("MySQL rejected the credentials of user '{user}': {message}")]
    AccessDenied { user: String, message: String },
    /// A server setting makes exact capture impossible.
    #[error("server setting {setting} is '{found}' but capture needs '{required}': {fix}")]
    BadSetting {
        setting: &'static str,
        found: String,
        required: &'static str,
        fix: String,
    },
    /// The CDC user lacks privileges.
    #[error("user '{user}' lacks privileges {missing:?}; grant them with: {grant}")]
    MissingPrivileges {
        user: String,
        missing: Vec<&'static str>,
        grant: String,
    },
    /// The binlog position to start from no longer exists on the server.
    #[error("binlog position {needed} is no longer available on the server: {message}")]
    BinlogUnavailable { needed: String, message: String },
    /// The server a source is to go on at has not logged every transaction the source has
    /// already applied (a replica that is behind): going on there would lose them.
    #[error(
        "{server} has not logged transactions this source has already applied (GTIDs {}): it \
         is behind the server they were read from; wait until it has caught up, point the \
         source at a server that has them, or take this one as it is by reading every table \
         there again (ALTER SOURCE ... RESNAPSHOT)",
        missing.join(", ")
    )]
    GtidsMissing {
        server: String,
        missing: Vec<String>,
    },
    /// The server a source is to go on at has logged transactions below the source's GTID
    /// position that the server the source read never logged (errant transactions, see
    /// `change::errant`): going on after the source's GTIDs would skip them.
    #[error(
        "{server} has logged transactions below this source's GTID position that the server it \
         was read from never logged (errant GTIDs {}): going on there after its GTIDs would \
         leave their changes out; read every table there again (ALTER SOURCE ... SET (url = \
         '...') RESNAPSHOT), or accept them (ALTER SOURCE ... SET (url = '...', \
         accept_errant_gtids = true): their changes stay out of the source)",
        errant.join(", ")
    )]
    ErrantGtids { server: String, errant: Vec<String> },
    /// The server cannot send its binlog after the GTIDs the stream starts from: its history
    /// does not hold the transaction a domain of them stands at (it diverged from the server
    /// they were read from: errant transactions, or a server that never replicated it), or it
    /// purged them. Going on from elsewhere in its binlog would skip or repeat changes.
    #[error(
        "{server} cannot go on after GTIDs {gtids}: {message}; its history does not hold them \
         (it diverged from the server the source read them from, or purged them): point the \
         source at a server that replicated that one, or read every table here again \
         (ALTER SOURCE ... RESNAPSHOT)"
    )]
    GtidsDiverged {
        server: String,
        gtids: String,
        message: String,
    },
    /// The source cannot move to another server by GTID (the servers run without GTIDs, or
    /// the source's GTID position is not known); `reason` says which and what to do instead.
    #[error("cannot move the source to {server}: {reason}")]
    NoGtidPosition { server: String, reason: String },
    /// A rows event without the full before/after image (binlog_row_image is not FULL).
    #[error("partial row image for {table} at {at}: {detail}; set binlog_row_image=FULL")]
    PartialRowImage {
        table: String,
        at: BinlogCoord,
        detail: String,
    },
    /// A column type we cannot represent exactly.
    #[error("unsupported type for column {column} of {table}: {detail}")]
    UnsupportedType {
        table: String,
        column: String,
        detail: String,
    },
    /// A value read by `SELECT` that has no Arrow form or contradicts the schema (e.g. a NULL
    /// in a NOT NULL column, a date MySQL cannot store).
    #[error("cannot read column {column} of {table} in {row}: {detail}")]
    BadValue {
        table: String,
        column: String,
        row: String,
        detail: String,
    },
    /// The table map of a rows event disagrees with every schema we can find for the table.
    #[error("schema of {table} at {at} does not match its binlog table map: {detail}")]
    SchemaMismatch {
        table: String,
        at: BinlogCoord,
        detail: String,
    },
    /// A DDL changed a table while its snapshot was being taken: the snapshot starts over
    /// under the new schema (retried like a transient failure, with the chunks done so far
    /// dropped, since they were read under the old one).
    #[error("the schema of {table} changed at {at} while its snapshot was being taken; the snapshot starts over under the new schema")]
    SchemaChangedDuringSnapshot { table: String, at: BinlogCoord },
    /// A read named a column the table no longer has: a DDL changed it after its schema was
    /// read. A snapshot chunk that fails so is read again under the new schema; elsewhere the
    /// work is retried like a transient failure.
    #[error("the columns of a table changed while {context} (the server said: {message}); the read is done again under the new schema")]
    ColumnsChanged { context: String, message: String },
    /// A rows event whose bytes do not decode against its table map.
    #[error("cannot decode {what} at {at}: {detail}")]
    Decode {
        what: String,
        at: BinlogCoord,
        detail: String,
    },
    /// An event's CRC32 does not match its bytes.
    #[error(
        "checksum mismatch for event at {at}: expected {expected:#010x}, computed {computed:#010x}"
    )]
    Checksum {
        at: BinlogCoord,
        expected: u32,
        computed: u32,
    },
    /// A query needed for capture failed for a definite reason (syntax, missing table...).
    #[error("MySQL query failed while {context}: {source}")]
    Query {
        context: String,
        #[source]
        source: mysql_async::Error,
    },
    /// The requested table does not exist.
    #[error("table {0} does not exist on the source server")]
    NoSuchTable(String),
    /// Invalid configuration (URL, position, option, table pattern).
    #[error("invalid source configuration: {0}")]
    Config(String),
    /// The source is not in the state an operation needs (e.g. `RESNAPSHOT TABLE` before the
    /// first published state); the message says what must happen first.
    #[error("{0}")]
    Precondition(String),
    /// Something this server or source asks for that capture does not do.
    #[error("{0} is not supported")]
    NotSupported(String),
    /// The server changed under a multi-step operation (the tables a pattern matches changed
    /// during a re-snapshot): starting the operation over can succeed.
    #[error("{context}: the server changed meanwhile ({detail}); starting over")]
    Raced { context: String, detail: String },
    /// Building Arrow data of the state failed (e.g. a batch over Arrow's size limits).
    #[error("{context}: {source}")]
    Arrow {
        context: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    /// The engine itself failed (a task panicked): a bug to report, not a server problem.
    #[error("internal error: {0}")]
    Internal(String),
}

impl SourceError {
    /// Whether a DDL on the table being read broke the read: it is done again under the
    /// table's new schema.
    pub fn is_schema_change(&self) -> bool {
        matches!(
            self,
            SourceError::SchemaChangedDuringSnapshot { .. } | SourceError::ColumnsChanged { .. }
        )
    }

    /// Whether retrying (with backoff) can make progress.
    pub fn is_transient(&self) -> bool {
        match self {
            SourceError::Transient { .. }
            | SourceError::ReadTimeout { .. }
            | SourceError::Raced { .. }
            | SourceError::SchemaChangedDuringSnapshot { .. }
            | SourceError::ColumnsChanged { .. } => true,
            SourceError::WindowReader(e) => e.is_transient(),
            _ => false,
        }
    }

    /// Whether the capture, started again after a backoff, can get further: a transient
    /// error, or a server that could not be reached for now (its connection attempts, each
    /// already retried, ran out).
    pub fn is_retryable(&self) -> bool {
        match self {
            SourceError::Unreachable { .. } | SourceError::ServerChanged { .. } => true,
            SourceError::WindowReader(e) => e.is_retryable(),
            other => other.is_transient(),
        }
    }

    /// An Arrow failure while building `context`'s data.
    pub fn arrow(context: impl Into<String>, source: arrow::error::ArrowError) -> Self {
        SourceError::Arrow {
            context: context.into(),
            source,
        }
    }

    /// The server's error code behind this error, if the server answered with one.
    pub fn server_code(&self) -> Option<u16> {
        match self {
            SourceError::Transient { source, .. } | SourceError::Query { source, .. } => {
                match source {
                    mysql_async::Error::Server(e) => Some(e.code),
                    _ => None,
                }
            }
            SourceError::WindowReader(e) => e.server_code(),
            _ => None,
        }
    }

    /// Classifies a driver error: I/O failures and server shutdowns are transient; server
    /// errors about credentials, privileges and missing binlogs are definite.
    pub fn from_mysql(context: impl Into<String>, err: mysql_async::Error) -> Self {
        let context = context.into();
        match &err {
            mysql_async::Error::Server(server) => match server.code {
                codes::ACCESS_DENIED | codes::DB_ACCESS_DENIED => SourceError::AccessDenied {
                    user: String::new(),
                    message: server.message.clone(),
                },
                codes::BAD_FIELD => SourceError::ColumnsChanged {
                    context,
                    message: server.message.clone(),
                },
                codes::FATAL_ERROR_READING_BINLOG => SourceError::BinlogUnavailable {
                    needed: context,
                    message: server.message.clone(),
                },
                codes::SERVER_SHUTDOWN
                | codes::TOO_MANY_CONNECTIONS
                | codes::TOO_MANY_USER_CONNECTIONS
                | codes::LOCK_DEADLOCK
                | codes::LOCK_WAIT_TIMEOUT
                | codes::QUERY_INTERRUPTED
                | codes::SLAVE_SAME_ID => SourceError::Transient {
                    context,
                    source: err,
                },
                _ => SourceError::Query {
                    context,
                    source: err,
                },
            },
            mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => SourceError::Transient {
                context,
                source: err,
            },
            _ => SourceError::Query {
                context,
                source: err,
            },
        }
    }
}

impl HasSqlState for SourceError {
    /// The SQLSTATE a client is given for this error (and a stopped source's queries).
    fn sqlstate(&self) -> SqlState {
        match self {
            // connection_exception: the server could not be reached.
            SourceError::Transient { .. }
            | SourceError::ReadTimeout { .. }
            | SourceError::Unreachable { .. }
            | SourceError::ServerChanged { .. } => SqlState::CONNECTION_FAILURE,
            SourceError::WindowReader(e) => e.sqlstate(),
            SourceError::AccessDenied { .. } => SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            SourceError::MissingPrivileges { .. } => SqlState::INSUFFICIENT_PRIVILEGE,
            // object_not_in_prerequisite_state: the server or the table must change first.
            SourceError::BadSetting { .. }
            | SourceError::BinlogUnavailable { .. }
            | SourceError::GtidsMissing { .. }
            | SourceError::ErrantGtids { .. }
            | SourceError::GtidsDiverged { .. }
            | SourceError::NoGtidPosition { .. }
            | SourceError::PartialRowImage { .. }
            | SourceError::SchemaMismatch { .. } => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            SourceError::UnsupportedType { .. } => SqlState::FEATURE_NOT_SUPPORTED,
            SourceError::Decode { .. } | SourceError::Checksum { .. } => SqlState::DATA_CORRUPTED,
            // data_exception: a stored value the engine cannot read exactly.
            SourceError::BadValue { .. } => SqlState::DATA_EXCEPTION,
            SourceError::NoSuchTable(_) => SqlState::UNDEFINED_TABLE,
            SourceError::Config(_) => SqlState::INVALID_PARAMETER_VALUE,
            SourceError::NotSupported(_) => SqlState::FEATURE_NOT_SUPPORTED,
            SourceError::Precondition(_) => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            // serialization_failure: retried by the engine.
            SourceError::Raced { .. }
            | SourceError::SchemaChangedDuringSnapshot { .. }
            | SourceError::ColumnsChanged { .. } => SqlState::T_R_SERIALIZATION_FAILURE,
            SourceError::Arrow { .. } => SqlState::INTERNAL_ERROR,
            // system_error: a query the capture needs failed.
            SourceError::Query { .. } => SqlState::SYSTEM_ERROR,
            SourceError::Internal(_) => SqlState::INTERNAL_ERROR,
        }
    }
}

/// Result alias for the source boundary.
pub type SourceResult<T> = Result<T, SourceError>;
