//! Power cuts at every file-system operation of a rollback: a home on a simulated file system
//! (`SimFs`) syncs `TOP` blocks in consensus, then `flushpoint::rollback` lowers it to a
//! target — the intent file's create, write, fsync, rename and directory fsync, the app's
//! undo batch, the intent's rewrite, the block store's and the state's batches, the intent's
//! removal — and the power is cut at each of them (every op of the rollback's own opens
//! too). Targets: `TOP − 3` (three blocks, the app rolls back with its undo log) and
//! `TOP − 1` (one block: the shape where a block store left one above a lowered state is
//! what the handshake would re-apply).
//!
//! For each cut, crash images as in `power_cut_files.rs`: unsynced file ops dropped, kept
//! and dropped/applied/torn at random (seeded); every subset of the pending directory entry
//! ops and every ordered-journal prefix. Over each image, two recoveries, each on its own
//! copy:
//!
//! * open: `Home::open_on` either refuses with `Error::RollbackInterrupted` naming the target,
//!   or opens a home whose three databases equal, key for key, those of a home that synced
//!   straight to the target (the rollback finished) or of the home before the rollback (it
//!   never started); no intent file is left; and the handshake then finds it `Consistent`
//!   at that height: nothing replayed, nothing re-applied;
//! * rerun: the same rollback, rerun, succeeds, and the home then opens equal, key for key,
//!   to the home that synced straight to the target, and the handshake finds it consistent.
//!
//! The oracle is the straight-synced home: built by the forward path only, it knows nothing
//! of undo logs or intents. The chain changes validators and params, so the state's history
//! is exercised; `TOP` is within the app's undo window, so even the undo records match.
//!
//! The recoveries are cut too: an open that finishes a rollback interrupted in its stores
//! step, and a rerun from one interrupted in its app step, are each cut at every op and
//! their images checked the same way.
//!
//! Prints `N rollback cut states, 0 failures`. `FLUSHPOINT_FULL=1` adds 4 more file seeds;
//! replay one seed with `FLUSHPOINT_SEED=<n>`.

use crate::support;

