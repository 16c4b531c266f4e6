//! The block store holds a contiguous run of blocks: an empty store accepts any first height
//! ≥ 1, then only height + 1. A gap, a repeat, height 0, an incomplete part set or a seen
//! commit that does not commit the block each return their typed error and write nothing —
//! no batch reaches the database and its contents are byte-for-byte unchanged.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::db::{CountingDb, SyncCounters};
use flushpoint::demo::{Block, Commit, Header};
use flushpoint::store::BlockStore;
use flushpoint::{Error, MemoryDb, PartSet};
use support::{Saved, block_at, chain, light_block};

/// A store over a counted memory db, with handles to inspect both.
struct Counted {
    store: BlockStore<flushpoint::demo::Block>,
    counters: Arc<SyncCounters>,
    mem: Arc<MemoryDb>,
}

fn counted() -> Counted {
    let mem = Arc::new(MemoryDb::new("block store"));
    let counting = CountingDb::new(mem.clone());
    let counters = counting.counters();
    Counted {
        store: BlockStore::<flushpoint::demo::Block>::open(Arc::new(counting)).unwrap(),
        counters,
        mem,
    }
}

impl Counted {
    /// Runs `f`, which must fail, and checks that nothing was written and the range held.
    fn rejects(
        &self,
        what: &str,
        f: impl FnOnce(&BlockStore<flushpoint::demo::Block>) -> flushpoint::Result<()>,
    ) -> Error {
        let before: BTreeMap<Bytes, Bytes> = self.mem.snapshot();
        let counts = self.counters.snapshot();
        let (base, height) = (self.store.base(), self.store.height());
        let err = match f(&self.store) {
            Ok(()) => panic!("{what}: accepted"),
            Err(e) => e,
        };
        let d = self.counters.snapshot() - counts;
        assert_eq!(
            (d.synced_batches, d.buffered_batches, d.failed_batches),
            (0, 0, 0),
            "{what}: a rejected block issued a write"
        );
        assert!(self.mem.snapshot() == before, "{what}: db contents changed");
        assert_eq!((self.store.base(), self.store.height()), (base, height));
        assert!(
            !self.store.is_poisoned(),
            "{what}: bad input poisoned the store"
        );
        err
    }
}

fn non_contiguous(err: Error) -> (u64, u64) {
    match err {
        Error::NonContiguous { expected, got } => (expected, got),
        e => panic!("expected NonContiguous, got {e:?}"),
    }
}

/// A well-formed block at height 0 (the helper refuses to build one).
fn block_at_zero() -> Saved {
    let block = Block {
        header: Header {
            height: 0,
            ..Header::default()
        },
        txs: vec![Bytes::from_static(b"tx")],
        last_commit: Commit::default(),
    };
    let parts = PartSet::from_block(&block);
    let seen_commit = Commit {
        height: 0,
        round: 0,
        block_hash: block.hash(),
        signatures: vec![],
    };
    Saved {
        block,
        parts,
        seen_commit,
    }
}

#[test]
fn empty_store_accepts_any_first_height_from_one() {
    for first in [1u64, 2, 5, 1_000, u64::MAX / 2] {
        let c = counted();
        let s = light_block(first, [9; 32], first);
        s.save(&c.store).unwrap();
        assert_eq!((c.store.base(), c.store.height()), (first, first));
        assert_eq!(c.counters.snapshot().synced_batches, 1);
        // Reopening the same db restores the range.
        let again = BlockStore::<flushpoint::demo::Block>::open(c.store.db().clone()).unwrap();
        assert_eq!((again.base(), again.height()), (first, first));
    }
}

#[test]
fn empty_store_rejects_height_zero_and_writes_nothing() {
    let c = counted();
    let err = c.rejects("height 0 on an empty store", |st| block_at_zero().save(st));
    assert_eq!(non_contiguous(err), (1, 0));
    assert!(c.mem.snapshot().is_empty());
}

#[test]
fn after_first_block_only_next_height_is_accepted() {
    let c = counted();
    let blocks = chain(5, 2, 3, 100, 7);
    blocks[0].save(&c.store).unwrap();
    // Every other height in a window around the next one is refused, writing nothing: the
    // repeat (5), every gap (7..), every height below the base (1..4) and 0.
    for h in (0..=12).filter(|h| *h != 6) {
        let s = if h == 0 {
            block_at_zero()
        } else {
            light_block(h, blocks[0].hash(), h)
        };
        let err = c.rejects(&format!("height {h} after 5"), |st| s.save(st));
        assert_eq!(non_contiguous(err), (6, h), "height {h}");
    }
    // The exact repeat of the stored block is refused as well.
    let err = c.rejects("repeat of block 5", |st| blocks[0].save(st));
    assert_eq!(non_contiguous(err), (6, 5));
    blocks[1].save(&c.store).unwrap();
    assert_eq!((c.store.base(), c.store.height()), (5, 6));
    assert_eq!(c.counters.snapshot().synced_batches, 2);
}

