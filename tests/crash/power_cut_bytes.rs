//! Byte-level power cuts under redb: the three databases are redb files on a simulated
//! machine (`support::disk`) that keeps a live and a durable image of each file. The run — a
//! fresh open, a deferred sync of 8 light blocks in windows of 4 (two flush points), the
//! switch to consensus and 2 consensus blocks — is cut at every `write`, `set_len` and
//! `sync_data` (counted across the three files: one power source). For each cut, crash
//! images are built with the unsynced ops dropped, kept, and (per disk, from each disk's own
//! RNG) dropped/applied/torn at random (per 512-byte sector; per byte for writes of 512
//! bytes or less). redb is reopened over each image, the handshake runs (`Node::open`), the
//! node syncs on to the end, and we assert:
//!
//! * redb opens and the handshake accepts (no refusal, no panic);
//! * nothing acknowledged is lost: before the handshake, each database on disk (block
//!   store, state, app) is at least at the height the interrupted run reported durable
//!   (`Node::durable_height`) before the cut; after it, the recovered height is at least
//!   that, and the node's state and the app's durable height and hash equal the uncut run's
//!   at the recovered height;
//! * no event fired for a block the crash lost (every event fired before the cut is at or
//!   below the recovered height), and none fires twice across the runs;
//! * the final state (heights, app hash, validators, params) and the app's height and hash
//!   equal the uncut run's.
//!
//! Recovery is cut too: for a sample of first cuts, each recovery is first run uncut to
//! measure its *own* op count (the handshake's, and the whole recovery's to the end), then
//! cut at every op of that span (strided in CI), and each of those crashes recovered again.
//!
//! Negative control: `sync_data` lies (returns `Ok`, persists nothing) from op N on, on one
//! database alone, with N the first op of each flush point and consensus commit in turn; the
//! run is cut at every later op (strided in CI). Each case must be caught by the
//! acknowledged-height check, be refused by the handshake, or recover to at least the
//! acknowledged height; the test prints the three counts and requires a detection by the
//! acknowledged-height check on every database.
//!
//! CI runs a slice (cuts sampled, 2 random seeds). The full enumeration:
//! `FLUSHPOINT_FULL=1 cargo test --release --test crash power_cut_bytes:: -- --nocapture`.
//! `FLUSHPOINT_SEED=<n>` replays the random fates of a printed seed.

use crate::support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use flushpoint::demo::{KvApp, State};
use flushpoint::store::{BlockStore, StateStore};
use flushpoint::{App, AppInfo, Event, HandshakeReport, HoldingDb, Node, RedbOptions};
use support::disk::{Fate, Lie, Sim};
use support::full;
use support::plan::{Plan, drive_observed, open_node};

/// A small page cache, so that redb also writes pages in the middle of a transaction.
fn options() -> RedbOptions {
    RedbOptions::default().with_cache_bytes(64 * 1024)
}

const NAMES: [&str; 3] = ["block store", "state", "app"];

#[derive(Debug, Clone, PartialEq, Eq)]
struct Final {
    state: State,
    app: AppInfo,
}

/// What one run on a machine did before it finished or the power went.
#[derive(Debug, Default)]
struct RunOut {
    /// The height the node had reported durable when it stopped.
    acked: u64,
    events: Vec<Event>,
    /// Heights on disk before the handshake (block store, state, app; empty = base).
    on_disk: Option<[u64; 3]>,
    report: Option<HandshakeReport>,
    /// Right after the handshake: the node's state and the app's durable info.
    after_handshake: Option<(State, AppInfo)>,
    /// Ops when the handshake returned.
    handshake_ops: Option<u64>,
    /// `(ops, durable_height, state, app committed)` after the handshake and each later call.
    steps: Vec<(u64, u64, State, AppInfo)>,
    /// Ops when the run ended (its databases closed).
    ops: u64,
    fin: Option<Final>,
    err: Option<String>,
}

