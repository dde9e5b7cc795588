//! The Prometheus endpoint (`--metrics-listen`): what an operator of a CDC pipeline watches,
//! in the text exposition format, at `GET /metrics`; the same listener answers the probes
//! (`/health`, `/ready`, see `probes`).
//!
//! # Invariant
//! Every figure is read from the same status tables users query (`cdc.sources`, `cdc.tables`,
//! `cdc.sinks`) at scrape time (the front end's own counters come from `stats`), so the endpoint and SQL never disagree; a scrape never blocks
//! capture (it plans ordinary queries over status snapshots). The HTTP side is three routes
//! answered on a plain TCP listener: a scrape or a probe needs no more, and an HTTP server
//! crate would add its build to every build.

use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, UInt64Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::engine::Engine;
use crate::frontend::ops::probes::{readiness, InitGate};
use crate::frontend::ops::stats::BUCKETS;
use crate::frontend::protocol::server::FrontendMetrics;

/// How a status column becomes a metric.
enum Kind {
    Gauge,
    Counter,
}

/// One status table: its query, the columns that label each row, and the metrics of its
/// numeric and state columns.
struct Family {
    table: &'static str,
    prefix: &'static str,
    /// (status column, label name)
    labels: &'static [(&'static str, &'static str)],
    /// (status column, metric suffix, kind, help)
    values: &'static [(&'static str, &'static str, Kind, &'static str)],
    /// Text columns shown as `<prefix>_<column>{..., <column>="value"} 1`.
    states: &'static [&'static str],
}

const FAMILIES: &[Family] = &[
    Family {
        table: "cdc.sources",
        prefix: "cdcfusion_source",
        labels: &[("name", "source")],
        values: &[
            ("lag_seconds", "lag_seconds", Kind::Gauge, "Seconds between the server's last commit and the newest one published."),
            ("lag_bytes", "lag_bytes", Kind::Gauge, "Binlog bytes between the server's position and the published one."),
            ("transactions", "transactions_total", Kind::Counter, "Source transactions applied since the engine started."),
            ("changes", "changes_total", Kind::Counter, "Row changes applied from the binlog since the engine started."),
            ("snapshot_rows", "snapshot_rows", Kind::Gauge, "Rows the snapshot has read so far."),
            ("snapshot_eta_seconds", "snapshot_eta_seconds", Kind::Gauge, "Estimated seconds until the snapshot's chunks are all read."),
            ("retries", "retries_total", Kind::Counter, "Times the capture was restarted after a failure that passes."),
            ("checkpoints", "checkpoints_total", Kind::Counter, "Checkpoints that succeeded since the engine started."),
            ("checkpoint_failures", "checkpoint_failures_total", Kind::Counter, "Checkpoints that failed since the engine started."),
            ("checkpoint_age_seconds", "checkpoint_age_seconds", Kind::Gauge, "Seconds since the last checkpoint succeeded."),
            ("last_checkpoint_seconds", "checkpoint_duration_seconds", Kind::Gauge, "Seconds the last successful checkpoint took."),
            ("consistent", "consistent", Kind::Gauge, "1 once the source's tables are consistent (snapshot handed over)."),
            ("purge_distance_files", "purge_distance_files", Kind::Gauge, "Binlog files the server holds before the one of the published position."),
            ("purge_distance_bytes", "purge_distance_bytes", Kind::Gauge, "Binlog bytes the server holds before the published position."),
            ("purge_eta_seconds", "purge_eta_seconds", Kind::Gauge, "Seconds at least until the binlog of the published position may be purged by age."),
            ("purge_warning", "purge_warning", Kind::Gauge, "1 while the binlog of the published position may be purged soon (see cdc.sources.warnings)."),
        ],
        states: &["phase", "state"],
    },
    Family {
        table: "cdc.tables",
        prefix: "cdcfusion_table",
        labels: &[("source", "source"), ("db", "db"), ("table", "table")],
        values: &[
            ("rows", "rows", Kind::Gauge, "Rows of the current table."),
            ("chunks_done", "snapshot_chunks_done", Kind::Gauge, "Snapshot chunks read and applied."),
            ("chunks_total", "snapshot_chunks_total", Kind::Gauge, "Snapshot chunks planned."),
            ("snapshot_rows", "snapshot_rows", Kind::Gauge, "Rows of the table's snapshot chunks read and applied."),
            ("snapshot_rows_estimated", "snapshot_rows_estimated", Kind::Gauge, "The server's estimate of the table's rows when its snapshot was planned."),
            ("changelog_entries", "changelog_entries", Kind::Gauge, "Entries in the table's changelog."),
            ("complete", "snapshot_complete", Kind::Gauge, "1 once the table's snapshot is complete."),
        ],
        states: &["phase", "state"],
    },
    Family {
        table: "cdc.sinks",
        prefix: "cdcfusion_sink",
        labels: &[("name", "sink"), ("source", "source")],
        values: &[
            ("committed_commit", "committed_commit", Kind::Gauge, "Number of the sink's last commit held by its target."),
            ("lag_entries", "lag_entries", Kind::Gauge, "Changelog entries published but not yet committed to the target."),
            ("lag_bytes", "lag_bytes", Kind::Gauge, "Binlog bytes between the sink's committed position and the source's published one."),
            ("lag_seconds", "lag_seconds", Kind::Gauge, "Seconds the sink has been behind its source."),
            ("rows_written", "rows_total", Kind::Counter, "Rows (and deleted keys) written since the engine started."),
            ("commits", "commits_total", Kind::Counter, "Commits written since the engine started."),
            ("retries", "retries_total", Kind::Counter, "Failed attempts retried."),
        ],
        states: &["state"],
    },
];

