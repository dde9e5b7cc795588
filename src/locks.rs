//! Locking that outlives a panic: [`Locked`] takes a `Mutex` or `RwLock` whether or not a
//! thread panicked while holding it.
//!
//! # Invariant
//! Every lock of the engine guards state that is replaced whole or updated in one step (a
//! status, a published version, a map entry), never left half-written across a statement that
//! can panic, so a poisoned lock holds a consistent value and taking it is safe. Ignoring the
//! poison is what keeps one failed task (which the engine contains, see `engine::stop`) from
//! failing every later reader of the same state. This module imports nothing of the crate, so
//! every stage may use it.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Taking a `Mutex` whatever a panicking holder left (see the module docs).
pub trait Locked<T: ?Sized> {
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Reading and writing an `RwLock` whatever a panicking holder left (see the module docs).
pub trait RwLocked<T: ?Sized> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLocked<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_a_panic_poisoned_is_still_taken() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let held = std::sync::Arc::clone(&m);
        let _ = std::thread::spawn(move || {
            let _guard = held.lock().unwrap();
            panic!("while holding it");
        })
        .join();
        assert!(m.is_poisoned());
        *m.locked() += 1;
        assert_eq!(*m.locked(), 2);
        let rw = RwLock::new(3);
        *rw.write_locked() += 1;
        assert_eq!(*rw.read_locked(), 4);
    }
}
