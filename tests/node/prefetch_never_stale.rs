//! Property: execution never sees a stale value through a prefetch session — every
//! `PrefetchSession::read` returns what the `HoldingDb` holds at the time of the read,
//! while a worker pool prefetches the same keys concurrently, holding or not, across
//! flushes and `clear`.
//!
//! The oracle is a `HashMap` model the reader keeps of its own writes. It is sound under
//! concurrency because the reader is the only writer of the keys it reads (as in block
//! execution): nothing else can change them between its write and its read. The workers
//! race the reader's writes — the database below sleeps inside every write and read, so a
//! worker's read often straddles one. A second test adds an outside writer thread that
//! writes only keys the reader never reads.
//!
//! The oracle is fed a wrong answer: `Lying`, a source whose `written_since` always says
//! "not written", must be caught serving a stale value (`a_source_that_hides_writes_is_caught`).
//! Seeds: `FLUSHPOINT_SEED=<n>` (printed; fixed default, never the clock).
//!
//! Planted in `src/holding/mod.rs` (reverted), each made `reads_equal_the_database_*` fail:
//! the bump moved before the write is applied, and the bump skipped for held writes.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use flushpoint::prefetch::{PrefetchPool, PrefetchSource, PrefetchStats};
use flushpoint::{Batch, Db, DbWrapper, Durability, HoldingDb, MemoryDb, Result};
use support::Rng;

/// Steps of one run (each a submit, a write, a read, a race, a clear or a flush).
const STEPS: usize = 3_000;
/// Keys the reader works on (few, so submits, writes and reads collide).
const KEYS: u64 = 24;

/// A `MemoryDb` whose writes and reads sleep, so a worker's read and the reader's write
/// overlap often.
#[derive(Debug)]
struct SlowDb(MemoryDb);

fn nap() {
    std::thread::sleep(Duration::from_micros(20));
}

impl DbWrapper for SlowDb {
    type Inner = MemoryDb;
    fn inner(this: &Self) -> &MemoryDb {
        &this.0
    }
    fn get(this: &Self, key: &[u8]) -> Result<Option<Bytes>> {
        nap();
        this.0.get(key)
    }
    fn contains(this: &Self, key: &[u8]) -> Result<bool> {
        Ok(DbWrapper::get(this, key)?.is_some())
    }
    fn get_many(this: &Self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        nap();
        this.0.get_many(keys)
    }
    fn write(this: &Self, batch: &Batch, durability: Durability) -> Result<()> {
        nap();
        this.0.write(batch, durability)
    }
}

type Subject = HoldingDb<SlowDb>;

/// The negative control: a source that hides every write.
struct Lying(Arc<Subject>);

impl PrefetchSource for Lying {
    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        PrefetchSource::get_many(&*self.0, keys)
    }
    fn generation(&self) -> u64 {
        self.0.generation()
    }
    fn written_since(&self, _key: &[u8], _since: u64) -> bool {
        false
    }
}

fn key(prefix: &str, i: u64) -> Bytes {
    Bytes::from(format!("{prefix}{i:03}"))
}

