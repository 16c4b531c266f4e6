//! Property: a `HoldingDb` behaves exactly like a model of a disk (`BTreeMap`) with an overlay
//! of held writes (`BTreeMap` of tombstones and values) — for every read (merged and durable,
//! point and range, both directions, any bounds), for `held_bytes`, and across hold,
//! `write_held` and `stop_holding`. And: a failed `write_held` poisons the database for good
//! and keeps the overlay.
//!
//! The checker (`check`) runs over the `Subject` trait, so `Lying` — a `HoldingDb` that
//! tells one lie (a wrong value, a dropped or reordered range entry, the overlay leaking
//! into a durable read, miscounted held bytes, keys or `write_held` ops, a held write on
//! the disk, an ignored `hold`) — is fed to it and must be rejected, by a hand-written
//! sequence and by the seeded random search. Seeds: `FLUSHPOINT_SEED=<n>` (printed; fixed
//! default, never the clock).

use crate::support;

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use flushpoint::holding::HeldWrite;
use flushpoint::testing::{FailAfter, FailingDb};
use flushpoint::{Batch, Db, Direction, Durability, Error, HoldingDb, KeyRange, MemoryDb};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

/// Keys from a small alphabet, so operations collide on the same keys often.
fn key(g: &mut Gen) -> Vec<u8> {
    let len = *g.choose(&[0usize, 1, 1, 2, 2, 3]).expect("non-empty");
    (0..len)
        .map(|_| *g.choose(&[0u8, 1, 2, 0x7f, 0xff]).expect("non-empty"))
        .collect()
}

fn value(g: &mut Gen) -> Vec<u8> {
    let len = *g.choose(&[0usize, 1, 3, 7]).expect("non-empty");
    (0..len).map(|_| u8::arbitrary(g)).collect()
}

fn bound(g: &mut Gen) -> Bound<Vec<u8>> {
    match u8::arbitrary(g) % 3 {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(g)),
        _ => Bound::Excluded(key(g)),
    }
}

#[derive(Debug, Clone)]
enum Step {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    Get(Vec<u8>),
    GetDurable(Vec<u8>),
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>, bool),
    RangeDurable(Bound<Vec<u8>>, Bound<Vec<u8>>, bool),
    Hold,
    WriteHeld,
    StopHolding,
}

impl Arbitrary for Step {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 16 {
            0..=2 => Step::Put(key(g), value(g)),
            3 => Step::Delete(key(g)),
            4 => {
                let n = usize::arbitrary(g) % 5;
                Step::Batch(
                    (0..n)
                        .map(|_| {
                            let k = key(g);
                            let v = if bool::arbitrary(g) {
                                Some(value(g))
                            } else {
                                None
                            };
                            (k, v)
                        })
                        .collect(),
                )
            }
            5 | 6 => Step::Get(key(g)),
            7 => Step::GetDurable(key(g)),
            8 | 9 => Step::Range(bound(g), bound(g), bool::arbitrary(g)),
            10 => Step::RangeDurable(bound(g), bound(g), bool::arbitrary(g)),
            11 | 12 => Step::Hold,
            13 | 14 => Step::WriteHeld,
            _ => Step::StopHolding,
        }
    }
}

/// The model: a disk and an overlay of held writes.
#[derive(Default)]
struct Model {
    disk: BTreeMap<Vec<u8>, Vec<u8>>,
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    holding: bool,
}

impl Model {
    fn write(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)]) {
        for (k, v) in ops {
            if self.holding {
                self.overlay.insert(k.clone(), v.clone());
            } else {
                match v {
                    Some(v) => self.disk.insert(k.clone(), v.clone()),
                    None => self.disk.remove(k),
                };
            }
        }
    }
    fn merged(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = self.disk.clone();
        for (k, v) in &self.overlay {
            match v {
                Some(v) => m.insert(k.clone(), v.clone()),
                None => m.remove(k),
            };
        }
        m
    }
    fn held_bytes(&self) -> u64 {
        self.overlay
            .iter()
            .map(|(k, v)| (k.len() + v.as_ref().map_or(0, Vec::len)) as u64)
            .sum()
    }
}

