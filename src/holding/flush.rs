//! The flush side of a [`HoldingDb`]: freezing the open window, writing the frozen window
//! (alone, or handed out as a [`FrozenWindow`] for a unit with other databases' windows),
//! and the [`HeldStore`] a flush thread drives.
//!
//! Invariant: a frozen window is dropped only after its batch (or the caller's unit)
//! returned `Ok`; until then reads see it. On `Err` the database is poisoned and the window
//! kept.
//! Invariant: one window is written at a time (`flush_lock`), and a window is never
//! replaced while it is being written (`freeze` takes `write_lock`).
//! Invariant: this file decides nothing about *when* to flush (that is the node's
//! `deferred`).

use std::sync::Arc;

use super::HoldingDb;
use super::window::Window;
use crate::db::{Db, Durability, EntryRef, UnitMember};
use crate::error::{Error, Result};

/// What a `write_held` call wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HeldWrite {
    /// Ops in the synced batch (0: nothing was held, nothing was written).
    pub ops: u64,
    /// Key and value bytes in it.
    pub bytes: u64,
}

impl<D: Db> HoldingDb<D> {
    /// Writes the open window as one `Synced` batch, then drops it.
    ///
    /// `Ok`: every held write is durable and the window is empty. With nothing held, nothing
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

    /// Puts a frozen window whose write failed back under the open window (later writes
    /// win), so a failed `write_held` keeps its writes where they were held.
    pub(super) fn unfreeze(&self) {
        self.windows.unfreeze();
    }

    /// Moves the open window to the frozen window, so a flush can write it while later
    /// writes start a new open window. Reads keep seeing it until
    /// [`HoldingDb::write_frozen`] returned `Ok`. Returns what was frozen (nothing held:
    /// nothing frozen).
    ///
    /// At most one window is in flight: freezing while a frozen window is still unwritten
    /// returns `Error::InvalidInput` and changes nothing (the node waits for the window
    /// before freezing the next one).
    pub fn freeze(&self) -> Result<HeldWrite> {
        let _w = self.write_lock.lock().expect("write lock");
        self.poison.check(self.inner.name())?;
        self.windows.freeze(self.inner.name())
    }

    /// Writes the frozen window as one `Synced` batch, then drops it. Callable from any
    /// thread while writes go on into the new open window.
    ///
    /// `Ok`: the window is durable (nothing frozen: nothing written, no fsync). `Err`: the
    /// batch may or may not be durable; the database is poisoned and the window is kept.
    pub fn write_frozen(&self) -> Result<HeldWrite> {
        let _f = self.flush_lock.lock().expect("flush lock");
        self.poison.check(self.inner.name())?;
        let Some(window) = self.windows.frozen() else {
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
        self.windows.drop_frozen();
        Ok(HeldWrite {
            ops: keys.len() as u64,
            bytes: window.held_bytes(),
        })
    }

    /// The database beneath's place in a unit group ([`Db::unit_group`]), if it has one.
    pub fn unit_member(&self) -> Option<UnitMember> {
        self.inner.unit_group()
    }

    /// The frozen window, shared (no copy), for a caller that writes it in a unit with
    /// other databases' windows ([`crate::db::UnitGroup::write_unit`], ADR 0011) instead of
    /// [`HoldingDb::write_frozen`]. `Ok(None)`: nothing is frozen. The window stays frozen
    /// (readable) until [`HoldingDb::frozen_written`].
    pub fn frozen_window(&self) -> Result<Option<FrozenWindow>> {
        self.poison.check(self.inner.name())?;
        let Some(window) = self.windows.frozen() else {
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
        // Crash: the caller's unit returned `Ok`: the window is durable beneath.
        if self.windows.drop_frozen_if(&window.window) {
            Ok(window.written())
        } else {
            Err(Error::InvalidInput(format!(
                "{}: frozen_written with a window that is not the frozen one",
                self.inner.name()
            )))
        }
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
    window: Arc<Window>,
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
            bytes: self.window.held_bytes(),
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
