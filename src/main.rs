//! The `cdcfusion` command line.
//!
//! * `cdcfusion demo`: starts a private MariaDB, creates a sample `shop` schema with rows,
//!   captures it and serves it over the PostgreSQL protocol (printing the `psql` command to
//!   connect) while a small writer changes data; stops everything on Ctrl-C.
//! * `cdcfusion serve`: hosts the engine and its PostgreSQL front end (see `config` for its
//!   settings).
//! * `cdcfusion capture --url mysql://...`: prints the change stream of any server.

use std::time::Duration;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use cdcfusion::config::{
    parse_duration, FlagSettings, FrontendSettings, Role, Settings, UserSettings,
};
use cdcfusion::durable::DurableOptions;
use cdcfusion::engine::{Engine, EngineError, EngineOptions};
use cdcfusion::frontend::{console, InitGate, MetricsServer, Server};
use cdcfusion::sql::{parse_cdc_statement, parse_user_statement, split_statements, CdcStatement};
use clap::{Parser, Subcommand};
use mysql_async::prelude::Queryable;
use rand::{Rng, SeedableRng};

use cdcfusion::change::position::StartPosition;
use cdcfusion::change::SourceTransaction;
use cdcfusion::devserver::{DevServer, DevServerOptions};
use cdcfusion::source::binlog::{table_filter, BinlogReader, BinlogReaderOptions};
use cdcfusion::source::connect::ConnectOptions;
use cdcfusion::state::changelog::{display_columns, transaction_batches};

#[derive(Parser, Debug)]
#[command(
    name = "cdcfusion",
    version,
    about = "Change-data-capture from MySQL/MariaDB into Apache DataFusion"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a private MariaDB, capture a sample schema and serve it over the PostgreSQL
    /// protocol while a writer modifies it; prints the psql command to connect.
    Demo {
        /// Address of the PostgreSQL front end.
        #[arg(long, default_value = cdcfusion::config::DEFAULT_LISTEN)]
        listen: String,
        /// Stop after this long (default: run until Ctrl-C).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
        /// Seed of the writer's random workload.
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Host the engine: run the `--init` SQL files (e.g. `CREATE SOURCE ...`), then keep
    /// capturing until interrupted. Settings: flags, then environment, then `--config`.
    Serve {
        /// Address of the PostgreSQL front end [default: 127.0.0.1:5433]
        #[arg(long)]
        listen: Option<String>,
        /// Address of the Prometheus endpoint, `GET /metrics` [default: off]
        #[arg(long)]
        metrics_listen: Option<String>,
        /// Directory of the engine's state; one engine at a time holds it.
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// SQL file run at start (repeatable, in order).
        #[arg(long)]
        init: Vec<PathBuf>,
        /// TOML settings file: `listen`, `metrics_listen`, `state_dir`, `init`,
        /// `checkpoint_interval`, `state_snapshot_min_changes`, `changelog_memory_budget`,
        /// `auth`, `[[users]]` (`name`, `password`, `method`, `role`), `tls_cert`, `tls_key`,
        /// `tls_required`, `max_connections`, `idle_session_timeout_ms`,
        /// `statement_timeout_ms`, `query_memory_limit`, `max_result_size`, `max_statement_size`,
        /// `shutdown_grace_ms`, `auth_failure_delay_ms`, `allowed_locations` (docs/operations.md)
        #[arg(long)]
        config: Option<PathBuf>,
        /// Time between checkpoints of each source (`500ms`, `10s`, `1m`) [default: 10s]
        #[arg(long)]
        checkpoint_interval: Option<String>,
        /// Changes since a table's last state snapshot before its rows are written again (at
        /// least a quarter of its rows) [default: 100000]
        #[arg(long)]
        state_snapshot_min_changes: Option<u64>,
        /// Memory for each source's changelog entries (`512MiB`, `2GiB`; `0`: no limit); older
        /// entries are read back from the state directory [default: 256MiB]
        #[arg(long)]
        changelog_memory_budget: Option<String>,
        /// Exit (non-zero) when an init statement fails or an init source stops before its
        /// first consistent state, instead of serving it as failed.
        #[arg(long)]
        fail_fast: bool,
    },
    /// Print the sources, tables and sinks of a running engine and their lag, read over the
    /// PostgreSQL protocol (password from PGPASSWORD).
    Status {
        /// The engine's PostgreSQL front end.
        #[arg(long, default_value = "postgresql://127.0.0.1:5433/postgres")]
        url: String,
        /// Print again every `--interval` until Ctrl-C.
        #[arg(long)]
        watch: bool,
        /// PEM file of the CA (or certificate) the server's certificate must chain to; without
        /// it, TLS (`sslmode=prefer` or `require` in the URL) encrypts without verifying the
        /// server, as libpq does.
        #[arg(long)]
        ssl_root_cert: Option<PathBuf>,
        /// Time between prints with `--watch` (`500ms`, `2s`).
        #[arg(long, value_parser = parse_duration, default_value = "2s")]
        interval: Duration,
    },
    /// Print the change stream of a MySQL/MariaDB server.
    Capture {
        /// `mysql://user:password@host:port`
        #[arg(long)]
        url: String,
        /// Replica server id to register with (unique among the server's replicas).
        #[arg(long, default_value_t = cdcfusion::source::binlog::DEFAULT_SERVER_ID)]
        server_id: u32,
        /// `current`, `file:offset`, or a GTID set (`0-1-30` or `uuid:1-5`).
        #[arg(long, default_value = "current")]
        start: String,
        /// Tables to capture: comma-separated `db.table` patterns with `*` wildcards.
        #[arg(long, default_value = "*.*")]
        tables: String,
        /// Stop after this many transactions.
        #[arg(long)]
        limit: Option<usize>,
    },
}

