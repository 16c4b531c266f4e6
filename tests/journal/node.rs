//! The node on one journal (ADR 0011): the block store, the state and the app are three
//! keyspaces of one `JournalEngine`, so a flush point and a consensus block are each
//! **one unit** — one append, one `sync_data`.
//!
//! - **Power cut at every file-system operation** of a run on `SimFs` — the engine's and
//!   the index's creation, the handshake's genesis, consensus blocks, block sync with flush
//!   points (synchronous, and on the flush thread), the switch to consensus, consensus
//!   blocks, a clean stop — with crash images (unsynced file ops dropped, kept, torn at
//!   random; unsynced directory ops dropped, kept, every subset or prefix). Over each image:
//!   * the journal reopens (a crash never makes a corrupt journal);
//!   * **unit oracle**: the three keyspaces together, read before the node touches them,
//!     equal the uncut run's content at one of its durable points — the genesis, a
//!     consensus block or a flush point — at or above the height the node had acknowledged.
//!     Never the block store's window without the state's, never the app's without both:
//!     the snapshots are taken from the uncut run, not from the engine's bookkeeping;
//!   * the handshake finds it `Fresh` or `Consistent`: a unit home never needs a repair;
//!   * no event fired for a block the crash lost; the node syncs on to the uncut run's
//!     final state.
//! - **fsync counts as numbers**: one `sync_data` per flush point and per consensus block,
//!   nothing else synced between checkpoints; with the app outside the group, the flush
//!   point is one unit and the app's own synced batch after it, and a consensus block takes
//!   the ordered path.
//!
//! Prints `N journal node cut states`. `FLUSHPOINT_FULL=1` adds random fates and seeds;
//! `FLUSHPOINT_SEED=<n>` replays one.

use crate::support;

use std::collections::{BTreeMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::db::collect_range;
use flushpoint::demo::{ChainSpec, DemoChain, KvApp, Profile, State};
use flushpoint::journal::{
    Applier, JournalEngine, JournalOptions, KeyspaceOptions, SEPARATE_VALUES_FROM_BYTES,
};
use flushpoint::testing::{DirFate, SimFs, SimOp};
use flushpoint::{
    Db, Direction, Event, FlushPolicy, HandshakeCase, HoldingDb, KeyRange, MemoryDb, Node,
};
use support::{check_events, file_fates, full};

const DIR: &str = "/data/node/journal";
const KEYSPACES: [&str; 3] = ["block store", "state", "app"];
/// Consensus blocks after the genesis.
const CONSENSUS_FIRST: u64 = 2;
/// Block-synced blocks after them (windows of `WINDOW`).
const SYNCED: u64 = 4;
/// Consensus blocks after the switch.
const CONSENSUS_LAST: u64 = 2;
const END: u64 = CONSENSUS_FIRST + SYNCED + CONSENSUS_LAST;
const WINDOW: u64 = 2;
/// Every subset of pending directory ops is tried up to this many ops.
const SUBSETS_MAX_OPS: usize = 5;
const SEED_DEFAULT: u64 = 0x0a11_0de5;
/// Segment size here. Why: a light block's unit is ~10 KiB, so the run rolls several times.
const SEGMENT_BYTES: u64 = 32 * 1024;

fn spec() -> ChainSpec {
    ChainSpec {
        seed: 0x1f,
        profile: Profile::Light,
        initial_height: 1,
        validator_change_every: 3,
        params_change_every: 0,
        empty_every: 0,
        account_keys: 1 << 20,
    }
}

fn options() -> JournalOptions {
    JournalOptions::default()
        // Inline: one fixed sequence of file operations per run, so cut `k` is one op.
        .with_applier(Applier::Inline)
        .with_index_cache_bytes(64 * 1024)
        // Small prepared segments: the run rolls (a spare prepared and renamed in) a few
        // times, and the simulated disk stays small.
        .with_segment_bytes(SEGMENT_BYTES)
}

fn policy(background: bool) -> FlushPolicy {
    FlushPolicy::default()
        .with_window_blocks_max(Some(WINDOW))
        .with_interval(Duration::from_secs(3600))
        .with_background(background)
}

/// What one run did before it finished or the power went.
#[derive(Debug, Default)]
struct RunOut {
    /// The height the node had acknowledged durable.
    acked: u64,
    events: Vec<Event>,
    /// The handshake's case and the height it opened at.
    opened: Option<(HandshakeCase, u64)>,
    /// The keyspaces' content at every durable point, with its height (uncut runs).
    snapshots: Vec<(u64, u64)>,
    fin: Option<State>,
    err: Option<String>,
}

/// The journal as a journal home opens it: the block store keeps its parts in the journal
/// (ADR 0013), so the units' parts are read back through pointers.
fn open_journal(fs: &SimFs) -> flushpoint::Result<JournalEngine> {
    let engine = JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options())?;
    engine.keyspace_with(
        KEYSPACES[0],
        KeyspaceOptions::separating_values_from(SEPARATE_VALUES_FROM_BYTES),
    )?;
    Ok(engine)
}

