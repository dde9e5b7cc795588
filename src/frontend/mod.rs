//! The PostgreSQL front end: psql, drivers and BI tools query cdcfusion as if it were
//! PostgreSQL.
//!
//! This module wires the parts together and holds no protocol logic itself:
//! * `conn`: what connections share and what one connection keeps (its session, cancel key,
//!   transaction block, running statements);
//! * `server`: the listener, the life of a connection (limit, idle sessions, cancellation,
//!   graceful shutdown);
//! * `auth`: the start-up exchange (connection slot, TLS requirement, database, password);
//! * `users`: the users who may log in (from the settings and made by SQL), their roles, and
//!   changes to those SQL made, committed to the engine's catalog;
//! * `verifier`: the SCRAM and md5 verifiers derived from a password, kept instead of it;
//! * `user_statements`: `CREATE USER`, `ALTER USER`, `DROP USER`, `GRANT`, `REVOKE`;
//! * `privileges`: what a user's role lets it run;
//! * `tls`: the rustls acceptor of the configured certificate;
//! * `query`: the simple and extended protocols, running each statement by its type;
//! * `params`: array literals bound as text parameters, read as PostgreSQL reads them;
//! * `guards`: the `Execute` row count and unbound parameters, checked before anything runs;
//! * `lookup`: primary-key point lookups answered from the key index without planning;
//! * `statement`: a statement parsed once into its type (ours, session, `COPY`, DataFusion's);
//! * `planner`: the connection's DataFusion session state, and planning a statement in it
//!   through [`Engine::plan`](crate::engine::Engine::plan);
//! * `results`: result streams, stale-read warnings and `SHOW` rows;
//! * `session`: `SET`/`SHOW`/transaction statements and session functions;
//! * `block`: the transaction block (savepoints, failed blocks) and the status clients see;
//! * `copy`: `COPY ... TO STDOUT`;
//! * `subscribe`: `SUBSCRIBE` as a flushed `COPY` stream, and the cursor statements;
//! * `cursors`: a connection's cursors (`DECLARE`, `FETCH`, `CLOSE`), of queries and
//!   subscriptions;
//! * `catalog`: databases as catalogs, and each database's `pg_catalog`;
//! * `keys`: `pg_index` and `pg_constraint`, the primary keys of captured tables;
//! * `attributes`: `pg_attribute` with the types and modifiers the front end sends;
//! * `indexes`: the primary keys' indexes in `pg_class` and `pg_get_indexdef`;
//! * `pg_settings`: `pg_catalog.pg_settings`, the settings clients read from the catalog;
//! * `pg_functions`: the catalog functions psql calls beyond datafusion-pg-catalog's;
//! * `numeric_avg`: `avg` of integers as `numeric`, as PostgreSQL types it;
//! * `compat`: the rewrites of psql's catalog queries beyond datafusion-pg-catalog's
//!   (`ARRAY(subquery)`, output column names, missing catalog columns);
//! * `reflect`: what drivers and ORMs send to reflect a database (psycopg, SQLAlchemy);
//! * `composite`: composite values in catalog queries (`(e).field`, `_pg_expandarray`);
//! * `subqueries`: SQLAlchemy's catalog subqueries, in forms DataFusion decorrelates;
//! * `catalog_ast`: the syntax-tree helpers `compat` and `reflect` share;
//! * `encode`: Arrow to PostgreSQL types and wire formats;
//! * `pg_text`: the text of floats and fractional seconds as PostgreSQL writes them;
//! * `origins`: each result column's table oid and column number, for row descriptions;
//! * `datarows`: the `DataRow`s of a whole batch, written into one buffer;
//! * `error`: SQLSTATEs of every error a client can see;
//! * `wire`: the connection's bytes checked before pgwire decodes them, and its message loop;
//! * `stats`: what the front end counts (connections, statements, their time, errors);
//! * `metrics`: the Prometheus endpoint, the operator's other window onto the same status;
//! * `probes`: `/health` and `/ready` on the same listener, for an orchestrator;
//! * `console`: the same status on a terminal (`cdcfusion status`, `serve`'s progress bars);
//! * `status_client`: `cdcfusion status`'s connection, over TLS when the server wants it.
//!
//! The wire protocol itself is pgwire's; `pg_catalog` with the functions psql calls, and the
//! PostgreSQL compatibility rewrites of catalog queries, are datafusion-pg-catalog's; Arrow to
//! PostgreSQL encoding is arrow-pg's except for `numeric` and `json` (see `encode`).

mod attributes;
mod auth;
mod block;
mod catalog;
mod catalog_ast;
mod client_info;
mod compat;
mod composite;
mod conn;
pub mod console;
mod copy;
mod cursors;
mod datarows;
mod encode;
mod error;
mod guards;
mod indexes;
mod keys;
mod lookup;
mod metrics;
mod numeric_avg;
mod origins;
mod params;
mod pg_functions;
mod pg_settings;
mod pg_text;
mod planner;
mod privileges;
mod probes;
mod query;
mod reflect;
mod results;
mod server;
mod session;
mod statement;
mod stats;
pub mod status_client;
mod subqueries;
mod subscribe;
mod tls;
mod user_statements;
mod users;
mod verifier;
mod wire;

pub use catalog::DEFAULT_DATABASE;
pub use error::{engine_sqlstate, FrontendError};
pub use metrics::{render as render_metrics, MetricsServer};
pub use probes::InitGate;
pub use server::{FrontendMetrics, Server};
pub use session::SERVER_VERSION;