/// Reads each database's height as stored, without the handshake.
fn heights_on_disk(dbs: &[Arc<dyn flushpoint::Db>], base: u64) -> flushpoint::Result<[u64; 3]> {
    let norm = |h: u64| h.max(base);
    let b = BlockStore::<flushpoint::demo::Block>::open(dbs[0].clone())?.height();
    let s = StateStore::<flushpoint::demo::DemoChain>::open(dbs[1].clone())
        .load_state()?
        .map_or(0, |s| s.last_block_height);
    let a = KvApp::open(Arc::new(HoldingDb::new(dbs[2].clone())))?
        .durable()?
        .height;
    Ok([norm(b), norm(s), norm(a)])
}

/// Opens redb over the machine's disks, the node (handshake), and syncs to the end.
fn run(sim: &Sim, plan: &Plan) -> RunOut {
    let base = plan.spec.initial_height - 1;
    let fired: Arc<Mutex<Vec<Event>>> = Arc::default();
    let mut out = RunOut {
        acked: base,
        ..RunOut::default()
    };
    {
        let dbs = match sim.open_dbs(&options()) {
            Ok(d) => d,
            Err(e) => {
                out.err = Some(format!("redb open: {e}"));
                out.ops = sim.lock().ops;
                return out;
            }
        };
        match heights_on_disk(&dbs, base) {
            Ok(h) => out.on_disk = Some(h),
            Err(e) => out.err = Some(format!("reading heights: {e}")),
        }
        let f = fired.clone();
        let sink = Box::new(move |e: &Event| f.lock().unwrap().push(e.clone()));
        match open_node(dbs[0].clone(), dbs[1].clone(), dbs[2].clone(), plan, sink) {
            Err(e) => out.err = Some(format!("handshake: {e}")),
            Ok((mut node, report)) => {
                let ops = sim.lock().ops;
                out.handshake_ops = Some(ops);
                out.report = Some(report);
                out.acked = node.durable_height();
                out.after_handshake = Some((node.state().clone(), node.app().durable().unwrap()));
                let mut steps = Vec::new();
                let mut step = |n: &Node<flushpoint::demo::DemoChain>| {
                    steps.push((
                        sim.lock().ops,
                        n.durable_height(),
                        n.state().clone(),
                        n.app().committed().unwrap(),
                    ))
                };
                step(&node);
                let r = drive_observed(&mut node, plan, &mut step);
                out.steps = steps;
                out.acked = node.durable_height();
                match r {
                    Ok(()) => {
                        out.fin = Some(Final {
                            state: node.state().clone(),
                            app: node.app().committed().unwrap(),
                        })
                    }
                    Err(e) => out.err = Some(format!("sync: {e}")),
                }
            }
        }
    }
    out.ops = sim.lock().ops;
    out.events = fired.lock().unwrap().clone();
    out
}

fn fingerprint(images: &[Vec<u8>], acked: u64, events: &[Event]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    images.hash(&mut h);
    acked.hash(&mut h);
    format!("{events:?}").hash(&mut h);
    h.finish()
}

/// The recovery's own op counts, measured on its uncut run.
#[derive(Debug, Clone, Copy)]
struct Span {
    handshake_ops: u64,
    ops: u64,
}

struct Suite {
    plan: Plan,
    want: Final,
    /// The uncut run's state and app info at each height.
    at_height: BTreeMap<u64, (State, AppInfo)>,
    /// Distinct recoveries run (crash images reopened, handshake, sync to the end).
    states: u64,
    seen: HashMap<u64, Result<Span, String>>,
    second_cuts: u64,
    /// Second cuts that fell inside the recovery's handshake.
    second_cuts_in_handshake: u64,
}

