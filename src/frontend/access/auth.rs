//! Who may connect: the start-up exchange of one connection.
//!
//! Before any password is asked for, the connection must hold a slot under the connection
//! limit (`53300` otherwise) and come over TLS when TLS is required (`28000`). Then the user's
//! method runs: SCRAM-SHA-256 (the default) or md5 through pgwire's handlers, or `trust` when
//! configured explicitly. Users and their verifiers come from `users`: the config file's, the
//! one environment user, and those SQL created. Only an authenticated client learns whether
//! its database exists: as PostgreSQL does, an unknown database is answered with
//! `AuthenticationOk` and then `3D000`, never before the password has been checked, so
//! database (source) names cannot be probed.
//!
//! # Invariant
//! A failed login is answered with `28P01` only after the configured delay, whether the user
//! exists or not and whichever step failed, so answers neither leak user names nor allow fast
//! guessing. A session exists (and the connection can run statements) only once
//! authentication has finished.

use std::fmt::Debug;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::md5pass::Md5PasswordAuthStartupHandler;
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    DefaultServerParameterProvider, StartupHandler,
};
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::{Authentication, PasswordMessageFamily, SASLInitialResponse};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tokio::sync::Mutex;

use crate::config::AuthMethod;
use crate::frontend::access::users::PasswordSource;
use crate::frontend::pg_compat::catalog::catalog_of_database;
use crate::frontend::protocol::conn::{ConnState, SessionInfo, Shared};
use crate::frontend::protocol::error::fatal_error;
use crate::frontend::protocol::wire::Cursor;
use crate::sqlstate::SqlState;

type Params = DefaultServerParameterProvider;

/// The method running for this connection.
enum Method {
    Scram(SASLAuthStartupHandler<Params>),
    Md5(Md5PasswordAuthStartupHandler<PasswordSource, Params>),
}

/// The start-up handler of one connection (see the module docs).
pub struct Startup {
    shared: Arc<Shared>,
    conn: Arc<ConnState>,
    method: Mutex<Option<Method>>,
    user: Mutex<String>,
    /// Whether the SASL exchange has had its first message.
    sasl_begun: std::sync::atomic::AtomicBool,
    /// The database the start-up message named when it does not exist; refused once the
    /// password has been checked.
    unknown_database: Mutex<Option<String>>,
}

/// What the start-up checks let through.
enum Admitted {
    Session(SessionInfo),
    UnknownDatabase { user: String, database: String },
}

/// A client that lets `AuthenticationOk` through and drops what follows it (parameters, key
/// data, `ReadyForQuery`) when `cut` is set: the start-up of a session whose database does
/// not exist, which ends with the `3D000` error instead.
struct CutAfterAuthOk<'a, C> {
    inner: &'a mut C,
    cut: bool,
    authenticated: bool,
}

impl<'a, C> CutAfterAuthOk<'a, C> {
    fn new(inner: &'a mut C, cut: bool) -> Self {
        Self {
            inner,
            cut,
            authenticated: false,
        }
    }
}

impl<C: Sink<PgWireBackendMessage> + Unpin> Sink<PgWireBackendMessage> for CutAfterAuthOk<'_, C> {
    type Error = C::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut *self.inner).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: PgWireBackendMessage) -> Result<(), Self::Error> {
        if self.cut && self.authenticated {
            return Ok(());
        }
        if matches!(
            item,
            PgWireBackendMessage::Authentication(Authentication::Ok)
        ) {
            self.authenticated = true;
        }
        Pin::new(&mut *self.inner).start_send(item)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut *self.inner).poll_close(cx)
    }
}

impl<C: ClientInfo> ClientInfo for CutAfterAuthOk<'_, C> {
    crate::frontend::protocol::client_info::delegate_client_info!(inner);
    fn transaction_status(&self) -> TransactionStatus {
        self.inner.transaction_status()
    }
    fn set_transaction_status(&mut self, new_status: TransactionStatus) {
        self.inner.set_transaction_status(new_status)
    }
}

impl Startup {
    pub fn new(shared: Arc<Shared>, conn: Arc<ConnState>) -> Self {
        Self {
            shared,
            conn,
            method: Mutex::new(None),
            user: Mutex::new(String::new()),
            sasl_begun: std::sync::atomic::AtomicBool::new(false),
            unknown_database: Mutex::new(None),
        }
    }

    /// Checks made on the start-up message, before any password.
    fn admit<C: ClientInfo>(
        &self,
        client: &C,
        parameters: &std::collections::BTreeMap<String, String>,
    ) -> PgWireResult<Admitted> {
        self.conn.set_secure(client.is_secure());
        if !self.conn.has_slot() {
            return Err(fatal_error(
                SqlState::TOO_MANY_CONNECTIONS,
                format!(
                    "sorry, too many clients already (max_connections is {})",
                    self.shared.settings.max_connections
                ),
            ));
        }
        if self.shared.settings.tls_required && !client.is_secure() {
            return Err(fatal_error(
                SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                "this server accepts TLS connections only (use sslmode=require)",
            ));
        }
        let user = parameters.get("user").cloned().unwrap_or_default();
        let database = parameters
            .get("database")
            .filter(|d| !d.is_empty())
            .cloned()
            .unwrap_or_else(|| user.clone());
        Ok(match catalog_of_database(&self.shared.engine, &database) {
            Some(catalog) => Admitted::Session(SessionInfo {
                user,
                database,
                catalog,
            }),
            None => Admitted::UnknownDatabase { user, database },
        })
    }

