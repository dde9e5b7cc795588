//! The option table, [`OPTIONS`]: one row per `WITH (...)` option, holding everything about
//! it (name, value type and range, how the value sets [`SourceOptions`], how it is written
//! back, what leaving it out means, and its line of documentation), and the two passes that
//! run on it: reading a `WITH` list and rendering one.
//!
//! # Invariant
//! Reading goes through the table only, so what is accepted, how it is checked, the errors
//! (unknown option: the table's names; wrong type or range: the row's type), the rendered
//! text and the reference's option list (checked by a test against `docs/sql-reference.md`)
//! all come from the same rows and cannot disagree. The rules that span rows (`start_position`
//! only for `stream_only`; every `chunk_key` table one `tables` selects) run once, after the
//! rows, in [`Draft::finish`]. Each value is checked here and nowhere else.

use std::collections::BTreeMap;
use std::fmt;

use sqlparser::tokenizer::Location;

use super::formats::{parse_chunk_keys, parse_start, parse_tables, ModeName};
use super::typed::{
    ConnectionChange, MoveStart, SourceChanges, SourceOptions, MAX_PARALLELISM,
    MAX_PURGE_WARNING_SECONDS, MAX_READ_TIMEOUT_SECONDS, MAX_SERVER_ID,
};
use crate::capture::SnapshotMode;
use crate::change::position::StartPosition;
use crate::source::binlog::table_filter;
use crate::sql::error::SqlError;
use crate::sql::mysql_url::{mask_password, MySqlUrl};
use crate::sql::names::quote_string;
use crate::sql::value::{Literal, RawOption};
use crate::state::retention::RetainHistory;

/// One option of `CREATE SOURCE ... WITH (...)`; see the module docs.
pub struct OptionSpec {
    /// The option's name in SQL (unquoted names are case-folded before the lookup).
    pub name: &'static str,
    /// The value's type, its range, and what it sets.
    value: ValueType,
    /// What leaving the option out means, for an option whose default has no value to write.
    unset: Option<&'static str>,
    /// Whether a rendered statement writes the option when it has its default value. Options
    /// added later are written only when set, so statements rendered before read the same.
    written_at_default: bool,
    /// What the option does, in one line; the reference's description starts with it.
    pub summary: &'static str,
    /// The value as SQL, or `None` when there is none to write.
    render: fn(&SourceOptions) -> Option<String>,
}

/// The type of an option's value; each variant's `set` takes the checked value.
enum ValueType {
    /// A number literal in `min..=max`; `set` may still refuse it (a message for the value).
    Integer {
        min: u64,
        max: u64,
        set: fn(&mut Draft, u64) -> Result<(), String>,
    },
    /// `true` or `false` (also `on`/`off`, `yes`/`no`, `1`/`0`, as PostgreSQL takes them).
    Boolean { set: fn(&mut Draft, bool) },
    /// A string literal in the documented `form`, parsed by `set`.
    String {
        form: &'static str,
        set: fn(&mut Draft, &str) -> Result<(), String>,
    },
}

/// Largest `chunk_size`: any positive size this machine can count to.
const MAX_CHUNK_SIZE: u64 = usize::MAX as u64;

