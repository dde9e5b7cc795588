//! A front end serving a captured database on a free port, with users of every method, for
//! clients to connect to; and helpers to run the real `psql` against it.

use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cdcfusion::capture::{CaptureOptions, SnapshotMode};
use cdcfusion::change::schema::Flavor;
use cdcfusion::config::{AuthMethod, FrontendSettings, Role, UserSettings};
use cdcfusion::engine::Engine;
use cdcfusion::frontend::Server;
use cdcfusion::source::connect::current_position;
use mysql_async::prelude::Queryable;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::common::*;

/// SCRAM user (the default method).
pub const USER: &str = "ann";
pub const PASSWORD: &str = "ann's secret";
/// md5 user.
pub const MD5_USER: &str = "bob";
pub const MD5_PASSWORD: &str = "bob-pw";

/// Settings with both users and no delay worth waiting for.
pub fn settings() -> FrontendSettings {
    FrontendSettings {
        users: vec![
            UserSettings {
                name: USER.into(),
                password: PASSWORD.into(),
                method: None,
                role: Some(Role::Admin),
            },
            UserSettings {
                name: MD5_USER.into(),
                password: MD5_PASSWORD.into(),
                method: Some(AuthMethod::Md5),
                role: Some(Role::Reader),
            },
        ],
        auth_failure_delay: Duration::from_millis(50),
        ..FrontendSettings::default()
    }
}

/// A running front end over an engine capturing one MariaDB database as source `source`.
pub struct Fixture {
    pub engine: Arc<Engine>,
    pub addr: SocketAddr,
    pub source: String,
    pub db: String,
    /// The front end's counters (statements planned, ...).
    pub metrics: cdcfusion::frontend::FrontendMetrics,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Fixture {
    /// Creates database `db` with `setup` statements, captures it as source `source` and
    /// serves it with `settings`.
    pub async fn start(db: &str, source: &str, setup: &str, settings: FrontendSettings) -> Self {
        let mut conn = root_conn(server()).await;
        fresh_db(&mut conn, db).await;
        conn.query_drop(setup.replace("{db}", db)).await.unwrap();
        let engine = Arc::new(Engine::new());
        let mut options = CaptureOptions::new(format!("{db}.*"), SnapshotMode::Initial);
        options.server_id = next_server_id();
        options.snapshot.window_server_id = next_server_id();
        engine
            .create_source(source, &server().cdc_url(), options)
            .unwrap();
        tokio::time::timeout(HANG_GUARD, engine.wait_ready(source))
            .await
            .unwrap()
            .unwrap();
        Self::serve(engine, source, db, settings).await
    }

    /// Serves an engine that is ready.
    pub async fn serve(
        engine: Arc<Engine>,
        source: &str,
        db: &str,
        settings: FrontendSettings,
    ) -> Self {
        let server = Server::bind(
            Arc::clone(&engine),
            "127.0.0.1:0".parse().unwrap(),
            settings,
        )
        .await
        .unwrap();
        let addr = server.local_addr();
        let metrics = server.stats();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        Self {
            engine,
            addr,
            source: source.to_string(),
            db: db.to_string(),
            metrics,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// A libpq-style connection string for `user` on `database`.
    pub fn conninfo(&self, user: &str, password: &str, database: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={user} password='{}' dbname={database} sslmode=disable",
            self.addr.port(),
            password.replace('\'', "\\'")
        )
    }

    /// A client on `database` whose session ran `set` first (`SET cdcfusion.indexes = off`).
    pub async fn client_with(&self, database: &str, set: &str) -> tokio_postgres::Client {
        let client = self.client(database).await;
        client.batch_execute(set).await.unwrap();
        client
    }

    /// A tokio-postgres client of the SCRAM user on `database`.
    pub async fn client(&self, database: &str) -> tokio_postgres::Client {
        self.client_as(USER, PASSWORD, database).await.unwrap()
    }

    pub async fn client_as(
        &self,
        user: &str,
        password: &str,
        database: &str,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let (client, connection) = tokio_postgres::connect(
            &self.conninfo(user, password, database),
            tokio_postgres::NoTls,
        )
        .await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// A client and its connection's end: the error the server closed it with, if any.
    pub async fn client_watched(
        &self,
        database: &str,
    ) -> (
        tokio_postgres::Client,
        tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
    ) {
        let (client, connection) = tokio_postgres::connect(
            &self.conninfo(USER, PASSWORD, database),
            tokio_postgres::NoTls,
        )
        .await
        .unwrap();
        (client, tokio::spawn(connection))
    }

    /// Waits until the source has applied everything committed on the server so far.
    pub async fn sync(&self) {
        let (target, _) = current_position(&mut root_conn(server()).await, Flavor::MariaDb)
            .await
            .unwrap();
        tokio::time::timeout(
            HANG_GUARD,
            self.engine.source(&self.source).unwrap().wait_for(&target),
        )
        .await
        .unwrap()
        .unwrap();
    }

    /// Stops the server gracefully and waits until it has.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(HANG_GUARD, task)
                .await
                .unwrap()
                .unwrap();
        }
    }

    /// Runs the real `psql` (installed when missing) with `args` against `database`.
    pub fn psql(&self, database: &str, args: &[&str]) -> Output {
        psql_command(self, database)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running psql")
    }

    /// Runs `psql -f -` with `script` on standard input.
    pub fn psql_script(&self, database: &str, args: &[&str], script: &str) -> Output {
        use std::io::Write;
        let mut child = psql_command(self, database)
            .args(args)
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running psql");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

fn psql_command(fixture: &Fixture, database: &str) -> Command {
    ensure_psql();
    let mut command = Command::new("psql");
    command
        .arg("-X")
        .args(["-h", "127.0.0.1", "-p"])
        .arg(fixture.addr.port().to_string())
        .args(["-U", USER, "-d", database])
        .env("PGPASSWORD", PASSWORD)
        .env("PGSSLMODE", "disable")
        .env("PGCONNECT_TIMEOUT", "30");
    command
}

/// Installs `postgresql-client` when `psql` is missing (once per test binary).
pub fn ensure_psql() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        crate::common::setup_script("command -v psql >/dev/null || apt_install postgresql-client")
    });
}

/// Standard output of a successful run.
pub fn stdout_of(output: &Output) -> String {
    assert!(
        output.status.success(),
        "psql failed ({}): {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// The SQLSTATE of a tokio-postgres error.
pub fn sqlstate(error: &tokio_postgres::Error) -> String {
    error
        .code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| panic!("no SQLSTATE in {error:?}"))
}

/// Any value as its raw wire bytes.
#[derive(Debug, PartialEq)]
pub struct Raw(pub Vec<u8>);

impl<'a> tokio_postgres::types::FromSql<'a> for Raw {
    fn from_sql(
        _: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }

    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        true
    }
}
