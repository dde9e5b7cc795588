//! Which tables a capture's binlog readers decode: those the source's `tables` patterns select
//! (the captured ones and any created later), less the stopped ones.
//!
//! # Invariant
//! A stopped table's rows are never decoded again, so no row of a schema the capture no longer
//! follows reaches it; a table created after the start is decoded from its first event, so
//! rows written in the transaction that creates it are not lost. A dropped table has no rows
//! until a table is created under its name, which is captured as a new one: its rows are
//! decoded, like those of any table created later.

use std::sync::Arc;

use crate::change::schema::TableId;
use crate::locks::RwLocked;
use crate::source::binlog::{table_filter, TableFilter};
use crate::source::error::SourceResult;

/// The captured tables whose capture stopped, each with whether it stopped because it was
/// dropped (see [`live_tables`]).
pub(super) type Stopped = Arc<std::sync::RwLock<std::collections::BTreeMap<TableId, bool>>>;

/// The source's `tables` patterns, as written and as a filter.
#[derive(Clone)]
pub(super) struct Patterns {
    text: String,
    pub(super) filter: TableFilter,
}

impl Patterns {
    pub(super) fn new(text: &str) -> SourceResult<Self> {
        Ok(Self {
            text: text.to_string(),
            filter: table_filter(text)?,
        })
    }

    pub(super) fn selects(&self, table: &TableId) -> bool {
        (self.filter)(table)
    }
}

impl std::fmt::Debug for Patterns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

/// Decodes rows of the tables `pattern` selects that have not stopped: the captured ones, and
/// any created later (its rows may come in the transaction that creates it), also under the
/// name of a dropped one.
pub(super) fn live_tables(pattern: TableFilter, stopped: &Stopped) -> TableFilter {
    let stopped = Arc::clone(stopped);
    Arc::new(move |t: &TableId| {
        pattern(t) && stopped.read_locked().get(t).is_none_or(|&dropped| dropped)
    })
}
