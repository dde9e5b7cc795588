//! Checks shared by the durability tests: the current table against the source, and the
//! changelog against the binlog as the server's own `mariadb-binlog` prints it.

use std::collections::{BTreeMap, HashSet};

use cdcfusion::change::position::BinlogCoord;
use cdcfusion::devserver::DevServer;
use cdcfusion::engine::Engine;
use cdcfusion::source::connect::ConnectOptions;
use cdcfusion::source::snapshot::select_batches;

use super::*;

/// The rows of `db.table` on the server, rendered like the engine renders them, sorted: every
/// column the server's `information_schema` gives the table now (not the columns the engine
/// captured, which would hide a column it lost).
pub async fn source_rows(
    srv: &DevServer,
    engine: &Engine,
    source: &str,
    table: &str,
) -> Vec<String> {
    let id = engine
        .source(source)
        .unwrap()
        .status()
        .tables
        .into_iter()
        .find(|t| t.id.table == table)
        .unwrap_or_else(|| panic!("{source} captures no {table}"))
        .id
        .clone();
    let connect = ConnectOptions::from_url(&srv.cdc_url()).unwrap();
    let mut conn = connect.connect().await.unwrap();
    let schema = connect.table_schema(&mut conn, &id).await.unwrap();
    let batches = select_batches(&mut conn, &schema, None, vec![], 4096)
        .await
        .unwrap();
    let mut rows: Vec<String> = batches.iter().flat_map(row_strings).collect();
    rows.sort();
    rows
}

/// One changelog entry: op, position, the transaction coordinate, the row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    pub position: String,
    pub op: String,
    pub row: String,
    pub tx: u64,
}

impl Entry {
    /// The transaction's start: `file:offset` of `file:offset:event:row:sub`.
    pub fn coord(&self) -> BinlogCoord {
        let mut parts = self.position.rsplitn(4, ':');
        let (_, _, _) = (parts.next(), parts.next(), parts.next());
        let head = parts.next().unwrap();
        let (file, offset) = head.rsplit_once(':').unwrap();
        BinlogCoord::new(file, offset.parse().unwrap())
    }

    /// Sort key in source order: coordinate, then the rest of the position.
    fn order(&self) -> (BinlogCoord, String) {
        (self.coord(), self.position.clone())
    }
}

/// Splits `_op=x _position=y _tx=n col=...` into an entry.
fn entry(line: &str, with_tx: bool) -> Entry {
    let mut parts = line.splitn(if with_tx { 4 } else { 3 }, ' ');
    let op = parts.next().unwrap().trim_start_matches("_op=").to_string();
    let position = parts
        .next()
        .unwrap()
        .trim_start_matches("_position=")
        .to_string();
    let tx = if with_tx {
        parts
            .next()
            .unwrap()
            .trim_start_matches("_tx=")
            .parse()
            .unwrap()
    } else {
        0
    };
    Entry {
        position,
        op,
        row: parts.next().unwrap_or_default().to_string(),
        tx,
    }
}

/// The engine's changelog of `db.table` with the given columns.
pub async fn engine_changelog(
    engine: &Engine,
    source: &str,
    db: &str,
    table: &str,
    columns: &str,
) -> Vec<Entry> {
    let sql =
        format!("SELECT _op, _position, _tx, {columns} FROM {source}.{db}.\"{table}$changelog\"");
    query(engine, &sql)
        .await
        .iter()
        .map(|l| entry(l, true))
        .collect()
}

/// The columns of `db.table` in the server's order as its own `information_schema` lists
/// them, with whether each is in the primary key.
async fn server_columns(srv: &DevServer, db: &str, table: &str) -> Vec<(String, bool)> {
    use mysql_async::prelude::Queryable;
    root_conn(srv)
        .await
        .exec(
            "SELECT COLUMN_NAME, COLUMN_KEY = 'PRI' FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        .await
        .unwrap()
}

/// One change as a binlog tool prints it: `w` (a row written, `c` or `u`) or `d`, and the row
/// rendered as the engine renders rows (`col=value ...`).
type Change = (String, String);

/// The changes of `db.table` in `[from, to)` per transaction start, in binlog order, as the
/// server's own `mariadb-binlog --verbose` prints them (not our reader): an update that keeps
/// the primary key is a `w` of the new row; one that changes it (or of a keyless table) is
/// the `d` of the old row and the `w` of the new one, as the changelog spells it.
pub async fn binlog_tool_changes(
    srv: &DevServer,
    db: &str,
    table: &str,
    from: &BinlogCoord,
    to: &BinlogCoord,
) -> BTreeMap<BinlogCoord, Vec<Change>> {
    use mysql_async::prelude::Queryable;
    let columns = server_columns(srv, db, table).await;
    let logs: Vec<(String, u64)> = root_conn(srv)
        .await
        .query("SHOW BINARY LOGS")
        .await
        .unwrap();
    let files: Vec<String> = logs
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| {
            let seq = cdcfusion::change::position::file_sequence(name);
            (from.file_seq()..=to.file_seq()).contains(&seq)
        })
        .collect();
    // One file at a time, so each position is known to be in its file.
    let mut out = BTreeMap::new();
    for (i, file) in files.iter().enumerate() {
        let mut tool = std::process::Command::new("mariadb-binlog");
        tool.args([
            "--read-from-remote-server",
            "--host=127.0.0.1",
            "--user=root",
        ])
        .arg(format!("--port={}", srv.port()))
        .args(["--base64-output=DECODE-ROWS", "--verbose"]);
        if i == 0 {
            tool.arg(format!("--start-position={}", from.offset));
        }
        if i + 1 == files.len() {
            tool.arg(format!("--stop-position={}", to.offset));
        }
        let printed = tool.arg(file).output().expect("mariadb-binlog runs");
        assert!(
            printed.status.success(),
            "mariadb-binlog: {}",
            String::from_utf8_lossy(&printed.stderr)
        );
        let text = String::from_utf8_lossy(&printed.stdout);
        out.extend(ToolText::new(file, db, table, columns.clone()).read(&text));
    }
    out
}

