//! What an operator reads on a terminal: the status tables as text (`cdcfusion status`, read
//! over the PostgreSQL protocol from a running engine) and, while `cdcfusion serve` runs on a
//! terminal, a progress bar for each table being snapshotted (rows read of the server's
//! estimate) and a line with each source's lag.
//!
//! # Invariant
//! Both read the same `cdc.*` status tables a SQL client reads, so the console never shows a
//! figure that SQL would not. Bars are drawn only on a terminal; elsewhere `serve` logs plain
//! lines (see `main`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::engine::Engine;

/// The status `cdcfusion status` prints: a title and the query of each part.
pub const STATUS_QUERIES: &[(&str, &str)] = &[
    (
        "Sources",
        "SELECT name, phase, state, position, round(lag_seconds, 1) AS lag_seconds, lag_bytes, \
         transactions, changes, snapshot_rows, \
         CAST(round(snapshot_eta_seconds) AS BIGINT) AS snapshot_eta_seconds, \
         round(checkpoint_age_seconds, 1) AS checkpoint_age_seconds, error \
         FROM cdc.sources ORDER BY name",
    ),
    (
        "Tables",
        "SELECT source, db, \"table\", phase, state, rows, chunks_done, chunks_total, \
         snapshot_rows, changelog_entries, error FROM cdc.tables ORDER BY source, db, \"table\"",
    ),
    (
        "Sinks",
        "SELECT name, source, mode, state, committed_position, lag_entries, \
         round(lag_seconds, 1) AS lag_seconds, rows_written, commits, error \
         FROM cdc.sinks ORDER BY name",
    ),
];

/// One part of the status as text: its column names and rows (`None` for NULL).
#[derive(Debug, Clone, PartialEq)]
pub struct TextTable {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Option<String>>>,
}

/// Reads the status from a running engine over the PostgreSQL protocol.
pub async fn read_status(
    client: &tokio_postgres::Client,
) -> Result<Vec<TextTable>, tokio_postgres::Error> {
    let mut out = Vec::with_capacity(STATUS_QUERIES.len());
    for (title, sql) in STATUS_QUERIES {
        let mut table = TextTable {
            title: (*title).to_string(),
            columns: Vec::new(),
            rows: Vec::new(),
        };
        for message in client.simple_query(sql).await? {
            match message {
                tokio_postgres::SimpleQueryMessage::RowDescription(columns) => {
                    table.columns = columns.iter().map(|c| c.name().to_string()).collect();
                }
                tokio_postgres::SimpleQueryMessage::Row(row) => {
                    if table.columns.is_empty() {
                        table.columns =
                            row.columns().iter().map(|c| c.name().to_string()).collect();
                    }
                    table.rows.push(
                        (0..row.len())
                            .map(|i| row.get(i).map(str::to_string))
                            .collect(),
                    );
                }
                _ => {}
            }
        }
        out.push(table);
    }
    Ok(out)
}

/// The status as text tables, one per part; an empty part says so. With `width` (a
/// terminal's), each table fits in it, long cells wrapped; without, rows are never wrapped.
pub fn render(tables: &[TextTable], width: Option<u16>) -> String {
    let mut out = String::new();
    for part in tables {
        out.push_str(&part.title);
        out.push('\n');
        if part.rows.is_empty() {
            out.push_str("  (none)\n\n");
            continue;
        }
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        match width {
            Some(width) => {
                table.set_content_arrangement(ContentArrangement::Dynamic);
                table.set_width(width);
            }
            None => {
                table.set_content_arrangement(ContentArrangement::Disabled);
            }
        }
        table.set_header(&part.columns);
        for row in &part.rows {
            table.add_row(row.iter().map(|v| v.as_deref().unwrap_or("")));
        }
        out.push_str(&table.to_string());
        out.push_str("\n\n");
    }
    out
}

/// How often the bars are brought up to date.
const REFRESH: Duration = Duration::from_millis(500);

