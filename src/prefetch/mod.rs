//! Prefetch sessions: bounded speculative reads that warm the next block (ADR 0010).
//!
//! A caller that knows which keys block N+1 will read queues them on a [`PrefetchSession`];
//! the workers of a [`PrefetchPool`] (shared by every session) read them in batches through
//! a [`PrefetchSource`] — a [`crate::HoldingDb`], so held writes are seen — into storage the
//! session owns. Execution then reads through the session ([`PrefetchSession::read`]):
//! a valid observation, else the database.
//!
//! Invariant: a lookup never returns a value a write made stale: an observation keeps the
//! source's generation loaded *before* its read, and is served only while
//! `!written_since(key, generation)` (the source bumps after every write is visible).
//! Invariant: a session's queued keys, in-flight keys and retained observations together
//! never exceed [`PREFETCH_SESSION_BYTES_MAX`]; at most [`PREFETCH_SESSIONS_MAX`] sessions
//! hold a prefetch slot; the pool's ready list holds each session at most once.
//! Invariant: nothing a session reads is put into any shared cache of ours; it lives in the
//! session and is dropped by `clear`, `cancel` and drop.
//! Invariant: workers check cancellation and shutdown between batches; no lock is held
//! across a read, and nothing joins a worker while holding a lock (lock order: pool, then
//! session; a worker never holds both).
//! Invariant: this module does no writes and decides nothing about which keys to prefetch.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use crate::db::Db;
use crate::error::{Error, Result};

use crate::sync::{Condvar, Mutex, MutexGuard, thread};

type JoinHandle = thread::JoinHandle<()>;

/// Bytes one session's queue and retained values share.
///
/// Why: issue 12's bound (the same as the reference's per-collection budget): a block's
/// reads fit many times over, and eight sessions stay within 64 MiB.
pub const PREFETCH_SESSION_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Sessions prefetching at once (64 MiB in all); later ones work without prefetch.
///
/// Why: bounds the memory all sessions retain together ([`PREFETCH_SESSION_BYTES_MAX`]
/// each); a node prefetches one block ahead, so a handful is plenty.
pub const PREFETCH_SESSIONS_MAX: usize = 8;

/// Default worker threads.
///
/// Why: two reads in flight already overlap the disk's latency with execution; more
/// workers compete with execution for the cores of a small node.
pub const PREFETCH_WORKERS_DEFAULT: usize = 2;

/// Keys a worker reads in one batch (one `get_many`, one read snapshot).
///
/// Why: large enough to pay a read transaction's setup once per many keys, small enough
/// that cancellation and shutdown (checked between batches) wait for at most one batch per
/// worker — on a cold disk about 128 random reads, tens of milliseconds.
pub const PREFETCH_BATCH_KEYS: usize = 128;

/// Bytes charged per queued key or retained observation beyond its key and value bytes.
///
/// Why: the map entry, the `Bytes` handles and the generation are memory too; charging a
/// fixed amount keeps a session of many tiny keys within its budget in fact, not only on
/// paper.
pub const PREFETCH_ENTRY_OVERHEAD_BYTES: usize = 64;

const _: () = assert!(PREFETCH_SESSIONS_MAX * PREFETCH_SESSION_BYTES_MAX <= 64 * 1024 * 1024);
const _: () = assert!(PREFETCH_BATCH_KEYS > 0 && PREFETCH_WORKERS_DEFAULT > 0);
// A session is shared by the executing thread and the one that cancels it; the pool by the
// node and its apps.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<PrefetchSession>();
    shared::<PrefetchPool>();
};

/// What a session reads from: sees held writes (a [`crate::HoldingDb`]), and says which keys
/// were written since a generation.
pub trait PrefetchSource: Send + Sync + 'static {
    /// The values at `keys`, in order, as a read of the database would see them now.
    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>>;
    /// A generation read before a read starts; every later write bumps past it.
    fn generation(&self) -> u64;
    /// True if `key` may have been written after generation `since` (false positives
    /// allowed, false negatives never).
    fn written_since(&self, key: &[u8], since: u64) -> bool;
}

