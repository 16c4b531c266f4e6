//! Property: each crash shape, made by really running a node on redb files and failing one
//! write, is classified as its case by the next start and repaired to the uncut run's state
//! (roll forward from the local block store, no block fetched again); every shape outside the
//! table is refused with the three heights, changing nothing on disk.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::db::{CountingDb, collect_range};
use flushpoint::demo::{ChainSpec, KvApp, Profile, State};
use flushpoint::testing::{FailAfter, FailingDb};
use flushpoint::{
    Db, Direction, Error, FlushPolicy, HandshakeCase, HandshakeReport, HoldingDb, KeyRange,
    MemoryDb, NoEvents, Node, RedbDb, RedbOptions,
};

const NAMES: [&str; 3] = ["block_store", "state", "app"];
const WINDOW: u64 = 4;

fn spec() -> ChainSpec {
    ChainSpec::new(51, Profile::Light)
}

fn redb(dir: &Path, i: usize) -> RedbDb {
    RedbDb::open(
        &dir.join(format!("{}.redb", NAMES[i])),
        NAMES[i],
        &RedbOptions::default(),
    )
    .unwrap()
}

fn open_over(
    dbs: [Arc<dyn Db>; 3],
) -> flushpoint::Result<(Node<flushpoint::demo::DemoChain>, HandshakeReport)> {
    let app = KvApp::open(Arc::new(HoldingDb::new(dbs[2].clone())))?;
    Node::open(
        dbs[0].clone(),
        dbs[1].clone(),
        Box::new(app),
        spec().chain(),
        Box::new(NoEvents),
    )
}

fn open(dir: &Path) -> flushpoint::Result<(Node<flushpoint::demo::DemoChain>, HandshakeReport)> {
    open_over([0, 1, 2].map(|i| Arc::new(redb(dir, i)) as Arc<dyn Db>))
}

fn policy() -> FlushPolicy {
    FlushPolicy::default()
        .with_interval(Duration::from_secs(3600))
        .with_held_bytes_max(u64::MAX)
        .with_window_blocks_max(Some(WINDOW))
        .with_background(false)
}

fn sync_to(node: &mut Node<flushpoint::demo::DemoChain>, height: u64) -> flushpoint::Result<()> {
    node.start_block_sync(policy(), Instant::now())?;
    while node.height() < height {
        let (b, p, c) = spec().next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now())?;
    }
    Ok(())
}

fn commit_to(node: &mut Node<flushpoint::demo::DemoChain>, height: u64) -> flushpoint::Result<()> {
    while node.height() < height {
        let (b, p, c) = spec().next_block(node.state());
        node.commit_block(&b, &p, &c)?;
    }
    Ok(())
}

/// The uncut run's state at `height` (memory databases, no faults).
fn uncut(height: u64) -> (State, flushpoint::AppInfo) {
    let (mut node, _) =
        open_over([0, 1, 2].map(|i| Arc::new(MemoryDb::new(NAMES[i])) as Arc<dyn Db>)).unwrap();
    commit_to(&mut node, height).unwrap();
    (node.state().clone(), node.app().committed().unwrap())
}

/// A home synced cleanly to height 4 (one flush point, record {0, 4}) and stopped.
fn home_at_4() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (mut node, report) = open(dir.path()).unwrap();
    assert_eq!(report.case, HandshakeCase::Fresh);
    sync_to(&mut node, 4).unwrap();
    node.stop(Instant::now()).unwrap();
    dir
}

/// Reopens `dir` with database `victim` failing after `budget` writes, runs `f` (which must
/// hit the fault), and drops everything: the crash.
fn crash(
    dir: &Path,
    victim: usize,
    budget: u64,
    f: impl FnOnce(&mut Node<flushpoint::demo::DemoChain>) -> flushpoint::Result<()>,
) {
    let failing = Arc::new(FailingDb::new(redb(dir, victim), FailAfter::new(budget)));
    let dbs = [0, 1, 2].map(|i| {
        if i == victim {
            failing.clone() as Arc<dyn Db>
        } else {
            Arc::new(redb(dir, i)) as Arc<dyn Db>
        }
    });
    let (mut node, report) = open_over(dbs).unwrap();
    assert_eq!(
        report.case,
        HandshakeCase::Consistent,
        "a clean start writes nothing"
    );
    let err = f(&mut node).expect_err("the injected failure surfaces");
    assert!(!matches!(err, Error::Poisoned { .. }), "{err}");
    assert_eq!(failing.failures(), 1, "the fault fired");
    drop(node);
}

