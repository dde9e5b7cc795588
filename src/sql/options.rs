//! The `WITH (...)` options of `CREATE SOURCE`: their names, types, ranges and defaults, in one
//! struct, [`SourceOptions`], and how they map onto a capture's [`CaptureOptions`].
//!
//! # Invariant
//! A `SourceOptions` the parser returns is one the capture accepts as is: every option has been
//! type-checked and range-checked here, and cross-option rules hold (`start_position` exists
//! only for `stream_only`, which [`SnapshotMode`] makes unrepresentable otherwise; every
//! `chunk_key` table is one `tables` selects). Defaults are not restated: they are read from
//! [`CaptureOptions::new`] and [`SnapshotOptions`]'s `Default`, so the SQL and the capture cannot
//! drift apart. `docs/sql-reference.md` lists [`SourceOption::ALL`]; a test keeps it current.
//!
//! # Values
//! Strings are string literals and integers are number literals; a quoted number
//! (`chunk_size = '100'`) or an unquoted word (`snapshot_mode = initial`) is refused with a hint,
//! so a value's type is visible in the statement and a typo cannot turn into a string.
//! MySQL names inside strings (`tables`, `chunk_key`) keep their case: MySQL compares table
//! names case-sensitively on Linux.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

use sqlparser::tokenizer::Location;

use super::error::SqlError;
use super::render::quote_string;
use super::value::{check_range, Literal, RawOption};
use crate::capture::{CaptureOptions, SnapshotMode};
use crate::change::position::StartPosition;
use crate::change::schema::TableId;
use crate::source::binlog::table_filter;
#[cfg(doc)]
use crate::source::snapshot::incremental::SnapshotOptions;

/// Tables captured when `tables` is not given: every table outside the system databases
/// (which the capture's table filter always leaves out).
pub const DEFAULT_TABLES: &str = "*.*";

/// Most chunks read at once: each one holds a connection to the source and its rows in memory,
/// so this bounds both the load on the source and our memory.
pub const MAX_PARALLELISM: u64 = 64;

/// Largest `server_id`: the snapshot's window reader registers as `server_id + 1`, which must
/// still be a valid (32-bit, non-zero) server id.
pub const MAX_SERVER_ID: u64 = u32::MAX as u64 - 1;

/// One option of `CREATE SOURCE ... WITH (...)`, named as in SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceOption {
    Tables,
    ChunkSize,
    Parallelism,
    ChunkKey,
    SnapshotMode,
    StartPosition,
    ServerId,
    Validate,
    VisibleDuringSnapshot,
}

impl SourceOption {
    /// Every option, in the order of the SQL reference and of rendering.
    pub const ALL: [SourceOption; 9] = [
        SourceOption::Tables,
        SourceOption::ChunkSize,
        SourceOption::Parallelism,
        SourceOption::ChunkKey,
        SourceOption::SnapshotMode,
        SourceOption::StartPosition,
        SourceOption::ServerId,
        SourceOption::Validate,
        SourceOption::VisibleDuringSnapshot,
    ];

    /// The option's name in SQL.
    pub fn name(self) -> &'static str {
        match self {
            SourceOption::Tables => "tables",
            SourceOption::ChunkSize => "chunk_size",
            SourceOption::Parallelism => "parallelism",
            SourceOption::ChunkKey => "chunk_key",
            SourceOption::SnapshotMode => "snapshot_mode",
            SourceOption::StartPosition => "start_position",
            SourceOption::ServerId => "server_id",
            SourceOption::Validate => "validate",
            SourceOption::VisibleDuringSnapshot => "visible_during_snapshot",
        }
    }

    /// The option named `name` (already case-folded, as the parser does for unquoted names).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == name)
    }

    /// `tables, chunk_size, ...`, for the unknown-option error.
    pub(crate) fn names_list() -> String {
        Self::ALL.map(Self::name).join(", ")
    }
}

