//! loom over the crate's own prefetch module and `HoldingDb`: session, worker and
//! invalidation.
//!
//! Under `--cfg loom` the prefetch module's mutexes, condition variable and worker threads,
//! and `HoldingDb`'s write-generation atomics and held-window lock, are loom's
//! (`#[cfg(loom)]` aliases in `src/prefetch/mod.rs` and `src/holding/generations.rs`; the
//! table has 4 buckets there), so loom schedules the real worker loop against the real
//! write path.
//! The held lock must be loom's: loom's partial-order reduction orders only the operations
//! it sees, and with a `std` lock it treated a write's bump and apply as one step and never
//! put a worker's read between them (the planted bump-before-apply went uncaught). The
//! `MemoryDb` below stays `std`; passing through, its read and write follow the held lock's
//! check in the same loom step, so their order is the held lock's.
//!
//! * `a_read_after_a_write_is_never_stale` (holding and passing through): one worker; the
//!   main thread — the executing block — queues key `k`, writes `k`, then reads it through
//!   the session; in every interleaving it reads the new value. Across the interleavings
//!   the session served a prefetched value at least once and invalidated one at least once
//!   (so the check is not vacuous). Exhaustive: 33,522 interleavings each.
//! * `cancel_stops_the_worker_between_batches`: two batches queued; another thread cancels;
//!   after `cancel` returns no further batch starts beyond one already taken, lookups miss,
//!   and shutting the pool down with the session alive does not deadlock (loom reports a
//!   deadlock as a failure). Exhaustive: 99,475 interleavings.
//!
//! Planted bugs, each a patch `tests/planted/<bug>.patch` applied with `--cfg <bug>` set
//! (`scripts/planted-bugs.sh`); with it, the first test expects loom to find a stale read
//! (`should_panic`):
//! * `loom_bug_bump_before_apply` (`src/holding/mod.rs`): a write bumps its keys'
//!   generations before it is applied;
//! * `loom_bug_generation_after_read` (`src/prefetch/mod.rs`): the worker loads the
//!   generation after its read instead of before.
//!
//! Run (prints the interleavings explored):
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release
//! --test loom_prefetch -- --nocapture`; a planted bug: `scripts/planted-bugs.sh
//! loom_bug_<name>` (it applies the patch to a copy of the tree).
#![cfg(loom)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use flushpoint::prefetch::{PREFETCH_BATCH_KEYS, PrefetchPool, PrefetchSource};
use flushpoint::{Batch, Db, Durability, HoldingDb, MemoryDb, Result};

/// Exhaustive: no preemption bound (unless `LOOM_MAX_PREEMPTIONS` sets one) — the models
/// are small enough (about 15 s in all).
fn builder() -> loom::model::Builder {
    loom::model::Builder::new()
}

fn put(db: &dyn Db, k: &Bytes, v: &'static [u8]) {
    let mut b = Batch::new();
    b.put(k.clone(), Bytes::from_static(v));
    db.write(&b, Durability::Synced).expect("write");
}