/// A node on the journal's three keyspaces, the app on a held store of its own keyspace
/// (so it joins the flush point's unit), no event sink.
fn open_node(engine: &JournalEngine) -> Node<DemoChain> {
    let app_db = engine.keyspace(KEYSPACES[2]).unwrap() as Arc<dyn Db>;
    open_node_with(
        engine,
        KvApp::open(Arc::new(HoldingDb::new(app_db))).unwrap(),
    )
}

/// A node on the journal's block store and state keyspaces, with `app`.
fn open_node_with<D: Db + 'static>(engine: &JournalEngine, app: KvApp<D>) -> Node<DemoChain> {
    let ks = |n: &str| engine.keyspace(n).unwrap() as Arc<dyn Db>;
    let (node, _) = Node::open(
        ks(KEYSPACES[0]),
        ks(KEYSPACES[1]),
        Box::new(app),
        spec().chain(),
        Box::new(flushpoint::NoEvents),
    )
    .unwrap();
    node
}

/// The three keyspaces' content, as one fingerprint (names, keys and values).
fn content(engine: &JournalEngine) -> Result<u64, String> {
    let mut h = DefaultHasher::new();
    for name in KEYSPACES {
        let ks = engine.keyspace(name).map_err(|e| e.to_string())?;
        let all = collect_range(&*ks, KeyRange::all(), Direction::Forward)
            .map_err(|e| format!("read {name}: {e}"))?;
        name.hash(&mut h);
        all.len().hash(&mut h);
        for (k, v) in all {
            k.hash(&mut h);
            v.hash(&mut h);
        }
    }
    Ok(h.finish())
}