impl fmt::Display for SourceOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The options of a source, with their defaults; see the module docs and
/// `docs/sql-reference.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceOptions {
    /// `tables`: `db.table` patterns where `*` matches any run of characters.
    pub tables: Vec<String>,
    /// `chunk_size`: target rows per snapshot chunk.
    pub chunk_size: usize,
    /// `parallelism`: snapshot chunks read at once, `1..=`[`MAX_PARALLELISM`].
    pub parallelism: usize,
    /// `chunk_key`: the chunk key column per table; tables not listed use their first
    /// primary-key column. Ordered, so rendering is deterministic.
    pub chunk_keys: BTreeMap<TableId, String>,
    /// `snapshot_mode` and `start_position` in one: only `StreamOnly` has a start, and without
    /// `start_position` it is [`StartPosition::Current`] (the end of the binlog at start).
    pub mode: SnapshotMode,
    /// `server_id`: the replica id of the stream, `1..=`[`MAX_SERVER_ID`]; the snapshot's window
    /// reader uses `server_id + 1`.
    pub server_id: u32,
    /// `validate`: whether `CREATE SOURCE` checks the server (connection, credentials,
    /// privileges, binlog settings, matching tables) before it answers.
    pub validate: bool,
    /// `visible_during_snapshot`: the initial snapshot's chunks are queryable as they finish.
    pub visible_during_snapshot: bool,
}

impl Default for SourceOptions {
    fn default() -> Self {
        let capture = CaptureOptions::new(DEFAULT_TABLES, SnapshotMode::Initial);
        Self {
            tables: vec![DEFAULT_TABLES.to_string()],
            chunk_size: capture.snapshot.chunk_size,
            parallelism: capture.snapshot.parallelism,
            chunk_keys: BTreeMap::new(),
            mode: capture.mode,
            server_id: capture.server_id,
            validate: true,
            visible_during_snapshot: false,
        }
    }
}

impl SourceOptions {
    /// Checks and applies `WITH` items over the defaults; see the module docs.
    pub(crate) fn from_raw(raw: &[RawOption]) -> Result<Self, SqlError> {
        let mut out = Self::default();
        let mut seen: BTreeMap<SourceOption, Location> = BTreeMap::new();
        let mut mode = ModeName::Initial;
        let mut start = None;
        for item in raw {
            let option =
                SourceOption::from_name(&item.name).ok_or_else(|| SqlError::UnknownOption {
                    name: item.name.clone(),
                    location: Some(item.name_location),
                })?;
            if seen.insert(option, item.value_location).is_some() {
                return Err(SqlError::DuplicateOption {
                    option,
                    location: Some(item.name_location),
                });
            }
            let value = Literal { option, item };
            match option {
                SourceOption::Tables => out.tables = value.check(parse_tables)?,
                SourceOption::ChunkSize => out.chunk_size = value.integer_in(chunk_size_range())?,
                SourceOption::Parallelism => {
                    out.parallelism = value.integer_in(1..=MAX_PARALLELISM)?;
                }
                SourceOption::ChunkKey => out.chunk_keys = value.check(parse_chunk_keys)?,
                SourceOption::SnapshotMode => mode = value.check(ModeName::parse)?,
                SourceOption::StartPosition => start = Some(value.check(parse_start)?),
                SourceOption::ServerId => out.server_id = value.integer_in(1..=MAX_SERVER_ID)?,
                SourceOption::Validate => out.validate = value.boolean()?,
                SourceOption::VisibleDuringSnapshot => {
                    out.visible_during_snapshot = value.boolean()?;
                }
            }
        }
        out.mode = match (mode, start) {
            (ModeName::StreamOnly, start) => {
                SnapshotMode::StreamOnly(start.unwrap_or(StartPosition::Current))
            }
            (ModeName::Initial, None) => SnapshotMode::Initial,
            (ModeName::SnapshotOnly, None) => SnapshotMode::SnapshotOnly,
            (other, Some(_)) => {
                return Err(SqlError::InvalidValue {
                    option: SourceOption::StartPosition,
                    message: format!(
                        "only valid with snapshot_mode = 'stream_only' (here it is '{}'); \
                         the other modes stream from where their snapshot ends",
                        other.name()
                    ),
                    location: seen.get(&SourceOption::StartPosition).copied(),
                })
            }
        };
        out.check_chunk_key_tables(seen.get(&SourceOption::ChunkKey).copied())?;
        Ok(out)
    }

