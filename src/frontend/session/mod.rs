//! One connection's statements, from text to response: `executor` runs the simple and extended
//! protocols, `statement` parses a statement once into its type, `planner` plans it in the
//! connection's DataFusion session, `lookup` answers point lookups off the key index, `results`
//! streams rows; `session_statement` (`SET`/`SHOW`/transactions) with `block`, `copy`,
//! `subscribe` and `cursors` run what is not a query; `params` and `guards` check what the
//! protocol binds.

pub mod block;
pub mod copy;
pub mod cursors;
pub mod executor;
pub mod guards;
pub mod lookup;
pub mod params;
pub mod planner;
pub mod results;
pub mod session_statement;
pub mod statement;
pub mod subscribe;
