//! The node facade's edges: what each call does outside its mode, what its reports count,
//! that a refused block writes nothing and leaves the node usable, and that blocks without a
//! state are refused at open.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flushpoint::db::{CountingDb, SyncCounts};
use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::{
    Db, Error, Event, FlushPolicy, FlushTrigger, HandshakeCase, HoldingDb, MemoryDb, Mode,
    NoEvents, Node,
};

struct Rig {
    dbs: [Arc<CountingDb<Arc<MemoryDb>>>; 3],
    mems: [Arc<MemoryDb>; 3],
    spec: ChainSpec,
}

impl Rig {
    fn new() -> Rig {
        let mems = ["block store", "state", "app"].map(|n| Arc::new(MemoryDb::new(n)));
        Rig {
            dbs: [0, 1, 2].map(|i| Arc::new(CountingDb::new(mems[i].clone()))),
            mems,
            spec: ChainSpec::new(11, Profile::Light),
        }
    }
    fn open(
        &self,
    ) -> flushpoint::Result<(
        Node<flushpoint::demo::DemoChain>,
        flushpoint::HandshakeReport,
    )> {
        self.open_with(Box::new(NoEvents))
    }
    fn open_with(
        &self,
        sink: Box<dyn flushpoint::EventSink>,
    ) -> flushpoint::Result<(
        Node<flushpoint::demo::DemoChain>,
        flushpoint::HandshakeReport,
    )> {
        let app = KvApp::open(Arc::new(HoldingDb::new(self.dbs[2].clone() as Arc<dyn Db>)))?;
        Node::open(
            self.dbs[0].clone(),
            self.dbs[1].clone(),
            Box::new(app),
            self.spec.chain(),
            sink,
        )
    }
    fn counts(&self) -> [SyncCounts; 3] {
        [0, 1, 2].map(|i| self.dbs[i].counts())
    }
    fn bytes(&self) -> u64 {
        self.counts().iter().map(|c| c.bytes_written).sum()
    }
}

/// Synchronous flush points: these tests pin what a call returns when it takes one (the
/// background mode's reports are covered by `deferred_background`).
fn policy(window: u64) -> FlushPolicy {
    FlushPolicy::default()
        .with_interval(Duration::from_secs(3600))
        .with_window_blocks_max(Some(window))
        .with_background(false)
}

#[test]
fn calls_outside_their_mode_are_refused_or_do_nothing() {
    let rig = Rig::new();
    let (mut node, _) = rig.open().unwrap();
    assert_eq!(node.mode(), Mode::Consensus);
    let before = rig.counts();
    // Consensus mode: the timer, the switch and a flush point have nothing to do.
    assert!(node.on_timer(Instant::now()).unwrap().is_none());
    assert!(node.switch_to_consensus(Instant::now()).unwrap().is_none());
    assert!(
        node.flush_point(FlushTrigger::Interval, Instant::now())
            .unwrap()
            .is_none()
    );
    assert_eq!(rig.counts(), before, "nothing written");
    let (b, p, c) = rig.spec.next_block(node.state());
    assert!(matches!(
        node.sync_block(&b, &p, &c, Instant::now()),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        node.set_per_block_mode(Mode::BlockSync),
        Err(Error::InvalidInput(_))
    ));
    node.set_per_block_mode(Mode::Legacy).unwrap();
    assert_eq!(node.mode(), Mode::Legacy);
    node.set_per_block_mode(Mode::Consensus).unwrap();
    node.start_block_sync(policy(4), Instant::now()).unwrap();
    assert_eq!(node.mode(), Mode::BlockSync);
    assert!(matches!(
        node.commit_block(&b, &p, &c),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        node.set_per_block_mode(Mode::Legacy),
        Err(Error::InvalidInput(_))
    ));
    // Starting block sync twice is harmless.
    node.start_block_sync(policy(4), Instant::now()).unwrap();
    node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    assert_eq!(rig.counts(), before, "a held block writes nothing");
    assert_eq!(node.height(), 1);
    assert_eq!(node.durable_height(), 0);
    // A clean stop in consensus mode has nothing to flush.
    node.switch_to_consensus(Instant::now()).unwrap();
    assert_eq!(node.durable_height(), 1);
    assert!(node.stop(Instant::now()).unwrap().is_none());
}

