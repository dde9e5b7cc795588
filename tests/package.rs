//! The Debian package as an operator installs it: `cargo deb` packs this build's binary with
//! the systemd unit and the sample settings, `dpkg` installs it on this machine, and the
//! installed binary, run as the package's system user with the installed settings file (and
//! the user given in the environment, as the unit's `EnvironmentFile` would), serves a source,
//! keeps it in the installed state directory across a restart, and is purged again.
//!
//! The package's binary is the test build's (`--no-build --profile dev`): the release package
//! is the same command without those flags, and building a release here would double the
//! suite's build. Installing needs root (or sudo, as the set-up scripts' `as_root`).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;

/// Marks an installation this test made, so a leftover of an interrupted run may be purged
/// while an operator's own installation never is.
const MARKER: &str = "/var/lib/cdcfusion/.installed-by-cdcfusion-tests";

/// `program` run as root: directly under root, else through `sudo -n`.
fn as_root(program: &str) -> Command {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if root {
        Command::new(program)
    } else {
        let mut sudo = Command::new("sudo");
        sudo.args(["-n", program]);
        sudo
    }
}

/// Runs `command`, failing the test with its output when it fails; returns its stdout.
fn run(mut command: Command) -> String {
    let shown = format!("{command:?}");
    let out = command.output().unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the `cdcfusion` package is installed.
fn installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "cdcfusion"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn purge() {
    let mut dpkg = as_root("dpkg");
    dpkg.args(["--purge", "cdcfusion"]);
    run(dpkg);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on 127.0.0.1:`port`: the status code, or `None` while nothing answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(conn, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").ok()?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

/// The installed binary serving with the installed settings, as the unit runs it: as user
/// `cdcfusion` (`setpriv` execs it, so the engine itself gets the signals), with the front
/// end's user and the listeners given in the environment; its log goes to `log`.
fn start_installed(listen: u16, metrics: u16, log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut command = as_root("setpriv");
    command
        .args([
            "--reuid=cdcfusion",
            "--regid=cdcfusion",
            "--init-groups",
            "--",
            "env",
        ])
        .arg(format!("CDCFUSION_LISTEN=127.0.0.1:{listen}"))
        .arg(format!("CDCFUSION_METRICS_LISTEN=127.0.0.1:{metrics}"))
        .args([
            "CDCFUSION_USER=operator",
            "CDCFUSION_PASSWORD=installed secret",
            "RUST_LOG=cdcfusion=info",
            "NO_COLOR=1",
            "/usr/bin/cdcfusion",
            "serve",
            "--config",
            "/etc/cdcfusion/cdcfusion.toml",
        ])
        .stdout(Stdio::null())
        .stderr(log);
    command.spawn().expect("running the installed binary")
}

/// Stops `child` as the unit's `systemctl stop` would (SIGTERM) and waits for it.
async fn stop(child: Child, listen: u16) {
    let mut kill = as_root("kill");
    kill.args(["-TERM", &child.id().to_string()]);
    run(kill);
    let status = tokio::task::spawn_blocking(move || {
        let mut child = child;
        child.wait().unwrap()
    })
    .await
    .unwrap();
    assert!(
        status.success(),
        "the installed engine stopped with {status}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", listen)).is_err(),
        "the front end is closed"
    );
}

/// Waits until `path` answers 200 (`/ready`: every source has published its snapshot).
async fn wait_for(metrics: u16, path: &str, log: &Path) {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while http_status(metrics, path) != Some(200) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} never answered 200; the engine's log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn client(listen: u16) -> tokio_postgres::Client {
    let conninfo = format!(
        "host=127.0.0.1 port={listen} user=operator password='installed secret' dbname=postgres"
    );
    let (client, connection) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls)
        .await
        .expect("logging in to the installed engine");
    tokio::spawn(connection);
    client
}