    /// Every `chunk_key` table must be one `tables` selects: a key for a table that is never
    /// captured is a typo in one of the two.
    fn check_chunk_key_tables(&self, location: Option<Location>) -> Result<(), SqlError> {
        let patterns = self.tables.join(", ");
        let filter = table_filter(&patterns).map_err(|e| SqlError::InvalidValue {
            option: SourceOption::Tables,
            message: e.to_string(),
            location: None,
        })?;
        match self.chunk_keys.keys().find(|t| !filter(t)) {
            Some(table) => Err(SqlError::InvalidValue {
                option: SourceOption::ChunkKey,
                message: format!("table {table} is not selected by tables = '{patterns}'"),
                location,
            }),
            None => Ok(()),
        }
    }

    /// Re-checks the invariant (the fields are public, so a caller may have built this by
    /// hand) and maps onto the capture's options.
    pub fn to_capture_options(&self) -> Result<CaptureOptions, SqlError> {
        let invalid = |option, message: String| SqlError::InvalidValue {
            option,
            message,
            location: None,
        };
        let patterns = self.tables.join(", ");
        parse_tables(&patterns).map_err(|m| invalid(SourceOption::Tables, m))?;
        let in_range = |option, value: u64, range: RangeInclusive<u64>| {
            check_range(value, &range).map_err(|m| invalid(option, m))
        };
        in_range(
            SourceOption::ChunkSize,
            self.chunk_size as u64,
            chunk_size_range(),
        )?;
        in_range(
            SourceOption::Parallelism,
            self.parallelism as u64,
            1..=MAX_PARALLELISM,
        )?;
        in_range(
            SourceOption::ServerId,
            u64::from(self.server_id),
            1..=MAX_SERVER_ID,
        )?;
        if let Some((table, _)) = self.chunk_keys.iter().find(|(_, c)| c.trim().is_empty()) {
            return Err(invalid(
                SourceOption::ChunkKey,
                format!("empty column for table {table}"),
            ));
        }
        self.check_chunk_key_tables(None)?;
        let mut capture = CaptureOptions::new(patterns, self.mode.clone());
        capture.server_id = self.server_id;
        capture.visible_during_snapshot = self.visible_during_snapshot;
        capture.snapshot.chunk_size = self.chunk_size;
        capture.snapshot.parallelism = self.parallelism;
        capture.snapshot.chunk_keys = self.chunk_keys.clone().into_iter().collect();
        // Checked above: server_id <= MAX_SERVER_ID, so this cannot overflow.
        capture.snapshot.window_server_id = self.server_id + 1;
        Ok(capture)
    }

    /// The option's value as SQL (`'*.*'`, `8096`), or `None` when it is not set and has no
    /// value to show (`chunk_key` without keys, `start_position` of other modes or "current").
    pub fn value_sql(&self, option: SourceOption) -> Option<String> {
        match option {
            SourceOption::Tables => Some(quote_string(&self.tables.join(", "))),
            SourceOption::ChunkSize => Some(self.chunk_size.to_string()),
            SourceOption::Parallelism => Some(self.parallelism.to_string()),
            SourceOption::ChunkKey => (!self.chunk_keys.is_empty()).then(|| {
                let keys: Vec<String> = self
                    .chunk_keys
                    .iter()
                    .map(|(t, c)| format!("{t}:{c}"))
                    .collect();
                quote_string(&keys.join(", "))
            }),
            SourceOption::SnapshotMode => Some(quote_string(ModeName::of(&self.mode).name())),
            SourceOption::StartPosition => match &self.mode {
                SnapshotMode::StreamOnly(StartPosition::Coord(c)) => {
                    Some(quote_string(&c.to_string()))
                }
                SnapshotMode::StreamOnly(StartPosition::Gtid(set)) => {
                    Some(quote_string(&set.to_string()))
                }
                _ => None,
            },
            SourceOption::ServerId => Some(self.server_id.to_string()),
            // Shown only when turned off: the default keeps rendered statements as they were.
            SourceOption::Validate => (!self.validate).then(|| "false".to_string()),
            SourceOption::VisibleDuringSnapshot => {
                self.visible_during_snapshot.then(|| "true".to_string())
            }
        }
    }
}

