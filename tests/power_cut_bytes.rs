//! Byte-level power cuts under redb: the three databases are redb files on a simulated
//! machine (`common::disk`) that keeps a live and a durable image of each file. The run — a
//! fresh open, a deferred sync of 8 light blocks in windows of 4 (two flush points), the
//! switch to consensus and 2 consensus blocks — is cut at every `write`, `set_len` and
//! `sync_data` (counted across the three files: one power source). For each cut, crash
//! images are built with the unsynced ops dropped, kept, and dropped/applied/torn at random
//! (per 512-byte sector; per byte for writes of 512 bytes or less; seeded). redb is reopened
//! over each image, the handshake runs (`Node::open`), the node syncs on to the end, and we
//! assert:
//!
//! * redb opens and the handshake accepts (no refusal, no panic);
//! * nothing acknowledged is lost: the height after the handshake is at least the height
//!   the interrupted run reported durable (`Node::durable_height`) before the cut;
//! * no event fired for a block the crash lost (every event fired before the cut is at or
//!   below the recovered height), and none fires twice across the runs;
//! * the final state (heights, app hash, validators, params) and the app's height and hash
//!   equal the uncut run's.
//!
//! A sample of cuts is cut a second time during recovery (every op of the reopen, sampled),
//! then recovered again. A negative control — `sync_data` that lies — must be detected.
//!
//! CI runs a slice (cuts sampled, 2 random seeds). The full enumeration:
//! `FLUSHPOINT_FULL=1 cargo test --release --test power_cut_bytes -- --nocapture`.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::disk::{Fate, Sim};
use common::{Plan, drive, open_node};
use flushpoint::{AppInfo, Event, HandshakeReport, RedbOptions, State};

/// A small page cache, so that redb also writes pages in the middle of a transaction.
fn options() -> RedbOptions {
    RedbOptions {
        cache_bytes: 64 * 1024,
    }
}