/// Every key of the three databases.
fn snapshot(dir: &Path) -> Vec<BTreeMap<Bytes, Bytes>> {
    (0..3)
        .map(|i| {
            collect_range(&redb(dir, i), KeyRange::all(), Direction::Forward)
                .unwrap()
                .into_iter()
                .collect()
        })
        .collect()
}

/// Reopens after the crash, asserts the case and that the result equals the uncut run;
/// returns the report and the node.
fn restart(
    dir: &Path,
    case: HandshakeCase,
    height: u64,
) -> (Node<flushpoint::demo::DemoChain>, HandshakeReport, u64) {
    let bs = Arc::new(CountingDb::new(redb(dir, 0)));
    let dbs: [Arc<dyn Db>; 3] = [bs.clone(), Arc::new(redb(dir, 1)), Arc::new(redb(dir, 2))];
    let (node, report) = open_over(dbs).unwrap();
    println!("{:?}", report);
    assert_eq!(report.case, case);
    assert_eq!(report.height, height);
    assert_eq!(node.height(), height);
    let (state, app) = uncut(height);
    assert_eq!(
        node.state(),
        &state,
        "the repaired state equals the uncut run's"
    );
    assert_eq!(node.app().committed().unwrap(), app);
    assert_eq!(node.app().durable().unwrap(), app, "the repair is durable");
    let block_store_writes = bs.counts().synced_batches + bs.counts().buffered_batches;
    (node, report, block_store_writes)
}

/// Syncs on from the repaired node and checks the result equals the uncut run.
fn sync_on(mut node: Node<flushpoint::demo::DemoChain>, to: u64) {
    let from = node.block_store().height();
    let (b, _, _) = spec().next_block(node.state());
    assert_eq!(
        b.height(),
        from + 1,
        "sync continues at the block store's height + 1"
    );
    sync_to(&mut node, to).unwrap();
    node.switch_to_consensus(Instant::now()).unwrap();
    let (state, app) = uncut(to);
    assert_eq!(node.state(), &state);
    assert_eq!(node.app().committed().unwrap(), app);
}

#[test]
fn crash_after_block_store_batch_rolls_forward() {
    let dir = home_at_4();
    // The state's write at the next flush point fails: step 1 is durable, steps 2–3 are not.
    crash(dir.path(), 1, 0, |n| sync_to(n, 8));
    let before = snapshot(dir.path());
    assert!(
        before[0].contains_key(&Bytes::from_static(&[0x07])),
        "the flush record is on disk"
    );
    let (node, report, bs_writes) = restart(dir.path(), HandshakeCase::FlushRollForward, 8);
    assert_eq!(
        (
            report.observed.block_store_height,
            report.observed.state_height,
            report.observed.app_height
        ),
        (8, 4, 4)
    );
    assert_eq!(
        report.applied, 4,
        "blocks 5..=8 replayed from the local block store"
    );
    assert_eq!(
        bs_writes, 0,
        "the block store was neither lowered nor rewritten"
    );
    assert_eq!(
        node.block_store().height(),
        8,
        "no block needs fetching again"
    );
    sync_on(node, 12);
}

#[test]
fn crash_after_state_batch_replays_the_app() {
    let dir = home_at_4();
    // The app's write at the next flush point fails: steps 1–2 are durable.
    crash(dir.path(), 2, 0, |n| sync_to(n, 8));
    let (node, report, bs_writes) = restart(dir.path(), HandshakeCase::AppBehind, 8);
    assert_eq!(
        (report.observed.state_height, report.observed.app_height),
        (8, 4)
    );
    assert_eq!(report.app_replayed, 4);
    assert_eq!(bs_writes, 0);
    sync_on(node, 12);
}

#[test]
fn crash_at_block_store_batch_resumes_from_the_last_flush_point() {
    let dir = home_at_4();
    crash(dir.path(), 0, 0, |n| sync_to(n, 8));
    let (node, report, _) = restart(dir.path(), HandshakeCase::Consistent, 4);
    assert_eq!(report.applied + report.app_replayed, 0);
    sync_on(node, 12);
}