use std::collections::{BTreeMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use flushpoint::demo::UNDO_RETENTION_BLOCKS;
use flushpoint::fs::FileSystem;
use flushpoint::home::ROLLBACK_INTENT_FILE;
use flushpoint::testing::{DirFate, FileFate, SimFs};
use flushpoint::{Db, Error, HandshakeCase, Home, NoEvents, Node};
use support::file_fates;
use support::rollback_home::{Dump, app_of, dump_home, home, options, spec, synced_to};

/// The height the home is synced to before the rollback.
const TOP: u64 = 6;
/// The rollback targets swept.
const TARGETS: [u64; 2] = [TOP - 3, TOP - 1];
/// Every subset of pending directory ops is tried up to this many ops.
const SUBSETS_MAX_OPS: usize = 6;
/// The default seed of the random fates (`FLUSHPOINT_SEED` overrides it).
const SEED_DEFAULT: u64 = 0x0b0b_5eed;

// The oracle compares undo records too: every block must be inside the undo window.
const _: () = assert!(TOP <= UNDO_RETENTION_BLOCKS);

fn seed() -> u64 {
    support::seed(SEED_DEFAULT)
}

/// The contents of a home that was never rolled back, at `height`.
fn reference(height: u64) -> Dump {
    let fs = synced_to(height);
    let home = Home::open_on(Arc::new(fs), &home(), &options()).unwrap();
    dump_home(&home).unwrap()
}

/// The first key where two dumps differ, for messages.
fn diff(got: &Dump, want: &Dump) -> String {
    for (i, name) in ["block store", "state", "app"].iter().enumerate() {
        let key = got[i]
            .iter()
            .zip(want[i].iter())
            .find(|(a, b)| a != b)
            .map(|(a, _)| a.0.clone());
        if got[i] != want[i] {
            return format!(
                "{name}: {} keys vs {} expected, first difference near {:?}",
                got[i].len(),
                want[i].len(),
                key.map(|k| flushpoint::codec::hex(&k))
            );
        }
    }
    "no difference".into()
}

/// Runs the rollback to `to` on `fs`.
fn run_rollback(fs: &SimFs, to: u64) -> Result<(), String> {
    let home = Home::open_for_rollback_on(Arc::new(fs.clone()), &home(), &options())
        .map_err(|e| format!("open for rollback: {e}"))?;
    let mut app = app_of(&home).map_err(|e| format!("app: {e}"))?;
    flushpoint::rollback(&home, &mut app, &spec().chain(), to)
        .map(|_| ())
        .map_err(|e| format!("rollback: {e}"))
}

/// What the open recovery found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opened {
    /// Refused with `RollbackInterrupted` naming the target and the step it names.
    Refused { step: &'static str },
    /// Opened, consistent at this height.
    At(u64),
}

/// `Home::open_on` finishes or refuses; a home it opens is one of the two allowed ones, and
/// the handshake accepts it as consistent (nothing replayed or re-applied).
fn check_open(img: &SimFs, to: u64, want: &Refs) -> Result<Opened, String> {
    let height = {
        let home = match Home::open_on(Arc::new(img.clone()), &home(), &options()) {
            Err(Error::RollbackInterrupted { to: t, step, .. }) if t == to => {
                return Ok(Opened::Refused { step });
            }
            Err(e) => {
                return Err(format!(
                    "open: neither opened nor refused as interrupted: {e}"
                ));
            }
            Ok(h) => h,
        };
        if img
            .exists(&home.path().join(ROLLBACK_INTENT_FILE))
            .unwrap_or(true)
        {
            return Err("open: the home opened with its rollback intent still there".into());
        }
        let got = dump_home(&home)?;
        let height = if got == want.target {
            to
        } else if got == want.top {
            TOP
        } else {
            return Err(format!(
                "open: the home is neither the target's nor the original: {} / {}",
                diff(&got, &want.target),
                diff(&got, &want.top)
            ));
        };
        let (node, report) = Node::open(
            home.block_store_db.clone(),
            home.state_db.clone(),
            Box::new(app_of(&home).map_err(|e| format!("app: {e}"))?),
            spec().chain(),
            Box::new(NoEvents),
        )
        .map_err(|e| format!("handshake refused an opened home: {e}"))?;
        if report.case != HandshakeCase::Consistent || report.height != height {
            return Err(format!(
                "handshake: {} at {} on a home at {height} (a rollback undone or re-applied)",
                report.case.name(),
                report.height
            ));
        }
        node.stop(Instant::now())
            .map_err(|e| format!("stop: {e}"))?;
        height
    };
    Ok(Opened::At(height))
}

/// Rerunning the rollback finishes it: the home opens at the target, consistent.
fn check_rerun(img: &SimFs, to: u64, want: &Refs) -> Result<(), String> {
    run_rollback(img, to).map_err(|e| format!("rerun: {e}"))?;
    match check_open(img, to, want)? {
        Opened::At(h) if h == to => Ok(()),
        other => Err(format!(
            "after the rerun the home is {other:?}, not at {to}"
        )),
    }
}

struct Refs {
    target: Dump,
    top: Dump,
}

#[derive(Debug, Default)]
struct Sweep {
    cuts: u64,
    cuts_by_op: BTreeMap<String, u64>,
    states: u64,
    refused: u64,
    opened_at_target: u64,
    opened_untouched: u64,
    failures: Vec<String>,
}

fn caught(r: std::thread::Result<Result<(), String>>) -> Result<(), String> {
    r.unwrap_or_else(|p| {
        Err(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        ))
    })
}

/// Every check on one crash image: open (on one copy) and rerun (on another).
fn check_image(img: &SimFs, to: u64, want: &Refs, out: &mut Sweep) -> Result<(), String> {
    let copy = img.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    match catch_unwind(AssertUnwindSafe(|| check_open(&copy, to, want))) {
        // Refused only in the app step: the store steps need no app, so an open finishes them.
        Ok(Ok(Opened::Refused { step: "app" })) => out.refused += 1,
        Ok(Ok(Opened::Refused { step })) => {
            return Err(format!(
                "refused naming the {step:?} step, not the app step"
            ));
        }
        Ok(Ok(Opened::At(h))) if h == to => out.opened_at_target += 1,
        Ok(Ok(Opened::At(_))) => out.opened_untouched += 1,
        Ok(Err(e)) => return Err(e),
        Err(p) => return caught(Err(p)),
    }
    let copy = img.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    caught(catch_unwind(AssertUnwindSafe(|| {
        check_rerun(&copy, to, want)
    })))
}

