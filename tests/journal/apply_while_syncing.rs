//! A large synced unit is applied while it is written and synced (ADR 0015, "Applied while
//! it is synced"): the background applier writes its runs and index inserts meanwhile, and
//! commits the step only once the unit is durable and in the overlay.
//!
//! With the unit's `sync_data` held (a `SyncGate` on the segments):
//! * the step begins: the unit's run file is written (listed by no manifest);
//! * nothing commits: the index's applied seq stays 0, and a reader sees none of the unit;
//! * a power cut then (every unsynced op lost, or every one kept) opens cleanly: the
//!   unlisted run is deleted and the unit is replayed or gone with its unacknowledged write;
//! * once the sync returns, the same step commits: one apply step, counted as begun while
//!   syncing, and every write reads back, also after a reopen.
//!
//! Below the size the option names, a unit waits for its sync as before (no run is written
//! while the sync is held).

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::journal::{Applier, JournalEngine, JournalOptions, KeyspaceOptions, RUNS_DIR};
use flushpoint::testing::{DirFate, FileFate, SimFs};
use flushpoint::{Batch, Db, Durability};

use support::fs::{Hook, HookedFs};

const DIR: &str = "/journal";
const APP: &str = "app";
const PLAIN: &str = "plain";
/// How long a test waits for a background step it expects. Why: generous for a loaded CI
/// machine; a pass takes milliseconds.
const EXPECTED_WITHIN: Duration = Duration::from_secs(20);
/// How long a test watches for a commit that must not come while the sync is held.
const NOT_WITHIN: Duration = Duration::from_millis(300);
/// The keyspaces' ops per unit here (a few KiB a unit).
const KEYS: u32 = 50;

fn options(apply_while_syncing_bytes_min: u64) -> JournalOptions {
    JournalOptions::default()
        .with_applier(Applier::Background)
        // No step by the batching clock or by time: only a waiter, or a placed unit.
        .with_apply_batch_delay(Duration::from_secs(3600))
        .with_checkpoint_interval(Duration::from_secs(3600))
        .with_checkpoint_bytes(1 << 30)
        // Every segment file is a plain one (no spare the applier syncs itself).
        .with_prepare_segments(false)
        .with_apply_while_syncing_bytes_min(apply_while_syncing_bytes_min)
}

fn value(i: u32) -> Bytes {
    Bytes::from(format!("value {i} {}", "v".repeat(40)))
}

fn key(i: u32) -> Bytes {
    Bytes::from(format!("key/{i:04}"))
}

