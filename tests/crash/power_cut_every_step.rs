//! Batch-level power cuts at every write of a deferred sync, then the switch to consensus and
//! consensus blocks — swept over many chain and flush configurations, with every recovery
//! cut again at every one of its own writes (the handshake's repair writes included).
//!
//! Model: every write is `Synced`, so each write that returned is durable; the write in
//! flight at the cut is all or none (each database applies a batch atomically), so a cut
//! state is "the first s writes survived"; and the app may additionally be found at any
//! height it wrote, or lower (an app whose commits were not synced). For every such state
//! we rebuild the databases, run the real handshake (`Node::open`), sync on to the end with
//! the same chain, and assert:
//!
//! * nothing acknowledged is missing: `Node::durable_height()` when the cut came is at most
//!   the block store's and the state's height on disk (and the app's, unless the app is the
//!   lagging one), and at most the height the handshake recovers; right after the
//!   handshake, the node's state and the app's durable commit equal the uncut run's at that
//!   height;
//! * every key of every database equals the uncut run's at the end, and so do the app's
//!   height and hash and the node's state (after a restart the handshake leaves the node at
//!   a flush-point height, so windows counted from there fall where the uncut run's did);
//! * an event fires only once its block is durable in all three databases (checked against
//!   the log position at which it fired); the events of a restarted run are exactly the
//!   uncut run's above the recovered height, in order (so none of a block the handshake
//!   repaired fires, and none fires twice); every event fired before a cut is at or below
//!   the recovered height.
//!
//! Recovery cut everywhere: each recovery runs over recording databases, and every state its
//! writes can leave (its first s writes, the app at any of its own heights) is recovered
//! again — a cut during roll-forward (`FlushRollForward`), app-behind replay, the
//! block-store-ahead and state-behind-app repairs, and the sync after them.
//!
//! Configurations: windows of 1, 2, 3, 4 and 7 blocks; light, heavy and mixed blocks;
//! validator-set and params changes and halt heights at and around window edges; initial
//! heights 1, 3, 5 and 7; runs that start from a lagging database (app behind, state behind
//! the app, block store ahead). States are counted once each, by a fingerprint of the three
//! databases' contents (the app height is part of them): the test prints `N cut states`.
//!
//! CI runs a slice of the configurations (the flagged ones and every third of the rest);
//! `FLUSHPOINT_FULL=1` runs all of them
//! (`FLUSHPOINT_FULL=1 cargo test --release --test crash power_cut_every_step:: -- --nocapture`).

use crate::support;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use flushpoint::demo::{ChainSpec, KvApp, Profile, State};
use flushpoint::store::{BlockStore, StateStore};
use flushpoint::testing::{RecordingDb, WriteLog, WriteRecord};
use flushpoint::{
    App, AppInfo, Db, Durability, Event, EventSink, HandshakeCase, HoldingDb, MemoryDb, Node, Op,
};
use support::full;
use support::plan::{Plan, drive, drive_observed, open_node};

const NAMES: [&str; 3] = ["block store", "state", "app"];
const APP: usize = 2;
type Map = BTreeMap<Bytes, Bytes>;
type Fired = Arc<Mutex<Vec<(Event, usize)>>>;

fn db_index(name: &str) -> usize {
    NAMES.iter().position(|n| *n == name).expect("known db")
}

/// One entry's contribution to a database's fingerprint (128 bits, from two SipHash keys).
fn entry_fp(k: &[u8], v: &[u8]) -> u128 {
    let half = |salt: u8| {
        let mut h = DefaultHasher::new();
        salt.hash(&mut h);
        k.hash(&mut h);
        v.hash(&mut h);
        h.finish() as u128
    };
    (half(0) << 64) | half(1)
}

/// A database's contents with an order-independent fingerprint (the wrapping sum of its
/// entries'), kept up to date on every write, so that a state is fingerprinted without
/// rereading it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Image {
    map: Map,
    fp: u128,
}

impl Image {
    fn apply(&mut self, r: &WriteRecord) {
        for op in r.batch.ops() {
            match op {
                Op::Put(k, v) => {
                    if let Some(old) = self.map.insert(k.clone(), v.clone()) {
                        self.fp = self.fp.wrapping_sub(entry_fp(k, &old));
                    }
                    self.fp = self.fp.wrapping_add(entry_fp(k, v));
                }
                Op::Delete(k) => {
                    if let Some(old) = self.map.remove(k) {
                        self.fp = self.fp.wrapping_sub(entry_fp(k, &old));
                    }
                }
            }
        }
    }
}