/// Every option, in the order of the SQL reference and of rendering.
pub static OPTIONS: [OptionSpec; 12] = [
    OptionSpec {
        name: "tables",
        value: ValueType::String {
            form: "string: comma-separated `db.table` patterns, `*` matches any run of characters",
            set: |d, s| parse_tables(s).map(|v| d.options.tables = v),
        },
        unset: None,
        written_at_default: true,
        summary: "The tables to capture.",
        render: |o| Some(quote_string(&o.tables.join(", "))),
    },
    OptionSpec {
        name: "chunk_size",
        value: ValueType::Integer {
            min: 1,
            max: MAX_CHUNK_SIZE,
            set: |d, n| narrow(n).map(|v| d.options.chunk_size = v),
        },
        unset: None,
        written_at_default: true,
        summary: "Target rows per snapshot chunk",
        render: |o| Some(o.chunk_size.to_string()),
    },
    OptionSpec {
        name: "parallelism",
        value: ValueType::Integer {
            min: 1,
            max: MAX_PARALLELISM,
            set: |d, n| narrow(n).map(|v| d.options.parallelism = v),
        },
        unset: None,
        written_at_default: true,
        summary: "Snapshot chunks read at once",
        render: |o| Some(o.parallelism.to_string()),
    },
    OptionSpec {
        name: "chunk_key",
        value: ValueType::String {
            form: "string: comma-separated `db.table:column`",
            set: |d, s| parse_chunk_keys(s).map(|v| d.options.chunk_keys = v),
        },
        unset: Some("the first primary-key column"),
        written_at_default: true,
        summary: "The column a table's snapshot is split by",
        render: |o| {
            (!o.chunk_keys.is_empty()).then(|| {
                let keys: Vec<String> = o
                    .chunk_keys
                    .iter()
                    .map(|(t, c)| format!("{t}:{c}"))
                    .collect();
                quote_string(&keys.join(", "))
            })
        },
    },
    OptionSpec {
        name: "snapshot_mode",
        value: ValueType::String {
            form: "`'initial'`, `'snapshot_only'` or `'stream_only'`",
            set: |d, s| ModeName::parse(s).map(|v| d.mode = v),
        },
        unset: None,
        written_at_default: true,
        summary: "How the source starts.",
        render: |o| Some(quote_string(ModeName::of(&o.mode).name())),
    },
    OptionSpec {
        name: "start_position",
        value: ValueType::String {
            form: "string: `file:offset`, a GTID set, or `'current'`",
            set: |d, s| parse_start(s).map(|v| d.start = Some(v)),
        },
        unset: Some("the current end of the binlog"),
        written_at_default: true,
        summary: "Where `stream_only` starts",
        render: |o| match &o.mode {
            SnapshotMode::StreamOnly(StartPosition::Coord(c)) => Some(quote_string(&c.to_string())),
            SnapshotMode::StreamOnly(StartPosition::Gtid(set)) => {
                Some(quote_string(&set.to_string()))
            }
            _ => None,
        },
    },
    OptionSpec {
        name: "server_id",
        value: ValueType::Integer {
            min: 1,
            max: MAX_SERVER_ID,
            set: |d, n| narrow(n).map(|v| d.options.server_id = v),
        },
        unset: None,
        written_at_default: true,
        summary: "The replica id the stream registers with",
        render: |o| Some(o.server_id.to_string()),
    },
    OptionSpec {
        name: "validate",
        value: ValueType::Boolean {
            set: |d, b| d.options.validate = b,
        },
        unset: None,
        written_at_default: false,
        summary: "Whether the statement checks the server before it answers",
        render: |o| Some(o.validate.to_string()),
    },
    OptionSpec {
        name: "visible_during_snapshot",
        value: ValueType::Boolean {
            set: |d, b| d.options.visible_during_snapshot = b,
        },
        unset: None,
        written_at_default: false,
        summary: "Whether the tables are listed and queryable while the initial snapshot runs",
        render: |o| Some(o.visible_during_snapshot.to_string()),
    },
    OptionSpec {
        name: "read_timeout_seconds",
        value: ValueType::Integer {
            min: 1,
            max: MAX_READ_TIMEOUT_SECONDS,
            set: |d, n| {
                d.options.read_timeout = std::time::Duration::from_secs(n);
                Ok(())
            },
        },
        unset: None,
        written_at_default: false,
        summary: "How long any read from the server may wait for an answer",
        render: |o| Some(o.read_timeout.as_secs().to_string()),
    },
    OptionSpec {
        name: "retain_history",
        value: ValueType::String {
            form: "`'all'`, `'<n> changes'` or a duration (`'24h'`, `'30m'`, `'7 days'`)",
            set: |d, s| RetainHistory::parse(s).map(|v| d.options.retain_history = v),
        },
        unset: None,
        written_at_default: false,
        summary: "How much changelog history each table keeps",
        render: |o| Some(quote_string(&o.retain_history.to_string())),
    },
    OptionSpec {
        name: "binlog_purge_warning_seconds",
        value: ValueType::Integer {
            min: 1,
            max: MAX_PURGE_WARNING_SECONDS,
            set: |d, n| {
                d.options.purge_warning = std::time::Duration::from_secs(n);
                Ok(())
            },
        },
        unset: None,
        written_at_default: false,
        summary: "Warn when the binlog at the source's position may be purged within this",
        render: |o| Some(o.purge_warning.as_secs().to_string()),
    },
];

