//! Bounded memory: a source's changelog history several times its memory budget lives in the
//! state store past the budget. `cdcfusion serve` runs as its own process (with its own
//! allocator, as users run it); its resident memory is read from `/proc` while a history of
//! about twenty times the budget streams in, and after a restart that loads it back. The
//! changelog read back from the store must still replay to the current table, entry for entry.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;

/// The source's changelog budget, in MiB.
const BUDGET_MIB: u64 = 4;
/// What the process may grow by besides the budget and its tables: decoder and network
/// buffers, runtime and query-planning state. Without the budget it grows by more than the
/// whole history (about 114 MiB here).
const ALLOWANCE_MIB: u64 = 40;
const ROWS: usize = 200;
const ROUNDS: usize = 150;
/// Bytes of padding per row; each update's entry holds it twice (after and before image).
const PAD: usize = 2000;

fn rss_mib(pid: u32) -> u64 {
    // The engine has its allocator give freed memory back with `MADV_FREE` (`allocator::tune`):
    // such pages stay counted in the resident set until the kernel needs them, but they are
    // no longer the process's memory (`LazyFree`), so they are not counted here.
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    let kib = |field: &str| -> u64 {
        rollup
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc smaps_rollup"))
    };
    kib("Rss:").saturating_sub(kib("LazyFree:")) / 1024
}

