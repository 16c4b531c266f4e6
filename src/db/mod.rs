//! The database layer: the [`Db`] trait, batches, durability, the backends, [`DbWrapper`]
//! for a database that wraps another, and the merge of an overlay of writes over a disk
//! iterator (`MergeOver`).
//!
//! Invariant: a batch is atomic — after a crash it is wholly on disk or wholly absent.
//! Invariant: a `Synced` write that returned `Ok` survives a power cut; a `Buffered` one may
//! not. Nothing is ordered across two databases unless the second write starts after the
//! first one's sync returned.
//! Invariant: a failed write or sync poisons the handle that saw it (redb latches I/O errors
//! too); no fsync is ever retried as if it had worked.

mod counting;
mod memory;
mod merge;
mod pair_crc;
mod redb_db;
mod redb_guard;
mod storage;
mod wrapper;

pub use counting::{CountingDb, SyncCounters, SyncCounts};
pub use memory::MemoryDb;
pub(crate) use merge::{MergeOver, OverlayEntry};
pub(crate) use pair_crc::{
    PairTable, append_pair_crc, check_neighbours, checked_value, insert_checked,
};
pub use redb_db::{RedbDb, RedbOptions, fsync_dir};
pub(crate) use redb_guard::{GuardedDrop, GuardedIter, RedbGuard};
pub use redb_guard::{inside_guarded_redb_call, quiet_caught_redb_panics};
pub use storage::{BackendCounters, BackendCounts, CountingBackend};
pub use wrapper::DbWrapper;

use std::fmt::Debug;
use std::ops::Bound;

use bytes::Bytes;

use crate::error::Result;

/// How durable a batch must be when `write` returns `Ok`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum Durability {
    /// Atomic, and durable (survives a power cut) once `write` returns `Ok`: one fsync.
    Synced,
    /// Atomic, but may be lost in a power cut (not in a process crash of a clean backend).
    Buffered,
}

/// One write in a batch.
///
/// Exhaustive on purpose (the crate's one exception with [`Direction`]): every [`Db`]
/// backend and wrapper matches on it, and an op it did not know would be a write it drops;
/// a new op must fail their build, not fall into a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Set `key` to `value`.
    Put(Bytes, Bytes),
    /// Remove `key` (absent keys are fine).
    Delete(Bytes),
}

impl Op {
    /// The key written.
    pub fn key(&self) -> &Bytes {
        match self {
            Op::Put(k, _) | Op::Delete(k) => k,
        }
    }
    /// Bytes this op carries (key plus value).
    pub fn byte_size(&self) -> u64 {
        match self {
            Op::Put(k, v) => (k.len() + v.len()) as u64,
            Op::Delete(k) => k.len() as u64,
        }
    }
}

/// An ordered set of writes applied atomically; a later op on the same key wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    ops: Vec<Op>,
    byte_size: u64,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// The batch of `entries` (see [`Db::write_entries`]), in their order.
    pub fn from_entries<'a>(entries: &mut dyn Iterator<Item = EntryRef<'a>>) -> Self {
        let mut batch = Batch::with_capacity(entries.size_hint().0);
        for (k, v) in entries {
            match v {
                Some(v) => batch.push(Op::Put(k.clone(), v.clone())),
                None => batch.push(Op::Delete(k.clone())),
            };
        }
        batch
    }

    /// An empty batch with room for `ops` operations.
    pub fn with_capacity(ops: usize) -> Self {
        Batch {
            ops: Vec::with_capacity(ops),
            byte_size: 0,
        }
    }
    /// Adds a put.
    pub fn put(&mut self, key: impl Into<Bytes>, value: impl Into<Bytes>) -> &mut Self {
        self.push(Op::Put(key.into(), value.into()))
    }
    /// Adds a delete.
    pub fn delete(&mut self, key: impl Into<Bytes>) -> &mut Self {
        self.push(Op::Delete(key.into()))
    }
    /// Adds an op.
    pub fn push(&mut self, op: Op) -> &mut Self {
        self.byte_size += op.byte_size();
        self.ops.push(op);
        self
    }
    /// The ops, in order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }
    /// Number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// True when there are no ops.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    /// Key and value bytes carried.
    pub fn byte_size(&self) -> u64 {
        self.byte_size
    }
}

