//! The read paths of a [`HoldingDb`]: through the held windows to the disk (what
//! [`Db::get`], [`Db::get_many`] and [`Db::range`] return), below the open window, the open
//! window alone, and the disk alone.
//!
//! Invariant: a read through the windows sees the open window, then the frozen window, then
//! the disk; a held delete hides the disk's value. Durable reads see the disk only.
//! Invariant: the windows are read before the disk: a window dropped in between is already
//! on disk (it is dropped only after its batch returned `Ok`), so no write is missed.
//! Invariant: every read fails once the database is poisoned.

use bytes::Bytes;

use super::HoldingDb;
use crate::db::{Db, DbIter, Direction, KeyRange, MergeOver};
use crate::error::Result;

impl<D: Db> HoldingDb<D> {
    /// `key` through the held windows, then the disk ([`Db::get`]).
    pub(super) fn get_through(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.poison.check(self.inner.name())?;
        if let Some(v) = self.windows.get(key) {
            return Ok(v);
        }
        // Crash: none. A window dropped between the check above and this read is already in
        // the disk's committed state (it is dropped only after its batch returned `Ok`).
        self.inner.get(key)
    }

    /// The pairs in `range` through the held windows: the open window merged over the
    /// frozen one merged over the disk ([`Db::range`]).
    pub(super) fn range_through(
        &self,
        range: KeyRange,
        direction: Direction,
    ) -> Result<DbIter<'_>> {
        self.poison.check(self.inner.name())?;
        let (open, frozen) = if range.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            self.windows.range(&range, direction)
        };
        // The disk iterator is opened after the held entries were copied: a window written
        // in between is then in both, and the held copy (the same value) wins.
        let disk = self.inner.range(range, direction)?;
        Ok(match (open.is_empty(), frozen.is_empty()) {
            (true, true) => disk,
            (false, true) => Box::new(MergeOver::new(open.into_iter(), disk, direction)),
            (true, false) => Box::new(MergeOver::new(frozen.into_iter(), disk, direction)),
            (false, false) => {
                let below = MergeOver::new(frozen.into_iter(), disk, direction);
                Box::new(MergeOver::new(open.into_iter(), below, direction))
            }
        })
    }

    /// Reads `keys` as they stood when the open window began: the frozen window (if one is
    /// in flight), then the disk — the open window's writes are skipped. One snapshot of
    /// the disk for all of them.
    pub fn get_many_below_open(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        self.get_many_through(keys, false)
    }

    /// Reads `keys` from the open window alone: per key, `Some` with what the window holds
    /// for it (`Some(None)`: a delete) or `None` when the window has not written it. No
    /// frozen window and no disk is read, and the values are the window's own (no copy).
    /// All `None` when not holding.
    pub fn get_many_open(&self, keys: &[&[u8]]) -> Result<Vec<Option<Option<Bytes>>>> {
        self.poison.check(self.inner.name())?;
        Ok(self.windows.get_open(keys))
    }

    /// `keys` through the held windows — the open window when `open`, then the frozen
    /// window — and the disk for the rest, in one `get_many` of the inner database.
    pub(super) fn get_many_through(
        &self,
        keys: &[&[u8]],
        open: bool,
    ) -> Result<Vec<Option<Bytes>>> {
        self.poison.check(self.inner.name())?;
        let (mut out, missed) = self.windows.get_many(keys, open);
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