/// mimalloc: the hand-off allocates many small rows, where it is about twice as fast as the
/// system allocator (`benches/snapshot.rs`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<()> {
    cdcfusion::allocator::tune();
    // Progress bars (drawn on a terminal only) share stderr with the log: each log line is
    // written with the bars lifted, so neither tears the other.
    let bars = indicatif::MultiProgress::new();
    let log_bars = bars.clone();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "cdcfusion=info".into()),
        )
        .with_writer(move || BelowBars(log_bars.clone()))
        .init();
    match Cli::parse().command {
        Command::Demo {
            listen,
            duration,
            seed,
        } => {
            let listen = listen
                .parse()
                .with_context(|| format!("--listen {listen:?}: expected host:port"))?;
            demo(listen, duration, seed).await
        }
        Command::Serve {
            listen,
            metrics_listen,
            state_dir,
            init,
            config,
            checkpoint_interval,
            state_snapshot_min_changes,
            changelog_memory_budget,
            fail_fast,
        } => {
            let flags = FlagSettings {
                listen,
                metrics_listen,
                state_dir,
                init,
                config,
                checkpoint_interval,
                state_snapshot_min_changes,
                changelog_memory_budget,
            };
            serve(
                Settings::resolve(flags, |k| std::env::var(k).ok())?,
                fail_fast,
                bars,
            )
            .await
        }
        Command::Status {
            url,
            watch,
            ssl_root_cert,
            interval,
        } => status(&url, ssl_root_cert.as_deref(), watch, interval).await,
        Command::Capture {
            url,
            server_id,
            start,
            tables,
            limit,
        } => {
            let start: StartPosition = start.parse()?;
            let connect = ConnectOptions::from_url(&url)?;
            let options =
                BinlogReaderOptions::new(server_id, start).with_filter(table_filter(&tables)?);
            let mut reader = BinlogReader::open(connect, options).await?;
            let mut seen = 0;
            loop {
                tokio::select! {
                    tx = reader.next() => print_transaction(&tx?)?,
                    _ = tokio::signal::ctrl_c() => break,
                }
                seen += 1;
                if limit.is_some_and(|l| seen >= l) {
                    break;
                }
            }
            Ok(())
        }
    }
}

/// Holds a state directory for one engine: an advisory lock on `cdcfusion.lock`, which the
/// kernel releases when the process dies however it dies, so a killed engine never blocks the
/// next one. The file holds the owner's pid for the error message and is removed on a clean
/// stop.
struct StateLock {
    path: PathBuf,
    _file: std::fs::File,
}

impl StateLock {
    fn acquire(dir: &std::path::Path) -> Result<Self> {
        use std::io::Write;
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating state directory {}", dir.display()))?;
        let path = dir.join("cdcfusion.lock");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let pid = std::fs::read_to_string(&path).unwrap_or_default();
                anyhow::bail!(
                    "state directory {} is in use by process {}",
                    dir.display(),
                    pid.trim()
                )
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()))
            }
        }
        file.set_len(0)?;
        writeln!(file, "{}", std::process::id())?;
        Ok(Self { path, _file: file })
    }
}

