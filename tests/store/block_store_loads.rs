//! What the block store saved, it loads back — by height and by hash — until pruning or a
//! rollback removes it, and then it is gone without a trace: no record, no index entry, no
//! disk space that refilling cannot reuse. Base and height survive a reopen.

use crate::support;

use std::sync::Arc;

use bytes::Bytes;
use flushpoint::codec::keys;
use flushpoint::db::{CountingDb, collect_range};
use flushpoint::records::FlushRecord;
use flushpoint::store::{BlockStore, PRUNE_BATCH_BLOCKS};
use flushpoint::{Db, Direction, Error, KeyRange, MemoryDb, RedbDb, RedbOptions};
use support::{Saved, block_at, chain, txs};

/// A chain 1..=n where every third block is multi-part (3 parts) and the rest are light.
fn mixed_chain(n: u64, seed: u64) -> Vec<Saved> {
    let mut rng = support::Rng(seed);
    let mut prev = [0; 32];
    let mut out = Vec::new();
    for h in 1..=n {
        let t = if h % 3 == 0 {
            txs(&mut rng, 2, 70_000)
        } else {
            txs(&mut rng, 4, 300)
        };
        let s = block_at(h, prev, t);
        prev = s.hash();
        out.push(s);
    }
    out
}

fn memory_store() -> (BlockStore<flushpoint::demo::Block>, Arc<MemoryDb>) {
    let mem = Arc::new(MemoryDb::new("block store"));
    (
        BlockStore::<flushpoint::demo::Block>::open(mem.clone()).unwrap(),
        mem,
    )
}

/// Checks every load of a stored block against what was saved. `top` is the store's
/// height: the canonical commit of `top` arrives only with block `top + 1`.
fn assert_loads(store: &BlockStore<flushpoint::demo::Block>, s: &Saved, next: Option<&Saved>) {
    let h = s.height();
    let meta = store.load_block_meta(h).unwrap().expect("meta");
    assert_eq!(meta.block_hash, s.hash());
    assert_eq!(
        flushpoint::demo::Header::from_bytes(&meta.header).unwrap(),
        s.block.header
    );
    assert_eq!(meta.part_count, s.parts.total());
    assert_eq!(meta.block_size, s.parts.byte_size());
    assert_eq!(meta.tx_count as usize, s.block.txs.len());
    for i in 0..s.parts.total() {
        assert_eq!(
            store.load_block_part(h, i).unwrap().as_ref(),
            s.parts.part(i),
            "part {i} of {h}"
        );
    }
    assert_eq!(store.load_block_part(h, s.parts.total()).unwrap(), None);
    assert_eq!(store.load_block(h).unwrap().as_ref(), Some(&s.block));
    assert_eq!(
        store.load_seen_commit(h).unwrap().as_ref(),
        Some(&s.seen_commit)
    );
    // The canonical commit for h is the last commit carried by block h+1.
    assert_eq!(
        store.load_block_commit(h).unwrap(),
        next.map(|n| n.block.last_commit.clone()),
        "commit of {h}"
    );
    assert_eq!(store.height_by_hash(&s.hash()).unwrap(), Some(h));
    assert_eq!(
        store.load_block_meta_by_hash(&s.hash()).unwrap(),
        Some(meta)
    );
    assert_eq!(
        store.load_block_by_hash(&s.hash()).unwrap().as_ref(),
        Some(&s.block)
    );
}

/// Checks that nothing of block `h` can be loaded.
fn assert_gone(store: &BlockStore<flushpoint::demo::Block>, s: &Saved) {
    let h = s.height();
    assert_eq!(store.load_block_meta(h).unwrap(), None, "meta {h}");
    assert_eq!(store.load_block_part(h, 0).unwrap(), None, "part {h}");
    assert_eq!(store.load_block(h).unwrap(), None, "block {h}");
    assert_eq!(store.load_seen_commit(h).unwrap(), None, "seen commit {h}");
    assert_eq!(store.load_block_commit(h).unwrap(), None, "commit {h}");
    assert_eq!(store.height_by_hash(&s.hash()).unwrap(), None, "hash {h}");
    assert_eq!(store.load_block_by_hash(&s.hash()).unwrap(), None);
}

/// Every key in the db, with the height it names (None for singletons and the hash index).
fn keys_of(db: &dyn Db) -> Vec<(Bytes, Option<u64>)> {
    collect_range(db, KeyRange::all(), Direction::Forward)
        .unwrap()
        .into_iter()
        .map(|(k, _)| {
            let h = keys::height_of(&k);
            (k, h)
        })
        .collect()
}

