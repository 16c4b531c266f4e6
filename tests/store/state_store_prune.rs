//! The state store prunes below a retain height: afterwards every load at or above it
//! answers exactly what it answered before the prune, and every load below it returns
//! `Error::Pruned` naming the height and the base. A power cut at every write of a prune
//! (and again at every write of the rerun that finishes it) leaves a store whose loads are
//! either all as before (the base not yet raised) or all as after, and the rerun finishes
//! the prune to the same bytes as an uncut one.
//!
//! Oracle: the loads of every height taken before the prune, through the public API — not
//! the prune code's own idea of what to keep. A second, raw check reads the keys below the
//! retain height: no results, and at most one entry per history, which holds a value.
//!
//! Cut model: every prune write is `Synced` and atomic, so a cut state is "the first s
//! writes survived" (s = 0..=n). The test prints `N prune cut states, 0 failures`.
//! Chains: fixed schedules that put the retain height on and around checkpoints and
//! changes, and seeded random schedules (the seeds are printed; `FLUSHPOINT_SEED=<n>`
//! replays one).

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::codec::keys;
use flushpoint::db::collect_range;
use flushpoint::demo::DemoHistory;
use flushpoint::demo::{BlockResults, ConsensusParams, State, TxResult, Validator, ValidatorSet};
use flushpoint::store::{HISTORY_CHECKPOINT_INTERVAL, STATE_PRUNE_BATCH_HEIGHTS, StateStore};
use flushpoint::testing::{FailAfter, FailingDb, RecordingDb, WriteLog};
use flushpoint::{Batch, Db, Direction, Durability, Error, ErrorKind, KeyRange, MemoryDb, Op};
use support::{Rng, block_at};

type Map = BTreeMap<Bytes, Bytes>;

/// When a chain changes its validators and params (updates of block h are in force at h+1).
#[derive(Debug, Clone)]
enum Schedule {
    /// Validators at multiples of 377 and at 3, params at multiples of 611 and at 5.
    Fixed,
    /// Each block changes the validators with probability 1/150 and the params with 1/300.
    Random(u64),
}

