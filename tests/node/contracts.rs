//! Property: an embedder's `App` that breaks its contract is caught by the node and
//! reported as `Error::Contract` (`ErrorKind::Contract`) — never a panic — before anything
//! past the broken call is written; the node is poisoned (every later call fails with the
//! contract as its cause) and a reopen with an honest app recovers the last acknowledged
//! height.
//!
//! Each contract runs twice over the same blocks: with `Lie::None` (the control: the honest
//! `KvApp` behind the same wrapper passes) and with the lie (the node must refuse).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::demo::{Block, BlockResults, ChainSpec, KvApp, Profile};
use flushpoint::{
    App, AppInfo, Db, Error, ErrorKind, FlushPolicy, FlushTrigger, HandshakeCase, HeldStore,
    HoldingDb, MemoryDb, NoEvents, Node,
};

/// How the test app breaks its contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lie {
    /// Honest: every call goes to `KvApp`.
    None,
    /// `commit` of block `at` returns height `at + 1`.
    CommitHeight { at: u64 },
    /// After committing block `at`, `committed()` says `at - 1`.
    CommittedHeight { at: u64 },
    /// `write_held` returns `Ok` and writes nothing.
    WriteHeldWritesNothing,
    /// `hold` returns true but does not hold: commits go straight to disk.
    HoldDoesNotHold,
    /// `stop_holding` is called with writes still held (it writes none at `write_held`,
    /// and reports no held bytes, so only the holding database itself can tell).
    StopHoldingWithWritesHeld,
    /// `hold` fails.
    HoldFails,
    /// Honest, with background flush points: `held_store` is the app's own store.
    HeldStoreOwn,
    /// `held_store` is a store the app's commits never reach.
    HeldStoreElsewhere,
}

#[derive(Debug)]
struct TestApp {
    inner: KvApp<Arc<dyn Db>>,
    lie: Lie,
    holds: Arc<std::sync::atomic::AtomicU64>,
}

