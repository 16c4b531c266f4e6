//! Batch-level power cuts at every step of a deferred sync with two flush points, then the
//! switch to consensus and two consensus blocks.
//!
//! Model: every write is `Synced`, so each write that returned is durable; the write in
//! flight at the cut is all or none (each database applies a batch atomically); and the app
//! may additionally be found at any height it wrote, or lower (an app whose commits were not
//! synced). For every cut point and every such surviving image we rebuild the databases, run
//! the real handshake (`Node::open`), sync on to the end with the same chain and assert:
//!
//! * every key of every database equals the uncut run's, and so do the app's height and
//!   hash and the node's state (the flush records agree too: after a restart the handshake
//!   leaves the node at a flush-point height, so windows counted from there fall where the
//!   uncut run's did — no key is excluded);
//! * no event fired before its block was durable in all three databases (checked against
//!   the log position at which it fired, for the first run and the restarted one);
//! * no event fired twice across the interrupted run (events before the cut) and the
//!   restarted run, and blocks the handshake replayed or applied fire none.
//!
//! Runs start at height 1 and at height 5. The chain has validator-set changes, a
//! consensus-params change and empty blocks inside the windows the handshake replays; the
//! test asserts the handshake really replayed each kind.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use common::{Plan, drive, open_node};
use flushpoint::testing::{RecordingDb, WriteLog, WriteRecord};
use flushpoint::{
    App, BlockStore, Db, Durability, Event, EventSink, HandshakeCase, HoldingDb, KvApp, MemoryDb,
    State, StateStore,
};

const NAMES: [&str; 3] = ["block store", "state", "app"];
type Map = BTreeMap<Bytes, Bytes>;
type Fired = Arc<Mutex<Vec<(Event, usize)>>>;

/// Three recording memory databases sharing one log, and the events fired with the log
/// length at fire time.
struct Run {
    log: WriteLog,
    dbs: Vec<Arc<RecordingDb<MemoryDb>>>,
    fired: Fired,
}

impl Run {
    fn new(maps: [Map; 3]) -> Run {
        let log = WriteLog::new();
        let dbs = maps
            .into_iter()
            .zip(NAMES)
            .map(|(m, n)| Arc::new(RecordingDb::new(MemoryDb::from_map(n, m), log.clone())))
            .collect();
        Run {
            log,
            dbs,
            fired: Arc::default(),
        }
    }

    fn sink(&self) -> Box<dyn EventSink> {
        let (fired, log) = (self.fired.clone(), self.log.clone());
        Box::new(move |e: &Event| fired.lock().unwrap().push((e.clone(), log.len())))
    }

    fn db(&self, i: usize) -> Arc<dyn Db> {
        self.dbs[i].clone()
    }

    fn snapshots(&self) -> [Map; 3] {
        [0, 1, 2].map(|i| self.dbs[i].inner().snapshot())
    }

