//! One table of the MySQL column kinds that take no parameters: for each, a row of the facts
//! every stage takes from it — its names, its Arrow type, how the binlog and the snapshot's
//! `SELECT` carry its values, the server's canonical text of it for checksums, whether it can
//! be a chunk key, MySQL's implicit default, and the PostgreSQL type clients see.
//!
//! The kinds with parameters (integers by width, `DECIMAL(p,s)`, the temporal types with their
//! fractional seconds, text by character set and length, `BINARY(n)`, `ENUM`/`SET` labels,
//! `BIT(n)`) are families, one [`ColumnKind`](super::schema::ColumnKind) variant each; a kind
//! here is `ColumnKind::Simple`.
//!
//! # Adding a type
//! A type that takes no parameters and whose values travel in a form the stages already read
//! (a native binlog type, or a fixed number of bytes that [`Binlog::Rendered`] turns into
//! text, as MariaDB's `UUID`) touches three files: this one (its variant, its row, and its
//! renderer if it has one), `tests/type_parity.rs` (a column of it, read through the binlog,
//! both snapshot readers and the server's checksum, which must all agree) and
//! `docs/user-guide.md` (its line in the type table). Consumers read the row; none matches on
//! a kind of this table by name except where a native binlog layout is paired with its kind.
//!
//! # Invariant
//! A row states what the server does, and every consumer takes it from the row: the binlog
//! and the snapshot give the same value for the same stored value (`tests/type_parity.rs`
//! holds each row to it), so a new row cannot make the two read paths disagree.

use arrow::datatypes::DataType;

/// A MySQL column kind without parameters; its facts are [`SimpleKind::row`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimpleKind {
    Float,
    Double,
    Date,
    Year,
    Json,
    Geometry,
    Vector,
    Uuid,
    Inet6,
}

/// The Arrow type of a kind's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrow {
    Int16,
    Float32,
    Float64,
    Date32,
    Utf8,
    Binary,
}

impl Arrow {
    pub fn data_type(self) -> DataType {
        match self {
            Arrow::Int16 => DataType::Int16,
            Arrow::Float32 => DataType::Float32,
            Arrow::Float64 => DataType::Float64,
            Arrow::Date32 => DataType::Date32,
            Arrow::Utf8 => DataType::Utf8,
            Arrow::Binary => DataType::Binary,
        }
    }
}

/// Turns a value's bytes as the binlog carries them into its text, or says why it cannot.
pub type Render = fn(&[u8], &mut String) -> Result<(), String>;

/// How the binlog carries a kind's values.
#[derive(Debug, Clone, Copy)]
pub enum Binlog {
    /// In a layout of its own in the table map (`FLOAT`, `DATE`, `JSON`, ...), paired with the
    /// kind in `source::binlog::layout`.
    Native,
    /// As `BINARY(len)` (a `STRING` of the binary collation, trailing zero bytes stripped),
    /// turned into text by `render`. The table map cannot tell it from `BINARY(len)`, so a
    /// column the server's schema names this kind keeps it.
    Rendered { len: usize, render: Render },
}

/// How the snapshot's `SELECT` (binary protocol) carries a kind's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Snapshot {
    /// An integer (or its text).
    Int,
    Float32,
    Float64,
    Date,
    /// Text in the connection's utf8mb4.
    Text,
    /// Bytes as stored.
    Bytes,
}

/// How reconciliation compares a kind's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checksum {
    /// Through the row checksum: the server's SQL for the value's canonical text, `{c}` standing
    /// for the quoted column.
    Sql(&'static str),
    /// As values, fetched: no canonical text the server and the engine both write.
    Value,
}

/// Whether a kind can be a snapshot's chunk key, whose boundaries the server compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKey {
    /// Compared as an integer: chunks split its range evenly.
    Integer,
    /// Compared as the server reads this expression of the bound parameter `?`.
    Cast(&'static str),
    /// Its order is not a value order.
    Refused,
}

/// MySQL's implicit default of a `NOT NULL` column of the kind added without `DEFAULT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implicit {
    Zero,
    /// The zero date, which both read paths give as NULL.
    Null,
    Text(&'static str),
    /// What the server picks depends on its version and mode: the table is stopped instead.
    ServerDependent,
}

