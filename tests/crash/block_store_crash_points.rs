//! A crash at any write of `save_block`, `prune` or `rollback_to` leaves a block store that
//! opens cleanly, loads every block between its base and height, holds nothing above its
//! height, and — once the interrupted call is repeated on the reopened store — holds exactly
//! the keys and values of a run that never crashed.
//!
//! Crash model (the media assumptions of `adr/0001-on-disk-records.md`): every write is one
//! atomic synced batch, so a crash falls between batches; the batch in flight at the crash
//! either is lost or landed (its fsync completed but the process died before `Ok` came back).
//! For each operation the test enumerates every crash point — after 0, 1, …, n of its
//! writes — with both outcomes for the write in flight. Each enumeration first counts the
//! operation's writes in an uncut run, and checks that the cut fired.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use flushpoint::codec::keys;
use flushpoint::store::{BlockStore, PRUNE_BATCH_BLOCKS};
use flushpoint::{Batch, Db, DbWrapper, Direction, Durability, Error, KeyRange, MemoryDb, Result};
use support::{Saved, chain};

type Image = BTreeMap<Bytes, Bytes>;

/// What happens to the write in flight at the crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InFlight {
    Lost,
    Landed,
}

/// A `Db` that dies after `writes_before_crash` writes: the next write is lost or landed,
/// reports failure, and every write after it fails without effect (the process is gone).
#[derive(Debug)]
struct CrashingDb {
    inner: Arc<MemoryDb>,
    writes_before_crash: u64,
    in_flight: InFlight,
    writes_seen: AtomicU64,
    crashes: Arc<AtomicU64>,
}

impl DbWrapper for CrashingDb {
    type Inner = MemoryDb;
    fn inner(this: &Self) -> &MemoryDb {
        &this.inner
    }
    fn write(this: &Self, batch: &Batch, durability: Durability) -> Result<()> {
        let n = this.writes_seen.fetch_add(1, Ordering::SeqCst);
        if n < this.writes_before_crash {
            return this.inner.write(batch, durability);
        }
        if n == this.writes_before_crash {
            this.crashes.fetch_add(1, Ordering::SeqCst);
            if this.in_flight == InFlight::Landed {
                this.inner.write(batch, durability)?;
            }
        }
        Err(Error::storage(this.name(), "write", "crashed"))
    }
}

/// An image holding `blocks`, saved in order.
fn image_of(blocks: &[Saved]) -> Image {
    let mem = Arc::new(MemoryDb::new("block store"));
    let store = BlockStore::<flushpoint::demo::Block>::open(mem.clone()).unwrap();
    for b in blocks {
        b.save(&store).unwrap();
    }
    mem.snapshot()
}

/// Runs `op` on a store over `image` with no crash; returns the final image and how many
/// writes the op issued.
fn uncut(
    image: &Image,
    op: &dyn Fn(&BlockStore<flushpoint::demo::Block>) -> Result<()>,
) -> (Image, u64) {
    let mem = Arc::new(MemoryDb::from_map("block store", image.clone()));
    let counting = flushpoint::db::CountingDb::new(mem.clone());
    let counters = counting.counters();
    let store = BlockStore::<flushpoint::demo::Block>::open(Arc::new(counting)).unwrap();
    op(&store).unwrap();
    let c = counters.snapshot();
    assert_eq!(c.buffered_batches, 0, "every block store write is synced");
    (mem.snapshot(), c.synced_batches)
}

/// The consistency a reopened store must show after any crash.
fn assert_consistent(mem: &Arc<MemoryDb>, what: &str) -> BlockStore<flushpoint::demo::Block> {
    let store = BlockStore::<flushpoint::demo::Block>::open(mem.clone())
        .unwrap_or_else(|e| panic!("{what}: the store does not reopen: {e}"));
    let (base, height) = (store.base(), store.height());
    assert_eq!(
        base == 0,
        height == 0,
        "{what}: base {base}, height {height}"
    );
    for h in base..=height {
        if h == 0 {
            continue;
        }
        assert!(
            store.load_block(h).unwrap().is_some(),
            "{what}: block {h} of {base}..={height} is missing"
        );
    }
    // Nothing above the height: no meta, part or seen commit names a higher block.
    for prefix in [keys::BLOCK_META, keys::BLOCK_PART, keys::SEEN_COMMIT] {
        let over: Vec<_> = mem
            .range(KeyRange::prefix(&[prefix]), Direction::Forward)
            .unwrap()
            .map(|e| e.unwrap().0)
            .filter(|k| keys::height_of(k).is_some_and(|h| h > height))
            .collect();
        assert!(
            over.is_empty(),
            "{what}: records above height {height}: {over:?}"
        );
    }
    store
}