/// What a session did (a snapshot; counters only grow, except `retained_bytes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PrefetchStats {
    /// Keys accepted by `submit`.
    pub submitted: u64,
    /// Observations retained (reads that completed and fit).
    pub fetched: u64,
    /// Lookups served from a valid observation.
    pub hits: u64,
    /// Lookups that found no observation.
    pub misses: u64,
    /// Lookups that found an observation written since it was read (dropped; not counted
    /// in `misses`).
    pub invalidated: u64,
    /// Submissions refused (inactive pool or session, cancelled, over the byte budget,
    /// shut down).
    pub refused: u64,
    /// Reads that completed but did not fit the byte budget (not retained).
    pub over_budget: u64,
    /// Batches whose read failed (their keys are not retained; execution reads them).
    pub read_errors: u64,
    /// Bytes retained now (observations).
    pub retained_bytes: u64,
    /// The most bytes queued, in flight and retained at once (never above
    /// [`PREFETCH_SESSION_BYTES_MAX`]).
    pub peak_bytes: u64,
}

/// One retained read: the value (or absence) and the generation loaded before the read.
#[derive(Debug)]
struct Observation {
    value: Option<Bytes>,
    generation: u64,
}

fn key_cost(key: &Bytes) -> usize {
    key.len() + PREFETCH_ENTRY_OVERHEAD_BYTES
}

fn observation_cost(key: &Bytes, value: &Option<Bytes>) -> usize {
    key_cost(key) + value.as_ref().map_or(0, |v| v.len())
}

#[derive(Debug, Default)]
struct SessionState {
    queue: VecDeque<Bytes>,
    queued_bytes: usize,
    in_flight_bytes: usize,
    observations: HashMap<Bytes, Observation>,
    retained_bytes: usize,
    /// Bumped by `clear` and `cancel`: a batch taken under an older epoch is discarded.
    epoch: u64,
    cancelled: bool,
    /// True while the session is on the pool's ready list (or about to be put back on it
    /// by the worker that took its last batch): it is listed at most once.
    listed: bool,
    stats: PrefetchStats,
}

impl SessionState {
    fn total_bytes(&self) -> usize {
        self.queued_bytes + self.in_flight_bytes + self.retained_bytes
    }

    fn note_peak(&mut self) {
        let total = self.total_bytes();
        assert!(
            total <= PREFETCH_SESSION_BYTES_MAX,
            "invariant: a session's queue, in-flight keys and observations fit its budget \
             ({total} > {PREFETCH_SESSION_BYTES_MAX})"
        );
        self.stats.peak_bytes = self.stats.peak_bytes.max(total as u64);
        self.stats.retained_bytes = self.retained_bytes as u64;
    }

    fn drop_all(&mut self) {
        self.queue.clear();
        self.queued_bytes = 0;
        self.observations.clear();
        self.retained_bytes = 0;
        self.stats.retained_bytes = 0;
        self.epoch += 1;
    }
}

struct SessionShared {
    state: Mutex<SessionState>,
    source: Arc<dyn PrefetchSource>,
}

#[derive(Default)]
struct PoolState {
    shutdown: bool,
    /// Sessions with queued keys, each at most once; bounded by the slots.
    ready: VecDeque<Arc<SessionShared>>,
    /// Sessions holding a prefetch slot.
    active: usize,
    workers: Vec<JoinHandle>,
}

struct PoolShared {
    state: Mutex<PoolState>,
    /// Signalled when a session is listed and at shutdown.
    work: Condvar,
}

impl PoolShared {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().expect("prefetch pool lock")
    }

    fn shutdown(&self) {
        let workers = {
            let mut p = self.lock();
            p.shutdown = true;
            p.ready.clear();
            std::mem::take(&mut p.workers)
        };
        self.work.notify_all();
        // The pool lock is released: a worker finishing its batch takes it to look for the
        // next one, sees `shutdown` and returns. Joining under it would deadlock.
        for w in workers {
            // A worker that panicked (a source that panics) has nothing left to stop.
            let _ = w.join();
        }
    }
}

/// Owned by the `PrefetchPool` handles only (not by sessions or workers): the last handle
/// dropped shuts the pool down.
struct PoolOwner(Arc<PoolShared>);

impl Drop for PoolOwner {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

/// The workers shared by every session: a cloneable handle; the last handle dropped shuts
/// the pool down (as [`PrefetchPool::shutdown`] does).
#[derive(Clone)]
pub struct PrefetchPool {
    shared: Arc<PoolShared>,
    _owner: Arc<PoolOwner>,
}

impl std::fmt::Debug for PrefetchPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.shared.lock();
        f.debug_struct("PrefetchPool")
            .field("active_sessions", &p.active)
            .field("workers", &p.workers.len())
            .field("shutdown", &p.shutdown)
            .finish()
    }
}

