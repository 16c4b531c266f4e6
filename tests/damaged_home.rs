//! The damaged-home suite: every file of a home of either engine × every damage, generated
//! from the files the home holds, not listed by hand.
//!
//! Homes: a redb home and a journal home (small segments, so it holds a live segment,
//! segments held for their values, a spare and the app's run files), each synced through
//! consensus blocks and block-sync windows and cleanly stopped. Files are classified by name
//! ([`kind_of`]); a file kind with nothing to damage in a home (a retired segment, which a
//! clean stop deletes) is absent from the counts.
//!
//! Damages ([`damages_of`]): a bit flip at sampled offsets, a zeroed 4 KiB page at sampled
//! pages, truncation at a unit boundary and inside a unit (segments; other files: half and
//! one byte short), deletion, garbage appended, a sparse extension to 1 TiB, the file
//! replaced by a directory. Sampled offsets are deterministic; [`SAMPLES_CI`] per damage in
//! the default run, [`SAMPLES_FULL`] under `FLUSHPOINT_FULL=1`.
//!
//! Each case is a copy of the home, damaged, then read whole through the library (every
//! block by height and hash with its commits and meta, the state and its results, every
//! pair of the app, the journal's usage) and then opened as a node that commits one more
//! block. Each step must give the undamaged home's answers (nothing lost, or a repair that
//! loses nothing acknowledged) or a typed error of a damage kind naming the file or its
//! database ([`judge`]) — never a panic, an abort, a silent truncation or a wrong answer.
//! Peak RSS over the suite stays under [`RSS_PEAK_MAX_BYTES`] (a 1 TiB sparse segment is
//! streamed, never read whole). The counts per file kind and damage are printed. A target
//! of its own: the peak RSS (`VmHWM`) it bounds is the process's.

mod support;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flushpoint::db::collect_range;
use flushpoint::demo::{ChainSpec, DemoChain, KvApp, Profile};
use flushpoint::journal::KeyspaceIndex;
use flushpoint::{
    Db, Direction, Error, ErrorKind, FlushPolicy, HoldingDb, Home, HomeEngine, HomeOptions,
    KeyRange, NoEvents, Node,
};
use support::full;

/// The unit zeroed: redb's page size and the file system's block.
const PAGE_BYTES: u64 = 4096;
/// Offsets or pages sampled per damage and file in the default run. Why: the whole matrix
/// of both homes runs in well under a minute in release on two cores.
const SAMPLES_CI: usize = 6;
/// Offsets or pages sampled per damage and file under `FLUSHPOINT_FULL=1`.
const SAMPLES_FULL: usize = 48;
/// The size a sparse extension grows a file to: far past any length the engines write, so
/// reading it whole could not fit in memory.
const SPARSE_BYTES: u64 = 1 << 40;
/// The most resident memory the suite's process may reach, in bytes. Why: both homes are a
/// few MiB; a recovery that reads a 1 TiB file whole, or allocates by a damaged length,
/// passes this at once.
const RSS_PEAK_MAX_BYTES: u64 = 1 << 30;
/// Garbage appended to a file: not zeros (a zero tail is a prepared segment's free space).
const GARBAGE: &[u8] = &[0xa5; 100];
/// Blocks in each home: enough for several journal segments of [`SEGMENT_BYTES`].
const HEIGHT: u64 = 40;
/// The journal home's segment size, in bytes: small, so the blocks span several segments.
const SEGMENT_BYTES: u64 = 64 * 1024;
/// A unit's header and trailer (docs/FORMAT.md §9): 32 bytes, `body_len` (u32 LE) at 24,
/// then the body and a 4-byte checksum.
const UNIT_HEADER_BYTES: usize = 32;
const UNIT_BODY_LEN_AT: usize = 24;
const UNIT_TRAILER_BYTES: usize = 4;

fn spec() -> ChainSpec {
    ChainSpec {
        validator_change_every: 3,
        params_change_every: 7,
        empty_every: 5,
        ..ChainSpec::new(0xda, Profile::Light)
    }
}

