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
            next_server_id()
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
        let mut seen = Vec::new();
        while let Ok(line) = rx.recv_timeout(HANG_GUARD) {
            let done = line.contains("engine running");
            seen.push(line);
            if done {
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
