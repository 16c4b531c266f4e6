//! Runs read in key order: one run's ops in a range, block by block ([`RunIter`]); several
//! runs merged newest first, each key once with its newest op ([`MergedRuns`]); and
//! [`merge`], which writes such a merge into a new run.
//!
//! Invariant: a merge yields each key once, with the op of the newest input holding it, in
//! the iteration's key order; tombstones only when asked.
//! Invariant: an iterator ends after its first error: nothing it yields after a failed
//! block read could be trusted to be complete.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::ops::Bound;

use bytes::Bytes;

use super::format::RunOp;
use super::reader::Run;
use super::writer::{RunMeta, RunWriter};
use crate::db::{Direction, KeyRange};
use crate::error::{Error, Result};

/// A run's ops in a range, block by block (see [`Run::iter`]); `R` is how the run is held
/// (borrowed, or an `Arc` for an iterator that outlives the caller's borrow). After an
/// error it ends.
pub(crate) struct RunIter<R> {
    run: R,
    range: KeyRange,
    direction: Direction,
    /// The blocks not yet read: `next_block..end_block`.
    next_block: usize,
    end_block: usize,
    ops: std::vec::IntoIter<RunOp>,
    failed: bool,
}

impl<R: std::ops::Deref<Target = Run>> RunIter<R> {
    /// The ops of `run` in `range`, in `direction`'s key order.
    pub(crate) fn new(run: R, range: &KeyRange, direction: Direction) -> Self {
        let first = match &range.start {
            Bound::Unbounded => 0,
            Bound::Included(k) | Bound::Excluded(k) => run.block_for(k).unwrap_or(0),
        };
        let last = match &range.end {
            Bound::Unbounded => run.blocks.len(),
            Bound::Included(k) | Bound::Excluded(k) => run.block_for(k).map_or(0, |i| i + 1),
        };
        RunIter {
            run,
            range: range.clone(),
            direction,
            next_block: first,
            end_block: last.max(first),
            ops: Vec::new().into_iter(),
            failed: false,
        }
    }
}

