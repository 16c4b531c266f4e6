//! [`Window`]: one window of held writes — its entries, their hash index, their key order
//! settled on demand, and the memory it takes.
//!
//! Invariant: a key is held at most once; the last write to it wins; a delete is held as
//! `None` (a tombstone).
//! Invariant: `held_bytes` is exactly the key and value bytes the entries hold.
//! Invariant: the settled order is a key-ordered permutation of a prefix of the positions;
//! positions after it are keys added since (a new key only appends).
//! Invariant: no lock but the one over its settled order, no I/O.

use std::hash::{BuildHasher, RandomState};
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hashbrown::{HashTable, hash_table};

use super::chunks::Chunks;
use crate::db::{Direction, EntryRef, KeyRange, Op, OverlayEntry};

/// One window of held writes.
///
/// Hashed, not ordered: a held write or point read is one hash probe, where an ordered map
/// walks a B-tree of up to [`crate::FLUSH_BYTES_MAX`] of keys (several cache misses and key
/// comparisons per write, on the block loop's thread). Each key is kept once, in `entries`;
/// the hash index and the key order hold positions in it (4 bytes each), so a held write
/// clones its key once, and a flush walks the entries in key order without a hash lookup
/// per key. Key order — for ranges and for writing the window in key order — is settled on
/// demand ([`Window::sorted_positions`]).
#[derive(Debug, Default)]
pub(super) struct Window {
    /// The held entries, a key at most once, in the order their keys were first written:
    /// `(key, Some(value))` a held put, `(key, None)` a held delete.
    entries: Vec<OverlayEntry>,
    /// Every position in `entries`, found by its key's hash.
    index: HashTable<u32>,
    /// std's randomly keyed SipHash: block content chooses app keys, so the index must not
    /// be open to keys crafted to collide.
    hasher: RandomState,
    /// Positions in key order as of the last range or flush. Invariant: a key-ordered
    /// permutation of `0..n` for some `n <= entries.len()`; positions `n..` are the keys
    /// added since (new keys only append). Shared: a flush writes from it, and a range reads
    /// it, without holding the lock or copying it.
    sorted: Mutex<Arc<Vec<u32>>>,
    /// Key and value bytes of `entries`.
    held_bytes: u64,
    /// The window's copies of its short keys and values.
    chunks: Chunks,
}

fn entry_bytes(k: &Bytes, v: &Option<Bytes>) -> u64 {
    (k.len() + v.as_ref().map_or(0, |v| v.len())) as u64
}

