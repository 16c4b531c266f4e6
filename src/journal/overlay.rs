//! The overlay: the writes of the units not yet applied to the index, read newest first.
//!
//! Two shapes, by a unit's size:
//! * **A large unit is kept whole** (a flush window: tens of MiB). Its ops stay in the order
//!   the unit holds them — the order its layout, and so the index's pointers into it, follow
//!   (ADR 0013) — and beside each section the unit keeps its key order, so a read is one
//!   binary search in it and applying it is dropping it. Filling and emptying a map with a
//!   window's keys took a third of the flush thread's CPU and an eighth of the applier's at
//!   30k light blocks (`perf`, PERFORMANCE.md "The overlay as the units themselves").
//! * **A small unit's writes go into one map per keyspace** (a consensus block: tens of
//!   ops), key → (seq, value): its keys are few, and a read must not search one unit per
//!   block (back to back, thousands of blocks' units wait for the applier).
//!
//! Invariant: a read returns the newest unapplied write to its key: the map's entry, unless
//! a whole unit with a higher seq writes the key. Within a section's key order, keys
//! strictly increase, and of the unit's ops on one key only the last is in it (a later op
//! in a unit overrides an earlier one, as when the unit is applied in order).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;

use super::unit::{Sections, UnitOp};
use crate::db::KeyRange;

/// A unit's ops, as the unit holds them, with each section's key order.
#[derive(Debug)]
pub(crate) struct UnitOps {
    pub(crate) sections: Sections,
    /// Per section: its ops' indices in key order, the last op per key only; `None` when
    /// the section is already strictly increasing (a flush window's is: the window is a
    /// sorted map).
    key_order: Vec<Option<Vec<u32>>>,
}

impl UnitOps {
    /// Takes a unit's sections, ordering each by key (O(n) when it already is).
    pub(crate) fn new(sections: Sections) -> Self {
        let key_order = sections.0.iter().map(|(_, ops)| key_order(ops)).collect();
        UnitOps {
            sections,
            key_order,
        }
    }

    /// Section `i` in key order.
    pub(crate) fn section(&self, i: usize) -> KeyOrdered<'_> {
        KeyOrdered {
            ops: &self.sections.0[i].1,
            order: self.key_order[i].as_deref(),
        }
    }

    /// The sections of `keyspace` in the unit's order (a later one is newer), each in key
    /// order.
    fn sections_of<'a>(
        &'a self,
        keyspace: &'a str,
    ) -> impl DoubleEndedIterator<Item = KeyOrdered<'a>> + 'a {
        (0..self.sections.0.len())
            .filter(move |i| self.sections.0[*i].0 == keyspace)
            .map(|i| self.section(i))
    }

    /// True when the unit writes to `keyspace`.
    pub(crate) fn writes(&self, keyspace: &str) -> bool {
        self.sections.0.iter().any(|(name, _)| name == keyspace)
    }
}

/// The indices of `ops` in key order, keeping the last op per key; `None` when `ops` are
/// already strictly increasing.
fn key_order(ops: &[UnitOp]) -> Option<Vec<u32>> {
    if ops.windows(2).all(|w| w[0].0 < w[1].0) {
        return None;
    }
    let n = u32::try_from(ops.len())
        .expect("invariant: a unit's body is under 4 GiB, so it has under 2^32 ops");
    let mut order: Vec<u32> = (0..n).collect();
    // Stable: of equal keys the unit's later op sorts later, and is the one kept.
    order.sort_by(|a, b| ops[*a as usize].0.cmp(&ops[*b as usize].0));
    let key = |i: u32| &ops[i as usize].0;
    let kept = order
        .iter()
        .enumerate()
        .filter(|(n, i)| order.get(n + 1).is_none_or(|next| key(*next) != key(**i)))
        .map(|(_, i)| *i)
        .collect();
    Some(kept)
}

/// One section's ops in key order: strictly increasing keys, the last op per key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyOrdered<'a> {
    ops: &'a [UnitOp],
    order: Option<&'a [u32]>,
}

impl<'a> KeyOrdered<'a> {
    /// The number of distinct keys.
    pub(crate) fn len(&self) -> usize {
        self.order.map_or(self.ops.len(), <[u32]>::len)
    }