/// The PostgreSQL type clients see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pg {
    /// The one the front end gives the Arrow type.
    FromArrow,
    Json,
}

/// The facts of one kind; see the module docs.
#[derive(Debug)]
pub struct KindRow {
    pub kind: SimpleKind,
    /// Its name in field metadata (`mysql.type`), messages and manifests: never renamed.
    pub name: &'static str,
    /// The other names `information_schema` or DDL give it.
    pub aliases: &'static [&'static str],
    pub arrow: Arrow,
    /// Some stored values have no Arrow value and read as NULL (zero dates), so its field is
    /// nullable whatever the column says.
    pub always_nullable: bool,
    pub binlog: Binlog,
    pub snapshot: Snapshot,
    pub checksum: Checksum,
    pub chunk_key: ChunkKey,
    pub implicit: Implicit,
    pub pg: Pg,
}

/// The table, in [`SimpleKind`]'s order.
static ROWS: [KindRow; 9] = [
    KindRow {
        kind: SimpleKind::Float,
        name: "float",
        aliases: &["float4"],
        arrow: Arrow::Float32,
        always_nullable: false,
        binlog: Binlog::Native,
        snapshot: Snapshot::Float32,
        // The server's text of a FLOAT is rounded to 6 digits, the engine's is not.
        checksum: Checksum::Value,
        chunk_key: ChunkKey::Cast("?"),
        implicit: Implicit::Zero,
        pg: Pg::FromArrow,
    },
    KindRow {
        kind: SimpleKind::Double,
        name: "double",
        aliases: &["real", "double precision", "float8"],
        arrow: Arrow::Float64,
        always_nullable: false,
        binlog: Binlog::Native,
        snapshot: Snapshot::Float64,
        checksum: Checksum::Sql("CAST({c} AS CHAR)"),
        chunk_key: ChunkKey::Cast("?"),
        implicit: Implicit::Zero,
        pg: Pg::FromArrow,
    },
    KindRow {
        kind: SimpleKind::Date,
        name: "date",
        aliases: &[],
        arrow: Arrow::Date32,
        always_nullable: true,
        binlog: Binlog::Native,
        snapshot: Snapshot::Date,
        checksum: Checksum::Sql("DATE_FORMAT({c}, '%Y-%m-%d')"),
        chunk_key: ChunkKey::Cast("CAST(? AS DATE)"),
        implicit: Implicit::Null,
        pg: Pg::FromArrow,
    },
    KindRow {
        kind: SimpleKind::Year,
        name: "year",
        aliases: &[],
        arrow: Arrow::Int16,
        always_nullable: false,
        binlog: Binlog::Native,
        snapshot: Snapshot::Int,
        checksum: Checksum::Sql("CAST({c} + 0 AS CHAR)"),
        chunk_key: ChunkKey::Integer,
        implicit: Implicit::Zero,
        pg: Pg::FromArrow,
    },
    KindRow {
        kind: SimpleKind::Json,
        name: "json",
        aliases: &[],
        arrow: Arrow::Utf8,
        always_nullable: false,
        binlog: Binlog::Native,
        snapshot: Snapshot::Text,
        // MySQL's binary JSON and its text differ in spacing and key order.
        checksum: Checksum::Value,
        chunk_key: ChunkKey::Refused,
        implicit: Implicit::ServerDependent,
        pg: Pg::Json,
    },
    KindRow {
        kind: SimpleKind::Geometry,
        name: "geometry",
        aliases: &[
            "point",
            "linestring",
            "polygon",
            "multipoint",
            "multilinestring",
            "multipolygon",
            "geometrycollection",
            "geomcollection",
        ],
        arrow: Arrow::Binary,
        always_nullable: false,
        binlog: Binlog::Native,
        snapshot: Snapshot::Bytes,
        checksum: Checksum::Value,
        chunk_key: ChunkKey::Refused,
        implicit: Implicit::ServerDependent,
        pg: Pg::FromArrow,
    },
    KindRow {
        kind: SimpleKind::Vector,
        name: "vector",
        aliases: &[],
        arrow: Arrow::Binary,
        always_nullable: false,
        binlog: Binlog::Native,
        snapshot: Snapshot::Bytes,
        checksum: Checksum::Value,
        chunk_key: ChunkKey::Refused,
        implicit: Implicit::ServerDependent,
        pg: Pg::FromArrow,
    },
    text_from_bytes(
        SimpleKind::Uuid,
        "uuid",
        uuid_text,
        "CAST(? AS UUID)",
        "00000000-0000-0000-0000-000000000000",
    ),
    text_from_bytes(
        SimpleKind::Inet6,
        "inet6",
        inet6_text,
        "CAST(? AS INET6)",
        "::",
    ),
];