/// Opens the journal on `fs`, the node on its three keyspaces, and runs to END: consensus,
/// block sync (window `WINDOW`, on the flush thread when `background`), the switch,
/// consensus, a clean stop. `snapshot`: record the content at every durable point.
fn run(fs: &SimFs, background: bool, snapshot: bool) -> RunOut {
    let mut out = RunOut::default();
    let fired: Arc<Mutex<Vec<Event>>> = Arc::default();
    let r = (|| -> Result<(), String> {
        let engine = open_journal(fs).map_err(|e| format!("journal: {e}"))?;
        let ks = |n: &str| -> Result<Arc<dyn Db>, String> {
            Ok(engine.keyspace(n).map_err(|e| e.to_string())? as Arc<dyn Db>)
        };
        let app = KvApp::open(Arc::new(HoldingDb::new(ks(KEYSPACES[2])?)))
            .map_err(|e| format!("app: {e}"))?;
        let f = fired.clone();
        let sink = Box::new(move |e: &Event| f.lock().unwrap().push(e.clone()));
        let (mut node, report) = Node::open(
            ks(KEYSPACES[0])?,
            ks(KEYSPACES[1])?,
            Box::new(app),
            spec().chain(),
            sink,
        )
        .map_err(|e| format!("handshake: {e}"))?;
        out.opened = Some((report.case, node.height()));
        out.acked = node.durable_height();
        let snap = |out: &mut RunOut, h: u64| -> Result<(), String> {
            if snapshot {
                out.snapshots.push((h, content(&engine)?));
            }
            Ok(())
        };
        snap(&mut out, node.durable_height())?;
        let sync = |e: flushpoint::Error| format!("sync: {e}");
        while node.height() < CONSENSUS_FIRST {
            let (b, p, c) = spec().next_block(node.state());
            node.commit_block(&b, &p, &c).map_err(sync)?;
            out.acked = node.durable_height();
            let h = out.acked;
            snap(&mut out, h)?;
        }
        if node.height() < CONSENSUS_FIRST + SYNCED {
            node.start_block_sync(policy(background), Instant::now())
                .map_err(sync)?;
            while node.height() < CONSENSUS_FIRST + SYNCED {
                let (b, p, c) = spec().next_block(node.state());
                let before = node.durable_height();
                node.sync_block(&b, &p, &c, Instant::now()).map_err(sync)?;
                out.acked = node.durable_height();
                if out.acked != before {
                    let h = out.acked;
                    snap(&mut out, h)?;
                }
            }
            node.switch_to_consensus(Instant::now()).map_err(sync)?;
            out.acked = node.durable_height();
            let h = out.acked;
            snap(&mut out, h)?;
        }
        while node.height() < END {
            let (b, p, c) = spec().next_block(node.state());
            node.commit_block(&b, &p, &c).map_err(sync)?;
            out.acked = node.durable_height();
            let h = out.acked;
            snap(&mut out, h)?;
        }
        let state = node.state().clone();
        node.stop(Instant::now()).map_err(sync)?;
        out.fin = Some(state);
        Ok(())
    })();
    out.events = fired.lock().unwrap().clone();
    out.err = r.err();
    out
}

/// The unit oracle: the recovered content is the uncut run's at one durable point at or
/// above `acked` (or the empty journal, when nothing was acknowledged yet).
fn check_units(got: u64, empty: u64, acked: u64, snapshots: &[(u64, u64)]) -> Result<(), String> {
    if snapshots.iter().any(|(h, c)| *c == got && *h >= acked) {
        return Ok(());
    }
    if got == empty && acked == 0 {
        return Ok(());
    }
    Err(format!(
        "the keyspaces hold no durable point of the uncut run at or above the acknowledged \
         height {acked} (a unit lost, or one partially present)"
    ))
}

struct Oracle {
    snapshots: Vec<(u64, u64)>,
    empty: u64,
    want: State,
}

fn check_recovery(
    img: &SimFs,
    cut: &RunOut,
    background: bool,
    o: &Oracle,
) -> Result<&'static str, String> {
    {
        let engine = JournalEngine::open(Arc::new(img.clone()), Path::new(DIR), options())
            .map_err(|e| format!("journal refused after the cut: {e}"))?;
        check_units(content(&engine)?, o.empty, cut.acked, &o.snapshots)?;
    }
    let again = run(img, background, false);
    if let Some(e) = again.err {
        return Err(format!("recovery: {e}"));
    }
    let (case, recovered) = again.opened.expect("opened");
    if !matches!(case, HandshakeCase::Fresh | HandshakeCase::Consistent) {
        return Err(format!(
            "the handshake found {} at {recovered}: a unit home needed a repair",
            case.name()
        ));
    }
    if recovered < cut.acked {
        return Err(format!(
            "acknowledged height {} lost: recovered at {recovered}",
            cut.acked
        ));
    }
    check_events(&cut.events, &again.events, recovered)?;
    if again.fin.as_ref() != Some(&o.want) {
        return Err("the final state differs from the uncut run's".into());
    }
    Ok(case.name())
}

