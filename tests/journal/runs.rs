//! A keyspace indexed by sorted runs (ADR 0014, step 2): each apply step writes the
//! keyspace's newest op per key as one run file, the checkpoint syncs the runs and their
//! directory before the durable commit that lists them, and recovery opens the listed runs.
//!
//! * writes go to runs, not to the index's tables, and read back from the overlay, the runs
//!   and after a reopen; the fsync counts of a checkpoint are stated exactly;
//! * a run no durable manifest lists is deleted on open, and its units replayed;
//! * a listed run that is missing or damaged refuses the open, naming the run, with
//!   nothing deleted;
//! * another keyspace's durable creation record, which makes the pending apply steps
//!   durable too, syncs their runs first (a cut after it loses nothing);
//! * options are checked before anything is written and fixed at creation (a keyspace
//!   exists from its first write, before the background applier has applied it);
//! * with the keyspace's large values kept in the journal (ADR 0016): each is written once,
//!   the runs pointing at it, and reads back through every read; a segment is kept while a
//!   listed run points into it (shadowed pointers included) and deleted once merges drop
//!   the last pointer; a reader's snapshot keeps it until dropped.
//!
//! The power cuts and EIO at every operation of a runs keyspace's life are in
//! `power_cut.rs` and `eio.rs` ("app" is indexed by runs there); the `Db` contract and the
//! `BTreeMap` model in `tests/db/conformance.rs` (`journal_runs*`).

use crate::support;

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::db::collect_range;
use flushpoint::fs::{FileSystem, OpenMode};
use flushpoint::journal::{
    Applier, JournalEngine, JournalOptions, KeyspaceIndex, KeyspaceOptions, RUNS_DIR,
    SEPARATE_VALUES_MIN_BYTES,
};
use flushpoint::testing::{DirFate, FileFate, SimFs};
use flushpoint::{Batch, Db, Direction, Durability, Error, KeyRange};

use support::fs::{Hook, HookedFs};

const DIR: &str = "/journal";
const APP: &str = "app";
/// Body bytes of a run's block here. Why: a few ops a block, so a run has several.
const RUN_BLOCK_BYTES: usize = 64;

fn options() -> JournalOptions {
    JournalOptions::default()
        .with_applier(Applier::Inline)
        .with_checkpoint_bytes(1 << 30)
        .with_run_block_bytes(RUN_BLOCK_BYTES)
}

fn open(fs: &SimFs) -> flushpoint::Result<JournalEngine> {
    JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options())
}

fn app(engine: &JournalEngine) -> Arc<flushpoint::journal::JournalDb> {
    engine
        .keyspace_with(APP, KeyspaceOptions::indexed_by_runs())
        .expect("runs keyspace")
}

fn key(i: u32) -> Bytes {
    Bytes::from(format!("acct/{:08x}", i.wrapping_mul(0x9e37_79b9)))
}

fn value(i: u32, round: u32) -> Bytes {
    Bytes::from(format!("value {i} round {round}"))
}

/// One synced unit per round: keys `0..n` put with `round`'s values, and every key `i`
/// with `i % 5 == round % 5` deleted.
fn write_round(db: &dyn Db, n: u32, round: u32) {
    write_round_of(db, n, round, value);
}

/// [`write_round`] with the values `value_of(key, round)`.
fn write_round_of(db: &dyn Db, n: u32, round: u32, value_of: fn(u32, u32) -> Bytes) {
    let mut b = Batch::new();
    for i in 0..n {
        if i % 5 == round % 5 {
            b.delete(key(i));
        } else {
            b.put(key(i), value_of(i, round));
        }
    }
    db.write(&b, Durability::Synced).expect("write");
}

/// What the keyspace holds after rounds `0..=last` of `write_round(n)`: the model.
fn model(n: u32, last: u32) -> Vec<(Bytes, Bytes)> {
    model_of(n, last, value)
}

/// [`model`] for [`write_round_of`] with `value_of`.
fn model_of(n: u32, last: u32, value_of: fn(u32, u32) -> Bytes) -> Vec<(Bytes, Bytes)> {
    let mut m: Vec<(Bytes, Bytes)> = (0..n)
        .filter(|i| i % 5 != last % 5)
        .map(|i| (key(i), value_of(i, last)))
        .collect();
    m.sort();
    m
}

fn all(db: &dyn Db) -> Vec<(Bytes, Bytes)> {
    collect_range(db, KeyRange::all(), Direction::Forward).expect("range")
}

fn runs_on_disk(fs: &SimFs) -> Vec<String> {
    let mut names: Vec<String> = fs
        .list(&Path::new(DIR).join(RUNS_DIR).join(APP))
        .into_iter()
        .filter(|n| n.ends_with(".run"))
        .collect();
    names.sort();
    names
}

