//! What `flushpoint::rollback` refuses, and where its bounds lie, through the library (the
//! tool's own tests, in `cli/tests/cli/inspect_rollback.rs`, reach some of them through the
//! binary only):
//!
//! * a target at or above every height has nothing to do: `Ok`, `nothing_to_do`, nothing
//!   written — and one block lower is a rollback;
//! * a target below `base − 1` (block `target + 1` is pruned) is `RollbackRefused {
//!   BelowBase }`; `base − 1` passes that bound and is refused by the demo chain's state
//!   rebuild (it reads block `target` too), and `base` rolls back;
//! * an app above the target that cannot roll back to it (its floor is above it, or it
//!   has none) is `AppCannotRollBack` naming the floor; the floor itself rolls back.
//!
//! * an app still above the target after its rollback is an error, the intent left; a
//!   rerun after the app rolled back (the intent still in its app step) finishes without
//!   rolling the app back again.
//!
//! Every refusal leaves the three databases key for key as they were and no intent file.
//! Why here: with any of these bounds mutated in `src/rollback.rs`, the rollback power-cut
//! and chain-seam suites pass; a test of this file fails (docs/TESTING.md, "Mutation
//! testing").

use crate::support;

use std::sync::Arc;

use bytes::Bytes;
use flushpoint::demo::{Block, DemoChain, KvApp};
use flushpoint::fs::FileSystem;
use flushpoint::home::ROLLBACK_INTENT_FILE;
use flushpoint::store::BlockStore;
use flushpoint::testing::SimFs;
use flushpoint::{App, AppInfo, Db, Error, Home, RollbackRefusal, RollbackReport};
use support::rollback_home::{Dump, app_of, dump_home, home, options, spec, synced_to};

/// The height the home is synced to.
const TOP: u64 = 8;

fn synced() -> SimFs {
    synced_to(TOP)
}

/// The three databases' contents and whether an intent file is there.
fn snapshot(fs: &SimFs) -> (Dump, bool) {
    let home = Home::open_for_rollback_on(Arc::new(fs.clone()), &home(), &options()).unwrap();
    let intent = fs.exists(&home.path().join(ROLLBACK_INTENT_FILE)).unwrap();
    (dump_home(&home).unwrap(), intent)
}

/// What [`Floored`]'s `rollback_to` does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AppRollback {
    /// The demo app's rollback.
    Rolls,
    /// Nothing, and reports success: an app that does not do what it said.
    Ignores,
    /// The demo app's rollback, then an error (as a crash right after it would leave).
    RollsThenFails,
}

/// The demo app with the rollback floor the test sets (`None`: it cannot roll back).
struct Floored {
    inner: KvApp<Arc<dyn Db>>,
    floor: Option<u64>,
    rollback: AppRollback,
}

impl App<DemoChain> for Floored {
    fn committed(&self) -> flushpoint::Result<AppInfo> {
        self.inner.committed()
    }
    fn durable(&self) -> flushpoint::Result<AppInfo> {
        self.inner.durable()
    }
    fn execute_block(
        &mut self,
        block: &Block,
    ) -> flushpoint::Result<flushpoint::demo::BlockResults> {
        self.inner.execute_block(block)
    }
    fn commit(&mut self) -> flushpoint::Result<AppInfo> {
        self.inner.commit()
    }
    fn hold(&mut self) -> flushpoint::Result<bool> {
        <KvApp<_> as App<DemoChain>>::hold(&mut self.inner)
    }
    fn stop_holding(&mut self) -> flushpoint::Result<()> {
        <KvApp<_> as App<DemoChain>>::stop_holding(&mut self.inner)
    }
    fn write_held(&mut self) -> flushpoint::Result<()> {
        <KvApp<_> as App<DemoChain>>::write_held(&mut self.inner)
    }
    fn held_bytes(&self) -> u64 {
        <KvApp<_> as App<DemoChain>>::held_bytes(&self.inner)
    }
    fn halt_height(&self) -> Option<u64> {
        <KvApp<_> as App<DemoChain>>::halt_height(&self.inner)
    }
    fn take_flush_request(&mut self) -> bool {
        <KvApp<_> as App<DemoChain>>::take_flush_request(&mut self.inner)
    }
    fn query(&self, key: &[u8]) -> flushpoint::Result<Option<Bytes>> {
        <KvApp<_> as App<DemoChain>>::query(&self.inner, key)
    }
    fn rollback_floor(&self) -> flushpoint::Result<Option<u64>> {
        Ok(self.floor)
    }
    fn rollback_to(&mut self, height: u64) -> flushpoint::Result<AppInfo> {
        match self.rollback {
            AppRollback::Rolls => {
                <KvApp<_> as App<DemoChain>>::rollback_to(&mut self.inner, height)
            }
            AppRollback::Ignores => self.inner.durable(),
            AppRollback::RollsThenFails => {
                <KvApp<_> as App<DemoChain>>::rollback_to(&mut self.inner, height)?;
                Err(Error::Rollback(
                    "the test's app fails after rolling back".into(),
                ))
            }
        }
    }
}

/// Rolls `fs`'s home back to `to`, the app's floor `floor` (`None`: the demo app's own).
fn rollback(fs: &SimFs, to: u64, floor: Option<Option<u64>>) -> flushpoint::Result<RollbackReport> {
    rollback_with(fs, to, floor, AppRollback::Rolls)
}