impl PrefetchPool {
    /// A pool of `workers` threads ([`PREFETCH_WORKERS_DEFAULT`] is the default).
    ///
    /// 0 workers: [`Error::InvalidInput`]. A thread that cannot be spawned: the error, with
    /// the threads already spawned stopped.
    pub fn new(workers: usize) -> Result<PrefetchPool> {
        if workers == 0 {
            return Err(Error::InvalidInput(
                "a prefetch pool needs at least one worker".into(),
            ));
        }
        let shared = Arc::new(PoolShared {
            state: Mutex::new(PoolState::default()),
            work: Condvar::new(),
        });
        let pool = PrefetchPool {
            shared: shared.clone(),
            _owner: Arc::new(PoolOwner(shared.clone())),
        };
        for i in 0..workers {
            let worker_shared = shared.clone();
            let handle = spawn_worker(i, move || work(&worker_shared))?;
            pool.shared.lock().workers.push(handle);
        }
        Ok(pool)
    }

    /// A session reading from `source`. With [`PREFETCH_SESSIONS_MAX`] sessions already
    /// holding a slot, or the pool shut down, the session never prefetches (`submit`
    /// returns false, lookups miss) but is still usable: `read` falls back to the database.
    pub fn session(&self, source: Arc<dyn PrefetchSource>) -> PrefetchSession {
        let slot = {
            let mut p = self.shared.lock();
            let free = !p.shutdown && p.active < PREFETCH_SESSIONS_MAX;
            if free {
                p.active += 1;
            }
            free
        };
        PrefetchSession {
            shared: Arc::new(SessionShared {
                state: Mutex::new(SessionState {
                    cancelled: !slot,
                    ..SessionState::default()
                }),
                source,
            }),
            pool: self.shared.clone(),
            slot: Mutex::new(slot),
        }
    }

    /// Sessions holding a prefetch slot now.
    pub fn active_sessions(&self) -> usize {
        self.shared.lock().active
    }

    /// Stops the workers between batches and joins them, without holding any lock a worker
    /// needs. Idempotent; dropping the last handle does it too. Later submissions are
    /// refused and later sessions never prefetch; live sessions stay usable (lookups of
    /// what they retained still work, `read` falls back).
    pub fn shutdown(&self) {
        self.shared.shutdown();
    }
}

fn spawn_worker(i: usize, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle> {
    thread::Builder::new()
        .name(format!("flushpoint-prefetch-{i}"))
        .spawn(f)
        .map_err(|e| Error::storage("prefetch", "spawn a prefetch worker", e))
}

/// One worker: take a session off the ready list, take one batch of its keys, read them,
/// retain what is still wanted; until shutdown.
fn work(pool: &PoolShared) {
    loop {
        // Between batches: shutdown is checked here, cancellation when taking the batch.
        let session = {
            let mut p = pool.lock();
            loop {
                if p.shutdown {
                    return;
                }
                if let Some(s) = p.ready.pop_front() {
                    break s;
                }
                p = pool.work.wait(p).expect("prefetch pool lock");
            }
        };
        let (keys, bytes, epoch, more) = {
            let mut s = session.state.lock().expect("prefetch session lock");
            if s.cancelled || s.queue.is_empty() {
                s.listed = false;
                continue;
            }
            let n = s.queue.len().min(PREFETCH_BATCH_KEYS);
            let keys: Vec<Bytes> = s.queue.drain(..n).collect();
            let bytes: usize = keys.iter().map(key_cost).sum();
            s.queued_bytes -= bytes;
            s.in_flight_bytes += bytes;
            let more = !s.queue.is_empty();
            s.listed = more;
            (keys, bytes, s.epoch, more)
        };
        if more {
            // Back at the end of the list (round robin): another worker may read its next
            // batch meanwhile.
            let mut p = pool.lock();
            if !p.shutdown {
                p.ready.push_back(session.clone());
                drop(p);
                pool.work.notify_one();
            }
        }
        // Ordering: the generation is loaded before the read. Loaded after it, a write
        // applied and bumped between the read and the load would leave an old value
        // looking current.
        let generation = session.source.generation();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
        let read = session.source.get_many(&refs);
        let mut s = session.state.lock().expect("prefetch session lock");
        s.in_flight_bytes -= bytes;
        let values = match read {
            Ok(values) if values.len() == keys.len() => values,
            _ => {
                s.stats.read_errors += 1;
                continue;
            }
        };
        if s.cancelled || s.epoch != epoch {
            continue;
        }
        for (key, value) in keys.into_iter().zip(values) {
            if let Some(old) = s.observations.remove(&key) {
                s.retained_bytes -= observation_cost(&key, &old.value);
            }
            let cost = observation_cost(&key, &value);
            if s.total_bytes() + cost > PREFETCH_SESSION_BYTES_MAX {
                s.stats.over_budget += 1;
                continue;
            }
            s.retained_bytes += cost;
            s.stats.fetched += 1;
            s.observations
                .insert(key, Observation { value, generation });
        }
        s.note_peak();
    }
}

/// Keys queued for prefetch and the observations read for them, owned by one caller
/// (e.g. the execution of one block). `Send + Sync`.
pub struct PrefetchSession {
    shared: Arc<SessionShared>,
    pool: Arc<PoolShared>,
    /// True while this session holds one of the pool's slots.
    slot: Mutex<bool>,
}

impl std::fmt::Debug for PrefetchSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefetchSession")
            .field("stats", &self.stats())
            .finish()
    }
}

