//! Durability: the engine's state on an object store, so a restarted engine can resume where
//! its last checkpoint ended, with nothing lost and nothing doubled.
//!
//! This part is the store layer: [`store`] frames and checksums every file, [`manifest`]
//! commits numbered manifests and catalogs with create-if-absent (the newest complete one
//! wins; a damaged one is an error naming it), and [`ipc`] holds Arrow data in those files.

pub mod ipc;
pub mod manifest;
pub mod store;

pub use manifest::{Catalog, CatalogSource};
pub use store::{Store, StoreError, StoreOptions};