    fn fired(&self) -> Vec<(Event, usize)> {
        self.fired.lock().unwrap().clone()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    maps: [Map; 3],
    app_height: u64,
    app_hash: [u8; 32],
    state: State,
}

fn outcome(run: &Run, node: &flushpoint::Node) -> Outcome {
    let info = node.app().committed().unwrap();
    Outcome {
        maps: run.snapshots(),
        app_height: info.height,
        app_hash: info.app_hash,
        state: node.state().clone(),
    }
}

fn db_index(name: &str) -> usize {
    NAMES.iter().position(|n| *n == name).expect("known db")
}

fn apply(maps: &mut [Map; 3], r: &WriteRecord) {
    let db = MemoryDb::from_map(r.db.clone(), std::mem::take(&mut maps[db_index(&r.db)]));
    db.write(&r.batch, Durability::Synced).unwrap();
    maps[db_index(&r.db)] = db.snapshot();
}

/// The durable heights (block store, state, app) of `maps`.
fn heights(maps: &[Map; 3]) -> (u64, u64, u64) {
    let mem = |i: usize| -> Arc<dyn Db> { Arc::new(MemoryDb::from_map(NAMES[i], maps[i].clone())) };
    let b = BlockStore::open(mem(0)).unwrap().height();
    let s = StateStore::open(mem(1))
        .load_state()
        .unwrap()
        .map_or(0, |s| s.last_block_height);
    let a = KvApp::open(Arc::new(HoldingDb::new(mem(2))))
        .unwrap()
        .durable()
        .unwrap()
        .height;
    (b, s, a)
}

/// Asserts every event fired only once its block was durable in all three databases: the
/// event fired when the log held `p` records, and `base` + the first `p` records hold it.
fn assert_durable_when_fired(base: &[Map; 3], records: &[WriteRecord], fired: &[(Event, usize)]) {
    let mut memo: HashMap<usize, (u64, u64, u64)> = HashMap::new();
    for (e, p) in fired {
        let (b, s, a) = *memo.entry(*p).or_insert_with(|| {
            let mut maps = base.clone();
            for r in &records[..*p] {
                apply(&mut maps, r);
            }
            heights(&maps)
        });
        assert!(
            b >= e.height && s >= e.height && a >= e.height,
            "event {e:?} fired at log position {p} before its block was durable (b {b}, s {s}, a {a})"
        );
    }
}

fn key(e: &Event) -> String {
    format!("{e:?}")
}

struct Stats {
    cut_states: usize,
    restarts: usize,
    cases: BTreeSet<&'static str>,
    handshake_heights: BTreeSet<u64>,
}

fn explore(initial_height: u64) -> Stats {
    let plan = Plan::new(initial_height, 2, 2);
    let empty: [Map; 3] = Default::default();

    // The uncut run.
    let run = Run::new(empty.clone());
    let (mut node, report) = open_node(run.db(0), run.db(1), run.db(2), &plan, run.sink()).unwrap();
    assert_eq!(report.case, HandshakeCase::Fresh);
    drive(&mut node, &plan).unwrap();
    assert_eq!(node.height(), plan.end);
    assert_eq!(node.deferred().flush_points, 2, "two flush points");
    let want = outcome(&run, &node);
    drop(node);
    let records = run.log.records();
    let uncut_events = run.fired();
    assert!(records.iter().all(|r| r.durability == Durability::Synced));
    assert_durable_when_fired(&empty, &records, &uncut_events);
    let all_events: BTreeSet<String> = uncut_events.iter().map(|(e, _)| key(e)).collect();
    assert_eq!(
        all_events.len(),
        uncut_events.len(),
        "uncut run fired an event twice"
    );

    // Restart from every surviving image (memoized: several cuts can leave the same image).
    let mut restarts: HashMap<(usize, usize), Vec<Event>> = HashMap::new();
    let mut stats = Stats {
        cut_states: 0,
        restarts: 0,
        cases: BTreeSet::new(),
        handshake_heights: BTreeSet::new(),
    };
    for k in 0..=records.len() {
        let before_cut: Vec<&Event> = uncut_events
            .iter()
            .filter(|(_, p)| *p <= k)
            .map(|(e, _)| e)
            .collect();
        let in_flight = if k < records.len() { 2 } else { 1 };
        for with_in_flight in 0..in_flight {
            let survivors = &records[..k + with_in_flight];
            let app_batches = survivors.iter().filter(|r| r.db == "app").count();
            for app_keep in 0..=app_batches {
                stats.cut_states += 1;
                let fired_after = restarts
                    .entry((survivors.len(), app_keep))
                    .or_insert_with(|| {
                        stats.restarts += 1;
                        let mut maps = empty.clone();
                        let mut app_seen = 0;
                        for r in survivors {
                            if r.db == "app" {
                                app_seen += 1;
                                if app_seen > app_keep {
                                    continue;
                                }
                            }
                            apply(&mut maps, r);
                        }
                        let ctx = format!(
                            "initial {initial_height}, {} surviving batches, app keeps {app_keep} of {app_batches}",
                            survivors.len()
                        );
                        let run = Run::new(maps.clone());
                        let (mut node, report) =
                            open_node(run.db(0), run.db(1), run.db(2), &plan, run.sink())
                                .unwrap_or_else(|e| panic!("{ctx}: handshake refused: {e}"));
                        stats.cases.insert(report.case.name());
                        let o = report.observed;
                        stats
                            .handshake_heights
                            .extend(o.app_height + 1..=report.height);
                        drive(&mut node, &plan)
                            .unwrap_or_else(|e| panic!("{ctx}: sync after restart failed: {e}"));
                        let got = outcome(&run, &node);
                        assert!(got == want, "{ctx}: the restarted run differs from the uncut run");
                        drop(node);
                        let fired = run.fired();
                        assert_durable_when_fired(&maps, &run.log.records(), &fired);
                        for (e, _) in &fired {
                            assert!(
                                e.height > report.height,
                                "{ctx}: event {e:?} of a block the handshake repaired fired"
                            );
                        }
                        fired.into_iter().map(|(e, _)| e).collect()
                    });
                let mut seen = BTreeSet::new();
                for e in before_cut.iter().copied().chain(fired_after.iter()) {
                    assert!(all_events.contains(&key(e)), "unknown event {e:?}");
                    assert!(
                        seen.insert(key(e)),
                        "initial {initial_height}, cut {k}: event {e:?} fired twice"
                    );
                }
            }
        }
    }

    // The chain's special blocks were among those the handshake replayed or applied.
    let spec = plan.spec;
    let hit = |every: u64| stats.handshake_heights.iter().any(|h| h % every == 0);
    assert!(
        hit(spec.validator_change_every),
        "no validator-set change replayed"
    );
    assert!(
        hit(spec.params_change_every),
        "no consensus-params change replayed"
    );
    assert!(hit(spec.empty_every), "no empty block replayed");
    for case in [
        "fresh",
        "consistent",
        "app-behind",
        "block-store-ahead",
        "state-behind-app",
        "flush-roll-forward",
    ] {
        assert!(
            stats.cases.contains(case),
            "handshake case {case} never reached"
        );
    }
    println!(
        "power_cut_every_step: initial height {initial_height}: {} log records, {} cut states, {} distinct restarts, cases {:?}",
        records.len(),
        stats.cut_states,
        stats.restarts,
        stats.cases
    );
    stats
}

#[test]
fn power_cut_at_every_step_from_height_1_and_5() {
    let t = Instant::now();
    let a = explore(1);
    let b = explore(5);
    println!(
        "power_cut_every_step: states explored: {} cut states, {} restarts (handshake + sync to the end), {:.1?}",
        a.cut_states + b.cut_states,
        a.restarts + b.restarts,
        t.elapsed()
    );
}
