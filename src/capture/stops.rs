//! Tables whose capture stopped, and dropped tables whose name is captured again.
//!
//! # Invariant
//! A stopped table's state and changelog end where it stopped: no later row of it is applied
//! until the engine reads it again (`RESNAPSHOT TABLE`). The one exception is a table that was
//! dropped at the source: its changelog deletes its rows at the `DROP` (a `d` entry each, so a
//! consumer of it ends with the source's nothing), nothing of it is left to repair, and a
//! table created later under its name is a new table, captured from its creation with a
//! schema change from the old columns to the new, like any table created after the start.
//! Until then the engine keeps publishing its last state before the drop, which stale reads
//! answer from (`provider::health`), while its changelog, exact, stays readable. A table that
//! takes the name by a rename from outside the patterns, or that MariaDB's `CREATE OR
//! REPLACE` replaces whole, has rows the capture never read: it stops with `read_again`, and
//! the engine reads it at once.

use std::sync::Arc;

use super::follow::streaming_state;
use super::schema::short;
use super::{Capture, TableChange, TableStop};
use crate::change::position::BinlogCoord;
use crate::change::schema::{TableId, TableSchema};
use crate::change::{Ddl, SourceTransaction};
use crate::locks::RwLocked;
use crate::source::error::{SourceError, SourceResult};
use crate::state::changelog::reads_exactly;

impl Capture {
    /// Stops capturing table `t` from `position` on: its rows are no longer read (see
    /// [`TableStop`]). A table stops once; the first reason is kept.
    pub fn stop_table(&mut self, t: usize, reason: String, position: BinlogCoord) {
        self.stop(t, reason, position, false);
    }

    /// Stops table `t` as [`TableStop`] `stop` says, as a checkpoint or a published version
    /// kept it (a capture that resumes).
    pub fn restore_stop(&mut self, stop: &TableStop) {
        let id = self.tables[stop.table].id.clone();
        self.stopped.write_locked().insert(id, stop.dropped);
    }

    /// Stops table `t` (see [`Self::stop_table`]); `read_again` asks the engine to read it
    /// again (see [`TableStop::read_again`]).
    pub(super) fn stop(
        &mut self,
        t: usize,
        reason: String,
        position: BinlogCoord,
        read_again: bool,
    ) {
        let id = self.tables[t].id.clone();
        if !self.stopped.read_locked().contains_key(&id) {
            tracing::warn!(table = %id, at = %position, %reason, "capture of the table stopped");
            self.replace_stop(t, reason, position, read_again);
        }
    }

    /// Table `t` was dropped by `ddl` (in `tx`), after its rows were deleted: it stops as
    /// dropped, replacing any earlier stop (a stopped table that is dropped has nothing left
    /// to repair either).
    pub(super) fn stop_dropped(&mut self, t: usize, ddl: &Ddl, tx: &SourceTransaction) {
        let id = self.tables[t].id.clone();
        let earlier = self.stopped.write_locked().insert(id.clone(), true);
        let reason = format!(
            "it was dropped by `{}`; its rows were deleted there, and a table created again \
             under its name is captured from its creation",
            short(&ddl.statement)
        );
        tracing::info!(table = %id, at = %tx.start, stopped_before = earlier.is_some(), "a captured table was dropped");
        self.new_stops.push(TableStop {
            table: t,
            reason,
            position: tx.start.clone(),
            read_again: false,
            dropped: true,
        });
    }

    /// Stops table `t` from `at` on because a row of it cannot be keyed (`why`, from
    /// `RowCodec::check_keys`), saying what to do.
    pub(super) fn stop_unkeyable(&mut self, t: usize, why: &str, at: BinlogCoord) {
        let reason = format!(
            "{why}; MySQL keeps such keys distinct, and as NULL they would overwrite each \
             other, so the table is not captured: give the rows real dates at the source (or \
             exclude the table from the source's tables), then ALTER SOURCE ... RESNAPSHOT \
             TABLE reads it again"
        );
        self.stop_table(t, reason, at);
    }

    pub fn is_stopped(&self, t: usize) -> bool {
        self.stopped.read_locked().contains_key(&self.tables[t].id)
    }

    /// Whether table `t` stopped because it was dropped at the source.
    pub(super) fn is_dropped(&self, t: usize) -> bool {
        self.is_dropped_name(&self.tables[t].id)
    }

    /// Whether `id` names a captured table that was dropped at the source.
    pub(super) fn is_dropped_name(&self, id: &TableId) -> bool {
        self.stopped.read_locked().get(id).is_some_and(|&d| d)
    }

    /// The tables stopped since the last call.
    pub fn take_stops(&mut self) -> Vec<TableStop> {
        std::mem::take(&mut self.new_stops)
    }

