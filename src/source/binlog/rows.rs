//! Decoding binlog row images straight into Arrow builders.
//!
//! mysql_common frames the events and parses table maps; this module owns the row bytes. It
//! compiles each table map once into a [`TableDecoder`]: the wire layout of every column,
//! checked against the table's [`TableSchema`] and fused with the column's Arrow type into one
//! operation per column (see `columns`). Whole rows events then decode into [`ImageColumns`]
//! with one match per value and no per-row allocation, which is why it runs several times
//! faster than decoding into `mysql_common` values.
//!
//! # Invariants
//! * A row is only decoded with a schema whose column count, column types and (when the table
//!   map carries them, `binlog_row_metadata=FULL`) column names match the table map. A table map
//!   that matches no schema is a [`SourceError::SchemaMismatch`], never a misaligned decode.
//! * A value that does not fit its field (a NULL in a `NOT NULL` column, a date MySQL cannot
//!   store, bytes beyond the image) is a [`SourceError::Decode`] naming the table, column, row
//!   and event position, never a panic.
//! * Only full images are accepted: a rows event whose column bitmap leaves a column out is a
//!   [`SourceError::PartialRowImage`], because the snapshot normalisation and the per-key merge
//!   need every column of every before and after image.
//!   A MySQL partial JSON update (`PARTIAL_UPDATE_ROWS`) is such a full image whose JSON
//!   columns may hold changes: they are applied to the row's before image as decoded
//!   (`mysql_json::diff`), so the after image is whole too.
//! * Values go through the conversions of `source::types` that the snapshot path also uses.

use crate::change::kinds::SimpleKind;
use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use mysql_async::binlog::events::{OptionalMetaExtractor, OptionalMetadataField, TableMapEvent};
use mysql_async::consts::ColumnType;

use super::columns::Column;
use super::cursor::Cursor;
pub use super::cursor::RowsError;
use super::layout::Layout;
use crate::change::schema::{Charset, ColumnKind, ColumnSpec, TableId, TableSchema};

/// Collation id → character set and the most bytes one of its characters takes, read from the
/// server's `information_schema.COLLATIONS`; `None` for `binary`.
pub type CollationMap = HashMap<u16, Option<(Charset, u8)>>;

/// The collation id MySQL uses for binary strings.
const BINARY_COLLATION: u16 = 63;

/// The collation ids of the character sets we decode, for reading binlogs with no server to ask
/// (offline files); a live reader uses the server's own `information_schema` instead.
///
/// Covers MySQL 5.x–9.x and MariaDB: latin1, ascii, binary, utf8mb3 and utf8mb4, including
/// MySQL 8's `_0900_` collations (ids 255–323, all utf8mb4), MariaDB's NO PAD variants
/// (id + 1024) and MariaDB 10.10+'s UCA 14.0 collations (2048 + 256 × charset + flags).
/// Ids of other character sets are left out, so their columns fail clearly.
pub fn builtin_collations() -> CollationMap {
    const LATIN1: &[u16] = &[5, 8, 15, 31, 47, 48, 49, 94, 1032, 1071];
    const ASCII: &[u16] = &[11, 65, 1035, 1089];
    const UTF8MB3: &[u16] = &[33, 76, 83, 223, 576, 577, 578, 1057, 1107, 1216, 1238];
    const UTF8MB4: &[u16] = &[45, 46, 608, 609, 610, 1069, 1070, 1248, 1270];
    // utf8mb3 UCA collations; MariaDB UCA 14.0, where utf8mb3 is charset 0.
    let mb3 = UTF8MB3.iter().copied().chain(192..=215).chain(2048..=2303);
    // utf8mb4 UCA collations, MySQL 8's 0900 collations; MariaDB UCA 14.0's charset 1.
    let mb4 = UTF8MB4
        .iter()
        .copied()
        .chain(224..=247)
        .chain(255..=323)
        .chain(2304..=2559);
    let mut map: CollationMap = mb3.map(|id| (id, Some((Charset::Utf8, 3)))).collect();
    map.extend(mb4.map(|id| (id, Some((Charset::Utf8, 4)))));
    map.extend(ASCII.iter().map(|&id| (id, Some((Charset::Utf8, 1)))));
    map.extend(LATIN1.iter().map(|&id| (id, Some((Charset::Latin1, 1)))));
    map.insert(BINARY_COLLATION, None);
    map
}

/// Which server wrote a table map, for what its optional metadata counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MapWriter {
    #[default]
    MySql,
    MariaDb,
}

impl MapWriter {
    /// The writer of a binlog whose format description names `server_version`.
    pub fn of_server_version(server_version: &str) -> Self {
        if server_version.contains("MariaDB") {
            MapWriter::MariaDb
        } else {
            MapWriter::MySql
        }
    }
}