impl Schedule {
    fn changes(&self, h: u64) -> (bool, bool) {
        match self {
            Schedule::Fixed => (
                h.is_multiple_of(377) || h == 3,
                h.is_multiple_of(611) || h == 5,
            ),
            Schedule::Random(seed) => {
                let mut r = Rng(seed ^ h.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                (r.below(150) == 0, r.below(300) == 0)
            }
        }
    }
}

fn results(schedule: &Schedule, h: u64) -> BlockResults {
    let (vals, params) = schedule.changes(h);
    BlockResults {
        tx_results: vec![TxResult {
            code: (h % 3) as u32,
            data: Bytes::from(h.to_be_bytes().to_vec()),
        }],
        validator_updates: if vals {
            vec![Validator {
                address: [(h % 250) as u8 + 1; 32],
                power: h,
            }]
        } else {
            Vec::new()
        },
        param_updates: params.then(|| ConsensusParams {
            block_max_bytes: 1_000_000 + h,
            block_max_gas: h,
            evidence_max_age_blocks: 7,
        }),
    }
}

/// A state store holding a chain from `initial` through `last` (results and state saved
/// after every block, as the node does).
fn build_chain(initial: u64, last: u64, schedule: &Schedule) -> Arc<MemoryDb> {
    let mem = Arc::new(MemoryDb::new("state"));
    let store = StateStore::<flushpoint::demo::DemoChain>::open(mem.clone());
    let validators = ValidatorSet {
        validators: (1..=4u8)
            .map(|i| Validator {
                address: [i; 32],
                power: 10,
            })
            .collect(),
    };
    let mut state = State::genesis(initial, validators, ConsensusParams::default(), [0; 32]);
    store.save_state(&state).unwrap();
    let mut prev = [0; 32];
    for h in initial..=last {
        let block = block_at(h, prev, vec![Bytes::from(h.to_be_bytes().to_vec())]);
        prev = block.hash();
        let r = results(schedule, h);
        store.save_results(h, &r).unwrap();
        state = state.next(&block.block, &r, [(h % 251) as u8; 32]);
        store.save_state(&state).unwrap();
    }
    mem
}

/// One load's outcome, comparable across stores.
#[derive(Debug, Clone, PartialEq)]
enum Got<T> {
    Value(Option<T>),
    Pruned {
        what: &'static str,
        height: u64,
        base: u64,
    },
    Failed(String),
}

impl<T: std::fmt::Debug> Got<T> {
    /// A one-line description (values cut to 80 characters), for failure messages.
    fn brief(&self) -> String {
        match self {
            Got::Value(Some(v)) => format!("{v:?}").chars().take(80).collect(),
            Got::Value(None) => "none".into(),
            Got::Pruned { what, height, base } => format!("pruned ({what}, {height}, {base})"),
            Got::Failed(e) => format!("error ({e})"),
        }
    }
}

fn got<T>(r: flushpoint::Result<Option<T>>) -> Got<T> {
    match r {
        Ok(v) => Got::Value(v),
        Err(e @ Error::Pruned { .. }) => {
            assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
            match e {
                Error::Pruned {
                    what, height, base, ..
                } => Got::Pruned { what, height, base },
                _ => unreachable!(),
            }
        }
        Err(e) => Got::Failed(e.to_string()),
    }
}

/// Every load of one height.
#[derive(Debug, Clone, PartialEq)]
struct Loads {
    results: Got<BlockResults>,
    validators: Got<(u64, ValidatorSet)>,
    params: Got<(u64, ConsensusParams)>,
}

/// The loads of every height from 0 to two past the state height.
fn snapshot(store: &StateStore<flushpoint::demo::DemoChain>) -> Vec<Loads> {
    let top = store.height().unwrap() + 2;
    (0..=top)
        .map(|h| Loads {
            results: got(store.load_results(h)),
            validators: got(store.load_validators(h)),
            params: got(store.load_consensus_params(h)),
        })
        .collect()
}

fn pruned_loads(height: u64, base: u64) -> Loads {
    Loads {
        results: Got::Pruned {
            what: "results",
            height,
            base,
        },
        validators: Got::Pruned {
            what: "validators",
            height,
            base,
        },
        params: Got::Pruned {
            what: "consensus params",
            height,
            base,
        },
    }
}

/// The check of a store a cut left: its base is the old one or the retain height; every
/// height below the base loads as pruned (naming height and base), every other height
/// loads exactly as `before`.
fn check_cut_state(
    store: &StateStore<flushpoint::demo::DemoChain>,
    before: &[Loads],
    old_base: u64,
    retain: u64,
) -> Result<(), String> {
    let base = store.base().map_err(|e| format!("base: {e}"))?;
    if base != old_base && base != retain {
        return Err(format!(
            "base {base}: neither the old base {old_base} nor the retain height {retain}"
        ));
    }
    let now = snapshot(store);
    if now.len() != before.len() {
        return Err(format!(
            "{} heights loadable, {} before",
            now.len(),
            before.len()
        ));
    }
    for (h, (got, was)) in now.iter().zip(before).enumerate() {
        let h = h as u64;
        let want = if h < base {
            pruned_loads(h, base)
        } else {
            was.clone()
        };
        if *got != want {
            let fields = [
                ("results", got.results.brief(), want.results.brief()),
                (
                    "validators",
                    got.validators.brief(),
                    want.validators.brief(),
                ),
                ("params", got.params.brief(), want.params.brief()),
            ];
            let diff: Vec<String> = fields
                .iter()
                .filter(|(_, g, w)| g != w)
                .map(|(f, g, w)| format!("{f}: {g}, expected {w}"))
                .collect();
            return Err(format!("height {h} (base {base}): {}", diff.join("; ")));
        }
    }
    Ok(())
}

/// The raw check of a finished prune: below `retain` no results, and at most one entry per
/// history, holding a value (what the entry at `retain` points at).
fn check_nothing_left_below(map: &Map, retain: u64) -> Result<(), String> {
    let mut history = BTreeMap::<u8, Vec<u64>>::new();
    for (k, v) in map {
        let Some(h) = keys::height_of(k) else {
            continue;
        };
        if h >= retain {
            continue;
        }
        match k[0] {
            keys::RESULTS => return Err(format!("results of {h} left below {retain}")),
            p @ (keys::VALIDATORS | keys::PARAMS) => {
                // Payload byte 8 (after `changed_at`) is 1 when the entry holds its value;
                // the payload starts after the version and kind bytes.
                if v[2 + 8] != 1 {
                    return Err(format!("a pointer entry {p:#04x}‖{h} left below {retain}"));
                }
                history.entry(p).or_default().push(h);
            }
            _ => {}
        }
    }
    for (p, hs) in &history {
        if hs.len() > 1 {
            return Err(format!("{p:#04x}: entries {hs:?} left below {retain}"));
        }
    }
    Ok(())
}

fn all(db: &dyn Db) -> Map {
    collect_range(db, KeyRange::all(), Direction::Forward)
        .unwrap()
        .into_iter()
        .collect()
}

/// `map` with the first `s` recorded batches applied.
fn apply(map: &Map, batches: &[Batch], s: usize) -> Map {
    let mut m = map.clone();
    for b in &batches[..s] {
        for op in b.ops() {
            match op {
                Op::Put(k, v) => {
                    m.insert(k.clone(), v.clone());
                }
                Op::Delete(k) => {
                    m.remove(k);
                }
            }
        }
    }
    m
}

/// Runs `prune(retain)` over a copy of `map`, recording its batches; returns them and the
/// map it leaves.
fn recorded_prune(map: &Map, retain: u64) -> (flushpoint::Result<u64>, Vec<Batch>, Map) {
    let log = WriteLog::new();
    let db = Arc::new(RecordingDb::new(
        MemoryDb::from_map("state", map.clone()),
        log.clone(),
    ));
    let store = StateStore::<flushpoint::demo::DemoChain>::open(db.clone());
    let r = store.prune(retain).map(|r| r.batches);
    let batches = log.records().into_iter().map(|r| r.batch).collect();
    (r, batches, all(&*db))
}

#[derive(Debug, Default)]
struct Tally {
    states: u64,
    /// Cut states with the base raised and records still below it (cut mid-deletion).
    mid_prune: u64,
    failures: Vec<String>,
}

/// Prunes `map` to `retain` with a cut at every write, each cut state checked and then
/// finished by a rerun that is itself cut at every write. Returns the uncut result.
fn prune_with_cuts(map: &Map, retain: u64, label: &str, tally: &mut Tally) -> Map {
    let store = StateStore::<flushpoint::demo::DemoChain>::open(Arc::new(MemoryDb::from_map(
        "state",
        map.clone(),
    )));
    let before = snapshot(&store);
    let old_base = store.base().unwrap();
    let (r, batches, done) = recorded_prune(map, retain);
    let written = match r {
        Ok(w) => w,
        Err(e) => {
            tally
                .failures
                .push(format!("{label}: uncut prune to {retain}: {e}"));
            return done;
        }
    };
    assert_eq!(written as usize, batches.len(), "{label}: batches reported");
    for (s, what) in [
        (check_nothing_left_below(&done, retain), "raw"),
        (
            check_cut_state(
                &StateStore::<flushpoint::demo::DemoChain>::open(Arc::new(MemoryDb::from_map(
                    "state",
                    done.clone(),
                ))),
                &before,
                old_base,
                retain,
            ),
            "loads",
        ),
    ] {
        if let Err(e) = s {
            tally
                .failures
                .push(format!("{label}: uncut prune to {retain} ({what}): {e}"));
        }
    }
    for s in 0..=batches.len() {
        let cut = apply(map, &batches, s);
        tally.states += 1;
        let at = format!("{label}: prune to {retain} cut after write {s}");
        let store = StateStore::<flushpoint::demo::DemoChain>::open(Arc::new(MemoryDb::from_map(
            "state",
            cut.clone(),
        )));
        if let Err(e) = check_cut_state(&store, &before, old_base, retain) {
            tally.failures.push(format!("{at}: {e}"));
            continue;
        }
        if store.base().unwrap() == retain && check_nothing_left_below(&cut, retain).is_err() {
            tally.mid_prune += 1;
        }
        // The rerun, cut at every one of its writes too, then finished.
        let (r, rerun, finished) = recorded_prune(&cut, retain);
        if let Err(e) = r {
            tally.failures.push(format!("{at}: rerun: {e}"));
            continue;
        }
        if finished != done {
            tally.failures.push(format!(
                "{at}: the rerun's store differs from the uncut prune's"
            ));
        }
        for t in 0..rerun.len() {
            let cut2 = apply(&cut, &rerun, t);
            tally.states += 1;
            let store = StateStore::<flushpoint::demo::DemoChain>::open(Arc::new(
                MemoryDb::from_map("state", cut2.clone()),
            ));
            if let Err(e) = check_cut_state(&store, &before, old_base, retain) {
                tally
                    .failures
                    .push(format!("{at}, rerun cut after write {t}: {e}"));
                continue;
            }
            match recorded_prune(&cut2, retain) {
                (Ok(_), _, m) if m == done => {}
                (r, _, _) => tally.failures.push(format!(
                    "{at}, rerun cut after write {t}: the second rerun did not finish ({r:?})"
                )),
            }
        }
    }
    done
}

/// Builds the chain and prunes it to each of `retains` in turn, every prune cut everywhere.
fn run(initial: u64, last: u64, schedule: &Schedule, retains: &[u64], tally: &mut Tally) {
    let label = format!("chain {initial}..={last} {schedule:?} retains {retains:?}");
    println!("{label}");
    let mut map = all(&*build_chain(initial, last, schedule));
    for &r in retains {
        map = prune_with_cuts(&map, r, &label, tally);
    }
}

/// The seeds of the random schedules: the one in `FLUSHPOINT_SEED`, else four fixed ones.
fn seeds() -> Vec<u64> {
    support::seed_override().map_or_else(|| vec![1, 2, 3, 0x5eed_5eed], |s| vec![s])
}

#[test]
fn power_cut_at_every_prune_write_keeps_retained_loads_and_rerun_finishes() {
    let cp = HISTORY_CHECKPOINT_INTERVAL;
    let last = 2 * cp + 300;
    let mut tally = Tally::default();
    // Each retain height is on a chain of its own, so the prune starts from an unpruned
    // store: on a checkpoint, either side of one, on a validator change (1886 = 5·377 + 1),
    // between a change and the next checkpoint (1900: both histories point below), past a
    // checkpoint (2100: both point at 2000), the first height and the state height.
    for r in [1, 2, cp - 1, cp, cp + 1, 1886, 1900, 2 * cp + 100, last] {
        run(1, last, &Schedule::Fixed, &[r], &mut tally);
    }
    // Successive prunes: each drops what the previous one kept below its base.
    run(
        1,
        last,
        &Schedule::Fixed,
        &[cp + 1, 1900, 2100, last],
        &mut tally,
    );
    // A chain starting above 1, its first entries full by the initial-height rule.
    run(
        995,
        995 + cp + 200,
        &Schedule::Fixed,
        &[996, 1500],
        &mut tally,
    );
    run(7, 60, &Schedule::Fixed, &[6, 7, 30], &mut tally);
    for seed in seeds() {
        println!("seed {seed} (replay: FLUSHPOINT_SEED={seed})");
        let mut rng = Rng(seed);
        let initial = 1 + rng.below(5);
        let last = initial + 50 + rng.below(3 * cp);
        let mut retains = Vec::new();
        let mut low = initial;
        for _ in 0..1 + rng.below(3) {
            low += rng.below(last - low + 1);
            retains.push(low);
        }
        run(initial, last, &Schedule::Random(seed), &retains, &mut tally);
    }
    println!(
        "{} prune cut states ({} cut mid-deletion), {} failures",
        tally.states,
        tally.mid_prune,
        tally.failures.len()
    );
    assert!(
        tally.failures.is_empty(),
        "{}",
        tally.failures[..tally.failures.len().min(5)].join("\n")
    );
    // The long chains need up to three deletion batches: cuts fell between deletions.
    assert!(last > 2 * STATE_PRUNE_BATCH_HEIGHTS);
    assert!(tally.mid_prune > 0, "no cut fell mid-deletion");
}

#[test]
fn pruned_loads_name_the_height_and_the_base() {
    let mem = build_chain(1, 50, &Schedule::Fixed);
    let store = StateStore::<flushpoint::demo::DemoChain>::open(mem.clone());
    assert_eq!(store.base().unwrap(), 0);
    let before = snapshot(&store);
    let report = store.prune(20).unwrap();
    assert_eq!(report.base, 20);
    // 19 results; validators and params entries at 1..=19 except the kept ones at 4 and 6
    // (the changes in force at 20).
    assert_eq!(report.deleted, 19 + 18 + 18, "{report:?}");
    assert_eq!(report.batches, 2, "the base, then one deletion batch");
    assert_eq!(store.base().unwrap(), 20);
    for h in 0..20 {
        assert_eq!(snapshot(&store)[h as usize], pruned_loads(h, 20));
    }
    let e = store.load_validators(3).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let msg = e.to_string();
    assert!(msg.contains("height 3") && msg.contains("20"), "{msg}");
    assert_eq!(snapshot(&store)[20..], before[20..]);
    // The kept entries are the values in force at 20: they changed at 4 and 6.
    assert_eq!(store.load_validators(20).unwrap().unwrap().0, 4);
    assert_eq!(store.load_consensus_params(20).unwrap().unwrap().0, 6);
}

#[test]
fn prune_rejects_bad_retain_heights_and_writes_nothing() {
    let map = all(&*build_chain(1, 40, &Schedule::Fixed));
    let (r, _, map) = recorded_prune(&map, 10);
    r.unwrap();
    for bad in [0, 9, 41, u64::MAX] {
        let (r, batches, after) = recorded_prune(&map, bad);
        match r {
            Err(
                ref e @ Error::InvalidRetainHeight {
                    retain_height,
                    base,
                    height: state_height,
                    ..
                },
            ) => {
                assert_eq!((retain_height, base, state_height), (bad, 10, 40));
                assert_eq!(e.kind(), ErrorKind::InvalidInput);
            }
            other => panic!("retain {bad}: expected InvalidRetainHeight, got {other:?}"),
        }
        assert!(batches.is_empty(), "retain {bad}: wrote {batches:?}");
        assert_eq!(after, map);
    }
    // A prune to the current base with nothing left writes nothing.
    let (r, batches, _) = recorded_prune(&map, 10);
    assert_eq!(r.unwrap(), 0);
    assert!(batches.is_empty());
    // An empty store has state height 0: every retain height is refused.
    let (r, batches, _) = recorded_prune(&Map::new(), 1);
    assert!(matches!(r, Err(Error::InvalidRetainHeight { .. })), "{r:?}");
    assert!(batches.is_empty());
}

#[test]
fn rollback_below_the_base_is_refused_and_writes_nothing() {
    let mem = build_chain(1, 40, &Schedule::Fixed);
    let store = StateStore::<flushpoint::demo::DemoChain>::open(mem.clone());
    store.prune(20).unwrap();
    let state = store.load_state().unwrap().unwrap();
    let map = all(&*mem);
    let mut old = state.clone();
    old.last_block_height = 18;
    let e = store.rollback_to(&old, 40).unwrap_err();
    assert!(matches!(e, Error::Rollback(_)), "{e}");
    assert_eq!(all(&*mem), map);
    // To 19 the next height (20) is still stored: accepted.
    old.last_block_height = 19;
    store.rollback_to(&old, 40).unwrap();
    assert_eq!(store.load_validators(20).unwrap().unwrap().0, 4);
}

/// The checks above must be able to fail: each is fed a store that is wrong in one way.
#[test]
fn the_checks_reject_wrong_stores() {
    let map = all(&*build_chain(1, 2300, &Schedule::Fixed));
    let before = snapshot(&StateStore::<flushpoint::demo::DemoChain>::open(Arc::new(
        MemoryDb::from_map("state", map.clone()),
    )));
    let (r, _, done) = recorded_prune(&map, 2100);
    r.unwrap();
    let open = |m: &Map| {
        StateStore::<flushpoint::demo::DemoChain>::open(Arc::new(MemoryDb::from_map(
            "state",
            m.clone(),
        )))
    };
    assert_eq!(check_cut_state(&open(&done), &before, 0, 2100), Ok(()));
    assert_eq!(check_nothing_left_below(&done, 2100), Ok(()));

    let vk = |h| Bytes::copy_from_slice(&keys::height_key(keys::VALIDATORS, h));
    let rk = |h| Bytes::copy_from_slice(&keys::height_key(keys::RESULTS, h));
    let base_key = Bytes::copy_from_slice(&keys::singleton(keys::STATE_STORE_BASE));
    // 1. The checkpoint entry 2100 points at (2000) deleted: retained loads break.
    let mut m = done.clone();
    assert!(m.remove(&vk(2000)).is_some(), "2000 was kept");
    assert!(check_cut_state(&open(&m), &before, 0, 2100).is_err());
    // 2. A retained height's results deleted.
    let mut m = done.clone();
    m.remove(&rk(2100));
    assert!(check_cut_state(&open(&m), &before, 0, 2100).is_err());
    // 3. The deletions done but the base not raised (base written last, cut before it).
    let mut m = done.clone();
    m.remove(&base_key);
    assert!(check_cut_state(&open(&m), &before, 0, 2100).is_err());
    // 4. A base that is neither the old one nor the retain height.
    let mut m = map.clone();
    let mid = flushpoint::records::StateStoreBase { base: 1500 };
    m.insert(
        base_key.clone(),
        flushpoint::records::encode(&keys::singleton(keys::STATE_STORE_BASE), &mid),
    );
    assert!(check_cut_state(&open(&m), &before, 0, 2100).is_err());
    // 5. Leftover records below the base: loads are fine, the raw check is not.
    let mut m = done.clone();
    m.insert(rk(5), map[&rk(5)].clone());
    assert_eq!(check_cut_state(&open(&m), &before, 0, 2100), Ok(()));
    assert!(check_nothing_left_below(&m, 2100).is_err());
    let mut m = done.clone();
    m.insert(vk(1886), map[&vk(1886)].clone());
    assert!(
        check_nothing_left_below(&m, 2100).is_err(),
        "two entries kept"
    );
    let mut m = done.clone();
    m.insert(vk(1950), map[&vk(1950)].clone());
    assert!(
        check_nothing_left_below(&m, 2100).is_err(),
        "a pointer kept"
    );
    // 6. A store whose history is broken fails the load comparison, whatever its base.
    let mut m = map.clone();
    m.remove(&vk(2150));
    assert!(check_cut_state(&open(&m), &before, 0, 2100).is_err());
    // The recorded DB writes what the store writes (the cut model sees every batch).
    let db = MemoryDb::from_map("state", Map::new());
    let mut b = Batch::new();
    b.put(rk(1), Bytes::from_static(b"x"));
    db.write(&b, Durability::Synced).unwrap();
    assert_eq!(apply(&Map::new(), &[b], 1), all(&db));
}

#[test]
fn a_corrupt_base_record_is_reported_never_taken_as_a_base() {
    let mem = build_chain(1, 30, &Schedule::Fixed);
    let store = StateStore::<flushpoint::demo::DemoChain>::open(mem.clone());
    store.prune(10).unwrap();
    let k = keys::singleton(keys::STATE_STORE_BASE);
    let good = mem.get(&k).unwrap().expect("the base record");
    // A flipped bit, and an intact record holding base 0 (outside the domain).
    let mut flipped = good.to_vec();
    flipped[3] ^= 0x01;
    let zero = flushpoint::records::encode(&k, &flushpoint::records::StateStoreBase { base: 0 });
    for bad in [Bytes::from(flipped), zero] {
        let mut b = Batch::new();
        b.put(Bytes::copy_from_slice(&k), bad);
        mem.write(&b, Durability::Synced).unwrap();
        for e in [
            store.load_results(20).unwrap_err(),
            store.load_validators(20).unwrap_err(),
            store.prune(20).unwrap_err(),
        ] {
            match e {
                Error::Corrupt { ref key, .. } => assert_eq!(key, &k.to_vec(), "{e}"),
                other => panic!("expected Corrupt naming the base key, got {other:?}"),
            }
        }
    }
}

#[test]
fn prune_on_redb_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let map = all(&*build_chain(1, 1200, &Schedule::Fixed));
    let options = flushpoint::RedbOptions::default();
    let before;
    {
        let db = Arc::new(flushpoint::RedbDb::open(&path, "state", &options).unwrap());
        let mut b = Batch::new();
        for (k, v) in &map {
            b.put(k.clone(), v.clone());
        }
        db.write(&b, Durability::Synced).unwrap();
        let store = StateStore::<flushpoint::demo::DemoChain>::open(db);
        before = snapshot(&store);
        let report = store.prune(1100).unwrap();
        assert_eq!(report.batches, 3, "the base and two deletion batches");
    }
    let db = Arc::new(flushpoint::RedbDb::open(&path, "state", &options).unwrap());
    let store = StateStore::<flushpoint::demo::DemoChain>::open(db.clone());
    assert_eq!(check_cut_state(&store, &before, 0, 1100), Ok(()));
    assert_eq!(store.base().unwrap(), 1100);
    assert_eq!(check_nothing_left_below(&all(&*db), 1100), Ok(()));
}

