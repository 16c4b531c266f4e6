//! Sync accounting: a wrapper that counts, per database, synced batches, buffered batches
//! and bytes written, so embedders can assert fsync counts in their own CI.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Batch, Db, DbWrapper, Durability, EntryRef};
use crate::error::Result;

/// Live counters of one database's writes. Cheap to clone (shared).
#[derive(Debug, Default)]
pub struct SyncCounters {
    synced_batches: AtomicU64,
    buffered_batches: AtomicU64,
    bytes_written: AtomicU64,
    failed_batches: AtomicU64,
}

/// A snapshot of [`SyncCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SyncCounts {
    /// Batches written `Synced` that returned `Ok`.
    pub synced_batches: u64,
    /// Batches written `Buffered` that returned `Ok`.
    pub buffered_batches: u64,
    /// Key and value bytes of the batches that returned `Ok`.
    pub bytes_written: u64,
    /// Batches whose write returned `Err`.
    pub failed_batches: u64,
}

impl std::ops::Sub for SyncCounts {
    type Output = SyncCounts;
    fn sub(self, o: SyncCounts) -> SyncCounts {
        SyncCounts {
            synced_batches: self.synced_batches - o.synced_batches,
            buffered_batches: self.buffered_batches - o.buffered_batches,
            bytes_written: self.bytes_written - o.bytes_written,
            failed_batches: self.failed_batches - o.failed_batches,
        }
    }
}

impl SyncCounters {
    /// The current counts.
    pub fn snapshot(&self) -> SyncCounts {
        SyncCounts {
            synced_batches: self.synced_batches.load(Ordering::SeqCst),
            buffered_batches: self.buffered_batches.load(Ordering::SeqCst),
            bytes_written: self.bytes_written.load(Ordering::SeqCst),
            failed_batches: self.failed_batches.load(Ordering::SeqCst),
        }
    }
}

/// Wraps a [`Db`] and counts its writes. Reads pass through uncounted.
#[derive(Debug)]
pub struct CountingDb<D> {
    inner: D,
    counters: Arc<SyncCounters>,
}

impl<D: Db> CountingDb<D> {
    /// Counts writes to `inner`.
    pub fn new(inner: D) -> Self {
        CountingDb {
            inner,
            counters: Arc::default(),
        }
    }
    /// The shared counters (keep a clone to read them after the db moved).
    pub fn counters(&self) -> Arc<SyncCounters> {
        self.counters.clone()
    }
    /// The current counts.
    pub fn counts(&self) -> SyncCounts {
        self.counters.snapshot()
    }
    /// The wrapped database.
    pub fn inner(&self) -> &D {
        &self.inner
    }
}

impl<D: Db> CountingDb<D> {
    /// Counts one write's outcome: a synced, buffered or failed batch, and its bytes.
    fn count(&self, res: &Result<()>, durability: Durability, bytes: u64) {
        let c = &self.counters;
        match (res, durability) {
            (Ok(()), Durability::Synced) => {
                c.synced_batches.fetch_add(1, Ordering::SeqCst);
            }
            (Ok(()), Durability::Buffered) => {
                c.buffered_batches.fetch_add(1, Ordering::SeqCst);
            }
            (Err(_), _) => {
                c.failed_batches.fetch_add(1, Ordering::SeqCst);
            }
        }
        if res.is_ok() {
            c.bytes_written.fetch_add(bytes, Ordering::SeqCst);
        }
    }
}

/// Writes are counted; everything else forwards (the unit group is `None`: a unit write
/// would not be counted).
impl<D: Db> DbWrapper for CountingDb<D> {
    type Inner = D;
    fn inner(this: &Self) -> &D {
        &this.inner
    }
    fn write(this: &Self, batch: &Batch, durability: Durability) -> Result<()> {
        let res = this.inner.write(batch, durability);
        this.count(&res, durability, batch.byte_size());
        res
    }
    fn write_entries<'a>(
        this: &Self,
        entries: &mut dyn Iterator<Item = EntryRef<'a>>,
        durability: Durability,
    ) -> Result<()> {
        let mut bytes = 0u64;
        let mut counted = entries.inspect(|(k, v)| {
            bytes += (k.len() + v.map_or(0, |v| v.len())) as u64;
        });
        let res = this.inner.write_entries(&mut counted, durability);
        this.count(&res, durability, bytes);
        res
    }
}