/// The fingerprint of a cut state: the three databases' contents.
fn state_fp(images: [&Image; 3]) -> u64 {
    let mut h = DefaultHasher::new();
    for i in images {
        i.fp.hash(&mut h);
    }
    h.finish()
}

fn mem(name: &str, map: &Map) -> Arc<dyn Db> {
    Arc::new(MemoryDb::from_map(name, map.clone()))
}

/// The heights (block store, state, app) stored in `maps`, read without the handshake; an
/// empty database counts as `base`.
fn heights(maps: [&Map; 3], base: u64) -> [u64; 3] {
    let b = BlockStore::<flushpoint::demo::Block>::open(mem(NAMES[0], maps[0]))
        .unwrap()
        .height();
    let s = StateStore::<flushpoint::demo::DemoChain>::open(mem(NAMES[1], maps[1]))
        .load_state()
        .unwrap()
        .map_or(0, |s| s.last_block_height);
    let a = KvApp::open(Arc::new(HoldingDb::new(mem(NAMES[2], maps[2]))))
        .unwrap()
        .durable()
        .unwrap()
        .height;
    [b.max(base), s.max(base), a.max(base)]
}

/// Three recording memory databases sharing one log, and the events fired with the log
/// length at fire time.
struct Run {
    log: WriteLog,
    dbs: Vec<Arc<RecordingDb<MemoryDb>>>,
    fired: Fired,
}

