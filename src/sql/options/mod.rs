//! The `WITH (...)` options of `CREATE SOURCE`, read through one table into one typed struct.
//!
//! # Invariant
//! A [`SourceOptions`] the parser returns is one the capture accepts as is: every option was
//! type-checked and range-checked by its row of [`OPTIONS`] when the statement was parsed, and
//! the rules that span options hold (`start_position` exists only for `stream_only`, which
//! [`SnapshotMode`](crate::capture::SnapshotMode) makes unrepresentable otherwise; every
//! `chunk_key` table is one `tables` selects). Nothing checks them again: the engine maps them
//! onto the capture with [`SourceOptions::to_capture_options`], which cannot fail.
//! `docs/sql-reference.md` lists the table's rows; a test keeps it current.
//!
//! # Values
//! Strings are string literals and integers are number literals; a quoted number
//! (`chunk_size = '100'`) or an unquoted word (`snapshot_mode = initial`) is refused with a hint,
//! so a value's type is visible in the statement and a typo cannot turn into a string.
//!
//! # Parts, bottom up
//! * `formats`: the text forms inside the string-valued options.
//! * `typed`: [`SourceOptions`], its defaults (the capture's) and its mapping onto the capture.
//! * `table`: [`OPTIONS`], reading a `WITH` list through it, and rendering one.

mod formats;
mod table;
mod typed;

pub use table::{OptionSpec, OPTIONS};
pub use typed::{
    ConnectionChange, MoveStart, SourceChanges, SourceOptions, DEFAULT_TABLES, MAX_PARALLELISM,
    MAX_SERVER_ID,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::SnapshotMode;
    use crate::change::position::{BinlogCoord, GtidSet, StartPosition};
    use crate::change::schema::TableId;
    use crate::sql::{parse_cdc_statement, CdcStatement, SqlError};
    use crate::sqlstate::HasSqlState;
    use crate::sqlstate::SqlState;

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
                assert_eq!(e.sqlstate().code(), sqlstate, "{with:?}: {e}");
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
        let capture = d.to_capture_options();
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
        let capture = o.to_capture_options();
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
            mysql.to_capture_options().mode,
            mysql.mode,
            "the capture gets the position as parsed"
        );
    }

    #[test]
    fn the_read_timeout_reaches_the_capture_and_is_written_only_when_set() {
        let default = SourceOptions::default();
        assert_eq!(
            default.to_capture_options().read_timeout,
            crate::source::connect::DEFAULT_READ_TIMEOUT
        );
        assert!(!default.to_string().contains("read_timeout_seconds"));
        let short = ok("read_timeout_seconds = 5");
        assert_eq!(
            short.to_capture_options().read_timeout,
            std::time::Duration::from_secs(5)
        );
        assert!(short.to_string().contains("read_timeout_seconds = 5"));
        assert_eq!(ok(&short.to_string()), short);
        assert_refused(
            "read_timeout_seconds = 0",
            SqlState::INVALID_PARAMETER_VALUE.code(),
            "read_timeout_seconds: 0 is out of range 1..=86400",
        );
    }

    #[test]
    fn option_names_are_case_insensitive_unless_quoted() {
        assert_eq!(ok("CHUNK_SIZE = 5").chunk_size, 5);
        assert_eq!(ok("Chunk_Size = 5").chunk_size, 5);
        assert_eq!(ok("\"chunk_size\" = 5").chunk_size, 5);
        assert_refused(
            "\"CHUNK_SIZE\" = 5",
            SqlState::SYNTAX_ERROR.code(),
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
        assert_eq!(max.to_capture_options().snapshot.window_server_id, u32::MAX);
        // MySQL names keep their case.
        let keys = ok("tables = 'Shop.*', chunk_key = 'Shop.Items:ID'").chunk_keys;
        assert_eq!(keys[&TableId::new("Shop", "Items")], "ID");
    }

    #[test]
    fn unknown_and_repeated_options_are_refused() {
        assert_refused(
            "chunk_sz = 5",
            SqlState::SYNTAX_ERROR.code(),
            "unknown option \"chunk_sz\" at Line: 1, Column: 48; valid options are tables, \
             chunk_size, parallelism, chunk_key, snapshot_mode, start_position, server_id",
        );
        // Named even when its value would not parse.
        assert_refused(
            "frobnicate = )",
            SqlState::SYNTAX_ERROR.code(),
            "unknown option \"frobnicate\"",
        );
        assert_refused(
            "chunk_size = 5, parallelism = 2, CHUNK_SIZE = 6",
            SqlState::SYNTAX_ERROR.code(),
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
            assert_refused(with, SqlState::INVALID_PARAMETER_VALUE.code(), fragment);
        }
    }

    #[test]
    fn a_value_sqlparser_cannot_read_is_a_syntax_error_naming_the_option() {
        assert_refused(
            "chunk_size = )",
            SqlState::SYNTAX_ERROR.code(),
            "invalid value for option chunk_size: sql parser error: Expected: an expression, \
             found: ) at Line: 1, Column: 61",
        );
    }

    #[test]
    fn every_integer_options_bounds_are_accepted_and_render_back() {
        for spec in &OPTIONS {
            let form = spec.form();
            let Some(bounds) = form.strip_prefix("integer ") else {
                continue;
            };
            let (min, max) = match bounds.split_once(" to ") {
                Some((min, max)) => (min.to_string(), max.to_string()),
                None => (
                    bounds.trim_start_matches("≥ ").to_string(),
                    usize::MAX.to_string(),
                ),
            };
            for bound in [min, max] {
                let parsed = ok(&format!("{} = {bound}", spec.name));
                assert_eq!(spec.value_sql(&parsed), Some(bound), "{}", spec.name);
            }
        }
    }

    #[test]
    fn boolean_options_are_written_only_when_not_their_default() {
        let o = ok("validate = off, visible_during_snapshot = 'yes'");
        assert!(!o.validate);
        assert!(o.visible_during_snapshot);
        assert!(o.to_capture_options().visible_during_snapshot);
        let rendered = o.to_string();
        assert!(
            rendered
                .ends_with("server_id = 5400, validate = false, visible_during_snapshot = true"),
            "{rendered}"
        );
        assert_eq!(ok(&rendered), o);
        assert_refused(
            "validate = 2",
            SqlState::INVALID_PARAMETER_VALUE.code(),
            "invalid value for option validate: expected true or false, found number 2",
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
