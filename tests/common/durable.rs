//! Checks shared by the durability tests: the current table against the source, and the
//! changelog against the binlog read independently.

use std::collections::{BTreeMap, HashSet};

use cdcfusion::capture::{Capture, CaptureOptions, SnapshotMode};
use cdcfusion::change::position::{BinlogCoord, StartPosition};
use cdcfusion::devserver::DevServer;
use cdcfusion::engine::Engine;
use cdcfusion::source::connect::ConnectOptions;
use cdcfusion::source::snapshot::select_batches;

use super::*;

/// The rows of `db.table` on the server, rendered like the engine renders them, sorted.
pub async fn source_rows(
    srv: &DevServer,
    engine: &Engine,
    source: &str,
    table: &str,
) -> Vec<String> {
    let schema = engine
        .source(source)
        .unwrap()
        .status()
        .tables
        .into_iter()
        .find(|t| t.id.table == table)
        .unwrap_or_else(|| panic!("{source} captures no {table}"));
    let mut conn = ConnectOptions::from_url(&srv.cdc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
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

/// The changelog of `db.table` from `from` to `to` read by a capture of its own (a different
/// replica id), the ground truth the engine's changelog after its hand-off must equal.
pub async fn independent_changelog(
    srv: &DevServer,
    db: &str,
    table: &str,
    from: &BinlogCoord,
    to: &BinlogCoord,
) -> Vec<Entry> {
    let connect = ConnectOptions::from_url(&srv.cdc_url()).unwrap();
    let mut options = CaptureOptions::new(
        format!("{db}.{table}"),
        SnapshotMode::StreamOnly(StartPosition::Coord(from.clone())),
    );
    options.server_id = next_server_id();
    let (mut capture, _) = Capture::start(connect, options).await.unwrap();
    let changes = tokio::time::timeout(HANG_GUARD * 2, capture.catch_up_to(to))
        .await
        .expect("the independent reader hangs")
        .unwrap();
    let mut out = Vec::new();
    for (_, batch) in capture.changelog_batches(&changes).unwrap() {
        // Without _gtid and _commit_ts.
        let keep: Vec<usize> = std::iter::once(0)
            .chain(std::iter::once(1))
            .chain(4..batch.num_columns())
            .collect();
        let projected = batch.project(&keep).unwrap();
        out.extend(row_strings(&projected).iter().map(|l| entry(l, false)));
    }
    out
}

/// `c` and `u` both store the row; which one a change is depends on the state before it,
/// which the independent reader (starting later) does not have.
fn writes(entries: &[Entry]) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = entries
        .iter()
        .map(|e| {
            let op = if e.op == "d" { "d" } else { "w" };
            (e.position.clone(), op.to_string(), e.row.clone())
        })
        .collect();
    out.sort();
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
/// once each; after the hand-off the changelog is exactly the binlog's history; replaying the
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
    let truth = independent_changelog(srv, db, table, consistent_from, end).await;
    let (got, want) = (writes(&after), writes(&truth));
    if got != want {
        let missing: Vec<_> = want.iter().filter(|w| !got.contains(w)).take(5).collect();
        let extra: Vec<_> = got.iter().filter(|g| !want.contains(g)).take(5).collect();
        panic!(
            "{table}: changelog after {consistent_from} differs from the binlog: {} entries vs {}; missing {missing:?}; extra {extra:?}",
            got.len(),
            want.len()
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
