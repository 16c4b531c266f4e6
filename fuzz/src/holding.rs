//! `HoldingDb` op sequences against a model: a `BTreeMap` disk, a `BTreeMap` overlay of
//! held puts and tombstones, a holding flag, a write budget (a `FailingDb` in the real
//! stack) and a poison flag.
//!
//! Stack under test: `HoldingDb<CountingDb<FailingDb<MemoryDb>>>`. After every op the
//! real and model states are compared: the disk (the `MemoryDb` snapshot), held bytes and
//! keys, holding and poison flags, and the sync counters (held writes reach the inner
//! database only at `write_held`, as one `Synced` batch, and never when nothing is held).

use std::collections::BTreeMap;
use std::ops::Bound;

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use flushpoint::db::{CountingDb, collect_range};
use flushpoint::holding::HeldWrite;
use flushpoint::testing::{FailAfter, FailingDb};
use flushpoint::{Batch, Db, Direction, Durability, HoldingDb, KeyRange, MemoryDb};

/// A key from a small alphabet (collisions and 0x00/0xff edges are common), 0 to 2 bytes.
#[derive(Debug, Clone)]
pub struct Key(pub Vec<u8>);

impl<'a> Arbitrary<'a> for Key {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        const ALPHABET: [u8; 5] = [0x00, 0x01, b'a', 0xfe, 0xff];
        let len = u.int_in_range(0..=2)?;
        let mut k = Vec::with_capacity(len);
        for _ in 0..len {
            k.push(ALPHABET[u.int_in_range(0..=4)?]);
        }
        Ok(Key(k))
    }
}

/// A short value (0 to 4 bytes).
#[derive(Debug, Clone)]
pub struct Val(pub Vec<u8>);

impl<'a> Arbitrary<'a> for Val {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let len = u.int_in_range(0..=4)?;
        Ok(Val(u.bytes(len)?.to_vec()))
    }
}

/// A range bound.
#[derive(Debug, Clone, Arbitrary)]
pub enum B {
    /// No bound.
    Unbounded,
    /// Inclusive.
    Included(Key),
    /// Exclusive.
    Excluded(Key),
}

impl B {
    fn bound(&self) -> Bound<Bytes> {
        match self {
            B::Unbounded => Bound::Unbounded,
            B::Included(k) => Bound::Included(Bytes::from(k.0.clone())),
            B::Excluded(k) => Bound::Excluded(Bytes::from(k.0.clone())),
        }
    }
}

/// One operation.
#[derive(Debug, Clone, Arbitrary)]
pub enum HOp {
    /// A one-op `Synced` batch.
    Put(Key, Val),
    /// A one-op `Buffered` delete.
    Delete(Key),
    /// A multi-op batch (later ops on a key win), `Synced` or `Buffered`.
    Batch(Vec<(Key, Option<Val>)>, bool),
    /// `hold`.
    Hold,
    /// `stop_holding` (issued only when the model holds nothing: holding stops only with
    /// an empty overlay, by assertion).
    StopHolding,
    /// `write_held`.
    WriteHeld,
    /// `get` (merged view).
    Get(Key),
    /// `get_durable` (disk only).
    GetDurable(Key),
    /// `range` (merged), forward or reverse.
    Range(B, B, bool),
    /// `range_durable`, forward or reverse.
    RangeDurable(B, B, bool),
    /// `range` over `KeyRange::prefix`.
    Prefix(Key, bool),
}

/// A fuzz input: an optional write budget (then every inner write fails) and the ops.
#[derive(Debug, Clone, Arbitrary)]
pub struct Input {
    /// Inner writes allowed before the disk "dies"; `None`: never fails.
    pub fail_after: Option<u8>,
    /// The ops.
    pub ops: Vec<HOp>,
}

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Default)]
struct Model {
    disk: Map,
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    holding: bool,
    poisoned: bool,
    /// Inner writes still allowed (`None`: unlimited).
    budget: Option<u64>,
    synced: u64,
    buffered: u64,
    failed: u64,
}

