//! `cdcfusion serve`: init files create sources, the state directory is held, and the process
//! stops cleanly on SIGINT.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;
use mysql_async::prelude::Queryable;

#[tokio::test]
async fn serve_runs_init_files_and_stops_on_interrupt() {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, "serve_db").await;
    conn.query_drop(
        "CREATE TABLE serve_db.t (id INT PRIMARY KEY); INSERT INTO serve_db.t VALUES (1), (2)",
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let init = dir.path().join("init.sql");
    std::fs::write(
        &init,
        format!(
            "-- a source; the URL holds a ';' in no statement\nCREATE SOURCE shop FROM MYSQL '{}' WITH (tables = 'serve_db.*', server_id = {});\n",
            server().cdc_url(),
            source_server_id()
        ),
    )
    .unwrap();
    let state = dir.path().join("state");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cdcfusion"))
        .args(["serve", "--listen", "127.0.0.1:0", "--init"])
        .arg(&init)
        .arg("--state-dir")
        .arg(&state)
        .env("RUST_LOG", "cdcfusion=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read the log to the end (a closed pipe would fail the server's later writes).
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let seen = tokio::task::spawn_blocking(move || {
        let mut seen: Vec<String> = Vec::new();
        while let Ok(line) = rx.recv_timeout(HANG_GUARD) {
            seen.push(line);
            let running = seen.iter().any(|l| l.contains("engine running"));
            let ready = seen.iter().any(|l| l.contains("source ready"));
            if running && ready {
                break;
            }
        }
        seen
    })
    .await
    .unwrap();
    assert!(
        seen.iter().any(|l| l.contains("engine running")),
        "serve did not start: {seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|l| l.contains("source ready") && l.contains("shop")),
        "{seen:#?}"
    );
    let lock = state.join("cdcfusion.lock");
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap().trim(),
        child.id().to_string()
    );
    // A second engine on the same state directory is refused.
    let second = Command::new(env!("CARGO_BIN_EXE_cdcfusion"))
        .args(["serve", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("in use by process"));
    Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(!lock.exists(), "the lock is released on exit");
}

/// The log lines of a child process, read on a thread (a closed pipe would fail its writes).
/// The port of the `listen=127.0.0.1:<port>` field of a log line (colour codes removed).
fn port_in(line: &str) -> u16 {
    let mut line = line.to_string();
    while let Some(start) = line.find('\u{1b}') {
        let end = line[start..]
            .find('m')
            .map_or(line.len(), |e| start + e + 1);
        line.replace_range(start..end, "");
    }
    line.split("listen=127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line}"))
}

fn log_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Reads log lines until one contains `what`; returns it.
async fn wait_for_line(
    rx: std::sync::mpsc::Receiver<String>,
    what: &'static str,
) -> (String, std::sync::mpsc::Receiver<String>) {
    tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        while let Ok(line) = rx.recv_timeout(HANG_GUARD) {
            if line.contains(what) {
                return (line, rx);
            }
            seen.push(line);
        }
        panic!("no line with {what:?}: {seen:#?}");
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn serve_is_up_at_once_and_shows_a_failed_init_source() {
    let dir = tempfile::tempdir().unwrap();
    let init = dir.path().join("init.sql");
    let bad = server().cdc_url().replacen(":cdc-secret@", ":wrong@", 1);
    std::fs::write(
        &init,
        format!(
            "CREATE SOURCE broken FROM MYSQL '{bad}' WITH (server_id = {});\nSELECT no_such_column FROM nowhere;\n",
            source_server_id()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cdcfusion"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--init",
        ])
        .arg(&init)
        .env("RUST_LOG", "cdcfusion=info")
        .env("NO_COLOR", "1")
        .env("CDCFUSION_USER", "u")
        .env("CDCFUSION_PASSWORD", "p")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = log_lines(&mut child);
    let (line, rx) = wait_for_line(rx, "engine running").await;
    // Colour codes are removed, whatever the log format does with a pipe.
    let port = port_in(&line).to_string();
    let (metrics_line, rx) = wait_for_line(rx, "metrics endpoint").await;
    let metrics_port = port_in(&metrics_line);
    // The source's failure is shown, and the engine keeps serving.
    let (_, _rx) = wait_for_line(rx, "source stopped").await;
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "u",
            "-d",
            "broken",
            "-XAt",
            "-c",
        ])
        .env("PGPASSWORD", "p")
        .arg("SELECT state, error_sqlstate FROM cdc.sources WHERE name = 'broken'")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.trim(),
        "failed|28000",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The Prometheus endpoint shows it too.
    let scrape = {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
        conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        answer
    };
    assert!(scrape.starts_with("HTTP/1.1 200 OK"), "{scrape}");
    for line in [
        "cdcfusion_source_state{source=\"broken\",state=\"failed\"} 1",
        // psql's one statement and its connection.
        "cdcfusion_pg_connections_total 1",
        "cdcfusion_pg_statement_seconds_count 1",
    ] {
        assert!(
            scrape.lines().any(|l| l == line),
            "{line} not in:\n{scrape}"
        );
    }
    // `cdcfusion status` prints the same over the PostgreSQL protocol.
    let out = Command::new(env!("CARGO_BIN_EXE_cdcfusion"))
        .args(["status", "--url"])
        .arg(format!("postgresql://u@127.0.0.1:{port}/postgres"))
        .env("PGPASSWORD", "p")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for part in ["Sources", "Tables", "Sinks\n  (none)"] {
        assert!(stdout.contains(part), "{part} not in:\n{stdout}");
    }
    let source_row = stdout
        .lines()
        .find(|l| l.contains("broken"))
        .unwrap_or_else(|| panic!("no row of the source in:\n{stdout}"));
    assert!(source_row.contains("failed"), "{source_row}");
    // A wrong password is a clear error and a failed exit, not a hang.
    let out = Command::new(env!("CARGO_BIN_EXE_cdcfusion"))
        .args(["status", "--url"])
        .arg(format!("postgresql://u@127.0.0.1:{port}/postgres"))
        .env("PGPASSWORD", "wrong")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("connecting to"), "{stderr}");
    assert!(child.try_wait().unwrap().is_none(), "serve exited");
    Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}");

    // With --fail-fast a source that cannot start ends the engine with an error.
    std::fs::write(
        &init,
        format!(
            "CREATE SOURCE broken FROM MYSQL '{bad}' WITH (server_id = {});\n",
            source_server_id()
        ),
    )
    .unwrap();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_cdcfusion"))
            .args(["serve", "--listen", "127.0.0.1:0", "--fail-fast", "--init"])
            .arg(&init)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("source broken stopped"), "{stderr}");
}

