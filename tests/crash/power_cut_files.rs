//! Power cuts at every file-system operation: a home is created on a simulated file system
//! (`SimFs`: files and directories with live and durable views) — `Home::open_on` an empty
//! directory (the home's directory, `LOCK`, `FORMAT` by temp/write/fsync/rename/dir fsync, the
//! three redb databases by the same atomic creation), the handshake, 2 blocks in consensus,
//! 2 in block sync (one flush point), a clean stop — and the power is cut at every operation
//! of it: create, mkdir, write, set_len, sync_data, sync_all, rename, dir fsync. A second
//! run starts from a creation a cut interrupted (a `<db>.creating` leftover) and is cut at
//! every op too, unlink of the leftover included.
//!
//! For each cut, crash images: unsynced file ops dropped, kept, and dropped/applied/torn at
//! random (seeded); unsynced directory entry ops (create, mkdir, rename, unlink) each kept or
//! lost independently (every subset while there are at most `SUBSETS_MAX_OPS` pending,
//! seeded random subsets beyond) and as every ordered-journal prefix. Over each image:
//!
//! * layout: a database file is never present without a complete `FORMAT` (the version
//!   guard), and `FORMAT` is never torn;
//! * `Home::open_on` succeeds — never "magic number mismatch";
//! * each database holds a prefix of the batches written to it that includes every batch
//!   acknowledged `Synced` before the cut (the `Db` contract, checked per database, before
//!   the handshake can repair anything);
//! * the handshake accepts; the recovered height is at least the height the node had
//!   acknowledged durable (`durable_height`) before the cut; no event fired for a block the
//!   crash lost, none fires twice across the two runs;
//! * the node syncs on to the end and reaches the uncut run's final state.
//!
//! Prints `N file-system cut states` (distinct crash images recovered). CI runs every cut
//! with 1 random file seed; `FLUSHPOINT_FULL=1` adds 4 more seeds and 64 random subsets.
//! Replay one seed: `FLUSHPOINT_SEED=<n>`.

use crate::support;

