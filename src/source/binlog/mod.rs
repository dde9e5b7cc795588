//! The binlog reader: a replica connection that turns the server's event stream into whole,
//! typed source transactions.
//!
//! * [`reader`]: the replica connection, its start position and reconnects;
//! * [`assemble`]: events into transactions with positions, DDL and skipped events;
//! * `batch`: rows kept as column buffers until their transaction, or a run of transactions
//!   gathered together, is handed out;
//! * [`rows`]: row images straight into Arrow, checked against the table's schema;
//! * `columns`: each column's compiled operation and the typed Arrow buffer it fills;
//! * `buffers`: the offsets, data and validity a column grows, cut and split;
//! * [`layout`]: each column's layout in a row image and the readers of its values;
//! * [`decimal`]: MySQL's binary `DECIMAL` into an unscaled integer;
//! * `cursor`: bounds-checked reads of row-image bytes and the decoder's error;
//! * [`filter`]: which tables are decoded;
//! * [`files`]: the binlog files the server still has and what makes it purge them;
//! * [`mysql_json`]: MySQL's binary JSON into the text MySQL itself prints.
//!
//! mysql_async registers as a replica and frames events; mysql_common parses headers, table
//! maps and rows-event headers; the row bytes are ours (see `rows` for why).

pub mod assemble;
mod batch;
mod buffers;
mod columns;
mod cursor;
mod decimal;
pub mod files;
pub mod filter;
pub mod layout;
pub mod mysql_json;
pub mod reader;
pub mod rows;

pub use assemble::Assembler;
pub use filter::{table_filter, TableFilter, SYSTEM_DATABASES};
pub use reader::{BinlogReader, BinlogReaderOptions};

/// The replica server id a capture's stream registers with unless told otherwise. Every dump
/// connection open at the same time needs its own id (a second one with the same id makes the
/// server drop the first).
pub const DEFAULT_SERVER_ID: u32 = 5400;
/// The default id of a snapshot's window reader: the stream's id plus one.
pub const DEFAULT_WINDOW_SERVER_ID: u32 = DEFAULT_SERVER_ID + 1;
