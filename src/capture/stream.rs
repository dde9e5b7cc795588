//! The stream after the hand-off: reading transactions, one at a time or as a burst of those
//! already received, and applying them to the tables' states.
//!
//! # Invariant
//! Transactions are applied in binlog order, each exactly once: one the checkpoint already
//! holds (starting before the resume position) is dropped, and a burst's entries come back in
//! position order, as if its transactions had been applied one by one. A transaction carrying
//! DDL is never part of a burst, so a burst's batches of a table share one schema.

use std::sync::Arc;

use super::{schema, Capture, TableChange};
use crate::change::position::BinlogCoord;
use crate::change::{ChangeBatch, SourceTransaction};
use crate::source::binlog::BinlogReader;
use crate::source::error::{SourceError, SourceResult};

impl Capture {
    /// Whether `tx` is one a resumed capture must drop: its checkpoint already holds it.
    fn held_already(&self, tx: &SourceTransaction) -> bool {
        self.resume_from
            .as_ref()
            .is_some_and(|from| tx.start < *from)
    }

    /// Applies `tx`, first reading from the server the schemas of tables it creates without
    /// spelling their columns.
    pub(super) async fn apply_read(
        &mut self,
        tx: &SourceTransaction,
    ) -> SourceResult<Vec<TableChange>> {
        self.read_created_schemas(tx).await?;
        self.apply(tx)
    }

    fn apply(&mut self, tx: &SourceTransaction) -> SourceResult<Vec<TableChange>> {
        let mut out = Vec::new();
        for ddl in &tx.ddl {
            self.apply_ddl(ddl, tx, &mut out)?;
        }
        out.extend(self.apply_batches(std::slice::from_ref(tx))?);
        Ok(out)
    }

    /// The table of `batch` if its changes are to be applied: a captured table, not stopped or
    /// parked, read under the columns captured; a batch of other columns stops its table at
    /// `tx`.
    fn admit(&mut self, tx: &SourceTransaction, batch: &ChangeBatch) -> Option<usize> {
        let &t = self.index.get(&batch.table.id)?;
        if self.is_stopped(t) || self.parked.contains(&t) {
            return None;
        }
        self.progress.set_working_on(Some(&batch.table.id));
        crate::failpoint::hit("capture.apply");
        if !Arc::ptr_eq(&batch.table, &self.tables[t])
            && batch.table.columns != self.tables[t].columns
        {
            let reason = schema::mismatch(&self.tables[t], &batch.table);
            self.stop_table(t, reason, tx.start.clone());
            return None;
        }
        Some(t)
    }

    /// Applies `txs` (read by [`Capture::next_received`], so none carries DDL), in order:
    /// the state and changelog entries of applying each in turn, with each table's images
    /// encoded once for the whole burst ([`TableState::apply_many`]). The entries come back
    /// in position order, as one by one.
    ///
    /// [`TableState::apply_many`]: crate::state::merge::TableState::apply_many
    pub fn apply_burst(&mut self, txs: &[SourceTransaction]) -> SourceResult<Vec<TableChange>> {
        let out = self.apply_batches(txs)?;
        if let Some(last) = txs.last() {
            self.progress.set_position(last.end.clone());
        }
        Ok(out)
    }

    /// The change batches of `txs` applied table by table (`TableState::apply_many`), the
    /// entries in position order.
    fn apply_batches(&mut self, txs: &[SourceTransaction]) -> SourceResult<Vec<TableChange>> {
        let mut per_table: std::collections::BTreeMap<
            usize,
            Vec<(&SourceTransaction, &ChangeBatch)>,
        > = std::collections::BTreeMap::new();
        for tx in txs {
            for batch in &tx.changes {
                if let Some(t) = self.admit(tx, batch) {
                    per_table.entry(t).or_default().push((tx, batch));
                }
            }
        }
        let tables = per_table.len();
        let mut out = Vec::new();
        for (t, items) in per_table {
            self.progress.set_working_on(Some(&self.tables[t].id));
            let mut events = Vec::new();
            self.states[t]
                .apply_many(&items, &mut events)
                .map_err(|e| {
                    SourceError::arrow(format!("applying changes of {}", self.tables[t].id), e)
                })?;
            out.extend(
                events
                    .into_iter()
                    .map(|event| TableChange { table: t, event }),
            );
        }
        self.progress.set_working_on(None);
        if tables > 1 {
            // `_tx` numbers are handed out in this order.
            out.sort_by(|a, b| a.event.position.cmp(&b.event.position));
        }
        Ok(out)
    }