impl PrefetchSession {
    fn lock(&self) -> MutexGuard<'_, SessionState> {
        self.shared.state.lock().expect("prefetch session lock")
    }

    /// Queues `keys` (duplicates within the call are queued once). Returns false, queuing
    /// nothing, when refused: the session has no slot or was cancelled, the pool is shut
    /// down, or the keys do not fit what is left of [`PREFETCH_SESSION_BYTES_MAX`].
    pub fn submit(&self, mut keys: Vec<Bytes>) -> bool {
        keys.sort_unstable();
        keys.dedup();
        // Lock order: pool, then session (a worker never holds both).
        let mut p = self.pool.lock();
        let mut s = self.lock();
        let bytes: usize = keys.iter().map(key_cost).sum();
        if p.shutdown || s.cancelled || s.total_bytes() + bytes > PREFETCH_SESSION_BYTES_MAX {
            s.stats.refused += 1;
            return false;
        }
        if keys.is_empty() {
            return true;
        }
        s.stats.submitted += keys.len() as u64;
        s.queued_bytes += bytes;
        s.queue.extend(keys);
        s.note_peak();
        if !s.listed {
            s.listed = true;
            p.ready.push_back(self.shared.clone());
            drop(s);
            drop(p);
            self.pool.work.notify_one();
        }
        true
    }

    /// The retained observation of `key` if it is still valid (`Some(None)`: the key was
    /// absent); `None` when there is none or it was written since it was read (then it is
    /// dropped): the caller reads the database.
    pub fn lookup(&self, key: &[u8]) -> Option<Option<Bytes>> {
        let mut s = self.lock();
        let Some(o) = s.observations.get(key) else {
            s.stats.misses += 1;
            return None;
        };
        // The generation check, after the writes the caller made before this lookup: a
        // write that the read missed bumped the key's bucket past `o.generation`.
        if self.shared.source.written_since(key, o.generation) {
            let (k, o) = s.observations.remove_entry(key).expect("just found");
            s.retained_bytes -= observation_cost(&k, &o.value);
            s.stats.retained_bytes = s.retained_bytes as u64;
            s.stats.invalidated += 1;
            return None;
        }
        let value = o.value.clone();
        s.stats.hits += 1;
        Some(value)
    }

    /// The value at `key`: a valid observation, else `db.get(key)` (not retained). `db`
    /// must be the database the session's source reads (the same `HoldingDb`).
    pub fn read(&self, db: &dyn Db, key: &[u8]) -> Result<Option<Bytes>> {
        match self.lookup(key) {
            Some(v) => Ok(v),
            None => db.get(key),
        }
    }

    /// Drops the queue and the observations (e.g. for a new block); batches in flight are
    /// discarded when they return. The session stays usable.
    pub fn clear(&self) {
        self.lock().drop_all();
    }

    /// Stops prefetching for good: drops the queue and the observations (lookups then
    /// miss), discards batches in flight, and releases the session's slot. Idempotent;
    /// dropping the session does it too.
    pub fn cancel(&self) {
        {
            let mut s = self.lock();
            s.cancelled = true;
            s.drop_all();
        }
        let mut slot = self.slot.lock().expect("prefetch slot lock");
        if std::mem::replace(&mut *slot, false) {
            self.pool.lock().active -= 1;
        }
    }

    /// True while submissions can be prefetched: the session holds a slot, is not
    /// cancelled, and the pool is running.
    pub fn is_prefetching(&self) -> bool {
        let shut = self.pool.lock().shutdown;
        !shut && !self.lock().cancelled
    }

    /// What the session did so far.
    pub fn stats(&self) -> PrefetchStats {
        let s = self.lock();
        PrefetchStats {
            retained_bytes: s.retained_bytes as u64,
            ..s.stats
        }
    }
}