    fn method_for(&self, user: &str) -> Option<Method> {
        let users = Arc::clone(&self.shared.users);
        let params = Arc::clone(&self.shared.parameters);
        let generator = Arc::clone(&self.shared.pid_generator);
        match users.method(user) {
            AuthMethod::Trust => None,
            AuthMethod::Md5 => Some(Method::Md5(
                Md5PasswordAuthStartupHandler::new(
                    Arc::new(PasswordSource {
                        users,
                        method: AuthMethod::Md5,
                    }),
                    params,
                )
                .with_pid_secret_key_generator(generator),
            )),
            AuthMethod::ScramSha256 => {
                let source = Arc::new(PasswordSource {
                    users,
                    method: AuthMethod::ScramSha256,
                });
                let mut scram = ScramAuth::new(source);
                scram.set_iterations(self.shared.users.scram_iterations(user));
                Some(Method::Scram(
                    SASLAuthStartupHandler::new(params)
                        .with_scram(scram)
                        .with_pid_secret_key_generator(generator),
                ))
            }
        }
    }

    /// Answers a failed login after the delay, the same way for every cause.
    async fn refuse(&self) -> PgWireError {
        tokio::time::sleep(self.shared.settings.auth_failure_delay).await;
        let user = self.user.lock().await.clone();
        fatal_error(
            SqlState::INVALID_PASSWORD,
            format!("password authentication failed for user \"{user}\""),
        )
    }
}

/// The first message of a SASL exchange, read without trusting its lengths: pgwire's own
/// reading of it panics on a short message (an empty password message, for one).
fn sasl_initial_response(message: PasswordMessageFamily) -> PgWireResult<SASLInitialResponse> {
    let PasswordMessageFamily::Raw(body) = message else {
        return message.into_sasl_initial_response();
    };
    let malformed = || fatal_error(SqlState::PROTOCOL_VIOLATION, "malformed SASL message");
    let mut cursor = Cursor::new(&body);
    let mechanism = cursor
        .cstring()
        .filter(|m| !m.is_empty())
        .ok_or_else(malformed)?;
    let mechanism = String::from_utf8_lossy(mechanism).into_owned();
    let length = cursor.i32().ok_or_else(malformed)?;
    let rest = cursor.rest();
    let data = match length {
        -1 if rest.is_empty() => None,
        n if usize::try_from(n).ok() == Some(rest.len()) => {
            Some(bytes::Bytes::copy_from_slice(rest))
        }
        _ => return Err(malformed()),
    };
    Ok(SASLInitialResponse::new(mechanism, data))
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut method = self.method.lock().await;
        let mut unknown_database = self.unknown_database.lock().await;
        if let PgWireFrontendMessage::Startup(startup) = &message {
            let user = match self.admit(client, &startup.parameters)? {
                Admitted::Session(info) => {
                    let user = info.user.clone();
                    self.conn.set_session(info);
                    user
                }
                Admitted::UnknownDatabase { user, database } => {
                    *unknown_database = Some(database);
                    user
                }
            };
            *self.user.lock().await = user.clone();
            *method = self.method_for(&user);
            if method.is_none() {
                // trust: no exchange at all.
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                let (pid, key) = self.shared.pid_generator.generate(client);
                client.set_pid_and_secret_key(pid, key);
                let mut client = CutAfterAuthOk::new(client, unknown_database.is_some());
                finish_authentication(&mut client, self.shared.parameters.as_ref()).await?;
            }
        }
        let message = match (method.as_ref(), message) {
            (Some(Method::Scram(_)), PgWireFrontendMessage::PasswordMessageFamily(password))
                if !self
                    .sasl_begun
                    .swap(true, std::sync::atomic::Ordering::SeqCst) =>
            {
                PgWireFrontendMessage::PasswordMessageFamily(
                    PasswordMessageFamily::SASLInitialResponse(sasl_initial_response(password)?),
                )
            }
            (_, message) => message,
        };
        let mut cut = CutAfterAuthOk::new(client, unknown_database.is_some());
        let result = match method.as_ref() {
            Some(Method::Scram(h)) => h.on_startup(&mut cut, message).await,
            Some(Method::Md5(h)) => h.on_startup(&mut cut, message).await,
            None => Ok(()),
        };
        match result {
            Err(PgWireError::UserError(e)) => return Err(PgWireError::UserError(e)),
            Err(PgWireError::IoError(e)) => return Err(PgWireError::IoError(e)),
            Err(_) => return Err(self.refuse().await),
            Ok(()) => {}
        }
        if matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            if let Some(database) = unknown_database.as_ref() {
                return Err(fatal_error(
                    SqlState::INVALID_CATALOG_NAME,
                    format!("database \"{database}\" does not exist"),
                ));
            }
            // Settings are looked up by lower-case name (drivers send `DateStyle`, `TimeZone`).
            let metadata: Vec<(String, String)> = client.metadata().clone().into_iter().collect();
            let lowered = metadata
                .into_iter()
                .map(|(k, v)| (k.to_lowercase(), v))
                .collect();
            *client.metadata_mut() = lowered;
            self.conn.authenticated(client.pid_and_secret_key());
        }
        Ok(())
    }
}
