//! A connection's transaction block: whether one is open, whether it failed, its savepoints,
//! and the transaction status the client sees in every `ReadyForQuery`.
//!
//! # Rules (PostgreSQL's, for a read-only session)
//! * `BEGIN` opens a block; `COMMIT` and `ROLLBACK` end it (`COMMIT` of a failed block answers
//!   `ROLLBACK`).
//! * `SAVEPOINT`, `RELEASE` and `ROLLBACK TO` need an open block (`25P01` outside one). A name
//!   may be used twice: `RELEASE` and `ROLLBACK TO` act on the newest savepoint of that name;
//!   `RELEASE` drops it and every later one, `ROLLBACK TO` keeps it and drops the later ones.
//!   An unknown name is `3B001`.
//! * Any error inside a block makes it failed: it refuses every statement with `25P02` except
//!   `COMMIT`, `ROLLBACK` and `ROLLBACK TO` one of its savepoints, which makes it usable again.
//!
//! # Invariant
//! [`Block`] is the one truth for the status a client sees. pgwire derives a status from each
//! response and has no way to say that `ROLLBACK TO` made a failed block usable, so every
//! message of the query protocols is handled through [`Tracked`], which reports the block's
//! status to pgwire and in every `ReadyForQuery`, and marks the block failed for every
//! `ErrorResponse` it sends (errors pgwire sends itself are learnt from its status when the
//! next message starts).

use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use futures::Sink;
use pgwire::api::{ClientInfo, ClientPortalStore};
use pgwire::error::PgWireResult;
use pgwire::messages::response::{ReadyForQuery, TransactionStatus};
use pgwire::messages::PgWireBackendMessage;

use crate::frontend::protocol::error::user_error;
use crate::frontend::session::session_statement::SessionStatement;
use crate::locks::Locked;
use crate::sqlstate::SqlState;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Idle,
    Open,
    Failed,
}

/// The transaction block of one connection (see the module docs).
#[derive(Debug, Default)]
pub struct Block {
    state: State,
    /// The open block's savepoints, oldest first.
    savepoints: Vec<String>,
}

/// What a transaction statement did to the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// A block is open (`BEGIN`).
    Started,
    /// The block ended; the tag says how (`COMMIT` or `ROLLBACK`).
    Ended(&'static str),
    /// The block goes on (savepoint statements).
    Continued,
}

impl Block {
    /// The status the client sees.
    pub fn status(&self) -> TransactionStatus {
        match self.state {
            State::Idle => TransactionStatus::Idle,
            State::Open => TransactionStatus::Transaction,
            State::Failed => TransactionStatus::Error,
        }
    }

    /// A statement failed: an open block is now failed.
    pub fn fail(&mut self) {
        if self.state == State::Open {
            self.state = State::Failed;
        }
    }

