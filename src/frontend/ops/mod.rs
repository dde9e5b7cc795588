//! The operator's windows onto the engine beside SQL: the Prometheus endpoint (`metrics`, with
//! what the front end counts in `stats`), the `/health` and `/ready` probes, and the terminal
//! (`console` for `cdcfusion status` and `serve`'s progress, `status_client` for its
//! connection).

pub mod console;
pub mod metrics;
pub mod probes;
pub mod stats;
pub mod status_client;
