//! Property: prefetch stops when asked — a cancelled session's queued batches are never
//! read (the worker finishes the batch it holds, discards it, and moves on), its lookups
//! miss and its submissions are refused; shutting the pool down (or dropping it) with
//! sessions alive and workers mid-read joins every worker without deadlock, reads no
//! further batch, and leaves the sessions usable without prefetch.
//!
//! The source holds each read at a gate, so "mid-batch" is a state the test controls, not
//! a timing guess. A shutdown that joined its workers while holding the pool's lock would
//! deadlock here (the worker takes that lock after its read); the watchdog turns that into
//! a failure instead of a hang.

use crate::support;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use flushpoint::prefetch::{PREFETCH_BATCH_KEYS, PrefetchPool, PrefetchSession};
use support::prefetch::{TestSource, wait_settled};

fn keys(prefix: &str, n: usize) -> Vec<Bytes> {
    (0..n)
        .map(|i| Bytes::from(format!("{prefix}{i:06}")))
        .collect()
}

/// Runs `f` on a thread. A panic in it is the test's failure; if it does not return within
/// 30 s (a deadlock), the test process ends with a failure — unwinding would only hang on
/// the lock the deadlock holds. Every test body runs under it, so a deadlock in any pool
/// drop fails the suite instead of hanging it.
fn within_deadline(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(()) => handle.join().expect("returned"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            // Written past the test harness's output capture, which `exit` would discard.
            let _ = writeln!(
                std::io::stderr(),
                "FAILED: {what} did not return within 30 s: deadlock"
            );
            std::process::exit(101);
        }
    }
}

/// Opens the gate once `session` sees the pool shut down.
fn opener_after_shutdown(
    source: &Arc<TestSource>,
    session: &Arc<PrefetchSession>,
) -> std::thread::JoinHandle<()> {
    let (source, session) = (source.clone(), session.clone());
    std::thread::spawn(move || {
        while session.is_prefetching() {
            std::thread::sleep(Duration::from_millis(1));
        }
        source.open();
    })
}

#[test]
fn cancel_stops_the_worker_between_batches() {
    within_deadline("cancel_stops_the_worker_between_batches", || {
        let pool = PrefetchPool::new(1).unwrap();
        let source = Arc::new(TestSource::new(8, true));
        let session = pool.session(source.clone());
        // Five batches queued; the worker holds the first at the gate.
        assert!(session.submit(keys("a", 5 * PREFETCH_BATCH_KEYS)));
        source.wait_entered(1);
        session.cancel();
        assert!(!session.is_prefetching());
        assert!(!session.submit(keys("b", 1)), "a cancelled session refuses");
        source.open();
        // A second session's key, behind the cancelled one on the one worker: once it is
        // read, the worker has passed the cancelled session.
        let other = pool.session(source.clone());
        assert!(other.submit(keys("c", 1)));
        wait_settled(&other);
        assert_eq!(
            source.entered.load(Ordering::SeqCst),
            2,
            "one batch of the cancelled session (the one held), then the other session's"
        );
        let s = session.stats();
        assert_eq!(
            s.fetched, 0,
            "the batch read across the cancel is discarded"
        );
        assert_eq!(s.retained_bytes, 0);
        assert_eq!(
            session.lookup(b"a000000"),
            None,
            "lookups miss after cancel"
        );
        assert_eq!(pool.active_sessions(), 1, "cancel released the slot");
    });
}

#[test]
fn clear_discards_a_batch_in_flight() {
    within_deadline("clear_discards_a_batch_in_flight", || {
        let pool = PrefetchPool::new(1).unwrap();
        let source = Arc::new(TestSource::new(8, true));
        let session = pool.session(source.clone());
        assert!(session.submit(keys("a", 2 * PREFETCH_BATCH_KEYS)));
        source.wait_entered(1);
        session.clear();
        source.open();
        assert!(session.submit(keys("b", 1)));
        // Settled once the new key is retained (the cleared keys never will be).
        let start = std::time::Instant::now();
        while session.stats().fetched < 1 {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "b000000 was not read"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            source.entered.load(Ordering::SeqCst),
            2,
            "the queued batch was dropped"
        );
        assert_eq!(
            session.lookup(b"a000000"),
            None,
            "the batch in flight was discarded"
        );
        assert!(session.lookup(b"b000000").is_some());
        assert_eq!(session.stats().fetched, 1);
    });
}

#[test]
fn shutdown_with_live_sessions_and_workers_mid_read_does_not_deadlock() {
    within_deadline(
        "shutdown_with_live_sessions_and_workers_mid_read_does_not_deadlock",
        || {
            let pool = PrefetchPool::new(2).unwrap();
            let source = Arc::new(TestSource::new(8, true));
            let a = Arc::new(pool.session(source.clone()));
            let b = Arc::new(pool.session(source.clone()));
            assert!(a.submit(keys("a", 3 * PREFETCH_BATCH_KEYS)));
            assert!(b.submit(keys("b", 3 * PREFETCH_BATCH_KEYS)));
            // Both workers at the gate, mid-batch.
            source.wait_entered(2);
            // The gate opens once shutdown has begun (the session sees it), so the workers return
            // from their reads into a shutting-down pool — not a guess at timing.
            let opener = opener_after_shutdown(&source, &a);
            let p = pool.clone();
            within_deadline("shutdown", move || p.shutdown());
            opener.join().unwrap();
            assert_eq!(
                source.entered.load(Ordering::SeqCst),
                2,
                "no batch started after shutdown"
            );
            pool.shutdown(); // idempotent
            assert!(!a.is_prefetching() && !b.is_prefetching());
            assert!(!a.submit(keys("c", 1)), "refused after shutdown");
            assert!(!pool.session(source.clone()).is_prefetching());
            // Still usable: lookups answer (misses here), drop is fine.
            assert_eq!(a.lookup(b"c000000"), None);
            within_deadline("dropping the sessions", move || drop((a, b)));
        },
    );
}

#[test]
fn dropping_the_last_pool_handle_shuts_it_down() {
    within_deadline("dropping_the_last_pool_handle_shuts_it_down", || {
        let pool = PrefetchPool::new(2).unwrap();
        let source = Arc::new(TestSource::new(8, true));
        let session = Arc::new(pool.session(source.clone()));
        assert!(session.submit(keys("a", 3 * PREFETCH_BATCH_KEYS)));
        // Both workers at the gate, each with one batch.
        source.wait_entered(2);
        let clone = pool.clone();
        drop(pool);
        assert!(session.is_prefetching(), "a clone keeps the pool running");
        let opener = opener_after_shutdown(&source, &session);
        within_deadline("dropping the last handle", move || drop(clone));
        opener.join().unwrap();
        assert_eq!(
            source.entered.load(Ordering::SeqCst),
            2,
            "no batch after shutdown"
        );
        assert!(!session.is_prefetching());
        assert!(!session.submit(keys("b", 1)));
    });
}