impl App<flushpoint::demo::DemoChain> for TestApp {
    fn committed(&self) -> flushpoint::Result<AppInfo> {
        let mut info = self.inner.committed()?;
        if let Lie::CommittedHeight { at } = self.lie
            && info.height == at
        {
            info.height -= 1;
        }
        Ok(info)
    }
    fn durable(&self) -> flushpoint::Result<AppInfo> {
        self.inner.durable()
    }
    fn execute_block(&mut self, block: &Block) -> flushpoint::Result<BlockResults> {
        self.inner.execute_block(block)
    }
    fn commit(&mut self) -> flushpoint::Result<AppInfo> {
        let mut info = self.inner.commit()?;
        if let Lie::CommitHeight { at } = self.lie
            && info.height == at
        {
            info.height += 1;
        }
        Ok(info)
    }
    fn hold(&mut self) -> flushpoint::Result<bool> {
        self.holds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match self.lie {
            Lie::HoldDoesNotHold => Ok(true),
            Lie::HoldFails => Err(Error::InvalidInput("this app cannot hold today".into())),
            _ => self.inner.hold(),
        }
    }
    fn stop_holding(&mut self) -> flushpoint::Result<()> {
        self.inner.stop_holding()
    }
    fn write_held(&mut self) -> flushpoint::Result<()> {
        match self.lie {
            Lie::WriteHeldWritesNothing | Lie::StopHoldingWithWritesHeld => Ok(()),
            _ => self.inner.write_held(),
        }
    }
    fn held_bytes(&self) -> u64 {
        match self.lie {
            Lie::StopHoldingWithWritesHeld => 0,
            _ => self.inner.held_bytes(),
        }
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
    fn held_store(&self) -> Option<Arc<dyn HeldStore>> {
        match self.lie {
            Lie::HeldStoreOwn => self.inner.held_store(),
            Lie::HeldStoreElsewhere => Some(Arc::new(HoldingDb::new(Arc::new(MemoryDb::new(
                "elsewhere",
            ))
                as Arc<dyn Db>))),
            // Synchronous flush points: the node calls `write_held`, so its lies are reached.
            _ => None,
        }
    }
}

type Snapshot = Vec<BTreeMap<Bytes, Bytes>>;

struct Harness {
    dbs: [Arc<MemoryDb>; 3],
    spec: ChainSpec,
    holds: Arc<std::sync::atomic::AtomicU64>,
}

impl Harness {
    fn new(seed: u64) -> Self {
        Harness {
            dbs: [
                Arc::new(MemoryDb::new("block store")),
                Arc::new(MemoryDb::new("state")),
                Arc::new(MemoryDb::new("app")),
            ],
            spec: ChainSpec::new(seed, Profile::Light),
            holds: Arc::default(),
        }
    }
    fn app(&self, lie: Lie) -> TestApp {
        let db = self.dbs[2].clone() as Arc<dyn Db>;
        TestApp {
            inner: KvApp::open(Arc::new(HoldingDb::new(db))).unwrap(),
            lie,
            holds: self.holds.clone(),
        }
    }
    fn open(
        &self,
        lie: Lie,
    ) -> flushpoint::Result<(Node<flushpoint::demo::DemoChain>, HandshakeCase)> {
        Node::open(
            self.dbs[0].clone(),
            self.dbs[1].clone(),
            Box::new(self.app(lie)),
            self.spec.chain(),
            Box::new(NoEvents),
        )
        .map(|(n, r)| (n, r.case))
    }
    fn snapshot(&self) -> Snapshot {
        self.dbs.iter().map(|d| d.snapshot()).collect()
    }
    fn commit(&self, node: &mut Node<flushpoint::demo::DemoChain>) -> flushpoint::Result<()> {
        let (b, p, c) = self.spec.next_block(node.state());
        node.commit_block(&b, &p, &c)
    }
    fn sync(&self, node: &mut Node<flushpoint::demo::DemoChain>) -> flushpoint::Result<()> {
        let (b, p, c) = self.spec.next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).map(|_| ())
    }
}

fn held_policy() -> FlushPolicy {
    FlushPolicy::default()
        .with_interval(Duration::from_secs(3600))
        .with_held_bytes_max(u64::MAX)
        .with_window_blocks_max(None)
        .with_background(false)
}

/// Asserts `r` is the contract error on `what`, with `expected` and `found`.
#[track_caller]
fn expect_contract<T: std::fmt::Debug>(
    r: flushpoint::Result<T>,
    what: &str,
    expected: u64,
    found: u64,
) {
    match r {
        Err(e @ Error::Contract { .. }) => {
            assert_eq!(e.kind(), ErrorKind::Contract);
            let Error::Contract {
                what: w,
                expected: x,
                found: f,
            } = &e
            else {
                unreachable!()
            };
            assert!(w.contains(what), "contract {w:?}, expected one on {what:?}");
            assert_eq!((*x, *f), (expected, found), "{e}");
        }
        other => panic!("expected a contract error on {what:?}, got {other:?}"),
    }
}

/// The node refuses every later call, naming the contract as the first failure.
#[track_caller]
fn expect_poisoned_by_contract(node: &mut Node<flushpoint::demo::DemoChain>, h: &Harness) {
    match h.sync(node).or_else(|_| h.commit(node)) {
        Err(Error::Poisoned { cause, .. }) => assert_eq!(cause.kind, ErrorKind::Contract),
        other => panic!("expected the node poisoned by the contract, got {other:?}"),
    }
}

