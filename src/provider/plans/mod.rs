//! The DataFusion execution plans that read the source server itself rather than captured
//! state: a snapshot's chunks as the partitions of one plan ([`SnapshotExec`]), and one
//! table's binlog changes as an unbounded stream ([`BinlogStreamExec`]).
//!
//! # Invariant
//! These plans only adapt: the chunk protocol and the binlog decoding live in `source`, which
//! knows nothing of DataFusion, so the capture and a query read a chunk or a change the same way.

mod binlog;
pub(crate) mod leaf;
mod snapshot;

pub use binlog::BinlogStreamExec;
pub use snapshot::SnapshotExec;
