//! Property: a block saved with a part set that is not its own encoding — another block's
//! parts, a flipped byte, a part too many, a short last part, the parts of a 1-byte-longer
//! encoding — is refused with `Error::PartSetMismatch` before anything is written (no batch
//! reaches the database, its contents are unchanged, nothing is poisoned), through the
//! block store and through the node in block sync and in consensus; the block's own parts
//! are then accepted.

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use flushpoint::db::CountingDb;
use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::store::BlockStore;
use flushpoint::{Db, Error, FlushPolicy, HoldingDb, MemoryDb, NoEvents, Node, PartSet};

fn spec(seed: u64) -> ChainSpec {
    ChainSpec::new(seed, Profile::Mixed)
}

/// Part sets that are not `parts`' block's own encoding, each with its name.
fn foreign_part_sets(parts: &PartSet, other: &PartSet) -> Vec<(&'static str, PartSet)> {
    let whole: Bytes = (0..parts.total())
        .flat_map(|i| parts.part(i).unwrap().to_vec())
        .collect::<Vec<u8>>()
        .into();
    let part_size = parts.part(0).unwrap().len().max(1);
    let mut flipped = BytesMut::from(&whole[..]);
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x01;
    let mut longer = BytesMut::from(&whole[..]);
    longer.extend_from_slice(&[0]);
    let mut extra = PartSet::with_total(parts.total() + 1);
    for i in 0..parts.total() {
        extra.add_part(i, parts.part(i).unwrap().clone());
    }
    extra.add_part(parts.total(), Bytes::from_static(b"x"));
    vec![
        ("another block's parts", other.clone()),
        (
            "a flipped byte",
            PartSet::from_bytes(&flipped.freeze(), part_size),
        ),
        (
            "a 1-byte-longer encoding",
            PartSet::from_bytes(&longer.freeze(), part_size),
        ),
        (
            "a short last part",
            PartSet::from_bytes(&whole.slice(..whole.len() - 1), part_size),
        ),
        ("a part too many", extra),
    ]
}

#[test]
fn block_store_refuses_a_part_set_that_is_not_the_blocks_own_and_writes_nothing() {
    let mem = Arc::new(MemoryDb::new("block store"));
    let counting = CountingDb::new(mem.clone());
    let counters = counting.counters();
    let store = BlockStore::<flushpoint::demo::Block>::open(Arc::new(counting)).unwrap();
    let (a, b) = (spec(1), spec(2));
    let genesis = a.genesis();
    let state = flushpoint::demo::State::genesis(
        genesis.initial_height,
        genesis.validators,
        genesis.consensus_params,
        [0; 32],
    );
    let (block, parts, seen) = a.next_block(&state);
    let (_, other_parts, _) = b.next_block(&state);
    let mut refused = 0;
    for (what, bad) in foreign_part_sets(&parts, &other_parts) {
        let before = mem.snapshot();
        let counts = counters.snapshot();
        let err = store.save_block(&block, &bad, &seen).expect_err(what);
        assert!(
            matches!(err, Error::PartSetMismatch { height: 1, .. }),
            "{what}: {err}"
        );
        let d = counters.snapshot() - counts;
        assert_eq!(
            (d.synced_batches, d.buffered_batches, d.failed_batches),
            (0, 0, 0),
            "{what}: a write was issued"
        );
        assert!(mem.snapshot() == before, "{what}: contents changed");
        assert_eq!(store.height(), 0);
        assert!(!store.is_poisoned());
        refused += 1;
    }
    assert_eq!(refused, 5);
    store.save_block(&block, &parts, &seen).unwrap();
    assert_eq!(store.height(), 1);
    assert_eq!(store.load_block(1).unwrap().unwrap(), block);
}

#[test]
fn the_node_refuses_a_foreign_part_set_in_block_sync_and_in_consensus_without_poisoning() {
    let (a, b) = (spec(3), spec(4));
    for consensus in [false, true] {
        let block_db: Arc<dyn Db> = Arc::new(MemoryDb::new("block store"));
        let state_db: Arc<dyn Db> = Arc::new(MemoryDb::new("state"));
        let app_db: Arc<dyn Db> = Arc::new(MemoryDb::new("app"));
        let app = KvApp::open(Arc::new(HoldingDb::new(app_db))).unwrap();
        let (mut node, _) = Node::open(
            block_db,
            state_db,
            Box::new(app),
            a.chain(),
            Box::new(NoEvents),
        )
        .unwrap();
        let now = Instant::now();
        if !consensus {
            node.start_block_sync(FlushPolicy::default(), now).unwrap();
        }
        let (block, parts, seen) = a.next_block(node.state());
        let (_, other_parts, _) = b.next_block(node.state());
        for (what, bad) in foreign_part_sets(&parts, &other_parts) {
            let err = if consensus {
                node.commit_block(&block, &bad, &seen).expect_err(what)
            } else {
                node.sync_block(&block, &bad, &seen, now).expect_err(what)
            };
            assert!(
                matches!(err, Error::PartSetMismatch { .. }),
                "consensus {consensus}, {what}: {err}"
            );
            assert_eq!(node.height(), 0);
        }
        // The node is not poisoned: the block's own parts go through.
        if consensus {
            node.commit_block(&block, &parts, &seen).unwrap();
        } else {
            node.sync_block(&block, &parts, &seen, now).unwrap();
        }
        assert_eq!(node.height(), 1);
        node.stop(now).unwrap();
    }
}
