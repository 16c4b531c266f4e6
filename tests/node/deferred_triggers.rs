//! Property: during block sync a flush point is taken exactly when one of its triggers fires
//! (interval — also on the timer with no block —, held bytes over the cap — the app's bytes
//! counted —, halt height, app request, switch to consensus, clean stop), never otherwise;
//! a block costs no synced batch until then, and a flush point costs exactly one synced batch
//! per database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::db::{CountingDb, SyncCounts};
use flushpoint::demo::{Block, ChainSpec, Commit, KvApp, Profile, State, Tx, sha256};
use flushpoint::node::FLUSH_BYTES_MAX;
use flushpoint::{
    Db, FlushPolicy, FlushReport, FlushTrigger, HandshakeCase, HoldingDb, MemoryDb, NoEvents, Node,
    PartSet,
};

const HOUR: Duration = Duration::from_secs(3600);

struct Dbs {
    bs: Arc<CountingDb<MemoryDb>>,
    st: Arc<CountingDb<MemoryDb>>,
    app: Arc<CountingDb<MemoryDb>>,
}

impl Dbs {
    fn new() -> Self {
        Dbs {
            bs: Arc::new(CountingDb::new(MemoryDb::new("block store"))),
            st: Arc::new(CountingDb::new(MemoryDb::new("state"))),
            app: Arc::new(CountingDb::new(MemoryDb::new("app"))),
        }
    }
    fn counts(&self) -> [SyncCounts; 3] {
        [self.bs.counts(), self.st.counts(), self.app.counts()]
    }
    fn open_with(
        &self,
        spec: &ChainSpec,
        halt_height: Option<u64>,
    ) -> Node<flushpoint::demo::DemoChain> {
        let mut app =
            KvApp::open(Arc::new(HoldingDb::new(self.app.clone() as Arc<dyn Db>))).unwrap();
        if halt_height.is_some() {
            app.set_halt_height(halt_height);
        }
        Node::open(
            self.bs.clone(),
            self.st.clone(),
            Box::new(app),
            spec.chain(),
            Box::new(NoEvents),
        )
        .unwrap()
        .0
    }
    fn open(&self, spec: &ChainSpec) -> Node<flushpoint::demo::DemoChain> {
        self.open_with(spec, None)
    }
}

/// Synced batches per database since `before`.
fn synced_since(dbs: &Dbs, before: [SyncCounts; 3]) -> [u64; 3] {
    let now = dbs.counts();
    [0, 1, 2].map(|i| {
        assert_eq!(
            now[i].buffered_batches, before[i].buffered_batches,
            "block sync writes nothing buffered either"
        );
        now[i].synced_batches - before[i].synced_batches
    })
}

/// A policy where only the trigger under test can fire.
fn quiet() -> FlushPolicy {
    FlushPolicy::default()
        .with_interval(HOUR)
        .with_held_bytes_max(u64::MAX)
        .with_window_blocks_max(None)
        .with_background(false)
}

/// Block `state.last_block_height + 1` with `txs` instead of the generated ones, built on
/// `state` exactly as `ChainSpec::next_block` builds it.
fn block_with_txs(spec: &ChainSpec, state: &State, txs: Vec<Bytes>) -> (Block, PartSet, Commit) {
    let (mut block, _, _) = spec.next_block(state);
    block.txs = txs;
    block.header.data_hash = Block::data_hash_of(&block.txs);
    let hash = block.hash();
    let h = block.height();
    let seen = Commit {
        height: h,
        round: 0,
        block_hash: hash,
        signatures: (0..4u64)
            .map(|i| {
                Bytes::copy_from_slice(&sha256(
                    &[&h.to_be_bytes()[..], &hash, &i.to_be_bytes()].concat(),
                ))
            })
            .collect(),
    };
    let parts = PartSet::from_block(&block);
    (block, parts, seen)
}

