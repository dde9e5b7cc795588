//! Applying the DDL of one transaction to the captured tables: schema changes, truncation,
//! renames, and tables created after the start.
//!
//! # Renames
//! `RENAME TABLE a TO b, c TO a` renames in the order written, so the tables of one statement
//! are first all judged under the names they had before it, then renamed together: the
//! online-migration swap (`RENAME TABLE t TO t_old, t_new TO t`, as gh-ost and
//! pt-online-schema-change do it) hands the name `t` to the captured `t_new` with its state and
//! history, while the old `t` goes on as `t_old` until it is dropped. A table renamed to a name
//! the source's patterns do not select stops, its state and changelog ending there. A table
//! that is renamed *into* the patterns from outside brings rows the capture never read: it
//! joins the capture empty and stopped with [`TableStop::read_again`](super::TableStop), and
//! the engine reads it at once (`RESNAPSHOT TABLE`). When it takes the name of a captured
//! table that the same statement renames out of the patterns (the online-migration swap with
//! the shadow table outside them), that table is the one read again: it goes on under its
//! name with the other table's rows, and the difference is in its changelog.
//!
//! # Drops
//! `DROP TABLE` deletes the table's rows (a `d` entry each, at the statement) and stops it as
//! dropped; a table created later under its name is captured as a new table from its creation,
//! and one renamed onto its name from outside the patterns is read at once (see `stops`).

use std::sync::Arc;

use arrow::error::ArrowError;

use super::schema::{
    created_schema, drops, follow_ddl, short, CreatedSchema, Followed, SchemaChange,
};
use super::{Capture, CaptureOptions, CodecChange, TableChange};
use crate::change::keys::RowCodec;
use crate::change::position::{BinlogCoord, StartPosition};
use crate::change::schema::{TableId, TableSchema};
use crate::change::{Ddl, SourceTransaction};
use crate::source::binlog::{BinlogReader, BinlogReaderOptions, TableFilter};
use crate::source::connect::ConnectOptions;
use crate::source::ddl::{reindexed_tables, renamed_tables, touched_tables};
use crate::source::error::{SourceError, SourceResult};
use crate::source::evolve::ColumnOrigin;
use crate::state::merge::TableState;

impl Capture {
    /// Applies `ddl` (in `tx`) to every table it touches; a `TRUNCATE`'s deletes go to `out`.
    pub(super) fn apply_ddl(
        &mut self,
        ddl: &Ddl,
        tx: &SourceTransaction,
        out: &mut Vec<TableChange>,
    ) -> SourceResult<()> {
        let mut touched = touched_tables(ddl, |id| {
            self.index.contains_key(id) || self.pattern.selects(id)
        });
        // Tables whose indexes alone change are followed too (`Followed::Reindexed`).
        touched.extend(reindexed_tables(ddl, |id| self.index.contains_key(id)));
        let mut renamed_in = self.renamed_in(ddl);
        let mut renames = Vec::new();
        for id in touched {
            let Some(&t) = self.index.get(&id) else {
                self.create_table(id, ddl, tx);
                continue;
            };
            if self.is_dropped(t) {
                self.recreate(t, ddl, tx);
                continue;
            }
            if self.parked.contains(&t) {
                continue;
            }
            if self.is_stopped(t) {
                if drops(&self.tables[t], ddl) {
                    self.drop_table(t, ddl, tx, out)?;
                }
                continue;
            }
            let before = Arc::clone(&self.tables[t]);
            let codec_before = Arc::clone(self.states[t].codec());
            match follow_ddl(&before, &mut self.states[t], ddl, tx)? {
                Followed::Nothing => {}
                Followed::Deleted(events) => out.extend(
                    events
                        .into_iter()
                        .map(|event| TableChange { table: t, event }),
                ),
                Followed::Stop(reason) => self.stop_table(t, reason, tx.start.clone()),
                Followed::Dropped => self.drop_table(t, ddl, tx, out)?,
                Followed::ReadAgain(reason) => self.stop(t, reason, tx.start.clone(), true),
                Followed::Renamed(to) if self.pattern.selects(&to) => renames.push((t, to)),
                Followed::Renamed(_) if renamed_in.iter().any(|(_, n)| *n == before.id) => {
                    // Its name now belongs to a table from outside: that one is read again
                    // under it.
                    let from = renamed_in
                        .iter()
                        .position(|(_, n)| *n == before.id)
                        .map_or_else(String::new, |i| renamed_in.remove(i).0.to_string());
                    self.created.remove(&before.id);
                    let reason = format!(
                        "the statement `{}` gave its name to {from}, which the source's tables do \
                         not select and whose rows were never read; it is read again",
                        short(&ddl.statement)
                    );
                    self.stop(t, reason, tx.start.clone(), true);
                }
                Followed::Renamed(to) => {
                    let reason = format!(
                        "the statement `{}` renamed it to {to}, which the source's tables \
                         do not select; its state and changelog end here",
                        short(&ddl.statement)
                    );
                    self.stop_table(t, reason, tx.start.clone());
                }
                Followed::Reindexed(after) => {
                    self.tables[t] = after;
                    self.reindexed.push(t);
                }
                Followed::Evolved(after) => {
                    self.tables[t] = Arc::clone(&after);
                    self.codec_changed(t, &tx.start, codec_before);
                    self.record(t, ddl, tx, before, after);
                }
            }
        }
        // All at once: a name one table gives up is the one another takes (see the module
        // docs).
        for (t, _) in &renames {
            self.index.remove(&self.tables[*t].id);
        }
        for (t, to) in renames {
            self.rename(t, to, ddl, tx)?;
        }
        for (from, to) in renamed_in {
            self.rename_in(&from, to, ddl, tx);
        }
        Ok(())
    }

