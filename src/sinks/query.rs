//! A sink's query: which shapes a sink can maintain, which captured tables it reads, how its
//! rows are keyed, and the same plan run again over each commit's changes.
//!
//! # Invariant
//! A sink's query is a stateless function of one changelog entry (or one row image): scans
//! of captured tables of one source, projections, filters, scalar expressions and `UNION
//! ALL`. Anything that needs more than one row at a time (joins, aggregates, windows,
//! `DISTINCT`, `ORDER BY`, `LIMIT`, subqueries) is refused with 0A000, because running it
//! over one commit's changes would not give the query's answer. The plan is kept as
//! planned, before optimisation, so that [`SinkQuery::bind`] can put each commit's rows in
//! place of the scans and the optimiser then plans them as ordinary in-memory tables (no
//! filter is left pushed into a scan that would ignore it).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::ScalarValue;
use datafusion::datasource::{provider_as_source, source_as_provider, MemTable};
use datafusion::logical_expr::{Expr, LogicalPlan};

use super::error::SinkError;
use super::target::SinkMode;
use crate::change::schema::TableSchema;
use crate::provider::changelog::ChangelogProvider;
use crate::provider::current::CurrentTableProvider;
use crate::state::changelog::format;

/// What a scan of the query reads.
#[derive(Debug, Clone)]
pub enum ScanKind {
    /// A changelog (`db."t$changelog"`): each entry is a row.
    Changelog,
    /// A current table (`db.t`): its rows, keyed by the table's primary key.
    Current(Arc<TableSchema>),
}

/// One scan of a captured table in the query.
#[derive(Debug, Clone)]
pub struct SinkScan {
    /// The table's index in its source's versions.
    pub table: usize,
    pub kind: ScanKind,
    /// The columns the scan was planned with.
    pub schema: SchemaRef,
    /// The provider the plan names, to find the scan again in [`SinkQuery::bind`].
    provider: usize,
}

/// A checked sink query; see the module docs.
#[derive(Debug, Clone)]
pub struct SinkQuery {
    /// The plan as planned (not optimised).
    pub plan: LogicalPlan,
    /// Upsert mode: the plan without its filters, which finds the target key of every row a
    /// commit touches (also rows the filter now drops, whose key must be deleted).
    pub unfiltered: Option<LogicalPlan>,
    pub scans: Vec<SinkScan>,
    /// The one source every scan reads.
    pub source: String,
    pub mode: SinkMode,
    /// Upsert mode: the output columns that key the target.
    pub key: Vec<String>,
    /// The output columns.
    pub schema: SchemaRef,
}

fn unsupported(what: &str, why: &str) -> SinkError {
    SinkError::Unsupported(format!(
        "a sink's query cannot use {what}: {why}; a sink maintains projections, filters, scalar expressions and UNION ALL of captured tables"
    ))
}

