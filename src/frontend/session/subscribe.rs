//! Running `SUBSCRIBE` and the cursor statements over pgwire.
//!
//! * `SUBSCRIBE ...` and `COPY (SUBSCRIBE ...) TO STDOUT` answer with a `COPY` stream that
//!   lasts until the client cancels it (or its statement timeout, or the source is dropped):
//!   each batch of rows is flushed as soon as it is encoded, so a client sees a transaction's
//!   changes when the capture publishes them, not when a buffer fills.
//! * `DECLARE c CURSOR FOR SUBSCRIBE ... | query`, `FETCH` and `CLOSE` keep the rows in the
//!   connection's cursors (`cursors`).
//!
//! # Invariant
//! A subscription's query is planned in the session like any query (its names, the pinned
//! versions), and the engine decides what it can maintain (`engine::subscribe`); this module
//! only moves its rows. A client that goes away ends the subscription at its next write.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::execution::SendableRecordBatchStream;
use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::{Response, Tag};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyDone, CopyOutResponse};
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;
use sqlparser::ast::Statement;

use crate::frontend::protocol::conn::{ConnState, Shared, Stop, Stopped};
use crate::frontend::protocol::encode;
use crate::frontend::protocol::error::{canceled, datafusion_error, engine_error, user_error};
use crate::frontend::session::block::{self};
use crate::frontend::session::copy::CopyOut;
use crate::frontend::session::cursors::{Cursor, Cursors, DeclareQuery};
use crate::frontend::session::planner::Planner;
use crate::frontend::session::results;
use crate::frontend::session::session_statement;
use crate::frontend::session::statement::{self, Answer, Parsed};
use crate::sql::{CursorCommand, Subscribe, SubscribeStatement};
use crate::sqlstate::SqlState;

/// What runs the statements of this module for one connection.
pub struct Runner<'a> {
    pub shared: &'a Arc<Shared>,
    pub conn: &'a Arc<ConnState>,
    pub planner: &'a Planner,
    pub cursors: &'a Cursors,
}

