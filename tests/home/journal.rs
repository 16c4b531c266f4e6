//! A home on the journal engine (ADR 0012): created with `HomeOptions { engine:
//! Some(Journal) }`, it records its engine in `FORMAT`, reopens on it without being told,
//! refuses an explicit request for the other engine with `Error::HomeEngine` naming both and
//! writing nothing, stays locked while it or any of its keyspaces is open, carries a node
//! through block sync, consensus, a clean stop and a Consistent reopen — to the same state
//! as a redb home fed the same chain — and rolls back with `flushpoint::rollback`.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flushpoint::demo::{ChainSpec, DemoChain, KvApp, Profile, State};
use flushpoint::testing::SimFs;
use flushpoint::{
    Db, Error, ErrorKind, FlushPolicy, HandshakeCase, HoldingDb, Home, HomeEngine, HomeOptions,
    NoEvents, Node,
};

fn journal() -> HomeOptions {
    HomeOptions::default().with_engine(HomeEngine::Journal)
}

fn spec() -> ChainSpec {
    ChainSpec::new(11, Profile::Light)
}

fn open_node(home: Home) -> (Node<DemoChain>, HandshakeCase) {
    let (node, report) = Node::open_home(
        home,
        |app_db: Arc<dyn Db>| Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(app_db)))?)),
        spec().chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    (node, report.case)
}

/// Consensus blocks to `consensus_to`, then block sync (a flush point every 4 blocks) to
/// `to`, then a clean stop; returns the final state.
fn sync(home: Home, consensus_to: u64, to: u64) -> State {
    let (mut node, _) = open_node(home);
    while node.height() < consensus_to {
        let (b, p, c) = spec().next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    let policy = FlushPolicy::default()
        .with_window_blocks_max(Some(4))
        .with_interval(Duration::from_secs(3600));
    node.start_block_sync(policy, Instant::now()).unwrap();
    while node.height() < to {
        let (b, p, c) = spec().next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    let state = node.state().clone();
    node.stop(Instant::now()).unwrap();
    state
}

/// Every file under `dir` (recursively) with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(tree(&e.path()));
        } else {
            out.insert(e.path(), std::fs::read(e.path()).unwrap());
        }
    }
    out
}

#[test]
fn a_journal_home_records_its_engine_and_reopens_on_it_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home");
    let home = Home::open_with(&path, journal()).unwrap();
    assert_eq!(home.engine(), HomeEngine::Journal);
    assert!(home.journal().is_some() && home.redb_dbs().is_none());
    assert_eq!(
        std::fs::read_to_string(path.join("FORMAT")).unwrap(),
        "flushpoint home format 2\nengine journal\nparts journal\napp runs\napp values journal\n"
    );
    let mut b = flushpoint::Batch::new();
    b.put(b"k".to_vec(), b"v".to_vec());
    home.state_db
        .write(&b, flushpoint::Durability::Synced)
        .unwrap();
    drop(home);
    let mut names: Vec<String> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["FORMAT", "LOCK", "journal"],
        "no redb file beside it"
    );
    assert!(
        path.join("journal")
            .join(flushpoint::journal::INDEX_FILE)
            .exists()
    );

    // Unasked, and asked for its own engine: the journal, with the write in it.
    for options in [HomeOptions::default(), journal()] {
        let home = Home::open_with(&path, options).unwrap();
        assert_eq!(home.engine(), HomeEngine::Journal);
        assert_eq!(home.state_db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        assert!(home.disk_size_bytes().unwrap() > 0);
    }
    assert_eq!(
        Home::open_existing(&path).unwrap().engine(),
        HomeEngine::Journal
    );
    // A new home asked for redb is created as before: FORMAT byte for byte as format 2
    // always was. Unasked, a new home is a journal home (HOME_ENGINE_DEFAULT).
    let redb = dir.path().join("redb");
    assert_eq!(
        Home::open_with(&redb, HomeOptions::default().with_engine(HomeEngine::Redb))
            .unwrap()
            .engine(),
        HomeEngine::Redb
    );
    let unasked = dir.path().join("unasked");
    assert_eq!(Home::open(&unasked).unwrap().engine(), HomeEngine::Journal);
    assert_eq!(flushpoint::home::HOME_ENGINE_DEFAULT, HomeEngine::Journal);
    // Options made from redb's: a new home on redb, an existing one on its own engine.
    let from_redb = dir.path().join("from_redb");
    let redb_options = flushpoint::RedbOptions::default();
    assert_eq!(
        Home::open_with(&from_redb, &redb_options).unwrap().engine(),
        HomeEngine::Redb
    );
    assert_eq!(
        Home::open_with(&path, &redb_options).unwrap().engine(),
        HomeEngine::Journal
    );
    assert_eq!(
        std::fs::read_to_string(redb.join("FORMAT")).unwrap(),
        "flushpoint home format 2\n"
    );
}

