//! The engine: a DataFusion session plus the sources it captures, and their status.
//!
//! Files, bottom first (each imports only files above it in this list):
//! * `limits`, `files`: what a statement may do (nesting depth, storage it reaches);
//! * `error`: [`EngineError`], the typed failure of every engine operation;
//! * `source_status`: what `cdc.sources` shows of a source;
//! * `stop`: why a capture task stopped, recorded as the source's fault;
//! * `retry`: which stops are transient and how long to wait before the next attempt;
//! * `retention`: how much history a source keeps and which sinks hold it back;
//! * `partial`: the chunks a snapshot has read, queryable before the hand-off on request;
//! * `histories`: the server each history of a source's positions was read from;
//! * `servers`: how a source reaches its servers, and where a move to another one goes on;
//! * `task`: how a capture task starts (fresh, recovered, resumed) and appends;
//! * `resnapshot`: `ALTER SOURCE ... RESNAPSHOT [TABLE]`;
//! * `run`: the capture task's loop with its retries, and the checkpoint loop;
//! * `poll`: a source's server poll (its lag and binlog retention columns);
//! * `source`: one running source and the engine's set of them;
//! * `sinks`: the running sinks; `sink_plan`: a sink's query planned and its
//!   target named;
//! * `status`, `functions`, `catalog`: the `cdc` tables (one declared type each), table
//!   functions and catalogs;
//! * `reuse`: logical plans kept for running again, and when they may be;
//! * `session`: the [`Engine`] itself; `durable`: its state store (open, create, drop);
//! * `pipeline`: `CREATE`/`DROP`/`ALTER SINK`, planning a sink and starting its runner;
//! * `subscribe`: `SUBSCRIBE`, a query's changes: checking and compiling it, and its start.

mod catalog;
mod durable;
mod error;
mod files;
mod functions;
mod histories;
pub mod limits;
mod partial;
mod pipeline;
mod poll;
mod purge_watch;
mod resnapshot;
mod retention;
mod retry;
mod reuse;
mod run;
mod servers;
mod session;
mod sink_plan;
mod sinks;
pub mod source;
mod source_status;
mod status;
mod stop;
mod subscribe;
mod task;

pub use error::{datafusion_message, datafusion_sqlstate, parser_error, EngineError};
pub use files::{AllowedLocations, BadLocation, FileAccessDenied};
pub use limits::TooComplex;
pub use reuse::{CatalogGeneration, KeptPlan};
pub use session::{Engine, EngineOptions};
pub use sinks::RunningSink;
pub use source::RunningSource;
pub use source_status::SourceStatus;
pub use status::STATUS_SCHEMA;
