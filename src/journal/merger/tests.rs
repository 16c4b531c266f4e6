//! The merger's tests: merges planned, written and installed by the test itself (as the
//! merger thread does), the stop, the install's invariants, and the policy.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::journal::engine::tests::wait_for;
use crate::journal::limits::RUNS_BEHIND_MAX;
use crate::journal::{
    Applier, JournalDb, JournalEngine, JournalOptions, KeyspaceOptions, RUNS_DIR,
};

impl Shared {
    /// [`write_merge`] on this engine.
    fn write_merge(&self, plan: MergePlan) -> Result<Option<WrittenMerge>> {
        write_merge(&self.core, plan)
    }
}

/// The merge tests' setup: a journal in `fs` at `/j` with the inline applier and an
/// "app" keyspace indexed by runs, whose steps leave merges to a merger (the test is
/// the merger: it plans, writes and installs them itself).
struct MergeBench {
    fs: crate::fs::SimFs,
    options: JournalOptions,
    engine: JournalEngine,
    db: Arc<JournalDb>,
    shared: Arc<Shared>,
}

impl MergeBench {
    fn new() -> MergeBench {
        MergeBench::with(Applier::Inline)
    }

    /// [`MergeBench::new`] with `applier` (a background one applies each durable unit
    /// at once).
    fn with(applier: Applier) -> MergeBench {
        let fs = crate::fs::SimFs::new();
        let options = JournalOptions {
            applier,
            apply_batch_delay: Duration::ZERO,
            checkpoint_bytes: 1 << 30,
            run_block_bytes: 64,
            ..JournalOptions::default()
        };
        let engine = JournalEngine::open(Arc::new(fs.clone()), Path::new("/j"), options.clone())
            .expect("open");
        let db = engine
            .keyspace_with("app", KeyspaceOptions::indexed_by_runs())
            .expect("keyspace");
        let shared = engine.shared().clone();
        shared.core.lock_state().merger.set_live(true);
        MergeBench {
            fs,
            options,
            engine,
            db,
            shared,
        }
    }

    fn key(i: u32) -> Bytes {
        Bytes::from(format!("acct/{:08x}", i.wrapping_mul(0x9e37_79b9)))
    }

    fn value(i: u32, round: u32) -> Bytes {
        Bytes::from(format!("value {i} round {round}"))
    }

    /// One synced unit (so one inline step, one run): keys `0..keys` at `round`.
    fn write_round(&self, keys: u32, round: u32) {
        let mut b = crate::db::Batch::new();
        for i in 0..keys {
            b.put(Self::key(i), Self::value(i, round));
        }
        crate::db::Db::write(&*self.db, &b, crate::db::Durability::Synced).expect("write");
    }

    fn plan(&self) -> Option<MergePlan> {
        let turn = self.shared.applier.lock();
        plan_merge(&self.shared.core, &turn, "app")
    }

    /// Writes a planned merge (the engine not stopping) and installs it under the
    /// apply lock, as the merger thread does.
    fn write_and_install(&self, plan: MergePlan) {
        let merge = self
            .shared
            .write_merge(plan)
            .expect("write merge")
            .expect("not stopping");
        let turn = self.shared.applier.lock();
        install_merge(&self.shared.core, &turn, merge).expect("install merge");
    }

    /// Closes the engine and opens `fs` (the same files, or a crash image of them).
    fn reopen(self, fs: crate::fs::SimFs) -> Arc<JournalDb> {
        let options = self.options.clone();
        drop(self);
        let engine = JournalEngine::open(Arc::new(fs), Path::new("/j"), options).expect("reopen");
        engine.keyspace("app").expect("keyspace")
    }

    /// Every key `0..keys` reads as `round`'s value.
    fn check(db: &dyn crate::db::Db, keys: u32, round: u32, when: &str) {
        for i in 0..keys {
            assert_eq!(
                db.get(&Self::key(i)).unwrap(),
                Some(Self::value(i, round)),
                "{when}: key {i}"
            );
        }
    }
}

/// A merger that falls behind holds the background applier back: with
/// [`RUNS_BEHIND_MAX`] runs listed and no merge, a new unit stays queued (read from the
/// overlay) and adds no run; once the merger's merges are installed the applier goes on.
/// The merger here never runs on its own (`merger_live` set before any step, so the
/// applier starts none): the test merges when it chooses.
#[test]
fn the_background_applier_waits_for_a_merger_that_far_behind() {
    let bench = MergeBench::with(Applier::Background);
    let (shared, db) = (&bench.shared, &*bench.db);
    let runs = || {
        shared
            .core
            .lock_state()
            .manifest
            .list("app")
            .map_or(0, |list| list.len())
    };
    let queued = || shared.core.lock_state().queue.len();
    let write_round = |round: u32| bench.write_round(20, round);
    for round in 0..RUNS_BEHIND_MAX as u32 {
        write_round(round);
        wait_for("a step", &|| queued() == 0);
        assert_eq!(runs(), round as usize + 1, "one run a step");
    }
    let last = RUNS_BEHIND_MAX as u32;
    write_round(last);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        runs(),
        RUNS_BEHIND_MAX,
        "no step while the merger is that far behind"
    );
    assert_eq!(queued(), 1, "the unit waits in the overlay");
    MergeBench::check(db, 20, last, "from the overlay");
    // The merger catches up: every run merged into one, then the waiting unit's step.
    merge_beside_steps(&shared.core, &shared.applier).expect("merge");
    wait_for("the waiting unit's step", &|| queued() == 0);
    assert_eq!(runs(), 2, "the merge's output and the new step's run");
    MergeBench::check(db, 20, last, "after the step");
}