impl Drop for PrefetchSession {
    fn drop(&mut self) {
        self.cancel();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct Fixed;

    impl PrefetchSource for Fixed {
        fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
            Ok(keys
                .iter()
                .map(|k| (k.first() != Some(&b'-')).then(|| Bytes::copy_from_slice(k)))
                .collect())
        }
        fn generation(&self) -> u64 {
            0
        }
        fn written_since(&self, _key: &[u8], _since: u64) -> bool {
            false
        }
    }

    fn wait_for(session: &PrefetchSession, fetched: u64) {
        let start = std::time::Instant::now();
        while session.stats().fetched < fetched {
            assert!(start.elapsed().as_secs() < 30, "prefetch did not finish");
            std::thread::yield_now();
        }
    }

    /// A source whose every read fails.
    struct Failing;

    impl PrefetchSource for Failing {
        fn get_many(&self, _keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
            Err(Error::InvalidInput("read failed".into()))
        }
        fn generation(&self) -> u64 {
            0
        }
        fn written_since(&self, _key: &[u8], _since: u64) -> bool {
            false
        }
    }

    #[test]
    fn a_failed_read_retains_nothing_and_is_counted() {
        let pool = PrefetchPool::new(1).unwrap();
        let s = pool.session(Arc::new(Failing));
        assert!(s.submit(vec![Bytes::from_static(b"a")]));
        let start = std::time::Instant::now();
        while s.stats().read_errors < 1 {
            assert!(start.elapsed().as_secs() < 30, "the read did not fail");
            std::thread::yield_now();
        }
        assert_eq!(s.lookup(b"a"), None, "execution reads it itself");
        let st = s.stats();
        assert_eq!((st.fetched, st.retained_bytes, st.misses), (0, 0, 1));
    }

    #[test]
    fn zero_workers_is_invalid_input() {
        assert!(matches!(PrefetchPool::new(0), Err(Error::InvalidInput(_))));
    }

    #[test]
    fn absence_is_retained_and_served() {
        let pool = PrefetchPool::new(1).unwrap();
        let s = pool.session(Arc::new(Fixed));
        assert!(s.submit(vec![Bytes::from_static(b"a"), Bytes::from_static(b"-b")]));
        wait_for(&s, 2);
        assert_eq!(s.lookup(b"a"), Some(Some(Bytes::from_static(b"a"))));
        assert_eq!(s.lookup(b"-b"), Some(None), "absence is an observation");
        assert_eq!(s.lookup(b"c"), None);
        let st = s.stats();
        assert_eq!((st.hits, st.misses, st.submitted), (2, 1, 2));
        assert_eq!(
            st.retained_bytes as usize,
            1 + 1 + 2 + 2 * PREFETCH_ENTRY_OVERHEAD_BYTES
        );
    }

    #[test]
    fn duplicates_in_one_submission_are_queued_once() {
        let pool = PrefetchPool::new(1).unwrap();
        let s = pool.session(Arc::new(Fixed));
        assert!(s.submit(vec![Bytes::from_static(b"a"); 3]));
        assert_eq!(s.stats().submitted, 1);
    }

    #[test]
    fn clear_drops_observations_and_keeps_the_session() {
        let pool = PrefetchPool::new(1).unwrap();
        let s = pool.session(Arc::new(Fixed));
        assert!(s.submit(vec![Bytes::from_static(b"a")]));
        wait_for(&s, 1);
        s.clear();
        assert_eq!(s.lookup(b"a"), None);
        assert_eq!(s.stats().retained_bytes, 0);
        assert!(s.is_prefetching());
        assert!(s.submit(vec![Bytes::from_static(b"a")]));
        wait_for(&s, 2);
        assert_eq!(s.lookup(b"a"), Some(Some(Bytes::from_static(b"a"))));
    }
}
