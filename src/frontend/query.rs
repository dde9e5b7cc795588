//! The simple and extended query protocols: every statement a client sends, routed to what
//! runs it.
//!
//! # Routing
//! A statement is, in this order:
//! 1. one of cdcfusion's own (`CREATE SOURCE`, `SHOW SOURCES`, ...), recognised by our parser
//!    and run by [`Engine::sql_with`] as written (PostgreSQL's grammar does not know them);
//! 2. a session statement (`SET`, `SHOW`, `BEGIN`, ...; see `session`);
//! 3. `COPY ... TO STDOUT` (see `copy`), whose query then takes the next path;
//! 4. anything else: rewritten by `datafusion-pg-catalog`'s PostgreSQL compatibility parser
//!    (catalog queries of psql and drivers) and run by [`Engine::sql_with`].
//!
//! # Invariant
//! Every statement that reads data goes through [`Engine::sql_with`], which pins one published
//! version of every source for that statement; a prepared statement pins a fresh version at
//! each execution (it is planned again with its parameters). A failing statement produces an
//! error response and leaves the connection usable; in a multi-statement simple query the
//! statements after it are not run, as in PostgreSQL.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ParamValues;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::execution::{FunctionRegistry, SendableRecordBatchStream};
use datafusion::prelude::DataFrame;
use futures::{Sink, SinkExt, Stream, StreamExt};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{CopyResponse, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::extendedquery::Execute;
use pgwire::messages::simplequery::Query;
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;
use sqlparser::ast::Statement;

use super::block::{self, Block, Effect, Tracked};
use super::catalog::SessionCatalogs;
use super::compat;
use super::copy::{self, CopyOut};
use super::encode;
use super::error::{canceled, datafusion_error, engine_error, user_error, SQLSTATE_INTERNAL};
use super::server::{ConnState, Shared, Stop, Stopped};
use super::session::{self, SessionStatement};
use crate::engine::{limits, TooComplex};
use crate::provider::health::ReadPolicy;
use crate::sql::{parse_cdc_statement, split_statements, CdcStatement, SQLSTATE_SYNTAX_ERROR};
use datafusion::sql::parser::Statement as DFStatement;

/// A statement, routed (see the module docs).
#[derive(Debug, Clone)]
pub enum Routed {
    /// Ours, run as written; `SHOW SOURCES` (tag `SHOW`) returns rows, described by `schema`
    /// once prepared.
    Ours {
        text: String,
        tag: &'static str,
        schema: Option<SchemaRef>,
    },
    Session(SessionStatement),
    Copy(CopyOut),
    Query(Planned),
}

/// A statement for DataFusion with what its plan says about it.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The text after the compatibility rewrite.
    pub sql: String,
    /// Whether it returns rows; otherwise it is answered with `tag`.
    pub rows: bool,
    pub tag: String,
    /// Result columns and parameter types, known once planned (extended protocol).
    pub schema: Option<SchemaRef>,
    pub params: Vec<Option<DataType>>,
}

impl Planned {
    /// A statement sent to the engine as the client wrote it, answered with `tag`.
    fn as_written(text: &str, tag: &str) -> Self {
        Self {
            sql: text.to_string(),
            rows: false,
            tag: tag.to_string(),
            schema: None,
            params: Vec::new(),
        }
    }
}

/// A statement only DataFusion's grammar knows (its spellings of `COPY ... TO` and `CREATE
/// EXTERNAL TABLE`, or an `EXPLAIN` of one), ready for the engine to parse and check.
fn datafusion_only(text: &str) -> Option<Planned> {
    let statement = datafusion::sql::parser::DFParser::parse_sql(text)
        .ok()?
        .pop_front()?;
    let (tag, rows) = match &statement {
        DFStatement::CopyTo(_) => ("COPY", false),
        DFStatement::CreateExternalTable(_) => ("CREATE EXTERNAL TABLE", false),
        DFStatement::Explain(explain) => match *explain.statement {
            DFStatement::CopyTo(_) | DFStatement::CreateExternalTable(_) => ("EXPLAIN", true),
            _ => return None,
        },
        _ => return None,
    };
    let mut planned = Planned::as_written(text, tag);
    planned.rows = rows;
    Some(planned)
}