/// The options `ALTER SOURCE ... SET` may change on a running source.
const ALTERABLE: [&str; 3] = [
    "retain_history",
    "binlog_purge_warning_seconds",
    "server_id",
];

/// `n` as the field's integer type; the row's range keeps it in the type, so this refuses
/// only a row whose range is wider than its field.
fn narrow<T: TryFrom<u64>>(n: u64) -> Result<T, String> {
    T::try_from(n).map_err(|_| format!("{n} does not fit this option's type"))
}

impl OptionSpec {
    /// The row of the option named `name` (already case-folded).
    pub fn named(name: &str) -> Option<&'static OptionSpec> {
        OPTIONS.iter().find(|o| o.name == name)
    }

    /// The error for an option name no row has, listing the ones that exist.
    pub(crate) fn unknown(name: &str, location: Location) -> SqlError {
        SqlError::UnknownOption {
            name: name.to_string(),
            known: OPTIONS.iter().map(|o| o.name).collect(),
            location: Some(location),
        }
    }

    /// The value's form as the reference states it (`integer 1 to 64`).
    pub fn form(&self) -> String {
        match &self.value {
            ValueType::Integer { min, max, .. } if *max == MAX_CHUNK_SIZE => {
                format!("integer ≥ {min}")
            }
            ValueType::Integer { min, max, .. } => format!("integer {min} to {max}"),
            ValueType::Boolean { .. } => "`true` or `false`".to_string(),
            ValueType::String { form, .. } => form.to_string(),
        }
    }

    /// The default as the reference states it: its SQL value, or what leaving it out means.
    pub fn default_text(&self) -> String {
        (self.render)(&SourceOptions::default())
            .or(self.unset.map(str::to_string))
            .unwrap_or_default()
    }

    /// The option's value in `options` as SQL (`'*.*'`, `8096`), or `None` when a rendered
    /// statement leaves it out (no value, or a default that is not written).
    pub fn value_sql(&self, options: &SourceOptions) -> Option<String> {
        let value = (self.render)(options)?;
        if !self.written_at_default
            && Some(&value) == (self.render)(&SourceOptions::default()).as_ref()
        {
            return None;
        }
        Some(value)
    }

    /// Checks `literal` as this option's type and sets it in `draft`.
    fn read(&self, literal: &Literal<'_>, draft: &mut Draft) -> Result<(), SqlError> {
        match &self.value {
            ValueType::Integer { min, max, set } => {
                let n = literal.integer_in::<u64>(*min..=*max)?;
                set(draft, n).map_err(|m| literal.invalid(m))
            }
            ValueType::Boolean { set } => {
                set(draft, literal.boolean()?);
                Ok(())
            }
            ValueType::String { set, .. } => {
                set(draft, literal.string()?).map_err(|m| literal.invalid(m))
            }
        }
    }
}

impl fmt::Debug for OptionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OptionSpec")
            .field("name", &self.name)
            .field("form", &self.form())
            .finish_non_exhaustive()
    }
}

/// Options being read: the rows set fields here; [`Draft::finish`] checks what spans rows.
struct Draft {
    options: SourceOptions,
    /// `snapshot_mode` and `start_position` as given, folded into one mode at the end.
    mode: ModeName,
    start: Option<StartPosition>,
}

impl Draft {
    /// The rules that span rows; `seen` has where each given option's value is.
    fn finish(self, seen: &BTreeMap<&'static str, Location>) -> Result<SourceOptions, SqlError> {
        let mut out = self.options;
        out.mode = match (self.mode, self.start) {
            (ModeName::StreamOnly, start) => {
                SnapshotMode::StreamOnly(start.unwrap_or(StartPosition::Current))
            }
            (ModeName::Initial, None) => SnapshotMode::Initial,
            (ModeName::SnapshotOnly, None) => SnapshotMode::SnapshotOnly,
            (other, Some(_)) => {
                return Err(SqlError::InvalidValue {
                    option: "start_position",
                    message: format!(
                        "only valid with snapshot_mode = 'stream_only' (here it is '{}'); \
                         the other modes stream from where their snapshot ends",
                        other.name()
                    ),
                    location: seen.get("start_position").copied(),
                })
            }
        };
        // A key for a table that is never captured is a typo in one of the two options.
        let patterns = out.tables.join(", ");
        let filter = table_filter(&patterns).map_err(|e| SqlError::InvalidValue {
            option: "tables",
            message: e.to_string(),
            location: seen.get("tables").copied(),
        })?;
        if let Some(table) = out.chunk_keys.keys().find(|t| !filter(t)) {
            return Err(SqlError::InvalidValue {
                option: "chunk_key",
                message: format!("table {table} is not selected by tables = '{patterns}'"),
                location: seen.get("chunk_key").copied(),
            });
        }
        Ok(out)
    }
}