/// Syncs `n` generated blocks at time `now`, asserting none flushes and none syncs.
fn sync_quietly(
    node: &mut Node<flushpoint::demo::DemoChain>,
    spec: &ChainSpec,
    dbs: &Dbs,
    n: u64,
    now: Instant,
) {
    for _ in 0..n {
        let before = dbs.counts();
        let (b, p, c) = spec.next_block(node.state());
        let r = node.sync_block(&b, &p, &c, now).unwrap();
        assert_eq!(r, None, "no trigger fired at block {}", b.height());
        assert_eq!(
            synced_since(dbs, before),
            [0, 0, 0],
            "0 synced batches per held block"
        );
    }
}

fn assert_one_batch_each(dbs: &Dbs, before: [SyncCounts; 3]) {
    assert_eq!(
        synced_since(dbs, before),
        [1, 1, 1],
        "a flush point is exactly one synced batch per database (block store, state, app)"
    );
}

fn flushed(r: Option<FlushReport>, trigger: FlushTrigger, from: u64, to: u64) {
    let r = r.unwrap_or_else(|| panic!("expected a {trigger:?} flush point"));
    assert_eq!((r.trigger, r.from, r.to), (trigger, from, to), "{r:?}");
}

#[test]
fn interval_triggers_a_flush_point_after_a_block() {
    let spec = ChainSpec::new(1, Profile::Light);
    let dbs = Dbs::new();
    let mut node = dbs.open(&spec);
    let t0 = Instant::now();
    let policy = quiet().with_interval(Duration::from_secs(1));
    node.start_block_sync(policy, t0).unwrap();
    sync_quietly(&mut node, &spec, &dbs, 3, t0 + Duration::from_millis(999));
    let before = dbs.counts();
    let (b, p, c) = spec.next_block(node.state());
    let r = node
        .sync_block(&b, &p, &c, t0 + Duration::from_secs(1))
        .unwrap();
    flushed(r, FlushTrigger::Interval, 0, 4);
    assert_one_batch_each(&dbs, before);
    assert_eq!(node.durable_height(), 4);
}

#[test]
fn interval_triggers_on_the_timer_when_no_block_arrives() {
    let spec = ChainSpec::new(2, Profile::Light);
    let dbs = Dbs::new();
    let mut node = dbs.open(&spec);
    let t0 = Instant::now();
    node.start_block_sync(quiet().with_interval(Duration::from_secs(1)), t0)
        .unwrap();
    sync_quietly(&mut node, &spec, &dbs, 2, t0);
    let before = dbs.counts();
    assert_eq!(
        node.on_timer(t0 + Duration::from_millis(500)).unwrap(),
        None
    );
    assert_eq!(synced_since(&dbs, before), [0, 0, 0]);
    // The peer stalled: no block, but the held blocks become durable on the timer.
    let r = node.on_timer(t0 + Duration::from_secs(1)).unwrap();
    flushed(r, FlushTrigger::Interval, 0, 2);
    assert_one_batch_each(&dbs, before);
    assert_eq!(node.durable_height(), 2);
    // Nothing held: the timer takes no flush point and writes nothing.
    let before = dbs.counts();
    assert_eq!(node.on_timer(t0 + Duration::from_secs(10)).unwrap(), None);
    assert_eq!(synced_since(&dbs, before), [0, 0, 0]);
}

