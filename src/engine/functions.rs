//! Table functions that name a source: `changelog_tail`, `mysql_snapshot`, `mysql_binlog`,
//! `reconcile` and `as_of`.
//!
//! `reconcile`'s third argument says what to compare with: `'engine'` (the default) or
//! `'sink:name'`, positional because DataFusion's table functions take no named arguments.
//!
//! The first three take the source's name and `'db.table'` as text literals; `as_of` takes a
//! table's SQL name (`'source.db.table'`, or shorter under the session's default catalog and
//! schema) and the point to read it at. Names are resolved when the query is planned, so an
//! unknown source or table is a planning error that names it.

mod reconcile_sink;

use std::sync::Arc;

use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl};
use datafusion::common::{plan_err, ScalarValue};
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::Expr;

use super::sinks::{Sinks, SinksRef};
use super::source::{RunningSource, Sources, SourcesRef};
use crate::change::position::StartPosition;
use crate::locks::RwLocked;
use crate::provider::as_of::{AsOf, AsOfError, AsOfTable};
use crate::provider::crossing::through_datafusion;
use crate::provider::mysql::{MysqlBinlogTable, MysqlSnapshotTable};
use crate::provider::reconcile::{ReconcileLog, ReconcileTable};
use crate::provider::tail::ChangelogTail;
use crate::sqlstate::SqlState;
use crate::state::changelog::changelog_schema;

/// Registers the functions of this module on `ctx`.
pub(super) fn register(
    ctx: &SessionContext,
    sources: &Arc<Sources>,
    sinks: &Arc<Sinks>,
    log: &ReconcileLog,
) {
    let sources = Arc::downgrade(sources);
    ctx.register_udtf(
        "reconcile",
        Arc::new(ReconcileFunction {
            sources: std::sync::Weak::clone(&sources),
            sinks: Arc::downgrade(sinks),
            log: Arc::clone(log),
        }),
    );
    ctx.register_udtf(
        "changelog_tail",
        Arc::new(SourceFunction {
            sources: std::sync::Weak::clone(&sources),
            kind: Kind::ChangelogTail,
        }),
    );
    ctx.register_udtf(
        "mysql_snapshot",
        Arc::new(SourceFunction {
            sources: std::sync::Weak::clone(&sources),
            kind: Kind::MysqlSnapshot,
        }),
    );
    ctx.register_udtf(
        "mysql_binlog",
        Arc::new(SourceFunction {
            sources: std::sync::Weak::clone(&sources),
            kind: Kind::MysqlBinlog,
        }),
    );
    ctx.register_udtf("as_of", Arc::new(AsOfFunction { sources }));
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `changelog_tail('source', 'db.table' [, 'after'])`: the captured changelog (after a
    /// position, when given), then every new change as it is published (unbounded; end it
    /// with `LIMIT` or by cancelling the query).
    ChangelogTail,
    /// `mysql_snapshot('source', 'db.table')`: a one-off consistent chunked read from MySQL.
    MysqlSnapshot,
    /// `mysql_binlog('source', 'db.table' [, 'start'])`: the table's changes from the binlog.
    MysqlBinlog,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ChangelogTail => "changelog_tail",
            Kind::MysqlSnapshot => "mysql_snapshot",
            Kind::MysqlBinlog => "mysql_binlog",
        }
    }
}

#[derive(Debug)]
struct SourceFunction {
    sources: SourcesRef,
    kind: Kind,
}

fn text(e: &Expr) -> Option<String> {
    match e {
        Expr::Literal(ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)), _) => {
            Some(s.clone())
        }
        _ => None,
    }
}

impl TableFunctionImpl for SourceFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let name = self.kind.name();
        let exprs = args.exprs();
        let (max_args, takes) = match self.kind {
            Kind::ChangelogTail => (
                3,
                "two or three ('source', 'db.table' [, 'after position'])",
            ),
            Kind::MysqlBinlog => (
                3,
                "two or three ('source', 'db.table' [, 'start position'])",
            ),
            Kind::MysqlSnapshot => (2, "two ('source', 'db.table')"),
        };
        let texts: Vec<Option<String>> = exprs.iter().map(text).collect();
        let (Some(Some(source)), Some(Some(table))) = (texts.first(), texts.get(1)) else {
            return plan_err!("{name} takes text literals: a source name and 'db.table'");
        };
        if exprs.len() > max_args || texts.iter().any(Option::is_none) {
            return plan_err!(
                "{name} takes {takes} text literals, got {} arguments",
                exprs.len()
            );
        }
        let running = self.source(source)?;
        let tables = running.status().tables;
        let index = tables
            .iter()
            .position(|t| t.id.to_string() == *table)
            .ok_or_else(|| {
                DataFusionError::Plan(format!("source \"{source}\" captures no table {table}"))
            })?;
        let schema = Arc::clone(&tables[index]);
        Ok(match self.kind {
            Kind::ChangelogTail => {
                // The union of the schemas its entries were written under, as published.
                let changelog = running
                    .published
                    .load()
                    .changelogs
                    .get(index)
                    .map(|log| Arc::clone(&log.schema))
                    .unwrap_or_else(|| changelog_schema(&schema.arrow));
                let mut tail = ChangelogTail::new(
                    Arc::clone(&running.published),
                    running.versions.clone(),
                    index,
                    Arc::clone(&changelog),
                );
                if let Some(Some(after)) = texts.get(2) {
                    let point = AsOf::parse(after).map_err(through_datafusion)?;
                    tail = tail.after(&point)?;
                }
                Arc::new(
                    StreamingTable::try_new(changelog, vec![Arc::new(tail)])?
                        .with_infinite_table(true),
                )
            }
            Kind::MysqlSnapshot => Arc::new(MysqlSnapshotTable::new(
                running.connect().clone(),
                schema,
                &running.capture_options().snapshot,
            )),
            Kind::MysqlBinlog => {
                let start = match texts.get(2) {
                    Some(Some(s)) => s.parse::<StartPosition>().map_err(|e| {
                        DataFusionError::Plan(format!(
                            "{name}: bad start position {s:?}: {e} (use 'file:offset', a GTID set or 'current')"
                        ))
                    })?,
                    _ => StartPosition::Current,
                };
                Arc::new(MysqlBinlogTable::new(
                    running.connect().clone(),
                    schema,
                    start,
                ))
            }
        })
    }
}