    /// Refuses what a failed block does not run: everything but its end and `ROLLBACK TO`.
    pub fn admit(&self, statement: Option<&SessionStatement>) -> PgWireResult<()> {
        let ends = matches!(
            statement,
            Some(
                SessionStatement::Commit
                    | SessionStatement::Rollback
                    | SessionStatement::RollbackTo(_)
            )
        );
        if self.state == State::Failed && !ends {
            return Err(user_error(
                SqlState::IN_FAILED_SQL_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        Ok(())
    }

    /// Runs a transaction statement; other statements leave the block as it is.
    pub fn run(&mut self, statement: &SessionStatement) -> PgWireResult<Effect> {
        match statement {
            SessionStatement::Begin => {
                if self.state == State::Idle {
                    self.state = State::Open;
                }
                Ok(Effect::Started)
            }
            SessionStatement::Commit | SessionStatement::Rollback => {
                let failed = self.state == State::Failed;
                *self = Self::default();
                Ok(Effect::Ended(
                    if failed || *statement == SessionStatement::Rollback {
                        "ROLLBACK"
                    } else {
                        "COMMIT"
                    },
                ))
            }
            SessionStatement::Savepoint(name) => self.in_block("SAVEPOINT").map(|()| {
                self.savepoints.push(name.clone());
                Effect::Continued
            }),
            SessionStatement::Release(name) => self
                .in_block("RELEASE SAVEPOINT")
                .and_then(|()| self.find(name))
                .map(|at| {
                    self.savepoints.truncate(at);
                    Effect::Continued
                }),
            SessionStatement::RollbackTo(name) => self
                .in_block("ROLLBACK TO SAVEPOINT")
                .and_then(|()| self.find(name))
                .map(|at| {
                    self.savepoints.truncate(at + 1);
                    self.state = State::Open;
                    Effect::Continued
                }),
            _ => Ok(Effect::Continued),
        }
    }

    fn in_block(&self, what: &str) -> PgWireResult<()> {
        if self.state == State::Idle {
            return Err(user_error(
                SqlState::NO_ACTIVE_SQL_TRANSACTION,
                format!("{what} can only be used in transaction blocks"),
            ));
        }
        Ok(())
    }

    /// The position of the newest savepoint called `name`.
    fn find(&self, name: &str) -> PgWireResult<usize> {
        self.savepoints
            .iter()
            .rposition(|s| s == name)
            .ok_or_else(|| {
                user_error(
                    SqlState::S_E_INVALID_SPECIFICATION,
                    format!("savepoint \"{name}\" does not exist"),
                )
            })
    }
}

/// A client seen through its connection's [`Block`] while pgwire handles one message.
pub struct Tracked<'a, C> {
    inner: &'a mut C,
    block: &'a Mutex<Block>,
}

impl<'a, C: ClientInfo> Tracked<'a, C> {
    /// Wraps `inner`, first learning of errors pgwire reported on its own since the last
    /// message (a failed `Parse`, a broken result stream).
    pub fn new(inner: &'a mut C, block: &'a Mutex<Block>) -> Self {
        if inner.transaction_status() == TransactionStatus::Error {
            lock(block).fail();
        }
        Self { inner, block }
    }
}

/// The block, locked for one step (never across an `await`).
pub fn lock(block: &Mutex<Block>) -> std::sync::MutexGuard<'_, Block> {
    // A panic elsewhere ends only that statement; the block's state is still whole.
    block.locked()
}

impl<C: Sink<PgWireBackendMessage> + Unpin> Sink<PgWireBackendMessage> for Tracked<'_, C> {
    type Error = C::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut *self.inner).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: PgWireBackendMessage) -> Result<(), Self::Error> {
        let item = match item {
            PgWireBackendMessage::ErrorResponse(e) => {
                lock(self.block).fail();
                PgWireBackendMessage::ErrorResponse(e)
            }
            PgWireBackendMessage::ReadyForQuery(_) => {
                PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(lock(self.block).status()))
            }
            // pgwire ends a `COPY ... TO STDOUT` whose rows fail with a backend `CopyFail`, a
            // message only clients may send (a client waits on it forever), then returns the
            // error, which it sends as the `ErrorResponse` that ends a copy in PostgreSQL.
            PgWireBackendMessage::CopyFail(_) => {
                lock(self.block).fail();
                return Ok(());
            }
            other => other,
        };
        Pin::new(&mut *self.inner).start_send(item)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut *self.inner).poll_close(cx)
    }
}

impl<C: ClientPortalStore> ClientPortalStore for Tracked<'_, C> {
    type PortalStore = C::PortalStore;
    fn portal_store(&self) -> &Self::PortalStore {
        self.inner.portal_store()
    }
}