#[test]
fn a_refused_block_writes_nothing_and_leaves_the_node_usable() {
    let rig = Rig::new();
    let (mut node, _) = rig.open().unwrap();
    node.start_block_sync(policy(2), Instant::now()).unwrap();
    let (mut b, p, c) = rig.spec.next_block(node.state());
    let good = b.clone();
    b.header.app_hash = [9; 32];
    let held = node.held();
    assert!(matches!(
        node.sync_block(&b, &p, &c, Instant::now()),
        Err(Error::InvalidBlock { height: 1, .. })
    ));
    let mut bad_txs = good.clone();
    bad_txs
        .txs
        .push(bytes::Bytes::from_static(b"not in the data hash"));
    assert!(matches!(
        node.sync_block(&bad_txs, &p, &c, Instant::now()),
        Err(Error::InvalidBlock { height: 1, .. })
    ));
    assert_eq!(node.held(), held, "a refused block holds nothing");
    assert_eq!(node.height(), 0);
    node.sync_block(&good, &p, &c, Instant::now()).unwrap();
    assert_eq!(node.height(), 1);
}

#[test]
fn flush_report_counts_the_bytes_of_all_three_batches_and_peak_held_is_tracked() {
    let rig = Rig::new();
    let (mut node, _) = rig.open().unwrap();
    node.start_block_sync(policy(3), Instant::now()).unwrap();
    let mut peak = 0;
    let mut report = None;
    let before = rig.bytes();
    for _ in 0..3 {
        let (b, p, c) = rig.spec.next_block(node.state());
        peak = peak.max(node.held().into_iter().max().unwrap());
        report = node.sync_block(&b, &p, &c, Instant::now()).unwrap();
        if report.is_none() {
            peak = peak.max(node.held().into_iter().max().unwrap());
        }
    }
    let r = report.expect("the third block fills the window");
    assert_eq!(
        (r.from, r.to, r.trigger),
        (0, 3, FlushTrigger::WindowBlocks)
    );
    assert_eq!(
        r.bytes,
        rig.bytes() - before,
        "report bytes = bytes the three batches wrote"
    );
    assert!(peak > 0);
    assert!(
        node.deferred().peak_held_bytes >= peak,
        "peak {} below an observed {peak}",
        node.deferred().peak_held_bytes
    );
    assert_eq!(node.deferred().flush_points, 1);
    assert_eq!(node.held(), [0, 0, 0]);
}

#[test]
fn handshake_reports_count_replayed_and_applied_blocks() {
    let rig = Rig::new();
    {
        let (mut node, r) = rig.open().unwrap();
        assert_eq!(r.case, HandshakeCase::Fresh);
        for _ in 0..5 {
            let (b, p, c) = rig.spec.next_block(node.state());
            node.commit_block(&b, &p, &c).unwrap();
        }
        node.stop(Instant::now()).unwrap();
    }
    // The app loses its last three commits (its database restored to height 2).
    let app_at_2: std::collections::BTreeMap<_, _> = {
        let rig2 = Rig::new();
        let (mut n2, _) = rig2.open().unwrap();
        for _ in 0..2 {
            let (b, p, c) = rig2.spec.next_block(n2.state());
            n2.commit_block(&b, &p, &c).unwrap();
        }
        drop(n2);
        rig2.mems[2].snapshot()
    };
    let mut batch = flushpoint::Batch::new();
    for (k, _) in rig.mems[2].snapshot() {
        batch.delete(k);
    }
    for (k, v) in app_at_2 {
        batch.put(k, v);
    }
    rig.mems[2]
        .write(&batch, flushpoint::Durability::Synced)
        .unwrap();
    let fired: Arc<Mutex<Vec<Event>>> = Arc::default();
    let f = fired.clone();
    let (node, r) = rig
        .open_with(Box::new(move |e: &Event| f.lock().unwrap().push(e.clone())))
        .unwrap();
    assert_eq!(r.case, HandshakeCase::AppBehind);
    assert_eq!((r.app_replayed, r.applied, r.height), (3, 0, 5));
    assert_eq!(node.app().committed().unwrap().height, 5);
    assert!(
        fired.lock().unwrap().is_empty(),
        "replayed blocks fire no events"
    );
}