/// The install's invariants, each fed a list that breaks it: the check must be able to
/// refuse (the third is what catches an output id taken when the merge's write begins,
/// the bug the loom runs model is given in `tests/planted/`).
#[test]
fn a_merge_position_is_refused_for_each_broken_invariant() {
    let bench = MergeBench::new();
    for round in 0..4 {
        bench.write_round(8, round);
    }
    let list = bench
        .shared
        .core
        .lock_state()
        .manifest
        .list("app")
        .expect("runs");
    assert_eq!(list.len(), 4, "one run per step, none merged yet");
    let ids: Vec<u64> = list.iter().map(|r| r.id()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    let above = ids[0] + 1;
    // Planned with the oldest two, the newest two written since: in position 2.
    assert_eq!(merge_position(Some(&list), &list[2..], ids[1] - 1), Ok(2));
    // Not indexed by runs; no inputs; an input no longer listed.
    assert!(merge_position(None, &list[2..], above).is_err());
    assert!(merge_position(Some(&list), &[], above).is_err());
    let gone: RunList = Arc::new(list[..2].to_vec());
    assert_eq!(
        merge_position(Some(&gone), &list[2..], above),
        Err("a merge's inputs stay listed until it is installed")
    );
    // Inputs not together (a run between them), or not in their order.
    let apart = [list[1].clone(), list[3].clone()];
    assert_eq!(
        merge_position(Some(&list), &apart, above),
        Err("a merge's inputs are listed together, as when it began")
    );
    let swapped = [list[3].clone(), list[2].clone()];
    assert!(merge_position(Some(&list), &swapped, above).is_err());
    // A run in front with a lower id than the output, or the same one (ids are never
    // reused: the same id is as broken as a lower one).
    assert_eq!(
        merge_position(Some(&list), &list[2..], above),
        Err("a run written during a merge has a higher id than its output")
    );
    assert_eq!(
        merge_position(Some(&list), &list[2..], ids[1]),
        Err("a run written during a merge has a higher id than its output")
    );
}

/// A merge written while apply steps go on, as the merger thread writes one, made
/// deterministic: planned, then three steps write newer runs over the same keys, then
/// the output is written and listed. The output must stay behind the newer runs in the
/// read list and take a lower id than theirs (a reopen orders runs by id): reads before
/// and after a reopen see the last step's values, never the merged older ones.
#[test]
fn a_merge_written_beside_apply_steps_stays_behind_their_newer_runs() {
    let bench = MergeBench::new();
    for round in 0..4 {
        bench.write_round(40, round);
    }
    let plan = bench.plan().expect("four equal runs: a merge is due");
    assert_eq!(plan.inputs.len(), 4);
    for round in 4..7 {
        bench.write_round(40, round);
    }
    bench.write_and_install(plan);
    let ids: Vec<u64> = bench
        .shared
        .core
        .lock_state()
        .manifest
        .list("app")
        .expect("runs")
        .iter()
        .map(|r| r.id())
        .collect();
    assert_eq!(
        ids.len(),
        4,
        "three newer runs and the merge's output: {ids:?}"
    );
    assert!(
        ids.windows(2).all(|w| w[0] > w[1]),
        "newest first by id: {ids:?}"
    );
    let counts = bench.engine.counts();
    assert_eq!(
        (counts.run_merges, counts.merges_behind_newer_runs),
        (1, 1),
        "one merge, listed behind newer runs"
    );
    MergeBench::check(&*bench.db, 40, 6, "after the merge");
    bench.engine.checkpoint().expect("checkpoint");
    let fs = bench.fs.clone();
    let db = bench.reopen(fs);
    MergeBench::check(&*db, 40, 6, "after the reopen");
}

/// A stopping engine merges nothing: a merge being written ends early and its output
/// is deleted, never listed, and no new merge is planned; the values are untouched
/// and the next open reads them.
#[test]
fn a_stopping_engine_drops_the_merge_it_is_writing_and_plans_none() {
    let bench = MergeBench::new();
    // Rounds of more ops than one look at `stop` covers, so the write is cut short.
    let keys = 2 * MERGE_STOP_CHECK_OPS as u32;
    for round in 0..4 {
        bench.write_round(keys, round);
    }
    let runs_dir = Path::new("/j").join(RUNS_DIR).join("app");
    let before = bench.fs.list(&runs_dir);
    let plan = bench.plan().expect("a merge is due");
    let id = plan.id;
    bench.shared.core.lock_state().stop = true;
    assert!(
        bench
            .shared
            .write_merge(plan)
            .expect("write merge")
            .is_none(),
        "a stopping engine's merge ends early"
    );
    assert_eq!(
        bench.fs.list(&runs_dir),
        before,
        "the partial output {id} is deleted"
    );
    assert!(bench.plan().is_none(), "no merge planned while stopping");
    bench.shared.core.lock_state().stop = false;
    let fs = bench.fs.clone();
    let db = bench.reopen(fs);
    MergeBench::check(&*db, keys, 3, "after the reopen");
}

/// A merge's ops end at the first look at the stop after it is set, mid-stream: a
/// look every [`MERGE_STOP_CHECK_OPS`] ops, none missed, none early.
#[test]
fn a_merges_ops_end_at_the_first_look_after_the_stop() {
    let bench = MergeBench::new();
    let shared = &bench.shared;
    let set_at = 10u64;
    let mut yielded = 0u64;
    let ops = (0..10 * MERGE_STOP_CHECK_OPS).map(|i| {
        if i == set_at {
            shared.core.lock_state().stop = true;
        }
        yielded += 1;
        Ok((Bytes::from(i.to_be_bytes().to_vec()), None))
    });
    {
        let mut until = UntilStop {
            ops,
            core: &shared.core,
            seen: 0,
            stopped: false,
        };
        let got = until.by_ref().count() as u64;
        assert!(until.stopped);
        assert_eq!(got, MERGE_STOP_CHECK_OPS, "ended at the next look");
        assert_eq!(until.next().map(|_| ()), None, "stays ended");
    }
    assert_eq!(yielded, MERGE_STOP_CHECK_OPS, "no op read past the look");
    shared.core.lock_state().stop = false;
}

/// A merge the merger lists after the last checkpoint, with no unit applied since, is
/// checkpointed by the close: its output synced, then the manifest made durable. A
/// power cut after the close then reopens to the same values. Without the close's
/// checkpoint, redb's own close made the manifest durable with the output unsynced,
/// and the cut's image refused the open ("app run …: truncated").
#[test]
fn a_merge_listed_after_the_last_checkpoint_is_checkpointed_by_the_close() {
    use crate::fs::{DirFate, FileFate};
    let bench = MergeBench::new();
    for round in 0..4 {
        bench.write_round(40, round);
    }
    bench.engine.checkpoint().expect("checkpoint");
    let plan = bench.plan().expect("a merge is due");
    bench.write_and_install(plan);
    let fs = bench.fs.clone();
    // Closed first, then the power cut: every unsynced byte and directory entry
    // dropped.
    let options = bench.options.clone();
    drop(bench);
    let image = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
    let engine = JournalEngine::open(Arc::new(image), Path::new("/j"), options).expect("reopen");
    let db = engine.keyspace("app").expect("keyspace");
    MergeBench::check(&*db, 40, 3, "after the close and a cut");
}

/// The merge policy against ADR 0014's rule, worked by hand: the newest runs are taken
/// while their bytes together are at least the next older run's, and at most 8 runs
/// remain.
#[test]
fn the_merge_policy_takes_the_newest_runs_by_the_adr_rule() {
    let cases: [(&[u64], usize); 12] = [
        (&[], 0),
        (&[5], 0),
        (&[1, 1], 2),
        (&[1, 2], 0),
        (&[2, 1], 2),
        (&[1, 3], 0),
        (&[1, 1, 3], 2),
        (&[2, 2, 3], 3),
        (&[1, 1, 5], 2),
        (&[2, 1, 100, 100], 2),
        // Each run 3× the one before: no ratio holds, the cap takes the newest 2.
        (&[1, 3, 9, 27, 81, 243, 729, 2187, 6561], 2),
        (&[1, 3, 9, 27, 81, 243, 729, 2187], 0),
    ];
    for (sizes, want) in cases {
        assert_eq!(runs_to_merge_by_bytes(sizes), want, "{sizes:?}");
    }
    // Whatever the sizes, at most RUNS_MAX remain after the merge, and a merge takes
    // at least two.
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        let len = (rng % 20) as usize;
        let sizes: Vec<u64> = (0..len)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                1 + rng % 1000
            })
            .collect();
        let take = runs_to_merge_by_bytes(&sizes);
        let left = if take == 0 { len } else { len - take + 1 };
        assert!(left <= RUNS_MAX, "{sizes:?} → {take}");
        assert!(take == 0 || (2..=len).contains(&take), "{sizes:?} → {take}");
    }
}
