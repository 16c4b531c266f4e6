//! loom over the journal engine (ADR 0012, ADR 0013): its background applier against a
//! writer and a reader, through overlay hand-off, apply, checkpoint, trim and unlink.
//!
//! Under `--cfg loom` the engine's locks, condition variable and applier thread are loom's
//! (`src/sync.rs`), and each segment file operation and index commit is preceded by a loom
//! step (`Step::point`), so loom reorders a reader's segment read against the applier's
//! unlink and a reader's snapshot against an index commit. The file system is a `SimFs` and
//! the index is redb on it, both `std` inside; each of their calls is one step to loom.
//!
//! The model (each interleaving; `prepare_segments` off and on, one test each):
//! * a journal with one unit per segment (segment size 1 byte: every unit rolls), the index
//!   checkpointed after every apply, an overlay budget of one byte (a second unit waits for
//!   the first to be applied), and a keyspace keeping values of 64 bytes or more in the
//!   journal;
//! * the main thread writes `k = v1` (synced), starts a reader, writes `k = v2` and reads
//!   `k`; the engine's applier applies each unit, checkpoints, holds segment 0 while the
//!   index points into it and dooms it once `v2` replaces the pointer;
//! * the reader reads `k` twice.
//!
//! Checked in every interleaving:
//! * every read returns `v1` or `v2`, never an error (a segment unlinked under a reader's
//!   snapshot is `Corrupt`) and never nothing;
//! * the reader's reads never go back (`v2` then `v1`), and the writer reads `v2` once its
//!   write returned;
//! * no thread waits forever (loom reports a deadlock: a writer waiting for room that the
//!   applier never wakes);
//! * once every handle is dropped, segment 0 is deleted (the last reader's pin let it go),
//!   and a reopen reads `k = v2`.
//!
//! The first model runs a third time with every synced unit applied while it is synced
//! (ADR 0015, "Applied while it is synced"): the writer hands the unit to the applier once
//! it is placed, the applier's step writes and inserts beside the append and the sync, and
//! commits only once the unit is in the overlay. The same checks hold, and some
//! interleavings began a step while its unit synced (not vacuous). The first version of
//! the step's wait checked for the unit, let the lock go, then waited: loom found the
//! writer's push and wake-up falling in between (a deadlock to loom; a 50 ms stall in a
//! real run, the timeout).
//!
//! A second model reaches the applier's one sweep per step (ADR 0008): a plain keyspace
//! (no values kept in the journal) and an overlay with room for two units, so that in some
//! interleavings one apply step holds both of the writer's units, `k = v1` then `k = v2`,
//! and merges them (`NewestPerKey`). Checked in every interleaving: the reader's reads never
//! go back, the writer reads `v2` once its write returned, and a reopen reads `v2`; and, so
//! that the model is not vacuous, some interleavings applied the two units in one step and
//! some in two.
//!
//! Planted bugs in `src/journal/` (`segments.rs`, `reads.rs`, `applier.rs`, `manifest.rs`,
//! `merger/`, and one in `overlay.rs`), each a patch `tests/planted/<bug>.patch` applied with
//! `--cfg <bug>` set (`scripts/planted-bugs.sh`); with it, the tests expect loom to report a
//! failure (`should_panic`):
//! * `loom_bug_unlink_ignores_pins`: the trim unlinks a doomed segment under a reader;
//! * `loom_bug_pin_after_snapshot`: a reader pins its trim epoch after letting go of the
//!   lock its snapshot was taken under;
//! * `loom_bug_overlay_leaves_before_commit`: an applied unit's entries leave the overlay
//!   before its index commit (a read in between sees the old value);
//! * `loom_bug_no_wakeup_after_apply`: the applier does not wake writers waiting for room;
//! * `loom_bug_merge_keeps_oldest`: a step's merge keeps the oldest op on a key, not the
//!   newest (the merge model only: the first model never puts two units in one step);
//! * `loom_bug_placed_commits_before_queued`: a step begun while its unit is synced commits
//!   without waiting for the unit to enter the overlay (the first model applied while
//!   syncing: the step's invariant "applied units queued" panics holding the state lock,
//!   and loom reports the next lock's `PoisonError`).
//!
//! The merge model also catches `loom_bug_overlay_leaves_before_commit` (a reader finds
//! nothing between the units leaving the overlay and the step's commit).
//!
//! A third model reaches the merger thread (ADR 0014, "Merges on their own thread"): a
//! keyspace indexed by runs, one unit per apply step (each step writes a run), and three
//! synced writes of `k` (`v1`, `v2`, `v3`, one size). The second run makes a merge due, so
//! the merger plans, writes (no lock) and installs it beside the third step; in some
//! interleavings the third run is written between the plan and the install, and must stay
//! in front of the output. Checked in every interleaving: the writer reads `v3` once its
//! write returned and again after a checkpoint (never a merged older value), the
//! checkpoint succeeds (the engine was not poisoned: no install invariant broke), and a
//! reopen reads `v3`. (A reader thread beside the writer, as in the models above, took
//! it from 39,000 interleavings and ~60 s to 334,000 and 530 s; the reads it added are
//! the writer's here, at the points where a merge can have been listed.) Not vacuous: some interleavings listed a merge behind
//! a newer run (`JournalCounts::merges_behind_newer_runs`), and some merged nothing before
//! the close. Planted bugs it catches:
//! * `loom_bug_merge_id_at_write`: the output's id taken when its write begins, not with
//!   the plan (a newer run can then carry a lower id, and recovery orders runs by id): the
//!   install's invariant panics and the engine is poisoned; the model counts panics with a
//!   hook (the engine catches its threads' panics, and the install can come after the
//!   model's last call, while the close joins the merger);
//! * `loom_bug_merge_in_front`: the output listed in front of the runs written since the
//!   plan: a read finds the merged `v2` over `v3`.
//!
//! Run (prints the interleavings explored; `FLUSHPOINT_FULL=1` raises the preemption
//! bound from 2 to 3):
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release
//! --test loom_journal -- --nocapture --test-threads 1`; a planted bug:
//! `scripts/planted-bugs.sh loom_bug_<name>` (it applies the patch to a copy of the tree).
#![cfg(loom)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use flushpoint::journal::{
    Applier, JournalDb, JournalEngine, JournalOptions, KeyspaceIndex, KeyspaceOptions,
    segment_file_name,
};
use flushpoint::testing::SimFs;
use flushpoint::{Batch, Db, Durability};

