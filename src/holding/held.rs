//! [`HeldWindows`]: whether writes are held, the open window they land in, and the frozen
//! window a flush is writing — under one lock, which this type alone takes.
//!
//! Invariant: at most one frozen window; a freeze with one still frozen changes nothing.
//! Invariant: a read through the windows sees the open window, then the frozen one, of one
//! moment (one lock acquisition per call).
//! Invariant: not holding, nothing is frozen when a write passes through (asserted).
//! Invariant: no I/O and no poison: the caller ([`super::HoldingDb`]) writes and decides.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use bytes::Bytes;

use super::HeldWrite;
use super::window::Window;
use crate::db::{Batch, Direction, KeyRange, OverlayEntry};
use crate::error::{Error, Result};
use crate::sync::RwLock;

/// What the lock guards.
#[derive(Debug, Default)]
struct Held {
    holding: bool,
    /// Writes since the last `freeze` (or since holding started).
    open: Window,
    /// The window a flush is writing: readable until its batch returned `Ok`.
    frozen: Option<Arc<Window>>,
}

/// The held windows and the holding flag, under one lock.
#[derive(Debug, Default)]
pub(super) struct HeldWindows(RwLock<Held>);

impl HeldWindows {
    fn read(&self) -> impl Deref<Target = Held> + '_ {
        self.0.read().expect("held lock")
    }

    fn write(&self) -> impl DerefMut<Target = Held> + '_ {
        self.0.write().expect("held lock")
    }

    /// Starts holding writes.
    pub(super) fn hold(&self) {
        self.write().holding = true;
    }

    /// Stops holding; refused with [`Error::Contract`] (the keys held) while the open window
    /// or a frozen one holds anything.
    pub(super) fn stop_holding(&self) -> Result<()> {
        let mut h = self.write();
        if !h.open.is_empty() || h.frozen.is_some() {
            let keys = h.open.len() + h.frozen.as_ref().map_or(0, |f| f.len());
            return Err(Error::Contract {
                what: "keys held at HoldingDb::stop_holding (write them first)",
                expected: 0,
                found: keys as u64,
            });
        }
        h.holding = false;
        Ok(())
    }

    pub(super) fn is_holding(&self) -> bool {
        self.read().holding
    }

    /// Key and value bytes of the open window.
    pub(super) fn open_bytes(&self) -> u64 {
        self.read().open.held_bytes()
    }

    /// Key and value bytes of the frozen window (0 when none).
    pub(super) fn frozen_bytes(&self) -> u64 {
        self.read().frozen.as_ref().map_or(0, |f| f.held_bytes())
    }

    /// The open window's memory as the flush trigger counts it ([`Window::memory`]).
    pub(super) fn open_memory(&self) -> u64 {
        self.read().open.memory()
    }

    /// Keys in the open window.
    pub(super) fn open_keys(&self) -> usize {
        self.read().open.len()
    }

    /// Holding: applies `batch` to the open window and returns `true`. Not holding: returns
    /// `false` (the caller writes it through), after asserting that nothing is frozen.
    pub(super) fn apply(&self, batch: &Batch, name: &str) -> bool {
        let mut h = self.write();
        if h.holding {
            for op in batch.ops() {
                h.open.apply(op);
            }
            true
        } else {
            assert!(
                h.frozen.is_none(),
                "invariant: no write passes a frozen window of {name} to the disk"
            );
            false
        }
    }

    /// Moves the open window to the frozen one and starts a new open window; returns what
    /// was frozen (nothing held: nothing frozen). `Error::InvalidInput`, nothing changed:
    /// a frozen window is still unwritten.
    pub(super) fn freeze(&self, name: &str) -> Result<HeldWrite> {
        let mut h = self.write();
        if h.frozen.is_some() {
            return Err(Error::InvalidInput(format!(
                "{name}: a frozen window is still being written; write it before freezing another"
            )));
        }
        if h.open.is_empty() {
            return Ok(HeldWrite::default());
        }
        let keys = h.open.len();
        let window = std::mem::replace(&mut h.open, Window::with_capacity(keys));
        let frozen = HeldWrite {
            ops: window.len() as u64,
            bytes: window.held_bytes(),
        };
        h.frozen = Some(Arc::new(window));
        Ok(frozen)
    }

    /// Puts the frozen window back under the open one (later writes win): its write failed.
    /// A window still shared (a unit's writer holds it) is duplicated, not taken back.
    pub(super) fn unfreeze(&self) {
        let mut h = self.write();
        let Some(window) = h.frozen.take() else {
            return;
        };
        let window = Arc::try_unwrap(window).unwrap_or_else(|shared| shared.duplicate());
        let newer = std::mem::replace(&mut h.open, window);
        h.open.put_all(newer);
    }

    /// The frozen window, shared.
    pub(super) fn frozen(&self) -> Option<Arc<Window>> {
        self.read().frozen.clone()
    }

    /// Drops the frozen window. Call only once it is durable beneath: reads then fall
    /// through to the disk.
    pub(super) fn drop_frozen(&self) {
        self.write().frozen = None;
    }

    /// Drops the frozen window if it is `window` (and returns `true`); else changes nothing.
    /// Call only once `window` is durable beneath.
    pub(super) fn drop_frozen_if(&self, window: &Arc<Window>) -> bool {
        let mut h = self.write();
        match &h.frozen {
            Some(f) if Arc::ptr_eq(f, window) => {
                h.frozen = None;
                true
            }
            _ => false,
        }
    }

    /// The held write to `key`, the open window's before the frozen one's: `Some(Some(v))`
    /// a put, `Some(None)` a delete, `None` when neither holds it.
    pub(super) fn get(&self, key: &[u8]) -> Option<Option<Bytes>> {
        let h = self.read();
        h.open
            .get(key)
            .or_else(|| h.frozen.as_ref().and_then(|f| f.get(key)))
            .cloned()
    }

    /// Per key, what the open window alone holds for it (`None`: not written there).
    pub(super) fn get_open(&self, keys: &[&[u8]]) -> Vec<Option<Option<Bytes>>> {
        let h = self.read();
        keys.iter().map(|key| h.open.get(key).cloned()).collect()
    }

    /// Per key, the held value — through the open window when `open`, then the frozen one —
    /// and the positions of the keys neither holds (their value, `None` here, is the
    /// disk's).
    pub(super) fn get_many(&self, keys: &[&[u8]], open: bool) -> (Vec<Option<Bytes>>, Vec<usize>) {
        let mut out: Vec<Option<Bytes>> = Vec::with_capacity(keys.len());
        let mut missed: Vec<usize> = Vec::new();
        let h = self.read();
        for (i, key) in keys.iter().enumerate() {
            let held = open
                .then(|| h.open.get(key))
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
        (out, missed)
    }

    /// The open window's and the frozen window's entries in `range`, each in `direction`
    /// order (copies of the windows' `Bytes`).
    pub(super) fn range(
        &self,
        range: &KeyRange,
        direction: Direction,
    ) -> (Vec<OverlayEntry>, Vec<OverlayEntry>) {
        let h = self.read();
        let open = h.open.range(range, direction);
        let frozen = h
            .frozen
            .as_ref()
            .map(|f| f.range(range, direction))
            .unwrap_or_default();
        (open, frozen)
    }
}
