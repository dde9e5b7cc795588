//! What a source table is, independent of the server it is read from: its name, its columns
//! and their kinds, its key, and the one Arrow schema both read paths produce.
//!
//! # Invariant
//! A [`TableSchema`] is the one schema the binlog decoder and the snapshot reader both decode
//! into, so they agree on column order, names, Arrow types and nullability. The Arrow type of a
//! column depends only on its [`ColumnKind`] (see `source::types` for the value mapping), never
//! on the rows it holds: temporal kinds whose values may have no Arrow value are always
//! nullable.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::kinds::SimpleKind;

/// `db.table` on the source server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableId {
    pub db: String,
    pub table: String,
}

impl TableId {
    pub fn new(db: impl Into<String>, table: impl Into<String>) -> Self {
        Self {
            db: db.into(),
            table: table.into(),
        }
    }

    /// The table name quoted for MySQL: `` `db`.`table` ``.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.db), quote_ident(&self.table))
    }
}

impl fmt::Display for TableId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.db, self.table)
    }
}

/// Quotes a MySQL identifier with backticks.
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// One column of a source table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSpec {
    pub name: String,
    pub kind: ColumnKind,
    pub nullable: bool,
}

/// A secondary index of a table at its source (`KEY`, `INDEX`, `UNIQUE`), which the current
/// table keeps too (`state::secondary`) so lookups by its columns need no scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    pub name: String,
    /// Indexes into the table's columns, in index order.
    pub columns: Vec<usize>,
    pub unique: bool,
}

impl IndexSpec {
    /// The name the servers give the primary key's index.
    pub const PRIMARY: &'static str = "PRIMARY";

    /// The primary key over `columns` as an index (for ranges of the key).
    pub fn primary(columns: &[usize]) -> Self {
        Self {
            name: Self::PRIMARY.into(),
            columns: columns.to_vec(),
            unique: true,
        }
    }

    /// Whether it names at least one column, each one of a table of `columns` columns.
    pub fn fits(&self, columns: usize) -> bool {
        !self.columns.is_empty() && self.columns.iter().all(|&c| c < columns)
    }
}

/// The schema of one source table at one point in its history.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSchema {
    pub id: TableId,
    pub columns: Vec<ColumnSpec>,
    /// Indexes into `columns` of the primary key, in key order; empty for keyless tables.
    pub primary_key: Vec<usize>,
    /// The Arrow schema of the table's rows (one field per column, same order).
    pub arrow: SchemaRef,
    /// How many changes of the table's columns the capture has followed: 0 as first read, one
    /// more for each DDL that changed them (the changelog's `_schema_version`).
    pub version: u32,
    /// The table's default character set, for text columns a DDL adds without naming one;
    /// `None` when not known.
    pub default_charset: Option<String>,
    /// The table's secondary indexes (its primary key is not one of them).
    pub indexes: Vec<IndexSpec>,
}

impl TableSchema {
    pub fn new(id: TableId, columns: Vec<ColumnSpec>, primary_key: Vec<usize>) -> Self {
        let fields: Vec<_> = columns
            .iter()
            .map(|c| c.kind.field(&c.name, c.nullable))
            .collect();
        Self {
            id,
            columns,
            primary_key,
            arrow: Arc::new(Schema::new(fields)),
            version: 0,
            default_charset: None,
            indexes: Vec::new(),
        }
    }

    /// The same schema with `indexes`, less any that names a column it does not have.
    pub fn with_indexes(mut self, indexes: Vec<IndexSpec>) -> Self {
        let n = self.columns.len();
        self.indexes = indexes.into_iter().filter(|i| i.fits(n)).collect();
        self
    }

    /// The same schema with `version` (see [`TableSchema::version`]).
    pub fn with_version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// The same schema with the table's default character set.
    pub fn with_default_charset(mut self, charset: Option<String>) -> Self {
        self.default_charset = charset;
        self
    }

    /// The character set of text columns the table declares without one (`None`: binary).
    /// Servers create tables utf8mb4 by default, so an unknown default is utf8mb4; the table
    /// map check catches any other. An error names a character set the engine cannot decode.
    pub fn table_charset(&self) -> Result<Option<Charset>, String> {
        match self.default_charset.as_deref() {
            None => Ok(Some(Charset::Utf8)),
            Some(name) => Charset::from_name(name),
        }
    }

    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
    }
}

