//! fsync (and write, and set_len) failure: an EIO is injected into the n-th `sync_data` —
//! and, in further passes, the n-th `write` and the n-th `set_len` — for every n of a run (a fresh open, a deferred sync of 8
//! blocks in windows of 4, the switch to consensus, 2 consensus blocks), under redb on the
//! simulated machine of `support::disk` (a failed sync leaves the pending writes readable but
//! not durable, as ext4/XFS do). For each n we first prove the fault fired (counted), then:
//!
//! * the engine stops: the call returns `Err` and every later call fails (poisoned);
//! * it never retries an fsync: no `sync_data` reaches any disk after the fault while the
//!   node lives, nor the failed disk when the node and its databases are dropped;
//! * it acknowledges nothing past its last successful sync: `durable_height` never exceeds
//!   what a reopen of the durable images finds;
//! * a failed flush point keeps the overlays it could not write (the failing database's and
//!   those after it hold their writes: `HoldingDb::write_held` drops its overlay only after
//!   the batch is durable);
//! * no event of the failed window fired (every fired event is at or below the acknowledged
//!   height);
//! * a fresh open recovers: the durable images (and the page-cache images) reopen, the
//!   handshake repairs, the node syncs to the end, and the final state and app hash equal
//!   the uncut run's; no event fires twice.
//!
//! CI and full: every `sync_data`, `write` and `set_len` index, from height 1 and 5; the
//! test counts that each injected fault fired exactly once.
//! Full: `FLUSHPOINT_FULL=1 cargo test --release --test db fsync_failure:: -- --nocapture`.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use flushpoint::demo::State;
use flushpoint::{AppInfo, Db, Event, Mode, RedbDb, RedbOptions};
use support::disk::{Fate, Kind, Sim};
use support::full;
use support::plan::{Plan, drive, open_node};

fn options() -> RedbOptions {
    RedbOptions::default().with_cache_bytes(64 * 1024)
}

type Final = (State, AppInfo);

/// Opens the node over `sim` and syncs to the end; returns the final state, the events, the
/// height acknowledged durable, and the handshake's height.
/// Also returns the per-kind call counts when the run finished (before the handles close).
fn run_clean(sim: &Sim, plan: &Plan) -> (Final, Vec<Event>, u64, [u64; 3]) {
    let dbs = sim.open_dbs(&options()).expect("redb opens");
    let fired: Arc<Mutex<Vec<Event>>> = Arc::default();
    let f = fired.clone();
    let sink = Box::new(move |e: &Event| f.lock().unwrap().push(e.clone()));
    let (mut node, report) =
        open_node(dbs[0].clone(), dbs[1].clone(), dbs[2].clone(), plan, sink).expect("handshake");
    drive(&mut node, plan).expect("sync to the end");
    let fin = (node.state().clone(), node.app().committed().unwrap());
    let events = fired.lock().unwrap().clone();
    let counts = sim.lock().kind_counts;
    (fin, events, report.height, counts)
}

struct Figures {
    /// Write faults redb absorbed: the failing `write` returned EIO, yet no call failed and
    /// the node went on (redb rewrote the page later). Reported, and still checked for a
    /// correct result and recovery.
    absorbed: Vec<u64>,
    injected: u64,
    /// Indices tried.
    tried: u64,
    /// Failed flush points whose kept overlays were checked.
    overlays_kept: u64,
    recoveries: u64,
}

fn inject(initial_height: u64, kind: Kind, stride: u64) -> Figures {
    let plan = Plan::new(initial_height, 2, 2);
    let base = initial_height - 1;
    let sim = Sim::new(3);
    // Faults go into the calls the run makes; the calls redb makes when the handles close
    // after it are out of scope.
    let (want, _, _, counts) = run_clean(&sim, &plan);
    let total = counts[kind as usize];
    println!(
        "{kind:?}: {total} calls in the run, {} with the close",
        sim.lock().kind_counts[kind as usize]
    );
    assert!(total > 0);
    let mut figures = Figures {
        absorbed: Vec::new(),
        injected: 0,
        tried: 0,
        overlays_kept: 0,
        recoveries: 0,
    };
    for n in (1..=total).filter(|n| n % stride == 0 || *n == total) {
        figures.tried += 1;
        let ctx = format!("initial {initial_height}, EIO on {kind:?} #{n}/{total}");
        let sim = Sim::new(3);
        sim.lock().fail = Some((kind, n));
        let fired: Arc<Mutex<Vec<Event>>> = Arc::default();
        let mut acked = base;
        let mut created = true;
        match sim.open_dbs(&options()) {
            Err(_) => created = false,
            Ok(dbs) => {
                let f = fired.clone();
                let sink = Box::new(move |e: &Event| f.lock().unwrap().push(e.clone()));
                match open_node(dbs[0].clone(), dbs[1].clone(), dbs[2].clone(), &plan, sink) {
                    Err(_) => {}
                    Ok((mut node, _)) => {
                        let r = drive(&mut node, &plan);
                        if r.is_ok() {
                            // redb absorbed the failed write (see `absorbed`): the node went
                            // on. This is redb's design, not a lost error: a cache-eviction
                            // writeback is best-effort (redb 4.6 `cached_file.rs`,
                            // `Writeback::BestEffort` / `write_best_effort`): the page stays
                            // buffered and the next commit's flush writes it again, failing
                            // that commit if the disk is still bad. Nothing was acknowledged
                            // on the failed write, so the node must have finished correctly,
                            // and the recovery checks below still run on its images.
                            assert!(kind == Kind::Write, "{ctx}: a failed fsync was absorbed");
                            let fin = (node.state().clone(), node.app().committed().unwrap());
                            assert!(fin == want, "{ctx}: absorbed, but the result differs");
                            figures.absorbed.push(n);
                            acked = node.durable_height();
                            drop(node);
                            drop(dbs);
                            continue_checks(
                                &sim,
                                &plan,
                                &want,
                                &ctx,
                                acked,
                                &fired,
                                true,
                                true,
                                &mut figures,
                            );
                            continue;
                        }
                        acked = node.durable_height();
                        // A failed flush point keeps what it could not write: the failing
                        // database's overlay (its `write_held` failed) and those after it
                        // in the order block store → state → app still hold their writes.
                        let failed = sim.lock().faults.first().copied();
                        if node.mode() == Mode::BlockSync
                            && let Some(d) = failed
                        {
                            let held = node.held();
                            for (later, bytes) in held.iter().enumerate().skip(d) {
                                assert!(
                                    *bytes > 0,
                                    "{ctx}: the failed flush point dropped the held writes of database {later} (held {held:?})"
                                );
                            }
                            figures.overlays_kept += 1;
                        }
                        // Poisoned: every later call fails.
                        assert!(drive(&mut node, &plan).is_err(), "{ctx}: not poisoned");
                        assert!(
                            node.on_timer(Instant::now()).is_err(),
                            "{ctx}: not poisoned"
                        );
                        let (b, p, c) = plan.spec.next_block(node.state());
                        assert!(
                            node.commit_block(&b, &p, &c).is_err(),
                            "{ctx}: not poisoned"
                        );
                        let m = sim.lock();
                        let retried: u64 = m.disks.iter().map(|d| d.syncs_after_fault).sum();
                        assert_eq!(retried, 0, "{ctx}: sync_data called after the fault");
                    }
                }
                drop(dbs);
            }
        }
        continue_checks(
            &sim,
            &plan,
            &want,
            &ctx,
            acked,
            &fired,
            created,
            false,
            &mut figures,
        );
    }
    figures
}

