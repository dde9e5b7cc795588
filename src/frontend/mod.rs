//! The PostgreSQL front end: psql, drivers and BI tools query cdcfusion as if it were
//! PostgreSQL.
//!
//! This module wires the parts together and holds no protocol logic itself:
//! * `server`: the listener, the life of a connection (limit, idle sessions, cancellation,
//!   graceful shutdown);
//! * `auth`: the start-up exchange (connection slot, TLS requirement, database, password);
//! * `tls`: the rustls acceptor of the configured certificate;
//! * `query`: the simple and extended protocols, routing each statement (ours, session,
//!   `COPY`, DataFusion) and running it through [`Engine::sql_with`](crate::engine::Engine::sql_with);
//! * `session`: `SET`/`SHOW`/transaction statements and session functions;
//! * `block`: the transaction block (savepoints, failed blocks) and the status clients see;
//! * `copy`: `COPY ... TO STDOUT`;
//! * `catalog`: databases as catalogs, and each database's `pg_catalog`;
//! * `keys`: `pg_index` and `pg_constraint`, the primary keys of captured tables;
//! * `compat`: the catalog functions and the `ARRAY(subquery)` rewrite psql needs beyond
//!   datafusion-pg-catalog;
//! * `reflect`: what drivers and ORMs send to reflect a database (psycopg, SQLAlchemy);
//! * `encode`: Arrow to PostgreSQL types and wire formats;
//! * `error`: SQLSTATEs of every error a client can see;
//! * `wire`: the connection's bytes checked before pgwire decodes them, and its message loop.
//!
//! The wire protocol itself is pgwire's; `pg_catalog` with the functions psql calls, and the
//! PostgreSQL compatibility rewrites of catalog queries, are datafusion-pg-catalog's; Arrow to
//! PostgreSQL encoding is arrow-pg's except for `numeric` and `json` (see `encode`).

mod auth;
mod block;
mod catalog;
mod compat;
mod copy;
mod encode;
mod error;
mod keys;
mod query;
mod reflect;
mod server;
mod session;
mod tls;
mod wire;

pub use catalog::DEFAULT_DATABASE;
pub use error::FrontendError;
pub use server::Server;
pub use session::SERVER_VERSION;
