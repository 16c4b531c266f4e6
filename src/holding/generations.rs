//! [`WriteGenerations`]: the generation of the latest write to each key bucket, which a
//! prefetch session checks its observations against (ADR 0010), and the
//! [`PrefetchSource`] a [`HoldingDb`] is.
//!
//! Invariant: a bucket only grows; the counter only grows; a bump raises each of its keys'
//! buckets to at least the new counter value.
//! Invariant: a value read after `generation()` returned `g` is stale only if
//! `written_since(key, g)` — provided every write is bumped *after* it is visible to reads
//! (the caller's duty: `HoldingDb::write`).

use bytes::Bytes;

use super::HoldingDb;
use crate::db::{Db, Op};
use crate::error::Result;
use crate::prefetch::PrefetchSource;
use crate::sync::{AtomicU64, Ordering};

/// Buckets of the write-generation table (keys hash into them).
///
/// Why this many: the table is what a prefetch session checks an observation against, and
/// two keys in one bucket only cost a false invalidation (a re-read), never a stale value.
/// 4,096 buckets are 32 KiB per `HoldingDb`; a block touching a few thousand keys then
/// invalidates a small fraction of another block's unrelated observations, and the whole
/// table stays in the L2 cache. Under loom a handful of buckets keeps the model small.
#[cfg(not(loom))]
pub(crate) const WRITE_GENERATION_BUCKETS: usize = 4096;
/// Buckets of the write-generation table under loom (each bucket is a modelled atomic).
#[cfg(loom)]
pub(crate) const WRITE_GENERATION_BUCKETS: usize = 4;
const _: () = assert!(WRITE_GENERATION_BUCKETS.is_power_of_two());

/// The generations of the latest writes, by key bucket, and the global counter.
///
/// Ordering argument (ADR 0010): a writer applies its write, then takes a new generation
/// `n = counter + 1` (`fetch_add`) and raises its keys' buckets to at least `n`; a reader
/// (a prefetch worker) loads `g = counter` *before* its read. If the read missed the write
/// (it happened before the write, in the order of the lock or backend it read through),
/// the load happened before the `fetch_add` too, so by coherence `g < n`, and any later
/// look at the bucket from a thread that saw the write finished finds a value `> g`.
/// If the read saw the write, the observation is current (a bump seen anyway is only a
/// false invalidation). All accesses are `SeqCst`: the argument needs only coherence and
/// the happens-before of the data's own lock, but a write already takes two locks, so the
/// stronger order costs nothing measurable and leaves nothing to re-argue.
#[derive(Debug)]
pub(super) struct WriteGenerations {
    counter: AtomicU64,
    buckets: Box<[AtomicU64]>,
}

impl WriteGenerations {
    pub(super) fn new() -> Self {
        WriteGenerations {
            counter: AtomicU64::new(0),
            buckets: (0..WRITE_GENERATION_BUCKETS)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    fn bucket(&self, key: &[u8]) -> &AtomicU64 {
        // FNV-1a: short keys, no allocation, deterministic (a test can aim at a bucket).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        &self.buckets[(h as usize) & (WRITE_GENERATION_BUCKETS - 1)]
    }

    /// Call only after the write of `ops` is visible to every read (or failed).
    pub(super) fn bump(&self, ops: &[Op]) {
        let n = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
        for op in ops {
            self.bucket(op.key()).fetch_max(n, Ordering::SeqCst);
        }
    }

    fn generation(&self) -> u64 {
        self.counter.load(Ordering::SeqCst)
    }

    fn written_since(&self, key: &[u8], since: u64) -> bool {
        self.bucket(key).load(Ordering::SeqCst) > since
    }
}

/// A prefetch session reads through the holding database (held writes are seen) and checks
/// its observations against the write generations (ADR 0010).
impl<D: Db + 'static> PrefetchSource for HoldingDb<D> {
    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        Db::get_many(self, keys)
    }
    fn generation(&self) -> u64 {
        self.generations.generation()
    }
    fn written_since(&self, key: &[u8], since: u64) -> bool {
        self.generations.written_since(key, since)
    }
}