const DIR: &str = "/journal";
/// The keyspace's threshold: `v1` and `v2` are kept in the journal, the index points.
const SEPARATE_FROM_BYTES: u32 = 64;
/// Bytes of `v1` and `v2`: above the threshold.
const VALUE_BYTES: usize = 100;
/// The preemption bound in CI (`LOOM_MAX_PREEMPTIONS` overrides it). Why 2: most
/// concurrency bugs need at most two preemptions (loom's guidance; each planted bug below
/// is found within two), and the model has three threads each taking many steps: unbounded
/// it does not finish. About 7,100 interleavings, 11 s.
const PREEMPTIONS: usize = 2;
/// The bound with `FLUSHPOINT_FULL=1`: about 146,000 interleavings, 160 s.
const PREEMPTIONS_FULL: usize = 3;

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        let full = std::env::var("FLUSHPOINT_FULL").is_ok_and(|v| v == "1");
        b.preemption_bound = Some(if full { PREEMPTIONS_FULL } else { PREEMPTIONS });
    }
    b
}

fn options(prepare_segments: bool, applier: Applier) -> JournalOptions {
    JournalOptions::default()
        // Every unit rolls to a segment of its own.
        .with_segment_bytes(1)
        // A checkpoint after every apply (and, so that loom's runs are deterministic, none
        // by time: the interval is never reached).
        .with_checkpoint_bytes(1)
        .with_checkpoint_interval(Duration::from_secs(3600))
        // A unit applies as soon as it is durable.
        .with_apply_batch_delay(Duration::ZERO)
        // One unit at a time: the next writer waits for room.
        .with_overlay_bytes_max(1)
        .with_index_cache_bytes(64 * 1024)
        .with_applier(applier)
        .with_prepare_segments(prepare_segments)
        // Every unit here is small and synced: each takes a prepared segment (the spare).
        .with_prepared_units_below_bytes(flushpoint::journal::PREPARED_UNITS_BELOW_BYTES)
        .with_run_block_bytes(flushpoint::journal::RUN_BLOCK_BYTES)
        // Applied once durable (the model with `while_syncing` sets 0).
        .with_apply_while_syncing_bytes_min(u64::MAX)
        // The model's threads share one OS thread: a merger's nice would lower it for the
        // rest of the run.
        .with_merger_nice_increment(0)
}

fn value(fill: u8) -> Bytes {
    Bytes::from(vec![fill; VALUE_BYTES])
}

