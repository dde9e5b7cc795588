//! The PostgreSQL front end with real clients: the `psql` binary, tokio-postgres (extended
//! protocol, binary formats, every type), psycopg (another language's driver), concurrent
//! clients while the source ingests, the server's limits, and users and roles managed by SQL.

#[path = "../common/mod.rs"]
mod common;
mod fixture;
mod reference;

mod as_of;
mod clients;
mod complexity;
mod ecosystem;
mod files;
mod fuzz;
mod indexes;
mod limits;
mod lookups;
mod malformed;
mod plans;
mod psql;
mod savepoints;
mod server;
mod subscribe;
mod types;
mod users;