/// A log line without its terminal colours.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An escape sequence ends with a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Starts `cdcfusion serve` on `state`; returns it and the port it listens on once its source
/// is ready.
async fn serve(
    state: &std::path::Path,
    config: &std::path::Path,
    init: Option<&std::path::Path>,
) -> (Child, u16) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cdcfusion"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .arg("--state-dir")
        .arg(state)
        .env("RUST_LOG", "cdcfusion=info")
        // The allocator hands freed pages back at once, so the resident size shows what the
        // engine holds, not what the allocator keeps cached for reuse (up to ~20 MiB here).
        .env("MIMALLOC_PURGE_DELAY", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(init) = init {
        command.arg("--init").arg(init);
    }
    let mut child = command.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(plain(&line));
        }
    });
    let seen = tokio::task::spawn_blocking(move || {
        let mut seen: Vec<String> = Vec::new();
        while let Ok(line) = rx.recv_timeout(HANG_GUARD) {
            seen.push(line);
            if seen
                .iter()
                .any(|l| l.contains("source ready") || l.contains("resuming from a checkpoint"))
                && seen.iter().any(|l| l.contains("engine running"))
            {
                break;
            }
        }
        // Keep draining, so the server never blocks on a full pipe.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        seen
    })
    .await
    .unwrap();
    let port = seen
        .iter()
        .find_map(|l| {
            let at = l.find("listen=127.0.0.1:")? + "listen=127.0.0.1:".len();
            l[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("serve did not start: {seen:#?}"));
    (child, port)
}

async fn client(port: u16) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=test dbname=hist sslmode=disable"),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Changelog entries, bytes of them in memory and entries spilled, from `cdc.tables`.
async fn changelog_status(client: &tokio_postgres::Client) -> (i64, i64, i64) {
    let row = client
        .query_one(
            "SELECT changelog_entries::bigint, changelog_memory_bytes::bigint, \
             changelog_spilled_entries::bigint FROM cdc.tables WHERE \"table\" = 't'",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Waits until the changelog holds `entries` and its memory is within the budget; returns the
/// last status seen.
async fn settled(client: &tokio_postgres::Client, entries: i64) -> (i64, i64, i64) {
    let budget = (BUDGET_MIB << 20) as i64;
    let deadline = std::time::Instant::now() + HANG_GUARD;
    loop {
        let status = changelog_status(client).await;
        if status.0 == entries && status.1 <= budget && status.2 > 0 {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the changelog did not settle within its budget: (entries, bytes in memory, spilled) = {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Replaying the changelog (the newest entry of each key) gives the current table, both ways.
async fn replays_to_current(client: &tokio_postgres::Client) {
    let replayed = "SELECT id, v, pad FROM (SELECT id, v, pad, _op, row_number() OVER \
                    (PARTITION BY id ORDER BY _position DESC) AS n FROM hist.\"t$changelog\") \
                    WHERE n = 1 AND _op <> 'd'";
    let current = "SELECT id, v, pad FROM hist.t";
    for (a, b) in [(replayed, current), (current, replayed)] {
        let sql = format!("SELECT count(*) FROM ({a} EXCEPT {b})");
        let differ: i64 = client.query_one(&sql, &[]).await.unwrap().get(0);
        assert_eq!(differ, 0, "{sql}");
    }
    let rows: i64 = client
        .query_one("SELECT count(*) FROM hist.t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, ROWS as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_many_times_the_budget_stays_in_the_store() {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, "hist").await;
    conn.query_drop(format!(
        "CREATE TABLE hist.t (id INT PRIMARY KEY, v INT NOT NULL, pad VARCHAR({PAD}) NOT NULL)"
    ))
    .await
    .unwrap();
    let values: Vec<String> = (0..ROWS)
        .map(|i| format!("({i}, 0, REPEAT('a', {PAD}))"))
        .collect();
    conn.query_drop(format!("INSERT INTO hist.t VALUES {}", values.join(",")))
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cdcfusion.toml");
    std::fs::write(
        &config,
        format!(
            "auth = 'trust'\ncheckpoint_interval = '50ms'\nchangelog_memory_budget = '{BUDGET_MIB}MiB'\n"
        ),
    )
    .unwrap();
    let init = dir.path().join("init.sql");
    std::fs::write(
        &init,
        format!(
            "CREATE SOURCE hist FROM MYSQL '{}' WITH (tables = 'hist.*', server_id = {});\n",
            server().cdc_url(),
            source_server_id()
        ),
    )
    .unwrap();
    let state = dir.path().join("state");
    let (mut child, port) = serve(&state, &config, Some(&init)).await;
    let pid = child.id();
    let pg = client(port).await;
    let before = rss_mib(pid);

    let mut peak = before;
    for round in 0..ROUNDS {
        let letter = (b'b' + (round % 25) as u8) as char;
        conn.query_drop(format!(
            "UPDATE hist.t SET v = v + 1, pad = REPEAT('{letter}', {PAD})"
        ))
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        peak = peak.max(rss_mib(pid));
    }
    let entries = (ROWS + ROWS * ROUNDS) as i64;
    let (_, in_memory, spilled) = settled(&pg, entries).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let grown = rss_mib(pid).saturating_sub(before);
    let peak = peak.saturating_sub(before);
    // Each update entry holds both images: the history is about 2 × PAD bytes per update.
    let history_mib = (ROWS * ROUNDS * 2 * PAD) as u64 >> 20;
    println!(
        "history ≈ {history_mib} MiB; resident changelog {} KiB, spilled entries {spilled}; \
         RSS grew {grown} MiB (at most {peak} MiB while the history streamed in)",
        in_memory >> 10
    );
    assert!(
        grown < BUDGET_MIB + ALLOWANCE_MIB,
        "RSS grew by {grown} MiB for a history of {history_mib} MiB; the budget is {BUDGET_MIB} MiB"
    );
    replays_to_current(&pg).await;
    // A filter on a position literal prunes segments; the oldest update comes back alone.
    let oldest: String = pg
        .query_one(
            "SELECT min(_position) FROM hist.\"t$changelog\" WHERE _op = 'u'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let sql = format!(
        "SELECT count(*) FROM hist.\"t$changelog\" WHERE _position <= '{oldest}' AND _op = 'u'"
    );
    let first: i64 = pg.query_one(&sql, &[]).await.unwrap().get(0);
    assert_eq!(first, 1, "{sql}");

    // A restart loads the history back no further than the budget.
    Command::new("kill")
        .arg("-INT")
        .arg(pid.to_string())
        .status()
        .unwrap();
    tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let (mut child, port) = serve(&state, &config, None).await;
    let pg = client(port).await;
    let (loaded, in_memory, _) = settled(&pg, entries).await;
    assert_eq!(loaded, entries);
    let after_restart = rss_mib(child.id());
    println!(
        "after a restart: resident changelog {} KiB, RSS {after_restart} MiB (first start: {before} MiB)",
        in_memory >> 10
    );
    assert!(
        after_restart < before + BUDGET_MIB + ALLOWANCE_MIB,
        "a restart holds {after_restart} MiB for a history of {history_mib} MiB (first start: {before} MiB)"
    );
    replays_to_current(&pg).await;
    child.kill().unwrap();
    child.wait().unwrap();
}
