//! A redb `StorageBackend` wrapper that counts the real I/O calls on the file, so "one
//! synced batch" can be checked against "one `sync_data` (fdatasync) on the file". The
//! counters are one family of the crate's counter shape (`counts!`, in `src/counts.rs`).

use std::fmt::Debug;
use std::ops::Bound;
use std::sync::Arc;

use redb::{BackendError, StorageBackend};

use crate::poison::Poison;

crate::counts::counts! {
    /// Shared counters of a backend's calls, kept by a [`CountingBackend`].
    pub struct BackendCounters =>
    /// A snapshot of [`BackendCounters`].
    pub struct BackendCounts {
        /// `sync_data` calls (fdatasync on a file).
        sync_data_calls: count,
        /// `write` calls.
        write_calls: count,
        /// `set_len` calls (file growth or shrink).
        set_len_calls: count,
        /// Bytes passed to `write`.
        bytes_written: count,
    }
}

/// Wraps a redb backend and counts its calls. Locking is forwarded unchanged.
#[derive(Debug)]
pub struct CountingBackend<B> {
    inner: B,
    counters: Arc<BackendCounters>,
    /// Once this poison is set, every write, `set_len` and `sync_data` fails without
    /// reaching the file (see [`CountingBackend::fenced_by`]).
    fence: Option<Arc<Poison>>,
}

impl<B: StorageBackend> CountingBackend<B> {
    /// Counts the calls made to `inner`.
    pub fn new(inner: B) -> Self {
        CountingBackend {
            inner,
            counters: Arc::default(),
            fence: None,
        }
    }

    /// Fences the file with `poison`: once it is set, redb's writes and syncs fail without
    /// reaching the file, so nothing redb does after a failure elsewhere — its close's
    /// durable commit included — makes its non-durable commits durable. The journal's index
    /// needs it: a non-durable apply step may list runs not yet synced (ADR 0014), which only
    /// a checkpoint may make durable, after their syncs.
    pub(crate) fn fenced_by(mut self, poison: Arc<Poison>) -> Self {
        self.fence = Some(poison);
        self
    }

    /// `Err` once the fence's poison is set.
    fn check_fence(&self) -> IoResult<()> {
        match &self.fence {
            Some(p) if p.is_set() => Err(std::io::Error::other(
                "the index is fenced: the engine was poisoned by an earlier failure",
            )),
            _ => Ok(()),
        }
    }
    /// The shared counters.
    pub fn counters(&self) -> Arc<BackendCounters> {
        self.counters.clone()
    }
}

type IoResult<T> = std::result::Result<T, std::io::Error>;

impl<B: StorageBackend> StorageBackend for CountingBackend<B> {
    fn len(&self) -> IoResult<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> IoResult<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> IoResult<()> {
        self.check_fence()?;
        self.counters.set_len_calls.add(1);
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> IoResult<()> {
        self.check_fence()?;
        self.counters.sync_data_calls.add(1);
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> IoResult<()> {
        self.check_fence()?;
        self.counters.write_calls.add(1);
        self.counters.bytes_written.add(data.len() as u64);
        self.inner.write(offset, data)
    }
    fn close(&self) -> IoResult<()> {
        self.inner.close()
    }
    fn try_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(s, e)
    }
    fn try_lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(s, e)
    }
    fn lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(s, e)
    }
    fn lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(s, e)
    }
    fn unlock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(s, e)
    }
    fn query_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(s, e)
    }
}