/// A key's first 16 bytes, big-endian, zero-padded: `key_prefix(a) < key_prefix(b)` implies
/// `a < b` (a shorter key pads with zeros, and is below any longer key it begins). Sorting
/// on it compares integers held in the sorted array instead of following each key's
/// pointer; only keys with equal prefixes are compared whole. Sixteen bytes cover the
/// block store's keys (kind, height, part index) and the app's hashed keys.
fn key_prefix(key: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = key.len().min(16);
    b[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(b)
}

/// The positions `from..entries.len()` in key order (their keys are distinct).
fn key_ordered(entries: &[OverlayEntry], from: usize) -> Vec<u32> {
    let mut keyed: Vec<(u128, u32)> = (from..entries.len())
        .map(|i| (key_prefix(&entries[i].0), position(i)))
        .collect();
    keyed.sort_unstable_by_key(|&(prefix, _)| prefix);
    let whole_key = |p: &(u128, u32)| &entries[p.1 as usize].0;
    let mut run = 0;
    while run < keyed.len() {
        let end = run + keyed[run..].partition_point(|p| p.0 == keyed[run].0);
        if end - run > 1 {
            keyed[run..end].sort_unstable_by(|a, b| whole_key(a).cmp(whole_key(b)));
        }
        run = end;
    }
    debug_assert!(
        keyed
            .windows(2)
            .all(|w| whole_key(&w[0]) < whole_key(&w[1])),
        "invariant: settled keys strictly increase"
    );
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// `i` as a position in a window.
fn position(i: usize) -> u32 {
    u32::try_from(i)
        .expect("invariant: a window holds under 2^32 keys (it is flushed at FLUSH_BYTES_MAX)")
}

impl Window {
    /// An empty window with room for `keys` keys (the previous window's count: a window
    /// grows to about the same size, so it is not rehashed on the block loop's thread).
    pub(super) fn with_capacity(keys: usize) -> Window {
        Window {
            entries: Vec::with_capacity(keys),
            index: HashTable::with_capacity(keys),
            hasher: RandomState::new(),
            sorted: Mutex::default(),
            held_bytes: 0,
            chunks: Chunks::default(),
        }
    }

    /// Key and value bytes held.
    pub(super) fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// The memory the window takes as the flush trigger counts it: key and value bytes,
    /// replaced values still in a chunk, and [`crate::holding::HELD_KEY_BYTES`] per key.
    pub(super) fn memory(&self) -> u64 {
        self.held_bytes
            + self.chunks.replaced_bytes
            + self.entries.len() as u64 * super::HELD_KEY_BYTES
    }

    /// Keys held.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The held write to `key`: `Some(Some(v))` a put, `Some(None)` a delete.
    pub(super) fn get(&self, key: &[u8]) -> Option<&Option<Bytes>> {
        let hash = self.hasher.hash_one(key);
        self.index
            .find(hash, |&i| self.entries[i as usize].0 == key)
            .map(|&i| &self.entries[i as usize].1)
    }

    pub(super) fn apply(&mut self, op: &Op) {
        let (k, v) = match op {
            Op::Put(k, v) => (k, Some(v)),
            Op::Delete(k) => (k, None),
        };
        self.put(k, v);
    }

    /// Holds `value` for `key` (`None`: a delete), replacing what the window held for it.
    /// Short keys and values are copied into the window's chunks.
    pub(super) fn put(&mut self, key: &Bytes, value: Option<&Bytes>) {
        let add = (key.len() + value.map_or(0, |v| v.len())) as u64;
        let hash = self.hasher.hash_one(&key[..]);
        let entries = &mut self.entries;
        let chunks = &mut self.chunks;
        let hasher = &self.hasher;
        let value = value.map(|v| chunks.keep(v));
        match self.index.entry(
            hash,
            |&i| entries[i as usize].0 == key,
            |&i| hasher.hash_one(&entries[i as usize].0[..]),
        ) {
            hash_table::Entry::Occupied(at) => {
                let held = &mut entries[*at.get() as usize];
                self.held_bytes -= entry_bytes(&held.0, &held.1);
                if let Some(old) = &held.1 {
                    chunks.replaced(old.len());
                }
                held.1 = value;
            }
            hash_table::Entry::Vacant(at) => {
                at.insert(position(entries.len()));
                entries.push((chunks.keep(key), value));
            }
        }
        self.held_bytes += add;
    }

    /// Holds every entry of `newer` over this window's (later writes win): a failed flush
    /// puts its window back under the writes that came after it.
    pub(super) fn put_all(&mut self, newer: Window) {
        for (k, v) in newer.entries {
            self.put(&k, v.as_ref());
        }
    }

    /// The positions in key order (settled now if keys came since the last time): sorts the
    /// new keys alone and merges them in (linear in the keys), so ranges between writes do
    /// not re-sort the window.
    pub(super) fn sorted_positions(&self) -> Arc<Vec<u32>> {
        let mut sorted = self.sorted.lock().expect("order lock");
        let from = sorted.len();
        if from < self.entries.len() {
            let added = key_ordered(&self.entries, from);
            let old = Arc::try_unwrap(std::mem::take(&mut *sorted))
                .unwrap_or_else(|shared| (*shared).clone());
            *sorted = Arc::new(if old.is_empty() {
                added
            } else {
                let mut merged = Vec::with_capacity(old.len() + added.len());
                let (mut a, mut b) = (old.into_iter().peekable(), added.into_iter().peekable());
                while let (Some(&x), Some(&y)) = (a.peek(), b.peek()) {
                    // No key is in both: the added positions hold only keys new to the window.
                    merged.push(
                        if self.key(x) < self.key(y) {
                            a.next()
                        } else {
                            b.next()
                        }
                        .expect("peeked"),
                    );
                }
                merged.extend(a);
                merged.extend(b);
                merged
            });
        }
        sorted.clone()
    }

    /// The key at position `i`.
    fn key(&self, i: u32) -> &[u8] {
        &self.entries[i as usize].0
    }

    /// The entry at position `i`.
    pub(super) fn entry(&self, i: u32) -> EntryRef<'_> {
        let (k, v) = &self.entries[i as usize];
        (k, v.as_ref())
    }

    /// The entries in `range`, in `direction` order (copies of the window's `Bytes`).
    pub(super) fn range(&self, range: &KeyRange, direction: Direction) -> Vec<OverlayEntry> {
        if self.is_empty() {
            return Vec::new();
        }
        let positions = self.sorted_positions();
        let (start, end) = range.as_ref_bounds();
        let lo = match start {
            Bound::Included(s) => positions.partition_point(|&i| self.key(i) < s),
            Bound::Excluded(s) => positions.partition_point(|&i| self.key(i) <= s),
            Bound::Unbounded => 0,
        };
        let hi = match end {
            Bound::Included(e) => positions.partition_point(|&i| self.key(i) <= e),
            Bound::Excluded(e) => positions.partition_point(|&i| self.key(i) < e),
            Bound::Unbounded => positions.len(),
        };
        let slice = &positions[lo..hi.max(lo)];
        let entry = |&i: &u32| self.entries[i as usize].clone();
        match direction {
            Direction::Forward => slice.iter().map(entry).collect(),
            Direction::Reverse => slice.iter().rev().map(entry).collect(),
        }
    }

    /// A copy of the window sharing its keys and values, with its memory as counted (the
    /// replaced values still in the original's chunks included).
    pub(super) fn duplicate(&self) -> Window {
        Window {
            entries: self.entries.clone(),
            index: self.index.clone(),
            hasher: self.hasher.clone(),
            sorted: Mutex::new(self.sorted.lock().expect("order lock").clone()),
            held_bytes: self.held_bytes,
            chunks: Chunks::counting_replaced(self.chunks.replaced_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window's key order is the bytes' order, for keys that tie on their first 16
    /// bytes, keys that begin others, zero bytes and empty keys: checked against a plain
    /// sort of the same keys, written independently of the prefix sort.
    #[test]
    fn settled_positions_follow_the_keys_byte_order() {
        fn check(raw: Vec<Vec<u8>>) -> bool {
            let mut o = Window::default();
            // Keys from a small alphabet that share long prefixes, some longer than 16 bytes.
            let keys: Vec<Bytes> = raw
                .into_iter()
                .map(|k| {
                    let mut key = vec![7u8; k.first().map_or(0, |n| usize::from(n % 24))];
                    key.extend(k.iter().map(|b| b % 3));
                    Bytes::from(key)
                })
                .collect();
            for (n, k) in keys.iter().enumerate() {
                o.put(k, (n % 2 == 0).then(|| Bytes::from_static(b"v")).as_ref());
                if n % 7 == 3 {
                    // A range between writes settles part of the window: the rest merges in.
                    o.sorted_positions();
                }
            }
            let mut want: Vec<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
            want.sort();
            want.dedup();
            let got: Vec<&[u8]> = o
                .sorted_positions()
                .iter()
                .map(|&i| o.entries[i as usize].0.as_ref())
                .collect();
            got == want
        }
        quickcheck::QuickCheck::new()
            .tests(500)
            .quickcheck(check as fn(Vec<Vec<u8>>) -> bool);
        // A fixed case: two keys that tie on their first 16 bytes, written in reverse order.
        let a = Bytes::from(vec![1u8; 17]);
        let mut b = vec![1u8; 17];
        b[16] = 2;
        let mut o = Window::default();
        o.put(&Bytes::from(b), None);
        o.put(&a, None);
        assert_eq!(
            *o.sorted_positions(),
            vec![1, 0],
            "the shorter-valued key sorts first"
        );
        assert_ne!(*o.sorted_positions(), vec![0, 1]);
    }
}
