//! The listening socket and the life of each connection: the connection limit, idle sessions,
//! query cancellation and graceful shutdown.
//!
//! # Connections
//! Each accepted socket gets a [`ConnState`] and its own handlers, and is served by
//! `wire::serve` (TLS negotiation, the start-up exchange, then messages until the client
//! leaves; malformed bytes end only that connection). A slot under `max_connections` is
//! taken at accept; a connection without one is refused in the start-up exchange with a
//! clear error (a cancel request, which needs no slot, still works when the server is full).
//!
//! # Cancellation
//! Every statement runs under a [`Stop`]: its own cancellation token, which a cancel request
//! naming the connection's key fires, and the statement timeout. Both stop planning and the
//! result stream, and dropping the stream stops the DataFusion plan.
//!
//! # Shutdown
//! When shutdown is asked for the listener closes at once; idle connections close, running
//! statements get `shutdown_grace` to finish and are cancelled after it; [`Server::run`]
//! returns when every connection has ended.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use pgwire::api::auth::DefaultServerParameterProvider;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::{
    ClientInfo, ErrorHandler, PgWireServerHandlers, PidSecretKeyGenerator,
    RandomPidSecretKeyGenerator,
};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use pgwire::tokio::TlsAcceptor;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::auth::{Startup, Users};
use super::block::Block;
use super::catalog::PgCatalogs;
use super::error::{FrontendError, SQLSTATE_ADMIN_SHUTDOWN, SQLSTATE_IDLE_SESSION_TIMEOUT};
use super::query::QueryHandler;
use super::session;
use crate::config::FrontendSettings;
use crate::engine::Engine;

/// How often a connection checks for idleness and shutdown.
const WATCH_INTERVAL: Duration = Duration::from_millis(50);

/// What every connection shares.
pub struct Shared {
    pub engine: Arc<Engine>,
    pub settings: FrontendSettings,
    pub users: Arc<Users>,
    pub pg_catalogs: PgCatalogs,
    pub parser: datafusion_pg_catalog::sql::PostgresCompatibilityParser,
    pub parameters: Arc<DefaultServerParameterProvider>,
    pub pid_generator: Arc<dyn PidSecretKeyGenerator>,
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

/// Who a session is and which catalog its database selects.
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
    secure: std::sync::atomic::AtomicBool,
    /// The transaction block, shared by the simple and the extended protocol's handlers.
    block: Mutex<Block>,
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
            secure: std::sync::atomic::AtomicBool::new(false),
            block: Mutex::default(),
        }
    }

    /// The connection's transaction block.
    pub fn block(&self) -> &Mutex<Block> {
        &self.block
    }

    /// Records that the client negotiated TLS.
    pub fn set_secure(&self, secure: bool) {
        self.secure.store(secure, Ordering::SeqCst);
    }

    fn is_secure(&self) -> bool {
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

    fn cancel(&self) {
        self.current.lock().expect("current statement").cancel();
    }

    fn is_busy(&self) -> bool {
        self.running.load(Ordering::SeqCst) > 0
    }

    fn idle_for(&self) -> Duration {
        self.last_active.lock().expect("last active").elapsed()
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

/// The server: a bound listener and the shared state of its connections.
pub struct Server {
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listener", &self.listener)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Binds `addr` and prepares serving `engine`.
    pub async fn bind(
        engine: Arc<Engine>,
        addr: SocketAddr,
        settings: FrontendSettings,
    ) -> Result<Self, FrontendError> {
        let tls = match &settings.tls {
            Some((cert, key)) => Some(super::tls::acceptor(cert, key)?),
            None => None,
        };
        let pg_catalogs =
            PgCatalogs::install(&engine).map_err(|e| FrontendError::Catalog(e.to_string()))?;
        engine.context().register_udf(session::version_udf());
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| FrontendError::Listen { addr, source })?;
        let mut parameters = DefaultServerParameterProvider::default();
        parameters.server_version = session::SERVER_VERSION.to_string();
        parameters.default_transaction_read_only = true;
        parameters.is_superuser = false;
        let shared = Arc::new(Shared {
            users: Arc::new(Users::new(settings.auth, &settings.users)),
            slots: Arc::new(Semaphore::new(settings.max_connections)),
            settings,
            engine,
            pg_catalogs,
            parser: datafusion_pg_catalog::sql::PostgresCompatibilityParser::new(),
            parameters: Arc::new(parameters),
            pid_generator: Arc::new(RandomPidSecretKeyGenerator::default()),
            connections: Mutex::new(HashMap::new()),
            next_connection: AtomicU64::new(1),
        });
        Ok(Self {
            listener,
            tls,
            shared,
        })
    }

    /// The address the server listens on (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves connections until `shutdown` resolves, then shuts down gracefully.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Self {
            listener,
            tls,
            shared,
        } = self;
        let stopping = CancellationToken::new();
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (socket, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // Running out of descriptors must not end the server.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(WATCH_INTERVAL).await;
                            continue;
                        }
                    };
                    // A second handle on the socket, to say why the server closes it (see
                    // `farewell`); without one the connection is served all the same.
                    let (socket, farewell_to) = match duplicate(socket) {
                        Ok(pair) => pair,
                        Err(e) => {
                            tracing::warn!(%peer, error = %e, "accepting a connection failed");
                            continue;
                        }
                    };
                    let slot = Arc::clone(&shared.slots).try_acquire_owned().ok();
                    let conn = Arc::new(ConnState::new(slot));
                    let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
                    shared.connections.lock().expect("connections").insert(id, Arc::downgrade(&conn));
                    let handlers = Handlers { shared: Arc::clone(&shared), conn: Arc::clone(&conn) };
                    // A panic while serving one client (a bug) ends only that connection.
                    let serve = std::panic::AssertUnwindSafe(super::wire::serve(socket, tls.clone(), handlers)).catch_unwind();
                    let watch = watch_connection(Arc::clone(&shared), Arc::clone(&conn), stopping.clone());
                    let shared = Arc::clone(&shared);
                    connections.spawn(async move {
                        let closed = tokio::select! {
                            result = serve => {
                                match result {
                                    Ok(Ok(())) => {}
                                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "connection ended with an error"),
                                    Err(panic) => {
                                        let message = crate::failpoint::panic_message(panic.as_ref());
                                        tracing::error!(%peer, %message, "serving a connection failed unexpectedly; it was closed");
                                    }
                                }
                                None
                            }
                            why = watch => Some(why),
                        };
                        // `serve` is gone, so nothing else writes to the socket now.
                        if let (Some(why), Some(socket)) = (closed, farewell_to) {
                            if !conn.is_secure() {
                                farewell(socket, why).await;
                            }
                        }
                        shared.connections.lock().expect("connections").remove(&id);
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        tracing::info!(
            connections = connections.len(),
            "front end stopping: waiting for running statements"
        );
        stopping.cancel();
        while connections.join_next().await.is_some() {}
    }
}

