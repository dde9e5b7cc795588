//! A private PostgreSQL server that a test may stop and start again: its own data directory
//! (a temporary one) and a free port on 127.0.0.1, trust authentication for user `postgres`,
//! no durability settings a test does not need. The machine's server on 5432 is never
//! touched. The server's binaries come from the PostgreSQL installation
//! (`/usr/lib/postgresql/<version>/bin`, the newest); PostgreSQL refuses to run as root, so
//! under root it runs as the `postgres` account.
#![allow(dead_code)] // Not every test binary stops a server.

use std::path::PathBuf;
use std::process::Command;

/// See the module docs; dropping it stops the server at once.
#[derive(Debug)]
pub struct PrivatePostgres {
    bin: PathBuf,
    data: tempfile::TempDir,
    port: u16,
}

/// The newest installed server's `bin` directory.
fn bin_dir() -> PathBuf {
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
    found
        .pop()
        .map(|(_, bin)| bin)
        .expect("a PostgreSQL server installation (/usr/lib/postgresql/<version>/bin/initdb; apt-get install postgresql)")
}

/// Whether this process runs as root (the owner of its own `/proc` entry).
fn as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

impl PrivatePostgres {
    /// Creates and starts a server.
    pub fn start() -> Self {
        let bin = bin_dir();
        let data = tempfile::Builder::new()
            .prefix("cdcfusion-pg-")
            .tempdir()
            .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = Self { bin, data, port };
        if as_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(pg.data.path())
                .status()
                .unwrap();
            assert!(
                status.success(),
                "chown of the private PostgreSQL data directory"
            );
        }
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.dir("db"),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
            ],
        );
        pg.start_again();
        pg
    }

    fn dir(&self, name: &str) -> String {
        self.data.path().join(name).display().to_string()
    }

    /// Server program `program`, to run as `postgres` under root.
    fn command(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        if as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    /// Runs server program `program` with `args` (as `postgres` under root); panics with its
    /// output on failure.
    fn run(&self, program: &str, args: &[&str]) {
        let out = self
            .command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{program} cannot run: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the (stopped) server and waits until it accepts connections.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off",
            self.port,
            self.data.path().display()
        );
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.dir("db"),
                "-l",
                &self.dir("server.log"),
                "-o",
                &options,
                "-w",
                "start",
            ],
        );
    }

    /// Stops the server the way a crash would (no shutdown checkpoint, clients cut off).
    pub fn stop(&self) {
        self.run(
            "pg_ctl",
            &["-D", &self.dir("db"), "-m", "immediate", "-w", "stop"],
        );
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates database `name`; returns its URL.
    pub fn database(&self, name: &str) -> String {
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        format!("postgresql://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Rows of `sql` in database `db`, read by psql, `|`-separated, NULL as `NULL`.
    pub fn psql(&self, db: &str, sql: &str) -> Vec<String> {
        super::readers::psql_at(self.port, db, sql)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let db = self.dir("db");
        let _ = self
            .command("pg_ctl")
            .args(["-D", &db, "-m", "immediate", "-w", "stop"])
            .output();
    }
}