/// A MariaDB type of its own (`UUID`, `INET6`): 16 bytes in the binlog, written as text by
/// `render`; its text in the `SELECT` (MariaDB sends it so), compared by that text in checksums,
/// a chunk key the server compares through `cast`, and `implicit` for a `NOT NULL` column added
/// without `DEFAULT`.
const fn text_from_bytes(
    kind: SimpleKind,
    name: &'static str,
    render: Render,
    cast: &'static str,
    implicit: &'static str,
) -> KindRow {
    KindRow {
        kind,
        name,
        aliases: &[],
        arrow: Arrow::Utf8,
        always_nullable: false,
        binlog: Binlog::Rendered { len: 16, render },
        snapshot: Snapshot::Text,
        checksum: Checksum::Sql("HEX(CONVERT({c} USING utf8mb4))"),
        chunk_key: ChunkKey::Cast(cast),
        implicit: Implicit::Text(implicit),
        pg: Pg::FromArrow,
    }
}

impl SimpleKind {
    /// Every kind of the table.
    pub fn all() -> impl Iterator<Item = SimpleKind> {
        ROWS.iter().map(|r| r.kind)
    }

    /// The kind's facts.
    pub fn row(self) -> &'static KindRow {
        let row = &ROWS[self as usize];
        debug_assert_eq!(row.kind, self, "ROWS is in SimpleKind's order");
        row
    }

    /// The kind a MySQL type name (as `information_schema.COLUMNS.DATA_TYPE` or DDL gives it,
    /// any case) names.
    pub fn from_name(name: &str) -> Option<SimpleKind> {
        ROWS.iter()
            .find(|r| {
                std::iter::once(&r.name)
                    .chain(r.aliases)
                    .any(|n| n.eq_ignore_ascii_case(name))
            })
            .map(|r| r.kind)
    }

    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// The byte length of its binlog values when they are rendered ([`Binlog::Rendered`]).
    pub fn rendered_len(self) -> Option<usize> {
        match self.row().binlog {
            Binlog::Rendered { len, .. } => Some(len),
            Binlog::Native => None,
        }
    }
}

/// Lower-case hex digits of `bytes` onto `out`.
fn push_hex(bytes: &[u8], out: &mut String) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
}

/// MariaDB's text of a `UUID`: `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` in lower case, from the
/// 16 bytes in the order the binlog carries them (the value's own order, whatever order the
/// server stores it in).
fn uuid_text(bytes: &[u8], out: &mut String) -> Result<(), String> {
    if bytes.len() != 16 {
        return Err(format!("a UUID of {} bytes (16 expected)", bytes.len()));
    }
    for (i, group) in [0..4, 4..6, 6..8, 8..10, 10..16].into_iter().enumerate() {
        if i > 0 {
            out.push('-');
        }
        push_hex(&bytes[group], out);
    }
    Ok(())
}