impl SourceFunction {
    fn source(&self, name: &str) -> Result<Arc<RunningSource>> {
        source_named(&self.sources, name)
    }
}

/// `as_of('[source.][db.]table', point)`: a current table as it was at a point (a position's
/// text, or a timestamp); see `provider::as_of`.
#[derive(Debug)]
struct AsOfFunction {
    sources: SourcesRef,
}

impl TableFunctionImpl for AsOfFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        let [name, at] = exprs else {
            return plan_err!(
                "as_of takes two arguments, a table's name and the point to read it at \
                 (a position's text or a timestamp), got {}",
                exprs.len()
            );
        };
        let Some(name) = text(name) else {
            return plan_err!(
                "as_of takes the table's name as a text literal, e.g. 'source.db.table'"
            );
        };
        let session = args.session();
        let [source, db, table] = qualified(&name, session)?;
        let running = source_named(&self.sources, &source)?;
        let status = running.status();
        let index = status
            .tables
            .iter()
            .position(|t| t.id.db == db && t.id.table == table)
            .ok_or_else(|| {
                through_datafusion(AsOfError::new(
                    SqlState::UNDEFINED_TABLE,
                    format!("source \"{source}\" captures no table {db}.{table}"),
                ))
            })?;
        let at = point(at, session)?;
        Ok(Arc::new(AsOfTable::new(
            &source,
            Arc::clone(&running.published),
            index,
            Arc::clone(&status.tables[index]),
            at,
            status.consistent_from.clone(),
            Arc::clone(&running.health),
        )))
    }
}

/// `reconcile('source', 'db.table' [, 'engine' | 'sink:name'])`: the differences between the
/// server's table and the engine's at one position (see `provider::reconcile`), or between a
/// sink's target and its query at the target's position (see [`reconcile_sink`]).
#[derive(Debug)]
struct ReconcileFunction {
    sources: SourcesRef,
    sinks: SinksRef,
    log: ReconcileLog,
}

impl TableFunctionImpl for ReconcileFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        let texts: Vec<Option<String>> = exprs.iter().map(text).collect();
        let (Some(Some(source)), Some(Some(table))) = (texts.first(), texts.get(1)) else {
            return plan_err!(
                "reconcile takes text literals: a source name, 'db.table' and optionally \
                 what to compare with ('engine' or 'sink:name')"
            );
        };
        if exprs.len() > 3 || texts.iter().any(Option::is_none) {
            return plan_err!(
                "reconcile takes two or three text literals ('source', 'db.table' \
                 [, 'engine' | 'sink:name']), got {} arguments",
                exprs.len()
            );
        }
        let sink = match texts.get(2).cloned().flatten().as_deref() {
            None | Some("engine") => None,
            Some(against) if against.starts_with("sink:") => {
                Some(against["sink:".len()..].to_string())
            }
            Some(other) => {
                return Err(through_datafusion(AsOfError::new(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    format!(
                        "reconcile compares the server with the engine ('engine') or a sink's \
                         target with its query ('sink:name'); comparing with {other:?} is not \
                         supported"
                    ),
                )));
            }
        };
        let running = source_named(&self.sources, source)?;
        let status = running.status();
        let index = status
            .tables
            .iter()
            .position(|t| t.id.to_string() == *table)
            .ok_or_else(|| {
                through_datafusion(AsOfError::new(
                    SqlState::UNDEFINED_TABLE,
                    format!("source \"{source}\" captures no table {table}"),
                ))
            })?;
        if let Some(sink) = sink {
            let table = status.tables[index].id.to_string();
            return self.against_sink(&sink, running, index, &table);
        }
        Ok(Arc::new(ReconcileTable {
            source: source.clone(),
            chunk_rows: running.capture_options().snapshot.chunk_size,
            connect: running.connect().clone(),
            published: Arc::clone(&running.published),
            index,
            table: Arc::clone(&status.tables[index]),
            consistent_from: status.consistent_from.clone(),
            health: Arc::clone(&running.health),
            log: Arc::clone(&self.log),
        }))
    }
}