fn put(db: &dyn Db, k: &Bytes, v: &Bytes) {
    let mut b = Batch::new();
    b.put(k.clone(), v.clone());
    db.write(&b, Durability::Synced).expect("write");
}

/// What a read may return: `Ok` with `v1` (1) or `v2` (2); anything else fails the model.
fn read(db: &dyn Db, k: &Bytes, v1: &Bytes, v2: &Bytes, who: &str) -> u8 {
    match db.get(k) {
        Ok(Some(v)) if v == *v1 => 1,
        Ok(Some(v)) if v == *v2 => 2,
        Ok(Some(v)) => panic!("{who} read a value never written ({} bytes)", v.len()),
        Ok(None) => panic!("{who} read nothing: the key was written before it started"),
        Err(e) => panic!("{who}'s read failed: {e}"),
    }
}

/// The race both models run on `db`: `k = v1` (synced); then a reader reads `k` twice
/// while the main thread writes `k = v2` (synced) and reads it back. The reader's reads
/// never go back and the writer reads `v2`; a reader whose first read was `v1` is counted
/// in `saw_v1`. Returns `k`, `v1` and `v2`.
fn write_twice_beside_a_reader(
    db: &Arc<JournalDb>,
    saw_v1: &Arc<AtomicUsize>,
) -> (Bytes, Bytes, Bytes) {
    let k = Bytes::from_static(b"k");
    let (v1, v2) = (value(1), value(2));
    put(&**db, &k, &v1);

    let reader = {
        let (db, k, v1, v2) = (db.clone(), k.clone(), v1.clone(), v2.clone());
        let saw_v1 = saw_v1.clone();
        loom::thread::spawn(move || {
            let first = read(&*db, &k, &v1, &v2, "the reader");
            let second = read(&*db, &k, &v1, &v2, "the reader");
            assert!(
                first <= second,
                "the reader's reads went back: v{first} then v{second}"
            );
            if first == 1 {
                saw_v1.fetch_add(1, Ordering::SeqCst);
            }
        })
    };

    put(&**db, &k, &v2);
    assert_eq!(
        read(&**db, &k, &v1, &v2, "the writer"),
        2,
        "the writer's read went back to the value it replaced"
    );
    reader.join().expect("reader");
    (k, v1, v2)
}

/// What one model's interleavings saw (its own: the tests may run at once).
#[derive(Default)]
struct Tally {
    executions: AtomicUsize,
    reader_saw_v1: Arc<AtomicUsize>,
    /// The first model: segment 0 was deleted while the threads ran.
    trimmed_while_running: AtomicUsize,
    /// The merge model: the two units were applied in one step (and so merged).
    one_step: AtomicUsize,
    /// The runs model: a merge was listed behind a run written while it was written.
    merged_behind_newer: AtomicUsize,
    /// The runs model: a merge was listed before the close.
    merged: AtomicUsize,
    /// The first model with `while_syncing`: a step began while its unit was synced.
    begun_while_syncing: AtomicUsize,
}

/// Prints the interleaving a model (named) failed in (loom panics out of `check`).
struct ReportFailure(&'static str, Arc<Tally>);

impl Drop for ReportFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            println!(
                "loom_journal ({}): failed in interleaving {}",
                self.0,
                self.1.executions.load(Ordering::SeqCst)
            );
        }
    }
}