    /// The changelog of the next transaction, with the transaction; `None` once a
    /// `SnapshotOnly` capture has finished.
    pub async fn next(&mut self) -> SourceResult<Option<(SourceTransaction, Vec<TableChange>)>> {
        loop {
            let tx = match self.pending.take() {
                Some(tx) => tx,
                None => match self.reader.as_mut() {
                    Some(reader) => reader.next().await?,
                    None => return Ok(None),
                },
            };
            if let Some(changes) = self.take(&tx).await? {
                return Ok(Some((tx, changes)));
            }
        }
    }

    /// The next transaction if the events already received complete one, not yet applied
    /// (see [`Capture::apply_burst`]); `None` as soon as the received events run out, and
    /// before a transaction that carries DDL. Never waits for the server between events, so a
    /// caller can gather the transactions that have arrived together, apply them together and
    /// publish them once. Events of a transaction only partly received stay with the reader
    /// for [`Capture::next`]; transactions the checkpoint holds are dropped.
    pub async fn next_received(&mut self) -> SourceResult<Option<SourceTransaction>> {
        loop {
            // A DDL starts a burst of its own: the changes gathered so far are encoded under
            // the schema it may change.
            if self.pending.as_ref().is_some_and(|tx| !tx.ddl.is_empty()) {
                return Ok(None);
            }
            let tx = match self.pending.take() {
                Some(tx) => tx,
                None => match self.reader.as_mut() {
                    Some(reader) if reader.has_buffered() => match reader.step().await? {
                        Some(tx) => tx,
                        None => continue,
                    },
                    _ => return Ok(None),
                },
            };
            if !tx.ddl.is_empty() {
                self.pending = Some(tx);
                return Ok(None);
            }
            if self.held_already(&tx) {
                tracing::debug!(at = %tx.start, "dropping a transaction the checkpoint holds");
                continue;
            }
            return Ok(Some(tx));
        }
    }

    /// Applies a transaction read from the stream, unless the checkpoint already holds it.
    async fn take(&mut self, tx: &SourceTransaction) -> SourceResult<Option<Vec<TableChange>>> {
        if self.held_already(tx) {
            tracing::debug!(at = %tx.start, "dropping a transaction the checkpoint holds");
            return Ok(None);
        }
        let changes = self.apply_read(tx).await?;
        self.progress.set_position(tx.end.clone());
        Ok(Some(changes))
    }

    /// Reads transactions until the state reflects everything before `target` (a position
    /// taken from the server, e.g. after a workload), returning their changelog.
    pub async fn catch_up_to(&mut self, target: &BinlogCoord) -> SourceResult<Vec<TableChange>> {
        let mut out = Vec::new();
        if let Some(tx) = self.pending.take() {
            out.extend(self.apply_read(&tx).await?);
            self.progress.set_position(tx.end.clone());
        }
        let Some(mut reader) = self.reader.take() else {
            return Ok(out);
        };
        let result = self.follow(&mut reader, target, &mut out).await;
        self.reader = Some(reader);
        result.map(|()| out)
    }

    /// Applies the stream until it reaches `target`. A transaction that starts at or after
    /// `target` is kept for later: during the hand-off it belongs after `max(HIGH)`.
    async fn follow(
        &mut self,
        reader: &mut BinlogReader,
        target: &BinlogCoord,
        out: &mut Vec<TableChange>,
    ) -> SourceResult<()> {
        loop {
            if reader.idle_position().is_some_and(|p| p >= *target) {
                return Ok(());
            }
            if let Some(tx) = reader.step().await? {
                if tx.start >= *target {
                    self.pending = Some(tx);
                    return Ok(());
                }
                if self.held_already(&tx) {
                    continue;
                }
                out.extend(self.apply_read(&tx).await?);
                self.progress.set_position(tx.end.clone());
            }
        }
    }
}