impl Drop for StateLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn serve(settings: Settings, fail_fast: bool, bars: indicatif::MultiProgress) -> Result<()> {
    let _lock = match &settings.state_dir {
        Some(dir) => Some(StateLock::acquire(dir)?),
        None => None,
    };
    let engine = match &settings.state_dir {
        Some(dir) => {
            let options = EngineOptions {
                durable: DurableOptions {
                    checkpoint_interval: settings.checkpoint_interval,
                    state_snapshot_min_changes: settings.state_snapshot_min_changes,
                    changelog_memory_budget: settings.changelog_memory_budget,
                },
                allowed_locations: settings.allowed_locations.clone(),
                ..Default::default()
            };
            let location = dir.to_str().context("the state directory is not UTF-8")?;
            Engine::open(location, options)
                .await
                .with_context(|| format!("opening the state in {}", dir.display()))?
        }
        None => Engine::new().with_allowed_locations(settings.allowed_locations.clone()),
    };
    let engine = Arc::new(engine);
    // The front end is up before any init source is ready, so cdc.sources can be watched from
    // the first second; the init files run beside it.
    let server = Server::bind(
        Arc::clone(&engine),
        settings.listen,
        settings.frontend.clone(),
    )
    .await?;
    tracing::info!(
        listen = %server.local_addr(),
        tls = settings.frontend.tls.is_some(),
        "engine running; the PostgreSQL front end is listening"
    );
    if server.nobody_can_log_in() {
        tracing::warn!(
            "no user can log in yet: set CDCFUSION_USER and CDCFUSION_PASSWORD (an admin), or add \
             [[users]] with name, password and role = \"admin\" to the settings file (--config), \
             then restart; auth = \"trust\" lets anyone in without a password (local tests only)"
        );
    }
    let init_gate = InitGate::pending();
    let _metrics = match settings.metrics_listen {
        Some(addr) => {
            let metrics = MetricsServer::bind(
                Arc::clone(&engine),
                Some(server.stats()),
                init_gate.clone(),
                addr,
            )
            .await
            .with_context(|| format!("--metrics-listen {addr}"))?;
            tracing::info!(
                listen = %metrics.local_addr(),
                "metrics endpoint at /metrics, probes at /health and /ready"
            );
            Some(metrics)
        }
        None => None,
    };
    let init = run_init(Arc::clone(&engine), settings.init.clone(), fail_fast);
    // On a terminal, progress bars; elsewhere (a service's log), a plain line now and then.
    let status = async {
        if std::io::stderr().is_terminal() {
            console::show_progress(Arc::clone(&engine), bars).await;
            Ok(())
        } else {
            log_status(Arc::clone(&engine)).await
        }
    };
    let init = async {
        init.await?;
        init_gate.finish();
        // Done: keep serving.
        std::future::pending::<Result<()>>().await
    };
    tokio::select! {
        () = server.run(stop_signal()) => {}
        result = status => result?,
        result = init => result?,
    }
    engine.shutdown().await?;
    tracing::info!("stopped");
    Ok(())
}

/// Runs the init files in order. A failing statement is logged and the next one runs; a
/// source that stops before its first consistent state is shown failed in `cdc.sources`
/// (`CREATE SOURCE` here does not wait for the server: a source whose server is down is
/// created and shows why it cannot start). With `fail_fast` either is an error.
async fn run_init(engine: Arc<Engine>, files: Vec<PathBuf>, fail_fast: bool) -> Result<()> {
    let mut created = engine.source_names();
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let statements =
            split_statements(&text).with_context(|| format!("in {}", file.display()))?;
        for statement in &statements {
            // Users live in the front end, not in the engine init files run in; the text of a
            // user statement may hold a password, so it is never shown.
            let of_users = !matches!(parse_user_statement(statement), Ok(None));
            let result = match parse_cdc_statement(statement) {
                _ if of_users => Err(EngineError::NotSupported(
                    "a user statement in an --init file (give start-up users in [[users]])",
                )),
                Ok(Some(CdcStatement::CreateSource(mut c))) => {
                    created.push(c.name.clone());
                    c.options.validate = false;
                    engine.run_statement(CdcStatement::CreateSource(c)).await
                }
                _ => match engine.sql(statement).await {
                    Ok(df) => df.collect().await.map(drop).map_err(Into::into),
                    Err(e) => Err(e),
                },
            };
            if let Err(e) = result {
                let statement = match of_users {
                    true => "(a user statement, not shown)",
                    false => statement.as_str(),
                };
                if fail_fast {
                    return Err(e).with_context(|| format!("in {}: {statement}", file.display()));
                }
                tracing::error!(file = %file.display(), %statement, error = %e, "init statement failed");
            }
        }
        tracing::info!(file = %file.display(), statements = statements.len(), "init file run");
    }
    created.sort();
    created.dedup();
    for name in &created {
        let Ok(source) = engine.source(name) else {
            continue;
        };
        if let Err(e) = source.wait_ready().await {
            if fail_fast {
                anyhow::bail!("source {name} stopped: {e}");
            }
            // A source that fails (a purged binlog, a damaged checkpoint, a server that is
            // down) says why in cdc.sources and waits for repair; the others keep running.
            tracing::error!(source = %name, error = %e, "source stopped");
            continue;
        }
        let position = source.published.load().position.clone();
        tracing::info!(source = %name, position = ?position.map(|p| p.to_string()), "source ready");
    }
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn stop_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("stopping");
}

