//! Which server each history of a source's positions was read from, and when a start is a
//! move to another server.
//!
//! A binlog position means something only on the server that wrote it. A source keeps, per
//! history (see `change::position`), the server its positions were read from (its address and
//! identity: a managed database's failover can put another server behind the same
//! address); the list is
//! written into every checkpoint. When a capture starts from a position whose history was read
//! from another address than the one the source now reaches (`ALTER SOURCE ... SET (url =
//! ...)`, or a checkpoint written before such a change), the start is a *move*: the positions
//! the new server writes form the next history, and the stream goes on after the source's
//! GTIDs, never at the old file and offset (a file of the same name on the new server holds
//! other transactions).
//!
//! With each server the list keeps what is known of its binlog: MariaDB's
//! `@@gtid_binlog_state` read when the capture starts on it and again by each poll of the
//! server while the source reads it (`engine::poll`), written into checkpoints too, so that
//! transactions another server logged below the source's position can be told from those of
//! the source's own history once that server is gone (`change::errant`). Only what the server
//! logged in its last poll interval (after a restart: since the last checkpoint) can be
//! missing.
//!
//! # Invariant
//! History `h`'s address never changes once positions of `h` are published; a move drops the
//! histories after the resumed position's (never published: the source moved away before it
//! read anything there) and appends the new address.

use std::sync::Mutex;

use crate::change::errant::BinlogState;
use crate::change::position::{BinlogCoord, MAX_HISTORY};
use crate::locks::Locked;
use crate::source::error::SourceError;

/// Server per history, shared by a source's tasks; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Histories(Mutex<Vec<Server>>);

/// The server of one history.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Server {
    /// Its address and identity.
    name: String,
    /// Its binlog state when last read (MariaDB; empty when not known).
    state: BinlogState,
}

impl Server {
    fn named(name: &str) -> Self {
        Self {
            name: name.to_string(),
            state: BinlogState::default(),
        }
    }
}

/// Where a start goes on: the history of the positions read from now on, and whether that is
/// a move from the history of the resumed position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placed {
    pub history: u16,
    pub moved: bool,
}

impl Histories {
    /// Takes the list a checkpoint recorded, with the binlog states it recorded (absent in
    /// older checkpoints); a checkpoint from before moves were possible records none, and its
    /// positions are the current address's.
    pub fn adopt(&self, recorded: &[String], states: &[String], address: &str) {
        let mut list = self.0.locked();
        *list = recorded
            .iter()
            .enumerate()
            .map(|(h, name)| Server {
                name: name.clone(),
                // A state that does not read is only knowledge lost, never wrong knowledge.
                state: states
                    .get(h)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_default(),
            })
            .collect();
        if list.is_empty() {
            list.push(Server::named(address));
        }
    }

    /// A fresh start (no position to go on from): history 0 is `address`.
    pub fn reset(&self, address: &str) {
        *self.0.locked() = vec![Server::named(address)];
    }

    /// Places a start that goes on after `at` through `address`; see the module docs.
    pub fn place(&self, at: &BinlogCoord, address: &str) -> Result<Placed, SourceError> {
        let mut list = self.0.locked();
        let history = at.history();
        let known = usize::from(history);
        if list.len() <= known {
            // Positions of a history the list does not name (a list lost with an old
            // checkpoint): they were read from wherever the source pointed then, which can
            // only be the current address if nothing moved since.
            list.resize(known + 1, Server::named(address));
        }
        if list[known].name == address {
            list.truncate(known + 1);
            return Ok(Placed {
                history,
                moved: false,
            });
        }
        if history >= MAX_HISTORY {
            return Err(SourceError::NotSupported(format!(
                "moving a source between servers more than {MAX_HISTORY} times (create it again)"
            )));
        }
        list.truncate(known + 1);
        list.push(Server::named(address));
        Ok(Placed {
            history: history + 1,
            moved: true,
        })
    }

    /// Records `state`, read from the server of `history` now, with what was known of it.
    pub fn record_state(&self, history: u16, state: &BinlogState) {
        if let Some(server) = self.0.locked().get_mut(usize::from(history)) {
            server.state.merge(state);
        }
    }

    /// Records `state`, read now from the server named `name`, with what is known of the
    /// current history's server when that is the server read (a poll may still be reading a
    /// server the source has moved away from, or another behind the same address); whether
    /// that added anything.
    pub fn record_current(&self, name: &str, state: &BinlogState) -> bool {
        let mut list = self.0.locked();
        let Some(server) = list.last_mut().filter(|s| s.name == name) else {
            return false;
        };
        let before = server.state.clone();
        server.state.merge(state);
        server.state != before
    }

    /// Whether the server of `history` was reached at `address` (whatever its identity).
    pub fn same_address(&self, history: u16, address: &str) -> bool {
        self.0
            .locked()
            .get(usize::from(history))
            .is_some_and(|s| s.name.split(" (").next() == Some(address))
    }

    /// What is known of the binlog of the server of `history`.
    pub fn state(&self, history: u16) -> BinlogState {
        self.0
            .locked()
            .get(usize::from(history))
            .map(|s| s.state.clone())
            .unwrap_or_default()
    }

    /// The history of the positions read from the server the source reaches now.
    pub fn current(&self) -> u16 {
        let len = self.0.locked().len();
        u16::try_from(len.saturating_sub(1)).unwrap_or(MAX_HISTORY)
    }

    /// The servers, history by history (for checkpoints and `cdc.sources`).
    pub fn list(&self) -> Vec<String> {
        self.0.locked().iter().map(|s| s.name.clone()).collect()
    }

    /// The binlog states, history by history (for checkpoints).
    pub fn states(&self) -> Vec<String> {
        self.0
            .locked()
            .iter()
            .map(|s| s.state.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_starts_the_next_history_and_a_return_is_a_move_too() {
        let h = Histories::default();
        h.reset("a:3306");
        let at = BinlogCoord::new("bin.000003", 400);
        let same = h.place(&at, "a:3306").unwrap();
        assert_eq!(
            same,
            Placed {
                history: 0,
                moved: false
            }
        );
        let moved = h.place(&at, "b:3306").unwrap();
        assert_eq!(
            moved,
            Placed {
                history: 1,
                moved: true
            }
        );
        assert_eq!(h.list(), ["a:3306", "b:3306"]);
        // Nothing read at b yet: the source still stands at history 0, moved on to c.
        let again = h.place(&at, "c:3306").unwrap();
        assert_eq!(
            again,
            Placed {
                history: 1,
                moved: true
            }
        );
        assert_eq!(h.list(), ["a:3306", "c:3306"]);
        // Read at c, then back to a: a's positions of history 0 mean nothing for c's.
        let at_c = BinlogCoord::new("bin.000001", 900).in_history(1);
        assert!(!h.place(&at_c, "c:3306").unwrap().moved);
        let back = h.place(&at_c, "a:3306").unwrap();
        assert_eq!(
            back,
            Placed {
                history: 2,
                moved: true
            }
        );
        assert_eq!(h.list(), ["a:3306", "c:3306", "a:3306"]);
    }

    #[test]
    fn an_old_checkpoint_without_a_list_is_the_current_address() {
        let h = Histories::default();
        h.adopt(&[], &[], "a:3306");
        let at = BinlogCoord::new("bin.000003", 400);
        assert!(!h.place(&at, "a:3306").unwrap().moved);
    }
}