impl<R: std::ops::Deref<Target = Run>> Iterator for RunIter<R> {
    type Item = Result<RunOp>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed {
                return None;
            }
            let op = match self.direction {
                Direction::Forward => self.ops.next(),
                Direction::Reverse => self.ops.next_back(),
            };
            if let Some(op) = op {
                if self.range.contains(&op.0) {
                    return Some(Ok(op));
                }
                continue;
            }
            if self.next_block >= self.end_block {
                return None;
            }
            let i = match self.direction {
                Direction::Forward => {
                    self.next_block += 1;
                    self.next_block - 1
                }
                Direction::Reverse => {
                    self.end_block -= 1;
                    self.end_block
                }
            };
            match self.run.block(i, &[]) {
                Ok(ops) => self.ops = ops.into_iter(),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// One input of a merge: its cursor, its age (0 the newest) and the merge's direction.
struct Head {
    op: RunOp,
    age: usize,
    reverse: bool,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    /// A max-heap pops the first key in the merge's direction first (the smallest forward,
    /// the largest in reverse), and of equal keys the newest input.
    fn cmp(&self, other: &Self) -> Ordering {
        let by_key = if self.reverse {
            self.op.0.cmp(&other.op.0)
        } else {
            other.op.0.cmp(&self.op.0)
        };
        by_key.then(other.age.cmp(&self.age))
    }
}

/// Several runs' ops merged, newest first: each key once, with its newest op, in the
/// iteration's order. Tombstones are yielded or left out (`keep_tombstones`). After an
/// error it ends.
pub(crate) struct MergedRuns<R> {
    iters: Vec<RunIter<R>>,
    heap: BinaryHeap<Head>,
    reverse: bool,
    keep_tombstones: bool,
    last: Option<Bytes>,
    /// An error from filling the heap, returned first.
    failed: Option<Error>,
    done: bool,
}

impl<R: std::ops::Deref<Target = Run>> MergedRuns<R> {
    /// Merges `iters` (newest first), all in `direction`.
    pub(crate) fn new(
        mut iters: Vec<RunIter<R>>,
        direction: Direction,
        keep_tombstones: bool,
    ) -> Self {
        let reverse = direction == Direction::Reverse;
        debug_assert!(
            iters.iter().all(|it| it.direction == direction),
            "invariant: a merge's inputs run in its direction"
        );
        let mut heap = BinaryHeap::with_capacity(iters.len());
        let mut failed = None;
        for (age, it) in iters.iter_mut().enumerate() {
            match it.next() {
                Some(Ok(op)) => heap.push(Head { op, age, reverse }),
                Some(Err(e)) => {
                    failed = Some(e);
                    break;
                }
                None => {}
            }
        }
        MergedRuns {
            iters,
            heap,
            reverse,
            keep_tombstones,
            last: None,
            failed,
            done: false,
        }
    }
}

impl MergedRuns<std::sync::Arc<Run>> {
    /// Merges the ops of `runs` (newest first) in `range`, all in `direction`; the
    /// iterator holds the runs (their files stay readable while it lives).
    pub(crate) fn over(
        runs: &[std::sync::Arc<Run>],
        range: &KeyRange,
        direction: Direction,
        keep_tombstones: bool,
    ) -> Self {
        let iters = runs
            .iter()
            .map(|r| RunIter::new(r.clone(), range, direction))
            .collect();
        MergedRuns::new(iters, direction, keep_tombstones)
    }
}

impl<R: std::ops::Deref<Target = Run>> Iterator for MergedRuns<R> {
    type Item = Result<RunOp>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Some(e) = self.failed.take() {
            self.done = true;
            return Some(Err(e));
        }
        while let Some(Head { op, age, .. }) = self.heap.pop() {
            match self.iters[age].next() {
                Some(Ok(next)) => self.heap.push(Head {
                    op: next,
                    age,
                    reverse: self.reverse,
                }),
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                None => {}
            }
            // The newest op of a key pops first; older ones of the same key are skipped.
            if self.last.as_ref() == Some(&op.0) {
                continue;
            }
            self.last = Some(op.0.clone());
            if op.1.is_some() || self.keep_tombstones {
                return Some(Ok(op));
            }
        }
        self.done = true;
        None
    }
}

/// Merges `runs` (newest first) into `out`: each key once, with its newest op. With
/// `drop_tombstones` (only for a merge whose output is the oldest run: nothing older can
/// hold a key a tombstone must hide) deletes are left out.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "the engine's merger drives `MergedRuns::over` into its own writer"
    )
)]
pub(crate) fn merge(runs: &[&Run], mut out: RunWriter, drop_tombstones: bool) -> Result<RunMeta> {
    let iters = runs
        .iter()
        .map(|r| r.iter(&KeyRange::all(), Direction::Forward))
        .collect();
    for op in MergedRuns::new(iters, Direction::Forward, !drop_tombstones) {
        let (k, v) = op?;
        out.push(&k, v.as_deref())?;
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use quickcheck::{QuickCheck, TestResult};

    use super::*;
    use crate::fs::SimFs;
    use crate::journal::run::test_support::{Spec, check_run, file, model, reopen, write};

    #[test]
    fn a_merge_keeps_each_keys_newest_op_and_drops_tombstones_only_when_asked() {
        fn prop(newer: Spec, older: Spec, oldest: Spec, drop: bool) -> TestResult {
            let fs = SimFs::new();
            let specs = [newer, older, oldest];
            let runs: Vec<Run> = specs
                .iter()
                .enumerate()
                .map(|(i, s)| write(&fs, &format!("{i}.run"), i as u64, &model(s)))
                .collect();
            // The oracle: the oldest run's ops, overwritten by each newer run's.
            let mut want = BTreeMap::new();
            for s in specs.iter().rev() {
                want.extend(model(s));
            }
            if drop {
                want.retain(|_, v| v.is_some());
            }
            let out = RunWriter::create(file(&fs, "m.run"), "ks", 9).unwrap();
            let refs: Vec<&Run> = runs.iter().collect();
            let meta = merge(&refs, out, drop).unwrap();
            let merged = Run::open(reopen(&fs, "m.run"), "ks", 9).unwrap();
            TestResult::from_bool(
                meta.ops == want.len() as u64
                    && check_run(&merged, &want, &KeyRange::all()).is_ok(),
            )
        }
        QuickCheck::new()
            .tests(200)
            .quickcheck(prop as fn(Spec, Spec, Spec, bool) -> TestResult);
    }

    #[test]
    fn the_merge_check_rejects_an_older_op_winning() {
        let fs = SimFs::new();
        let newer = model(&vec![(1, Some(1)), (2, None)]);
        let older = model(&vec![(1, Some(2)), (2, Some(2)), (3, Some(3))]);
        let a = write(&fs, "a.run", 1, &newer);
        let b = write(&fs, "b.run", 2, &older);
        // Inputs in the wrong order: the older run's ops win.
        let out = RunWriter::create(file(&fs, "m.run"), "ks", 3).unwrap();
        merge(&[&b, &a], out, false).unwrap();
        let merged = Run::open(reopen(&fs, "m.run"), "ks", 3).unwrap();
        let mut want = older.clone();
        want.extend(newer);
        assert!(check_run(&merged, &want, &KeyRange::all()).is_err());
    }
}
