//! `SUBSCRIBE`: checking a subscribed query, compiling it to steps over one table's rows, and
//! choosing where it starts (see `provider::subscribe` for what it sends).
//!
//! # Invariant
//! A subscribed query is a function of one row image: one scan of a captured current table
//! with projections, filters, aliases and scalar expressions. Anything that needs other rows
//! (joins, aggregates, windows, `DISTINCT`, `ORDER BY`, `LIMIT`, subqueries) is refused with
//! `0A000` before anything runs, because a change to one row would not say how its answer
//! changes. The start is read from the version the statement pinned, so the snapshot and the
//! first change sent are adjacent: nothing between them is missing or sent twice.

use std::sync::Arc;

use datafusion::common::tree_node::TreeNode;
use datafusion::common::DFSchema;
use datafusion::datasource::source_as_provider;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::prelude::DataFrame;

use super::error::EngineError;
use super::functions;
use super::session::Engine;
use crate::change::position::ChangePosition;
use crate::provider::as_of::{resolve, AsOf, AsOfTable};
use crate::provider::changelog::ChangelogProvider;
use crate::provider::current::CurrentTableProvider;
use crate::provider::subscribe::{
    resume_text, subscription, RowQuery, Start, Step, SubscribeError,
};
use crate::provider::tail::{skip_text, TailReader};
use crate::provider::version_for;
use crate::sql::Subscribe;
use crate::sqlstate::SqlState;
use crate::state::changelog::format;

fn unsupported(what: &str, why: &str) -> DataFusionError {
    SubscribeError::new(
        SqlState::FEATURE_NOT_SUPPORTED,
        format!(
            "SUBSCRIBE cannot maintain {what}: {why}; a subscription sends the changes of \
             projections, filters and scalar expressions over one captured table"
        ),
    )
    .into_df()
}

/// The scan a subscribed query reads, found while compiling its steps.
struct Scanned {
    source: String,
    index: usize,
}

/// Compiles `plan` (analysed, not optimised) into steps in evaluation order.
fn compile(
    plan: &LogicalPlan,
    state: &datafusion::execution::session_state::SessionState,
    steps: &mut Vec<Step>,
) -> Result<Scanned, DataFusionError> {
    for expr in plan.expressions() {
        let subquery = expr.exists(|e| {
            Ok(matches!(
                e,
                Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
            ))
        })?;
        if subquery {
            return Err(unsupported(
                "a subquery",
                "it reads rows other than the changed one",
            ));
        }
    }
    match plan {
        LogicalPlan::Projection(p) => {
            let scanned = compile(&p.input, state, steps)?;
            let mut exprs = Vec::with_capacity(p.expr.len());
            for (expr, field) in p.expr.iter().zip(p.schema.fields()) {
                let physical = state.create_physical_expr(expr.clone(), p.input.schema())?;
                exprs.push((field.name().clone(), physical));
            }
            steps.push(Step::Project(exprs));
            Ok(scanned)
        }
        LogicalPlan::Filter(f) => {
            let scanned = compile(&f.input, state, steps)?;
            let predicate = state.create_physical_expr(f.predicate.clone(), f.input.schema())?;
            steps.push(Step::Filter(predicate));
            Ok(scanned)
        }
        LogicalPlan::SubqueryAlias(a) => compile(&a.input, state, steps),
        LogicalPlan::TableScan(scan) => {
            let provider = source_as_provider(&scan.source)?;
            if provider.downcast_ref::<ChangelogProvider>().is_some() {
                return Err(unsupported(
                    "a changelog",
                    "it subscribes to a current table and sends its changes with their \
                     _position and _op (SUBSCRIBE TO (SELECT ... FROM src.db.t)); for the raw \
                     changelog use changelog_tail('src', 'db.t')",
                ));
            }
            let Some(current) = provider.downcast_ref::<CurrentTableProvider>() else {
                return Err(unsupported(
                    &format!("a scan of {}", scan.table_name),
                    "only captured tables change",
                ));
            };
            if scan.fetch.is_some() {
                return Err(unsupported("LIMIT", "a subscription sends every change"));
            }
            if let Some(indexes) = &scan.projection {
                steps.push(Step::Columns(indexes.clone()));
            }
            for filter in &scan.filters {
                steps.push(Step::Filter(
                    state.create_physical_expr(filter.clone(), &scan.projected_schema)?,
                ));
            }
            Ok(Scanned {
                source: current.source().to_string(),
                index: current.index(),
            })
        }
        LogicalPlan::Join(_) => Err(unsupported(
            "a join",
            "a change to one table's row does not say how the join's rows change",
        )),
        LogicalPlan::Aggregate(_) => Err(unsupported(
            "an aggregate or GROUP BY",
            "a changed row alone does not give the groups' new values",
        )),
        LogicalPlan::Window(_) => Err(unsupported("a window function", "it reads other rows")),
        LogicalPlan::Distinct(_) => Err(unsupported(
            "DISTINCT or UNION",
            "removing duplicates needs the other rows",
        )),
        LogicalPlan::Union(_) => Err(unsupported("UNION", "subscribe to each table on its own")),
        LogicalPlan::Sort(_) => Err(unsupported(
            "ORDER BY",
            "changes are sent in the source's order",
        )),
        LogicalPlan::Limit(_) => Err(unsupported(
            "LIMIT or OFFSET",
            "a subscription sends every change",
        )),
        other => Err(unsupported(
            &format!("{} in its plan", other.display()),
            "only a captured table's rows can be subscribed to",
        )),
    }
}