/// Iteration order.
///
/// Exhaustive on purpose, as [`Op`] is: every [`Db`] backend matches on it, and a new
/// order must fail their build, not fall into a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Ascending key order.
    Forward,
    /// Descending key order.
    Reverse,
}

/// A key range with owned bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    /// Lower bound.
    pub start: Bound<Bytes>,
    /// Upper bound.
    pub end: Bound<Bytes>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        KeyRange {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }
    /// `[start, end)`.
    pub fn between(start: impl Into<Bytes>, end: impl Into<Bytes>) -> Self {
        KeyRange {
            start: Bound::Included(start.into()),
            end: Bound::Excluded(end.into()),
        }
    }
    /// Every key starting with `prefix`.
    pub fn prefix(prefix: &[u8]) -> Self {
        let start = Bound::Included(Bytes::copy_from_slice(prefix));
        let mut end = prefix.to_vec();
        // The first key after every extension of `prefix`: increment the last byte that is
        // not 0xff, dropping the 0xff bytes after it; all-0xff prefixes have no end.
        while let Some(last) = end.pop() {
            if last != 0xff {
                end.push(last + 1);
                return KeyRange {
                    start,
                    end: Bound::Excluded(Bytes::from(end)),
                };
            }
        }
        KeyRange {
            start,
            end: Bound::Unbounded,
        }
    }
    /// True when `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        let above = match &self.start {
            Bound::Included(s) => key >= s.as_ref(),
            Bound::Excluded(s) => key > s.as_ref(),
            Bound::Unbounded => true,
        };
        let below = match &self.end {
            Bound::Included(e) => key <= e.as_ref(),
            Bound::Excluded(e) => key < e.as_ref(),
            Bound::Unbounded => true,
        };
        above && below
    }
    /// True when no key can lie in the range.
    pub fn is_empty(&self) -> bool {
        match (&self.start, &self.end) {
            (Bound::Included(s), Bound::Included(e)) => s > e,
            (Bound::Included(s), Bound::Excluded(e))
            | (Bound::Excluded(s), Bound::Included(e))
            | (Bound::Excluded(s), Bound::Excluded(e)) => s >= e,
            _ => false,
        }
    }
    pub(crate) fn as_ref_bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (as_ref(&self.start), as_ref(&self.end))
    }
}