#[test]
fn crash_after_save_block_applies_the_stored_block() {
    let dir = home_at_4();
    // Consensus: save_block is durable, the results write (the state's first) fails.
    crash(dir.path(), 1, 0, |n| commit_to(n, 5));
    let (node, report, _) = restart(dir.path(), HandshakeCase::BlockStoreAhead, 5);
    assert_eq!(report.applied, 1);
    sync_on(node, 9);
}

#[test]
fn crash_at_app_commit_applies_the_stored_block() {
    let dir = home_at_4();
    // Consensus: block and results durable, the app's commit fails.
    crash(dir.path(), 2, 0, |n| commit_to(n, 5));
    let (node, report, _) = restart(dir.path(), HandshakeCase::BlockStoreAhead, 5);
    assert_eq!(
        (
            report.observed.block_store_height,
            report.observed.state_height,
            report.observed.app_height
        ),
        (5, 4, 4)
    );
    sync_on(node, 9);
}

#[test]
fn crash_after_app_commit_rebuilds_the_state_from_saved_results() {
    let dir = home_at_4();
    // Consensus: block, results and app durable; the state's save (its second write) fails.
    crash(dir.path(), 1, 1, |n| commit_to(n, 5));
    let (node, report, _) = restart(dir.path(), HandshakeCase::StateBehindApp, 5);
    assert_eq!(
        (
            report.observed.block_store_height,
            report.observed.state_height,
            report.observed.app_height
        ),
        (5, 4, 5)
    );
    assert_eq!(report.app_replayed, 0, "the app is not run again");
    sync_on(node, 9);
}

/// Runs a home to 4, saves copies of the files named in `old` at 4, runs on to 8 (block
/// sync when `flush`, else consensus), then puts the old copies back.
fn mixed_home(old: &[usize], flush: bool) -> tempfile::TempDir {
    let dir = home_at_4();
    let saved = tempfile::tempdir().unwrap();
    for &i in old {
        let f = format!("{}.redb", NAMES[i]);
        std::fs::copy(dir.path().join(&f), saved.path().join(&f)).unwrap();
    }
    let (mut node, _) = open(dir.path()).unwrap();
    if flush {
        sync_to(&mut node, 8).unwrap();
    } else {
        commit_to(&mut node, 8).unwrap();
    }
    node.stop(Instant::now()).unwrap();
    for &i in old {
        let f = format!("{}.redb", NAMES[i]);
        std::fs::copy(saved.path().join(&f), dir.path().join(&f)).unwrap();
    }
    dir
}

fn assert_refused(dir: &Path, heights: (u64, u64, u64)) {
    let before = snapshot(dir);
    let err = open(dir).map(|_| ()).expect_err("the shape is refused");
    println!("{err}");
    match &err {
        Error::Inconsistent { heights: h, .. } => assert_eq!(
            (h.block_store_height, h.state_height, h.app_height),
            heights,
            "the error names the three heights"
        ),
        e => panic!("expected Error::Inconsistent, got {e:?}"),
    }
    let msg = err.to_string();
    for h in [heights.0, heights.1, heights.2] {
        assert!(msg.contains(&h.to_string()), "{msg} names height {h}");
    }
    assert_eq!(snapshot(dir), before, "a refusal changes nothing on disk");
    // And it stays refused: nothing was half-repaired.
    assert!(matches!(open(dir), Err(Error::Inconsistent { .. })));
}

#[test]
fn handshake_rejects_state_ahead_of_block_store() {
    let dir = mixed_home(&[0], true);
    assert_refused(dir.path(), (4, 8, 8));
}

#[test]
fn handshake_rejects_app_ahead_of_state() {
    let dir = mixed_home(&[1], true);
    assert_refused(dir.path(), (8, 4, 8));
}

#[test]
fn handshake_rejects_block_store_gap_without_flush_record() {
    // Consensus blocks 5..=8 leave the record {0, 4} stale: nothing covers the gap 5..=8.
    let dir = mixed_home(&[1, 2], false);
    assert_refused(dir.path(), (8, 4, 4));
}