fn full() -> bool {
    std::env::var("FLUSHPOINT_FULL").is_ok_and(|v| v == "1")
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Final {
    state: State,
    app: AppInfo,
}

/// What one run on a machine did before it finished or the power went.
#[derive(Debug)]
struct RunOut {
    /// The height the node had reported durable when it stopped.
    acked: u64,
    events: Vec<Event>,
    report: Option<HandshakeReport>,
    fin: Option<Final>,
    err: Option<String>,
}

/// Opens redb over the machine's disks, the node (handshake), and syncs to the end.
fn run(sim: &Sim, plan: &Plan) -> RunOut {
    let base = plan.spec.initial_height - 1;
    let fired: Arc<Mutex<Vec<Event>>> = Arc::default();
    let mut out = RunOut {
        acked: base,
        events: Vec::new(),
        report: None,
        fin: None,
        err: None,
    };
    let dbs = match sim.open_dbs(&options()) {
        Ok(d) => d,
        Err(e) => {
            out.err = Some(format!("redb open: {e}"));
            return out;
        }
    };
    let f = fired.clone();
    let sink = Box::new(move |e: &Event| f.lock().unwrap().push(e.clone()));
    match open_node(dbs[0].clone(), dbs[1].clone(), dbs[2].clone(), plan, sink) {
        Err(e) => out.err = Some(format!("handshake: {e}")),
        Ok((mut node, report)) => {
            out.report = Some(report);
            out.acked = node.durable_height();
            let r = drive(&mut node, plan);
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

struct Suite {
    plan: Plan,
    want: Final,
    /// Distinct recoveries run (crash images reopened, handshake, sync to the end).
    states: u64,
    seen: HashSet<u64>,
    second_cuts: u64,
}

impl Suite {
    /// Reopens `images` after a crash that happened once the node had acknowledged `acked`
    /// and fired `before`; checks recovery. `second_cut`: cut the recovery at that op too,
    /// then recover from that crash (all fates) as well.
    fn recover(
        &mut self,
        images: Vec<Vec<u8>>,
        acked: u64,
        before: &[Event],
        second_cut: Option<u64>,
        fates: &[Fate],
    ) -> Result<(), String> {
        if second_cut.is_none() && !self.seen.insert(fingerprint(&images, acked, before)) {
            return Ok(());
        }
        self.states += 1;
        let sim = Sim::from_images(&images);
        sim.lock().cut_at = second_cut;
        let plan = self.plan;
        let out = catch_unwind(AssertUnwindSafe(|| run(&sim, &plan)))
            .map_err(|p| format!("panic during recovery: {p:?}"))?;
        if let Some(r) = &out.report
            && r.height < acked
        {
            return Err(format!(
                "acknowledged height {acked} lost: the handshake recovered height {} ({:?})",
                r.height, r.case
            ));
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
        if sim.lock().dead {
            // Cut again during recovery: recover from that crash too.
            self.second_cuts += 1;
            let acked2 = acked.max(out.acked);
            let before2: Vec<Event> = before.iter().chain(out.events.iter()).cloned().collect();
            for &fate in fates {
                let mut images2 = sim.crash_images(fate);
                // A database the recovery was creating (its image was empty) may be cut
                // mid-creation: absent, as atomic creation guarantees.
                discard_half_created(&mut images2, |i| images[i].is_empty());
                self.recover(images2, acked2, &before2, None, fates)
                    .map_err(|e| {
                        format!("after a second cut at op {second_cut:?} ({fate:?}): {e}")
                    })?;
            }
            return Ok(());
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
        Ok(())
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

struct Figures {
    ops: u64,
    cuts: u64,
    states: u64,
    second_cuts: u64,
    failures: Vec<String>,
    /// Crash images of a file redb was creating that redb refuses to open.
    unopenable: u64,
}

/// Cuts the run at sampled ops (all with `cut_stride` 1); returns the figures and every
/// failed check (the caller asserts there are none — or, for the lying disk, some).
fn enumerate(
    initial_height: u64,
    lying: bool,
    cut_stride: u64,
    seeds: u64,
    second_every: u64,
    second_stride: u64,
) -> Figures {
    let plan = Plan::new(initial_height, 2, 2);
    let sim = Sim::new(3);
    let uncut = run(&sim, &plan);
    assert!(uncut.err.is_none(), "uncut run failed: {:?}", uncut.err);
    let ops = sim.lock().ops;
    let want = uncut.fin.unwrap();
    assert_eq!(want.state.last_block_height, plan.end);
    // How many ops a recovery takes (to choose second-cut points): reopen the finished run.
    let recovery_ops = {
        let s2 = Sim::from_images(&sim.durable_images());
        let o = run(&s2, &plan);
        assert!(o.err.is_none());
        s2.lock().ops
    };
    // The op count at which each database's creation (redb's first commit) completed.
    let created_by: Vec<u64> = {
        let s = Sim::new(3);
        (0..3)
            .map(|i| {
                let _db = flushpoint::RedbDb::with_backend("x", s.disk(i), &options()).unwrap();
                s.lock().ops
            })
            .collect()
    };
    let mut fates = vec![Fate::DropAll, Fate::KeepAll];
    fates.extend((0..seeds).map(|s| Fate::Random(0x5eed + s)));
    let mut suite = Suite {
        plan,
        want,
        states: 0,
        seen: HashSet::new(),
        second_cuts: 0,
    };
    let mut failures = Vec::new();
    let mut cuts = 0;
    let mut unopenable = 0;
    for k in (1..=ops).filter(|k| k % cut_stride == 0 || *k == ops) {
        cuts += 1;
        let sim = Sim::new(3);
        {
            let mut m = sim.lock();
            m.cut_at = Some(k);
            m.lying_sync = lying;
        }
        let out = run(&sim, &plan);
        assert!(sim.lock().dead, "cut {k} never happened");
        for &fate in &fates {
            let mut images = sim.crash_images(fate);
            // A cut while redb creates a file can leave a file redb refuses ("not a redb
            // database"): redb's own creation is not atomic, so `RedbDb::open` creates by
            // rename (tests/redb_create_atomic.rs). Nothing was acknowledged yet; count these
            // images and recover from an empty file, as the rename guarantees.
            unopenable += discard_half_created(&mut images, |i| k <= created_by[i]);
            if let Err(e) = suite.recover(images.clone(), out.acked, &out.events, None, &fates) {
                failures.push(format!(
                    "initial {initial_height}, cut at op {k}/{ops}, {fate:?}: {e}"
                ));
                continue;
            }
            if !lying && k % second_every == 0 && fate != Fate::KeepAll {
                for j in (1..=recovery_ops + 8).filter(|j| j % second_stride == 0) {
                    if let Err(e) =
                        suite.recover(images.clone(), out.acked, &out.events, Some(j), &fates[..3])
                    {
                        failures.push(format!(
                            "initial {initial_height}, cut at op {k}/{ops}, {fate:?}, second cut at recovery op {j}: {e}"
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
        failures,
        unopenable,
    }
}

#[test]
fn power_cut_at_every_io_op_under_redb() {
    let t = Instant::now();
    // CI slice: every 3rd op, 2 random seeds; second cut at every 4th recovery op for every
    // 16th cut. Full: every op, 8 seeds, second cut at every recovery op of every 4th cut.
    let (cut_stride, seeds, second_every, second_stride) =
        if full() { (1, 8, 4, 1) } else { (3, 2, 16, 4) };
    let mut heights = BTreeSet::new();
    let (mut states, mut cuts, mut seconds) = (0, 0, 0);
    for initial in [1, 5] {
        let f = enumerate(
            initial,
            false,
            cut_stride,
            seeds,
            second_every,
            second_stride,
        );
        assert!(
            f.failures.is_empty(),
            "{} failures, first: {:#?}",
            f.failures.len(),
            &f.failures[..f.failures.len().min(5)]
        );
        println!(
            "power_cut_bytes: initial height {initial}: {} ops in the run, {} cuts, {} recoveries, {} second cuts, {} images of a file cut during creation that redb refuses",
            f.ops, f.cuts, f.states, f.second_cuts, f.unopenable
        );
        heights.insert(initial);
        states += f.states;
        cuts += f.cuts;
        seconds += f.second_cuts;
    }
    println!(
        "power_cut_bytes: states explored: {states} recoveries ({cuts} cuts, {seconds} second cuts during recovery), full={}, {:.1?}",
        full(),
        t.elapsed()
    );
}

/// The negative control: a disk whose `sync_data` lies (returns `Ok`, persists nothing) must
/// be caught by the same checks — a suite that passes it proves nothing.
#[test]
fn a_lying_fsync_is_detected() {
    let t = Instant::now();
    let f = enumerate(1, true, if full() { 1 } else { 4 }, 0, u64::MAX, 1);
    println!(
        "power_cut_bytes (lying sync_data): {} cuts, {} recoveries, {} detected, {:.1?}",
        f.cuts,
        f.states,
        f.failures.len(),
        t.elapsed()
    );
    assert!(
        f.failures.iter().any(|e| e.contains("acknowledged height")),
        "the lying disk was not detected: {:?}",
        f.failures
    );
}
