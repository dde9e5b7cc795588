//! How the process's allocator gives memory back to the system.
//!
//! The binary and the benches use mimalloc. By default it returns pages unused for a second
//! with `MADV_DONTNEED`, so reusing them later faults every page in again and has the kernel
//! zero it. A stream of changes frees and allocates the same sizes all the time (framed events,
//! each run's arrays, merged changelog segments): that refaulting took 6–7% of the streaming
//! apply's throughput (docs/benchmarks.md, "Streaming apply and freshness"). [`tune`] has
//! mimalloc purge with `MADV_FREE` instead: the pages still go back as soon as the system is
//! short of memory, and reusing them before that costs nothing.
//!
//! # Invariant
//! Only how freed memory is returned changes, never what is allocated; an operator's own
//! `MIMALLOC_PURGE_DECOMMITS` wins.

use std::os::raw::{c_int, c_long};

/// mimalloc's `mi_option_purge_decommits`: its index in the option enum of mimalloc's v2 and
/// v3 headers alike.
const PURGE_DECOMMITS: c_int = 5;

extern "C" {
    /// Part of mimalloc's public C API, linked through the `mimalloc` crate.
    fn mi_option_set(option: c_int, value: c_long);
}

/// Makes mimalloc purge freed memory by resetting it rather than decommitting it, unless the
/// environment sets `MIMALLOC_PURGE_DECOMMITS`. Call it first thing in `main`.
pub fn tune() {
    if std::env::var_os("MIMALLOC_PURGE_DECOMMITS").is_none() {
        // SAFETY: `mi_option_set` takes any option index and value and only stores the value;
        // mimalloc reads this option whenever it purges, so setting it at any time is sound.
        unsafe { mi_option_set(PURGE_DECOMMITS, 0) }
    }
}
