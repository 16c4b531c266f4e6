//! loom over the crate's own `Node`: the timer thread against the block thread against stop.
//!
//! `Node` takes `&mut self`, so an embedder shares it between threads behind a mutex; stop
//! takes it out (`Option::take`) and consumes it. This test does exactly that, with loom's
//! `Mutex<Option<Node<flushpoint::demo::DemoChain>>>`, over a real `Node` (three `MemoryDb`s, a `KvApp`, a `ChainSpec`
//! chain of empty blocks), in block sync with a window of `WINDOW` blocks:
//!
//! * the timer thread, `TICKS` times: locks; if the node is still there, calls
//!   `Node::on_timer` with a clock `INTERVAL` past the previous tick (so the interval has
//!   always passed: a flush point whenever anything is held — the most aggressive timer);
//! * the block thread, `BLOCKS` times: locks; if the node is still there, calls
//!   `Node::sync_block` with the next block (a window flush point when `WINDOW` are held);
//! * stop (the main thread): locks, takes the node, calls `Node::stop`; then joins both.
//!
//! Time is not a source of nondeterminism: the block thread and stop pass the start time,
//! the timer passes start + 2·(k+1)·`INTERVAL`; which calls flush depends only on the order
//! loom chooses.
//!
//! Checked in every interleaving, by an oracle that reads the three `MemoryDb`s below the
//! node's `HoldingDb`s (what a power cut would leave):
//! * an event fires only once its block is durable in all three databases, in block order,
//!   at most once (in the event sink, at the moment it fires);
//! * after every call, the three databases are at one height and `durable_height()` says
//!   which: a flush point is never taken inside a block, nor half-taken;
//! * every flush point's window starts where the last one ended and ends at the last block
//!   applied;
//! * after stop, every block applied is durable and its event fired.
//!
//! Planted bugs in `src/node/block_sync.rs` and `src/node/consensus.rs`, each a patch
//! `tests/planted/<bug>.patch` applied with `--cfg <bug>` set (`scripts/planted-bugs.sh`);
//! with it, this test expects loom to report the failure (`should_panic` with the oracle's
//! message):
//! * `loom_bug_events_before_write`: `flush_point` fires the window's events before writing;
//! * `loom_bug_stale_flush_decision`: the timer's flush point leaves F stale, so the next
//!   decision and window start from a height already flushed;
//! * `loom_bug_stop_asks_policy`: `stop` asks the flush policy instead of flushing what is
//!   held.
//!
//! Run (prints the interleavings explored):
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --test
//! loom_flush -- --nocapture`; a planted bug: `scripts/planted-bugs.sh loom_bug_<name>` (it
//! applies the patch to a copy of the tree).
#![cfg(loom)]

use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::store::{BlockStore, StateStore};
use flushpoint::{App, Db, Event, EventKind, FlushPolicy, FlushReport, HoldingDb, MemoryDb, Node};
use loom::sync::Arc as LoomArc;
use loom::sync::Mutex;
use loom::thread;

/// Blocks the block thread applies (if the node is not stopped first).
const BLOCKS: u64 = 5;
/// The window: a flush point once this many blocks are held.
const WINDOW: u64 = 2;
/// Timer ticks.
const TICKS: u32 = 4;
/// The flush interval; the timer's clock moves 2 intervals per tick.
const INTERVAL: Duration = Duration::from_secs(3600);

fn spec() -> ChainSpec {
    ChainSpec {
        seed: 0x100f,
        profile: Profile::Light,
        initial_height: 1,
        validator_change_every: 2,
        params_change_every: 0,
        // Every block empty: one event per block, and the oracle stays cheap.
        empty_every: 1,
        account_keys: 1 << 20,
    }
}

type Raw = [Arc<MemoryDb>; 3];

/// The heights durable in the block store, the state and the app: read from the databases
/// under the node's overlays, with fresh readers.
fn durable_heights(raw: &Raw) -> [u64; 3] {
    let bs = BlockStore::<flushpoint::demo::Block>::open(raw[0].clone() as Arc<dyn Db>)
        .expect("open block store")
        .height();
    let st = StateStore::<flushpoint::demo::DemoChain>::open(raw[1].clone() as Arc<dyn Db>)
        .load_state()
        .expect("load state")
        .map_or(0, |s| s.last_block_height);
    let app = KvApp::open(Arc::new(HoldingDb::new(raw[2].clone())))
        .expect("open app")
        .committed()
        .expect("app info")
        .height;
    [bs, st, app]
}

