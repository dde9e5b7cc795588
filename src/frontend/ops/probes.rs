//! The probes an orchestrator asks on the metrics listener: `GET /health` (the process
//! serves) and `GET /ready` (every source has published its snapshot and none is failed or
//! retrying, and `serve`'s init files have all run).
//!
//! # Invariant
//! Readiness is read from `cdc.sources`, the table an operator queries, at the time of the
//! probe, so a probe and SQL never disagree; a 503 names every source that is not ready and
//! why, so the orchestrator's event log says what to wait for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;

use crate::engine::Engine;

/// Whether `serve`'s init files have all run; `/ready` answers 503 until then, since the
/// sources they create do not exist yet.
#[derive(Debug, Clone)]
pub struct InitGate(Arc<AtomicBool>);

impl InitGate {
    /// Init still to run.
    pub fn pending() -> Self {
        Self(Arc::new(AtomicBool::new(false)))
    }

    /// Nothing to wait for (no init files, or an engine not started by `serve`).
    pub fn open() -> Self {
        Self(Arc::new(AtomicBool::new(true)))
    }

    /// Marks init as run.
    pub fn finish(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn is_open(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Phases in which a source's current tables hold its published snapshot.
const READY_PHASES: [&str; 2] = ["streaming", "done"];

/// `/ready`'s answer: whether the engine is ready, and a JSON body saying what is not.
pub async fn readiness(engine: &Engine, init: &InitGate) -> (bool, String) {
    let mut not_ready = Vec::new();
    if !init.is_open() {
        not_ready.push(serde_json::json!({ "init": "running" }));
    }
    let rows = match engine
        .sql("SELECT name, phase, state, error FROM cdc.sources ORDER BY name")
        .await
    {
        Ok(frame) => frame.collect().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match rows {
        Ok(batches) => {
            for batch in &batches {
                let text = |i: usize| {
                    arrow::compute::cast(batch.column(i), &DataType::Utf8)
                        .expect("status text columns cast to Utf8")
                };
                let (name, phase, state, error) = (text(0), text(1), text(2), text(3));
                let (name, phase, state, error) = (
                    name.as_string::<i32>(),
                    phase.as_string::<i32>(),
                    state.as_string::<i32>(),
                    error.as_string::<i32>(),
                );
                for row in 0..batch.num_rows() {
                    let (p, s) = (phase.value(row), state.value(row));
                    if READY_PHASES.contains(&p) && s == "running" {
                        continue;
                    }
                    let mut entry = serde_json::json!({
                        "source": name.value(row),
                        "phase": p,
                        "state": s,
                    });
                    if !error.is_null(row) {
                        entry["error"] = error.value(row).into();
                    }
                    not_ready.push(entry);
                }
            }
        }
        Err(e) => not_ready.push(serde_json::json!({ "status": e })),
    }
    let ready = not_ready.is_empty();
    let body = serde_json::json!({ "ready": ready, "not_ready": not_ready });
    (ready, format!("{body}\n"))
}
