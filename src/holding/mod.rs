//! Holding: writes held in memory over any [`Db`] — the *open window* — and written at
//! flush points, while a read sees them merged over the disk.
//!
//! By role, each type owning its state:
//!
//! | file | type | role |
//! |---|---|---|
//! | `mod.rs` | [`HoldingDb`] | the façade: the database beneath, the poison latch, the locks that order writes, freezes and flushes; the [`Db`] impl |
//! | `window.rs` | `Window` | one window's entries, their hash index and key order, its memory |
//! | `chunks.rs` | `Chunks` | where a window copies its short keys and values |
//! | `held.rs` | `HeldWindows` | the holding flag, the open window and the frozen one, under their lock |
//! | `flush.rs` | [`FrozenWindow`], [`HeldStore`] | freezing and writing a window, alone or in a unit |
//! | `read.rs` | — | the read paths: through the windows, below the open one, durable |
//! | `generations.rs` | `WriteGenerations` | what a prefetch session checks its reads against |
//!
//! Words, here and in the node and the journal:
//! * **window**: the writes held since the last flush point, made durable together at the
//!   next one: one database's as one synced batch, or the block store's, the state's and
//!   the app's as one journal unit. The node's window is blocks F+1..F′ across its
//!   databases; the journal calls it a *flush window*.
//! * **open window**: the window new writes land in. **frozen window**: a window `freeze`
//!   set aside for its write (at most one; [`FrozenWindow`] is its handle); reads see it
//!   until it is durable. **window in flight**: the node's frozen windows while its flush
//!   thread writes them (at most one).
//! * **held**: in a window (open or frozen), not yet written — held writes, the node's held
//!   events (fired once their window is durable); [`HoldingDb::held_bytes`] counts the open
//!   window's.
//! * **unit**: the journal's record of one write (ADR 0011) — a window at a flush point, a
//!   block in consensus — one append, synced once.
//! * Not the window: *deferred writes* is the mechanism as a whole (ADR 0002; the node's
//!   `DeferredWrites` is its flush policy and counters); a *batch* is one `Db` write; a
//!   window's *chunks* are the memory its short keys and values are copied into; *write
//!   generations* are what prefetch checks reads against. *Overlay* names a read's view of
//!   the held windows merged over the disk (the model of `tests/db/holding_model.rs`); the
//!   journal's overlay is its durable units not yet applied.
//!
//! Invariant: not holding, every call passes through with the caller's durability.
//! Invariant: holding, writes land in the open window only (last write per key wins,
//! deletes are tombstones); `held_bytes` is exactly the key and value bytes it holds.
//! Invariant: reads (`get`, `range` in both directions) see the open window merged over the
//! disk; `get_durable` / `range_durable` see the disk only.
//! Invariant: `write_held` writes the whole open window as one `Synced` batch and drops it
//! only after that returned `Ok`; on `Err` the database is poisoned — every later call
//! fails until a restart, whose handshake is the way back.
//! Invariant: a flush can run beside new writes: `freeze` moves the open window to the
//! *frozen* window (at most one), later writes start a new open window, and `write_frozen`
//! (from any thread) writes the frozen window as one `Synced` batch and drops it only after
//! `Ok`. Reads see the open window, then the frozen window, then the disk; durable reads
//! see the disk.
//! Invariant: this module decides nothing about *when* to flush (that is `deferred`).
//! Invariant: every `write` bumps the write generation of each key it wrote (by bucket)
//! *after* the write is visible to reads, whether it was held or passed through, and even
//! when it failed; freezing and writing a window change no value a read sees and bump
//! nothing. Prefetch sessions rely on it (ADR 0010): a value read after `generation()`
//! returned `g` is stale only if `written_since(key, g)`.

mod chunks;
mod flush;
mod generations;
mod held;
mod read;
mod window;

#[cfg(test)]
mod tests;

pub use flush::{FrozenWindow, HeldStore, HeldWrite};

use std::sync::Mutex;

use bytes::Bytes;

