//! Whether a source's tables may be served: the faults that stopped their capture.
//!
//! # Invariant
//! A table whose capture has stopped (its source failed, a DDL the engine does not follow, a
//! value it cannot decode) is never served as if it were fine. Every scan of its current table
//! or changelog asks [`Health::check`] first (but the changelog of a dropped table, which is
//! exact: its rows deleted at the `DROP`, nothing after it): with a fault recorded, the scan fails with a
//! [`TableUnavailable`] naming the cause, the position and the SQLSTATE, unless the session
//! opted in to stale reads ([`ReadPolicy`]); then the scan reads the last published state and
//! the session is told so with a warning on every query.
//!
//! Faults are recorded by the task that met them, before anything later is published, so no
//! query can read past a fault without seeing it.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use datafusion::error::DataFusionError;
use datafusion::prelude::SessionConfig;

use crate::capture::TableStop;
use crate::change::position::BinlogCoord;
use crate::change::schema::TableId;
use crate::locks::Locked;
use crate::provider::crossing::through_datafusion;
use crate::sqlstate::{HasSqlState, SqlState};

/// Why capture of a source or of one table stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The SQLSTATE queries of the stopped tables answer with.
    pub sqlstate: SqlState,
    pub message: String,
    /// The binlog position where it happened, when known.
    pub position: Option<BinlogCoord>,
    /// The table it happened in, when it is one table's.
    pub table: Option<TableId>,
    pub at: SystemTime,
}

impl Fault {
    pub fn new(sqlstate: SqlState, message: impl Into<String>) -> Self {
        Self {
            sqlstate,
            message: message.into(),
            position: None,
            table: None,
            at: SystemTime::now(),
        }
    }

    pub fn at_position(mut self, position: Option<BinlogCoord>) -> Self {
        self.position = position;
        self
    }

    pub fn in_table(mut self, table: Option<TableId>) -> Self {
        self.table = table;
        self
    }

    /// The message with where it happened, as status and errors show it.
    pub fn describe(&self) -> String {
        let mut text = self.message.clone();
        if let Some(t) = &self.table {
            text.push_str(&format!(" (table {t}"));
            match &self.position {
                Some(p) => text.push_str(&format!(", at {p})")),
                None => text.push(')'),
            }
        } else if let Some(p) = &self.position {
            text.push_str(&format!(" (at {p})"));
        }
        text
    }
}

/// The faults of one source: the source's own (every table stops) and per table.
#[derive(Debug, Default)]
pub struct Health {
    inner: Mutex<HealthState>,
}

#[derive(Debug, Default, Clone)]
struct HealthState {
    source: Option<Fault>,
}

impl Health {
    /// Records that the whole source stopped; the first fault is kept (it is the cause).
    pub fn fail_source(&self, fault: Fault) {
        let mut s = self.lock();
        if s.source.is_none() {
            s.source = Some(fault);
        }
    }

    /// Clears the source's fault (a new capture task starts).
    pub fn clear_source(&self) {
        self.lock().source = None;
    }

    pub fn source_fault(&self) -> Option<Fault> {
        self.lock().source.clone()
    }

    /// The fault that stops `table`: the source's, else the table's own `stop` (from the
    /// version the scan reads).
    pub fn fault_of(&self, table: &TableId, stop: Option<&TableStop>) -> Option<Fault> {
        self.source_fault().or_else(|| {
            stop.map(|s| {
                Fault::new(SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE, s.reason.clone())
                    .at_position(Some(s.position.clone()))
                    .in_table(Some(table.clone()))
            })
        })
    }