/// Consensus mode: block 3's commit says height 4 (or `committed()` says 2). The state is
/// not saved at 3; the reopened home repairs from the app's real commit.
#[test]
fn an_app_reporting_a_height_it_did_not_commit_is_a_contract_error() {
    for (lie, what, expected, found) in [
        (
            Lie::CommitHeight { at: 3 },
            "height returned by App::commit",
            3,
            4,
        ),
        (
            Lie::CommittedHeight { at: 3 },
            "App::committed().height after App::commit",
            3,
            2,
        ),
    ] {
        // Control: the honest app commits the same blocks.
        let honest = Harness::new(11);
        let (mut node, _) = honest.open(Lie::None).unwrap();
        for _ in 0..4 {
            honest.commit(&mut node).unwrap();
        }
        assert_eq!(node.durable_height(), 4);

        let h = Harness::new(11);
        let (mut node, _) = h.open(lie).unwrap();
        h.commit(&mut node).unwrap();
        h.commit(&mut node).unwrap();
        let state_before = h.snapshot()[1].clone();
        expect_contract(h.commit(&mut node), what, expected, found);
        assert_eq!(node.durable_height(), 2, "{lie:?}");
        // Nothing past the broken commit: the state database is as before block 3, except
        // block 3's results (saved before the app commits, as always).
        let state_after = h.snapshot()[1].clone();
        let changed: Vec<_> = state_after
            .iter()
            .filter(|(k, v)| state_before.get(*k) != Some(*v))
            .map(|(k, _)| k[0])
            .collect();
        let results_prefix = flushpoint::codec::keys::RESULTS;
        assert!(
            changed.iter().all(|p| *p == results_prefix),
            "{lie:?}: keys with prefixes {changed:?} changed past the broken commit"
        );
        expect_poisoned_by_contract(&mut node, &h);
        drop(node);
        // An honest app on the same home: the app did commit 3, the state did not.
        let (node, case) = h.open(Lie::None).unwrap();
        assert_eq!(case, HandshakeCase::StateBehindApp, "{lie:?}");
        assert_eq!(node.height(), 3);
    }
}

/// Block sync: the lie at block 3 of a held window leaves every database as it was.
#[test]
fn a_lie_inside_a_held_window_writes_nothing() {
    let h = Harness::new(12);
    let (mut node, _) = h.open(Lie::CommitHeight { at: 3 }).unwrap();
    node.start_block_sync(held_policy(), Instant::now())
        .unwrap();
    h.sync(&mut node).unwrap();
    h.sync(&mut node).unwrap();
    let before = h.snapshot();
    expect_contract(h.sync(&mut node), "height returned by App::commit", 3, 4);
    assert!(h.snapshot() == before, "a held window wrote past the lie");
    expect_poisoned_by_contract(&mut node, &h);
    drop(node);
    let (node, case) = h.open(Lie::None).unwrap();
    assert_eq!((case, node.height()), (HandshakeCase::Consistent, 0));
}

/// `write_held` that writes nothing: the flush point's check after step 3 refuses it; the
/// window's events do not fire and `durable_height` does not move. The block store and the
/// state are durable (steps 1 and 2), so a reopen replays the app.
#[test]
fn write_held_that_writes_nothing_is_a_contract_error() {
    for lie in [Lie::None, Lie::WriteHeldWritesNothing] {
        let h = Harness::new(13);
        let (mut node, _) = h.open(lie).unwrap();
        node.start_block_sync(held_policy(), Instant::now())
            .unwrap();
        for _ in 0..3 {
            h.sync(&mut node).unwrap();
        }
        let r = node.flush_point(FlushTrigger::Interval, Instant::now());
        if lie == Lie::None {
            assert_eq!(r.unwrap().unwrap().to, 3);
            assert_eq!(node.durable_height(), 3);
            continue;
        }
        let held = node.app().held_bytes();
        assert!(held > 0);
        expect_contract(r, "App::held_bytes after App::write_held", 0, held);
        assert_eq!(node.durable_height(), 0);
        expect_poisoned_by_contract(&mut node, &h);
        drop(node);
        let (node, case) = h.open(Lie::None).unwrap();
        assert_eq!((case, node.height()), (HandshakeCase::AppBehind, 3));
    }
}