fn oracle() -> Oracle {
    let uncut = run(&SimFs::new(), false, true);
    assert!(uncut.err.is_none(), "uncut run: {:?}", uncut.err);
    let empty = {
        let fs = SimFs::new();
        let e = JournalEngine::open(Arc::new(fs), Path::new(DIR), options()).unwrap();
        content(&e).unwrap()
    };
    Oracle {
        snapshots: uncut.snapshots,
        empty,
        want: uncut.fin.unwrap(),
    }
}

/// The directory fates tried for a cut with `n` pending directory ops (`support::dir_fates`).
fn dir_fates(n: usize, seed: u64) -> Vec<DirFate> {
    support::dir_fates(n, seed, SUBSETS_MAX_OPS, if full() { 64 } else { 16 })
}

#[test]
fn power_cut_at_every_file_system_op_leaves_whole_units_only() {
    let started = Instant::now();
    let seed = support::seed(SEED_DEFAULT);
    println!("journal_node: FLUSHPOINT_SEED={seed}");
    let o = oracle();
    // The snapshots are distinct points: genesis, 2 consensus blocks, 2 flush points, the
    // switch (nothing left to flush: the same content as the last flush point), 2 more.
    assert!(o.snapshots.len() >= 7, "{:?}", o.snapshots);
    let (mut cuts, mut states, mut past_end) = (0u64, 0u64, 0u64);
    let mut failures = Vec::new();
    let mut cases: BTreeMap<&'static str, u64> = BTreeMap::new();
    for background in [false, true] {
        let total = {
            let fs = SimFs::new();
            let r = run(&fs, background, false);
            assert!(r.err.is_none(), "uncut run: {:?}", r.err);
            assert_eq!(r.fin.as_ref(), Some(&o.want), "uncut final state");
            fs.ops()
        };
        let mut seen = HashSet::new();
        // redb's page writes vary a little between identical runs (a few ops at the
        // index's end): cuts run past the uncut count, and one that finds the run over
        // is counted apart.
        for k in 1..=total + total / 8 {
            let fs = SimFs::new();
            fs.set_cut_at(Some(k));
            let cut = run(&fs, background, false);
            if !fs.is_dead() {
                past_end += 1;
                continue;
            }
            cuts += 1;
            let (op, path) = fs.stats().log[k as usize - 1].clone();
            let n = fs.pending_dir_ops();
            for d in dir_fates(n, seed ^ k) {
                for f in file_fates(seed ^ (k << 20)) {
                    let img = fs.crash_image(d, f);
                    if !seen.insert((img.fingerprint(), cut.acked, cut.events.len())) {
                        continue;
                    }
                    states += 1;
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        check_recovery(&img, &cut, background, &o)
                    }))
                    .unwrap_or_else(|_| Err("panic".into()));
                    match r {
                        Ok(case) => *cases.entry(case).or_default() += 1,
                        Err(e) => failures.push(format!(
                            "background {background}: cut {k}/{total} at {op:?} {}, {d:?} {f:?}, acked {}: {e}",
                            path.display(),
                            cut.acked
                        )),
                    }
                }
            }
        }
    }
    println!(
        "journal_node: {cuts} cuts ({past_end} past the run's end), handshake cases {cases:?}, in {:.1?}",
        started.elapsed()
    );
    println!("{states} journal node cut states");
    assert!(cuts > 400, "most cuts fired: {cuts}");
    for case in ["fresh", "consistent"] {
        assert!(
            cases.contains_key(case),
            "no cut state opened {case}: {cases:?}"
        );
    }
    for f in failures.iter().take(12) {
        println!("FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {states} cut states failed (replay: FLUSHPOINT_SEED={seed})",
        failures.len()
    );
}