    /// The `i`th op in key order, with its index in the unit's order.
    fn nth(&self, i: usize) -> (usize, &'a UnitOp) {
        let at = self.order.map_or(i, |o| o[i] as usize);
        (at, &self.ops[at])
    }

    /// The ops in key order, each with its index in the unit's order.
    pub(crate) fn iter(self) -> impl Iterator<Item = (usize, &'a UnitOp)> {
        (0..self.len()).map(move |i| self.nth(i))
    }

    /// The first position whose key is not `below` (keys are ordered, so `below` holds for
    /// a prefix).
    fn partition(&self, below: impl Fn(&[u8]) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if below(&self.nth(mid).1.0) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// This section's write to `key`: a value or a tombstone; `None` when it has none.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&'a Option<Bytes>> {
        let i = self.partition(|k| k < key);
        (i < self.len())
            .then(|| self.nth(i).1)
            .filter(|(k, _)| k.as_ref() == key)
            .map(|(_, v)| v)
    }

    /// The ops whose keys lie in `bounds`, in key order.
    pub(crate) fn range(
        self,
        (start, end): (Bound<&[u8]>, Bound<&[u8]>),
    ) -> impl Iterator<Item = &'a UnitOp> {
        let lo = self.partition(|k| match start {
            Bound::Included(s) => k < s,
            Bound::Excluded(s) => k <= s,
            Bound::Unbounded => false,
        });
        let hi = self.partition(|k| match end {
            Bound::Included(e) => k <= e,
            Bound::Excluded(e) => k < e,
            Bound::Unbounded => true,
        });
        (lo..hi.max(lo)).map(move |i| self.nth(i).1)
    }
}

/// Sections of one keyspace, oldest first, merged into one key order: strictly increasing
/// keys, each with the op of the newest section that writes it — the end state of applying
/// the sections in order. The applier inserts a step's units through it, so the index's
/// leaves are swept once per step however many units it applies (unit by unit, each unit
/// swept the leaves of a random-key table again, and a cache smaller than the table read
/// and wrote them again: `perf`, PERFORMANCE.md "One sweep per apply step").
pub(crate) struct NewestPerKey<'a> {
    sections: Vec<KeyOrdered<'a>>,
    /// Per section holding ops not yet given: (its next key, the section, the position).
    next: BinaryHeap<Reverse<(&'a [u8], usize, usize)>>,
    /// When a single section holds ops: it and its next position. Its keys are already
    /// strictly increasing, one op each, so it is walked in order, with no heap and no key
    /// compared. Why: an apply step is most often one flush window's unit, and the heap's
    /// key comparisons took about a seventh of the applier's time (`perf`, PERFORMANCE.md
    /// "Heavy saves' copies").
    single: Option<(usize, usize)>,
}

impl<'a> NewestPerKey<'a> {
    /// Merges `sections`, oldest first.
    pub(crate) fn new(sections: Vec<KeyOrdered<'a>>) -> Self {
        let mut holding = sections.iter().enumerate().filter(|(_, s)| s.len() > 0);
        if let (Some((only, _)), None) = (holding.next(), holding.next()) {
            return NewestPerKey {
                sections,
                next: BinaryHeap::new(),
                single: Some((only, 0)),
            };
        }
        let next = sections
            .iter()
            .enumerate()
            .filter(|(_, s)| s.len() > 0)
            .map(|(i, s)| Reverse((&s.nth(0).1.0[..], i, 0)))
            .collect();
        NewestPerKey {
            sections,
            next,
            single: None,
        }
    }

    /// Moves section `i` past position `at`.
    fn advance(&mut self, i: usize, at: usize) {
        let s = self.sections[i];
        if at + 1 < s.len() {
            self.next.push(Reverse((&s.nth(at + 1).1.0[..], i, at + 1)));
        }
    }
}

