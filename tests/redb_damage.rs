//! A damaged redb file is never silently accepted and never panics: for each redb file of a
//! home (a redb home's `blockstore.redb`, `state.redb`, `app.redb`; a journal home's
//! `journal/index.redb`) and each 4 KiB page of it (a deterministic sample of at least
//! [`SAMPLE_PAGES_MIN`] pages; every page under `FLUSHPOINT_FULL=1`), a copy of the home with
//! that page zeroed is opened, read whole through the library (every block by height and by
//! hash, every commit, the state and its results, the app's pairs; the journal's usage),
//! then opened as a node that commits one more block. Every step must return either the
//! undamaged home's answers or a typed error of kind `Corrupt` (or `Io`/`Poisoned` carrying
//! the damaged database's name) — never a panic (the library catches redb's own), never a
//! wrong answer.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flushpoint::demo::{ChainSpec, DemoChain, KvApp, Profile};
use flushpoint::{
    Db, Direction, Error, ErrorKind, FlushPolicy, HoldingDb, Home, HomeEngine, HomeOptions,
    KeyRange, NoEvents, Node, collect_range,
};

/// redb's page size, the unit zeroed.
const PAGE_BYTES: usize = 4096;
/// Pages zeroed per file in the default run (spread over the file, first and last
/// included). Why: the whole matrix runs in well under a minute in release.
const SAMPLE_PAGES_MIN: usize = 24;

fn spec() -> ChainSpec {
    ChainSpec {
        validator_change_every: 3,
        params_change_every: 7,
        empty_every: 5,
        ..ChainSpec::new(0xda, Profile::Light)
    }
}

fn options(engine: HomeEngine) -> HomeOptions {
    HomeOptions::with_engine(engine)
}

fn open_node(home: Home) -> flushpoint::Result<Node<DemoChain>> {
    let (node, _) = Node::open_home(
        home,
        |app_db: Arc<dyn Db>| Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(app_db)))?)),
        spec().chain(),
        Box::new(NoEvents),
    )?;
    Ok(node)
}

/// A home synced to height 12 (consensus blocks, then block sync in windows of 4), cleanly
/// stopped.
fn build(path: &Path, engine: HomeEngine) {
    let mut node = open_node(Home::open_with(path, options(engine)).unwrap()).unwrap();
    while node.height() < 5 {
        let (b, p, c) = spec().next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    let policy = FlushPolicy {
        window_blocks_max: Some(4),
        interval: Duration::from_secs(3600),
        ..FlushPolicy::default()
    };
    node.start_block_sync(policy, Instant::now()).unwrap();
    while node.height() < 12 {
        let (b, p, c) = spec().next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    node.stop(Instant::now()).unwrap();
}

/// Everything the library reads from the home at `path`, as text (one line per answer):
/// the open, every block by height and by hash with its commits and meta, the state and
/// its results, every pair of the app's database, the journal's usage. The first error
/// ends it.
fn read_home(path: &Path, engine: HomeEngine) -> flushpoint::Result<Vec<String>> {
    let home = Home::open_with(path, options(engine))?;
    let mut out = Vec::new();
    let blocks =
        flushpoint::BlockStore::<flushpoint::demo::Block>::open(home.block_store_db.clone())?;
    out.push(format!("blocks {}..={}", blocks.base(), blocks.height()));
    out.push(format!("flush record {:?}", blocks.load_flush_record()?));
    for h in blocks.base()..=blocks.height() + 1 {
        let block = blocks.load_block(h)?;
        out.push(format!("block {h} {block:?}"));
        out.push(format!("meta {h} {:?}", blocks.load_block_meta(h)?));
        out.push(format!("commit {h} {:?}", blocks.load_block_commit(h)?));
        out.push(format!("seen {h} {:?}", blocks.load_seen_commit(h)?));
        if let Some(b) = block {
            let hash = b.header.hash();
            out.push(format!(
                "by hash {h} {:?}",
                blocks.load_block_by_hash(&hash)?
            ));
        }
    }
    let states = flushpoint::StateStore::<DemoChain>::open(home.state_db.clone());
    let state = states.load_state()?;
    out.push(format!("state {state:?}"));
    out.push(format!("genesis {:?}", states.load_genesis_hash()?));
    if let Some(s) = &state {
        for h in states.base()?.max(1)..=s.last_block_height {
            out.push(format!("results {h} {:?}", states.load_results(h)?));
        }
    }
    for (k, v) in collect_range(&*home.app_db, KeyRange::all(), Direction::Forward)? {
        out.push(format!(
            "app {} {}",
            flushpoint::hex(&k),
            flushpoint::hex(&v)
        ));
    }
    let reverse = collect_range(&*home.app_db, KeyRange::all(), Direction::Reverse)?;
    out.push(format!("app reverse {}", reverse.len()));
    if let Some(j) = home.journal() {
        // Counted, not compared: the open's checkpoint may change the files' sizes.
        j.usage()?;
    }
    Ok(out)
}

/// The node's view after its open (handshake) and one more committed block, then a stop.
fn run_node(path: &Path, engine: HomeEngine) -> flushpoint::Result<Vec<String>> {
    let mut node = open_node(Home::open_with(path, options(engine))?)?;
    let mut out = vec![format!("opened at {} {:?}", node.height(), node.state())];
    let (b, p, c) = spec().next_block(node.state());
    node.commit_block(&b, &p, &c)?;
    out.push(format!("committed {} {:?}", node.height(), node.state()));
    node.stop(Instant::now())?;
    Ok(out)
}

/// What one step of a case came to.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The undamaged home's answers.
    Correct,
    /// A typed error that names the damaged file or its database (its kind and message).
    Typed(ErrorKind, String),
}

/// Checks one step's result against the undamaged home's: a panic, a wrong answer, or an
/// error of another kind or not naming `names` (any of them) is a failure (`Err`, with why).
fn judge(
    result: std::thread::Result<flushpoint::Result<Vec<String>>>,
    want: &[String],
    names: &[&str],
) -> Result<Outcome, String> {
    match result {
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("panicked: {msg}"))
        }
        Ok(Ok(got)) if got == want => Ok(Outcome::Correct),
        Ok(Ok(got)) => {
            let at = got
                .iter()
                .zip(want)
                .position(|(g, w)| g != w)
                .unwrap_or(got.len().min(want.len()));
            Err(format!(
                "a wrong answer at line {at}: got {:?}, want {:?}",
                got.get(at),
                want.get(at)
            ))
        }
        Ok(Err(e)) => judge_error(&e, names).map(|kind| Outcome::Typed(kind, e.to_string())),
    }
}

