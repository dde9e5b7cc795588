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
