//! A prune interrupted after it raised the base leaves blocks below the base on disk; the
//! store treats them as pruned (every load returns `None`) and the next prune removes them.
//! A prune to the current base writes nothing. An interrupted prune reads, load for load,
//! as the finished one (ADR 0001's crash table: either side of the cut).

use crate::support;

use std::sync::Arc;

use flushpoint::db::CountingDb;
use flushpoint::store::BlockStore;
use flushpoint::testing::{FailAfter, FailingDb};
use flushpoint::{Db, MemoryDb};
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
    // The commit of base − 1 too: the finished prune deletes it with block base − 1.
    for h in 1..6 {
        assert!(store.load_block_commit(h).unwrap().is_none(), "commit {h}");
    }
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

/// Every load the store answers, at every height of the chain and one past it.
fn every_load(
    store: &BlockStore<flushpoint::demo::Block>,
    blocks: &[support::Saved],
) -> Vec<String> {
    let mut out = vec![format!("base {} height {}", store.base(), store.height())];
    for h in 0..=blocks.len() as u64 + 1 {
        out.push(format!(
            "{h}: meta {:?} block {:?} part0 {:?} commit {:?} seen {:?}",
            store.load_block_meta(h).unwrap().map(|m| m.block_hash),
            store.load_block(h).unwrap().map(|b| b.hash()),
            store.load_block_part(h, 0).unwrap(),
            store
                .load_block_commit(h)
                .unwrap()
                .map(|c| format!("{c:?}")),
            store.load_seen_commit(h).unwrap().map(|c| format!("{c:?}")),
        ));
    }
    for b in blocks {
        out.push(format!(
            "{:?}: height {:?} meta {:?} block {:?}",
            b.hash(),
            store.height_by_hash(&b.hash()).unwrap(),
            store
                .load_block_meta_by_hash(&b.hash())
                .unwrap()
                .map(|m| m.block_hash),
            store
                .load_block_by_hash(&b.hash())
                .unwrap()
                .map(|b| b.hash()),
        ));
    }
    out
}

#[test]
fn an_interrupted_prune_reads_load_for_load_as_the_finished_one() {
    let blocks = chain(1, 10, 2, 64, 7);
    let save = |mem: &Arc<MemoryDb>| {
        let store = BlockStore::<flushpoint::demo::Block>::open(mem.clone()).unwrap();
        for b in &blocks {
            b.save(&store).unwrap();
        }
    };
    let finished = Arc::new(MemoryDb::new("block store"));
    save(&finished);
    let store = BlockStore::<flushpoint::demo::Block>::open(finished.clone()).unwrap();
    assert_eq!(store.prune(6).unwrap(), 5);
    let expected = every_load(&store, &blocks);
    // Cut after each of the prune's writes but the last (the base, then each batch).
    for writes in 1.. {
        let mem = Arc::new(MemoryDb::new("block store"));
        save(&mem);
        let failing = Arc::new(FailingDb::new(
            mem.clone() as Arc<dyn Db>,
            FailAfter::new(writes),
        ));
        let store = BlockStore::<flushpoint::demo::Block>::open(failing.clone()).unwrap();
        if store.prune(6).is_ok() {
            assert!(writes > 1, "the prune was never cut");
            break;
        }
        let store = BlockStore::<flushpoint::demo::Block>::open(mem.clone()).unwrap();
        let got = every_load(&store, &blocks);
        assert_eq!(got.len(), expected.len());
        if let Some((g, e)) = got.iter().zip(&expected).find(|(g, e)| g != e) {
            panic!(
                "cut after {writes} writes: the store reads\n{g}\nwhere the finished prune reads\n{e}"
            );
        }
    }
}
