//! [`MergeOver`]: a sorted overlay of writes merged over a sorted disk iterator — what a
//! read sees when writes not yet on disk (a held window, unapplied journal units) shadow it.
//!
//! Invariant: with both inputs strictly ordered in the merge's direction, the output is
//! strictly ordered in it (each key at most once).
//! Invariant: an overlay entry wins over the disk's pair with the same key; an overlay
//! delete hides that pair and is never returned.
//! Invariant: a disk error is returned as soon as the disk yields it, before any overlay
//! entry still ahead of it; the disk is read at most one pair ahead of the output.
//! Invariant: `resolve` sees only the disk pairs the merge returns, never one an overlay
//! entry shadows, nor an overlay entry.
//! Invariant: no I/O of its own, no lock: it only pulls the iterators it was given.

use std::cmp::Ordering;
use std::iter::Peekable;

use bytes::Bytes;

use super::{Direction, Entry};
use crate::error::Result;

/// One overlay entry: a key and `Some(value)` for a put, `None` for a delete.
pub(crate) type OverlayEntry = (Bytes, Option<Bytes>);

/// The identity `resolve`: a disk pair is returned as the disk yielded it.
pub(crate) type AsStored = fn(Entry) -> Result<Entry>;

/// The overlay's entries merged over the disk's pairs, both in `direction` order (see the
/// module's invariants). A merge over a merge stacks overlays: the outer one's entries win
/// over the inner one's, whose entries win over the disk's.
pub(crate) struct MergeOver<O: Iterator, D: Iterator, R = AsStored> {
    overlay: Peekable<O>,
    disk: Peekable<D>,
    direction: Direction,
    /// Turns a disk pair the merge returns into the pair as read (the identity for a disk
    /// that stores values as written).
    resolve: R,
}

impl<O, D> MergeOver<O, D>
where
    O: Iterator<Item = OverlayEntry>,
    D: Iterator<Item = Result<Entry>>,
{
    /// `overlay` over `disk`, both in `direction` order; disk pairs are returned as stored.
    pub(crate) fn new(overlay: O, disk: D, direction: Direction) -> Self {
        Self::resolving(overlay, disk, direction, Ok)
    }
}

impl<O, D, R> MergeOver<O, D, R>
where
    O: Iterator<Item = OverlayEntry>,
    D: Iterator<Item = Result<Entry>>,
    R: FnMut(Entry) -> Result<Entry>,
{
    /// `overlay` over `disk`, both in `direction` order; each disk pair the merge returns
    /// goes through `resolve` (a backend whose stored value points elsewhere follows the
    /// pointer only for pairs a read returns).
    pub(crate) fn resolving(overlay: O, disk: D, direction: Direction, resolve: R) -> Self {
        MergeOver {
            overlay: overlay.peekable(),
            disk: disk.peekable(),
            direction,
            resolve,
        }
    }
}

/// `overlay_key` against `disk_key` in `direction`: `Less` comes first.
fn order(direction: Direction, overlay_key: &[u8], disk_key: &[u8]) -> Ordering {
    let ord = overlay_key.cmp(disk_key);
    match direction {
        Direction::Forward => ord,
        Direction::Reverse => ord.reverse(),
    }
}