impl Runner<'_> {
    /// Runs a subscription in the form the statement asks for.
    pub async fn subscribe<C>(
        &self,
        client: &mut C,
        statement: &SubscribeStatement,
        metadata: &HashMap<String, String>,
    ) -> PgWireResult<Response>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match statement {
            SubscribeStatement::Subscribe(subscribe) => {
                let Some(plain) = CopyOut::of(&copy_statement("COPY (SELECT 1) TO STDOUT")?)?
                else {
                    return Err(user_error(
                        SqlState::SYNTAX_ERROR,
                        "expected COPY ... TO STDOUT",
                    ));
                };
                self.copy_out(client, subscribe, &plain, metadata).await
            }
            SubscribeStatement::Copy { subscribe, copy } => {
                let Some(out) = CopyOut::of(&copy_statement(copy)?)? else {
                    return Err(user_error(
                        SqlState::SYNTAX_ERROR,
                        "expected COPY ... TO STDOUT",
                    ));
                };
                self.copy_out(client, subscribe, &out, metadata).await
            }
            SubscribeStatement::Declare {
                cursor,
                hold,
                subscribe,
            } => {
                self.check_block(*hold)?;
                let stop = self.planner.start(metadata);
                let stream = self.start(subscribe, metadata, &stop).await?;
                self.cursors
                    .declare(cursor, Cursor::new(stream, *hold, true))?;
                Ok(Response::Execution(Tag::new("DECLARE CURSOR")))
            }
        }
    }

    /// `DECLARE name CURSOR FOR query`: the query runs now, its rows wait for `FETCH`.
    pub async fn declare(
        &self,
        declare: &DeclareQuery,
        metadata: &HashMap<String, String>,
    ) -> PgWireResult<Response> {
        self.check_block(declare.hold)?;
        let stop = self.planner.start(metadata);
        let query = datafusion::sql::parser::Statement::Statement(Box::new(Statement::Query(
            declare.query.clone(),
        )));
        let (df, _) = self.planner.plan(query, metadata, &stop).await?;
        let stream = tokio::select! {
            biased;
            why = stop.stopped() => return Err(canceled(why == Stopped::TimedOut)),
            stream = df.execute_stream() => stream.map_err(datafusion_error)?,
        };
        self.cursors
            .declare(&declare.cursor, Cursor::new(stream, declare.hold, false))?;
        Ok(Response::Execution(Tag::new("DECLARE CURSOR")))
    }

    /// `FETCH` or `CLOSE`.
    pub async fn cursor(
        &self,
        command: &CursorCommand,
        metadata: &HashMap<String, String>,
        format: &Format,
    ) -> PgWireResult<Response> {
        match command {
            CursorCommand::Fetch { cursor, count } => {
                let found = self.cursors.get(cursor)?;
                let stop = self.planner.start(metadata);
                let rows = found.fetch(*count, &stop).await?;
                let mut response = results::batch_rows(rows, format, metadata)?;
                response.set_command_tag("FETCH");
                Ok(Response::Query(response))
            }
            CursorCommand::Close { cursor } => {
                self.cursors.close(cursor.as_deref())?;
                Ok(Response::Execution(Tag::new(match cursor {
                    Some(_) => "CLOSE CURSOR",
                    None => "CLOSE CURSOR ALL",
                })))
            }
        }
    }

    /// A cursor without `WITH HOLD` lives in a transaction block, as in PostgreSQL.
    fn check_block(&self, hold: bool) -> PgWireResult<()> {
        let status = block::lock(self.conn.block()).status();
        if !hold && status == pgwire::messages::response::TransactionStatus::Idle {
            return Err(user_error(
                SqlState::NO_ACTIVE_SQL_TRANSACTION,
                "DECLARE CURSOR can only be used in transaction blocks (BEGIN first, or \
                 DECLARE ... CURSOR WITH HOLD)",
            ));
        }
        Ok(())
    }

    /// Plans the subscribed query in this session and starts the subscription.
    async fn start(
        &self,
        subscribe: &Subscribe,
        metadata: &HashMap<String, String>,
        stop: &Stop,
    ) -> PgWireResult<SendableRecordBatchStream> {
        let query = match statement::parse(self.shared, &subscribe.query)? {
            Some(Parsed::DataFusion {
                statement,
                answer: Answer::Rows,
            }) if is_query(&statement) => statement,
            _ => {
                return Err(user_error(
                    SqlState::SYNTAX_ERROR,
                    format!(
                        "SUBSCRIBE takes a query (SELECT ... FROM src.db.t), not {:?}",
                        subscribe.query
                    ),
                ))
            }
        };
        let (df, _) = self.planner.plan(query, metadata, stop).await?;
        tokio::select! {
            biased;
            why = stop.stopped() => Err(canceled(why == Stopped::TimedOut)),
            started = self.shared.engine.subscribe(df, subscribe) => started.map_err(engine_error),
        }
    }

    /// Sends the subscription's rows as `COPY` data until it ends, flushing each batch.
    async fn copy_out<C>(
        &self,
        client: &mut C,
        subscribe: &Subscribe,
        out: &CopyOut,
        metadata: &HashMap<String, String>,
    ) -> PgWireResult<Response>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stop = self.planner.start(metadata);
        // Rows go out as they come, even with the client's next messages already read.
        let _streaming = self.conn.streaming();
        let mut stream = self.start(subscribe, metadata, &stop).await?;
        let options = Arc::new(FormatOptions::from_client_metadata(metadata));
        let fields = Arc::new(encode::pg_fields(
            &stream.schema(),
            &Format::UnifiedText,
            &options,
        )?);
        let mut encoder = out.encoder(Arc::clone(&fields));
        let columns = fields.len();
        client
            .feed(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
                0,
                i16::try_from(columns).unwrap_or(i16::MAX),
                vec![0; columns],
            )))
            .await?;
        if let Some(header) = out.header_line(&fields) {
            client.feed(PgWireBackendMessage::CopyData(header)).await?;
        }
        client.flush().await?;
        let zone = session_statement::time_zone(metadata);
        let mut rows = 0;
        loop {
            let stopped = stop.stopped();
            let batch = tokio::select! {
                biased;
                why = stopped => return Err(canceled(why == Stopped::TimedOut)),
                next = stream.next() => match next {
                    Some(batch) => batch.map_err(datafusion_error)?,
                    None => break,
                },
            };
            let batch = match &zone {
                Some(zone) => encode::in_time_zone(batch, zone)?,
                None => batch,
            };
            for row in 0..batch.num_rows() {
                encode::encode_row(&mut encoder, &batch, row, &fields)?;
                client
                    .feed(PgWireBackendMessage::CopyData(encoder.take_copy()))
                    .await?;
            }
            rows += batch.num_rows();
            client.flush().await?;
        }
        client
            .feed(PgWireBackendMessage::CopyDone(CopyDone::new()))
            .await?;
        Ok(Response::Execution(Tag::new("COPY").with_rows(rows)))
    }
}

/// Whether a planned statement is a query (what a subscription or cursor may read).
fn is_query(statement: &datafusion::sql::parser::Statement) -> bool {
    matches!(
        statement,
        datafusion::sql::parser::Statement::Statement(s) if matches!(**s, Statement::Query(_))
    )
}

/// `text`, a `COPY`, in PostgreSQL's grammar (for its options).
fn copy_statement(text: &str) -> PgWireResult<Statement> {
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    let mut statements = sqlparser::parser::Parser::parse_sql(&dialect, text)
        .map_err(|e| user_error(SqlState::SYNTAX_ERROR, e.to_string()))?;
    match (statements.pop(), statements.is_empty()) {
        (Some(statement), true) => Ok(statement),
        _ => Err(user_error(
            SqlState::SYNTAX_ERROR,
            "expected one COPY statement",
        )),
    }
}