#[derive(Debug, Default)]
struct Seen {
    /// Heights whose `NewBlock` event fired, in order.
    fired: Vec<u64>,
    /// Flush-point windows, in order.
    windows: Vec<(u64, u64)>,
}

/// After a call returned `report`, with the node at `height` and `durable_height`.
fn after_call(
    raw: &Raw,
    seen: &StdMutex<Seen>,
    report: Option<FlushReport>,
    node: &Node<flushpoint::demo::DemoChain>,
) {
    check_after_call(
        durable_heights(raw),
        node.height(),
        node.durable_height(),
        report,
        &mut seen.lock().unwrap(),
    );
}

fn check_after_call(
    durable: [u64; 3],
    height: u64,
    durable_height: u64,
    report: Option<FlushReport>,
    seen: &mut Seen,
) {
    assert!(
        durable[0] == durable[1] && durable[1] == durable[2],
        "the databases disagree after a call: {durable:?} (a flush point inside a block, or \
         half taken)"
    );
    assert_eq!(
        durable[0], durable_height,
        "durable_height() says {durable_height}, the databases are at {durable:?}"
    );
    if let Some(r) = report {
        let last = seen.windows.last().map_or(0, |w| w.1);
        assert!(
            r.from == last && r.to == height && r.from < r.to,
            "window {}..{} is not contiguous with the last durable height {last} or does \
             not end at the last block applied {height}",
            r.from,
            r.to
        );
        seen.windows.push((r.from, r.to));
    }
}

fn check_event(durable: [u64; 3], height: u64, fired: &mut Vec<u64>) {
    assert!(
        durable.iter().all(|d| *d >= height),
        "event of block {height} fired before it was durable (durable: {durable:?})"
    );
    assert_eq!(
        height,
        fired.last().copied().unwrap_or(0) + 1,
        "events fire once and in block order (fired so far: {fired:?})"
    );
    fired.push(height);
}

fn check_after_stop(durable: [u64; 3], applied: u64, seen: &Seen) {
    check_stop_durable(durable, applied);
    assert_eq!(
        seen.fired,
        (1..=applied).collect::<Vec<_>>(),
        "every applied block's event fired once, in order"
    );
    assert_eq!(seen.windows.last().map_or(0, |w| w.1), applied);
}

fn check_stop_durable(durable: [u64; 3], applied: u64) {
    assert_eq!(
        durable, [applied; 3],
        "stop left blocks not durable: applied {applied}, durable {durable:?}"
    );
}

fn model_body(runs: &AtomicUsize) {
    runs.fetch_add(1, Ordering::Relaxed);
    let t0 = Instant::now();
    let raw: Raw = [
        Arc::new(MemoryDb::new("block store")),
        Arc::new(MemoryDb::new("state")),
        Arc::new(MemoryDb::new("app")),
    ];
    let seen: Arc<StdMutex<Seen>> = Arc::default();
    let sink = {
        let (raw, seen) = (raw.clone(), seen.clone());
        move |e: &Event| {
            if matches!(e.kind, EventKind::NewBlock { .. }) {
                check_event(
                    durable_heights(&raw),
                    e.height,
                    &mut seen.lock().unwrap().fired,
                );
            }
        }
    };
    let app = KvApp::open(Arc::new(HoldingDb::new(raw[2].clone() as Arc<dyn Db>))).unwrap();
    let (mut node, _) = Node::open(
        raw[0].clone(),
        raw[1].clone(),
        Box::new(app),
        spec().chain(),
        Box::new(sink),
    )
    .unwrap();
    // Synchronous flush points: loom explores the node's lock protocol (timer, block
    // thread, stop); a background flush point's hand-off to its OS thread is outside what
    // loom can schedule, and its rules are pinned by `tests/node/deferred_background.rs`.
    let policy = FlushPolicy::default()
        .with_window_blocks_max(Some(WINDOW))
        .with_interval(INTERVAL)
        .with_background(false);
    node.start_block_sync(policy, t0).unwrap();
    let shared = LoomArc::new(Mutex::new(Some(node)));

    let timer = {
        let (shared, raw, seen) = (shared.clone(), raw.clone(), seen.clone());
        thread::spawn(move || {
            for k in 1..=TICKS {
                let mut g = shared.lock().unwrap();
                let Some(node) = g.as_mut() else { return };
                let r = node.on_timer(t0 + INTERVAL * 2 * k).expect("on_timer");
                after_call(&raw, &seen, r, node);
            }
        })
    };
    let blocks = {
        let (shared, raw, seen) = (shared.clone(), raw.clone(), seen.clone());
        thread::spawn(move || {
            for _ in 0..BLOCKS {
                let mut g = shared.lock().unwrap();
                let Some(node) = g.as_mut() else { return };
                let (b, p, c) = spec().next_block(node.state());
                let r = node.sync_block(&b, &p, &c, t0).expect("sync_block");
                after_call(&raw, &seen, r, node);
            }
        })
    };
    let node = shared
        .lock()
        .unwrap()
        .take()
        .expect("only stop takes the node");
    let applied = node.height();
    let r = node.stop(t0).expect("stop");
    let durable = durable_heights(&raw);
    check_stop_durable(durable, applied);
    check_after_call(durable, applied, applied, r, &mut seen.lock().unwrap());
    blocks.join().unwrap();
    timer.join().unwrap();
    check_after_stop(durable_heights(&raw), applied, &seen.lock().unwrap());
}