/// Why the server closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    Idle,
    Shutdown,
}

/// The socket and a second handle on it for [`farewell`] (`None` if it cannot be had).
fn duplicate(socket: TcpStream) -> std::io::Result<(TcpStream, Option<TcpStream>)> {
    let socket = socket.into_std()?;
    let second = socket
        .try_clone()
        .and_then(TcpStream::from_std)
        .map_err(|e| tracing::debug!(error = %e, "no second handle on a connection"))
        .ok();
    Ok((TcpStream::from_std(socket)?, second))
}

/// Tells the client why the server closed its connection, as PostgreSQL does: a `FATAL`
/// error with `57P05` (idle session timeout) or `57P01` (shutdown). Only on plain connections:
/// on TLS ones the bytes would have to go through the session's TLS state, which went with the
/// connection, so those are closed without a word.
async fn farewell(mut socket: TcpStream, why: Closed) {
    use pgwire::messages::Message;
    let (code, message) = match why {
        Closed::Idle => (
            SQLSTATE_IDLE_SESSION_TIMEOUT,
            "terminating connection due to idle-session timeout",
        ),
        Closed::Shutdown => (
            SQLSTATE_ADMIN_SHUTDOWN,
            "terminating connection due to administrator command",
        ),
    };
    let error = pgwire::messages::response::ErrorResponse::from(ErrorInfo::new(
        "FATAL".into(),
        code.into(),
        message.into(),
    ));
    let mut buf = bytes::BytesMut::new();
    if error.encode(&mut buf).is_ok() {
        let write = async {
            socket.write_all(&buf).await?;
            socket.shutdown().await
        };
        // A client that stopped reading must not hold the server up.
        let _ = tokio::time::timeout(WATCH_INTERVAL * 10, write).await;
    }
}

/// Ends a connection when it has been idle too long, or when the server stops (at once when
/// idle, after the grace period with its statement cancelled otherwise).
async fn watch_connection(
    shared: Arc<Shared>,
    conn: Arc<ConnState>,
    stopping: CancellationToken,
) -> Closed {
    let idle_limit = shared.settings.idle_session_timeout;
    let mut stop_asked: Option<Instant> = None;
    loop {
        tokio::time::sleep(WATCH_INTERVAL).await;
        if stop_asked.is_none() && stopping.is_cancelled() {
            stop_asked = Some(Instant::now());
        }
        let busy = conn.is_busy();
        if let Some(asked) = stop_asked {
            if !busy {
                return Closed::Shutdown;
            }
            if asked.elapsed() >= shared.settings.shutdown_grace {
                conn.cancel();
                // Give the cancellation error a moment to reach the client.
                if asked.elapsed() >= shared.settings.shutdown_grace + WATCH_INTERVAL * 10 {
                    return Closed::Shutdown;
                }
            }
        } else if let Some(limit) = idle_limit {
            if !busy && conn.idle_for() >= limit {
                tracing::info!("closing a session idle for longer than idle_session_timeout");
                return Closed::Idle;
            }
        }
    }
}

/// The handlers of one connection.
struct Handlers {
    shared: Arc<Shared>,
    conn: Arc<ConnState>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        Arc::new(QueryHandler::new(
            Arc::clone(&self.shared),
            Arc::clone(&self.conn),
        ))
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        Arc::new(QueryHandler::new(
            Arc::clone(&self.shared),
            Arc::clone(&self.conn),
        ))
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        Arc::new(Startup::new(
            Arc::clone(&self.shared),
            Arc::clone(&self.conn),
        ))
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        Arc::new(Canceller(Arc::clone(&self.shared)))
    }

    fn error_handler(&self) -> Arc<impl ErrorHandler> {
        Arc::new(LogErrors)
    }
}

/// Fires the cancellation token of the connection a cancel request names.
struct Canceller(Arc<Shared>);

#[async_trait]
impl CancelHandler for Canceller {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let key = (request.pid, request.secret_key.to_bytes());
        let target = self
            .0
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

struct LogErrors;

impl ErrorHandler for LogErrors {
    fn on_error<C: ClientInfo>(&self, client: &C, error: &mut PgWireError) {
        tracing::debug!(peer = %client.socket_addr(), error = %error, "statement failed");
    }
}
