//! Runs the `.slt` files under `sql/` against an engine capturing a private MariaDB.
//!
//! Conventions of the files (see each file's header): a statement starting with `MYSQL ` runs
//! on the MariaDB server as root instead of on cdcfusion; every other statement or query runs on
//! the engine after every source has caught up with the server, so results are deterministic.
//! `$CDC_URL` is the CDC user's URL and `$SERVER_ID` a replica id unique to the file; `$LAKE`
//! is a directory of the file's own that sinks may write to (the engine's allowed location).
//! A `CREATE SOURCE` waits until the source's snapshot is consistent.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::util::display::{ArrayFormatter, FormatOptions};
use cdcfusion::change::schema::Flavor;
use cdcfusion::devserver::DevServer;
use cdcfusion::engine::{AllowedLocations, Engine, EngineError};
use cdcfusion::source::connect::current_position;
use cdcfusion::sql::{parse_cdc_statement, CdcStatement};
use mysql_async::prelude::Queryable;
use sqllogictest::{DBOutput, DefaultColumnType};

/// How long a source may take to catch up before the file fails.
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
enum SltError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    DataFusion(#[from] datafusion::error::DataFusionError),
    #[error(transparent)]
    Mysql(#[from] mysql_async::Error),
    #[error("{0}")]
    Other(String),
}

struct SltDb {
    engine: Arc<Engine>,
    mysql: mysql_async::Conn,
    sources: Vec<String>,
}

impl SltDb {
    /// Waits until every source has applied everything the server has committed.
    async fn catch_up(&mut self) -> Result<(), SltError> {
        let (target, _) = current_position(&mut self.mysql, Flavor::MariaDb)
            .await
            .map_err(|e| SltError::Other(e.to_string()))?;
        for name in &self.sources {
            let Ok(source) = self.engine.source(name) else {
                continue;
            };
            tokio::time::timeout(CATCH_UP, source.wait_for(&target))
                .await
                .map_err(|_| SltError::Other(format!("source {name} did not catch up")))?
                .map_err(SltError::Other)?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl sqllogictest::AsyncDB for SltDb {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        if let Some(mysql) = sql.trim_start().strip_prefix("MYSQL ") {
            self.mysql.query_drop(mysql).await?;
            return Ok(DBOutput::StatementComplete(0));
        }
        self.catch_up().await?;
        let created = match parse_cdc_statement(sql) {
            Ok(Some(CdcStatement::CreateSource(c))) => Some(c.name),
            _ => None,
        };
        let batches = self.engine.sql(sql).await?.collect().await?;
        if let Some(name) = created {
            self.engine.wait_ready(&name).await?;
            self.sources.push(name);
        }
        if batches.iter().all(|b| b.num_columns() == 0) {
            return Ok(DBOutput::StatementComplete(0));
        }
        let options = FormatOptions::default().with_null("NULL");
        let mut rows = Vec::new();
        let mut width = 0;
        for batch in &batches {
            width = batch.num_columns();
            let formatters: Vec<_> = batch
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
                .collect::<Result<_, _>>()
                .map_err(datafusion::error::DataFusionError::from)?;
            for r in 0..batch.num_rows() {
                rows.push(formatters.iter().map(|f| f.value(r).to_string()).collect());
            }
        }
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; width],
            rows,
        })
    }

    async fn shutdown(&mut self) {}

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await;
    }
}

#[tokio::main]
async fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sql");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("sql/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    let server = DevServer::shared();
    let (mut passed, mut failed) = (0, 0);
    for (i, file) in files.iter().enumerate() {
        let url = server.root_url();
        let lake = tempfile::tempdir().expect("a directory for the file's sinks");
        let allowed = AllowedLocations::parse(&[format!("file://{}/", lake.path().display())])
            .expect("a local directory is an allowed location");
        let mut runner = sqllogictest::Runner::new(move || {
            let url = url.clone();
            let allowed = allowed.clone();
            async move {
                Ok::<_, SltError>(SltDb {
                    engine: Arc::new(Engine::new().with_allowed_locations(allowed)),
                    mysql: mysql_async::Conn::from_url(url).await?,
                    sources: Vec::new(),
                })
            }
        });
        runner.set_var("CDC_URL".into(), server.cdc_url());
        runner.set_var("SERVER_ID".into(), (7000 + 10 * i).to_string());
        runner.set_var("LAKE".into(), format!("file://{}", lake.path().display()));
        match runner.run_file_async(file).await {
            Ok(()) => {
                println!("ok   {}", file.display());
                passed += 1;
            }
            Err(e) => {
                println!("FAIL {}\n{e}", file.display());
                failed += 1;
            }
        }
    }
    println!("sqllogictest: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