/// A statement refused for its depth.
fn too_complex(error: TooComplex) -> PgWireError {
    user_error(TooComplex::SQLSTATE, error.to_string())
}

/// The query handler of one connection (simple and extended protocol).
pub struct QueryHandler {
    parser: Arc<Parser>,
}

impl QueryHandler {
    pub fn new(shared: Arc<Shared>, conn: Arc<ConnState>) -> Self {
        Self {
            parser: Arc::new(Parser { shared, conn }),
        }
    }
}

/// Routes and plans statements for one connection.
pub struct Parser {
    shared: Arc<Shared>,
    conn: Arc<ConnState>,
}

impl Parser {
    /// Routes one statement's text; `Ok(None)` for an empty statement.
    fn route(&self, text: &str) -> PgWireResult<Option<Routed>> {
        match parse_cdc_statement(text) {
            Ok(Some(statement)) => {
                let tag = match statement {
                    CdcStatement::CreateSource(_) => "CREATE SOURCE",
                    CdcStatement::DropSource(_) => "DROP SOURCE",
                    CdcStatement::ShowSources => "SHOW",
                    CdcStatement::AlterSource(_) => "ALTER SOURCE",
                };
                return Ok(Some(Routed::Ours {
                    text: text.to_string(),
                    tag,
                    schema: None,
                }));
            }
            Err(e) => return Err(user_error(e.sqlstate(), e.to_string())),
            Ok(None) => {}
        }
        limits::check_nesting(text).map_err(too_complex)?;
        let mut statements = match self.shared.parser.parse(text) {
            Ok(statements) => statements,
            Err(e) if limits::is_nesting_limit(&e) => {
                return Err(too_complex(TooComplex::Nesting {
                    limit: limits::PARSER_NESTING_LIMIT,
                }))
            }
            Err(e) => match datafusion_only(text) {
                Some(planned) => return Ok(Some(Routed::Query(planned))),
                None => return Err(user_error(SQLSTATE_SYNTAX_ERROR, e.to_string())),
            },
        };
        if statements.len() > 1 {
            return Err(user_error(
                SQLSTATE_SYNTAX_ERROR,
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let Some(statement) = statements.pop() else {
            return Ok(None);
        };
        // Measured before anything walks the tree (the engine measures what it plans again).
        limits::check_statement(&statement, limits::MAX_DEPTH).map_err(too_complex)?;
        let statement = compat::rewrite(statement);
        if let Some(file) = copy::file_target(&statement) {
            self.shared
                .engine
                .check_location("COPY ... TO", file)
                .map_err(|e| engine_error(e.into()))?;
            return Ok(Some(Routed::Query(Planned::as_written(text, "COPY"))));
        }
        if let Some(s) = SessionStatement::of(&statement) {
            return Ok(Some(Routed::Session(s)));
        }
        if let Some(copy) = CopyOut::of(&statement)? {
            return Ok(Some(Routed::Copy(copy)));
        }
        Ok(Some(Routed::Query(Planned {
            rows: returns_rows(&statement),
            tag: command_tag(&statement),
            sql: statement.to_string(),
            schema: None,
            params: Vec::new(),
        })))
    }

    /// Adapts the engine's state to this session: its database's catalog as the default
    /// (with that database's `pg_catalog`), `current_database()` and `current_setting()`.
    fn session_state(
        &self,
        metadata: &HashMap<String, String>,
    ) -> PgWireResult<impl FnOnce(SessionState) -> SessionState + Send + 'static> {
        let info = self
            .conn
            .session()
            .cloned()
            .ok_or_else(|| user_error(SQLSTATE_INTERNAL, "the session has not started"))?;
        let pg_catalog = self
            .shared
            .pg_catalogs
            .for_catalog(&info.catalog)
            .map_err(datafusion_error)?;
        let settings: HashMap<String, String> = session::all(metadata).into_iter().collect();
        let policy = ReadPolicy::new(session::stale_reads(metadata));
        Ok(move |state: SessionState| {
            let catalogs = Arc::new(SessionCatalogs {
                inner: Arc::clone(state.catalog_list()),
                current: info.catalog.clone(),
                pg_catalog,
            });
            let mut state = SessionStateBuilder::new_from_existing(state)
                .with_catalog_list(catalogs)
                .build();
            state.config_mut().options_mut().catalog.default_catalog = info.catalog;
            // Registering a function by name replaces the engine-wide one in this copy only.
            let _ = state.register_udf(Arc::new(
                datafusion_pg_catalog::pg_catalog::create_current_database_udf(&info.database),
            ));
            let _ = state.register_udf(Arc::new(session::current_setting_udf(settings)));
            state.config_mut().set_extension(Arc::new(policy));
            state
        })
    }

    /// Plans `sql` for this session, stoppable by `stop`.
    async fn plan(
        &self,
        sql: &str,
        metadata: &HashMap<String, String>,
        stop: &Stop,
    ) -> PgWireResult<DataFrame> {
        let session = self.session_state(metadata)?;
        let stopped = stop.stopped();
        tokio::select! {
            biased;
            why = stopped => Err(canceled(why == Stopped::TimedOut)),
            planned = self.shared.engine.sql_with(sql, session) => planned.map_err(engine_error),
        }
    }

    /// Starts a statement under this session's statement timeout.
    fn start(&self, metadata: &HashMap<String, String>) -> Stop {
        let timeout =
            session::statement_timeout(metadata).or(self.shared.settings.statement_timeout);
        self.conn.start_statement(timeout)
    }

    /// Runs a routed statement to its response.
    async fn run<C>(
        &self,
        client: &mut C,
        routed: &Routed,
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
        let session = match routed {
            Routed::Session(s) => Some(s),
            _ => None,
        };
        block::lock(self.conn.block()).admit(session)?;
        match routed {
            Routed::Session(s) => run_session(client, s, format, self.conn.block()),
            Routed::Ours { text, tag, .. } => {
                let stop = self.start(&metadata);
                let df = self.plan(text, &metadata, &stop).await?;
                if *tag == "SHOW" {
                    Ok(Response::Query(rows(df, format, &metadata, stop).await?))
                } else {
                    Ok(Response::Execution(Tag::new(tag)))
                }
            }
            Routed::Copy(copy) => {
                let stop = self.start(&metadata);
                let df = self.plan(&copy.query, &metadata, &stop).await?;
                let options = Arc::new(FormatOptions::from_client_metadata(&metadata));
                let fields = Arc::new(encode::pg_fields(
                    df.schema().as_arrow(),
                    &Format::UnifiedText,
                    &options,
                )?);
                let header = copy.header_line(&fields);
                let encoder = copy.encoder(Arc::clone(&fields));
                let columns = fields.len();
                let policy = read_policy(&df);
                let batches = execute(df, stop, session::time_zone(&metadata)).await?;
                warn_stale(client, policy).await?;
                let lines = encode::copy_rows(batches, fields, encoder);
                let lines = super::copy::with_header(header, lines);
                Ok(Response::CopyOut(CopyResponse::new(0, columns, lines)))
            }
            Routed::Query(planned) => {
                let stop = self.start(&metadata);
                let mut df = self.plan(&planned.sql, &metadata, &stop).await?;
                if let Some(params) = params {
                    df = df.with_param_values(params).map_err(datafusion_error)?;
                }
                let policy = read_policy(&df);
                if planned.rows {
                    let response = rows(df, format, &metadata, stop).await?;
                    warn_stale(client, policy).await?;
                    return Ok(Response::Query(response));
                }
                let batches: Vec<RecordBatch> = execute(df, stop, session::time_zone(&metadata))
                    .await?
                    .collect::<Vec<_>>()
                    .await
                    .into_iter()
                    .collect::<PgWireResult<_>>()?;
                let mut tag = Tag::new(&planned.tag);
                match planned.tag.as_str() {
                    "INSERT" => tag = tag.with_oid(0).with_rows(inserted_rows(&batches)),
                    "COPY" => tag = tag.with_rows(inserted_rows(&batches)),
                    _ => {}
                }
                Ok(Response::Execution(tag))
            }
        }
    }

    /// Plans a routed statement for `Parse`: result columns and parameter types. Nothing runs:
    /// our own statements other than `SHOW SOURCES` are only described at `Execute`.
    async fn prepare<C: ClientInfo>(&self, client: &C, routed: Routed) -> PgWireResult<Routed> {
        let metadata = client.metadata().clone();
        match routed {
            Routed::Query(mut planned) => {
                let stop = self.start(&metadata);
                let df = self.plan(&planned.sql, &metadata, &stop).await?;
                let params = df
                    .logical_plan()
                    .get_parameter_types()
                    .map_err(datafusion_error)?;
                planned.params = ordered_params(params);
                if planned.rows {
                    planned.schema = Some(Arc::new(df.schema().as_arrow().clone()));
                }
                Ok(Routed::Query(planned))
            }
            Routed::Ours {
                text, tag: "SHOW", ..
            } => {
                // `SHOW SOURCES` only reads: planning it here is safe and gives its columns.
                let stop = self.start(&metadata);
                let df = self.plan(&text, &metadata, &stop).await?;
                Ok(Routed::Ours {
                    schema: Some(Arc::new(df.schema().as_arrow().clone())),
                    text,
                    tag: "SHOW",
                })
            }
            other => Ok(other),
        }
    }
}

/// The read policy a statement was planned with (it collects the stale-read warnings).
fn read_policy(df: &DataFrame) -> Option<Arc<ReadPolicy>> {
    df.task_ctx().session_config().get_extension::<ReadPolicy>()
}

/// Tells the client, with a WARNING notice each, which stopped tables the statement read
/// stale (only a session with `cdcfusion.stale_reads` on reads them at all).
async fn warn_stale<C>(client: &mut C, policy: Option<Arc<ReadPolicy>>) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let Some(policy) = policy else {
        return Ok(());
    };
    for warning in policy.take_warnings() {
        let notice = ErrorInfo::new("WARNING".into(), SQLSTATE_STALE_READ.into(), warning);
        client
            .feed(PgWireBackendMessage::NoticeResponse(notice.into()))
            .await?;
    }
    Ok(())
}

/// `warning` class `01`: the result reflects a table whose capture has stopped.
const SQLSTATE_STALE_READ: &str = "01000";

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

/// Starts executing `df`; the batches stop with an error when `stop` fires.
/// `timestamptz` values come out in `zone` (see `encode::in_time_zone`).
async fn execute(
    df: DataFrame,
    stop: Stop,
    zone: Option<Arc<str>>,
) -> PgWireResult<impl Stream<Item = PgWireResult<RecordBatch>> + Send + 'static> {
    let stream: SendableRecordBatchStream = tokio::select! {
        biased;
        why = stop.stopped() => return Err(canceled(why == Stopped::TimedOut)),
        stream = df.execute_stream() => stream.map_err(datafusion_error)?,
    };
    let stopped = stop.stopped();
    let batches = futures::stream::unfold(Some((stream, stopped, stop)), |state| async move {
        let (mut stream, mut stopped, stop) = state?;
        tokio::select! {
            biased;
            why = &mut stopped => Some((Err(canceled(why == Stopped::TimedOut)), None)),
            item = stream.next() => match item {
                Some(Ok(batch)) => Some((Ok(batch), Some((stream, stopped, stop)))),
                Some(Err(e)) => Some((Err(datafusion_error(e)), None)),
                None => None,
            },
        }
    });
    Ok(batches.map(move |batch| match &zone {
        Some(zone) => batch.and_then(|b| encode::in_time_zone(b, zone)),
        None => batch,
    }))
}