impl Run {
    fn new(maps: [&Map; 3]) -> Run {
        let log = WriteLog::new();
        let dbs = maps
            .into_iter()
            .zip(NAMES)
            .map(|(m, n)| {
                Arc::new(RecordingDb::new(
                    MemoryDb::from_map(n, m.clone()),
                    log.clone(),
                ))
            })
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

/// What a run from some state did: its writes, when the node acknowledged what, its events.
struct RunLog {
    records: Vec<WriteRecord>,
    /// `(log length, durable_height)` after the handshake and after each later node call.
    acks: Vec<(usize, u64)>,
    fired: Vec<(Event, usize)>,
    /// Log length when the handshake returned (its repair writes are `records[..this]`).
    handshake_len: usize,
    case: HandshakeCase,
}

impl RunLog {
    /// The height acknowledged durable by a cut after the first `s` writes.
    fn acked(&self, s: usize, inherited: u64) -> u64 {
        self.acks
            .iter()
            .filter(|(p, _)| *p <= s)
            .map(|(_, d)| *d)
            .fold(inherited, u64::max)
    }
    /// The highest event height fired by a cut after the first `s` writes.
    fn fired_max(&self, s: usize, inherited: u64) -> u64 {
        self.fired
            .iter()
            .filter(|(_, p)| *p <= s)
            .map(|(e, _)| e.height)
            .fold(inherited, u64::max)
    }
}

/// Asserts every event fired only once its block was durable in all three databases: the
/// event fired when the log held `p` records, and `base` + the first `p` records hold it.
fn assert_durable_when_fired(ctx: &str, base: [&Map; 3], log: &RunLog, height0: u64) {
    let mut maps = base.map(|m| m.clone());
    let mut applied = 0;
    let mut last: Option<(usize, [u64; 3])> = None;
    for (e, p) in &log.fired {
        while applied < *p {
            let r = &log.records[applied];
            let db = MemoryDb::from_map(r.db.clone(), std::mem::take(&mut maps[db_index(&r.db)]));
            db.write(&r.batch, Durability::Synced).unwrap();
            maps[db_index(&r.db)] = db.snapshot();
            applied += 1;
        }
        let h = match last {
            Some((q, h)) if q == *p => h,
            _ => heights([&maps[0], &maps[1], &maps[2]], height0),
        };
        last = Some((*p, h));
        assert!(
            h.iter().all(|x| *x >= e.height),
            "{ctx}: event {e:?} fired at log position {p} before its block was durable (heights {h:?})"
        );
    }
}

/// How a run starts.
#[derive(Debug, Clone, Copy)]
enum Start {
    /// Empty databases.
    Empty,
    /// `blocks` consensus blocks, then the last `n` app commits lost.
    AppBehind { blocks: u64, n: u64 },
    /// `blocks` consensus blocks, the last state save lost (the app committed it).
    StateBehindApp { blocks: u64 },
    /// `blocks` consensus blocks, the last block's results, app commit and state lost.
    BlockStoreAhead { blocks: u64 },
}

#[derive(Debug, Clone)]
struct Config {
    label: String,
    spec: ChainSpec,
    window: u64,
    /// Blocks synced in block sync, counted from the height the first handshake leaves.
    bs_blocks: u64,
    consensus: u64,
    halt_height: Option<u64>,
    start: Start,
    /// Background flush points (ADR 0004) or synchronous ones.
    background: bool,
}

fn chain(initial_height: u64, profile: Profile, v: u64, p: u64, e: u64) -> ChainSpec {
    ChainSpec {
        seed: 0xf1,
        profile,
        initial_height,
        validator_change_every: v,
        params_change_every: p,
        empty_every: e,
        account_keys: 1 << 20,
    }
}

/// Every configuration of the sweep, and whether the CI slice runs it.
fn configs() -> Vec<(Config, bool)> {
    let mut out = Vec::new();
    let mut add = |ci: bool,
                   spec: ChainSpec,
                   window: u64,
                   bs_blocks: u64,
                   consensus: u64,
                   halt_height: Option<u64>,
                   start: Start| {
        let label = format!(
            "initial {} {:?} v{}/p{}/e{} window {window} bs {bs_blocks} cons {consensus} halt {halt_height:?} {start:?}",
            spec.initial_height,
            spec.profile,
            spec.validator_change_every,
            spec.params_change_every,
            spec.empty_every
        );
        out.push((
            Config {
                label,
                spec,
                window,
                bs_blocks,
                consensus,
                halt_height,
                start,
                background: true,
            },
            ci,
        ));
    };
    let light = |i| chain(i, Profile::Light, 3, 7, 5);
    let (heavy, mixed) = (Profile::Heavy, Profile::Mixed);
    let e = Start::Empty;
    // Window sizes from 1 block up, from heights 1, 2, 5, 9 and 13 (longer from 1 and 5).
    for window in [1, 2, 3, 4, 7] {
        for initial in [1, 5] {
            let ci = window == 4 || (window == 1 && initial == 1);
            let (bs, cons) = if ci { (16, 3) } else { (24, 4) };
            add(ci, light(initial), window, bs, cons, None, e);
        }
        for initial in [2, 9, 13] {
            add(false, light(initial), window, 16, 3, None, e);
        }
    }
    // Validator-set and params changes at and around window edges (windows of 4 and 3).
    for (v, p) in [(4, 5), (5, 4), (3, 8), (8, 3)] {
        add(v == 4, chain(1, Profile::Light, v, p, 0), 4, 12, 2, None, e);
    }
    add(false, chain(5, Profile::Light, 3, 4, 0), 3, 12, 2, None, e);
    // Halt heights at and around window edges.
    for halt in [3, 4, 5, 8, 9] {
        add(halt == 5, light(1), 4, 12, 2, Some(halt), e);
    }
    for halt in [6, 7, 8] {
        add(false, light(5), 3, 12, 2, Some(halt), e);
    }
    add(false, light(1), 1, 8, 2, Some(3), e);
    add(false, light(1), 2, 12, 2, Some(6), e);
    // Other initial heights.
    add(false, light(3), 2, 12, 2, None, e);
    add(false, light(7), 4, 16, 2, None, e);
    // Heavy and mixed blocks (block 10 is heavy in a mixed chain).
    add(false, chain(1, heavy, 2, 3, 0), 2, 4, 1, None, e);
    add(false, chain(1, heavy, 2, 3, 0), 1, 2, 1, None, e);
    add(true, chain(5, mixed, 3, 7, 0), 3, 6, 1, None, e);
    add(false, chain(7, mixed, 2, 5, 0), 4, 4, 2, None, e);
    // Runs that start from a lagging database: the first handshake repairs it.
    for window in [2, 4] {
        for start in [
            Start::AppBehind { blocks: 3, n: 1 },
            Start::AppBehind { blocks: 3, n: 3 },
            Start::StateBehindApp { blocks: 3 },
            Start::BlockStoreAhead { blocks: 3 },
        ] {
            add(window == 2, light(1), window, 12, 2, None, start);
        }
    }
    let app_behind = Start::AppBehind { blocks: 4, n: 2 };
    add(false, light(5), 3, 12, 2, None, app_behind);
    add(
        false,
        light(5),
        3,
        12,
        2,
        None,
        Start::StateBehindApp { blocks: 2 },
    );
    add(
        false,
        light(5),
        1,
        8,
        2,
        None,
        Start::BlockStoreAhead { blocks: 2 },
    );
    // Every configuration again with synchronous flush points: both modes issue the same
    // synced batches in the same order (ADR 0004), so their cut states coincide — the
    // distinct count stays, and each mode's recoveries are checked on their own.
    let synchronous: Vec<(Config, bool)> = out
        .iter()
        .map(|(c, ci)| {
            let mut c = c.clone();
            c.background = false;
            c.label.push_str(" sync-flush");
            (c, *ci)
        })
        .collect();
    out.extend(synchronous);
    out
}

/// The uncut run of a configuration: the checks' reference.
struct Reference {
    plan: Plan,
    base: u64,
    want: [Map; 3],
    want_state: State,
    want_app: AppInfo,
    /// The uncut run's state and app commit at each height it passed.
    at_height: BTreeMap<u64, (State, AppInfo)>,
    /// The uncut run's events, in order.
    events: Vec<Event>,
}

#[derive(Debug, Clone, Copy)]
struct Facts {
    /// Heights on disk before the handshake (block store, state, app).
    on_disk: [u64; 3],
    recovered: u64,
}

#[derive(Default)]
struct Stats {
    /// Distinct cut states (over the whole sweep).
    distinct: HashSet<u64>,
    /// Cut states visited, duplicates included.
    occurrences: u64,
    restarts: u64,
    /// Distinct states a first cut leaves (a cut during a configuration's uncut run).
    first_level: HashSet<u64>,
    /// Distinct states a second cut leaves (a cut during a recovery).
    second_level: HashSet<u64>,
    /// Per handshake case: cut states after 1..=all of that repair's writes.
    repair_cuts: BTreeMap<&'static str, u64>,
    cases: BTreeSet<&'static str>,
    /// Heights the handshakes replayed or applied.
    handshake_heights: BTreeSet<u64>,
}

struct Explorer<'a> {
    r: &'a Reference,
    /// Each recovered state's facts, and whether its recovery was cut everywhere.
    memo: HashMap<u64, (Facts, bool)>,
    stats: &'a mut Stats,
}

/// What a cut inherits from the runs before it.
#[derive(Debug, Clone, Copy)]
struct Before {
    /// The height acknowledged durable.
    acked: u64,
    /// The highest height an event fired for.
    fired: u64,
    /// False while the app may still lag (its unsynced commits lost).
    app_complete: bool,
}

impl Explorer<'_> {
    /// Every state a cut during `log` (a run from `base`) can leave, each recovered (once per
    /// distinct state) and checked.
    fn cut_everywhere(
        &mut self,
        base: &[Image; 3],
        log: &RunLog,
        before: Before,
        depth: u32,
        ctx: &str,
    ) {
        let Before {
            acked: acked0,
            fired: fired0,
            app_complete: app_complete0,
        } = before;
        let mut cur = base.clone();
        // The app's image after each of this run's app writes (the app may lag to any).
        let mut app_versions = vec![base[APP].clone()];
        for s in 0..=log.records.len() {
            if s > 0 {
                let r = &log.records[s - 1];
                let i = db_index(&r.db);
                cur[i].apply(r);
                if i == APP {
                    app_versions.push(cur[APP].clone());
                }
            }
            let acked = log.acked(s, acked0);
            let fired = log.fired_max(s, fired0);
            for (j, app) in app_versions.iter().enumerate() {
                // The app lags if it lost some of this run's writes, or if it lagged before
                // and the handshake that replays it had not finished.
                let complete =
                    j + 1 == app_versions.len() && (app_complete0 || s >= log.handshake_len);
                let images = [&cur[0], &cur[1], app];
                if depth >= 2 && s >= 1 && s <= log.handshake_len {
                    *self.stats.repair_cuts.entry(log.case.name()).or_default() += 1;
                }
                let ctx2 = format!(
                    "{ctx} → cut after {s}/{} writes, app keeps {j}",
                    log.records.len()
                );
                let before = Before {
                    acked,
                    fired,
                    app_complete: complete,
                };
                self.visit(images, before, depth, &ctx2);
            }
        }
    }