/// A log line written below the progress bars (see `main`).
struct BelowBars(indicatif::MultiProgress);

impl std::io::Write for BelowBars {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.suspend(|| std::io::stderr().write(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// `cdcfusion status`: the engine's status tables, once or every `interval`.
async fn status(
    url: &str,
    root_cert: Option<&std::path::Path>,
    watch: bool,
    interval: Duration,
) -> Result<()> {
    let client = cdcfusion::frontend::status_client::connect(url, root_cert).await?;
    loop {
        // Fit a terminal; a pipe gets whole rows.
        let width = ::console::Term::stdout()
            .size_checked()
            .map(|(_, columns)| columns);
        let text = console::render(&console::read_status(&client).await?, width);
        if watch {
            // Clear the screen and print from its top.
            print!("\x1b[2J\x1b[H");
        }
        print!("{text}");
        if !watch {
            return Ok(());
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// Logs the sources' status every ten seconds (never returns unless a query fails).
async fn log_status(engine: Arc<Engine>) -> Result<()> {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let status = engine
            .sql("SELECT name, phase, position, lag_seconds, error FROM cdc.sources")
            .await?
            .collect()
            .await?;
        for batch in status {
            tracing::info!("{}", arrow::util::pretty::pretty_format_batches(&[batch])?);
        }
    }
}

fn print_transaction(tx: &SourceTransaction) -> Result<()> {
    let gtid = tx
        .gtid
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_else(|| "-".into());
    for ddl in &tx.ddl {
        println!(
            "-- DDL in {} (gtid {gtid}, at {}): {}",
            ddl.db, tx.start, ddl.statement
        );
    }
    for (table, batch) in transaction_batches(tx, 0)? {
        let batch = display_columns(&batch)?;
        println!(
            "-- {table}: {} change(s), gtid {gtid}, transaction at {}",
            batch.num_rows(),
            tx.start
        );
        println!("{}", arrow::util::pretty::pretty_format_batches(&[batch])?);
    }
    Ok(())
}

/// The demo's sample schema.
const SHOP_SCHEMA: &[&str] = &[
    "CREATE DATABASE shop",
    "CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, email VARCHAR(128), tier ENUM('basic','gold','platinum') NOT NULL DEFAULT 'basic')",
    "CREATE TABLE shop.orders (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL, amount DECIMAL(12,2) NOT NULL, status VARCHAR(16) NOT NULL, created_at DATETIME(6) NOT NULL, paid_at TIMESTAMP(3) NULL)",
];

/// The demo's user of the PostgreSQL front end.
const DEMO_USER: &str = "demo";
const DEMO_PASSWORD: &str = "demo";

async fn demo(listen: SocketAddr, duration: Option<Duration>, seed: u64) -> Result<()> {
    eprintln!("starting a private MariaDB with binlog enabled...");
    let server = tokio::task::spawn_blocking(|| DevServer::start(DevServerOptions::default()))
        .await?
        .context("starting the private MariaDB")?;
    eprintln!(
        "MariaDB is listening on 127.0.0.1:{} (capture user: {})",
        server.port(),
        server.cdc_url()
    );
    let result = run_demo(&server, listen, duration, seed).await;
    drop(server);
    eprintln!("stopped the private MariaDB");
    result
}

async fn run_demo(
    server: &DevServer,
    listen: SocketAddr,
    duration: Option<Duration>,
    seed: u64,
) -> Result<()> {
    let mut admin = mysql_async::Conn::from_url(server.root_url()).await?;
    for stmt in SHOP_SCHEMA {
        admin.query_drop(*stmt).await?;
    }
    seed_rows(&mut admin).await?;
    let engine = Arc::new(Engine::new());
    let create = format!(
        "CREATE SOURCE shop FROM MYSQL '{}' WITH (tables = 'shop.*', chunk_size = 16)",
        server.cdc_url()
    );
    engine.sql(&create).await?.collect().await?;
    eprintln!("snapshotting shop.* in chunks of 16 rows, then streaming...");
    engine.wait_ready("shop").await?;
    let frontend = FrontendSettings {
        users: vec![UserSettings {
            name: DEMO_USER.into(),
            password: DEMO_PASSWORD.into(),
            method: None,
            role: Some(Role::Admin),
        }],
        ..FrontendSettings::default()
    };
    let pg = Server::bind(Arc::clone(&engine), listen, frontend).await?;
    let addr = pg.local_addr();
    println!(
        "\ncdcfusion serves the captured `shop` schema over the PostgreSQL protocol. Connect with:\n\n    \
         PGPASSWORD={DEMO_PASSWORD} psql -h {} -p {} -U {DEMO_USER} shop\n\n\
         and try:\n    \
         \\dt shop.*\n    \
         SELECT * FROM shop.orders ORDER BY id DESC LIMIT 5;\n    \
         SELECT _op, _position, id, status FROM shop.\"orders$changelog\" ORDER BY _position DESC LIMIT 10;\n    \
         SELECT name, phase, position, lag_seconds FROM cdc.sources;\n\n\
         A writer changes the orders a few times a second. Ctrl-C stops everything.\n",
        addr.ip(),
        addr.port()
    );
    let writer = tokio::spawn(write_workload(server.root_url(), seed));
    let stop = async {
        match duration {
            Some(d) => tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = tokio::signal::ctrl_c() => {}
            },
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    pg.run(stop).await;
    writer.abort();
    let status = engine
        .sql("SELECT name, phase, position FROM cdc.sources")
        .await?
        .collect()
        .await?;
    eprintln!("{}", arrow::util::pretty::pretty_format_batches(&status)?);
    Ok(())
}

/// Rows present before capture starts, so the demo shows snapshot reads.
async fn seed_rows(conn: &mut mysql_async::Conn) -> Result<()> {
    let names = [
        "Ada", "Grace", "Linus", "Barbara", "Edsger", "Frances", "Ken", "Radia",
    ];
    let tiers = ["basic", "gold", "platinum"];
    for (i, name) in names.iter().enumerate() {
        conn.exec_drop(
            "INSERT INTO shop.customers VALUES (?, ?, ?, ?)",
            (
                i as i32 + 1,
                *name,
                format!("{}@example.com", name.to_lowercase()),
                tiers[i % 3],
            ),
        )
        .await?;
    }
    conn.query_drop(
        "INSERT INTO shop.orders (customer_id, amount, status, created_at)
         SELECT 1 + seq % 8, seq * 3.25, 'new', '2026-01-01' + INTERVAL seq HOUR FROM shop.seq_1_to_40",
    )
    .await?;
    Ok(())
}

/// A small random workload on the sample schema, until the task is aborted.
async fn write_workload(url: String, seed: u64) -> Result<()> {
    let mut conn = mysql_async::Conn::from_url(url).await?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let customers = 8;
    let tiers = ["basic", "gold", "platinum"];
    loop {
        let customer = rng.random_range(1..=customers);
        let mut tx = conn.start_transaction(Default::default()).await?;
        match rng.random_range(0..10) {
            0..=4 => {
                tx.exec_drop(
                    "INSERT INTO shop.orders (customer_id, amount, status, created_at) VALUES (?, ?, 'new', NOW(6))",
                    (customer, format!("{}.{:02}", rng.random_range(1..500), rng.random_range(0..100))),
                )
                .await?;
            }
            5..=7 => {
                tx.exec_drop(
                    "UPDATE shop.orders SET status = 'paid', paid_at = NOW(3) WHERE status = 'new' AND customer_id = ? LIMIT 1",
                    (customer,),
                )
                .await?;
                tx.exec_drop(
                    "UPDATE shop.customers SET tier = ? WHERE id = ?",
                    (tiers[rng.random_range(0..3)], customer),
                )
                .await?;
            }
            _ => {
                tx.exec_drop(
                    "DELETE FROM shop.orders WHERE status = 'paid' ORDER BY id LIMIT 1",
                    (),
                )
                .await?;
            }
        }
        tx.commit().await?;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}