impl Suite {
    /// Reopens `images` after a crash that happened once the node had acknowledged `acked`
    /// and fired `before`; checks recovery; returns the recovery's op counts. `second_cut`:
    /// cut the recovery at that op too, then recover from that crash (all `fates`) as well.
    fn recover(
        &mut self,
        images: Vec<Vec<u8>>,
        acked: u64,
        before: &[Event],
        second_cut: Option<u64>,
        fates: &[Fate],
    ) -> Result<Span, String> {
        let fp = fingerprint(&images, acked, before);
        if second_cut.is_none()
            && let Some(r) = self.seen.get(&fp)
        {
            return r.clone();
        }
        let r = self.recover_once(images, acked, before, second_cut, fates);
        if second_cut.is_none() {
            self.seen.insert(fp, r.clone());
        }
        r
    }

    fn recover_once(
        &mut self,
        images: Vec<Vec<u8>>,
        acked: u64,
        before: &[Event],
        second_cut: Option<u64>,
        fates: &[Fate],
    ) -> Result<Span, String> {
        self.states += 1;
        let sim = Sim::from_images(&images);
        sim.lock().cut_at = second_cut;
        let plan = self.plan;
        let out = catch_unwind(AssertUnwindSafe(|| run(&sim, &plan)))
            .map_err(|p| format!("panic during recovery: {p:?}"))?;
        // Nothing acknowledged is missing on any database, before the handshake touches it.
        if let Some(on_disk) = out.on_disk {
            for (i, h) in on_disk.into_iter().enumerate() {
                if h < acked {
                    return Err(format!(
                        "acknowledged height {acked} lost: on disk the {} is at {h}",
                        NAMES[i]
                    ));
                }
            }
        }
        if let Some(r) = &out.report
            && r.height < acked
        {
            return Err(format!(
                "acknowledged height {acked} lost: the handshake recovered height {} ({:?})",
                r.height, r.case
            ));
        }
        if let (Some(r), Some((state, app))) = (&out.report, &out.after_handshake) {
            let want = self.at_height.get(&r.height);
            if want != Some(&(state.clone(), *app)) {
                return Err(format!(
                    "after the handshake (height {}, {:?}) the state or the app's durable commit differs from the uncut run's at that height",
                    r.height, r.case
                ));
            }
        }
        let mut all: Vec<&Event> = before.iter().chain(out.events.iter()).collect();
        if let Some(r) = &out.report
            && let Some(e) = before.iter().find(|e| e.height > r.height)
        {
            return Err(format!(
                "event {e:?} fired before the cut, but the crash lost its block (recovered height {})",
                r.height
            ));
        }
        let n = all.len();
        all.sort_by_key(|e| format!("{e:?}"));
        all.dedup_by_key(|e| format!("{e:?}"));
        if all.len() != n {
            return Err("an event fired twice".into());
        }
        let span = Span {
            handshake_ops: out.handshake_ops.unwrap_or(out.ops),
            ops: out.ops,
        };
        if sim.lock().dead {
            // Cut again during recovery: recover from that crash too.
            self.second_cuts += 1;
            if out.handshake_ops.is_none() {
                self.second_cuts_in_handshake += 1;
            }
            let acked2 = acked.max(out.acked);
            let before2: Vec<Event> = before.iter().chain(out.events.iter()).cloned().collect();
            let opened = sim.lock().opened_at.len();
            for &fate in fates {
                let mut images2 = sim.crash_images(fate);
                // A database the recovery was creating (its image was empty, and the cut came
                // before its open returned) may be cut mid-creation: absent, as atomic
                // creation guarantees.
                discard_half_created(&mut images2, |i| images[i].is_empty() && i >= opened);
                self.recover(images2, acked2, &before2, None, fates)
                    .map_err(|e| {
                        format!("after a second cut at op {second_cut:?} ({fate:?}): {e}")
                    })?;
            }
            return Ok(span);
        }
        if let Some(e) = out.err {
            return Err(format!("recovery failed: {e}"));
        }
        if out.fin.as_ref() != Some(&self.want) {
            return Err(format!(
                "final state differs from the uncut run: got {:?}, want {:?}",
                out.fin.map(|f| (f.state.last_block_height, f.app)),
                (self.want.state.last_block_height, self.want.app)
            ));
        }
        Ok(span)
    }
}

