//! The server's edges: authentication methods and failures, TLS, databases, the connection
//! limit, idle sessions, cancellation, statement timeouts and graceful shutdown.

use std::time::Duration;

use cdcfusion::config::AuthMethod;

use crate::common::HANG_GUARD;
use crate::fixture::*;

const SETUP: &str = "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(10));
     INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b');";

/// A statement that runs until stopped: the unbounded changelog of a quiet table.
fn endless(f: &Fixture) -> String {
    format!("SELECT * FROM changelog_tail('{}', '{}.t')", f.source, f.db)
}

#[tokio::test]
async fn scram_md5_and_failed_logins() {
    let f = Fixture::start("pg_auth", "auth", SETUP, settings()).await;
    // SCRAM-SHA-256 (default) and md5 users.
    let scram = f.client_as(USER, PASSWORD, "auth").await.unwrap();
    let md5 = f.client_as(MD5_USER, MD5_PASSWORD, "auth").await.unwrap();
    for client in [&scram, &md5] {
        let row = client
            .query_one("SELECT count(*) FROM pg_auth.t", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), 2);
    }
    // Wrong passwords and unknown users: 28P01, the same for both.
    for (user, password) in [(USER, "wrong"), (MD5_USER, "wrong"), ("nobody", PASSWORD)] {
        let error = f.client_as(user, password, "auth").await.unwrap_err();
        assert_eq!(sqlstate(&error), "28P01", "{user}: {error}");
    }
    // An unknown database: 3D000 once the password is right (md5 too); `postgres` always
    // exists. Without the password it is an ordinary failed login, so names cannot be probed.
    for (user, password) in [(USER, PASSWORD), (MD5_USER, MD5_PASSWORD)] {
        let error = f.client_as(user, password, "nodb").await.unwrap_err();
        assert_eq!(sqlstate(&error), "3D000", "{user}: {error}");
        assert!(format!("{error:?}").contains("nodb"), "{error:?}");
    }
    let error = f.client_as(USER, "wrong", "nodb").await.unwrap_err();
    assert_eq!(sqlstate(&error), "28P01", "{error}");
    let postgres = f.client_as(USER, PASSWORD, "postgres").await.unwrap();
    // From `postgres`, three-part names reach the source; status tables are at hand.
    let row = postgres
        .query_one(
            "SELECT count(*), current_database() FROM auth.pg_auth.t",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 2);
    assert_eq!(row.get::<_, &str>(1), "postgres");
    let row = postgres
        .query_one("SELECT name FROM cdc.sources", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, &str>(0), "auth");
    // From the source's database, `db.table` names its tables.
    let row = scram
        .query_one("SELECT current_database()", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, &str>(0), "auth");
    f.shutdown().await;
}

