//! The PostgreSQL front end: psql, drivers and BI tools query cdcfusion as if it were
//! PostgreSQL.
//!
//! This module wires the parts together and holds no protocol logic itself:
//! * `conn`: what connections share and what one connection keeps (its session, cancel key,
//!   transaction block, running statements);
//! * `server`: the listener, the life of a connection (limit, idle sessions, cancellation,
//!   graceful shutdown);
//! * `auth`: the start-up exchange (connection slot, TLS requirement, database, password);
//! * `users`: the users who may log in and their password verifiers;
//! * `tls`: the rustls acceptor of the configured certificate;
//! * `query`: the simple and extended protocols, running each statement by its type;
//! * `statement`: a statement parsed once into its type (ours, session, `COPY`, DataFusion's);
//! * `planner`: the connection's DataFusion session state, and planning a statement in it
//!   through [`Engine::plan`](crate::engine::Engine::plan);
//! * `results`: result streams, stale-read warnings and `SHOW` rows;
//! * `session`: `SET`/`SHOW`/transaction statements and session functions;
//! * `block`: the transaction block (savepoints, failed blocks) and the status clients see;
//! * `copy`: `COPY ... TO STDOUT`;
//! * `catalog`: databases as catalogs, and each database's `pg_catalog`;
//! * `keys`: `pg_index` and `pg_constraint`, the primary keys of captured tables;
//! * `pg_functions`: the catalog functions psql calls beyond datafusion-pg-catalog's;
//! * `compat`: the rewrites of psql's catalog queries beyond datafusion-pg-catalog's
//!   (`ARRAY(subquery)`, output column names, missing catalog columns);
//! * `reflect`: what drivers and ORMs send to reflect a database (psycopg, SQLAlchemy);
//! * `catalog_ast`: the syntax-tree helpers `compat` and `reflect` share;
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
mod catalog_ast;
mod compat;
mod conn;
mod copy;
mod encode;
mod error;
mod keys;
mod pg_functions;
mod planner;
mod query;
mod reflect;
mod results;
mod server;
mod session;
mod statement;
mod tls;
mod users;
mod wire;

pub use catalog::DEFAULT_DATABASE;
pub use error::FrontendError;
pub use server::Server;
pub use session::SERVER_VERSION;

/// The methods of `pgwire::api::ClientInfo` a wrapper around a client passes on to the
/// client in its field `$inner` unchanged (all but the transaction status, which wrappers
/// define themselves).
macro_rules! delegate_client_info {
    ($inner:ident) => {
        fn socket_addr(&self) -> std::net::SocketAddr {
            self.$inner.socket_addr()
        }
        fn is_secure(&self) -> bool {
            self.$inner.is_secure()
        }
        fn protocol_version(&self) -> pgwire::messages::ProtocolVersion {
            self.$inner.protocol_version()
        }
        fn set_protocol_version(&mut self, version: pgwire::messages::ProtocolVersion) {
            self.$inner.set_protocol_version(version)
        }
        fn pid_and_secret_key(&self) -> (i32, pgwire::messages::startup::SecretKey) {
            self.$inner.pid_and_secret_key()
        }
        fn set_pid_and_secret_key(
            &mut self,
            pid: i32,
            secret_key: pgwire::messages::startup::SecretKey,
        ) {
            self.$inner.set_pid_and_secret_key(pid, secret_key)
        }
        fn state(&self) -> pgwire::api::PgWireConnectionState {
            self.$inner.state()
        }
        fn set_state(&mut self, new_state: pgwire::api::PgWireConnectionState) {
            self.$inner.set_state(new_state)
        }
        fn metadata(&self) -> &std::collections::HashMap<String, String> {
            self.$inner.metadata()
        }
        fn metadata_mut(&mut self) -> &mut std::collections::HashMap<String, String> {
            self.$inner.metadata_mut()
        }
        fn session_extensions(&self) -> &pgwire::api::SessionExtensions {
            self.$inner.session_extensions()
        }
        fn sni_server_name(&self) -> Option<&str> {
            self.$inner.sni_server_name()
        }
        fn client_certificates<'c>(
            &self,
        ) -> Option<&[pgwire::tokio::tokio_rustls::rustls::pki_types::CertificateDer<'c>]> {
            self.$inner.client_certificates()
        }
    };
}
use delegate_client_info;