/// The checks below (`model`, `all`) must be able to fail: a wrong value, a lost delete and
/// a missing key each differ from the model.
#[test]
fn the_model_check_rejects_a_wrong_value_a_lost_delete_and_a_missing_key() {
    let good = model(20, 3);
    let mut wrong = good.clone();
    wrong[0].1 = value(0, 2);
    assert_ne!(wrong, good);
    let lost_delete = model(20, 2);
    assert_ne!(lost_delete, good, "round 2 deletes other keys than round 3");
    let mut missing = good.clone();
    missing.pop();
    assert_ne!(missing, good);
}

#[test]
fn writes_go_to_runs_and_read_back_from_the_overlay_the_runs_and_after_a_reopen() {
    let fs = SimFs::new();
    let engine = open(&fs).expect("open");
    let db = app(&engine);
    assert_eq!(db.options().index, KeyspaceIndex::Runs);
    // Each synced unit is applied inline: one run per round; rounds of one size, so each
    // step's run is merged with the one below it (ADR 0014: the newest at least as large as
    // the next older, which lost its tombstones), into the oldest run: its tombstones are
    // dropped.
    for round in 0..4 {
        write_round(&*db, 40, round);
        assert_eq!(all(&*db), model(40, round), "round {round}");
    }
    let counts = engine.counts();
    assert_eq!(counts.run_merges, 3);
    assert_eq!(
        counts.merges_behind_newer_runs, 0,
        "inline, a merge follows its step: no run is written while it is"
    );
    assert_eq!(
        counts.runs_written,
        4 + 3,
        "a run per apply step and per merge"
    );
    assert_eq!(
        runs_on_disk(&fs).len(),
        7,
        "the merged inputs stay until a checkpoint no longer lists them"
    );
    // Point reads: the newest run answers; a key deleted in the last round is absent even
    // though older runs hold a value for it.
    assert_eq!(db.get(&key(1)).unwrap(), Some(value(1, 3)));
    assert_eq!(db.get(&key(3)).unwrap(), None, "deleted by round 3");
    let reversed: Vec<_> = collect_range(&*db, KeyRange::all(), Direction::Reverse).unwrap();
    let mut expected = model(40, 3);
    expected.reverse();
    assert_eq!(reversed, expected);
    // The index holds no table for it: its entries are the runs'.
    let usage = engine.usage().expect("usage");
    let app_usage = usage.keyspaces.get(APP).expect("app usage");
    assert_eq!(app_usage.entries, 32);
    assert!(app_usage.index_bytes > 0);
    // A checkpoint syncs the one run left (the merged inputs never will be listed: no
    // sync) and its directory once, commits, then unlinks the 6 inputs.
    let before = engine.counts();
    engine.checkpoint().expect("checkpoint");
    let after = engine.counts();
    assert_eq!(after.run_sync_data_calls - before.run_sync_data_calls, 1);
    assert_eq!(after.dir_sync_calls - before.dir_sync_calls, 1);
    assert_eq!(after.checkpoints - before.checkpoints, 1);
    assert_eq!(after.runs_deleted - before.runs_deleted, 6);
    assert_eq!(runs_on_disk(&fs), [format!("{:020}.run", 6)]);
    // The next round's run is merged too; its checkpoint syncs that one output.
    write_round(&*db, 40, 4);
    engine.checkpoint().expect("checkpoint");
    let again = engine.counts();
    assert_eq!(again.run_sync_data_calls - after.run_sync_data_calls, 1);
    assert_eq!(runs_on_disk(&fs), [format!("{:020}.run", 8)]);
    drop((db, engine));
    let engine = open(&fs).expect("reopen");
    let db = engine.keyspace(APP).expect("keyspace");
    assert_eq!(
        db.options().index,
        KeyspaceIndex::Runs,
        "the kind is durable"
    );
    assert_eq!(all(&*db), model(40, 4));
    assert_eq!(engine.counts().runs_written, 0, "nothing to replay");
}

