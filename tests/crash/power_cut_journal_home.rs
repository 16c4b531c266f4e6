//! Power cuts at every file-system operation of creating and first-syncing a **journal
//! home** (ADR 0012) on a simulated file system: `Home::open_on` an empty directory with
//! `engine: Some(Journal)` (the home's directory, `LOCK`, `FORMAT` with its engine line by
//! temp/write/fsync/rename/dir fsync, then `journal/`: its directory, the index created
//! atomically, segments), the handshake, 2 consensus blocks, 2 block-synced blocks (one
//! flush point), a clean stop (apply, checkpoint) — with small segments and checkpoints, so
//! rolls and checkpoints happen inside the run (no trim: the segments hold the block parts,
//! ADR 0013) — and the power is cut at every op.
//!
//! For each cut, crash images: unsynced file ops dropped, kept, and dropped/applied/torn at
//! random (seeded); unsynced directory entry ops kept or lost independently (every subset up
//! to `SUBSETS_MAX_OPS` pending, seeded random subsets beyond) and as every prefix. The
//! oracle, written from ADR 0012 and ADR 0008 (not from the code):
//!
//! * layout (0011): `FORMAT` is absent or exactly `flushpoint home format 2\nengine
//!   journal\n`, and `journal/` never exists without it — an absent `FORMAT` is an absent
//!   home, and then nothing was acknowledged;
//! * a home whose `FORMAT` survived opens on the journal unasked, and an explicit redb
//!   request is refused with `Error::HomeEngine`;
//! * contents (0008: units are applied in seq order and a torn tail is discarded, so what
//!   survives is a prefix of the units): the three keyspaces together hold the result of a
//!   prefix of **all** writes in the order they were made, that includes every write
//!   acknowledged `Synced` before the cut — a global prefix, stronger than three per-file
//!   prefixes;
//! * the handshake accepts; the recovered height is at least the height acknowledged
//!   durable; the node syncs on to the uncut run's final state.
//!
//! Prints `N file-system cut states`. CI: every cut, 1 random file seed;
//! `FLUSHPOINT_FULL=1` adds 4 seeds and 64 random subsets. Replay: `FLUSHPOINT_SEED=<n>`.

use crate::support;