/// The rows of `df` in `format`.
async fn rows(
    df: DataFrame,
    format: &Format,
    metadata: &HashMap<String, String>,
    stop: Stop,
) -> PgWireResult<QueryResponse> {
    let options = Arc::new(FormatOptions::from_client_metadata(metadata));
    let fields = Arc::new(encode::pg_fields(df.schema().as_arrow(), format, &options)?);
    let batches = execute(df, stop, session::time_zone(metadata)).await?;
    Ok(QueryResponse::new(
        Arc::clone(&fields),
        encode::data_rows(batches, fields),
    ))
}

/// Rows an `INSERT` reports (DataFusion answers with a `count` column).
fn inserted_rows(batches: &[RecordBatch]) -> usize {
    batches
        .first()
        .and_then(|b| b.column_by_name("count"))
        .and_then(|c| {
            c.as_any()
                .downcast_ref::<datafusion::arrow::array::UInt64Array>()
        })
        .map_or(0, |a| a.value(0) as usize)
}

/// Whether `statement` answers with rows.
fn returns_rows(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::Query(_)
            | Statement::Explain { .. }
            | Statement::ExplainTable { .. }
            | Statement::ShowTables { .. }
            | Statement::ShowColumns { .. }
            | Statement::ShowFunctions { .. }
            | Statement::ShowCreate { .. }
    )
}