#[test]
fn a_failed_prune_write_poisons_the_store_and_a_restart_finishes_the_prune() {
    let map = all(&*build_chain(1, 2300, &Schedule::Fixed));
    let before = snapshot(&StateStore::<flushpoint::demo::DemoChain>::open(Arc::new(
        MemoryDb::from_map("state", map.clone()),
    )));
    let (r, batches, done) = recorded_prune(&map, 2100);
    r.unwrap();
    assert_eq!(batches.len(), 4, "the base and three deletion batches");
    for k in 0..batches.len() as u64 {
        let failing = Arc::new(FailingDb::new(
            MemoryDb::from_map("state", map.clone()),
            FailAfter::new(k),
        ));
        let store = StateStore::<flushpoint::demo::DemoChain>::open(failing.clone());
        assert!(
            !store.is_poisoned(),
            "a store no write failed in is not poisoned"
        );
        let e = store.prune(2100).expect_err("a write fails");
        assert_eq!(failing.failures(), 1, "write {k}: the fault fired once");
        assert_eq!(e.kind(), ErrorKind::Io, "{e}");
        assert!(store.is_poisoned());
        let later = store.load_results(2200).unwrap_err();
        assert_eq!(later.kind(), ErrorKind::Poisoned, "{later}");
        // Restart over what reached the disk.
        let disk = all(failing.inner());
        assert_eq!(disk, apply(&map, &batches, k as usize), "write {k}");
        let store = StateStore::<flushpoint::demo::DemoChain>::open(Arc::new(MemoryDb::from_map(
            "state",
            disk.clone(),
        )));
        assert_eq!(
            check_cut_state(&store, &before, 0, 2100),
            Ok(()),
            "write {k}"
        );
        let (r, _, finished) = recorded_prune(&disk, 2100);
        r.unwrap();
        assert!(finished == done, "write {k}: the rerun finishes the prune");
    }
}

