//! Durability: the engine's catalog and every source's checkpoints on an object store, so a
//! restarted engine resumes each source exactly where its last checkpoint ended, with nothing
//! lost and nothing doubled.
//!
//! # Layout of a state store
//! ```text
//! catalog/<n>.catalog                        the sources and sinks (their CREATE statements)
//!                                            and the users CREATE USER made (verifiers only)
//! sources/<id>/manifests/<n>.manifest        checkpoint n of a source
//! sources/<id>/tables/<t>/state/<n>-*.arrow  rows of table t at checkpoint n (Arrow IPC)
//! sources/<id>/tables/<t>/changelog/<n>-*.arrow  changelog entries checkpoint n added
//! sources/<id>/snapshot/<n>.progress         the first snapshot's plan and chunks done
//! sources/<id>/snapshot/chunks/*.arrow       rows of each chunk done, normalised to its HIGH
//! ```
//! Every file is framed and checksummed ([`store`]); a manifest records the size and CRC of
//! each file it names ([`manifest`]).
//!
//! # Memory
//! Changelog entries already in a checkpoint's files leave memory, oldest first, once a
//! source's changelogs outgrow [`DurableOptions::changelog_memory_budget`]; scans read them
//! back from those files ([`spill`]).
//!
//! # Exactly once
//! * *Nothing doubled.* A checkpoint holds the changelog up to its position `P` and no further
//!   ([`checkpoint`] writes it from one published version); recovery resumes the binlog at `P`
//!   and drops any transaction that starts before `P` ([`crate::capture::Capture::resume`]).
//! * *Nothing lost.* `P` is the end of the last transaction in the checkpoint, so the stream
//!   resumes at the first one not in it. Changes published after the last checkpoint are live
//!   only: after a crash they are read again from the binlog, and the changelog gets them once.
//! * *Atomic.* A manifest is written last with create-if-absent; files it does not name are
//!   garbage. A crash at any moment leaves the previous manifest, complete.
//!
//! # Visibility
//! Queries see the live state (published per transaction); `cdc.sources` shows both the live
//! `position` and the `durable_position` of the newest checkpoint, which is what a restart
//! returns to. Unlike the Paimon sink in the seeds, nothing becomes durable before its
//! checkpoint commits, and a failed checkpoint publishes nothing twice.
//!
//! # Schemas
//! A manifest records each table's schema at its position and the schema changes the capture
//! followed before it ([`schemas`]); a restart resumes with those, never with the server's
//! current schema, which may already be past a DDL the stream has not reached.
//!
//! # Before the first checkpoint
//! A source that has not finished its first hand-off has no checkpoint yet; its snapshot's
//! progress is kept instead ([`progress`]), so a restart reads only the chunks not done.

pub mod checkpoint;
pub mod error;
pub mod ipc;
pub mod manifest;
pub mod progress;
pub mod recover;
pub mod schemas;
pub mod spill;
pub mod store;

use rand::Rng;

pub use checkpoint::{Checkpointer, DurableOptions};
pub use error::DurableError;
pub use manifest::{Catalog, CatalogSink, CatalogSource, CatalogUser};
pub use store::{Store, StoreError, StoreOptions};

/// The durable side of an engine: its store, its options and the catalog last committed.
#[derive(Debug)]
pub struct Durability {
    pub store: Store,
    pub options: DurableOptions,
    /// Held while a `CREATE`/`DROP SOURCE` (or `SINK`, or `USER`) commits the next catalog, so
    /// commits are serial.
    pub catalog: tokio::sync::Mutex<Catalog>,
}

impl Durability {
    /// Opens the store and reads its catalog.
    pub async fn open(store: Store, options: DurableOptions) -> Result<Self, DurableError> {
        let catalog = manifest::load_catalog(&store).await?;
        Ok(Self {
            store,
            options,
            catalog: tokio::sync::Mutex::new(catalog),
        })
    }

    /// The checkpointer of source `id`.
    pub fn checkpointer(&self, id: &str) -> Checkpointer {
        Checkpointer::new(self.store.clone(), id.to_string(), self.options.clone())
    }
}

/// A fresh source id: 16 hex digits, so a re-created source never meets its predecessor's files.
pub fn new_source_id() -> String {
    format!("{:016x}", rand::rng().random::<u64>())
}