fn to_range(start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> KeyRange {
    let conv = |b: &Bound<Vec<u8>>| match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(k) => Bound::Included(Bytes::from(k.clone())),
        Bound::Excluded(k) => Bound::Excluded(Bytes::from(k.clone())),
    };
    KeyRange {
        start: conv(start),
        end: conv(end),
    }
}

fn model_range(
    map: &BTreeMap<Vec<u8>, Vec<u8>>,
    range: &KeyRange,
    reverse: bool,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v: Vec<_> = map
        .iter()
        .filter(|(k, _)| range.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if reverse {
        v.reverse();
    }
    v
}

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn db_range(it: flushpoint::DbIter<'_>) -> Result<Entries, String> {
    it.map(|r| {
        r.map(|(k, v)| (k.to_vec(), v.to_vec()))
            .map_err(|e| e.to_string())
    })
    .collect()
}

fn dir(reverse: bool) -> Direction {
    if reverse {
        Direction::Reverse
    } else {
        Direction::Forward
    }
}

/// What the checker asks of a holding database. `HoldingDb<MemoryDb>` answers it; `Lying`
/// answers it wrongly on purpose, to show the checker rejects wrong answers.
trait Subject {
    fn write(&self, b: &Batch, d: Durability) -> flushpoint::Result<()>;
    fn get(&self, k: &[u8]) -> flushpoint::Result<Option<Vec<u8>>>;
    fn get_durable(&self, k: &[u8]) -> flushpoint::Result<Option<Vec<u8>>>;
    fn get_many(&self, ks: &[&[u8]]) -> flushpoint::Result<Vec<Option<Vec<u8>>>>;
    fn range(&self, r: KeyRange, d: Direction) -> Result<Entries, String>;
    fn range_durable(&self, r: KeyRange, d: Direction) -> Result<Entries, String>;
    fn hold(&self) -> flushpoint::Result<()>;
    fn write_held(&self) -> flushpoint::Result<HeldWrite>;
    fn stop_holding(&self) -> flushpoint::Result<()>;
    fn is_holding(&self) -> bool;
    fn held_bytes(&self) -> u64;
    fn held_keys(&self) -> usize;
    /// The inner database's whole contents (the disk).
    fn disk(&self) -> Result<Entries, String>;
}

impl Subject for HoldingDb<MemoryDb> {
    fn write(&self, b: &Batch, d: Durability) -> flushpoint::Result<()> {
        Db::write(self, b, d)
    }
    fn get(&self, k: &[u8]) -> flushpoint::Result<Option<Vec<u8>>> {
        Ok(Db::get(self, k)?.map(|v| v.to_vec()))
    }
    fn get_durable(&self, k: &[u8]) -> flushpoint::Result<Option<Vec<u8>>> {
        Ok(HoldingDb::get_durable(self, k)?.map(|v| v.to_vec()))
    }
    fn get_many(&self, ks: &[&[u8]]) -> flushpoint::Result<Vec<Option<Vec<u8>>>> {
        Ok(Db::get_many(self, ks)?
            .into_iter()
            .map(|v| v.map(|v| v.to_vec()))
            .collect())
    }
    fn range(&self, r: KeyRange, d: Direction) -> Result<Entries, String> {
        db_range(Db::range(self, r, d).map_err(|e| e.to_string())?)
    }
    fn range_durable(&self, r: KeyRange, d: Direction) -> Result<Entries, String> {
        db_range(HoldingDb::range_durable(self, r, d).map_err(|e| e.to_string())?)
    }
    fn hold(&self) -> flushpoint::Result<()> {
        HoldingDb::hold(self)
    }
    fn write_held(&self) -> flushpoint::Result<HeldWrite> {
        HoldingDb::write_held(self)
    }
    fn stop_holding(&self) -> flushpoint::Result<()> {
        HoldingDb::stop_holding(self)
    }
    fn is_holding(&self) -> bool {
        HoldingDb::is_holding(self)
    }
    fn held_bytes(&self) -> u64 {
        HoldingDb::held_bytes(self)
    }
    fn held_keys(&self) -> usize {
        HoldingDb::held_keys(self)
    }
    fn disk(&self) -> Result<Entries, String> {
        db_range(
            self.inner()
                .range(KeyRange::all(), Direction::Forward)
                .map_err(|e| e.to_string())?,
        )
    }
}

/// Runs `steps` against a fresh `HoldingDb<MemoryDb>` and the model.
fn run(steps: &[Step]) -> Result<(), String> {
    check(&HoldingDb::new(MemoryDb::new("model")), steps)
}

/// The checker: runs `steps` against both `db` and the model; returns the first divergence.
fn check(db: &impl Subject, steps: &[Step]) -> Result<(), String> {
    let mut m = Model::default();
    for (i, step) in steps.iter().enumerate() {
        let at = |what: &str| format!("step {i} {step:?}: {what}");
        match step {
            Step::Put(k, v) => {
                let mut b = Batch::new();
                b.put(k.clone(), v.clone());
                db.write(&b, Durability::Synced)
                    .map_err(|e| at(&e.to_string()))?;
                m.write(&[(k.clone(), Some(v.clone()))]);
            }
            Step::Delete(k) => {
                let mut b = Batch::new();
                b.delete(k.clone());
                db.write(&b, Durability::Buffered)
                    .map_err(|e| at(&e.to_string()))?;
                m.write(&[(k.clone(), None)]);
            }
            Step::Batch(ops) => {
                let mut b = Batch::new();
                for (k, v) in ops {
                    match v {
                        Some(v) => b.put(k.clone(), v.clone()),
                        None => b.delete(k.clone()),
                    };
                }
                db.write(&b, Durability::Synced)
                    .map_err(|e| at(&e.to_string()))?;
                m.write(ops);
            }
            Step::Get(k) => {
                let got = db.get(k).map_err(|e| at(&e.to_string()))?;
                let merged = m.merged();
                let want = merged.get(k).cloned();
                if got != want {
                    return Err(at(&format!("get: got {got:?}, model {want:?}")));
                }
                // get_many over this key and a few others the model holds (held or on disk).
                let mut keys: Vec<&[u8]> = vec![k];
                keys.extend(merged.keys().take(4).map(|k| k.as_slice()));
                let got = db.get_many(&keys).map_err(|e| at(&e.to_string()))?;
                let want: Vec<Option<Vec<u8>>> =
                    keys.iter().map(|k| merged.get(*k).cloned()).collect();
                if got != want {
                    return Err(at(&format!("get_many: got {got:?}, model {want:?}")));
                }
            }
            Step::GetDurable(k) => {
                let got = db.get_durable(k).map_err(|e| at(&e.to_string()))?;
                let want = m.disk.get(k).cloned();
                if got != want {
                    return Err(at(&format!("get_durable: got {got:?}, disk {want:?}")));
                }
            }
            Step::Range(s, e, rev) => {
                let r = to_range(s, e);
                let got = db.range(r.clone(), dir(*rev)).map_err(|e| at(&e))?;
                let want = model_range(&m.merged(), &r, *rev);
                if got != want {
                    return Err(at(&format!("range: got {got:?}, model {want:?}")));
                }
            }
            Step::RangeDurable(s, e, rev) => {
                let r = to_range(s, e);
                let got = db.range_durable(r.clone(), dir(*rev)).map_err(|e| at(&e))?;
                let want = model_range(&m.disk, &r, *rev);
                if got != want {
                    return Err(at(&format!("range_durable: got {got:?}, disk {want:?}")));
                }
            }
            Step::Hold => {
                db.hold().map_err(|e| at(&e.to_string()))?;
                m.holding = true;
            }
            Step::WriteHeld => {
                let w = db.write_held().map_err(|e| at(&e.to_string()))?;
                if w.ops != m.overlay.len() as u64 || w.bytes != m.held_bytes() {
                    return Err(at(&format!(
                        "write_held wrote {w:?}, model held {} ops {} bytes",
                        m.overlay.len(),
                        m.held_bytes()
                    )));
                }
                let overlay = std::mem::take(&mut m.overlay);
                let ops: Vec<_> = overlay.into_iter().collect();
                let holding = std::mem::replace(&mut m.holding, false);
                m.write(&ops);
                m.holding = holding;
            }
            Step::StopHolding => {
                // Precondition of stop_holding: nothing held.
                if m.overlay.is_empty() {
                    db.stop_holding().map_err(|e| at(&e.to_string()))?;
                    m.holding = false;
                }
            }
        }
        if db.is_holding() != m.holding {
            return Err(at("holding flag differs"));
        }
        if db.held_bytes() != m.held_bytes() {
            return Err(at(&format!(
                "held_bytes {} != model overlay bytes {}",
                db.held_bytes(),
                m.held_bytes()
            )));
        }
        if db.held_keys() != m.overlay.len() {
            return Err(at("held_keys differs"));
        }
        // The disk is exactly the model's disk, whatever is held.
        let disk = db.disk().map_err(|e| at(&e))?;
        let want: Vec<_> = m.disk.clone().into_iter().collect();
        if disk != want {
            return Err(at(&format!("disk {disk:?} != model disk {want:?}")));
        }
    }
    Ok(())
}

fn prop(steps: Vec<Step>) -> TestResult {
    match run(&steps) {
        Ok(()) => TestResult::passed(),
        Err(e) => TestResult::error(e),
    }
}

/// The seed of the seeded tests: `FLUSHPOINT_SEED` if set, else a fixed default (never the
/// clock, so a plain run is reproducible).
fn seed() -> u64 {
    support::seed(0x5eed_f1a5)
}

#[test]
fn holding_db_equals_btreemap_model_of_disk_and_overlay() {
    let seed = seed();
    println!("holding model: 2000 cases, seed {seed} (replay with FLUSHPOINT_SEED={seed})");
    QuickCheck::new()
        .tests(2000)
        .max_tests(2000)
        .rng(Gen::from_size_and_seed(60, seed))
        .quickcheck(prop as fn(Vec<Step>) -> TestResult);
}

/// One wrong answer a holding database could give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lie {
    /// `get` returns a value with one extra byte.
    WrongValue,
    /// `get` answers "absent" for a key that is there.
    GetDropsKey,
    /// `range` drops its last entry.
    RangeDropsKey,
    /// `range` swaps its first two entries.
    RangeReordered,
    /// `range_durable` returns the merged view (the overlay leaks into the durable read).
    RangeDurableSeesOverlay,
    /// `get_durable` returns the merged view.
    GetDurableSeesOverlay,
    /// `held_bytes` is one too many while something is held.
    HeldBytesMiscounted,
    /// `held_keys` is one too few while something is held.
    HeldKeysMiscounted,
    /// `write_held` reports one op too many.
    WriteHeldMiscounted,
    /// The disk already has the held writes (a held write reached the disk).
    DiskSeesOverlay,
    /// `hold` does not hold.
    HoldIgnored,
    /// `get_many` answers "absent" for the first key that is there.
    GetManyDropsKey,
}

