//! A home directory is open at most once: a second `Home::open` — in the same process or in
//! another one — fails at once with `Error::HomeLocked` naming the path, until the first
//! handle is dropped. A home written by another format version is refused with
//! `Error::HomeVersion`, before any database is opened.
//!
//! A node owns its home: built with `Node::open_home` it keeps the home locked until it is
//! dropped; built with `Node::open` over a home's databases, those databases keep the lock
//! alive after the `Home` itself is dropped — a second open gets `Error::HomeLocked`
//! (`ErrorKind::Locked`), never redb's "already open" storage error.
//!
//! The cross-process test runs this test binary again as a child, selecting the
//! `child_probe_opens_home_from_env` test and passing the home in an environment variable;
//! without that variable the probe has nothing to do.

use std::path::{Path, PathBuf};
use std::process::Command;

use std::sync::Arc;
use std::time::Instant;

use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::home::HOME_FORMAT_VERSION;
use flushpoint::{
    Db, Error, ErrorKind, HoldingDb, Home, HomeEngine, HomeOptions, NoEvents, Node, RedbDb,
    RedbOptions,
};

/// Environment variable naming the home the child process must try to open.
const CHILD_HOME_ENV: &str = "FLUSHPOINT_TEST_CHILD_HOME";
/// Prefix of the child's one-line report on stdout.
const REPORT: &str = "home-probe:";

/// A new home on redb: the engine whose files these tests name (a new home unasked is a
/// journal home, `HOME_ENGINE_DEFAULT`).
fn open_redb(path: &Path) -> flushpoint::Result<Home> {
    Home::open_with(path, HomeOptions::default().with_engine(HomeEngine::Redb))
}

fn expect_locked(r: flushpoint::Result<Home>, path: &Path) {
    match r {
        Err(Error::HomeLocked { path: p }) => {
            assert_eq!(p, path);
            let msg = Error::HomeLocked { path: p }.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
        }
        Err(e) => panic!("expected HomeLocked, got {e}"),
        Ok(_) => panic!("a second open of a locked home succeeded"),
    }
}

#[test]
fn fresh_redb_home_has_format_lock_and_three_databases() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home");
    let home = open_redb(&path).unwrap();
    assert_eq!(home.path(), path);
    let format = std::fs::read_to_string(path.join("FORMAT")).unwrap();
    assert_eq!(
        format,
        format!("flushpoint home format {HOME_FORMAT_VERSION}\n")
    );
    let mut names: Vec<String> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "FORMAT",
            "LOCK",
            "app.redb",
            "blockstore.redb",
            "state.redb"
        ]
    );
}

#[test]
fn second_open_in_the_same_process_fails_with_home_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let first = Home::open(&path).unwrap();
    expect_locked(Home::open(&path), &path);
    expect_locked(Home::open_existing(&path), &path);
    // From another thread too.
    let p = path.clone();
    std::thread::spawn(move || expect_locked(Home::open(&p), &p))
        .join()
        .unwrap();
    // The first handle still works, and dropping it releases the lock.
    assert_eq!(first.path(), path);
    drop(first);
    let again = Home::open(&path).unwrap();
    drop(again);
}

/// Runs this test binary as a child that tries to open `home`; returns its report line.
fn probe_in_child(home: &Path) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "--exact",
            "child_probe_opens_home_from_env",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_HOME_ENV, home)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        // The harness prints "test <name> ... " on the same line before the report.
        .find_map(|l| l.split_once(REPORT).map(|(_, r)| r))
        .unwrap_or_else(|| panic!("the child did not report: {stdout}"))
        .trim()
        .to_string()
}

#[test]
fn open_in_another_process_fails_with_home_locked_while_held() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("home");
    let held = Home::open(&path).unwrap();
    let report = probe_in_child(&path);
    assert_eq!(report, format!("locked {}", path.display()));
    // Released, the same probe opens it: the lock, not the probe, made it fail.
    drop(held);
    assert_eq!(probe_in_child(&path), "opened");
    // And the child closed it again on exit.
    Home::open(&path).unwrap();
}

/// The child's side of the cross-process test (a no-op unless the parent set the variable).
#[test]
fn child_probe_opens_home_from_env() {
    let Some(home) = std::env::var_os(CHILD_HOME_ENV) else {
        return;
    };
    let path = PathBuf::from(home);
    let report = match Home::open(&path) {
        Ok(_) => "opened".to_string(),
        Err(Error::HomeLocked { path }) => format!("locked {}", path.display()),
        Err(e) => format!("error {e}"),
    };
    println!("{REPORT} {report}");
}