/// Models `RedbDb::open`'s atomic creation (temporary name, sync, rename): a file whose
/// creation a cut interrupted is never seen under its real name. The simulated disks open
/// redb straight on the image, so an image of a file that was being created (`creating(i)`)
/// and that redb refuses is treated as absent. Returns how many images were discarded.
fn discard_half_created(images: &mut [Vec<u8>], creating: impl Fn(usize) -> bool) -> u64 {
    let mut n = 0;
    for (i, img) in images.iter_mut().enumerate() {
        if creating(i)
            && !img.is_empty()
            && flushpoint::RedbDb::with_backend(
                "x",
                Sim::from_images(std::slice::from_ref(img)).disk(0),
                &options(),
            )
            .is_err()
        {
            n += 1;
            img.clear();
        }
    }
    n
}

/// The uncut run on a fresh machine, and the suite that checks recoveries against it.
struct Uncut {
    ops: u64,
    /// Ops when each database's creation finished (handles alive, as in the run).
    created_by: Vec<u64>,
    /// `(ops, durable_height)` after the handshake and after each later node call.
    steps: Vec<(u64, u64)>,
    suite: Suite,
}

fn uncut(initial_height: u64) -> Uncut {
    let plan = Plan::new(initial_height, 2, 2);
    let sim = Sim::new(3);
    let out = run(&sim, &plan);
    assert!(out.err.is_none(), "uncut run failed: {:?}", out.err);
    let want = out.fin.unwrap();
    assert_eq!(want.state.last_block_height, plan.end);
    let created_by = sim.lock().opened_at.clone();
    assert_eq!(created_by.len(), 3);
    let mut at_height = BTreeMap::new();
    for (_, _, s, a) in &out.steps {
        at_height.insert(s.last_block_height, (s.clone(), *a));
    }
    Uncut {
        ops: out.ops,
        created_by,
        steps: out.steps.iter().map(|(o, d, _, _)| (*o, *d)).collect(),
        suite: Suite {
            plan,
            want,
            at_height,
            states: 0,
            seen: HashMap::new(),
            second_cuts: 0,
            second_cuts_in_handshake: 0,
        },
    }
}

/// Cuts the run at `k` on a fresh machine (with `lie`, if any).
fn cut_run(plan: &Plan, k: u64, lie: Option<Lie>) -> (Sim, RunOut) {
    let sim = Sim::new(3);
    {
        let mut m = sim.lock();
        m.cut_at = Some(k);
        m.lie = lie;
    }
    let out = run(&sim, plan);
    (sim, out)
}

struct Figures {
    ops: u64,
    cuts: u64,
    states: u64,
    second_cuts: u64,
    second_cuts_in_handshake: u64,
    /// Recoveries whose own span was cut: (count, min/max handshake ops, min/max ops).
    spans: (u64, u64, u64, u64, u64),
    failures: Vec<String>,
    /// Crash images of a file redb was creating that redb refuses to open.
    unopenable: u64,
}

