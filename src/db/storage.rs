//! A redb `StorageBackend` wrapper that counts the real I/O calls on the file, so "one
//! synced batch" can be checked against "one `sync_data` (fdatasync) on the file".

use std::fmt::Debug;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::{BackendError, StorageBackend};

use crate::poison::Poison;

/// Shared counters of a backend's calls.
#[derive(Debug, Default)]
pub struct BackendCounters {
    sync_data_calls: AtomicU64,
    write_calls: AtomicU64,
    set_len_calls: AtomicU64,
    bytes_written: AtomicU64,
}

/// A snapshot of [`BackendCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BackendCounts {
    /// `sync_data` calls (fdatasync on a file).
    pub sync_data_calls: u64,
    /// `write` calls.
    pub write_calls: u64,
    /// `set_len` calls (file growth or shrink).
    pub set_len_calls: u64,
    /// Bytes passed to `write`.
    pub bytes_written: u64,
}

impl std::ops::Sub for BackendCounts {
    type Output = BackendCounts;
    fn sub(self, o: BackendCounts) -> BackendCounts {
        BackendCounts {
            sync_data_calls: self.sync_data_calls - o.sync_data_calls,
            write_calls: self.write_calls - o.write_calls,
            set_len_calls: self.set_len_calls - o.set_len_calls,
            bytes_written: self.bytes_written - o.bytes_written,
        }
    }
}

impl BackendCounters {
    /// The current counts.
    pub fn snapshot(&self) -> BackendCounts {
        BackendCounts {
            sync_data_calls: self.sync_data_calls.load(Ordering::SeqCst),
            write_calls: self.write_calls.load(Ordering::SeqCst),
            set_len_calls: self.set_len_calls.load(Ordering::SeqCst),
            bytes_written: self.bytes_written.load(Ordering::SeqCst),
        }
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
        self.counters.set_len_calls.fetch_add(1, Ordering::SeqCst);
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> IoResult<()> {
        self.check_fence()?;
        self.counters.sync_data_calls.fetch_add(1, Ordering::SeqCst);
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> IoResult<()> {
        self.check_fence()?;
        self.counters.write_calls.fetch_add(1, Ordering::SeqCst);
        self.counters
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::SeqCst);
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