/// The command tag of a statement without rows: its leading keywords (`CREATE TABLE`).
fn command_tag(statement: &Statement) -> String {
    let text = statement.to_string();
    let words: Vec<String> = text
        .split_whitespace()
        .take(2)
        .map(str::to_uppercase)
        .collect();
    match words.first().map(String::as_str) {
        Some("CREATE" | "DROP" | "ALTER") if words.len() > 1 => words.join(" "),
        Some(first) => first.to_string(),
        None => String::new(),
    }
}

/// A session statement's response.
fn run_session<C>(
    client: &mut C,
    statement: &SessionStatement,
    format: &Format,
    transaction: &Mutex<Block>,
) -> PgWireResult<Response>
where
    C: ClientInfo + ClientPortalStore,
    C::PortalStore: PortalStore,
{
    let tag = Tag::new(statement.tag());
    Ok(match statement {
        SessionStatement::Set { name, value } => {
            session::set(client.metadata_mut(), name, value.clone())?;
            Response::Execution(tag)
        }
        SessionStatement::Reset(Some(name)) => {
            session::set(client.metadata_mut(), name, None)?;
            Response::Execution(tag)
        }
        SessionStatement::Reset(None) | SessionStatement::DiscardAll => {
            let startup = ["user", "database", "application_name", "client_encoding"];
            client
                .metadata_mut()
                .retain(|k, _| startup.contains(&k.as_str()) || !session::is_known(k));
            Response::Execution(tag)
        }
        SessionStatement::Show(name) => {
            Response::Query(show(client.metadata(), name.as_deref(), format)?)
        }
        SessionStatement::Begin
        | SessionStatement::Commit
        | SessionStatement::Rollback
        | SessionStatement::Savepoint(_)
        | SessionStatement::Release(_)
        | SessionStatement::RollbackTo(_) => match block::lock(transaction).run(statement)? {
            Effect::Started => Response::TransactionStart(tag),
            Effect::Ended(how) => Response::TransactionEnd(Tag::new(how)),
            Effect::Continued => Response::Execution(tag),
        },
        SessionStatement::Deallocate(Some(name)) => {
            client.portal_store().rm_statement(name);
            Response::Execution(tag)
        }
        SessionStatement::Deallocate(None) | SessionStatement::Ignored(_) => {
            Response::Execution(tag)
        }
    })
}