/// Refuses the plan nodes a sink cannot run one commit at a time.
fn check_node(node: &LogicalPlan) -> Result<(), SinkError> {
    let refuse = |what: &str, why: &str| Err(unsupported(what, why));
    match node {
        LogicalPlan::Projection(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::TableScan(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Union(_) => {}
        LogicalPlan::Join(_) => {
            return refuse(
                "a join",
                "each commit carries only the changes of that commit, not the other side's rows",
            )
        }
        LogicalPlan::Aggregate(_) => {
            return refuse(
                "an aggregate or GROUP BY",
                "a commit's changes alone do not give the groups' values (aggregate the target instead)",
            )
        }
        LogicalPlan::Window(_) => {
            return refuse("a window function", "it needs rows of other commits")
        }
        LogicalPlan::Distinct(_) => {
            return refuse(
                "DISTINCT or UNION without ALL",
                "removing duplicates needs rows of other commits (use UNION ALL)",
            )
        }
        LogicalPlan::Sort(_) => {
            return refuse(
                "ORDER BY",
                "a sink writes changes in source order (order when reading the target)",
            )
        }
        LogicalPlan::Limit(_) => return refuse("LIMIT or OFFSET", "a sink writes every change"),
        other => {
            return refuse(
                &format!("{} in its plan", other.display()),
                "only captured tables can be read",
            )
        }
    }
    for expr in node.expressions() {
        let has_subquery = expr
            .exists(|e| {
                Ok(matches!(
                    e,
                    Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
                ))
            })
            .unwrap_or(false);
        if has_subquery {
            return refuse("a subquery", "it reads rows outside the commit");
        }
    }
    Ok(())
}

/// The address of the provider behind a scan's source, which names the scan.
fn provider_id(source: &Arc<dyn datafusion::logical_expr::TableSource>) -> Option<usize> {
    let provider = source_as_provider(source).ok()?;
    Some(Arc::as_ptr(&provider) as *const () as usize)
}

/// How an output column relates to the key of the rows it comes from.
#[derive(Debug, Clone, PartialEq)]
enum Role {
    /// The `k`-th primary-key column, passed through (perhaps renamed).
    Key(usize),
    /// A constant (a shard's tag in a `UNION ALL`).
    Tag(ScalarValue),
    Other,
}

/// The role of each output column of `plan` (current-table scans only).
fn roles(plan: &LogicalPlan, scans: &HashMap<usize, SinkScan>) -> Vec<Role> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let table = provider_id(&scan.source)
                .and_then(|id| scans.get(&id))
                .and_then(|s| match &s.kind {
                    ScanKind::Current(t) => Some(Arc::clone(t)),
                    ScanKind::Changelog => None,
                });
            let n = scan.projected_schema.fields().len();
            let mut out = vec![Role::Other; n];
            if let Some(table) = table {
                for (k, &column) in table.primary_key.iter().enumerate() {
                    let projected = match &scan.projection {
                        Some(p) => p.iter().position(|&c| c == column),
                        None => Some(column),
                    };
                    if let Some(i) = projected.filter(|&i| i < n) {
                        out[i] = Role::Key(k);
                    }
                }
            }
            out
        }
        LogicalPlan::Projection(p) => {
            let input = roles(&p.input, scans);
            p.expr
                .iter()
                .map(|e| match e.clone().unalias_nested().data {
                    Expr::Column(c) => p
                        .input
                        .schema()
                        .index_of_column(&c)
                        .ok()
                        .and_then(|i| input.get(i).cloned())
                        .unwrap_or(Role::Other),
                    Expr::Literal(v, _) => Role::Tag(v),
                    _ => Role::Other,
                })
                .collect()
        }
        LogicalPlan::Union(u) => {
            let branches: Vec<Vec<Role>> = u.inputs.iter().map(|i| roles(i, scans)).collect();
            let n = u.schema.fields().len();
            (0..n)
                .map(|i| {
                    let mut column = branches.iter().map(|b| b.get(i).cloned());
                    match column.next().flatten() {
                        Some(Role::Key(k)) if column.all(|r| r == Some(Role::Key(k))) => {
                            Role::Key(k)
                        }
                        Some(Role::Tag(v)) => {
                            let all_tags = branches
                                .iter()
                                .all(|b| matches!(b.get(i), Some(Role::Tag(_))));
                            if all_tags {
                                Role::Tag(v)
                            } else {
                                Role::Other
                            }
                        }
                        _ => Role::Other,
                    }
                })
                .collect()
        }
        other => other
            .inputs()
            .first()
            .map(|i| roles(i, scans))
            .unwrap_or_default(),
    }
}

