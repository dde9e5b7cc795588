//! Turning a stream of binlog events into whole, typed source transactions.
//!
//! # Transactions and positions
//! A transaction starts at its GTID event (MySQL GTID / anonymous GTID, MariaDB GTID) or at
//! `BEGIN`, and ends at `XID`, `COMMIT`/`ROLLBACK`, or, for a DDL, at the statement itself
//! (for old MySQL's bare autocommitted rows events: at the statement's last rows event). A
//! `CREATE TABLE ... SELECT` is the one DDL that shares its transaction: with the rows it
//! writes, up to its `XID`. Its
//! changes are positioned by `(file, offset of the first event, event index, row index)`, and
//! the transaction is only handed out once it is complete, with `end` = where the next one
//! starts (or, while the reader gathers a run, moved into the run whole: see `batch`).
//! Resuming at `end` therefore neither repeats nor skips a change.
//!
//! # Events we skip
//! Format description, previous-GTIDs, rows-query, heartbeat, MariaDB annotate-rows,
//! GTID-list, binlog-checkpoint and start-encryption carry nothing to capture and are skipped.
//! Statement-format leftovers (intvar, rand, user var) are skipped too: in ROW format they only
//! accompany DDL. Any other event type is logged once per type and skipped; none is ever
//! guessed at. Events that would hide row changes (MariaDB compressed rows events, pre-GA
//! rows events, incident events) are definite errors; MySQL's partial JSON updates are
//! decoded into whole documents (`mysql_json::apply_json_diffs`). Every
//! event's CRC32 is verified when the server writes checksums (events inside a MySQL
//! compressed transaction payload have none; the payload's own CRC covers them).
//!
//! # Schema changes
//! A DDL statement invalidates the cached schemas; the next table map of each table is checked
//! against a fresh `information_schema` read (its wire types, and with full metadata every
//! column's declared type and nullability too), or, for events older than the current schema,
//! decoded with the schema the table map itself describes (`binlog_row_metadata=FULL`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use mysql_async::binlog::events::{Event, EventData, RowsEventData, TableMapEvent};
use mysql_async::binlog::{EventType, RowsEventFlags};
use mysql_async::Conn;

use super::batch::{decode_err, ImagePool, OpenBatch, RunBuilder, MAX_BATCH_ROWS};
use super::cursor::RowsError;
use super::filter::TableFilter;
use super::rows::{CollationMap, MapWriter, TableDecoder};
use crate::change::position::{BinlogCoord, Gtid, GtidSet, StartPosition};
use crate::change::schema::{TableId, TableSchema};
use crate::change::{Ddl, Op, SourceTransaction, TransactionRun};
use crate::source::connect::bounded;
use crate::source::error::{SourceError, SourceResult};
use crate::source::schema::load_table_schema;

/// Heartbeat event types (MySQL/MariaDB, and MySQL 8's v2).
const HEARTBEAT: u8 = 27;
const HEARTBEAT_V2: u8 = 41;

/// MariaDB event types that mysql_common does not know.
mod mariadb {
    pub const ANNOTATE_ROWS: u8 = 160;
    pub const BINLOG_CHECKPOINT: u8 = 161;
    pub const GTID: u8 = 162;
    pub const GTID_LIST: u8 = 163;
    pub const START_ENCRYPTION: u8 = 164;
    /// 165..=171: compressed query and rows events (`log_bin_compress=ON`).
    pub const FIRST_COMPRESSED: u8 = 165;
    pub const LAST_COMPRESSED: u8 = 171;
    /// GTID flag: a single statement without BEGIN/COMMIT (DDL).
    pub const FL_STANDALONE: u8 = 1;
}

/// A transaction being read.
struct TxBuilder {
    start: BinlogCoord,
    gtid: Option<Gtid>,
    commit_ts_micros: Option<i64>,
    /// A MariaDB standalone (DDL) transaction: ends after its one statement.
    standalone: bool,
    in_begin: bool,
    event_index: u32,
    /// Rows decoded, finished into Arrow when the transaction is handed out (or its run is).
    batches: Vec<OpenBatch>,
    open: Option<OpenBatch>,
    /// Set when the transaction's first rows went straight into the run's last batch.
    direct: Option<Direct>,
    ddl: Vec<Ddl>,
}

/// Rows a transaction decoded straight into the run's last batch (see `batch`).
#[derive(Debug, Clone, Copy)]
struct Direct {
    /// Rows the batch held before the transaction's.
    from: usize,
    /// Whether the transaction's rows still go there: until one of another table map or
    /// operation comes.
    open: bool,
}