fn invalidation(holding: bool) {
    static EXECUTIONS: AtomicUsize = AtomicUsize::new(0);
    static HITS: AtomicUsize = AtomicUsize::new(0);
    static INVALIDATED: AtomicUsize = AtomicUsize::new(0);
    EXECUTIONS.store(0, Ordering::SeqCst);
    HITS.store(0, Ordering::SeqCst);
    INVALIDATED.store(0, Ordering::SeqCst);
    builder().check(move || {
        EXECUTIONS.fetch_add(1, Ordering::SeqCst);
        let k = Bytes::from_static(b"k");
        let db = Arc::new(HoldingDb::new(MemoryDb::new("app")));
        put(&*db, &k, b"old");
        if holding {
            db.hold().expect("hold");
        }
        let pool = PrefetchPool::new(1).expect("pool");
        let session = pool.session(db.clone());
        assert!(session.submit(vec![k.clone()]));
        // The block being executed writes k while the worker may be reading it...
        put(&*db, &k, b"new");
        // ...then reads it through the session: never the old value.
        let got = session.read(&*db, &k).expect("read");
        assert_eq!(
            got.as_deref(),
            Some(&b"new"[..]),
            "stale read: the session served a value written over (interleaving {})",
            EXECUTIONS.load(Ordering::SeqCst)
        );
        let stats = session.stats();
        HITS.fetch_add(stats.hits as usize, Ordering::SeqCst);
        INVALIDATED.fetch_add(stats.invalidated as usize, Ordering::SeqCst);
        drop(session);
        pool.shutdown();
    });
    let (executions, hits, invalidated) = (
        EXECUTIONS.load(Ordering::SeqCst),
        HITS.load(Ordering::SeqCst),
        INVALIDATED.load(Ordering::SeqCst),
    );
    println!(
        "holding {holding}: {executions} interleavings, {hits} served from the session, \
         {invalidated} invalidated"
    );
    assert!(hits > 0, "some interleaving served a prefetched value");
    assert!(
        invalidated > 0,
        "some interleaving invalidated an observation"
    );
}

#[test]
#[cfg_attr(
    any(loom_bug_bump_before_apply, loom_bug_generation_after_read),
    should_panic(expected = "stale read")
)]
fn a_read_after_a_write_is_never_stale_holding() {
    invalidation(true);
}

#[test]
#[cfg_attr(
    any(loom_bug_bump_before_apply, loom_bug_generation_after_read),
    should_panic(expected = "stale read")
)]
fn a_read_after_a_write_is_never_stale_passing_through() {
    invalidation(false);
}

/// A source counting the batches it was asked to read.
struct Counting {
    db: HoldingDb<MemoryDb>,
    batches: std::sync::atomic::AtomicUsize,
}

impl PrefetchSource for Counting {
    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        PrefetchSource::get_many(&self.db, keys)
    }
    fn generation(&self) -> u64 {
        self.db.generation()
    }
    fn written_since(&self, key: &[u8], since: u64) -> bool {
        self.db.written_since(key, since)
    }
}

#[test]
fn cancel_stops_the_worker_between_batches() {
    static EXECUTIONS: AtomicUsize = AtomicUsize::new(0);
    EXECUTIONS.store(0, Ordering::SeqCst);
    builder().check(|| {
        EXECUTIONS.fetch_add(1, Ordering::SeqCst);
        let source = Arc::new(Counting {
            db: HoldingDb::new(MemoryDb::new("app")),
            batches: AtomicUsize::new(0),
        });
        let pool = PrefetchPool::new(1).expect("pool");
        let session = Arc::new(pool.session(source.clone()));
        // Two batches' worth.
        let keys: Vec<Bytes> = (0..PREFETCH_BATCH_KEYS + 1)
            .map(|i| Bytes::from(format!("{i:04}")))
            .collect();
        assert!(session.submit(keys));
        let canceller = {
            let (session, source) = (session.clone(), source.clone());
            loom::thread::spawn(move || {
                session.cancel();
                let at_cancel = source.batches.load(Ordering::SeqCst);
                assert_eq!(session.lookup(b"0000"), None, "lookups miss after cancel");
                assert!(!session.submit(vec![Bytes::from_static(b"x")]));
                at_cancel
            })
        };
        let at_cancel = canceller.join().expect("canceller");
        // Shut down with the session alive: no deadlock, the worker joined.
        pool.shutdown();
        let batches = source.batches.load(Ordering::SeqCst);
        assert!(
            batches <= at_cancel + 1,
            "a batch started after cancel beyond the one already taken: {batches} > {at_cancel} + 1"
        );
        assert!(!session.is_prefetching());
    });
    println!(
        "cancel: {} interleavings",
        EXECUTIONS.load(Ordering::SeqCst)
    );
}
