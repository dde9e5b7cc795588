//! The stream after the hand-off: reading transactions, one at a time or as a run of those
//! already received, and applying them to the tables' states.
//!
//! # Invariant
//! Transactions are applied in binlog order, each exactly once: one the checkpoint already
//! holds (starting before the resume position) is dropped, and a run's entries come back in
//! position order, as if its transactions had been applied one by one. A transaction carrying
//! DDL is never part of a run, so a run's batches of a table share one schema.

use std::sync::Arc;

use super::{schema, Burst, Capture, RunChanges, TableChange};
use crate::change::position::BinlogCoord;
use crate::change::{ChangeBatch, RunBatch, SourceTransaction, TransactionRun};
use crate::source::binlog::BinlogReader;
use crate::source::error::{SourceError, SourceResult};
use crate::state::merge::{ChangelogEvent, TableState};

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
        // A row that cannot be keyed stops its table before any of the batch is applied.
        let codec = self.states[t].codec();
        let unkeyable = [batch.before.as_ref(), batch.after.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|rows| codec.check_keys(rows).err());
        if let Some(e) = unkeyable {
            self.stop_unkeyable(t, &e.to_string(), tx.start.clone());
            return None;
        }
        Some(t)
    }

    /// Applies a run read by [`Capture::next_run`] (so no transaction of it carries DDL): the
    /// state and changelog entries of applying its transactions in turn, each table's batches
    /// encoded once for the whole run. When every table the run touches is past its
    /// hand-off, the entries stay rows of the run's own images ([`RunChanges::Streamed`]);
    /// otherwise they come back as events, in position order, as one by one.
    pub fn apply_run(&mut self, run: &TransactionRun) -> SourceResult<RunChanges> {
        let mut per_table: std::collections::BTreeMap<usize, Vec<&RunBatch>> =
            std::collections::BTreeMap::new();
        for change in &run.changes {
            let Some(tx) = change.tx.first().and_then(|&t| run.txs.get(t as usize)) else {
                continue;
            };
            if let Some(t) = self.admit(tx, &change.batch) {
                per_table.entry(t).or_default().push(change);
            }
        }
        let out = if per_table.keys().all(|&t| self.states[t].is_streaming()) {
            let mut tables = Vec::with_capacity(per_table.len());
            for (t, batches) in per_table {
                self.progress.set_working_on(Some(&self.tables[t].id));
                let streamed = self.states[t]
                    .apply_run_streamed(&batches)
                    .map_err(|e| self.apply_error(t, e))?;
                tables.push((t, streamed));
            }
            self.progress.set_working_on(None);
            RunChanges::Streamed(tables)
        } else {
            RunChanges::Events(self.apply_per_table(per_table, |state, batches, events| {
                state.apply_run(&run.txs, &batches, events)
            })?)
        };
        for tx in &run.txs {
            self.passed(tx);
        }
        if let Some(last) = run.txs.last() {
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
        self.apply_per_table(per_table, |state, items, events| {
            state.apply_many(&items, events)
        })
    }

    /// Applies each table's admitted changes with `apply`, table by table; the entries of all
    /// tables come back in position order.
    fn apply_per_table<I>(
        &mut self,
        per_table: std::collections::BTreeMap<usize, I>,
        mut apply: impl FnMut(
            &mut TableState,
            I,
            &mut Vec<ChangelogEvent>,
        ) -> Result<(), arrow::error::ArrowError>,
    ) -> SourceResult<Vec<TableChange>> {
        let tables = per_table.len();
        let mut out = Vec::new();
        for (t, items) in per_table {
            self.progress.set_working_on(Some(&self.tables[t].id));
            let mut events = Vec::new();
            apply(&mut self.states[t], items, &mut events).map_err(|e| self.apply_error(t, e))?;
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

    fn apply_error(&self, t: usize, e: arrow::error::ArrowError) -> SourceError {
        SourceError::arrow(format!("applying changes of {}", self.tables[t].id), e)
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

    /// The next burst: the transactions that arrive together, waiting for the server until
    /// the first one completes, as one run not yet applied (see [`Capture::apply_run`]) of at
    /// most `max` transactions gathered until `burst` after the first; or, for a transaction
    /// that is never part of a run (one carrying DDL, or one held back by
    /// [`Capture::next_run`]), that transaction applied by itself; or, when events of no
    /// transaction (a rotation) moved the stream past the position the state reflects and
    /// none follows yet, that the state now reflects the position read to
    /// ([`Burst::Idle`]). `None` once a `SnapshotOnly` capture has finished. Transactions the
    /// checkpoint holds are dropped.
    pub async fn next_burst(
        &mut self,
        max: usize,
        burst: std::time::Duration,
    ) -> SourceResult<Option<Burst>> {
        loop {
            let past = self.progress.position();
            let Some(reader) = self.reader.as_mut().filter(|_| self.pending.is_none()) else {
                return Ok(self
                    .next()
                    .await?
                    .map(|(tx, changes)| Burst::One(tx, changes)));
            };
            let (run, ddl) = reader.wait_run(max, burst, past.as_ref()).await?;
            // `wait_run` returns nothing only once idle past `past`.
            let idle = reader
                .idle_position()
                .filter(|_| run.is_none() && ddl.is_none());
            self.pending = ddl;
            if let Some(at) = idle {
                self.progress.set_position(at.clone());
                return Ok(Some(Burst::Idle(at)));
            }
            if let Some(run) = run.and_then(|run| self.unheld(run)) {
                return Ok(Some(Burst::Run(run)));
            }
        }
    }

    /// `run` without the transactions the checkpoint already holds; `None` when that is all
    /// of them.
    fn unheld(&mut self, mut run: TransactionRun) -> Option<TransactionRun> {
        let held = run
            .txs
            .iter()
            .take_while(|tx| self.held_already(tx))
            .count();
        for tx in &run.txs[..held] {
            self.passed(tx);
        }
        if held > 0 {
            tracing::debug!(count = held, "dropping transactions the checkpoint holds");
            run.skip_first(held);
        }
        (!run.txs.is_empty()).then_some(run)
    }

    /// The transactions the events already received complete, as one run not yet applied (see
    /// [`Capture::apply_run`]), at most `max` of them and gathered until `until`; `None` when
    /// no events are at hand or a transaction is held for [`Capture::next`] (one carrying DDL
    /// always is: DDL is never part of a run). Never waits for the server except for the rest
    /// of a transaction already begun, so a caller can apply the transactions that have
    /// arrived together and publish them once. Transactions the checkpoint holds are dropped.
    pub async fn next_run(
        &mut self,
        max: usize,
        until: std::time::Instant,
    ) -> SourceResult<Option<TransactionRun>> {
        if self.pending.is_some() {
            return Ok(None);
        }
        let Some(reader) = self.reader.as_mut().filter(|r| r.has_buffered()) else {
            return Ok(None);
        };
        let (run, ddl) = reader.step_run(max, until).await?;
        self.pending = ddl;
        Ok(run.and_then(|run| self.unheld(run)))
    }

    /// Applies a transaction read from the stream, unless the checkpoint already holds it.
    async fn take(&mut self, tx: &SourceTransaction) -> SourceResult<Option<Vec<TableChange>>> {
        self.passed(tx);
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
            self.passed(&tx);
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
                self.passed(&tx);
                if self.held_already(&tx) {
                    continue;
                }
                out.extend(self.apply_read(&tx).await?);
                self.progress.set_position(tx.end.clone());
            }
        }
    }
}