#[test]
fn home_with_another_format_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    drop(open_redb(&path).unwrap());
    let db_file = path.join("blockstore.redb");
    let db_before = std::fs::read(&db_file).unwrap();
    for found in [0, HOME_FORMAT_VERSION + 1, 1_000] {
        std::fs::write(
            path.join("FORMAT"),
            format!("flushpoint home format {found}\n"),
        )
        .unwrap();
        match Home::open(&path) {
            Err(Error::HomeVersion {
                path: p,
                found: f,
                expected,
            }) => {
                assert_eq!(p, path);
                assert_eq!(f, found);
                assert_eq!(expected, HOME_FORMAT_VERSION);
            }
            Err(e) => panic!("version {found}: expected HomeVersion, got {e}"),
            Ok(_) => panic!("version {found}: a home of another version was opened"),
        }
    }
    // A FORMAT file that is not ours, beside the home's databases, is a damaged home.
    std::fs::write(path.join("FORMAT"), "something else\n").unwrap();
    assert!(matches!(Home::open(&path), Err(Error::HomeDamaged { .. })));
    // The refusals touched no database, and released the lock.
    assert_eq!(std::fs::read(&db_file).unwrap(), db_before);
    std::fs::write(
        path.join("FORMAT"),
        format!("flushpoint home format {HOME_FORMAT_VERSION}\n"),
    )
    .unwrap();
    drop(Home::open(&path).unwrap());
}

#[test]
fn open_existing_refuses_a_directory_that_is_not_a_home() {
    let dir = tempfile::tempdir().unwrap();
    match Home::open_existing(dir.path()) {
        Err(Error::Home { path, .. }) => assert_eq!(path, dir.path()),
        other => panic!("expected Error::Home, got {other:?}"),
    }
    // Nothing was created.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

fn kv_app(
    app_db: Arc<dyn Db>,
) -> flushpoint::Result<Box<dyn flushpoint::App<flushpoint::demo::DemoChain>>> {
    Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(app_db)))?))
}

/// Opens a node that owns the home at `path` and commits `blocks` blocks.
fn node_in_home(path: &Path, spec: &ChainSpec, blocks: u64) -> Node<flushpoint::demo::DemoChain> {
    let home = Home::open(path).unwrap();
    let (mut node, _) = Node::open_home(home, kv_app, spec.chain(), Box::new(NoEvents)).unwrap();
    for _ in 0..blocks {
        let (b, p, c) = spec.next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    node
}

#[test]
fn a_node_owns_its_home_until_it_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home");
    let spec = ChainSpec::new(7, Profile::Light);
    let node = node_in_home(&path, &spec, 3);
    assert_eq!(node.home().unwrap().path(), path);
    let e = Home::open(&path).expect_err("a home a node owns was opened again");
    assert_eq!(e.kind(), ErrorKind::Locked, "{e}");
    expect_locked(Home::open(&path), &path);
    let p = path.clone();
    std::thread::spawn(move || expect_locked(Home::open(&p), &p))
        .join()
        .unwrap();
    drop(node);
    // Released: the home opens, and the node's blocks are there.
    let (node, report) = Node::open_home(
        Home::open(&path).unwrap(),
        kv_app,
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    assert_eq!(report.height, 3);
    // `stop` releases it too.
    node.stop(Instant::now()).unwrap();
    drop(Home::open(&path).unwrap());
}

#[test]
fn a_homes_databases_keep_it_locked_after_the_home_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home");
    let spec = ChainSpec::new(8, Profile::Light);
    let home = Home::open(&path).unwrap();
    let (node, _) = Node::open(
        home.block_store_db.clone(),
        home.state_db.clone(),
        kv_app(home.app_db.clone()).unwrap(),
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    // The node still has the databases open: the lock must outlive the `Home`.
    drop(home);
    match Home::open(&path) {
        Err(Error::HomeLocked { path: p }) => assert_eq!(p, path),
        Err(e) => panic!(
            "expected HomeLocked while the node is open, got {e} ({:?})",
            e.kind()
        ),
        Ok(_) => panic!("a home whose databases are open was opened again"),
    }
    drop(node);
    drop(Home::open(&path).unwrap());
}

#[test]
fn a_node_holds_its_home_against_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home");
    let spec = ChainSpec::new(9, Profile::Light);
    let node = node_in_home(&path, &spec, 2);
    assert_eq!(probe_in_child(&path), format!("locked {}", path.display()));
    drop(node);
    assert_eq!(probe_in_child(&path), "opened");
}

#[test]
fn a_database_file_opened_twice_is_locked_not_a_generic_storage_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("one.redb");
    let first = RedbDb::open(&file, "one", &RedbOptions::default()).unwrap();
    let e = RedbDb::open(&file, "one", &RedbOptions::default()).expect_err("opened twice");
    assert_eq!(e.kind(), ErrorKind::Locked, "{e}");
    drop(first);
    RedbDb::open(&file, "one", &RedbOptions::default()).unwrap();
}