fn expect_engine_refused(r: flushpoint::Result<Home>, recorded: HomeEngine, path: &Path) {
    match r {
        Err(e @ Error::HomeEngine { .. }) => {
            assert_eq!(e.kind(), ErrorKind::Incompatible);
            let msg = e.to_string();
            let Error::HomeEngine {
                path: p,
                recorded: r,
                requested,
            } = e
            else {
                unreachable!()
            };
            assert_eq!((p.as_path(), r), (path, recorded));
            assert_ne!(requested, recorded);
            for word in [recorded.name(), requested.name()] {
                assert!(msg.contains(word), "{msg} does not name {word}");
            }
        }
        Err(e) => panic!("expected HomeEngine, got {e}"),
        Ok(h) => panic!("opened a {} home on {}", recorded, h.engine()),
    }
}

#[test]
fn another_engine_than_the_recorded_one_is_refused_naming_both_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    for (recorded, asked) in [
        (HomeEngine::Journal, HomeEngine::Redb),
        (HomeEngine::Redb, HomeEngine::Journal),
    ] {
        let path = dir.path().join(recorded.name());
        drop(sync(
            Home::open_with(&path, HomeOptions::default().with_engine(recorded)).unwrap(),
            2,
            6,
        ));
        let before = tree(&path);
        expect_engine_refused(
            Home::open_with(&path, HomeOptions::default().with_engine(asked)),
            recorded,
            &path,
        );
        assert_eq!(
            tree(&path),
            before,
            "a refused open changed {recorded} home"
        );
        // The refusal released the lock: the home opens on its own engine.
        assert_eq!(Home::open(&path).unwrap().engine(), recorded);
    }

    // On a simulated file system: not one file-system operation.
    let fs = SimFs::new();
    let path = Path::new("/h");
    drop(Home::open_on(Arc::new(fs.clone()), path, journal()).unwrap());
    let ops = fs.ops();
    assert!(ops > 0);
    expect_engine_refused(
        Home::open_on(
            Arc::new(fs.clone()),
            path,
            HomeOptions::default().with_engine(HomeEngine::Redb),
        ),
        HomeEngine::Journal,
        path,
    );
    assert_eq!(fs.ops(), ops, "{:?}", &fs.stats().log[ops as usize..]);
    assert!(
        !fs.list(path).iter().any(|n| n.ends_with(".redb")),
        "{:?}",
        fs.list(path)
    );
}

#[test]
fn a_journal_home_stays_locked_while_it_or_any_keyspace_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home");
    let home = Home::open_with(&path, journal()).unwrap();
    for r in [
        Home::open(&path),
        Home::open_with(&path, journal()),
        Home::open_for_rollback(&path),
    ] {
        assert!(
            matches!(r, Err(Error::HomeLocked { .. })),
            "second open: {r:?}"
        );
    }
    let keyspace = home.app_db.clone();
    drop(home);
    assert!(
        matches!(Home::open(&path), Err(Error::HomeLocked { .. })),
        "a keyspace outliving its home keeps the lock"
    );
    drop(keyspace);
    drop(Home::open(&path).unwrap());

    // A node owning its home holds it until stopped.
    let (node, _) = open_node(Home::open_with(&path, journal()).unwrap());
    assert!(matches!(Home::open(&path), Err(Error::HomeLocked { .. })));
    node.stop(Instant::now()).unwrap();
    drop(Home::open(&path).unwrap());
}