fn options(engine: HomeEngine) -> HomeOptions {
    let mut o = HomeOptions::default().with_engine(engine);
    o.journal.segment_bytes = SEGMENT_BYTES;
    if engine == HomeEngine::Journal {
        o.app_index = Some(KeyspaceIndex::Runs);
    }
    o
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

/// A home synced to [`HEIGHT`] (five consensus blocks, then block sync in windows of 4),
/// cleanly stopped.
fn build(path: &Path, engine: HomeEngine) {
    let mut node = open_node(Home::open_with(path, options(engine)).unwrap()).unwrap();
    while node.height() < 5 {
        let (b, p, c) = spec().next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    let policy = FlushPolicy::default()
        .with_window_blocks_max(Some(4))
        .with_interval(Duration::from_secs(3600));
    node.start_block_sync(policy, Instant::now()).unwrap();
    while node.height() < HEIGHT {
        let (b, p, c) = spec().next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    node.stop(Instant::now()).unwrap();
}

/// Everything the library reads from the home at `path`, as text (one line per answer).
/// The first error ends it.
fn read_home(path: &Path, engine: HomeEngine) -> flushpoint::Result<Vec<String>> {
    let home = Home::open_with(path, options(engine))?;
    let mut out = Vec::new();
    let blocks = flushpoint::store::BlockStore::<flushpoint::demo::Block>::open(
        home.block_store_db.clone(),
    )?;
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
    let states = flushpoint::store::StateStore::<DemoChain>::open(home.state_db.clone());
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
            flushpoint::codec::hex(&k),
            flushpoint::codec::hex(&v)
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

/// What a file of a home is, by its path relative to the home; `None` for a directory.
fn kind_of(rel: &str) -> &'static str {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    match rel {
        "FORMAT" => "FORMAT",
        "LOCK" => "LOCK",
        "journal/LOCK" => "journal LOCK",
        "journal/index.redb" => "journal index",
        _ if rel.starts_with("journal/runs/") => "run",
        _ if name == "spare.segment" => "spare segment",
        _ if name.ends_with(".seg") => "segment",
        _ if name.ends_with(".redb") => "redb file",
        _ if name == flushpoint::home::ROLLBACK_INTENT_FILE => "rollback intent",
        _ => "other",
    }
}

/// What a damaged file's error may name: the file, its directory's role, its database.
fn names_of(rel: &str) -> Vec<String> {
    let name = rel.rsplit('/').next().unwrap_or(rel).to_string();
    let mut names = vec![rel.to_string(), name];
    match rel {
        "blockstore.redb" => names.push("block store".into()),
        "state.redb" => names.push("state".into()),
        "app.redb" => names.push("app".into()),
        _ if rel.starts_with("journal/runs/") => names.push("journal".into()),
        // Segments and the index hold every database's records: a record's own checksum
        // names the database and key it failed at.
        _ if rel.starts_with("journal/") => names.extend(
            ["journal", "block store", "state", "app"]
                .iter()
                .map(|s| s.to_string()),
        ),
        _ => {}
    }
    names
}

/// A damage to one file.
#[derive(Debug, Clone)]
enum Damage {
    /// One bit flipped, at this bit index.
    FlipBit(u64),
    /// The 4 KiB page at this index zeroed (the file's tail when shorter).
    ZeroPage(u64),
    /// Cut to this length; the label says where the cut falls.
    Cut(u64, &'static str),
    Delete,
    AppendGarbage,
    /// Grown to [`SPARSE_BYTES`] with a hole.
    Sparse,
    /// Removed, and a directory made in its place.
    Directory,
}

impl Damage {
    /// The damage's family, for the counts.
    fn family(&self) -> &'static str {
        match self {
            Damage::FlipBit(_) => "bit flip",
            Damage::ZeroPage(_) => "zeroed page",
            Damage::Cut(_, at) => at,
            Damage::Delete => "deleted",
            Damage::AppendGarbage => "garbage appended",
            Damage::Sparse => "sparse to 1 TiB",
            Damage::Directory => "replaced by a directory",
        }
    }

    fn apply(&self, path: &Path) {
        let set_len = |len: u64| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .unwrap()
                .set_len(len)
                .unwrap()
        };
        match *self {
            Damage::FlipBit(bit) => {
                let mut bytes = std::fs::read(path).unwrap();
                bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
                std::fs::write(path, bytes).unwrap();
            }
            Damage::ZeroPage(page) => {
                let mut bytes = std::fs::read(path).unwrap();
                let at = ((page * PAGE_BYTES) as usize).min(bytes.len());
                let end = (at + PAGE_BYTES as usize).min(bytes.len());
                bytes[at..end].fill(0);
                std::fs::write(path, bytes).unwrap();
            }
            Damage::Cut(len, _) => set_len(len),
            Damage::Delete => std::fs::remove_file(path).unwrap(),
            Damage::AppendGarbage => {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
                f.write_all(GARBAGE).unwrap();
            }
            Damage::Sparse => set_len(SPARSE_BYTES),
            Damage::Directory => {
                std::fs::remove_file(path).unwrap();
                std::fs::create_dir(path).unwrap();
            }
        }
    }
}

/// `n` values spread evenly over `0..len`, the first and the last included (all when fewer).
fn spread(len: u64, n: usize) -> Vec<u64> {
    if len == 0 {
        return Vec::new();
    }
    if len <= n as u64 {
        return (0..len).collect();
    }
    let mut out: Vec<u64> = (0..n as u64)
        .map(|i| i * (len - 1) / (n as u64 - 1).max(1))
        .collect();
    out.dedup();
    out
}

/// The offsets where a segment's units end (each a unit boundary), read by the layout of
/// docs/FORMAT.md; a zero header is a prepared segment's free space.
fn unit_ends(bytes: &[u8]) -> Vec<u64> {
    let mut ends = Vec::new();
    let mut at = 0usize;
    while at + UNIT_HEADER_BYTES <= bytes.len() {
        let header = &bytes[at..at + UNIT_HEADER_BYTES];
        if header.iter().all(|b| *b == 0) {
            break;
        }
        let body = u32::from_le_bytes(
            header[UNIT_BODY_LEN_AT..UNIT_BODY_LEN_AT + 4]
                .try_into()
                .unwrap(),
        ) as usize;
        let end = at + UNIT_HEADER_BYTES + body + UNIT_TRAILER_BYTES;
        if end > bytes.len() {
            break;
        }
        ends.push(end as u64);
        at = end;
    }
    ends
}

/// Every damage for the file `rel` holding `bytes`, sampled by `samples`.
fn damages_of(rel: &str, bytes: &[u8], samples: usize) -> Vec<Damage> {
    let len = bytes.len() as u64;
    let mut out: Vec<Damage> = Vec::new();
    out.extend(spread(len * 8, samples).into_iter().map(Damage::FlipBit));
    out.extend(
        spread(len.div_ceil(PAGE_BYTES), samples)
            .into_iter()
            .map(Damage::ZeroPage),
    );
    if kind_of(rel) == "segment" {
        let ends = unit_ends(bytes);
        // Every boundary but the last unit's end: each loses at least one unit.
        let below: Vec<u64> = std::iter::once(0)
            .chain(ends.iter().copied())
            .filter(|e| Some(e) != ends.last())
            .collect();
        for i in spread(below.len() as u64, samples) {
            out.push(Damage::Cut(below[i as usize], "cut at a unit boundary"));
        }
        let starts: Vec<u64> = std::iter::once(0).chain(ends.iter().copied()).collect();
        for i in spread(ends.len() as u64, samples) {
            let (s, e) = (starts[i as usize], ends[i as usize]);
            out.push(Damage::Cut(s + (e - s) / 2, "cut inside a unit"));
        }
    } else if len > 0 {
        out.push(Damage::Cut(len / 2, "cut to half"));
        out.push(Damage::Cut(len - 1, "cut one byte short"));
    }
    out.extend([
        Damage::Delete,
        Damage::AppendGarbage,
        Damage::Sparse,
        Damage::Directory,
    ]);
    out
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
/// error of another kind or naming none of `names` is a failure (`Err`, with why).
fn judge(
    result: std::thread::Result<flushpoint::Result<Vec<String>>>,
    want: &[String],
    names: &[String],
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

/// A damaged file's error: `Corrupt`; `Io` (the file unreadable as a file, or redb's own
/// checks reported as a storage error); `Poisoned` (a later call after the first failure);
/// `Incompatible` for `FORMAT` (a damaged version or engine line reads as another one).
/// Each must name the file or its database.
fn judge_error(e: &Error, names: &[String]) -> Result<ErrorKind, String> {
    let text = e.to_string();
    let kind = e.kind();
    let format_file = names.iter().any(|n| n == "FORMAT");
    let damage_kind = matches!(
        kind,
        ErrorKind::Corrupt | ErrorKind::Io | ErrorKind::Poisoned
    ) || (format_file && kind == ErrorKind::Incompatible);
    if !damage_kind {
        return Err(format!("an error of kind {kind:?}: {text}"));
    }
    if !names.iter().any(|n| text.contains(n.as_str())) {
        return Err(format!("an error naming none of {names:?}: {text}"));
    }
    if let Error::CorruptFile { path, .. } = e
        && !path.as_deref().is_some_and(|p| {
            names
                .iter()
                .any(|n| p.to_string_lossy().contains(n.as_str()))
        })
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

/// Every file under `dir`, relative, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

/// The process's peak resident set (`VmHWM`), in bytes.
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// One step of a case: what it runs on the damaged copy.
type Step = fn(&Path, HomeEngine) -> flushpoint::Result<Vec<String>>;

/// Counts per (file kind, damage): cases, steps answered correctly, typed errors by kind;
/// and every failure.
#[derive(Debug, Default)]
struct Tally {
    counts: BTreeMap<(String, String), Counts>,
    failures: Vec<String>,
}

#[derive(Debug, Default)]
struct Counts {
    cases: usize,
    correct: usize,
    typed: BTreeMap<String, usize>,
}

/// Runs the suite on a home of `engine`: every file × every damage, each case's steps
/// (`steps`: a name, the step and the undamaged answers are computed from a copy).
fn damage_every_file(engine: HomeEngine, steps: &[(&str, Step)]) -> Tally {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine");
    build(&pristine, engine);
    // The undamaged answers, from copies (an open may write: a checkpoint, a repair).
    let want: Vec<Vec<String>> = steps
        .iter()
        .map(|(name, step)| {
            let p = dir.path().join(format!("reference-{name}"));
            copy_home(&pristine, &p);
            step(&p, engine).unwrap()
        })
        .collect();
    let samples = if full() { SAMPLES_FULL } else { SAMPLES_CI };
    let mut tally = Tally::default();
    for rel in files_under(&pristine) {
        let bytes = std::fs::read(pristine.join(&rel)).unwrap();
        let names = names_of(&rel);
        for damage in damages_of(&rel, &bytes, samples) {
            let case = dir.path().join("case");
            copy_home(&pristine, &case);
            damage.apply(&case.join(&rel));
            let counts = tally
                .counts
                .entry((kind_of(&rel).to_string(), damage.family().to_string()))
                .or_default();
            counts.cases += 1;
            for ((name, step), want) in steps.iter().zip(&want) {
                let result = catch_unwind(AssertUnwindSafe(|| step(&case, engine)));
                match judge(result, want, &names) {
                    Ok(Outcome::Correct) => counts.correct += 1,
                    Ok(Outcome::Typed(kind, _)) => {
                        *counts.typed.entry(format!("{kind:?}")).or_default() += 1
                    }
                    Err(why) => {
                        tally
                            .failures
                            .push(format!("{engine:?} {rel} {damage:?} {name}: {why}"));
                    }
                }
            }
            // A directory put in a file's place is removed with the rest.
            std::fs::remove_dir_all(&case).unwrap();
        }
    }
    tally
}

fn print(engine: HomeEngine, tally: &Tally) {
    for ((kind, damage), c) in &tally.counts {
        println!(
            "{engine:?} {kind} / {damage}: {} cases, {} steps correct, typed errors {:?}",
            c.cases, c.correct, c.typed
        );
    }
    for f in &tally.failures {
        println!("  FAILED {f}");
    }
}

fn assert_suite(engine: HomeEngine) {
    flushpoint::db::quiet_caught_redb_panics();
    let tally = damage_every_file(engine, &[("read", read_home), ("node", run_node)]);
    print(engine, &tally);
    let cases: usize = tally.counts.values().map(|c| c.cases).sum();
    println!(
        "{engine:?}: {cases} cases, {} failures, peak RSS {} MiB",
        tally.failures.len(),
        peak_rss_bytes() >> 20
    );
    assert!(
        tally.failures.is_empty(),
        "{} failures; first: {}",
        tally.failures.len(),
        tally.failures[0]
    );
    assert!(
        peak_rss_bytes() < RSS_PEAK_MAX_BYTES,
        "peak RSS {} bytes",
        peak_rss_bytes()
    );
}

#[test]
fn every_damage_to_every_file_of_a_redb_home_is_a_typed_error_or_the_right_answer() {
    assert_suite(HomeEngine::Redb);
}

#[test]
fn every_damage_to_every_file_of_a_journal_home_is_a_typed_error_or_the_right_answer() {
    assert_suite(HomeEngine::Journal);
}

/// The generator covers what the issue lists: both homes hold each file kind the suite
/// names (a retired segment aside), and every damage family applies to a segment.
#[test]
fn the_homes_hold_every_file_kind_and_a_segment_gets_every_damage() {
    let dir = tempfile::tempdir().unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for engine in [HomeEngine::Redb, HomeEngine::Journal] {
        let home = dir.path().join(format!("{engine:?}"));
        build(&home, engine);
        kinds.extend(files_under(&home).iter().map(|r| kind_of(r)));
        if engine == HomeEngine::Journal {
            let segments: Vec<String> = files_under(&home)
                .into_iter()
                .filter(|r| kind_of(r) == "segment")
                .collect();
            assert!(segments.len() >= 2, "segments {segments:?}");
            let bytes = std::fs::read(home.join(&segments[0])).unwrap();
            let families: std::collections::BTreeSet<&str> = damages_of(&segments[0], &bytes, 3)
                .iter()
                .map(Damage::family)
                .collect();
            assert_eq!(families.len(), 8, "{families:?}");
        }
    }
    for k in [
        "FORMAT",
        "LOCK",
        "redb file",
        "journal LOCK",
        "journal index",
        "segment",
        "spare segment",
        "run",
    ] {
        assert!(kinds.contains(k), "no {k} in {kinds:?}");
    }
    assert!(!kinds.contains("other"), "{kinds:?}");
}

/// The rollback intent, damaged: a flipped bit or a sparse extension to 1 TiB is refused as
/// `Corrupt` naming it, read with bounded memory, and the home is left as it was.
#[test]
fn a_damaged_rollback_intent_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine");
    build(&pristine, HomeEngine::Redb);
    let intent = flushpoint::home::ROLLBACK_INTENT_FILE;
    // An intent's framed record (ADR 0001): any bytes but a valid one are damage.
    for damage in [Damage::FlipBit(0), Damage::Sparse, Damage::AppendGarbage] {
        let case = dir.path().join("case");
        copy_home(&pristine, &case);
        std::fs::write(case.join(intent), b"not an intent record").unwrap();
        damage.apply(&case.join(intent));
        let Err(e) = Home::open_with(&case, options(HomeEngine::Redb)) else {
            panic!("a home with a damaged rollback intent opened ({damage:?})");
        };
        assert_eq!(e.kind(), ErrorKind::Corrupt, "{damage:?}: {e}");
        assert!(e.to_string().contains(intent), "{damage:?}: {e}");
        std::fs::remove_dir_all(&case).unwrap();
    }
    assert!(peak_rss_bytes() < RSS_PEAK_MAX_BYTES);
}

/// The negative control: a reader that skips one check — it takes a block it cannot load
/// (a damaged record) for an absent one, as a reader without the record checksum would
/// answer — makes the suite fail. The suite's own steps are unchanged.
#[test]
fn a_reader_that_skips_a_check_fails_the_suite() {
    fn lenient_read(path: &Path, engine: HomeEngine) -> flushpoint::Result<Vec<String>> {
        let home = Home::open_with(path, options(engine))?;
        let blocks = flushpoint::store::BlockStore::<flushpoint::demo::Block>::open(
            home.block_store_db.clone(),
        )?;
        let mut out = Vec::new();
        for h in 1..=HEIGHT {
            let block = blocks.load_block(h).unwrap_or(None);
            out.push(format!("block {h} {}", block.is_some()));
        }
        Ok(out)
    }
    flushpoint::db::quiet_caught_redb_panics();
    let tally = damage_every_file(HomeEngine::Redb, &[("lenient read", lenient_read)]);
    assert!(
        tally.failures.iter().any(|f| f.contains("a wrong answer")),
        "the suite passed a reader that answers a damaged block as absent"
    );
}

/// The checker itself: a step that panics is a failure, as is a wrong answer, an untyped
/// kind, or an error naming another file; the right answer and a typed error naming the
/// file pass.
#[test]
fn the_checker_fails_a_panicking_read_and_a_wrong_answer() {
    let want = vec!["a".to_string()];
    let names = names_of("state.redb");
    let panicked = catch_unwind(|| -> flushpoint::Result<Vec<String>> {
        panic!("internal error: entered unreachable code")
    });
    let why = judge(panicked, &want, &names).unwrap_err();
    assert!(why.contains("panicked: internal error"), "{why}");
    let wrong = judge(Ok(Ok(vec!["b".to_string()])), &want, &names).unwrap_err();
    assert!(wrong.contains("wrong answer"), "{wrong}");
    let short = judge(Ok(Ok(Vec::new())), &want, &names).unwrap_err();
    assert!(short.contains("wrong answer"), "{short}");
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

/// The damages themselves: a unit boundary cut loses whole units, an inside cut does not
/// fall on a boundary, the sampling spreads over the file.
#[test]
fn the_damages_fall_where_they_say() {
    // Two units of bodies 4 and 8 bytes, then a prepared segment's zeros.
    let mut seg = Vec::new();
    for body in [4u32, 8] {
        let mut header = vec![1u8; UNIT_HEADER_BYTES];
        header[UNIT_BODY_LEN_AT..UNIT_BODY_LEN_AT + 4].copy_from_slice(&body.to_le_bytes());
        seg.extend(header);
        seg.extend(vec![2u8; body as usize + UNIT_TRAILER_BYTES]);
    }
    let first_end = (UNIT_HEADER_BYTES + 4 + UNIT_TRAILER_BYTES) as u64;
    let second_end = first_end + (UNIT_HEADER_BYTES + 8 + UNIT_TRAILER_BYTES) as u64;
    seg.extend(vec![0u8; 100]);
    assert_eq!(unit_ends(&seg), vec![first_end, second_end]);
    let cuts: Vec<(u64, &str)> = damages_of("journal/00000000000000000001.seg", &seg, 3)
        .into_iter()
        .filter_map(|d| match d {
            Damage::Cut(len, at) => Some((len, at)),
            _ => None,
        })
        .collect();
    assert!(cuts.contains(&(0, "cut at a unit boundary")), "{cuts:?}");
    assert!(
        cuts.contains(&(first_end, "cut at a unit boundary")),
        "{cuts:?}"
    );
    assert!(!cuts.iter().any(|c| c.0 == second_end), "{cuts:?}");
    for (len, at) in &cuts {
        if *at == "cut inside a unit" {
            assert!(![0, first_end, second_end].contains(len), "{cuts:?}");
        }
    }
    assert_eq!(spread(100, 3), vec![0, 49, 99]);
    assert_eq!(spread(2, 3), vec![0, 1]);
}