    /// The dropped tables captured again since the last call: their stop is over.
    pub fn take_recreated(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.recreated)
    }

    /// Deletes the rows of table `t`, which `ddl` (in `tx`) drops, into `out`, and stops it as
    /// dropped.
    pub(super) fn drop_table(
        &mut self,
        t: usize,
        ddl: &Ddl,
        tx: &SourceTransaction,
        out: &mut Vec<TableChange>,
    ) -> SourceResult<()> {
        let mut events = Vec::new();
        self.states[t]
            .truncate(tx, &mut events)
            .map_err(|e| SourceError::arrow(format!("dropping {}", self.tables[t].id), e))?;
        out.extend(
            events
                .into_iter()
                .map(|event| TableChange { table: t, event }),
        );
        self.stop_dropped(t, ddl, tx);
        Ok(())
    }

    /// Captures the table `ddl` (in `tx`) creates under the name of dropped table `t` as a new
    /// table from its creation (see [`Self::take_name`]), and its stop is over. A statement
    /// that does not create it (or a schema that cannot be captured) leaves `t` stopped.
    pub(super) fn recreate(&mut self, t: usize, ddl: &Ddl, tx: &SourceTransaction) {
        let id = self.tables[t].id.clone();
        let Some(schema) = self.created_table(&id, ddl, tx) else {
            return;
        };
        if self.take_name(t, &schema, ddl, tx) {
            self.stopped.write_locked().remove(&id);
            self.recreated.push(t);
            tracing::info!(table = %id, at = %tx.start, "a dropped table is captured again from its creation");
        }
    }

    /// Table `from`, which the source's patterns do not select, renamed by `ddl` (in `tx`) to
    /// the name of dropped table `t`: a new table under the name (see [`Self::take_name`])
    /// whose rows were never read, so the engine reads it at once (`TableStop::read_again`).
    pub(super) fn rename_onto_dropped(
        &mut self,
        t: usize,
        from: &TableId,
        ddl: &Ddl,
        tx: &SourceTransaction,
    ) {
        let id = self.tables[t].id.clone();
        let Some(schema) = self.created.remove(&id) else {
            tracing::warn!(table = %id, at = %tx.start, "a table renamed onto a dropped one is gone from the server; it stays stopped");
            return;
        };
        if self.take_name(t, &schema, ddl, tx) {
            let reason = format!(
                "the statement `{}` renamed {from}, which the source's tables do not select, to \
                 the name of this dropped table; its rows were never read, so it is read now",
                short(&ddl.statement)
            );
            self.replace_stop(t, reason, tx.start.clone(), true);
        }
    }

    /// Makes dropped table `t` the table of `schema` that takes its name at `ddl` (in `tx`):
    /// an empty state under the new schema, recorded as a schema change of `t` from the old
    /// columns to the new, so its changelog goes on. `false`, with `t` stopped saying why,
    /// when a column of the old name could not read its old entries (see
    /// [`changelog_conflict`]) or the state cannot be made.
    fn take_name(
        &mut self,
        t: usize,
        schema: &TableSchema,
        ddl: &Ddl,
        tx: &SourceTransaction,
    ) -> bool {
        let before = Arc::clone(&self.tables[t]);
        let id = before.id.clone();
        if let Some(why) = changelog_conflict(&before, schema) {
            let reason = format!(
                "it was dropped, and `{}` gave its name to a table{why}; its changelog keeps \
                 the old table's entries under that column, so the new table is not captured: \
                 create the source again (or name the column differently) to capture it",
                short(&ddl.statement)
            );
            tracing::warn!(table = %id, at = %tx.start, %reason, "a table under a dropped one's name is not captured");
            self.replace_stop(t, reason, tx.start.clone(), false);
            return false;
        }
        let after = Arc::new(schema.clone().with_version(before.version + 1));
        let state = match streaming_state(&after) {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!(table = %id, error = %e, "a table under a dropped one's name cannot be captured; it stays stopped");
                return false;
            }
        };
        let codec_before = Arc::clone(self.states[t].codec());
        self.states[t] = state;
        self.tables[t] = Arc::clone(&after);
        self.codec_changed(t, &tx.start, codec_before);
        self.record(t, ddl, tx, before, after);
        true
    }

    /// Stops table `t` for `reason`, in place of any stop it had (a dropped one).
    fn replace_stop(&mut self, t: usize, reason: String, position: BinlogCoord, read_again: bool) {
        let id = self.tables[t].id.clone();
        self.stopped.write_locked().insert(id, false);
        self.new_stops.push(TableStop {
            table: t,
            reason,
            position,
            read_again,
            dropped: false,
        });
    }
}

/// Why `new`, a table created under the name of the dropped `old`, cannot continue `old`'s
/// changelog: a column of both names whose old values do not read as the new type exactly
/// (the changelog reads every entry under the newest type of each column name).
fn changelog_conflict(old: &TableSchema, new: &TableSchema) -> Option<String> {
    new.arrow.fields().iter().find_map(|field| {
        let (_, was) = old.arrow.column_with_name(field.name())?;
        (!reads_exactly(was.data_type(), field.data_type())).then(|| {
            format!(
                " whose column {} is {} where the old one's was {}",
                field.name(),
                field.data_type(),
                was.data_type()
            )
        })
    })
}