/// Which server we talk to; the differences that matter to capture hide behind this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    MySql,
    MariaDb,
}

/// Field metadata key holding the column's MySQL type (`bigint unsigned`, `json`, ...).
pub const MYSQL_TYPE_KEY: &str = "mysql.type";

/// Largest DECIMAL precision MySQL and MariaDB allow.
const MAX_DECIMAL_PRECISION: u8 = 65;
/// Largest DECIMAL scale (MariaDB's; MySQL allows 30).
const MAX_DECIMAL_SCALE: u8 = 38;

/// Largest DECIMAL precision that fits Arrow's `Decimal128`.
const DECIMAL128_MAX_PRECISION: u8 = 38;

/// The character set a text column's bytes are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charset {
    /// utf8mb4, utf8mb3 and ascii: valid UTF-8 as stored.
    Utf8,
    /// MySQL's latin1, which is Windows code page 1252.
    Latin1,
}

impl Charset {
    /// Maps a MySQL character set name; `None` for `binary`; an error for sets we cannot decode.
    pub fn from_name(name: &str) -> Result<Option<Charset>, String> {
        Self::with_width(name).map(|c| c.map(|(charset, _)| charset))
    }

    /// As [`Charset::from_name`], with the most bytes one character takes in the set (what
    /// turns a binlog table map's byte length of `VARCHAR(n)` back into `n`).
    pub fn with_width(name: &str) -> Result<Option<(Charset, u8)>, String> {
        match name.to_ascii_lowercase().as_str() {
            "binary" => Ok(None),
            "utf8mb4" => Ok(Some((Charset::Utf8, 4))),
            "utf8mb3" | "utf8" => Ok(Some((Charset::Utf8, 3))),
            "ascii" => Ok(Some((Charset::Utf8, 1))),
            "latin1" => Ok(Some((Charset::Latin1, 1))),
            other => Err(format!(
                "character set {other} is not supported (supported: utf8mb4, utf8mb3, ascii, latin1, binary)"
            )),
        }
    }
}

/// What a column holds, independent of how it is encoded on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnKind {
    /// Integers of 8, 16, 24, 32 or 64 bits.
    Int {
        bits: u8,
        unsigned: bool,
    },
    Decimal {
        precision: u8,
        scale: u8,
    },
    Time {
        fsp: u8,
    },
    DateTime {
        fsp: u8,
    },
    Timestamp {
        fsp: u8,
    },
    /// Character data. `length` is the declared length in characters of `CHAR(n)` and
    /// `VARCHAR(n)` (sent to clients as `varchar(n)`); `None` for the `TEXT` types.
    Text {
        charset: Charset,
        length: Option<u32>,
    },
    /// Byte strings; `pad_to` is the byte length of `BINARY(n)`, whose values MySQL pads with
    /// zero bytes on `SELECT` but strips in the binlog.
    Binary {
        pad_to: Option<usize>,
    },
    Enum {
        labels: Arc<[String]>,
    },
    Set {
        labels: Arc<[String]>,
    },
    Bit {
        bits: u16,
    },
    /// A kind without parameters, whose facts are one row of `kinds`.
    Simple(SimpleKind),
}

impl ColumnKind {
    /// The simple kind this is, if it is one.
    pub fn simple(&self) -> Option<SimpleKind> {
        match self {
            ColumnKind::Simple(kind) => Some(*kind),
            _ => None,
        }
    }

