//! Named points where a test can make the engine fail on purpose.
//!
//! # Invariant
//! An unarmed point costs one relaxed atomic load and does nothing; points are armed only by
//! tests (through [`arm`]), never by configuration or input, so production behaviour cannot
//! depend on them. This module imports nothing from the crate, so every stage can use it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Whether any point is armed: the fast path of [`hit`].
static ARMED: AtomicBool = AtomicBool::new(false);
/// Armed points, by name and scope, and how many more hits pass before each one fires.
static POINTS: Mutex<Option<Points>> = Mutex::new(None);

/// The armed points, whatever a panicking holder left (this module imports nothing of the
/// crate, so it takes the lock itself rather than through `locks`).
fn points() -> MutexGuard<'static, Option<Points>> {
    POINTS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hits left before each armed point fires, by name and scope.
type Points = HashMap<(String, Option<String>), u64>;

/// What a point does when it fires.
pub const PANIC_MESSAGE: &str = "failpoint fired";

/// Makes point `name` panic on its hit number `skip + 1`, once; with a `scope`, only hits in
/// that scope (e.g. one source's name) count.
pub fn arm(name: &str, scope: Option<&str>, skip: u64) {
    let mut points = points();
    points
        .get_or_insert_with(HashMap::new)
        .insert((name.to_string(), scope.map(str::to_string)), skip);
    ARMED.store(true, Ordering::SeqCst);
}

/// Disarms every point.
pub fn disarm_all() {
    let mut points = points();
    *points = None;
    ARMED.store(false, Ordering::SeqCst);
}

/// Whether point `name` (in `scope`) is still armed: it has not fired yet.
pub fn is_armed(name: &str, scope: Option<&str>) -> bool {
    let points = points();
    let key = (name.to_string(), scope.map(str::to_string));
    points.as_ref().is_some_and(|p| p.contains_key(&key))
}

/// Panics if point `name`, armed without a scope, is due; see [`arm`].
#[inline]
pub fn hit(name: &str) {
    if ARMED.load(Ordering::Relaxed) {
        fire(name, None);
    }
}

/// Panics if point `name` is due, armed without a scope or for `scope`; see [`arm`].
#[inline]
pub fn hit_in(name: &str, scope: &str) {
    if ARMED.load(Ordering::Relaxed) {
        fire(name, None);
        fire(name, Some(scope));
    }
}

fn fire(name: &str, scope: Option<&str>) {
    let due = {
        let mut points = points();
        let Some(points) = points.as_mut() else {
            return;
        };
        let key = (name.to_string(), scope.map(str::to_string));
        match points.get_mut(&key) {
            Some(0) => {
                points.remove(&key);
                true
            }
            Some(skip) => {
                *skip -= 1;
                false
            }
            None => false,
        }
    };
    if due {
        match scope {
            Some(scope) => panic!("{PANIC_MESSAGE} at {name} in {scope}"),
            None => panic!("{PANIC_MESSAGE} at {name}"),
        }
    }
}

/// The message of a caught panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_armed_point_fires_once_after_its_skips() {
        arm("unit.point", None, 1);
        hit("unit.point");
        let caught = std::panic::catch_unwind(|| hit("unit.point")).unwrap_err();
        assert!(panic_message(caught.as_ref()).contains("unit.point"));
        hit("unit.point");
        assert!(!is_armed("unit.point", None));
        arm("unit.scoped", Some("a"), 0);
        hit_in("unit.scoped", "b");
        hit("unit.scoped");
        assert!(is_armed("unit.scoped", Some("a")));
        let caught = std::panic::catch_unwind(|| hit_in("unit.scoped", "a")).unwrap_err();
        assert!(panic_message(caught.as_ref()).contains("in a"));
    }
}