impl<'a> NewestPerKey<'a> {
    /// The next key's newest op, with where it comes from: the section (its index in the
    /// order given to [`NewestPerKey::new`]) and the op's index in that section's unit order
    /// (what a unit's layout follows, to place the op's value in its unit).
    pub(crate) fn next_placed(&mut self) -> Option<(usize, usize, &'a UnitOp)> {
        if let Some((only, at)) = self.single.as_mut() {
            let s = self.sections[*only];
            if *at == s.len() {
                return None;
            }
            let (in_unit, op) = s.nth(*at);
            *at += 1;
            return Some((*only, in_unit, op));
        }
        let Reverse((key, mut newest, mut at)) = self.next.pop()?;
        self.advance(newest, at);
        // Every other section writing `key` is older or newer: the newest one's op wins.
        while let Some(&Reverse((k, i, pos))) = self.next.peek() {
            if k != key {
                break;
            }
            self.next.pop();
            // The heap orders a key's entries by section, and a section gives a key once: each
            // later entry on `key` is from a newer section than the one kept so far.
            debug_assert!(i > newest, "invariant: a key's sections pop oldest first");
            (newest, at) = (i, pos);
            self.advance(i, pos);
        }
        let (in_unit, op) = self.sections[newest].nth(at);
        debug_assert_eq!(&op.0[..], key, "invariant: the op given is the key's");
        Some((newest, in_unit, op))
    }
}

impl<'a> Iterator for NewestPerKey<'a> {
    type Item = &'a UnitOp;

    fn next(&mut self) -> Option<&'a UnitOp> {
        self.next_placed().map(|(_, _, op)| op)
    }
}

/// Whole units at most, under an overlay budget (see [`Overlay::new`]). Why 64: a read
/// searches each unit kept whole, and the overlay holds at most its budget plus one unit,
/// so a read makes at most ~65 binary searches; with the default 256 MiB budget a unit is
/// kept whole from 4 MiB, far below a flush window and far above a consensus block.
pub(crate) const WHOLE_UNITS_MAX: u64 = 64;

/// The unapplied units' writes.
#[derive(Debug)]
pub(crate) struct Overlay {
    /// A unit of at least this many bytes (keys and values) is kept whole.
    whole_from_bytes: u64,
    /// Per keyspace: key → (seq of the small unit that wrote it last, value or tombstone).
    map: HashMap<String, BTreeMap<Bytes, (u64, Option<Bytes>)>>,
    /// The units kept whole, oldest first, with their seqs.
    whole: VecDeque<(u64, Arc<UnitOps>)>,
}

impl Overlay {
    /// An empty overlay for a budget of `budget_bytes` (`JournalOptions::overlay_bytes_max`):
    /// a unit of at least `budget_bytes / WHOLE_UNITS_MAX` bytes is kept whole.
    pub(crate) fn new(budget_bytes: u64) -> Self {
        Overlay {
            whole_from_bytes: budget_bytes / WHOLE_UNITS_MAX,
            map: HashMap::new(),
            whole: VecDeque::new(),
        }
    }

    fn keeps_whole(&self, bytes: u64) -> bool {
        bytes >= self.whole_from_bytes
    }

    /// Adds unit `seq` of `bytes` (its `Sections::byte_size`), newer than every unit in.
    pub(crate) fn push(&mut self, seq: u64, bytes: u64, ops: &Arc<UnitOps>) {
        if self.keeps_whole(bytes) {
            self.whole.push_back((seq, ops.clone()));
            return;
        }
        for (name, section) in &ops.sections.0 {
            let map = self.map.entry(name.clone()).or_default();
            for (k, v) in section {
                map.insert(k.clone(), (seq, v.clone()));
            }
        }
    }

    /// Takes unit `seq` (the oldest in) out, once its index commit returned.
    pub(crate) fn remove(&mut self, seq: u64, bytes: u64, ops: &UnitOps) {
        if self.keeps_whole(bytes) {
            let (oldest, _) = self
                .whole
                .pop_front()
                .expect("invariant: a unit kept whole is in until applied");
            assert_eq!(
                oldest, seq,
                "invariant: units leave the overlay in seq order"
            );
            return;
        }
        for (name, section) in &ops.sections.0 {
            let map = self.map.get_mut(name).expect("keyspace in the overlay");
            for (k, _) in section {
                // A later unit's write to the same key stays: it is not in the index yet.
                if map.get(k).is_some_and(|(s, _)| *s <= seq) {
                    map.remove(k);
                }
            }
        }
    }

