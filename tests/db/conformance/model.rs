//! The model test: random op sequences on a fixture against a `BTreeMap`, seeded and
//! shrunk by quickcheck, and the lying `Db`s the same search must catch.

use super::*;
use crate::support::SEED_ENV;

/// Longest op sequence per case.
const OPS_MAX: u64 = 40;
/// The seed of a run without `FLUSHPOINT_SEED`.
const SEED_DEFAULT: u64 = 0x00f1_5400;

#[derive(Debug, Clone)]
pub enum ModelOp {
    Put(Vec<u8>, Vec<u8>, bool),
    Delete(Vec<u8>, bool),
    /// (key, Some(value) = put, None = delete), synced?
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>, bool),
    Get(Vec<u8>),
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>, bool),
    Prefix(Vec<u8>, bool),
    Reopen,
}

/// A random-choice source: `pick(n)` is in `0..n`.
type Pick<'a> = &'a mut dyn FnMut(u64) -> u64;

/// Keys from a small alphabet with edge bytes, so ops collide and bounds hit keys.
fn key(pick: Pick<'_>) -> Vec<u8> {
    const ALPHABET: [u8; 5] = [0x00, 0x01, 0x61, 0xfe, 0xff];
    let len = pick(4) as usize;
    (0..len).map(|_| ALPHABET[pick(5) as usize]).collect()
}

fn value(pick: Pick<'_>) -> Vec<u8> {
    // Mostly small; sometimes a value spanning several redb pages.
    let len = match pick(10) {
        0 => 20_000 + pick(20_000) as usize,
        1 => 0,
        // Around a separating keyspace's threshold (64 bytes): both sides of it.
        2 => 60 + pick(8) as usize,
        _ => pick(64) as usize,
    };
    let fill = pick(256) as u8;
    (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
}

fn bound(pick: Pick<'_>) -> Bound<Vec<u8>> {
    match pick(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(pick)),
        _ => Bound::Excluded(key(pick)),
    }
}

pub fn op(pick: Pick<'_>) -> ModelOp {
    match pick(20) {
        0..=5 => ModelOp::Put(key(pick), value(pick), pick(SYNCED_ONE_IN) == 0),
        6..=7 => ModelOp::Delete(key(pick), pick(SYNCED_ONE_IN) == 0),
        8..=10 => {
            let n = pick(6) as usize;
            let items = (0..n)
                .map(|_| {
                    let k = key(pick);
                    let v = if pick(3) == 0 {
                        None
                    } else {
                        Some(value(pick))
                    };
                    (k, v)
                })
                .collect();
            ModelOp::Batch(items, pick(SYNCED_ONE_IN) == 0)
        }
        11..=13 => ModelOp::Get(key(pick)),
        14..=16 => ModelOp::Range(bound(pick), bound(pick), pick(2) == 0),
        17..=18 => ModelOp::Prefix(key(pick), pick(2) == 0),
        _ => ModelOp::Reopen,
    }
}

impl Arbitrary for ModelOp {
    fn arbitrary(g: &mut Gen) -> Self {
        op(&mut |n| u64::arbitrary(g) % n)
    }
}

/// Stored keys a `get_many` check reads beside the key it asks for. Why: enough for
/// hits and misses in one call, few enough to keep a case cheap.
const GET_MANY_STORED_KEYS: usize = 4;

/// One write in `SYNCED_ONE_IN` is `Synced`. Why: both paths must match the model, but
/// every synced write costs an fsync.
const SYNCED_ONE_IN: u64 = 8;

fn durability(synced: bool) -> Durability {
    if synced {
        Durability::Synced
    } else {
        Durability::Buffered
    }
}