    /// The renames of `ddl` that bring a table the capture does not hold under a name the
    /// source's patterns select.
    fn renamed_in(&self, ddl: &Ddl) -> Vec<(TableId, TableId)> {
        renamed_tables(ddl)
            .into_iter()
            .filter(|(from, to)| !self.index.contains_key(from) && self.pattern.selects(to))
            .collect()
    }

    /// Captures `to`, renamed from `from` outside the patterns: it joins empty and stopped,
    /// to be read again (see the module docs).
    fn rename_in(&mut self, from: &TableId, to: TableId, ddl: &Ddl, tx: &SourceTransaction) {
        if let Some(&t) = self.index.get(&to) {
            if self.is_dropped(t) {
                self.rename_onto_dropped(t, from, ddl, tx);
            } else {
                // A stopped table still holds the name: it stays stopped (RESNAPSHOT TABLE
                // reads what the name holds now).
                tracing::warn!(table = %to, at = %tx.start, "a table renamed into the source's tables takes the name of a stopped one; not captured");
            }
            return;
        }
        let Some(table) = self.created.remove(&to) else {
            tracing::warn!(table = %to, at = %tx.start, "a table renamed into the source's tables is gone from the server; not captured");
            return;
        };
        let Some(t) = self.add_table(to, table, ddl, tx) else {
            return;
        };
        let reason = format!(
            "the statement `{}` renamed {from}, which the source's tables do not select, to \
             this name; its rows were never read, so it is read now",
            short(&ddl.statement)
        );
        self.stop(t, reason, tx.start.clone(), true);
    }

    /// Table `t` goes on under the name `to` (during its snapshot, the snapshot starts over).
    fn rename(
        &mut self,
        t: usize,
        to: TableId,
        ddl: &Ddl,
        tx: &SourceTransaction,
    ) -> SourceResult<()> {
        let before = Arc::clone(&self.tables[t]);
        if !self.states[t].is_streaming() {
            return Err(SourceError::SchemaChangedDuringSnapshot {
                table: before.id.to_string(),
                at: tx.start.clone(),
            });
        }
        let mut renamed = before.as_ref().clone();
        renamed.id = to.clone();
        renamed.version += 1;
        let after = Arc::new(renamed);
        // The changelog's `_table` comes from the state's schema.
        let same: Vec<ColumnOrigin> = (0..before.columns.len())
            .map(|from| ColumnOrigin::Kept { from })
            .collect();
        self.states[t]
            .evolve(Arc::clone(&after), &same, &tx.start)
            .map_err(|e| SourceError::arrow(format!("renaming {} to {to}", before.id), e))?;
        tracing::info!(from = %before.id, %to, at = %tx.start, "followed a rename");
        self.tables[t] = Arc::clone(&after);
        self.index.insert(to, t);
        self.record(t, ddl, tx, before, after);
        Ok(())
    }

    /// Captures `id`, which `ddl` created and the source's patterns select, from its creation:
    /// an empty table (rows a `CREATE ... SELECT` wrote follow in the same transaction).
    fn create_table(&mut self, id: TableId, ddl: &Ddl, tx: &SourceTransaction) {
        let Some(table) = self.created_table(&id, ddl, tx) else {
            return;
        };
        if self.add_table(id, table, ddl, tx).is_some() {
            tracing::info!(at = %tx.start, "capturing a table created after the start");
        }
    }

    /// Table `t`'s rows are encoded with a new codec from `at` on: during the hand-off, its
    /// log decodes the entries before `at` with `before` (see `CodecChange`).
    pub(super) fn codec_changed(&mut self, t: usize, at: &BinlogCoord, before: Arc<RowCodec>) {
        if let Some(codecs) = &mut self.handoff_codecs {
            codecs.push(CodecChange {
                table: t,
                position: at.clone(),
                before,
                after: Arc::clone(self.states[t].codec()),
            });
        }
    }