/// Whether a column of this table-map type takes a bit of the SIGNEDNESS metadata. MySQL's
/// writer follows `is_numeric_type` (in the log_event code mysqlbinlog shares), which leaves
/// YEAR out; mysql_common's `ColumnType::is_numeric_type` counts it, which would shift every
/// later bit. MariaDB's writer gives a bit to every field with a sign, YEAR included (an
/// unsigned TINYINT underneath): read by MySQL's rule, a signed TINYINT after a YEAR takes the
/// YEAR's bit and looks unsigned (as `mariadb-binlog --print-table-metadata` 10.11 shows it).
fn takes_signedness(t: ColumnType, writer: MapWriter) -> bool {
    use ColumnType as T;
    matches!(
        t,
        T::MYSQL_TYPE_TINY
            | T::MYSQL_TYPE_SHORT
            | T::MYSQL_TYPE_INT24
            | T::MYSQL_TYPE_LONG
            | T::MYSQL_TYPE_LONGLONG
            | T::MYSQL_TYPE_NEWDECIMAL
            | T::MYSQL_TYPE_FLOAT
            | T::MYSQL_TYPE_DOUBLE
    ) || (writer == MapWriter::MariaDb && t == T::MYSQL_TYPE_YEAR)
}

/// Whether a column of this table-map type takes an entry of the (DEFAULT_/COLUMN_)CHARSET
/// metadata. Besides the string types, MySQL counts GEOMETRY (a BLOB underneath) and VECTOR,
/// which mysql_common's `is_character_type` misses: `vector.binlog` (MySQL 9.0) lists
/// `bar(VECTOR, TEXT, VECTOR)` with the TEXT's utf8mb4 as the second entry.
fn takes_charset(t: ColumnType) -> bool {
    use ColumnType as T;
    matches!(
        t,
        T::MYSQL_TYPE_STRING
            | T::MYSQL_TYPE_VAR_STRING
            | T::MYSQL_TYPE_VARCHAR
            | T::MYSQL_TYPE_BLOB
            | T::MYSQL_TYPE_GEOMETRY
            | T::MYSQL_TYPE_VECTOR
    )
}

/// The column names a table map carries (with `binlog_row_metadata=FULL`), if any.
fn table_map_names(tme: &TableMapEvent<'_>) -> Option<Vec<String>> {
    let extractor = OptionalMetaExtractor::new(tme.iter_optional_meta()).ok()?;
    let names: Vec<String> = extractor
        .iter_column_name()
        .map(|n| n.map(|n| n.name().into_owned()))
        .collect::<Result<_, _>>()
        .ok()?;
    (names.len() == tme.columns_count() as usize).then_some(names)
}

/// A table map compiled for decoding: the schema rows decode into and one operation per column.
#[derive(Debug)]
pub struct TableDecoder {
    pub schema: Arc<TableSchema>,
    /// Each column's operation, with empty buffers: the template of every [`ImageColumns`].
    columns: Vec<Column>,
}

/// The columns of one image (before or after) of a batch of rows being decoded; made by
/// [`TableDecoder::image`] and finished by [`TableDecoder::finish`].
#[derive(Debug)]
pub struct ImageColumns {
    columns: Vec<Column>,
}

impl ImageColumns {
    /// Room for `rows` more values in every column; byte columns also reserve for their
    /// values' bytes, at most `bytes` each (see `buffers::Bytes::reserve`).
    pub(super) fn reserve(&mut self, rows: usize, bytes: usize) {
        for c in &mut self.columns {
            c.reserve(rows, bytes);
        }
    }

    /// Whether [`ImageColumns::append`] can move `other`'s rows after these: an image of the
    /// same table map whose text still fits 32-bit offsets.
    pub fn can_take(&self, other: &ImageColumns) -> bool {
        self.columns.len() == other.columns.len()
            && self
                .columns
                .iter()
                .zip(&other.columns)
                .all(|(a, b)| a.can_take(b))
    }

    /// Whether rows whose values take up to `bytes` bytes can be decoded after these (see
    /// [`ImageColumns::can_take`]).
    pub fn has_room(&self, bytes: usize) -> bool {
        self.columns.iter().all(|c| c.has_room(bytes))
    }

    /// Keeps the first `rows` rows.
    pub fn truncate(&mut self, rows: usize) {
        self.columns.iter_mut().for_each(|c| c.truncate(rows));
    }

    /// The rows from `at` on, which these columns no longer hold.
    pub fn split_off(&mut self, at: usize) -> ImageColumns {
        ImageColumns {
            columns: self.columns.iter_mut().map(|c| c.split_off(at)).collect(),
        }
    }

    /// Moves `other`'s rows after these, leaving `other` empty with its buffers' capacity kept
    /// for the next rows decoded into it. The caller checked [`ImageColumns::can_take`].
    pub fn append(&mut self, other: &mut ImageColumns) {
        for (a, b) in self.columns.iter_mut().zip(&mut other.columns) {
            a.append(b);
        }
    }
}

/// Why decoded rows did not make a batch: the column, the row of the batch when one row is at
/// fault, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageError {
    pub column: String,
    pub row: Option<usize>,
    pub detail: String,
}