/// What is cut: the rollback, or an open that finishes an interrupted one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Rollback,
    Open,
}

impl Run {
    fn go(self, fs: &SimFs, to: u64) -> Result<(), String> {
        match self {
            Run::Rollback => run_rollback(fs, to),
            Run::Open => Home::open_on(Arc::new(fs.clone()), &home(), &options())
                .map(drop)
                .map_err(|e| format!("open: {e}")),
        }
    }
}

/// Cuts `run` (to `to`) on the home `start` at every op; checks every distinct image.
fn sweep(label: &str, start: &SimFs, run: Run, to: u64, want: &Refs, seed: u64, out: &mut Sweep) {
    let total = {
        let fs = start.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        run.go(&fs, to)
            .unwrap_or_else(|e| panic!("{label}: the uncut run: {e}"));
        let total = fs.ops();
        assert_eq!(
            check_open(&fs, to, want),
            Ok(Opened::At(to)),
            "{label}: the uncut run"
        );
        total
    };
    let mut seen = HashSet::new();
    for k in 1..=total {
        let fs = start.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        fs.set_cut_at(Some(k));
        let r = run.go(&fs, to);
        assert!(
            fs.is_dead(),
            "{label}: cut {k} of {total} never fired ({r:?})"
        );
        out.cuts += 1;
        let (op, path) = fs.stats().log[k as usize - 1].clone();
        *out.cuts_by_op.entry(format!("{op:?}")).or_default() += 1;
        let n = fs.pending_dir_ops();
        for d in dir_fates(n, seed ^ k) {
            for f in file_fates(seed ^ (k << 20)) {
                let img = fs.crash_image(d, f);
                if !seen.insert(img.fingerprint()) {
                    continue;
                }
                out.states += 1;
                if let Err(e) = check_image(&img, to, want, out) {
                    out.failures.push(format!(
                        "{label}: cut {k}/{total} at {op:?} {} ({n} dir ops pending), {d:?} \
                         {f:?}: {e}",
                        path.display()
                    ));
                }
            }
        }
    }
}

/// The home `start` with a rollback to `to` cut right after its `nth` directory fsync
/// (1: the first intent is durable, the app step not begun; 2: the intent's rewrite to the
/// stores step is durable, no store written), nothing unsynced kept.
fn interrupted_after_dir_sync(start: &SimFs, to: u64, nth: usize) -> SimFs {
    let probe = start.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    run_rollback(&probe, to).unwrap();
    let log = probe.stats().log;
    let k = log
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| *op == flushpoint::testing::SimOp::SyncDir)
        .nth(nth - 1)
        .map(|(i, _)| i as u64 + 2)
        .unwrap_or_else(|| panic!("the rollback fsyncs the directory {nth} times: {log:?}"));
    let fs = start.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    fs.set_cut_at(Some(k));
    assert!(run_rollback(&fs, to).is_err() && fs.is_dead());
    fs.crash_image(DirFate::KeepAll, FileFate::DropAll)
}

/// The directory fates tried for a cut with `n` pending directory ops (`support::dir_fates`).
fn dir_fates(n: usize, seed: u64) -> Vec<DirFate> {
    support::dir_fates(n, seed, SUBSETS_MAX_OPS, 64)
}

