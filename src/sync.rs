//! The threads, locks and atomics the crate's concurrent modules use, as one set of names:
//! `std`'s, or under `--cfg loom` loom's, so a loom model schedules the real code (the
//! journal's applier against its writers and readers, the prefetch workers against a block,
//! the holding overlay's held windows and write generations).
//!
//! Only what takes part in the cross-thread protocol is swapped. Locks held within one call
//! and never contended across a model's threads (the simulated file system's, redb's own)
//! stay `std`: loom runs one thread at a time and sees such a call as one step. Where the
//! order of such steps between threads matters (a segment file opened by a reader and
//! unlinked by the applier), [`Step::point`] makes it a step loom can reorder.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard, RwLock};
#[cfg(not(loom))]
pub(crate) use std::thread;

/// loom's `RwLock` with the `Debug` the `std` one has (the holding overlay's held windows:
/// under loom every apply and every held read is a step loom orders, so the prefetch model,
/// `tests/loom_prefetch.rs`, can put a worker's read between a write's apply and its
/// generation bump).
#[cfg(loom)]
#[derive(Default)]
pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

#[cfg(loom)]
impl<T> RwLock<T> {
    pub(crate) fn read(&self) -> std::sync::LockResult<loom::sync::RwLockReadGuard<'_, T>> {
        self.0.read()
    }
    pub(crate) fn write(&self) -> std::sync::LockResult<loom::sync::RwLockWriteGuard<'_, T>> {
        self.0.write()
    }
}

#[cfg(loom)]
impl<T> std::fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RwLock")
    }
}

/// A point where loom may switch threads before an operation it cannot see.
///
/// loom orders only the operations it models; the file system and redb lock `std` mutexes
/// inside one call, so without a point before them a reader's segment read and the
/// applier's unlink of that segment would always run in whichever order the surrounding
/// loom operations put them, and the race between them would never be explored. Each
/// [`Step::point`] is an access to one loom atomic shared by the engine's threads, so loom
/// explores every order of the points. Without `--cfg loom` it is empty and costs nothing.
#[derive(Debug, Default)]
pub(crate) struct Step {
    #[cfg(loom)]
    order: loom::sync::atomic::AtomicUsize,
}

impl Step {
    /// Marks the operation that follows as one loom may reorder against other threads'.
    #[inline(always)]
    pub(crate) fn point(&self) {
        #[cfg(loom)]
        self.order
            .fetch_add(1, loom::sync::atomic::Ordering::SeqCst);
    }
}
