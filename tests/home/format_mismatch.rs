//! A home whose files do not match its `FORMAT` is refused, never taken for a new one: a
//! lost `FORMAT` beside databases, a journal home's `FORMAT` cut to its first line (which
//! reads as redb), a redb home whose `FORMAT` names the journal. Each refusal is
//! `Error::HomeDamaged` (kind `Corrupt`), names the files found, and leaves every file of
//! the home byte for byte as it was. A directory with only a lock file, or a `FORMAT`
//! whose databases a cut kept from being created, still opens as the new home it is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::{
    Db, Error, ErrorKind, FlushPolicy, HoldingDb, Home, HomeEngine, HomeOptions, NoEvents, Node,
};

fn spec() -> ChainSpec {
    ChainSpec::new(5, Profile::Light)
}

/// A home on `engine` synced to height 12 (8 block-synced, 4 consensus), cleanly stopped.
fn synced_home(dir: &Path, engine: HomeEngine) {
    let home = Home::open_with(dir, HomeOptions::default().with_engine(engine)).unwrap();
    let (mut node, _) = Node::open_home(
        home,
        |app_db: Arc<dyn Db>| Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(app_db)))?)),
        spec().chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    node.start_block_sync(FlushPolicy::default(), Instant::now())
        .unwrap();
    while node.height() < 8 {
        let (b, p, c) = spec().next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    node.switch_to_consensus(Instant::now()).unwrap();
    while node.height() < 12 {
        let (b, p, c) = spec().next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    node.stop(Instant::now()).unwrap();
}

/// Every file under `dir` (recursively) with its bytes; directories as empty entries.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if p.is_dir() {
                out.insert(rel, None);
                todo.push(p);
            } else {
                out.insert(rel, Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// Opens `dir` (with `options`), expecting `HomeDamaged` naming `names`, and checks that
/// nothing under `dir` changed.
fn assert_refused(dir: &Path, options: HomeOptions, names: &[&str]) {
    let before = snapshot(dir);
    let Err(e) = Home::open_with(dir, options) else {
        panic!("a damaged home was opened");
    };
    assert!(
        matches!(e, Error::HomeDamaged { .. }),
        "not HomeDamaged: {e}"
    );
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    let text = e.to_string();
    for n in names {
        assert!(text.contains(n), "{text:?} does not name {n}");
    }
    assert!(text.contains(&dir.display().to_string()), "{text}");
    assert_eq!(snapshot(dir), before, "a refused open changed the home");
}

fn format_path(dir: &Path) -> PathBuf {
    dir.join("FORMAT")
}

#[test]
fn a_home_without_its_format_is_refused_on_either_engine_and_left_as_it_was() {
    for engine in [HomeEngine::Redb, HomeEngine::Journal] {
        let tmp = tempfile::tempdir().unwrap();
        synced_home(tmp.path(), engine);
        std::fs::remove_file(format_path(tmp.path())).unwrap();
        let names: &[&str] = match engine {
            HomeEngine::Redb => &["no FORMAT", "blockstore.redb", "state.redb", "app.redb"],
            _ => &["no FORMAT", "journal/"],
        };
        // Whatever engine is asked for, or none.
        for asked in [None, Some(HomeEngine::Redb), Some(HomeEngine::Journal)] {
            let options = match asked {
                Some(e) => HomeOptions::default().with_engine(e),
                None => HomeOptions::default(),
            };
            assert_refused(tmp.path(), options, names);
        }
    }
}

#[test]
fn a_journal_home_whose_format_is_cut_to_its_first_line_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    synced_home(tmp.path(), HomeEngine::Journal);
    let text = std::fs::read_to_string(format_path(tmp.path())).unwrap();
    let first = text.lines().next().unwrap();
    std::fs::write(format_path(tmp.path()), format!("{first}\n")).unwrap();
    assert_refused(
        tmp.path(),
        HomeOptions::default(),
        &["records the redb engine", "journal/"],
    );
}

#[test]
fn a_redb_home_whose_format_names_the_journal_is_refused() {
    let journal = tempfile::tempdir().unwrap();
    Home::open_with(
        journal.path(),
        HomeOptions::default().with_engine(HomeEngine::Journal),
    )
    .unwrap();
    let journal_format = std::fs::read(format_path(journal.path())).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    synced_home(tmp.path(), HomeEngine::Redb);
    std::fs::write(format_path(tmp.path()), journal_format).unwrap();
    assert_refused(
        tmp.path(),
        HomeOptions::default(),
        &["records the journal engine", "blockstore.redb"],
    );
}

#[test]
fn a_directory_with_a_lock_file_only_or_a_format_without_databases_opens_as_new() {
    for engine in [HomeEngine::Redb, HomeEngine::Journal] {
        // A lock file alone: an open that stopped before its FORMAT was written.
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("LOCK"), b"").unwrap();
        drop(Home::open_with(tmp.path(), HomeOptions::default().with_engine(engine)).unwrap());
        // A FORMAT whose databases were never created: a cut between the two.
        let tmp = tempfile::tempdir().unwrap();
        drop(Home::open_with(tmp.path(), HomeOptions::default().with_engine(engine)).unwrap());
        let format = std::fs::read(format_path(tmp.path())).unwrap();
        let fresh = tempfile::tempdir().unwrap();
        std::fs::write(format_path(fresh.path()), format).unwrap();
        let home = Home::open(fresh.path()).unwrap();
        assert_eq!(home.engine(), engine);
    }
}

#[test]
fn an_unreadable_format_beside_databases_is_a_damaged_home_and_alone_no_home() {
    for engine in [HomeEngine::Redb, HomeEngine::Journal] {
        let tmp = tempfile::tempdir().unwrap();
        synced_home(tmp.path(), engine);
        std::fs::write(format_path(tmp.path()), b"flushpoint home f\x01rmat 2\n").unwrap();
        assert_refused(
            tmp.path(),
            HomeOptions::default(),
            &["its FORMAT is not one flushpoint writes"],
        );
    }
    // No databases beside it: a directory that is not a home, as before.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(format_path(tmp.path()), b"not a home\n").unwrap();
    let Err(e) = Home::open(tmp.path()) else {
        panic!("a directory with a foreign FORMAT opened");
    };
    assert!(matches!(e, Error::Home { .. }), "{e}");
    assert!(e.to_string().contains("not a flushpoint home"), "{e}");
}