    /// Recovers one cut state (memoized) and checks it against what was acknowledged and
    /// fired before the cut.
    fn visit(&mut self, images: [&Image; 3], before: Before, depth: u32, ctx: &str) {
        let Before {
            acked,
            fired,
            app_complete,
        } = before;
        let fp = state_fp(images);
        self.stats.occurrences += 1;
        self.stats.distinct.insert(fp);
        if depth >= 2 {
            self.stats.second_level.insert(fp);
        } else {
            self.stats.first_level.insert(fp);
        }
        let cached = self.memo.get(&fp).copied();
        // Nothing acknowledged is missing on any database, before the handshake touches it.
        let on_disk = match cached {
            Some((f, _)) => f.on_disk,
            None => heights(images.map(|i| &i.map), self.r.base),
        };
        for (i, h) in on_disk.into_iter().enumerate() {
            if i == APP && !app_complete {
                continue; // The lagging app (unsynced commits) is the model's allowance.
            }
            assert!(
                h >= acked,
                "{ctx}: acknowledged height {acked} lost: on disk the {} is at {h}",
                NAMES[i]
            );
        }
        // A state first reached by a second cut is recovered without cutting its recovery;
        // reached again by a first cut, its recovery is run again and cut everywhere.
        let facts = match cached {
            Some((f, explored)) if explored || depth >= 2 => f,
            _ => {
                let (f, log) = self.restart(images, on_disk, ctx);
                self.memo.insert(fp, (f, depth < 2));
                if depth < 2 {
                    // Cut the recovery itself at every one of its writes.
                    let base = [images[0].clone(), images[1].clone(), images[2].clone()];
                    self.cut_everywhere(&base, &log, before, depth + 1, ctx);
                }
                f
            }
        };
        assert!(
            facts.recovered >= acked,
            "{ctx}: acknowledged height {acked} lost: the handshake recovered {}",
            facts.recovered
        );
        assert!(
            fired <= facts.recovered,
            "{ctx}: an event of height {fired} fired before the cut, but the handshake recovered only {}",
            facts.recovered
        );
    }