use std::collections::{BTreeMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::db::collect_range;
use flushpoint::demo::{ChainSpec, KvApp, Profile, State};
use flushpoint::testing::{DirFate, FileFate, SimFs, SimOp};
use flushpoint::{
    Batch, Db, DbWrapper, Direction, Durability, Event, EventKind, FlushPolicy, HoldingDb, Home,
    KeyRange, Node, Op, RedbOptions,
};
use support::{check_events, file_fates, full};

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
const SEED_DEFAULT: u64 = 0x5eed_f11e;

fn seed() -> u64 {
    support::seed(SEED_DEFAULT)
}

/// A small page cache, so that redb also writes pages in the middle of a transaction.
fn options() -> RedbOptions {
    RedbOptions::default().with_cache_bytes(64 * 1024)
}

fn spec() -> ChainSpec {
    ChainSpec {
        seed: 0xf5,
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

/// One batch written to a database, and whether the write returned `Ok`.
#[derive(Debug, Clone)]
struct Written {
    batch: Batch,
    synced: bool,
    acked: bool,
}

type WriteLog = Arc<Mutex<Vec<Written>>>;

/// Records every batch its database is asked to write (the oracle's input: written
/// independently of the stores, it knows only the `Db` contract).
#[derive(Debug)]
struct Recorder {
    inner: Arc<dyn Db>,
    log: WriteLog,
}

impl DbWrapper for Recorder {
    type Inner = dyn Db;
    fn inner(this: &Self) -> &Self::Inner {
        &*this.inner
    }
    fn write(this: &Self, batch: &Batch, durability: Durability) -> flushpoint::Result<()> {
        let i = {
            let mut log = this.log.lock().unwrap();
            log.push(Written {
                batch: batch.clone(),
                synced: durability == Durability::Synced,
                acked: false,
            });
            log.len() - 1
        };
        let r = this.inner.write(batch, durability);
        this.log.lock().unwrap()[i].acked = r.is_ok();
        r
    }
}

/// The `Db` contract after a crash: the database holds the result of a prefix of the
/// batches written to it, at least up to the last one acknowledged `Synced`, at most up to
/// the first one that failed (which may have landed).
fn check_prefix(name: &str, got: &BTreeMap<Bytes, Bytes>, log: &[Written]) -> Result<(), String> {
    let min = log
        .iter()
        .rposition(|w| w.acked && w.synced)
        .map_or(0, |i| i + 1);
    let max = log
        .iter()
        .position(|w| !w.acked)
        .map_or(log.len(), |i| i + 1);
    // Prefix k holds batches 0..k; prefixes min..=max are allowed.
    let mut state = BTreeMap::new();
    if min == 0 && state == *got {
        return Ok(());
    }
    for (k, w) in log.iter().enumerate().take(max) {
        for op in w.batch.ops() {
            match op {
                Op::Put(key, v) => {
                    state.insert(key.clone(), v.clone());
                }
                Op::Delete(key) => {
                    state.remove(key);
                }
            }
        }
        if k + 1 >= min && state == *got {
            return Ok(());
        }
    }
    Err(format!(
        "{name}: holds {} keys, which is no prefix of its {} batches from {min} (the last \
         acknowledged synced) to {max}",
        got.len(),
        log.len()
    ))
}

/// A database file is never present without a complete `FORMAT`, and `FORMAT` is never torn.
fn check_layout(img: &SimFs) -> Result<(), String> {
    let names = img.list(&home());
    let want = format!(
        "flushpoint home format {}\n",
        flushpoint::home::HOME_FORMAT_VERSION
    );
    match img.read(&home().join("FORMAT")) {
        Some(b) if b == want.as_bytes() => Ok(()),
        Some(b) => Err(format!("FORMAT holds {:?}", String::from_utf8_lossy(&b))),
        None if names.iter().any(|n| n.ends_with(".redb")) => {
            Err(format!("databases without FORMAT: {names:?}"))
        }
        None => Ok(()),
    }
}

/// What one run did before it finished or the power went.
#[derive(Debug, Default)]
struct RunOut {
    /// The height the node had acknowledged durable.
    acked: u64,
    events: Vec<Event>,
    logs: [WriteLog; 3],
    fin: Option<State>,
    err: Option<String>,
    recovered: Option<u64>,
}

/// Opens the home on `fs`, the node (handshake), and syncs to END: consensus up to
/// CONSENSUS_END, block sync (window WINDOW) to END, then a clean stop.
fn run(fs: &SimFs) -> RunOut {
    let mut out = RunOut::default();
    let r = (|| -> Result<(), String> {
        let h = Home::open_on(Arc::new(fs.clone()), &home(), &options())
            .map_err(|e| format!("home: {e}"))?;
        let dbs = [
            h.block_store_db.clone(),
            h.state_db.clone(),
            h.app_db.clone(),
        ];
        let rec: Vec<Arc<dyn Db>> = dbs
            .iter()
            .zip(&out.logs)
            .map(|(d, log)| {
                Arc::new(Recorder {
                    inner: d.clone(),
                    log: log.clone(),
                }) as Arc<dyn Db>
            })
            .collect();
        let fired: Arc<Mutex<Vec<Event>>> = Arc::default();
        let f = fired.clone();
        let sink = Box::new(move |e: &Event| f.lock().unwrap().push(e.clone()));
        let result = (|| -> Result<(), String> {
            let app = KvApp::open(Arc::new(HoldingDb::new(rec[2].clone())))
                .map_err(|e| format!("app: {e}"))?;
            let (mut node, _) = Node::open(
                rec[0].clone(),
                rec[1].clone(),
                Box::new(app),
                spec().chain(),
                sink,
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
            out.acked = END;
            out.fin = Some(state);
            Ok(())
        })();
        out.events = fired.lock().unwrap().clone();
        result
    })();
    out.err = r.err();
    out
}

/// Every check on one crash image, given what the interrupted run did.
fn check_recovery(img: &SimFs, cut: &RunOut, want: &State) -> Result<(), String> {
    check_layout(img)?;
    {
        let h = Home::open_on(Arc::new(img.clone()), &home(), &options())
            .map_err(|e| format!("home refused after the cut: {e}"))?;
        let dbs = [&h.block_store_db, &h.state_db, &h.app_db];
        for (db, log) in dbs.iter().zip(&cut.logs) {
            let got: BTreeMap<Bytes, Bytes> =
                collect_range(&***db, KeyRange::all(), Direction::Forward)
                    .map_err(|e| format!("read {}: {e}", db.name()))?
                    .into_iter()
                    .collect();
            check_prefix(db.name(), &got, &log.lock().unwrap())?;
        }
    }
    let again = run(img);
    if let Some(e) = again.err {
        return Err(format!("recovery: {e}"));
    }
    let recovered = again.recovered.unwrap_or(0);
    check_heights(cut.acked, recovered)?;
    check_events(&cut.events, &again.events, recovered)?;
    if again.fin.as_ref() != Some(want) {
        return Err("the final state differs from the uncut run's".into());
    }
    Ok(())
}

/// Nothing acknowledged durable before the cut is missing after it.
fn check_heights(acked: u64, recovered: u64) -> Result<(), String> {
    if recovered < acked {
        return Err(format!(
            "acknowledged height {acked} lost: recovered at {recovered}"
        ));
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Sweep {
    cuts: u64,
    cuts_by_op: BTreeMap<String, u64>,
    states: u64,
    recoveries: u64,
    failures: Vec<String>,
}

/// Cuts a run from `start` at every op; recovers every distinct crash image.
fn sweep(label: &str, start: &SimFs, want: &State, seed: u64, out: &mut Sweep) {
    let total = {
        let fs = start.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        let r = run(&fs);
        assert!(
            r.err.is_none(),
            "{label}: the uncut run failed: {:?}",
            r.err
        );
        assert_eq!(r.fin.as_ref(), Some(want), "{label}: uncut final state");
        fs.ops()
    };
    let mut seen = HashSet::new();
    for k in 1..=total {
        let fs = start.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        fs.set_cut_at(Some(k));
        let cut = run(&fs);
        assert!(fs.is_dead(), "{label}: cut {k} of {total} never fired");
        out.cuts += 1;
        let (op, path) = fs.stats().log[k as usize - 1].clone();
        *out.cuts_by_op.entry(format!("{op:?}")).or_default() += 1;
        let n = fs.pending_dir_ops();
        for d in dir_fates(n, seed ^ k) {
            for f in file_fates(seed ^ (k << 20)) {
                let img = fs.crash_image(d, f);
                if !seen.insert((img.fingerprint(), cut.acked, cut.events.len())) {
                    continue;
                }
                out.states += 1;
                let r = catch_unwind(AssertUnwindSafe(|| check_recovery(&img, &cut, want)));
                out.recoveries += 1;
                let r = r.unwrap_or_else(|p| {
                    Err(format!(
                        "panic: {}",
                        p.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default()
                    ))
                });
                if let Err(e) = r {
                    out.failures.push(format!(
                        "{label}: cut {k}/{total} at {op:?} {} ({n} dir ops pending), \
                         {d:?} {f:?}, acked {}: {e}",
                        path.display(),
                        cut.acked
                    ));
                }
            }
        }
    }
}

/// A home whose creation of the state database a cut interrupted on the rename, the
/// temporary file complete and its name kept: `state.redb.creating` is left.
fn interrupted_creation() -> SimFs {
    let probe = SimFs::new();
    let r = run(&probe);
    assert!(r.err.is_none(), "uncut run: {:?}", r.err);
    let log = probe.stats().log;
    let k = log
        .iter()
        .position(|(op, p)| *op == SimOp::Rename && p == &home().join("state.redb"))
        .unwrap_or_else(|| panic!("the state database is renamed into place: {log:?}"))
        as u64
        + 1;
    let fs = SimFs::new();
    fs.set_cut_at(Some(k));
    let cut = run(&fs);
    assert!(
        cut.logs.iter().all(|l| l.lock().unwrap().is_empty()),
        "the cut is inside Home::open: no database was written yet"
    );
    // Every pending entry op kept but the last: the rename in flight.
    let img = fs.crash_image(DirFate::Prefix(fs.pending_dir_ops() - 1), FileFate::KeepAll);
    let names = img.list(&home());
    assert!(
        names.contains(&"state.redb.creating".to_string()) && !names.contains(&"state.redb".into()),
        "the image holds the leftover and not the real name: {names:?}"
    );
    img
}

/// The directory fates tried for a cut with `n` pending directory ops (`support::dir_fates`).
fn dir_fates(n: usize, seed: u64) -> Vec<DirFate> {
    support::dir_fates(n, seed, SUBSETS_MAX_OPS, if full() { 64 } else { 16 })
}

#[test]
fn power_cut_at_every_file_system_op_loses_nothing_acknowledged() {
    let started = Instant::now();
    let seed = seed();
    println!("power_cut_files: FLUSHPOINT_SEED={seed}");
    let uncut = run(&SimFs::new());
    assert!(uncut.err.is_none(), "uncut run: {:?}", uncut.err);
    let want = uncut.fin.clone().unwrap();
    let mut s = Sweep::default();
    sweep("fresh home", &SimFs::new(), &want, seed, &mut s);
    sweep(
        "interrupted creation",
        &interrupted_creation(),
        &want,
        seed,
        &mut s,
    );
    println!(
        "power_cut_files: {} cuts ({:?}), {} recoveries in {:.1?}",
        s.cuts,
        s.cuts_by_op,
        s.recoveries,
        started.elapsed()
    );
    println!("{} file-system cut states", s.states);
    for kind in [
        "Create", "Mkdir", "Write", "SetLen", "SyncData", "SyncAll", "Rename", "Unlink", "SyncDir",
    ] {
        assert!(
            s.cuts_by_op.get(kind).is_some_and(|n| *n > 0),
            "no cut landed on a {kind}: {:?}",
            s.cuts_by_op
        );
    }
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

fn written(ops: &[(&str, Option<&str>)], synced: bool, acked: bool) -> Written {
    let mut b = Batch::new();
    for (k, v) in ops {
        match v {
            Some(v) => b.put(k.as_bytes().to_vec(), v.as_bytes().to_vec()),
            None => b.delete(k.as_bytes().to_vec()),
        };
    }
    Written {
        batch: b,
        synced,
        acked,
    }
}

fn map(kv: &[(&str, &str)]) -> BTreeMap<Bytes, Bytes> {
    kv.iter()
        .map(|(k, v)| (Bytes::from(k.to_string()), Bytes::from(v.to_string())))
        .collect()
}

#[test]
fn prefix_oracle_rejects_a_lost_synced_batch_a_reordering_and_a_phantom() {
    let log = vec![
        written(&[("a", Some("1"))], true, true),
        written(&[("b", Some("2"))], false, true),
        written(&[("a", None), ("c", Some("3"))], true, true),
        written(&[("d", Some("4"))], true, false),
    ];
    // Accepted: everything acknowledged, with or without the failed batch.
    check_prefix("x", &map(&[("b", "2"), ("c", "3")]), &log).unwrap();
    check_prefix("x", &map(&[("b", "2"), ("c", "3"), ("d", "4")]), &log).unwrap();
    // Rejected: the last synced batch lost; half a batch; a batch that was never written.
    assert!(check_prefix("x", &map(&[("a", "1"), ("b", "2")]), &log).is_err());
    assert!(check_prefix("x", &map(&[("b", "2")]), &log).is_err());
    assert!(check_prefix("x", &map(&[("b", "2"), ("c", "3"), ("e", "5")]), &log).is_err());
    assert!(check_prefix("x", &map(&[]), &log).is_err());
    // Nothing synced was acknowledged: the empty database is a valid prefix.
    check_prefix("x", &map(&[]), &log[1..2]).unwrap();
}

#[test]
fn layout_oracle_rejects_databases_without_format_and_a_torn_format() {
    let fs = SimFs::new();
    drop(Home::open_on(Arc::new(fs.clone()), &home(), &options()).unwrap());
    check_layout(&fs).unwrap();
    use flushpoint::fs::FileSystem;
    let format = home().join("FORMAT");
    let f = fs
        .open_file(&format, flushpoint::fs::OpenMode::Existing)
        .unwrap();
    f.set_len(10).unwrap();
    assert!(check_layout(&fs).unwrap_err().contains("FORMAT holds"));
    fs.remove_file(&format).unwrap();
    assert!(check_layout(&fs).unwrap_err().contains("without FORMAT"));
}

#[test]
fn height_and_event_oracles_reject_a_lost_acknowledged_block_and_a_double_event() {
    check_heights(3, 3).unwrap();
    check_heights(3, 4).unwrap();
    assert!(check_heights(4, 3).is_err());
    let ev = |h| Event {
        height: h,
        kind: EventKind::NewBlock {
            hash: Default::default(),
            tx_count: 0,
        },
    };
    check_events(&[ev(1), ev(2)], &[ev(3)], 2).unwrap();
    assert!(check_events(&[ev(1), ev(2)], &[ev(3)], 1).is_err());
    assert!(check_events(&[ev(1), ev(2)], &[ev(2)], 2).is_err());
}

/// The recovery check as a whole rejects an image that lost a synced database.
#[test]
fn recovery_check_rejects_an_image_that_lost_the_app_database() {
    let fs = SimFs::new();
    let r = run(&fs);
    assert!(r.err.is_none());
    let want = r.fin.clone().unwrap();
    // `check_recovery` runs the node on the image it checks: each check gets its own copy.
    check_recovery(
        &fs.crash_image(DirFate::DropAll, FileFate::DropAll),
        &r,
        &want,
    )
    .unwrap();
    let img = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
    use flushpoint::fs::FileSystem;
    img.remove_file(&home().join("app.redb")).unwrap();
    let e = check_recovery(&img, &r, &want).unwrap_err();
    assert!(e.contains("app"), "{e}");
}