    /// The Arrow type of this kind.
    pub fn data_type(&self) -> DataType {
        match self {
            ColumnKind::Int { bits, unsigned } => match (bits, unsigned) {
                (8, false) => DataType::Int8,
                (8, true) => DataType::UInt8,
                (16, false) => DataType::Int16,
                (16, true) => DataType::UInt16,
                (24 | 32, false) => DataType::Int32,
                (24 | 32, true) => DataType::UInt32,
                (_, false) => DataType::Int64,
                (_, true) => DataType::UInt64,
            },
            ColumnKind::Decimal { precision, scale } => {
                if *precision <= DECIMAL128_MAX_PRECISION {
                    DataType::Decimal128(*precision, *scale as i8)
                } else {
                    DataType::Decimal256(*precision, *scale as i8)
                }
            }
            ColumnKind::Time { .. } => DataType::Duration(TimeUnit::Microsecond),
            ColumnKind::DateTime { .. } => DataType::Timestamp(TimeUnit::Microsecond, None),
            ColumnKind::Timestamp { .. } => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
            }
            ColumnKind::Text { .. } | ColumnKind::Enum { .. } | ColumnKind::Set { .. } => {
                DataType::Utf8
            }
            ColumnKind::Binary { .. } => DataType::Binary,
            ColumnKind::Bit { .. } => DataType::UInt64,
            ColumnKind::Simple(kind) => kind.row().arrow.data_type(),
        }
    }

    /// The MySQL type name recorded in field metadata.
    pub fn mysql_type(&self) -> String {
        match self {
            ColumnKind::Int { bits, unsigned } => {
                let base = match bits {
                    8 => "tinyint",
                    16 => "smallint",
                    24 => "mediumint",
                    32 => "int",
                    _ => "bigint",
                };
                if *unsigned {
                    format!("{base} unsigned")
                } else {
                    base.to_string()
                }
            }
            ColumnKind::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            ColumnKind::Time { fsp } => format!("time({fsp})"),
            ColumnKind::DateTime { fsp } => format!("datetime({fsp})"),
            ColumnKind::Timestamp { fsp } => format!("timestamp({fsp})"),
            ColumnKind::Text {
                length: Some(n), ..
            } => format!("varchar({n})"),
            ColumnKind::Text { length: None, .. } => "text".into(),
            ColumnKind::Binary { .. } => "binary".into(),
            ColumnKind::Enum { .. } => "enum".into(),
            ColumnKind::Set { .. } => "set".into(),
            ColumnKind::Bit { bits } => format!("bit({bits})"),
            ColumnKind::Simple(kind) => kind.name().into(),
        }
    }

    /// An error when the kind's parameters are outside what MySQL allows (and so would make an
    /// invalid Arrow type or a misread value): DECIMAL precision 1-65 with a scale of at most
    /// 38 and the precision, fractional seconds 0-6, `BIT` 1-64 bits, at most 64 `SET` labels.
    pub fn check(&self) -> Result<(), String> {
        let ok = match self {
            ColumnKind::Decimal { precision, scale } => {
                (1..=MAX_DECIMAL_PRECISION).contains(precision)
                    && *scale <= MAX_DECIMAL_SCALE
                    && scale <= precision
            }
            ColumnKind::Time { fsp }
            | ColumnKind::DateTime { fsp }
            | ColumnKind::Timestamp { fsp } => *fsp <= 6,
            ColumnKind::Bit { bits } => (1..=64).contains(bits),
            ColumnKind::Set { labels } => labels.len() <= 64,
            _ => true,
        };
        match (ok, self) {
            (true, _) => Ok(()),
            (false, ColumnKind::Set { labels }) => {
                Err(format!("a SET of {} members (at most 64)", labels.len()))
            }
            (false, kind) => Err(format!("{} is not a valid MySQL type", kind.mysql_type())),
        }
    }

    /// Whether columns of this kind hold values that have no Arrow value and are read as NULL
    /// even when the column is `NOT NULL` (zero and invalid dates, the zero timestamp).
    pub fn has_unrepresentable_values(&self) -> bool {
        match self {
            ColumnKind::DateTime { .. } | ColumnKind::Timestamp { .. } => true,
            ColumnKind::Simple(kind) => kind.row().always_nullable,
            _ => false,
        }
    }

    /// The Arrow field for a column of this kind; nullable when the column is, and always for
    /// the kinds that read some values as NULL ([`Self::has_unrepresentable_values`]), so that
    /// the schema does not depend on the data.
    pub fn field(&self, name: &str, nullable: bool) -> Field {
        let nullable = nullable || self.has_unrepresentable_values();
        Field::new(name, self.data_type(), nullable).with_metadata(
            [(MYSQL_TYPE_KEY.to_string(), self.mysql_type())]
                .into_iter()
                .collect(),
        )
    }
}