impl ReconcileFunction {
    /// `reconcile(..., 'sink:name')` of table `index` of `source`.
    fn against_sink(
        &self,
        name: &str,
        source: Arc<RunningSource>,
        index: usize,
        table: &str,
    ) -> Result<Arc<dyn TableProvider>> {
        use reconcile_sink::SinkReconcileError;
        let sink = self
            .sinks
            .upgrade()
            .and_then(|s| s.read_locked().get(name).cloned())
            .ok_or_else(|| SinkReconcileError::NoSuchSink(name.to_string()).into_df())?;
        if sink.source != source.name {
            return Err(SinkReconcileError::OtherTable {
                sink: name.to_string(),
                in_source: sink.source.clone(),
                reads: format!("source \"{}\"", sink.source),
                named: format!("{}.{table}", source.name),
            }
            .into_df());
        }
        Ok(Arc::new(reconcile_sink::SinkReconcileTable {
            sink,
            source,
            index,
            log: Arc::clone(&self.log),
        }))
    }
}

/// `name` as `[source, db, table]`, the missing leading parts from the session's defaults;
/// unquoted parts are folded to lower case, as in every other name.
fn qualified(name: &str, session: &dyn datafusion::catalog::Session) -> Result<[String; 3]> {
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    let bad = |e: &dyn std::fmt::Display| {
        DataFusionError::Plan(format!("as_of: {name:?} is not a table name: {e}"))
    };
    let parsed = sqlparser::parser::Parser::new(&dialect)
        .try_with_sql(name)
        .and_then(|mut p| {
            let object = p.parse_object_name(false)?;
            p.expect_token(&sqlparser::tokenizer::Token::EOF)?;
            Ok(object)
        })
        .map_err(|e| bad(&e))?;
    let fold = session
        .config()
        .options()
        .sql_parser
        .enable_ident_normalization;
    let mut parts: Vec<String> = Vec::new();
    for part in &parsed.0 {
        let ident = part.as_ident().ok_or_else(|| bad(&"not an identifier"))?;
        parts.push(match ident.quote_style {
            None if fold => ident.value.to_lowercase(),
            _ => ident.value.clone(),
        });
    }
    let defaults = &session.config().options().catalog;
    match parts.as_slice() {
        [t] => Ok([
            defaults.default_catalog.clone(),
            defaults.default_schema.clone(),
            t.clone(),
        ]),
        [d, t] => Ok([defaults.default_catalog.clone(), d.clone(), t.clone()]),
        [s, d, t] => Ok([s.clone(), d.clone(), t.clone()]),
        _ => Err(bad(&"expected source.db.table")),
    }
}

/// The point of `as_of`: a position's text, or an expression of a time (a `TIMESTAMP`
/// literal, `now() - INTERVAL '1 hour'`, ...), a time without a zone being UTC.
pub(super) fn point(at: &Expr, session: &dyn datafusion::catalog::Session) -> Result<AsOf> {
    use arrow::datatypes::{DataType, TimeUnit};
    if let Some(text) = text(at) {
        return AsOf::parse(&text).map_err(through_datafusion);
    }
    let schema = datafusion::common::DFSchema::empty();
    let expr = session.create_physical_expr(at.clone(), &schema)?;
    let one_row = arrow::array::RecordBatch::try_new_with_options(
        Arc::new(arrow::datatypes::Schema::empty()),
        vec![],
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    let value = match expr.evaluate(&one_row)? {
        datafusion::logical_expr::ColumnarValue::Scalar(v) => v,
        datafusion::logical_expr::ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
    };
    match &value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => AsOf::parse(s).map_err(through_datafusion),
        v if matches!(v.data_type(), DataType::Timestamp(..)) && !v.is_null() => {
            match v.cast_to(&DataType::Timestamp(TimeUnit::Microsecond, None))? {
                ScalarValue::TimestampMicrosecond(Some(t), _) => Ok(AsOf::Time(t)),
                other => plan_err!("as_of: the time {other} cannot be read"),
            }
        }
        other => plan_err!(
            "as_of reads a table at a position's text or a timestamp, not at {other} ({})",
            other.data_type()
        ),
    }
}

/// The running source named `name`.
fn source_named(sources: &SourcesRef, name: &str) -> Result<Arc<RunningSource>> {
    let sources = sources
        .upgrade()
        .ok_or_else(|| DataFusionError::Plan("the engine is gone".into()))?;
    let running = sources.read_locked().get(name).cloned();
    running.ok_or_else(|| DataFusionError::Plan(format!("source \"{name}\" does not exist")))
}