/// Renders the inside of `WITH (...)`: every option that has a value, in [`SourceOption::ALL`]
/// order, so parsing the text back gives the same options.
impl fmt::Display for SourceOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for option in SourceOption::ALL {
            if let Some(value) = self.value_sql(option) {
                if !first {
                    f.write_str(", ")?;
                }
                first = false;
                write!(f, "{option} = {value}")?;
            }
        }
        Ok(())
    }
}

/// `snapshot_mode` as written, before `start_position` is folded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModeName {
    Initial,
    SnapshotOnly,
    StreamOnly,
}

impl ModeName {
    const ALL: [ModeName; 3] = [
        ModeName::Initial,
        ModeName::SnapshotOnly,
        ModeName::StreamOnly,
    ];

    fn name(self) -> &'static str {
        match self {
            ModeName::Initial => "initial",
            ModeName::SnapshotOnly => "snapshot_only",
            ModeName::StreamOnly => "stream_only",
        }
    }

    fn of(mode: &SnapshotMode) -> Self {
        match mode {
            SnapshotMode::Initial => ModeName::Initial,
            SnapshotMode::SnapshotOnly => ModeName::SnapshotOnly,
            SnapshotMode::StreamOnly(_) => ModeName::StreamOnly,
        }
    }

    /// Case-insensitive, like PostgreSQL's enum-valued settings.
    fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!("expected 'initial', 'snapshot_only' or 'stream_only', found '{s}'")
            })
    }
}

/// `chunk_size`: any positive size this machine can count to.
fn chunk_size_range() -> RangeInclusive<u64> {
    1..=u64::try_from(usize::MAX).unwrap_or(u64::MAX)
}

/// `'shop.*, crm.customers'`: comma-separated patterns with exactly one dot each.
fn parse_tables(s: &str) -> Result<Vec<String>, String> {
    if s.trim().is_empty() {
        return Err("no table pattern given; use '*.*' for every table".to_string());
    }
    s.split(',')
        .map(|item| {
            let pattern = item.trim();
            split_table(pattern, "pattern").map(|_| pattern.to_string())
        })
        .collect()
}

/// Splits `db.table` (one dot, both parts non-empty); `what` names the item in errors.
fn split_table<'a>(item: &'a str, what: &str) -> Result<(&'a str, &'a str), String> {
    if item.is_empty() {
        return Err(format!("empty {what} in the list"));
    }
    match item.split_once('.') {
        Some((db, table)) if !table.contains('.') && !db.is_empty() && !table.is_empty() => {
            Ok((db, table))
        }
        _ => Err(format!(
            "{what} '{item}' must be db.table, with exactly one dot"
        )),
    }
}

