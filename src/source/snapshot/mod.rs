//! The snapshot side of capture: reading table contents with `SELECT`.
//!
//! * [`select`]: `SELECT` results into the same Arrow values the binlog decoder produces;
//! * [`columns`]: rows read in place by our own connection, decoded by operations compiled once
//!   per result;
//! * [`chunks`]: splitting a table into half-open ranges of its chunk key;
//! * [`window`]: the binlog window of a chunk and its normalisation to HIGH;
//! * [`incremental`]: the chunk protocol (watermarks or a consistent snapshot), parallelism
//!   and test hooks;
//! * `protocol`: the steps of one chunk (LOW, barrier, `SELECT`, HIGH, window fold);
//! * `consistent`: a chunk read inside MariaDB's consistent snapshot;
//! * [`progress`]: per-chunk progress, shared with the status tables;
//! * [`journal`]: recording a snapshot's progress and resuming it.

pub mod chunks;
pub mod columns;
mod consistent;
pub mod incremental;
pub mod journal;
pub mod progress;
mod protocol;
pub mod select;
pub mod window;

pub use select::{select_batches, SelectReader, DEFAULT_BATCH_ROWS};