impl SourceOptions {
    /// Reads the items of a `WITH` list over the defaults, through the table.
    pub(crate) fn from_raw(raw: &[RawOption]) -> Result<Self, SqlError> {
        let mut draft = Draft::over(Self::default());
        let seen = draft.read_items(raw, |_| Ok(()))?;
        draft.finish(&seen)
    }
}

impl Draft {
    /// A draft starting from `options` (with the default mode).
    fn over(options: SourceOptions) -> Self {
        Self {
            options,
            mode: ModeName::Initial,
            start: None,
        }
    }

    /// Reads `raw` through the table into the draft, each option once and each one `allowed`
    /// lets through; returns where each option's value is.
    fn read_items<'a>(
        &mut self,
        raw: impl IntoIterator<Item = &'a RawOption>,
        allowed: impl Fn(&RawOption) -> Result<(), SqlError>,
    ) -> Result<BTreeMap<&'static str, Location>, SqlError> {
        let mut seen = BTreeMap::new();
        for item in raw {
            let spec = OptionSpec::named(&item.name)
                .ok_or_else(|| OptionSpec::unknown(&item.name, item.name_location))?;
            allowed(item)?;
            if seen.insert(spec.name, item.value_location).is_some() {
                return Err(SqlError::DuplicateOption {
                    option: spec.name,
                    location: Some(item.name_location),
                });
            }
            let literal = Literal {
                option: spec.name,
                item,
            };
            spec.read(&literal, self)?;
        }
        Ok(seen)
    }
}

impl SourceChanges {
    /// Reads the items of `ALTER SOURCE ... SET (...)`: the options a running source can
    /// change through the table, with the same checks as in `CREATE SOURCE`, and how to reach
    /// its server.
    pub(crate) fn from_raw(raw: &[RawOption]) -> Result<Self, SqlError> {
        // How to reach the server is not a `WITH` option (the URL is `FROM MYSQL '...'`), so
        // those items are read here and the rest through the table.
        let mut connection = Vec::new();
        let mut options = Vec::new();
        // Where a move goes on: items of ALTER alone, each at most once.
        let (mut start, mut accept) = (None, None);
        for item in raw {
            let (option, slot) = match item.name.as_str() {
                "start_position" => ("start_position", &mut start),
                "accept_errant_gtids" => ("accept_errant_gtids", &mut accept),
                _ => {
                    match CONNECTION.into_iter().find(|name| *name == item.name) {
                        Some(name) => connection.push((name, item)),
                        None => options.push(item),
                    }
                    continue;
                }
            };
            if slot.replace(item).is_some() {
                return Err(SqlError::DuplicateOption {
                    option,
                    location: Some(item.name_location),
                });
            }
        }
        let mut out = SourceChanges {
            connection: read_connection(&connection)?,
            ..SourceChanges::default()
        };
        if let Some(item) = start {
            out.start = Some(MoveStart::At(read_move_start(item, &out.connection)?));
        }
        if let Some(item) = accept {
            let literal = Literal {
                option: "accept_errant_gtids",
                item,
            };
            out.accept_errant = literal.boolean()?;
            if out.connection.url.is_none() {
                return Err(literal.invalid(
                    "it lets a move to another server go on, so it comes with that server's \
                     url: ALTER SOURCE ... SET (url = '...', accept_errant_gtids = true)"
                        .into(),
                ));
            }
        }
        let mut draft = Draft::over(SourceOptions::default());
        let seen = draft.read_items(options, |item| {
            if ALTERABLE.contains(&item.name.as_str()) {
                return Ok(());
            }
            Err(SqlError::Unsupported {
                feature: format!("changing {} of a running source", item.name),
                hint: Some(format!(
                    "ALTER SOURCE ... SET changes {} and {}; for the other options DROP \
                     SOURCE, then CREATE SOURCE",
                    ALTERABLE.join(", "),
                    CONNECTION.join(", ")
                )),
                location: Some(item.name_location),
            })
        })?;
        if seen.contains_key("retain_history") {
            out.retain_history = Some(draft.options.retain_history);
        }
        if seen.contains_key("binlog_purge_warning_seconds") {
            out.purge_warning = Some(draft.options.purge_warning);
        }
        if seen.contains_key("server_id") {
            out.server_id = Some(draft.options.server_id);
        }
        Ok(out)
    }
}