use crate::db::{Batch, Db, DbIter, Direction, Durability, KeyRange};
use crate::error::Result;
use crate::poison::Poison;
use generations::WriteGenerations;
use held::HeldWindows;

/// The memory a held key takes beyond its key and value bytes, as the flush trigger counts
/// it. Why 96: the window's entry (two `Bytes`, 64 B) and its hash and key-order slots
/// (~10 B), with the slack of a vector grown by doubling (about 98 B per key in a
/// database's first window of 100,000 keys; a later window starts at the size of the one
/// before); a short key and value are copied into the window's chunks, with no allocation
/// of their own (`tests/held_memory.rs` counts it with a counting allocator). A light
/// block's keys carry ~140 B of key and value each: without this charge a light window
/// could take about twice the memory the cap counts.
pub const HELD_KEY_BYTES: u64 = 96;

/// A database whose writes can be held in memory and written at flush points.
#[derive(Debug)]
pub struct HoldingDb<D> {
    inner: D,
    /// The holding flag, the open window and the frozen window.
    windows: HeldWindows,
    /// Serializes writers and flushes of the frozen window against `freeze`, so a window is
    /// never replaced while it is being written.
    write_lock: Mutex<()>,
    /// Held by `write_frozen` for the whole synced write: one window written at a time.
    flush_lock: Mutex<()>,
    poison: Poison,
    /// Bumped after every write; read by prefetch sessions ([`crate::PrefetchSource`]).
    generations: WriteGenerations,
}

impl<D: Db> HoldingDb<D> {
    /// Wraps `inner`, not holding.
    pub fn new(inner: D) -> Self {
        HoldingDb {
            inner,
            windows: HeldWindows::default(),
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
        self.windows.hold();
        Ok(())
    }

    /// Stops holding; nothing may be held or frozen (take a flush point first).
    ///
    /// With writes held or a window frozen it refuses with [`crate::Error::Contract`] (the
    /// keys held) and keeps holding them: stopping would drop writes a caller was promised.
    pub fn stop_holding(&self) -> Result<()> {
        self.poison.check(self.inner.name())?;
        self.windows.stop_holding()
    }

    /// True while writes are held.
    pub fn is_holding(&self) -> bool {
        self.windows.is_holding()
    }

    /// Exact key and value bytes held in the open window (a frozen window not included).
    pub fn held_bytes(&self) -> u64 {
        self.windows.open_bytes()
    }

    /// Key and value bytes of the frozen window being written (0 when none).
    pub fn frozen_bytes(&self) -> u64 {
        self.windows.frozen_bytes()
    }

    /// The memory the open window takes, as the flush trigger counts it
    /// ([`crate::FlushPolicy`]): its key and value bytes, the bytes of short values it
    /// replaced (still in its chunks), and [`crate::holding::HELD_KEY_BYTES`] per key.
    pub fn held_memory(&self) -> u64 {
        self.windows.open_memory()
    }

    /// Keys held in the open window.
    pub fn held_keys(&self) -> usize {
        self.windows.open_keys()
    }

    /// True once a write failed.
    pub fn is_poisoned(&self) -> bool {
        self.poison.is_set()
    }
}

impl<D: Db> Db for HoldingDb<D> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.get_through(key)
    }

    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        self.get_many_through(keys, true)
    }

    fn range(&self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>> {
        self.range_through(range, direction)
    }

    fn write(&self, batch: &Batch, durability: Durability) -> Result<()> {
        let _w = self.write_lock.lock().expect("write lock");
        self.poison.check(self.inner.name())?;
        let held = self.windows.apply(batch, self.inner.name());
        let written = if held {
            Ok(())
        } else {
            self.inner.write(batch, durability)
        };
        // Ordering: bump only now that the write is visible (held: the windows' lock was
        // released; passed through: the backend returned). Moved before the apply, a
        // prefetch read could load the new generation, then read the old value, and keep it
        // as current (`tests/node/prefetch_never_stale.rs`, `tests/loom_prefetch.rs`). Bumped on
        // `Err` too: the batch may be on disk, and nothing retained may outlive that doubt.
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