    /// The newest unapplied write to `key` in `keyspace`: `Some(value or tombstone)`, or
    /// `None` when no unapplied unit writes it (the index must be asked).
    pub(crate) fn get(&self, keyspace: &str, key: &[u8]) -> Option<Option<Bytes>> {
        let small = self.map.get(keyspace).and_then(|m| m.get(key));
        let floor = small.map_or(0, |(seq, _)| *seq);
        for (seq, ops) in self.whole.iter().rev() {
            if *seq < floor {
                break;
            }
            if let Some(v) = ops.sections_of(keyspace).rev().find_map(|s| s.get(key)) {
                return Some(v.clone());
            }
        }
        small.map(|(_, v)| v.clone())
    }

    /// The newest unapplied write to each key of `keyspace` in `range`, in key order.
    pub(crate) fn range(&self, keyspace: &str, range: &KeyRange) -> Vec<(Bytes, Option<Bytes>)> {
        if range.is_empty() {
            // (`BTreeMap::range` panics on inverted bounds.)
            return Vec::new();
        }
        let bounds = range.as_ref_bounds();
        let mut newest: BTreeMap<&Bytes, (u64, &Option<Bytes>)> = self
            .map
            .get(keyspace)
            .map(|m| {
                m.range::<[u8], _>(bounds)
                    .map(|(k, (seq, v))| (k, (*seq, v)))
                    .collect()
            })
            .unwrap_or_default();
        // Oldest first, and a later section of one unit after an earlier: `>=` lets the
        // newer write win (a small unit and a whole one never share a seq).
        for (seq, ops) in &self.whole {
            for section in ops.sections_of(keyspace) {
                for (k, v) in section.range(bounds) {
                    let e = newest.entry(k).or_insert((*seq, v));
                    if *seq >= e.0 {
                        *e = (*seq, v);
                    }
                }
            }
        }
        newest
            .into_iter()
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{Gen, QuickCheck, TestResult};

    /// A unit of a test: its sections, each `(keyspace "a" when true, else "b", ops)` with
    /// ops `(key, value; 0 = delete)`.
    type SpecUnit = Vec<(bool, Vec<(u8, u8)>)>;

    fn b(x: u8) -> Bytes {
        Bytes::copy_from_slice(&[x])
    }

    /// The units of `spec`, keys taken mod 16 so they repeat.
    fn units(spec: &[SpecUnit]) -> Vec<Arc<UnitOps>> {
        spec.iter()
            .map(|sections| {
                let sections = sections
                    .iter()
                    .map(|(ks, ops)| {
                        let ops = ops
                            .iter()
                            .map(|(k, v)| (b(k % 16), (*v != 0).then(|| b(*v))))
                            .collect();
                        (if *ks { "a" } else { "b" }.to_string(), ops)
                    })
                    .collect();
                Arc::new(UnitOps::new(Sections(sections)))
            })
            .collect()
    }

    /// The overlay after every unit of `spec` went in and the first `applied` came out; a
    /// unit of at least `whole_from` bytes is kept whole.
    fn overlay(spec: &[SpecUnit], applied: usize, whole_from: u64) -> Overlay {
        let us = units(spec);
        let mut o = Overlay::new(whole_from * WHOLE_UNITS_MAX);
        for (seq, u) in us.iter().enumerate() {
            o.push(seq as u64 + 1, u.sections.byte_size(), u);
        }
        for (seq, u) in us.iter().enumerate().take(applied) {
            o.remove(seq as u64 + 1, u.sections.byte_size(), u);
        }
        o
    }

    /// The oracle, from the rule alone: the unapplied units' ops applied in order to a map
    /// (a tombstone kept as `None`).
    fn model(spec: &[SpecUnit], applied: usize) -> BTreeMap<Bytes, Option<Bytes>> {
        let mut m = BTreeMap::new();
        for sections in &spec[applied..] {
            for (ks, ops) in sections {
                if *ks {
                    for (k, v) in ops {
                        m.insert(b(k % 16), (*v != 0).then(|| b(*v)));
                    }
                }
            }
        }
        m
    }

    type Get = fn(&Overlay, &[u8]) -> Option<Option<Bytes>>;
    type Range = fn(&Overlay, &KeyRange) -> Vec<(Bytes, Option<Bytes>)>;

    /// Checks `get` and `range` on keyspace "a" against the model; `Err` names the first
    /// disagreement.
    fn check(
        spec: &[SpecUnit],
        applied: usize,
        whole_from: u64,
        (lo, hi): (u8, u8),
        get: Get,
        range: Range,
    ) -> Result<(), String> {
        let o = overlay(spec, applied, whole_from);
        let m = model(spec, applied);
        for k in 0..16u8 {
            if get(&o, &[k]) != m.get(&b(k)).cloned() {
                return Err(format!("get {k}"));
            }
        }
        let (lo, hi) = (b(lo % 17), b(hi % 17));
        for (start, end) in [
            (Bound::Included(lo.clone()), Bound::Excluded(hi.clone())),
            (Bound::Excluded(lo.clone()), Bound::Included(hi.clone())),
            (Bound::Unbounded, Bound::Included(hi.clone())),
            (Bound::Included(lo.clone()), Bound::Unbounded),
            (Bound::Unbounded, Bound::Unbounded),
        ] {
            let r = KeyRange { start, end };
            let want: Vec<_> = m
                .iter()
                .filter(|(k, _)| r.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if range(&o, &r) != want {
                return Err(format!("range {r:?}"));
            }
        }
        Ok(())
    }

    fn real_get(o: &Overlay, k: &[u8]) -> Option<Option<Bytes>> {
        o.get("a", k)
    }

    fn real_range(o: &Overlay, r: &KeyRange) -> Vec<(Bytes, Option<Bytes>)> {
        o.range("a", r)
    }

    #[test]
    fn the_overlay_reads_as_the_unapplied_units_applied_in_order() {
        fn prop(spec: Vec<SpecUnit>, applied: u8, whole: u8, bounds: (u8, u8)) -> TestResult {
            let applied = usize::from(applied) % (spec.len() + 1);
            // Every unit kept whole, none, or some (a unit's bytes are 1 per key and value).
            let whole_from = [0, 6, 12, 24, u64::MAX / WHOLE_UNITS_MAX][usize::from(whole) % 5];
            match check(&spec, applied, whole_from, bounds, real_get, real_range) {
                Ok(()) => TestResult::passed(),
                Err(e) => TestResult::error(e),
            }
        }
        // Size 12: up to 12 units of 12 sections of 12 ops over 16 keys, so keys repeat
        // within a section, across sections and across units.
        QuickCheck::new()
            .rng(Gen::new(12))
            .tests(3_000)
            .quickcheck(prop as fn(Vec<SpecUnit>, u8, u8, (u8, u8)) -> TestResult);
    }

    /// Negative controls: the same check rejects an overlay that lets the small units' map
    /// win over a newer whole unit, and one whose ranges let an older write win.
    #[test]
    fn the_check_rejects_an_overlay_that_lets_an_older_write_win() {
        // Unit 1 (small: 4 bytes) sets key 1 to 5 and key 2 to 7; unit 2 (whole: 7 bytes)
        // sets key 1 to 6, and a later section of it deletes key 2.
        let spec = vec![
            vec![(true, vec![(1, 5), (2, 7)])],
            vec![(true, vec![(1, 6), (3, 3), (4, 4)]), (true, vec![(2, 0)])],
        ];
        let whole_from = 6;
        let o = overlay(&spec, 0, whole_from);
        assert_eq!(o.whole.len(), 1, "the second unit is kept whole");
        assert_eq!(
            o.map["a"].len(),
            2,
            "the first unit's writes are in the map"
        );
        check(&spec, 0, whole_from, (0, 16), real_get, real_range).expect("the real overlay");
        let map_first: Get = |o, k| match o.map.get("a").and_then(|m| m.get(k)) {
            Some((_, v)) => Some(v.clone()),
            None => o.get("a", k),
        };
        assert_eq!(
            check(&spec, 0, whole_from, (0, 16), map_first, real_range),
            Err("get 1".to_string())
        );
        let older_wins: Range = |o, r| {
            let bounds = r.as_ref_bounds();
            let mut m = BTreeMap::new();
            for (_, ops) in o.whole.iter().rev() {
                for s in ops.sections_of("a").rev() {
                    for (k, v) in s.range(bounds) {
                        m.insert(k.clone(), v.clone());
                    }
                }
            }
            for (k, (_, v)) in o.map["a"].range::<[u8], _>(bounds) {
                m.insert(k.clone(), v.clone());
            }
            m.into_iter().collect()
        };
        assert!(check(&spec, 0, whole_from, (0, 16), real_get, older_wins).is_err());
    }

    /// `spec`'s sections as units of one section each in keyspace "a", oldest first.
    fn one_section_each(spec: &[Vec<(u8, u8)>]) -> Vec<SpecUnit> {
        spec.iter().map(|ops| vec![(true, ops.clone())]).collect()
    }

    /// `Err` names the first difference between `merged` and the sections applied in order
    /// (the oracle is the overlay's: [`model`], from the rule alone).
    fn check_merge(
        spec: &[Vec<(u8, u8)>],
        merged: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<(), String> {
        let want: Vec<_> = model(&one_section_each(spec), 0).into_iter().collect();
        if merged == want {
            Ok(())
        } else {
            Err(format!("merged {merged:?}, applied in order {want:?}"))
        }
    }

    fn real_merge(units: &[Arc<UnitOps>]) -> Vec<(Bytes, Option<Bytes>)> {
        NewestPerKey::new(units.iter().map(|u| u.section(0)).collect())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    #[test]
    fn merged_sections_read_as_the_sections_applied_in_order() {
        fn prop(spec: Vec<Vec<(u8, u8)>>) -> TestResult {
            let units = units(&one_section_each(&spec));
            match check_merge(&spec, real_merge(&units)) {
                Ok(()) => TestResult::passed(),
                Err(e) => TestResult::error(e),
            }
        }
        // Size 24: up to 24 sections of 24 ops over 16 keys, so keys repeat within a
        // section and across sections, and some sections are empty.
        QuickCheck::new()
            .rng(Gen::new(24))
            .tests(3_000)
            .quickcheck(prop as fn(Vec<Vec<(u8, u8)>>) -> TestResult);
    }

    /// Negative control: the same check rejects a merge that lets the oldest section win,
    /// and one that gives a key twice.
    #[test]
    fn the_merge_check_rejects_an_older_write_and_a_repeated_key() {
        let spec = vec![vec![(1, 5), (2, 7)], vec![(1, 6), (3, 0)], vec![(2, 0)]];
        let units = units(&one_section_each(&spec));
        check_merge(&spec, real_merge(&units)).expect("the real merge");
        let oldest_wins: Vec<_> = {
            let mut m = BTreeMap::new();
            for ops in spec.iter().rev() {
                for (k, v) in ops {
                    m.insert(b(*k), (*v != 0).then(|| b(*v)));
                }
            }
            m.into_iter().collect()
        };
        assert!(check_merge(&spec, oldest_wins).is_err());
        let repeated: Vec<_> = units
            .iter()
            .flat_map(|u| u.section(0).iter())
            .map(|(_, (k, v))| (k.clone(), v.clone()))
            .collect();
        assert!(check_merge(&spec, repeated).is_err());
    }

    #[test]
    fn a_unit_with_one_key_twice_keeps_the_later_op_in_key_order() {
        let ops = vec![(b(3), Some(b(1))), (b(1), None), (b(3), Some(b(2)))];
        let u = UnitOps::new(Sections(vec![("a".into(), ops)]));
        let got: Vec<_> = u.section(0).iter().map(|(at, _)| at).collect();
        assert_eq!(got, vec![1, 2]);
        let sorted = UnitOps::new(Sections(vec![(
            "a".into(),
            vec![(b(1), None), (b(2), None)],
        )]));
        assert!(
            sorted.key_order[0].is_none(),
            "a sorted section needs no order"
        );
    }
}
