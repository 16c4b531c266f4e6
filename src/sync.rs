//! The threads and locks the crate's concurrent modules use, as one set of names: `std`'s,
//! or under `--cfg loom` loom's, so a loom model schedules the real code (the journal's
//! applier against its writers and readers, the prefetch workers against a block).
//!
//! Only what takes part in the cross-thread protocol is swapped. Locks held within one call
//! and never contended across a model's threads (the simulated file system's, redb's own)
//! stay `std`: loom runs one thread at a time and sees such a call as one step. Where the
//! order of such steps between threads matters (a segment file opened by a reader and
//! unlinked by the applier), [`Step::point`] makes it a step loom can reorder.

#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread;
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread;

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
