//! The engine's running sinks by name; their rows in `cdc.sinks` and `SHOW SINKS` are
//! `status::sinks`'.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, Weak};

use tokio::sync::watch;

use crate::locks::Locked;
use crate::sinks::SinkStatus;
use crate::sql::CreateSink;

/// One sink of the engine.
#[derive(Debug)]
pub struct RunningSink {
    pub name: String,
    /// The statement as created (password masked when displayed).
    pub statement: CreateSink,
    /// The source its query reads.
    pub source: String,
    /// What it writes to (password masked).
    pub target: String,
    pub status: Arc<Mutex<SinkStatus>>,
    pub(super) paused: watch::Sender<bool>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl Drop for RunningSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RunningSink {
    pub fn status(&self) -> SinkStatus {
        self.status.locked().clone()
    }
}

/// The engine's sinks by name.
pub(crate) type Sinks = RwLock<BTreeMap<String, Arc<RunningSink>>>;

/// Weak handle used by the status table.
pub(crate) type SinksRef = Weak<Sinks>;