/// The `id|v` rows of the captured table, as the installed engine serves them.
async fn served_rows(client: &tokio_postgres::Client) -> Vec<String> {
    client
        .query(
            "SELECT CAST(id AS TEXT) || '|' || v FROM pkg.package_db.t ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

#[tokio::test]
async fn the_package_installs_a_service_whose_binary_serves_with_the_installed_settings() {
    setup_script("ensure_cargo_deb");
    if installed() {
        assert!(
            Path::new(MARKER).exists(),
            "a cdcfusion package this test did not install is on this machine; the test installs \
             its own and purges it at the end: remove it (dpkg --purge cdcfusion) or run the \
             suite on another machine"
        );
        purge();
    }

    // Build the package from this build's binary and look inside.
    let out = tempfile::tempdir().unwrap();
    let mut deb = Command::new("cargo");
    deb.args([
        "deb",
        "--no-build",
        "--profile",
        "dev",
        "--fast",
        "-q",
        "-o",
    ])
    .arg(out.path())
    .current_dir(env!("CARGO_MANIFEST_DIR"));
    let package = run(deb).trim().to_string();
    assert!(package.ends_with(".deb"), "{package}");
    let contents = run({
        let mut c = Command::new("dpkg-deb");
        c.args(["-c", &package]);
        c
    });
    for path in [
        "./usr/bin/cdcfusion",
        "./usr/lib/systemd/system/cdcfusion.service",
        "./etc/cdcfusion/cdcfusion.toml",
        "./usr/share/doc/cdcfusion/README.md",
    ] {
        assert!(
            contents.contains(path),
            "{path} not in the package:\n{contents}"
        );
    }
    let control = run({
        let mut c = Command::new("dpkg-deb");
        c.args(["-f", &package, "Package", "Depends", "Description"]);
        c
    });
    assert!(control.contains("Package: cdcfusion"), "{control}");
    assert!(control.contains("adduser"), "{control}");

    // Install it: the system user, the state directory, the settings readable by the service only.
    let mut dpkg = as_root("dpkg");
    dpkg.args(["-i", &package]);
    run(dpkg);
    let mut marker = as_root("touch");
    marker.arg(MARKER);
    run(marker);
    assert!(installed());
    let stat = |path: &str| {
        let mut c = Command::new("stat");
        c.args(["-c", "%U:%G %a", path]);
        run(c).trim().to_string()
    };
    assert_eq!(stat("/var/lib/cdcfusion"), "cdcfusion:cdcfusion 750");
    assert_eq!(stat("/etc/cdcfusion/cdcfusion.toml"), "root:cdcfusion 640");
    assert_eq!(stat("/usr/bin/cdcfusion"), "root:root 755");
    let unit = std::fs::read_to_string("/usr/lib/systemd/system/cdcfusion.service").unwrap();
    for line in [
        "User=cdcfusion",
        "ExecStart=/usr/bin/cdcfusion serve --config /etc/cdcfusion/cdcfusion.toml",
        "Restart=on-failure",
        "StateDirectory=cdcfusion",
    ] {
        assert!(
            unit.lines().any(|l| l == line),
            "{line} not in the unit:\n{unit}"
        );
    }
    if Path::new("/usr/bin/systemd-analyze").exists() {
        let mut verify = Command::new("systemd-analyze");
        verify.args(["verify", "/usr/lib/systemd/system/cdcfusion.service"]);
        run(verify);
    }

    // The installed binary with the installed settings serves a source.
    let db = "package_db";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20)); \
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq) FROM {db}.seq_1_to_50"
    ))
    .await
    .unwrap();
    let (listen, metrics) = (free_port(), free_port());
    let log = out.path().join("engine.log");
    let child = start_installed(listen, metrics, &log);
    wait_for(metrics, "/health", &log).await;
    let admin = client(listen).await;
    admin
        .batch_execute(&format!(
            "CREATE SOURCE pkg FROM MYSQL '{}' WITH (tables = '{db}.*', server_id = {})",
            server().cdc_url(),
            source_server_id()
        ))
        .await
        .unwrap();
    wait_for(metrics, "/ready", &log).await;
    let expected: Vec<String> = (1..=50).map(|i| format!("{i}|v{i}")).collect();
    assert_eq!(served_rows(&admin).await, expected);
    drop(admin);
    stop(child, listen).await;

    // Restarted, the source comes back from the installed state directory and goes on.
    conn.query_drop(format!("UPDATE {db}.t SET v = 'after' WHERE id = 7"))
        .await
        .unwrap();
    let child = start_installed(listen, metrics, &log);
    wait_for(metrics, "/health", &log).await;
    wait_for(metrics, "/ready", &log).await;
    let admin = client(listen).await;
    let mut expected = expected;
    expected[6] = "7|after".to_string();
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let rows = served_rows(&admin).await;
        if rows == expected {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restarted engine does not catch up: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(admin);
    stop(child, listen).await;

    // Purged, nothing of it stays: not the state, not the user.
    purge();
    assert!(!installed());
    assert!(!Path::new("/var/lib/cdcfusion").exists());
    assert!(!Path::new("/usr/bin/cdcfusion").exists());
    let user = Command::new("getent")
        .args(["passwd", "cdcfusion"])
        .output()
        .unwrap();
    assert!(!user.status.success(), "the service's user is removed");
}
