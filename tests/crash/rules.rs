//! Crash-ordering rules the other suites do not pin, each observed at the moment it matters:
//! a step that moves earlier than the write it waits for fails a test here every time.
//!
//! * A flush point the app's halt height asks for is durable when `sync_block` returns,
//!   also with background flush points (the block at the halt height panics the node
//!   next: its height must already be on disk).
//! * A consensus block does not advance `durable_height`, nor fire its events, before its
//!   writes are durable: a power cut at any of its file ops leaves the node at the height
//!   before, with no event of the block (redb and journal homes).
//! * A window in flight stays readable, unreleased, while its unit's sync is held: the
//!   frozen windows are released only once the unit is durable, the durable height stays
//!   below it and none of its events fire.
//! * A synced journal unit below the apply-while-syncing size (every consensus block's) is
//!   readable by no one while its sync is held, and by everyone once the sync returns.
//!
//! Holding a sync uses `HookedFs`'s gate (the writer waits inside `sync_data` until the
//! test opens it); a power cut uses `SimFs::set_cut_at` (that op and every later one fail,
//! whichever thread makes them). No sleeps decide an outcome.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::demo::{ChainSpec, DemoChain, KvApp, Profile};
use flushpoint::journal::{Applier, JournalEngine, JournalOptions};
use flushpoint::testing::SimFs;
use flushpoint::{
    Batch, Db, Durability, Event, EventSink, FlushPolicy, FlushTrigger, HoldingDb, Home,
    HomeEngine, HomeOptions, MemoryDb, Node, ReadView,
};

use support::fs::{Hook, HookedFs, SyncGate};

/// How long a test waits for a held sync it expects. Why: generous for a loaded machine; a
/// pass takes milliseconds.
const EXPECTED_WITHIN: Duration = Duration::from_secs(30);
const HOUR: Duration = Duration::from_secs(3600);
const HOME: &str = "/home";

/// The heights of the events fired, shared with the test.
#[derive(Clone, Default)]
struct Fired(Arc<Mutex<Vec<u64>>>);

impl Fired {
    fn heights(&self) -> Vec<u64> {
        let mut h = self.0.lock().unwrap().clone();
        h.dedup();
        h
    }
}

impl EventSink for Fired {
    fn fire(&mut self, event: &Event) {
        self.0.lock().unwrap().push(event.height);
    }
}

/// Opens the gate when dropped, so a failed assertion while a sync is held ends the test
/// instead of leaving the flush thread (and the node's drop, which waits for it) blocked.
/// Declared after the node, it drops first.
struct OpenOnDrop(Arc<SyncGate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Runs `reads` while the gate holds a sync; if they have not returned within
/// [`EXPECTED_WITHIN`] (a read waiting for the held sync: what it read was released before
/// it was durable), a watchdog opens the gate so they finish, and the test fails.
fn without_waiting_for_the_held_sync<T>(gate: &Arc<SyncGate>, reads: impl FnOnce() -> T) -> T {
    let (done, timed) = std::sync::mpsc::channel::<()>();
    let watchdog = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            let waited = timed.recv_timeout(EXPECTED_WITHIN).is_err();
            if waited {
                gate.open();
            }
            waited
        })
    };
    let out = reads();
    let _ = done.send(());
    assert!(
        !watchdog.join().unwrap(),
        "a read waited for the held sync: what it reads was released before it was durable"
    );
    out
}

fn spec() -> ChainSpec {
    ChainSpec::new(21, Profile::Light)
}

fn app_of(db: Arc<dyn Db>) -> flushpoint::Result<Box<dyn flushpoint::App<DemoChain>>> {
    Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(db)))?))
}

/// A journal home's options with no background step by time (only a waiter or a sync
/// moves the applier), so a held sync holds everything after it.
fn journal_options() -> HomeOptions {
    let mut o = HomeOptions::default().with_engine(HomeEngine::Journal);
    o.journal.apply_batch_delay = HOUR;
    o.journal.checkpoint_interval = HOUR;
    o
}

fn open_home_node(
    fs: Arc<dyn flushpoint::fs::FileSystem>,
    options: HomeOptions,
) -> (Node<DemoChain>, Fired) {
    let fired = Fired::default();
    let home = Home::open_on(fs, Path::new(HOME), options).expect("home");
    let (node, _) =
        Node::open_home(home, app_of, spec().chain(), Box::new(fired.clone())).expect("node");
    (node, fired)
}

