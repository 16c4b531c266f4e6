//! Holding: an in-memory overlay of held writes over any [`Db`], written at flush points.
//!
//! Invariant: not holding, every call passes through with the caller's durability.
//! Invariant: holding, writes land in the overlay only (last write per key wins, deletes are
//! tombstones); `held_bytes` is exactly the key and value bytes the overlay holds.
//! Invariant: reads (`get`, `range` in both directions) see the overlay merged over the disk;
//! `get_durable` / `range_durable` see the disk only.
//! Invariant: `write_held` writes the whole overlay as one `Synced` batch and drops it only
//! after that returned `Ok`; on `Err` the database is poisoned — every later call fails
//! until a restart, whose handshake is the way back.
//! Invariant: this module decides nothing about *when* to flush (that is `deferred`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, RwLock};

use bytes::Bytes;

use crate::db::{Batch, Db, DbIter, Direction, Durability, Entry, KeyRange, Op};
use crate::error::Result;
use crate::store::Poison;

/// What a `write_held` call wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HeldWrite {
    /// Ops in the synced batch (0: nothing was held, nothing was written).
    pub ops: u64,
    /// Key and value bytes in it.
    pub bytes: u64,
}

#[derive(Debug, Default)]
struct Overlay {
    holding: bool,
    /// key → Some(value) for a held put, None for a held delete. Ordered, for ranges.
    map: BTreeMap<Bytes, Option<Bytes>>,
    /// The same entries hashed, for point reads (a B-tree walk over 64 MiB of keys costs
    /// several cache misses; a hash probe about one). Invariant: same content as `map`.
    index: HashMap<Bytes, Option<Bytes>>,
    held_bytes: u64,
}

fn entry_bytes(k: &Bytes, v: &Option<Bytes>) -> u64 {
    (k.len() + v.as_ref().map_or(0, |v| v.len())) as u64
}

impl Overlay {
    fn apply(&mut self, op: &Op) {
        let (k, v) = match op {
            Op::Put(k, v) => (k.clone(), Some(v.clone())),
            Op::Delete(k) => (k.clone(), None),
        };
        let add = entry_bytes(&k, &v);
        self.index.insert(k.clone(), v.clone());
        if let Some(old) = self.map.insert(k.clone(), v) {
            self.held_bytes -= entry_bytes(&k, &old);
        }
        self.held_bytes += add;
    }
}

/// A database whose writes can be held in memory and written at flush points.
#[derive(Debug)]
pub struct HoldingDb<D> {
    inner: D,
    overlay: RwLock<Overlay>,
    /// Serializes writers, so no write lands between `write_held`'s batch and its clearing.
    write_lock: Mutex<()>,
    poison: Poison,
}

impl<D: Db> HoldingDb<D> {
    /// Wraps `inner`, not holding.
    pub fn new(inner: D) -> Self {
        HoldingDb {
            inner,
            overlay: RwLock::default(),
            write_lock: Mutex::new(()),
            poison: Poison::default(),
        }
    }

    /// The database written at flush points.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Starts holding writes.
    pub fn hold(&self) -> Result<()> {
        self.poison.check(self.inner.name())?;
        self.overlay.write().expect("overlay lock").holding = true;
        Ok(())
    }

    /// Stops holding; the overlay must be empty (take a flush point first).
    pub fn stop_holding(&self) -> Result<()> {
        self.poison.check(self.inner.name())?;
        let mut o = self.overlay.write().expect("overlay lock");
        assert!(
            o.map.is_empty(),
            "invariant: holding stops only with an empty overlay ({} keys held in {})",
            o.map.len(),
            self.inner.name()
        );
        o.holding = false;
        Ok(())
    }

    /// True while writes are held.
    pub fn is_holding(&self) -> bool {
        self.overlay.read().expect("overlay lock").holding
    }

    /// Exact key and value bytes held.
    pub fn held_bytes(&self) -> u64 {
        self.overlay.read().expect("overlay lock").held_bytes
    }

    /// Keys held.
    pub fn held_keys(&self) -> usize {
        self.overlay.read().expect("overlay lock").map.len()
    }

    /// True once a write failed.
    pub fn is_poisoned(&self) -> bool {
        self.poison.is_set()
    }

