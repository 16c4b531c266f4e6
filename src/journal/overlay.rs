//! The overlay: the units written but not yet applied to the index, read newest first.
//!
//! A unit's ops stay in the order the unit holds them: the order its layout, and so the
//! index's pointers into it, follow (ADR 0013). Beside each section the unit keeps its key
//! order, so a read is a binary search per unapplied unit, and applying a unit is dropping
//! it. Why not one map of every unapplied write: filling it took a third of the flush
//! thread's CPU and emptying it an eighth of the applier's at 30k light blocks (`perf`,
//! PERFORMANCE.md "The overlay as the units themselves"), and each entry cloned its key
//! and value handles.
//!
//! Invariant: within a section's key order, keys strictly increase, and of the unit's ops
//! on one key only the last is in it (a later op in a unit overrides an earlier one, as
//! when the unit is applied in order).

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

use bytes::Bytes;

use super::unit::{Sections, UnitOp};

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

/// What holds a unit's ops (the engine's queue entries).
pub(crate) trait HoldsOps {
    /// The unit's ops.
    fn ops(&self) -> &UnitOps;
}

/// One keyspace's view of the unapplied units, oldest first in `units`.
pub(crate) struct OverlayView<'a, P> {
    pub(crate) units: &'a VecDeque<P>,
    pub(crate) keyspace: &'a str,
}