/// MariaDB's text of an `INET6` from its 16 bytes (network order): lower-case hex words
/// without leading zeros, the first longest run of zero words (even of one) written `::`, and
/// the IPv4-compatible (`::a.b.c.d`) and IPv4-mapped (`::ffff:a.b.c.d`) forms dotted.
fn inet6_text(bytes: &[u8], out: &mut String) -> Result<(), String> {
    use std::fmt::Write as _;
    if bytes.len() != 16 {
        return Err(format!("an INET6 of {} bytes (16 expected)", bytes.len()));
    }
    // On the binlog's decoding path: no allocation per value.
    let mut words = [0u16; 8];
    for (word, pair) in words.iter_mut().zip(bytes.chunks_exact(2)) {
        *word = u16::from_be_bytes([pair[0], pair[1]]);
    }
    // The first longest run of zero words.
    let (mut gap, mut gap_len, mut i) = (0, 0, 0);
    while i < words.len() {
        let run = words[i..].iter().take_while(|w| **w == 0).count();
        if run > gap_len {
            (gap, gap_len) = (i, run);
        }
        i += run.max(1);
    }
    if gap == 0 && (gap_len == 6 || (gap_len == 5 && words[5] == 0xffff)) {
        out.push_str(if gap_len == 6 { "::" } else { "::ffff:" });
        let _ = write!(
            out,
            "{}.{}.{}.{}",
            bytes[12], bytes[13], bytes[14], bytes[15]
        );
        return Ok(());
    }
    let mut i = 0;
    while i < words.len() {
        if gap_len > 0 && i == gap {
            out.push_str("::");
            i += gap_len;
            continue;
        }
        if i > 0 && !(gap_len > 0 && i == gap + gap_len) {
            out.push(':');
        }
        let _ = write!(out, "{:x}", words[i]);
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_in_the_order_of_their_kinds_and_names_are_unique() {
        for (i, row) in ROWS.iter().enumerate() {
            assert_eq!(row.kind as usize, i, "{}", row.name);
            assert_eq!(SimpleKind::from_name(row.name), Some(row.kind));
            for alias in row.aliases {
                assert_eq!(SimpleKind::from_name(alias), Some(row.kind), "{alias}");
            }
        }
        let mut names: Vec<_> = ROWS
            .iter()
            .flat_map(|r| std::iter::once(&r.name).chain(r.aliases))
            .collect();
        let all = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all);
        assert_eq!(SimpleKind::from_name("DOUBLE"), Some(SimpleKind::Double));
        assert_eq!(SimpleKind::from_name("inet4"), None);
    }

    #[test]
    fn an_inet6_is_written_as_mariadb_writes_it() {
        let text = |words: [u16; 8]| {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
            let mut out = String::new();
            inet6_text(&bytes, &mut out).unwrap();
            out
        };
        // What MariaDB 10.11 prints for each (`CAST(CAST(x AS INET6) AS CHAR)`).
        assert_eq!(text([1, 0, 2, 3, 4, 5, 6, 7]), "1::2:3:4:5:6:7");
        assert_eq!(text([1, 0, 0, 2, 0, 0, 3, 4]), "1::2:0:0:3:4");
        assert_eq!(text([0, 0, 0, 0, 0, 0, 0x102, 0x304]), "::1.2.3.4");
        assert_eq!(
            text([0, 0, 0, 0, 0, 0xffff, 0x102, 0x304]),
            "::ffff:1.2.3.4"
        );
        assert_eq!(text([0, 0, 0, 0, 0, 0xffff, 0, 0]), "::ffff:0.0.0.0");
        assert_eq!(text([0; 8]), "::");
        assert_eq!(text([0, 0, 0, 0, 0, 0, 0, 1]), "::1");
        assert_eq!(text([1, 0, 0, 0, 0, 0, 0, 0]), "1::");
        assert_eq!(text([0, 0, 0, 1, 0, 0, 0, 0]), "0:0:0:1::");
        assert_eq!(text([0, 0, 0, 0, 0, 1, 2, 3]), "::1:2:3");
        assert_eq!(text([0xabcd, 0, 0, 0, 0, 0, 0, 1]), "abcd::1");
        assert_eq!(text([1, 2, 3, 4, 5, 6, 7, 8]), "1:2:3:4:5:6:7:8");
        assert!(inet6_text(&[0; 4], &mut String::new()).is_err());
    }

    #[test]
    fn a_uuid_is_written_in_its_groups() {
        let mut text = String::new();
        let bytes: Vec<u8> = (0u8..16).map(|b| b * 17).collect();
        uuid_text(&bytes, &mut text).unwrap();
        assert_eq!(text, "00112233-4455-6677-8899-aabbccddeeff");
        assert!(uuid_text(&bytes[..15], &mut String::new()).is_err());
    }
}