/// Cuts the run at sampled ops (all with `cut_stride` 1); every `second_every`-th cut's
/// recoveries are cut again at every `second_stride`-th op of their own span. Returns the
/// figures and every failed check.
fn enumerate(
    initial_height: u64,
    seed: u64,
    cut_stride: u64,
    seeds: u64,
    second_every: u64,
    second_stride: u64,
) -> Figures {
    let Uncut {
        ops,
        created_by,
        mut suite,
        ..
    } = uncut(initial_height);
    let plan = suite.plan;
    let mut fates = vec![Fate::DropAll, Fate::KeepAll];
    fates.extend((0..seeds).map(|s| Fate::Random(seed.wrapping_add(s))));
    // A second cut's crash is recovered with the pages dropped, kept, and one random fate.
    let second = &fates[..3.min(fates.len())].to_vec();
    let mut failures = Vec::new();
    let mut cuts = 0;
    let mut unopenable = 0;
    let mut spans = (0, u64::MAX, 0, u64::MAX, 0);
    for k in (1..=ops).filter(|k| k % cut_stride == 0 || *k == ops) {
        cuts += 1;
        let (sim, out) = cut_run(&plan, k, None);
        assert!(sim.lock().dead, "cut {k} never happened");
        for &fate in &fates {
            let mut images = sim.crash_images(fate);
            // A cut while redb creates a file can leave a file redb refuses ("not a redb
            // database"): redb's own creation is not atomic, so `RedbDb::open` creates by
            // rename (tests/db/redb_create_atomic.rs). Nothing was acknowledged yet; count these
            // images and recover from an empty file, as the rename guarantees.
            unopenable += discard_half_created(&mut images, |i| k <= created_by[i]);
            let span = match suite.recover(images.clone(), out.acked, &out.events, None, &fates) {
                Ok(s) => s,
                Err(e) => {
                    failures.push(format!(
                        "initial {initial_height}, cut at op {k}/{ops}, {fate:?}: {e}"
                    ));
                    continue;
                }
            };
            if k % second_every == 0 && fate != Fate::KeepAll {
                // This recovery's own span: its handshake and its whole run to the end.
                spans.0 += 1;
                spans.1 = spans.1.min(span.handshake_ops);
                spans.2 = spans.2.max(span.handshake_ops);
                spans.3 = spans.3.min(span.ops);
                spans.4 = spans.4.max(span.ops);
                for j in (1..=span.ops).filter(|j| j % second_stride == 0 || *j == span.ops) {
                    if let Err(e) =
                        suite.recover(images.clone(), out.acked, &out.events, Some(j), second)
                    {
                        failures.push(format!(
                            "initial {initial_height}, cut at op {k}/{ops}, {fate:?}, second cut at recovery op {j}/{}: {e}", span.ops
                        ));
                    }
                }
            }
        }
    }
    Figures {
        ops,
        cuts,
        states: suite.states,
        second_cuts: suite.second_cuts,
        second_cuts_in_handshake: suite.second_cuts_in_handshake,
        spans,
        failures,
        unopenable,
    }
}

#[test]
fn power_cut_at_every_io_op_under_redb() {
    let t = Instant::now();
    let seed = support::seed_printed("power_cut_bytes", support::SEED_DEFAULT);
    // CI slice: every 3rd op, 2 random seeds; every 16th cut's recoveries cut again at every
    // 4th op of their own span. Full: every op, 8 seeds; every 16th cut's recoveries cut
    // again at every op of their span.
    let (cut_stride, seeds, second_every, second_stride) =
        if full() { (1, 8, 16, 1) } else { (3, 2, 16, 4) };
    let mut heights = BTreeSet::new();
    let (mut states, mut cuts, mut seconds, mut in_hs) = (0, 0, 0, 0);
    for initial in [1, 5] {
        let f = enumerate(
            initial,
            seed,
            cut_stride,
            seeds,
            second_every,
            second_stride,
        );
        assert!(
            f.failures.is_empty(),
            "seed {seed}: {} failures, first: {:#?}",
            f.failures.len(),
            &f.failures[..f.failures.len().min(5)]
        );
        println!(
            "power_cut_bytes: initial height {initial}: {} ops in the run, {} cuts, {} recoveries, {} images of a file cut during creation that redb refuses",
            f.ops, f.cuts, f.states, f.unopenable
        );
        println!(
            "power_cut_bytes: initial height {initial}: {} recoveries cut again over their own span (handshake {}..={} ops, whole recovery {}..={} ops): {} second cuts, {} inside the handshake",
            f.spans.0,
            f.spans.1,
            f.spans.2,
            f.spans.3,
            f.spans.4,
            f.second_cuts,
            f.second_cuts_in_handshake
        );
        // A second cut range taken from a consistent reopen would end near the handshake's
        // 50 ops; the repairing recoveries run past that, and their late ops are cut too.
        assert!(
            f.spans.0 > 0 && f.spans.4 > f.spans.2,
            "no recovery span measured"
        );
        assert!(
            f.second_cuts_in_handshake > 0,
            "no second cut in a handshake"
        );
        heights.insert(initial);
        states += f.states;
        cuts += f.cuts;
        seconds += f.second_cuts;
        in_hs += f.second_cuts_in_handshake;
    }
    println!(
        "power_cut_bytes: states explored: {states} recoveries ({cuts} cuts, {seconds} second cuts during recovery, {in_hs} inside a handshake), full={}, {:.1?}",
        full(),
        t.elapsed()
    );
}

