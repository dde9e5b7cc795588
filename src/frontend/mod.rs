//! The PostgreSQL front end: psql, drivers and BI tools query cdcfusion as if it were
//! PostgreSQL.
//!
//! This module wires the parts together and holds no protocol logic itself. Its folders:
//!
//! | folder | what it holds |
//! |---|---|
//! | `protocol` | the listener and each connection's life (`server`, `conn`, `wire`, `tls`), Arrow to PostgreSQL on the wire (`encode`, `datarows`, `pg_text`, `origins`), SQLSTATEs of every error a client sees (`error`) |
//! | `session` | one connection's statements: `executor` runs both query protocols, `statement` parses once, `planner`, `lookup` (point lookups off the key index), `results`, `session_statement` (`SET`/`SHOW`/transactions), `block`, `copy`, `subscribe`, `cursors`, `params`, `guards` |
//! | `access` | who may connect and what they may run: `auth`, `users`, `verifier`, `user_statements`, `privileges` |
//! | `pg_compat` | PostgreSQL as clients expect it: `catalog`, `keys`, `attributes`, `indexes`, `pg_settings`, `pg_functions`, `numeric_avg`, and the catalog-query rewrites as an ordered rule list (`rules`, with `reflect`, `composite`, `subqueries`, `catalog_ast`) |
//! | `ops` | the operator's windows: `metrics`, `stats`, `probes`, `console`, `status_client` |
//!
//! Each folder's module doc says what its files own.
//!
//! The wire protocol itself is pgwire's; `pg_catalog` with the functions psql calls, and the
//! PostgreSQL compatibility rewrites of catalog queries, are datafusion-pg-catalog's; Arrow to
//! PostgreSQL encoding is arrow-pg's except for `numeric` and `json` (see `encode`).

mod access;
mod ops;
mod pg_compat;
mod protocol;
mod session;

pub use ops::metrics::{render as render_metrics, MetricsServer};
pub use ops::probes::InitGate;
pub use ops::{console, status_client};
pub use pg_compat::catalog::DEFAULT_DATABASE;
pub use protocol::error::FrontendError;
pub use protocol::server::{FrontendMetrics, Server};
pub use session::session_statement::SERVER_VERSION;