fn to_bytes(bound: &Bound<Vec<u8>>) -> Bound<Bytes> {
    match bound {
        Bound::Included(k) => Bound::Included(b(k)),
        Bound::Excluded(k) => Bound::Excluded(b(k)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Runs `ops` on the fixture and on a `BTreeMap`; the first divergence is the error.
pub fn run(f: &mut Fixture, ops: &[ModelOp]) -> Result<(), String> {
    let mut model: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        let fail = |what: String| Err(format!("op {i} {op:?}: {what}"));
        match op {
            ModelOp::Put(k, v, synced) => {
                let mut batch = Batch::new();
                batch.put(b(k), b(v));
                if let Err(e) = f.db().write(&batch, durability(*synced)) {
                    return fail(e.to_string());
                }
                model.insert(b(k), b(v));
            }
            ModelOp::Delete(k, synced) => {
                let mut batch = Batch::new();
                batch.delete(b(k));
                if let Err(e) = f.db().write(&batch, durability(*synced)) {
                    return fail(e.to_string());
                }
                model.remove(&b(k)[..]);
            }
            ModelOp::Batch(items, synced) => {
                let mut batch = Batch::new();
                for (k, v) in items {
                    match v {
                        Some(v) => {
                            batch.put(b(k), b(v));
                            model.insert(b(k), b(v));
                        }
                        None => {
                            batch.delete(b(k));
                            model.remove(&k[..]);
                        }
                    }
                }
                // A batch of distinct keys and even length goes through write_entries
                // (a flush point's path); the rest through write.
                let keys: std::collections::BTreeSet<&Vec<u8>> =
                    items.iter().map(|(k, _)| k).collect();
                let written = if keys.len() == items.len() && items.len() % 2 == 0 {
                    let owned: Vec<(Bytes, Option<Bytes>)> = items
                        .iter()
                        .map(|(k, v)| (b(k), v.as_deref().map(b)))
                        .collect();
                    let mut entries = owned.iter().map(|(k, v)| (k, v.as_ref()));
                    f.db().write_entries(&mut entries, durability(*synced))
                } else {
                    f.db().write(&batch, durability(*synced))
                };
                if let Err(e) = written {
                    return fail(e.to_string());
                }
            }
            ModelOp::Get(k) => {
                let got = f.db().get(k).map_err(|e| e.to_string())?;
                let want = model.get(&k[..]).cloned();
                if got != want {
                    return fail(format!("get: db {got:?}, model {want:?}"));
                }
                let has = f.db().contains(k).map_err(|e| e.to_string())?;
                if has != want.is_some() {
                    return fail(format!("contains: db {has}, model {}", want.is_some()));
                }
                // get_many over this key and a few stored ones, in one snapshot.
                let mut keys: Vec<&[u8]> = vec![k];
                keys.extend(model.keys().take(GET_MANY_STORED_KEYS).map(|k| k.as_ref()));
                let got = f.db().get_many(&keys).map_err(|e| e.to_string())?;
                let want: Vec<Option<Bytes>> =
                    keys.iter().map(|k| model.get(*k).cloned()).collect();
                if got != want {
                    return fail(format!("get_many: db {got:?}, model {want:?}"));
                }
            }
            ModelOp::Range(start, end, reverse) => {
                let (start, end) = (to_bytes(start), to_bytes(end));
                let direction = if *reverse {
                    Direction::Reverse
                } else {
                    Direction::Forward
                };
                let range = KeyRange {
                    start: start.clone(),
                    end: end.clone(),
                };
                let got = collect_range(f.db(), range, direction).map_err(|e| e.to_string())?;
                let want = expected_range(&model, &start, &end, direction);
                if got != want {
                    return fail(format!(
                        "range: db {:?}, model {:?}",
                        show(&got),
                        show(&want)
                    ));
                }
            }
            ModelOp::Prefix(p, reverse) => {
                let direction = if *reverse {
                    Direction::Reverse
                } else {
                    Direction::Forward
                };
                let got = collect_range(f.db(), KeyRange::prefix(p), direction)
                    .map_err(|e| e.to_string())?;
                let mut want: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| k.starts_with(p))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if *reverse {
                    want.reverse();
                }
                if got != want {
                    return fail(format!(
                        "prefix: db {:?}, model {:?}",
                        show(&got),
                        show(&want)
                    ));
                }
            }
            ModelOp::Reopen => f.reopen(),
        }
    }
    // Finally the whole database equals the model, after one more reopen.
    f.reopen();
    let all =
        collect_range(f.db(), KeyRange::all(), Direction::Forward).map_err(|e| e.to_string())?;
    let want: Vec<_> = model.into_iter().collect();
    if all != want {
        return Err(format!(
            "final contents: db {:?}, model {:?}",
            show(&all),
            show(&want)
        ));
    }
    Ok(())
}

thread_local! {
    /// The fixture maker for the quickcheck property running on this thread (quickcheck
    /// takes a plain `fn`, which cannot capture it).
    static MAKE: std::cell::Cell<Option<fn() -> Fixture>> = const { std::cell::Cell::new(None) };
}

fn prop(ops: Vec<ModelOp>) -> TestResult {
    let make = MAKE.with(|m| m.get()).expect("fixture maker set");
    let mut f = make();
    match run(&mut f, &ops) {
        Ok(()) => TestResult::passed(),
        Err(e) => TestResult::error(e),
    }
}

/// quickcheck explores op sequences and shrinks a failure to a short one, which it
/// prints. The generator is seeded: the seed is printed first, and
/// `FLUSHPOINT_SEED=<seed>` replays the run (shrinking included).
pub fn check_quickcheck(make: fn() -> Fixture, cases: u64) {
    // A fixed default, never the clock: a plain run is reproducible.
    let seed = seed();
    eprintln!("model seed {seed} (replay: {SEED_ENV}={seed})");
    MAKE.with(|m| m.set(Some(make)));
    QuickCheck::new()
        .tests(cases)
        .max_tests(cases)
        .rng(Gen::from_size_and_seed(OPS_MAX as usize, seed))
        .quickcheck(prop as fn(Vec<ModelOp>) -> TestResult);
}

/// One wrong answer a `Db` could give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lie {
    /// `get` returns the value with one extra byte.
    WrongValue,
    /// `contains` says no for a key that is there.
    ContainsMissesKey,
    /// A range drops its last entry.
    RangeDropsKey,
    /// A range comes back in the other direction.
    RangeWrongDirection,
    /// A batch applies its ops in reverse (an earlier op on a key wins).
    BatchFirstOpWins,
    /// A delete is ignored.
    DeleteIgnored,
    /// `get_many` loses the first value it found (reads it as absent).
    GetManyDropsValue,
    /// `write_entries` drops its last entry.
    EntriesDropLast,
}