#[test]
fn the_unit_oracle_rejects_a_partial_unit_and_a_lost_acknowledged_one() {
    let snapshots = [(0, 10), (1, 11), (3, 13)];
    check_units(11, 9, 1, &snapshots).unwrap();
    check_units(13, 9, 1, &snapshots).unwrap();
    check_units(9, 9, 0, &snapshots).unwrap();
    // A mix no durable point had (a partial unit):
    assert!(check_units(12, 9, 0, &snapshots).is_err());
    // An acknowledged point lost (content of height 1 after 3 was acknowledged):
    assert!(check_units(11, 9, 3, &snapshots).is_err());
    assert!(check_units(9, 9, 1, &snapshots).is_err());
    // And on real content: a journal holding the state's keys without the block store's.
    let o = oracle();
    let fs = SimFs::new();
    let e = JournalEngine::open(Arc::new(fs), Path::new(DIR), options()).unwrap();
    let uncut = run(&SimFs::new(), false, false);
    assert!(uncut.err.is_none());
    let mut b = flushpoint::Batch::new();
    b.put(Bytes::from_static(b"only-state"), Bytes::from_static(b"x"));
    e.keyspace("state")
        .unwrap()
        .write(&b, flushpoint::Durability::Synced)
        .unwrap();
    assert!(check_units(content(&e).unwrap(), o.empty, 0, &o.snapshots).is_err());
}

/// One journal `sync_data` per durable point, stated as numbers.
#[test]
fn one_sync_per_flush_point_and_per_consensus_block() {
    for background in [false, true] {
        let fs = SimFs::new();
        let engine = open_journal(&fs).unwrap();
        let mut node = open_node(&engine);
        // Counted from the file system's own log, not the engine's counters: `sync_data` of
        // a segment; directory fsyncs beyond one per new segment; the index's syncs beyond
        // its growth (redb's file layer syncs once after each `set_len` that grows the
        // index). Spares are prepared and synced off the unit's path (`spare.segment`).
        let syncs = |_: &JournalEngine| -> [u64; 3] {
            let log = fs.stats().log;
            let count = |op: SimOp, file: &dyn Fn(&Path) -> bool| {
                log.iter().filter(|(o, p)| *o == op && file(p)).count() as u64
            };
            let segment = |p: &Path| p.extension().is_some_and(|e| e == "seg");
            let index = |p: &Path| p.ends_with(flushpoint::journal::INDEX_FILE);
            let any = |_: &Path| true;
            [
                count(SimOp::SyncData, &segment),
                // One directory fsync per new segment (a spare renamed in), none else.
                count(SimOp::SyncDir, &any) - count(SimOp::Rename, &segment),
                count(SimOp::SyncData, &index) + count(SimOp::SyncAll, &index)
                    - count(SimOp::SetLen, &index),
            ]
        };
        for i in 1..=3u64 {
            let before = syncs(&engine);
            let (b, p, c) = spec().next_block(node.state());
            node.commit_block(&b, &p, &c).unwrap();
            let after = syncs(&engine);
            assert_eq!(
                [
                    after[0] - before[0],
                    after[1] - before[1],
                    after[2] - before[2]
                ],
                [1, 0, 0],
                "consensus block {i}: one journal sync_data, nothing else"
            );
            assert_eq!(node.durable_height(), i);
        }
        node.start_block_sync(policy(background), Instant::now())
            .unwrap();
        let before = syncs(&engine);
        let units_before = engine.counts().units_written;
        for _ in 0..3 * WINDOW {
            let (b, p, c) = spec().next_block(node.state());
            node.sync_block(&b, &p, &c, Instant::now()).unwrap();
        }
        node.switch_to_consensus(Instant::now()).unwrap();
        let after = syncs(&engine);
        assert_eq!(node.durable_height(), 3 + 3 * WINDOW);
        assert_eq!(
            [
                after[0] - before[0],
                after[1] - before[1],
                after[2] - before[2]
            ],
            [3, 0, 0],
            "3 flush points (background {background}): 3 journal sync_data"
        );
        assert_eq!(engine.counts().units_written - units_before, 3, "3 units");
        for _ in 0..2 {
            let before = syncs(&engine);
            let (b, p, c) = spec().next_block(node.state());
            node.commit_block(&b, &p, &c).unwrap();
            assert_eq!(
                syncs(&engine)[0] - before[0],
                1,
                "consensus after the switch"
            );
        }
        node.stop(Instant::now()).unwrap();
        // The parts were written once: the index points at them in the journal (ADR 0013),
        // and the node's loads of them went through the pointers.
        let c = engine.counts();
        assert!(c.values_kept_in_journal >= 3 + 3 * WINDOW + 2, "{c:?}");
    }
}