/// The keys a store holding exactly blocks `low..=high` (first block 1) must have.
fn expected_key_count(blocks: &[Saved], low: u64, high: u64) -> usize {
    let kept = blocks.iter().filter(|s| (low..=high).contains(&s.height()));
    // meta + parts + seen commit + hash index per block, a canonical commit for every kept
    // block but the top, and the store state.
    kept.map(|s| 3 + s.parts.total() as usize).sum::<usize>() + (high - low) as usize + 1
}

#[test]
fn loads_by_height_and_hash_return_what_was_saved() {
    let (store, mem) = memory_store();
    let blocks = mixed_chain(7, 1);
    assert!(blocks.iter().any(|s| s.parts.total() == 3));
    for s in &blocks {
        s.save(&store).unwrap();
    }
    assert_eq!((store.base(), store.height()), (1, 7));
    for (i, s) in blocks.iter().enumerate() {
        assert_loads(&store, s, blocks.get(i + 1));
    }
    // Heights and hashes never stored load as None.
    for h in [0, 8, u64::MAX] {
        assert_eq!(store.load_block_meta(h).unwrap(), None);
        assert_eq!(store.load_block(h).unwrap(), None);
        assert_eq!(store.load_seen_commit(h).unwrap(), None);
    }
    assert_eq!(store.height_by_hash(&[0x5a; 32]).unwrap(), None);
    assert_eq!(store.load_block_by_hash(&[0x5a; 32]).unwrap(), None);
    // And the db holds exactly these records, nothing more.
    assert_eq!(keys_of(&*mem).len(), expected_key_count(&blocks, 1, 7));
}

#[test]
fn reopen_restores_base_and_height_memory_and_redb() {
    let blocks = mixed_chain(6, 2);
    // Memory: a new store over the same db.
    let (store, mem) = memory_store();
    for s in &blocks {
        s.save(&store).unwrap();
    }
    store.prune(3).unwrap();
    drop(store);
    let store = BlockStore::<flushpoint::demo::Block>::open(mem).unwrap();
    assert_eq!((store.base(), store.height()), (3, 6));
    assert_loads(&store, &blocks[5], None);

    // redb: close the file and open it again.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blockstore.redb");
    let open = || {
        let db = RedbDb::open(&path, "block store", &RedbOptions::default()).unwrap();
        BlockStore::<flushpoint::demo::Block>::open(Arc::new(db)).unwrap()
    };
    let store = open();
    assert_eq!((store.base(), store.height()), (0, 0));
    for s in &blocks {
        s.save(&store).unwrap();
    }
    store.prune(2).unwrap();
    drop(store);
    let store = open();
    assert_eq!((store.base(), store.height()), (2, 6));
    for i in 1..6 {
        assert_loads(&store, &blocks[i], blocks.get(i + 1));
    }
    assert_gone(&store, &blocks[0]);
    // The reopened store takes the next block, and only it.
    let next = block_at(7, blocks[5].hash(), vec![Bytes::from_static(b"x")]);
    next.save(&store).unwrap();
    assert_eq!(store.height(), 7);
}

#[test]
fn prune_removes_every_record_below_retain_and_advances_base() {
    let (store, mem) = memory_store();
    let blocks = mixed_chain(10, 3);
    for s in &blocks {
        s.save(&store).unwrap();
    }
    assert_eq!(store.prune(4).unwrap(), 3);
    assert_eq!((store.base(), store.height()), (4, 10));
    for s in &blocks[..3] {
        assert_gone(&store, s);
    }
    for i in 3..10 {
        assert_loads(&store, &blocks[i], blocks.get(i + 1));
    }
    // No key naming a height below the retain height is left.
    for (k, h) in keys_of(&*mem) {
        assert!(
            h.is_none_or(|h| h >= 4),
            "key {} survived",
            flushpoint::codec::hex(&k)
        );
    }
    assert_eq!(keys_of(&*mem).len(), expected_key_count(&blocks, 4, 10));
    // Pruning again, to the base, removes nothing; below the base is refused (CometBFT's
    // rule, and the state store's), writing nothing.
    assert_eq!(store.prune(4).unwrap(), 0);
    let keys = keys_of(&*mem);
    assert!(matches!(
        store.prune(2),
        Err(Error::InvalidRetainHeight {
            retain_height: 2,
            base: 4,
            height: 10,
            ..
        })
    ));
    assert_eq!(keys_of(&*mem), keys);
    assert_eq!(store.base(), 4);
    // Pruning to the top keeps exactly the top block.
    assert_eq!(store.prune(10).unwrap(), 6);
    assert_eq!((store.base(), store.height()), (10, 10));
    assert_loads(&store, &blocks[9], None);
    assert_eq!(keys_of(&*mem).len(), expected_key_count(&blocks, 10, 10));
}