impl TxBuilder {
    fn new(start: BinlogCoord, gtid: Option<Gtid>) -> Self {
        Self {
            start,
            gtid,
            commit_ts_micros: None,
            standalone: false,
            in_begin: false,
            event_index: 0,
            batches: Vec::new(),
            open: None,
            direct: None,
            ddl: Vec::new(),
        }
    }

    fn flush(&mut self) {
        if let Some(open) = self.open.take() {
            self.batches.push(open);
        }
    }
}

/// Assembles transactions from events; see the module docs.
pub struct Assembler {
    /// Whether the server writes event checksums (`binlog_checksum`).
    checksums: bool,
    /// Whether checksums were already verified before events reach the assembler.
    checksums_verified_upstream: bool,
    filter: TableFilter,
    collations: CollationMap,
    /// Which server wrote the binlog (its format description says), for what table maps count.
    writer: MapWriter,
    /// Name tables' columns `col_1`, `col_2`... when neither a server nor the table map can
    /// name them (decoding binlog files offline).
    unnamed_columns: bool,
    /// Where to (re)start: the end of the last complete transaction.
    pub(super) resume: StartPosition,
    /// The binlog file being read, at offset 0: positions in it are made from it.
    file: BinlogCoord,
    /// Start offset of the next event, for events whose header has no position.
    next_offset: u64,
    seen_fde: bool,
    schemas: HashMap<TableId, Arc<TableSchema>>,
    /// By table id, hashed with aHash: every table map and rows event looks its id up, and
    /// SipHash cost as much as a tenth of decoding a one-row event.
    decoders: HashMap<u64, Option<Arc<TableDecoder>>, ahash::RandomState>,
    tx: Option<TxBuilder>,
    /// The run being gathered, when the reader gathers one: completed transactions without
    /// DDL go into it instead of being handed out.
    run: Option<RunBuilder>,
    images: ImagePool,
    executed: GtidSet,
    warned: HashSet<u8>,
    /// The longest wait for a schema read on the `meta` connection.
    read_timeout: std::time::Duration,
    /// Where the table map [`Assembler::handle_now`] could not resolve starts.
    unresolved_map: Option<BinlogCoord>,
}

/// The table id of a table map event, read from its post-header without parsing the rest:
/// 4 bytes when the format description gives the event a 6-byte post-header (old servers),
/// else 6.
fn table_map_id(event: &Event) -> Option<u64> {
    let data = event.data();
    let width = match event
        .fde()
        .get_event_type_header_length(EventType::TABLE_MAP_EVENT)
    {
        6 => 4,
        _ => 6,
    };
    let mut id = [0u8; 8];
    id[..width].copy_from_slice(data.get(..width)?);
    Some(u64::from_le_bytes(id))
}