#[allow(clippy::too_many_arguments)]
fn continue_checks(
    sim: &Sim,
    plan: &Plan,
    want: &Final,
    ctx: &str,
    acked: u64,
    fired: &Arc<Mutex<Vec<Event>>>,
    created: bool,
    absorbed: bool,
    figures: &mut Figures,
) {
    let failed_disk = {
        let m = sim.lock();
        assert_eq!(
            m.faults.len(),
            1,
            "{ctx}: the fault did not fire exactly once"
        );
        m.faults[0]
    };
    figures.injected += 1;
    assert!(
        absorbed || sim.lock().disks[failed_disk].syncs_after_fault == 0,
        "{ctx}: the failed file was synced again (on close)"
    );
    let before = fired.lock().unwrap().clone();
    if let Some(e) = before.iter().find(|e| e.height > acked) {
        panic!("{ctx}: event {e:?} of the failed window fired (acknowledged {acked})");
    }
    // Recover on a fresh open: from the durable images (the page cache lost), and from
    // the live ones (the page cache kept the unsynced bytes, as ext4/XFS do).
    for fate in [Fate::DropAll, Fate::KeepAll] {
        let mut images = sim.crash_images(fate);
        if !created {
            // The fault hit redb's creation of a file: nothing was acknowledged; a file
            // redb refuses is treated as never created (see power_cut_bytes).
            for img in images.iter_mut() {
                if !img.is_empty()
                    && RedbDb::with_backend(
                        "x",
                        Sim::from_images(std::slice::from_ref(img)).disk(0),
                        &options(),
                    )
                    .map(|d| Arc::new(d) as Arc<dyn Db>)
                    .is_err()
                {
                    img.clear();
                }
            }
        }
        let s2 = Sim::from_images(&images);
        let (fin, after, recovered, _) = run_clean(&s2, plan);
        figures.recoveries += 1;
        assert!(
            recovered >= acked,
            "{ctx}, {fate:?}: acknowledged {acked} but a reopen finds {recovered}"
        );
        assert!(
            fin == *want,
            "{ctx}, {fate:?}: final state differs from the uncut run"
        );
        let mut all: Vec<String> = before
            .iter()
            .chain(&after)
            .map(|e| format!("{e:?}"))
            .collect();
        let n_all = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n_all, "{ctx}, {fate:?}: an event fired twice");
    }
}

#[test]
fn eio_on_every_sync_data_write_and_set_len() {
    let t = Instant::now();
    let (mut injected, mut recoveries, mut kept) = (0, 0, 0);
    for initial in [1, 5] {
        for kind in [Kind::Sync, Kind::Write, Kind::SetLen] {
            let f = inject(initial, kind, 1);
            assert_eq!(
                f.injected, f.tried,
                "initial {initial}, {kind:?}: a fault did not fire"
            );
            println!(
                "fsync_failure: initial height {initial}: {kind:?}: {} indices, {} faults injected (each fired once), {} recoveries, {} absorbed by redb without an error: {:?}",
                f.tried,
                f.injected,
                f.recoveries,
                f.absorbed.len(),
                f.absorbed
            );
            injected += f.injected;
            recoveries += f.recoveries;
            kept += f.overlays_kept;
        }
    }
    assert!(
        kept > 0,
        "no failed flush point was checked for its overlays"
    );
    println!(
        "fsync_failure: states explored: {injected} faults, {recoveries} recoveries, {kept} failed flush points kept their overlays, full={}, {:.1?}",
        full(),
        t.elapsed()
    );
}
