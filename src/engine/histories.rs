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
//! # Invariant
//! History `h`'s address never changes once positions of `h` are published; a move drops the
//! histories after the resumed position's (never published: the source moved away before it
//! read anything there) and appends the new address.

use std::sync::Mutex;

use crate::change::position::{BinlogCoord, MAX_HISTORY};
use crate::locks::Locked;
use crate::source::error::SourceError;

/// Address per history, shared by a source's tasks; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Histories(Mutex<Vec<String>>);

/// Where a start goes on: the history of the positions read from now on, and whether that is
/// a move from the history of the resumed position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placed {
    pub history: u16,
    pub moved: bool,
}

impl Histories {
    /// Takes the list a checkpoint recorded; a checkpoint from before moves were possible
    /// records none, and its positions are the current address's.
    pub fn adopt(&self, recorded: &[String], address: &str) {
        let mut list = self.0.locked();
        *list = recorded.to_vec();
        if list.is_empty() {
            list.push(address.to_string());
        }
    }

    /// A fresh start (no position to go on from): history 0 is `address`.
    pub fn reset(&self, address: &str) {
        *self.0.locked() = vec![address.to_string()];
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
            list.resize(known + 1, address.to_string());
        }
        if list[known] == address {
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
        list.push(address.to_string());
        Ok(Placed {
            history: history + 1,
            moved: true,
        })
    }

    /// The history of the positions read from the server the source reaches now.
    pub fn current(&self) -> u16 {
        let len = self.0.locked().len();
        u16::try_from(len.saturating_sub(1)).unwrap_or(MAX_HISTORY)
    }

    /// The addresses, history by history (for checkpoints and `cdc.sources`).
    pub fn list(&self) -> Vec<String> {
        self.0.locked().clone()
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
        h.adopt(&[], "a:3306");
        let at = BinlogCoord::new("bin.000003", 400);
        assert!(!h.place(&at, "a:3306").unwrap().moved);
    }
}