impl std::fmt::Debug for Assembler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembler")
            .field("resume", &self.resume)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl Assembler {
    pub fn new(
        start: StartPosition,
        checksums: bool,
        filter: TableFilter,
        collations: CollationMap,
    ) -> Self {
        let executed = match &start {
            StartPosition::Gtid(set) => set.clone(),
            _ => GtidSet::Empty,
        };
        Self {
            checksums,
            checksums_verified_upstream: false,
            filter,
            collations,
            writer: MapWriter::default(),
            unnamed_columns: false,
            resume: start,
            file: BinlogCoord::new("", 0),
            next_offset: 0,
            seen_fde: false,
            schemas: HashMap::new(),
            decoders: HashMap::default(),
            tx: None,
            run: None,
            images: ImagePool::default(),
            executed,
            warned: HashSet::new(),
            read_timeout: crate::source::connect::DEFAULT_READ_TIMEOUT,
            unresolved_map: None,
        }
    }

    /// Makes every position read from here on one of history `history` (see
    /// `change::position`): the server's file names carry no history of their own.
    pub fn set_history(&mut self, history: u16) {
        self.file = self.file.clone().in_history(history);
        if let StartPosition::Coord(c) = &self.resume {
            self.resume = StartPosition::Coord(c.clone().in_history(history));
        }
    }

    /// For decoding binlog files without a server: unnamed columns get positional names.
    pub fn with_unnamed_columns(mut self) -> Self {
        self.unnamed_columns = true;
        self
    }

    /// Starts reading a binlog file directly (its events start after the 4-byte magic).
    pub fn with_file(mut self, name: &str) -> Self {
        self.file = BinlogCoord::new(name, 0).in_history(self.file.history());
        self.next_offset = 4;
        self.seen_fde = true;
        self
    }

    /// Forgets the partial transaction and table maps, before reading from `resume` again.
    /// A run being gathered keeps the whole transactions it holds.
    pub fn reset(&mut self) {
        self.drop_tx();
        self.unresolved_map = None;
        self.clear_decoders();
        self.seen_fde = false;
    }

    fn clear_decoders(&mut self) {
        self.decoders.clear();
        self.images.clear();
    }

    /// Starts gathering a run of up to `max` transactions: from now on a completed transaction
    /// without DDL goes into it rather than being handed out, until [`Assembler::end_run`].
    pub fn begin_run(&mut self, max: usize) {
        self.run
            .get_or_insert_with(|| RunBuilder::with_capacity(max));
    }

    /// Transactions in the run being gathered.
    pub fn run_len(&self) -> usize {
        self.run.as_ref().map_or(0, RunBuilder::len)
    }

    /// Whether a transaction has begun and not completed.
    pub fn in_transaction(&self) -> bool {
        self.tx.is_some()
    }

    /// Ends the run: its transactions, their rows finished into Arrow; `None` when it has
    /// none.
    pub fn end_run(&mut self) -> SourceResult<Option<TransactionRun>> {
        if let (Some(tx), Some(run)) = (self.tx.as_mut(), self.run.as_mut()) {
            // A run ends between transactions, but should one be open (an error ended the
            // run), the rows it decoded into the run go back to it.
            if let Some(direct) = tx.direct.take() {
                tx.flush();
                run.take_back(direct.from, &mut tx.batches);
            }
        }
        match self.run.take() {
            Some(run) if run.len() > 0 => run.finish().map(Some),
            _ => Ok(None),
        }
    }

    /// GTIDs of the transactions read so far (plus the start set, when started by GTID).
    pub fn executed_gtids(&self) -> &GtidSet {
        &self.executed
    }

    /// Where the stream is when it is between transactions: every event before this point has
    /// been processed. `None` inside a transaction or before the first event.
    pub fn idle_position(&self) -> Option<BinlogCoord> {
        (self.tx.is_none() && !self.file.file.is_empty()).then(|| self.file.at(self.next_offset))
    }

    /// Processes one event; returns a transaction when this event completed one.
    /// `meta` is a connection for `information_schema`; without one, schemas come from the
    /// table maps alone.
    pub async fn handle_event(
        &mut self,
        event: &Event,
        meta: Option<&mut Conn>,
    ) -> SourceResult<Option<SourceTransaction>> {
        let done = self.handle_now(event)?;
        self.resolve_table_map(event, meta).await?;
        Ok(done)
    }

    /// [`Assembler::handle_event`] without waiting for anything: a table map of a table whose
    /// decoder is not known yet is left to [`Assembler::resolve_table_map`], which must follow
    /// before the next event ([`Assembler::needs_table_map`] says so). Events are handled
    /// this way while they are at hand, with no future made per event.
    pub fn handle_now(&mut self, event: &Event) -> SourceResult<Option<SourceTransaction>> {
        let header = event.header();
        let type_raw = header.event_type_raw();
        let log_pos = header.log_pos() as u64;
        if type_raw == HEARTBEAT || type_raw == HEARTBEAT_V2 {
            // A heartbeat's position is where the server's binlog ends, which can be past
            // events it has not sent yet: it must not move the position we have read to.
            return Ok(None);
        }
        let start = if log_pos == 0 {
            self.next_offset
        } else {
            log_pos.saturating_sub(header.event_size() as u64)
        };
        let at = self.file.at(start);
        if log_pos != 0 {
            self.next_offset = log_pos;
        }
        self.verify_checksum(event, &at)?;
        if let Some(tx) = self.tx.as_mut() {
            tx.event_index += 1;
        }

        match type_raw {
            mariadb::GTID => {
                // Sequence number (8 bytes LE), domain id (4 bytes LE), flags (1 byte).
                let &[s0, s1, s2, s3, s4, s5, s6, s7, d0, d1, d2, d3, flags, ..] = event.data()
                else {
                    return Err(decode_err(
                        "MariaDB GTID event",
                        &at,
                        "shorter than 13 bytes",
                    ));
                };
                let seq = u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7]);
                let domain = u32::from_le_bytes([d0, d1, d2, d3]);
                let gtid = Gtid::MariaDb {
                    domain,
                    server: header.server_id(),
                    seq,
                };
                let mut tx = TxBuilder::new(at, Some(gtid));
                tx.standalone = flags & mariadb::FL_STANDALONE != 0;
                self.drop_tx();
                self.tx = Some(tx);
                return Ok(None);
            }
            mariadb::ANNOTATE_ROWS
            | mariadb::BINLOG_CHECKPOINT
            | mariadb::GTID_LIST
            | mariadb::START_ENCRYPTION => return Ok(None),
            mariadb::FIRST_COMPRESSED..=mariadb::LAST_COMPRESSED => {
                return Err(SourceError::BadSetting {
                    setting: "log_bin_compress",
                    found: format!("ON (compressed event type {type_raw} at {at})"),
                    required: "OFF",
                    fix: "SET GLOBAL log_bin_compress = OFF and re-snapshot the affected tables"
                        .into(),
                })
            }
            _ => {}
        }

        if type_raw == EventType::TABLE_MAP_EVENT as u8
            && table_map_id(event).is_some_and(|id| self.decoders.contains_key(&id))
        {
            // A table map repeated before every rows event: nothing to learn from it.
            return Ok(None);
        }
        let data = match event.read_data() {
            Ok(Some(data)) => data,
            Ok(None) => {
                self.warn_once(type_raw, &at);
                return Ok(None);
            }
            Err(e) => return Err(decode_err("event", &at, &e.to_string())),
        };
        match data {
            EventData::RotateEvent(rotate) => {
                let mut name = rotate.name_raw().to_vec();
                if !self.seen_fde && self.checksums && name.len() > 4 {
                    // The first, artificial rotate is parsed before the format description
                    // told mysql_common about checksums, so its name ends with the CRC.
                    name.truncate(name.len() - 4);
                }
                self.file = BinlogCoord::new(String::from_utf8_lossy(&name).as_ref(), 0)
                    .in_history(self.file.history());
                self.next_offset = rotate.position();
                if self.tx.is_none() {
                    self.resume = StartPosition::Coord(self.file.at(rotate.position()));
                }
                Ok(None)
            }
            EventData::FormatDescriptionEvent(fde) => {
                self.seen_fde = true;
                self.writer = MapWriter::of_server_version(&fde.server_version());
                Ok(None)
            }
            EventData::GtidEvent(g) => {
                let gtid = Gtid::MySql {
                    sid: g.sid(),
                    tag: g.tag().map(|t| t.to_string()),
                    gno: g.gno(),
                };
                let mut tx = TxBuilder::new(at, Some(gtid));
                let ts = g.immediate_commit_timestamp();
                if ts > 0 {
                    tx.commit_ts_micros = Some(ts as i64);
                }
                self.drop_tx();
                self.tx = Some(tx);
                Ok(None)
            }
            EventData::AnonymousGtidEvent(_) => {
                self.drop_tx();
                self.tx = Some(TxBuilder::new(at, None));
                Ok(None)
            }
            EventData::QueryEvent(q) => {
                let query = q.query();
                let stmt = query.trim();
                let upper: String = stmt.chars().take(24).collect::<String>().to_ascii_uppercase();
                if upper == "BEGIN" || upper.starts_with("XA START") {
                    let tx = self.tx.get_or_insert_with(|| TxBuilder::new(at, None));
                    tx.in_begin = true;
                    return Ok(None);
                }
                if upper == "COMMIT" || upper == "ROLLBACK" || upper.starts_with("XA COMMIT") {
                    return self.finish_tx(header.timestamp());
                }
                if upper.starts_with("SAVEPOINT")
                    || upper.starts_with("ROLLBACK TO")
                    || upper.starts_with("RELEASE SAVEPOINT")
                    || upper.starts_with("XA ")
                {
                    return Ok(None);
                }
                if let Some(create) = create_with_rows(stmt, self.tx.as_ref()) {
                    // `CREATE TABLE ... SELECT`: one transaction with the rows it writes, ended
                    // by its XID, so the table and its rows are published together.
                    self.schemas.clear();
                    self.clear_decoders();
                    let tx = self.tx.get_or_insert_with(|| TxBuilder::new(at, None));
                    tx.in_begin = true;
                    tx.ddl.push(Ddl {
                        db: q.schema().into_owned(),
                        statement: create.to_string(),
                    });
                    return Ok(None);
                }
                if self.tx.as_ref().is_some_and(|t| t.in_begin && !t.standalone) {
                    // A statement inside a row-format transaction (e.g. a temporary table).
                    return Ok(None);
                }
                // A DDL (or other standalone statement): its own transaction.
                self.schemas.clear();
                self.clear_decoders();
                let tx = self.tx.get_or_insert_with(|| TxBuilder::new(at, None));
                tx.ddl.push(Ddl {
                    db: q.schema().into_owned(),
                    statement: stmt.to_string(),
                });
                self.finish_tx(header.timestamp())
            }
            EventData::XidEvent(_) => self.finish_tx(header.timestamp()),
            EventData::TableMapEvent(tme) => {
                if !self.table_map_known(&tme) {
                    self.unresolved_map = Some(at);
                }
                Ok(None)
            }
            EventData::RowsEvent(rows) => {
                self.rows_event(&rows, &at)?;
                // MySQL 5.1 logs an autocommitted statement on a non-transactional table as bare
                // rows events (no GTID, no BEGIN/COMMIT): its last event (STMT_END_F) ends it.
                // Without this, such rows would be merged into the next transaction.
                let autocommit = rows.flags().contains(RowsEventFlags::STMT_END)
                    && self
                        .tx
                        .as_ref()
                        .is_some_and(|t| !t.in_begin && t.gtid.is_none());
                if autocommit {
                    self.finish_tx(header.timestamp())
                } else {
                    Ok(None)
                }
            }
            EventData::PreGaWriteRowsEvent(_)
            | EventData::PreGaUpdateRowsEvent(_)
            | EventData::PreGaDeleteRowsEvent(_) => Err(decode_err(
                "pre-GA rows event",
                &at,
                "event types 20-22 (the row format of MySQL 5.1.0-5.1.15, also reused by some \
                 5.1/5.2 development builds) are not supported; their rows cannot be read",
            )),
            EventData::IncidentEvent(i) => Err(decode_err(
                "incident event",
                &at,
                &format!(
                    "the server recorded an incident ({:?}): events may be missing from the binlog; re-snapshot after fixing the server",
                    i.message()
                ),
            )),
            EventData::HeartbeatEvent
            | EventData::PreviousGtidsEvent(_)
            | EventData::RowsQueryEvent(_)
            | EventData::IntvarEvent(_)
            | EventData::RandEvent(_)
            | EventData::UserVarEvent(_)
            | EventData::TransactionPayloadEvent(_)
            | EventData::StopEvent => Ok(None),
            _ => {
                self.warn_once(type_raw, &at);
                Ok(None)
            }
        }
    }

    fn warn_once(&mut self, type_raw: u8, at: &BinlogCoord) {
        if self.warned.insert(type_raw) {
            let name = EventType::try_from(type_raw)
                .map(|t| format!("{t:?}"))
                .unwrap_or_else(|_| format!("unknown type {type_raw}"));
            tracing::warn!(event = %name, at = %at, "skipping binlog event type that carries no row changes");
        }
    }

    fn verify_checksum(&self, event: &Event, at: &BinlogCoord) -> SourceResult<()> {
        if self.checksums_verified_upstream {
            return Ok(());
        }
        match checksum_mismatch(event) {
            Some((expected, computed)) => Err(SourceError::Checksum {
                at: at.clone(),
                expected,
                computed,
            }),
            None => Ok(()),
        }
    }

    /// The live reader verifies checksums where it frames events, on another core.
    pub(super) fn set_checksums_verified_upstream(&mut self) {
        self.checksums_verified_upstream = true;
    }

    /// How long a schema read on the live reader's `meta` connection may wait.
    pub(super) fn set_read_timeout(&mut self, limit: std::time::Duration) {
        self.read_timeout = limit;
    }

    /// The binlog file being read.
    pub(super) fn current_file(&self) -> Arc<str> {
        Arc::clone(&self.file.file)
    }

    /// Forgets the transaction being read; the rows it decoded into the run leave the run.
    fn drop_tx(&mut self) {
        if let (Some(tx), Some(run)) = (self.tx.take(), self.run.as_mut()) {
            if let Some(direct) = tx.direct {
                run.truncate_tail(direct.from);
            }
        }
    }

    fn finish_tx(&mut self, header_ts: u32) -> SourceResult<Option<SourceTransaction>> {
        let Some(mut tx) = self.tx.take() else {
            return Ok(None);
        };
        tx.flush();
        let end = self.file.at(self.next_offset);
        self.resume = StartPosition::Coord(end.clone());
        if let Some(g) = &tx.gtid {
            self.executed.add(g);
        }
        let mut done = SourceTransaction {
            start: tx.start,
            end,
            gtid: tx.gtid,
            commit_ts_micros: tx.commit_ts_micros.unwrap_or(header_ts as i64 * 1_000_000),
            changes: Vec::new(),
            ddl: tx.ddl,
        };
        if let Some(run) = self.run.as_mut() {
            if done.ddl.is_empty() {
                run.push(
                    done,
                    tx.direct.map(|d| d.from),
                    tx.batches,
                    &mut self.images,
                );
                return Ok(None);
            }
            // Handed out on its own after all: its rows in the run leave it.
            if let Some(direct) = tx.direct {
                run.take_back(direct.from, &mut tx.batches);
            }
        }
        let start = done.start.clone();
        for batch in tx.batches {
            done.changes.push(batch.finish(&|_| start.clone())?);
        }
        Ok(Some(done))
    }

    /// Whether the table map's decoder is known (or its table is not captured), so that its
    /// rows can be decoded without reading a schema.
    fn table_map_known(&mut self, tme: &TableMapEvent<'_>) -> bool {
        let table_id = tme.table_id();
        if self.decoders.contains_key(&table_id) {
            return true;
        }
        let id = TableId::new(tme.database_name(), tme.table_name());
        if !(self.filter)(&id) {
            self.decoders.insert(table_id, None);
            return true;
        }
        false
    }

    /// Whether the last event handled by [`Assembler::handle_now`] was a table map whose
    /// decoder [`Assembler::resolve_table_map`] must find.
    pub fn needs_table_map(&self) -> bool {
        self.unresolved_map.is_some()
    }

    /// Finds the decoder of the table map `event` that [`Assembler::handle_now`] left
    /// unresolved, reading the table's schema on `meta`; nothing to do otherwise.
    pub async fn resolve_table_map(
        &mut self,
        event: &Event,
        meta: Option<&mut Conn>,
    ) -> SourceResult<()> {
        let Some(at) = self.unresolved_map.take() else {
            return Ok(());
        };
        let tme = event
            .read_event::<TableMapEvent<'_>>()
            .map_err(|e| decode_err("table map event", &at, &e.to_string()))?;
        let id = TableId::new(tme.database_name(), tme.table_name());
        let decoder = self.resolve_decoder(&tme, &id, &at, meta).await?;
        self.decoders
            .insert(tme.table_id(), Some(Arc::new(decoder)));
        Ok(())
    }

    /// Finds a schema matching the table map: the cached one, a fresh one, or the one the table
    /// map describes. See the module docs.
    async fn resolve_decoder(
        &mut self,
        tme: &TableMapEvent<'_>,
        id: &TableId,
        at: &BinlogCoord,
        mut meta: Option<&mut Conn>,
    ) -> SourceResult<TableDecoder> {
        let mut first_error = None;
        for fresh in [false, true] {
            let Some(meta) = meta.as_deref_mut() else {
                break;
            };
            if fresh || !self.schemas.contains_key(id) {
                let context = || format!("reading the schema of {id}");
                let load = load_table_schema(meta, id);
                match bounded(self.read_timeout, context, load).await? {
                    Some(schema) => {
                        self.schemas.insert(id.clone(), Arc::new(schema));
                    }
                    None => {
                        self.schemas.remove(id);
                    }
                }
            }
            if let Some(schema) = self.schemas.get(id) {
                let checked =
                    TableDecoder::check_against_map(tme, schema, &self.collations, self.writer);
                match checked.and_then(|()| TableDecoder::new(tme, Arc::clone(schema))) {
                    Ok(d) => return Ok(d),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        let current = self.schemas.get(id).map(Arc::as_ref);
        let from_map = TableDecoder::schema_from_table_map(
            tme,
            current,
            &self.collations,
            self.writer,
            self.unnamed_columns,
        )
        .and_then(|schema| TableDecoder::new(tme, Arc::new(schema)));
        from_map.map_err(|e| SourceError::SchemaMismatch {
            table: id.to_string(),
            at: at.clone(),
            detail: match first_error {
                Some(first) => format!("{first}; {e}"),
                None => format!("the table no longer exists; {e}"),
            },
        })
    }

    fn rows_event(&mut self, rows: &RowsEventData<'_>, at: &BinlogCoord) -> SourceResult<()> {
        let table_id = rows.table_id();
        let decoder = match self.decoders.get(&table_id) {
            Some(Some(d)) => Arc::clone(d),
            Some(None) => return Ok(()),
            None => {
                return Err(decode_err(
                    "rows event",
                    at,
                    &format!("no table map for table id {table_id} precedes it"),
                ))
            }
        };
        let op = match rows {
            RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_) => Op::Insert,
            RowsEventData::UpdateRowsEvent(_) | RowsEventData::UpdateRowsEventV1(_) => Op::Update,
            RowsEventData::DeleteRowsEvent(_) | RowsEventData::DeleteRowsEventV1(_) => Op::Delete,
            // JSON columns logged as changes are applied to the before image as decoded.
            RowsEventData::PartialUpdateRowsEvent(_) => Op::Update,
        };
        let partial_json = matches!(rows, RowsEventData::PartialUpdateRowsEvent(_));
        let tx = self
            .tx
            .get_or_insert_with(|| TxBuilder::new(at.clone(), None));
        let event_index = tx.event_index;
        let data = rows.rows_data();
        // Straight into the run's last batch while all the transaction's rows went there.
        let may_go_direct = match tx.direct {
            Some(direct) => direct.open,
            None => tx.open.is_none() && tx.batches.is_empty() && tx.ddl.is_empty(),
        };
        let tail = match self.run.as_mut() {
            Some(run) if may_go_direct => run.tail_for(&decoder, op, data.len()).map(|tail| {
                let from = tail.index.len();
                (tail, from)
            }),
            _ => None,
        };
        let open = match tail {
            Some((tail, from)) => {
                tx.direct.get_or_insert(Direct { from, open: true });
                tail
            }
            None => {
                if let Some(direct) = tx.direct.as_mut() {
                    direct.open = false;
                }
                let reuse = tx.open.as_ref().is_some_and(|o| {
                    o.table_id == table_id && o.op == op && o.index.len() < MAX_BATCH_ROWS
                });
                if !reuse {
                    tx.flush();
                }
                let images = &mut self.images;
                tx.open.get_or_insert_with(|| {
                    let mut make = || images.image(&decoder);
                    OpenBatch {
                        table_id,
                        decoder: Arc::clone(&decoder),
                        op,
                        before: matches!(op, Op::Update | Op::Delete).then(&mut make),
                        after: matches!(op, Op::Update | Op::Insert).then(&mut make),
                        index: Vec::new(),
                    }
                })
            }
        };
        let before_bits = rows.columns_before_image().map(column_bitmap);
        let after_bits = rows.columns_after_image().map(column_bitmap);
        let held = open.index.len();
        let decoded = match (partial_json, open.before.as_mut(), open.after.as_mut()) {
            (true, Some(before), Some(after)) => decoder.decode_partial_update_rows(
                data,
                before_bits.as_deref(),
                after_bits.as_deref(),
                before,
                after,
            ),
            (_, before, after) => decoder.decode_rows(
                data,
                before_bits.as_deref(),
                after_bits.as_deref(),
                before,
                after,
            ),
        };
        if decoded.is_err() {
            // No part of the event's rows stays: the columns may hold part of a row.
            open.truncate(held);
        }
        let n = decoded.map_err(|e| match e {
            RowsError::Partial(detail) => SourceError::PartialRowImage {
                table: decoder.schema.id.to_string(),
                at: at.clone(),
                detail,
            },
            RowsError::Value(detail) => decode_err(
                &format!("a rows event of {}", decoder.schema.id),
                at,
                &detail,
            ),
        })?;
        open.index.extend((0..n as u32).map(|r| (event_index, r)));
        Ok(())
    }
}

/// A rows event's column bitmap as LSB-first bytes, as on the wire, bits past its length
/// cleared; inline up to 128 columns, so a rows event allocates none. When the bitmap starts
/// on a byte, as it always does from an event, its bytes are taken as they are (the last one
/// masked); loaded eight bits at a time instead, it cost about a tenth of decoding a one-row
/// event.
fn column_bitmap(bits: &bitvec::slice::BitSlice<u8>) -> smallvec::SmallVec<[u8; 16]> {
    use bitvec::domain::Domain;
    use bitvec::field::BitField;
    match bits.domain() {
        Domain::Enclave(byte) if byte.head().into_inner() == 0 => {
            smallvec::smallvec![byte.load_value()]
        }
        Domain::Region {
            head: None,
            body,
            tail,
        } => {
            let mut bytes = smallvec::SmallVec::from_slice(body);
            bytes.extend(tail.map(|byte| byte.load_value()));
            bytes
        }
        _ => bits.chunks(8).map(|byte| byte.load_le::<u8>()).collect(),
    }
}

/// `(expected, computed)` when an event's CRC32 does not match its bytes.
/// The statement of a `CREATE TABLE ... SELECT` that opens a transaction with its rows, or
/// `None` for a statement that is a transaction of its own. MariaDB logs it under a GTID that is
/// not standalone and ends it with an XID; MySQL 8.0.21+ appends `START TRANSACTION` to it.
fn create_with_rows<'a>(stmt: &'a str, tx: Option<&TxBuilder>) -> Option<&'a str> {
    const OPENS: &[u8] = b"START TRANSACTION";
    let mut words = stmt.split_ascii_whitespace().take(4);
    let create = words
        .next()
        .is_some_and(|w| w.eq_ignore_ascii_case("CREATE"))
        && match words.next() {
            Some(w) if w.eq_ignore_ascii_case("TABLE") => true,
            // MariaDB's `CREATE OR REPLACE TABLE ... SELECT`.
            Some(w) if w.eq_ignore_ascii_case("OR") => {
                words
                    .next()
                    .is_some_and(|w| w.eq_ignore_ascii_case("REPLACE"))
                    && words
                        .next()
                        .is_some_and(|w| w.eq_ignore_ascii_case("TABLE"))
            }
            _ => false,
        };
    if !create {
        return None;
    }
    let bytes = stmt.as_bytes();
    if bytes.len() > OPENS.len() && bytes[bytes.len() - OPENS.len()..].eq_ignore_ascii_case(OPENS) {
        // The suffix is ASCII, so the cut is on a character boundary.
        return Some(stmt[..stmt.len() - OPENS.len()].trim_end());
    }
    let mariadb_group = tx.is_some_and(|t| {
        !t.standalone && !t.in_begin && matches!(t.gtid, Some(Gtid::MariaDb { .. }))
    });
    mariadb_group.then_some(stmt)
}