fn model(prepare_segments: bool, while_syncing: bool) {
    let tally = Arc::new(Tally::default());
    let started = std::time::Instant::now();
    let report = ReportFailure(
        match (prepare_segments, while_syncing) {
            (_, true) => "applied while syncing",
            (true, false) => "prepare_segments true",
            (false, false) => "prepare_segments false",
        },
        tally.clone(),
    );
    let t = tally.clone();
    builder().check(move || {
        t.executions.fetch_add(1, Ordering::SeqCst);
        let fs = SimFs::new();
        let dir = Path::new(DIR);
        let engine = JournalEngine::open(
            Arc::new(fs.clone()),
            dir,
            options(prepare_segments, Applier::Background)
                .with_apply_while_syncing_bytes_min(if while_syncing { 0 } else { u64::MAX }),
        )
        .expect("open");
        let db = engine
            .keyspace_with(
                "blocks",
                KeyspaceOptions::separating_values_from(SEPARATE_FROM_BYTES),
            )
            .expect("keyspace");
        let (k, v1, v2) = write_twice_beside_a_reader(&db, &t.reader_saw_v1);
        let counts = engine.counts();
        if counts.segments_deleted > 0 {
            t.trimmed_while_running.fetch_add(1, Ordering::SeqCst);
        }
        if counts.steps_begun_while_syncing > 0 {
            t.begun_while_syncing.fetch_add(1, Ordering::SeqCst);
        }
        drop(db);
        drop(engine);

        // Every handle is gone: the applier stopped, the last checkpoint ran and no pin is
        // left, so segment 0 (no pointer into it since v2) is deleted.
        let files = fs.list(dir);
        assert!(
            !files.contains(&segment_file_name(0)),
            "segment 0 outlived every reader: {files:?}"
        );
        let engine = JournalEngine::open(
            Arc::new(fs.clone()),
            dir,
            options(prepare_segments, Applier::Inline),
        )
        .expect("reopen");
        let db = engine.keyspace("blocks").expect("keyspace");
        assert_eq!(read(&*db, &k, &v1, &v2, "the reopen"), 2);
    });
    drop(report);
    let executions = tally.executions.load(Ordering::SeqCst);
    let saw_v1 = tally.reader_saw_v1.load(Ordering::SeqCst);
    let trimmed = tally.trimmed_while_running.load(Ordering::SeqCst);
    let begun = tally.begun_while_syncing.load(Ordering::SeqCst);
    println!(
        "loom_journal (prepare_segments {prepare_segments}, applied while syncing \
         {while_syncing}): {executions} interleavings, the reader saw v1 in {saw_v1}, \
         segment 0 deleted before the handles were dropped in {trimmed}, a step begun while \
         its unit synced in {begun}; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        begun > 0,
        while_syncing,
        "steps begun while syncing exactly when the option asks"
    );
    // Not vacuous: both values were read by the reader, and the trim ran with it alive.
    assert!(
        saw_v1 > 0 && saw_v1 < executions,
        "the reader never raced the writer"
    );
    assert!(trimmed > 0, "no interleaving trimmed while the threads ran");
}

#[test]
#[cfg_attr(
    any(loom_bug_unlink_ignores_pins, loom_bug_pin_after_snapshot),
    should_panic(expected = "the segment holding the value is missing")
)]
#[cfg_attr(
    loom_bug_overlay_leaves_before_commit,
    should_panic(expected = "the reader's reads went back")
)]
#[cfg_attr(loom_bug_no_wakeup_after_apply, should_panic(expected = "deadlock"))]
fn reads_never_go_back_and_never_lose_a_segment() {
    model(false, false);
}

#[test]
#[cfg_attr(
    any(loom_bug_unlink_ignores_pins, loom_bug_pin_after_snapshot),
    should_panic(expected = "the segment holding the value is missing")
)]
#[cfg_attr(
    loom_bug_overlay_leaves_before_commit,
    should_panic(expected = "the reader's reads went back")
)]
#[cfg_attr(loom_bug_no_wakeup_after_apply, should_panic(expected = "deadlock"))]
fn reads_never_go_back_with_prepared_segments() {
    model(true, false);
}

/// The first model with every synced unit applied while it is synced (ADR 0015, "Applied
/// while it is synced"): the step begun on a unit not yet durable commits only once it is
/// in the overlay, so the reads are as above.
#[test]
#[cfg_attr(
    any(loom_bug_unlink_ignores_pins, loom_bug_pin_after_snapshot),
    should_panic(expected = "the segment holding the value is missing")
)]
#[cfg_attr(loom_bug_no_wakeup_after_apply, should_panic(expected = "deadlock"))]
// The planted bug: the step's invariant ("applied units queued") panics on the applier
// holding the state lock; loom reports the next lock's `PoisonError`.
#[cfg_attr(
    loom_bug_placed_commits_before_queued,
    should_panic(expected = "PoisonError")
)]
fn reads_never_go_back_with_units_applied_while_syncing() {
    model(false, true);
}

/// The merge model's options: a plain keyspace's units, one segment, an overlay with room
/// for both units (so the applier may find two durable units at once and apply them in one
/// step), and checkpoints only at close (the model checks the apply step, not the trim).
fn merge_options(applier: Applier) -> JournalOptions {
    JournalOptions::default()
        .with_segment_bytes(1 << 20)
        .with_checkpoint_bytes(u64::MAX)
        .with_checkpoint_interval(Duration::from_secs(3600))
        .with_apply_batch_delay(Duration::ZERO)
        // Room for both units: neither writer waits.
        .with_overlay_bytes_max(1 << 20)
        .with_index_cache_bytes(64 * 1024)
        .with_applier(applier)
        .with_prepare_segments(false)
        .with_prepared_units_below_bytes(flushpoint::journal::PREPARED_UNITS_BELOW_BYTES)
        .with_run_block_bytes(flushpoint::journal::RUN_BLOCK_BYTES)
        .with_apply_while_syncing_bytes_min(u64::MAX)
        // The model's threads share one OS thread: a merger's nice would lower it for the
        // rest of the run.
        .with_merger_nice_increment(0)
}

