//! Table functions that name a source: `changelog_tail`, `mysql_snapshot`, `mysql_binlog`.
//!
//! Each takes the source's name and `'db.table'` as text literals and resolves them when the
//! query is planned, so an unknown source or table is a planning error that names it.

use std::sync::Arc;

use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl};
use datafusion::common::{plan_err, ScalarValue};
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::Expr;

use super::source::{RunningSource, Sources, SourcesRef};
use crate::change::position::StartPosition;
use crate::provider::mysql::{MysqlBinlogTable, MysqlSnapshotTable};
use crate::provider::tail::ChangelogTail;
use crate::state::changelog::changelog_schema;

/// Registers the functions of this module on `ctx`.
pub(super) fn register(ctx: &SessionContext, sources: &Arc<Sources>) {
    let sources = Arc::downgrade(sources);
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
            sources,
            kind: Kind::MysqlBinlog,
        }),
    );
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `changelog_tail('source', 'db.table')`: the captured changelog, then every new change
    /// as it is published (unbounded; end it with `LIMIT` or by cancelling the query).
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
        let max_args = match self.kind {
            Kind::MysqlBinlog => 3,
            _ => 2,
        };
        let texts: Vec<Option<String>> = exprs.iter().map(text).collect();
        let (Some(Some(source)), Some(Some(table))) = (texts.first(), texts.get(1)) else {
            return plan_err!("{name} takes text literals: a source name and 'db.table'");
        };
        if exprs.len() > max_args || texts.iter().any(Option::is_none) {
            return plan_err!(
                "{name} takes {} text literals, got {} arguments",
                if max_args == 3 {
                    "two or three ('source', 'db.table' [, 'start position'])"
                } else {
                    "two ('source', 'db.table')"
                },
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
                let tail = ChangelogTail::new(
                    Arc::clone(&running.published),
                    running.versions.clone(),
                    index,
                    Arc::clone(&changelog),
                );
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
        let sources = self
            .sources
            .upgrade()
            .ok_or_else(|| DataFusionError::Plan("the engine is gone".into()))?;
        let running = sources
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned();
        running.ok_or_else(|| DataFusionError::Plan(format!("source \"{name}\" does not exist")))
    }
}