/// [`rollback`] with the app's rollback doing what `how` says (with a floor given).
fn rollback_with(
    fs: &SimFs,
    to: u64,
    floor: Option<Option<u64>>,
    how: AppRollback,
) -> flushpoint::Result<RollbackReport> {
    let home = Home::open_for_rollback_on(Arc::new(fs.clone()), &home(), &options()).unwrap();
    let inner = app_of(&home).unwrap();
    match floor {
        None => {
            let mut app = inner;
            flushpoint::rollback(&home, &mut app, &spec().chain(), to)
        }
        Some(floor) => flushpoint::rollback(
            &home,
            &mut Floored {
                inner,
                floor,
                rollback: how,
            },
            &spec().chain(),
            to,
        ),
    }
}

/// `rollback` to `to` is refused as `refused` says, and the home is as it was.
fn assert_refused_unchanged(
    fs: &SimFs,
    to: u64,
    floor: Option<Option<u64>>,
    refused: impl Fn(&Error) -> bool,
) {
    let before = snapshot(fs);
    assert!(!before.1, "no intent before");
    match rollback(fs, to, floor) {
        Err(e) if refused(&e) => {}
        other => panic!("rollback to {to}: expected the refusal, got {other:?}"),
    }
    assert!(
        snapshot(fs) == before,
        "a refused rollback to {to} changed the home"
    );
}

#[test]
fn at_or_above_every_height_there_is_nothing_to_do_and_nothing_is_written() {
    let fs = synced();
    for to in [TOP, TOP + 5] {
        let before = snapshot(&fs);
        let report = rollback(&fs, to, None).unwrap();
        assert!(report.nothing_to_do, "to {to}: {report:?}");
        assert_eq!(report.blocks_removed, 0);
        assert!(snapshot(&fs) == before, "to {to}: the home changed");
    }
    let report = rollback(&fs, TOP - 1, None).unwrap();
    assert!(!report.nothing_to_do, "one block lower is a rollback");
    assert_eq!(report.blocks_removed, 1);
}

#[test]
fn a_target_below_the_base_is_refused_and_the_base_rolls_back() {
    const BASE: u64 = 5;
    let pruned = || {
        let fs = synced();
        let home = Home::open_for_rollback_on(Arc::new(fs.clone()), &home(), &options()).unwrap();
        let bs = BlockStore::<Block>::open(home.block_store_db.clone() as Arc<dyn Db>).unwrap();
        bs.prune(BASE).unwrap();
        assert_eq!(bs.base(), BASE);
        fs
    };
    let fs = pruned();
    assert_refused_unchanged(&fs, BASE - 2, None, |e| {
        matches!(
            e,
            Error::RollbackRefused {
                to,
                reason: RollbackRefusal::BelowBase { base: BASE },
                ..
            } if *to == BASE - 2
        )
    });
    // `BASE − 1`: the bound lets it through (block `BASE` is there); the demo chain's
    // rebuild also reads block `BASE − 1`, and refuses it before anything is written.
    assert_refused_unchanged(&fs, BASE - 1, None, |e| {
        matches!(
            e,
            Error::RollbackRefused {
                reason: RollbackRefusal::StateRebuild(_),
                ..
            }
        )
    });
    let report = rollback(&fs, BASE, None).unwrap();
    assert_eq!(report.blocks_removed, TOP - BASE);
}

#[test]
fn an_app_that_cannot_reach_the_target_is_refused_naming_its_floor() {
    const FLOOR: u64 = 5;
    let fs = synced();
    assert_refused_unchanged(&fs, FLOOR - 1, Some(Some(FLOOR)), |e| {
        matches!(
            e,
            Error::AppCannotRollBack {
                to,
                app_height: TOP,
                lowest: Some(FLOOR),
            } if *to == FLOOR - 1
        )
    });
    assert_refused_unchanged(&fs, TOP - 1, Some(None), |e| {
        matches!(
            e,
            Error::AppCannotRollBack {
                app_height: TOP,
                lowest: None,
                ..
            }
        )
    });
    let report = rollback(&fs, FLOOR, Some(Some(FLOOR))).unwrap();
    assert!(report.app_rolled_back, "{report:?}");
    assert_eq!(report.blocks_removed, TOP - FLOOR);
}

/// An app that reports success but stays above the target: an error naming its height, the
/// intent left (a rerun or an open must not take the home for rolled back).
#[test]
fn an_app_still_above_the_target_after_its_rollback_is_an_error() {
    let fs = synced();
    let to = TOP - 2;
    match rollback_with(&fs, to, Some(Some(0)), AppRollback::Ignores) {
        Err(Error::Rollback(m)) => assert!(
            m.contains(&format!("reports height {TOP} after rolling back to {to}")),
            "{m}"
        ),
        other => panic!("expected Error::Rollback, got {other:?}"),
    }
    assert!(snapshot(&fs).1, "the intent stays");
    assert!(matches!(
        Home::open_on(Arc::new(fs.clone()), &home(), &options()),
        Err(Error::RollbackInterrupted { to: t, .. }) if t == to
    ));
}

/// A rollback interrupted right after the app rolled back (its intent still in the app
/// step): the rerun finishes it without rolling the app back again, and says so.
#[test]
fn a_rerun_after_the_apps_rollback_does_not_roll_the_app_back_again() {
    let fs = synced();
    let to = TOP - 2;
    assert!(matches!(
        rollback_with(&fs, to, Some(Some(0)), AppRollback::RollsThenFails),
        Err(Error::Rollback(_))
    ));
    assert!(snapshot(&fs).1, "the intent stays");
    let report = rollback(&fs, to, None).unwrap();
    assert!(report.finished_interrupted, "{report:?}");
    assert!(
        !report.app_rolled_back,
        "the app was at {to} already: {report:?}"
    );
    assert_eq!(report.blocks_removed, TOP - to);
    assert!(!snapshot(&fs).1, "the intent is gone");
}