/// Draws a bar for each table being snapshotted and a line with each source's phase and lag
/// on `bars`; never returns (a status the engine cannot give is skipped).
pub async fn show_progress(engine: Arc<Engine>, bars: MultiProgress) {
    let mut tables: HashMap<String, TableBar> = HashMap::new();
    let mut sources: HashMap<String, ProgressBar> = HashMap::new();
    let style = ProgressStyle::with_template("{prefix:.bold} [{bar:30}] {pos}/{len} rows  {msg}")
        .expect("a valid template")
        .progress_chars("=> ");
    let line = ProgressStyle::with_template("{prefix:.bold} {msg}").expect("a valid template");
    loop {
        tokio::time::sleep(REFRESH).await;
        let Some(rows) = status_rows(
            &engine,
            "SELECT source, db, \"table\", phase, chunks_done, chunks_total, snapshot_rows, \
             snapshot_rows_estimated FROM cdc.tables",
        )
        .await
        else {
            continue;
        };
        for row in rows {
            let [source, db, table, phase, done, total, rows_read, estimated] = row.as_slice()
            else {
                continue;
            };
            let name = format!("{source}.{db}.{table}");
            let snapshotting = matches!(phase.as_str(), "planning" | "snapshot");
            let rows_read: u64 = rows_read.parse().unwrap_or(0);
            // Planned, but neither estimated nor read yet: nothing to draw a bar of.
            if snapshotting && rows_read == 0 && estimated.parse::<u64>().unwrap_or(0) == 0 {
                continue;
            }
            match (snapshotting, tables.get(&name)) {
                (true, seen) => {
                    let seen = seen.cloned().unwrap_or_else(|| {
                        let bar = bars.add(ProgressBar::new(0));
                        bar.set_style(style.clone());
                        bar.set_prefix(format!("{db}.{table}"));
                        let seen = TableBar {
                            bar,
                            since: Instant::now(),
                            rows_then: rows_read,
                        };
                        tables.insert(name.clone(), seen.clone());
                        seen
                    });
                    // The server's estimate can be short of the rows there are.
                    let estimated: u64 = estimated.parse().unwrap_or(0);
                    let length = estimated.max(rows_read);
                    seen.bar.set_length(length);
                    seen.bar.set_position(rows_read);
                    let progress = Progress {
                        chunks_done: done.parse().unwrap_or(0),
                        chunks_total: total.parse().unwrap_or(0),
                        rows: rows_read.saturating_sub(seen.rows_then),
                        left: length - rows_read,
                        elapsed: seen.since.elapsed(),
                    };
                    seen.bar.set_message(snapshot_message(&progress));
                }
                (false, Some(seen)) => {
                    seen.bar.finish_and_clear();
                    let _ = bars.println(format!(
                        "{db}.{table}: snapshot done ({rows_read} rows in {})",
                        duration_text(seen.since.elapsed())
                    ));
                    tables.remove(&name);
                }
                (false, None) => {}
            }
        }
        let Some(rows) = status_rows(
            &engine,
            "SELECT name, phase, state, lag_seconds, lag_bytes FROM cdc.sources",
        )
        .await
        else {
            continue;
        };
        for row in rows {
            let [name, phase, state, lag_seconds, lag_bytes] = row.as_slice() else {
                continue;
            };
            let bar = sources.entry(name.clone()).or_insert_with(|| {
                let bar = bars.add(ProgressBar::new_spinner());
                bar.set_style(line.clone());
                bar.set_prefix(name.clone());
                bar
            });
            bar.set_message(source_message(phase, state, lag_seconds, lag_bytes));
        }
    }
}

/// A table's bar, and when and at how many rows it was first drawn: its rate counts only the
/// rows read since (the chunks done before the first refresh came in no time at all).
#[derive(Clone)]
struct TableBar {
    bar: ProgressBar,
    since: Instant,
    rows_then: u64,
}