#[test]
fn incomplete_part_set_is_rejected_and_writes_nothing() {
    let c = counted();
    let s = block_at(1, [0; 32], support::forty_part_txs(1));
    let total = s.parts.total();
    assert_eq!(total, 40);
    // Every prefix of the parts short of all of them, and a set missing only the first.
    for have in [0u32, 1, 20, 39] {
        let mut parts = PartSet::with_total(total);
        for i in 0..have {
            assert!(parts.add_part(i, s.parts.part(i).unwrap().clone()));
        }
        let err = c.rejects(&format!("{have} of {total} parts"), |st| {
            st.save_block(&s.block, &parts, &s.seen_commit)
        });
        match err {
            Error::IncompletePartSet {
                height,
                have: h,
                total: t,
            } => assert_eq!((height, h, t), (1, have, total)),
            e => panic!("expected IncompletePartSet, got {e:?}"),
        }
    }
    let mut parts = PartSet::with_total(total);
    for i in 1..total {
        parts.add_part(i, s.parts.part(i).unwrap().clone());
    }
    let err = c.rejects("missing part 0", |st| {
        st.save_block(&s.block, &parts, &s.seen_commit)
    });
    assert!(
        matches!(err, Error::IncompletePartSet { have: 39, .. }),
        "{err:?}"
    );
    // A set that expects no parts at all is not a block.
    let err = c.rejects("zero-part set", |st| {
        st.save_block(&s.block, &PartSet::with_total(0), &s.seen_commit)
    });
    assert!(
        matches!(
            err,
            Error::IncompletePartSet {
                have: 0,
                total: 0,
                ..
            }
        ),
        "{err:?}"
    );
    // The complete set goes through.
    s.save(&c.store).unwrap();
    assert_eq!(c.store.height(), 1);
}

#[test]
fn mismatched_seen_commit_is_rejected_and_writes_nothing() {
    let c = counted();
    let blocks = chain(1, 2, 2, 50, 3);
    blocks[0].save(&c.store).unwrap();
    let s = &blocks[1];
    let wrong_height = Commit {
        height: 3,
        ..s.seen_commit.clone()
    };
    let wrong_hash = Commit {
        block_hash: blocks[0].hash(),
        ..s.seen_commit.clone()
    };
    let zero_hash = Commit {
        block_hash: [0; 32],
        ..s.seen_commit.clone()
    };
    for (what, commit) in [
        ("seen commit for another height", &wrong_height),
        ("seen commit for the previous block", &wrong_hash),
        ("seen commit with a zero hash", &zero_hash),
    ] {
        let err = c.rejects(what, |st| st.save_block(&s.block, &s.parts, commit));
        assert!(matches!(err, Error::InvalidInput(_)), "{what}: {err:?}");
    }
    // A block whose last commit is not for the height below it is refused too.
    let mut bad = s.clone();
    bad.block.last_commit.height = 5;
    bad.parts = PartSet::from_block(&bad.block);
    bad.seen_commit.block_hash = bad.block.hash();
    let err = c.rejects("last commit for height 5 in block 2", |st| bad.save(st));
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    // None of it blocked the right block.
    s.save(&c.store).unwrap();
    assert_eq!(c.store.height(), 2);
}

#[test]
fn extreme_heights_are_errors_not_panics() {
    // A last commit at u64::MAX (its height + 1 overflows) is bad input: an error.
    let c = counted();
    let mut bad = light_block(1, [0; 32], 1);
    bad.block.last_commit.height = u64::MAX;
    bad.parts = PartSet::from_block(&bad.block);
    bad.seen_commit.block_hash = bad.block.hash();
    let err = c.rejects("last commit at u64::MAX", |st| bad.save(st));
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    // A store at the last representable height has no next height: every block is refused.
    let top = light_block(u64::MAX, [1; 32], 2);
    top.save(&c.store).unwrap();
    assert_eq!(c.store.height(), u64::MAX);
    for h in [1, u64::MAX - 1, u64::MAX] {
        let s = light_block(h, top.hash(), h);
        let err = c.rejects(&format!("height {h} after u64::MAX"), |st| s.save(st));
        assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    }
}
