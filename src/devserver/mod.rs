//! Private database servers for tests, the demo and benchmarks: a MariaDB with the binlog on
//! ([`DevServer`]) and a PostgreSQL ([`DevPostgres`]), each started from the machine's
//! installed programs on its own port, socket and temporary data directory.
//!
//! # Invariants
//! * Never the machine's own servers: nothing here connects to a standard port or reads the
//!   machine's configuration files, so a machine whose MariaDB or PostgreSQL is stopped, or
//!   configured to ask for passwords, runs the tests the same way.
//! * Always stopped: dropping a server stops it and deletes its directory, and a small
//!   watchdog process does the same when the owning process dies without dropping it (a
//!   panic with `abort`, `SIGKILL`, a test binary exiting with a server in a `static`).

mod mariadb;
mod postgres;
mod process;

pub use mariadb::{DevServer, DevServerOptions, CDC_PASSWORD, CDC_USER};
pub use postgres::{psql_at, DevPostgres, DevPostgresOptions};