    /// The schema of table `id` as `ddl` (in `tx`) creates it; `None` when the statement does
    /// not create it or the table is gone from the server again.
    pub(super) fn created_table(
        &mut self,
        id: &TableId,
        ddl: &Ddl,
        tx: &SourceTransaction,
    ) -> Option<Arc<TableSchema>> {
        match created_schema(id, ddl) {
            CreatedSchema::Spelled(table) => Some(Arc::new(table)),
            // Like itself: a table created again `LIKE` its old self, which is gone.
            CreatedSchema::Like(like) if self.index.contains_key(&like) && like != *id => {
                let model = &self.tables[self.index[&like]];
                Some(Arc::new(
                    TableSchema::new(id.clone(), model.columns.clone(), model.primary_key.clone())
                        .with_default_charset(model.default_charset.clone())
                        .with_indexes(model.indexes.clone()),
                ))
            }
            CreatedSchema::Like(_) | CreatedSchema::FromServer => {
                let table = self.created.remove(id);
                if table.is_none() {
                    tracing::warn!(table = %id, at = %tx.start, "a created table is gone from the server; not captured");
                }
                table
            }
            CreatedSchema::NotCreated => None,
        }
    }

    /// Adds `table` to the capture with an empty state, its creation recorded in the schema
    /// history; its index, or `None` when it cannot be captured.
    fn add_table(
        &mut self,
        id: TableId,
        table: Arc<TableSchema>,
        ddl: &Ddl,
        tx: &SourceTransaction,
    ) -> Option<usize> {
        let state = match streaming_state(&table) {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!(table = %id, error = %e, "a new table cannot be captured");
                return None;
            }
        };
        let t = self.tables.len();
        tracing::info!(table = %id, at = %tx.start, "a new table joins the capture");
        self.tables.push(Arc::clone(&table));
        self.states.push(state);
        self.index.insert(id.clone(), t);
        let before = Arc::new(TableSchema::new(id, Vec::new(), Vec::new()));
        self.record(t, ddl, tx, before, table);
        Some(t)
    }

    /// Reads from the server the schemas of the tables `tx` creates without spelling their
    /// columns (`CREATE TABLE ... LIKE`), before `tx` is applied.
    pub(super) async fn read_created_schemas(
        &mut self,
        tx: &SourceTransaction,
    ) -> SourceResult<()> {
        for ddl in &tx.ddl {
            let new = touched_tables(ddl, |id| {
                (!self.index.contains_key(id) || self.is_dropped_name(id))
                    && self.pattern.selects(id)
            });
            // Tables renamed in from outside: their schema now (a later DDL is compared when
            // they are read again).
            let renamed: Vec<TableId> =
                self.renamed_in(ddl).into_iter().map(|(_, to)| to).collect();
            let new: std::collections::BTreeSet<TableId> =
                new.into_iter().chain(renamed.iter().cloned()).collect();
            for id in new {
                let from_server = renamed.contains(&id)
                    || match created_schema(&id, ddl) {
                        CreatedSchema::FromServer => true,
                        CreatedSchema::Like(like) => !self.index.contains_key(&like),
                        _ => false,
                    };
                if !from_server {
                    continue;
                }
                let mut conn = self.connect.connect().await?;
                match self.connect.table_schema(&mut conn, &id).await {
                    Ok(table) => {
                        self.created.insert(id, Arc::new(table));
                    }
                    // Dropped again since: a later statement in the binlog says so.
                    Err(SourceError::NoSuchTable(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// The captured tables that statements in `[from, to)` change, with where each statement's
    /// transaction starts (see `reread`).
    pub(super) async fn ddl_between(
        &self,
        connect: &ConnectOptions,
        options: &CaptureOptions,
        from: &BinlogCoord,
        to: &BinlogCoord,
    ) -> SourceResult<Vec<(usize, BinlogCoord)>> {
        // Only the statements matter: no row is decoded.
        let none: TableFilter = Arc::new(|_: &TableId| false);
        let mut reader = BinlogReader::open(
            connect.clone(),
            BinlogReaderOptions::new(options.server_id, StartPosition::Coord(from.clone()))
                .with_filter(none),
        )
        .await?;
        let mut found = Vec::new();
        loop {
            if reader.idle_position().is_some_and(|p| p >= *to) {
                return Ok(found);
            }
            let Some(tx) = reader.step().await? else {
                continue;
            };
            if tx.start >= *to {
                return Ok(found);
            }
            for ddl in &tx.ddl {
                for table in touched_tables(ddl, |id| self.index.contains_key(id)) {
                    if let Some(&t) = self.index.get(&table) {
                        found.push((t, tx.start.clone()));
                    }
                }
            }
        }
    }

    pub(super) fn record(
        &mut self,
        t: usize,
        ddl: &Ddl,
        tx: &SourceTransaction,
        before: Arc<TableSchema>,
        after: Arc<TableSchema>,
    ) {
        self.schema_changes.push(SchemaChange {
            table: t,
            position: tx.start.clone(),
            commit_ts_micros: tx.commit_ts_micros,
            statement: ddl.statement.clone(),
            before,
            after,
        });
    }
}

/// An empty state of `table` that takes streamed changes (a table created after the start).
pub(super) fn streaming_state(table: &Arc<TableSchema>) -> Result<TableState, ArrowError> {
    let mut state = TableState::new(Arc::clone(table))?;
    state.finish_handoff()?;
    Ok(state)
}
