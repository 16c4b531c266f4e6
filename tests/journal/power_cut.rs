//! Power cuts at every file-system operation of a journal's life: `JournalEngine::open` on
//! an empty directory (its creation, the index's atomic creation), then a seeded plan of
//! units over three keyspaces — single-keyspace writes (synced and buffered), multi-keyspace
//! commits, explicit checkpoints; "blocks" keeps its larger values in the journal and the
//! index points at them (ADR 0013), so trims wait for pointers to go; "app" is indexed by
//! sorted runs (ADR 0014), so every apply step writes a run and every checkpoint syncs its
//! runs and their directory before the commit that lists them, and its runs point at its
//! larger values in the journal (ADR 0016), so trims wait for merges to drop pointers — with segments, checkpoints
//! and the overlay budget shrunk
//! so that segments roll, checkpoints run and trims delete segments many times in a run.
//! The applier runs inline, so a run's operations are the same every time and cut `k` is
//! one fixed operation.
//!
//! For every cut `k` and several crash images (unsynced file ops dropped, kept, torn at
//! random; unsynced directory entry ops dropped, kept, a random subset, a random ordered
//! prefix), the journal is reopened and checked against a model computed here from the
//! plan alone:
//! * recovery succeeds (never a refusal: no crash makes a corrupt journal);
//! * the three keyspaces together equal the model after some prefix `p` of the units, with
//!   `p` at least the units acknowledged (a synced write or commit, or a checkpoint, that
//!   returned `Ok`) and at most the units attempted: no acknowledged unit lost, no unit
//!   partially present, keyspaces consistent with each other;
//! * the recovered journal takes a synced write, and a clean reopen shows it on top of `p`.
//!
//! A second cut during recovery: for every first cut, one image is recovered with the power
//! cut at each operation of the recovery, and that image recovered again and checked the
//! same way. Prints the number of cut states. `FLUSHPOINT_SEED=<n>` replays a plan and its
//! random fates; `FLUSHPOINT_FULL=1` adds random fates.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::db::collect_range;
use flushpoint::journal::{Applier, JournalEngine, JournalOptions, KeyspaceOptions};
use flushpoint::testing::{DirFate, FileFate, SimFs};
use flushpoint::{Batch, Db, Direction, Durability, KeyRange};
use support::fs::{Hook, HookedFs};
use support::{Rng, full};

const DIR: &str = "/data/journal";
const KEYSPACES: [&str; 3] = ["blocks", "state", "app"];
/// Units in a plan. Why: enough for ~14 segments, ~6 checkpoints, ~11 segments trimmed and a
/// few overlay-budget waits at the sizes below, while every cut stays ~20 s in total.
const UNITS: usize = 40;
/// Segment size in this test. Why: a unit is 60–700 bytes, so a segment holds a few.
const SEGMENT_BYTES: u64 = 1024;
/// Checkpoint size in this test. Why: a checkpoint every few units, so cuts land in them.
const CHECKPOINT_BYTES: u64 = 1200;
/// Overlay budget in this test. Why: a burst of buffered units passes it, so the budget's
/// sync-then-apply path runs inside the plan.
const OVERLAY_BYTES: u64 = 400;
const SEED_DEFAULT: u64 = 0x0a11_0c47;
/// The smallest value "blocks" and "app" keep in the journal. Why: the plan's values are 8–127 or
/// 600 bytes, so both inline values and pointers are written, replaced and deleted.
const SEPARATE_FROM: u32 = 64;
/// Body bytes of a run's block in this test. Why: a run of a few small ops then has
/// several blocks, so a cut can land between any two of its writes.
const RUN_BLOCK_BYTES: usize = 64;
/// How long each sync takes in the cuts with units applied while synced. Why: long enough
/// for the applier to take a unit being synced most of the time, short enough that every
/// cut of a run of ~50 syncs takes well under a second.
const SLOW_SYNC_MS: u64 = 1;
/// Buffered units in a burst. Why: three of ~160 bytes pass `OVERLAY_BYTES`.
const BURST_UNITS: u32 = 3;