impl Model {
    fn held_bytes(&self) -> u64 {
        self.overlay
            .iter()
            .map(|(k, v)| (k.len() + v.as_ref().map_or(0, Vec::len)) as u64)
            .sum()
    }
    fn merged(&self) -> Map {
        let mut m = self.disk.clone();
        for (k, v) in &self.overlay {
            match v {
                Some(v) => m.insert(k.clone(), v.clone()),
                None => m.remove(k),
            };
        }
        m
    }
    /// One inner write: `true` if it succeeds (and is applied), `false` if it fails.
    fn inner_write(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)], synced: bool) -> bool {
        if let Some(b) = &mut self.budget {
            if *b == 0 {
                self.failed += 1;
                self.poisoned = true;
                return false;
            }
            *b -= 1;
        }
        for (k, v) in ops {
            match v {
                Some(v) => self.disk.insert(k.clone(), v.clone()),
                None => self.disk.remove(k),
            };
        }
        if synced {
            self.synced += 1;
        } else {
            self.buffered += 1;
        }
        true
    }
}

type Stack = HoldingDb<CountingDb<FailingDb<MemoryDb>>>;

fn entries(v: Vec<(Bytes, Bytes)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    v.into_iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

fn expect_range(map: &Map, range: &KeyRange, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
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

fn dir(reverse: bool) -> Direction {
    if reverse {
        Direction::Reverse
    } else {
        Direction::Forward
    }
}

/// Turns raw fuzzer bytes into an `Input` exactly as `libfuzzer_sys::fuzz_target!` does for
/// a typed target (too short for the size hint, or not decodable: skipped), then runs it.
pub fn run_bytes(data: &[u8]) {
    if data.len() < <Input as Arbitrary>::size_hint(0).0 {
        return;
    }
    if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) {
        run(&input);
    }
}

/// Runs `input` on the real stack and the model, comparing after every op.
pub fn run(input: &Input) {
    let budget = match input.fail_after {
        Some(n) => FailAfter::new(u64::from(n)),
        None => FailAfter::never(),
    };
    let db: Stack = HoldingDb::new(CountingDb::new(FailingDb::new(
        MemoryDb::new("fuzz"),
        budget,
    )));
    let mut m = Model {
        budget: input.fail_after.map(u64::from),
        ..Model::default()
    };
    for op in &input.ops {
        step(&db, &mut m, op);
        check(&db, &m, op);
    }
}

fn write_batch(db: &Stack, m: &mut Model, ops: Vec<(Vec<u8>, Option<Vec<u8>>)>, synced: bool) {
    let mut b = Batch::new();
    for (k, v) in &ops {
        match v {
            Some(v) => b.put(k.clone(), v.clone()),
            None => b.delete(k.clone()),
        };
    }
    let durability = if synced {
        Durability::Synced
    } else {
        Durability::Buffered
    };
    let r = db.write(&b, durability);
    if m.poisoned {
        assert!(r.is_err(), "a poisoned HoldingDb accepted a write");
        return;
    }
    if m.holding {
        r.expect("a held write cannot fail");
        for (k, v) in ops {
            m.overlay.insert(k, v);
        }
    } else {
        let ok = m.inner_write(&ops, synced);
        assert_eq!(r.is_ok(), ok, "write result differs from the model: {r:?}");
    }
}

fn step(db: &Stack, m: &mut Model, op: &HOp) {
    match op {
        HOp::Put(k, v) => write_batch(db, m, vec![(k.0.clone(), Some(v.0.clone()))], true),
        HOp::Delete(k) => write_batch(db, m, vec![(k.0.clone(), None)], false),
        HOp::Batch(ops, synced) => {
            let ops = ops
                .iter()
                .map(|(k, v)| (k.0.clone(), v.as_ref().map(|v| v.0.clone())))
                .collect();
            write_batch(db, m, ops, *synced);
        }
        HOp::Hold => {
            let r = db.hold();
            if m.poisoned {
                assert!(r.is_err());
            } else {
                r.unwrap();
                m.holding = true;
            }
        }
        HOp::StopHolding => {
            if !m.overlay.is_empty() {
                return;
            }
            let r = db.stop_holding();
            if m.poisoned {
                assert!(r.is_err());
            } else {
                r.unwrap();
                m.holding = false;
            }
        }
        HOp::WriteHeld => {
            let r = db.write_held();
            if m.poisoned {
                assert!(r.is_err());
                return;
            }
            if m.overlay.is_empty() {
                assert_eq!(r.unwrap(), HeldWrite::default(), "empty overlay wrote");
                return;
            }
            let want = HeldWrite {
                ops: m.overlay.len() as u64,
                bytes: m.held_bytes(),
            };
            let ops: Vec<_> = m
                .overlay
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if m.inner_write(&ops, true) {
                assert_eq!(r.unwrap(), want);
                m.overlay.clear();
            } else {
                // The overlay is kept (unreadable through the poison).
                assert!(r.is_err());
            }
        }
        HOp::Get(k) => {
            let r = db.get(&k.0);
            if m.poisoned {
                assert!(r.is_err());
            } else {
                let got = r.unwrap().map(|b| b.to_vec());
                assert_eq!(got, m.merged().get(&k.0).cloned(), "get {k:?}");
            }
        }
        HOp::GetDurable(k) => {
            let r = db.get_durable(&k.0);
            if m.poisoned {
                assert!(r.is_err());
            } else {
                let got = r.unwrap().map(|b| b.to_vec());
                assert_eq!(got, m.disk.get(&k.0).cloned(), "get_durable {k:?}");
            }
        }
        HOp::Range(lo, hi, rev) => {
            let range = KeyRange {
                start: lo.bound(),
                end: hi.bound(),
            };
            check_range(db, m, range, *rev, false);
        }
        HOp::RangeDurable(lo, hi, rev) => {
            let range = KeyRange {
                start: lo.bound(),
                end: hi.bound(),
            };
            check_range(db, m, range, *rev, true);
        }
        HOp::Prefix(k, rev) => check_range(db, m, KeyRange::prefix(&k.0), *rev, false),
    }
}

fn check_range(db: &Stack, m: &Model, range: KeyRange, reverse: bool, durable: bool) {
    let r = if durable {
        db.range_durable(range.clone(), dir(reverse))
            .and_then(|it| it.collect::<flushpoint::Result<Vec<_>>>())
    } else {
        collect_range(db, range.clone(), dir(reverse))
    };
    if m.poisoned {
        assert!(r.is_err());
        return;
    }
    let want = if durable {
        expect_range(&m.disk, &range, reverse)
    } else {
        expect_range(&m.merged(), &range, reverse)
    };
    assert_eq!(
        entries(r.unwrap()),
        want,
        "range {range:?} reverse={reverse}"
    );
}

fn check(db: &Stack, m: &Model, op: &HOp) {
    let disk: Map = db
        .inner()
        .inner()
        .inner()
        .snapshot()
        .into_iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    assert_eq!(disk, m.disk, "disk differs after {op:?}");
    assert_eq!(db.is_poisoned(), m.poisoned, "poison after {op:?}");
    assert_eq!(db.is_holding(), m.holding, "holding after {op:?}");
    assert_eq!(db.held_bytes(), m.held_bytes(), "held bytes after {op:?}");
    assert_eq!(db.held_keys(), m.overlay.len(), "held keys after {op:?}");
    let c = db.inner().counts();
    assert_eq!(
        (c.synced_batches, c.buffered_batches, c.failed_batches),
        (m.synced, m.buffered, m.failed),
        "inner write counts after {op:?}"
    );
}