/// A checkpoint with nothing applied or listed since the last one commits nothing and
/// syncs nothing: not the index, and not a run the last one made durable (each run is
/// synced once, by the checkpoint that first lists it). Found by mutation testing: a
/// checkpoint that never forgot its synced runs re-synced them, and re-committed, at every
/// later checkpoint — on an idle background engine, once per interval, forever.
#[test]
fn a_checkpoint_with_nothing_new_since_the_last_commits_and_syncs_nothing() {
    let fs = SimFs::new();
    let engine = open(&fs).expect("open");
    let db = app(&engine);
    let plain = engine.keyspace("plain").expect("plain keyspace");
    write_round(&*db, 40, 0);
    write_round(&*plain, 40, 0);
    engine.checkpoint().expect("checkpoint");
    let first = engine.counts();
    let ops = fs.stats().log.len();
    engine.checkpoint().expect("a second checkpoint");
    let second = engine.counts();
    assert_eq!(
        second.checkpoints, first.checkpoints,
        "no new durable commit"
    );
    assert_eq!(
        second.run_sync_data_calls, first.run_sync_data_calls,
        "no run synced again"
    );
    let log = fs.stats().log;
    assert_eq!(log.len(), ops, "no file operation: {:?}", &log[ops..]);
    // A new step's run, smaller than the one below it (not merged into it), is synced once,
    // by the next checkpoint; the older run is not synced again.
    write_round(&*db, 8, 1);
    engine.checkpoint().expect("checkpoint");
    let third = engine.counts();
    assert_eq!(
        third.run_merges, second.run_merges,
        "the small run stays apart"
    );
    assert_eq!(third.run_sync_data_calls - second.run_sync_data_calls, 1);
    assert_eq!(third.checkpoints - second.checkpoints, 1);
}

/// Under the background applier, merges run on their own thread beside the apply steps
/// (ADR 0014, "Merges on their own thread"): many rounds, each read back against the model
/// as it lands, then read whole, checkpointed, and reopened (recovery orders the runs by id,
/// so an output listed with a higher id than a newer run would bring older values back).
#[test]
fn merges_beside_the_background_applier_lose_and_revive_nothing() {
    let fs = SimFs::new();
    let options = options()
        .with_applier(Applier::Background)
        .with_apply_batch_delay(std::time::Duration::ZERO)
        // Room for about two rounds' units: writers wait for the applier, so its steps are
        // small and many, each a run, and merges come often.
        .with_overlay_bytes_max(4 * 1024)
        .with_checkpoint_bytes(64 * 1024);
    let open_bg = || JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options.clone());
    let engine = open_bg().expect("open");
    let db = app(&engine);
    // At least `ROUNDS`, and on until two merges were listed (how many land in a given
    // number of rounds depends on how the threads were scheduled), at most `4 * ROUNDS`.
    const ROUNDS: u32 = 120;
    let mut rounds = 0;
    while rounds < ROUNDS || (engine.counts().run_merges < 2 && rounds < 4 * ROUNDS) {
        let round = rounds;
        rounds += 1;
        write_round(&*db, 60, round);
        // The newest value of a key kept this round (`kept % 5 != round % 5`), and a key
        // deleted this round.
        let kept = (round + 1) % 60;
        assert_eq!(
            db.get(&key(kept)).unwrap(),
            Some(value(kept, round)),
            "round {round}"
        );
        assert_eq!(db.get(&key(round % 5)).unwrap(), None, "round {round}");
    }
    assert_eq!(all(&*db), model(60, rounds - 1));
    engine.checkpoint().expect("checkpoint");
    let counts = engine.counts();
    assert!(counts.apply_steps >= 20, "steps were small: {counts:?}");
    assert!(counts.run_merges >= 2, "merges ran: {counts:?}");
    assert!(
        counts.checkpoints > 1,
        "checkpoints ran between merges: {counts:?}"
    );
    drop((db, engine));
    let engine = open_bg().expect("reopen");
    let db = engine.keyspace(APP).expect("keyspace");
    assert_eq!(all(&*db), model(60, rounds - 1), "after the reopen");
}

#[test]
fn an_unlisted_run_is_deleted_on_open_and_its_units_replayed() {
    let fs = SimFs::new();
    let engine = open(&fs).expect("open");
    let db = app(&engine);
    write_round(&*db, 30, 0);
    engine.checkpoint().expect("checkpoint");
    // Applied, in run 1, merged with run 0 into run 2; not checkpointed.
    write_round(&*db, 30, 1);
    assert_eq!(runs_on_disk(&fs).len(), 3);
    // A power cut now (not a close, which would checkpoint): runs 1 and 2 were never
    // listed durably; the unit is durable. A stray file no manifest lists is there too.
    let image = fs.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    drop((db, engine));
    let stray = Path::new(DIR)
        .join(RUNS_DIR)
        .join(APP)
        .join(format!("{:020}.run", 77));
    image
        .open_file(&stray, OpenMode::CreateTruncate)
        .unwrap()
        .write_at(0, b"not a run")
        .unwrap();
    let engine = open(&image).expect("recovery");
    let db = engine.keyspace(APP).unwrap();
    assert_eq!(all(&*db), model(30, 1));
    // Runs 1 (the step's) and 2 (its merge with run 0) and the stray are deleted; the
    // replayed unit is in a new run whose id is above every file seen (78), merged with
    // run 0 into run 79 by the open's step, whose checkpoint unlinks both inputs.
    assert_eq!(runs_on_disk(&image), [format!("{:020}.run", 79)]);
}

