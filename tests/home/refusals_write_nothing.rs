//! Every refusal, decided on a read-only open ([`Home::open_read_only`], as the tool does
//! before it opens a home for writing), leaves every file of the home byte for byte as it
//! was, on either engine: another chain's genesis (`GenesisMismatch`), a rollback below
//! what the home can undo (`AppCannotRollBack` or `RollbackRefused`), the other engine
//! asked for (`HomeEngine`), a home that lost its `FORMAT` (`HomeDamaged`). Each case
//! snapshots the home (every file's bytes, every directory) before and after and names
//! the first file and byte that differ; a writable open's refusal is the negative control.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use flushpoint::demo::{Block, ChainSpec, KvApp, Profile};
use flushpoint::store::BlockStore;
use flushpoint::testing::DirSnapshot;
use flushpoint::{
    Db, Error, FlushPolicy, HoldingDb, Home, HomeEngine, HomeOptions, NoEvents, Node,
};

/// The height the home is synced to: above the demo app's undo window, so that a rollback
/// to 0 is refused.
const TOP: u64 = 30;

fn spec() -> ChainSpec {
    ChainSpec::new(5, Profile::Light)
}

fn open_node(
    home: Home,
    spec: &ChainSpec,
) -> flushpoint::Result<Node<flushpoint::demo::DemoChain>> {
    Node::open_home(
        home,
        |app_db: Arc<dyn Db>| Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(app_db)))?)),
        spec.chain(),
        Box::new(NoEvents),
    )
    .map(|(n, _)| n)
}