impl SinkQuery {
    /// Checks `plan` (as planned, not optimised) and finds what it reads; `mode` is the one
    /// the statement asked for, if any.
    pub fn analyze(plan: LogicalPlan, mode: Option<SinkMode>) -> Result<Self, SinkError> {
        let mut scans: HashMap<usize, SinkScan> = HashMap::new();
        let mut order = Vec::new();
        let mut source: Option<String> = None;
        let mut failure = None;
        plan.apply(|node| {
            if let Err(e) = check_node(node) {
                failure = Some(e);
                return Ok(TreeNodeRecursion::Stop);
            }
            if let LogicalPlan::TableScan(scan) = node {
                match Self::scan_of(scan) {
                    Ok((name, s)) => {
                        if source.as_ref().is_some_and(|n| *n != name) {
                            failure = Some(SinkError::Unsupported(format!(
                                "a sink reads one source, and this query reads {} and {name}; create one sink per source",
                                source.as_deref().unwrap_or_default()
                            )));
                            return Ok(TreeNodeRecursion::Stop);
                        }
                        source = Some(name);
                        order.push(s.provider);
                        scans.entry(s.provider).or_insert(s);
                    }
                    Err(e) => {
                        failure = Some(e);
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| SinkError::Input(e.to_string()))?;
        if let Some(e) = failure {
            return Err(e);
        }
        let Some(source) = source else {
            return Err(SinkError::Unsupported(
                "a sink's query must read a captured table: FROM source.db.\"t$changelog\" or FROM source.db.t".into(),
            ));
        };
        let changelog = scans
            .values()
            .all(|s| matches!(s.kind, ScanKind::Changelog));
        let current = scans
            .values()
            .all(|s| matches!(s.kind, ScanKind::Current(_)));
        let implied = match (changelog, current) {
            (true, _) => SinkMode::Changelog,
            (_, true) => SinkMode::Upsert,
            _ => {
                return Err(SinkError::Unsupported(
                    "a sink reads either changelogs or current tables, not both".into(),
                ))
            }
        };
        let mode = mode.unwrap_or(implied);
        if mode != implied {
            return Err(SinkError::Invalid(match mode {
                SinkMode::Upsert => "mode = 'upsert' reads current tables: write FROM source.db.t instead of its changelog".into(),
                SinkMode::Changelog => "mode = 'changelog' reads changelogs: write FROM source.db.\"t$changelog\" instead of the current table".into(),
            }));
        }
        let schema: SchemaRef = Arc::clone(plan.schema().inner());
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let mut key = Vec::new();
        match mode {
            SinkMode::Changelog => {
                for required in [format::OP, format::POSITION] {
                    if !names.contains(&required) {
                        return Err(SinkError::Invalid(format!(
                            "a changelog sink's query must select {required} (add it, or SELECT *): without it the target cannot tell the changes apart"
                        )));
                    }
                }
            }
            SinkMode::Upsert => {
                let roles = roles(&plan, &scans);
                let width = scans
                    .values()
                    .filter_map(|s| match &s.kind {
                        ScanKind::Current(t) => Some(t.primary_key.len()),
                        ScanKind::Changelog => None,
                    })
                    .max()
                    .unwrap_or(0);
                if width == 0 {
                    return Err(SinkError::Unsupported(
                        "an upsert sink needs tables with a primary key; sink the changelog instead (FROM source.db.\"t$changelog\")".into(),
                    ));
                }
                for k in 0..width {
                    let Some(i) = roles.iter().position(|r| *r == Role::Key(k)) else {
                        return Err(SinkError::Invalid(format!(
                            "an upsert sink's query must select every primary-key column unchanged (renaming is fine); key column {} is missing or computed",
                            k + 1
                        )));
                    };
                    key.push(names[i].to_string());
                }
                let union = plan
                    .exists(|n| Ok(matches!(n, LogicalPlan::Union(_))))
                    .unwrap_or(false);
                if union {
                    for (i, role) in roles.iter().enumerate() {
                        if matches!(role, Role::Tag(_)) {
                            key.push(names[i].to_string());
                        }
                    }
                }
            }
        }
        let unfiltered = match mode {
            SinkMode::Upsert => Some(
                plan.clone()
                    .transform_up(|node| match node {
                        LogicalPlan::Filter(f) => {
                            Ok(Transformed::yes(Arc::unwrap_or_clone(f.input)))
                        }
                        other => Ok(Transformed::no(other)),
                    })
                    .map_err(|e| SinkError::Input(e.to_string()))?
                    .data,
            ),
            SinkMode::Changelog => None,
        };
        let scans = order.iter().filter_map(|id| scans.get(id).cloned()).fold(
            Vec::<SinkScan>::new(),
            |mut out, s| {
                if !out.iter().any(|o| o.provider == s.provider) {
                    out.push(s);
                }
                out
            },
        );
        Ok(Self {
            plan,
            unfiltered,
            scans,
            source,
            mode,
            key,
            schema,
        })
    }

    /// The source and scan a table scan of the plan reads, or why a sink cannot read it.
    fn scan_of(
        scan: &datafusion::logical_expr::TableScan,
    ) -> Result<(String, SinkScan), SinkError> {
        let not_captured = || {
            SinkError::Unsupported(format!(
                "a sink reads captured tables only, and {} is not one",
                scan.table_name
            ))
        };
        let provider = source_as_provider(&scan.source).map_err(|_| not_captured())?;
        let id = Arc::as_ptr(&provider) as *const () as usize;
        if let Some(log) = provider.downcast_ref::<ChangelogProvider>() {
            return Ok((
                log.source().to_string(),
                SinkScan {
                    table: log.index(),
                    kind: ScanKind::Changelog,
                    schema: provider.schema(),
                    provider: id,
                },
            ));
        }
        if let Some(current) = provider.downcast_ref::<CurrentTableProvider>() {
            return Ok((
                current.source().to_string(),
                SinkScan {
                    table: current.index(),
                    kind: ScanKind::Current(Arc::clone(current.table())),
                    schema: provider.schema(),
                    provider: id,
                },
            ));
        }
        Err(not_captured())
    }

    /// `plan` (this query's plan or its unfiltered form) with scan `i` reading `inputs[i]`.
    pub fn bind(
        &self,
        plan: &LogicalPlan,
        inputs: &[Vec<RecordBatch>],
    ) -> Result<LogicalPlan, SinkError> {
        let index: HashMap<usize, usize> = self
            .scans
            .iter()
            .enumerate()
            .map(|(i, s)| (s.provider, i))
            .collect();
        plan.clone()
            .transform_up(|node| {
                let LogicalPlan::TableScan(mut scan) = node else {
                    return Ok(Transformed::no(node));
                };
                let Some(i) = provider_id(&scan.source).and_then(|id| index.get(&id).copied())
                else {
                    return Ok(Transformed::no(LogicalPlan::TableScan(scan)));
                };
                let table = MemTable::try_new(
                    Arc::clone(&self.scans[i].schema),
                    vec![inputs.get(i).cloned().unwrap_or_default()],
                )?;
                scan.source = provider_as_source(Arc::new(table));
                Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
            })
            .map(|t| t.data)
            .map_err(|e| SinkError::Input(format!("binding a commit's rows to the query: {e}")))
    }
}