/// `'shop.items:c, shop.orders:cust'`: one concrete table and its column per item.
fn parse_chunk_keys(s: &str) -> Result<BTreeMap<TableId, String>, String> {
    if s.trim().is_empty() {
        return Err(
            "no db.table:column given; leave the option out to chunk by the first \
                    primary-key column"
                .to_string(),
        );
    }
    let mut keys = BTreeMap::new();
    for item in s.split(',').map(str::trim) {
        let Some((table, column)) = item.split_once(':') else {
            return Err(format!("'{item}' must be db.table:column"));
        };
        let (db, name) = split_table(table.trim(), "table")?;
        if table.contains('*') {
            return Err(format!(
                "'{item}' names a pattern; a chunk key belongs to one table"
            ));
        }
        let column = column.trim();
        if column.is_empty() {
            return Err(format!("'{item}' has an empty column name"));
        }
        let id = TableId::new(db, name);
        if keys.contains_key(&id) {
            return Err(format!("table {id} is given two chunk keys"));
        }
        keys.insert(id, column.to_string());
    }
    Ok(keys)
}

/// `start_position`: `file:offset` or a GTID set, as the binlog reader takes it.
fn parse_start(s: &str) -> Result<StartPosition, String> {
    if s.trim().is_empty() {
        // An empty GTID set would mean "from the first transaction ever": too easy to do by
        // accident, so it must be spelled out as a position.
        return Err(
            "empty; leave the option out to start at the current end of the binlog".to_string(),
        );
    }
    StartPosition::from_str(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::position::{BinlogCoord, GtidSet};
    use crate::sql::{parse_cdc_statement, CdcStatement};

    /// The options of `CREATE SOURCE s FROM MYSQL '...' WITH (<with>)`.
    fn options(with: &str) -> Result<SourceOptions, SqlError> {
        let sql = format!("CREATE SOURCE s FROM MYSQL 'mysql://u@h' WITH ({with})");
        match parse_cdc_statement(&sql)? {
            Some(CdcStatement::CreateSource(c)) => Ok(c.options),
            other => panic!("{sql:?} parsed as {other:?}"),
        }
    }

    fn ok(with: &str) -> SourceOptions {
        options(with).unwrap_or_else(|e| panic!("{with:?}: {e}"))
    }

    /// Asserts the `WITH` list is refused with `sqlstate` and a message containing `fragment`.
    fn assert_refused(with: &str, sqlstate: &str, fragment: &str) {
        match options(with) {
            Err(e) => {
                assert!(
                    e.to_string().contains(fragment),
                    "{with:?}: {e:?} lacks {fragment:?}"
                );
                assert_eq!(e.sqlstate(), sqlstate, "{with:?}: {e}");
            }
            Ok(o) => panic!("{with:?} should be refused, got {o:?}"),
        }
    }

    #[test]
    fn defaults_are_the_captures_defaults() {
        let d = SourceOptions::default();
        assert_eq!(d.tables, vec!["*.*".to_string()]);
        assert_eq!(d.chunk_size, 8096);
        assert_eq!(d.parallelism, 4);
        assert!(d.chunk_keys.is_empty());
        assert_eq!(d.mode, SnapshotMode::Initial);
        assert_eq!(d.server_id, 5400);
        let capture = d.to_capture_options().unwrap();
        assert_eq!(capture.tables, "*.*");
        assert_eq!(capture.mode, SnapshotMode::Initial);
        assert_eq!(capture.server_id, 5400);
        assert_eq!(capture.snapshot.chunk_size, 8096);
        assert_eq!(capture.snapshot.parallelism, 4);
        assert_eq!(capture.snapshot.window_server_id, 5401);
    }

    #[test]
    fn every_option_is_parsed_and_mapped_onto_the_capture() {
        let o = ok(
            "tables = 'shop.*, crm.customers', chunk_size = 100, parallelism = 8, \
                    chunk_key = 'shop.items:c, shop.orders:cust', snapshot_mode = 'snapshot_only', \
                    server_id = 6100",
        );
        assert_eq!(o.tables, vec!["shop.*", "crm.customers"]);
        assert_eq!(o.chunk_size, 100);
        assert_eq!(o.parallelism, 8);
        assert_eq!(o.mode, SnapshotMode::SnapshotOnly);
        assert_eq!(o.server_id, 6100);
        let capture = o.to_capture_options().unwrap();
        assert_eq!(capture.tables, "shop.*, crm.customers");
        assert_eq!(capture.mode, SnapshotMode::SnapshotOnly);
        assert_eq!(capture.server_id, 6100);
        assert_eq!(capture.snapshot.window_server_id, 6101);
        assert_eq!(capture.snapshot.chunk_size, 100);
        assert_eq!(capture.snapshot.parallelism, 8);
        assert_eq!(capture.snapshot.chunk_keys.len(), 2);
        assert_eq!(
            capture.snapshot.chunk_keys[&TableId::new("shop", "items")],
            "c"
        );
        assert_eq!(
            capture.snapshot.chunk_keys[&TableId::new("shop", "orders")],
            "cust"
        );
    }

    #[test]
    fn stream_only_starts_at_the_current_end_unless_given_a_position() {
        assert_eq!(
            ok("snapshot_mode = 'stream_only'").mode,
            SnapshotMode::StreamOnly(StartPosition::Current)
        );
        // The order of the two options does not matter.
        assert_eq!(
            ok("start_position = 'binlog.000042:1337', snapshot_mode = 'stream_only'").mode,
            SnapshotMode::StreamOnly(StartPosition::Coord(BinlogCoord::new(
                "binlog.000042",
                1337
            )))
        );
        let mariadb = ok("snapshot_mode = 'stream_only', start_position = '0-1-30,1-2-5'");
        let SnapshotMode::StreamOnly(StartPosition::Gtid(set @ GtidSet::MariaDb(_))) =
            &mariadb.mode
        else {
            panic!("{mariadb:?}");
        };
        assert_eq!(set.to_string(), "0-1-30,1-2-5");
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let mysql = ok(&format!(
            "snapshot_mode = 'stream_only', start_position = '{uuid}:1-5:7'"
        ));
        assert!(matches!(
            mysql.mode,
            SnapshotMode::StreamOnly(StartPosition::Gtid(GtidSet::MySql(_)))
        ));
        assert_eq!(
            ok("snapshot_mode = 'stream_only', start_position = 'current'").mode,
            SnapshotMode::StreamOnly(StartPosition::Current)
        );
        assert_eq!(
            mysql.to_capture_options().unwrap().mode,
            mysql.mode,
            "the capture gets the position as parsed"
        );
    }

    #[test]
    fn option_names_are_case_insensitive_unless_quoted() {
        assert_eq!(ok("CHUNK_SIZE = 5").chunk_size, 5);
        assert_eq!(ok("Chunk_Size = 5").chunk_size, 5);
        assert_eq!(ok("\"chunk_size\" = 5").chunk_size, 5);
        assert_refused(
            "\"CHUNK_SIZE\" = 5",
            "42601",
            "unknown option \"CHUNK_SIZE\" at Line: 1, Column: 48",
        );
    }

    #[test]
    fn values_accept_their_literal_forms() {
        assert_eq!(
            ok("snapshot_mode = 'SNAPSHOT_ONLY'").mode,
            SnapshotMode::SnapshotOnly
        );
        assert_eq!(ok("tables = E'shop.\\x2a'").tables, vec!["shop.*"]);
        assert_eq!(ok("tables = $$shop.*$$").tables, vec!["shop.*"]);
        assert_eq!(ok("chunk_size = 1_000").chunk_size, 1000);
        assert_eq!(ok("tables = '  a.b ,c.*  '").tables, vec!["a.b", "c.*"]);
        assert_eq!(ok("parallelism = 1").parallelism, 1);
        assert_eq!(ok("parallelism = 64").parallelism, 64);
        assert_eq!(ok("server_id = 1").server_id, 1);
        let max = ok("server_id = 4294967294");
        assert_eq!(max.server_id, u32::MAX - 1);
        assert_eq!(
            max.to_capture_options().unwrap().snapshot.window_server_id,
            u32::MAX
        );
        // MySQL names keep their case.
        let keys = ok("tables = 'Shop.*', chunk_key = 'Shop.Items:ID'").chunk_keys;
        assert_eq!(keys[&TableId::new("Shop", "Items")], "ID");
    }

    #[test]
    fn unknown_and_repeated_options_are_refused() {
        assert_refused(
            "chunk_sz = 5",
            "42601",
            "unknown option \"chunk_sz\" at Line: 1, Column: 48; valid options are tables, \
             chunk_size, parallelism, chunk_key, snapshot_mode, start_position, server_id",
        );
        // Named even when its value would not parse.
        assert_refused("frobnicate = )", "42601", "unknown option \"frobnicate\"");
        assert_refused(
            "chunk_size = 5, parallelism = 2, CHUNK_SIZE = 6",
            "42601",
            "option chunk_size is given more than once at Line: 1, Column: 81",
        );
    }

    #[test]
    fn values_of_the_wrong_type_or_range_name_the_option() {
        let cases = [
            (
                "chunk_size = '100'",
                "invalid value for option chunk_size: expected an integer, found string '100' \
                 (write it without quotes: 100) at Line: 1, Column: 61",
            ),
            ("chunk_size = 0", "chunk_size: 0 is out of range 1..="),
            (
                "parallelism = 65",
                "invalid value for option parallelism: 65 is out of range 1..=64 \
                 at Line: 1, Column: 62",
            ),
            ("parallelism = 0", "parallelism: 0 is out of range 1..=64"),
            (
                "server_id = 0",
                "server_id: 0 is out of range 1..=4294967294",
            ),
            (
                "server_id = 4294967295",
                "server_id: 4294967295 is out of range 1..=4294967294",
            ),
            (
                "tables = 5",
                "tables: expected a string literal, found number 5 at Line: 1, Column: 57",
            ),
            (
                "tables = ''",
                "tables: no table pattern given; use '*.*' for every table",
            ),
            (
                "tables = 'shop'",
                "tables: pattern 'shop' must be db.table, with exactly one dot",
            ),
            (
                "tables = 'shop.a.b'",
                "tables: pattern 'shop.a.b' must be db.table, with exactly one dot",
            ),
            (
                "tables = '.orders'",
                "tables: pattern '.orders' must be db.table",
            ),
            ("tables = 'a.b,,c.d'", "tables: empty pattern in the list"),
            ("tables = 'a.b,'", "tables: empty pattern in the list"),
            (
                "snapshot_mode = 'full'",
                "snapshot_mode: expected 'initial', 'snapshot_only' or 'stream_only', \
                 found 'full'",
            ),
            (
                "start_position = 'binlog.000001:4'",
                "invalid value for option start_position: only valid with snapshot_mode = \
                 'stream_only' (here it is 'initial'); the other modes stream from where their \
                 snapshot ends at Line: 1, Column: 65",
            ),
            (
                "snapshot_mode = 'snapshot_only', start_position = 'binlog.000001:4'",
                "start_position: only valid with snapshot_mode = 'stream_only' \
                 (here it is 'snapshot_only')",
            ),
            (
                "snapshot_mode = 'stream_only', start_position = 'binlog:x'",
                "start_position: invalid binlog position: offset \"x\" in \"binlog:x\" is not a \
                 number",
            ),
            (
                "snapshot_mode = 'stream_only', start_position = 'garbage'",
                "start_position: invalid binlog position: expected domain-server-seq",
            ),
            (
                "snapshot_mode = 'stream_only', start_position = ' '",
                "start_position: empty; leave the option out",
            ),
            (
                "snapshot_mode = 'stream_only', start_position = 42",
                "start_position: expected a string literal, found number 42",
            ),
            (
                "chunk_key = 'shop.items'",
                "chunk_key: 'shop.items' must be db.table:column",
            ),
            (
                "chunk_key = 'items:id'",
                "chunk_key: table 'items' must be db.table",
            ),
            (
                "chunk_key = 'shop.*:id'",
                "chunk_key: 'shop.*:id' names a pattern; a chunk key belongs to one table",
            ),
            (
                "chunk_key = 'shop.items: '",
                "chunk_key: 'shop.items:' has an empty column name",
            ),
            ("chunk_key = ''", "chunk_key: no db.table:column given"),
            (
                "chunk_key = 'shop.a:x, shop.a:y'",
                "chunk_key: table shop.a is given two chunk keys",
            ),
            (
                "tables = 'shop.*', chunk_key = 'crm.customers:id'",
                "chunk_key: table crm.customers is not selected by tables = 'shop.*' \
                 at Line: 1, Column: 79",
            ),
            (
                "chunk_key = 'mysql.user:id'",
                "chunk_key: table mysql.user is not selected by tables = '*.*'",
            ),
        ];
        for (with, fragment) in cases {
            assert_refused(with, "22023", fragment);
        }
    }

    #[test]
    fn a_value_sqlparser_cannot_read_is_a_syntax_error_naming_the_option() {
        assert_refused(
            "chunk_size = )",
            "42601",
            "invalid value for option chunk_size: sql parser error: Expected: an expression, \
             found: ) at Line: 1, Column: 61",
        );
    }

    #[test]
    fn to_capture_options_rechecks_options_built_by_hand() {
        let refused = |o: SourceOptions, fragment: &str| {
            let e = o.to_capture_options().unwrap_err();
            assert!(e.to_string().contains(fragment), "{e}");
            assert_eq!(e.sqlstate(), "22023");
        };
        let d = SourceOptions::default;
        refused(
            SourceOptions {
                parallelism: 0,
                ..d()
            },
            "invalid value for option parallelism: 0 is out of range 1..=64",
        );
        refused(
            SourceOptions {
                chunk_size: 0,
                ..d()
            },
            "chunk_size: 0 is out of range",
        );
        refused(
            SourceOptions {
                server_id: u32::MAX,
                ..d()
            },
            "server_id: 4294967295 is out of range 1..=4294967294",
        );
        refused(
            SourceOptions {
                tables: vec![],
                ..d()
            },
            "tables: no table pattern given",
        );
        refused(
            SourceOptions {
                tables: vec!["shop".into()],
                ..d()
            },
            "tables: pattern 'shop' must be db.table",
        );
        let mut keys = BTreeMap::new();
        keys.insert(TableId::new("shop", "items"), " ".to_string());
        refused(
            SourceOptions {
                chunk_keys: keys.clone(),
                ..d()
            },
            "chunk_key: empty column for table shop.items",
        );
        keys.insert(TableId::new("shop", "items"), "id".to_string());
        refused(
            SourceOptions {
                tables: vec!["crm.*".into()],
                chunk_keys: keys,
                ..d()
            },
            "chunk_key: table shop.items is not selected by tables = 'crm.*'",
        );
    }

    #[test]
    fn rendered_options_parse_back_to_the_same_options() {
        for with in [
            "",
            "tables = 'shop.*, crm.customers', chunk_size = 100, parallelism = 8, \
             chunk_key = 'shop.items:c, shop.orders:cust', snapshot_mode = 'snapshot_only', \
             server_id = 6100",
            "tables = 'it''s.*', snapshot_mode = 'stream_only', start_position = 'b.000001:4'",
            "snapshot_mode = 'stream_only', start_position = '0-1-30'",
            "snapshot_mode = 'stream_only'",
        ] {
            let parsed = if with.is_empty() {
                SourceOptions::default()
            } else {
                ok(with)
            };
            let rendered = parsed.to_string();
            assert_eq!(ok(&rendered), parsed, "{with:?} rendered as {rendered:?}");
        }
        assert_eq!(
            SourceOptions::default().to_string(),
            "tables = '*.*', chunk_size = 8096, parallelism = 4, snapshot_mode = 'initial', \
             server_id = 5400"
        );
    }
}