#[test]
fn a_node_synced_stopped_and_reopened_on_a_journal_home_is_consistent_and_matches_redb() {
    let dir = tempfile::tempdir().unwrap();
    let jpath = dir.path().join("journal-home");
    let rpath = dir.path().join("redb-home");
    let on_journal = sync(Home::open_with(&jpath, journal()).unwrap(), 3, 14);
    let on_redb = sync(Home::open(&rpath).unwrap(), 3, 14);
    assert_eq!(on_journal, on_redb, "the two engines disagree on the chain");

    let (node, case) = open_node(Home::open(&jpath).unwrap());
    assert_eq!(case, HandshakeCase::Consistent);
    assert_eq!(node.height(), 14);
    assert_eq!(node.state(), &on_journal);
    node.stop(Instant::now()).unwrap();

    // And it syncs on.
    let more = sync(Home::open(&jpath).unwrap(), 0, 20);
    let more_redb = sync(Home::open(&rpath).unwrap(), 0, 20);
    assert_eq!(more, more_redb);
}

#[test]
fn rollback_on_a_journal_home_lowers_all_three_and_the_chain_resyncs_to_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home");
    let at_12 = sync(Home::open_with(&path, journal()).unwrap(), 2, 12);
    {
        let home = Home::open_for_rollback(&path).unwrap();
        assert_eq!(home.engine(), HomeEngine::Journal);
        let mut app = KvApp::open(Arc::new(HoldingDb::new(home.app_db.clone()))).unwrap();
        let r = flushpoint::rollback(&home, &mut app, &spec().chain(), 9).unwrap();
        assert_eq!(r.blocks_removed, 3, "{r:?}");
        assert!(r.app_rolled_back && r.state_rolled_back, "{r:?}");
    }
    let (node, case) = open_node(Home::open(&path).unwrap());
    assert_eq!(case, HandshakeCase::Consistent);
    assert_eq!(node.height(), 9);
    node.stop(Instant::now()).unwrap();
    assert_eq!(sync(Home::open(&path).unwrap(), 0, 12), at_12);
}

/// ADR 0013: a new journal home keeps its block parts in the journal (`FORMAT`'s `parts
/// journal` line); one created before (`FORMAT` without the line) keeps them in the index,
/// and both sync the same chain.
#[test]
fn a_new_journal_home_keeps_parts_in_the_journal_and_an_older_one_in_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new");
    let old = dir.path().join("old");
    // An older journal home: its FORMAT as builds before ADR 0013 wrote it.
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(
        old.join("FORMAT"),
        "flushpoint home format 2\nengine journal\n",
    )
    .unwrap();
    let on_new = sync(Home::open_with(&new, journal()).unwrap(), 2, 10);
    let on_old = sync(Home::open(&old).unwrap(), 2, 10);
    assert_eq!(on_new, on_old);
    let block_store = |path: &Path| {
        let home = Home::open(path).unwrap();
        let engine = home.journal().unwrap().clone();
        let options = engine.keyspace("block store").unwrap().options();
        let kept = engine.counts().values_kept_in_journal;
        (options, kept)
    };
    let (new_options, _) = block_store(&new);
    assert_eq!(
        new_options,
        flushpoint::journal::KeyspaceOptions::separating_values_from(
            flushpoint::journal::SEPARATE_VALUES_FROM_BYTES
        )
    );
    assert_eq!(
        block_store(&old),
        (flushpoint::journal::KeyspaceOptions::default(), 0),
        "an older home's parts stay in the index"
    );
    // Its FORMAT is left as it was.
    assert_eq!(
        std::fs::read_to_string(old.join("FORMAT")).unwrap(),
        "flushpoint home format 2\nengine journal\n"
    );
}