/// Crashes `op` at every write with both outcomes, reopens, checks consistency, repeats
/// the op with `redo` and compares with the uncut run.
fn crash_at_every_write(
    name: &str,
    image: &Image,
    op: &dyn Fn(&BlockStore<flushpoint::demo::Block>) -> Result<()>,
    redo: &dyn Fn(&BlockStore<flushpoint::demo::Block>) -> Result<()>,
    writes_min: u64,
) {
    let (want, writes) = uncut(image, op);
    assert!(
        writes >= writes_min,
        "{name}: only {writes} writes to cut between"
    );
    let mut points = 0;
    for cut in 0..writes {
        for in_flight in [InFlight::Lost, InFlight::Landed] {
            let what = format!("{name}, crash at write {cut} of {writes}, {in_flight:?}");
            let mem = Arc::new(MemoryDb::from_map("block store", image.clone()));
            let crashes = Arc::new(AtomicU64::new(0));
            let db = CrashingDb {
                inner: mem.clone(),
                writes_before_crash: cut,
                in_flight,
                writes_seen: AtomicU64::new(0),
                crashes: crashes.clone(),
            };
            let store = BlockStore::<flushpoint::demo::Block>::open(Arc::new(db)).unwrap();
            assert!(op(&store).is_err(), "{what}: the op did not see the crash");
            assert_eq!(
                crashes.load(Ordering::SeqCst),
                1,
                "{what}: the cut never fired"
            );
            drop(store);
            let reopened = assert_consistent(&mem, &what);
            redo(&reopened).unwrap_or_else(|e| panic!("{what}: redo failed: {e}"));
            assert!(mem.snapshot() == want, "{what}: differs from the uncut run");
            points += 1;
        }
    }
    eprintln!("{name}: {writes} writes, {points} crash points recovered");
}

#[test]
fn save_block_crash_at_every_write_recovers() {
    let blocks = chain(3, 4, 2, 64, 1);
    let image = image_of(&blocks[..3]);
    let next = blocks[3].clone();
    let n2 = next.clone();
    crash_at_every_write(
        "save_block",
        &image,
        &move |s| next.save(s),
        // After a restart the node saves the block again unless it is already there.
        &move |s| {
            if s.height() < n2.height() {
                n2.save(s)
            } else {
                Ok(())
            }
        },
        1,
    );
}

#[test]
fn prune_crash_at_every_write_recovers() {
    // Enough blocks for several deletion batches after the base write.
    let n = 2 * PRUNE_BATCH_BLOCKS + 40;
    let blocks = chain(2, n, 1, 8, 2);
    let image = image_of(&blocks);
    let retain = 2 + 2 * PRUNE_BATCH_BLOCKS + 10;
    crash_at_every_write(
        "prune",
        &image,
        &move |s| s.prune(retain).map(|_| ()),
        // Pruning again removes what a crash left below the base.
        &move |s| s.prune(retain).map(|_| ()),
        4,
    );
}

#[test]
fn rollback_crash_at_every_write_recovers() {
    let n = 2 * PRUNE_BATCH_BLOCKS + 40;
    let blocks = chain(1, n, 1, 8, 3);
    let image = image_of(&blocks);
    crash_at_every_write(
        "rollback_to",
        &image,
        &|s| s.rollback_to(25).map(|_| ()),
        &|s| s.rollback_to(25).map(|_| ()),
        3,
    );
}

#[test]
fn rollback_to_empty_crash_at_every_write_recovers() {
    // From a first height above 1, rolling back to just below it empties the store.
    let blocks = chain(7, PRUNE_BATCH_BLOCKS + 5, 1, 8, 4);
    let image = image_of(&blocks);
    crash_at_every_write(
        "rollback_to(base - 1)",
        &image,
        &|s| s.rollback_to(6).map(|_| ()),
        &|s| s.rollback_to(6).map(|_| ()),
        2,
    );
}