/// An app on its own database is not in the group: a flush point is one unit (block store
/// and state) and then the app's own synced batch; consensus blocks take the ordered path.
#[test]
fn an_app_outside_the_group_is_written_after_the_unit() {
    let fs = SimFs::new();
    let engine = open_journal(&fs).unwrap();
    let app_db = Arc::new(flushpoint::db::CountingDb::new(MemoryDb::new("app")));
    let app_counts = app_db.counters();
    let app = KvApp::open(Arc::new(HoldingDb::new(app_db.clone() as Arc<dyn Db>))).unwrap();
    let mut node = open_node_with(&engine, app);
    let j = |e: &JournalEngine| e.counts().journal_sync_data_calls;
    let (j0, a0) = (j(&engine), app_counts.snapshot().synced_batches);
    let (b, p, c) = spec().next_block(node.state());
    node.commit_block(&b, &p, &c).unwrap();
    assert_eq!(
        [j(&engine) - j0, app_counts.snapshot().synced_batches - a0],
        [3, 1],
        "ordered path: block store 1 and state 2 units, the app's own batch"
    );
    node.start_block_sync(policy(false), Instant::now())
        .unwrap();
    let (j0, a0) = (j(&engine), app_counts.snapshot().synced_batches);
    for _ in 0..WINDOW {
        let (b, p, c) = spec().next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    assert_eq!(
        [j(&engine) - j0, app_counts.snapshot().synced_batches - a0],
        [1, 1],
        "a flush point: one unit, then the app"
    );
    node.stop(Instant::now()).unwrap();
}

/// One window in flight, through the journal too (ADR 0015): a background flush point's
/// window stays in flight until the journal has applied it, so the next window freezes only
/// then and the unapplied units never hold more than one window. The applier here never
/// applies on its own (an hour's batching delay and checkpoint interval, an overlay budget
/// nothing reaches): only the flush thread's wait makes it apply. Without that wait every
/// window would stay in the overlay, and the peak would be all of them (the planted check
/// in docs/TESTING.md, "One window in flight").
#[test]
fn a_background_window_is_applied_before_the_next_one_freezes() {
    const WINDOWS: u64 = 8;
    let fs = SimFs::new();
    let options = options()
        .with_applier(Applier::Background)
        .with_apply_batch_delay(Duration::from_secs(3600))
        .with_checkpoint_interval(Duration::from_secs(3600))
        .with_overlay_bytes_max(u64::MAX / 4);
    let engine = JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options).unwrap();
    let mut node = open_node(&engine);
    node.start_block_sync(policy(true), Instant::now()).unwrap();
    let before = engine.counts();
    for _ in 0..WINDOWS * WINDOW {
        let (b, p, c) = spec().next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    node.switch_to_consensus(Instant::now()).unwrap();
    let after = engine.counts();
    let units = after.units_written - before.units_written;
    assert_eq!(units, WINDOWS, "one unit per window");
    let per_window = (after.journal_bytes_written - before.journal_bytes_written) / units;
    // Windows of two light blocks differ by a few per cent; two of them would be 2×.
    assert!(
        after.overlay_bytes_peak < per_window * 3 / 2,
        "the unapplied units held {} bytes at once: more than one window ({per_window} bytes)",
        after.overlay_bytes_peak
    );
    node.stop(Instant::now()).unwrap();
}
