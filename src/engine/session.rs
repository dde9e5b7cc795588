//! The engine: a DataFusion session plus the sources it captures.
//!
//! Each source is a DataFusion catalog named after it; each captured MySQL database is a schema
//! of that catalog, holding `table` (the current table) and `table$changelog` (its changelog).
//! The `cdc` schema (`cdc.sources`, `cdc.tables`, `cdc.chunks`) is present in every catalog, so
//! status is reachable whatever the session's default catalog is.
//!
//! [`Engine::sql`] pins one published version of every source before planning, so a query
//! reads every table of a source at the same binlog position and never half a transaction.
//!
//! [`Engine::new`] keeps everything in memory. [`Engine::open`] keeps the catalog and every
//! source's checkpoints in a state store (`crate::durable`): `CREATE`/`DROP SOURCE` commit the
//! catalog before they take effect, and opening the same store again resumes every source from
//! its newest checkpoint.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use datafusion::catalog::MemoryCatalogProviderList;
use datafusion::error::DataFusionError;
use datafusion::execution::context::SessionContext;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{DataFrame, SessionConfig};
use datafusion::sql::parser::Statement as DFStatement;

use arrow::array::{ArrayRef, RecordBatch, StringArray};

use super::catalog::EngineCatalogs;
use super::error::{parser_error, EngineError};
use super::files::{AllowedLocations, FileAccessDenied};
use super::functions;
use super::limits;
use super::reuse::{CatalogGeneration, KeptPlan};
use super::sinks::{RunningSink, Sinks};
use super::source::{RunningSource, Sources};
use super::status::{CdcSchema, STATUS_SCHEMA};
use crate::capture::CaptureOptions;
use crate::durable::{Checkpointer, Durability, DurableOptions, StoreOptions};
use crate::locks::{Locked, RwLocked};
use crate::provider::pin;
use crate::provider::reconcile::ReconcileLog;
use crate::sql::{parse_cdc_statement, AlterSourceAction, CdcStatement};

/// How a durable engine stores its state.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    pub durable: DurableOptions,
    /// Options of a remote store (see [`crate::durable::store::Store::open`]).
    pub store: StoreOptions,
    /// Where SQL may read and write files (see [`Engine::with_allowed_locations`]).
    pub allowed_locations: AllowedLocations,
}