const LIES: [Lie; 12] = [
    Lie::WrongValue,
    Lie::GetDropsKey,
    Lie::RangeDropsKey,
    Lie::RangeReordered,
    Lie::RangeDurableSeesOverlay,
    Lie::GetDurableSeesOverlay,
    Lie::HeldBytesMiscounted,
    Lie::HeldKeysMiscounted,
    Lie::WriteHeldMiscounted,
    Lie::DiskSeesOverlay,
    Lie::HoldIgnored,
    Lie::GetManyDropsKey,
];

/// A `HoldingDb<MemoryDb>` that tells one lie; every other answer is the real one.
struct Lying {
    db: HoldingDb<MemoryDb>,
    lie: Lie,
}

impl Subject for Lying {
    fn write(&self, b: &Batch, d: Durability) -> flushpoint::Result<()> {
        Subject::write(&self.db, b, d)
    }
    fn get(&self, k: &[u8]) -> flushpoint::Result<Option<Vec<u8>>> {
        let v = Subject::get(&self.db, k)?;
        Ok(match self.lie {
            Lie::WrongValue => v.map(|mut v| {
                v.push(0);
                v
            }),
            Lie::GetDropsKey => None,
            _ => v,
        })
    }
    fn get_many(&self, ks: &[&[u8]]) -> flushpoint::Result<Vec<Option<Vec<u8>>>> {
        let mut v = Subject::get_many(&self.db, ks)?;
        if self.lie == Lie::GetManyDropsKey
            && let Some(first) = v.iter_mut().find(|x| x.is_some())
        {
            *first = None;
        }
        Ok(v)
    }
    fn get_durable(&self, k: &[u8]) -> flushpoint::Result<Option<Vec<u8>>> {
        match self.lie {
            Lie::GetDurableSeesOverlay => Subject::get(&self.db, k),
            _ => Subject::get_durable(&self.db, k),
        }
    }
    fn range(&self, r: KeyRange, d: Direction) -> Result<Entries, String> {
        let mut v = Subject::range(&self.db, r, d)?;
        match self.lie {
            Lie::RangeDropsKey => {
                v.pop();
            }
            Lie::RangeReordered if v.len() >= 2 => v.swap(0, 1),
            _ => {}
        }
        Ok(v)
    }
    fn range_durable(&self, r: KeyRange, d: Direction) -> Result<Entries, String> {
        match self.lie {
            Lie::RangeDurableSeesOverlay => Subject::range(&self.db, r, d),
            _ => Subject::range_durable(&self.db, r, d),
        }
    }
    fn hold(&self) -> flushpoint::Result<()> {
        match self.lie {
            Lie::HoldIgnored => Ok(()),
            _ => Subject::hold(&self.db),
        }
    }
    fn write_held(&self) -> flushpoint::Result<HeldWrite> {
        let mut w = Subject::write_held(&self.db)?;
        if self.lie == Lie::WriteHeldMiscounted {
            w.ops += 1;
        }
        Ok(w)
    }
    fn stop_holding(&self) -> flushpoint::Result<()> {
        Subject::stop_holding(&self.db)
    }
    fn is_holding(&self) -> bool {
        Subject::is_holding(&self.db)
    }
    fn held_bytes(&self) -> u64 {
        let n = Subject::held_bytes(&self.db);
        match self.lie {
            Lie::HeldBytesMiscounted if self.db.held_keys() > 0 => n + 1,
            _ => n,
        }
    }
    fn held_keys(&self) -> usize {
        let n = Subject::held_keys(&self.db);
        match self.lie {
            Lie::HeldKeysMiscounted => n.saturating_sub(1),
            _ => n,
        }
    }
    fn disk(&self) -> Result<Entries, String> {
        match self.lie {
            Lie::DiskSeesOverlay => Subject::range(&self.db, KeyRange::all(), Direction::Forward),
            _ => Subject::disk(&self.db),
        }
    }
}

