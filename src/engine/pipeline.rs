//! `CREATE SINK`, `DROP SINK`, `ALTER SINK` and `EXPLAIN CREATE SINK`: planning a sink's
//! query, committing it to the catalog, and starting its runner.
//!
//! # Invariant
//! A sink runs only if the catalog naming it is committed (on a durable engine), and its
//! target has been opened once before `CREATE SINK` answers, so a wrong URL, an unreachable
//! target or a query a sink cannot maintain is the statement's error, not a failure found
//! later. A source cannot be dropped while a sink reads it. Sinks restored at start-up plan
//! their query once their source has published its first version (its tables are known only
//! then).

use std::sync::{Arc, Mutex};

use arrow::array::{RecordBatch, StringArray};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::DataFrame;
use futures::FutureExt;
use tokio::sync::watch;

use super::error::EngineError;
use super::session::Engine;
use super::sink_plan::{plan_query, target_of};
use super::sinks::RunningSink;
use super::source::RunningSource;
use crate::change::position::ChangePosition;
use crate::durable::manifest::commit_catalog;
use crate::durable::{CatalogSink, DurableError};
use crate::locks::{Locked, RwLocked};
use crate::sinks::{
    layout_of, Replan, SinkError, SinkInput, SinkQuery, SinkRunner, SinkState, SinkStatus, StartAt,
    Target, TargetSpec,
};
use crate::sql::{parse_cdc_statement, CdcStatement, CreateSink};
use crate::sqlstate::HasSqlState;

