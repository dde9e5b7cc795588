//! The listening socket and the life of each connection: the connection limit, idle sessions,
//! query cancellation and graceful shutdown.
//!
//! # Connections
//! Each accepted socket gets a `ConnState` and its own handlers, and is served by
//! `wire::serve` (TLS negotiation, the start-up exchange, then messages until the client
//! leaves; malformed bytes end only that connection). A slot under `max_connections` is
//! taken at accept; a connection without one is refused in the start-up exchange with a
//! clear error (a cancel request, which needs no slot, still works when the server is full).
//!
//! # Cancellation
//! A cancel request fires the running statement's token of the connection it names (see
//! `conn`).
//!
//! # Shutdown
//! When shutdown is asked for the listener closes at once; idle connections close, running
//! statements get `shutdown_grace` to finish and are cancelled after it; [`Server::run`]
//! returns when every connection has ended.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::FutureExt;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::{ClientInfo, ErrorHandler, PgWireServerHandlers};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::cancel::CancelRequest;
use pgwire::tokio::TlsAcceptor;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::FrontendSettings;
use crate::engine::Engine;
use crate::frontend::access::auth::Startup;
use crate::frontend::access::users::Users;
use crate::frontend::pg_compat::catalog::PgCatalogs;
use crate::frontend::protocol::conn::{ConnState, Shared};
use crate::frontend::protocol::error::FrontendError;
use crate::frontend::session::executor::QueryHandler;
use crate::frontend::session::session_statement;
use crate::sqlstate::SqlState;

/// How often a connection checks for idleness and shutdown.
const WATCH_INTERVAL: Duration = Duration::from_millis(50);

/// What the metrics endpoint reads of a running front end.
#[derive(Debug, Clone)]
pub struct FrontendMetrics {
    shared: Arc<Shared>,
}

impl FrontendMetrics {
    pub fn snapshot(&self) -> (usize, crate::frontend::ops::stats::StatsSnapshot) {
        (self.shared.open_connections(), self.shared.stats.snapshot())
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
            Some((cert, key)) => Some(crate::frontend::protocol::tls::acceptor(cert, key)?),
            None => None,
        };
        let users = Users::new(
            settings.auth,
            &settings.users,
            &engine.catalog_users().await,
        )?;
        let users = Arc::new(users);
        let pg_catalogs = PgCatalogs::install(&engine, &users)
            .map_err(|e| FrontendError::Catalog(e.to_string()))?;
        engine
            .context()
            .register_udf(session_statement::version_udf());
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| FrontendError::Listen { addr, source })?;
        let shared = Arc::new(Shared::new(engine, settings, users, pg_catalogs));
        Ok(Self {
            listener,
            tls,
            shared,
        })
    }

    /// Whether no login can succeed yet (see `Users::nobody_can_log_in`); `serve` then says
    /// how to add a user.
    pub fn nobody_can_log_in(&self) -> bool {
        self.shared.users.nobody_can_log_in()
    }

    /// The front end's counters and its open connections, for the metrics endpoint.
    pub fn stats(&self) -> FrontendMetrics {
        FrontendMetrics {
            shared: Arc::clone(&self.shared),
        }
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
                    let (id, conn) = shared.accept();
                    let handlers = Handlers::new(Arc::clone(&shared), Arc::clone(&conn));
                    // A panic while serving one client (a bug) ends only that connection.
                    let serve = std::panic::AssertUnwindSafe(crate::frontend::protocol::wire::serve(socket, tls.clone(), handlers, conn.live())).catch_unwind();
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
                        shared.forget(id);
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
            SqlState::IDLE_SESSION_TIMEOUT,
            "terminating connection due to idle-session timeout",
        ),
        Closed::Shutdown => (
            SqlState::ADMIN_SHUTDOWN,
            "terminating connection due to administrator command",
        ),
    };
    let error = pgwire::messages::response::ErrorResponse::from(ErrorInfo::new(
        "FATAL".into(),
        code.code().into(),
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

/// The handlers of one connection: one query handler serves both protocols, so they share
/// the connection's DataFusion session state.
struct Handlers {
    shared: Arc<Shared>,
    conn: Arc<ConnState>,
    query: Arc<QueryHandler>,
}

impl Handlers {
    fn new(shared: Arc<Shared>, conn: Arc<ConnState>) -> Self {
        let query = Arc::new(QueryHandler::new(Arc::clone(&shared), Arc::clone(&conn)));
        Self {
            shared,
            conn,
            query,
        }
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        Arc::clone(&self.query)
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        Arc::clone(&self.query)
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
        self.0.cancel(request.pid, &request.secret_key);
    }
}

struct LogErrors;

impl ErrorHandler for LogErrors {
    fn on_error<C: ClientInfo>(&self, client: &C, error: &mut PgWireError) {
        tracing::debug!(peer = %client.socket_addr(), error = %error, "statement failed");
    }
}
