//! What a capture publishes: every table of one source at one position.
//!
//! # Invariant
//! A [`SourceVersion`] is immutable once published and describes one binlog position for all
//! tables of its source (or, while `consistent` is false, a snapshot still in progress); the
//! capture swaps a new one in after each source transaction, so a reader that loads one version
//! never sees half a transaction. When the stream moves on over events of no transaction (a
//! rotation), the same state is swapped in again at the new position.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{SchemaChange, TableStop};
use crate::change::position::{BinlogCoord, GtidSet};
use crate::state::changelog::Changelog;
use crate::state::current::TableSnapshot;

/// Every table of one source at one position.
#[derive(Debug, Clone, Default)]
pub struct SourceVersion {
    /// The binlog position the version reflects; `None` before the first publication.
    pub position: Option<BinlogCoord>,
    /// Whether the current tables are the source's state at `position` (false while the
    /// snapshot is a mix of chunk boundaries).
    pub consistent: bool,
    pub tables: Vec<TableSnapshot>,
    pub changelogs: Vec<Changelog>,
    /// Tables whose capture stopped at or before `position` (by index): their snapshot and
    /// changelog end where it stopped, and scans refuse them (see `provider::health`).
    pub stopped: Arc<BTreeMap<usize, TableStop>>,
    /// Every schema change the capture followed up to `position`, in binlog order.
    pub schema_history: Arc<Vec<SchemaChange>>,
    /// The GTIDs the server had executed at `position` (see `Capture::executed_gtids`):
    /// where the source goes on at another server. `None` when not known.
    pub gtids: Option<Arc<GtidSet>>,
}

impl SourceVersion {
    /// Makes the version, and each of its tables, reflect `position`.
    pub fn set_position(&mut self, position: &BinlogCoord) {
        for table in &mut self.tables {
            table.position = Some(position.clone());
        }
        self.position = Some(position.clone());
    }
}

/// The latest published version of a source.
pub type Published = Arc<ArcSwap<SourceVersion>>;