/// See the module docs.
pub struct Engine {
    pub(super) ctx: SessionContext,
    pub(super) sources: Arc<Sources>,
    pub(super) sinks: Arc<Sinks>,
    pub(super) durable: Option<Arc<Durability>>,
    pub(super) allowed: AllowedLocations,
    /// Counts the changes of what names resolve to (see `reuse`).
    pub(super) generation: AtomicU64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field(
                "sources",
                &self.sources.read_locked().keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

impl Engine {
    /// An engine that keeps everything in memory.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// Every running source, taken out of the lock.
    pub(super) fn running_sources(&self) -> Vec<Arc<RunningSource>> {
        self.sources.read_locked().values().cloned().collect()
    }

    /// Names of the sources.
    pub fn source_names(&self) -> Vec<String> {
        self.sources.read_locked().keys().cloned().collect()
    }

    pub(super) fn build(durable: Option<Arc<Durability>>) -> Self {
        // Unbounded changelog scans must emit rows as they come: operators that coalesce small
        // batches, and round-robin repartitioning (which splits a quiet stream's rows over
        // partitions that each wait for more), would hold them back.
        let config = SessionConfig::new()
            .with_information_schema(true)
            .with_coalesce_batches(false)
            .with_round_robin_repartition(false);
        let sources: Arc<Sources> = Arc::new(RwLock::new(BTreeMap::new()));
        let sinks: Arc<Sinks> = Arc::new(RwLock::new(BTreeMap::new()));
        let reconciliations: ReconcileLog = Arc::default();
        let catalogs = Arc::new(EngineCatalogs {
            others: MemoryCatalogProviderList::new(),
            sources: Arc::downgrade(&sources),
            sinks: Arc::downgrade(&sinks),
            reconciliations: Arc::clone(&reconciliations),
        });
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_catalog_list(catalogs)
            .build();
        let ctx = SessionContext::new_with_state(state);
        functions::register(&ctx, &sources, &sinks, &reconciliations);
        let default_catalog = default_catalog(&ctx);
        if let Some(catalog) = ctx.catalog(&default_catalog) {
            let _ = catalog.register_schema(
                STATUS_SCHEMA,
                Arc::new(CdcSchema::new(
                    Arc::downgrade(&sources),
                    Arc::downgrade(&sinks),
                    reconciliations,
                )),
            );
        }
        Self {
            ctx,
            sources,
            sinks,
            durable,
            allowed: AllowedLocations::default(),
            generation: AtomicU64::new(0),
        }
    }

    /// Lets SQL (`CREATE EXTERNAL TABLE`, `COPY ... TO`, `INSERT` into a listing table) read
    /// and write inside `locations`; by default it reaches no file or object store at all.
    pub fn with_allowed_locations(mut self, locations: AllowedLocations) -> Self {
        self.allowed = locations;
        self
    }

    /// Refuses `location` unless it lies inside the allowed locations; `statement` names
    /// what would reach it.
    pub fn check_location(
        &self,
        statement: &'static str,
        location: &str,
    ) -> Result<(), FileAccessDenied> {
        if self.allowed.allows(location) {
            Ok(())
        } else {
            Err(FileAccessDenied { statement })
        }
    }

    /// The underlying session (for registering more tables or functions).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Starts capturing `url` as source `name`; returns at once (see [`Engine::wait_ready`]).
    /// Only for in-memory engines: a durable engine's catalog stores sources as `CREATE
    /// SOURCE` statements, so create them with [`Engine::sql`].
    pub fn create_source(
        &self,
        name: &str,
        url: &str,
        options: CaptureOptions,
    ) -> Result<(), EngineError> {
        if self.durable.is_some() {
            return Err(EngineError::NotSupported(
                "create_source on a durable engine (use CREATE SOURCE)",
            ));
        }
        self.start_source(name, url, options, String::new(), None)
    }

    pub(super) fn check_name(&self, name: &str) -> Result<(), EngineError> {
        if name.is_empty() || name == STATUS_SCHEMA {
            return Err(EngineError::BadName(name.to_string(), "reserved or empty"));
        }
        if name == default_catalog(&self.ctx) {
            return Err(EngineError::BadName(
                name.to_string(),
                "it is the engine's default catalog",
            ));
        }
        if self.sources.read_locked().contains_key(name) {
            return Err(EngineError::SourceExists(name.to_string()));
        }
        Ok(())
    }

    pub(super) fn start_source(
        &self,
        name: &str,
        url: &str,
        options: CaptureOptions,
        definition: String,
        checkpointer: Option<Arc<Checkpointer>>,
    ) -> Result<(), EngineError> {
        self.check_name(name)?;
        let mut sources = self.sources.write_locked();
        if sources.contains_key(name) {
            return Err(EngineError::SourceExists(name.to_string()));
        }
        let source = Arc::new(RunningSource::start(
            name,
            url,
            definition,
            options,
            checkpointer,
        )?);
        sources.insert(name.to_string(), source);
        self.catalog_changed();
        Ok(())
    }

    /// Waits until source `name` has published its consistent state (or failed).
    pub async fn wait_ready(&self, name: &str) -> Result<(), EngineError> {
        let source = self.source(name)?;
        source
            .wait_ready()
            .await
            .map_err(|message| EngineError::SourceFailed {
                name: name.to_string(),
                message,
            })
    }

    /// Sink `name`, for its status without a query.
    pub fn sink(&self, name: &str) -> Result<Arc<RunningSink>, EngineError> {
        self.sinks
            .read_locked()
            .get(name)
            .cloned()
            .ok_or_else(|| EngineError::NoSuchSink(name.to_string()))
    }

    pub fn source(&self, name: &str) -> Result<Arc<RunningSource>, EngineError> {
        self.sources
            .read_locked()
            .get(name)
            .cloned()
            .ok_or_else(|| EngineError::NoSuchSource(name.to_string()))
    }

    /// Stops and removes source `name`.
    pub fn drop_source(&self, name: &str) -> Result<(), EngineError> {
        let removed = self.sources.write_locked().remove(name);
        match removed {
            Some(_) => {
                self.catalog_changed();
                Ok(())
            }
            None => Err(EngineError::NoSuchSource(name.to_string())),
        }
    }

    /// Runs one of cdcfusion's own statements (`CREATE SOURCE`, ...), or plans `sql` with
    /// every source's current version pinned.
    pub async fn sql(&self, sql: &str) -> Result<DataFrame, EngineError> {
        self.sql_with(sql, |state| state).await
    }

    /// [`Engine::sql`] for one client session: `session` adapts a copy of the engine's
    /// state before planning (default catalog, session functions, ...). Versions are pinned
    /// after it runs, so a session can never plan against an unpinned source.
    ///
    /// `name AS OF point` is written as the `as_of` table function first (`sql::as_of`).
    /// Every statement is measured before it is planned (`limits`: deeper than
    /// [`limits::MAX_DEPTH`] is [`EngineError::TooComplex`]) and checked for the storage it
    /// reaches, by its text and again by its plan, before it runs (`files`: outside the
    /// allowed locations is [`EngineError::FileAccess`]).
    pub async fn sql_with(
        &self,
        sql: &str,
        session: impl FnOnce(SessionState) -> SessionState,
    ) -> Result<DataFrame, EngineError> {
        if let Some(statement) = parse_cdc_statement(sql)? {
            return self.execute(statement).await;
        }
        let state = session(self.ctx.state());
        let rewritten = crate::sql::rewrite_as_of(sql);
        let sql = rewritten.as_deref().unwrap_or(sql);
        limits::check_nesting(sql)?;
        let dialect = state.config().options().sql_parser.dialect;
        let statement = state
            .sql_to_statement(sql, &dialect)
            .map_err(parser_error)?;
        self.plan(state, statement).await
    }

    /// Plans a statement already parsed (a client's, by the front end) in `state`, a
    /// session's copy of [`Engine::context`]'s state, with every source's current version
    /// pinned: measured, checked for the storage it reaches and planned as in
    /// [`Engine::sql_with`].
    pub async fn plan(
        &self,
        state: SessionState,
        statement: DFStatement,
    ) -> Result<DataFrame, EngineError> {
        Ok(self.plan_and_keep(state, statement).await?.0)
    }

    /// [`Engine::plan`], with the statement's logical plan kept for running again
    /// ([`Engine::run_kept`]) when it may be (see `reuse`).
    pub async fn plan_and_keep(
        &self,
        mut state: SessionState,
        statement: DFStatement,
    ) -> Result<(DataFrame, Option<KeptPlan>), EngineError> {
        // Read before anything resolves: a change during planning makes the plan stale.
        let generation = self.catalog_generation();
        // Pinned after the session adapted its state, so no session plans unpinned.
        self.pin_versions(&mut state);
        limits::check_df_statement(&statement, limits::MAX_DEPTH)?;
        self.check_statement_locations(&statement)?;
        let plan = state.statement_to_plan(statement).await?;
        self.allowed.check(&plan)?;
        match plan {
            // Statements that change the session or its catalogs take effect through a
            // context, as DataFusion runs them.
            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) => {
                let ctx = SessionContext::new_with_state(state);
                let done = ctx.execute_logical_plan(plan).await;
                self.catalog_changed();
                Ok((done?, None))
            }
            // Everything else is a frame over this state as it is (a context would hand out a
            // copy of it), with the statement's start time for `now()`.
            plan => {
                let kept = KeptPlan::new(&plan, generation);
                state.mark_start_execution();
                Ok((DataFrame::new(state, plan), kept))
            }
        }
    }

    /// The catalog as plans resolve it (see `reuse`).
    pub fn catalog_generation(&self) -> CatalogGeneration {
        let tables = self
            .running_sources()
            .into_iter()
            .map(|s| s.status.locked().tables_changes);
        CatalogGeneration::new(self.generation.load(Ordering::Acquire), tables)
    }

    /// Plans kept before now resolve their names again: for tables registered from Rust on
    /// [`Engine::context`] (the engine's own statements do this themselves).
    pub fn catalog_changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// A frame of `kept` in `state` (a session's copy of the engine's state), with every
    /// source's current version pinned; `None` when the catalog changed since it was
    /// planned, and the statement must be planned again.
    pub fn run_kept(&self, mut state: SessionState, kept: &KeptPlan) -> Option<DataFrame> {
        if self.catalog_generation() != kept.generation() {
            return None;
        }
        self.pin_versions(&mut state);
        state.mark_start_execution();
        Some(DataFrame::new(state, kept.plan()))
    }

    /// `kept`'s physical plan bound to every source's current version, pinned in `config`
    /// for one run (see `reuse`); `None` when the catalog changed since it was planned or no
    /// physical plan is kept, and the statement takes the way of [`Engine::run_kept`].
    pub fn bind_kept(
        &self,
        config: &mut SessionConfig,
        kept: &KeptPlan,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>, EngineError> {
        if self.catalog_generation() != kept.generation() {
            return Ok(None);
        }
        self.pin_in(config);
        Ok(kept.bind_physical(config)?)
    }

    /// `kept` (a plan with parameters) made physical with its parameters in place, in `state`
    /// (a session's copy, whose configuration holds the run's parameter values), every
    /// source's current version pinned; the physical plan is kept for the next runs to bind
    /// (see `reuse`). `None` when the catalog changed since it was planned, or its parameters
    /// do not all go to scans: the statement is then made physical with its values in place.
    pub async fn plan_kept_with_params(
        &self,
        state: &mut SessionState,
        kept: &KeptPlan,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>, EngineError> {
        if self.catalog_generation() != kept.generation() || !kept.may_keep_with_params() {
            return Ok(None);
        }
        self.pin_versions(state);
        state.mark_start_execution();
        let optimized = state.optimize(&kept.plan())?;
        if !kept.params_only_in_scans(&optimized) {
            return Ok(None);
        }
        let physical = state
            .query_planner()
            .create_physical_plan(&optimized, state)
            .await?;
        kept.keep_physical(&physical)?;
        Ok(Some(physical))
    }

    /// Pins the current version of every source in `state`, for one statement.
    pub(super) fn pin_versions(&self, state: &mut SessionState) {
        self.pin_in(state.config_mut());
    }

    fn pin_in(&self, config: &mut SessionConfig) {
        let pinned = {
            let sources = self.sources.read_locked();
            pin(sources.iter().map(|(n, s)| (n.as_str(), &s.published)))
        };
        config.set_extension(Arc::new(pinned));
    }

    /// The locations DataFusion's own statements name, refused before they are planned.
    fn check_statement_locations(&self, statement: &DFStatement) -> Result<(), EngineError> {
        match statement {
            DFStatement::CreateExternalTable(create) => {
                for location in &create.locations {
                    self.check_location("CREATE EXTERNAL TABLE", location)?;
                }
            }
            DFStatement::CopyTo(copy) => self.check_location("COPY ... TO", &copy.target)?,
            DFStatement::Explain(explain) => self.check_statement_locations(&explain.statement)?,
            DFStatement::Statement(_) | DFStatement::Reset(_) => {}
        }
        Ok(())
    }

    /// Runs one of cdcfusion's own statements, already parsed (and possibly adjusted, e.g.
    /// an init file's `CREATE SOURCE` with validation deferred to the source itself).
    pub async fn run_statement(&self, statement: CdcStatement) -> Result<(), EngineError> {
        self.execute(statement).await.map(drop)
    }

    /// The name of the engine's default catalog (where `cdc` and registered tables live).
    pub fn default_catalog(&self) -> String {
        default_catalog(&self.ctx)
    }
}

impl Engine {
    /// Runs one of cdcfusion's own statements, already parsed: `SHOW SOURCES` answers with its
    /// rows, the others with no rows once they have taken effect.
    pub async fn execute(&self, statement: CdcStatement) -> Result<DataFrame, EngineError> {
        match statement {
            CdcStatement::CreateSource(create) => {
                match self.create(&create).await {
                    Err(EngineError::SourceExists(_)) if create.if_not_exists => {}
                    other => other?,
                }
                Ok(self.ctx.read_empty()?)
            }
            CdcStatement::DropSource(drop) => {
                match self.drop_durable(&drop.name).await {
                    Err(EngineError::NoSuchSource(_)) if drop.if_exists => {}
                    other => other?,
                }
                Ok(self.ctx.read_empty()?)
            }
            CdcStatement::ShowSources => {
                let sources = self.running_sources();
                let text = |v: Vec<Option<String>>| -> ArrayRef { Arc::new(StringArray::from(v)) };
                let name = sources.iter().map(|s| Some(s.name.clone())).collect();
                let url = sources.iter().map(|s| Some(s.url())).collect();
                let definition = sources
                    .iter()
                    .map(|s| Some(s.definition()).filter(|d| !d.is_empty()))
                    .collect();
                let phase = sources
                    .iter()
                    .map(|s| Some(s.progress.report().phase.as_str().to_string()))
                    .collect();
                let position = sources
                    .iter()
                    .map(|s| {
                        s.published
                            .load()
                            .position
                            .as_ref()
                            .map(ToString::to_string)
                    })
                    .collect();
                let error = sources.iter().map(|s| s.status().error).collect();
                let batch = RecordBatch::try_from_iter(vec![
                    ("name", text(name)),
                    ("url", text(url)),
                    ("phase", text(phase)),
                    ("position", text(position)),
                    ("error", text(error)),
                    ("definition", text(definition)),
                ])
                .map_err(DataFusionError::from)?;
                Ok(self.ctx.read_batch(batch)?)
            }
            CdcStatement::CreateSink(create) => {
                match self.create_sink(&create).await {
                    Err(EngineError::SinkExists(_)) if create.if_not_exists => {}
                    other => other?,
                }
                Ok(self.ctx.read_empty()?)
            }
            CdcStatement::ExplainSink(create) => self.explain_sink(&create).await,
            CdcStatement::DropSink(drop) => {
                match self.drop_sink(&drop.name).await {
                    Err(EngineError::NoSuchSink(_)) if drop.if_exists => {}
                    other => other?,
                }
                Ok(self.ctx.read_empty()?)
            }
            CdcStatement::ShowSinks => {
                let batch = super::status::show_sinks(
                    &Arc::downgrade(&self.sources),
                    &Arc::downgrade(&self.sinks),
                )?;
                Ok(self.ctx.read_batch(batch)?)
            }
            CdcStatement::AlterSink(alter) => {
                self.alter_sink(&alter.name, alter.pause).await?;
                Ok(self.ctx.read_empty()?)
            }
            CdcStatement::AlterSource(alter) => {
                let source = self.source(&alter.name)?;
                match alter.action {
                    AlterSourceAction::Resnapshot { table: Some(table) } => {
                        source.resnapshot_table(&table).await?
                    }
                    AlterSourceAction::Resnapshot { table: None } => source.resnapshot().await,
                    AlterSourceAction::Set(changes) => self.alter_source(&source, &changes).await?,
                }
                Ok(self.ctx.read_empty()?)
            }
        }
    }
}

fn default_catalog(ctx: &SessionContext) -> String {
    ctx.state()
        .config()
        .options()
        .catalog
        .default_catalog
        .clone()
}