#[test]
#[cfg_attr(loom_bug_merge_keeps_oldest, should_panic(expected = "went back"))]
#[cfg_attr(
    loom_bug_overlay_leaves_before_commit,
    should_panic(expected = "the reader read nothing")
)]
fn a_step_of_two_units_keeps_the_newest_write() {
    let tally = Arc::new(Tally::default());
    let started = std::time::Instant::now();
    let report = ReportFailure("merge", tally.clone());
    let t = tally.clone();
    builder().check(move || {
        t.executions.fetch_add(1, Ordering::SeqCst);
        let fs = SimFs::new();
        let dir = Path::new(DIR);
        let engine = JournalEngine::open(
            Arc::new(fs.clone()),
            dir,
            merge_options(Applier::Background),
        )
        .expect("open");
        let db = engine.keyspace("state").expect("keyspace");
        let (k, v1, v2) = write_twice_beside_a_reader(&db, &t.reader_saw_v1);
        // Whatever the applier left is applied here, in one more step.
        engine.checkpoint().expect("checkpoint");
        let c = engine.counts();
        assert_eq!(c.units_written, 2, "one unit per synced write");
        if c.apply_steps == 1 {
            t.one_step.fetch_add(1, Ordering::SeqCst);
        }
        drop(db);
        drop(engine);

        let engine = JournalEngine::open(Arc::new(fs.clone()), dir, merge_options(Applier::Inline))
            .expect("reopen");
        let db = engine.keyspace("state").expect("keyspace");
        assert_eq!(
            read(&*db, &k, &v1, &v2, "the reopen"),
            2,
            "the reopen went back to v1"
        );
    });
    drop(report);
    let executions = tally.executions.load(Ordering::SeqCst);
    let saw_v1 = tally.reader_saw_v1.load(Ordering::SeqCst);
    let one_step = tally.one_step.load(Ordering::SeqCst);
    println!(
        "loom_journal (merge): {executions} interleavings, the two units applied in one step \
         in {one_step}, the reader saw v1 in {saw_v1}; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Not vacuous: both step shapes happened, and the reader raced the writer.
    assert!(
        one_step > 0 && one_step < executions,
        "the two units were applied in one step in {one_step} of {executions} interleavings"
    );
    assert!(
        saw_v1 > 0 && saw_v1 < executions,
        "the reader never raced the writer"
    );
}

/// The runs model's options: one unit per apply step (an overlay of one byte: the next
/// writer waits for room), one segment, checkpoints only when asked and at close.
fn runs_options(applier: Applier) -> JournalOptions {
    JournalOptions::default()
        .with_segment_bytes(1 << 20)
        .with_checkpoint_bytes(u64::MAX)
        .with_checkpoint_interval(Duration::from_secs(3600))
        .with_apply_batch_delay(Duration::ZERO)
        .with_overlay_bytes_max(1)
        .with_index_cache_bytes(64 * 1024)
        .with_applier(applier)
        .with_prepare_segments(false)
        .with_prepared_units_below_bytes(flushpoint::journal::PREPARED_UNITS_BELOW_BYTES)
        .with_run_block_bytes(flushpoint::journal::RUN_BLOCK_BYTES)
        .with_apply_while_syncing_bytes_min(u64::MAX)
        // The model's threads share one OS thread: a merger's nice would lower it for the
        // rest of the run.
        .with_merger_nice_increment(0)
}

/// `k`'s value in the runs model: `v3` is 3; anything else fails with `who` and what it saw.
fn read_v3(db: &dyn Db, k: &Bytes, vs: &[Bytes; 3], who: &str) {
    match db.get(k) {
        Ok(Some(v)) if v == vs[2] => {}
        Ok(Some(v)) => {
            let n = vs.iter().position(|x| *x == v).map_or(0, |i| i + 1);
            panic!("{who} read v{n} after v3 was written: a merged older value")
        }
        Ok(None) => panic!("{who} read nothing"),
        Err(e) => panic!("{who}'s read failed: {e}"),
    }
}

/// Panics counted by the hook [`count_panics`] installs: an engine thread's panic is caught
/// by the engine (it poisons itself), so a model can see it only here. A merger's install
/// can run after the model's last call into the engine, while the close joins it.
static PANICS: AtomicUsize = AtomicUsize::new(0);
/// The OS thread whose panics [`PANICS`] counts: the test's. loom runs a model's threads
/// as coroutines on the thread that calls `check`, so an engine thread's panic is on it,
/// while another test running at once (`cargo test` without `--test-threads 1`) panics on
/// its own.
static COUNTED_THREAD: std::sync::Mutex<Option<std::thread::ThreadId>> =
    std::sync::Mutex::new(None);

/// Counts the panics of the calling OS thread in [`PANICS`], then reports every panic as
/// the default hook does.
fn count_panics() {
    *COUNTED_THREAD.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current().id());
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let counted = *COUNTED_THREAD.lock().unwrap_or_else(|e| e.into_inner());
            if counted == Some(std::thread::current().id()) {
                PANICS.fetch_add(1, Ordering::SeqCst);
            }
            report(info);
        }));
    });
}

