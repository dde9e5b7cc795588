//! The DataFusion session state of one connection, and planning its statements in it.
//!
//! The state is the engine's adapted to the session: its database's catalog as the default
//! (with that database's `pg_catalog`), `current_database()` and `current_setting()` over the
//! session's settings. It is built at the connection's first statement and kept; a statement
//! that changes the settings (`SET`, `RESET`, `DISCARD ALL`) has it built again before the
//! next one. Catalogs, schemas and tables are looked up through the engine's own catalog list
//! at planning, so sources created or dropped since are seen all the same.
//!
//! A statement's logical plan may be kept ([`Kept`]) and run again without SQL planning
//! (see `engine::reuse`): only while the engine's catalog generation and this session's
//! settings are those it was planned under, since its names and session functions were
//! resolved then. Where the engine allows it, its physical plan is kept too, and a run binds
//! it to that run's versions ([`Planner::bind_kept`]) without planning at all.
//!
//! # Invariant
//! Each statement plans in its own copy of the state, with its own read policy (which
//! collects that statement's stale-read warnings) and the versions the engine pins for it
//! (see [`Engine::plan`](crate::engine::Engine::plan)): nothing of one statement's planning
//! reaches another's. A kept plan run again gets a fresh copy, policy and pinned versions
//! too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::ParamValues;
use datafusion::error::Result as DFResult;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::execution::{FunctionRegistry, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::DataFrame;
use datafusion::sql::parser::Statement as DFStatement;
use pgwire::error::PgWireResult;

use crate::engine::KeptPlan;
use crate::frontend::pg_compat::catalog::SessionCatalogs;
use crate::frontend::protocol::conn::{ConnState, Shared, Stop, Stopped};
use crate::frontend::protocol::error::{canceled, datafusion_error, engine_error, user_error};
use crate::frontend::session::session_statement;
use crate::provider::health::ReadPolicy;
use crate::provider::index_filters::RunParams;
use crate::sql::CdcStatement;
use crate::sqlstate::SqlState;

/// Plans the statements of one connection (see the module docs).
#[derive(Debug)]
pub struct Planner {
    shared: Arc<Shared>,
    conn: Arc<ConnState>,
    /// The session's state, once built for its current settings.
    built: Mutex<Option<SessionState>>,
    /// Counts the changes of the session's settings.
    settings: AtomicU64,
}

/// A statement's plan kept by this session, with the settings it was planned under.
#[derive(Debug, Clone)]
pub struct Kept {
    plan: KeptPlan,
    settings: u64,
    /// Its result columns as described to clients (`origins`), once described: they hold as
    /// long as the plan may run.
    described: OnceLock<SchemaRef>,
}

impl Kept {
    /// Its result columns as described, when described before.
    pub fn described(&self) -> Option<SchemaRef> {
        self.described.get().cloned()
    }

    /// Keeps `schema` as its result columns' description.
    pub fn keep_described(&self, schema: &SchemaRef) {
        let _ = self.described.set(Arc::clone(schema));
    }

    /// The kept logical plan.
    pub fn logical_plan(&self) -> &LogicalPlan {
        self.plan.logical_plan()
    }

    /// Keeps the plan's physical form for the next runs, when it may be (`engine::reuse`).
    pub fn keep_physical(&self, physical: &Arc<dyn ExecutionPlan>) -> DFResult<()> {
        self.plan.keep_physical(physical)
    }
}

/// A kept physical plan bound for one run, with the task context it runs in.
pub struct Bound {
    pub plan: Arc<dyn ExecutionPlan>,
    pub task: TaskContext,
    pub policy: Arc<ReadPolicy>,
}

impl Planner {
    pub fn new(shared: Arc<Shared>, conn: Arc<ConnState>) -> Self {
        Self {
            shared,
            conn,
            built: Mutex::new(None),
            settings: AtomicU64::new(0),
        }
    }

    /// The session's settings changed: the state is built again for the next statement.
    pub fn settings_changed(&self) {
        *self.built.lock().expect("session state") = None;
        self.settings.fetch_add(1, Ordering::AcqRel);
    }

    /// Starts a statement under this session's statement timeout.
    pub fn start(&self, metadata: &HashMap<String, String>) -> Stop {
        let timeout = session_statement::statement_timeout(metadata)
            .or(self.shared.settings.statement_timeout);
        self.conn.start_statement(timeout)
    }

    /// Plans `statement` for this session, stoppable by `stop`; with the read policy the
    /// statement collects its stale-read warnings in.
    pub async fn plan(
        &self,
        statement: DFStatement,
        metadata: &HashMap<String, String>,
        stop: &Stop,
    ) -> PgWireResult<(DataFrame, Arc<ReadPolicy>)> {
        let (df, policy, _) = self.plan_and_keep(statement, metadata, stop).await?;
        // Made physical when it runs, planned all the same: counted now.
        self.shared.stats.planned();
        Ok((df, policy))
    }

    /// [`Planner::plan`], with the plan kept for [`Planner::run_kept`] when it may be.
    pub async fn plan_and_keep(
        &self,
        statement: DFStatement,
        metadata: &HashMap<String, String>,
        stop: &Stop,
    ) -> PgWireResult<(DataFrame, Arc<ReadPolicy>, Option<Kept>)> {
        let settings = self.settings.load(Ordering::Acquire);
        let (state, policy) = self.state(metadata)?;
        let stopped = stop.stopped();
        tokio::select! {
            biased;
            why = stopped => Err(canceled(why == Stopped::TimedOut)),
            planned = self.shared.engine.plan_and_keep(state, statement) => {
                let (df, kept) = planned.map_err(engine_error)?;
                Ok((df, policy, kept.map(|plan| Kept { plan, settings, described: OnceLock::new() })))
            }
        }
    }

    /// `kept` ready to run, as [`Planner::plan`] would give it; `None` when the catalog or
    /// the session's settings changed since it was planned.
    pub fn run_kept(
        &self,
        kept: &Kept,
        metadata: &HashMap<String, String>,
    ) -> PgWireResult<Option<(DataFrame, Arc<ReadPolicy>)>> {
        if kept.settings != self.settings.load(Ordering::Acquire) {
            return Ok(None);
        }
        let (state, policy) = self.state(metadata)?;
        Ok(self
            .shared
            .engine
            .run_kept(state, &kept.plan)
            .map(|df| (df, policy)))
    }

    /// `kept`'s physical plan bound to this run's versions and parameter values, ready to
    /// execute without planning; `None` when none is kept or the catalog or the session's
    /// settings changed since it was planned.
    pub fn bind_kept(
        &self,
        kept: &Kept,
        metadata: &HashMap<String, String>,
        params: Option<&ParamValues>,
    ) -> PgWireResult<Option<Bound>> {
        if kept.settings != self.settings.load(Ordering::Acquire) {
            return Ok(None);
        }
        // Only the configuration is copied: a physical plan needs no function registry.
        let (mut config, runtime, session_id) = {
            let mut built = self.built.lock().expect("session state");
            if built.is_none() {
                *built = Some(self.build(metadata)?);
            }
            let state = built.as_ref().expect("built above");
            (
                state.config().clone(),
                Arc::clone(state.runtime_env()),
                state.session_id().to_string(),
            )
        };
        let policy = Arc::new(
            ReadPolicy::new(session_statement::stale_reads(metadata))
                .with_indexes(session_statement::indexes(metadata)),
        );
        config.set_extension(Arc::clone(&policy));
        if let Some(params) = params {
            config.set_extension(Arc::new(RunParams(params.clone())));
        }
        let Some(plan) = self
            .shared
            .engine
            .bind_kept(&mut config, &kept.plan)
            .map_err(engine_error)?
        else {
            return Ok(None);
        };
        let task = TaskContext::new(
            None,
            session_id,
            config,
            HashMap::new(),
            HashMap::new(),
            HashMap::new(),
            HashMap::new(),
            runtime,
        );
        Ok(Some(Bound { plan, task, policy }))
    }

    /// `kept` (a plan with parameters) made physical with `params` in place and kept for the
    /// next runs to bind (see `engine::reuse`), ready to execute; `None` when it may not be
    /// (the catalog or the settings changed, or its parameters do not all go to scans).
    pub async fn plan_with_params(
        &self,
        kept: &Kept,
        metadata: &HashMap<String, String>,
        params: &ParamValues,
    ) -> PgWireResult<Option<Bound>> {
        if kept.settings != self.settings.load(Ordering::Acquire) {
            return Ok(None);
        }
        let (mut state, policy) = self.state(metadata)?;
        state
            .config_mut()
            .set_extension(Arc::new(RunParams(params.clone())));
        let Some(plan) = self
            .shared
            .engine
            .plan_kept_with_params(&mut state, &kept.plan)
            .await
            .map_err(engine_error)?
        else {
            return Ok(None);
        };
        let task = TaskContext::from(&state);
        Ok(Some(Bound { plan, task, policy }))
    }

    /// Runs one of our statements, stoppable by `stop`.
    pub async fn run_ours(&self, statement: CdcStatement, stop: &Stop) -> PgWireResult<DataFrame> {
        let stopped = stop.stopped();
        tokio::select! {
            biased;
            why = stopped => Err(canceled(why == Stopped::TimedOut)),
            done = self.shared.engine.execute(statement) => done.map_err(engine_error),
        }
    }

    /// `plan`'s result columns, with each column's table and number where it has them (see
    /// `origins`).
    pub async fn described(
        &self,
        plan: &LogicalPlan,
        metadata: &HashMap<String, String>,
    ) -> PgWireResult<datafusion::arrow::datatypes::SchemaRef> {
        // Only a scanned column has an origin: without one there is nothing to look up, and no
        // session state to copy.
        let sources = crate::frontend::protocol::origins::sources(plan);
        if sources.iter().all(Option::is_none) {
            return Ok(Arc::new(plan.schema().as_arrow().clone()));
        }
        let (state, _) = self.state(metadata)?;
        let catalog = state.config_options().catalog.default_catalog.clone();
        let keys = self
            .shared
            .pg_catalogs
            .keys_of(&catalog)
            .map_err(datafusion_error)?;
        crate::frontend::protocol::origins::described(
            plan.schema(),
            &sources,
            keys.as_ref(),
            &state,
        )
        .await
        .map_err(datafusion_error)
    }

    /// A copy of the session's state for one statement (see the module docs).
    fn state(
        &self,
        metadata: &HashMap<String, String>,
    ) -> PgWireResult<(SessionState, Arc<ReadPolicy>)> {
        let mut state = {
            let mut built = self.built.lock().expect("session state");
            match built.as_ref() {
                Some(state) => state.clone(),
                None => {
                    let state = self.build(metadata)?;
                    *built = Some(state.clone());
                    state
                }
            }
        };
        let policy = Arc::new(
            ReadPolicy::new(session_statement::stale_reads(metadata))
                .with_indexes(session_statement::indexes(metadata)),
        );
        state.config_mut().set_extension(Arc::clone(&policy));
        Ok((state, policy))
    }

    /// The engine's state adapted to this session and its settings now.
    fn build(&self, metadata: &HashMap<String, String>) -> PgWireResult<SessionState> {
        let info =
            self.conn.session().cloned().ok_or_else(|| {
                user_error(SqlState::INTERNAL_ERROR, "the session has not started")
            })?;
        let pg_catalog = self
            .shared
            .pg_catalogs
            .for_catalog(&info.catalog)
            .map_err(datafusion_error)?;
        let settings: HashMap<String, String> =
            session_statement::all(metadata).into_iter().collect();
        let state = self.shared.engine.context().state();
        let catalogs = Arc::new(SessionCatalogs {
            inner: Arc::clone(state.catalog_list()),
            current: info.catalog.clone(),
            pg_catalog,
        });
        let mut state = SessionStateBuilder::new_from_existing(state)
            .with_catalog_list(catalogs)
            .build();
        state.config_mut().options_mut().catalog.default_catalog = info.catalog;
        // Registering a function by name replaces the engine-wide one in this state only.
        let _ = state.register_udf(Arc::new(
            datafusion_pg_catalog::pg_catalog::create_current_database_udf(&info.database),
        ));
        let _ = state.register_udf(Arc::new(session_statement::current_setting_udf(settings)));
        Ok(state)
    }
}