impl<P: HoldsOps> OverlayView<'_, P> {
    /// The newest unapplied write to `key`: `Some(value or tombstone)`, or `None` when no
    /// unapplied unit writes it (the index must be asked).
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<Bytes>> {
        self.units.iter().rev().find_map(|u| {
            u.ops()
                .sections_of(self.keyspace)
                .rev()
                .find_map(|s| s.get(key))
                .cloned()
        })
    }

    /// The newest unapplied write to each key in `bounds`, in key order.
    pub(crate) fn range(
        &self,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
    ) -> Vec<(Bytes, Option<Bytes>)> {
        let mut runs = self
            .units
            .iter()
            .flat_map(|u| u.ops().sections_of(self.keyspace))
            .map(|s| s.range(bounds).peekable())
            .filter_map(|mut r| r.peek().is_some().then_some(r))
            .collect::<Vec<_>>();
        match runs.len() {
            0 => Vec::new(),
            // The usual case: one unit holds the keys asked for; already in key order.
            1 => runs.pop().expect("one run").cloned().collect(),
            _ => {
                // Oldest first, so a newer write to a key replaces an older one.
                let mut newest: BTreeMap<&Bytes, &Option<Bytes>> = BTreeMap::new();
                for (k, v) in runs.into_iter().flatten() {
                    newest.insert(k, v);
                }
                newest
                    .into_iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{Gen, QuickCheck, TestResult};
    use std::ops::RangeBounds;

    struct Unit(UnitOps);
    impl HoldsOps for Unit {
        fn ops(&self) -> &UnitOps {
            &self.0
        }
    }

    /// A unit of a test: its sections, each `(keyspace "a" or "b", ops)` with ops
    /// `(key, value; 0 = delete)`.
    type SpecUnit = Vec<(bool, Vec<(u8, u8)>)>;

    fn b(x: u8) -> Bytes {
        Bytes::copy_from_slice(&[x])
    }

    /// The units of `spec`, keys taken mod 16 so they repeat.
    fn units(spec: &[SpecUnit]) -> VecDeque<Unit> {
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
                Unit(UnitOps::new(Sections(sections)))
            })
            .collect()
    }

    /// The oracle: every op of every unit applied in order to a map (a tombstone kept as
    /// `None`), as the applier applies them.
    fn model(spec: &[SpecUnit], keyspace: bool) -> BTreeMap<Bytes, Option<Bytes>> {
        let mut m = BTreeMap::new();
        for sections in spec {
            for (ks, ops) in sections {
                if *ks == keyspace {
                    for (k, v) in ops {
                        m.insert(b(k % 16), (*v != 0).then(|| b(*v)));
                    }
                }
            }
        }
        m
    }

    type Get = fn(&OverlayView<'_, Unit>, &[u8]) -> Option<Option<Bytes>>;
    type Range =
        fn(&OverlayView<'_, Unit>, (Bound<&[u8]>, Bound<&[u8]>)) -> Vec<(Bytes, Option<Bytes>)>;

    /// Checks `get` and `range` over the units of `spec` against the model; `Err` names
    /// the first disagreement.
    fn check(spec: &[SpecUnit], lo: u8, hi: u8, get: Get, range: Range) -> Result<(), String> {
        let q = units(spec);
        let view = OverlayView {
            units: &q,
            keyspace: "a",
        };
        let m = model(spec, true);
        for k in 0..16u8 {
            if get(&view, &[k]) != m.get(&b(k)).cloned() {
                return Err(format!("get {k}"));
            }
        }
        let (lo, hi) = (b(lo % 17), b(hi % 17));
        for bounds in [
            (Bound::Included(&lo[..]), Bound::Excluded(&hi[..])),
            (Bound::Excluded(&lo[..]), Bound::Included(&hi[..])),
            (Bound::Unbounded, Bound::Included(&hi[..])),
            (Bound::Included(&lo[..]), Bound::Unbounded),
            (Bound::Unbounded, Bound::Unbounded),
        ] {
            let want: Vec<_> = m
                .iter()
                .filter(|(k, _)| RangeBounds::<[u8]>::contains(&bounds, k.as_ref()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if range(&view, bounds) != want {
                return Err(format!("range {bounds:?}"));
            }
        }
        Ok(())
    }

    fn real_get(view: &OverlayView<'_, Unit>, k: &[u8]) -> Option<Option<Bytes>> {
        view.get(k)
    }

    fn real_range(
        view: &OverlayView<'_, Unit>,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
    ) -> Vec<(Bytes, Option<Bytes>)> {
        view.range(bounds)
    }

    #[test]
    fn the_overlay_reads_as_the_units_applied_in_order() {
        fn prop(spec: Vec<SpecUnit>, lo: u8, hi: u8) -> TestResult {
            match check(&spec, lo, hi, real_get, real_range) {
                Ok(()) => TestResult::passed(),
                Err(e) => TestResult::error(e),
            }
        }
        // Size 12: up to 12 units of 12 sections of 12 ops over 16 keys, so keys repeat
        // within a section, across sections and across units.
        QuickCheck::new()
            .rng(Gen::new(12))
            .tests(2_000)
            .quickcheck(prop as fn(Vec<SpecUnit>, u8, u8) -> TestResult);
    }

    /// Negative controls: the same check rejects an overlay that answers from the oldest
    /// unit first, and one whose ranges let an older write win.
    #[test]
    fn the_check_rejects_an_overlay_that_lets_an_older_write_win() {
        // Two units write key 1 (5, then 6); a third section in the second unit deletes 2
        // after the first unit set it.
        let spec = vec![
            vec![(true, vec![(1, 5), (2, 7)])],
            vec![(true, vec![(1, 6)]), (true, vec![(2, 0)])],
        ];
        check(&spec, 0, 16, real_get, real_range).expect("the real overlay agrees");
        let oldest_first: Get = |view, k| {
            view.units.iter().find_map(|u| {
                u.ops()
                    .sections_of(view.keyspace)
                    .find_map(|s| s.get(k))
                    .cloned()
            })
        };
        assert_eq!(
            check(&spec, 0, 16, oldest_first, real_range),
            Err("get 1".to_string())
        );
        let older_wins: Range = |view, bounds| {
            let mut m = BTreeMap::new();
            for u in view.units.iter().rev() {
                for s in u.ops().sections_of(view.keyspace).rev() {
                    for (k, v) in s.range(bounds) {
                        m.insert(k.clone(), v.clone());
                    }
                }
            }
            m.into_iter().collect()
        };
        assert!(check(&spec, 0, 16, real_get, older_wins).is_err());
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