/// Every lie.
pub const LIES: [Lie; 8] = [
    Lie::WrongValue,
    Lie::ContainsMissesKey,
    Lie::RangeDropsKey,
    Lie::RangeWrongDirection,
    Lie::BatchFirstOpWins,
    Lie::DeleteIgnored,
    Lie::GetManyDropsValue,
    Lie::EntriesDropLast,
];

/// A `MemoryDb` that tells one lie.
#[derive(Debug)]
pub struct Lying {
    pub inner: MemoryDb,
    pub lie: Lie,
}

impl DbWrapper for Lying {
    type Inner = MemoryDb;
    fn inner(this: &Self) -> &MemoryDb {
        &this.inner
    }
    fn get(this: &Self, key: &[u8]) -> flushpoint::Result<Option<Bytes>> {
        let v = this.inner.get(key)?;
        Ok(match (this.lie, v) {
            (Lie::WrongValue, Some(v)) => Some([&v[..], &[0u8][..]].concat().into()),
            (_, v) => v,
        })
    }
    fn contains(this: &Self, key: &[u8]) -> flushpoint::Result<bool> {
        Ok(this.lie != Lie::ContainsMissesKey && this.inner.contains(key)?)
    }
    fn write_entries<'a>(
        this: &Self,
        entries: &mut dyn Iterator<Item = flushpoint::EntryRef<'a>>,
        durability: Durability,
    ) -> flushpoint::Result<()> {
        let mut all: Vec<_> = entries.collect();
        if this.lie == Lie::EntriesDropLast {
            all.pop();
        }
        this.inner.write_entries(&mut all.into_iter(), durability)
    }
    fn get_many(this: &Self, keys: &[&[u8]]) -> flushpoint::Result<Vec<Option<Bytes>>> {
        let mut v = this.inner.get_many(keys)?;
        if this.lie == Lie::GetManyDropsValue
            && let Some(first) = v.iter_mut().find(|x| x.is_some())
        {
            *first = None;
        }
        Ok(v)
    }
    fn range(
        this: &Self,
        range: KeyRange,
        direction: Direction,
    ) -> flushpoint::Result<flushpoint::DbIter<'_>> {
        let mut v = collect_range(&this.inner, range, direction)?;
        match this.lie {
            Lie::RangeDropsKey => {
                v.pop();
            }
            Lie::RangeWrongDirection => v.reverse(),
            _ => {}
        }
        Ok(Box::new(v.into_iter().map(Ok)))
    }
    fn write(this: &Self, batch: &Batch, durability: Durability) -> flushpoint::Result<()> {
        let mut ops: Vec<flushpoint::Op> = batch.ops().to_vec();
        match this.lie {
            Lie::BatchFirstOpWins => ops.reverse(),
            Lie::DeleteIgnored => ops.retain(|op| matches!(op, flushpoint::Op::Put(..))),
            _ => {}
        }
        let mut b = Batch::new();
        for op in ops {
            match op {
                flushpoint::Op::Put(k, v) => b.put(k, v),
                flushpoint::Op::Delete(k) => b.delete(k),
            };
        }
        this.inner.write(&b, durability)
    }
}

/// Searches seeded random op sequences for one on which `run` rejects `lie`; returns
/// the case number and the checker's message.
pub fn find_lie(lie: Lie, seed: u64, cases: u64) -> Option<(u64, String)> {
    let mut g = Gen::from_size_and_seed(OPS_MAX as usize, seed);
    (0..cases).find_map(|case| {
        let ops = Vec::<ModelOp>::arbitrary(&mut g);
        let mut f = Fixture {
            db: Some(Box::new(Lying {
                inner: MemoryDb::new("liar"),
                lie,
            })),
            open: None,
            _dir: None,
        };
        run(&mut f, &ops).err().map(|e| (case, e))
    })
}

/// The seed of a run (`FLUSHPOINT_SEED`, else the fixed default).
pub fn seed() -> u64 {
    crate::support::seed(SEED_DEFAULT)
}