    /// Restarts from `images`: handshake, sync to the end; checks the result.
    fn restart(&mut self, images: [&Image; 3], on_disk: [u64; 3], ctx: &str) -> (Facts, RunLog) {
        self.stats.restarts += 1;
        let (r, plan) = (self.r, &self.r.plan);
        let maps = images.map(|i| &i.map);
        let run = Run::new(maps);
        let (mut node, report) = open_node(run.db(0), run.db(1), run.db(2), plan, run.sink())
            .unwrap_or_else(|e| panic!("{ctx}: handshake refused: {e}"));
        self.stats.cases.insert(report.case.name());
        self.stats
            .handshake_heights
            .extend(report.observed.app_height + 1..=report.height);
        let handshake_len = run.log.len();
        let app_now = node.app().committed().unwrap();
        assert_eq!(
            r.at_height.get(&report.height),
            Some(&(node.state().clone(), app_now)),
            "{ctx}: after the handshake ({:?}, height {}) the state or the app differs from the uncut run's at that height",
            report.case,
            report.height
        );
        assert_eq!(
            node.app().durable().unwrap(),
            app_now,
            "{ctx}: the handshake left the app's commit not durable"
        );
        let mut acks = vec![(handshake_len, node.durable_height())];
        drive_observed(&mut node, plan, &mut |n: &Node<
            flushpoint::demo::DemoChain,
        >| {
            acks.push((run.log.len(), n.durable_height()))
        })
        .unwrap_or_else(|e| panic!("{ctx}: sync after restart failed: {e}"));
        let info = node.app().committed().unwrap();
        assert!(
            run.snapshots() == r.want && info == r.want_app && *node.state() == r.want_state,
            "{ctx}: the restarted run differs from the uncut run"
        );
        drop(node);
        let log = RunLog {
            records: run.log.records(),
            acks,
            fired: run.fired(),
            handshake_len,
            case: report.case,
        };
        let want_events: Vec<&Event> = r
            .events
            .iter()
            .filter(|e| e.height > report.height)
            .collect();
        let got_events: Vec<&Event> = log.fired.iter().map(|(e, _)| e).collect();
        assert!(
            got_events == want_events,
            "{ctx}: the restarted run's events are not the uncut run's above the recovered height {}",
            report.height
        );
        assert_durable_when_fired(ctx, maps, &log, r.base);
        (
            Facts {
                on_disk,
                recovered: report.height,
            },
            log,
        )
    }
}

