//! A private MariaDB server with the binlog on, for tests, the demo and benchmarks.
//!
//! # Invariants
//! * Never the machine's own server: every instance has its own temporary data directory, its
//!   own free port on 127.0.0.1 and its own socket, and is configured only by command-line flags
//!   (`--no-defaults`), so no `my.cnf` on the machine changes it.
//! * Always stopped: dropping a [`DevServer`] stops `mariadbd` and deletes its directory; and a
//!   small watchdog process does the same if the owning process dies without dropping it
//!   (panic with `abort`, `SIGKILL`, a test binary exiting with a server in a `static`).
//! * Configured as production capture needs: `binlog_format=ROW`, `binlog_row_image=FULL`,
//!   `binlog_row_metadata=FULL`, a server id, utf8mb4, and a CDC user holding exactly
//!   `SELECT, RELOAD, REPLICATION SLAVE, BINLOG MONITOR` (MariaDB's `REPLICATION CLIENT`).
//!   The server's time zone is deliberately not UTC, to catch time zone bugs.

use std::io;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::process::{find_program, free_port, missing, running_as_root, spawn_watchdog};

/// What provides the server's programs on Debian.
const MARIADB_PACKAGES: &str = "mariadb-server mariadb-client";

/// The CDC user every dev server creates.
pub const CDC_USER: &str = "cdc";
/// The CDC user's password.
pub const CDC_PASSWORD: &str = "cdc-secret";
/// How long a server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to shut down before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// Attempts to find a free port that the server can bind.
const PORT_ATTEMPTS: u32 = 5;

/// How to start a dev server.
#[derive(Debug, Clone)]
pub struct DevServerOptions {
    /// The server's own id in replication (`--server-id`).
    pub server_id: u32,
    /// `--default-time-zone`; not UTC by default.
    pub time_zone: String,
    /// `--binlog-row-image`; FULL unless a test wants to see the start-up check fail.
    pub row_image: String,
    /// `--binlog-format`.
    pub binlog_format: String,
    /// Whether `--log-bin` is given at all.
    pub log_bin: bool,
    /// Extra `--flag=value` arguments.
    pub extra_args: Vec<String>,
}

impl Default for DevServerOptions {
    fn default() -> Self {
        Self {
            server_id: 1,
            time_zone: "-03:30".into(),
            row_image: "FULL".into(),
            binlog_format: "ROW".into(),
            log_bin: true,
            extra_args: Vec::new(),
        }
    }
}

/// A running private MariaDB. See the module docs.
#[derive(Debug)]
pub struct DevServer {
    dir: PathBuf,
    port: u16,
    args: Vec<String>,
    server: Option<Child>,
    watchdog: Option<Child>,
    log: PathBuf,
}