/// Reads `mariadb-binlog --verbose` text (see [`binlog_tool_changes`]).
struct ToolText {
    target: String,
    columns: Vec<(String, bool)>,
    file: String,
    at: u64,
    tx: Option<BinlogCoord>,
    /// The row statement being read (for the table), and its images so far (WHERE, SET).
    kind: Option<&'static str>,
    images: Vec<Vec<String>>,
    out: BTreeMap<BinlogCoord, Vec<Change>>,
}

impl ToolText {
    /// The text of binlog `file`.
    fn new(file: &str, db: &str, table: &str, columns: Vec<(String, bool)>) -> Self {
        Self {
            target: format!("`{db}`.`{table}`"),
            columns,
            file: file.to_string(),
            at: 0,
            tx: None,
            kind: None,
            images: Vec::new(),
            out: BTreeMap::new(),
        }
    }

    fn read(mut self, text: &str) -> BTreeMap<BinlogCoord, Vec<Change>> {
        for line in text.lines() {
            if let Some(pos) = line.strip_prefix("# at ") {
                self.at = pos.trim().parse().unwrap_or(self.at);
            } else if line.starts_with('#') && line.split_whitespace().any(|w| w == "GTID") {
                self.tx = Some(BinlogCoord::new(self.file.as_str(), self.at));
            } else if let Some(row) = line.strip_prefix("### ") {
                self.row_line(row);
            } else if !line.starts_with("###") {
                self.finish();
            }
        }
        self.finish();
        self.out
    }

    fn row_line(&mut self, row: &str) {
        let statements = [
            ("INSERT INTO ", "INSERT"),
            ("UPDATE ", "UPDATE"),
            ("DELETE FROM ", "DELETE"),
        ];
        let statement = statements
            .into_iter()
            .find_map(|(prefix, k)| row.strip_prefix(prefix).map(|name| (name, k)));
        if let Some((name, kind)) = statement {
            self.finish();
            self.kind = (name.trim() == self.target).then_some(kind);
        } else if row == "WHERE" || row == "SET" {
            self.images.push(Vec::new());
        } else if let Some(value) = row.trim_start().strip_prefix('@') {
            let (_, value) = value.split_once('=').expect("@n=value");
            if let Some(image) = self.images.last_mut() {
                image.push(tool_value(value));
            }
        }
    }

    /// Ends the row statement being read, if it was one of the table's.
    fn finish(&mut self) {
        let images = std::mem::take(&mut self.images);
        let Some(kind) = self.kind.take() else {
            return;
        };
        let render = |values: &[String]| {
            self.columns
                .iter()
                .zip(values)
                .map(|((name, _), v)| format!("{name}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let key = |values: &[String]| -> Vec<String> {
            self.columns
                .iter()
                .zip(values)
                .filter(|((_, pk), _)| *pk)
                .map(|(_, v)| v.clone())
                .collect()
        };
        let keyless = !self.columns.iter().any(|(_, pk)| *pk);
        let mut changes = Vec::new();
        match (kind, images.as_slice()) {
            ("INSERT", [row]) => changes.push(("w".to_string(), render(row))),
            ("DELETE", [row]) => changes.push(("d".to_string(), render(row))),
            ("UPDATE", [old, new]) => {
                if keyless || key(old) != key(new) {
                    changes.push(("d".to_string(), render(old)));
                }
                changes.push(("w".to_string(), render(new)));
            }
            other => panic!("unexpected row text {other:?}"),
        }
        let tx = self.tx.clone().expect("a row outside a transaction");
        self.out.entry(tx).or_default().extend(changes);
    }
}

/// A value as `mariadb-binlog --verbose` prints it (`5`, `-1 (4294967295)`, `'text'`,
/// `NULL`), as the engine renders it.
fn tool_value(printed: &str) -> String {
    let printed = printed.trim();
    if let Some(quoted) = printed
        .strip_prefix('\'')
        .and_then(|q| q.strip_suffix('\''))
    {
        let mut out = String::new();
        let mut chars = quoted.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some('0') => out.push('\0'),
                Some(other) => out.push(other),
                None => {}
            }
        }
        return out;
    }
    // A number the tool also prints as unsigned: `-1 (4294967295)`.
    printed.split(" (").next().unwrap_or(printed).to_string()
}

