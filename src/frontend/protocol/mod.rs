//! The PostgreSQL protocol itself: the listener and each connection's life (`server`, `conn`,
//! `wire`, `tls`), what is written on the wire (`encode`, `datarows`, `pg_text`,
//! `origins`), and the SQLSTATE of every error a client sees (`error`). Nothing here knows what
//! a statement means; `session` runs them.

pub mod client_info;
pub mod conn;
pub mod datarows;
pub mod encode;
pub mod error;
pub mod origins;
pub mod pg_text;
pub mod server;
pub mod tls;
pub mod wire;