fn as_ref(b: &Bound<Bytes>) -> Bound<&[u8]> {
    match b {
        Bound::Included(x) => Bound::Included(x.as_ref()),
        Bound::Excluded(x) => Bound::Excluded(x.as_ref()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// A key-value pair read from a database.
pub type Entry = (Bytes, Bytes);

/// An iterator over a range; each item may fail (I/O, poison).
pub type DbIter<'a> = Box<dyn Iterator<Item = Result<Entry>> + Send + 'a>;

/// An ordered key-value database.
///
/// Implementations must be safe to share between threads. The contract on writes is the
/// module's: a batch is atomic; `Synced` is durable when `write` returns `Ok`; after an `Err`
/// the batch may or may not be durable and the handle is poisoned.
///
/// A backend implements `Db`. A wrapper that changes some of another database's behaviour
/// (counting, recording, fault injection, a downgraded durability) implements
/// [`DbWrapper`] instead and writes only the functions it changes; every other one forwards
/// to the database it wraps, with the two exceptions that keep writes from bypassing it
/// (`write_entries` goes through its `write`, `unit_group` is `None`). `Arc<D>` and
/// `Box<D>` are databases this way, forwarding everything.
pub trait Db: Send + Sync + Debug {
    /// The database's name, used in every error.
    fn name(&self) -> &str;

    /// The value stored at `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>>;

    /// True when `key` holds a value.
    fn contains(&self, key: &[u8]) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// The values stored at `keys`, in order, read from one consistent snapshot. A backend
    /// overrides it to pay a read transaction's setup once for all of them; the default
    /// reads each key with [`Db::get`]. A wrapper forwards it to what it wraps.
    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }

    /// The pairs in `range`, in `direction` order. The iterator sees a consistent snapshot
    /// taken when it was created.
    fn range(&self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>>;

    /// Applies `batch` atomically with `durability`.
    ///
    /// `Ok`: every op is visible, and on disk if `durability` is `Synced`.
    /// `Err`: the batch may or may not be on disk; the handle refuses further calls.
    fn write(&self, batch: &Batch, durability: Durability) -> Result<()>;

    /// Applies the entries `entries` yields — `(key, Some(value))` a put, `(key, None)` a
    /// delete, each key at most once — atomically with `durability`, exactly as
    /// [`Db::write`] would apply them as one batch. A flush point writes its window this
    /// way, straight from the held window: a backend that overrides it inserts without a
    /// batch being built; the default builds one. A wrapper that changes no write forwards
    /// it to what it wraps; one that changes `write` lets it go through its `write`
    /// ([`DbWrapper::write_entries`]) or counts it itself.
    fn write_entries<'a>(
        &self,
        entries: &mut dyn Iterator<Item = EntryRef<'a>>,
        durability: Durability,
    ) -> Result<()> {
        self.write(&Batch::from_entries(entries), durability)
    }

    /// Bytes this database occupies on disk (allocated), 0 for memory.
    fn disk_size_bytes(&self) -> Result<u64> {
        Ok(0)
    }

    /// The group this database belongs to, when it can write its batches atomically with
    /// the group's other members ([`UnitGroup`], ADR 0011), and its member name there.
    /// `None` (the default): it writes alone. A backend whose databases share one log (the
    /// journal engine's keyspaces) returns it; a wrapper that only forwards (`Arc`, `Box`)
    /// forwards it; a wrapper that observes or intercepts writes (counting, fault
    /// injection) must not, or the group's writes would bypass it.
    fn unit_group(&self) -> Option<UnitMember> {
        None
    }
}

/// Several databases that write their batches as **one** atomic unit: after a crash every
/// member's part of a unit is on disk or none is (ADR 0011). The journal engine is one: its
/// keyspaces share one log, and a unit is one framed record and, `Synced`, one `fdatasync`.
pub trait UnitGroup: Send + Sync + Debug {
    /// Writes each `(member, entries)` part — entries as in [`Db::write_entries`], each key
    /// at most once per part — as one atomic unit with `durability`. Parts with no entries
    /// are skipped; with no entries at all nothing is written (no sync).
    ///
    /// `Ok`: every part is visible through its member, and on disk if `Synced`. `Err`
    /// (unknown member, I/O): the unit may or may not be on disk; on an I/O error the group
    /// and every member refuse further calls. An unknown member is refused before anything
    /// is written.
    fn write_unit(&self, parts: &mut [UnitPart<'_, '_>], durability: Durability) -> Result<()>;

    /// Returns once every unit written so far has left the group's memory. A group that
    /// applies durable units in the background (the journal engine) keeps each unit's
    /// writes in memory until they are applied; the node's flush thread calls this after
    /// its unit, so that the open window and one window in flight are all the node holds
    /// (ADR 0015). `Err`: the group is poisoned. A group that keeps nothing in memory after
    /// a write returns `Ok` at once; a wrapper forwards to the group it wraps (no default:
    /// a wrapper that forgot would let the node hold any number of windows).
    fn wait_applied(&self) -> Result<()>;
}

/// One member's part of a [`UnitGroup::write_unit`]: its name and its entries.
pub type UnitPart<'n, 'e> = (&'n str, &'n mut dyn Iterator<Item = EntryRef<'e>>);

/// A database's place in a [`UnitGroup`]: the group and the member's name in it.
#[derive(Debug, Clone)]
pub struct UnitMember {
    /// The group.
    pub group: std::sync::Arc<dyn UnitGroup>,
    /// The member's name in the group (what [`UnitGroup::write_unit`] takes).
    pub name: String,
}

impl UnitMember {
    /// True when `self` and `other` are members of the same group (the same object).
    pub fn same_group(&self, other: &UnitMember) -> bool {
        std::ptr::addr_eq(
            std::sync::Arc::as_ptr(&self.group),
            std::sync::Arc::as_ptr(&other.group),
        )
    }
}

/// One entry of [`Db::write_entries`]: a key and `Some(value)` for a put, `None` for a
/// delete.
pub type EntryRef<'a> = (&'a Bytes, Option<&'a Bytes>);

/// Collects a range into a vector (convenience for small ranges and tests).
pub fn collect_range(db: &dyn Db, range: KeyRange, direction: Direction) -> Result<Vec<Entry>> {
    db.range(range, direction)?.collect()
}