impl DevServer {
    /// Initialises a data directory and starts a server on a free port; waits until it
    /// accepts connections and the CDC user exists.
    pub fn start(options: DevServerOptions) -> io::Result<Self> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let mariadbd = find_program(&["mariadbd", "mysqld"])
            .ok_or_else(|| missing("mariadbd", MARIADB_PACKAGES))?;
        let install = find_program(&["mariadb-install-db", "mysql_install_db"])
            .ok_or_else(|| missing("mariadb-install-db", MARIADB_PACKAGES))?;
        let dir = std::env::temp_dir().join(format!(
            "cdcfusion-mariadb-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(dir.join("data"))?;
        // A private tmpdir: concurrent bootstraps sharing /tmp trip over each other's files.
        std::fs::create_dir_all(dir.join("tmp"))?;
        let watchdog = spawn_watchdog(&dir, &dir.join("mariadbd.pid"))?;
        let mut user_arg = Vec::new();
        if running_as_root() {
            user_arg.push("--user=root".to_string());
        }
        let out = Command::new(&install)
            .arg("--no-defaults")
            .args(&user_arg)
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .env("TMPDIR", dir.join("tmp"))
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "mariadb-install-db failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let log = dir.join("error.log");
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let mut args = vec!["--no-defaults".to_string()];
            args.extend(user_arg.iter().cloned());
            args.extend([
                format!("--datadir={}", dir.join("data").display()),
                format!("--port={port}"),
                format!("--socket={}", dir.join("mysqld.sock").display()),
                "--bind-address=127.0.0.1".into(),
                format!("--pid-file={}", dir.join("mariadbd.pid").display()),
                format!("--tmpdir={}", dir.join("tmp").display()),
                format!("--log-error={}", log.display()),
                format!("--server-id={}", options.server_id),
                format!("--binlog-format={}", options.binlog_format),
                format!("--binlog-row-image={}", options.row_image),
                "--binlog-row-metadata=FULL".into(),
                "--character-set-server=utf8mb4".into(),
                "--collation-server=utf8mb4_general_ci".into(),
                format!("--default-time-zone={}", options.time_zone),
                "--skip-name-resolve".into(),
                "--innodb-buffer-pool-size=128M".into(),
                "--innodb-log-file-size=64M".into(),
                "--innodb-flush-log-at-trx-commit=2".into(),
                "--sync-binlog=0".into(),
                "--max-connections=500".into(),
            ]);
            if options.log_bin {
                args.push(format!(
                    "--log-bin={}",
                    dir.join("data").join("binlog").display()
                ));
            }
            args.extend(options.extra_args.iter().cloned());
            let mut server = DevServer {
                dir: dir.clone(),
                port,
                args,
                server: None,
                watchdog: None,
                log: log.clone(),
            };
            match server.spawn(&mariadbd) {
                Ok(()) => {
                    server.watchdog = Some(watchdog);
                    server.create_cdc_user()?;
                    return Ok(server);
                }
                Err(e) => {
                    // Do not let this attempt's Drop remove the directory.
                    server.dir = PathBuf::new();
                    last_err = Some(e);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(last_err.unwrap_or_else(|| io::Error::other("could not start mariadbd")))
    }

    /// One server shared by all tests of a test binary, started on first use. The watchdog
    /// stops it when the test process exits.
    pub fn shared() -> &'static DevServer {
        static SHARED: OnceLock<DevServer> = OnceLock::new();
        SHARED.get_or_init(|| {
            DevServer::start(DevServerOptions::default())
                .unwrap_or_else(|e| panic!("cannot start the private MariaDB: {e}"))
        })
    }

    fn spawn(&mut self, mariadbd: &Path) -> io::Result<()> {
        let child = Command::new(mariadbd)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.server = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(child) = self.server.as_mut() {
                if let Some(status) = child.try_wait()? {
                    self.server = None;
                    return Err(io::Error::other(format!(
                        "mariadbd exited with {status}: {}",
                        self.log_tail()
                    )));
                }
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() && self.sql("SELECT 1").is_ok()
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(io::Error::other(format!(
            "mariadbd did not become ready in {READY_TIMEOUT:?}: {}",
            self.log_tail()
        )))
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(8).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    fn create_cdc_user(&self) -> io::Result<()> {
        self.sql(&format!(
            "CREATE USER IF NOT EXISTS '{CDC_USER}'@'%' IDENTIFIED BY '{CDC_PASSWORD}';
             GRANT SELECT, RELOAD, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{CDC_USER}'@'%';"
        ))
        .map(|_| ())
    }

    /// Runs SQL as root through the `mariadb` client over the private socket; returns its
    /// tab-separated output.
    pub fn sql(&self, sql: &str) -> io::Result<String> {
        let client = find_program(&["mariadb", "mysql"])
            .ok_or_else(|| missing("mariadb client", MARIADB_PACKAGES))?;
        let out = Command::new(client)
            .arg("--no-defaults")
            .arg("--user=root")
            .arg(format!(
                "--socket={}",
                self.dir.join("mysqld.sock").display()
            ))
            .arg("--default-character-set=utf8mb4")
            .arg("--batch")
            .arg("--skip-column-names")
            .arg("-e")
            .arg(sql)
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "SQL failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mysql://root@127.0.0.1:PORT` (root has no password on a dev server).
    pub fn root_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// The URL of the least-privileged CDC user.
    pub fn cdc_url(&self) -> String {
        format!("mysql://{CDC_USER}:{CDC_PASSWORD}@127.0.0.1:{}", self.port)
    }

    /// Stops the server gracefully (keeping its data) and starts it again on the same port.
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop_server();
        let mariadbd = find_program(&["mariadbd", "mysqld"])
            .ok_or_else(|| missing("mariadbd", MARIADB_PACKAGES))?;
        // The port was just released by our own server; rebinding it can take a moment.
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.spawn(&mariadbd) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(error = %e, "restart attempt failed, retrying");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Freezes the server (`SIGSTOP`): its connections stay open and nothing answers, as with
    /// a server stuck on its disk or swapped out. [`DevServer::resume`] lets it go on.
    pub fn pause(&self) -> io::Result<()> {
        self.signal("-STOP")
    }

    /// Lets a server frozen by [`DevServer::pause`] go on (`SIGCONT`).
    pub fn resume(&self) -> io::Result<()> {
        self.signal("-CONT")
    }

    /// The server's process id while it runs (benchmarks read its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(|c| c.id())
    }

    fn signal(&self, signal: &str) -> io::Result<()> {
        let child = self
            .server
            .as_ref()
            .ok_or_else(|| io::Error::other("the server is not running"))?;
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()?;
        if !status.success() {
            return Err(io::Error::other(format!("kill {signal} failed: {status}")));
        }
        Ok(())
    }

    /// Kills the server at once (`SIGKILL`), as a crashed machine would leave it: no clean
    /// shutdown, connections cut. [`DevServer::restart`] brings it back (with crash recovery).
    pub fn kill(&mut self) {
        let _ = self.signal("-KILL");
        if let Some(mut child) = self.server.take() {
            let _ = child.wait();
        }
    }

    /// Stops the server without deleting its data; [`DevServer::restart`] brings it back.
    pub fn stop_server(&mut self) {
        // A paused server would not act on the stop until it is let go on.
        let _ = self.resume();
        if let Some(mut child) = self.server.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + STOP_TIMEOUT;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for DevServer {
    fn drop(&mut self) {
        self.stop_server();
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
