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
//! Invariant: a flush can run beside new writes: `freeze` moves the overlay to the *frozen*
//! window (at most one), later writes start a new overlay, and `write_frozen` (from any
//! thread) writes the frozen window as one `Synced` batch and drops it only after `Ok`.
//! Reads see the overlay, then the frozen window, then the disk; durable reads see the disk.
//! Invariant: this module decides nothing about *when* to flush (that is `deferred`).
//! Invariant: every `write` bumps the write generation of each key it wrote (by bucket)
//! *after* the write is visible to reads, whether it was held or passed through, and even
//! when it failed; freezing and writing a window change no value a read sees and bump
//! nothing. Prefetch sessions rely on it (ADR 0010): a value read after `generation()`
//! returned `g` is stale only if `written_since(key, g)`.

use std::hash::{BuildHasher, RandomState};
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use hashbrown::{HashTable, hash_table};

use crate::db::{
    Batch, Db, DbIter, Direction, Durability, EntryRef, KeyRange, MergeOver, Op, OverlayEntry,
    UnitMember,
};
use crate::error::{Error, Result};
use crate::poison::Poison;
use crate::prefetch::PrefetchSource;
use crate::sync::{AtomicU64, Ordering, RwLock};

/// Buckets of the write-generation table (keys hash into them).
///
/// Why this many: the table is what a prefetch session checks an observation against, and
/// two keys in one bucket only cost a false invalidation (a re-read), never a stale value.
/// 4,096 buckets are 32 KiB per `HoldingDb`; a block touching a few thousand keys then
/// invalidates a small fraction of another block's unrelated observations, and the whole
/// table stays in the L2 cache. Under loom a handful of buckets keeps the model small.
#[cfg(not(loom))]
pub(crate) const WRITE_GENERATION_BUCKETS: usize = 4096;
/// Buckets of the write-generation table under loom (each bucket is a modelled atomic).
#[cfg(loom)]
pub(crate) const WRITE_GENERATION_BUCKETS: usize = 4;
const _: () = assert!(WRITE_GENERATION_BUCKETS.is_power_of_two());

/// Keys and values shorter than this are copied into the window's chunks ([`Chunks`]);
/// longer ones (a block's parts) are kept as the caller's `Bytes`. Why 1 KiB: a copy that
/// small costs less than the allocation it saves, and a longer value is few enough per
/// window that its own allocation and reference-count header do not matter.
pub(crate) const HELD_COPY_BELOW_BYTES: usize = 1024;
/// The first chunk of a window, in bytes. Why small: a consensus block's window holds a few
/// KiB, and the journal keeps its chunks until it is applied.
const CHUNK_FIRST_BYTES: usize = 4 * 1024;
/// The largest chunk, in bytes: chunks double from [`CHUNK_FIRST_BYTES`] up to this. Why
/// 1 MiB: a 64 MiB window takes ~70 of them; a read that keeps a held value keeps its chunk.
const CHUNK_MAX_BYTES: usize = 1024 * 1024;
const _: () = assert!(HELD_COPY_BELOW_BYTES <= CHUNK_FIRST_BYTES);

/// Where a window keeps its short keys and values: copied into a few large buffers it
/// shares out as slices (`Bytes` with one reference count per chunk), not one allocation
/// (and, once shared, one reference-count header) per key and per value: a held key of a
/// light block's shape took 138 B beyond its bytes, and takes 87–98 B
/// (`tests/held_memory.rs`). The window's millions of small writes leave the allocator a
/// few large blocks to free, on whichever thread drops the last slice (the applier).
#[derive(Debug, Default)]
struct Chunks {
    /// The chunk being filled: its spare capacity takes the next copies.
    open: BytesMut,
    /// The size of the next chunk.
    next_bytes: usize,
    /// Bytes of values a later write replaced: still in a chunk, counted as memory.
    replaced_bytes: u64,
}

impl Chunks {
    /// `b` as the window keeps it: copied into a chunk when short, else shared as it is.
    fn keep(&mut self, b: &Bytes) -> Bytes {
        if b.len() >= HELD_COPY_BELOW_BYTES || b.is_empty() {
            return b.clone();
        }
        if self.open.capacity() - self.open.len() < b.len() {
            let size = self.next_bytes.max(CHUNK_FIRST_BYTES);
            self.open = BytesMut::with_capacity(size);
            self.next_bytes = (size * 2).min(CHUNK_MAX_BYTES);
        }
        self.open.extend_from_slice(b);
        // Shares the chunk: no allocation once the first slice made it shared.
        self.open.split().freeze()
    }