use std::collections::{BTreeMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::db::collect_range;
use flushpoint::demo::{ChainSpec, KvApp, Profile, State};
use flushpoint::journal::{Applier, JournalOptions};
use flushpoint::testing::{DirFate, FileFate, SimFs};
use flushpoint::{
    Batch, Db, DbWrapper, Direction, Durability, Error, FlushPolicy, HoldingDb, Home, HomeEngine,
    HomeOptions, KeyRange, Node, Op,
};
use support::{file_fates, full};

const HOME: &str = "/data/node/home";
/// Blocks committed in consensus mode after the home is created.
const CONSENSUS_END: u64 = 2;
/// The last height: blocks CONSENSUS_END+1..=END go through block sync.
const END: u64 = 4;
/// The block-sync window: one flush point at END.
const WINDOW: u64 = 2;
/// Every subset of pending directory ops is tried up to this many ops (2^5 = 32 images).
const SUBSETS_MAX_OPS: usize = 5;
/// The default seed of the random fates (`FLUSHPOINT_SEED` overrides it).
const SEED_DEFAULT: u64 = 0x10c4_a1f5;
/// What ADR 0012 says a journal home's `FORMAT` holds.
const JOURNAL_FORMAT: &str =
    "flushpoint home format 2\nengine journal\nparts journal\napp runs\napp values journal\n";
/// The keyspaces, in the order the writes log names them.
const DBS: [&str; 3] = ["block store", "state", "app"];

fn seed() -> u64 {
    support::seed(SEED_DEFAULT)
}

/// The journal with the inline applier (one fixed sequence of file operations per run),
/// small segments and checkpoints (rolls, checkpoints and trims inside the run) and a small
/// index cache (redb writes pages mid-transaction).
fn options(engine: HomeEngine) -> HomeOptions {
    HomeOptions::default()
        .with_engine(Some(engine))
        .with_journal(
            JournalOptions::default()
                .with_applier(Applier::Inline)
                .with_segment_bytes(24 * 1024)
                .with_checkpoint_bytes(16 * 1024)
                .with_index_cache_bytes(64 * 1024),
        )
}

fn spec() -> ChainSpec {
    ChainSpec {
        seed: 0xf6,
        profile: Profile::Light,
        initial_height: 1,
        validator_change_every: 3,
        params_change_every: 0,
        empty_every: 0,
        account_keys: 1 << 20,
    }
}

fn policy() -> FlushPolicy {
    FlushPolicy::default()
        .with_window_blocks_max(Some(WINDOW))
        .with_interval(Duration::from_secs(3600))
}

fn home() -> PathBuf {
    PathBuf::from(HOME)
}

/// One write to one keyspace, and whether it returned `Ok`.
#[derive(Debug, Clone)]
struct Written {
    db: usize,
    batch: Batch,
    synced: bool,
    acked: bool,
}

/// Every write to the three keyspaces, in the order they were made (one lock held across
/// each write, so this order is the order the writes reached the journal).
type WriteLog = Arc<Mutex<Vec<Written>>>;

/// Records every batch its keyspace is asked to write (knows only the `Db` contract).
#[derive(Debug)]
struct Recorder {
    inner: Arc<dyn Db>,
    db: usize,
    log: WriteLog,
}

impl DbWrapper for Recorder {
    type Inner = dyn Db;
    fn inner(this: &Self) -> &Self::Inner {
        &*this.inner
    }
    fn write(this: &Self, batch: &Batch, durability: Durability) -> flushpoint::Result<()> {
        let mut log = this.log.lock().unwrap();
        log.push(Written {
            db: this.db,
            batch: batch.clone(),
            synced: durability == Durability::Synced,
            acked: false,
        });
        let r = this.inner.write(batch, durability);
        log.last_mut().unwrap().acked = r.is_ok();
        r
    }
}

/// Per keyspace: its pairs.
type Contents = [BTreeMap<Bytes, Bytes>; 3];

/// ADR 0008's promise after a crash: the keyspaces hold the result of a prefix of all the
/// writes, at least up to the last one acknowledged `Synced`, at most up to the first that
/// failed (which may have landed).
fn check_global_prefix(got: &Contents, log: &[Written]) -> Result<(), String> {
    let min = log
        .iter()
        .rposition(|w| w.acked && w.synced)
        .map_or(0, |i| i + 1);
    let max = log
        .iter()
        .position(|w| !w.acked)
        .map_or(log.len(), |i| i + 1);
    let mut state: Contents = Default::default();
    if min == 0 && state == *got {
        return Ok(());
    }
    for (k, w) in log.iter().enumerate().take(max) {
        for op in w.batch.ops() {
            match op {
                Op::Put(key, v) => {
                    state[w.db].insert(key.clone(), v.clone());
                }
                Op::Delete(key) => {
                    state[w.db].remove(key);
                }
            }
        }
        if k + 1 >= min && state == *got {
            return Ok(());
        }
    }
    Err(format!(
        "the keyspaces hold {:?} keys: no prefix of the {} writes from {min} (the last \
         acknowledged synced) to {max}",
        got.iter().map(BTreeMap::len).collect::<Vec<_>>(),
        log.len()
    ))
}

/// `FORMAT` absent or exactly the journal's; `journal/` never without it.
fn check_layout(img: &SimFs) -> Result<bool, String> {
    let names = img.list(&home());
    match img.read(&home().join("FORMAT")) {
        Some(b) if b == JOURNAL_FORMAT.as_bytes() => Ok(true),
        Some(b) => Err(format!("FORMAT holds {:?}", String::from_utf8_lossy(&b))),
        None if names.iter().any(|n| n == "journal" || n.ends_with(".redb")) => {
            Err(format!("databases without FORMAT: {names:?}"))
        }
        None => Ok(false),
    }
}

/// What one run did before it finished or the power went.
#[derive(Debug, Default)]
struct RunOut {
    /// The height the node had acknowledged durable.
    acked: u64,
    log: WriteLog,
    fin: Option<State>,
    err: Option<String>,
    recovered: Option<u64>,
}

/// Opens the journal home on `fs`, the node (handshake), and syncs to END: consensus up to
/// CONSENSUS_END, block sync (window WINDOW) to END, then a clean stop.
fn run(fs: &SimFs) -> RunOut {
    let mut out = RunOut::default();
    let r = (|| -> Result<(), String> {
        let h = Home::open_on(Arc::new(fs.clone()), &home(), options(HomeEngine::Journal))
            .map_err(|e| format!("home: {e}"))?;
        let rec: Vec<Arc<dyn Db>> = [&h.block_store_db, &h.state_db, &h.app_db]
            .into_iter()
            .enumerate()
            .map(|(db, d)| {
                Arc::new(Recorder {
                    inner: d.clone(),
                    db,
                    log: out.log.clone(),
                }) as Arc<dyn Db>
            })
            .collect();
        let app = KvApp::open(Arc::new(HoldingDb::new(rec[2].clone())))
            .map_err(|e| format!("app: {e}"))?;
        let (mut node, _) = Node::open(
            rec[0].clone(),
            rec[1].clone(),
            Box::new(app),
            spec().chain(),
            Box::new(flushpoint::NoEvents),
        )
        .map_err(|e| format!("handshake: {e}"))?;
        out.recovered = Some(node.height());
        out.acked = node.durable_height();
        let sync = |e: flushpoint::Error| format!("sync: {e}");
        while node.height() < CONSENSUS_END {
            let (b, p, c) = spec().next_block(node.state());
            node.commit_block(&b, &p, &c).map_err(sync)?;
            out.acked = node.durable_height();
        }
        if node.height() < END {
            node.start_block_sync(policy(), Instant::now())
                .map_err(sync)?;
            while node.height() < END {
                let (b, p, c) = spec().next_block(node.state());
                node.sync_block(&b, &p, &c, Instant::now()).map_err(sync)?;
                out.acked = node.durable_height();
            }
        }
        let state = node.state().clone();
        node.stop(Instant::now()).map_err(sync)?;
        drop(h);
        out.acked = END;
        out.fin = Some(state);
        Ok(())
    })();
    out.err = r.err();
    out
}

/// Every check on one crash image, given what the interrupted run did.
fn check_recovery(img: &SimFs, cut: &RunOut, want: &State) -> Result<(), String> {
    let log = cut.log.lock().unwrap().clone();
    if check_layout(img)? {
        // Refused before anything is written, whatever the journal holds.
        match Home::open_on(Arc::new(img.clone()), &home(), options(HomeEngine::Redb)) {
            Err(Error::HomeEngine {
                recorded: HomeEngine::Journal,
                requested: HomeEngine::Redb,
                ..
            }) => {}
            other => return Err(format!("an explicit redb open gave {other:?}")),
        }
        let h = Home::open_on(Arc::new(img.clone()), &home(), HomeOptions::default())
            .map_err(|e| format!("home refused after the cut: {e}"))?;
        if h.engine() != HomeEngine::Journal {
            return Err(format!("opened unasked on {}", h.engine()));
        }
        let mut got: Contents = Default::default();
        for (i, db) in [&h.block_store_db, &h.state_db, &h.app_db]
            .into_iter()
            .enumerate()
        {
            if db.name() != DBS[i] {
                return Err(format!("keyspace {i} is {:?}", db.name()));
            }
            got[i] = collect_range(&**db, KeyRange::all(), Direction::Forward)
                .map_err(|e| format!("read {}: {e}", db.name()))?
                .into_iter()
                .collect();
        }
        check_global_prefix(&got, &log)?;
    } else if log.iter().any(|w| w.acked) || cut.acked > 0 {
        // FORMAT is durable before any database exists: no FORMAT, no write.
        return Err(format!(
            "FORMAT lost, but {} write(s) acknowledged (height {})",
            log.iter().filter(|w| w.acked).count(),
            cut.acked
        ));
    }
    let again = run(img);
    if let Some(e) = again.err {
        return Err(format!("recovery: {e}"));
    }
    let recovered = again.recovered.unwrap_or(0);
    if recovered < cut.acked {
        return Err(format!(
            "acknowledged height {} lost: recovered at {recovered}",
            cut.acked
        ));
    }
    if again.fin.as_ref() != Some(want) {
        return Err("the final state differs from the uncut run's".into());
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Sweep {
    cuts: u64,
    cuts_by_op: BTreeMap<String, u64>,
    cuts_in_journal: u64,
    states: u64,
    absent_homes: u64,
    failures: Vec<String>,
}

/// The directory fates tried for a cut with `n` pending directory ops (`support::dir_fates`).
fn dir_fates(n: usize, seed: u64) -> Vec<DirFate> {
    support::dir_fates(n, seed, SUBSETS_MAX_OPS, if full() { 64 } else { 16 })
}

#[test]
fn power_cut_at_every_op_of_creating_and_syncing_a_journal_home_loses_nothing_acknowledged() {
    let started = Instant::now();
    let seed = seed();
    println!("power_cut_journal_home: FLUSHPOINT_SEED={seed}");
    let uncut_fs = SimFs::new();
    let uncut = run(&uncut_fs);
    assert!(uncut.err.is_none(), "uncut run: {:?}", uncut.err);
    let want = uncut.fin.clone().unwrap();
    let total = uncut_fs.ops();
    // The run rolls segments (else the small sizes above do not bite). None is trimmed: every
    // segment holds block parts the index points at, and the run prunes nothing (ADR 0013;
    // trims of such segments are cut in `tests/journal/power_cut.rs`).
    let log = uncut_fs.stats().log;
    let seg = |op: flushpoint::testing::SimOp| {
        log.iter()
            .filter(|(o, p)| *o == op && p.extension().is_some_and(|e| e == "seg"))
            .count()
    };
    // A segment is created in place, or (prepared segments, ADR 0008) renamed in.
    let (segments_created, segments_deleted) = (
        seg(flushpoint::testing::SimOp::Create) + seg(flushpoint::testing::SimOp::Rename),
        seg(flushpoint::testing::SimOp::Unlink),
    );
    println!(
        "power_cut_journal_home: uncut run: {total} ops, {segments_created} segments created, \
         {segments_deleted} deleted"
    );
    assert!(segments_created >= 2 && segments_deleted == 0, "{log:?}");
    let mut s = Sweep::default();
    let mut seen = HashSet::new();
    for k in 1..=total {
        let fs = SimFs::new();
        fs.set_cut_at(Some(k));
        let cut = run(&fs);
        assert!(fs.is_dead(), "cut {k} of {total} never fired");
        s.cuts += 1;
        let (op, path) = fs.stats().log[k as usize - 1].clone();
        *s.cuts_by_op.entry(format!("{op:?}")).or_default() += 1;
        if path.starts_with(home().join("journal")) {
            s.cuts_in_journal += 1;
        }
        let n = fs.pending_dir_ops();
        for d in dir_fates(n, seed ^ k) {
            for f in file_fates(seed ^ (k << 20)) {
                let img = fs.crash_image(d, f);
                let acked_writes = cut.log.lock().unwrap().len();
                if !seen.insert((img.fingerprint(), cut.acked, acked_writes)) {
                    continue;
                }
                s.states += 1;
                if img.read(&home().join("FORMAT")).is_none() {
                    s.absent_homes += 1;
                }
                let r = catch_unwind(AssertUnwindSafe(|| check_recovery(&img, &cut, &want)))
                    .unwrap_or_else(|p| {
                        Err(format!(
                            "panic: {}",
                            p.downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default()
                        ))
                    });
                if let Err(e) = r {
                    s.failures.push(format!(
                        "cut {k}/{total} at {op:?} {} ({n} dir ops pending), {d:?} {f:?}, \
                         acked {}: {e}",
                        path.display(),
                        cut.acked
                    ));
                }
            }
        }
    }
    println!(
        "power_cut_journal_home: {} cuts ({} in journal/; {:?}), {} states ({} with no FORMAT) \
         in {:.1?}",
        s.cuts,
        s.cuts_in_journal,
        s.cuts_by_op,
        s.states,
        s.absent_homes,
        started.elapsed()
    );
    println!("{} file-system cut states", s.states);
    // No "Unlink": every segment holds block parts the index points at, so nothing is
    // trimmed in this run (ADR 0013); cuts in trims are `tests/journal/power_cut.rs`'s.
    for kind in [
        "Create", "Mkdir", "Write", "SetLen", "SyncData", "SyncAll", "Rename", "SyncDir",
    ] {
        assert!(
            s.cuts_by_op.get(kind).is_some_and(|n| *n > 0),
            "no cut landed on a {kind}: {:?}",
            s.cuts_by_op
        );
    }
    assert!(
        s.absent_homes > 0,
        "no cut lost the FORMAT: the sweep starts too late"
    );
    if !s.failures.is_empty() {
        for f in s.failures.iter().take(12) {
            println!("FAIL {f}");
        }
        panic!(
            "{} of {} cut states failed (replay: FLUSHPOINT_SEED={seed})",
            s.failures.len(),
            s.states
        );
    }
}

// --- The oracles reject wrong answers. ---

fn written(db: usize, ops: &[(&str, Option<&str>)], synced: bool, acked: bool) -> Written {
    let mut b = Batch::new();
    for (k, v) in ops {
        match v {
            Some(v) => b.put(k.as_bytes().to_vec(), v.as_bytes().to_vec()),
            None => b.delete(k.as_bytes().to_vec()),
        };
    }
    Written {
        db,
        batch: b,
        synced,
        acked,
    }
}

fn contents(per_db: [&[(&str, &str)]; 3]) -> Contents {
    per_db.map(|kv| {
        kv.iter()
            .map(|(k, v)| (Bytes::from(k.to_string()), Bytes::from(v.to_string())))
            .collect()
    })
}

#[test]
fn global_prefix_oracle_rejects_a_lost_synced_write_a_hole_across_keyspaces_and_a_phantom() {
    let log = vec![
        written(0, &[("a", Some("1"))], false, true),
        written(1, &[("b", Some("2"))], true, true),
        written(2, &[("c", Some("3"))], false, true),
        written(0, &[("a", None), ("d", Some("4"))], false, true),
    ];
    // Accepted: the synced prefix, and each longer one.
    check_global_prefix(&contents([&[("a", "1")], &[("b", "2")], &[]]), &log).unwrap();
    check_global_prefix(
        &contents([&[("a", "1")], &[("b", "2")], &[("c", "3")]]),
        &log,
    )
    .unwrap();
    check_global_prefix(
        &contents([&[("d", "4")], &[("b", "2")], &[("c", "3")]]),
        &log,
    )
    .unwrap();
    // Rejected: the synced write lost; a later write without an earlier one (in another
    // keyspace: per-keyspace prefixes would accept it); a write never made.
    assert!(check_global_prefix(&contents([&[("a", "1")], &[], &[]]), &log).is_err());
    assert!(check_global_prefix(&contents([&[("d", "4")], &[("b", "2")], &[]]), &log).is_err());
    assert!(
        check_global_prefix(
            &contents([&[("a", "1")], &[("b", "2")], &[("x", "9")]]),
            &log
        )
        .is_err()
    );
}

#[test]
fn layout_oracle_rejects_a_journal_without_format_and_a_format_without_the_engine() {
    let fs = SimFs::new();
    drop(Home::open_on(Arc::new(fs.clone()), &home(), options(HomeEngine::Journal)).unwrap());
    assert!(check_layout(&fs).unwrap());
    use flushpoint::fs::FileSystem;
    let format = home().join("FORMAT");
    let f = fs
        .open_file(&format, flushpoint::fs::OpenMode::Existing)
        .unwrap();
    f.set_len(25).unwrap();
    assert!(check_layout(&fs).unwrap_err().contains("FORMAT holds"));
    fs.remove_file(&format).unwrap();
    assert!(check_layout(&fs).unwrap_err().contains("without FORMAT"));
    // A redb home's FORMAT is not a journal home's.
    let redb = SimFs::new();
    drop(Home::open_on(Arc::new(redb.clone()), &home(), options(HomeEngine::Redb)).unwrap());
    assert!(check_layout(&redb).unwrap_err().contains("FORMAT holds"));
}

/// The recovery check as a whole rejects an image whose journal lost its acknowledged units.
#[test]
fn recovery_check_rejects_an_image_that_lost_the_journals_segments() {
    let fs = SimFs::new();
    let r = run(&fs);
    assert!(r.err.is_none(), "{:?}", r.err);
    let want = r.fin.clone().unwrap();
    check_recovery(
        &fs.crash_image(DirFate::KeepAll, FileFate::KeepAll),
        &r,
        &want,
    )
    .unwrap();
    // Lose every file of the journal directory but keep FORMAT and the directories: the
    // runs directory without its index is refused at open, naming the index (every write
    // was acknowledged: an empty home would lose them).
    let img = fs.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    use flushpoint::fs::FileSystem;
    // Every file under journal/, the app's runs (journal/runs/app/) included.
    fn remove_files(img: &SimFs, dir: &Path) {
        for name in img.list(dir) {
            let path = dir.join(name);
            if img.remove_file(&path).is_err() {
                remove_files(img, &path);
            }
        }
    }
    remove_files(&img, &home().join("journal"));
    let e = check_recovery(&img, &r, &want).unwrap_err();
    assert!(e.contains("index.redb") && e.contains("missing"), "{e}");
}