pub(super) fn checksum_mismatch(event: &Event) -> Option<(u32, u32)> {
    // Events unpacked from a transaction payload (MySQL binlog_transaction_compression)
    // carry no CRC of their own (WL#3549), only the payload event around them does;
    // mysql_common marks them so, but `Event::checksum` still returns zeros for them.
    if !event.footer().get_checksum_enabled() {
        return None;
    }
    let expected = u32::from_le_bytes(event.checksum()?);
    let alg = event.footer().get_checksum_alg().ok()??;
    let computed = event.calc_checksum(alg);
    (expected != computed).then_some((expected, computed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mariadb_tx(standalone: bool) -> TxBuilder {
        let gtid = Gtid::MariaDb {
            domain: 0,
            server: 1,
            seq: 7,
        };
        let mut tx = TxBuilder::new(BinlogCoord::new(Arc::from("b.000001"), 4), Some(gtid));
        tx.standalone = standalone;
        tx
    }

    /// Column bitmaps of every length up to three bytes, full and not, on a byte (taken as
    /// bytes) and off one (eight bits at a time), read as the bits they hold.
    #[test]
    fn column_bitmaps_are_their_bits_as_bytes() {
        use bitvec::slice::BitSlice;
        let mixed = [0xffu8, 0x5a, 0xa5, 0x81];
        for (wire, skip) in [(mixed, 0), (mixed, 3), ([0xff; 4], 0), ([0xff; 4], 3)] {
            let all = BitSlice::<u8>::from_slice(&wire);
            for len in 0..=(24 - skip) {
                let bits = &all[skip..skip + len];
                let expect: Vec<u8> = (0..len.div_ceil(8))
                    .map(|b| {
                        (0..8)
                            .filter(|i| b * 8 + i < len && bits[b * 8 + i])
                            .fold(0u8, |byte, i| byte | 1 << i)
                    })
                    .collect();
                assert_eq!(
                    column_bitmap(bits).as_slice(),
                    expect,
                    "{len} bits from bit {skip}"
                );
            }
        }
    }

    #[test]
    fn create_select_shares_its_transaction_with_its_rows() {
        let mysql = "CREATE TABLE `s` (\n  `id` int NOT NULL\n) START TRANSACTION";
        assert_eq!(
            create_with_rows(mysql, None),
            Some("CREATE TABLE `s` (\n  `id` int NOT NULL\n)")
        );
        let group = mariadb_tx(false);
        let mariadb = "CREATE TABLE `s` (`id` int(11) NOT NULL)";
        assert_eq!(create_with_rows(mariadb, Some(&group)), Some(mariadb));
        let replace = "create or  replace table s select 1 as id";
        assert_eq!(create_with_rows(replace, Some(&group)), Some(replace));
    }

    #[test]
    fn other_statements_are_transactions_of_their_own() {
        let standalone = mariadb_tx(true);
        let plain = "CREATE TABLE s (id INT PRIMARY KEY)";
        assert_eq!(create_with_rows(plain, Some(&standalone)), None);
        assert_eq!(create_with_rows(plain, None), None);
        let group = mariadb_tx(false);
        for stmt in [
            "ALTER TABLE s ADD COLUMN v INT",
            "CREATE TEMPORARY TABLE s (id INT)",
            "CREATE TABLESPACE ts ADD DATAFILE 'x' START TRANSACTION",
        ] {
            assert_eq!(create_with_rows(stmt, Some(&group)), None, "{stmt}");
        }
    }
}