fn commit_next(node: &mut Node<DemoChain>) -> flushpoint::Result<()> {
    let (b, p, c) = spec().next_block(node.state());
    node.commit_block(&b, &p, &c)
}

#[test]
fn a_halt_heights_flush_point_is_durable_when_sync_block_returns_also_in_the_background() {
    let halt = 5;
    let (bs, st, app): (Arc<dyn Db>, Arc<dyn Db>, Arc<dyn Db>) = (
        Arc::new(MemoryDb::new("block store")),
        Arc::new(MemoryDb::new("state")),
        Arc::new(MemoryDb::new("app")),
    );
    let mut kv = KvApp::open(Arc::new(HoldingDb::new(app))).unwrap();
    kv.set_halt_height(Some(halt));
    let fired = Fired::default();
    let (mut node, _) = Node::open(
        bs,
        st,
        Box::new(kv),
        spec().chain(),
        Box::new(fired.clone()),
    )
    .unwrap();
    let policy = FlushPolicy::default()
        .with_interval(HOUR)
        .with_held_bytes_max(u64::MAX)
        .with_window_blocks_max(Some(2))
        .with_background(true);
    node.start_block_sync(policy, Instant::now()).unwrap();
    let mut last = None;
    while node.height() < halt {
        let (b, p, c) = spec().next_block(node.state());
        last = node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    // Blocks 1..=4 went to the flush thread in two windows; block 5 is the halt height.
    let report = last.expect("the halt height's flush point is reported by its sync_block");
    assert_eq!(
        (report.trigger, report.to),
        (FlushTrigger::HaltHeight, halt)
    );
    assert_eq!(
        node.durable_height(),
        halt,
        "the halt height is durable on return"
    );
    assert_eq!(fired.heights(), (1..=halt).collect::<Vec<_>>());
}

/// The most file ops one consensus block of [`spec`] makes on either engine (a block makes
/// tens); a block not done within it fails the test rather than looping on.
const BLOCK_OPS_MAX: u64 = 1_000;

/// A power cut at each file op of the next consensus block in turn, on a fresh home each
/// time: while any op of the block fails, `commit_block` fails and the node stays at the
/// height before, with no event of the block; the first cut past the block's last op lets
/// it commit.
fn a_consensus_block_cut_at_each_write(options: HomeOptions, what: &str) {
    for k in 1..=BLOCK_OPS_MAX {
        let fs = SimFs::new();
        let (mut node, fired) = open_home_node(Arc::new(fs.clone()), options.clone());
        for _ in 0..3 {
            commit_next(&mut node).unwrap();
        }
        assert_eq!(node.durable_height(), 3, "{what}");
        fs.set_cut_at(Some(fs.ops() + k));
        if commit_next(&mut node).is_ok() {
            assert!(k > 1, "{what}: a block cut at its first op committed");
            assert_eq!(node.durable_height(), 4, "{what}");
            return;
        }
        assert_eq!(
            node.durable_height(),
            3,
            "{what}: durable_height stays below a block cut at its op {k}"
        );
        assert_eq!(
            fired.heights(),
            vec![1, 2, 3],
            "{what}: no event of a block cut at its op {k}"
        );
    }
    panic!("{what}: a consensus block still failing with a cut past {BLOCK_OPS_MAX} ops");
}

#[test]
fn a_consensus_block_is_not_durable_nor_fires_before_its_writes_journal() {
    a_consensus_block_cut_at_each_write(journal_options(), "journal");
}

#[test]
fn a_consensus_block_is_not_durable_nor_fires_before_its_writes_redb() {
    a_consensus_block_cut_at_each_write(
        HomeOptions::default().with_engine(HomeEngine::Redb),
        "redb",
    );
}

#[test]
fn a_window_in_flight_stays_held_until_its_unit_is_durable_journal() {
    a_window_in_flight_stays_held_until_durable(journal_options());
}

#[test]
fn a_window_in_flight_stays_held_until_its_batches_are_durable_redb() {
    a_window_in_flight_stays_held_until_durable(
        HomeOptions::default().with_engine(HomeEngine::Redb),
    );
}

/// A background flush point whose first sync is held: the window stays readable, the
/// durable height below it and its events unfired until the sync returns.
fn a_window_in_flight_stays_held_until_durable(options: HomeOptions) {
    let fs = SimFs::new();
    let hooked = HookedFs::new(fs.clone(), Hook::HoldSyncsUnder(PathBuf::from(HOME)));
    hooked.gate.open();
    let (mut node, fired) = open_home_node(Arc::new(hooked.clone()), options);
    let _open = OpenOnDrop(hooked.gate.clone());
    let policy = FlushPolicy::default()
        .with_interval(HOUR)
        .with_held_bytes_max(u64::MAX)
        .with_window_blocks_max(Some(3))
        .with_background(true);
    node.start_block_sync(policy, Instant::now()).unwrap();
    for _ in 0..2 {
        let (b, p, c) = spec().next_block(node.state());
        assert!(
            node.sync_block(&b, &p, &c, Instant::now())
                .unwrap()
                .is_none()
        );
    }
    // Block 3 closes the window: it is frozen and handed to the flush thread, whose unit's
    // sync waits at the gate.
    hooked.gate.close();
    let (b, p, c) = spec().next_block(node.state());
    assert!(
        node.sync_block(&b, &p, &c, Instant::now())
            .unwrap()
            .is_none()
    );
    assert!(
        hooked.gate.wait_for_held(1, EXPECTED_WITHIN),
        "the window's unit syncs"
    );
    without_waiting_for_the_held_sync(&hooked.gate, || {
        for h in 1..=3 {
            assert!(
                node.load_block(h, ReadView::Held).unwrap().is_some(),
                "block {h} is readable while its window's unit syncs (the window is not released)"
            );
        }
    });
    assert_eq!(node.height(), 3);
    assert_eq!(
        node.durable_height(),
        0,
        "nothing is durable while the unit syncs"
    );
    assert!(
        fired.heights().is_empty(),
        "no event fires while the unit syncs"
    );
    // The sync returns: the window is durable, then released; its events fire once.
    hooked.gate.open();
    let r = node
        .flush_point(FlushTrigger::Stop, Instant::now())
        .unwrap();
    assert_eq!(r.map(|r| r.to), Some(3));
    assert_eq!(node.durable_height(), 3);
    assert_eq!(fired.heights(), vec![1, 2, 3]);
    for h in 1..=3 {
        assert!(node.load_block(h, ReadView::Durable).unwrap().is_some());
    }
}

const JDIR: &str = "/journal";

fn key(i: u32) -> Bytes {
    Bytes::from(format!("key/{i:04}"))
}

fn value(i: u32) -> Bytes {
    Bytes::from(format!("value {i}"))
}

#[test]
fn a_small_synced_unit_is_readable_only_once_its_sync_returns() {
    let fs = SimFs::new();
    let hooked = HookedFs::new(fs.clone(), Hook::HoldSyncsUnder(PathBuf::from(JDIR)));
    hooked.gate.open();
    let options = JournalOptions::default()
        .with_applier(Applier::Background)
        .with_apply_batch_delay(HOUR)
        .with_checkpoint_interval(HOUR)
        .with_checkpoint_bytes(1 << 30)
        .with_prepare_segments(false);
    let engine = JournalEngine::open(Arc::new(hooked.clone()), Path::new(JDIR), options).unwrap();
    let a = engine.keyspace("a").unwrap();
    let b = engine.keyspace("b").unwrap();
    let _open = OpenOnDrop(hooked.gate.clone());
    hooked.gate.close();
    // A consensus block's size: far below the apply-while-syncing bound.
    let writer = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            let (mut x, mut y) = (Batch::new(), Batch::new());
            for i in 0..10 {
                x.put(key(i), value(i));
                y.put(key(i), value(i + 100));
            }
            engine.commit(&[("a", &x), ("b", &y)], Durability::Synced)
        })
    };
    assert!(
        hooked.gate.wait_for_held(1, EXPECTED_WITHIN),
        "the unit syncs"
    );
    for i in 0..10 {
        assert_eq!(
            (a.get(&key(i)).unwrap(), b.get(&key(i)).unwrap()),
            (None, None),
            "key {i} is not readable while its unit syncs"
        );
    }
    hooked.gate.open();
    writer.join().unwrap().expect("the write");
    for i in 0..10 {
        assert_eq!(a.get(&key(i)).unwrap(), Some(value(i)));
        assert_eq!(b.get(&key(i)).unwrap(), Some(value(i + 100)));
    }
}
