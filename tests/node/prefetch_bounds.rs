//! Property: prefetch stays within its bounds — at most `PREFETCH_SESSIONS_MAX` sessions
//! prefetch (a later one works without prefetch, falling back to the database); a
//! session's queued, in-flight and retained bytes never exceed `PREFETCH_SESSION_BYTES_MAX`
//! (its `peak_bytes`), and the bound is reached exactly, not short of it; a refused
//! submission queues nothing.

use crate::support;

use std::sync::Arc;

use bytes::Bytes;
use flushpoint::prefetch::{
    PREFETCH_ENTRY_OVERHEAD_BYTES, PREFETCH_SESSION_BYTES_MAX, PREFETCH_SESSIONS_MAX, PrefetchPool,
};
use flushpoint::{Batch, Db, Durability, MemoryDb};
use support::prefetch::{TestSource, wait_settled};

fn key(i: usize) -> Bytes {
    Bytes::from(format!("key{i:08}"))
}

#[test]
fn the_ninth_session_does_not_prefetch_and_still_reads() {
    let pool = PrefetchPool::new(2).unwrap();
    let source = Arc::new(TestSource::new(4, false));
    let mut sessions: Vec<_> = (0..PREFETCH_SESSIONS_MAX)
        .map(|_| pool.session(source.clone()))
        .collect();
    assert_eq!(pool.active_sessions(), PREFETCH_SESSIONS_MAX);
    assert!(sessions.iter().all(|s| s.is_prefetching()));
    let ninth = pool.session(source.clone());
    assert!(!ninth.is_prefetching());
    assert!(!ninth.submit(vec![key(1)]), "the ninth session is refused");
    assert_eq!(ninth.stats().refused, 1);
    assert_eq!(ninth.stats().submitted, 0);
    assert_eq!(pool.active_sessions(), PREFETCH_SESSIONS_MAX);
    // Still usable: reads fall back to the database.
    let db = MemoryDb::new("app");
    let mut b = Batch::new();
    b.put(key(1), &b"v"[..]);
    db.write(&b, Durability::Synced).unwrap();
    assert_eq!(
        ninth.read(&db, &key(1)).unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert_eq!(ninth.stats().misses, 1);
    // A dropped session frees its slot; a cancelled one too.
    drop(sessions.remove(0));
    assert_eq!(pool.active_sessions(), PREFETCH_SESSIONS_MAX - 1);
    let tenth = pool.session(source.clone());
    assert!(tenth.is_prefetching() && tenth.submit(vec![key(2)]));
    tenth.cancel();
    tenth.cancel();
    assert_eq!(
        pool.active_sessions(),
        PREFETCH_SESSIONS_MAX - 1,
        "cancel twice frees once"
    );
    assert!(pool.session(source).is_prefetching());
}

#[test]
fn a_sessions_bytes_never_exceed_its_budget_and_reach_it() {
    // 4 KiB values: 20,000 keys' observations would be 80 MiB; about 2,000 fit.
    let value_bytes = 4096;
    let pool = PrefetchPool::new(2).unwrap();
    let source = Arc::new(TestSource::new(value_bytes, false));
    let session = pool.session(source.clone());
    let keys: Vec<Bytes> = (0..20_000).map(key).collect();
    let per_key = key(0).len() + PREFETCH_ENTRY_OVERHEAD_BYTES;
    assert!(
        20_000 * per_key < PREFETCH_SESSION_BYTES_MAX,
        "the keys alone fit"
    );
    assert!(session.submit(keys));
    wait_settled(&session);
    let s = session.stats();
    println!("{s:?}");
    assert!(s.peak_bytes as usize <= PREFETCH_SESSION_BYTES_MAX, "{s:?}");
    assert!(
        s.retained_bytes as usize <= PREFETCH_SESSION_BYTES_MAX,
        "{s:?}"
    );
    assert!(
        s.over_budget > 0 && s.fetched < 20_000,
        "the budget bound: {s:?}"
    );
    let per_observation = per_key + value_bytes;
    assert!(
        s.retained_bytes as usize > PREFETCH_SESSION_BYTES_MAX - per_observation,
        "the budget is used up to one observation: {s:?}"
    );
    assert_eq!(
        s.retained_bytes as usize,
        s.fetched as usize * per_observation,
        "retained bytes are the observations' bytes"
    );
    // What did not fit is not served: those keys miss.
    let missed = (0..20_000)
        .filter(|&i| session.lookup(&key(i)).is_none())
        .count();
    assert_eq!(missed as u64, s.over_budget);
}

#[test]
fn a_refused_submission_queues_nothing() {
    let pool = PrefetchPool::new(1).unwrap();
    let source = Arc::new(TestSource::new(1, true));
    let session = pool.session(source.clone());
    // Hold the worker at the gate with one key in flight.
    assert!(session.submit(vec![key(0)]));
    source.wait_entered(1);
    let in_flight = session.stats().peak_bytes as usize;
    assert_eq!(in_flight, key(0).len() + PREFETCH_ENTRY_OVERHEAD_BYTES);
    // Fill the budget to exactly one byte short of a key's cost, plus that key: refused.
    let left = PREFETCH_SESSION_BYTES_MAX - in_flight;
    let per_key = key(1).len() + PREFETCH_ENTRY_OVERHEAD_BYTES;
    let fit = left / per_key;
    let over: Vec<Bytes> = (1..=fit + 1).map(key).collect();
    assert!(!session.submit(over), "over the budget by one key");
    let s = session.stats();
    assert_eq!((s.refused, s.submitted), (1, 1));
    assert_eq!(s.peak_bytes as usize, in_flight, "nothing was queued");
    // Exactly what fits is accepted.
    let exact: Vec<Bytes> = (1..=fit).map(key).collect();
    assert!(session.submit(exact));
    assert_eq!(
        session.stats().peak_bytes as usize,
        in_flight + fit * per_key
    );
    // The next key does not fit what is left: refused.
    let spare = PREFETCH_SESSION_BYTES_MAX - in_flight - fit * per_key;
    assert!(spare < per_key);
    assert!(!session.submit(vec![key(fit + 1)]));
    source.open();
    wait_settled(&session);
    let read = source.read.lock().unwrap().clone();
    assert_eq!(read.len(), 1 + fit, "only accepted keys were read");
    assert!(read.iter().all(|k| k.as_ref() != key(fit + 1).as_ref()));
}

#[test]
fn a_submission_larger_than_the_budget_is_refused_whole() {
    let pool = PrefetchPool::new(1).unwrap();
    let source = Arc::new(TestSource::new(1, false));
    let session = pool.session(source.clone());
    assert!(!session.submit(vec![Bytes::from(vec![b'k'; PREFETCH_SESSION_BYTES_MAX])]));
    let s = session.stats();
    assert_eq!((s.refused, s.submitted, s.peak_bytes), (1, 0, 0));
    assert!(session.submit(vec![key(1)]));
    wait_settled(&session);
    assert_eq!(source.read.lock().unwrap().clone(), vec![key(1)]);
    assert_eq!(
        session.lookup(&key(1)),
        Some(Some(Bytes::from(vec![7u8; 1])))
    );
}