/// A home on `engine` synced to [`TOP`] (24 block-synced, the rest consensus), stopped.
fn synced_home(dir: &Path, engine: HomeEngine) {
    let home = Home::open_with(dir, HomeOptions::default().with_engine(engine)).unwrap();
    let mut node = open_node(home, &spec()).unwrap();
    node.start_block_sync(FlushPolicy::default(), Instant::now())
        .unwrap();
    while node.height() < 24 {
        let (b, p, c) = spec().next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    node.switch_to_consensus(Instant::now()).unwrap();
    while node.height() < TOP {
        let (b, p, c) = spec().next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    node.stop(Instant::now()).unwrap();
}

fn snapshot(dir: &Path) -> DirSnapshot {
    DirSnapshot::take(dir).unwrap()
}

fn first_difference(before: &DirSnapshot, after: &DirSnapshot) -> Option<String> {
    before.first_difference(after)
}

/// Runs `refuse` on a home of `engine` synced to [`TOP`]; it must return the refusal,
/// checked by `is_expected`, and leave every file as it was.
fn assert_writes_nothing(
    engine: HomeEngine,
    what: &str,
    prepare: impl FnOnce(&Path),
    refuse: impl FnOnce(&Path) -> flushpoint::Result<()>,
    is_expected: impl FnOnce(&Error) -> bool,
) {
    let tmp = tempfile::tempdir().unwrap();
    synced_home(tmp.path(), engine);
    prepare(tmp.path());
    let before = snapshot(tmp.path());
    let Err(e) = refuse(tmp.path()) else {
        panic!("{engine} home: {what} was not refused");
    };
    assert!(
        is_expected(&e),
        "{engine} home: {what}: unexpected error {e}"
    );
    let after = snapshot(tmp.path());
    if let Some(d) = first_difference(&before, &after) {
        panic!("{engine} home: refusing {what} wrote to the home: {d}");
    }
}

const ENGINES: [HomeEngine; 2] = [HomeEngine::Redb, HomeEngine::Journal];

#[test]
fn another_genesis_writes_nothing() {
    for engine in ENGINES {
        assert_writes_nothing(
            engine,
            "another chain's genesis",
            |_| {},
            |dir| {
                let home = Home::open_read_only(dir, HomeOptions::default())?;
                open_node(home, &ChainSpec::new(6, Profile::Light)).map(|_| ())
            },
            |e| matches!(e, Error::GenesisMismatch { .. }),
        );
    }
}

#[test]
fn a_rollback_below_what_the_home_can_undo_writes_nothing() {
    for engine in ENGINES {
        assert_writes_nothing(
            engine,
            "a rollback to 0",
            |_| {},
            |dir| {
                let home =
                    Home::open_for_rollback_on(Home::read_only_fs(), dir, HomeOptions::default())?;
                let mut app = KvApp::open(Arc::new(HoldingDb::new(home.app_db.clone())))?;
                flushpoint::rollback(&home, &mut app, &spec().chain(), 0).map(|_| ())
            },
            |e| {
                matches!(
                    e,
                    Error::RollbackRefused { .. } | Error::AppCannotRollBack { .. }
                )
            },
        );
    }
}

#[test]
fn the_other_engine_asked_for_writes_nothing() {
    for engine in ENGINES {
        let other = match engine {
            HomeEngine::Redb => HomeEngine::Journal,
            _ => HomeEngine::Redb,
        };
        assert_writes_nothing(
            engine,
            "the other engine",
            |_| {},
            |dir| Home::open_read_only(dir, HomeOptions::default().with_engine(other)).map(|_| ()),
            |e| matches!(e, Error::HomeEngine { .. }),
        );
    }
}

#[test]
fn a_home_without_its_format_writes_nothing() {
    for engine in ENGINES {
        assert_writes_nothing(
            engine,
            "a home without its FORMAT",
            |dir| std::fs::remove_file(dir.join("FORMAT")).unwrap(),
            |dir| Home::open_read_only(dir, HomeOptions::default()).map(|_| ()),
            |e| matches!(e, Error::HomeDamaged { .. }),
        );
    }
}

/// The writable paths refuse the same way (they are what the tool runs once the
/// read-only open passed) and still refuse without harm to what the home holds.
#[test]
fn a_writable_open_refuses_the_same_homes() {
    for engine in ENGINES {
        let tmp = tempfile::tempdir().unwrap();
        synced_home(tmp.path(), engine);
        let e = open_node(
            Home::open(tmp.path()).unwrap(),
            &ChainSpec::new(6, Profile::Light),
        )
        .err()
        .unwrap();
        assert!(matches!(e, Error::GenesisMismatch { .. }), "{engine}: {e}");
        let other = match engine {
            HomeEngine::Redb => HomeEngine::Journal,
            _ => HomeEngine::Redb,
        };
        let e = Home::open_with(tmp.path(), HomeOptions::default().with_engine(other)).unwrap_err();
        assert!(matches!(e, Error::HomeEngine { .. }), "{engine}: {e}");
        let node = open_node(Home::open(tmp.path()).unwrap(), &spec()).unwrap();
        assert_eq!(node.height(), TOP, "{engine}: the refusals lost nothing");
    }
}

/// Negative control: the snapshot comparison sees a write. A writable open of a redb home
/// rewrites redb's header even when the node then refuses the genesis; the check must say
/// so, or the cases above prove nothing.
#[test]
fn the_snapshot_sees_what_a_writable_open_writes() {
    let tmp = tempfile::tempdir().unwrap();
    synced_home(tmp.path(), HomeEngine::Redb);
    let before = snapshot(tmp.path());
    let refused = open_node(
        Home::open(tmp.path()).unwrap(),
        &ChainSpec::new(6, Profile::Light),
    );
    assert!(matches!(refused, Err(Error::GenesisMismatch { .. })));
    let d = first_difference(&before, &snapshot(tmp.path()));
    assert!(
        d.as_deref().is_some_and(|d| d.contains(".redb differs")),
        "the snapshot missed the header write: {d:?}"
    );
}

/// A read-only open that reads and writes (a journal recovery replaying units, a handshake
/// repairing a crash) writes nothing either: a home killed inside a flush point, opened
/// read-only by a node that repairs it in memory.
#[test]
fn a_read_only_open_repairs_in_memory_only() {
    for engine in ENGINES {
        let tmp = tempfile::tempdir().unwrap();
        synced_home(tmp.path(), engine);
        // Leave a crash's shape: the block store one block ahead of the state.
        {
            let node = open_node(Home::open(tmp.path()).unwrap(), &spec()).unwrap();
            let (b, p, c) = spec().next_block(node.state());
            drop(node);
            let home = Home::open(tmp.path()).unwrap();
            let bs = BlockStore::<Block>::open(home.block_store_db.clone()).unwrap();
            bs.save_block(&b, &p, &c).unwrap();
        }
        let before = snapshot(tmp.path());
        let node = open_node(
            Home::open_read_only(tmp.path(), HomeOptions::default()).unwrap(),
            &spec(),
        )
        .unwrap();
        assert_eq!(node.height(), TOP + 1, "{engine}: the repair ran");
        drop(node);
        if let Some(d) = first_difference(&before, &snapshot(tmp.path())) {
            panic!("{engine} home: a read-only repair wrote to the home: {d}");
        }
    }
}