/// The databases a configuration starts from.
fn start_maps(cfg: &Config) -> [Map; 3] {
    let blocks = match cfg.start {
        Start::Empty => return Default::default(),
        Start::AppBehind { blocks, .. }
        | Start::StateBehindApp { blocks }
        | Start::BlockStoreAhead { blocks } => blocks,
    };
    let base = cfg.spec.initial_height - 1;
    let pre = Plan {
        spec: cfg.spec,
        bs_end: base,
        end: base + blocks,
        window: cfg.window,
        halt_height: None,
        background: cfg.background,
    };
    let empty: [Map; 3] = Default::default();
    let run = Run::new([&empty[0], &empty[1], &empty[2]]);
    let (mut node, _) = open_node(run.db(0), run.db(1), run.db(2), &pre, run.sink()).unwrap();
    drive(&mut node, &pre).unwrap();
    drop(node);
    let records = run.log.records();
    let mut images: [Image; 3] = Default::default();
    // Which of the prefix's writes the lagging database lost.
    let n = records.len();
    let apps = records.iter().filter(|r| r.db == "app").count();
    let lost: Vec<bool> = match cfg.start {
        Start::Empty => unreachable!(),
        Start::AppBehind { n: lag, .. } => {
            let mut seen = 0;
            records
                .iter()
                .map(|r| {
                    seen += usize::from(r.db == "app");
                    r.db == "app" && seen > apps - lag as usize
                })
                .collect()
        }
        Start::StateBehindApp { .. } => {
            assert_eq!(records[n - 1].db, "state");
            (0..n).map(|i| i + 1 == n).collect()
        }
        Start::BlockStoreAhead { .. } => {
            assert_eq!(records[n - 4].db, "block store");
            (0..n).map(|i| i + 3 >= n).collect()
        }
    };
    for (r, lost) in records.iter().zip(lost) {
        if !lost {
            images[db_index(&r.db)].apply(r);
        }
    }
    images.map(|i| i.map)
}

/// The uncut run of `cfg`: the reference, its log, and the images it started from.
fn uncut(cfg: &Config) -> (Reference, RunLog, [Image; 3]) {
    let start = start_maps(cfg);
    let base = cfg.spec.initial_height - 1;
    // The uncut run.
    let run = Run::new([&start[0], &start[1], &start[2]]);
    let mut plan = Plan {
        spec: cfg.spec,
        bs_end: 0,
        end: 0,
        window: cfg.window,
        halt_height: cfg.halt_height,
        background: cfg.background,
    };
    let (mut node, report) = open_node(run.db(0), run.db(1), run.db(2), &plan, run.sink()).unwrap();
    plan.bs_end = report.height + cfg.bs_blocks;
    plan.end = plan.bs_end + cfg.consensus;
    let handshake_len = run.log.len();
    let mut at_height = BTreeMap::new();
    let mut acks = vec![(handshake_len, node.durable_height())];
    at_height.insert(
        node.height(),
        (node.state().clone(), node.app().committed().unwrap()),
    );
    drive_observed(&mut node, &plan, &mut |n: &Node<
        flushpoint::demo::DemoChain,
    >| {
        acks.push((run.log.len(), n.durable_height()));
        at_height.insert(
            n.height(),
            (n.state().clone(), n.app().committed().unwrap()),
        );
    })
    .unwrap();
    assert_eq!(node.height(), plan.end);
    assert_eq!(node.durable_height(), plan.end);
    let reference = Reference {
        plan,
        base,
        want: run.snapshots(),
        want_state: node.state().clone(),
        want_app: node.app().committed().unwrap(),
        at_height,
        events: run.fired().into_iter().map(|(e, _)| e).collect(),
    };
    drop(node);
    let log = RunLog {
        records: run.log.records(),
        acks,
        fired: run.fired(),
        handshake_len,
        case: report.case,
    };
    assert!(
        log.records
            .iter()
            .all(|r| r.durability == Durability::Synced)
    );
    assert_durable_when_fired(&cfg.label, [&start[0], &start[1], &start[2]], &log, base);
    let keys: BTreeSet<String> = reference.events.iter().map(|e| format!("{e:?}")).collect();
    assert_eq!(
        keys.len(),
        reference.events.len(),
        "uncut run fired an event twice"
    );
    let mut images: [Image; 3] = Default::default();
    for (img, m) in images.iter_mut().zip(&start) {
        for (k, v) in m {
            let mut b = flushpoint::Batch::new();
            b.put(k.clone(), v.clone());
            img.apply(&WriteRecord {
                seq: 0,
                db: String::new(),
                durability: Durability::Synced,
                batch: b,
            });
        }
    }
    (reference, log, images)
}