/// A sequence that exercises every answer the checker compares: holding, a merged range
/// over two keys, durable reads that differ from merged ones, and a flush.
fn probe_steps() -> Vec<Step> {
    vec![
        Step::Put(vec![1], vec![9]),
        Step::Put(vec![3], vec![7]),
        Step::Hold,
        Step::Put(vec![2], vec![8]),
        Step::Delete(vec![1]),
        Step::Get(vec![2]),
        Step::Range(Bound::Unbounded, Bound::Unbounded, true),
        Step::RangeDurable(Bound::Unbounded, Bound::Unbounded, false),
        Step::GetDurable(vec![1]),
        Step::WriteHeld,
        Step::Get(vec![1]),
        Step::StopHolding,
    ]
}

/// The checker accepts the real database on the probe sequence and rejects each lie.
#[test]
fn model_detects_a_wrong_answer() {
    run(&probe_steps()).expect("model and the real HoldingDb agree");
    for lie in LIES {
        let liar = Lying {
            db: HoldingDb::new(MemoryDb::new("liar")),
            lie,
        };
        match check(&liar, &probe_steps()) {
            Ok(()) => panic!("the checker accepted a HoldingDb that lies: {lie:?}"),
            Err(e) => println!("{lie:?}: rejected at {e}"),
        }
    }
}