#[test]
fn prune_spanning_several_batches_removes_everything_below_retain() {
    let (store, mem) = memory_store();
    let n = 2 * PRUNE_BATCH_BLOCKS + 10;
    let blocks = chain(1, n, 1, 16, 4);
    for s in &blocks {
        s.save(&store).unwrap();
    }
    let retain = 2 * PRUNE_BATCH_BLOCKS + 3;
    assert_eq!(store.prune(retain).unwrap(), retain - 1);
    assert_eq!(store.base(), retain);
    assert_gone(&store, &blocks[0]);
    assert_gone(&store, &blocks[PRUNE_BATCH_BLOCKS as usize]);
    assert_gone(&store, &blocks[retain as usize - 2]);
    assert_loads(
        &store,
        &blocks[retain as usize - 1],
        blocks.get(retain as usize),
    );
    assert_eq!(keys_of(&*mem).len(), expected_key_count(&blocks, retain, n));
}

#[test]
fn prune_rejects_bad_retain_heights_and_writes_nothing() {
    let counting = CountingDb::new(MemoryDb::new("block store"));
    let counters = counting.counters();
    let store = BlockStore::<flushpoint::demo::Block>::open(Arc::new(counting)).unwrap();
    // An empty store has nothing to prune to.
    for retain in [0, 1, 5] {
        assert!(
            matches!(store.prune(retain), Err(Error::InvalidRetainHeight { .. })),
            "retain {retain} on an empty store"
        );
    }
    for s in chain(3, 5, 1, 10, 5) {
        s.save(&store).unwrap();
    }
    let before = counters.snapshot();
    for retain in [0, 1, 2, 8, 9, u64::MAX] {
        match store.prune(retain) {
            Err(
                ref e @ Error::InvalidRetainHeight {
                    retain_height,
                    base,
                    height,
                    ..
                },
            ) => {
                assert_eq!((retain_height, base, height), (retain, 3, 7));
                assert_eq!(e.kind(), flushpoint::ErrorKind::InvalidInput);
            }
            other => panic!("retain {retain}: {other:?}"),
        }
    }
    assert_eq!(counters.snapshot(), before, "a refused prune wrote");
    assert_eq!((store.base(), store.height()), (3, 7));
}

#[test]
fn rollback_removes_blocks_above_and_lowers_height() {
    let (store, mem) = memory_store();
    let blocks = mixed_chain(10, 6);
    for s in &blocks {
        s.save(&store).unwrap();
    }
    store
        .save_flush_record(&FlushRecord { from: 5, to: 10 })
        .unwrap();
    assert_eq!(store.rollback_to(7).unwrap(), 3);
    assert_eq!((store.base(), store.height()), (1, 7));
    for s in &blocks[7..] {
        assert_gone(&store, s);
    }
    // Block 7 is the top again: its canonical commit went with block 8.
    for i in 0..7 {
        let next = if i == 6 { None } else { blocks.get(i + 1) };
        assert_loads(&store, &blocks[i], next);
    }
    // A flush record reaching above the new height is gone.
    assert_eq!(store.load_flush_record().unwrap(), None);
    assert_eq!(keys_of(&*mem).len(), expected_key_count(&blocks, 1, 7));
    // The same chain continues from 8, and the store survives a reopen.
    blocks[7].save(&store).unwrap();
    assert_loads(&store, &blocks[6], Some(&blocks[7]));
    let store = BlockStore::<flushpoint::demo::Block>::open(mem.clone()).unwrap();
    assert_eq!((store.base(), store.height()), (1, 8));

    // A flush record at or below the new height is kept.
    store
        .save_flush_record(&FlushRecord { from: 3, to: 5 })
        .unwrap();
    assert_eq!(store.rollback_to(6).unwrap(), 2);
    assert_eq!(
        store.load_flush_record().unwrap(),
        Some(FlushRecord { from: 3, to: 5 })
    );
    // Rolling back to or above the height changes nothing.
    assert_eq!(store.rollback_to(6).unwrap(), 0);
    assert_eq!(store.rollback_to(100).unwrap(), 0);
    assert_eq!(store.height(), 6);
}

