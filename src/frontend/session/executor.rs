//! The simple and extended query protocols: every statement a client sends, parsed once
//! (`statement`), then run by what its type names: the session (`session`, `block`), `COPY`
//! (`copy`), subscriptions and cursors (`subscribe`), the engine for our own statements,
//! DataFusion for the rest (`planner`).
//!
//! A connection keeps each statement parsed once: a prepared statement from its `Parse`, a
//! simple-protocol statement by its text. It also keeps the statement's logical plan where
//! that may run again (`planner`, `engine::reuse`), so a statement run again skips parsing
//! and SQL planning; the optimizer and physical planning run at every execution, a prepared
//! statement's parameters bound first.
//!
//! # Invariant
//! Every statement that reads data pins one published version of every source for that
//! execution, through [`Engine::plan`](crate::engine::Engine::plan) or, for a kept plan,
//! [`Engine::run_kept`](crate::engine::Engine::run_kept), which refuses a plan whose names
//! may resolve differently now (the statement is then planned again). A failing statement
//! produces an error response and leaves the connection usable; in a multi-statement simple
//! query the statements after it are not run, as in PostgreSQL.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ParamValues;
use datafusion::prelude::DataFrame;
use datafusion::sql::parser::Statement as DFStatement;
use futures::{Sink, StreamExt};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{CopyResponse, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::CopyData;
use pgwire::messages::extendedquery::Execute;
use pgwire::messages::simplequery::Query;
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;

use crate::frontend::access::privileges;
use crate::frontend::access::user_statements;
use crate::frontend::protocol::conn::{ConnState, Shared, Stop};
use crate::frontend::protocol::encode;
use crate::frontend::protocol::error::{datafusion_error, user_error};
use crate::frontend::session::block::{self, Effect, Tracked};
use crate::frontend::session::copy;
use crate::frontend::session::cursors::Cursors;
use crate::frontend::session::guards::{no_parameters, rows_per_execute};
use crate::frontend::session::lookup;
use crate::frontend::session::planner::Planner;
use crate::frontend::session::results::{
    self, execute, rows, warn_stale, within_result_size, Runnable, StatementLimits,
};
use crate::frontend::session::session_statement::{self, SessionStatement};
use crate::frontend::session::statement::{self, ours_answer, Answer, Parsed, Prepared};
use crate::frontend::session::subscribe::Runner;
use crate::locks::Locked;
use crate::provider::health::ReadPolicy;
use crate::sql::CursorCommand;
use crate::sqlstate::SqlState;

/// The query handler of one connection (simple and extended protocol).
pub struct QueryHandler {
    executor: Arc<Executor>,
}

impl QueryHandler {
    pub fn new(shared: Arc<Shared>, conn: Arc<ConnState>) -> Self {
        Self {
            executor: Arc::new(Executor {
                planner: Planner::new(Arc::clone(&shared), Arc::clone(&conn)),
                shared,
                conn,
                statements: Mutex::default(),
                cursors: Cursors::default(),
            }),
        }
    }
}

/// Simple-protocol statements a connection keeps parsed (and planned) by their text; when
/// full, it starts over.
const MAX_KEPT_STATEMENTS: usize = 256;

/// Parses, plans and runs the statements of one connection.
pub struct Executor {
    shared: Arc<Shared>,
    conn: Arc<ConnState>,
    planner: Planner,
    /// Simple-protocol statements by their text (see [`Executor::parsed`]).
    statements: Mutex<HashMap<String, Arc<Prepared>>>,
    /// The connection's cursors, for both protocols.
    cursors: Cursors,
}

impl Executor {
    /// Runs a statement to its response, counted for the metrics endpoint.
    async fn run<C>(
        &self,
        client: &mut C,
        prepared: &Prepared,
        params: Option<ParamValues>,
        format: &Format,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let started = std::time::Instant::now();
        let result = self.run_statement(client, prepared, params, format).await;
        let code = match &result {
            Ok(_) => None,
            Err(PgWireError::UserError(info)) => Some(info.code.as_str()),
            Err(_) => Some(SqlState::INTERNAL_ERROR.code()),
        };
        self.shared.stats.statement(started.elapsed(), code);
        result
    }

    /// Runs a statement to its response.
    async fn run_statement<C>(
        &self,
        client: &mut C,
        prepared: &Prepared,
        params: Option<ParamValues>,
        format: &Format,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let metadata = client.metadata().clone();
        // A failed transaction block refuses everything but its end and `ROLLBACK TO`.
        let session = match &prepared.parsed {
            Parsed::Session(s) => Some(s),
            _ => None,
        };
        block::lock(self.conn.block()).admit(session)?;
        if let Some(info) = self.conn.session() {
            let role = self.shared.users.role(&info.user);
            privileges::authorize(role, &info.user, &prepared.parsed)?;
        }
        let limits = StatementLimits::of(&self.shared.settings);
        let cursors = Runner {
            shared: &self.shared,
            conn: &self.conn,
            planner: &self.planner,
            cursors: &self.cursors,
        };
        match &prepared.parsed {
            Parsed::Session(s) => self.run_session(client, s, format),
            Parsed::Subscribe(s) => cursors.subscribe(client, s, &metadata).await,
            Parsed::Declare(declare) => cursors.declare(declare, &metadata).await,
            Parsed::Cursor(command) => cursors.cursor(command, &metadata, format).await,
            Parsed::Users(statement) => {
                let user = self.conn.session().map_or("", |info| info.user.as_str());
                user_statements::run(&self.shared.users, &self.shared.engine, user, statement).await
            }
            Parsed::Ours(statement) => {
                let stop = self.planner.start(&metadata);
                let df = self.planner.run_ours(statement.clone(), &stop).await?;
                match ours_answer(statement) {
                    (_, true) => {
                        let schema = Arc::new(df.schema().as_arrow().clone());
                        Ok(Response::Query(
                            rows(df, &schema, format, &metadata, stop, limits).await?,
                        ))
                    }
                    (tag, false) => Ok(Response::Execution(Tag::new(tag))),
                }
            }
            Parsed::Copy(out) => {
                let stop = self.planner.start(&metadata);
                let query = statement::copied_query(out);
                let (df, policy) = self.planner.plan(query, &metadata, &stop).await?;
                let options = Arc::new(FormatOptions::from_client_metadata(&metadata));
                let fields = Arc::new(encode::pg_fields(
                    df.schema().as_arrow(),
                    &Format::UnifiedText,
                    &options,
                )?);
                let header = out.header_line(&fields);
                let encoder = out.encoder(Arc::clone(&fields));
                let columns = fields.len();
                let batches =
                    execute(df, stop, session_statement::time_zone(&metadata), limits).await?;
                warn_stale(client, &policy).await?;
                let lines = encode::copy_rows(batches, fields, encoder);
                let lines = within_result_size(lines, limits.result_size, |line: &CopyData| {
                    line.data.len()
                });
                let lines = copy::with_header(header, lines);
                Ok(Response::CopyOut(CopyResponse::new(0, columns, lines)))
            }
            Parsed::DataFusion { statement, answer } => {
                let stop = self.planner.start(&metadata);
                if let Some(response) = self
                    .point_lookup(
                        client,
                        statement,
                        answer,
                        params.as_ref(),
                        format,
                        &metadata,
                    )
                    .await?
                {
                    return Ok(Response::Query(response));
                }
                // A kept physical plan runs as it is, its parameters bound into its scans.
                let params = params.filter(|p| match p {
                    ParamValues::List(values) => !values.is_empty(),
                    ParamValues::Map(values) => !values.is_empty(),
                });
                let kept = prepared.kept();
                let bound = match &kept {
                    Some(kept) => self.planner.bind_kept(kept, &metadata, params.as_ref())?,
                    None => None,
                };
                let (run, policy, kept) = match (bound, kept) {
                    (Some(bound), Some(kept)) => {
                        let run = Runnable::Bound {
                            plan: bound.plan,
                            task: bound.task,
                            kept: Arc::clone(&kept),
                        };
                        (run, bound.policy, Some(kept))
                    }
                    _ => {
                        let (mut df, policy) =
                            self.frame(prepared, statement, &metadata, &stop).await?;
                        // Planned with its parameters in place, and kept, where its plan
                        // allows; else with their values (`engine::reuse`).
                        let with_params = match (&params, prepared.kept()) {
                            (Some(params), Some(kept)) => self
                                .planner
                                .plan_with_params(&kept, &metadata, params)
                                .await?
                                .map(|bound| (bound, kept)),
                            _ => None,
                        };
                        self.shared.stats.planned();
                        match with_params {
                            Some((bound, kept)) => {
                                let run = Runnable::Bound {
                                    plan: bound.plan,
                                    task: bound.task,
                                    kept: Arc::clone(&kept),
                                };
                                (run, bound.policy, Some(kept))
                            }
                            None => {
                                let keep = match params {
                                    Some(params) => {
                                        df = df
                                            .with_param_values(params)
                                            .map_err(datafusion_error)?;
                                        None
                                    }
                                    None => {
                                        no_parameters(&df)?;
                                        prepared.kept()
                                    }
                                };
                                let kept = keep.clone();
                                (Runnable::Frame { df, keep }, policy, kept)
                            }
                        }
                    }
                };
                let (tag, counted) = match answer {
                    Answer::Rows => {
                        let described = match kept.as_ref().and_then(|k| k.described()) {
                            Some(described) => described,
                            None => {
                                let described = self
                                    .planner
                                    .described(run.logical_plan(), &metadata)
                                    .await?;
                                if let Some(kept) = &kept {
                                    kept.keep_described(&described);
                                }
                                described
                            }
                        };
                        let response =
                            rows(run, &described, format, &metadata, stop, limits).await?;
                        warn_stale(client, &policy).await?;
                        return Ok(Response::Query(response));
                    }
                    Answer::Inserted => (Tag::new("INSERT").with_oid(0), true),
                    Answer::Copied => (Tag::new("COPY"), true),
                    Answer::Done(tag) => (Tag::new(tag), false),
                };
                let batches: Vec<RecordBatch> =
                    execute(run, stop, session_statement::time_zone(&metadata), limits)
                        .await?
                        .collect::<Vec<_>>()
                        .await
                        .into_iter()
                        .collect::<PgWireResult<_>>()?;
                Ok(Response::Execution(if counted {
                    tag.with_rows(results::inserted_rows(&batches))
                } else {
                    tag
                }))
            }
        }
    }

    /// `statement` (of `prepared`) ready to run: its kept plan run again while the catalog
    /// and the session's settings are unchanged, else planned (and kept) anew. A statement
    /// described at `Parse` must still answer with the columns it was described with, as in
    /// PostgreSQL.
    async fn frame(
        &self,
        prepared: &Prepared,
        statement: &DFStatement,
        metadata: &HashMap<String, String>,
        stop: &Stop,
    ) -> PgWireResult<(DataFrame, Arc<ReadPolicy>)> {
        if let Some(kept) = prepared.kept() {
            if let Some(ready) = self.planner.run_kept(&kept, metadata)? {
                return Ok(ready);
            }
        }
        let (df, policy, kept) = self
            .planner
            .plan_and_keep(statement.clone(), metadata, stop)
            .await?;
        prepared.keep(kept);
        if let Some(described) = &prepared.schema {
            // Names and types: a description also carries each column's origin (`origins`).
            let now = df.schema().as_arrow().fields();
            let same = described.fields().len() == now.len()
                && described
                    .fields()
                    .iter()
                    .zip(now.iter())
                    .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
            if !same {
                return Err(user_error(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "cached plan must not change result type",
                ));
            }
        }
        Ok((df, policy))
    }

    /// The statement of `text`, parsed once per connection and kept by its text (at most
    /// [`MAX_KEPT_STATEMENTS`]); `None` for an empty statement.
    fn parsed(&self, text: String) -> PgWireResult<Option<Arc<Prepared>>> {
        let lock = || self.statements.locked();
        if let Some(found) = lock().get(&text) {
            return Ok(Some(Arc::clone(found)));
        }
        let Some(parsed) = statement::parse(&self.shared, &text)? else {
            return Ok(None);
        };
        // A user statement's text may hold a password: it is not kept.
        let keep = !matches!(parsed, Parsed::Users(_));
        let prepared = Arc::new(Prepared::unplanned(parsed));
        if !keep {
            return Ok(Some(prepared));
        }
        let mut kept = lock();
        if kept.len() >= MAX_KEPT_STATEMENTS {
            kept.clear();
        }
        kept.insert(text, Arc::clone(&prepared));
        Ok(Some(prepared))
    }

    /// Answers a primary-key point lookup from the key index (`lookup`), if `statement` is
    /// one and the session has not turned lookups off; `None` sends it to the planner.
    async fn point_lookup<C>(
        &self,
        client: &mut C,
        statement: &DFStatement,
        answer: &Answer,
        params: Option<&ParamValues>,
        format: &Format,
        metadata: &HashMap<String, String>,
    ) -> PgWireResult<Option<QueryResponse>>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (DFStatement::Statement(statement), Answer::Rows) = (statement, answer) else {
            return Ok(None);
        };
        let Some(session) = self.conn.session() else {
            return Ok(None);
        };
        if !session_statement::point_lookups(metadata) {
            return Ok(None);
        }
        let Some(found) = lookup::answer(
            &self.shared.engine,
            &session.catalog,
            statement,
            params,
            session_statement::stale_reads(metadata),
        )?
        else {
            return Ok(None);
        };
        let rows = match &found.table {
            Some((db, table)) => {
                let keys = self
                    .shared
                    .pg_catalogs
                    .keys_of(&session.catalog)
                    .map_err(datafusion_error)?;
                // An oid not found yet is found by planning the statement, so that every answer
                // describes its columns alike.
                let Some(oid) = keys.known_oid(db, table) else {
                    return Ok(None);
                };
                crate::frontend::protocol::origins::read_from(found.rows, oid, &found.columns)
                    .map_err(datafusion_error)?
            }
            None => found.rows,
        };
        results::warn(client, found.warnings).await?;
        Ok(Some(results::batch_rows(rows, format, metadata)?))
    }

    /// Plans a statement for `Parse`: result columns and parameter types. Nothing runs:
    /// our own statements other than `SHOW SOURCES` are only described at `Execute`.
    async fn prepare<C: ClientInfo>(&self, client: &C, parsed: Parsed) -> PgWireResult<Prepared> {
        let metadata = client.metadata();
        let mut prepared = Prepared::unplanned(parsed);
        match &prepared.parsed {
            Parsed::DataFusion { statement, answer } => {
                let stop = self.planner.start(metadata);
                let (df, _, kept) = self
                    .planner
                    .plan_and_keep(statement.clone(), metadata, &stop)
                    .await?;
                prepared.keep(kept);
                let params = df
                    .logical_plan()
                    .get_parameter_types()
                    .map_err(datafusion_error)?;
                prepared.params = ordered_params(params);
                if *answer == Answer::Rows {
                    prepared.schema =
                        Some(self.planner.described(df.logical_plan(), metadata).await?);
                }
            }
            Parsed::Cursor(CursorCommand::Fetch { cursor, .. }) => {
                // The rows are the cursor's, declared before this statement was parsed.
                let found = self.cursors.get(cursor)?;
                prepared.schema = Some(Arc::clone(&found.schema));
            }
            Parsed::Ours(statement) if ours_answer(statement).1 => {
                // `SHOW SOURCES` only reads: running it here is safe and gives its columns.
                let stop = self.planner.start(metadata);
                let df = self.planner.run_ours(statement.clone(), &stop).await?;
                prepared.schema = Some(Arc::new(df.schema().as_arrow().clone()));
            }
            _ => {}
        }
        Ok(prepared)
    }

    /// A session statement's response.
    fn run_session<C>(
        &self,
        client: &mut C,
        statement: &SessionStatement,
        format: &Format,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore,
        C::PortalStore: PortalStore,
    {
        let tag = Tag::new(statement.tag());
        Ok(match statement {
            SessionStatement::Set { name, value } => {
                session_statement::set(client.metadata_mut(), name, value.clone())?;
                self.planner.settings_changed();
                Response::Execution(tag)
            }
            SessionStatement::Reset(Some(name)) => {
                session_statement::set(client.metadata_mut(), name, None)?;
                self.planner.settings_changed();
                Response::Execution(tag)
            }
            SessionStatement::Reset(None) | SessionStatement::DiscardAll => {
                let startup = ["user", "database", "application_name", "client_encoding"];
                client.metadata_mut().retain(|k, _| {
                    startup.contains(&k.as_str()) || !session_statement::is_known(k)
                });
                self.planner.settings_changed();
                Response::Execution(tag)
            }
            SessionStatement::Show(name) => {
                Response::Query(results::show(client.metadata(), name.as_deref(), format)?)
            }
            SessionStatement::Begin
            | SessionStatement::Commit
            | SessionStatement::Rollback
            | SessionStatement::Savepoint(_)
            | SessionStatement::Release(_)
            | SessionStatement::RollbackTo(_) => {
                match block::lock(self.conn.block()).run(statement)? {
                    Effect::Started => Response::TransactionStart(tag),
                    Effect::Ended(how) => {
                        self.cursors.block_ended();
                        Response::TransactionEnd(Tag::new(how))
                    }
                    Effect::Continued => Response::Execution(tag),
                }
            }
            SessionStatement::Deallocate(Some(name)) => {
                client.portal_store().rm_statement(name);
                Response::Execution(tag)
            }
            SessionStatement::Deallocate(None) | SessionStatement::Ignored(_) => {
                Response::Execution(tag)
            }
        })
    }
}

/// `$1`, `$2`, ... in order, with their inferred types.
fn ordered_params(params: HashMap<String, Option<DataType>>) -> Vec<Option<DataType>> {
    let mut numbered: Vec<(usize, Option<DataType>)> = params
        .into_iter()
        .filter_map(|(k, v)| k.trim_start_matches('$').parse().ok().map(|i| (i, v)))
        .collect();
    numbered.sort_by_key(|(i, _)| *i);
    let count = numbered.last().map_or(0, |(i, _)| *i);
    let mut out = vec![None; count];
    for (i, t) in numbered {
        out[i - 1] = t;
    }
    out
}

#[async_trait]
impl SimpleQueryHandler for QueryHandler {
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self._on_query(&mut Tracked::new(client, self.executor.conn.block()), query)
            .await
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let max_size = self.executor.shared.settings.max_statement_size;
        let texts = match statement::split(query, max_size) {
            Ok(texts) => texts,
            Err(e) => return Ok(vec![error_response(e)]),
        };
        if texts.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let mut responses = Vec::with_capacity(texts.len());
        for text in texts {
            crate::failpoint::hit_in("connection", text.trim());
            let result = match self.executor.parsed(text) {
                Ok(Some(prepared)) => {
                    self.executor
                        .run(client, &prepared, None, &Format::UnifiedText)
                        .await
                }
                Ok(None) => Ok(Response::EmptyQuery),
                Err(e) => Err(e),
            };
            match result {
                Ok(response) => responses.push(response),
                Err(e) => {
                    // PostgreSQL stops at the first failing statement of a simple query.
                    responses.push(error_response(e));
                    break;
                }
            }
        }
        Ok(responses)
    }
}

