//! The MySQL/MariaDB source: everything that talks to the server being captured.
//!
//! This module only wires its parts together:
//! * [`connect`]: connections, retries and the start-up checks that make exact capture possible;
//! * [`schema`]: reading table schemas (`crate::change::schema`) from `information_schema`;
//! * [`types`]: the one Arrow value of each column type, for both read paths;
//! * [`ddl`]: which tables a statement in the binlog changed outside row events;
//! * [`evolve`]: what one such statement does to a captured table's rows and columns, when
//!   that can be followed exactly;
//! * [`binlog`]: the replica stream, decoded into whole source transactions;
//! * [`mysql_client`]: a connection of our own whose `SELECT` rows are read in place, for the
//!   snapshot's reads;
//! * [`snapshot`]: `SELECT` results decoded into the same Arrow values, and the chunked,
//!   lock-free incremental snapshot built on them;
//! * [`checksum`]: row checksums over one canonical text, in the server's SQL and from Arrow
//!   (reconciliation).
//!
//! Errors from all of them are [`SourceError`], split into transient (retried) and definite.

pub mod binlog;
pub mod checksum;
pub mod connect;
pub mod ddl;
pub mod error;
pub mod evolve;
pub mod mysql_client;
pub mod schema;
pub mod snapshot;
pub mod types;

pub use error::{SourceError, SourceResult};
