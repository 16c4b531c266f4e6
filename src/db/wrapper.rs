//! [`DbWrapper`]: a [`Db`] that wraps another and writes only the methods it changes.
//!
//! Invariant: every method a wrapper does not write forwards to the wrapped database,
//! except the two whose forwarding would let writes bypass a wrapper that changes
//! [`DbWrapper::write`]: [`DbWrapper::write_entries`] goes through the wrapper's own
//! `write`, and [`DbWrapper::unit_group`] is `None`. A wrapper that changes no write (`Arc`,
//! `Box`) writes those two as forwards.
//! Invariant: the trait's functions take `this: &Self`, not `&self`: they are never found by
//! method-call syntax, so importing the trait makes no call `x.get(key)` or `x.inner()`
//! ambiguous or resolve differently.

use std::fmt::Debug;
use std::sync::Arc;

use bytes::Bytes;

use super::{Batch, Db, DbIter, Direction, Durability, EntryRef, KeyRange, UnitMember};
use crate::error::Result;

/// A database that wraps another and changes some of its behaviour: implement this instead
/// of [`Db`] (every `DbWrapper` is a `Db`) and write only the functions you change.
///
/// What a function you do not write does:
///
/// | function | default |
/// |---|---|
/// | `name`, `get`, `contains`, `get_many`, `range`, `disk_size_bytes` | forwards to [`DbWrapper::inner`] |
/// | `write` | forwards to [`DbWrapper::inner`] |
/// | `write_entries` | builds a batch and calls the wrapper's own `write` (as [`Db::write_entries`]'s default) |
/// | `unit_group` | `None`: the wrapper writes alone (as [`Db::unit_group`]'s default) |
///
/// So a wrapper that changes writes (counting, recording, fault injection) writes `write`
/// alone and sees every write, flush points included; it writes `write_entries` too only to
/// keep the backend's batch-free path. A wrapper that changes reads writes every read it
/// changes — `get`, `contains` and `get_many` forward separately. A wrapper that changes
/// nothing about writes may forward `write_entries` and `unit_group` too, as the `Arc` and
/// `Box` impls do.
///
/// The functions take `this: &Self` rather than `&self`, so importing this trait never makes
/// a method call on a wrapper ambiguous between it and [`Db`]:
///
/// ```
/// use flushpoint::{Batch, Db, DbWrapper, Durability, MemoryDb, Result};
///
/// /// Downgrades every write to `Buffered`.
/// #[derive(Debug)]
/// struct Unsynced(MemoryDb);
///
/// impl DbWrapper for Unsynced {
///     type Inner = MemoryDb;
///     fn inner(this: &Self) -> &MemoryDb {
///         &this.0
///     }
///     fn write(this: &Self, batch: &Batch, _durability: Durability) -> Result<()> {
///         this.0.write(batch, Durability::Buffered)
///     }
/// }
///
/// let db = Unsynced(MemoryDb::new("app"));
/// let mut batch = Batch::new();
/// batch.put(&b"k"[..], &b"v"[..]);
/// db.write(&batch, Durability::Synced)?;
/// assert_eq!(db.name(), "app");
/// assert_eq!(db.get(b"k")?.as_deref(), Some(&b"v"[..]));
/// # Ok::<(), flushpoint::Error>(())
/// ```
pub trait DbWrapper: Send + Sync + Debug {
    /// The database wrapped.
    type Inner: Db + ?Sized;

    /// The database wrapped, that every function not written forwards to.
    fn inner(this: &Self) -> &Self::Inner;

    /// See [`Db::name`]. Forwards.
    fn name(this: &Self) -> &str {
        Self::inner(this).name()
    }

    /// See [`Db::get`]. Forwards.
    fn get(this: &Self, key: &[u8]) -> Result<Option<Bytes>> {
        Self::inner(this).get(key)
    }

    /// See [`Db::contains`]. Forwards (not through the wrapper's `get`).
    fn contains(this: &Self, key: &[u8]) -> Result<bool> {
        Self::inner(this).contains(key)
    }

    /// See [`Db::get_many`]. Forwards (not through the wrapper's `get`), so the backend
    /// reads every key from one snapshot.
    fn get_many(this: &Self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        Self::inner(this).get_many(keys)
    }

    /// See [`Db::range`]. Forwards.
    fn range(this: &Self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>> {
        Self::inner(this).range(range, direction)
    }

    /// See [`Db::write`]. Forwards.
    fn write(this: &Self, batch: &Batch, durability: Durability) -> Result<()> {
        Self::inner(this).write(batch, durability)
    }

    /// See [`Db::write_entries`]. Builds a batch and calls the wrapper's own
    /// [`DbWrapper::write`], so a wrapper that changes `write` sees these writes too.
    fn write_entries<'a>(
        this: &Self,
        entries: &mut dyn Iterator<Item = EntryRef<'a>>,
        durability: Durability,
    ) -> Result<()> {
        Self::write(this, &Batch::from_entries(entries), durability)
    }

    /// See [`Db::disk_size_bytes`]. Forwards.
    fn disk_size_bytes(this: &Self) -> Result<u64> {
        Self::inner(this).disk_size_bytes()
    }

    /// See [`Db::unit_group`]. `None`: a unit written to the wrapped database's group would
    /// bypass the wrapper.
    fn unit_group(this: &Self) -> Option<UnitMember> {
        let _ = this;
        None
    }
}

/// Every wrapper is a database, through its [`DbWrapper`] functions.
impl<W: DbWrapper> Db for W {
    fn name(&self) -> &str {
        W::name(self)
    }
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        W::get(self, key)
    }
    fn contains(&self, key: &[u8]) -> Result<bool> {
        W::contains(self, key)
    }
    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        W::get_many(self, keys)
    }
    fn range(&self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>> {
        W::range(self, range, direction)
    }
    fn write(&self, batch: &Batch, durability: Durability) -> Result<()> {
        W::write(self, batch, durability)
    }
    fn write_entries<'a>(
        &self,
        entries: &mut dyn Iterator<Item = EntryRef<'a>>,
        durability: Durability,
    ) -> Result<()> {
        W::write_entries(self, entries, durability)
    }
    fn disk_size_bytes(&self) -> Result<u64> {
        W::disk_size_bytes(self)
    }
    fn unit_group(&self) -> Option<UnitMember> {
        W::unit_group(self)
    }
}

/// A shared database is the database: every function forwards, writes and the unit group
/// included.
impl<T: Db + ?Sized> DbWrapper for Arc<T> {
    type Inner = T;
    fn inner(this: &Self) -> &T {
        this
    }
    fn write_entries<'a>(
        this: &Self,
        entries: &mut dyn Iterator<Item = EntryRef<'a>>,
        durability: Durability,
    ) -> Result<()> {
        (**this).write_entries(entries, durability)
    }
    fn unit_group(this: &Self) -> Option<UnitMember> {
        (**this).unit_group()
    }
}

/// A boxed database is the database: every function forwards, writes and the unit group
/// included.
impl<T: Db + ?Sized> DbWrapper for Box<T> {
    type Inner = T;
    fn inner(this: &Self) -> &T {
        this
    }
    fn write_entries<'a>(
        this: &Self,
        entries: &mut dyn Iterator<Item = EntryRef<'a>>,
        durability: Durability,
    ) -> Result<()> {
        (**this).write_entries(entries, durability)
    }
    fn unit_group(this: &Self) -> Option<UnitMember> {
        (**this).unit_group()
    }
}
