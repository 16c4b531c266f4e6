//! Sync accounting: a wrapper that counts, per database, synced batches, buffered batches
//! and bytes written, so embedders can assert fsync counts in their own CI. The counters
//! are one family of the crate's counter shape (`counts!`, in `src/counts.rs`).

use std::sync::Arc;

use super::{Batch, Db, DbWrapper, Durability, EntryRef};
use crate::error::Result;

crate::counts::counts! {
    /// Live counters of one database's writes, kept by a [`CountingDb`]. Cheap to clone
    /// (shared).
    pub struct SyncCounters =>
    /// A snapshot of [`SyncCounters`].
    pub struct SyncCounts {
        /// Batches written `Synced` that returned `Ok`.
        synced_batches: count,
        /// Batches written `Buffered` that returned `Ok`.
        buffered_batches: count,
        /// Key and value bytes of the batches that returned `Ok`.
        bytes_written: count,
        /// Batches whose write returned `Err`.
        failed_batches: count,
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
            (Ok(()), Durability::Synced) => c.synced_batches.add(1),
            (Ok(()), Durability::Buffered) => c.buffered_batches.add(1),
            (Err(_), _) => c.failed_batches.add(1),
        }
        if res.is_ok() {
            c.bytes_written.add(bytes);
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