impl<O, D, R> Iterator for MergeOver<O, D, R>
where
    O: Iterator<Item = OverlayEntry>,
    D: Iterator<Item = Result<Entry>>,
    R: FnMut(Entry) -> Result<Entry>,
{
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let take_overlay = match (self.overlay.peek(), self.disk.peek()) {
                (None, None) => return None,
                (Some(_), None) => true,
                (None, Some(_)) | (_, Some(Err(_))) => false,
                (Some((overlay_key, _)), Some(Ok((disk_key, _)))) => {
                    match order(self.direction, overlay_key, disk_key) {
                        Ordering::Less => true,
                        Ordering::Equal => {
                            // The overlay's write is newer: it shadows the disk's pair.
                            self.disk.next();
                            true
                        }
                        Ordering::Greater => false,
                    }
                }
            };
            if take_overlay {
                match self.overlay.next().expect("peeked") {
                    (key, Some(value)) => return Some(Ok((key, value))),
                    (_, None) => continue,
                }
            }
            return self
                .disk
                .next()
                .map(|pair| pair.and_then(&mut self.resolve));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use quickcheck::{QuickCheck, TestResult};

    use super::*;
    use crate::error::Error;

    fn b(x: u8) -> Bytes {
        Bytes::copy_from_slice(&[x])
    }

    /// The overlay's entries in `direction` order: value 0 is a delete.
    fn overlay_of(overlay: &BTreeMap<u8, u8>, direction: Direction) -> Vec<OverlayEntry> {
        let entry = |(k, v): (&u8, &u8)| (b(*k), (*v != 0).then(|| b(*v)));
        match direction {
            Direction::Forward => overlay.iter().map(entry).collect(),
            Direction::Reverse => overlay.iter().rev().map(entry).collect(),
        }
    }

    /// The disk's pairs in `direction` order.
    fn disk_of(disk: &BTreeMap<u8, u8>, direction: Direction) -> Vec<Result<Entry>> {
        let pair = |(k, v): (&u8, &u8)| Ok((b(*k), b(*v)));
        match direction {
            Direction::Forward => disk.iter().map(pair).collect(),
            Direction::Reverse => disk.iter().rev().map(pair).collect(),
        }
    }

    /// The model: the disk with the overlay applied to it, in `direction` order.
    fn model(disk: &BTreeMap<u8, u8>, overlay: &BTreeMap<u8, u8>, dir: Direction) -> Vec<Entry> {
        let mut m = disk.clone();
        for (k, v) in overlay {
            match v {
                0 => m.remove(k),
                v => m.insert(*k, *v),
            };
        }
        let mut out: Vec<Entry> = m.into_iter().map(|(k, v)| (b(k), b(v))).collect();
        if dir == Direction::Reverse {
            out.reverse();
        }
        out
    }

    fn merged(disk: &BTreeMap<u8, u8>, overlay: &BTreeMap<u8, u8>, dir: Direction) -> Vec<Entry> {
        MergeOver::new(
            overlay_of(overlay, dir).into_iter(),
            disk_of(disk, dir).into_iter(),
            dir,
        )
        .collect::<Result<_>>()
        .expect("no disk error")
    }

    /// In both directions the merge reads as the disk with the overlay applied (puts win,
    /// deletes hide), against a `BTreeMap` model.
    #[test]
    fn the_merge_reads_as_the_disk_with_the_overlay_applied() {
        fn prop(disk: BTreeMap<u8, u8>, overlay: BTreeMap<u8, u8>) -> bool {
            [Direction::Forward, Direction::Reverse]
                .into_iter()
                .all(|dir| merged(&disk, &overlay, dir) == model(&disk, &overlay, dir))
        }
        QuickCheck::new()
            .tests(1000)
            .quickcheck(prop as fn(BTreeMap<u8, u8>, BTreeMap<u8, u8>) -> bool);
    }

    /// Two merges stacked read as the disk with the lower overlay applied, then the upper
    /// one: the upper overlay wins on equal keys, in both directions.
    #[test]
    fn a_merge_over_a_merge_applies_the_upper_overlay_last() {
        fn prop(disk: BTreeMap<u8, u8>, lower: BTreeMap<u8, u8>, upper: BTreeMap<u8, u8>) -> bool {
            [Direction::Forward, Direction::Reverse]
                .into_iter()
                .all(|dir| {
                    let inner = MergeOver::new(
                        overlay_of(&lower, dir).into_iter(),
                        disk_of(&disk, dir).into_iter(),
                        dir,
                    );
                    let got: Vec<Entry> =
                        MergeOver::new(overlay_of(&upper, dir).into_iter(), inner, dir)
                            .collect::<Result<_>>()
                            .expect("no disk error");
                    let mut want_disk = BTreeMap::new();
                    for (k, v) in model(&disk, &lower, Direction::Forward) {
                        want_disk.insert(k[0], v[0]);
                    }
                    got == model(&want_disk, &upper, dir)
                })
        }
        QuickCheck::new()
            .tests(500)
            .quickcheck(prop as fn(BTreeMap<u8, u8>, BTreeMap<u8, u8>, BTreeMap<u8, u8>) -> bool);
    }

    /// A disk error is returned, and what came before it is the start of the model's
    /// output, in order: nothing is skipped or repeated ahead of the error.
    #[test]
    fn a_disk_error_is_returned_after_a_prefix_of_the_merge() {
        fn prop(disk: BTreeMap<u8, u8>, overlay: BTreeMap<u8, u8>, at: u8) -> TestResult {
            for dir in [Direction::Forward, Direction::Reverse] {
                let mut pairs = disk_of(&disk, dir);
                let at = usize::from(at) % (pairs.len() + 1);
                pairs.insert(at, Err(Error::InvalidInput("planted".into())));
                let mut before = Vec::new();
                let mut errors = 0;
                for item in MergeOver::new(
                    overlay_of(&overlay, dir).into_iter(),
                    pairs.into_iter(),
                    dir,
                ) {
                    match item {
                        Ok(pair) => before.push(pair),
                        Err(_) => {
                            errors += 1;
                            break;
                        }
                    }
                }
                let want = model(&disk, &overlay, dir);
                if errors != 1 || !want.starts_with(&before) {
                    return TestResult::error(format!(
                        "{dir:?}: {errors} errors after {before:?}, model {want:?}"
                    ));
                }
            }
            TestResult::passed()
        }
        QuickCheck::new()
            .tests(500)
            .quickcheck(prop as fn(BTreeMap<u8, u8>, BTreeMap<u8, u8>, u8) -> TestResult);
    }

    /// `resolve` turns exactly the disk pairs returned: a shadowed or hidden disk pair and
    /// an overlay entry never reach it.
    #[test]
    fn resolve_sees_only_the_disk_pairs_returned() {
        let disk = BTreeMap::from([(1, 10), (2, 20), (3, 30), (4, 40)]);
        // 2 shadowed by a put, 3 hidden by a delete, 5 only in the overlay.
        let overlay = BTreeMap::from([(2, 21), (3, 0), (5, 50)]);
        for dir in [Direction::Forward, Direction::Reverse] {
            let mut resolved = Vec::new();
            let got: Vec<Entry> = MergeOver::resolving(
                overlay_of(&overlay, dir).into_iter(),
                disk_of(&disk, dir).into_iter(),
                dir,
                |(k, v): Entry| {
                    resolved.push(k[0]);
                    Ok((k, Bytes::from(vec![v[0] + 1])))
                },
            )
            .collect::<Result<_>>()
            .unwrap();
            let mut want = vec![(b(1), b(11)), (b(2), b(21)), (b(4), b(41)), (b(5), b(50))];
            let mut want_resolved = vec![1, 4];
            if dir == Direction::Reverse {
                want.reverse();
                want_resolved.reverse();
            }
            assert_eq!(got, want, "{dir:?}");
            assert_eq!(
                resolved, want_resolved,
                "{dir:?}: only the disk pairs returned"
            );
        }
    }
}
