//! Sinks: SQL-defined pipelines that send a source's changes to a target, exactly once.
//!
//! A sink is a query over one source's changelogs or current tables (projection, filter,
//! scalar expressions, `UNION ALL`) and a target: a Delta table, Parquet files on an object
//! store or a PostgreSQL table. It reads the changelog entries published after its committed position,
//! runs the query over them and writes the result as one commit per interval: appended as
//! changes (over a changelog), or upserted and deleted by key (over a current table).
//!
//! # Invariants
//! * Commits fall on source-transaction boundaries: a commit covers every entry of the
//!   published versions it read, and versions are whole transactions.
//! * Exactly once is held by the target: each commit records the last changelog position it
//!   covers in the same atomic step as its rows (`target`), and a sink resumes strictly after
//!   the position its target holds.
//!
//! # Parts, bottom up
//! * `error`: [`SinkError`], each error classified where it is raised (transient or not).
//! * `target`: the [`Target`] trait, the commit and its marker.
//! * `spec`: what a `CREATE SINK` asks for (target, options), as typed values.
//! * `status`: what `cdc.sinks` shows.
//! * `text`: values targets write as text.
//! * `dictionary`: which columns of a commit are written with a Parquet dictionary.
//! * `parquet`: the Parquet target.
//! * `postgres`: the PostgreSQL target.
//! * `delta`: the Delta Lake target.
//! * `query`: which queries a sink can maintain, and the plan bound to each commit's rows.
//! * `net`: the net outcome per key of one commit's entries (upsert sinks).
//! * `runner`: the loop of one sink.
//! * `reconcile`: a target's rows compared with the sink's query at the target's position.

mod delta;
mod dictionary;
mod error;
#[cfg(test)]
mod fixtures;
mod net;
mod parquet;
mod postgres;
mod query;
mod read;
mod reconcile;
mod renames;
mod runner;
mod spec;
mod status;
mod step;
mod target;
mod text;

pub use delta::DeltaTarget;
pub use error::SinkError;
pub use parquet::ParquetTarget;
pub use postgres::{copy_text, PostgresTarget};
pub use query::{ScanKind, SinkQuery, SinkScan};
pub use reconcile::{compare, expected_rows, Comparison};
pub use runner::{layout_of, Replan, SinkInput, SinkRunner};
pub use spec::{
    format_duration, parse_duration, SchemaChanges, SinkOptions, StartAt, TargetSpec,
    DEFAULT_COMMIT_INTERVAL, DEFAULT_MAX_COMMIT_ENTRIES,
};
pub use status::{SinkState, SinkStatus};
pub use target::{Commit, Committed, SinkMode, Target, TargetLayout, TargetRows};