/// `hold` returns true but commits reach the disk: refused before the flush point writes
/// anything (an app ahead of the state could not be rolled forward).
#[test]
fn hold_that_does_not_hold_is_refused_before_the_flush_point_writes() {
    for lie in [Lie::None, Lie::HoldDoesNotHold] {
        let h = Harness::new(14);
        let (mut node, _) = h.open(lie).unwrap();
        node.start_block_sync(held_policy(), Instant::now())
            .unwrap();
        for _ in 0..3 {
            h.sync(&mut node).unwrap();
        }
        let before = h.snapshot();
        let r = node.flush_point(FlushTrigger::Interval, Instant::now());
        if lie == Lie::None {
            assert_eq!(r.unwrap().unwrap().to, 3);
            continue;
        }
        expect_contract(r, "App::durable().height inside a held window", 0, 3);
        assert!(
            h.snapshot()[..2] == before[..2],
            "the block store or the state was written past the broken contract"
        );
        expect_poisoned_by_contract(&mut node, &h);
    }
}

/// An app whose `stop_holding` is reached with writes still held: the holding database
/// refuses with a contract error (it used to panic), at the switch to consensus.
#[test]
fn stop_holding_with_writes_held_is_a_contract_error_not_a_panic() {
    // The holding database on its own.
    let db = HoldingDb::new(Arc::new(MemoryDb::new("d")) as Arc<dyn Db>);
    db.hold().unwrap();
    let mut b = flushpoint::Batch::new();
    b.put(Bytes::from_static(b"k"), Bytes::from_static(b"v"));
    db.write(&b, flushpoint::Durability::Synced).unwrap();
    expect_contract(
        db.stop_holding(),
        "keys held at HoldingDb::stop_holding",
        0,
        1,
    );
    assert!(db.is_holding(), "a refused stop_holding keeps holding");
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    db.write_held().unwrap();
    db.stop_holding().unwrap();

    // Through the node.
    let h = Harness::new(15);
    let (mut node, _) = h.open(Lie::StopHoldingWithWritesHeld).unwrap();
    node.start_block_sync(held_policy(), Instant::now())
        .unwrap();
    for _ in 0..2 {
        h.sync(&mut node).unwrap();
    }
    let r = node.switch_to_consensus(Instant::now());
    // The app hides its held bytes, so the node's durable-height check fires first.
    expect_contract(r, "App::durable().height after App::write_held", 2, 0);
    expect_poisoned_by_contract(&mut node, &h);
}

/// The node never asks an app to hold twice: `start_block_sync` in block sync is a no-op,
/// and each block sync's `hold` is matched by a `stop_holding` before the next one.
#[test]
fn the_node_calls_hold_once_per_block_sync() {
    let h = Harness::new(16);
    let (mut node, _) = h.open(Lie::None).unwrap();
    let holds = || h.holds.load(std::sync::atomic::Ordering::SeqCst);
    node.start_block_sync(held_policy(), Instant::now())
        .unwrap();
    h.sync(&mut node).unwrap();
    node.start_block_sync(held_policy(), Instant::now())
        .unwrap();
    assert_eq!(holds(), 1);
    node.switch_to_consensus(Instant::now()).unwrap();
    h.commit(&mut node).unwrap();
    node.start_block_sync(held_policy(), Instant::now())
        .unwrap();
    assert_eq!(holds(), 2);
    h.sync(&mut node).unwrap();
    node.stop(Instant::now()).unwrap();
}

/// A failing `hold` poisons the node before its own databases hold anything: no later
/// consensus block can land in an overlay and be taken for durable.
#[test]
fn a_failing_hold_poisons_the_node_before_anything_is_held() {
    let h = Harness::new(17);
    let (mut node, _) = h.open(Lie::HoldFails).unwrap();
    h.commit(&mut node).unwrap();
    let e = node
        .start_block_sync(held_policy(), Instant::now())
        .expect_err("hold failed");
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let before = h.snapshot();
    match h.commit(&mut node) {
        Err(Error::Poisoned { cause, .. }) => assert_eq!(cause.kind, ErrorKind::InvalidInput),
        other => panic!("expected poisoned, got {other:?}"),
    }
    assert!(h.snapshot() == before);
}