/// A crash image of a journal with two checkpointed runs, and the path of each.
fn checkpointed_runs() -> (SimFs, Vec<std::path::PathBuf>) {
    let fs = SimFs::new();
    let engine = open(&fs).expect("open");
    let db = app(&engine);
    // A small round after a large one: not merged (10 ops beside 200), two runs.
    write_round(&*db, 200, 0);
    write_round(&*db, 10, 1);
    engine.checkpoint().expect("checkpoint");
    assert_eq!(engine.counts().run_merges, 0);
    drop((db, engine));
    let dir = Path::new(DIR).join(RUNS_DIR).join(APP);
    let paths = runs_on_disk(&fs).iter().map(|n| dir.join(n)).collect();
    (fs.crash_image(DirFate::KeepAll, FileFate::KeepAll), paths)
}

fn assert_refused_naming(result: flushpoint::Result<JournalEngine>, run: &str) {
    match result {
        Err(e @ Error::Corrupt { .. }) => {
            let text = e.to_string();
            assert!(text.contains(run), "{text} names {run}");
        }
        Err(e) => panic!("expected Corrupt naming {run}, got {e}"),
        Ok(_) => panic!("expected the open refused for {run}"),
    }
}

/// A run's writeback start that fails (`sync_file_range` reporting a write error) is a
/// failed write: the step fails and the engine is poisoned, refusing later writes, never
/// listing the run; the unit, durable before its step, is replayed by the next open.
/// Planted: the error ignored in `RunWriter::finish` → the second write succeeds, caught.
#[test]
fn a_failed_run_writeback_poisons_and_loses_nothing_acknowledged() {
    let fs = SimFs::new();
    let faulty = HookedFs::new(
        fs.clone(),
        Hook::FailWritebackUnder(Path::new(DIR).join(RUNS_DIR).join(APP)),
    );
    let engine = JournalEngine::open(Arc::new(faulty), Path::new(DIR), options()).expect("open");
    let db = app(&engine);
    let mut b = Batch::new();
    b.put(key(1), value(1, 0));
    // Inline: the step runs in the write, after the unit's sync; its failure is the write's.
    let err = db
        .write(&b, Durability::Synced)
        .expect_err("the step's failed writeback fails the write");
    assert_eq!(err.kind(), flushpoint::ErrorKind::Io, "{err}");
    assert!(err.to_string().contains("writeback"), "{err}");
    let mut again = Batch::new();
    again.put(key(2), value(2, 0));
    let err = db
        .write(&again, Durability::Synced)
        .expect_err("a poisoned engine refuses writes");
    assert_eq!(err.kind(), flushpoint::ErrorKind::Poisoned, "{err}");
    drop(db);
    drop(engine);
    let engine = open(&fs).expect("reopen");
    let db = app(&engine);
    assert_eq!(
        db.get(&key(1)).unwrap(),
        Some(value(1, 0)),
        "the durable unit replayed"
    );
    assert_eq!(db.get(&key(2)).unwrap(), None);
}

/// A doomed run found already gone when its checkpoint unlinks it (deleted by another
/// hand, or by an unlink that returned an error after it took effect) is not an error: the
/// checkpoint is durable, the other inputs are unlinked, and the engine goes on. Found by
/// mutation testing: the `NotFound` arm treated as a failure passed every journal test.
#[test]
fn a_doomed_run_already_gone_is_not_an_error() {
    let fs = SimFs::new();
    let first_run = Path::new(DIR)
        .join(RUNS_DIR)
        .join(APP)
        .join(format!("{:020}.run", 0));
    let faulty = HookedFs::new(fs.clone(), Hook::RemoveGone(first_run.clone()));
    let engine = JournalEngine::open(Arc::new(faulty), Path::new(DIR), options()).expect("open");
    let db = app(&engine);
    // As in `writes_go_to_runs_...`: four rounds, three merges, run 6 the one left.
    for round in 0..4 {
        write_round(&*db, 40, round);
    }
    assert_eq!(engine.counts().run_merges, 3);
    engine
        .checkpoint()
        .expect("a gone doomed run fails no checkpoint");
    assert_eq!(
        engine.counts().runs_deleted,
        5,
        "the other five inputs unlinked, the gone one not counted"
    );
    assert_eq!(runs_on_disk(&fs), [format!("{:020}.run", 6)]);
    write_round(&*db, 40, 4);
    engine.checkpoint().expect("the engine goes on");
    assert_eq!(all(&*db), model(40, 4));
}