/// One reader run: its writes, reads and submissions over `prefix` keys. Returns the
/// session's stats, or the first read that differed from the model.
fn reader_run(
    seed: u64,
    db: &Arc<Subject>,
    source: Arc<dyn PrefetchSource>,
    prefix: &str,
    holding: bool,
) -> std::result::Result<PrefetchStats, String> {
    let mut rng = Rng(seed);
    let pool = PrefetchPool::new(2).expect("pool");
    let session = pool.session(source);
    let mut model: HashMap<Bytes, Option<Bytes>> = HashMap::new();
    let mut init = Batch::new();
    for i in 0..KEYS {
        if i % 3 != 0 {
            let v = rng.bytes(8);
            init.put(key(prefix, i), v.clone());
            model.insert(key(prefix, i), Some(v));
        }
    }
    db.write(&init, Durability::Synced).expect("init");
    if holding {
        db.hold().expect("hold");
    }
    let write = |rng: &mut Rng, model: &mut HashMap<Bytes, Option<Bytes>>, k: Bytes| {
        let mut b = Batch::new();
        if rng.below(4) == 0 {
            b.delete(k.clone());
            model.insert(k, None);
        } else {
            let n = 1 + rng.below(12) as usize;
            let v = rng.bytes(n);
            b.put(k.clone(), v.clone());
            model.insert(k, Some(v));
        }
        db.write(&b, Durability::Synced).expect("write");
    };
    let read = |model: &HashMap<Bytes, Option<Bytes>>, k: &Bytes, step: usize| {
        let got = session.read(&**db, k).expect("read");
        let want = model.get(k).cloned().flatten();
        if got != want {
            return Err(format!(
                "step {step}: key {k:?}: session read {got:?}, the database holds {want:?}"
            ));
        }
        Ok(())
    };
    for step in 0..STEPS {
        let k = key(prefix, rng.below(KEYS));
        match rng.below(100) {
            0..=24 => {
                let n = 1 + rng.below(12);
                let keys = (0..n).map(|_| key(prefix, rng.below(KEYS))).collect();
                assert!(session.submit(keys), "a small submission fits");
            }
            25..=49 => write(&mut rng, &mut model, k),
            50..=79 => read(&model, &k, step)?,
            80..=94 => {
                // The race: queue a key, write it while a worker may be reading it, read.
                assert!(session.submit(vec![k.clone()]));
                write(&mut rng, &mut model, k.clone());
                read(&model, &k, step)?;
            }
            95..=97 => session.clear(),
            _ => {
                if holding {
                    // A flush point: values move to disk; nothing a read sees changes.
                    db.freeze().expect("freeze");
                    db.write_frozen().expect("write frozen");
                }
            }
        }
    }
    // The oracle's own footing: the model is what the database holds.
    for i in 0..KEYS {
        let k = key(prefix, i);
        assert_eq!(
            db.get(&k).expect("get"),
            model.get(&k).cloned().flatten(),
            "model"
        );
    }
    if holding {
        db.write_held().expect("write held");
    }
    Ok(session.stats())
}

fn fresh() -> Arc<Subject> {
    Arc::new(HoldingDb::new(SlowDb(MemoryDb::new("app"))))
}

fn honest(holding: bool, default_seed: u64) {
    let seed = support::seed(default_seed);
    println!("seed {seed} (FLUSHPOINT_SEED={seed} replays), holding {holding}");
    let db = fresh();
    let stats = reader_run(seed, &db, db.clone(), "r", holding)
        .unwrap_or_else(|e| panic!("stale read (FLUSHPOINT_SEED={seed}, holding {holding}): {e}"));
    println!("{stats:?}");
    assert!(stats.hits > 100, "prefetched values were served: {stats:?}");
    assert!(
        stats.invalidated > 10,
        "observations were invalidated: {stats:?}"
    );
}

#[test]
fn reads_equal_the_database_while_holding() {
    honest(true, 0x5eed_0012);
}

#[test]
fn reads_equal_the_database_passing_through() {
    honest(false, 0x5eed_0013);
}

#[test]
fn a_source_that_hides_writes_is_caught() {
    for holding in [true, false] {
        let seed = support::seed(0x5eed_0014);
        let db = fresh();
        let lying = Arc::new(Lying(db.clone()));
        let caught = reader_run(seed, &db, lying, "r", holding);
        println!("holding {holding}: {caught:?}");
        assert!(
            caught.is_err(),
            "a source hiding writes must be caught serving a stale value (seed {seed})"
        );
    }
}

#[test]
fn an_outside_writer_of_other_keys_never_makes_a_read_stale() {
    for holding in [true, false] {
        let seed = support::seed(0x5eed_0015);
        println!("seed {seed} (FLUSHPOINT_SEED={seed} replays), holding {holding}");
        let db = fresh();
        let stop = Arc::new(AtomicBool::new(false));
        let outside_writes = Arc::new(AtomicU64::new(0));
        let writer = {
            let (db, stop, count) = (db.clone(), stop.clone(), outside_writes.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(seed ^ 0xface);
                while !stop.load(Ordering::SeqCst) {
                    let mut b = Batch::new();
                    b.put(key("w", rng.below(KEYS)), rng.bytes(8));
                    db.write(&b, Durability::Synced).expect("outside write");
                    count.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        let stats = reader_run(seed, &db, db.clone(), "r", holding);
        stop.store(true, Ordering::SeqCst);
        writer.join().expect("writer");
        let stats = stats.unwrap_or_else(|e| {
            panic!("stale read (FLUSHPOINT_SEED={seed}, holding {holding}): {e}")
        });
        let outside = outside_writes.load(Ordering::SeqCst);
        println!("{stats:?}, outside writes {outside}");
        assert!(outside > 100, "the outside writer ran beside the reader");
        assert!(stats.hits > 100, "prefetched values were served: {stats:?}");
    }
}