fn explore(cfg: &Config, stats: &mut Stats) -> (usize, usize, u64) {
    let (reference, log, images) = uncut(cfg);
    let base = cfg.spec.initial_height - 1;
    let counts = (stats.distinct.len(), stats.restarts);
    let mut ex = Explorer {
        r: &reference,
        memo: HashMap::new(),
        stats,
    };
    let before = Before {
        acked: base,
        fired: base,
        // A lagging start is the model's allowance for the app, not an acknowledged loss.
        app_complete: !matches!(cfg.start, Start::AppBehind { .. }),
    };
    ex.cut_everywhere(&images, &log, before, 1, &cfg.label);
    let new = stats.distinct.len() - counts.0;
    (log.records.len(), new, stats.restarts - counts.1)
}

#[test]
fn power_cut_at_every_step_and_every_recovery_write() {
    let t = Instant::now();
    let mut stats = Stats::default();
    let all = configs();
    // CI: the flagged configurations and every third of the others.
    let chosen: Vec<&Config> = all
        .iter()
        .enumerate()
        .filter(|(i, (_, ci))| full() || *ci || i % 3 == 0)
        .map(|(_, (c, _))| c)
        .collect();
    for cfg in &chosen {
        let tc = Instant::now();
        let (records, new, restarts) = explore(cfg, &mut stats);
        println!(
            "power_cut_every_step: {}: {records} writes in the uncut run, {new} new cut states, {restarts} restarts, {:.1?}",
            cfg.label,
            tc.elapsed()
        );
    }
    // The chain's special blocks were among those the handshakes replayed or applied.
    let hit = |every: u64| stats.handshake_heights.iter().any(|h| h % every == 0);
    assert!(hit(3), "no validator-set change replayed");
    assert!(hit(7), "no consensus-params change replayed");
    assert!(hit(5), "no empty block replayed");
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
    // Each repair was itself cut (a second cut after some of its writes).
    for case in [
        "app-behind",
        "block-store-ahead",
        "state-behind-app",
        "flush-roll-forward",
    ] {
        assert!(
            stats.repair_cuts.get(case).is_some_and(|n| *n > 0),
            "no cut during a {case} repair"
        );
    }
    let n = stats.distinct.len();
    println!(
        "power_cut_every_step: {n} cut states ({} visits with duplicates, {} restarts, {} left only by a cut during a recovery; cuts during each repair {:?}; cases {:?}), {} of {} configurations, full={}, 0 failures, {:.1?}",
        stats.occurrences,
        stats.restarts,
        stats.second_level.difference(&stats.first_level).count(),
        stats.repair_cuts,
        stats.cases,
        chosen.len(),
        all.len(),
        full(),
        t.elapsed()
    );
    if full() {
        assert!(n >= 10_000, "the full sweep explored only {n} cut states");
    }
}

/// The checks' negative control: a state that lost the last write of one database (a
/// database whose last sync lied), visited as if the whole run had been acknowledged, must
/// be rejected by the acknowledged-height check — for each database in turn.
#[test]
fn a_lost_acknowledged_write_is_rejected() {
    let (cfg, _) = configs()
        .into_iter()
        .find(|(c, ci)| *ci && c.window == 4)
        .unwrap();
    let (reference, log, start) = uncut(&cfg);
    let end = reference.plan.end;
    for name in NAMES {
        let last = log.records.iter().rposition(|r| r.db == name).unwrap();
        let mut images = start.clone();
        for (i, r) in log.records.iter().enumerate() {
            if i != last {
                images[db_index(&r.db)].apply(r);
            }
        }
        let mut stats = Stats::default();
        let mut ex = Explorer {
            r: &reference,
            memo: HashMap::new(),
            stats: &mut stats,
        };
        let acked = Before {
            acked: end,
            fired: end,
            app_complete: true,
        };
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ex.visit([&images[0], &images[1], &images[2]], acked, 2, "control")
        }));
        let msg = caught
            .err()
            .and_then(|p| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        assert!(
            msg.contains("acknowledged height"),
            "the {name}'s lost write (acknowledged at {end}) was not rejected: {msg:?}"
        );
    }
}
