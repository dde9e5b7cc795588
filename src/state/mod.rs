//! The state stage: what the engine knows about each captured table.
//!
//! [`merge`] keeps the current rows of a table under the per-key version rule and emits the
//! changelog entries that replay to them, holding the hand-off's chunks column-wise
//! ([`handoff`]) with one compact key index ([`index`]); after the hand-off, [`current`] keeps
//! them compactly (an immutable [`base`] and an overlay of the keys changed since, keyed by
//! [`key`]'s row-format bytes) and
//! publishes immutable snapshots for queries, with the source's secondary indexes over both
//! ([`secondary`]; lookups through them in [`lookup`]), and [`streamed`] applies each change
//! to them,
//! keeping its entry as a row of the change's own images; [`changelog`] keeps
//! every change as append-only Arrow batches; [`diff`] gives the entries between two states
//! (re-snapshots); [`history`] rebuilds a past state from a later one and the entries between
//! them (`AS OF`); [`retention`] decides how much of a changelog's front may go.

pub mod base;
pub mod changelog;
pub mod current;
pub mod diff;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod handoff;
pub mod history;
pub mod index;
pub mod key;
pub mod lookup;
pub mod merge;
pub mod retention;
pub mod secondary;
pub mod streamed;
