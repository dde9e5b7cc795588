//! A private PostgreSQL server for the sink tests, the client comparisons and the benchmarks.
//!
//! # Invariants
//! * Its own cluster: `initdb` from the installed `postgresql` package (the newest version
//!   under `/usr/lib/postgresql`) into a temporary directory, a free port on 127.0.0.1 and a
//!   socket in that directory; so it runs the same whether the machine's own server is
//!   stopped, absent or asks for passwords.
//! * Trust authentication for user `postgres`, so a test connects as a client of a fresh
//!   installation would, with no password to configure. For tests, durability settings a test
//!   does not need are off (`fsync`, `full_page_writes`, `synchronous_commit`); benchmarks keep
//!   PostgreSQL's defaults ([`DevPostgresOptions::durable`]), so a reference is not flattered.
//! * PostgreSQL refuses to run as root, so under root every server program runs as the
//!   `postgres` account the package creates, and the directory is handed to it.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use super::process::{find_program, free_port, missing, running_as_root, spawn_watchdog};

/// What provides the server's programs on Debian.
const POSTGRES_PACKAGES: &str = "postgresql postgresql-client";
/// Attempts to find a free port that the server can bind.
const PORT_ATTEMPTS: u32 = 5;

/// How to start a [`DevPostgres`].
#[derive(Debug, Clone, Default)]
pub struct DevPostgresOptions {
    /// Keep PostgreSQL's durability defaults (`fsync`, full page writes, synchronous commit)
    /// instead of turning them off; benchmarks that write to the server want them.
    pub durable: bool,
}

/// A running private PostgreSQL. See the module docs.
#[derive(Debug)]
pub struct DevPostgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    options: DevPostgresOptions,
    watchdog: Option<Child>,
}

/// The newest installed server's `bin` directory.
fn bin_dir() -> io::Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        missing(
            "a PostgreSQL server (/usr/lib/postgresql/<version>/bin/initdb)",
            POSTGRES_PACKAGES,
        )
    })
}

/// The text of a failed program's output.
fn failure(what: &str, out: &Output) -> io::Error {
    io::Error::other(format!(
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

impl DevPostgres {
    /// Creates a cluster for tests (durability off) and starts its server; returns once it
    /// accepts connections.
    pub fn start() -> io::Result<Self> {
        Self::start_with(DevPostgresOptions::default())
    }

    /// [`DevPostgres::start`] with `options`.
    pub fn start_with(options: DevPostgresOptions) -> io::Result<Self> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let bin = bin_dir()?;
        let dir = std::env::temp_dir().join(format!(
            "cdcfusion-pg-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        let watchdog = spawn_watchdog(&dir, &dir.join("db").join("postmaster.pid"))?;
        let mut pg = Self {
            dir,
            bin,
            port: 0,
            options,
            watchdog: Some(watchdog),
        };
        if running_as_root() {
            let out = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&pg.dir)
                .output()?;
            if !out.status.success() {
                return Err(failure("chown of the data directory to postgres", &out));
            }
        }
        let db = pg.path("db");
        pg.run(
            "initdb",
            &[
                "-D",
                &db,
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
            ],
        )?;
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            pg.port = free_port()?;
            match pg.start_again() {
                Ok(()) => return Ok(pg),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("could not start postgres")))
    }

    /// One server shared by all tests of a process, started on first use; the watchdog stops
    /// it when the process exits.
    pub fn shared() -> &'static DevPostgres {
        static SHARED: OnceLock<DevPostgres> = OnceLock::new();
        SHARED.get_or_init(|| {
            DevPostgres::start()
                .unwrap_or_else(|e| panic!("cannot start the private PostgreSQL: {e}"))
        })
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Server program `program`, run as `postgres` under root.
    fn command(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        let mut command = if running_as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        command.stdin(Stdio::null());
        command
    }

    fn run(&self, program: &str, args: &[&str]) -> io::Result<()> {
        let out = self.command(program).args(args).output()?;
        if out.status.success() {
            Ok(())
        } else {
            Err(failure(&format!("{program} {}", args.join(" ")), &out))
        }
    }

    /// Starts the (stopped) server on its port and waits until it accepts connections.
    pub fn start_again(&self) -> io::Result<()> {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300",
            self.port,
            self.dir.display()
        );
        if !self.options.durable {
            options.push_str(" -c fsync=off -c full_page_writes=off -c synchronous_commit=off");
        }
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.path("db"),
                "-l",
                &self.path("server.log"),
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )
    }

    /// Stops the server the way a crash would (no shutdown checkpoint, clients cut off); the
    /// data stays for [`DevPostgres::start_again`].
    pub fn stop(&self) -> io::Result<()> {
        self.run(
            "pg_ctl",
            &["-D", &self.path("db"), "-m", "immediate", "-w", "stop"],
        )
    }

    /// The server's TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgresql://postgres@127.0.0.1:PORT/db` (trust authentication: no password).
    pub fn url(&self, db: &str) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The libpq key/value form of [`DevPostgres::url`].
    pub fn conninfo(&self, db: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname={db}",
            self.port
        )
    }

    /// Creates database `name` afresh (dropping one of that name first); returns its URL.
    pub fn create_database(&self, name: &str) -> io::Result<String> {
        self.psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        )?;
        self.psql("postgres", &format!("CREATE DATABASE {name}"))?;
        Ok(self.url(name))
    }

    /// Rows of `sql` in database `db`, read by psql over TCP: `|`-separated, NULL as `NULL`.
    pub fn psql(&self, db: &str, sql: &str) -> io::Result<Vec<String>> {
        psql_at(self.port, db, sql)
    }
}

/// The `psql` client: the installed server's own copy, else the one on `PATH`.
fn psql_program() -> io::Result<PathBuf> {
    bin_dir()
        .ok()
        .map(|bin| bin.join("psql"))
        .filter(|p| p.is_file())
        .or_else(|| find_program(&["psql"]))
        .ok_or_else(|| missing("psql", "postgresql-client"))
}

/// Rows of `sql` in database `db` of the trust-authenticated server on 127.0.0.1:`port`, read
/// by psql (a reader that is not ours): `|`-separated, NULL as `NULL`.
pub fn psql_at(port: u16, db: &str, sql: &str) -> io::Result<Vec<String>> {
    let out = Command::new(psql_program()?)
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(["-d", db, "-AtX", "-P", "null=NULL", "-v", "ON_ERROR_STOP=1"])
        .args(["-c", sql])
        .env_remove("PGPASSWORD")
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(failure(&format!("psql -c {sql:?}"), &out));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

impl Drop for DevPostgres {
    fn drop(&mut self) {
        if Path::new(&self.path("db")).join("postmaster.pid").exists() {
            let _ = self
                .command("pg_ctl")
                .args(["-D", &self.path("db"), "-m", "immediate", "-w", "stop"])
                .output();
        }
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