#[test]
fn rollback_spanning_several_batches_is_complete() {
    let (store, mem) = memory_store();
    let n = PRUNE_BATCH_BLOCKS + 40;
    let blocks = chain(1, n, 1, 16, 8);
    for s in &blocks {
        s.save(&store).unwrap();
    }
    assert_eq!(store.rollback_to(10).unwrap(), n - 10);
    assert_eq!(store.height(), 10);
    assert_gone(&store, &blocks[10]);
    assert_gone(&store, &blocks[n as usize - 1]);
    assert_eq!(keys_of(&*mem).len(), expected_key_count(&blocks, 1, 10));
}

#[test]
fn rollback_below_base_is_refused_and_to_just_below_base_empties_the_store() {
    let (store, mem) = memory_store();
    let blocks = chain(5, 6, 1, 16, 9);
    for s in &blocks {
        s.save(&store).unwrap();
    }
    store.prune(7).unwrap();
    assert_eq!((store.base(), store.height()), (7, 10));
    for h in [0, 1, 5] {
        assert!(
            matches!(store.rollback_to(h), Err(Error::Rollback(_))),
            "rollback to {h} below base 7"
        );
    }
    assert_eq!(store.height(), 10);
    // Just below the base: every block goes, and the store is empty — also after a reopen.
    assert_eq!(store.rollback_to(6).unwrap(), 4);
    assert_eq!((store.base(), store.height()), (0, 0));
    let reopened = BlockStore::<flushpoint::demo::Block>::open(mem.clone()).unwrap();
    assert_eq!((reopened.base(), reopened.height()), (0, 0));
    assert!(
        keys_of(&*mem).is_empty(),
        "left behind: {:?}",
        keys_of(&*mem)
    );
    // An empty store takes any first height again.
    blocks[3].save(&reopened).unwrap();
    assert_eq!((reopened.base(), reopened.height()), (8, 8));
}

#[test]
fn prune_then_refill_reuses_redb_file_space() {
    // Why these sizes: 30 blocks of 4 parts (each part in a 128 KiB redb page) is ~15 MiB
    // per fill, well above redb's initial allocation, so growth would show.
    const BLOCKS_PER_FILL: u64 = 30;
    const FILLS: u64 = 5;
    /// How much larger than the first fill a refill may leave the file. Why: pages freed by
    /// a prune become reusable only after later commits and redb's allocator does not pack
    /// perfectly, so sizes wobble (1.0–1.35× measured); without reuse fill k would be about
    /// (k + 1)× the first, so 1.5× still tells reuse from growth from the second refill on.
    const REFILL_GROWTH_MAX: f64 = 1.5;
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(
        RedbDb::open(
            &dir.path().join("blockstore.redb"),
            "block store",
            &RedbOptions::default(),
        )
        .unwrap(),
    );
    let store = BlockStore::<flushpoint::demo::Block>::open(db.clone()).unwrap();
    let mut rng = support::Rng(10);
    let mut prev = [0; 32];
    let mut h = 0;
    let mut sizes = Vec::new();
    for fill in 0..FILLS {
        for _ in 0..BLOCKS_PER_FILL {
            h += 1;
            let s = block_at(h, prev, txs(&mut rng, 4, 60_000));
            assert_eq!(s.parts.total(), 4);
            s.save(&store).unwrap();
            prev = s.hash();
        }
        let size = db.disk_size_bytes().unwrap();
        eprintln!("fill {fill}: height {h}, file {size} bytes allocated");
        sizes.push(size);
        // Keep only the top block.
        store.prune(h).unwrap();
        eprintln!(
            "fill {fill}: pruned to {h}, file {} bytes allocated",
            db.disk_size_bytes().unwrap()
        );
    }
    let first = sizes[0];
    assert!(
        first > BLOCKS_PER_FILL * 4 * 64 * 1024,
        "the fill is on disk"
    );
    for (fill, size) in sizes.iter().enumerate().skip(1) {
        let ratio = *size as f64 / first as f64;
        eprintln!("fill {fill}: {ratio:.2}x the first fill");
        assert!(
            ratio <= REFILL_GROWTH_MAX,
            "fill {fill}: {size} bytes after refill vs {first} after the first fill"
        );
    }
    // No trend: the file after the last refill is far below what five fills without reuse
    // would take.
    assert!(
        (sizes[FILLS as usize - 1] as f64) < 2.0 * first as f64,
        "the file keeps growing across refills: {sizes:?}"
    );
}