/// A failed statement as a response (the connection carries on).
fn error_response(error: PgWireError) -> Response {
    Response::Error(Box::new(error.into()))
}

#[async_trait]
impl QueryParser for Executor {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut texts = statement::split(sql, self.shared.settings.max_statement_size)?;
        if texts.len() > 1 {
            return Err(statement::several_statements());
        }
        let Some(text) = texts.pop() else {
            return Ok(None);
        };
        match statement::parse(&self.shared, &text)? {
            Some(parsed) => Ok(Some(self.prepare(client, parsed).await?)),
            None => Ok(None),
        }
    }

    fn get_parameter_types(&self, statement: &Prepared) -> PgWireResult<Vec<Type>> {
        statement
            .params
            .iter()
            .map(|t| match t {
                Some(t) => arrow_pg::datatypes::into_pg_type(t),
                None => Ok(Type::UNKNOWN),
            })
            .collect()
    }

    fn get_result_schema(
        &self,
        statement: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let format = format.unwrap_or(&Format::UnifiedText);
        let options = Arc::new(FormatOptions::default());
        match (&statement.schema, &statement.parsed) {
            (Some(schema), _) => encode::pg_fields(schema, format, &options),
            (None, Parsed::Session(SessionStatement::Show(name))) => {
                encode::pg_fields(&results::show_schema(name.as_deref()), format, &options)
            }
            _ => Ok(Vec::new()),
        }
    }
}