#[test]
fn blocks_without_a_saved_state_are_refused_at_open() {
    let rig = Rig::new();
    {
        let (mut node, _) = rig.open().unwrap();
        let (b, p, c) = rig.spec.next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    // The state database is lost (e.g. replaced by an empty one).
    let mut batch = flushpoint::Batch::new();
    for (k, _) in rig.mems[1].snapshot() {
        batch.delete(k);
    }
    rig.mems[1]
        .write(&batch, flushpoint::Durability::Synced)
        .unwrap();
    let before: Vec<_> = rig.mems.iter().map(|m| m.snapshot()).collect();
    match rig.open() {
        Err(Error::Inconsistent {
            heights, record, ..
        }) => {
            assert_eq!((heights.block_store_height, heights.state_height), (1, 0));
            assert_eq!(
                record, "absent",
                "the error names the (absent) flush record"
            );
        }
        other => panic!("expected Inconsistent, got {other:?}"),
    }
    let after: Vec<_> = rig.mems.iter().map(|m| m.snapshot()).collect();
    assert_eq!(before, after, "nothing changed on disk");
    // The same with only the app ahead of an empty state.
    let rig = Rig::new();
    {
        let (mut node, _) = rig.open().unwrap();
        let (b, p, c) = rig.spec.next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    let mut batch = flushpoint::Batch::new();
    for m in [&rig.mems[0], &rig.mems[1]] {
        for (k, _) in m.snapshot() {
            batch.delete(k);
        }
        m.write(&batch, flushpoint::Durability::Synced).unwrap();
    }
    assert!(matches!(rig.open(), Err(Error::Inconsistent { .. })));
}

#[test]
fn the_flush_interval_counts_from_the_start_of_block_sync() {
    let rig = Rig::new();
    let (mut node, _) = rig.open().unwrap();
    let start = Instant::now() + Duration::from_secs(5);
    let p = FlushPolicy::default()
        .with_interval(Duration::from_secs(1))
        .with_background(false);
    node.start_block_sync(p, start).unwrap();
    let (b, parts, c) = rig.spec.next_block(node.state());
    let r = node
        .sync_block(&b, &parts, &c, start + Duration::from_millis(100))
        .unwrap();
    assert!(r.is_none(), "0.1 s into block sync is not a flush point");
    let r = node.on_timer(start + Duration::from_millis(1000)).unwrap();
    assert_eq!(r.map(|r| r.trigger), Some(FlushTrigger::Interval));
}

#[test]
fn a_block_the_block_store_refuses_does_not_poison_the_node() {
    let rig = Rig::new();
    let (mut node, _) = rig.open().unwrap();
    let (b, p, c) = rig.spec.next_block(node.state());
    // The header is fine but the part set is incomplete: the block store refuses it.
    let mut partial = flushpoint::PartSet::with_total(p.total() + 1);
    partial.add_part(0, p.part(0).unwrap().clone());
    assert!(matches!(
        node.commit_block(&b, &partial, &c),
        Err(Error::IncompletePartSet { .. })
    ));
    node.commit_block(&b, &p, &c).unwrap();
    assert!(node.on_timer(Instant::now()).is_ok());
    assert_eq!(node.height(), 1);
}

#[test]
fn a_failed_block_store_write_poisons_the_node_for_every_later_call() {
    use flushpoint::testing::{FailAfter, FailingDb};
    let mems = ["block store", "state", "app"].map(|n| Arc::new(MemoryDb::new(n)));
    let spec = ChainSpec::new(11, Profile::Light);
    let failing = Arc::new(FailingDb::new(mems[0].clone(), FailAfter::new(1)));
    let app = KvApp::open(Arc::new(HoldingDb::new(mems[2].clone() as Arc<dyn Db>))).unwrap();
    let (mut node, _) = Node::open(
        failing.clone(),
        mems[1].clone(),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    let (b, p, c) = spec.next_block(node.state());
    node.commit_block(&b, &p, &c).unwrap();
    let (b, p, c) = spec.next_block(node.state());
    assert!(node.commit_block(&b, &p, &c).is_err());
    assert_eq!(failing.failures(), 1, "the fault fired");
    let poisoned = |r: flushpoint::Result<Option<flushpoint::FlushReport>>| {
        matches!(r, Err(Error::Poisoned { .. }))
    };
    assert!(poisoned(node.on_timer(Instant::now())));
    assert!(poisoned(node.switch_to_consensus(Instant::now())));
    assert!(poisoned(
        node.flush_point(FlushTrigger::Stop, Instant::now())
    ));
    assert!(matches!(
        node.start_block_sync(policy(2), Instant::now()),
        Err(Error::Poisoned { .. })
    ));
}

#[test]
fn a_genesis_at_height_zero_is_refused_and_writes_nothing() {
    let rig = Rig::new();
    let mut genesis = rig.spec.genesis();
    genesis.initial_height = 0;
    let app = KvApp::open(Arc::new(HoldingDb::new(rig.dbs[2].clone() as Arc<dyn Db>))).unwrap();
    let r = Node::open(
        rig.dbs[0].clone(),
        rig.dbs[1].clone(),
        Box::new(app),
        flushpoint::demo::DemoChain::new(genesis),
        Box::new(NoEvents),
    );
    match r {
        Err(e @ Error::InvalidInput(_)) => assert!(e.to_string().contains("initial height"), "{e}"),
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    assert!(
        rig.mems.iter().all(|m| m.snapshot().is_empty()),
        "nothing written"
    );
}
