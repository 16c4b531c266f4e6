//! A prune interrupted after it raised the base leaves blocks below the base on disk; the
//! store treats them as pruned (every load returns `None`) and the next prune removes them.
//! A prune to the current base writes nothing.

mod support;

use std::sync::Arc;

use flushpoint::testing::{FailAfter, FailingDb};
use flushpoint::{BlockStore, CountingDb, Db, MemoryDb};
use support::chain;

#[test]
fn blocks_left_below_the_base_by_an_interrupted_prune_load_as_pruned() {
    let mem = Arc::new(MemoryDb::new("block store"));
    let blocks = chain(1, 10, 2, 64, 7);
    let budget = FailAfter::never();
    let failing = Arc::new(FailingDb::new(mem.clone() as Arc<dyn Db>, budget));
    let store = BlockStore::<flushpoint::demo::Block>::open(failing.clone()).unwrap();
    for b in &blocks {
        b.save(&store).unwrap();
    }
    // Interrupt the prune right after its first write (the base record): the deletions fail.
    let budget = FailAfter::new(1);
    let failing = Arc::new(FailingDb::new(mem.clone() as Arc<dyn Db>, budget));
    let store = BlockStore::<flushpoint::demo::Block>::open(failing.clone()).unwrap();
    assert!(store.prune(6).is_err());
    assert_eq!(failing.failures(), 1, "the fault fired");

    // Restart over the same disk: base 6, blocks 1..=5 still stored below it.
    let store = BlockStore::<flushpoint::demo::Block>::open(mem.clone()).unwrap();
    assert_eq!((store.base(), store.height()), (6, 10));
    assert!(
        mem.get(&flushpoint::codec::keys::height_key(
            flushpoint::codec::keys::BLOCK_META,
            5
        ))
        .unwrap()
        .is_some(),
        "the interrupted prune left block 5's records, or this test proves nothing"
    );
    for h in 1..6 {
        assert!(store.load_block_meta(h).unwrap().is_none(), "meta {h}");
        assert!(store.load_block(h).unwrap().is_none(), "block {h}");
        assert!(store.load_block_part(h, 0).unwrap().is_none(), "part {h}");
        assert!(
            store.load_seen_commit(h).unwrap().is_none(),
            "seen commit {h}"
        );
        assert!(
            store
                .height_by_hash(&blocks[h as usize - 1].hash())
                .unwrap()
                .is_none(),
            "hash {h}"
        );
        assert!(
            store
                .load_block_meta_by_hash(&blocks[h as usize - 1].hash())
                .unwrap()
                .is_none()
        );
    }
    for h in 1..5 {
        assert!(store.load_block_commit(h).unwrap().is_none(), "commit {h}");
    }
    // The commit of base − 1 travels with block `base` and stays.
    assert!(store.load_block_commit(5).unwrap().is_some());
    assert!(store.load_block(6).unwrap().is_some());
    assert_eq!(store.height_by_hash(&blocks[5].hash()).unwrap(), Some(6));

    // The next prune (even to the same height) removes the leftovers.
    assert_eq!(store.prune(6).unwrap(), 5);
    assert!(
        mem.get(&flushpoint::codec::keys::height_key(
            flushpoint::codec::keys::BLOCK_META,
            5
        ))
        .unwrap()
        .is_none()
    );
}

#[test]
fn prune_to_the_current_base_writes_nothing() {
    let counting = Arc::new(CountingDb::new(MemoryDb::new("block store")));
    let store = BlockStore::<flushpoint::demo::Block>::open(counting.clone()).unwrap();
    for b in chain(1, 5, 1, 32, 3) {
        b.save(&store).unwrap();
    }
    assert_eq!(store.prune(3).unwrap(), 2);
    let before = counting.counts();
    assert_eq!(store.prune(3).unwrap(), 0);
    assert_eq!(
        counting.counts(),
        before,
        "no batch for a prune with nothing to remove"
    );
    assert_eq!(store.base(), 3);
}