/// `GET path` on 127.0.0.1:`port`: the status code and the body.
fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(conn, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// The probes an orchestrator asks: `/health` answers while the process serves; `/ready` is
/// 503 while a source's snapshot cannot finish (its table is locked at the server), naming the
/// source and its phase, and 200 once the snapshot is published. With no user configured,
/// `serve` says how to add one.
#[tokio::test]
async fn ready_waits_for_the_snapshot_and_health_answers_at_once() {
    let db = "serve_ready";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT); \
         INSERT INTO {db}.t SELECT seq, seq FROM {db}.seq_1_to_100"
    ))
    .await
    .unwrap();
    // The snapshot cannot read the table while this session holds it.
    let mut locker = root_conn(server()).await;
    locker
        .query_drop(format!("LOCK TABLES {db}.t WRITE"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let init = dir.path().join("init.sql");
    std::fs::write(
        &init,
        format!(
            "CREATE SOURCE probed FROM MYSQL '{}' WITH (tables = '{db}.*', server_id = {});\n",
            server().cdc_url(),
            source_server_id()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cdcfusion"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--init",
        ])
        .arg(&init)
        .env("RUST_LOG", "cdcfusion=info")
        .env("NO_COLOR", "1")
        .env_remove("CDCFUSION_USER")
        .env_remove("CDCFUSION_PASSWORD")
        .env_remove("CDCFUSION_AUTH")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = log_lines(&mut child);
    let (_, rx) = wait_for_line(rx, "no user can log in yet").await;
    let (metrics_line, _rx) = wait_for_line(rx, "metrics endpoint").await;
    let port = port_in(&metrics_line);

    assert_eq!(http_get(port, "/health"), (200, "ok\n".to_string()));
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    let body = loop {
        let (code, body) = http_get(port, "/ready");
        assert_eq!(code, 503, "ready while the table is locked: {body}");
        if body.contains("\"source\":\"probed\"") {
            break body;
        }
        assert!(tokio::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["ready"], false, "{body}");
    let source = answer["not_ready"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["source"] == "probed")
        .unwrap();
    assert!(
        ["planning", "snapshot"].contains(&source["phase"].as_str().unwrap()),
        "{body}"
    );
    // cdc.tables (read here through the metrics) lists the table once its snapshot has
    // reached it, with no rows yet, while the source stays not ready.
    let listed = "cdcfusion_table_state{source=\"probed\",db=\"serve_ready\",table=\"t\",state=\"capturing\"} 1";
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let (code, metrics) = http_get(port, "/metrics");
        assert_eq!(code, 200);
        if metrics.lines().any(|l| l == listed) {
            assert!(
                !metrics
                    .lines()
                    .any(|l| l.starts_with("cdcfusion_table_rows{")),
                "rows before the hand-off:\n{metrics}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{listed} never in:\n{metrics}"
        );
        assert_eq!(http_get(port, "/ready").0, 503);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    locker.query_drop("UNLOCK TABLES").await.unwrap();
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let (code, body) = http_get(port, "/ready");
        if code == 200 {
            let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(answer["ready"], true, "{body}");
            assert_eq!(answer["not_ready"], serde_json::json!([]), "{body}");
            break;
        }
        assert_eq!(code, 503, "{body}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "never ready: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(http_get(port, "/health").0, 200);
    assert_eq!(http_get(port, "/nothing").0, 404);
    Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}");
}