impl std::fmt::Display for ImageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.row {
            Some(row) => write!(f, "column {}, row {row}: {}", self.column, self.detail),
            None => write!(f, "column {}: {}", self.column, self.detail),
        }
    }
}

impl TableDecoder {
    /// Compiles `tme` against `schema`; an error says why they do not match.
    pub fn new(tme: &TableMapEvent<'_>, schema: Arc<TableSchema>) -> Result<Self, String> {
        let n = tme.columns_count() as usize;
        if n != schema.columns.len() {
            return Err(format!(
                "the table map has {n} columns, the schema has {}",
                schema.columns.len()
            ));
        }
        if let Some(names) = table_map_names(tme) {
            for (name, col) in names.iter().zip(&schema.columns) {
                if !name.eq_ignore_ascii_case(&col.name) {
                    return Err(format!(
                        "column {} is named {name:?} in the table map",
                        col.name
                    ));
                }
            }
        }
        let mut columns = Vec::with_capacity(n);
        for (i, (col, field)) in schema.columns.iter().zip(schema.arrow.fields()).enumerate() {
            let wire = Layout::from_table_map(tme, i)?;
            if !wire.fits(&col.kind) {
                return Err(format!(
                    "column {} is {} in the schema but {wire:?} in the table map",
                    col.name,
                    col.kind.mysql_type()
                ));
            }
            let column = Column::compile(wire, &col.kind, field.is_nullable())
                .map_err(|e| format!("column {}: {e}", col.name))?;
            columns.push(column);
        }
        Ok(Self { schema, columns })
    }

    /// Checks `schema` (the server's, read now) against what the table map itself says of each
    /// column, when it says enough (`binlog_row_metadata=FULL`). A table map written before a
    /// `MODIFY` fits the wire types of the newer schema but not its declared length, signedness,
    /// ENUM members or nullability: events read behind the server must be decoded under the
    /// schema of their own position, never the server's current one.
    pub fn check_against_map(
        tme: &TableMapEvent<'_>,
        schema: &TableSchema,
        collations: &CollationMap,
        writer: MapWriter,
    ) -> Result<(), String> {
        // Without names and charsets the map cannot describe the columns: nothing to compare.
        let Ok(from_map) =
            Self::schema_from_table_map(tme, Some(schema), collations, writer, false)
        else {
            return Ok(());
        };
        for (server, map) in schema.columns.iter().zip(&from_map.columns) {
            if server.kind != map.kind || server.nullable != map.nullable {
                let null = |c: &ColumnSpec| if c.nullable { "" } else { " not null" };
                return Err(format!(
                    "column {} is {}{} on the server now but {}{} in the table map",
                    server.name,
                    server.kind.mysql_type(),
                    null(server),
                    map.kind.mysql_type(),
                    null(map)
                ));
            }
        }
        Ok(())
    }

    /// Empty columns for one image of a batch of this table's rows.
    pub fn image(&self) -> ImageColumns {
        ImageColumns {
            columns: self.columns.clone(),
        }
    }