/// The same for a trimmed segment found already gone: the checkpoint stands, the other
/// segments below it are deleted, and the engine goes on (the `NotFound` arm of
/// `unlink_doomed`, also found by mutation testing).
#[test]
fn a_trimmed_segment_already_gone_is_not_an_error() {
    let fs = SimFs::new();
    let faulty = HookedFs::new(
        fs.clone(),
        Hook::RemoveGone(Path::new(DIR).join(flushpoint::journal::segment_file_name(0))),
    );
    let options = options()
        .with_segment_bytes(4096)
        .with_prepare_segments(false);
    let engine = JournalEngine::open(Arc::new(faulty), Path::new(DIR), options).expect("open");
    let db = engine.keyspace("plain").expect("keyspace");
    // ~1.4 KB units in 4 KiB segments: segment 0 full, segment 1 active.
    for round in 0..4 {
        write_round(&*db, 40, round);
    }
    engine
        .checkpoint()
        .expect("a gone trimmed segment fails no checkpoint");
    let segments = fs
        .list(Path::new(DIR))
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .count();
    assert_eq!(segments, 1, "only the active segment is left");
    let c = engine.counts();
    assert_eq!(c.checkpoints, 1, "{c:?}");
    assert_eq!(c.segments_deleted, 0, "the gone one is not counted: {c:?}");
    write_round(&*db, 40, 4);
    engine.checkpoint().expect("the engine goes on");
    assert_eq!(all(&*db), model(40, 4));
}

/// A listed run that cannot be opened for another reason than its absence is an I/O
/// error naming its file, not "missing" corruption: the operator's fix differs (the disk,
/// not the home), and nothing is deleted.
#[test]
fn an_io_error_opening_a_listed_run_is_an_io_error_naming_it_not_corruption() {
    let (fs, paths) = checkpointed_runs();
    let faulty = HookedFs::new(fs.clone(), Hook::FailOpen(paths[0].clone()));
    let Err(err) = JournalEngine::open(Arc::new(faulty), Path::new(DIR), options()) else {
        panic!("the open fails");
    };
    assert_eq!(err.kind(), flushpoint::ErrorKind::Io, "{err}");
    let text = err.to_string();
    assert!(text.contains(&paths[0].display().to_string()), "{text}");
    assert_eq!(runs_on_disk(&fs).len(), 2, "nothing deleted");
    // The same runs open once the disk reads again.
    open(&fs).expect("open");
}