/// What a running snapshot of one table has done since its bar was first drawn.
struct Progress {
    chunks_done: u64,
    chunks_total: u64,
    /// Rows read in `elapsed`.
    rows: u64,
    /// Rows still to read (by the server's estimate).
    left: u64,
    elapsed: Duration,
}

/// `d` as a person reads it: `42s`, `3m 05s`, `2h 07m`.
fn duration_text(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1}s", d.as_secs_f64()),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
    }
}

/// The figures of a running snapshot: chunks done, the rate of rows read, and the time left
/// at that rate; the rate and time only once a second of reading shows them.
fn snapshot_message(p: &Progress) -> String {
    let chunks = format!("{}/{} chunks", p.chunks_done, p.chunks_total);
    let seconds = p.elapsed.as_secs_f64();
    if seconds < 1.0 || p.rows == 0 {
        return chunks;
    }
    let rate = p.rows as f64 / seconds;
    let left = Duration::from_secs_f64(p.left as f64 / rate);
    format!(
        "{chunks}, {rate:.0} rows/s, {} left",
        duration_text(left).replace(".0s", "s")
    )
}

/// A source's phase, state and lag in one line.
fn source_message(phase: &str, state: &str, lag_seconds: &str, lag_bytes: &str) -> String {
    let lag = match (lag_seconds, lag_bytes) {
        ("", "") => String::from("lag unknown"),
        (s, "") => format!("lag {s} s"),
        ("", b) => format!("lag {b} bytes"),
        (s, b) => format!("lag {s} s ({b} bytes)"),
    };
    format!("{phase}, {state}, {lag}")
}

/// The rows of a status query as text (NULL as empty); `None` when the engine cannot answer
/// (it is stopping).
async fn status_rows(engine: &Engine, sql: &str) -> Option<Vec<Vec<String>>> {
    let batches: Vec<RecordBatch> = engine.sql(sql).await.ok()?.collect().await.ok()?;
    let options = FormatOptions::default();
    let mut out = Vec::new();
    for batch in batches {
        let formatters: Vec<ArrayFormatter<'_>> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<_, _>>()
            .ok()?;
        for row in 0..batch.num_rows() {
            out.push(
                formatters
                    .iter()
                    .map(|f| f.value(row).to_string())
                    .collect(),
            );
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_parts_render_as_tables() {
        let parts = vec![
            TextTable {
                title: "Sources".into(),
                columns: vec!["name".into(), "lag_seconds".into()],
                rows: vec![vec![Some("shop".into()), None]],
            },
            TextTable {
                title: "Sinks".into(),
                columns: vec!["name".into()],
                rows: vec![],
            },
        ];
        let text = render(&parts, None);
        assert!(text.starts_with("Sources\n"), "{text}");
        assert!(
            text.contains("shop") && text.contains("lag_seconds"),
            "{text}"
        );
        assert!(text.contains("Sinks\n  (none)"), "{text}");
    }

    #[test]
    fn progress_lines_read_plainly() {
        let progress = |rows, left, elapsed| Progress {
            chunks_done: 3,
            chunks_total: 8,
            rows,
            left,
            elapsed,
        };
        assert_eq!(
            snapshot_message(&progress(5000, 7500, Duration::from_secs(2))),
            "3/8 chunks, 2500 rows/s, 3s left"
        );
        assert_eq!(
            snapshot_message(&progress(5000, 7_500_000, Duration::from_secs(2))),
            "3/8 chunks, 2500 rows/s, 50m 00s left"
        );
        // Nothing to rate yet.
        assert_eq!(
            snapshot_message(&progress(5000, 7500, Duration::from_millis(300))),
            "3/8 chunks"
        );
        assert_eq!(duration_text(Duration::from_secs(7_400)), "2h 03m");
        assert_eq!(
            source_message("streaming", "running", "0.2", "120"),
            "streaming, running, lag 0.2 s (120 bytes)"
        );
        assert_eq!(
            source_message("snapshot", "running", "", ""),
            "snapshot, running, lag unknown"
        );
    }
}