    /// Builds the schema from the table map alone, for events older than the server's current
    /// schema. Needs column names in the table map (`binlog_row_metadata=FULL`); `current` (the
    /// schema now) contributes what table maps do not carry: which MariaDB LONGTEXT columns are
    /// JSON.
    pub fn schema_from_table_map(
        tme: &TableMapEvent<'_>,
        current: Option<&TableSchema>,
        collations: &CollationMap,
        writer: MapWriter,
        allow_unnamed: bool,
    ) -> Result<TableSchema, String> {
        let names = match table_map_names(tme) {
            Some(names) => names,
            // Offline decoding: MySQL's own tools call these @1, @2...
            None if allow_unnamed => (1..=tme.columns_count())
                .map(|i| format!("col_{i}"))
                .collect(),
            None => {
                return Err(
                    "the table map carries no column names; set binlog_row_metadata=FULL \
                            so that events written before a schema change can be decoded"
                        .to_string(),
                )
            }
        };
        let extractor = OptionalMetaExtractor::new(tme.iter_optional_meta())
            .map_err(|e| format!("bad optional metadata: {e}"))?;
        let mut unsigned = extractor.iter_signedness();
        let mut charsets = extractor.iter_charset();
        let mut enum_labels = Vec::new();
        let mut set_labels = Vec::new();
        for field in tme.iter_optional_meta() {
            match field.map_err(|e| format!("bad optional metadata: {e}"))? {
                OptionalMetadataField::EnumStrValue(v) => {
                    for values in v.iter_values() {
                        let values = values.map_err(|e| format!("bad enum labels: {e}"))?;
                        enum_labels.push(
                            values
                                .values()
                                .iter()
                                .map(|x| x.value().into_owned())
                                .collect::<Vec<_>>(),
                        );
                    }
                }
                OptionalMetadataField::SetStrValue(v) => {
                    for values in v.iter_values() {
                        let values = values.map_err(|e| format!("bad set labels: {e}"))?;
                        set_labels.push(
                            values
                                .values()
                                .iter()
                                .map(|x| x.value().into_owned())
                                .collect::<Vec<_>>(),
                        );
                    }
                }
                _ => {}
            }
        }
        let (mut enums, mut sets) = (enum_labels.into_iter(), set_labels.into_iter());
        let mut columns = Vec::with_capacity(names.len());
        let nulls = tme.null_bitmask();
        for (i, name) in names.into_iter().enumerate() {
            let wire = Layout::from_table_map(tme, i)?;
            let raw = tme.get_raw_column_type(i).ok().flatten();
            let sign = if raw.is_some_and(|t| takes_signedness(t, writer)) {
                unsigned.next().unwrap_or(false)
            } else {
                false
            };
            // `None` when the table map has no charset metadata (servers before MySQL 8.0).
            let collation = if raw.is_some_and(takes_charset)
                && !matches!(wire, Layout::Enum { .. } | Layout::Set { .. })
            {
                charsets
                    .next()
                    .transpose()
                    .map_err(|e| format!("bad charset metadata: {e}"))?
            } else {
                None
            };
            let charset = match collation {
                Some(id)
                    if id != BINARY_COLLATION
                        && matches!(wire, Layout::VarLen { .. } | Layout::Blob { .. }) =>
                {
                    *collations
                        .get(&id)
                        .ok_or_else(|| format!("column {name}: unknown collation id {id}"))?
                }
                _ => None,
            };
            // What the server's schema says the column is, for what the table map cannot say.
            let was = current.and_then(|s| s.column_index(&name).map(|c| &s.columns[c].kind));
            let was_json = was.is_some_and(|k| *k == ColumnKind::Simple(SimpleKind::Json));
            let int = |bits| ColumnKind::Int {
                bits,
                unsigned: sign,
            };
            let kind = match wire {
                Layout::Tiny => int(8),
                Layout::Short => int(16),
                Layout::Int24 => int(24),
                Layout::Long => int(32),
                Layout::LongLong => int(64),
                Layout::Float => ColumnKind::Simple(SimpleKind::Float),
                Layout::Double => ColumnKind::Simple(SimpleKind::Double),
                Layout::NewDecimal { precision, scale } => ColumnKind::Decimal { precision, scale },
                Layout::Date => ColumnKind::Simple(SimpleKind::Date),
                Layout::TimeOld => ColumnKind::Time { fsp: 0 },
                Layout::Time2 { fsp } => ColumnKind::Time { fsp },
                Layout::DateTimeOld => ColumnKind::DateTime { fsp: 0 },
                Layout::DateTime2 { fsp } => ColumnKind::DateTime { fsp },
                Layout::TimestampOld => ColumnKind::Timestamp { fsp: 0 },
                Layout::Timestamp2 { fsp } => ColumnKind::Timestamp { fsp },
                Layout::Year => ColumnKind::Simple(SimpleKind::Year),
                // The table map gives the byte length; a character takes at most `width` bytes.
                Layout::VarLen { max_len, .. } => match charset {
                    Some((charset, width)) => ColumnKind::Text {
                        charset,
                        length: Some(u32::from(max_len) / u32::from(width.max(1))),
                    },
                    // Only a declared BINARY(n) is padded: without charset metadata a CHAR(n)
                    // looks the same, and zero-padding its text would corrupt it.
                    None if raw == Some(ColumnType::MYSQL_TYPE_STRING)
                        && collation == Some(BINARY_COLLATION) =>
                    {
                        ColumnKind::Binary {
                            pad_to: Some(max_len as usize),
                        }
                    }
                    None => ColumnKind::Binary { pad_to: None },
                },
                Layout::Enum { .. } => ColumnKind::Enum {
                    labels: enums
                        .next()
                        .ok_or_else(|| format!("column {name}: no enum labels in the table map"))?
                        .into(),
                },
                Layout::Set { .. } => ColumnKind::Set {
                    labels: sets
                        .next()
                        .ok_or_else(|| format!("column {name}: no set labels in the table map"))?
                        .into(),
                },
                Layout::Bit { bits } => ColumnKind::Bit { bits },
                Layout::Blob { .. } if was_json => ColumnKind::Simple(SimpleKind::Json),
                Layout::Blob { .. } => match charset {
                    Some((charset, _)) => ColumnKind::Text {
                        charset,
                        length: None,
                    },
                    None => ColumnKind::Binary { pad_to: None },
                },
                Layout::Json { .. } => ColumnKind::Simple(SimpleKind::Json),
                Layout::Geometry { .. } => ColumnKind::Simple(SimpleKind::Geometry),
                Layout::Vector { .. } => ColumnKind::Simple(SimpleKind::Vector),
            };
            // A kind of the table of kinds that the binlog carries as `BINARY(n)`.
            let kind = match (was, &kind) {
                (Some(ColumnKind::Simple(simple)), ColumnKind::Binary { pad_to: Some(n) })
                    if simple.rendered_len() == Some(*n) =>
                {
                    ColumnKind::Simple(*simple)
                }
                _ => kind,
            };
            kind.check().map_err(|e| format!("column {name}: {e}"))?;
            columns.push(ColumnSpec {
                name,
                kind,
                nullable: nulls.get(i).is_some_and(|b| *b),
            });
        }
        let primary_key: Vec<usize> = extractor
            .iter_primary_key()
            .filter_map(|k| k.ok().map(|k| k as usize))
            .collect();
        let id = TableId::new(tme.database_name(), tme.table_name());
        Ok(TableSchema::new(id, columns, primary_key))
    }

