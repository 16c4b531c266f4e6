//! Property: reads through the node say which version they see. `ReadView::Held` serves
//! every applied block, held ones included; `ReadView::Durable` serves only what a flush
//! point acknowledged (up to `durable_height()`), from disk — during block sync a held block
//! is visible to the held read and not to the durable read until its flush point, with
//! synchronous and with background flush points.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::{Db, FlushPolicy, FlushTrigger, HoldingDb, MemoryDb, NoEvents, Node, ReadView};

fn open(spec: &ChainSpec) -> Node<flushpoint::demo::DemoChain> {
    let app = KvApp::open(Arc::new(HoldingDb::new(
        Arc::new(MemoryDb::new("app")) as Arc<dyn Db>
    )))
    .unwrap();
    Node::open(
        Arc::new(MemoryDb::new("block store")),
        Arc::new(MemoryDb::new("state")),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap()
    .0
}

fn policy(background: bool) -> FlushPolicy {
    FlushPolicy::default()
        .with_interval(Duration::from_secs(3600))
        .with_held_bytes_max(u64::MAX)
        .with_window_blocks_max(None)
        .with_background(background)
}

/// Which of blocks `1..=top` each view sees, by height, by hash and by seen commit; checks
/// the three agree and returns the highest seen height per view.
fn seen(node: &Node<flushpoint::demo::DemoChain>, top: u64) -> [u64; 2] {
    [ReadView::Held, ReadView::Durable].map(|view| {
        let mut highest = 0;
        for h in 1..=top {
            let block = node.load_block(h, view).unwrap();
            let commit = node.load_seen_commit(h, view).unwrap();
            let by_hash = node
                .load_block_by_hash(
                    &node.block_store().load_block(h).unwrap().unwrap().hash(),
                    view,
                )
                .unwrap();
            assert_eq!(
                block.as_ref().map(|b| b.hash()),
                by_hash.map(|b| b.hash()),
                "{view:?} {h}: by height and by hash differ"
            );
            assert_eq!(block.is_some(), commit.is_some(), "{view:?} {h}: commit");
            if let Some(b) = block {
                assert_eq!(b.height(), h);
                assert_eq!(highest, h - 1, "{view:?}: a gap below {h}");
                highest = h;
            }
        }
        assert_eq!(node.block_height(view), highest, "{view:?}: block_height");
        highest
    })
}

#[test]
fn a_held_block_is_invisible_to_durable_reads_until_its_flush_point() {
    for background in [false, true] {
        let spec = ChainSpec::new(21, Profile::Light);
        let mut node = open(&spec);
        let t0 = Instant::now();
        // Consensus blocks are durable at once: both views see them.
        for _ in 0..2 {
            let (b, p, c) = spec.next_block(node.state());
            node.commit_block(&b, &p, &c).unwrap();
        }
        assert_eq!(seen(&node, 2), [2, 2]);
        node.start_block_sync(policy(background), t0).unwrap();
        for _ in 0..3 {
            let (b, p, c) = spec.next_block(node.state());
            assert_eq!(node.sync_block(&b, &p, &c, t0).unwrap(), None);
        }
        assert_eq!(
            seen(&node, 5),
            [5, 2],
            "background {background}: held window"
        );
        // The flush point: synchronous, durable on return; background, submitted (the
        // window may already be on the block store's disk, but it is not acknowledged).
        let r = node.flush_point(FlushTrigger::Interval, t0).unwrap();
        if background {
            assert_eq!(r, None);
            assert_eq!(
                seen(&node, 5),
                [5, 2],
                "a window in flight is not durable yet"
            );
            node.flush_point(FlushTrigger::Stop, t0).unwrap();
        } else {
            assert_eq!(r.unwrap().to, 5);
        }
        assert_eq!(node.durable_height(), 5);
        assert_eq!(
            seen(&node, 5),
            [5, 5],
            "background {background}: after the flush point"
        );
        // A new held window on top.
        for _ in 0..2 {
            let (b, p, c) = spec.next_block(node.state());
            node.sync_block(&b, &p, &c, t0).unwrap();
        }
        assert_eq!(seen(&node, 7), [7, 5]);
        node.switch_to_consensus(t0).unwrap();
        assert_eq!(seen(&node, 7), [7, 7]);
        // Above the top, neither view sees anything.
        assert_eq!(node.load_block(8, ReadView::Held).unwrap(), None);
        assert_eq!(node.load_block(8, ReadView::Durable).unwrap(), None);
    }
}