    /// Writes the overlay as one `Synced` batch, then drops it.
    ///
    /// `Ok`: every held write is durable and the overlay is empty. With nothing held, nothing
    /// is written (no fsync). `Err`: the batch may or may not be durable; the database is
    /// poisoned and the overlay is kept (but unreadable through the poison).
    pub fn write_held(&self) -> Result<HeldWrite> {
        let _w = self.write_lock.lock().expect("write lock");
        self.poison.check(self.inner.name())?;
        let batch = {
            let o = self.overlay.read().expect("overlay lock");
            let mut b = Batch::new();
            for (k, v) in &o.map {
                match v {
                    Some(v) => b.push(Op::Put(k.clone(), v.clone())),
                    None => b.push(Op::Delete(k.clone())),
                };
            }
            b
        };
        if batch.is_empty() {
            return Ok(HeldWrite::default());
        }
        if let Err(e) = self.inner.write(&batch, Durability::Synced) {
            self.poison.set(&e);
            return Err(e);
        }
        // Drop the overlay only now that the batch is durable: before this line a crash or
        // error must still find every held write in memory or on disk.
        let mut o = self.overlay.write().expect("overlay lock");
        o.map.clear();
        o.index.clear();
        o.held_bytes = 0;
        Ok(HeldWrite {
            ops: batch.len() as u64,
            bytes: batch.byte_size(),
        })
    }

    /// Reads `key` from the disk only, ignoring held writes.
    pub fn get_durable(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.poison.check(self.inner.name())?;
        self.inner.get(key)
    }

    /// Iterates the disk only, ignoring held writes.
    pub fn range_durable(&self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>> {
        self.poison.check(self.inner.name())?;
        self.inner.range(range, direction)
    }
}

impl<D: Db> Db for HoldingDb<D> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.poison.check(self.inner.name())?;
        {
            let o = self.overlay.read().expect("overlay lock");
            if let Some(v) = o.index.get(key) {
                return Ok(v.clone());
            }
        }
        self.inner.get(key)
    }

    fn range(&self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>> {
        self.poison.check(self.inner.name())?;
        let held: Vec<(Bytes, Option<Bytes>)> = {
            let o = self.overlay.read().expect("overlay lock");
            if o.map.is_empty() || range.is_empty() {
                Vec::new()
            } else {
                let it = o.map.range::<[u8], _>(range.as_ref_bounds());
                match direction {
                    Direction::Forward => it.map(|(k, v)| (k.clone(), v.clone())).collect(),
                    Direction::Reverse => it.rev().map(|(k, v)| (k.clone(), v.clone())).collect(),
                }
            }
        };
        let disk = self.inner.range(range, direction)?;
        if held.is_empty() {
            return Ok(disk);
        }
        Ok(Box::new(Merge {
            held: held.into_iter().peekable(),
            disk: disk.peekable(),
            direction,
        }))
    }

    fn write(&self, batch: &Batch, durability: Durability) -> Result<()> {
        let _w = self.write_lock.lock().expect("write lock");
        self.poison.check(self.inner.name())?;
        {
            let mut o = self.overlay.write().expect("overlay lock");
            if o.holding {
                for op in batch.ops() {
                    o.apply(op);
                }
                return Ok(());
            }
        }
        if let Err(e) = self.inner.write(batch, durability) {
            self.poison.set(&e);
            return Err(e);
        }
        Ok(())
    }

    fn disk_size_bytes(&self) -> Result<u64> {
        self.inner.disk_size_bytes()
    }
}

/// Merges the held entries over the disk iterator, both in `direction` order; a held entry
/// shadows the disk's entry for the same key, and a held delete hides it.
struct Merge<'a> {
    held: std::iter::Peekable<std::vec::IntoIter<(Bytes, Option<Bytes>)>>,
    disk: std::iter::Peekable<DbIter<'a>>,
    direction: Direction,
}