/// `value` escaped for a label.
fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `column[row]` as a number, when it has one.
fn number(batch: &RecordBatch, column: &str, row: usize) -> Option<f64> {
    let array = batch.column_by_name(column)?;
    if array.is_null(row) {
        return None;
    }
    match array.data_type() {
        DataType::UInt64 => Some(array.as_primitive::<UInt64Type>().value(row) as f64),
        DataType::Float64 => Some(array.as_primitive::<Float64Type>().value(row)),
        DataType::Boolean => Some(f64::from(u8::from(array.as_boolean().value(row)))),
        _ => None,
    }
}

/// Every value of `column` as text (NULL as `None`), cast once for the whole batch.
fn texts(batch: &RecordBatch, column: &str) -> Vec<Option<String>> {
    let Some(array) = batch
        .column_by_name(column)
        .and_then(|a| arrow::compute::cast(a, &DataType::Utf8).ok())
    else {
        return vec![None; batch.num_rows()];
    };
    array
        .as_string::<i32>()
        .iter()
        .map(|v| v.map(str::to_string))
        .collect()
}

/// One family's lines from its status rows.
fn render_family(out: &mut String, family: &Family, batches: &[RecordBatch]) {
    // The labels of each row, built once and shared by all the family's metrics.
    let labels: Vec<Vec<String>> = batches
        .iter()
        .map(|batch| {
            let columns: Vec<Vec<Option<String>>> = family
                .labels
                .iter()
                .map(|(column, _)| texts(batch, column))
                .collect();
            (0..batch.num_rows())
                .map(|row| {
                    family
                        .labels
                        .iter()
                        .zip(&columns)
                        .map(|((_, label), values)| {
                            let value = values[row].as_deref().unwrap_or_default();
                            format!("{label}=\"{}\"", label_value(value))
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .collect()
        })
        .collect();
    for (column, suffix, kind, help) in family.values {
        let name = format!("{}_{suffix}", family.prefix);
        let kind = match kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (batch, labels) in batches.iter().zip(&labels) {
            for (row, labels) in labels.iter().enumerate() {
                if let Some(v) = number(batch, column, row) {
                    let _ = writeln!(out, "{name}{{{labels}}} {v}");
                }
            }
        }
    }
    for column in family.states {
        let name = format!("{}_{column}", family.prefix);
        let _ = writeln!(
            out,
            "# HELP {name} The {column} of each, as a label (value 1).\n# TYPE {name} gauge"
        );
        for (batch, labels) in batches.iter().zip(&labels) {
            for (value, labels) in texts(batch, column).iter().zip(labels) {
                if let Some(v) = value {
                    let _ = writeln!(out, "{name}{{{labels},{column}=\"{}\"}} 1", label_value(v));
                }
            }
        }
    }
}

/// The front end's lines: connections, statements and their time, errors by SQLSTATE.
fn render_frontend(out: &mut String, frontend: &FrontendMetrics) {
    let (open, stats) = frontend.snapshot();
    let _ = writeln!(
        out,
        "# HELP cdcfusion_pg_connections Client connections open now.\n# TYPE cdcfusion_pg_connections gauge\ncdcfusion_pg_connections {open}"
    );
    let _ = writeln!(
        out,
        "# HELP cdcfusion_pg_connections_total Client connections accepted.\n# TYPE cdcfusion_pg_connections_total counter\ncdcfusion_pg_connections_total {}",
        stats.connections
    );
    let _ = writeln!(
        out,
        "# HELP cdcfusion_pg_statements_planned_total Statements made physical by planning as they ran (a prepared statement whose plan is kept is not planned again).\n# TYPE cdcfusion_pg_statements_planned_total counter\ncdcfusion_pg_statements_planned_total {}",
        stats.planned
    );
    let name = "cdcfusion_pg_statement_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time from receiving a statement to its first response.\n# TYPE {name} histogram"
    );
    for (le, count) in BUCKETS.iter().zip(&stats.cumulative) {
        let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {count}");
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{le=\"+Inf\"}} {total}\n{name}_sum {}\n{name}_count {total}",
        stats.seconds,
        total = stats.statements
    );
    let name = "cdcfusion_pg_errors_total";
    let _ = writeln!(
        out,
        "# HELP {name} Statements answered with an error, by SQLSTATE.\n# TYPE {name} counter"
    );
    for (code, count) in &stats.errors {
        let _ = writeln!(out, "{name}{{sqlstate=\"{}\"}} {count}", label_value(code));
    }
}

/// The metrics of `engine` (and of its PostgreSQL front end, when given) now, in the text
/// exposition format.
pub async fn render(engine: &Engine, frontend: Option<&FrontendMetrics>) -> String {
    let mut out = String::new();
    if let Some(frontend) = frontend {
        render_frontend(&mut out, frontend);
    }
    let mut failed = 0u32;
    for family in FAMILIES {
        let rows = match engine.sql(&format!("SELECT * FROM {}", family.table)).await {
            Ok(frame) => frame.collect().await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match rows {
            Ok(batches) => render_family(&mut out, family, &batches),
            Err(e) => {
                tracing::warn!(table = family.table, error = %e, "metrics: status not read");
                failed += 1;
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP cdcfusion_metrics_errors Status tables this scrape could not read.\n# TYPE cdcfusion_metrics_errors gauge\ncdcfusion_metrics_errors {failed}"
    );
    out
}

/// The request's first line, or `None` for a request that is not HTTP.
async fn request_line(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    // The whole head, bounded in size and time: a scraper sends a few hundred bytes at once.
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 || head.len() + n > 16 * 1024 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    head.lines().next().map(str::to_string)
}

/// Content types of the answers.
const TEXT: &str = "text/plain; charset=utf-8";
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";
const JSON: &str = "application/json";

async fn answer(
    engine: &Engine,
    frontend: Option<&FrontendMetrics>,
    init: &InitGate,
    mut stream: TcpStream,
) {
    let Some(line) = request_line(&mut stream).await else {
        return;
    };
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => ("200 OK", EXPOSITION, render(engine, frontend).await),
        ("GET", "/health") => ("200 OK", TEXT, "ok\n".to_string()),
        ("GET", "/ready") => match readiness(engine, init).await {
            (true, body) => ("200 OK", JSON, body),
            (false, body) => ("503 Service Unavailable", JSON, body),
        },
        ("GET", _) => (
            "404 Not Found",
            TEXT,
            "served here: /metrics, /health, /ready\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            TEXT,
            "only GET is served here\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The endpoint, serving until dropped.
#[derive(Debug)]
pub struct MetricsServer {
    local_addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MetricsServer {
    /// Listens on `addr` and answers scrapes of `engine` and its front end, and the probes
    /// (`/ready` waits for `init` too).
    pub async fn bind(
        engine: Arc<Engine>,
        frontend: Option<FrontendMetrics>,
        init: InitGate,
        addr: SocketAddr,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let engine = Arc::clone(&engine);
                        let frontend = frontend.clone();
                        let init = init.clone();
                        tokio::spawn(async move {
                            answer(&engine, frontend.as_ref(), &init, stream).await
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics endpoint: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        Ok(Self { local_addr, task })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_engine_without_sources_has_empty_families_and_other_paths_are_refused() {
        let engine = Arc::new(Engine::new());
        let text = render(&engine, None).await;
        assert!(
            text.contains("# TYPE cdcfusion_sink_commits_total counter"),
            "{text}"
        );
        assert!(text.contains("cdcfusion_metrics_errors 0"), "{text}");
        let server = MetricsServer::bind(
            engine,
            None,
            InitGate::open(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let mut conn = TcpStream::connect(server.local_addr()).await.unwrap();
        conn.write_all(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    }
}