/// The changelog entries after a hand-off per transaction start, spelled as
/// [`binlog_tool_changes`] spells them (`c` and `u` both `w`: which one a change is depends on
/// the state before it, which a binlog tool does not have).
fn changes_by_transaction(entries: &[Entry]) -> BTreeMap<BinlogCoord, Vec<Change>> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by_key(|e| e.order());
    let mut out: BTreeMap<BinlogCoord, Vec<Change>> = BTreeMap::new();
    for e in sorted {
        let op = if e.op == "d" { "d" } else { "w" };
        out.entry(e.coord())
            .or_default()
            .push((op.to_string(), e.row.clone()));
    }
    out
}

/// Replays `entries` in position order: keyed by the first column, or as a multiset.
pub fn replay(entries: &[Entry], keyed: bool) -> Vec<String> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by_key(|e| e.order());
    let mut by_key: BTreeMap<String, String> = BTreeMap::new();
    let mut bag: BTreeMap<String, i64> = BTreeMap::new();
    for e in sorted {
        if keyed {
            let key = e.row.split(' ').next().unwrap().to_string();
            if e.op == "d" {
                by_key.remove(&key);
            } else {
                by_key.insert(key, e.row.clone());
            }
        } else {
            *bag.entry(e.row.clone()).or_default() += if e.op == "d" { -1 } else { 1 };
        }
    }
    if keyed {
        let mut rows: Vec<String> = by_key.into_values().collect();
        rows.sort();
        rows
    } else {
        let mut rows = Vec::new();
        for (row, n) in bag {
            assert!(
                n >= 0,
                "the changelog deletes {row} more often than it adds it"
            );
            rows.extend(std::iter::repeat_n(row, n as usize));
        }
        rows
    }
}

/// Checks one table after recovery: the current table equals the source; binlog changes appear
/// once each; after the hand-off the changelog is exactly the binlog's history as
/// `mariadb-binlog` prints it; replaying the
/// whole changelog gives the source's rows.
#[allow(clippy::too_many_arguments)]
pub async fn check_table(
    srv: &DevServer,
    engine: &Engine,
    source: &str,
    db: &str,
    table: &str,
    columns: &str,
    keyed: bool,
    consistent_from: &BinlogCoord,
    end: &BinlogCoord,
) {
    let expected = source_rows(srv, engine, source, table).await;
    let mut current = query(engine, &format!("SELECT * FROM {source}.{db}.{table}")).await;
    current.sort();
    assert_eq!(
        current, expected,
        "{table}: current table differs from the source"
    );
    let log = engine_changelog(engine, source, db, table, columns).await;
    let mut seen = HashSet::new();
    for e in log.iter().filter(|e| e.tx > 0) {
        assert!(
            seen.insert(e.position.clone()),
            "{table}: position {} appears twice in the changelog",
            e.position
        );
    }
    let after: Vec<Entry> = log
        .iter()
        .filter(|e| e.tx > 0 && e.coord() >= *consistent_from)
        .cloned()
        .collect();
    let truth = binlog_tool_changes(srv, db, table, consistent_from, end).await;
    let got = changes_by_transaction(&after);
    if got != truth {
        let differs = truth
            .iter()
            .find(|(tx, changes)| got.get(*tx) != Some(*changes))
            .map(|(tx, changes)| (tx.to_string(), changes.clone(), got.get(tx).cloned()));
        let extra = got
            .keys()
            .find(|tx| !truth.contains_key(*tx))
            .map(ToString::to_string);
        panic!(
            "{table}: changelog after {consistent_from} differs from mariadb-binlog: {} transactions vs {}; first differing (transaction, binlog tool, ours): {differs:?}; first only ours: {extra:?}",
            got.len(),
            truth.len()
        );
    }
    assert_eq!(
        replay(&log, keyed),
        expected,
        "{table}: replaying the changelog does not give the source's rows"
    );
}

/// `cdcfusion serve` on state directory `dir` (a checkpoint every 40 ms, a state snapshot after
/// 150 changes, a changelog memory budget of `budget` bytes), running `init` at start, with
/// settings file `config`, logging to `log`: the process the crash tests kill with SIGKILL.
pub fn spawn_serve(
    dir: &std::path::Path,
    init: &std::path::Path,
    config: &std::path::Path,
    log: &std::path::Path,
    budget: u64,
) -> std::process::Child {
    use std::process::{Command, Stdio};
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Command::new(env!("CARGO_BIN_EXE_cdcfusion"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--checkpoint-interval",
            "40ms",
        ])
        .args(["--state-snapshot-min-changes", "150"])
        .args(["--changelog-memory-budget", &budget.to_string()])
        .arg("--state-dir")
        .arg(dir)
        .arg("--init")
        .arg(init)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "cdcfusion=info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap()
}
