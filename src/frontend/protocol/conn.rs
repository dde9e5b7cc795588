//! What the connections share ([`Shared`]) and what one connection keeps between messages
//! ([`ConnState`]), with what stops its statements ([`Stop`]). The listener, the start-up
//! exchange and the query handlers all work on these types and on nothing of each other.
//!
//! # Cancellation
//! Every statement runs under a [`Stop`]: its own cancellation token, which a cancel request
//! naming the connection's key fires, and the statement timeout. Both stop planning and the
//! result stream, and dropping the stream stops the DataFusion plan.
//!
//! # Invariant
//! A connection is in the registry of [`Shared`] from its accept until it ends, and a cancel
//! request finds it only once authentication has recorded its key. A connection counts as busy
//! exactly while a statement or a result stream of it is alive (each holds a [`Stop`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use pgwire::api::auth::DefaultServerParameterProvider;
use pgwire::api::{PidSecretKeyGenerator, RandomPidSecretKeyGenerator};
use pgwire::messages::startup::SecretKey;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::config::FrontendSettings;
use crate::engine::Engine;
use crate::frontend::access::users::Users;
use crate::frontend::ops::stats::FrontendStats;
use crate::frontend::pg_compat::catalog::PgCatalogs;
use crate::frontend::session::block::Block;
use crate::frontend::session::session_statement;

/// What every connection shares.
pub struct Shared {
    pub engine: Arc<Engine>,
    pub settings: FrontendSettings,
    pub users: Arc<Users>,
    pub pg_catalogs: PgCatalogs,
    /// datafusion-pg-catalog's rewrites of PostgreSQL's catalog queries (see `statement`).
    pub compat: datafusion_pg_catalog::sql::PostgresCompatibilityParser,
    pub parameters: Arc<DefaultServerParameterProvider>,
    pub pid_generator: Arc<dyn PidSecretKeyGenerator>,
    /// What the metrics endpoint shows of the front end.
    pub stats: Arc<FrontendStats>,
    slots: Arc<Semaphore>,
    connections: Mutex<HashMap<u64, Weak<ConnState>>>,
    next_connection: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub fn new(
        engine: Arc<Engine>,
        settings: FrontendSettings,
        users: Arc<Users>,
        pg_catalogs: PgCatalogs,
    ) -> Self {
        let mut parameters = DefaultServerParameterProvider::default();
        parameters.server_version = session_statement::SERVER_VERSION.to_string();
        parameters.default_transaction_read_only = true;
        parameters.is_superuser = false;
        Self {
            users,
            slots: Arc::new(Semaphore::new(settings.max_connections)),
            settings,
            engine,
            pg_catalogs,
            compat: datafusion_pg_catalog::sql::PostgresCompatibilityParser::new(),
            parameters: Arc::new(parameters),
            pid_generator: Arc::new(RandomPidSecretKeyGenerator::default()),
            stats: Arc::default(),
            connections: Mutex::new(HashMap::new()),
            next_connection: AtomicU64::new(1),
        }
    }

    /// A new connection, registered under the returned id, with a slot under the connection
    /// limit if one is free (the start-up exchange refuses it otherwise).
    pub fn accept(&self) -> (u64, Arc<ConnState>) {
        let slot = Arc::clone(&self.slots).try_acquire_owned().ok();
        self.stats.connection();
        let conn = Arc::new(ConnState::new(slot));
        let id = self.next_connection.fetch_add(1, Ordering::Relaxed);
        self.connections
            .lock()
            .expect("connections")
            .insert(id, Arc::downgrade(&conn));
        (id, conn)
    }

    /// Connections open now (those holding a slot under the limit).
    pub fn open_connections(&self) -> usize {
        self.settings
            .max_connections
            .saturating_sub(self.slots.available_permits())
    }

    /// Forgets the connection `id` once it has ended.
    pub fn forget(&self, id: u64) {
        self.connections.lock().expect("connections").remove(&id);
    }

    /// Cancels the running statement of the connection whose cancel key this is, if any.
    pub fn cancel(&self, pid: i32, key: &SecretKey) {
        let key = (pid, key.to_bytes());
        let target = self
            .connections
            .lock()
            .expect("connections")
            .values()
            .filter_map(Weak::upgrade)
            .find(|c| c.key.get() == Some(&key));
        if let Some(conn) = target {
            conn.cancel();
        }
    }
}

/// Who a session is and which catalog its database selects. What the user may do is looked
/// up at every statement (`users`), not fixed at login.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub user: String,
    pub database: String,
    pub catalog: String,
}