#[async_trait]
impl ExtendedQueryHandler for QueryHandler {
    type Statement = Prepared;
    type QueryParser = Executor;

    fn query_parser(&self) -> Arc<Executor> {
        Arc::clone(&self.executor)
    }

    async fn on_execute<C>(&self, client: &mut C, mut message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        message.max_rows = rows_per_execute(message.max_rows);
        self._on_execute(
            &mut Tracked::new(client, self.executor.conn.block()),
            message,
        )
        .await
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let prepared = &portal.statement.statement;
        let params = match prepared.parsed {
            Parsed::DataFusion { .. } => {
                let inferred: Vec<Option<&DataType>> =
                    prepared.params.iter().map(Option::as_ref).collect();
                let mut params =
                    arrow_pg::datatypes::df::deserialize_parameters(portal, &inferred)?;
                crate::frontend::session::params::fix_text_arrays(portal, &mut params)?;
                Some(params)
            }
            _ => None,
        };
        self.executor
            .run(client, prepared, params, &portal.result_column_format)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_ordered_by_number() {
        let params = HashMap::from([
            ("$2".to_string(), Some(DataType::Utf8)),
            ("$1".to_string(), Some(DataType::Int64)),
            ("$3".to_string(), None),
        ]);
        assert_eq!(
            ordered_params(params),
            vec![Some(DataType::Int64), Some(DataType::Utf8), None]
        );
    }
}