    /// A held value of `len` bytes was replaced: a short one stays in its chunk.
    fn replaced(&mut self, len: usize) {
        if len < HELD_COPY_BELOW_BYTES {
            self.replaced_bytes += len as u64;
        }
    }
}

/// The generations of the latest writes, by key bucket, and the global counter.
///
/// Ordering argument (ADR 0010): a writer applies its write, then takes a new generation
/// `n = counter + 1` (`fetch_add`) and raises its keys' buckets to at least `n`; a reader
/// (a prefetch worker) loads `g = counter` *before* its read. If the read missed the write
/// (it happened before the write, in the order of the lock or backend it read through),
/// the load happened before the `fetch_add` too, so by coherence `g < n`, and any later
/// look at the bucket from a thread that saw the write finished finds a value `> g`.
/// If the read saw the write, the observation is current (a bump seen anyway is only a
/// false invalidation). All accesses are `SeqCst`: the argument needs only coherence and
/// the happens-before of the data's own lock, but a write already takes two locks, so the
/// stronger order costs nothing measurable and leaves nothing to re-argue.
#[derive(Debug)]
struct WriteGenerations {
    counter: AtomicU64,
    buckets: Box<[AtomicU64]>,
}

impl WriteGenerations {
    fn new() -> Self {
        WriteGenerations {
            counter: AtomicU64::new(0),
            buckets: (0..WRITE_GENERATION_BUCKETS)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    fn bucket(&self, key: &[u8]) -> &AtomicU64 {
        // FNV-1a: short keys, no allocation, deterministic (a test can aim at a bucket).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        &self.buckets[(h as usize) & (WRITE_GENERATION_BUCKETS - 1)]
    }

    /// Call only after the write of `ops` is visible to every read (or failed).
    fn bump(&self, ops: &[Op]) {
        let n = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
        for op in ops {
            self.bucket(op.key()).fetch_max(n, Ordering::SeqCst);
        }
    }

    fn generation(&self) -> u64 {
        self.counter.load(Ordering::SeqCst)
    }

    fn written_since(&self, key: &[u8], since: u64) -> bool {
        self.bucket(key).load(Ordering::SeqCst) > since
    }
}

/// What a `write_held` call wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HeldWrite {
    /// Ops in the synced batch (0: nothing was held, nothing was written).
    pub ops: u64,
    /// Key and value bytes in it.
    pub bytes: u64,
}

/// One window of held writes.
///
/// Hashed, not ordered: a held write or point read is one hash probe, where an ordered map
/// walks a B-tree of up to [`crate::FLUSH_BYTES_MAX`] of keys (several cache misses and key
/// comparisons per write, on the block loop's thread). Each key is kept once, in `entries`;
/// the hash index and the key order hold positions in it (4 bytes each), so a held write
/// clones its key once, and a flush walks the entries in key order without a hash lookup
/// per key. Key order — for ranges and for writing the window in key order — is settled on
/// demand ([`Overlay::sorted_positions`]).
#[derive(Debug, Default)]
struct Overlay {
    /// The held entries, a key at most once, in the order their keys were first written:
    /// `(key, Some(value))` a held put, `(key, None)` a held delete.
    entries: Vec<(Bytes, Option<Bytes>)>,
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
fn key_ordered(entries: &[(Bytes, Option<Bytes>)], from: usize) -> Vec<u32> {
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

impl Overlay {
    /// An empty overlay with room for `keys` keys (the previous window's count: a window
    /// grows to about the same size, so it is not rehashed on the block loop's thread).
    fn with_capacity(keys: usize) -> Overlay {
        Overlay {
            entries: Vec::with_capacity(keys),
            index: HashTable::with_capacity(keys),
            hasher: RandomState::new(),
            sorted: Mutex::default(),
            held_bytes: 0,
            chunks: Chunks::default(),
        }
    }

    /// The memory the window takes as the flush trigger counts it: key and value bytes,
    /// replaced values still in a chunk, and [`crate::HELD_KEY_BYTES`] per key.
    fn memory(&self) -> u64 {
        self.held_bytes
            + self.chunks.replaced_bytes
            + self.entries.len() as u64 * crate::node::HELD_KEY_BYTES
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The held write to `key`: `Some(Some(v))` a put, `Some(None)` a delete.
    fn get(&self, key: &[u8]) -> Option<&Option<Bytes>> {
        let hash = self.hasher.hash_one(key);
        self.index
            .find(hash, |&i| self.entries[i as usize].0 == key)
            .map(|&i| &self.entries[i as usize].1)
    }

    fn apply(&mut self, op: &Op) {
        let (k, v) = match op {
            Op::Put(k, v) => (k, Some(v)),
            Op::Delete(k) => (k, None),
        };
        self.put(k, v);
    }

    /// Holds `value` for `key` (`None`: a delete), replacing what the window held for it.
    /// Short keys and values are copied into the window's chunks.
    fn put(&mut self, key: &Bytes, value: Option<&Bytes>) {
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

    /// The positions in key order (settled now if keys came since the last time): sorts the
    /// new keys alone and merges them in (linear in the keys), so ranges between writes do
    /// not re-sort the window.
    fn sorted_positions(&self) -> Arc<Vec<u32>> {
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
    fn entry(&self, i: u32) -> EntryRef<'_> {
        let (k, v) = &self.entries[i as usize];
        (k, v.as_ref())
    }

    fn duplicate(&self) -> Overlay {
        Overlay {
            entries: self.entries.clone(),
            index: self.index.clone(),
            hasher: self.hasher.clone(),
            sorted: Mutex::new(self.sorted.lock().expect("order lock").clone()),
            held_bytes: self.held_bytes,
            chunks: Chunks {
                replaced_bytes: self.chunks.replaced_bytes,
                ..Chunks::default()
            },
        }
    }
}

/// The held writes: the open overlay and, while a flush writes it, the frozen window.
#[derive(Debug, Default)]
struct Held {
    holding: bool,
    /// Writes since the last `freeze` (or since holding started).
    active: Overlay,
    /// The window a flush is writing: readable until its batch returned `Ok`.
    frozen: Option<Arc<Overlay>>,
}

/// A database whose writes can be held in memory and written at flush points.
#[derive(Debug)]
pub struct HoldingDb<D> {
    inner: D,
    held: RwLock<Held>,
    /// Serializes writers and flushes of the frozen window against `freeze`, so a window is
    /// never replaced while it is being written.
    write_lock: Mutex<()>,
    /// Held by `write_frozen` for the whole synced write: one window written at a time.
    flush_lock: Mutex<()>,
    poison: Poison,
    /// Bumped after every write; read by prefetch sessions ([`PrefetchSource`]).
    generations: WriteGenerations,
}

impl<D: Db> HoldingDb<D> {
    /// Wraps `inner`, not holding.
    pub fn new(inner: D) -> Self {
        HoldingDb {
            inner,
            held: RwLock::default(),
            write_lock: Mutex::new(()),
            flush_lock: Mutex::new(()),
            poison: Poison::default(),
            generations: WriteGenerations::new(),
        }
    }

    /// The database written at flush points.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Starts holding writes.
    pub fn hold(&self) -> Result<()> {
        self.poison.check(self.inner.name())?;
        self.held.write().expect("held lock").holding = true;
        Ok(())
    }

    /// Stops holding; nothing may be held or frozen (take a flush point first).
    ///
    /// With writes held or a window frozen it refuses with [`Error::Contract`] (the keys
    /// held) and keeps holding them: stopping would drop writes a caller was promised.
    pub fn stop_holding(&self) -> Result<()> {
        self.poison.check(self.inner.name())?;
        let mut h = self.held.write().expect("held lock");
        if !h.active.is_empty() || h.frozen.is_some() {
            let keys = h.active.len() + h.frozen.as_ref().map_or(0, |f| f.len());
            return Err(Error::Contract {
                what: "keys held at HoldingDb::stop_holding (write them first)",
                expected: 0,
                found: keys as u64,
            });
        }
        h.holding = false;
        Ok(())
    }

    /// True while writes are held.
    pub fn is_holding(&self) -> bool {
        self.held.read().expect("held lock").holding
    }

    /// Exact key and value bytes held in the open overlay (a frozen window not included).
    pub fn held_bytes(&self) -> u64 {
        self.held.read().expect("held lock").active.held_bytes
    }

    /// Key and value bytes of the frozen window being written (0 when none).
    pub fn frozen_bytes(&self) -> u64 {
        self.held
            .read()
            .expect("held lock")
            .frozen
            .as_ref()
            .map_or(0, |f| f.held_bytes)
    }

    /// The memory the open overlay takes, as the flush trigger counts it
    /// ([`crate::FlushPolicy`]): its key and value bytes, the bytes of short values it
    /// replaced (still in its chunks), and [`crate::HELD_KEY_BYTES`] per key.
    pub fn held_memory(&self) -> u64 {
        self.held.read().expect("held lock").active.memory()
    }

    /// Keys held in the open overlay.
    pub fn held_keys(&self) -> usize {
        self.held.read().expect("held lock").active.len()
    }

    /// True once a write failed.
    pub fn is_poisoned(&self) -> bool {
        self.poison.is_set()
    }

    /// Writes the overlay as one `Synced` batch, then drops it.
    ///
    /// `Ok`: every held write is durable and the overlay is empty. With nothing held, nothing
    /// is written (no fsync). `Err`: the batch may or may not be durable; the database is
    /// poisoned and the held writes are kept (but unreadable through the poison).
    pub fn write_held(&self) -> Result<HeldWrite> {
        self.freeze()?;
        let written = self.write_frozen();
        if written.is_err() {
            self.unfreeze();
        }
        written
    }

    /// Puts a frozen window whose write failed back under the overlay (later writes win),
    /// so a failed `write_held` keeps its writes where they were held.
    fn unfreeze(&self) {
        let mut h = self.held.write().expect("held lock");
        let Some(window) = h.frozen.take() else {
            return;
        };
        let window = Arc::try_unwrap(window).unwrap_or_else(|shared| shared.duplicate());
        let newer = std::mem::replace(&mut h.active, window);
        for (k, v) in newer.entries {
            h.active.put(&k, v.as_ref());
        }
    }

    /// Moves the overlay to the frozen window, so a flush can write it while later writes
    /// start a new overlay. Reads keep seeing it until [`HoldingDb::write_frozen`] returned
    /// `Ok`. Returns what was frozen (nothing held: nothing frozen).
    ///
    /// At most one window is in flight: freezing while a frozen window is still unwritten
    /// returns `Error::InvalidInput` and changes nothing (the node waits for the window
    /// before freezing the next one).
    pub fn freeze(&self) -> Result<HeldWrite> {
        let _w = self.write_lock.lock().expect("write lock");
        self.poison.check(self.inner.name())?;
        let mut h = self.held.write().expect("held lock");
        if h.frozen.is_some() {
            return Err(Error::InvalidInput(format!(
                "{}: a frozen window is still being written; write it before freezing another",
                self.inner.name()
            )));
        }
        if h.active.is_empty() {
            return Ok(HeldWrite::default());
        }
        let keys = h.active.len();
        let window = std::mem::replace(&mut h.active, Overlay::with_capacity(keys));
        let frozen = HeldWrite {
            ops: window.len() as u64,
            bytes: window.held_bytes,
        };
        h.frozen = Some(Arc::new(window));
        Ok(frozen)
    }

    /// Writes the frozen window as one `Synced` batch, then drops it. Callable from any
    /// thread while writes go on into the new overlay.
    ///
    /// `Ok`: the window is durable (nothing frozen: nothing written, no fsync). `Err`: the
    /// batch may or may not be durable; the database is poisoned and the window is kept.
    pub fn write_frozen(&self) -> Result<HeldWrite> {
        let _f = self.flush_lock.lock().expect("flush lock");
        self.poison.check(self.inner.name())?;
        let Some(window) = self.held.read().expect("held lock").frozen.clone() else {
            return Ok(HeldWrite::default());
        };
        // In key order (the B-tree beneath takes sorted inserts fastest; a range over the
        // frozen window later finds the order settled), straight from the window: no batch
        // is built, no key or value copied.
        let keys = window.sorted_positions();
        let mut entries = keys.iter().map(|&i| window.entry(i));
        if let Err(e) = self.inner.write_entries(&mut entries, Durability::Synced) {
            self.poison.set(&e);
            return Err(e);
        }
        // Crash: a cut before this line leaves the window on disk or not (one synced batch),
        // and in memory either way. Drop it only now that it is durable: readers fall
        // through to the disk, which has it.
        self.held.write().expect("held lock").frozen = None;
        Ok(HeldWrite {
            ops: keys.len() as u64,
            bytes: window.held_bytes,
        })
    }

    /// The database beneath's place in a unit group ([`Db::unit_group`]), if it has one.
    pub fn unit_member(&self) -> Option<UnitMember> {
        self.inner.unit_group()
    }

    /// The frozen window, shared (no copy), for a caller that writes it in a unit with
    /// other databases' windows ([`crate::UnitGroup::write_unit`], ADR 0011) instead of
    /// [`HoldingDb::write_frozen`]. `Ok(None)`: nothing is frozen. The window stays frozen
    /// (readable) until [`HoldingDb::frozen_written`].
    pub fn frozen_window(&self) -> Result<Option<FrozenWindow>> {
        self.poison.check(self.inner.name())?;
        let Some(window) = self.held.read().expect("held lock").frozen.clone() else {
            return Ok(None);
        };
        let keys = window.sorted_positions();
        Ok(Some(FrozenWindow { window, keys }))
    }

    /// Drops the frozen window `window` once the caller's unit holding it is durable
    /// (readers then fall through to the database beneath, which has it).
    ///
    /// `Err(InvalidInput)`, nothing dropped: `window` is not the window frozen now.
    pub fn frozen_written(&self, window: &FrozenWindow) -> Result<HeldWrite> {
        let _f = self.flush_lock.lock().expect("flush lock");
        self.poison.check(self.inner.name())?;
        let mut h = self.held.write().expect("held lock");
        match &h.frozen {
            Some(f) if Arc::ptr_eq(f, &window.window) => {
                // Crash: the caller's unit returned `Ok`: the window is durable beneath.
                h.frozen = None;
                Ok(window.written())
            }
            _ => Err(Error::InvalidInput(format!(
                "{}: frozen_written with a window that is not the frozen one",
                self.inner.name()
            ))),
        }
    }

    /// Reads `keys` as they stood when the open overlay began: the frozen window (if one is
    /// in flight), then the disk — the open overlay's writes are skipped. One snapshot of
    /// the disk for all of them.
    pub fn get_many_below_open(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        self.get_many_through(keys, false)
    }

    /// Reads `keys` from the open overlay alone: per key, `Some` with what the overlay holds
    /// for it (`Some(None)`: a delete) or `None` when the overlay has not written it. No
    /// frozen window and no disk is read, and the values are the overlay's own (no copy).
    /// All `None` when not holding.
    pub fn get_many_open(&self, keys: &[&[u8]]) -> Result<Vec<Option<Option<Bytes>>>> {
        self.poison.check(self.inner.name())?;
        let h = self.held.read().expect("held lock");
        Ok(keys.iter().map(|key| h.active.get(key).cloned()).collect())
    }

    /// `keys` through the held windows — the open overlay when `open`, then the frozen
    /// window — and the disk for the rest, in one `get_many` of the inner database.
    fn get_many_through(&self, keys: &[&[u8]], open: bool) -> Result<Vec<Option<Bytes>>> {
        self.poison.check(self.inner.name())?;
        let mut out: Vec<Option<Bytes>> = Vec::with_capacity(keys.len());
        let mut missed: Vec<usize> = Vec::new();
        {
            let h = self.held.read().expect("held lock");
            for (i, key) in keys.iter().enumerate() {
                let held = open
                    .then(|| h.active.get(key))
                    .flatten()
                    .or_else(|| h.frozen.as_ref().and_then(|f| f.get(key)));
                match held {
                    Some(v) => out.push(v.clone()),
                    None => {
                        out.push(None);
                        missed.push(i);
                    }
                }
            }
        }
        if missed.is_empty() {
            return Ok(out);
        }
        // Crash: none. A window dropped since the check above is already on disk (it is
        // dropped only after its batch returned `Ok`).
        let from_disk = self
            .inner
            .get_many(&missed.iter().map(|&i| keys[i]).collect::<Vec<_>>())?;
        for (i, v) in missed.into_iter().zip(from_disk) {
            out[i] = v;
        }
        Ok(out)
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

/// The entries of `o` in `range`, in `direction` order.
fn held_range(o: &Overlay, range: &KeyRange, direction: Direction) -> Vec<OverlayEntry> {
    if o.is_empty() {
        return Vec::new();
    }
    let positions = o.sorted_positions();
    let (start, end) = range.as_ref_bounds();
    let lo = match start {
        Bound::Included(s) => positions.partition_point(|&i| o.key(i) < s),
        Bound::Excluded(s) => positions.partition_point(|&i| o.key(i) <= s),
        Bound::Unbounded => 0,
    };
    let hi = match end {
        Bound::Included(e) => positions.partition_point(|&i| o.key(i) <= e),
        Bound::Excluded(e) => positions.partition_point(|&i| o.key(i) < e),
        Bound::Unbounded => positions.len(),
    };
    let slice = &positions[lo..hi.max(lo)];
    let entry = |&i: &u32| o.entries[i as usize].clone();
    match direction {
        Direction::Forward => slice.iter().map(entry).collect(),
        Direction::Reverse => slice.iter().rev().map(entry).collect(),
    }
}

impl<D: Db> Db for HoldingDb<D> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.poison.check(self.inner.name())?;
        {
            let h = self.held.read().expect("held lock");
            if let Some(v) = h.active.get(key) {
                return Ok(v.clone());
            }
            if let Some(v) = h.frozen.as_ref().and_then(|f| f.get(key)) {
                return Ok(v.clone());
            }
        }
        // Crash: none. A window dropped between the check above and this read is already in
        // the disk's committed state (it is dropped only after its batch returned `Ok`).
        self.inner.get(key)
    }

    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        self.get_many_through(keys, true)
    }

    fn range(&self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>> {
        self.poison.check(self.inner.name())?;
        let (active, frozen) = if range.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            let h = self.held.read().expect("held lock");
            let active = held_range(&h.active, &range, direction);
            let frozen = h
                .frozen
                .as_ref()
                .map(|f| held_range(f, &range, direction))
                .unwrap_or_default();
            (active, frozen)
        };
        // The disk iterator is opened after the held entries were copied: a window written
        // in between is then in both, and the held copy (the same value) wins.
        let disk = self.inner.range(range, direction)?;
        Ok(match (active.is_empty(), frozen.is_empty()) {
            (true, true) => disk,
            (false, true) => Box::new(MergeOver::new(active.into_iter(), disk, direction)),
            (true, false) => Box::new(MergeOver::new(frozen.into_iter(), disk, direction)),
            (false, false) => {
                let below = MergeOver::new(frozen.into_iter(), disk, direction);
                Box::new(MergeOver::new(active.into_iter(), below, direction))
            }
        })
    }

    fn write(&self, batch: &Batch, durability: Durability) -> Result<()> {
        let _w = self.write_lock.lock().expect("write lock");
        self.poison.check(self.inner.name())?;
        #[cfg(loom_bug_bump_before_apply)]
        self.generations.bump(batch.ops());
        let held = {
            let mut h = self.held.write().expect("held lock");
            if h.holding {
                for op in batch.ops() {
                    h.active.apply(op);
                }
                true
            } else {
                assert!(
                    h.frozen.is_none(),
                    "invariant: no write passes a frozen window of {} to the disk",
                    self.inner.name()
                );
                false
            }
        };
        let written = if held {
            Ok(())
        } else {
            self.inner.write(batch, durability)
        };
        // Ordering: bump only now that the write is visible (held: the overlay lock was
        // released; passed through: the backend returned). Moved before the apply, a
        // prefetch read could load the new generation, then read the old value, and keep it
        // as current (`tests/prefetch_never_stale.rs`, `tests/loom_prefetch.rs`). Bumped on
        // `Err` too: the batch may be on disk, and nothing retained may outlive that doubt.
        #[cfg(not(loom_bug_bump_before_apply))]
        self.generations.bump(batch.ops());
        if let Err(e) = written {
            self.poison.set(&e);
            return Err(e);
        }
        Ok(())
    }

    fn disk_size_bytes(&self) -> Result<u64> {
        self.inner.disk_size_bytes()
    }
}

/// A store whose held writes a flush thread can write beside new writes: the node freezes
/// the window on its own thread, a flush thread writes it. Implemented by [`HoldingDb`];
/// an [`crate::App`] whose storage is one returns it from [`crate::App::held_store`].
pub trait HeldStore: Send + Sync + std::fmt::Debug {
    /// The store's name (for errors).
    fn store_name(&self) -> &str;
    /// See [`HoldingDb::freeze`].
    fn freeze(&self) -> Result<HeldWrite>;
    /// See [`HoldingDb::write_frozen`].
    fn write_frozen(&self) -> Result<HeldWrite>;
    /// See [`HoldingDb::frozen_bytes`].
    fn frozen_bytes(&self) -> u64;
    /// See [`HoldingDb::held_memory`]: what the flush trigger counts for the app's window.
    /// `None` (the default): the app's [`crate::App::held_bytes`] counts instead.
    fn held_memory(&self) -> Option<u64> {
        None
    }
    /// See [`HoldingDb::unit_member`]. When it is the group of the node's own databases,
    /// the node writes this store's frozen window in the flush point's unit (ADR 0011)
    /// through [`HeldStore::frozen_window`] and [`HeldStore::frozen_written`], instead of
    /// [`HeldStore::write_frozen`]. The default: `None` (written after the node's unit).
    fn unit_member(&self) -> Option<UnitMember> {
        None
    }
    /// See [`HoldingDb::frozen_window`]. The default: nothing frozen.
    fn frozen_window(&self) -> Result<Option<FrozenWindow>> {
        Ok(None)
    }
    /// See [`HoldingDb::frozen_written`]. The default refuses (it hands out no window).
    fn frozen_written(&self, window: &FrozenWindow) -> Result<HeldWrite> {
        let _ = window;
        Err(Error::InvalidInput(format!(
            "{}: frozen_written on a held store that hands out no frozen window",
            self.store_name()
        )))
    }
}

/// A frozen window of a [`HoldingDb`], shared with it (no key or value copied), in key
/// order: what a unit write takes ([`HeldStore::frozen_window`]).
#[derive(Debug, Clone)]
pub struct FrozenWindow {
    window: Arc<Overlay>,
    /// The window's positions in key order.
    keys: Arc<Vec<u32>>,
}

impl FrozenWindow {
    /// The window's entries in key order: `(key, Some(value))` a put, `(key, None)` a
    /// delete.
    pub fn entries(&self) -> impl Iterator<Item = EntryRef<'_>> + '_ {
        self.keys.iter().map(|&i| self.window.entry(i))
    }

    /// Its ops and key and value bytes.
    pub fn written(&self) -> HeldWrite {
        HeldWrite {
            ops: self.keys.len() as u64,
            bytes: self.window.held_bytes,
        }
    }
}

impl<D: Db> HeldStore for HoldingDb<D> {
    fn store_name(&self) -> &str {
        self.inner.name()
    }
    fn freeze(&self) -> Result<HeldWrite> {
        HoldingDb::freeze(self)
    }
    fn write_frozen(&self) -> Result<HeldWrite> {
        HoldingDb::write_frozen(self)
    }
    fn frozen_bytes(&self) -> u64 {
        HoldingDb::frozen_bytes(self)
    }
    fn held_memory(&self) -> Option<u64> {
        Some(HoldingDb::held_memory(self))
    }
    fn unit_member(&self) -> Option<UnitMember> {
        HoldingDb::unit_member(self)
    }
    fn frozen_window(&self) -> Result<Option<FrozenWindow>> {
        HoldingDb::frozen_window(self)
    }
    fn frozen_written(&self, window: &FrozenWindow) -> Result<HeldWrite> {
        HoldingDb::frozen_written(self, window)
    }
}

/// A prefetch session reads through the holding database (held writes are seen) and checks
/// its observations against the write generations (ADR 0010).
impl<D: Db + 'static> PrefetchSource for HoldingDb<D> {
    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        Db::get_many(self, keys)
    }
    fn generation(&self) -> u64 {
        self.generations.generation()
    }
    fn written_since(&self, key: &[u8], since: u64) -> bool {
        self.generations.written_since(key, since)
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

    /// The open-overlay read sees the open overlay alone: its puts and deletes, the
    /// overlay's own bytes; a key only in the frozen window or only on disk reads `None`
    /// (planted: reading through the frozen window, as `get_many_through` does, fails on
    /// "f"), and so does every key when not holding.
    #[test]
    fn the_open_overlay_read_sees_the_open_overlay_alone() {
        let d = db();
        put(&d, "disk", "0");
        assert_eq!(d.get_many_open(&[b"disk"]).unwrap(), vec![None]);
        d.hold().unwrap();
        put(&d, "f", "1");
        d.freeze().unwrap();
        put(&d, "o", "2");
        let mut del = Batch::new();
        del.delete(&b"disk"[..]);
        d.write(&del, Durability::Synced).unwrap();
        let read = d.get_many_open(&[b"o", b"disk", b"f", b"absent"]).unwrap();
        assert_eq!(
            read,
            vec![Some(Some(Bytes::from_static(b"2"))), Some(None), None, None]
        );
        let through = d.get(b"o").unwrap().unwrap();
        let open = read[0].clone().flatten().unwrap();
        assert_eq!(
            open.as_ptr(),
            through.as_ptr(),
            "the overlay's bytes, not a copy"
        );
        assert_eq!(d.get(b"f").unwrap().unwrap(), &b"1"[..], "frozen, readable");
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

    #[test]
    fn a_frozen_window_is_read_between_the_overlay_and_the_disk_until_written() {
        let d = db();
        for k in ["a", "c", "e", "g"] {
            put(&d, k, "disk");
        }
        d.hold().unwrap();
        put(&d, "b", "frozen");
        put(&d, "c", "frozen");
        let mut del = Batch::new();
        del.delete(&b"e"[..]);
        d.write(&del, Durability::Synced).unwrap();
        let frozen = d.freeze().unwrap();
        assert_eq!(frozen.ops, 3);
        assert_eq!(d.held_bytes(), 0, "the overlay is empty after a freeze");
        assert_eq!(d.frozen_bytes(), 1 + 6 + 1 + 6 + 1);
        // Later writes go to a new overlay and shadow the frozen window.
        put(&d, "c", "active");
        put(&d, "e", "active");
        let mut del = Batch::new();
        del.delete(&b"g"[..]);
        d.write(&del, Durability::Synced).unwrap();
        let want = [
            ("a", "disk"),
            ("b", "frozen"),
            ("c", "active"),
            ("e", "active"),
        ];
        let read = |dir| -> Vec<(String, String)> {
            collect_range(&d, KeyRange::all(), dir)
                .unwrap()
                .into_iter()
                .map(|(k, v)| {
                    (
                        String::from_utf8(k.to_vec()).unwrap(),
                        String::from_utf8(v.to_vec()).unwrap(),
                    )
                })
                .collect()
        };
        let fwd: Vec<_> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(read(Direction::Forward), fwd);
        let mut rev = fwd.clone();
        rev.reverse();
        assert_eq!(read(Direction::Reverse), rev);
        assert_eq!(d.get(b"b").unwrap().unwrap(), &b"frozen"[..]);
        assert_eq!(d.get(b"c").unwrap().unwrap(), &b"active"[..]);
        assert_eq!(d.get_durable(b"b").unwrap(), None, "frozen is not durable");
        assert!(
            matches!(d.freeze(), Err(Error::InvalidInput(_))),
            "one window in flight"
        );
        let synced = d.inner().counts().synced_batches;
        let w = d.write_frozen().unwrap();
        assert_eq!((w.ops, d.inner().counts().synced_batches), (3, synced + 1));
        assert_eq!(d.frozen_bytes(), 0);
        assert_eq!(d.get_durable(b"b").unwrap().unwrap(), &b"frozen"[..]);
        assert_eq!(
            d.get_durable(b"e").unwrap(),
            None,
            "the frozen delete is on disk"
        );
        assert_eq!(
            read(Direction::Forward),
            fwd,
            "reads unchanged by the write"
        );
        assert_eq!(
            d.write_frozen().unwrap(),
            HeldWrite::default(),
            "nothing frozen"
        );
    }

    #[test]
    fn a_failed_frozen_write_poisons_and_keeps_the_window() {
        use crate::testing::{FailAfter, FailingDb};
        let d = HoldingDb::new(FailingDb::new(MemoryDb::new("t"), FailAfter::new(0)));
        d.hold().unwrap();
        put(&d, "k", "v");
        d.freeze().unwrap();
        assert!(d.write_frozen().is_err());
        assert!(d.is_poisoned());
        assert_eq!(d.frozen_bytes(), 2, "the window is kept");
        assert!(matches!(d.get(b"k"), Err(Error::Poisoned { .. })));
    }

    /// A failed write puts the window back under the overlay with its memory as it was, the
    /// replaced values still in its chunks counted, also when the window is shared (a
    /// unit's writer still holds it) and is duplicated rather than taken back (planted:
    /// the duplicate's replaced bytes dropped — the mutant `delete field replaced_bytes`
    /// in `Overlay::duplicate`, missed before this test).
    #[test]
    fn a_window_put_back_after_a_failed_write_keeps_its_memory_even_when_shared() {
        use crate::testing::{FailAfter, FailingDb};
        for shared in [false, true] {
            let d = HoldingDb::new(FailingDb::new(MemoryDb::new("t"), FailAfter::new(0)));
            d.hold().unwrap();
            put(&d, "k", "first");
            put(&d, "k", "second");
            put(&d, "j", "v");
            let before = d.held_memory();
            assert!(
                before > 6 + 1 + 2 + 2 * crate::node::HELD_KEY_BYTES,
                "the replaced value is counted: {before}"
            );
            d.freeze().unwrap();
            let writer = shared.then(|| d.frozen_window().unwrap().expect("frozen"));
            assert!(d.write_frozen().is_err());
            d.unfreeze();
            assert_eq!(d.held_memory(), before, "shared: {shared}");
            assert_eq!(d.held_keys(), 2);
            drop(writer);
        }
    }

    /// The window's key order is the bytes' order, for keys that tie on their first 16
    /// bytes, keys that begin others, zero bytes and empty keys: checked against a plain
    /// sort of the same keys, written independently of the prefix sort.
    #[test]
    fn settled_positions_follow_the_keys_byte_order() {
        fn check(raw: Vec<Vec<u8>>) -> bool {
            let mut o = Overlay::default();
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
        let mut o = Overlay::default();
        o.put(&Bytes::from(b), None);
        o.put(&a, None);
        assert_eq!(
            *o.sorted_positions(),
            vec![1, 0],
            "the shorter-valued key sorts first"
        );
        assert_ne!(*o.sorted_positions(), vec![0, 1]);
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