fn options() -> JournalOptions {
    JournalOptions::default()
        .with_segment_bytes(SEGMENT_BYTES)
        .with_checkpoint_bytes(CHECKPOINT_BYTES)
        .with_overlay_bytes_max(OVERLAY_BYTES)
        .with_applier(Applier::Inline)
        .with_run_block_bytes(RUN_BLOCK_BYTES)
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

/// A seeded plan. Every unit writes a marker `unit` = its number into each keyspace it
/// touches, so a unit half present shows.
fn plan(seed: u64) -> Vec<Step> {
    let mut rng = Rng(seed);
    let mut steps = Vec::new();
    let mut unit = 0u32;
    while unit < UNITS as u32 {
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
                    (
                        Bytes::from_static(b"unit"),
                        Some(Bytes::from(unit.to_be_bytes().to_vec())),
                    ),
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
            let mut ops: Ops = vec![(
                Bytes::from_static(b"unit"),
                Some(Bytes::from(unit.to_be_bytes().to_vec())),
            )];
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

/// What a run got through before the cut.
#[derive(Debug, Clone, Copy, Default)]
struct Outcome {
    acked: usize,
    attempted: usize,
    completed: bool,
}

fn run(fs: &SimFs, steps: &[Step]) -> (Outcome, Option<JournalEngine>) {
    run_with(fs, steps, options())
}

fn run_with(
    fs: &SimFs,
    steps: &[Step],
    options: JournalOptions,
) -> (Outcome, Option<JournalEngine>) {
    run_on(Arc::new(fs.clone()), steps, options)
}

/// [`run_with`] on any file system (a hooked `SimFs`).
fn run_on(
    fs: Arc<dyn flushpoint::fs::FileSystem>,
    steps: &[Step],
    options: JournalOptions,
) -> (Outcome, Option<JournalEngine>) {
    let mut out = Outcome::default();
    let Ok(engine) = JournalEngine::open(fs, Path::new(DIR), options) else {
        return (out, None);
    };
    // "blocks" keeps its values of SEPARATE_FROM bytes or more in the journal (ADR 0013): a
    // cut can land in its creation record, and its overwrites and deletes release segments.
    let Ok(blocks) = engine.keyspace_with(
        KEYSPACES[0],
        KeyspaceOptions::separating_values_from(SEPARATE_FROM),
    ) else {
        return (out, None);
    };
    // "app" is indexed by runs (ADR 0014): a cut can land in its directory's creation and
    // its records, and in every run's write and sync. Its runs point at its values of
    // SEPARATE_FROM bytes or more in the journal (ADR 0016), so merges release segments.
    let Ok(app) = engine.keyspace_with(
        KEYSPACES[2],
        KeyspaceOptions::indexed_by_runs().with_values_separated_from(SEPARATE_FROM),
    ) else {
        return (out, None);
    };
    let dbs = [
        blocks,
        engine.keyspace(KEYSPACES[1]).expect("keyspace"),
        app,
    ];
    let durability = |s: bool| {
        if s {
            Durability::Synced
        } else {
            Durability::Buffered
        }
    };
    for step in steps {
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
        if result.is_err() {
            return (out, Some(engine));
        }
        if synced {
            out.acked = out.attempted;
        }
    }
    out.completed = true;
    (out, Some(engine))
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

/// Recovers `image` and checks it against the model; returns the prefix found. After the
/// check, one synced write and a clean reopen must show it on top of the prefix.
fn recover_and_check(
    image: &SimFs,
    states: &[Image],
    out: Outcome,
    what: &str,
) -> Result<usize, String> {
    let engine = JournalEngine::open(Arc::new(image.clone()), Path::new(DIR), options())
        .map_err(|e| format!("{what}: recovery refused: {e}"))?;
    let got = read_all(&engine).map_err(|e| format!("{what}: read: {e}"))?;
    let Some(p) = matching_prefix(states, &got, out.acked, out.attempted) else {
        let closest = (0..states.len()).find(|&p| states[p] == got);
        return Err(format!(
            "{what}: contents match no prefix in {}..={} (acked..attempted); they match prefix {closest:?}",
            out.acked, out.attempted
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
    let engine = JournalEngine::open(Arc::new(image.clone()), Path::new(DIR), options())
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

/// The crash images tried for every cut.
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

#[test]
fn every_cut_recovers_every_acknowledged_unit_and_no_partial_unit() {
    let seed = support::seed(SEED_DEFAULT);
    println!("seed {seed} (replay: FLUSHPOINT_SEED={seed})");
    let steps = plan(seed);
    let states = model_states(&steps);

    // The uncut run: how many operations there are, and proof that the plan exercises
    // what the cuts are meant to hit.
    let fs = SimFs::new();
    let (out, engine) = run(&fs, &steps);
    assert!(out.completed, "the uncut run completes");
    let engine = engine.expect("engine");
    let counts = engine.counts();
    println!("uncut run: {counts:?}");
    assert!(counts.dir_sync_calls >= 4, "segments roll: {counts:?}");
    assert!(counts.checkpoints >= 4, "checkpoints run: {counts:?}");
    assert!(
        counts.segments_deleted >= 2,
        "trims delete segments: {counts:?}"
    );
    // At least 5: a value its own unit overwrites is never kept (the applier applies a
    // unit's last op per key), and the plan's keys repeat within a unit.
    assert!(
        counts.values_kept_in_journal >= 5 && counts.segments_kept_for_values >= 2,
        "values are kept in the journal, and hold segments past the checkpoint: {counts:?}"
    );
    assert!(
        counts.overlay_waits >= 1,
        "the overlay budget is reached: {counts:?}"
    );
    // Both kinds of segment, so cuts land in each kind of roll: a buffered unit's roll
    // creates a segment that grows; a small synced unit's takes the spare, early when the
    // active segment was created and the unit ends a run of small synced ones
    // (`JournalOptions::prepared_units_below_bytes`, `SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL`).
    let log = fs.stats().log;
    let is_segment = |p: &Path| p.extension().is_some_and(|e| e == "seg");
    let created = log
        .iter()
        .filter(|(op, p)| *op == flushpoint::testing::SimOp::Create && is_segment(p))
        .count();
    let renamed = log
        .iter()
        .filter(|(op, p)| *op == flushpoint::testing::SimOp::Rename && is_segment(p))
        .count();
    println!("segments: {created} created empty, {renamed} renamed from the spare");
    assert!(
        created >= 2 && renamed >= 2,
        "both kinds of segment: {created} created, {renamed} renamed"
    );
    assert_eq!(read_all(&engine).unwrap(), *states.last().unwrap());
    assert!(
        engine.counts().values_read_from_journal >= 1,
        "reads follow pointers: {:?}",
        engine.counts()
    );
    drop(engine);
    let total_ops = fs.ops();
    println!(
        "{} units, {total_ops} file-system operations",
        states.len() - 1
    );

    let mut rng = Rng(seed ^ 0x00c0_ffee);
    let mut states_checked = 0u64;
    let mut recovery_cut_states = 0u64;
    let mut lost_unacked = 0u64;
    let mut kept_unacked = 0u64;
    let mut failures = Vec::new();
    for k in 1..=total_ops {
        let fs = SimFs::new();
        fs.set_cut_at(Some(k));
        let (out, engine) = run(&fs, &steps);
        drop(engine);
        assert!(fs.is_dead(), "cut {k} fired");
        for (i, (dirs, files)) in fates(&mut rng, fs.pending_dir_ops())
            .into_iter()
            .enumerate()
        {
            let image = fs.crash_image(dirs, files);
            // The image before its recovery writes anything: the second cuts start from it.
            let pristine = image.crash_image(DirFate::KeepAll, FileFate::KeepAll);
            let what = format!("cut {k} fate {i} ({dirs:?}, {files:?}), {out:?}");
            match recover_and_check(&image, &states, out, &what) {
                Ok(p) => {
                    states_checked += 1;
                    if p > out.acked {
                        kept_unacked += 1;
                    } else if out.attempted > out.acked {
                        lost_unacked += 1;
                    }
                }
                Err(e) => failures.push(e),
            }
            // A second cut, during the recovery of the random image.
            if i == 3 {
                let probe = pristine.crash_image(DirFate::KeepAll, FileFate::KeepAll);
                drop(JournalEngine::open(
                    Arc::new(probe.clone()),
                    Path::new(DIR),
                    options(),
                ));
                let recovery_ops = probe.ops();
                for j in 1..=recovery_ops {
                    let again = pristine.crash_image(DirFate::KeepAll, FileFate::KeepAll);
                    again.set_cut_at(Some(j));
                    drop(JournalEngine::open(
                        Arc::new(again.clone()),
                        Path::new(DIR),
                        options(),
                    ));
                    let twice = again.crash_image(
                        DirFate::Mask(rng.next_u64()),
                        FileFate::Random(rng.next_u64()),
                    );
                    let what = format!("{what}, then recovery cut {j}");
                    match recover_and_check(&twice, &states, out, &what) {
                        Ok(_) => recovery_cut_states += 1,
                        Err(e) => failures.push(e),
                    }
                }
            }
        }
    }
    println!(
        "{total_ops} cuts: {states_checked} cut states recovered and checked, {recovery_cut_states} \
         states after a second cut during recovery; unacknowledged units kept in {kept_unacked}, \
         lost in {lost_unacked}"
    );
    assert!(
        failures.is_empty(),
        "{} failures (seed {seed}), first: {}",
        failures.len(),
        failures[0]
    );
    // The cuts must reach both sides of the durability line.
    assert!(kept_unacked > 0 && lost_unacked > 0);
}

/// The oracle rejects a journal that lost an acknowledged unit or kept part of one.
#[test]
fn oracle_rejects_a_lost_acknowledged_unit_and_a_partial_unit() {
    let steps = plan(SEED_DEFAULT);
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
}

/// The same plan with the background applier: the thread's applies, checkpoints and trims
/// interleave with the writes, so cut `k` is not one fixed operation (the run is not
/// replayable operation for operation; the plan and the fates are). Every cut that fires
/// — in a write, in the applier, or in the close — is recovered and checked as above.
#[test]
fn every_cut_with_the_background_applier_recovers_every_acknowledged_unit() {
    background_cuts(false);
}

/// The same, with every synced unit applied while it is written and synced (ADR 0015,
/// "Applied while it is synced"): a cut can land in a step's run writes or inserts before
/// its unit is durable, in the unit's sync while the step waits, or in the step's commit
/// after it. Recovered and checked as above; the uncut run began steps that way (not
/// vacuous).
#[test]
fn every_cut_with_units_applied_while_syncing_recovers_every_acknowledged_unit() {
    background_cuts(true);
}

fn background_cuts(while_syncing: bool) {
    let seed = support::seed(SEED_DEFAULT);
    println!("seed {seed} (replay the plan and fates: FLUSHPOINT_SEED={seed})");
    let steps = plan(seed);
    let states = model_states(&steps);
    // No batching delay: the applier runs as soon as a unit is durable, so its applies,
    // checkpoints and trims land between the plan's writes.
    let background = || {
        options()
            .with_applier(Applier::Background)
            .with_apply_batch_delay(std::time::Duration::ZERO)
            .with_apply_while_syncing_bytes_min(if while_syncing { 0 } else { u64::MAX })
    };
    // Applied while syncing, the syncs take a millisecond: on a `SimFs` a sync is
    // instantaneous, and the applier would almost never find a unit still being synced.
    let run = |fs: &SimFs| {
        if while_syncing {
            let slow = Hook::SlowSyncs(std::time::Duration::from_millis(SLOW_SYNC_MS));
            run_on(
                Arc::new(HookedFs::new(fs.clone(), slow)),
                &steps,
                background(),
            )
        } else {
            run_with(fs, &steps, background())
        }
    };
    let fs = SimFs::new();
    let (out, engine) = run(&fs);
    assert!(out.completed);
    let begun = engine
        .as_ref()
        .expect("the uncut run opens")
        .counts()
        .steps_begun_while_syncing;
    assert_eq!(
        begun > 0,
        while_syncing,
        "{begun} steps begun while their unit synced"
    );
    drop(engine);
    let total_ops = fs.ops();
    let mut rng = Rng(seed ^ 0x0bac_6000);
    let (mut checked, mut not_fired) = (0u64, 0u64);
    let mut failures = Vec::new();
    // Past the uncut run's count too: a run may take more operations than the uncut one.
    for k in 1..=total_ops + total_ops / 4 {
        let fs = SimFs::new();
        fs.set_cut_at(Some(k));
        let (out, engine) = run(&fs);
        // The close (applier stopped, last checkpoint) may be where the cut lands.
        drop(engine);
        if !fs.is_dead() {
            not_fired += 1;
            continue;
        }
        for (dirs, files) in [
            (DirFate::KeepAll, FileFate::KeepAll),
            (
                DirFate::Mask(rng.next_u64()),
                FileFate::Random(rng.next_u64()),
            ),
        ] {
            let image = fs.crash_image(dirs, files);
            let what = format!("background, cut {k} ({dirs:?}, {files:?}), {out:?}");
            match recover_and_check(&image, &states, out, &what) {
                Ok(_) => checked += 1,
                Err(e) => failures.push(e),
            }
        }
    }
    println!(
        "background applier (applied while syncing: {while_syncing}, {begun} steps so uncut): \
         {total_ops} operations uncut, {checked} cut states checked, {not_fired} cuts past the \
         run's end"
    );
    assert!(
        failures.is_empty(),
        "{} failures (seed {seed}), first: {}",
        failures.len(),
        failures[0]
    );
    assert!(checked >= total_ops, "most cuts fired");
}