#[test]
fn held_bytes_over_flush_bytes_max_trigger_a_flush_point() {
    // Heavy blocks (≈ 1 MiB each) under the real 64 MiB cap.
    let spec = ChainSpec::new(3, Profile::Heavy);
    let dbs = Dbs::new();
    let mut node = dbs.open(&spec);
    let t0 = Instant::now();
    node.start_block_sync(quiet().with_held_bytes_max(FLUSH_BYTES_MAX), t0)
        .unwrap();
    let mut blocks = 0;
    loop {
        let before = dbs.counts();
        let held_before = node.held();
        let (b, p, c) = spec.next_block(node.state());
        blocks += 1;
        assert!(blocks < 200, "the cap never fired");
        match node.sync_block(&b, &p, &c, t0).unwrap() {
            None => {
                assert_eq!(synced_since(&dbs, before), [0, 0, 0]);
                assert!(
                    node.held().iter().all(|h| *h <= FLUSH_BYTES_MAX),
                    "no flush point while every database holds at most the cap: {:?}",
                    node.held()
                );
            }
            Some(r) => {
                assert_eq!(r.trigger, FlushTrigger::HeldBytes);
                assert_eq!((r.from, r.to), (0, blocks));
                assert!(held_before.iter().all(|h| *h <= FLUSH_BYTES_MAX));
                assert!(node.deferred().peak_held_bytes > FLUSH_BYTES_MAX);
                assert_one_batch_each(&dbs, before);
                assert_eq!(node.held(), [0, 0, 0]);
                println!(
                    "held-bytes flush point after {blocks} heavy blocks, {} bytes",
                    r.bytes
                );
                break;
            }
        }
    }
}

/// An embedder's app that writes much more than its transactions (here: a 64 KiB index entry
/// per block beside the demo app's state), so its held bytes outgrow the block store's.
struct IndexingApp {
    inner: KvApp<Arc<dyn Db>>,
}

const INDEX_ENTRY_BYTES: usize = 64 * 1024;

impl flushpoint::App<flushpoint::demo::DemoChain> for IndexingApp {
    fn committed(&self) -> flushpoint::Result<flushpoint::AppInfo> {
        self.inner.committed()
    }
    fn durable(&self) -> flushpoint::Result<flushpoint::AppInfo> {
        self.inner.durable()
    }
    fn execute_block(
        &mut self,
        block: &Block,
    ) -> flushpoint::Result<flushpoint::demo::BlockResults> {
        self.inner.execute_block(block)
    }
    fn commit(&mut self) -> flushpoint::Result<flushpoint::AppInfo> {
        let info = self.inner.commit()?;
        let mut b = flushpoint::Batch::new();
        b.put(
            [&[0xf0u8][..], &info.height.to_be_bytes()[..]].concat(),
            vec![0u8; INDEX_ENTRY_BYTES],
        );
        self.inner.db().write(&b, flushpoint::Durability::Synced)?;
        Ok(info)
    }
    fn hold(&mut self) -> flushpoint::Result<bool> {
        self.inner.hold()
    }
    fn stop_holding(&mut self) -> flushpoint::Result<()> {
        self.inner.stop_holding()
    }
    fn write_held(&mut self) -> flushpoint::Result<()> {
        self.inner.write_held()
    }
    fn held_bytes(&self) -> u64 {
        self.inner.held_bytes()
    }
    fn halt_height(&self) -> Option<u64> {
        self.inner.halt_height()
    }
    fn take_flush_request(&mut self) -> bool {
        self.inner.take_flush_request()
    }
    fn query(&self, key: &[u8]) -> flushpoint::Result<Option<Bytes>> {
        self.inner.query(key)
    }
}

