//! cdcfusion: change-data-capture from MySQL/MariaDB into Apache DataFusion.
//!
//! The crate follows the data's path, one module per stage:
//!
//! * [`source`]: everything that talks to the MySQL/MariaDB server: connection and start-up
//!   checks, the table schemas, the binlog reader (our own row decoder into Arrow) and the
//!   snapshot read path (`SELECT` into the same Arrow types).
//! * [`state`]: the per-key version merge of snapshot chunks and binlog changes into the
//!   current state and the changelog.
//! * [`capture`]: a capture of a set of tables: snapshot modes, hand-off to the stream.
//! * [`provider`]: DataFusion tables over the captured state: current tables and changelogs.
//! * [`engine`]: a DataFusion session with its sources as catalogs, and their status tables.
//! * [`durable`]: the catalog and each source's checkpoints on an object store, and recovery
//!   from them.
//! * [`frontend`]: the PostgreSQL wire front end (pgwire) over the engine.
//! * [`config`]: settings of `cdcfusion serve`.
//! * [`change`]: the typed change events both paths produce: Arrow batches of before/after
//!   images grouped into source transactions, each change with a totally ordered position.
//! * [`sql`]: the statements cdcfusion adds to DataFusion's: `CREATE SOURCE`, `SHOW SOURCES`, ...
//! * [`failpoint`]: named points where tests make the engine fail on purpose (no crate
//!   imports, so every stage may use it).
//! * [`allocator`]: how the allocator returns freed memory (no crate imports).
//! * [`location`]: where the engine keeps or writes files, parsed once (no crate imports).
//! * [`locks`]: taking a lock whatever a panicking holder left (no crate imports).
//! * [`sqlstate`]: the SQLSTATE type every error names its class with, and the wrapper that
//!   carries a code through DataFusion (no crate imports).
//! * [`devserver`]: private MariaDB (binlog on) and PostgreSQL servers, each started on its own
//!   port and data directory, used by the test suite, the demo and the benchmarks.
#![deny(clippy::clone_on_ref_ptr)]
#![deny(unused_must_use)]
#![warn(missing_debug_implementations)]

pub mod allocator;
pub mod capture;
pub mod change;
pub mod config;
pub mod devserver;
pub mod durable;
pub mod engine;
pub mod failpoint;
pub mod frontend;
pub mod location;
pub mod locks;
pub mod provider;
pub mod sinks;
pub mod source;
pub mod sql;
pub mod sqlstate;
pub mod state;