impl Engine {
    /// Starts `request` over its query's frame `df`, planned by the caller in its session
    /// (which pinned a version of every source for it): the subscription's endless rows (see
    /// the module docs).
    pub async fn subscribe(
        &self,
        df: DataFrame,
        request: &Subscribe,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        let (state, plan) = df.into_parts();
        let plan = state
            .analyzer()
            .execute_and_check(plan, state.config_options(), |_, _| {})?;
        let mut steps = Vec::new();
        let scanned = compile(&plan, &state, &mut steps)?;
        let running = self
            .running_sources()
            .into_iter()
            .find(|s| s.name == scanned.source)
            .ok_or_else(|| EngineError::NoSuchSource(scanned.source.clone()))?;
        let version = version_for(&state, &running.name, &running.published);
        let (Some(snap), Some(log), Some(position)) = (
            version.tables.get(scanned.index),
            version.changelogs.get(scanned.index),
            version.position.clone(),
        ) else {
            return Err(SubscribeError::new(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "source \"{}\" has not published its tables yet: subscribe once its \
                     snapshot is handed over (cdc.sources.consistent_from)",
                    running.name
                ),
            )
            .into_df()
            .into());
        };
        let table = Arc::clone(snap.schema());
        let shown = table.id.to_string();
        running.health.check(
            state.config(),
            &running.name,
            &table.id,
            &shown,
            version.stopped.get(&scanned.index),
        )?;
        let query = Arc::new(RowQuery::new(steps, &table.arrow)?);
        for reserved in [format::POSITION, format::OP, format::BEFORE] {
            if query.output().field_with_name(reserved).is_ok() {
                return Err(SubscribeError::new(
                    SqlState::DUPLICATE_COLUMN,
                    format!(
                        "a subscribed query cannot have a column named {reserved}: the \
                         subscription adds it; rename the column (AS ...)"
                    ),
                )
                .into_df()
                .into());
            }
        }
        let tail = TailReader::new(
            Arc::clone(&running.published),
            running.versions.clone(),
            scanned.index,
            Arc::clone(&log.schema),
        );
        let at = match &request.as_of {
            Some(text) => {
                super::limits::check_nesting(text)?;
                let expr = state.create_logical_expr(text, &DFSchema::empty())?;
                Some(functions::point(&expr, &state)?)
            }
            None => None,
        };
        let start = match (at, request.snapshot) {
            (None, snapshot) => {
                if snapshot && !version.consistent {
                    return Err(SubscribeError::new(
                        SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                        format!(
                            "source \"{}\" has not handed its snapshot over yet: until then {shown} \
                             is not the server's state at any one position; subscribe once \
                             cdc.sources.consistent is true, or WITH (snapshot = false)",
                            running.name
                        ),
                    )
                    .into_df()
                    .into());
                }
                Start {
                    snapshot: snapshot.then(|| snap.scan_all()).transpose().map_err(|e| {
                        EngineError::DataFusion(DataFusionError::ArrowError(Box::new(e), None))
                    })?,
                    position: ChangePosition::text_before(&position),
                    reader: tail.from_offset(log.num_rows()),
                }
            }
            (Some(at), true) => {
                let as_of = AsOfTable::new(
                    &running.name,
                    Arc::clone(&running.published),
                    scanned.index,
                    Arc::clone(&table),
                    at,
                    running.status().consistent_from,
                    Arc::clone(&running.health),
                );
                let (rows, cut) = as_of.state_and_cut(&version).await?;
                Start {
                    snapshot: Some(rows),
                    position: resume_text(&cut),
                    reader: tail.skipping_through(cut.text()),
                }
            }
            (Some(at), false) => {
                let (skip, from) = match &at {
                    AsOf::Time(_) => {
                        let cut = resolve(&at, log, &position).await?;
                        (cut.text(), resume_text(&cut))
                    }
                    AsOf::Entry(entry) => (skip_text(&at)?, entry.to_string()),
                    AsOf::Binlog(coord) => (skip_text(&at)?, ChangePosition::text_before(coord)),
                };
                Start {
                    snapshot: None,
                    position: from,
                    reader: tail.skipping_through(skip),
                }
            }
        };
        Ok(subscription(query, table, start, request.progress))
    }
}