/// What `ALTER SOURCE ... SET` takes besides the alterable options: how to reach the server.
const CONNECTION: [&str; 3] = ["url", "user", "password"];

/// `start_position` of `ALTER SOURCE ... SET`: where the source goes on at the server of the
/// `url` given with it (so it comes with a `url`), as `CREATE SOURCE` reads it; a position of
/// the new server, so without the history prefix positions of an earlier server carry.
fn read_move_start(
    item: &RawOption,
    connection: &ConnectionChange,
) -> Result<StartPosition, SqlError> {
    let literal = Literal {
        option: "start_position",
        item,
    };
    if connection.url.is_none() {
        return Err(literal.invalid(
            "it names where the source goes on at another server, so it comes with that \
             server's url: ALTER SOURCE ... SET (url = '...', start_position = '...')"
                .into(),
        ));
    }
    let start = parse_start(literal.string()?).map_err(|e| literal.invalid(e))?;
    if let StartPosition::Coord(c) = &start {
        if c.history() != 0 {
            return Err(literal.invalid(format!(
                "{c} is a position of this engine (an earlier server's); name the file and \
                 offset as the new server's SHOW MASTER STATUS gives them"
            )));
        }
    }
    Ok(start)
}

/// The `url`, `user` and `password` items of `ALTER SOURCE ... SET`, each a string at most
/// once; the URL must parse as `CREATE SOURCE`'s does.
fn read_connection(items: &[(&'static str, &RawOption)]) -> Result<ConnectionChange, SqlError> {
    let mut out = ConnectionChange::default();
    for &(option, item) in items {
        let literal = Literal { option, item };
        let value = literal.string()?.to_string();
        let repeated = match option {
            "url" => out
                .url
                .replace(
                    MySqlUrl::parse(&value).map_err(|reason| SqlError::InvalidUrl {
                        url: mask_password(&value),
                        reason,
                        location: Some(item.value_location),
                    })?,
                )
                .is_some(),
            "user" => {
                if value.is_empty() {
                    return Err(literal.invalid("a user name cannot be empty".into()));
                }
                out.user.replace(value).is_some()
            }
            _ => out.password.replace(value).is_some(),
        };
        if repeated {
            return Err(SqlError::DuplicateOption {
                option,
                location: Some(item.name_location),
            });
        }
    }
    Ok(out)
}

impl fmt::Display for SourceChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(r) = &self.retain_history {
            parts.push(format!("retain_history = {}", quote_string(&r.to_string())));
        }
        if let Some(w) = &self.purge_warning {
            parts.push(format!("binlog_purge_warning_seconds = {}", w.as_secs()));
        }
        if let Some(id) = &self.server_id {
            parts.push(format!("server_id = {id}"));
        }
        if let Some(url) = &self.connection.url {
            parts.push(format!("url = {}", quote_string(&url.masked())));
        }
        if let Some(user) = &self.connection.user {
            parts.push(format!("user = {}", quote_string(user)));
        }
        if self.connection.password.is_some() {
            parts.push("password = '****'".to_string());
        }
        if self.accept_errant {
            parts.push("accept_errant_gtids = true".to_string());
        }
        if let Some(MoveStart::At(start)) = &self.start {
            let text = match start {
                StartPosition::Current => "current".to_string(),
                StartPosition::Coord(c) => c.to_string(),
                StartPosition::Gtid(set) => set.to_string(),
            };
            parts.push(format!("start_position = {}", quote_string(&text)));
        }
        f.write_str(&parts.join(", "))
    }
}

/// Renders the inside of `WITH (...)`: every option that has a value, in table order, so
/// parsing the text back gives the same options.
impl fmt::Display for SourceOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for spec in &OPTIONS {
            if let Some(value) = spec.value_sql(self) {
                if !first {
                    f.write_str(", ")?;
                }
                first = false;
                write!(f, "{} = {value}", spec.name)?;
            }
        }
        Ok(())
    }
}