#[test]
fn a_listed_run_missing_or_damaged_refuses_the_open_naming_it() {
    // Missing.
    let (fs, paths) = checkpointed_runs();
    assert_eq!(paths.len(), 2);
    fs.remove_file(&paths[0]).unwrap();
    assert_refused_naming(open(&fs), "app run 0");
    assert_eq!(runs_on_disk(&fs).len(), 1, "nothing deleted by the refusal");
    // Damaged: one byte of its footer, then one byte of a block (found when read).
    let (fs, paths) = checkpointed_runs();
    let f = fs.open_file(&paths[1], OpenMode::Existing).unwrap();
    let len = f.len().unwrap();
    let mut byte = [0u8];
    f.read_at(len - 10, &mut byte).unwrap();
    f.write_at(len - 10, &[byte[0] ^ 0x40]).unwrap();
    assert_refused_naming(open(&fs), "app run 1");
    let (fs, paths) = checkpointed_runs();
    let f = fs.open_file(&paths[1], OpenMode::Existing).unwrap();
    // The first block's body starts after the 32-byte header and its 4-byte length.
    f.read_at(40, &mut byte).unwrap();
    f.write_at(40, &[byte[0] ^ 0x40]).unwrap();
    let engine = open(&fs).expect("a block is checked when read");
    let db = engine.keyspace(APP).unwrap();
    let read = collect_range(&*db, KeyRange::all(), Direction::Forward);
    match read {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("app run 1"), "{e}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn another_keyspaces_durable_record_syncs_the_pending_runs_first() {
    let fs = SimFs::new();
    let engine = open(&fs).expect("open");
    let db = app(&engine);
    write_round(&*db, 30, 0);
    // Applied into an unsynced run; not checkpointed. The record below is a durable redb
    // commit: it makes that apply step's manifest row durable, so the run is synced first.
    let before = engine.counts();
    engine
        .keyspace_with("blocks", KeyspaceOptions::separating_values_from(1024))
        .expect("record");
    assert_eq!(
        engine.counts().run_sync_data_calls - before.run_sync_data_calls,
        1
    );
    // A cut now, losing every unsynced write: the listed run must be whole.
    let image = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
    let engine2 = open(&image).expect("recovery");
    assert_eq!(all(&*engine2.keyspace(APP).unwrap()), model(30, 0));
}

#[test]
fn options_are_checked_before_anything_is_written_and_fixed_at_creation() {
    let fs = SimFs::new();
    let engine = open(&fs).expect("open");
    let ops_before = fs.ops();
    // Runs with values kept in the journal (ADR 0016): the threshold is checked as for the
    // tree.
    let too_small = KeyspaceOptions::indexed_by_runs()
        .with_values_separated_from(SEPARATE_VALUES_MIN_BYTES - 1);
    assert!(matches!(
        engine.keyspace_with(APP, too_small),
        Err(Error::InvalidInput(_))
    ));
    for bad in ["a/b", "..", "app state", "é"] {
        assert!(
            matches!(
                engine.keyspace_with(bad, KeyspaceOptions::indexed_by_runs()),
                Err(Error::InvalidInput(_))
            ),
            "{bad:?}"
        );
    }
    assert_eq!(fs.ops(), ops_before, "nothing written by a refusal");
    // A keyspace written before it is asked for runs keeps the tree.
    let state = engine.keyspace("state").unwrap();
    let mut b = Batch::new();
    b.put(Bytes::from_static(b"k"), Bytes::from_static(b"v"));
    state.write(&b, Durability::Synced).unwrap();
    let again = engine
        .keyspace_with("state", KeyspaceOptions::indexed_by_runs())
        .unwrap();
    assert_eq!(again.options().index, KeyspaceIndex::Tree);
    // And a runs keyspace asked for the tree keeps its runs.
    let db = app(&engine);
    let plain = engine
        .keyspace_with(APP, KeyspaceOptions::default())
        .unwrap();
    assert_eq!(plain.options().index, KeyspaceIndex::Runs);
    drop((db, plain, again, state, engine));
    let engine = open(&fs).unwrap();
    assert_eq!(
        engine.keyspace(APP).unwrap().options().index,
        KeyspaceIndex::Runs
    );
}

/// A keyspace counts as existing from its first write, before any unit of it is applied:
/// one written by a unit still waiting for the background applier keeps the tree when
/// asked for runs, and another keyspace asked for runs meanwhile gets them. Why: the
/// waiting unit's keys would otherwise be applied to a table while the keyspace is
/// recorded as runs, or the second keyspace would silently lose its options. With
/// `UnitOps::writes` (`src/journal/overlay.rs`) mutated to `true`, to `false`, or its `==`
/// to `!=`, the journal's conformance, recovery and node suites pass; this test fails.
#[test]
fn a_keyspace_written_by_a_unit_not_yet_applied_keeps_its_options() {
    let fs = SimFs::new();
    let engine = JournalEngine::open(
        Arc::new(fs.clone()),
        Path::new(DIR),
        options()
            .with_applier(Applier::Background)
            // Nothing is due to be applied during the test: the unit waits in the queue.
            .with_apply_batch_delay(std::time::Duration::from_secs(3600))
            .with_checkpoint_interval(std::time::Duration::from_secs(3600)),
    )
    .expect("open");
    let state = engine.keyspace("state").unwrap();
    let mut b = Batch::new();
    b.put(Bytes::from_static(b"k"), Bytes::from_static(b"v"));
    state.write(&b, Durability::Synced).unwrap();
    assert_eq!(
        engine.counts().apply_steps,
        0,
        "the unit waits, not applied"
    );
    let again = engine
        .keyspace_with("state", KeyspaceOptions::indexed_by_runs())
        .unwrap();
    assert_eq!(
        again.options().index,
        KeyspaceIndex::Tree,
        "written, so existing: its options stay"
    );
    let fresh = engine
        .keyspace_with("fresh", KeyspaceOptions::indexed_by_runs())
        .unwrap();
    assert_eq!(
        fresh.options().index,
        KeyspaceIndex::Runs,
        "never written: created with the options asked for"
    );
    assert_eq!(engine.counts().apply_steps, 0, "still waiting");
    assert_eq!(state.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

/// The threshold of the separating runs keyspace below (ADR 0016).
const FROM: u32 = 1024;
/// A large value's size here: above [`FROM`].
const BIG_BYTES: usize = 2000;

/// Small segments, so that a few large values fill one and the journal rolls.
fn separating_options() -> JournalOptions {
    options().with_segment_bytes(8 * 1024)
}

fn open_separating(fs: &SimFs) -> JournalEngine {
    JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), separating_options()).expect("open")
}

/// The app keyspace indexed by runs, its values of [`FROM`] bytes or more in the journal.
fn app_separating(engine: &JournalEngine) -> Arc<flushpoint::journal::JournalDb> {
    engine
        .keyspace_with(
            APP,
            KeyspaceOptions::indexed_by_runs().with_values_separated_from(FROM),
        )
        .expect("separating runs keyspace")
}

/// A large value, different for each key and round.
fn big(i: u32, round: u32) -> Bytes {
    Bytes::from(
        (0..BIG_BYTES)
            .map(|j| (i as usize * 31 + round as usize * 17 + j * 7) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// Round `round`'s value of key `i`: large when `i + round` is even, else small.
fn mixed(i: u32, round: u32) -> Bytes {
    if (i + round).is_multiple_of(2) {
        big(i, round)
    } else {
        value(i, round)
    }
}

fn mixed_model(n: u32, last: u32) -> Vec<(Bytes, Bytes)> {
    model_of(n, last, mixed)
}

/// Whether any file under `dir` (one level) holds `needle`.
fn any_file_holds(fs: &SimFs, dir: &Path, needle: &[u8]) -> bool {
    fs.list(dir).into_iter().any(|name| {
        fs.read(&dir.join(&name))
            .is_some_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
    })
}

fn segments_on_disk(fs: &SimFs) -> Vec<String> {
    fs.list(Path::new(DIR))
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .collect()
}

/// ADR 0016: a runs keyspace keeping its large values in the journal writes each once, to
/// its unit; its runs hold pointers (and its small values inline), merged like any op; every
/// read (point, many, range either way, after a reopen) returns the values.
#[test]
fn large_values_are_written_once_and_read_back_through_the_runs_pointers() {
    let fs = SimFs::new();
    let engine = open_separating(&fs);
    let db = app_separating(&engine);
    let asked = KeyspaceOptions::indexed_by_runs().with_values_separated_from(FROM);
    assert_eq!(db.options(), asked);
    let n = 12;
    let mut large_puts = 0;
    for round in 0..4 {
        write_round_of(&*db, n, round, mixed);
        large_puts += (0..n)
            .filter(|i| i % 5 != round % 5 && (i + round).is_multiple_of(2))
            .count() as u64;
        assert_eq!(all(&*db), mixed_model(n, round), "round {round}");
    }
    let c = engine.counts();
    assert_eq!(c.values_kept_in_journal, large_puts, "{c:?}");
    assert!(c.run_merges > 0, "{c:?}");
    // Written once: the last round's large values are in a segment, in no run file.
    let runs_dir = Path::new(DIR).join(RUNS_DIR).join(APP);
    for (k, v) in mixed_model(n, 3) {
        if v.len() == BIG_BYTES {
            assert!(
                !any_file_holds(&fs, &runs_dir, &v[..64]),
                "{k:?}'s value is in a run"
            );
            assert!(any_file_holds(&fs, Path::new(DIR), &v[..64]));
        }
    }
    let before = engine.counts().values_read_from_journal;
    let keys: Vec<Bytes> = (0..n).map(key).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let got = db.get_many(&refs).unwrap();
    for (i, v) in got.into_iter().enumerate() {
        let i = i as u32;
        let expected = (i % 5 != 3).then(|| mixed(i, 3));
        assert_eq!(v, expected, "key {i}");
    }
    assert!(engine.counts().values_read_from_journal > before);
    let mut reversed = mixed_model(n, 3);
    reversed.reverse();
    assert_eq!(
        collect_range(&*db, KeyRange::all(), Direction::Reverse).unwrap(),
        reversed
    );
    let usage = engine.usage().unwrap();
    let app_usage = usage.keyspaces[APP];
    let large_now = mixed_model(n, 3)
        .iter()
        .filter(|(_, v)| v.len() == BIG_BYTES)
        .count() as u64;
    assert_eq!(app_usage.entries, mixed_model(n, 3).len() as u64);
    assert_eq!(app_usage.values_in_journal, large_now);
    assert_eq!(
        app_usage.values_in_journal_bytes,
        large_now * BIG_BYTES as u64
    );
    engine.checkpoint().unwrap();
    drop((db, engine));
    let engine = open_separating(&fs);
    let db = engine.keyspace(APP).unwrap();
    assert_eq!(db.options(), asked, "the options are durable");
    assert_eq!(all(&*db), mixed_model(n, 3));
}

/// Each key of `0..n` put with a large value of `round`, one synced unit per key, so that
/// the values spread over several segments.
fn write_big_per_unit(db: &dyn Db, n: u32, round: u32) {
    for i in 0..n {
        let mut b = Batch::new();
        b.put(key(i), big(i, round));
        db.write(&b, Durability::Synced).expect("write");
    }
}

/// Every key of `0..n` put with a small value of `round`, in one synced unit.
fn write_small(db: &dyn Db, n: u32, round: u32) {
    let mut b = Batch::new();
    for i in 0..n {
        b.put(key(i), value(i, round));
    }
    db.write(&b, Durability::Synced).expect("write");
}

/// A separating runs keyspace whose keys `0..n` hold large values of round 0, one unit
/// each, checkpointed.
fn separating_with_big_values(
    fs: &SimFs,
    n: u32,
) -> (JournalEngine, Arc<flushpoint::journal::JournalDb>) {
    let engine = open_separating(fs);
    let db = app_separating(&engine);
    write_big_per_unit(&*db, n, 0);
    engine.checkpoint().unwrap();
    (engine, db)
}

/// ADR 0016: a segment is kept while a listed run points into it — shadowed pointers
/// included — and deleted by the checkpoint after merges have dropped the last pointer
/// into it; the keyspace reads its newest values throughout and after a reopen.
#[test]
fn a_segment_is_held_while_a_run_points_into_it_and_deleted_once_merges_drop_its_pointers() {
    let fs = SimFs::new();
    let n = 12;
    let (engine, db) = separating_with_big_values(&fs, n);
    let c = engine.counts();
    assert_eq!(c.segments_deleted, 0, "every segment holds values: {c:?}");
    let on_disk = segments_on_disk(&fs).len() as u64;
    assert!(on_disk >= 4, "the values spread over segments: {on_disk}");
    assert_eq!(
        c.segments_kept_for_values,
        on_disk - 1,
        "all but the active one are held for their values: {c:?}"
    );
    // Small values over every key: the large ones are shadowed, but their pointers are in
    // older runs until merges drop them.
    let mut round = 1;
    write_small(&*db, n, round);
    let model_small = |round: u32| -> Vec<(Bytes, Bytes)> {
        let mut m: Vec<_> = (0..n).map(|i| (key(i), value(i, round))).collect();
        m.sort();
        m
    };
    assert_eq!(all(&*db), model_small(round));
    // More rounds until the merges reach the runs holding the pointers (the policy merges
    // the newest runs into the older ones as they grow): bounded, and then every segment
    // but the active one goes.
    while engine.counts().segments_deleted == 0 {
        assert!(
            round < 12,
            "no merge dropped the pointers: {:?}",
            engine.counts()
        );
        round += 1;
        write_small(&*db, n, round);
        engine.checkpoint().unwrap();
        assert_eq!(all(&*db), model_small(round), "round {round}");
    }
    let c = engine.counts();
    assert_eq!(
        c.segments_deleted,
        on_disk - 1,
        "every segment held for a value is deleted: {c:?}"
    );
    assert!(!segments_on_disk(&fs).contains(&flushpoint::journal::segment_file_name(0)));
    assert_eq!(engine.usage().unwrap().keyspaces[APP].values_in_journal, 0);
    drop((db, engine));
    let engine = open_separating(&fs);
    assert_eq!(all(&*engine.keyspace(APP).unwrap()), model_small(round));
}

/// ADR 0016: a reader's snapshot of the runs keeps the segments its pointers lead into,
/// even after a merge has dropped them from the listed runs and a checkpoint has doomed
/// them; they go when it is dropped.
#[test]
fn a_reader_keeps_the_segments_its_runs_point_into_across_merges_until_it_is_dropped() {
    let fs = SimFs::new();
    let n = 12;
    let (engine, db) = separating_with_big_values(&fs, n);
    let mut it = db.range(KeyRange::all(), Direction::Forward).unwrap();
    let mut expected: Vec<(Bytes, Bytes)> = (0..n).map(|i| (key(i), big(i, 0))).collect();
    expected.sort();
    assert_eq!(it.next().unwrap().unwrap(), expected[0]);
    // Overwritten, merged and checkpointed until the pointers are gone from the listed
    // runs (the same rounds as above, which delete the segments without a reader).
    for round in 1..12 {
        write_small(&*db, n, round);
        engine.checkpoint().unwrap();
    }
    let c = engine.counts();
    assert!(c.run_merges >= 2, "{c:?}");
    assert_eq!(c.segments_deleted, 0, "a reader holds them: {c:?}");
    let rest: Vec<_> = it.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(rest, expected[1..]);
    drop(it);
    assert!(
        engine.counts().segments_deleted >= 3,
        "{:?}",
        engine.counts()
    );
}