fn open_indexing(dbs: &Dbs, spec: &ChainSpec) -> Node<flushpoint::demo::DemoChain> {
    let inner = KvApp::open(Arc::new(HoldingDb::new(dbs.app.clone() as Arc<dyn Db>))).unwrap();
    Node::open(
        dbs.bs.clone(),
        dbs.st.clone(),
        Box::new(IndexingApp { inner }),
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap()
    .0
}

#[test]
fn app_held_bytes_alone_trigger_a_flush_point() {
    let spec = ChainSpec::new(4, Profile::Light);
    // Measure what two blocks hold in each database, with no trigger.
    let probe = Dbs::new();
    let mut node = open_indexing(&probe, &spec);
    node.start_block_sync(quiet(), Instant::now()).unwrap();
    sync_quietly(&mut node, &spec, &probe, 2, Instant::now());
    let [bs, st, app] = node.held();
    println!("two blocks hold: block store {bs}, state {st}, app {app} bytes");
    // A cap the app's bytes pass after block 2 but no other database's: only the app's
    // bytes can trigger the flush point.
    let cap = app - 1;
    assert!(
        bs <= cap && st <= cap,
        "only the app exceeds {cap}: {:?}",
        node.held()
    );
    let dbs = Dbs::new();
    let mut node = open_indexing(&dbs, &spec);
    node.start_block_sync(quiet().with_held_bytes_max(cap), Instant::now())
        .unwrap();
    sync_quietly(&mut node, &spec, &dbs, 1, Instant::now());
    let before = dbs.counts();
    let (b, p, c) = spec.next_block(node.state());
    let r = node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    flushed(r, FlushTrigger::HeldBytes, 0, 2);
    assert_one_batch_each(&dbs, before);
}

#[test]
fn halt_height_triggers_a_flush_point() {
    let spec = ChainSpec::new(5, Profile::Light);
    let dbs = Dbs::new();
    let mut node = dbs.open_with(&spec, Some(5));
    let t0 = Instant::now();
    node.start_block_sync(quiet(), t0).unwrap();
    sync_quietly(&mut node, &spec, &dbs, 4, t0);
    let before = dbs.counts();
    let (b, p, c) = spec.next_block(node.state());
    flushed(
        node.sync_block(&b, &p, &c, t0).unwrap(),
        FlushTrigger::HaltHeight,
        0,
        5,
    );
    assert_one_batch_each(&dbs, before);
}

#[test]
fn app_request_triggers_a_flush_point() {
    let spec = ChainSpec::new(6, Profile::Light);
    let dbs = Dbs::new();
    let mut node = dbs.open(&spec);
    let t0 = Instant::now();
    node.start_block_sync(quiet(), t0).unwrap();
    sync_quietly(&mut node, &spec, &dbs, 2, t0);
    // Block 3 writes a halt param (far ahead): the app asks for a flush point at once.
    let before = dbs.counts();
    let (b, p, c) = block_with_txs(&spec, node.state(), vec![Tx::HaltAt(1_000).encode()]);
    flushed(
        node.sync_block(&b, &p, &c, t0).unwrap(),
        FlushTrigger::AppRequest,
        0,
        3,
    );
    assert_one_batch_each(&dbs, before);
    assert_eq!(node.app().halt_height(), Some(1_000));
    // The request is taken once: the next block is held again.
    sync_quietly(&mut node, &spec, &dbs, 2, t0);
}

#[test]
fn switch_to_consensus_takes_a_flush_point_first() {
    let spec = ChainSpec::new(7, Profile::Light);
    let dbs = Dbs::new();
    let mut node = dbs.open(&spec);
    let t0 = Instant::now();
    node.start_block_sync(quiet(), t0).unwrap();
    sync_quietly(&mut node, &spec, &dbs, 3, t0);
    let before = dbs.counts();
    flushed(
        node.switch_to_consensus(t0).unwrap(),
        FlushTrigger::SwitchToConsensus,
        0,
        3,
    );
    assert_one_batch_each(&dbs, before);
    assert_eq!(node.durable_height(), 3);
    assert_eq!(node.mode(), flushpoint::Mode::Consensus);
}

#[test]
fn clean_stop_writes_what_is_held_and_a_reopen_sees_it() {
    let spec = ChainSpec::new(8, Profile::Light);
    let dbs = Dbs::new();
    let mut node = dbs.open(&spec);
    let t0 = Instant::now();
    node.start_block_sync(quiet(), t0).unwrap();
    sync_quietly(&mut node, &spec, &dbs, 3, t0);
    let state = node.state().clone();
    let before = dbs.counts();
    flushed(node.stop(t0).unwrap(), FlushTrigger::Stop, 0, 3);
    assert_one_batch_each(&dbs, before);
    let mut app = KvApp::open(Arc::new(HoldingDb::new(dbs.app.clone() as Arc<dyn Db>))).unwrap();
    app.set_halt_height(None);
    let (node, report) = Node::open(
        dbs.bs.clone(),
        dbs.st.clone(),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    assert_eq!(report.case, HandshakeCase::Consistent);
    assert_eq!(node.height(), 3);
    assert_eq!(node.state(), &state);
}