    /// Decodes the rows of one rows event, appending images to `before` / `after`.
    ///
    /// `present_before` / `present_after` are the event's column bitmaps (LSB first); either
    /// image is `None` when the event type has no such image. Returns the row count.
    pub fn decode_rows(
        &self,
        data: &[u8],
        present_before: Option<&[u8]>,
        present_after: Option<&[u8]>,
        before: Option<&mut ImageColumns>,
        after: Option<&mut ImageColumns>,
    ) -> Result<usize, RowsError> {
        self.decode_rows_of(data, present_before, present_after, before, after, false)
    }

    /// [`TableDecoder::decode_rows`] of a MySQL `PARTIAL_UPDATE_ROWS` event: each after image
    /// starts with its value options, and the JSON columns they mark hold the changes made to
    /// the row's before image (see `mysql_json::apply_json_diffs`), decoded into the whole
    /// document.
    pub fn decode_partial_update_rows(
        &self,
        data: &[u8],
        present_before: Option<&[u8]>,
        present_after: Option<&[u8]>,
        before: &mut ImageColumns,
        after: &mut ImageColumns,
    ) -> Result<usize, RowsError> {
        self.decode_rows_of(
            data,
            present_before,
            present_after,
            Some(before),
            Some(after),
            true,
        )
    }

    fn decode_rows_of(
        &self,
        data: &[u8],
        present_before: Option<&[u8]>,
        present_after: Option<&[u8]>,
        mut before: Option<&mut ImageColumns>,
        mut after: Option<&mut ImageColumns>,
        partial_json: bool,
    ) -> Result<usize, RowsError> {
        let n = self.columns.len();
        for present in [present_before, present_after].into_iter().flatten() {
            if let Some(missing) =
                (0..n).find(|i| present.get(i / 8).is_none_or(|b| b & (1 << (i % 8)) == 0))
            {
                return Err(RowsError::Partial(format!(
                    "column {} is not in the row image",
                    self.schema.columns[missing].name
                )));
            }
        }
        for image in [before.as_deref(), after.as_deref()].into_iter().flatten() {
            if image.columns.len() != n {
                return Err(RowsError::Value(format!(
                    "{} columns in the image for {n} columns",
                    image.columns.len()
                )));
            }
        }
        let mut cur = Cursor::new(data);
        let mut scratch = String::new();
        // The JSON columns a partial update's after images give one bit each, found once.
        let json_columns: Vec<usize> = if partial_json {
            (0..n)
                .filter(|&i| self.columns[i].is_binary_json())
                .collect()
        } else {
            Vec::new()
        };
        let mut rows = 0;
        let at_row = |rows: usize, e: RowsError| match e {
            RowsError::Value(msg) => RowsError::Value(format!("row {rows}: {msg}")),
            other => other,
        };
        while !cur.at_end() {
            let row_start = cur.remaining();
            if let Some(b) = before.as_deref_mut() {
                self.decode_image(&mut cur, b, &mut scratch)
                    .map_err(|e| at_row(rows, e))?;
            }
            if let Some(a) = after.as_deref_mut() {
                let decoded = match before.as_deref() {
                    Some(b) if partial_json => self
                        .partial_columns(&mut cur, &json_columns)
                        .and_then(|changed| {
                            self.decode_image_with(&mut cur, a, &mut scratch, Some((b, &changed)))
                        }),
                    _ => self.decode_image(&mut cur, a, &mut scratch),
                };
                decoded.map_err(|e| at_row(rows, e))?;
            }
            rows += 1;
            if rows == 1 {
                // The first row tells how many more the event holds, near enough: room for
                // them all at once rather than growing value by value.
                let more = cur.remaining() / (row_start - cur.remaining()).max(1);
                for image in [before.as_deref_mut(), after.as_deref_mut()]
                    .into_iter()
                    .flatten()
                {
                    image.reserve(more, cur.remaining());
                }
            }
        }
        Ok(rows)
    }

    fn decode_image(
        &self,
        cur: &mut Cursor<'_>,
        image: &mut ImageColumns,
        scratch: &mut String,
    ) -> Result<(), RowsError> {
        self.decode_image_with(cur, image, scratch, None)
    }