impl<C: ClientInfo> ClientInfo for Tracked<'_, C> {
    crate::frontend::protocol::client_info::delegate_client_info!(inner);
    fn transaction_status(&self) -> TransactionStatus {
        lock(self.block).status()
    }
    /// pgwire's own idea of the status is replaced by the block's.
    fn set_transaction_status(&mut self, _: TransactionStatus) {
        let status = lock(self.block).status();
        self.inner.set_transaction_status(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(block: &mut Block, statement: SessionStatement) -> Result<Effect, String> {
        block
            .run(&statement)
            .map_err(|e| pgwire::error::ErrorInfo::from(e).code)
    }

    fn savepoint(name: &str) -> SessionStatement {
        SessionStatement::Savepoint(name.into())
    }

    fn rollback_to(name: &str) -> SessionStatement {
        SessionStatement::RollbackTo(name.into())
    }

    #[test]
    fn savepoints_need_a_block() {
        let mut block = Block::default();
        assert_eq!(
            run(&mut block, savepoint("a")).unwrap_err(),
            SqlState::NO_ACTIVE_SQL_TRANSACTION.code()
        );
        let release = SessionStatement::Release("a".into());
        assert_eq!(
            run(&mut block, release).unwrap_err(),
            SqlState::NO_ACTIVE_SQL_TRANSACTION.code()
        );
        assert_eq!(
            run(&mut block, rollback_to("a")).unwrap_err(),
            SqlState::NO_ACTIVE_SQL_TRANSACTION.code()
        );
        assert_eq!(block.status(), TransactionStatus::Idle);
    }

    #[test]
    fn rollback_to_makes_a_failed_block_usable() {
        let mut block = Block::default();
        assert_eq!(
            run(&mut block, SessionStatement::Begin),
            Ok(Effect::Started)
        );
        run(&mut block, savepoint("a")).unwrap();
        run(&mut block, savepoint("b")).unwrap();
        block.fail();
        assert_eq!(block.status(), TransactionStatus::Error);
        assert!(block.admit(Some(&savepoint("c"))).is_err());
        assert!(block.admit(None).is_err());
        block.admit(Some(&rollback_to("x"))).unwrap();
        assert_eq!(
            run(&mut block, rollback_to("x")).unwrap_err(),
            SqlState::S_E_INVALID_SPECIFICATION.code()
        );
        assert_eq!(block.status(), TransactionStatus::Error);
        run(&mut block, rollback_to("a")).unwrap();
        assert_eq!(block.status(), TransactionStatus::Transaction);
        block.admit(None).unwrap();
        // `b` was dropped by the rollback, `a` kept.
        assert_eq!(
            run(&mut block, rollback_to("b")).unwrap_err(),
            SqlState::S_E_INVALID_SPECIFICATION.code()
        );
        run(&mut block, SessionStatement::Release("a".into())).unwrap();
        assert_eq!(
            run(&mut block, rollback_to("a")).unwrap_err(),
            SqlState::S_E_INVALID_SPECIFICATION.code()
        );
        assert_eq!(
            run(&mut block, SessionStatement::Commit),
            Ok(Effect::Ended("COMMIT"))
        );
        assert_eq!(block.status(), TransactionStatus::Idle);
    }

    #[test]
    fn a_repeated_name_means_the_newest_and_a_failed_commit_rolls_back() {
        let mut block = Block::default();
        run(&mut block, SessionStatement::Begin).unwrap();
        for name in ["a", "b", "a"] {
            run(&mut block, savepoint(name)).unwrap();
        }
        run(&mut block, SessionStatement::Release("a".into())).unwrap();
        // The older `a` and `b` remain.
        run(&mut block, rollback_to("b")).unwrap();
        run(&mut block, rollback_to("a")).unwrap();
        block.fail();
        assert_eq!(
            run(&mut block, SessionStatement::Commit),
            Ok(Effect::Ended("ROLLBACK"))
        );
        // A new block starts without savepoints.
        run(&mut block, SessionStatement::Begin).unwrap();
        assert_eq!(
            run(&mut block, rollback_to("a")).unwrap_err(),
            SqlState::S_E_INVALID_SPECIFICATION.code()
        );
    }
}