/// At open: an app whose `committed()` disagrees with its durable height is refused by the
/// handshake with a contract error, and an app replaying a block under the wrong height too.
#[test]
fn the_handshake_refuses_an_app_that_breaks_its_contract() {
    let h = Harness::new(18);
    let (mut node, _) = h.open(Lie::None).unwrap();
    for _ in 0..3 {
        h.commit(&mut node).unwrap();
    }
    drop(node);
    let before = h.snapshot();
    // `committed()` says 2 while the app is durable at 3.
    expect_contract(
        h.open(Lie::CommittedHeight { at: 3 }),
        "App::committed().height after the handshake",
        3,
        2,
    );
    assert!(h.snapshot() == before, "a refused open wrote nothing");

    // The app behind (a fresh app database under a home at 3): replaying block 2 under
    // height 3 is refused.
    let h2 = Harness::new(18);
    for i in 0..2 {
        for (k, v) in h.dbs[i].snapshot() {
            let mut b = flushpoint::Batch::new();
            b.put(k, v);
            h2.dbs[i].write(&b, flushpoint::Durability::Synced).unwrap();
        }
    }
    expect_contract(
        h2.open(Lie::CommitHeight { at: 2 }),
        "height returned by App::commit",
        2,
        3,
    );
    let (node, case) = h2.open(Lie::None).unwrap();
    assert_eq!((case, node.height()), (HandshakeCase::AppBehind, 3));
}

/// Background flush points: the app's held store must be where its commits are held. One
/// that is not leaves the app behind after the flush thread's `Ok`: refused before the
/// window's events fire or `durable_height` moves.
#[test]
fn a_held_store_the_commits_never_reach_is_a_contract_error() {
    for lie in [Lie::HeldStoreOwn, Lie::HeldStoreElsewhere] {
        let h = Harness::new(19);
        let (mut node, _) = h.open(lie).unwrap();
        let policy = held_policy().with_background(true);
        node.start_block_sync(policy, Instant::now()).unwrap();
        for _ in 0..3 {
            h.sync(&mut node).unwrap();
        }
        // Submitted to the flush thread, then waited for.
        assert_eq!(
            node.flush_point(FlushTrigger::Interval, Instant::now())
                .unwrap(),
            None,
            "{lie:?}: a background flush point returns at submission"
        );
        let r = node.flush_point(FlushTrigger::Stop, Instant::now());
        if lie == Lie::HeldStoreOwn {
            assert_eq!(r.unwrap().unwrap().to, 3);
            assert_eq!(node.durable_height(), 3);
            continue;
        }
        expect_contract(
            r,
            "App::durable().height after its held store's write_frozen",
            3,
            0,
        );
        assert_eq!(node.durable_height(), 0);
        expect_poisoned_by_contract(&mut node, &h);
    }
}

/// A block saved around the node (through `Node::block_store`) during block sync: the next
/// flush point refuses with a contract error before writing anything (it used to panic on
/// its invariant).
#[test]
fn a_block_saved_around_the_node_is_refused_at_the_flush_point() {
    let h = Harness::new(20);
    let (mut node, _) = h.open(Lie::None).unwrap();
    node.start_block_sync(held_policy(), Instant::now())
        .unwrap();
    h.sync(&mut node).unwrap();
    h.sync(&mut node).unwrap();
    let (b, p, c) = h.spec.next_block(node.state());
    node.block_store().save_block(&b, &p, &c).unwrap();
    let before = h.snapshot();
    expect_contract(
        node.flush_point(FlushTrigger::Interval, Instant::now()),
        "block store height at a flush point",
        2,
        3,
    );
    assert!(
        h.snapshot() == before,
        "the flush point wrote past the broken contract"
    );
    expect_poisoned_by_contract(&mut node, &h);
}