    /// The value options that open a partial update's after image: which columns hold JSON
    /// changes rather than documents (one bit per JSON column of the table, `json_columns`,
    /// in order, when the options say partial JSON is on), as a flag per column.
    fn partial_columns(
        &self,
        cur: &mut Cursor<'_>,
        json_columns: &[usize],
    ) -> Result<Vec<bool>, RowsError> {
        const PARTIAL_JSON_UPDATES: u64 = 1;
        let options = cur.packed()?;
        let mut flags = vec![false; self.columns.len()];
        if options & PARTIAL_JSON_UPDATES == 0 {
            return Ok(flags);
        }
        let bits = cur.take(json_columns.len().div_ceil(8))?;
        for (k, &i) in json_columns.iter().enumerate() {
            flags[i] = bits[k / 8] & (1 << (k % 8)) != 0;
        }
        Ok(flags)
    }

    /// Decodes one image; with `changes`, a column it flags holds JSON changes to the value
    /// of the same column in the before image's last row.
    fn decode_image_with(
        &self,
        cur: &mut Cursor<'_>,
        image: &mut ImageColumns,
        scratch: &mut String,
        changes: Option<(&ImageColumns, &[bool])>,
    ) -> Result<(), RowsError> {
        let n = image.columns.len();
        let nulls = cur.take(n.div_ceil(8))?;
        // Most images hold no NULL: then no bit is tested per value.
        let any_null = nulls.iter().any(|&b| b != 0);
        for (i, column) in image.columns.iter_mut().enumerate() {
            // `nulls` holds n.div_ceil(8) bytes and i < n.
            if any_null && nulls[i / 8] & (1 << (i % 8)) != 0 {
                if !column.nullable() {
                    // A NULL in a NOT NULL column: an image written before the column became
                    // NOT NULL, decoded with today's schema.
                    return Err(RowsError::Value(format!(
                        "column {} is NOT NULL in the schema but NULL in the row image",
                        self.schema.columns[i].name
                    )));
                }
                column.push_null();
                continue;
            }
            let changed_from = changes
                .filter(|(_, flags)| flags.get(i) == Some(&true))
                .map(|(before, _)| before);
            let decoded = match changed_from {
                None => column.decode(cur, scratch),
                Some(before) => {
                    let text = before.columns.get(i).and_then(Column::last_text);
                    match text.map(std::str::from_utf8) {
                        Some(Ok(text)) => column.decode_json_diff(cur, text, scratch),
                        _ => Err(RowsError::Value(
                            "a partial JSON update of a value the before image does not hold"
                                .into(),
                        )),
                    }
                }
            };
            if let Err(e) = decoded {
                return Err(self.in_column(i, e));
            }
        }
        Ok(())
    }

    /// `e`, a failure to decode column `i`, naming the column.
    #[cold]
    fn in_column(&self, i: usize, e: RowsError) -> RowsError {
        match e {
            RowsError::Value(msg) => {
                RowsError::Value(format!("column {}: {msg}", self.schema.columns[i].name))
            }
            other => other,
        }
    }