/// The embedder's path: `Node::state_store().prune(r)`, during block sync (the prune joins
/// the held window and is durable at the next flush point) and in consensus (synced batches
/// of its own); a restart's handshake finds the store consistent and the base kept.
#[test]
fn prune_through_the_node_in_block_sync_and_consensus_survives_restart() {
    use flushpoint::demo::{ChainSpec, KvApp};
    use flushpoint::{FlushPolicy, HandshakeCase, HoldingDb, NoEvents, Node};
    use std::time::{Duration, Instant};
    let spec = ChainSpec::new(11, flushpoint::demo::Profile::Light);
    let bs = Arc::new(MemoryDb::new("block store"));
    let st = Arc::new(MemoryDb::new("state"));
    let app_db = Arc::new(MemoryDb::new("app"));
    let open = || {
        let app = KvApp::open(Arc::new(HoldingDb::new(app_db.clone() as Arc<dyn Db>))).unwrap();
        Node::open(
            bs.clone(),
            st.clone(),
            Box::new(app),
            spec.chain(),
            Box::new(NoEvents),
        )
        .unwrap()
    };
    let base_key = keys::singleton(keys::STATE_STORE_BASE);
    let (mut node, _) = open();
    let policy = FlushPolicy::default()
        .with_window_blocks_max(Some(4))
        .with_interval(Duration::from_secs(3600))
        .with_background(false);
    node.start_block_sync(policy, Instant::now()).unwrap();
    for _ in 0..5 {
        let (b, p, c) = spec.next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    assert_eq!(node.durable_height(), 4);
    node.state_store().prune(3).unwrap();
    assert_eq!(
        node.state_store().base().unwrap(),
        3,
        "held writes are read"
    );
    assert!(st.get(&base_key).unwrap().is_none(), "held until the flush");
    for _ in 0..3 {
        let (b, p, c) = spec.next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    assert_eq!(node.durable_height(), 8);
    assert!(st.get(&base_key).unwrap().is_some(), "durable at the flush");
    node.switch_to_consensus(Instant::now()).unwrap();
    for _ in 0..6 {
        let (b, p, c) = spec.next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    let before = snapshot(node.state_store());
    let report = node.state_store().prune(10).unwrap();
    assert_eq!((report.base, report.batches), (10, 2), "{report:?}");
    assert_eq!(check_cut_state(node.state_store(), &before, 3, 10), Ok(()));
    node.stop(Instant::now()).unwrap();
    let (mut node, report) = open();
    assert_eq!(report.case, HandshakeCase::Consistent);
    assert_eq!(node.state_store().base().unwrap(), 10);
    assert_eq!(check_cut_state(node.state_store(), &before, 3, 10), Ok(()));
    assert_eq!(check_nothing_left_below(&all(&*st), 10), Ok(()));
    let (b, p, c) = spec.next_block(node.state());
    node.commit_block(&b, &p, &c).unwrap();
    assert_eq!(node.height(), 15);
}