#[cfg_attr(
    loom_bug_events_before_write,
    should_panic(expected = "fired before it was durable")
)]
#[cfg_attr(
    loom_bug_stale_flush_decision,
    should_panic(expected = "durable_height() says")
)]
#[cfg_attr(
    loom_bug_stop_asks_policy,
    should_panic(expected = "stop left blocks not durable")
)]
#[test]
fn real_node_timer_blocks_and_stop_keep_events_durable_and_ordered() {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let started = Instant::now();
    let mut b = loom::model::Builder::new();
    b.preemption_bound = None;
    let report = || {
        println!(
            "loom_flush: {} interleavings explored in {:.1?} (blocks {BLOCKS}, window \
             {WINDOW}, ticks {TICKS}, no preemption bound)",
            RUNS.load(Ordering::Relaxed),
            started.elapsed()
        );
    };
    struct Report<F: Fn()>(F);
    impl<F: Fn()> Drop for Report<F> {
        fn drop(&mut self) {
            (self.0)();
        }
    }
    let _report = Report(report);
    b.check(|| model_body(&RUNS));
    // More than one order was explored.
    assert!(RUNS.load(Ordering::Relaxed) > 1);
}

// --- The oracles reject wrong answers (these run under `--cfg loom` too). ---

fn report(from: u64, to: u64) -> Option<FlushReport> {
    Some(FlushReport {
        trigger: flushpoint::FlushTrigger::Interval,
        from,
        to,
        bytes: 0,
        duration: Duration::ZERO,
        loop_wait: Duration::ZERO,
        flush_points: 1,
    })
}

#[test]
fn oracles_reject_an_early_event_a_repeat_a_split_flush_and_a_stale_window() {
    use std::panic::catch_unwind;
    let mut fired = vec![];
    check_event([1, 1, 1], 1, &mut fired);
    assert!(catch_unwind(|| check_event([2, 2, 1], 2, &mut vec![1])).is_err());
    assert!(catch_unwind(|| check_event([2, 2, 2], 1, &mut vec![1])).is_err());
    assert!(catch_unwind(|| check_event([3, 3, 3], 3, &mut vec![1])).is_err());
    let mut seen = Seen::default();
    check_after_call([2, 2, 2], 2, 2, report(0, 2), &mut seen);
    check_after_call([2, 2, 2], 3, 2, None, &mut seen);
    let with = |w: Vec<(u64, u64)>| Seen {
        fired: vec![],
        windows: w,
    };
    // A flush inside a block (state behind the block store), a stale durable_height, a
    // window that does not start at the last one's end, one short of the applied height.
    assert!(catch_unwind(|| check_after_call([3, 2, 2], 3, 2, None, &mut with(vec![]))).is_err());
    assert!(catch_unwind(|| check_after_call([3, 3, 3], 3, 2, None, &mut with(vec![]))).is_err());
    assert!(
        catch_unwind(|| check_after_call([3, 3, 3], 3, 3, report(0, 3), &mut with(vec![(0, 2)])))
            .is_err()
    );
    assert!(
        catch_unwind(|| check_after_call([3, 3, 3], 4, 3, report(2, 3), &mut with(vec![(0, 2)])))
            .is_err()
    );
    let done = Seen {
        fired: vec![1, 2, 3],
        windows: vec![(0, 2), (2, 3)],
    };
    check_after_stop([3, 3, 3], 3, &done);
    assert!(catch_unwind(|| check_after_stop([2, 2, 2], 3, &done)).is_err());
    let missing = Seen {
        fired: vec![1, 3],
        windows: vec![(0, 3)],
    };
    assert!(catch_unwind(|| check_after_stop([3, 3, 3], 3, &missing)).is_err());
}