    /// Finishes one image's columns into a batch of this table's schema.
    pub fn finish(&self, image: ImageColumns) -> Result<RecordBatch, ImageError> {
        let fields = self.schema.arrow.fields();
        if image.columns.len() != fields.len() {
            return Err(ImageError {
                column: "*".into(),
                row: None,
                detail: format!(
                    "{} columns in the image for {} fields",
                    image.columns.len(),
                    fields.len()
                ),
            });
        }
        let mut arrays = Vec::with_capacity(fields.len());
        for (column, field) in image.columns.into_iter().zip(fields) {
            let array = column.finish(field).map_err(|e| ImageError {
                column: field.name().clone(),
                row: e.value,
                detail: e.detail,
            })?;
            arrays.push(array);
        }
        RecordBatch::try_new(Arc::clone(&self.schema.arrow), arrays).map_err(|e| ImageError {
            column: "*".into(),
            row: None,
            detail: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use mysql_async::binlog::events::{Event, FormatDescriptionEvent};
    use mysql_async::binlog::BinlogVersion;

    use super::*;

    /// A table map of `d.t (y YEAR, u INT UNSIGNED, g GEOMETRY, s VARCHAR(10) utf8mb4)` with
    /// SIGNEDNESS and COLUMN_CHARSET metadata, as MySQL 8 writes it.
    fn table_map() -> Event {
        // Table id 1, no flags, names `d` and `t`.
        let mut body = vec![1, 0, 0, 0, 0, 0, 0, 0, 1, b'd', 0, 1, b't', 0];
        // 4 columns: YEAR, LONG, GEOMETRY, VARCHAR; metadata: GEOMETRY's pack length, VARCHAR's
        // maximum length in bytes (10 characters of up to 4 bytes); all nullable.
        body.extend([4, 13, 3, 255, 15, 3, 4, 40, 0, 0x0f]);
        // SIGNEDNESS: one bit per numeric column, most significant first: `u` is unsigned.
        body.extend([1, 1, 0b1000_0000]);
        // COLUMN_CHARSET: one collation per character column: `g` binary, `s` utf8mb4.
        body.extend([3, 2, 63, 45]);
        let mut event = vec![0, 0, 0, 0, 19, 1, 0, 0, 0];
        event.extend((19 + body.len() as u32).to_le_bytes());
        event.extend([0, 0, 0, 0, 0, 0]); // log position, flags
        event.extend(body);
        let fde = FormatDescriptionEvent::new(BinlogVersion::Version4);
        Event::read(&fde, &event[..]).expect("a well-formed event")
    }

    /// The schema MySQL's table map `tme` gives, from the map alone.
    fn mysql_schema(tme: &TableMapEvent<'_>) -> TableSchema {
        TableDecoder::schema_from_table_map(
            tme,
            None,
            &builtin_collations(),
            MapWriter::MySql,
            true,
        )
        .unwrap()
    }

    #[test]
    fn optional_metadata_lines_up_as_mysql_writes_it() {
        let event = table_map();
        let tme = event.read_event::<TableMapEvent<'_>>().unwrap();
        let schema = mysql_schema(&tme);
        let kinds: Vec<_> = schema.columns.iter().map(|c| c.kind.clone()).collect();
        assert_eq!(
            kinds,
            [
                ColumnKind::Simple(SimpleKind::Year),
                // YEAR takes no signedness bit, so the first one is `u`'s.
                ColumnKind::Int {
                    bits: 32,
                    unsigned: true
                },
                ColumnKind::Simple(SimpleKind::Geometry),
                // GEOMETRY takes the first charset entry, so `s` gets utf8mb4.
                ColumnKind::Text {
                    charset: Charset::Utf8,
                    length: Some(10),
                },
            ]
        );
    }

    #[test]
    fn builtin_collations_cover_mysql_and_mariadb_ids() {
        let map = builtin_collations();
        for (id, charset) in [
            (8, Some((Charset::Latin1, 1))),
            (11, Some((Charset::Utf8, 1))), // ascii
            (33, Some((Charset::Utf8, 3))),
            (45, Some((Charset::Utf8, 4))),
            (63, None),
            (255, Some((Charset::Utf8, 4))), // MySQL 8 utf8mb4_0900_ai_ci
            (1057, Some((Charset::Utf8, 3))), // MariaDB utf8mb3_general_nopad_ci
            (2048, Some((Charset::Utf8, 3))), // MariaDB 11 utf8mb3_uca1400_ai_ci
            (2304, Some((Charset::Utf8, 4))), // MariaDB 11 utf8mb4_uca1400_ai_ci
        ] {
            assert_eq!(map.get(&id), Some(&charset), "collation {id}");
        }
        // Character sets we cannot decode stay unknown (e.g. 28 gbk, 35 ucs2).
        assert!(!map.contains_key(&28) && !map.contains_key(&35));
    }

    #[test]
    fn rows_decode_into_compiled_columns_and_bad_text_names_its_row() {
        use arrow::array::{Array, AsArray};
        use arrow::datatypes::{Int16Type, UInt32Type};
        let event = table_map();
        let tme = event.read_event::<TableMapEvent<'_>>().unwrap();
        let schema = mysql_schema(&tme);
        let decoder = TableDecoder::new(&tme, Arc::new(schema)).unwrap();
        // An image: the NULL bitmap, YEAR (1 byte), INT UNSIGNED (4), GEOMETRY (4-byte length),
        // VARCHAR(10) (1-byte length).
        let row = |nulls: u8, year: u8, u: u32, g: Option<&[u8]>, s: &[u8]| {
            let mut r = vec![nulls, year];
            r.extend(u.to_le_bytes());
            if let Some(g) = g {
                r.extend((g.len() as u32).to_le_bytes());
                r.extend(g);
            }
            r.push(s.len() as u8);
            r.extend(s);
            r
        };
        let all = Some(&[0x0f][..]);
        let mut data = row(0, 124, 4_000_000_000, Some(&[1, 2]), b"hi");
        data.extend(row(0b0100, 0, 1, None, "é".as_bytes()));
        let mut image = decoder.image();
        let rows = decoder.decode_rows(&data, None, all, None, Some(&mut image));
        assert_eq!(rows.unwrap(), 2);
        let batch = decoder.finish(image).unwrap();
        assert_eq!(
            batch.column(0).as_primitive::<Int16Type>().values(),
            &[2024, 0]
        );
        let u = batch.column(1).as_primitive::<UInt32Type>();
        assert_eq!(u.value(0), 4_000_000_000);
        assert_eq!(batch.column(2).as_binary::<i32>().value(0), &[1, 2]);
        assert!(batch.column(2).is_null(1) && batch.column(3).nulls().is_none());
        assert_eq!(batch.column(3).as_string::<i32>().value(1), "é");
        // Invalid UTF-8 in the second row: the batch is refused, naming the column and row.
        let mut bad = row(0, 1, 1, Some(&[]), b"ok");
        bad.extend(row(0, 1, 1, Some(&[]), b"\xff"));
        let mut image = decoder.image();
        decoder
            .decode_rows(&bad, None, all, None, Some(&mut image))
            .unwrap();
        let err = decoder.finish(image).unwrap_err();
        assert_eq!((err.column.as_str(), err.row), ("col_4", Some(1)));
        // A column left out of the image's bitmap is a partial image.
        let mut image = decoder.image();
        let partial = decoder.decode_rows(&data, None, Some(&[0x07]), None, Some(&mut image));
        assert!(matches!(partial, Err(RowsError::Partial(_))));
    }

    #[test]
    fn partial_json_updates_are_applied_to_the_before_image() {
        use arrow::array::AsArray;
        // `d.t (id INT, j JSON, name VARCHAR(10) utf8mb4, age INT)`, as MySQL 8 maps it: JSON's
        // metadata is its length's pack length (4).
        let mut body = vec![1, 0, 0, 0, 0, 0, 0, 0, 1, b'd', 0, 1, b't', 0];
        body.extend([4, 3, 245, 15, 3, 3, 4, 40, 0, 0x0e]);
        body.extend([1, 1, 0]); // SIGNEDNESS: both INTs signed
        body.extend([3, 1, 45]); // COLUMN_CHARSET: utf8mb4
        let mut raw = vec![0, 0, 0, 0, 19, 1, 0, 0, 0];
        raw.extend((19 + body.len() as u32).to_le_bytes());
        raw.extend([0, 0, 0, 0, 0, 0]);
        raw.extend(body);
        let fde = FormatDescriptionEvent::new(BinlogVersion::Version4);
        let event = Event::read(&fde, &raw[..]).unwrap();
        let tme = event.read_event::<TableMapEvent<'_>>().unwrap();
        let decoder = TableDecoder::new(&tme, Arc::new(mysql_schema(&tme))).unwrap();
        // `{"age": 25, "name": "Joe"}` in the binary format: a small object of two members.
        let mut doc = vec![
            0x00, 2, 0, 29, 0, 18, 0, 3, 0, 21, 0, 4, 0, 0x05, 25, 0, 0x0c, 25, 0,
        ];
        doc.extend(b"agename");
        doc.extend([3, b'J', b'o', b'e']);
        let json = |bytes: &[u8]| {
            let mut v = (bytes.len() as u32).to_le_bytes().to_vec();
            v.extend(bytes);
            v
        };
        // An image after its NULL bitmap (and a partial after image's value options).
        let image = |lead: &[u8], j: &[u8], age: i32| {
            let mut r = lead.to_vec();
            r.push(0);
            r.extend(1i32.to_le_bytes());
            r.extend(json(j));
            r.extend([3, b'J', b'o', b'e']);
            r.extend(age.to_le_bytes());
            r
        };
        // `$.age` replaced by 26 (an inlined int16), as MySQL logs `JSON_SET(j, '$.age', 26)`.
        let mut diff = vec![0, 5];
        diff.extend(b"$.age");
        diff.extend([3, 0x05, 26, 0]);
        // Row 1: partial JSON on, `j` changed; row 2: on, `j` whole; row 3: options off.
        let mut data = image(&[], &doc, 25);
        data.extend(image(&[1, 0b1], &diff, 26));
        data.extend(image(&[], &doc, 26));
        data.extend(image(&[1, 0b0], &doc, 27));
        data.extend(image(&[], &doc, 27));
        data.extend(image(&[0], &doc, 28));
        let all = Some(&[0x0f][..]);
        let (mut before, mut after) = (decoder.image(), decoder.image());
        let rows = decoder.decode_partial_update_rows(&data, all, all, &mut before, &mut after);
        assert_eq!(rows.unwrap(), 3);
        let after = decoder.finish(after).unwrap();
        let j = after.column(1).as_string::<i32>();
        assert_eq!(j.value(0), r#"{"age": 26, "name": "Joe"}"#);
        assert_eq!(j.value(1), r#"{"age": 25, "name": "Joe"}"#);
        assert_eq!(j.value(2), r#"{"age": 25, "name": "Joe"}"#);
        // A change that does not apply fails the event, naming the column and the row.
        let mut bad = image(&[], &doc, 25);
        let mut missing = vec![2, 7];
        missing.extend(b"$.other");
        bad.extend(image(&[1, 0b1], &missing, 25));
        let (mut before, mut after) = (decoder.image(), decoder.image());
        let err = decoder
            .decode_partial_update_rows(&bad, all, all, &mut before, &mut after)
            .unwrap_err();
        let RowsError::Value(message) = err else {
            panic!("{err:?}")
        };
        assert!(
            message.contains(
                "row 0: column col_2: a partial JSON update: no member \"other\" to remove"
            ),
            "{message}"
        );
    }
}