/// The state of one connection that outlives single messages.
#[derive(Debug)]
pub struct ConnState {
    slot: Option<OwnedSemaphorePermit>,
    session: OnceLock<SessionInfo>,
    key: OnceLock<(i32, Bytes)>,
    /// The running statement's token; a cancel request fires it.
    current: Mutex<CancellationToken>,
    /// Statements and result streams alive now.
    running: AtomicUsize,
    last_active: Mutex<Instant>,
    /// Whether the client negotiated TLS.
    secure: AtomicBool,
    /// The transaction block, shared by the simple and the extended protocol's handlers.
    block: Mutex<Block>,
    /// Set while a statement streams rows as they come (`SUBSCRIBE`): every flush then
    /// reaches the client at once (see `wire`).
    live: Arc<AtomicBool>,
}

impl ConnState {
    fn new(slot: Option<OwnedSemaphorePermit>) -> Self {
        Self {
            slot,
            session: OnceLock::new(),
            key: OnceLock::new(),
            current: Mutex::new(CancellationToken::new()),
            running: AtomicUsize::new(0),
            last_active: Mutex::new(Instant::now()),
            secure: AtomicBool::new(false),
            block: Mutex::default(),
            live: Arc::default(),
        }
    }

    /// The flag of a statement streaming rows as they come, for the connection's writer.
    pub fn live(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.live)
    }

    /// Marks a statement streaming rows as they come, until the guard is dropped.
    pub fn streaming(&self) -> Streaming {
        self.live.store(true, Ordering::Release);
        Streaming(Arc::clone(&self.live))
    }

    /// The connection's transaction block.
    pub fn block(&self) -> &Mutex<Block> {
        &self.block
    }

    /// Records that the client negotiated TLS.
    pub fn set_secure(&self, secure: bool) {
        self.secure.store(secure, Ordering::SeqCst);
    }

    pub fn is_secure(&self) -> bool {
        self.secure.load(Ordering::SeqCst)
    }

    pub fn has_slot(&self) -> bool {
        self.slot.is_some()
    }

    pub fn set_session(&self, info: SessionInfo) {
        let _ = self.session.set(info);
    }

    pub fn session(&self) -> Option<&SessionInfo> {
        self.session.get()
    }

    /// Records the cancel key once authentication has finished.
    pub fn authenticated(&self, (pid, key): (i32, SecretKey)) {
        let _ = self.key.set((pid, key.to_bytes()));
    }

    /// Starts a statement: a fresh cancellation token and a guard that marks the connection
    /// busy until the statement and its result stream are gone.
    pub fn start_statement(self: &Arc<Self>, timeout: Option<Duration>) -> Stop {
        let token = CancellationToken::new();
        *self.current.lock().expect("current statement") = token.clone();
        self.running.fetch_add(1, Ordering::SeqCst);
        Stop {
            token,
            deadline: timeout.map(|t| tokio::time::Instant::now() + t),
            _busy: Busy(Arc::clone(self)),
        }
    }

    /// Cancels the running statement, if any.
    pub fn cancel(&self) {
        self.current.lock().expect("current statement").cancel();
    }

    pub fn is_busy(&self) -> bool {
        self.running.load(Ordering::SeqCst) > 0
    }

    pub fn idle_for(&self) -> Duration {
        self.last_active.lock().expect("last active").elapsed()
    }
}

/// Marks its connection's statement as streaming rows while alive.
#[derive(Debug)]
pub struct Streaming(Arc<AtomicBool>);

impl Drop for Streaming {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Marks its connection busy while alive.
#[derive(Debug)]
struct Busy(Arc<ConnState>);

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.last_active.lock().expect("last active") = Instant::now();
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a statement was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    Canceled,
    TimedOut,
}

/// What can stop a running statement (see the module docs).
#[derive(Debug)]
pub struct Stop {
    token: CancellationToken,
    deadline: Option<tokio::time::Instant>,
    _busy: Busy,
}

impl Stop {
    /// Resolves when the statement must stop.
    pub fn stopped(&self) -> Pin<Box<dyn Future<Output = Stopped> + Send + 'static>> {
        let token = self.token.clone();
        let deadline = self.deadline;
        Box::pin(async move {
            match deadline {
                Some(deadline) => tokio::select! {
                    _ = token.cancelled() => Stopped::Canceled,
                    _ = tokio::time::sleep_until(deadline) => Stopped::TimedOut,
                },
                None => {
                    token.cancelled().await;
                    Stopped::Canceled
                }
            }
        })
    }
}