#[test]
fn power_cut_at_every_op_of_a_rollback_is_finished_or_refused_never_wrong() {
    let started = Instant::now();
    let seed = seed();
    println!("rollback_power_cut: FLUSHPOINT_SEED={seed}");
    let start = synced_to(TOP);
    let top = reference(TOP);
    let mut s = Sweep::default();
    let refs: Vec<(u64, Refs)> = TARGETS
        .iter()
        .map(|&to| {
            (
                to,
                Refs {
                    target: reference(to),
                    top: top.clone(),
                },
            )
        })
        .collect();
    for (to, want) in &refs {
        sweep(
            &format!("rollback to {to}"),
            &start,
            Run::Rollback,
            *to,
            want,
            seed,
            &mut s,
        );
    }
    report(&s, "the rollbacks", seed);
    // The recoveries, cut too: an open finishing the stores step, a rerun finishing from
    // the app step.
    for (to, want) in &refs {
        let to = *to;
        let stores_step = interrupted_after_dir_sync(&start, to, 2);
        assert_eq!(
            check_open(
                &stores_step.crash_image(DirFate::KeepAll, FileFate::KeepAll),
                to,
                want
            ),
            Ok(Opened::At(to)),
            "an open finishes the stores step"
        );
        sweep(
            &format!("open finishing the rollback to {to}"),
            &stores_step,
            Run::Open,
            to,
            want,
            seed,
            &mut s,
        );
        let app_step = interrupted_after_dir_sync(&start, to, 1);
        assert!(
            matches!(
                check_open(
                    &app_step.crash_image(DirFate::KeepAll, FileFate::KeepAll),
                    to,
                    want
                ),
                Ok(Opened::Refused { step: "app" })
            ),
            "an open refuses the app step"
        );
        // What `flushpoint inspect` reports: the target of the rollback in progress, from
        // either step; none on a home no rollback touched.
        for (img, pending) in [
            (&app_step, Some(to)),
            (&stores_step, Some(to)),
            (&start, None),
        ] {
            let home = Home::open_for_rollback_on(
                Arc::new(img.crash_image(DirFate::KeepAll, FileFate::KeepAll)),
                &home(),
                &options(),
            )
            .unwrap();
            assert_eq!(flushpoint::home::pending_rollback(&home).unwrap(), pending);
        }
        sweep(
            &format!("rerun of the rollback to {to} from its app step"),
            &app_step,
            Run::Rollback,
            to,
            want,
            seed,
            &mut s,
        );
    }
    println!("rollback_power_cut: in {:.1?}", started.elapsed());
    report(&s, "the rollbacks and their recoveries", seed);
    for kind in [
        "Create", "Write", "SyncData", "SyncAll", "Rename", "Unlink", "SyncDir",
    ] {
        assert!(
            s.cuts_by_op.get(kind).is_some_and(|n| *n > 0),
            "no cut landed on a {kind}: {:?}",
            s.cuts_by_op
        );
    }
    assert!(
        s.refused > 0 && s.opened_at_target > 0 && s.opened_untouched > 0,
        "every outcome is reached: {s:?}"
    );
}

/// Prints the figures so far; fails with the first failures, if any.
fn report(s: &Sweep, what: &str, seed: u64) {
    println!(
        "rollback_power_cut: {what}: {} cuts ({:?}); open refused {} (interrupted), opened \
         at the target {}, opened untouched {}",
        s.cuts, s.cuts_by_op, s.refused, s.opened_at_target, s.opened_untouched,
    );
    println!(
        "{} rollback cut states, {} failures",
        s.states,
        s.failures.len()
    );
    if !s.failures.is_empty() {
        for f in s.failures.iter().take(12) {
            println!("FAIL {f}");
        }
        panic!(
            "{} of {} rollback cut states failed (replay: FLUSHPOINT_SEED={seed})",
            s.failures.len(),
            s.states
        );
    }
}

// --- The oracle rejects wrong answers. ---