fn runs_of(fs: &SimFs) -> Vec<String> {
    fs.list(&Path::new(DIR).join(RUNS_DIR).join(APP))
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + EXPECTED_WITHIN;
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

struct Opened {
    engine: JournalEngine,
    app: Arc<flushpoint::journal::JournalDb>,
    plain: Arc<flushpoint::journal::JournalDb>,
}

fn open(fs: Arc<dyn flushpoint::fs::FileSystem>, options: JournalOptions) -> Opened {
    let engine = JournalEngine::open(fs, Path::new(DIR), options).expect("open");
    let app = engine
        .keyspace_with(APP, KeyspaceOptions::indexed_by_runs())
        .expect("runs keyspace");
    let plain = engine.keyspace(PLAIN).expect("keyspace");
    Opened { engine, app, plain }
}

/// Writes one synced unit of both keyspaces on another thread, its segment's sync held by
/// `gate`; returns the thread.
fn write_unit_beside(opened: &Opened) -> std::thread::JoinHandle<flushpoint::Result<()>> {
    let engine = opened.engine.clone();
    std::thread::spawn(move || {
        let mut app = Batch::new();
        let mut plain = Batch::new();
        for i in 0..KEYS {
            app.put(key(i), value(i));
            plain.put(key(i), value(i + 1000));
        }
        engine.commit(&[(APP, &app), (PLAIN, &plain)], Durability::Synced)
    })
}

/// Waits until every unit written so far is applied (the journal's `UnitGroup` wait).
fn wait_applied(db: &flushpoint::journal::JournalDb) -> flushpoint::Result<()> {
    db.unit_group()
        .expect("a journal keyspace is a group member")
        .group
        .wait_applied()
}

fn segments_dir_hook() -> Hook {
    // The segments lie in the journal's directory itself; the runs and the index under it
    // are held too, but nothing syncs them before the checkpoint, which waits for the gate.
    Hook::HoldSyncsUnder(PathBuf::from(DIR))
}

/// Opens a fresh journal on a `SimFs` whose syncs are held from the first write on (the
/// open's own syncs pass: the gate closes after it).
fn held_journal(apply_while_syncing_bytes_min: u64) -> (SimFs, HookedFs, Opened) {
    let fs = SimFs::new();
    let hooked = HookedFs::new(fs.clone(), segments_dir_hook());
    hooked.gate.open();
    let opened = open(
        Arc::new(hooked.clone()),
        options(apply_while_syncing_bytes_min),
    );
    hooked.gate.close();
    (fs, hooked, opened)
}

#[test]
fn a_large_unit_is_applied_while_it_syncs_and_commits_only_once_durable() {
    let (fs, hooked, opened) = held_journal(0);
    assert!(runs_of(&fs).is_empty());
    let writer = write_unit_beside(&opened);
    assert!(
        hooked.gate.wait_for_held(1, EXPECTED_WITHIN),
        "the unit's sync is held"
    );
    // The step begins while the sync is held: its run is written, listed by no manifest.
    wait_until("the step's run written while the unit syncs", || {
        runs_of(&fs).len() == 1
    });
    // Nothing commits, and no reader sees the unit, while it is not durable.
    std::thread::sleep(NOT_WITHIN);
    assert_eq!(
        opened.engine.applied_and_checkpoint_seq(),
        (0, 0),
        "no commit before the unit is durable"
    );
    assert_eq!(opened.app.get(&key(0)).unwrap(), None);
    assert_eq!(opened.plain.get(&key(0)).unwrap(), None);
    assert_eq!(opened.engine.counts().apply_steps, 0);

    // A power cut now: the unlisted run is deleted on open; the unit was never
    // acknowledged, so it may be there (its bytes reached the disk) or not, whole.
    for files in [FileFate::DropAll, FileFate::KeepAll] {
        let image = fs.crash_image(DirFate::KeepAll, files);
        let after = open(Arc::new(image.clone()), options(u64::MAX));
        let there = after.app.get(&key(0)).unwrap().is_some();
        for i in 0..KEYS {
            let (a, p) = (
                after.app.get(&key(i)).unwrap(),
                after.plain.get(&key(i)).unwrap(),
            );
            if there {
                assert_eq!((a, p), (Some(value(i)), Some(value(i + 1000))), "{files:?}");
            } else {
                assert_eq!((a, p), (None, None), "{files:?}");
            }
        }
        assert_eq!(
            there,
            files == FileFate::KeepAll,
            "the unit is there exactly when its bytes survived"
        );
        drop(after);
        assert!(
            runs_of(&image).len() <= 1,
            "at most the close's own run is left: {:?}",
            runs_of(&image)
        );
    }

    // The sync returns: the writer is acknowledged, and the same step commits.
    hooked.gate.open();
    writer.join().unwrap().expect("the write");
    wait_applied(&opened.plain).expect("applied");
    let c = opened.engine.counts();
    assert_eq!(
        (c.apply_steps, c.steps_begun_while_syncing, c.runs_written),
        (1, 1, 1),
        "one step, begun while the unit synced: {c:?}"
    );
    assert_eq!(opened.engine.applied_and_checkpoint_seq().0, 1);
    for i in 0..KEYS {
        assert_eq!(opened.app.get(&key(i)).unwrap(), Some(value(i)));
        assert_eq!(opened.plain.get(&key(i)).unwrap(), Some(value(i + 1000)));
    }
    // The engine goes on: a second unit, applied the same way.
    hooked.gate.close();
    let second = write_unit_beside(&opened);
    assert!(hooked.gate.wait_for_held(1, EXPECTED_WITHIN));
    wait_until("the second step's run written while its unit syncs", || {
        runs_of(&fs).len() == 2
    });
    hooked.gate.open();
    second.join().unwrap().expect("a second write");
    wait_applied(&opened.plain).expect("the second unit applied");
    let c = opened.engine.counts();
    assert_eq!(
        (c.apply_steps, c.steps_begun_while_syncing),
        (2, 2),
        "{c:?}"
    );
    assert_eq!(opened.engine.applied_and_checkpoint_seq().0, 2);
    drop(opened);
    let again = open(Arc::new(fs.clone()), options(u64::MAX));
    for i in 0..KEYS {
        assert_eq!(again.app.get(&key(i)).unwrap(), Some(value(i)));
        assert_eq!(again.plain.get(&key(i)).unwrap(), Some(value(i + 1000)));
    }
}

#[test]
fn a_unit_under_the_size_waits_for_its_sync_before_its_step() {
    let (fs, hooked, opened) = held_journal(u64::MAX);
    let writer = write_unit_beside(&opened);
    assert!(
        hooked.gate.wait_for_held(1, EXPECTED_WITHIN),
        "the unit's sync is held"
    );
    // A waiter asks for the apply: still nothing before the sync.
    let plain = opened.plain.clone();
    let waiter = std::thread::spawn(move || wait_applied(&plain));
    std::thread::sleep(NOT_WITHIN);
    assert!(runs_of(&fs).is_empty(), "no step before the sync");
    hooked.gate.open();
    writer.join().unwrap().expect("the write");
    waiter.join().unwrap().expect("applied");
    let c = opened.engine.counts();
    assert_eq!(
        (c.apply_steps, c.steps_begun_while_syncing),
        (1, 0),
        "{c:?}"
    );
    assert_eq!(opened.app.get(&key(1)).unwrap(), Some(value(1)));
}