/// A journal home whose app state is indexed by sorted runs (ADR 0014, the default for a
/// new journal home): `FORMAT` says so, its node reaches the same state as a home created
/// with the tree (`app_index: Some(Tree)`) fed the same chain, it reopens on runs
/// unasked, and a request for the other index is refused with nothing written, as is runs
/// on a redb home.
#[test]
fn a_journal_home_with_app_runs_records_them_matches_the_tree_and_refuses_the_other_index() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let tree_home = dir.path().join("tree");
    let with_runs = journal().with_app_index(Some(flushpoint::journal::KeyspaceIndex::Runs));
    let on_runs = sync(Home::open_with(&runs, with_runs.clone()).unwrap(), 3, 30);
    let as_tree = journal().with_app_index(Some(flushpoint::journal::KeyspaceIndex::Tree));
    let on_tree = sync(Home::open_with(&tree_home, as_tree.clone()).unwrap(), 3, 30);
    assert_eq!(on_runs, on_tree, "runs and the tree disagree on the chain");
    assert_eq!(
        std::fs::read_to_string(runs.join("FORMAT")).unwrap(),
        "flushpoint home format 2\nengine journal\nparts journal\napp runs\napp values journal\n"
    );
    {
        let home = Home::open(&runs).unwrap();
        let engine = home.journal().unwrap().clone();
        // Its runs point at the app's values of 1 KiB or more in the journal (ADR 0016).
        assert_eq!(
            engine.keyspace("app").unwrap().options(),
            flushpoint::journal::KeyspaceOptions::indexed_by_runs()
                .with_values_separated_from(flushpoint::journal::SEPARATE_VALUES_FROM_BYTES)
        );
        assert!(engine.usage().unwrap().keyspaces["app"].entries > 0);
    }
    // Reopened unasked, it syncs on to the same state as the tree home.
    let (node, case) = open_node(Home::open(&runs).unwrap());
    assert_eq!(case, HandshakeCase::Consistent);
    node.stop(Instant::now()).unwrap();
    assert_eq!(
        sync(Home::open(&runs).unwrap(), 0, 40),
        sync(Home::open(&tree_home).unwrap(), 0, 40)
    );
    // The other index asked: refused, nothing written.
    let before = tree(&runs);
    assert!(matches!(
        Home::open_with(&runs, as_tree),
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(tree(&runs), before);
    assert!(matches!(
        Home::open_with(&tree_home, with_runs),
        Err(Error::InvalidInput(_))
    ));
    // Runs on a redb home: refused before its FORMAT exists.
    let redb_home = dir.path().join("redb");
    let redb_runs = HomeOptions::default()
        .with_engine(HomeEngine::Redb)
        .with_app_index(Some(flushpoint::journal::KeyspaceIndex::Runs));
    assert!(matches!(
        Home::open_with(&redb_home, redb_runs),
        Err(Error::InvalidInput(_))
    ));
    assert!(!redb_home.join("FORMAT").exists());
}

/// A home's files are opened through its lock-holding wrapper (`LockedFs`); the wrapper
/// forwards each file's writeback start (ADR 0015, "Applied while it is synced": a run
/// starts its writeback when written), so a write error it reports reaches the engine and
/// poisons it. Found by mutation testing: the wrapper's `start_writeback` as `Ok(())` (the
/// trait's default) passed every suite.
#[test]
fn a_journal_homes_files_forward_a_failed_writeback_start() {
    use support::fs::{Hook, HookedFs};
    let fs = SimFs::new();
    let path = Path::new("/h");
    let runs = path
        .join(flushpoint::home::JOURNAL_DIR)
        .join(flushpoint::journal::RUNS_DIR);
    let hooked = HookedFs::new(fs.clone(), Hook::FailWritebackUnder(runs));
    let options = journal().with_journal(
        flushpoint::journal::JournalOptions::default()
            .with_applier(flushpoint::journal::Applier::Inline),
    );
    let home = Home::open_on(Arc::new(hooked), path, options).unwrap();
    let mut b = flushpoint::Batch::new();
    b.put(&b"k"[..], &b"v"[..]);
    let err = home
        .app_db
        .write(&b, flushpoint::Durability::Synced)
        .expect_err("the app's run fails its writeback start: the write fails");
    assert!(err.to_string().contains("writeback"), "{err}");
    let err = home
        .app_db
        .write(&b, flushpoint::Durability::Synced)
        .expect_err("poisoned");
    assert_eq!(err.kind(), ErrorKind::Poisoned, "{err}");
}