/// Wrong homes made by hand from the pre-rollback home, each without an intent file: the
/// open check rejects every one, and the rerun check too where a rerun cannot finish.
#[test]
fn checks_reject_a_half_rolled_back_home_without_intent_and_a_wrong_app_value() {
    let to = TOP - 1;
    let want = Refs {
        target: reference(to),
        top: reference(TOP),
    };
    let start = synced_to(TOP);
    let wrong = |f: &dyn Fn(&Home)| -> SimFs {
        let fs = start.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        let home = Home::open_for_rollback_on(Arc::new(fs.clone()), &home(), &options()).unwrap();
        f(&home);
        drop(home);
        fs
    };
    // Sanity: the untouched home passes both checks.
    let ok = start.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    assert_eq!(check_open(&ok, to, &want), Ok(Opened::At(TOP)));
    check_rerun(&ok, to, &want).unwrap();

    // 1. The block store rolled back alone: the handshake refuses the home.
    let img = wrong(&|h| {
        flushpoint::store::BlockStore::<flushpoint::demo::Block>::open(
            h.block_store_db.clone() as Arc<dyn Db>
        )
        .unwrap()
        .rollback_to(to)
        .unwrap();
    });
    let e = check_open(&img, to, &want).unwrap_err();
    assert!(e.contains("neither") || e.contains("handshake"), "{e}");
    assert!(check_rerun(&img, to, &want).is_err());

    // 2. The app rolled back alone (no intent): the handshake would replay it.
    let img = wrong(&|h| {
        let mut app = app_of(h).unwrap();
        flushpoint::App::rollback_to(&mut app, to).unwrap();
    });
    let e = check_open(&img, to, &want).unwrap_err();
    assert!(e.contains("neither"), "{e}");

    // 3. A finished rollback with one app value changed.
    let img = wrong(&|h| {
        let mut app = app_of(h).unwrap();
        flushpoint::rollback(h, &mut app, &spec().chain(), to).unwrap();
        let (k, v) = want.target[2].iter().next().unwrap();
        let mut b = flushpoint::Batch::new();
        let mut v = v.to_vec();
        v[0] ^= 1;
        b.put(k.clone(), v);
        h.app_db.write(&b, flushpoint::Durability::Synced).unwrap();
    });
    let e = check_open(&img, to, &want).unwrap_err();
    assert!(e.contains("neither"), "{e}");

    // 4. The block store left one block above a lowered state and app, no intent: the
    //    handshake would re-apply the block (BlockStoreAhead).
    let img = wrong(&|h| {
        // Roll everything to `to`, then put block `to + 1` back in the block store.
        let fs2 = start.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        let h2 = Home::open_on(Arc::new(fs2), &home(), &options()).unwrap();
        let bs2 = flushpoint::store::BlockStore::<flushpoint::demo::Block>::open(
            h2.block_store_db.clone() as Arc<dyn Db>,
        )
        .unwrap();
        let block = bs2.load_block(to + 1).unwrap().unwrap();
        let seen = bs2.load_seen_commit(to + 1).unwrap().unwrap();
        let mut app = app_of(h).unwrap();
        flushpoint::rollback(h, &mut app, &spec().chain(), to).unwrap();
        let bs = flushpoint::store::BlockStore::<flushpoint::demo::Block>::open(
            h.block_store_db.clone() as Arc<dyn Db>,
        )
        .unwrap();
        bs.save_block(&block, &flushpoint::PartSet::from_block(&block), &seen)
            .unwrap();
    });
    let e = check_open(&img, to, &want).unwrap_err();
    assert!(
        e.contains("block-store-ahead") || e.contains("neither"),
        "{e}"
    );
}

/// An intent left by the tool before the rollback moved into the library (the text `to\n`,
/// written after nothing or after its state step): the open refuses it, a rerun finishes it
/// to the straight-synced home.
#[test]
fn an_older_tools_text_intent_is_refused_on_open_and_finished_by_a_rerun() {
    let to = TOP - 2;
    let want = Refs {
        target: reference(to),
        top: reference(TOP),
    };
    let state_at_to = {
        let home = Home::open_on(Arc::new(synced_to(to)), &home(), &options()).unwrap();
        flushpoint::store::StateStore::<flushpoint::demo::DemoChain>::open(
            home.state_db.clone() as Arc<dyn Db>
        )
        .load_state()
        .unwrap()
        .unwrap()
    };
    for state_lowered in [false, true] {
        let fs = synced_to(TOP);
        {
            let home =
                Home::open_for_rollback_on(Arc::new(fs.clone()), &home(), &options()).unwrap();
            if state_lowered {
                flushpoint::store::StateStore::<flushpoint::demo::DemoChain>::open(
                    home.state_db.clone() as Arc<dyn Db>,
                )
                .rollback_to(&state_at_to, TOP)
                .unwrap();
            }
            let f = fs
                .open_file(
                    &home.path().join(ROLLBACK_INTENT_FILE),
                    flushpoint::fs::OpenMode::CreateTruncate,
                )
                .unwrap();
            f.write_at(0, format!("{to}\n").as_bytes()).unwrap();
        }
        let img = fs.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        assert_eq!(
            check_open(&img, to, &want),
            Ok(Opened::Refused {
                step: "state (an older build's rollback)"
            }),
            "state lowered: {state_lowered}"
        );
        let img = fs.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        check_rerun(&img, to, &want)
            .unwrap_or_else(|e| panic!("state lowered: {state_lowered}: {e}"));
    }
}