/// `SHOW name` (one row) or `SHOW ALL` (name, setting).
fn show(
    metadata: &HashMap<String, String>,
    name: Option<&str>,
    format: &Format,
) -> PgWireResult<QueryResponse> {
    use datafusion::arrow::array::StringArray;
    use datafusion::arrow::datatypes::{Field, Schema};
    let (schema, columns): (Schema, Vec<Vec<String>>) = match name {
        Some(name) => {
            let value = session::get(metadata, name)
                .filter(|_| session::is_known(name))
                .ok_or_else(|| session::unknown(name))?;
            (
                Schema::new(vec![Field::new(name, DataType::Utf8, false)]),
                vec![vec![value]],
            )
        }
        None => {
            let all = session::all(metadata);
            (
                Schema::new(vec![
                    Field::new("name", DataType::Utf8, false),
                    Field::new("setting", DataType::Utf8, false),
                ]),
                vec![
                    all.iter().map(|(n, _)| n.clone()).collect(),
                    all.iter().map(|(_, v)| v.clone()).collect(),
                ],
            )
        }
    };
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        columns
            .into_iter()
            .map(|c| Arc::new(StringArray::from(c)) as _)
            .collect(),
    )
    .map_err(|e| datafusion_error(e.into()))?;
    let options = Arc::new(FormatOptions::from_client_metadata(metadata));
    let fields = Arc::new(encode::pg_fields(batch.schema_ref(), format, &options)?);
    let rows = encode::data_rows(futures::stream::iter([Ok(batch)]), Arc::clone(&fields));
    Ok(QueryResponse::new(fields, rows))
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
        self._on_query(&mut Tracked::new(client, self.parser.conn.block()), query)
            .await
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let texts = match split_statements(query) {
            Ok(texts) => texts,
            Err(e) => {
                return Ok(vec![error_response(user_error(
                    e.sqlstate(),
                    e.to_string(),
                ))])
            }
        };
        if texts.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let mut responses = Vec::with_capacity(texts.len());
        for text in texts {
            crate::failpoint::hit_in("connection", text.trim());
            let result = match self.parser.route(&text) {
                Ok(Some(routed)) => {
                    self.parser
                        .run(client, &routed, None, &Format::UnifiedText)
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
impl QueryParser for Parser {
    type Statement = Routed;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Routed>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut texts =
            split_statements(sql).map_err(|e| user_error(e.sqlstate(), e.to_string()))?;
        if texts.len() > 1 {
            return Err(user_error(
                SQLSTATE_SYNTAX_ERROR,
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let Some(text) = texts.pop() else {
            return Ok(None);
        };
        match self.route(&text)? {
            Some(routed) => Ok(Some(self.prepare(client, routed).await?)),
            None => Ok(None),
        }
    }

    fn get_parameter_types(&self, statement: &Routed) -> PgWireResult<Vec<Type>> {
        match statement {
            Routed::Query(planned) => planned
                .params
                .iter()
                .map(|t| match t {
                    Some(t) => arrow_pg::datatypes::into_pg_type(t),
                    None => Ok(Type::UNKNOWN),
                })
                .collect(),
            _ => Ok(Vec::new()),
        }
    }

    fn get_result_schema(
        &self,
        statement: &Routed,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let format = format.unwrap_or(&Format::UnifiedText);
        let options = Arc::new(FormatOptions::default());
        match statement {
            Routed::Query(Planned {
                schema: Some(schema),
                ..
            })
            | Routed::Ours {
                schema: Some(schema),
                ..
            } => encode::pg_fields(schema, format, &options),
            Routed::Session(SessionStatement::Show(name)) => {
                let columns: Vec<&str> = match name {
                    Some(name) => vec![name.as_str()],
                    None => vec!["name", "setting"],
                };
                let schema = datafusion::arrow::datatypes::Schema::new(
                    columns
                        .into_iter()
                        .map(|c| datafusion::arrow::datatypes::Field::new(c, DataType::Utf8, false))
                        .collect::<Vec<_>>(),
                );
                encode::pg_fields(&schema, format, &options)
            }
            _ => Ok(Vec::new()),
        }
    }
}

#[async_trait]
impl ExtendedQueryHandler for QueryHandler {
    type Statement = Routed;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        Arc::clone(&self.parser)
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Routed>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self._on_execute(&mut Tracked::new(client, self.parser.conn.block()), message)
            .await
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Routed>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Routed>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let routed = &portal.statement.statement;
        let params = match routed {
            Routed::Query(planned) => {
                let inferred: Vec<Option<&DataType>> =
                    planned.params.iter().map(Option::as_ref).collect();
                Some(arrow_pg::datatypes::df::deserialize_parameters(
                    portal, &inferred,
                )?)
            }
            _ => None,
        };
        self.parser
            .run(client, routed, params, &portal.result_column_format)
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
