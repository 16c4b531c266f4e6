//! A whole node over memory databases: block sync in windows, the switch, consensus, stop,
//! and a restart that finds everything consistent.

use std::sync::Arc;
use std::time::Instant;

use flushpoint::db::CountingDb;
use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::{Db, FlushPolicy, HandshakeCase, HoldingDb, MemoryDb, NoEvents, Node};

#[test]
fn block_sync_then_consensus_then_restart_is_consistent() {
    for background in [false, true] {
        smoke(background);
    }
}

fn smoke(background: bool) {
    let spec = ChainSpec::new(7, Profile::Light);
    let bs = Arc::new(CountingDb::new(MemoryDb::new("block store")));
    let st = Arc::new(CountingDb::new(MemoryDb::new("state")));
    let app_db = Arc::new(CountingDb::new(MemoryDb::new("app")));
    let open = || {
        let app = KvApp::open(Arc::new(HoldingDb::new(app_db.clone() as Arc<dyn Db>))).unwrap();
        Node::open(
            bs.clone(),
            st.clone(),
            Box::new(app),
            spec.chain(),
            Box::new(NoEvents),
        )
        .unwrap()
    };
    let (mut node, report) = open();
    assert_eq!(report.case, HandshakeCase::Fresh);
    let policy = FlushPolicy::default()
        .with_window_blocks_max(Some(4))
        .with_interval(std::time::Duration::from_secs(3600))
        .with_background(background);
    node.start_block_sync(policy, Instant::now()).unwrap();
    let before = (bs.counts(), st.counts(), app_db.counts());
    let mut flushes = 0;
    for _ in 0..8 {
        let (b, p, c) = spec.next_block(node.state());
        if node
            .sync_block(&b, &p, &c, Instant::now())
            .unwrap()
            .is_some()
        {
            flushes += 1;
        }
    }
    // A background flush point completes later: the second window is durable at the switch.
    let switched = node.switch_to_consensus(Instant::now()).unwrap();
    if background {
        assert_eq!(flushes, 1, "the first window completed during the second");
        assert_eq!(switched.map(|r| (r.from, r.to)), Some((4, 8)));
    } else {
        assert_eq!(flushes, 2);
        assert!(switched.is_none(), "nothing held at the switch");
    }
    assert_eq!(bs.counts().synced_batches - before.0.synced_batches, 2);
    assert_eq!(st.counts().synced_batches - before.1.synced_batches, 2);
    assert_eq!(app_db.counts().synced_batches - before.2.synced_batches, 2);
    for _ in 0..2 {
        let (b, p, c) = spec.next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    let hash = node.state().app_hash;
    node.stop(Instant::now()).unwrap();
    let (node, report) = open();
    assert_eq!(report.case, HandshakeCase::Consistent);
    assert_eq!(node.height(), 10);
    assert_eq!(node.state().app_hash, hash);
}