/// A damaged file's error: `Corrupt`; or `Io` (redb's own checks, reported as a storage
/// error) or `Poisoned` (a later call after the first failure), each naming the file or its
/// database.
fn judge_error(e: &Error, names: &[&str]) -> Result<ErrorKind, String> {
    let text = e.to_string();
    let kind = e.kind();
    if !matches!(
        kind,
        ErrorKind::Corrupt | ErrorKind::Io | ErrorKind::Poisoned
    ) {
        return Err(format!("an error of kind {kind:?}: {text}"));
    }
    if !names.iter().any(|n| text.contains(n)) {
        return Err(format!("an error naming none of {names:?}: {text}"));
    }
    if let Error::CorruptFile { path, .. } = e
        && !path
            .as_deref()
            .is_some_and(|p| names.iter().any(|n| p.to_string_lossy().contains(n)))
    {
        return Err(format!("a damaged-file error for another file: {text}"));
    }
    Ok(kind)
}

/// Copies the home at `from` to `to` (recursively).
fn copy_home(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_home(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The pages of a file of `len` bytes to zero: all under `FLUSHPOINT_FULL=1` or when there
/// are few; else [`SAMPLE_PAGES_MIN`] spread evenly, the first and the last included.
fn pages(len: u64) -> Vec<usize> {
    let n = (len as usize).div_ceil(PAGE_BYTES);
    let full = std::env::var("FLUSHPOINT_FULL").is_ok_and(|v| v == "1");
    if full || n <= SAMPLE_PAGES_MIN {
        return (0..n).collect();
    }
    let mut out: Vec<usize> = (0..SAMPLE_PAGES_MIN)
        .map(|i| i * (n - 1) / (SAMPLE_PAGES_MIN - 1))
        .collect();
    out.dedup();
    out
}

/// Per file: cases, steps answered correctly, typed errors by kind, failures.
#[derive(Debug, Default)]
struct Tally {
    cases: usize,
    correct: usize,
    typed: std::collections::BTreeMap<String, usize>,
    /// The first message of each kind, printed as an example.
    examples: std::collections::BTreeMap<String, String>,
    failures: Vec<String>,
}

/// One home of `engine`: for each of its redb `files` (relative paths) and each sampled page,
/// a damaged copy, read and run as a node; the tallies are printed and every failure
/// listed.
fn damage_every_file(engine: HomeEngine, files: &[(&str, &[&str])]) {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine");
    build(&pristine, engine);
    // The undamaged answers, from copies (an open may write: a checkpoint, a repair).
    let reference = |step: &str| {
        let p = dir.path().join(format!("reference-{step}"));
        copy_home(&pristine, &p);
        p
    };
    let want_read = read_home(&reference("read"), engine).unwrap();
    let want_node = run_node(&reference("node"), engine).unwrap();
    let mut failed = Vec::new();
    for (file, names) in files {
        let len = std::fs::metadata(pristine.join(file)).unwrap().len();
        let mut tally = Tally::default();
        let mut names = names.to_vec();
        names.push(file);
        for page in pages(len) {
            let case = dir
                .path()
                .join(format!("case-{}-{page}", file.replace('/', "-")));
            copy_home(&pristine, &case);
            let target = case.join(file);
            let mut bytes = std::fs::read(&target).unwrap();
            let at = page * PAGE_BYTES;
            let end = (at + PAGE_BYTES).min(bytes.len());
            bytes[at..end].fill(0);
            std::fs::write(&target, &bytes).unwrap();
            tally.cases += 1;
            // The reads first, then (on the same damaged copy) the node.
            let steps: [(&str, &[String], &dyn Fn() -> _); 2] = [
                ("read", &want_read, &|| read_home(&case, engine)),
                ("node", &want_node, &|| run_node(&case, engine)),
            ];
            for (step, want, run) in steps {
                let result = catch_unwind(AssertUnwindSafe(run));
                match judge(result, want, &names) {
                    Ok(Outcome::Correct) => tally.correct += 1,
                    Ok(Outcome::Typed(kind, text)) => {
                        *tally.typed.entry(format!("{kind:?}")).or_default() += 1;
                        tally.examples.entry(format!("{kind:?}")).or_insert(text);
                    }
                    Err(why) => tally
                        .failures
                        .push(format!("{file} page {page} {step}: {why}")),
                }
            }
            std::fs::remove_dir_all(&case).unwrap();
        }
        println!(
            "{engine:?} {file}: {} pages of {}, {} cases: {} steps correct, typed errors {:?}, failures (panics, wrong answers, untyped errors) {}",
            len.div_ceil(PAGE_BYTES as u64),
            len,
            tally.cases,
            tally.correct,
            tally.typed,
            tally.failures.len()
        );
        for (kind, text) in &tally.examples {
            println!("  e.g. {kind}: {text}");
        }
        for f in &tally.failures {
            println!("  FAILED {f}");
        }
        failed.extend(tally.failures);
    }
    assert!(
        failed.is_empty(),
        "{} failures; first: {}",
        failed.len(),
        failed[0]
    );
}

#[test]
fn a_zeroed_page_in_any_redb_file_of_a_redb_home_is_a_typed_error_or_the_right_answer() {
    flushpoint::quiet_caught_redb_panics();
    damage_every_file(
        HomeEngine::Redb,
        &[
            ("blockstore.redb", &["block store"]),
            ("state.redb", &["state"]),
            ("app.redb", &["app"]),
        ],
    );
}

#[test]
fn a_zeroed_page_in_a_journal_homes_index_is_a_typed_error_or_the_right_answer() {
    flushpoint::quiet_caught_redb_panics();
    damage_every_file(HomeEngine::Journal, &[("journal/index.redb", &["journal"])]);
}

/// The checker itself: a step that panics is a failure, as is a wrong answer, an untyped
/// kind, or an error naming another file; the right answer and a typed error naming the
/// file pass.
#[test]
fn the_checker_fails_a_panicking_read_and_a_wrong_answer() {
    let want = vec!["a".to_string()];
    let names = ["state.redb", "state"];
    let panicked = catch_unwind(|| -> flushpoint::Result<Vec<String>> {
        panic!("internal error: entered unreachable code")
    });
    let why = judge(panicked, &want, &names).unwrap_err();
    assert!(why.contains("panicked: internal error"), "{why}");
    let wrong = judge(Ok(Ok(vec!["b".to_string()])), &want, &names).unwrap_err();
    assert!(wrong.contains("wrong answer"), "{wrong}");
    assert_eq!(
        judge(Ok(Ok(want.clone())), &want, &names),
        Ok(Outcome::Correct)
    );
    let invalid = Error::InvalidInput("state".to_string());
    assert!(judge(Ok(Err(invalid)), &want, &names).is_err());
    let other_file = Error::CorruptFile {
        db: "state".to_string(),
        path: Some(PathBuf::from("/h/app.redb")),
        op: "get",
        cause: flushpoint::EnginePanic {
            message: "x".to_string(),
        },
    };
    assert!(judge(Ok(Err(other_file)), &want, &names).is_err());
    let right_file = Error::CorruptFile {
        db: "state".to_string(),
        path: Some(PathBuf::from("/h/state.redb")),
        op: "get",
        cause: flushpoint::EnginePanic {
            message: "x".to_string(),
        },
    };
    assert!(matches!(
        judge(Ok(Err(right_file)), &want, &names),
        Ok(Outcome::Typed(ErrorKind::Corrupt, _))
    ));
}