/// Fails the model if a thread of the engine panicked since the execution began.
fn assert_no_engine_panic() {
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        0,
        "a thread of the engine panicked (a broken invariant poisoned it)"
    );
}

#[test]
#[cfg_attr(
    loom_bug_merge_id_at_write,
    should_panic(expected = "a thread of the engine panicked")
)]
#[cfg_attr(
    loom_bug_merge_in_front,
    should_panic(expected = "after v3 was written: a merged older value")
)]
fn a_merge_beside_the_steps_stays_behind_newer_runs() {
    let tally = Arc::new(Tally::default());
    let started = std::time::Instant::now();
    let report = ReportFailure("runs", tally.clone());
    let t = tally.clone();
    count_panics();
    builder().check(move || {
        t.executions.fetch_add(1, Ordering::SeqCst);
        PANICS.store(0, Ordering::SeqCst);
        let fs = SimFs::new();
        let dir = Path::new(DIR);
        let engine =
            JournalEngine::open(Arc::new(fs.clone()), dir, runs_options(Applier::Background))
                .expect("open");
        let db = engine
            .keyspace_with("state", KeyspaceOptions::indexed_by_runs())
            .expect("keyspace");
        assert_eq!(db.options().index, KeyspaceIndex::Runs);
        let k = Bytes::from_static(b"k");
        let vs = [value(1), value(2), value(3)];
        for v in &vs {
            put(&*db, &k, v);
        }
        read_v3(&*db, &k, &vs, "the writer");
        // Fails if the engine was poisoned by then (a merge's install invariant broke): the
        // panic is reported first, as it would be after the close.
        let checkpoint = engine.checkpoint();
        assert_no_engine_panic();
        checkpoint.expect("checkpoint");
        read_v3(&*db, &k, &vs, "the writer, after a checkpoint");
        let c = engine.counts();
        assert_eq!(c.units_written, 3, "one unit per synced write");
        if c.run_merges > 0 {
            t.merged.fetch_add(1, Ordering::SeqCst);
        }
        if c.merges_behind_newer_runs > 0 {
            t.merged_behind_newer.fetch_add(1, Ordering::SeqCst);
        }
        drop(db);
        drop(engine);

        let engine = JournalEngine::open(Arc::new(fs.clone()), dir, runs_options(Applier::Inline))
            .expect("reopen");
        let db = engine.keyspace("state").expect("keyspace");
        read_v3(&*db, &k, &vs, "the reopen");
        // The first engine's threads were joined by its close: none panicked.
        assert_no_engine_panic();
    });
    drop(report);
    let executions = tally.executions.load(Ordering::SeqCst);
    let merged = tally.merged.load(Ordering::SeqCst);
    let behind = tally.merged_behind_newer.load(Ordering::SeqCst);
    println!(
        "loom_journal (runs): {executions} interleavings, a merge listed before the \
         checkpoint in {merged}, behind a run written during it in {behind}; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Not vacuous: the merger raced the third step, and some interleavings merged nothing
    // by the time of the checkpoint.
    assert!(
        behind > 0,
        "no merge was listed behind a run written during it ({executions} interleavings)"
    );
    assert!(
        merged < executions,
        "every interleaving merged before the checkpoint"
    );
}