#[tokio::test]
async fn trust_only_when_configured() {
    let mut settings = settings();
    settings.auth = AuthMethod::Trust;
    let f = Fixture::start("pg_trust", "trusted", SETUP, settings).await;
    let client = f.client_as("anyone", "", "trusted").await.unwrap();
    let row = client.query_one("SELECT 1::BIGINT", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 1);
    let error = f.client_as("anyone", "", "nodb").await.unwrap_err();
    assert_eq!(sqlstate(&error), "3D000", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_sslmode_require() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let status = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost", "-addext"])
        .arg("subjectAltName=IP:127.0.0.1,DNS:localhost")
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl");
    assert!(status.success());
    let mut settings = settings();
    settings.tls = Some((cert.clone(), key));
    settings.tls_required = true;
    let f = Fixture::start("pg_tls", "tls", SETUP, settings).await;
    let conninfo = format!(
        "host=127.0.0.1 port={} user={USER} dbname=tls sslmode=require",
        f.addr.port()
    );
    ensure_psql();
    let out = std::process::Command::new("psql")
        .args(["-X", "-A", "-t", &conninfo, "-c", "\\conninfo", "-c"])
        .arg("SELECT count(*) FROM pg_tls.t")
        .env("PGPASSWORD", PASSWORD)
        .output()
        .unwrap();
    let stdout = stdout_of(&out);
    assert!(stdout.contains("SSL connection"), "{stdout}");
    assert!(stdout.lines().any(|l| l == "2"), "{stdout}");
    // Without TLS the server refuses: 28000.
    let error = f.client_as(USER, PASSWORD, "tls").await.unwrap_err();
    assert_eq!(sqlstate(&error), "28000");

    // `cdcfusion status` speaks TLS as libpq does: by default (`prefer`) without checking the
    // certificate, with `--ssl-root-cert` checking it; a certificate of another CA is refused,
    // and `sslmode=disable` meets the server's refusal.
    let status = |url: String, root: Option<&std::path::Path>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cdcfusion"));
        command.args(["status", "--url", &url]);
        if let Some(root) = root {
            command.arg("--ssl-root-cert").arg(root);
        }
        command.env("PGPASSWORD", PASSWORD).output().unwrap()
    };
    let url = format!("postgresql://{USER}@127.0.0.1:{}/tls", f.addr.port());
    for root in [None, Some(cert.as_path())] {
        let out = status(url.clone(), root);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("Sources"),
            "{root:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let other = dir.path().join("other.pem");
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=other", "-keyout"])
        .arg(dir.path().join("other.key"))
        .arg("-out")
        .arg(&other)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(made.success());
    let out = status(url.clone(), Some(&other));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");
    let out = status(format!("{url}?sslmode=disable"), None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("TLS connections only"), "{stderr}");
}

#[tokio::test]
async fn connection_limit_and_idle_sessions() {
    let mut settings = settings();
    settings.max_connections = 2;
    settings.idle_session_timeout = Some(Duration::from_millis(300));
    let f = Fixture::start("pg_limit", "lim", SETUP, settings).await;
    let first = f.client("lim").await;
    let second = f.client("lim").await;
    let error = f.client_as(USER, PASSWORD, "lim").await.unwrap_err();
    assert_eq!(sqlstate(&error), "53300");
    assert!(
        format!("{error:?}").contains("too many clients"),
        "{error:?}"
    );
    // Idle sessions are closed; their slots are free again.
    tokio::time::timeout(HANG_GUARD, async {
        while !(first.is_closed() && second.is_closed()) {
            let _ = first.simple_query("").await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
    .expect("idle sessions were never closed");
    let third = f.client("lim").await;
    third.simple_query("SELECT 1").await.unwrap();
    drop(third);
    // The client is told why: FATAL 57P05, as PostgreSQL closes an idle session.
    let (_client, ended) = f.client_watched("lim").await;
    let error = tokio::time::timeout(HANG_GUARD, ended)
        .await
        .expect("the idle session was never closed")
        .unwrap()
        .unwrap_err();
    assert_eq!(sqlstate(&error), "57P05", "{error}");
}

#[tokio::test]
async fn cancel_and_statement_timeout_stop_queries() {
    let f = Fixture::start("pg_cancel", "cancel", SETUP, settings()).await;
    let client = f.client("cancel").await;
    let token = client.cancel_token();
    let sql = endless(&f);
    let running = tokio::spawn(async move {
        let result = client.simple_query(&sql).await;
        (client, result)
    });
    // Cancel until the query has ended (the request may arrive before the query starts).
    let (client, result) = tokio::time::timeout(HANG_GUARD, async {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            token.cancel_query(tokio_postgres::NoTls).await.unwrap();
            if running.is_finished() {
                return running.await.unwrap();
            }
        }
    })
    .await
    .expect("the cancelled query never ended");
    let error = result.unwrap_err();
    assert_eq!(sqlstate(&error), "57014", "{error}");
    // The connection is still usable; a statement timeout stops the next one.
    client
        .simple_query("SET statement_timeout = 200")
        .await
        .unwrap();
    let error = tokio::time::timeout(HANG_GUARD, client.simple_query(&endless(&f)))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(sqlstate(&error), "57014");
    assert!(
        format!("{error:?}").contains("statement timeout"),
        "{error:?}"
    );
    let rows = client.query("SELECT 1::INT", &[]).await.unwrap();
    assert_eq!(rows[0].get::<_, i32>(0), 1);
}

#[tokio::test]
async fn shutdown_cancels_running_queries_after_the_grace_period() {
    let mut settings = settings();
    settings.shutdown_grace = Duration::from_millis(200);
    let f = Fixture::start("pg_shutdown", "down", SETUP, settings).await;
    let (idle, idle_ended) = f.client_watched("down").await;
    let busy = f.client("down").await;
    let sql = endless(&f);
    let running = tokio::spawn(async move { busy.simple_query(&sql).await });
    // Let the statement start, then stop the server: it returns once every session is gone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    f.shutdown().await;
    let result = tokio::time::timeout(HANG_GUARD, running)
        .await
        .unwrap()
        .unwrap();
    let error = result.unwrap_err();
    if let Some(code) = error.code() {
        assert_eq!(code.code(), "57014", "{error}");
    }
    assert!(idle.is_closed() || idle.simple_query("SELECT 1").await.is_err());
    // The idle session was told why: FATAL 57P01.
    let error = tokio::time::timeout(HANG_GUARD, idle_ended)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(sqlstate(&error), "57P01", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_serving_one_client_closes_only_its_connection() {
    let f = Fixture::start(
        "pg_conn_panic",
        "conn_panic",
        "CREATE TABLE {db}.t (id INT PRIMARY KEY); INSERT INTO {db}.t VALUES (1), (2);",
        settings(),
    )
    .await;
    let statement = "SELECT 'a panic in this connection'";
    let bystander = f.client("conn_panic").await;
    let victim = f.client("conn_panic").await;
    cdcfusion::failpoint::arm("connection", Some(statement), 0);
    let failed = victim.simple_query(statement).await;
    assert!(failed.is_err(), "the statement answered: {failed:?}");
    assert!(!cdcfusion::failpoint::is_armed(
        "connection",
        Some(statement)
    ));
    assert!(victim.is_closed() || victim.simple_query("SELECT 1").await.is_err());
    // The others are served as before, and new clients connect.
    let count = "SELECT count(*) FROM pg_conn_panic.t";
    for client in [&bystander, &f.client("conn_panic").await] {
        let rows = client.query_one(count, &[]).await.unwrap();
        assert_eq!(rows.get::<_, i64>(0), 2);
    }
    f.shutdown().await;
}