    /// Whether a scan of `table` (named `shown` in messages) may run in `session`; see the
    /// module docs.
    pub fn check(
        &self,
        config: &SessionConfig,
        source: &str,
        table: &TableId,
        shown: &str,
        stop: Option<&TableStop>,
    ) -> Result<(), DataFusionError> {
        let policy = config.get_extension::<ReadPolicy>();
        let stale_reads = policy.as_ref().is_some_and(|p| p.stale_reads);
        match self.admit(stale_reads, source, table, shown, stop) {
            Ok(Some(warning)) => {
                if let Some(policy) = policy {
                    policy.warn(warning);
                }
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(error) => Err(through_datafusion(*error)),
        }
    }

    /// [`Health::check`] for a read that is not planned (the front end's point lookups):
    /// `Ok(Some(warning))` when it reads stale state, because `stale_reads` is on.
    pub fn admit(
        &self,
        stale_reads: bool,
        source: &str,
        table: &TableId,
        shown: &str,
        stop: Option<&TableStop>,
    ) -> Result<Option<String>, Box<TableUnavailable>> {
        let Some(fault) = self.fault_of(table, stop) else {
            return Ok(None);
        };
        let error = TableUnavailable {
            source_name: source.to_string(),
            table: shown.to_string(),
            being_read: self.source_fault().is_none() && stop.is_some_and(|s| s.read_again),
            dropped: self.source_fault().is_none() && stop.is_some_and(|s| s.dropped),
            fault,
        };
        if stale_reads {
            Ok(Some(error.warning()))
        } else {
            Err(Box::new(error))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HealthState> {
        // The state is plain data replaced whole; a panic elsewhere cannot leave it half-set.
        self.inner.locked()
    }
}

/// A scan of a table whose capture has stopped; see the module docs.
#[derive(Debug, Clone, thiserror::Error)]
#[error("table {table} of source \"{source_name}\" is not being captured: {}; its last state is stale. {}", fault.describe(), self.fix())]
pub struct TableUnavailable {
    pub source_name: String,
    pub table: String,
    pub fault: Fault,
    /// The engine is reading the table now (`TableStop::read_again`): no repair is needed.
    pub being_read: bool,
    /// The table was dropped at the source (`TableStop::dropped`): nothing to repair.
    pub dropped: bool,
}

impl TableUnavailable {
    fn fix(&self) -> String {
        if self.dropped {
            return "A table created at the source under its name is captured from its creation; its state before the drop can be read after SET cdcfusion.stale_reads = on".into();
        }
        if self.being_read {
            return format!(
                "It is being read now: run the statement again once cdc.tables shows {} capturing, or read the stale state after SET cdcfusion.stale_reads = on",
                self.table
            );
        }
        match self.fault.table {
            Some(_) => format!(
                "Repair it with ALTER SOURCE {} RESNAPSHOT TABLE {}, or read the stale state after SET cdcfusion.stale_reads = on",
                self.source_name, self.table
            ),
            None => format!(
                "See cdc.sources; repair it with ALTER SOURCE {} RESNAPSHOT, or read the stale state after SET cdcfusion.stale_reads = on",
                self.source_name
            ),
        }
    }

    /// The warning a session that reads stale state is given.
    pub fn warning(&self) -> String {
        format!(
            "table {} of source \"{}\" is stale: {}",
            self.table,
            self.source_name,
            self.fault.describe()
        )
    }
}

impl HasSqlState for TableUnavailable {
    fn sqlstate(&self) -> SqlState {
        self.fault.sqlstate.clone()
    }
}

/// A session's choices in reading current tables (stopped tables, secondary indexes), and the
/// warnings its query collected (a session config extension, set per statement by the front
/// end).
#[derive(Debug, Clone)]
pub struct ReadPolicy {
    /// Serve the last published state of a stopped table, with a warning.
    pub stale_reads: bool,
    /// Answer filters on secondary index columns from the indexes (else by scanning).
    pub indexes: bool,
    warnings: Arc<Mutex<Vec<String>>>,
}

impl Default for ReadPolicy {
    fn default() -> Self {
        Self::new(false)
    }
}

impl ReadPolicy {
    pub fn new(stale_reads: bool) -> Self {
        Self {
            stale_reads,
            indexes: true,
            warnings: Arc::default(),
        }
    }

    /// The same policy, using secondary indexes or not.
    pub fn with_indexes(mut self, indexes: bool) -> Self {
        self.indexes = indexes;
        self
    }

    fn warn(&self, warning: String) {
        let mut w = self.warnings.locked();
        if !w.contains(&warning) {
            w.push(warning);
        }
    }

    /// The warnings collected so far, each once; they are removed.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.locked())
    }
}

/// PostgreSQL's spellings of a boolean setting.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" | "t" | "y" => Some(true),
        "off" | "false" | "no" | "0" | "f" | "n" => Some(false),
        _ => None,
    }
}

/// Shared by a source's tasks and its table providers.
pub type SharedHealth = Arc<Health>;

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    fn stop() -> TableStop {
        TableStop {
            table: 0,
            reason: "TRUNCATE TABLE t".into(),
            position: BinlogCoord::new("binlog.000001", 400),
            read_again: false,
            dropped: false,
        }
    }

    #[test]
    fn a_stopped_table_fails_unless_the_session_reads_stale_state() {
        let health = Health::default();
        let t = TableId::new("shop", "t");
        let other = TableId::new("shop", "u");
        let stop = stop();
        let ctx = SessionContext::new();
        let state = ctx.state();
        let err = health
            .check(state.config(), "src", &t, "shop.t", Some(&stop))
            .unwrap_err();
        let DataFusionError::External(e) = &err else {
            panic!("{err}")
        };
        let coded = e.downcast_ref::<crate::sqlstate::Coded>().expect("coded");
        assert_eq!(coded.code(), &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE);
        let e = coded.downcast_ref::<TableUnavailable>().expect("typed");
        assert_eq!(e.sqlstate(), SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE);
        assert!(e.to_string().contains("RESNAPSHOT TABLE shop.t"), "{e}");
        health
            .check(state.config(), "src", &other, "shop.u", None)
            .unwrap();
        // A table the engine reads again itself needs no repair.
        let reading = TableStop {
            read_again: true,
            ..stop.clone()
        };
        let e = *health
            .admit(false, "src", &t, "shop.t", Some(&reading))
            .unwrap_err();
        assert_eq!(e.sqlstate(), SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE);
        assert!(e.to_string().contains("being read now"), "{e}");
        assert!(!e.to_string().contains("RESNAPSHOT"), "{e}");

        let mut state = ctx.state();
        let policy = ReadPolicy::new(true);
        state.config_mut().set_extension(Arc::new(policy.clone()));
        health
            .check(state.config(), "src", &t, "shop.t", Some(&stop))
            .unwrap();
        health
            .check(state.config(), "src", &t, "shop.t", Some(&stop))
            .unwrap();
        let warnings = policy.take_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("TRUNCATE"), "{warnings:?}");
    }

    #[test]
    fn a_source_fault_stops_every_table_and_keeps_its_first_cause() {
        let health = Health::default();
        health.fail_source(Fault::new(SqlState::INTERNAL_ERROR, "first"));
        health.fail_source(Fault::new(SqlState::INTERNAL_ERROR, "second"));
        let t = TableId::new("shop", "t");
        assert_eq!(
            health.fault_of(&t, Some(&stop())).map(|f| f.message),
            Some("first".into())
        );
        health.clear_source();
        assert_eq!(health.fault_of(&t, None), None);
    }
}