/// The seeded property search finds each lie too (not only the hand-written sequence).
#[test]
fn property_search_finds_every_lie() {
    let seed = seed();
    println!("lie search: seed {seed} (replay with FLUSHPOINT_SEED={seed})");
    let mut g = Gen::from_size_and_seed(60, seed);
    for lie in LIES {
        let found = (0..2000).find_map(|case| {
            let steps = Vec::<Step>::arbitrary(&mut g);
            let liar = Lying {
                db: HoldingDb::new(MemoryDb::new("liar")),
                lie,
            };
            check(&liar, &steps).err().map(|e| (case, e))
        });
        match found {
            Some((case, e)) => println!("{lie:?}: found by random case {case}: {e}"),
            None => panic!("2000 random cases never caught {lie:?}"),
        }
    }
}

fn poisoned<T: std::fmt::Debug>(r: flushpoint::Result<T>, what: &str) {
    match r {
        Err(Error::Poisoned { .. }) => {}
        other => panic!("{what}: expected Error::Poisoned, got {other:?}"),
    }
}

#[test]
fn failed_write_held_poisons_every_later_call_and_keeps_the_overlay() {
    let failing = FailingDb::new(MemoryDb::new("app"), FailAfter::new(1));
    let db = HoldingDb::new(failing);
    let mut b = Batch::new();
    b.put(&b"durable"[..], &b"1"[..]);
    db.write(&b, Durability::Synced).unwrap();
    db.hold().unwrap();
    let mut b = Batch::new();
    b.put(&b"held"[..], &b"22"[..]).delete(&b"durable"[..]);
    db.write(&b, Durability::Synced).unwrap();
    let held_bytes = db.held_bytes();
    assert_eq!(held_bytes, 4 + 2 + 7);
    let err = db
        .write_held()
        .expect_err("the injected fsync failure surfaces");
    assert!(
        !matches!(err, Error::Poisoned { .. }),
        "the first error is the cause: {err}"
    );
    assert_eq!(db.inner().failures(), 1, "the fault fired once");
    assert!(db.is_poisoned());
    // The overlay was not dropped: only an Ok may drop it.
    assert_eq!(db.held_keys(), 2);
    assert_eq!(db.held_bytes(), held_bytes);
    // The disk is untouched by the failed batch.
    assert_eq!(
        db.inner().inner().get(b"durable").unwrap().as_deref(),
        Some(&b"1"[..])
    );
    poisoned(db.get(b"held"), "get");
    poisoned(db.get(b"durable"), "get of a durable key");
    poisoned(db.get_durable(b"durable"), "get_durable");
    poisoned(
        db.range(KeyRange::all(), Direction::Forward).map(|_| ()),
        "range",
    );
    poisoned(
        db.range(KeyRange::all(), Direction::Reverse).map(|_| ()),
        "reverse range",
    );
    poisoned(
        db.range_durable(KeyRange::all(), Direction::Forward)
            .map(|_| ()),
        "range_durable",
    );
    poisoned(db.write(&b, Durability::Synced), "write");
    poisoned(db.write_held(), "write_held retried");
    poisoned(db.hold(), "hold");
    poisoned(db.stop_holding(), "stop_holding");
    assert_eq!(db.inner().failures(), 1, "no later call reached the disk");
}

#[test]
fn failed_pass_through_write_poisons_too() {
    let db = HoldingDb::new(FailingDb::new(MemoryDb::new("state"), FailAfter::new(0)));
    let mut b = Batch::new();
    b.put(&b"k"[..], &b"v"[..]);
    assert!(!matches!(
        db.write(&b, Durability::Synced),
        Err(Error::Poisoned { .. }) | Ok(())
    ));
    assert_eq!(db.inner().failures(), 1);
    poisoned(db.get(b"k"), "get");
    poisoned(db.write(&b, Durability::Buffered), "write");
    poisoned(db.hold(), "hold");
}