/// The negative control: a disk whose `sync_data` lies (returns `Ok`, persists nothing) from
/// the first op of one flush point (or consensus commit) on, on one database alone. Each
/// such run is cut at every later op (and once after the end); every lie must be caught by
/// the acknowledged-height check, be refused by the handshake with an error (the lie broke
/// the write order: a state durable above a block store that lost its window, or an app
/// commit whose results the state lost), or recover to at least
/// the acknowledged height, and the check must catch a lie on each database — a suite that passes a lying disk proves nothing.
#[test]
fn a_lying_fsync_is_detected() {
    let t = Instant::now();
    let stride = if full() { 1 } else { 3 };
    let Uncut {
        ops,
        created_by,
        steps,
        mut suite,
    } = uncut(1);
    let plan = suite.plan;
    // N: the first op of each node call that raised the durable height.
    let lie_from: Vec<(u64, u64)> = steps
        .windows(2)
        .filter(|w| w[1].1 > w[0].1)
        .map(|w| (w[0].0 + 1, w[1].1))
        .collect();
    assert_eq!(
        lie_from.len(),
        4,
        "two flush points and two consensus commits"
    );
    let (mut detected, mut refused, mut harmless, mut cuts) = ([0u64; 3], [0u64; 3], [0u64; 3], 0);
    let mut other = Vec::new();
    for &(from_op, durable) in &lie_from {
        for disk in 0..3 {
            let lie = Lie {
                disk: Some(disk),
                from_op,
            };
            for k in (from_op..=ops + 1).filter(|k| (k - from_op) % stride == 0 || *k > ops) {
                cuts += 1;
                let (sim, out) = cut_run(&plan, k, Some(lie));
                let mut images = sim.crash_images(Fate::DropAll);
                discard_half_created(&mut images, |i| k <= created_by[i]);
                match suite.recover(images, out.acked, &out.events, None, &[Fate::DropAll]) {
                    Ok(_) => harmless[disk] += 1,
                    Err(e) if e.contains("acknowledged height") => detected[disk] += 1,
                    // The lie broke the crash order (the state durable above a block store
                    // that lost its window; the app committed a block whose results the
                    // state lost): the handshake stops with a typed error rather than guess.
                    Err(e) if e.starts_with("recovery failed: handshake:") => refused[disk] += 1,
                    Err(e) => other.push(format!(
                        "{} lies from op {from_op} (flush to {durable}), cut at {k}: {e}",
                        NAMES[disk]
                    )),
                }
            }
        }
    }
    println!(
        "power_cut_bytes (lying sync_data): {} lies ({} flush points and commits × 3 databases), {cuts} cuts, {} detected by the acknowledged-height check {detected:?}, {} stopped by a handshake error {refused:?}, {} harmless (recovered ≥ acknowledged) {harmless:?}, {} other failures, {:.1?}",
        lie_from.len() * 3,
        lie_from.len(),
        detected.iter().sum::<u64>(),
        refused.iter().sum::<u64>(),
        harmless.iter().sum::<u64>(),
        other.len(),
        t.elapsed()
    );
    assert!(
        other.is_empty(),
        "a lie was neither caught by the acknowledged-height check nor harmless: {:#?}",
        &other[..other.len().min(5)]
    );
    for (disk, n) in detected.iter().enumerate() {
        assert!(*n > 0, "a lying {} was never detected", NAMES[disk]);
    }
}