impl Engine {
    fn sink_error(name: &str) -> impl Fn(SinkError) -> EngineError + '_ {
        move |source| EngineError::Sink {
            name: name.to_string(),
            source,
        }
    }

    /// `CREATE SINK`: see the module docs.
    pub(super) async fn create_sink(&self, create: &CreateSink) -> Result<(), EngineError> {
        let err = Self::sink_error(&create.name);
        self.check_sink_name(&create.name)?;
        if let TargetSpec::Parquet { url } | TargetSpec::Delta { url } = &create.target {
            self.check_location("CREATE SINK", url)?;
        }
        let query = match plan_query(&self.ctx.state(), create).await {
            Ok(q) => q,
            // A source created just before (an init file) lists its tables once it has
            // connected: wait for that, then plan again.
            Err(_) if self.wait_for_table_lists().await => {
                plan_query(&self.ctx.state(), create).await.map_err(&err)?
            }
            Err(e) => return Err(err(e)),
        };
        let source = self.source(&query.source)?;
        let mut create = create.clone();
        if create.options.start == StartAt::Now {
            // Resolved now when the source has a position, so a restart before the first
            // commit starts at the same place.
            let version = source.published.load_full();
            if let (true, Some(position)) = (version.consistent, version.position.as_ref()) {
                create.options.start = StartAt::After(ChangePosition::text_after_version(position));
            }
        }
        let mut target = target_of(&create.target).map_err(&err)?;
        target
            .open(&layout_of(&create.name, &query))
            .await
            .map_err(&err)?;
        if let Some(durable) = &self.durable {
            let mut catalog = durable.catalog.lock().await;
            self.check_sink_name(&create.name)?;
            let mut next = catalog.clone();
            next.seq += 1;
            next.sinks.push(CatalogSink {
                name: create.name.clone(),
                source: query.source.clone(),
                statement: create.to_sql_with_password(),
                paused: false,
            });
            commit_catalog(&durable.store, &next)
                .await
                .map_err(DurableError::from)?;
            *catalog = next;
        }
        self.start_sink(create, &source, Some((query, target)), false);
        Ok(())
    }

    /// Waits (up to the validation timeout) until every source that has not failed knows
    /// its tables; true when some source did not know them at first.
    async fn wait_for_table_lists(&self) -> bool {
        let unknown = || {
            self.running_sources()
                .into_iter()
                .filter(|s| s.status().tables.is_empty() && s.health.source_fault().is_none())
                .count()
        };
        if unknown() == 0 {
            return false;
        }
        let deadline = tokio::time::Instant::now() + super::durable::VALIDATE_TIMEOUT;
        while unknown() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        true
    }

    fn check_sink_name(&self, name: &str) -> Result<(), EngineError> {
        if name.is_empty() {
            return Err(EngineError::BadName(name.to_string(), "empty"));
        }
        if self.sinks.read_locked().contains_key(name) {
            return Err(EngineError::SinkExists(name.to_string()));
        }
        Ok(())
    }

    /// Starts the runner of `create` over `source`: with its query and opened target, or
    /// (restored from the catalog) planning them once the source is ready.
    pub(super) fn start_sink(
        &self,
        create: CreateSink,
        source: &Arc<RunningSource>,
        planned: Option<(SinkQuery, Box<dyn Target>)>,
        paused: bool,
    ) {
        let status = Arc::new(Mutex::new(SinkStatus::default()));
        // From now until it is dropped, the sink holds the history it has not committed.
        source.retention().hold(&create.name, &status);
        let (paused_tx, paused_rx) = watch::channel(paused);
        let state = self.ctx.state();
        let input = SinkInput {
            published: Arc::clone(&source.published),
            versions: source.versions.clone(),
        };
        let replan: Replan = {
            let state = state.clone();
            let create = create.clone();
            Arc::new(move || {
                let state = state.clone();
                let create = create.clone();
                async move { plan_query(&state, &create).await }.boxed()
            })
        };
        let name = create.name.clone();
        let task_status = Arc::clone(&status);
        let source_handle = Arc::clone(source);
        let options = create.options.clone();
        let target_spec = create.target.clone();
        let task = tokio::spawn(async move {
            let planned = match planned {
                Some(p) => Ok(p),
                None => {
                    let ready = source_handle.wait_ready().await;
                    match ready {
                        Err(message) => Err(SinkError::Input(format!(
                            "source {} failed: {message}",
                            source_handle.name
                        ))),
                        Ok(()) => match (replan)().await {
                            Ok(q) => target_of(&target_spec).map(|t| (q, t)),
                            Err(e) => Err(e),
                        },
                    }
                }
            };
            let (query, target) = match planned {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(sink = %name, error = %e, "sink cannot start");
                    let mut s = task_status.locked();
                    s.state = SinkState::Failed;
                    s.sqlstate = Some(e.sqlstate());
                    s.error = Some(e.to_string());
                    return;
                }
            };
            let runner = SinkRunner {
                name,
                query,
                target,
                options,
                input,
                status: task_status,
                paused: paused_rx,
                state,
                replan,
            };
            runner.run().await;
        });
        let running = RunningSink {
            name: create.name.clone(),
            source: source.name.clone(),
            target: create.target_sql(),
            statement: create,
            status,
            paused: paused_tx,
            task,
        };
        self.sinks
            .write_locked()
            .insert(running.name.clone(), Arc::new(running));
    }

    /// `DROP SINK`: the catalog is committed without it, then its runner stops. What it
    /// wrote stays in the target.
    pub(super) async fn drop_sink(&self, name: &str) -> Result<(), EngineError> {
        if let Some(durable) = &self.durable {
            let mut catalog = durable.catalog.lock().await;
            if !catalog.sinks.iter().any(|s| s.name == name) {
                return Err(EngineError::NoSuchSink(name.to_string()));
            }
            let mut next = catalog.clone();
            next.seq += 1;
            next.sinks.retain(|s| s.name != name);
            commit_catalog(&durable.store, &next)
                .await
                .map_err(DurableError::from)?;
            *catalog = next;
        }
        self.sinks
            .write_locked()
            .remove(name)
            .map(drop)
            .ok_or_else(|| EngineError::NoSuchSink(name.to_string()))
    }

    /// `ALTER SINK ... PAUSE | RESUME` (kept in the catalog, so it holds across restarts).
    pub(super) async fn alter_sink(&self, name: &str, pause: bool) -> Result<(), EngineError> {
        let sink = self
            .sinks
            .read_locked()
            .get(name)
            .cloned()
            .ok_or_else(|| EngineError::NoSuchSink(name.to_string()))?;
        if let Some(durable) = &self.durable {
            let mut catalog = durable.catalog.lock().await;
            let mut next = catalog.clone();
            next.seq += 1;
            for s in next.sinks.iter_mut().filter(|s| s.name == name) {
                s.paused = pause;
            }
            commit_catalog(&durable.store, &next)
                .await
                .map_err(DurableError::from)?;
            *catalog = next;
        }
        sink.paused.send_replace(pause);
        Ok(())
    }

    /// `EXPLAIN CREATE SINK`: what the sink would read, how it keys, and its plan.
    pub(super) async fn explain_sink(&self, create: &CreateSink) -> Result<DataFrame, EngineError> {
        let query = plan_query(&self.ctx.state(), create)
            .await
            .map_err(Self::sink_error(&create.name))?;
        let mut tables: Vec<String> = Vec::new();
        query
            .plan
            .apply(|node| {
                if let LogicalPlan::TableScan(scan) = node {
                    tables.push(scan.table_name.to_string());
                }
                Ok(TreeNodeRecursion::Continue)
            })
            .map_err(EngineError::DataFusion)?;
        let sink = format!(
            "source: {}\nreads: {}\nmode: {}\nkey: {}\ntarget: {}",
            query.source,
            tables.join(", "),
            query.mode.name(),
            if query.key.is_empty() {
                "(none: every change is appended)".to_string()
            } else {
                query.key.join(", ")
            },
            create.target_sql(),
        );
        let batch = RecordBatch::try_from_iter(vec![
            (
                "plan_type",
                Arc::new(StringArray::from(vec!["sink", "logical_plan"])) as _,
            ),
            (
                "plan",
                Arc::new(StringArray::from(vec![
                    sink,
                    query.plan.display_indent().to_string(),
                ])) as _,
            ),
        ])
        .map_err(DataFusionError::from)?;
        Ok(self.ctx.read_batch(batch)?)
    }

    /// Starts the sinks of a catalog being opened (see [`Engine::open`]).
    pub(super) fn restore_sinks(&self, sinks: &[CatalogSink]) -> Result<(), EngineError> {
        for entry in sinks {
            let Some(CdcStatement::CreateSink(create)) = parse_cdc_statement(&entry.statement)?
            else {
                return Err(EngineError::NotSupported(
                    "a catalog sink entry that is not CREATE SINK",
                ));
            };
            let source = self.source(&entry.source)?;
            self.start_sink(create, &source, None, entry.paused);
            tracing::info!(sink = %entry.name, "sink restored from the catalog");
        }
        Ok(())
    }

    /// Names of the sinks reading `source`.
    pub(super) fn sinks_reading(&self, source: &str) -> Vec<String> {
        self.sinks
            .read_locked()
            .values()
            .filter(|s| s.source == source)
            .map(|s| s.name.clone())
            .collect()
    }
}