impl Iterator for Merge<'_> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let take_held = match (self.held.peek(), self.disk.peek()) {
                (None, None) => return None,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(_), Some(Err(_))) => false,
                (Some((hk, _)), Some(Ok((dk, _)))) => {
                    let ord = hk.cmp(dk);
                    if ord == std::cmp::Ordering::Equal {
                        // The held write shadows the disk's value for this key.
                        self.disk.next();
                        true
                    } else {
                        match self.direction {
                            Direction::Forward => ord == std::cmp::Ordering::Less,
                            Direction::Reverse => ord == std::cmp::Ordering::Greater,
                        }
                    }
                }
            };
            if take_held {
                let (k, v) = self.held.next().expect("peeked");
                match v {
                    Some(v) => return Some(Ok((k, v))),
                    None => continue,
                }
            }
            return self.disk.next();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{CountingDb, MemoryDb, collect_range};

    fn db() -> HoldingDb<CountingDb<MemoryDb>> {
        HoldingDb::new(CountingDb::new(MemoryDb::new("t")))
    }

    fn put(d: &dyn Db, k: &str, v: &str) {
        let mut b = Batch::new();
        b.put(k.as_bytes().to_vec(), v.as_bytes().to_vec());
        d.write(&b, Durability::Synced).unwrap();
    }

    #[test]
    fn held_writes_reach_disk_only_at_write_held() {
        let d = db();
        put(&d, "a", "1");
        assert_eq!(d.inner().counts().synced_batches, 1);
        d.hold().unwrap();
        put(&d, "b", "2");
        put(&d, "b", "22");
        let mut del = Batch::new();
        del.delete(&b"a"[..]);
        d.write(&del, Durability::Synced).unwrap();
        assert_eq!(
            d.inner().counts().synced_batches,
            1,
            "nothing written while holding"
        );
        assert_eq!(d.held_bytes(), 1 + 2 + 1);
        assert_eq!(d.get(b"b").unwrap().unwrap(), &b"22"[..]);
        assert_eq!(d.get(b"a").unwrap(), None);
        assert_eq!(d.get_durable(b"a").unwrap().unwrap(), &b"1"[..]);
        let all = collect_range(&d, KeyRange::all(), Direction::Forward).unwrap();
        assert_eq!(all.len(), 1);
        let w = d.write_held().unwrap();
        assert_eq!(w.ops, 2);
        assert_eq!(d.inner().counts().synced_batches, 2);
        assert_eq!(d.held_bytes(), 0);
        assert_eq!(d.get_durable(b"a").unwrap(), None);
        assert_eq!(
            d.write_held().unwrap(),
            HeldWrite::default(),
            "empty overlay writes nothing"
        );
        assert_eq!(d.inner().counts().synced_batches, 2);
    }

    #[test]
    fn reverse_merge_interleaves_and_hides_deletes() {
        let d = db();
        for k in ["a", "c", "e"] {
            put(&d, k, "disk");
        }
        d.hold().unwrap();
        for k in ["b", "c", "f"] {
            put(&d, k, "held");
        }
        let mut del = Batch::new();
        del.delete(&b"e"[..]);
        d.write(&del, Durability::Synced).unwrap();
        let rev: Vec<_> = collect_range(&d, KeyRange::all(), Direction::Reverse)
            .unwrap()
            .into_iter()
            .map(|(k, v)| {
                (
                    String::from_utf8(k.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                )
            })
            .collect();
        let want: Vec<_> = [("f", "held"), ("c", "held"), ("b", "held"), ("a", "disk")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(rev, want);
    }

    /// A database reporting a fixed on-disk size, to see it pass through.
    #[derive(Debug)]
    struct FixedSize(MemoryDb);

    impl Db for FixedSize {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
            self.0.get(key)
        }
        fn range(&self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>> {
            self.0.range(range, direction)
        }
        fn write(&self, batch: &Batch, durability: Durability) -> Result<()> {
            self.0.write(batch, durability)
        }
        fn disk_size_bytes(&self) -> Result<u64> {
            Ok(4242)
        }
    }

    #[test]
    fn name_and_disk_size_are_the_inner_databases() {
        let d = HoldingDb::new(FixedSize(MemoryDb::new("state")));
        assert_eq!(d.name(), "state");
        assert_eq!(d.disk_size_bytes().unwrap(), 4242);
        assert!(!d.is_poisoned(), "a fresh database is not poisoned");
    }
}
